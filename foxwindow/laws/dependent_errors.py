"""Measured errors of the dependent-increment window laws on AR(1)-logit gates and (--structures) on three
dependence structures: AR(1) logits, a regime-switching two-state chain, a rotating three-state chain whose
correlations change sign with the lag (markov.markov_chain_first_passage is their exact reference).

For gate z = mu + s y, y a stationary AR(1) with coefficient phi, X = softplus(-z), and each L/kappa in a
grid, this compares the laws of renewal.py with (a) first-passage Monte Carlo (gates.first_passage_mc,
SEs of mean and variance) and (b) the exact Markov-additive numerics (exact.markov_first_passage).
Law moments come from the gate's law (Hermite sums, the chain's fundamental matrix), never from samples.
The laws and their statuses: docs/THEORY.md section 4.

    python dependent_errors.py --json results/dependent/errors.json      # ~80 s of CPU

Laws: mean  E[W] = L/kappa - 1/2 + sigma_LR^2/(2 kappa^2);  lead  sigma_LR^2 L/kappa^3;
bartlett  lead - 2 sum k gamma_k/kappa^2;  second  lead + C_dep (renewal.second_order_constant);
finite_n  Var(S_n)/kappa^2 at n = L/kappa. Errors are law/reference - 1 (mean: law - reference, in tokens).
"""
import contextlib
import io
import math
import sys
import time

import numpy as np
from tqdm import tqdm

from foxwindow import outputs
from foxwindow.laws import exact, gates, markov, renewal

__all__ = ["PHIS", "RATIOS", "TAU_MULTS", "TOLS", "MAX_SECONDS", "SEC_PER_EXACT_UNIT", "SEC_PER_MC_STEP",
           "STRUCTURES_S", "MAX_Y_NODES", "y_nodes", "estimate_seconds", "laws", "VAR_LAWS", "measure", "regime_scan",
           "report_regime", "report", "markdown", "main", "STRUCT_MULTS", "structures", "chain_autocovariance",
           "structure_scan", "report_structures"]

PHIS = (0.5, 0.9, 0.97)
RATIOS = (10, 17, 30, 50, 100, 200)
TAU_MULTS = (0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8)        # regime scan: L/kappa in units of tau
TOLS = (0.10, 0.02)
MAX_SECONDS = 3600.0                                              # per exact walk


