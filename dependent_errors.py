"""Measured errors of the dependent-increment window laws on AR(1)-logit gates.

For gate z = mu + s y, y a stationary AR(1) with coefficient phi, X = softplus(-z), and each L/kappa in a
grid, this compares the laws of renewal.py with (a) first-passage Monte Carlo (forget.first_passage_mc,
SEs of mean and variance) and (b) the exact Markov-additive numerics (renewal.markov_first_passage).
Law moments come from the gate's law (Hermite sums, the chain's fundamental matrix), never from samples.

    python dependent_errors.py --json results/dependent/errors.json      # about 2 minutes on 2 cores

Laws: mean  E[W] = L/kappa - 1/2 + sigma_LR^2/(2 kappa^2);  lead  sigma_LR^2 L/kappa^3;
bartlett  lead - 2 sum k gamma_k/kappa^2;  second  lead + C_dep (renewal.second_order_constant);
finite_n  Var(S_n)/kappa^2 at n = L/kappa. Errors are law/reference - 1 (mean: law - reference, in tokens).
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

import forget
import renewal

PHIS = (0.5, 0.9, 0.97)
RATIOS = (10, 17, 30, 50, 100, 200)


def _fail(msg):
    print(f"dependent_errors.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def laws(lr: renewal.LongRun, gamma, L):
    """Every law's E[W] and Var[W] at L. A law outside its regime (negative variance) gives None."""
    out = dict(mean=renewal.dependent_mean(lr.kappa, lr.sigma2_lr, L) - 1,
               lead=renewal.dependent_var(lr.kappa, lr.sigma2_lr, L),
               finite_n=renewal.finite_n_var(lr.kappa, gamma, L))
    for name, fn in (("bartlett", lambda: renewal.bartlett_var(lr.kappa, lr.sigma2_lr, lr.sum_k_gamma_k, L)),
                     ("second", lambda: renewal.second_order_var(lr.kappa, lr.sigma2_lr, lr.kappa3_lr,
                                                                 lr.sum_k_gamma_k, L))):
        try:
            v = fn()
            out[name], out[name + "_in_regime"] = v.var, v.in_regime
        except renewal.OutsideRegime:
            out[name], out[name + "_in_regime"] = None, False
    return out


VAR_LAWS = ("lead", "bartlett", "second", "finite_n")


def measure(mu, s, phis, ratios, trials, seed, cells, progress=True):
    from tqdm import tqdm
    rows = []
    bar = tqdm(total=len(phis) * (len(ratios) + 1), desc="dependent laws", disable=not progress, file=sys.stderr)
    for i, phi in enumerate(phis):
        g = forget.AR1LogitGate(mu, s, phi)
        lr = renewal.ar1_long_run(g)
        Ls = [r * lr.kappa for r in ratios]
        gamma = g.autocovariance(np.arange(int(max(ratios)) + 2))       # (n_lags,) gamma_0 = sigma2
        t0 = time.time()
        exact = renewal.markov_first_passage(g, [math.exp(-L) for L in Ls], cells_per_kappa=cells)
        t_exact = time.time() - t0
        bar.update()
        for j, (r, L, ex) in enumerate(zip(ratios, Ls, exact)):
            mc = forget.first_passage_mc(g, math.exp(-L), trials, seed=seed + 100 * i + j)
            row = dict(mu=mu, s=s, phi=phi, tau=lr.tau, L_over_kappa=r, L=L, L_over_kappa_tau=r / lr.tau,
                       kappa=lr.kappa, sigma2_lr=lr.sigma2_lr, kappa3_lr=lr.kappa3_lr,
                       sum_k_gamma_k=lr.sum_k_gamma_k, trials=trials, seed=seed + 100 * i + j,
                       mc_mean=mc.mean, mc_se_mean=mc.se_mean, mc_var=mc.var, mc_se_var=mc.se_var,
                       exact_mean=ex.mean, exact_var=ex.var, exact_err_mean=ex.err_mean, exact_err_var=ex.err_var,
                       exact_seconds_all_L=t_exact,
                       z_mean_mc_vs_exact=(mc.mean - ex.mean) / mc.se_mean,
                       z_var_mc_vs_exact=(mc.var - ex.var) / mc.se_var)
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


