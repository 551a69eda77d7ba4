"""From the window law to compute and memory: block pruning and KV-cache horizons of FoX heads.

Adaptive computation pruning (ACP; Lin et al., 2025) skips every key block of the causal block grid
whose log-decay is below delta = -(2U + ln T) + ln(tol), U a bound on |q.k| * scale and tol the
attention mass allowed to go missing. Because the decay of a block is largest at its pair
(i_min of the query block, j_max of the key block), a block is pruned iff
    c_{i_min} - c_{j_max} = -(X_{j_max+1} + ... + X_{i_min}) < delta,
i.e. iff the increment walk over the block's gap n = i_min - j_max has passed L = -delta:
    P(block pruned) = P(S_n > L) = P(N <= n) = 1 - P(W >= n),
the first-passage law of forget.py / renewal.py at L. So the pruned fraction, its FLOP saving and
a kernel's speedup (time taken proportional to visited blocks, a model) follow from a head's law
without running the model. The same law gives a per-head KV-cache horizon for decoding: the
p-quantile of the window W at L = 2U + ln(1/tol) (+ ln T for the sum over keys), and, where the
gate weights bound the decay for every input, a certified horizon.

Law per head (HeadLaw): the iid law by exact numerics (exact.exact_first_passage, closed forms
where the gate has one) when the increments look independent (|tau - 1| <= 2 SE); otherwise the
autocorrelation-adjusted normal approximation S_n ~ N(n kappa, Var S_n) with
Var S_n = sigma^2 (n + 2 sum_{k<n} (n - k) rho_k) from the measured autocorrelation. The method
used is reported with every prediction.

`python prune.py` checks the predictions on the shipped model (CPU, held-out text): the laws are
fitted on one set of held-out sequences, the measurements are made on another.
`python prune.py --traces FILE --U X` does the same for any model's gate traces (forget.py --save-traces):
the rule needs only the log gates and delta, so the prediction vs measurement table, KV horizons, memory
saved and P(W > context) come from the traces alone (fitted on the odd sequences, measured on the even
ones); U must be given, and what needs the model (bits per byte, decoding, attention-mass coverage,
certified horizons, ACP's "auto" U) is left out and said so.
"""
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import special

from foxwindow import data, exact, forget, outputs, renewal, traces
from foxwindow import fox_attention as fa
from foxwindow import heads as heads_mod
from foxwindow import model as fm

CONTEXTS = (2048, 8192, 32768, 131072, 1048576)
DEFAULT_LOG_TOLS = (-4.0, -7.0, -10.0, -13.0)
EXACT_MAX_STEPS = 4096      # beyond L/kappa steps the lattice numerics get slow; the CLT is accurate there

# ----------------------------------------------------------------------------- validation


def check_tol(tol, name="tol"):
    """tol in (0, 1) -> ln(tol). Raises ValueError naming the argument otherwise."""
    try:
        t = float(tol)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1); got {tol!r}") from None
    if not (0.0 < t < 1.0):
        raise ValueError(f"{name} must lie in (0, 1) (the attention mass allowed to be pruned); got {tol!r}")
    return math.log(t)


