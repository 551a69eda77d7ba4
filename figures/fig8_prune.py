"""Figure 8: ACP block pruning of the shipped model, predicted from each head's window law against the
naive block rule measured on held-out text (one point per head and tol), and what pruning costs in bits
per byte against tol. Reads the JSON that `python prune.py` writes (results/prune/prune.json); skipped
(never invented) when it is absent."""
import json
import math
import os

import matplotlib.pyplot as plt
import numpy as np

import figstyle
from figstyle import Skip

DEFAULT_JSON = os.path.join(figstyle.ROOT, "results", "prune", "prune.json")


def make(ctx):
    path = getattr(ctx, "prune_json", None) or DEFAULT_JSON
    if not os.path.exists(path):
        raise Skip(f"{os.path.relpath(path)} not found (write it with `python prune.py`)")
    with open(path) as f:
        res = json.load(f)
    heads, per_tol, info = res.get("heads") or [], res.get("per_tol") or [], res.get("info", {})
    if not heads or not per_tol:
        raise Skip(f"{path} has no per-head or per-tol entries")
    tols = sorted({e["log_tol"] for h in heads for e in h["tols"]})
    col = {lt: plt.cm.viridis(i / max(len(tols) - 1, 1)) for i, lt in enumerate(tols)}
    fig, (ap, ab, ah) = plt.subplots(1, 3, figsize=(18, 5.4))

    # (a) predicted vs measured pruned fraction of causal blocks, one point per head and tol
    for h in heads:
        for e in h["tols"]:
            ap.errorbar(e["pred_frac_blocks"], e["meas_frac_blocks"], yerr=e.get("se_meas") or 0.0, fmt="o",
                        ms=4.5, color=col[e["log_tol"]], alpha=0.8, capsize=2)
    for lt in tols:
        ap.plot([], [], "o", color=col[lt], label=f"ln tol = {lt:g}")
    hi = max(max(e["pred_frac_blocks"], e["meas_frac_blocks"]) for h in heads for e in h["tols"])
    lim = [-0.02, max(hi * 1.1, 0.05)]
    ap.plot(lim, lim, "k--", lw=1, label="measured = predicted")
    ap.set_xlim(lim)
    ap.set_ylim(lim)
    ap.set_xlabel("predicted pruned fraction of causal blocks (window law of the head)")
    ap.set_ylabel("measured pruned fraction (block rule on held-out text, ± SE)")
    blk = info.get("block", ["?", "?"])
    ap.set_title(f"(a) per head: T = {info.get('seq_len', '?')}, blocks {blk[0]}×{blk[1]}, U from q/k norms")
    ap.legend(loc="upper left", fontsize=8)

    # (b) cost against tol: the pruned mass (bounded by tol) and the change in bits per byte
    x = np.exp([r["log_tol"] for r in per_tol])
    mass = np.array([r["max_pruned_mass"] for r in per_tol], dtype=float)
    dbpb = np.abs([r["delta_bpb"] for r in per_tol])
    rb = np.array([np.nan if r.get("readout_bound") is None else r["readout_bound"] for r in per_tol])
    pos = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in (mass, dbpb, rb)])
    floor = 10 ** math.floor(math.log10(pos.min() / 10)) if len(pos) else 1e-18   # exact zeros are drawn here
    ab.plot(x, x, "k--", lw=1, label="tol (bound on every row's pruned mass)")
    ab.plot(x, np.maximum(mass, floor), "s-", color="tab:blue", label="largest pruned attention mass of any row")
    ab.plot(x, np.maximum(dbpb, floor), "o-", color="tab:red", label=f"|Δ bits/byte| (exact 0 drawn at {floor:g})")
    if np.isfinite(rb).all():
        ab.plot(x, np.maximum(rb, floor), "^:", color="tab:orange", ms=8, mfc="none",
                label="2 mean max|Δ logit| / ln 2 (bounds |Δ bits/byte|)")
    ab.set_xscale("log")
    ab.set_yscale("log")
    ab.set_xlabel("tol (tolerated pruned attention mass)")
    ab.set_ylabel("mass / bits per byte")
    ab.set_title(f"(b) cost of pruning (dense {info.get('bpb_dense', float('nan')):.4f} bits/byte)")
    ab.legend(loc="center right", fontsize=8)

    # (c) KV horizons at the decoding tol: the law's quantile and the certificate against the mass window
    dlt = info.get("decode_log_tol", tols[len(tols) // 2])
    T = str(info.get("seq_len", ""))
    es = [(h, next((e for e in h["tols"] if e["log_tol"] == dlt), None)) for h in heads]
    es = [(h, e) for h, e in es if e is not None and e.get("mass_window_max") is not None and T in e.get("horizon", {})]
    if es:
        wm = np.array([max(e["mass_window_max"], 1) for _, e in es], dtype=float)
        hz = np.array([max(e["horizon"][T], 1) for _, e in es], dtype=float)
        ah.plot(wm, hz, "o", color="tab:green", label=f"{info.get('p', '?')} quantile of W (window law)")
        cert = np.array([np.nan if e.get("certified_horizon") is None else e["certified_horizon"] for _, e in es])
        ah.plot(wm, cert, "x", color="gray", label="certified by the gate weights")
        lim = [0.7, np.nanmax(np.concatenate([hz, cert, wm])) * 2]
        ah.plot(lim, lim, "k--", lw=1, label="horizon = mass window")
        ah.set_xscale("log")
        ah.set_yscale("log")
        ah.legend(loc="upper left", fontsize=8)
    ah.set_xlabel("largest attention-mass window at tol (measured, tokens)")
    ah.set_ylabel(f"KV horizon h at T = {T} (tokens)")
    ah.set_title(f"(c) per head, ln tol = {dlt:g}: keys beyond h dropped")

    fig.suptitle("Fig. 8  ACP block pruning: window law vs measurement, and its cost", y=1.0)
    fig.tight_layout()
    errs = [abs(e["meas_frac_blocks"] - e["pred_frac_blocks"]) for h in heads for e in h["tols"]]
    summary = (f"{len(heads)} heads x {len(tols)} tol from {os.path.relpath(path)}; "
               f"max |measured - predicted| pruned fraction {max(errs):.3f}")
    if not math.isfinite(max(errs)):
        raise Skip(f"{path} holds non-finite fractions")
    return figstyle.save(fig, ctx.out, "fig8_prune"), summary
