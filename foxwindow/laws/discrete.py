"""Exact first passage for increment laws with atoms: finite discrete laws and an atom at X = 0.

Real gates produce atoms: a trace's empirical law (EmpiricalGate) is discrete, and gates that saturate at 1
put an atom at X = 0. The lattice numerics of exact.py assume a density (Richardson in h^2) or bracket atoms to
O(h); here atoms are handled by exact sums instead (docs/THEORY.md section 5, "Atoms"):

  atom at 0       X = 0 with probability q, else Y > 0: the walk waits a Geometric(1 - q) number of steps
                  for each step of the Y-walk, so N = G_1 + ... + G_{N_Y} and
                  E[N] = E[N_Y]/(1 - q),  Var[N] = Var[N_Y]/(1 - q)^2 + q E[N_Y]/(1 - q)^2,
                  P(N > n) = E[P(N_Y > B_n)],  B_n ~ Binomial(n, 1 - q)                        (exact)
  one value v     N_Y = floor(L/v) + 1                                                          (exact)
  k values        P(S_n <= L) as a sum over the counts of the first k - 2 values (conditional binomials)
                  of a binomial tail for the last two: exact up to states below 1e-40 (their mass is
                  counted as error); two values need no sum, three one sum per n (up to MAX_VALUES = 4)
  a common step   values that are integer multiples of one step g (as exact rationals, L / g <= MAX_CELLS):
                  the integer walk on 0..floor(L/g), k shifted adds a step (step_survival, exact to rounding)
  no common step  up to 64 values: each rounded to a multiple of h, S_n bracketed by n times the spread of the
                  roundings; the midpoint, with half the bracket as its error (bracket_survival, polynomial:
                  k L/h operations a step, h as fine as MAX_WORK allows)

  find_atoms       atoms of a law known only through its CDF (jumps that survive bisection to one ulp)
  DiscreteLaw      values, probabilities and the atom at 0 of a discrete law
  passage          (n0, s, mean, var, mean_err, var_err) of W = N - 1 for a DiscreteLaw

Boundary ties (a sum of atoms equal to L in floating point) are decided in exact rationals of the floats.
"""
import math
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import stats

from foxwindow.laws import gates, lattice

__all__ = ["MAX_VALUES", "MAX_STATES", "MAX_WORK", "ATOM_MIN", "MAX_CELLS",
           "MAX_STEP_VALUES", "MAX_BRACKET_VALUES", "TooLarge", "DiscreteLaw", "find_atoms", "count_survival",
           "step_survival", "bracket_survival",
           "common_step", "passage", "compound", "AtomGate", "atomic_passage"]

_DELTA = 1e-30                  # survival within this of 1 (below n_lo) or 0 (above n_hi) is not computed
_PRUNE = 1e-40                  # count states below this probability are dropped, their mass counted as error
_ULP_ERR = 4e-15                # absolute rounding allowed per s_n (binomial tails from scipy/boost)
MAX_VALUES = 4                  # more distinct positive values: the enumeration is refused (TooLarge)
MAX_STATES = 2_000_000          # count states per n (all n together: MAX_WORK) before the enumeration is refused
MAX_WORK = 200_000_000
ATOM_MIN = 1e-10                # a jump of the CDF below this over one ulp is not an atom
MAX_CELLS = 1 << 20             # values on a common step: at most this many lattice points below L
MAX_STEP_VALUES = 4096          # a common step is searched for up to this many values
MAX_BRACKET_VALUES = 64         # up to this many values with no common step: the bracketed walk (else the lattice)
_EPS = np.finfo(float).eps / 2  # unit roundoff


class TooLarge(ValueError):
    """The exact enumeration would exceed its work cap; callers fall back to the (bracketed) lattice."""