def check_log_tol(log_tol, name="log_tol"):
    """ln(tol) < 0 and finite (tol in (0, 1)); returns it as a float."""
    try:
        v = float(log_tol)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a negative number (ln of a tol in (0, 1)); got {log_tol!r}") from None
    if not (v < 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be negative and finite (tol = e^{name} in (0, 1)); got {log_tol!r}")
    return v


def _pos_int(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name} must be a positive int; got {v!r}")
    return int(v)


def check_block(block):
    """block: an int B (square B x B blocks) or a pair (BM, BN) of positive ints."""
    if isinstance(block, (int, np.integer)) and not isinstance(block, bool):
        block = (block, block)
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise ValueError(f"block must be an int or a pair (BM, BN); got {block!r}")
    return _pos_int(block[0], "block size BM"), _pos_int(block[1], "block size BN")


def _float(v, name):
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {v!r}") from None


def check_U(U):
    U = _float(U, "U")
    if not (U >= 0 and math.isfinite(U)):
        raise ValueError(f"U (bound on |q.k| * scale) must be finite and >= 0; got {U!r}")
    return U


def acp_threshold(log_tol, U, T):
    """ACP's block threshold delta = -(2U + ln T) + ln(tol); the equivalent window level is L = -delta > 0."""
    return -(2.0 * check_U(U) + math.log(_pos_int(T, "T"))) + check_log_tol(log_tol)


# ----------------------------------------------------------------------------- the law of one head


SURVIVAL_TOL = 1e-2            # pruning predictions need P(N > n) to ~1e-2 (summed over n, relative to E[W])


@dataclass
class HeadLaw:
    """Increment law of one head, as far as the predictions need it.

    kappa, sigma2: mean and variance of X = -log g; rho: autocorrelation rho_0..rho_K (rho_0 = 1,
    zero beyond K; Geyer cut); tau = 1 + 2 sum rho_k; se_tau its standard error (0 when known);
    gate: a forget.Gate for the iid numerics (None: normal approximation only); iid: use them.
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
        """Law of a synthetic forget.Gate: iid ones use exact numerics; dependent ones (AR(1) logits)
        the normal approximation with their exact autocovariance."""
        m = gate.moments()
        rho = np.ones(1)
        if not gate.iid:
            g = gate.autocovariance(np.arange(max_lag + 1))
            rho = g / g[0]
        tau = 1.0 + 2.0 * float(rho[1:].sum())
        xm = float(gate.m) if isinstance(gate, forget.ConstantGate) else None
        return HeadLaw(str(gate), m.kappa, m.sigma2, rho, tau, 0.0, bool(gate.iid), gate if gate.iid else None, xm)

    @staticmethod
    def from_trace(log_g, name="trace", z=2.0, max_lag=256):
        """Law of one head fitted to log-gate traces log_g (S, T) (numpy or torch, <= 0), S >= 3 sequences.

        kappa, sigma2 pooled; rho within sequences (each about its own mean), pooled, cut by Geyer's
        initial positive sequence; se_tau by jackknife over sequences. iid when |tau - 1| <= z * se_tau.
        """
        lg = log_g.detach().cpu().numpy() if isinstance(log_g, torch.Tensor) else np.asarray(log_g)
        x = np.asarray(forget.increments_from_log_gates(lg.astype(np.float64)), dtype=np.float64)
        if x.ndim != 2 or x.shape[0] < 3 or x.shape[1] < 2:
            raise ValueError(f"log_g must be (S, T) with S >= 3 sequences and T >= 2; got shape {x.shape}")
        S, T = x.shape
        kappa, sigma2 = float(x.mean()), float(x.var())
        if kappa <= 0:
            raise ValueError(f"{name}: the gates never forget (kappa = 0); no window law")
        if sigma2 <= 1e-12 * kappa * kappa:                          # constant gate (ALiBi): rounding only
            return HeadLaw(name, kappa, 0.0, np.ones(1), 1.0, 0.0, False, None, float(x.min()))
        K = min(max_lag, T - 1)
        xd = x - x.mean(1, keepdims=True)
        f = np.fft.rfft(xd, 2 * T, axis=1)
        xx = np.fft.irfft(f * np.conj(f), axis=1)[:, : K + 1]       # (S, K+1) sum_t xd_t xd_{t+k}
        nk = T - np.arange(K + 1.0)
        g = xx.sum(0) / (nk * S)
        rho = g / g[0]
        cut = renewal.geyer_cut(rho)
        rho = rho[:cut].copy()
        tau = 1.0 + 2.0 * float(rho[1:].sum())
        g_loo = (xx.sum(0, keepdims=True) - xx) / (nk * (S - 1))
        tau_loo = 1.0 + 2.0 * (g_loo[:, 1:cut] / g_loo[:, :1]).sum(1)
        se_tau = float(np.sqrt((S - 1) / S * np.sum((tau_loo - tau_loo.mean()) ** 2)))
        iid = abs(tau - 1.0) <= z * se_tau
        gate = forget.EmpiricalGate(lg, name=name)
        return HeadLaw(name, kappa, sigma2, rho, tau, se_tau, bool(iid), gate, float(x.min()))

    # -- P(S_n <= L) = P(N > n) = P(W >= n), n = 0, 1, ...

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
        if meth in ("iid, closed form", "iid, exact numerics"):
            key = round(L, 12)
            if key not in self._cache:
                if isinstance(self.gate, forget.EmpiricalGate):
                    # a trace's step law: its atoms are bracketed to O(h), which bounds the survival (summed
                    # error <= mean_err) long before Var[W]; only the survival is used here
                    fp = exact.exact_first_passage(self.gate, math.exp(-L), tol=SURVIVAL_TOL, var_tol=math.inf)
                else:
                    fp = exact.exact_first_passage(self.gate, math.exp(-L))
                self._cache[key] = (fp.n0, np.clip(fp.survival, 0.0, 1.0))
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
        T = _pos_int(T, "T (sequence length)")
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
    L: window level -delta > 0 (see acp_threshold); block: int or (BM, BN). Returns BlockPrediction.
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
    forget.increments_from_log_gates(lg)                                       # validates: finite, <= 0
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


# ----------------------------------------------------------------------------- the pruned attention op


def auto_U(q, k, scale):
    """ACP's logit bound per head: U_h = scale * max_{b,i} |q_bih| * max_{b,j} |k_bjh| (Cauchy-Schwarz),
    over the whole batch. q, k (B, T, H, D). Returns (H,) float64."""
    qn = q.detach().double().norm(dim=-1).amax(dim=(0, 1))                    # (H,)
    kn = k.detach().double().norm(dim=-1).amax(dim=(0, 1))
    return qn * kn * scale


@dataclass
class PruneStats:
    """What one pruned attention call did, per head (H,) unless said: U and L used; pruned and causal
    block counts (summed over the batch); per-sequence pruned fraction of causal blocks (B, H) and of causal
    pairs (B, H, the attention FLOPs); the largest pruned
    attention mass of any row; the largest |pruned - dense| output entry and its bound (mass x range of v)."""
    U: np.ndarray
    L: np.ndarray
    pruned_blocks: np.ndarray
    causal_blocks: int
    frac_per_seq: np.ndarray
    flops_per_seq: np.ndarray
    max_pruned_mass: np.ndarray
    max_err: np.ndarray
    max_err_bound: np.ndarray
    max_excess: np.ndarray


def pruned_attention(q, k, v, log_fgate, *, log_tol=-10.0, U="auto", block=64, sm_scale=None, dense=False):
    """Causal forgetting attention with ACP block pruning, in plain torch on the full score matrix.

    q, k, v: (B, T, H, D) float (same dtype); log_fgate: (B, T, H) float32/64, <= 0.
    log_tol: ln of the tolerated pruned mass (< 0). U: "auto" (auto_U from these q, k), a float, or (H,).
    block: int or (BM, BN). dense: compute the dense output too, for the error statistics.
    Every row keeps its diagonal block, so its own key; the pruned mass of a row is at most
    T e^{2U} e^{delta} = tol. Returns (out (B, T, H, D) in q.dtype, PruneStats).
    """
    fa._check_inputs(q, k, v, log_fgate, sm_scale)
    log_tol = check_log_tol(log_tol)
    B, T, H, D = q.shape
    if k.shape[1] != T or k.shape[2] != H:
        raise ValueError(f"pruned_attention needs self-attention with one kv head per query head; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}")
    g = BlockGrid.make(T, block)
    scale = D ** -0.5 if sm_scale is None else sm_scale
    if isinstance(U, str):
        if U != "auto":
            raise ValueError(f"U must be 'auto', a number or an (H,) tensor; got {U!r}")
        Uh = auto_U(q, k, scale)
    else:
        Uh = torch.as_tensor(U, dtype=torch.float64).expand(H).clone()
        if not (torch.isfinite(Uh).all() and (Uh >= 0).all()):
            raise ValueError(f"U must be finite and >= 0; got {U!r}")
    Lh = 2 * Uh + math.log(T) - log_tol                                         # (H,) = -delta
    ct = torch.promote_types(q.dtype, torch.float32)
    rows = torch.arange(T)
    causal = rows[None, :] <= rows[:, None]                                     # (T, T)
    bi = torch.from_numpy(np.repeat(np.arange(len(g.i_min)), g.BM)[:T])        # block of each row/col
    bj = torch.from_numpy(np.repeat(np.arange(len(g.j_max)), g.BN)[:T])
    i_min, j_max = torch.from_numpy(g.i_min), torch.from_numpy(g.j_max)
    strict = torch.from_numpy(g.strict)
    outs, npruned, frac = [], torch.zeros(H, dtype=torch.long), torch.zeros(B, H, dtype=torch.float64)
    ffrac, pairs = torch.zeros(B, H, dtype=torch.float64), torch.from_numpy(g.pairs).double()
    mmass, merr, mbound = (torch.zeros(H, dtype=torch.float64) for _ in range(3))
    mexcess = torch.full((H,), -float("inf"), dtype=torch.float64)
    for b in range(B):                                                          # one sequence at a time: O(H T^2)
        qq, kk, vv = (t[b].to(ct).transpose(0, 1) for t in (q, k, v))          # (H, T, D)
        c = torch.cumsum(log_fgate[b].double(), 0).transpose(0, 1)             # (H, T) float64
        dc = c[:, :, None] - c[:, None, :]                                       # (H, T, T) = c_i - c_j
        logits = (qq @ kk.transpose(-1, -2)) * scale + dc.to(ct)
        logits = logits.masked_fill(~causal, float("-inf"))
        # block rule at the block's corner pair (i_min, j_max)
        blk = (c[:, i_min][:, :, None] - c[:, j_max][:, None, :] < -Lh[:, None, None]) & strict   # (H, nI, nJ)
        npruned += blk.sum((1, 2))
        frac[b] = blk.sum((1, 2)).double() / g.causal.sum()
        ffrac[b] = (blk * pairs).sum((1, 2)) / pairs.sum()
        keep = ~blk[:, bi][:, :, bj]                                             # (H, T, T)
        p = torch.softmax(logits.masked_fill(~keep, float("-inf")), -1)
        o = p @ vv                                                               # (H, T, D)
        outs.append(o.transpose(0, 1))
        if dense:
            pd = torch.softmax(logits, -1)
            od = pd @ vv
            mass = (pd * (~keep)).sum(-1)                                         # (H, T) pruned mass of each row
            vrange = (vv.amax(1) - vv.amin(1)).double()                           # (H, D)
            mmass = torch.maximum(mmass, mass.double().amax(1))
            merr = torch.maximum(merr, (o - od).abs().double().amax((1, 2)))
            bound = mass.double()[:, :, None] * vrange[:, None, :]                      # (H, T, D)
            mbound = torch.maximum(mbound, bound.amax((1, 2)))
            mexcess = torch.maximum(mexcess, ((o - od).abs().double() - bound).amax((1, 2)))
    out = torch.stack(outs, 0).to(q.dtype)
    st = PruneStats(Uh.numpy(), Lh.numpy(), npruned.numpy(), int(g.causal.sum()) * B, frac.numpy(), ffrac.numpy(),
                    mmass.numpy(), merr.numpy(), mbound.numpy(), mexcess.numpy())
    return out, st


@contextmanager
def acp_model(log_tol, block=64, record=None, U="auto"):
    """Run a fox_attention FoXLM with ACP pruning in every layer: inside the block, the model's attention
    op (model.forgetting_attention, which the FoX layer calls) is replaced by pruned_attention (with this U);
    each call appends its PruneStats to `record` (a list, layers in call order). Restored on exit."""
    orig = fm.forgetting_attention                       # the FoX layer calls model.forgetting_attention

    def op(q, k, v, log_fgate, *, sm_scale=None, causal=True, chunk=128):
        if not causal:
            raise ValueError("ACP pruning is defined for causal attention")
        out, st = pruned_attention(q, k, v, log_fgate, log_tol=log_tol, U=U, block=block, sm_scale=sm_scale,
                                   dense=True)
        if record is not None:
            record.append(st)
        return out

    fm.forgetting_attention = op
    try:
        yield record
    finally:
        fm.forgetting_attention = orig


# ----------------------------------------------------------------------------- KV-cache horizons


@dataclass
class Horizon:
    """A KV-cache horizon: keys at distance > h are dropped. L: the window level used; p: the
    probability that the attention mass beyond h is at most tol (None for a certified horizon);
    method: how it was obtained. h = -1 would mean no key at all; h >= T keeps the whole cache."""
    h: int
    L: float
    p: float
    method: str


def kv_horizon(law, U, log_tol, p=0.99, T=None, n_max=1 << 24):
    """Per-head KV horizon from the window law: the p-quantile of W at L = 2U + ln(1/tol) (+ ln T when T
    is given, so that the summed mass of all dropped keys is <= tol; without T the bound is per key).
    Every key beyond the window has decay < e^{-L}, so mass <= tol whenever W <= h, probability >= p.
    law: HeadLaw; U >= 0; log_tol < 0; p in (0, 1); T: None or int > 0. Returns Horizon."""
    U, log_tol = check_U(U), check_log_tol(log_tol)
    if not (0.0 < p < 1.0):
        raise ValueError(f"p must lie in (0, 1); got {p!r}")
    L = 2 * U - log_tol + (math.log(_pos_int(T, "T")) if T is not None else 0.0)
    # P(W <= h) = 1 - P(W >= h + 1): smallest h with survival(h + 1) <= 1 - p, by doubling then bisection
    hi = max(int(2 * L / law.kappa) + 2, 16)
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


def certified_horizon(x_min, U, log_tol, total=True):
    """Horizon guaranteed by the decay alone when every increment is >= x_min > 0 (every gate <= e^{-x_min}):
    key at distance d has decay <= e^{-d x_min}, so its attention weight is <= e^{2U - d x_min}.
    total=False: smallest h with e^{2U - d x_min} < tol for every d > h (per key);
    total=True: smallest h with sum_{d > h} e^{2U - d x_min} <= tol (all dropped keys together, any T).
    x_min > 0, U >= 0, log_tol < 0. Returns Horizon (p = None)."""
    x_min = float(x_min)
    if not (x_min > 0 and math.isfinite(x_min)):
        raise ValueError(f"x_min must be finite and > 0 (no certified horizon without a gate bound); got {x_min!r}")
    U, log_tol = check_U(U), check_log_tol(log_tol)
    L = 2 * U - log_tol
    if total:
        L -= math.log(-math.expm1(-x_min))                                       # geometric tail 1 / (1 - e^{-x_min})
    h = int(math.floor(L / x_min))                                               # (h + 1) x_min > L
    return Horizon(h, float(L), None, "certified per key" if not total else "certified, summed over keys")


def certified_x_min(attn, ln):
    """Certified smallest increment of each head of a fox_attention ForgettingAttention fed by RMSNorm `ln`:
    the RMSNorm output is gamma * x_hat with ||x_hat||_2 <= sqrt(d), so the gate logit is at most
    b_h + sqrt(d) ||w_h * gamma||_2 for every input. Returns (H,) float64 numpy (0 for a fixed gate)."""
    if attn.f_proj is None:
        return np.zeros(attn.num_heads)
    w = attn.f_proj.weight.detach().double()                                     # (H, d)
    gamma = ln.weight.detach().double() if ln.weight is not None else torch.ones(w.shape[1], dtype=torch.float64)
    zmax = attn.f_proj.bias.detach().double() + math.sqrt(w.shape[1]) * (w * gamma).norm(dim=1)
    return torch.nn.functional.softplus(-zmax).numpy()                            # X = softplus(-z) >= this


# ----------------------------------------------------------------------------- decoding with horizons


@torch.no_grad()
def decode(model, tokens, horizons=None):
    """Token-by-token decoding of a fox_attention FoXLM in the recurrent form, each head keeping only the
    keys within its horizon: head h of layer l attends to keys at distance <= horizons[l][h]
    (None: the full cache). tokens (B, T) int64. Returns (logits (B, T, V) float32, kept (n_layers, H)
    int: the cache entries each head holds after the last token, min(h + 1, T)).

    The layer's cache is one ring buffer of max_h + 1 slots (B, H, slots, D) with c_j per slot; a head
    never reads a slot older than its own horizon, so its memory is min(h + 1, t) entries."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long or tokens.numel() == 0:
        raise ValueError(f"tokens must be a non-empty (B, T) int64 tensor; got {getattr(tokens, 'shape', tokens)}")
    B, T = tokens.shape
    nl, H = len(model.blocks), model.cfg.n_heads
    D = model.cfg.d_model // H
    if horizons is None:
        hz = np.full((nl, H), T, dtype=np.int64)
    else:
        hz = np.asarray(horizons)
        if hz.shape != (nl, H) or not np.issubdtype(hz.dtype, np.integer) or (hz < 0).any():
            raise ValueError(f"horizons must be (n_layers, n_heads) = {(nl, H)} ints >= 0; got {hz.shape} {hz.dtype}")
        hz = np.minimum(hz, T)
    slots = [int(hz[li].max()) + 1 for li in range(nl)]
    Kb = [torch.zeros(B, H, n, D) for n in slots]
    Vb = [torch.zeros(B, H, n, D) for n in slots]
    Cb = [torch.zeros(B, H, n, dtype=torch.float64) for n in slots]
    Pb = [torch.full((n,), -1, dtype=torch.long) for n in slots]                 # position held by each slot
    hzt = [torch.from_numpy(hz[li])[:, None] for li in range(nl)]                  # (H, 1)
    c_now = [torch.zeros(B, H, dtype=torch.float64) for _ in range(nl)]
    out = []
    for t in range(T):
        x = model.wte(tokens[:, t])                                              # (B, d)
        for li, blk in enumerate(model.blocks):
            a = blk.attn
            xin = blk.ln1(x)[:, None]                                            # (B, 1, d)
            q = a.q_proj(xin).view(B, H, D)
            s = t % slots[li]                                                     # overwrite the oldest slot
            Kb[li][:, :, s] = a.k_proj(xin).view(B, H, D)
            Vb[li][:, :, s] = a.v_proj(xin).view(B, H, D)
            c_now[li] = c_now[li] + a.log_fgate(xin)[:, 0].double()                # (B, H)
            Cb[li][:, :, s] = c_now[li]
            Pb[li][s] = t
            dist = t - Pb[li]                                                     # (slots,)
            ok = (Pb[li] >= 0)[None, :] & (dist[None, :] <= hzt[li])              # (H, slots) within the horizon
            logit = (Kb[li] @ q[..., None])[..., 0] * a.scale + (c_now[li][..., None] - Cb[li]).float()
            logit = logit.masked_fill(~ok, float("-inf"))                         # (B, H, slots)
            o = (torch.softmax(logit, -1)[:, :, None] @ Vb[li])[:, :, 0]          # (B, H, D)
            x = x + a.out_proj(o.reshape(B, H * D))
            x = x + blk.mlp(blk.ln2(x))
        out.append(model.ln_f(x) @ model.wte.weight.t())
    kept = np.minimum(hz + 1, T)
    return torch.stack(out, 1).float(), kept


def bits_per_byte(logits, targets):
    """Mean cross-entropy in bits, accumulated in float64: logits (B, T, V), targets (B, T) int64."""
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                   targets.reshape(-1)) / math.log(2))


