"""Chunk-size safety: the overflow thresholds, the lattice tails against the exact numerics, the chunked op
(it fails exactly when a chunk's summed -log g passes the threshold; re-centred it never does), and the
predicted failure rate against the op's measured NaN rate on iid and AR(1)-correlated synthetic gates."""
import math
import os
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import REPO, bonferroni_z
from foxwindow.laws import exact, gates
from foxwindow.uses import chunks as ch
from foxwindow.uses import chunks_report


def test_exp_limits_derived_match_torch():
    for dt in ch.DTYPES:
        d, m = ch.exp_limits(dt), ch.measured_limits(dt)
        for f in ("overflow", "subnormal", "underflow"):
            # bisection on float32 b: equal to within float32's spacing at b (2^-17 near 88)
            assert abs(getattr(d, f) - getattr(m, f)) <= 4 * np.spacing(np.float32(getattr(d, f))), (dt, f)
        assert d.overflow < d.underflow                # the query factor never reaches 0 before the key overflows
    assert abs(ch.exp_limits("float32").overflow - math.log(np.finfo(np.float32).max)) < 1e-6
    with pytest.raises(ValueError, match="dtype"):
        ch.exp_limits("float64")


def test_law_tail_brackets_exact_first_passage():
    gate = gates.LogitNormalGate(-1.0, 1.0)
    for dt in ("float32", "float16"):
        th = ch.exp_limits(dt).overflow
        t = ch.law_tail(gate, th, (8, 16, 32, 64, 128))
        with warnings.catch_warnings():                      # its tolerance is on E[W]; the survival is what is used
            warnings.simplefilter("ignore", exact.AccuracyWarning)
            fp = exact.exact_first_passage(gate, eps=math.exp(-th), var_tol=math.inf)
        for i, C in enumerate(t.chunks):
            k = C - fp.n0
            ex = 1.0 - (fp.survival[k] if 0 <= k < len(fp.survival) else (1.0 if k < 0 else 0.0))
            assert t.lo[i] - 1e-9 <= ex <= t.hi[i] + 1e-9, (dt, C, t.lo[i], ex, t.hi[i])
            assert abs(t.p[i] - ex) <= max(1e-3 * ex, 1e-9) + (t.hi[i] - t.lo[i]) / 4, (dt, C, t.p[i], ex)


def _reference(q, k, v, lg):
    """o_t = q_t . state_t, state_t = g_t state_{t-1} + k_t v_t^T, in float64 (the recurrent form)."""
    B, T, H, D = q.shape
    st = torch.zeros(B, H, D, v.shape[-1], dtype=torch.float64)
    out = []
    for t in range(T):
        kv = k[:, t].double()[..., None] * v[:, t].double()[..., None, :]
        st = st * lg[:, t].double().exp()[:, :, None, None] + kv
        out.append((q[:, t].double()[..., None] * st).sum(-2))
    return torch.stack(out, 1)


def test_op_fails_exactly_when_the_chunk_sum_passes_the_threshold():
    rng = np.random.default_rng(0)
    B, T, H = 4, 256, 3
    x = np.stack([gates.LogitNormalGate(mu, 1.0).sample(rng, (B, T)) for mu in (-1.0, 0.5, 3.0)], -1)
    lg = torch.tensor(-x, dtype=torch.float32)
    q, k, v = ch.unit_qkv(B, T, H, 4, 3, seed=1)
    seen = []
    for dt in ch.DTYPES:
        th = ch.exp_limits(dt).overflow
        for C in (16, 64):
            o, bad = ch.chunked_attention(q, k, v, lg, C, dt)
            assert torch.equal(ch.chunked_attention(q, k, v, lg, C, dt, output=False)[1], bad)
            sums = ch.chunk_sums(x, C)
            clear = np.abs(sums - th) > 1e-3                     # float32 cumsum vs float64 sums at the edge
            assert clear.mean() > 0.95
            assert np.array_equal(bad.numpy()[clear], (sums > th)[clear]), (dt, C)
            seen.append((bool(bad.any()), bool(bad.all())))
            o_re, bad_re = ch.chunked_attention(q, k, v, lg, C, dt, recentre=True)
            assert not bad_re.any() and torch.isfinite(o_re).all()
    assert any(a for a, _ in seen) and not any(b for _, b in seen)     # some chunks fail, never all
    ref = _reference(q, k, v, lg)
    o_re, _ = ch.chunked_attention(q, k, v, lg, 16, "float32", recentre=True)
    assert torch.allclose(o_re.double(), ref, atol=1e-4)
    o_tb, bad = ch.chunked_attention(q, k, v, lg, 16, "float32")
    ok = ~bad.any(1)                                             # (B, H) sequences and heads with no failure
    assert ok.any()
    assert torch.allclose(o_tb.double().permute(0, 2, 1, 3)[ok], ref.permute(0, 2, 1, 3)[ok], atol=1e-4)


