"""The window law of a head and what it predicts: ACP block pruning, KV-cache horizons, state memory horizons.

Adaptive computation pruning (ACP; Lin et al., 2025) skips every key block of the causal block grid whose
log-decay at its corner pair (i_min of the query block, j_max of the key block) is below -L, with the level
    L = 2U + ln T + L_tol,      L_tol = ln(1/tol),
U a bound on |q.k| * scale and tol the attention mass allowed to go missing (L = -delta of the paper). A block
is pruned iff the increment walk over its gap n = i_min - j_max has passed L:
    P(block pruned) = P(S_n > L) = P(N <= n) = 1 - P(W >= n),
the first-passage law of forget.py / exact.py at L. The same law gives a KV-cache horizon for decoding (the
p-quantile of W at L = 2U + L_tol (+ ln T for the sum over keys)), a certified horizon where the gate weights
bound the decay, and, for a recurrent state (no KV cache), the memory horizon of the state: the p-quantile of
W at L = L_tol, the steps until an input's contribution to the state has decayed below tol.

Law per head (HeadLaw): the iid law by exact numerics (exact.exact_first_passage, closed forms where the gate
has one) when the increments look independent (|tau - 1| <= 2 SE); otherwise the autocorrelation-adjusted
normal approximation S_n ~ N(n kappa, Var S_n), Var S_n = sigma^2 (n + 2 sum_{k<n} (n - k) rho_k) from the
measured autocorrelation. The method used is reported with every prediction.

Levels are L (ln of the decay) throughout; a tol given by the user is converted once, by level_of_tol /
level_of_log_tol.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import special

from foxwindow.heads import dependence
from foxwindow.laws import exact, gates

__all__ = ["CONTEXTS", "EXACT_MAX_STEPS", "level_of_tol", "level_of_log_tol", "check_level", "pos_int", "check_block",
           "check_U", "acp_level", "SURVIVAL_TOL", "EXACT_METHODS", "survival_table", "HeadLaw", "BlockGrid",
           "BlockPrediction", "predict_block_pruning", "pruned_block_mask", "measure_block_pruning", "Horizon",
           "kv_horizon", "state_horizon", "window_quantile", "certified_horizon"]

CONTEXTS = (2048, 8192, 32768, 131072, 1048576)     # the contexts KV memory savings are reported at
EXACT_MAX_STEPS = 4096      # beyond L/kappa steps the lattice numerics get slow; the CLT is accurate there

# ----------------------------------------------------------------------------- arguments


def level_of_tol(tol, name="tol"):
    """tol in (0, 1) -> L_tol = ln(1/tol) > 0. Raises ValueError naming the argument otherwise."""
    try:
        t = float(tol)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1); got {tol!r}") from None
    if not (0.0 < t < 1.0):
        raise ValueError(f"{name} must lie in (0, 1) (the attention mass allowed to be pruned); got {tol!r}")
    return -math.log(t)


def level_of_log_tol(log_tol, name="log_tol"):
    """ln(tol) < 0 and finite -> L_tol = -ln(tol) > 0. Raises ValueError naming the argument otherwise."""
    try:
        v = float(log_tol)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a negative number (ln of a tol in (0, 1)); got {log_tol!r}") from None
    if not (v < 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be negative and finite (tol = e^{name} in (0, 1)); got {log_tol!r}")
    return -v


def check_level(L, name="L"):
    """A level L > 0, finite; returns it as a float."""
    try:
        v = float(L)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number > 0; got {L!r}") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be finite and > 0 (a level ln(1/tol)); got {L!r}")
    return v


def pos_int(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name} must be a positive int; got {v!r}")
    return int(v)


def check_block(block):
    """block: an int B (square B x B blocks) or a pair (BM, BN) of positive ints."""
    if isinstance(block, (int, np.integer)) and not isinstance(block, bool):
        block = (block, block)
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise ValueError(f"block must be an int or a pair (BM, BN); got {block!r}")
    return pos_int(block[0], "block size BM"), pos_int(block[1], "block size BN")


def check_U(U):
    try:
        U = float(U)
    except (TypeError, ValueError):
        raise ValueError(f"U must be a number; got {U!r}") from None
    if not (U >= 0 and math.isfinite(U)):
        raise ValueError(f"U (bound on |q.k| * scale) must be finite and >= 0; got {U!r}")
    return U


def acp_level(L_tol, U, T):
    """ACP's block level L = 2U + ln T + L_tol (-delta of the paper), L_tol = ln(1/tol) > 0."""
    return 2.0 * check_U(U) + math.log(pos_int(T, "T")) + check_level(L_tol, "L_tol")