def _fail(msg, debug=False):
    """Bad input: one line and exit 2 (under outputs.cli too); with --debug the UsageError itself (traceback)."""
    if debug:
        raise outputs.UsageError(msg)
    print(f"dependent_errors.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


# the time model of the bound: seconds per unit of exact-numerics work (S-grid cells x steps x y-grid nodes^2)
# (units: (L/kappa) (L/kappa + 60) cells M^2) and per Monte Carlo walk step, fitted on 2 cores to a few sizes
# (phi 0.5-0.99, L/kappa 50-200) so that the estimate is 1-2x the measured time
SEC_PER_EXACT_UNIT = 1.2e-8
SEC_PER_MC_STEP = 3e-7
STRUCTURES_S = 80.0        # --structures: the three structures' exact numerics, measured 77 s on 2 quiet cores
MAX_Y_NODES = 1500          # phi beyond ~0.9955: the y grid alone (nodes^2 doubles) outgrows memory and time


def y_nodes(phi):
    """Nodes of exact.ar1_chain's y grid at AR(1) coefficient phi."""
    a = math.sqrt(1.0 - phi ** 2)
    return 2 * int(math.ceil(8.0 / min(0.25, a / 2))) + 1


MIN_TRIALS = 100                                            # Monte Carlo walks per cell, at least


def estimate_seconds(mu, s, phis, ratios, trials, cells, scan_cells, scan=True):
    """Seconds a run would take on 2 cores (within a factor ~3), from the work it does: per phi, the exact
    Markov-additive walk to the largest L/kappa (and to 8 tau for the regime scan) and the Monte Carlo walks.
    Raises UsageError naming --phi when a phi needs a y grid past MAX_Y_NODES."""
    total = 0.0
    for phi in phis:
        M = y_nodes(phi)
        if M > MAX_Y_NODES:
            raise outputs.UsageError(f"--phi {phi:g}: the exact numerics need a {M}-node y grid ({M}^2 transition "
                                     f"matrix); at most {MAX_Y_NODES} (|phi| <= 0.995)")
        r = max(ratios)
        total += SEC_PER_EXACT_UNIT * r * (r + 60) * cells * M * M
        if scan:
            tau = exact.ar1_long_run(gates.AR1LogitGate(mu, s, phi)).tau
            rs = max(TAU_MULTS) * tau
            total += SEC_PER_EXACT_UNIT * rs * (rs + 60) * scan_cells * M * M
        total += SEC_PER_MC_STEP * trials * sum(q + 20 for q in ratios)
    return total


def laws(lr: exact.LongRun, gamma, L):
    """Every law's E[W] and Var[W] at L. A law outside its regime (negative variance) gives None."""
    out = dict(mean=renewal.dependent_mean_N(lr.kappa, lr.sigma2_lr, L) - 1,
               lead=renewal.dependent_var(lr.kappa, lr.sigma2_lr, L),
               finite_n=renewal.finite_n_var(lr.kappa, gamma, L))
    for name, fn in (("bartlett", lambda: renewal.bartlett_var(lr.kappa, lr.sigma2_lr, lr.sum_k_gamma_k, L,
                                                              lr.kappa3_lr)),
                     ("second", lambda: renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr,
                                                                 lr.sum_k_gamma_k, L))):
        try:
            v = fn()
            out[name], out[name + "_in_regime"] = v.var, v.in_regime
        except renewal.OutsideRegime:
            out[name], out[name + "_in_regime"] = None, False
    return out


VAR_LAWS = ("lead", "bartlett", "second", "finite_n")


def _z(diff, se):
    """diff / se; NaN (null in the JSON) when the Monte Carlo saw no spread (se = 0)."""
    return diff / se if se > 0 else float("nan")


def check_gate(mu, s, phis, ratios):
    """Before the work: every (phi, L/kappa) cell has a threshold L = ratio * kappa whose eps = e^-L is a float
    in (0, 1), and increments that vary (the variance of W is what is measured). UsageError naming the value."""
    for phi in phis:
        if y_nodes(phi) > MAX_Y_NODES:
            continue                                    # estimate_seconds names this --phi
        try:
            lr = exact.ar1_long_run(gates.AR1LogitGate(mu, s, phi))
        except (ZeroDivisionError, FloatingPointError):         # sigma2 = 0: increments that do not vary
            raise outputs.UsageError(f"--mu {mu:g} --s {s:g} --phi {phi:g}: the increments -log g do not vary "
                                     "(variance 0 in float64): every window has the same length and Var[W], what "
                                     "this command measures, is 0; allowed: sd / mean >= 1e-4 (e.g. s >= 0.01)") \
                from None
        if not (math.isfinite(lr.kappa) and lr.kappa > 0):
            raise outputs.UsageError(f"--mu {mu:g} --s {s:g}: the mean increment kappa = E[-log g] is {lr.kappa:g}; "
                                     "allowed: gates whose kappa is a positive number (e.g. |mu| <= 10, s <= 20)")
        for r in ratios:
            L = r * lr.kappa
            if not 1e-6 <= L <= 700:
                raise outputs.UsageError(f"--mu {mu:g} --s {s:g} --ratios {r:g}: the threshold L = L/kappa * kappa = "
                                         f"{L:.3g} (eps = e^-L = {math.exp(-L):.3g}); allowed: L in [1e-6, 700], so "
                                         "that eps is a number in (0, 1) (e.g. |mu| <= 10, s <= 20)")
        cv = math.sqrt(max(lr.sigma2_lr, 0.0)) / lr.kappa
        if not cv >= 1e-4:
            raise outputs.UsageError(f"--mu {mu:g} --s {s:g} --phi {phi:g}: the increments -log g hardly vary "
                                     f"(long-run sd / mean = {cv:.2g}): every window has the same length and Var[W], "
                                     "what this command measures, is 0; allowed: sd / mean >= 1e-4 (e.g. s >= 0.01)")


