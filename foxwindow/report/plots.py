"""Figures of a per-head result, as matplotlib Figure objects (no pyplot state, no display needed: they
save with the Agg renderer and show in a notebook as they are).

    plot_head(result, head="0.3", eps=1e-3)    one head: E[W] and Var[W] against L with every law's curve,
                                                the window distribution at eps against the laws' pmfs,
                                                tau(n) with the regime marks, the decay window against the
                                                attention-mass window, and each law's state at each eps
    plot_overview(result, eps=1e-3)             the model: mean window per layer x head at eps (log colour
                                                scale) and each law's state per head, at a glance
    plot_laws(result, which="var")              every head against every law: each law's Var[W] (or E[W]) over
                                                the measured one against L, a panel per head, the lead law's
                                                interval and state at each eps

result: a schema-1 dict, a path to its JSON, anything with to_json() (the analysis result) or a
schema.Result. Heads are named by their label ("layer.head") or a (layer, head) pair.
"""
import math
import re
import textwrap

import numpy as np
from matplotlib import colors as mcolors
from matplotlib import ticker as mticker
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from foxwindow import safety
from foxwindow.laws import gates
from foxwindow.report import schema

__all__ = ["STATE_COLORS", "STATE_MARKS", "MEASURED", "PMF_BINS", "LAW_PALETTE", "short", "law_colors", "plain_log",
           "plot_head", "mean_window", "plot_overview", "ATTENTION_EPS", "RATIO_CLIP",
           "plot_laws", "TICK_ROOM", "layer_ticks", "check_in_scan", "pick_layers", "MAX_DPI", "check_dpi",
           "MAX_CELLS"]

STATE_COLORS = {"holds": "#2ca02c", "false": "#d62728", "undetermined": "#ff9f1c", "not claimed": "#d9d9d9"}
STATE_MARKS = {"holds": "✓", "false": "✗", "undetermined": "?", "not claimed": "·"}
MEASURED = "black"
PMF_BINS = 80                   # a distribution wider than this many windows is drawn in this many bins
LAW_PALETTE = ("#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e", "#7f7f7f")


def _t(s):
    """A string from the result as plain matplotlib text: '$' would start mathematics; control characters escaped
    as a terminal shows them (ESC as \\x1b: no font has its glyph), line breaks kept."""
    return safety.shown_lines(s).replace("$", r"\$")


def short(v):
    """A window for a label: 3 significant digits below 1000, whole tokens above."""
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _nan(v):
    return math.nan if v is None else float(v)


def law_colors(res):
    """One colour per law of the catalogue (the reference grey), the same in every figure of a result."""
    out, k = {}, 0
    for name in res.laws:
        if name == schema.REFERENCE_LAW:
            out[name] = "#555555"
        else:
            out[name] = LAW_PALETTE[k % len(LAW_PALETTE)]
            k += 1
    return out


def _law_label(res, name):
    lab = res.laws[name].label if name in res.laws else name
    return name if lab == name else f"{name} ({lab})"


def plain_log(ax):
    """Log axes labelled 3, 30, 300 rather than 3 x 10^0."""
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() == "log":
            axis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(mticker.NullFormatter())


def _style(fig):
    for ax in fig.axes:
        if not ax.images:
            ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.title.set_fontsize(9.5)
        ax.xaxis.label.set_fontsize(8.5)
        ax.yaxis.label.set_fontsize(8.5)


# ----------------------------------------------------------------------------- one head


def _moment_panel(ax, res, h, which, eps, cols):
    Ls = np.array([a.L for a in h.at])
    val = np.array([_nan(getattr(a.measured, which)) for a in h.at])
    se = np.array([_nan(getattr(a.measured, which + "_se")) for a in h.at])
    cens = np.array([a.measured.bound for a in h.at])
    ok = ~cens & np.isfinite(val)
    ax.errorbar(Ls[ok], val[ok], yerr=np.where(np.isfinite(se[ok]), 2 * se[ok], 0), fmt="o", color=MEASURED, ms=4,
                capsize=2.5, lw=1, zorder=5, label="measured ± 2 SE")
    if (cens & np.isfinite(val)).any():
        ax.plot(Ls[cens], val[cens], "^", mfc="white", color=MEASURED, ms=5, zorder=5,
                label="measured, censored (a lower bound)")
    for name in res.laws:
        y = np.array([_nan(a.laws[name].mean if which == "mean" else a.laws[name].var) if name in a.laws else math.nan
                      for a in h.at])
        if not np.isfinite(y).any():
            continue
        lead = name == res.lead_law
        ax.plot(Ls, y, "-" if name != schema.REFERENCE_LAW else "--", color=cols[name], lw=2.2 if lead else 1.2,
                marker=".", ms=4, alpha=0.9, label=_t(name) + (" (lead)" if lead else ""))
    if eps is not None:
        ax.axvline(math.log(1 / eps), color="0.4", ls=":", lw=1)
    ax.set_xlabel("L = ln(1/ε)")
    ax.set_ylabel("E[W] (tokens)" if which == "mean" else "Var[W] (tokens²)")
    ax.set_title(("(a) mean window E[W]" if which == "mean" else "(b) window variance Var[W]") + " against L")


