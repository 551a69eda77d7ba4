"""Tests for fox_attention.py and train.py (CPU, well under a minute)."""
import math
import os

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from types import SimpleNamespace

import fox_attention as fa
from fox_attention import (BitLinear, FoXConfig, FoXLM, ForgettingAttention, capture_gates, forgetting_attention,
                           forgetting_attention_reference, load_model, load_trace, run_with_cache, save_model,
                           save_trace)

CKPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints", "fox_shakespeare.pt")


def naive(q, k, v, lg, scale=None, causal=True):
    """Fully materialised float64 forgetting attention, written independently of the reference."""
    q, k, v, lg = (t.double() for t in (q, k, v, lg))
    B, Tq, H, D = q.shape
    Tk = k.shape[1]
    k = k.repeat_interleave(H // k.shape[2], dim=2)
    v = v.repeat_interleave(H // v.shape[2], dim=2)
    scale = D ** -0.5 if scale is None else scale
    c = lg.cumsum(1).permute(0, 2, 1)                             # (B, H, Tk)
    i = torch.arange(Tq) + Tk - Tq
    j = torch.arange(Tk)
    dc = c[:, :, i, None] - c[:, :, None, :]                      # (B, H, Tq, Tk)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        s = (s + dc).masked_fill(j[None, :] > i[:, None], -math.inf)
    else:
        s = s - dc.abs()
    return torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v)


def rand_inputs(B, T, H, D, gate_logit=2.0, Hk=None, Tq=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    Hk = H if Hk is None else Hk
    Tq = T if Tq is None else Tq
    q = torch.randn(B, Tq, H, D, generator=g, dtype=dtype)
    k = torch.randn(B, T, Hk, D, generator=g, dtype=dtype)
    v = torch.randn(B, T, Hk, D, generator=g, dtype=dtype)
    lg = F.logsigmoid(gate_logit + torch.randn(B, T, H, generator=g)).float()
    return q, k, v, lg


# ----------------------------------------------------------------------------- the op

@pytest.mark.parametrize("T", [1, 15, 63, 300])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gate_logit", [-3.0, 2.0, 8.0])
def test_reference_matches_naive(T, causal, gate_logit):
    q, k, v, lg = rand_inputs(2, T, 2, 8, gate_logit)
    got = forgetting_attention_reference(q, k, v, lg, causal=causal, chunk=64)
    assert got.shape == q.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), naive(q, k, v, lg, causal=causal), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(forgetting_attention(q, k, v, lg, causal=causal), got)


def test_decay_is_product_of_gates():
    # explicit D_ij = prod_{t=j+1..i} g_t (no cumulative sums) with q = 0, so weights are D_ij / sum_j D_ij
    T = 9
    g = torch.rand(1, T, 1, generator=torch.Generator().manual_seed(1)) * 0.5 + 0.4
    q = torch.zeros(1, T, 1, T)
    v = torch.eye(T).view(1, T, 1, T)                                # value j = one-hot j: output row = weights
    w = forgetting_attention_reference(q, q.clone(), v, g.log(), causal=True)[0, :, 0]  # (T, T)
    Dm = torch.zeros(T, T)
    for i in range(T):
        for j in range(i + 1):
            Dm[i, j] = torch.prod(g[0, j + 1:i + 1, 0])
    torch.testing.assert_close(w, Dm / Dm.sum(1, keepdim=True))


def test_chunk_invariance():
    q, k, v, lg = rand_inputs(1, 63, 2, 4, 1.0)
    outs = [forgetting_attention_reference(q, k, v, lg, chunk=c) for c in (1, 7, 64, 1000)]
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], atol=1e-6, rtol=1e-5)
    o2 = [forgetting_attention_reference(q, k, v, lg, chunk=c, causal=False) for c in (5, 100)]
    torch.testing.assert_close(o2[0], o2[1], atol=1e-6, rtol=1e-5)


def test_gqa():
    q, k, v, lg = rand_inputs(2, 40, 4, 8, 2.0, Hk=2)
    got = forgetting_attention(q, k, v, lg)
    torch.testing.assert_close(got.double(), naive(q, k, v, lg), atol=2e-5, rtol=1e-4)
    full = forgetting_attention(q, k.repeat_interleave(2, 2), v.repeat_interleave(2, 2), lg)
    torch.testing.assert_close(got, full)


