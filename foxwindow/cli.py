"""The commands, one table: `python forget.py` (and the other scripts at the top of a checkout),
`python -m foxwindow NAME` and the installed `foxwindow NAME` all start here, so every command runs
through outputs.cli (one-line errors with exit 2, --debug for the traceback).

Each command's module is imported only when that command runs: `foxwindow renewal` does not pay
for torch's model code, and a missing optional dependency fails only the command that needs it.
"""
import importlib
import os
import sys

from foxwindow import outputs

# name -> (module, one line for `foxwindow --help`)
COMMANDS = {
    "forget": ("heads.command", "per-head windows and verdicts: the shipped model, saved traces, --model, --synthetic"),
    "renewal": ("laws.lawtable", "the window laws against exact first-passage numerics"),
    "train": ("training.train", "train the FoX language model (or score a checkpoint)"),
    "prune": ("uses.prune", "ACP block pruning and KV-cache horizons predicted from the gate laws"),
    "reach": ("training.reach", "how far each attention kind reaches: windows, attribution, passkey retrieval"),
    "bench-laws": ("laws.bench", "speed of the window numerics"),
    "dependent-errors": ("laws.dependent_errors", "the dependent-increment laws against exact numerics"),
    "lstm-traces": ("models.lstm",
                    "the textgenrnn character LSTM's forget gates on the held-out text, as a trace file"),
    "gru-traces": ("models.gru", "the reactionrnn character GRU's update gates on the held-out text, as a trace file"),
    "chunks": ("uses.chunks_report", "per-head chunk sizes that overflow chunked kernels, predicted and measured"),
    "chunks-fla": ("uses.chunks_fla",
                   "the chunk-safety predictions checked chunk by chunk on fla's chunked kernels (CPU)"),
    "figures": (None, "regenerate the figures (figures/make_figures.py; from a source checkout)"),
}


def command(name, argv=None):
    """Run the command `name` with argv (default sys.argv[1:]). Returns its exit code."""
    if COMMANDS[name][0] is None:
        return outputs.cli(_figures_main, argv)
    mod = importlib.import_module(f"foxwindow.{COMMANDS[name][0]}")
    return outputs.cli(mod.main, argv)


def _figures_main(argv):
    """`foxwindow figures`: the figure scripts live beside the package in a checkout, not in the package."""
    script = os.path.join(outputs.REPO, "figures", "make_figures.py")
    if not os.path.isfile(script):
        raise outputs.MissingPiece("the figure scripts are not installed with the package: run "
                                   "`python figures/make_figures.py` in a source checkout of foxwindow")
    folder = os.path.dirname(script)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    mod = importlib.import_module("make_figures")
    mod.main(argv)


def _usage():
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {n:<{width}}  {d}" for n, (_, d) in COMMANDS.items())
    return f"usage: foxwindow COMMAND [options]   (foxwindow COMMAND --help for its options)\n\ncommands:\n{rows}\n"


def main(argv=None):
    """`foxwindow COMMAND ...` and `python -m foxwindow COMMAND ...`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), end="")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"foxwindow: error: unknown command '{argv[0]}' (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    return command(argv[0], argv[1:])
