"""Per-head verdict and windows of a gated model: the drivers, the report and the `python forget.py` command line.

The statistics live in verdict.py (the verdict and its tests), dependence.py (V(n), tau(n), the regime,
Geyer's tau) and predict.py (the window at any L from the head's own gates, Kaplan-Meier, the
out-of-sample score); capture and the attention-mass window in traces.py. Here:

  analyse_layers(traces, Ls)      every head of {layer: (S, T, H) log gates}: verdict.analyse per head, with
                                  independent bootstrap draws per head (spawned from one recorded seed)
  analyse_model(checkpoint, Ls)   the shipped FoX model (or any of this package's checkpoints): capture the
                                  gates on held-out text, analyse, and compare decay and attention-mass windows
  analyse_traces(path, Ls)        the same from saved traces (traces.save_trace), any model's gates
  print_table, to_json            the report
  main                            `python forget.py` (--traces, --synthetic, --model, --json, ...)

Below the argument parser thresholds are L = ln(1/eps) only (the user's eps are converted once in main).
Verdict states and their calibration: verdict.py's docstring and docs/VERDICT.md.
"""
import math
import os
import sys
import time
from dataclasses import asdict

import numpy as np
import torch
from scipy import stats
from tqdm import tqdm

from foxwindow import data, distributed, forget, hf_models, lawtable, outputs, verdict
from foxwindow.model import load_model, shipped_checkpoint
from foxwindow.traces import (  # noqa: F401  (capture, mass_windows: the drivers' names)
    capture,
    decay_window_summary,
    load_trace,
    load_traces_checked,
    mass_windows,
    query_rows,
    run_with_cache,
    save_trace,
)
from foxwindow.verdict import HeadResult  # noqa: F401  (the result type of every driver)

EPS_SCAN = lawtable.EPS_SCAN
N_BOOT = verdict.N_BOOT
REPORT_EPS = (1e-2, 1e-3, 1e-4)              # the eps whose predictions the table prints


