"""The lattice numerics of the exact first passage, shared by laws/exact.py, laws/discrete.py and laws/markov.py.

  FirstPassage            the law of W = N - 1 (survival from n0) with its estimated errors (WindowLaw: the
                          fields and methods every first-passage result shares)
  lattice_passage         an iid law on the lattice + Fourier inversion, Richardson over three resolutions and
                          Chernoff bounds on every truncated tail (AccuracyWarning / AccuracyError when tol is
                          not met); the gamma closed form and the first-step bound first
  constant_passage        X = m: W = floor(L/m) exactly
  cdf_support, hat_pmf    where a law's CDF lives, and its mean-preserving lattice split
  finish, FLOOR           a FirstPassage from a survival array; the relative floor on every error estimate
  LongRun                 long-run cumulants of a stationary increment sequence

Derivations: docs/THEORY.md section 5.
"""
import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import fft as sfft

from foxwindow.laws import gates
from foxwindow.laws.renewal import gamma_band

__all__ = ["MAX_STEPS", "MAX_CELLS", "GAMMA_CLOSED_MAX", "FULL_SURVIVAL", "FLOOR", "AccuracyWarning", "AccuracyError",
           "FirstPassage", "cdf_support", "hat_pmf", "constant_passage", "closed_gamma", "finish", "lattice_passage",
           "LongRun"]

# ----------------------------------------------------------------------------- exact first passage
#
# For X >= 0, N > n iff S_n <= L, so the survival s_n = P(N > n) is the CDF of the n-fold convolution at L.
# X is put on a lattice of spacing h by the mean-preserving ("hat") split: lattice point k receives
# E[(1 - |X/h - k|)_+], so every value x is shared between its two neighbouring points with the lattice mean
# equal to E X exactly (atoms are split the same way). The threshold sits half way between lattice points,
# L = (K + 1/2) h, which makes the discretisation error O(h^2) for smooth densities. h is set by the spread
# of X (h ~ min(sd X, kappa)/c), never by L, and the law of the lattice sum is inverted by Fourier on a
# cyclic band about its mean just wide enough (Chernoff-verified) for its spread: the cost depends on the
# number of cells per sd of X and on the width of the transition range of n, not on L/h.
# Only n in [n_lo, n_hi] are computed; Chernoff bounds on the lattice pmf itself bound what lies outside.

MAX_STEPS = 10 ** 8              # expected windows beyond this raise at once (closed forms excepted)
MAX_CELLS = 2 ** 26              # largest cyclic band (cells) of the lattice sum
GAMMA_CLOSED_MAX = 1e6          # gamma closed form only while n k stays below this: scipy's P(a, x) is within
                                 # 1e-16 of mpmath up to a = 3e5, off ~1e-7 at 6e6 and ~1e-6 at 7e7; beyond
                                 # it the lattice takes the gamma CDF
FULL_SURVIVAL = 1_000_000        # survival arrays start at n = 0 when the transition range starts below this
_DELTA = 1e-30                   # Chernoff target for each neglected tail of the survival and of the band
_DELTA_F = 1e-20                 # |P(omega)|^n below this: the frequency is dropped from the inversion
_C0 = 8                          # cells per min(sd X, kappa) on the coarsest lattice
_MAX_LEVEL = 7                   # finest lattice: _C0 * 2^_MAX_LEVEL cells per sd (densities)
_MAX_LEVEL_ATOMS = 9             # atoms: rounding is exact once h is below the gaps of S_n about L
_ATOM_WORK = 1e7                 # many distinct atoms (> 64): no lattice past this work (band cells x n's),
                                 # about 1 s unloaded for 1e5 trace increments
FLOOR = 1e-11                   # relative floor on the error estimates: residuals up to 3e-12 were measured
                                 # below which differences between resolutions no longer track the error
_GL_U, _GL_W = np.polynomial.legendre.leggauss(12)
_GL_U, _GL_W = (_GL_U + 1) / 2, _GL_W / 2                  # Gauss-Legendre on [0, 1]


class AccuracyWarning(RuntimeWarning):
    """The exact numerics could not meet the requested tolerance; the result carries its achieved error."""


class AccuracyError(RuntimeError):
    """Raised instead of AccuracyWarning when strict=True."""


