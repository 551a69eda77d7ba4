"""Your model: the per-head window analysis on any Hugging Face style checkpoint of a gated family.

    python forget.py --model DIR_OR_HUB_NAME [--tokenizer T] [--text FILE] [--device cuda] [--dtype bfloat16]
                     [--n-seq 32] [--seq-len 2048] [--batch 4] [--per-channel] [--adapter MODULE:OBJECT]

Loads the checkpoint (importing the family's package first: `fla` for flash-linear-attention models,
`forgetting_transformer` for the official FoX code when its model type or config says so), tokenises held-out
text with the model's own tokenizer (default: the held-out Shakespeare plays that the shipped model never
saw), reads the log-decays of every gated layer in batches through adapters.py (hf_capture.py), and hands them
to heads.py's per-head analysis (hf_driver.py runs the two: the same table and JSON). Softmax families (FoX)
also get the attention-mass window, read from the q, k the layer hands its attention op; other families have
no attention matrix and the table says so. On the CPU the FoX attention op is replaced by this project's exact
PyTorch reference and the other Triton / CUDA-only ops by the defining code's own PyTorch references
(cpu_standins.py); the other fla families' kernels are Triton-only and need a GPU (said in one line).

Each checkpoint loads with the classes of the library that wrote it (the official FoX package's for its
`*-project_fox` model types, fla's for fla's configs, transformers' for its own), and the loaded network is
checked to be the saved one (every config field read, every weight equal to the file's). A user's GateAdapter
plugs in with --adapter MODULE:OBJECT or a package's `foxwindow.adapters` entry point. Every user-facing
failure is one line (ModelError).
"""
import contextlib
import copy
import importlib
import importlib.util
import inspect
import json
import math
import os
import pickle
import socket
import struct
import sys
import urllib.parse
import warnings
from dataclasses import dataclass
from importlib import metadata

import torch

from foxwindow import outputs, safety, uses
from foxwindow.models import adapters
from foxwindow.training import data

__all__ = ["ModelError", "DTYPES", "CPU_CONFIG_OFF", "ModelRunConfig", "OFFICIAL_SUFFIX", "OFFICIAL_PACKAGE",
           "META_KEYS", "ADAPTER_GROUP", "first_line", "supported", "not_supported", "load_adapter", "load_adapters",
           "load_pretrained", "JSONEscaped", "load_tokenizer", "heldout_ids", "wants_model", "add_arguments"]


class ModelError(Exception):
    """A problem with the user's model, tokenizer, text or options: reported as one line, exit code 2."""


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# fla configs: fused Triton norms / activations / losses, switched off on the CPU (their PyTorch paths agree)
CPU_CONFIG_OFF = ("fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy")
# the families whose every op runs on the CPU here: GateAdapter.cpu (models/fallbacks.py's attention op and
# CPU_STANDINS); besides these, transformers' own layers have PyTorch paths

@dataclass
class ModelRunConfig:
    """What `analyse_hf_model` reads and how. model: a local directory or a hub name; tokenizer: the same
    by default; text: a UTF-8 file, None for the held-out plays; n_seq sequences of seq_len tokens read
    batch at a time; mass_eps: eps of the decay and attention-mass windows; per_channel: analyse each
    channel of per-channel families (GLA, HGRN) instead of the per-head channel mean; adapters: --adapter
    specs ("module:object" or "file.py:object") naming the user's GateAdapters."""
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
    adapters: tuple = ()

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
        # before anything is imported or loaded: no folder that asks to run its own code
        safety.no_remote_code(self.model, "--model")
        if self.tokenizer:
            safety.no_remote_code(self.tokenizer, "--tokenizer")


# official FoX repository (zhixuan-lin/forgetting-transformer): its configs' model types end in this suffix and
# each is registered with transformers' Auto classes by importing forgetting_transformer.model.<base>
OFFICIAL_SUFFIX = "-project_fox"
OFFICIAL_PACKAGE = "forgetting_transformer"
# config.json keys of any model that are bookkeeping, not architecture
META_KEYS = {"architectures", "model_type", "transformers_version", "_name_or_path", "auto_map", "torch_dtype", "dtype",
             "_commit_hash", "_attn_implementation_autoset", "name_or_path"}
