"""Every window law at every eps for one head, out of sample, with one state per law per eps.

The laws are fitted on the even-numbered documents of a head and scored on the odd-numbered ones (the
held-out half), at every threshold L = ln(1/eps) of the scan. Laws (display order, `LAWS`):

  iid           two-moment renewal law: E[N] = L/kappa + mu2/(2 kappa^2), Var[W] = sigma^2 L/kappa^3
  marginal      exact first passage of the head's own marginal law (its increments resampled iid): the
                renewal measure of the hat-split lattice law (CELLS per min(sd X, kappa)), by one damped FFT
  dependent     autocorrelation-adjusted law, Geyer's tau: Var[W] = sigma^2 tau L/kappa^3
  second_order  dependent law + its O(1) term C_dep (renewal.second_order_var)
  finite_n      Var[W] = V_w(n)/kappa^2 at n = L/kappa (within-document V(n))
  mixture       the document-mixture law of the verdict (each document its own kappa_d; verdict.parts)
  three_cumulant  the lead law (a law of few statistics, claimed at every L): P(W >= w) = P(S_w <= L), with
                S_w the sum of the w increments up to a query row, from three measured functions of w (its
                mean, variance V(w) and third cumulant at the analysed rows, pooled over documents, so each
                document's own rate enters), through a three-moment shifted-gamma (Pearson III) law of S_w;
                beyond T/2 the three functions continue linearly. E[W] = sum_w P(S_w <= L) (no continuity
                correction is needed: the sum over integer w is exact given the law of each S_w)
  bootstrap     the reference: block-bootstrap walks of the fitted documents (predict.block_walks)

Measured (held-out half): mean and variance of W with jackknife-over-documents SEs, Kaplan-Meier where
some windows are censored (a measured variance only where the survival reaches 0), quantiles.

States (one meaning each), on the variance; D = log(Var_measured / Var_law) with its SE, claim c = the law's stated
relative accuracy of Var[W] at this L. The laws of ALL_DOCS (iid, marginal, the lead law: plug-in functionals of
document averages, nothing tuned) are tested on all documents: the windows of every document's rows T/2..T-1
against the law fitted on every document, SE the jackknife over the documents of D itself (the law's and the
windows' sampling errors share the documents and partly cancel), df S - 1; where those windows are censored, and
for the other laws, the held-out half against the fitted half (SE the two halves' jackknife SEs in quadrature,
Welch-Satterthwaite df). The printed ratio and its interval stay out of sample.
  holds         the 1 - 2 HOLD_LEVEL (90%) interval D -+ t SE inside [log(1 - c), log(1 + c)] and SE <= HOLD_SE
                (an equivalence test: a law off by more than its claim holds with chance at most HOLD_LEVEL)
  false         D outside [log(1 - c), log(1 + c)] by a p-value 2 P(t_df > distance / SE) that Holm's step-down
                rejects at family-wise level ALPHA over the m claimed and measured (head, law, eps) cells of the
                whole model: the chance that any law of a model is called false where it is within its claim is
                at most ALPHA. The lead law on all documents has a second statistic, its tail (`_tail_test`: the
                share of windows beyond its TAIL_P-quantile within TAIL_BAND times 1 - TAIL_P); its cell's p is
                2 min(p_var, p_tail) (Bonferroni over the two)
  not claimed   the law claims nothing at this L: its stated accuracy there is worse than CLAIM_MAX (or it
                gives no value, e.g. a negative second-order variance)
  undetermined  data reasons: Var[W] not measured (censored windows), or neither inside the claim with its
                interval nor rejected at the family level
Every law's SE is the jackknife of the law itself over the fitted documents, every fitted statistic refitted (the
second-order law's O(1) term C_dep included). Claims (`claim_table` prints their source): iid: 1.5 x Smith's
constant (the O(1) term it omits, a plug-in of three moments) relative to its value + CLAIM_FLOOR; dependent /
finite_n / mixture: 1.5 x the size of the O(1) term the law omits + 2 of its jackknife SEs, relative to the law's
value, + CLAIM_FLOOR (C_dep for the dependent laws, the inversion and overshoot part for finite_n: both rest on
kappa3_LR, a third cumulant of block sums, so a claim from the point estimate alone is too tight where it is noisy);
second_order: SECOND_ORDER_CLAIM where renewal says
in_regime and the fitted documents' own correlation length puts L in its regime (dependence.second_order_claim:
the length measurable, L/kappa >= 5 (ell + 2 SE); measured against the exact chain numerics on nine structures,
laws/second_order_regime.py, docs/DEPENDENT.md); marginal: the
lattice error MARGINAL_CLAIM (measured against exact.exact_first_passage in the tests); three_cumulant:
LEAD_CLAIM (its error measured on the calibration study's families with large samples, results/verdict);
bootstrap: 0 (resampling: its only error is sampling, inside SE_D) below T/2, not claimed beyond.
"""
import ctypes
import importlib.util
import json
import math
import os

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from foxwindow import outputs, parallel
from foxwindow.heads import dependence, predict, verdict
from foxwindow.laws import gates, lawtable, renewal
from foxwindow.models import traces as trace_files

__all__ = ["LAWS", "LEAD", "ALPHA", "CLAIM_MAX", "CLAIM_FLOOR", "CLAIM_MULT", "SECOND_ORDER_CLAIM", "MARGINAL_CLAIM",
           "LEAD_CLAIM", "HOLD_SE", "HOLD_LEVEL", "ALL_DOCS", "TEST_GROUPS", "TAIL_P", "TAIL_BAND", "MEAN_TOL", "CELLS",
           "MAX_CELLS", "TAIL_MAX_SHARE", "SUMMARY_EPS", "STATES", "Q",
           "MarginalPassage", "marginal_passage", "marginal_moments", "marginal_pmf", "BlockSums", "SUPPORT", "MIXED",
           "SHAPE",
           "lead_survival", "compile_fast_paths", "block_lengths", "evaluate", "assign_states", "summary",
           "noise_floor", "subsample_floor", "score", "score_table", "count_summaries", "states_table", "main"]

LAWS = {
    "iid": ("iid two-moment", "renewal law with iid increments: E[W] = L/kappa + mu2/(2 kappa^2) - 1, "
                              "Var[W] = sigma^2 L/kappa^3"),
    "marginal": ("marginal exact", "exact first passage of the head's own marginal law (increments resampled "
                                   "iid), lattice renewal numerics"),
    "dependent": ("dependent (tau)", "autocorrelation-adjusted law: Var[W] = sigma^2 tau L/kappa^3, Geyer's tau"),
    "second_order": ("second order", "dependent law + its O(1) term C_dep (renewal.second_order_var)"),
    "finite_n": ("finite n", "Var[W] = V(n)/kappa^2 at n = L/kappa, within-document V(n)"),
    "mixture": ("document mixture", "each document its own kappa_d (the verdict's law, verdict.parts)"),
    "three_cumulant": ("three-cumulant S_w law", "P(W >= w) = P(S_w <= L), S_w's measured mean, variance V(w) and "
                                           "third cumulant at the analysed rows, shifted-gamma law of S_w"),
    "bootstrap": ("block bootstrap", "the reference: block-bootstrap walks of the head's own documents"),
}
LEAD = "three_cumulant"
ALPHA = verdict.ALPHA
CLAIM_MAX = 0.50           # a law claims at L only where its stated accuracy of Var[W] is within 50% (a law whose
                           # variance is 1.5x or more below the truth is then beyond any claim it makes; docs/LAWS.md:
                           # size unchanged at 15% and 50% on the ten calibration families, power higher)
CLAIM_FLOOR = 0.01         # added to every expansion-based claim (the o(1) remainder, lattice effects)
CLAIM_MULT = 1.5           # the omitted O(1) term's size, x1.5
SECOND_ORDER_CLAIM = renewal.SECOND_ORDER_ACCURACY + CLAIM_FLOOR   # measured within 5 correlation lengths (renewal)
MARGINAL_CLAIM = 0.01
LEAD_CLAIM = 0.08           # its population error on iid, AR(1) and ARMA logits (docs/LAWS.md: per-head medians
                            # 0.012-0.149 on 128 documents, the largest within 0.94-1.04 on 512)
HOLD_SE = 0.10             # "holds" needs SE of log(Var ratio) <= 10%
TEST_GROUPS = 16           # the all-document test's jackknife: at most 16 groups of documents (its cost)
LEAD_GROUPS = 128          # the lead law's held-out SE: a jackknife over at most 128 groups of the fitted documents
                           # (each its own group up to 128, so up to 256 documents; beyond, its cells grew as S^2)
ALL_DOCS = ("iid", "marginal", "three_cumulant")   # laws whose state is tested on all documents
TAIL_P = 0.99              # the lead law's tail test: the measured share of windows beyond its 99% quantile ...
TAIL_BAND = (0.5, 2.0)     # ... over 1 - TAIL_P within these factors (its population range on the null families)
TAIL_MAX_SHARE = 0.05      # where that quantile is beyond T/2: at T/2 - 1, if the law's share beyond it is <= 5%
HOLD_LEVEL = 0.05          # "holds": the 1 - 2 HOLD_LEVEL interval of the Var ratio inside the claim (equivalence)
MEAN_TOL = 0.02            # a mean is "explained" within 2% + 2 SE
CELLS = 16                 # lattice cells per min(sd X, kappa) of the marginal law
MAX_CELLS = 1 << 21
SUMMARY_EPS = (1e-2, 1e-4)  # the eps attention uses: the head's summary
STATES = ("holds", "false", "not claimed", "undetermined")
Q = (0.05, 0.5, 0.95)


# ----------------------------------------------------------------------------- the marginal law


