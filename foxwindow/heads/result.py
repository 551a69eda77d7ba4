"""The one result type of foxwindow.analyse: every head of a model (or of the user's traces), per threshold.

    r = foxwindow.analyse(traces, eps=[1e-2, 1e-3])
    r.heads                  the per-head results (heads.verdict.HeadResult, one per head, layer by layer)
    r.at(eps=1e-3)           one record per head at that threshold: schema 1's record (eps, L, measured, laws)
                             with the head's layer, head and label
    r.table()                the printed table (heads/table.py) as a string
    r.to_json()              a JSON-ready dict (schema_version, foxwindow_version; docs/HEADS_JSON.md)
    r.plot(head="0.3", eps=1e-3), r.plot_overview()   matplotlib figures (foxwindow.report)

A thin wrapper over what the drivers return ((results, info)); to_json() is the schema-1 document that
foxwindow.report reads (every law at every eps of every head).
"""
import contextlib
import io
import math
from collections.abc import Iterable, Mapping

from foxwindow import outputs, report
from foxwindow.heads import table, verdict
from foxwindow.laws import gates

__all__ = ["HeadsResult"]

# the per-threshold fields of HeadResult, read at one threshold by at()
PER_L = ("censored_frac", "mean_W", "se_mean_W", "var_W", "se_var_W", "km_mean", "km_median", "km_bound",
         "law_mean", "law_var_iid", "law_var_lr", "law_var_mix", "pred_mean", "pred_se_mean", "pred_var",
         "pred_p_beyond", "in_regime", "regime_why", "level_ratio", "oos_coverage", "oos_se_coverage",
         "oos_z_mean", "oos_z_var", "oos_censored")


def _same_L(a, b):
    """Thresholds equal within 1e-7 of L: an eps given in float32 (1e-3 is 1.0000000475e-3 there) finds its own."""
    return abs(a - b) <= 1e-7 * max(b, 1.0)


def _not_in_scan(Lq, Ls):
    """The KeyError of a threshold L = Lq that is not among the scan's Ls."""
    scan = ", ".join(f"{math.exp(-v):.6g}" for v in Ls)
    return KeyError(f"eps = {math.exp(-Lq):.6g} (L = {Lq:.8g}) is not in the scan (eps = {scan})")


def _threshold(eps, L):
    """The figures' threshold keywords: eps= or L= (neither: eps 1e-3); both are passed on, and refused there."""
    if L is None:
        return {"eps": 1e-3 if eps is None else eps}
    return {"L": L} if eps is None else {"eps": eps, "L": L}


