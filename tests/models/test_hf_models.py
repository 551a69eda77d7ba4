"""--model on checkpoints saved by the code that defines them: the official FoX package (every fgate type, the
Pro options, ACP), fla's Mamba-2, and a user's adapter given by --adapter (RG-LRU of transformers' RecurrentGemma).
Tests that need a package CI cannot install from PyPI (the official FoX code) skip with the reason."""
import importlib.util
import json
import os
import warnings

import numpy as np
import pytest
import torch

from conftest import REPO
from foxwindow import outputs
from foxwindow.heads import command
from foxwindow.models import adapters, fallbacks, hf_capture
from foxwindow.models import hf_load as hf_models
from foxwindow.models.traces import load_trace

WORDS = ["the", "king", "is", "dead", "long", "live", "queen", "to", "be", "or", "not", "ay", "there", '"so"', "a\\b"]


def _forget(argv, capsys):
    capsys.readouterr()
    code = outputs.cli(command.main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A tiny byte-level BPE (GPT-2's format: vocab.json, merges.txt) trained here, and a text with quotes,
    backslashes, tabs and newlines (what JSON escaping changes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    d = tmp_path_factory.mktemp("bpe")
    rng = np.random.default_rng(0)
    text = "".join(w + rng.choice([" ", " ", " ", "\n", "\t"]) for w in rng.choice(WORDS, 5000))
    (d / "text.txt").write_text(text)
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator([text, json.dumps(text)], trainers.BpeTrainer(
        vocab_size=300, show_progress=False, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tk.model.save(str(d))
    return d


def _official_tokenizer_files(bpe, d):
    """The files the official save_model.py writes for a LongCrawl64 model (JSONGPT2Tokenizer.save_pretrained
    under transformers 4): GPT-2's vocab and merges and a tokenizer_config naming JSONGPT2Tokenizer."""
    for f in ("vocab.json", "merges.txt"):
        (d / f).write_bytes((bpe / f).read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": True, "add_prefix_space": False, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "clean_up_tokenization_spaces": False, "errors": "replace",
        "model_max_length": 64, "pad_token": None, "tokenizer_class": "JSONGPT2Tokenizer"}))


def test_official_tokenizer_escapes_its_text(bpe, tmp_path):
    """Works without the official package: the tokenizer_config names the class, its escaping is applied."""
    _official_tokenizer_files(bpe, tmp_path)
    tok = hf_models.load_tokenizer(str(tmp_path))
    from transformers import GPT2Tokenizer
    gpt2 = GPT2Tokenizer.from_pretrained(str(tmp_path))
    s = 'he said "so"\n\tand a\\b\n'
    ids = tok(s, add_special_tokens=False)["input_ids"]
    assert ids == gpt2(json.dumps(s)[1:-1], add_special_tokens=False)["input_ids"]
    assert ids != gpt2(s, add_special_tokens=False)["input_ids"]            # the raw text tokenises otherwise
    assert tok.decode(ids) == s
    text = (bpe / "text.txt").read_text()
    got, _ = hf_models.heldout_ids(tok, 3, 64, str(bpe / "text.txt"))
    raw = gpt2.convert_ids_to_tokens(got.flatten().tolist())
    assert not any("Ċ" in t for t in raw)                        # no raw newline reaches the model
    assert text.count("\n") > 100


def test_tokenizer_errors_are_whole(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NoSuchTokenizer"}))
    with pytest.raises(hf_models.ModelError) as e:
        hf_models.load_tokenizer(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "pass --tokenizer" in msg and "from one of: (1)" in msg and "..." not in msg, msg
    with pytest.raises(hf_models.ModelError, match="none of tokenizer.json, tokenizer_config.json"):
        hf_models.load_tokenizer(str(tmp_path / "x") if (tmp_path / "x").mkdir() is None else "")


# ----------------------------------------------------------------------------- official FoX checkpoints

OFFICIAL_CONFIGS = {
    "full": dict(fgate_type="full"),
    "bias_only": dict(fgate_type="bias_only"),
    "fixed": dict(fgate_type="fixed", fgate_bias_init=True, decay_time_min=2.0, decay_time_max=64.0),
    "none": dict(fgate_type="none"),
    "pro": dict(fgate_type="full", use_output_gate=True, use_output_norm=True, qk_norm=True, use_k_shift=True,
                use_v_shift=True),
    "pro-acp": dict(fgate_type="full", use_output_gate=True, use_output_norm=True, qk_norm=True,
                    qk_norm_share_param_across_head=True, use_k_shift=True, use_v_shift=True,
                    log_pruning_tolerance=-10.0),
    "ogate-rope": dict(fgate_type="full", use_output_gate=True, ogate_act="silu", use_rope=True),
}


@pytest.fixture(scope="module")
def official(bpe, tmp_path_factory):
    """{name: checkpoint dir} saved by the official package's own classes (save_pretrained of
    ForgettingTransformerForCausalLM, as its save_model.py does), with its JSONGPT2Tokenizer files, and the
    in-memory models they were saved from."""
    pytest.importorskip("forgetting_transformer", reason="the official FoX package is not on PyPI: pip install -e a "
                        "checkout of github.com/zhixuan-lin/forgetting-transformer to run these tests")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from forgetting_transformer.model.forgetting_transformer import (
            ForgettingTransformerConfig,
            ForgettingTransformerForCausalLM,
        )
    hf_models._official_compat(ForgettingTransformerForCausalLM, ForgettingTransformerConfig())
    root, out = tmp_path_factory.mktemp("official"), {}
    for i, (name, kw) in enumerate(OFFICIAL_CONFIGS.items()):
        torch.manual_seed(20 + i)
        cfg = ForgettingTransformerConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_heads=2, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = ForgettingTransformerForCausalLM(cfg).eval()
        if name == "bias_only":
            with torch.no_grad():
                for layer in m.model.layers:
                    layer.attn.fgate_bias.uniform_(1.0, 5.0)        # trained-looking constant gates
        d = root / name
        m.save_pretrained(d)
        _official_tokenizer_files(bpe, d)
        out[name] = (d, m)
    return out


def _official_gates(monkeypatch, model, ids, amp=None):
    """The log forget gates the official layers hand their attention op (B, T, H per call), and the logits."""
    seen, ref = [], fallbacks._official_reference

    def rec(q, k, v, log_fgate, **kw):
        seen.append(log_fgate.transpose(1, 2).float() if kw.get("head_first") else log_fgate.float())
        return ref(q, k, v, log_fgate, **kw)

    monkeypatch.setattr(fallbacks, "_official_reference", rec)
    with fallbacks.attention_ops(adapters.find_layers(model), cpu=True), torch.no_grad(), \
            torch.autocast("cpu", dtype=amp, enabled=amp is not None):
        logits = model(ids, use_cache=False).logits
    monkeypatch.undo()
    return seen, logits.float()


@pytest.mark.parametrize("name", sorted(OFFICIAL_CONFIGS))
def test_official_checkpoints_load_and_match_the_official_gates(official, name, monkeypatch):
    d, saved = official[name]
    model, config = hf_models.load_pretrained(str(d))
    assert config.model_type == "forgetting_transformer-project_fox"
    ids = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(1))
    decays, fam, lay, _ = hf_capture.capture_batches(model, ids, 2, "cpu")
    assert set(fam.values()) == {"fox-official"} and sorted(decays) == ["model.layers.0.attn", "model.layers.1.attn"]
    gates, logits = _official_gates(monkeypatch, model, ids)
    for li in range(2):
        torch.testing.assert_close(decays[f"model.layers.{li}.attn"], gates[li], rtol=0, atol=0)
    # the loaded network is the saved one: same logits as the model it was saved from
    _, want = _official_gates(monkeypatch, saved, ids)
    torch.testing.assert_close(logits, want, rtol=0, atol=0)
    if name == "fixed":                                              # decay times 2 .. 64 tokens, as configured
        t = -1 / decays["model.layers.0.attn"][0, 0]
        torch.testing.assert_close(t, torch.tensor([2.0, 64.0]), rtol=1e-5, atol=0)


def test_official_bfloat16_runs_under_autocast(official, monkeypatch):
    d, _ = official["pro"]
    model, _ = hf_models.load_pretrained(str(d), dtype="bfloat16")
    assert model.foxwindow_autocast == torch.bfloat16 and next(model.parameters()).dtype == torch.float32
    ids = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(2))
    decays, _, _, _ = hf_capture.capture_batches(model, ids, 2, "cpu")
    gates, _ = _official_gates(monkeypatch, model, ids, amp=torch.bfloat16)
    torch.testing.assert_close(decays["model.layers.1.attn"], gates[1], rtol=0, atol=0)
    f32, _, _, _ = hf_capture.capture_batches(hf_models.load_pretrained(str(d))[0], ids, 2, "cpu")
    err = (decays["model.layers.0.attn"] - f32["model.layers.0.attn"]).abs().max()
    assert 0 < err < 0.05                                            # bfloat16 matmuls, not another network


def test_official_checkpoint_through_forget_py(official, bpe, tmp_path, capsys):
    d, _ = official["pro"]
    tr = tmp_path / "t.npz"
    code, out, err = _forget(["--model", str(d), "--text", str(bpe / "text.txt"), "--n-seq", "3", "--seq-len", "64",
                              "--no-progress", "--save-traces", str(tr)], capsys)
    assert code == 0, err
    assert "fox-official (attends over a KV cache)" in out and "W_mass: attention-mass" in out
    _, meta = load_trace(str(tr))
    assert meta["kinds"] == {"model.layers.0.attn": "softmax", "model.layers.1.attn": "softmax"}
    assert meta["kv_cache"] is True


def test_official_model_types_without_an_adapter_are_not_supported(tmp_path, capsys, bpe):
    pytest.importorskip("forgetting_transformer", reason="the official FoX package is not on PyPI")
    d = tmp_path / "hgrn2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "hgrn2-project_fox", "hidden_size": 32}))
    code, _, err = _forget(["--model", str(d), "--text", str(bpe / "text.txt"), "--no-progress"], capsys)
    assert code == 2 and err.count("\n") == 1 and "'hgrn2-project_fox' is not supported" in err, err
    if importlib.util.find_spec("mamba_ssm") is None:                 # the official Mamba-2 needs its CUDA kernels
        (d / "config.json").write_text(json.dumps({"model_type": "mamba2-project_fox", "hidden_size": 32}))
        code, _, err = _forget(["--model", str(d), "--text", str(bpe / "text.txt"), "--no-progress"], capsys)
        assert code == 2 and err.count("\n") == 1 and "mamba_ssm" in err, err


# ----------------------------------------------------------------------------- fla Mamba-2

fla = pytest.importorskip("fla", reason="flash-linear-attention not installed (pip install 'foxwindow[fla]')")


@pytest.fixture(scope="module")
def fla_mamba2(bpe, tmp_path_factory):
    """save_pretrained of fla's own Mamba-2 LM (fla's defaults: rescale_prenorm_residual, a dt_limit set)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.models import Mamba2Config, Mamba2ForCausalLM
    torch.manual_seed(30)
    cfg = Mamba2Config(hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=1, expand=2,
                       num_hidden_layers=2, vocab_size=300, chunk_size=16, dt_limit=(0.0, 0.05))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = Mamba2ForCausalLM(cfg).eval()
    d = tmp_path_factory.mktemp("fla_mamba2")
    m.save_pretrained(d)
    from transformers import GPT2Tokenizer
    GPT2Tokenizer(str(bpe / "vocab.json"), str(bpe / "merges.txt")).save_pretrained(d)
    return d, m


def test_fla_mamba2_loads_as_fla_and_matches_its_decay(fla_mamba2, monkeypatch):
    import fla.layers.mamba2 as fl
    d, saved = fla_mamba2
    model, config = hf_models.load_pretrained(str(d))
    assert type(model).__module__.startswith("fla.") and tuple(config.dt_limit) == (0.0, 0.05)
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(3))
    seen, orig = [], fl.reshape_into_chunks

    def spy(t, pad, chunk):
        seen.append(t)
        return orig(t, pad, chunk)

    monkeypatch.setattr(fl, "reshape_into_chunks", spy)
    decays, fam, _, _ = hf_capture.capture_batches(model, ids, 2, "cpu")
    assert set(fam.values()) == {"mamba2"}
    internal = seen[1::4]                                               # hidden, A * dt, B, C per mixer
    for li in range(2):
        torch.testing.assert_close(decays[f"backbone.layers.{li}.mixer"], internal[li].float(), rtol=1e-6, atol=1e-7)
    # dt_limit applied: X = exp(A_log) dt <= exp(A_log) * 0.05
    a = model.backbone.layers[0].mixer.A_log.exp()
    assert (-decays["backbone.layers.0.mixer"] <= a * 0.05 + 1e-6).all()
    # the loaded network is the saved one (same logits under the same CPU stand-ins)
    with fallbacks.attention_ops(adapters.find_layers(model), cpu=True), torch.no_grad():
        got = model(ids).logits
        want = saved(ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fla_mamba2_bfloat16_runs_as_fla_runs_it(fla_mamba2, monkeypatch):
    """fla's Mamba-2 keeps float32 norms and residual stream; in bfloat16 it runs under autocast."""
    import fla.layers.mamba2 as fl
    d, _ = fla_mamba2
    model, _ = hf_models.load_pretrained(str(d), dtype="bfloat16")
    assert model.foxwindow_autocast == torch.bfloat16 and model.backbone.layers[0].mixer.in_proj.weight.dtype == \
        torch.bfloat16
    seen, orig = [], fl.reshape_into_chunks

    def spy(t, pad, chunk):
        seen.append(t)
        return orig(t, pad, chunk)

    monkeypatch.setattr(fl, "reshape_into_chunks", spy)
    decays, _, _, _ = hf_capture.capture_batches(model, torch.randint(0, 300, (2, 24)), 2, "cpu")
    torch.testing.assert_close(decays["backbone.layers.1.mixer"], seen[5].float(), rtol=1e-6, atol=1e-7)


def test_fla_mamba2_under_transformers_classes_is_refused(fla_mamba2, tmp_path):
    """What transformers' Mamba-2 would do with fla's checkpoint: ignore dt_limit and rescale out_proj; both
    are caught."""
    from transformers import Mamba2Config, Mamba2ForCausalLM
    d, _ = fla_mamba2
    cfg_json = json.loads((d / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = Mamba2Config.from_pretrained(str(d))
        with pytest.raises(hf_models.ModelError, match="dt_limit.*not read by transformers.Mamba2Config"):
            hf_models._check_config_fields(str(d), cfg_json, config)
        assert config.rescale_prenorm_residual                       # fla's default, read by transformers too
        model = Mamba2ForCausalLM.from_pretrained(str(d), config=config)
    with pytest.raises(hf_models.ModelError, match="out_proj.weight .* differs from the checkpoint"):
        hf_models._check_weights(str(d), str(d), model)


def test_fla_mamba2_through_forget_py(fla_mamba2, bpe, tmp_path, capsys):
    d, _ = fla_mamba2
    tr = tmp_path / "t.npz"
    code, out, err = _forget(["--model", str(d), "--text", str(bpe / "text.txt"), "--n-seq", "3", "--seq-len", "64",
                              "--no-progress", "--save-traces", str(tr)], capsys)
    assert code == 0, err
    assert "mamba2 (a gated state, no KV cache)" in out and "W_mass: not available for mamba2" in out
    _, meta = load_trace(str(tr))
    assert set(meta["kinds"].values()) == {"recurrent"} and meta["kv_cache"] is False


def test_unknown_and_unregistered_model_types_say_not_supported(bpe, tmp_path, capsys):
    for mt in ("hgrn2", "delta_net", "no_such_model"):
        d = tmp_path / mt
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"model_type": mt, "hidden_size": 32}))
        code, _, err = _forget(["--model", str(d), "--text", str(bpe / "text.txt"), "--no-progress"], capsys)
        assert code == 2 and "not supported" in err and "fox-official" in err and "--adapter" in err, err
        assert err.count("\n") == 1 and "out of date" not in err


# ----------------------------------------------------------------------------- a user's adapter: RG-LRU

def test_rglru_adapter_matches_the_layer(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(REPO, "examples"))
    import rglru_adapter
    from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM
    torch.manual_seed(40)
    cfg = RecurrentGemmaConfig(hidden_size=32, lru_width=32, num_attention_heads=2, num_hidden_layers=3,
                               intermediate_size=64, vocab_size=300, attention_window_size=16,
                               block_types=("recurrent", "recurrent", "attention"), head_dim=16)
    model = RecurrentGemmaForCausalLM(cfg).eval()
    import transformers.models.recurrent_gemma.modeling_recurrent_gemma as rg
    seen, orig = [], rg.RecurrentGemmaRglru._rnn_scan

    def spy(self, hidden_states, recurrent_gate, *a, **kw):
        seen.append(recurrent_gate.float().log())
        return orig(self, hidden_states, recurrent_gate, *a, **kw)

    monkeypatch.setattr(rg.RecurrentGemmaRglru, "_rnn_scan", spy)
    ids = torch.randint(0, 300, (2, 20))
    cap = adapters.capture_log_decays(model, ids, adapters=[rglru_adapter.RGLRU], use_cache=False)
    names = sorted(cap.decays)
    assert len(names) == 2 and len(seen) == 2
    for n, want in zip(names, seen):
        lg = cap.decays[n]
        assert lg.shape == (2, 20, 2, 16)
        torch.testing.assert_close(lg.flatten(2), want, rtol=1e-6, atol=1e-7)


def test_adapter_flag_runs_a_users_adapter(bpe, tmp_path, capsys):
    from transformers import GPT2Tokenizer, RecurrentGemmaConfig, RecurrentGemmaForCausalLM
    torch.manual_seed(41)
    cfg = RecurrentGemmaConfig(hidden_size=32, lru_width=32, num_attention_heads=2, num_hidden_layers=2,
                               intermediate_size=64, vocab_size=300, attention_window_size=16,
                               block_types=("recurrent", "attention"), head_dim=16)
    d = tmp_path / "rg"
    RecurrentGemmaForCausalLM(cfg).save_pretrained(d)
    GPT2Tokenizer(str(bpe / "vocab.json"), str(bpe / "merges.txt")).save_pretrained(d)
    base = ["--model", str(d), "--text", str(bpe / "text.txt"), "--n-seq", "3", "--seq-len", "64", "--no-progress"]
    code, _, err = _forget(base, capsys)                        # without it: not supported, in one line
    assert code == 2 and "not supported" in err and "--adapter" in err and err.count("\n") == 1, err
    js = tmp_path / "r.json"
    spec = os.path.join(REPO, "examples", "rglru_adapter.py") + ":RGLRU"
    try:
        code, out, err = _forget(base + ["--adapter", spec, "--json", str(js)], capsys)
    finally:
        adapters.ADAPTERS.pop("rglru", None)
    assert code == 0, err
    assert "Per-head window laws" in out and "rglru (a gated state, no KV cache)" in out
    res = json.loads(js.read_text())
    assert res["info"]["families"] == ["rglru"] and len(res["heads"]) == 2
    for bad, msg in (("nomodule_xyz:X", "cannot import nomodule_xyz"), ("json:__version__", "not a GateAdapter"),
                     ("json", "expected MODULE:OBJECT"), ("json:nothing", "json has no nothing")):
        code, _, err = _forget(base + ["--adapter", bad], capsys)
        assert code == 2 and msg in err and err.count("\n") == 1, (bad, err)


def test_entry_point_group_registers_installed_adapters(tmp_path, monkeypatch):
    """A package that declares [project.entry-points."foxwindow.adapters"] rglru = "rglru_adapter:RGLRU" has its
    adapter registered for every --model run (an installed distribution is laid out here by hand)."""
    dist = tmp_path / "my_gates-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-gates\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{hf_models.ADAPTER_GROUP}]\nrglru = rglru_adapter:RGLRU\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(os.path.join(REPO, "examples"))
    try:
        got = hf_models.load_adapters()
        assert [a.family for a in got] == ["rglru"] and adapters.get_adapter("rglru") is got[0]
        (dist / "entry_points.txt").write_text(f"[{hf_models.ADAPTER_GROUP}]\nbad = rglru_adapter:NOPE\n")
        with pytest.raises(hf_models.ModelError, match="entry point bad = rglru_adapter:NOPE"):
            hf_models.load_adapters()
    finally:
        adapters.ADAPTERS.pop("rglru", None)
