"""The hot paths of the window numerics against the plain computations they replace: the per-query windows of a
numpy trace (gates.window_row) against searchsorted on the prefix sums; laws with 5-64 atoms (discrete.py's
walks) against exact rational sums over count vectors, the previous count sums and Monte Carlo (SE tolerances)."""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from foxwindow.laws import bench, discrete, exact, gates

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


OVERFLOW = "overflowing sums"


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
    yield OVERFLOW, np.concatenate([[-1e308, -1e308], -rng.exponential(1.0, 200)]), 5.0
    yield "one position, gate 1", np.array([0.0]), 1.0
    yield "one position", np.array([-2.0]), 1.0
    yield "two positions", np.array([-1.0, -0.0]), 1.0
    yield "censored throughout", np.log(rng.beta(500, 1, 400)), math.log(1e3)


@pytest.mark.parametrize("block", [None, 3, 64])
def test_windows_of_awkward_traces_equal_searchsorted(monkeypatch, block):
    monkeypatch.setattr(gates, "COMPILED", False)                  # the numpy merge, even where numba compiled it
    if block is not None:
        monkeypatch.setattr(gates, "WINDOW_BLOCK", block)         # many blocks on short traces
    rng = np.random.default_rng(11)
    for name, lg, L in awkward_traces(rng):
        if name == OVERFLOW:                                       # prefix sums past float64: refused, not wrong
            with pytest.raises(ValueError, match="passes float64's range"):
                gates.windows(lg, L=L)
            continue
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
    monkeypatch.setattr(gates, "COMPILED", False)
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


def _kernel():
    k = gates.merge_kernel()
    if k is None:
        pytest.skip("numba is not installed (the optional extra `fast`, requirements-fast.txt): no compiled merge")
    return k


def test_the_compiled_merge_equals_the_numpy_path_on_awkward_traces():
    kernel = _kernel()
    rng = np.random.default_rng(11)
    for name, lg, L in awkward_traces(rng):
        lg = np.ascontiguousarray(lg, dtype=np.float64)
        T = len(lg)
        W, cens = np.full((1, T), -7, np.int64), np.zeros((1, T), bool)
        ok = kernel(lg[None], float(L), W, cens, np.empty(T + 5))
        assert ok == (name != OVERFLOW), name                      # an overflowing sum is reported, not merged
        if not ok:
            continue
        Wn, cn = np.empty(T, np.int64), np.empty(T, bool)
        with np.errstate(over="ignore", invalid="ignore"):
            gates.window_row_numpy(lg, L, Wn, cn)
            Wr, cr = searchsorted_windows(lg, L)
        np.testing.assert_array_equal(W[0], Wn, err_msg=name)
        np.testing.assert_array_equal(cens[0], cn, err_msg=name)
        np.testing.assert_array_equal(W[0], Wr, err_msg=name)
        np.testing.assert_array_equal(cens[0], cr, err_msg=name)


@pytest.mark.parametrize("block", [4, 8, 36])
def test_the_compiled_merge_in_small_blocks_equals_searchsorted_on_awkward_traces(monkeypatch, block):
    """The block loop (block b summed while b - 1 is merged) on every awkward trace: the merge compiled with blocks
    of a few positions (MERGE_BLOCK is read when it compiles), so that each trace spans many blocks, the last one
    whole or partial and windows reaching across several."""
    _kernel()
    import numba  # installed: _kernel skips otherwise
    monkeypatch.setattr(gates, "MERGE_BLOCK", block)
    kernel = numba.njit(gates._MERGE_SIG, cache=False)(gates._merge_rows)
    rng = np.random.default_rng(11)
    for name, lg, L in awkward_traces(rng):
        lg = np.ascontiguousarray(lg, dtype=np.float64)
        T = len(lg)
        for n in sorted({T, max(T - 1, 1), min(T, 2 * block + 3)}):     # whole blocks and a part of one
            W, cens = np.full((2, n), -7, np.int64), np.zeros((2, n), bool)
            rows = np.ascontiguousarray(np.stack([lg[:n], lg[:n][::-1]]))
            ok = kernel(rows, float(L), W, cens, np.full(n + 5, np.nan))     # stale scratch: never read
            assert ok == (name != OVERFLOW or n < 2), f"{name}, T {n}"         # two -1e308 steps overflow
            if not ok:
                continue
            with np.errstate(invalid="ignore", over="ignore"):
                Wr, cr = searchsorted_windows(rows, L)
            np.testing.assert_array_equal(W, Wr, err_msg=f"{name}, T {n}")
            np.testing.assert_array_equal(cens, cr, err_msg=f"{name}, T {n}")


