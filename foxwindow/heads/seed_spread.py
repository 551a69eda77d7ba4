"""How far another seed moves a head's predicted window, against the SE printed with it.

The prediction (predict.py) is a block bootstrap: reanalysing the same trace with another seed draws other
walks. Its printed SE (jackknife over documents, never below the walks' own Monte Carlo part) is meant to
cover that move. This reanalyses every head (unit) of a trace file with K seeds and reports, per head and
eps, the ratio

    r = sd over seeds of the predicted mean (variance)  /  root-mean-square of the printed SE over seeds,

which is <= 1 (up to its sampling error) when the SE covers the seed-to-seed spread: under exact coverage
(K - 1) r^2 is about chi^2 with K - 1 degrees of freedom. Cells where every walk of every seed gave the same
W (SE 0 and no spread: W = 0 at eps 0.5 for gates that always close at once) are counted, not divided.

    python -m foxwindow seed-spread --traces results/lstm/textgenrnn_16units.npz --seeds 8 \\
        --per-doc 16 64 --json results/seeds/lstm.json
"""
import math
import sys
import time

import numpy as np
from scipy import stats
from tqdm import tqdm

from foxwindow import outputs
from foxwindow.heads import predict
from foxwindow.laws import gates, lawtable
from foxwindow.models import traces as trace_files

__all__ = ["spread", "ratios", "coverage_statistic", "measure", "report", "main"]


def spread(x, Ls, seeds, per_doc=predict.WALKS_PER_DOC, context=None):
    """Predictions of increments x (S, T) at thresholds Ls (n,) under each seed of `seeds` (ints). Returns a dict
    of (K, n) arrays: mean, se_mean, var, se_var, se_mc_mean, se_mc_var."""
    out = {k: [] for k in ("mean", "se_mean", "var", "se_var", "se_mc_mean", "se_mc_var")}
    for s in seeds:
        p = predict.predict(x, Ls, np.random.default_rng(int(s)), context, per_doc=per_doc)
        for k in out:
            out[k].append(getattr(p, k))
    return {k: np.array(v, dtype=np.float64) for k, v in out.items()}


