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
    with pytest.raises(ValueError, match="thresholds must be > 0"):         # refused before the loop runs
        predict.window_rows(_heads()[0], np.array([1.0, 0.0]), 100)
    monkeypatch.setattr(gates, "COMPILED", False)                          # the switch takes the numpy paths
    with pytest.raises(ValueError, match="thresholds must be > 0"):         # and refuses the same
        predict.window_rows(_heads()[0], np.array([1.0, -1.0]), 100)
    x = _heads()[0]
    W, _ = predict.window_rows(x, LS, 100)
    assert np.array_equal(W, predict.window_rows_numpy(x, LS, 100)[0])


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
            "      laws.compile_fast_paths(gates.COMPILED_MIN - 1), laws.compile_fast_paths(gates.COMPILED_MIN))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [outputs.REPO, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False", "False", "True"]     # from COMPILED_MIN positions on


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
