"""The window laws, each with its status, and the exact first-passage distribution they are checked against.

Windows are W = N - 1 (see forget.py). For iid increments X = -log g with kappa = E X, sigma2 = Var X,
mu2 = E X^2, mu3 = E X^3 and L = ln(1/eps):

  law                                 formula                                     status
  Wald identity                       E[N] = (L + E[R_L]) / kappa                 exact (any iid X > 0)
  renewal mean expansion              E[N] = L/kappa + mu2/(2 kappa^2) + o(1)     asymptotic (non-lattice X)
  leading-order variance              Var[N] = sigma2 L / kappa^3 + O(1)          asymptotic
  Smith second-order variance         Var[N] = sigma2 L / kappa^3 + C + o(1)      asymptotic (non-lattice, mu3 < inf)
  exponential X (Beta(a,1) gates)     N - 1 ~ Poisson(L/kappa)                    exact
  gamma X ~ Gamma(k, theta)           P(N > n) = P(Gamma(n k, theta) <= L)        exact
  ALiBi, X = m                        W = floor(L/m), Var = 0                     exact (lattice)
  dependent X, variance               Var[N] ~ sigma_LR^2 L / kappa^3             asymptotic (L/kappa >> tau)
  dependent X, mean                   E[N] ~ L/kappa + 1/2 + sigma_LR^2/(2 k^2)   asymptotic (Markov renewal)
  dependent X, Bartlett O(1) term     Var[N] += -2 sum_k k gamma_k / kappa^2      heuristic

`python renewal.py` prints the laws against the exact numerics over a scan of eps.
"""
import math
import sys
from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft
from scipy import special

import forget
from forget import Moments, threshold

# ----------------------------------------------------------------------------- iid laws


def wald_mean(kappa, L, mean_overshoot):
    """Wald: E[N] = (L + E[R_L]) / kappa, R_L = S_N - L the overshoot. Exact for any iid X > 0."""
    return (L + mean_overshoot) / kappa


def renewal_mean(m: Moments, L):
    """E[N] ~ L/kappa + mu2/(2 kappa^2). Asymptotic; for non-lattice X the error decays with L
    (exponentially for spread-out densities, Stone 1965). E[W] = E[N] - 1."""
    return L / m.kappa + m.mu2 / (2 * m.kappa ** 2)


def leading_var(m: Moments, L):
    """Var[N] = Var[W] ~ sigma2 L / kappa^3. Asymptotic: off by Smith's constant C at every L."""
    return m.sigma2 * L / m.kappa ** 3


def smith_C(m: Moments):
    """Smith's constant: C = 5 mu2^2/(4 kappa^4) - 2 mu3/(3 kappa^3) - mu2/(2 kappa^2) (0 for exponential X)."""
    k = m.kappa
    return 5 * m.mu2 ** 2 / (4 * k ** 4) - 2 * m.mu3 / (3 * k ** 3) - m.mu2 / (2 * k ** 2)


def smith_var(m: Moments, L):
    """Var[N] ~ sigma2 L / kappa^3 + C. Asymptotic (Smith 1954; Cox 1962 ch. 4): non-lattice X, finite mu3."""
    return leading_var(m, L) + smith_C(m)


def alibi_window(m, eps):
    """ALiBi's exact window for slope m: W = floor(L/m) (N = W + 1), Var = 0. L/m is only its relaxation."""
    if not m > 0:
        raise ValueError(f"ALiBi slope m must be > 0; got {m}")
    return int(math.floor(threshold(eps) / m))


def exponential_exact(kappa, L):
    """Exponential X with mean kappa: N - 1 ~ Poisson(L/kappa), so E[W] = Var[W] = L/kappa exactly."""
    return L / kappa, L / kappa


def gamma_survival(k, theta, L, nmax=None):
    """Exact P(N > n) = P(Gamma(n k, theta) <= L) for n = 0, 1, ... until it is below 1e-18."""
    if nmax is None:
        mean = L / (k * theta)
        nmax = int(mean + 60 * math.sqrt(mean / k + 1) + 50)
    n = np.arange(nmax + 1)
    s = np.ones(nmax + 1)
    s[1:] = special.gammainc(n[1:] * k, L / theta)
    return s


