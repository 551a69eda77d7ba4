"""The model: BitLinear, the FoX attention layer, MLP, Block, one byte-level LM skeleton, FoXLM and checkpoints.

    ForgettingAttention(config, attention_op=None)
                                       the FoX layer: x (B, T, hidden_size) -> (B, T, hidden_size), with the
                                       (B, T, H) log gates readable and patchable at `hook_log_fgate`; its
                                       attention op is an argument (default fox_attention.forgetting_attention;
                                       use_attention_op(model, op) sets it for a whole model inside a block);
                                       step / init_state(horizon): the recurrent (KV-cache) form, with optional
                                       per-head KV horizons
    LMConfig, LM                       the decoder-only LM every model here shares: byte embeddings (tied to
                                       the output), pre-norm RMSNorm blocks with a GELU MLP, no positional
                                       embedding; the attention layer of each block is given by the caller;
                                       LM.step / LM.init_states(horizons): token-by-token decoding
    FoXConfig, FoXLM                   the LM with ForgettingAttention layers (attention_kinds.py puts any
                                       registered attention kind into the same LM)
    save_model, load_checkpoint             FoXLM checkpoints (config + fp16 weights + JSON metadata)

Sizes have one name each: d_model (width), n_layers, n_heads. The layer keeps the config interface it was
specified with (hidden_size = d_model, num_heads = n_heads); FoXConfig.layer_config() is the one mapping.
Hook names: blocks.{l}.attn.hook_log_fgate.
"""
import contextlib
import json
import math
import os
import re
import warnings
from dataclasses import asdict, dataclass, fields
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from foxwindow import outputs, safety
from foxwindow.models.attention import (
    forgetting_attention,
    forgetting_attention_reference,
    forgetting_attention_step,
    init_kv_cache,
)

__all__ = ["HookPoint", "BitLinear", "fgate_bias_init", "ForgettingAttention", "use_attention_op", "LMConfig", "MLP",
           "Block", "LM", "FoXConfig", "FoXLM", "CKPT_FORMAT", "SHIPPED_CHECKPOINT", "shipped_checkpoint",
           "save_model", "load_weights_only", "load_checkpoint"]

# ----------------------------------------------------------------------------- BitLinear

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


# ----------------------------------------------------------------------------- the FoX layer

def fgate_bias_init(num_heads, init):
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

    def __init__(self, config, attention_op=None):
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
            self.f_proj._keep_init = True      # an LM's generic init must not reset the gate biases
            with torch.no_grad():
                # small input weights: gates start near the bias-defined rates, then learn
                nn.init.normal_(self.f_proj.weight, std=0.1 / math.sqrt(hidden))
                self.f_proj.bias.copy_(fgate_bias_init(heads, getattr(config, "fgate_bias_init", "spread")))
        self.hook_log_fgate = HookPoint()
        # the attention op: None is forgetting_attention; any callable with its signature
        # op(q, k, v, log_fgate, *, sm_scale, causal) -> (B, T, H, D), e.g. a pruned op (use_attention_op)
        self.attention_op = attention_op

    def log_fgate(self, x):
        """(B, T, hidden) -> (B, T, H) float32 log forget gates (zeros when the gate is fixed)."""
        B, T, _ = x.shape
        if self.fixed_gate:
            return x.new_zeros(B, T, self.num_heads, dtype=torch.float32)
        return F.logsigmoid(self.f_proj(x).float())

    def forward(self, x):
        """x: (B, T, hidden_size) -> (B, T, hidden_size)."""
        if x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"x must be (B, T, {self.hidden_size}); got {tuple(x.shape)}")
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim)   # (B, T, H, D)
        k = self.k_proj(x).view(B, T, self.num_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.num_heads, self.head_dim)
        lg = self.hook_log_fgate(self.log_fgate(x))                     # (B, T, H) float32
        causal = self.mode == "decoder"
        if self.attention_op is not None:
            o = self.attention_op(q, k, v, lg, sm_scale=self.scale, causal=causal)
        elif self.training and self.dropout_p > 0:
            # the fused kernel has no attention dropout: the reference path applies it
            o = forgetting_attention_reference(q, k, v, lg, sm_scale=self.scale, causal=causal, chunk=128,
                                               dropout_p=self.dropout_p)
        else:
            o = forgetting_attention(q, k, v, lg, sm_scale=self.scale, causal=causal)
        return self.out_proj(o.reshape(B, T, self.total_dim))

    def init_state(self, horizon=None):
        """Empty KV cache for step (decoder mode). horizon: None (every key) or (H,) ints >= 0, the keys each
        head keeps (distance <= horizon[h]; the cache holds max(horizon) + 1 entries)."""
        if self.mode != "decoder":
            raise ValueError("recurrent decoding needs a causal (decoder mode) ForgettingAttention")
        return init_kv_cache(horizon)

    def step(self, x, state):
        """One position x (B, hidden_size) -> (B, hidden_size), state: the recurrent (KV-cache) form of forward."""
        B = x.shape[0]
        xin = x[:, None]                                                 # (B, 1, hidden)
        q, k, v = (p(xin).view(B, self.num_heads, self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj))
        lg = self.hook_log_fgate(self.log_fgate(xin))[:, 0]              # (B, H)
        o, state = forgetting_attention_step(q, k, v, lg, state, sm_scale=self.scale)
        return self.out_proj(o.reshape(B, self.total_dim)), state


