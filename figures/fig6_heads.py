"""Figure 6: the trained model's heads against the laws, read from the per-head JSON that
`python forget.py --json figures/heads.json` writes. Skipped (never invented) when the JSON is absent."""
import json
import os

import matplotlib.pyplot as plt
import numpy as np

import figstyle
from figstyle import Skip


def _ci(h):
    """slope_ci as (lo, hi); a single number is read as a half-width."""
    ci = h.get("slope_ci")
    if ci is None or (isinstance(ci, list) and None in ci):
        return h["slope"], h["slope"]
    if isinstance(ci, (int, float)):
        return h["slope"] - ci, h["slope"] + ci
    return float(ci[0]), float(ci[1])


def _arr(v):
    """A JSON list as floats, null (e.g. a censored entry) as NaN."""
    return np.array([np.nan if x is None else float(x) for x in v])


def make(ctx):
    path = ctx.heads_json
    if not os.path.exists(path):
        rel = os.path.relpath(path)
        raise Skip(f"{rel} not found (write it with `python forget.py --json {rel}`)")
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema_version") is not None:
        raise Skip(f"{path} is a per-head result of schema {doc['schema_version']}: figure 6 draws the earlier "
                   "slope verdict; figure 10 (the report's overview) draws this one")
    heads = doc.get("heads") or []
    if not heads:
        raise Skip(f"{path} has no 'heads' entries")
    verdicts = sorted({str(h.get("verdict")) for h in heads})
    fixed = {"law holds": "tab:green", "law false": "tab:red", "pre-asymptotic": "tab:blue",
             "undetermined": "tab:gray", "iid law holds": "tab:green", "autocorrelation-adjusted law holds": "tab:blue",
             "document-mixture law holds": "tab:orange", "falsified": "tab:red"}
    vcol = {v: plt.matplotlib.colors.to_rgba(fixed[v]) if v in fixed else plt.cm.tab10(5 + i % 5)
            for i, v in enumerate(verdicts)}
    fig, axs = plt.subplots(2, 2, figsize=(12.5, 10))
    ag, asl, amn, adm = axs.ravel()

    # (a) falsifier grid: verdict per (layer, head), kappa written in each cell
    nl = max(h["layer"] for h in heads) + 1
    nh = max(h["head"] for h in heads) + 1
    grid = np.full((nl, nh), np.nan)
    for h in heads:
        grid[h["layer"], h["head"]] = verdicts.index(str(h.get("verdict")))
        share = h.get("between_share")
        ag.text(h["head"], h["layer"], f"κ={h['kappa']:.3g}" + (f"\nbetween {share:.2f}" if share is not None else ""),
                ha="center", va="center", fontsize=7)
    cmap = plt.matplotlib.colors.ListedColormap([vcol[v] for v in verdicts])
    ag.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(verdicts) - 0.5, alpha=0.55, aspect="auto")
    ag.set_xticks(range(nh))
    ag.set_yticks(range(nl))
    ag.grid(False)
    ag.set_xlabel("head")
    ag.set_ylabel("layer")
    ag.set_title("(a) verdict per head (colour); forget rate κ (nats/token),\n"
                 "between-document share of Var[W] at ε = 1e-3")
    for v in verdicts:
        ag.plot([], [], "s", color=vcol[v], alpha=0.55, ms=9, label=v)
    ag.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="verdict")

    # (b) measured Var[W] slope in L against the iid and autocorrelation-adjusted predictions
    tested = [h for h in heads if h.get("slope") is not None]      # heads with a fitted slope
    for h in tested:
        lo, hi = _ci(h)
        c = vcol[str(h.get("verdict"))]
        asl.errorbar(h["pred_slope_lr"], h["slope"], yerr=[[h["slope"] - lo], [hi - h["slope"]]], fmt="o",
                     color=c, ms=4, capsize=2)
        asl.plot(h["pred_slope_iid"], h["slope"], "x", color=c, ms=5)
        if h.get("pred_slope_mix") is not None:
            asl.plot(h["pred_slope_mix"], h["slope"], "^", color=c, ms=5, mfc="none")
    vals = [v for h in tested for v in (h["slope"], h["pred_slope_iid"], h["pred_slope_lr"], h.get("pred_slope_mix"))
            if v is not None and v > 0]
    if not vals:
        vals = [1.0]
    lim = [min(vals) / 1.5, max(vals) * 1.5]
    asl.plot(lim, lim, "k--", lw=1, label="measured = predicted")
    asl.plot([], [], "o", color="gray", label="vs adjusted law τσ²/κ³ (with CI)")
    asl.plot([], [], "x", color="gray", label="vs iid law σ²/κ³")
    asl.plot([], [], "^", color="gray", mfc="none", label="vs document-mixture law (least-squares slope)")
    asl.set_xscale("log")
    asl.set_yscale("log")
    figstyle.plain_log(asl)
    asl.set_xlim(lim)
    asl.set_ylim(lim)
    asl.set_xlabel("predicted slope dVar[W]/dL (tokens²/nat)")
    asl.set_ylabel("measured slope dVar[W]/dL (tokens²/nat)")
    asl.set_title("(b) window variance growth per head vs the laws")
    asl.legend(loc="upper left", fontsize=8)

    # (c) measured mean window against the prediction from the head's own gates (or the mean law if absent)
    for h in heads:
        mw = _arr(h["mean_W"])
        cens = np.asarray([c or 0 for c in h.get("censored_frac", [0] * len(mw))], dtype=float) > 0
        mw = np.where(cens, np.nan, mw)                             # censored eps: a lower bound only
        if h.get("pred_mean"):
            pred = _arr(h["pred_mean"])
        else:
            L = -np.log(np.asarray(h["eps_list"], dtype=float))
            pred = L / h["kappa"] - 0.5 + h["tau"] * h["sigma2"] / (2 * h["kappa"] ** 2)
        amn.plot(pred, mw, "o-", color=vcol[str(h.get("verdict"))], ms=3, lw=0.6, alpha=0.8)
    allv = [v for h in heads for v in _arr(h["mean_W"]) if v > 0]
    lim = [max(min(allv) / 1.5, 0.1), max(allv) * 1.5]
    amn.plot(lim, lim, "k--", lw=1, label="measured = predicted")
    amn.set_xscale("log")
    amn.set_yscale("log")
    figstyle.plain_log(amn)
    amn.set_xlabel("predicted mean window (block bootstrap of the head's gates; tokens)")
    amn.set_ylabel("measured mean window E[W] (tokens)")
    amn.set_title("(c) mean window per head and ε (one line per head; uncensored ε)")
    amn.legend(loc="upper left", fontsize=8)

    # (d) decay-only window against the attention-mass window
    x = _arr([h.get("decay_window_mean") for h in heads])
    y = _arr([h.get("mass_window_mean") for h in heads])
    for xi, yi, h in zip(x, y, heads):
        cens = (h.get("decay_window_censored") or 0) > 0 or (h.get("mass_window_censored") or 0) > 0
        adm.plot(xi, yi, "o", color=vcol[str(h.get("verdict"))], ms=5, mfc="none" if cens else None)
    adm.plot([], [], "o", color="gray", mfc="none", label="censored (a lower bound)")
    ok = (x > 0) & (y > 0)
    lim = [min(x[ok].min(), y[ok].min()) / 1.5, max(x[ok].max(), y[ok].max()) * 1.5] if ok.any() else [1, 10]
    adm.plot(lim, lim, "k--", lw=1, label="equal")
    adm.set_xscale("log")
    adm.set_yscale("log")
    figstyle.plain_log(adm)
    adm.set_xlabel("decay ε-window, mean over queries (tokens)")
    adm.set_ylabel("attention-mass window, mean over queries (tokens)")
    adm.set_title("(d) decay window vs where the attention mass actually sits")
    adm.legend(loc="upper left", fontsize=8)

    fig.suptitle(f"Fig. 6  Trained FoX model: {len(heads)} heads against the window laws "
                 f"(source: {os.path.basename(path)})", y=1.0)
    fig.tight_layout()
    counts = ", ".join(f"{v}: {sum(str(h.get('verdict')) == v for h in heads)}" for v in verdicts)
    return figstyle.save(fig, ctx.out, "fig6_heads"), f"{len(heads)} heads from {path}; verdicts {counts}"