class WindowLaw:
    """What every first-passage result (FirstPassage, iid; markov.ChainPassage and exact.MarkovPassage, chains)
    offers alike: survival[i] = P(W >= offset + i) (P(W >= n) = 1 below offset), mean and var of W with their
    estimated errors mean_err and var_err, pmf[i] = P(W = offset + i), quantile(p). W = N - 1 throughout.

    The survival is stored as a survival function: in [0, 1] and nonincreasing. Extrapolated and FFT lattices
    leave ripples of about 1e-13 (entries just below 0 or above their predecessor); they are projected away on
    construction by a running minimum, which moves no entry further from a nonincreasing truth than it was,
    and the mass moved is added to mean_err and var_err, so pmf is a probability vector."""

    def __post_init__(self):
        s, e1, e2 = _monotone_survival(self.survival, self.mean + 1.0 - self.offset)
        if e1 > 0.0:
            self.survival = s
            self._widen(e1, e2)

    def _widen(self, e1, e2):
        self.mean_err += e1
        self.var_err += e2

    @property
    def pmf(self):
        """P(W = offset + i), i = 0, 1, ... (the mass left in the survival's last entry, if any, at its end)."""
        s = np.asarray(self.survival, dtype=np.float64)
        if len(s) and s[-1] != 0.0:
            s = np.append(s, 0.0)
        return s[:-1] - s[1:]

    def quantile(self, p):
        """Smallest w with P(W <= w) >= p, p in (0, 1): W's p-quantile (an int)."""
        if not (0.0 < float(p) < 1.0):
            raise ValueError(f"p must lie in (0, 1); got {p}")
        s = np.asarray(self.survival, dtype=np.float64)
        cdf = 1.0 - np.append(s[1:], 0.0)                  # P(W <= offset + i) = 1 - P(W >= offset + i + 1)
        return self.offset + int(np.argmax(cdf >= p))


@dataclass
class FirstPassage(WindowLaw):
    """Law of W = N - 1: survival[i] = P(N > n0 + i) = P(W >= n0 + i); P(N > n) = 1 for n < n0.

    mean, var: E[W], Var[W]; mean_err, var_err: estimated absolute errors (discretisation from the spread of
    three lattice resolutions plus rigorous bounds on every truncated tail); h: the finest lattice spacing
    (0 for closed forms); method: how it was computed.
    """
    gate: str
    eps: float
    survival: np.ndarray
    mean: float
    var: float
    method: str
    mean_err: float = 0.0
    var_err: float = 0.0
    h: float = 0.0
    n0: int = 0

    @property
    def offset(self):
        """The W of pmf[0] and survival[0] (n0)."""
        return self.n0

    @property
    def L(self):
        """The threshold ln(1/eps)."""
        return -math.log(self.eps) if self.eps > 0 else math.inf


def _monotone_survival(s, ebar):
    """(s', e1, e2): s clipped to [0, 1] and made nonincreasing by a running minimum; e1 = sum |s' - s| bounds
    the move of E[W], e2 the move of Var[W] (weights |2i + 1 - 2 ebar|, ebar = E[N - offset], as in
    _bracket_atoms). A nonincreasing s comes back as it is, with e1 = e2 = 0."""
    s = np.asarray(s, dtype=np.float64)
    if len(s) == 0 or (s[0] <= 1.0 and s[-1] >= 0.0 and not np.any(s[1:] > s[:-1])):
        return s, 0.0, 0.0
    t = np.minimum.accumulate(np.clip(s, 0.0, 1.0))
    d = np.abs(t - s)
    e1 = float(d.sum())
    e2 = float(np.sum(np.abs(2 * np.arange(len(s)) + 1 - 2 * ebar) * d)) + e1 * e1
    return t, e1, e2


def _moments_from_survival(s, n0=0):
    """(E[W], Var[W]) from s[i] = P(N > n0 + i), s = 1 below n0. Moments of N - n0 avoid the cancellation
    in sum (2n + 1) s_n - E[N]^2 when E[N] >> sd(N)."""
    i = np.arange(len(s))
    e1 = float(s.sum())                                    # E[N - n0]
    e2 = float(np.sum((2 * i + 1) * s))                    # E[(N - n0)^2]
    return n0 + e1 - 1.0, e2 - e1 * e1


def cdf_support(gate, m):
    """(x_lo, x_hi): F(x_lo) <= _DELTA and F(x_hi) rounds to 1 (then half as far again)."""
    sd = math.sqrt(m.sigma2)
    lo, hi = 0.0, m.kappa
    if gate.cdf(np.array([0.0]))[0] > _DELTA or float(gate.cdf(np.array([hi]))[0]) <= _DELTA:
        x_lo = 0.0
    else:
        for _ in range(80):                                # largest x with F(x) <= _DELTA, to 1e-24 of kappa
            mid = 0.5 * (lo + hi)
            if float(gate.cdf(np.array([mid]))[0]) <= _DELTA:
                lo = mid
            else:
                hi = mid
        x_lo = lo
    # steps from sd X, growing 1.5x: a floor of 1e-3 kappa put ~1e7 cells past the support of a narrow law
    x_hi, step = m.kappa + 8 * sd, (sd if sd > 0 else 1e-3 * m.kappa)
    for _ in range(200):
        if float(gate.cdf(np.array([x_hi]))[0]) >= 1.0:
            break
        x_hi += step
        step *= 1.5
    else:
        raise ValueError(f"{gate}: the CDF of X does not reach 1 below x = {x_hi:.3g}")
    return x_lo, x_hi + 0.5 * (x_hi - m.kappa)


