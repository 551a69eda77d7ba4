"""Forgetting attention (FoX): reference path, fused-kernel dispatch, the layer and a small LM.

Convention (flash-linear-attention / official FoX kernel): q, k, v are (B, T, H, D); the
log forget gates `log_fgate` are (B, T, H) float32 with values <= 0. With the cumulative
log-gate c_t = sum_{s<=t} log_fgate_s, query i attends to key j <= i with logit
    q_i . k_j * sm_scale + c_i - c_j        (the log-decay sums log g over t = j+1..i).
Bidirectional (encoder) attention uses the symmetric decay -|c_i - c_j|, so tokens are forgotten
with distance in both directions.

Contents
    forgetting_attention / forgetting_attention_reference   the attention op
    BitLinear                                              ternary (BitNet b1.58) linear layer
    HookPoint, ForgettingAttention                         the layer, with a readable gate hook
    FoXConfig, FoXLM, load_model, save_model               a byte-level decoder-only FoX LM
    run_with_cache, capture_gates                          read log gates out of a forward pass
    save_trace, load_trace                                 gate traces on disk (.npz + JSON)

Bringing your own model: `adapters.capture_log_decays(model, input_ids)` reads every layer of a
known gated family (FoX, official FoX, fla's FoX, GLA, HGRN, Gated DeltaNet, Mamba-2, RetNet) from
the layer's own parameters and inputs. `capture_gates(model, input_ids)` is the quick path for
FoX-style models: it hooks `hook_log_fgate` HookPoints or submodules whose name ends in
`fgate_proj` / `f_proj` and returns {module name: (B, T, H) float32 log gates}; for other gate
parametrisations pass `gate_names=[...]`, `output=` and a `to_log_gate` mapping the module output
to log gates (B, T, H).
"""
import io
import json
import math
import os
import re
import warnings
import zipfile
from dataclasses import asdict, dataclass, fields
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- the attention op

def _check_inputs(q, k, v, log_fgate, sm_scale=None, check_values=True):
    for name, t in (("q", q), ("k", k), ("v", v), ("log_fgate", log_fgate)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, T, H, D); got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
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


def _fox_chunked(q, k, v, log_fgate, scale, causal, chunk, dropout_p=0.0):
    """The chunked computation; inputs already checked. Optional dropout on attention weights."""
    B, Tq, H, D = q.shape
    Tk, Hk = k.shape[1], k.shape[2]
    ct = torch.promote_types(q.dtype, torch.float32)
    rep = H // Hk
    kk = k.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2)      # (B, H, Tk, D)
    vv = v.to(ct).repeat_interleave(rep, dim=2).transpose(1, 2)      # (B, H, Tk, D)
    qq = q.to(ct).transpose(1, 2)                                     # (B, H, Tq, D)
    # c and c_i - c_j in float64: in float32 the spacing of c near 1e3 is 6e-5, which would
    # show up directly as relative error in the decay exp(c_i - c_j)
    c = torch.cumsum(log_fgate.double(), dim=1).transpose(1, 2)      # (B, H, Tk) float64
    off = Tk - Tq
    kpos = torch.arange(Tk, device=q.device)
    outs = []
    for s in range(0, Tq, chunk):
        e = min(s + chunk, Tq)
        qpos = torch.arange(s, e, device=q.device) + off              # absolute positions of these queries
        n = e + off if causal else Tk                                 # causal: keys after the chunk are masked anyway
        logits = (qq[:, :, s:e] @ kk[:, :, :n].transpose(-1, -2)) * scale  # (B, H, c, n)
        # a slice, not c[:, :, qpos]: advanced indexing makes the backward a scatter-add, 5x slower here
        dc = (c[:, :, s + off:e + off, None] - c[:, :, None, :n]).to(ct)  # (B, H, c, n) = c_i - c_j
        if causal:
            logits = (logits + dc).masked_fill(kpos[None, :n] > qpos[:, None], float("-inf"))
        else:
            logits = logits - dc.abs()
        p = torch.softmax(logits, dim=-1)
        if dropout_p > 0:
            p = F.dropout(p, dropout_p, training=True)
        outs.append(p @ vv[:, :, :n])                                 # (B, H, c, D)
    # cat (not in-place writes into a buffer) keeps autograd happy
    return torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)


