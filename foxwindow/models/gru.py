"""GRU update gates: any torch.nn.GRU / GRUCell, Keras GRU weight files, and the reactionrnn character GRU.

A GRU's update gate is a retention gate. torch: h_t = (1 - z_t) n_t + z_t h_{t-1}; Keras: h_t = z_t h_{t-1} +
(1 - z_t) h~_t (the same form). What a unit held at token s is scaled by z_{s+1} ... z_t (plus what the
candidate writes), so each unit is a gated memory with X_t = -log z_t, and the window laws apply to every unit's
trace as to an LSTM unit's (a "head" of a GRU trace is one unit). torch's gate order is r, z, n:
    z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
recomputed from the module's own weights, its input and the hidden states it produced (models/lstm_gates.py reruns
each layer with the same fused op).

    gru_log_update(gru, x, hx=None, units=None)       any nn.GRU (num_layers, batch_first either way,
                                                      bidirectional): [(B, T, H) float32 log z per layer and
                                                      direction]
    cell_log_update(cell, x, hx=None, units=None)     one nn.GRUCell step: (B, H) float32 log z
    lstm_gates.capture_rnn_gates(model, *inputs)     every nn.LSTM / LSTMCell / GRU / GRUCell of a model

BIDIRECTIONAL modules: each direction is its own layer of the trace; the backward one ("<layer>.reverse") is
stored in its reading order (last token first), so its windows, read back along the trace as every window is,
look forward in the text. Trace metadata lists those layers under "looks_forward", and `forget.py --traces`
labels them.

KERAS GRU (read with h5py; no Keras or tensorflow is imported). A layer stores kernel (in, 3u),
recurrent_kernel (u, 3u) and bias, gate blocks z, r, h:
    z = ra(x K_z + b_z + h U_z + rb_z)   r = ra(x K_r + b_r + h U_r + rb_r)
    reset_after=False (bias (3u,), Keras 2 before 2.3):  h~ = tanh(x K_h + b_h + (r * h) U_h)
    reset_after=True (bias (2, 3u): input then recurrent biases; tf.keras 2 / Keras >= 2.3; also CuDNNGRU,
        whose flat (6u,) bias and per-gate kernel blocks are read as Keras converts them):
        h~ = tanh(x K_h + b_h + r * (h U_h + rb_h))     (torch's nn.GRU form)
    h_t = z h_{t-1} + (1 - z) h~
with ra the recurrent activation: 'sigmoid', or 'hard_sigmoid' = clip(0.2 x + 0.5, 0, 1), the default of
Keras before 2.3 (a weight file without a model config is read with its Keras version's default). A hard
sigmoid reaches z = 0 (X = +inf: the unit erases its state in one step) and z = 1 (X = 0); the trace stores
log z clamped at HARD_FLOOR (finite; below -L for every eps foxwindow scans, so the windows are exact), and
the metadata counts such steps.

reactionrnn (reactionrnn==0.1, MIT, Max Woolf): a character GRU(256) (Keras 2.0.6, hard-sigmoid gates, the
reset_after=False form), embedding 401 x 100, and a 5-way reaction head (love / wow / haha / sad / angry),
trained on texts of at most 140 characters, each read from a zero state after left padding (id 0) to 140.
Only its reactionrnn_weights.hdf5 and reactionrnn_vocab.json are read (from the installed package or the
source archive `pip download --no-deps --no-binary :all: reactionrnn==0.1`): its code imports keras.

    reactionrnn_files(archive=None)     (weights, vocab) paths: installed package, or extracted from the sdist
    read_keras_gru(path)                the embedding and GRU layers of a Keras HDF5 weight file
    KerasCharGRU(weights)               the network in torch (float32, explicit time loop), with log z
    reactionrnn_traces(...)             the update gates on the held-out split: trace dict + metadata
    main                                `python gru_traces.py` (`foxwindow gru-traces`): the trace file

CHARACTER MAPPING: reactionrnn's Tokenizer(char_level=True) looks each character up in the vocabulary (400
entries, ids 1..400, case-sensitive as in Keras 2.0.x) and drops characters it lacks; the held-out split has
none it lacks (every byte of it is in the vocabulary, '\\n' included), so the trace's tokens are its bytes.
Caveat: reactionrnn read at most 140 characters from a zero state; the traces run it continuously over 2048,
so the gates beyond ~140 steps are the network outside its training regime.
"""
import atexit
import importlib.util
import os
import shutil
import sys
import tarfile
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from foxwindow import outputs, parallel
from foxwindow.models import lstm, lstm_gates, traces
from foxwindow.training import data

