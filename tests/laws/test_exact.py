"""Tests of the exact first-passage numerics (exact.exact_first_passage): accuracy against closed forms and
independent computations, honesty of the returned error estimates, speed, and bad input.

References: closed forms (gamma X; scipy's incomplete gamma), brute-force enumeration for a few atoms, and two
values from an independent high-precision computation (quoted to the digits given; the comparison allows half a
unit of the last quoted digit on top of 1e-8 relative). The method is docs/THEORY.md section 5; the reference
numbers are docs/ANCHORS.md sections 2-4.
"""
import math
import time
import warnings

import numpy as np
import pytest

from conftest import CdfOnly
from foxwindow.laws import exact, gates, lattice, renewal
from foxwindow.laws.gates import BetaGate, ConstantGate, EmpiricalGate, GammaIncrement, LogitNormalGate


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


# ----------------------------------------------------------------------------- against closed forms


def test_closed_form_survival_dispatch():
    from scipy import stats
    L = renewal.threshold(1e-3)
    # Beta(a, 1): X ~ Exp(a), so N - 1 ~ Poisson(a L) and P(N > n) = P(Poisson(a L) >= n)
    s = exact.closed_form_survival(BetaGate(20.0, 1.0), L)
    n = np.arange(len(s))
    assert np.allclose(s, stats.poisson.sf(n - 1, 20.0 * L), rtol=1e-10, atol=1e-15)
    # ALiBi: P(N > n) = 1 up to n = W = floor(L/m), 0 after
    s = exact.closed_form_survival(ConstantGate(0.05), L)
    w = renewal.alibi_window(0.05, 1e-3)
    assert len(s) == w + 2 and s[:w + 1].min() == 1.0 and s[-1] == 0.0
    # gamma X: the full survival gives the moments of the closed-form branch of the exact numerics
    g = GammaIncrement(2.0, 0.07)
    s, ex = exact.closed_form_survival(g, L), exact.exact_first_passage(g, eps=1e-3)
    pmf = -np.diff(np.concatenate([s, [0.0]]))                               # P(W = w) = s_w - s_{w+1}
    mean = float(np.dot(np.arange(len(pmf)), pmf))
    assert abs(mean - ex.mean) <= 1e-10 * ex.mean and ex.method == "closed form"
    # no closed form: laws other than gamma/exponential/constant, including a gamma seen through its CDF only
    for g in (LogitNormalGate(2, 0.5), BetaGate(2.0, 3.0), CdfOnly(GammaIncrement(2.0, 0.07))):
        assert exact.closed_form_survival(g, L) is None


@pytest.mark.parametrize("k,kappa,eps", [(25.0, 1e-3, 1e-6), (25.0, 1e-3, 1e-5)])
def test_narrow_gamma_far_from_zero_matches_closed_form(k, kappa, eps):
    # L/kappa >= 1e4 and cv = 0.2: the regime where the old lattice (spacing from L) failed
    L = renewal.threshold(eps)
    assert L / kappa >= 1e4
    closed = exact.exact_first_passage(GammaIncrement(k, kappa / k), eps=eps)
    lat, dt = timed(lambda: exact.exact_first_passage(CdfOnly(GammaIncrement(k, kappa / k)), eps=eps))
    assert "Richardson" in lat.method and closed.method == "closed form"
    for got, want, err in ((lat.mean, closed.mean, lat.mean_err), (lat.var, closed.var, lat.var_err)):
        assert abs(got - want) <= err + 4e-15 * abs(want)           # + rounding of the closed form's own sum
        assert abs(got - want) <= 1e-8 * abs(want)
    assert lat.mean_err <= 1e-8 * lat.mean and lat.var_err <= 1e-8 * lat.var
    assert dt < 5


