"""Scaling of the per-head analysis on this machine: every figure beside its baseline, measured in the same run.

python bench_scale.py [--quick] [--docs docs/BENCHMARKS.md] [--json out.json]

  hot paths      windows of a 1-D trace against a bare numpy cumsum and cumsum + searchsorted; the windows of
                 a head's analysed rows against one searchsorted per document (the path they replaced)
                 (numpy paths); last, the same by the compiled loops of a large run where numba is installed
  head grid      CPU seconds of one head over an S x T grid (synthetic heads of a 760M-class mix), against the
                 cost model heads.COST_HEAD that the time estimate and --max-minutes use
  workers        one trace file analysed with --workers 1 and --workers N (N: the available processors),
                 alternated, with the load average said; the results compared. The whole command (its start-up,
                 imports and output included) and the analysis alone, in this process; one head alone on
                 the workers (its two halves, driver.SPLIT: off by default) against one process; one head of
                 many documents by documents (driver.DOCS, the default) against one process
  torchrun       the same file under torchrun with 2 ranks (gloo) against one process; the results compared
  760M class     peak memory (/usr/bin/time -v, max RSS) and wall time of heads of 256 documents x 16384
                 tokens, the time of 384 of them extrapolated from the measured per-head wall time

Timings are medians of alternated repeats (A B A B ...): the machine may be shared, so each ratio is taken
against a baseline measured beside it, and the load average at the time is printed with it.
"""
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from foxwindow import outputs, parallel, safety
from foxwindow.heads import driver as heads
from foxwindow.heads import laws as headlaws
from foxwindow.heads import predict, table
from foxwindow.laws import bench as law_bench
from foxwindow.laws import gates as forget
from foxwindow.models import traces

LS = [forget.threshold(e) for e in sorted(set(heads.EPS_SCAN) | {1e-3}, reverse=True)]


def _load():
    return "load {:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())


def synthetic_heads(H, S, T, seed=0):
    """(S, T, H) float32 log gates: AR(1)-logit heads with mu spread over 1.5 .. 7 (forget rates 0.2 .. 0.001,
    windows from a few tokens to past T/2 at the smallest eps), s = 0.7, phi = 0.6."""
    rng = np.random.default_rng(seed)
    lg = np.empty((S, T, H), np.float32)
    for h, mu in enumerate(np.linspace(1.5, 7.0, H) if H > 1 else [4.0]):
        x, _ = forget.AR1LogitGate(float(mu), 0.7, 0.6).sample_paths(rng, S, T)
        lg[:, :, h] = -x
    return lg


def write_traces(path, layers, H, S, T):
    """A save_trace file of `layers` layers of H synthetic heads of S x T (uncompressed: read memory-mapped)."""
    tr = {f"blocks.{l}.attn.hook_log_fgate": synthetic_heads(H, S, T, seed=l) for l in range(layers)}
    traces.save_trace(path, tr, {"model": "synthetic", "heads": H})
    return path


# ----------------------------------------------------------------------------- hot paths


def _rows_head():
    """The head of the analysed rows' rows: (x (64, 8192) float64 increments, the thresholds LS (11,))."""
    return -synthetic_heads(1, 64, 8192)[:, :, 0].astype(np.float64), np.array(LS)


