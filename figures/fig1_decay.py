"""Figure 1: the decay D(d) = exp(-(X_1 + ... + X_d)) against distance is monotone; the window is its eps-crossing."""
import math

import matplotlib.pyplot as plt
import numpy as np

import figstyle  # first: it puts the repository root on sys.path

# isort: split
from foxwindow.laws import exact, gates, renewal

EPS = 1e-3


def make(ctx):
    rng = np.random.default_rng(ctx.seed + 1)
    L = gates.threshold(EPS)
    dmax = 300
    d = np.arange(dmax + 1)
    n_band = 1000 if ctx.fast else 20000
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    for g, col in zip(gates.SEED_GATES, figstyle.GATE_COLORS):
        # c_d = X_1 + ... + X_d read back from the query; D = exp(-c), D(0) = 1
        c = np.concatenate([np.zeros((n_band, 1)), np.cumsum(g.sample(rng, (n_band, dmax)), axis=1)], axis=1)
        lo, hi = np.exp(-np.quantile(c, [0.95, 0.05], axis=0))
        ax.fill_between(d, lo, hi, color=col, alpha=0.22, lw=0)
        for k in range(3):
            D = np.exp(-c[k])
            ax.plot(d, D, color=col, lw=0.9, label=f"FoX {figstyle.gate_label(g)}" if k == 0 else None)
            w = int(np.argmax(c[k] > L)) - 1             # last d with D >= eps
            ax.plot(w, D[w], "o", color=col, ms=4, mec="k", mew=0.5)
    for m, col in zip(gates.ALIBI_SLOPES, figstyle.ALIBI_COLORS):
        w = renewal.alibi_window(m, EPS)
        ax.plot(d, np.exp(-m * d), "--", color=col, lw=1.4, label=f"ALiBi m = {m:g}: W = floor(L/m) = {w}")
        ax.plot(w, math.exp(-m * w), "s", color=col, ms=5)
    ax.axhline(EPS, color="red", lw=1.2, ls=":", label=f"ε = {EPS:g}  (L = ln 1/ε = {L:.2f} nats)")
    ax.fill_between([], [], [], color="gray", alpha=0.3, label="FoX 5–95% band of D over gate draws")
    ax.plot([], [], "o", color="gray", mec="k", mew=0.5, label="window W of a sample path (last d with D ≥ ε)")
    ax.set_yscale("log")
    ax.set_ylim(1e-6, 1.5)
    ax.set_xlim(0, dmax)
    ax.set_xlabel("distance d = i − j (tokens)")
    ax.set_ylabel("decay D(i, i−d) = ∏ g_t  (log scale)")
    ax.set_title("Fig. 1  Forget-gate decay is monotone in distance for FoX and ALiBi;\n"
                 "the ε-window is the distance where D crosses ε (3 sample paths per gate)")
    ax.legend(loc="upper right", framealpha=0.95)
    paths = figstyle.save(fig, ctx.out, "fig1_decay")
    means = [exact.exact_first_passage(g, eps=EPS).mean for g in gates.SEED_GATES]
    return paths, ("decay vs distance, 3 seed gates + ALiBi; E[W] at eps=1e-3: "
                   + ", ".join(f"{m:.1f}" for m in means) + "; ALiBi W = 138, 69")
