"""`python chunks.py` (`foxwindow chunks`): the chunk-size safety command, its tables and its gate sources.

The numerics and the per-head analysis are in foxwindow/uses/chunks.py; this module feeds it gates and reports:

    main(argv)                     the command line: --traces FILE, the shipped model, --random-layers,
                                   --synthetic; the per-head table, the recommendation, --json, --markdown
    print_table / markdown_table   the per-head table (printed) and the README's Markdown table of a JSON
    synthetic_check()              the laws and trace predictions against the chunked op on synthetic gates
    random_layer_traces()          flash-linear-attention layers' decays at their random initialisation
"""
import importlib
import json
import math
import os
import sys
import time
from dataclasses import asdict

import numpy as np
import torch
from tqdm import tqdm

from foxwindow import outputs, safety
from foxwindow.laws import gates
from foxwindow.models import adapters
from foxwindow.models.fox import load_checkpoint, shipped_checkpoint
from foxwindow.models.traces import check_trace_file, run_with_cache
from foxwindow.training import data
from foxwindow.uses import fit_number, given, record_given
from foxwindow.uses.chunks import (
    BLOCK,
    CHUNKS,
    DTYPES,
    RISK,
    analyse,
    decay_range_from_a_log,
    dependent_tail,
    exp_limits,
    head_op_rates,
    iid_tail,
    jackknife,
    law_tail,
    markov_tail,
    op_rates,
    range_safety,
    recommend,
    recommend_per_trace,
    z_score,
)

__all__ = ["print_table", "markdown_table", "SYNTHETIC", "synthetic_check", "print_synthetic", "RANDOM_FAMILIES",
           "random_layer_traces", "main"]


