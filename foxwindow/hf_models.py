"""Your model: the per-head window analysis on any Hugging Face style checkpoint of a gated family.

    python forget.py --model DIR_OR_HUB_NAME [--tokenizer T] [--text FILE] [--device cuda] [--dtype bfloat16]
                     [--n-seq 32] [--seq-len 2048] [--batch 4] [--per-channel]

Loads the checkpoint through transformers' Auto classes (importing the family's package first: `fla` for
flash-linear-attention models, `forgetting_transformer` for the official FoX code when its config says so),
tokenises held-out text with the model's own tokenizer (default: the held-out Shakespeare plays that the
shipped model never saw), reads the log-decays of every gated layer in batches through adapters.py, and hands
them to heads.py's per-head analysis (heads.analyse_hf_model: the same table and JSON). Softmax families (FoX)
also get the attention-mass window, read from the q, k the layer hands its attention op; other families have
no attention matrix and the table says so. On the CPU the FoX attention op is replaced by this project's exact
PyTorch reference and fla's fused norms / SwiGLU are switched off; the other fla families' kernels are Triton-
only and need a GPU (said in one line). Every user-facing failure is one line (ModelError).
"""
import contextlib
import importlib
import json
import os
import sys
import warnings
from dataclasses import dataclass

import torch

from foxwindow import adapters, data
from foxwindow import fox_attention as fa


class ModelError(Exception):
    """A problem with the user's model, tokenizer, text or options: reported as one line, exit code 2."""


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# fla configs: fused Triton norms / activations / losses, switched off on the CPU (their PyTorch paths agree)
CPU_CONFIG_OFF = ("fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy")
# families whose every op runs on the CPU here (with the attention op stand-in below); besides these,
# transformers' own layers (its Mamba-2) have PyTorch paths
CPU_FAMILIES = ("foxwindow", "fla-fox", "fox-official")


def _runs_on_cpu(module, adapter):
    return adapter.family in CPU_FAMILIES or type(module).__module__.startswith("transformers.")


@dataclass
class ModelRunConfig:
    """What `analyse_hf_model` reads and how. model: a local directory or a hub name; tokenizer: the same
    by default; text: a UTF-8 file, None for the held-out plays; n_seq sequences of seq_len tokens read
    batch at a time; mass_eps: eps of the decay and attention-mass windows; per_channel: analyse each
    channel of per-channel families (GLA, HGRN) instead of the per-head channel mean."""
    model: str
    tokenizer: str = None
    text: str = None
    device: str = "cpu"
    dtype: str = "float32"
    n_seq: int = 32
    seq_len: int = 2048
    batch: int = 4
    mass_eps: float = 1e-3
    per_channel: bool = False

    def __post_init__(self):
        if not (isinstance(self.model, str) and self.model):
            raise ModelError(f"--model must name a directory or a hub model; got {self.model!r}")
        if self.dtype not in DTYPES:
            raise ModelError(f"--dtype must be one of {sorted(DTYPES)}; got {self.dtype!r}")
        for n in ("n_seq", "seq_len", "batch"):
            v = getattr(self, n)
            if not (isinstance(v, int) and v > 0):
                raise ModelError(f"--{n.replace('_', '-')} must be a positive integer; got {v!r}")
        if self.n_seq < 3:
            raise ModelError(f"--n-seq must be >= 3 (jackknife errors over sequences); got {self.n_seq}")
        if self.text is not None and not os.path.isfile(self.text):
            raise ModelError(f"--text {self.text}: no such file")
        if not (0 < self.mass_eps < 1):
            raise ModelError(f"eps must lie in (0, 1); got {self.mass_eps!r}")


# ----------------------------------------------------------------------------- loading

def _transformers():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tf = importlib.import_module("transformers")
    except ImportError:
        raise ModelError("--model needs transformers: pip install 'foxwindow[models]'") from None
    # our own report is the output: no loading bars or deprecation chatter from the library
    tf.utils.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    return tf


