"""Gate adapters against what each family's layer computes internally, the --model path end to end on a
saved tiny checkpoint, and the loud failures. Families come from flash-linear-attention 0.6.0 (its layers
run their fused ops through Triton, which has no CPU driver here: the ops are replaced by recorders that
keep the decay the layer hands them, which is exactly what the layer computed). Nothing is downloaded."""
import json
import math
import os
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from foxwindow import outputs
from foxwindow.heads import command
from foxwindow.heads import driver as heads
from foxwindow.models import adapters, fallbacks
from foxwindow.models import attention as fa
from foxwindow.models import fox as fm
from foxwindow.models.traces import capture_gates, load_trace, run_with_cache
from foxwindow.training import data

fla = pytest.importorskip("fla", reason="flash-linear-attention not installed (pip install 'foxwindow[fla]')")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import fla.layers.forgetting_attn as fla_fox
    import fla.layers.gated_deltanet as fla_gdn
    import fla.layers.gla as fla_gla
    import fla.layers.hgrn as fla_hgrn
    import fla.layers.mamba2 as fla_mamba2
    import fla.layers.multiscale_retention as fla_ret
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    from fla.ops.retention.naive import naive_retention

B, T, D = 2, 24, 64


class _Stop(Exception):
    """Raised by a recorder once it holds the decay: the rest of the layer is Triton-only here."""


def _record(store, key, stop=True, out=None):
    def op(*args, **kw):
        store.append((args, kw))
        if stop:
            raise _Stop
        return out(*args, **kw)
    return op


def _run(layer, x, **kw):
    try:
        layer(x, **kw)
    except _Stop:
        pass


class _Net(nn.Module):
    """model.layers.0 = layer, called as layer(h, **kw); the forward may stop early (see _Stop)."""

    def __init__(self, layer, **kw):
        super().__init__()
        self.model = nn.ModuleDict({"layers": nn.ModuleList([layer])})
        self.kw = kw

    def forward(self, h):
        _run(self.model["layers"][0], h, **self.kw)


def _capture_layer(layer, x, **kw):
    """adapters' view of one layer called as layer(x, **kw)."""
    cap = adapters.capture_log_decays(_Net(layer, **kw), x, cpu_fallbacks=False)   # the fused ops are recorders here
    (name, lg), = cap.decays.items()
    assert name == "model.layers.0" and cap.layer[name] == 0
    return lg, cap


def _x(seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, D, generator=g) * scale


def test_fla_forgetting_attention_matches_its_op_input(monkeypatch):
    torch.manual_seed(0)
    layer = fla_fox.ForgettingAttention(hidden_size=D, num_heads=4, layer_idx=0).eval()
    seen = []
    monkeypatch.setattr(fla_fox, "parallel_forgetting_attn", _record(seen, "g"))
    x = _x()
    lg, cap = _capture_layer(layer, x)
    g = seen[-1][0][3]                                                    # (B, T, H) handed to the op
    assert cap.family["model.layers.0"] == "fla-fox" and lg.shape == (B, T, 4)
    torch.testing.assert_close(lg, g.float(), rtol=0, atol=0)


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_gla_per_channel_matches_its_op_input(monkeypatch, kv_heads):
    torch.manual_seed(1)
    layer = fla_gla.GatedLinearAttention(hidden_size=D, num_heads=4, num_kv_heads=kv_heads, layer_idx=0,
                                         use_output_gate=False).eval()
    seen = []
    monkeypatch.setattr(fla_gla, "fused_recurrent_gla", _record(seen, "gk"))
    monkeypatch.setattr(fla_gla, "chunk_gla", _record(seen, "g"))
    lg, cap = _capture_layer(layer, _x(1))
    gk = seen[-1][1].get("gk", seen[-1][1].get("g"))                      # (B, T, H, K)
    assert lg.shape == (B, T, 4, layer.head_k_dim)
    torch.testing.assert_close(lg, gk.float(), rtol=1e-6, atol=1e-7)
    # the per-head trace is the channel mean of log-decays
    torch.testing.assert_close(cap.per_head("model.layers.0"), gk.float().mean(-1), rtol=1e-6, atol=1e-7)


