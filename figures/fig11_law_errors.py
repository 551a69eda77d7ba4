"""Figure 11: how close each law comes, head by head, out of sample. For each model (the shipped FoX model,
results/laws/fox_heads.json, and the textgenrnn LSTM, results/laws/lstm_heads.json: `python forget.py [--traces
...] --seed 0 --json ...`; --overview-json and --lstm-json), every law's Var[W] and E[W] over the measured ones of
the held-out documents (fitted on the even documents, scored on the odd) at eps 1e-2 ... 1e-4, one point a (head,
eps) cell with a measured Var[W], coloured by the law's state there; the median marked, the lead law's stated
accuracy shaded. The picture of the score table in docs/LAWS.md: the renewal mean is right to a few percent, the
variance needs dependence, and the bootstrap (the reference) is closest."""
import math

import matplotlib.pyplot as plt
import numpy as np

import figstyle
from figstyle import Skip

EPS_LO, EPS_HI = 1e-4, 1e-2                       # the eps attention uses (the laws' summary range)
STATE_COLORS = {"holds": "tab:green", "false": "tab:red", "undetermined": "tab:orange", "not claimed": "0.6"}


def cells(res):
    """{law: ([Var ratio], [E ratio], [state])} over the (head, eps) cells of a per-head result (report.schema's
    Result) with a measured Var[W] at eps in [EPS_LO, EPS_HI]; the laws in the result's display order."""
    out = {law: ([], [], []) for law in res.laws}
    for h in res.heads:
        for rec in h.at:
            m = rec.measured
            if not (EPS_LO * 0.999 <= rec.eps <= EPS_HI * 1.001) or not m.var:
                continue
            for law, lw in rec.laws.items():
                if law not in out or lw.var is None or lw.mean is None:
                    continue
                out[law][0].append(lw.var / m.var)
                out[law][1].append(lw.mean / m.mean if m.mean else float("nan"))
                out[law][2].append(lw.state)
    return {k: v for k, v in out.items() if v[0]}


MEAN_BAND = 0.02                                  # a mean is "explained" within 2% (+ 2 SE: heads/laws.MEAN_TOL)
EDGE = (0.05, 20.0)                               # ratios beyond are drawn at the edge, as < or >
FINE = (0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)
COARSE = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)


def _strip(ax, data, lead, band, which):
    """One row a law: its ratios (which: 0 Var, 1 E) jittered, coloured by the Var[W] state on the Var panel and
    plain on the E panel (the state is a statement about the variance), the median as a bar, band shaded."""
    from matplotlib import ticker
    laws = list(data)
    rng = np.random.default_rng(0)                # jitter only
    lo, hi = np.inf, 0.0
    for i, law in enumerate(laws):
        r = np.asarray(data[law][which], dtype=np.float64)
        ok = np.isfinite(r) & (r > 0)
        if not ok.any():
            continue
        lo, hi = min(lo, max(r[ok].min(), EDGE[0])), max(hi, min(r[ok].max(), EDGE[1]))
        st = np.asarray(data[law][2])[ok]
        y = i + rng.uniform(-0.25, 0.25, ok.sum())
        rc = np.clip(r[ok], *EDGE)
        mk = np.where(r[ok] < EDGE[0], "<", np.where(r[ok] > EDGE[1], ">", "o"))
        for m in ("o", "<", ">"):
            on = mk == m
            if which == 0:
                for s, c in STATE_COLORS.items():
                    sel = on & (st == s)
                    if sel.any():
                        ax.scatter(rc[sel], y[sel], s=9 if m == "o" else 16, marker=m, color=c, alpha=0.75, lw=0,
                                   label=s)
            elif on.any():
                ax.scatter(rc[on], y[on], s=9 if m == "o" else 16, marker=m, color="tab:blue", alpha=0.6, lw=0)
        med = float(np.median(r[ok]))
        ax.plot([med, med], [i - 0.38, i + 0.38], color="black", lw=1.6)
    ax.axvline(1.0, color="black", lw=0.8, ls="--")
    if band is not None:
        ax.axvspan(1 - band, 1 + band, color="tab:green", alpha=0.15, lw=0)
    ax.set_yticks(range(len(laws)))
    ax.set_yticklabels([f"{n} (lead)" if n == lead else n for n in laws])
    ax.set_ylim(len(laws) - 0.5, -0.5)
    ax.set_xscale("log")
    if hi > 0:
        lo, hi = min(lo, 0.9), max(hi, 1.1)
        ax.set_xlim(lo / 1.15, hi * 1.15)
        ticks = FINE if hi / lo < 4 else COARSE
        ax.xaxis.set_major_locator(ticker.FixedLocator([t for t in ticks if lo / 1.15 <= t <= hi * 1.15]))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def make(ctx):
    docs = [(name, figstyle.read_heads(path, required=False))
            for name, path in (("FoX (shipped)", ctx.overview_json), ("LSTM", ctx.lstm_json))]
    docs = [(name, d) for name, d in docs if d is not None]
    if not docs:
        raise Skip("no per-head JSON with laws (python forget.py --seed 0 --json results/laws/fox_heads.json)")
    fig, axes = plt.subplots(len(docs), 2, figsize=(12.5, 3.6 * len(docs)), squeeze=False,
                             gridspec_kw=dict(width_ratios=(1.4, 1)))
    told = []
    for row, (name, doc) in enumerate(docs):
        data = cells(doc)
        if not data:
            raise Skip(f"{name}: no cell with a measured Var[W] at eps {EPS_LO:g} ... {EPS_HI:g}")
        lead = doc.lead_law
        claim = next((rec.laws[lead].claim for h in doc.heads for rec in h.at
                      if lead in rec.laws and rec.laws[lead].claim is not None), None)
        n = len(data[next(iter(data))][0])
        _strip(axes[row, 0], data, lead, claim, 0)
        _strip(axes[row, 1], data, lead, MEAN_BAND, 1)
        axes[row, 0].set_title(f"{name}: Var[W] of the law / measured ({n} head x eps cells)")
        axes[row, 1].set_title(f"{name}: E[W] of the law / measured (shaded: +-{MEAN_BAND:.0%})")
        med = {k: float(np.median(np.abs(np.asarray(v[0]) - 1))) for k, v in data.items()}
        told.append(f"{name}: median |Var ratio - 1| " + ", ".join(
            f"{k} {med[k]:.3f}" for k in (lead, "bootstrap") if k in med))
    axes[-1, 0].set_xlabel(f"Var[W] law / Var[W] measured (log scale; bar: median; < and >: beyond {EDGE[0]:g} "
                           f"or {EDGE[1]:g})")
    axes[-1, 1].set_xlabel("E[W] law / E[W] measured (log scale)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    seen = {}
    for hd, lb in zip(handles, labels):
        seen.setdefault(lb, hd)
    fig.legend(list(seen.values()), [f"Var[W] state: {s}" for s in seen], loc="lower center", ncol=len(seen),
               frameon=False, bbox_to_anchor=(0.5, -0.02))
    lead_txt = f"; shaded on Var[W]: the lead law's stated accuracy (+-{claim:.0%})" if claim is not None and \
        math.isfinite(claim) else ""
    fig.suptitle(f"Fig. 11  How close each law comes, out of sample (fit on even documents, scored on odd), "
                 f"eps {EPS_LO:g} ... {EPS_HI:g}{lead_txt}")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    return figstyle.save(fig, ctx.out, "fig11_law_errors"), "; ".join(told)
