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
  dependent X, Bartlett O(1) term     Var[N] += -2 sum_k k gamma_k / kappa^2      heuristic (part of the O(1))
  dependent X, second order           Var[N] ~ sigma_LR^2 L / kappa^3 + C_dep     asymptotic, checked numerically
  dependent X, finite n               Var[N] ~ Var(S_n)/kappa^2, n = L/kappa      heuristic, never negative
  AR(1)-logit gates                   Markov-additive walk (S_n, y_n) on a grid   exact numerics (oracle)

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


def lag_sums(x, max_lag, centre="sequence"):
    """Per-sequence lagged products sum_t y_t y_{t+k}, k = 0..max_lag, of traces x (S, n) float (FFT).

    centre: "sequence" (y = x minus each sequence's own mean: a document-level shift in the mean is not
    counted as correlation) or "grand" (y = x minus the mean over all sequences: it is).
    Returns (S, max_lag + 1) float64. max_lag: int in [0, n - 1].
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 2:
        raise ValueError(f"lag_sums needs traces (S, n) with n >= 2; got shape {x.shape}")
    n = x.shape[1]
    if isinstance(max_lag, bool) or not isinstance(max_lag, (int, np.integer)):
        raise ValueError(f"max_lag must be an int; got {max_lag!r}")
    if not 0 <= max_lag <= n - 1:
        raise ValueError(f"max_lag must lie in [0, n - 1] = [0, {n - 1}]; got {max_lag}")
    if centre not in ("sequence", "grand"):
        raise ValueError(f"centre must be 'sequence' or 'grand'; got {centre!r}")
    y = x - (x.mean(1, keepdims=True) if centre == "sequence" else x.mean())
    f = np.fft.rfft(y, 2 * n, axis=1)
    return np.fft.irfft(f * np.conj(f), axis=1)[:, : max_lag + 1]


def acf(x, max_lag, pooled=False, centre="sequence"):
    """Sample autocorrelation rho_k for k = 0..max_lag (FFT).

    x: (n,) real series, n >= 2 (biased normalisation: lag sums / n), or with pooled=True traces (S, n)
    of S sequences, lag sums added over sequences and divided by (n - k) S (the unbiased pooled
    autocovariance; centre as in lag_sums). max_lag: int in [0, n - 1] (a lag of n or more has no pair
    of samples; asking for one is an error, not a wrapped-around value). Returns (max_lag + 1,) float64.
    """
    x = np.asarray(x, dtype=np.float64)
    if pooled:
        r = lag_sums(x, max_lag, centre).sum(0) / ((x.shape[1] - np.arange(max_lag + 1)) * x.shape[0])
    else:
        if x.ndim != 1 or len(x) < 2:
            raise ValueError(f"acf needs a 1-D series of length >= 2; got shape {x.shape}")
        r = lag_sums(x[None], max_lag)[0] / len(x)
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


def _check_positive(name, v):
    v = float(v)
    if not v > 0 or math.isinf(v):                         # also rejects NaN
        raise ValueError(f"{name} must be a positive finite number; got {v}")
    return v


def _check_nonneg(name, v):
    v = float(v)
    if not v >= 0 or math.isinf(v):
        raise ValueError(f"{name} must be a non-negative finite number; got {v}")
    return v


def long_run_variance(sigma2, tau):
    """sigma_LR^2 = sigma2 (1 + 2 sum rho_k) = sigma2 tau. sigma2 >= 0 and tau >= 0 (tau < 1 for
    anti-correlated X) are floats."""
    return _check_nonneg("sigma2", sigma2) * _check_nonneg("tau", tau)


def dependent_var(kappa, sigma2_lr, L):
    """Leading variance law Var[N] ~ sigma_LR^2 L / kappa^3 (functional CLT + inversion).

    kappa > 0, sigma2_lr >= 0, L > 0: floats. Asymptotic: it overstates the variance by an O(1) amount
    that is large when tau is (measured on AR(1) logits: +137% at L/kappa = 10, +6.5% at 200 for tau = 18;
    README); below 10% error only from L/kappa ~ 6-8 tau, 2% from ~30 tau. Never negative.
    """
    return _check_nonneg("sigma2_lr", sigma2_lr) * _check_positive("L", L) / _check_positive("kappa", kappa) ** 3


def dependent_mean(kappa, sigma2_lr, L):
    """E[N] ~ L/kappa + 1/2 + sigma_LR^2 / (2 kappa^2) (Markov renewal theory). Asymptotic; reduces to
    the iid renewal mean when tau = 1. kappa > 0, sigma2_lr >= 0, L > 0: floats. E[W] = E[N] - 1.
    Measured on AR(1) logits: within 0.1 token from L/kappa = 3 tau, 0.01 from 5 tau; +5.3 at 0.16 tau."""
    kappa = _check_positive("kappa", kappa)
    return _check_positive("L", L) / kappa + 0.5 + _check_nonneg("sigma2_lr", sigma2_lr) / (2 * kappa ** 2)


def bartlett_correction(sum_k_gamma_k, kappa):
    """Bartlett's O(1) term -2 sum_{k>=1} k gamma_k / kappa^2 (gamma_k = Cov(X_0, X_k)), from
    Var(S_n) = n sigma_LR^2 - 2 sum_k k gamma_k + o(1). It is only part of the O(1) term of Var[N]
    (see `second_order_var`); added to the leading law alone it goes negative below L/kappa ~ 0.5 tau."""
    return -2.0 * float(sum_k_gamma_k) / _check_positive("kappa", kappa) ** 2


class OutsideRegime(ValueError):
    """A dependent-increment law asked for a variance where its expansion is negative (meaningless)."""


@dataclass
class VarianceLaw:
    """A variance law's value with its parts. `in_regime` is True where the O(1) term is at most
    `REGIME_FRACTION` of the leading term: there the measured error on AR(1) logits is at most 5.1%
    (Bartlett) and 3.0% (second order) (README table); outside it the value is still returned, flagged."""
    var: float              # Var[N] = Var[W], > 0
    leading: float          # sigma_LR^2 L / kappa^3
    constant: float         # the O(1) term added to it
    in_regime: bool


REGIME_FRACTION = 0.25


def _finish(lead, const, L, kappa, what):
    v = lead + const
    if not v > 0:
        raise OutsideRegime(f"{what} gives Var[N] = {v:.4g} <= 0 at L/kappa = {L / kappa:.4g}: L is far "
                            f"outside its regime (the O(1) term {const:.4g} exceeds the leading {lead:.4g}); "
                            "use finite_n_var or markov_first_passage there")
    return VarianceLaw(float(v), float(lead), float(const), bool(abs(const) <= REGIME_FRACTION * lead))


def bartlett_var(kappa, sigma2_lr, sum_k_gamma_k, L):
    """Leading law + Bartlett's term: sigma_LR^2 L/kappa^3 - 2 sum_k k gamma_k / kappa^2. All floats.

    Returns VarianceLaw; raises OutsideRegime (a ValueError) where the sum is <= 0 rather than return a
    negative variance. A heuristic: it misses the inversion and overshoot parts of the O(1) term
    (`second_order_var` has them), +1.3% at L/kappa = 200 for tau = 18 (measured).
    """
    lead = dependent_var(kappa, sigma2_lr, L)
    return _finish(lead, bartlett_correction(sum_k_gamma_k, kappa), L, kappa, "the Bartlett-corrected law")


def second_order_constant(kappa, sigma2_lr, kappa3_lr, sum_k_gamma_k):
    """O(1) term of Var[N] for stationary, weakly dependent X (floats; kappa > 0, sigma2_lr >= 0):

        C_dep = 1/12 + (5/4) (sigma_LR^2/kappa^2)^2 - (2/3) kappa3_LR / kappa^3 - 2 sum_{k>=1} k gamma_k / kappa^2

    with kappa3_LR = lim E[(S_n - n kappa)^3] / n the long-run third cumulant. Heuristic sketch: X >= 0, so
    P(N > n) = P(S_n <= L) and Var[N] = sum_n (2n + 1) P(S_n <= L) - E[N]^2. For iid X, an Edgeworth
    expansion of P(S_n <= L) summed over n (Euler-Maclaurin gives the 1/12) reproduces Smith's constant
    1/12 + (5/4) c^2 - (2/3) kappa3/kappa^3, c = sigma^2/kappa^2. That computation sees X only through
    the cumulants of S_n: for a geometrically ergodic Markov-driven X (where S_n has an Edgeworth
    expansion) they are n kappa, n sigma_LR^2 - 2 sum k gamma_k + o(1) and n kappa3_LR + O(1), so the
    long-run cumulants replace the marginal ones and the finite-n variance adds Bartlett's term (the
    O(1) part of the third cumulant only enters at o(1)). Reduces to Smith's C for iid X.
    Not proved here: checked against the exact Markov-additive numerics (`markov_first_passage`) on
    AR(1) logits (tau = 2.9, 18.2, 62.8), where lead + C_dep is within 0.07% of the exact variance from
    L/kappa = 5 tau on and within 0.003% at 8 tau, i.e. C_dep (-1.05, -49.4, -593) is matched to 3e-4
    relative at 8 tau (README).
    """
    kappa = _check_positive("kappa", kappa)
    c = _check_nonneg("sigma2_lr", sigma2_lr) / kappa ** 2
    return 1 / 12 + 1.25 * c * c - 2 / 3 * float(kappa3_lr) / kappa ** 3 + bartlett_correction(sum_k_gamma_k, kappa)


def second_order_var(kappa, sigma2_lr, kappa3_lr, sum_k_gamma_k, L):
    """Var[N] ~ sigma_LR^2 L / kappa^3 + C_dep (see `second_order_constant`). Floats; L > 0.

    Returns VarianceLaw; raises OutsideRegime where the expansion is <= 0. Asymptotic: the O(1) term
    is exact in the limit, but at L/kappa of a few tau the o(1) remainder is large (README table).
    """
    lead = dependent_var(kappa, sigma2_lr, L)
    const = second_order_constant(kappa, sigma2_lr, kappa3_lr, sum_k_gamma_k)
    return _finish(lead, const, L, kappa, "the second-order law")


def finite_n_var(kappa, gamma, L):
    """Var[N] ~ Var(S_n) / kappa^2 at n = L/kappa, with the exact finite-n variance of the sum

        Var(S_n) = n gamma_0 + 2 sum_{k=1}^{n-1} (n - k) gamma_k      (linear in n between integers).

    kappa > 0, L > 0 floats; gamma: 1-D float array of autocovariances gamma_0..gamma_K (K >= L/kappa
    or the rest negligible; gamma_0 = Var X). Never negative (a variance at integer n, interpolated).
    Asymptotically it is the Bartlett law (O(1) term -2 sum k gamma_k / kappa^2) and shares its bias;
    at L/kappa ~ tau it keeps the right order where the expansions fail. A heuristic (README table).
    """
    kappa, L = _check_positive("kappa", kappa), _check_positive("L", L)
    gamma = np.asarray(gamma, dtype=np.float64)
    if gamma.ndim != 1 or len(gamma) < 1 or not np.all(np.isfinite(gamma)) or gamma[0] < 0:
        raise ValueError("gamma must be a 1-D finite array of autocovariances with gamma[0] = Var X >= 0")
    n = L / kappa

    def var_sum(m):                                        # Var(S_m), integer m >= 0
        k = np.arange(1, min(m, len(gamma)))
        return m * gamma[0] + 2.0 * float(np.sum((m - k) * gamma[k]))

    lo = math.floor(n)
    v = var_sum(lo) + (n - lo) * (var_sum(lo + 1) - var_sum(lo))
    if v < 0:
        raise ValueError(f"gamma is not an autocovariance sequence: it gives Var(S_n) = {v:.3g} < 0 at n = {n:.4g}")
    return v / kappa ** 2


# ----------------------------------------------------------------------------- Markov-additive exact numerics


@dataclass
class LongRun:
    """Long-run cumulants of a stationary increment sequence (from the law, not from samples)."""
    kappa: float            # E X
    sigma2: float           # Var X
    sigma2_lr: float        # sum_k gamma_k over all k = sigma2 tau
    tau: float              # 1 + 2 sum_{k>=1} rho_k
    sum_k_gamma_k: float    # sum_{k>=1} k gamma_k
    kappa3_lr: float        # lim E[(S_n - n kappa)^3] / n


def _ar1_chain(gate, dy=None, ymax=8.0):
    """The AR(1) driver on a uniform grid y (M,): stationary weights pi (M,), transition P (M, M) row i ->
    column j, increments x(y) (M,). Node weights of the Gaussian densities on a grid of spacing
    dy <= a/2, a = sqrt(1 - phi^2) the innovation scale, are accurate to ~exp(-2 pi^2 (a/dy)^2)
    (trapezoid rule on a Gaussian): the marginal moments match the gate's quadrature to ~1e-12."""
    if not isinstance(gate, forget.AR1LogitGate):
        raise TypeError(f"Markov-additive numerics need an AR1LogitGate; got {type(gate).__name__}")
    a = math.sqrt(1.0 - gate.phi ** 2)
    dy = dy or min(0.25, a / 2)
    M = 2 * int(math.ceil(ymax / dy)) + 1
    y = np.linspace(-ymax, ymax, M)
    pi = np.exp(-0.5 * y * y)
    pi /= pi.sum()
    if gate.phi == 0:
        P = np.tile(pi, (M, 1))
    else:
        P = np.exp(-0.5 * ((y[None, :] - gate.phi * y[:, None]) / a) ** 2)
        P /= P.sum(axis=1, keepdims=True)
    x = np.logaddexp(0.0, -(gate.mu + gate.s * y))        # X = softplus(-z), z = mu + s y
    return y, pi, P, x


