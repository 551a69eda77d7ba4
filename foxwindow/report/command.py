"""`foxwindow report RESULT.json [--out DIR]`: the per-head result as a static HTML report (index.html, one
page per layer, the PNGs), and `write_report`, which `python forget.py --report DIR` calls after its analysis.

Outputs go through outputs' write guard: the folder is checked (and claimed) before any drawing, each file
is written atomically, and a file already there is replaced only with --force. The pictures are written
first and index.html last, so a report interrupted midway never has an index naming missing pictures.
"""
import io
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from foxwindow import outputs
from foxwindow.laws import gates
from foxwindow.report import pages, plots, schema

__all__ = ["FIRST_FILES", "check_out", "default_jobs", "write_report", "build_parser", "main", "check_out_arg",
           "after_analysis"]

FIRST_FILES = ("index.html", "overview.png")        # checked before an analysis, when the heads are not known


def check_out(out, force=False, what="--out"):
    """Check a report folder before any work (made if missing; its index and overview replaced only with
    force). Returns the absolute folder."""
    if os.path.splitext(str(out))[1].lower() in (".html", ".png", ".json"):
        raise outputs.UsageError(f"{what} {out}: the report is a folder (it receives index.html, one page per layer "
                                 "and the pictures); got a file name")
    return outputs.check_dir(out, FIRST_FILES, force=force, what=what)


_RES = None                                       # the result a drawing worker draws from (set once per worker)


def _worker_init(res):
    global _RES
    _RES = res


