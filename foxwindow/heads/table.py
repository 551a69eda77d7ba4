"""The per-head report: the printed table (within WIDTH columns: per head the measured Var[W] at REPORT_EPS,
the lead law's and the bootstrap's Var ratios to it with their states, and the head's summary) and the JSON
document of the results (schema 1, docs/HEADS_JSON.md).

    print_table(results, info)    the table on stdout (and states_block: every law's state at eps 1e-2 ... 1e-4)
    ratio_cell(law_record)        one law's cell at one eps: '0.97H', '1.59~H' (a wide held-out interval)
    to_json(results, info)        the schema-1 document, ready for outputs.write_json
"""
import math
import sys
import textwrap

import numpy as np

import foxwindow
from foxwindow import outputs
from foxwindow.heads import dependence, verdict
from foxwindow.heads import laws as headlaws
from foxwindow.laws import gates, lawtable
from foxwindow.models.adapters import MEMORY_UPPER

__all__ = ["REPORT_EPS", "WIDE_CI", "print_table", "ratio_cell", "states_block", "to_json"]

REPORT_EPS = (1e-2, 1e-3, 1e-4)              # the eps whose predictions the table prints


def _at(r, eps):
    """Index of eps in r.eps_list (by L, within 1e-7: an eps given in float32 finds its column), or None."""
    L = gates.threshold(eps)
    for k, Lk in enumerate(r.L_list):
        if abs(Lk - L) <= 1e-7 * max(L, 1.0):
            return k
    return None


WIDTH = outputs.WIDTH                        # the printed table's width; what does not fit is in the JSON
_CODE = {"holds": "H", "false": "F", "not claimed": "-", "undetermined": "?"}
WIDE_CI = 3.0                   # a held-out Var ratio whose 95% interval spans more than this factor is marked '~'


SHORT = {"iid": "iid", "marginal": "marg", "dependent": "dep", "second_order": "2nd", "finite_n": "fin",
         "mixture": "mix", "bootstrap": "boot", "three_cumulant": "3cum"}


def _g(v):
    """A number >= 0 in at most 6 characters (1.2e4, 1.2e-5 beyond [1e-3, 1e4))."""
    if v is None or not math.isfinite(v):
        return "-"
    if abs(v) >= 1e4 or 0 < abs(v) < 1e-3:
        for p in (1, 0):
            text = f"{v:.{p}e}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")
            if len(text) <= 6:
                break
        return text
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _fit(v, width, prec):
    """v as f"{v:.{prec}f}" where that fits in `width` characters (every ordinary value), else with fewer decimals
    (tau 140.6), else in e-notation with as many digits as fit (a rate of 1e29 per token is printed as one, not
    cut to its first digits); '-' for None and non-finite values."""
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    texts = [f"{v:.{p}f}" for p in range(prec, -1, -1)]
    texts += [f"{v:.{p}e}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-") for p in range(prec, -1, -1)]
    return next((s for s in texts if len(s) <= width and (s.strip("-0.") or v == 0)), texts[-1])


def _label(r):
    return f"{r.layer}.{r.head}"


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
    return ratio_cell(rec["laws"][law])


def ratio_cell(lw):
    """A law's table cell from its record at one eps (docs/HEADS_JSON.md): the held-out Var_law / Var_measured,
    '~' where its 95% interval spans more than WIDE_CI (the ratio says little there), and the state's letter:
    '0.97H', '1.59~H', '0.003F' (one digit below 0.005, not 0.00), '?' (no ratio)."""
    v = lw.get("var_ratio")
    ci = lw.get("var_ratio_ci") or [None, None]
    wide = None not in ci and (ci[0] <= 0 or ci[1] / ci[0] > WIDE_CI)
    return (("" if v is None else f"{v:.1g}" if v < 0.005 else f"{v:.2f}" if v < 9.995 else f"{v:.0f}" if v < 1e4
             else ">1e4")
            + ("~" if v is not None and wide else "") + _CODE[lw["state"]])


def _meas_var(r, e):
    rec = _rec(r, e)
    if rec is None:
        return "-"
    return _g(rec["measured"]["var"]) if rec["measured"]["var"] is not None else "cens"


def _short(name):
    return SHORT.get(name, name[:4]) if name else "-"


