"""The fast paths of the per-head analysis give the results of the paths they replaced (kept here, frozen), the
heads analysed in parallel processes equal one process, traces are read lazily, and a stopped run keeps its
finished heads."""
import importlib.util
import json
import math
import os
import re
import signal

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from foxwindow import outputs, parallel
from foxwindow.heads import command, dependence, predict, table
from foxwindow.heads import driver as heads
from foxwindow.laws import gates as forget
from foxwindow.models import traces

LS = np.array([forget.threshold(e) for e in sorted(set(heads.EPS_SCAN) | {1e-3}, reverse=True)])


def _x(mu, S, T, seed=0, phi=0.6):
    x, _ = forget.AR1LogitGate(mu, 0.7, phi).sample_paths(np.random.default_rng(seed), S, T)
    return x


# ----------------------------------------------------------------------------- the paths replaced, frozen


def old_windows(lg, L, dim=None):
    t = torch.from_numpy(forget.increments_from_log_gates(np.asarray(lg, dtype=np.float64)))
    dim = -1 if dim is None else dim
    t = t.movedim(dim, -1)
    T = t.shape[-1]
    c = torch.cat([t.new_zeros(t.shape[:-1] + (1,)), torch.cumsum(t, dim=-1)], dim=-1)
    j = torch.searchsorted(c.contiguous(), (c[..., 1:] - L).contiguous(), side="left")
    return (torch.arange(1, T + 1) - j).movedim(-1, dim).numpy(), (j == 0).movedim(-1, dim).numpy()


def old_window_rows(x, Ls, r0):
    S, T = x.shape
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(x, 1)], 1)
    i = np.arange(r0 + 1, T + 1)[:, None]
    W = np.empty((S, T - r0, len(Ls)), np.int64)
    cens = np.empty(W.shape, bool)
    for s in range(S):
        j = np.searchsorted(c[s], c[s, r0 + 1:, None] - Ls[None, :], side="left")
        W[s], cens[s] = i - j, j == 0
    return W, cens


def old_block_walks(x, Ls, rng, per_doc=predict.WALKS_PER_DOC, block=None, n_cap=predict.N_CAP, r0=None):
    S, T = x.shape
    b = min(max(1, int(block or round(predict.BLOCK_FRACTION * T))), T)
    r0 = T // 2 if r0 is None else int(r0)
    L_max = float(Ls.max())
    W = np.zeros((S, per_doc, len(Ls)), np.int64)
    cens = np.zeros(W.shape, bool)
    back = b - 1 - np.arange(b)
    for d in range(S):
        kd = x[d].mean()
        if kd <= 0:
            W[d], cens[d] = n_cap, True
            continue
        n_len = int(min(n_cap, max(T + 1, 2 * L_max / kd + 2 * b + 64)))
        ends = rng.integers(r0, T, size=per_doc)
        nb = -(-n_len // b)
        starts = rng.integers(0, T - b + 1, size=(per_doc, nb))
        blocks = (starts[:, :, None] + back).reshape(per_doc, nb * b)
        for m, e in enumerate(ends):
            idx = np.concatenate([np.arange(e, -1, -1), blocks[m, :max(0, n_len - e - 1)]])[:n_len]
            cs = np.cumsum(x[d][idx])
            W[d, m] = np.searchsorted(cs, Ls, side="right")
            cens[d, m] = cs[-1] <= Ls
    return W, cens


def old_vn(x, ns):
    S, T = x.shape
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(x, 1)], 1)
    kd = x.sum(1) / T
    out = []
    for n in ns:
        d = c[:, n:] - c[:, :-n]
        out.append((d.sum(1), (d * d).sum(1), ((d - n * kd[:, None]) ** 2).sum(1)))
    return [np.stack(v, 1) for v in zip(*out)]


# ----------------------------------------------------------------------------- identical results


def test_search_left_is_searchsorted(monkeypatch):
    rng = np.random.default_rng(3)
    monkeypatch.setattr(forget, "SEARCH_CHUNK", 64)              # the blocked path on short arrays
    for kind in ("smooth", "plateaus", "ties", "one"):
        m = {"one": 1}.get(kind, 5000)
        steps = rng.exponential(1.0, m)
        if kind == "plateaus":
            steps[rng.random(m) < 0.9] = 0.0                     # crowded buckets: bisection instead
        if kind == "ties":
            steps = np.round(steps)
        c = np.concatenate([[0.0], np.cumsum(steps)])
        for L in (1e-9, 0.5, 3.0, 1e3):
            q = c[1:] - L
            assert np.array_equal(forget.search_left(c, q, sorted_q=True), np.searchsorted(c, q, side="left"))
        q = rng.uniform(-2, c[-1] + 2, (7, 33))
        assert np.array_equal(forget.search_left(c, q), np.searchsorted(c, q, side="left"))


