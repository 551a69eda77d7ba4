"""Reading gates out of a model, and gate traces on disk.

    run_with_cache(model, tokens)       TransformerLens style: HookPoint values, e.g. the log gates at
                                        "blocks.{l}.attn.hook_log_fgate", (B, T, H) float32
    capture_gates(module, *inputs)      any nn.Module: hooks submodules whose name ends in `fgate_proj`
                                        (official FoX) or `f_proj` (flash-linear-attention's FoX), or
                                        names given, and returns {module name: (B, T, H) log gates}
    save_trace / load_trace             {name: (B, T, H) float32} traces in an .npz with JSON metadata
    capture(model, tokens)              this package's FoX model: every layer's log gates and attention input
    attention_mass_window(A, rows, L)   smallest distance holding 1 - e^-L of each row's attention, from any
                                        attention probabilities; mass_windows: the same for a FoX layer
    decay_window_summary(lg, L, rows)   mean decay-only window of query rows and the share censored

For a known gated family (FoX, official FoX, fla's FoX, GLA, HGRN, Gated DeltaNet, Mamba-2, RetNet),
adapters.capture_log_decays reads every layer's log-decay from its own parameters and inputs; capture_gates
is the quick path for FoX-style gates (other parametrisations: `gate_names=[...]`, `output=` and a
`to_log_gate` mapping the module output to log gates (B, T, H)). Models wrapped by DDP, FSDP or
torch.compile are unwrapped first, so hook names are the plain model's.
"""
import json
import math
import os
import zipfile
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from foxwindow import outputs, safety
from foxwindow.laws import gates
from foxwindow.models import adapters
from foxwindow.models.attention import cum_log_gate, fox_logits
from foxwindow.models.fox import HookPoint
from foxwindow.training import distributed

__all__ = ["run_with_cache", "DEFAULT_GATE_SUFFIXES", "GATE_OUTPUTS", "capture_gates", "TRACE_FORMAT",
           "TRACE_RESERVED", "save_trace", "load_trace", "MIN_TRACE_LEN", "check_layout", "check_spans",
           "load_traces_checked", "open_traces", "LazyTrace", "READ_CHUNK", "check_trace_file", "fingerprint",
           "HEAD_BLOCK_BYTES", "HeadBlocks", "capture", "query_rows", "attention_mass_window", "mass_windows",
           "decay_window_summary"]

# ----------------------------------------------------------------------------- reading gates

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
        raise ValueError("no forget-gate modules found (looked for hook_log_fgate, fgate_proj, f_proj); pass "
                         "gate_names or use adapters.capture_log_decays")
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
    if a.dtype.itemsize > 4 and np.abs(a).max() > np.finfo(np.float32).max:
        raise ValueError(f"{where}: trace '{name}' holds values beyond float32's range (min {a.min():.3g}; log gates "
                         f"are stored as float32, whose lowest value is {-np.finfo(np.float32).max:.3g})")
    if (a > 0).any():
        raise ValueError(f"{where}: trace '{name}' has positive log gates (max {a.max():.4g})")


