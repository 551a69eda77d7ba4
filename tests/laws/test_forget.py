"""Tests of foxwindow.laws.gates: decay matrices, per-query windows, gate laws and their quadrature moments,
Monte Carlo first-passage times and the checks on bad input.

Statistical checks compare Monte Carlo estimates with moments computed from the distribution (exact
numerics or quadrature), never from the samples under test, at |estimate - law| <= z * SE with z
Bonferroni-corrected over the checks in one test (docs/THEORY.md section 6). Seeds are fixed.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from conftest import bonferroni_z
from foxwindow.laws import exact, gates, renewal
from foxwindow.laws.gates import (
    SEED_GATES,
    AR1LogitGate,
    BetaGate,
    ConstantGate,
    GammaIncrement,
    LogitNormalGate,
    threshold,
)

# ----------------------------------------------------------------------------- decay and windows

log_gate_values = st.one_of(
    st.just(0.0),                                                   # gate exactly 1
    st.floats(-1e-6, 0.0),                                          # gates near 1
    st.floats(-3.0, 0.0),
    st.floats(-60.0, -5.0),                                         # extreme forgetting
)


@settings(max_examples=60, deadline=None)
@given(st.lists(log_gate_values, min_size=1, max_size=40))
def test_decay_is_monotone_in_distance(lg):
    D = gates.decay_matrix(np.array(lg))
    T = len(lg)
    assert np.all(np.diag(D) == 1.0)
    assert np.all(D[np.triu_indices(T, 1)] == 0.0)
    for i in range(T):
        row = D[i, : i + 1][::-1]                                   # distance 0, 1, ..., i
        assert np.all(np.diff(row) <= 0.0)


def brute_windows(lg, eps):
    """W_i by scanning every key, on the same float64 cumulative sums the fast path uses."""
    L = threshold(eps)
    c = np.concatenate([[0.0], np.cumsum(-np.asarray(lg, dtype=np.float64))])
    T = len(lg)
    W = np.zeros(T, dtype=np.int64)
    cens = np.zeros(T, dtype=bool)
    for i in range(1, T + 1):
        d = 0
        while d < i and c[i] - c[i - d - 1] <= L:                  # key at distance d+1 within eps
            d += 1
        W[i - 1] = d
        cens[i - 1] = c[i] <= L
    return W, cens


@settings(max_examples=80, deadline=None)
@given(st.lists(log_gate_values, min_size=1, max_size=60), st.floats(1e-9, 0.99))
def test_windows_match_brute_force(lg, eps):
    W, cens = gates.windows(np.array(lg), eps=eps)
    Wb, cb = brute_windows(lg, eps)
    np.testing.assert_array_equal(W, Wb)
    np.testing.assert_array_equal(cens, cb)
    # censored rows see the whole prefix: W_i = i (distance to the virtual key before the trace)
    assert np.all(W[cens] == np.arange(1, len(lg) + 1)[cens])


def test_windows_single_position_and_gate_one():
    W, c = gates.windows(np.array([0.0]), eps=1e-3)
    assert W.tolist() == [1] and c.tolist() == [True]
    W, c = gates.windows(np.array([-10.0]), eps=1e-3)                  # X > L: nothing beyond the query
    assert W.tolist() == [0] and c.tolist() == [False]
    W, c = gates.windows(np.zeros(50), eps=0.5)                        # gates equal to 1 never forget
    assert c.all() and W.tolist() == list(range(1, 51))


def test_windows_batched_torch_matches_numpy():
    rng = np.random.default_rng(0)
    lg = np.log(rng.beta(8, 1, size=(2, 300, 3))).astype(np.float32)   # (B, T, H)
    Wt, ct = gates.windows(torch.from_numpy(lg), eps=1e-2, dim=1)
    assert Wt.shape == (2, 300, 3) and Wt.dtype == torch.int64
    for b in range(2):
        for h in range(3):
            Wn, cn = gates.windows(lg[b, :, h], eps=1e-2)
            np.testing.assert_array_equal(Wt[b, :, h].numpy(), Wn)
            np.testing.assert_array_equal(ct[b, :, h].numpy(), cn)


def test_alibi_trace_windows_are_integer():
    for m, expect in ((0.05, 138), (0.1, 69)):
        W, c = gates.windows(np.full(1000, -m), eps=1e-3)
        assert renewal.alibi_window(m, 1e-3) == expect
        assert np.all(W[~c] == expect) and np.all(W[expect + 1:] == expect)


# ----------------------------------------------------------------------------- moments by quadrature


@pytest.mark.parametrize("gate", list(SEED_GATES) + [BetaGate(3, 2), BetaGate(20, 1), GammaIncrement(2, 0.1)])
def test_moments_match_cdf_integrals(gate):
    # E X = int (1 - F), E X^2 = int 2x (1 - F), E X^3 = int 3x^2 (1 - F): an independent quadrature
    m = gate.moments()
    raw = [integrate.quad(lambda x: k * x ** (k - 1) * (1 - gate.cdf(np.array([x]))[0]), 0, np.inf,
                          epsabs=1e-13, epsrel=1e-11, limit=400)[0] for k in (1, 2, 3)]
    np.testing.assert_allclose([m.kappa, m.mu2, m.mu3], raw, rtol=1e-8)
    assert m.sigma2 == pytest.approx(m.mu2 - m.kappa ** 2, rel=1e-12)


def test_ar1_autocovariance_is_consistent():
    g = AR1LogitGate(2, 0.5, 0.7)
    m = g.moments()
    gam = g.autocovariance([0, 1, 5])
    assert gam[0] == pytest.approx(m.sigma2, rel=1e-9)             # Hermite series vs quadrature
    assert gam[0] > gam[1] > gam[2] > 0
    s1, _ = g.dependence_sums()
    assert s1 == pytest.approx(g.autocovariance(np.arange(1, 400)).sum(), rel=1e-9)


# ----------------------------------------------------------------------------- Monte Carlo vs laws


def test_monte_carlo_matches_exact_moments_and_wald():
    z = bonferroni_z(3 * len(SEED_GATES))
    for i, gate in enumerate(SEED_GATES):
        eps, n = 1e-3, 200_000
        W, R = gates.first_passage_samples(gate, eps=eps, trials=n, seed=10 + i)
        ex = exact.exact_first_passage(gate, eps=eps)
        w = W.astype(float)
        mean, var = w.mean(), w.var(ddof=1)
        se_mean = math.sqrt(var / n)
        se_var = math.sqrt((np.mean((w - mean) ** 4) - var ** 2) / n)
        assert abs(mean - ex.mean) <= z * se_mean, (gate, mean, ex.mean, se_mean)
        assert abs(var - ex.var) <= z * se_var, (gate, var, ex.var, se_var)
        # Wald's identity, exact: E[N] = (L + E[R]) / kappa, per trial d = N - (L + R)/kappa has mean 0
        kappa = gate.moments().kappa
        d = (w + 1) - renewal.wald_mean(kappa, threshold(eps), R)
        assert abs(d.mean()) <= z * d.std() / math.sqrt(n)
        assert np.all(R > 0)


def test_monte_carlo_mc_result_and_alibi():
    r = gates.first_passage_mc(ConstantGate(0.1), eps=1e-3, trials=1000, seed=0)
    assert r.mean == 69 and r.var == 0
    r = gates.first_passage_mc(BetaGate(10, 1), eps=1e-2, trials=100_000, seed=3)
    lam = 10 * threshold(1e-2)                                      # Poisson: mean = var = lam
    z = bonferroni_z(2)
    assert abs(r.mean - lam) <= z * r.se_mean and abs(r.var - lam) <= z * r.se_var


def test_se_of_var_is_not_zero_on_a_two_point_law():
    # +-1 of equal masses: m4 = s^4 (the delta method's SE is exactly 0), yet Var(s^2) = 2 sigma^4 / (n (n - 1))
    for n in (10, 50, 1000):
        w = np.repeat([-1.0, 1.0], n // 2)
        exact = math.sqrt(2.0 / (n * (n - 1)))
        assert gates.se_of_var(w) == pytest.approx(exact, rel=1e-12)
    # random samples of that law (unequal counts): never 0, where the delta method's SE was 0 on a third of them,
    # and not below the replicates' sd of s^2 (the plug-in's m4 / m2^2 - 1 is >= 0 there: it errs upwards)
    rng = np.random.default_rng(0)
    w = rng.integers(0, 2, size=(4000, 40)) * 2.0 - 1.0
    s2 = w.var(axis=1, ddof=1)
    se = np.array([gates.se_of_var(row) for row in w])
    m4 = np.mean((w - w.mean(1, keepdims=True)) ** 4, axis=1)
    assert np.mean(m4 - s2 * s2 <= 0) > 0.3 and np.all(se > 0)
    sd = s2.std(ddof=1)
    sd_se = sd * math.sqrt((np.mean((s2 - s2.mean()) ** 4) / sd ** 4 - 1) / (4 * len(s2)))   # delta method, sd
    assert se.mean() >= sd - 4 * math.hypot(sd_se, se.std(ddof=1) / math.sqrt(len(se)))


def test_monte_carlo_is_seeded_and_chunked():
    g = SEED_GATES[1]
    a, _ = gates.first_passage_samples(g, eps=1e-3, trials=5000, seed=7, chunk=2000)
    b, _ = gates.first_passage_samples(g, eps=1e-3, trials=5000, seed=7, chunk=2000)
    np.testing.assert_array_equal(a, b)
    c, _ = gates.first_passage_samples(g, eps=1e-3, trials=5000, seed=7, chunk=1 << 20)
    assert len(c) == 5000 and abs(c.mean() - a.mean()) < 1.0      # same law, different streams
    for bad in (0, -5, 1.5, True):                                  # 0 is not "the default"
        with pytest.raises(ValueError, match="chunk must be None or an integer >= 1"):
            gates.first_passage_samples(g, eps=1e-3, trials=10, seed=7, chunk=bad)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,word", [
    (lambda: gates.increments_from_gates(np.array([0.5, 0.0])), "(0, 1]"),
    (lambda: gates.increments_from_gates(np.array([0.5, 1.5])), "(0, 1]"),
    (lambda: gates.increments_from_gates(np.array([0.5, np.nan])), "NaN"),
    (lambda: gates.increments_from_log_gates(np.array([-0.1, 0.2])), "<= 0"),
    (lambda: gates.increments_from_log_gates(np.array([-0.1, np.nan])), "NaN"),
    (lambda: gates.increments_from_log_gates(np.array([-0.1, -np.inf])), "infinite"),
    (lambda: gates.windows(np.array([]), eps=1e-3), "empty"),
    (lambda: gates.windows(np.zeros((3, 0)), eps=1e-3), "empty"),
    (lambda: gates.windows(np.array(["a", "b"]), eps=1e-3), "dtype"),
    (lambda: gates.windows(torch.zeros(4, dtype=torch.int64), eps=1e-3), "floating"),
    (lambda: gates.windows(np.zeros(4), eps=0.0), "eps"),
    (lambda: gates.windows(np.zeros(4), eps=1.0), "eps"),
    (lambda: gates.windows(np.zeros(4), eps=float("nan")), "eps"),
    (lambda: exact.exact_first_passage(SEED_GATES[0], eps=-1), "eps"),
    (lambda: exact.exact_first_passage(AR1LogitGate(2, 0.5, 0.5), eps=1e-3), "dependent"),
    (lambda: gates.first_passage_mc(SEED_GATES[0], eps=1e-3, trials=0), "trials"),
    (lambda: gates.first_passage_mc(SEED_GATES[0], eps=1e-3, trials=10, seed=-1), "seed must be an integer >= 0"),
    (lambda: gates.first_passage_mc(SEED_GATES[0], eps=1e-3, trials=10, seed="a"), "seed must be an integer >= 0"),
    (lambda: gates.first_passage_samples(SEED_GATES[0], eps=1e-3, trials=10, seed=1.5), "seed"),
    (lambda: LogitNormalGate(0, -1), "s > 0"),
    (lambda: BetaGate(0, 1), "a > 0"),
    (lambda: ConstantGate(0), "slope"),
    (lambda: AR1LogitGate(0, 1, 1.0), "phi"),
    (lambda: gates.EmpiricalGate(np.array([])), "empty"),
    (lambda: gates.decay_matrix(np.zeros((2, 2))), "(T,)"),
    (lambda: renewal.acf(np.ones(10), 3), "constant"),
])
def test_bad_input_raises_clear_errors(call, word):
    with pytest.raises(ValueError) as e:
        call()
    assert word in str(e.value)


def test_empirical_gate_moments_are_the_trace_moments():
    rng = np.random.default_rng(1)
    lg = np.log(rng.beta(10, 1, 5000))
    g = gates.EmpiricalGate(lg)
    m = g.moments()
    x = -lg
    assert m.kappa == pytest.approx(x.mean()) and m.sigma2 == pytest.approx(x.var())
    ex = exact.exact_first_passage(g, eps=1e-2)                       # the empirical law's exact window
    r = gates.first_passage_mc(g, eps=1e-2, trials=50_000, seed=2)
    z = bonferroni_z(1)
    assert abs(r.mean - ex.mean) <= z * r.se_mean + 0.01           # + lattice error of an atomic law (O(h))


def test_thresholds_given_as_L_equal_eps():
    """L = ln(1/eps) is accepted wherever eps is (gates.level: exactly one of them), with the same result."""
    lg = np.log(np.random.default_rng(3).beta(8, 1, (3, 200)))
    eps = 1e-3
    W1, c1 = gates.windows(lg, eps=eps)
    W2, c2 = gates.windows(lg, L=math.log(1 / eps))
    assert np.array_equal(W1, W2) and np.array_equal(c1, c2)
    g = SEED_GATES[0]
    a, b = exact.exact_first_passage(g, eps=eps), exact.exact_first_passage(g, L=math.log(1 / eps))
    assert a.mean == b.mean and a.var == b.var
    for kw in (dict(eps=0.1, L=2.0), dict(), dict(L=-1.0), dict(L=float("nan"))):
        with pytest.raises(ValueError):
            gates.level(**kw)