ADAPTER_GROUP = "foxwindow.models.adapters"            # package entry points naming a user's GateAdapter(s)


def first_line(exc):
    """The first line of an exception's message (its type's name when it has none); a first line that ends in ':'
    goes on with the next (the reason a validator gives below its heading)."""
    lines = [li.strip() for li in str(exc).strip().splitlines() if li.strip()]
    if not lines:
        return type(exc).__name__
    return " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def supported():
    """One phrase naming the families that --model reads, for "not supported" messages."""
    fams = sorted(a.family for a in adapters.ADAPTERS.values())
    return f"gate adapters exist for: {', '.join(fams)}; add one for another family with --adapter MODULE:OBJECT"


def not_supported(mt):
    return ModelError(f"model type '{mt}' is not supported: no gate adapter reads its layers ({supported()})")


# ----------------------------------------------------------------------------- user adapters

def _adapter_objects(obj, spec, call=True):
    """GateAdapters from what a spec or entry point names: a GateAdapter, a list/tuple of them, or a callable
    (a class or factory) taking no arguments that returns either."""
    if isinstance(obj, adapters.GateAdapter):
        return [obj]
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(a, adapters.GateAdapter) for a in obj):
        return list(obj)
    if call and callable(obj):
        try:
            got = obj()
        except Exception as exc:                      # the user's code: reported in one line
            raise ModelError(f"--adapter {spec}: calling it failed ({type(exc).__name__}: {first_line(exc)})") \
                from None
        return _adapter_objects(got, spec, call=False)
    return _refuse_adapter(obj, spec)


def _refuse_adapter(obj, spec):
    raise ModelError(f"--adapter {spec}: names a {type(obj).__name__}, not a GateAdapter (nor a list of them or "
                     f"a callable returning one); see adapters.GateAdapter")


def load_adapter(spec):
    """Import the user's adapter(s) named by spec, "package.module:OBJECT" or "path/to/file.py:OBJECT" (OBJECT
    may be dotted), and register them (replacing a registered family of the same name). Returns the list
    of GateAdapters. ModelError (one line) for a malformed spec, a module that fails to import, a missing
    object or one that is not a GateAdapter."""
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rsplit(":", 1)):
        raise ModelError(f"--adapter {spec!r}: expected MODULE:OBJECT or FILE.py:OBJECT, e.g. my_gates:RGLRU")
    where, attr = spec.rsplit(":", 1)
    try:
        if where.endswith(".py") or os.sep in where:
            path = os.path.abspath(os.path.expanduser(where))
            if not os.path.isfile(path):
                raise ModelError(f"--adapter {spec}: no such file {path}")
            name = "foxwindow_user_adapter_" + os.path.splitext(os.path.basename(path))[0]
            mspec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(mspec)
            sys.modules[name] = mod
            mspec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(where)
    except ModelError:
        raise
    except Exception as exc:                          # the user's module: reported in one line
        raise ModelError(f"--adapter {spec}: cannot import {where} ({type(exc).__name__}: {first_line(exc)})") \
            from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelError(f"--adapter {spec}: {where} has no {attr}")
        obj = getattr(obj, part)
    found = _adapter_objects(obj, spec)
    for a in found:
        adapters.register_adapter(a, replace=True)
    return found


