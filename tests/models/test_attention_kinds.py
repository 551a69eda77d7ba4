"""Tests for attention_kinds.py (registry, kinds, recurrent forms, the LM) and reach.py's attribution window."""
import math

import pytest
import torch
import torch.nn as nn

from foxwindow.models import kinds as ak
from foxwindow.models.attention import forgetting_attention_reference
from foxwindow.models.fox import FoXConfig, FoXLM
from foxwindow.models.kinds import AttentionRegistry, Float, Int, Optional, build_model
from foxwindow.models.traces import capture_gates
from foxwindow.training import reach

torch.set_num_threads(1)

KINDS = {"softmax": {}, "fox": {}, "alibi": {}, "swa": {"w": 5}, "bswa": {"block": 6, "mem": 1},
         "fam": {"block": 6, "mem": 1, "fam_len": 3}}
PARALLEL = ("softmax", "fox", "alibi", "swa", "bswa")


def qkv(B=2, T=23, H=4, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, T, H, D, generator=g) for _ in range(3)]


def log_gates(B, T, H, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.logsigmoid(torch.randn(B, T, H, generator=g) + 2.0)


def kind_module(name, H=4, D=8):
    return AttentionRegistry.build(name, d_model=H * D, n_heads=H, **KINDS[name])


def call(mod, name, q, k, v, lg=None):
    return mod(q, k, v, log_fgate=lg) if name == "fox" else mod(q, k, v)


class QuadraticAttention(nn.Module):
    """The fast-transformers example kind: (temp * q.k)^2, masked causally, normalised."""

    def __init__(self, quadratic_temp=1.0, eps=1e-6):
        super().__init__()
        self.quadratic_temp, self.eps = quadratic_temp, eps

    def forward(self, q, k, v, mask=None):
        QK = torch.einsum("nlhe,nshe->nhls", q, k)
        QK = torch.square(self.quadratic_temp * QK)
        QK = QK * ak.causal_mask(q.shape[1], k.shape[1], q.device).float()
        if mask is not None:
            QK = QK * mask.float()
        A = QK / (QK.sum(dim=-1, keepdim=True) + self.eps)
        return torch.einsum("nhls,nshd->nlhd", A, v).contiguous()


# ----------------------------------------------------------------------------- registry


def test_registry_lookup_and_defaults():
    assert set(KINDS) <= set(AttentionRegistry.names())
    cls, specs = AttentionRegistry.lookup("swa")
    assert cls is ak.SlidingWindowAttention and [p for p, _ in specs] == ["w"]
    assert AttentionRegistry.validate("bswa") == {"block": 64, "mem": 1}
    assert AttentionRegistry.validate("swa", w=3) == {"w": 3}


def test_registry_register_and_errors():
    reg = ak.Registry()
    reg.register("square", QuadraticAttention, [("quadratic_temp", Optional(Float, 1.0))])
    assert "square" in reg and reg.validate("square") == {"quadratic_temp": 1.0}
    with pytest.raises(ValueError, match="already registered"):
        reg.register("square", QuadraticAttention)
    with pytest.raises(ValueError, match="unknown attention_type 'nope'"):
        reg.lookup("nope")
    with pytest.raises(ValueError, match="nn.Module"):
        reg.register("bad", object)
    with pytest.raises(ValueError, match="Spec"):
        reg.register("bad", QuadraticAttention, [("quadratic_temp", 1.0)])
    reg.register("req", ak.SlidingWindowAttention, [("w", Int(min=1))])
    with pytest.raises(ValueError, match="requires parameter 'w'"):
        reg.validate("req")
    with pytest.raises(ValueError, match="quadratic_temp"):
        reg.validate("square", quadratic_temp="hot")


@pytest.mark.parametrize("kind,params,msg", [
    ("swa", {"w": 0}, "'w' must be >= 1"),
    ("swa", {"w": 2.5}, "'w' must be an int"),
    ("swa", {"window": 4}, r"no parameter\(s\) \['window'\]"),
    ("bswa", {"mem": -1}, "'mem' must be >= 0"),
    ("alibi", {"slope_scale": 0.0}, "'slope_scale' must be > 0"),
    ("fam", {"state_passing": 1.5}, "'state_passing' must be <= 1"),
    ("fam", {"random_position_offset": 10}, "no positional embedding"),
    ("fox", {"fgate_bias": float("nan")}, "'fgate_bias' must be finite"),
    ("nope", {}, "unknown attention_type"),
])
def test_bad_parameters_raise(kind, params, msg):
    with pytest.raises(ValueError, match=msg):
        build_model(kind, **params)


def test_bad_model_sizes_raise():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        build_model("softmax", d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        build_model("softmax", n_layers=0)
    q, k, v = qkv()
    with pytest.raises(ValueError, match="mask of shape"):
        ak.SoftmaxAttention()(q, k, v, mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="needs log_fgate"):
        kind_module("fox")(q, k, v)


# ----------------------------------------------------------------------------- kinds


@pytest.mark.parametrize("name", PARALLEL)
def test_shape_and_causality_attention(name):
    q, k, v = qkv()
    lg = log_gates(2, 23, 4)
    mod = kind_module(name)
    o = call(mod, name, q, k, v, lg)
    assert o.shape == q.shape and torch.isfinite(o).all()
    i = 11
    q2, k2, v2, lg2 = q.clone(), k.clone(), v.clone(), lg.clone()
    for t in (q2, k2, v2):
        t[:, i + 1:] += 3.0 * torch.randn_like(t[:, i + 1:])
    lg2[:, i + 1:] -= 1.0
    o2 = call(mod, name, q2, k2, v2, lg2)
    assert torch.equal(o[:, :i + 1], o2[:, :i + 1])
    assert not torch.allclose(o[:, i + 1:], o2[:, i + 1:])


@pytest.mark.parametrize("name", list(KINDS))
def test_shape_and_causality_model(name):
    torch.manual_seed(0)
    m = build_model(name, n_layers=2, d_model=32, n_heads=4, **KINDS[name]).eval()
    x = torch.randint(0, 256, (2, 29))
    lg = m(x)
    assert lg.shape == (2, 29, 256)
    i = 13
    x2 = x.clone()
    x2[:, i + 1:] = torch.randint(0, 256, (2, 29 - i - 1))
    lg2 = m(x2)
    assert torch.equal(lg[:, :i + 1], lg2[:, :i + 1])


def brute_keep(name, T, p):
    keep = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(i + 1):
            if name == "swa":
                keep[i, j] = i - j <= p["w"] - 1
            else:
                keep[i, j] = j // p["block"] >= i // p["block"] - p["mem"]
    return keep


@pytest.mark.parametrize("name,p", [("swa", {"w": 1}), ("swa", {"w": 5}), ("swa", {"w": 40}),
                                    ("bswa", {"block": 4, "mem": 0}), ("bswa", {"block": 5, "mem": 2}),
                                    ("bswa", {"block": 1, "mem": 3})])
def test_window_masks_exact(name, p):
    T = 31
    mod = AttentionRegistry.build(name, **p)
    assert torch.equal(mod.keep(T, T), brute_keep(name, T, p))
    # queries at the end of a longer key sequence (KV cache) see the same absolute pattern
    assert torch.equal(mod.keep(7, T), brute_keep(name, T, p)[-7:])
    q, k, v = qkv(T=T)
    ref = ak.attend(q, k, v, keep=brute_keep(name, T, p))
    assert torch.allclose(mod(q, k, v), ref, atol=1e-6)


def test_alibi_is_softmax_plus_linear_bias():
    q, k, v = qkv(T=19)
    H, T = 4, 19
    m = torch.tensor(ak.alibi_slopes(H))
    assert torch.allclose(m, torch.tensor([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]))
    assert len(ak.alibi_slopes(6)) == 6 and ak.alibi_slopes(6)[4:] == [2 ** -1, 2 ** -3]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    logits = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1]) - m[None, :, None, None] * (i - j)
    logits = logits.masked_fill(j > i, float("-inf"))
    ref = torch.einsum("bhij,bjhd->bihd", torch.softmax(logits, -1), v)
    assert (kind_module("alibi")(q, k, v) - ref).abs().max() < 1e-5


