"""`python prune.py`: ACP block pruning and KV-cache horizons predicted from the gate laws, against measurements.

The laws and what they predict are in prune_laws.py; the pruned attention op (forgetting_attention_pruned and
its naive reference) is in fox_attention.py and reaches the model's layers as their attention op
(model.use_attention_op); decoding with KV-cache horizons is the model's own recurrent step (LM.step, its
states from LM.init_states(horizons)). This module measures, compares and reports.

`python prune.py` checks the predictions on the shipped model (CPU, held-out text): the laws are fitted on one
set of held-out sequences, the measurements are made on another (pruned fraction per head, bits per byte,
the pruned mass of every row against tol, decoding with the KV horizons, the attention mass they hold).

`python prune.py --traces FILE [--U X]` does what needs no model for any model's gate traces (forget.py
--save-traces), laws fitted on the odd sequences and measured on the even ones. What applies depends on the
kind of model, read from the file (metadata 'kind', else the family through foxwindow.models.adapters, else the
trace names of this package's FoX model; --kind when neither is known):
  softmax    attention over a KV cache: ACP block pruning (U must be given) and KV horizons;
  recurrent  a gated state (Mamba-2, GLA, HGRN, LSTM, ...): no KV cache and no blocks to prune, so neither is
             reported; the memory horizon of the state is, the steps until an input's contribution decays
             below tol (the p-quantile of W at L = ln(1/tol)).
"""
import math
import os
import re
import sys
import time
import zipfile
from functools import partial

import numpy as np
import torch
from tqdm import tqdm

from foxwindow import outputs, parallel
from foxwindow.laws import gates
from foxwindow.models import adapters, traces
from foxwindow.models import fox as fm
from foxwindow.training import data
from foxwindow.uses import given, record_given
from foxwindow.uses.prune_laws import (
    CONTEXTS,
    HeadLaw,
    acp_level,
    certified_horizon,
    check_block,
    check_level,
    check_U,
    kv_horizon,
    level_of_log_tol,
    measure_block_pruning,
    pos_int,
    predict_block_pruning,
    state_horizon,
    survival_table,
)
from foxwindow.uses.prune_measure import bits_per_byte, certified_x_min, decode, run_pruned
from foxwindow.uses.prune_report import format_report

__all__ = ["DEFAULT_L_TOLS", "DEFAULT_CHECKPOINT", "KINDS", "pruning_entry", "p_beyond", "horizon_entry",
           "memory_summary", "analyse_model", "TRACE_LEFT_OUT", "RECURRENT_LEFT_OUT", "OUR_HOOK", "load_traces",
           "trace_kind", "analyse_traces", "main", "run"]

DEFAULT_L_TOLS = (4.0, 7.0, 10.0, 13.0)          # ln(1/tol): tol = e^-4 ... e^-13
DEFAULT_CHECKPOINT = fm.SHIPPED_CHECKPOINT
KINDS = ("softmax", "recurrent")

# ----------------------------------------------------------------------------- per-head entries (model and traces)


def pruning_entry(pr, frac_per_seq, flops_per_seq):
    """Prediction vs measurement of one head at one tol. pr: BlockPrediction; frac_per_seq, flops_per_seq:
    (S,) float, the measured pruned fraction of causal blocks / pairs per held-out sequence. Returns a dict
    (err = measured - predicted, se_meas its SE over sequences, z = err / se_meas or None when se_meas = 0)."""
    fs = np.asarray(frac_per_seq, dtype=np.float64)
    m = float(fs.mean())
    se = float(fs.std(ddof=1) / math.sqrt(len(fs))) if len(fs) > 1 else float("nan")
    return dict(method=pr.method, pred_frac_blocks=pr.frac_blocks, pred_frac_flops=pr.frac_flops,
                pred_speedup=pr.speedup, meas_frac_blocks=m, se_meas=se, err=m - pr.frac_blocks,
                meas_frac_flops=float(np.mean(flops_per_seq)), z=(m - pr.frac_blocks) / se if se > 0 else None)


def p_beyond(law, L, ctx):
    """P(W > ctx) = P(W >= ctx + 1) at level L."""
    return float(law.survival(L, np.array([ctx + 1]))[0])


def horizon_entry(law, U, L_tol, p, T, ctx):
    """KV horizons of one head at one tol: the p-quantile of W at L = 2U + L_tol + ln T' for T' = T and
    each of CONTEXTS, the memory saved at CONTEXTS, the horizon certified by the smallest increment seen in
    the fitting traces (not a guarantee: other inputs may forget more slowly), and P(W > ctx) at the level
    of a context of ctx tokens. law: HeadLaw; U >= 0; L_tol > 0; p in (0, 1); T, ctx: int > 0."""
    hz = {str(t): kv_horizon(law, U, L_tol, p, T=t).h for t in (T,) + CONTEXTS}
    return dict(horizon=hz, horizon_method=kv_horizon(law, U, L_tol, p, T=T).method,
                mem_saved={str(t): 1 - min(hz[str(t)] + 1, t) / t for t in CONTEXTS},
                certified_horizon_trace_xmin=certified_horizon(law.x_min, U, L_tol).h if law.x_min > 0 else None,
                p_window_beyond_context=p_beyond(law, 2 * U + L_tol + math.log(ctx), ctx))


