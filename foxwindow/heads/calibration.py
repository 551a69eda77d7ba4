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

The laws' states (heads/laws.py; --laws): null families as above, power families LAW_POWER where a two-moment
law is off by more than 1.5x at eps 1e-1..1e-4 while the traces are stationary (long regimes of very
different rates, near-periodic word-boundary gates, stretches of g = 1 exactly, documents of different
rates). Every (head, law, eps) cell is labelled by a population run of BIG_S documents: "null" where the law
is within its own claim there, "off" where its Var ratio is beyond 1.5x. Size: replicate models with any
"false" on a null cell (at most ALPHA); power: the states of the off cells.

    python -m foxwindow.heads.calibration --laws [--reps 20] [--n-seq 16] [--seq-len 512]
    python -m foxwindow.heads.calibration --population results/verdict/laws_calibration.json   # population errors
    python -m foxwindow.heads.calibration --laws --lead-variants [--families ...]   # the S_w law's four forms
"""
import math
import os
import sys
import time

import numpy as np
from scipy import signal, special

from foxwindow import outputs, safety
from foxwindow.heads import dependence, verdict
from foxwindow.heads import laws as headlaws
from foxwindow.laws import gates, lawtable

__all__ = ["MUS", "SCALE", "SHIFT", "NULLS", "POWER", "latent", "increments", "replicate", "study", "table", "main"]

MUS = (0.0, 1.5, 3.0, 4.5)          # logit means of a replicate's heads
SCALE = 0.7                          # logit = mu + SCALE z, z a unit-variance latent
SHIFT = 0.25                         # the power families' logit shift: trend end to end, change-point jump
NULLS = ("iid", "ar1", "arma_sign_changing", "regime_switching", "long_memory", "heavy_tails")
POWER = ("trend", "change_point", "lattice_in_half")
# the laws' power families: stationary traces on which a two-moment law is off by more than 1.5x at eps 1e-1..1e-4
LAW_POWER = ("long_regimes", "word_gates", "saturating", "document_rates")
LAW_NULLS = NULLS


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
    elif family in LAW_POWER:
        z = rng.standard_normal((S, T))
    else:
        raise ValueError(f"unknown family {family!r}; families: {NULLS + POWER + LAW_POWER}")
    if family == "trend":
        shift = np.broadcast_to(SHIFT * (np.arange(T) / T - 0.5), (S, T)).copy()
    elif family == "change_point":
        c = rng.integers(T // 4, 3 * T // 4, size=S)
        shift = SHIFT * (np.arange(T)[None, :] >= c[:, None])
    return z, shift


def _markov_states(rng, S, T, mean_len):
    """Two-state Markov chain (S, T) bool with mean sojourn mean_len tokens, started stationary."""
    s = np.empty((S, T), bool)
    s[:, 0] = rng.random(S) < 0.5
    flips = rng.random((S, T)) < 1.0 / mean_len
    for t in range(1, T):
        s[:, t] = s[:, t - 1] ^ flips[:, t]
    return s


def law_power_shift(family, rng, S, T):
    """The logit shift (S, T) of a law power family, and a mask (S, T) of gates set to exactly 1 (or None).

    long_regimes: two-state regimes of mean length 300 tokens with logit means +-1.5 apart (rates ~4x apart);
    word_gates: near-periodic word boundaries (words of 3-7 tokens, uniform): the logit drops by 4 at each
      boundary, rises by 2 inside words; saturating: stretches where g = 1 exactly (X = 0) of mean length 40
      alternating with ordinary stretches of mean length 40; document_rates: each document its own logit mean
      (sd 1.0 about mu)."""
    mask = None
    if family == "long_regimes":
        shift = np.where(_markov_states(rng, S, T, 300.0), 1.5, -1.5)
    elif family == "word_gates":
        shift = np.full((S, T), 2.0)
        for s in range(S):
            t = int(rng.integers(0, 7))
            while t < T:
                shift[s, t] = -4.0
                t += int(rng.integers(3, 8))
    elif family == "saturating":
        shift = np.zeros((S, T))
        mask = _markov_states(rng, S, T, 40.0)
    elif family == "document_rates":
        shift = np.broadcast_to(rng.standard_normal((S, 1)), (S, T)).copy()
    else:
        raise ValueError(family)
    return shift, mask


def increments(family, mu, rng, S, T):
    """Increments X = -log sigmoid(logit) >= 0 (S, T) float64 of one head of `family` at logit mean mu."""
    z, shift = latent(family, rng, S, T)
    mask = None
    if family in LAW_POWER:
        shift, mask = law_power_shift(family, rng, S, T)
    x = np.logaddexp(0.0, -(mu + SCALE * z + shift))
    if mask is not None:
        x[mask] = 0.0
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


# ----------------------------------------------------------------------------- the laws' states: size and power

LAW_MUS = (0.0, 1.5, 3.0)           # a replicate model's heads (forget rates 0.69 .. 0.05 nats/token)
LAW_EPS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4)
OFF = 1.5                            # a law is "off" where its population Var ratio is beyond 1.5x either way
BIG_S = 128                          # documents of the population run that labels each cell


def _pop_labels(fam, mu, rng, T, Ls):
    """Each law's population Var ratio at each L (a BIG_S-document run, fitted on half, scored on half) and
    its label: 'null' (within its claim, the claim stated at most CLAIM_MAX, by two population SEs), 'off'
    (beyond OFF by two population SEs) or None (neither, or not measured)."""
    x = increments(fam, mu, rng, BIG_S, T)
    at = headlaws.evaluate(x, Ls, rng, all_docs=False)["at"]
    lab = {}
    for k, rec in enumerate(at):
        mv = rec["measured"]["var"]
        for law, d in rec["laws"].items():
            if mv is None or d["var"] is None or not mv > 0:
                lab[law, k] = (None, None)
                continue
            ratio = d["var"] / mv
            se = math.hypot((rec["measured"]["var_se"] or 0.0) / mv, (d["var_se"] or 0.0) / d["var"])
            a, c = abs(math.log(ratio)), d["claim"]
            claimed = c is not None and c <= headlaws.CLAIM_MAX
            if a - 2 * se > math.log(OFF):                          # off beyond 1.5x, by 2 population SEs
                lab[law, k] = ("off", ratio)
            elif claimed and a + 2 * se <= math.log(1 + c):
                lab[law, k] = ("null", ratio)                       # within its claim, by 2 population SEs
            else:
                lab[law, k] = (None, ratio)
            if claimed:                                             # the claim against the population error
                beyond = a - 2 * se > max(math.log(1 + c), -math.log(1 - min(c, 0.99)))
                lab["claim", law, k] = "beyond" if beyond else "within" if a + 2 * se <= math.log(1 + c) else "open"
    return lab


def law_study(families, reps, S, T, seed=0, progress=False):
    """Size and power of the laws' states (headlaws.assign_states) on families: per family, a population run
    per head labels every (law, eps) cell null or off; then `reps` replicate models of len(LAW_MUS) heads, S
    documents x T tokens, each analysed as `python forget.py` does (fit on even, score on odd documents,
    Holm over the model). Returns {family: dict}."""
    Ls = np.array([gates.threshold(e) for e in LAW_EPS])
    out = {}
    known = LAW_NULLS + LAW_POWER
    for fam in families:
        rng = np.random.default_rng([seed, 29, known.index(fam)])    # the same draws whichever families run
        t0 = time.perf_counter()
        labels = [_pop_labels(fam, mu, rng, T, Ls) for mu in LAW_MUS]
        runs_false, runs_any, cnt, cnt_eps = 0, 0, {}, {}
        for _ in range(reps):
            at = [headlaws.evaluate(increments(fam, mu, rng, S, T), Ls, rng)["at"] for mu in LAW_MUS]
            headlaws.assign_states(at, df=S // 2 - 1)
            bad = False
            runs_any += any(d["state"] == "false" for recs in at for rec in recs for d in rec["laws"].values())
            for h, recs in enumerate(at):
                for k, rec in enumerate(recs):
                    for law, d in rec["laws"].items():
                        lab = labels[h].get((law, k), (None, None))[0]
                        if lab is None:
                            continue
                        key = (law, lab)
                        c = cnt.setdefault(key, {s: 0 for s in headlaws.STATES})
                        c[d["state"]] += 1
                        ce = cnt_eps.setdefault((law, lab, k), {s: 0 for s in headlaws.STATES})
                        ce[d["state"]] += 1
                        bad |= lab == "null" and d["state"] == "false"
            runs_false += bad
        pops = {f"{key[0]}@{LAW_EPS[key[1]]:g}@{LAW_MUS[h]:g}": labels[h][key][1] for h in range(len(LAW_MUS))
                for key in labels[h] if len(key) == 2}
        claims = {}
        for h in range(len(LAW_MUS)):
            for key, v in labels[h].items():
                if len(key) == 3:
                    c = claims.setdefault(key[1], dict(within=0, open=0, beyond=0))
                    c[v] += 1
        out[fam] = dict(null=fam in LAW_NULLS, reps=reps, runs_any_false_on_null=runs_false, runs_any_false=runs_any,
                        cells={f"{law}|{lab}": c for (law, lab), c in cnt.items()},
                        cells_eps={f"{law}|{lab}|{LAW_EPS[k]:g}": c for (law, lab, k), c in cnt_eps.items()},
                        population_ratio=pops,
                        claim_check=claims,
                        seconds=time.perf_counter() - t0)
        if progress:
            print(f"{fam}: {runs_false} of {reps} runs with a false on a null cell, "
                  f"{out[fam]['seconds']:.0f} s", file=sys.stderr)
    return out


def _eps_bands():
    """LAW_EPS in two bands: above the eps attention uses, and those (headlaws.SUMMARY_EPS, 1e-2 ... 1e-4)."""
    lo, hi = min(headlaws.SUMMARY_EPS), max(headlaws.SUMMARY_EPS)
    inside = tuple(e for e in LAW_EPS if lo * (1 - 1e-9) <= e <= hi * (1 + 1e-9))
    above = tuple(e for e in LAW_EPS if e not in inside)
    return [(f"{max(b):g}..{min(b):g}", b) for b in (above, inside) if b]


def eps_table(res):
    """Markdown: on the power families, each law's off cells called false (of all its off cells) at the eps above
    those attention uses (0.1-0.03) and at those (1e-2 ... 1e-4) (law_study's `cells_eps`; results without it give
    no rows)."""
    bands = _eps_bands()
    rows = ["| family | law | " + " | ".join(f"off cells at eps {b} | false" for b, _ in bands) + " |",
            "| --- | --- |" + " --- | --- |" * len(bands)]
    for fam, r in res.items():
        if r["null"] or "cells_eps" not in r:
            continue
        laws = sorted({k.split("|")[0] for k in r["cells_eps"] if k.split("|")[1] == "off"})
        for law in laws:
            cells = []
            for _, band in bands:
                cs = [r["cells_eps"].get(f"{law}|off|{e:g}") for e in band]
                n = sum(sum(c.values()) for c in cs if c)
                f = sum(c["false"] for c in cs if c)
                cells.append(f"{n} | {f / n:.2f}" if n else "0 | -")
            rows.append(f"| {fam} | {law} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def law_tables(res, S, T):
    """Markdown: the size table (runs with any 'false' where the law is within its claim), the power table (per
    family and law: off cells called false / holds / not claimed / undetermined, false of all off cells and of
    the claimed ones), the claim check (claimed cells of the population runs within / beyond the claim) and the
    power families' false share by eps band (eps_table)."""
    a = headlaws.ALPHA
    size = ["| family | kind | runs | runs with a 'false' on a cell within its claim (level %g per run) | "
            "such cells | of them false | holds | runs with any 'false' (any cell) |" % a,
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    power = ["| family | law | off cells (population Var ratio beyond 1.5x) | false (of all off cells) | holds | "
             "not claimed | undetermined | false where claimed |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    check = ["| family | law | claimed cells (population run) | within the claim by 2 SE | beyond it by 2 SE |",
             "| --- | --- | --- | --- | --- |"]
    for fam, r in res.items():
        nulls = {k: c for k, c in r["cells"].items() if k.endswith("|null")}
        n_null = sum(sum(c.values()) for c in nulls.values())
        f_null = sum(c["false"] for c in nulls.values())
        h_null = sum(c["holds"] for c in nulls.values())
        size.append(f"| {fam} | {'null' if r['null'] else 'power'} | {r['reps']} | {r['runs_any_false_on_null']} | "
                    f"{n_null} | {f_null / max(n_null, 1):.3f} | {h_null / max(n_null, 1):.2f} | "
                    f"{r.get('runs_any_false', '-')} |")
        for key, c in sorted(r["cells"].items()):
            law, lab = key.split("|")
            if lab != "off":
                continue
            n = sum(c.values())
            nc = n - c["not claimed"]
            power.append(f"| {fam} | {law} | {n} | {c['false'] / n:.2f} | {c['holds'] / n:.2f} | "
                         f"{c['not claimed'] / n:.2f} | {c['undetermined'] / n:.2f} | "
                         + (f"{c['false'] / nc:.2f} of {nc}" if nc else "-") + " |")
        for law, c in r.get("claim_check", {}).items():
            n = sum(c.values())
            check.append(f"| {fam} | {law} | {n} | {c['within'] / n:.2f} | {c['beyond'] / n:.2f} |")
    note = (f"\n{len(LAW_MUS)} heads per run (logit means {', '.join(map(str, LAW_MUS))}, scale {SCALE}), {S} "
            f"documents x {T} tokens, eps {', '.join(f'{e:g}' for e in LAW_EPS)}; laws fitted on the even documents "
            f"and scored on the odd ones (the states of {', '.join(headlaws.ALL_DOCS)} tested on all documents); "
            f"cells labelled by a {BIG_S}-document population run of each head.")
    return ("\n".join(size) + "\n\n" + "\n".join(power) + "\n\n" + "\n".join(check) + "\n\n" + eps_table(res)
            + note)


def population_table(res):
    """Markdown: per family (rows) and law (columns), the median over its heads and eps of abs(Var_law / Var_measured
    - 1) on the population runs (`population_ratio` of law_study's result)."""
    laws = list(headlaws.LAWS)
    rows = ["| family | " + " | ".join(laws) + " |", "| --- |" + " --- |" * len(laws)]
    for fam, r in res.items():
        pr = r["population_ratio"]
        cells = []
        for law in laws:
            v = [x for k, x in pr.items() if k.split("@")[0] == law and x is not None]
            cells.append(f"{np.median(np.abs(np.array(v) - 1)):.3f}" if v else "-")
        rows.append(f"| {fam} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# the lead law's forms: (headlaws.MIXED, headlaws.SHAPE)
LEAD_VARIANTS = {"pooled": (False, "gamma"), "documents": (True, "gamma"), "rates": ("rates", "gamma"),
                 "lognormal": (False, "lognormal")}


def lead_variants(families, seed=0, T=512):
    """The lead law's population Var ratios under each of its forms (LEAD_VARIANTS: S_w pooled over the documents,
    the default; a mixture of the documents, each its own three cumulants; each its own mean with the documents'
    average shape; pooled, S_w a shifted lognormal instead of a gamma) on the population runs of law_study (the
    same draws: BIG_S documents x T tokens a head, fitted on half, scored on half). Returns
    {family: {variant: [ratio, ...]}} over the heads LAW_MUS x eps LAW_EPS."""
    Ls = np.array([gates.threshold(e) for e in LAW_EPS])
    known = LAW_NULLS + LAW_POWER
    out = {}
    saved = headlaws.MIXED, headlaws.SHAPE
    try:
        for fam in families:
            out[fam] = {}
            for name, (mixed, shape) in LEAD_VARIANTS.items():
                headlaws.MIXED, headlaws.SHAPE = mixed, shape
                rng = np.random.default_rng([seed, 29, known.index(fam)])   # law_study's draws of this family
                rs = []
                for mu in LAW_MUS:
                    at = headlaws.evaluate(increments(fam, mu, rng, BIG_S, T), Ls, rng, all_docs=False)["at"]
                    for rec in at:
                        mv, v = rec["measured"]["var"], rec["laws"][headlaws.LEAD]["var"]
                        rs.append(v / mv if mv and v else float("nan"))
                out[fam][name] = rs
    finally:
        headlaws.MIXED, headlaws.SHAPE = saved
    return out


def lead_variants_table(res):
    """Markdown of lead_variants: per family and form, the median of abs(ratio - 1) and the share of cells beyond
    OFF either way."""
    names = list(LEAD_VARIANTS)
    rows = ["| family | " + " | ".join(f"{n}: median error, beyond {OFF}x" for n in names) + " |",
            "| --- |" + " --- |" * len(names)]
    for fam, r in res.items():
        cells = []
        for n in names:
            v = np.array([x for x in r[n] if math.isfinite(x)])
            cells.append(f"{np.median(np.abs(v - 1)):.3f}, {np.mean(np.abs(np.log(v)) > math.log(OFF)):.2f}"
                         if len(v) else "-")
        rows.append(f"| {fam} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _law_result(path):
    """The `results` of a saved --laws study (laws_calibration.json), checked before use."""
    doc = outputs.json_input("--population", path)
    res = doc.get("results") if isinstance(doc, dict) else None
    if not (isinstance(res, dict) and res and all(isinstance(r, dict) and isinstance(r.get("population_ratio"), dict)
                                                  for r in res.values())):
        raise outputs.UsageError(f"--population: {path} is not a --laws calibration result (laws_calibration.json)")
    for fam, r in res.items():
        for k, v in r["population_ratio"].items():
            if not (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))):
                raise outputs.UsageError(f"--population: {path}: population_ratio {k!r} of {fam!r} is not a number")
    return res


def main(argv=None):
    p = outputs.parser("Size and power of the per-head verdict (or, with --laws, of the laws' states) on null "
                       "and power gate families")
    p.add_argument("--laws", action="store_true",
                   help="the laws' states (headlaws): laws_calibration.json/.md, families LAW_NULLS + LAW_POWER, "
                        "defaults 16 documents x 512 tokens")
    p.add_argument("--reps", type=int, default=20, help="replicates (models) per family")
    p.add_argument("--n-seq", type=int, default=None, help="documents per head (default 32; --laws 16)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per document (default 2048; --laws 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of the study")
    p.add_argument("--families", nargs="+", default=None, help="families to run")
    p.add_argument("--out", default="results/verdict", help="folder for the .json and .md results")
    p.add_argument("--population", metavar="JSON", default=None,
                   help="print the laws' population errors (median abs(Var ratio - 1) per family and law) of a "
                        "saved --laws result and stop")
    p.add_argument("--lead-variants", action="store_true",
                   help="print the lead law's population errors under each of its forms (pooled, a mixture of "
                        "the documents, each document's own rate) on --families and stop (writes nothing)")
    outputs.add_common(p)                          # --force, --debug (the error lines offer it), --break-lock
    a = p.parse_args(argv)
    if a.seed < 0:
        raise outputs.UsageError(f"--seed must be an integer >= 0; got {a.seed}")
    if a.families and len(set(a.families)) < len(a.families):
        twice = next(f for f in a.families if a.families.count(f) > 1)
        raise outputs.UsageError(f"--families: {safety.shown(twice)!r} is listed twice (it would be run twice); "
                                 "list each once")
    # the modes that print and stop read only some flags: any other given would be ignored
    reads = {"population": (), "lead_variants": ("laws", "families", "seed")}
    for mode, used in reads.items():
        if getattr(a, mode):
            flag = "--" + mode.replace("_", "-")
            ignored = [f"--{d.replace('_', '-')}" for d in ("laws", "reps", "n_seq", "seq_len", "seed", "families",
                                                           "out", "force", "lead_variants", "population")
                       if d != mode and d not in used and getattr(a, d) != p.get_default(d)]
            if ignored:
                raise outputs.UsageError(f"{flag} prints a table and stops: {', '.join(ignored)} would be ignored; "
                                         f"drop {ignored[0]} or {flag}")
    if a.population:
        print(population_table(_law_result(a.population)))
        return 0
    known = LAW_NULLS + LAW_POWER if a.laws else NULLS + POWER
    a.families = a.families or list(known)
    a.n_seq = a.n_seq if a.n_seq is not None else (16 if a.laws else 32)        # (0 is refused below)
    a.seq_len = a.seq_len if a.seq_len is not None else (512 if a.laws else 2048)
    outputs.positive("--reps", a.reps)
    outputs.positive("--n-seq", a.n_seq, lo=verdict.MIN_DOCS)
    outputs.positive("--seq-len", a.seq_len, lo=64)
    bad = [f for f in a.families if f not in known]
    if bad:
        raise outputs.UsageError(f"--families: unknown {bad}; known: {', '.join(known)}")
    if a.lead_variants:
        if not a.laws:
            raise outputs.UsageError("--lead-variants goes with --laws")
        print(lead_variants_table(lead_variants(a.families, a.seed)))
        return 0
    stem = "laws_calibration" if a.laws else "calibration"
    js = outputs.check_writable(os.path.join(a.out, stem + ".json"), force=a.force, what="--out")
    md = outputs.check_writable(os.path.join(a.out, stem + ".md"), force=a.force, what="--out")
    if a.laws:
        res = law_study(a.families, a.reps, a.n_seq, a.seq_len, a.seed, progress=True)
        text = law_tables(res, a.n_seq, a.seq_len)
        meta = dict(mus=list(LAW_MUS), eps=list(LAW_EPS), off=OFF, big_s=BIG_S, claim_max=headlaws.CLAIM_MAX)
    else:
        res = study(a.families, a.reps, a.n_seq, a.seq_len, a.seed, progress=True)
        text = table(res, a.n_seq, a.seq_len)
        meta = dict(mus=list(MUS))
    print(text)
    outputs.write_result(js, kind="calibration",
                         obj=dict(reps=a.reps, n_seq=a.n_seq, seq_len=a.seq_len, seed=a.seed, alpha=verdict.ALPHA,
                                  scale=SCALE, results=res, **meta))
    outputs.write_text(md, text + "\n")


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