def _pmf_panel(ax, res, h, eps, cols):
    pmf = h.pmf
    if pmf is not None and (eps is None or abs(pmf.L - math.log(1 / eps)) <= 1e-6 * pmf.L):
        m = pmf.measured
        dists = ([m] if m is not None else []) + list(pmf.laws.values())
        lo = min(d.offset for d in dists) if dists else 0
        hi = max(d.offset + len(d.p) - 1 for d in dists) if dists else 0
        # a wide support is drawn in PMF_BINS bins (the mean P(W = w) over each bin): token by token, a
        # resampled distribution of a thousand windows is a comb
        edges = np.linspace(lo - 0.5, hi + 0.5, PMF_BINS + 1) if hi - lo + 1 > PMF_BINS else None

        def shown(d):
            if edges is None:
                return np.array(d.support()), np.asarray(d.p, dtype=float)
            w, _ = np.histogram(d.support(), bins=edges, weights=d.p)
            return 0.5 * (edges[1:] + edges[:-1]), w / np.diff(edges)
        if m is not None:
            x, y = shown(m)
            ax.bar(x, y, width=1.0 if edges is None else np.diff(edges), color="0.8", edgecolor="0.55", lw=0.5,
                   label="measured")
        else:
            ax.text(0.5, 0.02, "no measured distribution (windows censored at this ε)", transform=ax.transAxes,
                    ha="center", va="bottom", fontsize=7.5, color="0.35")
        for name, d in pmf.laws.items():
            lead = name == res.lead_law
            x, y = shown(d)
            ax.plot(x, y, "-", color=cols.get(name, "0.3"), lw=2 if lead else 1.1,
                    marker="." if len(x) < 60 else None, ms=3, label=_t(name) + (" (lead)" if lead else ""))
        ax.set_xlabel("window W (tokens back)")
        ax.set_ylabel("P(W = w)" if edges is None else f"P(W = w), mean over bins of {np.diff(edges)[0]:.3g} tokens")
        ax.set_title(f"(c) window distribution at ε = {pmf.eps:g}")
        return
    # no pmf at this eps: the quantiles the record holds (measured 5/50/95 %, each law's)
    try:
        a = h.at_eps(eps if eps is not None else 1e-3)
    except ValueError:
        a = None
    ax.set_title(f"(c) window quantiles at ε = {eps:g}" if eps is not None else "(c) window quantiles")
    rows = []
    if a is not None:
        rows.append(("measured", a.measured.quantiles, MEASURED))
        rows += [(n, a.laws[n].quantiles or {}, cols.get(n, "0.3")) for n in res.laws if n in a.laws]
    rows = [r for r in rows if r[1]]
    for i, (name, qs, c) in enumerate(rows):
        lo, med, hi = (_nan(qs.get(k)) for k in ("0.05", "0.5", "0.95"))
        if math.isfinite(lo) and math.isfinite(hi):
            ax.plot([lo, hi], [i, i], "-", color=c, lw=2)
        if math.isfinite(med):
            ax.plot([med], [i], "o", color=c, ms=5)
    if rows:
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r[0] for r in rows], fontsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_xlabel("window W: median (dot), 5-95 % (bar)")
    note = "no window distribution in this result" if pmf is None else f"the pmf is recorded at ε = {pmf.eps:g}"
    ax.text(0.98, 0.02, note, transform=ax.transAxes, ha="right", va="bottom", fontsize=7.5, color="0.35")


