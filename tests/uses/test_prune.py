"""Tests for prune.py and its modules (prune_laws, prune_measure, prune_report): block-pruning predictions
against exact counts and sampled traces, the pruned attention op against its error bound, KV horizons
(quantiles, certificates, decoding through LM.step), state horizons of recurrent traces and bad input."""
import json
import math
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from conftest import REPO
from foxwindow import outputs
from foxwindow.laws import gates
from foxwindow.models import attention as fa
from foxwindow.models import fox as fm
from foxwindow.uses import prune
from foxwindow.uses import prune_laws as pl
from foxwindow.uses import prune_measure as pm

sys.path.insert(0, os.path.join(REPO, "figures"))
import fig8_prune  # noqa: E402
import figstyle  # noqa: E402
from foxwindow.models import traces


def _closed_form_pruned(T, BM, BN, m, L):
    """ALiBi (X = m): a block is pruned iff it is strictly causal and its gap n = i_min - j_max has n m > L,
    i.e. n >= floor(L/m) + 1. Counted block by block, independently of pl.BlockGrid."""
    w = math.floor(L / m)
    n_pruned = n_causal = 0
    for i0 in range(0, T, BM):
        i1 = min(i0 + BM, T) - 1
        for j0 in range(0, T, BN):
            j1 = min(j0 + BN, T) - 1
            if j0 > i1:
                continue
            n_causal += 1
            n_pruned += j1 < i0 and (i0 - j1) >= w + 1
    return n_pruned, n_causal


@pytest.mark.parametrize("T,block,m,L", [(500, (32, 48), 0.1, 7.33), (256, (64, 64), 0.05, 3.1),
                                         (97, (8, 8), 0.5, 12.2), (1024, (128, 64), 0.013, 10.0)])
def test_alibi_prediction_equals_closed_form(T, block, m, L):
    law = pl.HeadLaw.from_gate(gates.ConstantGate(m))
    pr = pl.predict_block_pruning(law, T, L, block)
    n_pruned, n_causal = _closed_form_pruned(T, *block, m, L)
    assert pr.n_causal_blocks == n_causal
    assert pr.expected_pruned_blocks == n_pruned
    assert pr.frac_blocks == n_pruned / n_causal
    # the naive rule on the constant trace prunes exactly those blocks
    pruned, _ = pl.pruned_block_mask(np.full(T, -m), L, block)
    assert pruned.sum() == n_pruned


def test_grid_counts_pairs_and_never_prunes_the_diagonal():
    g = pl.BlockGrid.make(100, (16, 24))
    assert g.pairs.sum() == 100 * 101 // 2
    assert not (g.strict & ~g.causal).any()
    # a gate of zero (decay 0 everywhere) prunes every strict block and nothing else
    pruned, _ = pl.pruned_block_mask(np.full(100, -50.0), 1.0, (16, 24))
    assert (pruned == g.strict).all() and g.causal.sum() > g.strict.sum()


@pytest.mark.parametrize("gate,L", [(gates.LogitNormalGate(1, 1), 8.0), (gates.GammaIncrement(2.0, 0.1), 6.0)])
def test_iid_prediction_matches_sampled_traces(gate, L):
    T, block, S = 256, (16, 16), 300
    law = pl.HeadLaw.from_gate(gate)
    assert law.method(L).startswith("iid")
    pr = pl.predict_block_pruning(law, T, L, block)                       # from the law only
    x = gate.sample(np.random.default_rng(1), (S, T))
    m = pl.measure_block_pruning(-x, L, block)                             # traces are independent units
    z = stats.norm.isf(0.001 / (2 * 4))                                       # Bonferroni: 2 gates x 2 checks
    assert 0.05 < pr.frac_blocks < 0.95                                       # a regime where the test has power
    assert abs(m["mean_blocks"] - pr.frac_blocks) <= z * m["se_blocks"]
    assert abs(m["mean_flops"] - pr.frac_flops) <= z * m["se_flops"]
    # power: the law of a gate forgetting 10% faster is rejected by the same check
    fast = pl.HeadLaw.from_gate(gates.GammaIncrement(2.0, 0.11) if isinstance(gate, gates.GammaIncrement)
                                   else gates.LogitNormalGate(0.85, 1))
    wrong = pl.predict_block_pruning(fast, T, L, block)
    assert abs(m["mean_blocks"] - wrong.frac_blocks) > z * m["se_blocks"]


