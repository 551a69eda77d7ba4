"""Regenerate every figure: `python figures/make_figures.py` (add --fast for a quick small-trial pass).

Without --fast and without --out this is the documented way to regenerate the committed figures in
figures/ (it replaces them). --fast writes to a fresh scratch folder runs/figures-fast-<timestamp>/ and
is refused over figures/; any other --out whose figure files exist needs --force.

Figures 1-5 are computed from the gate laws (Monte Carlo + exact renewal numerics); figure 6 (every head
against every law) reads the schema-1 per-head JSON of the shipped model (results/laws/fox_heads.json,
--heads-json), figure 7 the kernel benchmark JSON (written on a GPU), figure 8 the
pruning JSON, figure 9 the chunk JSON and figure 10 (the report's model overview) the schema-1 per-head JSON of
the shipped model (results/laws/fox_heads.json, `python forget.py --seed 0 --json ...`); figure 11 (how close
each law comes, out of sample) that JSON and the LSTM's (results/laws/lstm_heads.json, --lstm-json).
A figure asked for by --only whose input JSON is absent or unusable is an error before any work; the default
run (all figures) leaves such a figure out, says so before and after the work, and lists it as "not made"
in the summary. Output: <out>/figN_*.png and .pdf.
"""
import math
import os
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from tqdm import tqdm  # noqa: E402

import fig1_decay  # noqa: E402
import fig2_window_pmf  # noqa: E402
import fig3_moments_vs_L  # noqa: E402
import fig4_alibi_limit  # noqa: E402
import fig5_dependent  # noqa: E402
import fig6_heads  # noqa: E402
import fig7_kernels  # noqa: E402
import fig8_prune  # noqa: E402
import fig9_chunks  # noqa: E402
import fig10_overview  # noqa: E402
import fig11_law_errors  # noqa: E402
import figstyle  # noqa: E402  (also puts the repository root on sys.path)
from foxwindow import outputs, safety, uses  # noqa: E402

FIGURES = {1: fig1_decay, 2: fig2_window_pmf, 3: fig3_moments_vs_L, 4: fig4_alibi_limit,
           5: fig5_dependent, 6: fig6_heads, 7: fig7_kernels, 8: fig8_prune,
           9: fig9_chunks, 10: fig10_overview, 11: fig11_law_errors}


NAMES = {n: m.__name__ for n, m in FIGURES.items()}


# figures drawn from a JSON input: number -> (flag, attribute of the arguments)
INPUTS = {6: ("--heads-json", "heads_json"), 7: ("--bench-json", "bench_json"), 8: ("--prune-json", "prune_json"),
          10: ("--overview-json", "overview_json"), 11: ("--lstm-json", "lstm_json")}
HEADS_FLAGS = ("--heads-json", "--overview-json", "--lstm-json")          # per-head results (forget.py --json)


def _check_json_input(path, what):
    """An input JSON: True when present and valid, False when absent; UsageError when unusable."""
    if not os.path.exists(path):
        return False
    if not os.path.isfile(path):
        raise outputs.UsageError(f"{what}: {path} is not a file")
    outputs.note_input(os.path.abspath(path), what)          # no output of this run may be this file
    try:
        doc = safety.read_json(path)
    except ValueError as exc:
        raise outputs.UsageError(f"{what}: {path} is {exc}") from None
    if what in (*HEADS_FLAGS, "--prune-json") and not isinstance(doc, dict):
        raise outputs.UsageError(f"{what}: {path} holds a JSON {type(doc).__name__}; expected the object that "
                                 f"{'forget.py --json' if what in HEADS_FLAGS else 'prune.py --json'} writes")
    if what in HEADS_FLAGS:
        _check_heads(doc.get("heads"), path, what, named=doc.get("schema_version") is not None)
        _check_result(doc, path, what)
    if what == "--prune-json":
        _check_prune(doc, path, what)
    return True


def _check_result(doc, path, what):
    """The whole per-head result as the figure reads it (report.schema: every field of its kind), before any
    figure is computed: a file the figure would refuse after minutes of Monte Carlo is refused now."""
    from foxwindow.report import schema
    try:
        res = schema.read(doc)
    except ValueError as exc:
        raise outputs.UsageError(f"{what}: {path}: {exc}") from None
    if not res.heads:
        raise outputs.UsageError(f"{what}: {path} has no heads")
    if what == "--heads-json" and len(res.heads) > 64:
        raise outputs.UsageError(f"{what}: {path} has {len(res.heads)} {res.unit}s: figure 6 draws up to 64 panels")