def test_windows_equal_the_torch_searchsorted_path():
    rng = np.random.default_rng(0)
    for shape, dim in (((20_000,), None), ((7, 300), None), ((4, 500, 5), 1), ((3, 4, 300), -1)):
        lg = np.log(rng.beta(20, 1, shape))
        lg[..., 5:9] = 0.0                                      # gates of exactly 1
        for eps in (0.5, 1e-3, 1e-12):
            a, b = old_windows(lg, forget.threshold(eps), dim), forget.windows(lg, eps=eps, dim=dim)
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), (shape, eps)
            assert b[0].dtype == np.int64 and b[1].dtype == bool and b[0].shape == lg.shape


def test_window_rows_and_decay_rows_are_unchanged():
    for mu, S, T in ((4, 6, 2048), (7, 5, 512), (0.5, 4, 64)):
        x = _x(mu, S, T)
        a, b = old_window_rows(x, LS, T // 2), predict.window_rows(x, LS, T // 2)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        rows = traces.query_rows(T).numpy()
        W, c = old_windows(-x, LS[3], 1)
        assert traces.decay_window_rows(x, LS[3], rows) == (float(W[:, rows].mean()), float(c[:, rows].mean()))


@pytest.mark.parametrize("mu,S,T,n_cap", [(4, 8, 4096, predict.N_CAP), (7, 6, 1024, predict.N_CAP),
                                          (2, 4, 256, predict.N_CAP), (7, 4, 256, 3000), (9, 3, 128, 500)])
def test_block_walks_stop_past_L_max_with_the_same_windows_and_draws(mu, S, T, n_cap):
    x = _x(mu, S, T)
    x[0, :3] = 0.0
    r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
    a, b = old_block_walks(x, LS, r1, n_cap=n_cap), predict.block_walks(x, LS, r2, n_cap=n_cap)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert r1.integers(1 << 62) == r2.integers(1 << 62)          # the stream continues from the same place


def test_variance_function_in_one_pass_equals_the_three_passes():
    x = _x(3, 6, 1024)
    vf = dependence.variance_function(x)
    A1, A2, Q = old_vn(x, vf.ns)
    np.testing.assert_allclose(vf.Q, Q, rtol=1e-12)
    np.testing.assert_allclose(vf.A1, A1, rtol=1e-12)
    np.testing.assert_allclose(vf.A2, A2, rtol=1e-12)


def test_int_quantiles_are_numpys_inverted_cdf():
    rng = np.random.default_rng(7)
    qs = (0.0, 0.05, 0.1, 1 / 3, 0.5, 0.9, 0.95, 1.0)
    for n in list(range(1, 60)) + [999, 1000, 4096, 100_003]:
        for top in (1, 4, 50_000):
            W = rng.integers(0, top, size=n)
            assert predict.int_quantiles(W, qs) == [int(v) for v in np.quantile(W, qs, method="inverted_cdf")]
    W = rng.geometric(0.01, size=(16, 300)) - 1                   # a (docs, rows) view, heavy ties at 0
    assert predict.int_quantiles(W[:, ::3], qs) == [int(v) for v in np.quantile(W[:, ::3].ravel(), qs,
                                                                                 method="inverted_cdf")]


# ----------------------------------------------------------------------------- heads in parallel


def _trace_file(tmp_path, S=6, T=256, H=(2, 3), name="t.npz"):
    rng = np.random.default_rng(1)
    tr = {f"blocks.{l}.attn.hook_log_fgate":
          np.stack([-_x(mu, S, T, seed=int(rng.integers(1 << 30))) for mu in np.linspace(1, 5, h)],
                   2).astype(np.float32) for l, h in enumerate(H)}
    path = str(tmp_path / name)
    traces.save_trace(path, tr, {"model": "synthetic"})
    return path, tr


def test_heads_in_two_processes_equal_one_process_and_the_old_per_head_loop(tmp_path):
    path, tr = _trace_file(tmp_path)
    one, i1 = heads.analyse_traces(path, seed=11, n_boot=200, workers=1)
    two, i2 = heads.analyse_traces(path, seed=11, n_boot=200, workers=2)
    d1 = table.to_json(one, i1)["heads"]
    assert d1 == table.to_json(two, i2)["heads"]
    # the loop the drivers ran before: analyse_head per head, then the decay window of every row
    children = np.random.SeedSequence(11).spawn(5)
    T = 256
    rows = traces.query_rows(T).numpy()
    old = []
    for l, (name, lg) in enumerate(tr.items()):
        for h in range(lg.shape[2]):
            r = heads.analyse_head(lg[:, :, h], L=[forget.threshold(e) for e in heads.EPS_SCAN],
                                   layer=l, head=h, n_heads=5, n_boot=200, seed=children[len(old)])
            W, c = old_windows(lg[:, :, h], math.log(1e3), 1)
            r.mass_eps, r.seed, r.layer_name = math.exp(-math.log(1e3)), 11, name   # as decay_window_L
            r.decay_window_mean, r.decay_window_censored = float(W[:, rows].mean()), float(c[:, rows].mean())
            old.append(r)
    heads.set_states(old)
    assert table.to_json(old, i1)["heads"] == d1



def test_saved_traces_keep_freed_memory_in_the_heap(tmp_path, monkeypatch):
    """analyse_traces holds no model, so it keeps freed arrays in its heap for the next head (parallel.tune_allocator,
    as forked workers do) also when it analyses the heads itself."""
    path, _ = _trace_file(tmp_path)
    monkeypatch.setattr(parallel, "_TUNED", [])
    heads.analyse_traces(path, seed=1, n_boot=50, workers=1)
    assert parallel._TUNED == [True]

def test_lazy_traces_read_what_load_trace_reads(tmp_path):
    path, tr = _trace_file(tmp_path)
    lazy, meta = traces.open_traces(path)
    eager, meta2 = traces.load_traces_checked(path)
    assert meta == meta2 and list(lazy) == list(eager)
    for k in eager:
        assert lazy[k].shape == eager[k].shape and lazy[k]._loc is not None          # memory-mapped
        assert np.array_equal(lazy[k][:, :, 1], eager[k][:, :, 1])
    comp = str(tmp_path / "c.npz")
    with np.load(path) as z:
        np.savez_compressed(comp, **{k: z[k] for k in z.files})
    lazy_c, _ = traces.open_traces(comp)
    assert all(t._loc is None and np.array_equal(t[:, :, 0], eager[k][:, :, 0]) for k, t in lazy_c.items())


def test_load_trace_memory_mapped_reads_the_eager_values_and_refuses_what_it_cannot_map(tmp_path, monkeypatch):
    """load_trace(path, mmap=True): read-only memory maps with the eager reader's values and metadata, every value
    checked first (a NaN, a positive log gate: the eager messages); a compressed or float64 member refused, not
    read eagerly; mmap must be a bool."""
    monkeypatch.setattr(traces, "READ_CHUNK", 64)                          # the check streamed over many reads
    path, tr = _trace_file(tmp_path)
    eager, meta = traces.load_trace(path)
    mapped, meta2 = traces.load_trace(path, mmap=True)
    assert meta2 == meta and list(mapped) == list(eager)
    for k, a in mapped.items():
        assert isinstance(a, np.memmap) and a.dtype == np.float32 and not a.flags.writeable
        assert np.array_equal(a, eager[k]) and np.array_equal(a[:, :, 1], tr[k][:, :, 1])
    for bad, words in ((np.nan, "NaN or infinite"), (0.5, "positive log gates")):
        with np.load(path) as z:                                           # (save_trace refuses to write it)
            d = {k: z[k] for k in z.files}
        d["trace_1"][-1, -1, -1] = bad
        p2 = str(tmp_path / f"bad{bad}.npz")
        np.savez(p2, **d)
        for mm in (False, True):
            with pytest.raises(ValueError, match=words):
                traces.load_trace(p2, mmap=mm)
    comp = str(tmp_path / "c.npz")
    with np.load(path) as z:
        np.savez_compressed(comp, **{k: z[k] for k in z.files})
    with pytest.raises(ValueError, match="stored compressed and cannot be memory-mapped"):
        traces.load_trace(comp, mmap=True)
    name = "blocks.0.attn.hook_log_fgate"
    assert np.array_equal(traces.load_trace(comp)[0][name], eager[name])
    wide = str(tmp_path / "f64.npz")
    with np.load(path) as z:
        np.savez(wide, **{k: (z[k].astype(np.float64) if k.startswith("trace_") else z[k]) for k in z.files})
    with pytest.raises(ValueError, match="float64, not float32"):
        traces.load_trace(wide, mmap=True)
    with pytest.raises(ValueError, match="mmap must be True or False"):
        traces.load_trace(path, mmap="yes")
    npy = str(tmp_path / "one.npz")
    with open(npy, "wb") as fh:
        np.save(fh, tr["blocks.0.attn.hook_log_fgate"])
    for reader in (lambda p: traces.load_trace(p, mmap=True), traces.open_traces, traces.check_trace_file):
        with pytest.raises(ValueError, match="a single .npy array"):
            reader(npy)


@pytest.mark.parametrize("chunk", [1, 1000, 1 << 25])        # bytes a read: one position, a few, all
def test_read_heads_reads_blocks_of_heads_in_chunks_of_rows(tmp_path, monkeypatch, chunk):
    """LazyTrace.read_heads: the values of the head columns (a run, a scattered list, one head), read in chunks of
    rows without a memory map; a compressed file the same; a truncated one an error naming it."""
    monkeypatch.setattr(traces, "READ_CHUNK", chunk)
    path, tr = _trace_file(tmp_path, S=7, H=(5,))
    lazy, _ = traces.open_traces(path)
    lg, want = lazy["blocks.0.attn.hook_log_fgate"], tr["blocks.0.attn.hook_log_fgate"]
    for hs in (range(1, 4), [4, 0, 2], [3], range(5)):
        got = lg.read_heads(hs)
        assert got.shape == (7, 256, len(hs)) and np.array_equal(got, want[:, :, list(hs)]), hs
    comp = str(tmp_path / "c.npz")
    with np.load(path) as z:
        np.savez_compressed(comp, **{k: z[k] for k in z.files})
    assert np.array_equal(traces.open_traces(comp)[0]["blocks.0.attn.hook_log_fgate"].read_heads([1, 2]),
                          want[:, :, 1:3])
    with pytest.raises(ValueError, match="outside 0..4"):
        lg.read_heads([5])
    cut = str(tmp_path / "cut.npz")
    with open(path, "rb") as fh:
        data = fh.read()
    lazy_cut, _ = traces.open_traces(path)
    with open(cut, "wb") as fh:
        fh.write(data[:lg._loc[0] + 7 * 256 * 5 * 4 // 2])               # the member cut in the middle
    short = lazy_cut["blocks.0.attn.hook_log_fgate"]
    short.path = cut
    with pytest.raises(ValueError, match="ends early"):
        short.read_heads([0])


def test_heads_read_in_blocks_give_the_numbers_of_one_head_at_a_time(tmp_path, monkeypatch):
    """A trace file's heads are read a block at a time (traces.HEAD_BLOCK_BYTES): blocks of 2 heads (one cut at
    its layer's end), in this process and in two workers, give the numbers of whole-layer blocks and of one head
    at a time."""
    path, tr = _trace_file(tmp_path)
    ref, i0 = heads.analyse_traces(path, seed=11, n_boot=200, workers=1)             # each layer one block
    want = table.to_json(ref, i0)["heads"]
    reads = []
    real = traces.LazyTrace.read_heads
    monkeypatch.setattr(traces.LazyTrace, "read_heads", lambda self, hs: (reads.append(list(hs)), real(self, hs))[1])
    for size in (2 * 6 * 256 * 4, 1):                                              # 2 heads a block; 1 head
        monkeypatch.setattr(traces, "HEAD_BLOCK_BYTES", size)
        reads.clear()
        one, i1 = heads.analyse_traces(path, seed=11, n_boot=200, workers=1)
        assert reads == ([[0, 1], [0, 1], [2]] if size > 1 else [[0], [1], [0], [1], [2]]), reads
        two, i2 = heads.analyse_traces(path, seed=11, n_boot=200, workers=2)
        assert table.to_json(one, i1)["heads"] == want == table.to_json(two, i2)["heads"]


def test_max_len_reads_heads_in_blocks_and_gives_the_numbers_of_a_cut_file(tmp_path, monkeypatch):
    """--max-len on a trace file: the heads read through HeadBlocks (one head a block here) and cut, the numbers of
    a file holding only the first max_len positions."""
    path, tr = _trace_file(tmp_path)
    cut = str(tmp_path / "cut.npz")
    traces.save_trace(cut, {k: v[:, :128] for k, v in tr.items()})
    want, iw = heads.analyse_traces(cut, seed=5, n_boot=100, workers=1)
    monkeypatch.setattr(traces, "HEAD_BLOCK_BYTES", 1)
    reads = []
    real = traces.LazyTrace.read_heads
    monkeypatch.setattr(traces.LazyTrace, "read_heads", lambda self, hs: (reads.append(list(hs)), real(self, hs))[1])
    for w in (1, 2):
        got, ig = heads.analyse_traces(path, seed=5, n_boot=100, workers=w, max_len=128)
        assert table.to_json(got, ig)["heads"] == table.to_json(want, iw)["heads"]
    assert reads == [[0], [1], [0], [1], [2]]                            # this process's run (workers 1)


def test_bad_values_are_found_once_per_head(tmp_path):
    path, tr = _trace_file(tmp_path, H=(2,))
    with np.load(path) as z:
        members = {k: z[k] for k in z.files}
    members["trace_0"][0, 7, 1] = np.nan                            # save_trace itself refuses such a file
    p = str(tmp_path / "bad.npz")
    np.savez(p, **members)
    with pytest.raises(ValueError, match="NaN"):
        heads.analyse_traces(p, seed=1, n_boot=0, workers=1)
    assert heads.increments(np.array([[-0.0, -1.0]], np.float32)).dtype == np.float64
    with pytest.raises(ValueError, match="<= 0"):
        heads.increments(np.array([[0.5, -1.0]]))


# ----------------------------------------------------------------------------- long runs


def test_a_stopped_run_keeps_its_finished_heads(tmp_path, monkeypatch):
    path, _ = _trace_file(tmp_path)
    full, _ = heads.analyse_traces(path, seed=3, n_boot=100, workers=1)
    calls = []
    real = heads._analyse_x

    def stop_at_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)                   # as a scheduler stops a job
        return real(*a, **k)
    monkeypatch.setattr(heads, "_analyse_x", stop_at_third)
    part, info = heads.analyse_traces(path, seed=3, n_boot=100, workers=1)
    assert info["partial"] == {"reason": "SIGTERM", "heads_done": 2, "heads_total": 5}
    # every number of the finished heads; the laws' states are those of a family of the finished heads
    keys = ("layer", "head", "kappa", "sigma2", "tau", "dependence", "mass", "verdict", "prediction", "pmf")
    got, want = table.to_json(part, info)["heads"], table.to_json(full[:2], info)["heads"]
    assert [{k: h[k] for k in keys} for h in got] == [{k: h[k] for k in keys} for h in want]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL        # restored


def test_max_minutes_refuses_a_long_run_and_bounds_a_running_one(tmp_path, monkeypatch):
    path, _ = _trace_file(tmp_path)
    with pytest.raises(ValueError, match="past --max-minutes"):
        heads.analyse_traces(path, seed=3, n_boot=100, workers=1, max_minutes=1e-6)
    monkeypatch.setattr(heads, "COST_HEAD", (0.0, 0.0, 0.0))          # an estimate that lets it start
    part, info = heads.analyse_traces(path, seed=3, n_boot=100, workers=2, max_minutes=1e-6)
    assert info["partial"]["reason"].startswith("the time bound") and info["partial"]["heads_total"] == 5
    out = tmp_path / "p.json"
    code = command.main(["--traces", path, "--json", str(out), "--no-progress", "--seed", "3", "--n-boot", "100",
                       "--max-minutes", "1e-6", "--workers", "1"])
    assert code == 3 and json.loads(out.read_text())["info"]["partial"]["heads_total"] == 5


def test_run_jobs_orders_results_and_reports_a_stop():
    assert parallel.run_jobs(lambda i: i * i, 7, workers=2) == [i * i for i in range(7)]
    with pytest.raises(parallel.Stopped) as e:
        parallel.run_jobs(lambda i: i, 5, workers=1, deadline=0.0)
    assert e.value.done == {}
    assert parallel.resolve_workers(None, 1) == 1 and parallel.default_workers() >= 1
    with pytest.raises(ValueError, match="workers"):
        parallel.resolve_workers(0, 3)


def _blas_threads(_i=0):
    return sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})


