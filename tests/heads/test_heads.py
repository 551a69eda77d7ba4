"""The per-head drivers: eps converted once, degenerate heads, capture and the attention-mass window,
the shipped model, saved traces, seeds."""
import math
import os

import numpy as np
import pytest
import torch

from foxwindow import outputs
from foxwindow.heads import command, table
from foxwindow.heads import driver as heads
from foxwindow.laws import gates
from foxwindow.models import fox as lm
from foxwindow.models import traces as traces_mod
from foxwindow.models.attention import cum_log_gate, fox_logits


def test_analyse_head_converts_eps_once_and_keeps_the_old_z():
    rng = np.random.default_rng(0)
    lg = -gates.LogitNormalGate(2, 0.5).sample(rng, (8, 512))
    a = heads.analyse_head(lg, eps=[1e-2, 1e-3], seed=1, n_boot=200)
    b = heads.analyse_head(lg, L=[gates.threshold(1e-2), gates.threshold(1e-3)], seed=1, n_boot=200)
    assert a.L_list == b.L_list and a.pred_mean == b.pred_mean and a.eps_list == [1e-2, 1e-3]
    z16 = heads.critical_z(16, 8)                              # a z standing for a 16-head model
    assert heads.analyse_head(lg, z=z16, seed=1, n_boot=200).alpha_test == pytest.approx(0.05 / 32)


def test_degenerate_heads_are_undetermined():
    r = heads.analyse_head(np.full((4, 100), -0.05))             # ALiBi: constant gate
    assert r.verdict == "undetermined" and "lattice" in r.reasons[0]
    r = heads.analyse_head(np.zeros((4, 100)))
    assert r.verdict == "undetermined" and "no forgetting" in r.reasons[0]
    with pytest.raises(ValueError, match="S >= 3"):
        heads.analyse_head(np.zeros((2, 100)))
    with pytest.raises(ValueError, match="<= 0"):
        heads.analyse_head(np.full((4, 100), 0.1))


def test_mass_window_matches_brute_force():
    torch.manual_seed(0)
    model = lm.FoXLM(lm.FoXConfig(d_model=32, n_layers=1, n_heads=2, context=64)).eval()
    tokens = torch.randint(0, 256, (2, 40))
    traces, inputs = heads.capture(model, tokens)                # traces.capture, kept under its old name
    assert traces[0].shape == (2, 40, 2) and traces[0].dtype == torch.float32
    attn, x = model.blocks[0].attn, inputs[0]
    rows = torch.tensor([0, 7, 39])
    eps = 0.05
    got = heads.mass_windows(attn, x, math.log(1 / eps), rows)  # (S, R, H): the threshold as L
    with torch.no_grad():                                      # the general function, from probabilities
        S_, T_ = x.shape[:2]
        q = attn.q_proj(x).view(S_, T_, 2, 16).transpose(1, 2)
        k = attn.k_proj(x).view(S_, T_, 2, 16).transpose(1, 2)
        c = cum_log_gate(attn.log_fgate(x))
        A = torch.softmax(fox_logits(q[:, :, rows], k, c[:, :, rows], c, attn.scale, q_pos=rows,
                                     dtype=torch.float64), -1)
    assert torch.equal(traces_mod.attention_mass_window(A, rows, gates.threshold(eps)).transpose(1, 2), got)
    with torch.no_grad():
        q = attn.q_proj(x).view(2, 40, 2, 16).double()
        k = attn.k_proj(x).view(2, 40, 2, 16).double()
        lg = attn.log_fgate(x).double()
    for s in range(2):
        for ri, i in enumerate(rows.tolist()):
            for h in range(2):
                logit = torch.tensor([q[s, i, h] @ k[s, j, h] * attn.scale + lg[s, j + 1:i + 1, h].sum()
                                      for j in range(i + 1)])
                a = torch.softmax(logit, 0)
                d = next(d for d in range(i + 1) if a[i - d:].sum() >= 1 - eps)
                assert got[s, ri, h].item() == d


@pytest.mark.skipif(not os.path.exists(heads.DEFAULT_CHECKPOINT), reason="no shipped checkpoint")
def test_shipped_model_analysis_runs():
    Ls = [gates.threshold(e) for e in (1e-2, 1e-3, 1e-4)]
    results, info = heads.analyse_model(L=Ls, n_seq=4, seq_len=512, progress=False, n_boot=200, seed=3)
    assert len(results) >= 4 and info["checkpoint"] == "checkpoints/fox_shakespeare.pt" and info["seed"] == 3
    for r in results:
        assert r.verdict in heads.verdict.STATES and len(r.pred_q50) == 3 and r.context == 1024
        assert r.kappa > 0 and np.isfinite(r.decay_window_mean) or r.verdict == "undetermined"
    js = table.to_json(results, info)
    assert len(js["heads"]) == len(results) and js["info"]["seed"] == 3


def test_saved_traces_give_the_same_verdicts(tmp_path):
    torch.manual_seed(1)
    ck = tmp_path / "tiny.pt"
    lm.save_model(str(ck), lm.FoXLM(lm.FoXConfig(d_model=32, n_layers=1, n_heads=2, context=64)), {"name": "tiny"})
    tr = tmp_path / "traces.npz"
    direct, _ = heads.analyse_model(str(ck), n_seq=4, seq_len=256, progress=False, save_traces=str(tr), seed=5,
                                    n_boot=200)
    again, info = heads.analyse_traces(str(tr), seed=5, n_boot=200)
    assert info["layers"] == ["blocks.0.attn.hook_log_fgate"] and info["n_seq"] == 4 and info["context"] == 64
    for a, b in zip(direct, again):
        assert (a.layer, a.head, a.verdict) == (b.layer, b.head, b.verdict)
        assert a.kappa == pytest.approx(b.kappa, rel=1e-6) and a.var_W == pytest.approx(b.var_W, rel=1e-6)
        assert a.pred_mean == pytest.approx(b.pred_mean, rel=1e-6) and a.decay_window_mean == b.decay_window_mean


def test_cli_records_the_seed_and_reproduces_with_it(tmp_path, capsys):
    lg = -gates.LogitNormalGate(2, 0.5).sample(np.random.default_rng(4), (6, 256, 2))
    path = tmp_path / "t.npz"
    traces_mod.save_trace(str(path), {"blocks.0.attn.hook_log_fgate": lg.astype(np.float32)}, {"heads": 2})
    outs = []
    for k, extra in enumerate(([], ["--seed"], ["--seed"])):
        js = tmp_path / f"{k}.json"
        if extra:
            extra = extra + [str(outs[0]["info"]["seed"])]
        assert outputs.cli(command.main, ["--traces", str(path), "--json", str(js), "--no-progress", "--n-boot", "300"]
                           + extra) in (0, None)
        import json
        outs.append(json.loads(js.read_text()))
    assert "lead1e-3" in capsys.readouterr().out
    # a run without --seed draws fresh and records its seed; giving that seed back reproduces it
    assert outs[1]["heads"][0]["prediction"]["mean"] == outs[0]["heads"][0]["prediction"]["mean"] == \
        outs[2]["heads"][0]["prediction"]["mean"]
    assert outs[1]["heads"][0]["at"] == outs[0]["heads"][0]["at"]
    assert os.path.basename(outs[0]["info"]["checkpoint"]) == "t.npz"
