"""Forget-gate decay, increments X = -log g, per-query eps-windows, and first-passage Monte Carlo.

A FoX head multiplies the attention of query i on key j by the decay
    D_ij = prod_{t=j+1..i} g_t = exp(-(c_i - c_j)),   c_i = sum_{t<=i} X_t,   X_t = -log g_t >= 0.
The eps-window of query i is the largest distance d with D_{i,i-d} >= eps. Reading the increments
backwards from the query, it is W = N - 1, where N(eps) = inf{n : X_1 + ... + X_n > L}, L = ln(1/eps),
is the first-passage index of the walk. Throughout, windows are reported as W (a distance), never N.

`python forget.py` runs the per-head analysis of the shipped FoX model (see heads.py);
`python forget.py --synthetic` prints Monte Carlo windows beside the laws for synthetic gates.
"""
import importlib.util
import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from scipy import integrate, signal, special

from foxwindow import safety

__all__ = ["threshold", "L_LOOKS_LIKE_EPS", "L_MAX", "LOG_GATE_MIN", "ThresholdWarning", "level", "levels",
           "recordable",
           "increments_from_log_gates", "check_log_gates", "increments_from_gates", "decay_matrix", "windows",
           "window_row", "window_row_numpy", "WindowRowBuffers",
           "WINDOW_BLOCK", "merge_kernel", "merged", "COMPILED", "COMPILED_MIN",
           "Moments", "Gate", "LogitNormalGate", "BetaGate",
           "GammaIncrement", "ConstantGate", "AR1LogitGate", "EmpiricalGate", "SEED_GATES", "ALIBI_SLOPES",
           "MCResult", "first_passage_samples", "first_passage_mc"]

# ----------------------------------------------------------------------------- validation


def _one_number(v, what):
    """v as a float where it is one real number (a Python or numpy scalar, a 0-d array); ValueError otherwise
    (a string, a bool, a sequence, None)."""
    if isinstance(v, (str, bytes, bool, np.bool_)) or v is None or np.ndim(v) != 0:
        raise ValueError(f"{what} must be one number; got {v!r}" if np.ndim(v) == 0 else
                         f"{what} must be one number; got a {type(v).__name__} of shape {np.shape(v)}")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be one number; got {v!r}") from None


def threshold(eps):
    """L = ln(1/eps) for eps in (0, 1); raises ValueError otherwise."""
    eps = _one_number(eps, "eps")
    if not (0.0 < eps < 1.0) or math.isnan(eps):
        raise ValueError(f"eps must lie in (0, 1); got {eps}")
    return -math.log(eps)


L_LOOKS_LIKE_EPS = 0.01    # an L below this is eps > 0.99 (a window of about nothing): warned, as an eps given as L


class ThresholdWarning(UserWarning):
    """An L = ln(1/eps) small enough to be an eps given by mistake (L < L_LOOKS_LIKE_EPS)."""


L_MAX = -math.log(sys.float_info.min)   # 708.4: beyond it eps = e^-L leaves float64's normal range (0 past 745)
LOG_GATE_MIN = -float(np.finfo(np.float32).max)   # the lowest log-gate (float32's range, where traces are kept)


def _checked_L(L):
    L = _one_number(L, "L")
    if not (math.isfinite(L) and L > 0):
        raise ValueError(f"L must be a finite number > 0; got {L}")
    if L < L_LOOKS_LIKE_EPS:
        warnings.warn(f"L = {L:g} is the threshold of eps = {math.exp(-L):.6g}, where windows are about 0 tokens "
                      f"long; for eps = {L:g} pass eps={L:g} (L = ln(1/eps) = {threshold(L):.4g})",
                      ThresholdWarning, stacklevel=4)
    return L


def level(eps=None, L=None):
    """The threshold L from exactly one of eps in (0, 1) (L = ln(1/eps)) or L > 0 itself (finite): the one
    conversion every routine that takes either goes through. Raises ValueError naming the problem; an L below
    L_LOOKS_LIKE_EPS (an eps given as L, most likely) gives a ThresholdWarning."""
    if (eps is None) == (L is None):
        raise ValueError("give exactly one of eps (in (0, 1)) and L = ln(1/eps) (> 0)")
    if L is None:
        return threshold(eps)
    return _checked_L(L)


def recordable(L):
    """L itself where a result can record its eps = e^-L as a normal float64 (L <= L_MAX, 708.4); ValueError
    beyond (eps would be subnormal or 0, and L read back from it wrong), for the routines that record eps."""
    if L > L_MAX:
        raise ValueError(f"L = {L:g} is beyond {L_MAX:.1f}, where eps = e^-L is no longer a normal float64 "
                         f"({math.exp(-L):.3g}), and results record their eps; give L <= {L_MAX:.1f}")
    return L


def levels(eps=None, L=None, default=None, distinct=False):
    """Thresholds L from eps= or L= (at most one of them; each a number or a sequence of numbers), as a list;
    neither: the eps of `default` (a sequence of eps; None: ValueError). For the routines that scan several
    thresholds at once; level() is the one-threshold form. distinct: a threshold given twice is a ValueError
    (where each one is a test of its own), and so is one beyond L_MAX (recordable: the analysis records eps)."""
    if eps is not None and L is not None:
        raise ValueError("give eps (in (0, 1)) or L = ln(1/eps) (> 0), not both")
    if eps is None and L is None:
        if default is None:
            raise ValueError("give eps (in (0, 1)) or L = ln(1/eps) (> 0)")
        eps = default
    given, what = (eps, "eps") if L is None else (L, "L")
    if isinstance(given, (str, bytes)):
        raise ValueError(f"{what} must be a number or a sequence of numbers; got {given!r}")
    given = [given] if np.ndim(given) == 0 else list(np.asarray(given, dtype=object).ravel())
    if not given:
        raise ValueError(f"{what} is empty: give at least one threshold")
    try:
        out = [threshold(e) for e in given] if L is None else [_checked_L(x) for x in given]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    if distinct:
        for v in out:
            recordable(v)
    if distinct and len(set(out)) < len(out):
        twice = next(given[i] for i, v in enumerate(out) if out.index(v) != i)
        raise ValueError(f"{what}: {float(twice):g} is given twice; give each threshold once (each is a test of "
                         "its own)")
    return out


def _as_float_array(a, name):
    """A numpy array a as float64, contiguous (no copy if already so); ValueError on a non-real dtype or no
    positions."""
    arr = np.asarray(a)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be a real-valued array; got dtype {arr.dtype}")
    if arr.ndim == 0 or arr.size == 0:                  # (before ascontiguousarray, which makes 0-d 1-d)
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)}); a trace needs at least one position")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _as_float_tensor(a, name):
    t = a if isinstance(a, torch.Tensor) else torch.from_numpy(_as_float_array(a, name))
    if not torch.is_floating_point(t):
        raise ValueError(f"{name} must be a floating-point array; got dtype {t.dtype}")
    if t.dim() == 0 or t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); a trace needs at least one position")
    return t


