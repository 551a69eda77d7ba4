"""LSTM forget gates: the generic nn.LSTM / nn.LSTMCell reader against a hand-written LSTM step (float64), the
torch rebuild of textgenrnn's Keras LSTM against an independent numpy implementation of the Keras equations
(Keras's own CuDNNLSTM -> LSTM weight conversion, then the Keras LSTM step), textgenrnn's character mapping,
bad input (corrupt HDF5, a GRU's weights, a module that is not an LSTM) and the trace file round trip.

Tests that read the shipped weights skip when textgenrnn (pip install --no-deps textgenrnn==2.0.0) or h5py is
absent; the synthetic Keras files need h5py only."""
import importlib.util
import json
import os

import numpy as np
import pytest
import torch
import torch.nn as nn

from foxwindow import outputs
from foxwindow.heads import driver as heads
from foxwindow.models import adapters, lstm, traces

HAVE_H5PY = importlib.util.find_spec("h5py") is not None
HAVE_TG = importlib.util.find_spec("textgenrnn") is not None
needs_h5py = pytest.mark.skipif(not HAVE_H5PY, reason="h5py not installed (pip install h5py)")
needs_tg = pytest.mark.skipif(not (HAVE_H5PY and HAVE_TG),
                              reason="textgenrnn or h5py not installed (pip install h5py; "
                                     "pip install --no-deps textgenrnn==2.0.0)")


# ----------------------------------------------------------------------------- hand-written LSTM (float64)

def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def hand_lstm(x, layers, h0=None, c0=None):
    """A textbook LSTM, one step at a time, float64. x (B, T, in); layers [(W_ih (4H, in), W_hh (4H, R),
    b (4H,), W_hr (R, H) or None)], gate rows i, f, g, o. Returns ([log f (B, T, H) per layer], last output)."""
    logs, inp = [], np.asarray(x, np.float64)
    B, T = inp.shape[:2]
    for l, (w_ih, w_hh, b, w_hr) in enumerate(layers):
        H = w_ih.shape[0] // 4
        R = w_hh.shape[1]
        h = np.zeros((B, R)) if h0 is None else h0[l].copy()
        c = np.zeros((B, H)) if c0 is None else c0[l].copy()
        outs, lf = [], []
        for t in range(T):
            z = inp[:, t] @ w_ih.T + h @ w_hh.T + b
            i, f, g, o = _sig(z[:, :H]), _sig(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), _sig(z[:, 3 * H:])
            lf.append(np.log(f))
            c = f * c + i * g
            h = o * np.tanh(c)
            if w_hr is not None:
                h = h @ w_hr.T
            outs.append(h)
        logs.append(np.stack(lf, 1))
        inp = np.stack(outs, 1)
    return logs, inp


def _params(m):
    out = []
    for l in range(m.num_layers):
        g = lambda n: getattr(m, f"{n}_l{l}").detach().double().numpy()                      # noqa: E731
        hr = g("weight_hr") if m.proj_size else None
        out.append((g("weight_ih"), g("weight_hh"), g("bias_ih") + g("bias_hh"), hr))
    return out


@pytest.mark.parametrize("batch_first,num_layers,proj,with_hx", [(True, 2, 0, False), (False, 3, 0, True),
                                                                 (True, 2, 3, True)])
def test_lstm_matches_hand_step(batch_first, num_layers, proj, with_hx):
    torch.manual_seed(0)
    B, T, D, H = 3, 17, 5, 7
    m = nn.LSTM(D, H, num_layers=num_layers, batch_first=batch_first, proj_size=proj, dtype=torch.float64)
    x = torch.randn(B, T, D, dtype=torch.float64)
    R = proj or H
    hx = (torch.randn(num_layers, B, R, dtype=torch.float64), torch.randn(num_layers, B, H, dtype=torch.float64))
    xin = x if batch_first else x.transpose(0, 1)
    out, _ = m(xin, hx if with_hx else None)
    logs = lstm.lstm_log_forget(m, xin, hx if with_hx else None, output=out)
    ref, ref_out = hand_lstm(x.numpy(), _params(m), *(t.numpy() for t in hx) if with_hx else (None, None))
    assert len(logs) == num_layers
    for lg, r in zip(logs, ref):
        assert lg.shape == (B, T, H) and lg.dtype == torch.float32 and (lg <= 0).all()
        np.testing.assert_allclose(lg.numpy(), r, rtol=1e-5, atol=1e-6)
    got_out = out if batch_first else out.transpose(0, 1)
    np.testing.assert_allclose(got_out.detach().numpy(), ref_out, atol=1e-10)
    sel = lstm.lstm_log_forget(m, xin, hx if with_hx else None, units=[4, 0])       # a selection, in that order
    np.testing.assert_allclose(sel[-1].numpy(), ref[-1][:, :, [4, 0]], rtol=1e-5, atol=1e-6)