def _columns(shown):
    """The table's columns: (header, width, cell function of a HeadResult); the last takes the rest."""
    cols = [("L.H", 4, _label), ("kappa", 7, lambda r: _fit(r.kappa, 7, 4)), ("tau", 5, lambda r: _fit(r.tau, 5, 2))]
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
    print("\n".join(textwrap.wrap(text, WIDTH, break_on_hyphens=False)))


BAND = "1e-2..1e-4"          # headlaws.SUMMARY_EPS as the table and the repr write it


def _band_eps(results):
    """The eps of headlaws.SUMMARY_EPS's band that the heads were analysed at (the first head with per-law
    records; every head shares the scan), largest first; [] where none or no head has per-law records."""
    lo, hi = min(headlaws.SUMMARY_EPS), max(headlaws.SUMMARY_EPS)
    first = next((r for r in results if r.laws and r.laws.get("at")), None)
    return sorted({rec["eps"] for rec in (first.laws["at"] if first else [])
                   if rec.get("eps") is not None and lo * (1 - 1e-9) <= rec["eps"] <= hi * (1 + 1e-9)}, reverse=True)


def summary_band(results):
    """How the summary's eps read: "eps 1e-2..1e-4" where the heads were analysed at all five of the scan's eps in
    that band, else the list ("eps 0.01, 0.001"); None where no eps of the band was analysed (the summary then says
    nothing of any law)."""
    eps = _band_eps(results)
    if not eps:
        return None
    lo, hi = min(headlaws.SUMMARY_EPS), max(headlaws.SUMMARY_EPS)
    full = [e for e in lawtable.EPS_SCAN if lo * (1 - 1e-9) <= e <= hi * (1 + 1e-9)]
    if len(eps) == len(full) and all(abs(a - b) <= 1e-9 * b for a, b in zip(eps, full)):
        return f"eps {BAND}"
    return "eps " + ", ".join(f"{e:g}" for e in eps)


def no_summary(results, why=True):
    """What stands in for the summary where summary_band is None: no head with per-law records, or no eps of the
    band (why: with the reason in parentheses)."""
    if results and not any(r.laws and r.laws.get("at") for r in results):
        return (f"no law evaluated: every head has fewer than {verdict.MIN_DOCS} documents"
                + (" (two to fit, two to score out of sample)" if why else ""))
    return (f"no eps of {BAND} analysed"
            + (" (the summary reads only those; each law's state at the eps analysed: --json)" if why else ""))


def summary_counts(results):
    """The model's summary over its heads at eps 1e-2 ... 1e-4 (headlaws.count_summaries of each head's
    `summary`): ({law that explains Var[W], or "no law": heads}, {law false at some of those eps: heads})."""
    var, false, _ = headlaws.count_summaries([r.summary for r in results])
    return var, false