def test_exponential_through_the_lattice_matches_poisson():
    # Beta(20, 1) gives X ~ Exp(20): N - 1 ~ Poisson(20 L); the old lattice was off by 1.3e-4 here, in 14 s
    eps = 1e-12
    lam = 20 * renewal.threshold(eps)
    r, dt = timed(lambda: exact.exact_first_passage(CdfOnly(BetaGate(20, 1)), eps=eps))
    assert abs(r.mean - lam) <= max(r.mean_err, 1e-12 * lam) and abs(r.mean - lam) <= 1e-8 * lam
    assert abs(r.var - lam) <= max(r.var_err, 1e-12 * lam) and abs(r.var - lam) <= 1e-8 * lam
    assert dt < 5


@pytest.mark.parametrize("k", [0.3, 0.7])
def test_singular_density_within_an_honest_error_estimate(k):
    # gamma k < 1: density x^(k-1) unbounded at 0. The estimate must cover the true error and not exceed it 10x.
    eps, tol = 1e-3, 1e-5
    closed = exact.exact_first_passage(GammaIncrement(k, 0.2), eps=eps)
    with warnings.catch_warnings():
        warnings.simplefilter("error", exact.AccuracyWarning)      # tol must be met, not warned about
        r = exact.exact_first_passage(CdfOnly(GammaIncrement(k, 0.2)), eps=eps, tol=tol)
    for got, want, err in ((r.mean, closed.mean, r.mean_err), (r.var, closed.var, r.var_err)):
        true = abs(got - want)
        assert true <= err <= 10 * true, (k, got, want, err)
        assert err <= tol * abs(want)


# ----------------------------------------------------------------------------- independent references


def test_logit_normal_far_windows_match_high_precision_references():
    # (mu, s, eps, E[W], Var[W], decimals quoted)
    refs = [(6, 0.1, 1e-12, 11105.00616, 111.41253, 5), (2, 0.5, 1e-300, 4922.186296, 1137.139197, 6)]
    for mu, s, eps, mean, var, dec in refs:
        r, dt = timed(lambda: exact.exact_first_passage(LogitNormalGate(mu, s), eps=eps))
        half = 0.5 * 10.0 ** -dec
        assert abs(r.mean - mean) <= 1e-8 * mean + half, (mu, s, r.mean)
        assert abs(r.var - var) <= 1e-8 * var + half, (mu, s, r.var)
        assert r.mean_err <= 1e-8 * r.mean and r.var_err <= 1e-8 * r.var
        assert dt < 3, dt


def test_million_step_window_agrees_with_the_renewal_laws():
    # E[W] ~ 1e6 steps: the old lattice ran > 15 minutes. Here the renewal expansions (mean, Smith variance)
    # are exact to far below 1e-8 relative (L/kappa = 1e6), an independent check of both.
    g, eps = LogitNormalGate(12, 0.5), 1e-3
    r, dt = timed(lambda: exact.exact_first_passage(g, eps=eps))
    m, L = g.moments(), renewal.threshold(eps)
    assert r.mean > 9e5
    assert abs(renewal.renewal_mean(m, L) - 1 - r.mean) <= r.mean_err + 1e-9 * r.mean
    assert abs(renewal.smith_var(m, L) - r.var) <= r.var_err + 1e-8 * r.var
    assert r.n0 == 0 and len(r.survival) > r.mean                     # survival still from n = 0 here
    assert dt < 10


def _brute_force(x, L):
    """(E[W], Var[W]) for iid draws from the atoms x by enumerating count vectors with sum <= L."""
    u = np.unique(x)
    pr = np.array([np.mean(x == v) for v in u])
    cur, s = {(0,) * len(u): 1.0}, [1.0]
    while cur:
        nxt = {}
        for c, p in cur.items():
            for i in range(len(u)):
                c2 = c[:i] + (c[i] + 1,) + c[i + 1:]
                if float(np.dot(c2, u)) <= L:
                    nxt[c2] = nxt.get(c2, 0.0) + p * pr[i]
        cur = nxt
        s.append(sum(cur.values()))
    s = np.array(s)
    n = np.arange(len(s))
    EN = s.sum()
    return EN - 1, float(np.sum((2 * n + 1) * s) - EN * EN)