@pytest.mark.parametrize("Tq", [1, 5, 31])
def test_short_queries_are_the_last_rows(Tq):
    q, k, v, lg = rand_inputs(1, 31, 2, 8, 2.0)
    full = forgetting_attention(q, k, v, lg)
    part = forgetting_attention(q[:, -Tq:], k, v, lg, chunk=4)
    torch.testing.assert_close(part, full[:, -Tq:])
    torch.testing.assert_close(part.double(), naive(q[:, -Tq:], k, v, lg), atol=2e-5, rtol=1e-4)


def test_bidirectional_forgets_both_ways():
    T, m = 21, 0.3
    lg = torch.full((1, T, 1), -m)
    q = torch.zeros(1, T, 1, T)
    v = torch.eye(T).view(1, T, 1, T)
    w = forgetting_attention(q, q.clone(), v, lg, causal=False)[0, :, 0]   # (T, T) attention weights
    i = 10
    for d in range(1, 11):
        torch.testing.assert_close(w[i, i + d], w[i, i - d])               # symmetric decay
        assert w[i, i + d] < w[i, i + d - 1]                                # forgotten with distance
    torch.testing.assert_close(w[i, i + 10] / w[i, i], torch.tensor(math.exp(-10 * m)))
    # the seed's encoder added c_i - c_j = +m (j - i) for j > i: far-future tokens were boosted
    assert w[i, T - 1] < w[i, i + 1] < w[i, i]


def test_gradcheck():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 5, 2, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lg = (-0.2 - torch.rand(1, 5, 2, generator=g, dtype=torch.float64)).requires_grad_()   # stays < 0 under eps
    for causal in (True, False):
        f = lambda q, k, v, lg: forgetting_attention_reference(q, k, v, lg, causal=causal, chunk=2)
        assert torch.autograd.gradcheck(f, (q, k, v, lg), eps=1e-6, atol=1e-6)


def test_input_errors():
    q, k, v, lg = rand_inputs(1, 8, 2, 4)
    bad = [
        ((q[0], k, v, lg), "must be \\(B, T, H, D\\)"),
        ((q.double(), k, v, lg), "share a dtype"),
        ((q, k, v, lg.half()), "float32"),
        ((q, k, v, lg[:, :4]), "log_fgate must be"),
        ((q, k, v, lg.abs() + 0.1), "<= 0"),
        ((q, k, v, torch.where(lg < -10, lg, torch.full_like(lg, float("nan")))), "NaN"),
        ((torch.randn(1, 9, 2, 4), k, v, lg), "must not exceed"),
        ((torch.randn(1, 8, 3, 4), k, v, torch.zeros(1, 8, 3)), "multiple"),
        ((q.long(), k.long(), v.long(), lg), "floating"),
    ]
    for args, msg in bad:
        with pytest.raises(ValueError, match=msg):
            forgetting_attention(*args)
    with pytest.raises(ValueError, match="sm_scale"):
        forgetting_attention(q, k, v, lg, sm_scale=-1.0)
    with pytest.raises(ValueError, match="chunk"):
        forgetting_attention_reference(q, k, v, lg, chunk=0)


# ----------------------------------------------------------------------------- layer

def layer_cfg(**kw):
    base = dict(hidden_size=32, num_heads=4, dropout=0.0, use_bitnet=False)
    base.update(kw)
    return SimpleNamespace(**base)


def test_layer_config_errors():
    for kw, msg in [(dict(hidden_size=30), "divisible"), (dict(mode="causal"), "mode"),
                    (dict(dropout=1.0), "dropout"), (dict(dropout=-0.1), "dropout"), (dict(num_heads=0), "positive")]:
        with pytest.raises(ValueError, match=msg):
            ForgettingAttention(layer_cfg(**kw))
    with pytest.raises(ValueError, match="fgate_bias_init"):
        ForgettingAttention(layer_cfg(fgate_bias_init="wide"))
    with pytest.raises(ValueError, match="x must be"):
        ForgettingAttention(layer_cfg())(torch.randn(2, 5, 16))


