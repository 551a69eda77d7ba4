"""The per-head report: the printed table (within WIDTH columns: per head the measured Var[W] at REPORT_EPS,
the lead law's and the bootstrap's Var ratios to it with their states, and the head's summary) and the JSON
document of the results (schema 1, docs/HEADS_JSON.md).

    print_table(results, info)    the table on stdout
    to_json(results, info)        the schema-1 document, ready for outputs.write_json
"""
import math
import textwrap

import foxwindow
from foxwindow import outputs
from foxwindow.heads import laws as headlaws
from foxwindow.laws import gates

REPORT_EPS = (1e-2, 1e-3, 1e-4)              # the eps whose predictions the table prints


def _f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def _at(r, eps):
    """Index of eps in r.eps_list (by L), or None."""
    L = gates.threshold(eps)
    for k, Lk in enumerate(r.L_list):
        if abs(Lk - L) < 1e-9 * L:
            return k
    return None


WIDTH = 120                                  # the printed table's width; what does not fit is in the JSON
_CODE = {"holds": "H", "false": "F", "not claimed": "-", "undetermined": "?"}


SHORT = {"iid": "iid", "marginal": "marg", "dependent": "dep", "second_order": "2nd", "finite_n": "fin",
         "mixture": "mix", "bootstrap": "boot", "three_cumulant": "3cum"}


def _g(v):
    """A number in at most 6 characters."""
    if v is None or not math.isfinite(v):
        return "-"
    if abs(v) >= 1e4:
        return f"{v:.1e}".replace("e+0", "e").replace("e+", "e")
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _rec(r, e):
    k = _at(r, e)
    if k is None or not r.laws or k >= len(r.laws["at"]):
        return None
    return r.laws["at"][k]


def _ratio(r, law, e):
    """Var_law / Var_measured at eps e with the state's letter, e.g. '0.97H'; '-' when absent."""
    rec = _rec(r, e)
    if rec is None:
        return "-"
    lw = rec["laws"][law]
    v = lw.get("var_ratio")
    return ("" if v is None else f"{v:.2f}" if v < 9.995 else f"{v:.0f}" if v < 1e4 else ">1e4") + _CODE[lw["state"]]


def _meas_var(r, e):
    rec = _rec(r, e)
    if rec is None:
        return "-"
    return _g(rec["measured"]["var"]) if rec["measured"]["var"] is not None else "cens"


def _short(name):
    return SHORT.get(name, name[:4]) if name else "-"


def _columns(shown):
    """The table's columns: (header, width, cell function of a HeadResult); the last takes the rest."""
    cols = [("L.H", 4, lambda r: f"{r.layer}.{r.head}"), ("kappa", 7, lambda r: _f(r.kappa, ".4f")),
            ("tau", 5, lambda r: _f(r.tau, ".2f"))]
    for e in shown:
        cols.append((f"V{e:.0e}".replace("e-0", "e-"), 6, lambda r, e=e: _meas_var(r, e)))
    for e in shown:
        cols.append((f"lead{e:.0e}".replace("e-0", "e-"), 9, lambda r, e=e: _ratio(r, headlaws.LEAD, e)))
    for e in shown:
        cols.append((f"boot{e:.0e}".replace("e-0", "e-"), 9, lambda r, e=e: _ratio(r, "bootstrap", e)))
    cols.append(("mean", 5, lambda r: _short((r.summary or {}).get("mean_law"))))
    cols.append(("var", 5, lambda r: _short((r.summary or {}).get("var_law"))))
    cols.append(("false at 1e-2..1e-4", 0, lambda r: ",".join(_short(n) for n in (r.summary or {}).get("false") or [])
                 or "-"))
    return cols


def _wrap(text):
    print("\n".join(textwrap.wrap(text, WIDTH)))


def print_table(results, info):
    """The per-head table within WIDTH columns: measured Var[W] at REPORT_EPS, the lead law's and the
    bootstrap's Var ratio to it (out of sample) with their states, and each head's summary."""
    S, T = info["n_seq"], info.get("analysed_len", info["seq_len"])
    _wrap(f"Per-head window laws: {info['checkpoint']}, {S} held-out sequences x {info['seq_len']} tokens"
          + (f" (first {T} analysed)" if T != info["seq_len"] else "")
          + f"; windows W = N - 1 of {info.get('rows', 'rows in each sequence second half')}.")
    fam = next((r.laws.get("family") for r in results if r.laws), None)
    _wrap(f"Every law fitted on the even documents, scored on the odd ones; V: measured Var[W] (held-out half, "
          f"'cens': censored windows); 'lead' ({headlaws.LEAD}, the lead law) and 'boot' (block "
          f"bootstrap, the reference): Var_law / Var_measured with its state (H holds, F false, - not claimed, "
          f"? undetermined); mean, var: the first law that explains the mean / holds for Var[W] at every eps "
          f"1e-2..1e-4 (" + ", ".join(f"{v} {k}" for k, v in SHORT.items()) + ")"
          + (f"; family-wise level {headlaws.ALPHA:g} per model over {fam['m']} claimed cells (each at "
             f"{fam['alpha_test']:.2g}, t = {fam['t_crit']:.2f}); seed {info.get('seed')}" if fam else "")
          + ". Every law's numbers at every eps: --json (docs/HEADS_JSON.md).")
    shown = [e for e in REPORT_EPS if results and _at(results[0], e) is not None]
    cols = _columns(shown)
    fixed = sum(w + 1 for _, w, _ in cols[:-1])
    last = WIDTH - fixed
    print(" ".join(f"{h:>{w}s}" for h, w, _ in cols[:-1]) + " " + cols[-1][0][:last])
    print("-" * WIDTH)
    cut = 0
    for r in results:
        cells = [f"{fn(r):>{w}s}"[:w] for _, w, fn in cols[:-1]]
        tail = cols[-1][2](r)
        if len(tail) > last:
            tail, cut = tail[:last - 1] + "+", cut + 1
        print(" ".join(cells) + " " + tail)
    counts = {}
    for r in results:
        for law in (r.summary or {}).get("false", []):
            counts[law] = counts.get(law, 0) + 1
    vl = {}
    for r in results:
        v = (r.summary or {}).get("var_law") or "no law"
        vl[v] = vl.get(v, 0) + 1
    _wrap("summary (eps 1e-2..1e-4): variance explained by " + ", ".join(f"{k}: {c}" for k, c in vl.items())
          + "; false at some eps: " + (", ".join(f"{k} {c}" for k, c in counts.items()) or "none")
          + (f"; {cut} rows cut at {WIDTH} columns ('+': the rest is in the JSON)" if cut else "")
          + f"; capture {info['capture_s']:.1f} s, total {info['total_s']:.1f} s")
    if info.get("context") and T > info["context"]:
        _wrap(f"note: rows {T // 2}-{T - 1} lie beyond the model's {info['context']}-token training context; "
              f"`--max-len {info['context']}` analyses rows inside it.")


def to_json(results, info):
    """The results as the per-head document of schema 1 (docs/HEADS_JSON.md; NaN as None)."""
    return outputs.json_clean(headlaws.document(results, info, foxwindow.__version__))