def use_attention_op(model, op):
    """Context manager: every ForgettingAttention of `model` attends with `op` (signature of
    forgetting_attention; None: the default op) inside the block, and with its own op again after it.
    The op is the layer's `attention_op` argument, set on the model given and nowhere else."""
    @contextlib.contextmanager
    def ctx():
        layers = [m for m in model.modules() if isinstance(m, ForgettingAttention)]
        if not layers:
            raise ValueError(f"{type(model).__name__} has no ForgettingAttention layer")
        old = [m.attention_op for m in layers]
        for m in layers:
            m.attention_op = op
        try:
            yield model
        finally:
            for m, o in zip(layers, old):
                m.attention_op = o
    return ctx()



# ----------------------------------------------------------------------------- the LM skeleton

@dataclass
class LMConfig:
    """Sizes of the byte-level decoder-only LM. No positional embedding: attention carries position."""
    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    context: int = 1024          # training context; the model itself accepts any length
    use_bitnet: bool = False     # BitLinear (ternary) projections in attention and MLP

    def __post_init__(self):
        for n in ("vocab_size", "d_model", "n_layers", "n_heads", "mlp_ratio", "context"):
            val = getattr(self, n)
            if not (isinstance(val, int) and not isinstance(val, bool) and val > 0):
                raise ValueError(f"{type(self).__name__}.{n} must be a positive int; got {val!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout!r}")


