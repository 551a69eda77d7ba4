"""Chunk safety from a gate range alone (`chunks.py --gate-range`, the A_log / dt form): the 16-token, 5.545-nats
float32 threshold, the gate of -2 that overflows at token 45 of a 64-chunk, the forms' predictions against the
textbook chunked op; and the predictions checked chunk by chunk on flash-linear-attention's chunked kernels (GLA,
Gated DeltaNet, KDA with and without safe_gate) under Triton's interpreter on the CPU (skipped without fla)."""
import importlib.util
import json
import math

import numpy as np
import pytest
import torch

from foxwindow.uses import chunks as ch
from foxwindow.uses import chunks_report

HAVE_FLA = importlib.util.find_spec("fla") is not None


def test_range_threshold_16_tokens_5545_nats():
    th = ch.exp_limits("float32").overflow
    assert abs(th / 16 - 5.5452) < 1e-4 and abs(16 * 5.545 - 88.72) < 0.01
    f32, bf16, f16 = ch.range_safety(-5.545, 0.0)
    assert f32.textbook == 16 and f32.textbook_pow2 == 16 and bf16.textbook == 16 and f32.always_fails is None
    assert f16.textbook == 2 and abs(f16.per_token[16] - math.log(2)) < 1e-3      # float16: ln 65520 / 16
    over = ch.range_safety(-5.546, -5.546)[0]
    assert over.textbook == 15 and over.textbook_pow2 == 8 and over.always_fails == 16
    g2 = ch.range_safety(-2.0, 0.0, chunks=(64,))[0]                               # overflows at token 45 of 64
    assert g2.textbook == 44 and abs(g2.per_token[64] - th / 64) < 1e-12
    assert ch.range_safety(0.0, 0.0)[0].textbook is None                            # no decay: unbounded
    # the anchored form (fla 0.6 chunk_kda safe_gate: sub-chunks of 16, shift 15): safe up to (theta + 15) / 15
    lim = (th + 15) / 15
    assert ch.range_safety(-(lim - 1e-6), 0)[0].anchored_safe and not ch.range_safety(-(lim + 1e-6), 0)[0].anchored_safe
    for bad in ((-1.0, -2.0), (-1.0, 0.5), (-math.inf, 0.0)):
        with pytest.raises(ValueError, match="lo <= hi <= 0"):
            ch.range_safety(*bad)


def test_a_log_dt_form():
    lo, hi = ch.decay_range_from_a_log((-5.56, 4.9), dt=(0.001, 0.1))
    assert abs(lo + math.exp(4.9) * 0.1) < 1e-12 and abs(hi + math.exp(-5.56) * 0.001) < 1e-15
    lo2, hi2 = ch.decay_range_from_a_log((0.0, 1.0), dt_raw=(-3.0, 2.0))               # dt = softplus(raw + dt_bias)
    assert abs(lo2 + math.e * math.log1p(math.exp(2.0))) < 1e-12 and abs(hi2 + math.log1p(math.exp(-3.0))) < 1e-12
    lo3, _ = ch.decay_range_from_a_log((0.0, 1.0), dt_raw=(-3.0, 2.0), dt_limit=(0.0, 0.5))   # Mamba-2's clamp
    assert abs(lo3 + math.e * 0.5) < 1e-12
    with pytest.raises(ValueError, match="one of dt"):
        ch.decay_range_from_a_log((0, 1))
    with pytest.raises(ValueError, match=">= 0"):
        ch.decay_range_from_a_log((0, 1), dt=(-1, 1))


def test_first_overflow_matches_the_textbook_op():
    rng = np.random.default_rng(1)
    T, C = 256, 32
    lg = -rng.exponential(2.8, size=(3, T, 2)).astype(np.float32)
    q, k, v = ch.unit_qkv(3, T, 2, 4, 4)
    _, bad = ch.chunked_attention(q, k, v, torch.from_numpy(lg), C, "float32", output=False)
    pred = ch.first_overflow(lg.transpose(0, 2, 1), C)                                  # (B, H, n)
    assert pred.any() and not pred.all()
    assert (pred.transpose(0, 2, 1) == bad.numpy()).all()
    assert not ch.first_overflow(lg.transpose(0, 2, 1), C, form="recentred").any()
    _, bad_r = ch.chunked_attention(q, k, v, torch.from_numpy(lg), C, "float32", recentre=True, output=False)
    assert not bad_r.any()


def test_gate_range_command(tmp_path, capsys):
    js = str(tmp_path / "r.json")
    assert chunks_report.main(["--gate-range", "-5.545", "0", "--json", js]) == 0
    out = capsys.readouterr().out
    assert "float32  88.7228             16    16" in out and "worst case" in out and "C=16 5.545" in out
    assert max(map(len, out.splitlines())) <= 120
    res = json.load(open(js))
    assert [r["textbook"] for r in res["range"]] == [16, 16, 2]
    assert chunks_report.main(["--a-log-range", "-5.56", "4.9", "--dt-range", "0.001", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "log g in [-13.429" in " ".join(out.split()) and max(map(len, out.splitlines())) <= 120  # wrapped prose
    from foxwindow import outputs
    for argv in (["--gate-range", "-1", "-2"], ["--gate-range", "-1", "0", "--a-log-range", "0", "1"],
                 ["--dt-range", "0", "1"], ["--gate-range", "-1", "0", "--synthetic"]):
        with pytest.raises(outputs.UsageError):
            chunks_report.main(argv)


@pytest.mark.skipif(not HAVE_FLA, reason="flash-linear-attention not installed (pip install 'foxwindow[models]')")
def test_fla_kernels_chunk_by_chunk():
    from foxwindow.uses import chunks_fla
    rows = chunks_fla.check(T=256, kernels=("gla", "gated_deltanet", "kda_safe_gate"),
                            cases=("late-burst", "bound-violating"))
    assert len(rows) == 6 and all(r["agree"] for r in rows)
    by = {(r["kernel"], r["case"]): r for r in rows}
    assert by[("kda_safe_gate", "late-burst")]["measured"] == [[0, 0, 1, 1], [0, 0, 0, 0]]
    assert by[("kda_safe_gate", "bound-violating")]["measured"] == [[1, 1, 1, 1], [0, 0, 0, 0]]
    assert not any(any(map(any, r["measured"])) for r in rows if r["form"] == "recentred")
