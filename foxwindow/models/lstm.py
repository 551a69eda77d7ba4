"""LSTM forget gates: any torch.nn.LSTM / LSTMCell, and the textgenrnn character LSTM rebuilt in torch.

An LSTM unit keeps c_t = f_t c_{t-1} + i_t g_t, so what it held at token s is scaled by f_{s+1} ... f_t:
each unit is a gated memory with X_t = -log f_t, and the window laws apply to every unit's trace as to a
FoX head's (a "head" of an LSTM trace is one unit). The forget gate is
    f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)      (torch's gate order i, f, g, o)
recomputed here from the module's own weights, the input it was called with and the hidden states it
produced.

    lstm_log_forget(lstm, x, hx=None, units=None)     any nn.LSTM (any num_layers, batch_first either
                                                      way, proj_size): [(B, T, H) float32 log f per layer]
    cell_log_forget(cell, x, hx=None, units=None)     one nn.LSTMCell step: (B, H) float32 log f
    capture_lstm_gates(model, *inputs, units=None)    every nn.LSTM / nn.LSTMCell of a model, one forward:
                                                      {name: (B, T, H) float32} (a cell's calls stacked
                                                      over time)
    (these three live in models/lstm_gates.py; the "torch-lstm" family of models/adapters.py reads a
    batch_first nn.LSTM through adapters.capture_log_decays)

The textgenrnn character LSTM (textgenrnn==2.0.0, MIT; its weight file textgenrnn_weights.hdf5 and
vocabulary textgenrnn_vocab.json ship inside the package; only those two files are read, with h5py and
json: neither tensorflow nor textgenrnn's own code is imported):

    textgenrnn_files()                 the installed package's (weights, vocab) paths
    read_keras_lstm(path)              the embedding and LSTM layers of a Keras HDF5 weight file (each array at
                                       most MAX_ARRAY_BYTES, compressed ones measured before they are unpacked)
    read_vocab(path, n_classes)        textgenrnn's char -> id map, checked against the embedding
    KerasCharLSTM(weights)             the same network in torch: embedding -> LSTM_1 -> LSTM_2 -> ...
                                       (each layer's input is the previous layer's output; the
                                       concatenation [embedding, LSTM_1, LSTM_2] feeds only the
                                       attention / output head)
    encode_text / byte_table           text -> ids as textgenrnn maps it (see CHARACTER MAPPING)
    textgenrnn_traces(...)             the forget gates on the held-out split, as a trace dict + metadata
    main                               `python lstm_traces.py` (`foxwindow lstm-traces`): the trace file

KERAS WEIGHT LAYOUTS. A Keras LSTM layer stores kernel (in, 4u), recurrent_kernel (u, 4u) and bias, the
gate blocks in the order i, f, c, o (torch's i, f, g, o). Plain Keras LSTM: gates = x @ kernel + h @
recurrent_kernel + bias (bias (4u,)). CuDNNLSTM (bias (8u,) = input biases then recurrent biases; the
textgenrnn file): the layer hands cuDNN each gate's block as a flat buffer, which cuDNN reads as its
(u, in) and (u, u) row-major matrices, so W_g = kernel[:, g].reshape(u, in) (a plain transpose only when
in == u) and R_g = recurrent_kernel[:, g] as is; gates_g = W_g x + b_in_g + R_g h + b_rec_g, with
sigmoid for i, f, o and tanh for c. Keras converts these weights the same way when it loads a CuDNNLSTM
file into a CPU LSTM, which is what textgenrnn does without a GPU.

CHARACTER MAPPING (textgenrnn's textgenrnn_encode_sequence: `vocab.get(char, 0)`): each character is
looked up in the vocabulary (464 entries, ids 1..464); a character not in it gets id 0, which is also
the id of the left padding textgenrnn puts before short contexts. The id of the meta token '<s>' (464),
which textgenrnn puts before each of its training texts, never comes out of text (the string "<s>" is
three characters). The vocabulary has no '\\n', '\\t' or '\\r': every line break of the held-out text is id 0.
Bytes are mapped one id per byte (byte_table): an ASCII byte as its character, any other byte as 0 (the
held-out split is pure ASCII, so the trace's tokens are its bytes, aligned with data.heldout_tokens).

Caveat on the windows: textgenrnn trains and generates on contexts of its last 40 tokens, each read
from a zero state; the traces here run the LSTM continuously over 2048 characters (from a zero state at
each sequence start), the way an LSTM is read as a recurrence, so the units' gates beyond ~40 steps are
the network's behaviour outside its training regime.
"""
import importlib.util
import json
import os
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
from tqdm import tqdm

from foxwindow import outputs, parallel, safety
from foxwindow.models import traces
from foxwindow.models.lstm_gates import (  # noqa: F401  (the gate readers, re-exported)
    capture_lstm_gates,
    capture_rnn_gates,
    cell_log_forget,
    check_units,
    looks_forward,
    lstm_log_forget,
)
from foxwindow.training import data

