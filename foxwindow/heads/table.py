"""The per-head report: the printed table (verdicts, then predictions at REPORT_EPS with their out-of-sample
scores) and the JSON document of the results.

    print_table(results, info)    the table on stdout
    to_json(results, info)        {info, heads} ready for outputs.write_json
"""
import math
from dataclasses import asdict

from foxwindow import outputs
from foxwindow.laws import gates
from foxwindow.models.adapters import MEMORY_UPPER

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


def print_table(results, info):
    """The per-head table (verdicts, then predictions at REPORT_EPS with their out-of-sample scores)."""
    S, T = info["n_seq"], info.get("analysed_len", info["seq_len"])
    nb = info.get("n_boot", 0)
    print(f"Per-head window laws: {info['checkpoint']}, {S} held-out sequences x {info['seq_len']} tokens"
          + (f" (first {T} analysed)" if T != info["seq_len"] else "")
          + f"; windows W = N - 1 of {info.get('rows', 'rows in each sequence second half')}.")
    if "alpha_test" in info:
        print(f"Verdict: the dependent (document-mixture, finite-n) law tested only at the L where it claims to hold "
              f"(uncensored, L/kappa >= 4, tau(n) levelled off at n = L/kappa); slope of Var[W] and of E[W] in L "
              f"against the law's, {nb}-draw document bootstrap, family-wise level {info.get('alpha', 0.05):g} per "
              f"model (each test at {info['alpha_test']:.2g}); seed {info.get('seed')}.")
    hdr = (f"{'L.H':>4s} {'kappa':>7s} {'tau_G':>9s} {'tau(T/2)':>10s} {'L ok':>5s} {'slope [band]':>24s} "
           f"{'law':>8s} {'iid':>8s} {'p var/mean':>15s} {'W_dec':>6s} {'W_mass':>6s}  verdict")
    print(hdr)
    print("-" * (len(hdr) + 30))
    names = info.get("layers") or []
    fwd = {i for i, n in enumerate(names) if n in set(info.get("looks_forward") or ())}
    upper = {i for i, n in enumerate(names) if (info.get("memory_bound_by_layer") or {}).get(n, "") == MEMORY_UPPER}
    pos, shown_fwd, shown_upper = -1, set(), set()
    for r in results:
        pos += r.head == 0                              # heads of a layer are consecutive, from 0: its position
        if pos in fwd:
            shown_fwd.add(r.layer)
        if pos in upper:
            shown_upper.add(r.layer)
        ci = f"{r.slope:8.3g} [{r.slope_ci[0]:.3g},{r.slope_ci[1]:.3g}]" if math.isfinite(r.slope) else "-"
        wdec = (">" if r.decay_window_censored > 0 else "") + _f(r.decay_window_mean, ".0f")
        wmass = (">" if r.mass_window_censored > 0 else "") + _f(r.mass_window_mean, ".0f")
        ps = "/".join(_f(v, ".0e") if math.isfinite(v) and v < 0.01 else _f(v, ".2f") for v in (r.p_var, r.p_mean))
        v = r.verdict + (f" ({r.law})" if r.law else "")
        print(f"{r.layer:>2d}.{r.head:<1d} {r.kappa:7.4f} {_f(r.tau, '4.2f')}±{_f(r.se_tau, '<4.2f')} "
              f"{_f(r.tau_long, '5.2f')}±{_f(r.se_tau_long, '<4.2f')} {sum(r.in_regime):>2d}/{len(r.in_regime):<2d} "
              f"{ci:>24s} {_f(r.pred_slope_mix, '8.3g')} {_f(r.pred_slope_iid, '8.3g')} {ps:>15s} {wdec:>6s} "
              f"{wmass:>6s}  {v}" + (f" ({'; '.join(r.reasons)})" if r.reasons else "")
              + (" [looks forward]" if pos in fwd else "") + (" [upper bound]" if pos in upper else ""))
    counts = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("summary: " + ", ".join(f"{v}: {c}" for v, c in counts.items())
          + (f"; W_dec / W_mass: mean decay / attention-mass window at eps = {results[0].mass_eps:g}"
             " ('>': some windows reach the sequence start, a lower bound)" if results else "")
          + f"; capture {info['capture_s']:.1f} s, total {info['total_s']:.1f} s")
    if fwd:
        print(f"[looks forward]: layers {', '.join(str(i) for i in sorted(shown_fwd))} "
              f"({', '.join(names[i] for i in sorted(fwd))}) are backward directions of bidirectional layers, stored "
              "time-reversed: their windows count tokens forward in the text")
    if upper:
        print(f"[upper bound]: layers {', '.join(str(i) for i in sorted(shown_upper))} are of a delta-rule family: the "
              f"decay window bounds the memory from above ({MEMORY_UPPER})")
    _print_predictions(results, info)
    if info.get("context") and T > info["context"]:
        print(f"note: rows {T // 2}-{T - 1} lie beyond the model's {info['context']}-token training context; "
              f"`--max-len {info['context']}` analyses rows inside it.")


def _print_predictions(results, info):
    shown = [e for e in REPORT_EPS if results and _at(results[0], e) is not None]
    if not shown:
        return
    ctx = info.get("context")
    print(f"Predicted window W (block bootstrap of each head's own increments) at eps = "
          f"{', '.join(f'{e:g}' for e in shown)}: mean, median [5%, 95%]"
          + (f", P(W > {ctx})" if ctx else "") + "; measured mean (Kaplan-Meier where censored, '>' a bound); "
          "out of sample (fit on even, scored on odd documents): coverage of the 90% interval ('c': most held-out "
          "windows censored, a check of P(W >= bound) only), z of the mean")
    for r in results:
        cells = []
        for e in shown:
            k = _at(r, e)
            if not r.pred_mean:
                cells.append("-")
                continue
            meas = (_f(r.mean_W[k], ".3g") if r.censored_frac[k] == 0 else
                    ">" + _f(r.km_mean[k], ".3g"))
            cell = (f"{r.pred_mean[k]:.3g} {r.pred_q50[k]:.0f} [{r.pred_q05[k]:.0f},{r.pred_q95[k]:.0f}]"
                    + (f" P>{_f(r.pred_p_beyond[k], '.2f')}" if ctx else "") + f" meas {meas}")
            if r.oos_coverage:
                cell += (f" cov {_f(r.oos_coverage[k], '.2f')}±{_f(r.oos_se_coverage[k], '.2f')}"
                         + ("c" if r.oos_censored[k] > 0.5 else "")
                         + f" z {_f(r.oos_z_mean[k], '.1f')}")
            cells.append(cell)
        print(f"{r.layer:>2d}.{r.head:<1d} " + " | ".join(cells))


def to_json(results, info):
    """The results as a JSON-ready dict {info, heads} (NaN as None)."""
    return outputs.json_clean(dict(info=info, heads=[asdict(r) for r in results]))
