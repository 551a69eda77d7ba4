"""Gate adapters: read the per-token log-decays of any gated model, layer by layer and head by head.

A gated sequence model multiplies its memory (attention logits, or a recurrent state) by a decay
a_t in (0, 1] per token; the window laws are about X_t = -log a_t. Each model family computes a_t
differently, so each gets an adapter: a few lines that recompute the layer's log-decay from the
layer's own parameters and the hidden states entering it, returning (B, T, H) float32 (or
(B, T, H, K) for per-channel gates), every entry <= 0. Adapters are keyed by family in a registry;
`register_adapter` adds one for a new family without editing this file.

    cap = capture_log_decays(model, input_ids)        # families found from the model's layer classes
    cap.decays["model.layers.3.attn"]                   # (B, T, H) float32
    cap.layer["model.layers.3.attn"]                    # 3, read from the module name

What the laws mean per family (also in each adapter's `note`):
  - scalar gate per head and token (FoX, fla FoX, Gated DeltaNet, Mamba-2): the laws apply as stated
    to each head's trace: W is the head's eps-window.
  - per-channel gates (GLA: one decay per key channel; HGRN: one per hidden channel): each channel's
    trace obeys the laws on its own (its window is how long that coordinate of the state remembers);
    the head's summary trace is the channel mean of log-decays, the log geometric-mean decay, whose
    window lies between the fastest and the slowest channel's and is the window of none of them.
  - constant decays (RetNet): X_t = m is a lattice law; W = floor(L / m) exactly with Var W = 0
    (gates.ConstantGate(m)); the renewal laws' variance does not apply.
  - recurrent families (everything but softmax attention) have no attention matrix: the decay window
    bounds how long an input can influence the state, there is no attention-mass window to compare.
  - delta-rule families (Gated DeltaNet, KDA; the adapter's delta_rule trait): the delta-rule update erases
    content with no decay, so the decay-only window is an upper bound on the state's memory
    (memory_bound(family) == "upper: delta-rule erasure not counted").
  - LSTMs and GRUs: one unit is one head (X = -log f, the forget gate; X = -log z, a GRU's update gate, which
    keeps z h_{t-1}); bidirectional modules through models/lstm_gates.capture_rnn_gates, each direction its own
    layer, the backward one time-reversed (its windows look forward in the text).
"""
import contextlib
import importlib
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from foxwindow.models import fallbacks, lstm_gates

__all__ = ["GateAdapter", "ADAPTERS", "register_adapter", "cpu_families",
           "get_adapter", "layer_index", "find_layers", "Capture",
           "check_log_decay", "capture_log_decays", "retnet_log_decays", "family_for_model_type",
           "import_family_packages"]