def test_hgrn_applies_its_lower_bound(monkeypatch):
    torch.manual_seed(2)
    layer = fla_hgrn.HGRNAttention(hidden_size=D, layer_idx=1, mode="fused_recurrent").eval()
    seen = []
    monkeypatch.setattr(fla_hgrn, "fused_recurrent_hgrn", _record(seen, "g"))
    monkeypatch.setattr(fla_hgrn, "chunk_hgrn", _record(seen, "g"))
    monkeypatch.setattr(fla_hgrn, "swiglu", lambda a, b: F.silu(a) * b)  # Triton-only in fla
    lb = torch.full((D,), 0.9)
    lg, _ = _capture_layer(layer, _x(2), lower_bound=lb)
    g = seen[-1][1]["g"]                                                  # (B, T, C)
    assert lg.shape == (B, T, 1, D)
    torch.testing.assert_close(lg[:, :, 0], g.float(), rtol=1e-6, atol=1e-7)
    # a plain logsigmoid of f_proj (what suffix matching used to read) is far from it
    naive = F.logsigmoid(layer.f_proj(_x(2)))
    assert (naive.mean() / g.mean()).abs() > 5
    assert g.min() >= math.log(0.9) - 1e-6                                # the bound holds: X <= -log lb
    # capture_gates refuses to read f_proj of such a layer as if it were the decay
    with pytest.raises(ValueError, match="not its log-decay"):
        capture_gates(_Net(layer, lower_bound=lb), _x(2), gate_names=["f_proj"])


def test_gated_deltanet_matches_the_library_gate(monkeypatch):
    torch.manual_seed(3)
    layer = fla_gdn.GatedDeltaNet(hidden_size=D, num_heads=4, head_dim=16, use_short_conv=False,
                                  layer_idx=0).eval()
    seen = []
    monkeypatch.setattr(fla_gdn, "chunk_gated_delta_rule", _record(seen, "g"))
    monkeypatch.setattr(fla_gdn, "fused_recurrent_gated_delta_rule", _record(seen, "g"))
    lg, _ = _capture_layer(layer, _x(3))
    kw = seen[-1][1]
    assert kw["use_gate_in_kernel"]
    want = naive_gdn_gate(kw["g"], kw["A_log"], kw["dt_bias"])             # what the kernel computes
    torch.testing.assert_close(lg, want, rtol=1e-6, atol=1e-7)


def test_mamba2_matches_the_decay_it_discretises(monkeypatch):
    torch.manual_seed(4)
    layer = fla_mamba2.Mamba2(hidden_size=D, num_heads=4, head_dim=32, state_size=8, expand=2, n_groups=1,
                              layer_idx=0, chunk_size=16).eval()
    layer.act = nn.SiLU()                                                # fla's activation is Triton-only
    seen, orig = [], fla_mamba2.reshape_into_chunks

    def spy(t, pad, chunk):
        seen.append(t)
        if len(seen) == 2:                                               # hidden, A * dt, B, C
            raise _Stop
        return orig(t, pad, chunk)

    monkeypatch.setattr(fla_mamba2, "reshape_into_chunks", spy)
    lg, _ = _capture_layer(layer, _x(4))
    torch.testing.assert_close(lg, seen[1].float(), rtol=1e-6, atol=1e-7)


def test_retnet_constant_decays_match_the_reference_retention():
    H = 4
    assert adapters.get_adapter("fla-retnet").kind == "constant"
    # naive_retention with q.k * scale = 1 and v one-hot at position 0 returns decay^i at row i
    d = 4
    q = torch.full((1, H, 6, d), 1.0)
    k = torch.full((1, H, 6, d), 1.0 / math.sqrt(d))
    v = torch.zeros(1, H, 6, 1)
    v[:, :, 0] = 1.0
    o = naive_retention(q, k, v)[0, :, :, 0]                                              # (H, 6)
    ref = torch.log(o[:, 1] / o[:, 0])
    torch.testing.assert_close(adapters.retnet_log_decays(H), ref.float(), rtol=1e-6, atol=1e-7)
    layer = fla_ret.MultiScaleRetention(hidden_size=D, num_heads=H, layer_idx=0)
    lg = adapters.get_adapter("fla-retnet").log_decay(layer, _x(), {})
    assert lg.shape == (B, T, H) and torch.equal(lg[1, 5], adapters.retnet_log_decays(H))


def test_ours_matches_the_hook():
    torch.manual_seed(5)
    model = fm.FoXLM(fm.FoXConfig(d_model=32, n_layers=2, n_heads=2)).eval()
    tok = torch.randint(0, 256, (2, 40))
    _, cache = run_with_cache(model, tok)
    cap = adapters.capture_log_decays(model, tok)
    for li in range(2):
        torch.testing.assert_close(cap.decays[f"blocks.{li}.attn"], cache[f"blocks.{li}.attn.hook_log_fgate"])
        assert cap.layer[f"blocks.{li}.attn"] == li and cap.family[f"blocks.{li}.attn"] == "foxwindow"


