"""A head's window at any L, predicted from its own gates, and checked out of sample.

The model: the head's own documents, extended past their start by a moving-block bootstrap. A predicted
window is the first passage over L of a walk that starts at a query row drawn from the analysed rows
(the second half) of one document and reads that document backwards (as a window does) to its start;
past the start it continues through blocks of BLOCK_FRACTION of the trace drawn from the same document,
each read backwards. Up to the start every correlation, position effect and the document's own kappa
are the data's; beyond it the walk assumes the document stays stationary, so L beyond the trace's
length still gets a prediction. Nothing is fitted: no AR(1) or other parametric shape.

Windows on the traces themselves are right-censored where they reach the sequence start (the true
window is at least the row's index); `kaplan_meier` estimates their survival function, so long-window
heads get an estimate, or a bound where the survival never falls below the level asked.

`out_of_sample` fits the prediction on half of the documents and scores it on the other half: coverage
of the 90% interval (randomised at the discrete endpoints, so that it is 0.90 in expectation when the
prediction is right, even for windows of a few tokens; a censored window counts by the part of the
interval beyond its bound), and the errors of the mean and of the variance in units of their standard
errors (jackknife over both halves' documents).
"""
import math
from dataclasses import dataclass, field

import numpy as np

from foxwindow.heads.dependence import jackknife
from foxwindow.laws import gates
from foxwindow.laws.gates import search_left

__all__ = ["BLOCK_FRACTION", "WALKS_PER_DOC", "N_CAP", "QUANTILES", "window_rows", "window_rows_numpy",
           "compile_window_rows", "window_sums", "block_walks", "Prediction", "predict", "KaplanMeier",
           "kaplan_meier", "kaplan_meier_loo_means", "OutOfSample", "out_of_sample", "coverage_counts",
           "int_quantiles", "beyond_counts", "compile_window_stats"]

BLOCK_FRACTION = 0.25      # block length: a quarter of the trace
WALKS_PER_DOC = 64         # walks per document of the fitted half or of the whole head: enough that the
                           # simulation's share of the SE is small (seed_spread.py; docs/DEPENDENT.md)
N_CAP = 1 << 17            # longest walk simulated (tokens); a longer window is reported censored there
QUANTILES = (0.05, 0.5, 0.95)


def window_rows(x, Ls, r0):
    """Windows W = N - 1 of rows r0..T-1 of increments x (S, T) float64 at thresholds Ls (n,) float.
    Returns (W (S, R, n) int64, censored (S, R, n) bool), R = T - r0; a censored W is the row's index
    (the true window is at least that). Same windows as gates.windows. By the compiled loop where this process
    has compiled it (laws.compile_fast_paths: the driver does for a large run), else by window_rows_numpy: the
    same windows either way."""
    Ls = np.ascontiguousarray(Ls, dtype=np.float64).reshape(-1)
    T = np.shape(x)[1]
    if not (np.all(Ls > 0) and 0 <= r0 < T):          # a window is in [0, i] only for L > 0, on either path
        raise ValueError(f"window_rows: thresholds must be > 0 and r0 in [0, {T}); got {Ls.tolist()}, {r0}")
    kernel = _rows[0] if _rows and gates.COMPILED else None
    if kernel is None:
        return window_rows_numpy(x, Ls, r0)
    x = np.ascontiguousarray(x, dtype=np.float64)
    S = x.shape[0]
    W, cens = np.empty((S, len(Ls), T - r0), np.int64), np.empty((S, len(Ls), T - r0), np.bool_)
    kernel(x, Ls, int(r0), np.empty(T + 1), W, cens)                      # L-major, as window_rows_numpy's
    return W.transpose(0, 2, 1), cens.transpose(0, 2, 1)