def test_the_compiled_merge_equals_searchsorted_on_long_traces_of_many_blocks():
    kernel = _kernel()
    rng = np.random.default_rng(17)
    T = 5 * gates.MERGE_BLOCK + 123
    slow = np.log(rng.beta(2000, 1, T))                                 # windows of thousands of positions
    slow[rng.random(T) < 0.3] = 0.0
    for name, lg, L in (("smooth", np.log(rng.beta(20, 1, T)), math.log(1e3)), ("slow", slow, math.log(1e3)),
                        ("ties", -np.round(rng.exponential(1.0, T)), 7.0)):
        W, cens = np.empty((1, T), np.int64), np.empty((1, T), bool)
        assert kernel(np.ascontiguousarray(lg[None]), float(L), W, cens, np.empty(T + 5))
        Wr, cr = searchsorted_windows(lg, L)
        np.testing.assert_array_equal(W[0], Wr, err_msg=name)
        np.testing.assert_array_equal(cens[0], cr, err_msg=name)
        if name == "slow":                                              # windows across two blocks and more
            assert np.median(W[0][~cens[0]]) > 2 * gates.MERGE_BLOCK and 0 < cens.mean() < 1
    for bad in (np.nan, 0.5, -np.inf):                                  # found blocks after the first merged
        lg = np.log(rng.beta(20, 1, (1, T)))
        lg[0, 3 * gates.MERGE_BLOCK + 5] = bad
        assert not kernel(lg, math.log(1e3), W, cens, np.empty(T + 5))


def test_the_compiled_merge_equals_the_numpy_path_on_many_rows_and_short_traces(monkeypatch):
    _kernel()
    rng = np.random.default_rng(15)
    lg = np.log(rng.beta(8, 1, (3, 700, 4)))                         # (B, T, H)
    lg[:, 50:80] = 0.0
    lg[1, :, 2] = -np.round(rng.exponential(1.0, 700))               # ties
    for L in (0.5, 3.0, math.log(1e12)):
        monkeypatch.setattr(gates, "COMPILED_MIN", 0)
        W, cens = gates.windows(lg, L=L, dim=1)                        # through the compiled merge
        monkeypatch.setattr(gates, "COMPILED", False)
        Wn, cn = gates.windows(lg, L=L, dim=1)                         # through window_row_numpy
        monkeypatch.undo()
        np.testing.assert_array_equal(W, Wn)
        np.testing.assert_array_equal(cens, cn)
    for _ in range(200):
        T = int(rng.integers(1, 12))
        lg1 = -rng.choice([0.0, 0.5, 1.0, 2.0, rng.exponential()], T)
        L = float(rng.choice([0.5, 1.0, 2.0, rng.exponential() + 0.01]))
        W, cens = np.empty(T, np.int64), np.empty(T, bool)
        Wn, cn = np.empty(T, np.int64), np.empty(T, bool)
        monkeypatch.setattr(gates, "COMPILED_MIN", 0)
        gates.window_row(lg1, L, W, cens)
        monkeypatch.undo()
        gates.window_row_numpy(lg1, L, Wn, cn)
        assert np.array_equal(W, Wn) and np.array_equal(cens, cn)


def test_the_compiled_merge_refuses_bad_log_gates_with_the_numpy_paths_message(monkeypatch):
    _kernel()
    for bad, msg in ((np.nan, "NaN"), (0.5, "must be <= 0"), (-np.inf, "infinite")):
        lg = np.log(np.random.default_rng(16).beta(20, 1, (3, 50)))
        lg[2, 7] = bad
        for compiled in (True, False):
            monkeypatch.setattr(gates, "COMPILED", compiled)
            monkeypatch.setattr(gates, "COMPILED_MIN", 0)
            with pytest.raises(ValueError, match=msg):
                gates.windows(lg, eps=1e-3)
        W, cens = np.full(50, -7, np.int64), np.zeros(50, bool)
        monkeypatch.setattr(gates, "COMPILED", True)
        with pytest.raises(ValueError, match="log-gates must be finite and <= 0"):
            gates.window_row(lg[2], 2.0, W, cens)
        assert np.all(W == -7)                                         # nothing written