def _rows_baseline(x, Ls):
    """The path the analysed rows' windows replaced: one np.searchsorted of rows T/2.. a document."""
    S, T = x.shape
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(x, 1)], 1)
    for s in range(S):
        np.searchsorted(c[s], c[s, T // 2 + 1:, None] - Ls[None, :], side="left")


def hot_paths(repeats, T1=10_000_000):
    rng = np.random.default_rng(0)
    lg = np.log(rng.beta(20, 1, T1))
    L = forget.threshold(1e-3)

    def cs_search():
        c = np.concatenate([[0.0], np.cumsum(-lg)])
        return np.searchsorted(c, c[1:] - L)
    w, cs, ss = law_bench.paired_times([lambda: forget.windows(lg, L=L), lambda: np.cumsum(lg), cs_search], repeats)
    rows = [dict(what=f"windows of one trace, T = {T1:.0e}", seconds=w, baseline="bare np.cumsum", base_s=cs,
                 ratio=w / cs, target="<= 2 (rate >= 1/2 of the cumsum's)", met=w / cs <= 2),
            dict(what=f"windows of one trace, T = {T1:.0e}", seconds=w, baseline="np.cumsum + np.searchsorted",
                 base_s=ss, ratio=w / ss, target="-", met=None)]
    x, Ls = _rows_head()
    a, b = law_bench.paired_times([lambda: predict.window_rows(x, Ls, 4096), lambda: _rows_baseline(x, Ls)], repeats)
    rows.append(dict(what="windows of a head's analysed rows, 64 x 8192, 11 L", seconds=a,
                     baseline="one np.searchsorted a document", base_s=b, ratio=a / b, target="< 1", met=a < b))
    return rows



def compiled_hot_paths(repeats, T1=10_000_000):
    """hot_paths' two windows rows by the compiled loops a large run uses (gates.merge_kernel and
    predict.compile_window_rows, numba: the extra `fast`), beside the same baselines in the same run; compiled
    first (the compile not timed). [] without numba. Run last: once compiled, this process's windows take the
    compiled loops, so the rows before it time the paths a run of their size takes."""
    if importlib.util.find_spec("numba") is None:
        return []
    import numba  # optional accelerator (extra `fast`): only for these rows

    if not (forget.COMPILED and forget.merge_kernel() is not None and predict.compile_window_rows()):
        return []
    rng = np.random.default_rng(0)
    lg = np.log(rng.beta(20, 1, T1))
    L = forget.threshold(1e-3)
    W, C, out = np.empty(T1, np.int64), np.empty(T1, bool), np.empty(T1)
    w, cs, wb, cb = law_bench.paired_times([lambda: forget.windows(lg, L=L), lambda: np.cumsum(lg),
                                            lambda: forget.window_row(lg, L, W, C),
                                            lambda: np.cumsum(lg, out=out)], repeats)
    v = f"numba {numba.__version__}"
    rows = [dict(what=f"windows of one trace, T = {T1:.0e}, compiled merge ({v})", seconds=w,
                 baseline="bare np.cumsum", base_s=cs, ratio=w / cs, target="<= 2 (rate >= 1/2 of the cumsum's)",
                 met=w / cs <= 2),
            dict(what="the same into buffers allocated once (window_row)", seconds=wb,
                 baseline="np.cumsum into a buffer allocated once", base_s=cb, ratio=wb / cb,
                 target="<= 2 (rate >= 1/2 of the cumsum's)", met=wb / cb <= 2)]
    x, Ls = _rows_head()
    a, b = law_bench.paired_times([lambda: predict.window_rows(x, Ls, 4096), lambda: _rows_baseline(x, Ls)], repeats)
    rows.append(dict(what=f"windows of a head's analysed rows, 64 x 8192, 11 L, compiled ({v})", seconds=a,
                     baseline="one np.searchsorted a document", base_s=b, ratio=a / b, target="< 1", met=a < b))
    return rows


# ----------------------------------------------------------------------------- one head's CPU over S x T


def head_grid(grid):
    out = []
    for S, T in grid:
        lg = {"a": synthetic_heads(3, S, T)}
        headlaws.compile_fast_paths(3 * S * T * len(LS))      # the paths a run of this size takes, compiled untimed
        t = time.process_time()
        heads.analyse_layers(lg, L=LS, seed=1, mass_L=math.log(1e3), workers=1)
        cpu = (time.process_time() - t) / 3
        out.append(dict(S=S, T=T, cpu_per_head=cpu, model=heads.head_cost(S, T)))
    return out


# ----------------------------------------------------------------------------- workers and ranks


def _forget(args, env=None, prefix=(), python=(sys.executable,)):
    cmd = list(prefix) + list(python) + [os.path.join(outputs.REPO, "forget.py")] + args
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=outputs.REPO)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return wall, r.stderr


def _heads_of(path):
    with open(path) as fh:
        return json.load(fh)["heads"]


def workers_vs_one(tmp, H, S, T, repeats):
    path = write_traces(os.path.join(tmp, "w.npz"), 1, H, S, T)
    n = parallel.default_workers()
    base = ["--traces", path, "--seed", "1", "--no-progress", "--force"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    load = _load()
    one, many = [], []
    for _ in range(repeats):
        one.append(_forget(base + ["--workers", "1", "--json", os.path.join(tmp, "w1.json")], env)[0])
        many.append(_forget(base + ["--workers", str(n), "--json", os.path.join(tmp, "wn.json")], env)[0])
    same = _heads_of(os.path.join(tmp, "w1.json")) == _heads_of(os.path.join(tmp, "wn.json"))
    a, b = float(np.median(many)), float(np.median(one))
    return dict(what=f"{H} heads x {S} x {T}, forget.py --traces", workers=n, seconds=a, one_s=b, speedup=b / a,
                identical=same, load=f"{load} before, {_load()} after")


def analysis_workers_vs_one(H, S, T, repeats):
    """The analysis alone (analyse_layers in this process, no start-up, imports or output): wall seconds with
    the available processors as workers against one, alternated; the results compared."""
    lg = {"a": synthetic_heads(H, S, T)}
    n = parallel.default_workers()
    got = {}

    def run(w):
        got[w], _ = heads.analyse_layers(lg, L=LS, seed=1, mass_L=math.log(1e3), workers=w)
    a, b = law_bench.paired_times([lambda: run(n), lambda: run(1)], repeats)
    same = [predict_json(r) for r in got[n]] == [predict_json(r) for r in got[1]]
    return dict(what=f"{H} head{'s' if H != 1 else ''} x {S} x {T}, the analysis alone (analyse_layers)", workers=n,
                seconds=a, one_s=b,
                speedup=b / a, identical=same, load=_load())


def predict_json(r):
    """A head's record as the JSON writes it."""
    return json.dumps(outputs.json_clean(table.head_json(r)), sort_keys=True)


def torchrun_vs_one(tmp, H, S, T, repeats):
    path = write_traces(os.path.join(tmp, "r.npz"), 2, H, S, T)
    base = ["--traces", path, "--seed", "1", "--no-progress", "--force", "--workers", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [outputs.REPO, os.environ.get("PYTHONPATH")])))
    env.pop("WORLD_SIZE", None)
    run = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
    load = _load()
    one, two = [], []
    for _ in range(repeats):
        one.append(_forget(base + ["--json", os.path.join(tmp, "r1.json")], env)[0])
        two.append(_forget(base + ["--json", os.path.join(tmp, "r2.json")], env, python=run)[0])
    same = _heads_of(os.path.join(tmp, "r1.json")) == _heads_of(os.path.join(tmp, "r2.json"))
    a, b = float(np.median(two)), float(np.median(one))
    return dict(what=f"{2 * H} heads x {S} x {T}, --workers 1 a rank", seconds=a, one_s=b, speedup=b / a,
                identical=same, load=f"{load} before, {_load()} after")


