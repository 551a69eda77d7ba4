"""The commands, one table: `python forget.py` (and the other scripts at the top of a checkout),
`python -m foxwindow NAME` and the installed `foxwindow NAME` all start here, so every command runs
through outputs.cli (one-line errors with exit 2, --debug for the traceback).

Each command's module is imported only when that command runs: `foxwindow renewal` does not pay
for torch's model code, and a missing optional dependency fails only the command that needs it.
"""
import functools
import importlib
import os
import subprocess
import sys
import textwrap

from foxwindow import __version__, outputs

__all__ = ["COMMANDS", "RANKED", "command", "main"]

# name -> (module, one line for `foxwindow --help`)
COMMANDS = {
    "forget": ("heads.command", "every window law on every head, out of sample: the shipped model, saved traces, "
                                "--model, --synthetic"),
    "renewal": ("laws.lawtable", "the window laws against exact first-passage numerics"),
    "train": ("training.train", "train the FoX language model (or score a checkpoint)"),
    "prune": ("uses.prune", "ACP block pruning and KV-cache horizons predicted from the gate laws"),
    "reach": ("training.reach", "how far each attention kind reaches: windows, attribution, passkey retrieval"),
    "bench-laws": ("laws.bench", "speed of the window numerics"),
    "bench-scale": ("heads.bench_scale", "scaling of the per-head analysis: hot paths, workers, ranks, the 760M class"),
    "dependent-errors": ("laws.dependent_errors", "the dependent-increment laws against exact numerics"),
    "second-order-regime": ("laws.second_order_regime", "where the second-order dependent law holds: its error in "
                            "units of each correlation length, on many dependence structures"),
    "seed-spread": ("heads.seed_spread", "how far another seed moves each head's predicted window, against its SE"),
    "lstm-traces": ("models.lstm",
                    "the textgenrnn character LSTM's forget gates on the held-out text, as a trace file"),
    "gru-traces": ("models.gru", "the reactionrnn character GRU's update gates on the held-out text, as a trace file"),
    "chunks": ("uses.chunks_report", "per-head chunk sizes that overflow chunked kernels, predicted and measured"),
    "report": ("report.command", "a per-head result JSON as a static HTML report with its pictures"),
    "compare": ("report.compare", "two per-head results compared head by head: windows and states"),
    "figures": (None, "regenerate the committed figures (a source checkout's figures/make_figures.py)"),
    "chunks-fla": ("uses.chunks_fla",
                   "the chunk-safety predictions checked chunk by chunk on fla's chunked kernels (CPU)"),
}


# the commands whose mains split their work over the ranks of a torchrun job (`main.ranked`); outputs.cli refuses
# any other under torchrun: it would run whole on every rank and write the same outputs from each
RANKED = ("forget", "train")


def command(name, argv=None):
    """Run the command `name` with argv (default sys.argv[1:]). Returns its exit code. Under torchrun (WORLD_SIZE > 1)
    a command that does not split its work over the ranks (all but RANKED) stops at once with one line, before its
    module is imported (outputs.cli)."""
    def run(a):                 # the module is imported inside the wrapper: Ctrl-C during start-up is one line
        if COMMANDS[name][0] is None:
            return _figures_main(a)
        return importlib.import_module(f"foxwindow.{COMMANDS[name][0]}").main(a)
    run.ranked, run.command = name in RANKED, name
    return outputs.cli(run, argv)


FIGURE_SCRIPT = ("figures", "make_figures.py")
# what regenerating the committed figures reads beside the scripts: the per-head, pruning and chunk results
FIGURE_INPUTS = ("results/laws/fox_heads.json", "results/laws/lstm_heads.json", "results/prune/prune.json",
                 "results/chunks/fox.json")


def _is_checkout(d):
    return os.path.isfile(os.path.join(d, *FIGURE_SCRIPT)) and os.path.isdir(os.path.join(d, "foxwindow"))


def find_checkout(start=None):
    """The source checkout whose figure scripts `foxwindow figures` runs: the package's own folder's parent
    when the package runs from a checkout (or an editable install), else the working folder or the nearest
    folder above it holding figures/make_figures.py and foxwindow/. None when there is none."""
    if _is_checkout(outputs.REPO):
        return outputs.REPO
    d = os.path.abspath(start or os.getcwd())
    while True:
        if _is_checkout(d):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def _figures_main(argv):
    """`foxwindow figures [options]`: the figure scripts and their inputs (FIGURE_INPUTS) are files of a source
    checkout, not of the package; this runs the checkout's figures/make_figures.py with the checkout's own
    package (the figures match the code that drew them), or says in one line what is missing."""
    repo = find_checkout()
    if repo is None:
        raise outputs.MissingPiece(
            f"the figure scripts ({'/'.join(FIGURE_SCRIPT)}) and their inputs ({', '.join(FIGURE_INPUTS)}) are in a "
            "source checkout of foxwindow, not in the installed package: run `foxwindow figures` inside a checkout")
    if os.path.realpath(repo) == os.path.realpath(outputs.REPO):
        folder = os.path.join(repo, FIGURE_SCRIPT[0])
        if folder not in sys.path:
            sys.path.insert(0, folder)
        mod = importlib.import_module("make_figures")
        mod.main(argv)
        return 0
    path = [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.call([sys.executable, os.path.join(repo, *FIGURE_SCRIPT), *(argv or [])], env=env)


USAGE_WIDTH = outputs.WIDTH


def _usage():
    width = max(map(len, COMMANDS))
    wrap = functools.partial(textwrap.wrap, width=USAGE_WIDTH - width - 4)     # every line within 120 columns
    rows = "\n".join(f"  {n:<{width}}  " + f"\n{'':{width + 4}}".join(wrap(d)) for n, (_, d) in COMMANDS.items())
    return (f"usage: foxwindow COMMAND [options]   (foxwindow COMMAND --help for its options; foxwindow --version)\n\n"
            f"commands:\n{rows}\n")


def main(argv=None):
    """`foxwindow COMMAND ...` and `python -m foxwindow COMMAND ...`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "--version":
        print(f"foxwindow {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), end="")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"foxwindow: error: unknown command '{argv[0]}' (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    # the command's usage and errors say "foxwindow NAME", also under python -m (argparse reads sys.argv[0])
    prog, sys.argv[0] = sys.argv[0], f"foxwindow {argv[0]}"
    try:
        return command(argv[0], argv[1:])
    finally:
        sys.argv[0] = prog