def test_jobs_run_numpys_blas_on_one_thread_and_the_caller_keeps_its_own():
    before = _blas_threads()
    assert before, "no BLAS found by threadpoolctl: the limit would be a no-op"
    assert parallel.run_jobs(_blas_threads, 2, workers=1) == [[1], [1]]           # in this process
    assert parallel.run_jobs(_blas_threads, 4, workers=2) == [[1]] * 4             # in each worker
    assert _blas_threads() == before                                              # restored after the jobs


def old_coverage_loop(Wp, Wt, Ct, k):
    pred = np.sort(Wp[:, :, k].ravel())

    def F(w):
        return np.searchsorted(pred, w, side="right") / len(pred)
    return np.array([predict._coverage(F, Wt[d, :, k], Ct[d, :, k]).mean() for d in range(Wt.shape[0])])


def test_out_of_sample_scores_are_unchanged():
    x = _x(3, 8, 512)
    W, C = predict.window_rows(x, LS, 256)
    o = predict.out_of_sample(x, W, C, LS, np.random.default_rng(2))
    Wp, _ = predict.block_walks(x[0::2], LS, np.random.default_rng(2), 2 * predict.WALKS_PER_DOC)
    for k in range(len(LS)):
        assert math.isclose(o.coverage[k], float(old_coverage_loop(Wp, W[1::2], C[1::2], k).mean()), rel_tol=1e-13)