def hat_pmf(gate, h, K, support):
    """Lattice law of X: (k_a, p) with p[i] = E[(1 - |X/h - (k_a + i)|)_+], i.e. each x split between its two
    neighbouring lattice points in proportion to its distance (mean-preserving). Points above K never enter
    P(S_n <= L) and are dropped (the walk has crossed), so p may sum to less than 1."""
    if isinstance(gate, gates.EmpiricalGate):
        # atoms go to their nearest lattice point: |sum of n rounded atoms - S_n| <= n h / 2, so s_n is exact
        # once no value of S_n lies within n h / 2 of L (a split would smear atoms across L at every h)
        k = np.rint(gate.x / h).astype(np.int64)
        ka = int(k[0])
        w = getattr(gate, "w", None)
        p = np.bincount(k - ka, weights=w).astype(np.float64) / (1.0 if w is not None else len(k))
    else:
        x_lo, x_hi = support
        ka = max(int(math.floor(x_lo / h)) - 1, 0)
        kb = int(math.ceil(x_hi / h)) + 1
        # points above K are dropped below: past K + 1 the CDF is not needed, and for L far below the spread of
        # X (eps near 1) the support would otherwise be millions of cells of width ~L
        capped = kb > K + 1
        kb = min(kb, max(K + 1, ka))
        if kb - ka > MAX_CELLS:
            raise ValueError(f"{gate}: {kb - ka} lattice cells for one increment exceed the cap {MAX_CELLS}")
        kk = np.arange(ka - 1, kb + 1, dtype=np.float64)   # I_k = int_0^1 F((k + u) h) du, k = ka-1..kb
        Ic = gate.cdf((kk[:, None] + _GL_U[None, :]) * h) @ _GL_W
        Ic[kk < 0] = 0.0
        if ka == 0:                                        # I_0: F may be singular at 0 (F ~ x^a); u = v^4
            v = _GL_U
            Ic[1] = float(gate.cdf(v ** 4 * h) @ (_GL_W * 4 * v ** 3))
        p = np.diff(Ic)                                     # (kb - ka + 1,) points ka..kb
    p = np.maximum(p, 0.0)                                 # rounding in differences of F near 1
    if not isinstance(gate, gates.EmpiricalGate) and capped:
        p = p[: max(K - ka + 1, 0)]                        # points ka..K; the rest of the mass has crossed L
        return ka, p, max(1.0 - math.fsum(p), 0.0)
    # the mass beyond x_hi (F rounds to 1 there) is below rounding: normalise, so that the lattice law's total
    # is 1 exactly and P(0)^n = 1 (a mass off by 1e-16 would scale every s_n by 1 + n 1e-16)
    p = p / math.fsum(p)
    dropped = 0.0
    if ka + len(p) - 1 > K:
        dropped = math.fsum(p[max(K - ka + 1, 0):])
        p = p[: max(K - ka + 1, 0)]
    return ka, p, dropped


