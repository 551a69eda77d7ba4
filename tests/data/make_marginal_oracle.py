"""Writes tests/data/marginal_oracle.json: the exact first passage (`laws.exact.exact_first_passage`, tol 1e-4,
var_tol 1e-3) of iid increments with the empirical law of 20000 gamma(0.7, 0.4) draws (seed 0), at L = 1.0, 4.6
and 9.2: E[W], Var[W], their error estimates, P(W >= w) from n0 on and the 5/50/95% quantiles. The oracle takes
about 4 s of CPU per L (its finest lattices), so tests/heads/test_laws.py reads it from here.

    python tests/data/make_marginal_oracle.py
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from foxwindow import outputs  # noqa: E402
from foxwindow.laws import exact, gates  # noqa: E402

SAMPLE = dict(seed=0, shape=0.7, scale=0.4, n=20000)
LS = (1.0, 4.6, 9.2)
TOL, VAR_TOL = 1e-4, 1e-3
Q = (0.05, 0.5, 0.95)


def sample(seed, shape, scale, n):
    """The increments whose empirical law is the oracle's: (n,) float64 >= 0."""
    return np.random.default_rng(seed).gamma(shape, scale, n)


def oracle():
    x = sample(**SAMPLE)
    g = gates.EmpiricalGate(-x)
    out = []
    for L in LS:
        with warnings.catch_warnings():
            # at the finest lattice the oracle's Var[W] error estimate can exceed var_tol; it is recorded
            warnings.simplefilter("ignore", exact.AccuracyWarning)
            fp = exact.exact_first_passage(g, L=L, tol=TOL, var_tol=VAR_TOL)
        out.append(dict(L=L, mean=fp.mean, var=fp.var, mean_err=fp.mean_err, var_err=fp.var_err, n0=int(fp.offset),
                        survival=[float(s) for s in fp.survival], quantiles=[int(fp.quantile(q)) for q in Q]))
    return dict(sample=SAMPLE, tol=TOL, var_tol=VAR_TOL, q=list(Q), at=out)


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marginal_oracle.json")
    outputs.write_json(path, oracle())
    print(path)
