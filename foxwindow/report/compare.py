"""`foxwindow compare A.json B.json [--out DIR]`: two per-head results side by side, head by head (two
checkpoints, two steps of one run, in-context against beyond-context rows).

For every head both results hold (matched by label "layer.head") and every eps both scanned (matched on
L): the measured E[W] and Var[W] of each, their difference B - A and its standard error from the two
standard errors, sqrt(SE_A^2 + SE_B^2) (the two results drawn from independent data; for overlapping data
it overstates the error), and z = difference / SE (none where a mean is censored: a lower bound); and each
law's state in A and in B. Printed as a table
of 120 columns at three eps (the JSON holds every eps), drawn as one picture, written to DIR as
compare.txt, compare.json and compare.png. Two files of different schemas, or with no head in common,
are refused in one line.
"""
import math
import os
import textwrap

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.figure import Figure

from foxwindow import outputs
from foxwindow.report import schema
from foxwindow.report.plots import STATE_COLORS, STATE_MARKS, plain_log

__all__ = ["OUT_FILES", "TABLE_EPS", "WIDTH", "compare", "table", "plot", "build_parser", "main"]

OUT_FILES = ("compare.txt", "compare.json", "compare.png")
TABLE_EPS = (1e-2, 1e-3, 1e-4)
WIDTH = 120


def _version(d):
    return d.get("schema_version") if isinstance(d, dict) else None


def _diff(a, b, sa, sb):
    if a is None or b is None:
        return None, None, None
    d = b - a
    se = math.sqrt(sa ** 2 + sb ** 2) if sa is not None and sb is not None else None
    z = d / se if se else None
    return d, se, z


def compare(a, b, names=("A", "B")):
    """The comparison of two results (schema.read's inputs) as a JSON-ready dict: per common head, per common
    eps, the measured windows of each and their differences with SEs; per law, the state in each.
    ValueError when they share no head."""
    ra, rb = schema.read(a), schema.read(b)
    common = [h for h in ra.heads if any(g.label == h.label for g in rb.heads)]
    if not common:
        la = ", ".join(h.label for h in ra.heads[:6]) or "none"
        lb = ", ".join(h.label for h in rb.heads[:6]) or "none"
        raise ValueError(f"{names[0]} and {names[1]} have no {ra.unit} in common ({names[0]}: {la}; {names[1]}: {lb})")
    laws = [n for n in ra.verdict_laws() if n in rb.laws]
    rows = []
    for ha in common:
        hb = rb.head(ha.label)
        at = []
        for x in ha.at:
            try:
                y = hb.at_eps(x.eps)
            except ValueError:
                continue
            mx, my = x.measured, y.measured
            # a censored mean is a lower bound: no difference of two bounds is a measurement
            dm, sm, zm = (None, None, None) if mx.bound or my.bound else _diff(mx.mean, my.mean, mx.mean_se,
                                                                                my.mean_se)
            dv, sv, zv = _diff(mx.var, my.var, mx.var_se, my.var_se)
            at.append(dict(eps=x.eps, L=x.L, mean=[mx.mean, my.mean], mean_se=[mx.mean_se, my.mean_se],
                           censored=[mx.censored_share, my.censored_share], bound=[mx.bound, my.bound],
                           d_mean=dm, d_mean_se=sm, z_mean=zm,
                           var=[mx.var, my.var], var_se=[mx.var_se, my.var_se], d_var=dv, d_var_se=sv, z_var=zv,
                           states={n: [x.laws[n].state if n in x.laws else None,
                                       y.laws[n].state if n in y.laws else None] for n in laws}))
        states = {n: [ha.state(n), hb.state(n)] for n in laws}
        # per law, the eps where the state differs: {law: [[eps, state A, state B], ...]}
        moved = {n: [[x["eps"], *x["states"][n]] for x in at if x["states"][n][0] != x["states"][n][1]] for n in laws}
        rows.append(dict(label=ha.label, layer=ha.layer, head=ha.head, kappa=[ha.kappa, hb.kappa], at=at,
                         states=states, changed=[n for n in laws if moved[n]], moved={n: v for n, v in moved.items()
                                                                                      if v}))
    only = [[h.label for h in ra.heads if h not in common], [h.label for h in rb.heads
                                                               if not any(g.label == h.label for g in common)]]
    return dict(kind="heads-comparison", a=names[0], b=names[1], unit=ra.unit, laws=laws, lead_law=ra.lead_law,
                sources=[vars(ra.source), vars(rb.source)], heads=rows, only_in=only,
                se_rule="SE of B - A = sqrt(SE_A^2 + SE_B^2): independent data")


