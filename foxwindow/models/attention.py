"""Forgetting attention (FoX): the attention op and its references, side by side.

Convention (flash-linear-attention / official FoX kernel): q, k, v are (B, T, H, D); the
log forget gates `log_fgate` are (B, T, H) float32 with values <= 0. With the cumulative
log-gate c_t = sum_{s<=t} log_fgate_s, query i attends to key j <= i with logit
    q_i . k_j * sm_scale + c_i - c_j        (the log-decay sums log g over t = j+1..i).
Bidirectional (encoder) attention uses the symmetric decay -|c_i - c_j|, so tokens are forgotten
with distance in both directions.

Contents
    cum_log_gate, fox_bias, fox_logits                     the FoX logits, formed here and nowhere else
    forgetting_attention                                   the op: fused Triton kernel on CUDA, else chunked
    forgetting_attention_reference                         plain PyTorch, chunked over queries
    forgetting_attention_naive                             plain PyTorch, the full (T_q, T_k) matrix
    forgetting_attention_pruned                            ACP block pruning (Lin et al., 2025): chunked over query
                                                           blocks, visiting only the key blocks kept
    forgetting_attention_pruned_naive                      the same on the full matrix and block mask: the reference
    acp_level, acp_U, acp_pruned_blocks                    ACP's block level L, its logit bound U, the block rule
    forgetting_attention_step, init_kv_cache               one decoding position against a KV cache, optionally
                                                           with a per-head horizon (a ring buffer of max h + 1 keys)
The layer, its HookPoints, the LM and checkpoints are in model.py; reading gates out of a model
(run_with_cache, capture_gates) and gate traces on disk (save_trace, load_trace) in traces.py.
"""
import math
import warnings

import torch
import torch.nn.functional as F

from foxwindow import outputs

__all__ = ["cum_log_gate", "fox_bias", "fox_logits", "forgetting_attention_reference", "forgetting_attention_naive",
           "forgetting_attention", "acp_level", "acp_U", "acp_pruned_blocks", "acp_keep",
           "forgetting_attention_pruned_naive", "forgetting_attention_pruned", "init_kv_cache",
           "forgetting_attention_step"]

# ----------------------------------------------------------------------------- the FoX logits

def cum_log_gate(log_fgate):
    """Cumulative log gate c (B, H, T) float64 from log_fgate (B, T, H).

    float64: in float32 the spacing of c near 1e3 is 6e-5, which would show up directly as relative
    error in the decay exp(c_i - c_j)."""
    return torch.cumsum(log_fgate.double(), dim=1).transpose(1, 2)


def fox_bias(c_q, c_k, causal=True):
    """The forget bias of queries against keys: c_q (..., T_q), c_k (..., T_k) cumulative log gates
    (cum_log_gate, or its slices) -> (..., T_q, T_k) in their dtype: c_i - c_j (causal; only keys j <= i
    are meant to be kept, where it is <= 0), or the symmetric -|c_i - c_j| (bidirectional)."""
    dc = c_q[..., :, None] - c_k[..., None, :]
    return dc if causal else -dc.abs()


def fox_logits(q, k, c_q, c_k, scale, causal=True, q_pos=None, dtype=None):
    """FoX attention logits q_i . k_j * scale + fox_bias, keys after the query masked to -inf when causal.

    q: (B, H, T_q, D), k: (B, H, T_k, D); c_q: (B, H, T_q), c_k: (B, H, T_k) float64 cumulative log
    gates at the query and key positions; q_pos: (T_q,) int64 absolute positions of the queries among
    the keys (default: the last T_q keys). dtype: of the result (default q's dtype promoted to at
    least float32); q . k is computed in q's dtype, the bias in float64 and then cast.
    Returns (B, H, T_q, T_k).
    """
    dtype = torch.promote_types(q.dtype, torch.float32) if dtype is None else dtype
    if _inplace_ok(q, k, c_q, c_k):
        return _fox_logits_inplace(q, k, c_q, c_k, scale, causal, q_pos, dtype)
    Tq, Tk = q.shape[-2], k.shape[-2]
    logits = (q @ k.transpose(-1, -2)).to(dtype) * scale                      # (B, H, Tq, Tk)
    logits = logits + fox_bias(c_q, c_k, causal).to(dtype)
    if causal:
        if q_pos is None:
            q_pos = torch.arange(Tk - Tq, Tk, device=q.device)
        kpos = torch.arange(Tk, device=q.device)
        logits = logits.masked_fill(kpos[None, :] > q_pos[:, None], float("-inf"))
    return logits


