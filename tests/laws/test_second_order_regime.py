"""The second-order law's regime (renewal.second_order_var's in_regime, dependence.second_order_claim) on
dependence structures not used to choose it (second_order_regime.py chose it on nine others): where it claims,
within its stated accuracy of the exact numerics; where the law is still off, not claimed."""
import numpy as np
import pytest

from foxwindow.heads import dependence
from foxwindow.laws import exact, gates, markov, renewal
from foxwindow.laws import second_order_regime as sor

LN = gates.LogitNormalGate

# fresh structures: none of them was measured before the rule was set
FRESH = {
    "AR(1) logits, phi 0.8, mu 0.5, s 1.2": ("ar1", gates.AR1LogitGate(0.5, 1.2, 0.8)),
    "stochastic volatility (4 states, mu 1.5)": ("chain", (sor.birth_death(4, 0.04),
                                                           [LN(1.5, s) for s in (0.3, 0.7, 1.4, 2.8)])),
    "3 telegraph processes (5, 17, 50)": ("chain", sor.telegraph([0.1, 0.03, 0.01], 0.4, 1.0, 0.6)),
    "regime switching (3 states, symmetric)": ("chain", (np.array([[0.97, 0.02, 0.01], [0.02, 0.96, 0.02],
                                                                   [0.02, 0.02, 0.96]]),
                                                         [LN(2.5, 0.5), LN(1.0, 0.7), LN(-0.5, 1.0)])),
}


def _exact(kind, obj, Ls):
    if kind == "ar1":
        return [(p.var, p.err_var) for p in exact.markov_first_passage(obj, L=Ls, cells_per_kappa=4)]
    return [(p.var, p.var_err) for p in markov.markov_chain_first_passage(*obj, L=Ls, cells_per_kappa=4)]


@pytest.mark.parametrize("name", list(FRESH))
def test_claimed_within_its_accuracy_and_not_claimed_where_off(name):
    kind, obj = FRESH[name]
    lr, C, u = sor.lengths(kind, obj)
    ell = u["ell_max"]
    mults = (1.5, renewal.SECOND_ORDER_MULT, 8.0)
    Ls = [m * ell * lr.kappa for m in mults]
    for m, L, (v, ve) in zip(mults, Ls, _exact(kind, obj, Ls)):
        law = renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k, L)
        err = law.var / v - 1
        if m >= renewal.SECOND_ORDER_MULT:
            assert law.in_regime, (name, m)
            assert abs(err) <= renewal.SECOND_ORDER_ACCURACY + ve / v, (name, m, err)
        else:
            assert not law.in_regime, (name, m)
            assert abs(err) > renewal.SECOND_ORDER_ACCURACY, (name, m, err)     # the flag is needed there


@pytest.mark.parametrize("name", [n for n, (k, _) in FRESH.items() if k == "chain"])
def test_correlation_length_estimated_from_a_trace(name):
    # a trace of 64 documents x 8192 tokens of a fresh structure: the estimate's jackknife band holds the exact
    # length, and the law claims from a trace only where the exact numerics say it is within its accuracy
    kind, obj = FRESH[name]
    lr, C, u = sor.lengths(kind, obj)
    x = sor.paths(kind, obj, np.random.default_rng(3), 64, 8192)
    inp = dependence.second_order_inputs(x)
    assert inp.converged
    assert abs(inp.ell - u["ell_max"]) <= 3 * inp.ell_se + 0.1 * u["ell_max"], (inp.ell, inp.ell_se, u["ell_max"])
    ns = [2.0 * u["ell_max"], 6.0 * u["ell_max"], 10.0 * u["ell_max"]]
    claims = [dependence.second_order_claim(n * inp.kappa, inp) for n in ns]
    assert not claims[0][0]                                    # 2 lengths: never claimed
    assert claims[-1][0], claims[-1]                          # 10 lengths: claimed
    for n, (ok, acc, why) in zip(ns, claims):
        if ok:
            (v, ve), = _exact(kind, obj, [n * lr.kappa])
            law = renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k, n * lr.kappa)
            assert abs(law.var / v - 1) <= acc + ve / v
        else:
            assert why


def test_short_trace_does_not_claim_a_long_length():
    # 16 x 256 tokens of a chain relaxing over 100 steps: the length is not measurable, nothing is claimed
    kind, obj = "chain", (sor.birth_death(3, 0.01), [LN(1.0, s) for s in (0.4, 1.0, 2.0)])
    x = sor.paths(kind, obj, np.random.default_rng(0), 16, 256)
    inp = dependence.second_order_inputs(x)
    ok, acc, why = dependence.second_order_claim(200 * inp.kappa, inp)
    assert not ok and why and acc is None


def test_inputs_reject_bad_traces():
    with pytest.raises(ValueError):
        dependence.second_order_inputs(np.ones((1, 100)))
    with pytest.raises(ValueError, match="centre"):
        dependence.second_order_inputs(np.random.default_rng(0).random((4, 64)), centre="x")