@dataclass(frozen=True)
class GateAdapter:
    """How one model family's layers decay their memory.

    family: registry key, e.g. "fla-gla".
    layer_classes: dotted class names of the layer modules this adapter reads; a module matches when
        "<its module>.<its class name>" ends with one of them at a dot boundary (so
        "gla.GatedLinearAttention" matches fla.layers.gla.GatedLinearAttention).
    log_decay: (layer, hidden (B, T, d) tensor, kwargs dict of the layer call) -> log-decays
        (B, T, H) or, when per_channel, (B, T, H, K); any float dtype (cast to float32 by the capture).
    num_heads: layer -> H, used to check the layout of what log_decay returns.
    kind: "softmax" (attention whose logits carry the decay: an attention-mass window exists),
        "recurrent" (a gated state) or "constant" (input-independent decay: a lattice law).
    per_channel: log_decay returns (B, T, H, K).
    gate_module: name of the layer's submodule whose logsigmoid output IS the log-decay, or None when
        the decay is more than that (a lower bound, a normaliser, a discretisation step).
    note: what the window laws mean for this family.
    packages: Python packages that define the layer classes (imported on demand).
    model_types: Hugging Face `config.model_type` values of this family.
    attention_op: (module path, function name) of the attention op the layer calls, wrapped to read
        q, k for attention-mass windows and to substitute a CPU reference (softmax families only).
    cpu: the family's code runs on the CPU (with the fallbacks of models/fallbacks.py); False for families
        whose fused kernels are Triton-only (a capture on the CPU is refused with the reason). A user's
        adapter is taken at its word (default True).
    delta_rule: the state is also updated by a delta rule (Gated DeltaNet, KDA, RWKV-7: S <- S (a - b k k^T)
        + ...), which erases content with no decay: the decay window then bounds the memory from above
        (memory_bound "upper: delta-rule erasure not counted"); otherwise the decay is the only erasure.
    """
    family: str
    layer_classes: tuple
    log_decay: Callable
    num_heads: Callable
    kind: str = "recurrent"
    per_channel: bool = False
    gate_module: str = None
    note: str = ""
    packages: tuple = ()
    model_types: tuple = ()
    attention_op: tuple = ()
    cpu: bool = True
    delta_rule: bool = False

    @property
    def memory_bound(self):
        """What the decay window says of the memory: "upper: delta-rule erasure not counted" for a delta-rule
        family (its state also erases by the delta rule), "decay" otherwise (the decay is the only erasure)."""
        return MEMORY_UPPER if self.delta_rule else "decay"

    def __post_init__(self):
        if not (isinstance(self.family, str) and self.family):
            raise ValueError(f"family must be a non-empty string; got {self.family!r}")
        if isinstance(self.layer_classes, str) or not self.layer_classes:
            raise ValueError(f"{self.family}: layer_classes must be a non-empty tuple of class names")
        if self.kind not in ("softmax", "recurrent", "constant"):
            raise ValueError(f"{self.family}: kind must be 'softmax', 'recurrent' or 'constant'; got {self.kind!r}")
        if not callable(self.log_decay) or not callable(self.num_heads):
            raise TypeError(f"{self.family}: log_decay and num_heads must be callables")

    def matches(self, module):
        full = f"{type(module).__module__}.{type(module).__qualname__}"
        return any(full == c or full.endswith("." + c) for c in self.layer_classes)


ADAPTERS = {}
MEMORY_UPPER = "upper: delta-rule erasure not counted"
DELTA_RULE_NOTE = ("delta rule: the state is also erased by the delta-rule update S <- S (I - beta k k^T) + "
                   "beta v k^T, with no decay; the decay window bounds the memory from above (upper: delta-rule "
                   "erasure not counted)")


def memory_bound(family):
    """The memory_bound of `family`'s adapter ("upper: delta-rule erasure not counted" or "decay"); None for a
    family with no registered adapter."""
    a = ADAPTERS.get(family)
    return None if a is None else a.memory_bound


def register_adapter(adapter, replace=False):
    """Add `adapter` (a GateAdapter) to the registry under adapter.family. Raises ValueError if the
    family is taken (pass replace=True to override it). Returns the adapter."""
    if not isinstance(adapter, GateAdapter):
        raise TypeError(f"adapter must be a GateAdapter; got {type(adapter).__name__}")
    if adapter.family in ADAPTERS and not replace:
        raise ValueError(f"a gate adapter for family '{adapter.family}' is already registered (replace=True)")
    ADAPTERS[adapter.family] = adapter
    return adapter


def cpu_families():
    """The registered families whose code runs on the CPU (GateAdapter.cpu), in registry order."""
    return [f for f, a in ADAPTERS.items() if a.cpu]


def get_adapter(family):
    """The registered adapter of `family`; ValueError naming the known families otherwise."""
    if family not in ADAPTERS:
        raise ValueError(f"no gate adapter for family '{family}'; known: {sorted(ADAPTERS)}")
    return ADAPTERS[family]


def layer_index(name):
    """Layer index read from a module name: the first all-digit component ("model.layers.3.attn" -> 3);
    None when the name has none."""
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return None