class _Buffers:
    """Storage reused across the query chunks of one attention call (no autograd): a chunk's logits and its
    bias in float64 and in the logits' dtype, each a view of the front of a flat tensor grown as needed.
    Fresh tensors of this size (32 MiB at 4 x 4 x 128 x 2048 in float64) came as fresh pages each time:
    the float64 bias took 23 ms a chunk against 5.7 ms into a reused buffer."""

    def __init__(self):
        self.flat = {}

    def get(self, name, shape, dtype, device):
        n = math.prod(shape)
        t = self.flat.get(name)
        if t is None or t.numel() < n or t.dtype != dtype or t.device != device:
            t = self.flat[name] = torch.empty(n, dtype=dtype, device=device)
        return t[:n].view(shape)


def _inplace_ok(q, k, c_q, c_k):
    """Whether fox_logits may form the logits in place: no autograd through them, and q . k already of the
    logits' full shape (no broadcasting of the batch dims by the gates)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, c_q, c_k)):
        return False
    batch = q.shape[:-2]
    return k.shape[:-2] == batch and torch.broadcast_shapes(batch, c_q.shape[:-1], c_k.shape[:-1]) == batch


def _fox_logits_inplace(q, k, c_q, c_k, scale, causal, q_pos, dtype, bufs=None):
    """fox_logits without autograd: the same operations on the same values (so the same result, bit for bit),
    in place and, given bufs (_Buffers), into storage reused across calls; the causal mask only on the keys that
    can lie after a query (from the first query's position on), where the rest are never masked."""
    bufs = _Buffers() if bufs is None else bufs
    Tq, Tk = q.shape[-2], k.shape[-2]
    shape = q.shape[:-2] + (Tq, Tk)
    qk = torch.matmul(q, k.transpose(-1, -2), out=bufs.get("qk", shape, q.dtype, q.device))
    logits = qk if qk.dtype == dtype else qk.to(dtype)                          # (B, H, Tq, Tk)
    logits.mul_(scale)
    wide = torch.promote_types(c_q.dtype, c_k.dtype)
    dc = torch.sub(c_q[..., :, None], c_k[..., None, :], out=bufs.get("dc", shape, wide, q.device))
    if not causal:
        dc.abs_().neg_()
    if wide != dtype:                  # rounded once to the logits' dtype, as fox_bias(...).to(dtype)
        dc = bufs.get("bias", shape, dtype, q.device).copy_(dc)
    logits.add_(dc)
    if causal:
        if q_pos is None:
            q_pos = torch.arange(Tk - Tq, Tk, device=q.device)
            lo = Tk - Tq + 1
        else:                           # the first key that may lie after a query (a host sync on a GPU)
            lo = int(q_pos.min()) + 1 if q_pos.numel() else Tk
        lo = min(max(lo, 0), Tk)
        kpos = torch.arange(lo, Tk, device=q.device)
        logits[..., lo:].masked_fill_(kpos[None, :] > q_pos[:, None], float("-inf"))
    return logits


# ----------------------------------------------------------------------------- the attention op

def _check_inputs(q, k, v, log_fgate, sm_scale=None, check_values=True):
    for name, t in (("q", q), ("k", k), ("v", v), ("log_fgate", log_fgate)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, T, H, D); got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not (q.is_floating_point() and k.is_floating_point() and v.is_floating_point()):
        raise ValueError(f"q, k, v must be floating point; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    B, Tq, H, D = q.shape
    Bk, Tk, Hk, Dk = k.shape
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k and v must agree in (B, T, H); got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q and k must agree in batch and head dim; got {tuple(q.shape)} and {tuple(k.shape)}")
    if min(B, Tq, H, D, Tk, Hk) == 0:
        raise ValueError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if H % Hk != 0:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({Hk})")
    if Tq > Tk:
        raise ValueError(f"seqlen_q ({Tq}) must not exceed seqlen_k ({Tk})")
    if log_fgate.shape != (B, Tk, H):
        raise ValueError(f"log_fgate must be (B, T_k, H) = {(B, Tk, H)}; got {tuple(log_fgate.shape)}")
    if log_fgate.dtype != torch.float32 and log_fgate.dtype != torch.float64:
        raise ValueError(f"log_fgate must be float32 (or float64 for references); got {log_fgate.dtype}")
    if sm_scale is not None and not (isinstance(sm_scale, (int, float)) and math.isfinite(sm_scale) and sm_scale > 0):
        raise ValueError(f"sm_scale must be a positive finite number or None; got {sm_scale!r}")
    if check_values:
        # one host sync; a positive log gate would silently turn forgetting into amplification
        lg = log_fgate.detach()
        if torch.isnan(lg).any():
            raise ValueError("log_fgate contains NaN")
        if torch.isinf(lg).any():
            # a gate of exactly 0 makes c = -inf and c_i - c_j = -inf - (-inf) = NaN in every later row
            raise ValueError("log_fgate contains -inf or inf (a gate of exactly 0); log gates must be finite "
                             "and <= 0 (clamp the gate away from 0, e.g. logsigmoid of the pre-activation)")
        if (lg > 0).any():
            raise ValueError(f"log_fgate must be <= 0 (gates in (0, 1]); max is {lg.max().item():.4g}")



def _heads_first(q, k, v):
    """(B, T, H, D) inputs -> q, k, v (B, H, T, D) in the compute dtype (at least float32), k and v
    repeated over query heads (GQA)."""
    ct = torch.promote_types(q.dtype, torch.float32)
    rep = q.shape[2] // k.shape[2]
    # contiguous in (B, H, T, D): a chunk's slices then go to the batched matmul as they are, not copied each time
    kk = k.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2).contiguous()      # (B, H, Tk, D)
    vv = v.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2).contiguous()      # (B, H, Tk, D)
    return q.to(ct).transpose(1, 2).contiguous(), kk, vv                           # (B, H, Tq, D), ...