def _inputs(B=2, T=160, H=2, D=8, seed=0, gate_mu=0.5):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, D, generator=g) for _ in range(3))
    lg = torch.nn.functional.logsigmoid(gate_mu + torch.randn(B, T, H, generator=g))
    return q, k, v, lg


def test_pruned_output_within_mass_bound():
    q, k, v, lg = _inputs()
    B, T, H, D = q.shape
    scale = D ** -0.5
    for U, log_tol in ((0.0, -1.0), (0.0, -3.0), ("auto", -2.0)):
        op = pm.MeasuredPruning(-log_tol, 16, U)
        out = op(q, k, v, lg)
        st = op.record[0]
        dense = fa.forgetting_attention_reference(q.double(), k.double(), v.double(), lg.double())
        # the pruned mass of each row, from dense probabilities and the block rule, computed here
        c = torch.cumsum(lg.double(), 1).transpose(1, 2)                               # (B, H, T)
        logits = torch.einsum("bihd,bjhd->bhij", q.double(), k.double()) * scale + c[..., :, None] - c[..., None, :]
        logits = logits.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        p = torch.softmax(logits, -1)
        rows = []
        for h in range(H):
            blk, g = pl.pruned_block_mask(lg[:, :, h], float(st.L[h]), 16)            # (B, nI, nJ)
            bi, bj = np.arange(T) // 16, np.arange(T) // 16
            rows.append(torch.from_numpy(blk[:, bi][:, :, bj]))
        pruned = torch.stack(rows, 1)                                                   # (B, H, T, T)
        mass = (p * pruned).sum(-1)                                                     # (B, H, T)
        vr = (v.double().amax(1) - v.double().amin(1)).transpose(0, 1)                  # (H, B, D) -> per b, h
        bound = mass[..., None] * vr.transpose(0, 1)[:, :, None, :]                     # (B, H, T, D)
        err = (out.double() - dense).abs().transpose(1, 2)                               # (B, H, T, D)
        assert (err <= bound + 1e-5).all()
        assert np.allclose(st.max_pruned_mass, mass.amax((0, 2)).numpy(), rtol=1e-4, atol=1e-7)
        if U == "auto":
            assert (st.max_pruned_mass <= math.exp(log_tol)).all()                      # ACP's guarantee
        else:
            assert mass.max() > 1e-3                                                     # pruning really bit


def test_pruning_at_vanishing_tol_is_dense():
    q, k, v, lg = _inputs(seed=3)
    op = pm.MeasuredPruning(1e4, 16)
    out = op(q, k, v, lg)
    st = op.record[0]
    assert st.pruned_blocks.sum() == 0 and (st.max_err == 0).all()                      # bit for bit
    ref = fa.forgetting_attention_reference(q, k, v, lg)
    assert torch.allclose(out, ref, atol=1e-6)


def _tiny_model(seed=0):
    torch.manual_seed(seed)
    cfg = fm.FoXConfig(d_model=32, n_layers=2, n_heads=2, context=64, fgate_bias_init=1.0)
    return fm.FoXLM(cfg).eval()


def test_decoding_with_full_horizon_equals_the_model():
    model = _tiny_model()
    toks = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(toks)
    lg, kept = pm.decode(model, toks)
    assert torch.allclose(lg, ref, atol=2e-5)
    lg2, kept2 = pm.decode(model, toks, np.full((2, 2), 40))
    assert torch.equal(lg, lg2) and (kept == 40).all() and (kept2 == 40).all()


