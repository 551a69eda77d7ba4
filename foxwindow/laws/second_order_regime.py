"""Where the second-order dependent law holds, from what drives its error: its error against exact numerics on
many dependence structures, as a function of the walk's length n = L/kappa in units of each candidate
correlation length, and the one that collapses the curves.

The law (renewal.second_order_var): Var[W] ~ sigma_LR^2 L/kappa^3 + C_dep. Candidate units of n:

  tau        1 + 2 sum rho_k (the integrated time of X; the earlier rule, n >= 3 max(tau, 1))
  t_relax    1/(1 - |lambda_2|): the chain's slowest relaxation (AR(1): 1/(1 - phi))
  t_abs      1 + 2 sum |rho_k|
  ell_B      2 |sum_k k gamma_k| / sigma_LR^2: the first moment of the autocovariance (Bartlett's length)
  ell        |C_dep| kappa^2 / sigma_LR^2: the law's own O(1) term in steps (|C_dep| / lead = ell / n)
  ell_abs    (|C_smith| + |C_bartlett|) kappa^2 / sigma_LR^2: the same without cancellation between its parts
             (C_smith = 1/12 + 5/4 c^2 - 2/3 kappa3_LR/kappa^3, C_bartlett = -2 sum k gamma_k / kappa^2)
  ell_max    max(ell, ell_B): the second-order law's correlation length (dependence.second_order_inputs)

Structures: finite Markov-additive chains run through markov.markov_chain_first_passage (exact; AR(1) logits
through exact.markov_first_passage), and GARCH(1,1) logits by Monte Carlo (no finite chain; its law inputs
estimated from a long simulation with dependence.second_order_inputs, their SE carried into the error). Each has
a role: "chosen" (the rule's constants are read from these) or "held out" (the rule is checked on them).

    python -m foxwindow second-order-regime --json results/dependent/regime.json     # a few minutes on 2 cores
"""
import itertools
import math
import sys
import time

import numpy as np

from foxwindow import outputs
from foxwindow.heads import dependence
from foxwindow.laws import exact, gates, markov, renewal
from foxwindow.laws.dependent_errors import chain_autocovariance

__all__ = ["N_POINTS", "TOLS", "UNITS", "MAX_SECONDS", "birth_death", "telegraph", "Garch", "chain_paths", "paths",
           "structures", "lengths", "curve", "thresholds", "report", "main"]

N_POINTS = 24          # n = L/kappa on a geometric grid from half the shortest length to 12 x the longest
TOLS = (0.10, 0.05, 0.03, 0.01)
UNITS = ("tau", "t_relax", "t_abs", "ell_B", "ell", "ell_abs", "ell_max")
MAX_SECONDS = 600.0


def _ln(mu, s):
    return gates.LogitNormalGate(mu, s)


def birth_death(M, q):
    """A birth-death chain on M states: move to each neighbour with probability q."""
    P = np.zeros((M, M))
    for i in range(M):
        if i > 0:
            P[i, i - 1] = q
        if i < M - 1:
            P[i, i + 1] = q
        P[i, i] = 1 - P[i].sum()
    return P


def telegraph(ps, a, mu, s):
    """Independent two-state (+-1) processes flipping with probabilities ps, driving the logit mean
    mu + a sum_i b_i (logit scale s): a sum of exponentials in the autocorrelation, time scales 1/(2 p_i)."""
    states = list(itertools.product([-1, 1], repeat=len(ps)))
    M = len(states)
    P = np.ones((M, M))
    for i, si in enumerate(states):
        for j, sj in enumerate(states):
            for k, p in enumerate(ps):
                P[i, j] *= p if si[k] != sj[k] else 1 - p
    return P, [_ln(mu + a * sum(st), s) for st in states]


class Garch:
    """GARCH(1,1) logits: z_t = mu + e_t, e_t = sqrt(h_t) eps_t, h_t = omega + alpha e_{t-1}^2 + beta h_{t-1}
    (omega = v (1 - alpha - beta): Var e = v); X = softplus(-z). Volatility clusters over ~1/(1 - alpha - beta)."""

    def __init__(self, mu, v, alpha, beta):
        self.mu, self.v, self.alpha, self.beta = float(mu), float(v), float(alpha), float(beta)
        self.omega = self.v * (1 - alpha - beta)

    def paths(self, rng, n, m, burn=None):
        """(n, m) float64 increments of n independent stationary paths (burn-in 10 / (1 - alpha - beta))."""
        burn = int(10 / (1 - self.alpha - self.beta)) if burn is None else burn
        h = np.full(n, self.v)
        e = np.sqrt(h) * rng.standard_normal(n)
        out = np.empty((n, m))
        for t in range(burn + m):
            h = self.omega + self.alpha * e * e + self.beta * h
            e = np.sqrt(h) * rng.standard_normal(n)
            if t >= burn:
                out[:, t - burn] = np.logaddexp(0.0, -(self.mu + e))
        return out