def _check_prune(doc, path, what):
    """The entries figure 8 reads: heads with tols of finite numbers, and per-tol rows."""
    heads, per_tol = doc.get("heads"), doc.get("per_tol")
    if not (isinstance(heads, list) and heads and isinstance(per_tol, list) and per_tol):
        raise outputs.UsageError(f"{what}: {path} has no per-head or per-tol entries (the lists 'heads' and "
                                 "'per_tol' that prune.py --json writes)")
    for i, h in enumerate(heads):
        tols = h.get("tols") if isinstance(h, dict) else None
        if not (isinstance(tols, list) and tols):
            raise outputs.UsageError(f"{what}: {path}: heads[{i}] needs a non-empty list 'tols'")
        for j, e in enumerate(tols):
            for key in ("log_tol", "pred_frac_blocks", "meas_frac_blocks"):
                v = e.get(key) if isinstance(e, dict) else None
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise outputs.UsageError(f"{what}: {path}: heads[{i}].tols[{j}].{key}: expected a finite number; "
                                             f"got {safety.shown(repr(v))[:40]}")


def _index(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_heads(heads, path, what, named=False):
    """The per-head entries figure 6 reads: a list of objects with a layer (index or name), an int head >= 0
    and a number kappa, each (layer, head) once. UsageError naming the first entry that is not."""
    if heads is None:
        return                                          # figure 6 says it has no entries
    if not isinstance(heads, list):
        raise outputs.UsageError(f"{what}: {path}: 'heads' is a {type(heads).__name__}; expected a list")
    seen = set()
    for i, h in enumerate(heads):
        # schema 1 (named) names a layer by a string, the earlier shape by its index
        ok = isinstance(h, dict) and _index(h.get("head")) \
            and (_index(h.get("layer")) or (named and isinstance(h.get("layer"), str) and h.get("layer") != "")) \
            and isinstance(h.get("kappa"), (int, float)) and not isinstance(h.get("kappa"), bool) \
            and math.isfinite(h["kappa"]) and h["kappa"] >= 0
        if not ok:
            raise outputs.UsageError(f"{what}: {path}: heads[{i}] = {safety.shown(str(h)[:80])} needs 'layer' (an "
                                     "integer >= 0 or a name), 'head' (an integer >= 0) and 'kappa' (a finite "
                                     "number >= 0)")
        if (h["layer"], h["head"]) in seen:
            raise outputs.UsageError(f"{what}: {path}: head {h['layer']}.{h['head']} is listed twice (heads[{i}]); "
                                     "each head once")
        seen.add((h["layer"], h["head"]))


def check_inputs(a, only, asked):
    """The figures to make: those of `only` whose input JSON exists. A missing input of a figure the user
    asked for (--only, or its input flag given) is a UsageError; otherwise the figure is left out (main
    says so on stderr once the outputs are checked). Returns (figures to make, {figure: reason left out})."""
    left = {}
    for n, (flag, attr) in INPUTS.items():
        if n not in only:
            continue
        path = getattr(a, attr)
        if not _check_json_input(path, flag):
            why = f"{flag} {path} not found"
            if asked or f"--{attr.replace('_', '-')}" in a.given:
                raise outputs.UsageError(f"figure {n} ({NAMES[n]}) needs its input: {why}")
            left[n] = why
    return [n for n in only if n not in left], left


def check_out(a, only):
    """Resolve and check the output folder before any figure is computed."""
    figures_dir = os.path.realpath(HERE)
    if a.out is None:
        a.out = outputs.run_dir("figures-fast", make=False) if a.fast else HERE
    out = os.path.abspath(a.out)
    regen = os.path.realpath(out) == figures_dir
    if a.fast and regen:
        raise outputs.UsageError("--out: --fast figures are not written over the committed figures in figures/; "
                                 "omit --out (a scratch folder under runs/) or choose another folder")
    files = [f"{NAMES[n]}.{ext}" for n in only for ext in ("png", "pdf")]
    # the full-quality run into figures/ is the documented regeneration: it replaces them by design
    a.out = outputs.check_dir(out, files, force=a.force or (regen and not a.fast), what="--out")
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")


@outputs.scoped
def main(argv=None):
    p = uses.record_given(outputs.parser(__doc__.split("\n")[0]))    # (abbreviated flags are noticed too)
    p.add_argument("--out", default=None,
                   help="output folder (default: figures/, or a fresh runs/figures-fast-<timestamp>/ with --fast)")
    p.add_argument("--fast", action="store_true", help="small trial counts and grids (CI smoke run)")
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")
    p.add_argument("--trials", type=int, default=None,
                   help="Monte Carlo trials per point (default 200000, or 4000 with --fast)")
    p.add_argument("--only", type=int, nargs="+", choices=sorted(FIGURES), help="figure numbers to make (default all)")
    p.add_argument("--json", default=None, help="also write the run summary as JSON to this path")
    p.add_argument("--heads-json", default=os.path.join(outputs.REPO, "results", "laws", "fox_heads.json"),
                   help="per-head JSON (schema 1, forget.py --json; or the earlier {info, heads} shape) for figure 6")
    p.add_argument("--overview-json", default=os.path.join(outputs.REPO, "results", "laws", "fox_heads.json"),
                   help="per-head JSON (schema 1, forget.py --json) for figure 10")
    p.add_argument("--lstm-json", default=os.path.join(outputs.REPO, "results", "laws", "lstm_heads.json"),
                   help="per-head JSON (schema 1) of the textgenrnn LSTM for figure 11 (beside --overview-json's)")
    p.add_argument("--bench-json", default=os.path.join(HERE, "kernel_bench.json"),
                   help="kernel benchmark JSON for figure 7")
    p.add_argument("--prune-json", default=fig8_prune.DEFAULT_JSON, help="pruning JSON (prune.py) for figure 8")
    outputs.add_common(p)
    argv = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_args(argv)
    a.given = {"--" + d.replace("_", "-") for d in getattr(a, "given_flags", ())}
    trials = a.trials if a.trials is not None else (4000 if a.fast else 200_000)     # (0 is refused, not the default)
    if trials < 2:
        p.error(f"--trials must be >= 2; got {trials}")          # (argparse's exit 2, one line)
    if a.seed < 0:
        raise outputs.UsageError(f"--seed must be an integer >= 0; got {a.seed}")
    if a.only and len(set(a.only)) < len(a.only):
        twice = next(n for n in a.only if a.only.count(n) > 1)
        raise outputs.UsageError(f"--only: figure {twice} is listed twice (it would be made twice); list each once")
    chosen = a.only or sorted(FIGURES)
    for flag in sorted({f for f, _ in INPUTS.values()}):
        readers = [m for m, (f, _) in INPUTS.items() if f == flag] + ([11] if flag == "--overview-json" else [])
        if flag in a.given and not any(m in chosen for m in readers):
            raise outputs.UsageError(f"{flag} is read by figure {' and '.join(map(str, readers))} only, and --only "
                                     f"{' '.join(map(str, chosen))} leaves it out: it would be ignored")
    only, left = check_inputs(a, a.only or sorted(FIGURES), asked=a.only is not None)
    check_out(a, only)
    for n, why in left.items():
        print(f"figure {n} will not be made: {why}", file=sys.stderr)
    ctx = SimpleNamespace(out=a.out, fast=a.fast, seed=a.seed, trials=trials,
                          heads_json=a.heads_json, overview_json=a.overview_json, lstm_json=a.lstm_json,
                          bench_json=a.bench_json,
                          prune_json=a.prune_json)
    figstyle.apply()
    results = []
    t_all = time.time()
    bar = tqdm(only, desc="figures", unit="fig", file=sys.stderr)
    for n in bar:
        bar.set_postfix_str(NAMES[n])
        t0 = time.time()
        try:
            paths, summary = FIGURES[n].make(ctx)
        except figstyle.Skip as e:           # an input that parses but holds nothing to draw
            flag = INPUTS.get(n, ("input",))[0]
            raise outputs.UsageError(f"figure {n} ({NAMES[n]}): {flag}: {e}") from None
        results.append(dict(figure=n, status="written", paths=paths, summary=summary,
                            seconds=round(time.time() - t0, 2)))
    results += [dict(figure=n, status="not made", paths=[], summary=why, seconds=0.0) for n, why in left.items()]
    results.sort(key=lambda r: r["figure"])
    print(f"\n{'fig':>3s}  {'status':8s} {'time':>6s}  {'file (.png and .pdf)':36s} summary")
    for r in results:
        files = os.path.relpath(os.path.splitext(r["paths"][0])[0]) if r["paths"] else "-"
        print(f"{r['figure']:>3d}  {r['status']:8s} {r['seconds']:5.1f}s  {files:36s} {r['summary']}")
    print(f"total {time.time() - t_all:.1f} s, {trials:,} trials per Monte Carlo point, seed {a.seed}")
    if a.json:
        outputs.write_result(a.json, kind="figures",
                             obj=dict(trials=trials, seed=a.seed, fast=a.fast, out=a.out, figures=results))
    print(f"figures in {a.out}")
    if left:
        print(f"not made (input missing): figure(s) {', '.join(map(str, left))}", file=sys.stderr)
    return results


if __name__ == "__main__":
    sys.exit(outputs.cli(lambda argv: (main(argv), 0)[1]))