def _fox_chunked(q, k, v, log_fgate, scale, causal, chunk, dropout_p=0.0):
    """The chunked computation; inputs already checked. Optional dropout on attention weights."""
    Tq, Tk = q.shape[1], k.shape[1]
    qq, kk, vv = _heads_first(q, k, v)
    c = cum_log_gate(log_fgate)                                       # (B, H, Tk) float64
    off = Tk - Tq
    kpos = torch.arange(Tk, device=q.device)
    bufs = _Buffers()                                                 # the chunks' logits reuse one storage
    outs = []
    for s in range(0, Tq, chunk):
        e = min(s + chunk, Tq)
        n = e + off if causal else Tk                                 # causal: keys after the chunk are masked anyway
        # a slice, not c[:, :, qpos]: advanced indexing makes the backward a scatter-add, 5x slower here
        args = (qq[:, :, s:e], kk[:, :, :n], c[:, :, s + off:e + off], c[:, :, :n], scale, causal,
                kpos[s + off:e + off])
        logits = _fox_logits_inplace(*args, qq.dtype, bufs) if _inplace_ok(*args[:4]) else \
            fox_logits(*args)                                         # (B, H, c, n)
        p = torch.softmax(logits, dim=-1)
        if dropout_p > 0:
            p = F.dropout(p, dropout_p, training=True)
        outs.append(p @ vv[:, :, :n])                                 # (B, H, c, D)
    # cat (not in-place writes into a buffer) keeps autograd happy
    return torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)


def forgetting_attention_reference(q, k, v, log_fgate, *, sm_scale=None, causal=True, chunk=256, dropout_p=0.0):
    """Plain PyTorch forgetting attention, chunked over queries: memory O(T_k * chunk), not O(T^2).

    q: (B, T_q, H, D); k, v: (B, T_k, H_kv, D) with H % H_kv == 0 (GQA); T_q <= T_k, queries
    are the last T_q positions (prefix / KV-cache decoding). log_fgate: (B, T_k, H) float32
    (or float64), one gate per query head. causal=False uses the symmetric decay -|c_i - c_j|.
    dropout_p: dropout on the attention weights (float in [0, 1); for training).
    Computes in the inputs' dtype promoted to at least float32; returns (B, T_q, H, D) in q.dtype.
    """
    _check_inputs(q, k, v, log_fgate, sm_scale)
    if not (isinstance(chunk, int) and chunk > 0):
        raise ValueError(f"chunk must be a positive int; got {chunk!r}")
    if not (isinstance(dropout_p, (int, float)) and 0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p!r}")
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    return _fox_chunked(q, k, v, log_fgate, scale, causal, chunk, dropout_p)