def chain_paths(P, laws, rng, n, m):
    """(n, m) float64 increments of n independent stationary paths of the chain P with per-state gate laws."""
    P = np.asarray(P, dtype=np.float64)
    pi = markov.stationary(P)
    cum = np.cumsum(P, 1)
    cum[:, -1] = 1.0
    y = np.empty((n, m), np.int64)
    y[:, 0] = np.minimum(np.searchsorted(np.cumsum(pi), rng.random(n)), len(pi) - 1)
    for t in range(1, m):
        u = rng.random(n)
        y[:, t] = (u[:, None] > cum[y[:, t - 1]]).sum(1)
    x = np.empty((n, m))
    for j, g in enumerate(laws):
        k = y == j
        x[k] = g.sample(rng, int(k.sum()))
    return x


def paths(kind, obj, rng, n, m):
    """(n, m) stationary increments of a structure (a trace of n documents of m tokens)."""
    if kind == "ar1":
        return obj.sample_paths(rng, n, m)[0]
    if kind == "chain":
        return chain_paths(*obj, rng, n, m)
    return obj.paths(rng, n, m)


def structures():
    """(name, role, kind, object): kind "ar1" (AR1LogitGate), "chain" ((P, laws)) or "garch" (Garch)."""
    regime = (np.array([[0.97, 0.03], [0.05, 0.95]]), [_ln(3.0, 0.3), _ln(0.5, 0.8)])
    rot = (np.array([[0.05, 0.9, 0.05], [0.05, 0.05, 0.9], [0.9, 0.05, 0.05]]),
           [_ln(3.0, 0.3), _ln(1.5, 0.5), _ln(0.3, 0.8)])
    sv = (birth_death(4, 0.0255), [_ln(2.0, s) for s in (0.25, 0.6, 1.2, 2.2)])
    sv3 = (birth_death(3, 0.01), [_ln(1.0, s) for s in (0.4, 1.0, 2.0)])
    reg3 = (np.array([[0.98, 0.015, 0.005], [0.01, 0.97, 0.02], [0.03, 0.01, 0.96]]),
            [_ln(3.0, 0.4), _ln(1.5, 0.6), _ln(0.2, 1.0)])
    return [
        ("AR(1) logits, phi = 0.9", "chosen", "ar1", gates.AR1LogitGate(2, 0.5, 0.9)),
        ("regime switching (2 states)", "chosen", "chain", regime),
        ("rotating chain (3 states, sign-changing rho)", "chosen", "chain", rot),
        ("stochastic volatility (4 states, relaxation 67)", "chosen", "chain", sv),
        ("long memory: 3 telegraph processes (time scales 2.5, 25, 100)", "chosen", "chain",
         telegraph([0.2, 0.02, 0.005], 0.3, 2.0, 0.5)),
        ("GARCH(1,1) logits (alpha 0.08, beta 0.9)", "held out", "garch", Garch(2.0, 0.25, 0.08, 0.9)),
        ("AR(1) logits, phi = 0.7, mu 1, s 1", "held out", "ar1", gates.AR1LogitGate(1.0, 1.0, 0.7)),
        ("stochastic volatility (3 states, mu 1)", "held out", "chain", sv3),
        ("regime switching (3 states)", "held out", "chain", reg3),
        ("long memory: 2 telegraph processes (time scales 5, 50)", "held out", "chain",
         telegraph([0.1, 0.01], 0.5, 1.5, 0.7)),
    ]


