"""Tests of the dependent-increment window laws and the exact Markov-additive numerics (renewal.py, exact.py).

Law moments come from the gate's law (Hermite sums, the chain's fundamental matrix, exact numerics),
never from the samples under test; statistical checks use z * SE with z Bonferroni-corrected over the
checks in one test (docs/THEORY.md sections 4 and 6; AR(1) numbers in docs/ANCHORS.md section 5). Seeds are
fixed. The measured error table itself is dependent_errors.py's.
"""
import json
import math

import numpy as np
import pytest

from conftest import bonferroni_z
from foxwindow.laws import dependent_errors, exact, gates, renewal
from foxwindow.laws.gates import AR1LogitGate, LogitNormalGate, threshold


def _eps(gate, ratio):
    """eps at which L/kappa = ratio."""
    return math.exp(-ratio * gate.moments().kappa)


# ----------------------------------------------------------------------------- API: values, regime, validation

PHI_GRID = (-0.9, -0.5, 0.0, 0.5, 0.9, 0.97, 0.99)
RATIO_GRID = (0.1, 0.5, 1, 3, 10, 30, 100, 1000)


@pytest.fixture(scope="module")
def long_runs():
    return {phi: (AR1LogitGate(2, 0.5, phi), exact.ar1_long_run(AR1LogitGate(2, 0.5, phi))) for phi in PHI_GRID}


def test_no_law_returns_a_negative_or_nan_variance(long_runs):
    n_out = 0
    for phi, (g, lr) in long_runs.items():
        gamma = g.autocovariance(np.arange(int(max(RATIO_GRID)) + 2))
        for r in RATIO_GRID:
            L = r * lr.kappa
            assert renewal.dependent_var(lr.kappa, lr.sigma2_lr, L) > 0
            fin = renewal.finite_n_var(lr.kappa, gamma, L)
            assert math.isfinite(fin) and fin > 0
            assert math.isfinite(renewal.dependent_mean_N(lr.kappa, lr.sigma2_lr, L))
            for which, law in (
                    ("bartlett", lambda: renewal.bartlett_var(lr.kappa, lr.sigma2_lr, lr.sum_k_gamma_k, L)),
                    ("bartlett3", lambda: renewal.bartlett_var(lr.kappa, lr.sigma2_lr, lr.sum_k_gamma_k, L,
                                                               lr.kappa3_lr)),
                    ("second", lambda: renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr,
                                                                lr.sum_k_gamma_k, L))):
                try:
                    v = law()
                except renewal.OutsideRegime as e:           # the documented alternative to a negative value
                    assert "regime" in str(e) and "L/kappa" in str(e)
                    n_out += 1
                    continue
                assert math.isfinite(v.var) and v.var > 0
                assert v.var == pytest.approx(v.leading + v.constant)
                fraction = abs(v.constant) <= renewal.REGIME_FRACTION * v.leading
                if which == "second":                          # 5 correlation lengths: max(|C|, |Bartlett|)
                    ell = max(abs(v.constant), abs(renewal.bartlett_correction(lr.sum_k_gamma_k, lr.kappa)))
                    assert v.in_regime == (ell <= v.leading / renewal.SECOND_ORDER_MULT)
                    assert not v.in_regime or fraction
                elif which == "bartlett":                     # without kappa3_lr the omitted part is unknown
                    assert not v.in_regime
                else:
                    assert not v.in_regime or fraction
    assert n_out > 0                                         # the grid does reach outside the regime


def test_outside_regime_raises_and_flags():
    g = AR1LogitGate(2, 0.5, 0.97)
    lr = exact.ar1_long_run(g)
    # measured: at L/kappa = 10 (0.16 tau) both expansions are negative
    with pytest.raises(renewal.OutsideRegime):
        renewal.bartlett_var(lr.kappa, lr.sigma2_lr, lr.sum_k_gamma_k, 10 * lr.kappa)
    with pytest.raises(ValueError, match="regime"):          # OutsideRegime is a ValueError
        renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k, 10 * lr.kappa)
    # positive but flagged at L/kappa = 50 (0.8 tau) and 200 (4.9 correlation lengths of 40.8 steps), in regime
    # at 250 (6.1 lengths)
    for n, ok in ((50, False), (200, False), (250, True)):
        assert renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k,
                                        n * lr.kappa).in_regime == ok


@pytest.mark.parametrize("phi", [1.0, -1.0, 1.5, float("nan")])
def test_phi_outside_unit_interval_is_rejected(phi):
    with pytest.raises(ValueError, match="phi"):
        AR1LogitGate(2, 0.5, phi)


