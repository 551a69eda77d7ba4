"""Side-by-side timing of causal FoX attention implementations on one GPU, every timed shape checked.

    python -m foxwindow.kernels.bench --targets --both --impls ours,official,sdpa_cudnn   # the target rows
    python -m foxwindow.kernels.bench --both --accuracy --append                          # anchors + T scan
    python -m foxwindow.kernels.bench --report figures/kernel_bench.json                  # markdown, no GPU
    python -m foxwindow.kernels.bench --dry-run --impls all                               # what can run here
    python -m foxwindow.kernels.bench --device cpu --dtype fp32 --shapes 1,64,2,32        # CPU smoke run

Columns (each skipped with its reason when it cannot run; `--impls all` lists them in this order):
  ours            kernels.fox_triton, dense
  ours_acp        ours with adaptive computation pruning (a threshold argument), where the kernel has one
  ours_1pass      ours with the one-pass backward (backward="one_pass", or a flag), where the kernel has one
  official        the official FoX Triton op, loaded from a local file (--official, FOX_OFFICIAL_KERNEL or
                  .official/, filled by foxwindow/kernels/prepare_gpu.sh), dense
  official_acp    the same with adaptive_threshold
  sdpa_cudnn, sdpa_flash   PyTorch SDPA without a gate: the ceiling a FoX kernel is measured against
  fla             flash-linear-attention 0.6.0 parallel_forgetting_attn
  flex            FlexAttention, compiled, with the FoX score_mod
  fa4             flash-attn-4 (CuTe DSL) with a FoX score_mod
  materialised    the T x T bias in PyTorch
All columns get the same inputs: q, k, v ~ N(0, 1) in the storage dtype, (B, T, H, D), and float32
log-gates drawn per head from the shipped model's gate statistics (figures/heads.json: X = -log g ~
Gamma with that head's mean kappa and variance sigma^2; head h of the benchmark takes model head
h mod 16), or with --gates sigmoid log(sigmoid(3 + N(0, 1))). Both pruned columns get one (B, H)
threshold below which a decay c_i - c_j makes a weight negligible: -(2 max|q| max|k| scale + ln T) - 10,
the official kernel's "auto" rule, computed once per shape outside the timed call.

Correctness: before a column is timed on a shape its output is compared, on those very inputs, with a
float64 reference on 64 query rows (the last 32 and 32 spread from the first; all batches and heads);
the relative L2 error and pass/fail (0.9 u of the dtype, the kernel tests' output threshold) go into
the JSON and the report. Timing: median of triton.testing.do_bench (25 ms warm-up, 100 ms of repeats);
TFLOP/s by the dense-causal count, forward 4 B H T^2 D / 2, forward+backward 3.5x (pruned columns
too: their TF/s is effective throughput). The JSON is rewritten atomically after every shape.
"""
import argparse
import ast
import glob
import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from foxwindow import outputs  # noqa: E402  (the one write guard and the one-line errors)
from foxwindow.models.attention import forgetting_attention_reference  # noqa: E402

__all__ = ["ROOT", "TARGET_SHAPES", "ANCHOR_SHAPES", "SCAN_T", "HEADS_JSON", "OFFICIAL_ENV", "OFFICIAL_DEFAULT",
           "WHEELS", "CHECK_ROWS", "ACP_TOL", "U", "DTYPES", "TARGETS", "Unavailable", "out_tolerance", "heads_stats",
           "draw_log_gates", "acp_threshold", "make_case", "query_rows", "reference_rows", "check_rows",
           "OURS_OPTIONS", "OURS_KW", "ours_option", "make_ours", "make_ours_acp", "make_ours_1pass", "OFFICIAL_ARG",
           "official_path", "load_official", "make_official", "make_official_acp", "make_sdpa_cudnn",
           "make_sdpa_flash", "make_flex", "make_fla", "make_fa4", "make_materialised", "COLUMNS", "availability",
           "flops", "timer", "time_one", "new_row", "find_row", "bench_shape", "ACCURACY_SHAPE", "accuracy_key",
           "accuracy", "fmt_row", "RATIOS", "PRUNED", "target_for", "report", "parse_config", "sweep", "parse_shapes",
           "parse_kw", "save_json", "build_parser", "main"]

TARGET_SHAPES = [(2, 8192, 16, 128), (4, 4096, 32, 64)]
ANCHOR_SHAPES = [(8, 2048, 16, 128), (2, 8192, 16, 128), (1, 32768, 16, 128), (4, 4096, 32, 64)]
SCAN_T = [512, 1024, 2048, 4096, 8192, 16384]     # at B * T = 16384 tokens, H16 D128
HEADS_JSON = os.path.join(ROOT, "figures", "heads.json")
OFFICIAL_ENV = "FOX_OFFICIAL_KERNEL"
OFFICIAL_DEFAULT = os.path.join(ROOT, ".official")
WHEELS = os.path.join(ROOT, ".whl")
CHECK_ROWS = 64             # query rows per shape compared with float64
ACP_TOL = 10.0              # pruned weights are below e^-ACP_TOL / T of the row's largest
U = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# targets on the H200, bf16, causal: (mode, D, smallest T) -> TF/s of the dense column "ours"
TARGETS = {("fwd", 128, 8192): 500, ("fwd+bwd", 128, 8192): 450, ("fwd", 64, 4096): 380}


class Unavailable(Exception):
    """A column cannot run here; the message says why (it becomes the skip reason)."""


def _why(e):
    """One line saying why an implementation was skipped or failed."""
    if isinstance(e, Unavailable):
        return str(e)
    first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"


def out_tolerance(dtype_name):
    """Relative L2 error of the output that a correct kernel stays under (tests/kernels/test_kernels.py)."""
    return 0.9 * U[dtype_name] if dtype_name in U else 1e-5


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------