def find_layers(model, adapters=None):
    """[(name, module, adapter)] for every submodule of `model` that a registered adapter (or one of
    `adapters`: GateAdapters or family names) reads, in module order. Raises ValueError when none
    matches, naming the model's class and the known families."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    if adapters is None:
        chosen = list(ADAPTERS.values())
    else:
        if isinstance(adapters, (str, GateAdapter)):        # one family or adapter, not its letters
            adapters = [adapters]
        try:
            adapters = list(adapters)
        except TypeError:
            raise TypeError(f"adapters must be None, a family name, a GateAdapter or a list of them; got "
                            f"{type(adapters).__name__}") from None
        bad = next((a for a in adapters if not isinstance(a, (str, GateAdapter))), None)
        if bad is not None or not adapters:
            raise TypeError("adapters must be None, a family name, a GateAdapter or a non-empty list of them; got "
                            + ("an empty list" if bad is None else f"{bad!r} ({type(bad).__name__}) in it"))
        chosen = [get_adapter(a) if isinstance(a, str) else a for a in adapters]
    out = []
    for name, m in model.named_modules():
        hits = [a for a in chosen if a.matches(m)]
        if hits:
            out.append((name, m, hits[0]))
    if not out:
        fams = [a.family for a in chosen]
        raise ValueError(f"model {type(model).__name__} has no layer of a known gated family (looked for "
                         f"{fams}); register a GateAdapter for its layers (adapters.register_adapter)")
    return out


# ----------------------------------------------------------------------------- capture

@dataclass
class Capture:
    """Log-decays read in one forward pass.

    decays: {name: (B, T, H) or (B, T, H, K) float32 CPU tensor, entries <= 0}; a layer called
        more than once per forward keeps every call, the k-th extra one as "name#k".
    family, layer: {name: family key}, {name: layer index from the module name (None if absent)}.
    """
    decays: dict = field(default_factory=dict)
    family: dict = field(default_factory=dict)
    layer: dict = field(default_factory=dict)

    def per_head(self, name):
        """(B, T, H) trace of layer `name`: per-channel decays averaged over channels (the log
        geometric-mean decay; see the module docstring for what the laws mean for it)."""
        lg = self.decays[name]
        return lg.mean(-1) if lg.dim() == 4 else lg


def _hidden(args, kwargs):
    """The hidden states a layer was called with: first positional tensor or a known keyword."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    for k in ("hidden_states", "x", "hidden", "input"):
        if isinstance(kwargs.get(k), torch.Tensor):
            return kwargs[k]
    raise ValueError("could not find the hidden states among the layer's arguments")


def check_log_decay(name, lg, B, T, H, per_channel=False):
    """Raise ValueError unless lg is (B, T, H) (or (B, T, H, K) when per_channel) with finite entries <= 0.
    A (B, H, T) layout is named as such (told apart by the layer's head count; when T == H the two
    layouts have the same shape and cannot be told apart: capture with T != H to check an adapter)."""
    want = 4 if per_channel else 3
    if not isinstance(lg, torch.Tensor):
        raise ValueError(f"{name}: log-decay must be a tensor; got {type(lg).__name__}")
    if lg.dim() != want:
        raise ValueError(f"{name}: log-decay must be {'(B, T, H, K)' if per_channel else '(B, T, H)'}; "
                         f"got shape {tuple(lg.shape)}")
    if tuple(lg.shape[:3]) != (B, T, H):
        if tuple(lg.shape[:3]) == (B, H, T):
            raise ValueError(f"{name}: log-decay is laid out (B, H, T) = {tuple(lg.shape[:3])}, not (B, T, H) = "
                             f"{(B, T, H)} (the layer has {H} heads and the input {T} tokens); transpose it")
        raise ValueError(f"{name}: log-decay has shape {tuple(lg.shape)}, expected (B, T, H) = {(B, T, H)} "
                         f"(the layer has {H} heads)")
    if not torch.isfinite(lg).all():
        raise ValueError(f"{name}: log-decay has NaN or infinite entries")
    if (lg > 0).any():
        raise ValueError(f"{name}: log-decay has positive entries (max {lg.max().item():.4g}): these are not "
                         f"log-decays (gate values or logits?)")


class _Enough(Exception):
    """Raised once the last layer a capture needs has run: the rest of the forward pass is not needed."""