# ----------------------------------------------------------------------------- dependent increments


def acf(x, max_lag):
    """Sample autocorrelation rho_k of a 1-D series for k = 0..max_lag (FFT, biased normalisation).

    x: (n,) real series, n >= 2. max_lag: int in [0, n - 1] (a lag of n or more has no pair of
    samples; asking for one is an error, not a wrapped-around value). Returns (max_lag + 1,) float64.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or len(x) < 2:
        raise ValueError(f"acf needs a 1-D series of length >= 2; got shape {x.shape}")
    n = len(x)
    if isinstance(max_lag, bool) or not isinstance(max_lag, (int, np.integer)):
        raise ValueError(f"max_lag must be an int; got {max_lag!r}")
    if not 0 <= max_lag <= n - 1:
        raise ValueError(f"max_lag must lie in [0, len(x) - 1] = [0, {n - 1}]; got {max_lag}")
    y = x - x.mean()
    f = np.fft.rfft(y, 2 * n)
    r = np.fft.irfft(f * np.conj(f))[: max_lag + 1] / n
    if r[0] <= 0:
        raise ValueError("acf of a constant series is undefined (variance 0)")
    return r / r[0]


def batch_means(x, n_batches=32):
    """Batch-means estimate for an autocorrelated series: (mean, SE of the mean, tau_hat).

    tau_hat = b Var(batch means) / Var(x) estimates the integrated autocorrelation 1 + 2 sum rho_k.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    b = len(x) // n_batches
    if b < 1:
        raise ValueError(f"need at least {n_batches} samples for {n_batches} batches; got {len(x)}")
    bm = x[: b * n_batches].reshape(n_batches, b).mean(axis=1)
    se = bm.std(ddof=1) / math.sqrt(n_batches)
    v = x.var()
    return float(x.mean()), float(se), float(b * bm.var(ddof=1) / v) if v > 0 else float("nan")


def tau_from_acf(rho):
    """tau = 1 + 2 sum_{k>=1} rho_k over the lags given (truncate before noise dominates)."""
    return 1.0 + 2.0 * float(np.sum(rho[1:]))