def critical_z(n_heads, n_seq):
    """The two-sided Student-t critical value (n_seq - 1 degrees of freedom) at the verdict's per-test level
    over a model of n_heads heads, verdict.ALPHA / (2 n_heads): the level a z-score would need."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1; got {n_heads!r}")
    if n_seq < 2:
        raise ValueError(f"n_seq must be >= 2; got {n_seq!r}")
    return float(stats.t.isf(verdict.ALPHA / (4 * n_heads), n_seq - 1))


def _check_Ls(Ls):
    if isinstance(Ls, (str, bytes)) or not hasattr(Ls, "__iter__"):
        raise ValueError(f"thresholds must be a sequence of L > 0; got {Ls!r}")
    Ls = [float(L) for L in Ls]
    if not Ls:
        raise ValueError("no thresholds: give at least one L = ln(1/eps) > 0")
    bad = [L for L in Ls if not (L > 0 and math.isfinite(L))]
    if bad:
        raise ValueError(f"thresholds L = ln(1/eps) must be finite and > 0; got {bad}")
    return Ls


def analyse_head(lg, eps_list=EPS_SCAN, z=None, layer=0, head=0, n_heads=1, n_boot=N_BOOT, seed=None,
                 context=None, L_list=None):
    """The verdict and predictions of one head from log-gate traces lg (S, T): S >= 3 sequences of T >= S
    tokens, numpy or torch, any float dtype, values <= 0. Returns verdict.HeadResult.

    eps_list: non-empty sequence of thresholds in (0, 1) (converted here to L = ln 1/eps), or L_list: the
      thresholds L > 0 themselves (then eps_list is ignored).
    n_heads: heads in the model (int >= 1): the family of tests is 2 n_heads (verdict.py).
    z: for callers of the earlier API, a critical value that stands for a family: the n_heads whose
      critical_z(n_heads, S) is nearest z (a finite number > 0; None: n_heads as given).
    n_boot, seed, context: verdict.analyse (seed None: fresh draws; an int reproduces a run).
    """
    if isinstance(lg, torch.Tensor):
        lg = lg.detach().cpu().numpy()
    x = forget.increments_from_log_gates(np.asarray(lg, dtype=np.float64))       # (S, T)
    if x.ndim != 2 or x.shape[0] < 3:
        raise ValueError(f"lg: need traces (S, T) with S >= 3 sequences for jackknife errors; got {x.shape}")
    S, T = x.shape
    if S > T:
        raise ValueError(f"lg: shape {x.shape} reads as {S} sequences x {T} tokens; expected (S sequences, "
                         "T tokens) with T >= S: is the array transposed (T, S)?")
    if L_list is None:
        if isinstance(eps_list, (str, bytes)) or not hasattr(eps_list, "__iter__"):
            raise ValueError(f"eps_list must be a sequence of thresholds in (0, 1); got {eps_list!r}")
        eps_list = [float(e) for e in eps_list]
        if not eps_list:
            raise ValueError("eps_list is empty; give at least one threshold in (0, 1)")
        L_list = [forget.threshold(e) for e in eps_list]
    else:
        eps_list = None
    Ls = _check_Ls(L_list)
    critical_z(n_heads, S)                                                          # validates n_heads
    if z is not None:
        if isinstance(z, bool) or not isinstance(z, (int, float, np.floating)) or not (math.isfinite(z) and z > 0):
            raise ValueError(f"z must be a finite number > 0 (or None for the default); got {z!r}")
        n_heads = max(1, int(round(verdict.ALPHA / (4 * stats.t.sf(z, S - 1)))))
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be an int >= 0; got {n_boot!r}")
    return verdict.analyse(x, Ls, n_heads=n_heads, n_boot=int(n_boot), seed=seed, context=context, layer=layer,
                           head=head, eps_list=eps_list)


def _rows(T):
    """Query rows of the attention-mass and decay windows (traces.query_rows)."""
    return query_rows(T)


def _decay_window(r, lg, eps, rows):
    """Mean decay window of `rows` of traces lg (S, T) at eps into r (traces.decay_window_summary)."""
    r.mass_eps = float(eps)
    r.decay_window_mean, r.decay_window_censored = decay_window_summary(lg, forget.threshold(eps), rows)


def _decay_window_L(r, lg, L, rows):
    r.mass_eps = math.exp(-L)
    r.decay_window_mean, r.decay_window_censored = decay_window_summary(lg, L, rows)


# ----------------------------------------------------------------------------- drivers


def source_labels(spans):
    """Strata of held-out sequences: the source file's name after its first '_' (the edition of the
    corpus: 'gut' modern, 'gut_f' First Folio). spans: list of {"file": ...} dicts. None when absent."""
    if not spans or not all(isinstance(sp, dict) and "file" in sp for sp in spans):
        return None
    names = [os.path.splitext(os.path.basename(str(sp["file"])))[0] for sp in spans]
    return [n.split("_", 1)[1] if "_" in n else "" for n in names]


def _truncate(traces, max_len):
    """The first max_len positions of every (S, T, H) trace (causal: the same gates a max_len-token run
    sees); max_len None keeps them whole."""
    if max_len is None:
        return traces
    T = next(iter(traces.values())).shape[1]
    if not 32 <= max_len <= T:
        raise ValueError(f"--max-len must lie in [32, {T}] (the traces' length); got {max_len}")
    return {k: v[:, :max_len] for k, v in traces.items()}


def root_seed(seed=None):
    """The run's seed: `seed` (int >= 0) or, for None, fresh entropy (draws independent between runs).
    Returns an int to record; np.random.SeedSequence(it) reproduces the run."""
    return int(np.random.SeedSequence().entropy) if seed is None else int(seed)


def analyse_layers(traces, Ls, n_boot=N_BOOT, seed=None, progress=False, context=None):
    """The verdict for every head of traces {layer name: (S, T, H) array or tensor of log-gates} at thresholds
    Ls (L > 0), the family Bonferroni over all heads. Each head draws from its own child of
    SeedSequence(seed) (seed None: fresh). Returns ([HeadResult], the int seed used)."""
    Ls = _check_Ls(Ls)
    seed = root_seed(seed)
    n_heads = sum(t.shape[2] for t in traces.values())
    children = np.random.SeedSequence(seed).spawn(n_heads)
    results = []
    bar = tqdm(total=n_heads, desc="heads", disable=not progress, file=sys.stderr)
    for l, tr in enumerate(traces.values()):
        lg = tr.cpu().numpy() if isinstance(tr, torch.Tensor) else np.asarray(tr)          # (S, T, H)
        for h in range(lg.shape[2]):
            r = analyse_head(lg[:, :, h], L_list=Ls, layer=l, head=h, n_heads=n_heads, n_boot=n_boot,
                             seed=children[len(results)], context=context)
            r.seed = seed
            results.append(r)
            bar.update()
    bar.close()
    return results, seed


def _rows_note(T, context):
    if context is None:
        return f"rows {T // 2}-{T - 1} of each sequence"
    where = "beyond" if T // 2 >= context else ("inside" if T <= context else "partly beyond")
    return f"rows {T // 2}-{T - 1} of each sequence, {where} the {context}-token training context"


def _shown_path(path):
    """A path for outputs: relative to the repository when inside it (no machine paths in outputs)."""
    p = os.path.abspath(path)
    root = os.path.abspath(outputs.REPO)
    return os.path.relpath(p, root) if p.startswith(root + os.sep) else path


def analyse_model(checkpoint=None, Ls=None, n_seq=32, seq_len=2048, mass_L=math.log(1e3), device="cpu",
                  progress=True, save_traces=None, n_boot=N_BOOT, max_len=None, seed=None):
    """Run the per-head analysis on a checkpoint's held-out text. Returns (results, info).
    Ls: thresholds L > 0 (None: the eps scan's). mass_L: the L of the decay and attention-mass windows.
    save_traces: optional .npz path for the captured log-gate traces and their metadata (whole sequences).
    n_boot, seed: analyse_layers. max_len: analyse only each sequence's first max_len positions (rows
    max_len/2 .. max_len - 1), e.g. the model's training context.
    Under torchrun each rank captures a contiguous block of the sequences and rank 0 gathers them, analyses
    and writes; the other ranks return (None, None)."""
    t0 = time.perf_counter()
    Ls = _check_Ls([forget.threshold(e) for e in EPS_SCAN] if Ls is None else Ls)
    path = checkpoint or DEFAULT_CHECKPOINT
    if save_traces:                             # before the capture, not after it
        outputs.check_writable(save_traces, force=True, what="save_traces")
    env = distributed.setup(device)             # under torchrun each rank captures a block of the sequences
    device = str(env.device) if distributed.launched() else device
    model, meta = load_model(path, device=device)
    tokens, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    # capture a few sequences at a time (rows are independent in eval mode): same traces, a progress bar
    # on the longest step, and less peak memory
    per = 4
    a, b = distributed.shard_range(n_seq)       # this rank's block; [0, n_seq) in one process
    traces, inputs = {}, {}
    show = progress and distributed.is_main()
    # one CPU thread: the shipped model's operations are too small for a second thread to pay off, and a
    # waiting thread spins (measured on the 2-core machine under load, 8 sequences: 2.4 s of CPU with one
    # thread against 12.4 s with two, and 6.8 s against 35.9 s of wall time)
    threads = torch.get_num_threads()
    if str(device) == "cpu":
        torch.set_num_threads(1)
    try:
        for s0 in tqdm(range(a, b, per), desc="capture", unit=f"x{per} seq", disable=not show, file=sys.stderr):
            tr, inp = capture(model, tokens[s0:min(s0 + per, b)].to(device))
            for l in tr:
                traces.setdefault(l, []).append(tr[l])
                inputs.setdefault(l, []).append(inp[l])
    finally:
        torch.set_num_threads(threads)
    traces = {l: torch.cat(v, 0) for l, v in traces.items()}                         # (S_rank, T, H) per layer
    inputs = {l: torch.cat(v, 0) for l, v in inputs.items()}                         # (S_rank, T, d) per layer
    # every rank's block on rank 0, in rank order: (S, T, H) and (S, T, d), as one process captures them
    traces, inputs = distributed.gather_traces(traces), distributed.gather_traces(inputs)
    if not distributed.is_main():
        return None, None                       # rank 0 analyses and writes
    t_capture = time.perf_counter() - t0
    context = getattr(model.cfg, "context", None)
    shown = _shown_path(path)
    if save_traces:
        save_trace(save_traces, {f"blocks.{l}.attn.hook_log_fgate": t for l, t in traces.items()},
                   dict(model=meta.get("name", shown), checkpoint=shown, spans=spans, L=list(Ls),
                        heads=model.cfg.n_heads, seq_len=seq_len, context=context))
    traces = _truncate(traces, max_len)
    T = next(iter(traces.values())).shape[1]
    results, seed = analyse_layers(traces, Ls, n_boot, seed, progress, context)
    rows = query_rows(T)
    H = model.cfg.n_heads
    for l in traces:
        lg = traces[l].cpu().numpy()                                                 # (S, T, H)
        mw = None
        if not model.cfg.fixed_gate:            # causal: rows < T see the same attention in the first T tokens
            torch.set_num_threads(1)            # as for the capture
            try:
                mw = mass_windows(model.blocks[l].attn, inputs[l][:, :T].cpu(), mass_L, rows)  # (S, R, H)
            finally:
                torch.set_num_threads(threads)
        for h in range(H):
            r = results[l * H + h]
            _decay_window_L(r, lg[:, :, h], mass_L, rows.numpy())
            if mw is not None:
                r.mass_window_mean = float(mw[:, :, h].double().mean())
                r.mass_window_censored = float((mw[:, :, h] == rows[None, :]).double().mean())
    info = dict(checkpoint=shown, model=meta.get("name", "fox_shakespeare"), n_seq=n_seq, seq_len=seq_len,
                analysed_len=T, spans=spans, strata=source_labels(spans), n_boot=n_boot, seed=seed,
                alpha=verdict.ALPHA, alpha_test=verdict.ALPHA / (2 * len(results)), capture_s=t_capture,
                total_s=time.perf_counter() - t0, val_bpc=meta.get("val_bpc"), context=context,
                rows=_rows_note(T, context))
    return results, info


def analyse_traces(path, Ls=None, mass_L=math.log(1e3), n_boot=N_BOOT, max_len=None, seed=None, progress=False):
    """Per-head analysis of traces saved with traces.save_trace (any model's gates): each (S, T, H) entry is
    one layer. Ls, n_boot, seed: analyse_model. No attention-mass windows (they need the model); P(W > context)
    where the metadata records the model's context. Returns (results, info)."""
    t0 = time.perf_counter()
    Ls = _check_Ls([forget.threshold(e) for e in EPS_SCAN] if Ls is None else Ls)
    traces, meta = load_traces_checked(path)
    traces = _truncate(traces, max_len)
    S, T = next(iter(traces.values())).shape[:2]
    context = meta.get("context") if isinstance(meta.get("context"), int) else None
    results, seed = analyse_layers(traces, Ls, n_boot, seed, progress, context)
    for r, (l, h) in zip(results, [(l, h) for l, tr in enumerate(traces.values()) for h in range(tr.shape[2])]):
        _decay_window_L(r, list(traces.values())[l][:, :, h], mass_L, query_rows(T).numpy())
    info = dict(checkpoint=_shown_path(path), model=meta.get("model", "?"), n_seq=S,
                seq_len=meta.get("seq_len", T), analysed_len=T, spans=meta.get("spans"),
                strata=source_labels(meta.get("spans")), n_boot=n_boot, seed=seed, alpha=verdict.ALPHA,
                alpha_test=verdict.ALPHA / (2 * len(results)), capture_s=0.0, total_s=time.perf_counter() - t0,
                layers=list(traces), context=context, rows=_rows_note(T, context))
    return results, info




def check(args):
    """Check the analysis inputs before any work (ValueError naming the argument): the trace file loads
    with a usable layout, or the checkpoint loads and the corpus holds the held-out windows."""
    if args.traces:
        load_traces_checked(args.traces)
        return
    try:
        load_model(args.checkpoint or DEFAULT_CHECKPOINT)
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"--checkpoint: {exc}") from None
    try:
        data.heldout_tokens(n_seq=args.n_seq, seq_len=args.seq_len)
    except ValueError as exc:
        raise ValueError(f"--n-seq {args.n_seq} x --seq-len {args.seq_len}: {exc}") from None