def load_adapters(specs=()):
    """Register the GateAdapters of every installed package's `foxwindow.adapters` entry points, then those
    named by `specs` (--adapter; later ones win). Returns the list registered. Both are code run by design:
    each one loaded is said on stderr (what ran, and the families it registered)."""
    out = []
    for ep in metadata.entry_points(group=ADAPTER_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise ModelError(f"entry point {ep.name} = {ep.value} ({ADAPTER_GROUP}) cannot be loaded "
                             f"({type(exc).__name__}: {first_line(exc)})") from None
        got = _adapter_objects(obj, f"{ep.value} (entry point {ep.name})")
        for a in got:
            adapters.register_adapter(a, replace=True)
            out.append(a)
        _said(f"entry point {ep.name} = {ep.value} ({ADAPTER_GROUP})", got)
    for spec in specs or ():
        got = load_adapter(spec)
        _said(f"--adapter {spec}", got)
        out += got
    return out


def _said(what, got):
    fams = ", ".join(safety.shown(a.family) for a in got)
    print(f"loaded code: {safety.shown(what)} (gate adapter{'s' * (len(got) > 1)} {fams})", file=sys.stderr)


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
    if os.path.lexists(cfg) and not os.path.isfile(cfg):
        raise ModelError(f"--model {path}: its config.json is not a regular file (a device, a folder or a broken "
                         "link)")
    if not os.path.isfile(cfg):
        raise ModelError(f"--model {path}: not a model directory (no config.json)")
    try:
        with open(cfg) as fh:
            out = json.load(fh)
    except (OSError, *safety.JSON_ERRORS) as exc:
        why = safety.json_error(exc)
        raise ModelError(f"--model {path}: config.json is unreadable ({why})") from None
    if not isinstance(out, dict):
        raise ModelError(f"--model {path}: config.json holds a {type(out).__name__}, not a JSON object")
    return out


def hub_or_cache(name, what):
    """A hub name must be in the local Hugging Face cache or the hub reachable: where neither (its host does not
    resolve: no network here), ModelError at once, instead of transformers' five retries over half a minute."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return                                      # offline by choice: transformers reads the cache only
    try:
        from huggingface_hub import try_to_load_from_cache  # optional (with transformers): hub names only
        if any(isinstance(try_to_load_from_cache(name, f), str)
               for f in ("config.json", "tokenizer_config.json", "tokenizer.json")):
            return
    except Exception:                        # noqa: BLE001  (an old or absent hub package, a malformed name)
        pass
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except (OSError, UnicodeError):
        raise ModelError(f"{what} {safety.shown(name)}: not a local folder, not in the Hugging Face cache, and "
                         f"{host} cannot be reached from here; give a checkpoint folder") from None


def _import_packages(cfg):
    """Import the family package named by the config: the official FoX code's model submodule (which
    registers its Auto classes) when the model type ends in -project_fox or the config has fgate_type; fla
    for the model types its adapters read. Returns the names imported. ModelError naming what is missing,
    or "not supported" for a model type that no adapter reads and transformers does not know."""
    mt = (cfg or {}).get("model_type")
    if cfg and (str(mt).endswith(OFFICIAL_SUFFIX) or "fgate_type" in cfg):
        base = str(mt)[:-len(OFFICIAL_SUFFIX)] if str(mt).endswith(OFFICIAL_SUFFIX) else "forgetting_transformer"
        if mt != "forgetting_transformer" and not adapters.family_for_model_type(mt):
            raise not_supported(mt)                   # the official repository's baselines (hgrn2, delta_net, ...)
        if base == "mamba2" and importlib.util.find_spec("mamba_ssm") is None:
            raise ModelError(f"model type '{mt}': the official repository's Mamba-2 builds its gated norm from "
                             f"mamba_ssm (CUDA kernels), which is not installed (pip install mamba-ssm on a GPU "
                             f"machine)")
        sub = f"{OFFICIAL_PACKAGE}.model.{base}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(OFFICIAL_PACKAGE)
        except ImportError:
            raise ModelError("this checkpoint is the official FoX code's (model type "
                             f"'{mt}'): install the forgetting_transformer package "
                             "(pip install -e a checkout of github.com/zhixuan-lin/forgetting-transformer)") from None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(sub)                             # registers its Auto classes
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(sub):
                raise ModelError(f"model type '{mt}': the installed forgetting_transformer package has no {sub}") \
                    from None
            raise ModelError(f"model type '{mt}': {sub} needs {exc.name} (pip install {exc.name})") from None
        except Exception as exc:
            raise ModelError(f"model type '{mt}': importing {sub} failed ({first_line(exc)})") from None
        return [sub]
    known = _transformers().models.auto.configuration_auto.CONFIG_MAPPING_NAMES
    if mt is not None and mt in known and not _fla_config(cfg):
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
    if not adapters.family_for_model_type(mt) and mt not in known:
        raise not_supported(mt)
    try:
        return adapters.import_family_packages(mt)
    except ImportError as exc:
        raise ModelError(str(exc)) from None


def _config_fields(config_cls):
    """Every config.json key that `config_cls` reads: its __init__ parameters, the attributes a default
    instance sets (PretrainedConfig's own among them), and the bookkeeping keys. None if unknown."""
    try:
        params = set(inspect.signature(config_cls.__init__).parameters) - {"self", "kwargs"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fields = set(config_cls().to_dict())
    except Exception:
        return None
    return params | fields | META_KEYS | set(getattr(config_cls, "attribute_map", {}) or {})


def _fla_classes(mt):
    """fla's (config class, causal LM class) of model type `mt`, or None when fla is absent or lacks it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fm = importlib.import_module("fla.models")
    except ImportError:
        return None
    for name in getattr(fm, "__all__", dir(fm)):
        obj = getattr(fm, name, None)
        if isinstance(obj, type) and name.endswith("Config") and getattr(obj, "model_type", None) == mt:
            lm = getattr(fm, name[:-len("Config")] + "ForCausalLM", None)
            if lm is not None:
                return obj, lm
    return None


def _fla_config(cfg):
    """True when a config.json of a model type that transformers also defines was written by fla's config
    class: it has fields that fla's class reads and transformers' does not (fla Mamba-2: dt_limit, fuse_norm)."""
    mt = (cfg or {}).get("model_type")
    tf = _transformers()
    names = tf.models.auto.configuration_auto.CONFIG_MAPPING_NAMES
    if mt not in names or not adapters.family_for_model_type(mt):
        return False
    fla = _fla_classes(mt)
    if fla is None:
        return False
    tf_fields, fla_fields = _config_fields(getattr(tf, names[mt])), _config_fields(fla[0])
    if tf_fields is None or fla_fields is None:
        return False
    keys = set(cfg)
    return bool(keys - tf_fields) and not (keys - fla_fields)


def _classes(cfg_json):
    """(config class, causal LM class, where) to load a checkpoint with: the classes of the library that
    wrote it (transformers' own for its model types, fla's for fla's configs of a type both define, the
    Auto classes for the rest)."""
    tf = _transformers()
    mt = (cfg_json or {}).get("model_type")
    cfg_names = tf.models.auto.configuration_auto.CONFIG_MAPPING_NAMES
    lm_names = tf.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if cfg_json and mt in cfg_names and _fla_config(cfg_json):
        c, m = _fla_classes(mt)
        return c, m, "fla"
    if mt in cfg_names and mt in lm_names:
        # transformers' own classes by name: a package imported earlier (fla) may have re-registered the type
        return getattr(tf, cfg_names[mt]), getattr(tf, lm_names[mt]), "transformers"
    return tf.AutoConfig, tf.AutoModelForCausalLM, None


def _check_config_fields(name, cfg_json, config):
    """Refuse a config.json with fields the loading config class does not read: the network built would
    silently differ from the one that was saved (e.g. fla Mamba-2's dt_limit read by transformers' class)."""
    fields = _config_fields(type(config))
    if not cfg_json or fields is None:
        return
    unread = sorted(set(cfg_json) - fields)
    if unread:
        cls = f"{type(config).__module__.split('.')[0]}.{type(config).__name__}"
        raise ModelError(f"--model {name}: config fields {', '.join(unread)} are not read by {cls}, which would build "
                         f"another network than the one saved (the checkpoint was written by other code for model "
                         f"type '{cfg_json.get('model_type')}')")


def _checkpoint_tensors(path):
    """{name: lazily read tensor} of a local checkpoint's safetensors files (sharded or not); None if it has
    none (a .bin checkpoint: not re-read)."""
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        return None
    from safetensors import safe_open  # safetensors: the models extra
    out = {}
    for f in files:
        with safe_open(os.path.join(path, f), framework="pt") as fh:
            for k in fh.keys():
                out[k] = (os.path.join(path, f), k)
    return out


def _check_weights(name, path, model):
    """Every tensor of the checkpoint equals the loaded model's tensor of that name (in the model's dtype):
    a loader that rescales or re-initialises a weight (transformers' Mamba-2 on fla's rescale_prenorm_residual)
    is refused. Returns the number of tensors compared."""
    index = _checkpoint_tensors(path)
    if index is None:
        return 0
    from safetensors import safe_open  # safetensors: the models extra
    state = model.state_dict()
    unused = sorted(k for k in index if k not in state)
    if unused:
        raise ModelError(f"--model {name}: {len(unused)} tensors of the checkpoint are not weights of "
                         f"{type(model).__name__} (e.g. {unused[0]}); it was saved by another implementation")
    n = 0
    for k, (f, key) in index.items():
        with safe_open(f, framework="pt") as fh:
            want = fh.get_tensor(key)
        got = state[k].detach().cpu()
        if got.shape != want.shape or not torch.equal(got, want.to(got.dtype)):
            err = (got.double() - want.double()).abs().max().item() if got.shape == want.shape else "shape"
            raise ModelError(f"--model {name}: weight {k} of the loaded {type(model).__name__} differs from the "
                             f"checkpoint's (max |diff| {err}): the loader re-parametrised it")
        n += 1
    return n


def check_before_loading(name, cfg_json, device="cpu"):
    """What config.json and the files' headers tell before any package is imported or weight read: a family
    whose kernels are Triton-only (GLA, HGRN, Gated DeltaNet, RetNet of fla) refused on the CPU; a truncated
    or corrupt safetensors file refused. ModelError naming the model type or the file. Returns the tensor
    elements the folder's safetensors files list (None: none there, or not a local folder)."""
    mt = (cfg_json or {}).get("model_type")
    fams = adapters.family_for_model_type(mt) if mt else []
    if fams and not str(device).startswith("cuda"):
        tf_own = mt in _transformers().models.auto.configuration_auto.CONFIG_MAPPING_NAMES and not _fla_config(cfg_json)
        if not tf_own and not any(a.cpu or "fla" not in a.packages for a in fams):
            raise ModelError(f"--model {safety.shown(name)}: model type '{safety.shown(mt)}' (family "
                             f"{', '.join(a.family for a in fams)}) runs on fused kernels that are Triton-only and "
                             f"need a GPU (--device cuda); on the CPU run FoX (ours, official, fla) and Mamba-2 "
                             f"(fla, transformers)")
    path = os.path.expanduser(name)
    if not os.path.isdir(path):
        return None
    files = [f for f in sorted(os.listdir(path)) if f.endswith(".safetensors")]
    return sum(_check_safetensors(name, os.path.join(path, f)) for f in files) if files else None


def _check_safetensors(name, path):
    """A safetensors file's header read and its size checked against the tensors it lists (8-byte header
    length, JSON header, data): a truncated download or a file of another format is one line. Returns the
    number of tensor elements it lists."""
    f = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if n is None or n > min(size - 8, 100 << 20):
                raise ModelError(f"--model {safety.shown(name)}: {f} is not a safetensors file (or is truncated): "
                                 f"its header length reads {n} of a {size}-byte file")
            header = json.loads(fh.read(n))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ModelError(f"--model {safety.shown(name)}: {f} has an unreadable safetensors header ({exc})") from None
    need = 8 + n + max(ends, default=0)
    if size < need:
        raise ModelError(f"--model {safety.shown(name)}: {f} is truncated: its header lists {need} bytes, the file "
                         f"holds {size} (download it again)")
    try:
        return sum(math.prod(int(d) for d in v["shape"]) for k, v in header.items() if k != "__metadata__")
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"--model {safety.shown(name)}: {f} has an unreadable safetensors header ({exc})") from None


