"""The text report of prune.py: per-head table at one tol, per-tol summary, decoding and extrapolation lines.

format_report(res) takes the dict of prune.analyse_model or prune.analyse_traces (softmax or recurrent kind).
What a trace file or checkpoint names (its path, model, family and layer names) is shown with its control characters
escaped (safety.shown), in the printed report and in prune.txt alike; a number too wide for its column is written in
e-notation (fit_number), so every line stays within outputs.WIDTH.
"""
import math

import numpy as np

from foxwindow import outputs, safety
from foxwindow.uses import fit_number
from foxwindow.uses.prune_laws import CONTEXTS

__all__ = ["LAW_SHORT", "format_recurrent", "format_report"]

LAW_SHORT = {"iid, exact numerics": "iid exact", "autocorrelation-adjusted normal": "AR normal",
             "iid, normal (L/kappa beyond the lattice numerics)": "iid norm",
             "deterministic (constant gate)": "constant", "iid, closed form": "iid cform"}
def _wrap(text, indent="  "):
    """Prose as lines within outputs.WIDTH columns (later lines indented by `indent`)."""
    return outputs.fill(text, indent).split("\n")


def _header(info, traced):
    return [line for text in _header_text(info, traced) for line in _wrap(text)]


def _header_text(info, traced):
    info = {k: safety.shown(v) if k in ("traces", "model", "kind_source", "checkpoint") else v for k, v in info.items()}
    if traced:
        ctx = info["context"]
        return [f"ACP block pruning and KV horizons from gate traces: {info['traces']} (model {info['model']}, "
                f"kind {info['kind']}: {info['kind_source']}), {info['n_seq']} sequences x {info['seq_len']} tokens "
                f"measured (laws fitted on {info['n_fit']} other sequences), blocks {info['block'][0]}x"
                f"{info['block'][1]}, U = {info['U']}.",
                f"Left out: {info['left_out']}.",
                f"Per head at ln tol = {info['decode_log_tol']:g}: pruned fraction of causal blocks predicted from "
                f"the law vs measured on the traces (+- SE over sequences); KV horizon h = {info['p']} quantile of W "
                f"at L = 2U + ln(1/tol) + ln T; P(W>ctx) at context {ctx}"
                f"{'' if info['context_given'] else ' (the trace length; --context sets it)'}."]
    return [f"ACP block pruning and KV horizons: {info['checkpoint']}, {info['n_seq']} held-out sequences x "
            f"{info['seq_len']} bytes (laws fitted on {info['n_seq']} other sequences), blocks {info['block'][0]}x"
            f"{info['block'][1]}, U = {info['U']}.",
            f"Per head at ln tol = {info['decode_log_tol']:g}: pruned fraction of causal blocks predicted from "
            f"the law vs measured (+- SE over sequences); KV horizon h = {info['p']} quantile of W at "
            f"L = 2U + ln(1/tol) + ln T; cert = certified horizon from the gate weights (summed over keys); "
            f"Wm = largest attention-mass window at tol (mass beyond it <= tol), cov = fraction of rows with "
            f"Wm <= h."]


def _head_rows(res, traced, i):
    info = res["info"]
    model_cols = "" if traced else f" {'Wm':>5s} {'cov':>5s} {'cert':>7s}"
    out = [f"{'L.H':>4s} {'kappa':>7s} {'tau':>5s} {'law':>9s} {'U':>6s} {'L':>5s} {'pred':>6s} "
           f"{'meas':>12s} {'err':>6s} {'h(T)':>6s}{model_cols} {'mem@32k':>7s} {'mem@1M':>7s} {'P(W>ctx)':>8s}"]
    out.append("-" * len(out[-1]))
    for hd in res["heads"]:
        e = hd["tols"][i]
        law = LAW_SHORT.get(e["method"], e["method"][:9])
        cols = ""
        if not traced:
            cert = e["certified_horizon"]
            cols = (f" {e.get('mass_window_max', -1):5d} {e.get('horizon_coverage', float('nan')):5.3f} "
                    f"{_count(cert, 7):>7}")
        meas = f"{e['meas_frac_blocks']:.3f}+-{e['se_meas']:.3f}"
        out.append(f"{hd['layer']:>2d}.{hd['head']:<1d} {fit_number(hd['kappa'], 7, 4)} {fit_number(hd['tau'], 5, 2)} "
                   f"{law:>9s} {fit_number(e['U'], 6, 2)} "
                   f"{fit_number(e['L'], 5, 1)} {e['pred_frac_blocks']:6.3f} {meas:>12s} {e['err']:+6.3f} "
                   f"{_count(e['horizon'][str(info['seq_len'])], 6):>6s}{cols} {e['mem_saved']['32768']:7.3f} "
                   f"{e['mem_saved']['1048576']:7.3f} {e['p_window_beyond_context']:8.3f}")
    return out