def _big_run(tmp, H, S, T, n, env):
    """forget.py --traces of H synthetic heads of S x T on n workers under /usr/bin/time -v: (wall s, max RSS GiB,
    CPU s, file GiB)."""
    path = write_traces(os.path.join(tmp, f"big{H}.npz"), 1, H, S, T)
    wall, err = _forget(["--traces", path, "--seed", "1", "--no-progress", "--workers", str(n),
                         "--json", os.path.join(tmp, f"big{H}.json"), "--force"], env, prefix=["/usr/bin/time", "-v"])
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) / 2 ** 20
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", err).group(1))
    sys_s = float(re.search(r"System time \(seconds\): ([\d.]+)", err).group(1))
    size = os.path.getsize(path) / 2 ** 30
    os.remove(path)
    return wall, rss, user + sys_s, size


BIG_S, BIG_T = 256, 16384          # the 760M class: documents x tokens of a head


def big_case(tmp, H, S=BIG_S, T=BIG_T, full_heads=384):
    """Heads of the 760M class: max RSS and wall of forget.py --traces under /usr/bin/time -v, run with as many
    heads as workers and with H heads (H > workers): the difference is the marginal wall and CPU of H - workers
    heads once every worker runs (the start-up, the imports and each worker's first touch of its memory paid in
    both), from which 384 heads are extrapolated."""
    n = parallel.default_workers()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    load = _load()
    H0 = min(n, H - 1)
    w0, r0, c0, _ = _big_run(tmp, H0, S, T, n, env)
    wall, rss, cpu, size = _big_run(tmp, H, S, T, n, env)
    wall_head, cpu_head = (wall - w0) / (H - H0), (cpu - c0) / (H - H0)      # marginal, on n workers
    return dict(heads=H, heads0=H0, S=S, T=T, workers=n, wall=wall, wall0=w0, max_rss_gib=max(rss, r0),
                cpu_per_head=cpu / H, marginal_cpu_per_head=cpu_head, marginal_wall_per_head=wall_head,
                file_gib=size, full_heads=full_heads, full_file_gib=full_heads * S * T * 4 / 2 ** 30,
                full_wall_idle_min=(w0 + (full_heads - H0) * cpu_head / n) / 60,
                full_wall_measured_min=(w0 + (full_heads - H0) * wall_head) / 60,
                load=f"{load} before, {_load()} after")