def test_lag_sums_need_no_more_than_max_lag_of_padding():
    from foxwindow.laws import renewal
    x = _x(2, 4, 1000)
    y = x - x.mean(1, keepdims=True)
    direct = np.stack([(y[:, :1000 - k] * y[:, k:]).sum(1) for k in range(40)], 1)
    np.testing.assert_allclose(renewal.lag_sums(x, 39), direct, rtol=1e-10, atol=1e-12 * np.abs(direct).max())


def test_chunks_heads_in_two_processes_equal_one(tmp_path, monkeypatch):
    from dataclasses import asdict

    from foxwindow.uses import chunks
    path, tr = _trace_file(tmp_path, S=6, T=512, H=(3,))
    one = chunks.analyse(tr, chunks=(64, 128), workers=1)
    two = chunks.analyse(tr, chunks=(64, 128), workers=2)
    assert [asdict(h) for h in one] == [asdict(h) for h in two]
    # the file's layer read head by head (blocks of 2 heads and of 1) gives the numbers of the arrays in memory
    for size in (2 * 6 * 512 * 4, 1):
        monkeypatch.setattr(traces, "HEAD_BLOCK_BYTES", size)
        lazy, _ = traces.check_trace_file(path)
        for w in (1, 2):
            assert [asdict(h) for h in chunks.analyse(lazy, chunks=(64, 128), workers=w)] == [asdict(h) for h in one]