def test_atomic_law_matches_brute_force_enumeration():
    x = np.array([0.1307, 0.2931, 0.2931, 1.0719])
    L = 1.2 + 1 / 7
    mean, var = _brute_force(x, L)
    r, dt = timed(lambda: exact.exact_first_passage(EmpiricalGate(-x), eps=math.exp(-L), tol=1e-9))
    assert "exact sums" in r.method                          # three values: exact sums over counts
    # exact once the bracket closes; the remaining error is rounding of the inversion (1e-11 allowed on top)
    assert abs(r.mean - mean) <= r.mean_err + 1e-11
    assert abs(r.var - var) <= r.var_err + 1e-11
    assert dt < 10


def test_survival_is_a_law():
    # the logit-normal gates at 1e-3 left Richardson ripples of ~1e-13 (survival entries below 0 and rising,
    # hundreds of negative pmf entries) before the projection on construction
    for g, eps in ((LogitNormalGate(1, 1), 1e-2), (CdfOnly(GammaIncrement(2.0, 0.07)), 1e-4),
                   (LogitNormalGate(8, 0.5), 1e-3), (LogitNormalGate(5, 1), 1e-3), (LogitNormalGate(2, 0.5), 1e-3)):
        r = exact.exact_first_passage(g, eps=eps)
        s = r.survival
        assert s[0] == 1.0 and s[-1] == 0.0
        assert np.all(np.diff(s) <= 0.0) and np.all(s >= 0.0)
        p = r.pmf
        assert np.all(p >= 0.0)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert abs(float(p @ (r.offset + np.arange(len(p)))) - r.mean) <= r.mean_err + 1e-9 * r.mean
        assert r.var >= 0 and r.h > 0
        np.random.default_rng(0).choice(len(p), p=p)         # usable as a law as it stands


def test_monotone_projection_moves_nothing_further_from_a_nonincreasing_truth():
    rng = np.random.default_rng(3)
    truth = np.concatenate([np.ones(20), np.linspace(1, 0, 200) ** 3, np.zeros(30)])
    s = truth + rng.normal(0, 1e-13, truth.size)
    t, e1, e2 = lattice._monotone_survival(s, ebar=100.0)
    assert np.all(np.diff(t) <= 0) and t.min() >= 0.0 and t.max() <= 1.0
    assert np.max(np.abs(t - truth)) <= np.max(np.abs(s - truth))
    assert e1 == pytest.approx(np.abs(t - s).sum()) and e1 > 0 and e2 >= e1
    same, z1, z2 = lattice._monotone_survival(truth, ebar=100.0)
    assert same is not None and z1 == z2 == 0.0 and np.array_equal(same, truth)


# ----------------------------------------------------------------------------- tolerance not met


def test_unreachable_tolerance_warns_or_raises_with_the_achieved_error(monkeypatch):
    monkeypatch.setattr(lattice, "_MAX_LEVEL", 3)                  # refinement runs out after 4 lattices
    g = LogitNormalGate(2, 0.5)
    with pytest.warns(exact.AccuracyWarning, match=r"reached \|err E\[W\]\| <= "):
        r = exact.exact_first_passage(g, eps=1e-3, tol=1e-15)
    assert r.mean_err > 0 and r.var_err > 0
    with pytest.raises(exact.AccuracyError, match="tol 1e-15"):
        exact.exact_first_passage(g, eps=1e-3, tol=1e-15, strict=True)


# ----------------------------------------------------------------------------- long and lattice windows


def test_constant_gate_windows_without_allocation():
    r = exact.exact_first_passage(ConstantGate(1e-9), eps=1e-3)
    assert r.mean == math.floor(renewal.threshold(1e-3) / 1e-9) and r.var == 0
    assert len(r.survival) == 2 and r.n0 == int(r.mean)
    r = exact.exact_first_passage(ConstantGate(1e-300), eps=1e-3)
    assert r.n0 > 10 ** 300 and r.var == 0
    # an empirical law with a single value is a constant increment
    r = exact.exact_first_passage(EmpiricalGate(np.full(5, -0.05)), eps=1e-3)
    assert r.mean == 138 and r.var == 0