# ----------------------------------------------------------------------------- the law of one head



SURVIVAL_TOL = 1e-2            # pruning predictions need P(N > n) to ~1e-2 (summed over n, relative to E[W])
EXACT_METHODS = ("iid, closed form", "iid, exact numerics")


def survival_table(gate, L):
    """(n0, s): P(N > n0 + i) = s[i] at level L for an iid gates.Gate, by exact.exact_first_passage. The costly
    step of a law (0.1-2 s for a trace's step law of thousands of atoms); a module-level function so that
    levels can be computed in other processes."""
    if isinstance(gate, gates.EmpiricalGate):
        # a trace's step law: its atoms are bracketed to O(h), which bounds the survival (summed error <=
        # mean_err) long before Var[W]; only the survival is used here
        fp = exact.exact_first_passage(gate, L=L, tol=SURVIVAL_TOL, var_tol=math.inf)
    else:
        fp = exact.exact_first_passage(gate, L=L)
    return fp.n0, np.clip(fp.survival, 0.0, 1.0)


@dataclass
class HeadLaw:
    """Increment law of one head, as far as the predictions need it.

    kappa, sigma2: mean and variance of X = -log g; rho: autocorrelation rho_0..rho_K (rho_0 = 1,
    zero beyond K; Geyer cut); tau = 1 + 2 sum rho_k; se_tau its standard error (0 when known);
    gate: a gates.Gate for the iid numerics (None: normal approximation only); iid: use them.
    x_min: the smallest increment the law allows (a certified lower bound where known, else None).
    """
    name: str
    kappa: float
    sigma2: float
    rho: np.ndarray
    tau: float
    se_tau: float
    iid: bool
    gate: object = None
    x_min: float = None
    _cache: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def from_gate(gate, max_lag=256):
        """Law of a synthetic gates.Gate: iid ones use exact numerics; dependent ones (AR(1) logits)
        the normal approximation with their exact autocovariance."""
        m = gate.moments()
        rho = np.ones(1)
        if not gate.iid:
            g = gate.autocovariance(np.arange(max_lag + 1))
            rho = g / g[0]
        tau = 1.0 + 2.0 * float(rho[1:].sum())
        xm = float(gate.m) if isinstance(gate, gates.ConstantGate) else None
        return HeadLaw(str(gate), m.kappa, m.sigma2, rho, tau, 0.0, bool(gate.iid), gate if gate.iid else None, xm)

    @staticmethod
    def from_trace(log_g, name="trace", z=2.0, max_lag=256):
        """Law of one head fitted to log-gate traces log_g (S, T) (numpy or torch, <= 0), S >= 3 sequences.

        kappa, sigma2 pooled; rho within sequences (each about its own mean), pooled, cut by Geyer's
        initial positive sequence; se_tau by jackknife over sequences. iid when |tau - 1| <= z * se_tau.
        """
        lg = log_g.detach().cpu().numpy() if isinstance(log_g, torch.Tensor) else np.asarray(log_g)
        x = np.asarray(gates.increments_from_log_gates(lg.astype(np.float64)), dtype=np.float64)
        if x.ndim != 2 or x.shape[0] < 3 or x.shape[1] < 2:
            raise ValueError(f"log_g must be (S, T) with S >= 3 sequences and T >= 2; got shape {x.shape}")
        S, T = x.shape
        kappa, sigma2 = float(x.mean()), float(x.var())
        if kappa <= 0:
            raise ValueError(f"{name}: the gates never forget (kappa = 0); no window law")
        if sigma2 <= 1e-12 * kappa * kappa:                          # constant gate (ALiBi): rounding only
            return HeadLaw(name, kappa, 0.0, np.ones(1), 1.0, 0.0, False, None, float(x.min()))
        est = dependence.tau_estimate(x, centre="sequence", max_lag=max_lag)     # the one tau estimator
        rho, tau, se_tau = est.rho, est.tau, est.se
        iid = abs(tau - 1.0) <= z * se_tau
        gate = gates.EmpiricalGate(lg, name=name)
        return HeadLaw(name, kappa, sigma2, rho, tau, se_tau, bool(iid), gate, float(x.min()))

    # -- P(S_n <= L) = P(N > n) = P(W >= n), n = 0, 1, ...

    def pending_levels(self, levels):
        """The levels among `levels` (in order, first of equal keys) whose survival needs the exact numerics and
        is not cached yet: [(key, L)]. With fill_levels, lets a caller compute them in parallel."""
        out = {}
        for L in levels:
            key = round(float(L), 12)
            if key not in self._cache and key not in out and self.method(L) in EXACT_METHODS:
                out[key] = float(L)
        return list(out.items())

    def fill_levels(self, tables):
        """Install survival tables {key: survival_table(gate, L)} computed elsewhere (see pending_levels)."""
        self._cache.update(tables)

    def method(self, L):
        if self.sigma2 == 0.0:
            return "deterministic (constant gate)"
        if self.iid and self.gate is not None:
            if exact.closed_form_survival(self.gate, L) is not None:
                return "iid, closed form"
            if L / self.kappa <= EXACT_MAX_STEPS:
                return "iid, exact numerics"
            return "iid, normal (L/kappa beyond the lattice numerics)"
        return "autocorrelation-adjusted normal"

    def var_sum(self, n):
        """Var S_n = sigma^2 (n + 2 sum_{k=1}^{n-1} (n - k) rho_k), n int array >= 0 (rho_k = 0 past the cut)."""
        n = np.asarray(n, dtype=np.int64)
        r = self.rho[1:]
        r1 = np.concatenate([[0.0], np.cumsum(r)])                  # sum_{k<=m} rho_k
        r2 = np.concatenate([[0.0], np.cumsum(np.arange(1, len(r) + 1) * r)])
        m = np.clip(n - 1, 0, len(r))
        return self.sigma2 * (n + 2.0 * (n * r1[m] - r2[m]))

    def survival(self, L, n):
        """P(S_n <= L) for an int array n >= 0 (P(W >= n), W the window at level L). Returns float64."""
        L = float(L)
        if not (L > 0 and math.isfinite(L)):
            raise ValueError(f"L must be finite and > 0; got {L}")
        n = np.asarray(n, dtype=np.int64)
        meth = self.method(L)
        if meth.startswith("deterministic"):
            return (n * self.kappa <= L).astype(np.float64)
        if meth in EXACT_METHODS:
            key = round(L, 12)
            if key not in self._cache:
                self._cache[key] = survival_table(self.gate, L)
            n0, s = self._cache[key]                       # s[i] = P(N > n0 + i); P(N > n) = 1 below n0
            i = n - n0
            return np.where(i < 0, 1.0, np.where(i < len(s), s[np.clip(i, 0, len(s) - 1)], 0.0))
        # normal approximation; the iid variant is the same with rho = (1,)
        v = self.var_sum(n) if not meth.startswith("iid") else self.sigma2 * n
        sd = np.sqrt(np.maximum(v, 1e-300))
        out = special.ndtr((L - n * self.kappa) / sd)
        return np.where(n == 0, 1.0, out)


