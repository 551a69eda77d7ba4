"""Exact (numerical) first passage for Markov-additive walks: a finite-state chain y_t with transition matrix P
and, given y_t = j, an increment X_t drawn from the state's own law (a gates.Gate). Real heads live at short
windows (L/kappa of 1-3 correlation times), where the dependent laws fail; this is their oracle.

  markov_chain_first_passage   any finite chain with per-state gate laws (the model a user fits to a head)
  ar1_passage                  AR(1)-logit gates: the chain of y-cells, each cell's increment law continuous
                               (X given y in the cell), two y grids compared for the state discretisation
  chain_long_run               long-run cumulants of a chain with per-state laws (the dependent laws' inputs)

Method (docs/THEORY.md section 5, "Dependent gates"): the joint mass of (S_n, y_n) on an S grid of spacing h,
each state's increment split between neighbouring grid points in proportion to its distance (mean-preserving),
read at L through the same split (second order in h); Richardson over (h, h/2) and, for AR(1) gates, a second
y grid. The returned error is the sum of the Richardson step, the change between y grids and a bound on the
survival past the last step. Time is bounded: the cost is estimated before the work and refused past
max_seconds, and the walk stops with an error if it runs over.
"""
import ctypes
import glob
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import signal, special
from tqdm import tqdm

from foxwindow.laws import discrete, gates, lattice

__all__ = ["MAX_CELLS", "ChainPassage", "stationary", "markov_chain_first_passage", "ar1_cell_chain", "ar1_passage",
           "chain_long_run"]


class _OneBlasThread:
    """Numpy's OpenBLAS on one thread inside the walk: its matrices are small (M <= a few hundred) and on a loaded
    machine threads cost 10x (measured: 9.7 s against 0.77 s at load 12 on 2 cores). A no-op where the library
    or its symbols are not found; the previous count is restored."""

    def __enter__(self):
        self.lib, self.prev = None, None
        try:
            d = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
            for path in glob.glob(os.path.join(d, "*openblas*")):
                lib = ctypes.CDLL(path)
                if hasattr(lib, "scipy_openblas_set_num_threads64_"):
                    self.lib = lib
                    self.prev = int(lib.scipy_openblas_get_num_threads64_())
                    lib.scipy_openblas_set_num_threads64_(1)
                    break
        except OSError:
            self.lib = None
        return self

    def __exit__(self, *exc):
        if self.lib is not None and self.prev:
            self.lib.scipy_openblas_set_num_threads64_(self.prev)
        return False


_FFT_OFFSETS = 64                # state laws spanning more S cells than this are convolved by FFT
MAX_CELLS = 8_000_000           # S-grid cells x states (f, g and the gather indices: ~64 MB each at the cap)
_FLOPS_PER_SECOND = 2e9         # the refusal estimate (a shared 2-core machine)


@dataclass
class ChainPassage(lattice.WindowLaw):
    """Law of W = N - 1 at one threshold L for a Markov-additive walk.

    mean, var: E[W], Var[W]. mean_err, var_err: estimated absolute errors (the Richardson step in h, plus the
    change between two state grids where the chain discretises a continuous state, plus the truncated tail).
    survival: P(N > n) for n = 0, 1, ... (float64). method: how it was computed.
    """
    L: float
    mean: float
    var: float
    mean_err: float
    var_err: float
    survival: np.ndarray = field(repr=False)
    method: str = ""

    offset = 0                                              # survival[i] = P(W >= i)

    @property
    def eps(self):
        return math.exp(-self.L)


def _tent_cdf(u):
    """CDF at u of a unit tent density on [-1, 1]: how much of a cloud-in-cell mass lies left of u."""
    u = np.clip(u, -1.0, 1.0)
    return np.where(u <= 0, 0.5 * (1 + u) ** 2, 1 - 0.5 * (1 - u) ** 2)


def _check_tol(tol):
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (0.0 < tol <= 1e-6):
        raise ValueError(f"tol (the survival at which the walk stops) must be a number in (0, 1e-6]; got {tol!r}")
    return float(tol)