def _tau_panel(ax, res, h):
    d = h.dependence
    ax.set_title("(d) τ(n) with the regime marks n = L/κ")
    ax.set_xlabel("block length n (tokens)")
    ax.set_ylabel("τ(n) = V(n) / (n σ²)")
    if d is None or not d.n:
        ax.text(0.5, 0.5, "no τ(n) in this result", transform=ax.transAxes, ha="center", color="0.4")
        return
    n = np.array(d.n, dtype=float)
    t = np.array([_nan(v) for v in d.tau_n])
    se = np.array([_nan(v) for v in d.tau_n_se]) if len(d.tau_n_se) == len(d.n) else np.zeros_like(t)
    ax.fill_between(n, t - 2 * se, t + 2 * se, color="#1f77b4", alpha=0.2, lw=0, label="± 2 SE")
    ax.plot(n, t, "-", color="#1f77b4", lw=1.5, label="τ(n)")
    ax.set_xscale("log")
    if d.levelled_at:
        ax.axvline(d.levelled_at, color="0.2", ls="--", lw=1, label=f"levelled at n = {d.levelled_at}")
    if h.kappa and h.kappa > 0:
        law = res.lead_law if res.lead_law in res.laws else None
        shown = set()
        for a in h.at:
            nL = a.L / h.kappa
            st = a.laws[law].state if law and law in a.laws else "not claimed"
            lab = None if st in shown else _t(f"n = L/κ, {law or 'lead law'} {st}")
            shown.add(st)
            ax.axvline(nL, color=STATE_COLORS[st], lw=1.6, alpha=0.8, ymax=0.12, label=lab)
        lo, hi = min(n.min(), min(a.L / h.kappa for a in h.at)), max(n.max(), max(a.L / h.kappa for a in h.at))
        ax.set_xlim(max(lo / 1.5, 0.3), hi * 1.5)


def _mass_panel(ax, res, h):
    ax.set_title("(e) decay window against attention-mass window")
    pts = [(g.mass.decay_window, g.mass.mass_window, g) for g in res.heads
           if g.mass and g.mass.decay_window is not None and g.mass.mass_window is not None]
    if not pts:
        what = (f"{h.mass.decay_window:.3g}" if h.mass and h.mass.decay_window is not None else "-")
        ax.text(0.5, 0.5, f"no attention-mass windows in this result\n(recurrent state, or traces without the "
                f"model)\ndecay window of {h.label}: {what}", transform=ax.transAxes, ha="center", va="center",
                fontsize=8, color="0.35")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    ax.plot(x, y, "o", color="0.7", ms=3.5, label=f"every {res.unit}")
    mine = [p for p in pts if p[2] is h]
    if mine:
        ax.plot([mine[0][0]], [mine[0][1]], "o", color="#d62728", ms=7, label=_t(h.label))
    else:
        ax.text(0.02, 0.95, _t(f"{h.label}: no attention-mass window"), transform=ax.transAxes, fontsize=7.5,
                va="top", color="0.35")
    lo, hi = max(min(x.min(), y.min()) / 1.5, 1e-2), max(x.max(), y.max()) * 1.5
    ax.plot([lo, hi], [lo, hi], "-", color="0.5", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    plain_log(ax)
    eps = pts[0][2].mass.eps
    ax.set_xlabel(f"decay window at ε = {eps:g} (tokens)")
    ax.set_ylabel("attention-mass window (tokens)")


def _state_panel(ax, res, h):
    laws = [n for n in res.verdict_laws() if any(n in a.laws for a in h.at)]
    ax.set_title("(f) each law's state at each ε")
    if not laws:
        ax.text(0.5, 0.5, "no law states in this result", transform=ax.transAxes, ha="center", color="0.4")
        return
    order = list(schema.STATES)
    grid = np.full((len(laws), len(h.at)), np.nan)
    for i, n in enumerate(laws):
        for j, a in enumerate(h.at):
            if n in a.laws:
                grid[i, j] = order.index(a.laws[n].state)
                ax.text(j, i, STATE_MARKS[a.laws[n].state], ha="center", va="center", fontsize=8)
    cmap = mcolors.ListedColormap([STATE_COLORS[s] for s in order]).with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=len(order) - 0.5, aspect="auto")
    ax.set_yticks(range(len(laws)))
    ax.set_yticklabels([_t(n) + (" (lead)" if n == res.lead_law else "") for n in laws], fontsize=8)
    ax.set_xticks(range(len(h.at)))
    ax.set_xticklabels([f"{a.eps:g}" for a in h.at], rotation=60, fontsize=7)
    ax.set_xlabel("ε")
    ax.grid(False)
    ax.legend(handles=[Patch(color=STATE_COLORS[s], label=s) for s in order], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)


def _eps_of(eps, L, none_ok=False):
    """The eps of a figure's threshold, given by keyword as eps= or L= (at most one; neither: eps 1e-3; eps=None
    where none_ok: None, no threshold)."""
    if L is not None:
        if eps is not _DEFAULT:
            raise ValueError("give eps= or L=, not both")
        return math.exp(-gates.level(None, L))
    if eps is _DEFAULT:
        return 1e-3
    if eps is None and none_ok:
        return None
    return math.exp(-gates.level(eps, None))


_DEFAULT = object()         # eps not given


MAX_DPI = 600                   # a figure of 20 x 20 inches is 12000 pixels a side there (matplotlib's limit: 2^23)


