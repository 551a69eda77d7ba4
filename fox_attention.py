"""Forgetting attention (FoX): reference path, fused-kernel dispatch, the layer and a small LM.

Convention (flash-linear-attention / official FoX kernel): q, k, v are (B, T, H, D); the
log forget gates `log_fgate` are (B, T, H) float32 with values <= 0. With the cumulative
log-gate c_t = sum_{s<=t} log_fgate_s, query i attends to key j <= i with logit
    q_i . k_j * sm_scale + c_i - c_j        (the log-decay sums log g over t = j+1..i).
"""
import math

import torch


def _check_inputs(q, k, v, log_fgate):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, T, H, D); got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, Tq, H, D = q.shape
    Bk, Tk, Hk, Dk = k.shape
    if k.shape != v.shape[:3] + (Dk,) or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k and v must agree in (B, T, H); got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q and k must agree in batch and head dim; got {tuple(q.shape)} and {tuple(k.shape)}")
    if H % Hk != 0:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({Hk})")
    if Tq > Tk:
        raise ValueError(f"seqlen_q ({Tq}) must not exceed seqlen_k ({Tk})")
    if log_fgate.shape != (B, Tk, H):
        raise ValueError(f"log_fgate must be (B, T_k, H) = {(B, Tk, H)}; got {tuple(log_fgate.shape)}")
    if log_fgate.dtype != torch.float32 and log_fgate.dtype != torch.float64:
        raise ValueError(f"log_fgate must be float32 (or float64 for references); got {log_fgate.dtype}")


def forgetting_attention_reference(q, k, v, log_fgate, *, sm_scale=None, causal=True, chunk=256):
    """Plain PyTorch forgetting attention, chunked over queries: memory O(T_k * chunk), not O(T^2).

    q: (B, T_q, H, D); k, v: (B, T_k, H_kv, D) with H % H_kv == 0 (GQA); T_q <= T_k, queries
    are the last T_q positions (prefix / KV-cache decoding). log_fgate: (B, T_k, H) float32
    (or float64), one gate per query head. causal=False uses the symmetric decay -|c_i - c_j|.
    Computes in the inputs' dtype promoted to at least float32; returns (B, T_q, H, D) in q.dtype.
    """
    _check_inputs(q, k, v, log_fgate)
    B, Tq, H, D = q.shape
    Tk, Hk = k.shape[1], k.shape[2]
    scale = D ** -0.5 if sm_scale is None else sm_scale
    ct = torch.promote_types(q.dtype, torch.float32)
    rep = H // Hk
    kk = k.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2)      # (B, H, Tk, D)
    vv = v.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2)      # (B, H, Tk, D)
    qq = q.to(ct).transpose(1, 2)                                     # (B, H, Tq, D)
    c = torch.cumsum(log_fgate.to(torch.promote_types(ct, log_fgate.dtype)), dim=1).transpose(1, 2).to(ct)  # (B, H, Tk)
    off = Tk - Tq
    out = torch.empty_like(qq)
    kpos = torch.arange(Tk, device=q.device)
    for s in range(0, Tq, chunk):
        e = min(s + chunk, Tq)
        qpos = torch.arange(s, e, device=q.device) + off              # absolute positions of these queries
        logits = (qq[:, :, s:e] @ kk.transpose(-1, -2)) * scale      # (B, H, c, Tk)
        dc = c[:, :, qpos, None] - c[:, :, None, :]                   # (B, H, c, Tk) = c_i - c_j
        if causal:
            logits = logits + dc
            logits = logits.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
        else:
            logits = logits - dc.abs()
        out[:, :, s:e] = torch.softmax(logits, dim=-1) @ vv
    return out.transpose(1, 2).to(q.dtype)