def test_bad_input():
    q, k, v = ch.unit_qkv(1, 32, 1, 2, 2)
    lg = -torch.rand(1, 32, 1)
    with pytest.raises(ValueError, match="chunk"):
        ch.chunked_attention(q, k, v, lg, 24)
    with pytest.raises(ValueError, match="<= 0"):
        ch.chunked_attention(q, k, v, -lg, 16)
    with pytest.raises(ValueError, match="dtype"):
        ch.chunked_attention(q, k, v, lg, 16, "float64")
    with pytest.raises(ValueError, match="multiples"):
        ch.dependent_tail(np.ones((2, 64)), 10.0, (12,), block=8)
    with pytest.raises(ValueError, match="theta"):
        ch.iid_tail(np.ones((2, 64)), -1.0, (16,))
    with pytest.raises(ValueError, match="exceeds"):
        ch.chunk_sums(np.ones((1, 8, 1)), 16)
    with pytest.raises(ValueError, match=r"\(S, T, H\)"):
        ch.increments(np.zeros((4, 4)))


def _z(pred, err, r):
    """(pred - measured) / SE: the measured SE floored at the binomial SE under the prediction."""
    var = err ** 2 + max(r.se ** 2, pred * (1 - pred) / r.chunks)
    return 0.0 if var == 0 else (pred - r.p) / math.sqrt(var)


_op_rates = ch.head_op_rates                                     # {C: Rate} of the op's failing chunks


def test_iid_gates_predicted_rate_matches_the_op():
    """iid logit-normal gates whose chunks fail between C = 16 and 64 (float32 and float16 thresholds): the
    rate predicted from the law (lattice convolution) against the op's measured NaN rate."""
    cases = [(gates.LogitNormalGate(-1.0, 1.0), "float32"), (gates.LogitNormalGate(1.5, 1.0), "float16")]
    chunks = (16, 32, 64)
    zc = bonferroni_z(len(cases) * len(chunks))
    rng = np.random.default_rng(3)
    informative = 0
    for gate, dt in cases:
        t = ch.law_tail(gate, ch.exp_limits(dt).overflow, chunks)
        x = gate.sample(rng, (48, 1024))
        meas = _op_rates(x, chunks, dt)
        for i, C in enumerate(chunks):
            r = meas[C]
            informative += 0.01 < t.p[i] < 0.99
            assert abs(_z(t.p[i], (t.hi[i] - t.lo[i]) / 2, r)) <= zc, (gate, dt, C, t.p[i], r)
    assert informative >= 2


def test_ar1_gates_need_the_dependence_aware_prediction():
    """AR(1)-logit gates (phi = 0.8): the exact Markov-additive law matches the op's NaN rate, the iid law of
    the same marginal is far off, and the trace-fitted dependence-aware prediction (fit on half the
    sequences) matches the rate measured on the other half, where the trace's iid prediction does not."""
    gate = gates.AR1LogitGate(-0.6, 1.0, 0.8)
    dt, chunks = "float32", (16, 32, 64)
    th = ch.exp_limits(dt).overflow
    truth, err = ch.markov_tail(gate, th, chunks)
    x, _ = gate.sample_paths(np.random.default_rng(4), 64, 1024)
    meas = _op_rates(x, chunks, dt)
    zc = bonferroni_z(3 * len(chunks))
    for i, C in enumerate(chunks):
        assert abs(_z(truth[i], err[i], meas[C])) <= zc, (C, truth[i], meas[C])
    iid = ch.law_tail(gate.marginal, th, chunks)
    assert abs(_z(iid.p[2], 0.0, meas[64])) > 5                 # the iid law misses the correlated tail
    fit, chk = x[0::2], x[1::2]
    held = _op_rates(chk, chunks, dt, seed=1)
    dep, dep_se = ch.jackknife(lambda y: ch.dependent_tail(y, th, chunks, bounds=False).p, fit)
    for i, C in enumerate(chunks):
        assert abs(_z(dep[i], dep_se[i], held[C])) <= zc, (C, dep[i], dep_se[i], held[C])
    assert abs(_z(ch.iid_tail(fit, th, chunks).p[2], 0.0, held[64])) > 5