def test_short_windows_do_not_start_the_compile(monkeypatch):
    """A call below COMPILED_MIN positions in a process that has not compiled the merge takes the numpy path: numba
    is neither imported nor looked for (its import and compile cost seconds)."""
    monkeypatch.setattr(gates, "_merge", [])                         # as in a fresh process
    monkeypatch.setattr(gates.importlib.util, "find_spec", lambda name: pytest.fail(f"looked for {name}"))
    lg = np.log(np.random.default_rng(0).beta(20, 1, (4, 1000)))
    W, cens = gates.windows(lg, eps=1e-3)
    Wr, cr = searchsorted_windows(lg, math.log(1e3))
    assert gates._merge == [] and np.array_equal(W, Wr) and np.array_equal(cens, cr)


def test_the_bench_times_both_merges_beside_the_cumsum():
    rows = bench.window_rows(1, T=5000)
    base = [r for r in rows if r["baseline"] == "bare np.cumsum"]
    assert "numpy merge" in base[0]["what"] and base[0]["base_s"] > 0 and base[0]["ratio"] > 0
    if gates.merge_kernel() is None:
        assert any("numba not installed" in r["what"] for r in rows)
    else:
        assert "compiled merge" in base[1]["what"] and base[1]["base_s"] == base[0]["base_s"]
        assert any(r["baseline"] == "numpy merge" for r in rows)
        buf = [r for r in rows if r["baseline"] == "np.cumsum into a buffer allocated once"]
        assert len(buf) == 1 and "window_row" in buf[0]["what"] and buf[0]["base_s"] > 0 and buf[0]["ratio"] > 0
        assert any("first call" in r["what"] for r in rows)


# ----------------------------------------------------------------------------- laws with 5-64 atoms


def _atoms(values, probs):
    return discrete.AtomGate(np.array(values, dtype=np.float64), np.array(probs, dtype=np.float64), "atoms")


def enumeration(values, probs, L):
    """(E[W], Var[W]) in exact rationals: the law of the count vector below L, step by step."""
    v, p, fL = [Fraction(float(x)) for x in values], [Fraction(x) for x in probs], Fraction(float(L))
    cur, s = {(0,) * len(v): Fraction(1)}, [Fraction(1)]
    while cur:
        nxt = {}
        for c, w in cur.items():
            for i in range(len(v)):
                c2 = c[:i] + (c[i] + 1,) + c[i + 1:]
                if sum(ci * vi for ci, vi in zip(c2, v)) <= fL:
                    nxt[c2] = nxt.get(c2, 0) + w * p[i]
        cur = nxt
        s.append(sum(cur.values(), Fraction(0)))
    EN, E2 = sum(s), sum((2 * n + 1) * sn for n, sn in enumerate(s))
    return float(EN - 1), float(E2 - EN * EN)


@pytest.mark.parametrize("values,probs,L", [
    ((0.25, 0.5, 0.75), (0.2, 0.5, 0.3), 3.0),                          # sums equal to L: ties
    ((0.125, 0.375, 0.5, 1.25), (0.1, 0.2, 0.3, 0.4), 2.6),
    ((0.25, 0.5, 0.75, 1.25, 2.0), (0.1, 0.2, 0.3, 0.25, 0.15), 3.0),
    ((0.0625, 0.25, 0.3125, 0.5, 0.75), (0.3, 0.1, 0.2, 0.2, 0.2), 1.5),
])
def test_atoms_on_a_common_step_equal_the_exact_sums(values, probs, L):
    mean, var = enumeration(values, probs, L)
    law = discrete.DiscreteLaw.from_atoms(np.array(values), np.array(probs))
    n0, s, err, _, label = discrete.step_survival(law, L)
    assert "common step" in label and n0 == 0
    if len(values) <= discrete.MAX_VALUES:                              # the previous route: sums over counts
        m0, s_old, _, _ = discrete.count_survival(law, L)
        full = np.concatenate([np.ones(m0), s_old])
        n = min(len(full), len(s))
        np.testing.assert_allclose(s[:n], full[:n], rtol=0, atol=1e-13)
        assert np.all(s[n:] <= 1e-30) and np.all(full[n:] <= 1e-30)
    r = exact.exact_first_passage(_atoms(values, probs), eps=math.exp(-L))
    assert abs(r.mean - mean) <= r.mean_err and abs(r.var - var) <= r.var_err
    assert r.mean_err < 1e-9 * max(mean, 1) and r.var_err < 1e-9 * max(var, 1)