def check_log_gates(hi, lo, in_range=False):
    """The checks of log-gates from their max and min (NaN propagates through both reductions); in_range: also
    within float32's range (LOG_GATE_MIN), as a trace file holds them (the analysis' moments stay finite)."""
    if math.isnan(hi) or math.isnan(lo):
        raise ValueError("log-gates contain NaN; gates must lie in (0, 1]")
    if math.isinf(lo):
        raise ValueError("log-gates contain infinite values (a gate of 0); gates must lie in (0, 1]")
    if hi > 0:
        raise ValueError(f"log-gates must be <= 0 (gates in (0, 1]); max is {hi:.3g}")
    if in_range and lo < LOG_GATE_MIN:
        raise ValueError(f"log-gates must be >= {LOG_GATE_MIN:.3g} (float32's range, where traces are kept); min "
                         f"is {lo:.3g}")


def _np_log_gates(log_g):
    """Validated numpy log-gates, float64 contiguous (the numpy half of increments_from_log_gates, without the
    negation)."""
    a = _as_float_array(log_g, "log-gates")
    check_log_gates(float(a.max()), float(a.min()))
    return a


def increments_from_log_gates(log_g):
    """X = -log g from log-gates (any shape, float). Raises ValueError on NaN/inf or log g > 0.

    Returns the same kind of array it was given (numpy or torch), float64 for numpy input.
    """
    if not isinstance(log_g, torch.Tensor):
        return np.negative(_np_log_gates(log_g))
    t = _as_float_tensor(log_g, "log-gates")
    check_log_gates(t.max().item(), t.min().item())
    return -t


def increments_from_gates(g):
    """X = -log g from gates in (0, 1]. Raises ValueError for gates outside (0, 1] or NaN."""
    is_np = not isinstance(g, torch.Tensor)
    t = _as_float_tensor(g, "gates")
    if torch.isnan(t).any():
        raise ValueError("gates contain NaN; gates must lie in (0, 1]")
    if (t <= 0).any() or (t > 1).any():
        raise ValueError(f"gates must lie in (0, 1]; got min {t.min().item():.3g}, max {t.max().item():.3g}")
    x = -torch.log(t.double() if t.dtype != torch.float64 else t)
    return x.numpy() if is_np else x


# ----------------------------------------------------------------------------- decay and windows


def decay_matrix(log_g):
    """Reference decay D (T, T) from one trace of log-gates (T,): D_ij = exp(c_i - c_j) for j <= i, else 0.

    O(T^2) memory: for tests and pictures. c is accumulated in float64.
    """
    x = increments_from_log_gates(np.asarray(log_g, dtype=np.float64))
    if x.ndim != 1:
        raise ValueError(f"decay_matrix takes one trace of shape (T,); got {x.shape}")
    c = np.cumsum(x)
    d = c[None, :] - c[:, None]                      # (T, T) = c_j - c_i = -(c_i - c_j)
    return np.where(np.tri(len(x), dtype=bool), np.exp(np.minimum(d, 0.0)), 0.0)


SEARCH_CHUNK = 1 << 14      # queries per block of search_left on long traces (the haystack slice stays in cache)
_MAX_OCCUPANCY = 64         # a bucket holding more keys than this (plateaus of zero increments): plain bisection


def _bucket_search(c, q, base):
    """searchsorted(c, q, side="left") for c (m,) float64 non-decreasing and finite, q float64 (any shape, finite),
    by buckets of c's range (about two keys a bucket) and an exact comparison inside the bucket; None when the
    buckets would be crowded (then the caller bisects). Exact: any non-decreasing map of the values puts every
    key of a lower bucket below q and every key of a higher bucket above it."""
    m = len(c)
    span = float(c[-1]) - base
    if not span > 0:
        return None
    r = 2.0 * m / span
    if not (math.isfinite(span) and math.isfinite(r)):           # a span of subnormals, or beyond float range
        return None
    b = np.subtract(c, base)
    b *= r
    b = b.astype(np.int64)
    nb = int(b[-1]) + 1
    counts = np.bincount(b, minlength=nb)
    if counts.max() > _MAX_OCCUPANCY:
        return None
    first = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    kq = np.subtract(q, base)
    kq *= r
    np.clip(kq, 0, nb - 1, out=kq)
    kq = kq.astype(np.int64)
    j = first[kq].ravel()
    end = first[kq + 1].ravel()
    qf = q.ravel()
    act = np.flatnonzero(j < end)
    act = act[c[j[act]] < qf[act]]
    while len(act):                                   # at most _MAX_OCCUPANCY rounds, on fewer queries each
        j[act] += 1
        ja = j[act]
        ok = ja < end[act]
        ok[ok] = c[ja[ok]] < qf[act[ok]]
        act = act[ok]
    return j.reshape(np.shape(q))


