"""Writes tests/report/data/heads_schema1.json: a small per-head result of schema 1 from a simulation whose
truth is known (2 layers x 2 heads of independent gamma increments, 4 eps), so the report's drawing code
meets every field: every law's curve and pmf, each of the four states, tau(n) with a levelling point, a
decay and an attention-mass window (layer 0 only), the out-of-sample score of the reference.

    python tests/report/make_golden.py          (rewrites the file; the tests read the committed one)

The numbers are self-consistent, not a model's: "measured" is one simulation, "bootstrap" a second one,
"iid" the renewal law, "dependent" the same law with tau(n) = 1.5 on head 1.1 (so it is false there),
"edgeworth" (the lead law here) a normal pmf with the law's moments, undetermined on head 1.0."""
import json
import math
import os
import sys

import numpy as np

EPS = (0.1, 0.01, 1e-3, 1e-4)
# layer, head, kappa, sigma2
HEADS = [("0", 0, 0.9, 0.6), ("0", 1, 0.25, 0.08), ("1", 0, 0.08, 0.01), ("1", 1, 0.4, 0.3)]
WALKS = 3000
PMF_EPS = 1e-3
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "heads_schema1.json")


def windows(rng, kappa, sigma2, Ls):
    """W = N - 1 (increments before the walk first reaches L) for WALKS walks at each L."""
    shape, scale = kappa ** 2 / sigma2, sigma2 / kappa
    steps = int(max(Ls) / kappa * 2 + 60)
    S = np.cumsum(rng.gamma(shape, scale, size=(WALKS, steps)), axis=1)
    return {L: (S < L).sum(axis=1) for L in Ls}


def moments(w):
    n = len(w)
    m, v = float(w.mean()), float(w.var(ddof=1))
    m4 = float(((w - m) ** 4).mean())
    return m, v, math.sqrt(v / n), math.sqrt(max(m4 - v * v * (n - 3) / (n - 1), 1e-12) / n)


def normal_pmf(mean, var, lo, hi):
    from scipy import stats
    x = np.arange(lo, hi + 1)
    sd = math.sqrt(max(var, 1e-9))
    p = stats.norm.cdf(x + 0.5, mean, sd) - stats.norm.cdf(x - 0.5, mean, sd)
    return {"offset": int(lo), "p": [round(float(v), 6) for v in p]}


def empirical_pmf(w):
    lo, hi = int(w.min()), int(w.max())
    counts = np.bincount(w - lo, minlength=hi - lo + 1)
    return {"offset": lo, "p": [round(float(c) / len(w), 6) for c in counts]}


def q(w):
    return {k: float(np.quantile(w, float(k))) for k in ("0.05", "0.5", "0.95")}


def state(L, kappa, meas_v, meas_se, law_v):
    if L / kappa < 4:
        return "not claimed", f"L/kappa = {L / kappa:.1f} < 4 steps"
    z = (meas_v - law_v) / meas_se
    if abs(z) > 4:
        return "false", f"Var[W] off by z = {z:.1f}"
    if meas_se > 0.1 * law_v:
        return "undetermined", "the test's band exceeds 10% of the law"
    return "holds", f"within z = {z:.1f}"