def _g(v, fmt=".4g"):
    return "-" if v is None else format(v, fmt)


def _pmse(d, se):
    if d is None:
        return "-"
    return f"{d:+.3g}" + (f"±{se:.2g}" if se is not None else "")


def table(c):
    """The comparison as lines of at most WIDTH characters: windows at TABLE_EPS (those in common), then the
    state changes (each head's wrapped onto as many lines as it needs)."""
    eps_all = sorted({a["eps"] for r in c["heads"] for a in r["at"]}, reverse=True)
    shown = [e for e in eps_all if any(abs(e - t) <= 1e-9 * t for t in TABLE_EPS)] or eps_all[:3]
    u = c["unit"]
    out = [f"A = {c['a']}, B = {c['b']}: measured windows per {u} ('>': censored, a lower bound), B - A ± SE, z",
           "(SE of B - A = sqrt(SE_A^2 + SE_B^2), for results from independent data)"]
    hdr = (f"{u:>7s} {'eps':>7s} {'E[W] A':>9s} {'E[W] B':>9s} {'dE[W] ± SE':>16s} {'z':>6s} "
           f"{'Var A':>9s} {'Var B':>9s} {'dVar ± SE':>16s} {'z':>6s}")
    out += [hdr, "-" * len(hdr)]
    for r in c["heads"]:
        for a in r["at"]:
            if not any(abs(a["eps"] - e) <= 1e-9 * e for e in shown):
                continue
            mA, mB = ((">" if bd else "") + _g(m) for m, bd in zip(a["mean"], a["bound"]))
            dm = "bounds only" if any(a["bound"]) else _pmse(a["d_mean"], a["d_mean_se"])
            out.append(f"{r['label']:>7.7s} {a['eps']:>7g} {mA:>9.9s} {mB:>9.9s} "
                       f"{dm:>16.16s} {_g(a['z_mean'], '.1f'):>6s} "
                       f"{_g(a['var'][0]):>9.9s} {_g(a['var'][1]):>9.9s} "
                       f"{_pmse(a['d_var'], a['d_var_se']):>16.16s} {_g(a['z_var'], '.1f'):>6s}")
    changed = [r for r in c["heads"] if r["changed"]]
    out.append("")
    if changed:
        out.append(f"states that differ, {len(changed)} of {len(c['heads'])} {u}s (law: A -> B at eps):")
        for r in changed:
            parts = []
            for n in r["changed"]:
                groups = {}
                for e, s, t in r["moved"][n]:
                    groups.setdefault((s, t), []).append(format(e, "g"))
                parts += [f"{n} {s} -> {t} at {','.join(es)}" for (s, t), es in groups.items()]
            out += textwrap.wrap("; ".join(parts), WIDTH, initial_indent=f"{r['label']:>7.7s}  ",
                                 subsequent_indent=" " * 11, break_on_hyphens=False)
    else:
        out.append(f"every law's state is the same in both, on all {len(c['heads'])} {u}s")
    if c["only_in"][0] or c["only_in"][1]:
        out.append(f"only in {c['a']}: {len(c['only_in'][0])} {u}s; only in {c['b']}: {len(c['only_in'][1])}")
    if len(shown) < len(eps_all):
        out.append(f"(eps {', '.join(format(e, 'g') for e in shown)} shown of {len(eps_all)} in common; compare.json "
                   "holds every eps)")
    return [line if len(line) <= WIDTH else line[:WIDTH - 3] + "..." for line in out]


