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
The layer, its HookPoints, the LM and checkpoints are in model.py; reading gates out of a model
(run_with_cache, capture_gates) and gate traces on disk (save_trace, load_trace) in traces.py.
"""
import math
import warnings

import torch
import torch.nn.functional as F

from foxwindow import outputs

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
    Tq, Tk = q.shape[-2], k.shape[-2]
    logits = (q @ k.transpose(-1, -2)).to(dtype) * scale                      # (B, H, Tq, Tk)
    logits = logits + fox_bias(c_q, c_k, causal).to(dtype)
    if causal:
        if q_pos is None:
            q_pos = torch.arange(Tk - Tq, Tk, device=q.device)
        kpos = torch.arange(Tk, device=q.device)
        logits = logits.masked_fill(kpos[None, :] > q_pos[:, None], float("-inf"))
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
    kk = k.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2)      # (B, H, Tk, D)
    vv = v.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2)      # (B, H, Tk, D)
    return q.to(ct).transpose(1, 2), kk, vv                           # (B, H, Tq, D), ...


def _fox_chunked(q, k, v, log_fgate, scale, causal, chunk, dropout_p=0.0):
    """The chunked computation; inputs already checked. Optional dropout on attention weights."""
    Tq, Tk = q.shape[1], k.shape[1]
    qq, kk, vv = _heads_first(q, k, v)
    c = cum_log_gate(log_fgate)                                       # (B, H, Tk) float64
    off = Tk - Tq
    kpos = torch.arange(Tk, device=q.device)
    outs = []
    for s in range(0, Tq, chunk):
        e = min(s + chunk, Tq)
        n = e + off if causal else Tk                                 # causal: keys after the chunk are masked anyway
        # a slice, not c[:, :, qpos]: advanced indexing makes the backward a scatter-add, 5x slower here
        logits = fox_logits(qq[:, :, s:e], kk[:, :, :n], c[:, :, s + off:e + off], c[:, :, :n], scale, causal,
                            q_pos=kpos[s + off:e + off])             # (B, H, c, n)
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
            from foxwindow.kernels.fox_triton import fallback_reason, fox_attention_triton
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


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