# ----------------------------------------------------------------------------- block pruning


@dataclass
class BlockGrid:
    """The causal block grid of T queries/keys in (BM, BN) blocks. Arrays over (query block, key block):
    causal (nI, nJ) bool: the block holds at least one pair j <= i (the kernel visits it);
    strict (nI, nJ) bool: every pair is strictly causal, j_max < i_min (the only prunable blocks);
    gap (nI, nJ) int: i_min - j_max (>= 1 where strict); pairs (nI, nJ) int: causal pairs in the block."""
    T: int
    BM: int
    BN: int
    i_min: np.ndarray
    j_max: np.ndarray
    causal: np.ndarray
    strict: np.ndarray
    gap: np.ndarray
    pairs: np.ndarray

    @staticmethod
    def make(T, block):
        T = pos_int(T, "T (sequence length)")
        BM, BN = check_block(block)
        i0 = np.arange(0, T, BM)
        i1 = np.minimum(i0 + BM, T) - 1
        j0 = np.arange(0, T, BN)
        j1 = np.minimum(j0 + BN, T) - 1
        causal = j0[None, :] <= i1[:, None]
        strict = j1[None, :] < i0[:, None]
        gap = np.where(strict, i0[:, None] - j1[None, :], 0)
        # causal pairs of block (I, J): sum over rows i of #{j in J : j <= i}
        rows = np.arange(T)
        cnt = np.clip(rows[:, None] - j0[None, :] + 1, 0, (j1 - j0 + 1)[None, :])    # (T, nJ)
        pairs = np.add.reduceat(cnt, i0, axis=0)                                       # (nI, nJ)
        return BlockGrid(T, BM, BN, i0, j1, causal, strict, gap, pairs)