REACTIONRNN = "reactionrnn==0.1"
REACTIONRNN_PIP = f"pip install --no-deps {REACTIONRNN}"
REACTIONRNN_DOWNLOAD = f"pip download --no-deps --no-binary :all: {REACTIONRNN}"
WEIGHTS_FILE, VOCAB_FILE = "reactionrnn_weights.hdf5", "reactionrnn_vocab.json"
TRAINING_LENGTH = 140                       # reactionrnn.MAXLEN: the texts it was trained and reads on
HARD_FLOOR = -30.0                          # log z stored for z = 0 (hard sigmoid): below -L for eps >= 1e-13
ACTIVATIONS = ("sigmoid", "hard_sigmoid")


# ----------------------------------------------------------------------------- any torch.nn.GRU / GRUCell

def gru_log_update(gru, x, hx=None, units=None, output=None, return_hidden=False):
    """Log update gates of every layer (and direction) of `gru` (a torch.nn.GRU) on input `x`.

    x: (B, T, in) when gru.batch_first, (T, B, in) otherwise, or unbatched (T, in). hx: the h0 the module was
    called with ((num_layers * directions, B, H); unbatched without B) or None (zeros). units: None or unit
    indices kept in every layer. output: the module's own output for (x, hx), if at hand (its layout).
    log z_t = logsigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz) from each layer's inputs and hidden states
    (every layer rerun with its own weights, the last checked against `output` when given).
    Returns [log z: (B, T, H) float32 CPU tensor, entries <= 0] for layer 0, 1, ..; a bidirectional module
    gives two per layer (forward, then backward), the backward one time reversed (entry t is the gate at
    token T - 1 - t: its windows look forward in the text). With return_hidden also each layer's hidden states.
    Raises ValueError for a module that is not an nn.GRU, dropout in training mode, a wrong input layout, bad
    units, or a rerun that does not reproduce `output`.
    """
    lstm_gates.check_rnn(gru, "gru")
    res, hiddens = lstm_gates.rnn_log_gate(gru, x, hx, units, output)
    logs = [lg for _, _, lg in res]
    return (logs, hiddens) if return_hidden else logs


def cell_log_update(cell, x, hx=None, units=None):
    """Log update gate of one torch.nn.GRUCell step: logsigmoid(W_iz x + b_iz + W_hz h + b_hz).

    x: (B, in) or unbatched (in,); hx: the h the cell was called with ((B, H)) or None (zeros). Returns (B, H)
    float32 CPU tensor. Raises ValueError for a module that is not an nn.GRUCell or a wrong input shape."""
    return lstm_gates.cell_log_gate(cell, x, hx, units, nn.GRUCell)


# ----------------------------------------------------------------------------- Keras GRU weight files

def _keras_major_minor(version):
    try:
        return tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return None


def default_activation(version):
    """Keras's default GRU recurrent_activation for a file saved by Keras `version`: 'hard_sigmoid' before 2.3,
    'sigmoid' from 2.3 (and for an unknown version: tf.keras's)."""
    mm = _keras_major_minor(version)
    return "hard_sigmoid" if mm is not None and mm < (2, 3) else "sigmoid"


