"""Side-by-side timing of causal FoX attention implementations on one GPU.

    python kernels/bench.py                          # ANCHORS.md shapes + a T scan, bf16
    python kernels/bench.py --shapes 8,2048,16,128 --fwd-only
    python kernels/bench.py --accuracy               # errors vs float64 on B2 T777 H4 D128 too

Implementations (each skipped, with the reason, when it cannot run): ours (kernels.fox_triton);
PyTorch SDPA with the flash and cuDNN backends (no forget gate: the ceiling); FlexAttention,
compiled, with the FoX score_mod; flash-linear-attention's parallel_forgetting_attn (fla-core
0.6.0); the materialised T x T bias in PyTorch. Same bf16 inputs for all, (B, T, H, D) layout,
log-gates log(sigmoid(3 + N(0, 1))). Median of triton.testing.do_bench (warm-up 25 ms, 100 ms of
repeats). TFLOP/s by the dense-causal count: forward 4 B H T^2 D / 2, forward+backward 3.5x.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ANCHOR_SHAPES = [(8, 2048, 16, 128), (2, 8192, 16, 128), (1, 32768, 16, 128), (4, 4096, 32, 64)]
SCAN_T = [512, 1024, 2048, 4096, 8192, 16384]     # at B * T = 16384 tokens, H16 D128


# ------------------------------------------------------------------------------------------------
# implementations: each maps (q, k, v, log_fgate) in (B, T, H, D) / (B, T, H) to o (B, T, H, D)
# ------------------------------------------------------------------------------------------------

def _why(e):
    """One line saying why an implementation was skipped."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def impl_ours():
    from kernels.fox_triton import fox_attention_triton
    return fox_attention_triton


def _sdpa(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)

    def f(q, k, v, log_fgate):      # no gate: the ceiling a FoX kernel is measured against
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
        return o.transpose(1, 2)
    return f


def impl_sdpa_flash():
    return _sdpa("FLASH_ATTENTION")


def impl_sdpa_cudnn():
    return _sdpa("CUDNN_ATTENTION")


def impl_flex():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    masks = {}

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    @torch.compile(dynamic=False)
    def fox_flex(q, k, v, c, block_mask):
        ck = c.clone()      # a grad-requiring capture may be indexed only once per score_mod

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + c[b, h, q_idx] - ck[b, h, kv_idx]
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)

    def f(q, k, v, log_fgate):
        T = q.shape[1]
        if T not in masks:  # B = H = None: one (T, T) block mask, not B * H of them
            masks[T] = create_block_mask(causal, None, None, T, T, device=q.device)
        c = torch.cumsum(log_fgate, dim=1).transpose(1, 2)                  # (B, H, T)
        o = fox_flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), c, masks[T])
        return o.transpose(1, 2)
    return f


def impl_fla():
    os.environ.setdefault("FLA_TILELANG", "0")
    try:
        from fla.ops.forgetting_attn import parallel_forgetting_attn
    except ImportError:
        from fla.ops.forgetting_attn.parallel import parallel_forgetting_attn
    return lambda q, k, v, log_fgate: parallel_forgetting_attn(q, k, v, log_fgate)


def impl_materialised():
    def f(q, k, v, log_fgate):
        B, T, H, D = q.shape
        c = torch.cumsum(log_fgate, dim=1).transpose(1, 2)                  # (B, H, T)
        s = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)).float() * D ** -0.5
        s = s + c[..., :, None] - c[..., None, :]                           # (B, H, T, T)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        p = torch.softmax(s, dim=-1).to(q.dtype)
        return (p @ v.transpose(1, 2)).transpose(1, 2)
    return f


IMPLS = {
    "ours": impl_ours,
    "sdpa_cudnn": impl_sdpa_cudnn,
    "sdpa_flash": impl_sdpa_flash,
    "flex": impl_flex,
    "fla": impl_fla,
    "materialised": impl_materialised,
}
GATED = {"ours", "flex", "fla", "materialised"}


# ------------------------------------------------------------------------------------------------

def inputs(B, T, H, D, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g, dtype=torch.float32).to(dtype)
    q, k, v = r(B, T, H, D), r(B, T, H, D), r(B, T, H, D)
    log_fgate = F.logsigmoid(3 + torch.randn(B, T, H, device="cuda", generator=g))
    return q, k, v, log_fgate, r(B, T, H, D)


def flops(B, T, H, D, fwd_only):
    f = 4 * B * H * T * T * D / 2
    return f if fwd_only else 3.5 * f