def forgetting_attention_reference(q, k, v, log_fgate, *, sm_scale=None, causal=True, chunk=256):
    """Plain PyTorch forgetting attention, chunked over queries: memory O(T_k * chunk), not O(T^2).

    q: (B, T_q, H, D); k, v: (B, T_k, H_kv, D) with H % H_kv == 0 (GQA); T_q <= T_k, queries
    are the last T_q positions (prefix / KV-cache decoding). log_fgate: (B, T_k, H) float32
    (or float64), one gate per query head. causal=False uses the symmetric decay -|c_i - c_j|.
    Computes in the inputs' dtype promoted to at least float32; returns (B, T_q, H, D) in q.dtype.
    """
    _check_inputs(q, k, v, log_fgate, sm_scale)
    if not (isinstance(chunk, int) and chunk > 0):
        raise ValueError(f"chunk must be a positive int; got {chunk!r}")
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    return _fox_chunked(q, k, v, log_fgate, scale, causal, chunk)


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
            from kernels.fox_triton import fallback_reason, fox_attention_triton
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


# ----------------------------------------------------------------------------- BitLinear

class BitLinear(nn.Linear):
    """BitNet b1.58 linear layer: ternary weights {-1, 0, +1} times one absmean scale.

    Forward uses W_q = gamma * clip(round(W / gamma), -1, 1) with gamma = mean|W| (per tensor);
    the full-precision W is kept as the trained "latent" weight and gradients pass straight
    through the rounding (STE: W + (W_q - W).detach()). With act_bits=8 the input is also
    quantised per token to 8-bit absmax (x * 127 / max|x|, rounded), again with an STE.
    Shapes as nn.Linear: (..., in_features) -> (..., out_features). The bias stays full precision.
    Reference: Ma et al., "The Era of 1-bit LLMs" (2024), arXiv:2402.17764.
    """

    def __init__(self, in_features, out_features, bias=True, act_bits=None, eps=1e-5, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if act_bits not in (None, 8):
            raise ValueError(f"act_bits must be None or 8; got {act_bits!r}")
        self.act_bits = act_bits
        self.eps = eps

    def ternary_weight(self):
        """(out, in) weight as gamma * {-1, 0, +1}, gamma = mean|W|; no gradient."""
        w = self.weight.detach()
        gamma = w.abs().mean().clamp_min(self.eps)  # eps only guards an all-zero weight
        return torch.round(w / gamma).clamp(-1, 1) * gamma

    def forward(self, x):
        w = self.weight
        wq = w + (self.ternary_weight() - w).detach()     # value: ternary; gradient: identity
        if self.act_bits == 8:
            s = 127.0 / x.detach().abs().amax(dim=-1, keepdim=True).clamp_min(self.eps)
            xq = torch.round(x * s).clamp(-128, 127) / s
            x = x + (xq - x).detach()
        return F.linear(x, wq, self.bias)


# ----------------------------------------------------------------------------- the layer

class HookPoint(nn.Module):
    """Identity module (TransformerLens style): forward hooks on it can read or replace its input.

    A forward hook returning a tensor replaces the value (patching). `name` is filled in by
    the owning model, e.g. "blocks.0.attn.hook_log_fgate".
    """

    def __init__(self):
        super().__init__()
        self.name = None

    def forward(self, x):
        return x


def _fgate_bias(num_heads, init):
    """Forget-gate bias per head. "spread": logits linspace(1, 5) over heads, i.e. gates from
    sigmoid(1) = 0.73 (a few tokens of memory) to sigmoid(5) = 0.993 (about a thousand), so
    different heads start at different ranges, as ALiBi's slopes do. A number: that logit for all."""
    if init == "spread":
        return torch.linspace(1.0, 5.0, num_heads) if num_heads > 1 else torch.full((1,), 3.0)
    if isinstance(init, (int, float)) and math.isfinite(init):
        return torch.full((num_heads,), float(init))
    raise ValueError(f"fgate_bias_init must be 'spread' or a finite number; got {init!r}")


class ForgettingAttention(nn.Module):
    """Forgetting Transformer attention (Lin et al., ICLR 2025) with log-space forget gates.

    config attributes: hidden_size (int), num_heads (int, divides hidden_size), dropout (float in
    [0, 1), on attention weights, training only), use_bitnet (bool: BitLinear for q/k/v/out),
    mode ("encoder" (default, bidirectional decay -|c_i - c_j|) or "decoder" (causal)), and
    optionally fixed_gate (bool: gate fixed to 1, log gate 0 -- plain softmax attention with no
    position information) and fgate_bias_init ("spread" or a float logit).

    Forget gate: f_t = sigmoid(f_proj(x_t)) per head, log gate = logsigmoid(f_proj(x_t)) in
    float32 (exact; no log(sigmoid + eps) floor). The (B, T, H) log gates pass through
    `hook_log_fgate` before use, so forward hooks there read or patch them.
    Input x: (B, T, hidden_size); output the same shape.
    """

    def __init__(self, config):
        super().__init__()
        hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_heads", None)
        if not (isinstance(hidden, int) and isinstance(heads, int) and hidden > 0 and heads > 0):
            raise ValueError(f"hidden_size and num_heads must be positive ints; got {hidden!r}, {heads!r}")
        if hidden % heads != 0:
            raise ValueError(f"hidden_size ({hidden}) must be divisible by num_heads ({heads})")
        dropout = getattr(config, "dropout", 0.0)
        if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1); got {dropout!r}")
        mode = getattr(config, "mode", "encoder")
        if mode not in ("encoder", "decoder"):
            raise ValueError(f"mode must be 'encoder' or 'decoder'; got {mode!r}")
        self.hidden_size, self.num_heads = hidden, heads
        self.head_dim = hidden // heads
        self.total_dim = self.head_dim * heads
        self.scale = self.head_dim ** -0.5
        self.mode = mode
        self.dropout_p = float(dropout)
        self.fixed_gate = bool(getattr(config, "fixed_gate", False))
        proj = BitLinear if getattr(config, "use_bitnet", False) else nn.Linear
        self.q_proj = proj(hidden, self.total_dim, bias=False)
        self.k_proj = proj(hidden, self.total_dim, bias=False)
        self.v_proj = proj(hidden, self.total_dim, bias=False)
        self.out_proj = proj(self.total_dim, hidden, bias=False)
        # the gate stays full precision: ternary gate logits would quantise the forgetting rate
        if self.fixed_gate:
            self.f_proj = None
        else:
            self.f_proj = nn.Linear(hidden, heads, bias=True)
            with torch.no_grad():
                # small input weights: gates start near the bias-defined rates, then learn
                nn.init.normal_(self.f_proj.weight, std=0.1 / math.sqrt(hidden))
                self.f_proj.bias.copy_(_fgate_bias(heads, getattr(config, "fgate_bias_init", "spread")))
        self.hook_log_fgate = HookPoint()

    def log_fgate(self, x):
        """(B, T, hidden) -> (B, T, H) float32 log forget gates (zeros when the gate is fixed)."""
        B, T, _ = x.shape
        if self.fixed_gate:
            return x.new_zeros(B, T, self.num_heads, dtype=torch.float32)
        return F.logsigmoid(self.f_proj(x).float())

    def forward(self, x, logical_layer_idx=None):
        """x: (B, T, hidden_size) -> (B, T, hidden_size). logical_layer_idx is accepted and unused."""
        if x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"x must be (B, T, {self.hidden_size}); got {tuple(x.shape)}")
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim)   # (B, T, H, D)
        k = self.k_proj(x).view(B, T, self.num_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.num_heads, self.head_dim)
        lg = self.hook_log_fgate(self.log_fgate(x))                     # (B, T, H) float32
        causal = self.mode == "decoder"
        if self.training and self.dropout_p > 0:
            _check_inputs(q, k, v, lg)
            o = _fox_chunked(q, k, v, lg, self.scale, causal, 128, self.dropout_p)
        else:
            o = forgetting_attention(q, k, v, lg, sm_scale=self.scale, causal=causal)
        return self.out_proj(o.reshape(B, T, self.total_dim))