class _Lattice:
    """One lattice resolution: the pmf of the centred lattice increment J = k - k0 and its Chernoff bounds."""

    def __init__(self, gate, L, h_target, support):
        self.K = max(int(round(L / h_target - 0.5)), 0)
        self.h = L / (self.K + 0.5)
        ka, p, self.dropped = hat_pmf(gate, self.h, self.K, support)
        if len(p) == 0 or p.sum() <= 0:
            raise ValueError(f"{gate}: no lattice mass below L")
        mass = 1.0 - self.dropped                          # exactly; p itself sums to it up to rounding
        mu = float(np.dot(np.arange(ka, ka + len(p)), p) / mass)
        self.k0 = int(round(mu))
        self.j = np.arange(ka, ka + len(p)) - self.k0      # centred lattice values
        self.p = p
        self.mass = float(mass)
        self.mu_j = float(np.dot(self.j, p) / mass)
        self.sd_j = math.sqrt(max(float(np.dot((self.j - self.mu_j) ** 2, p) / mass), 1e-300))
        nz = p > 0
        self._lp, self._jj = np.log(p[nz]), self.j[nz].astype(np.float64)

    def _lam(self, th):
        """log E[e^{th J}] over the (sub-)pmf, and its first two derivatives."""
        a = self._lp + th * self._jj
        amax = a.max()
        e = np.exp(a - amax)
        se = e.sum()
        d1 = float(np.dot(e, self._jj) / se)
        d2 = float(np.dot(e, (self._jj - d1) ** 2) / se)
        return amax + math.log(se), d1, d2

    def tail(self, n, a, upper):
        """Chernoff: upper -> bound on P(J_n >= a), else on P(J_n <= a), min over theta > 0 of
        exp(n Lam(+-theta) -+ theta a); returns (bound, theta). Safeguarded Newton on the convex exponent."""
        sgn = 1.0 if upper else -1.0
        if sgn * (a - n * self.mu_j) <= 0:
            return 1.0, 0.0
        lo, hi = 0.0, math.inf
        th = min(abs(a - n * self.mu_j) / (n * self.sd_j ** 2), 50.0 / self.sd_j)   # Gaussian guess
        best, best_th = 0.0, 0.0
        for _ in range(100):
            lam, d1, d2 = self._lam(sgn * th)
            f = n * lam - sgn * th * a                    # exponent at theta
            if f < best:
                best, best_th = f, th
            g = sgn * n * d1 - sgn * a                    # d f / d theta (increasing in theta)
            if best < math.log(_DELTA) - 40 or abs(g) <= 1e-9 * abs(a) + 1e-12:
                break
            if g < 0:
                lo = th
            else:
                hi = th
            step = th - g / (n * d2) if d2 > 0 else math.inf
            if not (lo < step < hi):                     # Newton left the bracket: bisect (or expand)
                step = 2 * th if hi == math.inf else 0.5 * (lo + hi)
            if hi - lo < 1e-12 * max(th, 1e-300):
                break
            th = step
        return math.exp(best), best_th

    def s_bound(self, n, upper):
        """Chernoff bound on 1 - s_n (upper) or on s_n (lower), s_n = P(J_n <= K - n k0). 1 - s_n also holds
        the mass of the n steps that jump past K at once (dropped from the lattice pmf)."""
        a = self.K - n * self.k0
        return n * self.dropped + self.tail(n, a + 1, True)[0] if upper else self.tail(n, a, False)[0]


def _transition_range(lat, n_guess, sd_guess, hint=None):
    """n_lo, n_hi: the largest n with 1 - s_n <= _DELTA and the smallest with s_n <= _DELTA (Chernoff on the
    lattice pmf; 1 - s_n increases and s_n decreases with n since the lattice increment is >= 0).
    hint: (n_lo, n_hi) of another resolution, taken as they are where the bounds hold there (any n_lo below the
    largest and n_hi above the smallest are valid, only a little wider), searched for otherwise."""
    if hint is not None:
        lo, hi = hint
        if (lo == 0 or lat.s_bound(lo, True) <= _DELTA) and lat.s_bound(hi, False) <= _DELTA:
            return lo, hi
    step = max(1, int(sd_guess))
    n_lo = max(int(n_guess - 13 * sd_guess) - 2, 0)
    while n_lo > 0 and lat.s_bound(n_lo, True) > _DELTA:
        n_lo = max(n_lo - 2 * step, 0)
    top = max(int(n_guess), n_lo)                          # bisect up: largest n with the bound met
    while top - n_lo > 1:
        mid = (n_lo + top) // 2
        if mid > 0 and lat.s_bound(mid, True) <= _DELTA:
            n_lo = mid
        else:
            top = mid
    n_hi = int(n_guess + 13 * sd_guess) + 3
    while lat.s_bound(n_hi, False) > _DELTA:
        n_hi += 2 * step
        if n_hi > MAX_STEPS:
            raise ValueError(f"survival above {_DELTA:g} beyond {MAX_STEPS} steps")
    bot = min(int(n_guess) + 1, n_hi)                      # bisect down: smallest n with the bound met
    while n_hi - bot > 1:
        mid = (bot + n_hi) // 2
        if lat.s_bound(mid, False) <= _DELTA:
            n_hi = mid
        else:
            bot = mid
    return n_lo, n_hi


def _tail_error(lat, n_lo, n_hi):
    """Rigorous bounds on the moment errors from setting s_n = 1 below n_lo and s_n = 0 above n_hi."""
    b_lo = lat.s_bound(n_lo, True) if n_lo > 0 else 0.0
    a = lat.K - n_hi * lat.k0
    b_hi, th = lat.tail(n_hi, a, False)
    # s_n <= b_hi r^(n - n_hi) for n >= n_hi with r = E[e^{-th (J + k0)}] < 1 at the same theta
    r = math.exp(lat._lam(-th)[0] - th * lat.k0) if th > 0 else 1.0
    if r >= 1.0:
        tail1 = tail2 = math.inf if b_hi > 0 else 0.0
    else:
        d = n_hi - n_lo
        tail1 = b_hi / (1 - r)
        tail2 = b_hi * ((2 * d + 1) / (1 - r) + 2 * r / (1 - r) ** 2)
    return n_lo * b_lo + tail1, n_lo ** 2 * b_lo + tail2