def test_decoding_with_horizons_equals_a_band_mask():
    model = _tiny_model(1)
    toks = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(1))
    hz = np.array([[0, 5], [12, 2]])
    lg, kept = pm.decode(model, toks, hz)
    assert kept.tolist() == [[1, 6], [13, 3]]
    calls = []

    def band(q, k, v, log_fgate, *, sm_scale=None, causal=True, chunk=128):
        li = len(calls)
        calls.append(li)
        T = q.shape[1]
        i = torch.arange(T)
        c = torch.cumsum(log_fgate.double(), 1).transpose(1, 2)
        logits = torch.einsum("bihd,bjhd->bhij", q, k) * sm_scale + (c[..., :, None] - c[..., None, :]).float()
        d = i[:, None] - i[None, :]
        keep = (d >= 0) & (d[None] <= torch.from_numpy(hz[li])[:, None, None])       # (H, T, T)
        p = torch.softmax(logits.masked_fill(~keep, float("-inf")), -1)
        return torch.einsum("bhij,bjhd->bihd", p, v)

    with torch.no_grad(), fm.use_attention_op(model, band):
        ref = model(toks)
    assert len(calls) == 2 and torch.allclose(lg, ref, atol=2e-5)


def test_kv_horizon_quantiles_exact():
    # ALiBi: W = floor(L/m) for every p
    law = pl.HeadLaw.from_gate(gates.ConstantGate(0.1))
    for p in (0.5, 0.99):
        hz = pl.kv_horizon(law, 1.5, 7.0, p, T=1000)
        assert hz.h == math.floor((3.0 + 7.0 + math.log(1000)) / 0.1)
    # Beta(a, 1) gates: W ~ Poisson(L a) exactly
    law = pl.HeadLaw.from_gate(gates.BetaGate(20, 1))
    hz = pl.kv_horizon(law, 0.5, 5.0, 0.99)
    assert hz.h == stats.poisson.ppf(0.99, 6.0 * 20)
    # a recurrent state: the quantile at L = L_tol alone
    assert pl.state_horizon(law, 6.0, 0.99).h == hz.h
    assert pl.state_horizon(pl.HeadLaw.from_gate(gates.ConstantGate(0.3)), 6.0).h == math.floor(6.0 / 0.3)


def test_certified_horizon_bounds_the_decay():
    x_min, U, log_tol = 0.07, 1.3, -6.0
    for total in (False, True):
        hz = pl.certified_horizon(x_min, U, -log_tol, total=total)
        rng = np.random.default_rng(0)
        x = x_min + rng.exponential(0.05, (50, 3000))                          # every gate <= e^{-x_min}
        x[0] = x_min                                                              # the extreme trace
        logd = -np.cumsum(x, 1)                                                   # log decay at d = 1, 2, ...
        beyond = logd[:, hz.h:]                                                   # distances d > h
        assert (2 * U + beyond < log_tol).all()                                   # every key beyond: weight < tol
        tail = np.exp(2 * U + beyond).sum(1)
        if total:
            assert (tail <= math.exp(log_tol) * (1 + 1e-9)).all()
        else:                                                                     # minimal: key h is not covered
            assert 2 * U - hz.h * x_min >= log_tol


def test_certified_x_min_holds_for_the_model():
    model = _tiny_model(2)
    xm = np.stack([pm.certified_x_min(b.attn, b.ln1) for b in model.blocks])
    toks = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(2))
    _, cache = traces.run_with_cache(model, toks, names_filter=lambda n: n.endswith("hook_log_fgate"))
    for li in range(2):
        x = -cache[f"blocks.{li}.attn.hook_log_fgate"].double().numpy()          # (B, T, H)
        assert (x.min((0, 1)) >= xm[li] * (1 - 1e-6)).all() and (xm[li] > 0).all()


def test_bad_input_raises():
    law = pl.HeadLaw.from_gate(gates.ConstantGate(0.1))
    for tol in (0.0, 1.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="tol"):
            pl.level_of_tol(tol)
    for lt in (0.0, 0.5, float("-inf")):
        with pytest.raises(ValueError, match="log_tol"):
            pl.level_of_log_tol(lt)
    for L in (0.0, -0.5, float("inf")):
        with pytest.raises(ValueError, match="L_tol"):
            pl.kv_horizon(law, 1.0, L)
    with pytest.raises(ValueError, match="block size BM"):
        pl.predict_block_pruning(law, 100, 5.0, 0)
    with pytest.raises(ValueError, match="block size BN"):
        pl.pruned_block_mask(np.full(10, -0.1), 5.0, (4, 0))
    with pytest.raises(ValueError, match="T"):
        pl.predict_block_pruning(law, 0, 5.0, 16)
    with pytest.raises(ValueError, match="T > 0"):
        pl.pruned_block_mask(np.zeros((2, 0)), 5.0, 16)
    with pytest.raises(ValueError, match="T"):
        pl.acp_level(10.0, 1.0, 0)
    with pytest.raises(ValueError, match="L must be"):
        law.survival(-1.0, np.arange(3))
    with pytest.raises(ValueError, match="x_min"):
        pl.certified_horizon(0.0, 1.0, 5.0)
    q, k, v, lg = _inputs(T=32)
    with pytest.raises(ValueError, match="L_tol"):
        fa.forgetting_attention_pruned_naive(q, k, v, lg, L_tol=0.0)
    with pytest.raises(ValueError, match="U"):
        fa.forgetting_attention_pruned_naive(q, k, v, lg, L_tol=3.0, U="max")