def memory_summary(entries):
    """Mean over heads of the memory saved at CONTEXTS and of P(W > context), from horizon_entry dicts."""
    return dict(mem_saved={str(t): float(np.mean([e["mem_saved"][str(t)] for e in entries])) for t in CONTEXTS},
                heads_beyond_context=float(np.mean([e["p_window_beyond_context"] for e in entries])))




def _bar(total, progress, desc="prune"):
    return tqdm(total=total, desc=desc, disable=not progress, file=sys.stderr)


# ----------------------------------------------------------------------------- the shipped model


def _fit_laws(model, tokens):
    """HeadLaw of every head from the log gates of `tokens` (S, T): laws[layer][head]."""
    _, cache = traces.run_with_cache(model, tokens, names_filter=lambda n: n.endswith("hook_log_fgate"))
    return [[HeadLaw.from_trace(cache[f"blocks.{li}.attn.hook_log_fgate"][:, :, h], name=f"L{li}H{h}")
             for h in range(model.cfg.n_heads)] for li in range(len(model.blocks))]


def _measure_tol(model, x, y, dense, laws, heads, L_tol, block, U):
    """Prune the model at L_tol; per-head entries appended to heads[l][h]["tols"]; returns the per-tol row."""
    logits, rec = run_pruned(model, x, L_tol, block, U)
    bpb = bits_per_byte(logits, y)
    dz = (logits - dense["logits"]).abs().amax(-1)                                 # (B, T) max logit change
    tot_pred = tot_meas = tot_blocks = pair_pred = pair_meas = 0.0
    for li, st in enumerate(rec):
        for h in range(len(st.U)):
            pr = predict_block_pruning(laws[li][h], x.shape[1], float(st.L[h]), block)
            fs = st.frac_per_seq[:, h]
            heads[li][h]["tols"].append(dict(
                log_tol=-L_tol, U=float(st.U[h]), L=float(st.L[h]), **pruning_entry(pr, fs, st.flops_per_seq[:, h]),
                max_pruned_mass=float(st.max_pruned_mass[h]), max_out_err=float(st.max_err[h]),
                max_out_err_bound=float(st.max_err_bound[h])))
            tot_pred += pr.expected_pruned_blocks
            pair_pred += pr.frac_flops
            pair_meas += float(st.flops_per_seq[:, h].mean())
            tot_meas += st.pruned_blocks[h] / len(fs)
            tot_blocks += pr.n_causal_blocks
    n = len(rec) * len(rec[0].U)
    return dict(log_tol=-L_tol, bpb=bpb, delta_bpb=bpb - dense["bpb"], readout_bound=float(2 * dz.mean() / math.log(2)),
                pred_frac_blocks=tot_pred / tot_blocks, meas_frac_blocks=tot_meas / tot_blocks,
                pred_frac_flops=pair_pred / n, meas_frac_flops=pair_meas / n,
                pred_speedup=tot_blocks / (tot_blocks - tot_pred), meas_speedup=tot_blocks / (tot_blocks - tot_meas),
                max_pruned_mass=float(max(st.max_pruned_mass.max() for st in rec)),
                max_excess=float(max(st.max_excess.max() for st in rec)), max_abs_v=dense["vmax"])


def _add_horizons(heads, laws, xcert, p, T, ctx):
    """KV horizons and memory at each tol, from the law and the measured U of each head."""
    for li, row in enumerate(heads):
        for h, hd in enumerate(row):
            law = laws[li][h]
            for e in hd["tols"]:
                Uh, L_tol = e["U"], -e["log_tol"]           # this head's U (U itself stays the run's choice)
                e.update(horizon_entry(law, Uh, L_tol, p, T, ctx))
                e["certified_horizon"] = certified_horizon(xcert[li, h], Uh, L_tol).h if xcert[li, h] > 0 else None
            hd["p_window_beyond_context_eps1e-3"] = p_beyond(law, gates.threshold(1e-3), ctx)


def _add_mass_coverage(model, inputs, heads, L_tols, T, mass_rows):
    """Does the horizon hold the attention? mass window = smallest d with mass beyond d <= tol; the horizon
    suffices for a row iff its mass window <= h. Every mass_rows-th query row is checked."""
    rows = torch.arange(0, T, mass_rows)
    for i, L_tol in enumerate(L_tols):
        for li, blk in enumerate(model.blocks):
            mw = traces.mass_windows(blk.attn, inputs[li], L_tol, rows).numpy()   # (S, R, H)
            for h, hd in enumerate(heads[li]):
                e = hd["tols"][i]
                e["mass_window_mean"] = float(mw[:, :, h].mean())
                e["mass_window_max"] = int(mw[:, :, h].max())
                e["horizon_coverage"] = float((mw[:, :, h] <= e["horizon"][str(T)]).mean())