def search_left(c, q, sorted_q=False):
    """np.searchsorted(c, q, side="left") (identical results) for c (m,) float64 non-decreasing and finite, q
    float64 finite (any shape). sorted_q: q (1-D) is non-decreasing and q[i] < c[i + 1] (a window's query
    c_i - L): long arrays are then searched block by block in a slice of c that stays in cache."""
    c = np.asarray(c, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if not sorted_q or q.size <= 2 * SEARCH_CHUNK:
        j = _bucket_search(c, q, float(c[0])) if len(c) > 1 else None
        return np.searchsorted(c, q, side="left") if j is None else j
    out = np.empty(len(q), np.int64)
    for a in range(0, len(q), SEARCH_CHUNK):
        e = min(a + SEARCH_CHUNK, len(q))
        lo = int(np.searchsorted(c[:a + 2], q[a], side="left"))      # j_a <= a + 1
        hay = c[lo:e + 1]                                               # j_i <= i + 1 for every i in the block
        j = _bucket_search(hay, q[a:e], float(hay[0])) if len(hay) > 1 else None
        out[a:e] = (np.searchsorted(hay, q[a:e], side="left") if j is None else j) + lo
    return out


def windows(log_g, *, eps=None, L=None, dim=None):
    """Per-query eps-windows of log-gate traces: W_i = largest d with D_{i,i-d} >= eps (give eps, or L = ln(1/eps)).

    log_g: log-gates <= 0, numpy array or torch tensor with time on `dim`. dim=None (the default) is
           allowed only where the layout is unambiguous: (T,) one trace, or (S, T) S sequences with time
           last. Three or more dimensions need an explicit dim: dim=1 for a (B, T, H) capture (the
           layout of capture_gates and save_trace), dim=-1 for (B, H, T). Any float dtype; c is built in
           float64.
    Returns (W, censored), int64 and bool, same shape and kind as the input. censored[i] is True when
    the window reaches the start of the trace (c_i <= L): the true window is then at least W_i.
    numpy input: row by row in time linear in T (window_row); torch input: batched torch.searchsorted,
    O(T log T) a row. Both are identical to searchsorted(c, c_i - L, side="left") on the float64 prefix sums.
    """
    L = level(eps, L)
    log_g = _windows_input(log_g)
    is_np = not isinstance(log_g, torch.Tensor)
    if is_np:
        return _windows_np(_as_float_array(log_g, "log-gates"), L, dim)
    x = increments_from_log_gates(log_g)
    t = x
    if dim is None:
        if t.dim() > 2:
            raise ValueError(f"windows: log_g has shape {tuple(t.shape)}; pass dim, the time dimension "
                             "(dim=1 for a (B, T, H) capture, dim=-1 for (B, H, T))")
        dim = -1
    dim = int(dim) if isinstance(dim, np.integer) else dim          # numpy's integers are integers too
    if isinstance(dim, bool) or not isinstance(dim, int) or not -t.dim() <= dim < t.dim():
        raise ValueError(f"windows: dim must be an int in [{-t.dim()}, {t.dim() - 1}] for shape "
                         f"{tuple(t.shape)}; got {dim!r}")
    t = t.movedim(dim, -1).to(torch.float64)
    T = t.shape[-1]
    c = torch.cat([t.new_zeros(t.shape[:-1] + (1,)), torch.cumsum(t, dim=-1)], dim=-1)   # (..., T+1), c_0 = 0
    if not bool(torch.isfinite(c[..., -1]).all()):
        _overflow(-t)
    # smallest j with c_j >= c_i - L: keys j..i are within eps of query i
    j = torch.searchsorted(c.contiguous(), (c[..., 1:] - L).contiguous(), side="left")   # (..., T)
    i = torch.arange(1, T + 1, device=t.device)
    w = (i - j).movedim(-1, dim)
    cens = (j == 0).movedim(-1, dim)
    return (w.numpy(), cens.numpy()) if is_np else (w, cens)


def _windows_input(log_g):
    """windows()' log_g as a numpy array or the torch tensor it is, refused alike from either: not one array (a
    ragged list), not floating point (integer gates are not log-gates), or 0-d (no time axis)."""
    if isinstance(log_g, torch.Tensor):
        floating, dtype = torch.is_floating_point(log_g), str(log_g.dtype).removeprefix("torch.")
    else:
        try:
            log_g = np.asarray(log_g)
        except (ValueError, TypeError):
            raise ValueError(f"windows: log_g must be one array of log-gates, (T,) or (S, T); got a "
                             f"{type(log_g).__name__} that is not one (rows of different lengths?)") from None
        floating, dtype = np.issubdtype(log_g.dtype, np.floating), str(log_g.dtype)
    if not floating:
        raise ValueError(f"windows: log_g (log-gates) must be floating point; got dtype {dtype}")
    if log_g.ndim == 0:
        raise ValueError(f"windows: log_g is one number ({float(log_g):.6g}); it needs at least one dimension, "
                         "the time axis: a trace (T,) or traces (S, T)")
    return log_g


def _check_dim(dim, shape):
    if dim is None:
        if len(shape) > 2:
            raise ValueError(f"windows: log_g has shape {tuple(shape)}; pass dim, the time dimension "
                             "(dim=1 for a (B, T, H) capture, dim=-1 for (B, H, T))")
        dim = -1
    dim = int(dim) if isinstance(dim, np.integer) else dim
    if isinstance(dim, bool) or not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
        raise ValueError(f"windows: dim must be an int in [{-len(shape)}, {len(shape) - 1}] for shape "
                         f"{tuple(shape)}; got {dim!r}")
    return dim


def _overflow(lg):
    raise ValueError(f"the running sum of the log-gates passes float64's range (min {float(lg.min()):.3g}): the "
                     "windows of such a trace are not computable as prefix sums; log-gates are kept in float32")


def _no_overflow(rows):
    """ValueError where a row's sum of log-gates (R, T) is -inf with every value finite: the prefix sums overflow."""
    if not np.isfinite(rows.sum(axis=-1)).all():
        _overflow(rows)


def _windows_np(lg, L, dim):
    """windows() for numpy log-gates lg float64 contiguous (not yet validated): the prefix sums in float64, the
    search exact; all rows in one compiled merge (which validates as it sums) or row by row (window_row_numpy)."""
    dim = _check_dim(dim, lg.shape)
    lm = np.moveaxis(lg, dim, -1)
    T = lm.shape[-1]
    rows = np.ascontiguousarray(lm.reshape(-1, T))      # (R, T)
    kernel = _compiled_for(rows.size)
    if kernel is None:
        check_log_gates(float(lg.max()), float(lg.min()))
    W = np.empty(rows.shape, np.int64)
    cens = np.empty(rows.shape, bool)
    if kernel is not None:
        if not kernel(rows, float(L), W, cens, _scratch(T + 5)):      # a NaN, a log-gate > 0, -inf or an overflow
            check_log_gates(float(lg.max()), float(lg.min()))
            _overflow(lg)
    else:
        _no_overflow(rows)
        work = WindowRowBuffers(T)
        for r in range(rows.shape[0]):
            window_row_numpy(rows[r], L, W[r], cens[r], work)
    shape = lm.shape
    return np.moveaxis(W.reshape(shape), -1, dim), np.moveaxis(cens.reshape(shape), -1, dim)


WINDOW_BLOCK = 1 << 16     # queries per block of window_row (its arrays stay in cache)
_IOTA_MAX = 1 << 22          # aranges up to this length are kept between calls (64 MiB for both at most)
_iota = [np.arange(0, dtype=np.float64), np.arange(0, dtype=np.int64)]


class WindowRowBuffers:
    """Buffers of window_row for rows of T positions, reused from row to row."""

    def __init__(self, T):
        self.T = T
        self.xp = np.empty(T + 1)                       # -c reversed
        self.key = np.empty(T)
        if T + 1 <= _IOTA_MAX:
            if len(_iota[0]) < T + 1:                   # grown in powers of two
                n = min(_IOTA_MAX, 1 << T.bit_length())
                _iota[:] = [np.arange(n, dtype=np.float64), np.arange(n, dtype=np.int64)]
            fp, idx = _iota
        else:
            fp, idx = np.arange(T + 1, dtype=np.float64), np.arange(T, dtype=np.int64)
        self.fp = fp[:T + 1]                            # interp's values at the knots: their indices
        self.idx = idx[:T]


def window_row(lg, L, W, cens, work=None):
    """The eps-windows of one trace, identical to window_row_numpy (same arguments): by the compiled merge
    (merge_kernel) where numba is installed and compiled (or the row has COMPILED_MIN positions or more), else by
    window_row_numpy."""
    lg = np.ascontiguousarray(lg, dtype=np.float64)     # (T,)
    T = len(lg)
    kernel = _compiled_for(T)
    if kernel is None or not (W.flags.c_contiguous and cens.flags.c_contiguous
                              and W.dtype == np.int64 and cens.dtype == np.bool_):
        return window_row_numpy(lg, L, W, cens, work)
    if not kernel(lg[None], float(L), W[None], cens[None], _scratch(T + 5)):
        raise ValueError("window_row: log-gates must be finite and <= 0 (validate them first)")
    return W, cens


def window_row_numpy(lg, L, W, cens, work=None):
    """The eps-windows of one trace in numpy (the reference of the compiled merge): W_i = i - j_i,
    j_i = searchsorted(c, c_i - L, side="left") with c the float64 prefix sums of X = -lg (c_0 = 0), identical to
    that search, in time linear in T.

    lg: (T,) float64 log-gates, validated (finite, <= 0); L > 0 finite. W (T,) int64 and cens (T,) bool are
    written (cens: j_i = 0, the window reaches the trace's start). work: a WindowRowBuffers(T) to reuse between rows.

    The search runs on the mirror image: a = cumsum(lg) = -c exactly (negation is exact and the sums are
    sequential), stored reversed as xp = [a_T, ..., a_1, 0], non-decreasing; the query of position i is
    L - c_i = a_i + L = xp[T - i] + L, non-decreasing in T - i. #{k : c_k < c_i - L} = T + 1 - #{k : xp_k <=
    a_i + L}, and the largest k with xp_k <= key is what np.interp's search finds, starting from the previous
    answer (a merge, O(1) a step). Interpolating the values k at the knots gives r in [k, k + 1]; k = floor(r)
    less one where xp[floor(r)] > key (r rounded up to k + 1). A span of subnormal steps makes the slope
    infinite: those r are not finite and are searched again by bisection.
    """
    T = len(lg)
    if work is None or work.T != T:
        work = WindowRowBuffers(T)
    xp, key = work.xp, work.key
    xp[T] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # sums past the float range: -inf, searched as such
        np.cumsum(lg, out=xp[T - 1::-1])                # xp[T - i] = a_i = sum_{t<=i} lg_t = -c_i
        np.add(xp[:T], L, out=key)                      # (T,) key_m = L - c_i, i = T - m, non-decreasing
    Wr, cr = W[::-1], cens[::-1]                        # position i = T - m
    B = WINDOW_BLOCK
    ends = np.arange(B, T + B, B)
    ends[-1] = T
    # the last answer of each block: the block's knots run from its first query's own knot to that one
    hi = np.searchsorted(xp, key[ends - 1], side="right") - 1
    a = 0
    for e, h in zip(ends.tolist(), hi.tolist()):
        kb, xb = key[a:e], xp[a:h + 2]                   # key_m >= xp[m] >= xp[a], key_m < xp[h + 1]
        r = np.interp(kb, xb, work.fp[a:h + 2], right=float(T))   # (e - a,) in [k_m, k_m + 1]
        if not r.max() <= T:                            # an infinite slope (subnormal span): bisect those
            bad = ~np.isfinite(r)
            r[bad] = np.searchsorted(xb, kb[bad], side="right") - 1 + a
        k = r.astype(np.int64)
        k -= np.take(xp, k) > kb                        # r rounded up to k + 1
        np.subtract(k, work.idx[a:e], out=Wr[a:e])      # W_i = i - j_i = k_m - m
        np.equal(k, T, out=cr[a:e])                     # j_i = 0
        a = e
    return W, cens


# the compiled merge: numba is an optional accelerator (extra `fast`); without it every row takes window_row_numpy
COMPILED = True            # False: windows of numpy traces by window_row_numpy even where the merge is compiled
# positions of a call from which the merge is compiled: importing numba and compiling take 4-8 s once a process
# (measured on 2 loaded cores), about what the merge saves on 7e7 positions; merge_kernel() compiles it up front
COMPILED_MIN = 1 << 26
_MERGE_SIG = "boolean(float64[:, ::1], float64, int64[:, ::1], boolean[:, ::1], float64[::1])"
_merge = []                  # [the compiled kernel, or None without numba] once looked for
_scratch_buf = [np.empty(0)]  # the merge's prefix sums, kept between calls (fresh pages cost about a cumsum's time)


def _scratch(n):
    """A float64 scratch of n entries: the kept one, grown in powers of two up to _IOTA_MAX entries."""
    if n > _IOTA_MAX:
        return np.empty(n)
    if len(_scratch_buf[0]) < n:
        _scratch_buf[0] = np.empty(min(_IOTA_MAX, 1 << n.bit_length()))
    return _scratch_buf[0][:n]


MERGE_BLOCK = 8192          # positions a block of the compiled merge: summed while the block before is merged


def _merge_rows(lg, L, W, cens, a):
    """The two-pointer merge over rows, in plain Python (merge_kernel compiles it). For each row of lg (R, T) float64
    log-gates: a_k = sum_{t<=k} lg_t summed left to right (a_0 = 0) into the scratch a (T + 5,) float64,
    then W[r, i - 1] = i - j_i and cens[r, i - 1] = (j_i == 0) with j_i = #{k : a_k > a_i + L} -- the same sums
    and keys as window_row_numpy, so the same windows. a is non-increasing and a_i + L >= a_i (also at -inf), so
    j_i <= i and j_i only moves forward. The row goes in blocks of MERGE_BLOCK positions: block b is summed while
    block b - 1 is merged, in the same loop (the sum is one chain of dependent adds, the merge four others: the
    core runs them side by side), and the last block or part of one is merged after the row's sums. A block is
    merged in four quarters, each with its own pointer (its start bisected): four independent chains whose
    latencies overlap. Each pointer steps by counting a[j..j+3] > key without a branch (a non-increasing: the count
    is the step when under 4; -inf pads a past a_T, and a[j + 3] is never past what is summed) and walks on only
    past that (rare). Returns False where lg holds a NaN, a value > 0 or -inf (the caller says which; the windows
    of that row are then partly written, those of earlier rows whole); True when done."""
    R, T = lg.shape
    B = MERGE_BLOCK
    q = B // 4
    nb = T // B
    for r in range(R):
        a[0] = 0.0
        for m in range(4):
            a[T + 1 + m] = -np.inf
        s = 0.0
        top = -np.inf
        for i in range(min(B, T)):                      # block 0: summed alone
            x = lg[r, i]
            s += x
            a[i + 1] = s
            top = x if x > top else top
        j = 0                                           # the pointer of the last merged position
        for b in range(1, nb):                          # block b summed, block b - 1 merged
            lo = (b - 1) * B
            js = [j, 0, 0, 0]
            for p in range(1, 4):                       # j at the quarter's first position: the first k, a_k <= key
                key = a[lo + p * q + 1] + L
                u, hi = js[p - 1], lo + p * q + 1
                while u < hi:
                    mid = (u + hi) >> 1
                    if a[mid] > key:
                        u = mid + 1
                    else:
                        hi = mid
                js[p] = u
            j0, j1, j2, j3 = js[0], js[1], js[2], js[3]
            o = b * B
            for t in range(q):
                for v in range(4):                      # four sums of block b
                    x = lg[r, o + 4 * t + v]
                    s += x
                    a[o + 4 * t + v + 1] = s
                    top = x if x > top else top
                i0, i1, i2, i3 = lo + t, lo + q + t, lo + 2 * q + t, lo + 3 * q + t
                k0, k1, k2, k3 = a[i0 + 1] + L, a[i1 + 1] + L, a[i2 + 1] + L, a[i3 + 1] + L
                d0 = (a[j0] > k0) + (a[j0 + 1] > k0) + (a[j0 + 2] > k0) + (a[j0 + 3] > k0)
                d1 = (a[j1] > k1) + (a[j1 + 1] > k1) + (a[j1 + 2] > k1) + (a[j1 + 3] > k1)
                d2 = (a[j2] > k2) + (a[j2 + 1] > k2) + (a[j2 + 2] > k2) + (a[j2 + 3] > k2)
                d3 = (a[j3] > k3) + (a[j3 + 1] > k3) + (a[j3 + 2] > k3) + (a[j3 + 3] > k3)
                j0 += d0
                j1 += d1
                j2 += d2
                j3 += d3
                if d0 == 4 or d1 == 4 or d2 == 4 or d3 == 4:
                    while a[j0] > k0:
                        j0 += 1
                    while a[j1] > k1:
                        j1 += 1
                    while a[j2] > k2:
                        j2 += 1
                    while a[j3] > k3:
                        j3 += 1
                W[r, i0] = i0 + 1 - j0
                W[r, i1] = i1 + 1 - j1
                W[r, i2] = i2 + 1 - j2
                W[r, i3] = i3 + 1 - j3
                cens[r, i0] = j0 == 0
                cens[r, i1] = j1 == 0
                cens[r, i2] = j2 == 0
                cens[r, i3] = j3 == 0
            j = j3
        for i in range(max(nb, 1) * B, T):              # the sums past the last whole block
            x = lg[r, i]
            s += x
            a[i + 1] = s
            top = x if x > top else top
        # the checks of check_log_gates, without a branch a position: a NaN makes the sum NaN, a value > 0 the
        # max; -inf only where the sum is -inf (which an overflow also gives): look there
        if not top <= 0.0 or s != s:
            return False
        if s == -np.inf:                                # a -inf, or a sum past float64's range: either is refused
            return False
        # the rest: the last whole block and the part after it. The four chains' step is written out again here,
        # not shared with the block loop through a flag: one loop with the sums behind a branch ran 2.09 cumsums
        # against 1.77 for these two loops (T = 2e6, three alternated runs)
        lo = max(nb - 1, 0) * B
        n = (T - lo) // 4
        js = [j, 0, 0, 0]
        for p in range(1, 4):
            key = a[lo + p * n + 1] + L
            u, hi = js[p - 1], lo + p * n + 1
            while u < hi:
                mid = (u + hi) >> 1
                if a[mid] > key:
                    u = mid + 1
                else:
                    hi = mid
            js[p] = u
        j0, j1, j2, j3 = js[0], js[1], js[2], js[3]
        for t in range(n):
            i0, i1, i2, i3 = lo + t, lo + n + t, lo + 2 * n + t, lo + 3 * n + t
            k0, k1, k2, k3 = a[i0 + 1] + L, a[i1 + 1] + L, a[i2 + 1] + L, a[i3 + 1] + L
            d0 = (a[j0] > k0) + (a[j0 + 1] > k0) + (a[j0 + 2] > k0) + (a[j0 + 3] > k0)
            d1 = (a[j1] > k1) + (a[j1 + 1] > k1) + (a[j1 + 2] > k1) + (a[j1 + 3] > k1)
            d2 = (a[j2] > k2) + (a[j2 + 1] > k2) + (a[j2 + 2] > k2) + (a[j2 + 3] > k2)
            d3 = (a[j3] > k3) + (a[j3 + 1] > k3) + (a[j3 + 2] > k3) + (a[j3 + 3] > k3)
            j0 += d0
            j1 += d1
            j2 += d2
            j3 += d3
            if d0 == 4 or d1 == 4 or d2 == 4 or d3 == 4:
                while a[j0] > k0:
                    j0 += 1
                while a[j1] > k1:
                    j1 += 1
                while a[j2] > k2:
                    j2 += 1
                while a[j3] > k3:
                    j3 += 1
            W[r, i0] = i0 + 1 - j0
            W[r, i1] = i1 + 1 - j1
            W[r, i2] = i2 + 1 - j2
            W[r, i3] = i3 + 1 - j3
            cens[r, i0] = j0 == 0
            cens[r, i1] = j1 == 0
            cens[r, i2] = j2 == 0
            cens[r, i3] = j3 == 0
        j = j3
        for i in range(lo + 4 * n, T):                  # the last (T - lo) mod 4 positions
            key = a[i + 1] + L
            while a[j] > key:
                j += 1
            W[r, i] = i + 1 - j
            cens[r, i] = j == 0
    return True


def merge_kernel():
    """The compiled two-pointer merge, ok = kernel(lg (R, T) float64, L float, W (R, T) int64, cens (R, T) bool,
    a (T + 5,) float64 scratch), all C-contiguous: the windows of window_row_numpy, row by row; ok False where lg
    holds a NaN, a value > 0 or -inf (that row's windows partly written where it spans two blocks of
    MERGE_BLOCK or more, those after it not written). Compiled on the
    first call of a process (numba.njit, not cached to disk); None where numba is not installed."""
    if not _merge:
        try:
            import numba  # optional accelerator (extra `fast`), heavy to import: only where windows need it
        except ImportError:
            _merge.append(None)
        else:
            _merge.append(numba.njit(_MERGE_SIG, cache=False)(_merge_rows))   # holding the GIL: one scratch
    return _merge[0]


def merged():
    """Whether this process has looked for numba and compiled the merge (merge_kernel has run)."""
    return bool(_merge)


def _compiled_for(n):
    """The compiled merge for a call of n positions: once compiled, for every call; compiled only by a call of
    COMPILED_MIN positions or more (a short call would pay the compile for little); None without numba."""
    if not COMPILED:
        return None
    if _merge:
        return _merge[0]
    if n < COMPILED_MIN or importlib.util.find_spec("numba") is None:
        return None
    return merge_kernel()


# ----------------------------------------------------------------------------- gate distributions


@dataclass(frozen=True)
class Moments:
    """Moments of the increment X = -log g: forget rate kappa = E X, sigma2 = Var X, raw mu2, mu3."""
    kappa: float
    sigma2: float
    mu2: float
    mu3: float

    @staticmethod
    def from_raw(m1, m2, m3):
        return Moments(m1, m2 - m1 * m1, m2, m3)

    @staticmethod
    def from_central(m1, c2, c3):
        """From the mean m1 and the central moments c2 = E(X - m1)^2, c3 = E(X - m1)^3: Var X keeps its relative
        precision for narrow laws, where m2 - m1^2 of the raw moments cancels to rounding (or below 0)."""
        return Moments(m1, c2, c2 + m1 * m1, c3 + 3 * m1 * c2 + m1 ** 3)


class Gate:
    """An increment law for X = -log g. Subclasses give moments by quadrature (never from samples),
    the CDF of X, and a sampler. `iid` gates have independent increments; `lattice` gates are atoms."""
    iid = True
    lattice = False
    name = "gate"

    def moments(self) -> Moments:
        """Moments of X = -log g (kappa = E X, sigma2 = Var X, raw mu2, mu3) from the law itself (quadrature or
        closed form, never from samples): a Moments of floats."""
        raise NotImplementedError

    def cdf(self, x):
        """P(X <= x), vectorised over numpy x."""
        raise NotImplementedError

    def sample(self, rng, size):
        """iid increments, float64 numpy array of `size`."""
        raise NotImplementedError

    def sample_paths(self, rng, n, m, state=None):
        """n paths of m consecutive increments (n, m) and the state to continue them."""
        return self.sample(rng, (n, m)), None

    smooth = True   # a density (no atoms): the lattice error is c h^2 + o(h^2), which Richardson removes
    # True only for laws known to have no atoms; the exact numerics search the CDF of any other gate for atoms
    # (a jump surviving bisection to one ulp) and treat a discrete law, or an atom at 0, exactly
    atomless = False

    def __repr__(self):
        return self.name


def _softplus(z):
    """log(1 + e^z) in float64; beyond z = 30 it equals z to 1e-13 (and exp would overflow past 709)."""
    if np.ndim(z) == 0:
        return float(np.logaddexp(0.0, z))
    out = np.log1p(np.exp(np.minimum(z, 30.0)))
    big = z > 30.0
    if big.any():
        out[big] = z[big]
    return out


def _shifted_softplus(mu, s, y, x0, sig):
    """softplus(-(mu + s y)) - x0, x0 = softplus(-mu), sig = sigmoid(-mu), without cancellation where s y is small:
    log1p(expm1(-s y) sig) for |s y| <= 1, the plain difference (of size ~1, no cancellation) beyond.
    y: a float or a numpy array (returned alike)."""
    if np.ndim(y) == 0:
        t = s * float(y)
        if abs(t) <= 1.0:
            return math.log1p(math.expm1(-t) * sig)
        return _softplus(-(mu + t)) - x0
    t = s * np.asarray(y, dtype=np.float64)
    small = np.abs(t) <= 1.0
    out = _softplus(-(mu + t)) - x0
    out[small] = np.log1p(np.expm1(-t[small]) * sig)
    return out


def _check_real(**params):
    """TypeError naming the parameter unless it is a real number (bool and strings excluded)."""
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"gate parameter {k} must be a real number; got {type(v).__name__} {v!r}")


