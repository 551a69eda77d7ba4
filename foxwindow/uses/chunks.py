"""Chunk-size safety of chunked gated-attention kernels: the chunk size at which each head overflows.

Chunked kernels for gated linear attention, state-space models and FoX (flash-linear-attention's chunk
forms, Mamba-2's SSD, cuDNN) cut the sequence into aligned chunks [kC, (k+1)C) and, inside a chunk,
form the cumulative log-gate cum_i = sum_{t=kC..i} log g_t (inclusive, as fla's chunk_local_cumsum)
and the two factors

    q~_i = q_i exp(cum_i),      k~_j = k_j exp(-cum_j),      A_ij = q~_i . k~_j = q_i . k_j exp(cum_i - cum_j)

so that the intra-chunk attention is one matmul (the textbook formulation, no re-centring). With
b_i = -cum_i = sum_{t=kC..i} X_t >= 0 (X = -log g), the key factor exp(+b_j) is the one that
overflows: exp(b) is inf in the compute dtype once b passes

    float32   b > 128 ln 2 + ln(1 - 2^-25) = 88.7228   (ln FLT_MAX to 1e-8)
    bfloat16  b > 128 ln 2 + ln(1 - 2^-9) = 88.7209   (exp in float32, the factor stored in bfloat16)
    float16   b > 15 ln 2 + ln(2 - 2^-11) = ln 65520 = 11.0901

(the value rounds to inf once it reaches max + half an ulp). The query factor exp(-b_i) goes subnormal
at b > -ln(tiny) (87.34 in float32 and bfloat16, 9.70 in float16) and rounds to 0 at
b > (mantissa bits + 1 - min exponent) ln 2 (103.97 float32, 92.88 bfloat16, 17.33 float16): that alone
only loses accuracy, and it never happens before the key factor at the same position has overflowed.
The overflow makes the output NaN: inf times the query factor gives +-inf terms whose sum is inf - inf or
whose product with an underflowed 0 is NaN, and the state update k~_j exp(-b_last) is inf * 0 = NaN, which
then poisons every later chunk of the sequence. b is largest at the chunk's last position, where it is
the chunk's whole sum, so a chunk fails exactly when

    S_C = sum of the C increments of the chunk > theta(dtype),  P(S_C > theta) = P(N(theta) <= C),

the first-passage probability of the walk over L = theta. Re-centring (A_ij from exp(b_j - b_i) per pair,
as fla's sub-chunk path does) never overflows.

    exp_limits(dtype)                 the thresholds above, derived from the format
    chunk_sums(x, C)                  (S, T, H) increments -> (S, T // C, H) aligned chunk sums
    measured_rate(fail)               per head: failures / chunks with a cluster-robust SE, exact bound at 0
    law_tail(gate, theta, chunks)     P(S_C > theta) for an iid law (its CDF) by lattice convolution powers
    iid_tail / dependent_tail         the same from a trace: its pooled increments (iid), or its aligned
                                      block sums convolved and rescaled to the measured Var(S_C)
    markov_tail(gate, theta, chunks)  the same for AR(1)-logit gates (the exact Markov-additive walk)
    chunked_attention(...)            the chunked reference op (textbook or re-centred), CPU
    analyse(traces, ...)              every head: predicted and measured failure rates, safe chunk sizes
    recommend(heads)                  per dtype: the largest chunk that keeps every head under the risk

The command line, its tables and its other gate sources (the shipped model, fla layers at random
initialisation, synthetic gates) are in foxwindow/uses/chunks_report.py: `python chunks.py --traces FILE` (or
`foxwindow chunks`) runs it on a trace file; without --traces it captures the shipped FoX model's gates on
held-out text (--random-layers, --synthetic: see --help).
The dependence-aware prediction was chosen on held-out evidence (fit on the even sequences, checked on the
odd ones); in the deep tail of strongly correlated gates it undershoots the exact law by a factor of 2-3
(results/chunks/synthetic.txt), so a safe chunk at a 1e-6 risk is an extrapolation.
"""
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from scipy import special

from foxwindow import parallel
from foxwindow.laws import gates
from foxwindow.models.traces import HeadBlocks, LazyTrace

__all__ = ["DTYPES", "CHUNKS", "RISK", "CELLS", "BLOCK", "GROUPS", "ExpLimits", "exp_limits", "measured_limits",
           "increments", "chunk_sums", "Rate", "measured_rate", "Tail", "law_tail", "markov_tail", "iid_tail",
           "variance_function", "dependent_tail", "gaussian_tail", "jackknife", "chunked_attention", "unit_qkv",
           "op_rates", "head_op_rates", "HeadChunks", "z_score", "analyse_head", "analyse", "recommend",
           "recommend_per_trace"]

DTYPES = ("float32", "bfloat16", "float16")
CHUNKS = (16, 32, 64, 128, 256, 512)
RISK = 1e-6
CELLS = 2 ** 13                 # lattice cells over [0, theta]: h = theta / CELLS
BLOCK = 8                       # block length of the dependence-aware prediction (chunks are multiples)
GROUPS = 8                      # delete-a-group jackknife groups for the prediction's standard error

_FORMAT = {                     # (mantissa bits, smallest normal exponent, largest exponent)
    "float32": (23, -126, 127),
    "bfloat16": (7, -126, 127),
    "float16": (10, -14, 15),
}


# ----------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class ExpLimits:
    """Where exp() leaves a floating-point format, in units of b = -cum (the chunk's summed -log g).

    overflow: exp(+b) rounds to inf for b > overflow (the key factor: this is what makes NaN);
    subnormal: exp(-b) is subnormal (lost precision) for b > subnormal;
    underflow: exp(-b) rounds to 0 for b > underflow (the query factor: silent, never before overflow).
    """
    dtype: str
    overflow: float
    subnormal: float
    underflow: float