def measure(mu, s, phis, ratios, trials, seed, cells, progress=True):
    rows = []
    bar = tqdm(total=len(phis) * (len(ratios) + 1), desc="dependent laws", disable=not progress, file=sys.stderr)
    for i, phi in enumerate(phis):
        g = gates.AR1LogitGate(mu, s, phi)
        lr = exact.ar1_long_run(g)
        Ls = [r * lr.kappa for r in ratios]
        gamma = g.autocovariance(np.arange(int(max(ratios)) + 2))       # (n_lags,) gamma_0 = sigma2
        t0 = time.time()
        passages = exact.markov_first_passage(g, L=Ls, cells_per_kappa=cells,
                                              max_seconds=MAX_SECONDS)
        t_exact = time.time() - t0
        bar.update()
        for j, (r, L, ex) in enumerate(zip(ratios, Ls, passages)):
            mc = gates.first_passage_mc(g, eps=math.exp(-L), trials=trials, seed=seed + 100 * i + j)
            row = dict(mu=mu, s=s, phi=phi, tau=lr.tau, L_over_kappa=r, L=L, L_over_kappa_tau=r / lr.tau,
                       kappa=lr.kappa, sigma2_lr=lr.sigma2_lr, kappa3_lr=lr.kappa3_lr,
                       sum_k_gamma_k=lr.sum_k_gamma_k, trials=trials, seed=seed + 100 * i + j,
                       mc_mean=mc.mean, mc_se_mean=mc.se_mean, mc_var=mc.var, mc_se_var=mc.se_var,
                       exact_mean=ex.mean, exact_var=ex.var, exact_err_mean=ex.err_mean, exact_err_var=ex.err_var,
                       exact_seconds_all_L=t_exact,
                       z_mean_mc_vs_exact=_z(mc.mean - ex.mean, mc.se_mean),
                       z_var_mc_vs_exact=_z(mc.var - ex.var, mc.se_var))
            lw = laws(lr, gamma, L)
            row["law_mean"] = lw["mean"]
            row["mean_err_vs_mc"] = lw["mean"] - mc.mean                         # tokens, SE = mc_se_mean
            row["mean_err_vs_exact"] = lw["mean"] - ex.mean
            for k in VAR_LAWS:
                v = lw[k]
                row[f"law_{k}"] = v
                if k in ("bartlett", "second"):
                    row[f"{k}_in_regime"] = lw[k + "_in_regime"]
                # law/MC - 1 with the delta-method SE (law/MC) SE_var/MC
                row[f"{k}_err_vs_mc"] = None if v is None else v / mc.var - 1
                row[f"{k}_se_vs_mc"] = None if v is None else v / mc.var * mc.se_var / mc.var
                row[f"{k}_err_vs_exact"] = None if v is None else v / ex.var - 1
            rows.append(row)
            bar.update()
    bar.close()
    return rows