def time_one(fn, q, k, v, log_fgate, do, fwd_only, gated):
    from triton.testing import do_bench
    if fwd_only:
        with torch.no_grad():
            return do_bench(lambda: fn(q, k, v, log_fgate), warmup=25, rep=100, return_mode="median")
    x = [t.detach().requires_grad_() for t in (q, k, v, log_fgate)]
    wrt = x if gated else x[:3]     # the ungated baselines have no log_fgate path
    # autograd.grad rather than backward(): nothing accumulates into .grad between repeats
    return do_bench(lambda: torch.autograd.grad(fn(*x), wrt, do), warmup=25, rep=100,
                    return_mode="median")


def materialised_fits(B, T, H, free_bytes):
    # a few (B, H, T, T) float32 tensors; past T = 8192 it takes seconds a call and says nothing new
    return T <= 8192 and 6 * 4 * B * H * T * T < 0.8 * free_bytes


def bench(shapes, impls, dtype, fwd_only, on_row=lambda rows: None):
    rows = []
    for (B, T, H, D) in shapes:
        row = dict(B=B, T=T, H=H, D=D, ms={}, tflops={}, skipped={})
        q, k, v, log_fgate, do = inputs(B, T, H, D, dtype)
        for name in impls:
            if name == "materialised" and not materialised_fits(B, T, H, torch.cuda.mem_get_info()[0]):
                row["skipped"][name] = "T x T tensors too large (or T > 8192)"
                continue
            try:
                fn = IMPLS[name]()
                ms = time_one(fn, q, k, v, log_fgate, do, fwd_only, name in GATED)
                row["ms"][name] = ms
                row["tflops"][name] = flops(B, T, H, D, fwd_only) / ms / 1e9
            except Exception as e:   # a missing package, an unsupported shape, out of memory
                row["skipped"][name] = _why(e)
            torch.cuda.empty_cache()
        rows.append(row)
        print(fmt_row(row, impls), flush=True)
        on_row(rows)        # save as we go: a run cut short by a time limit keeps its rows
    return rows


def accuracy(impls, dtype, B=2, T=777, H=4, D=128):
    """Relative L2 errors of out and the four gradients against float64 (gated implementations)."""
    from fox_attention import forgetting_attention_reference
    q, k, v, log_fgate, do = inputs(B, T, H, D, dtype, seed=1)
    x64 = [t.double().requires_grad_() for t in (q, k, v, log_fgate)]
    o64 = forgetting_attention_reference(*x64)
    ref = [o64.detach()] + list(torch.autograd.grad(o64, x64, do.double()))
    res = {}
    for name in impls:
        if name not in GATED:
            continue
        try:
            x = [t.detach().clone().requires_grad_() for t in (q, k, v, log_fgate)]
            o = IMPLS[name]()(*x)
            got = [o.detach()] + list(torch.autograd.grad(o, x, do))
            res[name] = {n: ((a.double() - b).norm() / b.norm()).item()
                         for n, a, b in zip(["out", "dq", "dk", "dv", "dlog_fgate"], got, ref)}
        except Exception as e:
            res[name] = {"skipped": _why(e)}
    return res


def fmt_row(row, impls):
    shape = f"B{row['B']} T{row['T']} H{row['H']} D{row['D']}"
    cells = [f"{row['tflops'][n]:7.1f}" if n in row["tflops"] else "      -" for n in impls]
    return f"{shape:<22}" + " ".join(f"{c:>12}" for c in cells)


