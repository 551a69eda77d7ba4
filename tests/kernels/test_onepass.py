"""Tests of the one-pass backward (foxwindow/kernels/fox_bwd_onepass.py) against the float64 reference, its
wiring into fox_attention_triton (backward=..., FOX_ONEPASS_BWD) and its pruning.

Inputs, reference and thresholds are test_kernels.py's (relative L2 error on the same rounded
inputs: bf16 out 0.9 u, grads 1.3 u; fp16 likewise; float32 1e-5 / 2e-5, which an accidental tf32
product fails). On a CPU the kernels run in Triton's interpreter with 16-query x 32-key tiles (one
case the other way round), so the short sequences here still cross several blocks of both kinds.
"""
import os
import subprocess
import sys

import pytest
import torch
from test_kernels import (
    CUDA,
    DEV,
    MODERATE,
    NEAR1,
    STRONG,
    _masked_reference,
    _pruned_mask,
    check,
    make,
    reference,
)
from test_kernels import run as run_triton

from foxwindow.kernels import fox_attention_triton
from foxwindow.kernels import fox_bwd_onepass as op

NAMES = ["out", "dq", "dk", "dv", "dlog_fgate"]


def run(q, k, v, log_fgate, do, **kw):
    x = [t.detach().clone().requires_grad_() for t in (q, k, v, log_fgate)]
    o = op.fox_attention_onepass(*x, **kw)
    o.backward(do)
    return [o.detach()] + [t.grad for t in x]


CASES = [  # B, Tq, Tk, H, Hkv, D, dtype, gate
    (1, 1, 1, 2, 2, 16, torch.float32, MODERATE),      # a single token: dq = dk = 0 exactly
    (2, 15, 15, 4, 2, 16, torch.bfloat16, NEAR1),      # GQA 2:1, under one key block
    (1, 63, 63, 2, 2, 64, torch.float16, STRONG),
    (1, 63, 63, 1, 1, 128, torch.float32, STRONG),
    (1, 300, 300, 1, 1, 16, torch.bfloat16, MODERATE),  # many blocks
    (1, 1, 77, 2, 1, 16, torch.bfloat16, MODERATE),    # one query over 77 keys
    (1, 20, 63, 2, 2, 64, torch.bfloat16, NEAR1),      # Tq < Tk, the diagonal off the block grid
    # float32 under very strong forgetting: the gate gradient's row and column sums must cancel
    # (2e-5 threshold; a per-pass rounding of c in the two-pass kernel gave 4e-5 here)
    (1, 300, 300, 2, 2, 32, torch.float32, -10.0),   # as in test_kernels.py
]


@pytest.mark.parametrize("B,Tq,Tk,H,Hkv,D,dtype,gate", CASES)
def test_matches_reference(B, Tq, Tk, H, Hkv, D, dtype, gate):
    args = make(B, Tq, Tk, H, Hkv, D, dtype, gate)
    got = run(*args)
    check(got, reference(*args), dtype)
    for n, g, x in zip(NAMES[1:], got[1:], args[:4]):
        assert g.shape == x.shape and g.dtype == x.dtype, f"{n}: {g.shape} {g.dtype}"


def test_gate_gradient_tq_below_tk_float32():
    """float32, log g ~ -3, Tq 63 < Tk 70, GQA: a case where the two-pass backward's dlog_fgate
    measured 2.6e-5 (over the 2e-5 threshold: its two passes recompute dS separately and the row
    and column sums cancel only to their rounding); the one-pass backward's sums share one dS tile
    (2.7e-6 measured). The threshold is not loosened for either."""
    args = make(1, 63, 70, 2, 1, 16, torch.float32, STRONG, seed=4)
    check(run(*args), reference(*args), torch.float32)


# dq_mode="ordered": the same tiles, dQ summed in place in a fixed order (from the last key
# block down). The interpreter runs programs one after another, so this checks the arithmetic and
# the order (each query block's first contribution stores, later ones add, key block 0 finishes),
# not the spin waits under concurrency, which only a GPU exercises.
@pytest.mark.parametrize("B,Tq,Tk,H,Hkv,D,dtype,gate", [CASES[1], CASES[5], CASES[6]])
def test_ordered_matches_reference(B, Tq, Tk, H, Hkv, D, dtype, gate):
    args = make(B, Tq, Tk, H, Hkv, D, dtype, gate)
    check(run(*args, dq_mode="ordered"), reference(*args), dtype)


@pytest.mark.parametrize("dtype,mode", [(torch.float32, "workspace"), (torch.bfloat16, "workspace"),
                                        (torch.bfloat16, "ordered")])