class LogitNormalGate(Gate):
    """g = sigmoid(Z), Z ~ N(mu, s^2) (mu: float, the logit's mean; s: float > 0, its standard deviation):
    X = softplus(-Z). The seed's validation gates are (mu, s) = (2, 0.5), (1, 1), (3, 0.3)."""
    atomless = True

    def __init__(self, mu, s):
        _check_real(mu=mu, s=s)
        if not (s > 0) or not math.isfinite(mu) or not math.isfinite(s):
            raise ValueError(f"logit-normal gate needs finite mu and s > 0; got mu={mu}, s={s}")
        self.mu, self.s = float(mu), float(s)
        self.name = f"logit-normal(mu={mu:g}, s={s:g})"

    def moments(self):
        # E[softplus(-(mu + s Y))^k], Y ~ N(0, 1), by the trapezoid rule on the Gaussian weight: the integrand is
        # analytic in the strip |Im y| < pi / s, so the error falls like exp(-2 pi^2 / (s dy)) (below rounding at
        # s dy <= 1/4); the range covers the weight to e^-800 and the tilt e^{-3 s y} of X ~ e^{-z} for large mu.
        # Within 1e-15 of adaptive quadrature (epsrel 1e-13) on mu in [-3, 40], s in [0.01, 10]; outside that
        # range (where the grid would grow with s or the bounds were not checked) adaptive quadrature itself.
        # The moments are taken about x0 = softplus(-mu): d = X - x0 = log1p(expm1(-s y) sigmoid(-mu)) has no
        # cancellation, so Var X keeps its relative precision down to s ~ 1e-300 (raw moments cancel to rounding,
        # and below 0, once s < ~1e-7).
        mu, s = self.mu, self.s
        x0 = _softplus(-mu)
        sig = float(special.expit(-mu))
        if not (-3.0 <= mu <= 40.0 and 0.01 <= s <= 10.0):
            raw = []
            for k in (1, 2, 3):
                def f(y, k=k):
                    return _shifted_softplus(mu, s, y, x0, sig) ** k * math.exp(-0.5 * y * y) / math.sqrt(2 * math.pi)
                # E|d|^k ~ (s sigmoid(-mu))^k: an absolute target of 1e-15 of that scale, below what kappa, Var X
                # and E X^3 resolve (epsabs = 0 asked for relative digits of E d ~ s^2 that roundoff cannot give)
                v, _ = integrate.quad(f, -np.inf, np.inf, epsabs=1e-15 * (s * sig) ** k, epsrel=1e-13, limit=200)
                raw.append(v)
        else:
            dy = min(0.05, 0.25 / s)
            y = np.arange(-40.0 - 3.0 * s, 40.0 + dy, dy)
            w = np.exp(-0.5 * y * y)
            w /= w.sum()
            d = _shifted_softplus(mu, s, y, x0, sig)
            d2 = d * d
            raw = [float(w @ d), float(w @ d2), float(w @ (d2 * d))]
        e1, e2, e3 = raw
        return Moments.from_central(x0 + e1, e2 - e1 * e1, e3 - 3 * e1 * e2 + 2 * e1 ** 3)

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros_like(x)
        pos = x > 0
        xp = x[pos]
        # X <= x  <=>  Z >= -log(expm1(x)); log(expm1 x) computed without overflow
        lem = np.where(xp > 30, xp + np.log1p(-np.exp(-np.minimum(xp, 700))), np.log(np.expm1(np.minimum(xp, 30))))
        out[pos] = special.ndtr((self.mu + lem) / self.s)
        return out

    def sample(self, rng, size):
        return _softplus(-(self.mu + self.s * rng.standard_normal(size)))