def ar1_long_run(gate):
    """LongRun of an AR1LogitGate: kappa, sigma2, sums of gamma_k in closed form over k (Hermite, from
    the gate), kappa3_LR from the chain's fundamental matrix Z = (I - P + 1 pi)^-1:

        kappa3_LR = E x^3 + 3 sum_{k>=1} (E[x_0^2 x_k] + E[x_0 x_k^2]) + 6 sum_{j,k>=1} E[x_0 x_j x_{j+k}]

    (x centred), each sum over k>=1 of P^k applied to a centred vector being (Z - I) of it."""
    y, pi, P, x = _ar1_chain(gate)
    m = gate.moments()
    xd = x - pi @ x
    Z = np.linalg.inv(np.eye(len(y)) - P + pi[None, :])

    def tail(v):                                           # sum_{k>=1} P^k (v - pi v)
        v = v - pi @ v
        return Z @ v - v

    k3 = (pi @ xd ** 3 + 3 * (pi @ (xd * xd * tail(xd)) + pi @ (xd * tail(xd * xd)))
          + 6 * pi @ (xd * tail(xd * tail(xd))))
    s1, sk = gate.dependence_sums()
    return LongRun(m.kappa, m.sigma2, m.sigma2 + 2 * s1, 1 + 2 * s1 / m.sigma2, sk, float(k3))


