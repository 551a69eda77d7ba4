"""Figure 3: E[W] and Var[W] grow linearly in L = ln(1/eps); simulation, exact numerics, leading and Smith laws."""
import matplotlib.pyplot as plt
import numpy as np

import figstyle  # first: it puts the repository root on sys.path

# isort: split
from foxwindow.laws import exact, gates, renewal


def make(ctx):
    eps_list = np.logspace(-1, -6, 4 if ctx.fast else 11)
    Lg = np.linspace(0, 14.5, 100)                       # law curves
    fig, (am, av) = plt.subplots(1, 2, figsize=(13, 5.2))
    ins = av.inset_axes([0.09, 0.56, 0.36, 0.32])
    summary = []
    for i, (g, col) in enumerate(zip(gates.SEED_GATES, figstyle.GATE_COLORS)):
        m = g.moments()
        Ls = np.array([gates.threshold(e) for e in eps_list])
        mc = [gates.first_passage_mc(g, eps=e, trials=ctx.trials, seed=ctx.seed + 300 + 20 * i + j)
              for j, e in enumerate(eps_list)]
        ex = [exact.exact_first_passage(g, eps=e) for e in eps_list]
        lab = figstyle.gate_label(g)
        # mean: renewal expansion E[W] = L/k + mu2/(2k^2) - 1 and the exact numerics coincide to < 1e-8
        am.errorbar(Ls, [r.mean for r in mc], yerr=[2 * r.se_mean for r in mc], fmt="o", color=col, ms=4,
                    capsize=2, label=f"{lab}: simulation ± 2 SE")
        am.plot(Ls, [e.mean for e in ex], "x", color="k", ms=6, zorder=3)
        am.plot(Lg, renewal.renewal_mean(m, Lg) - 1, "-", color=col, lw=1)
        # variance
        av.errorbar(Ls, [r.var for r in mc], yerr=[2 * r.se_var for r in mc], fmt="o", color=col, ms=4,
                    capsize=2, label=f"{lab}: simulation ± 2 SE")
        av.plot(Ls, [e.var for e in ex], "x", color="k", ms=6, zorder=3)
        av.plot(Lg, renewal.leading_var(m, Lg), "--", color=col, lw=1)
        av.plot(Lg, renewal.smith_var(m, Lg), "-", color=col, lw=1)
        C = renewal.smith_C(m)
        ins.plot(Ls, [e.var - renewal.leading_var(m, L) for e, L in zip(ex, Ls)], "o", color=col, ms=3.5)
        ins.axhline(C, color=col, lw=1)
        summary.append(f"C={C:+.4f}")
    am.plot([], [], "x", color="k", label="exact numerics (renewal lattice + Richardson)")
    am.plot([], [], "-", color="gray", label="renewal law L/κ + μ₂/(2κ²) − 1")
    av.plot([], [], "x", color="k", label="exact numerics")
    av.plot([], [], "--", color="gray", label="leading law σ²L/κ³")
    av.plot([], [], "-", color="gray", label="Smith law σ²L/κ³ + C")
    am.set_xlabel("L = ln(1/ε) (nats)")
    am.set_ylabel("mean window E[W] (tokens)")
    am.set_title("mean window: linear in L with slope 1/κ")
    am.legend(loc="upper left", fontsize=8)
    av.set_xlabel("L = ln(1/ε) (nats)")
    av.set_ylabel("window variance Var[W] (tokens²)")
    av.set_title("window variance: slope σ²/κ³, offset Smith's C")
    av.legend(loc="lower right", fontsize=8)
    av.set_xlim(0, 14.5)
    av.set_ylim(0, None)
    ins.set_title("exact Var − σ²L/κ³ (dots, tokens²)\nvs Smith's C (lines)", fontsize=8)
    ins.set_xlabel("L (nats)", fontsize=8)
    ins.tick_params(labelsize=7)
    ins.set_ylim(-0.02, 0.1)
    for a in (am, av):
        a.set_xlim(0, 14.5)
    fig.suptitle(f"Fig. 3  Window moments against threshold L, ε = 1e-1 … 1e-6 "
                 f"({ctx.trials:,} trials per point)", y=1.0)
    fig.tight_layout()
    return (figstyle.save(fig, ctx.out, "fig3_moments_vs_L"),
            "E[W], Var[W] vs L: sim, exact, leading and Smith laws; " + ", ".join(summary))