class MLP(nn.Module):
    """GELU MLP: (..., d_model) -> (..., d_model) through mlp_ratio * d_model hidden units."""

    def __init__(self, d_model, mlp_ratio, dropout=0.0, use_bitnet=False):
        super().__init__()
        lin = BitLinear if use_bitnet else nn.Linear
        self.fc = lin(d_model, mlp_ratio * d_model, bias=False)
        self.proj = lin(mlp_ratio * d_model, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm block around an attention layer `attn` (x (B, T, d_model) -> the same shape)."""

    def __init__(self, cfg, attn):
        super().__init__()
        self.ln1 = nn.RMSNorm(cfg.d_model)
        self.attn = attn
        self.ln2 = nn.RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg.d_model, cfg.mlp_ratio, cfg.dropout, cfg.use_bitnet)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def step(self, x, state):
        """One position x (B, d_model) through an attention layer with a recurrent form -> (x, state)."""
        a, state = self.attn.step(self.ln1(x), state)
        x = x + a
        return x + self.mlp(self.ln2(x)), state


class LM(nn.Module):
    """tokens (B, T) int64 in [0, vocab) -> logits (B, T, vocab) float32, around the attention layers
    make_attention(layer index) -> nn.Module (x (B, T, d_model) -> the same shape).

    Initialisation (GPT-2): weights N(0, 0.02), residual output projections scaled by 1/sqrt(2 n_layers);
    a module with `_keep_init = True` keeps its own initialisation (the forget-gate projections, whose
    biases set the starting forget rates). Every HookPoint gets its module name.
    """

    def __init__(self, cfg: LMConfig, make_attention):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg, make_attention(li)) for li in range(cfg.n_layers)])
        self.ln_f = nn.RMSNorm(cfg.d_model)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("out_proj.weight") or n.endswith("mlp.proj.weight"):
                # GPT-2 residual scaling keeps the residual stream's variance flat with depth
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layers))
        for name, m in self.named_modules():
            if isinstance(m, HookPoint):
                m.name = name

    @staticmethod
    def _init(m):
        if getattr(m, "_keep_init", False):
            return
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def _check_tokens(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a (B, T) int64 tensor; got {getattr(tokens, 'shape', None)} "
                             f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
        if tokens.numel() == 0:
            raise ValueError("tokens is empty")
        if tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.cfg.vocab_size})")

    def embed(self, tokens):
        """(B, T) int64 -> input embeddings (B, T, d_model); reach.py differentiates with respect to these."""
        self._check_tokens(tokens)
        return self.wte(tokens)

    def forward_embeddings(self, x):
        """Input embeddings (B, T, d_model) -> final hidden states (B, T, d_model), before ln_f."""
        x = self.drop(x)
        for blk in self.blocks:
            x = blk(x)
        return x

    def head(self, h, targets=None):
        """Hidden states (B, T, d_model) -> logits (B, T, V) float32 (tied embeddings), or (logits, mean
        cross-entropy in nats) when targets (B, T) int64 are given."""
        logits = (self.ln_f(h) @ self.wte.weight.t()).float()
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def forward(self, tokens, targets=None):
        """tokens (B, T) int64; targets (B, T) int64 or None. Returns logits (B, T, V) float32, or
        (logits, mean cross-entropy in nats) when targets are given."""
        return self.head(self.forward_embeddings(self.embed(tokens)), targets)

    def init_states(self, horizons=None):
        """Empty recurrent states of every layer for step. horizons: None, or one per layer (e.g. (n_layers, H)
        ints: KV-cache horizons per head, for layers whose init_state takes a horizon)."""
        if horizons is None:
            return [blk.attn.init_state() for blk in self.blocks]
        if len(horizons) != len(self.blocks):
            raise ValueError(f"horizons must hold one entry per layer ({len(self.blocks)}); got {len(horizons)}")
        return [blk.attn.init_state(horizon=h) for blk, h in zip(self.blocks, horizons)]

    @torch.no_grad()
    def step(self, token, states=None):
        """Recurrent decoding, one position: token (B,) int64, states from the previous call (None at the
        start). Returns (logits (B, V) float32, states). Only for attention layers with a recurrent form
        (`init_state` and `step`); ValueError otherwise."""
        plain = [type(b.attn).__name__ for b in self.blocks if not hasattr(b.attn, "init_state")]
        if plain:
            raise ValueError(f"{plain[0]} has no recurrent form (step)")
        self._check_tokens(token[:, None])
        if states is None:
            states = self.init_states()
        x = self.wte(token)                                              # (B, d_model)
        new = []
        for blk, st in zip(self.blocks, states):
            x, st = blk.step(x, st)
            new.append(st)
        return self.head(x[:, None])[:, 0], new


# ----------------------------------------------------------------------------- FoXLM

@dataclass
class FoXConfig(LMConfig):
    """The FoX LM: LMConfig sizes plus the forget gate's options."""
    fixed_gate: bool = False     # baseline: gate = 1, plain causal softmax attention, no positions
    fgate_bias_init: object = "spread"

    def layer_config(self):
        """The ForgettingAttention config of every block (decoder mode)."""
        return SimpleNamespace(hidden_size=self.d_model, num_heads=self.n_heads, dropout=self.dropout,
                               use_bitnet=self.use_bitnet, mode="decoder", fixed_gate=self.fixed_gate,
                               fgate_bias_init=self.fgate_bias_init)


class FoXLM(LM):
    """The LM with a ForgettingAttention layer (decoder mode) in every block.

    Hook names: blocks.{l}.attn.hook_log_fgate, log gates (B, T, H) float32 <= 0.
    """

    def __init__(self, cfg: FoXConfig):
        super().__init__(cfg, lambda li: ForgettingAttention(cfg.layer_config()))


# ----------------------------------------------------------------------------- checkpoints

CKPT_FORMAT = "foxwindow-lm-v1"


# the shipped checkpoint, relative to the repository (installed: <prefix>/share/foxwindow/): the one name every
# command's default uses; outputs.repo_path resolves it from any working directory
SHIPPED_CHECKPOINT = "checkpoints/fox_shakespeare.pt"


def shipped_checkpoint():
    """The shipped checkpoint's absolute path (the source tree's, or the installed copy's)."""
    return outputs.repo_path(SHIPPED_CHECKPOINT)


def save_model(path, model, meta=None, dtype=torch.float16):
    """Save config + weights (cast to `dtype`, fp16 by default to keep files small) + JSON-able meta."""
    meta = {} if meta is None else meta
    # round-trip through JSON: plain types only, so torch.load(weights_only=True) can read it back
    meta = json.loads(json.dumps(meta))
    sd = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous().cpu() for k, v in model.state_dict().items()}
    cfg = asdict(model.cfg)
    torch.save({"format": CKPT_FORMAT, "config": cfg, "state_dict": sd, "meta": meta}, path)