def _rows_loop(x, Ls, r0, c, W, cens):
    """window_rows_numpy as one loop a document (laws.compile_fast_paths compiles it): c = the prefix sums of the
    document's increments, summed left to right (c_0 = 0, np.cumsum's numbers), and for each row i = r0+1..T and
    each L a pointer j = #{k : c_k < c_i - L} (the left search's answer, the same float query) that only moves
    forward as c_i grows, its start at row r0 + 1 bisected. x (S, T) float64, Ls (n,) float64 > 0, c (T + 1,)
    scratch; W (S, n, T - r0) int64 and cens (bool) written (L-major: each L's rows in order)."""
    S, T = x.shape
    n = len(Ls)
    js = np.zeros(n, np.int64)
    for s in range(S):
        acc = 0.0
        c[0] = 0.0
        for t in range(T):
            acc += x[s, t]
            c[t + 1] = acc
        for k in range(n):                                  # q <= c_i for L > 0, so the answer is at most i
            q = c[r0 + 1] - Ls[k]
            lo, hi = 0, r0 + 1
            while lo < hi:
                mid = (lo + hi) >> 1
                if c[mid] < q:
                    lo = mid + 1
                else:
                    hi = mid
            js[k] = lo
        for i in range(r0 + 1, T + 1):
            ci = c[i]
            row = i - r0 - 1
            for k in range(n):
                q = ci - Ls[k]
                j = js[k]
                # three steps without a branch (a pointer mostly moves 0-3 places a row, so the loop's exit is
                # rarely mispredicted), then the loop; c_j < q < c_i keeps j < i before each step
                j += c[j] < q
                j += c[j] < q
                j += c[j] < q
                while c[j] < q:
                    j += 1
                js[k] = j
                W[s, k, row] = i - j
                cens[s, k, row] = j == 0


_rows = []                  # [the compiled _rows_loop] once compiled (compile_window_rows)


def compile_window_rows():
    """Compile _rows_loop with numba (installed: the caller checked) for window_rows; once a process. Nothing is
    kept where the import or the compile raises. Returns True (compiled in this process)."""
    if not _rows:
        import numba  # optional accelerator (extra `fast`): only for a large run (laws.compile_fast_paths)
        _rows.append(numba.njit("void(float64[:, ::1], float64[::1], int64, float64[::1], int64[:, :, ::1], "
                                "boolean[:, :, ::1])", cache=False)(_rows_loop))
    return True


def window_rows_numpy(x, Ls, r0):
    """window_rows in numpy (its reference; the same arguments and windows): one search of every row's query
    c_i - L in the prefix sums c per document."""
    S, T = x.shape
    Ls = np.asarray(Ls, dtype=np.float64)
    R, n = T - r0, len(Ls)
    c = np.zeros(T + 1)
    q = np.empty((n, R))
    J = np.empty((S, n, R), np.int64)                                     # L-major: each L's queries in order
    for s in range(S):
        np.cumsum(x[s], out=c[1:])
        np.subtract(c[None, r0 + 1:], Ls[:, None], out=q)
        J[s] = search_left(c, q)                                           # smallest j with c_j >= c_i - L
    cens = J == 0
    np.subtract(np.arange(r0 + 1, T + 1), J, out=J)
    return J.transpose(0, 2, 1), cens.transpose(0, 2, 1)


def int_quantiles(W, qs):
    """np.quantile(W, qs, method="inverted_cdf") of integers W >= 0 (any shape, at least one value), the same
    values, from a histogram of W instead of a partition of a copy (0.44-0.46 of the time on a head's 128 x 8192
    held-out windows). Returns a list of ints, one per q in qs (floats in [0, 1])."""
    cum = np.cumsum(np.bincount(np.asarray(W).ravel()))
    n, out = cum[-1], []
    for q in qs:
        index = n * q - 1                       # numpy's virtual index for inverted_cdf, the same float operations
        prev = math.floor(index)
        idx = max(prev if index - prev == 0 else prev + 1, 0)
        out.append(int(np.searchsorted(cum, min(idx, n - 1), side="right")))     # the idx-th smallest (from 0)
    return out


