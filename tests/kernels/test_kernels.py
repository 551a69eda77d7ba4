"""Tests of the fused FoX kernel against a float64 reference: output and all four gradients.

On a CPU the kernels run in Triton's interpreter (the root conftest sets TRITON_INTERPRET=1), so
shapes stay small; the full-size checks run only on a GPU.

Thresholds (relative L2 error against float64 on the same, already-rounded inputs), from the
unit roundoff u of the storage type: u = 2^-8 for bf16, 2^-11 for fp16.
  - out: rounding the exact output to the storage type alone costs ~0.4 u (measured 1.6e-3 in
    bf16); P is rounded once more before the P V product, ~0.25 u. A correct kernel lands at
    0.45-0.5 u (bf16 1.8e-3, fp16 2.3e-4, as docs/ANCHORS.md section 7's 2e-3). Threshold 0.9 u: below what one
    systematic slip costs (truncating instead of rounding to nearest gave 4.1e-3 = 1.05 u).
  - dq, dk, dv, dlog_fgate: two more rounded operands (dS, and dq/dk/dv are stored in the
    storage type): measured 0.55-0.75 u (bf16 2.1e-3 to 2.9e-3). Threshold 1.3 u (bf16 5.1e-3);
    the truncation slip gave 1.7 u.
  - float32 inputs use true float32 products (not tf32): measured 1e-7 to 4e-6 (dlog_fgate, a
    suffix sum of terms that cancel, is the largest). Threshold 1e-5 / 2e-5: far above float32
    rounding, far below tf32 (~3e-4), so an accidental tf32 product fails.
"""

import pytest
import torch

from foxwindow.kernels import fox_attention_triton
from foxwindow.models.attention import forgetting_attention_reference

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
U = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def tols(dtype):
    if dtype == torch.float32:
        return 1e-5, 2e-5
    return 0.9 * U[dtype], 1.3 * U[dtype]


def rel(a, b):
    a, b = a.double(), b.double()
    nb = b.norm().item()
    if nb == 0.0:       # e.g. T = 1: dq = dk = 0 exactly
        return a.norm().item()
    return (a - b).norm().item() / nb


def make(B, Tq, Tk, H, Hkv, D, dtype, gate, seed=0):
    """Random inputs: q, k, v ~ N(0, 1); log g = gate * U(0.5, 1.5) (all <= 0); a dO."""
    g = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=g).to(dtype).to(DEV)

    q, k, v = r(B, Tq, H, D), r(B, Tk, Hkv, D), r(B, Tk, Hkv, D)
    log_fgate = (gate * (0.5 + torch.rand(B, Tk, H, generator=g))).to(DEV)
    return q, k, v, log_fgate, r(B, Tq, H, D)


def reference(q, k, v, log_fgate, do, sm_scale=None, cu_seqlens=None):
    """Output and gradients in float64, per packed sequence when cu_seqlens is given."""
    x = [t.detach().double().requires_grad_() for t in (q, k, v, log_fgate)]
    if cu_seqlens is None:
        o = forgetting_attention_reference(*x, sm_scale=sm_scale)
    else:
        cu = cu_seqlens.tolist()
        o = torch.cat([forgetting_attention_reference(*(t[:, a:b] for t in x), sm_scale=sm_scale)
                       for a, b in zip(cu, cu[1:]) if b > a], dim=1)
    o.backward(do.double())
    return [o.detach()] + [t.grad for t in x]


def run(q, k, v, log_fgate, do, **kw):
    x = [t.detach().clone().requires_grad_() for t in (q, k, v, log_fgate)]
    o = fox_attention_triton(*x, **kw)
    o.backward(do)
    return [o.detach()] + [t.grad for t in x]


def check(got, want, dtype):
    t_out, t_grad = tols(dtype)
    names = ["out", "dq", "dk", "dv", "dlog_fgate"]
    errs = {n: rel(g, w) for n, g, w in zip(names, got, want)}
    for n, g in zip(names, got):
        assert torch.isfinite(g).all(), f"{n} has non-finite values"
    assert got[0].dtype == dtype and got[4].dtype == torch.float32
    bad = {n: e for n, e in errs.items() if not e <= (t_out if n == "out" else t_grad)}
    assert not bad, f"errors {errs} over thresholds ({t_out:.1e}, {t_grad:.1e})"
    return errs


NEAR1, MODERATE, STRONG = -0.01, -0.3, -3.0