def _decode_runs(model, x, y, dense, heads, L_tols, bar):
    """Decoding with the KV horizons of each tol (recurrent form) against the full cache."""
    T = x.shape[1]
    td = time.perf_counter()
    lg_full, kept_full = decode(model, x)
    t_full = time.perf_counter() - td
    bar.update()
    dec = dict(n_seq=len(x), bpb_full=bits_per_byte(lg_full, y), seconds_full=t_full,
               max_abs_logit_diff_vs_parallel=float((lg_full - dense["logits"][:len(x)]).abs().max()), runs=[])
    for i, L_tol in enumerate(L_tols):
        hz = np.array([[hd["tols"][i]["horizon"][str(T)] for hd in row] for row in heads])
        lg_h, kept = decode(model, x, hz)
        bpb = bits_per_byte(lg_h, y)
        dec["runs"].append(dict(log_tol=-L_tol, horizons=hz, bpb=bpb, delta_bpb=bpb - dec["bpb_full"],
                                cache_entries=int(kept.sum()), cache_entries_full=int(kept_full.sum()),
                                mem_frac=float(kept.sum() / kept_full.sum())))
        bar.update()
    return dec


def _model_info(checkpoint, meta, model, spans, dense, L_tols, decode_L_tol, block, p, U, t0):
    return dict(checkpoint=checkpoint, model=meta.get("name", "fox_shakespeare"), kind="softmax",
                n_seq=len(spans) // 2, seq_len=dense["logits"].shape[1], block=list(block),
                log_tols=[-L for L in L_tols], p=p, decode_log_tol=-decode_L_tol, training_context=model.cfg.context,
                fit_spans=spans[1::2], measure_spans=spans[0::2], bpb_dense=dense["bpb"],
                U="auto: scale * max|q| * max|k| per head over the measured batch" if U == "auto" else
                f"fixed {float(U):g} (not a bound on |q.k| * scale: the pruned mass may exceed tol)",
                speedup_model="time proportional to visited blocks",
                seconds=time.perf_counter() - t0, torch_threads=torch.get_num_threads())


def analyse_model(checkpoint=DEFAULT_CHECKPOINT, L_tols=DEFAULT_L_TOLS, block=64, n_seq=8, seq_len=1024, p=0.99,
                  decode_seqs=4, decode_L_tol=None, seed=0, progress=True, mass_rows=4, U="auto"):
    """Predictions from the gate laws against measurements on the shipped model (CPU).

    The laws are fitted on n_seq held-out sequences and everything is measured on n_seq others (disjoint
    windows of seq_len + 1 bytes). L_tols: levels ln(1/tol) > 0. U is ACP's "auto" bound per head from the
    measured run's q/k norms (the same U enters prediction and measurement); U may instead be fixed (a number
    >= 0), which is then no bound on the logits and the pruned mass can exceed tol. mass_rows: every
    mass_rows-th query row is checked against its KV horizon (0 skips). Returns a JSON-able dict.
    """
    t0 = time.perf_counter()
    L_tols = [check_level(L, "L_tol") for L in L_tols]
    block = check_block(block)
    n_seq, seq_len = pos_int(n_seq, "n_seq"), pos_int(seq_len, "seq_len")
    if n_seq < 3:
        raise ValueError(f"n_seq must be >= 3 (jackknife over sequences for the law); got {n_seq}")
    if not 0 <= decode_seqs <= n_seq:
        raise ValueError(f"decode_seqs must lie in [0, n_seq = {n_seq}]; got {decode_seqs}")
    decode_L_tol = L_tols[len(L_tols) // 2] if decode_L_tol is None else check_level(decode_L_tol, "decode_L_tol")
    torch.manual_seed(seed)
    model, meta = fm.load_checkpoint(checkpoint)
    toks, spans = data.heldout_tokens(n_seq=2 * n_seq, seq_len=seq_len + 1)
    x, y = toks[0::2, :-1], toks[0::2, 1:]                                        # measured; fitted: toks[1::2]
    bar = _bar(2 + len(L_tols) + (1 + len(L_tols) if decode_seqs else 0), progress)
    laws = _fit_laws(model, toks[1::2, :-1])
    bar.update()
    # the dense baseline runs through the same op with nothing pruned (tol = e^-10000), so the differences
    # below are the pruning's alone, not two implementations' rounding
    dense = dict(logits=run_pruned(model, x, 1e4, block)[0])
    dense["bpb"] = bits_per_byte(dense["logits"], y)
    inputs = traces.capture(model, x)[1]                    # {layer: (S, T, d)} attention inputs
    with torch.no_grad():
        dense["vmax"] = float(max(blk.attn.v_proj(inputs[li]).abs().max() for li, blk in enumerate(model.blocks)))
    bar.update()
    xcert = np.stack([certified_x_min(blk.attn, blk.ln1) for blk in model.blocks])   # (nl, H)
    heads = [[dict(layer=li, head=h, kappa=law.kappa, sigma2=law.sigma2, tau=law.tau, se_tau=law.se_tau, iid=law.iid,
                   x_min_trace=law.x_min, x_min_certified=float(xcert[li, h]), tols=[])
              for h, law in enumerate(row)] for li, row in enumerate(laws)]
    per_tol = []
    for L_tol in L_tols:
        per_tol.append(_measure_tol(model, x, y, dense, laws, heads, L_tol, block, U))
        bar.update()
    _add_horizons(heads, laws, xcert, p, seq_len, model.cfg.context)
    if mass_rows:
        _add_mass_coverage(model, inputs, heads, L_tols, seq_len, mass_rows)
    flat = [hd for row in heads for hd in row]
    for i, r in enumerate(per_tol):
        r.update(memory_summary([hd["tols"][i] for hd in flat]))
        if mass_rows:
            r["min_horizon_coverage"] = float(min(hd["tols"][i]["horizon_coverage"] for hd in flat))
    dec = _decode_runs(model, x[:decode_seqs], y[:decode_seqs], dense, heads, L_tols, bar) if decode_seqs else None
    bar.close()
    info = _model_info(checkpoint, meta, model, spans, dense, L_tols, decode_L_tol, block, p, U, t0)
    return outputs.json_clean(dict(info=info, per_tol=per_tol, decode=dec, heads=flat))


# ----------------------------------------------------------------------------- any model's traces


TRACE_LEFT_OUT = ("bits per byte, decoding, attention-mass coverage of the horizons, the horizons certified by "
                  "the gate weights and ACP's 'auto' U (from the q/k norms) need the model itself; a trace file "
                  "holds only the log gates")
RECURRENT_LEFT_OUT = ("ACP block pruning and KV-cache horizons: a recurrent state has no KV cache and no attention "
                      "blocks to prune (U is not used); reported instead: the memory horizon of the state")
OUR_HOOK = re.compile(r"blocks\.\d+\.attn\.hook_log_fgate$")


def load_traces(path):
    """traces.check_trace_file: every trace (S, T, H) with S >= 3 sequences, T >= max(S, H, 16) tokens, the same
    S and T in every layer, every value checked streamed. Returns (traces {name: traces.LazyTrace}, meta), read
    head by head later; ValueError otherwise."""
    return traces.check_trace_file(path)


def _family_kinds(meta):
    """Kinds of the families a trace file names (metadata 'family' or 'families'), through adapters."""
    fam = meta.get("families", meta.get("family"))
    fams = list(fam.values()) if isinstance(fam, dict) else [fam] if isinstance(fam, str) else list(fam or [])
    kinds = set()
    for f in fams:
        try:
            k = adapters.get_adapter(f).kind
        except (ValueError, TypeError):
            return set(), fams
        kinds.add("softmax" if k == "softmax" else "recurrent")       # 'constant' (RetNet): a state too
    return kinds, fams


def trace_kind(meta, names, kind=None):
    """What a trace file's model attends with: 'softmax' (a KV cache) or 'recurrent' (a state). kind: the
    user's --kind (wins). Else metadata 'kind', else the family (adapters), else trace names of this package's
    FoX model. Returns (kind, where it came from); ValueError when none says."""
    if kind is not None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}; got {kind!r}")
        return kind, "given (--kind)"
    mk = meta.get("kind")
    if mk is not None:
        if mk not in KINDS:
            raise ValueError(f"trace metadata kind {mk!r} is not one of {list(KINDS)}; pass --kind softmax|recurrent")
        return mk, "trace metadata 'kind'"
    kinds, fams = _family_kinds(meta)
    if len(kinds) == 1:
        return kinds.pop(), f"family {', '.join(sorted(set(map(str, fams))))} (foxwindow.models.adapters)"
    if len(kinds) > 1:
        raise ValueError(f"the trace file mixes families of both kinds ({sorted(set(map(str, fams)))}); analyse "
                         "one kind at a time or pass --kind")
    if names and all(OUR_HOOK.search(n) for n in names):
        return "softmax", "trace names (this package's FoX model)"
    raise ValueError("the trace file does not say what kind of model it holds (no metadata 'kind' or known family): "
                     "pass --kind softmax (attention over a KV cache) or --kind recurrent (a gated state)")