@pytest.mark.parametrize("fn,arg", [
    (lambda: renewal.dependent_var(0.0, 1.0, 1.0), "kappa"),
    (lambda: renewal.dependent_var(-0.1, 1.0, 1.0), "kappa"),
    (lambda: renewal.dependent_var(0.1, 1.0, 0.0), "L"),
    (lambda: renewal.dependent_var(0.1, 1.0, -2.0), "L"),
    (lambda: renewal.dependent_var(0.1, -1.0, 2.0), "sigma2_lr"),
    (lambda: renewal.dependent_var(float("nan"), 1.0, 2.0), "kappa"),
    (lambda: renewal.dependent_mean_N(0.0, 1.0, 1.0), "kappa"),
    (lambda: renewal.dependent_mean_N(0.1, 1.0, -1.0), "L"),
    (lambda: renewal.long_run_variance(-1.0, 2.0), "sigma2"),
    (lambda: renewal.bartlett_correction(1.0, 0.0), "kappa"),
    (lambda: renewal.bartlett_var(0.1, 1.0, 0.5, 0.0), "L"),
    (lambda: renewal.second_order_var(-0.1, 1.0, 0.5, 0.5, 1.0), "kappa"),
    (lambda: renewal.second_order_var(0.1, 1.0, 0.5, 0.5, float("inf")), "L"),
    (lambda: renewal.finite_n_var(0.0, [1.0], 1.0), "kappa"),
    (lambda: renewal.finite_n_var(0.1, [1.0], -1.0), "L"),
    (lambda: renewal.finite_n_var(0.1, [[1.0]], 1.0), "gamma"),
    (lambda: renewal.finite_n_var(0.1, [1.0, -0.9, 0.0], 1.0), "autocovariance"),   # Var(S_2) < 0
    (lambda: exact.markov_first_passage(AR1LogitGate(2, 0.5, 0.5), eps=1.5), "eps"),
    (lambda: exact.markov_first_passage(AR1LogitGate(2, 0.5, 0.5), eps=1e-3, cells_per_kappa=1), "cells_per_kappa"),
    (lambda: exact.markov_first_passage(AR1LogitGate(2, 0.5, 0.5), eps=[]), "eps"),
])
def test_bad_input_names_the_argument(fn, arg):
    with pytest.raises(ValueError, match=arg):
        fn()


def test_markov_numerics_need_an_ar1_gate():
    with pytest.raises(TypeError, match="AR1LogitGate"):
        exact.markov_first_passage(LogitNormalGate(2, 0.5), eps=1e-3)


# ----------------------------------------------------------------------------- the laws' ingredients


def test_long_run_cumulants_reduce_to_the_marginal_ones_at_phi_0():
    g = AR1LogitGate(2, 0.5, 0.0)
    lr, m = exact.ar1_long_run(g), g.moments()
    assert lr.tau == pytest.approx(1.0, abs=1e-12) and lr.sum_k_gamma_k == pytest.approx(0.0, abs=1e-15)
    k3 = m.mu3 - 3 * m.kappa * m.mu2 + 2 * m.kappa ** 3                 # third central moment, by quadrature
    assert lr.kappa3_lr == pytest.approx(k3, rel=1e-9)
    # and the second-order constant is Smith's
    assert renewal.second_order_constant(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, 0.0) == pytest.approx(
        renewal.smith_C(m), rel=1e-9)


@pytest.mark.parametrize("phi", [-0.5, 0.5, 0.9])
def test_long_run_variance_two_ways(phi):
    # Hermite closed form (the gate) against the chain's fundamental matrix: independent routes
    g = AR1LogitGate(2, 0.5, phi)
    y, pi, P, x = exact.ar1_chain(g)
    xd = x - pi @ x
    Z = np.linalg.inv(np.eye(len(y)) - P + pi[None, :])
    slr_chain = pi @ (xd * xd) + 2 * pi @ (xd * (Z @ xd - xd))
    assert exact.ar1_long_run(g).sigma2_lr == pytest.approx(slr_chain, rel=1e-8)


def test_finite_n_law_is_the_variance_of_the_sum():
    g = AR1LogitGate(1, 1, 0.7)
    m = g.moments()
    gamma = g.autocovariance(np.arange(64))
    for n in (1, 2, 5, 20):
        lags = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
        var_sn = gamma[lags].sum()                                       # 1' Sigma 1 of (X_1..X_n)
        assert renewal.finite_n_var(m.kappa, gamma, n * m.kappa) == pytest.approx(var_sn / m.kappa ** 2, rel=1e-12)
    # iid: the leading law
    assert renewal.finite_n_var(m.kappa, [m.sigma2], 7.3 * m.kappa) == pytest.approx(
        renewal.leading_var(m, 7.3 * m.kappa), rel=1e-12)


# ----------------------------------------------------------------------------- Markov-additive exact numerics