# ----------------------------------------------------------------------------- official FoX (stand-in)

class ForgettingAttentionLayer(nn.Module):
    """Stand-in with the official layer's parameter names (fgate_proj, fgate_bias, fgate_type, num_heads);
    its class path ends in modeling_forgetting_transformer.ForgettingAttentionLayer like the original."""

    def __init__(self, fgate_type, H=4):
        super().__init__()
        self.fgate_type, self.num_heads = fgate_type, H
        if fgate_type == "full":
            self.fgate_proj = nn.Linear(D, H, bias=True)
        elif fgate_type == "bias_only":
            self.fgate_bias = nn.Parameter(torch.tensor([0.5, 1.0, 2.0, 4.0]))
        elif fgate_type == "fixed":
            self.register_buffer("fgate_bias", torch.tensor([3.0, 3.0, 5.0, 7.0]))

    def forward(self, hidden_states, attention_mask=None, use_cache=False):
        return hidden_states


ForgettingAttentionLayer.__module__ = "standin.modeling_forgetting_transformer"


@pytest.mark.parametrize("kind", ["full", "bias_only", "fixed", "none"])
def test_official_fox_every_fgate_type(kind):
    torch.manual_seed(6)
    layer = ForgettingAttentionLayer(kind)
    net = nn.ModuleDict({"layers": nn.ModuleList([nn.Identity(), layer])})
    x = _x(6)
    cap = adapters.capture_log_decays(_Wrap(net), x)
    lg = cap.decays["m.layers.1"]
    assert cap.family["m.layers.1"] == "fox-official" and cap.layer["m.layers.1"] == 1
    # by hand: log sigmoid(z) = -log(1 + exp(-z))
    if kind == "full":
        z = x.double() @ layer.fgate_proj.weight.double().t() + layer.fgate_proj.bias.double()
        want = -torch.log1p(torch.exp(-z))
    elif kind in ("bias_only", "fixed"):
        want = (-torch.log1p(torch.exp(-layer.fgate_bias.double()))).expand(B, T, 4)
    else:
        want = torch.zeros(B, T, 4, dtype=torch.float64)
    torch.testing.assert_close(lg.double(), want, rtol=1e-6, atol=1e-7)