def test_varlen(dtype, mode):
    # sequences of 1, 16, 0, 63 and 70 tokens packed into one row; GQA 2:1
    cu = torch.tensor([0, 1, 17, 17, 80, 150], dtype=torch.int32, device=DEV)
    args = make(1, 150, 150, 2, 1, 16, dtype, STRONG if dtype == torch.float32 else MODERATE)
    check(run(*args, cu_seqlens=cu, dq_mode=mode), reference(*args, cu_seqlens=cu), dtype)


@pytest.mark.skipif(CUDA, reason="interpreter block shapes; the GPU runs its own configs")
@pytest.mark.parametrize("mode", ["workspace", "ordered"])
def test_query_tiles_wider_than_key_tiles(mode):
    """BLOCK_M > BLOCK_N: several key blocks start their query loop at the same query block, which
    is what the reducer's last-key-block bound (and the ordered mode's count) must get right."""
    args = make(1, 75, 90, 2, 1, 16, torch.bfloat16, MODERATE, seed=4)
    op.set_config((32, 16, 4, 1))
    try:
        got = run(*args, dq_mode=mode)
    finally:
        op.set_config()
    check(got, reference(*args), torch.bfloat16)


def test_deterministic_and_chunking_changes_nothing():
    """Two runs are bitwise equal, and so is a run whose dQ workspace is bounded to one head per
    launch (2 launches here instead of 1). GQA 2:1, so the per-head dk, dv parts are summed too.
    (The ordered mode's determinism is test_ordered_deterministic: on a GPU it is the one that
    spins, and a hang should cost only its own test.)"""
    args = make(1, 50, 50, 2, 1, 16, torch.bfloat16, MODERATE, seed=3)
    a, b = run(*args), run(*args)
    for n, x, y in zip(NAMES, a, b):
        assert torch.equal(x, y), f"{n} differs between two runs"
    q, k, v, log_fgate, do = args
    x = [t.detach().clone().requires_grad_() for t in (q, k, v, log_fgate)]
    o = fox_attention_triton(*x)   # the shipped forward; its saved tensors feed the one-pass backward
    ch, cl, _ = op.kt._gate_words(log_fgate, None)
    ctx = o.grad_fn
    _, _, _, _, o_res, lse, _, _, _, _, _ = ctx.saved_tensors
    n_blocks = -(-50 // op._configs(q.device, 16)[0][1])
    per_head = n_blocks * 50 * (16 + 1) * 4                  # one head's workspace, B = 1
    assert op._heads_per_chunk(1, 2, n_blocks, 50, 16, per_head) == 1
    got = op.fox_bwd_onepass(q, k, v, o.detach(), o_res, do, lse, ch, cl, 16 ** -0.5,
                             workspace_bytes=per_head)
    for n, x, y in zip(NAMES[1:], got, a[1:]):
        assert torch.equal(x, y), f"{n}: chunked workspace changed the result"


def test_ordered_deterministic():
    args = make(1, 50, 50, 2, 1, 16, torch.bfloat16, MODERATE, seed=3)
    a = run(*args)
    c, d = run(*args, dq_mode="ordered"), run(*args, dq_mode="ordered")
    for n, x, y in zip(NAMES, c, d):
        assert torch.equal(x, y), f"ordered: {n} differs between two runs"
    for n, x, y in zip(NAMES[2:4], a[2:4], c[2:4]):     # dk, dv do not depend on the dq mode
        assert torch.equal(x, y), f"{n} depends on dq_mode"


def test_forward_is_the_shipped_one():
    args = make(1, 40, 40, 2, 2, 16, torch.bfloat16, MODERATE, seed=5)
    assert torch.equal(op.fox_attention_onepass(*args[:4]), fox_attention_triton(*args[:4]))


def test_heads_per_chunk():
    per_head = 2 * 64 * 8192 * 129 * 4                     # B2 T8192 D128, 128-key blocks
    assert op._heads_per_chunk(2, 16, 64, 8192, 128, None) == 16
    assert op._heads_per_chunk(2, 16, 64, 8192, 128, 4 * per_head) == 4
    assert op._heads_per_chunk(2, 16, 64, 8192, 128, 4 * per_head - 1) == 3
    assert op._heads_per_chunk(2, 16, 64, 8192, 128, 1) == 1      # one head is the floor
    assert op._heads_per_chunk(2, 16, 64, 8192, 128, 10 ** 15) == 16


def test_bad_inputs():
    q, k, v, log_fgate, do = make(1, 8, 8, 2, 2, 16, torch.float32, MODERATE)
    with pytest.raises(NotImplementedError, match="causal=False"):
        op.fox_attention_onepass(q, k, v, log_fgate, causal=False)
    with pytest.raises(ValueError, match="seqlen_q"):        # fox_triton's checks, shared
        op.fox_attention_onepass(torch.randn(1, 9, 2, 16), k, v, log_fgate)
    with pytest.raises(ValueError, match="sm_scale"):
        op.fox_attention_onepass(q, k, v, log_fgate, sm_scale=-1.0)
    with pytest.raises(ValueError, match="dq_mode"):
        op.fox_attention_onepass(q, k, v, log_fgate, dq_mode="atomic")
    with pytest.raises(ValueError, match="power-of-two"):
        op.set_config((24, 32, 4, 1))
    with pytest.raises(ValueError, match="max_seqlen"):
        cu = torch.tensor([0, 8], dtype=torch.int32)
        op.fox_bwd_onepass(q, k, v, q, None, do, torch.zeros(1, 2, 8), torch.zeros(1, 2, 8),
                           torch.zeros(1, 2, 8), 0.25, cu_seqlens=cu)
    with pytest.raises(ValueError, match="do must be contiguous"):
        op.fox_bwd_onepass(q, k, v, q, None, do.transpose(1, 2).contiguous().transpose(1, 2),
                           torch.zeros(1, 2, 8), torch.zeros(1, 2, 8), torch.zeros(1, 2, 8), 0.25)


def test_hopper_config_compiles_without_loop_spills():
    """The shipped sm_90 config at D = 128 (ahead-of-time compile with the ptxas Triton ships; no
    GPU): fits in shared memory, uses wgmma, no spill inside a loop. dq_mode="ordered" with the
    same config: fits, wgmma, and its query loop is still software-pipelined (cp.async), which is
    what its inline-PTX wait is for (a Triton while loop and CTA barriers there lose it)."""
    import json
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}    # a real compile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import json; from foxwindow.kernels import fox_bwd_onepass as op, resources; "
            "print(json.dumps([resources.onepass_reading(128, op.HOPPER[128], ordered=o) for o in (False, True)]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    if "not found" in p.stderr and "cuobjdump" in p.stderr:
        pytest.skip("Triton's NVIDIA backend has no cuobjdump here")
    assert p.returncode == 0, p.stderr[-2000:]
    plain, ordered = json.loads(p.stdout.strip().splitlines()[-1])
    for r in (plain, ordered):
        assert "error" not in r, r
        assert r["fits"], r
        assert r["hgmma"] > 0 and not r["wgmma_serialized"], f"no (or serialized) wgmma: {r}"
        assert r["loop_ops"]["LDGSTS"] > 0, f"query loop not pipelined: {r}"
    assert plain["loop_spill"] == 0, f"spills inside the loops: {plain}"


