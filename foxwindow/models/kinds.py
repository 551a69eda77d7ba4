"""Attention kinds behind one interface, a registry by name, and the byte-level LM (model.LM) around any kind.

The interface (as in fast-transformers: the layer projects, the kind only attends):

    kind(q, k, v, mask=None, **extra) -> (B, T_q, H, D)

q: (B, T_q, H, D); k, v: (B, T_k, H, D) with T_q <= T_k, the queries being the last T_q key
positions (KV-cache convention, as in fox_attention). Every kind is causal by itself: query i never
sees a key j > i. `mask` is an extra restriction on top of that: a bool tensor (True = may attend)
or a float tensor added to the logits, broadcastable to (B, H, T_q, T_k); None adds nothing.
`extra` holds per-kind inputs, e.g. FoX's log forget gates `log_fgate` (B, T_k, H) float32. A kind
that computes its extra inputs from the layer input defines `extra_inputs(x) -> dict`, x the normed
hidden state (B, T, d_model); the layer calls it before attending.

Registry:
    AttentionRegistry.register("square", QuadraticAttention, [("quadratic_temp", Optional(Float, 1.0))])
    model = build_model(attention_type="square", n_layers=2, d_model=64, n_heads=4, quadratic_temp=5.0)
Kind constructors get their registered parameters, plus `d_model` and `n_heads` if their signature
asks for them. Parameter specs: Int, Float, Bool, Choice, Optional(spec, default); a spec without
Optional is required. Bad or unknown parameters raise ValueError naming the parameter.

Built-in kinds
    softmax   causal softmax, no position information at all
    fox       forgetting attention: logits + c_i - c_j, c the cumulative log forget gate; the gate is
              logsigmoid(f_proj(x)) per head, read/patched at the hook `hook_log_fgate`
    alibi     softmax + -m_h (i - j), the standard geometric slopes m_h = 2^(-8h/H)
    swa       sliding window: query i sees keys i - w + 1 .. i
    bswa      block sliding window: query in block b sees its own block causally and blocks b - mem .. b - 1
    fam       BSWA plus feedback attention memory (TransformerFAM); needs the block-by-block model FAMLM,
              which build_model picks for it
Recurrent (one token at a time, KV cache) forms: fox, alibi, swa (`init_state`, `step`), and
KindLM.step for whole models of those kinds; fox's init_state(horizon) keeps only each head's KV horizon
(fox_attention.forgetting_attention_step, the same step as model.ForgettingAttention's).
"""
import inspect
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from foxwindow import outputs
from foxwindow.models.attention import (
    cum_log_gate,
    forgetting_attention,
    forgetting_attention_step,
    fox_bias,
    init_kv_cache,
)
from foxwindow.models.fox import LM, BitLinear, HookPoint, LMConfig, fgate_bias_init

__all__ = ["Spec", "Int", "Float", "Bool", "Choice", "Optional", "Registry", "positions", "causal_mask", "attend",
           "SoftmaxAttention", "FoXKind", "alibi_slopes", "ALiBiAttention", "SlidingWindowAttention",
           "BlockSlidingWindowAttention", "FAMAttention", "AttentionLayer", "KindConfig", "KindLM", "FAMLM",
           "build_model"]

# ----------------------------------------------------------------------------- parameter specs


class Spec:
    """A typed parameter. check(name, value) returns the (converted) value or raises ValueError."""
    required = True
    default = None

    def check(self, name, value):
        raise NotImplementedError


class Int(Spec):
    def __init__(self, min=None, max=None):
        self.min, self.max = min, max

    def check(self, name, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"parameter '{name}' must be an int; got {value!r}")
        if self.min is not None and value < self.min:
            raise ValueError(f"parameter '{name}' must be >= {self.min}; got {value}")
        if self.max is not None and value > self.max:
            raise ValueError(f"parameter '{name}' must be <= {self.max}; got {value}")
        return value

    def __repr__(self):
        return f"Int(min={self.min}, max={self.max})"