def _cli(argv, capsys):
    """(exit code, stderr) of the command as `python prune.py` runs it (outputs.cli; argparse exits itself)."""
    try:
        rc = outputs.cli(prune.main, argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("argv,msg", [(["--tol", "1.5"], "--tol"), (["--log-tol", "0"], "--log-tol"),
                                      (["--block", "0"], "--block sizes must be >= 1"),
                                      (["--seq-len", "0"], "--seq-len"),
                                      (["--block", "64", "-3"], "got 64 -3"),
                                      (["--checkpoint", "nope.pt"], "not found"), (["--tol", "abc"], "--tol"),
                                      (["--U", "big"], "--U"),
                                      (["--tol", "0.1", "--log-tol", "-3"], "not allowed"),
                                      (["--kind", "softmax"], "--kind applies to --traces only")])
def test_cli_bad_input_exits_2(argv, msg, capsys, tmp_path):
    rc, err = _cli(argv + ["--out", str(tmp_path)], capsys)
    assert rc == 2 and msg in err and len(err.splitlines()) == 1


def test_cli_takes_debug(capsys, tmp_path):
    with pytest.raises(ValueError, match="--tol"):                   # --debug: the traceback, not one line
        outputs.cli(prune.main, ["--tol", "1.5", "--debug", "--out", str(tmp_path)])


def test_cli_does_not_overwrite(capsys, tmp_path):
    (tmp_path / "prune.json").write_text("{}")
    rc, err = _cli(["--out", str(tmp_path)], capsys)
    assert rc == 2 and "exists" in err
    assert (tmp_path / "prune.json").read_text() == "{}"


def test_figure_from_small_json(tmp_path):
    heads = [dict(layer=0, head=h, kappa=0.5 / (h + 1), tols=[dict(log_tol=lt, pred_frac_blocks=0.1 * h,
                                                                  meas_frac_blocks=0.1 * h + 0.01, se_meas=0.01)
                                                             for lt in (-4.0, -10.0)]) for h in range(3)]
    per_tol = [dict(log_tol=lt, delta_bpb=1e-6 * (lt + 11), max_pruned_mass=1e-9, readout_bound=1e-4,
                    pred_frac_blocks=0.1, meas_frac_blocks=0.11) for lt in (-4.0, -10.0)]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(dict(info=dict(seq_len=128, block=[64, 64], bpb_dense=2.0), heads=heads,
                                    per_tol=per_tol, decode=None)))
    figstyle.apply()
    paths, summary = fig8_prune.make(SimpleNamespace(out=str(tmp_path), prune_json=str(path)))
    assert all(os.path.getsize(p) > 5000 for p in paths) and "3 heads" in summary


