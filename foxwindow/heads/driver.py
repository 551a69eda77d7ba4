"""Per-head verdict and windows of a gated model: the drivers.

The statistics live in verdict.py (the verdict and its tests), dependence.py (V(n), tau(n), the regime,
Geyer's tau) and predict.py (the window at any L from the head's own gates, Kaplan-Meier, the
out-of-sample score); capture and the attention-mass window in models/traces.py; the report in table.py and
the `python forget.py` command line in command.py. Here:

  analyse_layers(traces, eps=)   every head of {layer: (S, T, H) log gates}: verdict.analyse per head, with
                                  independent bootstrap draws per head (spawned from one recorded seed)
  analyse_model(checkpoint, eps=) the shipped FoX model (or any of this package's checkpoints): capture the
                                  gates on held-out text, analyse, and compare decay and attention-mass windows
  analyse_traces(path, eps=)     the same from saved traces (traces.save_trace), any model's gates
  analyse_stream(shapes, capture) analyse_layers on traces that arrive a group of layers at a time (a live model
                                  captured group by group, plan_groups), each group freed after its heads

Thresholds here are L = ln(1/eps) only (the user's eps are converted once in the command).
Verdict states and their calibration: verdict.py's docstring and docs/VERDICT.md.
"""
import math
import os
import signal
import sys
import time
import warnings

import numpy as np
import torch
from scipy import stats
from tqdm import tqdm

from foxwindow import outputs, parallel, safety
from foxwindow.heads import dependence, docsplit, predict, verdict
from foxwindow.heads import laws as headlaws
from foxwindow.heads.verdict import HeadResult  # noqa: F401  (the result type of every driver)
from foxwindow.laws import gates, lawtable
from foxwindow.models import adapters, lstm_gates
from foxwindow.models.fox import load_checkpoint, shipped_checkpoint
from foxwindow.models.traces import (  # noqa: F401  (capture, mass_windows: the drivers' names)
    HeadBlocks,
    LazyTrace,
    capture,
    decay_window_rows,
    decay_window_summary,
    fingerprint,
    load_trace,
    load_traces_checked,
    mass_windows,
    open_traces,
    query_rows,
    run_with_cache,
    save_trace,
)
from foxwindow.training import data, distributed

__all__ = ["DEFAULT_CHECKPOINT", "EPS_SCAN", "N_BOOT", "critical_z", "analyse_head", "decay_window_L",
           "source_labels", "root_seed", "check_n_boot", "stop_unless_finished", "plan_groups", "analyse_layers",
           "analyse_stream", "analyse_model", "analyse_traces"]

DEFAULT_CHECKPOINT = shipped_checkpoint()          # any cwd, installed or not
EPS_SCAN = lawtable.EPS_SCAN
N_BOOT = verdict.N_BOOT


