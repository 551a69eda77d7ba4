"""The compiled loops of a large run (heads.laws.compile_fast_paths: the analysed rows' windows and the marginal
laws' lattice) give the numpy paths' numbers to the bit, in one process and over forked workers; a small run
compiles nothing."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from foxwindow import outputs
from foxwindow.heads import bench_scale, predict, table
from foxwindow.heads import driver as heads
from foxwindow.heads import laws as headlaws
from foxwindow.laws import gates

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba (extra `fast`) not installed")

LS = np.array([gates.threshold(e) for e in sorted(set(heads.EPS_SCAN) | {1e-3}, reverse=True)])


def _heads():
    """Awkward heads (S, T) float64: iid, AR(1), plateaus of zero increments with a long run of them, a censored
    slow head, regimes of very different rates, and a spiky one (rare increments of 30)."""
    rng = np.random.default_rng(5)
    out = [rng.gamma(0.7, 0.03, (9, 777)), gates.AR1LogitGate(3.0, 0.7, 0.8).sample_paths(rng, 9, 777)[0]]
    x = rng.gamma(0.7, 0.05, (9, 777))
    x[rng.random(x.shape) < 0.6] = 0.0
    x[0, :300] = 0.0
    out.append(x)
    out.append(gates.AR1LogitGate(6.0, 0.7, 0.6).sample_paths(rng, 9, 777)[0])
    state = np.cumsum(rng.random((9, 777)) < 0.01, 1) % 2
    out.append(np.where(state == 1, rng.gamma(2.0, 0.05, (9, 777)), rng.gamma(0.5, 0.004, (9, 777))))
    y = rng.gamma(0.5, 0.01, (9, 777))
    y[rng.random(y.shape) < 0.01] = 30.0
    out.append(y)
    return out


@pytest.fixture(scope="module")
def compiled():
    assert headlaws.compile_fast_paths(1 << 62)
    assert predict._rows and headlaws._cells
    return True


def test_compiled_windows_and_cells_are_the_numpy_numbers(compiled, monkeypatch):
    for x in _heads():
        for r0 in (x.shape[1] // 2, 1, x.shape[1] - 1):
            W, C = predict.window_rows(x, LS, r0)
            Wn, Cn = predict.window_rows_numpy(x, LS, r0)
            assert W.shape == Wn.shape and W.strides == Wn.strides       # the same layout: L-major underneath
            assert np.array_equal(W, Wn) and np.array_equal(C, Cn)
        xr = x.ravel()
        for h, M in ((1e-3, 1 << 16), (0.05, 1 << 9), (0.3, 8), (29.0, 4)):    # the last two: clamped at M - 1
            got = headlaws._lattice_cells(xr, h, M, float(xr.max()))
            ref = headlaws._lattice_cells_numpy(xr, h, M, float(xr.max()))
            assert got.dtype == ref.dtype and got.shape == ref.shape
            assert np.array_equal(got.view(np.int64), ref.view(np.int64))     # to the bit
    # increments of 1e28 cells (log-gates of -1e29, finite in float32): clamped as floats, no int64 overflow
    huge = np.concatenate([_heads()[0].ravel()[:500], [1e28, 3e29, 0.7e28]])
    for h, M in ((1.0, 64), (1e-3, 1 << 10)):
        got = headlaws._lattice_cells(huge, h, M, float(huge.max()))
        ref = headlaws._lattice_cells_numpy(huge, h, M, float(huge.max()))
        assert np.array_equal(got, ref) and got.sum() == pytest.approx(len(huge)) and got[-1] >= 3
    with pytest.raises(ValueError, match="thresholds must be > 0"):         # refused before the loop runs
        predict.window_rows(_heads()[0], np.array([1.0, 0.0]), 100)
    monkeypatch.setattr(gates, "COMPILED", False)                          # the switch takes the numpy paths
    with pytest.raises(ValueError, match="thresholds must be > 0"):         # and refuses the same
        predict.window_rows(_heads()[0], np.array([1.0, -1.0]), 100)
    x = _heads()[0]
    W, _ = predict.window_rows(x, LS, 100)
    assert np.array_equal(W, predict.window_rows_numpy(x, LS, 100)[0])


def _numpy_survival(L, m, v, m3, w_max):
    parts = headlaws._s_parts(m, v, m3)
    first = np.flatnonzero(~np.all(v > 0, axis=0))
    vpos = w_max <= (int(first[0]) if len(first) else m.shape[1])
    c = slice(0, w_max)
    s = headlaws._s_cdf(L, m[:, c], v[:, c], m3[:, c],
                        (parts[0][:, c], parts[1][:, c], parts[2][:, c], vpos, parts[4][:, c]))
    return np.minimum.accumulate(np.clip(s, 0, 1), axis=1), parts, vpos


def test_compiled_lead_law_cells_are_the_numpy_cells(compiled, monkeypatch):
    """_surv_kernel against _s_cdf + clip + running minimum: on the awkward heads' lead law (every leave-one-out
    row), and on crafted cells that take every branch: normal, right- and left-skewed, conditioned on S >= 0 (its
    P(S <= 0) near 0, in between and near 1), v <= 0 columns, far tails both ways. Equal within e^-TAIL_E a cell
    (the documented bound: a tail test at the edge of TAIL_E may go the other way; identical where measured)."""
    assert headlaws._surv
    bound = math.exp(-headlaws.TAIL_E)
    for x in _heads():
        S, T = x.shape
        bs = headlaws.BlockSums(x, T // 2)
        wts = np.concatenate([np.ones((1, S)), 1.0 - np.eye(S)])
        kappa = float(x.mean())
        monkeypatch.setattr(gates, "COMPILED", True)
        a = headlaws.lead_survival(bs, LS, wts, kappa)
        monkeypatch.setattr(gates, "COMPILED", False)
        b = headlaws.lead_survival(bs, LS, wts, kappa)
        for u, w in zip(a, b):
            assert u.shape == w.shape and np.all(np.abs(u - w) <= bound)
    rng = np.random.default_rng(11)
    n = 4000
    w = np.arange(1, n + 1)[None, :]
    for case in range(6):
        B = 5
        m = w * rng.uniform(0.01, 2, (B, 1)) + rng.normal(0, [0, 0.5, 5, 0, 40, 1][case], (B, n))
        v = w * rng.uniform(0.001, 3, (B, 1)) * rng.uniform(0.5, 1.5, (B, n))
        g = [0.0, 0.5, -0.5, 3.0, 1e-4, 20.0][case] * rng.uniform(0.2, 1.5, (B, n))
        if case == 3:
            v[:, 1000:1010] = 0.0                                         # v <= 0 columns: vpos False
            v[:, 2000] = -1.0
        m3 = g * np.sqrt(np.maximum(v, 0)) ** 3
        for L in (0.3, 5.0, 60.0, 900.0):
            for w_max in (n, 1500):
                ref, parts, vpos = _numpy_survival(L, m, v, m3, w_max)
                got = np.empty((B, w_max))
                c = slice(0, w_max)
                headlaws._surv[0](L, m[:, c], v[:, c], parts[0][:, c], parts[1][:, c], parts[2][:, c],
                                  parts[4][:, c], True, vpos, got)
                assert np.all(np.abs(got - ref) <= bound), (case, L, w_max, np.abs(got - ref).max())
                again = np.empty((B, w_max))                            # f0 formed in the loop: the same cells
                headlaws._surv[0](L, m[:, c], v[:, c], parts[0][:, c], parts[1][:, c], parts[2][:, c],
                                  np.full((B, w_max), np.nan), True, vpos, again)
                assert np.array_equal(again, got, equal_nan=True)
    # rows whose minimum reaches 0 early (the kernel stops evaluating them there), and rows with NaN, infinite or
    # absurd cells after that point (where it may not): the numpy path's numbers either way
    m = w * rng.uniform(0.5, 2, (6, 1))
    v = w * rng.uniform(0.01, 1, (6, 1)) + 0.0
    g = np.full((6, n), 0.3)
    m[1, 3000], v[2, 2500], g[3, 3500], v[4, 100:] = np.nan, np.inf, 1e200, np.nan
    m3 = g * np.sqrt(np.maximum(v, 0)) ** 3
    for L in (2.0, 50.0):
        ref, parts, vpos = _numpy_survival(L, m, v, m3, n)
        got = np.empty((6, n))
        headlaws._surv[0](L, m, v, parts[0], parts[1], parts[2], parts[4], True, vpos, got)
        assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.all(np.abs(got - ref)[~np.isnan(ref)] <= bound)
        assert np.all(ref[0, n // 2:] == 0)                     # the early zeros are there


def test_compiled_window_sums_and_counts_are_the_numpy_numbers(compiled, monkeypatch):
    assert predict._stats
    for x in _heads():
        T = x.shape[1]
        W, C = predict.window_rows(x, LS, T // 2)                         # (S, R, n) views of L-major windows
        Wc = np.ascontiguousarray(W)                                      # and a C-ordered copy
        got = [predict.window_sums(W), predict.window_sums(Wc), predict.window_sums(W[:, :, 3])]
        got += [predict.coverage_counts(W[:, :, k], C[:, :, k]) for k in (0, 5, len(LS) - 1)]
        got += [predict.beyond_counts(W[:, :, k], w0) for k in (0, 7) for w0 in (0, 3, int(W[:, :, k].max()))]
        monkeypatch.setattr(gates, "COMPILED", False)
        ref = [predict.window_sums(W), predict.window_sums(Wc), predict.window_sums(W[:, :, 3])]
        ref += [predict.coverage_counts(W[:, :, k], C[:, :, k]) for k in (0, 5, len(LS) - 1)]
        ref += [predict.beyond_counts(W[:, :, k], w0) for k in (0, 7) for w0 in (0, 3, int(W[:, :, k].max()))]
        monkeypatch.setattr(gates, "COMPILED", True)
        for a, b in zip(got, ref):
            for u, v in (zip(a, b) if isinstance(a, tuple) else [(a, b)]):
                assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)


def _records(results):
    return [json.dumps(outputs.json_clean(table.head_json(r)), sort_keys=True) for r in results]


def test_compiled_analysis_is_the_numpy_analysis_over_workers(compiled, monkeypatch):
    lg = {"a": bench_scale.synthetic_heads(3, 16, 1024)}
    got = {}
    for use, workers in ((True, 1), (True, 2), (False, 1)):
        monkeypatch.setattr(gates, "COMPILED", use)
        res, _ = heads.analyse_layers(lg, L=LS, seed=3, mass_L=math.log(1e3), workers=workers)
        got[use, workers] = _records(res)
    assert got[True, 1] == got[True, 2] == got[False, 1]


def test_a_small_run_compiles_nothing(tmp_path):
    code = ("import sys\n"
            "from foxwindow.heads import bench_scale, predict, driver, laws\n"
            "from foxwindow.laws import gates\n"
            "driver.analyse_layers({'a': bench_scale.synthetic_heads(2, 8, 512)}, seed=0, workers=1)\n"
            "print(bool(predict._rows), bool(laws._cells), 'numba' in sys.modules,\n"
            "      laws.compile_fast_paths(gates.COMPILED_MIN - 1), laws.compile_fast_paths(gates.COMPILED_MIN),\n"
            "      bool(laws._surv))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [outputs.REPO, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False", "False", "True", "False"]   # from COMPILED_MIN on;
    # the lead law's loop only from SURV_MIN


def test_a_numba_that_cannot_compile_leaves_the_numpy_paths(tmp_path):
    """An installed numba whose import fails (here a stand-in package that raises) costs one line on stderr and
    the numpy paths, the same numbers; the run goes on."""
    fake = tmp_path / "fake" / "numba"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('numba built for another numpy')\n")
    code = ("from foxwindow.heads import predict, laws\n"
            "print(laws.compile_fast_paths(1 << 40), bool(predict._rows), bool(laws._cells))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), outputs.REPO]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False"]
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "numba could not compile" in err[0] and "another numpy" in err[0]