def _band(lat, n_lo, n_hi):
    """Cyclic band size M for J_n, n in [n_lo, n_hi]: mass of J_n beyond M/2 of its mean below _DELTA."""
    n1 = max(n_lo, 1)
    width = int(lat.j[-1] - lat.j[0]) + 1
    M = sfft.next_fast_len(2 * int(14 * math.sqrt(n_hi) * lat.sd_j + 2 * width) + 64)
    while True:
        if M > MAX_CELLS:
            raise ValueError(f"the lattice sum needs a band of {M} cells, above the cap {MAX_CELLS}")
        bad = 0.0
        for n in (n1, n_hi):
            c = int(round(n * lat.mu_j))
            bad = max(bad, lat.tail(n, c - M // 2 + M, True)[0] + lat.tail(n, c - M // 2 - 1, False)[0])
        if bad <= _DELTA:
            return M, bad
        M = sfft.next_fast_len(2 * M)


def _log_char(lat, M, om):
    """log E[e^{-2 pi i om J / M}] for integer frequencies om, from 1 + z with z computed without cancellation."""
    jm = np.mod(np.outer(om, lat.j), M)                      # (F, w) exact phases
    th = (2 * math.pi / M) * jm
    re = -2.0 * (np.sin(0.5 * th) ** 2) @ lat.p - lat.dropped
    im = -(np.sin(th) @ lat.p)
    with np.errstate(divide="ignore"):
        lr = 0.5 * np.log1p(2 * re + re * re + im * im)
    return lr + 1j * np.arctan2(im, 1.0 + re)


_ROUND = 8 * float(np.finfo(float).eps)   # the rounding of a sum of terms, relative to the sum of their sizes


def _survival_band(lat, n_lo, n_hi, shift=None):
    """s_n = P(J_n <= K - n k0 + shift(n)) for n = n_lo..n_hi by Fourier inversion on a cyclic band;
    returns (s, alias bound). shift: None or a function of the int64 array n (a threshold moved by cells)."""
    M, alias = _band(lat, n_lo, n_hi)
    q = np.zeros(M)
    np.add.at(q, np.mod(lat.j, M), lat.p)
    P = sfft.rfft(q)                                       # (M//2 + 1,)
    absP = np.abs(P)
    ns = np.arange(n_lo, n_hi + 1)
    s = np.empty(len(ns))
    rnd = np.zeros(len(ns))                                # rounding: a few ulps of the sum of |terms|
    wt = np.full(len(P), 2.0)
    wt[0] = 1.0
    if M % 2 == 0:
        wt[-1] = 1.0
    n1 = max(int(ns[0]), 1)
    with np.errstate(divide="ignore"):
        lab = np.log(np.maximum(absP, 1e-320))
    keep_all = np.nonzero(n1 * lab > math.log(_DELTA_F))[0]
    # FFT values carry ~1e-16 absolute error in log P, which the power n multiplies: beyond n ~ 1e3 the kept
    # frequencies (few there) are recomputed from the pmf without cancellation
    if n_hi > 1000 and len(keep_all) * len(lat.j) <= 8_000_000:
        lP_all = _log_char(lat, M, keep_all.astype(np.int64))
    else:
        lP_all = np.log(P[keep_all].astype(np.complex128))
        if len(keep_all) and keep_all[0] == 0:
            lP_all[0] = math.log1p(-lat.dropped)           # total mass, exactly
    roots = np.exp(1j * ((2 * math.pi / M) * np.arange(M)))     # (M,) e^{2 pi i t / M}
    # the kept frequencies by |P| from the largest: those that a larger n keeps are then a prefix (slices, not
    # a gather of every array at every chunk)
    order = np.argsort(-lab[keep_all], kind="stable")
    keep_all, lP_all = keep_all[order], lP_all[order]
    lab_all, den_all, wt_all = lab[keep_all], 1.0 - roots[keep_all], wt[keep_all]   # den: (F,) 1 - e^{i th}
    c0 = 0
    if n_lo == 0:
        s[0], c0 = 1.0, 1                                  # S_0 = 0 <= L
    while c0 < len(ns):
        chunk = max(4, min(256, int(ns[c0]) // 4))         # few n per chunk while small n keep many frequencies
        nn = ns[c0: c0 + chunk]
        k = int(np.count_nonzero(max(int(nn[0]), 1) * lab_all > math.log(_DELTA_F)))
        keep, lP, den, w = keep_all[:k], lP_all[:k], den_all[:k], wt_all[:k]
        om = keep.astype(np.int64)
        zero = np.flatnonzero(om == 0)
        for i0 in range(0, len(nn), max(1, 2_000_000 // max(len(om), 1))):
            n = nn[i0: i0 + max(1, 2_000_000 // max(len(om), 1))]
            c = np.rint(n * lat.mu_j).astype(np.int64)
            lo = c - M // 2
            a = lat.K - n * lat.k0 + (0 if shift is None else shift(n))     # P(J_n <= a)
            cnt = np.minimum(np.maximum(a - lo + 1, 0), M)  # cells at or below a (np.clip: 10x slower here)
            # sum_{t = lo}^{lo + cnt - 1} e^{i th t} = e^{i th lo} (1 - e^{i th cnt}) / (1 - e^{i th})
            # e^{i th t} for integer t is a root of unity: read from the table, not recomputed per (n, omega)
            with np.errstate(divide="ignore", invalid="ignore"):
                G = roots[(lo[:, None] * om) % M] * (1.0 - roots[(cnt[:, None] * om) % M]) / den
            G[:, zero] = cnt[:, None]
            T = np.exp(n.astype(np.float64)[:, None] * lP[None, :]) * G
            # weighted row sums by einsum, not @: a matrix-vector product of a few rows and 5e3+ columns went to
            # the BLAS's threads and took 7-16 ms on a busy 2-core machine, against 0.05-0.09 ms here
            s[c0 + i0: c0 + i0 + len(n)] = np.einsum("ij,j->i", T.real, w) / M
            rnd[c0 + i0: c0 + i0 + len(n)] = _ROUND * np.einsum("ij,j->i", np.abs(T), w) / M
        c0 += len(nn)
    # each dropped frequency adds at most |P|^n |G| / M <= _DELTA_F / (M sin(pi om / M)); summed: (2 + ln M)
    return s, alias + _DELTA_F * (2 + math.log(M)) + rnd


def constant_passage(gate, eps, L, m):
    """X = m with probability 1: W = floor(L/m) exactly (computed in exact rationals, no survival array beyond
    FULL_SURVIVAL steps: then survival = [P(N > w), P(N > w + 1)] = [1, 0] from n0 = w)."""
    w = int(Fraction(float(L)) // Fraction(float(m)))      # alibi_window's floor, at the L the caller gave
    return finish(gate, eps, np.array([1.0, 0.0]), w, float(w), 0.0, "closed form (lattice)")


def _level(gate, L, m, lv, support):
    h_target = min(math.sqrt(m.sigma2), m.kappa, L) / (_C0 * 2 ** lv)
    return _Lattice(gate, L, h_target, support)


def _combine(levels, surv, n_lo, smooth):
    """Combine the three finest lattice results into (s, mean, var, mean_err, var_err, label).

    smooth: Richardson in h^2 on the pairs (1, 2) and (2, 3); the result is the (2, 3) value and its error the
    distance to the (1, 2) value (an overestimate when the residual is of order > 2 in h). Otherwise (atoms)
    no extrapolation: the finest result, its error from the order p estimated on the three resolutions,
    |A3 - A2| / (2^p - 1), doubled; where the three do not converge geometrically, twice the larger step."""
    (h1, h2, h3), (s1, s2, s3) = [lat.h for lat in levels[-3:]], surv[-3:]
    if smooth:
        def rich(ha, sa, hb, sb):
            return (ha * ha * sb - hb * hb * sa) / (ha * ha - hb * hb)
        s, s_prev = rich(h2, s2, h3, s3), rich(h1, s1, h2, s2)
        mean, var = _moments_from_survival(s, n_lo)
        mp, vp = _moments_from_survival(s_prev, n_lo)
        return s, mean, var, abs(mean - mp), abs(var - vp), "Richardson"
    A = [_moments_from_survival(x, n_lo) for x in (s1, s2, s3)]
    errs = []
    for i in range(2):
        d12, d23 = A[0][i] - A[1][i], A[1][i] - A[2][i]
        r = d12 / d23 if d23 != 0 else math.inf
        errs.append(2 * abs(d23) / (r - 1) if 1.5 < r < math.inf else 2 * max(abs(d12), abs(d23)))
    return s3, A[2][0], A[2][1], errs[0], errs[1], "no extrapolation"


def _bracket_atoms(lat, s, n_lo, n_hi):
    """Atoms rounded to the nearest lattice point move S_n by at most n h / 2, so
    P(J_n <= a_n + floor((1 - n)/2)) <= s_n(exact) <= P(J_n <= a_n + floor((1 + n)/2)): a rigorous bracket.
    Returns the rounded-lattice s with errors from the bracket (exact once no value of S_n is that close to L)."""
    lo, _ = _survival_band(lat, n_lo, n_hi, shift=lambda n: (1 - n) // 2)
    up, _ = _survival_band(lat, n_lo, n_hi, shift=lambda n: (1 + n) // 2)
    wid = np.maximum(np.maximum(up - s, s - lo), 0.0)
    mean, var = _moments_from_survival(s, n_lo)
    i = np.arange(len(s))
    e1 = float(wid.sum())
    ebar = mean + 1.0 - n_lo                               # E[N - n_lo]
    # Var = E2 - E1^2 moves by sum (2i + 1 - 2 E1) d_i - (sum d_i)^2 for survival errors d_i: centred weights
    e2 = float(np.sum(np.abs(2 * i + 1 - 2 * ebar) * wid))
    return s, mean, var, e1, e2 + e1 * e1, "atoms at nearest points, bracketed"


def closed_gamma(gate):
    """(k, theta) when the gate's X is gamma (GammaIncrement; BetaGate(a, 1) is exponential), else None."""
    if isinstance(gate, gates.GammaIncrement):
        return gate.k, gate.theta
    if isinstance(gate, gates.BetaGate) and gate.b == 1.0:
        return 1.0, 1.0 / gate.a
    return None


def finish(gate, eps, s, n_lo, mean, var, method, mean_err=0.0, var_err=0.0, h=0.0):
    if s[-1] != 0.0:
        s = np.concatenate([s, [0.0]])                     # s_n <= _DELTA past the range: P(W = n_hi) holds it
    n0 = n_lo
    if n_lo <= FULL_SURVIVAL:
        s, n0 = np.concatenate([np.ones(n_lo), s]), 0
    return FirstPassage(str(gate), eps, s, float(mean), float(var), method, float(mean_err), float(var_err),
                        float(h), int(n0))


def _first_step_passage(gate, eps, L, tol, var_tol):
    """W = 0 when the walk crosses L at its first step up to a bound within tol: X >= 0 gives
    P(S_n <= L) <= q^n, q = F(L), so 0 <= E[W] <= q/(1-q) and 0 <= E[W^2] <= q(1+q)/(1-q)^2. This is the regime
    of eps near 1 (L far below the spread of X), where a lattice would need cells of width ~L. None otherwise."""
    q = float(gate.cdf(np.array([L]))[0])
    if not 0.0 <= q < 0.5:
        return None
    mean_err, var_err = q / (1 - q), q * (1 + q) / (1 - q) ** 2
    if mean_err > tol or var_err > var_tol:
        return None
    return finish(gate, eps, np.array([0.0]), 0, 0.0, 0.0, "first step (W = 0 up to F(L))", mean_err, var_err)


def lattice_passage(gate, eps, L, m, tol=1e-8, strict=False, richardson=True, var_tol=None):
    """The law of W for an iid gate without atoms to sum exactly (laws/exact.py's exact_first_passage validates
    and routes here; laws/discrete.py's atom routes hand their continuous or many-atom parts here): the first-step
    bound, the gamma closed form, else the lattice + Fourier inversion refined until tol is met. m: the gate's
    moments; eps and L: the threshold (both given). Returns FirstPassage."""
    var_tol = tol if var_tol is None else var_tol
    if isinstance(gate, gates.ConstantGate):
        return constant_passage(gate, eps, L, gate.m)
    if m.sigma2 <= 0:
        return constant_passage(gate, eps, L, m.kappa)
    fp = _first_step_passage(gate, eps, L, tol, var_tol)
    if fp is not None:
        return fp
    n_exp = L / m.kappa
    sd_guess = math.sqrt(m.sigma2 * L / m.kappa ** 3)
    if n_exp > MAX_STEPS:
        raise ValueError(f"{gate}: expected window L/kappa = {n_exp:.3g} steps at eps = {eps:g} exceeds the cap "
                         f"of {MAX_STEPS:g} steps")
    kt = closed_gamma(gate)
    if kt is not None and (n_exp + 20 * sd_guess + 10) * kt[0] <= GAMMA_CLOSED_MAX:
        n_lo, s = gamma_band(*kt, L)
        mean, var = _moments_from_survival(s, n_lo)
        # scipy's incomplete gamma is accurate to ~1e-16 for n k <= 3e5 (mpmath); the moments carry the floor
        return finish(gate, eps, s, n_lo, mean, var, "closed form", FLOOR * abs(mean), FLOOR * max(abs(var), 1))
    support = (0.0, 0.0) if isinstance(gate, gates.EmpiricalGate) else cdf_support(gate, m)
    sd_n = math.sqrt(m.sigma2 * L / m.kappa ** 3) + 1.0
    smooth = bool(gate.smooth) and richardson
    atoms = isinstance(gate, gates.EmpiricalGate)
    n_distinct = len(np.unique(gate.x)) if atoms else 0
    levels = [_level(gate, L, m, lv, support) for lv in range(1 if atoms else 3)]
    done = {}                                              # id(lattice) -> its range, and its band per range
    while True:
        use = levels[-1:] if atoms else levels[-3:]
        hint = None
        for lat in use:
            if id(lat) not in done:
                done[id(lat)] = [_transition_range(lat, n_exp, sd_n, hint), {}]
            hint = done[id(lat)][0]
        n_lo, n_hi = min(done[id(lat)][0][0] for lat in use), max(done[id(lat)][0][1] for lat in use)
        if atoms:                                          # room for the bracket's thresholds L -+ n h / 2
            pad = int(n_hi * levels[-1].h / (2 * m.kappa)) + 2
            n_lo, n_hi = max(n_lo - pad, 0), n_hi + pad
        surv, bounds = [], []
        span = n_hi - n_lo + 1
        for lat in use:
            bands = done[id(lat)][1]
            if (n_lo, n_hi) not in bands:                  # each lattice's band once per range
                bands[(n_lo, n_hi)] = _survival_band(lat, n_lo, n_hi), _tail_error(lat, n_lo, n_hi)
            (sb, alias), (t1, t2) = bands[(n_lo, n_hi)]
            # per-n bounds (aliasing, dropped frequencies, rounding) into the moments of N - n_lo; x 2 for the
            # Richardson weights (4/3 and 1/3 on two levels)
            i = np.arange(span)
            e1 = 2 * float(alias.sum())
            bounds.append((t1 + e1, t2 + 2 * float(np.dot(2 * i + 1, alias)) + 2 * float(sb.sum()) * e1))
            surv.append(sb)
        if atoms:
            s, mean, var, mean_err, var_err, label = _bracket_atoms(levels[-1], surv[0], n_lo, n_hi)
        else:
            s, mean, var, mean_err, var_err, label = _combine(levels, surv, n_lo, smooth)
        # rounding: each s_n is a sum of O(1) terms (~1e-14); a rise in s_n beyond that is counted as error
        # a rise of s_n (it cannot rise) beyond the bounds above is counted as error too
        rnd = max(float(np.max(np.diff(s))) if len(s) > 1 else 0.0, 0.0)
        mean_err += max(b[0] for b in bounds) + rnd * span + FLOOR * abs(mean)
        var_err += max(b[1] for b in bounds) + rnd * span * span + FLOOR * max(abs(var), 1.0)
        ok = mean_err <= tol * max(abs(mean), 1.0) and var_err <= var_tol * max(abs(var), 1.0)
        top = _MAX_LEVEL_ATOMS if atoms else _MAX_LEVEL
        if ok or len(levels) > top:
            break
        lat = levels[-1]
        band = 14 * math.sqrt(n_hi) * lat.sd_j + 2 * (lat.j[-1] - lat.j[0])      # cells of the cyclic band
        if atoms and n_distinct > 64 and 2 * band * (n_hi - n_lo + 1) > _ATOM_WORK:
            # many distinct atoms: the bracket narrows only as O(h) and each lattice costs about twice the last
            # (cells per sd of the band x n's); a fixed work cap, not a clock, so results do not depend on load
            break
        try:
            levels.append(_level(gate, L, m, len(levels), support))
        except ValueError:                                 # the next lattice would pass the cell cap
            break
    method = f"lattice h={levels[-1].h:.3g} ({len(levels)} levels), {label}"
    problems = []
    if var < -var_err:
        problems.append(f"negative variance {var:.3g}")
    if s[-1] > 1e-9 or s.min() < -1e-9 or s.max() > 1 + 1e-9:
        problems.append(f"survival leaves [0, 1] or does not reach 0 (range {s.min():.3g}..{s.max():.3g}, "
                        f"last {s[-1]:.3g})")
    if not ok or problems:
        tols = f"{tol:g}" if var_tol == tol else f"{tol:g}, Var[W] {var_tol:g}"
        msg = (f"{gate} at eps = {eps:g}: exact numerics reached |err E[W]| <= {mean_err:.2g}, "
               f"|err Var[W]| <= {var_err:.2g} (tol {tols} relative)"
               f"{'; ' if problems else ''}{'; '.join(problems)}")
        if strict:
            raise AccuracyError(msg)
        warnings.warn(msg, AccuracyWarning, stacklevel=3)
    return finish(gate, eps, s, n_lo, mean, max(var, 0.0), method, mean_err, var_err, levels[-1].h)




@dataclass
class LongRun:
    """Long-run cumulants of a stationary increment sequence (from the law, not from samples)."""
    kappa: float            # E X
    sigma2: float           # Var X
    sigma2_lr: float        # sum_k gamma_k over all k = sigma2 tau
    tau: float              # 1 + 2 sum_{k>=1} rho_k
    sum_k_gamma_k: float    # sum_{k>=1} k gamma_k
    kappa3_lr: float        # lim E[(S_n - n kappa)^3] / n