def _state_pmf(law, h, support):
    """(ka, p): the state's increment split between lattice points k h (mean-preserving), p[i] at ka + i."""
    if isinstance(law, gates.EmpiricalGate):                 # atoms: split each value between its neighbours
        w = getattr(law, "w", None)
        w = np.full(len(law.x), 1.0 / len(law.x)) if w is None else w
        k = np.floor(law.x / h).astype(np.int64)
        th = law.x / h - k
        ka = int(k.min())
        p = np.bincount(k - ka, weights=w * (1 - th), minlength=int(k.max()) - ka + 2)
        p += np.bincount(k - ka + 1, weights=w * th, minlength=len(p))[: len(p)]
        return ka, p / p.sum()
    if isinstance(law, gates.ConstantGate):
        k = int(math.floor(law.m / h))
        th = law.m / h - k
        return k, np.array([1 - th, th])
    ka, p, _ = lattice.hat_pmf(law, h, 2 ** 62, support)
    return ka, p


def _walk(P, pi0, pmfs, h, Ls, tol, nmax, deadline, progress, what):
    """P(S_n <= L) for every L in Ls (nL,), n = 0.. until every one is below tol: (n_steps, nL)."""
    M = len(pi0)
    K = int(math.ceil(max(Ls) / h)) + 2                        # S grid 0, h, .. covers every L
    if K * M > MAX_CELLS:
        raise ValueError(f"{what}: {K} S cells x {M} states exceed the cap {MAX_CELLS} (L/kappa too large "
                         "for this grid)")
    kmin = min(ka for ka, _ in pmfs)
    D = max(ka + len(p) for ka, p in pmfs) - kmin
    width = max(len(p) for _, p in pmfs)
    local = width * 4 <= D                                     # narrow state laws far apart: per-state gather
    if local:
        ka = np.array([k for k, _ in pmfs])
        pm = np.zeros((width, M))                              # pm[d, j] = P(increment = (ka_j + d) h | j)
        for j, (_, p) in enumerate(pmfs):
            pm[: len(p), j] = p
        pad = int(ka.max()) + width + 1
        base = pad + np.arange(K)[:, None] - ka[None, :]       # (K, M) rows of the padded array
    else:
        pm = np.zeros((D, M))                                  # pm[d, j] = P(increment = (kmin + d) h | j)
        for j, (k0, p) in enumerate(pmfs):
            pm[k0 - kmin: k0 - kmin + len(p), j] = p
    read = np.stack([_tent_cdf((L - np.arange(K) * h) / h) for L in Ls])     # (nL, K)
    f = np.zeros((K, M))
    f[0] = pi0
    surv = [np.ones(len(Ls))]
    bar = None
    if progress:
        bar = tqdm(desc=what, unit="step", file=sys.stderr)
    try:
        while surv[-1].max() > tol:
            if len(surv) > nmax:
                raise RuntimeError(f"{what}: survival still {surv[-1].max():.3g} after {nmax} steps")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{what}: past max_seconds after {len(surv) - 1} steps (survival "
                                   f"{surv[-1].max():.3g}); raise max_seconds or use fewer cells")
            g = f @ P                                          # y_n -> y_{n+1}
            new = np.zeros_like(f)
            if local:
                gp = np.concatenate([np.zeros((pad, M)), g])
                for d in range(width):
                    new += pm[d] * np.take_along_axis(gp, base - d, 0)
            elif D > _FFT_OFFSETS and kmin >= 0:               # wide laws: one FFT convolution per state
                c = signal.fftconvolve(g, pm, axes=0)          # c[k] = sum_d pm[d] g[k - d]
                if kmin < K:
                    new[kmin:] = np.maximum(c[: K - kmin], 0.0)     # FFT rounding can dip below 0 by ~1e-17
            done = local or (D > _FFT_OFFSETS and kmin >= 0)
            for d in range(D if done else 0, D):           # S += (kmin + d) h with probability pm[d, y_{n+1}]
                sh = kmin + d
                if sh >= K:
                    break
                if sh >= 0:
                    new[sh:] += g[: K - sh] * pm[d]
                else:
                    new[: K + sh] += g[-sh:] * pm[d]
            f = new
            surv.append(read @ f.sum(axis=1))
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return np.array(surv)


def _moments(s):
    n = np.arange(len(s))[:, None]
    EN = s.sum(axis=0)
    return EN - 1.0, np.sum((2 * n + 1) * s, axis=0) - EN * EN


def _tail_bound(s, tol):
    """Bound on what the survival past the last step adds to E[N] and E[N^2]: s decays at least geometrically
    at the last observed ratio r (checked over the last steps), s_last r / (1 - r) and its 2n + 1 moment."""
    last = s[-1]
    prev = s[-2] if len(s) > 1 else np.ones_like(last)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(prev > 0, last / prev, 0.0)
    r = np.clip(r, 0.0, 0.999)
    n = len(s)
    t1 = last * r / (1 - r)
    t2 = last * ((2 * n + 1) * r / (1 - r) + 2 * r / (1 - r) ** 2)
    return t1, t2


