"""One huge head's per-document statistics over worker processes (heads/docsplit.py): the numbers of one process
to the bit, and a lone head analysed that way equal to one process in every number of its JSON."""
import numpy as np
import pytest
from scipy.fft import next_fast_len

from foxwindow import outputs, parallel
from foxwindow.heads import dependence, docsplit, predict, table
from foxwindow.heads import driver as heads
from foxwindow.heads import laws as headlaws
from foxwindow.laws import gates, renewal
from foxwindow.models import traces

LS = np.array([gates.threshold(e) for e in heads.EPS_SCAN])


def _x(S, T, mu=2.0, phi=0.8, seed=3):
    x, _ = gates.AR1LogitGate(mu, 0.8, phi).sample_paths(np.random.default_rng(seed), S, T)
    return np.ascontiguousarray(x, dtype=np.float64)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("S, T, workers", [(33, 257, 2), (70, 300, 2), (17, 4096, 2), (40, 1000, 3), (48, 512, 1)])
def test_doc_parts_are_the_numbers_of_one_process(S, T, workers):
    """Windows, lag sums (both centrings), V(n)'s block sums and the lead law's block sums formed on blocks of
    documents in forked workers equal those of one process on all documents, to the bit; a block length not
    formed up front is formed when asked, the same numbers."""
    x = _x(S, T)
    p = docsplit.doc_parts(x, LS, workers)
    W, C = predict.window_rows(x, LS, T // 2)
    assert _same(W, p.windows[0]) and _same(C, p.windows[1]) and W.strides == p.windows[0].strides
    K = min(dependence.MAX_LAG, T - 1)
    ref = dependence.DocSums(x)
    for centre in ("sequence", "grand"):
        assert _same(p.sums.lag_sums(K, centre), ref.lag_sums(K, centre))
        direct = renewal.lag_sums(x, K, centre)              # by its own transform: the same to rounding
        np.testing.assert_allclose(ref.lag_sums(K, centre), direct, rtol=0, atol=1e-12 * np.abs(direct).max())
    ns = docsplit.block_lengths(x, LS)
    for a, b in zip(ref.block_columns(ns), p.sums.block_columns(ns)):
        assert _same(a, b)
    extra = np.array([int(ns.max()) - 1, 3])                     # not asked up front: formed on use
    for a, b in zip(ref.block_columns(extra), p.sums.block_columns(extra)):
        assert _same(a, b)
    bs = headlaws.BlockSums(x, T // 2)
    for a in ("kappa_d", "q1", "q2", "q3", "w"):
        assert _same(getattr(bs, a), getattr(p.block_sums, a))
    assert (bs.S, bs.R, bs.nw, bs.ones) == (p.block_sums.S, p.block_sums.R, p.block_sums.nw, p.block_sums.ones)
    wts = np.concatenate([np.ones((1, S)), dependence.group_weights(S, 8)])
    for a, b in zip(bs.moments(wts), p.block_sums.moments(wts)):
        assert _same(a, b)


@pytest.mark.parametrize("S, T, K", [(3, 4, 3), (5, 10, 0), (4, 64, 63), (7, 300, 256), (2, 5000, 256)])
def test_grand_lags_from_the_sequence_lags_equal_their_own_transform(S, T, K):
    """The grand-centred lag sums derived from the sequence-centred ones, on documents whose rates are 1e4 apart
    (the between-document term dominates) and at the edge lags K = 0 and K = T - 1."""
    rng = np.random.default_rng(S * T + K)
    x = rng.gamma(2.0, 0.1, (S, T)) * np.logspace(-2, 2, S)[:, None]
    direct = renewal.lag_sums(x, K, "grand")
    got = dependence.grand_lags(x, renewal.lag_sums(x, K, "sequence"), x.mean())
    np.testing.assert_allclose(got, direct, rtol=0, atol=1e-12 * np.abs(direct).max())
    assert _same(dependence.DocSums(x).lag_sums(K, "grand"), got)


def test_blocks_of_documents_start_at_multiples_of_16_rows_and_cover_every_row():
    for S in (3, 16, 17, 31, 33, 100, 2048, 2049):
        for parts in (1, 2, 3, 7):
            b = docsplit.blocks(S, parts)
            assert b[0][0] == 0 and b[-1][1] == S and all(u[1] == v[0] for u, v in zip(b, b[1:]))
            assert all(a % docsplit.ROW_ALIGN == 0 for a, _ in b) and len(b) <= max(parts, 1)
            assert all(e - a >= docsplit.ROW_ALIGN for a, e in b) or len(b) == 1


def test_each_row_of_the_lag_products_is_its_own_at_every_size():
    """renewal.lag_products' rows are the rows' own numbers whether the array is below or above the size from which
    numpy reuses a temporary (256 KiB), and lag_sums keeps the numbers of f * conj(f) there (the large arrays of
    real heads)."""
    for S, T in ((10, 300), (70, 300), (4, 2048)):
        y = np.random.default_rng(S).normal(size=(S, T))
        full = renewal.lag_products(y, 50)
        for a, b in ((0, 1), (1, 3), (S // 2, S)):
            assert _same(full[a:b], renewal.lag_products(y[a:b], 50))
    y = np.random.default_rng(0).normal(size=(70, 1000))
    m = next_fast_len(1000 + 50, real=True)                      # lag_products' transform length
    f = np.fft.rfft(y, m, axis=1)
    assert f.nbytes >= 256 * 1024
    old = np.fft.irfft(f * np.conj(f), m, axis=1)[:, :51]
    assert _same(renewal.lag_products(y, 50), old)


def _file(tmp_path, S, T, name="lone.npz"):
    tr = {"blocks.0.attn.hook_log_fgate": (-_x(S, T, mu=3.0, seed=7))[:, :, None].astype(np.float32)}
    path = str(tmp_path / name)
    traces.save_trace(path, tr, {"model": "synthetic"})
    return path


def test_a_lone_head_of_many_documents_by_documents_equals_one_process(tmp_path, monkeypatch):
    """A lone head on two processes, its per-document statistics formed over both (docsplit) and its verdict and
    per-law evaluation as two jobs that read them: every number of its JSON that of one process."""
    path = _file(tmp_path, 64, 512)
    one, i1 = heads.analyse_traces(path, seed=5, n_boot=100, workers=1)
    monkeypatch.setattr(heads, "DOCS_MIN_S", 64)
    monkeypatch.setattr(heads, "DOCS_MIN", 64 * 512)
    sizes, calls = [], []
    real_jobs, real_parts = parallel.run_jobs, docsplit.doc_parts

    def spy_jobs(fn, n, *a, **k):
        sizes.append(n)
        return real_jobs(fn, n, *a, **k)

    def spy_parts(x, Ls, workers, deadline=None):
        calls.append((x.shape, workers))
        return real_parts(x, Ls, workers, deadline)
    monkeypatch.setattr(parallel, "run_jobs", spy_jobs)
    monkeypatch.setattr(docsplit, "doc_parts", spy_parts)
    two, i2 = heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert calls == [((64, 512), 2)] and sizes == [2, 2]          # the documents' two blocks, the two jobs
    assert one[0].laws and table.to_json(one, i1)["heads"] == table.to_json(two, i2)["heads"]
    calls.clear()
    monkeypatch.setattr(heads, "DOCS_MIN_S", 65)                  # fewer documents than that: one job
    heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert calls == []
    monkeypatch.setattr(heads, "DOCS_MIN_S", 64)
    monkeypatch.setattr(heads, "DOCS", False)                     # off: one job
    heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert calls == []


@pytest.mark.parametrize("kind", ["slow", "lattice", "no_forgetting", "spiky"])
def test_awkward_lone_heads_by_documents_equal_one_process(kind, tmp_path, monkeypatch):
    """Off the happy path: a head so slow that every threshold has censored windows (the lead law's block sums of
    every document go unused), a lattice head (one gate value: no variance), a head that never forgets (g = 1) and
    one of rare huge steps: split by documents, every number of one process."""
    rng = np.random.default_rng(11)
    S, T = 48, 512
    if kind == "slow":
        lg = -_x(S, T, mu=7.5, seed=2)
    elif kind == "lattice":
        lg = np.full((S, T), np.log(0.9))
    elif kind == "no_forgetting":
        lg = np.zeros((S, T))
    else:
        lg = -np.where(rng.random((S, T)) < 0.01, 30.0, 1e-3)
    path = str(tmp_path / f"{kind}.npz")
    traces.save_trace(path, {"blocks.0.attn.hook_log_fgate": lg[:, :, None].astype(np.float32)}, {"model": "x"})
    one, i1 = heads.analyse_traces(path, seed=3, n_boot=100, workers=1)
    monkeypatch.setattr(heads, "DOCS_MIN_S", S)
    monkeypatch.setattr(heads, "DOCS_MIN", S * T)
    calls, real = [], docsplit.doc_parts
    monkeypatch.setattr(docsplit, "doc_parts", lambda *a, **k: calls.append(1) or real(*a, **k))
    two, i2 = heads.analyse_traces(path, seed=3, n_boot=100, workers=2)
    assert calls == [1] and table.to_json(one, i1)["heads"] == table.to_json(two, i2)["heads"]


def test_a_stop_while_the_documents_are_formed_finishes_no_head(tmp_path, monkeypatch):
    path = _file(tmp_path, 40, 512)
    monkeypatch.setattr(heads, "DOCS_MIN_S", 1)
    monkeypatch.setattr(heads, "DOCS_MIN", 1)

    def stopped(x, Ls, workers, deadline=None):
        raise parallel.Stopped({0: None}, "SIGTERM")                  # one block of documents done, then a stop
    monkeypatch.setattr(docsplit, "doc_parts", stopped)
    res, info = heads.analyse_traces(path, seed=5, n_boot=100, workers=2)
    assert res == [] and info["partial"] == {"reason": "SIGTERM", "heads_done": 0, "heads_total": 1}


def test_a_head_split_by_documents_is_refused_before_the_work_on_its_documents(monkeypatch):
    """A lone head the documents split would take, transposed (more sequences than tokens) or with a bad n_boot:
    the one-line error of one process, before any document is formed."""
    monkeypatch.setattr(heads, "DOCS_MIN_S", 1)
    monkeypatch.setattr(heads, "DOCS_MIN", 1)
    monkeypatch.setattr(docsplit, "doc_rows", lambda *a, **k: pytest.fail("documents formed before the checks"))
    lg = {"a": (-np.abs(_x(64, 32)))[:, :, None].astype(np.float32)}
    with pytest.raises(ValueError, match=r"reads as 64 sequences x 32 tokens.*transposed"):
        heads.analyse_layers(lg, seed=0, workers=2)
    lg = {"a": (-np.abs(_x(40, 512)))[:, :, None].astype(np.float32)}
    with pytest.raises(ValueError, match="n_boot must be an int >= 0; got -1"):
        heads.analyse_layers(lg, seed=0, workers=2, n_boot=-1)


class _TwoRanks:
    """torch.distributed as rank 0 of two sees it, in one process: rank 1's block of the documents formed here
    (docsplit.doc_rows on one process), its other gathers empty; `stopped` makes rank 1 report a stop."""

    def __init__(self, x, stopped=False):
        self.x, self.stopped, self.gathered = x, stopped, []

    def install(self, monkeypatch):
        from foxwindow.training import distributed
        for name, fn in (("launched", lambda: True), ("world_size", lambda: 2), ("rank", lambda: 0),
                         ("is_main", lambda: True), ("any_true", lambda flag: bool(flag) or self.stopped),
                         ("gather_lists", self.gather)):
            monkeypatch.setattr(distributed, name, fn)

    def gather(self, items):
        items = list(items)
        if items and isinstance(items[0], dict) and "W" in items[0]:          # the blocks of the documents
            blocks = docsplit.blocks(self.x.shape[0], 2)
            self.gathered.append([blocks[0], blocks[1]])
            return items + [docsplit.doc_rows(self.x, LS, blocks[1], 1)]
        return items + ([None] if items and items[0] is None else [])          # the stop reasons; rank 1's heads: none


def test_a_lone_head_over_two_ranks_is_assembled_on_rank_0_into_the_numbers_of_one_process(monkeypatch):
    """The ranks' split as rank 0 runs it (the other rank's block formed here): each rank's block of the documents,
    gathered and assembled, then the head's two jobs: every number of one process; a stop on the other rank while
    the blocks are formed stops this one before the gather, finishing no head."""
    lg = {"a": (-_x(64, 512, mu=3.0, seed=7))[:, :, None].astype(np.float32)}
    one, _ = heads.analyse_layers(lg, L=LS, seed=5, n_boot=100, workers=1)
    monkeypatch.setattr(heads, "DOCS_MIN_S", 1)
    monkeypatch.setattr(heads, "DOCS_MIN", 1)
    ranks = _TwoRanks(heads.increments(lg["a"][:, :, 0]))
    ranks.install(monkeypatch)
    two, _ = heads.analyse_layers(lg, L=LS, seed=5, n_boot=100, workers=1)
    assert ranks.gathered == [[(0, 32), (32, 64)]]
    assert [outputs.json_clean(table.head_json(r)) for r in one] == [outputs.json_clean(table.head_json(r))
                                                                      for r in two]                # (NaN: None)
    ranks.stopped = True
    with pytest.raises(parallel.Stopped, match="another rank stopped") as exc:
        heads.analyse_layers(lg, L=LS, seed=5, n_boot=100, workers=1)
    assert exc.value.results == [] and len(ranks.gathered) == 1             # no gather after the agreed stop