def lengths(kind, obj, n_lags=20000):
    """LongRun and every candidate unit of n, from the law (GARCH: None, estimated separately)."""
    if kind == "ar1":
        lr = exact.ar1_long_run(obj)
        gamma = obj.autocovariance(np.arange(min(n_lags, int(60 / (1 - abs(obj.phi))) + 2)))
        t_relax = 1 / (1 - abs(obj.phi))
    else:
        P, laws = obj
        lr = markov.chain_long_run(P, laws)
        ev = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
        t_relax = 1 / (1 - ev[1])
        gamma = chain_autocovariance(P, laws, min(n_lags, int(60 * t_relax) + 2))
    rho = gamma / gamma[0]
    C = renewal.second_order_constant(lr.kappa, lr.sigma2_lr, lr.kappa3_lr, lr.sum_k_gamma_k)
    u = dict(tau=lr.tau, t_relax=float(t_relax), t_abs=float(1 + 2 * np.abs(rho[1:]).sum()))
    return lr, C, _lengths(lr, C, u)


def _lengths(lr, C, u):
    """Add the lengths read from the law's own terms to the units u (dict)."""
    cb = -2 * lr.sum_k_gamma_k / lr.kappa ** 2
    f = lr.kappa ** 2 / lr.sigma2_lr
    u.update(ell_B=abs(cb) * f, ell=abs(C) * f, ell_abs=(abs(C - cb) + abs(cb)) * f)
    u["ell_max"] = max(u["ell"], u["ell_B"])
    return u


def _garch_inputs(g, rng, n_paths=256, T=1 << 15):
    """The law inputs of a GARCH structure from a long simulation (grand centring: stationary paths), with the
    other units estimated from the same paths (t_relax: 1/(1 - alpha - beta), the volatility's relaxation)."""
    x = g.paths(rng, n_paths, T)
    inp = dependence.second_order_inputs(x, centre="grand")
    te = dependence.tau_estimate(x, centre="grand", max_lag=4096)
    rho = np.concatenate([te.rho, [0.0]])
    lr = exact.LongRun(inp.kappa, inp.sigma2, inp.sigma2_lr, inp.sigma2_lr / inp.sigma2, inp.sum_k_gamma_k,
                       inp.kappa3_lr)
    u = dict(tau=lr.tau, t_relax=1 / (1 - g.alpha - g.beta), t_abs=float(1 + 2 * np.abs(rho[1:]).sum()))
    return lr, inp.constant, _lengths(lr, inp.constant, u), inp


def _mc_windows(g, Ls, rng, n_walks, chunk=8000):
    """Var[W] and its SE at each L from n_walks stationary GARCH walks (W = #{n: S_n <= L})."""
    kap = float(np.mean(g.paths(rng, 2000, 2000)))
    n_max = int(max(Ls) / kap * 1.6 + 200)
    s1 = np.zeros(len(Ls))
    s2 = np.zeros(len(Ls))
    s3 = np.zeros(len(Ls))
    s4 = np.zeros(len(Ls))
    done = 0
    while done < n_walks:
        k = min(chunk, n_walks - done)
        cs = np.cumsum(g.paths(rng, k, n_max), 1)
        if np.any(cs[:, -1] <= max(Ls)):
            raise RuntimeError("GARCH walk shorter than its window: raise n_max")
        W = np.array([np.searchsorted(r, Ls, side="right") for r in cs], dtype=np.float64)   # (k, n_L)
        s1 += W.sum(0)
        s2 += (W ** 2).sum(0)
        s3 += (W ** 3).sum(0)
        s4 += (W ** 4).sum(0)
        done += k
    m = s1 / done
    v = s2 / done - m ** 2
    m4 = s4 / done - 4 * m * s3 / done + 6 * m ** 2 * s2 / done - 3 * m ** 4
    se = np.sqrt(np.maximum(m4 - v ** 2, 0) / done)
    return m, v, se