@dataclass
class DiscreteLaw:
    """A law of X >= 0 with P(X = 0) = q and, given X > 0, the values `values` (k,) float64 (increasing,
    distinct, > 0) with probabilities `probs` (k,) float64 (summing to 1). k = 0 means X = 0 always."""
    values: np.ndarray
    probs: np.ndarray
    q: float

    @staticmethod
    def from_samples(x):
        """The empirical law of the increments x (any shape, float >= 0)."""
        x = np.asarray(x, dtype=np.float64).ravel()
        u, c = np.unique(x, return_counts=True)
        zero = u == 0.0
        q = float(c[zero].sum()) / len(x)
        u, c = u[~zero], c[~zero]
        return DiscreteLaw(u, c / c.sum() if len(c) else c.astype(np.float64), q)

    @staticmethod
    def from_atoms(values, masses):
        """From atoms (values >= 0, masses > 0 summing to 1 within 1e-9)."""
        v, p = np.asarray(values, dtype=np.float64), np.asarray(masses, dtype=np.float64)
        order = np.argsort(v)
        v, p = v[order], p[order]
        p = p / p.sum()
        zero = v == 0.0
        q = float(p[zero].sum())
        v, p = v[~zero], p[~zero]
        return DiscreteLaw(v, p / p.sum() if len(p) else p, q)

    def moments_raw(self):
        """(E X, E X^2, E X^3) of the law, including the atom at 0."""
        w = (1.0 - self.q) * self.probs
        return tuple(float(np.dot(w, self.values ** j)) for j in (1, 2, 3))


def find_atoms(cdf, x_hi, cells=2 ** 14):
    """Atoms of a law on [0, x_hi] known through its CDF: (values (a,), masses (a,)), values increasing.

    cdf: vectorised P(X <= x). The range is cut into `cells` cells; in every cell whose increment exceeds
    ATOM_MIN the larger half is kept for 64 bisections (down to adjacent floats), and the increment left over
    one ulp is an atom if it exceeds ATOM_MIN (a density contributes f * ulp, ~1e-16 f). A cell is searched
    again with its found atoms excluded while unexplained mass remains, so several atoms per cell are found.
    The atom at 0 is P(X <= 0). Masses are differences of the CDF at adjacent floats.
    """
    edges = np.linspace(0.0, x_hi, cells + 1)
    F = np.asarray(cdf(edges), dtype=np.float64)
    vals, mass = [], []
    if F[0] > ATOM_MIN:
        vals.append(0.0)
        mass.append(float(F[0]))
    jump = np.diff(F)
    cand = np.nonzero(jump > ATOM_MIN)[0]
    for _ in range(4):                                     # passes: a cell with several atoms is searched again
        if len(cand) == 0:
            break
        a, b = edges[cand].copy(), edges[cand + 1].copy()
        known = np.array(vals, dtype=np.float64)
        kmass = np.array(mass, dtype=np.float64)

        def unexplained(lo, hi):
            m = np.asarray(cdf(hi), dtype=np.float64) - np.asarray(cdf(lo), dtype=np.float64)
            if len(known):
                inside = (known[None, :] > lo[:, None]) & (known[None, :] <= hi[:, None])
                m = m - inside.astype(np.float64) @ kmass
            return m

        for _ in range(64):
            mid = 0.5 * (a + b)
            left = unexplained(a, mid)
            right = unexplained(mid, b)
            go_left = left >= right
            b = np.where(go_left, mid, b)
            a = np.where(go_left, a, mid)
            if np.all(np.nextafter(a, np.inf) >= b):
                break
        hi = b
        lo = np.nextafter(hi, -np.inf)
        m = unexplained(lo, hi)
        new = m > ATOM_MIN
        found = set()
        for v, w in zip(hi[new], m[new]):
            if float(v) not in found and float(v) not in vals:
                found.add(float(v))
                vals.append(float(v))
                mass.append(float(w))
        if not found:
            break
        # cells still holding unexplained mass above ATOM_MIN after their atoms are removed
        known = np.array(vals)
        kmass = np.array(mass)
        inside = (known[None, :] > edges[cand][:, None]) & (known[None, :] <= edges[cand + 1][:, None])
        left = jump[cand] - inside.astype(np.float64) @ kmass
        cand = cand[(left > ATOM_MIN) & inside.any(axis=1)]
    order = np.argsort(vals)
    return np.array(vals)[order], np.array(mass)[order]