def test_search_left_on_extreme_spans():
    for c in (np.array([0.0, 2.2250738585072014e-308]), np.array([0.0, 5e-324, 1e-323]),
              np.array([0.0, 1e300, 1.7e308])):
        q = np.concatenate([c - 1e-300, c, c + 1e-300, [-1.0, 2.0]])
        assert np.array_equal(forget.search_left(c, q), np.searchsorted(c, q, side="left"))


def test_bench_scale_docs_refuses_before_any_work(tmp_path, monkeypatch):
    """--docs names a markdown file whose scaling section is rewritten: anything else is refused in one line before
    the benchmark starts (a file without the section's markers only with --force, which appends one)."""
    from foxwindow.heads import bench_scale
    monkeypatch.setattr(bench_scale, "hot_paths", lambda *a: pytest.fail("the benchmark started"))
    plain = tmp_path / "notes.md"
    plain.write_text("my notes\n")
    binary = tmp_path / "b.md"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    cases = [(str(tmp_path / "a.txt"), "expected a markdown file"), ("/proc/x.md", "special filesystem"),
             (str(tmp_path / "missing" / "x.md"), "does not exist"), (str(plain), "no bench_scale section"),
             (str(binary), "UTF-8")]
    for path, msg in cases:
        with pytest.raises(outputs.UsageError, match=msg):
            bench_scale.docs_target(path)
        assert outputs.cli(bench_scale.main, ["--docs", path]) == 2
    assert plain.read_text() == "my notes\n"
    assert bench_scale.docs_target(str(plain), force=True) == str(plain)
    with_section = tmp_path / "bench.md"
    with_section.write_text(f"# B\n\n{bench_scale.BEGIN}\nold\n{bench_scale.END}\n\ntail\n")
    assert bench_scale.docs_target(str(with_section)) == str(with_section)
    bench_scale.write_docs(str(with_section), "new")
    assert with_section.read_text() == f"# B\n\n{bench_scale.BEGIN}\nnew\n{bench_scale.END}\n\ntail\n"