def plot(rows, impls, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [f"B{r['B']}\nT{r['T']}\nH{r['H']} D{r['D']}" for r in rows]
    width = 0.8 / max(len(impls), 1)
    for i, n in enumerate(impls):
        ys = [r["tflops"].get(n, 0.0) for r in rows]
        ax.bar([j + i * width for j in range(len(rows))], ys, width, label=n)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))], labels, fontsize=7)
    ax.set_ylabel("TFLOP/s (dense-causal count)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


# issue targets on the H200, bf16, causal: (mode, D, smallest T) -> TF/s
TARGETS = {("fwd", 128, 8192): 500, ("fwd+bwd", 128, 8192): 450, ("fwd", 64, 4096): 380}


def report(data):
    """Markdown tables of a saved run: TF/s per shape and implementation, ours over cuDNN (the
    no-gate ceiling) and over flash-linear-attention, and the targets met or not."""
    out = [f"{data['gpu']}, torch {data.get('torch', '?')}, triton {data.get('triton', '?')}, "
           f"{data.get('dtype', '?')}, {data.get('time', '')}"]
    for mode, rows in data["runs"].items():
        impls = [n for n in data["impls"] if any(n in r["tflops"] for r in rows)]
        out += ["", f"{mode}, TF/s (median of do_bench, dense-causal count)", "",
                "| shape | " + " | ".join(impls) + " | ours / cudnn | ours / fla | target |",
                "|" + " --- |" * (len(impls) + 4)]
        for r in rows:
            tf = r["tflops"]
            ratio = lambda other: f"{tf['ours'] / tf[other]:.2f}" if "ours" in tf and other in tf else "-"
            goal = [t for (m, D, T0), t in TARGETS.items() if m == mode and D == r["D"] and r["T"] >= T0]
            met = "-" if not goal or "ours" not in tf else \
                f"{goal[0]}: {'met' if tf['ours'] >= goal[0] else 'not met'}"
            cells = [f"{tf[n]:.0f}" if n in tf else "-" for n in impls]
            out.append(f"| B{r['B']} T{r['T']} H{r['H']} D{r['D']} | " + " | ".join(cells)
                       + f" | {ratio('sdpa_cudnn')} | {ratio('fla')} | {met} |")
    acc = data.get("accuracy_B2_T777_H4_D128")
    if acc:
        out += ["", "relative L2 error vs float64, B2 T777 H4 D128", "",
                "| impl | out | dq | dk | dv | dlog_fgate |", "| --- | --- | --- | --- | --- | --- |"]
        for n, e in acc.items():
            out.append(f"| {n} | " + (" | ".join(f"{e[k]:.1e}" for k in ("out", "dq", "dk", "dv", "dlog_fgate"))
                                      if "skipped" not in e else e["skipped"] + " | | | |") + " |")
    return "\n".join(out)


def parse_config(s):
    """'fwd=128,64,8,3;dkdv=32,128,8,3' -> {'fwd': (128, 64, 8, 3), 'dkdv': (32, 128, 8, 3)}"""
    try:
        return {kv.split("=")[0].strip(): tuple(int(x) for x in kv.split("=")[1].split(","))
                for kv in s.split(";") if kv.strip()}
    except (IndexError, ValueError):
        raise SystemExit(f"a config wants 'fwd=BM,BN,warps,stages;dkdv=...;dq=...'; got {s!r}")


def sweep(configs, shapes, dtype):
    """Ours under each launch config ('' = the shipped one), forward and forward+backward, in one
    process (one import, compiles cached per config)."""
    from kernels.fox_triton import fox_attention_triton, set_config
    out = []
    print(f"\nconfig sweep, ours, TFLOP/s\n{'config':<44} {'shape':<22} {'fwd':>7} {'fwd+bwd':>8}")
    for (B, T, H, D) in shapes:
        q, k, v, log_fgate, do = inputs(B, T, H, D, dtype)
        for cfg in configs:
            row = dict(config=cfg, B=B, T=T, H=H, D=D)
            try:
                set_config(**parse_config(cfg))
                for mode in ("fwd", "fwd+bwd"):
                    ms = time_one(fox_attention_triton, q, k, v, log_fgate, do, mode == "fwd", True)
                    row[mode] = flops(B, T, H, D, mode == "fwd") / ms / 1e9
            except Exception as e:  # noqa: BLE001 - out of resources etc.: a reading
                row["error"] = _why(e)
            finally:
                set_config()
            out.append(row)
            cells = (f"{row['fwd']:7.1f} {row['fwd+bwd']:8.1f}" if "error" not in row else row["error"])
            print(f"{cfg or '(shipped)':<44} {'B%d T%d H%d D%d' % (B, T, H, D):<22} {cells}", flush=True)
    return out


def merge_into(path, result):
    """Add this run's implementations to an earlier bench.py JSON (rows matched by shape and mode),
    so that a slow implementation can be timed in a separate, time-limited run."""
    with open(path) as f:
        base = json.load(f)
    for mode, rows in result["runs"].items():
        have = {(r["B"], r["T"], r["H"], r["D"]): r for r in base["runs"].setdefault(mode, [])}
        for r in rows:
            key = (r["B"], r["T"], r["H"], r["D"])
            if key not in have:
                base["runs"][mode].append(r)
                continue
            for field in ("ms", "tflops", "skipped"):
                have[key].setdefault(field, {}).update(r[field])
    base["impls"] = base["impls"] + [n for n in result["impls"] if n not in base["impls"]]
    with open(path, "w") as f:
        json.dump(base, f, indent=1)


def parse_shapes(s):
    try:
        return [tuple(int(x) for x in part.split(",")) for part in s.split(";") if part.strip()]
    except ValueError:
        raise SystemExit(f"--shapes wants 'B,T,H,D;B,T,H,D'; got {s!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", help="'B,T,H,D;...' (default: ANCHORS.md shapes and a T scan)")
    ap.add_argument("--no-scan", action="store_true", help="skip the T scan at B*T = 16384, H16 D128")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--fwd-only", action="store_true", help="time the forward only")
    ap.add_argument("--both", action="store_true", help="time forward and forward+backward")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS))
    ap.add_argument("--accuracy", action="store_true", help="also errors vs float64 on B2 T777 H4 D128")
    ap.add_argument("--config", default="",
                    help="override our launch configs, e.g. 'fwd=128,64,8,3;dkdv=32,128,8,3'")
    ap.add_argument("--sweep", default="",
                    help="time ours under each of these '|'-separated configs ('' = shipped) and stop")
    ap.add_argument("--json", default="figures/kernel_bench.json", help="where to save the results")
    ap.add_argument("--report", default="",
                    help="print markdown tables of a saved JSON (no GPU needed) and stop")
    ap.add_argument("--merge-into", default="",
                    help="also add this run's implementations to an earlier JSON of bench.py")
    ap.add_argument("--out", default="figures/kernel_bench.png", help="where to save the plot ('' for none)")
    args = ap.parse_args()

    if args.report:
        with open(args.report) as f:
            print(report(json.load(f)))
        return 0
    if not torch.cuda.is_available():
        print("bench.py times GPU kernels and needs CUDA; none is available here. "
              "Run the correctness tests instead: pytest kernels/test_kernels.py")
        return 1
    impls = [n.strip() for n in args.impls.split(",") if n.strip()]
    unknown = [n for n in impls if n not in IMPLS]
    if unknown:
        raise SystemExit(f"unknown implementation(s) {unknown}; choose from {list(IMPLS)}")
    dtype = dict(bf16=torch.bfloat16, fp16=torch.float16)[args.dtype]
    shapes = parse_shapes(args.shapes) if args.shapes else list(ANCHOR_SHAPES)
    if not args.shapes and not args.no_scan:
        shapes += [(16384 // T, T, 16, 128) for T in SCAN_T if (16384 // T, T, 16, 128) not in shapes]

    if args.config:
        from kernels.fox_triton import set_config
        set_config(**parse_config(args.config))

    import triton
    gpu = torch.cuda.get_device_name()
    print(f"{gpu} | torch {torch.__version__} | triton {triton.__version__} | {args.dtype}")
    if args.sweep:
        rows = sweep([c.strip() for c in args.sweep.split("|")], shapes, dtype)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(gpu=gpu, triton=triton.__version__, dtype=args.dtype, sweep=rows), f, indent=1)
        return 0
    result = dict(gpu=gpu, torch=torch.__version__, triton=triton.__version__, dtype=args.dtype,
                  config=args.config,
                  impls=impls, time=time.strftime("%Y-%m-%d %H:%M:%S"), runs={})
    modes = ["fwd", "fwd+bwd"] if args.both else ["fwd"] if args.fwd_only else ["fwd+bwd"]

    def save():
        if args.json:
            os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)

    if args.accuracy:   # first: it is short, and a time limit should not cost it
        acc = accuracy(impls, dtype)
        result["accuracy_B2_T777_H4_D128"] = acc
        save()
        print("\nrelative L2 error vs float64, B2 T777 H4 D128")
        for n, e in acc.items():
            print(f"  {n:<14}" + ("  ".join(f"{k} {v:.2e}" for k, v in e.items())
                                  if "skipped" not in e else e["skipped"]))
    for mode in modes:
        print(f"\nTFLOP/s, {mode} (median of do_bench)")
        print(f"{'shape':<22}" + " ".join(f"{n:>12}" for n in impls))
        rows = bench(shapes, impls, dtype, mode == "fwd",
                     on_row=lambda rows, mode=mode: (result["runs"].__setitem__(mode, rows), save()))
        result["runs"][mode] = rows
        for r in rows:
            for n, why in r["skipped"].items():
                print(f"  skipped {n} at B{r['B']} T{r['T']}: {why}")
    if args.json:
        save()
        print(f"\nsaved {args.json}")
    if args.merge_into:
        merge_into(args.merge_into, result)
        print(f"merged into {args.merge_into}")
    if args.out:
        mode = modes[-1]
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        plot(result["runs"][mode], impls, args.out, f"{gpu}, {args.dtype}, {mode}")
        print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