def test_fox_kind_equals_reference():
    q, k, v = qkv(T=40)
    lg = log_gates(2, 40, 4)
    mod = kind_module("fox")
    ref = forgetting_attention_reference(q, k, v, lg)
    assert (mod(q, k, v, log_fgate=lg) - ref).abs().max() < 1e-5
    # the masked path (used when a mask is given) agrees too
    full = torch.ones(40, 40, dtype=torch.bool)
    assert (mod(q, k, v, mask=full, log_fgate=lg) - ref).abs().max() < 1e-5
    # T_q < T_k (decoding with a cache)
    assert (mod(q[:, -5:], k, v, log_fgate=lg) - ref[:, -5:]).abs().max() < 1e-5


def test_fox_model_exposes_gate_hook():
    m = build_model("fox", n_layers=2, d_model=32, n_heads=4)
    gates = capture_gates(m, torch.randint(0, 256, (1, 12)))
    assert sorted(gates) == ["blocks.0.attn.attention.hook_log_fgate", "blocks.1.attn.attention.hook_log_fgate"]
    assert gates["blocks.0.attn.attention.hook_log_fgate"].shape == (1, 12, 4)


def test_mask_argument_bool_and_additive():
    q, k, v = qkv(T=9)
    sm = ak.SoftmaxAttention()
    keep = ak.causal_mask(9, 9) & (torch.arange(9)[None, :] >= 2)
    keep[0, 0] = keep[1, 1] = True
    add = torch.zeros(9, 9).masked_fill(~keep, float("-inf"))
    assert torch.allclose(sm(q, k, v, mask=keep), sm(q, k, v, mask=add), atol=1e-6)
    assert torch.allclose(sm(q, k, v, mask=keep), ak.attend(q, k, v, keep=keep), atol=1e-6)


# ----------------------------------------------------------------------------- recurrent forms