# ----------------------------------------------------------------------------- the positive walk


def _tie_fix(t, counts, values, L, tail_vals):
    """Exact ceil of t where t is within rounding of an integer: t = (sigma + r v_b - L)/(v_b - v_a) with sigma
    the counts (states, j) times values (j,), recomputed in rationals. Returns the corrected ceil(t)."""
    c = np.ceil(t)
    near = np.abs(t - np.rint(t)) <= 1e-8 * (1.0 + np.abs(t))
    if not near.any():
        return c
    fv = [Fraction(float(v)) for v in values]
    fL = Fraction(float(L))
    va, vb = Fraction(float(tail_vals[0])), Fraction(float(tail_vals[1]))
    for i in np.nonzero(near)[0]:
        cnt = counts[i]
        r = int(cnt[-1])                                   # remaining count for the last two values
        sig = sum((int(cj) * fj for cj, fj in zip(cnt[:-1], fv)), Fraction(0))
        tt = (sig + r * vb - fL) / (vb - va)
        c[i] = math.ceil(tt)
    return c


def _survival_n(law, L, n):
    """(P(S_n <= L), dropped mass) for one n >= 0 for the positive part of law (k >= 2 values)."""
    v, p = law.values, law.probs
    k = len(v)
    if n == 0:
        return 1.0, 0.0
    # states: counts of the first k - 2 values, remaining r, partial sum sigma, weight w
    counts = np.zeros((1, 0), dtype=np.int64)
    r = np.array([n], dtype=np.int64)
    sig = np.zeros(1)
    w = np.ones(1)
    dropped = 0.0
    rest = 1.0
    for i in range(k - 2):
        pi = min(p[i] / rest, 1.0) if rest > 0 else 0.0
        rest -= p[i]
        sd = np.sqrt(np.maximum(r * pi * (1 - pi), 0.0))
        mu = r * pi
        lo = np.maximum(np.floor(mu - 40 * sd - 40), 0).astype(np.int64)
        hi = np.minimum(np.ceil(mu + 40 * sd + 40), r).astype(np.int64)
        width = hi - lo + 1
        total = int(width.sum())
        if total > MAX_STATES:
            raise TooLarge(f"{total} count states at n = {n}")
        rep = np.repeat(np.arange(len(r)), width)
        c = lo[rep] + (np.arange(total) - np.repeat(np.cumsum(width) - width, width))
        pm = stats.binom.pmf(c, r[rep], pi)
        keep = pm * w[rep] > _PRUNE
        dropped += float(np.sum(w) - np.sum(pm * w[rep]))     # the mass outside [lo, hi]
        dropped += float(np.sum((pm * w[rep])[~keep]))
        rep, c, pm = rep[keep], c[keep], pm[keep]
        counts = np.concatenate([counts[rep], c[:, None]], axis=1)
        sig = sig[rep] + c * v[i]
        w = w[rep] * pm
        r = r[rep] - c
    va, vb = v[k - 2], v[k - 1]
    pa = p[k - 2] / (p[k - 2] + p[k - 1])
    t = (sig + r * vb - L) / (vb - va)
    cmin = _tie_fix(t, np.concatenate([counts, r[:, None]], axis=1), v[: k - 2], L, (va, vb))
    cmin = np.maximum(cmin, 0)
    tail = np.where(cmin > r, 0.0, stats.binom.sf(cmin - 1, r, pa))
    return float(np.dot(w, tail)), max(dropped, 0.0)


def common_step(values, L):
    """(g, m, K) when the values are integer multiples m (k,) int64 of one step g (a Fraction: the greatest
    common divisor of the floats as exact rationals) with K = floor(L / g) <= MAX_CELLS; else None (also for more
    than MAX_STEP_VALUES values: not searched)."""
    if len(values) > MAX_STEP_VALUES:
        return None
    fv = [Fraction(float(x)) for x in values]
    den = math.lcm(*(f.denominator for f in fv))
    g = Fraction(math.gcd(*(int(f * den) for f in fv)), den)
    K = Fraction(float(L)) // g
    if K > MAX_CELLS:
        return None
    return g, np.array([int(f / g) for f in fv], dtype=np.int64), int(K)


