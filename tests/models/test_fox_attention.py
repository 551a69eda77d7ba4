"""Tests for fox_attention.py: the op and its references, the FoX logits, reading gates, traces (CPU, seconds)."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from foxwindow.models import attention as fa
from foxwindow.models.attention import forgetting_attention, forgetting_attention_naive, forgetting_attention_reference
from foxwindow.models.fox import FoXConfig, FoXLM
from foxwindow.models.traces import capture_gates, load_trace, run_with_cache, save_trace


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
        def f(q, k, v, lg, causal=causal):
            return forgetting_attention_reference(q, k, v, lg, causal=causal, chunk=2)
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


@pytest.mark.parametrize("causal", [True, False])
def test_naive_matches_oracle_and_reference(causal):
    q, k, v, lg = rand_inputs(2, 37, 4, 8, 1.0, Hk=2)
    got = forgetting_attention_naive(q, k, v, lg, causal=causal)
    assert got.shape == q.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), naive(q, k, v, lg, causal=causal), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(got, forgetting_attention_reference(q, k, v, lg, causal=causal, chunk=8),
                               atol=1e-6, rtol=1e-5)
    part = forgetting_attention_naive(q[:, -6:], k, v, lg, causal=causal, sm_scale=0.3)
    torch.testing.assert_close(part.double(), naive(q[:, -6:], k, v, lg, scale=0.3, causal=causal),
                               atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="<= 0"):
        forgetting_attention_naive(q, k, v, lg.abs() + 0.1)


def test_fox_logits_entries():
    """Every entry of fox_logits against its definition: q_i . k_j * scale + c_i - c_j (j <= i, else -inf),
    or - |c_i - c_j| bidirectional; queries at given absolute positions."""
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 6, 4, generator=g)      # (B, H, T, D)
    lg = -torch.rand(1, 6, 2, generator=g, dtype=torch.float64)                           # (B, T, H)
    c = fa.cum_log_gate(lg)
    assert c.shape == (1, 2, 6) and c.dtype == torch.float64
    torch.testing.assert_close(c[0, :, 3], lg[0, :4].sum(0))
    pos = torch.tensor([1, 4, 5])
    for causal in (True, False):
        got = fa.fox_logits(q, k, c[:, :, pos], c, 0.5, causal=causal, q_pos=pos, dtype=torch.float64)
        for h in range(2):
            for a, i in enumerate(pos.tolist()):
                for j in range(6):
                    dc = lg[0, j + 1:i + 1, h].sum() - lg[0, i + 1:j + 1, h].sum()   # c_i - c_j either way round
                    want = (q[0, h, a] @ k[0, h, j]).double() * 0.5 + (dc if causal else -dc.abs())
                    if causal and j > i:
                        assert got[0, h, a, j] == float("-inf")
                    else:
                        torch.testing.assert_close(got[0, h, a, j], want, atol=1e-6, rtol=1e-6)
    # the default query positions are the last T_q keys
    torch.testing.assert_close(fa.fox_logits(q, k, c[:, :, 3:], c, 0.5),
                               fa.fox_logits(q, k, c[:, :, 3:], c, 0.5, q_pos=torch.arange(3, 6)))


def _logits_with_autograd(q, k, c_q, c_k, scale, causal=True, q_pos=None, dtype=None):
    with torch.enable_grad():                       # the out-of-place path: autograd through q
        return fa.fox_logits(q.clone().requires_grad_(True), k, c_q, c_k, scale, causal, q_pos, dtype).detach()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fox_logits_in_place_is_the_autograd_path_bit_for_bit(dtype):
    """Without autograd the logits are formed in place (reused storage, the mask only on the keys that can lie
    after a query): every entry equal to the out-of-place path's, over awkward lengths, query positions (the
    last keys, given, unordered), both directions and result dtypes; a chunked call equal with and without grad."""
    g = torch.Generator().manual_seed(3)
    for causal in (True, False):
        for Tq, Tk in ((1, 1), (3, 17), (129, 300), (64, 64)):
            q = torch.randn(2, 3, Tq, 8, generator=g).to(dtype)
            k = torch.randn(2, 3, Tk, 8, generator=g).to(dtype)
            c = torch.cumsum(-torch.rand(2, 3, Tk, generator=g, dtype=torch.float64) * 5, -1)
            for qp in (None, torch.arange(Tk - Tq, Tk), torch.randperm(Tk, generator=g)[:Tq]):
                for out in (None, torch.float64):
                    want = _logits_with_autograd(q, k, c[..., Tk - Tq:], c, 0.3, causal, qp, out)
                    with torch.no_grad():
                        got = fa.fox_logits(q, k, c[..., Tk - Tq:], c, 0.3, causal, qp, out)
                    assert got.dtype == want.dtype and torch.equal(got, want), (causal, Tq, Tk, qp, out)
    # gates broadcast over the batch: the out-of-place path, the same numbers
    q, k = torch.randn(1, 3, 5, 8, generator=g), torch.randn(1, 3, 9, 8, generator=g)
    c = torch.cumsum(-torch.rand(2, 3, 9, generator=g, dtype=torch.float64), -1)
    with torch.no_grad():
        assert fa.fox_logits(q, k, c[..., 4:], c, 0.3).shape == (2, 3, 5, 9)
    if dtype != torch.bfloat16:
        for causal in (True, False):
            q, k, v, lg = rand_inputs(2, 300, 3, 8, dtype=dtype)
            with torch.no_grad():
                a = fa.forgetting_attention_reference(q, k, v, lg, causal=causal, chunk=64)
            b = fa.forgetting_attention_reference(q.requires_grad_(), k, v, lg, causal=causal, chunk=64)
            assert torch.equal(a, b.detach())


def test_reference_dropout_argument():
    q, k, v, lg = rand_inputs(1, 16, 2, 4)
    torch.manual_seed(0)
    a = forgetting_attention_reference(q, k, v, lg, dropout_p=0.5)
    assert not torch.allclose(a, forgetting_attention_reference(q, k, v, lg))
    for bad in (1.0, -0.1, "0.1"):
        with pytest.raises(ValueError, match="dropout_p"):
            forgetting_attention_reference(q, k, v, lg, dropout_p=bad)


# ----------------------------------------------------------------------------- LM, hooks, capture

def tiny_lm(**kw):
    torch.manual_seed(0)
    return FoXLM(FoXConfig(d_model=32, n_layers=2, n_heads=2, context=64, **kw)).eval()


def test_run_with_cache():
    m = tiny_lm()
    toks = torch.randint(0, 256, (2, 17))
    logits, cache = run_with_cache(m, toks)
    assert logits.shape == (2, 17, 256)
    assert sorted(cache) == [f"blocks.{li}.attn.hook_log_fgate" for li in range(2)]
    for li in range(2):
        c = cache[f"blocks.{li}.attn.hook_log_fgate"]
        assert c.shape == (2, 17, 2) and c.dtype == torch.float32 and (c <= 0).all() and not c.requires_grad
        assert m.blocks[li].attn.hook_log_fgate.name == f"blocks.{li}.attn.hook_log_fgate"
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
        self.layers = nn.ModuleList([nn.ModuleDict({"fgate_proj": nn.Linear(d, H), "mix": nn.Linear(d, d)})
                                     for _ in range(L)])

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
    meta = {"model": "toy", "layers": [0, 1], "heads": 4, "text_span": [{"file": "a.txt", "start": 0, "end": 50}],
            "eps": 1e-3}
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
        with pytest.raises(ValueError, match="corrupt or truncated|corrupt, truncated|missing metadata"):
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


# ----------------------------------------------------------------------------- ACP block pruning and decoding


def _pruning_inputs(B=2, T=150, H=3, D=8, seed=0, gate_mu=0.5):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, D, generator=g) for _ in range(3))
    lg = F.logsigmoid(gate_mu + torch.randn(B, T, H, generator=g))
    return q, k, v, lg


@pytest.mark.parametrize("block,L_tol,U", [(16, 1.0, 0.0), ((16, 24), 3.0, 0.0), ((32, 8), 2.0, "auto"),
                                           (64, 1e4, "auto")])
def test_pruned_fast_path_equals_naive(block, L_tol, U):
    q, k, v, lg = _pruning_inputs()
    naive = fa.forgetting_attention_pruned_naive(q, k, v, lg, L_tol=L_tol, U=U, block=block)
    fast = fa.forgetting_attention_pruned(q, k, v, lg, L_tol=L_tol, U=U, block=block)
    torch.testing.assert_close(fast, naive, atol=1e-6, rtol=1e-5)
    if L_tol == 1e4:                                                  # nothing pruned: the dense op
        torch.testing.assert_close(naive, forgetting_attention_reference(q, k, v, lg), atol=1e-6, rtol=1e-5)


def test_pruned_blocks_follow_the_corner_rule():
    q, k, v, lg = _pruning_inputs(B=1, T=64, H=1)
    c = fa.cum_log_gate(lg)                                           # (1, 1, T)
    L = torch.tensor([2.5], dtype=torch.float64)
    pruned = fa.acp_pruned_blocks(c, L, (8, 16))[0, 0]                # (8, 4)
    for I in range(8):
        for J in range(4):
            i_min, j_max = 8 * I, 16 * J + 15
            want = j_max < i_min and float(c[0, 0, i_min] - c[0, 0, j_max]) < -2.5
            assert bool(pruned[I, J]) == want
    with pytest.raises(ValueError, match="L_tol"):
        fa.forgetting_attention_pruned(q, k, v, lg, L_tol=0.0)
    with pytest.raises(ValueError, match="causal"):
        fa.forgetting_attention_pruned_naive(q, k, v, lg, L_tol=3.0, causal=False)
    with pytest.raises(ValueError, match="U must"):
        fa.forgetting_attention_pruned(q, k, v, lg, L_tol=3.0, U="max")
    with pytest.raises(ValueError, match="block"):
        fa.forgetting_attention_pruned(q, k, v, lg, L_tol=3.0, block=0)


@pytest.mark.parametrize("horizon", [None, [0, 5, 200]])
def test_decoding_step_equals_a_band_of_the_naive_op(horizon):
    q, k, v, lg = _pruning_inputs(B=2, T=40, H=3)
    st, outs = fa.init_kv_cache(horizon), []
    for t in range(40):
        o, st = fa.forgetting_attention_step(q[:, t], k[:, t], v[:, t], lg[:, t], st)
        outs.append(o)
    got = torch.stack(outs, 1)                                        # (B, T, H, D)
    c = fa.cum_log_gate(lg)
    logits = fa.fox_logits(q.transpose(1, 2), k.transpose(1, 2), c, c, 8 ** -0.5)
    if horizon is not None:
        d = torch.arange(40)[:, None] - torch.arange(40)[None, :]
        logits = logits.masked_fill(d[None] > torch.tensor(horizon)[:, None, None], float("-inf"))
        assert st["k"].shape[2] == 201                                # the ring holds max(h) + 1 keys
    want = (torch.softmax(logits, -1) @ v.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="horizon"):
        fa.init_kv_cache([1.5, 2.0])
