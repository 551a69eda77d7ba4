"""Dependence of a head's gate increments X = -log g, measured at the window's own length.

A window at threshold L is a first passage of S_n = X_1 + ... + X_n over L, with n near L/kappa. What
decides its spread there is the variance of partial sums at that n,

    V(n) = Var(S_n),   tau(n) = V(n) / (n V(1))   (tau(1) = 1; tau(n) -> tau = 1 + 2 sum_k rho_k),

not the limit tau alone. `variance_function` estimates V(n) directly from traces x (S sequences, T
positions) by averaging the squared deviations of all overlapping block sums of length n, for every n of
a grid up to T/2, in two centrings: about the grand mean (a document-level shift of kappa then grows
V(n) like n^2, as it grows the pooled window variance) and about each sequence's own mean (the
dependence inside a document; the centring bias, a factor (1 - n/T) for a weakly dependent walk, is
divided out). Its standard errors are jackknifed over sequences (the independent units), and every
quantity is also available for reweighted sequences (a document bootstrap reweights them).

`in_regime` is the one place that decides whether an asymptotic window law is claimed at L: the
within-document tau(n) must have measurably levelled off at n = L/kappa (tau(2n)/tau(n) within
LEVEL_TOL of 1 at the upper end of its LEVEL_Z band), the walk must take MIN_STEPS steps, and it must be
away from the lattice limit (LATTICE_VAR), and its variance must come from steps small against L
(`tail_share` <= TAIL_SHARE): the laws invert S_n ~ n kappa linearly, which a single step of the size
of L breaks (heavy-tailed gates reach the law only at large L, where their big steps are small).

`tau_estimate` is Geyer's initial-positive-sequence tau with its jackknife error: the one function for
it (a reported diagnostic; it decides nothing alone).
"""
import math
from dataclasses import dataclass

import numpy as np

from foxwindow.laws import renewal

__all__ = ["MAX_LAG", "LEVEL_TOL", "LEVEL_Z", "MIN_STEPS", "LATTICE_VAR", "TAIL_FRAC", "TAIL_SHARE", "jackknife",
           "loo_weights", "group_weights", "JACK_GROUPS", "jack_weights", "TauEstimate", "tau_estimate", "n_grid",
           "VarianceFunction", "variance_function", "DocSums", "Regime",
           "level_ratio", "tail_share", "tail_shares", "in_regime"]

MAX_LAG = 256          # lags of the Geyer diagnostic
LEVEL_TOL = 0.10       # tau(n) has levelled off at n when |tau(2n)/tau(n) - 1| <= 10% ...
LEVEL_Z = 2.0          # ... even at the upper end of its +- 2 SE band (one-sided 97.7%)
MIN_STEPS = 4.0        # L/kappa >= 4: a renewal law needs a few steps before its O(1) terms are small
LATTICE_VAR = renewal.LATTICE_VAR   # sigma^2 min(tau, 1) L / kappa^3 >= it: away from the lattice (ALiBi) limit
TAIL_FRAC = 0.25       # steps longer than a quarter of L ...
TAIL_SHARE = 0.10      # ... may carry at most 10% of Var X (the law inverts S_n linearly: small steps)


def jackknife(values_loo):
    """Standard error from leave-one-out estimates (S,) or (S, ...) float: sqrt((S-1)/S sum (v - mean)^2)."""
    v = np.asarray(values_loo, dtype=np.float64)
    S = v.shape[0]
    return np.sqrt((S - 1) / S * np.sum((v - v.mean(axis=0)) ** 2, axis=0))


def loo_weights(S):
    """(S, S) float64 weights of the S leave-one-sequence-out samples (row s drops sequence s)."""
    return 1.0 - np.eye(S)


JACK_GROUPS = 256      # jack_weights: at most 256 groups of sequences (each its own group up to 256 sequences)


def jack_weights(S):
    """The weights of the verdict's jackknife over S sequences: group_weights(S, JACK_GROUPS), the leave-one-out
    rows up to JACK_GROUPS sequences (its matrix products grew as S^2 beyond)."""
    return group_weights(S, JACK_GROUPS)