SIZE_SLACK = 1.1            # a config may describe at most this many times the parameters its weights files hold


MAX_LAYERS = 4096            # a config.json asking for more layers is refused outright (no model has so many)


def _meta_params(model_cls, config):
    """Parameters of model_cls built from config on the meta device (no memory); an Auto class through from_config."""
    make = model_cls.from_config if model_cls.__name__.startswith("Auto") else model_cls
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in make(config).parameters())


def _config_params(model_cls, config):
    """The parameters config describes: a model of one and of two layers built on the meta device, and the stack
    continued layer by layer (exact for a stack of equal layers, and cheap for any depth); the whole model on the
    meta device where the config cannot be cut to fewer layers."""
    n = getattr(config, "num_hidden_layers", None)
    if isinstance(n, int) and not isinstance(n, bool) and n > 2:
        try:
            small = []
            for k in (1, 2):
                c = copy.deepcopy(config)
                c.num_hidden_layers = k
                small.append(_meta_params(model_cls, c))
            return small[0] + (n - 1) * (small[1] - small[0])
        except Exception:                    # noqa: BLE001  (a config whose other fields follow its depth)
            pass
    return _meta_params(model_cls, config)


def _check_size(name, model_cls, config, held):
    """The parameters config describes (_config_params: on the meta device, no memory) against the tensor elements
    `held` in the folder's safetensors files: a config.json that asks for far more than its weights (a crafted or
    mismatched folder) is refused before the model is built for real, and so is one of more than MAX_LAYERS
    layers. Skipped where the meta build fails (it is only a guard) or no safetensors file holds the weights (a
    .bin checkpoint is not read twice)."""
    n = getattr(config, "num_hidden_layers", None)
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_LAYERS:
        raise ModelError(f"--model {safety.shown(name)}: config.json asks for {n} layers (more than {MAX_LAYERS}): "
                         "refused before building it")
    if held is None:
        return
    try:
        want = _config_params(model_cls, config)
    except Exception:                        # noqa: BLE001  (a model class that cannot be built on meta)
        return
    if want > SIZE_SLACK * held + 1_000_000:
        raise ModelError(f"--model {safety.shown(name)}: config.json describes a model of {want:.3g} parameters; "
                         f"its safetensors files hold {held:.3g} values: refused before building it (a config "
                         "that does not match its weights)")