def read_keras_gru(path, recurrent_activation=None):
    """The embedding and GRU layers of a Keras HDF5 weight file, in the file's layer order.

    recurrent_activation: None (the model config's when the file has one, else default_activation of the
    file's Keras version), 'sigmoid' or 'hard_sigmoid'.
    Returns a dict: embedding (V, E) float32; layers [{name, units, kernel (in, 3u), recurrent_kernel (u, 3u),
    b_in (3u,), b_rec (3u,) (zeros for reset_after=False), reset_after, cudnn, activation}] with CuDNNGRU
    kernels already converted to the Keras layout; head {"kernel", "bias"} of a dense layer on the last GRU
    when present, else None; layer_names; keras_version; activation_source ('config', 'given' or
    'Keras <version> default').
    Raises ValueError naming the problem: no embedding, no GRU layer (an LSTM's 4 gates are named), a bias
    layout that is none of (3u,), (2, 3u), (6u,), NaN weights, layers that do not chain, an activation other
    than sigmoid / hard_sigmoid, and lstm.read_keras_weights' refusals (names with control characters, a weight
    over lstm.MAX_ARRAY_BYTES or compressed so that it would unpack past its size) and lstm.rnn_name's.
    """
    weights, layer_names, version, config = lstm.read_keras_weights(path)
    E = lstm.read_embedding(path, weights, layer_names)
    rnn = [ln for ln, w in weights.items() if any(k.endswith("recurrent_kernel") for k in w)]
    if not rnn:
        raise ValueError(f"{path}: no recurrent layer (no recurrent_kernel weights) in {layer_names}: not a GRU model")
    cfg = lstm.layer_configs(path, config)
    if recurrent_activation is not None and recurrent_activation not in ACTIVATIONS:
        raise ValueError(f"recurrent_activation must be one of {ACTIVATIONS}; got {recurrent_activation!r}")
    layers, width = [], E.shape[1]
    for ln in rnn:
        w = weights[lstm.rnn_name(path, ln)]
        if set(w) != {"kernel", "recurrent_kernel", "bias"}:
            raise ValueError(f"{path}: layer '{ln}' has weights {sorted(w)}; a GRU layer has kernel, recurrent_kernel "
                             "and bias (a layer without bias is not supported)")
        k, rk, b = (w[n].astype(np.float32) for n in ("kernel", "recurrent_kernel", "bias"))
        if rk.ndim != 2 or k.ndim != 2 or 0 in rk.shape or rk.shape[1] % rk.shape[0]:
            raise ValueError(f"{path}: layer '{ln}': kernel {k.shape}, recurrent_kernel {rk.shape} are not a GRU's "
                             "(in, 3u), (u, 3u)")
        u = rk.shape[0]
        if rk.shape[1] != 3 * u:
            hint = " (this is an LSTM: foxwindow.models.lstm.read_keras_lstm)" if rk.shape[1] == 4 * u else ""
            raise ValueError(f"{path}: layer '{ln}' has {rk.shape[1] // u} gates (recurrent_kernel {rk.shape}); a GRU "
                             "has 3" + hint)
        if k.shape[1] != 3 * u:
            raise ValueError(f"{path}: layer '{ln}': kernel {k.shape} does not match {u} units")
        cudnn = False
        if b.shape == (3 * u,):
            reset_after, b_in, b_rec = False, b, np.zeros_like(b)
        elif b.shape == (2, 3 * u):
            reset_after, b_in, b_rec = True, b[0], b[1]
        elif b.shape == (6 * u,):                           # CuDNNGRU: Keras's conversion to GRU(reset_after=True)
            reset_after, cudnn, b_in, b_rec = True, True, b[:3 * u], b[3 * u:]
            k = np.hstack([kg.T.reshape(kg.shape, order="F") for kg in np.hsplit(k, 3)])
            rk = np.hstack([rg.T for rg in np.hsplit(rk, 3)])
        else:
            raise ValueError(f"{path}: layer '{ln}': bias {b.shape} is none of a GRU's layouts (3u,) = ({3 * u},) "
                             f"(reset_after=False), (2, 3u) (reset_after=True) or (6u,) (CuDNNGRU)")
        if k.shape[0] != width:
            raise ValueError(f"{path}: layer '{ln}' takes inputs of width {k.shape[0]}, but the layer before it gives "
                             f"{width}: not a plain stack embedding -> GRU -> GRU")
        for n, a in (("kernel", k), ("recurrent_kernel", rk), ("bias", b)):
            if not np.isfinite(a).all():
                raise ValueError(f"{path}: layer '{ln}': {n} has NaN or infinite entries")
        c = cfg.get(ln, {})
        if "reset_after" in c and c["reset_after"] is not reset_after:
            raise ValueError(f"{path}: layer '{ln}': the config says reset_after={c['reset_after']!r}, the bias "
                             f"{b.shape} says {reset_after}")
        if recurrent_activation is not None:
            act, src = recurrent_activation, "given"
        elif cudnn:
            act, src = "sigmoid", "CuDNNGRU"
        elif "recurrent_activation" in c:
            act, src = c["recurrent_activation"], "config"
        else:
            act, src = default_activation(version), f"Keras {version} default"
        if act not in ACTIVATIONS:
            raise ValueError(f"{path}: layer '{ln}' uses recurrent_activation {act!r}; only {ACTIVATIONS} are rebuilt")
        layers.append(dict(name=ln, units=u, kernel=np.ascontiguousarray(k), recurrent_kernel=np.ascontiguousarray(rk),
                           b_in=b_in, b_rec=b_rec, reset_after=reset_after, cudnn=cudnn, activation=act,
                           activation_source=src))
        width = u
    head = None
    dense = [w for ln, w in weights.items() if set(w) == {"kernel", "bias"} and ln not in rnn]
    if len(dense) == 1 and dense[0]["kernel"].ndim == 2 and dense[0]["kernel"].shape[0] == width:
        head = {n: dense[0][n].astype(np.float32) for n in ("kernel", "bias")}
    return dict(embedding=E.astype(np.float32), layers=layers, head=head, layer_names=layer_names,
                keras_version=version)