class BetaGate(Gate):
    """g ~ Beta(a, b). Beta(a, 1) gives exponential X with rate a (the exactly solvable case)."""
    atomless = True

    def __init__(self, a, b):
        _check_real(a=a, b=b)
        if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
            raise ValueError(f"Beta gate needs finite a > 0 and b > 0; got a={a}, b={b}")
        self.a, self.b = float(a), float(b)
        self.name = f"beta(a={a:g}, b={b:g})"

    def moments(self):
        a, ab = self.a, self.a + self.b
        # cumulants of X = -log g: k_n = (-1)^n (psi^(n-1)(a) - psi^(n-1)(a+b))
        k1 = special.digamma(ab) - special.digamma(a)
        k2 = special.polygamma(1, a) - special.polygamma(1, ab)
        k3 = special.polygamma(2, ab) - special.polygamma(2, a)
        return Moments(float(k1), float(k2), float(k2 + k1 * k1), float(k3 + 3 * k2 * k1 + k1 ** 3))

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        return np.where(x > 0, special.betaincc(self.a, self.b, np.exp(-np.maximum(x, 0))), 0.0)

    def sample(self, rng, size):
        # -log of a Beta draw via log-gammas keeps gates near 1 accurate (1 - g underflows otherwise)
        ga, gb = rng.standard_gamma(self.a, size), rng.standard_gamma(self.b, size)
        return np.log1p(gb / ga)