def regime_scan(mu, s, phis, mults, cells, progress=True):
    """Exact numerics only (no noise): every law's error at L/kappa = m tau for m in mults, and per law and
    tolerance the smallest m from which on every scanned point is within it. The leading law's own
    thresholds lie beyond the scan; they follow from the O(1) term C_dep, which the second-order law's
    agreement with the exact numerics at the largest m confirms (its error is printed)."""
    out = []
    for phi in tqdm(phis, desc="regime scan", disable=not progress, file=sys.stderr):
        g = gates.AR1LogitGate(mu, s, phi)
        lr = exact.ar1_long_run(g)
        Ls = [m * lr.tau * lr.kappa for m in mults]
        gamma = g.autocovariance(np.arange(int(max(Ls) / lr.kappa) + 2))
        passages = exact.markov_first_passage(g, L=Ls, cells_per_kappa=cells,
                                              max_seconds=MAX_SECONDS)
        pts = []
        for m, L, ex in zip(mults, Ls, passages):
            lw = laws(lr, gamma, L)
            pts.append(dict(mult=m, L_over_kappa=L / lr.kappa, exact_mean=ex.mean, exact_var=ex.var,
                            exact_err_var=ex.err_var, mean_err=lw["mean"] - ex.mean,
                            **{f"{k}_err": None if lw[k] is None else lw[k] / ex.var - 1 for k in VAR_LAWS}))
        C = renewal.second_order_constant(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k)
        slope = lr.sigma2_lr / lr.kappa ** 2 * lr.tau           # d lead / d m, m = L/(kappa tau)
        thr = {}
        for k in VAR_LAWS:
            for tol in TOLS:
                ok = [p[f"{k}_err"] is not None and abs(p[f"{k}_err"]) <= tol for p in pts]
                bad = [i for i, o in enumerate(ok) if not o]
                thr[f"{k}_{tol:g}"] = (None if bad and bad[-1] == len(pts) - 1
                                       else mults[bad[-1] + 1] if bad else mults[0])
        for tol in TOLS:
            # lead / (lead + C) - 1 = -C / (lead + C): within tol once lead >= |C|/tol - C
            thr[f"lead_from_C_{tol:g}"] = max(abs(C) / tol - C, 0.0) / slope
        for tol in (0.1, 0.01):
            bad = [i for i, p in enumerate(pts) if abs(p["mean_err"]) > tol]
            thr[f"mean_{tol:g}"] = None if bad and bad[-1] == len(pts) - 1 else mults[bad[-1] + 1] if bad else mults[0]
        out.append(dict(phi=phi, tau=lr.tau, C_dep=C, cells=cells, points=pts, thresholds=thr))
    return out


def report_regime(scan):
    print("\nRegime scan against the exact numerics (no Monte Carlo): errors in % at L/kappa = m tau.")
    for sc in scan:
        print(f"phi = {sc['phi']:g} (tau = {sc['tau']:.2f}, C_dep = {sc['C_dep']:.2f})")
        print(f"  {'m':>5s} {'L/k':>7s} {'exact Var':>10s} " + " ".join(f"{k:>8s}" for k in VAR_LAWS)
              + f" {'mean':>8s}")
        for p in sc["points"]:
            print(f"  {p['mult']:5g} {p['L_over_kappa']:7.1f} {p['exact_var']:10.2f} "
                  + " ".join(f"{_pct(p[f'{k}_err']):>8s}" for k in VAR_LAWS) + f" {p['mean_err']:+8.3f}")
        t = sc["thresholds"]
        print("\n".join(outputs.fill_items("  within tolerance from L/kappa = m tau on (None: not within the scan): ",
                                            [f"{k} {v if v is None else f'{v:.3g}'}" for k, v in t.items()],
                                            indent=" " * 4)))


def _pct(x):
    return "   neg." if x is None else f"{100 * x:+7.1f}"