def test_bench_scale_compiled_rows_time_the_compiled_loops_beside_their_baselines(monkeypatch):
    """Where numba is installed the benchmark's last hot rows time the compiled windows (allocating and into buffers,
    against the matching cumsum) and the analysed rows' compiled loop, each ratio its own seconds over its
    baseline's; without numba there are none (the numpy rows stand alone)."""
    from foxwindow.heads import bench_scale
    calls = {}
    real = bench_scale.law_bench.paired_times

    def spy(fns, repeats):
        out = real(fns, repeats)
        calls.setdefault("n", []).append(len(fns))
        return out
    monkeypatch.setattr(bench_scale.law_bench, "paired_times", spy)
    if importlib.util.find_spec("numba") is None:
        assert bench_scale.compiled_hot_paths(1, 1000) == []
        return
    rows = bench_scale.compiled_hot_paths(1, 100_000)
    assert calls["n"] == [4, 2]
    assert [("compiled" in r["what"], r["baseline"]) for r in rows] == [
        (True, "bare np.cumsum"), (False, "np.cumsum into a buffer allocated once"),
        (True, "one np.searchsorted a document")]
    for r in rows:
        assert r["seconds"] > 0 and r["base_s"] > 0 and r["ratio"] == r["seconds"] / r["base_s"]
        assert r["met"] == (r["ratio"] <= 2 if "cumsum" in r["baseline"] else r["ratio"] < 1)
    assert forget.merged() and predict._rows                   # the loops timed are the compiled ones
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert bench_scale.compiled_hot_paths(1, 1000) == []


