"""The one result type of foxwindow.analyse: every head of a model (or of the user's traces), per threshold.

    r = foxwindow.analyse(traces, eps=[1e-2, 1e-3])
    r.heads                  the per-head results (heads.verdict.HeadResult, one per head, layer by layer)
    r.at(eps=1e-3)           one record per head at that threshold (a dict: the measured window and the laws)
    r.table()                the printed table (heads/table.py) as a string
    r.to_json()              a JSON-ready dict (schema_version, foxwindow_version; docs/JSON.md)

A thin wrapper over what the drivers return ((results, info)); to_json() is the schema-1 document that
foxwindow.report reads (every law at every eps of every head).
"""
import contextlib
import io
import math

from foxwindow import outputs
from foxwindow.heads import table
from foxwindow.laws import gates

__all__ = ["HeadsResult"]

# the per-threshold fields of HeadResult, read at one threshold by at()
PER_L = ("censored_frac", "mean_W", "se_mean_W", "var_W", "se_var_W", "km_mean", "km_median", "km_bound",
         "law_mean", "law_var_iid", "law_var_lr", "law_var_mix", "pred_mean", "pred_se_mean", "pred_var",
         "pred_p_beyond", "in_regime", "regime_why", "level_ratio", "oos_coverage", "oos_se_coverage",
         "oos_z_mean", "oos_z_var", "oos_censored")


class HeadsResult:
    """Per-head results of one analysis (see the module docstring). heads: [HeadResult]; info: what was analysed
    (source, sizes, seed, timings)."""

    def __init__(self, heads, info):
        self.heads = list(heads)
        self.info = dict(info)

    @property
    def L(self):
        """The thresholds L = ln(1/eps) of the scan, ascending."""
        return sorted(self.heads[0].L_list) if self.heads else []

    def at(self, *, eps=None, L=None):
        """One record per head at the threshold eps= or L= (exactly one; one of the scan's): a dict with
        layer, head, eps, L and every per-threshold quantity (measured mean_W, var_W and their errors, the laws'
        law_mean / law_var_*, the predictions pred_*, the out-of-sample oos_*). KeyError names the scan when the
        threshold is not in it."""
        Lq = gates.level(eps, L)
        out = []
        for r in self.heads:
            k = next((i for i, x in enumerate(r.L_list) if abs(x - Lq) <= 1e-9 * Lq), None)
            if k is None:
                scan = ", ".join(f"{math.exp(-x):.3g}" for x in sorted(r.L_list))
                raise KeyError(f"eps = {math.exp(-Lq):.3g} (L = {Lq:.4g}) is not in the scan (eps = {scan})")
            rec = dict(layer=r.layer, head=r.head, eps=math.exp(-r.L_list[k]), L=r.L_list[k])
            for f in PER_L:
                vals = getattr(r, f)
                rec[f] = vals[k] if k < len(vals) else None
            rec["verdict"] = r.verdict
            out.append(rec)
        return out

    def table(self):
        """The per-head table that `python forget.py` prints, as a string."""
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            table.print_table(self.heads, self.info)
        return buf.getvalue()

    def to_json(self):
        """The per-head document of schema 1 (heads/table.py's to_json; docs/HEADS_JSON.md), JSON-ready."""
        return outputs.json_clean(outputs.stamped(table.to_json(self.heads, self.info), "heads"))

    def __len__(self):
        return len(self.heads)

    def __iter__(self):
        return iter(self.heads)

    def __repr__(self):
        counts = {}
        for r in self.heads:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        layers = len({r.layer for r in self.heads})
        eps = [math.exp(-x) for x in self.L]
        scan = f"eps {max(eps):.3g}..{min(eps):.3g}" if eps else "no thresholds"
        verdicts = ", ".join(f"{v} {c}" for v, c in counts.items())
        return f"HeadsResult({len(self.heads)} heads in {layers} layers, {scan}; {verdicts})"