# ----------------------------------------------------------------------------- the report


def markdown(res):
    out = [f"Measured by `python bench_scale.py{' --quick' if res['quick'] else ''}` on {res['machine']}; "
           f"{res['load']} at the start. Ratios are against a baseline timed beside them in the same run "
           "(alternated repeats, medians).", "",
           "| hot path | seconds | baseline | baseline s | ratio | target | met |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in res["hot"]:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        out.append(f"| {r['what']} | {r['seconds']:.3f} | {r['baseline']} | {r['base_s']:.3f} | {r['ratio']:.2f} | "
                   f"{r['target']} | {met} |")
    out += ["", "One head's CPU (analysis, predictions, decay windows of the analysed rows), synthetic heads:", "",
            "| S x T | CPU s a head | cost model (heads.COST_HEAD) |", "| --- | --- | --- |"]
    out += [f"| {g['S']} x {g['T']} | {g['cpu_per_head']:.2f} | {g['model']:.2f} |" for g in res["grid"]]
    w, aw, r, b = res["workers"], res["analysis_workers"], res["torchrun"], res["big"]
    lone, d = res.get("lone_head"), res.get("docs_head")
    out += ["", "| parallel run | seconds | one process s | speedup | results identical | load |",
            "| --- | --- | --- | --- | --- | --- |",
            f"| {w['what']}, --workers {w['workers']} | {w['seconds']:.1f} | {w['one_s']:.1f} | {w['speedup']:.2f} | "
            f"{'yes' if w['identical'] else '**no**'} | {w['load']} |",
            f"| {aw['what']}, {aw['workers']} workers | {aw['seconds']:.1f} | {aw['one_s']:.1f} | "
            f"{aw['speedup']:.2f} | {'yes' if aw['identical'] else '**no**'} | {aw['load']} |",
            *([f"| {lone['what']}, {lone['workers']} workers (its verdict and its per-law evaluation as two jobs: "
               f"driver.SPLIT, off by default) | "
               f"{lone['seconds']:.1f} | {lone['one_s']:.1f} | {lone['speedup']:.2f} | "
               f"{'yes' if lone['identical'] else '**no**'} | {lone['load']} |"] if lone else []),
            *([f"| {d['what']}, {d['workers']} workers (its per-document statistics over them, then its verdict "
               f"and its per-law evaluation as two jobs: driver.DOCS, the default) | {d['seconds']:.1f} | "
               f"{d['one_s']:.1f} | {d['speedup']:.2f} | {'yes' if d['identical'] else '**no**'} | {d['load']} |"]
              if d else []),
            f"| {r['what']}, torchrun 2 ranks (gloo) | {r['seconds']:.1f} | {r['one_s']:.1f} | {r['speedup']:.2f} | "
            f"{'yes' if r['identical'] else '**no**'} | {r['load']} |", "",
            f"760M class: {b['heads']} heads of {b['S']} documents x {b['T']} tokens "
            f"({b['file_gib']:.2f} GiB of traces) analysed with --workers {b['workers']} in {b['wall']:.0f} s wall "
            f"({b['heads0']} heads: {b['wall0']:.0f} s), peak memory {b['max_rss_gib']:.2f} GiB (max RSS, "
            f"/usr/bin/time -v; the largest process), {b['cpu_per_head']:.2f} CPU-s a head in all; the heads beyond "
            f"the first {b['heads0']} (every worker started and its memory touched) "
            f"{b['marginal_cpu_per_head']:.2f} CPU-s and {b['marginal_wall_per_head']:.2f} s of wall a head; "
            f"{b['load']}. A worker holds a block of heads read in one pass over the file "
            f"(traces.HEAD_BLOCK_BYTES) and the head it analyses, the parent the finished results (the whole case, "
            f"run once, is in docs/SCALE.md): {b['full_heads']} heads ({b['full_file_gib']:.1f} GiB of traces) come to "
            f"{b['full_wall_measured_min']:.1f} min from the measured wall a head "
            f"({b['full_wall_idle_min']:.1f} min from its CPU on {b['workers']} cores with no other work)."]
    return "\n".join(out)


