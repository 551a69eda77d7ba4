"""TransformerLens as a source of decays: read a TransformerBridge model's per-token log-decays through its own
run_with_cache and hook names, as trace arrays for `python forget.py --traces`.

transformer-lens (4.3.0) is an optional extra (requirements-tl.txt); it is imported by the caller, never here.
What each hook holds:

    blocks.{i}.linear_attn.hook_log_decay      Gated DeltaNet (Qwen3.5, Qwen3-Next, ...): the log-decay
                                               g = -exp(A_log) softplus(a + dt_bias), (B, T, n_v_heads), <= 0;
                                               aliased hook_ssm_decay. A delta-rule family: its window bounds
                                               the memory from above.
    blocks.{i}.mixer.in_proj.hook_out          Mamba-2: no decay hook; the decay is rebuilt from the projection's
                                               last n_heads columns dt_raw, the mixer's A_log and dt_bias:
                                               log g = -exp(A_log) clamp(softplus(dt_raw + dt_bias), time_step_limit)
                                               (prefill: call with use_cache=False, so every token passes in_proj)
    blocks.{i}.attn.hook_log_fgate             this package's own FoX hook name (models/fox.py), read as is

    tl_log_decays(bridge, tokens, **forward_kwargs)   -> (decays {hook name: (B, T, H) float32 CPU},
                                                          families {hook name: family}, memory bounds {hook name})
    tl_traces(bridge, batches)                        the same over several token batches, concatenated
"""
import torch
import torch.nn.functional as F

from foxwindow.models import adapters

DECAY_SUFFIXES = ("linear_attn.hook_log_decay", "attn.hook_log_fgate")
MAMBA2_SUFFIX = "mixer.in_proj.hook_out"
FAMILY = {"linear_attn.hook_log_decay": "fla-gated-deltanet", "attn.hook_log_fgate": "foxwindow",
          MAMBA2_SUFFIX: "mamba2"}


def _module(bridge, hook_name):
    """The bridge submodule that owns a hook: 'blocks.3.mixer.in_proj.hook_out' -> bridge.blocks[3].mixer."""
    parts = hook_name.split(".")
    m = bridge
    for p in parts[:-2] if hook_name.endswith(MAMBA2_SUFFIX) else parts[:-1]:
        m = m[int(p)] if p.isdigit() else getattr(m, p)
    return m


def _param(mod, name):
    """A parameter of a bridge component or of the HF module it wraps (original_component)."""
    for m in (mod, getattr(mod, "original_component", None)):
        if m is not None and isinstance(getattr(m, name, None), torch.Tensor):
            return getattr(m, name)
    raise ValueError(f"{type(mod).__name__} has no {name}")


def mamba2_log_decay(mixer, in_proj_out):
    """Mamba-2's log-decay from the output of its in_proj (B, T, F), the mixer's A_log (H,) and dt_bias (H,):
    -exp(A_log) * clamp(softplus(dt_raw + dt_bias), time_step_limit), dt_raw = the last H columns. (B, T, H) float32."""
    A_log = _param(mixer, "A_log").float()
    H = A_log.shape[0]
    dt = F.softplus(in_proj_out[..., -H:].float() + _param(mixer, "dt_bias").float())
    hf = getattr(mixer, "original_component", mixer)
    lo, hi = getattr(hf, "time_step_limit", (0.0, float("inf")))
    return -A_log.exp() * dt.clamp(lo, hi)


def tl_log_decays(bridge, tokens, **kwargs):
    """Run bridge.run_with_cache(tokens, names_filter=..., **kwargs) once and read every gated layer's log-decay.

    Returns (decays {hook name: (B, T, H) float32 CPU tensor, entries <= 0}, families {hook name: foxwindow
    family}, memory_bound {hook name: "decay" or "upper: delta-rule erasure not counted"}). For Mamba-2 the
    name is the in_proj hook whose output the decay is rebuilt from. Raises ValueError when the model exposes
    none of the hooks."""
    names = list(getattr(bridge, "hook_dict", {}) or {})
    wanted = [n for n in names if n.endswith(DECAY_SUFFIXES) or n.endswith(MAMBA2_SUFFIX)]
    if not wanted:
        raise ValueError(f"{type(bridge).__name__} exposes none of {DECAY_SUFFIXES + (MAMBA2_SUFFIX,)} "
                         f"(its hooks: {names[:4]}...)")
    _, cache = bridge.run_with_cache(tokens, names_filter=lambda n: n in set(wanted), **kwargs)
    decays, fams, bounds = {}, {}, {}
    for n in wanted:
        v = cache[n]
        if n.endswith(MAMBA2_SUFFIX):
            v = mamba2_log_decay(_module(bridge, n), v)
        suffix = next(s for s in FAMILY if n.endswith(s))
        v = v.detach().float().cpu()
        if v.dim() != 3 or not torch.isfinite(v).all() or (v > 0).any():
            raise ValueError(f"{n}: not a (B, T, H) log-decay <= 0 (shape {tuple(v.shape)})")
        decays[n], fams[n] = v, FAMILY[suffix]
        bounds[n] = adapters.memory_bound(fams[n])
    return decays, fams, bounds


def tl_traces(bridge, batches, **kwargs):
    """tl_log_decays over an iterable of (B_i, T) token batches, concatenated along B: (traces {name: (S, T, H)
    float32 ndarray}, meta for traces.save_trace: families, memory_bound_by_layer, source)."""
    parts, fams, bounds = {}, {}, {}
    for tok in batches:
        d, f, b = tl_log_decays(bridge, tok, **kwargs)
        for n, v in d.items():
            parts.setdefault(n, []).append(v)
        fams.update(f)
        bounds.update(b)
    traces = {n: torch.cat(v).numpy() for n, v in parts.items()}
    return traces, dict(families=fams, memory_bound_by_layer=bounds, source="TransformerLens run_with_cache")