# ----------------------------------------------------------------------------- per-head entries (model and traces)


def pruning_entry(pr, frac_per_seq, flops_per_seq):
    """Prediction vs measurement of one head at one tol. pr: BlockPrediction; frac_per_seq, flops_per_seq:
    (S,) float, the measured pruned fraction of causal blocks / pairs per held-out sequence. Returns a dict
    (err = measured - predicted, se_meas its SE over sequences, z = err / se_meas or None when se_meas = 0)."""
    fs = np.asarray(frac_per_seq, dtype=np.float64)
    m = float(fs.mean())
    se = float(fs.std(ddof=1) / math.sqrt(len(fs))) if len(fs) > 1 else float("nan")
    return dict(method=pr.method, pred_frac_blocks=pr.frac_blocks, pred_frac_flops=pr.frac_flops,
                pred_speedup=pr.speedup, meas_frac_blocks=m, se_meas=se, err=m - pr.frac_blocks,
                meas_frac_flops=float(np.mean(flops_per_seq)), z=(m - pr.frac_blocks) / se if se > 0 else None)


def _p_beyond(law, L, ctx):
    """P(W > ctx) = P(W >= ctx + 1) at level L."""
    return float(law.survival(L, np.array([ctx + 1]))[0])


def horizon_entry(law, U, log_tol, p, T, ctx):
    """KV horizons of one head at one tol: the p-quantile of W at L = 2U + ln(1/tol) + ln T' for T' = T and
    each of CONTEXTS, the memory saved at CONTEXTS, the horizon certified by the smallest increment seen in
    the fitting traces (not a guarantee: other inputs may forget more slowly), and P(W > ctx) at the level
    of a context of ctx tokens. law: HeadLaw; U >= 0; log_tol < 0; p in (0, 1); T, ctx: int > 0."""
    hz = {str(t): kv_horizon(law, U, log_tol, p, T=t).h for t in (T,) + CONTEXTS}
    return dict(horizon=hz, horizon_method=kv_horizon(law, U, log_tol, p, T=T).method,
                mem_saved={str(t): 1 - min(hz[str(t)] + 1, t) / t for t in CONTEXTS},
                certified_horizon_trace_xmin=certified_horizon(law.x_min, U, log_tol).h if law.x_min > 0 else None,
                p_window_beyond_context=_p_beyond(law, 2 * U - log_tol + math.log(ctx), ctx))