def _walk_cdfs(m, p, K, n_last, stop):
    """The integer walk J_n with steps m (k,) int64 >= 1 of probabilities p (k,): for n = 0, 1, ..., n_last the
    CDF of J_n on 0..K (a (K + 1,) array; the mass past K is gone for good), yielded until stop(cdf) <= _DELTA.
    Each step adds the k shifted copies of the pmf (k (K + 1) operations, non-negative terms only)."""
    m_lo, m_hi = int(m.min()), int(m.max())
    u = np.zeros(K + 1)                                    # (K + 1,) the walk's pmf on 0..K
    u[0] = 1.0
    lo, hi = 0, 0                                          # u is zero outside lo..hi
    c = np.cumsum(u)
    yield c
    for _ in range(n_last):
        nxt = np.zeros(K + 1)
        for mi, pi in zip(m.tolist(), p.tolist()):
            b = min(hi + mi, K)
            if lo + mi <= b:
                nxt[lo + mi:b + 1] += pi * u[lo:b - mi + 1]
        u, lo, hi = nxt, lo + m_lo, min(hi + m_hi, K)
        c = np.cumsum(u)
        yield c
        if lo > K or stop(c) <= _DELTA:
            return


def step_survival(law, L):
    """_positive_survival's result for values on a common step g (common_step): S_n <= L iff the integer walk
    J_n = sum of the counts times m stays <= K = floor(L / g), so s_n = P(J_n <= K) is computed on the points
    0..K by adding the k shifted copies of u_{n-1} (u_n = the walk's pmf on 0..K, the mass past K gone for
    good since m >= 1): exact up to rounding, k K operations a step, ties decided in rationals.
    Rounding: sums of non-negative terms, each u_n(j) within (k + 1) u relative of its exact value per step
    (u the unit roundoff), so s_n within (n (k + 1) + K + 1) u s_n (relative, with the final sum)."""
    step = common_step(law.values, L)
    if step is None:
        raise TooLarge("the values have no common step of at least L / MAX_CELLS")
    _, m, K = step
    p = law.probs
    kappa = float(np.dot(p, m))                            # E[m]: the walk's mean step, in steps
    n_last = K // int(m.min()) + 1                         # J_n >= n m_min > K from here: s_n = 0 exactly
    if min(n_last, 2 * K / kappa + 100) * len(m) * (K + 1) > MAX_WORK:
        raise TooLarge(f"{len(m)} values on {K + 1} lattice points")
    s = np.array([c[K] for c in _walk_cdfs(m, p, K, n_last, lambda c: c[K])])
    n = np.arange(len(s))
    err = s * (n * (len(m) + 1) + K + 1) * _EPS
    # past the last computed n the survival is at most its last value, for at most n_last - n steps
    last, n_c = float(s[-1]), len(s) - 1
    tails = (last * (n_last - n_c), last * float(n_last + 1) ** 2)
    if last != 0.0:
        s = np.concatenate([s, [0.0]])
        err = np.concatenate([err, [last]])
    return 0, s, err, tails, f"exact walk on a common step ({len(m)} values, {K + 1} points)"