class _Wrap(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.m = net

    def forward(self, h):
        return self.m["layers"][1](hidden_states=h)


# ----------------------------------------------------------------------------- loud failures

class _TwoCalls(nn.Module):
    """One gate module used twice per forward (weight sharing across depth)."""

    def __init__(self):
        super().__init__()
        self.fgate_proj = nn.Linear(8, 3)
        self.mix = nn.Linear(8, 8)

    def forward(self, x):
        self.fgate_proj(x)
        return self.fgate_proj(x + self.mix(x))


def test_capture_gates_keeps_every_call_and_refuses_gate_values():
    torch.manual_seed(7)
    m, x = _TwoCalls(), torch.randn(2, 5, 8)
    got = capture_gates(m, x)
    assert sorted(got) == ["fgate_proj", "fgate_proj#1"]
    torch.testing.assert_close(got["fgate_proj#1"], F.logsigmoid(m.fgate_proj(x + m.mix(x))))
    # a module that already outputs sigmoid gates: logsigmoid again would be wrong, so it is refused ...
    sig = nn.Sequential()
    sig.add_module("fgate_proj", nn.Sequential(nn.Linear(8, 3), nn.Sigmoid()))
    with pytest.raises(ValueError, match="look like gate values"):
        capture_gates(sig, x)
    # ... and read right when told
    got = capture_gates(sig, x, output="gate")
    torch.testing.assert_close(got["fgate_proj"], F.logsigmoid(sig.fgate_proj[0](x)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="output must be"):
        capture_gates(sig, x, output="probabilities")


def test_run_with_cache_and_filters_fail_loudly():
    with pytest.raises(ValueError, match="no HookPoint"):
        run_with_cache(nn.Linear(4, 4), torch.zeros(1, 4))
    m = fm.FoXLM(fm.FoXConfig(d_model=16, n_layers=1, n_heads=2)).eval()
    tok = torch.randint(0, 256, (1, 6))
    with pytest.raises(ValueError, match="matched none"):
        run_with_cache(m, tok, names_filter=lambda n: n.endswith("hook_nothing"))
    with pytest.raises(ValueError, match="matched none"):
        adapters.capture_log_decays(m, tok, names_filter=lambda n: "mlp" in n)
    with pytest.raises(ValueError, match="not gated layers"):
        adapters.capture_log_decays(m, tok, names_filter=["blocks.7.attn"])
    with pytest.raises(ValueError, match="no layer of a known gated family"):
        adapters.capture_log_decays(nn.Sequential(nn.Linear(4, 4)), torch.zeros(1, 4))


class MyGatedLayer(nn.Module):
    """A family the library does not know: registered by the user, with a wrong (B, H, T) layout first."""

    def __init__(self, H=3):
        super().__init__()
        self.num_heads = H
        self.decay = nn.Linear(D, H)

    def forward(self, x):
        return x


def test_register_a_new_family_and_layout_check():
    x = _x(8)
    net = nn.Sequential(MyGatedLayer(), MyGatedLayer())
    bad = adapters.GateAdapter("test-bht", ("test_adapters.MyGatedLayer",),
                               lambda m, h, kw: F.logsigmoid(m.decay(h)).transpose(1, 2), lambda m: m.num_heads)
    with pytest.raises(ValueError, match=r"laid out \(B, H, T\)"):
        adapters.capture_log_decays(net, x, adapters=[bad])
    good = adapters.register_adapter(adapters.GateAdapter(
        "test-mine", ("test_adapters.MyGatedLayer",), lambda m, h, kw: F.logsigmoid(m.decay(h)),
        lambda m: m.num_heads), replace=True)
    try:
        with pytest.raises(ValueError, match="already registered"):
            adapters.register_adapter(good)
        cap = adapters.capture_log_decays(net, x)
        assert list(cap.decays) == ["0", "1"] and cap.layer == {"0": 0, "1": 1}
        torch.testing.assert_close(cap.decays["1"], F.logsigmoid(net[1].decay(x)))
        positive = adapters.GateAdapter("test-pos", ("test_adapters.MyGatedLayer",),
                                        lambda m, h, kw: torch.sigmoid(m.decay(h)), lambda m: m.num_heads)
        with pytest.raises(ValueError, match="positive entries"):
            adapters.capture_log_decays(net, x, adapters=[positive])
    finally:
        adapters.ADAPTERS.pop("test-mine", None)


# ----------------------------------------------------------------------------- --model end to end

from foxwindow.models import hf_capture  # noqa: E402
from foxwindow.models import hf_load as hf_models  # noqa: E402


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    """save_pretrained of a tiny fla FoX LM and a byte-level BPE tokenizer trained here on a few KB."""
    from fla.models import ForgettingTransformerConfig
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    d = tmp_path_factory.mktemp("tiny_fox")
    rng = np.random.default_rng(0)
    words = ["the", "king", "is", "dead", "long", "live", "queen", "to", "be", "or", "not", "ay", "there"]
    text = " ".join(rng.choice(words, 6000)) + "\n"
    (d / "text.txt").write_text(text)
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator([text], trainers.BpeTrainer(vocab_size=280, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ck = d / "model"
    PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(ck)
    torch.manual_seed(0)
    cfg = ForgettingTransformerConfig(hidden_size=32, num_heads=2, num_hidden_layers=2, vocab_size=300,
                                      intermediate_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        AutoModelForCausalLM.from_config(cfg).save_pretrained(ck)
    return ck, d / "text.txt"


def _forget(argv, capsys):
    capsys.readouterr()                                      # drop what the test printed before
    code = outputs.cli(command.main, argv)                    # as `python forget.py ARGV` runs it
    out = capsys.readouterr()
    return code, out.out, out.err


def test_model_flag_end_to_end(tiny_ckpt, tmp_path, capsys):
    ck, text = tiny_ckpt
    js, tr = tmp_path / "r.json", tmp_path / "t.npz"
    code, out, err = _forget(["--model", str(ck), "--text", str(text), "--n-seq", "4", "--seq-len", "96",
                              "--batch", "3", "--no-progress", "--json", str(js), "--save-traces", str(tr)], capsys)
    assert code == 0, err
    assert "Per-head window laws" in out and "fla-fox (attends over a KV cache): scalar gate" in out
    assert "W_mass: attention-mass" in out
    res = json.loads(js.read_text())
    assert res["info"]["families"] == ["fla-fox"] and len(res["heads"]) == 4
    assert [h["label"] for h in res["heads"]] == ["0.0", "0.1", "1.0", "1.1"]
    assert all(h["kappa"] > 0 and h["mass"]["mass_window"] is not None for h in res["heads"])
    # the saved traces are the layers' own gates: logsigmoid(f_proj(input of the layer))
    traces, meta = load_trace(str(tr))
    assert sorted(traces) == ["model.layers.0.attn", "model.layers.1.attn"] and meta["families"]
    model, _ = hf_models.load_pretrained(str(ck))
    tok = hf_models.load_tokenizer(str(ck))
    ids, _ = hf_models.heldout_ids(tok, 4, 96, str(text))
    seen = {}

    def grab(m, a, kw):
        seen["x"] = kw["hidden_states"] if "hidden_states" in kw else a[0]

    h = model.model.layers[1].attn.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with fallbacks.attention_ops(adapters.find_layers(model)):
            model(ids, use_cache=False)
    finally:
        h.remove()
    want = F.logsigmoid(model.model.layers[1].attn.f_proj(seen["x"]).float())
    np.testing.assert_allclose(traces["model.layers.1.attn"], want.detach().numpy(), rtol=1e-5, atol=1e-6)
    # nothing is overwritten by default
    code, _, err = _forget(["--model", str(ck), "--text", str(text), "--n-seq", "4", "--seq-len", "96",
                            "--no-progress", "--json", str(js)], capsys)
    assert code == 2 and "exists" in err


def test_attention_op_mass_windows_match_heads_on_our_model():
    torch.manual_seed(9)
    model = fm.FoXLM(fm.FoXConfig(d_model=32, n_layers=2, n_heads=2)).eval()
    tok = torch.randint(0, 256, (3, 64))
    rows = heads._rows(64)
    with fallbacks.attention_ops(adapters.find_layers(model), mass_eps=1e-2, rows=rows, cpu=False) as win:
        model(tok)
    _, inputs = heads.capture(model, tok)
    for li in range(2):
        want = heads.mass_windows(model.blocks[li].attn, inputs[li], math.log(1e2), rows)
        assert torch.equal(win[f"blocks.{li}.attn"][0], want)


def test_model_flag_errors_are_one_line(tiny_ckpt, tmp_path, capsys, monkeypatch):
    ck, text = tiny_ckpt
    base = ["--n-seq", "4", "--seq-len", "96", "--no-progress", "--text", str(text)]
    (tmp_path / "empty").mkdir()
    cases = [
        (["--model", str(tmp_path / "nope")], "no such directory"),
        (["--model", str(tmp_path / "empty")], "not a model directory (no config.json)"),
        (["--model", str(text)], "a file, not a model directory"),
        (["--model", str(ck), "--text", str(tmp_path / "none.txt")], "no such file"),
        (["--model", str(ck), "--n-seq", "400"], "windows of 96 tokens; asked for 400"),
        (["--model", str(ck), "--tokenizer", str(tmp_path / "empty")], "no tokenizer"),
        (["--model", str(ck), "--device", "cuda"] if not torch.cuda.is_available() else None, "CUDA is not available"),
    ]
    for argv, msg in cases:
        if argv is None:
            continue
        code, _, err = _forget(base + argv, capsys)                     # argv's flags come last and win
        assert code == 2 and msg in err and err.count("\n") == 1, (argv, err)
    # a family whose kernels are Triton-only, on the CPU
    from fla.models import GLAConfig
    from transformers import AutoModelForCausalLM
    gla = tmp_path / "gla"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        AutoModelForCausalLM.from_config(GLAConfig(hidden_size=32, num_heads=2, num_hidden_layers=1,
                                                   vocab_size=300)).save_pretrained(gla)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (gla / f).write_bytes((ck / f).read_bytes())
    code, _, err = _forget(["--model", str(gla)] + base, capsys)
    assert code == 2 and "fla-gla" in err and "need a GPU" in err
    # the family's package missing: on the CPU config.json alone refuses the Triton-only family, before fla
    # would be imported
    monkeypatch.setitem(sys.modules, "fla", None)
    code, _, err = _forget(["--model", str(gla)] + base, capsys)
    assert code == 2 and "need a GPU" in err and "needs fla" not in err
    # the official FoX code's checkpoint without its package
    off = tmp_path / "official"
    off.mkdir()
    (off / "config.json").write_text(json.dumps({"model_type": "forgetting_transformer-project_fox",
                                                 "fgate_type": "full"}))
    monkeypatch.setitem(sys.modules, "forgetting_transformer", None)
    code, _, err = _forget(["--model", str(off)] + base, capsys)
    assert code == 2 and "forgetting_transformer package" in err


def test_tokenizer_of_another_model_is_refused(tiny_ckpt):
    ck, text = tiny_ckpt
    tok = hf_models.load_tokenizer(str(ck))
    with pytest.raises(hf_models.ModelError, match="not this model's tokenizer"):
        hf_models.heldout_ids(tok, 4, 96, str(text), vocab_size=100)


OFFICIAL_MOD = "forgetting_transformer.model.forgetting_transformer.modeling_forgetting_transformer"


class OfficialAttn(nn.Module):
    """Stand-in of the official layer's attention path: head-first q, k, v and (B, H, T) log gates handed
    to the module-level `forgetting_attention`, looked up at call time as the original does."""

    def __init__(self, H=2, Dh=8):
        super().__init__()
        self.H, self.Dh = H, Dh
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(H * Dh, H * Dh, bias=False) for _ in range(3))
        self.fgate_proj = nn.Linear(H * Dh, H)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, self.H, self.Dh).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        lg = F.logsigmoid(self.fgate_proj(x).float()).transpose(1, 2)               # (B, H, T)
        return sys.modules[OFFICIAL_MOD].forgetting_attention(q, k, v, lg, head_first=True, sm_scale=0.3)


def test_official_attention_op_cpu_standin_and_mass_windows(monkeypatch):
    import types
    fake = types.ModuleType(OFFICIAL_MOD)

    def gpu_only(*a, **kw):
        raise RuntimeError("the official kernel needs CUDA")

    fake.forgetting_attention = gpu_only
    monkeypatch.setitem(sys.modules, OFFICIAL_MOD, fake)
    torch.manual_seed(10)
    layer = ForgettingAttentionLayer("full", H=2)
    layer.fgate_proj = nn.Linear(D, 2)
    layer.attn = OfficialAttn(H=2, Dh=D // 2)
    layer.forward = lambda hidden_states, **kw: layer.attn(hidden_states)
    net = _Net(layer)
    x = _x(10)
    eps, rows = 1e-2, torch.arange(12, T, 3)
    with fallbacks.attention_ops(adapters.find_layers(net), mass_eps=eps, rows=rows, cpu=True) as win:
        out = layer.attn(x)                                     # not through a layer pre-hook: no window
        assert win == {}
        net(x)
    assert sys.modules[OFFICIAL_MOD].forgetting_attention is gpu_only      # restored
    a = layer.attn
    q, k, v = (p(x).view(B, T, 2, D // 2) for p in (a.q_proj, a.k_proj, a.v_proj))
    lg = F.logsigmoid(a.fgate_proj(x).float())
    want = fa.forgetting_attention_reference(q, k, v, lg, sm_scale=0.3).transpose(1, 2)
    torch.testing.assert_close(out, want)
    # windows by brute force: A from the full logit matrix, then the shortest suffix holding 1 - eps
    c = lg.double().cumsum(1)
    for h in range(2):
        logit = q[:, :, h].double() @ k[:, :, h].double().transpose(1, 2) * 0.3 + c[:, :, None, h] - c[:, None, :, h]
        logit = logit.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        A = torch.softmax(logit, -1)
        for b in range(B):
            for r, i in enumerate(rows.tolist()):
                d = 0
                while A[b, i, i - d:i + 1].sum() < 1 - eps:
                    d += 1
                assert win["model.layers.0"][0][b, r, h] == d


def test_analysis_traces_per_head_and_per_channel():
    g = torch.Generator().manual_seed(11)
    gla = -torch.rand(3, 10, 2, 4, generator=g)                                   # (S, T, H, K)
    fox = -torch.rand(3, 10, 2, generator=g)
    per_head = hf_capture.analysis_traces({"a": gla, "b": fox})
    assert per_head["a"].shape == (3, 10, 2) and torch.equal(per_head["b"], fox)
    torch.testing.assert_close(per_head["a"][:, :, 1], gla[:, :, 1].mean(-1))
    per_ch = hf_capture.analysis_traces({"a": gla}, per_channel=True)["a"]
    assert per_ch.shape == (3, 10, 8) and torch.equal(per_ch[:, :, 1 * 4 + 2], gla[:, :, 1, 2])


def test_checkpoint_directory_goes_to_the_model_path_and_unknown_families_fail(tiny_ckpt, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, GPT2Config
    ck, text = tiny_ckpt
    gpt = tmp_path / "gpt2"
    AutoModelForCausalLM.from_config(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=300)).save_pretrained(gpt)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (gpt / f).write_bytes((ck / f).read_bytes())
    code, _, err = _forget(["--checkpoint", str(gpt), "--text", str(text), "--n-seq", "3", "--seq-len", "64",
                            "--no-progress"], capsys)
    assert code == 2 and "no layer of a known gated family" in err and err.count("\n") == 1


def test_transformers_mamba2_model_every_layer(monkeypatch):
    """A whole transformers Mamba-2 LM on the CPU (its PyTorch path): every mixer's captured decay equals
    the A * dt that mixer discretises."""
    import transformers.models.mamba2.modeling_mamba2 as tm
    from transformers import Mamba2Config, Mamba2ForCausalLM
    torch.manual_seed(12)
    cfg = Mamba2Config(hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=1, expand=2,
                       num_hidden_layers=2, vocab_size=100, chunk_size=16, time_step_limit=(0.0, 0.5))
    model = Mamba2ForCausalLM(cfg).eval()
    seen, orig = [], tm.reshape_into_chunks

    def spy(t, pad, chunk):
        seen.append(t)
        return orig(t, pad, chunk)

    monkeypatch.setattr(tm, "reshape_into_chunks", spy)
    cap = adapters.capture_log_decays(model, torch.randint(0, 100, (2, 20)), use_cache=False)
    assert sorted(cap.decays) == ["backbone.layers.0.mixer", "backbone.layers.1.mixer"]
    assert set(cap.family.values()) == {"mamba2"} and cap.layer["backbone.layers.1.mixer"] == 1
    internal = seen[1::4]                                                   # hidden, A * dt, B, C per mixer
    assert len(internal) == 2
    for li in range(2):
        torch.testing.assert_close(cap.decays[f"backbone.layers.{li}.mixer"], internal[li].float(),
                                   rtol=1e-6, atol=1e-7)
    assert cap.decays["backbone.layers.0.mixer"].min() >= -0.5 * model.backbone.layers[0].mixer.A_log.exp().max() - 1e-6


def test_model_flag_transformers_mamba2_says_no_mass_window(tiny_ckpt, tmp_path, capsys):
    from transformers import Mamba2Config, Mamba2ForCausalLM
    ck, text = tiny_ckpt
    d = tmp_path / "mamba2"
    torch.manual_seed(13)
    cfg = Mamba2Config(hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=1, expand=2,
                       num_hidden_layers=1, vocab_size=300, chunk_size=32)
    Mamba2ForCausalLM(cfg).save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((ck / f).read_bytes())
    js = tmp_path / "m.json"
    code, out, err = _forget(["--model", str(d), "--text", str(text), "--n-seq", "3", "--seq-len", "64",
                              "--no-progress", "--json", str(js)], capsys)
    assert code == 0, err
    assert "W_mass: not available for mamba2" in out and "mamba2 (a gated state, no KV cache): scalar gate" in out
    res = json.loads(js.read_text())
    assert res["info"]["families"] == ["mamba2"] and len(res["heads"]) == 4
    assert all((h["mass"] or {}).get("mass_window") is None and h["kappa"] > 0 for h in res["heads"])
    # a checkpoint missing a weight is refused (the weight would stay at its random init)
    from safetensors.torch import load_file, save_file
    sd = load_file(str(d / "model.safetensors"))
    sd.pop("backbone.layers.0.mixer.dt_bias")
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    code, _, err = _forget(["--model", str(d), "--text", str(text), "--n-seq", "3", "--seq-len", "64",
                            "--no-progress"], capsys)
    assert code == 2 and "not in the checkpoint (e.g. backbone.layers.0.mixer.dt_bias)" in err


def test_default_text_is_the_held_out_plays(tiny_ckpt):
    ck, _ = tiny_ckpt
    tok = hf_models.load_tokenizer(str(ck))
    ids, spans = hf_models.heldout_ids(tok, 4, 128)
    assert ids.shape == (4, 128) and {s["file"] for s in spans} <= set(data.VAL_FILES)
    assert spans[0] == {"file": data.VAL_FILES[0], "start": 0, "end": 128}
    # the first window is the tokenised start of the first held-out play
    first = dict(data.load_split("val"))[data.VAL_FILES[0]].decode("utf-8", errors="replace")
    assert ids[0].tolist() == tok(first, add_special_tokens=False)["input_ids"][:128]


def test_shipped_files_are_found_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert os.path.isabs(heads.DEFAULT_CHECKPOINT) and os.path.isfile(heads.DEFAULT_CHECKPOINT)
    # an installed layout (pip --target: share/foxwindow beside the modules)
    (tmp_path / "share" / "foxwindow" / "checkpoints").mkdir(parents=True)
    (tmp_path / "share" / "foxwindow" / "checkpoints" / "x.pt").write_bytes(b"")
    monkeypatch.setattr(outputs, "REPO", str(tmp_path))
    assert outputs.repo_path("checkpoints/x.pt") == str(tmp_path / "share" / "foxwindow" / "checkpoints" / "x.pt")
    assert outputs.repo_path("checkpoints/none.pt") == str(tmp_path / "checkpoints" / "none.pt")
    assert outputs.repo_path(str(tmp_path / "abs.pt")) == str(tmp_path / "abs.pt")      # absolute: unchanged


# ----------------------------------------------------------------------------- GPU (skipped without CUDA)

GPU_FAMILIES = {
    "fla-fox": ("ForgettingTransformerConfig", dict(num_heads=2), fla_fox, ("parallel_forgetting_attn",), 3),
    "fla-gla": ("GLAConfig", dict(num_heads=2), fla_gla, ("chunk_gla", "fused_recurrent_gla"), None),
    "fla-hgrn": ("HGRNConfig", dict(), fla_hgrn, ("chunk_hgrn", "fused_recurrent_hgrn"), None),
    "fla-gated-deltanet": ("GatedDeltaNetConfig", dict(num_heads=2, head_dim=16), fla_gdn,
                           ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"), None),
    "fla-retnet": ("RetNetConfig", dict(num_heads=2), fla_ret, (), None),
}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fla's fused kernels need a CUDA GPU")
@pytest.mark.parametrize("family", sorted(GPU_FAMILIES))
def test_gpu_families_through_model_flag(family, tiny_ckpt, tmp_path, capsys, monkeypatch):
    """On a GPU every fla family runs its own kernels through --model; the decay each layer hands its
    kernel equals the captured one (recorded by wrappers that call the original op)."""
    import fla.models as fm
    from transformers import AutoModelForCausalLM
    cfg_name, extra, mod, ops, gate_arg = GPU_FAMILIES[family]
    ck, text = tiny_ckpt
    d = tmp_path / family
    torch.manual_seed(14)
    cfg = getattr(fm, cfg_name)(hidden_size=32, num_hidden_layers=2, vocab_size=300, **extra)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((ck / f).read_bytes())
    js, tr = tmp_path / "r.json", tmp_path / "t.npz"
    code, out, err = _forget(["--model", str(d), "--text", str(text), "--n-seq", "3", "--seq-len", "96",
                              "--device", "cuda", "--no-progress", "--json", str(js), "--save-traces", str(tr)], capsys)
    assert code == 0, err
    res = json.loads(js.read_text())
    assert res["info"]["families"] == [family]
    assert all(((h["mass"] or {}).get("mass_window") is not None) == (family == "fla-fox") for h in res["heads"])
    if not ops:
        return
    # the kernel's own gate input, in a second run of the same model and text
    model, _ = hf_models.load_pretrained(str(d), "cuda")
    ids, _ = hf_models.heldout_ids(hf_models.load_tokenizer(str(d)), 3, 96, str(text))
    seen = []
    for op in ops:
        orig = getattr(mod, op)

        def wrap(*a, _orig=orig, **kw):
            seen.append((a, kw))
            return _orig(*a, **kw)

        monkeypatch.setattr(mod, op, wrap)
    cap = adapters.capture_log_decays(model, ids.cuda(), use_cache=False)
    for (a, kw), name in zip(seen, sorted(cap.decays)):
        if family == "fla-gated-deltanet":
            want = naive_gdn_gate(kw["g"], kw["A_log"], kw["dt_bias"])
        else:
            want = a[gate_arg] if gate_arg is not None else kw.get("gk", kw.get("g"))
        got = cap.decays[name]
        got = got[:, :, 0] if family == "fla-hgrn" else got
        torch.testing.assert_close(got, want.float().cpu(), rtol=1e-5, atol=1e-6)