def stationary(P):
    w, v = np.linalg.eig(P.T)
    i = int(np.argmin(np.abs(w - 1.0)))
    pi = np.abs(np.real(v[:, i]))
    return pi / pi.sum()


def _thresholds(eps, L):
    if (eps is None) == (L is None):
        raise ValueError("give exactly one of eps (in (0, 1)) or L (> 0)")
    if eps is not None:
        vals = [eps] if np.ndim(eps) == 0 else list(eps)
        if len(vals) == 0:
            raise ValueError("eps is empty")
        return np.array([gates.threshold(e) for e in vals]), np.ndim(eps) == 0
    vals = [L] if np.ndim(L) == 0 else list(L)
    if len(vals) == 0:
        raise ValueError("L is empty")
    out = []
    for v in vals:
        v = float(v)
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"L must be finite and > 0; got {v}")
        out.append(v)
    return np.array(out), np.ndim(L) == 0


def _check_chain(P, state_laws, pi0):
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 1:
        raise ValueError(f"P must be a square (M, M) transition matrix; got shape {P.shape}")
    if not np.all(np.isfinite(P)) or (P < 0).any() or not np.allclose(P.sum(axis=1), 1.0, atol=1e-12):
        raise ValueError("P must be finite, non-negative, with rows summing to 1")
    if len(state_laws) != P.shape[0]:
        raise ValueError(f"state_laws has {len(state_laws)} laws for {P.shape[0]} states")
    for g in state_laws:
        if not isinstance(g, gates.Gate) or not g.iid:
            raise ValueError(f"each state law must be an iid gates.Gate; got {g!r}")
    pi = stationary(P) if pi0 is None else np.asarray(pi0, dtype=np.float64)
    if pi.shape != (P.shape[0],) or (pi < 0).any() or not math.isclose(pi.sum(), 1.0, abs_tol=1e-9):
        raise ValueError("pi0 must be a probability vector of length M")
    return P, pi


def _has_atoms(g, support):
    if isinstance(g, (gates.EmpiricalGate, gates.ConstantGate)):
        return True
    if getattr(g, "atomless", False):
        return False
    return len(discrete.find_atoms(g.cdf, support[1])[0]) > 0


def _chain_run(P, pi, laws, supports, Ls, cells_per_kappa, tol, nmax, deadline, progress, what):
    """One chain: (s, mean, var, err_mean_h, err_var_h, tail1, tail2). Densities: Richardson over (h, h/2), the
    error its step. State laws with atoms (the split is then not smooth in h): no extrapolation, the finest of
    (h, h/2, h/4) with twice the larger change between them as its error."""
    kappa = float(sum(p * g.moments().kappa for p, g in zip(pi, laws)))
    if not (kappa > 0 and math.isfinite(kappa)):
        raise ValueError(f"{what}: the stationary forget rate kappa = {kappa}; the walk never crosses L")
    h = kappa / cells_per_kappa
    atoms = any(_has_atoms(g, sp) for g, sp in zip(laws, supports))
    out = []
    for hh in ((h, h / 2, h / 4) if atoms else (h, h / 2)):
        pmfs = [_state_pmf(g, hh, sp) for g, sp in zip(laws, supports)]
        out.append(_walk(P, pi, pmfs, hh, Ls, tol, nmax, deadline, progress, what))
    n = max(len(x) for x in out)
    out = [np.pad(x, ((0, n - len(x)), (0, 0))) for x in out]
    if atoms:
        A = [_moments(x) for x in out]
        s = out[-1]
        mean, var = A[-1]
        em = 2 * np.maximum(np.abs(A[1][0] - A[0][0]), np.abs(A[2][0] - A[1][0]))
        ev = 2 * np.maximum(np.abs(A[1][1] - A[0][1]), np.abs(A[2][1] - A[1][1]))
        t1, t2 = _tail_bound(s, tol)
        return s, mean, var, em, ev, t1, t2
    s1, s2 = out
    s = (4 * s2 - s1) / 3
    mean, var = _moments(s)
    mean2, var2 = _moments(s2)
    t1, t2 = _tail_bound(s2, tol)
    return s, mean, var, np.abs(mean - mean2), np.abs(var - var2), t1, t2


