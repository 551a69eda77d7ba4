"""The per-head verdict's statistics on gates whose truth is known: V(n) and tau(n), the regime, Kaplan-Meier,
the block-bootstrap prediction out of sample, the verdict states, the document bootstrap's size, seeds."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from conftest import bonferroni_z
from foxwindow.heads import calibration as cal
from foxwindow.heads import dependence, predict, verdict
from foxwindow.laws import gates, renewal

S, T = 32, 2048
LS = np.array([gates.threshold(e) for e in (0.1, 0.03, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6)])


def _head(family, mu=1.5, seed=0, S=S, T=T):
    return cal.increments(family, mu, np.random.default_rng(seed), S, T)


def test_variance_function_matches_ar1_truth():
    # x = 1 + Gaussian AR(1), phi = 0.6: Var(S_n) = n tau(n) with tau(n) = 1 + 2 sum_{k<n} (1 - k/n) phi^k
    rng = np.random.default_rng(1)
    phi = 0.6
    z = cal._linear(rng, 64, 2048, [1.0], [1.0, -phi])
    vf = dependence.variance_function(1 + z, [1, 2, 5, 20, 100, 400])
    k = np.arange(1, 400)
    for idx, n in enumerate(vf.ns):
        truth = 1 + 2 * np.sum((1 - k[k < n] / n) * phi ** k[k < n])
        zc = bonferroni_z(2 * len(vf.ns))
        tw, tg = vf.tau_within()[idx], vf.tau_grand()[idx]
        se_w, se_g = vf.se(vf.tau_within)[idx], vf.se(vf.tau_grand)[idx]
        assert abs(tw - truth) <= zc * se_w + 1e-12, (n, tw, truth, se_w)
        assert abs(tg - truth) <= zc * se_g + 1e-12, (n, tg, truth, se_g)


def test_document_shift_grows_grand_variance_not_within():
    rng = np.random.default_rng(2)
    x = rng.exponential(1.0, (S, T)) * np.where(np.arange(S) < S // 2, 1.0, 2.0)[:, None]
    vf = dependence.variance_function(x)
    i = vf.index(256)
    assert vf.tau_grand()[i] > 10 * vf.tau_within()[i]           # n^2 Var(kappa_d) dominates
    assert abs(vf.tau_within()[i] - 1) <= bonferroni_z(1) * vf.se(vf.tau_within)[i]


def test_tau_estimate_is_renewals_pooled_acf_with_jackknife():
    x = _head("ar1")
    for centre in ("sequence", "grand"):
        t = dependence.tau_estimate(x, centre)
        rho = renewal.acf(x, dependence.MAX_LAG, pooled=True, centre=centre)
        assert t.tau == pytest.approx(1 + 2 * rho[1:renewal.geyer_cut(rho)].sum(), rel=1e-12)
        assert t.se == pytest.approx(dependence.jackknife(t.tau_loo)) and t.se > 0
    with pytest.raises(ValueError, match="S >= 2"):
        dependence.tau_estimate(np.ones((1, 100)))


def test_regime_needs_levelled_tau_small_steps_and_no_censoring():
    iid = _head("iid")
    k, s2 = iid.mean(), iid.var()
    vf = dependence.variance_function(iid)
    L = gates.threshold(1e-3)
    assert dependence.in_regime(L, k, s2, vf, 0.0, dependence.tail_share(iid, L)).ok
    assert not dependence.in_regime(L, k, s2, vf, 0.01).ok                       # censored
    assert "steps" in dependence.in_regime(0.2, k, s2, vf, 0.0).why              # L/kappa < 4
    lm = _head("long_memory")                                                   # tau(n) keeps rising
    vl = dependence.variance_function(lm)
    g = dependence.in_regime(L, lm.mean(), lm.var(), vl, 0.0, dependence.tail_share(lm, L))
    assert not g.ok and "moving" in g.why and g.level_ratio > 1 + dependence.LEVEL_TOL
    ht = _head("heavy_tails", mu=3.0)
    g = dependence.in_regime(L, ht.mean(), ht.var(), dependence.variance_function(ht), 0.0,
                             dependence.tail_share(ht, L))
    assert not g.ok and "Var X" in g.why


def test_window_rows_match_forget_windows():
    lg = -_head("ar1", S=4, T=256)
    Ls = [gates.threshold(e) for e in (0.1, 1e-3, 1e-6)]
    W, c = predict.window_rows(-lg, Ls, 128)
    for k, e in enumerate((0.1, 1e-3, 1e-6)):
        w, cc = gates.windows(torch.from_numpy(lg), eps=e, dim=1)
        assert np.array_equal(W[:, :, k], w[:, 128:].numpy()) and np.array_equal(c[:, :, k], cc[:, 128:].numpy())


def test_kaplan_meier_recovers_a_censored_median():
    rng = np.random.default_rng(3)
    w = rng.geometric(1 / 200, 4000)                                             # median ~ 139
    c = rng.integers(50, 400, 4000)
    km = predict.kaplan_meier(np.minimum(w, c), w >= c)                          # censored: W >= the value
    truth = math.ceil(math.log(0.5) / math.log(1 - 1 / 200))
    se = 1 / (2 * stats.geom.pmf(truth, 1 / 200) * math.sqrt(4000 * 0.6))       # ~ at-risk share 0.6
    assert abs(km.q50 - truth) <= bonferroni_z(1) * se
    km0 = predict.kaplan_meier(w, np.zeros_like(w, bool))                       # uncensored: the sample itself
    assert km0.mean == pytest.approx(w.mean()) and not km0.mean_is_bound
    short = predict.kaplan_meier(np.full(10, 5), np.ones(10, bool))             # all censored: a bound only
    assert math.isnan(short.q50) and short.mean_is_bound and short.median_bound == 5
    assert short.mean == 5                                                      # W >= 5, nothing beyond


def test_kaplan_meier_censoring_is_at_least():
    # windows.censored means the true window is at least W: a constant gate whose window is exactly 300 has
    # rows censored at 1..300, and the estimate is 300 itself, not a bound above it
    L = math.log(1e3)
    w, c = gates.windows(np.full(512, -L / 300.5), L=L)
    assert c[:300].all() and not c[300:].any() and (w[299:] == 300).all()
    km = predict.kaplan_meier(w[256:], c[256:])
    assert km.mean == 300 and km.q50 == 300 and not km.mean_is_bound
    w, c = gates.windows(np.zeros(64), L=L)                                     # g = 1: every row censored
    km = predict.kaplan_meier(w, c)
    assert km.mean == 64 and km.mean_is_bound and km.median_bound == 64 and math.isnan(km.q50)
    # a censored value equal to an event time stays at risk only before it
    km = predict.kaplan_meier(np.array([3, 3]), np.array([False, True]))
    assert km.q50 == 3 and km.mean == 3 and not km.mean_is_bound


@pytest.mark.parametrize("family", ["ar1", "arma_sign_changing"])
def test_prediction_out_of_sample(family):
    x = _head(family, mu=3.0, seed=4)
    W, C = predict.window_rows(x, LS, T // 2)
    o = predict.out_of_sample(x, W, C, LS, np.random.default_rng(5))
    zc = bonferroni_z(3 * len(LS))
    for k in range(len(LS)):
        if C[:, :, k].any():
            continue
        assert abs(o.coverage[k] - 0.9) <= zc * o.se_coverage[k] + 0.01, (k, o.coverage[k], o.se_coverage[k])
        assert abs(o.z_mean[k]) <= zc and abs(o.z_var[k]) <= zc, (k, o.z_mean[k], o.z_var[k])


def test_prediction_beyond_the_trace_for_a_long_window_head():
    x = _head("iid", mu=6.5, seed=6, S=8, T=512)                               # kappa ~ 0.0025: windows > 256
    r = verdict.analyse(x, LS, seed=1, context=1024)
    assert r.censored_frac[-1] == 1.0 and r.verdict in ("pre-asymptotic", "undetermined")
    # an exponential-like walk: the mean window L/kappa within 5% (stationary, so the blocks are unbiased)
    k = x.mean()
    assert r.pred_mean[-1] == pytest.approx(LS[-1] / k, rel=0.05)
    assert r.pred_p_beyond[-1] == 1.0 and r.km_mean[-1] <= r.pred_mean[-1]


@pytest.mark.parametrize("family, mu, state, law", [
    ("iid", 1.5, "law holds", "iid"),
    ("ar1", 1.5, "law holds", "dependent"),
    ("lattice_in_half", 1.5, "law false", ""),
    ("long_memory", 1.5, "pre-asymptotic", ""),
])
def test_verdict_states(family, mu, state, law):
    # at the level of a 16-head model
    r = verdict.analyse(_head(family, mu, seed=7), LS, n_heads=16, n_boot=2000, seed=2, predict_=False)
    assert r.verdict == state and r.law == law, (r.verdict, r.law, r.reasons, r.p_var, r.p_mean)


def test_documents_with_different_rates_hold_the_dependent_law():
    rng = np.random.default_rng(8)
    mus = 3 + 0.5 * np.linspace(-1, 1, S)
    x = np.concatenate([cal.increments("iid", m, rng, 1, T) for m in mus])
    r = verdict.analyse(x, LS, n_boot=2000, seed=3, predict_=False)
    assert r.verdict == "law holds" and r.law == "dependent" and r.p_iid < r.alpha_test
    assert r.mix_B > bonferroni_z(1) * r.se_mix_B


def test_undetermined_only_for_data_reasons():
    assert "documents" in verdict.analyse(_head("iid", S=3), LS, seed=0).reasons[0]
    r = verdict.analyse(np.full((4, 100), 0.05), LS, seed=0)
    assert r.verdict == "undetermined" and "lattice" in r.reasons[0]
    r = verdict.analyse(1e-5 * np.random.default_rng(0).exponential(1, (4, 100)), LS[-1:], seed=0)
    assert r.verdict == "undetermined" and "censored" in r.reasons[-1]


def test_seeds_fresh_unless_given():
    x = _head("ar1", mu=3.0)
    a, b = (verdict.analyse(x, LS, n_boot=500, seed=None) for _ in range(2))
    c, d = (verdict.analyse(x, LS, n_boot=500, seed=11) for _ in range(2))
    assert a.pred_mean != b.pred_mean and a.seed != b.seed
    assert c.pred_mean == d.pred_mean and c.p_var == d.p_var and c.seed == 11


def test_law_curves_are_renewals():
    r = verdict.analyse(_head("iid"), LS, seed=0, predict_=False)
    m = gates.Moments.from_raw(r.kappa, r.sigma2 + r.kappa ** 2, 0.0)
    assert r.law_var_iid == pytest.approx([renewal.leading_var(m, L) for L in LS], rel=1e-12)


def test_small_calibration_study_has_size_and_power():
    # a small version of `python -m foxwindow.heads.calibration` (20 replicates per family, results/verdict)
    res = cal.study(["arma_sign_changing", "regime_switching", "lattice_in_half"], reps=2, S=S, T=T,
                    seed=1, n_boot=1000)
    for fam in ("arma_sign_changing", "regime_switching"):
        assert res[fam]["runs_law_false"] == 0, res[fam]
    assert res["lattice_in_half"]["runs_law_false"] == 2
    assert res["arma_sign_changing"]["tested"] > 0                              # the nulls are tested, not skipped


def test_the_regime_rule_has_one_home():
    """The regime rule's sentence is generated from dependence's named constants; the table and the results
    quote it as generated."""
    import os
    import re

    from conftest import REPO
    from foxwindow.heads import dependence
    rule = dependence.regime_rule()
    for c in (dependence.MIN_STEPS, dependence.LATTICE_VAR, dependence.LEVEL_TOL, dependence.LEVEL_Z):
        assert f"{c:g}" in rule
    with open(os.path.join(REPO, "docs", "RESULTS.md")) as fh:
        assert rule in re.sub(r"\s+", " ", fh.read())


def test_verdict_ses_are_the_grouped_jackknife_beyond_jack_groups(monkeypatch):
    # more documents than JACK_GROUPS: the SEs of E[W] and Var[W] are the delete-a-group jackknife (group d % G), by
    # brute force each group dropped; up to JACK_GROUPS documents the leave-one-out jackknife, the same numbers
    rng = np.random.default_rng(8)
    S, T = 14, 2048
    x = cal.increments("iid", 2.0, rng, S, T)
    Ls = np.array([gates.threshold(e) for e in (1e-2, 1e-3, 1e-4, 1e-5)])             # three in the regime
    W = predict.window_rows(x, Ls, T // 2)[0].astype(np.float64)                 # (S, R, n)

    def jk(groups):
        keep = [np.flatnonzero(groups != g) for g in range(groups.max() + 1)]
        m = np.array([W[k].mean((0, 1)) for k in keep])
        v = np.array([W[k].var((0, 1)) for k in keep])
        return dependence.jackknife(m), dependence.jackknife(v)
    r = verdict.analyse(x, Ls, n_boot=50, seed=1)
    for got, want in zip((r.se_mean_W, r.se_var_W), jk(np.arange(S))):
        assert np.allclose(got, want, rtol=1e-9)
    G = 4
    monkeypatch.setattr(dependence, "JACK_GROUPS", G)
    rg = verdict.analyse(x, Ls, n_boot=50, seed=1)
    for got, want, loo in zip((rg.se_mean_W, rg.se_var_W), jk(np.arange(S) % G), (r.se_mean_W, r.se_var_W)):
        assert np.allclose(got, want, rtol=1e-9) and not np.allclose(got, loo, rtol=1e-3)
    assert rg.mean_W == r.mean_W and rg.var_W == r.var_W and rg.slope == r.slope and math.isfinite(r.slope)
    assert rg.slope_se != pytest.approx(r.slope_se, rel=1e-3) and 0 < rg.slope_se < 3 * r.slope_se   # its own rows
    assert dependence.jack_weights(S).shape == (G, S)
