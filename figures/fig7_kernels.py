"""Figure 7: fused-kernel throughput against sequence length T, from the benchmark JSON that
kernels/bench.py writes on a GPU. Skipped (never invented) when the JSON is absent.

Expected JSON (alternative key spellings are accepted, see _get):
  {"gpu": "NVIDIA H200", "results": [{"impl": "ours", "T": 8192, "fwd_tflops": 300.0,
                                      "fwdbwd_tflops": 250.0, "ours": true}, ...]}
"""
import json
import os
from collections import defaultdict

import matplotlib.pyplot as plt

import figstyle
from figstyle import Skip

# Reference anchors (docs/ANCHORS.md section 6), measured side by side on one H200 (torch 2.11 + Triton 3.6,
# bf16, gates near sigmoid(3 + N(0, 1))), H16 D128, B*T fixed
# (B8 T2048, B2 T8192, B1 T32768). (fwd, fwd+bwd) TFLOP/s as (lo, hi) where a range was reported.
ANCHORS = {
    "SDPA cuDNN, no forget gate (ceiling)": {2048: ((493, 515), (422, 436)), 8192: ((556, 556), (508, 513)),
                                              32768: ((580, 584), (556, 558))},
    "SDPA flash, no forget gate": {2048: ((284, 284), (257, 257)), 8192: ((320, 320), (298, 298)),
                                   32768: ((338, 338), (329, 329))},
    "official FoX Triton (no pruning)": {2048: ((275, 275), (261, 261)), 8192: ((340, 340), (317, 317)),
                                         32768: ((370, 370), (338, 338))},
    "flash-linear-attention 0.6.0": {2048: ((268, 268), (145, 145)), 8192: ((330, 330), (186, 186)),
                                     32768: ((369, 369), (208, 208))},
    "FlexAttention (compiled)": {2048: ((265, 265), (156, 156)), 8192: ((326, 326), (185, 185)),
                                 32768: ((361, 361), (223, 223))},
    "materialised T×T bias": {2048: ((12, 12), (20, 20)), 8192: ((11, 11), (20, 20))},
}
ANCHOR_MARKERS = "^vDsP*"


def _get(row, *keys):
    for k in keys:
        if row.get(k) is not None:
            return row[k]
    return None


def make(ctx):
    path = ctx.bench_json
    if not os.path.exists(path):
        raise Skip(f"{os.path.relpath(path)} not found (kernels/bench.py writes it on a GPU)")
    with open(path) as f:
        data = json.load(f)
    gpu = (_get(data, "gpu", "device", "device_name") if isinstance(data, dict) else None) or "unnamed GPU"
    series = defaultdict(lambda: {"fwd": [], "fwdbwd": []})
    ours = set()
    if isinstance(data, dict) and isinstance(data.get("runs"), dict):
        # kernels/bench.py: runs[mode] = [{B, T, H, D, tflops: {impl: TF/s}}]; the T scan is H16 D128
        for mode, key in (("fwd", "fwd"), ("fwd+bwd", "fwdbwd")):
            for r in data["runs"].get(mode, []):
                if r.get("H") != 16 or r.get("D") != 128:
                    continue
                for name, v in r.get("tflops", {}).items():
                    series[name][key].append((int(r["T"]), float(v)))
        ours = {"ours"}
    rows = data if isinstance(data, list) else (_get(data, "results", "rows") or [])
    for r in rows:
        name, T = _get(r, "impl", "name", "implementation", "method"), _get(r, "T", "seq_len", "seqlen")
        if name is None or T is None:
            continue
        if r.get("ours") or "ours" in str(name).lower():
            ours.add(name)
        for key, names in (("fwd", ("fwd_tflops", "tflops_fwd", "fwd")),
                           ("fwdbwd", ("fwdbwd_tflops", "tflops_fwdbwd", "fwd_bwd_tflops", "fwdbwd"))):
            v = _get(r, *names)
            if v is not None:
                series[name][key].append((int(T), float(v)))
    if not series:
        raise Skip(f"{path} has no rows with an implementation name, T and TFLOP/s")
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.2), sharey=True)
    for ax, key, what in zip(axes, ("fwd", "fwdbwd"), ("forward", "forward + backward")):
        for i, (name, s) in enumerate(sorted(series.items())):
            pts = sorted(s[key])
            if not pts:
                continue
            lab = name if "ours" in str(name).lower() else f"{name} (ours)"
            lw, lab = (2.6, lab) if name in ours else (1.3, name)
            if str(name).endswith("_acp"):     # pruned: its speed depends on the gates
                lab += " (pruned, effective TF/s)"
            ax.plot(*zip(*pts), "o-", lw=lw, ms=5, color=plt.cm.tab10(i % 10), label=lab)
        for i, ((name, a), mk) in enumerate(zip(ANCHORS.items(), ANCHOR_MARKERS)):
            Ts = sorted(a)
            xs = [T * 1.04 ** (i - 2.5) for T in Ts]        # small sideways offset so the markers stay apart
            j = 0 if key == "fwd" else 1
            mid = [sum(a[T][j]) / 2 for T in Ts]
            err = [[m - a[T][j][0] for T, m in zip(Ts, mid)], [a[T][j][1] - m for T, m in zip(Ts, mid)]]
            ax.errorbar(xs, mid, yerr=err, fmt=mk, mfc="none", mec="0.35", ecolor="0.35", ms=7, ls="none",
                        label=f"reference anchor (H200, H16 D128): {name}")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_title(f"{what}")
    axes[0].set_ylabel("throughput (TFLOP/s, dense-causal count)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    fig.suptitle(f"Fig. 7  FoX attention kernel throughput vs sequence length on {gpu} "
                 "(lines: this benchmark; hollow grey: published reference anchors)", y=1.01)
    fig.tight_layout()
    best = {n: max(v for _, v in s["fwd"]) for n, s in series.items() if s["fwd"]}
    desc = ", ".join(f"{n} {v:.0f}" for n, v in sorted(best.items(), key=lambda kv: -kv[1]))
    return figstyle.save(fig, ctx.out, "fig7_kernels"), f"{gpu}: peak fwd TFLOP/s {desc}"