# ----------------------------------------------------------------------------- the LM

@dataclass
class FoXConfig:
    """Byte-level decoder-only FoX LM. No positional embedding: the forget gates carry position."""
    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    context: int = 1024          # training context; the model itself accepts any length
    fixed_gate: bool = False     # baseline: gate = 1, plain causal softmax attention, no positions
    use_bitnet: bool = False
    fgate_bias_init: object = "spread"

    def __post_init__(self):
        for n in ("vocab_size", "d_model", "n_layers", "n_heads", "mlp_ratio", "context"):
            val = getattr(self, n)
            if not (isinstance(val, int) and not isinstance(val, bool) and val > 0):
                raise ValueError(f"FoXConfig.{n} must be a positive int; got {val!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout!r}")


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        lin = BitLinear if cfg.use_bitnet else nn.Linear
        self.fc = lin(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False)
        self.proj = lin(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        acfg = SimpleNamespace(hidden_size=cfg.d_model, num_heads=cfg.n_heads, dropout=cfg.dropout,
                               use_bitnet=cfg.use_bitnet, mode="decoder", fixed_gate=cfg.fixed_gate,
                               fgate_bias_init=cfg.fgate_bias_init)
        self.ln1 = nn.RMSNorm(cfg.d_model)
        self.attn = ForgettingAttention(acfg)
        self.ln2 = nn.RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class FoXLM(nn.Module):
    """tokens (B, T) int64 in [0, vocab) -> logits (B, T, vocab) float32.

    Hook names: blocks.{l}.attn.hook_log_fgate, log gates (B, T, H) float32 <= 0.
    """

    def __init__(self, cfg: FoXConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.RMSNorm(cfg.d_model)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("out_proj.weight") or n.endswith("mlp.proj.weight"):
                # GPT-2 residual scaling keeps the residual stream's variance flat with depth
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layers))
        for name, m in self.named_modules():
            if isinstance(m, HookPoint):
                m.name = name

    def _init(self, m):
        if isinstance(m, nn.Linear):
            if any(m is blk.attn.f_proj for blk in self.blocks):
                return  # keep ForgettingAttention's gate init (bias sets the starting forget rates)
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens, targets=None):
        """tokens (B, T) int64; targets (B, T) int64 or None. Returns logits (B, T, V) float32,
        or (logits, mean cross-entropy in nats) when targets are given."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a (B, T) int64 tensor; got {tuple(tokens.shape)} {tokens.dtype}")
        if tokens.numel() == 0:
            raise ValueError("tokens is empty")
        if tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.cfg.vocab_size})")
        x = self.drop(self.wte(tokens))                                  # (B, T, d)
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()                      # tied embeddings
        logits = logits.float()
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


CKPT_FORMAT = "foxwindow-lm-v1"


def save_model(path, model, meta=None, dtype=torch.float16):
    """Save config + weights (cast to `dtype`, fp16 by default to keep files small) + JSON-able meta."""
    meta = {} if meta is None else meta
    # round-trip through JSON: plain types only, so torch.load(weights_only=True) can read it back
    meta = json.loads(json.dumps(meta))
    sd = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous().cpu() for k, v in model.state_dict().items()}
    cfg = asdict(model.cfg)
    torch.save({"format": CKPT_FORMAT, "config": cfg, "state_dict": sd, "meta": meta}, path)


def load_model(path, device="cpu"):
    """Load a checkpoint written by save_model. Returns (model, meta): the FoXLM in eval mode
    with float32 weights on `device`, and the checkpoint's metadata dict.

    Raises FileNotFoundError if the file is missing; ValueError if it is not a readable
    checkpoint, lacks fields, has a bad config, or its weights do not match the config.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"checkpoint {path} is corrupt or not a torch checkpoint: {exc}") from exc
    if not isinstance(ck, dict) or ck.get("format") != CKPT_FORMAT:
        raise ValueError(f"checkpoint {path} is not a {CKPT_FORMAT} checkpoint")
    for key in ("config", "state_dict", "meta"):
        if key not in ck:
            raise ValueError(f"checkpoint {path} lacks '{key}'")
    known = {f.name for f in fields(FoXConfig)}
    unknown = set(ck["config"]) - known
    if unknown:
        raise ValueError(f"checkpoint {path} config has unknown fields {sorted(unknown)}")
    try:
        cfg = FoXConfig(**ck["config"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint {path} has a bad config: {exc}") from exc
    model = FoXLM(cfg)
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in ck["state_dict"].items()}
    want = model.state_dict()
    missing, extra = sorted(set(want) - set(sd)), sorted(set(sd) - set(want))
    if missing or extra:
        raise ValueError(f"checkpoint {path} weights do not match its config: missing {missing[:5]}, unexpected {extra[:5]}")
    for k, v in want.items():
        if sd[k].shape != v.shape:
            raise ValueError(f"checkpoint {path}: {k} has shape {tuple(sd[k].shape)}, config implies {tuple(v.shape)}")
        if sd[k].is_floating_point() and not torch.isfinite(sd[k]).all():
            raise ValueError(f"checkpoint {path}: {k} has non-finite values")
    model.load_state_dict(sd)
    return model.to(device).eval(), ck["meta"]


# ----------------------------------------------------------------------------- reading gates

def hook_names(model):
    """Names of every HookPoint in `model`, e.g. ["blocks.0.attn.hook_log_fgate", ...]."""
    return [n for n, m in model.named_modules() if isinstance(m, HookPoint)]


def run_with_cache(model, tokens, names_filter=None):
    """Forward `tokens` (B, T) int64 through `model`, caching HookPoint values.

    names_filter: None (all hooks), a list/tuple/set of hook names, a single name, or a callable
    name -> bool. Returns (logits (B, T, V), cache {name: detached float32 tensor, (B, T, H) for
    log-gate hooks}). Hooks are removed even if the forward raises. Raises ValueError when the model
    has no HookPoint (models other than this file's: use adapters.capture_log_decays), for requested
    names the model does not have, or when a callable filter matches no hook.
    """
    points = {n: m for n, m in model.named_modules() if isinstance(m, HookPoint)}
    if not points:
        raise ValueError(f"{type(model).__name__} has no HookPoint (run_with_cache reads this file's models); "
                         f"for another model's gates use adapters.capture_log_decays(model, tokens)")
    if names_filter is None:
        chosen = list(points)
    elif callable(names_filter):
        chosen = [n for n in points if names_filter(n)]
        if not chosen:
            raise ValueError(f"names_filter matched none of the model's {len(points)} hooks ({list(points)[:3]}...)")
    else:
        wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
        unknown = [n for n in wanted if n not in points]
        if unknown:
            raise ValueError(f"unknown hook names {unknown}; the model has {list(points)[:4]}...")
        chosen = wanted
    cache, handles = {}, []

    def make_hook(name):
        def hook(module, inputs, output):
            cache[name] = output.detach().float()
        return hook

    try:
        for n in chosen:
            handles.append(points[n].register_forward_hook(make_hook(n)))
        with torch.no_grad():
            logits = model(tokens)
    finally:
        for h in handles:
            h.remove()
    return logits, cache


DEFAULT_GATE_SUFFIXES = ("fgate_proj", "f_proj")
GATE_OUTPUTS = ("logits", "gate", "log_gate")


def _known_layer_check(named, sel):
    """Refuse gate modules that sit inside a layer of a known family whose decay is not simply
    logsigmoid of that module (HGRN's lower bound, GLA's normaliser, ...): reading them would be wrong."""
    import adapters
    for n in sel:
        parent = n.rsplit(".", 1)[0] if "." in n else ""
        mod = named.get(parent)
        if mod is None:
            continue
        for a in adapters.ADAPTERS.values():
            if a.matches(mod) and a.gate_module != n.split(".")[-1]:
                raise ValueError(f"{n}: {type(mod).__name__}'s {n.split('.')[-1]} is not its log-decay (family "
                                 f"'{a.family}': {a.note}); use adapters.capture_log_decays(model, ...)")


def capture_gates(module, *inputs, gate_names=None, to_log_gate=F.logsigmoid, output=None, **kwargs):
    """Run module(*inputs, **kwargs) once, capturing forget-gate log values from any nn.Module.

    gate_names: None picks every `hook_log_fgate` HookPoint if the model has them (their output
    already is the log gate), otherwise every submodule whose name ends in "fgate_proj" (the
    official FoX code) or "f_proj" (flash-linear-attention); or a list of exact module names or
    name suffixes (e.g. ["fgate_proj"], ["model.layers.3.attn.fgate_proj"]). A module inside a
    layer of a known family whose decay is more than logsigmoid of it (fla HGRN's f_proj: it has a
    lower bound) is refused: use adapters.capture_log_decays for those.
    output: what the gate modules return: "logits" (to_log_gate is applied; default logsigmoid),
    "gate" (values in (0, 1]: the log is taken) or "log_gate" (used as is). None: "logits", but a
    module whose every output lies in [0, 1] is refused as ambiguous (it looks like gate values,
    and logsigmoid of a gate value is not a log gate): say which with `output`.
    Not applied to HookPoints (their value is the log gate).
    Returns {module name: (B, T, H) float32 CPU tensor, every entry <= 0}; a module called more than
    once in the forward keeps every call, the k-th extra one under "name#k". Hooks are always removed.
    Raises ValueError if nothing matches or a captured value is not (B, T, H) log gates.
    """
    if output not in (None,) + GATE_OUTPUTS:
        raise ValueError(f"output must be one of {GATE_OUTPUTS} or None; got {output!r}")
    named = dict(module.named_modules())
    if gate_names is None:
        sel = [n for n, m in named.items() if isinstance(m, HookPoint) and n.endswith("hook_log_fgate")]
        if not sel:
            sel = [n for n in named if n and n.split(".")[-1] in DEFAULT_GATE_SUFFIXES]
    else:
        if isinstance(gate_names, str):
            gate_names = [gate_names]
        sel = []
        for g in gate_names:
            hits = [g] if g in named and g else [n for n in named if n == g or n.endswith("." + g)]
            if not hits:
                raise ValueError(f"no submodule named or ending in '{g}'")
            sel += [h for h in hits if h not in sel]
    if not sel:
        raise ValueError("no forget-gate modules found (looked for hook_log_fgate, fgate_proj, f_proj); pass gate_names "
                         "or use adapters.capture_log_decays")
    _known_layer_check(named, [n for n in sel if not isinstance(named[n], HookPoint)])
    out, handles = {}, []

    def make_hook(name, is_point):
        def hook(mod, args, res):
            val = res[0] if isinstance(res, (tuple, list)) else res
            if not isinstance(val, torch.Tensor):
                raise ValueError(f"{name} returned {type(val).__name__}, not a tensor")
            val = val.detach().float()
            if is_point or output == "log_gate":
                lg = val
            elif output == "gate":
                if (val <= 0).any() or (val > 1).any():
                    raise ValueError(f"{name}: output='gate' but the values leave (0, 1] (min {val.min().item():.4g}, "
                                     f"max {val.max().item():.4g})")
                lg = torch.log(val)
            else:
                if output is None and to_log_gate is F.logsigmoid and bool(((val >= 0) & (val <= 1)).all()):
                    raise ValueError(f"{name}: every output lies in [0, 1]: these look like gate values (a sigmoid "
                                     f"already applied), and logsigmoid of them is not a log gate; pass "
                                     f"output='gate' (or output='logits' if they really are logits)")
                lg = to_log_gate(val)
            key, k = name, 0
            while key in out:                            # called again in the same forward: keep every call
                k += 1
                key = f"{name}#{k}"
            out[key] = lg.float().cpu()
        return hook

    try:
        for n in sel:
            handles.append(named[n].register_forward_hook(make_hook(n, isinstance(named[n], HookPoint))))
        with torch.no_grad():
            module(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
    for n, lg in out.items():
        if lg.dim() != 3:
            raise ValueError(f"{n}: log gates must be (B, T, H); got shape {tuple(lg.shape)}")
        if torch.isnan(lg).any() or (lg > 0).any():
            raise ValueError(f"{n}: captured values are not log gates (NaN or > 0); check to_log_gate / output")
    missing = [n for n in sel if n not in out]
    if missing:
        raise ValueError(f"gate modules {missing} were not called in the forward pass")
    return out


# ----------------------------------------------------------------------------- traces on disk

TRACE_FORMAT = "foxwindow-trace-v1"


TRACE_RESERVED = ("format", "names", "shapes")


def _check_trace(name, a, where):
    if a.ndim != 3:
        raise ValueError(f"{where}: trace '{name}' must be (B, T, H); got shape {a.shape}")
    if 0 in a.shape:
        raise ValueError(f"{where}: trace '{name}' is empty (shape (B, T, H) = {a.shape}); "
                         "every dimension must be >= 1")
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"{where}: trace '{name}' must be floating point; got {a.dtype}")
    if not np.isfinite(a).all():
        raise ValueError(f"{where}: trace '{name}' has NaN or infinite values")
    if (a > 0).any():
        raise ValueError(f"{where}: trace '{name}' has positive log gates (max {a.max():.4g})")


def save_trace(path, traces, meta):
    """Write log-gate traces to `path` (.npz, float32) with JSON metadata.

    traces: {name: (B, T, H) array or tensor of log gates <= 0, finite}; meta: JSON-serialisable
    dict (e.g. model, layers, heads, text span, eps); the keys "format", "names" and "shapes" are the
    file's own (added here, checked on load) and may not be given. An int meta["heads"] is checked
    against every trace (here and on load), which catches a (B, H, T) array passed as (B, T, H).
    The file is written to a temporary name and renamed, so an interrupted save leaves no partial file.
    Raises ValueError on bad traces or metadata.
    """
    if not isinstance(traces, dict) or not traces:
        raise ValueError("traces must be a non-empty dict {name: (B, T, H) array}")
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict; got {type(meta).__name__}")
    taken = [k for k in TRACE_RESERVED if k in meta]
    if taken:
        raise ValueError(f"meta keys {taken} are reserved by the trace format (it stores them itself); rename them")
    heads = meta.get("heads")
    names, arrays = [], {}
    for i, (name, a) in enumerate(traces.items()):
        if not isinstance(name, str):
            raise ValueError(f"trace names must be strings; got {name!r}")
        a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        _check_trace(name, a, "save_trace")
        if isinstance(heads, int) and a.shape[2] != heads:
            raise ValueError(f"save_trace: trace '{name}' has shape {a.shape}, so {a.shape[2]} heads as (B, T, H); "
                             f"meta says heads={heads} (is it (B, H, T)?)")
        names.append(name)
        arrays[f"trace_{i}"] = a.astype(np.float32)
    stored = dict(meta)
    stored.update(format=TRACE_FORMAT, names=names, shapes=[list(arrays[f"trace_{i}"].shape) for i in range(len(names))])
    try:
        blob = json.dumps(stored).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta is not JSON-serialisable: {exc}") from exc
    arrays["meta_json"] = np.frombuffer(blob, dtype=np.uint8)
    import outputs
    outputs.save_npz(path, **arrays)


def load_trace(path):
    """Read a file written by save_trace. Returns (traces {name: (B, T, H) float32 ndarray}, meta dict).

    Raises FileNotFoundError if missing; ValueError naming the problem if the file is truncated or
    not an npz, the metadata is missing or unreadable, or a trace has the wrong shape, NaN or
    positive values.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"trace file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npz trace (corrupt or truncated): {exc}") from exc
    if "meta_json" not in data:
        raise ValueError(f"{path}: missing metadata (no meta_json entry)")
    try:
        meta = json.loads(data.pop("meta_json").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: metadata is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != TRACE_FORMAT:
        raise ValueError(f"{path}: metadata lacks format '{TRACE_FORMAT}'")
    for key in ("names", "shapes"):
        if not isinstance(meta.get(key), list):
            raise ValueError(f"{path}: metadata lacks '{key}'")
    names, shapes = meta["names"], meta["shapes"]
    if len(names) != len(shapes) or set(data) != {f"trace_{i}" for i in range(len(names))}:
        raise ValueError(f"{path}: metadata lists {len(names)} traces, file holds {len(data)}")
    traces = {}
    for i, name in enumerate(names):
        a = data[f"trace_{i}"]
        if list(a.shape) != list(shapes[i]):
            raise ValueError(f"{path}: trace '{name}' has shape {a.shape}, metadata says {tuple(shapes[i])}")
        _check_trace(name, a, path)
        heads = meta.get("heads")
        if isinstance(heads, int) and a.shape[2] != heads:
            raise ValueError(f"{path}: trace '{name}' has {a.shape[2]} heads, metadata says {heads}")
        traces[name] = a.astype(np.float32)
    return traces, meta


if __name__ == "__main__":
    import outputs
    raise SystemExit(outputs.describe(__doc__))