def _act(z, kind):
    return torch.sigmoid(z) if kind == "sigmoid" else (0.2 * z + 0.5).clamp(0.0, 1.0)


def _log_act(z, kind):
    """log of the recurrent activation, float32: logsigmoid, or log(hard_sigmoid) with log 0 -> HARD_FLOOR."""
    if kind == "sigmoid":
        return F.logsigmoid(z)
    g = (0.2 * z + 0.5).clamp(0.0, 1.0)
    return torch.where(g > 0, torch.log(g.clamp_min(1e-38)), torch.full_like(g, HARD_FLOOR)).clamp_min(HARD_FLOOR)


class KerasGRU(nn.Module):
    """One Keras GRU layer (a read_keras_gru entry) in torch, float32, zero initial state, an explicit time loop
    (both reset_after forms, sigmoid or hard_sigmoid gates).

    forward(x (B, T, in)) -> (h (B, T, u), log z (B, T, u) float32, entries <= 0, log 0 stored as HARD_FLOOR)."""

    def __init__(self, layer):
        super().__init__()
        for n in ("kernel", "recurrent_kernel", "b_in", "b_rec"):
            self.register_buffer(n, torch.from_numpy(np.ascontiguousarray(layer[n], dtype=np.float32)))
        self.units, self.reset_after, self.activation = layer["units"], layer["reset_after"], layer["activation"]

    def forward(self, x):
        B, T, _ = x.shape
        u = self.units
        xw = x @ self.kernel + self.b_in                                       # (B, T, 3u)
        U = self.recurrent_kernel
        h = x.new_zeros(B, u)
        hs, lz = [], []
        for t in range(T):
            if self.reset_after:
                hu = h @ U + self.b_rec
                zr = xw[:, t, :2 * u] + hu[:, :2 * u]
                z, r = _act(zr[:, :u], self.activation), _act(zr[:, u:], self.activation)
                cand = torch.tanh(xw[:, t, 2 * u:] + r * hu[:, 2 * u:])
            else:
                zr = xw[:, t, :2 * u] + h @ U[:, :2 * u]
                z, r = _act(zr[:, :u], self.activation), _act(zr[:, u:], self.activation)
                cand = torch.tanh(xw[:, t, 2 * u:] + (r * h) @ U[:, 2 * u:])
            lz.append(_log_act(zr[:, :u], self.activation))
            h = z * h + (1 - z) * cand
            hs.append(h)
        return torch.stack(hs, 1), torch.stack(lz, 1)