def print_table(results, info, eps=None):
    """The per-head table within WIDTH columns: measured Var[W] at REPORT_EPS, the lead law's and the
    bootstrap's Var ratio to it (out of sample) with their states, and each head's summary. eps: an eps the user
    asked for (`--eps`), or a sequence of them; each outside REPORT_EPS and in the scan gets a block of its own
    after the table: per head its measured Var[W] and every law's cell there."""
    info = dict(info or {})
    S = info.get("n_seq", results[0].n_seq if results else 0)
    seq_len = info.get("seq_len")
    T = info.get("analysed_len", seq_len)
    split = info.get("split", "held-out")
    where = info.get("checkpoint") or info.get("source") or "user data"
    shape = f"{S} {split} sequences" if split != "user data" else f"{S} sequences"
    if seq_len:
        shape += f" x {seq_len} tokens" + (f" (first {T} analysed)" if T and T != seq_len else "")
    _wrap(f"Per-head window laws: {where}, {shape}; windows W = N - 1 of "
          f"{info.get('rows', 'rows in each sequence second half')}.")
    fam = next((r.laws.get("family") for r in results if r.laws), None)
    _wrap(f"Every law fitted on the even documents, scored on the odd ones; V: measured Var[W] (held-out half, "
          f"'cens': censored windows); 'lead' ({headlaws.LEAD}, the lead law) and 'boot' (block "
          f"bootstrap, the reference): Var_law / Var_measured with its state (H holds, F false, - not claimed, "
          f"? undetermined; the state is the test on all documents, '~' marks a held-out ratio whose 95% interval "
          f"spans more than {WIDE_CI:g}x); mean: the first law that explains the mean at every eps "
          f"1e-2..1e-4, var: of the laws that hold for Var[W] at every such eps, the one of the tightest claim ("
          + ", ".join(f"{v} {k}" for k, v in SHORT.items()) + ")"
          + (f"; family-wise level {headlaws.ALPHA:g} per model over {fam['m']} claimed cells (Holm, the first "
             f"step at {fam['alpha_test']:.2g}, t = {fam['t_crit']:.2f}); seed {info.get('seed')}" if fam else "")
          + ". Every law's numbers at every eps: --json (docs/HEADS_JSON.md).")
    shown = [e for e in REPORT_EPS if results and _at(results[0], e) is not None]
    cols = _columns(shown)
    # every cell whole: a column as wide as its widest cell (a label "0.127" or a number is never cut)
    rows = [[fn(r) for _, _, fn in cols[:-1]] for r in results]
    widths = [max([w] + [len(row[i]) for row in rows]) for i, (_, w, _) in enumerate(cols[:-1])]
    fixed = sum(w + 1 for w in widths)
    last = max(WIDTH - fixed, 4)                       # (below 4 only where some cell is extreme)
    print(" ".join(f"{h:>{w}s}" for (h, _, _), w in zip(cols[:-1], widths)) + " " + cols[-1][0][:last])
    print("-" * WIDTH)
    # layers marked under the table: backward directions (their windows look forward) and delta-rule families
    names = info.get("layers") or []
    fwd = {i for i, n in enumerate(names) if n in set(info.get("looks_forward") or ())}
    upper = {i for i, n in enumerate(names) if (info.get("memory_bound_by_layer") or {}).get(n, "") == MEMORY_UPPER}
    cut, pos, shown_fwd, shown_upper = 0, -1, set(), set()
    for r, row in zip(results, rows):
        pos += r.head == 0                              # heads of a layer are consecutive, from 0: its position
        shown_fwd |= {r.layer} if pos in fwd else set()
        shown_upper |= {r.layer} if pos in upper else set()
        cells = [f"{c:>{w}s}" for c, w in zip(row, widths)]
        # the marks first, so that a cut row keeps them
        tail = ("[fwd] " if pos in fwd else "") + ("[ub] " if pos in upper else "") + cols[-1][2](r)
        if len(tail) > last:
            tail, cut = tail[:last - 1] + "+", cut + 1
        print(" ".join(cells) + " " + tail)
    states_block(results)
    for e in ([] if eps is None else [eps] if np.ndim(eps) == 0 else list(eps)):
        e = float(e)
        if results and not any(abs(r - e) <= 1e-6 * r for r in REPORT_EPS) and _at(results[0], e) is not None:
            _asked_block(results, e)
    vl, counts = summary_counts(results)
    band = summary_band(results)
    _wrap((f"summary ({band}): variance explained by " + ", ".join(f"{k}: {c}" for k, c in vl.items())
           + "; false at some eps: " + (", ".join(f"{k} {c}" for k, c in counts.items()) or "none")
           if band else "summary: " + no_summary(results))
          + (f"; {cut} rows cut at {WIDTH} columns ('+': the rest is in the JSON)" if cut else "")
          + (f"; capture {info['capture_s']:.1f} s" if "capture_s" in info else "")
          + (f", total {info['total_s']:.1f} s" if "total_s" in info else ""))
    if fwd:
        _wrap(f"[fwd] (looks forward): layers {', '.join(str(i) for i in sorted(shown_fwd))} "
              f"({', '.join(names[i] for i in sorted(fwd))}) are backward directions of bidirectional layers, stored "
              "time-reversed: their windows count tokens forward in the text")
    if upper:
        _wrap(f"[ub] (upper bound): layers {', '.join(str(i) for i in sorted(shown_upper))} are of a delta-rule "
              f"family: the decay window bounds the memory from above ({MEMORY_UPPER})")
    if info.get("context") and T and T > info["context"]:
        _wrap(f"note: rows {T // 2}-{T - 1} lie beyond the model's {info['context']}-token training context; "
              f"`--max-len {info['context']}` analyses rows inside it.")