class Float(Spec):
    def __init__(self, min=None, max=None, min_open=False):
        self.min, self.max, self.min_open = min, max, min_open

    def check(self, name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"parameter '{name}' must be a float; got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"parameter '{name}' must be finite; got {value}")
        if self.min is not None and (value < self.min or (self.min_open and value == self.min)):
            raise ValueError(f"parameter '{name}' must be {'>' if self.min_open else '>='} {self.min}; got {value}")
        if self.max is not None and value > self.max:
            raise ValueError(f"parameter '{name}' must be <= {self.max}; got {value}")
        return value

    def __repr__(self):
        return f"Float(min={self.min}, max={self.max})"


class Bool(Spec):
    def check(self, name, value):
        if not isinstance(value, bool):
            raise ValueError(f"parameter '{name}' must be a bool; got {value!r}")
        return value


class Choice(Spec):
    def __init__(self, values):
        self.values = tuple(values)

    def check(self, name, value):
        if value not in self.values:
            raise ValueError(f"parameter '{name}' must be one of {list(self.values)}; got {value!r}")
        return value


class Optional(Spec):
    """Optional(spec, default): the parameter may be left out; None is accepted only as the default."""
    required = False

    def __init__(self, spec, default=None):
        self.spec = spec() if isinstance(spec, type) else spec
        if not isinstance(self.spec, Spec):
            raise ValueError(f"Optional needs a Spec (Int, Float, Bool, Choice); got {spec!r}")
        if default is not None:
            self.spec.check("default", default)
        self.default = default

    def check(self, name, value):
        if value is None and self.default is None:
            return None
        return self.spec.check(name, value)


# ----------------------------------------------------------------------------- the registry


class Registry:
    """Attention kinds by name: name -> (module class, [(param name, Spec)])."""

    def __init__(self):
        self._kinds = {}

    def register(self, name, cls, params=(), replace=False):
        """Register `cls` (an nn.Module subclass called as cls(q, k, v, mask=None, **extra)) under `name`.
        params: [(name, Spec)], e.g. [("w", Int(min=1)), ("scale", Optional(Float, 1.0))]."""
        if not (isinstance(name, str) and name):
            raise ValueError(f"attention kind name must be a non-empty string; got {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"attention kind '{name}' must be an nn.Module subclass; got {cls!r}")
        if name in self._kinds and not replace:
            raise ValueError(f"attention kind '{name}' is already registered (pass replace=True to override)")
        specs = []
        for p in params:
            if not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)):
                raise ValueError(f"kind '{name}': each parameter must be a (name, Spec) pair; got {p!r}")
            spec = p[1]() if isinstance(p[1], type) else p[1]
            if not isinstance(spec, Spec):
                raise ValueError(f"kind '{name}': parameter '{p[0]}' needs a Spec; got {p[1]!r}")
            if p[0] in ("d_model", "n_heads"):
                raise ValueError(f"kind '{name}': '{p[0]}' is supplied by the model, not a kind parameter")
            specs.append((p[0], spec))
        self._kinds[name] = (cls, specs)

    def __contains__(self, name):
        return name in self._kinds

    def names(self):
        return sorted(self._kinds)

    def lookup(self, name):
        """(cls, [(param, Spec)]) for `name`; ValueError listing the known kinds if unknown."""
        if name not in self._kinds:
            raise ValueError(f"unknown attention_type {name!r}; registered: {self.names()}")
        return self._kinds[name]

    def validate(self, name, **params):
        """Full parameter dict (defaults filled in) for kind `name`; ValueError on unknown, missing or bad values."""
        _, specs = self.lookup(name)
        known = {p for p, _ in specs}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"attention_type {name!r} has no parameter(s) {unknown}; it takes {sorted(known)}")
        out = {}
        for p, spec in specs:
            if p in params:
                out[p] = spec.check(p, params[p])
            elif spec.required:
                raise ValueError(f"attention_type {name!r} requires parameter '{p}'")
            else:
                out[p] = spec.default
        return out

    def build(self, name, d_model=None, n_heads=None, **params):
        """Instantiate kind `name` with validated params; d_model / n_heads are passed if cls asks for them."""
        cls, _ = self.lookup(name)
        kw = self.validate(name, **params)
        sig = inspect.signature(cls.__init__).parameters
        for k, v in (("d_model", d_model), ("n_heads", n_heads)):
            if k in sig:
                if v is None:
                    raise ValueError(f"attention_type {name!r} needs {k}")
                kw[k] = v
        return cls(**kw)


AttentionRegistry = Registry()