class GammaIncrement(Gate):
    """X ~ Gamma(k, theta): P(N > n) = P(Gamma(n k, theta) <= L) in closed form (the best oracle)."""
    atomless = True

    def __init__(self, k, theta):
        _check_real(k=k, theta=theta)
        if not (k > 0 and theta > 0 and math.isfinite(k) and math.isfinite(theta)):
            raise ValueError(f"gamma increment needs finite k > 0 and theta > 0; got k={k}, theta={theta}")
        self.k, self.theta = float(k), float(theta)
        self.name = f"gamma(k={k:g}, theta={theta:g})"

    def moments(self):
        k, th = self.k, self.theta
        return Moments(k * th, k * th * th, k * (k + 1) * th ** 2, k * (k + 1) * (k + 2) * th ** 3)

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        return special.gammainc(self.k, np.maximum(x, 0) / self.theta)

    def sample(self, rng, size):
        return rng.standard_gamma(self.k, size) * self.theta


class ConstantGate(Gate):
    """ALiBi: the constant gate g = exp(-m), X = m deterministic (a lattice law, Var X = 0)."""
    lattice = True

    def __init__(self, m):
        _check_real(m=m)
        if not (m > 0 and math.isfinite(m)):
            raise ValueError(f"ALiBi slope m must be finite and > 0; got {m}")
        self.m = float(m)
        self.name = f"alibi(m={m:g})"

    def moments(self):
        m = self.m
        return Moments(m, 0.0, m * m, m ** 3)

    def cdf(self, x):
        return (np.asarray(x, dtype=np.float64) >= self.m).astype(np.float64)

    def sample(self, rng, size):
        return np.full(size, self.m)


