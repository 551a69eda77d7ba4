"""A threshold is given as eps= or L= by keyword in every public entry, never positionally, and a threshold given
as the wrong one of the two cannot pass silently: an eps given where L is meant is refused (TypeError for the old
names, ValueError for a value outside (0, 1)) or warned (an L below L_LOOKS_LIKE_EPS)."""
import warnings

import numpy as np
import pytest

from foxwindow.heads import driver
from foxwindow.laws import exact, gates

GATE = gates.LogitNormalGate(2, 0.5)


def _lg():
    return -GATE.sample(np.random.default_rng(0), (4, 256, 1))


def test_an_eps_where_L_is_meant_is_impossible():
    lg = _lg()
    with pytest.raises(TypeError):
        driver.analyse_layers({"l0": lg}, Ls=[1e-3])                  # the old name is gone
    with pytest.raises(TypeError):
        driver.analyse_layers({"l0": lg}, [1e-3])                     # no positional threshold
    with pytest.warns(gates.ThresholdWarning, match="pass eps=0.001"):
        driver.analyse_layers({"l0": lg}, L=[1e-3], n_boot=0)
    with pytest.raises(ValueError, match="not both"):
        driver.analyse_layers({"l0": lg}, eps=[1e-3], L=[6.9])
    for f in (lambda: gates.windows(lg[0, :, 0], 1e-3), lambda: exact.exact_first_passage(GATE, 1e-3),
              lambda: gates.first_passage_mc(GATE, 1e-3), lambda: exact.markov_first_passage(
                  gates.AR1LogitGate(2, 0.5, 0.5), 1e-3), lambda: driver.analyse_head(lg[:, :, 0], [1e-3])):
        with pytest.raises(TypeError):
            f()


def test_eps_and_L_are_one_threshold():
    L = gates.threshold(1e-3)
    a = exact.exact_first_passage(GATE, eps=1e-3)
    b = exact.exact_first_passage(GATE, L=L)
    assert a.mean == pytest.approx(b.mean, rel=1e-12)
    with pytest.raises(ValueError, match="exactly one"):
        exact.exact_first_passage(GATE, eps=1e-3, L=L)
    with pytest.raises(ValueError, match="exactly one"):
        exact.exact_first_passage(GATE)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        exact.exact_first_passage(GATE, eps=L)                     # an L given as eps
    w1, _ = gates.windows(_lg()[0, :, 0], eps=1e-3)
    w2, _ = gates.windows(_lg()[0, :, 0], L=L)
    assert (w1 == w2).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gates.level(L=0.5)                                         # an ordinary L: no warning
    assert gates.levels(eps=[1e-2, 1e-3]) == [gates.threshold(1e-2), L]