DEFAULT_CHECKPOINT = shipped_checkpoint()          # any cwd, installed or not


# ----------------------------------------------------------------------------- the report


def _f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def _at(r, eps):
    """Index of eps in r.eps_list (by L), or None."""
    L = forget.threshold(eps)
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
    for r in results:
        ci = f"{r.slope:8.3g} [{r.slope_ci[0]:.3g},{r.slope_ci[1]:.3g}]" if math.isfinite(r.slope) else "-"
        wdec = (">" if r.decay_window_censored > 0 else "") + _f(r.decay_window_mean, ".0f")
        wmass = (">" if r.mass_window_censored > 0 else "") + _f(r.mass_window_mean, ".0f")
        ps = "/".join(_f(v, ".0e") if math.isfinite(v) and v < 0.01 else _f(v, ".2f") for v in (r.p_var, r.p_mean))
        v = r.verdict + (f" ({r.law})" if r.law else "")
        print(f"{r.layer:>2d}.{r.head:<1d} {r.kappa:7.4f} {_f(r.tau, '4.2f')}±{_f(r.se_tau, '<4.2f')} "
              f"{_f(r.tau_long, '5.2f')}±{_f(r.se_tau_long, '<4.2f')} {sum(r.in_regime):>2d}/{len(r.in_regime):<2d} "
              f"{ci:>24s} {_f(r.pred_slope_mix, '8.3g')} {_f(r.pred_slope_iid, '8.3g')} {ps:>15s} {wdec:>6s} "
              f"{wmass:>6s}  {v}" + (f" ({'; '.join(r.reasons)})" if r.reasons else ""))
    counts = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("summary: " + ", ".join(f"{v}: {c}" for v, c in counts.items())
          + (f"; W_dec / W_mass: mean decay / attention-mass window at eps = {results[0].mass_eps:g}"
             " ('>': some windows reach the sequence start, a lower bound)" if results else "")
          + f"; capture {info['capture_s']:.1f} s, total {info['total_s']:.1f} s")
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