def head_record(rng, layer, head, kappa, sigma2):
    Ls = [math.log(1 / e) for e in EPS]
    meas, boot = windows(rng, kappa, sigma2, Ls), windows(rng, kappa, sigma2, Ls)
    tau = 1.5 if (layer, head) == ("1", 1) else 1.0
    at = []
    for e, L in zip(EPS, Ls):
        m, v, mse, vse = moments(meas[L])
        bm, bv, _, _ = moments(boot[L])
        iid_mean = L / kappa + (sigma2 + kappa ** 2) / (2 * kappa ** 2) - 1
        iid_var = sigma2 * L / kappa ** 3 + max(0.0, (5 * sigma2 ** 2 / (4 * kappa ** 4)) - sigma2 / (2 * kappa ** 2))
        laws = {}
        for name, mean, var in (("iid", iid_mean, iid_var), ("dependent", iid_mean, iid_var * tau),
                                ("edgeworth", iid_mean, iid_var)):
            st, why = state(L, kappa, v, vse, var)
            if name == "edgeworth" and (layer, head) == ("1", 0) and st == "holds":
                st, why = "undetermined", "the test's band is too wide here"
            laws[name] = {"mean": mean, "var": var, "quantiles": None, "var_ratio": v / var,
                          "var_ratio_ci": [(v - 2 * vse) / var, (v + 2 * vse) / var], "state": st,
                          "claim": 0.1 if st != "not claimed" else None, "why": why}
        laws["bootstrap"] = {"mean": bm, "var": bv, "quantiles": q(boot[L]), "var_ratio": v / bv,
                             "var_ratio_ci": None, "state": "not claimed", "claim": None, "why": "the reference",
                             "oos": {"coverage": round(0.9 + 0.01 * rng.standard_normal(), 4), "coverage_se": 0.01,
                                     "z_mean": round(float(rng.standard_normal()), 3),
                                     "z_var": round(float(rng.standard_normal()), 3), "censored_share": 0.0}}
        at.append({"eps": e, "L": L, "measured": {"mean": m, "var": v, "mean_se": mse, "var_se": vse,
                                                  "censored_share": 0.0, "quantiles": q(meas[L])}, "laws": laws})
    Lp = math.log(1 / PMF_EPS)
    w = meas[Lp]
    rec = next(a for a in at if a["eps"] == PMF_EPS)
    lo, hi = int(w.min()), int(w.max())
    pmf = {"eps": PMF_EPS, "L": Lp, "measured": empirical_pmf(w),
           "laws": {"iid": normal_pmf(rec["laws"]["iid"]["mean"], rec["laws"]["iid"]["var"], lo, hi),
                    "edgeworth": normal_pmf(rec["laws"]["edgeworth"]["mean"], rec["laws"]["edgeworth"]["var"], lo, hi),
                    "bootstrap": empirical_pmf(boot[Lp])}}
    n = [2 ** k for k in range(10)]
    tau_n = [1.0] + [round(tau - (tau - 1) * 0.5 ** k + 0.01 * rng.standard_normal(), 4) for k in range(1, 10)]
    st = {name: [a["laws"][name]["state"] for a in at] for name in ("iid", "dependent", "edgeworth")}
    holds = next((name for name in ("iid", "dependent", "edgeworth") if "holds" in st[name]), None)
    false = [name for name in st if "false" in st[name]]
    return {"layer": layer, "head": head, "label": f"{layer}.{head}", "kappa": kappa, "sigma2": sigma2, "tau": tau,
            "tau_se": 0.03,
            "summary": {"mean_law": holds, "var_law": holds, "false": false,
                        "text": (f"{holds} holds" if holds else "no law claimed") +
                                (f"; {', '.join(false)} false" if false else "")},
            "dependence": {"n": n, "tau_n": tau_n, "tau_n_se": [0.0] + [0.02] * 9, "levelled_at": 8},
            "mass": ({"eps": PMF_EPS, "decay_window": rec["measured"]["mean"],
                      "mass_window": rec["measured"]["mean"] * 1.03} if layer == "0" else
                     {"eps": PMF_EPS, "decay_window": rec["measured"]["mean"], "mass_window": None}),
            "at": at, "pmf": pmf}


def build(seed=0):
    rng = np.random.default_rng(seed)
    return {"schema_version": 1, "foxwindow_version": "0.3.0", "kind": "heads",
            "source": {"what": "synthetic", "path": None, "family": "fox", "unit": "head", "n_seq": WALKS,
                       "seq_len": 2048, "seed": seed, "split": "held-out"},
            "lead_law": "edgeworth", "alpha": 0.05,
            "laws": {"iid": {"label": "two-moment renewal law", "description": "sigma^2 L / kappa^3 + C"},
                     "dependent": {"label": "tau-adjusted", "description": "tau(n) sigma^2 L / kappa^3"},
                     "edgeworth": {"label": "Edgeworth <lead>", "description": "few statistics & a <b>tag</b>"},
                     "bootstrap": {"label": "bootstrap", "description": "the reference resampler"}},
            "heads": [head_record(rng, *h) for h in HEADS]}


if __name__ == "__main__":
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        json.dump(build(), fh, indent=None, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)