def test_analyse_and_command(tmp_path, capsys):
    from foxwindow.models.traces import save_trace
    rng = np.random.default_rng(5)
    g1, g2 = gates.LogitNormalGate(-1.0, 1.0), gates.AR1LogitGate(1.0, 1.0, 0.9)
    x = np.stack([g1.sample(rng, (8, 512)), g2.sample_paths(rng, 8, 512)[0]], -1)
    path = tmp_path / "t.npz"
    save_trace(path, {"layer": (-x).astype(np.float32)}, {"heads": 2})
    out = tmp_path / "c.json"
    assert chunks_report.main(["--traces", str(path), "--chunks", "16", "32", "64", "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())                   # the prose is wrapped to 120 columns
    assert "float32" in text and "Recommendation" in text and "law-based prediction" in text
    # the prose's bound is the table's '<' (8 x 512 tokens: 64 chunks of 64, 256 of 16), not the cruder 3/n
    assert "4.6e-02 at C = 64" in text and "1.2e-02 at C = 16" in text and "<4.6e-02" in text
    import json
    res = json.loads(out.read_text())
    assert res["recommendation"]["float32"]["chunk"] == 32     # head 0 fails at C = 64 (P = 0.59), 32 safe
    assert res["recommendation"]["float16"]["chunk"] is None   # re-centre
    assert len(res["heads"]) == 2 * len(ch.DTYPES)
    from foxwindow import outputs
    assert outputs.cli(chunks_report.main, ["--traces", str(path), "--json", str(out)]) == 2   # exists, no --force
    assert outputs.cli(chunks_report.main, ["--traces", str(path), "--chunks", "12"]) == 2
    assert outputs.cli(chunks_report.main, ["--traces", str(path), "--chunks", "16", "32", "16"]) == 2
    assert "--chunks: 16 given more than once" in capsys.readouterr().err
    # chunk sizes in any order: the same safe chunk; many sizes: the table in blocks, every line in 120 columns
    assert chunks_report.main(["--traces", str(path), "--chunks", "64", "16", "32", "--json", str(out),
                               "--force"]) == 0
    text = capsys.readouterr().out
    assert json.loads(out.read_text())["recommendation"]["float32"]["chunk"] == 32
    assert chunks_report.main(["--traces", str(path), "--chunks", *map(str, range(16, 16 * 13, 16))]) == 0
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 120 and text.count("C=16 ") == 1 and "C=192" in text
    head_rows = [line for line in text.splitlines() if line.split()[:2] == ["layer:0", "float32"]]
    assert len(head_rows) == 2 and "pred" in head_rows[0]                  # two blocks of chunk columns
    # figure 9 from that JSON
    sys.path.insert(0, os.path.join(REPO, "figures"))
    import fig9_chunks
    import figstyle
    figstyle.apply()
    paths, summary = fig9_chunks.make(SimpleNamespace(out=str(tmp_path), chunks_json=str(out)))
    assert all(os.path.getsize(p) > 0 for p in paths) and "held-out" in summary


def test_synthetic_table_fits_120_columns(capsys):
    """chunks.py --synthetic: each gate's name on its own line, its rows within 120 columns."""
    r = dict(gate="ar1-logit(mu=-0.6, s=1, phi=0.8)", dtype="bfloat16", chunk=4096, law=1.44e-01, z_law=-10.7,
             measured={"p": 1.42e-01, "se": 1.2e-02}, dep=1.38e-01, dep_se=1.1e-02, iid=1.47e-03,
             held_out={"p": 1.41e-01}, z_dep=-0.1, z_iid=-117.4)
    chunks_report.print_synthetic([r, dict(r, chunk=16), dict(r, gate="logit-normal(mu=1.5, s=1)")])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120, [len(x) for x in lines]
    body = lines[lines.index(r["gate"]):]
    assert body[1].split()[:2] == ["bfloat16", "4096"] and body[2].split()[1] == "16"
    assert body[3] == "logit-normal(mu=1.5, s=1)" and len(body) == 5