def forgetting_attention_naive(q, k, v, log_fgate, *, sm_scale=None, causal=True):
    """Forgetting attention with the whole (T_q, T_k) logit matrix materialised: the readable reference.

    Arguments, shapes, dtypes and result as forgetting_attention_reference; memory O(T_q * T_k) per head.
    """
    _check_inputs(q, k, v, log_fgate, sm_scale)
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    qq, kk, vv = _heads_first(q, k, v)                                # (B, H, T, D)
    c = cum_log_gate(log_fgate)                                       # (B, H, Tk) float64
    p = torch.softmax(fox_logits(qq, kk, c[:, :, k.shape[1] - q.shape[1]:], c, scale, causal), dim=-1)
    return (p @ vv).transpose(1, 2).to(q.dtype)                       # (B, Tq, H, D)


_warned_no_kernel = False
_warned_fallback = set()


def _on_cuda(t):
    return t.is_cuda


def forgetting_attention(q, k, v, log_fgate, *, sm_scale=None, causal=True, chunk=128):
    """Forgetting attention; the fused Triton kernel on CUDA (causal), the chunked reference otherwise.

    q: (B, T_q, H, D); k, v: (B, T_k, H_kv, D), same floating dtype; log_fgate: (B, T_k, H)
    float32, every entry <= 0. sm_scale defaults to D ** -0.5. Returns (B, T_q, H, D) in q.dtype.
    Raises ValueError on bad shapes or dtypes, NaN or positive log gates.
    """
    global _warned_no_kernel
    _check_inputs(q, k, v, log_fgate, sm_scale)
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    if _on_cuda(q):
        try:
            from foxwindow.kernels.fox_triton import (  # the fused kernels: triton (the kernels extra)
                fallback_reason,
                fox_attention_triton,
            )
        except Exception as exc:  # no triton, or the kernel module is absent/broken
            if not _warned_no_kernel:
                warnings.warn(f"fused FoX kernel unavailable ({exc!r}); using the PyTorch reference")
                _warned_no_kernel = True
        else:
            why = fallback_reason(q, k, v, log_fgate, causal=causal)
            if why is None:
                return fox_attention_triton(q, k, v, log_fgate, sm_scale=scale, causal=True)
            if why not in _warned_fallback:     # once per reason: inputs the kernel does not take
                warnings.warn(f"fused FoX kernel not used ({why}); using the PyTorch reference")
                _warned_fallback.add(why)
    if not (isinstance(chunk, int) and chunk > 0):
        raise ValueError(f"chunk must be a positive int; got {chunk!r}")
    return _fox_chunked(q, k, v, log_fgate, scale, causal, chunk)


# ----------------------------------------------------------------------------- ACP block pruning

def acp_level(L_tol, U, T):
    """ACP's block level L = 2U + ln T + L_tol (-delta in Lin et al.): a block of keys whose decay at its
    corner pair is below e^{-L} holds at most tol = e^{-L_tol} of any row's attention mass when |q.k| * scale
    <= U. L_tol = ln(1/tol) > 0; U a float or an (H,) tensor; T the number of keys."""
    return 2 * U + math.log(T) + L_tol


def acp_U(q, k, scale):
    """ACP's logit bound per head: U_h = scale * max_{b,i} |q_bih| * max_{b,j} |k_bjh| (Cauchy-Schwarz),
    over the whole batch. q, k (B, T, H, D). Returns (H,) float64."""
    qn = q.detach().double().norm(dim=-1).amax(dim=(0, 1))                    # (H,)
    kn = k.detach().double().norm(dim=-1).amax(dim=(0, 1))
    return qn * kn * scale