# ----------------------------------------------------------------------------- Hugging Face style models


# ----------------------------------------------------------------------------- command line


def _input(path, what):
    """An input file: relative to the working directory, else to the repository; UsageError if absent."""
    p = os.path.abspath(path)
    if not os.path.exists(p) and not os.path.isabs(path) and os.path.exists(outputs.repo_path(path)):
        p = outputs.repo_path(path)
    return outputs.input_file(what, p)


def check_args(a):
    """Every argument checked before any work; outputs.UsageError naming the argument."""
    outputs.eps_arg("--eps", a.eps)
    outputs.positive("--trials", a.trials, lo=2)                 # a variance needs two windows
    outputs.positive("--n-seq", a.n_seq, lo=3)                   # the jackknife needs three sequences
    outputs.positive("--seq-len", a.seq_len, lo=32)              # windows are read on the second half
    outputs.device_arg("--device", a.device)
    if a.synthetic:
        clash = [f for f, v in (("--traces", a.traces), ("--checkpoint", a.checkpoint),
                                ("--save-traces", a.save_traces)) if v]
        if clash:
            raise outputs.UsageError(f"--synthetic ignores {' and '.join(clash)}: drop one or the other")
    elif a.traces:
        clash = [f for f, v in (("--checkpoint", a.checkpoint), ("--save-traces", a.save_traces)) if v]
        if clash:
            raise outputs.UsageError(f"--traces analyses saved traces; it cannot be combined with "
                                     f"{' and '.join(clash)}")
        a.traces = _input(a.traces, "--traces")
    if a.checkpoint:
        a.checkpoint = _input(a.checkpoint, "--checkpoint")
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    if a.save_traces:
        a.save_traces = outputs.check_writable(a.save_traces, force=a.force, what="--save-traces")
        if a.json and a.json == a.save_traces:
            raise outputs.UsageError("--json and --save-traces name the same file")