def check_dpi(dpi):
    """ValueError unless dpi is a number from 1 to MAX_DPI (dots per inch of the figure). Returns it."""
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float, np.integer, np.floating)) \
            or not 1 <= dpi <= MAX_DPI:
        raise ValueError(f"dpi must be a number from 1 to {MAX_DPI} (dots per inch); got {dpi!r}")
    return dpi


def pick_layers(res, layers):
    """The heads of the layers named (None: every head): one name as a string or a sequence of names, each as
    the result names its layers. ValueError naming the unknown ones and the result's layers."""
    if layers is None:
        if not res.heads:
            raise ValueError("no heads to draw: the result has none")
        return list(res.heads)
    if isinstance(layers, str):                     # one name, not its characters
        layers = [layers]
    elif not hasattr(layers, "__iter__"):
        raise TypeError(f"layers must be a layer name or a sequence of names; got {type(layers).__name__} "
                        f"{layers!r}")
    names = [str(x) for x in layers]
    have = set(res.layers())
    bad = [n for n in names if n not in have]
    if bad or not names:
        raise ValueError(f"no heads to draw in layers {[safety.shown(n) for n in (bad or names)]}: the result's "
                         f"layers are {res.shown_layers()}")
    return [h for h in res.heads if h.layer in set(names)]


def _need_records(heads):
    """ValueError where no head has per-eps records (fewer than 4 documents: no law was evaluated)."""
    if not any(h.at for h in heads):
        raise ValueError("the result has no per-eps records to draw: no law was evaluated (its traces hold fewer "
                         "than 4 documents; every law is fitted on half of them and scored on the other half)")


def plot_head(result, head=None, *, eps=_DEFAULT, L=None, dpi=80):
    """One head's figure (six panels: see the module docstring). head: a label "layer.head" or
    (layer, head) (None: the first); eps= or L= (keywords, at most one; neither: eps 1e-3): the threshold of the
    distribution panel, marked on the L axes (eps=None: none). Returns a matplotlib Figure."""
    check_dpi(dpi)
    res = schema.read(result)
    if not res.heads:
        raise ValueError("the result has no heads")
    h = res.heads[0] if head is None else res.head(head)
    _need_records([h])
    eps = _eps_of(eps, L, none_ok=True)
    if eps is not None:
        h.at_eps(eps)                       # ValueError naming the scan: else the distribution panel is empty
    cols = law_colors(res)
    fig = Figure(figsize=(14, 7.6), dpi=dpi)
    axs = fig.subplots(2, 3)
    _moment_panel(axs[0, 0], res, h, "mean", eps, cols)
    _moment_panel(axs[0, 1], res, h, "var", eps, cols)
    _pmf_panel(axs[0, 2], res, h, eps, cols)
    _tau_panel(axs[1, 0], res, h)
    _mass_panel(axs[1, 1], res, h)
    _state_panel(axs[1, 2], res, h)
    for ax in (axs[0, 0], axs[0, 1]):
        ax.legend(fontsize=7, loc="upper left")
    for ax in (axs[0, 2], axs[1, 0], axs[1, 1]):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    kap = f"κ = {h.kappa:.4g}" if h.kappa is not None else "κ = -"
    tau = (f", τ = {h.tau:.3g}" + (f" ± {h.tau_se:.2g}" if h.tau_se is not None else "")) if h.tau is not None else ""
    text = h.summary.text if len(h.summary.text) <= 140 else h.summary.text[:139] + "…"
    fig.suptitle(_t(f"{res.unit} {h.label}: {kap}{tau}" + (f" — {text}" if text else "")),
                 fontsize=10.5, x=0.01, ha="left")
    _style(fig)
    # fixed margins: tight_layout measured every tick label and took half the drawing time
    fig.subplots_adjust(left=0.05, right=0.9, bottom=0.09, top=0.9, wspace=0.3, hspace=0.42)
    return fig


# ----------------------------------------------------------------------------- the model


MAX_CELLS = 1 << 22             # cells of an overview's layer x head grid (48 layers x 4096 channels: 196608)


def _grid(res, heads, value):
    """(layers, n_cols, array layer x head of value(h)) for the heads given."""
    layers = [lay for lay in res.layers() if any(h.layer == lay for h in heads)]
    ncol = max(h.head for h in heads) + 1
    if ncol * len(layers) > MAX_CELLS:
        top = max(heads, key=lambda h: h.head)
        raise ValueError(f"{res.unit} index {top.head} ({safety.shown(top.label)}): the overview has a column for "
                         f"every index up to the largest, {ncol} x {len(layers)} layers, more than {MAX_CELLS} cells "
                         f"(the result holds {len(heads)} {res.unit}s); pick layers=")
    g = np.full((len(layers), ncol), np.nan)
    for h in heads:
        g[layers.index(h.layer), h.head] = value(h)
    return layers, ncol, g