def geyer_cut(rho):
    """Geyer's initial positive sequence: the first lag 2m at which rho_{2m} + rho_{2m+1} <= 0
    (the lags before it are summed into tau); len(rho) if the pairs stay positive. At least 1."""
    for m in range(0, (len(rho) - 1) // 2):
        if rho[2 * m] + rho[2 * m + 1] <= 0:
            return max(2 * m, 1)
    return max(len(rho) - 1, 1)


def initial_positive_tau(x, max_lag=None):
    """tau of a stationary series by Geyer's initial positive sequence. Returns (tau, rho truncated
    at the cut-off)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    max_lag = max_lag or min(len(x) // 4, 4096)
    rho = acf(x, max_lag)
    rho = rho[: geyer_cut(rho)]
    return tau_from_acf(rho), rho


def long_run_variance(sigma2, tau):
    """sigma_LR^2 = sigma2 (1 + 2 sum rho_k) = sigma2 tau."""
    return sigma2 * tau


def dependent_var(kappa, sigma2_lr, L):
    """Var[N] ~ sigma_LR^2 L / kappa^3. Asymptotic (FCLT + inversion), needs L/kappa >> tau."""
    return sigma2_lr * L / kappa ** 3


def dependent_mean(kappa, sigma2_lr, L):
    """E[N] ~ L/kappa + 1/2 + sigma_LR^2 / (2 kappa^2) (Markov renewal theory). Asymptotic;
    reduces to the iid renewal mean when tau = 1."""
    return L / kappa + 0.5 + sigma2_lr / (2 * kappa ** 2)


def bartlett_correction(sum_k_gamma_k, kappa):
    """O(1) correction to the dependent variance law, -2 sum_k k gamma_k / kappa^2. A heuristic."""
    return -2.0 * sum_k_gamma_k / kappa ** 2


# ----------------------------------------------------------------------------- exact first passage


@dataclass
class FirstPassage:
    """Exact (numerical) law of W = N - 1: survival[n] = P(N > n) = P(W >= n), n = 0..len-1."""
    gate: str
    eps: float
    survival: np.ndarray
    mean: float
    var: float
    method: str

    @property
    def pmf(self):
        """P(W = w) for w = 0..len-2."""
        s = self.survival
        return s[:-1] - s[1:]


def _moments_from_survival(s):
    n = np.arange(len(s))
    EN = s.sum()
    EN2 = np.sum((2 * n + 1) * s)
    return EN - 1.0, EN2 - EN * EN


def _lattice_survival(gate, L, K, tol=1e-18, nmax=1_000_000):
    """P(N > n) with X put on the midpoint lattice h = L/(K + 1/2): cell k holds P(X in [(k-1/2)h, (k+1/2)h)),
    so the threshold sits half way between points K and K+1. Sub-threshold mass iterated by FFT."""
    h = L / (K + 0.5)
    edges = (np.arange(K + 1) + 0.5) * h
    F = gate.cdf(edges)
    p = np.diff(np.concatenate([[0.0], F]))                # (K+1,) cells 0..K; mass beyond exits at once
    nfft = sfft.next_fast_len(2 * (K + 1), real=True)
    P = sfft.rfft(p, nfft)
    f = np.zeros(K + 1)
    f[0] = 1.0                                             # S_0 = 0
    surv = [1.0]
    while surv[-1] > tol and len(surv) <= nmax:
        f = sfft.irfft(sfft.rfft(f, nfft) * P, nfft)[: K + 1]
        surv.append(float(f.sum()))
    if len(surv) > nmax:
        raise RuntimeError(f"survival still {surv[-1]:.3g} after {nmax} steps")
    return np.array(surv)


def exact_first_passage(gate, eps, K=None, richardson=True):
    """Exact distribution and moments of the eps-window W = N - 1 for an iid increment law.

    Midpoint lattice + FFT (error O(h^2)) with Richardson extrapolation over (K, 2K) for smooth
    densities; closed forms where the gate has one (ALiBi, gamma, exponential). K defaults to enough
    lattice points for about 1e-9 on the moments of smooth densities; a density with an infinite
    derivative at 0 (gamma k < 2, Beta gates b < 2) converges more slowly (about 1e-6 for k = 1.5).
    """
    L = threshold(eps)
    s = gate.survival(L)
    if s is not None:
        mean, var = _moments_from_survival(s)
        return FirstPassage(str(gate), eps, s, mean, var, "closed form")
    if not gate.iid:
        raise ValueError(f"{gate} has dependent increments: exact numerics cover iid laws only")
    m = gate.moments()
    if K is None:
        # >= 32 cells per mean increment and >= 4096 over [0, L]: moments to ~1e-8 for smooth densities
        K = int(min(max(4096, 32 * L / m.kappa), 2 ** 15))
    s1 = _lattice_survival(gate, L, K)
    if not richardson or not gate.smooth:
        mean, var = _moments_from_survival(s1)
        return FirstPassage(str(gate), eps, s1, mean, var, f"lattice K={K}")
    s2 = _lattice_survival(gate, L, 2 * K)
    n = max(len(s1), len(s2))
    s1 = np.pad(s1, (0, n - len(s1)))
    s2 = np.pad(s2, (0, n - len(s2)))
    r2 = ((2 * K + 0.5) / (K + 0.5)) ** 2                  # (h1/h2)^2
    s = (r2 * s2 - s1) / (r2 - 1)
    mean, var = _moments_from_survival(s)
    return FirstPassage(str(gate), eps, s, mean, var, f"lattice K={K},{2 * K} + Richardson")


def alibi_limit(m, eps, cvs=(1.0, 0.3, 0.1, 0.03, 0.01)):
    """The zero-variance limit: gamma increments with mean m and coefficient of variation cv -> 0.
    Returns [(cv, P(W = floor(L/m)), E[W], Var[W])]: the distribution converges to ALiBi's integer
    window (the formulas do not: they break down once sigma2 L / kappa^3 < ~0.3)."""
    w = alibi_window(m, eps)
    out = []
    for cv in cvs:
        k = 1.0 / cv ** 2
        fp = exact_first_passage(forget.GammaIncrement(k, m / k), eps)
        pmf = fp.pmf
        out.append((cv, float(pmf[w]) if w < len(pmf) else 0.0, fp.mean, fp.var))
    return out


# ----------------------------------------------------------------------------- command line

EPS_SCAN = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)


def scan(gates, eps_list=EPS_SCAN, progress=True):
    from tqdm import tqdm
    rows = []
    jobs = [(g, e) for g in gates for e in eps_list]
    for g, eps in tqdm(jobs, desc="exact numerics", disable=not progress, file=sys.stderr):
        m, L = g.moments(), threshold(eps)
        ex = exact_first_passage(g, eps)
        C = smith_C(m)
        rows.append(dict(gate=str(g), eps=eps, L=L, kappa=m.kappa, sigma2=m.sigma2,
                         exact_mean_W=ex.mean, exact_var_W=ex.var,
                         err_mean=renewal_mean(m, L) - 1 - ex.mean,
                         err_leading=leading_var(m, L) - ex.var, err_smith=smith_var(m, L) - ex.var,
                         C=C, lead_term=leading_var(m, L),
                         # L beyond which the leading law's relative error |C|/Var is below 1e-3
                         L_rel_1e3=max(0.0, (abs(C) / 1e-3 - C) * m.kappa ** 3 / m.sigma2)))
    return rows


def main(argv=None):
    import outputs
    p = outputs.parser("Window laws against exact first-passage numerics.")
    p.add_argument("--eps", type=float, nargs="+", default=list(EPS_SCAN), help="decay thresholds in (0, 1)")
    p.add_argument("--json", default=None, help="write the rows as JSON to this path")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    outputs.add_common(p)
    a = p.parse_args(argv)
    for e in a.eps:
        outputs.eps_arg("--eps", e)
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    gates = list(forget.SEED_GATES) + [forget.BetaGate(20, 1)]
    rows = scan(gates, a.eps, progress=not a.no_progress)
    print("Windows W = N - 1. err = law - exact. 'lead' = sigma^2 L/kappa^3; expansions need lead >~ 0.3.")
    hdr = (f"{'gate':28s} {'eps':>7s} {'E[W] exact':>11s} {'err mean':>9s} {'Var exact':>10s} "
           f"{'err lead':>9s} {'C':>8s} {'err Smith':>9s} {'lead':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        flag = "  <- breakdown" if r["lead_term"] < 0.3 else ""
        print(f"{r['gate']:28s} {r['eps']:7.0e} {r['exact_mean_W']:11.5f} {r['err_mean']:9.1e} {r['exact_var_W']:10.5f} "
              f"{r['err_leading']:9.2e} {r['C']:8.4f} {r['err_smith']:9.1e} {r['lead_term']:8.3f}{flag}")
    print("\nLeading law relative error below 1e-3 once L exceeds (|C|/1e-3 - C) kappa^3/sigma^2:")
    for g in gates:
        r = next(r for r in rows if r["gate"] == str(g))
        print(f"  {str(g):28s} L > {r['L_rel_1e3']:.1f}  (eps < {math.exp(-r['L_rel_1e3']):.1e})")
    print("\nNear the lattice limit (gamma increments, mean 0.05, eps = 1e-3): the distribution converges "
          "to ALiBi's W = floor(L/m) = %d while the expansions break down" % alibi_window(0.05, 1e-3))
    print(f"{'cv':>6s} {'P(W=138)':>9s} {'E[W]':>9s} {'Var[W]':>9s} {'lead':>8s} {'Smith':>8s}")
    for cv, pw, mean, var in alibi_limit(0.05, 1e-3):
        k = 1 / cv ** 2
        m = forget.GammaIncrement(k, 0.05 / k).moments()
        L = threshold(1e-3)
        print(f"{cv:6.2f} {pw:9.4f} {mean:9.3f} {var:9.4f} {leading_var(m, L):8.4f} {smith_var(m, L):8.4f}")
    if a.json:
        outputs.write_json(a.json, rows)


if __name__ == "__main__":
    import outputs
    sys.exit(outputs.cli(main))
