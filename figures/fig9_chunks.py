"""Figure 9: chunk-size safety of the shipped FoX model. For the heads whose chunks can overflow, the
probability that one chunk's summed -log g passes the exp() overflow threshold (float32 and float16)
against the chunk size: predicted (dependence-aware, with its jackknife SE; the iid law dashed) and measured
(the chunked op's NaN rate on held-out text, ± SE; open triangles: 95% upper bounds at zero failures); and
the held-out check (fit on half the sequences, measured on the other half) of both predictions.
Reads the JSON that `python chunks.py --json` writes (results/chunks/fox.json); skipped when it is absent."""
import json
import os

import matplotlib.pyplot as plt
import numpy as np

import figstyle
from figstyle import Skip

DEFAULT_JSON = os.path.join(figstyle.ROOT, "results", "chunks", "fox.json")
FLOOR = 1e-12                       # predictions below this are drawn at it (log axis)


def _head_label(h):
    parts = h["name"].split(".")
    layer = parts[1] if len(parts) > 2 and parts[0] == "blocks" else h["name"]
    return f"{layer}.{h['head']}"


def make(ctx):
    path = getattr(ctx, "chunks_json", None) or DEFAULT_JSON
    if not os.path.exists(path):
        raise Skip(f"{os.path.relpath(path)} not found (write it with `python chunks.py --json ...`)")
    with open(path) as f:
        res = json.load(f)
    heads, info = res.get("heads") or [], res.get("info", {})
    if not heads:
        raise Skip(f"{path} has no per-head entries")
    risk = info.get("risk", 1e-6)
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.4))
    for ax, dt in zip(axes[:2], ("float32", "float16")):
        hs = [h for h in heads if h["dtype"] == dt and max(h["dep"]) > 1e-9 and min(h["dep"]) < 1 - 1e-9]
        cmap = plt.cm.tab10
        for i, h in enumerate(hs):
            c = cmap(i % 10)
            C = np.array(h["chunks"], dtype=float)
            dep, se = np.array(h["dep"]), np.array(h["dep_se"])
            ax.plot(C, np.maximum(dep, FLOOR), "-", color=c, lw=1.6, label=f"head {_head_label(h)}")
            ax.fill_between(C, np.maximum(dep - 2 * se, FLOOR), np.maximum(dep + 2 * se, FLOOR), color=c, alpha=0.15)
            ax.plot(C, np.maximum(h["iid"], FLOOR), "--", color=c, lw=1)
            m = h["measured"]
            for Ck, r in zip(C, m):
                if r["failures"]:
                    ax.errorbar(Ck, r["p"], yerr=r["se"], fmt="o", color=c, ms=5, capsize=2)
                else:
                    ax.plot(Ck, r["upper"], "v", color=c, mfc="none", ms=6)
        ax.axhline(risk, color="k", lw=0.8, ls=":")
        ax.text(C[0] if hs else 16, risk * 1.6, f"risk {risk:g}", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(C if hs else [16, 512], [f"{int(c)}" for c in (C if hs else [16, 512])])
        ax.set_yscale("log")
        ax.set_ylim(FLOOR / 2, 2)
        ax.set_xlabel("chunk size C (tokens)")
        ax.set_ylabel("P(chunk overflows) = P(S_C > θ)")
        th = next((h["theta"] for h in heads if h["dtype"] == dt), float("nan"))
        ax.set_title(f"({'a' if dt == 'float32' else 'b'}) {dt}: θ = {th:.2f}; line: dependence-aware ±2 SE, "
                     f"dashed: iid, dots: measured", fontsize=9)
        if hs:
            ax.legend(loc="lower right", fontsize=7.5, ncol=2)
    # (c) held-out check: predicted from the even sequences vs measured on the odd ones
    ac = axes[2]
    for key, mk, col, lab in (("check_dep", "o", "tab:blue", "dependence-aware"),
                              ("check_iid", "x", "tab:red", "iid law")):
        xs, ys, es, zx, zy = [], [], [], [], []
        for h in heads:
            for i, r in enumerate(h["meas_check"]):
                p = h[key][i]
                if r["failures"] == 0 and p < 1e-6:
                    continue
                if r["failures"]:
                    xs.append(max(p, 1e-6))
                    ys.append(r["p"])
                    es.append(r["se"])
                else:                                # no failure: only the 95% upper bound is known
                    zx.append(max(p, 1e-6))
                    zy.append(r["upper"])
        ac.errorbar(xs, ys, yerr=es, fmt=mk, color=col, ms=5, alpha=0.75, capsize=1.5, label=lab)
        ac.plot(zx, zy, "v", color=col, mfc="none", ms=6, alpha=0.75,
                label=f"{lab}: 0 failures, 95% upper bound")
    lim = [5e-7, 2]
    ac.plot(lim, lim, "k--", lw=1, label="measured = predicted")
    ac.set_xscale("log")
    ac.set_yscale("log")
    ac.set_xlim(lim)
    ac.set_ylim(lim)
    ac.set_xlabel("predicted from the even sequences (drawn at ≥ 1e-6)")
    ac.set_ylabel("measured on the odd sequences (± SE)")
    ac.set_title("(c) held-out check, every head, chunk size and dtype", fontsize=9)
    ac.legend(loc="upper left", fontsize=8)
    fig.suptitle("Fig. 9  Chunk-size safety of the shipped FoX model: when exp(-cum) overflows a chunked kernel",
                 y=1.0)
    fig.tight_layout()
    zd = [abs(z) for h in heads for z in h["z_dep"] if z is not None]
    zi = [abs(z) for h in heads for z in h["z_iid"] if z is not None]
    summary = (f"{len({(h['name'], h['head']) for h in heads})} heads from {os.path.relpath(path)}; held-out |z| "
               f"dependence-aware max {max(zd):.1f}, iid max {max(zi):.1f}")
    return figstyle.save(fig, ctx.out, "fig9_chunks"), summary
