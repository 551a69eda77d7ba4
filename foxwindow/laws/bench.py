"""Speed of the window toolkit on this machine, against its targets. Medians of repeats, one run; the hot paths
(windows, exact moments, laws with atoms) as ratios against a baseline timed beside them (alternated repeats).

python bench_laws.py [--repeats 5] [--json out.json] [--gpu-only]
"""
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch
from scipy import fft as sfft
from tqdm import tqdm

from foxwindow import outputs
from foxwindow.heads import driver as heads
from foxwindow.laws import discrete, exact, gates, lawtable
from foxwindow.models import fox as model

__all__ = ["median_time", "paired_times", "fft_lattice", "fft_lattice_at", "window_rows", "hot_rows", "cpu_rows",
           "N_CPU_ROWS", "gpu_rows", "main"]

_GL_U, _GL_W = np.polynomial.legendre.leggauss(12)
_GL_U, _GL_W = (_GL_U + 1) / 2, _GL_W / 2


def paired_times(fns, repeats):
    """Median seconds of each of fns, run in turn (A B A B ...) `repeats` times: ratios taken side by side."""
    ts = [[] for _ in fns]
    for _ in range(repeats):
        for k, f in enumerate(fns):
            t = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - t)
    return [statistics.median(t) for t in ts]


def fft_lattice(gate, L, h, richardson=True):
    """The plain FFT renewal lattice, the baseline of the exact moments: X split between its two neighbouring
    points of spacing h (mean-preserving, from the CDF by 12-point Gauss-Legendre), L half way between points,
    the walk's pmf on the points below L iterated by one FFT convolution a step until the survival is below
    1e-30, E[W] and Var[W] read off the survival; richardson: the h^2 extrapolation from h and h/2.
    Returns (E[W], Var[W])."""
    if richardson:
        (m1, v1), (m2, v2) = fft_lattice(gate, L, h, False), fft_lattice(gate, L, h / 2, False)
        return (4 * m2 - m1) / 3, (4 * v2 - v1) / 3
    K = max(int(round(L / h - 0.5)), 0)
    h = L / (K + 0.5)
    k = np.arange(-1, K + 1, dtype=np.float64)
    I = gate.cdf((k[:, None] + _GL_U[None, :]) * h) @ _GL_W    # (K + 2,) int_0^1 F((k + u) h) du
    I[0] = 0.0
    p = np.diff(I)                                             # (K + 1,) mass at the points 0..K
    nf = sfft.next_fast_len(2 * K + 2, real=True)
    P = sfft.rfft(p, nf)
    u = np.zeros(K + 1)
    u[0] = 1.0
    s = [1.0]
    while s[-1] > 1e-30:
        u = sfft.irfft(sfft.rfft(u, nf) * P, nf)[:K + 1]
        s.append(float(u.sum()))
    s = np.array(s)
    e1, e2 = s.sum(), np.dot(2 * np.arange(len(s)) + 1, s)     # E[N], E[N^2]
    return e1 - 1.0, e2 - e1 * e1


def fft_lattice_at(gate, L, rel_mean, rel_var, ref):
    """The coarsest h = min(sd X, kappa) / c, c = 8, 16, ..., 1024, at which fft_lattice is within rel_mean and
    rel_var (relative) of ref (mean, var); None if none is."""
    m = gate.moments()
    for c in (8, 16, 32, 64, 128, 256, 512, 1024):
        h = min(math.sqrt(m.sigma2), m.kappa) / c
        mean, var = fft_lattice(gate, L, h)
        if abs(mean - ref[0]) <= rel_mean * ref[0] and abs(var - ref[1]) <= rel_var * ref[1]:
            return h
    return None