def keras_gru_to_torch(layer):
    """A reset_after=True Keras GRU layer with sigmoid gates as a batch_first torch nn.GRU (torch's gate order
    r, z, n; weight_ih = kernel blocks transposed). Raises ValueError for reset_after=False or hard_sigmoid,
    which nn.GRU does not compute (KerasGRU does)."""
    if not layer["reset_after"] or layer["activation"] != "sigmoid":
        raise ValueError(f"layer '{layer['name']}': nn.GRU computes only reset_after=True with sigmoid gates (this "
                         f"one: reset_after={layer['reset_after']}, {layer['activation']}); use KerasGRU")
    u = layer["units"]
    blk = lambda a, g: a[..., g * u:(g + 1) * u]                                # noqa: E731  (Keras z, r, h)
    order = (1, 0, 2)                                                           # torch r, z, n
    m = nn.GRU(layer["kernel"].shape[0], u, batch_first=True)
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.from_numpy(np.concatenate([blk(layer["kernel"], g).T for g in order])))
        m.weight_hh_l0.copy_(torch.from_numpy(np.concatenate([blk(layer["recurrent_kernel"], g).T for g in order])))
        m.bias_ih_l0.copy_(torch.from_numpy(np.concatenate([blk(layer["b_in"], g) for g in order])))
        m.bias_hh_l0.copy_(torch.from_numpy(np.concatenate([blk(layer["b_rec"], g) for g in order])))
    return m.eval()


class KerasCharGRU(nn.Module):
    """A Keras character GRU stack (read_keras_gru) in torch: embedding -> GRU_1 -> ... -> GRU_n (KerasGRU each,
    `self.rnn[name]`, the Keras layer name), zero initial state, float32.

    forward(ids (B, T) int64) -> ([h (B, T, u_l)], [log z (B, T, u_l)]) per layer.
    reactions(ids (B, T)) -> (B, K): the dense head on the last hidden state (reactionrnn's output layer,
    relu(x) / sum relu(x)); only when the file had one."""

    def __init__(self, weights):
        super().__init__()
        E = torch.from_numpy(weights["embedding"])
        self.embedding = nn.Embedding(E.shape[0], E.shape[1])
        with torch.no_grad():
            self.embedding.weight.copy_(E)
        self.rnn = nn.ModuleDict({lyr["name"]: KerasGRU(lyr) for lyr in weights["layers"]})
        self.head = None
        if weights.get("head") is not None:
            self.head = nn.ParameterDict({k: nn.Parameter(torch.from_numpy(v), requires_grad=False)
                                          for k, v in weights["head"].items()})
        self.vocab_size = E.shape[0]
        self.eval()

    def forward(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.int64:
            raise ValueError("ids must be a (B, T) int64 tensor")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"ids must lie in [0, {self.vocab_size}); got [{ids.min().item()}, {ids.max().item()}]")
        x = self.embedding(ids)
        hs, lzs = [], []
        with torch.no_grad():
            for m in self.rnn.values():
                x, lz = m(x)
                hs.append(x)
                lzs.append(lz)
        return hs, lzs

    def reactions(self, ids):
        if self.head is None:
            raise ValueError("this weight file has no dense head on the GRU")
        y = F.relu(self.forward(ids)[0][-1][:, -1] @ self.head["kernel"] + self.head["bias"])
        return y / y.sum(-1, keepdim=True).clamp_min(1e-12)