def save_trace(path, traces, meta=None, force=False):
    """Write log-gate traces to `path` (.npz, float32) with JSON metadata.

    traces: {name: (B, T, H) array or tensor of log gates <= 0, finite}; meta: None or a JSON-serialisable
    dict (e.g. model, layers, heads, text span, eps); the keys "format", "names" and "shapes" are the
    file's own (added here, checked on load) and may not be given. An int meta["heads"] is checked
    against every trace (here and on load), which catches a (B, H, T) array passed as (B, T, H).
    An existing file at `path` is replaced only with force=True. The file is written to a temporary name
    and renamed, so an interrupted save leaves no partial file (and the previous file intact).
    Raises ValueError on bad traces or metadata, or when `path` exists and force is False.
    """
    meta = {} if meta is None else meta
    if not isinstance(force, bool):
        raise ValueError(f"save_trace: force must be True or False; got {force!r}")
    if isinstance(path, (str, os.PathLike)) and os.path.isdir(path):
        raise ValueError(f"save_trace: {path} is a folder; give a file name (e.g. traces.npz)")
    # the write guard's checks (a path, its folder, never a tracked source file), without a lock
    path = outputs.check_writable(path, force=force, what="save_trace", claim=False, force_flag="force=True")
    if not isinstance(traces, dict) or not traces:
        raise ValueError("traces must be a non-empty dict {name: (B, T, H) array}")
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict; got {type(meta).__name__}")
    taken = [k for k in TRACE_RESERVED if k in meta]
    if taken:
        raise ValueError(f"meta keys {taken} are reserved by the trace format (it stores them itself); rename them")
    _check_meta_fields("save_trace", meta)          # what load_trace would refuse is never written
    heads = meta.get("heads")
    names, arrays = [], {}
    for i, (name, a) in enumerate(traces.items()):
        if not isinstance(name, str) or not name:
            raise ValueError(f"trace names must be non-empty strings; got {name!r}")
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu()
            a = (a.float() if a.dtype == torch.bfloat16 else a).numpy()      # bfloat16: exactly as float32
        else:
            try:
                a = np.asarray(a)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"save_trace: trace '{safety.shown(name)}' is not one array (B, T, H): "
                                 f"{' '.join(str(exc).split())}") from None
        _check_trace(name, a, "save_trace")
        if isinstance(heads, int) and a.shape[2] != heads:
            raise ValueError(f"save_trace: trace '{name}' has shape {a.shape}, so {a.shape[2]} heads as (B, T, H); "
                             f"meta says heads={heads} (is it (B, H, T)?)")
        check_spans("save_trace", meta, a.shape[0])          # (what the reader would refuse is never written)
        names.append(name)
        arrays[f"trace_{i}"] = a.astype(np.float32)
    stored = dict(meta)
    stored.update(format=TRACE_FORMAT, names=names,
                  shapes=[list(arrays[f"trace_{i}"].shape) for i in range(len(names))])
    try:
        blob = json.dumps(stored, allow_nan=False).encode()     # strict JSON: NaN and inf are not numbers there
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta is not JSON-serialisable (strict JSON: no NaN or infinity): {exc}") from None
    arrays["meta_json"] = np.frombuffer(blob, dtype=np.uint8)
    outputs.save_npz(path, **arrays)