def test_layer_modes_and_gates():
    torch.manual_seed(0)
    enc = ForgettingAttention(layer_cfg())
    assert enc.mode == "encoder"                                     # the seed's default
    dec = ForgettingAttention(layer_cfg(mode="decoder"))
    x = torch.randn(2, 12, 32)
    assert enc(x).shape == x.shape
    # causal: changing the future does not change the past
    y1, x2 = dec(x), x.clone()
    x2[:, 8:] = torch.randn(2, 4, 32)
    torch.testing.assert_close(dec(x2)[:, :8], y1[:, :8])
    # gates start spread over heads and in (0, 1); log gates exact (no log(1e-6) floor)
    lg = dec.log_fgate(x)
    assert lg.dtype == torch.float32 and lg.shape == (2, 12, 4) and (lg < 0).all()
    assert torch.all(lg.mean((0, 1)).diff() > 0)
    with torch.no_grad():
        dec.f_proj.bias.fill_(-40.0)
    assert dec.log_fgate(x).min() < -39                              # log(sigmoid + 1e-6) would stop at -13.8


def test_fixed_gate_is_plain_softmax():
    torch.manual_seed(0)
    att = ForgettingAttention(layer_cfg(mode="decoder", fixed_gate=True))
    assert att.f_proj is None
    x = torch.randn(1, 10, 32)
    B, T, H, D = 1, 10, 4, 8
    q, k, v = (p(x).view(B, T, H, D).transpose(1, 2) for p in (att.q_proj, att.k_proj, att.v_proj))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, 32)
    torch.testing.assert_close(att(x), att.out_proj(ref), atol=1e-6, rtol=1e-5)


def test_layer_dropout_only_in_training():
    att = ForgettingAttention(layer_cfg(mode="decoder", dropout=0.5))
    x = torch.randn(1, 16, 32)
    att.eval()
    torch.testing.assert_close(att(x), att(x))
    att.train()
    assert not torch.allclose(att(x), att(x))


def test_bitlinear_ternary_and_ste():
    torch.manual_seed(0)
    lin = BitLinear(16, 8, bias=True)
    wq = lin.ternary_weight()
    gamma = lin.weight.abs().mean()
    assert set(torch.unique(torch.round(wq / gamma)).tolist()) <= {-1.0, 0.0, 1.0}
    torch.testing.assert_close(wq.abs().max(), gamma)
    x = torch.randn(4, 16, requires_grad=True)
    y = lin(x)
    torch.testing.assert_close(y, F.linear(x, wq, lin.bias))
    gy = torch.randn_like(y)
    y.backward(gy)
    torch.testing.assert_close(lin.weight.grad, gy.t() @ x.detach())   # straight-through: dL/dW as if unrounded
    torch.testing.assert_close(x.grad, gy @ wq)
    lin8 = BitLinear(16, 8, act_bits=8)
    x8 = torch.randn(4, 16, requires_grad=True)
    lin8(x8).sum().backward()
    assert x8.grad is not None and torch.isfinite(x8.grad).all() and lin8.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="act_bits"):
        BitLinear(4, 4, act_bits=4)
    att = ForgettingAttention(layer_cfg(use_bitnet=True, mode="decoder"))
    assert isinstance(att.q_proj, BitLinear) and not isinstance(att.f_proj, BitLinear)
    att(torch.randn(1, 6, 32)).sum().backward()
    assert att.q_proj.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- LM, hooks, capture

def tiny_lm(**kw):
    torch.manual_seed(0)
    return FoXLM(FoXConfig(d_model=32, n_layers=2, n_heads=2, context=64, **kw)).eval()