def _short(name):
    """A layer's name as the table shows it: this package's block number, else the name with its control
    characters escaped (a newline or carriage return in a name cannot forge a line)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "blocks" else safety.shown(name)


def _fmt(p):
    return "0" if p == 0 else ("1" if p >= 1 - 1e-12 else f"{p:.1e}")


WIDTH = outputs.WIDTH           # the printed lines' columns


def say(text, file=None, indent="  "):
    """Print prose wrapped to WIDTH columns (later lines indented) to file (None: sys.stdout)."""
    print(outputs.fill(text, indent), file=file or sys.stdout)


def say_items(lead, items, file=None):
    """Print `lead` and items joined by ', ' within WIDTH columns, an item never cut (outputs.fill_items)."""
    print("\n".join(outputs.fill_items(lead, items, width=WIDTH)), file=file or sys.stdout)


LABEL_MAX = 48                  # the widest head label of the table: a longer layer name is cut at its start


def _label(h):
    """The table's label of a head: its layer (_short) and head index, at most LABEL_MAX characters (a longer
    name keeps its end, where layer names differ, after '...')."""
    text = f"{_short(h.name)}:{h.head}"
    return text if len(text) <= LABEL_MAX else "..." + text[-(LABEL_MAX - 3):]


def print_table(heads, risk, file=None):
    """Two lines a head and dtype: the predicted P(chunk overflows) and the measured one, one column per chunk
    size; more chunk sizes than fit in WIDTH columns go to further blocks of the table. The head column is as
    wide as the longest label (10 at least, LABEL_MAX at most), so every line stays within WIDTH."""
    chunks, file = heads[0].chunks, file or sys.stdout
    say(f"P(chunk overflows) per head and dtype: predicted (dependence-aware, all sequences), then measured "
        f"(failures / chunks; '<' a bound where none failed); safe = largest chunk with risk <= {risk:g}", file)
    labels = [_label(h) for h in heads]
    lw = max([10] + [len(t) for t in labels])
    lead = f"{'head':>{lw}s} {'dtype':>8s} {'kappa':>7s} {'':4s}"
    per = max(1, (WIDTH - len(lead) - 6) // 9)
    for b in range(0, len(chunks), per):
        cols = range(b, min(b + per, len(chunks)))
        last = cols[-1] == len(chunks) - 1
        hdr = lead + "".join(f" {'C=' + str(chunks[i]):>8s}" for i in cols) + (f" {'safe':>5s}" if last else "")
        print(("\n" if b else "") + hdr, file=file)
        for h, label in zip(heads, labels):
            pred = "".join(f" {_fmt(h.dep[i]):>8s}" for i in cols)
            meas = "".join(f" {_fmt(m['p']) if m['failures'] else '<' + _fmt(m['upper']):>8s}"
                           for m in (h.measured[i] for i in cols))
            safe = f" {h.safe_dep or 're-c':>5}" if last else ""
            print(f"{label:>{lw}s} {h.dtype:>8s} {fit_number(h.kappa, 7, 4)} pred" + pred + safe, file=file)
            print(f"{'':>{lw}s} {'':>8s} {'':>7s} meas" + meas, file=file)


def markdown_table(res, dtypes=("float32", "float16"), lo=1e-6):
    """A Markdown table of the command's JSON `res`: every head, dtype and chunk size whose predicted or
    measured rate lies in (lo, 1 - lo): predicted (dependence-aware ± SE; iid), measured (failures / chunks,
    and the chunked op's count when it ran), and the held-out z of both predictions."""
    ops = res.get("op") or {}
    lines = ["| head | dtype | C | predicted (dependence-aware ± SE) | iid law | measured (failures / chunks) "
             "| chunked op NaN chunks | held-out z dep. | held-out z iid |", "|---|---|---|---|---|---|---|---|---|"]
    for h in res["heads"]:
        if h["dtype"] not in dtypes:
            continue
        for i, C in enumerate(h["chunks"]):
            m = h["measured"][i]
            if not (lo < h["dep"][i] < 1 - lo or lo < h["iid"][i] < 1 - lo or 0 < m["p"] < 1):
                continue
            op = ops.get(h["name"], {}).get(f"{h['dtype']}:{C}")
            opc = str(op[h["head"]]["failures"]) if op else "-"
            lines.append(f"| {_short(h['name'])}.{h['head']} | {h['dtype']} | {C} | {h['dep'][i]:.2e} ± "
                         f"{h['dep_se'][i]:.1e} | {h['iid'][i]:.2e} | {m['failures']} / {m['chunks']} "
                         f"({m['p']:.2e} ± {m['se']:.1e}) | {opc} | {h['z_dep'][i]:+.2f} | {h['z_iid'][i]:+.2f} |")
    return "\n".join(lines)




def _capture_shipped(n_seq, seq_len, checkpoint=None):
    """The shipped FoX model's log-gates on n_seq held-out sequences: ({hook name: (S, T, H)}, meta)."""
    model, meta = load_checkpoint(outputs.repo_path(checkpoint) if checkpoint else shipped_checkpoint(), device="cpu")
    tokens, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    traces = {}
    for s0 in range(0, n_seq, 4):
        _, cache = run_with_cache(model, tokens[s0:s0 + 4], names_filter=lambda n: n.endswith("hook_log_fgate"))
        for n, t in cache.items():
            traces.setdefault(n, []).append(t.numpy())
    return {n: np.concatenate(v, 0) for n, v in traces.items()}, {"model": meta.get("name", "fox"), "spans": spans}


SYNTHETIC = (                   # (gate, dtype): failures between C = 16 and 128
    (gates.LogitNormalGate(-1.0, 1.0), "float32"),
    (gates.LogitNormalGate(-0.5, 1.0), "float32"),
    (gates.LogitNormalGate(1.5, 1.0), "float16"),
    (gates.AR1LogitGate(-0.6, 1.0, 0.8), "float32"),
    (gates.AR1LogitGate(-0.6, 1.0, 0.9), "float32"),
    (gates.AR1LogitGate(2.0, 1.0, 0.9), "float16"),
)


def synthetic_check(cases=SYNTHETIC, chunks=(16, 32, 64, 128), n_seq=32, seq_len=2048, seed=0):
    """Predicted against measured on synthetic gates: per case and chunk size, the law's P(S_C > theta)
    (law_tail for iid gates, markov_tail for AR(1)-logit ones), the chunked op's NaN/inf rate on n_seq
    sequences drawn from the law, the trace predictions fitted on the even sequences (dependence-aware with
    its jackknife SE, iid) and the op's rate on the odd ones. Returns a list of dict rows."""
    rng = np.random.default_rng(seed)
    rows = []
    for gate, dt in cases:
        th = exp_limits(dt).overflow
        if gate.iid:
            t = law_tail(gate, th, chunks)
            law, law_err = t.p, (t.hi - t.lo) / 2
            x = gate.sample(rng, (n_seq, seq_len))
        else:
            law, law_err = markov_tail(gate, th, chunks)
            x = gate.sample_paths(rng, n_seq, seq_len)[0]
        meas = head_op_rates(x, chunks, dt, seed)
        fit, chk = x[0::2], x[1::2]
        held = head_op_rates(chk, chunks, dt, seed + 1)
        dep, dep_se = jackknife(lambda y: dependent_tail(y, th, chunks, bounds=False).p, fit)
        iid = iid_tail(fit, th, chunks, bounds=False).p
        for i, C in enumerate(chunks):
            rows.append(dict(gate=str(gate), dtype=dt, theta=th, chunk=C, law=float(law[i]), law_err=float(law_err[i]),
                             measured=asdict(meas[C]), z_law=z_score(law[i], law_err[i], meas[C]),
                             dep=float(dep[i]), dep_se=float(dep_se[i]), iid=float(iid[i]),
                             held_out=asdict(held[C]), z_dep=z_score(dep[i], dep_se[i], held[C]),
                             z_iid=z_score(iid[i], 0.0, held[C])))
    return rows


def print_synthetic(rows, file=None):
    """The --synthetic table: a gate's name on its own line, then its (dtype, chunk) rows (within WIDTH)."""
    file = file or sys.stdout
    say("Synthetic gates: the law's P(S_C > theta) against the chunked op's NaN/inf rate (32 x 2048 drawn from "
        "the law); trace predictions fitted on the even sequences against the op on the odd ones", file)
    hdr = (f"  {'dtype':>8s} {'C':>4s} {'law':>9s} {'op rate ± SE':>19s} {'z':>5s} | "
           f"{'dep (fit) ± SE':>19s} {'iid (fit)':>9s} {'op (check)':>10s} {'z dep':>6s} {'z iid':>6s}")
    print(hdr, file=file)
    gate = None
    for r in rows:
        if r["gate"] != gate:
            gate = r["gate"]
            print(gate, file=file)
        m, h = r["measured"], r["held_out"]
        print(f"  {r['dtype']:>8s} {r['chunk']:4d} {r['law']:9.2e} {m['p']:9.2e} ± {m['se']:7.1e} "
              f"{r['z_law']:5.1f} | {r['dep']:9.2e} ± {r['dep_se']:7.1e} {r['iid']:9.2e} {h['p']:10.2e} "
              f"{r['z_dep']:6.1f} {r['z_iid']:6.1f}", file=file)


RANDOM_FAMILIES = ("fla-fox", "fla-gla", "fla-gated-deltanet", "mamba2")


def random_layer_traces(families=RANDOM_FAMILIES, n_seq=32, seq_len=2048, hidden=256, heads=4, seed=0):
    """Log-decay traces of flash-linear-attention layers at their own random initialisation, reading a random
    N(0, 1) embedding of the held-out text's bytes (so the gates follow the text's token statistics).

    The decays come from adapters' log_decay (parameters and inputs only: no Triton kernel runs), (S, T, H)
    float32 per family. GLA's gates are per key channel: its trace is, per head, the channel whose mean -log
    g is largest (the channel that overflows first; other channels are not checked). Raises ImportError
    without fla. Returns ({"<family>": (S, T, H)}, meta)."""
    torch.manual_seed(seed)
    tokens, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    emb = torch.randn(256, hidden, generator=torch.Generator().manual_seed(seed))
    x = emb[tokens]                                                       # (S, T, hidden)
    build = {
        "fla-fox": ("fla.layers.forgetting_attn", "ForgettingAttention", dict(hidden_size=hidden, num_heads=heads)),
        "fla-gla": ("fla.layers.gla", "GatedLinearAttention", dict(hidden_size=hidden, num_heads=heads)),
        "fla-gated-deltanet": ("fla.layers.gated_deltanet", "GatedDeltaNet",
                               dict(hidden_size=hidden, num_heads=heads, head_dim=hidden // heads,
                                    use_short_conv=False)),
        "mamba2": ("fla.layers.mamba2", "Mamba2", dict(hidden_size=hidden, num_heads=heads,
                                                       head_dim=2 * hidden // heads, state_size=16)),
    }
    out = {}
    for fam in families:
        if fam not in build:
            raise ValueError(f"family must be one of {tuple(build)}; got {fam!r}")
        mod, cls, kw = build[fam]
        layer = getattr(importlib.import_module(mod), cls)(layer_idx=0, **kw).eval()
        with torch.no_grad():
            lg = adapters.get_adapter(fam).log_decay(layer, x, {}).float()
        if lg.dim() == 4:                                                  # (S, T, H, K): the fastest channel
            pick = (-lg).mean(dim=(0, 1)).argmax(-1)                       # (H,)
            lg = torch.gather(lg, 3, pick[None, None, :, None].expand(*lg.shape[:3], 1))[..., 0]
        out[fam] = lg.clamp(max=0.0).numpy()
    return out, {"model": "fla layers at random init on held-out text", "families": list(families),
                 "hidden": hidden, "heads": heads, "seed": seed}


def _gate_range_arg(a):
    """(lo, hi) from --gate-range or --a-log-range with --dt-range / --dt-raw-range (UsageError on a bad mix)."""
    form = a.a_log_range is not None or a.dt_range is not None or a.dt_raw_range is not None or a.dt_limit is not None
    if a.gate_range is not None and form:
        raise outputs.UsageError("--gate-range and --a-log-range/--dt-* exclude each other")
    if a.synthetic or a.random_layers:
        if a.gate_range is not None or form:
            raise outputs.UsageError("--gate-range / --a-log-range go alone or with --traces")
    try:
        if a.gate_range is not None:
            lo, hi = a.gate_range
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or hi > 0:
                raise ValueError(f"--gate-range needs LO <= HI <= 0; got {lo:g} {hi:g}")
            return float(lo), float(hi)
        if form:
            if a.a_log_range is None:
                raise ValueError("--dt-range / --dt-raw-range / --dt-limit need --a-log-range")
            if (a.dt_range is None) == (a.dt_raw_range is None):
                raise ValueError("--a-log-range needs one of --dt-range (dt after softplus) and --dt-raw-range (the "
                                 "softplus argument raw + dt_bias)" + (", not both" if a.dt_range else ""))
            for flag, r, nonneg in (("--a-log-range", a.a_log_range, False), ("--dt-range", a.dt_range, True),
                                    ("--dt-raw-range", a.dt_raw_range, False), ("--dt-limit", a.dt_limit, True)):
                if r is not None and (not all(map(math.isfinite, r)) or r[0] > r[1] or (nonneg and r[0] < 0)):
                    raise ValueError(f"{flag} needs finite LO <= HI{' with LO >= 0' if nonneg else ''}; got "
                                     f"{r[0]:g} {r[1]:g}")
            lo, hi = decay_range_from_a_log(a.a_log_range, a.dt_range, a.dt_raw_range, a.dt_limit)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"{_range_source(a)}: the strongest decay exp(A_log) dt is beyond float64 (log g = "
                                 f"{lo:g}); give ranges whose decay is finite")
            return lo, hi
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    return None


def _range_source(a):
    if a.gate_range is not None:
        return f"--gate-range {a.gate_range[0]:g} {a.gate_range[1]:g}"
    parts = [f"--a-log-range {a.a_log_range[0]:g} {a.a_log_range[1]:g}"]
    for flag, v in (("--dt-range", a.dt_range), ("--dt-raw-range", a.dt_raw_range), ("--dt-limit", a.dt_limit)):
        if v is not None:
            parts.append(f"{flag} {v[0]:g} {v[1]:g}")
    return " ".join(parts) + " (log g = -exp(A_log) dt)"


def print_range(rows, a, file=None):
    """The --gate-range table: per dtype the largest safe chunk, worst case."""
    file = sys.stdout if file is None else file
    r0 = rows[0]
    say(f"Chunk safety from the gate range alone ({_range_source(a)}): log g in [{r0.lo:.6g}, {r0.hi:.6g}] per "
        f"token, X = -log g in [{r0.x_min:.6g}, {r0.x_max:.6g}] nats; worst case (every token at the range's "
        "strongest decay).", file)
    hdr = (f"{'dtype':>9s} {'theta':>8s} {'textbook C_max':>14s} {'pow2':>5s} {'all fail at':>11s} "
           f"{'anchored (sub ' + str(r0.sub) + ', shift ' + format(r0.shift, '.3g') + ')':>30s}  re-centred")
    print(hdr, file=file)
    print("-" * len(hdr), file=file)
    for r in rows:
        tb = "any" if r.textbook is None else (str(r.textbook) if r.textbook else "none (C=1)")
        p2 = "any" if r.textbook_pow2 is None else (str(r.textbook_pow2) if r.textbook_pow2 else "-")
        af = "-" if r.always_fails is None else str(r.always_fails)
        an = "any C (sub-chunk safe)" if r.anchored_safe else "overflows in a sub-chunk"
        print(f"{r.dtype:>9s} {r.theta:8.4f} {tb:>14s} {p2:>5s} {af:>11s} {an:>30s}  any C", file=file)
    Cs = sorted(r0.per_token)
    print("Strongest safe decay per token (textbook form, theta / C nats; log g >= -theta / C):", file=file)
    for r in rows:
        say_items(f"  {r.dtype:>8s}: ", [f"C={C} {r.per_token[C]:.4g}" for C in Cs], file)
    say("textbook: q exp(cum_i), k exp(-cum_j) formed apart (the key factor exp(b_j), b_j the chunk's inclusive "
        "sum of X up to j, overflows once b_j > theta: at token floor(theta / x_max) + 1 of a chunk at the "
        "strongest decay); anchored: factors anchored per sub-chunk at G_0 - shift (fla 0.6 KDA's safe_gate "
        "path); re-centred: exp(cum_i - cum_j) per pair (fla 0.6's GLA, Gated DeltaNet and KDA default paths): "
        "never overflows. " + r0.risk_note + ".", file)


MAX_CHUNK = 1 << 19             # the largest chunk size taken (no chunked kernel comes near; the table's column)
# the flags each source of gates reads besides --json and --force: a flag given that the run would ignore is refused
_SOURCE_FLAGS = {"synthetic": (), "range": ("chunks", "dtypes", "sub_chunk", "shift"),
                 "traces": ("chunks", "dtypes", "risk", "block", "op", "workers", "no_progress", "sub_chunk", "shift"),
                 "model": ("n_seq", "seq_len", "chunks", "dtypes", "risk", "block", "op", "workers", "no_progress")}
_FLAG = {"n_seq": "--n-seq", "seq_len": "--seq-len", "chunks": "--chunks", "dtypes": "--dtypes", "risk": "--risk",
         "block": "--block", "op": "--op", "workers": "--workers", "no_progress": "--no-progress",
         "sub_chunk": "--sub-chunk", "shift": "--shift"}


def _check_paths(a):
    """An empty path is refused (it would read as 'not given' and run another analysis, or write nothing)."""
    for flag, v in (("--traces", a.traces), ("--json", a.json), ("--markdown", a.markdown)):
        if v is not None and not v.strip():
            raise outputs.UsageError(f"{flag}: expected a file path; got an empty one")


def _given_flags(a):
    """The dests the command line set: options taking a value (record_given) and the store_true flags that are on."""
    on = {d for d in ("op", "no_progress", "random_layers", "synthetic") if getattr(a, d)}
    return set(getattr(a, "given_flags", ())) | on


def _print_markdown(a):
    """--markdown FILE: the README table of a JSON this command wrote; nothing else may be given beside it."""
    extra = sorted(_given_flags(a) - {"markdown"}) + (["force"] if a.force else [])
    if extra:
        names = ", ".join(_FLAG.get(d, "--" + d.replace("_", "-")) for d in extra)
        raise outputs.UsageError(f"--markdown prints the table of a JSON this command wrote and stops: {names} "
                                 "would be ignored beside it")
    path = outputs.input_file("--markdown", a.markdown)                  # missing, a folder: said so
    try:
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise outputs.UsageError(f"--markdown: {a.markdown} is not a JSON file (this command's --json writes "
                                 "one)") from None
    if not isinstance(res, dict) or "heads" not in res:
        raise outputs.UsageError(f"--markdown: {a.markdown} holds no per-head results (written by --synthetic?)")
    _check_markdown_heads(a.markdown, res)
    print(markdown_table(res))
    return 0


def _check_markdown_heads(path, res):
    """UsageError naming the entry where res['heads'] is not what --json writes (markdown_table's fields)."""
    heads = res["heads"]
    if not isinstance(heads, list):
        raise outputs.UsageError(f"--markdown: {path}: 'heads' is {type(heads).__name__}, not a list of heads")

    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    for i, h in enumerate(heads):
        where = f"--markdown: {path}: heads[{i}]"
        if not isinstance(h, dict):
            raise outputs.UsageError(f"{where} is {type(h).__name__}, not an object")
        for key, ok, kind in (("name", lambda v: isinstance(v, str), "a string"),
                              ("dtype", lambda v: isinstance(v, str), "a string"),
                              ("head", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                               "an integer >= 0"),
                              ("chunks", lambda v: isinstance(v, list) and all(isinstance(c, int) for c in v),
                               "a list of integers")):
            if not ok(h.get(key)):
                raise outputs.UsageError(f"{where}: '{key}' is missing or not {kind}")
        n = len(h["chunks"])
        for key in ("dep", "dep_se", "iid", "z_dep", "z_iid"):
            v = h.get(key)
            if not (isinstance(v, list) and len(v) == n and all(x is None or num(x) for x in v)):
                raise outputs.UsageError(f"{where}: '{key}' is missing or not {n} numbers (one per chunk size)")
        m = h.get("measured")
        if not (isinstance(m, list) and len(m) == n and all(
                isinstance(x, dict) and all(num(x.get(k)) for k in ("p", "se", "failures", "chunks")) for x in m)):
            raise outputs.UsageError(f"{where}: 'measured' is missing or not {n} objects with p, se, failures and "
                                     "chunks")
    if any(x is None for h in heads for key in ("dep", "dep_se", "iid", "z_dep", "z_iid") for x in h[key]):
        raise outputs.UsageError(f"--markdown: {path}: a head's prediction or z is null (not a number)")


def _check_flags(a, p):
    """The flags on their own, before any file is read: values, duplicates, sizes, which sources exclude others."""
    if sum(map(bool, (a.traces, a.random_layers, a.synthetic))) > 1:
        raise outputs.UsageError("--traces, --random-layers and --synthetic exclude each other")
    outputs.eps_arg("--risk", a.risk)
    if a.workers is not None:                   # more than the processors or the jobs: as many as there are jobs
        outputs.positive("--workers", a.workers)
    outputs.positive("--block", a.block)
    for flag, vals in (("--chunks", a.chunks), ("--dtypes", a.dtypes)):
        twice = sorted({v for v in vals if vals.count(v) > 1}, key=vals.index)
        if twice:
            raise outputs.UsageError(f"{flag}: {', '.join(map(str, twice))} given more than once")
    for C in a.chunks:
        outputs.positive("--chunks", C)
        if C > MAX_CHUNK:
            raise outputs.UsageError(f"--chunks: {C} is beyond any chunked kernel's chunk; chunk sizes go up to "
                                     f"{MAX_CHUNK} tokens here")


def _check_mode_flags(a, rng):
    """A flag that the chosen source of gates would ignore is refused, naming the source."""
    if a.synthetic:
        mode, what = "synthetic", "--synthetic runs its fixed synthetic cases (their own chunk sizes and dtypes)"
    elif a.traces:
        mode, what = "traces", "--traces analyses the file's own sequences"
    elif a.random_layers:
        mode, what = "model", "--random-layers"
    elif rng is not None:
        mode, what = "range", "a gate range alone (--gate-range / --a-log-range) is a worst case with no gates"
    else:
        mode, what = "model", "the shipped model"
    if mode in ("traces", "model"):                                  # the dependence-aware prediction's blocks
        for C in a.chunks:
            if C % a.block:
                raise outputs.UsageError(f"--chunks: {C} is not a multiple of --block {a.block}")
    extra = [d for d in _FLAG if d in _given_flags(a) and d not in _SOURCE_FLAGS[mode]]
    if rng is not None and mode == "traces":
        extra = [d for d in extra if d not in ("sub_chunk", "shift")]
    if extra:
        names = ", ".join(_FLAG[d] for d in extra)
        raise outputs.UsageError(f"{names}: {what}; {'it' if len(extra) == 1 else 'they'} would be ignored")


def heldout_windows(seq_len):
    """How many held-out sequences of seq_len bytes the text holds (data.heldout_tokens' windows)."""
    return sum(max(0, (len(b) - seq_len) // seq_len + 1) for _, b in data.load_split("val"))


def _check_capture(a):
    """--n-seq and --seq-len of a capture (the shipped model, --random-layers), against the chunk sizes and the
    held-out text, before the model is loaded."""
    outputs.positive("--n-seq", a.n_seq, 2)
    outputs.positive("--seq-len", a.seq_len)
    if a.seq_len < max(a.chunks):
        raise outputs.UsageError(f"--seq-len {a.seq_len} is shorter than the largest of --chunks ({max(a.chunks)}): "
                                 "a chunk must fit in a sequence")
    have = heldout_windows(a.seq_len)
    if have < a.n_seq:
        raise outputs.UsageError(f"--n-seq {a.n_seq} x --seq-len {a.seq_len}: the held-out text holds {have} "
                                 f"sequences of {a.seq_len} bytes; ask for at most {have} (or shorter ones)")


def _open_traces(path, chunks):
    """check_trace_file of --traces (every value streamed), with its layers against the chunk sizes; the messages
    name --traces. Returns (traces, meta)."""
    try:
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise ValueError(f"{path} is empty (0 bytes); expected an .npz trace file (save_trace writes one)")
        traces, meta = check_trace_file(outputs.input_file("--traces", path))      # streamed, read head by head
    except outputs.UsageError:
        raise
    except ValueError as exc:
        raise outputs.UsageError(f"--traces: {exc}") from None
    if not traces:
        raise outputs.UsageError(f"--traces: {path} holds no traces (its metadata lists no layers)")
    T = next(iter(traces.values())).shape[1]
    if max(chunks) > T:
        raise outputs.UsageError(f"--chunks: {max(chunks)} exceeds the trace length T = {T} of {path}; give chunk "
                                 f"sizes up to {T}")
    return traces, meta


def main(argv=None):
    p = outputs.parser("Chunk-size safety: the probability that a chunk of C tokens overflows a chunked "
                       "kernel's exp(-cum), per head, predicted from the gates and measured on the trace.")
    record_given(p)                 # which options were given: a flag the chosen mode ignores is refused
    p.add_argument("--traces", default=None, help="trace file (.npz from save_trace; None: capture the shipped "
                   "FoX model's gates on held-out text)")
    p.add_argument("--random-layers", action="store_true", help="instead: flash-linear-attention layers (FoX, GLA, "
                   "Gated DeltaNet, Mamba-2) at their random initialisation reading the held-out text")
    p.add_argument("--synthetic", action="store_true", help="instead: predicted vs the op's measured rate on "
                   "synthetic iid and AR(1)-logit gates")
    p.add_argument("--n-seq", type=int, default=32, help="sequences to capture (shipped model)")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per captured sequence (shipped model)")
    p.add_argument("--chunks", type=int, nargs="+", default=list(CHUNKS), help="chunk sizes (multiples of --block)")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES, help="compute dtypes")
    p.add_argument("--risk", type=float, default=RISK, help="acceptable probability that one chunk overflows")
    p.add_argument("--block", type=int, default=BLOCK, help="block length of the dependence-aware prediction")
    p.add_argument("--op", action="store_true", help="also run the chunked reference op on the trace and report "
                   "its NaN/inf rate beside the predictions (slower)")
    p.add_argument("--gate-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                   help="per-token log-gate range LO <= HI <= 0 (log g = -X): the largest safe chunk per dtype with "
                        "and without re-centring, worst case (with --traces: also the traces' own gates at --risk)")
    p.add_argument("--a-log-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                   help="instead of --gate-range: the A_log range of a Mamba-2 / Gated DeltaNet / KDA parametrisation, "
                        "log g = -exp(A_log) dt (with --dt-range or --dt-raw-range)")
    p.add_argument("--dt-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                   help="the dt range (after softplus, >= 0) for --a-log-range")
    p.add_argument("--dt-raw-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                   help="the range of the softplus argument raw + dt_bias (dt = softplus of it) for --a-log-range")
    p.add_argument("--dt-limit", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                   help="Mamba-2's clamp of dt (dt_limit / time_step_limit) for --a-log-range")
    p.add_argument("--sub-chunk", type=int, default=16, help="sub-chunk of the anchored form (fla 0.6 KDA: 16)")
    p.add_argument("--shift", type=float, default=None, help="the anchored form's shift in nats (None: fla 0.6 "
                   "chunk_kda's (sub - 1) s / 2 with s = 2: 15 for sub-chunks of 16)")
    p.add_argument("--json", default=None, help="write the results as JSON to this path")
    p.add_argument("--workers", type=int, default=None, help="processes analysing heads in parallel (default: the "
                   "available processors); the results do not depend on it")
    p.add_argument("--markdown", default=None, help="print the README table of a JSON this command wrote, and stop")
    p.add_argument("--no-progress", action="store_true", help="no progress bar over the heads (it is shown on a "
                   "terminal only)")
    outputs.add_common(p)
    a = p.parse_args(argv)
    _check_paths(a)
    if a.markdown is not None:
        return _print_markdown(a)
    _check_flags(a, p)
    if a.traces:
        outputs.note_input(a.traces, "--traces")
    elif not (a.random_layers or a.synthetic or a.gate_range is not None) and os.path.exists(shipped_checkpoint()):
        outputs.note_input(shipped_checkpoint(), "the shipped checkpoint")      # read by default: never an output
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    t0 = time.perf_counter()
    rng = _gate_range_arg(a)
    if a.shift is not None and not (math.isfinite(a.shift) and a.shift >= 0):
        raise outputs.UsageError(f"--shift must be a finite number of nats >= 0; got {a.shift}")
    if rng is None and (a.shift is not None or a.sub_chunk != p.get_default("sub_chunk")):
        raise outputs.UsageError("--shift and --sub-chunk set the anchored form of --gate-range; without "
                                 "--gate-range they would be ignored")
    if a.traces and a.n_seq != p.get_default("n_seq"):
        raise outputs.UsageError("--n-seq counts the shipped model's sequences; --traces analyses the file's own")
    _check_mode_flags(a, rng)
    if rng is not None:
        outputs.positive("--sub-chunk", a.sub_chunk, lo=2)
        if given(a, "sub_chunk") and a.sub_chunk > max(a.chunks):
            raise outputs.UsageError(f"--sub-chunk {a.sub_chunk} is longer than the largest of --chunks "
                                     f"({max(a.chunks)}): a sub-chunk lies inside a chunk")
    if a.traces:
        traces, meta = _open_traces(a.traces, a.chunks)                 # checked before any table is printed
    if rng is not None:
        rows = range_safety(*rng, dtypes=a.dtypes, chunks=a.chunks, sub=a.sub_chunk, shift=a.shift)
        print_range(rows, a)
        if not a.traces:
            if a.json:
                outputs.write_json(a.json, {"info": {"gate_range": list(rng), "source": _range_source(a)},
                                            "range": [asdict(r) for r in rows]})
            return 0
        print()
    if a.synthetic:
        t0 = time.perf_counter()
        rows = synthetic_check()
        print_synthetic(rows)
        print(f"time {time.perf_counter() - t0:.1f} s")
        if a.json:
            outputs.write_result(a.json, {"info": {"synthetic": True}, "rows": rows}, "chunks")
        return 0
    if a.random_layers:
        _check_capture(a)
        traces, meta = random_layer_traces(n_seq=a.n_seq, seq_len=a.seq_len)
    elif not a.traces:                                                  # a.traces: opened above
        _check_capture(a)
        traces, meta = _capture_shipped(a.n_seq, a.seq_len)
    t_load = time.perf_counter() - t0
    n_heads = sum(int(t.shape[2]) for t in traces.values())
    bar = tqdm(total=n_heads, desc="heads", file=sys.stderr, disable=True if a.no_progress else None)
    try:
        heads = analyse(traces, a.chunks, a.dtypes, a.risk, a.block, workers=a.workers,
                        on_result=lambda i, r: bar.update())
    finally:
        bar.close()
    t_an = time.perf_counter() - t0 - t_load
    print_table(heads, a.risk)
    rec = recommend(heads, a.dtypes)
    per = recommend_per_trace(heads, a.dtypes)
    print("\nRecommendation (every head under the risk, dependence-aware prediction + 2 SE):")
    for dt, r in rec.items():
        say(f"  {dt:>8s}: {r['advice']}; limiting: {', '.join(map(safety.shown, r['limiting_heads'][:6]))}",
            indent=" " * 12)
    if len(per) > 1:
        say("per trace: " + "; ".join(f"{_short(n)}: " + ", ".join(f"{dt} {r['chunk'] or 're-centre'}"
                                                                for dt, r in rs.items()) for n, rs in per.items()))
    S, T = next(iter(traces.values())).shape[:2]
    lo_n, hi_n = S * (T // max(a.chunks)), S * (T // min(a.chunks))
    print()
    def bound(n):                                 # the table's '<': the one-sided 95% bound when none of n failed
        return 1 - 0.05 ** (1 / n)
    say(f"The tail: a risk of {a.risk:g} per chunk is below what this trace can measure (a chunk size with no "
        f"failure among its n chunks of a head bounds the rate only by 1 - 0.05^(1/n), about 3/n: "
        f"{_fmt(bound(hi_n))} at C = {min(a.chunks)}, {_fmt(bound(lo_n))} at C = {max(a.chunks)}): below that the "
        f"law-based prediction carries the recommendation.")
    say("Formulation: aligned chunks, cum = inclusive cumulative log-gate inside the chunk, b = -cum; the "
        "textbook kernel's k exp(-cum) = k exp(b) becomes inf (then NaN) once the chunk's sum S_C passes "
        "theta: " + ", ".join(f"{dt} theta = {exp_limits(dt).overflow:.4f}" for dt in a.dtypes) +
        "; q exp(cum) only underflows (to 0 past " +
        ", ".join(f"{exp_limits(dt).underflow:.2f}" for dt in a.dtypes) + "), never first.")
    ops = None
    if a.op:
        ops = {}
        for name, lg in traces.items():
            r = op_rates(np.asarray(lg), a.chunks, a.dtypes)                    # the op runs on the whole layer
            ops[name] = {f"{dt}:{C}": [asdict(x) for x in v] for (dt, C), v in r.items()}
        agree = all(o["failures"] == m["failures"] for h in heads
                    for C, m in zip(h.chunks, h.measured)
                    for o in [ops[h.name].get(f"{h.dtype}:{C}", [None] * (h.head + 1))[h.head]] if o is not None)
        print(f"chunked op: NaN/inf chunks {'equal' if agree else 'DIFFER from'} the chunks with S_C > theta")
    z = {k: [v for h in heads for v in getattr(h, k) if math.isfinite(v)] for k in ("z_iid", "z_dep", "z_gauss")}
    say("held-out check (fit on even sequences, measured on odd): median |z| " +
        ", ".join(f"{k[2:]} {np.median(np.abs(v)):.2f} (max {np.max(np.abs(v)):.1f})" for k, v in z.items() if v))
    print(f"time: load/capture {t_load:.1f} s, analysis {t_an:.1f} s")
    if a.json:
        outputs.write_result(a.json, kind="chunks",
                             obj={
            "info": {"traces": a.traces, "meta": {k: v for k, v in meta.items() if k != "spans"}, "risk": a.risk,
                     "block": a.block, "chunks": a.chunks, "dtypes": a.dtypes,
                     "limits": {dt: asdict(exp_limits(dt)) for dt in a.dtypes},
                     "formulation": "aligned chunks, inclusive cumulative log-gate; fails when S_C > overflow",
                     "seconds_analysis": t_an},
            "recommendation": rec, "recommendation_per_trace": per, "heads": [asdict(h) for h in heads],
            "op": ops})
    return 0


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