def memory_summary(entries):
    """Mean over heads of the memory saved at CONTEXTS and of P(W > context), from horizon_entry dicts."""
    return dict(mem_saved={str(t): float(np.mean([e["mem_saved"][str(t)] for e in entries])) for t in CONTEXTS},
                heads_beyond_context=float(np.mean([e["p_window_beyond_context"] for e in entries])))


# ----------------------------------------------------------------------------- the shipped model


def _sanitize(v):
    """JSON-safe: numpy scalars/arrays to Python, non-finite floats to None."""
    if isinstance(v, dict):
        return {k: _sanitize(u) for k, u in v.items()}
    if isinstance(v, (list, tuple)):
        return [_sanitize(u) for u in v]
    if isinstance(v, np.ndarray):
        return _sanitize(v.tolist())
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def analyse_model(checkpoint="checkpoints/fox_shakespeare.pt", log_tols=DEFAULT_LOG_TOLS, block=64, n_seq=8,
                  seq_len=1024, p=0.99, decode_seqs=4, decode_log_tol=None, seed=0, progress=True, mass_rows=4,
                  U="auto"):
    """Predictions from the gate laws against measurements on the shipped model (CPU).

    The laws are fitted on n_seq held-out sequences and everything is measured on n_seq others (disjoint
    windows of seq_len + 1 bytes). U is ACP's "auto" bound per head from the measured run's q/k norms (the
    same U enters prediction and measurement); U may instead be fixed (a number >= 0), which is then no
    bound on the logits and the pruned mass can exceed tol. mass_rows: every mass_rows-th query row is checked against
    its KV horizon (the attention mass beyond it, from the dense attention; 0 skips). Returns a JSON-able dict.
    """
    from tqdm import tqdm
    t0 = time.perf_counter()
    log_tols = [check_log_tol(t, "log tol") for t in log_tols]
    BM, BN = check_block(block)
    n_seq, seq_len = _pos_int(n_seq, "n_seq"), _pos_int(seq_len, "seq_len")
    if n_seq < 3:
        raise ValueError(f"n_seq must be >= 3 (jackknife over sequences for the law); got {n_seq}")
    if not 0 <= decode_seqs <= n_seq:
        raise ValueError(f"decode_seqs must lie in [0, n_seq = {n_seq}]; got {decode_seqs}")
    decode_log_tol = log_tols[len(log_tols) // 2] if decode_log_tol is None else check_log_tol(decode_log_tol)
    torch.manual_seed(seed)
    model, meta = fm.load_model(checkpoint)
    nl, H = len(model.blocks), model.cfg.n_heads
    toks, spans = data.heldout_tokens(n_seq=2 * n_seq, seq_len=seq_len + 1)
    fit, meas = toks[1::2], toks[0::2]                                            # disjoint windows
    bar = tqdm(total=2 + len(log_tols) + (1 + len(log_tols) if decode_seqs else 0), desc="prune",
               disable=not progress, file=sys.stderr)

    # laws from the fitting sequences
    _, cache = traces.run_with_cache(model, fit[:, :-1], names_filter=lambda n: n.endswith("hook_log_fgate"))
    laws = [[HeadLaw.from_trace(cache[f"blocks.{li}.attn.hook_log_fgate"][:, :, h], name=f"L{li}H{h}")
             for h in range(H)] for li in range(nl)]
    bar.update()
    x, y = meas[:, :-1], meas[:, 1:]
    # the dense baseline runs through the same op with nothing pruned (ln tol = -1e4), so the differences
    # below are the pruning's alone, not two implementations' rounding
    with torch.no_grad(), acp_model(-1e4, (BM, BN)):
        logits_dense = model(x)
    bpb_dense = bits_per_byte(logits_dense, y)
    inputs = heads_mod.capture(model, x)[1]                                          # layer inputs (S, T, d)
    with torch.no_grad():
        vmax = float(max(blk.attn.v_proj(inputs[li]).abs().max() for li, blk in enumerate(model.blocks)))
    bar.update()
    xcert = np.stack([certified_x_min(blk.attn, blk.ln1) for blk in model.blocks])   # (nl, H)

    per_tol, heads = [], [[dict(layer=li, head=h, kappa=laws[li][h].kappa, sigma2=laws[li][h].sigma2,
                                tau=laws[li][h].tau, se_tau=laws[li][h].se_tau, iid=laws[li][h].iid,
                                x_min_trace=laws[li][h].x_min, x_min_certified=float(xcert[li, h]), tols=[])
                           for h in range(H)] for li in range(nl)]
    for lt in log_tols:
        rec = []
        with torch.no_grad(), acp_model(lt, (BM, BN), rec, U):
            logits = model(x)
        if len(rec) != nl:
            raise RuntimeError(f"expected {nl} attention calls in the pruned forward; saw {len(rec)}")
        bpb = bits_per_byte(logits, y)
        dz = (logits - logits_dense).abs().amax(-1)                                # (B, T) max logit change
        tot_pred = tot_meas = tot_blocks = 0.0
        pair_pred = pair_meas = 0.0
        for li, st in enumerate(rec):
            for h in range(H):
                pr = predict_block_pruning(laws[li][h], seq_len, float(st.L[h]), (BM, BN))
                fs = st.frac_per_seq[:, h]
                heads[li][h]["tols"].append(dict(
                    log_tol=lt, U=float(st.U[h]), L=float(st.L[h]),
                    **pruning_entry(pr, fs, st.flops_per_seq[:, h]),
                    max_pruned_mass=float(st.max_pruned_mass[h]), max_out_err=float(st.max_err[h]),
                    max_out_err_bound=float(st.max_err_bound[h])))
                tot_pred += pr.expected_pruned_blocks
                pair_pred += pr.frac_flops
                pair_meas += float(st.flops_per_seq[:, h].mean())
                tot_meas += st.pruned_blocks[h] / len(fs)
                tot_blocks += pr.n_causal_blocks
        per_tol.append(dict(
            log_tol=lt, bpb=bpb, delta_bpb=bpb - bpb_dense,
            readout_bound=float(2 * dz.mean() / math.log(2)),
            pred_frac_blocks=tot_pred / tot_blocks, meas_frac_blocks=tot_meas / tot_blocks,
            pred_frac_flops=pair_pred / (nl * H), meas_frac_flops=pair_meas / (nl * H),
            pred_speedup=tot_blocks / (tot_blocks - tot_pred),
            meas_speedup=tot_blocks / (tot_blocks - tot_meas),
            max_pruned_mass=float(max(st.max_pruned_mass.max() for st in rec)),
            max_excess=float(max(st.max_excess.max() for st in rec)),
            max_abs_v=vmax))
        bar.update()

    # KV horizons and memory, at each tol, from the law and the measured U
    ctx = model.cfg.context
    for li in range(nl):
        for h in range(H):
            law = laws[li][h]
            for e in heads[li][h]["tols"]:
                Uh, lt = e["U"], e["log_tol"]                 # this head's U (U itself stays the run's choice)
                e.update(horizon_entry(law, Uh, lt, p, seq_len, ctx))
                e["certified_horizon"] = certified_horizon(xcert[li, h], Uh, lt).h if xcert[li, h] > 0 else None
            heads[li][h]["p_window_beyond_context_eps1e-3"] = _p_beyond(law, forget.threshold(1e-3), ctx)
    if mass_rows:
        # does the horizon hold the attention? mass window = smallest d with mass beyond d <= tol; the
        # horizon suffices for a row iff its mass window <= h
        rows = torch.arange(0, seq_len, mass_rows)
        for i, lt in enumerate(log_tols):
            for li in range(nl):
                mw = heads_mod.mass_windows(model.blocks[li].attn, inputs[li], math.exp(lt), rows).numpy()  # (S, R, H)
                for h in range(H):
                    e = heads[li][h]["tols"][i]
                    e["mass_window_mean"] = float(mw[:, :, h].mean())
                    e["mass_window_max"] = int(mw[:, :, h].max())
                    e["horizon_coverage"] = float((mw[:, :, h] <= e["horizon"][str(seq_len)]).mean())
    for i, r in enumerate(per_tol):
        es = [heads[li][h]["tols"][i] for li in range(nl) for h in range(H)]
        r.update(memory_summary(es))
        if mass_rows:
            r["min_horizon_coverage"] = float(min(e["horizon_coverage"] for e in es))

    # decoding with the horizons (recurrent form), against the full cache
    dec = None
    if decode_seqs:
        xd, yd = x[:decode_seqs], y[:decode_seqs]
        td = time.perf_counter()
        lg_full, kept_full = decode(model, xd)
        t_full = time.perf_counter() - td
        bar.update()
        dec = dict(n_seq=decode_seqs, bpb_full=bits_per_byte(lg_full, yd), seconds_full=t_full,
                   max_abs_logit_diff_vs_parallel=float((lg_full - logits_dense[:decode_seqs]).abs().max()),
                   runs=[])
        for i, lt in enumerate(log_tols):
            hz = np.array([[heads[li][h]["tols"][i]["horizon"][str(seq_len)] for h in range(H)] for li in range(nl)])
            lg_h, kept = decode(model, xd, hz)
            dec["runs"].append(dict(log_tol=lt, horizons=hz, bpb=bits_per_byte(lg_h, yd),
                                    delta_bpb=bits_per_byte(lg_h, yd) - dec["bpb_full"],
                                    cache_entries=int(kept.sum()), cache_entries_full=int(kept_full.sum()),
                                    mem_frac=float(kept.sum() / kept_full.sum())))
            bar.update()
    bar.close()
    info = dict(checkpoint=checkpoint, model=meta.get("name", "fox_shakespeare"), n_seq=n_seq, seq_len=seq_len,
                block=[BM, BN], log_tols=log_tols, p=p, decode_log_tol=decode_log_tol, training_context=ctx,
                fit_spans=spans[1::2], measure_spans=spans[0::2], bpb_dense=bpb_dense,
                U="auto: scale * max|q| * max|k| per head over the measured batch" if U == "auto" else
                f"fixed {float(U):g} (not a bound on |q.k| * scale: the pruned mass may exceed tol)",
                speedup_model="time proportional to visited blocks",
                seconds=time.perf_counter() - t0, torch_threads=torch.get_num_threads())
    return _sanitize(dict(info=info, per_tol=per_tol, decode=dec,
                          heads=[heads[li][h] for li in range(nl) for h in range(H)]))


# ----------------------------------------------------------------------------- any model's traces


TRACE_LEFT_OUT = ("bits per byte, decoding, attention-mass coverage of the horizons, the horizons certified by "
                  "the gate weights and ACP's 'auto' U (from the q/k norms) need the model itself; a trace file "
                  "holds only the log gates")


def analyse_traces(path, U, log_tols=DEFAULT_LOG_TOLS, block=64, p=0.99, context=None, report_log_tol=None):
    """Block pruning and KV horizons from a trace file written by traces.save_trace (any model's gates).

    The rule prunes a block from the log gates and delta = -(2U + ln T) + ln tol alone, so everything that
    needs no model is computed: each head's law is fitted on the odd sequences (1, 3, ...) and the pruned
    fraction is measured on the even ones (0, 2, ...), as analyse_model does with held-out text.
    path: .npz with {layer: (S, T, H) float32 log gates}, S >= 6; U: float >= 0 (a fixed bound on
    |q.k| * scale: it is not checked against the model's logits); log_tols: ln tol values < 0; block: int or
    (BM, BN); p: KV horizon quantile in (0, 1); context: int > 0, the context for P(W > context) (None: the
    trace length T); report_log_tol: the tol of the per-head text table (None: the middle one).
    Returns a JSON-able dict like analyse_model's, without the columns that need the model.
    """
    t0 = time.perf_counter()
    U = check_U(U)
    log_tols = [check_log_tol(t, "log tol") for t in log_tols]
    if not log_tols:
        raise ValueError("log_tols must hold at least one ln tol")
    BM, BN = check_block(block)
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1); got {p!r}")
    report_log_tol = log_tols[len(log_tols) // 2] if report_log_tol is None else check_log_tol(report_log_tol)
    if report_log_tol not in log_tols:
        raise ValueError(f"report_log_tol {report_log_tol} is not one of log_tols {log_tols}")
    trs, meta = heads_mod.load_traces_checked(path)
    S, T = next(iter(trs.values())).shape[:2]
    if S < 6:
        raise ValueError(f"{path}: {S} sequences; the laws are fitted on half of them and the pruning measured on "
                         "the other half, so at least 6 are needed (3 for each half's jackknife)")
    ctx = T if context is None else _pos_int(context, "context")
    heads, per_tol = [], [dict(log_tol=lt) for lt in log_tols]
    for li, (name, tr) in enumerate(trs.items()):
        fit, meas = tr[1::2].astype(np.float64), tr[0::2].astype(np.float64)      # (S/2, T, H) each, disjoint
        for h in range(tr.shape[2]):
            law = HeadLaw.from_trace(fit[:, :, h], name=f"{name}[{h}]")
            hd = dict(layer=li, layer_name=name, head=h, kappa=law.kappa, sigma2=law.sigma2, tau=law.tau,
                      se_tau=law.se_tau, iid=law.iid, x_min_trace=law.x_min, tols=[],
                      **{"p_window_beyond_context_eps1e-3": _p_beyond(law, forget.threshold(1e-3), ctx)})
            for lt in log_tols:
                L = -acp_threshold(lt, U, T)
                m = measure_block_pruning(meas[:, :, h], L, (BM, BN))
                hd["tols"].append(dict(log_tol=lt, U=U, L=L,
                                       **pruning_entry(predict_block_pruning(law, T, L, (BM, BN)),
                                                       m["frac_blocks"], m["frac_flops"]),
                                       **horizon_entry(law, U, lt, p, T, ctx)))
            heads.append(hd)
    for i, r in enumerate(per_tol):
        es = [hd["tols"][i] for hd in heads]
        pb, mb = (float(np.mean([e[k] for e in es])) for k in ("pred_frac_blocks", "meas_frac_blocks"))
        r.update(pred_frac_blocks=pb, meas_frac_blocks=mb,
                 pred_frac_flops=float(np.mean([e["pred_frac_flops"] for e in es])),
                 meas_frac_flops=float(np.mean([e["meas_frac_flops"] for e in es])),
                 pred_speedup=1 / (1 - pb), meas_speedup=1 / (1 - mb), **memory_summary(es))
    info = dict(source="traces", traces=path, model=meta.get("model", "?"), n_seq=len(range(0, S, 2)),
                n_fit=len(range(1, S, 2)), seq_len=T, block=[BM, BN], log_tols=log_tols, p=p,
                decode_log_tol=report_log_tol, context=ctx, context_given=context is not None,
                U=f"fixed {U:g} (given; not checked against the model's logits)", left_out=TRACE_LEFT_OUT,
                speedup_model="time proportional to visited blocks", seconds=time.perf_counter() - t0)
    return _sanitize(dict(info=info, per_tol=per_tol, decode=None, heads=heads))


def format_report(res):
    """The per-head table (at the decoding tol) and the per-tol summary, as text. res: from analyse_model, or
    from analyse_traces (source "traces"), whose columns that need the model are left out and said so."""
    info = res["info"]
    traced = info.get("source") == "traces"
    i = info["log_tols"].index(info["decode_log_tol"])
    if traced:
        ctx = info["context"]
        out = [f"ACP block pruning and KV horizons from gate traces: {info['traces']} (model {info['model']}), "
               f"{info['n_seq']} sequences x {info['seq_len']} tokens measured (laws fitted on {info['n_fit']} "
               f"other sequences), blocks {info['block'][0]}x{info['block'][1]}, U = {info['U']}.",
               f"Left out: {info['left_out']}.",
               f"Per head at ln tol = {info['decode_log_tol']:g}: pruned fraction of causal blocks predicted from "
               f"the law vs measured on the traces (+- SE over sequences); KV horizon h = {info['p']} quantile of W "
               f"at L = 2U + ln(1/tol) + ln T; P(W>ctx) at context {ctx}"
               f"{'' if info['context_given'] else ' (the trace length; --context sets it)'}."]
    else:
        ctx = info["training_context"]
        out = [f"ACP block pruning and KV horizons: {info['checkpoint']}, {info['n_seq']} held-out sequences x "
               f"{info['seq_len']} bytes (laws fitted on {info['n_seq']} other sequences), blocks {info['block'][0]}x"
               f"{info['block'][1]}, U = {info['U']}.",
               f"Per head at ln tol = {info['decode_log_tol']:g}: pruned fraction of causal blocks predicted from "
               f"the law vs measured (+- SE over sequences); KV horizon h = {info['p']} quantile of W at "
               f"L = 2U + ln(1/tol) + ln T; cert = certified horizon from the gate weights (summed over keys); "
               f"Wm = largest attention-mass window at tol (mass beyond it <= tol), cov = fraction of rows with "
               f"Wm <= h."]
    model_cols = "" if traced else f" {'Wm':>5s} {'cov':>5s} {'cert':>9s}"
    out.append(f"{'L.H':>4s} {'kappa':>7s} {'tau':>5s} {'law':>9s} {'U':>6s} {'L':>6s} {'pred':>6s} "
               f"{'meas':>14s} {'err':>7s} {'h(T)':>7s}{model_cols} {'mem@32k':>7s} {'mem@1M':>7s} {'P(W>ctx)':>8s}")
    out.append("-" * len(out[-1]))
    for hd in res["heads"]:
        e = hd["tols"][i]
        law = {"iid, exact numerics": "iid exact", "autocorrelation-adjusted normal": "AR normal"}.get(
            e["method"], e["method"][:9])
        cols = ""
        if not traced:
            cert = e["certified_horizon"]
            cols = (f" {e.get('mass_window_max', -1):5d} {e.get('horizon_coverage', float('nan')):5.3f} "
                    f"{cert if cert is not None else '-':>9}")
        out.append(f"{hd['layer']:>2d}.{hd['head']:<1d} {hd['kappa']:7.4f} {hd['tau']:5.2f} {law:>9s} {e['U']:6.2f} "
                   f"{e['L']:6.2f} {e['pred_frac_blocks']:6.3f} {e['meas_frac_blocks']:6.3f}+-{e['se_meas']:<6.3f} "
                   f"{e['err']:+7.3f} {e['horizon'][str(info['seq_len'])]:>7d}{cols} {e['mem_saved']['32768']:7.3f} "
                   f"{e['mem_saved']['1048576']:7.3f} {e['p_window_beyond_context']:8.3f}")
    if traced:
        names = sorted({(hd["layer"], hd["layer_name"]) for hd in res["heads"]})
        out.append("layers: " + ", ".join(f"{li} = {n}" for li, n in names))
    out.append("")
    mem_hdr = " ".join(f"{'mem@' + (f'{T // 1024}k' if T < 1 << 20 else '1M'):>8s}" for T in CONTEXTS)
    if traced:
        out.append("Per tol, all heads:")
        hdr = f"{'ln tol':>6s} {'pred blk':>8s} {'meas blk':>8s} {'FLOP p/m':>11s} {'speedup p/m':>11s} " + mem_hdr
    else:
        out.append(f"Model, per tol (dense bits/byte {info['bpb_dense']:.4f}; mass bound: every row's pruned "
                   f"attention mass <= tol; output bound: |pruned - dense| <= mass x range(v) per entry, excess = "
                   f"largest |pruned - dense| - bound, which float32 rounding alone puts near 1e-7 x max|v|):")
        hdr = (f"{'ln tol':>6s} {'pred blk':>8s} {'meas blk':>8s} {'FLOP p/m':>11s} {'speedup p/m':>11s} "
               f"{'dbpb':>9s} {'readout':>8s} {'max mass':>9s} {'tol':>9s} {'excess':>9s} " + mem_hdr)
    out.append(hdr)
    out.append("-" * len(hdr))
    for r in res["per_tol"]:
        model = "" if traced else (f"{r['delta_bpb']:+9.2e} {r['readout_bound']:8.2e} {r['max_pruned_mass']:9.2e} "
                                   f"{math.exp(r['log_tol']):9.2e} {r['max_excess']:+9.1e} ")
        out.append(f"{r['log_tol']:6.1f} {r['pred_frac_blocks']:8.3f} {r['meas_frac_blocks']:8.3f} "
                   f"{r['pred_frac_flops']:5.3f}/{r['meas_frac_flops']:5.3f} "
                   f"{r['pred_speedup']:5.2f}/{r['meas_speedup']:<5.2f} " + model
                   + " ".join(f"{r['mem_saved'][str(T)]:8.3f}" for T in CONTEXTS))
    if traced:
        out.append("mem@T: KV memory saved at context T (1 - kept/T, mean over heads); speedup: time proportional "
                   "to visited blocks (a model).")
    else:
        out.append("dbpb: pruned - dense bits/byte; readout: 2 mean_t max|d logit| / ln 2, a bound on |dbpb| from "
                   "the measured logit change; mem@T: KV memory saved at context T (1 - kept/T, mean over heads).")
    d = res.get("decode")
    if d:
        out.append("")
        out.append(f"Decoding (recurrent form, {d['n_seq']} sequences): full cache {d['bpb_full']:.4f} bits/byte "
                   f"(max |logit - parallel| {d['max_abs_logit_diff_vs_parallel']:.1e}, {d['seconds_full']:.1f} s)")
        for r in d["runs"]:
            out.append(f"  ln tol {r['log_tol']:6.1f}: horizons {r['horizons']}, bits/byte {r['bpb']:.4f} "
                       f"({r['delta_bpb']:+.2e}), cache {r['cache_entries']}/{r['cache_entries_full']} entries "
                       f"({r['mem_frac']:.3f} of full)")
    pc = [h["tols"][i]["p_window_beyond_context"] for h in res["heads"]]
    pe = [h["p_window_beyond_context_eps1e-3"] for h in res["heads"]]
    out.append(f"windows beyond the {'context' if traced else 'training context'} ({ctx}): at "
               f"L = 2U + ln(1/tol) + ln ctx, mean P(W > ctx) over heads {np.mean(pc):.3f}, heads with P > 1/2: "
               f"{sum(v > 0.5 for v in pc)} of {len(pc)}; at eps = 1e-3 (decay alone): {np.mean(pe):.3f}, "
               f"{sum(v > 0.5 for v in pe)} of {len(pe)}")
    threads = "" if traced else f" on {info['torch_threads']} threads"
    out.append(f"run time {info['seconds']:.1f} s{threads}")
    return "\n".join(out)


def main(argv=None):
    p = outputs.parser("ACP block pruning and KV-cache horizons of FoX heads: "
                       "predictions from the gate laws against the shipped model, or against any model's "
                       "gate traces (--traces, from forget.py --save-traces).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tol", type=float, nargs="+", help="tolerated pruned attention mass, each in (0, 1)")
    g.add_argument("--log-tol", type=float, nargs="+", help=f"ln tol, each < 0 (default {list(DEFAULT_LOG_TOLS)})")
    p.add_argument("--block", type=int, nargs="+", default=[64, 64], help="block size BM [BN] (default 64 64)")
    p.add_argument("--n-seq", type=int, default=None,
                   help="held-out sequences measured (as many again fit the laws; default 8; model only)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per sequence (default 1024, the training context; model only)")
    p.add_argument("--seed", type=int, default=0, help="torch seed (the sequences are fixed; nothing is sampled)")
    p.add_argument("--p", type=float, default=0.99, help="probability for the KV horizon quantile")
    p.add_argument("--U", default=None, help="logit bound: 'auto' (ACP, from the q/k norms; the default with the "
                   "model) or a number >= 0 (a fixed U, e.g. 0 for the decay alone; not a bound, so pruning may "
                   "exceed tol); required with --traces")
    p.add_argument("--decode-seqs", type=int, default=None,
                   help="sequences decoded token by token (default 4; 0: skip; model only)")
    p.add_argument("--checkpoint", default=None, help="FoX checkpoint (.pt; default checkpoints/fox_shakespeare.pt)")
    p.add_argument("--traces", default=None, help="gate trace file (.npz from forget.py --save-traces) of any "
                   "model: fits the laws on its odd sequences and measures the pruning on the even ones")
    p.add_argument("--context", type=int, default=None,
                   help="context for P(W > context) with --traces (default: the trace length)")
    p.add_argument("--out", default=None, help="folder for prune.txt and prune.json (None: a new "
                                               "runs/prune-<time>/; the committed run: --out results/prune --force)")
    p.add_argument("--json", default=None, help="JSON path (default OUT/prune.json)")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("--debug", action="store_true", help="on error, show the full traceback")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: on a shared CPU, thread sync dominates these small ops)")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)

    def fail(msg):
        if a.debug:                             # outputs.cli re-raises it: the traceback
            raise outputs.UsageError(msg)
        print(f"prune.py: error: {msg}", file=sys.stderr)
        sys.exit(2)

    try:
        if a.tol is not None:
            log_tols = [check_tol(t, "--tol") for t in a.tol]
        else:
            log_tols = [check_log_tol(t, "--log-tol") for t in (a.log_tol or DEFAULT_LOG_TOLS)]
        if a.traces is not None:
            given = [f for f, v in (("--checkpoint", a.checkpoint), ("--n-seq", a.n_seq), ("--seq-len", a.seq_len),
                                    ("--decode-seqs", a.decode_seqs)) if v is not None]
            if given:
                raise ValueError(f"{given[0]} cannot be used with --traces (it needs the model; the traces fix "
                                 "the sequences)")
            if a.U is None or a.U == "auto":
                raise ValueError("--traces needs --U X, a number >= 0 ('auto' takes U from the model's q/k norms, "
                                 "which a trace file does not hold)")
            if a.context is not None:
                _pos_int(a.context, "--context")
        elif a.context is not None:
            raise ValueError("--context applies to --traces only (the model's own training context is used)")
        a.n_seq = 8 if a.n_seq is None else a.n_seq
        a.seq_len = 1024 if a.seq_len is None else a.seq_len
        a.decode_seqs = 4 if a.decode_seqs is None else a.decode_seqs
        a.U = "auto" if a.U is None else a.U
        if len(a.block) > 2:
            raise ValueError(f"--block takes one or two sizes; got {a.block}")
        block = check_block(tuple(a.block) if len(a.block) == 2 else a.block[0])
        _pos_int(a.n_seq, "--n-seq")
        _pos_int(a.seq_len, "--seq-len")
        _pos_int(a.threads, "--threads")
        U = "auto" if a.U == "auto" else check_U(_float(a.U, "--U"))
        if a.decode_seqs < 0:
            raise ValueError(f"--decode-seqs must be >= 0; got {a.decode_seqs}")
        if not 0 < a.p < 1:
            raise ValueError(f"--p must lie in (0, 1); got {a.p}")
        if a.traces is not None:
            try:
                heads_mod.load_traces_checked(a.traces)
            except (FileNotFoundError, ValueError) as exc:
                raise ValueError(f"--traces: {exc}") from None
        else:
            ck = a.checkpoint or "checkpoints/fox_shakespeare.pt"
            checkpoint = outputs.input_file("--checkpoint", outputs.repo_path(ck) if not os.path.exists(ck) else ck)
        # every output checked before any work; nothing existing is replaced without --force
        out = outputs.check_dir(a.out, [] if a.json else ["prune.json"], force=a.force) if a.out else \
            outputs.run_dir("prune")
        txt_path = outputs.check_writable(os.path.join(out, "prune.txt"), force=a.force, what="--out")
        json_path = outputs.check_writable(a.json or os.path.join(out, "prune.json"), force=a.force, what="--json")
    except ValueError as exc:                              # outputs.UsageError is a ValueError
        fail(str(exc))
    torch.set_num_threads(a.threads)
    try:
        if a.traces is not None:
            res = analyse_traces(a.traces, U, log_tols, block, a.p, a.context)
        else:
            res = analyse_model(checkpoint, log_tols, block, a.n_seq, a.seq_len, a.p,
                                decode_seqs=min(a.decode_seqs, a.n_seq), seed=a.seed, progress=not a.no_progress,
                                U=U)
    except ValueError as exc:
        fail(str(exc))
    ck = res["info"].get("checkpoint")
    if ck and os.path.commonpath([os.path.abspath(ck), outputs.REPO]) == outputs.REPO:
        res["info"]["checkpoint"] = os.path.relpath(ck, outputs.REPO)      # results name no machine paths
    text = format_report(res)
    print(text)
    outputs.write_text(txt_path, text + "\n")
    outputs.write_json(json_path, res)
    print(f"wrote {txt_path} and {json_path}", file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