def _local_config(path):
    """config.json of a local checkpoint directory, or None for a hub name. ModelError for a path that is
    not a model directory."""
    looks_local = os.path.exists(path) or path.startswith((".", "/", "~")) or path.count("/") > 1
    if not looks_local:
        return None
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise ModelError(f"--model {path}: no such directory")
    if not os.path.isdir(path):
        raise ModelError(f"--model {path}: a file, not a model directory (a Hugging Face checkpoint folder "
                         f"with config.json; this project's own .pt checkpoints go to --checkpoint)")
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg):
        raise ModelError(f"--model {path}: not a model directory (no config.json)")
    try:
        with open(cfg) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"--model {path}: config.json is unreadable ({exc})") from None


def _import_packages(cfg):
    """Import the family package named by the config (the official FoX code when the config has its
    fgate_type; fla for the model types it defines). ModelError naming what is missing."""
    mt = (cfg or {}).get("model_type")
    if cfg and "fgate_type" in cfg:
        try:
            importlib.import_module("forgetting_transformer")
        except ImportError:
            raise ModelError("this checkpoint is the official FoX code's (its config has fgate_type): install the "
                             "forgetting_transformer package (github.com/zhixuan-lin/forgetting-transformer)"
                             ) from None
        return ["forgetting_transformer"]
    if mt is not None and mt in _transformers().models.auto.configuration_auto.CONFIG_MAPPING_NAMES:
        # transformers' own model (e.g. mamba2): importing fla would re-register the type to fla's port
        return []
    if mt is None:
        # a hub name: import what is installed so its model type can resolve
        done = []
        for p in ("fla",):
            with contextlib.suppress(ImportError), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(p)
                done.append(p)
        return done
    try:
        return adapters.import_family_packages(mt)
    except ImportError as exc:
        raise ModelError(str(exc)) from None


def load_model(name, device="cpu", dtype="float32"):
    """Load a causal LM through transformers' Auto classes. Returns (model in eval mode on `device`,
    its config). On the CPU, fla's fused Triton norms / SwiGLU / losses are switched off in the config of
    the FoX families (the other fla families need a GPU anyway). A checkpoint missing any of the model's
    weights is refused (they would stay at their random init).
    Raises ModelError (one line) for a missing path, a directory that is not a model, a missing package,
    or a checkpoint transformers cannot load."""
    tf = _transformers()
    cfg_json = _local_config(name)
    _import_packages(cfg_json)
    path = os.path.expanduser(name)
    config_cls, model_cls = tf.AutoConfig, tf.AutoModelForCausalLM
    mt = (cfg_json or {}).get("model_type")
    cfg_names, lm_names = tf.models.auto.configuration_auto.CONFIG_MAPPING_NAMES, \
        tf.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if mt in cfg_names and mt in lm_names:
        # transformers' own classes by name: a package imported earlier (fla) may have re-registered the type
        config_cls, model_cls = getattr(tf, cfg_names[mt]), getattr(tf, lm_names[mt])
    try:
        config = config_cls.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"--model {name}: transformers cannot read its config ({msg})") from None
    fams = adapters.family_for_model_type(getattr(config, "model_type", None))
    if not str(device).startswith("cuda") and fams and all(a.family in CPU_FAMILIES for a in fams):
        # only where the switch keeps the weights' names (fla FoX: fused and plain RMSNorm alike)
        for k in CPU_CONFIG_OFF:
            if getattr(config, k, False):
                setattr(config, k, False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, info = model_cls.from_pretrained(path, config=config, dtype=DTYPES[dtype],
                                                    output_loading_info=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"--model {name}: cannot load the weights ({msg})") from None
    # a weight left at its random init would give gates that look real: refuse instead
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ModelError(f"--model {name}: {len(missing)} weights of {type(model).__name__} are not in the checkpoint "
                         f"(e.g. {missing[0]}); it was saved by another implementation of this model type")
    try:
        model = model.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise ModelError(f"--device {device}: {str(exc).splitlines()[0]}") from None
    return model.eval(), config


def load_tokenizer(name):
    """The tokenizer of checkpoint (or tokenizer directory / hub name) `name`; ModelError if absent."""
    tf = _transformers()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tf.AutoTokenizer.from_pretrained(os.path.expanduser(name))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"no tokenizer at {name} ({msg}); pass --tokenizer DIR_OR_NAME") from None