# ---------------------------------------------------------------------------------------------
# wiring: fox_attention_triton(backward=...) and FOX_ONEPASS_BWD
# ---------------------------------------------------------------------------------------------

def test_wired_into_fox_attention_triton(monkeypatch):
    """backward="one_pass" and FOX_ONEPASS_BWD=1 both run fox_bwd_onepass (counted), with the same
    bits; the keyword wins over the variable; "two_pass" and FOX_ONEPASS_BWD=0 never call it."""
    from foxwindow.kernels import fox_triton as kt
    calls = []
    real = op.fox_bwd_onepass
    monkeypatch.setattr(op, "fox_bwd_onepass", lambda *a, **kw: calls.append(kw["dq_mode"]) or real(*a, **kw))
    args = make(1, 40, 40, 2, 1, 16, torch.bfloat16, MODERATE, seed=11)

    def grads(**kw):
        x = [t.detach().clone().requires_grad_() for t in args[:4]]
        kt.fox_attention_triton(*x, **kw).backward(args[4])
        return [t.grad for t in x]
    monkeypatch.delenv("FOX_ONEPASS_BWD", raising=False)
    two = grads()
    assert calls == []
    by_kw = grads(backward="one_pass")
    ordered = grads(backward="one_pass_ordered")
    assert calls == ["workspace", "ordered"]
    monkeypatch.setenv("FOX_ONEPASS_BWD", "1")
    by_env = grads()
    assert calls[-1] == "workspace"
    assert all(torch.equal(a, b) for a, b in zip(by_kw, by_env))
    n = len(calls)
    assert all(torch.equal(a, b) for a, b in zip(two, grads(backward="two_pass")))     # the keyword wins
    monkeypatch.setenv("FOX_ONEPASS_BWD", "0")
    grads()
    assert len(calls) == n
    check([args[0]] + by_kw, [args[0]] + two, torch.bfloat16)          # the two backwards agree
    assert all(torch.equal(a, b) for a, b in zip(by_kw[1:3], ordered[1:3]))      # dk, dv
    assert kt.backward_mode() == "two_pass" and kt.backward_mode("one_pass") == "one_pass"


