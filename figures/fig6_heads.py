"""Figure 6: every head of the shipped model against every law, eps by eps: each law's Var[W] over the measured
one against L = ln(1/eps) (foxwindow.report.plots.plot_laws), the measured +-2 SE as a band around 1, the lead
law's 95% interval and its state at each eps, the eps attention uses shaded. Read from the schema-1 per-head
result (results/laws/fox_heads.json, `python forget.py --seed 0 --json ...`; --heads-json for another; the
earlier {info, heads} shape is converted on reading). Skipped (never invented) when the JSON is absent."""
import os

import figstyle
from figstyle import Skip


def make(ctx):
    from foxwindow.report import plots, schema
    path = ctx.heads_json
    res = figstyle.read_heads(path)
    if len(res.heads) > 64:
        raise Skip(f"{path} has {len(res.heads)} {res.unit}s: figure 6 draws up to 64 panels "
                   "(foxwindow.report.plots.plot_laws(result, layers=...) draws a few layers)")
    fig = plots.plot_laws(res, which="var", title="Fig. 6", dpi=110)
    lead = res.lead_law
    told = ""
    if lead in res.laws:
        cells = [a.laws[lead].state for h in res.heads for a in h.at
                 if lead in a.laws and 1e-4 * 0.999 <= a.eps <= 1e-2 * 1.001]
        told = f"; lead law {lead} at eps 1e-2..1e-4: " + ", ".join(
            f"{s} {cells.count(s)}" for s in schema.STATES if cells.count(s))
    return (figstyle.save(fig, ctx.out, "fig6_heads"),
            f"{len(res.heads)} {res.unit}s from {os.path.basename(path)}{told}")
