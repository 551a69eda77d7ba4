"""The per-head verdict on traces whose truth is known, and the attention-mass window against brute force."""
import os

import numpy as np
import pytest
import torch
from scipy import stats

from foxwindow import forget, heads
from foxwindow import model as lm

S, T = 16, 2048
Z = float(stats.t.isf(1e-3 / 2, S - 1))          # jackknife over S sequences, alpha = 1e-3 per check


def test_iid_gates_obey_the_iid_law():
    rng = np.random.default_rng(0)
    lg = -forget.LogitNormalGate(2, 0.5).sample(rng, (S, T))
    r = heads.analyse_head(lg, z=Z)
    assert r.verdict == "iid law holds", (r.z_iid, r.reasons)
    assert abs(r.tau - 1) <= Z * r.se_tau
    assert all(c == 0 for c in r.censored_frac)
    m = forget.LogitNormalGate(2, 0.5).moments()
    assert abs(r.kappa - m.kappa) <= Z * r.se_kappa


def test_ar1_gates_need_the_autocorrelation_adjustment():
    rng = np.random.default_rng(1)
    x, _ = forget.AR1LogitGate(2, 0.5, 0.5).sample_paths(rng, S, T)
    r = heads.analyse_head(-x, z=Z)
    assert r.verdict == "autocorrelation-adjusted law holds", (r.z_iid, r.z_lr, r.reasons)
    assert abs(r.z_iid) > Z                                   # the iid law is rejected
    g = forget.AR1LogitGate(2, 0.5, 0.5)
    tau = 1 + 2 * g.dependence_sums()[0] / g.moments().sigma2
    assert abs(r.tau - tau) <= Z * r.se_tau + 0.1 * tau        # Geyer truncation bias is O(tau/T) plus a few %


def test_documents_with_different_rates_need_the_mixture_law_and_are_diagnosed():
    rng = np.random.default_rng(2)
    lg = np.concatenate([-forget.LogitNormalGate(2, 0.5).sample(rng, (S // 2, T)),
                         -forget.LogitNormalGate(3, 0.5).sample(rng, (S // 2, T))])
    r = heads.analyse_head(lg, z=Z)
    assert r.verdict == "document-mixture law holds" and {"iid", "lr"} <= set(r.rejected)
    assert any("non-stationary across documents" in w for w in r.reasons)


def test_censored_and_degenerate_heads_are_undetermined():
    rng = np.random.default_rng(3)
    lg = -forget.LogitNormalGate(7, 0.3).sample(rng, (S, 512))  # gates ~0.999: windows beyond the trace
    r = heads.analyse_head(lg, z=Z)
    assert r.verdict == "undetermined" and r.censored_frac[-1] > 0
    r = heads.analyse_head(np.full((4, 100), -0.05), z=Z)       # ALiBi: constant gate
    assert r.verdict == "undetermined" and "lattice" in r.reasons[0]
    r = heads.analyse_head(np.zeros((4, 100)), z=Z)
    assert r.verdict == "undetermined" and "no forgetting" in r.reasons[0]
    with pytest.raises(ValueError, match="S >= 3"):
        heads.analyse_head(np.zeros((2, 100)))
    with pytest.raises(ValueError, match="<= 0"):
        heads.analyse_head(np.full((4, 100), 0.1))


def test_mass_window_matches_brute_force():
    torch.manual_seed(0)
    model = lm.FoXLM(lm.FoXConfig(d_model=32, n_layers=1, n_heads=2, context=64)).eval()
    tokens = torch.randint(0, 256, (2, 40))
    traces, inputs = heads.capture(model, tokens)
    assert traces[0].shape == (2, 40, 2) and traces[0].dtype == torch.float32
    attn, x = model.blocks[0].attn, inputs[0]
    rows = torch.tensor([0, 7, 39])
    eps = 0.05
    got = heads.mass_windows(attn, x, eps, rows)                # (S, R, H)
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
    results, info = heads.analyse_model(n_seq=4, seq_len=512, progress=False)
    assert len(results) >= 4
    ok = {"iid law holds", "autocorrelation-adjusted law holds", "falsified", "undetermined"}
    for r in results:
        assert r.verdict in ok
        assert r.kappa > 0 and np.isfinite(r.decay_window_mean) or r.verdict == "undetermined"
    js = heads.to_json(results, info)
    assert len(js["heads"]) == len(results)


def test_saved_traces_give_the_same_verdicts(tmp_path):
    torch.manual_seed(1)
    ck = tmp_path / "tiny.pt"
    lm.save_model(str(ck), lm.FoXLM(lm.FoXConfig(d_model=32, n_layers=1, n_heads=2, context=64)), {"name": "tiny"})
    tr = tmp_path / "traces.npz"
    direct, _ = heads.analyse_model(str(ck), n_seq=4, seq_len=256, progress=False, save_traces=str(tr))
    again, info = heads.analyse_traces(str(tr))
    assert info["layers"] == ["blocks.0.attn.hook_log_fgate"] and info["n_seq"] == 4
    for a, b in zip(direct, again):
        assert (a.layer, a.head, a.verdict) == (b.layer, b.head, b.verdict)
        assert a.kappa == pytest.approx(b.kappa, rel=1e-6) and a.var_W == pytest.approx(b.var_W, rel=1e-6)
        assert a.decay_window_mean == b.decay_window_mean