def test_run_with_cache():
    m = tiny_lm()
    toks = torch.randint(0, 256, (2, 17))
    logits, cache = run_with_cache(m, toks)
    assert logits.shape == (2, 17, 256)
    assert sorted(cache) == [f"blocks.{l}.attn.hook_log_fgate" for l in range(2)]
    for l in range(2):
        c = cache[f"blocks.{l}.attn.hook_log_fgate"]
        assert c.shape == (2, 17, 2) and c.dtype == torch.float32 and (c <= 0).all() and not c.requires_grad
        assert m.blocks[l].attn.hook_log_fgate.name == f"blocks.{l}.attn.hook_log_fgate"
    torch.testing.assert_close(logits, m(toks))
    _, c1 = run_with_cache(m, toks, names_filter=["blocks.1.attn.hook_log_fgate"])
    _, c2 = run_with_cache(m, toks, names_filter=lambda n: n.startswith("blocks.0"))
    assert list(c1) == ["blocks.1.attn.hook_log_fgate"] and list(c2) == ["blocks.0.attn.hook_log_fgate"]
    with pytest.raises(ValueError, match="unknown hook"):
        run_with_cache(m, toks, names_filter=["blocks.9.attn.hook_log_fgate"])


def test_run_with_cache_removes_hooks_on_error(monkeypatch):
    m = tiny_lm()
    monkeypatch.setattr(m.ln_f, "forward", lambda x: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        run_with_cache(m, torch.randint(0, 256, (1, 8)))
    assert all(len(mod._forward_hooks) == 0 for mod in m.modules())


def test_hook_patching():
    m = tiny_lm()
    toks = torch.randint(0, 256, (1, 20))
    base = m(toks)
    h = m.blocks[0].attn.hook_log_fgate.register_forward_hook(lambda mod, i, o: torch.zeros_like(o))
    try:
        assert not torch.allclose(m(toks), base)
    finally:
        h.remove()
    h = m.blocks[0].attn.hook_log_fgate.register_forward_hook(lambda mod, i, o: o.abs() + 1)
    try:
        with pytest.raises(ValueError, match="<= 0"):
            m(toks)
    finally:
        h.remove()
    torch.testing.assert_close(m(toks), base)


def test_fixed_gate_lm_caches_zeros():
    _, cache = run_with_cache(tiny_lm(fixed_gate=True), torch.randint(0, 256, (1, 9)))
    assert all((c == 0).all() for c in cache.values())


class ToyFoX(nn.Module):
    """Stand-in for an official-FoX-style model: per-layer `fgate_proj` producing gate logits."""

    def __init__(self, d=8, H=3, L=2):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleDict({"fgate_proj": nn.Linear(d, H), "mix": nn.Linear(d, d)}) for _ in range(L)])

    def forward(self, x):
        for layer in self.layers:
            layer["fgate_proj"](x)
            x = x + layer["mix"](x)
        return x


def test_capture_gates():
    torch.manual_seed(0)
    toy = ToyFoX()
    x = torch.randn(2, 7, 8)
    got = capture_gates(toy, x)
    assert sorted(got) == ["layers.0.fgate_proj", "layers.1.fgate_proj"]
    x1 = x + toy.layers[0]["mix"](x)
    torch.testing.assert_close(got["layers.1.fgate_proj"], F.logsigmoid(toy.layers[1]["fgate_proj"](x1)))
    assert all(v.shape == (2, 7, 3) and v.dtype == torch.float32 for v in got.values())
    one = capture_gates(toy, x, gate_names=["layers.0.fgate_proj"])
    assert list(one) == ["layers.0.fgate_proj"]
    with pytest.raises(ValueError, match="no submodule"):
        capture_gates(toy, x, gate_names=["gate"])
    with pytest.raises(ValueError, match="not log gates"):
        capture_gates(toy, x, to_log_gate=lambda z: z.abs() + 1)
    with pytest.raises(ValueError, match="no forget-gate"):
        capture_gates(nn.Linear(8, 8), x)
    assert all(len(mod._forward_hooks) == 0 for mod in toy.modules())
    # on the FoX LM it reads the HookPoints: same as run_with_cache
    m, toks = tiny_lm(), torch.randint(0, 256, (1, 11))
    _, cache = run_with_cache(m, toks)
    got = capture_gates(m, toks)
    assert got.keys() == cache.keys() and all(torch.equal(got[k], cache[k]) for k in got)
    fl = capture_gates(m, toks, gate_names=["f_proj"])        # flash-linear-attention naming, via logsigmoid
    torch.testing.assert_close(fl["blocks.1.attn.f_proj"], cache["blocks.1.attn.hook_log_fgate"])


# ----------------------------------------------------------------------------- traces