def load_weights_only(path):
    """torch.load(path, weights_only=True) on the CPU: tensors and plain values, no code from the file. Raises
    ValueError with a short reason (no "checkpoint ..." prefix: the caller names the file and what it expected): a
    pickle that names a Python object ("names the Python object posix.system: loading it would run code ..."),
    else "is corrupt or not a torch checkpoint (why)". torch's advice to retry with weights_only=False is not passed
    on, nor its warning about a pickle protocol."""
    try:
        with warnings.catch_warnings():     # torch's note on a foreign pickle protocol: the error below says more
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:                # noqa: BLE001  (corrupt, truncated, foreign: pickle, zip, OS errors)
        text = " ".join(str(exc).split())
        named = re.search(r"GLOBAL ([\w.]+)", text)
        if named:                           # a pickle that names Python objects: loading it would call them
            raise ValueError(f"names the Python object {named.group(1)}: loading it would run code from the file, "
                             "and foxwindow reads weights only (tensors and plain values)") from None
        why = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation|$)", text)
        raise ValueError(f"is corrupt or not a torch checkpoint ({type(exc).__name__}: "
                         f"{(why.group(1) if why else text)[:200]})") from None


def _folder_message(path):
    """What load_checkpoint says of a folder: it reads one file, and which files of the folder could be it."""
    try:
        names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
    except OSError:
        names = []
    pts = [n for n in names if n.endswith(".pt")]
    shown = ", ".join(safety.shown(n) for n in pts[:6]) + (", ..." if len(pts) > 6 else "")
    msg = (f"checkpoint {safety.shown(path)} is a folder; load_checkpoint reads one .pt file written by save_model "
           f"or train.py (such as {os.path.basename(SHIPPED_CHECKPOINT)})")
    msg += f", and this folder holds {shown}: pass one of them" if pts else ", and this folder holds no .pt file"
    if "config.json" in names:              # a Hugging Face style model folder
        msg += "; a folder with config.json is a Hugging Face style model: foxwindow.load_pretrained(folder) reads it"
    return msg


def load_checkpoint(path, device="cpu"):
    """Load a checkpoint written by save_model. Returns (model, meta): the FoXLM in eval mode
    with float32 weights on `device`, and the checkpoint's metadata dict.

    Raises FileNotFoundError if the file is missing; ValueError if path is a folder, not a readable
    checkpoint, lacks fields, has a bad config, or its weights do not match the config.
    """
    if os.path.isdir(path):
        raise ValueError(_folder_message(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        ck = load_weights_only(path)
    except ValueError as exc:
        raise ValueError(f"checkpoint {path} {exc}") from None
    if not isinstance(ck, dict) or ck.get("format") != CKPT_FORMAT:
        raise ValueError(f"checkpoint {path} is not a {CKPT_FORMAT} checkpoint")
    for key in ("config", "state_dict", "meta"):
        if key not in ck:
            raise ValueError(f"checkpoint {path} lacks '{key}'")
        if not isinstance(ck[key], dict):
            raise ValueError(f"checkpoint {path}: its '{key}' is a {type(ck[key]).__name__}, not a dict")
        odd = next((k for k in ck[key] if not isinstance(k, str)), None)
        if odd is not None:
            raise ValueError(f"checkpoint {path}: its '{key}' has a key that is not a string ({odd!r})")
    bad = next((k for k, v in ck["state_dict"].items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise ValueError(f"checkpoint {path}: its weight {safety.shown(bad)!r} is not a tensor")
    known = {f.name for f in fields(FoXConfig)}
    unknown = set(ck["config"]) - known
    if unknown:
        raise ValueError(f"checkpoint {path} config has unknown fields {[safety.shown(u) for u in sorted(unknown)]}")
    try:
        cfg = FoXConfig(**ck["config"])
        if cfg.n_layers > len(ck["state_dict"]):        # (each block has weights: no model of the file's is built)
            raise ValueError(f"n_layers is {cfg.n_layers}, and the file holds {len(ck['state_dict'])} weights")
        with torch.device("meta"):      # names and shapes first: a crafted config allocates nothing
            want = FoXLM(cfg).state_dict()
    except (TypeError, ValueError, RuntimeError) as exc:       # (RuntimeError: sizes past torch's, on meta)
        raise ValueError(f"checkpoint {path} has a bad config: {exc}") from exc
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in ck["state_dict"].items()}
    missing, extra = sorted(set(want) - set(sd)), sorted(set(sd) - set(want))
    if missing or extra:
        raise ValueError(f"checkpoint {path} weights do not match its config: missing {missing[:5]}, "
                         f"unexpected {extra[:5]}")
    for k, v in want.items():
        if sd[k].shape != v.shape:
            raise ValueError(f"checkpoint {path}: {k} has shape {tuple(sd[k].shape)}, config implies {tuple(v.shape)}")
        if sd[k].dtype != v.dtype and not (sd[k].is_floating_point() and v.is_floating_point()):
            raise ValueError(f"checkpoint {path}: {k} is {sd[k].dtype}, the model's is {v.dtype}")
        if sd[k].is_floating_point() and not torch.isfinite(sd[k]).all():
            raise ValueError(f"checkpoint {path}: {k} has non-finite values")
    model = FoXLM(cfg)
    model.load_state_dict(sd)
    return model.to(device).eval(), ck["meta"]


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