@dataclass
class BlockPrediction:
    """Predicted block pruning of one head at level L = -delta on a (BM, BN) grid of length T.
    frac_blocks: E[pruned blocks] / causal blocks; frac_flops: E[pruned causal pairs] / causal pairs
    (QK^T and PV FLOPs); speedup: causal blocks / E[visited blocks] (time proportional to visited
    blocks, a model, not a measurement)."""
    L: float
    T: int
    BM: int
    BN: int
    method: str
    n_causal_blocks: int
    n_prunable_blocks: int
    expected_pruned_blocks: float
    frac_blocks: float
    frac_flops: float
    speedup: float


def predict_block_pruning(law, T, L, block=64):
    """Expected block pruning of one head from its law (no model run). law: HeadLaw; T: int > 0;
    L: the block level -delta > 0 (see acp_level); block: int or (BM, BN). Returns BlockPrediction.
    Diagonal blocks are never pruned; a strict block of gap n is pruned with probability P(S_n > L)."""
    g = BlockGrid.make(T, block)
    p = np.where(g.strict, 1.0 - law.survival(L, g.gap), 0.0)               # (nI, nJ)
    nb, exp_b = int(g.causal.sum()), float(p.sum())
    return BlockPrediction(float(L), g.T, g.BM, g.BN, law.method(L), nb, int(g.strict.sum()), exp_b,
                           exp_b / nb, float((p * g.pairs).sum() / g.pairs.sum()), nb / (nb - exp_b))


def pruned_block_mask(log_g, L, block=64):
    """The naive block rule on log-gate traces: log_g (..., T) float (numpy or torch), L > 0.
    Returns (pruned (..., nI, nJ) bool numpy, BlockGrid). A block is pruned iff it is strictly causal
    and c_{i_min} - c_{j_max} < -L (c the cumulative log-gate, float64)."""
    lg = log_g.detach().cpu().double().numpy() if isinstance(log_g, torch.Tensor) else np.asarray(log_g, np.float64)
    if lg.ndim == 0 or lg.shape[-1] == 0:
        raise ValueError(f"log_g must have a time axis of length T > 0; got shape {lg.shape}")
    gates.increments_from_log_gates(lg)                                       # validates: finite, <= 0
    g = BlockGrid.make(lg.shape[-1], block)
    c = np.cumsum(lg, axis=-1)                                                 # (..., T)
    d = c[..., g.i_min][..., :, None] - c[..., g.j_max][..., None, :]          # (..., nI, nJ)
    return (d < -float(L)) & g.strict, g


def measure_block_pruning(log_g, L, block=64):
    """Fraction of causal blocks (and of causal pairs) the rule prunes, per trace: log_g (S, T) or (T,).
    Returns dict with per-sequence arrays frac_blocks, frac_flops (S,), their means and SEs across sequences."""
    pruned, g = pruned_block_mask(log_g, L, block)
    pruned = pruned.reshape((-1,) + pruned.shape[-2:])
    fb = pruned.sum((1, 2)) / g.causal.sum()
    ff = (pruned * g.pairs).sum((1, 2)) / g.pairs.sum()
    S = len(fb)

    def se(a):
        return float(a.std(ddof=1) / math.sqrt(S)) if S > 1 else float("nan")
    return dict(frac_blocks=fb, frac_flops=ff, mean_blocks=float(fb.mean()), se_blocks=se(fb),
                mean_flops=float(ff.mean()), se_flops=se(ff), n_causal_blocks=int(g.causal.sum()))


