"""`python forget.py` (`foxwindow forget`, `python -m foxwindow forget`): the command line of the per-head
analysis. The shipped model and saved traces run through heads.driver, --model through heads.hf_run, and
--synthetic through laws.lawtable; the table and JSON are heads.table's.
"""
import math
import os
import sys

from foxwindow import outputs, safety, uses
from foxwindow.heads import driver, hf_run
from foxwindow.heads.driver import DEFAULT_CHECKPOINT, EPS_SCAN, N_BOOT, TRACE_GIB, analyse_model, analyse_traces
from foxwindow.heads.table import print_table, say_partial, to_json
from foxwindow.laws import gates, lawtable
from foxwindow.models import hf_load as hf_models
from foxwindow.models.fox import load_checkpoint
from foxwindow.models.traces import check_trace_file
from foxwindow.report import command as report_command
from foxwindow.training import data, distributed

__all__ = ["check", "check_args", "run_synthetic", "build_parser", "main", "run"]


def check(args):
    """Check the analysis inputs before any work (ValueError naming the argument): the trace file loads
    with a usable layout, or the checkpoint loads and the corpus holds the held-out windows. Returns the number
    of sequences to be analysed."""
    if args.traces:
        traces, _ = check_trace_file(args.traces)       # streamed: a trace file of any size in a chunk of memory
        return next(iter(traces.values())).shape[0]
    try:
        load_checkpoint(args.checkpoint or DEFAULT_CHECKPOINT)
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"--checkpoint: {exc}") from None
    try:
        data.heldout_tokens(n_seq=args.n_seq, seq_len=args.seq_len)
    except ValueError as exc:
        raise ValueError(f"--n-seq {args.n_seq} x --seq-len {args.seq_len}: {exc}") from None
    return args.n_seq



def _input(path, what):
    """An input file: relative to the working directory, else to the repository; UsageError if absent."""
    p = os.path.abspath(path)
    if not os.path.exists(p) and not os.path.isabs(path) and os.path.exists(outputs.repo_path(path)):
        p = outputs.repo_path(path)
    return outputs.input_file(what, p)


def _check_all(a):
    """Every check before the shipped model's or a trace file's analysis (check_args, --max-len, check)."""
    check_args(a)
    if a.max_len is not None:
        outputs.positive("--max-len", a.max_len, lo=32)
        if not a.traces and a.max_len > a.seq_len:
            raise outputs.UsageError(f"--max-len {a.max_len} exceeds --seq-len {a.seq_len}")
    try:
        S = check(a)
        driver.check_n_boot(a.n_boot, S, "--n-boot")        # its draws held in memory: refused before the work
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None


def check_args(a):
    """Every argument checked before any work; outputs.UsageError naming the argument."""
    outputs.eps_arg("--eps", a.eps)
    outputs.positive("--trials", a.trials, lo=2)                 # a variance needs two windows
    if a.synthetic:
        try:
            safety.need_memory(gates.MC_BYTES * a.trials, f"--trials {a.trials}: the Monte Carlo windows")
        except ValueError as exc:
            raise outputs.UsageError(str(exc)) from None
    outputs.positive("--n-seq", a.n_seq, lo=3)                   # the jackknife needs three sequences
    outputs.positive("--seq-len", a.seq_len, lo=32)              # windows are read on the second half
    outputs.device_arg("--device", a.device)
    if a.synthetic:
        clash = [f for f, v in (("--traces", a.traces), ("--checkpoint", a.checkpoint),
                                ("--save-traces", a.save_traces)) if v]
        if clash:
            raise outputs.UsageError(f"--synthetic ignores {' and '.join(clash)}: drop one or the other")
    elif a.traces:
        clash = [f for f, v in (("--checkpoint", a.checkpoint), ("--save-traces", a.save_traces)) if v]
        if clash:
            raise outputs.UsageError(f"--traces analyses saved traces; it cannot be combined with "
                                     f"{' and '.join(clash)}")
        a.traces = _input(a.traces, "--traces")
    if a.checkpoint:
        a.checkpoint = _input(a.checkpoint, "--checkpoint")
    elif not a.traces and not a.synthetic and os.path.exists(DEFAULT_CHECKPOINT):
        outputs.note_input(DEFAULT_CHECKPOINT, "the shipped checkpoint")          # read by default: never an output
    if not distributed.is_main():
        return                      # under torchrun rank 0 alone writes: the outputs are its machine's to check
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    if a.report:
        a.report = report_command.check_out_arg(a)
    if a.save_traces:
        a.save_traces = outputs.check_writable(a.save_traces, force=a.force, what="--save-traces")
        if a.json and a.json == a.save_traces:
            raise outputs.UsageError("--json and --save-traces name the same file")


def run_synthetic(a):
    """`python forget.py --synthetic`: the Monte Carlo table (a: parsed and checked arguments)."""
    rows = lawtable.synthetic_table(a.eps, a.trials, 0 if a.seed is None else a.seed, progress=not a.no_progress)
    lawtable.print_synthetic(rows)
    if a.json:
        outputs.write_result(a.json, rows, "synthetic")