def test_trace_roundtrip_and_errors(tmp_path):
    rng = np.random.default_rng(0)
    tr = {"blocks.0.attn.hook_log_fgate": -rng.random((2, 50, 4)).astype(np.float32),
          "blocks.1.attn.hook_log_fgate": torch.zeros(2, 50, 4)}
    meta = {"model": "toy", "layers": [0, 1], "heads": 4, "text_span": [{"file": "a.txt", "start": 0, "end": 50}], "eps": 1e-3}
    p = str(tmp_path / "t.npz")
    save_trace(p, tr, meta)
    back, m2 = load_trace(p)
    assert list(back) == list(tr) and m2["model"] == "toy" and m2["eps"] == 1e-3 and m2["text_span"][0]["end"] == 50
    np.testing.assert_array_equal(back["blocks.0.attn.hook_log_fgate"], tr["blocks.0.attn.hook_log_fgate"])
    assert back["blocks.1.attn.hook_log_fgate"].dtype == np.float32
    # bad inputs to save
    for bad, msg in [({"a": np.ones((1, 3, 2))}, "positive"), ({"a": np.zeros((3, 2))}, "\\(B, T, H\\)"),
                     ({"a": np.full((1, 3, 2), np.nan)}, "NaN"), ({}, "non-empty")]:
        with pytest.raises(ValueError, match=msg):
            save_trace(str(tmp_path / "x.npz"), bad, meta)
    with pytest.raises(ValueError, match="JSON"):
        save_trace(str(tmp_path / "x.npz"), tr, {"obj": object()})
    # corrupt / truncated / mismatched files
    raw = open(p, "rb").read()
    cases = {}
    cases["truncated"] = raw[: len(raw) // 2]
    cases["garbage"] = b"not a zip at all" * 10
    for name, blob in cases.items():
        q = tmp_path / f"{name}.npz"
        q.write_bytes(blob)
        with pytest.raises(ValueError, match="corrupt or truncated|missing metadata"):
            load_trace(str(q))
    q = str(tmp_path / "nometa.npz")
    with open(q, "wb") as fh:
        np.savez(fh, trace_0=np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="missing metadata"):
        load_trace(q)

    def rewrite(meta_over=None, arr=None):
        _, md = load_trace(p)
        md.update(meta_over or {})
        q = str(tmp_path / "edit.npz")
        arrays = {"trace_0": arr if arr is not None else back["blocks.0.attn.hook_log_fgate"],
                  "trace_1": back["blocks.1.attn.hook_log_fgate"],
                  "meta_json": np.frombuffer(__import__("json").dumps(md).encode(), np.uint8)}
        with open(q, "wb") as fh:
            np.savez(fh, **arrays)
        return q

    with pytest.raises(ValueError, match="shape"):
        load_trace(rewrite({"shapes": [[2, 49, 4], [2, 50, 4]]}))
    with pytest.raises(ValueError, match="heads"):
        load_trace(rewrite({"heads": 3}))
    with pytest.raises(ValueError, match="positive"):
        load_trace(rewrite(arr=np.ones((2, 50, 4), np.float32)))
    with pytest.raises(ValueError, match="NaN"):
        load_trace(rewrite(arr=np.full((2, 50, 4), np.nan, np.float32)))
    with pytest.raises(ValueError, match="format"):
        load_trace(rewrite({"format": "other"}))
    with pytest.raises(ValueError, match="lists 1 traces"):
        load_trace(rewrite({"names": ["a"], "shapes": [[2, 50, 4]]}))
    with pytest.raises(FileNotFoundError):
        load_trace(str(tmp_path / "absent.npz"))


# ----------------------------------------------------------------------------- checkpoints and training

def test_save_load_model_and_errors(tmp_path):
    m = tiny_lm()
    p = str(tmp_path / "m.pt")
    save_model(p, m, {"note": "x"})
    m2, meta = load_model(p)
    assert meta == {"note": "x"}
    toks = torch.randint(0, 256, (1, 12))
    torch.testing.assert_close(m2(toks), m(toks), atol=2e-2, rtol=2e-2)   # fp16 storage
    with pytest.raises(FileNotFoundError):
        load_model(str(tmp_path / "absent.pt"))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00garbage" * 20)
    with pytest.raises(ValueError, match="corrupt"):
        load_model(str(bad))
    ck = torch.load(p, weights_only=True)
    ck["config"]["d_model"] = 64
    torch.save(ck, str(tmp_path / "mm.pt"))
    with pytest.raises(ValueError, match="shape"):
        load_model(str(tmp_path / "mm.pt"))
    ck["config"]["d_model"] = 32
    del ck["state_dict"]["wte.weight"]
    torch.save(ck, str(tmp_path / "mk.pt"))
    with pytest.raises(ValueError, match="missing"):
        load_model(str(tmp_path / "mk.pt"))
    torch.save({"weights": 1}, str(tmp_path / "other.pt"))
    with pytest.raises(ValueError, match="not a"):
        load_model(str(tmp_path / "other.pt"))


def test_heldout_tokens_deterministic():
    import train
    t1, s1 = train.heldout_tokens(n_seq=4, seq_len=256)
    t2, s2 = train.heldout_tokens(n_seq=4, seq_len=256)
    assert t1.shape == (4, 256) and t1.dtype == torch.long and torch.equal(t1, t2) and s1 == s2
    data = dict(train.load_split("val"))
    for row, sp in zip(t1, s1):
        assert bytes(row.tolist()) == data[sp["file"]][sp["start"]:sp["end"]]
    split = train.split_files()
    assert not set(split["train"]) & set(split["val"]) and {s["file"] for s in s1} <= set(split["val"])
    with pytest.raises(ValueError, match="windows"):
        train.heldout_tokens(n_seq=10, seq_len=10 ** 6)


def test_training_steps_run(tmp_path):
    import train
    out = str(tmp_path / "tiny.pt")
    train.main(["--steps", "4", "--context", "64", "--batch", "2", "--d-model", "32", "--layers", "1", "--heads", "2",
                "--eval-seqs", "2", "--warmup", "1", "--lr", "1e-2", "--out", out, "--log-every", "0", "--device", "cpu"])
    m, meta = load_model(out)
    assert meta["steps"] == 4 and math.isfinite(meta["final_train_loss"]) and math.isfinite(meta["val_bpc"])
    # the same few steps on one fixed batch must lower the loss
    torch.manual_seed(0)
    m = FoXLM(FoXConfig(d_model=32, n_layers=1, n_heads=2, context=64))
    x, y = train.get_batch(train.train_stream(), 2, 64, torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(l) for l in losses) and losses[-1] < losses[0]


@pytest.mark.skipif(not os.path.exists(CKPT), reason="shipped checkpoint not trained yet")
def test_shipped_checkpoint():
    assert os.path.getsize(CKPT) <= 5 * 1024 * 1024
    m, meta = load_model(CKPT)
    assert meta["context"] >= 1024 and meta["config"]["fixed_gate"] is False
    for key in ("data", "steps", "tokens_seen", "device", "wall_time_s", "final_train_loss", "val_bpc"):
        assert key in meta
    base = meta["baseline_fixed_gate"]
    assert base["steps"] == meta["steps"] and base["tokens_seen"] == meta["tokens_seen"]
    assert meta["val_bpc"] <= base["val_bpc"]
    toks = torch.randint(0, 256, (1, 64))
    _, cache = run_with_cache(m, toks)
    assert len(cache) == meta["config"]["n_layers"] and all((c <= 0).all() for c in cache.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("autocast", [False, True])
def test_gpu_model_trains_on_fused_kernel(monkeypatch, autocast):
    import kernels.fox_triton as kt
    calls = []
    real = kt.fox_attention_triton
    monkeypatch.setattr(kt, "fox_attention_triton", lambda *a, **kw: calls.append(a[0].dtype) or real(*a, **kw))
    torch.manual_seed(0)
    m = FoXLM(FoXConfig(d_model=128, n_layers=2, n_heads=4, context=512)).cuda()
    import train
    x, y = (t.cuda() for t in train.get_batch(train.train_stream(), 4, 512, torch.Generator().manual_seed(0)))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert calls and calls[0] == (torch.bfloat16 if autocast else torch.float32), calls[:2]
    assert all(math.isfinite(l) for l in losses) and losses[-1] < losses[0], losses