def capture_log_decays(model, *inputs, adapters=None, names_filter=None, cpu_fallbacks=None, upto=None, **kwargs):
    """Run model(*inputs, **kwargs) once under no_grad and read the log-decay of every gated layer.

    adapters: None (every registered adapter), or a list of GateAdapters / family names.
    names_filter: None, a list of exact layer names, or a callable name -> bool; a filter that
        matches no gated layer raises ValueError.
    cpu_fallbacks: run the GPU-only ops of the model's code by their PyTorch references (models/fallbacks.py);
        None: when the model's parameters are on the CPU. A family whose kernels are Triton-only
        (GateAdapter.cpu False) is refused there with a ValueError naming it.
    Returns a Capture. Hooks are removed even if the forward raises. Raises ValueError when the model
    has no layer of a known family, a layer's decay has the wrong layout or is not a log-decay, or
    a selected layer is never called.
    """
    if not (cpu_fallbacks is None or isinstance(cpu_fallbacks, bool)):
        raise TypeError(f"cpu_fallbacks must be None, True or False; got {cpu_fallbacks!r}")
    if names_filter is not None and not (callable(names_filter) or isinstance(names_filter, str) or (
            isinstance(names_filter, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in names_filter))):
        raise TypeError(f"names_filter must be None, a layer name, a list of names or a callable name -> bool; got "
                        f"{type(names_filter).__name__} {names_filter!r}")
    layers = find_layers(model, adapters)
    if names_filter is not None:
        names = [n for n, _, _ in layers]
        if callable(names_filter):
            layers = [t for t in layers if names_filter(t[0])]
        else:
            wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
            unknown = [w for w in wanted if w not in names]
            if unknown:
                raise ValueError(f"names_filter: {unknown} are not gated layers; the model has {names[:4]}...")
            layers = [t for t in layers if t[0] in wanted]
        if not layers:
            raise ValueError(f"names_filter matched none of the {len(names)} gated layers ({names[:3]}...)")
    if cpu_fallbacks is None:
        cpu_fallbacks = all(p.device.type == "cpu" for p in model.parameters())
    if cpu_fallbacks:
        slow = sorted({a.family for _, m, a in layers if not fallbacks.runs_on_cpu(m, a)})
        if slow:
            raise ValueError(f"family {', '.join(slow)}: its fused kernels are Triton-only and need a GPU (move the "
                             f"model to CUDA); on the CPU: {', '.join(cpu_families())}")
    cap, handles = Capture(), []

    def make_hook(name, adapter):
        def hook(mod, args, kw):
            x = _hidden(args, kw)
            with torch.no_grad():
                lg = adapter.log_decay(mod, x, kw)
            H = adapter.num_heads(mod)
            check_log_decay(name, lg, x.shape[0], x.shape[1], H, adapter.per_channel)
            key, k = name, 0
            while key in cap.decays:                     # a second call of the same layer: keep both
                k += 1
                key = f"{name}#{k}"
            cap.decays[key] = lg.detach().float().cpu()
            cap.family[key] = adapter.family
            cap.layer[key] = layer_index(name)
        return hook

    def enough(mod, args, out):
        raise _Enough()

    try:
        for name, m, a in layers:
            handles.append(m.register_forward_pre_hook(make_hook(name, a), with_kwargs=True))
        if upto is not None:
            last = [m for n, m, _ in layers if n == upto]
            if not last:
                raise ValueError(f"upto: {upto!r} is not a selected gated layer")
            handles.append(last[0].register_forward_hook(enough))
        with torch.no_grad(), (fallbacks.attention_ops(layers, cpu=True) if cpu_fallbacks else
                               contextlib.nullcontext()):
            model(*inputs, **kwargs)
    except _Enough:
        pass
    finally:
        for h in handles:
            h.remove()
    missing = [n for n, _, _ in layers if n not in cap.decays]
    if missing:
        raise ValueError(f"gated layers {missing[:4]} were not called in the forward pass")
    return cap


# ----------------------------------------------------------------------------- the families

def _logsigmoid_of(sub):
    return lambda layer, x, kw: F.logsigmoid(getattr(layer, sub)(x).float())


def _ours(layer, x, kw):
    return layer.log_fgate(x)                                           # (B, T, H) float32