def heads_stats(path=HEADS_JSON):
    """[(kappa, sigma2)] per model head from a heads.json of heads.py; ValueError when unusable."""
    if not os.path.exists(path):
        raise ValueError(f"--heads-json: {path} not found (heads.py writes it; or use --gates sigmoid)")
    with open(path) as f:
        heads = json.load(f).get("heads") or []
    stats = [(float(h["kappa"]), float(h["sigma2"])) for h in heads if "kappa" in h and "sigma2" in h]
    if not stats:
        raise ValueError(f"--heads-json: {path} has no heads with kappa and sigma2")
    if any(not (math.isfinite(k) and math.isfinite(s) and k >= 0 and s >= 0) for k, s in stats):
        raise ValueError(f"--heads-json: {path} has a head with a negative or non-finite kappa / sigma2")
    return stats


def draw_log_gates(B, T, H, stats, seed):
    """log g (B, T, H) float32 on the CPU: X = -log g ~ Gamma(kappa^2 / sigma2, sigma2 / kappa) per
    head (mean kappa, variance sigma2), model head h mod len(stats); a head with sigma2 ~ 0 is the
    constant gate exp(-kappa), a head with kappa = 0 never forgets."""
    rng = np.random.default_rng(seed)
    x = np.empty((B, T, H))
    for h in range(H):
        kappa, sigma2 = stats[h % len(stats)]
        if kappa == 0.0:
            x[:, :, h] = 0.0
        elif sigma2 <= 1e-12 * kappa * kappa:
            x[:, :, h] = kappa
        else:
            x[:, :, h] = rng.gamma(kappa * kappa / sigma2, sigma2 / kappa, size=(B, T))
    return torch.from_numpy(-x).float()


