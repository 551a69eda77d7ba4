"""Shared look for every figure: one rcParams set, one colour per seed gate, PNG + PDF output."""
import os
import sys

import matplotlib

matplotlib.use("Agg")                      # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

# the repository root holds forget.py and renewal.py
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from foxwindow import outputs  # noqa: E402  (needs ROOT on sys.path)

GATE_COLORS = ("tab:blue", "tab:orange", "tab:green")
ALIBI_COLORS = ("black", "dimgray")


class Skip(Exception):
    """A figure whose input data is absent: the driver reports the reason and moves on."""


def read_heads(path, required=True):
    """The per-head result at path (report.schema.read: schema 1 or the earlier shape, checked). Skip where it
    is unusable or has no heads, and where the file is absent when required (else None)."""
    from foxwindow.report import schema
    if not os.path.exists(path):
        if not required:
            return None
        rel = os.path.relpath(path)
        raise Skip(f"{rel} not found (write it with `python forget.py --seed 0 --json {rel}`)")
    try:
        res = schema.read(path)
    except ValueError as exc:
        raise Skip(str(exc)) from None
    if not res.heads:
        raise Skip(f"{path} has no heads")
    return res


def apply():
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 150, "font.size": 10, "axes.titlesize": 10.5,
        "axes.labelsize": 10, "legend.fontsize": 8.5, "axes.grid": True, "grid.alpha": 0.3,
        "figure.titlesize": 12, "savefig.bbox": "tight",
    })


def gate_label(g):
    """Short legend label for a logit-normal gate: its logit law and forget rate."""
    k = g.moments().kappa
    return f"g = sigmoid(N({g.mu:g}, {g.s:g}²)), κ = {k:.3f}"


def save(fig, out, name):
    """Write out/name.png and out/name.pdf, each to a temporary file then renamed; return both paths."""
    paths = [os.path.join(out, f"{name}.{ext}") for ext in ("png", "pdf")]
    # no creation date in the PDF: regenerating unchanged figures leaves the files unchanged
    try:
        outputs.save_figure(fig, paths[0])
        outputs.save_figure(fig, paths[1], metadata={"CreationDate": None})
    finally:
        plt.close(fig)
    return paths


def plain_log(ax, which="xy"):
    """Log axes labelled 1, 2, 5, 10, 20, 50 ... in plain numbers instead of 2×10^1."""
    from matplotlib import ticker
    fmt = ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for w in which:
        axis = ax.xaxis if w == "x" else ax.yaxis
        axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(ticker.NullFormatter())