def bracket_survival(law, L):
    """_positive_survival's result for values with no common step: each value rounded to a multiple m_i of a step
    h, v_i = m_i h + d_i, so S_n = h J_n + D_n with n min(d) <= D_n <= n max(d) (the counts sum to n), and
        P(J_n <= floor((L - n max d) / h)) <= s_n <= P(J_n <= floor((L - n min d) / h)),
    both read off the CDF of the integer walk J_n (_walk_cdfs). s_n is the midpoint, its error half the
    bracket's width (a bound, not an estimate) plus rounding. h: as fine as MAX_WORK allows (k (K + 1)
    operations a step, K = L / h), chosen among 256 nearby steps for the narrowest spread max d - min d."""
    v, p = law.values, law.probs
    k = len(v)
    kappa = float(np.dot(p, v))
    sd = math.sqrt(max(float(np.dot(p, (v - kappa) ** 2)), 0.0) * L / kappa ** 3)
    steps = L / kappa + 14 * sd + 10                      # about the n the walk runs for
    K0 = int(min(MAX_CELLS, MAX_WORK / (k * steps)))
    if K0 < 64:
        raise TooLarge(f"{k} values over {steps:.0f} steps leave {K0} lattice points")
    best = None
    for K in np.linspace(K0, 0.9 * K0, 256).astype(np.int64):   # the step whose roundings spread least
        h = L / float(K)
        m = np.maximum(np.rint(v / h), 1.0)
        d = v - m * h
        spread = float(d.max() - d.min())
        if best is None or spread < best[0]:
            best = (spread, h, m.astype(np.int64), d, int(K))
    _, h, m, d, K = best
    slack = 4 * np.finfo(float).eps * float(v.max())       # d is computed in floats: widened outward
    d_hi, d_lo = float(d.max()) + slack, float(d.min()) - slack
    n_last = int(math.ceil(L / float(v.min()))) + 1      # S_n >= n v_min > L from here: s_n = 0 exactly
    # roundings below the values (d < 0) put the upper bound's threshold (L - n min d) / h past K: the walk is
    # kept on Kw >= K points, enough for the n it runs for; a threshold past Kw gets the trivial bound 1
    Kw = K + int(math.ceil(min(n_last, 2 * steps) * max(-d_lo, 0.0) / h)) + 2

    def index(x):                                          # floor(x) clipped to -1..Kw
        return int(min(max(math.floor(x), -1), Kw))

    def up_of(c, n):                                       # the upper bound P(J_n <= floor((L - n min d) / h))
        x = (L - n * d_lo) / h * (1 + 1e-13) + 1e-9
        if x >= Kw + 1:
            return 1.0
        a_up = index(x)
        return float(c[a_up]) if a_up >= 0 else 0.0

    lo, up = [], []
    for n, c in enumerate(_walk_cdfs(m, p, Kw, n_last, lambda c: up[-1])):   # stop once the upper bound is 0
        a_lo = index((L - n * d_hi) / h * (1 - 1e-13) - 1e-9)
        lo.append(float(c[a_lo]) if a_lo >= 0 else 0.0)
        up.append(up_of(c, n))
    lo, up = np.array(lo), np.array(up)
    s = 0.5 * (lo + up)
    n = np.arange(len(s))
    err = 0.5 * (up - lo) + up * (n * (k + 1) + Kw + 1) * _EPS
    last, n_c = float(up[-1]), len(s) - 1
    tails = (last * max(n_last - n_c, 0), last * float(n_last + 1) ** 2)
    if s[-1] != 0.0:
        s = np.concatenate([s, [0.0]])
        err = np.concatenate([err, [last]])
    return 0, s, err, tails, (f"bracketed walk ({k} values rounded to multiples of h = {h:.3g}, {Kw + 1} points, "
                              f"bracket {n_c} x {d_hi - d_lo:.2g} at most)")


def _positive_survival(law, L):
    """(n0, s (m,), err (m,)) with s[i] = P(N_Y > n0 + i) for the walk of the positive part of law (k >= 1
    values): 1 below n0 (within _DELTA), exactly 0 past floor(L / v_min) + 1, err[i] a bound on |error|.
    More than MAX_VALUES values, or counts too many to sum: the walk on a common step of the values
    (step_survival) where they have one, else up to MAX_BRACKET_VALUES values the bracketed walk
    (bracket_survival), else TooLarge."""
    v = law.values
    if len(v) <= MAX_VALUES:
        try:
            label = ("closed form (one value)" if len(v) == 1 else "exact binomial sums" if len(v) == 2 else
                     f"exact sums over counts ({len(v)} values)")
            return count_survival(law, L) + (label,)
        except TooLarge:
            pass
    try:
        return step_survival(law, L)
    except TooLarge:
        if len(v) > MAX_BRACKET_VALUES:
            raise
        return bracket_survival(law, L)