def exp_limits(dtype):
    """ExpLimits of `dtype` ("float32", "bfloat16", "float16"), derived from the format: a value rounds to
    inf at (2 - 2^-(p+1)) 2^emax, to a subnormal below (1 - 2^-(p+1)) 2^emin and to 0 at or below
    2^(emin - p - 1) (round to nearest even), p the mantissa bits. exp is taken in float32 and rounded to
    the format once.
    Raises ValueError for another dtype."""
    if dtype not in _FORMAT:
        raise ValueError(f"dtype must be one of {DTYPES}; got {dtype!r}")
    p, emin, emax = _FORMAT[dtype]
    ln2 = math.log(2.0)
    return ExpLimits(dtype, emax * ln2 + math.log(2.0 - 2.0 ** -(p + 1)),
                     -emin * ln2 - math.log(1.0 - 2.0 ** -(p + 1)), (p + 1 - emin) * ln2)


def measured_limits(dtype, lo=0.0, hi=200.0):
    """ExpLimits found by bisection on torch's own exp (float32) and rounding to `dtype` on this machine:
    a check of exp_limits. Each value is the largest float32 b at which the event has not happened yet."""
    tdt = getattr(torch, dtype) if dtype in _FORMAT else None
    if tdt is None:
        raise ValueError(f"dtype must be one of {DTYPES}; got {dtype!r}")
    tiny = torch.finfo(tdt).tiny

    def over(b):
        return bool(torch.isinf(torch.exp(torch.tensor([b], dtype=torch.float32)).to(tdt)).item())

    def sub(b):
        return bool((torch.exp(-torch.tensor([b], dtype=torch.float32)).to(tdt).float() < tiny).item())

    def zero(b):
        return bool((torch.exp(-torch.tensor([b], dtype=torch.float32)).to(tdt) == 0).item())

    def bisect(f):
        a, z = np.float32(lo), np.float32(hi)
        while True:
            m = np.float32((float(a) + float(z)) / 2)
            if m in (a, z):
                return float(a)
            a, z = (a, m) if f(float(m)) else (m, z)

    return ExpLimits(dtype, bisect(over), bisect(sub), bisect(zero))


# ----------------------------------------------------------------------------- chunk sums and measured rates


def increments(log_g):
    """X = -log g, float64 (S, T, H), from log-gates (S, T, H) <= 0 (any float dtype, numpy or torch).
    Raises ValueError on another shape, NaN/inf or positive log-gates."""
    a = log_g.detach().cpu().numpy() if isinstance(log_g, torch.Tensor) else np.asarray(log_g)
    if a.ndim != 3:
        raise ValueError(f"log-gates must be (S, T, H) (sequences, positions, heads); got shape {a.shape}")
    return np.asarray(gates.increments_from_log_gates(a.astype(np.float64)), dtype=np.float64)


def chunk_sums(x, C):
    """Aligned chunk sums of increments x (S, T, H) float: (S, T // C, H) float64, chunk k covering
    positions kC..(k+1)C-1 as the kernels cut them; a last partial chunk (T % C positions) is left out
    (it is shorter, so it fails less often). Raises ValueError when T < C or C < 1."""
    x = np.asarray(x, dtype=np.float64)
    if isinstance(C, bool) or not isinstance(C, (int, np.integer)) or C < 1:
        raise ValueError(f"chunk size must be an integer >= 1; got {C!r}")
    S, T, H = x.shape
    if T < C:
        raise ValueError(f"chunk size {C} exceeds the trace length T = {T}")
    n = T // C
    return x[:, :n * C].reshape(S, n, C, H).sum(axis=2)


@dataclass
class Rate:
    """A measured failure rate per chunk: p = failures / chunks, se its standard error (the larger of the
    cluster-robust SE over sequences, which the dependence between a sequence's chunks needs, and the
    binomial SE at p), upper: exact one-sided 95% binomial upper bound (3/n, the rule of three, at 0 failures)."""
    p: float
    se: float
    failures: int
    chunks: int
    upper: float


def measured_rate(fail):
    """Rate of one head from fail (S, n) bool: chunk failed in sequence s. S >= 2 for the cluster SE."""
    fail = np.asarray(fail, dtype=bool)
    if fail.ndim != 2 or fail.size == 0:
        raise ValueError(f"fail must be a non-empty (S, n) boolean array; got shape {fail.shape}")
    S, n = fail.shape
    N = S * n
    k = int(fail.sum())
    p = k / N
    m = fail.sum(axis=1).astype(np.float64)
    cluster = math.sqrt(S / max(S - 1, 1) * float(np.sum((m - p * n) ** 2))) / N
    se = max(cluster, math.sqrt(p * (1 - p) / N))
    upper = 1.0 if k == N else float(special.betaincinv(k + 1, N - k, 0.95))
    return Rate(p, se, k, N, upper)


# ----------------------------------------------------------------------------- lattice convolution powers


def _conv(a, b, K):
    """Sub-distribution a * b truncated to cells 0..K-1 (mass beyond is past every threshold: X >= 0)."""
    n = 1 << int(math.ceil(math.log2(2 * K)))
    c = np.fft.irfft(np.fft.rfft(a, n) * np.fft.rfft(b, n), n)[:K]
    return np.maximum(c, 0.0)