# ----------------------------------------------------------------------------- text

def heldout_ids(tokenizer, n_seq, seq_len, text=None, vocab_size=None):
    """Token windows of held-out text: each document is tokenised whole (no special tokens) and cut into
    non-overlapping windows of seq_len tokens (never across documents); n_seq of them are taken evenly
    spread, in order. text: a file path, or None for the held-out plays of the shipped model.
    Returns (ids (n_seq, seq_len) int64, spans [{"file", "start", "end"}] in token offsets).
    Raises ModelError if the text is missing or too short, or ids exceed the model's vocab_size."""
    if text is None:
        try:
            docs = [(f, b.decode("utf-8", errors="replace")) for f, b in data.load_split("val")]
        except (FileNotFoundError, OSError) as exc:
            raise ModelError(f"held-out plays unavailable ({exc}); pass --text FILE") from None
    else:
        if not os.path.isfile(text):
            raise ModelError(f"--text {text}: no such file")
        try:
            with open(text, encoding="utf-8") as fh:
                docs = [(os.path.basename(text), fh.read())]
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"--text {text}: not readable as UTF-8 text ({exc})") from None
    toks = {f: tokenizer(t, add_special_tokens=False)["input_ids"] for f, t in docs}
    windows = [(f, s) for f, ids in toks.items() for s in range(0, len(ids) - seq_len + 1, seq_len)]
    if len(windows) < n_seq:
        raise ModelError(f"the text holds {len(windows)} windows of {seq_len} tokens; asked for {n_seq} "
                         f"(lower --n-seq or --seq-len, or pass a longer --text)")
    pick = [windows[round(i * (len(windows) - 1) / max(n_seq - 1, 1))] for i in range(n_seq)]
    ids = torch.tensor([toks[f][s:s + seq_len] for f, s in pick], dtype=torch.long)
    if vocab_size is not None and int(ids.max()) >= vocab_size:
        raise ModelError(f"the tokenizer gives ids up to {int(ids.max())} but the model's vocab has {vocab_size}: "
                         f"not this model's tokenizer (pass --tokenizer)")
    return ids, [{"file": f, "start": s, "end": s + seq_len} for f, s in pick]


# ----------------------------------------------------------------------------- attention op