def critical_z(n_heads, n_seq):
    """The two-sided Student-t critical value (n_seq - 1 degrees of freedom) at the verdict's per-test level
    over a model of n_heads heads, verdict.ALPHA / (2 n_heads): the level a z-score would need."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1; got {n_heads!r}")
    if n_seq < 2:
        raise ValueError(f"n_seq must be >= 2; got {n_seq!r}")
    return float(stats.t.isf(verdict.ALPHA / (4 * n_heads), n_seq - 1))


def analyse_head(lg, *, eps=None, L=None, z=None, layer=0, head=0, n_heads=1, n_boot=N_BOOT, seed=None,
                 context=None, pmf_L=math.log(1e3), laws=True):
    """The verdict and predictions of one head from log-gate traces lg (S, T): S >= 3 sequences of T >= S
    tokens, numpy or torch, any float dtype, values <= 0. Returns verdict.HeadResult.

    eps=: thresholds in (0, 1) (a number or a non-empty sequence; converted here to L = ln 1/eps), or L=: the
      thresholds L > 0 themselves (keywords, at most one of the two; neither: the eps scan EPS_SCAN).
    n_heads: heads in the model (int >= 1): the family of tests is 2 n_heads (verdict.py).
    z: for callers of the earlier API, a critical value that stands for a family: the n_heads whose
      critical_z(n_heads, S) is nearest z (a finite number > 0; None: n_heads as given).
    n_boot, seed, context: verdict.analyse (seed None: fresh draws; an int reproduces a run).
    laws: also every law at every L out of sample (heads/laws.py: evaluate, into r.laws; pmf_L: the L of its
      pmf block); the states need the whole model: analyse_layers sets them (set_states).
    """
    gates.levels(eps, L, default=EPS_SCAN, distinct=True)          # the thresholds' errors and warning, first
    return _analyse_x(increments(lg), eps=eps, L=L, z=z, layer=layer, head=head, n_heads=n_heads, n_boot=n_boot,
                      seed=seed, context=context, pmf_L=pmf_L, laws=laws)


def increments(lg):
    """X = -log g of one head's log gates lg (numpy or torch, any float dtype, any layout) as a C-contiguous
    float64 array, in one conversion, validated once (gates.increments_from_log_gates' checks and messages)."""
    a = lg.detach().cpu().numpy() if isinstance(lg, torch.Tensor) else np.asarray(lg)
    if not np.issubdtype(a.dtype, np.floating) or a.size == 0:
        return np.ascontiguousarray(gates.increments_from_log_gates(np.asarray(a, dtype=np.float64)))
    x = np.negative(a, dtype=np.float64)
    gates.check_log_gates(-float(x.min()), -float(x.max()), in_range=True)    # max and min of lg (NaN propagates)
    return x


def _check_shape(x):
    """The shape checks of a head's increments x, before any work on them (ValueError naming the problem)."""
    if x.ndim != 2 or x.shape[0] < 3:
        raise ValueError(f"lg: need traces (S, T) with S >= 3 sequences for jackknife errors; got {x.shape}")
    S, T = x.shape
    if S > T:
        raise ValueError(f"lg: shape {x.shape} reads as {S} sequences x {T} tokens; expected (S sequences, "
                         "T tokens) with T >= S: is the array transposed (T, S)?")


def check_n_boot(n_boot, S=None, what="n_boot"):
    """ValueError unless n_boot (the document bootstrap's draws) is an int >= 0; with S (the sequences), also where
    its weights over S documents (int64 draws and their float64 copy) and eight statistics a draw would take more
    memory than is available. what: the argument's name in the message."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"{what} must be an int >= 0; got {n_boot!r}")
    if S is not None:
        safety.need_memory(int(n_boot) * (16 * int(S) + 64),
                           f"{what} {n_boot}: the bootstrap draws over {S} sequences")


def stop_unless_finished(info):
    """A run stopped by Ctrl-C or SIGTERM before any head finished has nothing to print or save: it ends as an
    interrupted command does (KeyboardInterrupt, safety.Stopped), so that no empty table or JSON replaces an
    earlier file. A run with finished heads, or stopped by the time bound (its record says that the bound was
    reached): nothing."""
    p = (info or {}).get("partial")
    if not p or p.get("heads_done"):
        return
    if p["reason"] == "Ctrl-C":
        raise KeyboardInterrupt
    if p["reason"] == "SIGTERM":
        raise safety.Stopped(signal.SIGTERM)


def _analyse_x(x, *, eps=None, L=None, z=None, layer=0, head=0, n_heads=1, n_boot=N_BOOT, seed=None,
               context=None, pmf_L=math.log(1e3), laws=True, parts=None):
    """analyse_head on increments x (S, T) float64 already converted and validated (increments). parts: its
    per-document statistics at these thresholds when formed already (docsplit.doc_parts; None: formed here)."""
    _check_shape(x)
    S, T = x.shape
    eps_list = None if eps is None else [float(e) for e in np.ravel(np.asarray(eps, dtype=object))]
    with warnings.catch_warnings():             # every caller converted the thresholds first and warned there
        warnings.simplefilter("ignore", gates.ThresholdWarning)
        Ls = gates.levels(eps, L, default=EPS_SCAN, distinct=True)
    if L is None and eps is None:
        eps_list = list(EPS_SCAN)
    critical_z(n_heads, S)                                                          # validates n_heads
    if z is not None:
        if isinstance(z, bool) or not isinstance(z, (int, float, np.floating)) or not (math.isfinite(z) and z > 0):
            raise ValueError(f"z must be a finite number > 0 (or None for the default); got {z!r}")
        n_heads = max(1, int(round(verdict.ALPHA / (4 * stats.t.sf(z, S - 1)))))
    check_n_boot(n_boot)
    ss = verdict.seed_sequence(seed)
    if parts is None:
        windows = predict.window_rows(x, Ls, T // 2)               # the analysed rows' windows, once for both
        sums = dependence.DocSums(x)                               # lag sums and V(n)'s block sums, once for both
        bs = None                                                  # the lead law's block sums: formed by the laws
    else:
        windows, sums, bs = parts.windows, parts.sums, parts.block_sums
    if laws == "only":                                             # the per-law half of a split head (_part_job)
        return _laws_x(x, Ls, ss, verdict.recorded_eps(eps_list, Ls), pmf_L, windows, sums, bs)
    r = verdict.analyse(x, Ls, n_heads=n_heads, n_boot=int(n_boot), seed=ss, context=context, layer=layer,
                        head=head, eps_list=eps_list, windows=windows, sums=sums)
    part = _laws_x(x, Ls, ss, r.eps_list, pmf_L, windows, sums, bs) if laws else None
    if part is not None:
        r.laws = part
    return r


def _laws_x(x, Ls, ss, eps_list, pmf_L, windows, sums, block_sums=None):
    """A head's per-law evaluation (its own random stream, child 29 of the head's seed), or None below
    verdict.MIN_DOCS documents."""
    if x.shape[0] < verdict.MIN_DOCS:
        return None
    rng = np.random.default_rng(np.random.SeedSequence(ss.entropy, spawn_key=tuple(ss.spawn_key) + (29,)))
    return headlaws.evaluate(x, Ls, rng, eps_list, pmf_L, windows=windows, sums=sums, block_sums=block_sums)


def _rows(T):
    """Query rows of the attention-mass and decay windows (traces.query_rows)."""
    return query_rows(T)


def _decay_window(r, lg, eps, rows):
    """Mean decay window of `rows` of traces lg (S, T) at eps into r (traces.decay_window_summary)."""
    r.mass_eps = float(eps)
    r.decay_window_mean, r.decay_window_censored = decay_window_summary(lg, gates.threshold(eps), rows)


def decay_window_L(r, lg, L, rows):
    """Mean decay window of `rows` of traces lg (S, T) at threshold L into r (traces.decay_window_summary)."""
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
    if seed is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be None or an integer >= 0; got {seed!r}")
    return int(seed)


def set_states(results, alpha=verdict.ALPHA):
    """The laws' states over a model's heads (heads/laws.py: assign_states, Holm over the model's claimed
    and measured cells) and each head's summary. Returns the family's dict (m, alpha_test, t_crit, df) or None."""
    done = [r for r in results if r.laws]
    if not done:
        return None
    df = min(r.n_seq for r in done) // 2 - 1
    fam = headlaws.assign_states([r.laws["at"] for r in done], df, alpha)
    for r in done:
        r.summary = headlaws.summary(r.laws["at"])
        r.laws["family"] = fam
    return fam


# the cost of one head (CPU seconds, one process): COST_HEAD[0] + COST_HEAD[1] S + COST_HEAD[2] S T, S documents
# of T tokens; a least-squares fit of relative errors to bench_scale.py's head grid extended to 4096 documents (14
# sizes from 32 x 2048 to 4096 x 4096, in-process, the compiled loops built before the timing, one BLAS thread):
# within 25% of every size of that run (0.21 CPU-s at 32 x 2048, 0.72 at 128 x 8192, 3.5 at 256 x 16384, 4.8 at
# 2048 x 2048, 18.4 at 4096 x 4096); an S^2 term fitted there came out at 3e-8 (nothing)
COST_HEAD = (0.11, 1.36e-3, 5.9e-7)
ESTIMATE_FROM_S = 30.0                       # print the estimate when the analysis would take longer than this


def head_cost(S, T):
    """Estimated CPU seconds of one head's analysis at S documents x T tokens (COST_HEAD)."""
    return COST_HEAD[0] + COST_HEAD[1] * S + COST_HEAD[2] * S * T