def _block_size(block):
    if isinstance(block, int) and not isinstance(block, bool):
        block = (block, block)
    if not (isinstance(block, (tuple, list)) and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ValueError(f"block must be a positive int or a pair (BM, BN) of them; got {block!r}")
    return int(block[0]), int(block[1])


def acp_pruned_blocks(c, L, block):
    """The block rule: c (..., H, T) float64 cumulative log gates (cum_log_gate), L (H,) float64 levels.
    Returns (..., H, nI, nJ) bool, True where the (BM, BN) block is strictly causal (j_max < i_min) and its
    corner decay c_{i_min} - c_{j_max} < -L. The diagonal blocks are never pruned."""
    BM, BN = _block_size(block)
    T = c.shape[-1]
    i_min = torch.arange(0, T, BM, device=c.device)
    j_max = (torch.arange(0, T, BN, device=c.device) + BN).clamp(max=T) - 1
    strict = j_max[None, :] < i_min[:, None]
    d = c[..., i_min][..., :, None] - c[..., j_max][..., None, :]
    return (d < -L[:, None, None]) & strict


def acp_keep(pruned, T, block):
    """(..., nI, nJ) pruned blocks -> (..., T, T) bool, True where the pair's block is kept."""
    BM, BN = _block_size(block)
    bi = torch.arange(T, device=pruned.device) // BM
    bj = torch.arange(T, device=pruned.device) // BN
    return ~pruned[..., bi, :][..., bj]


def _acp_setup(q, k, v, log_fgate, L_tol, U, block, sm_scale, causal):
    """Checks, the scale, U (H,) and L (H,) float64 of a pruned call."""
    _check_inputs(q, k, v, log_fgate, sm_scale)
    if not causal:
        raise ValueError("ACP block pruning is defined for causal attention")
    if k.shape[1] != q.shape[1] or k.shape[2] != q.shape[2]:
        raise ValueError(f"pruned attention needs self-attention with one kv head per query head; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}")
    if isinstance(L_tol, bool) or not isinstance(L_tol, (int, float)) or not (0 < L_tol < math.inf):
        raise ValueError(f"L_tol = ln(1/tol) must be a finite number > 0; got {L_tol!r}")
    _block_size(block)
    H, D = q.shape[2], q.shape[3]
    scale = D ** -0.5 if sm_scale is None else sm_scale
    if isinstance(U, str):
        if U != "auto":
            raise ValueError(f"U must be 'auto', a number or an (H,) tensor; got {U!r}")
        Uh = acp_U(q, k, scale)
    else:
        Uh = torch.as_tensor(U, dtype=torch.float64).expand(H).clone()
        if not (torch.isfinite(Uh).all() and (Uh >= 0).all()):
            raise ValueError(f"U must be finite and >= 0; got {U!r}")
    return scale, Uh, acp_level(float(L_tol), Uh, q.shape[1])


def forgetting_attention_pruned_naive(q, k, v, log_fgate, *, L_tol, U="auto", block=64, sm_scale=None, causal=True):
    """Causal forgetting attention with ACP block pruning on the whole (T, T) logit matrix: the reference.

    q, k, v: (B, T, H, D) float, one kv head per query head; log_fgate: (B, T, H) float32/64, <= 0.
    L_tol: ln(1/tol) > 0, tol the attention mass a row may lose. U: "auto" (acp_U of these q, k), a number
    or (H,). block: int or (BM, BN). Every row keeps its diagonal block, so its own key; when U bounds
    |q.k| * scale, the pruned mass of a row is at most T e^{2U} e^{-L} = tol. Returns (B, T, H, D) in q.dtype.
    """
    scale, _, Lh = _acp_setup(q, k, v, log_fgate, L_tol, U, block, sm_scale, causal)
    qq, kk, vv = _heads_first(q, k, v)                                # (B, H, T, D)
    c = cum_log_gate(log_fgate)                                       # (B, H, T) float64
    keep = acp_keep(acp_pruned_blocks(c, Lh, block), q.shape[1], block)
    logits = fox_logits(qq, kk, c, c, scale).masked_fill(~keep, float("-inf"))
    return (torch.softmax(logits, -1) @ vv).transpose(1, 2).to(q.dtype)


def forgetting_attention_pruned(q, k, v, log_fgate, *, L_tol, U="auto", block=64, sm_scale=None, causal=True):
    """Causal forgetting attention with ACP block pruning, one query block at a time over the kept keys only.

    Arguments and result as forgetting_attention_pruned_naive. The decay c_i - c_j only falls as j moves back,
    so a query block's pruned key blocks are a prefix: each query block attends to the keys from its first
    kept block (over the batch and heads) to its diagonal, the other pruned blocks masked. Memory O(BM T).
    """
    scale, _, Lh = _acp_setup(q, k, v, log_fgate, L_tol, U, block, sm_scale, causal)
    BM, BN = _block_size(block)
    T = q.shape[1]
    qq, kk, vv = _heads_first(q, k, v)
    c = cum_log_gate(log_fgate)
    pruned = acp_pruned_blocks(c, Lh, block)                          # (B, H, nI, nJ)
    kpos = torch.arange(T, device=q.device)
    outs = []
    for bi, i0 in enumerate(range(0, T, BM)):
        i1 = min(i0 + BM, T)
        kept = (~pruned[:, :, bi]).flatten(0, 1).any(0)               # (nJ,) any (b, h) keeps the block
        j0 = int(kept.nonzero()[0, 0]) * BN
        logits = fox_logits(qq[:, :, i0:i1], kk[:, :, j0:i1], c[:, :, i0:i1], c[:, :, j0:i1], scale,
                            q_pos=kpos[i0:i1] - j0)                   # (B, H, BM, i1 - j0)
        keep = ~pruned[:, :, bi][..., kpos[j0:i1] // BN]                 # (B, H, i1 - j0)
        logits = logits.masked_fill(~keep[:, :, None, :], float("-inf"))
        outs.append(torch.softmax(logits, -1) @ vv[:, :, j0:i1])
    return torch.cat(outs, 2).transpose(1, 2).to(q.dtype)


# ----------------------------------------------------------------------------- decoding: one position, a KV cache

def init_kv_cache(horizon=None):
    """An empty KV cache for forgetting_attention_step. horizon: None (keep every key) or (H,) ints >= 0:
    head h attends only to keys at distance <= horizon[h], and the cache is a ring buffer of max(horizon) + 1
    slots, so its memory is bounded by the largest horizon, whatever the length decoded."""
    if horizon is not None:
        hz = torch.as_tensor(horizon)
        if hz.dim() != 1 or hz.dtype.is_floating_point or hz.dtype == torch.bool or (hz < 0).any():
            raise ValueError(f"horizon must be (H,) ints >= 0 (one per head); got {horizon!r}")
        horizon = hz.long()
    return {"horizon": horizon, "t": 0, "k": None, "v": None, "c": None, "pos": None, "c_now": None}


def _ring_write(state, k, v, c_now):
    """Write position t into its ring slot (allocating the ring at the first call). Returns (H, n) keep."""
    B, H, D = k.shape
    hz, t = state["horizon"], state["t"]
    if hz.shape != (H,):
        raise ValueError(f"horizon has {tuple(hz.shape)} entries; the layer has {H} heads")
    n = int(hz.max()) + 1
    if state["k"] is None:
        state.update(k=k.new_zeros(B, H, n, D), v=v.new_zeros(B, H, n, D),
                     c=torch.zeros(B, H, n, dtype=torch.float64, device=k.device),
                     pos=torch.full((n,), -1, dtype=torch.long, device=k.device))
    s = t % n                                                         # overwrite the oldest slot
    state["k"][:, :, s], state["v"][:, :, s], state["c"][:, :, s] = k, v, c_now
    state["pos"][s] = t
    dist = t - state["pos"]
    return (state["pos"] >= 0)[None, :] & (dist[None, :] <= hz.to(k.device)[:, None])


def forgetting_attention_step(q, k, v, log_fgate, state, *, sm_scale=None):
    """One decoding position: q, k, v (B, H, D), log_fgate (B, H) float32 <= 0, state from init_kv_cache (or
    the previous call). The cache keeps each key with the cumulative log gate c_j at its position (float64);
    the logit of key j is q.k_j * scale + c_t - c_j. Returns (out (B, H, D) in q.dtype, state)."""
    ct = torch.promote_types(q.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    lg = log_fgate.double()
    c_now = lg if state["c_now"] is None else state["c_now"] + lg    # (B, H) float64
    st = dict(state, c_now=c_now, t=state["t"] + 1)
    if state["horizon"] is None:
        def app(cache, x):
            return x[:, :, None] if cache is None else torch.cat([cache, x[:, :, None]], dim=2)
        st.update(k=app(state["k"], k), v=app(state["v"], v), c=app(state["c"], c_now))
        ok = None
    else:
        st["t"] = state["t"]
        ok = _ring_write(st, k, v, c_now)
        st["t"] += 1
    logits = (st["k"].to(ct) @ q.to(ct)[..., None])[..., 0] * scale
    logits = logits + fox_bias(c_now[..., None], st["c"])[..., 0, :].to(ct)        # (B, H, n)
    if ok is not None:
        logits = logits.masked_fill(~ok, float("-inf"))
    o = (torch.softmax(logits, -1)[:, :, None] @ st["v"].to(ct))[:, :, 0]
    return o.to(q.dtype), st


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