def _dtype_keyword(dtype):
    """from_pretrained's dtype keyword: `dtype` from transformers 5, `torch_dtype` before (4.44 ...)."""
    major = int(metadata.version("transformers").split(".")[0])
    return dict(dtype=dtype) if major >= 5 else dict(torch_dtype=dtype)


def load_pretrained(name, device="cpu", dtype="float32"):
    """Load a causal LM with the classes of the library that defines it. Returns (model in eval mode on
    `device`, its config). Checks that the loaded network is the saved one: every config.json field is read
    by the config class, no weight is missing, and every tensor of a local safetensors checkpoint equals
    the loaded weight. On the CPU, fla's fused Triton norms / SwiGLU / losses are switched off in the config
    of the FoX families (the other families run on PyTorch stand-ins, see capture_batches). --dtype bfloat16 /
    float16 set model.foxwindow_autocast, applied by capture_batches, as the libraries' own code runs them
    (fla's Mamba-2 mixes float32 norms with bfloat16 projections); the official FoX code's weights stay float32.
    Raises ModelError (one line) for a missing path, a directory that is not a model, a missing package,
    a model type no adapter reads, or a checkpoint that does not load as saved; ValueError (one line, before
    anything is read) for a name that is not a non-empty path or hub name, a device other than cpu or cuda, or a
    dtype not in DTYPES."""
    if not isinstance(name, (str, os.PathLike)) or not os.fspath(name) or "\0" in os.fspath(name):
        raise ValueError(f"name must be a checkpoint folder or a hub name (a non-empty str or os.PathLike); got "
                         f"{safety.shown(repr(name))[:80]}")
    name = os.fspath(name)
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, DTYPES))}; got {dtype!r}")
    outputs.device_arg("device", device)
    safety.no_remote_code(name, "--model")
    _transformers()
    cfg_json = _local_config(name)
    if cfg_json is None:
        hub_or_cache(name, "--model")
    held = check_before_loading(name, cfg_json, device)
    _import_packages(cfg_json)
    path = os.path.expanduser(name)
    config_cls, model_cls, _ = _classes(cfg_json)
    mt = (cfg_json or {}).get("model_type")
    try:
        config = config_cls.from_pretrained(path, trust_remote_code=False)
    except Exception as exc:                 # noqa: BLE001  (its validators raise their own classes too)
        msg = first_line(exc)
        if mt and ("does not recognize this architecture" in msg or "out of date" in msg):
            raise not_supported(mt) from None
        raise ModelError(f"--model {name}: transformers cannot read its config ({msg})") from None
    _check_config_fields(name, cfg_json, config)
    mt = getattr(config, "model_type", mt)
    fams = adapters.family_for_model_type(mt)
    official = any(a.family == "fox-official" for a in fams)
    if not str(device).startswith("cuda") and fams and all(a.cpu for a in fams):
        # only where the switch keeps the weights' names (fla FoX: fused and plain RMSNorm alike)
        for k in CPU_CONFIG_OFF:
            if getattr(config, k, False):
                setattr(config, k, False)
    load_dtype = torch.float32 if official else DTYPES[dtype]
    if official:
        _official_compat(model_cls, config)
    _check_size(name, model_cls, config, held)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, info = model_cls.from_pretrained(path, config=config, output_loading_info=True,
                                                    trust_remote_code=False, **_dtype_keyword(load_dtype))
    except Exception as exc:                 # noqa: BLE001  (an UnpicklingError of a .bin weights file too)
        if isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc):
            raise ModelError(f"--model {name}: its weights file is a pickle that names Python objects beyond "
                             "tensors; refused as code (weights are only ever loaded with weights_only=True)") from None
        raise ModelError(f"--model {name}: cannot load the weights ({first_line(exc)})") from None
    # a weight left at its random init would give gates that look real: refuse instead
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ModelError(f"--model {name}: {len(missing)} weights of {type(model).__name__} are not in the checkpoint "
                         f"(e.g. {missing[0]}); it was saved by another implementation of this model type")
    if os.path.isdir(path):
        _check_weights(name, path, model)
    if official:
        _official_buffers(model)
    if DTYPES[dtype] != torch.float32:
        # the libraries' own code runs reduced precision under autocast: fla's Mamba-2 keeps float32 norms and a
        # float32 residual stream that meet bfloat16 projections, the official FoX code float32 weights
        model.foxwindow_autocast = DTYPES[dtype]
    try:
        model = model.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise ModelError(f"--device {device}: {first_line(exc)}") from None
    return model.eval(), config