def estimate(n_heads, S, T, workers):
    """(CPU seconds, wall seconds on `workers` processes) of analysing n_heads heads of S x T."""
    cpu = n_heads * head_cost(S, T)
    return cpu, cpu / max(1, min(workers, n_heads))


_RUN = {}                                    # what the head jobs read (set before the workers fork)


def _head_job(i, laws=True):
    """Head i of the run (_RUN): its HeadResult; laws False: without the per-law evaluation, "only": that
    evaluation alone (its dict, or None), the two halves of a split head (_part_job)."""
    run = _RUN
    l, h = run["index"][i]
    x, parts = run["pre"][i] if i in run.get("pre", {}) else (increments(run["get"](l, h)), None)  # (S, T) float64
    r = _analyse_x(x, L=run["Ls"], layer=l, head=h, n_heads=run["n_heads"], n_boot=run["n_boot"],
                   seed=run["children"][i], context=run["context"], pmf_L=run["pmf_L"], laws=laws, parts=parts)
    if laws == "only":
        return r
    r.seed = run["seed"]
    r.layer_name = run["layer_names"][l]
    if run["mass_L"] is not None:                                  # the decay window of the analysed rows only
        r.mass_eps = math.exp(-run["mass_L"])
        r.decay_window_mean, r.decay_window_censored = decay_window_rows(x, run["mass_L"], run["rows"])
    return r