def _official_fox(layer, x, kw):
    """Official FoX (zhixuan-lin/forgetting-transformer) ForgettingAttentionLayer, every fgate_type:
    "full": logsigmoid(fgate_proj(x)); "bias_only" / "fixed": logsigmoid(fgate_bias) for every token
    (a learned / fixed constant: a lattice law per head); "none": zero (no forgetting)."""
    B, T, _ = x.shape
    kind = layer.fgate_type
    if kind == "full":
        return F.logsigmoid(layer.fgate_proj(x).float())                 # (B, T, H)
    if kind in ("bias_only", "fixed"):
        return F.logsigmoid(layer.fgate_bias.float()).expand(B, T, -1)   # (B, T, H)
    if kind == "none":
        return x.new_zeros(B, T, layer.num_heads, dtype=torch.float32)
    raise ValueError(f"official FoX layer has unknown fgate_type {kind!r}")


def _gla(layer, x, kw):
    """fla GatedLinearAttention: logsigmoid(gk_proj(x)) / gate_logit_normalizer per key channel
    (clamped below at clamp_min when set), kv groups repeated to the query heads: (B, T, H, K)."""
    B, T, _ = x.shape
    gk = layer.gk_proj(x).view(B, T, -1, layer.head_k_dim)                 # (B, T, H_kv, K)
    if layer.num_kv_groups > 1:
        gk = gk.repeat_interleave(layer.num_kv_groups, dim=2)             # (B, T, H, K)
    lg = F.logsigmoid(gk.float()) / layer.gate_logit_normalizer
    if layer.clamp_min is not None:
        lg = lg.clamp_min(layer.clamp_min)
    return lg


def _hgrn(layer, x, kw):
    """fla HGRN: logsigmoid(f) per channel, raised to the layer's lower bound lb (a model parameter
    passed in the call; not for layer 0): log(lb + (1 - lb) sigmoid(f)). One "head" of C channels."""
    f = layer.f_proj(x)
    if getattr(layer, "use_short_conv", False):
        f, _ = layer.f_conv1d(x=f)
    lg = F.logsigmoid(f.float())
    lb = kw.get("lower_bound")
    if lb is not None and layer.layer_idx > 0:
        lg = torch.logaddexp(lb.float().log(), torch.log1p(-lb.float()) + lg)
    return lg.unsqueeze(2)                                               # (B, T, 1, C)


def _gated_deltanet(layer, x, kw):
    """fla GatedDeltaNet: -exp(A_log) * softplus(a_proj(x) + dt_bias) per value head (B, T, HV)."""
    a = layer.a_proj(x).float() + layer.dt_bias.float()
    return -layer.A_log.float().exp() * F.softplus(a)


def _mamba2(layer, x, kw):
    """Mamba-2 (fla / transformers / official FoX repository): dt = clamp(softplus(dt_raw + dt_bias), dt_limit)
    with dt_raw the last num_heads columns of in_proj(x); log-decay A dt with A = -exp(A_log) (B, T, H). dt is
    formed in the projection's dtype as the layers' PyTorch paths form it (bfloat16 under autocast), A in float32."""
    H, proj = layer.num_heads, layer.in_proj
    if type(proj) is torch.nn.Linear:                   # only the dt rows: in_proj is the layer's largest matmul
        dt = F.linear(x, proj.weight[-H:], None if proj.bias is None else proj.bias[-H:])
    else:
        dt = proj(x)[..., -H:]
    dt = F.softplus(dt + layer.dt_bias)
    lo, hi = getattr(layer, "dt_limit", getattr(layer, "time_step_limit", (0.0, float("inf"))))
    dt = dt.clamp(lo, hi)
    return -layer.A_log.float().exp() * dt


def _kda(layer, x, kw):
    """fla KDA (Kimi Delta Attention), per key channel, as fla.ops.kda.gate forms it in the kernel:
    g = -exp(A_log_h) * softplus(f_proj(x) + dt_bias), or with lower_bound set
    g = lower_bound * sigmoid(exp(A_log_h) * (f_proj(x) + dt_bias)) (in [lower_bound, 0)): (B, T, HV, K)."""
    B, T, _ = x.shape
    g = layer.f_proj(x).float().view(B, T, -1, layer.head_k_dim)
    g = g + layer.dt_bias.float().view(-1, layer.head_k_dim)
    A = layer.A_log.float().exp().view(-1, 1)
    if getattr(layer, "lower_bound", None) is not None:
        return layer.lower_bound * torch.sigmoid(A * g)
    return -A * F.softplus(g)