def _not_npy(path):
    """ValueError where path cannot be read, or holds a single .npy array rather than an .npz."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise ValueError(f"{path}: not readable ({exc.strerror or exc})") from None
    if magic == b"\x93NUMPY":
        raise ValueError(f"{path}: a single .npy array, not an .npz trace file (save_trace writes one: a zip of the "
                         "traces and their metadata)")


def load_trace(path, mmap=False):
    """Read a file written by save_trace. Returns (traces {name: (B, T, H) float32 ndarray}, meta dict).

    mmap: each trace a read-only numpy.memmap of the file instead of an array in memory (a file of any size; its
      pages are read as they are used and the system may drop them again), every value checked streamed first.
      Needs the members save_trace writes (stored uncompressed, float32); a compressed or other-dtype member is
      refused (ValueError), not read eagerly instead.
    Raises FileNotFoundError if missing; ValueError naming the problem if the file is truncated or
    not an npz, the metadata is missing or unreadable, or a trace has the wrong shape, NaN or
    positive values.
    """
    if mmap is not False and mmap is not True:
        raise ValueError(f"mmap must be True or False; got {mmap!r}")
    path = _trace_path(path)
    if mmap:
        return _map_traces(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"trace file not found: {path}" + (" (a folder; expected an .npz file)"
                                                                   if os.path.isdir(path) else ""))
    outputs.note_input(path, "the trace file")             # no output of the command may replace it
    _not_npy(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not an .npz trace file (not a zip archive; corrupt, truncated or another format)")
    try:
        _npz_members(path)          # each member's header against what it holds: a crafted shape allocates nothing
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"{path}: not a readable .npz trace (corrupt or truncated): {exc}") from exc
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, ValueError):
            _pickle_refused(path, ValueError(f"{path}: not a readable .npz trace (corrupt or truncated): {exc}"))
        raise ValueError(f"{path}: not a readable .npz trace (corrupt or truncated): {exc}") from exc
    if "meta_json" not in data:
        raise ValueError(f"{path}: missing metadata (no meta_json entry)")
    meta = _read_meta(path, data.pop("meta_json"), set(data))
    names, shapes = meta["names"], meta["shapes"]
    traces = {}
    for i, name in enumerate(names):
        a = data[f"trace_{i}"]
        if list(a.shape) != list(shapes[i]):
            raise ValueError(f"{path}: trace '{name}' has shape {a.shape}, metadata says {tuple(shapes[i])}")
        _check_trace(name, a, path)
        heads = meta.get("heads")
        if isinstance(heads, int) and a.shape[2] != heads:
            raise ValueError(f"{path}: trace '{name}' has {a.shape[2]} heads, metadata says {heads}")
        traces[name] = a.astype(np.float32, copy=False)                          # one copy in memory, not two
    return traces, meta


def _map_traces(path):
    """load_trace(path, mmap=True)."""
    lazy, meta = _open_lazy(path)
    out = {}
    for name, t in lazy.items():
        if t._loc is None:
            raise ValueError(f"{path}: trace '{safety.shown(name)}' is stored compressed and cannot be memory-mapped "
                             "(load it with mmap=False, or save it uncompressed: save_trace)")
        off, dtype, shape, fortran = t._loc[:4]
        if dtype != np.float32:
            raise ValueError(f"{path}: trace '{safety.shown(name)}' is {dtype}, not float32: memory-mapped traces "
                             "are read as stored (load it with mmap=False, which converts it)")
        t.check_values(name)
        out[name] = t.memmap()
    return out, meta


def _npz_members(path):
    """{member name without '.npy': (data offset, dtype, shape, fortran order) or None} of an .npz: the offset of
    the array data in the file for an uncompressed (stored) member, None for a compressed one."""
    out = {}
    size = os.path.getsize(path)
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in out:                                  # the last copy would win, the first unread
                raise ValueError(f"{path}: the zip holds two members named {safety.shown(info.filename)!r}; a trace "
                                 "file has one of each")
            if info.compress_type != zipfile.ZIP_STORED:
                if info.filename.endswith(".npy"):          # its header, so that a claimed size is checked first
                    with zf.open(info) as z:
                        shape, _, dtype = _npy_header(z, path, name)
                    _check_claim(path, name, shape, dtype, info.file_size)
                out[name] = None
                continue
            fh.seek(info.header_offset)
            head = fh.read(30)
            if head[:4] != b"PK\x03\x04":
                out[name] = None
                continue
            n_name, n_extra = int.from_bytes(head[26:28], "little"), int.from_bytes(head[28:30], "little")
            if fh.read(n_name) != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
                raise ValueError(f"{path}: member {safety.shown(info.filename)!r} has another name in its local "
                                 "header than in the zip's directory (a corrupt or crafted file)")
            start = info.header_offset + 30 + n_name + n_extra
            fh.seek(start)
            shape, fortran, dtype = _npy_header(fh, path, name)
            # the data must lie inside both the zip entry and the file (a crafted header claims more)
            _check_claim(path, name, shape, dtype, min(info.file_size - (fh.tell() - start), size - fh.tell()))
            out[name] = (fh.tell(), dtype, shape, fortran, start, info.CRC, info.file_size)
    return out


def _npy_header(fh, path, name):
    """(shape, fortran order, dtype) of the .npy header at fh's position (fh left at the data); ValueError naming
    the file and member where it is not one."""
    try:
        version = np.lib.format.read_magic(fh)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(fh)
        if any(v < 0 for v in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        return shape, fortran, dtype
    except (ValueError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: member '{name}' is not a readable .npy array ({str(exc).splitlines()[0][:120]})") \
            from None


def _check_claim(path, name, shape, dtype, held):
    """ValueError when an .npy header's shape and dtype need more bytes than the member holds."""
    need = math.prod(shape) * dtype.itemsize
    if need > held:
        raise ValueError(f"{path}: member '{name}' claims {need} bytes of data ({tuple(shape)} {dtype}) and holds "
                         f"{max(held, 0)}: a truncated or crafted file")


READ_CHUNK = 1 << 25          # bytes of a trace read at a time by LazyTrace.read_heads and check_values (32 MiB)