def window_rows(repeats, T=2_000_000):
    """hot_rows' windows of one trace (T,), eps 1e-3: the numpy merge and the compiled merge (where numba is
    installed) beside a bare np.cumsum and np.cumsum + np.searchsorted, alternated in one run; the compile timed
    apart (its first call)."""
    rows = []
    rng = np.random.default_rng(0)
    lg = np.log(rng.beta(20, 1, T))                          # (T,) one trace
    L = gates.threshold(1e-3)

    def cs_search():
        c = np.concatenate([[0.0], np.cumsum(-lg)])
        return np.searchsorted(c, c[1:] - L)

    def by(compiled):                           # gates.windows through one path or the other
        def run():
            keep, gates.COMPILED = gates.COMPILED, compiled
            try:
                return gates.windows(lg, L=L)
            finally:
                gates.COMPILED = keep
        return run
    fresh = not gates.merged()
    t = time.perf_counter()
    kernel = gates.merge_kernel()              # numba's import and the compile, once a process: timed apart
    compile_s = time.perf_counter() - t
    # and both into buffers allocated once (window_row, np.cumsum(out=)): whether an allocating call faults in
    # fresh pages depends on what the allocator gave back after the call before it (cs_search frees 32 MiB)
    W, C, out = np.empty(T, np.int64), np.empty(T, bool), np.empty(T)
    fns = [by(False), lambda: np.cumsum(lg), cs_search] + ([by(True), lambda: np.cumsum(lg, out=out),
                                                           lambda: gates.window_row(lg, L, W, C)]
                                                          if kernel is not None else [])
    w, cs, ss, *wc = paired_times(fns, repeats)
    what = f"windows of one trace, T = {T:.0e}"
    rows.append(dict(what=f"{what}, numpy merge", seconds=w, baseline="bare np.cumsum", base_s=cs,
                     ratio=w / cs, target="<= 2", met=w / cs <= 2))
    rows.append(dict(what=f"{what}, numpy merge", seconds=w, baseline="np.cumsum + np.searchsorted",
                     base_s=ss, ratio=w / ss, target="-", met=None))
    if kernel is None:
        rows.append(dict(what=f"{what}, compiled merge: numba not installed (extra `fast`)", seconds=0.0,
                         baseline="-", base_s=None, ratio=None, target="<= 2", met=None))
    else:
        import numba  # optional accelerator, imported above by merge_kernel: its version for the row
        rows.append(dict(what=f"{what}, compiled merge (numba {numba.__version__})", seconds=wc[0],
                         baseline="bare np.cumsum", base_s=cs, ratio=wc[0] / cs, target="<= 2", met=wc[0] / cs <= 2))
        rows.append(dict(what=f"{what}, compiled merge (numba {numba.__version__})", seconds=wc[0],
                         baseline="numpy merge", base_s=w, ratio=wc[0] / w, target="-", met=None))
        rows.append(dict(what=f"{what}, compiled merge into buffers allocated once (window_row)", seconds=wc[2],
                         baseline="np.cumsum into a buffer allocated once", base_s=wc[1], ratio=wc[2] / wc[1],
                         target="<= 2", met=wc[2] / wc[1] <= 2))
        rows.append(dict(what="the compiled merge's first call: numba's import and the compile" +
                              ("" if fresh else " (compiled before this row: not timed)"),
                         seconds=compile_s, baseline="-", base_s=None, ratio=None, target="-", met=None))
    return rows


def hot_rows(repeats, T=2_000_000):
    """The hot paths against their baselines, timed side by side: dicts (what, seconds, baseline, base_s, ratio,
    target, met)."""
    rows = window_rows(repeats, T)
    L = gates.threshold(1e-3)
    for g in gates.SEED_GATES:
        r = exact.exact_first_passage(g, eps=1e-3)
        ref = exact.exact_first_passage(g, eps=1e-3, tol=1e-10)
        rel = (r.mean_err / r.mean, r.var_err / r.var)
        for what, acc in (("the returned accuracy", rel), ("the requested tol 1e-8", (1e-8, 1e-8))):
            h = fft_lattice_at(g, L, *acc, (ref.mean, ref.var))
            if h is None:
                continue
            a, b = paired_times([lambda: exact.exact_first_passage(g, eps=1e-3),
                                 lambda: fft_lattice(g, L, h)], max(1, repeats // 2))
            rows.append(dict(what=f"exact moments {g}, eps 1e-3 (returned rel. err {max(rel):.1e})", seconds=a,
                             baseline=f"FFT renewal lattice at {what} (h {h:.2g}, Richardson)", base_s=b,
                             ratio=a / b, target="<= 1", met=a <= b))
    for k in (5, 10, 16, 64):
        rk = np.random.default_rng(k)
        v = np.sort(rk.uniform(0.05, 0.4, k))
        g = discrete.AtomGate(v, rk.dirichlet(np.ones(k)), f"{k} atoms")
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", exact.AccuracyWarning)
            r = exact.exact_first_passage(g, eps=1e-3)
        t = time.perf_counter() - t
        rows.append(dict(what=f"{k} atoms in (0.05, 0.4), eps 1e-3: {r.method.split(' (')[0]}, returned rel. err "
                              f"E[W] {r.mean_err / r.mean:.1e}, Var[W] {r.var_err / r.var:.1e}",
                         seconds=t, baseline="-", base_s=None, ratio=None, target="< 5 s", met=t < 5))
    return rows


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
    for r in hot_rows(a.repeats):
        ratio = "" if r["ratio"] is None else f", {r['ratio']:.2f}x {r['baseline']} ({r['base_s']:.3g} s)"
        rows.append((r["what"], r["seconds"], f"{r['seconds']:.3g} s{ratio}", r["target"], r["met"]))
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


N_CPU_ROWS = 2 + len(gates.SEED_GATES) + 3   # and hot_rows' rows, counted as they come


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
        print(f"{name:{w}s} {t:10.4f} {rate:>18s} {target:>15s}  {'-' if ok is None else 'yes' if ok else 'NO'}")
    if a.json:
        outputs.write_result(a.json, kind="bench-laws",
                             obj=[dict(what=r[0], seconds=r[1], rate=r[2], target=r[3],
                                       met=None if r[4] is None else bool(r[4])) for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