def _law_order(recs):
    """The laws present in the records recs, in SHORT's order with the bootstrap (the reference) last."""
    order = [n for n in SHORT if n != "bootstrap"] + ["bootstrap"]
    return [n for n in order if any(n in (rec.get("laws") or {}) for rec in recs)]


def states_block(results):
    """Every law's state per head at each eps of the scan the summary reads (headlaws.SUMMARY_EPS, 1e-2 ... 1e-4),
    a letter an eps (_CODE), one column a law: the printed table's compact view of every law (the numbers are in
    the JSON). Nothing where no head has per-law records."""
    eps = _band_eps(results)
    if not eps:
        return
    laws = _law_order([rec for r in results if r.laws for rec in r.laws["at"]])
    w = max(len(eps), 4)
    _wrap("every law's state at eps " + ", ".join(f"{e:g}" for e in eps)
          + " (H holds, F false, - not claimed, ? undetermined):")
    lw = max([6] + [len(_label(r)) for r in results])
    print(f"{'L.H':>{lw}s} " + " ".join(f"{SHORT[n]:>{w}s}" for n in laws))
    for r in results:
        recs = [_rec(r, e) for e in eps]
        cells = ["".join(_CODE[rec["laws"][n]["state"]] if rec is not None and n in rec["laws"] else " "
                         for rec in recs) for n in laws]
        print(f"{_label(r):>{lw}s} " + " ".join(f"{c:>{w}s}" for c in cells))


def _asked_block(results, eps):
    """The block of the asked eps: L.H, the measured Var[W] and every law's ratio cell (ratio_cell)."""
    laws = _law_order([_rec(r, eps) or {} for r in results])            # the reference last
    print(f"at --eps {eps:g} (L = {gates.threshold(eps):.4g}): measured Var[W] and every law's Var_law / "
          "Var_measured with its state")
    lw = max([6] + [len(_label(r)) for r in results])
    print(f"{'L.H':>{lw}s} {'V':>7s} " + " ".join(f"{SHORT[n]:>8s}" for n in laws))
    for r in results:
        rec = _rec(r, eps)
        cells = [ratio_cell(rec["laws"][n]) if rec is not None and n in rec["laws"] else "-" for n in laws]
        print(f"{_label(r):>{lw}s} {_meas_var(r, eps):>7s} " + " ".join(f"{c:>8s}" for c in cells))


def to_json(results, info):
    """The results as the per-head document of schema 1 (docs/HEADS_JSON.md; NaN as None)."""
    return outputs.json_clean(document(results, info, foxwindow.__version__))


# ----------------------------------------------------------------------------- the per-head JSON (schema 1)

SCHEMA_VERSION = 1


def levelled_at(n_list, tau_n, se_tau_n, tol=dependence.LEVEL_TOL, z=dependence.LEVEL_Z):
    """The smallest block length n of the grid at which tau(n) has levelled off: |tau(2n)/tau(n) - 1| + z SE
    <= tol, SE the jackknife SE of tau(2n) over tau(n) (the grid's nearest point to 2n). None if nowhere."""
    ns = np.asarray(n_list, dtype=np.float64)
    t, se = np.asarray(tau_n, dtype=np.float64), np.asarray(se_tau_n, dtype=np.float64)
    for i, n in enumerate(ns):
        if 2 * n > ns[-1]:
            break
        j = int(np.argmin(np.abs(np.log(ns) - math.log(2 * n))))
        if t[i] > 0 and abs(t[j] / t[i] - 1) + z * se[j] / t[i] <= tol:
            return int(n)
    return None


def _source(info):
    model = str(info.get("model", ""))
    fams = info.get("families")
    fox = (str(info.get("checkpoint", "")).endswith(".pt") or "fox" in model.lower()
           or any(str(n).endswith("hook_log_fgate") for n in info.get("layers") or ()))   # this package's FoX model
    fam = (info.get("family") or (",".join(fams) if fams else None)
           or ("lstm" if "lstm" in model.lower() else "fox" if fox else "unknown"))
    if isinstance(fam, str) and fam.startswith("torch-"):
        fam = fam[len("torch-"):]
    what = info.get("what") or ("model" if fams else
                                "traces" if info.get("layers") is not None and not info.get("capture_s") else
                                "shipped" if str(info.get("checkpoint", "")).endswith("fox_shakespeare.pt") else
                                "model")
    recurrent = isinstance(fam, str) and any(k in fam.lower() for k in ("lstm", "gru", "rnn"))
    unit = info.get("unit") or ("unit" if recurrent else "head")       # an RNN's row is a unit, not a head
    return dict(what=what, path=info.get("checkpoint"), family=fam, unit=unit, n_seq=info.get("n_seq"),
                seq_len=info.get("seq_len"), seed=info.get("seed"),
                split=info.get("split") or ("held-out" if info.get("spans") else "user data"))