class LazyTrace:
    """One (B, T, H) trace of a file, read when indexed: memory-mapped where the .npz member is stored
    uncompressed (numpy.savez, save_trace's format), else decompressed on each read. Indexing returns a numpy
    array (a copy of what was asked for); `shape` and `dtype` are known without reading. A forked process
    may index it too (it opens the file itself), and nothing stays mapped between reads. read_heads(hs) reads
    some heads in one pass over the file in chunks of rows, without a memory map: a head's values are spread
    over the whole member (every page holds a few of each head's), so a mapped read of one head would put the
    whole file in the process's resident memory (6 GiB at 384 heads x 256 x 16384)."""

    def __init__(self, path, member, shape, loc):
        self.path, self.member, self.shape, self._loc = path, member, tuple(shape), loc
        self.dtype = np.dtype(np.float32) if loc is None else loc[1]
        self.ndim = len(self.shape)

    def read_heads(self, hs):
        """Heads hs (a list or range of ints in [0, H)) as one (B, T, len(hs)) array in the trace's dtype, the
        same values as self[:, :, hs]. Uncompressed C-order members are read READ_CHUNK bytes at a time, whole
        positions (b, t) a read (the process holds a chunk and the result, never a map of the file); others as
        __getitem__ reads them.
        Raises ValueError where the file ends before the member does."""
        hs = [int(h) for h in hs]
        B, T, H = self.shape
        if not hs or any(not 0 <= h < H for h in hs):
            raise ValueError(f"{self.path}: heads {hs} outside 0..{H - 1}")
        if self._loc is None or self._loc[3]:                        # compressed, or Fortran order (heads apart)
            return self[:, :, hs]
        run = hs == list(range(hs[0], hs[0] + len(hs)))
        pick = slice(hs[0], hs[-1] + 1) if run else hs               # a slice: a view, no gather of its own
        off, dtype = self._loc[0], self._loc[1]
        out = np.empty((B, T, len(hs)), dtype)
        flat = out.reshape(B * T, len(hs))                           # a view: positions (b, t) in file order
        per = max(1, READ_CHUNK // (H * dtype.itemsize))             # positions a read (a row may exceed a chunk)
        buf = np.empty(min(per, B * T) * H, dtype)
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(off)
            for p0 in range(0, B * T, per):
                n = min(per, B * T - p0)
                part = buf[:n * H]
                got = fh.readinto(memoryview(part).cast("B"))
                if got != part.nbytes:
                    raise ValueError(f"{self.path}: trace '{self.member}' ends early (truncated file)")
                flat[p0:p0 + n] = part.reshape(n, H)[:, pick]
        return out

    def check_values(self, name):
        """The value checks of load_trace (finite, within float32's range, <= 0; ValueError naming the trace and
        the file), streamed READ_CHUNK bytes at a time where the member is uncompressed and in C order."""
        B, T, H = self.shape
        if self._loc is None or self._loc[3]:
            _check_trace(name, self[...], self.path)
            return
        off, dtype, start, crc, member_size = self._loc[0], self._loc[1], self._loc[4], self._loc[5], self._loc[6]
        total = B * T * H
        per = max(1, READ_CHUNK // dtype.itemsize)                   # values a read (row boundaries do not matter)
        buf = np.empty(min(per, total), dtype)
        lo, hi = math.inf, -math.inf
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(start)
            c = zlib.crc32(fh.read(off - start))                     # the member's CRC-32 as its bytes are read
            for v0 in range(0, total, per):
                part = buf[:min(per, total - v0)]
                if fh.readinto(memoryview(part).cast("B")) != part.nbytes:
                    raise ValueError(f"{self.path}: trace '{name}' ends early (truncated file)")
                c = zlib.crc32(memoryview(part).cast("B"), c)
                if not np.isfinite(part).all():
                    raise ValueError(f"{self.path}: trace '{name}' has NaN or infinite values")
                lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
            rest = member_size - (off - start) - total * dtype.itemsize
            if rest > 0:
                c = zlib.crc32(fh.read(rest), c)
        if c != crc:
            raise ValueError(f"{self.path}: trace '{name}' fails its CRC-32 check (its bytes changed since the file "
                             "was written: corrupt)")
        if dtype.itemsize > 4 and max(-lo, hi) > float(np.finfo(np.float32).max):
            raise ValueError(f"{self.path}: trace '{name}' holds values beyond float32's range (min {lo:.3g}; log "
                             f"gates are stored as float32, whose lowest value is {-np.finfo(np.float32).max:.3g})")
        if hi > 0:
            raise ValueError(f"{self.path}: trace '{name}' has positive log gates (max {hi:.4g})")

    def memmap(self):
        """A read-only numpy.memmap of the (uncompressed) member."""
        off, dtype, shape, fortran = self._loc[:4]
        return np.memmap(self.path, dtype=dtype, mode="r", offset=off, shape=shape, order="F" if fortran else "C")

    def __getitem__(self, key):
        if self._loc is None:                   # compressed: the whole member is decompressed for every read
            safety.need_memory(math.prod(self.shape) * 8, f"{self.path}: reading the compressed trace "
                                                          f"'{self.member}' (save it uncompressed: save_trace)")
            with np.load(self.path, allow_pickle=False) as z:
                return np.asarray(z[self.member][key])
        mm = self.memmap()
        try:
            return np.array(mm[key])
        finally:
            del mm

    def __array__(self, dtype=None, copy=None):
        a = self[...]
        return a if dtype is None else a.astype(dtype, copy=False)


HEAD_BLOCK_BYTES = 1 << 28      # HeadBlocks: a file's heads read a block at a time, about this many bytes (256 MiB)


class HeadBlocks:
    """head(trace, h) -> (B, T) values of head h of a LazyTrace, read a block of consecutive heads at a time (about
    block_bytes; None: HEAD_BLOCK_BYTES) in one pass over the file and kept for the block's next head: every read
    passes over the whole member, so one read a head would read an H-head file H times. One block (of the last
    trace asked for) is held; a forked worker fills its own copy."""

    def __init__(self, block_bytes=None):
        self.size = HEAD_BLOCK_BYTES if block_bytes is None else block_bytes
        self.trace, self.lo, self.block = None, None, None

    def head(self, trace, h):
        S, T, H = trace.shape
        g = max(1, min(H, self.size // (S * T * trace.dtype.itemsize)))
        lo = h - h % g
        if self.trace is not trace or self.lo != lo:
            self.trace, self.lo, self.block = None, None, None      # the old block freed before the new one is read
            self.block = trace.read_heads(range(lo, min(H, lo + g)))
            self.trace, self.lo = trace, lo
        return self.block[:, :, h - lo]


def open_traces(path):
    """The traces of a save_trace file without reading them: ({name: LazyTrace (B, T, H)}, meta), with the
    metadata and layout checks of load_traces_checked (shapes, heads, at least 3 sequences, T >= max(B, H, 16)).
    The values (finite, <= 0) are checked as each head is read (heads.increments), once."""
    traces, meta = _open_lazy(path)
    check_layout(path, {n: t.shape for n, t in traces.items()})
    if traces:                                      # (a file listing no layer is refused where it is read)
        check_spans(path, meta, next(iter(traces.values())).shape[0])
    return traces, meta


def fingerprint(path):
    """What identifies a trace file's contents without reading its values: its size and each zip member's name,
    size and CRC-32 (computed by numpy.savez as it wrote the member). Copies of one file agree; files saved from
    other traces differ (unless a member was altered in place without its archive being rewritten)."""
    with zipfile.ZipFile(path) as zf:
        return os.path.getsize(path), tuple((i.filename, i.file_size, i.CRC) for i in zf.infolist())


def _pickle_refused(path, exc):
    """numpy's refusal of a pickle, said without its advice to load the file unsafely: ValueError naming path."""
    if "Object arrays cannot be loaded" in str(exc):
        raise ValueError(f"{path}: a member holds an object array (pickled Python objects), which is never "
                         "loaded; a trace file holds float arrays and its metadata as bytes") from None
    if "pickle" in str(exc):
        raise ValueError(f"{path}: numpy reads this file as a pickle (not an .npz trace: bytes before its zip, or "
                         "another format); pickles are never loaded") from None
    raise exc


def _trace_path(path):
    """A trace file's path as a string: TypeError for what is not a path, ValueError for an empty one."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"a trace file path must be a str or os.PathLike; got {type(path).__name__} {path!r}")
    path = os.fsdecode(path)
    if not path or "\0" in path:
        raise ValueError(f"trace file path {path!r}: give the path of an .npz trace file (save_trace writes one)")
    return path


def _open_lazy(path):
    """open_traces without its layout checks (load_trace's checks of the file, metadata and shapes)."""
    path = _trace_path(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"trace file not found: {path}" + (" (a folder; expected an .npz file)"
                                                                   if os.path.isdir(path) else ""))
    _not_npy(path)
    outputs.note_input(path, "the trace file")             # no output of the command may replace it
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not an .npz trace file (not a zip archive; corrupt, truncated or another format)")
    try:
        members = _npz_members(path)
        with np.load(path, allow_pickle=False) as z:
            if "meta_json" not in z.files:
                raise ValueError(f"{path}: missing metadata (no meta_json entry)")
            blob = z["meta_json"]
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"{path}: not a readable .npz trace (corrupt or truncated): {exc}") from exc
    except ValueError as exc:
        _pickle_refused(path, exc)
    meta = _read_meta(path, blob, set(members) - {"meta_json"})
    traces = {}
    for i, (name, shape) in enumerate(zip(meta["names"], meta["shapes"])):
        loc = members[f"trace_{i}"]
        if loc is not None and list(loc[2]) != list(shape):
            raise ValueError(f"{path}: trace '{name}' has shape {loc[2]}, metadata says {tuple(shape)}")
        if loc is not None and (len(loc[2]) != 3 or not np.issubdtype(loc[1], np.floating)):
            raise ValueError(f"{path}: trace '{name}' must be (B, T, H) floating point; got {loc[2]} {loc[1]}")
        heads = meta.get("heads")
        if isinstance(heads, int) and shape[2] != heads:
            raise ValueError(f"{path}: trace '{name}' has {shape[2]} heads, metadata says {heads}")
        traces[name] = LazyTrace(path, f"trace_{i}", shape, loc)
    return traces, meta


def _read_meta(path, blob, members):
    try:
        meta = json.loads(blob.tobytes().decode())
    except safety.JSON_ERRORS as exc:
        why = safety.json_error(exc)
        raise ValueError(f"{path}: metadata is not valid JSON: {why}") from None
    if not isinstance(meta, dict) or meta.get("format") != TRACE_FORMAT:
        raise ValueError(f"{path}: metadata lacks format '{TRACE_FORMAT}'")
    for key in ("names", "shapes"):
        if not isinstance(meta.get(key), list):
            raise ValueError(f"{path}: metadata lacks '{key}'")
    names, shapes = meta["names"], meta["shapes"]
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise ValueError(f"{path}: metadata 'names' holds {bad[0]!r} ({type(bad[0]).__name__}); every trace name must "
                         "be a non-empty string")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{path}: metadata 'names' lists {dup[0]!r} {names.count(dup[0])} times; every layer needs "
                         "its own name (none is dropped)")
    want = {f"trace_{i}" for i in range(len(names))}
    if len(names) != len(shapes) or set(members) != want:
        odd = sorted(set(members) - want)
        if len(members) == len(names) == len(shapes) and odd:
            raise ValueError(f"{path}: member {safety.shown(odd[0])!r} is not one of the file's traces (trace_0 ... "
                             f"trace_{len(names) - 1})")
        raise ValueError(f"{path}: metadata lists {len(names)} traces, file holds {len(members)}")
    bad = next((sh for sh in shapes if not (isinstance(sh, list) and len(sh) == 3
                                            and all(isinstance(v, int) and not isinstance(v, bool) for v in sh))), None)
    if bad is not None:
        raise ValueError(f"{path}: metadata 'shapes' holds {bad!r}; every shape must be three integers (B, T, H)")
    _check_meta_fields(path, meta)
    return meta


def _is_int(v, lo=1):
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _is_span(sp):
    """A held-out sequence's source: {"file": str, "start": int >= 0, "end": int >= start} (data.heldout_tokens')."""
    return (isinstance(sp, dict) and isinstance(sp.get("file"), str) and _is_int(sp.get("start"), 0)
            and _is_int(sp.get("end"), 0) and sp["end"] >= sp["start"])


def _is_strs(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# the metadata the analysis reads, and what each must be where present (null is absent)
META_FIELDS = {"heads": ("an integer >= 1", _is_int), "seq_len": ("an integer >= 1", _is_int),
               "context": ("an integer >= 1 (the training context in tokens)", _is_int),
               "spans": ("a list of {\"file\": name, \"start\": byte, \"end\": byte} objects, one a sequence",
                         lambda v: isinstance(v, list) and all(_is_span(sp) for sp in v)),
               "looks_forward": ("a list of layer names", _is_strs),
               "family": ("a string", lambda v: isinstance(v, str)),
               "families": ("a string, a list of strings or an object of strings",
                            lambda v: isinstance(v, str) or _is_strs(v)
                            or (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())))}


def _check_meta_fields(path, meta):
    """ValueError naming the field where a metadata field the analysis reads is not of its kind (META_FIELDS):
    a mislabelled file is refused before the work, not printed or used as it is."""
    for key, (kind, ok) in META_FIELDS.items():
        v = meta.get(key)
        if v is not None and not ok(v):
            raise ValueError(f"{path}: metadata '{key}' is {safety.shown(repr(v))[:80]}; it must be {kind}")


MIN_TRACE_LEN = 16


def check_trace_file(path):
    """Every check of load_traces_checked (the file, its metadata, shapes, layout and every value) without holding
    the traces: open_traces, then each trace's values streamed (LazyTrace.check_values), so that a trace file of
    any size is checked before the work in a chunk of memory. Returns (traces {name: LazyTrace}, meta)."""
    traces, meta = open_traces(path)
    for name, t in traces.items():
        t.check_values(name)
    return traces, meta


def load_traces_checked(path):
    """traces.load_trace plus the layout checks the analysis needs: every trace (S, T, H) with
    S >= 3 sequences and T >= max(S, H, 16) tokens, the same S and T in every layer. A (B, H, T) array
    saved as if it were (B, T, H) is caught here (it reads as a few tokens and many heads) unless the
    metadata's 'heads' already rejected it in load_trace. Raises ValueError naming the layout."""
    traces, meta = load_trace(path)
    check_layout(path, {name: t.shape for name, t in traces.items()})
    if traces:                                      # (a file listing no layer is refused where it is read)
        check_spans(path, meta, next(iter(traces.values())).shape[0])
    return traces, meta


def check_spans(path, meta, S):
    """ValueError where the metadata's spans (the sources of the sequences) do not list one span a sequence."""
    spans = meta.get("spans")
    if spans is not None and len(spans) != S:
        raise ValueError(f"{path}: metadata 'spans' lists {len(spans)} sources for {S} sequences; a mislabelled "
                         "trace (one span a sequence)")


def check_layout(path, shapes):
    """The layout the analysis needs, from the traces' shapes {name: (S, T, H)}: T >= max(S, H, MIN_TRACE_LEN),
    S >= 3, the same (S, T) in every layer. path: where they come from (the messages' first word). Raises ValueError
    naming the layer (control characters escaped) and the layout."""
    for name, (S, T, H) in shapes.items():
        name = safety.shown(name)
        if 0 in (S, T, H):
            raise ValueError(f"{path}: trace '{name}' is empty (shape (B, T, H) = ({S}, {T}, {H})); every dimension "
                             "must be >= 1")
        if T < H or T < MIN_TRACE_LEN or T < S:
            raise ValueError(f"{path}: trace '{name}' read as (B, T, H) = ({S}, {T}, {H}): {S} sequences x {T} "
                             f"tokens, {H} heads; traces must be (B, T, H) with T >= max(B, H, {MIN_TRACE_LEN}): "
                             "a (B, H, T) array was probably saved or passed as is (transpose it to (B, T, H))")
        if S < 3:
            raise ValueError(f"{path}: trace '{name}' holds {S} sequences; the jackknife needs at least 3")
    if len({s[:2] for s in shapes.values()}) > 1:
        raise ValueError(f"{path}: layers disagree in (sequences, tokens): {shapes}")


# ----------------------------------------------------------------------------- the model's own windows


class _Enough(Exception):
    """Raised after the last layer a capture needs: the rest of the forward pass is not run."""


def capture(model, tokens, layers=None):
    """Log-gate traces and the attention input of layers of this package's FoX model, in one forward pass.

    tokens (S, T) int64. layers: the layer indices to read (None: every layer); the pass stops once the last
    of them has its gates, before its attention (a layer's gates and input depend only on the layers before
    it). Returns (traces {layer: (S, T, H) float32}, inputs {layer: (S, T, d) float32}) for those layers.
    """
    model = distributed.unwrap(model)
    chosen = list(range(len(model.blocks))) if layers is None else sorted({int(x) for x in layers})
    if not chosen or not 0 <= chosen[0] <= chosen[-1] < len(model.blocks):
        raise ValueError(f"layers must be indices in [0, {len(model.blocks)}); got {layers!r}")
    traces, inputs, handles = {}, {}, []

    def enough(mod, args, out):
        raise _Enough()
    try:
        for l in chosen:
            blk = model.blocks[l]
            handles.append(blk.attn.register_forward_pre_hook(
                lambda mod, args, l=l: inputs.__setitem__(l, args[0].detach().float())))
            handles.append(blk.attn.hook_log_fgate.register_forward_hook(
                lambda mod, args, out, l=l: traces.__setitem__(l, out.detach().float())))
        # after the hook above (hooks run in the order registered): the last layer's attention, the layers after
        # it and the LM head are not run
        handles.append(model.blocks[chosen[-1]].attn.hook_log_fgate.register_forward_hook(enough))
        with torch.no_grad():
            model(tokens)
    except _Enough:
        pass
    finally:
        for h in handles:
            h.remove()
    return {l: traces[l] for l in chosen}, {l: inputs[l] for l in chosen}


def query_rows(T):
    """Query rows whose windows are reported: 256 evenly spaced in the second half of a T-token sequence."""
    return torch.arange(T // 2, T, max(1, T // 256))


def attention_mass_window(A, rows, L):
    """Attention-mass window: for each query row, the smallest d with sum_{j=i-d..i} A_ij >= 1 - e^-L.

    A: attention probabilities (..., R, T) float (any model: rows sum to 1 over keys, zero past the query);
    rows: (R,) int64 tensor, the query positions i of A's rows; L: float > 0 (the mass left outside is
    e^-L). Returns (..., R) int64; d = i means the window reaches the sequence start."""
    if not L > 0:
        raise ValueError(f"L must be > 0; got {L}")
    return _mass_window(A, rows, 1 - math.exp(-L))


def _mass_window(A, rows, level):
    """attention_mass_window with the mass level (1 - eps) given directly."""
    # suffix mass suf_j = sum_{j' >= j} A_ij' is the mass within distance i - j; the window is i - j*,
    # j* the largest j with suf_j >= 1 - eps (suf_0 = 1, and suf_j = 0 past the query); suf does not rise with j,
    # so j* + 1 counts the j with suf_j >= 1 - eps, which the reversed suffix sums count as well (no second flip)
    suf_rev = A.flip(-1).cumsum(-1)                                 # suf_rev[T - 1 - j] = suf_j
    jstar = (suf_rev >= level).sum(-1) - 1
    return rows.to(jstar.device) - jstar


@torch.no_grad()
def mass_windows(attn, x, L, rows):
    """Attention-mass window per head of a FoX attention layer `attn` (this package's): smallest d with
    sum_{j=i-d..i} A_ij >= 1 - e^-L, for query rows `rows` (R,) of layer inputs x (S, T, d). L > 0.
    Returns (S, R, H) int64. Uses the layer's own projections and gates (attention_mass_window does the rest)."""
    S, T, _ = x.shape
    H, D = attn.num_heads, attn.head_dim
    q = attn.q_proj(x).view(S, T, H, D)[:, rows].transpose(1, 2)                  # (S, H, R, D)
    k = attn.k_proj(x).view(S, T, H, D).transpose(1, 2)                            # (S, H, T, D)
    c = cum_log_gate(attn.log_fgate(x))                                            # (S, H, T) float64
    logits = fox_logits(q, k, c[:, :, rows], c, attn.scale, q_pos=rows, dtype=torch.float64)
    A = torch.softmax(logits, -1)                                                   # (S, H, R, T)
    return attention_mass_window(A, rows, L).transpose(1, 2)


def decay_window_summary(lg, L, rows):
    """Mean decay-only window of query `rows` ((R,) ints) of log-gate traces lg (S, T) (numpy or torch)
    at threshold L > 0, and the share of those windows that reach the sequence start (their mean then is
    a lower bound). Returns (mean, censored share) floats."""
    if isinstance(lg, torch.Tensor):
        lg = lg.detach().cpu().numpy()
    return decay_window_rows(gates.increments_from_log_gates(lg), L, rows)


def decay_window_rows(x, L, rows):
    """decay_window_summary from increments x = -log g (S, T) float64, validated: the windows of `rows` only
    (the same windows gates.windows gives those rows)."""
    x = np.asarray(x, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.int64)
    S, T = x.shape
    c = np.zeros(T + 1)
    W = np.empty((S, len(rows)), np.int64)
    for s in range(S):
        np.cumsum(x[s], out=c[1:])
        W[s] = gates.search_left(c, c[rows + 1] - L)              # smallest j with c_j >= c_i - L, i = row + 1
    cens = W == 0
    W = (rows + 1)[None, :] - W
    return float(W.mean()), float(cens.mean())


if __name__ == "__main__":
    raise SystemExit(outputs.describe(__doc__))