def count_survival(law, L):
    """_positive_survival by exact sums over the counts of up to MAX_VALUES values."""
    v, p = law.values, law.probs
    fL = Fraction(float(L))
    if len(v) == 1:
        w = int(fL // Fraction(float(v[0])))               # N_Y = w + 1
        return w, np.array([1.0, 0.0]), np.zeros(2), (0.0, 0.0)
    n_first = int(fL // Fraction(float(v[-1])))            # n v_max <= L: s_n = 1 exactly up to here
    n_last = int(fL // Fraction(float(v[0]))) + 1          # n v_min > L: s_n = 0 exactly from here

    if len(v) == 2:
        def surv(ns):
            ns = np.asarray(ns, dtype=np.int64)
            va, vb = v
            t = (ns * vb - L) / (vb - va)
            cm = _tie_fix(t, ns[:, None], [], L, (va, vb))
            cm = np.maximum(cm, 0)
            s = np.where(cm > ns, 0.0, stats.binom.sf(cm - 1, ns, p[0]))
            return s, np.zeros(len(ns))
    else:
        def surv(ns):
            out = [_survival_n(law, L, int(n)) for n in np.atleast_1d(ns)]
            return np.array([o[0] for o in out]), np.array([o[1] for o in out])

    # transition range by bisection on the monotone survival
    kappa = float(np.dot(p, v))
    sd = math.sqrt(max(float(np.dot(p, (v - kappa) ** 2)), 0.0) * L / kappa ** 3) + 1.0
    guess = min(max(int(L / kappa), n_first), n_last)
    lo, hi = n_first, guess                                # largest n with 1 - s_n <= _DELTA
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if 1.0 - surv([mid])[0][0] <= _DELTA:
            lo = mid
        else:
            hi = mid
    n0 = lo
    lo, hi = guess, n_last                                 # smallest n with s_n <= _DELTA
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if surv([mid])[0][0] <= _DELTA:
            hi = mid
        else:
            lo = mid
    n1 = hi
    if (n1 - n0) * max(len(v) - 2, 0) * (30 * sd + 80) ** max(len(v) - 2, 0) > MAX_WORK:
        raise TooLarge(f"{n1 - n0} steps of {len(v)}-value enumeration")
    ns = np.arange(n0, n1 + 1)
    s, err = surv(ns)
    err = err + _ULP_ERR
    s = np.minimum.accumulate(np.clip(s, 0.0, 1.0))
    # below n0 and above n1 the survival is 1 and 0 within _DELTA for at most n0 and n_last - n1 steps
    tail1 = n0 * _DELTA + (n_last - n1) * _DELTA
    tail2 = n0 * n0 * _DELTA + float(n_last) ** 2 * _DELTA
    if n1 < n_last:
        s = np.concatenate([s, [0.0]])
        err = np.concatenate([err, [_DELTA]])
    return n0, s, err, (tail1, tail2)


def _moments(s, n0, err):
    """E[N], Var[N] from s[i] = P(N > n0 + i) and their errors from |error of s| <= err (centred weights)."""
    i = np.arange(len(s))
    e1 = float(s.sum())
    e2 = float(np.sum((2 * i + 1) * s))
    var = e2 - e1 * e1
    d1 = float(err.sum())
    d2 = float(np.sum(np.abs(2 * i + 1 - 2 * e1) * err)) + d1 * d1
    return n0 + e1, var, d1, d2


def passage(law, L):
    """Exact law of W = N - 1 for a DiscreteLaw at threshold L (float > 0).

    Returns (n0, s, mean, var, mean_err, var_err, method): s[i] = P(N > n0 + i) (float64, ending in 0), E[W],
    Var[W] and bounds on their errors (rounding of the binomial tails, pruned states, the survival within 1e-30
    of 1 or 0 outside the computed range). Raises TooLarge where the count enumeration passes its caps and
    ValueError where X = 0 always.
    """
    if len(law.values) == 0:
        raise ValueError("every increment is 0 (every gate is 1): kappa = 0 and the walk never crosses L")
    n0y, sy, ey, ty, label = _positive_survival(law, L)
    EN, VN, dE, dV = _moments(sy, n0y, ey)
    dE += ty[0]
    dV += ty[1] + 2 * EN * ty[0]
    if law.q == 0.0:
        return n0y, sy, EN - 1.0, VN, dE, dV, label
    return compound(n0y, sy, EN, VN, dE, dV, law.q, label)


def compound(n0y, sy, EN, VN, dE, dV, q, label):
    """Geometric compounding over an atom P(X = 0) = q of the walk of the positive part Y, whose N_Y has
    survival sy[i] = P(N_Y > n0y + i) (1 below n0y), E[N_Y] = EN, Var[N_Y] = VN with errors dE, dV.
    Returns passage's tuple for N (E[W] = E[N] - 1)."""
    a = 1.0 - q
    mean = EN / a
    var = VN / a ** 2 + q * EN / a ** 2
    mean_err = dE / a
    var_err = dV / a ** 2 + q * dE / a ** 2
    ky = np.arange(n0y, n0y + len(sy))                     # P(N_Y > k) = sy[k - n0y], 1 below n0y

    def surv(ns):
        ns = np.asarray(ns, dtype=np.int64)
        out = stats.binom.cdf(n0y - 1, ns, a) if n0y > 0 else np.zeros(len(ns))
        step = max(1, 4_000_000 // len(ky))
        for i in range(0, len(ns), step):                  # (chunk, len(ky)) binomial weights at a time
            out[i: i + step] += stats.binom.pmf(ky[None, :], ns[i: i + step, None], a) @ sy
        return out

    sdN = math.sqrt(max(var, 0.0)) + 1.0
    lo = max(int(mean - 12 * sdN), 0)
    while lo > 0 and 1.0 - surv([lo])[0] > _DELTA:
        lo = max(lo - int(4 * sdN), 0)
    hi = int(mean + 12 * sdN) + 2
    while surv([hi])[0] > _DELTA:
        hi += int(4 * sdN) + 1
    ns = np.arange(lo, hi + 1)
    s = np.concatenate([np.clip(surv(ns), 0.0, 1.0), [0.0]])
    return lo, s, mean - 1.0, var, mean_err + 1e-15 * mean, var_err + 1e-14 * max(var, 1.0), \
        label + f", compounded over an atom at X = 0 (P = {q:.3g})"


# ----------------------------------------------------------------------------- the route from exact.py


class AtomGate(gates.EmpiricalGate):
    """Atoms with unequal probabilities (a custom law found discrete by its CDF): values x (k,), probs w (k,)."""

    def __init__(self, values, probs, name):
        self.x, self.w, self.name = np.asarray(values, dtype=np.float64), np.asarray(probs, dtype=np.float64), name

    def moments(self):
        kappa = float(np.dot(self.w, self.x))
        d = self.x - kappa
        return gates.Moments.from_central(kappa, float(np.dot(self.w, d * d)), float(np.dot(self.w, d ** 3)))

    def cdf(self, x):
        c = np.concatenate([[0.0], np.cumsum(self.w)])
        return c[np.searchsorted(self.x, np.asarray(x, dtype=np.float64), side="right")]


class _Positive(gates.Gate):
    """X given X > 0 for a law with an atom q at 0 and a density elsewhere (moments and CDF rescaled)."""
    atomless = True

    def __init__(self, gate, q, m):
        self.gate, self.q, self.name = gate, q, f"{gate} given X > 0"
        self.smooth = gate.smooth
        self.m = gates.Moments.from_raw(m.kappa / (1 - q), m.mu2 / (1 - q), m.mu3 / (1 - q))

    def moments(self):
        return self.m

    def cdf(self, x):
        return np.clip((self.gate.cdf(x) - self.q) / (1 - self.q), 0.0, 1.0)


def atomic_passage(gate, eps, L, m, tol, strict, richardson, var_tol):
    """Laws with atoms (docs/THEORY.md section 5, "Atoms"): an EmpiricalGate's values, or atoms found in the CDF
    of a gate that does not declare itself atomless. Few values: exact sums (discrete.py); an atom at 0: exact
    geometric compounding over the walk of X given X > 0; many atoms: the bracketed lattice (None is returned
    and the caller goes on). A custom law with atoms at positive values and a continuous part is refused.
    Called by exact.exact_first_passage with its validated arguments; returns a lattice.FirstPassage or None."""
    if isinstance(gate, gates.EmpiricalGate):
        law = (DiscreteLaw.from_atoms(gate.x, gate.w) if isinstance(gate, AtomGate)
               else DiscreteLaw.from_samples(gate.x))
    elif getattr(gate, "atomless", False):
        return None
    else:
        vals, mass = find_atoms(gate.cdf, lattice.cdf_support(gate, m)[1])
        if len(vals) == 0:
            return None
        if mass.sum() >= 1.0 - 1e-9:
            law = DiscreteLaw.from_atoms(vals, mass)
        elif vals[-1] == 0.0:                               # an atom at 0 and a density elsewhere
            q = float(mass[0])
            fy = lattice.lattice_passage(_Positive(gate, q, m), eps, L, _Positive(gate, q, m).moments(), tol, strict,
                                         richardson, var_tol)
            out = compound(fy.n0, fy.survival, fy.mean + 1, fy.var, fy.mean_err, fy.var_err, q,
                                    fy.method)
            n0, sv, mean, var, me, ve, method = out
            return lattice.finish(gate, eps, sv, n0, mean, var, method, me, ve, fy.h)
        else:
            raise ValueError(f"{gate}: its CDF has atoms (at x = {vals[:4]}, total mass {mass.sum():.3g}) and a "
                             "continuous part; the exact numerics take a density, a discrete law, or a density "
                             "with an atom at 0 only")
    try:
        n0, s, mean, var, me, ve, method = passage(law, L)
        me += lattice.FLOOR * abs(mean)
        ve += lattice.FLOOR * max(abs(var), 1.0)
        ok = me <= tol * max(abs(mean), 1.0) and ve <= var_tol * max(abs(var), 1.0)
        if not ok:
            _missed(gate, eps, me, ve, tol, var_tol, method, strict)
        return lattice.finish(gate, eps, s, n0, mean, var, method, me, ve)
    except TooLarge:
        pass
    if law.q == 0 and isinstance(gate, gates.EmpiricalGate):
        return None
    return _lattice_atoms(gate, law, eps, L, tol, richardson, var_tol, strict)


def _lattice_atoms(gate, law, eps, L, tol, richardson, var_tol, strict=False):
    """The bracketed lattice for a DiscreteLaw (many positive values), compounded over its atom at 0 if any."""
    if law.q > 0:
        pos = AtomGate(law.values, law.probs, f"{gate} given X > 0")
        fy = lattice.lattice_passage(pos, eps, L, pos.moments(), tol, strict, richardson, var_tol)
        n0, s, mean, var, me, ve, method = compound(fy.n0, fy.survival, fy.mean + 1, fy.var, fy.mean_err,
                                                    fy.var_err, law.q, fy.method)
        return lattice.finish(gate, eps, s, n0, mean, var, method, me, ve, fy.h)
    atoms = AtomGate(law.values, law.probs, str(gate))
    return lattice.lattice_passage(atoms, eps, L, atoms.moments(), tol, strict, richardson, var_tol)


def _missed(gate, eps, me, ve, tol, var_tol, method, strict):
    """AccuracyWarning (AccuracyError when strict) naming the errors reached against the tolerance."""
    tols = f"{tol:g}" if var_tol == tol else f"{tol:g}, Var[W] {var_tol:g}"
    msg = (f"{gate} at eps = {eps:g}: exact numerics reached |err E[W]| <= {me:.2g}, |err Var[W]| <= "
           f"{ve:.2g} (tol {tols} relative; {method})")
    if strict:
        raise lattice.AccuracyError(msg)
    warnings.warn(msg, lattice.AccuracyWarning, stacklevel=4)