@torch.no_grad()
def mass_windows_qk(q, k, lg, scale, eps, rows):
    """Attention-mass window of FoX attention from the op's inputs: for query rows `rows` (R,) int64,
    the smallest d with sum_{j=i-d..i} A_ij >= 1 - eps, A = softmax_j(q_i.k_j scale + c_i - c_j) causal.
    q (B, T, H, D), k (B, T, H_kv, D) (GQA: H % H_kv == 0), lg (B, T, H) log gates. Returns (B, R, H) int64.
    Computed head by head in float64 (memory B * R * T per head)."""
    B, T, H, _ = q.shape
    rep = H // k.shape[2]
    c = torch.cumsum(lg.double(), 1)                                            # (B, T, H)
    j = torch.arange(T, device=q.device)
    rows = rows.to(q.device)
    out = []
    for h in range(H):
        qh, kh = q[:, rows, h].double(), k[:, :, h // rep].double()             # (B, R, D), (B, T, D)
        logits = (qh @ kh.transpose(1, 2)) * scale + c[:, rows, h, None] - c[:, None, :, h]   # (B, R, T)
        logits = logits.masked_fill(j[None, None, :] > rows[None, :, None], float("-inf"))
        A = torch.softmax(logits, -1)
        suf = A.flip(-1).cumsum(-1).flip(-1)                                     # mass within distance i - j
        jstar = (suf >= 1 - eps).sum(-1) - 1                                    # (B, R)
        out.append(rows[None, :] - jstar)
    return torch.stack(out, -1).cpu()                                           # (B, R, H)


def _fla_reference(q, k, v, g, scale=None, window_size=None, cu_seqlens=None):
    if window_size is not None or cu_seqlens is not None:
        raise ModelError("the CPU stand-in of fla's forgetting attention has no window_size / cu_seqlens; use a GPU")
    return fa.forgetting_attention_reference(q, k, v, g.float(), sm_scale=scale).to(q.dtype)


def _official_reference(q, k, v, log_fgate, *, head_first=False, seq_start=None, sm_scale=None,
                        adaptive_threshold=None):
    if seq_start is not None:
        raise ModelError("the CPU stand-in of the official FoX attention has no padding (seq_start); use a GPU")
    if head_first:                                                              # (B, H, T, D), (B, H, T)
        q, k, v, log_fgate = (t.transpose(1, 2) for t in (q, k, v, log_fgate))
    o = fa.forgetting_attention_reference(q, k, v, log_fgate.float(), sm_scale=sm_scale).to(q.dtype)
    return o.transpose(1, 2) if head_first else o                               # adaptive pruning only skips ~0 terms


def _op_inputs(family, args, kw):
    """(q, k (B, T, H, D), log gates (B, T, H), scale) from an attention op's arguments."""
    names = ("q", "k", "v", "g" if family == "fla-fox" else "log_fgate")
    q, k, _, g = list(args[:4]) + [kw.get(n) for n in names[len(args):]]
    if family == "fla-fox":
        scale = args[4] if len(args) > 4 else kw.get("scale")
    else:
        scale = kw.get("sm_scale")
        if kw.get("head_first"):                                               # official: (B, H, T, ...)
            q, k, g = q.transpose(1, 2), k.transpose(1, 2), g.transpose(1, 2)
    return q, k, g, (q.shape[-1] ** -0.5 if scale is None else scale)


def _swiglu(x, y):
    """SwiGLU silu(x) * y, fla's formula (silu in float32), for its Triton-only op on the CPU."""
    return (torch.nn.functional.silu(x.float()) * y.float()).to(x.dtype)


# (module, name, PyTorch stand-in) patched while a model runs on the CPU, when the module is loaded
CPU_STANDINS = (("fla.modules.mlp", "swiglu", _swiglu),)


@contextlib.contextmanager
def attention_ops(model, mass_eps=None, rows=None, cpu=True):
    """While active: every softmax-family layer's attention op records attention-mass windows
    {layer name: [(B, R, H) int64 per call]} (when mass_eps is given) and, when `cpu`, runs this
    project's exact PyTorch reference in place of a GPU-only kernel (and CPU_STANDINS replace the
    other Triton-only ops). Yields the windows dict."""
    layers = [(n, m, a) for n, m, a in adapters.find_layers(model) if a.kind == "softmax" and a.attention_op]
    windows, current, handles, patched = {}, [None], [], []
    ours = {"fla-fox": _fla_reference, "fox-official": _official_reference}
    try:
        for n, m, a in layers:
            # the op is attributed to the layer running it; outside any layer it records nothing
            handles.append(m.register_forward_pre_hook(lambda mod, args, n=n: current.__setitem__(0, n)))
            handles.append(m.register_forward_hook(lambda mod, args, out: current.__setitem__(0, None)))
        for fam in sorted({a.family for _, _, a in layers}):
            mod_path, sym = adapters.get_adapter(fam).attention_op
            mod = importlib.import_module(mod_path)
            orig = getattr(mod, sym)
            run = ours[fam] if cpu and fam in ours else orig

            def op(*args, _run=run, _fam=fam, **kw):
                if mass_eps is not None and current[0] is not None:
                    q, k, g, scale = _op_inputs(_fam, args, kw)
                    windows.setdefault(current[0], []).append(mass_windows_qk(q, k, g, scale, mass_eps, rows))
                return _run(*args, **kw)

            patched.append((mod, sym, orig))
            setattr(mod, sym, op)
        for mod_path, sym, standin in CPU_STANDINS if cpu else ():
            mod = sys.modules.get(mod_path)
            if mod is not None and hasattr(mod, sym):
                patched.append((mod, sym, getattr(mod, sym)))
                setattr(mod, sym, standin)
        yield windows
    finally:
        for mod, sym, orig in reversed(patched):
            setattr(mod, sym, orig)
        for h in handles:
            h.remove()


# ----------------------------------------------------------------------------- capture + analysis

def capture_batches(model, ids, batch, device, mass_eps=None, rows=None, per_channel=True):
    """Log-decays of every gated layer over ids (S, T), `batch` sequences per forward; per-channel
    decays are kept (S, T, H, K) when per_channel, else reduced to their channel mean batch by batch
    (a GLA model's channels would otherwise need S * T * key_dim floats per layer).
    Returns (decays {name: (S, T, H) or (S, T, H, K) float32}, family {name}, layer {name},
    mass {name: (S, R, H) int64} for softmax families). ModelError when a kernel cannot run here."""
    layers = adapters.find_layers(model)
    cpu = not str(device).startswith("cuda")
    if cpu:
        slow = sorted({a.family for _, m, a in layers if not _runs_on_cpu(m, a)})
        if slow:
            raise ModelError(f"family {', '.join(slow)}: its fused kernels are Triton-only and need a GPU "
                             f"(--device cuda); FoX families and transformers' own Mamba-2 run on the CPU")
    parts, mass_parts, fam, lay = {}, {}, {}, {}
    with attention_ops(model, mass_eps, rows, cpu=cpu) as win:
        for s in range(0, ids.shape[0], batch):
            x = ids[s:s + batch].to(device)
            win.clear()
            try:
                cap = adapters.capture_log_decays(model, x, use_cache=False)
            except RuntimeError as exc:
                if "active drivers" in str(exc) or "CUDA" in str(exc):
                    raise ModelError(f"a kernel of this model needs a GPU ({str(exc).splitlines()[0]}); "
                                     f"run with --device cuda") from None
                raise
            for n, lg in cap.decays.items():
                parts.setdefault(n, []).append(lg if per_channel or lg.dim() == 3 else lg.mean(-1))
            fam.update(cap.family)
            lay.update(cap.layer)
            for n, ws in win.items():
                for k, w in enumerate(ws):
                    mass_parts.setdefault(n if k == 0 else f"{n}#{k}", []).append(w)
    decays = {n: torch.cat(p, 0) for n, p in parts.items()}
    mass = {n: torch.cat(p, 0) for n, p in mass_parts.items() if n in decays}
    return decays, fam, lay, mass


def wants_model(args):
    """True when forget.py should take the --model path: --model given, or --checkpoint naming a directory
    (a Hugging Face style checkpoint; this project's own checkpoints are .pt files), then moved to --model."""
    ck = getattr(args, "checkpoint", None)
    if args.model is None and ck and os.path.isdir(ck):
        args.model, args.checkpoint = ck, None
    return args.model is not None


def analysis_traces(decays, per_channel=False):
    """{name: (S, T, H)} traces to analyse from captured decays: scalar-per-head layers as they are;
    per-channel layers (S, T, H, K) as H*K channel traces (head-major: column h*K + k) when per_channel,
    else as their per-head channel mean (the log geometric-mean decay)."""
    out = {}
    for n, lg in decays.items():
        if lg.dim() == 4:
            out[n] = lg.flatten(2) if per_channel else lg.mean(-1)
        elif lg.dim() == 3:
            out[n] = lg
        else:
            raise ValueError(f"{n}: decays must be (S, T, H) or (S, T, H, K); got {tuple(lg.shape)}")
    return out


def add_arguments(p):
    """The --model family of flags, added to forget.py's parser (a flag the parser already has is left
    as it is, so the two can grow independently)."""
    g = p.add_argument_group("your model (Hugging Face style checkpoints; see hf_models.py)")
    have = set(p._option_string_actions)
    flags = (
        ("--model", dict(default=None, help="checkpoint directory or hub name of a gated model")),
        ("--tokenizer", dict(default=None, help="tokenizer directory or name (default: the model's)")),
        ("--text", dict(default=None, help="UTF-8 text file to read (default: the held-out plays)")),
        ("--dtype", dict(default="float32", choices=sorted(DTYPES), help="weights' dtype")),
        ("--batch", dict(type=int, default=4, help="sequences per forward pass")),
        ("--per-channel", dict(action="store_true",
                               help="per-channel families (GLA, HGRN): analyse each channel, not the per-head mean")),
    )
    for flag, kw in flags:
        if flag not in have:
            g.add_argument(flag, **kw)
    return g