# ----------------------------------------------------------------------------- shared helpers


def positions(Tq, Tk, device=None):
    """Absolute positions (qpos (T_q,), kpos (T_k,)) int64: queries are the last T_q keys."""
    if Tq > Tk:
        raise ValueError(f"T_q ({Tq}) must not exceed T_k ({Tk})")
    kpos = torch.arange(Tk, device=device)
    return kpos[Tk - Tq:], kpos


def causal_mask(Tq, Tk, device=None):
    """(T_q, T_k) bool, True where key j <= query i (queries are the last T_q keys)."""
    qpos, kpos = positions(Tq, Tk, device)
    return kpos[None, :] <= qpos[:, None]


def _check_qkv(q, k, v):
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{n} must be a (B, T, H, D) tensor; got {getattr(t, 'shape', type(t).__name__)}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]:
        raise ValueError(f"q, k, v must be (B, T_q, H, D), (B, T_k, H, D), (B, T_k, H, D); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[1] > k.shape[1]:
        raise ValueError(f"T_q ({q.shape[1]}) must not exceed T_k ({k.shape[1]})")


def attend(q, k, v, keep=None, bias=None, mask=None, scale=None):
    """Softmax attention with structure: softmax(q k^T * scale + bias [+ float mask]) over keys where
    keep [& bool mask]. q (B, T_q, H, D), k/v (B, T_k, H, D); keep bool and bias float broadcastable
    to (B, H, T_q, T_k). Computes in float32 (at least); returns (B, T_q, H, D) in q.dtype.
    Every query must keep at least one key (causal kinds always keep the query's own key)."""
    ct = torch.promote_types(q.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qq, kk, vv = (t.to(ct).transpose(1, 2) for t in (q, k, v))            # (B, H, T, D)
    logits = (qq @ kk.transpose(-1, -2)) * scale                            # (B, H, Tq, Tk)
    if bias is not None:
        logits = logits + bias.to(ct)
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise ValueError(f"mask must be a tensor (bool keep-mask or float additive); got {type(mask).__name__}")
        try:
            torch.broadcast_shapes(mask.shape, logits.shape)
        except RuntimeError:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, T_q, T_k) = "
                             f"{tuple(logits.shape)}")
        if mask.dtype == torch.bool:
            keep = mask if keep is None else keep & mask
        elif mask.is_floating_point():
            logits = logits + mask.to(ct)
        else:
            raise ValueError(f"mask must be bool or floating point; got {mask.dtype}")
    if keep is not None:
        logits = logits.masked_fill(~keep, float("-inf"))
    return (torch.softmax(logits, dim=-1) @ vv).transpose(1, 2).to(q.dtype)