def build_parser():
    """The command line of the per-head analysis (`python forget.py`): every per-head flag, the --model
    flags of hf_models and --synthetic (forget's synthetic table)."""
    p = uses.record_given(outputs.parser("Every window law at every eps of every head of a gated model, out of "
                                         "sample, with its state (python forget.py)"))
    p.add_argument("--synthetic", action="store_true", help="synthetic gates instead of the shipped model's traces")
    p.add_argument("--eps", type=float, default=1e-3,
                   help="decay threshold in (0, 1): added to the scan of the verdict and predictions (one outside "
                        "1e-2, 1e-3, 1e-4 gets a block of its own after the table: every law there), and the "
                        "threshold of the decay and attention-mass windows")
    p.add_argument("--trials", type=int, default=200_000, help="Monte Carlo trials per gate (--synthetic)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the bootstrap draws (default: fresh, recorded in the JSON; --synthetic: 0)")
    p.add_argument("--checkpoint", default=None,
                   help="FoX checkpoint for the per-head analysis (None: the shipped checkpoints/fox_shakespeare.pt)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--n-seq", type=int, default=32, help="held-out sequences for the per-head analysis")
    p.add_argument("--traces", default=None, help="analyse saved log-gate traces (.npz from save_trace) instead")
    p.add_argument("--save-traces", default=None, help="write the captured log-gate traces to this .npz")
    p.add_argument("--seq-len", type=int, default=2048,
                   help="tokens per sequence; windows longer than half of it are censored")
    p.add_argument("--max-len", type=int, default=None,
                   help="analyse only the first MAX_LEN positions of each sequence (rows MAX_LEN/2 .. MAX_LEN-1), "
                        "e.g. 1024 to stay inside the shipped model's training context")
    p.add_argument("--n-boot", type=int, default=N_BOOT,
                   help="document-bootstrap draws per head calibrating the slope verdict's tests (docs/VERDICT.md; 0: "
                        "no verdict tests); the laws' states and the table's columns do not use them")
    p.add_argument("--json", default=None, help="write the results as JSON to this path (NaN written as null)")
    p.add_argument("--report", default=None,
                   help="after the analysis, write the HTML report (index.html, a page per layer, PNGs) to this folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--workers", type=int, default=None,
                   help="processes analysing heads in parallel (default: the available processors; a lone head of "
                        "1024 documents or more has its documents split over them); the results do not depend on it")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="refuse an analysis estimated to take longer, and stop one that runs past it (the finished "
                        "heads are printed and saved, marked partial)")
    p.add_argument("--trace-gib", type=float, default=None,
                   help="memory (GiB) for a live model's traces before they are analysed: the layers are captured and "
                        "analysed in groups that fit, each group one forward pass up to its last layer, the same "
                        "results (default 2; with --save-traces every layer is held in one pass)")
    hf_models.add_arguments(p)                     # --model: a gated Hugging Face style checkpoint
    outputs.add_common(p)
    return p


# the flags only some sources of gates read: {dest: the sources that read it}
_READ_BY = {"trials": ("--synthetic",), "n_seq": ("the shipped model", "--model"),
            "seq_len": ("the shipped model", "--model"), "device": ("the shipped model", "--model"),
            "workers": ("the shipped model", "--model", "--traces"),
            "max_minutes": ("the shipped model", "--model", "--traces")}


def _either(names):
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _check_given(a):
    """Before any other check: an empty path, an --eps whose L = ln(1/eps) a result cannot record, and a flag the
    chosen source of gates would ignore are refused (UsageError naming the flag)."""
    for f in ("--traces", "--checkpoint", "--save-traces", "--json", "--report", "--model", "--tokenizer", "--text"):
        v = getattr(a, f[2:].replace("-", "_"))
        if v is not None and not v.strip():
            raise outputs.UsageError(f"{f}: expected a path; got an empty one")
    outputs.eps_arg("--eps", a.eps)
    if gates.threshold(a.eps) > gates.L_MAX:
        raise outputs.UsageError(f"--eps must be at least {math.exp(-gates.L_MAX):.4g} (the smallest normal float64: "
                                 f"the results record eps); got {a.eps!r}")
    if a.traces and not a.synthetic:                  # a trace file has its own sequences: these would be ignored
        given = [f for f in ("--n-seq", "--seq-len") if uses.given(a, f[2:].replace("-", "_"))]
        if given:
            raise outputs.UsageError(f"{' and '.join(given)} {'set' if len(given) > 1 else 'sets'} the held-out text "
                                     "of a live model; a trace file "
                                     "has its own sequences (--max-len analyses the first positions of each): drop "
                                     f"{'them' if len(given) > 1 else 'it'}")
    model = a.model is not None or bool(a.checkpoint and os.path.isdir(a.checkpoint))
    source = "--synthetic" if a.synthetic else "--traces" if a.traces else "--model" if model else "the shipped model"
    unread = [f"--{d.replace('_', '-')}" for d, by in _READ_BY.items() if uses.given(a, d) and source not in by]
    if unread:
        raise outputs.UsageError(f"{' and '.join(unread)} {'are' if len(unread) > 1 else 'is'} not read by {source} "
                                 f"(only by {_either(_READ_BY[unread[0][2:].replace('-', '_')])}): drop "
                                 f"{'them' if len(unread) > 1 else 'it'}")


