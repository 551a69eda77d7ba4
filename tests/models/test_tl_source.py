"""TransformerLens as a source: tiny Gated DeltaNet (Qwen3.5 text) and Mamba-2 models built locally from configs
(random weights, nothing downloaded), bridged by TransformerLens, their decays read through run_with_cache and
the bridge's hook names, exact against what each module computes: the g the Gated DeltaNet layer hands its
chunked kernel, and the Mamba-2 adapter on the plain model. Then the traces through `forget.py --traces`.
Skipped without transformer-lens (pip install -r requirements-tl.txt: an optional extra)."""
import copy
import importlib.util
import json

import pytest
import torch

from foxwindow.heads import command
from foxwindow.models import adapters, tl_source, traces

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None,
                                reason="transformer-lens not installed (pip install -r requirements-tl.txt)")


def _boot(model, tmp_path):
    from transformer_lens.model_bridge import TransformerBridge
    model.config.save_pretrained(str(tmp_path))                 # the config only: the weights are the model's own
    return TransformerBridge.boot_transformers(str(tmp_path), tokenizer=None, hf_model=model, device="cpu")


def test_gated_deltanet_decay_exact(tmp_path, capsys, monkeypatch):
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    torch.manual_seed(0)
    cfg = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
                            linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                            layer_types=["linear_attention", "full_attention", "linear_attention"],
                            max_position_embeddings=256)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()   # as the bridge runs it
    seen = []
    reference = mq.torch_chunk_gated_delta_rule.__wrapped__         # transformers' torch reference of the chunked op

    def recording(*a, **k):                                         # the g each layer hands its chunked op
        seen.append(k["g"].detach().clone())
        return reference(*a, **k)

    monkeypatch.setattr(mq, "torch_chunk_gated_delta_rule", recording)   # the CPU path, plain model and bridge
    plain = copy.deepcopy(m)
    ids = torch.randint(0, 64, (4, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain(ids)
    ref = dict(zip([0, 2], seen))
    assert len(seen) == 2
    bridge = _boot(m, tmp_path / "cfg")
    dec, fam, bound = tl_source.tl_log_decays(bridge, ids)
    assert sorted(dec) == ["blocks.0.linear_attn.hook_log_decay", "blocks.2.linear_attn.hook_log_decay"]
    for name, v in dec.items():
        i = int(name.split(".")[1])
        assert v.shape == (4, 96, 4) and torch.equal(v, ref[i].float())
        assert fam[name] == "fla-gated-deltanet" and bound[name] == adapters.MEMORY_UPPER
    tr, meta = tl_source.tl_traces(bridge, [ids[:2], ids[2:]])
    p = str(tmp_path / "gdn.npz")
    traces.save_trace(p, tr, dict(meta, model="tiny TransformerLens Gated DeltaNet"))
    js = str(tmp_path / "gdn.json")
    command.main(["--traces", p, "--n-boot", "0", "--no-progress", "--seed", "0", "--json", js])
    out = capsys.readouterr().out
    assert "[upper bound]" in out and json.load(open(js))["info"]["memory_bound"] == adapters.MEMORY_UPPER


def test_mamba2_decay_rebuilt_exact(tmp_path):
    from transformers import Mamba2Config, Mamba2ForCausalLM
    torch.manual_seed(0)
    cfg = Mamba2Config(vocab_size=64, hidden_size=32, state_size=8, num_heads=4, head_dim=16, expand=2, n_groups=1,
                       num_hidden_layers=2, chunk_size=16)
    m = Mamba2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in m.backbone.layers:                            # decays away from the initialisation's
            layer.mixer.A_log.uniform_(-2, 2)
            layer.mixer.dt_bias.uniform_(-3, 1)
    plain = copy.deepcopy(m)
    ids = torch.randint(0, 64, (3, 64), generator=torch.Generator().manual_seed(2))
    ref = adapters.capture_log_decays(plain, ids, adapters=["mamba2"], use_cache=False).decays
    bridge = _boot(m, tmp_path / "cfg")
    dec, fam, bound = tl_source.tl_log_decays(bridge, ids, use_cache=False)
    assert sorted(dec) == ["blocks.0.mixer.in_proj.hook_out", "blocks.1.mixer.in_proj.hook_out"]
    for name, v in dec.items():
        i = int(name.split(".")[1])
        r = ref[f"backbone.layers.{i}.mixer"]
        assert v.shape == (3, 64, 4) and torch.allclose(v, r, rtol=1e-6, atol=1e-7)
        assert fam[name] == "mamba2" and bound[name] == "decay"