def group_weights(S, G):
    """(min(S, G), S) float64 weights of a delete-a-group jackknife: row g drops the sequences s with s % G == g
    (groups of sizes within one); G >= S: loo_weights(S). `jackknife` of its rows' estimates is the grouped
    jackknife's SE ((G - 1) / G times the sum of squares, G - 1 degrees of freedom)."""
    if G >= S:
        return loo_weights(S)
    return 1.0 - (np.arange(S)[None, :] % G == np.arange(G)[:, None])


def _traces(x, what="x"):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 4:
        raise ValueError(f"{what}: need increments (S, T) with S >= 2 sequences and T >= 4; got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: increments contain NaN or inf")
    return x


# ----------------------------------------------------------------------------- Geyer's tau (a diagnostic)


@dataclass
class TauEstimate:
    """tau = 1 + 2 sum_{k<cut} rho_k (Geyer's initial positive sequence) with its jackknife-over-sequences
    standard error. tau_loo: (S,) leave-one-sequence-out values (same cut: a smooth statistic); rho: (cut,) the
    pooled autocorrelations kept by the cut, rho[0] = 1."""
    tau: float
    se: float
    cut: int
    centre: str
    tau_loo: np.ndarray
    rho: np.ndarray


def tau_estimate(x, centre="sequence", max_lag=MAX_LAG, sums=None, rows=None):
    """Geyer's tau of increments x (S, T) float (S >= 2 sequences), pooled over sequences with (T - k) S pairs
    per lag (renewal.acf(x, K, pooled=True, centre=centre)). centre: "sequence" (each sequence about its
    own mean) or "grand". max_lag: int >= 1, capped at T - 1. sums, rows: x is documents `rows` (an index array;
    None: all) of the head whose DocSums `sums` are given, whose sequence-centred lag sums are then read instead
    of formed (the same numbers). Returns TauEstimate."""
    x = _traces(x)
    S, T = x.shape
    K = min(int(max_lag), T - 1)
    nk = (T - np.arange(K + 1)) * 1.0
    if sums is not None and (centre == "sequence" or rows is None):    # a subset's grand mean is its own
        xx = sums.lag_sums(K, centre) if rows is None else sums.lag_sums(K)[rows]
    else:
        xx = renewal.lag_sums(x, K, centre)                                  # (S, K+1)
    g = xx.sum(0) / (nk * S)
    if g[0] <= 0:
        raise ValueError("tau_estimate: constant increments (variance 0) have no autocorrelation")
    rho = g / g[0]
    cut = renewal.geyer_cut(rho)
    tau = 1 + 2 * rho[1:cut].sum()
    loo = (xx.sum(0, keepdims=True) - xx) / (nk * (S - 1))
    tau_loo = 1 + 2 * (loo[:, 1:cut] / loo[:, :1]).sum(1)
    return TauEstimate(float(tau), float(jackknife(tau_loo)), int(cut), centre, tau_loo, rho[:cut].copy())


# ----------------------------------------------------------------------------- V(n) at every n


def n_grid(n_max, extra=()):
    """Block lengths: 1, 2, ... geometric up to n_max (about 12 per decade), plus `extra` ints in [1, n_max]."""
    base = np.unique(np.round(np.geomspace(1, max(n_max, 1), 12 * max(1, int(math.log10(max(n_max, 10)))) + 8)))
    ex = [int(e) for e in extra if 1 <= int(e) <= n_max]
    return np.unique(np.concatenate([base.astype(np.int64), np.asarray(ex, dtype=np.int64), [1]]))