def _step_attend(q, K, V, bias=None, scale=None):
    """One query against a cache: q (B, H, D), K/V (B, H, n, D), bias (B or 1, H, n). -> (B, H, D)."""
    ct = torch.promote_types(q.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = (K.to(ct) @ q.to(ct)[..., None])[..., 0] * scale               # (B, H, n)
    if bias is not None:
        logits = logits + bias.to(ct)
    return (torch.softmax(logits, -1)[:, :, None, :] @ V.to(ct))[:, :, 0].to(q.dtype)


def _append(cache, x):
    """cache (B, H, n, D) or None, x (B, H, D) -> (B, H, n + 1, D)."""
    return x[:, :, None] if cache is None else torch.cat([cache, x[:, :, None]], dim=2)


# ----------------------------------------------------------------------------- built-in kinds


class SoftmaxAttention(nn.Module):
    """Causal softmax attention with no position information (the gate-fixed-to-1 FoX baseline)."""

    def forward(self, q, k, v, mask=None):
        _check_qkv(q, k, v)
        return attend(q, k, v, keep=causal_mask(q.shape[1], k.shape[1], q.device), mask=mask)


class FoXKind(nn.Module):
    """Forgetting attention. Gate per head from the layer input, log g = logsigmoid(f_proj(x)) in float32,
    through `hook_log_fgate` (B, T, H). fgate_bias: initial gate logit for every head; None spreads
    them over linspace(1, 5) as model.fgate_bias_init does."""

    def __init__(self, d_model, n_heads, fgate_bias=None):
        super().__init__()
        self.n_heads = n_heads
        self.f_proj = nn.Linear(d_model, n_heads, bias=True)
        self.f_proj._keep_init = True          # the LM's generic init must not reset the gate biases
        with torch.no_grad():
            nn.init.normal_(self.f_proj.weight, std=0.1 / math.sqrt(d_model))
            self.f_proj.bias.copy_(fgate_bias_init(n_heads, "spread" if fgate_bias is None else fgate_bias))
        self.hook_log_fgate = HookPoint()

    def extra_inputs(self, x):
        """x (B, T, d_model) -> {"log_fgate": (B, T, H) float32 <= 0}."""
        return {"log_fgate": self.hook_log_fgate(F.logsigmoid(self.f_proj(x).float()))}

    def forward(self, q, k, v, mask=None, log_fgate=None):
        _check_qkv(q, k, v)
        if log_fgate is None:
            raise ValueError("fox attention needs log_fgate (B, T_k, H) float32 "
                             "(the layer supplies it via extra_inputs)")
        if mask is None:
            return forgetting_attention(q, k, v, log_fgate)
        if log_fgate.shape != k.shape[:3]:
            raise ValueError(f"log_fgate must be (B, T_k, H) = {tuple(k.shape[:3])}; got {tuple(log_fgate.shape)}")
        # same numerics as the reference: cumulative log-gate and its differences in float64
        Tq, Tk = q.shape[1], k.shape[1]
        c = cum_log_gate(log_fgate)                                          # (B, H, Tk) float64
        bias = fox_bias(c[:, :, Tk - Tq:], c).float()                        # (B, H, Tq, Tk)
        return attend(q, k, v, keep=causal_mask(Tq, Tk, q.device), bias=bias, mask=mask)

    def init_state(self, horizon=None):
        """Empty KV cache; horizon: None (every key) or (H,) ints, the keys each head keeps (distance <= h)."""
        return init_kv_cache(horizon)

    def step(self, q, k, v, state, log_fgate=None):
        """One token: q, k, v (B, H, D), log_fgate (B, H) float32. The state keeps the keys (all, or each head's
        horizon in a ring buffer) with the cumulative log-gate c_j at its position (float64); the bias is c_i - c_j."""
        if log_fgate is None:
            raise ValueError("fox step needs log_fgate (B, H)")
        return forgetting_attention_step(q, k, v, log_fgate, state)


def alibi_slopes(n_heads):
    """The standard ALiBi slopes (Press et al. 2022): 2^(-8h/n) for h = 1..n when n is a power of 2;
    otherwise those of the nearest lower power of 2 plus every other slope of the next one."""
    def pow2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n_heads).is_integer():
        return pow2(n_heads)
    c = 2 ** math.floor(math.log2(n_heads))
    return pow2(c) + pow2(2 * c)[0::2][: n_heads - c]


class ALiBiAttention(nn.Module):
    """Causal softmax + -m_h (i - j). slope_scale multiplies the standard slopes (1.0 = standard)."""

    def __init__(self, n_heads, slope_scale=1.0):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads), dtype=torch.float32) * slope_scale,
                             persistent=False)

    def bias(self, Tq, Tk, device=None):
        """(1, H, T_q, T_k) float32 bias -m_h (i - j); positive distances only matter (the rest is masked)."""
        qpos, kpos = positions(Tq, Tk, device)
        dist = (qpos[:, None] - kpos[None, :]).float()                      # (Tq, Tk)
        return -self.slopes.to(device)[None, :, None, None] * dist[None, None]

    def forward(self, q, k, v, mask=None):
        _check_qkv(q, k, v)
        Tq, Tk = q.shape[1], k.shape[1]
        return attend(q, k, v, keep=causal_mask(Tq, Tk, q.device), bias=self.bias(Tq, Tk, q.device), mask=mask)

    def init_state(self):
        return {"k": None, "v": None, "t": 0}

    def step(self, q, k, v, state):
        """One token; the state keeps all keys and the position count t."""
        st = {"k": _append(state["k"], k), "v": _append(state["v"], v), "t": state["t"] + 1}
        dist = torch.arange(st["t"] - 1, -1, -1, device=q.device, dtype=torch.float32)   # (n,) = i - j
        return _step_attend(q, st["k"], st["v"], bias=-self.slopes[None, :, None] * dist), st