def window_sums(W):
    """Sums of W and of W^2 over axis 1 of integer windows W (S, R) or (S, R, n), as float64 (S,) or (S, n): exact
    integer sums (the same numbers as the float sums of a float copy while they stay below 2^53), no float copy.
    By one compiled pass over int64 windows where compile_window_stats has run (integer sums: the same numbers)."""
    W = np.asarray(W)
    if _stats and gates.COMPILED and W.dtype == np.int64 and W.ndim in (2, 3):
        V = W[:, None, :] if W.ndim == 2 else W.transpose(0, 2, 1)         # (S, n, R): each row's windows in order
        s1, s2 = np.empty(V.shape[:2], np.int64), np.empty(V.shape[:2], np.int64)
        _stats[0](V, s1, s2)
        if W.ndim == 2:
            s1, s2 = s1[:, 0], s2[:, 0]
        return s1.astype(np.float64), s2.astype(np.float64)
    s2 = np.einsum("sr...,sr...->s...", W, W)
    return W.sum(1).astype(np.float64), s2.astype(np.float64)


def _sums_loop(V, s1, s2):
    """window_sums as one loop (compile_window_stats compiles it): V (S, n, R) int64, s1 and s2 (S, n) int64."""
    S, n, R = V.shape
    for s in range(S):
        for k in range(n):
            a, b = 0, 0
            for r in range(R):
                w = V[s, k, r]
                a += w
                b += w * w
            s1[s, k] = a
            s2[s, k] = b


def _counts_loop(w, cens, top, out):
    """coverage_counts' table as one loop: out (k, 2, top) int64 zeros; w (k, R) int64, cens (k, R) bool."""
    k, R = w.shape
    for i in range(k):
        for r in range(R):
            out[i, 1 if cens[i, r] else 0, w[i, r]] += 1


def _beyond_loop(W, w0, gt, eq):
    """The tail test's per-document counts of W (S, R) int64 above w0 and at w0, into gt and eq (S,) int64."""
    S, R = W.shape
    for s in range(S):
        a, b = 0, 0
        for r in range(R):
            v = W[s, r]
            a += v > w0
            b += v == w0
        gt[s] = a
        eq[s] = b


_stats = []                 # [_sums_loop, _counts_loop, _beyond_loop compiled] (compile_window_stats)


def compile_window_stats():
    """Compile the integer loops of window_sums, coverage_counts and beyond_counts with numba (installed: the
    caller checked); once a process (laws.compile_fast_paths, from laws.SURV_MIN positions). Integer counts and
    sums: the same numbers as the numpy paths."""
    if not _stats:
        import numba  # optional accelerator (extra `fast`)
        _stats.extend([numba.njit("void(int64[:, :, :], int64[:, ::1], int64[:, ::1])", cache=False)(_sums_loop),
                       numba.njit("void(int64[:, :], boolean[:, :], int64, int64[:, :, ::1])",
                                  cache=False)(_counts_loop),
                       numba.njit("void(int64[:, :], int64, int64[::1], int64[::1])", cache=False)(_beyond_loop)])


def beyond_counts(W, w0):
    """Per row of integer windows W (S, R): the number of windows above w0 and equal to w0, (S,) int64 each."""
    W = np.asarray(W)
    if _stats and gates.COMPILED and W.dtype == np.int64 and W.ndim == 2:
        gt, eq = np.empty(W.shape[0], np.int64), np.empty(W.shape[0], np.int64)
        _stats[2](W, int(w0), gt, eq)
        return gt, eq
    return (W > w0).sum(1), (W == w0).sum(1)