def test_backward_switch_bad_values(monkeypatch):
    q, k, v, log_fgate, _ = make(1, 8, 8, 2, 2, 16, torch.float32, MODERATE)
    with pytest.raises(ValueError, match="backward must be one of"):
        fox_attention_triton(q, k, v, log_fgate, backward="three_pass")
    with pytest.raises(ValueError, match="backward must be one of"):
        fox_attention_triton(q, k, v, log_fgate, backward=True)
    monkeypatch.setenv("FOX_ONEPASS_BWD", "yes")
    with pytest.raises(ValueError, match="FOX_ONEPASS_BWD must be 0 or 1; got 'yes'"):
        fox_attention_triton(q, k, v, log_fgate)
    with pytest.raises(ValueError, match="key_start, query_end and granule"):
        op.fox_bwd_onepass(q, k, v, q, None, q, torch.zeros(1, 2, 8), torch.zeros(1, 2, 8),
                           torch.zeros(1, 2, 8), 0.25, granule=32)


# ---------------------------------------------------------------------------------------------
# adaptive computation pruning with the one-pass backward
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def small_tiles():
    """The interpreter's tiles for both backwards on any device: pruning granule 32 (test_kernels)."""
    from foxwindow.kernels.fox_triton import _INTERP, set_config
    set_config(**_INTERP)
    op.set_config(op._INTERP)
    yield
    set_config()
    op.set_config()


@pytest.mark.parametrize("mode,B,Tq,Tk,H,Hkv,D,dtype,gate,thr", [
    ("workspace", 1, 150, 150, 2, 1, 32, torch.float32, STRONG, "auto"),   # GQA; the guaranteed-mass rule
    ("workspace", 2, 100, 130, 2, 2, 32, torch.float32, MODERATE, -3.0),   # Tq < Tk; a threshold
    ("ordered", 2, 100, 130, 2, 2, 32, torch.float32, MODERATE, -3.0),
    ("ordered", 1, 150, 150, 1, 1, 80, torch.bfloat16, MODERATE, -2.0),    # padded to 128
])
def test_pruning_matches_masked_reference(small_tiles, mode, B, Tq, Tk, H, Hkv, D, dtype, gate, thr):
    """Pruned forward, one-pass backward: output and all four gradients are those of attention without
    exactly the rule's pairs (float64), within the dense thresholds, in both dq modes."""
    from foxwindow.kernels.fox_triton import acp_plan
    q, k, v, log_fgate, do = make(B, Tq, Tk, H, Hkv, D, dtype, gate, seed=6)
    plan = acp_plan(q, k, log_fgate, adaptive_threshold=thr, tol=1e-3)
    assert plan.granule == 32 and 0.2 < plan.pruned_fraction < 0.95       # it prunes, not everything
    skip = _pruned_mask(log_fgate.cpu(), Tq, plan.granule, plan.threshold)
    got = run(q, k, v, log_fgate, do, dq_mode=mode, adaptive_threshold=thr, tol=1e-3)
    check([g.cpu() for g in got], _masked_reference(q, k, v, log_fgate, do, skip), dtype)


def test_pruning_varlen_equals_two_pass(small_tiles):
    """Packed sequences, pruned: the one-pass gradients equal the two-pass ones (float32 rounding)."""
    cu = torch.tensor([0, 1, 17, 17, 80, 150], dtype=torch.int32, device=DEV)
    args = make(1, 150, 150, 2, 1, 16, torch.float32, STRONG)
    one = run(*args, cu_seqlens=cu, adaptive_threshold=-2.0)
    two = run_triton(*args, cu_seqlens=cu, adaptive_threshold=-2.0, backward="two_pass")
    check(one, two, torch.float32)
    assert torch.equal(one[0], two[0])                              # the same forward


def test_pruning_granule_guard(small_tiles):
    """A one-pass config with tiles wider than the forward's granule would visit other pairs than
    the forward: it raises, naming the granule."""
    x = [t.detach().requires_grad_() for t in make(1, 40, 40, 1, 1, 32, torch.float32, STRONG)[:4]]
    o = fox_attention_triton(*x, adaptive_threshold=-2.0, backward="one_pass")
    op.set_config((16, 64, 4, 1))
    with pytest.raises(RuntimeError, match="pruning granule 32"):
        o.sum().backward()


def test_shipped_tiles_fit_the_pruning_granule():
    """On every GPU table the one-pass tiles lie inside the granule the forward's plan uses (the
    largest tile side of fox_triton's three configs), so pruning never meets the guard above."""
    from foxwindow.kernels import fox_triton as kt
    for tables, ours in ((kt.HOPPER, op.HOPPER), (kt.AMPERE, op.AMPERE), (kt.NEWER, op.AMPERE)):
        for D, cfg in tables.items():
            G = max(max(c[:2]) for c in cfg.values())
            assert max(ours[D][:2]) <= G, (D, ours[D], G)
    assert max(op.SAFE[:2]) <= max(max(c[:2]) for c in kt.SAFE.values())
    assert max(op._INTERP[:2]) <= max(max(c[:2]) for c in kt._INTERP.values())