class SlidingWindowAttention(nn.Module):
    """Causal softmax over the last w keys: query i sees j with i - w < j <= i (hard window w - 1)."""

    def __init__(self, w=64):
        super().__init__()
        self.w = w

    def keep(self, Tq, Tk, device=None):
        qpos, kpos = positions(Tq, Tk, device)
        d = qpos[:, None] - kpos[None, :]
        return (d >= 0) & (d < self.w)

    def forward(self, q, k, v, mask=None):
        _check_qkv(q, k, v)
        return attend(q, k, v, keep=self.keep(q.shape[1], k.shape[1], q.device), mask=mask)

    def init_state(self):
        return {"k": None, "v": None}

    def step(self, q, k, v, state):
        """One token; the state keeps only the last w keys and values."""
        st = {"k": _append(state["k"], k)[:, :, -self.w:], "v": _append(state["v"], v)[:, :, -self.w:]}
        return _step_attend(q, st["k"], st["v"]), st


class BlockSlidingWindowAttention(nn.Module):
    """Block sliding window (TransformerFAM's BSWA): positions are cut into blocks of `block` from the
    start; a query in block b sees its own block causally and all of blocks b - mem .. b - 1. The
    reach of a query at offset p in its block is p + block * mem: between block*mem and block*(mem+1) - 1."""

    def __init__(self, block=64, mem=1):
        super().__init__()
        self.block, self.mem = block, mem

    def keep(self, Tq, Tk, device=None):
        qpos, kpos = positions(Tq, Tk, device)
        qb, kb = qpos[:, None] // self.block, kpos[None, :] // self.block
        return (kpos[None, :] <= qpos[:, None]) & (kb >= qb - self.mem)

    def forward(self, q, k, v, mask=None):
        _check_qkv(q, k, v)
        return attend(q, k, v, keep=self.keep(q.shape[1], k.shape[1], q.device), mask=mask)


class FAMAttention(nn.Module):
    """The attention of one TransformerFAM block. Keys are [memory tokens (n_mem); block tokens (L);
    FAM (n_fam)], queries [block tokens; FAM] (so T_k = n_mem + T_q). Block tokens see the memory, their
    own block causally and the previous FAM; FAM queries see the whole current block and the previous
    FAM (not the memory). With n_mem = n_fam = 0 it is plain causal softmax.

    The block loop, the memory cache and the FAM state live in FAMLM (build_model picks it); the
    parameters are read from here: block, mem (memory segments), fam_len (F), state_passing
    (probability of random state passing in training), random_position_offset (must be 0: these models
    have no positional embedding, so there are no absolute positions to offset; the masks depend only
    on order and block membership, which a shift does not change)."""

    def __init__(self, block=64, mem=1, fam_len=8, state_passing=0.0, random_position_offset=0):
        super().__init__()
        if random_position_offset != 0:
            raise ValueError("random_position_offset must be 0: it shifts absolute positions, and these models "
                             "have none (no positional embedding; FAM masks depend only on order and blocks)")
        self.block, self.mem, self.fam_len, self.state_passing = block, mem, fam_len, state_passing

    def keep(self, Tq, Tk, n_mem, n_fam, device=None):
        if Tk != n_mem + Tq or n_fam > Tq:
            raise ValueError(f"fam attention expects T_k = n_mem + T_q and n_fam <= T_q; got T_q {Tq}, T_k {Tk}, "
                             f"n_mem {n_mem}, n_fam {n_fam}")
        L = Tq - n_fam
        keep = torch.zeros(Tq, Tk, dtype=torch.bool, device=device)
        keep[:L, :n_mem] = True
        keep[:L, n_mem:n_mem + L] = torch.ones(L, L, dtype=torch.bool, device=device).tril()
        keep[:L, n_mem + L:] = True
        keep[L:, n_mem:] = True
        return keep

    def forward(self, q, k, v, mask=None, n_mem=0, n_fam=0):
        _check_qkv(q, k, v)
        return attend(q, k, v, keep=self.keep(q.shape[1], k.shape[1], n_mem, n_fam, q.device), mask=mask)