# ----------------------------------------------------------------------------- reactionrnn

ARCHIVE_MEMBERS = tuple(f"reactionrnn-0.1/reactionrnn/{f}" for f in (WEIGHTS_FILE, VOCAB_FILE))
ARCHIVE_MEMBER_MAX = 64 << 20       # bytes; the archive's weights are 1.2 MB, its vocabulary 2 kB


def reactionrnn_files(archive=None):
    """(weights path, vocab path) of reactionrnn: the installed package's (found without importing it: it
    imports keras), or, given `archive` (the reactionrnn-0.1.tar.gz of REACTIONRNN_DOWNLOAD), its two files
    (ARCHIVE_MEMBERS, regular files of at most ARCHIVE_MEMBER_MAX bytes) extracted into a fresh temporary folder
    removed when the process ends: nothing is written beside the archive, and a copy there is never read in its
    place. Raises outputs.MissingPiece when neither is at hand."""
    if archive is not None:
        if not os.path.isfile(archive):
            raise FileNotFoundError(f"reactionrnn archive not found: {archive}")
        try:
            with tarfile.open(archive) as tf:
                members = [tf.getmember(w) for w in ARCHIVE_MEMBERS]
                for m in members:
                    if not m.isfile() or m.size > ARCHIVE_MEMBER_MAX:
                        what = "not a regular file" if not m.isfile() else f"{m.size} bytes"
                        raise ValueError(f"{archive}: {m.name} is {what}; not the reactionrnn 0.1 source archive")
                d = tempfile.mkdtemp(prefix="foxwindow-reactionrnn-")
                atexit.register(shutil.rmtree, d, ignore_errors=True)
                tf.extractall(d, members=members, filter="data")
        except (KeyError, tarfile.TarError, EOFError, OSError) as exc:
            raise ValueError(f"{archive}: not the reactionrnn 0.1 source archive ({exc})") from None
        return tuple(os.path.join(d, m) for m in ARCHIVE_MEMBERS)
    spec = importlib.util.find_spec("reactionrnn")
    if spec is None or not spec.submodule_search_locations:
        raise outputs.MissingPiece(f"the reactionrnn package is not installed: {REACTIONRNN_PIP} (or "
                                   f"{REACTIONRNN_DOWNLOAD} and --archive); only its weight and vocabulary files "
                                   "are read")
    d = list(spec.submodule_search_locations)[0]
    paths = os.path.join(d, WEIGHTS_FILE), os.path.join(d, VOCAB_FILE)
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise outputs.MissingPiece(f"reactionrnn is installed without {missing}: reinstall {REACTIONRNN}")
    return paths


def load_reactionrnn(weights_path=None, vocab_path=None, archive=None, recurrent_activation=None):
    """(KerasCharGRU, vocab, info) of reactionrnn's shipped model (or the given files). recurrent_activation:
    None (the file's: hard_sigmoid for reactionrnn's Keras 2.0.6), or 'sigmoid' / 'hard_sigmoid' to override."""
    shown = {}
    if weights_path is None or vocab_path is None:
        w, v = reactionrnn_files(archive)
        if archive is not None:             # the files' names for the record: in the archive, not the temporary copy
            shown = {w: f"{os.path.abspath(archive)}:{ARCHIVE_MEMBERS[0]}",
                     v: f"{os.path.abspath(archive)}:{ARCHIVE_MEMBERS[1]}"}
        weights_path, vocab_path = weights_path or w, vocab_path or v
    wts = read_keras_gru(weights_path, recurrent_activation)
    vocab = lstm.read_vocab(vocab_path, n_classes=wts["embedding"].shape[0])
    info = dict(weights=shown.get(weights_path, weights_path), vocab=shown.get(vocab_path, vocab_path),
                keras_version=wts["keras_version"],
                layers=[lyr["name"] for lyr in wts["layers"]], units=[lyr["units"] for lyr in wts["layers"]],
                reset_after=[lyr["reset_after"] for lyr in wts["layers"]],
                activation=[lyr["activation"] for lyr in wts["layers"]],
                activation_source=[lyr["activation_source"] for lyr in wts["layers"]])
    return KerasCharGRU(wts), vocab, info