def _official_compat(model_cls, config):
    """The official FoX classes were written for transformers 4: their `_tied_weights_keys` is a list, which
    transformers 5 reads as a {target: source} dict. Give it the dict form (the output embedding tied to the
    input one, as the list meant) so saving and loading work; a no-op on transformers 4 and on dicts."""
    for cls in model_cls.__mro__:
        keys = cls.__dict__.get("_tied_weights_keys")
        if isinstance(keys, list):
            cls._tied_weights_keys = {k: "model.embeddings.weight" for k in keys} if config.tie_word_embeddings \
                else None


def _official_buffers(model):
    """Recompute what the official FoX constructor computes and does not save: transformers 5 builds the model
    without running it and leaves the rotary embedding's non-persistent inv_freq at zero (RoPE silently off).
    Returns the number of buffers recomputed."""
    n = 0
    for m in model.modules():
        if hasattr(m, "_compute_inv_freq") and isinstance(getattr(m, "inv_freq", None), torch.Tensor):
            with torch.no_grad():
                m.inv_freq = m._compute_inv_freq(m.inv_freq.device).to(m.inv_freq.dtype)
            for k in ("_cos_cached", "_sin_cached", "_cos_k_cached", "_sin_k_cached"):
                if hasattr(m, k):
                    setattr(m, k, None)
            if hasattr(m, "_seq_len_cached"):
                m._seq_len_cached = 0
            n += 1
    return n


