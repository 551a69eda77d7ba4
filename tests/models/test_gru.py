"""GRU update gates and bidirectional RNNs: nn.GRU / nn.GRUCell and bidirectional nn.LSTM / nn.GRU against a
hand-written float64 step (torch's convention h_t = (1 - z) n + z h_{t-1}, gate rows r, z, n; the backward
direction run on the reversed sequence), the Keras GRU rebuild against an independent numpy implementation of the
Keras equations on tiny HDF5 files written here (bias (3u,) reset_after=False, (2, 3u) reset_after=True, (6u,)
CuDNNGRU; sigmoid and hard_sigmoid), reactionrnn's shipped file where installed, the trace file with its
looks-forward layers through `forget.py --traces`, and the delta-rule families' upper-bound statement.

Tests that read the shipped weights skip when reactionrnn (pip install --no-deps reactionrnn==0.1) or h5py is
absent; the synthetic Keras files need h5py only."""
import importlib.util
import json
import re

import numpy as np
import pytest
import torch
import torch.nn as nn

from foxwindow.heads import command
from foxwindow.models import adapters, gru, lstm_gates, traces
from foxwindow.models import lstm as lstm_mod

HAVE_H5PY = importlib.util.find_spec("h5py") is not None
HAVE_RR = importlib.util.find_spec("reactionrnn") is not None
needs_h5py = pytest.mark.skipif(not HAVE_H5PY, reason="h5py not installed (pip install h5py)")
needs_rr = pytest.mark.skipif(not (HAVE_H5PY and HAVE_RR),
                              reason="reactionrnn or h5py not installed (pip install h5py; "
                                     "pip install --no-deps reactionrnn==0.1)")


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


# ----------------------------------------------------------------------------- hand-written torch GRU (float64)

def hand_gru_dir(x, w_ih, w_hh, b_ih, b_hh, h0):
    """One direction of torch's GRU, one step at a time: x (B, T, in) in reading order. Returns (log z, h)."""
    H = w_hh.shape[1]
    h, lz, hs = h0.copy(), [], []
    for t in range(x.shape[1]):
        gi, gh = x[:, t] @ w_ih.T + b_ih, h @ w_hh.T + b_hh
        r, z = _sig(gi[:, :H] + gh[:, :H]), _sig(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        lz.append(np.log(z))
        h = (1 - z) * n + z * h
        hs.append(h)
    return np.stack(lz, 1), np.stack(hs, 1)


def hand_lstm_dir(x, w_ih, w_hh, b_ih, b_hh, h0, c0):
    H = w_hh.shape[1]
    h, c, lf, hs = h0.copy(), c0.copy(), [], []
    for t in range(x.shape[1]):
        g = x[:, t] @ w_ih.T + h @ w_hh.T + b_ih + b_hh
        i, f, gg, o = _sig(g[:, :H]), _sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), _sig(g[:, 3 * H:])
        lf.append(np.log(f))
        c = f * c + i * gg
        h = o * np.tanh(c)
        hs.append(h)
    return np.stack(lf, 1), np.stack(hs, 1)


