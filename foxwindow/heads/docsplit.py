"""One huge head's per-document statistics over worker processes.

Most of a head with many documents is per-document work: the analysed rows' windows, the lag sums of Geyer's
tau (both centrings), V(n)'s block sums and the lead law's block sums. Each of those numbers is a document's own
(its row of the traces alone decides it), so forming them on blocks of documents in separate processes and putting
the blocks together gives the numbers one process gives (tested to the bit). `doc_rows` forms the rows of a range
of documents, each forked worker writing its block's rows straight into arrays in shared memory (nothing of that
size is pickled); `assemble` puts the ranges together (one range on one machine: `doc_parts`; a range a rank under
torchrun, gathered on rank 0: driver.analyse_stream). The rest of the head (its verdict and its per-law evaluation,
which mix the documents) reads them as it would its own (driver.DOCS; docs/SCALE.md).
"""
import math
import mmap
from dataclasses import dataclass

import numpy as np

from foxwindow import parallel
from foxwindow.heads import dependence, predict, verdict
from foxwindow.heads import laws as headlaws

__all__ = ["ROW_ALIGN", "DocParts", "block_lengths", "blocks", "doc_rows", "assemble", "doc_parts"]

ROW_ALIGN = 16          # blocks of documents start at multiples of 16 rows and hold 16 or more where there are
                        # several (dependence.DocSums takes 2 documents or more; a block's rows are its own numbers)


@dataclass
class DocParts:
    """What `doc_parts` forms for a head of increments x (S, T): windows (W, censored) as predict.window_rows(x,
    Ls, T // 2) gives them, sums (dependence.DocSums with the lag sums and block sums filled) and block_sums
    (laws.BlockSums(x, T // 2))."""
    windows: tuple
    sums: dependence.DocSums
    block_sums: headlaws.BlockSums


def block_lengths(x, Ls):
    """The block lengths whose V(n) sums the verdict and the per-law evaluation of head x (S, T) ask for at
    thresholds Ls: the grid with every L/kappa and 2 L/kappa of all documents, and every L/kappa of the fitted half
    (documents 0, 2, ...), each kappa computed as they compute it. A block length missed here is formed when asked
    (the same numbers, in one process)."""
    S, T = x.shape
    Ls = np.asarray(Ls, dtype=np.float64)
    kappa = x.sum(1).sum() / x.size                               # verdict.analyse's
    kf = float(x[np.arange(0, S, 2)].mean())                      # laws.evaluate's
    out = [dependence.n_grid(T // 2)]
    if kappa > 0:
        out.append(verdict.block_lengths(T, Ls / kappa))
    if kf > 0:
        out.append(headlaws.block_lengths(T, Ls / kf))
    return np.unique(np.concatenate(out))


def _shared(shape, dtype):
    """A zeroed array in anonymous shared memory: forked workers' writes to it are seen by this process."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = mmap.mmap(-1, max(n, 1))
    return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def blocks(S, parts):
    """[(a, b)] of at most `parts` consecutive blocks of S rows, each starting at a multiple of ROW_ALIGN and, where
    there is more than one, of ROW_ALIGN rows or more."""
    step = max(ROW_ALIGN, int(math.ceil(S / parts / ROW_ALIGN)) * ROW_ALIGN)
    starts = list(range(0, S, step))
    if len(starts) > 1 and S - starts[-1] < ROW_ALIGN:              # no block of a few rows: the last one longer
        starts.pop()
    return [(a, b) for a, b in zip(starts, starts[1:] + [S])]


def _sizes(x, Ls):
    """(r0, number of thresholds, K of the lag sums, the block lengths, T // 2) of head x at Ls."""
    T = x.shape[1]
    return T // 2, len(Ls), min(dependence.MAX_LAG, T - 1), block_lengths(x, Ls), T // 2


def doc_rows(x, Ls, rows, workers, deadline=None):
    """The per-document numbers of documents rows = (a, b) of head x (S, T) float64 C-contiguous
    (driver.increments) at thresholds Ls (n,) float > 0, formed on blocks of them in `workers` forked processes
    (parallel.run_jobs: Ctrl-C, SIGTERM and the deadline raise parallel.Stopped), each writing its rows into
    shared memory: {name: array of b - a rows} (`assemble` puts every document's together). Centrings and block
    lengths are those of the whole head (its grand mean, its kappa), so each row is the whole head's."""
    S, T = x.shape
    Ls = np.ascontiguousarray(Ls, dtype=np.float64).reshape(-1)
    r0, n, K, ns, nw = _sizes(x, Ls)
    a0, b0 = rows
    gmean = x.mean()                                              # the grand centring's mean (DocSums')
    m = b0 - a0
    out = dict(W=_shared((m, n, T - r0), np.int64), C=_shared((m, n, T - r0), np.bool_),
               seq=_shared((m, K + 1), np.float64), grand=_shared((m, K + 1), np.float64),
               Q=_shared((m, len(ns)), np.float64), E=_shared((m, len(ns)), np.float64),
               kd=_shared((m,), np.float64), q1=_shared((m, nw), np.float64), q2=_shared((m, nw), np.float64),
               q3=_shared((m, nw), np.float64))
    bounds = blocks(m, workers)

    def block(j):                      # documents a0 + a .. a0 + b: their rows of every array (in a forked worker)
        a, b = bounds[j]
        xa = x[a0 + a:a0 + b]
        W, C = predict.window_rows(xa, Ls, r0)                    # (b - a, R, n) views of L-major arrays
        out["W"][a:b] = W.transpose(0, 2, 1)
        out["C"][a:b] = C.transpose(0, 2, 1)
        sums = dependence.DocSums(xa)
        out["seq"][a:b] = sums.lag_sums(K)
        out["grand"][a:b] = dependence.grand_lags(xa, out["seq"][a:b], gmean)
        out["Q"][a:b], out["E"][a:b] = sums.block_columns(ns)
        bs = headlaws.BlockSums(xa, r0)
        out["kd"][a:b], out["q1"][a:b], out["q2"][a:b], out["q3"][a:b] = bs.kappa_d, bs.q1, bs.q2, bs.q3
        return None

    if m:
        parallel.run_jobs(block, len(bounds), workers, deadline=deadline)
    return out


def assemble(x, Ls, rows):
    """DocParts of head x at thresholds Ls from `rows`, doc_rows' arrays of every document in order (one call's,
    or several calls' concatenated along the documents)."""
    T = x.shape[1]
    r0, _, K, ns, _ = _sizes(x, np.ascontiguousarray(Ls, dtype=np.float64).reshape(-1))
    sums = dependence.DocSums.from_parts(x, {(K, "sequence"): rows["seq"], (K, "grand"): rows["grand"]},
                                         {int(v): rows["Q"][:, k] for k, v in enumerate(ns)},
                                         {int(v): rows["E"][:, k] for k, v in enumerate(ns)})
    bs = headlaws.BlockSums.from_sums(T, r0, rows["kd"], rows["q1"], rows["q2"], rows["q3"])
    return DocParts((rows["W"].transpose(0, 2, 1), rows["C"].transpose(0, 2, 1)), sums, bs)


def doc_parts(x, Ls, workers, deadline=None):
    """DocParts of increments x (S, T) at thresholds Ls, every document formed on `workers` processes (doc_rows,
    assemble): the numbers of one process."""
    return assemble(x, Ls, doc_rows(x, Ls, (0, x.shape[0]), workers, deadline))
