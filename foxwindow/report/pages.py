"""The report's pages: static HTML with inline CSS only (no script, no font, nothing fetched), the
pictures as PNG files beside the pages. Every string that comes from the result is escaped here.

    index.html          the source, the law catalogue with the count of each state, the overview picture,
                        one row per layer (linked) and one row per head (linked to its panel)
    layer-NN.html       one page per layer: its overview, its heads' table, the out-of-sample scores, and
                        per head its figure and the table of every eps (measured and each law's prediction
                        and state)

File names are made from positions (layer-03.html, head-03-07.png), never from names in the result.
"""
import html
import math

from foxwindow import safety
from foxwindow.report import schema
from foxwindow.report.plots import STATE_COLORS, STATE_MARKS, mean_window

__all__ = ["OOS_EPS", "CSS", "esc", "num", "pm", "chip", "page", "Names", "index_page", "layer_page"]

OOS_EPS = (1e-2, 1e-3, 1e-4)            # the eps of the out-of-sample table (those of the scan among them)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:1.2em 2em;color:#222;
max-width:1500px}
h1{font-size:1.45em;margin:.2em 0 .4em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em;margin:1.4em 0 .3em}
table{border-collapse:collapse;font-size:.82em;margin:.5em 0 1em}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:right;vertical-align:top;white-space:nowrap}
td.l{white-space:normal}td.s{min-width:14em}.scroll{overflow-x:auto;max-width:100%}
th{background:#f3f3f3;position:sticky;top:0}td.l,th.l{text-align:left}
.st{display:inline-block;min-width:1.2em;text-align:center;border-radius:3px;padding:0 3px;margin:0 1px}
.note{color:#555;font-size:.88em}.bad{color:#b00}
img{max-width:100%;height:auto;border:1px solid #eee}
nav{font-size:.9em;margin:.3em 0 1em}nav a{margin-right:1em}
dl.src{display:grid;grid-template-columns:max-content auto;gap:1px 1em;font-size:.9em}dl.src dt{color:#555}
dl.src dd{margin:0}
"""


def esc(v):
    """Any value as escaped HTML text (None as a dash), its control characters escaped as a terminal shows them
    (ESC as \\x1b; line breaks kept: whitespace in HTML)."""
    if v is None:
        return "–"
    return html.escape(safety.shown_lines(v), quote=True)


def num(v, fmt=".3g"):
    """A number as text: 3 significant digits (whole tokens from 1000 on) unless fmt says otherwise."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if fmt == ".3g" and abs(v) >= 1000:
        fmt = ".0f"
    return esc(format(v, fmt))


def pm(v, se, fmt=".3g"):
    return num(v, fmt) + ("" if se is None else f" ± {num(se, '.2g')}")


def chip(state, why=None, text=None):
    """A state as a coloured mark, its reason as the tooltip."""
    t = f' title="{esc(why)}"' if why else ""
    return (f'<span class="st" style="background:{STATE_COLORS[state]}"{t}>'
            f'{esc(text if text is not None else STATE_MARKS[state])}</span>')


def page(title, body):
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


LAWS_PANELS = 64               # a layer of at most this many heads gets its law-ratio picture (plots.plot_laws)


class Names:
    """The file names of a report: positions only."""

    def __init__(self, res):
        self.layers = res.layers()
        self.idx = {lay: i for i, lay in enumerate(self.layers)}
        count = {lay: 0 for lay in self.layers}
        for h in res.heads:
            count[h.layer] += 1
        self.count = count
        # the layers whose every head gets a panel of the law-ratio picture (a wider layer: its page says why not)
        self.laws_layers = [lay for lay in self.layers if count[lay] <= LAWS_PANELS]

    def layer_page(self, lay):
        return f"layer-{self.idx[lay]:02d}.html"

    def layer_png(self, lay):
        return f"layer-{self.idx[lay]:02d}.png"

    def laws_png(self, lay):
        return f"layer-{self.idx[lay]:02d}-laws.png"

    def head_png(self, h):
        return f"head-{self.idx[h.layer]:02d}-{h.head:02d}.png"

    def anchor(self, h):
        return f"h{self.idx[h.layer]}-{h.head}"

    def files(self, res):
        """Every file the report writes (pictures first, the index last)."""
        out = ["overview.png"] + [self.layer_png(lay) for lay in self.layers]
        out += [self.laws_png(lay) for lay in self.laws_layers] + [self.head_png(h) for h in res.heads]
        return out + [self.layer_page(lay) for lay in self.layers] + ["index.html"]


def _source(res):
    s = res.source
    rows = [("source", s.what), ("family", s.family), ("path", s.path), ("one row is a", res.unit),
            ("documents × tokens", f"{s.n_seq} × {s.seq_len}" if s.n_seq and s.seq_len else None),
            ("split", s.split), ("seed", s.seed), ("family-wise level", res.alpha), ("lead law", res.lead_law),
            ("foxwindow", res.foxwindow_version)]
    body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows if v is not None)
    note = f'<p class="note">{esc(res.note)}</p>' if res.note else ""
    return f'<dl class="src">{body}</dl>{note}'


def _laws_table(res, heads):
    rows = []
    for name, info in res.laws.items():
        counts = {s: sum(1 for h in heads if any(name in a.laws for a in h.at) and h.state(name) == s)
                  for s in schema.STATES}
        cells = "".join(f"<td>{counts[s]}</td>" for s in schema.STATES) if name in res.verdict_laws() else \
            f'<td colspan="{len(schema.STATES)}" class="l note">the reference: predictions, no state</td>'
        rows.append(f'<tr><td class="l"><b>{esc(name)}</b>{" (lead)" if name == res.lead_law else ""}</td>'
                    f'<td class="l">{esc(info.label)}</td><td class="l">{esc(info.description)}</td>{cells}</tr>')
    hdr = "".join(f"<th>{chip(s, text=STATE_MARKS[s] + ' ' + s)}</th>" for s in schema.STATES)
    return (f'<table><tr><th class="l">law</th><th class="l">label</th><th class="l">what it says</th>{hdr}</tr>'
            + "".join(rows) + "</table>")


def _heads_table(res, heads, names, eps, link_page):
    laws = res.verdict_laws()
    lh = "".join(f"<th>{esc(n)}</th>" for n in laws)
    u = esc(res.unit)
    out = [f'<div class="scroll"><table><tr><th class="l">{u}</th><th>κ</th><th>σ²</th><th>τ</th>'
           f'<th>E[W] at ε={num(eps, "g")}</th>'
           f'<th>decay W</th><th>mass W</th>{lh}<th class="l">summary</th></tr>']
    for h in heads:
        try:
            a = h.at_eps(eps)
            mw = (">" + num(a.measured.mean)) if a.measured.bound else pm(a.measured.mean, a.measured.mean_se)
        except ValueError:
            mw = "–"
        href = (names.layer_page(h.layer) if link_page else "") + "#" + names.anchor(h)
        states = "".join(f"<td>{chip(h.state(n))}</td>" if any(n in x.laws for x in h.at) else "<td>–</td>"
                         for n in laws)
        m = h.mass
        out.append(f'<tr><td class="l"><a href="{esc(href)}">{esc(h.label)}</a></td><td>{num(h.kappa, ".4g")}</td>'
                   f'<td>{num(h.sigma2)}</td><td>{pm(h.tau, h.tau_se)}</td><td>{mw}</td>'
                   f'<td>{num(m.decay_window) if m else "–"}</td><td>{num(m.mass_window) if m else "–"}</td>'
                   f'{states}<td class="l s">{esc(h.summary.text)}</td></tr>')
    return "".join(out) + "</table></div>"


def _oos_cell(o):
    if o is None:
        return "<td>–</td>"
    cov = pm(o.coverage, o.coverage_se, ".2f") + ("c" if (o.censored_share or 0) > 0.5 else "")
    off = (o.coverage is not None and o.coverage_se is not None and o.coverage_se > 0
           and abs(o.coverage - 0.9) > 3 * o.coverage_se)
    z = "" if o.z_mean is None and o.z_var is None else f" · z {num(o.z_mean, '.1f')} / {num(o.z_var, '.1f')}"
    return f'<td class="{"bad" if off else ""}">{cov}{z}</td>'


def _oos_table(res, heads):
    """The out-of-sample scores of every law that has one: one row per head and eps of OOS_EPS (those in the
    scan), one cell per law."""
    laws = [n for n in res.laws if any(a.laws.get(n) and a.laws[n].oos for h in heads for a in h.at)]
    if not laws:
        return '<p class="note">No out-of-sample scores in this result.</p>'
    shown = [e for e in OOS_EPS if any(_has(h, e) for h in heads)] or sorted({a.eps for h in heads for a in h.at},
                                                                               reverse=True)[:3]
    hdr = "".join(f"<th>{esc(n)}</th>" for n in laws)
    rows = []
    for h in heads:
        for k, e in enumerate(shown):
            first = f'<td class="l" rowspan="{len(shown)}">{esc(h.label)}</td>' if k == 0 else ""
            rows.append(f'<tr>{first}<td>{num(e, "g")}</td>{"".join(_oos_cell(_oos(h, e, n)) for n in laws)}</tr>')
    return (f'<div class="scroll"><table><tr><th class="l">{esc(res.unit)}</th><th>ε</th>{hdr}</tr>' + "".join(rows)
            + '</table></div><p class="note">Fit on the even documents, scored on the odd ones: the share of '
            'held-out windows inside the predicted 90% interval (± SE where known; red: more than 3 SE from 0.90; '
            'c: most held-out windows censored, a check of P(W ≥ bound) only) and, where given, the z-scores of '
            'the held-out mean and variance.</p>')


def _has(h, eps):
    try:
        h.at_eps(eps)
        return True
    except ValueError:
        return False


def _oos(h, eps, law):
    try:
        a = h.at_eps(eps)
    except ValueError:
        return None
    la = a.laws.get(law)
    return la.oos if la else None


def _at_table(res, h):
    laws = [n for n in res.laws if any(n in a.laws for a in h.at)]
    hdr = "".join(f"<th>{esc(n)}</th>" for n in laws)
    rows = []
    for a in h.at:
        m = a.measured
        c = ">" if m.bound else ""
        mean = num(m.mean) if m.bound else pm(m.mean, m.mean_se)
        cells = []
        for n in laws:
            la = a.laws.get(n)
            if la is None:
                cells.append("<td>–</td>")
                continue
            st = "" if n == schema.REFERENCE_LAW and la.state == "not claimed" else chip(la.state, la.why)
            tip = f"E[W] {num(la.mean)}, Var[W] {num(la.var)}" + (f": {la.why}" if la.why else "")
            cells.append(f'<td title="{esc(tip)}">{num(la.var)} {st}</td>')
        rows.append(f"<tr><td>{num(a.eps, 'g')}</td><td>{num(a.L, '.3f')}</td><td>{c}{mean}</td>"
                    f"<td>{pm(m.var, m.var_se)}</td><td>{num(m.censored_share, '.2f')}</td>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table><tr><th>ε</th><th>L</th><th>E[W] measured</th><th>Var[W] measured</th>'
            f"<th>censored</th>{hdr}</tr>" + "".join(rows) + '</table></div><p class="note">Each law: its Var[W] and '
            'its state at that ε (hover for its E[W] and the reason). Measured ± 1 SE; ">": some windows censored, '
            'the mean a lower bound.</p>')


def index_page(res, names, eps):
    lay_rows = []
    for lay in names.layers:
        hs = [h for h in res.heads if h.layer == lay]
        ws = [w for w in (mean_window(h, eps)[0] for h in hs) if w is not None]
        lead = res.lead_law
        counts = " ".join(chip(s, text=f"{STATE_MARKS[s]} {sum(1 for h in hs if h.state(lead) == s)}")
                          for s in schema.STATES) if lead in res.laws else "–"
        lay_rows.append(f'<tr><td class="l"><a href="{names.layer_page(lay)}">layer {esc(lay)}</a></td>'
                        f'<td>{len(hs)}</td><td>{num(min(ws)) if ws else "–"} – {num(max(ws)) if ws else "–"}</td>'
                        f'<td class="l">{counts}</td></tr>')
    src = res.source
    title = f"foxwindow report: {src.what} {src.family}"
    body = (f"<h1>{esc(title)}</h1>{_source(res)}"
            f'<h2>Overview</h2><img src="overview.png" alt="overview: mean window per layer and {esc(res.unit)}, '
            f'and each law\'s state per {esc(res.unit)}">'
            f"<h2>Laws</h2>{_laws_table(res, res.heads)}"
            f'<h2>Layers</h2><table><tr><th class="l">layer</th><th>{esc(res.unit)}s</th>'
            f'<th>E[W] at ε = {num(eps, "g")}, range</th><th class="l">{esc(res.lead_law)} (lead law): states</th></tr>'
            + "".join(lay_rows) + "</table>"
            f"<h2>Every {esc(res.unit)}</h2>{_heads_table(res, res.heads, names, eps, link_page=True)}")
    return page(title, body)


def _laws_picture(res, names, lay):
    """The layer's law-ratio picture (plots.plot_laws) with its caption, or why the page has none."""
    head = "<h2>Every law against the measured Var[W], ε by ε</h2>"
    if lay not in names.laws_layers:
        return (head + f"<p>This layer has {names.count[lay]} {esc(res.unit)}s, more than the {LAWS_PANELS} panels "
                f"of this picture: <code>foxwindow.report.plot_laws(result, layers=[...])</code> draws it from "
                f"Python.</p>")
    return (head + f"<p>Each law's Var[W] over the measured one against L = ln(1/ε), one panel per "
            f"{esc(res.unit)}: the grey band is the measured ± 2 SE, greyed ε are censored (no ratio), the lead law "
            f"({esc(res.lead_law)}) is drawn thick with its 95% interval and its state at each ε as the colour of "
            f"its markers; ε 1e-2 … 1e-4 is shaded.</p>"
            f'<img loading="lazy" src="{names.laws_png(lay)}" alt="layer {esc(lay)}: each law over the measured">')


def layer_page(res, names, lay, eps):
    hs = [h for h in res.heads if h.layer == lay]
    i = names.idx[lay]
    nav = ['<a href="index.html">index</a>']
    if i > 0:
        nav.append(f'<a href="{names.layer_page(names.layers[i - 1])}">← layer {esc(names.layers[i - 1])}</a>')
    if i + 1 < len(names.layers):
        nav.append(f'<a href="{names.layer_page(names.layers[i + 1])}">layer {esc(names.layers[i + 1])} →</a>')
    parts = [f"<nav>{''.join(nav)}</nav><h1>layer {esc(lay)}: {len(hs)} {esc(res.unit)}s</h1>",
             f'<img src="{names.layer_png(lay)}" alt="layer {esc(lay)} overview">',
             _laws_picture(res, names, lay),
             _heads_table(res, hs, names, eps, link_page=False),
             f"<h2>Out-of-sample scores</h2>{_oos_table(res, hs)}"]
    for h in hs:
        parts.append(f'<h2 id="{names.anchor(h)}">{esc(res.unit)} {esc(h.label)}</h2>'
                     f'<p>{esc(h.summary.text)}</p>'
                     f'<img loading="lazy" src="{names.head_png(h)}" alt="{esc(res.unit)} {esc(h.label)}">'
                     + _at_table(res, h))
    return page(f"layer {lay}", "\n".join(parts))