class JSONEscaped:
    """The official FoX tokenizer for LongCrawl64 models (JSONGPT2Tokenizer): GPT-2's BPE applied to the text
    JSON-escaped (json.dumps without its quotes: a newline becomes the two characters backslash n), as
    LongCrawl64 stored its documents. The class overrides prepare_for_tokenization, which transformers 5 no
    longer calls, so it is applied here before the base tokenizer sees the text."""

    def __init__(self, base):
        self.base = base

    @staticmethod
    def escape(text):
        return json.dumps(text)[1:-1]

    def __call__(self, text, **kw):
        if isinstance(text, (list, tuple)):
            return self.base([self.escape(t) for t in text], **kw)
        return self.base(self.escape(text), **kw)

    def decode(self, ids, **kw):
        text = self.base.decode(ids, **kw)
        try:
            return json.loads(f'"{text}"')
        except json.JSONDecodeError:
            return text.encode().decode("unicode_escape", "ignore")

    def __getattr__(self, name):
        return getattr(self.base, name)


def load_tokenizer(name):
    """The tokenizer of checkpoint (or tokenizer directory / hub name) `name`, with the text escaping its own
    class applies (the official FoX JSONGPT2Tokenizer: JSONEscaped); ModelError (one line) if absent."""
    safety.no_remote_code(name, "--tokenizer")
    tf = _transformers()
    path = os.path.expanduser(name)
    tcfg = os.path.join(path, "tokenizer_config.json")
    cls = None
    files = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "vocab.txt", "spiece.model")
    if os.path.isdir(path) and not any(os.path.isfile(os.path.join(path, f)) for f in files):
        raise ModelError(f"no tokenizer at {name}: none of {', '.join(files)} is there; pass --tokenizer DIR_OR_NAME")
    if not os.path.exists(path):
        hub_or_cache(name, "--tokenizer")
    if os.path.isfile(tcfg):
        try:
            with open(tcfg) as fh:
                cls = json.load(fh).get("tokenizer_class")
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"--tokenizer {name}: tokenizer_config.json is unreadable ({exc})") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if cls == "JSONGPT2Tokenizer":
                return JSONEscaped(tf.GPT2Tokenizer.from_pretrained(path, trust_remote_code=False))
            return tf.AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__           # the whole message, on one line
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


