"""Speed of the window toolkit on this machine, against its targets. Medians of repeats, one run.

python bench_laws.py [--repeats 5] [--json out.json] [--gpu-only]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

import forget
import heads
import renewal


def median_time(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def cpu_rows(a):
    """(what, seconds, rate, target, met) for the CPU targets."""
    rng = np.random.default_rng(0)
    rows = []
    lg = np.log(rng.beta(20, 1, 10_000_000))                                       # one trace, T = 1e7
    t = median_time(lambda: forget.windows(lg, 1e-3), a.repeats)
    rows.append(("per-query windows, numpy (T = 1e7)", t, f"{1e7 / t:.2e} rows/s", ">= 1e7 rows/s", 1e7 / t >= 1e7))
    lgt = torch.from_numpy(np.log(rng.beta(20, 1, (16, 2048, 64))).astype(np.float32))   # (B, T, H)
    t = median_time(lambda: forget.windows(lgt, 1e-3, dim=1), a.repeats)
    n = lgt.numel()
    rows.append(("per-query windows, torch (16, 2048, 64)", t, f"{n / t:.2e} rows/s", ">= 1e7 rows/s", n / t >= 1e7))
    for g in forget.SEED_GATES:
        t = median_time(lambda: renewal.exact_first_passage(g, 1e-3), a.repeats)
        rows.append((f"exact moments {g}", t, f"{t * 1e3:.0f} ms", "< 100 ms", t < 0.1))
    # far windows: time, and the returned error estimate against the 1e-8 relative target
    for g, eps in ((forget.LogitNormalGate(6, 0.1), 1e-12), (forget.LogitNormalGate(2, 0.5), 1e-300),
                   (forget.LogitNormalGate(12, 0.5), 1e-3)):
        t = median_time(lambda: renewal.exact_first_passage(g, eps), a.repeats)
        r = renewal.exact_first_passage(g, eps)
        rel = max(r.mean_err / r.mean, r.var_err / r.var)
        rows.append((f"exact moments {g}, eps {eps:g} (E[W] {r.mean:.3g})", t, f"{t:.2f} s, err {rel:.0e}",
                     "< 3 s, <= 1e-8", t < 3 and rel <= 1e-8))
    t = median_time(lambda: forget.first_passage_mc(forget.SEED_GATES[0], 1e-3, 1_000_000, seed=1),
                    max(1, a.repeats // 2))
    rows.append(("Monte Carlo 1e6 trials, seed gate 1", t, f"{t:.2f} s", "<= 2 s", t <= 2))
    t = median_time(lambda: forget.synthetic_table(progress=False), 1)
    rows.append(("forget.py --synthetic table", t, f"{t:.1f} s", "< 30 s", t < 30))
    if os.path.exists(a.checkpoint):
        t = median_time(lambda: heads.analyse_model(a.checkpoint, n_seq=16, progress=False), 1)
        rows.append(("capture + per-head analysis, 16 x 2048", t, f"{t:.1f} s", "<= 20 s", t <= 20))
    return rows


def gpu_rows(a):
    """The batched window extraction on the GPU (target >= 5e8 rows/s on an H200)."""
    lgc = torch.log(torch.rand(64, 8192, 64, device="cuda", dtype=torch.float32) * 0.05 + 0.95)   # (B, T, H)

    def run_cuda():
        forget.windows(lgc, 1e-3, dim=1)
        torch.cuda.synchronize()
    run_cuda()
    t = median_time(run_cuda, a.repeats)
    n = lgc.numel()
    return [(f"per-query windows, {torch.cuda.get_device_name()} (64, 8192, 64)", t, f"{n / t:.2e} rows/s",
             ">= 5e8 rows/s", n / t >= 5e8)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--checkpoint", default=heads.DEFAULT_CHECKPOINT)
    p.add_argument("--gpu-only", action="store_true", help="only the GPU row (the CPU rows are for the 2-core machine)")
    a = p.parse_args(argv)
    if a.gpu_only and not torch.cuda.is_available():
        print("--gpu-only: no CUDA device here")
        return 1
    rows = ([] if a.gpu_only else cpu_rows(a)) + (gpu_rows(a) if torch.cuda.is_available() else [])

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; median of {a.repeats}")
    w = max(len(r[0]) for r in rows)
    print(f"{'what':{w}s} {'median':>10s} {'rate':>18s} {'target':>15s}  met")
    for name, t, rate, target, ok in rows:
        print(f"{name:{w}s} {t:10.4f} {rate:>18s} {target:>15s}  {'yes' if ok else 'NO'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([dict(what=r[0], seconds=r[1], rate=r[2], target=r[3], met=bool(r[4])) for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