def main(argv=None):
    """`python forget.py ARGV` (gates.main hands over here). Returns the exit code (None for 0)."""
    a = build_parser().parse_args(argv)
    _check_given(a)
    # the verdict's own options apply to the shipped model and saved traces only: never ignored silently
    own = [f for f, on in (("--max-len", a.max_len is not None), ("--n-boot", uses.given(a, "n_boot"))) if on]
    if a.synthetic and own:
        raise outputs.UsageError(f"{' and '.join(own)} appl{'y' if len(own) > 1 else 'ies'} to the models and "
                                 "--traces, not to --synthetic")
    hf_models.wants_model(a)
    hf_models.refuse_model_flags(a)                # --adapter and the other --model flags never ignored
    if hf_models.wants_model(a) and a.max_len is not None:
        raise outputs.UsageError("--max-len applies to the shipped model or --traces; not to --model")
    if a.synthetic and distributed.launched():
        # the synthetic table is one process's work; it would run once per rank
        raise outputs.UsageError("--synthetic runs in one process; under torchrun the models' and --traces' heads "
                                 "are split across ranks (run --synthetic without torchrun)")
    if a.workers is not None:
        outputs.positive("--workers", a.workers)
    if a.trace_gib is not None:
        if not (math.isfinite(a.trace_gib) and a.trace_gib > 0):
            raise outputs.UsageError(f"--trace-gib must be a number > 0; got {a.trace_gib}")
        if a.traces or a.synthetic:
            raise outputs.UsageError("--trace-gib applies to a live model (the shipped one or --model); "
                                     f"{'--traces reads its file head by head' if a.traces else '--synthetic'} "
                                     "needs no trace memory: drop it")
    if a.max_minutes is not None and not (math.isfinite(a.max_minutes) and a.max_minutes > 0):
        raise outputs.UsageError(f"--max-minutes must be a number > 0; got {a.max_minutes}")
    outputs.positive("--n-boot", a.n_boot, lo=0)
    if a.seed is not None:
        outputs.positive("--seed", a.seed, lo=0)
    if hf_models.wants_model(a):
        clash = [f for f, on in (("--traces", a.traces), ("--synthetic", a.synthetic), ("--checkpoint", a.checkpoint))
                 if on]
        if clash:
            raise outputs.UsageError(f"--model analyses that model; {' and '.join(clash)} would be ignored: drop one")
        outputs.device_arg("--device", a.device)
        driver.check_n_boot(a.n_boot, a.n_seq, "--n-boot")   # its draws held in memory: refused before the model
        return hf_run.main_hf_model(a)             # loading, capture and the same table
    if a.synthetic:
        check_args(a)
        return run_synthetic(a)
    if distributed.launched():
        # every rank joins the process group before any check, and the checks' outcome is shared: a file missing
        # on one machine stops every rank with its message instead of leaving the others waiting for that rank
        outputs.device_arg("--device", a.device)
        distributed.setup("cpu" if a.traces else a.device)
    distributed.together(lambda: _check_all(a))
    # eps -> L, once: the scan plus the user's eps
    eps = sorted(set(EPS_SCAN) | {a.eps}, reverse=True)
    kw = dict(L=[gates.threshold(e) for e in eps], mass_L=gates.threshold(a.eps), n_boot=a.n_boot,
              max_len=a.max_len, seed=a.seed, workers=a.workers, max_minutes=a.max_minutes)
    try:
        if a.traces:
            results, info = analyse_traces(a.traces, progress=not a.no_progress, **kw)
        else:
            results, info = analyse_model(a.checkpoint, n_seq=a.n_seq, seq_len=a.seq_len, device=a.device,
                                          progress=not a.no_progress, save_traces=a.save_traces,
                                          trace_gib=TRACE_GIB if a.trace_gib is None else a.trace_gib, **kw)
    except ValueError as exc:
        if "--max-minutes" in str(exc):
            raise outputs.UsageError(str(exc)) from None
        raise
    if results is None:
        return                                  # not rank 0: rank 0 prints and writes
    driver.stop_unless_finished(info)           # stopped before any head: no empty table or JSON
    print_table(results, info, eps=a.eps)
    if a.json:
        outputs.write_result(a.json, to_json(results, info), "heads")
    if a.report:
        report_command.after_analysis(to_json(results, info), a)
    if info.get("partial"):
        return say_partial(info, a.json)


main.ranked = True              # it splits its heads over torchrun's ranks (outputs.cli runs it under torchrun)


def run():
    """The `forget` console command and `python forget.py` / `python heads.py`: main with one-line errors."""
    return outputs.cli(main)


if __name__ == "__main__":
    sys.exit(run())