def curve(name, role, kind, obj, n_points=N_POINTS, cells=8, n_walks=100_000, seed=0, progress=False):
    """The law's error on a geometric grid of n = L/kappa from half the shortest of (ell, ell_B) (at least 1 step)
    to 12 ell_abs (at least 12 steps): a dict with the structure's units and points."""
    rng = np.random.default_rng(seed)
    inp = None
    if kind == "garch":
        lr, C, u, inp = _garch_inputs(obj, rng)
    else:
        lr, C, u = lengths(kind, obj)
    lo = max(0.5 * min(u["ell"], u["ell_B"]), 1.0)
    ns = np.geomspace(lo, max(12 * u["ell_abs"], 12.0, 2 * lo), n_points).tolist()
    mults = [n / max(u["ell_abs"], 1.0) for n in ns]
    Ls = [n * lr.kappa for n in ns]
    t0 = time.time()
    if kind == "ar1":
        ps = exact.markov_first_passage(obj, L=Ls, cells_per_kappa=cells, max_seconds=MAX_SECONDS, progress=progress)
        ref = [(p.var, p.err_var) for p in ps]
    elif kind == "chain":
        ps = markov.markov_chain_first_passage(*obj, L=Ls, cells_per_kappa=cells, max_seconds=MAX_SECONDS,
                                               progress=progress)
        ref = [(p.var, p.var_err) for p in ps]
    else:
        _, v, se = _mc_windows(obj, np.array(Ls), rng, n_walks)
        ref = list(zip(v.tolist(), se.tolist()))
    secs = time.time() - t0
    pts = []
    for m, n, L, (v, ve) in zip(mults, ns, Ls, ref):
        lead = renewal.dependent_var(lr.kappa, lr.sigma2_lr, L)
        law = lead + C
        se = ve / v
        if inp is not None:                                  # the estimated inputs' own error: C's (jackknife)
            se = math.hypot(se, _garch_law_se(obj, inp, L) / v)
        scale = max(abs(C), abs(renewal.bartlett_correction(lr.sum_k_gamma_k, lr.kappa)))
        pts.append(dict(mult=m, n=n, L=L, ref_var=v, ref_err=ve, law=law, err=law / v - 1, err_se=se,
                        C_over_lead=C / lead, in_regime=bool(law > 0 and scale <= lead / renewal.SECOND_ORDER_MULT),
                        in_regime_old=bool(law > 0 and abs(C) <= renewal.REGIME_FRACTION * lead),
                        **{f"n_over_{k}": n / u[k] for k in UNITS}))
    return dict(name=name, role=role, kind=kind, kappa=lr.kappa, sigma2=lr.sigma2, sigma2_lr=lr.sigma2_lr,
                sum_k_gamma_k=lr.sum_k_gamma_k, kappa3_lr=lr.kappa3_lr, C_dep=C, units=u, seconds=secs,
                reference="Monte Carlo" if kind == "garch" else "exact", points=pts)


_GARCH_LAW_SE = {}