class _Stack(nn.Module):
    """embedding -> nn.LSTM(2 layers, batch_first) -> nn.LSTMCell run by hand -> linear."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.rnn = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.cell = nn.LSTMCell(8, 5)
        self.out = nn.Linear(5, 11)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        state = None
        ys = []
        for t in range(h.shape[1]):
            state = self.cell(h[:, t], state)
            ys.append(state[0])
        return self.out(torch.stack(ys, 1))


def test_capture_model_lstm_and_cell():
    torch.manual_seed(1)
    net = _Stack().double().eval()
    ids = torch.randint(0, 11, (2, 13))
    cap = lstm.capture_lstm_gates(net, ids)
    assert sorted(cap) == ["cell", "rnn.l0", "rnn.l1"]
    emb = net.emb(ids).detach().numpy()
    ref, h = hand_lstm(emb, _params(net.rnn))
    for l in (0, 1):
        np.testing.assert_allclose(cap[f"rnn.l{l}"].numpy(), ref[l], rtol=1e-5, atol=1e-6)
    c = net.cell
    cell_p = [(c.weight_ih.detach().double().numpy(), c.weight_hh.detach().double().numpy(),
               (c.bias_ih + c.bias_hh).detach().double().numpy(), None)]
    ref_c, _ = hand_lstm(h, cell_p)
    assert cap["cell"].shape == (2, 13, 5)
    np.testing.assert_allclose(cap["cell"].numpy(), ref_c[0], rtol=1e-5, atol=1e-6)
    # the adapter registry reads the same gates (layers side by side along H)
    got = adapters.capture_log_decays(net, ids, adapters=["torch-lstm"])
    np.testing.assert_allclose(got.decays["rnn"].numpy(), torch.cat([cap["rnn.l0"], cap["rnn.l1"]], -1).numpy(),
                               atol=1e-6)
    assert [n for n, _, a in adapters.find_layers(net) if a.family == "torch-lstm"] == ["rnn"]


def test_not_an_lstm_and_refused_layouts():
    with pytest.raises(ValueError, match="not torch.nn.LSTM|expected a torch.nn.LSTM"):
        lstm.lstm_log_forget(nn.GRU(4, 4), torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match="has no torch.nn.LSTM"):
        lstm.capture_lstm_gates(nn.Sequential(nn.Linear(4, 4), nn.GRU(4, 4)), torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match="hx shapes"):                   # bidirectional: 2 states per layer
        lstm.lstm_log_forget(nn.LSTM(4, 3, bidirectional=True), torch.zeros(5, 1, 4),
                             (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)))
    with pytest.raises(ValueError, match="eval"):
        lstm.lstm_log_forget(nn.LSTM(4, 3, num_layers=2, dropout=0.5), torch.zeros(5, 1, 4))
    with pytest.raises(ValueError, match="input_size"):
        lstm.lstm_log_forget(nn.LSTM(4, 3), torch.zeros(5, 1, 6))
    with pytest.raises(ValueError, match="outside"):
        lstm.lstm_log_forget(nn.LSTM(4, 3), torch.zeros(5, 1, 4), units=[3])
    with pytest.raises(ValueError, match="does not reproduce"):
        m = nn.LSTM(4, 3, num_layers=2)
        lstm.lstm_log_forget(m, torch.randn(5, 1, 4), output=torch.ones(5, 1, 3))
    seq = nn.Sequential(nn.LSTM(4, 3))                                         # batch_first=False
    with pytest.raises(ValueError, match="batch_first=False"):
        adapters.capture_log_decays(seq, torch.zeros(6, 2, 4), adapters=["torch-lstm"])


# ----------------------------------------------------------------------------- Keras files

def keras_reference(path, ids):
    """Independent numpy Keras forward from the HDF5 arrays (textgenrnn's group names): Keras's CuDNNLSTM ->
    LSTM conversion (per gate: input kernel k.T.reshape(k.shape, order='F'), recurrent kernel k.T, the two
    bias halves summed), then the Keras LSTM step (x @ K + h @ U + b; gates i, f, c, o; sigmoid, tanh),
    float64. Returns ([log f (B, T, u)], [h (B, T, u)]) per layer."""
    import h5py
    with h5py.File(path, "r") as f:
        x = f["embedding/embedding/embeddings:0"][()].astype(np.float64)[ids]
        names = [n.decode() for n in f.attrs["layer_names"] if n.decode()[4:].isdigit()]        # rnn_1, rnn_2
        arrays = [[f[f"{n}/{n}/{w}:0"][()].astype(np.float64) for w in ("kernel", "recurrent_kernel", "bias")]
                  for n in names]
    logs, hs = [], []
    for k, rk, b in arrays:
        u = rk.shape[0]
        if b.shape[0] == 8 * u:
            k = np.hstack([g.T.reshape(g.shape, order="F") for g in np.hsplit(k, 4)])
            rk = np.hstack([g.T for g in np.hsplit(rk, 4)])
            b = b[:4 * u] + b[4 * u:]
        h = np.zeros((x.shape[0], u))
        c = np.zeros_like(h)
        lf, out = [], []
        for t in range(x.shape[1]):
            z = x[:, t] @ k + h @ rk + b
            i, fg, g, o = _sig(z[:, :u]), _sig(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), _sig(z[:, 3 * u:])
            c = fg * c + i * g
            h = o * np.tanh(c)
            lf.append(np.log(fg))
            out.append(h)
        logs.append(np.stack(lf, 1))
        hs.append(np.stack(out, 1))
        x = hs[-1]
    return logs, hs


def write_keras(path, E, rnn, extra=None):
    """A Keras-2 style weight file: layer_names, per layer a group with weight_names and arrays."""
    import h5py
    with h5py.File(path, "w") as f:
        layers = [("embedding", {"embeddings": E})] + [(f"rnn_{i + 1}", w) for i, w in enumerate(rnn)]
        layers += list((extra or {}).items())
        f.attrs["layer_names"] = np.array([n.encode() for n, _ in layers])
        f.attrs["keras_version"] = b"2.1.5"
        for n, ws in layers:
            g = f.create_group(n)
            g.attrs["weight_names"] = np.array([f"{n}/{w}:0".encode() for w in ws])
            for w, a in ws.items():
                g.create_dataset(f"{n}/{w}:0", data=a)


def _random_keras(path, cudnn, seed=0, V=9, E=5, u=(6, 4), gates=4):
    rng = np.random.default_rng(seed)
    rnn, width = [], E
    for units in u:
        nb = (2 if cudnn else 1) * gates * units
        rnn.append({"kernel": rng.normal(0, 0.6, (width, gates * units)).astype(np.float32),
                    "recurrent_kernel": rng.normal(0, 0.6, (units, gates * units)).astype(np.float32),
                    "bias": rng.normal(0, 0.5, nb).astype(np.float32)})
        width = units
    write_keras(path, rng.normal(0, 1, (V, E)).astype(np.float32), rnn)
    return path


@needs_h5py
@pytest.mark.parametrize("cudnn", [True, False])
def test_rebuild_matches_keras_equations_synthetic(tmp_path, cudnn):
    """Layers of different widths (6 then 4 units, inputs 5 wide): the cuDNN buffer reading is not a transpose."""
    p = _random_keras(str(tmp_path / "w.h5"), cudnn)
    model = lstm.KerasCharLSTM(lstm.read_keras_lstm(p))
    ids = torch.randint(0, 9, (2, 12), generator=torch.Generator().manual_seed(0))
    ref_log, ref_h = keras_reference(p, ids.numpy())
    hs = model(ids)
    cap = lstm.capture_lstm_gates(model, ids)
    for l, name in enumerate(("rnn.rnn_1", "rnn.rnn_2")):
        np.testing.assert_allclose(hs[l].detach().numpy(), ref_h[l], atol=2e-6)
        np.testing.assert_allclose(cap[name].numpy(), ref_log[l], atol=2e-6)


@needs_tg
def test_textgenrnn_rebuild_matches_keras_equations():
    w, _ = lstm.textgenrnn_files()
    model, vocab, info = lstm.load_textgenrnn()
    assert info["layers"] == ["rnn_1", "rnn_2"] and info["units"] == [128, 128] and info["cudnn"] == [True, True]
    text = ["To be, or not to be, that is the question:", "Whether 'tis nobler in the mind to suffer\n"]
    ids = torch.stack([lstm.encode_text(t[:40], vocab) for t in text])
    ref_log, ref_h = keras_reference(w, ids.numpy())
    hs, cap = model(ids), lstm.capture_lstm_gates(model, ids)                   # float32, as the traces are made
    for l, name in enumerate(("rnn.rnn_1", "rnn.rnn_2")):
        np.testing.assert_allclose(hs[l].detach().numpy(), ref_h[l], atol=2e-5)
        np.testing.assert_allclose(cap[name].numpy(), ref_log[l], atol=2e-5, rtol=1e-5)
    model.double()                                                              # the same math in float64
    hs, cap = model(ids), lstm.capture_lstm_gates(model, ids)
    for l, name in enumerate(("rnn.rnn_1", "rnn.rnn_2")):
        np.testing.assert_allclose(hs[l].detach().numpy(), ref_h[l], atol=1e-10)
        np.testing.assert_allclose(cap[name].numpy(), ref_log[l], atol=1e-6, rtol=1e-6)  # float32 log f


@needs_tg
def test_textgenrnn_predicts_english():
    """The whole network (LSTMs, attention, output) as textgenrnn feeds it (last 40 ids, left-padded with 0)
    predicts English text: 1.49 bits/char measured on this sentence; a wrong weight layout gives ~73."""
    model, vocab, _ = lstm.load_textgenrnn()
    text = ("The quick brown fox jumps over the lazy dog. What is the best way to learn programming in Python? "
            "I made a website for my friends")
    rows = []
    for t in range(20, len(text)):
        ctx = lstm.encode_text(text[max(0, t - 40):t], vocab)
        rows.append(torch.cat([torch.zeros(40 - len(ctx), dtype=torch.int64), ctx]))
    lp = model.next_char_logprobs(torch.stack(rows))
    target = lstm.encode_text(text[20:], vocab)
    bits = -lp[torch.arange(len(target)), target].mean().item() / np.log(2)
    assert bits < 2.0, bits


@needs_tg
def test_character_mapping():
    _, vocab_path = lstm.textgenrnn_files()
    with open(vocab_path, encoding="utf-8") as fh:
        vocab = json.load(fh)
    assert len(vocab) == 464 and vocab["<s>"] == 464 and min(vocab.values()) == 1
    for c in "\n\t\r\u2603":
        assert c not in vocab
    ids = lstm.encode_text("a\nb<s>\u2603é", vocab).tolist()
    assert ids == [vocab["a"], 0, vocab["b"], vocab["<"], vocab["s"], vocab[">"], 0, vocab["é"]]
    table = lstm.byte_table(vocab)
    assert table.shape == (256,) and table[ord("a")] == vocab["a"] and table[10] == 0 and table[0xC3] == 0
    assert (table[128:] == 0).all() and (table[32:127] > 0).all()          # printable ASCII all in the vocabulary


# ----------------------------------------------------------------------------- bad input

@needs_h5py
def test_bad_keras_files(tmp_path):
    bad = tmp_path / "corrupt.hdf5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(500))
    with pytest.raises(ValueError, match="not a readable HDF5"):
        lstm.read_keras_lstm(str(bad))
    if HAVE_TG:                                                           # the real file, truncated
        w, _ = lstm.textgenrnn_files()
        cut = tmp_path / "cut.hdf5"
        cut.write_bytes(open(w, "rb").read()[:50_000])
        with pytest.raises(ValueError, match="HDF5|unreadable"):
            lstm.read_keras_lstm(str(cut))
    import h5py
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(ValueError, match="not a Keras weight file"):
        lstm.read_keras_lstm(str(plain))
    gru = _random_keras(str(tmp_path / "gru.h5"), cudnn=False, gates=3)
    with pytest.raises(ValueError, match="3 gates.*GRU"):
        lstm.read_keras_lstm(gru)
    rng = np.random.default_rng(0)
    chain = tmp_path / "chain.h5"
    write_keras(str(chain), rng.normal(size=(5, 3)).astype(np.float32),
                [{"kernel": np.zeros((4, 8), np.float32), "recurrent_kernel": np.zeros((2, 8), np.float32),
                  "bias": np.zeros(8, np.float32)}])
    with pytest.raises(ValueError, match="width 4.*gives 3"):
        lstm.read_keras_lstm(str(chain))
    bi = tmp_path / "bi.h5"
    z = np.zeros
    write_keras(str(bi), rng.normal(size=(5, 3)).astype(np.float32),
                [{f"{d}/kernel": z((3, 8), np.float32) for d in ("forward", "backward")}])
    with pytest.raises(ValueError, match="several weights of one name"):
        lstm.read_keras_lstm(str(bi))
    with pytest.raises(FileNotFoundError):
        lstm.read_keras_lstm(str(tmp_path / "missing.h5"))
    voc = tmp_path / "v.json"
    voc.write_text(json.dumps({"a": 1, "b": 2}))
    with pytest.raises(ValueError, match="embedding has 9 rows"):
        lstm.read_vocab(str(voc), n_classes=9)
    voc.write_text(json.dumps({"a": 1, "b": 1}))
    with pytest.raises(ValueError, match="each once"):
        lstm.read_vocab(str(voc))


@needs_h5py
def test_bad_ids():
    model = lstm.KerasCharLSTM({"embedding": np.zeros((4, 3), np.float32), "head": None,
                                "layers": [dict(name="rnn_1", kernel=np.zeros((3, 8), np.float32),
                                                recurrent_kernel=np.zeros((2, 8), np.float32),
                                                bias=np.zeros(16, np.float32), cudnn=True, units=2)]})
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        model(torch.tensor([[0, 4]]))
    with pytest.raises(ValueError, match="int64"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="no attention/output head"):
        model.next_char_logprobs(torch.zeros(1, 3, dtype=torch.int64))


# ----------------------------------------------------------------------------- the trace file

@needs_tg
def test_trace_file_round_trip(tmp_path, capsys):
    tr, meta = lstm.textgenrnn_traces(n_seq=3, seq_len=64, units=[0, 5, 127])
    assert set(tr) == {"rnn_1", "rnn_2"} and tr["rnn_1"].shape == (3, 64, 3) and meta["heads"] == 3
    out = str(tmp_path / "t.npz")
    traces.save_trace(out, tr, meta)
    back, m2 = heads.load_traces_checked(out)
    for n in tr:
        np.testing.assert_array_equal(back[n], tr[n])
    assert m2["model"].startswith("textgenrnn") and m2["units"] == [0, 5, 127] and len(m2["spans"]) == 3
    # the same gates as a full capture of those units
    full, _ = lstm.textgenrnn_traces(n_seq=3, seq_len=64)
    np.testing.assert_allclose(full["rnn_2"][:, :, [0, 5, 127]], tr["rnn_2"], rtol=1e-5, atol=1e-5)
    # the command: writes once, refuses to overwrite without --force, refuses bad units
    argv = ["--out", out, "--n-seq", "3", "--seq-len", "64", "--units", "2", "--no-progress"]
    assert outputs.cli(lstm.main, argv) == 2 and "exists" in capsys.readouterr().err
    assert outputs.cli(lstm.main, argv + ["--force"]) == 0
    back, m3 = traces.load_trace(out)
    assert m3["units"] == [0, 64] and back["rnn_1"].shape == (3, 64, 2)
    assert outputs.cli(lstm.main, argv + ["--force", "--units", "0,128"]) == 2
    assert "unit indices 0 .. 127" in (err := capsys.readouterr().err) and "unit 128 is past" in err


@needs_h5py
def test_command_on_another_keras_file(tmp_path, capsys):
    """--weights / --vocab: any Keras character LSTM stack (here 6 then 4 units) gives a trace file that the
    per-head analysis reads."""
    w = _random_keras(str(tmp_path / "w.h5"), cudnn=True)
    voc = tmp_path / "v.json"
    voc.write_text(json.dumps({c: i + 1 for i, c in enumerate("etaoin h")}))
    out = str(tmp_path / "t.npz")
    argv = ["--weights", w, "--vocab", str(voc), "--out", out, "--n-seq", "3", "--seq-len", "32", "--units", "all",
            "--no-progress"]
    assert outputs.cli(lstm.main, argv) == 0, capsys.readouterr().err
    tr, meta = heads.load_traces_checked(out)
    assert {n: t.shape for n, t in tr.items()} == {"rnn_1": (3, 32, 6), "rnn_2": (3, 32, 4)} and meta["units"] == "all"
    voc.write_text(json.dumps({"a": 1}))
    assert outputs.cli(lstm.main, argv[:-1] + ["--force"]) == 2
    assert "embedding has 9 rows" in capsys.readouterr().err