__all__ = ["TEXTGENRNN", "TEXTGENRNN_PIP", "WEIGHTS_FILE", "VOCAB_FILE", "textgenrnn_files", "read_keras_weights",
           "read_embedding", "rnn_name", "layer_configs", "read_keras_lstm", "parse_units", "MAX_ARRAY_BYTES",
           "keras_to_torch", "read_vocab", "encode_text", "byte_table", "KerasCharLSTM", "load_textgenrnn",
           "spread_units", "textgenrnn_traces", "default_out", "build_parser", "heldout", "main"]

TEXTGENRNN = "textgenrnn==2.0.0"
TEXTGENRNN_PIP = f"pip install --no-deps {TEXTGENRNN}"
WEIGHTS_FILE, VOCAB_FILE = "textgenrnn_weights.hdf5", "textgenrnn_vocab.json"
# bytes one weight array of a Keras file may unpack to: the shipped files' largest is 0.75 MiB (reactionrnn's
# recurrent kernel; textgenrnn's output kernel 0.63 MiB), an LSTM of 4096 units has kernels of 256 MiB
MAX_ARRAY_BYTES = 256 << 20
# the HDF5 filters h5py writes, in its order (shuffle, one compression, fletcher32); any other is refused
FILTERS = {2: (0, "shuffle"), 1: (1, "gzip"), 32000: (1, "lzf"), 3: (2, "fletcher32")}


# ----------------------------------------------------------------------------- Keras weight files

def _h5py():
    try:
        import h5py  # h5py: the models extra
    except ImportError:
        raise ImportError("h5py is needed to read Keras weight files: pip install h5py") from None
    return h5py


def textgenrnn_files():
    """(weights path, vocab path) of the installed textgenrnn package, found without importing it (its
    __init__ imports tensorflow). Raises outputs.MissingPiece when the package or a file is absent."""
    spec = importlib.util.find_spec("textgenrnn")
    if spec is None or not spec.submodule_search_locations:
        raise outputs.MissingPiece(f"the textgenrnn package is not installed: {TEXTGENRNN_PIP} "
                                   "(only its weight and vocabulary files are read)")
    d = list(spec.submodule_search_locations)[0]
    paths = os.path.join(d, WEIGHTS_FILE), os.path.join(d, VOCAB_FILE)
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise outputs.MissingPiece(f"textgenrnn is installed without {missing}: reinstall {TEXTGENRNN}")
    return paths


def _names(path, attr, what):
    """The names of an HDF5 attribute as str; ValueError for bytes that are not UTF-8 or a name with control
    characters (layer names become the trace's layer names and are printed)."""
    out = []
    for v in np.atleast_1d(attr):
        try:
            name = v.decode() if isinstance(v, bytes) else str(v)
            name.encode()                   # h5py gives a variable-length name's bad bytes as surrogates
        except UnicodeError:
            raise ValueError(f"{path}: {what} {ascii(bytes(v) if isinstance(v, bytes) else str(v))[:60]} is not "
                             "UTF-8 text") from None
        out.append(_plain(path, what, name))
    return out


def _plain(path, what, v):
    """v, unless it holds control characters (an escape sequence, a line break): ValueError naming it escaped."""
    if safety.shown(v) != v:
        raise ValueError(f"{path}: {what} '{safety.shown(v)[:60]}' holds control characters; a name read from the "
                         "file is printed and stored in the trace file as it is")
    return v


def read_keras_weights(path):
    """The arrays of a Keras HDF5 weight file (model.save_weights, or model.save: its model_weights group):
    (weights {layer name: {weight name: ndarray}}, layer_names, keras_version str, model_config str or None).
    Raises FileNotFoundError, or ValueError for a file that is not a readable Keras weight file, a layer or
    weight name or keras_version that is not UTF-8 or holds control characters, a layer holding several weights
    of one name (a Bidirectional or other wrapper), or a weight that is not this file's own floating-point data
    of at most MAX_ARRAY_BYTES (see _array)."""
    h5py = _h5py()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Keras weight file not found: {path}")
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise ValueError(f"{path}: not a readable HDF5 file (corrupt or truncated?): {exc}") from None
    with fh:
        # links are checked before they are followed (an `in` test would already open an external link's file)
        root = _member(path, fh, fh, "model_weights", h5py) if fh.get("model_weights", getlink=True) else fh
        if "layer_names" not in root.attrs:
            raise ValueError(f"{path}: an HDF5 file but not a Keras weight file (no 'layer_names' attribute)")
        layer_names = _names(path, root.attrs["layer_names"], "layer name")
        weights, total = {}, [0]
        for ln in layer_names:
            g = _member(path, fh, root, ln, h5py)
            if g is None:
                raise ValueError(f"{path}: layer '{ln}' is listed but has no group")
            wn = _names(path, g.attrs.get("weight_names", []), f"layer '{ln}': weight name")
            try:
                weights[ln] = {w.split("/")[-1].split(":")[0]: _array(path, fh, g, ln, w, total, h5py) for w in wn}
            except (KeyError, OSError) as exc:
                raise ValueError(f"{path}: layer '{ln}': weights unreadable: {exc}") from None
            if len(weights[ln]) != len(wn):
                raise ValueError(f"{path}: layer '{ln}' holds several weights of one name ({wn[:6]}): a "
                                 "Bidirectional or other wrapper, not a plain LSTM layer")
        version = _names(path, fh.attrs.get("keras_version", root.attrs.get("keras_version", b"?")),
                         "keras_version")[0]
        config = fh.attrs.get("model_config")
    if config is not None:
        config = config.decode() if isinstance(config, bytes) else str(config)
    return weights, layer_names, version, config