def _pct(x):
    return "   neg." if x is None else f"{100 * x:+7.1f}"


def report(rows):
    print("Errors of the dependent-increment laws, law/reference - 1 in % (variance), law - reference in tokens "
          "(mean). 'neg.' = the law's variance is <= 0 there (OutsideRegime).")
    hdr = (f"{'phi':>5s} {'tau':>6s} {'L/k':>5s} {'L/k/tau':>7s} {'MC Var[W]':>16s} {'exact Var':>10s} {'z':>5s} "
           f"{'lead':>7s} {'Bartl.':>7s} {'second':>7s} {'fin-n':>7s} | {'mean-MC':>14s} {'mean-ex':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['phi']:5.2f} {r['tau']:6.2f} {r['L_over_kappa']:5g} {r['L_over_kappa_tau']:7.2f} "
              f"{r['mc_var']:9.2f}±{r['mc_se_var']:6.2f} {r['exact_var']:10.3f} {r['z_var_mc_vs_exact']:+5.1f} "
              + " ".join(_pct(r[f"{k}_err_vs_exact"]) for k in VAR_LAWS)
              + f" | {r['mean_err_vs_mc']:+7.3f}±{r['mc_se_mean']:.3f} {r['mean_err_vs_exact']:+8.4f}")
    print("Variance errors above are against the exact numerics; against Monte Carlo (law/MC - 1 ± SE) in the JSON.")


def write_json(path, obj, force):
    if os.path.exists(path) and not force:
        _fail(f"--json {path} exists; pass --force to overwrite it")
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    p = argparse.ArgumentParser(description="Measure the dependent-increment window laws against Monte Carlo "
                                            "and exact Markov-additive numerics (AR(1)-logit gates).")
    p.add_argument("--mu", type=float, default=2.0, help="logit mean (default 2)")
    p.add_argument("--s", type=float, default=0.5, help="logit scale > 0 (default 0.5)")
    p.add_argument("--phi", type=float, nargs="+", default=list(PHIS), help="AR(1) coefficients in (-1, 1)")
    p.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="L/kappa values > 0")
    p.add_argument("--trials", type=int, default=400_000, help="Monte Carlo walks per cell (default 400000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cells", type=int, default=8, help="exact numerics: S-grid cells per kappa (default 8)")
    p.add_argument("--json", default=None, help="write the rows here (atomic; refuses to overwrite)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    if not (a.s > 0 and math.isfinite(a.s)) or not math.isfinite(a.mu):
        _fail(f"--mu must be finite and --s positive; got mu={a.mu}, s={a.s}")
    if any(not (-1 < f < 1) for f in a.phi):
        _fail(f"--phi values must lie in (-1, 1); got {a.phi}")
    if any(not (r > 0 and math.isfinite(r)) for r in a.ratios):
        _fail(f"--ratios must be positive; got {a.ratios}")
    if a.trials < 2:
        _fail(f"--trials must be >= 2; got {a.trials}")
    if a.cells < 2:
        _fail(f"--cells must be >= 2; got {a.cells}")
    if a.json and os.path.exists(a.json) and not a.force:
        _fail(f"--json {a.json} exists; pass --force to overwrite it")
    t0 = time.time()
    rows = measure(a.mu, a.s, a.phi, a.ratios, a.trials, a.seed, a.cells, progress=not a.no_progress)
    report(rows)
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        write_json(a.json, dict(command=" ".join(["python dependent_errors.py"] + (argv or sys.argv[1:])),
                                seconds=time.time() - t0, rows=rows), a.force)


if __name__ == "__main__":
    main()