def _render(job):
    """One picture as PNG bytes: job = ("overview", None | layer name, eps, dpi), ("laws", layer name, eps, dpi)
    or ("head", label, eps, dpi). The figures are matplotlib Figures made without pyplot: drawn by the Agg
    renderer, no display."""
    kind, key, eps, dpi = job
    if kind == "head":
        fig = plots.plot_head(_RES, head=key, eps=eps, dpi=dpi)
    elif kind == "laws":
        fig = plots.plot_laws(_RES, layers=[key], max_heads=pages.LAWS_PANELS, dpi=dpi)
    else:
        fig = plots.plot_overview(_RES, eps=eps, layers=None if key is None else [key], dpi=dpi)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def default_jobs():
    """Drawing processes: the CPUs this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def _pictures(res, jobs, n_jobs, progress):
    """PNG bytes of every job, in order: in this process for few pictures or n_jobs 1, else in n_jobs
    fresh processes (spawned: nothing of the caller's threads or state is inherited)."""
    if n_jobs <= 1 or len(jobs) < 8:
        _worker_init(res)
        for k, job in enumerate(jobs):
            yield _render(job)
            if progress and (k + 1) % 50 == 0:
                print(f"report: {k + 1}/{len(jobs)} pictures", file=sys.stderr)
        return
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_init, initargs=(res,)) as pool:
        for k, png in enumerate(pool.map(_render, jobs, chunksize=max(1, len(jobs) // (4 * n_jobs)))):
            yield png
            if progress and (k + 1) % 50 == 0:
                print(f"report: {k + 1}/{len(jobs)} pictures", file=sys.stderr)


def _no_bare_heads(res, where=""):
    """UsageError where a head of schema.Result res has no per-eps records (a run of too few documents: no law's
    numbers to draw); where: the file it was read from, for the message."""
    bare = [h.label for h in res.heads if not h.at]
    if bare:
        raise outputs.UsageError(f"{where + ': ' if where else ''}{len(bare)} of the result's {len(res.heads)} "
                                 f"{res.unit}s ({', '.join(bare[:6])}{', ...' if len(bare) > 6 else ''}) have no "
                                 "per-eps records to draw: no law was evaluated (their traces hold fewer than 4 "
                                 "documents)")


def write_report(result, out, force=False, eps=1e-3, progress=False, dpi=80, jobs=None):
    """Draw and write the report of `result` (a schema-1 dict, a JSON path, anything with to_json(), or a
    schema.Result) into folder `out`. jobs: drawing processes (None: default_jobs(); 1: this process).
    Returns (path of index.html, seconds taken). Every argument is checked before the folder is made: force
    True or False, eps in (0, 1) and in the scan, dpi (plots.check_dpi), jobs from 1 to the usable CPUs; a result
    read from a file is an input, which no page or picture of the report may replace (not even with force)."""
    t0 = time.perf_counter()
    if not isinstance(force, bool):
        raise outputs.UsageError(f"force must be True or False; got {force!r}")
    gates.level(eps, None)                                  # one number in (0, 1), as every threshold
    plots.check_dpi(dpi)
    if jobs is not None:
        if isinstance(jobs, bool) or not isinstance(jobs, int):
            raise outputs.UsageError(f"jobs must be None or an integer (drawing processes); got {jobs!r}")
        check_jobs(jobs)
    with outputs.scope():                                   # the input noted, the folder unmade on a failure
        if isinstance(result, (str, os.PathLike)):
            outputs.note_input(os.fspath(result), "the result")
        res = schema.read(result)
        if not res.heads:
            raise outputs.UsageError("the result has no heads: nothing to report")
        _no_bare_heads(res)
        try:
            plots.check_in_scan(res.heads, eps)
        except ValueError as exc:
            raise outputs.UsageError(f"--{exc}: give --eps with one of them") from None
        names = pages.Names(res)
        files = names.files(res)
        out = check_out(out, force)
        for f in files:
            outputs.check_writable(os.path.join(out, f), force=force, what="--out", claim="shared")
        big = round(dpi * 1.25)                     # the overviews a little larger: the first thing a reader sees
        todo = [("overview.png", ("overview", None, eps, big))]
        todo += [(names.layer_png(lay), ("overview", lay, eps, big)) for lay in names.layers]
        todo += [(names.laws_png(lay), ("laws", lay, eps, dpi)) for lay in names.laws_layers]
        todo += [(names.head_png(h), ("head", h.label, eps, dpi)) for h in res.heads]
        n_jobs = default_jobs() if jobs is None else jobs
        for (name, _), png in zip(todo, _pictures(res, [j for _, j in todo], n_jobs, progress)):
            outputs.write_bytes(os.path.join(out, name), png)
        for lay in names.layers:
            outputs.write_text(os.path.join(out, names.layer_page(lay)), pages.layer_page(res, names, lay, eps))
        index = os.path.join(out, "index.html")
        outputs.write_text(index, pages.index_page(res, names, eps))
    return index, time.perf_counter() - t0


def build_parser():
    p = outputs.parser("the per-head result of `forget.py --json` as a static HTML report with its pictures")
    p.add_argument("result", help="the per-head result JSON (schema 1, or the earlier {info, heads} shape)")
    p.add_argument("--out", default=None, help="report folder (default: a fresh runs/report-<timestamp>/)")
    p.add_argument("--eps", type=float, default=1e-3,
                   help="the threshold of the overview's mean window and of each head's distribution panel")
    p.add_argument("--jobs", type=int, default=None,
                   help="drawing processes (default: the usable CPUs, at most 8; 1 draws in this process)")
    outputs.add_common(p)
    return p


def check_jobs(jobs):
    """--jobs from 1 to the CPUs this process may use (more would start processes that wait for a CPU)."""
    outputs.positive("--jobs", jobs)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if jobs > cpus:
        raise outputs.UsageError(f"--jobs {jobs}: this machine lets the report use {cpus} CPUs; give --jobs from 1 to "
                                 f"{cpus} (or leave it out: {default_jobs()})")
    return jobs


def main(argv=None):
    a = build_parser().parse_args(argv)
    outputs.eps_arg("--eps", a.eps)
    if a.jobs is not None:
        check_jobs(a.jobs)
    if not a.result:
        raise outputs.UsageError("RESULT: an empty path; give the per-head result JSON (forget.py --json)")
    path = outputs.input_file("RESULT", a.result)
    try:
        res = schema.read(path)
    except ValueError as exc:
        raise outputs.UsageError(f"{a.result}: {exc}") from None
    _no_bare_heads(res, a.result)
    out = a.out if a.out is not None else outputs.run_dir("report", make=False)
    index, secs = write_report(res, out, force=a.force, eps=a.eps, progress=True, jobs=a.jobs)
    print(f"report of {len(res.heads)} {res.unit}s in {os.path.dirname(index)} ({secs:.1f} s): open {index}")
    return 0


REPORT_NAMES = re.compile(r"(index\.html|overview\.png|layer-\d+(-laws)?\.(html|png)|head-\d+-\d+\.png)")


def check_out_arg(a):
    """`forget.py --report DIR`, checked before the analysis (not with --synthetic: its table has no heads): the
    folder (check_out); no other output of the command (--json, --save-traces) and no input under a name the
    report writes in it (REPORT_NAMES); without --force, no file of an earlier report there (its pages and
    pictures are only named once the heads are known, after the analysis). Returns the absolute folder."""
    if getattr(a, "synthetic", False):
        raise outputs.UsageError("--report draws the per-head analysis (the shipped model, --traces, --model); "
                                 "--synthetic has no heads")
    out = check_out(a.report, force=a.force, what="--report")
    for flag in ("json", "save_traces"):
        p = getattr(a, flag, None)
        if p and os.path.dirname(os.path.abspath(p)) == out and REPORT_NAMES.fullmatch(os.path.basename(p)):
            raise outputs.UsageError(f"--{flag.replace('_', '-')} {p}: the --report folder {out} gets a file of that "
                                     "name; choose another name or folder")
    names = sorted(f for f in os.listdir(out) if REPORT_NAMES.fullmatch(f)) if os.path.isdir(out) else []
    inputs = [f for f in names if outputs.is_input(os.path.join(out, f))]
    if inputs:
        raise outputs.UsageError(f"--report {out}: {inputs[0]} there is an input of this command, and the report "
                                 "writes a file of that name; choose another folder")
    if names and not a.force:
        raise outputs.UsageError(f"--report {out} holds {len(names)} files of an earlier report ({names[0]}, ...); "
                                 "pass --force to replace them, or choose another folder")
    return out


def after_analysis(result, a):
    """`forget.py --report DIR`: the report of the analysis just printed, and one line saying where."""
    index, secs = write_report(result, a.report, force=a.force, eps=getattr(a, "eps", 1e-3) or 1e-3)
    print(f"report in {os.path.dirname(index)} ({secs:.1f} s): open {index}")