def hand_rnn(m, x, hx=None):
    """Every layer and direction of nn.GRU / nn.LSTM m by hand; x (B, T, in) float64. Returns [log gate (B, T, H)]
    in capture order (layer 0 forward, layer 0 backward, ...), the backward ones in reading order."""
    D = 2 if m.bidirectional else 1
    B, H = x.shape[0], m.hidden_size
    is_lstm = isinstance(m, nn.LSTM)
    if hx is None:
        h0 = np.zeros((m.num_layers * D, B, H))
        c0 = np.zeros_like(h0)
    else:
        h0, c0 = (hx[0].numpy(), hx[1].numpy()) if is_lstm else (hx.numpy(), None)
    out, inp = [], x
    for layer in range(m.num_layers):
        outs = []
        for d in range(D):
            sfx = "_reverse" if d else ""
            p = [getattr(m, f"{n}_l{layer}{sfx}").detach().double().numpy()
                 for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            xi = inp[:, ::-1] if d else inp
            k = layer * D + d
            lg, h = hand_lstm_dir(xi, *p, h0[k], c0[k]) if is_lstm else hand_gru_dir(xi, *p, h0[k])
            out.append(lg)                                              # reading order
            outs.append(h[:, ::-1] if d else h)
        inp = np.concatenate(outs, -1)
    return out, inp


@pytest.mark.parametrize("batch_first,num_layers,bidirectional,with_hx",
                         [(True, 1, False, False), (False, 2, False, True), (True, 2, True, True),
                          (False, 1, True, False)])
def test_gru_matches_hand_step(batch_first, num_layers, bidirectional, with_hx):
    torch.manual_seed(0)
    B, T, Din, H = 3, 11, 5, 6
    D = 2 if bidirectional else 1
    m = nn.GRU(Din, H, num_layers=num_layers, batch_first=batch_first, bidirectional=bidirectional,
               dtype=torch.float64).eval()
    x = torch.randn(B, T, Din, dtype=torch.float64)
    hx = torch.randn(num_layers * D, B, H, dtype=torch.float64) if with_hx else None
    xin = x if batch_first else x.transpose(0, 1)
    out, _ = m(xin, hx)
    logs = gru.gru_log_update(m, xin, hx, output=out)
    ref, ref_out = hand_rnn(m, x.numpy(), hx)
    assert len(logs) == num_layers * D
    for lg, r in zip(logs, ref):
        assert lg.shape == (B, T, H) and lg.dtype == torch.float32 and (lg <= 0).all()
        np.testing.assert_allclose(lg.numpy(), r, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((out if batch_first else out.transpose(0, 1)).detach().numpy(), ref_out, atol=1e-10)
    sel = gru.gru_log_update(m, xin, hx, units=[5, 1])
    np.testing.assert_allclose(sel[-1].numpy(), ref[-1][:, :, [5, 1]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_bidirectional_lstm_matches_hand_step(num_layers):
    torch.manual_seed(3)
    B, T, Din, H = 2, 9, 4, 5
    m = nn.LSTM(Din, H, num_layers=num_layers, bidirectional=True, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(B, T, Din, dtype=torch.float64)
    hx = tuple(torch.randn(2 * num_layers, B, H, dtype=torch.float64) for _ in range(2))
    out, _ = m(x, hx)
    logs = lstm_gates.lstm_log_forget(m, x, hx, output=out)
    ref, ref_out = hand_rnn(m, x.numpy(), hx)
    assert len(logs) == 2 * num_layers
    for lg, r in zip(logs, ref):
        np.testing.assert_allclose(lg.numpy(), r, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, atol=1e-10)
    # the backward direction's entry t is the gate at token T - 1 - t: a change of the first token moves only
    # its last entry, and every entry of the forward direction
    x2 = x.clone()
    x2[:, 0] += 1.0
    moved = lstm_gates.lstm_log_forget(m, x2, hx)
    assert torch.equal(moved[1][:, :-1], logs[1][:, :-1]) and not torch.allclose(moved[1][:, -1], logs[1][:, -1])
    assert not torch.allclose(moved[0][:, -1], logs[0][:, -1])


def test_gru_cell_and_capture_names():
    torch.manual_seed(1)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(9, 4)
            self.bi = nn.GRU(4, 3, bidirectional=True, batch_first=True)
            self.lstm = nn.LSTM(6, 3, num_layers=2, bidirectional=True, batch_first=True)
            self.cell = nn.GRUCell(6, 2)

        def forward(self, ids):
            h, _ = self.bi(self.emb(ids))
            self.lstm(h)
            s = None
            for t in range(h.shape[1]):
                s = self.cell(h[:, t], s)
            return s

    net = Net().double().eval()
    ids = torch.randint(0, 9, (2, 7))
    cap = lstm_gates.capture_rnn_gates(net, ids)
    assert sorted(cap) == ["bi", "bi.reverse", "cell", "lstm.l0", "lstm.l0.reverse", "lstm.l1", "lstm.l1.reverse"]
    assert lstm_gates.looks_forward(list(cap)) == ["bi.reverse", "lstm.l0.reverse", "lstm.l1.reverse"]
    emb = net.emb(ids).detach().numpy()
    ref, h = hand_rnn(net.bi, emb)
    np.testing.assert_allclose(cap["bi"].numpy(), ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cap["bi.reverse"].numpy(), ref[1], rtol=1e-5, atol=1e-6)
    c = net.cell
    p = [getattr(c, n).detach().double().numpy() for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    ref_c, _ = hand_gru_dir(h, *p, np.zeros((2, 2)))
    np.testing.assert_allclose(cap["cell"].numpy(), ref_c, rtol=1e-5, atol=1e-6)
    one = gru.cell_log_update(c, torch.from_numpy(h[:, 0]))
    np.testing.assert_allclose(one.numpy(), ref_c[:, 0], rtol=1e-5, atol=1e-6)
    # the LSTM-only capture keeps the LSTM; the adapter registry reads a unidirectional GRU, refuses a bidirectional
    kept = sorted(lstm_gates.capture_lstm_gates(net, ids))
    assert kept == ["lstm.l0", "lstm.l0.reverse", "lstm.l1", "lstm.l1.reverse"]
    uni = nn.Sequential(nn.GRU(4, 3, num_layers=2, batch_first=True)).double().eval()
    x = torch.randn(2, 7, 4, dtype=torch.float64)
    got = adapters.capture_log_decays(uni, x, adapters=["torch-gru"])
    np.testing.assert_allclose(got.decays["0"].numpy(), torch.cat(gru.gru_log_update(uni[0], x), -1).numpy(),
                               atol=1e-6)
    with pytest.raises(ValueError, match="bidirectional"):
        adapters.capture_log_decays(nn.Sequential(nn.GRU(4, 3, bidirectional=True, batch_first=True)),
                                    torch.zeros(1, 5, 4), adapters=["torch-gru"])


def test_gru_refusals():
    with pytest.raises(ValueError, match="expected a torch.nn.GRU"):
        gru.gru_log_update(nn.LSTM(4, 4), torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match="expected a torch.nn.LSTM"):
        lstm_gates.lstm_log_forget(nn.GRU(4, 4), torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match="one tensor"):
        gru.gru_log_update(nn.GRU(4, 3), torch.zeros(5, 1, 4), (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)))
    with pytest.raises(ValueError, match="hx shape"):
        gru.gru_log_update(nn.GRU(4, 3, bidirectional=True), torch.zeros(5, 1, 4), torch.zeros(1, 1, 3))
    with pytest.raises(ValueError, match="eval"):
        gru.gru_log_update(nn.GRU(4, 3, num_layers=2, dropout=0.5), torch.zeros(5, 1, 4))
    with pytest.raises(ValueError, match="does not reproduce"):
        gru.gru_log_update(nn.GRU(4, 3, num_layers=2), torch.randn(5, 1, 4), output=torch.ones(5, 1, 3))
    with pytest.raises(ValueError, match="GRUCell"):
        gru.cell_log_update(nn.LSTMCell(4, 3), torch.zeros(1, 4))


# ----------------------------------------------------------------------------- Keras GRU files

def keras_gru_reference(path, ids, activation):
    """Independent numpy Keras GRU forward (float64) from the HDF5 arrays: CuDNNGRU converted as Keras converts
    it (per gate: kernel k.T.reshape(k.shape, order='F'), recurrent k.T, bias (6u,) -> (2, 3u)); the Keras
    step with gate blocks z, r, h: reset_after=False h~ = tanh(x K_h + b_h + (r h) U_h), reset_after=True
    h~ = tanh(x K_h + b_h + r (h U_h + rb_h)); h = z h_prev + (1 - z) h~. Returns (log z, h) (B, T, u)."""
    import h5py
    with h5py.File(path, "r") as f:
        def arrays(g):
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in g.attrs["weight_names"]]
            return {n.split("/")[-1].split(":")[0]: g[n][()].astype(np.float64) for n in names}
        E = arrays(f["embedding"])["embeddings"]
        w = arrays(f["rnn"])
        k, rk, b = w["kernel"], w["recurrent_kernel"], w["bias"]
    u = rk.shape[0]
    if b.shape == (6 * u,):
        k = np.hstack([kk.T.reshape(kk.shape, order="F") for kk in np.hsplit(k, 3)])
        rk = np.hstack([kk.T for kk in np.hsplit(rk, 3)])
        b = b.reshape(2, -1)
    act = _sig if activation == "sigmoid" else (lambda v: np.clip(0.2 * v + 0.5, 0, 1))
    x = E[ids.numpy()]
    B, T = ids.shape
    h = np.zeros((B, u))
    lz, hs = [], []
    for t in range(T):
        if b.ndim == 1:
            xz = x[:, t] @ k + b
            z = act(xz[:, :u] + h @ rk[:, :u])
            r = act(xz[:, u:2 * u] + h @ rk[:, u:2 * u])
            hh = np.tanh(xz[:, 2 * u:] + (r * h) @ rk[:, 2 * u:])
        else:
            xz, hz = x[:, t] @ k + b[0], h @ rk + b[1]
            z, r = act(xz[:, :u] + hz[:, :u]), act(xz[:, u:2 * u] + hz[:, u:2 * u])
            hh = np.tanh(xz[:, 2 * u:] + r * hz[:, 2 * u:])
        with np.errstate(divide="ignore"):
            lz.append(np.log(z))
        h = z * h + (1 - z) * hh
        hs.append(h)
    return np.stack(lz, 1), np.stack(hs, 1)


def write_keras_gru(path, V=13, E=4, u=5, layout="3u", version="2.0.6", config=None, seed=0, scale=1.0):
    """A tiny Keras HDF5 weight file: embedding -> GRU 'rnn' -> Dense 'output' (model.save_weights layout)."""
    import h5py
    rng = np.random.default_rng(seed)
    bias = {"3u": (3 * u,), "2x3u": (2, 3 * u), "6u": (6 * u,)}[layout]
    arrays = {"embedding": {"embeddings": rng.normal(size=(V, E))},
              "rnn": {"kernel": scale * rng.normal(size=(E, 3 * u)),
                      "recurrent_kernel": scale * rng.normal(size=(u, 3 * u)), "bias": rng.normal(size=bias)},
              "output": {"kernel": rng.normal(size=(u, 3)), "bias": rng.normal(size=3)}}
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"input", b"embedding", b"rnn", b"output"]
        f.attrs["keras_version"] = version.encode()
        if config is not None:
            f.attrs["model_config"] = json.dumps(config).encode()
        f.create_group("input").attrs["weight_names"] = []
        for ln, ws in arrays.items():
            g = f.create_group(ln)
            names = [f"{ln}/{n}:0" for n in ws]
            g.attrs["weight_names"] = [n.encode() for n in names]
            for n, a in zip(names, ws.values()):
                g.create_dataset(n, data=a.astype(np.float32))
    return path


@needs_h5py
@pytest.mark.parametrize("layout,version,activation", [("3u", "2.0.6", "hard_sigmoid"), ("3u", "2.3.1", "sigmoid"),
                                                       ("2x3u", "2.4.0", "sigmoid"), ("2x3u", "2.2.4", "hard_sigmoid"),
                                                       ("6u", "2.1.5", "sigmoid")])
def test_keras_gru_matches_keras_equations(tmp_path, layout, version, activation):
    p = write_keras_gru(str(tmp_path / "g.hdf5"), layout=layout, version=version, scale=3.0)
    w = gru.read_keras_gru(p)
    lyr = w["layers"][0]
    assert lyr["activation"] == activation and lyr["reset_after"] == (layout != "3u")
    assert lyr["cudnn"] == (layout == "6u")
    ids = torch.randint(0, 13, (3, 23), generator=torch.Generator().manual_seed(2))
    hs, lzs = gru.KerasCharGRU(w)(ids)
    ref_lz, ref_h = keras_gru_reference(p, ids, activation)
    np.testing.assert_allclose(hs[0].numpy(), ref_h, atol=2e-5)
    got = lzs[0].numpy()
    zero = ~np.isfinite(ref_lz)
    if activation == "hard_sigmoid":
        assert zero.any() and (ref_lz == 0).any()                    # scale 3: the hard sigmoid saturates both ways
    assert (got[zero] == gru.HARD_FLOOR).all()
    np.testing.assert_allclose(np.exp(got[~zero]), np.exp(ref_lz[~zero]), atol=2e-5)      # z in float32
    np.testing.assert_allclose(got[~zero], ref_lz[~zero], rtol=1e-3, atol=2e-5)
    if layout != "3u" and activation == "sigmoid":                  # torch's nn.GRU computes this form: same gates
        m = gru.keras_gru_to_torch(lyr)
        x = gru.KerasCharGRU(w).embedding(ids).detach()
        out, _ = m(x)
        np.testing.assert_allclose(out.detach().numpy(), ref_h, atol=2e-5)
        np.testing.assert_allclose(gru.gru_log_update(m, x, output=out)[0].numpy(), ref_lz, rtol=1e-5, atol=2e-5)


@needs_h5py
def test_keras_gru_config_and_bad_files(tmp_path):
    cfg = {"config": {"layers": [{"config": {"name": "rnn", "recurrent_activation": "sigmoid", "reset_after": False}}]}}
    w = gru.read_keras_gru(write_keras_gru(str(tmp_path / "c.hdf5"), config=cfg))
    assert w["layers"][0]["activation"] == "sigmoid" and w["layers"][0]["activation_source"] == "config"
    assert gru.read_keras_gru(str(tmp_path / "c.hdf5"), "hard_sigmoid")["layers"][0]["activation"] == "hard_sigmoid"
    bad = {"config": {"layers": [{"config": {"name": "rnn", "reset_after": True}}]}}
    with pytest.raises(ValueError, match="reset_after"):
        gru.read_keras_gru(write_keras_gru(str(tmp_path / "b.hdf5"), config=bad))
    relu = {"config": {"layers": [{"config": {"name": "rnn", "recurrent_activation": "relu"}}]}}
    with pytest.raises(ValueError, match="relu"):
        gru.read_keras_gru(write_keras_gru(str(tmp_path / "r.hdf5"), config=relu))
    with pytest.raises(ValueError, match="nn.GRU computes only"):
        gru.keras_gru_to_torch(gru.read_keras_gru(str(tmp_path / "c.hdf5"))["layers"][0])
    import h5py
    p = str(tmp_path / "l.hdf5")
    write_keras_gru(p)
    with h5py.File(p, "a") as f:                                      # an LSTM's 4 gate blocks
        g = f["rnn"]
        for n, shape in (("kernel", (4, 20)), ("recurrent_kernel", (5, 20)), ("bias", (20,))):
            del g[f"rnn/{n}:0"]
            g.create_dataset(f"rnn/{n}:0", data=np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="this is an LSTM"):
        gru.read_keras_gru(p)
    with pytest.raises(ValueError, match="3 gates"):                   # and the LSTM reader names the GRU
        lstm_mod.read_keras_lstm(write_keras_gru(str(tmp_path / "g.hdf5")))


@needs_rr
def test_reactionrnn_shipped_file():
    model, vocab, info = gru.load_reactionrnn()
    assert info["keras_version"] == "2.0.6" and info["units"] == [256] and info["activation"] == ["hard_sigmoid"]
    assert info["reset_after"] == [False] and model.embedding.weight.shape == (401, 100) and len(vocab) == 400
    w = gru.read_keras_gru(info["weights"])
    lyr = w["layers"][0]
    assert lyr["kernel"].shape == (100, 768) and lyr["recurrent_kernel"].shape == (256, 768)
    assert lyr["b_in"].shape == (768,)
    text = "I love this so much, best day ever!"
    ids = lstm_mod.encode_text(text, vocab).unsqueeze(0)
    pad = torch.cat([torch.zeros(1, gru.TRAINING_LENGTH - ids.shape[1], dtype=torch.int64), ids], 1)
    ref_lz, ref_h = keras_gru_reference(info["weights"], pad, "hard_sigmoid")
    hs, lzs = model(pad)
    np.testing.assert_allclose(hs[0].numpy(), ref_h, atol=3e-5)
    react = model.reactions(pad)[0]
    assert abs(float(react.sum()) - 1) < 1e-5 and int(react.argmax()) == 0      # 'love'


@needs_rr
def test_reactionrnn_trace_through_forget(tmp_path, capsys):
    tr, meta = gru.reactionrnn_traces(n_seq=4, seq_len=256, units=[0, 7, 100])
    assert list(tr) == ["rnn"] and tr["rnn"].shape == (4, 256, 3) and (tr["rnn"] <= 0).all()
    assert meta["activation"] == ["hard_sigmoid"] and 0 < meta["z_zero_fraction"]["rnn"] < 1
    p = str(tmp_path / "r.npz")
    traces.save_trace(p, tr, meta)
    command.main(["--traces", p, "--n-boot", "0", "--no-progress", "--seed", "0"])
    out = capsys.readouterr().out
    assert out.count("\n 0.") >= 3 and "summary (eps" in out


# ----------------------------------------------------------------------------- traces: looks forward, upper bound

def test_bidirectional_trace_labelled(tmp_path, capsys):
    torch.manual_seed(0)
    m = nn.GRU(3, 2, bidirectional=True, batch_first=True).eval()
    cap = lstm_gates.capture_rnn_gates(m, torch.randn(4, 128, 3))
    p = str(tmp_path / "bi.npz")
    traces.save_trace(p, {k: v.numpy() for k, v in cap.items()}, dict(model="toy bidirectional GRU", family="torch-gru",
                                                                       looks_forward=lstm_gates.looks_forward(list(cap))))
    js = str(tmp_path / "bi.json")
    command.main(["--traces", p, "--n-boot", "0", "--no-progress", "--seed", "0", "--json", js])
    out = capsys.readouterr().out
    main = out.split("every law's state at eps")[0]                                  # the table, not the states block
    table = [ln for ln in main.splitlines() if re.match(r"\s*\d+\.\d+ ", ln)]
    assert len(table) == 4 and all(("[fwd]" in ln) == ln.startswith(" 1.") for ln in table)
    assert "[fwd] (looks forward): layers 1 (GRU.reverse)" in " ".join(out.split())
    info = json.load(open(js))["info"]
    assert info["looks_forward"] == ["GRU.reverse"] and info["memory_bound"] == "decay"


def test_delta_rule_families_state_upper_bound(tmp_path, capsys):
    for fam in ("fla-gated-deltanet", "fla-kda"):
        a = adapters.get_adapter(fam)
        assert a.delta_rule and a.memory_bound == adapters.MEMORY_UPPER and "upper" in a.note
    for fam in ("fla-gla", "mamba2", "torch-lstm", "torch-gru", "foxwindow"):
        assert adapters.memory_bound(fam) == "decay"
    rng = np.random.default_rng(0)
    lg = -rng.gamma(2.0, 0.05, size=(4, 128, 2)).astype(np.float32)
    p = str(tmp_path / "gdn.npz")
    traces.save_trace(p, {"model.layers.0.attn": lg, "model.layers.1.mlp_gla": lg},
                      dict(model="toy", families={"model.layers.0.attn": "fla-gated-deltanet",
                                                  "model.layers.1.mlp_gla": "fla-gla"}))
    js = str(tmp_path / "gdn.json")
    command.main(["--traces", p, "--n-boot", "0", "--no-progress", "--seed", "0", "--json", js])
    out = capsys.readouterr().out
    main = out.split("every law's state at eps")[0]                                  # the table, not the states block
    table = [ln for ln in main.splitlines() if re.match(r"\s*\d+\.\d+ ", ln)]
    assert len(table) == 4 and all(("[ub]" in ln) == ln.startswith(" 0.") for ln in table)
    assert "upper: delta-rule erasure not counted" in " ".join(out.split())
    info = json.load(open(js))["info"]
    assert info["memory_bound"] == "mixed"
    assert info["memory_bound_by_layer"] == {"model.layers.0.attn": adapters.MEMORY_UPPER,
                                             "model.layers.1.mlp_gla": "decay"}