def ratios(sp, what="mean"):
    """r = sd over seeds / rms printed SE, (n,) float (NaN where both are 0: a constant W)."""
    sd = sp[what].std(0, ddof=1)
    se = np.sqrt(np.mean(sp["se_" + what] ** 2, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where((se == 0) & (sd == 0), np.nan, sd / se)
    return r


def coverage_statistic(sp, what="mean", shrink=1.0, se="se_"):
    """The pooled check of coverage: sum over cells of (K - 1) sd^2 / se^2 and its degrees of freedom (cells x
    (K - 1)); chi^2 when the SE is the true Monte Carlo SD, smaller when the SE covers more (documents).
    shrink: divide the SE by this (a test's deliberately undercovering SE). se: "se_" (the printed SE) or
    "se_mc_" (its Monte Carlo part alone). Cells with se = 0 are skipped."""
    K = sp[what].shape[0]
    sd2 = sp[what].var(0, ddof=1)
    se2 = np.mean(sp[se + what] ** 2, 0) / shrink ** 2
    ok = se2 > 0
    return float(np.sum((K - 1) * sd2[ok] / se2[ok])), int(ok.sum() * (K - 1))


def measure(path, seeds, per_docs, eps=None, progress=True):
    """Every head of the trace file at `path` (traces.save_trace) under each seed and each walks-per-document
    count in per_docs. Returns a dict: rows (one per head and per_doc: ratios per eps), summary, seconds."""
    traces, meta = trace_files.check_trace_file(path)              # checked streamed, read a block of heads at a time
    eps = list(lawtable.EPS_SCAN if eps is None else eps)
    Ls = np.array([gates.threshold(e) for e in eps])
    context = meta.get("context") if isinstance(meta.get("context"), int) else None
    units = [(name, h) for name, tr in traces.items() for h in range(tr.shape[2])]
    rows, cpu = [], {}
    bar = tqdm(total=len(units) * len(per_docs), desc="seed spread", disable=not progress, file=sys.stderr)
    blocks = trace_files.HeadBlocks()
    for name, h in units:
        x = gates.increments_from_log_gates(np.asarray(blocks.head(traces[name], h), dtype=np.float64))
        for m in per_docs:
            t0 = time.process_time()
            sp = spread(x, Ls, seeds, m, context)
            cpu[m] = cpu.get(m, 0.0) + time.process_time() - t0
            rm, rv = ratios(sp, "mean"), ratios(sp, "var")
            mu = sp["mean"].mean(0)
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.where(mu > 0, sp["mean"].std(0, ddof=1) / mu, np.nan)
                mc_share = np.sqrt(np.mean(sp["se_mc_mean"] ** 2, 0) / np.mean(sp["se_mean"] ** 2, 0))
            rows.append(dict(layer=name, head=h, per_doc=m, eps=eps, ratio_mean=rm.tolist(), ratio_var=rv.tolist(),
                             rel_sd_mean=rel.tolist(), mc_share_of_se=mc_share.tolist(),
                             pred_mean=mu.tolist(), se_mean=np.sqrt(np.mean(sp["se_mean"] ** 2, 0)).tolist(),
                             stat_mean=coverage_statistic(sp, "mean"), stat_var=coverage_statistic(sp, "var")))
            bar.update()
    bar.close()
    summary = {}
    for m in per_docs:
        rs = [r for r in rows if r["per_doc"] == m]
        s = {}
        for key in ("ratio_mean", "ratio_var", "rel_sd_mean", "mc_share_of_se"):
            v = np.array([r[key] for r in rs], dtype=np.float64)          # (units, eps)
            with np.errstate(all="ignore"):
                per_unit = np.nanmedian(v, 1)                              # each unit's median over eps
            fin = v[np.isfinite(v)]
            s[key] = dict(median=float(np.median(fin)), p90=float(np.quantile(fin, 0.9)), max=float(fin.max()),
                          unit_median_median=float(np.nanmedian(per_unit)),
                          unit_median_p90=float(np.nanquantile(per_unit, 0.9)))
        st = np.array([r["stat_mean"] for r in rs], dtype=np.float64)
        s["pooled_r2_mean"] = float(st[:, 0].sum() / st[:, 1].sum())     # mean of r^2 over cells (chi^2 / df)
        st = np.array([r["stat_var"] for r in rs], dtype=np.float64)
        s["pooled_r2_var"] = float(st[:, 0].sum() / st[:, 1].sum())
        s["constant_cells"] = int(sum(np.isnan(r["ratio_mean"]).sum() for r in rs))
        s["cells"] = int(sum(len(r["ratio_mean"]) for r in rs))
        s["cpu_s"] = cpu[m]
        summary[str(m)] = s
    return dict(path=path, n_units=len(units), seeds=list(map(int, seeds)), per_docs=list(per_docs), eps=eps,
                rows=rows, summary=summary)


def report(res):
    """The summary table within 120 columns: a row per walks-per-document count."""
    K = len(res["seeds"])
    q90 = math.sqrt(_chi2_q(0.9, K - 1) / (K - 1))
    say = outputs.fill
    print(say(f"{res['path']}: {res['n_units']} heads/units x {len(res['eps'])} eps, {K} seeds. r = seed sd / "
              f"printed SE (<= 1 when the SE covers the seed spread; with {K} seeds an exactly covering SE gives r up "
              f"to {q90:.2f} in 90% of cells)"))
    print(say("r(E), r(V): r of the predicted mean and variance over the cells (median md, 90% quantile 90, max); "
              "unit: each unit's median r(E) over its eps (median, 90%); mv: the seed sd of the predicted mean over "
              "the mean; MC/SE: the Monte Carlo share of the printed SE; r2(E), r2(V): the pooled mean r^2; const: "
              "cells with one value under every seed"))
    cols = ("walks", "r(E)md", "r(E)90", "r(E)max", "unit md", "unit 90", "r(V)md", "r(V)90", "mv md", "mv 90",
            "MC/SE", "r2(E)", "r2(V)", "const", "CPU s")
    print(f"{cols[0]:>6s}" + "".join(f" {c:>7s}" for c in cols[1:]))
    for m, s in res["summary"].items():
        a, v, rel, mc = s["ratio_mean"], s["ratio_var"], s["rel_sd_mean"], s["mc_share_of_se"]
        cells = [f"{a['median']:.2f}", f"{a['p90']:.2f}", f"{a['max']:.2f}", f"{a['unit_median_median']:.2f}",
                 f"{a['unit_median_p90']:.2f}", f"{v['median']:.2f}", f"{v['p90']:.2f}",
                 f"{100 * rel['median']:.2f}%", f"{100 * rel['p90']:.1f}%", f"{mc['median']:.2f}",
                 f"{s['pooled_r2_mean']:.2f}", f"{s['pooled_r2_var']:.2f}", f"{s['constant_cells']:d}",
                 f"{s['cpu_s']:.1f}"]
        print(f"{m:>6s}" + "".join(f" {c:>7s}" for c in cells))


def _chi2_q(p, df):
    return float(stats.chi2.ppf(p, df))


@outputs.scoped
def main(argv=None):
    p = outputs.parser("Reanalyse every head of a trace file with several seeds: how far the predicted window "
                       "moves against its printed SE.")
    p.add_argument("--traces", required=True, help="trace file (.npz from traces.save_trace, e.g. gates.py "
                   "--save-traces or lstm_traces.py)")
    p.add_argument("--seeds", type=int, default=8, help="seeds per head (>= 3)")
    p.add_argument("--per-doc", type=int, nargs="+", default=[predict.WALKS_PER_DOC],
                   help="walks per document to compare (each >= 2)")
    p.add_argument("--json", default=None, help="write the rows and summary here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    outputs.add_common(p)
    a = p.parse_args(argv)
    try:
        if a.seeds < 3:
            raise outputs.UsageError(f"--seeds must be >= 3; got {a.seeds}")
        if any(m < 2 for m in a.per_doc):
            raise outputs.UsageError(f"--per-doc values must be >= 2; got {a.per_doc}")
        if len(set(a.per_doc)) < len(a.per_doc):
            raise outputs.UsageError(f"--per-doc lists a count more than once ({' '.join(map(str, a.per_doc))}): "
                                     "each would be measured again; list each once")
        shown = a.traces
        a.traces = outputs.input_file("--traces", a.traces)
        if a.json:
            a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    except outputs.UsageError as exc:
        if a.debug:
            raise
        print(f"seed_spread: error: {exc}", file=sys.stderr)
        return 2
    t0 = time.time()
    res = measure(a.traces, range(1000, 1000 + a.seeds), a.per_doc, progress=not a.no_progress)
    res["path"], res["seconds"] = shown, time.time() - t0
    res["command"] = " ".join(["python -m foxwindow seed-spread"] + (argv or sys.argv[1:]))
    report(res)
    if a.json:
        outputs.write_result(a.json, outputs.json_clean(res), "seed-spread")
    return 0


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