def test_a_head_alone_on_two_workers_runs_as_two_halves_with_the_numbers_of_one_job(tmp_path, monkeypatch):
    """Fewer heads than half the workers asked (one huge head on two processors): each head runs as two jobs, its
    verdict and its per-law evaluation, joined into the HeadResult one job gives, every number the same (the JSON);
    with as many heads as workers, one job a head."""
    path, _ = _trace_file(tmp_path, S=8, T=512, H=(1,))
    one, i1 = heads.analyse_traces(path, seed=5, n_boot=100, workers=1)
    monkeypatch.setattr(heads, "SPLIT", True)                   # the split (off by default)
    monkeypatch.setattr(heads, "SPLIT_MIN", 8 * 512)            # heads this small split too (the default: 2^20)
    sizes = []
    real = parallel.run_jobs

    def spy(fn, n, *a, **k):
        sizes.append(n)
        return real(fn, n, *a, **k)
    monkeypatch.setattr(parallel, "run_jobs", spy)
    two, i2 = heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert sizes == [2]                                         # the head's two halves
    assert table.to_json(one, i1)["heads"] == table.to_json(two, i2)["heads"]
    assert one[0].laws and set(two[0].laws) == set(one[0].laws)
    path2, _ = _trace_file(tmp_path, S=8, T=512, H=(2,), name="two.npz")
    sizes.clear()
    heads.analyse_traces(path2, seed=5, n_boot=100, workers=2)
    assert sizes == [2]                                         # two heads, two jobs: not split
    monkeypatch.setattr(heads, "SPLIT_MIN", 0)
    path3, _ = _trace_file(tmp_path, S=3, T=512, H=(1,), name="three.npz")      # below MIN_DOCS: no laws half
    three_one, j1 = heads.analyse_traces(path3, seed=5, n_boot=100, workers=1)
    sizes.clear()
    three_two, j2 = heads.analyse_traces(path3, seed=5, n_boot=100, workers=2)
    assert sizes == [2] and not three_one[0].laws and not three_two[0].laws
    assert table.to_json(three_one, j1)["heads"] == table.to_json(three_two, j2)["heads"]
    monkeypatch.setattr(heads, "SPLIT_MIN", 8 * 512 + 1)        # a smaller head than that: one job
    sizes.clear()
    heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert sizes == [1]
    monkeypatch.setattr(heads, "SPLIT_MIN", 0)
    monkeypatch.setattr(heads, "SPLIT", False)
    sizes.clear()
    three, i3 = heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert sizes == [1] and table.to_json(three, i3)["heads"] == table.to_json(one, i1)["heads"]


def test_a_stopped_split_group_keeps_the_heads_whose_halves_are_both_done(tmp_path, monkeypatch):
    """A stop while split heads run: the heads with both halves finished are returned whole (their laws joined,
    every number that of a full run's head), a head with one half done is not."""
    path, _ = _trace_file(tmp_path, S=8, T=512, H=(3,))
    full, info = heads.analyse_traces(path, seed=5, n_boot=100, workers=1)
    monkeypatch.setattr(heads, "SPLIT", True)
    monkeypatch.setattr(heads, "SPLIT_MIN", 0)
    jobs = []

    def three_halves_then_stop(fn, n, workers, on_result, deadline):   # head 0 whole, head 1's laws alone
        jobs.append((n, workers))
        done = {}
        for k in (0, 1, 3):
            done[k] = fn(k)
            on_result(k, done[k])
        raise parallel.Stopped(done, "SIGTERM")
    monkeypatch.setattr(parallel, "run_jobs", three_halves_then_stop)
    part, pinfo = heads.analyse_traces(path, seed=5, n_boot=100, workers=8)
    assert jobs == [(6, 6)] and pinfo["partial"] == {"reason": "SIGTERM", "heads_done": 1, "heads_total": 3}
    assert part[0].laws and part[0].laws["at"] and len(part) == 1
    keys = ("layer", "head", "kappa", "sigma2", "tau", "dependence", "mass", "verdict", "prediction", "pmf")
    got, want = table.to_json(part, pinfo)["heads"], table.to_json(full[:1], info)["heads"]
    assert [{k: h[k] for k in keys} for h in got] == [{k: h[k] for k in keys} for h in want]
    assert [r["mean"] for r in got[0]["at"][0]["laws"].values()] == \
        [r["mean"] for r in want[0]["at"][0]["laws"].values()]


def test_the_estimate_names_the_processes_a_lone_split_head_uses(monkeypatch, capsys):
    """The line before a long analysis says how many processes run: a lone head split over 2 workers, 2; the
    same head kept whole, 1."""
    lg = {"a": np.zeros((8, 512, 1), np.float32) - 0.01}
    monkeypatch.setattr(heads, "COST_HEAD", (100.0, 0.0, 0.0))                 # estimated past ESTIMATE_FROM_S
    jobs = []

    def stop(fn, n, *a, **k):                                                   # no analysis: the line is enough
        jobs.append(n)
        raise parallel.Stopped({}, "SIGTERM")
    monkeypatch.setattr(parallel, "run_jobs", stop)
    for split, split_min, n, said in ((True, 0, 2, "on 2 worker(s)"), (True, 1 << 40, 1, "on 1 worker(s)"),
                                      (False, 0, 1, "on 1 worker(s)")):               # (the default: not split)
        monkeypatch.setattr(heads, "SPLIT", split)
        monkeypatch.setattr(heads, "SPLIT_MIN", split_min)
        with pytest.raises(parallel.Stopped):
            heads.analyse_layers(lg, seed=0, workers=2, progress=True)
        assert jobs[-1] == n and said in capsys.readouterr().err