AttentionRegistry.register("softmax", SoftmaxAttention, [])
AttentionRegistry.register("fox", FoXKind, [("fgate_bias", Optional(Float, None))])
AttentionRegistry.register("alibi", ALiBiAttention, [("slope_scale", Optional(Float(min=0.0, min_open=True), 1.0))])
AttentionRegistry.register("swa", SlidingWindowAttention, [("w", Optional(Int(min=1), 64))])
AttentionRegistry.register("bswa", BlockSlidingWindowAttention, [("block", Optional(Int(min=1), 64)),
                                                                 ("mem", Optional(Int(min=0), 1))])
AttentionRegistry.register("fam", FAMAttention, [("block", Optional(Int(min=1), 64)),
                                                 ("mem", Optional(Int(min=0), 1)),
                                                 ("fam_len", Optional(Int(min=1), 8)),
                                                 ("state_passing", Optional(Float(min=0.0, max=1.0), 0.0)),
                                                 ("random_position_offset", Optional(Int(min=0), 0))])

# ----------------------------------------------------------------------------- the layer and the LM


class AttentionLayer(nn.Module):
    """Projections around a kind: x (B, T, d_model) -> q, k, v (B, T, H, D) -> kind -> out_proj."""

    def __init__(self, d_model, n_heads, attention, use_bitnet=False):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        proj = BitLinear if use_bitnet else nn.Linear
        self.q_proj = proj(d_model, d_model, bias=False)
        self.k_proj = proj(d_model, d_model, bias=False)
        self.v_proj = proj(d_model, d_model, bias=False)
        self.out_proj = proj(d_model, d_model, bias=False)
        self.attention = attention

    def qkv(self, x):
        B, T, _ = x.shape
        sh = (B, T, self.n_heads, self.head_dim)
        return self.q_proj(x).view(sh), self.k_proj(x).view(sh), self.v_proj(x).view(sh)

    def extras(self, x):
        f = getattr(self.attention, "extra_inputs", None)
        return f(x) if f is not None else {}

    def forward(self, x, mask=None):
        B, T, d = x.shape
        q, k, v = self.qkv(x)
        o = self.attention(q, k, v, mask=mask, **self.extras(x))           # (B, T, H, D)
        return self.out_proj(o.reshape(B, T, d))

    def init_state(self, **kw):
        """The kind's empty recurrent state (kw: e.g. fox's horizon); ValueError if the kind has no recurrent form."""
        if not hasattr(self.attention, "init_state"):
            raise ValueError(f"{type(self.attention).__name__} has no recurrent form (step)")
        return self.attention.init_state(**kw)

    def step(self, x, state):
        """x (B, d_model), one position -> (B, d_model), state."""
        if not hasattr(self.attention, "step"):
            raise ValueError(f"{type(self.attention).__name__} has no recurrent form (step)")
        q, k, v = (t[:, 0] for t in self.qkv(x[:, None]))                  # (B, H, D)
        extra = {n: t[:, 0] for n, t in self.extras(x[:, None]).items()}  # e.g. log_fgate (B, H)
        o, state = self.attention.step(q, k, v, state, **extra)
        return self.out_proj(o.reshape(x.shape)), state


@dataclass
class KindConfig(LMConfig):
    """The LM around one attention kind: LMConfig sizes (smaller defaults) plus the kind and its parameters."""
    d_model: int = 64
    n_layers: int = 2
    context: int = 256
    attention_type: str = "softmax"
    kind_params: dict = field(default_factory=dict)


class KindLM(LM):
    """tokens (B, T) int64 -> logits (B, T, vocab) float32: model.LM with the registered attention kind
    `cfg.attention_type` (parameters cfg.kind_params) inside an AttentionLayer in every block.
    Recurrent decoding (LM.step) for kinds with a `step` form (fox, alibi, swa)."""

    def __init__(self, cfg: KindConfig, registry=None):
        registry = AttentionRegistry if registry is None else registry
        super().__init__(cfg, lambda li: AttentionLayer(
            cfg.d_model, cfg.n_heads,
            registry.build(cfg.attention_type, d_model=cfg.d_model, n_heads=cfg.n_heads, **cfg.kind_params),
            cfg.use_bitnet))