@dataclass
class MarkovPassage:
    """Exact (numerical) moments of W = N - 1 for one L; err_* estimate the discretisation error by the
    size of the Richardson step (conservative: at phi = 0 the extrapolated error is 20-30x smaller)."""
    gate: str
    L: float
    mean: float
    var: float
    err_mean: float
    err_var: float
    survival: np.ndarray    # P(N > n), n = 0..


def _tent_cdf(u):
    """CDF at u of a unit tent density on [-1, 1]: how much of a cloud-in-cell mass lies left of u."""
    u = np.clip(u, -1.0, 1.0)
    return np.where(u <= 0, 0.5 * (1 + u) ** 2, 1 - 0.5 * (1 - u) ** 2)


def _markov_survival(chain, Ls, h, tol, nmax):
    """P(S_n <= L) for every L in Ls (nL,), n = 0.. until all are below tol: (n_steps, nL)."""
    _, pi, P, x = chain
    K = int(math.ceil(max(Ls) / h)) + 2                     # S grid 0, h, .., covers every L
    q = np.minimum(np.floor(x / h).astype(np.int64), K)     # each y' moves S by x(y') = (q + theta) h
    th = x / h - np.floor(x / h)
    pad = int(q.max()) + 1
    rows = np.arange(K)[:, None] - q[None, :] + pad         # (K, M) source rows in the padded array
    read = np.stack([_tent_cdf((L - np.arange(K) * h) / h) for L in Ls])     # (nL, K)
    f = np.zeros((K, len(pi)))                              # (K, M) joint mass of (S_n, y_n), S_n <= S_max
    f[0] = pi                                               # S_0 = 0, y_0 stationary
    g = np.zeros((K + pad, len(pi)))
    surv = [np.ones(len(Ls))]
    # X >= 0, so S_n is non-decreasing and N > n  <=>  S_n <= L: one unkilled walk serves every L
    while surv[-1].max() > tol:
        if len(surv) > nmax:
            raise RuntimeError(f"survival still {surv[-1].max():.3g} after {nmax} steps")
        g[pad:] = f @ P                                     # y_n -> y_{n+1}
        # S += x(y_{n+1}), split linearly between the two neighbouring grid points (mean exact)
        f = (1 - th) * np.take_along_axis(g, rows, 0) + th * np.take_along_axis(g, rows - 1, 0)
        surv.append(read @ f.sum(axis=1))
    return np.array(surv)