def test_trace_file_values_are_checked_streamed_before_the_work(tmp_path, monkeypatch):
    """forget.py --traces checks every value before the work without holding the file (check_trace_file: chunks of
    rows), with load_trace's messages: a NaN in the last row, the largest positive log gate anywhere."""
    monkeypatch.setattr(traces, "READ_CHUNK", 1)                            # a row at a time
    path, tr = _trace_file(tmp_path)
    lazy, meta = traces.check_trace_file(path)
    assert list(lazy) == list(tr) and all(isinstance(t, traces.LazyTrace) for t in lazy.values())
    for bad, words in ((np.nan, "NaN or infinite"), (0.25, "positive log gates (max 0.5)")):
        t = {k: v.copy() for k, v in tr.items()}
        t["blocks.1.attn.hook_log_fgate"][-1, -1, 2] = bad
        t["blocks.1.attn.hook_log_fgate"][0, 3, 0] = 0.5 if bad == 0.25 else 0.0
        p = str(tmp_path / f"bad{words[:3]}.npz")
        np.savez(p, meta_json=np.frombuffer(json.dumps(dict(format=traces.TRACE_FORMAT, names=list(t),
                 shapes=[list(v.shape) for v in t.values()])).encode(), np.uint8),
                 **{f"trace_{i}": v for i, v in enumerate(t.values())})
        with pytest.raises(ValueError, match=rf"trace 'blocks.1.attn.hook_log_fgate' has {re.escape(words)}"):
            traces.check_trace_file(p)
        with pytest.raises(ValueError, match=re.escape(words)):
            traces.load_trace(p)                                            # the eager reader says the same
    monkeypatch.setattr(traces, "load_trace", lambda *a, **k: pytest.fail("the whole file was loaded"))
    argv = ["--traces", path, "--n-boot", "50", "--seed", "1", "--no-progress", "--workers", "1"]
    assert command.main(argv) in (0, None)


def test_a_compressed_trace_too_big_for_memory_is_refused_in_one_line(tmp_path, monkeypatch):
    """A compressed member is decompressed whole for every read: refused, naming the way out, when that cannot fit."""
    from foxwindow import safety
    path, tr = _trace_file(tmp_path)
    comp = str(tmp_path / "c.npz")
    with np.load(path) as z:
        np.savez_compressed(comp, **{k: z[k] for k in z.files})
    monkeypatch.setattr(safety, "available_memory", lambda: 1000)
    with pytest.raises(ValueError, match=r"c.npz: reading the compressed trace 'trace_0' \(save it uncompressed: "
                                         r"save_trace\) would hold about"):
        traces.check_trace_file(comp)


def test_bench_scale_markdown_has_a_row_for_each_parallel_run():
    """The regenerated section: every parallel run measured has its row, the lone head by task and by documents
    among them, with its speedup and whether its results were identical."""
    from foxwindow.heads import bench_scale
    run = dict(what="w", workers=2, seconds=1.0, one_s=2.0, speedup=2.0, identical=True, load="load 1")
    res = dict(quick=False, machine="2 processors", load="load 1", hot=[], grid=[dict(S=32, T=2048, cpu_per_head=0.2,
               model=0.19)], workers=run, analysis_workers=run, torchrun=dict(run, identical=False),
               lone_head=dict(run, what="1 head x 256 x 16384"), docs_head=dict(run, what="1 head x 2048 x 2048",
                                                                                speedup=1.41),
               big=dict(heads=8, S=256, T=16384, file_gib=0.13, workers=2, wall=15.0, heads0=2, wall0=9.0,
                        max_rss_gib=1.4, cpu_per_head=2.9, marginal_cpu_per_head=1.7, marginal_wall_per_head=0.9,
                        load="load 1", full_heads=384, full_file_gib=6.0, full_wall_measured_min=5.8,
                        full_wall_idle_min=5.6))
    text = bench_scale.markdown(res)
    assert "| 1 head x 256 x 16384, 2 workers (its verdict and its per-law evaluation as two jobs" in text
    assert "| 1 head x 2048 x 2048, 2 workers (its per-document statistics over them" in text and "| 1.41 |" in text
    assert "torchrun 2 ranks (gloo) | 1.0 | 2.0 | 2.00 | **no** |" in text
    res.pop("docs_head")
    assert "per-document statistics" not in bench_scale.markdown(res)
