"""The window laws against the exact first-passage numerics and Monte Carlo: the `renewal` command's tables.

  synthetic_table, print_synthetic   the seed's gates and ALiBi: Monte Carlo vs the laws vs the exact numerics
                                     (`python forget.py --synthetic`)
  scan, main                         the laws' errors against the exact numerics over a scan of eps, and the
                                     approach to ALiBi's lattice window (`python renewal.py`)
  EPS_SCAN                           the thresholds scanned by default here and by the per-head verdict

The laws are in renewal.py, the exact numerics in exact.py, Monte Carlo in forget.py; this module only
compares them.
"""
import functools
import math
import sys
import textwrap

from tqdm import tqdm

from foxwindow import outputs
from foxwindow.laws import exact, gates, renewal
from foxwindow.laws.gates import threshold
from foxwindow.laws.renewal import alibi_window, leading_var, renewal_mean, smith_C, smith_var

__all__ = ["synthetic_table", "print_synthetic", "EPS_SCAN", "scan", "main", "run"]


def synthetic_table(eps=1e-3, trials=200_000, seed=0, progress=True):
    """Rows for the seed's gates and ALiBi: Monte Carlo vs laws vs exact numerics."""
    seed_gates = list(gates.SEED_GATES) + [gates.ConstantGate(m) for m in gates.ALIBI_SLOPES]
    rows = []
    for i, g in enumerate(tqdm(seed_gates, desc="first passage", disable=not progress, file=sys.stderr)):
        mc = gates.first_passage_mc(g, eps=eps, trials=trials, seed=seed + i)
        ex = exact.exact_first_passage(g, eps=eps)
        L = threshold(eps)
        m = g.moments()
        rows.append(dict(gate=str(g), eps=eps, trials=trials,
                         mc_mean_W=mc.mean, se_mean=mc.se_mean, mc_var_W=mc.var, se_var=mc.se_var,
                         law_mean_W=renewal_mean(m, L) - 1 if not g.lattice else float("nan"),
                         law_var_leading=leading_var(m, L),
                         law_var_smith=smith_var(m, L) if not g.lattice else float("nan"),
                         exact_mean_W=ex.mean, exact_var_W=ex.var,
                         z_mean=(mc.mean - ex.mean) / mc.se_mean if mc.se_mean > 0 else 0.0,
                         z_var=(mc.var - ex.var) / mc.se_var if mc.se_var > 0 else 0.0))
    return rows


def _fit(x, width):
    """x in at most `width` characters: 6 significant digits, fewer for a large number (nan as 'nan')."""
    for p in range(6, 0, -1):
        t = f"{x:.{p}g}"
        if len(t) <= width:
            return t
    return t


def print_synthetic(rows, file=None):
    """The synthetic table within 120 columns, numbers of any size (eps down to 1e-300) in their columns."""
    out = functools.partial(print, file=file or sys.stdout)
    out(f"eps-windows W = N - 1 (largest distance with decay >= eps), eps = {rows[0]['eps']:g}, "
        f"{rows[0]['trials']} trials;")
    out("laws: mean L/k + mu2/(2k^2) - 1, variance s^2 L/k^3 (+ Smith C); z: Monte Carlo - exact in its SEs")
    g = max(12, min(29, max(len(r["gate"]) for r in rows)))

    def pm(v, se):                                  # the SE to 2 significant digits
        return f"{_fit(v, 8)}±{se:.2g}"

    def z(v):
        return f"{v:5.2f}" if abs(v) < 99.995 else _fit(v, 5)
    hdr = (f"{'gate':{g}s} {'MC E[W]':>16s} {'law':>8s} {'exact':>8s} {'MC Var[W]':>16s} {'leading':>8s} "
           f"{'Smith':>8s} {'exact':>8s} {'z(E)':>5s} {'z(V)':>5s}")
    out(hdr)
    out("-" * len(hdr))
    for r in rows:
        name = r["gate"] if len(r["gate"]) <= g else r["gate"][:g - 1] + "…"
        out(f"{name:{g}s} {pm(r['mc_mean_W'], r['se_mean']):>16s} {_fit(r['law_mean_W'], 8):>8s} "
            f"{_fit(r['exact_mean_W'], 8):>8s} {pm(r['mc_var_W'], r['se_var']):>16s} "
            f"{_fit(r['law_var_leading'], 8):>8s} {_fit(r['law_var_smith'], 8):>8s} {_fit(r['exact_var_W'], 8):>8s} "
            f"{z(r['z_mean']):>5s} {z(r['z_var']):>5s}")
    out("ALiBi rows: the laws do not apply to a lattice increment (nan); exact W = floor(L/m), Var = 0.")


# ----------------------------------------------------------------------------- command line

# the thresholds scanned by default here and by the per-head verdict (heads.py): 0.5 .. 1e-6
EPS_SCAN = (0.5, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6)