def _estimate_seconds(M, Ls, kappa, cells, sd_ratio=10.0):
    K = max(Ls) / kappa * cells
    steps = max(Ls) / kappa + sd_ratio * math.sqrt(max(Ls) / kappa) + 20
    return 3 * steps * K * M * (M + 8) / _FLOPS_PER_SECOND   # h and h/2 (twice the cells, twice the work)


def markov_chain_first_passage(P, state_laws, eps=None, L=None, cells_per_kappa=8, tol=1e-13, pi0=None,
                               max_seconds=120.0, progress=False, nmax=1_000_000):
    """Law of W = N - 1 for a Markov-additive walk: a chain y with transition matrix P (M, M) (row i -> column
    j, rows summing to 1) and, given y_t = j, X_t drawn from state_laws[j] (a gates.Gate with iid increments:
    any law with a CDF, e.g. LogitNormalGate, BetaGate, an EmpiricalGate of a state's increments).

    eps: float or sequence in (0, 1), or L: float or sequence > 0 (exactly one; one walk serves all).
    pi0: the law of y_0 (M,), default the stationary law (then X_1 ~ the stationary mixture).
    cells_per_kappa: S-grid cells per stationary forget rate (h = kappa / cells), int >= 2.
    tol: the walk stops once every P(N > n) is below it, in (0, 1e-6]; the rest is bounded in the error.
    max_seconds: the work is estimated first and refused (ValueError) beyond it, and stopped (RuntimeError)
    if it runs over. progress: a tqdm bar over steps.
    Returns ChainPassage (a list of them for a sequence of thresholds): mean, var, mean_err, var_err,
    survival, quantile(p). The error is the Richardson step over (h, h/2) plus the truncated tail. State laws
    with atoms (EmpiricalGate, ConstantGate, or atoms found in the CDF) are split between lattice points without
    extrapolation: the finest of (h, h/2, h/4), error twice the larger change (an estimate, not a bracket).
    """
    Ls, scalar = _thresholds(eps, L)
    tol = _check_tol(tol)
    if isinstance(cells_per_kappa, bool) or int(cells_per_kappa) != cells_per_kappa or cells_per_kappa < 2:
        raise ValueError(f"cells_per_kappa must be an integer >= 2; got {cells_per_kappa}")
    P, pi = _check_chain(P, state_laws, pi0)
    laws = list(state_laws)
    supports = [(0.0, 0.0) if isinstance(g, (gates.EmpiricalGate, gates.ConstantGate))
                else lattice.cdf_support(g, g.moments()) for g in laws]
    kappa = float(sum(p * g.moments().kappa for p, g in zip(stationary(P), laws)))
    if not (kappa > 0):
        raise ValueError(f"the chain's stationary forget rate kappa = {kappa}: the walk never crosses L")
    if max(Ls) / kappa > nmax:
        raise ValueError(f"expected window L/kappa = {max(Ls) / kappa:.3g} exceeds nmax = {nmax}")
    est = _estimate_seconds(len(pi), Ls, kappa, cells_per_kappa)
    if est > max_seconds:
        raise ValueError(f"estimated {est:.0f} s for {len(pi)} states and L/kappa = {max(Ls) / kappa:.3g} exceeds "
                         f"max_seconds = {max_seconds:g}")
    deadline = time.perf_counter() + max_seconds
    with _OneBlasThread():
        s, mean, var, em, ev, t1, t2 = _chain_run(P, pi, laws, supports, Ls, cells_per_kappa, tol, nmax, deadline,
                                                  progress, "Markov-additive walk")
    res = [ChainPassage(float(Ls[i]), float(mean[i]), max(float(var[i]), 0.0),
                        float(em[i] + t1[i] + 1e-12 * abs(mean[i])),
                        float(ev[i] + t2[i] + 2 * (mean[i] + 1) * t1[i] + 1e-11 * max(abs(var[i]), 1.0)),
                        s[:, i].copy(), f"Markov-additive walk, {len(pi)} states, Richardson over (h, h/2)")
           for i in range(len(Ls))]
    return res[0] if scalar else res


# ----------------------------------------------------------------------------- AR(1)-logit gates