def run_synthetic(a):
    """`python forget.py --synthetic`: the Monte Carlo table (a: parsed and checked arguments)."""
    rows = lawtable.synthetic_table(a.eps, a.trials, 0 if a.seed is None else a.seed, progress=not a.no_progress)
    lawtable.print_synthetic(rows)
    if a.json:
        outputs.write_json(a.json, rows)


def build_parser():
    """The command line of the per-head analysis (`python forget.py`): every per-head flag, the --model
    flags of hf_models and --synthetic (forget's synthetic table)."""
    p = outputs.parser(__doc__.split("\n")[0] + " (python forget.py and python heads.py)")
    p.add_argument("--synthetic", action="store_true", help="synthetic gates instead of the shipped model's traces")
    p.add_argument("--eps", type=float, default=1e-3,
                   help="decay threshold in (0, 1): added to the scan of the verdict and predictions, and the "
                        "threshold of the decay and attention-mass windows")
    p.add_argument("--trials", type=int, default=200_000, help="Monte Carlo trials per gate (--synthetic)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the bootstrap draws (default: fresh, recorded in the JSON; --synthetic: 0)")
    p.add_argument("--checkpoint", default=None,
                   help="FoX checkpoint for the per-head analysis (None: the shipped checkpoints/fox_shakespeare.pt)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--n-seq", type=int, default=32, help="held-out sequences for the per-head analysis")
    p.add_argument("--traces", default=None, help="analyse saved log-gate traces (.npz from save_trace) instead")
    p.add_argument("--save-traces", default=None, help="write the captured log-gate traces to this .npz")
    p.add_argument("--seq-len", type=int, default=2048,
                   help="tokens per sequence; windows longer than half of it are censored")
    p.add_argument("--max-len", type=int, default=None,
                   help="analyse only the first MAX_LEN positions of each sequence (rows MAX_LEN/2 .. MAX_LEN-1), "
                        "e.g. 1024 to stay inside the shipped model's training context")
    p.add_argument("--n-boot", type=int, default=N_BOOT,
                   help="document-bootstrap draws per head calibrating the tests (0: no tests, predictions only)")
    p.add_argument("--json", default=None, help="write the results as JSON to this path (NaN written as null)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    hf_models.add_arguments(p)                     # --model: a gated Hugging Face style checkpoint
    outputs.add_common(p)
    return p


def main(argv=None):
    """`python forget.py ARGV` (forget.main hands over here). Returns the exit code (None for 0)."""
    a = build_parser().parse_args(argv)
    # the verdict's own options apply to the shipped model and saved traces only: never ignored silently
    own = [f for f, on in (("--max-len", a.max_len is not None), ("--n-boot", a.n_boot != N_BOOT)) if on]
    if a.synthetic and own:
        raise outputs.UsageError(f"{' and '.join(own)} apply to the models and --traces, not to --synthetic")
    if hf_models.wants_model(a) and a.max_len is not None:
        raise outputs.UsageError("--max-len applies to the shipped model or --traces; not to --model")
    single = [f for f, on in (("--model", hf_models.wants_model(a)), ("--traces", a.traces),
                              ("--synthetic", a.synthetic)) if on]
    if single and distributed.launched():
        # only the shipped-model capture is split across ranks; the rest would run once per rank
        raise outputs.UsageError(f"{single[0]} runs in one process; under torchrun only the shipped model's "
                                 "capture is split across ranks (run it without torchrun)")
    outputs.positive("--n-boot", a.n_boot, lo=0)
    if a.seed is not None:
        outputs.positive("--seed", a.seed, lo=0)
    if hf_models.wants_model(a):
        clash = [f for f, on in (("--traces", a.traces), ("--synthetic", a.synthetic), ("--checkpoint", a.checkpoint))
                 if on]
        if clash:
            raise outputs.UsageError(f"--model analyses that model; {' and '.join(clash)} would be ignored: drop one")
        from foxwindow import hf_driver  # the --model run: loading, capture and the same table
        return hf_driver.main_hf_model(a)
    check_args(a)
    if a.synthetic:
        return run_synthetic(a)
    if a.max_len is not None:
        outputs.positive("--max-len", a.max_len, lo=32)
        if not a.traces and a.max_len > a.seq_len:
            raise outputs.UsageError(f"--max-len {a.max_len} exceeds --seq-len {a.seq_len}")
    try:
        check(a)
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    # eps -> L, once: the scan plus the user's eps
    eps = sorted(set(EPS_SCAN) | {a.eps}, reverse=True)
    kw = dict(Ls=[forget.threshold(e) for e in eps], mass_L=forget.threshold(a.eps), n_boot=a.n_boot,
              max_len=a.max_len, seed=a.seed)
    if a.traces:
        results, info = analyse_traces(a.traces, progress=not a.no_progress, **kw)
    else:
        results, info = analyse_model(a.checkpoint, n_seq=a.n_seq, seq_len=a.seq_len, device=a.device,
                                      progress=not a.no_progress, save_traces=a.save_traces, **kw)
        if results is None:
            return                              # not rank 0: rank 0 prints and writes
    print_table(results, info)
    if a.json:
        outputs.write_json(a.json, to_json(results, info))


def run():
    """The `forget` console command and `python forget.py` / `python heads.py`: main with one-line errors."""
    return outputs.cli(main)


if __name__ == "__main__":
    sys.exit(run())