def test_alibi_window_is_exact_down_to_the_smallest_eps():
    assert renewal.alibi_window(0.05, 1e-3) == 138
    assert renewal.alibi_window(0.05, 5e-324) == math.floor(-math.log(5e-324) / 0.05)
    assert renewal.alibi_window(1e-320, 1e-3) > 10 ** 320                # beyond float range, exact int


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,exc,word", [
    (lambda: EmpiricalGate(np.zeros(10)), ValueError, "kappa = 0"),
    (lambda: exact.exact_first_passage(LogitNormalGate(40, 1), eps=1e-3), ValueError, "exceeds the cap"),
    (lambda: gates.first_passage_mc(LogitNormalGate(40, 1), eps=1e-3, trials=100), ValueError, "max_steps"),
    (lambda: gates.first_passage_mc(ConstantGate(1e-9), eps=1e-3, trials=100), ValueError, "max_steps"),
    (lambda: BetaGate(math.inf, 1), ValueError, "finite"),
    (lambda: BetaGate(1, math.nan), ValueError, "finite"),
    (lambda: GammaIncrement(math.inf, 1), ValueError, "finite"),
    (lambda: GammaIncrement(1, -1), ValueError, "theta"),
    (lambda: LogitNormalGate(math.nan, 1), ValueError, "finite"),
    (lambda: LogitNormalGate("2", 1), TypeError, "mu"),
    (lambda: ConstantGate(math.inf), ValueError, "slope"),
    (lambda: gates.first_passage_mc(LogitNormalGate(2, 0.5), eps=1e-3, trials=1), ValueError, "trials"),
    (lambda: gates.first_passage_mc(LogitNormalGate(2, 0.5), eps=1e-3, trials=2.5), ValueError, "trials"),
    (lambda: exact.exact_first_passage(LogitNormalGate(2, 0.5), eps=1e-3, tol=0), ValueError, "tol"),
    (lambda: renewal.alibi_window(0, 1e-3), ValueError, "slope"),
    (lambda: renewal.alibi_window(math.inf, 1e-3), ValueError, "slope"),
    (lambda: renewal.alibi_window(0.05, 0.0), ValueError, "eps"),
])
def test_bad_input_raises_at_once(call, exc, word):
    t = time.perf_counter()
    with pytest.raises(exc) as e:
        call()
    assert word in str(e.value)
    assert time.perf_counter() - t < 2


@pytest.mark.parametrize("eps", [0.999999, 0.999])
def test_eps_near_one_answers_at_once_within_its_bound(eps):
    """L far below the spread of X: the walk crosses at its first step up to q = F(L), and the returned error
    is the bound q/(1-q) from P(S_n <= L) <= q^n (X >= 0); no lattice of cells of width ~L is built."""
    for g in (LogitNormalGate(2, 0.5), LogitNormalGate(1, 1), LogitNormalGate(-2, 1)):
        t = time.perf_counter()
        r = exact.exact_first_passage(g, eps=eps)
        assert time.perf_counter() - t < 5
        q = float(g.cdf(np.array([gates.threshold(eps)]))[0])
        assert r.mean == 0.0 and r.mean_err == pytest.approx(q / (1 - q), rel=1e-12) and r.mean_err <= 1e-8
    # where F(L) is not negligible the lattice still answers, within its error of the closed form
    r = exact.exact_first_passage(GammaIncrement(0.5, 0.1), eps=eps)
    ref = exact.exact_first_passage(CdfOnly(GammaIncrement(0.5, 0.1)), eps=eps)
    assert abs(r.mean - ref.mean) <= r.mean_err + ref.mean_err + 1e-12