class VarianceFunction:
    """V(n) = Var(S_n) of increments x (S, T) float64 for n in `ns` (ints in [1, T/2]; 1 is added).

    Per-sequence sums are kept so that every estimate is also available under sequence weights w
    ((B, S) float, e.g. a document bootstrap's counts; None = every sequence once):
      grand(w), within(w): V(n) about the grand mean / each sequence's own mean, (B, m) or (m,)
      tau_grand(w), tau_within(w): V(n) / (n V(1)), same shapes
      se(f): the jackknife-over-sequences standard error of any such function f(w) -> (S, ...) values.
    """

    def __init__(self, x, ns=None, sums=None, rows=None):
        x = _traces(x)
        S, T = x.shape
        self.S, self.T = S, T
        self.ns = n_grid(T // 2) if ns is None else np.unique(np.concatenate([np.asarray(ns, np.int64), [1]]))
        if self.ns.min() < 1 or self.ns.max() > T // 2:
            raise ValueError(f"ns must lie in [1, T/2] = [1, {T // 2}]; got [{self.ns.min()}, {self.ns.max()}]")
        if sums is not None:                    # the head's DocSums: its columns at ns, these documents' rows
            self._from_sums(sums, rows)
            return
        m = len(self.ns)
        self.A1, self.A2, self.Q = (np.empty((S, m)) for _ in range(3))
        self.p1 = x.sum(1)
        kd = self.p1 / T
        # one pass per block length: with the centred prefix sums cc_j = c_j - j kd_s, a block's sum about its
        # document's mean is cc_{j+n} - cc_j, and the sums over blocks come from prefix sums of cc in O(1)
        cc = np.zeros((S, T + 1))
        np.cumsum(x, 1, out=cc[:, 1:])
        cc -= np.arange(T + 1, dtype=np.float64) * kd[:, None]                  # (float: no cast a cell)
        pc = np.zeros((S, T + 2))
        np.cumsum(cc, 1, out=pc[:, 1:])                                           # pc_k = sum_{j<k} cc_j
        buf = np.empty((S, T + 1))
        for k, n in enumerate(self.ns):
            e = np.subtract(cc[:, n:], cc[:, :-n], out=buf[:, :T + 1 - n])      # (S, T - n + 1) centred block sums
            self.Q[:, k] = np.einsum("ij,ij->i", e, e)
        cnt = (T - self.ns + 1).astype(np.float64)
        E = (pc[:, -1:] - pc[:, self.ns]) - pc[:, T + 1 - self.ns]                # sum_j cc_{j+n} - cc_j
        nk = self.ns[None, :] * kd[:, None]
        self.A1 = E + nk * cnt
        self.A2 = self.Q + 2 * nk * E + nk * nk * cnt
        self.cnt = cnt

    def _from_sums(self, sums, rows):
        Q, E = sums.block_columns(self.ns)
        self.p1 = sums.p1 if rows is None else sums.p1[rows]
        if rows is not None:
            Q, E = Q[rows], E[rows]
        kd = self.p1 / self.T
        cnt = (self.T - self.ns + 1).astype(np.float64)
        nk = self.ns[None, :] * kd[:, None]
        self.Q = Q
        self.A1 = E + nk * cnt
        self.A2 = Q + 2 * nk * E + nk * nk * cnt
        self.cnt = cnt

    def _w(self, w):
        return np.ones((1, self.S)) if w is None else np.atleast_2d(np.asarray(w, dtype=np.float64))

    def _out(self, v, w):
        return v[0] if w is None else v

    def within(self, w=None):
        ww = self._w(w)
        v = (ww @ self.Q) / (ww.sum(1, keepdims=True) * self.cnt) / (1 - self.ns / self.T)
        return self._out(v, w)

    def grand(self, w=None):
        ww = self._w(w)
        W = ww.sum(1, keepdims=True)
        k = (ww @ self.p1)[:, None] / (W * self.T)
        n = self.ns[None, :]
        v = (ww @ self.A2 - 2 * n * k * (ww @ self.A1) + n * n * k * k * W * self.cnt) / (W * self.cnt)
        return self._out(v, w)

    def tau_within(self, w=None):
        v = self.within(self._w(w))
        return self._out(v / (self.ns * v[:, :1]), w)

    def tau_grand(self, w=None):
        v = self.grand(self._w(w))
        return self._out(v / (self.ns * v[:, :1]), w)

    def se(self, f):
        """Jackknife-over-sequences standard error of f(w) (f maps (B, S) weights to (B, ...) values; at most
        JACK_GROUPS groups of sequences, jack_weights)."""
        return jackknife(f(jack_weights(self.S)))

    def index(self, n):
        """Position in ns of the grid point nearest to n (a float >= 1) on a log scale."""
        return int(np.argmin(np.abs(np.log(self.ns) - math.log(max(n, 1.0)))))


def variance_function(x, ns=None, sums=None, rows=None):
    """V(n) of increments x (S, T) (see VarianceFunction). ns: block lengths (ints in [1, T/2]); None: n_grid.
    sums, rows: x is documents `rows` (an index array; None: all) of the head whose DocSums `sums` are given: its
    block sums are read from there (each block length formed once a head, on every document; the same numbers)."""
    return VarianceFunction(x, ns, sums, rows)


BLOCK_ROWS = 4              # DocSums.block_columns: documents a pass (each row's sum is its own: the same numbers)


def grand_lags(x, seq, grand_mean):
    """Lag sums about the grand mean, (S, K + 1), from those about each document's mean seq (S, K + 1) of x (S, T):
    with y = x - mean_d and c_d = mean_d - grand_mean, sum_t (y_t + c)(y_{t+k} + c) = sum_t y_t y_{t+k} +
    c (sum_{t < T-k} y_t + sum_{t >= k} y_t) + (T - k) c^2, the partial sums from the first and last K steps
    alone. Each row from that row and grand_mean alone (a block of documents gives its rows' numbers)."""
    S, T = x.shape
    K = seq.shape[1] - 1
    p1 = x.sum(1)
    md = p1 / T                                                         # (S,)
    c = (md - grand_mean)[:, None]
    y_head, y_tail = x[:, :K] - md[:, None], x[:, T - K:][:, ::-1] - md[:, None]
    tot = (p1 - T * md)[:, None]                                        # sum_t y_t: 0 to rounding
    zero = np.zeros((S, 1))
    head = np.concatenate([zero, np.cumsum(y_head, 1)], 1)              # sum_{t < k} y_t, k = 0..K
    tail = np.concatenate([zero, np.cumsum(y_tail, 1)], 1)              # sum_{t >= T-k} y_t
    k = np.arange(K + 1)[None, :]
    return seq + c * ((tot - tail) + (tot - head)) + (T - k) * c * c


class DocSums:
    """Per-document sums of one head's increments x (S, T) that its verdict and its per-law evaluation both read
    (the verdict on every document, the laws on the fitted half), formed once on every document: the
    sequence-centred lag sums of Geyer's tau and V(n)'s block sums of squares, a block length at a time as they are
    asked for. Every number is a document's own, taken row by row, so the rows of a subset are the numbers the
    subset's own arrays give."""

    def __init__(self, x):
        self.x = _traces(x)
        self.S, self.T = self.x.shape
        self.p1 = self.x.sum(1)
        self._lags, self._Q, self._E = {}, {}, {}
        self._cc = None

    @classmethod
    def from_parts(cls, x, lags, Q, E):
        """The DocSums of x (S, T) with the sums already formed (docsplit.doc_parts: on parts of the documents):
        lags {(K, centre): (S, K + 1)}, Q and E {block length: (S,)}; anything else asked is formed on use."""
        out = cls(x)
        out._lags.update(lags)
        out._Q.update(Q)
        out._E.update(E)
        return out

    def lag_sums(self, K, centre="sequence"):
        """renewal.lag_sums(x, K, centre), (S, K + 1), formed once; the grand-centred from the sequence-centred
        (grand_lags: no second transform, to rounding the same numbers)."""
        if (K, centre) not in self._lags:
            self._lags[K, centre] = (renewal.lag_sums(self.x, K, centre) if centre == "sequence" else
                                     grand_lags(self.x, self.lag_sums(K), self.x.mean()))
        return self._lags[K, centre]

    def block_columns(self, ns):
        """V(n)'s per-document sums at block lengths ns (ints in [1, T/2]): Q (S, m), the sums of squares of the
        centred block sums, and E (S, m), the sums of the centred block sums (VarianceFunction's)."""
        S, T = self.S, self.T
        if self._cc is None:
            kd = self.p1 / T
            cc = np.zeros((S, T + 1))
            np.cumsum(self.x, 1, out=cc[:, 1:])
            cc -= np.arange(T + 1, dtype=np.float64) * kd[:, None]
            pc = np.zeros((S, T + 2))
            np.cumsum(cc, 1, out=pc[:, 1:])
            self._cc, self._pc, self._buf = cc, pc, np.empty((min(S, BLOCK_ROWS), T + 1))
        cc, pc, buf = self._cc, self._pc, self._buf
        B = len(buf)
        new = list(dict.fromkeys(int(v) for v in ns if int(v) not in self._Q))
        Q = np.empty((S, len(new)))
        # BLOCK_ROWS documents at a time through every new block length: their prefix sums stay in cache, and e too
        for a in range(0, S, B):
            ca = cc[a:a + B]
            for k, n in enumerate(new):
                e = np.subtract(ca[:, n:], ca[:, :-n], out=buf[:len(ca), :T + 1 - n])
                Q[a:a + B, k] = np.einsum("ij,ij->i", e, e)
        for k, n in enumerate(new):
            self._Q[n] = Q[:, k].copy()
            self._E[n] = (pc[:, -1] - pc[:, n]) - pc[:, T + 1 - n]
        return (np.stack([self._Q[int(n)] for n in ns], 1), np.stack([self._E[int(n)] for n in ns], 1))


# ----------------------------------------------------------------------------- the regime a law claims


@dataclass
class Regime:
    """Whether an asymptotic window law is claimed at one L, with the measured reason when it is not.
    level_ratio: tau_within(2n)/tau_within(n) at n = L/kappa, with its jackknife SE (NaN when 2n > T/2)."""
    ok: bool
    why: str
    n: float
    level_ratio: float
    level_se: float


def level_ratio(vf, n, w=None):
    """tau_within(2n)/tau_within(n) at the grid points nearest n and 2n, under weights w (see
    VarianceFunction). NaN when 2n exceeds the longest block length measured."""
    if 2 * n > vf.ns[-1]:
        return float("nan") if w is None else np.full(np.atleast_2d(w).shape[0], np.nan)
    i, j = vf.index(n), vf.index(2 * n)
    t = vf.tau_within(w if w is not None else None)
    return t[..., j] / t[..., i]


def regime_rule():
    """The regime rule in one sentence, from the constants above (the table's header, docs/VERDICT.md and
    docs/RESULTS.md quote it; tests/heads/test_verdict.py checks that they do)."""
    return (f"no analysed window is censored, L/kappa >= {MIN_STEPS:g}, sigma^2 min(tau, 1) L/kappa^3 >= "
            f"{LATTICE_VAR:g} (away from the lattice limit), steps longer than L/{1 / TAIL_FRAC:g} carry at most "
            f"{TAIL_SHARE:.0%} of Var X, and tau(n) has measurably levelled off at n = L/kappa "
            f"(|tau(2n)/tau(n) - 1| + {LEVEL_Z:g} SE <= {LEVEL_TOL:g})")


def tail_share(x, L):
    """Share of Var X carried by steps X > TAIL_FRAC L: E[(X - kappa)^2 1{X > TAIL_FRAC L}] / Var X, from
    increments x (any shape, float) at threshold L > 0. Returns a float in [0, 1] (NaN for constant x)."""
    x = np.asarray(x, dtype=np.float64)
    d2 = (x - x.mean()) ** 2
    tot = d2.sum()
    return float(d2[x > TAIL_FRAC * L].sum() / tot) if tot > 0 else float("nan")


def tail_shares(x, Ls):
    """tail_share(x, L) for every L of Ls (a list of floats; the same numbers), the squared deviations formed once
    and each L's sum taken over the steps above its own TAIL_FRAC L among those above the smallest one's."""
    x = np.asarray(x, dtype=np.float64)
    d2 = (x - x.mean()) ** 2
    tot = d2.sum()
    if not tot > 0:
        return [float("nan")] * len(Ls)
    keep = x > TAIL_FRAC * float(np.min(Ls))
    xs, ds = x[keep], d2[keep]                                    # in order: the same elements for every L
    return [float(ds[xs > TAIL_FRAC * float(L)].sum() / tot) for L in Ls]


def in_regime(L, kappa, sigma2, vf, censored_frac, tail=0.0):
    """Whether the asymptotic window laws claim to hold at threshold L (float > 0) for a head with forget
    rate kappa > 0 and increment variance sigma2 (floats), V(n) in vf (VarianceFunction), a fraction
    censored_frac (float) of analysed windows reaching the trace start and the tail share (tail_share at L).
    Returns Regime.

    Claimed where (1) no analysed window is censored; (2) L/kappa >= MIN_STEPS; (3) sigma^2 min(tau, 1)
    L/kappa^3 >= LATTICE_VAR, tau = tau_within(L/kappa); (4) tail <= TAIL_SHARE; (5) tau_within has
    measurably levelled off at n = L/kappa: |tau(2n)/tau(n) - 1| + LEVEL_Z SE <= LEVEL_TOL, with 2n inside
    the measured range."""
    n = L / kappa
    if censored_frac > 0:
        return Regime(False, "censored", n, float("nan"), float("nan"))
    if n < MIN_STEPS:
        return Regime(False, f"L/kappa = {n:.1f} < {MIN_STEPS:g} steps", n, float("nan"), float("nan"))
    tau_n = float(vf.tau_within()[vf.index(n)])
    if sigma2 * min(tau_n, 1.0) * L / kappa ** 3 < LATTICE_VAR:
        return Regime(False, "near the lattice limit", n, float("nan"), float("nan"))
    if tail > TAIL_SHARE:
        return Regime(False, f"steps > L/{1 / TAIL_FRAC:g} carry {tail:.0%} of Var X", n, float("nan"), float("nan"))
    if 2 * n > vf.ns[-1]:
        return Regime(False, f"tau(n) not measurable at 2n = {2 * n:.0f} > {vf.ns[-1]}", n, float("nan"), float("nan"))
    r = float(level_ratio(vf, n))
    se = float(vf.se(lambda w: level_ratio(vf, n, w)))
    ok = abs(r - 1) + LEVEL_Z * se <= LEVEL_TOL
    why = "" if ok else f"tau(n) still moving at n = {n:.0f} (tau(2n)/tau(n) = {r:.2f} +- {se:.2f})"
    return Regime(bool(ok), why, n, r, se)


# ----------------------------------------------------------------------------- the second-order law's inputs

CORR_MULT = renewal.SECOND_ORDER_MULT           # the second-order law claims from L/kappa >= CORR_MULT x ell ...
CORR_ACCURACY = renewal.SECOND_ORDER_ACCURACY   # ... to within this of Var[W] (second_order_regime.py)
CORR_Z = 2.0           # ... with the length taken at the upper end of its +- CORR_Z SE band
EST_MULT = 4.0         # the inputs are read at block lengths n, 2n with n >= EST_MULT x the length found there


@dataclass
class SecondOrderInputs:
    """The second-order law's inputs estimated from a trace, and its correlation length

        ell = max(|C_dep|, 2 |sum_k k gamma_k| / kappa^2) kappa^2 / sigma_LR^2     (steps)

    the larger of the law's own O(1) term in steps (|C_dep| / lead = ell_C / n at n = L/kappa) and Bartlett's
    length 2 |sum_k k gamma_k| / sigma_LR^2 (the first moment of the autocovariance, which C_dep's parts can
    cancel), C_dep = renewal.second_order_constant(kappa, sigma2_lr, kappa3_lr, sum_k_gamma_k).
    Read from block sums of length n and 2n: sigma_LR^2 = (V(2n) - V(n)) / n, sum_k k gamma_k = (V(2n) - 2 V(n))
    / 2, kappa3_LR = (K3(2n) - K3(n)) / n (K3 the third central moment of the block sums), each remainder decaying
    with n past the correlation length. n: the smallest power of 2 from which on every n' (2n' <= T/4) has
    n' >= EST_MULT ell(n') (converged), else the largest (converged False: the trace is too short to see the
    length). *_se: jackknife over sequences. centre: "sequence" (each sequence about its own mean, its bias
    divided out) or "grand"."""
    kappa: float
    sigma2: float
    sigma2_lr: float
    sum_k_gamma_k: float
    kappa3_lr: float
    constant: float
    ell: float
    ell_se: float
    ell_C: float
    ell_B: float
    n: int
    converged: bool
    centre: str


def _block_moments(c, m, n, buf):
    """Per-sequence sums over all overlapping n-blocks of (d - n m)^2 and (d - n m)^3, d the block sums: two (S,)
    arrays and the block count. c: the prefix sums [0, cumsum(x)] (S, T + 1); m: the sequence's (or grand) mean
    (S, 1); buf: two (S, T) float64 scratch arrays, reused from one n to the next."""
    k = c.shape[1] - n
    e, e2 = buf[0][:, :k], buf[1][:, :k]
    np.subtract(c[:, n:], c[:, :-n], out=e)                              # d, the block sums
    np.subtract(e, n * m, out=e)                                         # d - n m
    np.multiply(e, e, out=e2)
    q2 = e2.sum(1)
    np.multiply(e2, e, out=e2)
    return q2, e2.sum(1), k


def second_order_inputs(x, centre="sequence"):
    """The second-order law's inputs and correlation length from increments x (S, T) float (S >= 2
    sequences, T >= 16). Returns SecondOrderInputs (see there); ell is NaN where sigma_LR^2 <= 0."""
    x = _traces(x)
    if centre not in ("sequence", "grand"):
        raise ValueError(f"centre must be 'sequence' or 'grand'; got {centre!r}")
    S, T = x.shape
    lw = np.vstack([np.ones((1, S)), loo_weights(S)])                     # row 0: all; then leave-one-out
    p1, p2 = x.sum(1), (x * x).sum(1)
    W = lw.sum(1)
    kap = (lw @ p1) / (W * T)
    sig2 = (lw @ p2) / (W * T) - kap ** 2
    cache = {}
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(x, 1)], 1)            # (S, T + 1), shared by every n
    m = x.mean(1, keepdims=True) if centre == "sequence" else np.full((S, 1), x.mean())
    buf = np.empty((S, T)), np.empty((S, T))

    def moments(n):                                                        # V(n), K3(n) under each weight row
        if n not in cache:
            q2, q3, cnt = _block_moments(c, m, n, buf)
            f2 = 1 - n / T if centre == "sequence" else 1.0
            f3 = (1 - n / T) * (1 - 2 * n / T) if centre == "sequence" else 1.0
            cache[n] = ((lw @ q2) / (W * cnt) / f2, (lw @ q3) / (W * cnt) / f3)
        return cache[n]

    def at(n):
        (v1, k1), (v2, k2) = moments(n), moments(2 * n)
        s2lr = (v2 - v1) / n
        skg = (v2 - 2 * v1) / 2
        k3 = (k2 - k1) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            c = 1 / 12 + 1.25 * (s2lr / kap ** 2) ** 2 - 2 / 3 * k3 / kap ** 3 - 2 * skg / kap ** 2
            f = np.where(s2lr > 0, kap ** 2 / s2lr, np.nan)
            ell_c, ell_b = np.abs(c) * f, np.abs(2 * skg / kap ** 2) * f
        return s2lr, skg, k3, c, np.fmax(ell_c, ell_b) * np.where(np.isnan(f), np.nan, 1.0), ell_c, ell_b

    ns = [2 ** j for j in range(1, 30) if 2 * 2 ** j <= T // 4]
    if not ns:
        raise ValueError(f"second_order_inputs: T = {T} is too short (needs T >= 16)")
    ok = [bool(np.isfinite(at(n)[4][0]) and n >= EST_MULT * at(n)[4][0]) for n in ns]
    i0 = next((i for i in range(len(ns)) if all(ok[i:])), None)
    pick, conv = (ns[-1], False) if i0 is None else (ns[i0], True)
    s2lr, skg, k3, c, ell, ell_c, ell_b = at(pick)
    ell_se = float(jackknife(ell[1:])) if np.all(np.isfinite(ell[1:])) else float("nan")
    return SecondOrderInputs(float(kap[0]), float(sig2[0]), float(s2lr[0]), float(skg[0]), float(k3[0]), float(c[0]),
                             float(ell[0]), ell_se, float(ell_c[0]), float(ell_b[0]), int(pick), bool(conv), centre)


def second_order_claim(L, inp):
    """Whether the second-order law claims at threshold L (float > 0), from the trace's SecondOrderInputs inp,
    and how accurately. Returns (claimed: bool, accuracy: float or None, why: str). Claimed where the length was
    measured (inp.converged) and L/kappa >= CORR_MULT (ell + CORR_Z ell_se): there its Var[W] is within
    CORR_ACCURACY of the exact value on every structure measured (docs/DEPENDENT.md)."""
    n = L / inp.kappa
    if not inp.converged:
        return False, None, (f"correlation length not measurable: ell({inp.n}) = {inp.ell:.3g} steps, more than "
                             f"n/{EST_MULT:g} at the longest blocks of the trace")
    up = inp.ell + CORR_Z * (inp.ell_se if math.isfinite(inp.ell_se) else float("inf"))
    if not n >= CORR_MULT * up:
        return False, None, (f"L/kappa = {n:.3g} < {CORR_MULT:g} x the correlation length {inp.ell:.3g} "
                             f"(+- {inp.ell_se:.2g}): the O(1) term is not yet small")
    return True, CORR_ACCURACY, ""
