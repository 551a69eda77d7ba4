"""What the FoX kernels compile to on Hopper, without a GPU: registers, spills, shared memory and
the matrix instructions, per kernel and launch config.

    python -m foxwindow.kernels.resources                       # the shipped Hopper configs, D 32..256
    python -m foxwindow.kernels.resources --d 128 --sweep       # every candidate config at D = 128
    python -m foxwindow.kernels.resources --json out/res.json
    python -m foxwindow.kernels.resources --arch 80             # the configs an A100 gets (sm_80)
    python -m foxwindow.kernels.resources --d 128 --variants  # + packed varlen with pruning, one-pass backward
    python -m foxwindow.kernels.resources --d 128 --per-score   # instructions per score of every inner loop
    python -m foxwindow.kernels.resources --d 128 --per-score --official PATH   # and the official kernel's beside them
    python -m foxwindow.kernels.resources onepass --d 128 [--ordered] [--acp]   # the one-pass backward's readings

Triton compiles ahead of time for any target (here sm_90, the H100/H200) with the ptxas it ships,
and cuobjdump reads the cubin: REG is registers a thread (255 is the ceiling), STACK > 0 or
LOCAL > 0 means spills to local memory; loopLS counts the spill loads and stores inside loops
(between a backward branch and its target), which cost a local-memory round trip every iteration,
while spills before or after the loops cost once per program.
waits counts the wgmma waits (WARPGROUP.DEPBAR) in the SASS and C7515 is ptxas's advisory that the
wgmma instructions are serialised (one wait per HGMMA: none overlaps the next); loopI is the
instruction count of the longest loop body (one iteration; for the forward the diagonal loop;
the JSON's loop_sizes lists every loop's, in code order).
HGMMA counts Hopper's warpgroup matrix instructions (a kernel without them runs on the older
mma.sync path, HMMA, at about half the rate; sm_100's tcgen05 instructions are counted by
neither); LDGSTS / UTMALDG count asynchronous (pipelined) copies.
The compile gets what the JIT specialises at launch for the benchmark shapes (aligned pointers,
strides divisible by 16, GROUP == 1 a constant); without it the reading is of a kernel that never
runs. These readings come from this machine's Triton, which may differ from the GPU machine's in
details; the GPU benchmark is the judge, this is the cheap first filter.
"""
import collections
import contextlib
import glob
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from foxwindow import outputs  # noqa: E402
from foxwindow.kernels import fox_bwd_onepass as op  # noqa: E402
from foxwindow.kernels import fox_triton as kt  # noqa: E402

__all__ = ["SM90", "SMEM_LIMITS", "shipped", "ptxas_warnings", "compile_sm90", "CANDIDATES", "variant_rows",
           "official_rows", "fmt", "head_dims", "main", "loop_counts", "onepass_reading", "onepass_main"]

SM90 = GPUTarget("cuda", 90, 32)
# bytes of shared memory one block may use, by compute capability (CUDA's per-block opt-in maxima)
SMEM_LIMITS = {75: 65536, 80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448, 120: 101376}


def shipped(name, D, arch=90):
    """The launch config fox_triton._config picks on a GPU of compute capability `arch`."""
    major = arch // 10
    table = kt.HOPPER if major == 9 else kt.NEWER if major >= 10 else kt.AMPERE if major >= 8 else None
    return table[D][name] if table is not None and D in table else kt.SAFE[name]
# pointer arguments that carry the input dtype; every other pointer is float32 (CU: int32)
_DATA = {"Q", "K", "V", "O", "ORES", "DO", "DQ", "DK", "DV"}
_KERNELS = {"fwd": kt.fwd_kernel, "dkdv": kt.bwd_dkdv_kernel, "dq": kt.bwd_dq_kernel}


