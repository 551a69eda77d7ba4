"""Size and power of the per-head verdict, on gate families it was not built from.

Null families (stationary within documents; the dependent law is asymptotically true, so a "law false"
is a false alarm): iid logits; AR(1) logits; ARMA(2,1) logits whose correlations change sign; two-state
regime switching of the logit mean (regimes of 20 tokens on average); long memory (fractional noise,
d = 0.35, an exactly stationary MA(8192)); heavy tails (AR(1) logits with Student-t(2.5) innovations).
Power families (the law is false for the analysed rows): a linear trend of the logit mean within each
document (SHIFT from start to end); a change point of the logit mean by SHIFT at a random position in
the middle half of each document; lattice in half (the second half of each document a constant gate,
an ALiBi-like lattice walk, at the first half's mean rate).

Each replicate is one model of len(MUS) heads with the same family at logit means MUS (forget rates
from 0.69 to 0.011 nats/token), S documents of T tokens, analysed as `python forget.py` analyses a model
(verdict.analyse with n_heads = the model's heads, so its family-wise level ALPHA applies per replicate).
Reported per family: runs with at least one "law false" (the family-wise error where the law holds; at
most ALPHA of runs), the share of heads per verdict, the per-test rejection rates at the nominal 0.05
of the heads tested, the share flagged for a drift of kappa along the positions, and the share whose
tau(n) still grows at T/2.

    python -m foxwindow.heads.calibration [--reps 20] [--n-seq 32] [--seq-len 2048] [--out results/verdict]
"""
import math
import os
import sys
import time

import numpy as np
from scipy import signal, special

from foxwindow import outputs
from foxwindow.heads import dependence, verdict
from foxwindow.laws import gates, lawtable

MUS = (0.0, 1.5, 3.0, 4.5)          # logit means of a replicate's heads
SCALE = 0.7                          # logit = mu + SCALE z, z a unit-variance latent
SHIFT = 0.25                         # the power families' logit shift: trend end to end, change-point jump
NULLS = ("iid", "ar1", "arma_sign_changing", "regime_switching", "long_memory", "heavy_tails")
POWER = ("trend", "change_point", "lattice_in_half")


def _unit(z, psi):
    """z divided by the stationary sd of a linear filter with impulse response psi."""
    return z / math.sqrt(float(np.sum(psi * psi)))


def _linear(rng, S, T, b, a, burn=2000):
    """Stationary ARMA latent (S, T), unit variance: lfilter(b, a) of Gaussian noise after a burn-in."""
    e = rng.standard_normal((S, T + burn))
    z = signal.lfilter(b, a, e, axis=1)[:, burn:]
    imp = np.zeros(burn)
    imp[0] = 1
    return _unit(z, signal.lfilter(b, a, imp))