def block_walks(x, Ls, rng, per_doc=WALKS_PER_DOC, block=None, n_cap=N_CAP, r0=None):
    """Windows of per_doc bootstrap walks per document of increments x (S, T) float64 at thresholds Ls (n,).

    A walk starts at a query row drawn uniformly from rows r0..T-1 of its document (None: T // 2, the rows
    whose windows are measured), reads the document backwards from there to its start, and continues
    past the start through blocks of `block` tokens (None: BLOCK_FRACTION of T) of the same document, each
    read backwards, until it is n_cap tokens long or past every L. rng: numpy Generator.
    Returns (W (S, per_doc, n) int64, censored (S, per_doc, n) bool: the walk stayed below L for n_cap tokens).
    The sums are differences of the document's prefix sums (a walk's window inside its document is that row's
    window_rows window): the windows of one cumsum of each whole walk, up to the rounding of the sums."""
    S, T = x.shape
    b = min(max(1, int(block or round(BLOCK_FRACTION * T))), T)
    r0 = T // 2 if r0 is None else int(r0)
    Ls = np.asarray(Ls, dtype=np.float64)
    L_max = float(Ls.max())
    W = np.zeros((S, per_doc, len(Ls)), np.int64)
    cens = np.zeros(W.shape, bool)
    for d in range(S):
        kd = x[d].mean()
        if kd <= 0:
            W[d], cens[d] = n_cap, True
            continue
        n_len = int(min(n_cap, max(T + 1, 2 * L_max / kd + 2 * b + 64)))
        ends = rng.integers(r0, T, size=per_doc)                           # query rows
        nb = -(-n_len // b)
        starts = rng.integers(0, T - b + 1, size=(per_doc, nb))
        # a walk's sums from the document's prefix sums c: reading back from row e, the first e + 1 steps sum to
        # c[e + 1] - c[e + 1 - n] (the window of row e itself where it crosses L there), and a block from
        # token s + b - 1 down to s sums to c[s + b] - c[s]; the crossing block is searched like a row
        c = np.zeros(T + 1)
        np.cumsum(x[d], out=c[1:])
        i = ends + 1                                                        # (P,) steps inside the document
        J = np.searchsorted(c, c[i, None] - Ls[None, :], side="left")       # (P, n); few queries: bisection
        Wd = i[:, None] - J                                                 # the window where J > 0
        rest = np.flatnonzero((J == 0).any(1))                              # walks past the start at some L
        if len(rest):
            st = starts[rest]                                               # (P', nb) block starts
            tot = c[i[rest], None] + np.cumsum(c[st + b] - c[st], 1)        # (P', nb) sum after each block
            Q = (tot[:, :, None] <= Ls[None, None, :]).sum(1)               # (P', n): blocks wholly below L
            before = np.where(Q > 0, np.take_along_axis(tot, np.maximum(Q - 1, 0), 1), c[i[rest], None])
            top = np.take_along_axis(st, np.minimum(Q, nb - 1), 1) + b      # the crossing block's first token + 1
            j2 = np.searchsorted(c, c[top] - (Ls[None, :] - before), side="left")
            inb = np.where(Q < nb, top - np.maximum(j2, top - b), 0)       # its steps at or below L
            far = i[rest, None] + Q * b + inb
            Wd[rest] = np.where(J[rest] == 0, far, Wd[rest])
        W[d] = np.minimum(Wd, n_len)
        cens[d] = Wd >= n_len                                               # below L for all n_len steps
    return W, cens


@dataclass
class Prediction:
    """The predicted window distribution at each L (lists over L). se_*: jackknife over the fitted
    documents (document sampling and simulation noise together: each document's walks are its own, so the
    spread of the leave-one-document-out values carries both), never below the simulation part alone.
    se_mc_*: the simulation part, from the spread of the walks within each document (what reanalysing the
    same trace with another seed moves the prediction by). p_beyond: P(W > context) (NaN when no context
    is given). censored: share of walks that stayed below L for N_CAP tokens (their W is a bound)."""
    mean: list = field(default_factory=list)
    se_mean: list = field(default_factory=list)
    var: list = field(default_factory=list)
    se_var: list = field(default_factory=list)
    q05: list = field(default_factory=list)
    q50: list = field(default_factory=list)
    q95: list = field(default_factory=list)
    p_beyond: list = field(default_factory=list)
    censored: list = field(default_factory=list)
    se_mc_mean: list = field(default_factory=list)
    se_mc_var: list = field(default_factory=list)


def mc_errors(W):
    """The simulation part of the errors of the pooled mean and variance of walks W (S, m, n) (m >= 2
    independent walks per document, given the document): two (n,) arrays. Var_MC(mean) = sum_d s_d^2 / (m S^2),
    s_d^2 the within-document variance of W; for the variance the same with (W - mean)^2 in place of W (delta
    method). A lower bound on what the jackknife over documents estimates (which adds document sampling)."""
    S, m = W.shape[:2]
    if m < 2:
        return np.full(W.shape[2], np.nan), np.full(W.shape[2], np.nan)
    Wf = W.astype(np.float64)
    mean = Wf.mean((0, 1))
    d2 = (Wf - mean) ** 2
    v_m = Wf.var(1, ddof=1).sum(0) / (m * S * S)
    v_v = d2.var(1, ddof=1).sum(0) / (m * S * S)
    return np.sqrt(v_m), np.sqrt(v_v)


def _pooled_moments(W, cens=None):
    """Mean and variance of W (S, m, n) pooled over S and m, with jackknife-over-S SEs: four (n,) arrays."""
    S, m = W.shape[:2]
    if np.issubdtype(W.dtype, np.integer):
        s1, s2 = window_sums(W)                                           # (S, n), exact
    else:
        Wf = W.astype(np.float64)
        s1, s2 = Wf.sum(1), (Wf * Wf).sum(1)
    mean = s1.sum(0) / (S * m)
    var = s2.sum(0) / (S * m) - mean ** 2
    if S < 2:
        return mean, np.full_like(mean, np.nan), var, np.full_like(var, np.nan)
    ml = (s1.sum(0) - s1) / ((S - 1) * m)
    vl = (s2.sum(0) - s2) / ((S - 1) * m) - ml ** 2
    return mean, jackknife(ml), var, jackknife(vl)


def predict(x, Ls, rng, context=None, per_doc=WALKS_PER_DOC, block=None):
    """The window distribution of a head with increments x (S, T) float64 at thresholds Ls (n,) float:
    Prediction from block_walks. context: int tokens for P(W > context), or None."""
    W, cens = block_walks(x, Ls, rng, per_doc, block)
    mean, se_m, var, se_v = _pooled_moments(W)
    mc_m, mc_v = mc_errors(W)
    se_m, se_v = np.fmax(se_m, mc_m), np.fmax(se_v, mc_v)            # the jackknife is noisy with few documents
    flat = W.reshape(-1, W.shape[2]).astype(np.float64)
    q = np.quantile(flat, QUANTILES, axis=0, method="inverted_cdf")
    p = (flat > context).mean(0) if context else np.full(len(Ls), np.nan)
    return Prediction(mean.tolist(), se_m.tolist(), var.tolist(), se_v.tolist(), q[0].tolist(), q[1].tolist(),
                      q[2].tolist(), p.tolist(), cens.reshape(-1, len(Ls)).mean(0).tolist(), mc_m.tolist(),
                      mc_v.tolist())


# ----------------------------------------------------------------------------- censored windows


@dataclass
class KaplanMeier:
    """Kaplan-Meier estimate from right-censored windows at one L. mean: restricted to the longest time
    observed (a lower bound when the survival has not reached 0: then mean_is_bound). q50: median, NaN
    when the survival never falls to 0.5 (then median_bound is the largest window seen: W >= it with
    probability > 0.5)."""
    mean: float
    mean_is_bound: bool
    q50: float
    median_bound: float


def _km_counts(t, c, top):
    """Event and at-risk counts at u = 0..top - 1 of windows t (int) with flags c (bool: the true window is at
    least t, i.e. W > t - 1, so a censored window leaves the risk set before time t, not after it). Returns
    (events, at_risk), float64 (top,) each."""
    ev = np.bincount(t[~c], minlength=top)[:top]
    at = ev + np.bincount(t[c] - 1, minlength=top + 1)[:top] if c.any() else ev.copy()
    return ev.astype(np.float64), np.cumsum(at[::-1])[::-1].astype(np.float64)      # times >= u


def _km_top(t, c):
    """The number of times u = 0..top - 1 the data speak for: the longest uncensored window + 1, or the longest
    censored one (W >= t leaves P(W > t - 1) known, P(W > t) not), whichever is larger."""
    return max(int(t[~c].max()) + 1 if (~c).any() else 0, int(t[c].max()) if c.any() else 0)


def kaplan_meier(W, censored):
    """Kaplan-Meier survival of windows W (any shape, int) with right-censoring flags `censored` (same shape,
    bool: the true window is at least W, as gates.windows and window_rows flag it). Returns KaplanMeier."""
    t = np.asarray(W, dtype=np.int64).ravel()
    c = np.asarray(censored, dtype=bool).ravel()
    if t.size == 0:
        raise ValueError("kaplan_meier: no windows")
    if c.any() and t[c].min() <= 0:                                         # W >= 0 says nothing: left out
        t, c = t[~c | (t > 0)], c[~c | (t > 0)]
        if t.size == 0:
            return KaplanMeier(0.0, True, float("nan"), 0.0)
    top = _km_top(t, c)
    ev, at = _km_counts(t, c, top)
    h = np.divide(ev, at, out=np.zeros_like(ev), where=at > 0)
    surv = np.cumprod(1 - h)                                                # P(W > u), u = 0..top - 1
    mean = float(surv.sum())                                                # sum_u P(W > u), u < top
    below = np.nonzero(surv <= 0.5)[0]
    q50 = float(below[0]) if len(below) else float("nan")
    return KaplanMeier(mean, bool(surv[-1] > 0), q50, float(t.max()))


def kaplan_meier_loo_means(W, censored):
    """The Kaplan-Meier mean of windows W (S, R) int with censoring flags (S, R) bool with each document (row)
    left out in turn: (S,) float64, the numbers kaplan_meier(np.delete(W, d, 0), np.delete(censored, d, 0)).mean
    gives, from the documents' event and at-risk counts (integers: the left-out counts subtract exactly)."""
    W = np.asarray(W, dtype=np.int64)
    C = np.asarray(censored, dtype=bool)
    S = W.shape[0]
    if S < 2 or W.size == 0:
        raise ValueError("kaplan_meier: no windows")
    if C.any() and W[C].min() <= 0:
        raise ValueError("kaplan_meier_loo_means: a window censored at 0 (the leave-one-out counts need W >= 1)")
    M = int(W.max()) + 1
    rows = np.arange(S)[:, None] * M
    E = np.bincount((rows + W)[~C], minlength=S * M).reshape(S, M)        # events at u, per document
    # at risk at u: the uncensored windows >= u and the censored ones >= u + 1 (W >= t: at risk up to t - 1)
    R = E + np.bincount((rows + W - 1)[C], minlength=S * M).reshape(S, M)
    E, R = E.sum(0) - E, R.sum(0) - R                                     # without document d, (S, M)
    at = np.cumsum(R[:, ::-1], axis=1)[:, ::-1]                           # times >= u
    unc = np.where(~C, W + 1, 0).max(1)
    top_d = np.maximum(unc, np.where(C, W, 0).max(1))                     # each document's _km_top
    order = np.argsort(top_d)
    out = np.empty(S)
    for d in range(S):
        top = int(top_d[order[-1]] if order[-1] != d else top_d[order[-2]])   # the others' _km_top
        ev, n_at = E[d, :top].astype(np.float64), at[d, :top].astype(np.float64)
        h = np.divide(ev, n_at, out=np.zeros_like(ev), where=n_at > 0)
        out[d] = float(np.cumprod(1 - h).sum())
    return out


# ----------------------------------------------------------------------------- out of sample


@dataclass
class OutOfSample:
    """The prediction fitted on the even-numbered documents, scored on the odd-numbered ones (lists over L).
    coverage: expected coverage of the predicted 90% interval by the held-out windows, with its jackknife
    SE over held-out documents; z_mean, z_var: (predicted - held-out) / SE of the difference (NaN where
    a held-out window is censored: its mean is then a bound)."""
    n_fit: int = 0
    n_test: int = 0
    coverage: list = field(default_factory=list)
    se_coverage: list = field(default_factory=list)
    z_mean: list = field(default_factory=list)
    z_var: list = field(default_factory=list)
    censored: list = field(default_factory=list)          # share of held-out windows censored (coverage then
                                                          # checks only P(W >= bound); 1.0: a weak check)


def _coverage(F, w, cens, lo=0.05, hi=0.95):
    """Expected randomised-PIT coverage of [lo, hi] for held-out windows w (k,) int with censoring flags,
    under a predicted CDF F (function: int array -> P(W <= w)). Returns (k,) float."""
    a = F(w - 1)
    b = np.where(cens, 1.0, F(w))
    width = b - a
    inside = np.clip(np.minimum(b, hi) - np.maximum(a, lo), 0, None)
    point = ((a >= lo) & (a <= hi)).astype(np.float64)
    return np.where(width > 0, inside / np.where(width > 0, width, 1), point)


def out_of_sample(x, W_rows, cens_rows, Ls, rng, per_doc=2 * WALKS_PER_DOC, block=None):
    """Fit on documents 0, 2, 4, ... of increments x (S, T) and score on 1, 3, 5, ... whose windows are
    W_rows, cens_rows (S, R, n) (window_rows). Ls: (n,) thresholds. Returns OutOfSample."""
    S = x.shape[0]
    fit, test = np.arange(0, S, 2), np.arange(1, S, 2)
    Wp, _ = block_walks(x[fit], Ls, rng, per_doc, block)
    pm, pse_m, pv, pse_v = _pooled_moments(Wp)
    Wt, Ct = W_rows[test], cens_rows[test]
    tm, tse_m, tv, tse_v = _pooled_moments(Wt)
    out = OutOfSample(len(fit), len(test))
    for k in range(len(Ls)):
        pred = Wp[:, :, k].ravel()
        # P(W <= w) of the predicted windows as a table over w = -1 .. max (what a search of the sorted draws gives)
        cum = np.concatenate([[0], np.cumsum(np.bincount(pred))])

        def F(w, cum=cum, n=len(pred)):
            return cum[np.clip(w + 1, 0, len(cum) - 1)] / n

        cov = _doc_coverage(F, Wt[:, :, k], Ct[:, :, k])                        # per held-out document
        out.coverage.append(float(cov.mean()))
        loo = (cov.sum() - cov) / (len(cov) - 1) if len(cov) > 1 else np.array([np.nan])
        out.se_coverage.append(float(jackknife(loo)))
        out.censored.append(float(Ct[:, :, k].mean()))
        if Ct[:, :, k].any():
            out.z_mean.append(float("nan"))
            out.z_var.append(float("nan"))
            continue
        out.z_mean.append(_z(pm[k] - tm[k], pse_m[k], tse_m[k]))
        out.z_var.append(_z(pv[k] - tv[k], pse_v[k], tse_v[k]))
    return out


def coverage_counts(w, cens):
    """The counts _doc_coverage weights its table by: (k, 2, top) int64, the number of each (censored, window)
    pair in each row of held-out windows w (k, R) int >= 0 with censoring flags (k, R), top = w.max() + 1. They
    depend on the windows alone: one array serves every law scored on the same windows."""
    k, R = w.shape
    top = int(w.max()) + 1
    if _stats and gates.COMPILED and w.dtype == np.int64 and w.min() >= 0:
        out = np.zeros((k, 2, top), np.int64)
        _stats[1](w, np.asarray(cens, np.bool_), top, out)
        return out
    key = (np.arange(k)[:, None] * 2 + cens) * top + w
    return np.bincount(key.ravel(), minlength=2 * k * top).reshape(k, 2, top)


def _doc_coverage(F, w, cens, counts=None):
    """Mean _coverage over the columns of held-out windows w (k, R) int >= 0 with censoring flags (k, R): the
    coverage of each distinct (window, censored) pair once, weighted by its count in each row (counts:
    coverage_counts(w, cens) when the caller has them; None: counted here). Returns (k,)."""
    k, R = w.shape
    counts = coverage_counts(w, cens) if counts is None else counts
    top = counts.shape[2]
    v = np.arange(top)
    table = np.stack([_coverage(F, v, np.zeros(top, bool)), _coverage(F, v, np.ones(top, bool))])   # (2, top)
    return np.einsum("kct,ct->k", counts, table) / R


def _z(d, a, b):
    se = math.hypot(a, b)
    if not math.isfinite(se):
        return float("nan")
    if se == 0:
        return 0.0 if d == 0 else float("inf")
    return float(d / se)


# public names for the per-law evaluation (heads/laws.py)
pooled_moments = _pooled_moments
coverage = _coverage
doc_coverage = _doc_coverage