def _check_trace_args(U, L_tols, block, p, report_L_tol):
    L_tols = [check_level(L, "L_tol") for L in L_tols]
    if not L_tols:
        raise ValueError("L_tols must hold at least one level ln(1/tol)")
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1); got {p!r}")
    report_L_tol = L_tols[len(L_tols) // 2] if report_L_tol is None else check_level(report_L_tol, "report_L_tol")
    if report_L_tol not in L_tols:
        raise ValueError(f"report_L_tol {report_L_tol} is not one of L_tols {L_tols}")
    return None if U is None else check_U(U), L_tols, check_block(block), report_L_tol


def _softmax_levels(U, L_tols, T, ctx):
    """The levels _softmax_head asks a law for, in its order (each computed as there)."""
    out = [gates.threshold(1e-3)]
    for L_tol in L_tols:
        out.append(acp_level(L_tol, U, T))
        out += [2 * U + L_tol + math.log(t) for t in (T,) + CONTEXTS] + [2 * U + L_tol + math.log(ctx)]
    return out


def _softmax_head(name, li, h, law, meas, U, L_tols, block, p, ctx):
    """One head of a softmax-kind trace: its law (fitted on other sequences), pruning measured on meas (S, T),
    KV horizons."""
    T = meas.shape[1]
    hd = dict(layer=li, layer_name=name, head=h, kappa=law.kappa, sigma2=law.sigma2, tau=law.tau,
              se_tau=law.se_tau, iid=law.iid, x_min_trace=law.x_min, tols=[],
              **{"p_window_beyond_context_eps1e-3": p_beyond(law, gates.threshold(1e-3), ctx)})
    for L_tol in L_tols:
        L = acp_level(L_tol, U, T)
        m = measure_block_pruning(meas, L, block)
        hd["tols"].append(dict(log_tol=-L_tol, U=U, L=L, **pruning_entry(predict_block_pruning(law, T, L, block),
                                                                         m["frac_blocks"], m["frac_flops"]),
                               **horizon_entry(law, U, L_tol, p, T, ctx)))
    return hd


def _recurrent_head(name, li, h, law, meas, L_tols, p, ctx):
    """One head of a recurrent-kind trace: its law and the memory horizon of the state at each tol."""
    hd = dict(layer=li, layer_name=name, head=h, kappa=law.kappa, sigma2=law.sigma2, tau=law.tau,
              se_tau=law.se_tau, iid=law.iid, x_min_trace=law.x_min, tols=[])
    for L_tol in L_tols:
        sh = state_horizon(law, L_tol, p)
        hd["tols"].append(dict(log_tol=-L_tol, L=L_tol, method=sh.method, state_horizon=sh.h,
                               p_window_beyond_context=p_beyond(law, L_tol, ctx)))
    return hd


def _trace_heads(trs, head_fn, levels, progress, workers=1):
    """Every head of the traces ({name: (S, T, H) array or traces.LazyTrace}), one job a head over `workers`
    processes: its log gates read (a file's a block of heads at a time, traces.HeadBlocks), its law fitted on the
    odd sequences, its exact survival tables at `levels` (the expensive part: ~25 exact first-passage computations
    per iid head, 0.1-2 s each on a trace's step law of thousands of atoms), then head_fn(name, li, h, law, meas
    (S/2, T) even sequences). A process holds a block of heads and the head at hand, never the file. Returns the
    heads' results in layer, head order; the values do not depend on `workers`."""
    index = [(li, name, h) for li, (name, tr) in enumerate(trs.items()) for h in range(tr.shape[2])]
    blocks = traces.HeadBlocks()

    def one(i):
        li, name, h = index[i]
        tr = trs[name]
        if isinstance(tr, traces.LazyTrace):
            lg = blocks.head(tr, h)                                    # (S, T)
        else:
            lg = tr[:, :, h].detach().cpu().numpy() if isinstance(tr, torch.Tensor) else np.asarray(tr[:, :, h])
        fit, meas = lg[1::2].astype(np.float64), lg[0::2].astype(np.float64)     # (S/2, T) each, disjoint
        law = HeadLaw.from_trace(fit, name=f"{name}[{h}]")
        law.fill_levels({key: survival_table(law.gate, L) for key, L in law.pending_levels(levels)})
        return head_fn(name, li, h, law, meas)
    bar = _bar(len(index), progress, "heads")
    try:                # each head in its own process (forked: the traces are not pickled)
        out = parallel.run_jobs(one, len(index), parallel.resolve_workers(workers, len(index)),
                                on_result=lambda i, r: bar.update())
    finally:
        bar.close()
    return out


def _softmax_per_tol(heads, L_tols):
    per_tol = []
    for i, L_tol in enumerate(L_tols):
        es = [hd["tols"][i] for hd in heads]
        pb, mb = (float(np.mean([e[k] for e in es])) for k in ("pred_frac_blocks", "meas_frac_blocks"))
        per_tol.append(dict(log_tol=-L_tol, pred_frac_blocks=pb, meas_frac_blocks=mb,
                            pred_frac_flops=float(np.mean([e["pred_frac_flops"] for e in es])),
                            meas_frac_flops=float(np.mean([e["meas_frac_flops"] for e in es])),
                            pred_speedup=1 / (1 - pb), meas_speedup=1 / (1 - mb), **memory_summary(es)))
    return per_tol


def _recurrent_per_tol(heads, L_tols):
    per_tol = []
    for i, L_tol in enumerate(L_tols):
        hs = np.array([hd["tols"][i]["state_horizon"] for hd in heads])
        per_tol.append(dict(log_tol=-L_tol, state_horizon_median=float(np.median(hs)), state_horizon_max=int(hs.max()),
                            heads_beyond_context=float(np.mean([hd["tols"][i]["p_window_beyond_context"]
                                                                for hd in heads]))))
    return per_tol


def analyse_traces(path, U=None, L_tols=DEFAULT_L_TOLS, block=64, p=0.99, context=None, report_L_tol=None,
                   kind=None, progress=True, workers=1, opened=None):
    """Predictions and measurements from a trace file written by traces.save_trace (any model's gates).

    Each head's law is fitted on the odd sequences (1, 3, ...) and measured on the even ones (0, 2, ...).
    path: .npz with {layer: (S, T, H) float32 log gates}, S >= 6; kind: None (read from the file, see
    trace_kind) or 'softmax' / 'recurrent'. softmax: ACP block pruning at L = 2U + ln T + L_tol and KV horizons,
    U a float >= 0 (a fixed bound on |q.k| * scale, not checked against the model's logits; required);
    recurrent: the memory horizon of the state at L = L_tol (U unused). L_tols: levels ln(1/tol) > 0;
    block: int or (BM, BN); p: horizon quantile in (0, 1); context: int > 0 for P(W > context) (None: the trace
    length T); report_L_tol: the tol of the per-head text table (None: the middle one); workers: processes
    for the exact laws (the results do not depend on it); opened: (traces, meta) that load_traces(path) returned
    already (the command checks the file before its outputs), so that the file is checked once. Returns a JSON-able
    dict like analyse_model's, without what needs the model.
    """
    t0 = time.perf_counter()
    U, L_tols, (BM, BN), report_L_tol = _check_trace_args(U, L_tols, block, p, report_L_tol)
    trs, meta = load_traces(path) if opened is None else opened
    kind, kind_source = trace_kind(meta, list(trs), kind)
    if kind == "softmax" and U is None:
        raise ValueError("--traces of a softmax model needs --U X, a number >= 0 ('auto' takes U from the model's "
                         "q/k norms, which a trace file does not hold)")
    S, T = next(iter(trs.values())).shape[:2]
    if S < 6:
        raise ValueError(f"{path}: {S} sequences; the laws are fitted on half of them and measured on the other "
                         "half, so at least 6 are needed (3 for each half's jackknife)")
    ctx = T if context is None else pos_int(context, "context")
    info = dict(source="traces", traces=path, model=meta.get("model", "?"), kind=kind, kind_source=kind_source,
                n_seq=len(range(0, S, 2)), n_fit=len(range(1, S, 2)), seq_len=T, block=[BM, BN],
                log_tols=[-L for L in L_tols], p=p, decode_log_tol=-report_L_tol, context=ctx,
                context_given=context is not None)
    if kind == "recurrent":
        heads = _trace_heads(trs, partial(_recurrent_head, L_tols=L_tols, p=p, ctx=ctx), L_tols, progress, workers)
        per_tol = _recurrent_per_tol(heads, L_tols)
        info.update(U=None, left_out=RECURRENT_LEFT_OUT)
    else:
        heads = _trace_heads(trs, partial(_softmax_head, U=U, L_tols=L_tols, block=(BM, BN), p=p, ctx=ctx),
                             _softmax_levels(U, L_tols, T, ctx), progress, workers)
        per_tol = _softmax_per_tol(heads, L_tols)
        info.update(U=f"fixed {U:g} (given; not checked against the model's logits)", left_out=TRACE_LEFT_OUT,
                    speedup_model="time proportional to visited blocks")
    info["seconds"] = time.perf_counter() - t0
    return outputs.json_clean(dict(info=info, per_tol=per_tol, decode=None, heads=heads))


# ----------------------------------------------------------------------------- command line


def _parser():
    p = outputs.parser("ACP block pruning and KV-cache horizons of FoX heads: predictions from the gate laws "
                       "against the shipped model, or against any model's gate traces (--traces, from forget.py "
                       "--save-traces; a recurrent model's traces give the memory horizon of its state instead).")
    record_given(p)                 # which options were given: a flag the chosen mode ignores is refused
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tol", type=float, nargs="+", help="tolerated pruned attention mass, each in (0, 1)")
    g.add_argument("--log-tol", type=float, nargs="+",
                   help=f"ln tol, each < 0 (default {[-L for L in DEFAULT_L_TOLS]})")
    p.add_argument("--block", type=int, nargs="+", default=[64, 64], help="block size BM [BN] (default 64 64)")
    p.add_argument("--n-seq", type=int, default=None,
                   help="held-out sequences measured (as many again fit the laws; default 8; model only)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per sequence (default 1024, the training context; model only)")
    p.add_argument("--seed", type=int, default=None, help="torch seed, >= 0 (default 0; the sequences are fixed, "
                   "nothing is sampled; model only)")
    p.add_argument("--p", type=float, default=0.99, help="probability for the horizon quantiles")
    p.add_argument("--U", default=None, help="logit bound: 'auto' (ACP, from the q/k norms; the default with the "
                   "model) or a number >= 0 (a fixed U, e.g. 0 for the decay alone; not a bound, so pruning may "
                   "exceed tol); required with --traces of a softmax model")
    p.add_argument("--decode-seqs", type=int, default=None,
                   help="sequences decoded token by token (default 4, at most --n-seq; 0: skip; model only)")
    p.add_argument("--checkpoint", default=None, help=f"FoX checkpoint (.pt; default {DEFAULT_CHECKPOINT})")
    p.add_argument("--traces", default=None, help="gate trace file (.npz from forget.py --save-traces) of any "
                   "model: fits the laws on its odd sequences and measures on the even ones")
    p.add_argument("--kind", choices=KINDS, default=None, help="with --traces: what the model attends with, when "
                   "the file does not say (softmax: a KV cache; recurrent: a gated state)")
    p.add_argument("--context", type=int, default=None,
                   help="context for P(W > context) with --traces (default: the trace length)")
    p.add_argument("--out", default=None, help="folder for prune.txt and prune.json (None: a new "
                                               "runs/prune-<time>/; the committed run: --out results/prune --force)")
    p.add_argument("--json", default=None, help="JSON path (default OUT/prune.json)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: on a shared CPU, thread sync dominates these small ops)")
    p.add_argument("--workers", type=int, default=None, help="processes for the exact laws with --traces, one "
                   "(head, level) at a time (default: the available processors), each worker's BLAS on one thread; the "
                   "results do not depend on it")
    p.add_argument("--no-progress", action="store_true")
    return outputs.add_common(p)


MAX_LEVEL = -math.log(sys.float_info.min)      # 708.4: tol = e^-L below this is not a normal float64
MAX_U = 1000.0                                  # --U: a logit bound in nats (ACP's auto U of the shipped model: ~22)
MAX_CONTEXT = 1 << 53                           # --context: tokens (exact in float64; the laws' counts are int64)


def _levels(a):
    """The user's tols as levels L_tol = ln(1/tol), converted once here; each tol once, each a normal float64."""
    if a.tol is not None:
        flag, vals = "--tol", a.tol
        levels = [-math.log(outputs.eps_arg("--tol", t)) for t in a.tol]
    elif a.log_tol:
        flag, vals = "--log-tol", a.log_tol
        levels = [level_of_log_tol(t, "--log-tol") for t in a.log_tol]
    else:
        return list(DEFAULT_L_TOLS)
    twice = sorted({v for v, L in zip(vals, levels) if levels.count(L) > 1}, key=vals.index)
    if twice:
        raise outputs.UsageError(f"{flag}: {', '.join(f'{v:g}' for v in twice)} given more than once (each tol is "
                                 "one row of the report)")
    for v, L in zip(vals, levels):
        if L > MAX_LEVEL:
            raise outputs.UsageError(f"{flag} {v:g}: tol = e^-{L:.4g} is below the smallest normal float64 "
                                     f"(e^-{MAX_LEVEL:.1f} = {sys.float_info.min:.3g}); no attention mass is "
                                     "resolved that finely")
    return levels


def _check_mode(a):
    """The options of one mode (--traces or the model) checked; the model's defaults filled in."""
    if a.traces is not None:
        model_only = [f for f, v in (("--checkpoint", a.checkpoint), ("--n-seq", a.n_seq), ("--seq-len", a.seq_len),
                                     ("--decode-seqs", a.decode_seqs)) if v is not None]
        if model_only:
            raise outputs.UsageError(f"{model_only[0]} cannot be used with --traces (it needs the model; the traces "
                                     "fix the sequences)")
        if a.seed is not None:
            raise outputs.UsageError("--seed cannot be used with --traces (it seeds the model's run; nothing is "
                                     "sampled from a trace file)")
        if a.context is not None:
            outputs.positive("--context", a.context)
            if a.context > MAX_CONTEXT:
                raise outputs.UsageError(f"--context {a.context} is beyond any context; at most 2^53 = "
                                         f"{MAX_CONTEXT} tokens")
        try:
            if os.path.isfile(a.traces) and os.path.getsize(a.traces) == 0:
                raise ValueError(f"{a.traces} is empty (0 bytes); expected an .npz trace file (forget.py "
                                 "--save-traces writes one)")
            a.opened = trs, meta = load_traces(a.traces)              # checked once: analyse_traces reuses it
            if not trs:
                raise ValueError(f"{a.traces} holds no traces (its metadata lists no layers)")
            kind, source = trace_kind(meta, list(trs), a.kind)
        except (FileNotFoundError, ValueError) as exc:
            raise outputs.UsageError(f"--traces: {exc}") from None
        S, T = next(iter(trs.values())).shape[:2]
        if S < 6:
            raise outputs.UsageError(f"--traces: {a.traces} holds {S} sequences; the laws are fitted on half of them "
                                     "and measured on the other half, so at least 6 are needed (3 for each half's "
                                     "jackknife)")
        if kind == "softmax" and a.U in (None, "auto"):
            raise outputs.UsageError("--traces needs --U X for a softmax model, a number >= 0 ('auto' takes U from "
                                     "the model's q/k norms, which a trace file does not hold)")
        if kind == "recurrent":
            unused = [f for f, d in (("--U", "U"), ("--block", "block")) if given(a, d)]
            if unused:
                raise outputs.UsageError(f"{' and '.join(unused)}: the traces are of a recurrent model (kind: "
                                         f"{source}), which has no attention logits or blocks; "
                                         f"{'it' if len(unused) == 1 else 'they'} would be ignored")
            a.U = None                                      # a state has no logits: U does not enter
        else:
            _block_fits(a, T, f"the trace length T = {T} of --traces")
        return None
    for f, v in (("--context", a.context), ("--kind", a.kind)):
        if v is not None:
            raise outputs.UsageError(f"{f} applies to --traces only (the model's own training context and kind are "
                                     "used)")
    if a.workers is not None:
        raise outputs.UsageError("--workers applies to --traces only (the model's run is one process: --threads sets "
                                 "its torch threads)")
    a.seed = 0 if a.seed is None else a.seed
    if a.seed < 0:
        raise outputs.UsageError(f"--seed must be >= 0; got {a.seed}")
    a.n_seq = outputs.positive("--n-seq", 8 if a.n_seq is None else a.n_seq)
    a.seq_len = outputs.positive("--seq-len", 1024 if a.seq_len is None else a.seq_len)
    a.decode_seqs = min(4, a.n_seq) if a.decode_seqs is None else a.decode_seqs      # the default: 4 at most
    if a.decode_seqs < 0:
        raise outputs.UsageError(f"--decode-seqs must be >= 0; got {a.decode_seqs}")
    if a.decode_seqs > a.n_seq:
        raise outputs.UsageError(f"--decode-seqs {a.decode_seqs} exceeds --n-seq {a.n_seq}: it decodes some of the "
                                 "measured sequences")
    if a.n_seq < 3:
        raise outputs.UsageError(f"--n-seq must be >= 3 (the law's jackknife over sequences); got {a.n_seq}")
    _block_fits(a, a.seq_len, f"--seq-len {a.seq_len}")
    have = heldout_windows(a.seq_len + 1) // 2                   # each measured sequence beside a fitted one
    if have < a.n_seq:
        raise outputs.UsageError(f"--n-seq {a.n_seq} x --seq-len {a.seq_len}: the held-out text holds {have} pairs "
                                 f"of sequences of {a.seq_len} tokens (each measured one beside one the laws are "
                                 f"fitted on); ask for at most {have} (or shorter ones)")
    ck = a.checkpoint or DEFAULT_CHECKPOINT
    path = outputs.input_file("--checkpoint", outputs.repo_path(ck) if not os.path.exists(ck) else ck)
    if _is_trace_file(path):
        raise outputs.UsageError(f"--checkpoint: {ck} is a gate trace file (.npz), not a model checkpoint; pass it "
                                 "as --traces")
    return path


def heldout_windows(seq_len):
    """How many held-out sequences of seq_len bytes the text holds (data.heldout_tokens' windows)."""
    return sum(max(0, (len(b) - seq_len) // seq_len + 1) for _, b in data.load_split("val"))


def _is_trace_file(path):
    """Whether `path` is a zip holding a trace file's metadata member (save_trace's format)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return "meta_json.npy" in zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _block_fits(a, T, what):
    """UsageError when a --block size exceeds the sequences' length T (one block would hold the whole sequence:
    nothing could be pruned)."""
    big = [b for b in a.block if b > T]
    if big:
        raise outputs.UsageError(f"--block {' '.join(map(str, a.block))}: a block of {big[0]} exceeds {what} (one "
                                 "block would hold the whole sequence and nothing could be pruned)")


def _check_args(a):
    """Every argument and output checked before any work. Returns (L_tols, block, U, checkpoint, txt, json)."""
    for f, v in (("--out", a.out), ("--json", a.json), ("--traces", a.traces), ("--checkpoint", a.checkpoint)):
        if v is not None and not v.strip():
            raise outputs.UsageError(f"{f}: expected a path; got an empty one")
    L_tols = _levels(a)
    if len(a.block) > 2:
        raise outputs.UsageError(f"--block takes one or two sizes; got {a.block}")
    if min(a.block) < 1:
        raise outputs.UsageError(f"--block sizes must be >= 1; got {' '.join(map(str, a.block))}")
    block = check_block(tuple(a.block) if len(a.block) == 2 else a.block[0])
    if a.workers is not None:
        outputs.positive("--workers", a.workers)
    # workers beyond the processors or the jobs run as many as there are jobs; torch's threads are set as given
    if a.threads is not None:
        parallel.threads_arg("--threads", a.threads, " (the results do not depend on it)")
    outputs.eps_arg("--p", a.p)
    if a.U not in (None, "auto"):
        try:
            a.U = check_U(a.U)
        except ValueError as exc:
            raise outputs.UsageError(f"--U: {exc}") from None
        if a.U > MAX_U:
            raise outputs.UsageError(f"--U {a.U:g} is beyond any attention logit bound (|q.k| * scale in nats; ACP's "
                                     f"auto U on the shipped model is about 22); give at most {MAX_U:g}")
    checkpoint = _check_mode(a)
    if a.workers is None:
        a.workers = parallel.default_workers()
    U = "auto" if (a.U is None and a.traces is None) else a.U
    # every output checked before any work; nothing existing is replaced without --force
    out = outputs.check_dir(a.out, [] if a.json else ["prune.json"], force=a.force) if a.out else \
        outputs.run_dir("prune")
    txt_path = outputs.check_writable(os.path.join(out, "prune.txt"), force=a.force, what="--out")
    json_path = outputs.check_writable(a.json or os.path.join(out, "prune.json"), force=a.force, what="--json")
    return L_tols, block, U, checkpoint, txt_path, json_path


def main(argv=None):
    """`python prune.py [options]`, run through outputs.cli (one-line errors, --debug for the traceback)."""
    run(argv)


def run(argv=None):
    """The command: parse and check argv, analyse, print and write the report. Returns the result dict."""
    a = _parser().parse_args(argv)
    L_tols, block, U, checkpoint, txt_path, json_path = _check_args(a)
    torch.set_num_threads(a.threads)
    if a.traces is not None:
        res = analyse_traces(a.traces, U, L_tols, block, a.p, a.context, kind=a.kind, opened=a.opened,
                             progress=not a.no_progress, workers=a.workers)
    else:
        res = analyse_model(checkpoint, L_tols, block, a.n_seq, a.seq_len, a.p, decode_seqs=a.decode_seqs,
                            seed=a.seed, progress=not a.no_progress, U=U)
    ck = res["info"].get("checkpoint")
    if ck and os.path.commonpath([os.path.abspath(ck), outputs.REPO]) == outputs.REPO:
        res["info"]["checkpoint"] = os.path.relpath(ck, outputs.REPO)      # results name no machine paths
    text = format_report(res)
    print(text)
    outputs.write_text(txt_path, text + "\n")
    outputs.write_result(json_path, res, "prune")
    print(f"wrote {txt_path} and {json_path}", file=sys.stderr)
    return res


if __name__ == "__main__":
    sys.exit(outputs.cli(main))