CASES = [  # B, Tq, Tk, H, Hkv, D, dtype, gate
    (1, 1, 1, 2, 2, 32, torch.float32, MODERATE),      # a single token
    (2, 15, 15, 4, 2, 32, torch.bfloat16, NEAR1),      # GQA, under one block
    (1, 63, 63, 2, 2, 64, torch.float16, STRONG),
    (1, 300, 300, 2, 1, 32, torch.bfloat16, MODERATE),  # GQA 2:1, many blocks
    (1, 100, 100, 2, 2, 128, torch.float32, STRONG),
    (1, 1, 77, 2, 1, 32, torch.bfloat16, MODERATE),    # one query (decoding) over 77 keys
    (1, 20, 63, 2, 2, 64, torch.bfloat16, NEAR1),      # Tq < Tk, off-block offset
    (1, 40, 40, 1, 1, 256, torch.bfloat16, MODERATE),  # the widest head
    # float32 under very strong forgetting: the gate gradient needs the dQ and dK/dV passes to
    # compute the same dS (a per-pass rounding of c put it at 4e-5, over the 2e-5 threshold)
    (1, 300, 300, 2, 2, 32, torch.float32, -10.0),
]


@pytest.mark.parametrize("B,Tq,Tk,H,Hkv,D,dtype,gate", CASES)
def test_matches_reference(B, Tq, Tk, H, Hkv, D, dtype, gate):
    args = make(B, Tq, Tk, H, Hkv, D, dtype, gate)
    check(run(*args), reference(*args), dtype)


@pytest.mark.parametrize("B,Tq,Tk,H,Hkv,D,dtype,gate", [
    (1, 63, 63, 2, 1, 80, torch.float32, MODERATE),    # runs at 128; GQA
    (2, 15, 15, 2, 2, 48, torch.bfloat16, STRONG),     # runs at 64
    (1, 20, 30, 1, 1, 5, torch.float32, NEAR1),        # runs at 16; Tq < Tk
])
def test_padded_head_dims(B, Tq, Tk, H, Hkv, D, dtype, gate):
    """Head dims that are not 16..256 powers of two run zero-padded, with sm_scale from the true D."""
    args = make(B, Tq, Tk, H, Hkv, D, dtype, gate, seed=5)
    got = run(*args)
    assert got[0].shape == (B, Tq, H, D) and got[1].shape == (B, Tq, H, D) and got[2].shape == (B, Tk, Hkv, D)
    check(got, reference(*args), dtype)


def test_fallback_reason(monkeypatch):
    """On CUDA (mocked: no GPU here) the kernel takes what it supports and names what it does not;
    forgetting_attention then runs the reference with one warning per reason instead of raising."""
    import warnings

    from foxwindow.kernels import fox_triton as kt
    from foxwindow.models import attention as fox_attention
    q, k, v, log_fgate, _ = make(1, 8, 8, 2, 2, 32, torch.float32, MODERATE)
    assert "runs on CUDA" in kt.fallback_reason(q, k, v, log_fgate) or CUDA
    monkeypatch.setattr(kt, "_on_cuda", lambda t: True)
    assert kt.fallback_reason(q, k, v, log_fgate) is None
    assert kt.fallback_reason(q[..., :20], k[..., :20], v[..., :20], log_fgate) is None    # padded
    assert "causal=False" in kt.fallback_reason(q, k, v, log_fgate, causal=False)
    d = [t.double() for t in (q, k, v)]
    assert "float32" in kt.fallback_reason(*d, log_fgate)
    assert "log_fgate must be float32" in kt.fallback_reason(q, k, v, log_fgate.double())
    wide = [torch.randn(1, 8, 2, 320) for _ in range(3)]
    assert "head dim" in kt.fallback_reason(*wide, log_fgate)

    monkeypatch.setattr(fox_attention, "_on_cuda", lambda t: True)
    monkeypatch.setattr(fox_attention, "_warned_fallback", set())
    want = forgetting_attention_reference(*d, log_fgate)
    with pytest.warns(UserWarning, match="not used .*float32.*PyTorch reference"):
        got = fox_attention.forgetting_attention(*d, log_fgate)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the same reason warns once
        fox_attention.forgetting_attention(*d, log_fgate)
    called = []
    monkeypatch.setattr(kt, "fox_attention_triton", lambda *a, **kw: called.append(1) or "kernel")
    assert fox_attention.forgetting_attention(q, k, v, log_fgate) == "kernel" and called