def _window_moments(s):
    n = np.arange(len(s))[:, None]
    EN = s.sum(axis=0)
    return EN - 1.0, np.sum((2 * n + 1) * s, axis=0) - EN * EN


def markov_first_passage(gate, eps, cells_per_kappa=8, tol=1e-13, nmax=1_000_000):
    """Exact law of W = N - 1 for AR(1)-logit gates, by the Markov-additive walk (S_n, y_n) on a grid.

    gate: AR1LogitGate. eps: float or sequence of floats in (0, 1) (one walk serves them all).
    cells_per_kappa: S-grid cells per mean increment (h = kappa / cells_per_kappa), int >= 2.
    The joint mass of (S_n, y_n) is propagated by the AR(1) kernel on a y grid (spectrally accurate)
    and by cloud-in-cell shifts in S (error O(h^2): the split adds variance h^2 theta(1 - theta) per step);
    Richardson over (h, h/2) removes the h^2 term. At phi = 0 it is the iid exact numerics.
    Returns a list of MarkovPassage, one per eps (in order). Cost ~ (L/h) M^2 per step, M ~ 16/dy.
    """
    eps_list = [eps] if np.ndim(eps) == 0 else list(eps)
    if len(eps_list) == 0:
        raise ValueError("eps is empty")
    Ls = np.array([threshold(e) for e in eps_list])
    if int(cells_per_kappa) != cells_per_kappa or cells_per_kappa < 2:
        raise ValueError(f"cells_per_kappa must be an integer >= 2; got {cells_per_kappa}")
    chain = _ar1_chain(gate)
    kappa = float(chain[1] @ chain[3])
    h = kappa / cells_per_kappa
    s1 = _markov_survival(chain, Ls, h, tol, nmax)
    s2 = _markov_survival(chain, Ls, h / 2, tol, nmax)
    n = max(len(s1), len(s2))
    s1 = np.pad(s1, ((0, n - len(s1)), (0, 0)))
    s2 = np.pad(s2, ((0, n - len(s2)), (0, 0)))
    s = (4 * s2 - s1) / 3
    mean, var = _window_moments(s)
    mean2, var2 = _window_moments(s2)
    return [MarkovPassage(str(gate), float(Ls[i]), float(mean[i]), float(var[i]), float(abs(mean[i] - mean2[i])),
                          float(abs(var[i] - var2[i])), s[:, i].copy()) for i in range(len(Ls))]


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

# the thresholds scanned by default here and by the per-head verdict (heads.py): 0.5 .. 1e-6
EPS_SCAN = (0.5, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 1e-6)


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