def _part_job(k):
    """Half k % 2 of head k // 2 of a split group (analyse_stream): 0 the verdict, predictions and decay window, 1 the
    per-law evaluation; each half the numbers the whole head's job gives it."""
    return _head_job(k // 2, laws="only" if k % 2 else False)


# SPLIT: too few heads for the processes asked or the ranks: each head as two jobs (analyse_stream), for heads of
# SPLIT_MIN increments (S T) or more (below, the fork costs more than it saves: 0.93x at 32 x 2048). Off by
# default: since the per-head work the per-law half is about 85% of a head (1.94 of 2.28 CPU-s at 256 x 16384, the
# lag sums and V(n) that the verdict shares formed again), so two halves give at most 1.18x before the fork, and
# measured they gave less than one process (one head of 256 x 16384, 2 workers, fresh processes alternated, three
# rounds: `forget.py --traces` 6.9-8.6 s of wall against 5.5-7.3 s; the analysis alone 2.75-3.77 s against
# 2.34-2.53 s; at 1024 x 4096 3.08-3.28 s against 3.08-4.36 s)
SPLIT = False
SPLIT_MIN = 1 << 20
WHOLE = 2               # in analyse_stream's done list: a whole head


def _split(S, T):
    """Whether heads of S x T are split into two jobs where too few are left for the workers or ranks."""
    return SPLIT and S * T >= SPLIT_MIN


# DOCS: a lone head of many documents (DOCS_MIN_S or more, DOCS_MIN increments or more) on more than one process has
# its per-document statistics formed over them (docsplit.doc_parts), then its verdict and its per-law evaluation as
# two jobs. On the 2-core machine (one head, alternated with one process, three rounds each): 2048 x 2048 wall
# 2.97-3.18 s against 3.71-3.76 s, 1024 x 4096 2.38-2.58 against 2.66-2.87; with fewer, longer documents nothing is
# won (512 x 8192 2.33-2.57 against 2.28; 256 x 16384 2.38-2.48 against 2.24: the per-law job is twice the
# verdict's there, and the per-document work ran 1.1x faster on two processes than on one)
DOCS = True
DOCS_MIN_S = 1024
DOCS_MIN = 1 << 22


def _by_docs(S, T):
    """Whether a lone head of S x T on more than one process has its per-document statistics formed over them."""
    return DOCS and S >= DOCS_MIN_S and S * T >= DOCS_MIN


def _checked_head(i):
    """Head i of the run (_RUN) as increments, with the head's own checks, before any work on its documents."""
    l, h = _RUN["index"][i]
    x = increments(_RUN["get"](l, h))
    _check_shape(x)
    return x


def _lone_parts(i, workers, deadline):
    """{i: (increments, docsplit.DocParts)} of head i of the run (_RUN), formed on `workers` processes, for the two
    jobs of that head (_head_job reads them). A stop while they are formed finishes no head."""
    x = _checked_head(i)
    try:
        return {i: (x, docsplit.doc_parts(x, _RUN["Ls"], workers, deadline))}
    except parallel.Stopped as exc:
        raise parallel.Stopped({}, exc.reason) from None


def _raise(err):
    if err is not None:
        raise err


def _rank_parts(i, workers, deadline, flag, rank, world):
    """{i: (increments, docsplit.DocParts)} on rank 0 ({} on the others) of head i of the run (_RUN): each rank
    forms its block of the documents on `workers` processes, and rank 0 gathers them. Signals only set `flag`
    here (deferred_stops): every rank finishes its block, then all agree whether to stop (a time bound or a
    signal on any rank stops every rank, before the gather) and raise parallel.Stopped, finishing no head."""
    x = _checked_head(i)                               # (every rank: the same head, the same error)
    bl = docsplit.blocks(x.shape[0], world)
    reason, rows, failed = None, None, None
    try:
        if rank < len(bl):
            rows = docsplit.doc_rows(x, _RUN["Ls"], bl[rank], workers, deadline)
    except parallel.Stopped as exc:
        reason = exc.reason
    except Exception as exc:                            # raised after the agreement below: the others stop there
        failed, reason = exc, "a rank failed"
    if distributed.any_true(reason is not None or bool(flag)):
        _raise(failed)
        raise parallel.Stopped({}, reason or flag.reason or "another rank stopped")
    got = distributed.gather_lists([rows])
    if rank != 0:
        return {}
    got = [g for g in got if g is not None]
    rows = {k: np.concatenate([g[k] for g in got]) for k in got[0]}
    return {i: (x, docsplit.assemble(x, _RUN["Ls"], rows))}


def _join_halves(done):
    """{head index: HeadResult} from analyse_stream's (head index, half, result) entries: whole heads as they are,
    a split head's two halves joined (its verdict's HeadResult with the per-law evaluation as its laws); a head
    with one half done is left out."""
    whole, halves = {}, {}
    for i, half, r in done:
        if half == WHOLE:
            whole[i] = r
        else:
            halves.setdefault(i, {})[half] = r
    for i, p in halves.items():
        if len(p) == 2:
            whole[i] = p[0]
            if p[1] is not None:
                whole[i].laws = p[1]
    return whole


def _layer_getter(traces, names):
    """get(l, h) -> (S, T) log gates of layer names[l], head h, from {name: (S, T, H)} arrays, tensors or lazy
    layers (those of the group at hand); a file's layer (traces.LazyTrace) through traces.HeadBlocks (a block of
    consecutive heads a read, kept for the block's next head)."""
    blocks = HeadBlocks()

    def get(l, h):
        tr = traces[names[l]]
        if isinstance(tr, torch.Tensor):
            return tr[:, :, h].cpu().numpy()
        base, n = (tr.tr, tr.n) if isinstance(tr, _Cut) else (tr, None)      # --max-len: the first n positions
        if not isinstance(base, LazyTrace):
            return tr[:, :, h]
        x = blocks.head(base, h)
        return x if n is None else x[:, :n]
    return get


def _block(n, rank, world):
    """This rank's contiguous share [a, b) of n items (shares in rank order, sizes within one; may be empty)."""
    q, extra = divmod(n, world)
    a = rank * q + min(rank, extra)
    return a, a + q + (1 if rank < extra else 0)


def plan_groups(shapes, budget, extra=None):
    """Consecutive groups of the layers {name: (S, T, H)} (in order) whose float32 traces (4 S T H bytes a layer,
    plus extra[name] bytes) fit in `budget` bytes, at least one layer a group; budget None: one group of every
    layer. Returns [[name, ...], ...]: the capture passes of analyse_stream."""
    names = list(shapes)
    if budget is None:
        return [names]
    groups, cur, used = [], [], 0
    for n in names:
        nb = 4 * math.prod(shapes[n]) + int((extra or {}).get(n, 0))
        if cur and used + nb > budget:
            groups.append(cur)
            cur, used = [], 0
        cur.append(n)
        used += nb
    return groups + [cur]


def analyse_layers(traces, *, eps=None, L=None, n_boot=N_BOOT, seed=None, progress=False, context=None,
                   pmf_L=math.log(1e3), workers=1, mass_L=None, rows=None, max_minutes=None):
    """The verdict for every head of traces {layer name: (S, T, H) array or tensor of log-gates, or a lazy layer
    of traces.open_traces} at thresholds eps= (in (0, 1)) or L= (L = ln(1/eps) > 0), keywords, at most one
    (neither: the eps scan EPS_SCAN), the family Bonferroni over all heads. Each head draws from
    its own child of SeedSequence(seed) (seed None: fresh), so the results do not depend on `workers`
    (processes; None: the available processors). mass_L: also each head's decay window at that L on query
    `rows` (default traces.query_rows(T)). pmf_L: the L of the laws' pmf block. The laws' states over the
    model (set_states) are set on the heads analysed (on a stopped run: over the finished ones). max_minutes:
    refuse (ValueError) a run estimated to take longer, and stop one that runs past it. Returns ([HeadResult],
    the int seed used); a run stopped by Ctrl-C,
    SIGTERM or max_minutes raises parallel.Stopped whose `results` are the finished heads in order and
    `seed` the seed."""
    return analyse_stream({n: tuple(t.shape) for n, t in traces.items()},
                          lambda names, flag: {n: traces[n] for n in names}, eps=eps, L=L, n_boot=n_boot, seed=seed,
                          progress=progress, context=context, pmf_L=pmf_L, workers=workers, mass_L=mass_L, rows=rows,
                          max_minutes=max_minutes)


def analyse_stream(shapes, capture, *, groups=None, eps=None, L=None, n_boot=N_BOOT, seed=None, progress=False,
                   context=None, pmf_L=math.log(1e3), workers=1, mass_L=None, rows=None, max_minutes=None):
    """analyse_layers for traces that arrive a group of layers at a time, each freed once its heads are done: the
    peak memory holds one group's traces, not every layer's. The results equal analyse_layers' on all the traces
    at once (every head keeps its own child seed and the family of the whole model).

    shapes: {layer name: (S, T, H)} of every layer, in order, known before any trace (the estimate, the family,
      the seeds need them). groups: lists of consecutive layer names covering `shapes` in order (plan_groups;
      None: one group of every layer). capture(names, flag) -> {name: (S, T, H) traces} of one group, called
      when the previous group's heads are done; flag: a parallel.StopFlag set by Ctrl-C or SIGTERM during the
      capture, which the capture checks where it can stop (between its batches), returning None to stop the
      run (under torchrun after every rank agreed, distributed.any_true, before its collectives). The other
      arguments: analyse_layers'. Under torchrun every rank walks the same groups, each analysing a
      contiguous block of every group's heads; rank 0 gathers them in head order (the others return
      (None, seed)). Returns ([HeadResult], seed); a stopped run raises parallel.Stopped as analyse_layers."""
    Ls = gates.levels(eps, L, default=EPS_SCAN, distinct=True)
    seed = root_seed(seed)
    check_n_boot(n_boot)
    names = list(shapes)
    groups = [names] if groups is None else [list(g) for g in groups]
    if [n for g in groups for n in g] != names:
        raise ValueError("groups must list every layer of shapes once, in order")
    index = [(l, h) for l, n in enumerate(names) for h in range(shapes[n][2])]
    n_heads = len(index)
    S, T = shapes[names[0]][:2]
    # under torchrun each rank analyses a contiguous block of every group's heads (its own processes)
    world = distributed.world_size() if distributed.launched() else 1
    rank = distributed.rank() if world > 1 else 0
    if world > 1:
        # one root seed for every rank (rank 0's: the one recorded): a fresh seed drawn on each rank would give
        # the other ranks' heads streams that the recorded seed does not reproduce
        seed = distributed.broadcast(seed)
    # a group with fewer heads than ranks, or a rank's share of fewer heads than half its processes (one huge head on
    # two workers): each head as two jobs, its verdict and its per-law evaluation (_part_job's jobs 2 i, 2 i + 1 of
    # head i), joined into the HeadResult one job gives (_join_halves): the same numbers in less wall time
    asked = parallel.resolve_workers(workers, 1 << 30)                # the processes asked (None: the processors)
    # one huge head (a rank's share of one head and more than one process, or a group of one head and more than one
    # rank): its per-document statistics formed on blocks of documents over the processes (docs "workers") or over
    # the ranks, each with its processes, gathered on rank 0 (docs "ranks"; docsplit), then its verdict and its
    # per-law evaluation as two jobs that read them, joined as a split head's halves (the same numbers)
    blocks, pos = [], 0
    for g in groups:
        n_g = sum(shapes[n][2] for n in g)
        a, b = _block(n_g, rank, world)
        halves = _split(S, T) and (n_g < world or 1 <= b - a <= asked // 2)
        docs = None if halves or not _by_docs(S, T) else \
            "ranks" if n_g == 1 and world > 1 else "workers" if b - a == 1 and asked >= 2 else None
        if halves:
            a, b = _block(2 * n_g, rank, world) if n_g < world else (2 * a, 2 * b)
        elif docs == "ranks":
            a, b = (0, 2) if rank == 0 else (0, 0)                  # rank 0 runs the head's two jobs
        elif docs:
            a, b = 2 * a, 2 * b
        off = 2 * pos if halves or docs else pos
        blocks.append((off + a, off + b, halves or docs is not None, docs))
        pos += n_g
    mine = sum(b - a for a, b, _, _ in blocks)                                      # this rank's jobs
    workers = parallel.resolve_workers(workers, max(1, max(b - a for a, b, _, _ in blocks)))
    cpu, wall = estimate(n_heads, S, T, workers * world)
    if max_minutes is not None and wall > 60 * max_minutes:
        raise ValueError(f"the analysis of {n_heads} heads x {S} x {T} is estimated at {wall / 60:.1f} min on "
                         f"{workers} worker(s), past --max-minutes {max_minutes:g}: give more minutes or workers, "
                         "or fewer tokens (--max-len; from a model also fewer sequences, --n-seq)")
    if progress and wall > ESTIMATE_FROM_S and distributed.is_main():
        parallel.say(f"analysing {n_heads} heads x {S} sequences x {T} tokens on {workers} worker(s)"
                     + (f" x {world} ranks" if world > 1 else "") + ": estimated "
                     f"{cpu / 60:.1f} CPU-min, about {wall / 60:.1f} min wall (more on a loaded machine)"
                     + (f", in {len(groups)} capture passes" if len(groups) > 1 else ""))
    # a large run compiles the rows' windows loop and the lattice loop once here, before the workers fork (they
    # inherit them); the same numbers as the numpy paths
    # (a head's positions counted once: a split head's two jobs share its rows)
    headlaws.compile_fast_paths(sum((b - a + 1) // 2 if h else b - a for a, b, h, _ in blocks) * S * T * len(Ls))
    _RUN.clear()
    _RUN.update(index=index, Ls=Ls, n_heads=n_heads, n_boot=n_boot, seed=seed,
                children=np.random.SeedSequence(seed).spawn(n_heads), context=context, mass_L=mass_L, pmf_L=pmf_L,
                layer_names=[f"blocks.{n}" if isinstance(n, (int, np.integer)) else str(n) for n in names],
                rows=np.asarray(query_rows(T) if rows is None else rows, dtype=np.int64))
    halved = any(h for _, _, h, _ in blocks)                # a head as two jobs: the bar counts its halves
    bar = tqdm(total=mine, desc=("head halves" if halved else "heads") + (f" (rank {rank})" if world > 1 else ""),
               disable=not progress, file=sys.stderr)
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    stop, done = None, []              # done: (head index, half, result) of this rank; half WHOLE: a HeadResult
    failed = None                      # under torchrun: this rank's error, raised once every rank has heard of it
    try:
        with parallel.deferred_stops() as flag:
            for (a, b, halves, docs), g in zip(blocks, groups):
                if stop is None and deadline is not None and time.monotonic() > deadline:
                    stop = parallel.Stopped({}, "the time bound (--max-minutes) was reached")
                # every rank agrees to go on before the group's capture (whose collectives need them all)
                if distributed.any_true(stop is not None or flag) if world > 1 else (stop is not None or flag):
                    break
                tr = capture(g, flag)
                if tr is None:
                    break
                _RUN["get"] = _layer_getter(tr, names)

                def tick(i, r, a=a, halves=halves):
                    j = (a + i) // 2 if halves else a + i
                    bar.set_postfix_str(f"{safety.shown(str(names[index[j][0]]))}[{index[j][1]}]", refresh=False)
                    bar.update()

                def entry(i, r, a=a, halves=halves):       # done's entry of job i of this group
                    return ((a + i) // 2, (a + i) % 2, r) if halves else (a + i, WHOLE, r)
                try:
                    if docs == "ranks":                     # every rank (a stop agreed on by all, as a capture's)
                        _RUN["pre"] = _rank_parts(a // 2, asked, deadline, flag, rank, world)
                    with parallel.stop_signals():
                        if docs == "workers":
                            _RUN["pre"] = _lone_parts(a // 2, asked, deadline)
                        w = parallel.resolve_workers(workers, max(1, b - a))
                        res = parallel.run_jobs((lambda k, a=a: _part_job(a + k)) if halves else
                                                (lambda i, a=a: _head_job(a + i)), b - a, w, tick, deadline)
                    done.extend(entry(i, r) for i, r in enumerate(res))
                except parallel.Stopped as exc:
                    stop = exc
                    done.extend(entry(i, exc.done[i]) for i in sorted(exc.done))
                except Exception as exc:
                    if world == 1:
                        raise
                    # the other ranks meet this one at the next agreement (they stop there) and then hear of it
                    failed, stop = exc, parallel.Stopped({}, "a rank failed")
                finally:
                    _RUN.pop("get", None)
                    _RUN.pop("pre", None)
                    del tr
            if stop is None and flag:
                stop = parallel.Stopped({}, flag.reason)
    finally:
        bar.close()
        _RUN.clear()
    if world > 1:
        # a Ctrl-C or SIGTERM that reaches this rank while it waits in these collectives (torchrun signals the ranks
        # one after the other) only sets a flag: raised between two of them, it would leave the others waiting
        with parallel.deferred_stops() as late:
            # an error in one rank's heads (memory on one machine, say): every rank raises, none waits for it
            distributed.together(lambda: _raise(failed), "failed in the analysis")
            done = distributed.gather_lists(done)
            why = distributed.gather_lists([None if stop is None else stop.reason])
        if not distributed.is_main():
            return None, seed
        if stop is None and any(why):                          # another rank was stopped
            stop = parallel.Stopped({}, next(w for w in why if w))
        if stop is None and late:                              # stopped once every head was in: saved as such
            stop = parallel.Stopped({}, late.reason)
    whole = _join_halves(done)
    if world > 1:
        if stop is None and len(whole) < n_heads:
            stop = parallel.Stopped({}, "another rank stopped")
    results = [whole[i] for i in sorted(whole)]
    set_states(results)
    if stop is not None:
        stop.results, stop.seed, stop.n_heads = results, seed, n_heads
        raise stop
    return results, seed


def _mass_level(mass_eps, mass_L):
    """The L of the decay and attention-mass windows: mass_eps= or mass_L= (at most one; neither: eps = 1e-3)."""
    return gates.level(1e-3, None) if mass_eps is None and mass_L is None else gates.level(mass_eps, mass_L)


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


# the memory a live model's traces may take before they are analysed (GiB): layers are captured and analysed in groups
# that fit (plan_groups), each group one forward pass over the held-out text up to its last layer
TRACE_GIB = 2.0


def analyse_model(checkpoint=None, *, eps=None, L=None, n_seq=32, seq_len=2048, mass_eps=None, mass_L=None,
                  device="cpu", progress=True, save_traces=None, n_boot=N_BOOT, max_len=None, seed=None,
                  workers=1, max_minutes=None, trace_gib=TRACE_GIB):
    """Run the per-head analysis on a checkpoint's held-out text. Returns (results, info).
    eps= or L=: the thresholds (keywords, at most one; neither: the eps scan's). mass_eps= or mass_L=: the threshold
    of the decay and attention-mass windows (at most one; neither: eps = 1e-3).
    save_traces: optional .npz path for the captured log-gate traces and their metadata (whole sequences).
    n_boot, seed: analyse_layers. max_len: analyse only each sequence's first max_len positions (rows
    max_len/2 .. max_len - 1), e.g. the model's training context. workers, max_minutes: analyse_layers (a
    stopped run returns its finished heads, info["partial"] saying so).
    trace_gib: the memory (GiB) the captured traces and attention inputs of a group of layers may take: the
    layers are captured and analysed group by group (analyse_stream), each group one forward pass up to its
    last layer, the same results as one pass; None, or save_traces: every layer in one pass.
    Under torchrun each rank captures a contiguous block of the sequences, every rank gets them all and
    analyses a block of the heads, and rank 0 gathers the heads and writes; the other ranks return (None, None)."""
    t0 = time.perf_counter()
    Ls = gates.levels(eps, L, default=EPS_SCAN, distinct=True)
    mass_L = _mass_level(mass_eps, mass_L)
    path = checkpoint or DEFAULT_CHECKPOINT
    if save_traces and distributed.is_main():   # before the capture, not after it (rank 0 writes it)
        outputs.check_writable(save_traces, force=True, what="save_traces")
    env = distributed.setup(device)             # under torchrun each rank captures a block of the sequences
    device = str(env.device) if distributed.launched() else device
    model, meta = load_checkpoint(path, device=device)
    H, n_layers, d = model.cfg.n_heads, len(model.blocks), model.cfg.d_model
    if save_traces and distributed.is_main():   # float32 (S, T, H) per layer: its room checked before the capture
        outputs.need_space(save_traces, 4 * n_seq * seq_len * sum(b.attn.num_heads for b in model.blocks),
                           "--save-traces")
    tokens, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    same_model_on_every_rank(model, tokens, f"--checkpoint {_shown_path(path)}")
    T = seq_len if max_len is None else max_len
    if not 32 <= T <= seq_len:
        raise ValueError(f"--max-len must lie in [32, {seq_len}] (the traces' length); got {max_len}")
    rows = query_rows(T)
    shapes = {l: (n_seq, T, H) for l in range(n_layers)}
    # a layer's whole traces (S, seq_len, H) and, on rank 0, its attention inputs (S, seq_len, d) while captured
    extra = {l: 4 * n_seq * (seq_len * (H + d) - T * H) for l in range(n_layers)}
    groups = plan_groups(shapes, None if save_traces or trace_gib is None else trace_gib * 2 ** 30, extra)
    # capture a few sequences at a time (rows are independent in eval mode): same traces, a progress bar
    # on the longest step, and less peak memory
    per = 4
    a, b = distributed.shard_range(n_seq)       # this rank's block; [0, n_seq) in one process
    show = progress and distributed.is_main()
    context = getattr(model.cfg, "context", None)
    shown = _shown_path(path)
    threads = torch.get_num_threads()
    mass, t_capture = {}, [0.0]                 # mass: {layer: (S, R, H) attention-mass windows} on rank 0

    def capture_group(layers, flag):
        t = time.perf_counter()
        traces, inputs = {}, {}
        # one CPU thread: the shipped model's operations are too small for a second thread to pay off, and a
        # waiting thread spins (measured on the 2-core machine under load, 8 sequences: 2.4 s of CPU with one
        # thread against 12.4 s with two, and 6.8 s against 35.9 s of wall time)
        if str(device) == "cpu":
            torch.set_num_threads(1)
        def forward():                          # this rank's block of the sequences
            for s0 in tqdm(range(a, b, per), desc="capture" + (f" {layers[0]}-{layers[-1]}" if len(groups) > 1 else ""),
                           unit=f"x{per} seq", disable=not show, file=sys.stderr):
                if flag:
                    break                       # a stop: every rank agrees below
                tr, inp = capture(model, tokens[s0:min(s0 + per, b)].to(device), layers)
                for l in tr:
                    traces.setdefault(l, []).append(tr[l])
                    inputs.setdefault(l, []).append(inp[l])
        try:
            # an error on one rank (memory on one machine) stops every rank with its message, none left waiting
            distributed.together(forward, "failed in the capture")
        finally:
            torch.set_num_threads(threads)
        if distributed.any_true(flag):
            return None
        traces = {l: torch.cat(v, 0) for l, v in traces.items()}                     # (S_rank, T, H) per layer
        inputs = {l: torch.cat(v, 0) for l, v in inputs.items()}                     # (S_rank, T, d) per layer
        # every rank's block in rank order, (S, T, H) on every rank (each analyses a block of the heads) and
        # (S, T, d) on rank 0 (the attention-mass windows), as one process captures them
        traces, inputs = distributed.gather_traces(traces, to_all=True), distributed.gather_traces(inputs)

        def on_rank_0():                        # the traces written and the attention-mass windows, rank 0's work
            if save_traces and distributed.is_main():
                save_trace(save_traces, {f"blocks.{l}.attn.hook_log_fgate": t for l, t in traces.items()},
                           dict(model=meta.get("name", shown), checkpoint=shown, spans=spans, L=list(Ls),
                                heads=model.cfg.n_heads, seq_len=seq_len, context=context),
                           force=True)                      # save_traces: checked (and --force) before the work
            if distributed.is_main() and not model.cfg.fixed_gate:
                # causal: rows < T see the same attention in the first T tokens
                torch.set_num_threads(1)            # as for the capture
                try:
                    # a few sequences at a time (each sequence's windows are its own): the (s, H, R, T) float64
                    # logits of `per` sequences at once, not of all S
                    for l in layers:
                        x = inputs.pop(l)
                        mass[l] = torch.cat([mass_windows(model.blocks[l].attn, x[s0:s0 + per, :T].cpu(), mass_L,
                                                          rows) for s0 in range(0, x.shape[0], per)], 0)  # (S, R, H)
                        del x
                finally:
                    torch.set_num_threads(threads)
        distributed.together(on_rank_0, "failed in the capture")
        traces = _truncate(traces, max_len)
        t_capture[0] += time.perf_counter() - t
        return traces

    results, seed, partial = analyse_or_partial(shapes, Ls, n_boot, seed, progress, context, workers, mass_L,
                                                 rows.numpy(), max_minutes, capture=capture_group, groups=groups)
    if not distributed.is_main():
        return None, None                       # rank 0 writes
    for r in results:                           # a stopped run: the heads finished
        mw = mass.get(r.layer)
        if mw is not None:
            r.mass_window_mean = float(mw[:, :, r.head].double().mean())
            r.mass_window_censored = float((mw[:, :, r.head] == rows[None, :]).double().mean())
    info = dict(checkpoint=shown, model=meta.get("name", "fox_shakespeare"), n_seq=n_seq, seq_len=seq_len,
                analysed_len=T, spans=spans, strata=source_labels(spans), n_boot=n_boot, seed=seed,
                alpha=verdict.ALPHA, alpha_test=verdict.ALPHA / (2 * (partial or {}).get("heads_total", len(results))),
                capture_s=t_capture[0],
                total_s=time.perf_counter() - t0, val_bpc=meta.get("val_bpc"), context=context,
                rows=_rows_note(T, context))
    if partial:
        info["partial"] = partial
    return results, info


class _Cut:
    """The first n positions of a lazy (S, T, H) trace, read head by head (indexed [:, :, h])."""

    def __init__(self, tr, n):
        self.tr, self.n, self.shape = tr, n, (tr.shape[0], n, tr.shape[2])

    def __getitem__(self, key):
        return self.tr[:, :self.n, key[2]]


def analyse_or_partial(traces, Ls, n_boot, seed, progress, context, workers, mass_L, rows, max_minutes,
                       pmf_L=None, capture=None, groups=None):
    """analyse_layers, with a stopped run's finished heads: (results, seed, None or the partial record).
    pmf_L None: mass_L (the eps of the decay windows), else ln(1e3). capture, groups: analyse_stream's, traces
    then the shapes {name: (S, T, H)} of every layer."""
    pmf_L = pmf_L if pmf_L is not None else (mass_L if mass_L is not None else math.log(1e3))
    kw = dict(L=Ls, n_boot=n_boot, seed=seed, progress=progress, context=context, pmf_L=pmf_L, workers=workers,
              mass_L=mass_L, rows=rows, max_minutes=max_minutes)
    try:
        if capture is None:
            results, seed = analyse_layers(traces, **kw)
        else:
            results, seed = analyse_stream(traces, capture, groups=groups, **kw)
        return results, seed, None
    except parallel.Stopped as stop:
        return stop.results, stop.seed, dict(reason=stop.reason, heads_done=len(stop.results),
                                             heads_total=stop.n_heads)


def same_model_on_every_rank(model, tokens, what):
    """Under torchrun each rank loads the model and the held-out text from its own machine's files and captures
    a block of the sequences: where a rank's weights (distributed.tensor_digest of its state_dict) or held-out
    tokens differ from rank 0's, every rank raises the same ValueError naming them, before the capture (the
    traces would mix two models or two texts). One process: nothing to compare."""
    if not distributed.launched() or distributed.world_size() < 2:
        return
    ids = tokens.detach().cpu().contiguous() if isinstance(tokens, torch.Tensor) else torch.as_tensor(tokens)
    distributed.same_everywhere({"the weights": distributed.tensor_digest(model.state_dict()),
                                 "the held-out text": distributed.tensor_digest({"ids": ids})},
                                f"{what}: the model or its held-out text")


def same_file_on_every_rank(path):
    """Under torchrun each rank reads the trace file at `path` on its own machine, which need not share a disk
    with rank 0's: where a rank's file is not rank 0's (traces.fingerprint: size, members, CRC-32s), every rank
    raises the same ValueError naming the ranks and hosts that differ, before any work (those ranks would analyse
    other traces than the ones rank 0 names in the results). One process: nothing to compare."""
    distributed.same_everywhere({"its contents": fingerprint(path)}, f"--traces: {path}: the trace files")


def analyse_traces(path, *, eps=None, L=None, mass_eps=None, mass_L=None, n_boot=N_BOOT, max_len=None, seed=None,
                   progress=False, workers=1, max_minutes=None):
    """Per-head analysis of traces saved with traces.save_trace (any model's gates): each (S, T, H) entry is
    one layer, read head by head (memory-mapped: one head's traces in memory per worker). eps= / L=,
    mass_eps= / mass_L=, n_boot, seed: analyse_model; workers, max_minutes: analyse_layers. No attention-mass
    windows (they need the model); P(W > context) where the metadata records the model's context. Returns
    (results, info); a run stopped by Ctrl-C, SIGTERM or max_minutes returns its finished heads, info["partial"]
    saying so. Under torchrun every rank analyses a block of the heads and rank 0 returns them all (the others
    (None, None))."""
    t0 = time.perf_counter()
    Ls = gates.levels(eps, L, default=EPS_SCAN, distinct=True)
    mass_L = _mass_level(mass_eps, mass_L)
    traces, meta = open_traces(path)
    # no model in this process: freed arrays may stay in its heap for the next head (as in forked workers), which
    # saves the page faults of every large temporary when heads are analysed here (--workers 1, a torchrun rank)
    parallel.tune_allocator()
    if distributed.launched():
        distributed.setup("cpu")                # the process group of the ranks sharing the heads
        same_file_on_every_rank(path)
    T0 = next(iter(traces.values())).shape[1]
    if max_len is not None:
        if not 32 <= max_len <= T0:
            raise ValueError(f"--max-len must lie in [32, {T0}] (the traces' length); got {max_len}")
        traces = {k: _Cut(v, max_len) for k, v in traces.items()}
    S, T = next(iter(traces.values())).shape[:2]
    context = meta.get("context") if isinstance(meta.get("context"), int) else None
    results, seed, partial = analyse_or_partial(traces, Ls, n_boot, seed, progress, context, workers, mass_L,
                                                 query_rows(T).numpy(), max_minutes)
    if results is None:
        return None, None
    info = dict(checkpoint=_shown_path(path), model=meta.get("model", "?"), n_seq=S,
                seq_len=meta.get("seq_len", T), analysed_len=T, spans=meta.get("spans"),
                strata=source_labels(meta.get("spans")), n_boot=n_boot, seed=seed, alpha=verdict.ALPHA,
                alpha_test=verdict.ALPHA / (2 * (partial or {}).get("heads_total", len(results))), capture_s=0.0,
                total_s=time.perf_counter() - t0, layers=list(traces), context=context, rows=_rows_note(T, context))
    if partial:
        info["partial"] = partial
    if isinstance(meta.get("family"), str) and meta["family"]:
        info["family"] = meta["family"]                 # the trace file's own word (a GRU's file says keras-gru)
    info.update(layer_traits(list(traces), meta.get("families", meta.get("family")), meta.get("looks_forward")))
    return results, info


def layer_traits(names, families=None, forward=None):
    """What a table and JSON say of each layer beside its windows: {"looks_forward": [layer names whose trace is
    a backward direction, time-reversed], "memory_bound": one string for every layer ("decay", or "upper:
    delta-rule erasure not counted" for a delta-rule family) or "mixed", "memory_bound_by_layer": {name: bound}
    (layers of an unregistered family: None)}. families: one family for every layer, or {name: family}, or None.
    forward: the trace metadata's "looks_forward" list (None: the '.reverse' names of
    lstm_gates.capture_rnn_gates)."""
    if forward is None:
        forward = lstm_gates.looks_forward(names)
    by = {}
    for n in names:
        f = families.get(n) if isinstance(families, dict) else families
        by[n] = adapters.memory_bound(f) if isinstance(f, str) else None
    kinds = set(by.values())
    bound = kinds.pop() if len(kinds) == 1 else "mixed"
    return dict(looks_forward=[n for n in names if n in set(forward)], memory_bound=bound, memory_bound_by_layer=by)