def _bin(tool):
    import triton.backends.nvidia as nv  # triton: the kernels extra
    path = os.path.join(os.path.dirname(nv.__file__), "bin", tool)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{tool} not found at {path} (Triton's NVIDIA backend ships it)")
    return path


def _ptxas(arch):
    """The ptxas Triton uses for sm_`arch` (3.9 ships two; older versions one)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas  # triton: the kernels extra
        return get_ptxas(arch).path
    except (ImportError, AttributeError):
        return _bin("ptxas")


def ptxas_warnings(ptx, arch=90):
    """Run ptxas on Triton's PTX once more, as Triton does, and return its performance advisories
    ("C7515 ..." lines). Triton discards ptxas's log, and a cached compile does not run ptxas at
    all, so the log is not otherwise available. C7515 says wgmma instructions were serialised:
    each one waits for the previous to finish instead of several being in flight."""
    name = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        p = subprocess.run([_ptxas(arch), "-v", "-lineinfo", f"--gpu-name={name}", src, "-o",
                            os.path.join(d, "k.cubin")], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"ptxas failed on Triton's PTX: {_last_line(p.stderr)}")
    return sorted({re.sub(r" in line \d+$", "", l.split("info    : ", 1)[-1].strip())
                   for l in p.stderr.splitlines() if re.search(r"\(C\d+\)", l)})


def _last_line(e):
    lines = [l for l in str(e).splitlines() if l.strip()]
    return lines[-1][:160] if lines else ""


def compile_sm90(name, D, cfg, dtype="bf16", group=1, fn=None, arch=90, **consts):
    """Compile kernel `name` ('fwd', 'dkdv', 'dq'; or any kernel `fn` with the same arguments)
    for sm_90 (or sm_`arch`) with cfg = (BLOCK_M, BLOCK_N, num_warps, num_stages) and GQA group
    size `group`; return its resource reading (a dict)."""
    fn = fn or _KERNELS[name]
    official = consts.pop("_official", False)
    bm, bn, warps, stages = cfg
    c = dict(D=D, BLOCK_M=bm, BLOCK_N=bn, VARLEN=False, PREC="tf32", ACP=False)
    if official:    # its own names; the innermost strides are 1, which the JIT makes constants
        c = {a: 1 for a in fn.arg_names if re.fullmatch(r"stride_\w*(k|lambda_n|index_[mn]b)", a)}
    if group == 1:          # the JIT turns an int argument equal to 1 into a constant, so do we
        c["GROUP"] = 1
    if name == "dkdv":
        c["SPLIT"] = group > 1                      # as the launcher sets it
        c["SQUARE"] = kt.DKDV_SQUARE                # Tq == Tk, as at every benchmark shape
    if name == "fwd":
        c["RES"] = dtype != "fp32"
        c["DIAG_N"] = kt.fwd_diag_n(bm, bn, warps, D, arch)    # as the launcher sets it
    if name == "dq" and not official:
        c["DIAG_N"] = kt.dq_diag_n(bm, bn, warps, D, arch, kt.torch.float32 if dtype == "fp32" else kt.torch.bfloat16)
    c.update(consts)
    c = {a: x for a, x in c.items() if a in fn.arg_names}
    sig = {}
    for a in fn.arg_names:
        if a in c:
            sig[a] = "constexpr"
        elif official:
            sig[a] = (f"*{dtype}" if a in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV") else
                      "*i32" if a in ("SEQ_START", "START_INDEX", "END_INDEX") else
                      "*fp32" if a.isupper() and a not in ("Z", "H", "M", "N", "P_SEQ") else
                      "fp32" if a == "sm_scale" else "i32")
        elif a in ("CU", "KLO", "QEND"):
            sig[a] = "*i32"
        elif a.isupper() and a not in ("H", "GROUP", "TQ", "TK"):   # those four are sizes
            sig[a] = f"*{dtype}" if a in _DATA else "*fp32"
        else:
            sig[a] = "fp32" if a.endswith("scale") else "i32"
    # What the JIT specialises at launch when every pointer is 16-byte aligned and every stride and
    # size is a multiple of 16 (all benchmark shapes): without it the tile loads compile to scalar
    # 2-byte loads with no cp.async, and the reading would describe a kernel that never runs.
    skip = set(getattr(fn, "do_not_specialize", ()))       # TQ, TK: one compile for all lengths
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if sig[a] != "constexpr" and not sig[a].startswith("fp") and a not in skip
             and not (a == "GROUP" and group % 16) and not (official and a == "Z")}   # Z: B = 2
    row = dict(kernel=name, D=D, dtype=dtype, group=group, arch=arch, cfg=list(cfg))
    try:
        target = SM90 if arch == 90 else GPUTarget("cuda", arch, 32)
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=c, attrs=attrs), target=target,
                           options=dict(num_warps=warps, num_stages=stages))
    except Exception as e:  # noqa: BLE001 - an uncompilable config is a reading, not a crash
        row["error"] = f"{type(e).__name__}: {_last_line(e)}"
        return row
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run([_bin("cuobjdump"), "-res-usage", f.name], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([_bin("cuobjdump"), "-sass", f.name], capture_output=True,
                              text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    ins = [(int(a, 16), op, rest) for a, op, rest in
           re.findall(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)(.*)$", sass, re.M)]
    ops = collections.Counter(op for _, op, _ in ins)
    # loops are the spans of backward branches; spills inside them cost every iteration
    loops = [(int(t, 16), a) for a, op, rest in ins if op == "BRA"
             for t in re.findall(r"0x([0-9a-f]+)", rest)[:1] if int(t, 16) < a]
    in_loop = sum(1 for a, op, _ in ins if op in ("STL", "LDL") and any(lo <= a <= hi for lo, hi in loops))
    # wgmma pipelining: every HGMMA is issued after a WARPGROUP.ARRIVE and retired by a
    # WARPGROUP.DEPBAR (wait). Several HGMMA per wait means they overlap; one each (with C7515
    # from ptxas) means they run one at a time.
    waits = sum(1 for _, op, rest in ins if op == "WARPGROUP" and rest.startswith(".DEPBAR"))
    warn = ptxas_warnings(k.asm["ptx"], arch)
    row.update(regs=int(m[1]), stack=int(m[2]), local=int(m[4]),
               smem=k.metadata.shared + int(m[3]),
               hgmma=ops["HGMMA"], mma=ops["HMMA"], ldgsts=ops["LDGSTS"], tma=ops["UTMALDG"],
               stl=ops["STL"], ldl=ops["LDL"], loop_spill=in_loop, wg_waits=waits,
               serialized=any("C7515" in w for w in warn), ptxas_warnings=warn,
               loop_ins=_loop_instructions(ins, loops),
               loop_sizes=[sum(1 for a, _, _ in ins if lo <= a <= hi) for lo, hi in sorted(loops)],
               loop_ops=[dict(collections.Counter(op for a, op, _ in ins if lo <= a <= hi))
                         for lo, hi in sorted(loops)])
    row["fits"] = row["smem"] <= SMEM_LIMITS.get(arch, SMEM_LIMITS[90])
    # issue slots a score costs in each loop: one iteration's instructions x warps over the
    # scores it covers (a BLOCK_M x BLOCK_N tile in every kernel here)
    # (the forward's and the dQ pass's diagonal loops, their second, run key tiles of fwd_diag_n and
    # dq_diag_n keys)
    widths = [bn] * len(row["loop_sizes"])
    if fn in (kt.fwd_kernel, kt.bwd_dq_kernel) and len(widths) == 2:
        widths[1] = c.get("DIAG_N") or bn
    row["ins_per_score"] = [round(n * warps / (bm * w), 3) for n, w in zip(row["loop_sizes"], widths)]
    return row


def _loop_instructions(ins, loops):
    """Instructions in the longest loop body (the off-diagonal key or query loop): what one
    iteration issues per thread."""
    if not loops:
        return 0
    lo, hi = max(loops, key=lambda l: l[1] - l[0])
    return sum(1 for a, _, _ in ins if lo <= a <= hi)


CANDIDATES = {
    # 128 x 128 at D = 128 is the official FoX kernel's tile: ~687 loop instructions per 128 keys
    # against ~906 (two iterations) for the shipped 128 x 64
    "fwd": [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3),
            (64, 128, 4, 3), (128, 64, 4, 3), (128, 32, 8, 4)],
    "dkdv": [(32, 128, 8, 3), (64, 128, 8, 2), (64, 128, 8, 3), (32, 64, 4, 3), (16, 128, 8, 3),
             (32, 128, 4, 3), (64, 64, 4, 2)],
    "dq": [(128, 64, 8, 2), (128, 64, 8, 3), (128, 32, 8, 3), (64, 64, 4, 3), (64, 32, 4, 3),
           (128, 128, 8, 2)],
}


def variant_rows(D, dtype="bf16", group=1, arch=90):
    """The shipped kernels as a packed batch with pruning compiled in (VARLEN and ACP), and the
    one-pass backward (workspace mode, pruning in), each at the config it runs with."""
    rows = []
    for name in ("fwd", "dkdv", "dq"):
        r = compile_sm90(name, D, shipped(name, D, arch), dtype, group, arch=arch, VARLEN=True, ACP=True)
        r["kernel"] = name + "+vl+acp"
        rows.append(r)
    r = onepass_reading(D, op.HOPPER.get(D, op.SAFE), dtype, group, arch=arch, acp=True)
    r["kernel"] = "onepass+acp"
    r["serialized"] = r.get("serialized", False) or r.get("wgmma_serialized", False)
    rows.append(r)
    return rows


def _official_module(path):
    """The official kernel's module, loaded from PATH (its forgetting_attention.py or a folder
    holding it) or .official/; None when there is none."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = path or os.path.join(root, ".official")
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "**", "forgetting_attention.py"), recursive=True))
        if not found:
            return None
        path = found[0]
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("fox_official_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The official kernel's three loops at the shape of B2 T8192 H16 (its own config functions pick
# the tiles); its arguments typed by name: the four data pointers and their gradients in the
# input dtype, the start-index tables int32, every other pointer float32, sm_scale float32, the
# rest int32 (sizes and strides, divisible by 16 as in the benchmark, num_groups 1).
_OFFICIAL = dict(fwd=("_fwd_kernel", "get_fwd_config"), dkdv=("_bwd_kv_kernel", "get_bwd_kv_config"),
                 dq=("_bwd_q_kernel", "get_bwd_q_config"))


def official_rows(path, dims, dtype="bf16", arch=90, B=2, T=8192, H=16):
    """Compile the official kernel's forward, dK/dV and dQ kernels for sm_`arch` with the configs
    its own config functions give at B, T, H (dense, causal, no pruning) and return readings as
    compile_sm90's. [] when no official kernel is found."""
    try:
        mod = _official_module(path)
    except Exception as e:  # noqa: BLE001
        return [dict(kernel="official", D=d, error=f"does not import: {_last_line(e)}") for d in dims]
    if mod is None:
        return []
    rows = []
    for D in dims:
        for name, (kname, cfgname) in _OFFICIAL.items():
            fn = getattr(mod, kname)
            cap = mod.torch.cuda.get_device_capability
            mod.torch.cuda.get_device_capability = lambda *a: (arch // 10, arch % 10)   # no GPU here
            try:
                bm, bn, stages, warps = getattr(mod, cfgname)(B, H, T, T, D, True)       # its order
            except Exception as e:  # noqa: BLE001
                rows.append(dict(kernel=name, D=D, error=f"{cfgname}: {_last_line(e)}"))
                continue
            finally:
                mod.torch.cuda.get_device_capability = cap
            cfg = (bm, bn, warps, stages)
            consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_DMODEL=D, D_HEAD=D, IS_CAUSAL=True, CAUSAL=True,
                          LARGER_M=False, HAS_SEQ_START=False, IS_ADAPTIVE=False, DIVISIBLE_M=True,
                          DIVISIBLE_N=True, num_groups=1)
            rows.append(dict(compile_sm90(name, D, cfg, dtype, fn=fn, arch=arch, _official=True, **consts),
                             impl="official"))
    return rows


# which of a kernel's loops (in code order) runs below the diagonal and which on it
LOOP_ROLES = dict(fwd=("below", "diagonal"), dkdv=("diagonal", "below"), dq=("below", "diagonal"))
DIAG_SHARE = 0.03       # the diagonal loops' share of iterations at B2 T8192 (2-4 of ~66-132 a program)


def predict(rows, D, diag_share=DIAG_SHARE):
    """The predicted speed of ours over the official kernel at head dim D if both are limited by
    instruction issue (the MMA work per score is the same): per kernel, instructions per score with
    our diagonal loop weighted by its share of iterations against the official single loop; forward
    alone and forward + backward (fwd + dK/dV + dQ). rows: compile_sm90 / official_rows readings.
    Returns {"fwd": ratio, "fwd+bwd": ratio, "ours": {...}, "official": {...}} or None when a reading
    is missing (an error, or a loop count other than the two / one expected)."""
    ours, off = {}, {}
    for r in rows:
        if r.get("D") != D or "error" in r or r["kernel"] not in LOOP_ROLES:
            continue
        x = r["ins_per_score"]
        if r.get("impl") == "official":
            if len(x) == 1:
                off[r["kernel"]] = x[0]
        elif len(x) == 2:
            roles = dict(zip(LOOP_ROLES[r["kernel"]], x))
            ours[r["kernel"]] = (1 - diag_share) * roles["below"] + diag_share * roles["diagonal"]
    if set(ours) != set(LOOP_ROLES) or set(off) != set(LOOP_ROLES):
        return None
    return {"fwd": off["fwd"] / ours["fwd"], "fwd+bwd": sum(off.values()) / sum(ours.values()),
            "ours": ours, "official": off}


def fmt(r):
    head = (f"{r['kernel']:6s} D{r['D']:<4d} {r['dtype']:5s} G{r['group']:<2d} "
            f"{str(tuple(r['cfg'])):18s}")
    if "error" in r:
        return head + "  " + r["error"]
    spill = f"{r['loop_spill']}" if r["loop_spill"] else "-"
    return (head + f" {r['regs']:4d} {r['stack']:5d} {spill:5s} {r['smem'] // 1024:5d}K"
            f" {'ok' if r['fits'] else 'NO':4s} {r['hgmma']:5d} {r['wg_waits']:5d}"
            f" {'SERIAL' if r['serialized'] else '-':6s} {r['mma']:4d} {r['ldgsts']:6d} {r['loop_ins']:5d}")


def head_dims(text):
    """--d's comma-separated head dims as ints >= 1; UsageError naming --d otherwise."""
    try:
        ds = [int(d) for d in text.split(",")]
    except ValueError:
        ds = []
    if not ds or min(ds) < 1:
        raise outputs.UsageError(f"--d: comma-separated head dims (ints >= 1); got {text!r}")
    return ds


def main(argv=None):
    ap = outputs.add_common(outputs.parser(__doc__.split("\n")[0]))
    ap.add_argument("--d", default="32,64,128,256", help="comma-separated head dims")
    ap.add_argument("--kernels", default="fwd,dkdv,dq")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--group", type=int, default=1, help="GQA group size (query heads per kv head)")
    ap.add_argument("--arch", type=int, default=90, choices=sorted(SMEM_LIMITS),
                    help="compute capability to compile for (90: H100/H200), with the config "
                         "fox_triton picks there")
    ap.add_argument("--sweep", action="store_true", help="every candidate config, not only the shipped one")
    ap.add_argument("--json", default="", help="also write the readings here")
    ap.add_argument("--variants", action="store_true",
                    help="also: fwd, dK/dV and dQ packed (VARLEN) with pruning (ACP) compiled in, and the "
                         "one-pass backward (workspace mode, with pruning), each at its shipped config")
    ap.add_argument("--per-score", action="store_true",
                    help="print every loop's instructions per score (loop instructions x warps / tile scores)")
    ap.add_argument("--official", default=None, metavar="PATH",
                    help="with --per-score: the official kernel's loops too (its forgetting_attention.py, or a "
                         "folder holding it; default .official/ when present)")
    args = ap.parse_args(argv)
    dims = head_dims(args.d)
    bad = [k for k in args.kernels.split(",") if k not in CANDIDATES]
    if bad:
        raise outputs.UsageError(f"--kernels: unknown {bad}; choose from {','.join(CANDIDATES)}")
    if args.json:
        args.json = outputs.check_writable(args.json, force=args.force, what="--json")      # before the compiles
    rows = []
    print("kernel D     dtype G   (BM, BN, W, S)    REG STACK loopLS SMEM fits HGMMA waits C7515  HMMA"
          " LDGSTS loopI")
    for D in dims:
        for name in args.kernels.split(","):
            cfgs = CANDIDATES[name] if args.sweep else [shipped(name, D, args.arch)]
            for cfg in cfgs:
                r = compile_sm90(name, D, cfg, args.dtype, args.group, arch=args.arch)
                rows.append(r)
                print(fmt(r), flush=True)
        if args.variants:
            for r in variant_rows(D, args.dtype, args.group, args.arch):
                rows.append(r)
                print(fmt(r), flush=True)
    if args.per_score:
        print("\ninstructions per score (loop instructions x warps / (BLOCK_M x BLOCK_N)), loops in code order")
        for r in rows:
            if "error" not in r:
                print(f"  ours     {r['kernel']:<14} D{r['D']:<4d} {str(tuple(r['cfg'])):18s} "
                      + "  ".join(f"{n} ins = {x:.3f}" for n, x in zip(r["loop_sizes"], r["ins_per_score"])))
        off = official_rows(args.official, dims, args.dtype, args.arch)
        rows += off
        for r in off:
            if "error" in r:
                print(f"  official {r['kernel']:<14} D{r['D']:<4d} {r['error']}")
            else:
                print(f"  official {r['kernel']:<14} D{r['D']:<4d} {str(tuple(r['cfg'])):18s} "
                      + "  ".join(f"{n} ins = {x:.3f}" for n, x in zip(r["loop_sizes"], r["ins_per_score"])))
        for D in dims:
            pr = predict(rows, D)
            if pr:
                print(f"  predicted, D{D}, if issue-bound (diagonal loops {DIAG_SHARE:.0%} of iterations): "
                      f"forward {pr['fwd']:.2f}x the official kernel, forward + backward {pr['fwd+bwd']:.2f}x")
    if args.json:
        outputs.write_result(args.json, kind="kernel-resources",
                             obj=dict(triton=triton.__version__, target=f"sm_{args.arch}", rows=rows))


# ----------------------------------------------------------------------------------------------
# the one-pass backward (fox_bwd_onepass): what it compiles to on Hopper, without a GPU
# ----------------------------------------------------------------------------------------------

def loop_counts(cache_dir):
    """Instructions per iteration of the longest loop (the span of a backward branch) in the
    cubin compiled into cache_dir, with its HGMMA, MUFU (exp2), FFMA/FADD/FMUL and STG counts."""
    cubins = glob.glob(os.path.join(cache_dir, "**", "*.cubin"), recursive=True)
    if len(cubins) != 1:
        return {}
    sass = subprocess.run([_bin("cuobjdump"), "-sass", cubins[0]], capture_output=True,
                          text=True, check=True).stdout
    ins = [(int(a, 16), op) for a, op in
           re.findall(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", sass, re.M)]
    spans = [(int(t, 16), a) for a, op, rest in
             re.findall(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?(BRA)(.*)$", sass, re.M)
             for t in re.findall(r"0x([0-9a-f]+)", rest)[:1] for a in [int(a, 16)] if int(t, 16) < a]
    if not spans:
        return {}
    lo, hi = max(spans, key=lambda s: s[1] - s[0])
    ops = collections.Counter(op for a, op in ins if lo <= a <= hi)
    return dict(loop_ins=sum(ops.values()),
                loop_ops={k: ops[k] for k in ("HGMMA", "HMMA", "MUFU", "FFMA", "FADD", "FMUL", "STG", "LDG",
                                               "LDGSTS", "LDS", "STS")})


def onepass_reading(D, cfg, dtype="bf16", group=1, arch=90, name="onepass", fn=None, ordered=False, acp=False):
    """Compile the one-pass kernel for sm_`arch` ahead of time (this module's method: the
    ptxas and cuobjdump Triton ships, the launch-time specialisation of the benchmark shapes) with
    cfg = (BLOCK_M, BLOCK_N, num_warps, num_stages); return resources' reading (registers, stack,
    loop spills, shared memory, HGMMA/HMMA/LDGSTS counts) plus ptxas's warnings and performance
    notes (C7512 / C7515: "wgmma.mma_async instructions are serialized", with the reason). `name`
    and `fn` read another kernel the same way (e.g. "dkdv", fox_triton.bwd_dkdv_kernel). Needs a
    process without TRITON_INTERPRET. acp: with adaptive computation pruning compiled in."""
    knobs = triton.knobs
    old = knobs.nvidia.dump_ptxas_log, knobs.cache.dir
    out = io.StringIO()
    consts = dict(ACP=acp) if fn is not None else dict(ORDERED=ordered, ASM_WAIT=ordered,
                                                       ARRIVALS=32 * cfg[2] if ordered else 1, ACP=acp)
    compile_ = triton.compile

    def compile_i32_sem(src, *a, **kw):      # resources types every other pointer as float32
        if "SEM" in getattr(src, "signature", {}):
            src.signature["SEM"] = "*i32"
        return compile_(src, *a, **kw)
    with tempfile.TemporaryDirectory() as tmp:
        knobs.nvidia.dump_ptxas_log, knobs.cache.dir = True, tmp      # a fresh compile: ptxas runs
        triton.compile = compile_i32_sem
        try:
            with contextlib.redirect_stdout(out):
                row = compile_sm90(name, D, tuple(cfg), dtype, group,
                                             fn=fn or op.bwd_onepass_kernel, arch=arch, **consts)
            if "error" not in row:
                row.update(loop_counts(tmp))
        finally:
            knobs.nvidia.dump_ptxas_log, knobs.cache.dir = old
            triton.compile = compile_
    log = out.getvalue()
    row["ptxas_warnings"] = sorted({line.split(":", 1)[-1].strip()[:160] for line in log.splitlines()
                                    if "warning" in line.lower() or "Performance Loss" in line})
    row["wgmma_serialized"] = "serialized" in log
    row["ptxas_log_lines"] = len(log.splitlines())      # 0 would mean ptxas never ran
    return row


def onepass_main(argv=None):
    """`python -m foxwindow.kernels.resources onepass [...]`: the one-pass backward's sm_90 readings."""
    ap = outputs.add_common(outputs.parser("sm_90 compile readings of the one-pass backward (no GPU)"))
    ap.add_argument("--d", default="64,128", help="comma-separated head dims")
    ap.add_argument("--cfg", action="append", default=[],
                    help="BLOCK_M,BLOCK_N,warps,stages (repeatable); default: the shipped Hopper config")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--group", type=int, default=1)
    ap.add_argument("--kernel", default="onepass", choices=["onepass", "fwd", "dkdv", "dq"],
                    help="read fox_triton's shipped kernels the same way, for comparison")
    ap.add_argument("--ordered", action="store_true", help='the dq_mode="ordered" variant')
    ap.add_argument("--acp", action="store_true", help="with adaptive computation pruning compiled in")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    dims = head_dims(args.d)
    if args.json:
        args.json = outputs.check_writable(args.json, force=args.force, what="--json")      # before the compiles
    fn = None if args.kernel == "onepass" else _KERNELS[args.kernel]
    rows = []
    for D in dims:
        default = op.HOPPER.get(D, op.SAFE) if fn is None else shipped(args.kernel, D)
        for cfg in [tuple(int(x) for x in c.split(",")) for c in args.cfg] or [default]:
            r = onepass_reading(D, cfg, args.dtype, args.group, name=args.kernel, fn=fn,
                                ordered=args.ordered, acp=args.acp)
            r["ordered"], r["acp"] = args.ordered, args.acp
            rows.append(r)
            print(json.dumps({k: r[k] for k in r if k not in ("arch",)}), flush=True)
    if args.json:
        outputs.write_result(args.json, dict(triton=triton.__version__, rows=rows), "kernel-resources")


if __name__ == "__main__":
    if sys.argv[1:2] == ["onepass"]:                 # the one-pass backward's readings
        sys.exit(outputs.cli(onepass_main, sys.argv[2:]))
    sys.exit(outputs.cli(main))