def _torch_rnn(layer, x, kw):
    """The "torch-lstm" and "torch-gru" families: (B, T, num_layers * hidden) float32 log f (log z for a GRU) of a
    batch_first unidirectional nn.LSTM / nn.GRU, layer l's units at columns [l * hidden, (l + 1) * hidden). The
    adapter path sees the input and the call's keywords only: the initial state is kw["hx"] or zeros (a
    positional hx is not visible here; lstm_gates.capture_rnn_gates reads every call exactly, in either layout,
    and bidirectional modules)."""
    what = type(layer).__name__
    if not layer.batch_first:
        raise ValueError(f"nn.{what} with batch_first=False: the adapter path reads (B, T, d) inputs; use "
                         "foxwindow.models.lstm_gates.capture_rnn_gates, which reads either layout")
    if not torch.is_floating_point(x):
        raise ValueError(f"nn.{what} reads float features (B, T, input_size {layer.input_size}); got {x.dtype} of "
                         f"shape {tuple(x.shape)}: token ids go through a model's embedding first (pass the model "
                         "that holds both)")
    if x.dim() != 3:
        raise ValueError(f"unbatched nn.{what} input: use foxwindow.models.lstm_gates.capture_rnn_gates")
    if layer.bidirectional:
        raise ValueError(f"bidirectional nn.{what}: its backward direction's windows look forward, so its units "
                         "cannot sit beside the forward ones in one (B, T, H) trace; use "
                         "foxwindow.models.lstm_gates.capture_rnn_gates (each direction its own layer)")
    res, _ = lstm_gates.rnn_log_gate(layer, x, kw.get("hx"), None, None)
    return torch.cat([lg for _, _, lg in res], dim=-1)


def retnet_log_decays(num_heads):
    """RetNet's fixed per-head decays: log(1 - 2^(-5 - h)), h = 0..H-1, float32 (H,)."""
    return torch.log1p(-torch.pow(2.0, -5.0 - torch.arange(num_heads, dtype=torch.float32)))


def _retnet(layer, x, kw):
    B, T, _ = x.shape
    return retnet_log_decays(layer.num_heads).to(x.device).expand(B, T, -1)


_SCALAR = "scalar gate per head and token: the laws apply to each head's trace as stated"