def latent(family, rng, S, T):
    """The unit-variance latent z (S, T) of a family (the logit is mu + SCALE z), and a logit shift (S, T)."""
    shift = np.zeros((S, T))
    if family in ("iid", "trend", "change_point", "lattice_in_half"):
        z = rng.standard_normal((S, T))
    elif family == "ar1":
        z = _linear(rng, S, T, [1.0], [1.0, -0.6])
    elif family == "arma_sign_changing":
        # AR(2) roots 0.8 e^{+-i pi/3}: correlations oscillate with period 6; MA(1) -0.5
        z = _linear(rng, S, T, [1.0, -0.5], [1.0, -0.8, 0.64])
    elif family == "regime_switching":
        stay = 0.95                                                     # regimes of 20 tokens on average
        s = np.empty((S, T), bool)
        s[:, 0] = rng.random(S) < 0.5
        flips = rng.random((S, T)) > stay
        for t in range(1, T):
            s[:, t] = s[:, t - 1] ^ flips[:, t]
        z = (np.where(s, 1.0, -1.0) + 0.5 * rng.standard_normal((S, T))) / math.sqrt(1.25)
    elif family == "long_memory":
        d, K = 0.35, 8192
        k = np.arange(K)
        psi = np.exp(special.gammaln(k + d) - special.gammaln(k + 1) - special.gammaln(d))
        e = rng.standard_normal((S, T + K))
        z = _unit(signal.fftconvolve(e, psi[None, :], axes=1)[:, K:K + T], psi)
    elif family == "heavy_tails":
        nu = 2.5
        e = rng.standard_t(nu, (S, T + 2000)) / math.sqrt(nu / (nu - 2))
        z = signal.lfilter([1.0], [1.0, -0.5], e, axis=1)[:, 2000:] / math.sqrt(1 / (1 - 0.25))
    else:
        raise ValueError(f"unknown family {family!r}; families: {NULLS + POWER}")
    if family == "trend":
        shift = np.broadcast_to(SHIFT * (np.arange(T) / T - 0.5), (S, T)).copy()
    elif family == "change_point":
        c = rng.integers(T // 4, 3 * T // 4, size=S)
        shift = SHIFT * (np.arange(T)[None, :] >= c[:, None])
    return z, shift


def increments(family, mu, rng, S, T):
    """Increments X = -log sigmoid(logit) >= 0 (S, T) float64 of one head of `family` at logit mean mu."""
    z, shift = latent(family, rng, S, T)
    x = np.logaddexp(0.0, -(mu + SCALE * z + shift))
    if family == "lattice_in_half":
        x[:, T // 2:] = x[:, :T // 2].mean()                          # a constant gate at the same rate
    return x


def replicate(family, rng, S, T, Ls, n_boot=verdict.N_BOOT):
    """One model of len(MUS) heads of `family`: [HeadResult] (no predictions: the tests only)."""
    H = len(MUS)
    return [verdict.analyse(increments(family, mu, rng, S, T), Ls, n_heads=H, n_boot=n_boot,
                            seed=rng.integers(2 ** 62), head=h, predict_=False) for h, mu in enumerate(MUS)]


def study(families, reps, S, T, seed=0, n_boot=verdict.N_BOOT, progress=False):
    """Per family: runs with any "law false", verdict shares, per-test nominal-0.05 rejection rates.
    Returns {family: dict}."""
    Ls = np.array([gates.threshold(e) for e in lawtable.EPS_SCAN])
    out = {}
    for fi, fam in enumerate(families):
        rng = np.random.default_rng([seed, fi])
        t0 = time.perf_counter()
        runs_false, counts, p_var, p_mean, drift, growing = 0, {s: 0 for s in verdict.STATES}, [], [], 0, 0
        for _ in range(reps):
            res = replicate(fam, rng, S, T, Ls, n_boot)
            runs_false += any(r.verdict == "law false" for r in res)
            for r in res:
                counts[r.verdict] += 1
                drift += r.p_position < r.alpha_test
                growing += r.tau_growth > 1 + dependence.LEVEL_TOL
                if r.n_tested >= verdict.MIN_TESTED:
                    p_var.append(r.p_var)
                    p_mean.append(r.p_mean)
        n = reps * len(MUS)
        out[fam] = dict(null=fam in NULLS, reps=reps, heads=n, runs_law_false=runs_false,
                        share={s: c / n for s, c in counts.items()}, tested=len(p_var), drift=drift / n,
                        tau_growing=growing / n,
                        rate05_var=float(np.mean(np.array(p_var) < 0.05)) if p_var else float("nan"),
                        rate05_mean=float(np.mean(np.array(p_mean) < 0.05)) if p_mean else float("nan"),
                        seconds=time.perf_counter() - t0)
        if progress:
            print(f"{fam}: {out[fam]}", file=sys.stderr)
    return out


def table(res, S, T):
    """Markdown table of study() results."""
    a = verdict.ALPHA
    lines = [f"| family | kind | runs | runs with a 'law false' (level {a:g} per run) | law false | law holds | "
             "pre-asymptotic | undetermined | heads tested | rejections at 0.05 per test: variance / mean | "
             "kappa drift flagged | tau(n) still growing at T/2 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fam, r in res.items():
        sh = r["share"]
        lines.append(f"| {fam} | {'null' if r['null'] else 'power'} | {r['reps']} | {r['runs_law_false']} | "
                     f"{sh['law false']:.2f} | {sh['law holds']:.2f} | {sh['pre-asymptotic']:.2f} | "
                     f"{sh['undetermined']:.2f} | {r['tested']} of {r['heads']} | "
                     f"{r['rate05_var']:.2f} / {r['rate05_mean']:.2f} | {r['drift']:.2f} | {r['tau_growing']:.2f} |")
    lines.append(f"\n{len(MUS)} heads per run (logit means {', '.join(map(str, MUS))}, scale {SCALE}), {S} documents x "
                 f"{T} tokens, eps scan {', '.join(f'{e:g}' for e in lawtable.EPS_SCAN)}, {verdict.N_BOOT}-draw "
                 f"document bootstrap; shares are of all heads. kappa drift: the positions' t-test at the per-test "
                 f"level "
                 f"{verdict.ALPHA:g}/(2 x {len(MUS)}) (a reason, not a state); tau(n) growing: tau_w(T/2)/tau_w(T/8) > "
                 f"{1 + dependence.LEVEL_TOL:g}.")
    return "\n".join(lines)


def main(argv=None):
    p = outputs.parser("Size and power of the per-head verdict on null and power gate families")
    p.add_argument("--reps", type=int, default=20, help="replicates (models) per family")
    p.add_argument("--n-seq", type=int, default=32, help="documents per head")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per document")
    p.add_argument("--seed", type=int, default=0, help="seed of the study")
    p.add_argument("--families", nargs="+", default=list(NULLS + POWER), help="families to run")
    p.add_argument("--out", default="results/verdict", help="folder for calibration.json and calibration.md")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    a = p.parse_args(argv)
    outputs.positive("--reps", a.reps)
    outputs.positive("--n-seq", a.n_seq, lo=verdict.MIN_DOCS)
    outputs.positive("--seq-len", a.seq_len, lo=64)
    bad = [f for f in a.families if f not in NULLS + POWER]
    if bad:
        raise outputs.UsageError(f"--families: unknown {bad}; known: {', '.join(NULLS + POWER)}")
    js = outputs.check_writable(os.path.join(a.out, "calibration.json"), force=a.force, what="--out")
    md = outputs.check_writable(os.path.join(a.out, "calibration.md"), force=a.force, what="--out")
    res = study(a.families, a.reps, a.n_seq, a.seq_len, a.seed, progress=True)
    text = table(res, a.n_seq, a.seq_len)
    print(text)
    outputs.write_json(js, dict(reps=a.reps, n_seq=a.n_seq, seq_len=a.seq_len, seed=a.seed, alpha=verdict.ALPHA,
                                mus=list(MUS), scale=SCALE, results=res))
    outputs.write_text(md, text + "\n")


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