def byte_ids(toks, vocab):
    """(S, T) int64 ids of byte tokens: ASCII byte -> vocab[chr(b)]; ValueError when a byte of `toks` is not in
    the vocabulary (reactionrnn's tokenizer would drop it, breaking the alignment with the byte windows)."""
    table = torch.tensor([vocab.get(chr(b), 0) if b < 128 else 0 for b in range(256)], dtype=torch.int64)
    ids = table[toks]
    if (ids == 0).any():
        bad = sorted({int(b) for b in toks[ids == 0].unique()})[:8]
        raise ValueError(f"bytes {bad} are not in the vocabulary (reactionrnn drops such characters)")
    return ids


def reactionrnn_traces(n_seq=32, seq_len=2048, units=None, batch=32, weights_path=None, vocab_path=None,
                       archive=None, progress=False, recurrent_activation=None):
    """Update gates of the reactionrnn GRU on the held-out split (data.heldout_tokens), each sequence from a zero
    state. units: None (all) or unit indices kept. recurrent_activation: load_reactionrnn. Returns (traces
    {Keras layer name: (n_seq, seq_len, H) float32 log z}, meta for traces.save_trace)."""
    model, vocab, info = load_reactionrnn(weights_path, vocab_path, archive, recurrent_activation)
    toks, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    ids = byte_ids(toks, vocab)
    names = list(model.rnn)
    sel = None if units is None else lstm_gates.check_units(units, min(info["units"]), "units")
    parts = {n: [] for n in names}
    for s in tqdm(range(0, n_seq, batch), desc="reactionrnn gates", unit="batch", disable=not progress,
                  file=sys.stderr):
        _, lzs = model(ids[s:s + batch])
        for n, lz in zip(names, lzs):
            parts[n].append((lz if sel is None else lz[..., sel]).numpy())
    traces = {n: np.concatenate(parts[n]) for n in names}
    zero = {n: float((v <= HARD_FLOOR).mean()) for n, v in traces.items()}
    one = {n: float((v == 0).mean()) for n, v in traces.items()}
    meta = dict(model=f"reactionrnn 0.1 character GRU ({' + '.join(str(u) for u in info['units'])} units, "
                      f"{os.path.basename(info['weights'])}, Keras {info['keras_version']}, "
                      f"{'/'.join(sorted(set(info['activation'])))} gates)",
                family="keras-gru", layers=names, units=sel if sel is not None else "all", unit_count=info["units"],
                seq_len=seq_len, n_seq=n_seq, spans=spans, training_length=TRAINING_LENGTH,
                activation=info["activation"], activation_source=info["activation_source"],
                reset_after=info["reset_after"], gate="update gate z (h_t = z h_{t-1} + (1 - z) h~_t), X = -log z",
                z_zero_fraction=zero, z_one_fraction=one, hard_floor=HARD_FLOOR,
                mapping="one id per byte: vocab[chr(b)] (case-sensitive; every held-out byte is in the vocabulary)",
                state="zero state at each sequence start; the GRU runs continuously over the sequence")
    H = {v.shape[2] for v in traces.values()}
    if len(H) == 1:
        meta["heads"] = H.pop()
    return traces, meta