def test_markov_numerics_reduce_to_iid_numerics_at_phi_0():
    g0, iid = AR1LogitGate(2, 0.5, 0.0), LogitNormalGate(2, 0.5)
    eps = [_eps(iid, 8), _eps(iid, 20)]
    for mp, e in zip(exact.markov_first_passage(g0, eps=eps), eps):
        ex = exact.exact_first_passage(iid, eps=e)
        assert mp.L == pytest.approx(threshold(e))
        assert abs(mp.mean - ex.mean) <= max(mp.err_mean, 1e-6)
        assert abs(mp.var - ex.var) <= max(mp.err_var, 1e-6)
        assert abs(mp.var - ex.var) < 1e-3 * ex.var                     # and the estimate is not vacuous
        assert mp.survival[0] == 1.0 and np.all(np.diff(mp.survival) <= 1e-15)


def test_markov_numerics_agree_with_monte_carlo():
    g = AR1LogitGate(2, 0.5, 0.9)
    eps = _eps(g, 17)                                              # L/kappa = 0.94 tau, far from the asymptotics
    mp = exact.markov_first_passage(g, eps=eps)[0]
    mc = gates.first_passage_mc(g, eps=eps, trials=100_000, seed=3)
    z = bonferroni_z(2)
    assert abs(mc.mean - mp.mean) <= z * mc.se_mean + mp.err_mean
    assert abs(mc.var - mp.var) <= z * mc.se_var + mp.err_var


# ----------------------------------------------------------------------------- the claimed regimes, by simulation


def test_leading_law_within_its_stated_error_at_phi_half():
    # README: the leading law is within 2% of Monte Carlo at phi = 0.5, L/kappa = 100 (34.7 tau); the
    # second-order law within 0.5% there. Both against one simulation: Bonferroni over 2.
    g = AR1LogitGate(2, 0.5, 0.5)
    lr = exact.ar1_long_run(g)
    L = 100 * lr.kappa
    mc = gates.first_passage_mc(g, eps=math.exp(-L), trials=100_000, seed=5)
    z = bonferroni_z(2)
    lead = renewal.dependent_var(lr.kappa, lr.sigma2_lr, L)
    second = renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k, L)
    assert second.in_regime
    assert abs(lead - mc.var) <= 0.02 * lead + z * mc.se_var
    assert abs(second.var - mc.var) <= 0.005 * second.var + z * mc.se_var


def test_second_order_law_and_mean_law_in_their_regime():
    # README: at L/kappa >= 2.7 tau the second-order law is within 2% and the mean law within 0.1 token;
    # checked at phi = 0.9, L/kappa = 50 (2.75 tau), where the leading law is 28% high (resolved here).
    g = AR1LogitGate(2, 0.5, 0.9)
    lr = exact.ar1_long_run(g)
    L = 50 * lr.kappa
    mc = gates.first_passage_mc(g, eps=math.exp(-L), trials=100_000, seed=9)
    z = bonferroni_z(3)
    second = renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k, L)
    assert abs(second.var - mc.var) <= 0.02 * second.var + z * mc.se_var
    assert abs(renewal.dependent_mean_N(lr.kappa, lr.sigma2_lr, L) - 1 - mc.mean) <= 0.1 + z * mc.se_mean
    assert renewal.dependent_var(lr.kappa, lr.sigma2_lr, L) - mc.var > 0.2 * mc.var + z * mc.se_var


# ----------------------------------------------------------------------------- the measurement script


def test_script_rejects_bad_input_and_never_overwrites(tmp_path, capsys):
    for argv in (["--phi", "1.0"], ["--ratios", "0"], ["--trials", "1"], ["--s", "-1"], ["--cells", "1"]):
        with pytest.raises(SystemExit) as e:
            dependent_errors.main(argv + ["--no-progress"])
        assert e.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    out = tmp_path / "r.json"
    out.write_text("keep me")
    with pytest.raises(SystemExit) as e:
        dependent_errors.main(["--json", str(out), "--no-progress"])
    assert e.value.code == 2 and "exists" in capsys.readouterr().err
    assert out.read_text() == "keep me"


def test_script_writes_a_small_run(tmp_path):
    out = tmp_path / "r.json"
    dependent_errors.main(["--phi", "0.5", "--ratios", "10", "--trials", "2000", "--no-scan", "--json", str(out),
                           "--no-progress"])
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["trials"] == 2000
    r = rows[0]
    assert abs(r["z_var_mc_vs_exact"]) < bonferroni_z(2) and abs(r["z_mean_mc_vs_exact"]) < bonferroni_z(2)
    assert not list(tmp_path.glob(".tmp-*"))                              # the temp file was renamed