def _count(v, width):
    """An integer count in at most `width` characters ('-' for None; 1.2e6 style past that)."""
    if v is None:
        return "-"
    t = str(int(v))
    return t if len(t) <= width else f"{v:.{max(0, width - 6)}e}".replace("e+0", "e").replace("e+", "e")


def _layer_names(res):
    names = sorted({(hd["layer"], hd["layer_name"]) for hd in res["heads"]})
    return "layers: " + ", ".join(f"{li} = {safety.shown(n)}" for li, n in names)


def _tol_rows(res, traced):
    info = res["info"]
    if traced:
        out = ["Per tol, all heads:"]
        hdr = f"{'ln tol':>6s} {'pred blk':>8s} {'meas blk':>8s} {'FLOP p/m':>11s} {'speedup p/m':>11s}"
    else:
        out = _wrap(f"Model, per tol (dense bits/byte {info['bpb_dense']:.4f}; mass bound: every row's pruned "
                    f"attention mass <= tol; output bound: |pruned - dense| <= mass x range(v) per entry, excess = "
                    f"largest |pruned - dense| - bound, which float32 rounding alone puts near 1e-7 x max|v|):")
        hdr = (f"{'ln tol':>6s} {'pred blk':>8s} {'meas blk':>8s} {'FLOP p/m':>11s} {'speedup p/m':>11s} "
               f"{'dbpb':>9s} {'readout':>8s} {'max mass':>9s} {'tol':>9s} {'excess':>9s}")
    out += [hdr, "-" * len(hdr)]
    for r in res["per_tol"]:
        model = "" if traced else (f" {r['delta_bpb']:+9.2e} {r['readout_bound']:8.2e} {r['max_pruned_mass']:9.2e} "
                                   f"{math.exp(r['log_tol']):9.2e} {r['max_excess']:+9.1e}")
        out.append(f"{r['log_tol']:6.1f} {r['pred_frac_blocks']:8.3f} {r['meas_frac_blocks']:8.3f} "
                   f"{r['pred_frac_flops']:5.3f}/{r['meas_frac_flops']:5.3f} "
                   f"{r['pred_speedup']:5.2f}/{r['meas_speedup']:<5.2f}" + model)
    mem_hdr = f"{'ln tol':>6s} " + " ".join(f"{'mem@' + (f'{T // 1024}k' if T < 1 << 20 else '1M'):>8s}"
                                             for T in CONTEXTS)
    out += ["", "KV memory saved, per tol (mean over heads):", mem_hdr, "-" * len(mem_hdr)]
    out += [f"{r['log_tol']:6.1f} " + " ".join(f"{r['mem_saved'][str(T)]:8.3f}" for T in CONTEXTS)
            for r in res["per_tol"]]
    if traced:
        out += _wrap("mem@T: KV memory saved at context T (1 - kept/T, mean over heads); speedup: time proportional "
                     "to visited blocks (a model).")
    else:
        out += _wrap("dbpb: pruned - dense bits/byte; readout: 2 mean_t max|d logit| / ln 2, a bound on |dbpb| from "
                     "the measured logit change; mem@T: KV memory saved at context T (1 - kept/T, mean over heads).")
    return out


def _decode_rows(d):
    out = ["", f"Decoding (recurrent form, {d['n_seq']} sequences): full cache {d['bpb_full']:.4f} bits/byte "
               f"(max |logit - parallel| {d['max_abs_logit_diff_vs_parallel']:.1e}, {d['seconds_full']:.1f} s)"]
    for r in d["runs"]:
        out += _wrap(f"  ln tol {r['log_tol']:6.1f}: bits/byte {r['bpb']:.4f} ({r['delta_bpb']:+.2e}), cache "
                     f"{r['cache_entries']}/{r['cache_entries_full']} entries ({r['mem_frac']:.3f} of full); horizons "
                     f"by layer: " + "; ".join(",".join(map(str, hs)) for hs in r["horizons"]), indent=" " * 4)
    return out