def default_out():
    return os.path.join(outputs.run_dir("gru-traces"), "reactionrnn_traces.npz")


def build_parser():
    p = outputs.parser("Capture the update gates of the reactionrnn character GRU (256 units) on the held-out split "
                       "as a trace file for `python forget.py --traces FILE`.")
    p.add_argument("--out", default=None, help="trace file (.npz) to write; None: a fresh "
                   "runs/gru-traces-<time>/reactionrnn_traces.npz")
    p.add_argument("--n-seq", type=int, default=32, help="held-out sequences")
    p.add_argument("--seq-len", type=int, default=2048, help="characters per sequence")
    p.add_argument("--units", default="all", help="units: 'all' (256), N spread evenly, or a comma list ('3,17')")
    p.add_argument("--batch", type=int, default=32, help="sequences per forward")
    p.add_argument("--archive", default=None, help=f"the reactionrnn-0.1.tar.gz of `{REACTIONRNN_DOWNLOAD}` "
                   "(None: the installed package)")
    p.add_argument("--weights", default=None, help="Keras HDF5 weight file of a character GRU; None: reactionrnn's")
    p.add_argument("--vocab", default=None, help="vocabulary JSON; None: reactionrnn's")
    p.add_argument("--recurrent-activation", choices=ACTIVATIONS, default=None,
                   help="override the gates' activation (None: the file's; reactionrnn's Keras 2.0.6 default is "
                        "hard_sigmoid; 'sigmoid' reads the same weights with logistic gates, not the trained network)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads; None: torch's choice")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    outputs.add_common(p)
    return p


def main(argv=None):
    """`python gru_traces.py`: write the held-out update-gate trace file of the reactionrnn GRU."""
    a = build_parser().parse_args(argv)
    outputs.positive("--n-seq", a.n_seq, lo=3)
    outputs.positive("--seq-len", a.seq_len, lo=16)
    outputs.positive("--batch", a.batch)
    if a.threads is not None:
        parallel.threads_arg("--threads", a.threads)
        torch.set_num_threads(a.threads)
    if a.archive and a.weights and a.vocab:
        raise outputs.UsageError("--archive would be ignored: --weights and --vocab name both files it holds; drop it")
    lstm.parse_units(a.units)                                  # its form, before the weights are read
    for flag in ("weights", "vocab", "archive"):
        if getattr(a, flag):
            setattr(a, flag, outputs.input_file(f"--{flag}", getattr(a, flag)))
    out = a.out
    if out is not None:
        out = outputs.check_writable(out, force=a.force, what="--out")
    toks = lstm.heldout(a.n_seq, a.seq_len)
    try:
        _, vocab, info = load_reactionrnn(a.weights, a.vocab, a.archive, a.recurrent_activation)
        byte_ids(toks, vocab)
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    units = lstm.parse_units(a.units, min(info["units"]))
    if out is None:
        out = outputs.check_writable(default_out(), what="--out")
    t0 = time.perf_counter()
    tr, meta = reactionrnn_traces(a.n_seq, a.seq_len, units, a.batch, a.weights, a.vocab, a.archive,
                                  progress=not a.no_progress, recurrent_activation=a.recurrent_activation)
    meta["capture_s"] = round(time.perf_counter() - t0, 2)
    traces.save_trace(out, tr, meta, force=True)       # out: checked (and --force) above
    H = ", ".join(f"{n} {v.shape[2]}" for n, v in tr.items())
    zero = ", ".join(f"{100 * v:.3f}%" for v in meta["z_zero_fraction"].values())
    print(f"reactionrnn update gates: {a.n_seq} x {a.seq_len} held-out characters, units: {H}; gates "
          f"{'/'.join(sorted(set(info['activation'])))}; steps with z = 0 (log z stored as {HARD_FLOOR:g}): {zero}; "
          f"captured in {meta['capture_s']:.1f} s")
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB): python forget.py --traces {out}")


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
