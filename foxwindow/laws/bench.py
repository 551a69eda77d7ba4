"""Speed of the window toolkit on this machine, against its targets. Medians of repeats, one run.

python bench_laws.py [--repeats 5] [--json out.json] [--gpu-only]
"""
import os
import statistics
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

from foxwindow import outputs
from foxwindow.heads import driver as heads
from foxwindow.laws import exact, gates, lawtable
from foxwindow.models import fox as model

__all__ = ["median_time", "cpu_rows", "N_CPU_ROWS", "gpu_rows", "main"]


def median_time(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def cpu_rows(a, bar):
    """(what, seconds, rate, target, met) for the CPU targets; bar: a tqdm advanced once per row."""
    rng = np.random.default_rng(0)
    rows = _Rows(bar)
    lg = np.log(rng.beta(20, 1, 10_000_000))                                       # one trace, T = 1e7
    t = median_time(lambda: gates.windows(lg, eps=1e-3), a.repeats)
    rows.append(("per-query windows, numpy (T = 1e7)", t, f"{1e7 / t:.2e} rows/s", ">= 1e7 rows/s", 1e7 / t >= 1e7))
    lgt = torch.from_numpy(np.log(rng.beta(20, 1, (16, 2048, 64))).astype(np.float32))   # (B, T, H)
    t = median_time(lambda: gates.windows(lgt, eps=1e-3, dim=1), a.repeats)
    n = lgt.numel()
    rows.append(("per-query windows, torch (16, 2048, 64)", t, f"{n / t:.2e} rows/s", ">= 1e7 rows/s", n / t >= 1e7))
    for g in gates.SEED_GATES:
        t = median_time(lambda: exact.exact_first_passage(g, eps=1e-3), a.repeats)
        rows.append((f"exact moments {g}", t, f"{t * 1e3:.0f} ms", "< 100 ms", t < 0.1))
    # far windows: time, and the returned error estimate against the 1e-8 relative target
    for g, eps in ((gates.LogitNormalGate(6, 0.1), 1e-12), (gates.LogitNormalGate(2, 0.5), 1e-300),
                   (gates.LogitNormalGate(12, 0.5), 1e-3)):
        t = median_time(lambda: exact.exact_first_passage(g, eps=eps), a.repeats)
        r = exact.exact_first_passage(g, eps=eps)
        rel = max(r.mean_err / r.mean, r.var_err / r.var)
        rows.append((f"exact moments {g}, eps {eps:g} (E[W] {r.mean:.3g})", t, f"{t:.2f} s, err {rel:.0e}",
                     "< 3 s, <= 1e-8", t < 3 and rel <= 1e-8))
    t = median_time(lambda: gates.first_passage_mc(gates.SEED_GATES[0], eps=1e-3, trials=1_000_000, seed=1),
                    max(1, a.repeats // 2))
    rows.append(("Monte Carlo 1e6 trials, seed gate 1", t, f"{t:.2f} s", "<= 2 s", t <= 2))
    t = median_time(lambda: lawtable.synthetic_table(progress=False), 1)
    rows.append(("forget.py --synthetic table", t, f"{t:.1f} s", "< 30 s", t < 30))
    t = median_time(lambda: heads.analyse_model(a.checkpoint, n_seq=16, progress=False), 1)
    rows.append(("capture + per-head analysis, 16 x 2048", t, f"{t:.1f} s", "<= 20 s", t <= 20))
    return list(rows)


class _Rows(list):
    """A list that advances a progress bar on every append."""

    def __init__(self, bar):
        super().__init__()
        self.bar = bar

    def append(self, row):
        super().append(row)
        self.bar.set_postfix_str(row[0][:40])
        self.bar.update()


N_CPU_ROWS = 2 + len(gates.SEED_GATES) + 3


def gpu_rows(a):
    """The batched window extraction on the GPU (target >= 5e8 rows/s on an H200)."""
    lgc = torch.log(torch.rand(64, 8192, 64, device="cuda", dtype=torch.float32) * 0.05 + 0.95)   # (B, T, H)

    def run_cuda():
        gates.windows(lgc, eps=1e-3, dim=1)
        torch.cuda.synchronize()
    run_cuda()
    t = median_time(run_cuda, a.repeats)
    n = lgc.numel()
    return [(f"per-query windows, {torch.cuda.get_device_name()} (64, 8192, 64)", t, f"{n / t:.2e} rows/s",
             ">= 5e8 rows/s", n / t >= 5e8)]


@outputs.scoped
def main(argv=None):
    p = outputs.parser(__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per row (the median is reported)")
    p.add_argument("--json", default=None, help="write the rows as JSON to this path")
    p.add_argument("--checkpoint", default=heads.DEFAULT_CHECKPOINT, help="FoX checkpoint of the capture row")
    p.add_argument("--gpu-only", action="store_true", help="only the GPU row (the CPU rows are for the 2-core machine)")
    outputs.add_common(p)
    a = p.parse_args(argv)
    outputs.positive("--repeats", a.repeats)
    if a.gpu_only and not torch.cuda.is_available():
        raise outputs.UsageError("--gpu-only: no CUDA device here")
    if not a.gpu_only:
        a.checkpoint = outputs.input_file("--checkpoint", a.checkpoint)
        try:
            model.load_checkpoint(a.checkpoint)
        except ValueError as exc:
            raise outputs.UsageError(f"--checkpoint: {exc}") from None
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    gpu = torch.cuda.is_available()
    bar = tqdm(total=(0 if a.gpu_only else N_CPU_ROWS) + gpu, desc="bench", unit="row", file=sys.stderr)
    rows = [] if a.gpu_only else cpu_rows(a, bar)
    if gpu:
        rows += gpu_rows(a)
        bar.update()
    bar.close()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; "
          f"median of {a.repeats}")
    w = max(len(r[0]) for r in rows)
    print(f"{'what':{w}s} {'median':>10s} {'rate':>18s} {'target':>15s}  met")
    for name, t, rate, target, ok in rows:
        print(f"{name:{w}s} {t:10.4f} {rate:>18s} {target:>15s}  {'yes' if ok else 'NO'}")
    if a.json:
        outputs.write_result(a.json, kind="bench-laws",
                             obj=[dict(what=r[0], seconds=r[1], rate=r[2], target=r[3], met=bool(r[4]))
                                    for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