def plot(c, eps=1e-3, dpi=80):
    """The comparison as a Figure: E[W] of A against B at eps, the z of the differences of E[W] and Var[W] per
    head and eps, and each law's state in A and in B."""
    heads = c["heads"]
    eps_all = sorted({a["eps"] for r in heads for a in r["at"]}, reverse=True)
    n = len(heads)
    fig = Figure(figsize=(14, 9), dpi=dpi, layout="constrained")
    axs = fig.subplots(2, 2)
    ax = axs[0, 0]
    pts = []
    for r in heads:
        a = next((x for x in r["at"] if abs(x["eps"] - eps) <= 1e-9 * eps), None)
        if a and None not in a["mean"]:
            pts.append((a["mean"][0], a["mean"][1], *[2 * (s or 0) for s in a["mean_se"]], any(a["bound"])))
    if pts:
        x, y, ex, ey, cz = (np.array(v) for v in zip(*pts))
        ax.errorbar(x[~cz], y[~cz], xerr=ex[~cz], yerr=ey[~cz], fmt="o", ms=4, color="#1f77b4", capsize=2,
                    label="± 2 SE")
        if cz.any():
            ax.plot(x[cz], y[cz], "^", mfc="white", color="#1f77b4", label="censored (lower bounds)")
        pos = np.concatenate([x, y])
        pos = pos[pos > 0]
        if pos.size:
            lo, hi = pos.min() / 1.5, pos.max() * 1.5
            ax.plot([lo, hi], [lo, hi], "-", color="0.5", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            plain_log(ax)
        ax.legend(fontsize=8)
    ax.set_xlabel(f"E[W] in {c['a']} (tokens)")
    ax.set_ylabel(f"E[W] in {c['b']} (tokens)")
    ax.set_title(f"(a) mean window at ε = {eps:g}, one point per {c['unit']}")
    ax.grid(True, alpha=0.3)
    norm = mcolors.Normalize(-5, 5)
    for ax, key, title in ((axs[0, 1], "z_mean", "(b) z of the difference of E[W]"),
                           (axs[1, 0], "z_var", "(c) z of the difference of Var[W]")):
        g = np.full((len(eps_all), n), np.nan)
        for j, r in enumerate(heads):
            for a in r["at"]:
                if a[key] is not None:
                    g[eps_all.index(a["eps"]), j] = np.clip(a[key], -5, 5)
        im = ax.imshow(np.ma.masked_invalid(g), cmap="RdBu_r", norm=norm, aspect="auto", interpolation="nearest")
        fig.colorbar(im, ax=ax, label=f"z ({c['b']} - {c['a']}), clipped at ±5", fraction=0.04)
        ax.set_yticks(range(len(eps_all)))
        ax.set_yticklabels([f"{e:g}" for e in eps_all], fontsize=7)
        ax.set_ylabel("ε")
        _head_ticks(ax, heads, c['unit'])
        ax.set_title(title)
    ax = axs[1, 1]
    laws = c["laws"]
    order = list(schema.STATES)
    g = np.full((len(laws), n), np.nan)
    for j, r in enumerate(heads):
        for i, law in enumerate(laws):
            s, t = r["states"][law]
            g[i, j] = order.index(t)
            if n <= 40:
                ax.text(j, i, STATE_MARKS[t] if s == t else f"{STATE_MARKS[s]}→{STATE_MARKS[t]}", ha="center",
                        va="center", fontsize=7 if s == t else 8, fontweight="normal" if s == t else "bold")
    cmap = mcolors.ListedColormap([STATE_COLORS[s] for s in order])
    ax.imshow(g, cmap=cmap, vmin=-0.5, vmax=len(order) - 0.5, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(laws)))
    ax.set_yticklabels(laws, fontsize=8)
    _head_ticks(ax, heads, c['unit'])
    ax.set_title(f"(d) each law's state in {c['b']} (colour; false at any ε wins); A→B where it changed")
    fig.suptitle(f"{c['b']} against {c['a']}: {n} {c['unit']}s in common", x=0.01, ha="left", fontsize=11)
    return fig