def _clean_at(recs):
    out = []
    for rec in recs:
        r = dict(rec)
        r["measured"] = {k: v for k, v in rec["measured"].items()}
        r["laws"] = {n: {k: v for k, v in d.items()} for n, d in rec["laws"].items()}
        out.append(r)
    return out


def head_json(r):
    """One head's record of schema 1 from a verdict.HeadResult r (with r.laws from evaluate)."""
    def fin(v):
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
    mass = None
    if math.isfinite(r.decay_window_mean) or math.isfinite(r.mass_window_mean):
        mass = dict(eps=fin(r.mass_eps), decay_window=fin(r.decay_window_mean), mass_window=fin(r.mass_window_mean),
                    decay_window_censored=fin(r.decay_window_censored),
                    mass_window_censored=fin(r.mass_window_censored))
    laws = r.laws or {}
    summ = r.summary or dict(mean_law=None, var_law=None, false=[], text="no laws evaluated: " +
                             "; ".join(r.reasons or ["fewer than 4 documents"]))
    return dict(layer=r.layer_name or str(r.layer), head=int(r.head), label=f"{r.layer}.{r.head}",
                kappa=fin(r.kappa), sigma2=fin(r.sigma2), tau=fin(r.tau), tau_se=fin(r.se_tau), summary=summ,
                dependence=dict(n=[int(n) for n in r.n_list], tau_n=[fin(v) for v in r.tau_n],
                                tau_n_se=[fin(v) for v in r.se_tau_n],
                                levelled_at=levelled_at(r.n_list, r.tau_n, r.se_tau_n) if r.n_list else None),
                mass=mass, at=_clean_at(laws.get("at", [])), pmf=laws.get("pmf"),
                n_fit=(r.n_seq + 1) // 2, n_test=r.n_seq // 2,
                verdict=dict(state=r.verdict, law=r.law, reasons=list(r.reasons), n_tested=r.n_tested,
                             p_var=fin(r.p_var), p_mean=fin(r.p_mean)),
                prediction=dict(model=r.pred_model, mean=r.pred_mean, var=r.pred_var, q05=r.pred_q05,
                                q50=r.pred_q50, q95=r.pred_q95, p_beyond=r.pred_p_beyond,
                                oos_coverage=r.oos_coverage, oos_z_mean=r.oos_z_mean, oos_z_var=r.oos_z_var))


def document(results, info, version):
    """The per-head result document of schema 1 (docs/HEADS_JSON.md) from [verdict.HeadResult] and the
    driver's info dict."""
    fam = next((r.laws.get("family") for r in results if r.laws), None)
    return dict(schema_version=SCHEMA_VERSION, foxwindow_version=version, kind="heads", source=_source(info),
                lead_law=headlaws.LEAD, alpha=headlaws.ALPHA,
                laws={n: dict(label=a, description=b) for n, (a, b) in headlaws.LAWS.items()},
                family=None if fam is None else dict(fam, claim_max=headlaws.CLAIM_MAX, hold_se=headlaws.HOLD_SE,
                                                      mean_tol=headlaws.MEAN_TOL,
                                                      summary_eps=list(headlaws.SUMMARY_EPS)),
                heads=[head_json(r) for r in results], info=info)


def say_partial(info, json_path):
    """The line a stopped run ends with (stderr), and its exit code: 130 for Ctrl-C, 143 for SIGTERM, 3 for the
    time bound."""
    p = info["partial"]
    print(f"forget: stopped by {p['reason']}: {p['heads_done']} of {p['heads_total']} heads finished, printed above"
          + (f" and saved to {json_path} (marked partial)" if json_path else " (give --json to save them)"),
          file=sys.stderr, flush=True)
    return 130 if p["reason"] == "Ctrl-C" else 143 if p["reason"] == "SIGTERM" else 3