class AR1LogitGate(Gate):
    """Dependent gates: logit z_t = mu + s y_t with y a stationary AR(1), y_t = phi y_{t-1} + sqrt(1-phi^2) e_t.

    Same marginal as LogitNormalGate(mu, s); X_t = softplus(-z_t) is autocorrelated. The autocovariance
    of X follows from the Hermite expansion of softplus: gamma_k = sum_n c_n^2 phi^(k n).
    """
    atomless = True
    iid = False

    def __init__(self, mu, s, phi):
        _check_real(phi=phi)
        if not (-1 < phi < 1):
            raise ValueError(f"AR(1) coefficient phi must lie in (-1, 1); got {phi}")
        self.marginal = LogitNormalGate(mu, s)
        self.mu, self.s, self.phi = float(mu), float(s), float(phi)
        self.name = f"ar1-logit(mu={mu:g}, s={s:g}, phi={phi:g})"

    def moments(self):
        return self.marginal.moments()

    def cdf(self, x):
        return self.marginal.cdf(x)

    def sample(self, rng, size):
        """Not available: `sample` draws iid increments, and these are dependent. Raises TypeError naming
        sample_paths (AR(1) paths along time) and marginal.sample (iid draws of the marginal law)."""
        raise TypeError(f"{self.name} has dependent increments: sample() would draw them iid; use "
                        "sample_paths(rng, n, m) for n paths of m steps, or .marginal.sample(rng, size) for iid "
                        "draws of the marginal law")

    def _hermite_c2(self, nmax=80):
        # c_n^2 = E[f(Y) He_n(Y)]^2 / n!, by Gauss-Hermite (probabilists') quadrature
        y, w = np.polynomial.hermite_e.hermegauss(160)
        w = w / math.sqrt(2 * math.pi)
        f = _softplus(-(self.mu + self.s * y))
        he_prev, he = np.ones_like(y), y.copy()
        c2 = []
        for n in range(1, nmax + 1):
            a = np.dot(w, f * he)
            c2.append(a * a / math.factorial(n))
            he_prev, he = he, y * he - n * he_prev
        return np.array(c2)

    def autocovariance(self, lags):
        """gamma_k = Cov(X_0, X_k) for integer lags k >= 0 (exact up to quadrature)."""
        c2 = self._hermite_c2()
        n = np.arange(1, len(c2) + 1)
        return np.array([np.sum(c2 * self.phi ** (abs(k) * n)) for k in np.atleast_1d(lags)])

    def dependence_sums(self):
        """(sum_{k>=1} gamma_k, sum_{k>=1} k gamma_k), summed in closed form over k."""
        c2 = self._hermite_c2()
        r = self.phi ** np.arange(1, len(c2) + 1)
        return float(np.sum(c2 * r / (1 - r))), float(np.sum(c2 * r / (1 - r) ** 2))

    def sample_paths(self, rng, n, m, state=None):
        a = math.sqrt(1 - self.phi ** 2)
        y0 = rng.standard_normal(n) if state is None else state          # stationary start
        e = rng.standard_normal((n, m))
        # y_t = phi y_{t-1} + a e_t as an IIR filter along time, seeded with y_0
        y, _ = signal.lfilter([a], [1.0, -self.phi], e, axis=1, zi=(self.phi * y0)[:, None])
        return _softplus(-(self.mu + self.s * y)), y[:, -1].copy()


class EmpiricalGate(Gate):
    """The empirical law of the increments of a trace (resampled iid): moments are those of the
    empirical distribution, exact for it. Dependence in the trace is measured separately (renewal.py)."""
    smooth = False                                         # atoms: no Richardson on the lattice numerics

    def __init__(self, log_g, name="empirical"):
        """log_g: log-gates <= 0 (any shape; numpy array or torch tensor of a real dtype, bfloat16 included),
        the trace whose increments X = -log g make the law."""
        if isinstance(log_g, torch.Tensor):
            log_g = log_g.detach().cpu()
            log_g = (log_g.float() if log_g.dtype == torch.bfloat16 else log_g).numpy()
        x = np.asarray(increments_from_log_gates(_as_float_array(log_g, "log-gates")), dtype=np.float64).ravel()
        self.x = np.sort(x)
        if self.x[-1] <= 0:
            raise ValueError(f"empirical gate: all {len(x)} increments are 0 (every gate is 1), so kappa = 0 and "
                             "the walk never crosses L")
        self.name = f"{name}(n={len(x)})"

    def moments(self):
        x = self.x
        kappa = float(x.mean())
        d = x - kappa
        return Moments.from_central(kappa, float(np.mean(d * d)), float(np.mean(d ** 3)))

    def cdf(self, x):
        return np.searchsorted(self.x, np.asarray(x, dtype=np.float64), side="right") / len(self.x)

    def sample(self, rng, size):
        return self.x[rng.integers(0, len(self.x), size)]


