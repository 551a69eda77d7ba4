"""Figure 2: the window W is a random first-passage time; its Monte Carlo histogram against the exact pmf."""
import matplotlib.pyplot as plt
import numpy as np

import figstyle  # first: it puts the repository root on sys.path

# isort: split
from foxwindow.laws import exact, gates

EPS = 1e-3


def make(ctx):
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    parts = []
    for i, (g, col, ax) in enumerate(zip(gates.SEED_GATES, figstyle.GATE_COLORS, axes)):
        W, _ = gates.first_passage_samples(g, eps=EPS, trials=ctx.trials, seed=ctx.seed + 20 + i)
        ex = exact.exact_first_passage(g, eps=EPS)
        pmf = ex.pmf
        hist = np.bincount(W, minlength=len(pmf)) / len(W)
        lo, hi = int(ex.mean - 4.5 * ex.var ** 0.5), int(ex.mean + 4.5 * ex.var ** 0.5) + 1
        w = np.arange(max(lo, 0), hi)
        ax.bar(w, hist[w], width=1.0, color=col, alpha=0.45, label=f"Monte Carlo, {len(W):,} trials")
        ax.plot(w, pmf[w], "k.-", lw=0.8, ms=3.5, label="exact pmf (renewal numerics)")
        ax.set_xlabel("window W = N − 1 (tokens)")
        ax.set_ylabel("P(W = w)")
        ax.set_title(figstyle.gate_label(g), fontsize=9.5)
        ax.text(0.98, 0.80, f"MC:    E = {W.mean():.2f}, Var = {W.var(ddof=1):.2f}\n"
                            f"exact: E = {ex.mean:.2f}, Var = {ex.var:.2f}",
                transform=ax.transAxes, va="top", ha="right", fontsize=8, family="monospace",
                bbox=dict(fc="white", ec="0.7", alpha=0.9))
        ax.legend(loc="upper right", fontsize=8)
        ax.set_ylim(0, 1.6 * pmf.max())
        parts.append(f"E={ex.mean:.1f} Var={ex.var:.2f}")
    fig.suptitle(f"Fig. 2  Distribution of the ε-window W at ε = {EPS:g} (L = {gates.threshold(EPS):.2f} nats): "
                 "simulation matches the exact first-passage pmf", y=1.02)
    fig.tight_layout()
    return figstyle.save(fig, ctx.out, "fig2_window_pmf"), "MC histogram vs exact pmf of W; " + "; ".join(parts)