def _member(path, fh, group, name, h5py):
    """group[name] (None when absent), each link on the way checked before it is followed: an external link
    would open another file."""
    cur = fh if name.startswith("/") else group
    parts = [p for p in name.split("/") if p]
    if not parts:                                           # an empty name names nothing (not the group itself)
        return None
    for part in parts:
        link = cur.get(part, getlink=True) if isinstance(cur, h5py.Group) else None
        if isinstance(link, h5py.ExternalLink):
            raise ValueError(f"{path}: '{name}' is a link to another file; weights are read from this file only")
        try:
            cur = cur[part] if link is not None else None
        except KeyError:                                    # a soft link to nothing
            cur = None
        if cur is None:
            return None
    return cur


def _array(path, fh, g, layer, name, total, h5py):
    """Weight `name` of layer group g as an ndarray, once it is known to be this file's own real numbers: no
    external raw storage, a floating-point dtype, at most MAX_ARRAY_BYTES, and bytes in the file for each element
    (a crafted shape of gigabytes in a file of kilobytes): for a dataset stored as is its storage, for a
    compressed one every chunk stored and unpacking to its own size (_chunks_fit); all of them fitting in
    memory."""
    ds = _member(path, fh, g, name, h5py)
    where = f"{path}: layer '{layer}': weight '{name}'"
    if not isinstance(ds, h5py.Dataset):
        raise ValueError(f"{where} is {'missing' if ds is None else 'not a dataset'}")
    if ds.external or ds.is_virtual:
        raise ValueError(f"{where} keeps its values in other files; weights are read from this file only")
    if ds.dtype.kind != "f":
        raise ValueError(f"{where} has dtype {ds.dtype}; weights are floating-point numbers")
    stored = ds.id.get_storage_size()
    plist = ds.id.get_create_plist()
    if plist.get_nfilters() == 0 and stored < ds.nbytes:
        raise ValueError(f"{where} has shape {ds.shape} ({ds.nbytes / 2 ** 20:.1f} MiB) but the file stores "
                         f"{stored / 2 ** 20:.1f} MiB of it: truncated or crafted")
    if ds.nbytes > MAX_ARRAY_BYTES:
        raise ValueError(f"{where} has shape {ds.shape} ({ds.nbytes / 2 ** 20:.1f} MiB), over the "
                         f"{MAX_ARRAY_BYTES >> 20} MiB read for one weight array")
    if plist.get_nfilters():
        _chunks_fit(where, ds, plist)
    total[0] += ds.nbytes
    safety.need_memory(total[0], f"{path}: the weights read so far")
    return np.asarray(ds[()])