def acp_threshold(q, k, scale, Tk, tol=ACP_TOL):
    """(B, H) float32: a decay c_i - c_j below this makes key j's weight < e^-tol / Tk of the row's
    largest, since |q_i . k_j| scale <= max|q| max|k| scale on either side (the official "auto")."""
    qn = q.float().norm(dim=-1).amax(dim=1)                                  # (B, H)
    kn = k.float().norm(dim=-1).amax(dim=1)                                  # (B, H_kv)
    kn = kn.repeat_interleave(qn.shape[1] // kn.shape[1], dim=1)
    return (-(2 * qn * kn * scale + math.log(Tk)) - tol).float().contiguous()


def make_case(B, T, H, D, dtype, device, gates="heads", heads_json=HEADS_JSON, seed=0):
    """Inputs shared by every column: q, k, v, do (B, T, H, D) in dtype; log_fgate (B, T, H) float32;
    threshold (B, H) float32 for the pruned columns."""
    g = torch.Generator(device=device).manual_seed(seed)
    r = lambda: torch.randn(B, T, H, D, generator=g, device=device).to(dtype)   # noqa: E731
    q, k, v, do = r(), r(), r(), r()
    if gates == "heads":
        lf = draw_log_gates(B, T, H, heads_stats(heads_json), seed)
    elif gates == "sigmoid":
        lf = F.logsigmoid(3 + torch.randn(B, T, H, generator=torch.Generator().manual_seed(seed)))
    else:
        raise ValueError(f"gates must be 'heads' or 'sigmoid'; got {gates!r}")
    return dict(q=q, k=k, v=v, do=do, log_fgate=lf.to(device), scale=D ** -0.5,
                threshold=acp_threshold(q, k, D ** -0.5, T))


# ------------------------------------------------------------------------------------------------
# the float64 check on a sub-slice of queries
# ------------------------------------------------------------------------------------------------

def query_rows(T, n=CHECK_ROWS):
    """Sorted query positions to check: the last n // 2 (the longest rows) and n - n // 2 spread from 0."""
    last = list(range(max(T - n // 2, 0), T))
    spread = np.linspace(0, max(T - n // 2 - 1, 0), n - len(last)).round().astype(int).tolist()
    return torch.tensor(sorted(set(spread) | set(last)), dtype=torch.long)


def reference_rows(q, k, v, log_fgate, rows, scale, gated=True):
    """o (B, n, H, D) float64 for the query positions rows (n,), from the same (rounded) inputs:
    q (B, T, H, D), k, v (B, T, H_kv, D), log_fgate (B, T, H) float32; causal, queries = keys."""
    rows = rows.to(q.device)
    H, Hkv = q.shape[2], k.shape[2]
    k64 = k.double().repeat_interleave(H // Hkv, dim=2)                     # (B, T, H, D)
    v64 = v.double().repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bnhd,bthd->bhnt", q[:, rows].double(), k64) * scale  # (B, H, n, T)
    if gated:
        c = torch.cumsum(log_fgate.double(), dim=1).transpose(1, 2)        # (B, H, T)
        s = s + c[:, :, rows, None] - c[:, :, None, :]
    future = torch.arange(k.shape[1], device=q.device)[None, :] > rows[:, None]    # (n, T)
    p = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)
    return torch.einsum("bhnt,bthd->bnhd", p, v64)


def check_rows(o, ref, rows):
    """Relative L2 error of o (B, T, H, D) on the checked rows against ref (B, n, H, D) float64."""
    got = o[:, rows.to(o.device)].double()
    return ((got - ref).norm() / ref.norm()).item()


# ------------------------------------------------------------------------------------------------
# columns: make(case) returns f(q, k, v, log_fgate) -> o (B, T, H, D), or raises Unavailable
# ------------------------------------------------------------------------------------------------

# (keyword, value) under which a kernel may take each option, the first found in its signature wins;
# the column is skipped when the signature has none of them. Value None: the column's own (the threshold).
OURS_OPTIONS = {
    "ours_acp": ("adaptive threshold", [(n, None) for n in ("adaptive_threshold", "acp_threshold",
                                                             "prune_threshold", "threshold")]),
    "ours_1pass": ("one-pass backward", [("backward", "one_pass")] + [
        (n, True) for n in ("one_pass_backward", "bwd_one_pass", "one_pass", "onepass_bwd", "single_pass_backward")]),
}
OURS_KW = {}        # --ours-kw: extra keywords for every ours column (checked against the signature)


def _ours_fn():
    from foxwindow.kernels.fox_triton import fox_attention_triton  # the fused kernels: triton (the kernels extra)
    return fox_attention_triton


def ours_option(column):
    """(keyword, value) under which fox_attention_triton takes column's option; Unavailable if it has none."""
    fn = _ours_fn()
    what, options = OURS_OPTIONS[column]
    params = inspect.signature(fn).parameters
    for n, value in options:
        if n in params:
            return n, value
    raise Unavailable(f"fox_attention_triton has no {what} (keywords {', '.join(params)})")


def make_ours(case):
    fn = _ours_fn()
    return lambda q, k, v, lf: fn(q, k, v, lf, **OURS_KW)


def make_ours_acp(case):
    """Ours with the (B, H) threshold; where the kernel takes no tensor there (a probe on 16 positions
    says so), with one float, the smallest over (B, H), which prunes least, and a note in the row."""
    fn, (kw, _) = _ours_fn(), ours_option("ours_acp")
    thr = case["threshold"]
    probe = [case[n][:, :16] for n in ("q", "k", "v", "log_fgate")]
    try:
        with torch.no_grad():
            fn(*probe, **{kw: thr}, **OURS_KW)
    except (TypeError, ValueError) as e:
        thr = float(thr.min())
        case.setdefault("notes", {})["ours_acp"] = (f"{kw} given as one float, the smallest over (B, H) "
                                                    f"({thr:.1f}): a (B, H) tensor was refused ({_why(e)})")
    return lambda q, k, v, lf: fn(q, k, v, lf, **{kw: thr}, **OURS_KW)


def make_ours_1pass(case):
    fn, (kw, value) = _ours_fn(), ours_option("ours_1pass")
    return lambda q, k, v, lf: fn(q, k, v, lf, **{kw: value}, **OURS_KW)


_OFFICIAL = {}
OFFICIAL_ARG = [None]       # --official of the current main() call


def official_path(path=None):
    return path or OFFICIAL_ARG[0] or os.environ.get(OFFICIAL_ENV) or OFFICIAL_DEFAULT


def load_official(path=None):
    """The official forgetting_attention(q, k, v, log_fgate, *, adaptive_threshold=...) imported from a
    local file or a folder holding forgetting_attention.py (e.g. .official/ from foxwindow/kernels/prepare_gpu.sh).
    The file is loaded as a module of a package made around its folder, so relative imports of its
    siblings resolve without installing the official repository. Raises Unavailable with the reason."""
    path = os.path.abspath(official_path(path))
    if path in _OFFICIAL:
        return _OFFICIAL[path]
    how = f"(foxwindow/kernels/prepare_gpu.sh extracts it into .official/; or --official PATH, or {OFFICIAL_ENV})"
    if not os.path.exists(path):
        raise Unavailable(f"no official kernel at {path} {how}")
    file = path
    if os.path.isdir(path):
        hits = sorted(glob.glob(os.path.join(path, "**", "forgetting_attention.py"), recursive=True))
        if not hits:
            raise Unavailable(f"{path} holds no forgetting_attention.py {how}")
        file = hits[0]
    pkg = "_fox_official_" + hashlib.sha1(os.path.dirname(file).encode()).hexdigest()[:8]
    if pkg not in sys.modules:
        spec = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
        mod = importlib.util.module_from_spec(spec)
        mod.__path__ = [os.path.dirname(file)]
        sys.modules[pkg] = mod
    name = f"{pkg}.{os.path.splitext(os.path.basename(file))[0]}"
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - a missing triton / einops, a syntax error: say which
        del sys.modules[name]
        raise Unavailable(f"the official kernel {file} does not import: {_why(e)}"
                          " (it needs torch, triton and einops)") from e
    fn = getattr(mod, "forgetting_attention", None)
    if not callable(fn):
        raise Unavailable(f"{file} defines no forgetting_attention()")
    _OFFICIAL[path] = fn
    return fn


def make_official(case):
    fn = load_official()
    return lambda q, k, v, lf: fn(q, k, v, lf)                 # (B, T, H, D) layout: head_first=False


def make_official_acp(case):
    fn, thr = load_official(), case["threshold"]
    return lambda q, k, v, lf: fn(q, k, v, lf, adaptive_threshold=thr)


def _sdpa(backend_name):
    from torch.nn.attention import (  # torch.nn.attention: a benchmark row; absent from older torch
        SDPBackend,
        sdpa_kernel,
    )
    backend = getattr(SDPBackend, backend_name)

    def f(q, k, v, log_fgate):      # no gate: the ceiling a FoX kernel is measured against
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
        return o.transpose(1, 2)
    return f


def make_sdpa_cudnn(case):
    return _sdpa("CUDNN_ATTENTION")


def make_sdpa_flash(case):
    return _sdpa("FLASH_ATTENTION")


_FLEX = {}


def make_flex(case):
    from torch.nn.attention.flex_attention import (  # torch.nn.attention: a benchmark row; absent from older torch
        create_block_mask,
        flex_attention,
    )
    if "fn" not in _FLEX:       # one compiled function for every shape (dynamic=False: one graph each)
        @torch.compile(dynamic=False)
        def fox_flex(q, k, v, c, block_mask):
            ck = c.clone()      # a grad-requiring capture may be indexed only once per score_mod

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + c[b, h, q_idx] - ck[b, h, kv_idx]
            return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        _FLEX["fn"] = fox_flex
    q = case["q"]
    T = q.shape[1]
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, T, T, device=q.device)

    def f(q, k, v, log_fgate):
        c = torch.cumsum(log_fgate, dim=1).transpose(1, 2)                  # (B, H, T)
        o = _FLEX["fn"](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), c, mask)
        return o.transpose(1, 2)
    return f


def make_fla(case):
    os.environ.setdefault("FLA_TILELANG", "0")
    try:
        from fla.ops.forgetting_attn import parallel_forgetting_attn  # fla: the models extra
    except ImportError:
        try:
            from fla.ops.forgetting_attn.parallel import parallel_forgetting_attn  # fla: the models extra
        except ImportError as e:
            raise Unavailable(f"flash-linear-attention not installed ({_why(e)}); carry the fla-core 0.6.0 "
                              "wheel in .whl/ (foxwindow/kernels/prepare_gpu.sh)") from e
    return lambda q, k, v, log_fgate: parallel_forgetting_attn(q, k, v, log_fgate)


def make_fa4(case):
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a CUDA DSL that fails to load
        note = os.path.join(WHEELS, "flash-attn-4.skipped")
        if os.path.exists(note):
            with open(note) as f:
                raise Unavailable("flash-attn-4 not installed: " + f.read().strip()) from e
        raise Unavailable(f"flash-attn-4 not installed ({_why(e)})") from e
    raise Unavailable("flash-attn-4 imports, but this benchmark has no FoX score_mod for it: its CuTe DSL "
                      "score_mod has never been compiled here, and it returns no gradient for the gate")


def make_materialised(case):
    q = case["q"]
    B, T, H, _ = q.shape
    if q.is_cuda and (T > 8192 or 6 * 4 * B * H * T * T > 0.8 * torch.cuda.mem_get_info()[0]):
        raise Unavailable("T x T tensors too large (or T > 8192: seconds a call, nothing new)")

    def f(q, k, v, log_fgate):
        B, T, H, D = q.shape
        c = torch.cumsum(log_fgate, dim=1).transpose(1, 2)                  # (B, H, T)
        s = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)).float() * D ** -0.5
        s = s + c[..., :, None] - c[..., None, :]                           # (B, H, T, T)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        p = torch.softmax(s, dim=-1).to(q.dtype)
        return (p @ v.transpose(1, 2)).transpose(1, 2)
    return f


# name -> (make, gated); the order is the order of importance (a time limit cuts the tail)
COLUMNS = {
    "ours": (make_ours, True),
    "official": (make_official, True),
    "sdpa_cudnn": (make_sdpa_cudnn, False),
    "ours_acp": (make_ours_acp, True),
    "official_acp": (make_official_acp, True),
    "sdpa_flash": (make_sdpa_flash, False),
    "ours_1pass": (make_ours_1pass, True),
    "fla": (make_fla, True),
    "flex": (make_flex, True),
    "fa4": (make_fa4, True),
    "materialised": (make_materialised, True),
}


def availability(name):
    """'available' or the reason a column cannot run, found without a GPU (imports and signatures)."""
    try:
        if name.startswith("ours"):
            _ours_fn()
            if name in OURS_OPTIONS:
                ours_option(name)
        elif name.startswith("official"):
            load_official()
        elif name == "fla":
            make_fla(None)
        elif name == "fa4":
            make_fa4(None)
        elif name == "flex":
            import torch.nn.attention.flex_attention  # noqa: F401
        elif name.startswith("sdpa"):
            import torch.nn.attention  # noqa: F401
        return "available"
    except Exception as e:  # noqa: BLE001
        return "skipped: " + _why(e)


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------

def flops(B, T, H, D, fwd_only):
    f = 4 * B * H * T * T * D / 2
    return f if fwd_only else 3.5 * f


def timer(fn, device):
    """Median milliseconds of fn(): do_bench on a GPU, else three wall-clock calls after one warm-up."""
    if device == "cuda":
        from triton.testing import do_bench  # triton: the kernels extra
        return do_bench(fn, warmup=25, rep=100, return_mode="median")
    fn()
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def time_one(fn, case, fwd_only, gated, device):
    q, k, v, lf, do = (case[n] for n in ("q", "k", "v", "log_fgate", "do"))
    if fwd_only:
        with torch.no_grad():
            return timer(lambda: fn(q, k, v, lf), device)
    x = [t.detach().requires_grad_() for t in (q, k, v, lf)]
    wrt = x if gated else x[:3]     # the ungated baselines have no log_fgate path
    # autograd.grad rather than backward(): nothing accumulates into .grad between repeats
    return timer(lambda: torch.autograd.grad(fn(*x), wrt, do), device)


# ------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------

def new_row(B, T, H, D):
    return dict(B=B, T=T, H=H, D=D, ms={}, tflops={}, skipped={}, err={}, ok={}, notes={})


def find_row(result, mode, shape):
    rows = result["runs"].setdefault(mode, [])
    for r in rows:
        if (r["B"], r["T"], r["H"], r["D"]) == tuple(shape):
            for key in ("ms", "tflops", "skipped", "err", "ok", "notes"):
                r.setdefault(key, {})
            return r
    rows.append(new_row(*shape))
    return rows[-1]


def bench_shape(result, shape, impls, dtype_name, modes, device, gates, heads_json, save):
    """Check then time every column on one shape, both modes; rows land in result['runs'][mode]. A
    column already timed there (--append) is not timed again."""
    B, T, H, D = shape
    case = make_case(B, T, H, D, DTYPES[dtype_name], device, gates, heads_json)
    rows = query_rows(T)
    refs = {}
    tol = out_tolerance(dtype_name)
    for name in impls:
        make, gated = COLUMNS[name]
        todo = [m for m in modes if name not in find_row(result, m, shape)["tflops"]]
        if not todo:
            continue
        try:
            fn = make(case)
            with torch.no_grad():
                o = fn(case["q"], case["k"], case["v"], case["log_fgate"])
            if gated not in refs:
                refs[gated] = reference_rows(case["q"], case["k"], case["v"], case["log_fgate"], rows,
                                             case["scale"], gated)
            err = check_rows(o, refs[gated], rows)
            del o
            for mode in todo:
                row = find_row(result, mode, shape)
                row["err"][name], row["ok"][name] = err, bool(err <= tol)
                if name in case.get("notes", {}):
                    row["notes"][name] = case["notes"][name]
                try:
                    ms = time_one(fn, case, mode == "fwd", gated, device)
                    row["ms"][name] = ms
                    row["tflops"][name] = flops(B, T, H, D, mode == "fwd") / ms / 1e9
                    row["skipped"].pop(name, None)
                except Exception as e:  # noqa: BLE001 - e.g. no backward, out of memory
                    row["skipped"][name] = _why(e)
        except Exception as e:  # noqa: BLE001 - a missing package, an unsupported shape, out of memory
            for mode in todo:
                find_row(result, mode, shape)["skipped"][name] = _why(e)
        if device == "cuda":
            torch.cuda.empty_cache()
        save()      # per column: a step cut by its time limit keeps every column that finished
    for mode in modes:
        print(fmt_row(find_row(result, mode, shape), impls, mode), flush=True)


# The accuracy shape shares the timed B2 T8192 H16 D128 kernels' specialisations (Triton
# specialises integer arguments divisible by 16: H, the strides, and the row-statistics strides
# H T and T; T itself is never specialised), so on the GPU it compiles nothing new. T = 784 is a
# multiple of 16 but of no tile (6 x 128 + 16): the partial blocks are exercised. Before v7 it
# was B2 T777 H4 D128, which forced ~6 fresh compiles before the first timed row.
ACCURACY_SHAPE = (1, 784, 16, 128)


def accuracy_key(shape=ACCURACY_SHAPE):
    return "accuracy_B{}_T{}_H{}_D{}".format(*shape)


def accuracy(impls, dtype_name, device, gates, heads_json, B=ACCURACY_SHAPE[0], T=ACCURACY_SHAPE[1],
             H=ACCURACY_SHAPE[2], D=ACCURACY_SHAPE[3]):
    """Relative L2 errors of out and the four gradients against float64 (gated columns), full tensors."""
    case = make_case(B, T, H, D, DTYPES[dtype_name], device, gates, heads_json, seed=1)
    x64 = [case[n].double().requires_grad_() for n in ("q", "k", "v", "log_fgate")]
    o64 = forgetting_attention_reference(*x64)
    ref = [o64.detach()] + list(torch.autograd.grad(o64, x64, case["do"].double()))
    res = {}
    for name in impls:
        make, gated = COLUMNS[name]
        if not gated:
            continue
        try:
            x = [case[n].detach().clone().requires_grad_() for n in ("q", "k", "v", "log_fgate")]
            o = make(case)(*x)
            got = [o.detach()] + list(torch.autograd.grad(o, x, case["do"]))
            res[name] = {n: ((a.double() - b).norm() / b.norm()).item()
                         for n, a, b in zip(["out", "dq", "dk", "dv", "dlog_fgate"], got, ref)}
        except Exception as e:  # noqa: BLE001
            res[name] = {"skipped": _why(e)}
    return res


def fmt_row(row, impls, mode):
    shape = f"{mode:<8}B{row['B']} T{row['T']} H{row['H']} D{row['D']}"
    cells = []
    for n in impls:
        c = f"{row['tflops'][n]:.1f}" if n in row["tflops"] else "-"
        cells.append(c + ("!" if row["ok"].get(n) is False else ""))
    return f"{shape:<30}" + " ".join(f"{c:>12}" for c in cells)


# ------------------------------------------------------------------------------------------------
# the report (no GPU needed)
# ------------------------------------------------------------------------------------------------

RATIOS = [("ours", "official"), ("ours", "sdpa_cudnn"), ("ours_1pass", "ours"), ("ours_acp", "official_acp"),
          ("ours_acp", "ours"), ("official_acp", "official")]
PRUNED = ("ours_acp", "official_acp")


def _tf(x):
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def target_for(mode, D, T):
    goal = [t for (m, d, T0), t in TARGETS.items() if m == mode and d == D and T >= T0]
    return goal[0] if goal else None


def _table(rows, impls, mode, verdicts):
    """Markdown rows: TF/s per column, the RATIOS among them, and (verdicts given) the target per row."""
    pairs = [(a, b) for a, b in RATIOS if a in impls and b in impls and (verdicts is not None) == (a not in PRUNED)]
    out = ["| shape | " + " | ".join(impls + [f"{a} / {b}" for a, b in pairs])
           + (" | target |" if verdicts is not None else " |"),
           "|" + " --- |" * (len(impls) + len(pairs) + 1 + (verdicts is not None))]
    for r in rows:
        tf, ok = r.get("tflops", {}), r.get("ok", {})
        if not any(n in tf for n in ([m for m in impls if m in PRUNED] or impls)):
            continue
        cells = [(_tf(tf[n]) + ("!" if ok.get(n) is False else "")) if n in tf else "-" for n in impls]
        cells += [f"{tf[a] / tf[b]:.2f}" if a in tf and b in tf else "-" for a, b in pairs]
        shape = f"B{r['B']} T{r['T']} H{r['H']} D{r['D']}"
        if verdicts is None:
            out.append(f"| {shape} | " + " | ".join(cells) + " |")
            continue
        goal = target_for(mode, r["D"], r["T"])
        if goal is None:
            met = "-"
        elif "ours" not in tf:
            met = f"{goal}: not measured"
        else:
            good = tf["ours"] >= goal and ok.get("ours") is not False
            met = f"{goal}: {'met' if good else 'not met'}"
        if goal is not None:
            have = f"{tf['ours']:.0f}" if "ours" in tf else "-"
            why = " (its output check failed)" if ok.get("ours") is False else ""
            verdicts.append(f"- {mode} {shape}: ours {have} TF/s against {met.replace(': ', ' TF/s: ')}{why}")
        out.append(f"| {shape} | " + " | ".join(cells) + f" | {met} |")
    return out


def report(data):
    """Markdown of a saved run: TF/s per shape and column, ours over the official kernel and cuDNN
    (measured in the same run), the targets met or not, the output checks, the skip reasons, the
    accuracy table and the config sweep."""
    out = [f"{data.get('gpu', '?')}, torch {data.get('torch', '?')}, triton {data.get('triton', '?')}, "
           f"{data.get('dtype', '?')}, gates {data.get('gates', '?')}, {data.get('time', '')}"]
    tol = data.get("tolerance")
    order = list(COLUMNS) + [n for n in data.get("impls", []) if n not in COLUMNS]
    verdicts = []
    for mode in ("fwd", "fwd+bwd"):
        rows = data.get("runs", {}).get(mode) or []
        timed = [n for n in order if any(n in r.get("tflops", {}) for r in rows)]
        dense = [n for n in timed if n not in PRUNED]
        if dense:
            out += ["", f"{mode}, TF/s (median of do_bench, dense-causal count; ! = output check failed)", ""]
            out += _table(rows, dense, mode, verdicts)
        pruned = [n for n in timed if n in PRUNED]
        if pruned:      # apart from the dense numbers: their speed depends on the gates
            out += ["", f"{mode}, pruned (adaptive computation pruning on the model's gates), effective TF/s "
                        "(dense-causal count over their time)", ""]
            out += _table(rows, pruned + [n for n in ("ours", "official") if n in timed], mode, None)
    if verdicts:
        out += ["", "targets (H200, bf16):"] + verdicts
    errs, skips, notes = {}, {}, {}
    for mode, rows in data.get("runs", {}).items():
        for r in rows:
            shape = f"B{r['B']} T{r['T']} H{r['H']} D{r['D']}"
            for n, e in r.get("err", {}).items():
                errs.setdefault(n, {})[shape] = (e, r.get("ok", {}).get(n))
            for n, why in r.get("skipped", {}).items():
                skips.setdefault(n, {}).setdefault(why, []).append(f"{mode} {shape}")
            for n, what in r.get("notes", {}).items():
                notes.setdefault(n, set()).add(what)
    if errs:
        out += ["", f"output check: relative L2 error vs float64 on {data.get('check_rows', CHECK_ROWS)} query "
                    f"rows of each timed shape (threshold {tol if tol is None else f'{tol:.1e}'})", "",
                "| impl | largest error | at | failed shapes |", "| --- | --- | --- | --- |"]
        for n in [m for m in order if m in errs]:
            worst = max(errs[n].items(), key=lambda kv: kv[1][0])
            bad = [s for s, (_, good) in errs[n].items() if good is False]
            out.append(f"| {n} | {worst[1][0]:.1e} | {worst[0]} | {', '.join(bad) if bad else 'none'} |")
    if notes:
        out += ["", "notes:"] + [f"- {n}: {w}" for n in sorted(notes) for w in sorted(notes[n])]
    if skips:
        out += ["", "skipped:"]
        for n in [m for m in order if m in skips]:
            for why, where in skips[n].items():
                out.append(f"- {n} ({len(where)} rows, e.g. {where[0]}): {why}")
    key = next((k for k in sorted(data) if k.startswith("accuracy_B")), None)
    acc = data.get(key) if key else None
    if acc:
        out += ["", "relative L2 error vs float64, " + " ".join(key.split("_")[1:]) + ", full tensors", "",
                "| impl | out | dq | dk | dv | dlog_fgate |", "| --- | --- | --- | --- | --- | --- |"]
        for n, e in acc.items():
            cells = (" | ".join(f"{e[k]:.1e}" for k in ("out", "dq", "dk", "dv", "dlog_fgate"))
                     if "skipped" not in e else e["skipped"] + " | | | |")
            out.append(f"| {n} | {cells} |")
    sw = data.get("sweep")
    if sw:
        out += ["", "config sweep, ours (checked before timing: out vs float64 rows, gradients vs the shipped "
                    "config)", "", "| config | shape | out err | grad diff | fwd | fwd+bwd | note |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in sw:
            f = lambda key, fmt: fmt.format(r[key]) if r.get(key) is not None else "-"   # noqa: E731
            out.append(f"| {r['config'] or '(shipped)'} | B{r['B']} T{r['T']} H{r['H']} D{r['D']} | "
                       f"{f('out_err', '{:.1e}')} | {f('grad_diff', '{:.1e}')} | {f('fwd', '{:.0f}')} | "
                       f"{f('fwd+bwd', '{:.0f}')} | {r.get('error', '')} |")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# the config sweep
# ------------------------------------------------------------------------------------------------

def parse_config(s):
    """'fwd=128,64,8,3;dkdv=32,128,8,3' -> {'fwd': (128, 64, 8, 3), 'dkdv': (32, 128, 8, 3)}"""
    try:
        cfg = {kv.split("=")[0].strip(): tuple(int(x) for x in kv.split("=")[1].split(","))
               for kv in s.split(";") if kv.strip()}
    except (IndexError, ValueError):
        raise ValueError(f"a config wants 'fwd=BM,BN,warps,stages;dkdv=...;dq=...'; got {s!r}") from None
    bad = [k for k, v in cfg.items() if k not in ("fwd", "dkdv", "dq") or len(v) != 4]
    if bad:
        raise ValueError(f"a config names fwd, dkdv or dq with 4 numbers each; got {s!r}")
    return cfg


def sweep(result, configs, shapes, dtype_name, device, gates, heads_json, save):
    """Ours under each launch config ('' = the shipped one). Each is checked first: its output against
    float64 on the query rows (0.9 u) and its gradients against the shipped config's (2 x 1.3 u: both
    within 1.3 u of the exact ones); a config that fails is not timed."""
    from foxwindow.kernels import fox_triton as kt  # the fused kernels: triton (the kernels extra)
    if not hasattr(kt, "set_config"):
        raise Unavailable("kernels.fox_triton has no set_config(): no launch configs to sweep")
    tol = out_tolerance(dtype_name)
    gtol = 2 * 1.3 * U[dtype_name] if dtype_name in U else 4e-5
    sw = result.setdefault("sweep", [])
    for (B, T, H, D) in shapes:
        case = make_case(B, T, H, D, DTYPES[dtype_name], device, gates, heads_json)
        rows = query_rows(T)
        ref = reference_rows(case["q"], case["k"], case["v"], case["log_fgate"], rows, case["scale"])
        x = [case[n].detach().requires_grad_() for n in ("q", "k", "v", "log_fgate")]
        base = None
        for cfg in configs:
            row = dict(config=cfg, B=B, T=T, H=H, D=D)
            try:
                kt.set_config(**parse_config(cfg))
                o = kt.fox_attention_triton(*x)
                grads = torch.autograd.grad(o, x, case["do"])
                row["out_err"] = check_rows(o.detach(), ref, rows)
                del o
                if base is None and cfg == "":
                    base = grads
                if base is not None:
                    row["grad_diff"] = max(((a.double() - b.double()).norm() / b.double().norm()).item()
                                           for a, b in zip(grads, base))
                del grads
                if row["out_err"] > tol or row.get("grad_diff", 0.0) > gtol:
                    row["error"] = f"check failed (out {row['out_err']:.1e} > {tol:.1e} or grad diff > {gtol:.1e})"
                else:
                    for mode in ("fwd", "fwd+bwd"):
                        ms = time_one(kt.fox_attention_triton, case, mode == "fwd", True, device)
                        row[mode] = flops(B, T, H, D, mode == "fwd") / ms / 1e9
            except Exception as e:  # noqa: BLE001 - out of resources etc.: a reading
                row["error"] = _why(e)
            finally:
                kt.set_config()
            sw.append(row)
            save()
            cells = (f"{row['fwd']:7.1f} {row['fwd+bwd']:8.1f}" if "fwd+bwd" in row else row.get("error", ""))
            print(f"{cfg or '(shipped)':<44} {'B%d T%d H%d D%d' % (B, T, H, D):<22} {cells}", flush=True)


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------

def parse_shapes(s):
    try:
        shapes = [tuple(int(x) for x in part.split(",")) for part in s.split(";") if part.strip()]
    except ValueError:
        shapes = []
    if not shapes or any(len(t) != 4 or min(t) < 1 for t in shapes):
        raise ValueError(f"--shapes wants 'B,T,H,D;B,T,H,D' with positive integers; got {s!r}")
    return shapes


def parse_kw(s):
    """'name=value;...' -> dict, values read as Python literals where they parse (True, 0.5, 3)."""
    kw = {}
    for part in (p for p in s.split(";") if p.strip()):
        if "=" not in part:
            raise ValueError(f"--ours-kw wants 'name=value;...'; got {s!r}")
        k, v = (t.strip() for t in part.split("=", 1))
        try:
            kw[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            kw[k] = v
    return kw


def save_json(path, data):
    """Write atomically through the project's guard (a temporary file, then a rename; NaN as null), keeping
    the output's lock across the run's repeated saves."""
    outputs.write_result(path, data, "kernel-bench", hold=True)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", help="'B,T,H,D;...' (default: the anchor shapes and a T scan)")
    ap.add_argument("--targets", action="store_true", help="only the target shapes B2 T8192 H16 D128, B4 T4096 H32 D64")
    ap.add_argument("--no-scan", action="store_true", help="skip the T scan at B*T = 16384, H16 D128")
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke run (Triton's interpreter, wall-clock timing), not a measurement")
    ap.add_argument("--fwd-only", action="store_true", help="time the forward only")
    ap.add_argument("--both", action="store_true", help="time forward and forward+backward")
    ap.add_argument("--impls", default="ours,official,sdpa_cudnn,ours_acp,official_acp,sdpa_flash,fla,materialised",
                    help="comma-separated columns, or 'all': " + ",".join(COLUMNS))
    ap.add_argument("--gates", default="heads", choices=["heads", "sigmoid"],
                    help="heads: per-head Gamma gates from --heads-json; sigmoid: log(sigmoid(3 + N(0,1)))")
    ap.add_argument("--heads-json", default=HEADS_JSON)
    ap.add_argument("--official", default=None,
                    help=f"the official forgetting_attention.py or a folder holding it (default ${OFFICIAL_ENV}, "
                         "else .official/)")
    ap.add_argument("--ours-kw", default="", help="extra keywords for every ours column, 'name=value;...'")
    ap.add_argument("--accuracy", action="store_true",
                    help="also full errors vs float64 on B{} T{} H{} D{}".format(*ACCURACY_SHAPE))
    ap.add_argument("--config", default="",
                    help="override our launch configs, e.g. 'fwd=128,64,8,3;dkdv=32,128,8,3'")
    ap.add_argument("--sweep", default="",
                    help="time ours under each of these '|'-separated configs ('' = shipped), checked first, and stop")
    ap.add_argument("--json", default=os.path.join(ROOT, "figures", "kernel_bench.json"), help="results file")
    ap.add_argument("--append", action="store_true",
                    help="add to an existing --json (cells already timed there are kept, not retimed)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --json")
    ap.add_argument("--report", default="", help="print markdown tables of a saved JSON (no GPU needed) and stop")
    ap.add_argument("--debug", action="store_true", help="on error, show the full traceback")
    ap.add_argument("--break-lock", action="store_true",
                    help="remove the lock of --json that another run seems to hold (when no such run is going: a lock "
                         "left by a run on another host or a frozen process); see docs/SAFETY.md")
    ap.add_argument("--dry-run", action="store_true",
                    help="parse arguments, import what can be imported, say which columns would run, and stop")
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)

    def fail(msg):
        print(f"bench.py: {msg}", file=sys.stderr)
        return 2

    if args.report:
        if not os.path.exists(args.report):
            return fail(f"--report: {args.report} not found")
        with open(args.report) as f:
            data = json.load(f)
        if not isinstance(data, dict) or not data.get("runs"):
            return fail(f"--report: {args.report} is not a kernel benchmark JSON (no 'runs')")
        print(report(data))
        return 0
    impls = list(COLUMNS) if args.impls.strip() == "all" else [n.strip() for n in args.impls.split(",") if n.strip()]
    unknown = [n for n in impls if n not in COLUMNS]
    if unknown or not impls:
        return fail(f"--impls: unknown column(s) {unknown}; choose from {','.join(COLUMNS)} or 'all'")
    try:
        if args.targets:
            shapes = list(TARGET_SHAPES)
        elif args.shapes:
            shapes = parse_shapes(args.shapes)
        else:
            shapes = list(ANCHOR_SHAPES) + ([] if args.no_scan else
                                            [(16384 // T, T, 16, 128) for T in SCAN_T
                                             if (16384 // T, T, 16, 128) not in ANCHOR_SHAPES])
        configs = [c.strip() for c in args.sweep.split("|")] if args.sweep else []
        for c in configs + ([args.config] if args.config else []):
            if c:
                parse_config(c)
        ours_kw = parse_kw(args.ours_kw)
        if args.gates == "heads":
            heads_stats(args.heads_json)
    except ValueError as e:
        return fail(str(e))
    if args.append and args.overwrite:
        return fail("--append and --overwrite exclude each other")
    if args.json and os.path.exists(args.json) and not (args.append or args.overwrite or args.dry_run):
        return fail(f"--json: {args.json} exists; pass --append to add to it or --overwrite to replace it")
    if args.json and not args.dry_run:
        try:       # real paths, tracked sources, .git, special filesystems, a second writer: refused here
            outputs.guard_output(args.json, force=args.append or args.overwrite, what="--json",
                                 force_flag="--overwrite")
        except outputs.UsageError as e:
            return fail(str(e))
    OFFICIAL_ARG[0] = args.official
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")     # before anything imports a @triton.jit kernel
    if ours_kw:
        try:
            params = inspect.signature(_ours_fn()).parameters
        except Exception as e:  # noqa: BLE001
            return fail(f"--ours-kw: kernels.fox_triton does not import ({_why(e)})")
        bad = [k for k in ours_kw if k not in params]
        if bad:
            return fail(f"--ours-kw: fox_attention_triton takes no {bad} (keywords {', '.join(params)})")
    OURS_KW.clear()
    OURS_KW.update(ours_kw)
    modes = ["fwd", "fwd+bwd"] if args.both else ["fwd"] if args.fwd_only else ["fwd+bwd"]

    if args.dry_run:
        print(f"dry run: {len(shapes)} shapes x {modes} x {len(impls)} columns, dtype {args.dtype}, "
              f"gates {args.gates}, json {args.json}" + (f", sweep of {len(configs)} configs" if configs else ""))
        if configs:
            try:
                from foxwindow.kernels import fox_triton as kt  # the fused kernels: triton (the kernels extra)
                how = ("set_config present" if hasattr(kt, "set_config")
                       else "skipped: kernels.fox_triton has no set_config()")
            except Exception as e:  # noqa: BLE001
                how = "skipped: " + _why(e)
            print(f"  sweep          {how}; configs: " + " | ".join(c or "(shipped)" for c in configs))
            return 0
        for n in impls:
            print(f"  {n:<14} {availability(n)}")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        return fail("no CUDA device here; --dry-run checks the arguments and imports, --device cpu runs a "
                    "smoke pass in Triton's interpreter, pytest foxwindow/kernels/ checks correctness")

    result = dict(runs={}, impls=[])
    if args.append and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            result = json.load(f)
        if result.get("dtype", args.dtype) != args.dtype or result.get("gates", args.gates) != args.gates:
            return fail(f"--append: {args.json} holds a {result.get('dtype')} / {result.get('gates')} run, "
                        f"not {args.dtype} / {args.gates}")
    import triton  # triton: the kernels extra
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (Triton interpreter, not a measurement)"
    result.update(gpu=gpu, torch=torch.__version__, triton=triton.__version__, dtype=args.dtype,
                  gates=args.gates, config=args.config, ours_kw=args.ours_kw, check_rows=CHECK_ROWS,
                  tolerance=out_tolerance(args.dtype), time=time.strftime("%Y-%m-%d %H:%M:%S"),
                  official=official_path(), impls=result.get("impls", []) + [n for n in impls
                                                                             if n not in result.get("impls", [])])
    result.setdefault("runs", {})
    save = (lambda: save_json(args.json, result)) if args.json else (lambda: None)
    print(f"{gpu} | torch {torch.__version__} | triton {triton.__version__} | {args.dtype} | gates {args.gates}")

    if args.config:
        from foxwindow.kernels.fox_triton import set_config  # the fused kernels: triton (the kernels extra)
        set_config(**parse_config(args.config))
    if configs:
        try:
            sweep(result, configs, shapes, args.dtype, args.device, args.gates, args.heads_json, save)
        except Unavailable as e:
            print(f"sweep skipped: {e}")
        return 0
    if args.accuracy:   # first: it is short, and a time limit should not cost it
        acc = accuracy(impls, args.dtype, args.device, args.gates, args.heads_json)
        result[accuracy_key()] = acc
        save()
        print("\nrelative L2 error vs float64, B{} T{} H{} D{}".format(*ACCURACY_SHAPE))
        for n, e in acc.items():
            print(f"  {n:<14}" + ("  ".join(f"{k} {v:.2e}" for k, v in e.items())
                                  if "skipped" not in e else e["skipped"]))
    print(f"\nTFLOP/s (median; ! = output check failed)\n{'mode / shape':<30}" + " ".join(f"{n:>12}" for n in impls))
    for shape in shapes:        # shape outer, modes inner: a cut keeps every finished shape whole
        bench_shape(result, shape, impls, args.dtype, modes, args.device, args.gates, args.heads_json, save)
    for mode in modes:
        for r in result["runs"].get(mode, []):
            for n, why in r["skipped"].items():
                if n in impls:
                    print(f"  skipped {n} {mode} B{r['B']} T{r['T']} H{r['H']} D{r['D']}: {why}")
    if args.json:
        print(f"\nsaved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