def _garch_law_se(g, inp, L):
    """SE of the second-order law's value at L from the SEs of its estimated inputs (jackknife over the paths of
    the long simulation, computed once per structure and cached)."""
    key = id(g)
    if key not in _GARCH_LAW_SE:
        rng = np.random.default_rng(12345)
        x = g.paths(rng, 256, 1 << 15)
        S = x.shape[0]
        vals = []
        for s in range(0, S, S // 16):                        # 16 delete-a-group jackknife replicates
            keep = np.ones(S, bool)
            keep[s:s + S // 16] = False
            i = dependence.second_order_inputs(x[keep], centre="grand")
            vals.append((i.kappa, i.sigma2_lr, i.constant))
        _GARCH_LAW_SE[key] = np.array(vals)
    v = _GARCH_LAW_SE[key]
    law = v[:, 1] * L / v[:, 0] ** 3 + v[:, 2]
    G = len(law)
    return float(math.sqrt((G - 1) / G * np.sum((law - law.mean()) ** 2)))


def thresholds(curves, tols=TOLS, z=2.0):
    """Per structure, tolerance and unit: the smallest n (in that unit) from which every measured point is within
    tol (|err| - z err_se <= tol). None: not within the scan. Also the spread max/min over the chosen structures."""
    out = []
    for c in curves:
        row = dict(name=c["name"], role=c["role"])
        for tol in tols:
            ok = [abs(p["err"]) - z * p["err_se"] <= tol for p in c["points"]]
            bad = [i for i, o in enumerate(ok) if not o]
            i0 = 0 if not bad else (None if bad[-1] == len(ok) - 1 else bad[-1] + 1)
            for k in UNITS:
                row[f"{k}_{tol:g}"] = None if i0 is None else c["points"][i0]["n"] / c["units"][k]
        out.append(row)
    spread = {}
    for tol in tols:
        for k in UNITS:
            v = [r[f"{k}_{tol:g}"] for r in out if r["role"] == "chosen"]
            spread[f"{k}_{tol:g}"] = (None if not v or any(x is None for x in v) or min(v) <= 0
                                      else max(v) / min(v))
    return out, spread


def report(curves, thr, spread):
    for c in curves:
        u = c["units"]
        print("\n" + "\n".join(outputs.fill_items(
            f"{c['name']} [{c['role']}; {c['reference']}]: ",
            [f"kappa {c['kappa']:.4g}", f"C_dep {c['C_dep']:.4g}"] + [f"{k} {u[k]:.3g}" for k in UNITS], indent="  ")))
        print(f"  {'n/ell_abs':>9s} {'n':>8s} {'n/ell_max':>9s} {'n/tau':>7s} {'n/t_rel':>7s} {'ref Var[W]':>18s} "
              f"{'second':>8s} {'+-':>6s} {'C/lead':>7s} claims (old: |C| <= lead/4)")
        for p in c["points"]:
            print(f"  {p['mult']:9.3g} {p['n']:8.1f} {p['n_over_ell_max']:9.2f} {p['n_over_tau']:7.2f} "
                  f"{p['n_over_t_relax']:7.2f} {p['ref_var']:10.2f}±{p['ref_err']:<7.2g} {100 * p['err']:+7.2f}% "
                  f"{100 * p['err_se']:5.2f}% {p['C_over_lead']:+7.3f} {'yes' if p['in_regime'] else 'no':>3s} "
                  f"({'yes' if p['in_regime_old'] else 'no'})")
    print("\n" + outputs.fill("Within tolerance from n = m x unit on (every later point too); spread = max/min of m "
                              "over the chosen structures (1 = the unit collapses them):"))
    for tol in TOLS:
        print("\n".join(outputs.fill_items(f"  tol {100 * tol:g}%: ", [
            f"{k} " + ("-" if spread[f'{k}_{tol:g}'] is None else f"x{spread[f'{k}_{tol:g}']:.2f}") for k in UNITS])))
        print(f"    {'structure':40s} {'role':8s} " + " ".join(f"{k:>7s}" for k in UNITS))
        for r in thr:                                       # '>': not within tolerance on the grid
            name = r["name"] if len(r["name"]) <= 40 else r["name"][:39] + "…"
            print(f"    {name:40s} {r['role']:8s} " + " ".join(
                f"{'>' if r[f'{k}_{tol:g}'] is None else format(r[f'{k}_{tol:g}'], '.3g'):>7s}" for k in UNITS))


@outputs.scoped
def main(argv=None):
    p = outputs.parser("The second-order dependent law's error against exact numerics on many dependence "
                       "structures, in units of each candidate correlation length.")
    p.add_argument("--cells", type=int, default=8, help="exact numerics: S-grid cells per kappa")
    p.add_argument("--walks", type=int, default=100_000, help="Monte Carlo walks (GARCH)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", default=None, help="structure names starting with these")
    p.add_argument("--json", default=None, help="write the curves here")
    p.add_argument("--no-progress", action="store_true")
    outputs.add_common(p)
    a = p.parse_args(argv)
    outputs.positive("--cells", a.cells, lo=2)
    outputs.positive("--walks", a.walks, lo=100)         # (the GARCH rows' Monte Carlo SE, as dependent-errors)
    outputs.positive("--seed", a.seed, lo=0)
    names = [name for name, *_ in structures()]
    for o in a.only or ():
        if a.only.count(o) > 1:
            raise outputs.UsageError(f"--only lists {o!r} twice; list each prefix once")
        if not any(n.startswith(o) for n in names):
            raise outputs.UsageError(f"--only {o!r}: no structure's name starts with it; the names: "
                                     f"{', '.join(names)}")
    if a.only == []:
        raise outputs.UsageError("--only names no structure (give name prefixes, or leave it out for all)")
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    t0 = time.time()
    curves = []
    for i, (name, role, kind, obj) in enumerate(structures()):
        if a.only and not any(name.startswith(o) for o in a.only):
            continue
        curves.append(curve(name, role, kind, obj, cells=a.cells, n_walks=a.walks, seed=a.seed + i,
                            progress=not a.no_progress))
        print(f"{name}: {curves[-1]['seconds']:.0f} s", file=sys.stderr)
    thr, spread = thresholds(curves)
    report(curves, thr, spread)
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        outputs.write_result(a.json, kind="second-order-regime", obj=outputs.json_clean(dict(
            command=" ".join(["python -m foxwindow second-order-regime"] + (argv or sys.argv[1:])),
            seconds=time.time() - t0, curves=curves, thresholds=thr, spread=spread)))
    return 0


if __name__ == "__main__":
    raise SystemExit(outputs.cli(main))
