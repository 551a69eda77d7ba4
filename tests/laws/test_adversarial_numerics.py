"""Exact numerics off the happy path: near-constant atoms, very narrow gates, long bracketed walks and near-zero
window spread, each against a reference computed independently (exact rationals, closed forms, Monte Carlo)."""
import math
import warnings
from fractions import Fraction

import numpy as np
from scipy import special, stats

from foxwindow.laws import discrete, exact, gates

Z1 = 3.29                      # one check at alpha = 1e-3 (docs/THEORY.md section 6)


def _two_atom_moments(a, b, p, L):
    """E[W], Var[W] for X = a w.p. p, b otherwise (a < b), in exact rationals of the floats: S_n <= L iff the
    count k of a's is at least (n b - L) / (b - a)."""
    fa, fb, fL = Fraction(a), Fraction(b), Fraction(L)
    s, n = [], 0
    while True:
        kmin = max(math.ceil((n * fb - fL) / (fb - fa)), 0)
        sn = float(stats.binom.sf(kmin - 1, n, p)) if kmin <= n else 0.0
        s.append(sn)
        if n * fa > fL:
            break
        n += 1
    s = np.array(s)
    e1 = s.sum()
    return e1 - 1.0, float(np.sum((2 * np.arange(len(s)) + 1) * s) - e1 * e1)


def test_empirical_constant_law_at_ties():
    # three equal increments: the mean of the atoms is off the value by an ulp, and a variance from raw moments
    # rounds below 0; the window is floor(L / v) in exact rationals, ties included
    v = 0.1
    g = gates.EmpiricalGate(-np.full(3, v))
    for k in range(1, 40):
        L = k * v
        fp = exact.exact_first_passage(g, L=L)
        assert fp.mean == math.floor(Fraction(L) / Fraction(v)), (k, L, fp.mean)
        assert fp.var == 0.0


def test_two_nearly_equal_atoms_are_not_a_constant():
    # atoms 1 and 1 + 1e-12: Var X ~ 2e-25 cancels to 0 in raw moments; the window still has a spread
    x = np.repeat([1.0, 1.0 + 1e-12], [2, 5])
    g = gates.EmpiricalGate(-x)
    a, b = np.unique(g.x)
    ref_mean, ref_var = _two_atom_moments(float(a), float(b), 2 / 7, 10.0)
    fp = exact.exact_first_passage(g, L=10.0)
    assert ref_var > 1e-6
    assert abs(fp.mean - ref_mean) <= fp.mean_err + 1e-12
    assert abs(fp.var - ref_var) <= fp.var_err + 1e-12


def test_narrow_logit_normal_variance():
    # Var X = (s sigmoid(-mu))^2 (1 + O(s^2)): raw moments lost it (5% off at s = 1e-7, below 0 at 1e-9)
    for s in (1e-9, 1e-7, 1e-6, 1e-4):
        m = gates.LogitNormalGate(2, s).moments()
        ref = (s * special.expit(-2.0)) ** 2
        assert abs(m.sigma2 / ref - 1) <= 1e-6, (s, m.sigma2, ref)


def test_narrow_logit_normal_window_spread():
    # s = 1e-9 with L one sd of S_n above n kappa: W is n - 1 or n with P(W = n) = Phi(1) (S_n Gaussian to
    # far below the tolerance); the float L and kappa's rounding put z within ~1e-6 of 1, hence 1e-6 on Var[W]
    g = gates.LogitNormalGate(2, 1e-9)
    m = g.moments()
    n = 54
    L = n * m.kappa + math.sqrt(n * m.sigma2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exact.AccuracyWarning)
        fp = exact.exact_first_passage(g, L=L)
    p = stats.norm.cdf(1.0)
    assert abs(fp.mean - (n - 1 + p)) <= fp.mean_err + 1e-6
    assert abs(fp.var - p * (1 - p)) <= fp.var_err + 1e-6


def _sixty_four_values():
    rng = np.random.default_rng(5)
    rng.uniform(0.05, 0.3, 64)
    return rng.uniform(0.05, 0.3, 64)


def test_bracketed_walk_covers_long_windows():
    # 64 values with no common step at eps = 1e-30 (about 390 steps): roundings below the values move the upper
    # bound's threshold past L / h, where a walk cut at L / h undercounted it (E[W] off 5.8, bound 5.1)
    x = _sixty_four_values()
    L = 30 * math.log(10)
    law = discrete.DiscreteLaw.from_samples(x)
    n0, s, err, tails, _ = discrete.bracket_survival(law, L)
    EN, VN, dE, dV = discrete._moments(s, n0, err)
    mc = gates.first_passage_mc(gates.EmpiricalGate(-x), L=L, trials=100_000, seed=1)
    assert abs(EN - 1 - mc.mean) <= dE + tails[0] + Z1 * mc.se_mean


def test_many_atoms_long_window_error_covers():
    x = _sixty_four_values()
    g = gates.EmpiricalGate(-x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exact.AccuracyWarning)
        fp = exact.exact_first_passage(g, eps=1e-30)
    mc = gates.first_passage_mc(g, eps=1e-30, trials=100_000, seed=1)
    z = 3.66                                               # two checks (Bonferroni)
    assert abs(fp.mean - mc.mean) <= fp.mean_err + z * mc.se_mean
    assert abs(fp.var - mc.var) <= fp.var_err + z * mc.se_var


def test_markov_variance_not_negative():
    # a near-constant AR(1) gate: W is 36 with probability ~1, and the extrapolated variance fell below 0
    r = exact.markov_first_passage(gates.AR1LogitGate(2, 1e-3, 0.9), eps=1e-2)[0]
    assert r.var >= 0.0
    assert abs(r.var) <= r.var_err