for _a in (
    GateAdapter("foxwindow", ("foxwindow.models.fox.ForgettingAttention",), _ours, lambda m: m.num_heads,
                kind="softmax", gate_module="f_proj", note=_SCALAR,
                attention_op=("foxwindow.models.fox", "forgetting_attention")),
    GateAdapter("fox-official", ("modeling_forgetting_transformer.ForgettingAttentionLayer",), _official_fox,
                lambda m: m.num_heads, kind="softmax", gate_module="fgate_proj",
                note=_SCALAR + "; fgate_type 'bias_only'/'fixed' are constant per head: a lattice law, "
                     "W = floor(L/m) exactly (gates.ConstantGate)",
                packages=("forgetting_transformer",), model_types=("forgetting_transformer-project_fox",),
                attention_op=("forgetting_transformer.model.forgetting_transformer.modeling_forgetting_transformer",
                              "forgetting_attention")),
    GateAdapter("fla-fox", ("fla.layers.forgetting_attn.ForgettingAttention",), _logsigmoid_of("f_proj"),
                lambda m: m.num_heads, kind="softmax", gate_module="f_proj", note=_SCALAR,
                packages=("fla",), model_types=("forgetting_transformer",),
                attention_op=("fla.layers.forgetting_attn", "parallel_forgetting_attn")),
    GateAdapter("fla-gla", ("fla.layers.gla.GatedLinearAttention",), _gla, lambda m: m.num_heads,
                per_channel=True, cpu=False, packages=("fla",), model_types=("gla",),
                note="per key channel: each channel's trace obeys the laws; the per-head trace is the channel "
                     "mean of log-decays (log geometric-mean decay), whose window is no single channel's"),
    GateAdapter("fla-hgrn", ("fla.layers.hgrn.HGRNAttention",), _hgrn, lambda m: 1, per_channel=True,
                cpu=False, packages=("fla",), model_types=("hgrn",),
                note="per hidden channel, with the layer's lower bound lb: X <= -log lb, so every channel "
                     "forgets at most as fast as its bound allows; per channel the laws apply as stated"),
    GateAdapter("fla-gated-deltanet", ("fla.layers.gated_deltanet.GatedDeltaNet",), _gated_deltanet,
                lambda m: m.num_v_heads, cpu=False, packages=("fla",), model_types=("gated_deltanet",),
                delta_rule=True,
                note=_SCALAR + " (the decay of the state before the delta-rule update); " + DELTA_RULE_NOTE),
    GateAdapter("fla-kda", ("fla.layers.kda.KimiDeltaAttention",), _kda, lambda m: m.num_v_heads, per_channel=True,
                cpu=False, packages=("fla",), model_types=("kda",), delta_rule=True,
                note="per key channel (g = -exp(A_log) softplus(f_proj(x) + dt_bias)); " + DELTA_RULE_NOTE),
    GateAdapter("mamba2", ("fla.layers.mamba2.Mamba2", "modeling_mamba2.Mamba2Mixer"), _mamba2,
                lambda m: m.num_heads, packages=("fla",), model_types=("mamba2", "mamba2-project_fox"),
                note=_SCALAR + " (X = exp(A_log) dt: the discretised SSM decay)"),
    GateAdapter("fla-retnet", ("fla.layers.multiscale_retention.MultiScaleRetention",), _retnet,
                lambda m: m.num_heads, kind="constant", cpu=False, packages=("fla",), model_types=("retnet",),
                note="constant decay per head: a lattice law, W = floor(L/m) exactly, Var W = 0 "
                     "(gates.ConstantGate(m)); the renewal variance law does not apply"),
    GateAdapter("torch-lstm", ("torch.nn.modules.rnn.LSTM",), _torch_rnn, lambda m: m.num_layers * m.hidden_size,
                note="per unit (a head is one LSTM unit, X = -log f); layers side by side along H; batch_first and "
                     "unidirectional only, initial state by keyword or zeros "
                     "(foxwindow.models.lstm_gates.capture_rnn_gates reads every call, bidirectional modules too)"),
    GateAdapter("torch-gru", ("torch.nn.modules.rnn.GRU",), _torch_rnn, lambda m: m.num_layers * m.hidden_size,
                note="per unit (a head is one GRU unit, X = -log z: the update gate keeps z h_{t-1}); layers side by "
                     "side along H; batch_first and unidirectional only "
                     "(foxwindow.models.lstm_gates.capture_rnn_gates reads bidirectional modules)"),
):
    register_adapter(_a)


def family_for_model_type(model_type):
    """Registered adapters whose model_types include `model_type` (a Hugging Face config.model_type)."""
    return [a for a in ADAPTERS.values() if model_type in a.model_types]


def import_family_packages(model_type):
    """Import the packages that define `model_type`'s layers (they register their Auto classes on import).
    Returns the names imported. Raises ImportError with the pip command when a needed one is missing."""
    fams = family_for_model_type(model_type)
    done, missing = [], []
    for a in fams:
        for p in a.packages:
            if p in done:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    importlib.import_module(p)
                done.append(p)
            except ImportError:
                missing.append(p)
    if fams and not done:
        hint = {"fla": "pip install 'foxwindow[fla]' (flash-linear-attention 0.6.0)",
                "forgetting_transformer": "install the official FoX package "
                                          "(github.com/zhixuan-lin/forgetting-transformer)"}
        raise ImportError(f"model type '{model_type}' needs {' or '.join(missing)}: "
                          + "; ".join(hint.get(p, f"pip install {p}") for p in missing))
    return done