def report(rows):
    print(outputs.fill("Errors of the dependent-increment laws, law/reference - 1 in % (variance), law - reference "
                       "in tokens (mean). 'neg.' = the law's variance is <= 0 there (OutsideRegime)."))
    hdr = (f"{'phi':>5s} {'tau':>6s} {'L/k':>5s} {'L/k/tau':>7s} {'MC Var[W]':>15s} {'exact Var':>10s} {'z':>5s} "
           f"{'lead':>7s} {'Bartl.':>7s} {'second':>7s} {'fin-n':>7s} | {'mean-MC':>13s} {'mean-ex':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        mc = f"{r['mc_var']:.2f}±{r['mc_se_var']:.2f}"
        mean = f"{r['mean_err_vs_mc']:+.3f}±{r['mc_se_mean']:.3f}"
        print(f"{r['phi']:5.2f} {r['tau']:6.2f} {r['L_over_kappa']:5g} {r['L_over_kappa_tau']:7.2f} "
              f"{mc:>15s} {r['exact_var']:10.3f} {r['z_var_mc_vs_exact']:+5.1f} "
              + " ".join(_pct(r[f"{k}_err_vs_exact"]) for k in VAR_LAWS)
              + f" | {mean:>13s} {r['mean_err_vs_exact']:+8.4f}")
    print(outputs.fill("Variance errors above are against the exact numerics; against Monte Carlo (law/MC - 1 ± SE) "
                       "in the JSON."))


def markdown(saved):
    """Markdown tables of a saved run (README): law/MC - 1 in % with the Monte Carlo SE, and thresholds."""
    rows = saved["rows"]
    print("| phi | tau | L/kappa | L/(kappa tau) | Var[W] MC ± SE | exact | leading | Bartlett | second-order | "
          "finite-n | SE (%) | mean law - MC |")
    print("|" + " --- |" * 12)
    for r in rows:
        se = 100 * r["mc_se_var"] / r["mc_var"]
        cells = " | ".join(_pct(r[f"{k}_err_vs_mc"]).strip() for k in VAR_LAWS)
        print(f"| {r['phi']:g} | {r['tau']:.1f} | {r['L_over_kappa']:g} | {r['L_over_kappa_tau']:.2f} | "
              f"{r['mc_var']:.2f} ± {r['mc_se_var']:.2f} | {r['exact_var']:.2f} | {cells} | {se:.2f} | "
              f"{r['mean_err_vs_mc']:+.3f} ± {r['mc_se_mean']:.3f} |")
    scan = saved.get("regime_scan") or []
    if scan:
        print("\n| phi | tau | " + " | ".join(f"{k} {100 * t:g}%" for k in VAR_LAWS for t in TOLS)
              + " | mean 0.1 | mean 0.01 |")
        print("|" + " --- |" * (4 + 2 * len(VAR_LAWS)))
        for sc in scan:
            t = sc["thresholds"]
            def f(v):
                return "> 8" if v is None else f"{v:.3g}"
            cells = []
            for k in VAR_LAWS:
                for tol in TOLS:
                    v = t[f"{k}_{tol:g}"]
                    cells.append(f"{t[f'lead_from_C_{tol:g}']:.3g}*" if k == "lead" and v is None else f(v))
            print(f"| {sc['phi']:g} | {sc['tau']:.1f} | " + " | ".join(cells)
                  + f" | {f(t['mean_0.1'])} | {f(t['mean_0.01'])} |")


ROW_FIELDS = ("phi", "tau", "L_over_kappa", "L_over_kappa_tau", "mc_var", "mc_se_var", "exact_var", "mean_err_vs_mc",
              "mc_se_mean")


def _markdown_text(saved, path):
    """markdown(saved) as text, its fields checked first: a file that is not this command's --json is refused in
    one line naming the field, and nothing is printed."""
    def bad(field, want):
        return outputs.UsageError(f"--markdown {path}: not a results JSON of this command (--json): {field} {want}")

    def number(v, none=False):
        return (v is None and none) or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    if not isinstance(saved, dict):
        raise bad("the file", f"is a JSON {type(saved).__name__}, not an object")
    rows = saved.get("rows")
    if not isinstance(rows, list) or not rows:
        raise bad("field rows", "is missing or not a non-empty list")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise bad(f"rows[{i}]", "is not an object")
        for k in ROW_FIELDS + tuple(f"{law}_err_vs_mc" for law in VAR_LAWS):
            if not number(r.get(k), none=k.endswith("_err_vs_mc")):
                raise bad(f"rows[{i}].{k}", "is missing or not a finite number")
        if r["mc_var"] == 0:
            raise bad(f"rows[{i}].mc_var", "is 0 (the SE in % divides by it)")
    scan = saved.get("regime_scan") or []
    if not isinstance(scan, list):
        raise bad("field regime_scan", "is not a list")
    keys = [f"{k}_{t:g}" for k in VAR_LAWS for t in TOLS] + [f"lead_from_C_{t:g}" for t in TOLS] + ["mean_0.1",
                                                                                                    "mean_0.01"]
    for i, sc in enumerate(scan):
        t = sc.get("thresholds") if isinstance(sc, dict) else None
        if not (isinstance(t, dict) and number(sc.get("phi")) and number(sc.get("tau"))):
            raise bad(f"regime_scan[{i}]", "needs numbers phi, tau and an object thresholds")
        for k in keys:
            if not number(t.get(k), none=not k.startswith("lead_from_C")):
                raise bad(f"regime_scan[{i}].thresholds.{k}", "is missing or not a number")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        markdown(saved)
    return buf.getvalue()


@outputs.scoped
def main(argv=None):
    p = outputs.parser("Measure the dependent-increment window laws against Monte Carlo "
                       "and exact Markov-additive numerics (AR(1)-logit gates).")
    p.add_argument("--mu", type=float, default=2.0, help="logit mean")
    p.add_argument("--s", type=float, default=0.5, help="logit scale > 0")
    p.add_argument("--phi", type=float, nargs="+", default=list(PHIS), help="AR(1) coefficients in (-1, 1)")
    p.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="L/kappa values > 0")
    p.add_argument("--trials", type=int, default=400_000, help="Monte Carlo walks per cell")
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed")
    p.add_argument("--cells", type=int, default=8, help="exact numerics: S-grid cells per kappa")
    p.add_argument("--scan-cells", type=int, default=4, help="regime scan: S-grid cells per kappa")
    p.add_argument("--no-scan", action="store_true", help="skip the regime scan (exact numerics up to 8 tau)")
    p.add_argument("--structures", action="store_true",
                   help="also measure every law on three dependence structures (AR(1), regime switching, a rotating "
                        "chain with sign-changing correlations) against the exact numerics (~40 s)")
    p.add_argument("--json", default=None, help="write the rows here (atomic; an existing file only with --force)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--max-minutes", type=float, default=30.0,
                   help="refuse a run whose estimated time (printed at the start) is longer")
    outputs.add_common(p)
    p.add_argument("--markdown", metavar="JSON", help="print markdown tables of a saved run and exit")
    a = p.parse_args(argv)
    try:
        if a.markdown:
            run_flags = [f"--{d.replace('_', '-')}" for d in ("mu", "s", "phi", "ratios", "trials", "seed", "cells",
                                                             "scan_cells", "no_scan", "structures", "json",
                                                             "no_progress", "max_minutes", "force")
                         if getattr(a, d) != p.get_default(d)]
            if run_flags:
                raise outputs.UsageError(f"--markdown prints the tables of a saved run and measures nothing: "
                                         f"{', '.join(run_flags)} would be ignored; drop {run_flags[0]} or --markdown")
            text = _markdown_text(outputs.json_input("--markdown", a.markdown), a.markdown)
            print(text, end="")
            return
        if not (a.s > 0 and math.isfinite(a.s)) or not math.isfinite(a.mu):
            raise outputs.UsageError(f"--mu must be finite and --s positive; got mu={a.mu}, s={a.s}")
        if any(not (-1 < f < 1) for f in a.phi):   # (also NaN)
            raise outputs.UsageError(f"--phi values must lie in (-1, 1); got {a.phi}")
        for flag, vals in (("--phi", a.phi), ("--ratios", a.ratios)):
            twice = [v for i, v in enumerate(vals) if v in vals[:i]]
            if twice:
                raise outputs.UsageError(f"{flag}: {twice[0]:g} is listed twice (its cells would be measured twice); "
                                         "list each once")
        if any(not (r > 0 and math.isfinite(r)) for r in a.ratios):
            raise outputs.UsageError(f"--ratios must be positive; got {a.ratios}")
        if a.trials < MIN_TRIALS:
            raise outputs.UsageError(f"--trials must be >= {MIN_TRIALS} (the Monte Carlo variance of W and its "
                                     f"standard error need many walks); got {a.trials}")
        if a.seed < 0:
            raise outputs.UsageError(f"--seed must be an integer >= 0; got {a.seed}")
        if a.cells < 2 or a.scan_cells < 2:
            raise outputs.UsageError(f"--cells and --scan-cells must be >= 2; got {a.cells}, {a.scan_cells}")
        if not math.isfinite(a.max_minutes) or a.max_minutes <= 0:
            raise outputs.UsageError(f"--max-minutes must be a positive number; got {a.max_minutes}")
        check_gate(a.mu, a.s, a.phi, a.ratios)                # eps of every cell a float in (0, 1), Var[W] > 0
        est = estimate_seconds(a.mu, a.s, a.phi, a.ratios, a.trials, a.cells, a.scan_cells, scan=not a.no_scan)
        est += STRUCTURES_S if a.structures else 0.0       # the three structures: a fixed amount of work
        if est > 60 * a.max_minutes:
            raise outputs.UsageError(f"this run would take about {est / 60:.1f} min (--phi, --ratios, --cells, "
                                     f"--scan-cells, --trials and --structures set the work); the bound is "
                                     f"--max-minutes {a.max_minutes:g}: raise it to run anyway")
        if a.json:                                             # before the work: folder, permissions, --force
            a.json = outputs.check_writable(a.json, force=a.force, what="--json")
        print(f"estimated {est:.0f} s on 2 cores (bound: --max-minutes {a.max_minutes:g})", file=sys.stderr)
    except outputs.UsageError as exc:
        _fail(str(exc), a.debug)
    t0 = time.time()
    rows = measure(a.mu, a.s, a.phi, a.ratios, a.trials, a.seed, a.cells, progress=not a.no_progress)
    report(rows)
    scan = [] if a.no_scan else regime_scan(a.mu, a.s, a.phi, TAU_MULTS, a.scan_cells, progress=not a.no_progress)
    if scan:
        report_regime(scan)
    struct = structure_scan(progress=not a.no_progress) if a.structures else []
    if struct:
        report_structures(struct)
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        outputs.write_result(a.json, kind="dependent-errors",
                             obj=dict(command=" ".join(["python dependent_errors.py"] + (argv or sys.argv[1:])),
                                        seconds=time.time() - t0, rows=rows, regime_scan=scan,
                                        structures=struct))



