"""Forgetting attention (FoX): the attention op, its references, and reading gates out of a model.

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
    HookPoint, run_with_cache, capture_gates               read log gates out of a forward pass
    save_trace, load_trace                                 gate traces on disk (.npz + JSON)
The layer, the LM and checkpoints are in model.py.

Bringing your own model: `adapters.capture_log_decays(model, input_ids)` reads every layer of a
known gated family (FoX, official FoX, fla's FoX, GLA, HGRN, Gated DeltaNet, Mamba-2, RetNet) from
the layer's own parameters and inputs. `capture_gates(model, input_ids)` is the quick path for
FoX-style models: it hooks `hook_log_fgate` HookPoints or submodules whose name ends in
`fgate_proj` / `f_proj` and returns {module name: (B, T, H) float32 log gates}; for other gate
parametrisations pass `gate_names=[...]`, `output=` and a `to_log_gate` mapping the module output
to log gates (B, T, H).
"""
import json
import math
import os
import warnings
import zipfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import distributed
import outputs

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


# ----------------------------------------------------------------------------- reading gates

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



def run_with_cache(model, tokens, names_filter=None):
    """Forward `tokens` (B, T) int64 through `model`, caching HookPoint values.

    names_filter: None (all hooks), a list/tuple/set of hook names, a single name, or a callable
    name -> bool. Returns (logits (B, T, V), cache {name: detached float32 tensor, (B, T, H) for
    log-gate hooks}). Hooks are removed even if the forward raises. Raises ValueError when the model
    has no HookPoint (models other than this file's: use adapters.capture_log_decays), for requested
    names the model does not have, or when a callable filter matches no hook. A model wrapped by DDP,
    FSDP or torch.compile runs unwrapped (eager), with the plain model's hook names.
    """
    model = distributed.unwrap(model)
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
    A wrapped model (DDP, FSDP, torch.compile) runs unwrapped; names are the plain model's, and
    gate_names may carry the wrappers' prefixes ('module.', '_orig_mod.').
    """
    if output not in (None,) + GATE_OUTPUTS:
        raise ValueError(f"output must be one of {GATE_OUTPUTS} or None; got {output!r}")
    module = distributed.unwrap(module)
    named = dict(module.named_modules())
    if gate_names is None:
        sel = [n for n, m in named.items() if isinstance(m, HookPoint) and n.endswith("hook_log_fgate")]
        if not sel:
            sel = [n for n in named if n and n.split(".")[-1] in DEFAULT_GATE_SUFFIXES]
    else:
        if isinstance(gate_names, str):
            gate_names = [gate_names]
        gate_names = [distributed.clean_name(g) if isinstance(g, str) else g for g in gate_names]
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
    stored.update(format=TRACE_FORMAT, names=names,
                  shapes=[list(arrays[f"trace_{i}"].shape) for i in range(len(names))])
    try:
        blob = json.dumps(stored).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta is not JSON-serialisable: {exc}") from exc
    arrays["meta_json"] = np.frombuffer(blob, dtype=np.uint8)
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
    raise SystemExit(outputs.describe(__doc__))