def _powers_cdf(pmf, pairs):
    """For each (m, r) in pairs: sum_{k <= r} (pmf^{*m})[k], the lattice walk's P(sum of m steps <= r h).
    pmf^{*m} by binary powers (each power of two once), truncated to len(pmf) cells."""
    K = len(pmf)
    cache, full = {1: pmf}, {}
    out = []
    for m, r in pairs:
        if m not in full:
            acc, bit = None, 1
            while bit <= m:
                if bit not in cache:
                    cache[bit] = _conv(cache[bit // 2], cache[bit // 2], K)
                if m & bit:
                    acc = cache[bit] if acc is None else _conv(acc, cache[bit], K)
                bit <<= 1
            full[m] = np.cumsum(acc)
        out.append(float(full[m][min(r, K - 1)]) if r >= 0 else 0.0)
    return out


def _atoms_pmf(values, h, K, mode):
    """Empirical law of `values` on the lattice {0, h, ..}: floor, ceil or nearest cell; cells >= K dropped."""
    cells = {"floor": np.floor, "ceil": np.ceil, "nearest": np.rint}[mode](values / h)
    idx = cells[cells < K].astype(np.int64)        # dropped before the cast: a cell past int64 (X = 3e38) too
    return np.bincount(idx, minlength=K)[:K].astype(np.float64) / len(values)


def _cdf_pmf(cdf, h, K, mode):
    """A law given by its CDF F on the lattice: cell k gets P(X rounds to k): floor [kh, (k+1)h),
    ceil ((k-1)h, kh], nearest ((k-1/2)h, (k+1/2)h] (X >= 0; mass past the last cell dropped)."""
    k = np.arange(K, dtype=np.float64)
    upper = {"floor": k + 1.0, "ceil": k, "nearest": k + 0.5}[mode] * h
    return np.diff(np.concatenate([[0.0], np.asarray(cdf(upper), dtype=np.float64)]))


@dataclass
class Tail:
    """P(S_C > theta) per chunk size: p (nearest-cell lattice), bounds [lo, hi] from the floor and ceil
    lattices (rigorous for iid steps: rounding every step down or up), chunks (the C's)."""
    chunks: list
    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def _tail(make_pmf, step, chunks, thresholds, cells, bounds=True):
    """P(sum of C/step iid lattice steps > t) for every C in chunks and t in the matching row of thresholds
    (n_theta, len(chunks)), on one lattice of `cells` cells over [0, max t]; make_pmf(h, K, mode).
    Returns Tail with (n_theta, len(chunks)) arrays. bounds=False: the nearest-cell lattice only (lo = hi = p)."""
    thresholds = np.atleast_2d(np.asarray(thresholds, dtype=np.float64))
    top = float(thresholds.max())
    ms = [C // step for C in chunks]
    res = {}
    for mode in ("nearest", "floor", "ceil") if bounds else ("nearest",):
        if top <= 0:
            res[mode] = np.ones(thresholds.shape)
            continue
        h = top / (cells - 1)                              # the last cell, cells - 1, holds top
        pmf = make_pmf(h, cells, mode)
        pairs = [(m, int(math.floor(t / h + 1e-9)) if t >= 0 else -1)
                 for row in thresholds for m, t in zip(ms, row)]
        cdf = _powers_cdf(pmf, pairs)
        res[mode] = np.clip(1.0 - np.array(cdf).reshape(thresholds.shape), 0.0, 1.0)
    return Tail(list(chunks), res["nearest"], res.get("floor", res["nearest"]), res.get("ceil", res["nearest"]))


def _check_chunks(chunks, step=1):
    chunks = [int(c) for c in chunks]
    if not chunks or any(c < 1 for c in chunks):
        raise ValueError(f"chunk sizes must be integers >= 1; got {chunks}")
    bad = [c for c in chunks if c % step]
    if bad:
        raise ValueError(f"chunk sizes {bad} are not multiples of the block length {step}")
    return chunks


def _thetas(theta):
    """theta as a 1-D float array and whether it was a scalar; raises ValueError unless every theta > 0."""
    t = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    if t.ndim != 1 or t.size == 0 or not np.all(t > 0) or not np.all(np.isfinite(t)):
        raise ValueError(f"theta must be a number > 0 or a non-empty sequence of them; got {theta!r}")
    return t, np.ndim(theta) == 0


def _shape(tail, scalar):
    if scalar:
        tail.p, tail.lo, tail.hi = tail.p[0], tail.lo[0], tail.hi[0]
    return tail


def law_tail(gate, theta, chunks=CHUNKS, cells=CELLS):
    """P(S_C > theta) = P(N(theta) <= C) for an iid gate law (a gates.Gate with a CDF), C in chunks.

    The increment law is put on a lattice of spacing h = theta / (cells - 1) (floor, ceil and nearest
    cells) and convolved with itself by repeated squaring, truncated at theta (X >= 0: mass past theta
    never returns), so every C costs O(log C) FFTs of 2 cells. theta: a float (arrays over chunks) or a
    sequence (arrays (len(theta), len(chunks)), one lattice over [0, max theta]).
    Returns Tail (p from the nearest cells, rigorous bounds lo <= P <= hi from the floor and ceil cells)."""
    if not gate.iid:
        raise ValueError(f"{gate} has dependent increments: law_tail covers iid laws (use markov_tail)")
    t, scalar = _thetas(theta)
    chunks = _check_chunks(chunks)
    return _shape(_tail(lambda h, K, mode: _cdf_pmf(gate.cdf, h, K, mode), 1, chunks,
                        np.repeat(t[:, None], len(chunks), 1), cells), scalar)


def _walk(pi, P, x, theta, n_max, h):
    """P(S_n <= theta), n = 1..n_max, for a Markov-additive walk: states with stationary weights pi (M,),
    transitions P (M, M) row i -> column j, increment x_j >= 0 on entering state j; the joint mass of
    (S_n, state) on an S grid of spacing h (cloud-in-cell: x_j split between the two neighbouring cells,
    mean exact), the first state drawn from pi."""
    M = len(pi)
    K = int(math.ceil(theta / h)) + 2
    q = np.minimum(np.floor(x / h).astype(np.int64), K)
    w = x / h - np.floor(x / h)                                          # weight on cell q + 1
    read = np.clip((theta - np.arange(K) * h) / h + 0.5, 0.0, 1.0)       # cell k's mass at or below theta
    pad = int(q.max()) + 1
    rows = np.arange(K)[:, None] - q[None, :] + pad                      # (K, M) source rows, padded array
    gp = np.zeros((K + pad, M))

    def step(g):                                                         # g (K, M): shift column j by x_j
        gp[pad:] = g
        return (1 - w) * np.take_along_axis(gp, rows, 0) + w * np.take_along_axis(gp, rows - 1, 0)

    f0 = np.zeros((K, M))
    f0[0] = pi
    f = step(f0)
    out = [read @ f.sum(axis=1)]
    for _ in range(n_max - 1):
        f = step(f @ P)
        out.append(read @ f.sum(axis=1))
    return np.array(out)


def _ar1_walk(gate, theta, n_max, h, dy):
    """_walk for an AR1LogitGate: its latent y on a grid of spacing dy over [-8, 8] (Gaussian AR(1) kernel,
    rows normalised), X = softplus(-(mu + s y))."""
    a = math.sqrt(1.0 - gate.phi ** 2)
    M = 2 * int(math.ceil(8.0 / dy)) + 1
    y = np.linspace(-8.0, 8.0, M)
    pi = np.exp(-0.5 * y * y)
    pi /= pi.sum()
    P = np.exp(-0.5 * ((y[None, :] - gate.phi * y[:, None]) / a) ** 2)
    P /= P.sum(axis=1, keepdims=True)
    return _walk(pi, P, np.logaddexp(0.0, -(gate.mu + gate.s * y)), theta, n_max, h)


def markov_tail(gate, theta, chunks=CHUNKS, cells_per_kappa=4):
    """P(S_C > theta) for an gates.AR1LogitGate (dependent gates), from the law: the Markov-additive walk of
    (S_n, y_n) on a grid, up to n = max(chunks), with Richardson over the S spacing (h, h/2), h = kappa /
    cells_per_kappa (the same numerics as exact.markov_first_passage, stopped at the largest chunk).
    Returns (p, err) arrays over chunks; err = the Richardson step plus the change when the y grid halves
    (on the coarser S grid)."""
    if not isinstance(gate, gates.AR1LogitGate):
        raise TypeError(f"markov_tail needs an AR1LogitGate; got {type(gate).__name__}")
    t, _ = _thetas(theta)
    chunks = _check_chunks(chunks)
    n = max(chunks)
    h = gate.moments().kappa / cells_per_kappa
    dy = min(0.25, math.sqrt(1 - gate.phi ** 2) / 2)
    s1 = _ar1_walk(gate, float(t[0]), n, h, dy)
    s2 = _ar1_walk(gate, float(t[0]), n, h / 2, dy)
    s3 = _ar1_walk(gate, float(t[0]), n, h, dy / 2)
    rich = (4 * s2 - s1) / 3
    idx = np.array(chunks) - 1
    p = np.clip(1.0 - rich[idx], 0.0, 1.0)
    err = np.abs(rich[idx] - s2[idx]) + np.abs(s3[idx] - s1[idx])
    return p, err


# ----------------------------------------------------------------------------- predictions from a trace


def iid_tail(x, theta, chunks=CHUNKS, cells=CELLS, bounds=True):
    """The iid prediction from one head's increments x (S, T) float: the pooled empirical law of X, C-fold
    convolved (the first-passage law of exact.exact_first_passage(EmpiricalGate(-x)), on a lattice).
    theta: float or sequence (as law_tail). Returns Tail."""
    v = np.asarray(x, dtype=np.float64).ravel()
    t, scalar = _thetas(theta)
    chunks = _check_chunks(chunks)
    return _shape(_tail(lambda h, K, mode: _atoms_pmf(v, h, K, mode), 1, chunks,
                        np.repeat(t[:, None], len(chunks), 1), cells, bounds), scalar)


def variance_function(x, chunks):
    """V(C) = Var(S_C) of aligned chunk sums of x (S, T), pooled over sequences and chunks: array over chunks."""
    x = np.asarray(x, dtype=np.float64)
    return np.array([chunk_sums(x[:, :, None], C)[..., 0].var(ddof=1) if x.shape[0] * (x.shape[1] // C) > 1
                     else np.nan for C in chunks])


def dependent_tail(x, theta, chunks=CHUNKS, block=BLOCK, cells=CELLS, bounds=True):
    """The dependence-aware prediction from one head's increments x (S, T) float.

    The law of S_C is taken as the (C / block)-fold convolution of the empirical law of the trace's aligned
    block sums (dependence inside a block kept, its skew kept), centred at C kappa and scaled so that its
    variance is V(C) = Var(S_C) measured on the trace (the dependence between blocks):
        P(S_C > theta) = P(B_1 + .. + B_m > m b kappa + (theta - C kappa) sqrt(m Var B / V(C))).
    Chunk sizes must be multiples of `block`; theta: float or sequence (as law_tail). A rescaled threshold
    past 8 theta is capped there (conservative: P only grows). Returns Tail (lo/hi: lattice bounds of this
    model, not of the truth; bounds=False: the nearest lattice alone, lo = hi = p)."""
    x = np.asarray(x, dtype=np.float64)
    t, scalar = _thetas(theta)
    chunks = _check_chunks(chunks, block)
    if x.shape[1] < max(block, max(chunks)):
        raise ValueError(f"trace length {x.shape[1]} is shorter than the block {block} or chunk {max(chunks)}")
    B = chunk_sums(x[:, :, None], block)[..., 0].ravel()
    kappa, vb = float(x.mean()), float(B.var(ddof=1))
    V = variance_function(x, chunks)
    r = np.array([math.sqrt((C // block) * vb / v) if v > 0 and vb > 0 else 1.0 for C, v in zip(chunks, V)])
    C = np.array(chunks, dtype=np.float64)
    thr = np.minimum(C * kappa + (t[:, None] - C * kappa) * r, 8 * t[:, None])      # (n_theta, n_chunks)
    neg = thr <= 0
    out = _tail(lambda h, K, mode: _atoms_pmf(B, h, K, mode), block, chunks, np.maximum(thr, 0.0), cells, bounds)
    for a in (out.p, out.lo, out.hi):
        a[neg] = 1.0
    return _shape(out, scalar)


def gaussian_tail(x, theta, chunks=CHUNKS):
    """The Gaussian prediction: S_C ~ Normal(C kappa, V(C)) with V(C) measured on x (S, T). Array over
    chunks (theta a float) or (len(theta), len(chunks))."""
    x = np.asarray(x, dtype=np.float64)
    t, scalar = _thetas(theta)
    V = variance_function(x, chunks)
    C = np.array(chunks, dtype=np.float64)
    kappa = float(x.mean())
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (t[:, None] - C * kappa) / np.sqrt(V)
    p = np.where(V > 0, special.ndtr(-z), (C * kappa > t[:, None]).astype(np.float64))
    return p[0] if scalar else p


def jackknife(fn, x, groups=GROUPS):
    """Delete-a-group jackknife over sequences: fn(x (S, T)) -> array; returns (fn(x), SE). groups <= S."""
    S = x.shape[0]
    full = np.asarray(fn(x), dtype=np.float64)
    g = min(groups, S)
    if g < 2:
        return full, np.full_like(full, np.nan)
    parts = np.array_split(np.arange(S), g)
    reps = np.array([fn(np.delete(x, p, axis=0)) for p in parts])
    se = np.sqrt((g - 1) / g * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    return full, se


# ----------------------------------------------------------------------------- the chunked reference op


def chunked_attention(q, k, v, log_g, chunk, dtype="float32", recentre=False, output=True):
    """Chunked gated linear attention (scalar gate per head and token; FoX's chunked form without softmax,
    Mamba-2 / Gated DeltaNet-style decay), the CPU reference of what chunked kernels compute.

    q, k: (B, T, H, D) float, v: (B, T, H, Dv) float, log_g: (B, T, H) float <= 0; chunk: C, with T % C == 0.
    dtype: the compute dtype of the factors and matmuls ("float32", "bfloat16", "float16"); the cumulative
    log-gate and exp() are float32, the factors are rounded to dtype, as Triton kernels do.
    recentre=False: the textbook form, q exp(cum_i) and k exp(-cum_j) formed separately (overflows);
    recentre=True: exp(cum_i - cum_j) per pair inside the chunk and exp(cum_last - cum_j) for the state
    (every exponent <= 0: never overflows).
    Output o_i = sum_{j <= i} (q_i . k_j) prod_{t=j+1..i} g_t v_j. Returns (o (B, T, H, Dv) float32,
    bad (B, T // C, H) bool: the chunk's own terms (intra-chunk output or state update) are not finite;
    a bad chunk also makes every later chunk of its sequence NaN through the state). output=False skips the
    inter-chunk recurrence and returns (None, bad): the failure mask alone.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}; got {dtype!r}")
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k must be (B, T, H, D) and v (B, T, H, Dv); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    B, T, H, D = q.shape
    if tuple(log_g.shape) != (B, T, H):
        raise ValueError(f"log_g must be (B, T, H) = {(B, T, H)}; got {tuple(log_g.shape)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1 or T % chunk:
        raise ValueError(f"chunk must be an integer >= 1 dividing T = {T}; got {chunk!r}")
    if not torch.isfinite(log_g).all() or (log_g > 0).any():
        raise ValueError("log_g must be finite and <= 0")
    dt = getattr(torch, dtype)
    C, n = chunk, T // chunk
    qc = q.float().reshape(B, n, C, H, D).permute(0, 3, 1, 2, 4)            # (B, H, n, C, D)
    kc = k.float().reshape(B, n, C, H, D).permute(0, 3, 1, 2, 4)
    vc = v.float().reshape(B, n, C, H, -1).permute(0, 3, 1, 2, 4)           # (B, H, n, C, Dv)
    cum = log_g.float().reshape(B, n, C, H).permute(0, 3, 1, 2).cumsum(-1)  # (B, H, n, C), <= 0, inclusive
    mask = torch.ones(C, C, dtype=torch.bool).tril()
    if recentre:
        diff = (cum[..., :, None] - cum[..., None, :]).masked_fill(~mask, -math.inf)   # cum_i - cum_j
        A = (qc.to(dt) @ kc.to(dt).transpose(-1, -2)).float() * torch.exp(diff).to(dt).float()
        ks = kc * torch.exp(cum[..., -1:] - cum)[..., None]                # decayed to the chunk's end
        qs = qc * torch.exp(cum)[..., None]
    else:
        qs = qc * torch.exp(cum).to(dt).float()[..., None]                  # q exp(cum_i): underflows only
        kt = kc * torch.exp(-cum).to(dt).float()[..., None]                 # k exp(-cum_j): overflows
        A = (qs.to(dt) @ kt.to(dt).transpose(-1, -2)).float()
        A = torch.where(mask, A, torch.zeros((), dtype=A.dtype))
        ks = kt * torch.exp(cum[..., -1:]).to(dt).float()[..., None]        # k~_j exp(cum_last)
    intra = (A.to(dt) @ vc.to(dt)).float()                                  # (B, H, n, C, Dv)
    upd = (ks.to(dt).transpose(-1, -2) @ vc.to(dt)).float()                 # (B, H, n, D, Dv) state increment
    bad = ~(torch.isfinite(intra).flatten(-2).all(-1) & torch.isfinite(upd).flatten(-2).all(-1))   # (B, H, n)
    if not output:
        return None, bad.permute(0, 2, 1)
    decay = torch.exp(cum[..., -1])                                          # (B, H, n) whole-chunk decay
    state = torch.zeros(B, H, D, vc.shape[-1])
    outs = []
    for c in range(n):
        outs.append(intra[:, :, c] + (qs[:, :, c].to(dt) @ state.to(dt)).float())
        state = state * decay[:, :, c, None, None] + upd[:, :, c]
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, T, H, -1)
    return o, bad.permute(0, 2, 1)


def unit_qkv(B, T, H, D=8, Dv=8, seed=0):
    """Random q, k (B, T, H, D) with unit L2 norm rows (as Gated DeltaNet normalises them: |q_c|, |k_c| <= 1,
    so the factors, not q or k, decide every overflow) and v (B, T, H, Dv) standard normal, float32."""
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    return q, k, torch.randn(B, T, H, Dv, generator=g)


def op_rates(log_g, chunks=CHUNKS, dtypes=DTYPES, D=4, seed=0, batch=8):
    """The chunked op's measured failure rate per head: {(dtype, C): (H,) list of Rate} on log_g (S, T, H)
    (run `batch` sequences at a time, unit q, k; chunk sizes that do not divide T are skipped)."""
    lg = torch.as_tensor(np.asarray(log_g, dtype=np.float32))
    S, T, H = lg.shape
    out = {}
    for dt in dtypes:
        for C in chunks:
            if T % C:
                continue
            bad = []
            for s0 in range(0, S, batch):
                part = lg[s0:s0 + batch]
                q, k, v = unit_qkv(part.shape[0], T, H, D, D, seed + s0)
                bad.append(chunked_attention(q, k, v, part, C, dt, output=False)[1])
            bad = torch.cat(bad, 0).numpy()                                   # (S, n, H)
            out[(dt, C)] = [measured_rate(bad[:, :, h]) for h in range(H)]
    return out


def head_op_rates(x, chunks, dt, seed=0):
    """{C: Rate} of the chunked op's failing chunks on increments x (S, T) (one head, unit q and k)."""
    lg = torch.tensor(-np.asarray(x)[:, :, None], dtype=torch.float32)
    q, k, v = unit_qkv(lg.shape[0], lg.shape[1], 1, 2, 2, seed=seed)
    return {C: measured_rate(chunked_attention(q, k, v, lg, C, dt, output=False)[1][:, :, 0].numpy())
            for C in chunks}


# ----------------------------------------------------------------------------- per-head analysis


@dataclass
class HeadChunks:
    """One head, one dtype: per chunk size the predictions and the measured rate (lists over `chunks`).

    iid / dep / gauss: P(S_C > theta) from all sequences (iid law; block convolution with V(C); Gaussian
    with V(C)); dep_se: jackknife SE of dep. check_*: the same fitted on the even sequences and measured on
    the odd ones (meas_check), z_*: (pred - meas) / sqrt(se_pred^2 + se_meas^2), se_meas floored at the
    binomial SE under the prediction. measured: all sequences. safe_*: largest chunk with rate <= risk."""
    name: str
    head: int
    dtype: str
    theta: float
    kappa: float
    chunks: list
    iid: list
    iid_lo: list
    iid_hi: list
    dep: list
    dep_se: list
    gauss: list
    measured: list = field(default_factory=list)
    check_iid: list = field(default_factory=list)
    check_dep: list = field(default_factory=list)
    check_dep_se: list = field(default_factory=list)
    check_gauss: list = field(default_factory=list)
    meas_check: list = field(default_factory=list)
    z_iid: list = field(default_factory=list)
    z_dep: list = field(default_factory=list)
    z_gauss: list = field(default_factory=list)
    safe_dep: int = 0
    safe_iid: int = 0
    safe_measured: int = 0


def z_score(pred, se_pred, r):
    """(pred - measured) / SE for a prediction with SE se_pred and a measured Rate r (its SE floored at the
    binomial SE under the prediction)."""
    if r.failures == 0 and pred == 0:
        return 0.0
    var = se_pred ** 2 + max(r.se ** 2, pred * (1 - pred) / r.chunks)
    return (pred - r.p) / math.sqrt(var) if var > 0 else (0.0 if pred == r.p else math.copysign(math.inf,
                                                                                                 pred - r.p))


def _safe(chunks, p, risk):
    ok = [C for C, v in zip(chunks, p) if v <= risk]
    # the largest C below which every smaller chunk is also safe (rates grow with C), in any order given
    best = 0
    for C, v in sorted(zip(chunks, p)):
        if v > risk:
            break
        best = C
    return best if ok else 0


def _groups(dtypes, rel=0.01):
    """dtypes whose overflow thresholds lie within rel of each other share one lattice (float32, bfloat16)."""
    out = []
    for dt in dtypes:
        th = exp_limits(dt).overflow
        for g in out:
            if abs(exp_limits(g[0]).overflow / th - 1) < rel:
                g.append(dt)
                break
        else:
            out.append([dt])
    return out


def analyse_head(x, name, head, dtypes=DTYPES, chunks=CHUNKS, risk=RISK, block=BLOCK, cells=CELLS,
                 groups=GROUPS):
    """HeadChunks (one per dtype) for one head's increments x (S, T) float64, S >= 2 (the held-out check
    fits on the even sequences and measures on the odd ones)."""
    S = x.shape[0]
    if S < 2:
        raise ValueError("the fit/check split needs at least 2 sequences")
    fit, chk = x[0::2], x[1::2]
    res = {}
    for grp in _groups(dtypes):
        th = np.array([exp_limits(dt).overflow for dt in grp])
        it = iid_tail(x, th, chunks, cells)
        dep, dep_se = jackknife(lambda y: dependent_tail(y, th, chunks, block, cells, False).p, x, groups)
        ga = gaussian_tail(x, th, chunks)
        ci = iid_tail(fit, th, chunks, cells, False).p
        cd, cd_se = jackknife(lambda y: dependent_tail(y, th, chunks, block, cells, False).p, fit, groups)
        cg = gaussian_tail(fit, th, chunks)
        for j, dt in enumerate(grp):
            theta = float(th[j])
            hc = HeadChunks(name, head, dt, theta, float(x.mean()), list(chunks), it.p[j].tolist(),
                            it.lo[j].tolist(), it.hi[j].tolist(), dep[j].tolist(), dep_se[j].tolist(),
                            ga[j].tolist())
            for i, C in enumerate(chunks):
                r_all = measured_rate(chunk_sums(x[:, :, None], C)[..., 0] > theta)
                r = measured_rate(chunk_sums(chk[:, :, None], C)[..., 0] > theta)
                hc.measured.append(asdict(r_all))
                hc.meas_check.append(asdict(r))
                hc.check_iid.append(float(ci[j, i]))
                hc.check_dep.append(float(cd[j, i]))
                hc.check_dep_se.append(float(cd_se[j, i]))
                hc.check_gauss.append(float(cg[j, i]))
                hc.z_iid.append(z_score(ci[j, i], 0.0, r))
                hc.z_dep.append(z_score(cd[j, i], cd_se[j, i], r))
                hc.z_gauss.append(z_score(cg[j, i], 0.0, r))
            hc.safe_dep = _safe(chunks, [p + 2 * s for p, s in zip(hc.dep, hc.dep_se)], risk)
            hc.safe_iid = _safe(chunks, hc.iid_hi, risk)
            hc.safe_measured = _safe(chunks, [m["upper"] for m in hc.measured], risk)
            res[dt] = hc
    return [res[dt] for dt in dtypes]


_JOBS = {}                                   # what the head jobs read (set before the workers fork)


def _chunk_job(i):
    name, h = _JOBS["index"][i]
    src = _JOBS["x"][name]
    if isinstance(src, LazyTrace):              # a file's layer: a block of heads a read (this process's own)
        lg = _JOBS.setdefault("blocks", HeadBlocks()).head(src, h)
        xh = np.ascontiguousarray(gates.increments_from_log_gates(lg.astype(np.float64)))
    else:
        xh = np.ascontiguousarray(src[:, :, h])
    return analyse_head(xh, name, h, *_JOBS["args"])


def analyse(traces, chunks=CHUNKS, dtypes=DTYPES, risk=RISK, block=BLOCK, cells=CELLS, groups=GROUPS, workers=1,
            on_result=None):
    """Every head of traces {name: (S, T, H) log-gates}: a list of HeadChunks (heads x dtypes).
    Chunk sizes must be multiples of `block` and at most T. workers: processes, one head each at a time (None:
    the available processors); the results do not depend on it. A traces.LazyTrace layer (a file's, from
    open_traces or check_trace_file) is read head by head, a block of heads at a time, never whole.
    on_result(i, per_dtype): called in this process as head i is done (a progress bar)."""
    chunks = _check_chunks(chunks, block)
    if not (0 < risk < 1):
        raise ValueError(f"risk must lie in (0, 1); got {risk}")
    xs, index = {}, []
    for name, lg in traces.items():
        x = lg if isinstance(lg, LazyTrace) else increments(lg)               # a lazy layer: checked per head
        if max(chunks) > x.shape[1]:
            raise ValueError(f"{name}: chunk size {max(chunks)} exceeds the trace length {x.shape[1]}")
        xs[name] = x
        index += [(name, h) for h in range(x.shape[2])]
    _JOBS.update(x=xs, index=index, args=(dtypes, chunks, risk, block, cells, groups))
    try:
        with parallel.stop_signals():
            per_head = parallel.run_jobs(_chunk_job, len(index), parallel.resolve_workers(workers, len(index)),
                                         on_result=on_result)
    finally:
        _JOBS.clear()
    return [hc for hs in per_head for hc in hs]


def recommend(heads, dtypes=DTYPES):
    """Per dtype: the largest chunk that keeps every head under the risk (dependence-aware prediction plus
    two SEs), or re-centring when even the smallest chunk does not:
    {dtype: {"chunk": int or None, "advice": str, "limiting_heads": ["name:head", ...]}}."""
    rec = {}
    for dt in dtypes:
        hs = [h for h in heads if h.dtype == dt]
        if not hs:
            continue
        c = min(h.safe_dep for h in hs)
        lim = [f"{h.name}:{h.head}" for h in hs if h.safe_dep == c]
        rec[dt] = {"chunk": c if c > 0 else None,
                   "advice": (f"chunks of at most {c}" if c > 0 else
                              f"re-centre (no chunk size >= {min(hs[0].chunks)} is safe for every head)"),
                   "limiting_heads": lim}
    return rec


def recommend_per_trace(heads, dtypes=DTYPES):
    """recommend() for each trace name (a layer, or a model family in a file that holds several)."""
    names = list(dict.fromkeys(h.name for h in heads))
    return {n: recommend([h for h in heads if h.name == n], dtypes) for n in names}


# ----------------------------------------------------------------------------- from a gate range alone (kernel authors)

FORMS = ("textbook", "anchored", "recentred")


def softplus(x):
    """log(1 + e^x), float, stable for large |x|."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def decay_range_from_a_log(a_log, dt=None, dt_raw=None, dt_limit=None):
    """The log-gate range [lo, hi] (per token, <= 0) of the Mamba-2 / Gated DeltaNet / KDA parametrisation
    log g = -exp(A_log) * dt, dt = softplus(dt_raw) with dt_raw = raw + dt_bias (fla's gated_deltanet and kda
    layers, fla.ops.kda.gate: g = -exp(A_log) softplus(g + dt_bias)), clamped to dt_limit = (lo, hi) when given
    (Mamba-2's dt_limit / time_step_limit).

    a_log: (lo, hi) range of A_log; dt: (lo, hi) range of dt (after softplus), or dt_raw: (lo, hi) range of the
    softplus argument (one of the two). Returns (lo, hi) with lo = -exp(A_log_hi) dt_hi <= hi = -exp(A_log_lo)
    dt_lo <= 0. Raises ValueError on reversed or non-finite ranges, negative dt, or both / neither of dt, dt_raw.
    """
    def pair(name, r, nonneg=False):
        try:
            lo, hi = (float(v) for v in r)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a (lo, hi) pair; got {r!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise ValueError(f"{name} must be finite with lo <= hi; got ({lo}, {hi})")
        if nonneg and lo < 0:
            raise ValueError(f"{name} must be >= 0 (dt is a softplus); got ({lo}, {hi})")
        return lo, hi

    a_lo, a_hi = pair("A_log range", a_log)
    if (dt is None) == (dt_raw is None):
        raise ValueError("give one of dt (after softplus) and dt_raw (the softplus argument raw + dt_bias)")
    if dt is not None:
        d_lo, d_hi = pair("dt range", dt, nonneg=True)
    else:
        r_lo, r_hi = pair("dt_raw range", dt_raw)
        d_lo, d_hi = softplus(r_lo), softplus(r_hi)
    if dt_limit is not None:
        l_lo, l_hi = pair("dt_limit", dt_limit, nonneg=True)
        d_lo, d_hi = min(max(d_lo, l_lo), l_hi), min(max(d_hi, l_lo), l_hi)
    if a_hi > 88.0:
        raise ValueError(f"A_log up to {a_hi}: exp(A_log) overflows float32 itself")
    return -math.exp(a_hi) * d_hi, -math.exp(a_lo) * d_lo


@dataclass
class RangeSafety:
    """Chunk safety of one dtype from a per-token log-gate range [lo, hi] alone (the worst case).

    theta: exp's overflow limit of the dtype (exp_limits). x_max = -lo, x_min = -hi (nats per token).
    textbook: the largest chunk C with C x_max <= theta (the key factor k exp(+b) of the textbook chunked
        form cannot overflow in any chunk), None when unbounded (x_max = 0); textbook_pow2: the largest power of
        two not above it; always_fails: the smallest C with C x_min > theta (every chunk of that size
        overflows whatever the gates do inside the range), None when no chunk must.
    anchored: the largest chunk when the factors are anchored inside sub-chunks of `sub` tokens at G_0 - shift
        (fla 0.6 KDA's safe_gate path: key factor exp(b - shift), query factor exp(shift - b), b up to
        (sub - 1) x_max within a sub-chunk): the sub-chunk itself is safe when max((sub - 1) x_max - shift,
        shift) <= theta (then any chunk, as the kernel re-centres between sub-chunks): None (any C) or 0 (no
        sub-chunk is safe; anchored_safe False).
    recentred: re-centring (exp(cum_i - cum_j) per pair, exp(cum_last - cum_j) for the state: every exponent
        <= 0) never overflows: any chunk.
    per_token: {C: the largest x_max (nats per token, = theta / C) at which chunks of C are safe, textbook}.
    """
    dtype: str
    theta: float
    lo: float
    hi: float
    x_max: float
    x_min: float
    textbook: int = None
    textbook_pow2: int = None
    always_fails: int = None
    sub: int = 16
    shift: float = 0.0
    anchored: int = None
    anchored_safe: bool = True
    recentred: str = "any chunk (every exponent <= 0: never overflows)"
    per_token: dict = field(default_factory=dict)
    risk_note: str = ("worst case: from a range alone no risk can be stated (it needs the gates' law: give a model's "
                      "gates with --traces and --risk)")


def range_safety(lo, hi, dtypes=DTYPES, chunks=CHUNKS, sub=16, shift=None):
    """RangeSafety per dtype for per-token log-gates in [lo, hi] (lo <= hi <= 0; X = -log g in [-hi, -lo]).

    sub, shift: the anchored form's sub-chunk and shift (nats); shift None: fla 0.6 chunk_kda's, (sub - 1) s / 2
    with s = 2 (its intra kernel's default: chunk_kda does not pass lower_bound on), 15 nats for sub = 16.
    Returns [RangeSafety] in dtypes order. Raises ValueError on a reversed, positive or non-finite range."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or hi > 0:
        raise ValueError(f"a log-gate range needs lo <= hi <= 0 (finite); got [{lo}, {hi}]")
    x_max, x_min = -lo + 0.0, -hi + 0.0
    if shift is None:
        shift = (sub - 1) * 2.0 / 2
    out = []
    for dt in dtypes:
        th = exp_limits(dt).overflow
        rs = RangeSafety(dt, th, lo, hi, x_max, x_min, sub=sub, shift=float(shift))
        if x_max > 0:
            rs.textbook = int(math.floor(th / x_max * (1 + 1e-12)))
            rs.textbook_pow2 = 2 ** int(math.floor(math.log2(rs.textbook))) if rs.textbook >= 1 else 0
        if x_min > 0:
            rs.always_fails = int(math.floor(th / x_min)) + 1
        rs.anchored_safe = max((sub - 1) * x_max - shift, shift) <= th     # key exp(b - shift), query exp(shift - b)
        rs.anchored = None if rs.anchored_safe else 0
        rs.per_token = {int(C): th / C for C in chunks}
        out.append(rs)
    return out


def first_overflow(log_g, chunk, dtype="float32", form="textbook", sub=16, shift=0.0):
    """Per aligned chunk, whether the chunked form's factors overflow the dtype's exp, predicted from the gates:
    log_g (..., T) float (any leading dims; T % chunk == 0). textbook: the chunk's sum S_C > theta;
    anchored: some sub-chunk's b_i - shift > theta, b_i = sum of the sub-chunk's increments after its first
    token; recentred: never. Returns (..., T // chunk) bool."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}; got {form!r}")
    x = -np.asarray(log_g, dtype=np.float64)
    T = x.shape[-1]
    if T % chunk:
        raise ValueError(f"chunk {chunk} does not divide T = {T}")
    th = exp_limits(dtype).overflow
    xc = x.reshape(*x.shape[:-1], T // chunk, chunk)
    if form == "recentred":
        return np.zeros(xc.shape[:-1], bool)
    if form == "textbook":
        # the key factor exp(b_j) of every position: b_j = inclusive cumulative sum; its maximum is the last
        return np.cumsum(xc, -1).max(-1) > th
    if chunk % sub:
        raise ValueError(f"sub-chunk {sub} does not divide the chunk {chunk}")
    xs = xc.reshape(*xc.shape[:-1], chunk // sub, sub)
    b = np.cumsum(xs[..., 1:], -1)                               # G_0 - G_i, i = 1 .. sub - 1
    return (b - shift > th).any(-1).any(-1) | (shift > th)