def _head_ticks(ax, heads, unit="head"):
    ax.set_xlabel(unit)
    step = max(1, len(heads) // 32)
    ax.set_xticks(range(0, len(heads), step))
    ax.set_xticklabels([r["label"] for r in heads][::step], rotation=90, fontsize=7)
    ax.grid(False)


def build_parser():
    p = outputs.parser("two per-head results compared head by head: windows (B - A with SEs) and states")
    p.add_argument("a", metavar="A.json", help="the first per-head result (the reference)")
    p.add_argument("b", metavar="B.json", help="the second per-head result")
    p.add_argument("--out", default=None, help="output folder (default: a fresh runs/compare-<timestamp>/)")
    p.add_argument("--eps", type=float, default=1e-3, help="the threshold of the picture's mean-window panel")
    outputs.add_common(p)
    return p


def main(argv=None):
    a = build_parser().parse_args(argv)
    outputs.eps_arg("--eps", a.eps)
    pa, pb = (os.path.realpath(p) for p in (a.a, a.b))
    if pa == pb or (os.path.exists(pa) and os.path.exists(pb) and os.path.samefile(pa, pb)):
        raise outputs.UsageError(f"{a.a} and {a.b} are the same file: a comparison of a result with itself is all "
                                 "zeros; give two results")
    docs = []
    for what, path in (("A.json", a.a), ("B.json", a.b)):
        p = outputs.input_file(what, path)
        try:
            docs.append(schema.as_dict(p))
        except ValueError as exc:
            raise outputs.UsageError(f"{path}: {exc}") from None
        if not isinstance(docs[-1], dict):
            raise outputs.UsageError(f"{path}: not a per-head result (a JSON {type(docs[-1]).__name__}, not an "
                                     "object)")
    va, vb = (_version(d) for d in docs)
    if va != vb:
        shown = [f"schema {v}" if v is not None else "the earlier {info, heads} shape" for v in (va, vb)]
        raise outputs.UsageError(f"{a.a} is {shown[0]} and {a.b} is {shown[1]}: compare results of one schema")
    for i, path in enumerate((a.a, a.b)):
        try:
            docs[i] = schema.read(docs[i])                  # a malformed result: named by its file
        except ValueError as exc:
            raise outputs.UsageError(f"{path}: {exc}") from None
    names = (os.path.basename(a.a), os.path.basename(a.b))
    if names[0] == names[1]:
        names = (a.a, a.b)
    try:
        c = compare(docs[0], docs[1], names)
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    scan = sorted({x["eps"] for r in c["heads"] for x in r["at"]}, reverse=True)
    if not any(abs(e - a.eps) <= 1e-9 * a.eps for e in scan):
        raise outputs.UsageError(f"--eps {a.eps:g} is in no scan of the heads both results hold (one of "
                                 f"{', '.join(format(e, 'g') for e in scan) or 'none'}): give --eps with one of them")
    out = a.out if a.out is not None else outputs.run_dir("compare", make=False)
    if os.path.splitext(out)[1].lower() in (".txt", ".json", ".png"):
        raise outputs.UsageError(f"--out {out}: the output is a folder (it receives {', '.join(OUT_FILES)})")
    out = outputs.check_dir(out, OUT_FILES, force=a.force, what="--out")
    lines = table(c)
    print("\n".join(lines))
    txt, js, png = (os.path.join(out, f) for f in OUT_FILES)
    with outputs.atomic(txt) as tt, outputs.atomic(js) as tj, outputs.atomic(png) as tp:
        plot(c, eps=a.eps).savefig(tp, format="png")
        outputs.write_result(tj, c, "heads-comparison")
        outputs.write_text(tt, "\n".join(lines) + "\n")
    print(f"wrote {', '.join(OUT_FILES)} in {out}")
    return 0