def wants_model(args):
    """True when forget.py should take the --model path: --model given, or --checkpoint naming a directory
    (a Hugging Face style checkpoint; this project's own checkpoints are .pt files), then moved to --model."""
    ck = getattr(args, "checkpoint", None)
    if args.model is None and ck and os.path.isdir(ck):
        args.model, args.checkpoint = ck, None
        args.model_flag = "--checkpoint"                # errors name the flag the user gave
    return args.model is not None


def refuse_model_flags(args):
    """The --model flags given without --model (with --traces, --synthetic or the shipped model) would be
    ignored: UsageError naming them. An --adapter is code: it is never loaded when nothing would use it."""
    g = vars(args).get
    typed = hasattr(args, "given_flags")           # a parser that records the flags typed (uses.record_given)
    on = [f for f, v in (("--adapter", g("adapter")), ("--tokenizer", g("tokenizer")), ("--text", g("text")),
                         ("--per-channel", g("per_channel")),
                         ("--dtype", uses.given(args, "dtype") if typed else g("dtype", "float32") != "float32"),
                         ("--batch", uses.given(args, "batch") if typed else g("batch", 4) != 4)) if v]
    if on and getattr(args, "model", None) is None:
        mode = "--traces" if getattr(args, "traces", None) else "--synthetic" if getattr(args, "synthetic", False) \
            else "the shipped model"
        raise safety.UsageError(f"{' and '.join(on)} appl{'y' if len(on) > 1 else 'ies'} to --model only; {mode} would "
                         "ignore it: drop it or pass --model")


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
        ("--adapter", dict(action="append", default=None, metavar="MODULE:OBJECT",
                           help="a GateAdapter of your own (or a list of them, or a callable returning one): "
                                "package.module:NAME or path/to/file.py:NAME; repeatable. Installed packages can "
                                f"also offer theirs under the '{ADAPTER_GROUP}' entry-point group")),
    )
    for flag, kw in flags:
        if flag not in have:
            g.add_argument(flag, **kw)
    return g