class _CellLaw(gates.Gate):
    """X = softplus(-(mu + s y)) for y in the cell [a, b] with the standard normal density restricted to it:
    a continuous law on [x(b), x(a)] (X decreases in y)."""
    atomless = True

    def __init__(self, mu, s, a, b):
        self.mu, self.s, self.a, self.b = mu, s, a, b
        self.Fa, self.Fb = special.ndtr(a), special.ndtr(b)
        self.name = f"cell[{a:.3g}, {b:.3g}]"

    def support(self):
        return tuple(float(np.logaddexp(0.0, -(self.mu + self.s * y))) for y in (self.b, self.a))

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros_like(x)
        pos = x > 0
        xp = np.minimum(x[pos], 700.0)
        lem = np.where(xp > 30, xp + np.log1p(-np.exp(-xp)), np.log(np.expm1(np.minimum(xp, 30))))
        ystar = (-lem - self.mu) / self.s                      # X <= x  <=>  y >= ystar
        lo = np.clip(ystar, self.a, self.b)
        den = self.Fb - self.Fa
        out[pos] = np.clip((self.Fb - special.ndtr(lo)) / den, 0.0, 1.0) if den > 0 else (ystar <= self.a)
        return out

    def moments(self):
        y = np.linspace(self.a, self.b, 65)
        w = np.exp(-0.5 * y * y)
        w /= w.sum()
        x = np.logaddexp(0.0, -(self.mu + self.s * y))
        return gates.Moments.from_raw(float(w @ x), float(w @ x ** 2), float(w @ x ** 3))


def ar1_cell_chain(gate, dy, ymax=8.0):
    """The AR(1) driver on cells of width dy over [-ymax, ymax]: (P (M, M), pi (M,), laws (M,) of _CellLaw).
    P_ij: the probability that y' lands in cell j from the centre y_i of cell i; pi its stationary law."""
    a = math.sqrt(1.0 - gate.phi ** 2)
    M = 2 * int(math.ceil(ymax / dy)) + 1
    y = np.linspace(-ymax, ymax, M)
    step = y[1] - y[0]
    edges = np.concatenate([[-np.inf], 0.5 * (y[1:] + y[:-1]), [np.inf]])
    # from the node y_i, the exact probability of landing in cell j (the cells cover the line)
    C = special.ndtr((edges[None, :] - gate.phi * y[:, None]) / a)      # (M, M + 1)
    P = np.maximum(np.diff(C, axis=1), 0.0)
    P /= P.sum(axis=1, keepdims=True)
    pi = stationary(P)
    laws = [_CellLaw(gate.mu, gate.s, max(edges[i], -ymax - step), min(edges[i + 1], ymax + step))
            for i in range(M)]
    return P, pi, laws


def ar1_passage(gate, Ls, cells_per_kappa=8, tol=1e-13, nmax=1_000_000, max_seconds=120.0, progress=False):
    """AR(1)-logit first passage at thresholds Ls (nL,): list of ChainPassage.

    Three y grids (dy, dy/2, dy/4; dy = min(0.25, a/2), a = sqrt(1 - phi^2)), each with Richardson over (h, h/2).
    The y-cell error is O(dy^2) (differences between grids shrink 4x: 3.9-4.0 measured), so the grids are
    extrapolated in dy^2 too, on the pairs (1, 2) and (2, 3); where the two differences do not shrink by 2.5-6.5x
    the finest grid is returned instead with twice the larger difference as its error. Error = the finest grid's
    Richardson step in h + |R(2,3) - R(1,2)| + 0.1 |A3 - A2| + the tail bound."""
    tol = _check_tol(tol)
    a = math.sqrt(1.0 - gate.phi ** 2)
    dy = min(0.25, a / 2)
    m = gate.moments()
    if not (m.kappa > 0) or max(Ls) / m.kappa > nmax or not math.isfinite(max(Ls) / m.kappa):
        raise ValueError(f"{gate}: expected window L/kappa = {max(Ls) / m.kappa:.3g} steps exceeds nmax = {nmax}")
    grids = (dy, dy / 2, dy / 4)
    est = sum(_estimate_seconds(2 * int(math.ceil(8.0 / d)) + 1, Ls, m.kappa, cells_per_kappa) for d in grids)
    if est > max_seconds:
        raise ValueError(f"{gate}: estimated {est:.0f} s (up to {2 * int(math.ceil(8.0 / grids[-1])) + 1} y cells, "
                         f"L/kappa = {max(Ls) / m.kappa:.3g}) exceeds max_seconds = {max_seconds:g}")
    deadline = time.perf_counter() + max_seconds
    runs = []
    with _OneBlasThread():
        for d in grids:
            P, pi, laws = ar1_cell_chain(gate, d)
            sup = [lw.support() for lw in laws]
            runs.append(_chain_run(P, pi, laws, sup, np.asarray(Ls, dtype=np.float64), cells_per_kappa, tol, nmax,
                                   deadline, progress, f"AR(1) walk, {len(pi)} y cells"))
    s3, _, _, em, ev, t1, t2 = runs[2]
    out = []
    for i, L in enumerate(Ls):
        vals, errs = [], []
        for k in (1, 2):                                        # mean, var
            A1, A2, A3 = (r[k][i] for r in runs)
            d12, d23 = A2 - A1, A3 - A2
            ratio = d12 / d23 if d23 != 0 else math.inf
            if 2.5 < ratio < 6.5:
                r23, r12 = A3 + d23 / 3, A2 + d12 / 3
                vals.append(r23)
                errs.append(abs(r23 - r12) + 0.1 * abs(d23))
            else:
                vals.append(A3)
                errs.append(2 * max(abs(d12), abs(d23)))
        me = em[i] + errs[0] + t1[i] + 1e-12 * abs(vals[0])
        ve = ev[i] + errs[1] + t2[i] + 2 * (vals[0] + 1) * t1[i] + 1e-11 * max(abs(vals[1]), 1.0)
        # Var[W] >= 0: an extrapolated variance below 0 (a window of near-zero spread) is moved to 0, nearer the truth
        var = max(float(vals[1]), 0.0)
        out.append(ChainPassage(float(L), float(vals[0]), var, float(me), float(ve), s3[:, i].copy(),
                                "AR(1) y cells (three grids, extrapolated in dy^2), Richardson over (h, h/2)"))
    return out