# ----------------------------------------------------------------------------- three dependence structures

STRUCT_MULTS = (1, 2, 3, 5, 10)                             # L/kappa in units of max(tau, 1)


def structures():
    """Three dependence structures, each (name, kind, object): AR(1) logits (positive geometric correlation),
    regime switching (a sticky two-state chain: positive correlation with a large C_dep > 0) and a rotating
    three-state chain (correlations that change sign with the lag)."""
    ln = gates.LogitNormalGate
    regime = (np.array([[0.97, 0.03], [0.05, 0.95]]), [ln(3.0, 0.3), ln(0.5, 0.8)])
    rot = (np.array([[0.05, 0.9, 0.05], [0.05, 0.05, 0.9], [0.9, 0.05, 0.05]]),
           [ln(3.0, 0.3), ln(1.5, 0.5), ln(0.3, 0.8)])
    return [("AR(1) logits, phi = 0.9", "ar1", gates.AR1LogitGate(2, 0.5, 0.9)),
            ("regime switching (2 states)", "chain", regime),
            ("rotating chain (3 states, sign-changing rho)", "chain", rot)]


def chain_autocovariance(P, laws, n_lags):
    """gamma_k, k = 0..n_lags - 1, of X for a stationary chain with per-state laws (from the law)."""
    pi = markov.stationary(P)
    mom = [g.moments() for g in laws]
    mj = np.array([m.kappa for m in mom])
    vj = np.array([m.sigma2 for m in mom])
    md = mj - pi @ mj
    out = [float(pi @ (md * md) + pi @ vj)]
    v = md.copy()
    for _ in range(1, n_lags):
        v = P @ v
        out.append(float(pi @ (md * v)))
    return np.array(out)