@pytest.mark.parametrize("name", ["fox", "alibi", "swa"])
@pytest.mark.parametrize("T", [1, 15, 63, 100])
def test_recurrent_matches_parallel(name, T):
    q, k, v = qkv(B=2, T=T, H=4, D=8, seed=T)
    lg = log_gates(2, T, 4, seed=T)
    mod = kind_module(name)
    par = call(mod, name, q, k, v, lg)
    st, outs = mod.init_state(), []
    for t in range(T):
        extra = {"log_fgate": lg[:, t]} if name == "fox" else {}
        o, st = mod.step(q[:, t], k[:, t], v[:, t], st, **extra)
        outs.append(o)
    assert (torch.stack(outs, 1) - par).abs().max().item() < 1e-5
    if name == "swa":
        assert st["k"].shape[2] == min(T, KINDS["swa"]["w"])


@pytest.mark.parametrize("name", ["fox", "alibi", "swa"])
def test_model_recurrent_decoding(name):
    torch.manual_seed(0)
    m = build_model(name, n_layers=2, d_model=32, n_heads=4, **KINDS[name]).eval()
    x = torch.randint(0, 256, (2, 30))
    with torch.no_grad():
        par = m(x)
    st, outs = None, []
    for t in range(30):
        o, st = m.step(x[:, t], st)
        outs.append(o)
    assert (torch.stack(outs, 1) - par).abs().max().item() < 1e-4


# ----------------------------------------------------------------------------- training and FAM


def _train_steps(m, n=3, T=24):
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(n):
        x = torch.randint(0, 256, (2, T + 1), generator=g)
        _, loss = m(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_user_kind_registers_and_trains():
    AttentionRegistry.register("square", QuadraticAttention, [("quadratic_temp", Optional(Float, 1.0))], replace=True)
    m = build_model(attention_type="square", n_layers=2, d_model=32, n_heads=4, quadratic_temp=5.0)
    assert m.blocks[0].attn.attention.quadratic_temp == 5.0
    losses = _train_steps(m)
    assert all(math.isfinite(li) for li in losses)


def test_fam_forward_backward_ragged_length():
    torch.manual_seed(0)
    m = build_model("fam", n_layers=2, d_model=32, n_heads=4, block=6, mem=1, fam_len=3, state_passing=1.0)
    x = torch.randint(0, 256, (2, 20))                        # 20 = 3 blocks of 6 + 2
    _, loss = m(x, x)
    loss.backward()
    assert math.isfinite(loss.item()) and m.fam_init.grad is not None and m.fam_init.grad.abs().sum() > 0
    assert m.has_saved
    # with state passing at probability 1 the next training step starts from the saved FAM
    assert all(math.isfinite(li) for li in _train_steps(m, n=2, T=13))


def test_fam_reaches_beyond_bswa():
    """One layer, block 4, mem 1: BSWA cannot see token 0 from position 15; FAM carries it forward."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, (1, 16))
    x2 = x.clone()
    x2[0, 0] = (x[0, 0] + 1) % 256
    for name, p, reached in (("bswa", {"block": 4, "mem": 1}, False),
                             ("fam", {"block": 4, "mem": 1, "fam_len": 2}, True)):
        m = build_model(name, n_layers=1, d_model=32, n_heads=4, **p).eval()
        assert (not torch.equal(m(x)[0, 15], m(x2)[0, 15])) == reached


# ----------------------------------------------------------------------------- attribution window


def test_attribution_window_exact_on_swa():
    torch.manual_seed(0)
    m = build_model("swa", n_layers=1, d_model=32, n_heads=4, w=4).eval()
    x = torch.randint(0, 256, (3, 20))
    prof = reach.attribution_profile(m, x, positions=[19, 12])       # (rows, positions, max distance + 1)
    assert prof.shape == (3, 2, 20)
    assert (prof[..., 4:] == 0).all() and (prof[..., :4] > 0).all()
    w = reach.attribution_window(prof, eps=1e-9)
    assert (w == 3).all()
    # a two-layer SWA reaches 2 (w - 1)
    m2 = build_model("swa", n_layers=2, d_model=32, n_heads=4, w=4).eval()
    prof2 = reach.attribution_profile(m2, x, positions=[19])
    assert (prof2[..., 7:] == 0).all() and (prof2[..., 6] > 0).all()


def test_fox_model_equals_foxlm():
    """build_model("fox") is FoXLM (decoder) with the gate projection moved inside the kind."""
    torch.manual_seed(0)
    ref = FoXLM(FoXConfig(d_model=32, n_layers=2, n_heads=4, context=64)).eval()
    m = build_model("fox", n_layers=2, d_model=32, n_heads=4).eval()
    sd = {k.replace("attn.f_proj", "attn.attention.f_proj"): v for k, v in ref.state_dict().items()}
    m.load_state_dict(sd)
    x = torch.randint(0, 256, (2, 40))
    assert (m(x) - ref(x)).abs().max().item() < 1e-5


def test_step_needs_a_recurrent_kind():
    with pytest.raises(ValueError, match="SoftmaxAttention has no recurrent form"):
        build_model("softmax", n_layers=1, d_model=16, n_heads=2).step(torch.zeros(1, dtype=torch.long))