SEED_GATES = (LogitNormalGate(2, 0.5), LogitNormalGate(1, 1), LogitNormalGate(3, 0.3))
ALIBI_SLOPES = (0.05, 0.1)

# ----------------------------------------------------------------------------- first-passage Monte Carlo


@dataclass
class MCResult:
    """Monte Carlo windows W = N - 1 with standard errors (docs/THEORY.md section 6)."""
    gate: str
    eps: float
    trials: int
    mean: float
    var: float
    se_mean: float
    se_var: float
    mean_overshoot: float      # E[S_N - L], for the Wald identity


def first_passage_samples(gate, *, trials, eps=None, L=None, seed=0, chunk=None, max_steps=10_000_000):
    """Simulate `trials` first passages of sum X_t over L = ln(1/eps) (give eps= or L=); returns (W, overshoot)
    arrays.

    Vectorised over trials, chunked so that memory stays near `chunk` increments (default 2**22)
    however many trials are asked for; seeded and reproducible for a given (seed, trials, chunk) (docs/THEORY.md
    section 5, Monte Carlo). Not prefix-consistent: the first n walks of a run of m > n trials differ from a run
    of n trials with the same seed (the stream is drawn in blocks shaped by the batch).
    """
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be a foxwindow Gate (e.g. LogitNormalGate(2, 0.5)); got {type(gate).__name__}")
    L = recordable(level(eps, L))
    eps = math.exp(-L) if eps is None else float(eps)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1; got {trials!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    safety.need_memory(16 * trials, f"first_passage_samples: {trials} trials")        # W and the overshoots
    rng = np.random.default_rng(seed)
    mom = gate.moments()
    if not mom.kappa > 0:
        raise ValueError(f"{gate} has kappa = {mom.kappa}: the walk never crosses L")
    if L / mom.kappa > max_steps:
        raise ValueError(f"{gate}: expected window L/kappa = {L / mom.kappa:.3g} steps at eps = {eps:g} exceeds "
                         f"max_steps = {max_steps:g}")
    if chunk is None:
        chunk = 2 ** 22
    elif isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be None or an integer >= 1 (increments held at once); got {chunk!r}")
    # first block covers most passages (mean + 1 sd of N); the rest continue in blocks of 3 sd
    sd = math.sqrt(max(mom.sigma2, 0.0) * L / mom.kappa ** 3)
    block = int(min(max(L / mom.kappa + sd + 2, 8), chunk))
    more = int(min(max(3 * sd, 8), chunk))
    per = max(1, chunk // block)
    W = np.empty(trials, dtype=np.int64)
    R = np.empty(trials)
    for s in range(0, trials, per):
        n = min(per, trials - s)
        S = np.zeros(n)                                    # partial sums of the active paths
        steps = np.zeros(n, dtype=np.int64)
        idx = np.arange(n)
        state, m = None, block
        while len(idx):
            x, state = gate.sample_paths(rng, len(idx), m, state)
            cs = np.cumsum(x, axis=1)
            cs += S[:, None]                               # (n_active, m), increasing along a row
            first = (cs <= L).sum(axis=1)                  # index of the crossing step, m if none
            hit = first < m
            done = idx[hit]
            W[s + done] = steps[hit] + first[hit]          # N - 1 = steps before the crossing one
            R[s + done] = cs[hit, first[hit]] - L
            keep = ~hit
            S, steps, idx = cs[keep, -1], steps[keep] + m, idx[keep]
            state = None if state is None else state[keep]
            m = more
            if len(idx) and steps[0] > max_steps:
                raise RuntimeError(f"{len(idx)} paths did not cross L = {L:g} within {max_steps} steps")
    return W, R


MC_BYTES = 32               # bytes first_passage_mc holds a trial


def first_passage_mc(gate, *, eps=None, L=None, trials=200_000, seed=0, chunk=None):
    """Mean and variance of the eps-window W = N - 1 by Monte Carlo (give eps= or L=), with standard errors
    SE_mean = s/sqrt(n) and SE_var = sqrt(m4/n - m2^2 (n - 3)/(n (n - 1))) (`se_of_var`).

    gate: a Gate (iid or dependent: its sample_paths are walked); eps= in (0, 1) or L = ln(1/eps) in (0, L_MAX]
    (keywords, exactly one); trials: int >= 2 walks; seed: int (numpy Generator seed); chunk: int increments held
    at once (None: 2**22). Returns MCResult (gate, eps, trials, mean, var, se_mean, se_var, mean_overshoot:
    floats). SE_var is the finite-n plug-in, not the delta method's sqrt((m4 - s^4)/n), which is 0 where the
    fourth central moment equals s^4 (a two-point law of equal masses, where s^2 still varies by O(s^2 / n)).

    SE_var is a large-sample error: the sample variance is skewed, so `var +- z SE_var` undercovers
    at few walks, its misses one-sided (the truth above the interval). Measured for the first seed gate at
    eps = 1e-2 against the exact variance, nominal 95%: coverage 0.90 at 50 walks (truth above 8.5%, below 1.3%),
    0.94 at 200 and at 1000 walks; use a thousand walks or more for a variance interval. A run is reproducible
    for a given (seed, trials, chunk) but is not a prefix of a longer run (see first_passage_samples)."""
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 2:
        raise ValueError(f"trials must be an integer >= 2 (a variance needs two windows); got {trials!r}")
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be a foxwindow Gate (e.g. LogitNormalGate(2, 0.5)); got {type(gate).__name__}")
    L = recordable(level(eps, L))
    eps = math.exp(-L) if eps is None else float(eps)
    # the windows, overshoots and two float copies of the windows: refused before the walks if they cannot fit
    safety.need_memory(MC_BYTES * trials, f"first_passage_mc: {trials} trials")
    W, R = first_passage_samples(gate, L=L, trials=trials, seed=seed, chunk=chunk)
    w = W.astype(np.float64)
    mean, var = w.mean(), w.var(ddof=1)
    return MCResult(str(gate), float(eps), int(trials), float(mean), float(var),
                    float(math.sqrt(var / trials)), se_of_var(w), float(R.mean()))


def se_of_var(w):
    """The standard error of the unbiased sample variance of independent samples w (n,) float, n >= 2: the plug-in
    of Var(s^2) = mu4/n - sigma^4 (n - 3)/(n (n - 1)) with the sample's central moments m2, m4 (both 1/n: on a
    two-point law of equal masses m4 = m2^2 as mu4 = sigma^4, and the plug-in is exact there)."""
    n = len(w)
    d2 = (w - w.mean()) ** 2
    m2, m4 = float(d2.mean()), float(np.mean(d2 * d2))
    return float(math.sqrt(max(m4 / n - m2 * m2 * (n - 3) / (n * (n - 1)), 0.0)))