def structure_scan(mults=STRUCT_MULTS, cells=8, progress=True):
    """Every law's error against the exact Markov-additive numerics on the three structures at L/kappa =
    m max(tau, 1). Returns rows (dicts)."""
    rows = []
    for name, kind, obj in structures():
        if kind == "ar1":
            lr = exact.ar1_long_run(obj)
        else:
            lr = markov.chain_long_run(*obj)
        unit = max(lr.tau, 1.0)
        Ls = [m * unit * lr.kappa for m in mults]
        n_lags = int(max(Ls) / lr.kappa) + 2
        if kind == "ar1":
            gamma = obj.autocovariance(np.arange(n_lags))
            passages = exact.markov_first_passage(obj, L=Ls, cells_per_kappa=cells,
                                                  progress=progress, max_seconds=MAX_SECONDS)
            ex = [(p.mean, p.var, p.err_mean, p.err_var) for p in passages]
        else:
            gamma = chain_autocovariance(*obj, n_lags)
            passages = markov.markov_chain_first_passage(*obj, L=Ls, cells_per_kappa=cells, progress=progress,
                                                         max_seconds=MAX_SECONDS)
            ex = [(p.mean, p.var, p.mean_err, p.var_err) for p in passages]
        C = renewal.second_order_constant(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k)
        for m, L, (em, evar, eme, eve) in zip(mults, Ls, ex):
            lw = laws(lr, gamma, L)
            row = dict(structure=name, tau=lr.tau, C_dep=C, mult=m, L_over_kappa=L / lr.kappa, exact_mean=em,
                       exact_var=evar, exact_err_mean=eme, exact_err_var=eve, mean_err=lw["mean"] - em,
                       bartlett_in_regime=lw["bartlett_in_regime"], second_in_regime=lw["second_in_regime"])
            for k in VAR_LAWS:
                row[f"{k}_err"] = None if lw[k] is None else lw[k] / evar - 1
                row[f"{k}_err_unc"] = None if lw[k] is None else lw[k] * eve / evar ** 2   # from the exact error
            rows.append(row)
    return rows


def report_structures(rows):
    print("\n" + outputs.fill("Three dependence structures against the exact Markov-additive numerics: law/exact - "
                              "1 in %, at L/kappa = m max(tau, 1); [r] = in_regime; each structure's name on its "
                              "own line."))
    print(f"  {'tau':>6s} {'C_dep':>8s} {'m':>3s} {'L/k':>7s} {'exact Var':>14s} "
          + " ".join(f"{k:>9s}" for k in VAR_LAWS) + f" {'mean':>8s}")
    name = None
    for r in rows:
        if r["structure"] != name:
            name = r["structure"]
            print(name)
        cells = []
        for k in VAR_LAWS:
            c = _pct(r[f"{k}_err"]).strip()
            if k in ("bartlett", "second") and r[f"{k}_in_regime"]:
                c += "[r]"
            cells.append(f"{c:>9s}")
        print(f"  {r['tau']:6.2f} {r['C_dep']:8.2f} {r['mult']:3g} {r['L_over_kappa']:7.1f} "
              f"{r['exact_var']:8.2f}±{r['exact_err_var']:<5.2g} " + " ".join(cells) + f" {r['mean_err']:+8.3f}")


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