# ----------------------------------------------------------------------------- long-run cumulants


def chain_long_run(P, state_laws, pi=None):
    """Long-run cumulants of X for a stationary chain with per-state laws: returns lattice.LongRun.

    With m_j, v_j, c_j the mean, variance and third central moment of state j's law, X_t = m(y_t) + e_t:
    gamma_k = Cov(m(y_0), m(y_k)) for k >= 1, sigma2 = Var m + E v,
    kappa3_LR = kappa3_LR[m(y)] + 3 LRcov(m, v) + E c, sums over k by the fundamental matrix Z = (I - P + 1 pi)^-1.
    """
    P = np.asarray(P, dtype=np.float64)
    pi = stationary(P) if pi is None else np.asarray(pi, dtype=np.float64)
    mom = [g.moments() for g in state_laws]
    mj = np.array([mm.kappa for mm in mom])
    vj = np.array([mm.sigma2 for mm in mom])
    cj = np.array([mm.mu3 - 3 * mm.kappa * mm.mu2 + 2 * mm.kappa ** 3 for mm in mom])
    kappa = float(pi @ mj)
    md = mj - kappa
    M = len(pi)
    Z = np.linalg.inv(np.eye(M) - P + pi[None, :])
    Pk = Z - np.eye(M)                                       # sum_{k>=1} (P^k - 1 pi) applied to centred vectors

    def tail(v):
        v = v - pi @ v
        return Pk @ v

    # sum_{k>=1} k (P^k - 1 pi) = (Z - I) Z ... on centred vectors: sum k A^k = A (I - A)^-2, A = P - 1 pi
    A = P - pi[None, :]
    Sk = A @ np.linalg.inv(np.eye(M) - A) @ np.linalg.inv(np.eye(M) - A)
    s1 = float(pi @ (md * tail(md)))                         # sum_{k>=1} gamma_k
    sk = float(pi @ (md * (Sk @ md)))                        # sum_{k>=1} k gamma_k
    sigma2 = float(pi @ (md * md) + pi @ vj)
    vd = vj - pi @ vj
    k3m = (pi @ md ** 3 + 3 * (pi @ (md * md * tail(md)) + pi @ (md * tail(md * md)))
           + 6 * pi @ (md * tail(md * tail(md))))
    lrcov = pi @ (md * vd) + pi @ (md * tail(vd)) + pi @ (vd * tail(md))
    k3 = float(k3m + 3 * lrcov + pi @ cj)
    return lattice.LongRun(kappa, sigma2, sigma2 + 2 * s1, (sigma2 + 2 * s1) / sigma2, sk, k3)