# ----------------------------------------------------------------------------- horizons


@dataclass
class Horizon:
    """A KV-cache horizon: keys at distance > h are dropped. L: the window level used; p: the
    probability that the attention mass beyond h is at most tol (None for a certified horizon);
    method: how it was obtained. h = -1 would mean no key at all; h >= T keeps the whole cache."""
    h: int
    L: float
    p: float
    method: str


def kv_horizon(law, U, L_tol, p=0.99, T=None, n_max=1 << 24):
    """Per-head KV horizon from the window law: the p-quantile of W at L = 2U + L_tol (+ ln T when T
    is given, so that the summed mass of all dropped keys is <= tol; without T the bound is per key).
    Every key beyond the window has decay < e^{-L}, so mass <= tol whenever W <= h, probability >= p.
    law: HeadLaw; U >= 0; L_tol = ln(1/tol) > 0; p in (0, 1); T: None or int > 0. Returns Horizon."""
    U, L_tol = check_U(U), check_level(L_tol, "L_tol")
    L = 2 * U + L_tol + (math.log(pos_int(T, "T")) if T is not None else 0.0)
    return window_quantile(law, L, p, n_max)


def state_horizon(law, L_tol, p=0.99, n_max=1 << 24):
    """Memory horizon of a recurrent state (no KV cache): the p-quantile of W at L = L_tol = ln(1/tol), the
    steps after which an input's contribution to the state has decayed below tol (the product of the gates
    since then is < tol), with probability >= p. law: HeadLaw; L_tol > 0. Returns Horizon."""
    return window_quantile(law, check_level(L_tol, "L_tol"), p, n_max)


def window_quantile(law, L, p=0.99, n_max=1 << 24):
    """The p-quantile h of the window W at level L > 0 (P(W <= h) >= p), as a Horizon."""
    if not (0.0 < p < 1.0):
        raise ValueError(f"p must lie in (0, 1); got {p!r}")
    L = check_level(L)
    # P(W <= h) = 1 - P(W >= h + 1): smallest h with survival(h + 1) <= 1 - p, by doubling then bisection
    hi = max(int(2 * L / law.kappa) + 2, 16)
    if hi >= 1 << 62:                          # the windows' counts are int64: a level this far is no window
        raise ValueError(f"{law.name}: the window at L = {L:.3g} (kappa = {law.kappa:.3g}) is beyond 2^62 steps")
    while law.survival(L, np.array([hi + 1]))[0] > 1 - p:
        hi *= 2
        if hi > n_max:
            raise ValueError(f"{law.name}: the {p} quantile of the window exceeds {n_max} at L = {L:.3g}")
    lo = -1                                                                      # survival(0) = 1 > 1 - p
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if law.survival(L, np.array([mid + 1]))[0] <= 1 - p:
            hi = mid
        else:
            lo = mid
    return Horizon(int(hi), float(L), float(p), law.method(L))


def certified_horizon(x_min, U, L_tol, total=True):
    """Horizon guaranteed by the decay alone when every increment is >= x_min > 0 (every gate <= e^{-x_min}):
    key at distance d has decay <= e^{-d x_min}, so its attention weight is <= e^{2U - d x_min}.
    total=False: smallest h with e^{2U - d x_min} < tol for every d > h (per key);
    total=True: smallest h with sum_{d > h} e^{2U - d x_min} <= tol (all dropped keys together, any T).
    x_min > 0, U >= 0, L_tol = ln(1/tol) > 0. Returns Horizon (p = None)."""
    x_min = float(x_min)
    if not (x_min > 0 and math.isfinite(x_min)):
        raise ValueError(f"x_min must be finite and > 0 (no certified horizon without a gate bound); got {x_min!r}")
    U, L_tol = check_U(U), check_level(L_tol, "L_tol")
    L = 2 * U + L_tol
    if total:
        L -= math.log(-math.expm1(-x_min))                                       # geometric tail 1 / (1 - e^{-x_min})
    h = int(math.floor(L / x_min))                                               # (h + 1) x_min > L
    return Horizon(h, float(L), None, "certified per key" if not total else "certified, summed over keys")


if __name__ == "__main__":
    from foxwindow import outputs
    raise SystemExit(outputs.describe(__doc__))