def test_atoms_without_a_common_step_are_bracketed_around_the_exact_sums():
    rng = np.random.default_rng(21)
    for k, L in ((5, 2.5), (6, 2.0), (8, 1.6)):
        values = np.sort(rng.uniform(0.3, 1.0, k))                      # no common step above L / MAX_CELLS
        probs = rng.dirichlet(np.ones(k))
        law = discrete.DiscreteLaw.from_atoms(values, probs)
        assert discrete.common_step(values, L) is None
        mean, var = enumeration(values, probs, L)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", exact.AccuracyWarning)     # where the bracket is wider than tol
            r = exact.exact_first_passage(_atoms(values, probs), eps=math.exp(-L))
        assert "bracketed walk" in r.method
        assert abs(r.mean - mean) <= r.mean_err and abs(r.var - var) <= r.var_err
        assert r.mean_err < 1e-3 * mean                                 # and the bracket is narrow
        n0, s, err, _, _ = discrete.bracket_survival(law, L)
        assert np.all(np.diff(s) <= 0) and np.all(err >= 0)


def mc_windows(values, probs, L, trials, rng):
    """W = N - 1 by simulation: the first n with S_n > L, from blocks of draws."""
    n_max = int(L / values.min()) + 2
    W = np.empty(trials, np.int64)
    for a in range(0, trials, 20_000):
        x = rng.choice(values, p=probs, size=(min(20_000, trials - a), n_max))
        W[a:a + len(x)] = np.argmax(np.cumsum(x, axis=1) > L, axis=1)      # index of the first step past L
    return W


@pytest.mark.parametrize("k", [16, 64])
def test_many_atoms_against_monte_carlo(k):
    rng = np.random.default_rng(22 + k)
    values = np.sort(rng.uniform(0.05, 0.5, k))
    probs = rng.dirichlet(np.ones(k))
    L = math.log(1e3)
    with pytest.warns(exact.AccuracyWarning, match="bracketed walk"):   # tol 1e-8 is out of its reach here
        r = exact.exact_first_passage(_atoms(values, probs), eps=1e-3)
    assert "bracketed walk" in r.method and r.mean_err < 1e-3 * r.mean
    W = mc_windows(values, probs, L, 100_000, rng).astype(np.float64)
    n = len(W)
    se_mean = W.std() / math.sqrt(n)
    d = (W - W.mean()) ** 2
    se_var = d.std() / math.sqrt(n)
    z = 3.0                                                             # two checks per gate, two gates: Bonferroni
    assert abs(W.mean() - r.mean) <= z * se_mean + r.mean_err
    assert abs(W.var() - r.var) <= z * se_var + r.var_err


def test_the_fft_lattice_baseline_is_accurate():
    # the benchmark's baseline of the exact moments: gamma X, whose law of W is in closed form
    g, L = gates.GammaIncrement(4.0, 0.05), math.log(1e3)
    r = exact.exact_first_passage(g, eps=1e-3)
    mean, var = bench.fft_lattice(g, L, 0.2 / 64)
    assert abs(mean - r.mean) < 1e-8 * r.mean and abs(var - r.var) < 1e-6 * r.var
    m1, v1 = bench.fft_lattice(g, L, 0.2 / 8, richardson=False)
    assert abs(m1 - r.mean) > 10 * abs(mean - r.mean)                 # Richardson does remove the h^2 term


def test_logit_normal_moments_outside_the_trapezoid_range_by_quadrature():
    # the trapezoid grid grows like s: beyond its checked range (s > 10, mu outside [-3, 40]) the moments come from
    # adaptive quadrature, at once and without a grid; at the range's edge both agree
    import time

    from scipy import integrate
    for mu, s in ((1.0, 1e6), (-5.0, 2.0), (1.0, 20.0), (2.0, 10.0), (40.0, 0.01)):
        t0 = time.perf_counter()
        m = gates.LogitNormalGate(mu, s).moments()
        assert time.perf_counter() - t0 < 5.0
        want = integrate.quad(lambda y: np.logaddexp(0.0, -(mu + s * y)) * np.exp(-0.5 * y * y) / np.sqrt(2 * np.pi),
                              -np.inf, np.inf, epsabs=0.0, epsrel=1e-13, limit=200)[0]
        assert m.kappa == pytest.approx(want, rel=1e-9), (mu, s)