@pytest.mark.skipif(not __import__("os").path.exists("checkpoints/fox_shakespeare.pt"), reason="no shipped checkpoint")
def test_model_run_end_to_end_small(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:                                                                         # main sets --threads 1
        res = prune.run(["--log-tol", "-4", "-10", "--n-seq", "3", "--seq-len", "128", "--block", "32",
                          "--decode-seqs", "1", "--out", str(tmp_path), "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert (tmp_path / "prune.json").exists() and (tmp_path / "prune.txt").exists()
    assert "ACP block pruning" in capsys.readouterr().out
    for r in res["per_tol"]:
        assert r["max_pruned_mass"] <= math.exp(r["log_tol"])                     # ACP's guarantee held
        assert r["max_excess"] <= 1e-6 * r["max_abs_v"]                          # bound holds to float32 rounding
    d = res["decode"]
    assert d["max_abs_logit_diff_vs_parallel"] < 1e-4
    for h in res["heads"]:
        for e in h["tols"]:
            assert 0 <= e["pred_frac_blocks"] <= 1 and 0 <= e["meas_frac_blocks"] <= 1
            assert 0 <= e["horizon_coverage"] <= 1 and e["mass_window_max"] <= 127


def test_var_sum_equals_the_double_sum_of_autocovariances():
    law = pl.HeadLaw.from_gate(gates.AR1LogitGate(1.0, 1.0, 0.8))
    gam = law.sigma2 * np.concatenate([law.rho, np.zeros(64)])
    for n in (1, 2, 7, 40):
        i = np.arange(n)
        brute = gam[np.abs(i[:, None] - i[None, :])].sum()                     # Var sum_{t<n} X_t
        assert math.isclose(law.var_sum(np.array([n]))[0], brute, rel_tol=1e-12)


def test_from_trace_chooses_the_law():
    rng = np.random.default_rng(4)
    iid = pl.HeadLaw.from_trace(-gates.LogitNormalGate(1, 1).sample(rng, (16, 1024)))
    assert iid.iid and iid.method(8.0) == "iid, exact numerics"
    ar, _ = gates.AR1LogitGate(1, 1, 0.9).sample_paths(rng, 16, 1024)
    dep = pl.HeadLaw.from_trace(-ar)
    assert not dep.iid and dep.tau > 3 and dep.method(8.0) == "autocorrelation-adjusted normal"
    const = pl.HeadLaw.from_trace(np.full((4, 50), -0.2))
    assert const.method(3.0).startswith("deterministic") and const.x_min == pytest.approx(0.2)


# ----------------------------------------------------------------------------- --traces: any model's gate traces


def _trace_file(path, S=24, T=256, m=0.3, seed=3, iid=True, meta=None):
    """Layer 'a': (S, T, 2) log gates, head 0 iid logit-normal(1, 1) (iid=False: constant e^-0.05), head 1 the
    constant gate e^-m; layer 'b': (S, T, 1), the constant gate e^-(2m). meta: the file's metadata (default: a
    softmax model). Returns (path, [the two constant heads' float32 log gates])."""
    x = gates.LogitNormalGate(1, 1).sample(np.random.default_rng(seed), (S, T)) if iid else np.full((S, T), 0.05)
    lg_c = [np.float32(-m), np.float32(-2 * m)]
    a = np.stack([-x, np.full((S, T), lg_c[0])], axis=-1).astype(np.float32)            # (S, T, 2)
    b = np.full((S, T, 1), lg_c[1], dtype=np.float32)                                   # (S, T, 1)
    traces.save_trace(str(path), {"a": a, "b": b}, dict(model="synthetic", kind="softmax") if meta is None else meta)
    return str(path), lg_c


def test_traces_predicted_and_measured_pruning_agree(tmp_path):
    path, lg_c = _trace_file(tmp_path / "t.npz")
    U, lt, T, block = 0.5, -4.0, 256, (32, 32)
    res = prune.analyse_traces(path, U, [-lt], block, context=20, progress=False)
    L = 2 * U + math.log(T) - lt                                                     # -delta
    assert [(h["layer"], h["head"]) for h in res["heads"]] == [(0, 0), (0, 1), (1, 0)]
    e = res["heads"][0]["tols"][0]                                                   # the iid head
    assert e["L"] == pytest.approx(L)
    assert 0.05 < e["pred_frac_blocks"] < 0.95                                       # the check has power here
    z = stats.norm.isf(0.001 / 2)
    assert e["se_meas"] > 0 and abs(e["err"]) <= z * e["se_meas"]
    # the law fitted on the odd sequences predicts what the true law predicts (fit error << measurement SE)
    true = pl.predict_block_pruning(pl.HeadLaw.from_gate(gates.LogitNormalGate(1, 1)), T, L, block)
    assert abs(e["pred_frac_blocks"] - true.frac_blocks) <= e["se_meas"]
    # ALiBi: prediction and measurement both equal the closed form, and the horizon is floor(L_T / m)
    for e, lg in zip([res["heads"][1]["tols"][0], res["heads"][2]["tols"][0]], lg_c):
        m = -float(lg)
        n_pruned, n_causal = _closed_form_pruned(T, *block, m, L)
        assert 0 < n_pruned < n_causal
        assert e["method"].startswith("deterministic")
        assert e["pred_frac_blocks"] == n_pruned / n_causal and e["se_meas"] <= 1e-15
        assert e["meas_frac_blocks"] == pytest.approx(n_pruned / n_causal, rel=1e-12)     # a mean over sequences
        for t, h in e["horizon"].items():
            assert h == math.floor((2 * U - lt + math.log(int(t))) / m)
    # W at the level of a 20-token context: floor(L_20 / m) = 26 > 20 for m = 0.3, 13 for m = 0.6
    assert [res["heads"][i]["tols"][0]["p_window_beyond_context"] for i in (1, 2)] == [1.0, 0.0]
    r = res["per_tol"][0]
    assert r["pred_frac_blocks"] == pytest.approx(np.mean([h["tols"][0]["pred_frac_blocks"] for h in res["heads"]]))
    assert res["info"]["n_seq"] == 12 and res["info"]["n_fit"] == 12 and res["decode"] is None


def test_traces_cli_text_and_json(tmp_path, capsys):
    path, _ = _trace_file(tmp_path / "t.npz", S=6, T=64, iid=False)
    res = prune.run(["--traces", path, "--U", "0", "--log-tol", "-3", "--block", "16", "--out", str(tmp_path),
                     "--no-progress"])
    out = capsys.readouterr().out
    flat = " ".join(out.split())                                         # the prose is wrapped to 120 columns
    assert "Left out: bits per byte" in flat and "need the model itself" in flat and " cov " not in out
    assert max(map(len, out.splitlines())) <= 120
    assert json.loads((tmp_path / "prune.json").read_text())["info"]["source"] == "traces"
    assert len(res["heads"]) == 3 and res["info"]["kind"] == "softmax"


@pytest.mark.parametrize("meta", [dict(kind="recurrent"), dict(families={"a": "mamba2", "b": "mamba2"}),
                                  dict(family="fla-gla")])
def test_recurrent_traces_report_the_state_horizon_only(meta, tmp_path, capsys):
    path, lg_c = _trace_file(tmp_path / "t.npz", S=6, T=64, iid=False, meta=meta)
    res = prune.run(["--traces", path, "--log-tol", "-3", "-6", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert res["info"]["kind"] == "recurrent" and "memory horizon" in out.lower()
    assert "ACP block pruning and KV horizons" not in out and "mem@" not in out and "speedup" not in out
    assert "no KV cache" in out
    for hd, lg in zip(res["heads"][1:], lg_c):                      # constant gates: W = floor(L_tol / m)
        assert [e["state_horizon"] for e in hd["tols"]] == [math.floor(L / -float(lg)) for L in (6.0, 3.0)[::-1]]
    assert all("pred_frac_blocks" not in e and "horizon" not in e for hd in res["heads"] for e in hd["tols"])


def test_trace_kind_unknown_is_refused_unless_given(tmp_path, capsys):
    path, _ = _trace_file(tmp_path / "t.npz", S=6, T=64, iid=False, meta=dict(model="mystery"))
    rc, err = _cli(["--traces", path, "--U", "0", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and "--kind softmax" in err and len(err.splitlines()) == 1
    res = prune.run(["--traces", path, "--kind", "recurrent", "--out", str(tmp_path / "o"), "--no-progress"])
    assert res["info"]["kind"] == "recurrent" and res["info"]["kind_source"] == "given (--kind)"
    assert prune.trace_kind(dict(family="fla-fox"), ["x"])[0] == "softmax"
    assert prune.trace_kind({}, ["blocks.0.attn.hook_log_fgate"])[0] == "softmax"
    with pytest.raises(ValueError, match="both kinds"):
        prune.trace_kind(dict(families={"a": "mamba2", "b": "fla-fox"}), ["a", "b"])


@pytest.mark.parametrize("extra,msg", [([], "--traces needs --U"), (["--U", "auto"], "--traces needs --U"),
                                       (["--U", "0", "--checkpoint", "checkpoints/fox_shakespeare.pt"],
                                        "--checkpoint cannot be used with --traces"),
                                       (["--U", "0", "--n-seq", "4"], "--n-seq cannot be used with --traces"),
                                       (["--U", "0", "--context", "0"], "--context")])
def test_traces_cli_usage_errors_exit_2(extra, msg, tmp_path, capsys):
    path, _ = _trace_file(tmp_path / "t.npz", S=6, T=32, iid=False)
    rc, err = _cli(["--traces", path, "--out", str(tmp_path / "o")] + extra, capsys)
    assert rc == 2 and msg in err and len(err.splitlines()) == 1


def test_traces_bad_files_and_context_without_traces(tmp_path, capsys):
    path, _ = _trace_file(tmp_path / "t.npz", S=4, T=32, iid=False)
    with pytest.raises(ValueError, match="at least 6"):
        prune.analyse_traces(path, 0.0, [4.0], progress=False)
    for argv, msg in [(["--traces", str(tmp_path / "none.npz"), "--U", "0"], "--traces: trace file not found"),
                      (["--traces", str(tmp_path), "--U", "0"], "(a folder; expected an .npz file)"),
                      (["--context", "100"], "--context applies to --traces only")]:
        rc, err = _cli(argv + ["--out", str(tmp_path / "o")], capsys)
        assert rc == 2 and msg in err and len(err.splitlines()) == 1


def test_exact_laws_in_processes_give_the_same_result(tmp_path):
    path, _ = _trace_file(tmp_path / "t.npz", S=6, T=32, meta=dict(kind="recurrent"))   # head 0: iid, exact
    one = prune.analyse_traces(path, None, [3.0, 5.0], progress=False, workers=1)     # one level a tol: cheap
    two = prune.analyse_traces(path, None, [3.0, 5.0], progress=False, workers=2)
    assert one["heads"][0]["tols"][0]["method"] == "iid, exact numerics"
    assert one["heads"] == two["heads"] and one["per_tol"] == two["per_tol"]


def test_trace_heads_are_read_a_block_at_a_time_never_the_whole_file(tmp_path, monkeypatch):
    """prune.py --traces reads its heads through traces.HeadBlocks (here one head a block), never the whole file
    (load_trace), with the numbers of the default blocks."""
    path, _ = _trace_file(tmp_path / "t.npz", S=6, T=32, meta=dict(kind="recurrent"))
    ref = prune.analyse_traces(path, None, [3.0], progress=False, workers=1)
    monkeypatch.setattr(traces, "load_trace", lambda *a, **k: pytest.fail("the whole file was loaded"))
    monkeypatch.setattr(traces, "HEAD_BLOCK_BYTES", 1)
    for w in (1, 2):
        got = prune.analyse_traces(path, None, [3.0], progress=False, workers=w)
        assert got["heads"] == ref["heads"] and got["per_tol"] == ref["per_tol"]
    # the command checks the file's values once (before its outputs), not again in analyse_traces
    checks = []
    real = traces.LazyTrace.check_values
    monkeypatch.setattr(traces.LazyTrace, "check_values", lambda self, name: (checks.append(name), real(self, name)))
    prune.run(["--traces", path, "--log-tol", "-3", "--out", str(tmp_path / "o"), "--no-progress", "--workers", "1"])
    assert len(checks) == 2 == len(set(checks)), checks                 # two layers, each once


@pytest.mark.parametrize("module, first", [("prune_laws", "The window law of a head"),
                                           ("prune_measure", "What prune.py measures"),
                                           ("prune_report", "The text report of prune.py")])
def test_prune_library_modules_say_what_they_are(capsys, monkeypatch, module, first):
    import runpy
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("foxwindow.uses." + module, run_name="__main__")
    assert e.value.code in (0, None) and capsys.readouterr().out.startswith(first)


def test_the_model_report_fits_120_columns():
    """The shipped run's report (results/prune/prune.json, decoding included) within 120 columns, every head and
    tol in it."""
    from foxwindow.uses.prune_report import format_report
    res = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "results", "prune", "prune.json")))
    text = format_report(res)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120, max(map(len, lines))
    assert sum(line.startswith(f"{hd['layer']:>2d}.{hd['head']}") for hd in res["heads"] for line in lines) \
        == len(res["heads"])
    assert all(f"{r['log_tol']:6.1f} " in text for r in res["per_tol"]) and "horizons by layer" in text