def mean_window(h, eps):
    """(E[W] at eps, censored?) of a head; (None, False) when eps is not in its scan."""
    try:
        a = h.at_eps(eps)
    except ValueError:
        return None, False
    return a.measured.mean, a.measured.bound


TICK_ROOM = 10                  # characters of a layer's tick label


def layer_ticks(layers, room=TICK_ROOM):
    """Tick labels for layer names (list of str): a name with a numbered part keeps it and what comes before
    ('blocks.0.attn.hook_log_fgate' -> 'blocks.0'), then a label longer than `room` keeps its last room - 1
    characters after an ellipsis; where two layers would then share a label, the names are shown whole (long
    labels squeeze the panels, but two layers never look alike)."""
    lab = []
    for n in map(safety.shown, layers):             # one line each: a tick label never breaks
        m = re.match(r"^(.*?\.\d+)\.", n)
        v = m.group(1) if m and len(n) > room else n
        lab.append(v if len(v) <= room else "…" + v[-(room - 1):])
    return lab if len(set(lab)) == len(set(map(str, layers))) else [safety.shown(n) for n in layers]


def check_in_scan(heads, eps):
    """ValueError naming the scan's eps where eps is in no head's scan (its pictures would be empty)."""
    if all(mean_window(h, eps)[0] is None for h in heads):
        scan = sorted({a.eps for h in heads for a in h.at}, reverse=True)
        raise ValueError(f"eps {eps:g} is in no head's scan (one of {', '.join(format(e, 'g') for e in scan)})")