@pytest.mark.skipif(CUDA, reason="interpreter block shapes; the GPU runs its own configs")
def test_other_block_shapes():
    """The opposite tile orientation to the default (BLOCK_N > BLOCK_M in the forward and dQ)."""
    from foxwindow.kernels.fox_triton import set_config
    args = make(1, 75, 90, 4, 2, 32, torch.bfloat16, MODERATE, seed=4)
    set_config(fwd=(16, 32, 4, 1), dkdv=(32, 16, 4, 1), dq=(16, 32, 4, 1))
    try:
        got = run(*args)
    finally:
        set_config()
    check(got, reference(*args), torch.bfloat16)


def test_sm_scale():
    args = make(1, 40, 40, 2, 2, 32, torch.float32, MODERATE, seed=1)
    check(run(*args, sm_scale=0.5), reference(*args, sm_scale=0.5), torch.float32)


def test_large_cumulative_gate():
    """|c| ~ 3e4 from one huge early gate: c held as one float32 word would cost ~6e-4 here."""
    q, k, v, log_fgate, do = make(1, 100, 100, 2, 2, 32, torch.float32, MODERATE, seed=2)
    log_fgate[:, 0] = -3e4
    check(run(q, k, v, log_fgate, do), reference(q, k, v, log_fgate, do), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen(dtype):
    # sequences of 1, 16, 0, 63 and 70 tokens packed into one row; GQA 2:1
    cu = torch.tensor([0, 1, 17, 17, 80, 150], dtype=torch.int32, device=DEV)
    args = make(1, 150, 150, 2, 1, 32, dtype, STRONG if dtype == torch.float32 else MODERATE)
    check(run(*args, cu_seqlens=cu), reference(*args, cu_seqlens=cu), dtype)


def test_deterministic():
    args = make(1, 70, 70, 4, 2, 32, torch.bfloat16, MODERATE, seed=3)
    a, b = run(*args), run(*args)
    for n, x, y in zip(["out", "dq", "dk", "dv", "dlog_fgate"], a, b):
        assert torch.equal(x, y), f"{n} differs between two runs"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_words_past_the_end_stay_hidden(monkeypatch, dtype):
    """The diagonal tiles load gate words (and the dQ pass lse) of whole tiles without masks, past
    Tk and Tq: what lies there is the next head's words, or fox_triton._padded_words' tail. Filled
    with -1e30 instead of zeros (a key there would weigh 2^1e30 if any real row saw it), the results
    still match float64: the causal mask hides those keys, and rows past Tq are never stored."""
    from foxwindow.kernels import fox_triton as kt
    plain = kt._padded_words

    def poisoned(shape, device):
        w = plain(shape, device)
        n = w.numel()
        torch.as_strided(w, (n + kt.WORD_PAD,), (1,))[n:] = -1e30     # the tail only
        return w
    monkeypatch.setattr(kt, "_padded_words", poisoned)
    w = kt._padded_words((1, 2, 3), "cpu")
    assert w.untyped_storage().nbytes() == 4 * (6 + kt.WORD_PAD) and (w == 0).all()
    args = make(1, 37, 37, 2, 2, 32, dtype, STRONG if dtype == torch.float32 else MODERATE, seed=5)
    check(run(*args), reference(*args), dtype)


def test_dkdv_square_same_gradients(monkeypatch):
    """The dK/dV pass compiled for Tq == Tk (fox_triton.DKDV_SQUARE, the form Triton 3.6 gets) gives
    the same gradients bit for bit as the general one."""
    from foxwindow.kernels import fox_triton as kt
    args = make(1, 70, 70, 2, 1, 32, torch.float32, STRONG, seed=6)
    got = {}
    for square in (False, True):
        monkeypatch.setattr(kt, "DKDV_SQUARE", square)
        got[square] = run(*args)
    for n, x, y in zip(["out", "dq", "dk", "dv", "dlog_fgate"], got[False], got[True]):
        assert torch.equal(x, y), f"{n} differs with SQUARE"


def _bad(**over):
    q, k, v, log_fgate, _ = make(1, 8, 8, 2, 2, 32, torch.float32, MODERATE)
    x = dict(q=q, k=k, v=v, log_fgate=log_fgate)
    kw = {n: over.pop(n) for n in ("cu_seqlens", "causal") if n in over}
    x.update(over)
    return lambda: fox_attention_triton(x["q"], x["k"], x["v"], x["log_fgate"], **kw)


@pytest.mark.parametrize("over,word", [
    (dict(q=torch.randn(8, 2, 32)), "4-D"),
    (dict(v=torch.randn(1, 8, 2, 16)), "same shape"),
    (dict(q=torch.randn(1, 9, 2, 32)), "seqlen_q"),
    (dict(q=torch.randn(1, 8, 3, 32)), "multiple"),
    (dict(q=torch.randn(1, 8, 2, 288), k=torch.randn(1, 8, 2, 288), v=torch.randn(1, 8, 2, 288)), "head dim"),
    (dict(log_fgate=torch.zeros(1, 8, 3)), "log_fgate must be"),
    (dict(log_fgate=torch.zeros(1, 8, 2, dtype=torch.float64)), "float32"),
    (dict(q=torch.randn(1, 8, 2, 32, dtype=torch.float64)), "bfloat16, float16 or float32"),
    (dict(q=torch.randn(1, 8, 2, 32).half()), "share one dtype"),
    (dict(cu_seqlens=torch.tensor([0, 8])), "int32"),
    (dict(cu_seqlens=torch.tensor([0, 5, 7], dtype=torch.int32)), "rise from 0"),
    (dict(cu_seqlens=torch.tensor([0, 6, 5, 8], dtype=torch.int32)), "rise from 0"),
])
def test_bad_inputs(over, word):
    over = {n: t.to(DEV) if torch.is_tensor(t) else t for n, t in over.items()}
    with pytest.raises(ValueError, match=word):
        _bad(**over)()


def test_bad_scale_and_types():
    q, k, v, log_fgate, _ = make(1, 8, 8, 2, 2, 32, torch.float32, MODERATE)
    with pytest.raises(ValueError, match="sm_scale"):
        fox_attention_triton(q, k, v, log_fgate, sm_scale=float("nan"))
    with pytest.raises(ValueError, match="torch.Tensor"):
        _bad(q=[[1.0]])()


def test_not_causal():
    with pytest.raises(NotImplementedError, match="causal=False"):
        _bad(causal=False)()


@pytest.mark.skipif(not CUDA, reason="full-size shapes need a GPU")
@pytest.mark.parametrize("B,Tq,Tk,H,Hkv,D,dtype,gate", [
    (2, 777, 777, 4, 4, 128, torch.bfloat16, -0.05),   # the docs/ANCHORS.md section 7 accuracy shape
    (2, 777, 777, 4, 4, 128, torch.float16, STRONG),
    (1, 777, 777, 8, 2, 64, torch.bfloat16, NEAR1),
    (1, 500, 1030, 4, 1, 128, torch.bfloat16, MODERATE),
    (2, 777, 777, 4, 4, 256, torch.bfloat16, MODERATE),
    (2, 1025, 1025, 2, 2, 32, torch.bfloat16, STRONG),
])
def test_gpu_full_size(B, Tq, Tk, H, Hkv, D, dtype, gate):
    args = make(B, Tq, Tk, H, Hkv, D, dtype, gate)
    check(run(*args), reference(*args), dtype)


@pytest.mark.skipif(not CUDA, reason="needs a GPU")
def test_gpu_varlen_full_size():
    cu = torch.tensor([0, 1, 300, 301, 1024, 2000], dtype=torch.int32, device=DEV)
    args = make(1, 2000, 2000, 4, 2, 128, torch.bfloat16, MODERATE)
    check(run(*args, cu_seqlens=cu), reference(*args, cu_seqlens=cu), torch.bfloat16)


# What the shipped Hopper configs compile to (sm_90, ahead of time with the ptxas Triton ships; no
# GPU needed): they must fit in shared memory, use the warpgroup matrix instructions (the D = 256
# dK/dV tiles excepted, see fox_triton.HOPPER), keep every spill out of the loops, and keep the
# wgmma instructions pipelined: no C7515 advisory from ptxas and fewer waits than HGMMA. Before v4
# the D = 256 dK/dV config and GQA dK/dV at D = 128 spilled 37 loads/stores an iteration; before
# v6 every forward was serialised (24 waits for 24 HGMMA at D = 128).
# every kernel and head dim without GQA; dK/dV with GQA (its group loop is what spilled); at D = 128 packed
# sequences with pruning compiled in, and the one-pass backward with pruning. One case a compile (some seconds
# each), so that a failure names its build.
HOPPER_BUILDS = {**{f"every kernel, D {d}": (["--d", str(d)], 3) for d in (64, 128, 256)},
                 "dK/dV with GQA, D 128": (["--d", "128", "--group", "2"], 3),
                 "packed, pruned and one-pass, D 128": (["--d", "128", "--variants"], 3 + 4)}


@pytest.mark.parametrize("build", list(HOPPER_BUILDS))
def test_hopper_configs_compile_without_loop_spills(tmp_path, build):
    import json
    import os
    import subprocess
    import sys

    from foxwindow.kernels import resources
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # a real compile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    extra, n_rows = HOPPER_BUILDS[build]
    out = tmp_path / "res.json"
    p = subprocess.run([sys.executable, "foxwindow/kernels/resources.py", *extra, "--json", str(out)],
                       cwd=root, env=env, capture_output=True, text=True)
    if "cuobjdump not found" in p.stderr:
        pytest.skip("Triton's NVIDIA backend has no cuobjdump here")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == n_rows
    if "--variants" in extra:
        assert {r["kernel"] for r in rows[-4:]} == {"fwd+vl+acp", "dkdv+vl+acp", "dq+vl+acp", "onepass+acp"}
    for r in rows:
        assert "error" not in r, r
        assert r["fits"], r
        assert r["hgmma"] > 0 or (r["D"], r["kernel"]) == (256, "dkdv"), f"no wgmma instructions: {r}"
        assert r["loop_spill"] == 0, f"spills inside the loops: {r}"
        assert not r["serialized"], f"ptxas serialised the wgmma instructions: {r}"
        assert r["hgmma"] == 0 or r["wg_waits"] < r["hgmma"], f"one wait per wgmma: {r}"
        assert len(r["ins_per_score"]) == len(r["loop_sizes"]) > 0
    # instructions a score (docs/KERNEL.md) at D 64 and 128: every loop, below the diagonal and on it,
    # at or below the official FoX kernel's single loop as read by resources.py on Triton 3.6 and 3.9
    # (the lower of the two readings; test_fewer_instructions_per_score_than_the_official_kernel
    # compiles it where it is at hand). The last to come under it: the dQ pass's diagonal loop at D 128
    # on Triton >= 3.7 (0.481 with 128 x 64 tiles, 0.415 with dq_diag_n's 128 x 128 one; 3.6 0.459)
    official = {("fwd", 64): 0.471, ("fwd", 128): 0.454, ("dkdv", 64): 0.632, ("dkdv", 128): 0.778,
                ("dq", 64): 0.425, ("dq", 128): 0.466}
    if build in ("every kernel, D 64", "every kernel, D 128"):
        checked = 0
        for r in rows:
            loops = dict(zip(resources.LOOP_ROLES[r["kernel"]], r["ins_per_score"]))
            for role, x in loops.items():
                assert x <= official[(r["kernel"], r["D"])], (role, r)
                checked += 1
        assert checked == 6


@pytest.mark.skipif(CUDA, reason="an ahead-of-time reading; the GPU times the kernels instead")
def test_fewer_instructions_per_score_than_the_official_kernel(tmp_path):
    """Each inner loop that does the bulk of the work (below the diagonal: our first forward
    loop, the second dK/dV loop, the first dQ loop; the official kernel has one loop per kernel)
    issues fewer instructions per score than the official kernel's at D = 128 and 64, both
    compiled here for sm_90 with their shipped configs, and every diagonal loop no more.
    Needs the official op:
    .official/ or FOX_OFFICIAL_KERNEL (foxwindow/kernels/prepare_gpu.sh)."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("FOX_OFFICIAL_KERNEL") or os.path.join(root, ".official")
    if not os.path.exists(path):
        pytest.skip("no official kernel (.official/ or FOX_OFFICIAL_KERNEL; foxwindow/kernels/prepare_gpu.sh)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # a real compile
    out = tmp_path / "res.json"
    p = subprocess.run([sys.executable, "foxwindow/kernels/resources.py", "--d", "64,128", "--per-score",
                        "--official", path, "--json", str(out)], cwd=root, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    ours = {(r["kernel"], r["D"]): r for r in rows if r.get("impl") != "official"}
    off = [r for r in rows if r.get("impl") == "official"]
    assert len(off) == 6
    ours_loop = dict(fwd=0, dkdv=1, dq=0)
    diagonal = dict(fwd=1, dkdv=0, dq=1)
    for r in off:
        assert "error" not in r, r
        mine = ours[(r["kernel"], r["D"])]
        assert mine["ins_per_score"][ours_loop[r["kernel"]]] < r["ins_per_score"][0], (mine, r)
        assert mine["ins_per_score"][diagonal[r["kernel"]]] <= r["ins_per_score"][0], (mine, r)


def test_sweep_candidates_parse():
    from foxwindow.kernels import bench
    from foxwindow.kernels.fox_triton import SWEEP_CANDIDATES, set_config
    for D, cfgs in SWEEP_CANDIDATES.items():
        assert cfgs[0] == "" and D in (16, 32, 64, 128, 256)
        for c in cfgs:
            set_config(**bench.parse_config(c))       # raises on an unknown kernel or a bad tile
    set_config()


def test_launch_steps_down_when_out_of_resources():
    """A GPU with less shared memory than a config needs gets the next smaller config, and the
    choice is remembered; only when the smallest fails too does the error reach the caller."""
    import triton

    from foxwindow.kernels import fox_triton as kt

    class Kernel:           # stands in for a Triton kernel; "fits" only tiles up to `largest`
        def __init__(self, largest):
            self.largest, self.tried = largest, []

        def __getitem__(self, grid):
            def launch(*args, BLOCK_M, BLOCK_N, **kw):
                self.tried.append((BLOCK_M, BLOCK_N))
                if BLOCK_M * BLOCK_N > self.largest:
                    raise triton.runtime.errors.OutOfResources(BLOCK_M * BLOCK_N * 512, 65536, "shared memory")
            return launch

    dev, key = torch.device("cpu"), ("fwd", "cpu", 256, torch.bfloat16)
    kt._FALLBACK.pop(key, None)
    try:
        k = Kernel(16 * 16)
        kt._launch("fwd", k, 100, 1, dev, 256, torch.bfloat16, lambda bn: (), {})
        assert k.tried == [kt._INTERP["fwd"][:2], kt.SAFE["fwd"][:2], kt._TINY["fwd"][:2]]
        assert kt._FALLBACK[key] == 2
        k = Kernel(16 * 16)
        kt._launch("fwd", k, 100, 1, dev, 256, torch.bfloat16, (), {})
        assert k.tried == [kt._TINY["fwd"][:2]]                  # remembered: no retries
        with pytest.raises(triton.runtime.errors.OutOfResources):
            kt._launch("fwd", Kernel(0), 100, 1, dev, 256, torch.bfloat16, (), {})
    finally:
        kt._FALLBACK.pop(key, None)


# ---------------------------------------------------------------------------------------------
# adaptive computation pruning
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def small_tiles():
    """The interpreter's tiles on any device, so that the pruning granule is 32 everywhere and the
    short test sequences span many granules (on a GPU the shipped tiles would make it 128)."""
    from foxwindow.kernels.fox_triton import _INTERP, set_config
    set_config(**_INTERP)
    yield
    set_config()


def _pruned_mask(log_fgate, Tq, G, delta):
    """The pruning rule computed independently, pair by pair: (B, H, Tq, Tk) bool, True where
    query i skips key j: j's granule ends before i's granule starts, and the decay between them,
    c at the query granule's first position minus c at the key granule's last key, is below
    delta (B, H). Cumsum in float64, no prefix or monotonicity argument."""
    B, Tk, H = log_fgate.shape
    off = Tk - Tq
    c = torch.cumsum(log_fgate.double(), 1).transpose(1, 2)               # (B, H, Tk)
    i0 = off + (torch.arange(Tq) // G) * G                                 # (Tq,)
    jmax = torch.clamp((torch.arange(Tk) // G) * G + G - 1, max=Tk - 1)    # (Tk,)
    decay = c[..., i0][..., :, None] - c[..., jmax][..., None, :]
    return (jmax[None, :] < i0[:, None]) & (decay < delta[..., None, None].cpu())


def _masked_reference(q, k, v, log_fgate, do, skip):
    """Float64 forgetting attention with the `skip` pairs removed, and its gradients."""
    x = [t.detach().double().cpu().requires_grad_() for t in (q, k, v, log_fgate)]
    qq, kk, vv, lg = x
    B, Tq, H, D = qq.shape
    Tk, Hkv = kk.shape[1], kk.shape[2]
    kk, vv = (t.repeat_interleave(H // Hkv, 2) for t in (kk, vv))
    c = torch.cumsum(lg, 1).transpose(1, 2)                                 # (B, H, Tk)
    s = torch.einsum("bihd,bjhd->bhij", qq, kk) * D ** -0.5 + c[..., Tk - Tq:, None] - c[..., None, :]
    allowed = (torch.arange(Tk)[None, :] <= torch.arange(Tq)[:, None] + Tk - Tq) & ~skip
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    o = torch.einsum("bhij,bjhd->bihd", p, vv)
    o.backward(do.double().cpu())
    return [o.detach()] + [t.grad for t in x]


@pytest.mark.parametrize("B,Tq,Tk,H,Hkv,D,dtype,gate,thr", [
    (1, 300, 300, 2, 1, 32, torch.float32, STRONG, "auto"),      # GQA; the guaranteed-mass rule
    (2, 100, 130, 2, 2, 32, torch.float32, MODERATE, -3.0),      # Tq < Tk; a threshold given directly
    (1, 150, 150, 1, 1, 80, torch.bfloat16, MODERATE, -2.0),     # padded to 128: dQ without the peel
])
def test_pruning_matches_masked_reference(small_tiles, B, Tq, Tk, H, Hkv, D, dtype, gate, thr):
    """The pruned kernel computes attention without exactly the pairs of the rule (forward and
    backward), and the plan's pruned fraction is the rule's, counted pair by pair."""
    from foxwindow.kernels.fox_triton import acp_plan
    q, k, v, log_fgate, do = make(B, Tq, Tk, H, Hkv, D, dtype, gate, seed=6)
    plan = acp_plan(q, k, log_fgate, adaptive_threshold=thr, tol=1e-3)
    assert plan.granule == 32
    skip = _pruned_mask(log_fgate.cpu(), Tq, plan.granule, plan.threshold)
    causal = (torch.arange(Tk)[None, :] <= torch.arange(Tq)[:, None] + Tk - Tq).sum().item() * B * H
    assert plan.causal_pairs == causal
    assert plan.pruned_pairs == skip.sum().item()
    assert 0.2 < plan.pruned_fraction < 0.95            # the case prunes, and not everything
    got = run(q, k, v, log_fgate, do, adaptive_threshold=thr, tol=1e-3)
    check([g.cpu() for g in got], _masked_reference(q, k, v, log_fgate, do, skip), dtype)


def test_pruning_error_bound(small_tiles):
    """|o_pruned - o_dense| <= 2 m_i max|v| per row, m_i the dense attention mass on the skipped
    pairs (the pruned output is the kept part renormalised: o_dense = (1 - m) o_kept + m o_skip);
    under "auto" m_i <= tol. A threshold loose enough to make the error visible."""
    from foxwindow.kernels.fox_triton import acp_plan
    q, k, v, log_fgate, do = make(1, 200, 200, 2, 2, 32, torch.float32, MODERATE, seed=7)
    for thr, tol in (("auto", 1e-2), (-2.0, None)):
        plan = acp_plan(q, k, log_fgate, adaptive_threshold=thr, tol=tol or 1e-4)
        skip = _pruned_mask(log_fgate.cpu(), 200, plan.granule, plan.threshold)
        x = [t.double().cpu() for t in (q, k, v, log_fgate)]
        c = torch.cumsum(x[3], 1).transpose(1, 2)
        s = torch.einsum("bihd,bjhd->bhij", x[0], x[1]) * 32 ** -0.5 + c[..., :, None] - c[..., None, :]
        p = torch.softmax(s.masked_fill(torch.ones(200, 200).triu(1).bool(), float("-inf")), -1)
        mass = (p * skip).sum(-1).transpose(1, 2)                          # (B, Tq, H)
        dense = forgetting_attention_reference(*x)
        o = fox_attention_triton(q, k, v, log_fgate, adaptive_threshold=thr, tol=tol or 1e-4)
        err = (o.double().cpu() - dense).abs().amax(-1)                     # (B, Tq, H)
        bound = 2 * mass * x[2].abs().max()
        assert (err <= bound + 1e-5).all(), (err - bound).max()
        if tol is not None:
            assert mass.max() <= tol
        else:
            assert err.max() > 1e-4                     # the pruning is visible (4e-4), the bound not vacuous


def test_pruning_bad_arguments():
    from foxwindow.kernels.fox_triton import acp_plan
    q, k, v, log_fgate, _ = make(1, 8, 8, 2, 2, 32, torch.float32, MODERATE)
    for kw, word in ((dict(adaptive_threshold="on"), "auto"), (dict(adaptive_threshold=0.5), "<= 0"),
                     (dict(adaptive_threshold=float("nan")), "<= 0"), (dict(tol=0.0), "tol"),
                     (dict(tol=2.0), "tol"), (dict(granule=48), "granule")):
        with pytest.raises(ValueError, match=word):
            acp_plan(q, k, log_fgate, **kw)
    with pytest.raises(ValueError, match="tol"):
        fox_attention_triton(q, k, v, log_fgate, adaptive_threshold="auto", tol=-1)


def test_pruning_varlen(small_tiles):
    """Packed sequences prune per sequence: the same pairs, output and gradients as each sequence
    run alone (a threshold given directly, so that every sequence gets the same one)."""
    from foxwindow.kernels.fox_triton import acp_plan
    cu = torch.tensor([0, 1, 70, 70, 150], dtype=torch.int32, device=DEV)
    q, k, v, log_fgate, do = make(1, 150, 150, 2, 1, 32, torch.float32, MODERATE, seed=8)
    packed = acp_plan(q, k, log_fgate, adaptive_threshold=-2.0, cu_seqlens=cu)
    got = run(q, k, v, log_fgate, do, adaptive_threshold=-2.0, cu_seqlens=cu)
    parts, pruned = [], 0
    for a, b in ((0, 1), (1, 70), (70, 150)):
        x = [t[:, a:b] for t in (q, k, v, log_fgate, do)]
        pruned += acp_plan(*x[:2], x[3], adaptive_threshold=-2.0).pruned_pairs
        parts.append(run(*x, adaptive_threshold=-2.0))
    assert packed.pruned_pairs == pruned > 0
    want = [torch.cat([p[i] for p in parts], 1) for i in range(5)]
    check(got, want, torch.float32)


def test_pruning_granule_guard(small_tiles):
    """A backward launched with tiles wider than the forward's pruning granule would skip other
    pairs than the forward did: it raises instead."""
    from foxwindow.kernels.fox_triton import _INTERP, set_config
    x = [t.detach().requires_grad_() for t in make(1, 40, 40, 1, 1, 32, torch.float32, STRONG)[:4]]
    o = fox_attention_triton(*x, adaptive_threshold=-2.0)
    set_config(**dict(_INTERP, dkdv=(64, 64, 4, 1)))
    with pytest.raises(RuntimeError, match="pruning granule 32"):
        o.sum().backward()


def test_pruning_plan_needs_no_sync_and_no_copies(monkeypatch):
    """acp_plan (dense batch) reads nothing back from the device and copies neither q nor k into a
    wider type: per call, the only host round trip left is pruned_pairs, when asked. (Before v7:
    int(key_start.sum()) in every call and float64 copies of q and k under "auto".)"""
    from torch.profiler import ProfilerActivity, profile

    from foxwindow.kernels.fox_triton import acp_plan
    q, k, v, log_fgate, _ = make(1, 512, 512, 4, 4, 64, torch.bfloat16, MODERATE, seed=9)

    def boom(*a, **kw):
        raise AssertionError("a host synchronisation in acp_plan")
    with monkeypatch.context() as m:
        for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__"):
            m.setattr(torch.Tensor, name, boom)
        for thr in ("auto", -2.0):
            plan = acp_plan(q, k, log_fgate, adaptive_threshold=thr, granule=32)
    assert plan.pruned_pairs > 0
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        acp_plan(q, k, log_fgate, adaptive_threshold="auto", granule=32)
    biggest = max(e.cpu_memory_usage for e in prof.key_averages())
    assert biggest < q.numel() * 2, f"an op allocated {biggest} bytes: a copy of q ({q.numel() * 2} bytes in bf16)?"


def test_interpreter_hint():
    """Triton 3.6's interpreter with numpy >= 2.4 fails on the kernels' loop bounds; the error says
    what to install instead of numpy's message alone. Other errors pass through (None)."""
    from foxwindow.kernels import fox_triton as kt
    err = TypeError("only 0-dimensional arrays can be converted to Python scalars")
    hint = kt.interpreter_hint(err)
    if kt.interpreting():
        assert isinstance(hint, RuntimeError) and "numpy<2.4" in str(hint)
    else:
        assert hint is None
    assert kt.interpreter_hint(ValueError("something else")) is None