class MarginalPassage:
    """The first passage over one L of iid increments with a head's empirical marginal law, on the hat-split
    lattice of `marginal_passage` (spacing h, L = (K + 1/2) h, M cells with exponential damping r^M = 1e-10
    against aliasing). mean, var: E[W], Var[W] from the renewal measure; `ge(w)`: P(W >= w) = P(S_w <= L) for
    ints w (any shape), one O(M) sum per w; `quantile(p)`: W's p-quantile; `cdf(w)`: P(W <= w)."""

    def __init__(self, ph, z, K, M, r):
        self.K, self.M = K, M
        u = 1.0 / (1.0 - ph)
        rK = r ** K
        f = np.arange(len(ph))
        # x[K] of an inverse real FFT as one weighted sum over the half spectrum (numpy's irfft convention)
        wgt = np.full(len(ph), 2.0)
        wgt[0] = 1.0
        if M % 2 == 0:
            wgt[-1] = 1.0
        e = wgt * np.exp(2j * np.pi * f * K / M) / (M * rK * (1 - z))
        U = float(np.real(np.sum(u * e)))
        uU = float(np.real(np.sum(u * u * e)))
        # frequencies by decreasing |ph|: a term of ph^w e below 1e-16 of |e| is dropped, so a large w (a slow head)
        # sums only the prefix where |ph|^w is not negligible (the dropped terms add up to < 1e-10)
        order = np.argsort(-np.abs(ph), kind="stable")
        self._ph, self._e = ph[order], e[order]
        self._nlog = -np.log(np.maximum(np.abs(self._ph), 1e-300))        # increasing
        self.mean = U - 1
        self.var = 2 * uU - U - U * U
        self._cache = {}

    def ge(self, w):
        """P(W >= w) = P(S_w <= L) for ints w (any shape; 1 for w <= 0), float64 array."""
        w = np.asarray(w, dtype=np.int64)
        out = np.ones(w.shape)
        for v in np.unique(w[w > 0]):
            if v not in self._cache:
                n = int(np.searchsorted(self._nlog, 36.9 / v, side="right"))     # |ph|^v >= 1e-16
                val = float(np.real(np.sum(self._ph[:n] ** int(v) * self._e[:n])))
                self._cache[int(v)] = min(max(val, 0.0), 1.0)
            out[w == v] = self._cache[int(v)]
        return out

    def ge_upto(self, hi):
        """P(W >= w) for w = 1..hi, (hi,) float64: `ge` by one running product ph^w over the same terms (a
        multiply per term and w instead of a power; equal to `ge` within 1e-10), for a whole distribution."""
        n = np.searchsorted(self._nlog, 36.9 / np.arange(1, hi + 1), side="right")     # terms kept at w, decreasing
        cur = self._e[:n[0]].copy() if hi > 0 else self._e[:0]
        out = np.empty(hi)
        for i in range(hi):
            cur = cur[:n[i]] * self._ph[:n[i]]                                        # ph^(i+1) e, kept terms
            out[i] = float(np.real(cur.sum()))
        return np.clip(out, 0.0, 1.0)

    def cdf(self, w):
        """P(W <= w) for ints w (any shape)."""
        return 1.0 - self.ge(np.asarray(w, dtype=np.int64) + 1)

    def quantile(self, p):
        """Smallest w >= 0 with P(W <= w) >= p (an int), by bisection on the decreasing P(S_n <= L)."""
        sd = math.sqrt(max(self.var, 0.0)) if math.isfinite(self.var) else 0.0
        guess = max(self.mean, 0.0) + float(special.ndtri(p)) * sd                # the normal law's quantile
        lo, hi = max(int(guess - sd - 2), 0), int(guess + sd + 2)          # P(W <= lo - 1) < p <= P(W <= hi)
        while lo > 0 and self.cdf(lo - 1) >= p:
            lo, hi = max(lo - 2 * (hi - lo), 0), lo
        while self.cdf(hi) < p:
            lo, hi = hi, hi + 2 * (hi - lo) + 1
        lo = max(lo - 1, 0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.cdf(mid) >= p:
                hi = mid
            else:
                lo = mid
        return lo if self.cdf(lo) >= p else hi


def marginal_passage(x, Ls, cells=CELLS):
    """The exact first passage over each L of Ls (n,) for iid increments with the empirical law of x (any shape,
    float >= 0): the hat-split lattice law (spacing h = L/(K + 1/2), about `cells` per min(sd, kappa)), its
    renewal measure u = delta_0 + p * u by one exponentially damped FFT per L, E[N] = U(L), E[N^2] = 2 (u * U)(L)
    - U(L); the law of W by P(W >= w) = P(S_w <= L) on the same lattice. Returns a list over L of MarginalPassage,
    None where the lattice would exceed MAX_CELLS."""
    x = np.asarray(x, dtype=np.float64).ravel()
    kappa, sd = x.mean(), x.std()
    base = min(sd, kappa) / cells if sd > 0 else kappa / cells
    xmax = float(x.max())
    out = []
    for L in Ls:
        K = int(math.ceil(L / base))
        if K + 1 > MAX_CELLS // 2:
            out.append(None)
            continue
        h = L / (K + 0.5)
        M = sp_fft.next_fast_len(2 * (K + 1), real=True)                    # a fast length, not the next power of 2
        p = _lattice_cells(x, h, M, xmax)                                  # the cells the increments reach
        if len(p) == M:
            p[M - 1] = 0.0                                                 # steps beyond 2L: out at once
        p /= len(x)
        r = 1e-10 ** (1.0 / M)                                             # damping: aliasing r^M = 1e-10
        ph = sp_fft.rfft(p * r ** np.arange(len(p)), M)                    # sum_k a_k z^k, real a
        z = r * np.exp(-2j * np.pi * np.arange(len(ph)) / M)
        out.append(MarginalPassage(ph, z, K, M, r))
    return out


def marginal_pmf(mp, tol=1e-6):
    """The pmf block's entry of a MarginalPassage: dict(offset, p), p[i] = P(W = offset + i) from P(W >= w) on
    its lattice, the windows w = 0 .. the (1 - tol/10)-quantile + 1; the ends where P(W = w) <= tol dropped."""
    hi = mp.quantile(1.0 - tol / 10) + 1
    return _pmf_from_surv(mp.ge_upto(hi + 1), tol)                         # P(W >= w), w = 1..hi + 1


def marginal_moments(x, Ls, cells=CELLS):
    """E[W], Var[W] of `marginal_passage` at each L of Ls (n,): (mean (n,), var (n,)); NaN where the lattice
    would exceed MAX_CELLS."""
    laws = marginal_passage(x, Ls, cells)
    return (np.array([np.nan if m is None else m.mean for m in laws]),
            np.array([np.nan if m is None else m.var for m in laws]))


# ----------------------------------------------------------------------------- the lead law


def _reversed(a, hi, n):
    """Columns hi, hi - 1, ..., hi - n + 1 of a 2-D array (hi - n + 1 >= 0), as a view: a[:, hi + 1 - (1..n)]
    without a gather."""
    return a[:, hi - n + 1:hi + 1][:, ::-1]


def _conj_times(a, f):
    """conj(a) f, in that order at every size (f * conj(a) is computed so only where numpy reuses the temporary,
    from 256 KiB, and a complex product's rounding depends on the order): each row's numbers are its own."""
    out = np.conj(a)
    np.multiply(out, f, out=out)
    return out


BLOCK_SUM_ROWS = 16        # BlockSums: documents a block


def _block_sums(x, r0):
    """BlockSums' per-document numbers of the rows of x (S, T): kappa_d (S,), q1, q2, q3 (S, T // 2)."""
    S, T = x.shape
    nw = T // 2
    kappa_d = x.sum(1) / T
    t = np.arange(T + 1, dtype=np.float64)                               # (float: no cast a cell)
    c = np.empty((S, T + 1))
    c[:, 0] = 0.0
    np.cumsum(x, 1, out=c[:, 1:])
    c -= kappa_d[:, None] * t[None, :]
    c -= c[:, r0 + 1:].mean(1, keepdims=True)
    c2 = c * c
    w = np.arange(1, nw + 1)
    if r0 >= nw:
        # the rows' terms a^i[t], t = r0+1..T, against c^j[t - w], t - w in 1..T-1 (w <= nw <= r0): both shifted
        # to start at 0, the sum at w is the correlation at lag r0 - w in 0..r0-1, and no term wraps on a
        # transform of T - 1 points (a fast length: T itself where T is a power of two)
        n = sp_fft.next_fast_len(T - 1, real=True)
        F1, F2 = sp_fft.rfft(c[:, 1:T], n), sp_fft.rfft(c2[:, 1:T], n)
        A1, A2 = sp_fft.rfft(c[:, r0 + 1:], n), sp_fft.rfft(c2[:, r0 + 1:], n)

        def corr(a, f, b=None, g=None):     # sum_t a[t] f[t - w] (- sum_t b[t] g[t - w]), w = 1..nw
            spec = _conj_times(a, f) if b is None else _conj_times(a, f) - _conj_times(b, g)
            return _reversed(sp_fft.irfft(spec, n), r0 - 1, nw)
    else:
        # lags up to nw only: a transform of T + 1 + nw points (a fast length) keeps every wrapped term of the
        # circular correlation on the zero padding; only c, c^2 and c, c^2 on the rows are transformed
        n = sp_fft.next_fast_len(T + 1 + nw, real=True)
        mask = (t >= r0 + 1).astype(np.float64)
        F1, F2 = sp_fft.rfft(c, n), sp_fft.rfft(c2, n)
        A1, A2 = sp_fft.rfft(c * mask, n), sp_fft.rfft(c2 * mask, n)

        def corr(a, f, b=None, g=None):     # sum_t a[t] f[t - w] (- sum_t b[t] g[t - w]), w = 1..nw
            spec = _conj_times(f, a) if b is None else _conj_times(f, a) - _conj_times(g, b)
            return sp_fft.irfft(spec, n)[:, w]

    cs = np.empty((S, T + 2))
    cs[:, 0] = 0.0

    def masked(ci):                         # sum over t - w: a window of the prefix sums of c^i
        np.cumsum(ci, 1, out=cs[:, 1:])
        if r0 + 1 - nw >= 0:
            return _reversed(cs, T, nw) - _reversed(cs, r0, nw)
        return cs[:, T + 1 - w] - cs[:, r0 + 1 - w]

    c3 = c2 * c                                                          # (a product: no pow pass)
    sa1, sa2, sa3 = (a[:, r0 + 1:].sum(1)[:, None] for a in (c, c2, c3))
    q1 = sa1 - masked(c)                                                 # sum S~, (S, nw)
    q2 = sa2 - 2 * corr(A1, F1) + masked(c2)
    q3 = sa3 - 3 * corr(A2, F1, A1, F2) - masked(c3)
    return kappa_d, q1, q2, q3


class BlockSums:
    """Moments of S_w = the w increments up to row r (inclusive), rows r0..T-1, w = 1..T//2, per document.

    Per document d, with c~ the cumulative sum less its trend kappa_d t and S~_w = S_w - kappa_d w, the power
    sums of S~_w over the rows are correlations of c~, c~^2, c~^3 at lag w (one FFT each); `moments` turns
    them into pooled moments of S_w under any document weights (the documents' own rates enter through the
    shifts kappa_d w)."""

    def __init__(self, x, r0):
        S, T = x.shape
        sums = np.empty(S), *(np.empty((S, T // 2)) for _ in range(3))          # kappa_d, q1, q2, q3
        # BLOCK_SUM_ROWS documents at a time: each row's numbers are its own (_conj_times), and a block's arrays
        # stay in cache through the dozen passes over them (0.044 against 0.055 s for 128 x 8192 in one pass)
        for a in range(0, S, BLOCK_SUM_ROWS):
            b = min(a + BLOCK_SUM_ROWS, S)
            for out, v in zip(sums, _block_sums(x[a:b], r0)):
                out[a:b] = v
        self._set(T - r0, T // 2, *sums)

    def _set(self, R, nw, kappa_d, q1, q2, q3):
        self.S, self.R, self.nw = len(kappa_d), R, nw
        self.w, self.ones = np.arange(1, nw + 1), float(R)
        self.kappa_d, self.q1, self.q2, self.q3 = kappa_d, q1, q2, q3

    def rows(self, idx):
        """The BlockSums of documents idx (an index array) alone: every sum here is a document's own (the
        transforms, cumsums and sums are taken row by row), so these are the numbers of BlockSums(x[idx], r0) up to
        rounding (identical on the usual shapes; numpy may sum a row's mean in an order set by the array's shape)."""
        out = object.__new__(BlockSums)
        out._set(self.R, self.nw, self.kappa_d[idx], self.q1[idx], self.q2[idx], self.q3[idx])
        return out

    @classmethod
    def from_sums(cls, T, r0, kappa_d, q1, q2, q3):
        """The BlockSums of documents of T tokens, rows r0.. whose per-document sums kappa_d (S,) and q1, q2, q3
        (S, T // 2) were formed already (docsplit.doc_parts: BlockSums of blocks of documents, each row its own)."""
        out = object.__new__(cls)
        out._set(T - r0, T // 2, kappa_d, q1, q2, q3)
        return out

    def moments(self, wts, cols=None):
        """Pooled mean, variance, third central moment of S_w (B, nw) under document weights wts (B, S); cols: only
        those block lengths (an index array into w = 1..nw: (B, len(cols)) each; None: every w).

        Each document's power sums of S_w - m0 around a reference mean m0 (the equal-weight pooled mean) are
        formed once; the moments under every weight row are then three matrix products and a shift from m0
        to that row's own mean (small beside the spread, so no cancellation)."""
        q1, q2, q3, w = self.q1, self.q2, self.q3, self.w
        if cols is not None:
            q1, q2, q3, w = q1[:, cols], q2[:, cols], q3[:, cols], w[cols]
        R, w = self.R, w[None, :]
        N = wts.sum(1)[:, None] * R
        shift = self.kappa_d[:, None] * w                                    # (S, nw)
        s1 = q1 + R * shift                                                  # sum S per document
        m = (wts @ s1) / N                                                   # pooled mean
        m0 = s1.sum(0) / (self.S * R)                                        # reference mean, (nw,)
        e = shift - m0                                                       # S - m0 = S~ + e
        e2 = e * e
        p1 = q1 + R * e
        p2 = q2 + 2 * e * q1 + R * e2
        p3 = q3 + 3 * e * q2 + 3 * e2 * q1 + R * (e2 * e)
        w1, w2, w3 = wts @ p1, wts @ p2, wts @ p3
        u = m - m0                                                           # (B, nw)
        u2 = u * u
        v = (w2 - 2 * u * w1 + u2 * N) / N
        m3 = (w3 - 3 * u * w2 + 3 * u2 * w1 - (u2 * u) * N) / N
        return m, v, m3

    def doc_moments(self):
        """Each document's own mean, variance, third central moment of S_w over its rows, (S, nw) each."""
        R = self.R
        a1, a2, a3 = self.q1 / R, self.q2 / R, self.q3 / R
        return (self.kappa_d[:, None] * self.w[None, :] + a1, a2 - a1 * a1,
                a3 - 3 * a1 * a2 + 2 * a1 ** 3)


TAIL_E = 45.0            # a gamma cell whose Chernoff tail bound is below e^-45 (3e-20) is its limit, 0 or 1


def _gamma_tails(k, y, exact, upper=False):
    """special.gammainc(k, y) (upper: gammaincc) for arrays k > 0, y >= 0 of one shape, evaluated only where the
    Chernoff bound of the far tail, exp(-k (r - 1 - ln r)) with r = y / k, is above e^-TAIL_E or `exact` (bool,
    same shape) asks for it; elsewhere the limit (0 below the bulk, 1 above; the reverse for upper), off by less
    than that bound (3e-20)."""
    r = y / k
    with np.errstate(divide="ignore", invalid="ignore"):
        far = (k * (r - 1 - np.log(r)) > TAIL_E) & ~exact                  # r = 0: log 0 = -inf, far
    out = ((r < 1) if upper else (r > 1)).astype(np.float64)
    near = ~far
    out[near] = (special.gammaincc if upper else special.gammainc)(k[near], y[near])
    return out


def _s_parts(m, v, m3):
    """The parts of _s_cdf's cells that do not depend on L (arrays of m's shape): sd, the skewness g, the
    conditioned cells that are always evaluated (SUPPORT; None without it), whether every v > 0, and f0, the
    conditioning P(S <= 0) of those kept cells (NaN elsewhere; None without SUPPORT): it does not depend on L, so a
    cell evaluated at several L computes it once (two incomplete gammas a cell become one)."""
    sd = np.sqrt(np.maximum(v, 1e-300))
    f0 = None
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        g = m3 / sd ** 3
        keep = ((g > 1e-3) & (m - 2 * sd / g < 0) & (m < math.sqrt(2 * TAIL_E) * sd)) if SUPPORT else None
        if keep is not None:
            f0 = np.full(m.shape, np.nan)
            i = np.nonzero(keep & (v > 0))
            f0[i] = _support_f0(m[i], v[i], g[i])
    return sd, g, keep, bool(np.all(v > 0)), f0


def _support_f0(m, v, g):
    """P(S <= 0) of the shifted gamma of mean m, variance v > 0 and skewness g > 1e-3 (1-D arrays): _s_cdf_cells'
    f0, the same operations, exact where it is not near 0."""
    k = 4 / g ** 2
    y0 = np.maximum(k - (m / np.sqrt(v)) * np.sqrt(k), 0)
    return _gamma_tails(k, y0, y0 >= k)


def _s_cdf(L, m, v, m3, parts=None):
    """P(S <= L) for a shifted-gamma (Pearson III) law with mean m, variance v, third central moment m3
    (arrays of one shape), the normal law where the skewness is within 1e-3 of 0; a right-skewed law whose
    shift is below 0 is conditioned on S >= 0 (SUPPORT). Cells far in a tail (bound below e^-TAIL_E) are
    their limit, 0 or 1, without being evaluated. parts: _s_parts(m, v, m3) when the caller has them (the same
    cells at several L; None: formed here)."""
    sd, g, keep, vpos, f0 = _s_parts(m, v, m3) if parts is None else parts
    z = (L - m) / sd
    # Chernoff: the tail beyond z of a standardised gamma of skewness g (and of the normal law) is at most
    # exp(-z^2 / (2 + max(z g, 0))); a conditioned cell (SUPPORT) whose P(S <= 0) may be above e^-TAIL_E (its
    # mean less than sqrt(2 TAIL_E) sd above 0) is evaluated
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        bound = z * g                                       # TAIL_E (2 + max(z g, 0)), in place
        np.maximum(bound, 0, out=bound)
        bound += 2
        bound *= TAIL_E
        far = z * z > bound
        if keep is not None:
            far &= ~keep
    out = (z > 0).astype(np.float64)
    near = ~far
    out[near] = _s_cdf_cells(L, m[near], v[near], m3[near], sd[near], z[near], g[near],
                             None if f0 is None else f0[near])
    return out if vpos else np.where(v > 0, out, (m <= L).astype(np.float64))


def _s_cdf_cells(L, m, v, m3, sd=None, z=None, g=None, f0=None):
    """_s_cdf on the cells it evaluates (1-D arrays), each tail cell of the gamma laws by _gamma_tails; sd, z, g:
    those of _s_cdf for these cells when the caller has them (None: formed here, the same numbers); f0: _s_parts'
    f0 of these cells (NaN where not formed there, then formed here)."""
    if sd is None:
        sd = np.sqrt(np.maximum(v, 1e-300))
        z = (L - m) / sd
    out = (z > 0).astype(np.float64)
    live = (np.abs(z) < 60) & (v > 0)
    zl, gl = z[live], (m3[live] / sd[live] ** 3 if g is None else g[live])
    pos, neg = gl > 1e-3, gl < -1e-3
    o = np.empty_like(zl)
    nrm = ~(pos | neg)
    o[nrm] = special.ndtr(zl[nrm])
    ml = m[live]
    k = 4 / gl[pos] ** 2
    exact = np.zeros(len(k), bool)
    if SUPPORT:
        # S_w >= 0: a right-skewed law whose shift m - 2 sd/g is below 0 is conditioned on S >= 0; its P(S <= 0)
        # f0 exact where it is not near 0, and the cell exact where 1 - f0 < 1e-3 (its tail bound divided by it)
        below = ml[pos] - 2 * np.sqrt(v[live][pos]) / gl[pos] < 0
        bad = np.nonzero(pos)[0][below]
        vb = v[live][bad]
        f0 = np.full(len(bad), np.nan) if f0 is None else f0[live][bad]
        new = np.isnan(f0)
        f0[new] = _support_f0(ml[bad][new], vb[new], gl[bad][new])
        exact[below] = 1 - f0 < 1e-3
    o[pos] = _gamma_tails(k, np.maximum(k + zl[pos] * np.sqrt(k), 0), exact)       # (L - shift)/theta
    if SUPPORT:
        o[bad] = np.clip((o[bad] - f0) / np.maximum(1 - f0, 1e-300), 0, 1)
    k = 4 / gl[neg] ** 2
    o[neg] = _gamma_tails(k, np.maximum(k - zl[neg] * np.sqrt(k), 0), np.zeros(len(k), bool), upper=True)
    out[live] = o
    return np.where(v > 0, out, (m <= L).astype(np.float64))


SUPPORT = True            # the shifted-gamma law of S_w kept on S_w >= 0
MIXED = False             # the lead law's variant: pooled moments (False) or a mixture of documents (True)
SHAPE = "gamma"           # the law of S_w given its three moments: "gamma" (Pearson III, the lead law) or "lognormal"


def _lognormal_cdf(L, m, v, m3):
    """P(S <= L) for the shifted lognormal with mean m, variance v, third central moment m3 (arrays of one shape;
    reflected where the skewness g < 0, the normal law where |g| <= 1e-3), conditioned on S >= 0 where g > 1e-3 and
    the shift is below 0 (SUPPORT), as the gamma law is: SHAPE = "lognormal", a variant measured and not adopted
    (docs/LAWS.md). With u = sqrt(omega - 1) the real root of u^3 + 3u = |g| (Cardano), sigma^2 = ln omega,
    e^mu = sd / sqrt(omega (omega - 1)) and the shift m -+ e^mu sqrt(omega)."""
    sd = np.sqrt(np.maximum(v, 1e-300))
    with np.errstate(all="ignore"):
        g = m3 / sd ** 3
        ag = np.abs(g)
        h = np.sqrt(ag * ag / 4 + 1)
        u = np.cbrt(ag / 2 + h) + np.cbrt(ag / 2 - h)
        om = 1 + u * u
        sig = np.sqrt(np.log(om))
        emu = sd / np.sqrt(om * (om - 1))
        mu = np.log(emu)
        right = g >= 0
        c = np.where(right, m - emu * np.sqrt(om), m + emu * np.sqrt(om))

        def cdf(x):                                     # P(S <= x) of the unconditioned law
            up = special.ndtr((np.log(np.maximum(x - c, 0)) - mu) / sig)
            down = special.ndtr((mu - np.log(np.maximum(c - x, 0))) / sig)
            return np.where(right, up, down)
        out = cdf(L)
        if SUPPORT:
            bad = (g > 1e-3) & (c < 0)
            f0 = cdf(0.0)
            out = np.where(bad, np.clip((out - f0) / np.maximum(1 - f0, 1e-300), 0, 1), out)
        out = np.where(ag <= 1e-3, special.ndtr((L - m) / sd), out)
    return np.where(v > 0, out, (m <= L).astype(np.float64))


def lead_survival(bs, Ls, wts, kappa, w_cap=predict.N_CAP, mixed=None):
    """P(W >= w) for w = 1..w_max at each L (list over L of (B, w_max) arrays) under document weights
    wts (B, S), from BlockSums bs; beyond T/2 the mean, variance and third cumulant continue linearly (slopes
    over the last half of the measured range). kappa: the fitted rate (sets how far to sum)."""
    mixed = MIXED if mixed is None else mixed
    if SHAPE not in ("gamma", "lognormal"):
        raise ValueError(f"laws.SHAPE must be 'gamma' or 'lognormal', not {SHAPE!r}")
    nw = bs.nw
    h = nw // 2
    if mixed == "rates":                       # each document its own mean, the documents' average shape
        m, v, m3 = bs.doc_moments()
        v = np.broadcast_to(v.mean(0), v.shape)
        m3 = np.broadcast_to(m3.mean(0), m3.shape)
    elif mixed:
        m, v, m3 = bs.doc_moments()
    # the moments at w = T/4 and T/2 set the range; pooled, they come first and then only the block lengths the
    # cells read (a fast head's cells stop far below T/2: the moments of every w were up to 12% of a head's time)
    ends = [a[:, [h - 1, nw - 1]] for a in (m, v, m3)] if mixed else bs.moments(wts, [h - 1, nw - 1])
    sl = [(a[:, 1] - a[:, 0]) / (nw - h) for a in ends]
    tops = []
    for L in Ls:
        n_L = L / kappa
        v_L = float(ends[1][:, 1].max()) + max(float(sl[1].max()), 0) * max(n_L - nw, 0)
        tops.append(int(min(w_cap, max(64, 1.2 * n_L + 30 * math.sqrt(max(v_L, 1e-12)) / kappa + 64))))
    # the cells up to the largest w_max once: a cell's m, v, m3 (and sd, skewness) depend on w alone, not on L
    w_top = max(tops, default=0)
    if not mixed:
        m, v, m3 = bs.moments(wts, slice(0, min(w_top, nw)))
    if w_top <= nw:
        mm, vv, tt = m[:, :w_top], v[:, :w_top], m3[:, :w_top]
    else:
        e = np.arange(nw + 1, w_top + 1)[None, :] - nw
        mm = np.concatenate([m, m[:, -1:] + sl[0][:, None] * e], 1)
        vv = np.concatenate([v, v[:, -1:] + np.maximum(sl[1], 0)[:, None] * e], 1)
        tt = np.concatenate([m3, m3[:, -1:] + sl[2][:, None] * e], 1)
    sd, g, keep, _, f0 = _s_parts(mm, vv, tt)
    nonpos = np.flatnonzero(~np.all(vv > 0, axis=0))
    first_nonpos = int(nonpos[0]) if len(nonpos) else w_top                 # columns before it: every v > 0
    kernel = _surv[0] if _surv and gates.COMPILED and not mixed and SHAPE == "gamma" else None
    out = []
    for L, w_max in zip(Ls, tops):
        c = slice(0, w_max)
        if kernel is not None:              # the same cells in one compiled pass (compile_fast_paths)
            s = np.empty((mm.shape[0], w_max))
            kernel(float(L), mm[:, c], vv[:, c], sd[:, c], g[:, c],
                   keep[:, c] if keep is not None else np.zeros((1, 1), np.bool_),
                   f0[:, c] if f0 is not None else np.zeros((1, 1)), keep is not None, w_max <= first_nonpos, s)
            out.append(s)
            continue
        if SHAPE == "lognormal":
            s = _lognormal_cdf(L, mm[:, c], vv[:, c], tt[:, c])
        else:
            s = _s_cdf(L, mm[:, c], vv[:, c], tt[:, c],
                       (sd[:, c], g[:, c], None if keep is None else keep[:, c], w_max <= first_nonpos,
                        None if f0 is None else f0[:, c]))
        if mixed:
            s = (wts @ s) / wts.sum(1)[:, None]
        out.append(np.minimum.accumulate(np.clip(s, 0, 1), axis=1))
    return out


def _surv_kernel(gammainc, gammaincc, ndtr, jit=lambda f: f):
    """lead_survival's cells at one L as one loop (compile_fast_paths compiles it with jit = numba.njit), given
    scalar gammainc, gammaincc and ndtr (scipy.special.cython_special's: the functions behind the ufuncs): for each
    weight row b and w, _s_cdf's cell (the Chernoff tail test, the limit or the shifted-gamma / normal value, the
    conditioning on S >= 0 of SUPPORT, the cell of a v <= 0 column) with _s_cdf's operations in its order, then the
    clip to [0, 1] and the running minimum along w, written to out (B, w_max); once a row's minimum is 0 and no later
    cell of it can be NaN (finite m, v, g), the rest of the row is 0 without being evaluated. It differs from the
    numpy path only where a gamma cell's tail bound k (r - 1 - ln r) lies within rounding of TAIL_E (the compiled
    log may differ from numpy's in the last bit), by less than that bound, e^-TAIL_E. Returns loop(L, m, v, sd, g,
    keep, f0, use_keep, vpos, out) (m3 enters through the skewness g of _s_parts; f0 its conditioning P(S <= 0) of
    the kept cells, NaN where not formed there, read only where use_keep)."""
    tail_e, support = TAIL_E, SUPPORT

    @jit
    def _max0(a):                                   # np.maximum(a, 0): NaN stays NaN
        return a if (a > 0.0 or a != a) else 0.0

    @jit
    def _zero_beyond(m, v, g, b, w0, n):            # no cell of row b from w0 on can be NaN: the minimum stays 0
        for w in range(w0, n):                      # (finite m, v, g with |g| <= 1e150 give a cell in [0, 1])
            if not (abs(m[b, w]) < np.inf and abs(v[b, w]) < np.inf and abs(g[b, w]) <= 1e150):
                return False
        return True

    @jit
    def _tail(k, y, exact, upper):                  # _gamma_tails on one cell
        r = y / k
        t = k * (r - 1.0 - np.log(r))
        if t > tail_e and not exact:
            if upper:
                return 1.0 if r < 1.0 else 0.0
            return 1.0 if r > 1.0 else 0.0
        return gammaincc(k, y) if upper else gammainc(k, y)

    @jit
    def _cell(L, m, v, z, g, f0c):                  # _s_cdf_cells on one cell (f0c: _s_parts' f0 or NaN)
        o = 1.0 if z > 0.0 else 0.0
        if abs(z) < 60.0 and v > 0.0:
            if g > 1e-3:
                k = 4.0 / (g * g)
                exact, bad, f0 = False, False, 0.0
                if support and m - 2.0 * np.sqrt(v) / g < 0.0:
                    bad = True
                    if f0c == f0c:
                        f0 = f0c
                    else:
                        y0 = _max0(k - (m / np.sqrt(v)) * np.sqrt(k))
                        f0 = _tail(k, y0, y0 >= k, False)
                    exact = 1.0 - f0 < 1e-3
                o = _tail(k, _max0(k + z * np.sqrt(k)), exact, False)
                if bad:
                    d = 1.0 - f0
                    o = (o - f0) / (d if (d > 1e-300 or d != d) else 1e-300)
                    o = 0.0 if o < 0.0 else (1.0 if o > 1.0 else o)
            elif g < -1e-3:
                k = 4.0 / (g * g)
                o = _tail(k, _max0(k - z * np.sqrt(k)), False, True)
            else:
                o = ndtr(z)
        if not v > 0.0:
            o = 1.0 if m <= L else 0.0
        return o

    def loop(L, m, v, sd, g, keep, f0, use_keep, vpos, out):
        B, n = out.shape
        for b in range(B):
            run = 0.0
            for w in range(n):
                mm, vv, s, gg = m[b, w], v[b, w], sd[b, w], g[b, w]
                z = (L - mm) / s
                bound = _max0(z * gg)
                bound += 2.0
                bound *= tail_e
                far = z * z > bound
                if use_keep and keep[b, w]:
                    far = False
                if far:
                    val = 1.0 if z > 0.0 else 0.0
                else:
                    val = _cell(L, mm, vv, z, gg, f0[b, w] if use_keep else np.nan)
                if not vpos and not vv > 0.0:
                    val = 1.0 if mm <= L else 0.0
                val = 0.0 if val < 0.0 else (1.0 if val > 1.0 else val)   # np.clip: NaN stays NaN
                if w == 0 or val < run or (val != val and run == run):    # np.minimum.accumulate (NaN stays)
                    run = val
                out[b, w] = run
                if run == 0.0 and _zero_beyond(m, v, g, b, w + 1, n):
                    out[b, w + 1:] = 0.0
                    break
    return loop


def _moments_from_surv(s):
    """E[W], Var[W] from P(W >= w), w = 1.. (..., n_w)."""
    w = np.arange(1, s.shape[-1] + 1)
    e = s.sum(-1)
    e2 = (s * (2 * w - 1)).sum(-1)
    return e, e2 - e * e


def _quantiles_from_surv(s):
    """5/50/95% quantiles of W from P(W >= w), w = 1.. (n_w,)."""
    cdf = 1 - np.concatenate([s[1:], [0.0]])                               # P(W <= w), w = 1..
    cdf = np.concatenate([[1 - s[0]], cdf])                                # w = 0..
    return [int(np.searchsorted(cdf, q - 1e-12)) for q in Q]


def _pmf_from_surv(s, tol=1e-6):
    ge = np.concatenate([[1.0], s, [0.0]])                                 # P(W >= w), w = 0..
    p = ge[:-1] - ge[1:]
    nz = np.nonzero(p > tol)[0]
    if not len(nz):
        return dict(offset=0, p=[1.0])
    return dict(offset=int(nz[0]), p=[float(v) for v in p[nz[0]:nz[-1] + 1]])


# ----------------------------------------------------------------------------- measured


def _measured(W, C):
    """Held-out windows W, C (S, R) at one L: dict of mean, var, SEs, censored share, quantiles, bound."""
    S = W.shape[0]
    cens = float(C.mean())
    out = dict(censored_share=cens)
    if cens == 0:
        s1, s2 = predict.window_sums(W)
        R = W.shape[1]
        mean = s1.sum() / (S * R)
        var = s2.sum() / (S * R) - mean ** 2
        ml = (s1.sum() - s1) / ((S - 1) * R)
        vl = (s2.sum() - s2) / ((S - 1) * R) - ml ** 2
        q = predict.int_quantiles(W, Q)
        out.update(mean=float(mean), var=float(var), mean_se=float(dependence.jackknife(ml)),
                   var_se=float(dependence.jackknife(vl)), quantiles={str(k): float(v) for k, v in zip(Q, q)},
                   var_loo=vl, mean_loo=ml, bound=False)
        return out
    km = predict.kaplan_meier(W, C)
    loo = predict.kaplan_meier_loo_means(W, C)                            # each document left out
    out.update(mean=km.mean, var=None, mean_se=float(dependence.jackknife(loo)), var_se=None,
               quantiles={"0.05": None, "0.5": km.q50 if math.isfinite(km.q50) else None, "0.95": None},
               var_loo=None, mean_loo=loo, bound=bool(km.mean_is_bound))
    return out


# ----------------------------------------------------------------------------- all laws, one head


def _safe(f, *a):
    try:
        v = f(*a)
    except (ValueError, ZeroDivisionError, OverflowError):
        return float("nan")
    v = getattr(v, "var", v)
    return float(v) if v is not None else float("nan")


def _claim_expansion(omitted, var):
    """Stated relative accuracy of a variance law that omits an O(1) term of size `omitted` (floats)."""
    if not (math.isfinite(omitted) and math.isfinite(var) and var > 0):
        return float("nan")
    return CLAIM_MULT * abs(omitted) / var + CLAIM_FLOOR


def _fit_stats(x, sums=None, rows=None):
    """The statistics the moment laws need, from documents x (S, T): dict of floats and arrays. sums, rows: x is
    documents rows of the head whose dependence.DocSums are given (its lag sums are read there)."""
    S, T = x.shape
    kappa = float(x.mean())
    sigma2 = float(x.var())
    x2 = x * x
    mu3 = float(np.mean(np.multiply(x2, x, out=x2)))                          # E X^3 (no pow pass)
    te = dependence.tau_estimate(x, "sequence", sums=sums, rows=rows)
    tau = te.tau
    skg = sigma2 * float(np.sum(np.arange(1, te.cut) * te.rho[1:te.cut]))
    return dict(kappa=kappa, sigma2=sigma2, mu3=mu3, tau=tau, tau_loo=te.tau_loo, sum_k_gamma=skg, cut=te.cut)


def _second_order_vars(kappa, sigma2_lr, cdep, Ls):
    """renewal.second_order_var(kappa, sigma2_lr, ., ., L).var at every L of Ls (n,) at once, given its constant
    cdep (renewal.second_order_constant of the same arguments, NaN where it could not be formed): the leading law
    sigma2_lr L / kappa^3 plus cdep, the same operations in the same order, so the same numbers. NaN where
    second_order_var raises (a kappa or sigma2_lr it refuses, a variance <= 0). (n,) float64."""
    Ls = np.asarray(Ls, dtype=np.float64)
    kappa, sigma2_lr, cdep = float(kappa), float(sigma2_lr), float(cdep)
    if not (0 < kappa < math.inf and 0 <= sigma2_lr < math.inf) or math.isnan(cdep):
        return np.full(len(Ls), np.nan)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            v = sigma2_lr * Ls / kappa ** 3 + cdep
    except OverflowError:                                   # kappa ** 3 beyond the floats, as second_order_var
        return np.full(len(Ls), np.nan)
    return np.where((v > 0) & (Ls > 0) & np.isfinite(Ls), v, np.nan)


def _second_order_loo(xf, st, k_loo, s2_loo, bs, lw, n3, Ls, sums=None, fit=None):
    """The second-order law's Var[W] (Sf, n) with each fitted document dropped in turn, every fitted statistic
    refitted (kappa, sigma^2, tau at the full fit's Geyer cut, kappa3_LR from BlockSums bs at block length n3
    under the leave-one-out weights lw (Sf, Sf), Bartlett's sum of k gamma_k): its O(1) term C_dep is fitted
    and its sampling error is part of the law's. NaN where a refit gives no positive variance. sums, fit: the head's
    dependence.DocSums and the fitted rows xf of it (its lag sums read there: a longer transform than cut - 1
    lags needs, so equal to rounding)."""
    Sf, T = xf.shape
    cut = st["cut"]
    if sums is not None:                # the head's lag sums (Geyer's, up to MAX_LAG), the fitted rows
        xx = sums.lag_sums(min(dependence.MAX_LAG, T - 1))[fit][:, :cut]
    else:
        xx = renewal.lag_sums(xf, cut - 1, "sequence")                     # (Sf, cut)
    nk = T - np.arange(cut)
    g = (xx.sum(0, keepdims=True) - xx) / (nk * (Sf - 1))                   # each document left out
    rho = g / g[:, :1]
    skg = s2_loo * (rho[:, 1:] * np.arange(1, cut)).sum(1)
    k3 = bs.moments(lw, [n3 - 1])[2][:, 0] / n3
    out = np.full((Sf, len(Ls)), np.nan)
    cdep = np.array([_safe(renewal.second_order_constant, k_loo[j], s2_loo[j] * st["tau_loo"][j], k3[j], skg[j])
                     for j in range(Sf)])
    for j in range(Sf):
        out[j] = _second_order_vars(k_loo[j], s2_loo[j] * st["tau_loo"][j], cdep[j], Ls)
    return out, cdep, k3


def _upper(value, loo):
    """|value| + 2 x its jackknife SE from leave-one-document-out values loo (n,): the size of a fitted O(1) term
    that a claim is stated from (a claim from the point estimate alone is too tight wherever the term is noisy;
    the kappa3_LR of 16 documents moves C_dep by 2x on iid gates). Inf where loo is not finite."""
    loo = np.asarray(loo, dtype=np.float64)
    if not (math.isfinite(value) and np.all(np.isfinite(loo))):
        return float("inf")
    return abs(value) + 2 * float(dependence.jackknife(loo))


def block_lengths(T, nL):
    """The block lengths of the per-law evaluation's V(n) for documents of T tokens: the grid with every n_L =
    L/kappa of nL (an array; kappa of the fitted half)."""
    return dependence.n_grid(T // 2, np.round(nL))


def evaluate(x, Ls, rng, eps_list=None, pmf_L=None, windows=None, all_docs=True, sums=None, block_sums=None):
    """Every law of LAWS fitted on documents 0, 2, 4, ... of increments x (S, T) and scored on 1, 3, 5, ... at
    thresholds Ls (n,). rng: numpy Generator (the bootstrap's walks). pmf_L: the L of the pmf block (None:
    none). windows: (W, censored) of predict.window_rows(x, Ls, T // 2), every document, when the caller has
    them (None: computed here). all_docs: also the state's test of the laws of ALL_DOCS on all documents
    (`test_all`). sums: dependence.DocSums(x) shared with the verdict (None: formed here where needed).
    block_sums: BlockSums(x, T // 2) of every document when the caller has them (docsplit; None: formed here).
    Returns dict(at=[record per L], pmf=..., cells=[...]) where each record's laws carry the
    numbers (state and claim are set by `assign_states` over the whole model)."""
    S, T = x.shape
    fit, test = np.arange(0, S, 2), np.arange(1, S, 2)
    xf = x[fit]                             # (a copy: the held-out half is read through its windows alone)
    Sf = len(fit)
    Ls = np.asarray(Ls, dtype=np.float64)
    r0 = T // 2
    if windows is None:
        Wt, Ct = predict.window_rows(x[test], Ls, r0)
        Wf_, Cf_ = predict.window_rows(xf, Ls, r0)
    else:
        Wt, Ct, Wf_ = windows[0][test], windows[1][test], windows[0][fit]
    meas = [_measured(Wt[:, :, k], Ct[:, :, k]) for k in range(len(Ls))]
    covers = {}                             # k: [(law, coverage from the counts of L_k's windows)], scored at the end
    lw = dependence.loo_weights(Sf)
    p1, p2 = xf.sum(1), (xf * xf).sum(1)
    kappa, sigma2 = float(xf.mean()), float(xf.var())
    k_loo = (p1.sum() - p1) / (xf.size - T)
    s2_loo = (p2.sum() - p2) / (xf.size - T) - k_loo ** 2
    laws = {n: dict(mean=np.full(len(Ls), np.nan), var=np.full(len(Ls), np.nan), var_se=np.full(len(Ls), np.nan),
                    mean_se=np.full(len(Ls), np.nan), claim=np.full(len(Ls), np.nan), why=[""] * len(Ls),
                    quantiles=[None] * len(Ls), cover=[None] * len(Ls)) for n in LAWS}
    pmf_laws = {}
    pmf_k = None if pmf_L is None else int(np.argmin(np.abs(Ls - pmf_L)))
    ok = kappa > 0 and sigma2 > 1e-12 * kappa * kappa and np.all(p1 > 0)
    if not ok:
        for n in LAWS:
            laws[n]["why"] = ["no forgetting or a constant gate in the fitted half"] * len(Ls)
        return _pack(Ls, eps_list, meas, laws, pmf_k, Wt, Ct, pmf_laws, Sf)
    st = _fit_stats(xf, sums, fit)
    mu3, tau = st["mu3"], st["tau"]

    def rel_se(v_loo):
        v_loo = np.asarray(v_loo, dtype=np.float64)
        return dependence.jackknife(np.log(np.maximum(v_loo, 1e-300)))

    m = gates.Moments.from_raw(kappa, sigma2 + kappa ** 2, mu3)
    Cs = _safe(renewal.smith_C, m)
    # iid
    iid_lse = rel_se(s2_loo[:, None] * Ls[None, :] / k_loo[:, None] ** 3)
    for k, L in enumerate(Ls):
        d = laws["iid"]
        d["mean"][k] = _safe(renewal.renewal_mean, m, L) - 1
        d["var"][k] = _safe(renewal.leading_var, m, L)
        d["var_se"][k] = iid_lse[k] * d["var"][k]
        d["claim"][k] = _claim_expansion(Cs, d["var"][k])     # a plug-in of three moments: its SE is within x1.5
        d["why"][k] = f"Smith's O(1) term {Cs:.3g} omitted"
    # marginal
    d = laws["marginal"]
    for k, mp in enumerate(marginal_passage(xf, Ls)):
        d["claim"][k] = MARGINAL_CLAIM
        if mp is None:
            d["why"][k] = f"lattice beyond {MAX_CELLS} cells"
            continue
        d["mean"][k], d["var"][k] = mp.mean, mp.var
        d["quantiles"][k] = [mp.quantile(q) for q in Q]
        covers.setdefault(k, []).append(("marginal", lambda c, k=k, F=_quantile_cdf(mp.cdf, d["quantiles"][k]):
                                         float(np.mean(predict.doc_coverage(F, Wt[:, :, k], Ct[:, :, k], c)))))
        d["why"][k] = "exact for iid increments (lattice error within 1%)"
        if k == pmf_k:
            pmf_laws["marginal"] = marginal_pmf(mp)
    d["var_se"] = iid_lse * d["var"]
    # V(n) of the fitted half, on a grid with every n = L/kappa
    nL = Ls / kappa
    vf = dependence.variance_function(xf, block_lengths(T, nL), sums, fit)
    tw = vf.tau_within()
    idx = np.array([vf.index(n) for n in nL])
    tw_loo = vf.tau_within(lw)
    # the lead law's block sums of every document once where the all-document test needs them (an L without a
    # censored window), the fitted half's their rows
    need_all = all_docs and (windows is None or not windows[1].any(axis=(0, 1)).all())
    bs_all = (BlockSums(x, r0) if block_sums is None else block_sums) if need_all else None
    bs = BlockSums(xf, r0) if bs_all is None else bs_all.rows(fit)
    n3 = int(min(bs.nw, max(16, 4 * st["cut"], T // 8)))
    kappa3_lr = float(bs.moments(np.ones((1, Sf)), [n3 - 1])[2][0, 0] / n3)
    sig_lr = sigma2 * tau
    C_dep = _safe(renewal.second_order_constant, kappa, sig_lr, kappa3_lr, st["sum_k_gamma"])
    dep_lse = rel_se(s2_loo[:, None] * st["tau_loo"][:, None] * Ls[None, :] / k_loo[:, None] ** 3)
    so_loo, cdep_loo, k3_loo = _second_order_loo(xf, st, k_loo, s2_loo, bs, lw, n3, Ls, sums, fit)
    C_dep_up = _upper(C_dep, cdep_loo)
    # where the second-order law claims: the trace's own correlation length measured (ell + 2 SE, converged), as
    # dependence.second_order_claim states it; the plug-in in_regime of this law's inputs alone is no check of it.
    # The length is read once, at the first L the plug-in puts in the regime (none: never read)
    so_inp = []
    for k, L in enumerate(Ls):
        d = laws["dependent"]
        d["mean"][k] = _safe(renewal.dependent_mean_N, kappa, sig_lr, L) - 1
        d["var"][k] = _safe(renewal.dependent_var, kappa, sig_lr, L)
        d["var_se"][k] = dep_lse[k] * d["var"][k]
        d["claim"][k] = _claim_expansion(C_dep_up, d["var"][k])
        d["why"][k] = f"tau {tau:.3g}; its O(1) term C_dep {C_dep:.3g} (+ 2 SE: {C_dep_up:.3g}) omitted"
        d = laws["second_order"]
        d["mean"][k] = laws["dependent"]["mean"][k]
        try:
            vl = renewal.second_order_var(kappa, sig_lr, kappa3_lr, st["sum_k_gamma"], L)
            d["var"][k] = vl.var
            # its SE: the jackknife of the whole law, C_dep's own sampling error (kappa3_LR, Bartlett's sum)
            # included; a leave-one-document-out fit without a positive variance leaves it without a finite SE
            col = so_loo[:, k]
            d["var_se"][k] = rel_se(col) * vl.var if np.all(np.isfinite(col) & (col > 0)) else float("inf")
            if not vl.in_regime:
                ok, why = False, ("outside its regime (|C_dep| or Bartlett's term above 1/5 of the leading term: "
                                  "L/kappa below 5 correlation lengths)")
            else:
                if not so_inp:
                    try:
                        so_inp.append(dependence.second_order_inputs(xf))
                    except ValueError:      # documents too short to read the length
                        so_inp.append(None)
                ok, _, why = (dependence.second_order_claim(L, so_inp[0]) if so_inp[0] is not None else
                              (False, None, "correlation length not measurable: documents too short"))
            d["claim"][k] = SECOND_ORDER_CLAIM if ok else float("nan")
            d["why"][k] = "in its regime (L/kappa >= 5 (ell + 2 SE), dependence.second_order_claim)" if ok else why
        except (ValueError, ZeroDivisionError) as exc:
            d["why"][k] = str(exc).split(":")[0]
        # finite n
        d = laws["finite_n"]
        t_L = float(tw[idx[k]])
        sl = sigma2 * t_L
        d["mean"][k] = _safe(renewal.dependent_mean_N, kappa, sl, L) - 1
        d["var"][k] = sl * L / kappa ** 3
        d["var_se"][k] = rel_se(s2_loo * tw_loo[:, idx[k]] * L / k_loo ** 3) * d["var"][k]
        c = sl / kappa ** 2
        omitted = 1 / 12 + 1.25 * c * c - 2 / 3 * kappa3_lr / kappa ** 3
        c_loo = s2_loo * tw_loo[:, idx[k]] / k_loo ** 2
        om_up = _upper(omitted, 1 / 12 + 1.25 * c_loo * c_loo - 2 / 3 * k3_loo / k_loo ** 3)
        if nL[k] > vf.ns[-1] * 1.05:
            d["why"][k] = f"V(n) not measured at n = L/kappa = {nL[k]:.0f} > T/2"
        else:
            d["claim"][k] = _claim_expansion(om_up, d["var"][k])
            d["why"][k] = f"inversion and overshoot O(1) term {omitted:.3g} (+ 2 SE: {om_up:.3g}) omitted"
    # mixture
    docs = verdict.Docs(T, T - r0, p1, p2, *predict.window_sums(Wf_))
    one = np.ones((1, Sf))
    _, _, P, ms, _, _ = verdict.parts(docs, vf, idx, Ls, one)
    P_loo = verdict.parts(docs, vf, idx, Ls, lw)[2]
    kd = p1 / T
    s2d = p2 / T - kd ** 2
    d = laws["mixture"]
    d["var"] = P[0]
    d["var_se"] = rel_se(P_loo) * P[0]
    d["mean"] = ms[0] * Ls + np.mean(0.5 + s2d[:, None] * tw[idx][None, :] / (2 * kd[:, None] ** 2), 0) - 1
    for k in range(len(Ls)):
        d["claim"][k] = _claim_expansion(C_dep_up, P[0, k]) if nL[k] <= vf.ns[-1] * 1.05 else float("nan")
        d["why"][k] = "its O(1) term C_dep (+ 2 SE) omitted" if nL[k] <= vf.ns[-1] * 1.05 else \
            f"tau(n) not measured at n = L/kappa = {nL[k]:.0f} > T/2"
    # the lead law (its jackknife over at most LEAD_GROUPS groups of documents: its rows' cells cost the most)
    wts = np.concatenate([one, dependence.group_weights(Sf, LEAD_GROUPS)])
    surv = lead_survival(bs, Ls, wts, kappa)
    d = laws[LEAD]
    for k, s in enumerate(surv):
        e, v = _moments_from_surv(s)
        d["mean"][k], d["var"][k] = e[0], v[0]
        d["mean_se"][k] = dependence.jackknife(e[1:])
        d["var_se"][k] = dependence.jackknife(v[1:])
        d["quantiles"][k] = _quantiles_from_surv(s[0])
        d["claim"][k] = LEAD_CLAIM
        n_far = Ls[k] / kappa
        d["why"][k] = "three measured cumulants of S_w" + (
            "; continued linearly beyond T/2" if n_far > bs.nw else "")
        covers.setdefault(k, []).append((LEAD, lambda c, k=k, s0=s[0]: _cover_surv(s0, Wt[:, :, k], Ct[:, :, k], c)))
        if k == pmf_k:
            pmf_laws[LEAD] = _pmf_from_surv(s[0])
    # the bootstrap (reference)
    Wp, Cp = predict.block_walks(xf, Ls, rng, 2 * predict.WALKS_PER_DOC)
    pm, pse_m, pv, pse_v = predict.pooled_moments(Wp)
    d = laws["bootstrap"]
    d["mean"], d["var"], d["mean_se"], d["var_se"] = pm, pv, pse_m, pse_v
    for k in range(len(Ls)):
        flat = Wp[:, :, k].ravel()
        d["quantiles"][k] = predict.int_quantiles(flat, Q)
        far = nL[k] > r0
        d["claim"][k] = float("nan") if far else 0.0
        d["why"][k] = "walks continue past the trace start by blocks (not claimed)" if far else "resampling"
        covers.setdefault(k, []).append(("bootstrap", lambda c, k=k, srt=np.sort(flat):
                                         _cover_sample(srt, Wt[:, :, k], Ct[:, :, k], c)))
        if k == pmf_k:
            p = np.bincount(flat) / len(flat)
            nz = np.nonzero(p)[0]
            pmf_laws["bootstrap"] = dict(offset=int(nz[0]), p=[float(v) for v in p[nz[0]:nz[-1] + 1]])
    for k, jobs in covers.items():          # the held-out windows' (window, censored) counts once an L, every law
        c = predict.coverage_counts(Wt[:, :, k], Ct[:, :, k])
        for law, job in jobs:
            laws[law]["cover"][k] = job(c)
    k_rse = float(dependence.jackknife(np.log(k_loo)))                     # relative SE of 1/kappa
    for n in ("iid", "dependent", "second_order", "finite_n", "mixture", "marginal"):
        laws[n]["mean_se"] = np.abs(laws[n]["mean"]) * k_rse
    _drop_impossible(laws, EXPANSIONS)
    out = _pack(Ls, eps_list, meas, laws, pmf_k, Wt, Ct, pmf_laws, Sf)
    if all_docs:
        _add_all_doc_tests(out["at"], x, Ls, windows, bs_all)
    return out


def _lattice_cells(x, h, M, xmax):
    """The hat-split lattice weights of increments x (1-D float64, in order) at spacing h on M cells (the cell index
    clamped to M - 1, marginal_passage's): (nb,) float64, nb = min(floor(xmax / h) + 2, M), xmax = x.max(). By the
    compiled loop where compile_fast_paths has compiled it in this process, else by _lattice_cells_numpy: the same
    numbers to the bit (the same operations on each increment, each cell's terms added in the order of x)."""
    kernel = _cells[0] if _cells and gates.COMPILED else None
    if kernel is None:
        return _lattice_cells_numpy(x, h, M, xmax)
    top = int(math.floor(xmax / h))
    clamp = top + 1 > M - 1
    n = M if clamp else top + 2
    a, b = np.zeros(n), np.zeros(n)
    kernel(np.ascontiguousarray(x, dtype=np.float64), float(h), M - 1 if clamp else -1, a, b)
    a += b
    return a


def _cells_loop(x, h, clamp, a, b):
    """_lattice_cells_numpy's two bincounts as one loop (compile_fast_paths compiles it): for each increment, in
    order, y = x / h, f = y - floor(y), k = floor(y); a[k] += 1 - f and b[k + 1] += f, both indices clamped to
    `clamp` where clamp >= 0 (M - 1). a (n,) and b (n,) float64 zeros; the weights are a + b."""
    for i in range(len(x)):
        y = x[i] / h
        fl = np.floor(y)
        f = y - fl
        if clamp >= 0:                  # clamped as a float first: an increment of 1e28 h is no int64
            k = int(min(fl, float(clamp)))
            a[k] += 1.0 - f
            b[min(k + 1, clamp)] += f
        else:
            k = int(fl)
            a[k] += 1.0 - f
            b[k + 1] += f


_cells = []                 # [the compiled _cells_loop] once compiled (compile_fast_paths)
_surv = []                  # [the compiled lead_survival loop (_surv_kernel)] likewise


def compile_fast_paths(positions):
    """Compile the numba loops of the per-head analysis up front (predict._rows_loop, the analysed rows' windows,
    and _cells_loop, the marginal laws' lattice) where a run finds `positions` windows or more in all (heads x S x
    T x thresholds), at least gates.COMPILED_MIN, numba is installed (the optional extra `fast`) and gates.COMPILED
    is set, so that forked workers inherit them; a smaller run keeps the numpy paths (the compile, 1.3-1.6 s,
    would cost more than it saves). The numbers are the same either way. From SURV_MIN positions also the lead
    law's cells (_surv_kernel: its compile took 2.6 CPU-s, against about 0.4 s it saves a head of 256 x 16384;
    the same numbers but within e^-TAIL_E of a cell at the edge of its tail test) and the windows' integer sums and
    counts (predict.compile_window_stats: the same numbers). Returns whether the first two are compiled."""
    if not gates.COMPILED or positions < gates.COMPILED_MIN or importlib.util.find_spec("numba") is None:
        return bool(_cells)
    try:
        import numba  # optional accelerator (extra `fast`), heavy to import: only for a large run
        if not _cells:
            cells = numba.njit("void(float64[::1], float64, int64, float64[::1], float64[::1])",
                               cache=False)(_cells_loop)
            predict.compile_window_rows()
            _cells.append(cells)
        if positions >= SURV_MIN and not _surv:
            predict.compile_window_stats()
            _surv.append(_compile_surv(numba))
    except Exception as exc:        # an installed numba that cannot import or compile here: the numpy paths
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        parallel.say(f"numba could not compile the per-head loops ({why}); the numpy paths (the same numbers)")
    return bool(_cells)


SURV_MIN = 1 << 28          # positions from which compile_fast_paths also compiles the lead law's cells


def _special_scalars():
    """(gammainc, gammaincc, ndtr) of float64 as ctypes functions from scipy.special.cython_special (the C functions
    behind scipy.special's ufuncs), for the compiled lead law loop."""
    from numba.extending import get_cython_function_address  # optional accelerator (extra `fast`)

    f2 = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)
    f1 = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)
    mod = "scipy.special.cython_special"
    return (f2(get_cython_function_address(mod, "gammainc")), f2(get_cython_function_address(mod, "gammaincc")),
            f1(get_cython_function_address(mod, "__pyx_fuse_1ndtr")))        # (fuse 1: ndtr of a float64)


def _compile_surv(numba):
    """The compiled _surv_kernel loop."""
    loop = _surv_kernel(*_special_scalars(), jit=numba.njit)
    return numba.njit("void(float64, float64[:, :], float64[:, :], float64[:, :], float64[:, :], boolean[:, :], "
                      "float64[:, :], boolean, boolean, float64[:, ::1])", cache=False)(loop)


def _lattice_cells_numpy(x, h, M, xmax):
    """The hat-split lattice weights of increments x (1-D, in order) at spacing h on M cells, the cell index clamped
    to M - 1 (marginal_passage's): (nb,) float64 sums over x of the weight 1 - f at cell k = floor(x / h) and f at
    k + 1, nb = min(floor(xmax / h) + 2, M) cells (the cells beyond hold nothing), xmax = x.max(). Each cell adds its
    terms in the order of x, as np.bincount over all M cells does."""
    y = x / h
    fl = np.floor(y)
    np.subtract(y, fl, out=y)                                                # f
    top = int(math.floor(xmax / h))                                          # = max k: x / h is monotone in x
    if top + 1 <= M - 1:                                                     # no clamp: the upper cell is k + 1
        k = fl.astype(np.intp)
        lo = np.bincount(k, weights=1 - y, minlength=top + 2)
        lo[1:] += np.bincount(k, weights=y, minlength=top + 1)[:top + 1]
        return lo
    kc = np.minimum(fl, M - 1).astype(np.intp)                               # clamped as floats: 1e28 h is no int64
    p = np.bincount(kc, weights=1 - y, minlength=M)[:M]
    p += np.bincount(np.minimum(kc + 1, M - 1), weights=y, minlength=M)[:M]
    return p


def _marginal_group_var(x, Ls, groups, cells=CELLS):
    """Var[W] of the marginal law (marginal_moments' lattice, `cells` per min(sd, kappa) of all of x) of all
    documents of x (S, T) and of all but each group of documents (groups (S,) int, 0..G-1): (n,), (G, n); NaN
    where the lattice would exceed MAX_CELLS. One histogram per group (on the cells the increments reach), one
    batch of FFTs per L."""
    S, T = x.shape
    G = int(groups.max()) + 1
    kappa, sd = x.mean(), x.std()
    base = min(sd, kappa) / cells if sd > 0 else kappa / cells
    n_g = np.bincount(groups, minlength=G) * T                             # increments per group
    full, loo = np.full(len(Ls), np.nan), np.full((G, len(Ls)), np.nan)
    xg = [x[groups == g].ravel() for g in range(G)]                        # each group's increments, in order
    xmax = [float(v.max()) if v.size else 0.0 for v in xg]
    size = np.concatenate([[x.size], x.size - n_g])[:, None]
    for i, L in enumerate(Ls):
        K = int(math.ceil(L / base))
        if K + 1 > MAX_CELLS // 2:
            continue
        h = L / (K + 0.5)
        M = sp_fft.next_fast_len(2 * (K + 1), real=True)                    # a fast length, not the next power of 2
        cg = [_lattice_cells(v, h, M, m) for v, m in zip(xg, xmax)]
        nb = max(len(c) for c in cg)
        p = np.zeros((G, nb))
        for g, c in enumerate(cg):
            p[g, :len(c)] = c
        tot = p.sum(0)
        P = np.concatenate([tot[None, :], tot[None, :] - p])               # (1 + G, nb): all, all but group g
        if nb == M:
            P[:, M - 1] = 0.0                                              # steps beyond 2L: out at once
        P /= size
        r = 1e-10 ** (1.0 / M)                                             # damping: aliasing r^M = 1e-10
        rk = r ** np.arange(M)
        u = sp_fft.rfft(P * rk[:nb], M, axis=1)                            # ph; the cells beyond nb are 0
        np.subtract(1.0, u, out=u)                                         # u = 1 / (1 - ph), in place
        np.divide(1.0, u, out=u)
        # coefficient K of the inverse transforms of u / (1 - z) and u^2 / (1 - z) as one weighted sum over the
        # half spectrum each (MarginalPassage's), not two inverse FFTs of which one coefficient is read
        f = np.arange(u.shape[1])
        e = np.exp(2j * np.pi * ((f * K) % M) / M) / (1 - r * np.exp(-2j * np.pi * f / M))
        e[1:] *= 2.0
        if M % 2 == 0:
            e[-1] *= 0.5
        e /= M * rk[K]
        U = (u @ e).real
        np.multiply(u, u, out=u)
        uU = (u @ e).real
        v = 2 * uU - U - U * U
        full[i], loo[:, i] = v[0], v[1:]
    return full, loo


def _add_all_doc_tests(at, x, Ls, windows=None, bs=None):
    """The state's test of the laws of ALL_DOCS on all S documents of x (S, T): D = log(Var_measured /
    Var_law), both from every document (rows T/2..T-1 measured, every row fitted), its SE the delete-a-group
    jackknife of D itself over G = min(S, TEST_GROUPS) groups of documents (document d in group d mod G; the
    law's and the windows' sampling errors share the documents and partly cancel), df G - 1. Set as `test_all`
    (dict(D, se, df, groups) or None where some of those windows are censored) on each record's law. windows:
    (W, C) of predict.window_rows(x, Ls, T // 2) when the caller has them (None: computed here); bs: BlockSums(x,
    T // 2) likewise."""
    S, T = x.shape
    r0 = T // 2
    G = min(S, TEST_GROUPS)
    groups = np.arange(S) % G
    W, C = predict.window_rows(x, Ls, r0) if windows is None else windows  # (S, R, n)
    R = W.shape[1]
    live = np.nonzero(~C.any(axis=(0, 1)))[0]                              # L with every window measured
    for rec in at:
        for n in ALL_DOCS:
            rec["laws"][n]["test_all"] = None
    if not len(live):
        return
    Ll = Ls[live]
    onehot = (groups[None, :] == np.arange(G)[:, None]).astype(np.float64)   # (G, S)
    p1, p2 = onehot @ x.sum(1), onehot @ (x * x).sum(1)                   # per group
    n_g = onehot.sum(1) * T
    kappa, sigma2 = float(x.mean()), float(x.var())
    k_loo = (p1.sum() - p1) / (x.size - n_g)                               # (G,)
    s2_loo = (p2.sum() - p2) / (x.size - n_g) - k_loo ** 2
    law = {"iid": (sigma2 * Ll / kappa ** 3, s2_loo[:, None] * Ll[None, :] / k_loo[:, None] ** 3)}
    law["marginal"] = _marginal_group_var(x, Ll, groups)
    bs = BlockSums(x, r0) if bs is None else bs
    wts = np.concatenate([np.ones((1, S)), 1.0 - onehot])                  # all; all but group g
    surv = lead_survival(bs, Ll, wts, kappa)
    lv = np.stack([_moments_from_surv(s)[1] for s in surv], 1)           # (G + 1, n)
    law[LEAD] = (lv[0], lv[1:])
    for j, k in enumerate(live):
        d1, d2 = predict.window_sums(W[:, :, k])                           # exact integer sums, no float copy
        s1, s2 = onehot @ d1, onehot @ d2                                  # per group
        mean = s1.sum() / (S * R)
        var = s2.sum() / (S * R) - mean ** 2
        rg = (S - onehot.sum(1)) * R
        ml = (s1.sum() - s1) / rg
        vl = (s2.sum() - s2) / rg - ml ** 2                                # (G,)
        for n in ALL_DOCS:
            full, lo = law[n][0][j], law[n][1][:, j]
            if not (var > 0 and np.all(vl > 0) and math.isfinite(full) and full > 0 and np.all(np.isfinite(lo))
                    and np.all(lo > 0)):
                continue
            se = float(dependence.jackknife(np.log(vl / lo)))
            if se > 0:
                at[k]["laws"][n]["test_all"] = dict(D=math.log(var / full), se=se, df=G - 1, groups=G)
                if n == LEAD:
                    at[k]["laws"][n]["test_all"]["tail"] = _tail_test(surv[j], W[:, :, k], onehot, r0)


def _continuous_quantile(ge, p):
    """The p-quantile of W + U (U uniform on [0, 1), independent) from P(W >= w), w = 1..n (n,): a float in
    [w, w + 1) where w is W's p-quantile (so that P(W + U > q) = 1 - p exactly)."""
    cdf = 1.0 - np.concatenate([ge, [0.0]])                                # P(W <= w), w = 0..n
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    w = min(int(np.searchsorted(cdf, p, side="right")), len(cdf) - 1)      # P(W <= w - 1) <= p < P(W <= w)
    return w + (p - (cdf[w] - pmf[w])) / max(pmf[w], 1e-300)


def _law_beyond(ge, t):
    """P(W + U > t) (U uniform on [0, 1)) of a law with P(W >= w) = ge[w - 1], w = 1..n, at t >= 0."""
    w0 = int(math.floor(t))
    at = ge[w0 - 1] if w0 >= 1 else 1.0                                    # P(W >= w0)
    above = ge[w0] if w0 < len(ge) else 0.0                                # P(W > w0)
    return above + (at - above) * (1.0 - (t - w0))


def _tail_test(surv, W, onehot, r0, p=TAIL_P):
    """The lead law's tail statistic on all documents: the share of measured windows W (S, R) beyond the law's p-
    quantile, over the law's own share there (1 - p; the ratio: 1 where the law's tail is right), each window read
    as W + U (U uniform on [0, 1)) so that ties at the lattice count by their fraction. Where that quantile is not
    below r0 (the first analysed row), at r0 - 1 instead, over the law's share beyond r0 - 1, if that is at most
    TAIL_MAX_SHARE (None otherwise): a window that would be censored (at a row r >= r0, so W >= r0) is beyond the
    threshold whatever its length, so testing only at the L without censored windows cannot favour a share of 0.
    surv: P(W >= w) (1 + G, n) of the law on all documents and with each of the G groups of onehot (G, S) dropped;
    each row's own threshold against the windows of the same documents. SE: the delete-a-group jackknife of the
    ratio, at least the binomial SE of S R independent windows (a share that no group moves, e.g. no window beyond
    the threshold in any group, has jackknife SE 0). Returns dict(p, q, share, law_share, ratio, se, band) or None."""
    S, R = W.shape
    keep = np.concatenate([np.ones((1, S)), 1.0 - onehot])                # (1 + G, S)
    ratio = np.empty(len(keep))
    first = None
    counts = {}                                                           # w0 -> per-document (W > w0, W == w0)
    for r in range(len(keep)):
        t = min(_continuous_quantile(surv[r], p), r0 - 1.0)
        law = _law_beyond(surv[r], t)
        if r == 0:
            if not 0 < law <= TAIL_MAX_SHARE:
                return None
            first = (t, law)
        w0 = int(math.floor(t))
        if w0 not in counts:                                              # the groups' thresholds mostly share w0
            counts[w0] = predict.beyond_counts(W, w0)
        gt, eq = counts[w0]
        beyond = gt + eq * (1.0 - (t - w0))                               # per document
        ratio[r] = float(keep[r] @ beyond) / (keep[r].sum() * R) / max(law, 1e-300)
    t, law = first
    floor = math.sqrt(law * (1 - law) / (S * R)) / law
    return dict(p=p, q=float(t), share=float(ratio[0] * law), law_share=float(law), ratio=float(ratio[0]),
                se=max(float(dependence.jackknife(ratio[1:])), floor), band=list(TAIL_BAND))


def _cover_surv(s, W, C, counts=None):
    """Coverage of the law's 90% interval by held-out windows W, C (S, R) (randomised PIT, predict.coverage),
    from P(W >= w), w = 1.. (n_w,)."""
    ge = np.concatenate([[1.0], s, [0.0]])

    def F(w):
        w = np.asarray(w)
        return 1 - ge[np.clip(w + 1, 0, len(ge) - 1)]
    return float(np.mean(predict.doc_coverage(F, W, C, counts)))     # each (window, censored) pair once


def _cover_quantiles(cdf, q, W, C, counts=None):
    """Coverage of a law's 90% interval by held-out windows W, C (S, R) (randomised PIT, predict.coverage) from
    its CDF `cdf` (ints -> P(W <= w)) read only where the PIT interval [F(w - 1), F(w)] can straddle 0.05 or
    0.95 (_quantile_cdf). counts: predict.coverage_counts(W, C) when the caller has them."""
    return float(np.mean(predict.doc_coverage(_quantile_cdf(cdf, q), W, C, counts)))   # each pair once


def _quantile_cdf(cdf, q):
    """The stand-in CDF of _cover_quantiles: `cdf` at w = q05 - 1, q05, q95 - 1, q95 (q: the law's 5/50/95%
    quantiles), elsewhere a value on the same side: 0 below q05 - 1 (that interval lies below 0.05), 1 above q95
    (above 0.95), 0.5 in between (inside). Holds those four values only, not the law."""
    q05, q95 = int(q[0]), int(q[-1])
    pts = np.unique([q05 - 1, q05, q95 - 1, q95])
    Fp = dict(zip(pts.tolist(), cdf(pts).tolist()))

    def F(w):
        w = np.asarray(w)
        out = np.where(w < q05 - 1, 0.0, np.where(w > q95, 1.0, 0.5))
        for v, f in Fp.items():
            out = np.where(w == v, f, out)
        return out
    return F


def _cover_sample(pred, W, C, counts=None):
    def F(w):
        return np.searchsorted(pred, w, side="right") / len(pred)
    return float(np.mean(predict.doc_coverage(F, W, C, counts)))


def _num(v):
    v = float(v)
    return v if math.isfinite(v) else None


EXPANSIONS = ("iid", "dependent", "second_order", "finite_n", "mixture")   # formulas in L, not distributions of W


def _drop_impossible(laws, names):
    """No value (NaN, so null in the JSON and 'not claimed') where an expansion law gives what no window law can:
    Var[W] <= 0 (a tau(n) or between-document term estimated below 0) or E[W] < 0 (E[N] < 1: the expansion far
    outside its range, at the smallest L); the reason is added to its `why`."""
    for n in names:
        d = laws[n]
        for k in range(len(d["var"])):
            bad = []
            if d["var"][k] <= 0:
                bad.append(f"its Var[W] {d['var'][k]:.3g} <= 0")
                d["var"][k] = d["var_se"][k] = np.nan
            if d["mean"][k] < 0:
                bad.append(f"its E[W] {d['mean'][k]:.3g} < 0")
                d["mean"][k] = d["mean_se"][k] = np.nan
            if bad:
                d["why"][k] += "; no value: " + " and ".join(bad) + " (outside what any window law gives)"


def _pack(Ls, eps_list, meas, laws, pmf_k, Wt, Ct, pmf_laws, n_fit):
    at = []
    eps_list = list(eps_list) if eps_list is not None else [float(f"{math.exp(-L):.12g}") for L in Ls]
    for k, L in enumerate(Ls):
        mk = meas[k]
        rec = dict(eps=float(eps_list[k]), L=float(L), n_fit=n_fit, n_test=int(Wt.shape[0]),
                   measured=dict(mean=_num(mk["mean"]), var=None if mk["var"] is None else _num(mk["var"]),
                                 mean_se=_num(mk["mean_se"]), var_se=None if mk["var_se"] is None else
                                 _num(mk["var_se"]), censored_share=mk["censored_share"],
                                 quantiles=mk["quantiles"], mean_is_bound=mk["bound"]),
                   laws={})
        for n, d in laws.items():
            q = d["quantiles"][k]
            rec["laws"][n] = dict(mean=_num(d["mean"][k]), var=_num(d["var"][k]), mean_se=_num(d["mean_se"][k]),
                                  var_se=_num(d["var_se"][k]),
                                  quantiles=None if q is None else {str(a): float(b) for a, b in zip(Q, q)},
                                  claim=_num(d["claim"][k]), why=d["why"][k], coverage90=d["cover"][k],
                                  var_ratio=None, var_ratio_ci=None, state="undetermined")
        at.append(rec)
    pmf = None
    if pmf_k is not None:
        W, C = Wt[:, :, pmf_k].ravel(), Ct[:, :, pmf_k].ravel()
        if C.any():
            meas_p = None
        else:
            p = np.bincount(W) / len(W)
            nz = np.nonzero(p)[0]
            meas_p = dict(offset=int(nz[0]), p=[float(v) for v in p[nz[0]:nz[-1] + 1]])
        pmf = dict(eps=at[pmf_k]["eps"], L=at[pmf_k]["L"], measured=meas_p, laws=pmf_laws)
    return dict(at=at, pmf=pmf, n_test=int(Wt.shape[0]))


# ----------------------------------------------------------------------------- states over the model


def _d_se(rec, law):
    """D = log(Var_measured / Var_law), its SE (both halves' jackknife SEs in quadrature) and the Welch-
    Satterthwaite degrees of freedom of that SE (each half's jackknife over its documents: n - 1), or None."""
    m, lw = rec["measured"], rec["laws"][law]
    if m["var"] is None or lw["var"] is None or not m["var"] > 0 or not lw["var"] > 0:
        return None
    if lw["var_se"] is None:                       # a law without a finite SE is not tested (never SE 0)
        return None
    se_m = (m["var_se"] or 0.0) / m["var"]
    se_l = lw["var_se"] / lw["var"]
    se = math.hypot(se_m, se_l)
    if not (math.isfinite(se) and se > 0):
        return None
    nt, nf = rec.get("n_test", 2), rec.get("n_fit", 2)
    if law == LEAD:                                # its jackknife's groups (evaluate)
        nf = min(nf, LEAD_GROUPS)
    df = se ** 4 / (se_m ** 4 / max(nt - 1, 1) + se_l ** 4 / max(nf - 1, 1))
    return math.log(m["var"] / lw["var"]), se, df


def _t_sf(x, df):
    """stats.t.sf(x, df) for scalars by the special function behind it (the same number; without the
    distribution's argument checks, 30x the function's cost: a model's thousands of cells call it)."""
    return float(special.stdtr(df, -x))


def _t_isf(q, df):
    """stats.t.isf(q, df) for scalars, the same way (the same number; q = 0 gives +inf as stats does)."""
    return math.inf if q == 0 else float(-special.stdtrit(df, q))


def _p_outside(D, se, df, lo, hi):
    """Two-sided p-value of "D within [lo, hi]": 2 P(t_df > distance outside / se) (1 inside)."""
    dist = max(D - hi, lo - D, 0.0)
    return float(min(1.0, 2 * _t_sf(dist / se, df))) if dist > 0 else 1.0


def assign_states(heads_at, df, alpha=ALPHA):
    """Set state, var_ratio, var_ratio_ci, mean_ok and test on every law of every record of every head (heads_at:
    list over heads of lists of `at` records). The test of a cell: D = log(Var_measured / Var_law) with its SE,
    on all documents (`test_all`, the laws of ALL_DOCS) where there, else the two halves (Welch-Satterthwaite
    df, at least df = the documents of the smaller half - 1). false: Holm's step-down over the m claimed and
    measured cells of the model at family-wise level alpha, on p = 2 P(t > distance of D outside the claim band
    / SE); holds: the 1 - 2 HOLD_LEVEL interval D -+ t SE inside the band (an equivalence test) and SE <= HOLD_SE.
    Returns dict(m, alpha_test (Bonferroni's alpha / m: Holm's first step), t_crit at df, df, rejected)."""
    cells = []
    for recs in heads_at:
        for rec in recs:
            for law, lw in rec["laws"].items():
                c = lw["claim"]
                ds = _d_se(rec, law)
                if ds is not None:
                    D, se, _ = ds
                    lw["var_ratio"] = math.exp(-D)
                    lw["var_ratio_ci"] = [math.exp(max(-D - 1.96 * se, -700)), math.exp(min(-D + 1.96 * se, 700))]
                mm, ml = rec["measured"], lw
                if mm["mean"] is not None and ml["mean"] is not None and not mm.get("mean_is_bound"):
                    se = math.hypot(mm["mean_se"] or 0.0, ml["mean_se"] or 0.0)
                    lw["mean_ok"] = bool(abs(ml["mean"] - mm["mean"]) <= MEAN_TOL * abs(mm["mean"]) + 2 * se)
                else:
                    lw["mean_ok"] = None
                if lw["var"] is None or c is None or c > CLAIM_MAX:
                    lw["state"] = "not claimed"
                    if c is not None and c > CLAIM_MAX:
                        lw["why"] += f"; stated accuracy {c:.0%} > {CLAIM_MAX:.0%}"
                    continue
                ta = lw.get("test_all")
                if ds is None:
                    lw["state"] = "undetermined"
                    lw["why"] += ("; Var[W] not measured (censored windows)" if rec["measured"]["var"] is None else
                                  "; no finite SE of the law (a leave-one-document-out fit gives no variance)")
                    continue
                if ta is not None:
                    D, se, dfc, sample = ta["D"], ta["se"], ta["df"], "all documents"
                else:
                    D, se, dfc = ds
                    dfc, sample = max(dfc, df), "held-out half against the fitted half"
                lo, hi = math.log(1 - min(c, 0.99)), math.log(1 + c)
                p_var = _p_outside(D, se, dfc, lo, hi)
                tail = (ta or {}).get("tail")
                if tail is not None:                   # Bonferroni over the cell's two statistics
                    p_tail = _p_outside(tail["ratio"], tail["se"], dfc, *tail["band"])
                    cells.append((lw, D, se, dfc, lo, hi, sample, p_var, p_tail, min(1.0, 2 * min(p_var, p_tail))))
                else:
                    cells.append((lw, D, se, dfc, lo, hi, sample, p_var, None, p_var))
    m = len(cells)
    a_test = alpha / max(m, 1)
    t_crit = _t_isf(a_test / 2, df)
    order = sorted(range(m), key=lambda i: cells[i][-1])
    reject = [False] * m
    level = [alpha] * m
    for rank, i in enumerate(order):                   # Holm: p_(j) <= alpha / (m - j) for every j up to this one
        level[i] = alpha / (m - rank)
        if cells[i][-1] > level[i]:
            break
        reject[i] = True
    for i in order[sum(reject):]:
        level[i] = alpha / (m - sum(reject))
    for i, (lw, D, se, dfc, lo, hi, sample, p_var, p_tail, p) in enumerate(cells):
        tc = _t_isf(level[i] / 2, dfc)
        th = _t_isf(HOLD_LEVEL, dfc)
        lw["test"] = dict(D=D, se=se, df=dfc, t_crit=tc, p=p, level=level[i], t_hold=th, sample=sample)
        if p_tail is not None:
            lw["test"].update(p_var=p_var, p_tail=p_tail)
        if reject[i]:
            lw["state"] = "false"
            if p_tail is not None:
                lw["why"] += ("; rejected by its %s" % ("tail (the share beyond its %g%% quantile)" % (100 * TAIL_P)
                                                         if p_tail < p_var else "variance"))
        elif lo <= D - th * se and D + th * se <= hi and se <= HOLD_SE:
            lw["state"] = "holds"
        else:
            lw["state"] = "undetermined"
            lw["why"] += ("; %d%% interval of the Var ratio (%s) not inside the claim, not rejected at the family "
                          "level" % (round(100 * (1 - 2 * HOLD_LEVEL)), sample))
    return dict(m=m, alpha_test=a_test, t_crit=t_crit, df=df, rejected=int(sum(reject)))


def summary(recs):
    """A head's summary over SUMMARY_EPS: the first law (display order, the bootstrap last) that explains the mean
    at every eps there with a measurement; of the laws that hold for the variance at every such eps, the one of the
    tightest claim (its largest stated accuracy over those eps; ties in display order), that claim as var_claim;
    and the laws false there."""
    lo, hi = min(SUMMARY_EPS), max(SUMMARY_EPS)
    rs = [r for r in recs if lo * (1 - 1e-9) <= r["eps"] <= hi * (1 + 1e-9)]
    mean_law = var_law = var_claim = None
    for law in LAWS:
        mo = [r["laws"][law].get("mean_ok") for r in rs]
        if mean_law is None and any(v is True for v in mo) and not any(v is False for v in mo):
            mean_law = law
        held = [r["laws"][law] for r in rs if r["measured"]["var"] is not None]
        if held and all(lw["state"] == "holds" for lw in held):
            c = max(lw["claim"] for lw in held)
            if var_claim is None or c < var_claim:              # (strictly: a tie keeps the earlier law)
                var_law, var_claim = law, c
    false = [law for law in LAWS if any(r["laws"][law]["state"] == "false" for r in rs)]
    var_text = f"{var_law} (within {var_claim:.0%})" if var_law else "no law"
    text = (f"eps {hi:g}..{lo:g}: mean {mean_law or 'no law'}, variance {var_text}"
            + (f"; false: {', '.join(false)}" if false else "")) if rs else f"no eps of {hi:g}..{lo:g} analysed"
    return dict(mean_law=mean_law, var_law=var_law, var_claim=var_claim, false=false, text=text)


# ----------------------------------------------------------------------------- how close each law comes


def noise_floor(rel_se):
    """The median relative error that predictions exact in population would show on cells whose relative
    sampling SEs are rel_se (n,) float (normal errors): the F with mean_i P(|rel_se_i Z| <= F) = 1/2, the median of
    the pooled errors, by bisection. With the held-out SEs alone: a predictor that knows the true Var[W]; with
    the held-out and the law's SEs in quadrature: a law exact in population but fitted on the fitted half."""
    r = np.asarray(rel_se, dtype=np.float64)
    r = r[np.isfinite(r)]
    if not len(r):
        return None
    if not r.max() > 0:
        return 0.0
    lo, hi = 0.0, 10 * float(r.max())
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        p = np.mean(np.where(r > 0, special.erf(mid / np.maximum(r, 1e-300) / math.sqrt(2)), 1.0))
        lo, hi = (mid, hi) if p < 0.5 else (lo, mid)
    return 0.5 * (lo + hi)


def subsample_floor(heads_x, Ls, sizes, rng, reps=400):
    """The sampling floor measured on a large capture: for each head's increments x (S, T) of heads_x, the pooled
    Var[W] of the rows T/2..T-1 of all S documents stands for the truth; over `reps` draws of n documents (n in
    sizes, without replacement) the median over the (head, L) cells of |Var_n / Var_all - 1| (an exact predictor
    scored on n held-out documents) and of |Var_n / Var_n' - 1| on a second, disjoint draw of n (the fitted half's
    own variance as the law). Cells with a censored window anywhere are left out. rng: numpy Generator.
    Returns {n: dict(true=(median, q05, q95), split=(median, q05, q95) or None, cells)} over the draws."""
    Ls = np.asarray(Ls, dtype=np.float64)
    sums = []
    for x in heads_x:
        S, T = x.shape
        W, C = predict.window_rows(x, Ls, T // 2)
        Wf = W.astype(np.float64)
        ok = ~C.any(axis=(0, 1))                                            # (n,): no censored window at this L
        sums.append((Wf.sum(1)[:, ok], (Wf * Wf).sum(1)[:, ok], W.shape[1]))   # (S, cells) each
    out = {}
    for n in sizes:
        true, split = [], []
        for _ in range(reps):
            e_t, e_s = [], []
            for s1, s2, R in sums:
                S = s1.shape[0]
                if not s1.shape[1] or n > S:
                    continue
                pm = s1.sum(0) / (S * R)
                pv = s2.sum(0) / (S * R) - pm * pm
                idx = rng.permutation(S)

                def var(ix):
                    m = s1[ix].sum(0) / (len(ix) * R)
                    return s2[ix].sum(0) / (len(ix) * R) - m * m
                va = var(idx[:n])
                e_t += list(np.abs(va / pv - 1))
                if 2 * n <= S:
                    e_s += list(np.abs(va / var(idx[n:2 * n]) - 1))
            true.append(np.median(e_t))
            if e_s:
                split.append(np.median(e_s))
        def q(v):
            return ((float(np.median(v)), float(np.quantile(v, 0.05)), float(np.quantile(v, 0.95))) if v else None)
        out[n] = dict(true=q(true), split=q(split), cells=sum(s[0].shape[1] for s in sums))
    return out


def score(doc, eps_lo=min(SUMMARY_EPS), eps_hi=max(SUMMARY_EPS)):
    """Out-of-sample scores of every law over the heads and eps in [eps_lo, eps_hi] of a schema-1 document
    (where Var[W] is measured): {law: dict(cells, med_rel_var, within_2se, coverage90, med_rel_mean, states,
    med_rel_var_corrected, floor_true, floor_law)}.
    within_2se: |Var_law - Var_measured| <= 2 sqrt(SE_law^2 + SE_measured^2). med_rel_var_corrected: the median of
    sqrt(max(e^2 - s^2, 0)), e the relative error and s = SE_D (the two halves' relative SEs in quadrature, as the
    states use it): the error beyond sampling. floor_true / floor_law: `noise_floor` of the held-out relative SEs /
    of SE_D."""
    out = {}
    for law in doc["laws"]:
        rel, rel_m, within, cov, states, rse_m, rse = [], [], [], [], {}, [], []
        for h in doc["heads"]:
            for rec in h["at"]:
                if not eps_lo * (1 - 1e-9) <= rec["eps"] <= eps_hi * (1 + 1e-9):
                    continue
                m, d = rec["measured"], rec["laws"][law]
                states[d["state"]] = states.get(d["state"], 0) + 1
                if m["var"] is None or d["var"] is None or not m["var"] > 0:
                    continue
                rel.append(abs(d["var"] / m["var"] - 1))
                if d["mean"] is not None and m["mean"]:
                    rel_m.append(abs(d["mean"] / m["mean"] - 1))
                se = math.hypot(m["var_se"] or 0.0, d["var_se"] or 0.0)
                rse_m.append((m["var_se"] or 0.0) / m["var"])
                rse.append(math.hypot(rse_m[-1], (d["var_se"] or 0.0) / d["var"]))     # SE_D, the states' SE
                within.append(abs(d["var"] - m["var"]) <= 2 * se)
                if d.get("coverage90") is not None:
                    cov.append(d["coverage90"])
        out[law] = dict(cells=len(rel), med_rel_var=float(np.median(rel)) if rel else None,
                        within_2se=float(np.mean(within)) if within else None,
                        coverage90=float(np.median(cov)) if cov else None,
                        med_rel_mean=float(np.median(rel_m)) if rel_m else None, states=states,
                        med_rel_var_corrected=float(np.median(np.sqrt(np.maximum(np.square(rel) - np.square(rse), 0))))
                        if rel else None, floor_true=noise_floor(rse_m), floor_law=noise_floor(rse))
    return out


def score_table(docs):
    """Markdown table of `score` for {name: schema-1 document}, and a line per document on its sampling floor."""
    lines = ["| law | " + " | ".join(f"{n}: med. rel. error of Var[W] | {n}: beyond sampling | {n}: within 2 SE | "
                                     f"{n}: 90% coverage | {n}: med. rel. error of E[W]" for n in docs) + " |",
             "| --- |" + " --- | --- | --- | --- | --- |" * len(docs)]
    sc = {n: score(d) for n, d in docs.items()}
    first = next(iter(docs.values()))
    for law in first["laws"]:
        cells = []
        for n in docs:
            s = sc[n][law]

            def f(v, fmt=".3f"):
                return "-" if v is None else format(v, fmt)
            cells += [f(s["med_rel_var"]), f(s["med_rel_var_corrected"]),
                      f"{f(s['within_2se'], '.2f')} of {s['cells']}", f(s["coverage90"]), f(s["med_rel_mean"])]
        lines.append(f"| {law} | " + " | ".join(cells) + " |")
    lines.append("")
    for n in docs:
        s = sc[n][LEAD]
        d0 = next(iter(docs[n]["heads"]), {"at": [{}]})["at"][0]
        if s["floor_true"] is not None:
            lines.append(f"{n}: {d0.get('n_fit', '?')} fitted and {d0.get('n_test', '?')} held-out documents; the "
                         f"median relative error of Var[W] that sampling alone gives (noise_floor): "
                         f"{s['floor_true']:.3f} for the true Var[W] (held-out SEs), {s['floor_law']:.3f} for a law "
                         f"exact in population fitted on the fitted half ({LEAD}'s SEs and the held-out ones)")
    return "\n".join(lines)


def count_summaries(summaries):
    """The heads' summaries (`summary`'s dicts, None for a head without one) counted, in the heads' order:
    ({law that explains Var[W], or "no law": heads}, {law false at some eps: heads}, {law that explains E[W], or
    "no law": heads})."""
    var, false, mean = {}, {}, {}
    for s in summaries:
        s = s or {}
        v, m = s.get("var_law") or "no law", s.get("mean_law") or "no law"
        var[v] = var.get(v, 0) + 1
        mean[m] = mean.get(m, 0) + 1
        for law in s.get("false") or []:
            false[law] = false.get(law, 0) + 1
    return var, false, mean


def states_table(name, doc):
    """Markdown: every law's states over the (head, eps) cells at eps 1e-2..1e-4 of a schema-1 document (`score`'s
    counts, most frequent first), then the heads' summaries counted: the law that explains Var[W] and the laws
    false at some of those eps, and the law that explains E[W]."""
    sc = score(doc)
    lines = [f"| law | {name}: states at eps 1e-2 ... 1e-4 (cells) |", "| --- | --- |"]
    for law in doc["laws"]:
        st = sorted(sc[law]["states"].items(), key=lambda kv: -kv[1])
        lines.append(f"| {law} | " + ", ".join(f"{k} {v}" for k, v in st) + " |")
    var, false, mean = count_summaries([h.get("summary") for h in doc["heads"]])

    def fmt(d):
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"
    lines += ["", f"Heads: {len(doc['heads'])}; Var[W] explained by: {fmt(var)}; false at some eps: {fmt(false)}",
              "", f"E[W] explained by: {fmt(mean)}"]
    return "\n".join(lines)


def main(argv=None):
    """`python -m foxwindow.heads.laws NAME=heads.json ...`: the out-of-sample score table of every law (--states:
    and each document's states table)."""
    p = outputs.parser("Out-of-sample scores of every law at eps 1e-2..1e-4 from schema-1 per-head JSON files "
                       "(python forget.py --json)")
    p.add_argument("files", nargs="*", help="NAME=PATH of a per-head JSON")
    p.add_argument("--states", action="store_true",
                   help="also every law's states at eps 1e-2..1e-4 and the heads' summaries counted, per document")
    p.add_argument("--floor", default=None, metavar="TRACES",
                   help="instead: the sampling floor measured on a trace file (.npz of save_trace) of many documents "
                        "(subsample_floor at eps 1e-2..1e-4: 16, 32, 64 and half of its documents, 400 draws, seed 0)")
    a = p.parse_args(argv)
    if a.floor:
        return _print_floor(outputs.input_file("--floor", a.floor), shown=a.floor)
    if not a.files:
        raise outputs.UsageError("files: give NAME=PATH of at least one per-head JSON, or --floor TRACES")
    docs = {}
    for f in a.files:
        name, _, path = f.partition("=")
        real = outputs.input_file("files", path or name)
        try:
            with open(real) as fh:
                doc = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise outputs.UsageError(f"files: {path or name} is not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("schema_version") != 1 or not isinstance(doc.get("heads"), list):
            raise outputs.UsageError(f"files: {path or name} is not a per-head result of schema 1 "
                                     "(python forget.py --json)")
        docs[name if path else os.path.basename(name)] = doc
    print(score_table(docs))
    for name, doc in docs.items() if a.states else ():
        print()
        print(states_table(name, doc))


def _print_floor(path, shown=None):
    # shown: the path as given (a relative name stays relative in the committed output)
    try:
        traces, _ = trace_files.load_traces_checked(path)
    except ValueError as exc:
        raise outputs.UsageError(f"--floor: {exc}") from None
    xs = [gates.increments_from_log_gates(np.asarray(t[:, :, h], dtype=np.float64))
          for t in traces.values() for h in range(t.shape[2])]
    S = xs[0].shape[0]
    eps = [e for e in lawtable.EPS_SCAN if min(SUMMARY_EPS) * (1 - 1e-9) <= e <= max(SUMMARY_EPS) * (1 + 1e-9)]
    sizes = sorted({n for n in (16, 32, 64, S // 2) if 2 <= n <= S})
    res = subsample_floor(xs, [gates.threshold(e) for e in eps], sizes, np.random.default_rng(0))
    print(outputs.fill(f"{shown or path}: {len(xs)} heads x {S} documents, eps {max(eps):g}..{min(eps):g}; median "
                       "over (head, eps) cells of the relative error of Var[W], median [5%, 95%] over 400 draws"))
    print("| held-out documents | the true Var[W] (all documents) as the prediction | "
          "the Var[W] of n other documents |")
    print("| --- | --- | --- |")
    for n, r in res.items():
        def f(t):
            return ("-" if t is None else f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]")
        print(f"| {n} | {f(r['true'])} | {f(r['split'])} |")
    print(f"{res[sizes[0]]['cells']} cells without censored windows")


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