def _ticks(ax, layers, ncol, many, most=16):
    # at most `most` head ticks, a power-of-2 step (0, 64, 128, ... for 256 heads): labels that do not collide
    step = 1 << max(0, math.ceil(math.log2(max(ncol, 1) / most)))
    ax.set_xticks(range(0, ncol, step))
    ystep = max(1, len(layers) // 24)
    ax.set_yticks(range(0, len(layers), ystep))
    ax.set_yticklabels([_t(v) for v in layer_ticks(layers)[::ystep]])
    ax.grid(False)


def plot_overview(result, *, eps=_DEFAULT, L=None, layers=None, dpi=80):
    """The model at a glance: the mean window per layer x head at eps on a log colour scale ('>' where
    some windows are censored: a lower bound) and, per law, its state on each head (false anywhere wins,
    then holds, then undetermined). layers: only these layer names, one as a string or a sequence (None: all).
    Returns a Figure."""
    check_dpi(dpi)
    res = schema.read(result)
    heads = pick_layers(res, layers)
    _need_records(heads)
    eps = _eps_of(eps, L)
    check_in_scan(heads, eps)                                    # a map of empty cells would say nothing
    laws = [n for n in res.verdict_laws() if any(n in a.laws for h in heads for a in h.at)]
    lay, ncol, g = _grid(res, heads, lambda h: _nan(mean_window(h, eps)[0]))
    many = ncol > 24 or ncol * len(lay) > 384       # too many cells to write in
    ncols_law = min(4, max(1, len(laws)))
    nrows_law = math.ceil(len(laws) / ncols_law) if laws else 0
    cell_w = min(0.55, 9.0 / ncol)
    cell_h = min(0.42, 5.0 / len(lay))
    w_map = max(5.0, ncol * cell_w + 2.2)
    width = max(12.0, min(18.0, w_map + 4.5))
    h_map = max(2.2, len(lay) * cell_h + 1.4)
    h_law = max(1.8, len(lay) * min(0.3, 3.6 / len(lay)) + 1.2)
    fig = Figure(figsize=(width, h_map + nrows_law * h_law + 1.2), dpi=dpi, layout="constrained")
    gs = fig.add_gridspec(1 + nrows_law, 2 * ncols_law, height_ratios=[h_map] + [h_law] * nrows_law)
    ax = fig.add_subplot(gs[0, : max(1, (2 * ncols_law * 2) // 3)])
    finite = g[np.isfinite(g) & (g > 0)]
    if finite.size:
        norm = mcolors.LogNorm(vmin=max(finite.min(), 1e-2), vmax=max(finite.max(), finite.min() * 1.01))
        im = ax.imshow(np.ma.masked_invalid(np.where(g > 0, g, np.nan)), cmap="viridis", norm=norm, aspect="auto",
                       interpolation="nearest")
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.015)
        cb.set_label("E[W] (tokens, log scale)", fontsize=8)
        cb.ax.yaxis.set_major_locator(mticker.LogLocator(subs=(1.0, 2.0, 5.0) if norm.vmax < 30 * norm.vmin
                                                          else (1.0,)))
        cb.ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        cb.ax.yaxis.set_minor_formatter(mticker.NullFormatter())
        cb.ax.tick_params(labelsize=7.5)
    if not many:
        for h in heads:
            m, c = mean_window(h, eps)
            if m is not None:
                v = g[lay.index(h.layer), h.head]
                light = finite.size and v > 0 and norm(v) < 0.55
                ax.text(h.head, lay.index(h.layer), (">" if c else "") + short(m), ha="center", va="center",
                        fontsize=9 if ncol * len(lay) <= 64 else 7, color="white" if light else "black")
    _ticks(ax, lay, ncol, many)
    ax.set_xlabel(res.unit)
    ax.set_ylabel("layer")
    ax.set_title(f"mean window per layer × {res.unit} at ε = {eps:g}" + (" ('>': censored, a lower bound)"
                                                                         if not many else ""))
    # the decay window against the attention-mass window, where both exist
    axm = fig.add_subplot(gs[0, max(1, (2 * ncols_law * 2) // 3):])
    pts = [(h.mass.decay_window, h.mass.mass_window) for h in heads
           if h.mass and h.mass.decay_window is not None and h.mass.mass_window is not None]
    if pts:
        x, y = np.array(pts).T
        axm.plot(x, y, "o", color="#1f77b4", ms=3.5)
        lo, hi = max(min(x.min(), y.min()) / 1.5, 1e-2), max(x.max(), y.max()) * 1.5
        axm.plot([lo, hi], [lo, hi], "-", color="0.5", lw=0.8)
        axm.set_xscale("log")
        axm.set_yscale("log")
        axm.set_xlim(lo, hi)
        axm.set_ylim(lo, hi)
        plain_log(axm)
        axm.set_xlabel("decay window (tokens)")
        axm.set_ylabel("attention-mass window (tokens)")
        axm.set_title(f"decay vs attention-mass window ({len(pts)} {res.unit}s)")
    else:
        axm.text(0.5, 0.5, "no attention-mass windows\nin this result", ha="center", va="center",
                 transform=axm.transAxes, color="0.4", fontsize=9)
        axm.set_xticks([])
        axm.set_yticks([])
        axm.set_title("decay vs attention-mass window")
    order = list(schema.STATES)
    cmap = mcolors.ListedColormap([STATE_COLORS[s] for s in order]).with_extremes(bad="white")
    for k, name in enumerate(laws):
        axl = fig.add_subplot(gs[1 + k // ncols_law, 2 * (k % ncols_law): 2 * (k % ncols_law) + 2])
        _, _, sg = _grid(res, heads, lambda h: order.index(h.state(name)) if any(name in a.laws for a in h.at)
                         else math.nan)
        axl.imshow(np.ma.masked_invalid(sg), cmap=cmap, vmin=-0.5, vmax=len(order) - 0.5, aspect="auto",
                   interpolation="nearest")
        if not many:
            for h in heads:
                if any(name in a.laws for a in h.at):
                    axl.text(h.head, lay.index(h.layer), STATE_MARKS[h.state(name)], ha="center", va="center",
                             fontsize=10 if ncol * len(lay) <= 64 else 7)
        _ticks(axl, lay, ncol, many, most=6)                                # a quarter of the width
        axl.set_title(_t(name) + (" (lead law)" if name == res.lead_law else ""))
        axl.set_xlabel(res.unit, fontsize=8)
    if laws:
        fig.legend(handles=[Patch(color=STATE_COLORS[s], label=f"{STATE_MARKS[s]} {s}") for s in order],
                   loc="outside lower center", ncol=4, fontsize=8.5, frameon=False, title="each law's state per "
                   f"{res.unit} (false at any ε wins, then holds, then undetermined)", title_fontsize=8.5)
    src = res.source
    nl = len(lay)
    fig.suptitle(_t(f"{src.what} {src.family}: {len(heads)} {res.unit}s in {nl} layer{'s' if nl > 1 else ''}"
                 + (f", {src.n_seq} × {src.seq_len} held-out tokens" if src.n_seq and src.seq_len else "")),
                 fontsize=11, x=0.01, ha="left")
    _style(fig)
    return fig


# ----------------------------------------------------------------------------- every head against the laws

ATTENTION_EPS = (1e-2, 1e-4)    # the thresholds attention uses: shaded in plot_laws
RATIO_CLIP = (0.1, 10.0)        # a law further off than this is drawn on the axis edge


def _ratio_panel(ax, res, h, which, laws, cols):
    """One head: each law's Var[W] (or E[W]) over the measured one against L, the measured ±2 SE as a band
    around 1, the lead law's state at each eps as the colour of its markers. Returns the lines drawn."""
    Ls = np.array([a.L for a in h.at])
    val = np.array([_nan(getattr(a.measured, which)) for a in h.at])
    se = np.array([_nan(getattr(a.measured, which + "_se")) for a in h.at])
    cens = np.array([a.measured.bound for a in h.at])
    ok = ~cens & np.isfinite(val) & (val > 0)
    rel = np.where(ok & np.isfinite(se), 2 * se / np.where(ok, val, 1.0), np.nan)
    lo_c, hi_c = RATIO_CLIP
    if ok.any():                                    # where= leaves a gap at a censored eps between measured ones
        ax.fill_between(Ls, np.clip(1 - np.nan_to_num(rel), lo_c, None), 1 + np.nan_to_num(rel), where=ok,
                        color="0.85", lw=0, zorder=1)
    ax.axhline(1.0, color=MEASURED, lw=0.8, zorder=2)
    if cens.any():                                  # censored: the measured value is a lower bound, no ratio
        mids = np.concatenate([[Ls[0] - 0.5], 0.5 * (Ls[1:] + Ls[:-1]), [Ls[-1] + 0.5]])
        for k in np.flatnonzero(cens):
            ax.axvspan(mids[k], mids[k + 1], color="0.92", lw=0, zorder=0)
        first = np.flatnonzero(cens)[0]
        ax.text(0.5 * (mids[first] + mids[-1]), 0.13, "censored", ha="center", va="bottom", fontsize=6.5,
                color="0.45", zorder=7)
    drawn = {}
    for name in laws:
        y = np.array([_nan(getattr(a.laws[name], which)) if name in a.laws else math.nan for a in h.at])
        r = np.where(ok, y / np.where(ok, val, 1.0), np.nan)
        if not np.isfinite(r).any():
            continue
        lead = name == res.lead_law
        rc = np.clip(r, lo_c, hi_c)
        line, = ax.plot(Ls, rc, "--" if name == schema.REFERENCE_LAW else "-", color=cols[name],
                        lw=2.0 if lead else 1.0, alpha=1.0 if lead else 0.8, zorder=4 if lead else 3)
        drawn[name] = line
        if lead and which == "var":                 # its 95% interval: the law's sampling error and the data's
            ci = np.array([a.laws[name].var_ratio_ci if name in a.laws and a.laws[name].var_ratio_ci and o
                           else [math.nan, math.nan] for a, o in zip(h.at, ok)], dtype=float)
            if np.isfinite(ci).any():
                ax.fill_between(Ls, np.clip(ci[:, 0], lo_c, hi_c), np.clip(ci[:, 1], lo_c, hi_c),
                                color=cols[name], alpha=0.18, lw=0, zorder=2)
        if lead:                                    # the lead law's state at each eps, as its marker colour
            for L, v, a in zip(Ls, rc, h.at):
                if np.isfinite(v) and name in a.laws:
                    ax.plot(L, v, "o", ms=4.5, mfc=STATE_COLORS[a.laws[name].state], mec="black", mew=0.5,
                            zorder=6)
    ax.set_yscale("log")
    ax.set_ylim(lo_c * 0.9, hi_c * 1.1)
    ax.yaxis.set_major_locator(mticker.FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10]))
    plain_log(ax)
    return drawn


def plot_laws(result, which="var", laws=None, layers=None, max_heads=64, title=None, dpi=80):
    """Every head against the laws, one small panel per head: each law's Var[W] (which="var") or E[W]
    ("mean") over the measured one against L = ln(1/eps), the measured +-2 SE as a grey band around 1
    (censored eps greyed: no ratio there), the lead law thick with its state at each eps as the colour of
    its markers, the eps attention uses (1e-2 ... 1e-4) shaded. A panel's title names the laws that explain
    the head's mean and variance there and those that are false (its summary line).

    laws: the law names to draw (None: every law of the result); layers: only these layer names (one as a
    string or a sequence);
    max_heads: refuse more panels than this (ValueError; pass layers=); title: put before the figure's own
    title. Returns a matplotlib Figure."""
    check_dpi(dpi)
    if isinstance(max_heads, bool) or not isinstance(max_heads, (int, np.integer)) or max_heads < 1:
        raise ValueError(f"max_heads must be an integer >= 1 (panels); got {max_heads!r}")
    res = schema.read(result)
    if which not in ("var", "mean"):
        raise ValueError(f"which must be 'var' or 'mean'; got {which!r}")
    heads = pick_layers(res, layers)
    _need_records(heads)
    if len(heads) > max_heads:
        raise ValueError(f"{len(heads)} {res.unit}s is more than max_heads={max_heads} panels; "
                         f"pick layers= (the result has {len(res.layers())})")
    known = [n for n in res.laws if any(n in a.laws for h in heads for a in h.at)]
    if laws is None:
        laws = known
    else:
        if isinstance(laws, str):                   # one name, not its characters
            laws = [laws]
        elif not hasattr(laws, "__iter__"):
            raise TypeError(f"laws must be a law name or a sequence of names; got {type(laws).__name__} {laws!r}")
        laws = [str(n) for n in laws]
        if not laws:
            raise ValueError(f"laws is empty: name at least one of {', '.join(known)} (or None: all)")
        bad = [n for n in laws if n not in known]
        if bad:
            raise ValueError(f"no law {bad[0]!r} in this result; one of {', '.join(known)}")
    cols = law_colors(res)
    lay = [x for x in res.layers() if any(h.layer == x for h in heads)]
    ncol = max(h.head for h in heads) + 1 if len(lay) > 1 else min(len(heads), 8)
    if ncol > 8:                                    # wide layers wrap: 8 panels a row
        ncol = 8
    pos = []
    for h in heads:
        if len(lay) > 1 and max(x.head for x in heads) < 8:
            pos.append((lay.index(h.layer), h.head))
        else:
            k = len(pos)
            pos.append((k // ncol, k % ncol))
    nrow = max(p[0] for p in pos) + 1
    width, height = 2.9 * ncol + 0.6, 2.35 * nrow + 1.3
    fig = Figure(figsize=(width, height), dpi=dpi)
    axs = np.atleast_2d(fig.subplots(nrow, ncol, sharex=True, sharey=True, squeeze=False))
    used = set()
    drawn = {}
    La, Lb = (math.log(1 / e) for e in ATTENTION_EPS)
    for h, (i, j) in zip(heads, pos):
        ax = axs[i, j]
        used.add((i, j))
        ax.axvspan(La, Lb, color="#e8f3e8", lw=0, zorder=0)
        drawn.update(_ratio_panel(ax, res, h, which, laws, cols))
        s = h.summary
        kap = f", κ {h.kappa:.3g}" if h.kappa is not None else ""
        lines = [f"{h.label}{kap}"]
        if s.text or s.mean_law or s.var_law:
            claim = f" ({s.var_claim:.0%})" if s.var_law and s.var_claim is not None else ""
            lines[0] += f": mean {s.mean_law or 'no law'}, var {s.var_law or 'no law'}{claim}"
        if s.false:
            lines.append("false: " + ", ".join(s.false))
        ax.set_title(_t("\n".join(textwrap.shorten(x, 52, placeholder="…") for x in lines)), fontsize=7.5)
        if i == nrow - 1 or (i + 1, j) not in {p for p in pos}:
            ax.set_xlabel("L = ln(1/ε)", fontsize=8)
        if j == 0:
            ax.set_ylabel(("Var[W]" if which == "var" else "E[W]") + " law / measured", fontsize=8)
    for i in range(nrow):
        for j in range(ncol):
            if (i, j) not in used:
                axs[i, j].set_visible(False)
    handles = [drawn[n] for n in laws if n in drawn]
    labels = [_t(n) + (" (lead)" if n == res.lead_law else "") for n in laws if n in drawn]
    handles += [Patch(color="0.85"), Patch(color="#e8f3e8"), Patch(color="0.92")]
    labels += ["measured ± 2 SE", "ε 1e-2 … 1e-4", "censored ε (no ratio)"]
    if which == "var" and res.lead_law in drawn:
        handles.append(Patch(color=cols[res.lead_law], alpha=0.18))
        labels.append("lead law's 95% interval")
    handles += [Patch(facecolor=STATE_COLORS[s], edgecolor="black", label=s) for s in schema.STATES]
    labels += [f"lead law {s}" for s in schema.STATES]
    fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), fontsize=7.5, frameon=False)
    src = res.source
    what = "Var[W]" if which == "var" else "E[W]"
    fig.suptitle((f"{title}  " if title else "") + _t(
        f"{src.what} {src.family}: {len(heads)} {res.unit}s, each law's {what} over the measured one against L "
        f"(ratios beyond {RATIO_CLIP[0]:g} or {RATIO_CLIP[1]:g} on the edge)"),
                 fontsize=10.5, x=0.01, ha="left")
    _style(fig)
    for ax in fig.axes:
        ax.title.set_fontsize(7.5)
    # fixed margins in inches (a constrained layout measured every label and took most of the drawing time)
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, top=1 - 0.8 / height, bottom=1.0 / height,
                        wspace=0.12, hspace=0.6 / (2.35 - 0.6))
    return fig