class FAMLM(KindLM):
    """TransformerFAM over a KindLM: the sequence is processed block by block. Per layer and block the
    input is [block tokens; FAM], keys add the cached keys/values of the previous `mem` blocks (BSWA);
    the updated FAM passes through the same MLP as the tokens and is that layer's FAM for the next block.

    Initial FAM: learned embeddings `fam_init` (F, d_model), prompt tuning: for the first block they
    enter layer 0 and travel up the stack like tokens, so each layer's first FAM is the layer below's
    updated FAM. Layer 0's first update uses a zero residual instead of fam_init (it carries no context).
    Random state passing (training, probability state_passing): start from the final FAM of the previous
    training step's first sequence (detached, shared by the batch) instead of fam_init."""

    def __init__(self, cfg: KindConfig, registry=None):
        super().__init__(cfg, registry)
        a = self.blocks[0].attn.attention
        self.block, self.mem, self.fam_len, self.state_passing = a.block, a.mem, a.fam_len, a.state_passing
        self.fam_init = nn.Parameter(torch.randn(self.fam_len, cfg.d_model) * 0.02)
        self.register_buffer("saved_fam", torch.zeros(cfg.n_layers, self.fam_len, cfg.d_model), persistent=False)
        self.has_saved = False

    def _block_layer(self, blk, h, f, mem_kv, zero_residual):
        """h (B, L, d) tokens, f (B, F, d) previous FAM, mem_kv [(k, v) (B, L', H, D)] -> (h, f, k, v)."""
        B, L, d = h.shape
        z = torch.cat([h, f], 1)                                             # (B, L + F, d)
        q, k, v = blk.attn.qkv(blk.ln1(z))                                   # (B, L + F, H, D)
        K = torch.cat([m[0] for m in mem_kv] + [k], 1)
        V = torch.cat([m[1] for m in mem_kv] + [v], 1)
        n_mem = K.shape[1] - k.shape[1]
        o = blk.attn.attention(q, K, V, n_mem=n_mem, n_fam=f.shape[1])
        a = blk.attn.out_proj(o.reshape(B, L + f.shape[1], d))
        res = torch.cat([h, torch.zeros_like(f)], 1) if zero_residual else z
        z = res + a
        z = z + blk.mlp(blk.ln2(z))
        return z[:, :L], z[:, L:], k[:, :L], v[:, :L]

    def forward_embeddings(self, x):
        x = self.drop(x)
        B, T, d = x.shape
        nl = len(self.blocks)
        fam = [None] * nl
        if self.training and self.has_saved and self.state_passing > 0 and torch.rand(()) < self.state_passing:
            fam = [self.saved_fam[li].expand(B, -1, -1) for li in range(nl)]
        mem_kv = [[] for _ in range(nl)]
        outs = []
        for s in range(0, T, self.block):
            h = x[:, s:s + self.block]
            up = self.fam_init.expand(B, -1, -1)                             # FAM entering layer 0 at the first block
            for li, blk in enumerate(self.blocks):
                first = fam[li] is None
                f_in = up if first else fam[li]
                h, f_new, k, v = self._block_layer(blk, h, f_in, mem_kv[li], zero_residual=first and li == 0)
                if self.mem > 0:
                    mem_kv[li] = (mem_kv[li] + [(k, v)])[-self.mem:]
                fam[li] = up = f_new
            outs.append(h)
        if self.training and self.state_passing > 0:
            with torch.no_grad():
                self.saved_fam.copy_(torch.stack([f[0] for f in fam]))
            self.has_saved = True
        return torch.cat(outs, 1)

    def step(self, token, states=None):
        raise ValueError("fam has no one-token recurrent form here; it runs block by block (call the model)")


FAMAttention.lm_class = FAMLM


def build_model(attention_type="softmax", n_layers=2, d_model=64, n_heads=4, vocab_size=256, mlp_ratio=4,
                dropout=0.0, context=256, registry=None, **kind_params):
    """The byte-level LM around kind `attention_type` with its parameters `kind_params` (validated by the
    registry; ValueError on unknown or bad ones). Kinds whose class sets `lm_class` (fam) get that model."""
    registry = AttentionRegistry if registry is None else registry
    cls, _ = registry.lookup(attention_type)
    params = registry.validate(attention_type, **kind_params)
    cfg = KindConfig(attention_type=attention_type, vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
                     n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout, context=context, kind_params=params)
    return getattr(cls, "lm_class", KindLM)(cfg, registry)


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