class HeadsResult:
    """Per-head results of one analysis (see the module docstring). heads: [HeadResult]; info: what was analysed
    (source, sizes, seed, timings)."""

    def __init__(self, heads, info):
        if isinstance(heads, (str, bytes, Mapping)) or not isinstance(heads, Iterable):
            raise TypeError(f"heads must be a list of heads.verdict.HeadResult (what analyse returns); got "
                            f"{type(heads).__name__}")
        heads = list(heads)
        bad = next((h for h in heads if not isinstance(h, verdict.HeadResult)), None)
        if bad is not None:
            raise TypeError(f"heads must be a list of heads.verdict.HeadResult (what analyse returns); got a "
                            f"{type(bad).__name__}" + (" (a per-head JSON document is read by foxwindow.report.read)"
                                                       if isinstance(bad, Mapping) else ""))
        if not isinstance(info, Mapping):
            raise TypeError(f"info must be a mapping of what was analysed (source, sizes, seed); got "
                            f"{type(info).__name__}")
        self.heads = heads
        self.info = dict(info)

    @property
    def L(self):
        """The thresholds L = ln(1/eps) of the scan, ascending."""
        return sorted(self.heads[0].L_list) if self.heads else []

    def at(self, *, eps=None, L=None):
        """One record per head at the threshold eps= or L= (exactly one; one of the scan's): schema 1's per-eps
        record (eps, L, measured: mean, var and their SEs, censored_share, quantiles; laws: each law's mean, var,
        quantiles, state, claim) with the head's layer, head and label. KeyError names the scan when the
        threshold is not in it."""
        Lq = gates.level(eps, L)
        out = []
        for h in self.to_json()["heads"]:
            rec = next((r for r in h["at"] if _same_L(r["L"], Lq)), None)
            if rec is None:
                if not h["at"]:
                    raise KeyError(f"head {h['label']} has no per-eps records (its per-law evaluation needs at "
                                   f"least {verdict.MIN_DOCS} documents: half fitted, half held out)")
                raise _not_in_scan(Lq, [r["L"] for r in h["at"]])
            out.append(dict(layer=h["layer"], head=h["head"], label=h["label"], **rec))
        return out

    def table(self, *, eps=None, L=None):
        """The per-head table that `python forget.py` prints, as a string. Its columns are eps 1e-2, 1e-3 and
        1e-4; every other threshold of eps= or L= (keywords, a number or a sequence; of the scan) gets a block of
        its own after it, and with neither, so does every threshold of a scan that holds none of those three."""
        if eps is None and L is None:
            scan = [math.exp(-v) for v in self.L]
            shown = [e for e in scan if any(abs(e - r) <= 1e-6 * r for r in table.REPORT_EPS)]
            asked = [] if shown else scan
        else:
            Ls = gates.levels(eps, L)
            for Lq in Ls:                       # a threshold outside the scan has no block: said, as at() says it
                if not any(_same_L(v, Lq) for v in self.L):
                    raise _not_in_scan(Lq, self.L)
            asked = [math.exp(-v) for v in Ls]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            table.print_table(self.heads, self.info, eps=asked)
        return buf.getvalue()

    def to_json(self):
        """The per-head document of schema 1 (heads/table.py's to_json; docs/HEADS_JSON.md), JSON-ready."""
        return outputs.json_clean(outputs.stamped(table.to_json(self.heads, self.info), "heads"))

    def plot(self, head=None, *, eps=None, L=None):
        """One head's figure (foxwindow.report.plot_head): E[W] and Var[W] against L with every law, the window
        distribution at eps= or L= (keywords; default eps 1e-3) against the predicted one, tau(n) with the regime
        marks. head: its label ("0.3") or (layer, head), the layer by its name as `layers` and the table give it
        ("layer0") or its number in the labels (0); None: the first. Returns a matplotlib Figure."""
        return report.plot_head(self, head=head, **_threshold(eps, L))

    def plot_overview(self, *, eps=None, L=None, layers=None):
        """The model at a glance (foxwindow.report.plot_overview): mean window per layer x head at eps= or L=
        (keywords; default eps 1e-3) on a log colour scale and every law's state per head. layers: only these
        layer names, one as a string or a sequence (None: all). Returns a matplotlib Figure."""
        return report.plot_overview(self, layers=layers, **_threshold(eps, L))

    def plot_laws(self, which="var", laws=None, layers=None):
        """Every head against every law (foxwindow.report.plot_laws): each law's Var[W] (which="var") or E[W]
        ("mean") over the measured one against L, one panel per head, the lead law's state at each eps.
        laws: the law names to draw (None: all); layers: only these layer names, one as a string or a sequence.
        Returns a matplotlib Figure."""
        return report.plot_laws(self, which=which, laws=laws, layers=layers)

    def __len__(self):
        return len(self.heads)

    def __iter__(self):
        return iter(self.heads)

    def __repr__(self):
        layers = len({r.layer for r in self.heads})
        eps = [math.exp(-x) for x in self.L]
        scan = f"eps {max(eps):.3g}..{min(eps):.3g}" if eps else "no thresholds"
        if not self.heads:
            return f"HeadsResult(0 heads, {scan})"
        vl, false = table.summary_counts(self.heads)        # the laws' summary that the printed table ends with
        band = table.summary_band(self.heads)
        if band is None:
            why = table.no_summary(self.heads, why=False)
            return f"HeadsResult({len(self.heads)} heads in {layers} layers, {scan}; {why})"
        laws = ", ".join(f"{k} {c}" for k, c in vl.items())
        wrong = ", ".join(f"{k} {c}" for k, c in false.items()) or "none"
        return (f"HeadsResult({len(self.heads)} heads in {layers} layers, {scan}; at {band} Var[W] "
                f"explained by {laws}; false at some eps: {wrong})")