def _beyond_line(res, traced, i, ctx):
    pc = [h["tols"][i]["p_window_beyond_context"] for h in res["heads"]]
    pe = [h["p_window_beyond_context_eps1e-3"] for h in res["heads"]]
    return "\n".join(_wrap(
        f"windows beyond the {'context' if traced else 'training context'} ({ctx}): at "
        f"L = 2U + ln(1/tol) + ln ctx, mean P(W > ctx) over heads {np.mean(pc):.3f}, heads with P > 1/2: "
        f"{sum(v > 0.5 for v in pc)} of {len(pc)}; at eps = 1e-3 (decay alone): {np.mean(pe):.3f}, "
        f"{sum(v > 0.5 for v in pe)} of {len(pe)}"))


def format_recurrent(res):
    """The report of a recurrent model's traces: no KV cache and no blocks, so the memory horizon of the state."""
    info = res["info"]
    i = info["log_tols"].index(info["decode_log_tol"])
    ctx = info["context"]
    info = {k: safety.shown(v) if k in ("traces", "model", "kind_source") else v for k, v in info.items()}
    texts = [f"Memory horizons of a recurrent state from gate traces: {info['traces']} (model {info['model']}, kind "
             f"recurrent: {info['kind_source']}), laws fitted on {info['n_fit']} sequences x {info['seq_len']} "
             "tokens.",
             f"Not reported: {info['left_out']}.",
             f"Per head at ln tol = {info['decode_log_tol']:g}: state horizon h = {info['p']} quantile of W at "
             f"L = ln(1/tol), the steps until an input's contribution to the state has decayed below tol; "
             f"P(W>ctx) at context {ctx}{'' if info['context_given'] else ' (the trace length; --context sets it)'}."]
    out = [line for text in texts for line in _wrap(text)]
    out.append(f"{'L.H':>4s} {'kappa':>7s} {'tau':>5s} {'law':>9s} {'L':>6s} {'h':>9s} {'P(W>ctx)':>8s}")
    out.append("-" * len(out[-1]))
    for hd in res["heads"]:
        e = hd["tols"][i]
        out.append(f"{hd['layer']:>2d}.{hd['head']:<1d} {fit_number(hd['kappa'], 7, 4)} {fit_number(hd['tau'], 5, 2)} "
                   f"{LAW_SHORT.get(e['method'], e['method'][:9]):>9s} {fit_number(e['L'], 6, 2)} "
                   f"{e['state_horizon']:>9d} "
                   f"{e['p_window_beyond_context']:8.3f}")
    out += _wrap(_layer_names(res)) + ["", "Per tol, all heads:",
            f"{'ln tol':>6s} {'median h':>9s} {'max h':>9s} {'mean P(W>ctx)':>13s}"]
    out.append("-" * len(out[-1]))
    for r in res["per_tol"]:
        out.append(f"{r['log_tol']:6.1f} {r['state_horizon_median']:9.0f} {r['state_horizon_max']:9d} "
                   f"{r['heads_beyond_context']:13.3f}")
    out.append(f"run time {info['seconds']:.1f} s")
    return "\n".join(out)


def format_report(res):
    """The per-head table (at the decoding tol) and the per-tol summary, as text. res: from analyse_model, or
    from analyse_traces (source "traces"), whose columns that need the model are left out and said so."""
    info = res["info"]
    if info.get("kind") == "recurrent":
        return format_recurrent(res)
    traced = info.get("source") == "traces"
    i = info["log_tols"].index(info["decode_log_tol"])
    out = _header(info, traced) + _head_rows(res, traced, i)
    if traced:
        out += _wrap(_layer_names(res))
    out.append("")
    out += _tol_rows(res, traced)
    if res.get("decode"):
        out += _decode_rows(res["decode"])
    out.append(_beyond_line(res, traced, i, info["context"] if traced else info["training_context"]))
    threads = "" if traced else f" on {info['torch_threads']} threads"
    out.append(f"run time {info['seconds']:.1f} s{threads}")
    return "\n".join(out)


if __name__ == "__main__":
    from foxwindow import outputs
    raise SystemExit(outputs.describe(__doc__))
