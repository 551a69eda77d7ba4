"""What the laws are used for: ACP block pruning and KV-cache horizons (prune, prune_laws, prune_measure,
prune_report) and chunk-size safety of chunked kernels (chunks, chunks_report).

record_given(parser) and given(args, dest), shared by the two commands: which options the command line gave (a
flag the chosen mode ignores is refused, not dropped); fit_number(v, width, prec): a table cell that keeps its width
for any value."""
import argparse

__all__ = ["chunks", "chunks_report", "prune", "prune_laws", "prune_measure", "prune_report", "StoreGiven",
           "record_given", "given", "fit_number"]


class StoreGiven(argparse.Action):
    """argparse's plain store (a value given twice: the last counts, as in every command of the package), each
    option given recorded in the namespace's `given_flags`."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = getattr(namespace, "given_flags", None)
        if seen is None:
            seen = set()
            setattr(namespace, "given_flags", seen)
        seen.add(self.dest)
        setattr(namespace, self.dest, values)


def record_given(parser):
    """Make every option of `parser` added from now on that takes a value (the plain store action) a StoreGiven.
    Returns the parser."""
    parser.register("action", None, StoreGiven)
    parser.register("action", "store", StoreGiven)
    return parser


def given(args, dest):
    """Whether option `dest` was given on the command line (parsed by a record_given parser)."""
    return dest in getattr(args, "given_flags", ())


def fit_number(v, width, prec):
    """v as f"{v:{width}.{prec}f}" when that fits in `width` characters (every ordinary value: the text is then
    exactly that), else in e-notation with as many digits as fit (an extreme value, 3e+38, keeps the table's
    columns); NaN and inf as Python writes them."""
    text = f"{v:{width}.{prec}f}"
    if len(text) <= width:
        return text
    for p in range(max(prec, 0), -1, -1):
        text = f"{v:{width}.{p}e}"
        if len(text) <= width:
            return text
    return text
