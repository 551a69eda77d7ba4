"""Figure 10: the per-head report's model overview (foxwindow.report.plots.plot_overview) of the shipped
model's per-head result (results/laws/fox_heads.json, `python forget.py --seed 0 --json ...`; --overview-json):
the mean window per layer x head at eps = 1e-3 on a log colour scale, the decay against the attention-mass
window, and each law's state per head. The same picture opens the HTML report of `python forget.py --report DIR`."""
import os

import figstyle


def make(ctx):
    from foxwindow.report import plots, schema
    path = ctx.overview_json
    res = figstyle.read_heads(path)
    fig = plots.plot_overview(res, eps=1e-3, dpi=110)
    states = {s: sum(h.state(res.lead_law) == s for h in res.heads) for s in schema.STATES} \
        if res.lead_law in res.laws else {}
    told = ", ".join(f"{s}: {c}" for s, c in states.items() if c)
    return (figstyle.save(fig, ctx.out, "fig10_overview"),
            f"{len(res.heads)} {res.unit}s from {os.path.basename(path)}; lead law {res.lead_law} {told}")