def scan(gate_list, eps_list=EPS_SCAN, progress=True):
    rows = []
    jobs = [(g, e) for g in gate_list for e in eps_list]
    for g, eps in tqdm(jobs, desc="exact numerics", disable=not progress, file=sys.stderr):
        m, L = g.moments(), threshold(eps)
        ex = exact.exact_first_passage(g, eps=eps)
        C = smith_C(m)
        rows.append(dict(gate=str(g), eps=eps, L=L, kappa=m.kappa, sigma2=m.sigma2,
                         exact_mean_W=ex.mean, exact_var_W=ex.var, exact_mean_err=ex.mean_err,
                         exact_var_err=ex.var_err,
                         err_mean=renewal_mean(m, L) - 1 - ex.mean,
                         err_leading=leading_var(m, L) - ex.var, err_smith=smith_var(m, L) - ex.var,
                         C=C, lead_term=leading_var(m, L),
                         # L beyond which the leading law's relative error |C|/Var is below 1e-3
                         L_rel_1e3=max(0.0, (abs(C) / 1e-3 - C) * m.kappa ** 3 / m.sigma2)))
    return rows


def _eps_text(e):
    """eps for the table: 3 significant digits, more where those would show another eps (0.999999, not 1), up to 8
    characters (an eps that needs 17 digits is shown to 3; --json keeps it whole)."""
    for d in (3, 6, 17):
        t = f"{e:.{d}g}"
        if float(t) == e:
            return t if len(t) <= 8 else f"{e:.3g}"
    return f"{e:.3g}"


def main(argv=None):
    p = outputs.parser("Window laws against exact first-passage numerics.")
    p.add_argument("--eps", type=float, nargs="+", default=list(EPS_SCAN), help="decay thresholds in (0, 1)")
    p.add_argument("--json", default=None, help="write the rows as JSON to this path")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    outputs.add_common(p)
    a = p.parse_args(argv)
    for e in a.eps:
        outputs.eps_arg("--eps", e)
        if e < sys.float_info.min:      # the rows record eps: a subnormal one would not read back as its L
            raise outputs.UsageError(f"--eps {e:.3g} is below the smallest normal float64 "
                                     f"({sys.float_info.min:.3g}), where the rows could not record it; give eps in "
                                     f"[{sys.float_info.min:.3g}, 1)")
    a.eps = list(dict.fromkeys(a.eps))              # a repeated eps is one row (the rows are shown to 3 digits)
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    seed_gates = list(gates.SEED_GATES) + [gates.BetaGate(20, 1)]
    rows = scan(seed_gates, a.eps, progress=not a.no_progress)
    print(textwrap.fill("Windows W = N - 1. err = law - exact. 'lead' = sigma^2 L/kappa^3; expansions need lead >~ "
                        f"{renewal.LATTICE_VAR:g} ('!': below it, the expansions break down). 'exact err' = the exact "
                        "numerics' own error estimate (larger of mean, variance).", 120))
    hdr = (f"{'gate':28s} {'eps':>8s} {'E[W] exact':>11s} {'err mean':>9s} {'Var exact':>10s} "
           f"{'err lead':>9s} {'C':>8s} {'err Smith':>9s} {'lead':>8s} {'exact err':>9s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        flag = " !" if r["lead_term"] < renewal.LATTICE_VAR else ""            # (a flag within 120 columns)
        print(f"{r['gate']:28s} {_eps_text(r['eps']):>8s} {r['exact_mean_W']:11.5f} {r['err_mean']:9.1e} "
              f"{r['exact_var_W']:10.5f} "
              f"{r['err_leading']:9.2e} {r['C']:8.4f} {r['err_smith']:9.1e} {r['lead_term']:8.3f} "
              f"{max(r['exact_mean_err'], r['exact_var_err']):9.1e}{flag}")
    print("\nLeading law relative error below 1e-3 once L exceeds (|C|/1e-3 - C) kappa^3/sigma^2:")
    for g in seed_gates:
        r = next(r for r in rows if r["gate"] == str(g))
        print(f"  {str(g):28s} L > {r['L_rel_1e3']:.1f}  (eps < {math.exp(-r['L_rel_1e3']):.1e})")
    print("\n" + textwrap.fill("Near the lattice limit (gamma increments, mean 0.05, eps = 1e-3): the distribution "
                               "converges to ALiBi's W = floor(L/m) = %d while the expansions break down"
                               % alibi_window(0.05, 1e-3), 120))
    print(f"{'cv':>6s} {'P(W=138)':>9s} {'E[W]':>9s} {'Var[W]':>9s} {'lead':>8s} {'Smith':>8s}")
    for cv, pw, mean, var in exact.alibi_limit(0.05, 1e-3):
        k = 1 / cv ** 2
        m = gates.GammaIncrement(k, 0.05 / k).moments()
        L = threshold(1e-3)
        print(f"{cv:6.2f} {pw:9.4f} {mean:9.3f} {var:9.4f} {leading_var(m, L):8.4f} {smith_var(m, L):8.4f}")
    if a.json:
        outputs.write_result(a.json, rows, "renewal")


def run(argv=None):
    """The `renewal` console command, `python renewal.py` and `python -m foxwindow.laws.lawtable`: main with one-line
    errors."""
    return outputs.cli(main, argv)


if __name__ == "__main__":
    sys.exit(run())
