"""The hot paths of the window numerics against the plain computations they replace: the per-query windows of a
numpy trace (gates.window_row) against searchsorted on the prefix sums."""
import math
import warnings

import numpy as np
import pytest

from foxwindow.laws import gates

# ----------------------------------------------------------------------------- windows of a numpy trace


def searchsorted_windows(lg, L):
    """The definition: W_i = i - j_i, j_i = searchsorted(c, c_i - L, side="left"), c the float64 prefix sums of -lg
    (c_0 = 0), on the last axis."""
    lg = np.asarray(lg, dtype=np.float64)
    c = np.concatenate([np.zeros(lg.shape[:-1] + (1,)), np.cumsum(-lg, axis=-1)], axis=-1)
    T = lg.shape[-1]
    j = np.empty(lg.shape, np.int64)
    for idx in np.ndindex(lg.shape[:-1]):
        j[idx] = np.searchsorted(c[idx], c[idx][1:] - L, side="left")
    return np.arange(1, T + 1) - j, j == 0


def awkward_traces(rng):
    """(name, log-gates, L): ties, plateaus of gates of exactly 1, subnormal and huge steps, overflowing sums."""
    yield "smooth", np.log(rng.beta(20, 1, 3000)), math.log(1e3)
    lg = np.log(rng.beta(5, 1, 3000))
    lg[rng.random(3000) < 0.9] = 0.0                               # plateaus: most gates exactly 1
    lg[1000:1600] = 0.0                                            # and one long one
    yield "plateaus", lg, 2.0
    yield "ties", -np.round(rng.exponential(1.0, 3000)), 3.0      # integer sums: c_k == c_i - L often
    yield "ties, quarter steps", -np.round(4 * rng.exponential(1.0, 3000)) / 4, 1.25
    sub = -rng.choice([0.0, 5e-324, 1e-323, 2.2250738585072014e-308, 1e-310], 2000)
    yield "subnormal steps", sub, 1e-309
    mixed = np.where(rng.random(2000) < 0.5, sub, np.log(rng.beta(2, 1, 2000)))
    yield "subnormal and normal steps", mixed, 0.7
    yield "a subnormal span", -5e-324 * rng.integers(0, 4, 300), 5e-324    # slopes 1 / 1e-323 overflow
    yield "eps 1e-300", np.log(rng.beta(50, 1, 20000)), math.log(1e300)
    yield "constant", np.full(500, -0.05), math.log(1e3)
    yield "huge steps", -rng.choice([0.0, 1e-300, 1.0, 1e300], 500), 1e300
    yield "overflowing sums", np.concatenate([[-1e308, -1e308], -rng.exponential(1.0, 200)]), 5.0
    yield "one position, gate 1", np.array([0.0]), 1.0
    yield "one position", np.array([-2.0]), 1.0
    yield "two positions", np.array([-1.0, -0.0]), 1.0
    yield "censored throughout", np.log(rng.beta(500, 1, 400)), math.log(1e3)


@pytest.mark.parametrize("block", [None, 1, 7, 64])
def test_windows_of_awkward_traces_equal_searchsorted(monkeypatch, block):
    if block is not None:
        monkeypatch.setattr(gates, "WINDOW_BLOCK", block)         # many blocks on short traces
    rng = np.random.default_rng(11)
    for name, lg, L in awkward_traces(rng):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gates.ThresholdWarning)          # the tiny L of the subnormal trace
            W, cens = gates.windows(lg, L=L)
        with np.errstate(invalid="ignore", over="ignore"):
            Wr, cr = searchsorted_windows(lg, L)
        assert W.dtype == np.int64 and cens.dtype == bool and W.shape == lg.shape, name
        np.testing.assert_array_equal(W, Wr, err_msg=name)
        np.testing.assert_array_equal(cens, cr, err_msg=name)


def test_windows_of_random_short_traces_equal_searchsorted():
    rng = np.random.default_rng(12)
    for _ in range(300):
        T = int(rng.integers(1, 12))
        lg = -rng.choice([0.0, 0.5, 1.0, 2.0, rng.exponential()], T)                 # ties and plateaus
        L = float(rng.choice([0.5, 1.0, 2.0, 3.0, rng.exponential() + 0.01]))
        W, cens = gates.windows(lg, L=L)
        Wr, cr = searchsorted_windows(lg, L)
        np.testing.assert_array_equal(W, Wr)
        np.testing.assert_array_equal(cens, cr)


@pytest.mark.filterwarnings("ignore::foxwindow.laws.gates.ThresholdWarning")     # L = 1e-9
def test_windows_of_many_rows_and_layouts_equal_searchsorted(monkeypatch):
    monkeypatch.setattr(gates, "WINDOW_BLOCK", 100)
    rng = np.random.default_rng(13)
    lg = np.log(rng.beta(8, 1, (3, 700, 4)))                         # (B, T, H)
    lg[:, 50:80] = 0.0
    for L in (1e-9, 0.5, math.log(1e3), math.log(1e12)):
        W, cens = gates.windows(lg, L=L, dim=1)
        Wr, cr = searchsorted_windows(np.moveaxis(lg, 1, -1), L)
        np.testing.assert_array_equal(W, np.moveaxis(Wr, -1, 1))
        np.testing.assert_array_equal(cens, np.moveaxis(cr, -1, 1))
    W, cens = gates.windows(lg[:, :, 0].astype(np.float32), eps=1e-2)   # (S, T), float32 summed in float64
    Wr, cr = searchsorted_windows(lg[:, :, 0].astype(np.float32), math.log(1e2))
    np.testing.assert_array_equal(W, Wr)
    np.testing.assert_array_equal(cens, cr)


def test_window_row_reuses_its_buffers_across_rows():
    rng = np.random.default_rng(14)
    work = gates.WindowRowBuffers(500)
    for _ in range(3):
        lg = np.log(rng.beta(10, 1, 500))
        W, cens = np.empty(500, np.int64), np.empty(500, bool)
        gates.window_row(lg, 2.0, W, cens, work)
        Wr, cr = searchsorted_windows(lg, 2.0)
        assert np.array_equal(W, Wr) and np.array_equal(cens, cr)