def _chunks_fit(where, ds, plist):
    """A compressed dataset, checked before HDF5 unpacks it: only FILTERS in h5py's order, every chunk stored (a
    missing one would read as zeros), and each unpacking to exactly its chunk's bytes. HDF5's gzip and lzf
    filters grow their buffer to whatever a chunk holds, so a chunk of kilobytes could unpack to gigabytes;
    here gzip is unpacked with a cap and lzf's lengths are summed, neither past the chunk's size."""
    ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    for f in ids:
        if f not in FILTERS:
            raise ValueError(f"{where} is stored with HDF5 filter {f}; weights are read stored as is or with h5py's "
                             f"{', '.join(n for _, n in FILTERS.values())} filters")
    ranks = [FILTERS[f][0] for f in ids]
    if ranks != sorted(set(ranks)):
        raise ValueError(f"{where} is stored with the filters {[FILTERS[f][1] for f in ids]}; h5py writes at most "
                         "one compression, after shuffle and before fletcher32")
    size = int(np.prod(ds.chunks)) * ds.dtype.itemsize
    want = int(np.prod([-(-n // c) for n, c in zip(ds.shape, ds.chunks)]))
    if ds.id.get_num_chunks() != want:
        raise ValueError(f"{where} stores {ds.id.get_num_chunks()} of its {want} chunks: truncated or crafted")

    def check(info):
        mask, raw = ds.id.read_direct_chunk(info.chunk_offset)
        n = stored = len(raw)
        for k in reversed(range(len(ids))):                # reading undoes the last filter written first
            if mask >> k & 1:                              # a chunk the filter left as it was
                continue
            if ids[k] == 3:                                # fletcher32: a 4-byte checksum at the end
                raw, n = raw[:-4], n - 4
            elif ids[k] == 1:
                try:
                    n = len(zlib.decompressobj().decompress(raw, size + 1))
                except zlib.error as exc:
                    raise ValueError(f"{where}: a chunk's gzip data is corrupt ({exc})") from None
            elif ids[k] == 32000:
                n = _lzf_length(raw, size)
        if n > size:
            raise ValueError(f"{where}: a chunk of {stored} stored bytes unpacks to more than its {size} bytes: a "
                             "decompression bomb, or a corrupt file")
        if n < size:
            raise ValueError(f"{where}: a chunk unpacks to {n} of its {size} bytes: truncated or crafted")

    try:
        ds.id.chunk_iter(check)
    except AttributeError:                                 # HDF5 before 1.12.3: by index
        for i in range(want):
            check(ds.id.get_chunk_info(i))


def _lzf_length(data, cap):
    """The bytes an lzf stream unpacks to, counted until they pass cap (liblzf's format: a control byte c < 32
    is followed by c + 1 literal bytes; any other is a back reference of (c >> 5) + 2 bytes, 7 meaning one more
    length byte, then an offset byte)."""
    n = i = 0
    while i < len(data) and n <= cap:
        c = data[i]
        if c < 32:
            n, i = n + c + 1, i + c + 2
        else:
            long = c >> 5 == 7
            n += (c >> 5) + 2 + (data[i + 1] if long and i + 1 < len(data) else 0)
            i += 3 if long else 2
    return n


def rnn_name(path, ln):
    """A recurrent layer's name, which the torch rebuild takes as its module's (model.rnn[name]): ValueError for
    one torch cannot hold (a '.', or an attribute of nn.ModuleDict such as 'keys')."""
    if "." in ln or hasattr(nn.ModuleDict(), ln):
        raise ValueError(f"{path}: recurrent layer '{ln}' cannot name a torch module ('.' in it, or an attribute "
                         "of nn.ModuleDict); rename the layer")
    return ln


def read_embedding(path, weights, layer_names):
    """The one embedding matrix (V, E) of read_keras_weights' layers: ValueError unless it is two-dimensional,
    without an empty dimension, and finite."""
    emb = [ln for ln, w in weights.items() if "embeddings" in w]
    if len(emb) != 1:
        raise ValueError(f"{path}: expected one embedding layer; found {len(emb)} (layers: {layer_names})")
    E = weights[emb[0]]["embeddings"]
    if E.ndim != 2 or 0 in E.shape:
        raise ValueError(f"{path}: embedding '{emb[0]}' has shape {E.shape}; expected (vocab, dim), neither 0")
    if not np.isfinite(E).all():
        raise ValueError(f"{path}: embedding '{emb[0]}' has NaN or infinite entries")
    return E


def layer_configs(path, config):
    """{layer name: its config dict} of a full-model file's model_config JSON ({} without one); ValueError when
    the config is not the JSON object Keras writes."""
    if config is None:
        return {}
    try:
        doc = json.loads(config)
    except safety.JSON_ERRORS as exc:
        raise ValueError(f"{path}: model_config is not valid JSON ({safety.json_error(exc)})") from None
    layers = doc.get("config", {}) if isinstance(doc, dict) else None
    layers = layers.get("layers", []) if isinstance(layers, dict) else None
    if not isinstance(layers, list) or not all(isinstance(c, dict) and isinstance(c.get("config", {}), dict)
                                               for c in layers):
        raise ValueError(f"{path}: model_config is not a Keras model config (an object whose config.layers is a "
                         "list of objects)")
    return {c["config"]["name"]: c["config"] for c in layers
            if isinstance(c.get("config", {}).get("name"), str)}


def read_keras_lstm(path):
    """The embedding and LSTM layers of a Keras HDF5 weight file (model.save_weights, or model.save:
    its model_weights group), in the file's layer order.

    Returns a dict: embedding (V, E) float32 ndarray; layers [{name, kernel (in, 4u), recurrent_kernel
    (u, 4u), bias (4u,) or (8u,), cudnn (bias is 8u: CuDNNLSTM), units}] float32 ndarrays, each layer's
    input width the previous one's units (the first's, E); head: {"attention": (E + sum u, 1),
    "kernel": (E + sum u, V), "bias": (V,)} when the file has textgenrnn's attention and output layers,
    else None; layer_names (all layers); keras_version.
    Raises ValueError naming the problem: not a readable HDF5 file, no Keras layer list, no embedding, no
    LSTM layer, an RNN whose shapes are not an LSTM's (e.g. a GRU's 3 gates), bidirectional layers, NaN
    weights, layers that do not chain, a name with control characters or one torch cannot take (rnn_name), or
    a weight over MAX_ARRAY_BYTES or compressed so that it would unpack past its size (read_keras_weights).
    """
    weights, layer_names, version, config = read_keras_weights(path)
    E = read_embedding(path, weights, layer_names)
    rnn = [ln for ln, w in weights.items() if any(k.endswith("recurrent_kernel") for k in w)]
    if not rnn:
        raise ValueError(f"{path}: no recurrent layer (no recurrent_kernel weights) in {layer_names}: "
                         "not an LSTM model")
    configs = layer_configs(path, config)
    layers, width = [], E.shape[1]
    for ln in rnn:
        w = weights[rnn_name(path, ln)]
        if set(w) != {"kernel", "recurrent_kernel", "bias"}:
            raise ValueError(f"{path}: layer '{ln}' has weights {sorted(w)}; an LSTM layer has kernel, "
                             "recurrent_kernel and bias (a Bidirectional wrapper or a layer without bias is not "
                             "supported)")
        k, rk, b = (w[n].astype(np.float32) for n in ("kernel", "recurrent_kernel", "bias"))
        if rk.ndim != 2 or k.ndim != 2 or b.ndim != 1 or 0 in rk.shape or rk.shape[1] % rk.shape[0]:
            raise ValueError(f"{path}: layer '{ln}': kernel {k.shape}, recurrent_kernel {rk.shape}, bias {b.shape} "
                             "are not an LSTM's (in, 4u), (u, 4u), (4u or 8u,)")
        u = rk.shape[0]
        gates = rk.shape[1] // u
        if gates != 4:
            raise ValueError(f"{path}: layer '{ln}' has {gates} gates (recurrent_kernel {rk.shape}); an LSTM has 4"
                             + (" (this is a GRU)" if gates == 3 else ""))
        if k.shape[1] != 4 * u or b.shape[0] not in (4 * u, 8 * u):
            raise ValueError(f"{path}: layer '{ln}': kernel {k.shape} / bias {b.shape} do not match {u} units")
        if k.shape[0] != width:
            raise ValueError(f"{path}: layer '{ln}' takes inputs of width {k.shape[0]}, but the layer before it gives "
                             f"{width}: not a plain stack embedding -> LSTM -> LSTM")
        for n, a in (("kernel", k), ("recurrent_kernel", rk), ("bias", b)):
            if not np.isfinite(a).all():
                raise ValueError(f"{path}: layer '{ln}': {n} has NaN or infinite entries")
        layers.append(dict(name=ln, kernel=k, recurrent_kernel=rk, bias=b, cudnn=b.shape[0] == 8 * u, units=u))
        width = u
    for ln, c in configs.items():                           # a full-model file says which activations it used
        if ln in rnn and c.get("recurrent_activation", "sigmoid") != "sigmoid":
            raise ValueError(f"{path}: layer '{ln}' uses recurrent_activation "
                             f"{c['recurrent_activation']!r}; only sigmoid gates are rebuilt")
    head = None
    att = [w for w in weights.values() if set(w) == {"attention_W"}]
    outl = weights.get("output", {})
    if len(att) == 1 and set(outl) == {"kernel", "bias"}:
        head = {"attention": att[0]["attention_W"].astype(np.float32), "kernel": outl["kernel"].astype(np.float32),
                "bias": outl["bias"].astype(np.float32)}
        cat = E.shape[1] + sum(lyr["units"] for lyr in layers)
        if head["attention"].shape != (cat, 1) or head["kernel"].shape != (cat, E.shape[0]):
            head = None                                     # not textgenrnn's head: the gates do not need it
    return dict(embedding=E.astype(np.float32), layers=layers, head=head, layer_names=layer_names,
                keras_version=version)


def keras_to_torch(layer):
    """One Keras LSTM layer (a read_keras_lstm entry) as torch nn.LSTM parameters, float32 tensors:
    (weight_ih (4u, in), weight_hh (4u, u), bias_ih (4u,), bias_hh (4u,)), gate blocks i, f, g, o.
    CuDNNLSTM: each gate's kernel block read as cuDNN reads its buffer (the module docstring)."""
    k, rk, b, u = layer["kernel"], layer["recurrent_kernel"], layer["bias"], layer["units"]
    n_in = k.shape[0]
    if layer["cudnn"]:
        w_ih = np.concatenate([np.ascontiguousarray(k[:, g * u:(g + 1) * u]).reshape(u, n_in) for g in range(4)])
        w_hh = np.concatenate([rk[:, g * u:(g + 1) * u] for g in range(4)])
        b_ih, b_hh = b[:4 * u], b[4 * u:]
    else:
        w_ih, w_hh, b_ih, b_hh = k.T, rk.T, b, np.zeros_like(b)
    return tuple(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for a in (w_ih, w_hh, b_ih, b_hh))


def read_vocab(path, n_classes=None):
    """textgenrnn's vocabulary file: {character (or '<s>'): id}, ids 1 .. len, 0 left for padding and
    unknown characters. n_classes: the embedding's rows, which must be len + 1 (textgenrnn's num_classes).
    Returns the dict. Raises ValueError naming the problem."""
    try:
        with open(path, encoding="utf-8") as fh:
            vocab = json.load(fh)
    except FileNotFoundError:
        raise
    except safety.JSON_ERRORS as exc:
        raise ValueError(f"{path}: not a JSON vocabulary: {safety.json_error(exc)}") from None
    if not isinstance(vocab, dict) or not vocab or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in vocab.items()):
        raise ValueError(f"{path}: a vocabulary is a JSON object of string -> int")
    ids = sorted(vocab.values())
    if ids != list(range(1, len(vocab) + 1)):
        raise ValueError(f"{path}: ids must be 1 .. {len(vocab)}, each once (0 is padding/unknown)")
    if n_classes is not None and n_classes != len(vocab) + 1:
        raise ValueError(f"{path}: {len(vocab)} entries + padding = {len(vocab) + 1} ids, but the embedding has "
                         f"{n_classes} rows: the vocabulary is not this weight file's")
    return vocab


def encode_text(text, vocab):
    """ids (T,) int64 of str `text` as textgenrnn maps it: vocab.get(char, 0) per character (0: unknown,
    also the padding id). '<s>' in text is three characters, never the meta token."""
    return torch.tensor([vocab.get(c, 0) for c in text], dtype=torch.int64)


def byte_table(vocab):
    """(256,) int64 lookup: byte b -> vocab.get(chr(b), 0) for ASCII b, 0 for any other byte (one id per
    byte, so ids stay aligned with the byte windows of foxwindow.training.data)."""
    return torch.tensor([vocab.get(chr(b), 0) if b < 128 else 0 for b in range(256)], dtype=torch.int64)


class KerasCharLSTM(nn.Module):
    """A Keras character LSTM stack (read_keras_lstm) in torch: embedding -> LSTM_1 -> ... -> LSTM_n, each
    layer a single-layer batch_first nn.LSTM (`self.rnn[name]`, the Keras layer name) fed the previous one's
    hidden states, sigmoid gates, zero initial state. float32.

    forward(ids (B, T) int64 in [0, V)) -> [hidden states (B, T, u_l) of each layer].
    next_char_logprobs(ids (B, T)) -> (B, V) float32: textgenrnn's prediction after the T tokens
    (attention-weighted average of [embedding, h_1, .., h_n] over time, then the softmax output layer);
    only when the file had that head. textgenrnn feeds it the last 40 ids, left-padded with 0.
    """

    def __init__(self, weights):
        super().__init__()
        E = torch.from_numpy(weights["embedding"])
        self.embedding = nn.Embedding(E.shape[0], E.shape[1])
        self.rnn = nn.ModuleDict()
        with torch.no_grad():
            self.embedding.weight.copy_(E)
            for lyr in weights["layers"]:
                w_ih, w_hh, b_ih, b_hh = keras_to_torch(lyr)
                m = nn.LSTM(w_ih.shape[1], lyr["units"], batch_first=True)
                m.weight_ih_l0.copy_(w_ih)
                m.weight_hh_l0.copy_(w_hh)
                m.bias_ih_l0.copy_(b_ih)
                m.bias_hh_l0.copy_(b_hh)
                self.rnn[lyr["name"]] = m
        self.head = None
        if weights.get("head") is not None:
            self.head = nn.ParameterDict({k: nn.Parameter(torch.from_numpy(v), requires_grad=False)
                                          for k, v in weights["head"].items()})
        self.vocab_size = E.shape[0]
        self.eval()

    def _ids(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.int64:
            raise ValueError(f"ids must be a (B, T) int64 tensor; got "
                             f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}"
                             f"{' ' + str(ids.dtype) if isinstance(ids, torch.Tensor) else ''}")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"ids must lie in [0, {self.vocab_size}); got [{ids.min().item()}, {ids.max().item()}]")
        return ids

    def forward(self, ids):
        x = self.embedding(self._ids(ids))
        hs = []
        for m in self.rnn.values():
            x, _ = m(x)
            hs.append(x)
        return hs

    def next_char_logprobs(self, ids):
        if self.head is None:
            raise ValueError("this weight file has no attention/output head: only the LSTM gates can be read")
        seq = torch.cat([self.embedding(self._ids(ids))] + self.forward(ids), dim=-1)    # (B, T, E + sum u)
        a = torch.softmax(seq @ self.head["attention"][:, 0], dim=1)                      # (B, T)
        return torch.log_softmax((seq * a.unsqueeze(-1)).sum(1) @ self.head["kernel"] + self.head["bias"], dim=-1)


def load_textgenrnn(weights_path=None, vocab_path=None):
    """(KerasCharLSTM, vocab, info) of textgenrnn's shipped model (or the given files); info holds the
    paths, keras_version and the layer names/units."""
    if weights_path is None or vocab_path is None:
        w, v = textgenrnn_files()
        weights_path, vocab_path = weights_path or w, vocab_path or v
    wts = read_keras_lstm(weights_path)
    vocab = read_vocab(vocab_path, n_classes=wts["embedding"].shape[0])
    info = dict(weights=weights_path, vocab=vocab_path, keras_version=wts["keras_version"],
                layers=[lyr["name"] for lyr in wts["layers"]], units=[lyr["units"] for lyr in wts["layers"]],
                cudnn=[lyr["cudnn"] for lyr in wts["layers"]])
    return KerasCharLSTM(wts), vocab, info


# ----------------------------------------------------------------------------- the held-out trace file

def spread_units(n, hidden):
    """n unit indices spread evenly over [0, hidden): round(k * hidden / n), k = 0 .. n - 1."""
    if not 1 <= n <= hidden:
        raise ValueError(f"units per layer must lie in [1, {hidden}]; got {n}")
    return [round(k * hidden / n) for k in range(n)]


def textgenrnn_traces(n_seq=32, seq_len=2048, units=None, batch=32, weights_path=None, vocab_path=None,
                      progress=False):
    """Forget gates of the textgenrnn LSTM on the held-out split (data.heldout_tokens: the windows the FoX
    model is analysed on), each sequence from a zero state.

    units: None (all) or unit indices kept in every layer. batch: sequences per forward.
    Returns (traces {Keras layer name: (n_seq, seq_len, H) float32 ndarray of log f}, meta dict for
    traces.save_trace: model, layers, units, heads, spans, seq_len, n_seq, unknown_fraction, mapping).
    """
    model, vocab, info = load_textgenrnn(weights_path, vocab_path)
    toks, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    ids = byte_table(vocab)[toks]                                                  # (S, T) int64
    names = list(model.rnn)
    sel = None if units is None else check_units(units, min(info["units"]), "units")
    parts = {n: [] for n in names}
    for s in tqdm(range(0, n_seq, batch), desc="textgenrnn gates", unit="batch", disable=not progress,
                  file=sys.stderr):
        cap = capture_lstm_gates(model, ids[s:s + batch], units=sel)
        for n in names:
            parts[n].append(cap[f"rnn.{n}"].numpy())
    traces = {n: np.concatenate(parts[n]) for n in names}
    H = {v.shape[2] for v in traces.values()}
    meta = dict(model=f"textgenrnn 2.0.0 character LSTM ({len(names)} x {info['units'][0]}, "
                      f"{os.path.basename(info['weights'])}, Keras {info['keras_version']})",
                family="torch-lstm", layers=names, units=sel if sel is not None else "all",
                unit_count=info["units"], seq_len=seq_len, n_seq=n_seq, spans=spans,
                unknown_fraction=float((ids == 0).float().mean()), newline_fraction=float((toks == 10).float().mean()),
                mapping="one id per byte: ASCII byte -> vocab.get(char, 0), other bytes -> 0; '\\n' is not in the "
                        "vocabulary (id 0, as textgenrnn maps it)",
                state="zero state at each sequence start; the LSTM runs continuously over the sequence")
    if len(H) == 1:
        meta["heads"] = H.pop()
    return traces, meta


def default_out():
    return os.path.join(outputs.run_dir("lstm-traces"), "textgenrnn_traces.npz")


def build_parser():
    p = outputs.parser("Capture the forget gates of the textgenrnn character LSTM (2 x 128 units) on the held-out "
                       "split as a trace file for `python forget.py --traces FILE`.")
    p.add_argument("--out", default=None, help="trace file (.npz) to write; None: a fresh "
                   "runs/lstm-traces-<time>/textgenrnn_traces.npz (the committed one: --out "
                   "results/lstm/textgenrnn_16units.npz --force)")
    p.add_argument("--n-seq", type=int, default=32, help="held-out sequences")
    p.add_argument("--seq-len", type=int, default=2048, help="characters per sequence")
    p.add_argument("--units", default="16", help="units per layer: N spread evenly over the layer (16: units 0, 8, "
                   ".., 120; a 32 x 2048 file of 2 x 16 units is 8.4 MB), 'all' (2 x 128 units, 67 MB), or a "
                   "comma list of unit indices ('3,17'; one unit: '5,')")
    p.add_argument("--batch", type=int, default=32, help="sequences per forward")
    p.add_argument("--weights", default=None, help="Keras HDF5 weight file; None: the installed textgenrnn's")
    p.add_argument("--vocab", default=None, help="vocabulary JSON; None: the installed textgenrnn's")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads; None: torch's choice")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    outputs.add_common(p)
    return p


def parse_units(spec, hidden=None):
    """--units: 'all' -> None; 'N' -> N units spread over each layer; '3,17' (a comma anywhere) -> those unit
    indices. hidden: the layers' (smallest) unit count; None checks only the form (before the weights are read).
    UsageError naming --units, what it takes and what was given."""
    s = spec.strip()
    if s == "all":
        return None
    listed = "," in s
    parts = [p.strip() for p in s.split(",") if p.strip()] if listed else [s] if s else []
    if not parts:
        raise _units_error(spec, hidden, "no unit" if s else "empty")
    if not all(p.isascii() and p.isdigit() for p in parts):     # int() would also take '1_0', '+3', '٣'
        raise _units_error(spec, hidden, "not a whole number >= 0")
    if hidden is None:
        return parts
    nums = [int(p) if len(p) < 10 else hidden + 1 for p in parts]   # ten digits: past any layer (and int's limit)
    if not listed:
        if not 1 <= nums[0] <= hidden:
            raise _units_error(spec, hidden, f"the layers have {hidden} units")
        return spread_units(nums[0], hidden)
    past = [p for p, u in zip(parts, nums) if u >= hidden]
    if past:
        raise _units_error(spec, hidden, f"unit {past[0][:12]} is past the layers' {hidden} units")
    if len(set(nums)) != len(nums):
        raise _units_error(spec, hidden, f"unit {next(u for u in nums if nums.count(u) > 1)} is listed twice")
    return nums


def _units_error(spec, hidden, why):
    n, last = ((f" 1 .. {hidden}", f" 0 .. {hidden - 1}") if hidden is not None else
               (" up to the layers' unit count", " below it"))
    return outputs.UsageError(f"--units takes 'all', a number of units{n} spread over each layer, or unit "
                              f"indices{last} separated by commas ('3,17'; one unit: '5,'); got "
                              f"'{safety.shown(spec)[:40]}' ({why})")


def heldout(n_seq, seq_len):
    """The held-out tokens of --n-seq windows of --seq-len bytes; UsageError naming both when the split is short."""
    try:
        return data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)[0]
    except ValueError as exc:
        raise outputs.UsageError(f"--n-seq {n_seq} --seq-len {seq_len}: {exc}") from None


def main(argv=None):
    """`python lstm_traces.py`: write the held-out forget-gate trace file of the textgenrnn LSTM."""
    a = build_parser().parse_args(argv)
    outputs.positive("--n-seq", a.n_seq, lo=3)
    outputs.positive("--seq-len", a.seq_len, lo=16)
    outputs.positive("--batch", a.batch)
    if a.threads is not None:
        parallel.threads_arg("--threads", a.threads)
        torch.set_num_threads(a.threads)
    parse_units(a.units)                                       # its form, before the weights are read
    for flag in ("weights", "vocab"):
        if getattr(a, flag):
            setattr(a, flag, outputs.input_file(f"--{flag}", getattr(a, flag)))
    out = a.out
    if out is not None:
        out = outputs.check_writable(out, force=a.force, what="--out")
    heldout(a.n_seq, a.seq_len)
    try:                                                       # everything checked before any work
        _, _, info = load_textgenrnn(a.weights, a.vocab)
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    units = parse_units(a.units, min(info["units"]))
    if out is None:
        out = outputs.check_writable(default_out(), what="--out")
    t0 = time.perf_counter()
    tr, meta = textgenrnn_traces(a.n_seq, a.seq_len, units, a.batch, a.weights, a.vocab, progress=not a.no_progress)
    meta["capture_s"] = round(time.perf_counter() - t0, 2)
    traces.save_trace(out, tr, meta, force=True)       # out: checked (and --force) above
    H = ", ".join(f"{n} {v.shape[2]}" for n, v in tr.items())
    print(f"textgenrnn forget gates: {a.n_seq} x {a.seq_len} held-out characters, units per layer: {H}; "
          f"{100 * meta['unknown_fraction']:.2f}% of characters map to id 0 (outside the vocabulary; line breaks: "
          f"{100 * meta['newline_fraction']:.2f}%); captured in {meta['capture_s']:.1f} s")
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB): python forget.py --traces {out}")


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