BEGIN, END = "<!-- bench_scale: begin -->", "<!-- bench_scale: end -->"


def docs_target(path, force=False):
    """Check before any work the markdown file whose scaling section --docs regenerates; returns its absolute path.
    UsageError where it is not a .md path, is on a special filesystem or a folder, its folder is missing or not
    writable, it is not a UTF-8 text file, or it exists without the section's markers and force is not given (the
    section would be appended to a file of the user's)."""
    p = os.path.abspath(os.fspath(path))
    if not p.endswith(".md"):
        raise outputs.UsageError(f"--docs: expected a markdown file (.md); got {path}")
    real = outputs.resolve(p)
    for top in outputs.SPECIAL_ROOTS:
        if real == top or real.startswith(top + os.sep):
            raise outputs.UsageError(f"--docs: {p} is on {top}, a special filesystem; choose an ordinary folder")
    if ".git" in real.split(os.sep):
        raise outputs.UsageError(f"--docs: refusing to write {p} inside a .git folder")
    package = os.path.realpath(outputs.PACKAGE)
    if os.path.commonpath([real, package]) == package:
        raise outputs.UsageError(f"--docs: refusing to write {p} inside the foxwindow package's own folder {package} "
                                 "(choose a folder of your own)")
    if os.path.isdir(p):
        raise outputs.UsageError(f"--docs: {p} is a folder; expected a markdown file")
    parent = os.path.dirname(p)
    if not os.path.isdir(parent):
        raise outputs.UsageError(f"--docs: folder {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise outputs.UsageError(f"--docs: folder {parent} is not writable")
    if os.path.exists(p):
        if not os.path.isfile(p):
            raise outputs.UsageError(f"--docs: {p} is not a regular file")
        try:
            with open(p, encoding="utf-8") as fh:
                old = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise outputs.UsageError(f"--docs: {p} cannot be read as UTF-8 text ({type(exc).__name__})") from None
        if BEGIN in old and END in old:
            return p                    # the section regenerated in place (docs/BENCHMARKS.md, tracked, holds one)
        if not force:
            raise outputs.UsageError(f"--docs: {p} has no bench_scale section ({BEGIN} ... {END}); pass --force to "
                                     "append one")
    # a new file, or a section appended to a file of the user's: the write guard of every output (never a tracked
    # source or documentation file of the repository, the output's lock, not an output or input of the command)
    return outputs.check_writable(p, force=True, what="--docs")


def write_docs(path, text):
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks and timings\n"
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n## Scaling of the per-head analysis (`python bench_scale.py`)\n\n" + block + "\n"
    outputs.write_text(path, new)


@outputs.scoped
def main(argv=None):
    p = outputs.parser(__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a minute or two)")
    p.add_argument("--repeats", type=int, default=None, help="alternated repeats per paired figure")
    p.add_argument("--big-heads", type=int, default=None,
                   help="heads of 256 x 16384 in the 760M-class row (at least 2: it is also run with as many heads as "
                        "workers, fewer than these, and the difference timed)")
    p.add_argument("--docs", default=None, help="regenerate the scaling section of this markdown file")
    p.add_argument("--json", default=None, help="write the figures as JSON to this path")
    outputs.add_common(p)
    a = p.parse_args(argv)
    rep = a.repeats if a.repeats is not None else (2 if a.quick else 3)      # (0 is refused, not the default)
    outputs.positive("--repeats", rep)
    big_heads = a.big_heads if a.big_heads is not None else (3 if a.quick else 8)
    outputs.positive("--big-heads", big_heads, lo=2)
    outputs.distinct(("--json", a.json), ("--docs", a.docs))
    big = big_heads * BIG_S * BIG_T * 4             # the traces of the 760M-class row, float32, written whole
    room = [(shutil.disk_usage(tempfile.gettempdir()).free, f"the temporary folder {tempfile.gettempdir()}"),
            (safety.available_memory(), "memory")]
    for free, where in room:
        if free is not None and big > free:
            raise outputs.UsageError(f"--big-heads {big_heads}: the traces of {big_heads} heads of {BIG_S} x {BIG_T} "
                                     f"take {big / 2 ** 30:.3g} GiB and {where} has {free / 2 ** 30:.3g} GiB free; "
                                     "give fewer heads")
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    if a.docs:
        a.docs = docs_target(a.docs, a.force)
    res = dict(quick=a.quick, load=_load(), machine=f"{parallel.default_workers()} processors")
    say = parallel.say
    grid = [(32, 2048), (64, 4096), (128, 8192)] if a.quick else [(32, 2048), (64, 4096), (128, 4096),
                                                                  (128, 8192), (256, 8192), (1024, 1024),
                                                                  (2048, 2048)]
    say("hot paths ...")
    res["hot"] = hot_paths(rep, 2_000_000 if a.quick else 10_000_000)
    say("head grid ...")
    res["grid"] = head_grid(grid)
    with tempfile.TemporaryDirectory() as tmp:
        say("workers ...")
        res["workers"] = workers_vs_one(tmp, 8, 64, 4096 if a.quick else 8192, rep)
        say("workers, the analysis alone ...")
        res["analysis_workers"] = analysis_workers_vs_one(8, 128, 8192 if a.quick else 16384, rep)
        say("one head on the workers (its two halves) ...")
        split, heads.SPLIT = heads.SPLIT, True                   # the split, off by default, measured here
        try:
            res["lone_head"] = analysis_workers_vs_one(1, 128 if a.quick else 256, 8192 if a.quick else 16384, rep)
        finally:
            heads.SPLIT = split
        say("one head of many documents on the workers (by documents) ...")
        res["docs_head"] = analysis_workers_vs_one(1, 1024 if a.quick else 2048, 4096 if a.quick else 2048, rep)
        say("torchrun ...")
        res["torchrun"] = torchrun_vs_one(tmp, 4, 64, 4096, rep)
        say("760M class ...")
        res["big"] = big_case(tmp, big_heads)
    say("hot paths, compiled ...")
    res["hot"] += compiled_hot_paths(rep, 2_000_000 if a.quick else 10_000_000)
    text = markdown(res)
    print(text)
    if a.docs:
        write_docs(a.docs, text)
    if a.json:
        outputs.write_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
