"""The window laws, each with its status, and the estimators of dependence they take as inputs.

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

The exact numerics the laws are checked against (iid lattice, AR(1)-logit Markov-additive walk) live in
exact.py, above this file. Derivations and statuses: docs/THEORY.md sections 2 (iid laws) and 4 (dependent
increments); the reference numbers they are checked against: docs/ANCHORS.md.

`python renewal.py` hands over to lawtable.py: the laws against the exact numerics over a scan of eps.
"""
import decimal
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special
from scipy.fft import next_fast_len

from foxwindow.laws.gates import Moments, threshold

__all__ = ["LATTICE_VAR", "wald_mean", "renewal_mean", "leading_var", "smith_C", "smith_var", "alibi_window",
           "alibi_window_real",
           "exponential_exact", "gamma_survival", "gamma_band", "lag_sums", "lag_products", "acf", "batch_means",
           "tau_from_acf",
           "geyer_cut", "initial_positive_tau", "long_run_variance", "dependent_var", "dependent_mean_N",
           "bartlett_correction", "OutsideRegime", "VarianceLaw", "REGIME_FRACTION", "BARTLETT_OMITTED",
           "bartlett_var", "second_order_constant", "second_order_var", "finite_n_var"]

# the expansions in L hold away from the lattice (ALiBi) limit: sigma^2 L / kappa^3 >= LATTICE_VAR (with tau <= 1
# folded in by the per-head regime rule, heads/dependence.py)
LATTICE_VAR = 0.3

# ----------------------------------------------------------------------------- iid laws


def wald_mean(kappa, L, mean_overshoot):
    """Wald: E[N] = (L + E[R_L]) / kappa, R_L = S_N - L the overshoot. Exact for any iid X > 0."""
    return (L + mean_overshoot) / kappa


def _check_law(m: Moments, L=None):
    """ValueError unless kappa > 0 is finite, sigma2 >= 0 and (when given) every L >= 0 is finite (L = 0, eps = 1,
    only evaluates the formula); returns L as a
    float, or a float64 array for array input (the laws are vectorised over L)."""
    if not (m.kappa > 0 and math.isfinite(m.kappa)):
        raise ValueError(f"kappa = E X must be finite and > 0 (the walk must cross L); got {m.kappa}")
    if not (m.sigma2 >= 0 and math.isfinite(m.sigma2)):
        raise ValueError(f"sigma2 = Var X must be finite and >= 0; got {m.sigma2}")
    if L is None:
        return None
    La = np.asarray(L, dtype=np.float64)
    if not np.all(np.isfinite(La) & (La >= 0)):
        raise ValueError(f"L = ln(1/eps) must be finite and >= 0; got {L}")
    return float(La) if La.ndim == 0 else La


def renewal_mean(m: Moments, L):
    """E[N] ~ L/kappa + mu2/(2 kappa^2). Asymptotic; for non-lattice X the error decays with L
    (exponentially for spread-out densities, Stone 1965). E[W] = E[N] - 1. ValueError for L NaN, infinite or < 0
    or kappa not finite and > 0."""
    L = _check_law(m, L)
    return L / m.kappa + m.mu2 / (2 * m.kappa ** 2)


def leading_var(m: Moments, L):
    """Var[N] = Var[W] ~ sigma2 L / kappa^3. Asymptotic: off by Smith's constant C at every L. ValueError for
    L NaN, infinite or < 0 (a negative L would give a negative variance) or kappa not finite and > 0."""
    L = _check_law(m, L)
    return m.sigma2 * L / m.kappa ** 3


def smith_C(m: Moments):
    """Smith's constant: C = 5 mu2^2/(4 kappa^4) - 2 mu3/(3 kappa^3) - mu2/(2 kappa^2) (0 for exponential X)."""
    _check_law(m)
    k = m.kappa
    return 5 * m.mu2 ** 2 / (4 * k ** 4) - 2 * m.mu3 / (3 * k ** 3) - m.mu2 / (2 * k ** 2)


def smith_var(m: Moments, L):
    """Var[N] ~ sigma2 L / kappa^3 + C. Asymptotic (Smith 1954; Cox 1962 ch. 4): non-lattice X, finite mu3.
    A constant increment (sigma2 = 0, the lattice limit) returns its exact variance 0, not 1/12 (Smith's C of
    a degenerate law is the variance of a uniform fractional part, an average over L). Other lattice laws are
    outside the law (it holds for them only averaged over L)."""
    L = _check_law(m, L)
    if m.sigma2 == 0:
        return 0.0 if np.ndim(L) == 0 else np.zeros_like(L)
    return leading_var(m, L) + smith_C(m)


def alibi_window(m, eps):
    """ALiBi's exact window for slope m: W = floor(L/m) (N = W + 1), Var = 0. L/m is only its relaxation.

    m: float slope > 0; eps: float in (0, 1), down to the smallest subnormal. Returns a Python int, computed in
    exact rationals from the floats L and m (so it is exact even where L/m overflows a float). L here is the
    float threshold(eps), ln(1/eps) rounded to double, and n m is compared with it exactly. Routines that add
    the increments in floating point (Monte Carlo, the windows of a trace) compare a rounded sum of n copies of
    m instead, which can differ by one where n m lies within that sum's rounding of L (ConstantGate(0.1) at L =
    6.9: 68 here, 69 from a float sum of 69 copies of 0.1). The window for the real number ln(1/eps) differs by
    one where L/m lies within an ulp of L of an integer (a boundary case): `alibi_window_real` computes that one."""
    if isinstance(m, bool) or not isinstance(m, (int, float, np.floating, np.integer)):
        raise TypeError(f"ALiBi slope m must be a real number; got {type(m).__name__}")
    if not (m > 0 and math.isfinite(m)):
        raise ValueError(f"ALiBi slope m must be finite and > 0; got {m}")
    return int(Fraction(threshold(eps)) // Fraction(float(m)))


def alibi_window_real(m, eps):
    """floor(ln(1/eps) / m) for the real number ln(1/eps) (not its double rounding) and the float m: decimal
    logarithm with enough digits for the integer part plus 30, so exact unless ln(1/eps)/m is within 1e-30
    relative of an integer (ln of a float eps != 1 is transcendental, never a rational times m)."""
    w = alibi_window(m, eps)                                # validates; the float answer, within one
    digits = len(str(w)) + 40
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        Lr = -decimal.Decimal(float(eps)).ln()
        return int((Lr / decimal.Decimal(float(m))).to_integral_value(rounding=decimal.ROUND_FLOOR))


def exponential_exact(kappa, L):
    """Exponential X with mean kappa: N - 1 ~ Poisson(L/kappa), so E[W] = Var[W] = L/kappa exactly.
    kappa > 0, L >= 0: finite floats, L may be an array (ValueError otherwise)."""
    kappa = _check_positive("kappa", kappa)
    La = np.asarray(L, dtype=np.float64)
    if not np.all(np.isfinite(La) & (La >= 0)):
        raise ValueError(f"L must be finite and >= 0; got {L}")
    r = (float(La) if La.ndim == 0 else La) / kappa
    return r, r


def gamma_survival(k, theta, L, nmax=None):
    """Exact P(N > n) = P(Gamma(n k, theta) <= L) for n = 0, 1, ... until it is below 1e-30 (or up to nmax)."""
    if nmax is None:
        n0, s = gamma_band(k, theta, L)
        return np.concatenate([np.ones(n0), s])
    n = np.arange(nmax + 1)
    s = np.ones(nmax + 1)
    s[1:] = special.gammainc(n[1:] * k, L / theta)
    return s


def gamma_band(k, theta, L, delta=1e-30):
    """(n0, s) with s[i] = P(Gamma((n0 + i) k, theta) <= L) over the transition range: 1 - s <= delta below n0
    and s <= delta past the end (both checked on the incomplete gamma functions themselves)."""
    x = L / theta
    mean = x / k
    sd = math.sqrt(x / k ** 2 + 1.0)

    def up(n):                                             # 1 - s_n
        return special.gammaincc(n * k, x) if n > 0 else 0.0

    lo, z = max(int(mean - 14 * sd) - 2, 0), 14
    while lo > 0 and up(lo) > delta:
        z += 4
        lo = max(int(mean - z * sd) - 2, 0)
    hi, z = int(mean + 14 * sd) + 3, 14
    while special.gammainc(hi * k, x) > delta:
        z += 4
        hi = int(mean + z * sd) + 3
    n = np.arange(lo, hi + 1)
    s = np.ones(len(n))
    pos = n > 0
    s[pos] = special.gammainc(n[pos] * k, x)
    return lo, np.concatenate([s, [0.0]])


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
    return lag_products(x - (x.mean(1, keepdims=True) if centre == "sequence" else x.mean()), max_lag)


def lag_products(y, max_lag):
    """sum_t y_t y_{t+k}, k = 0..max_lag, of each row of y (S, n) float64 as it is (lag_sums after its centring):
    (S, max_lag + 1) float64, each row from that row alone (the rows of a subset are the subset's own numbers)."""
    n = y.shape[1]
    m = next_fast_len(n + max_lag, real=True)                # no wrap-around up to max_lag (2n for every lag)
    f = np.fft.rfft(y, m, axis=1)
    # conj(f) f in that order at every size (f * conj(f) is computed so only where numpy reuses the temporary, from
    # 256 KiB, and a complex product's rounding depends on the order): each row's numbers are its own
    p = np.conj(f)
    np.multiply(p, f, out=p)
    return np.fft.irfft(p, m, axis=1)[:, : max_lag + 1]


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

    kappa > 0, sigma2_lr >= 0, L > 0: floats. Asymptotic: it misses the O(1) term C_dep of
    `second_order_var`, so its relative error is about -C_dep/Var[N], of either sign: +26% at L/kappa = 3 tau and
    +6.9% at 10 tau on AR(1) logits (tau = 18.2, C_dep = -49), -12% and -4.0% on a regime-switching gate
    (tau = 14.5, C_dep = +155) (dependent_errors.py --structures). Never negative. Prefer `second_order_var`.
    """
    return _check_nonneg("sigma2_lr", sigma2_lr) * _check_positive("L", L) / _check_positive("kappa", kappa) ** 3


def dependent_mean_N(kappa, sigma2_lr, L):
    """E[N] ~ L/kappa + 1/2 + sigma_LR^2 / (2 kappa^2) (Markov renewal theory): the crossing step N, not the
    window W = N - 1 (hence the name; subtract 1 for E[W]). Asymptotic; reduces to the iid renewal mean when
    tau = 1. kappa > 0, sigma2_lr >= 0, L > 0: floats.
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
    """A variance law's value with its parts. `in_regime` says where the law claims its accuracy; outside it the
    value is still returned, flagged.

    Second-order law: where L/kappa >= SECOND_ORDER_MULT x its correlation length ell = max(|C_dep|,
    2 |sum_k k gamma_k| / kappa^2) kappa^2 / sigma_LR^2, i.e. max(|C_dep|, |Bartlett's term|) <= lead /
    SECOND_ORDER_MULT: there it is within SECOND_ORDER_ACCURACY (3%; worst measured 1.8%) of the exact
    numerics on nine dependence structures (AR(1) logits, regime switching, a rotating chain, stochastic
    volatility, multi-scale long memory; second_order_regime.py, docs/DEPENDENT.md). Bartlett's term enters
    because C_dep's parts can cancel: on a three-state regime chain |C_dep| <= lead/4 from L/kappa = 14 while the
    law is still 6.8% off at 27. Bartlett's law: where its O(1) term is at most REGIME_FRACTION of the leading
    term and the part of the O(1) term it omits is at most BARTLETT_OMITTED of its value (within 1.6% on the
    three structures of dependent_errors.py --structures)."""
    var: float              # Var[N] = Var[W], > 0
    leading: float          # sigma_LR^2 L / kappa^3
    constant: float         # the O(1) term added to it
    in_regime: bool


REGIME_FRACTION = 0.25
SECOND_ORDER_MULT = 5.0        # the second-order law claims from L/kappa >= 5 x its correlation length ...
SECOND_ORDER_ACCURACY = 0.03   # ... to within 3% of Var[W]


def _variance_law(lead, const, L, kappa, what, scale=None):
    """scale: the size the O(1) term is held against (default |const|) for in_regime."""
    v = lead + const
    if not v > 0:
        raise OutsideRegime(f"{what} gives Var[N] = {v:.4g} <= 0 at L/kappa = {L / kappa:.4g}: L is far "
                            f"outside its regime (the O(1) term {const:.4g} exceeds the leading {lead:.4g}); "
                            "use finite_n_var or markov_first_passage there")
    if scale is None:
        return VarianceLaw(float(v), float(lead), float(const), bool(abs(const) <= REGIME_FRACTION * lead))
    # "from L/kappa >= 5 ell" includes the boundary itself, where scale and lead / 5 are equal up to rounding
    return VarianceLaw(float(v), float(lead), float(const), bool(scale <= lead / SECOND_ORDER_MULT * (1 + 1e-12)))


BARTLETT_OMITTED = 0.03


def bartlett_var(kappa, sigma2_lr, sum_k_gamma_k, L, kappa3_lr=None):
    """Leading law + Bartlett's term: sigma_LR^2 L/kappa^3 - 2 sum_k k gamma_k / kappa^2. All floats.

    Returns VarianceLaw; raises OutsideRegime (a ValueError) where the sum is <= 0 rather than return a
    negative variance. A heuristic: it misses the inversion and overshoot parts of the O(1) term,
    1/12 + (5/4)(sigma_LR^2/kappa^2)^2 - (2/3) kappa3_LR/kappa^3 (`second_order_var` has them), which dominate
    on regime-switching gates (-11.8% at L/kappa = 10 tau there; +1.5% on AR(1) logits; dependent_errors.py).
    in_regime is True only where, besides the usual |O(1)| <= REGIME_FRACTION lead, the omitted part is at most
    BARTLETT_OMITTED of the law's value; that needs kappa3_lr (the long-run third cumulant): without it
    in_regime is False, since the size of the omitted part is unknown.
    """
    lead = dependent_var(kappa, sigma2_lr, L)
    const = bartlett_correction(sum_k_gamma_k, kappa)
    law = _variance_law(lead, const, L, kappa, "the Bartlett-corrected law")
    if kappa3_lr is None:
        law.in_regime = False
    else:
        c = sigma2_lr / kappa ** 2
        omitted = 1 / 12 + 1.25 * c * c - 2 / 3 * float(kappa3_lr) / kappa ** 3
        law.in_regime = bool(law.in_regime and abs(omitted) <= BARTLETT_OMITTED * law.var)
    return law


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
    Not proved here: checked against the exact Markov-additive numerics (`exact.markov_first_passage`,
    `markov.markov_chain_first_passage`) on nine dependence structures (second_order_regime.py): its error is a
    function of L/kappa in units of the correlation length ell = max(|C_dep|, 2 |sum_k k gamma_k| / kappa^2)
    kappa^2 / sigma_LR^2, not of tau (from 5 ell on within 3% on all nine, worst 1.8%; in units of tau the
    3% point ranges over 2 ... 22 tau). See `second_order_var`'s in_regime and docs/DEPENDENT.md.
    """
    kappa = _check_positive("kappa", kappa)
    c = _check_nonneg("sigma2_lr", sigma2_lr) / kappa ** 2
    return 1 / 12 + 1.25 * c * c - 2 / 3 * float(kappa3_lr) / kappa ** 3 + bartlett_correction(sum_k_gamma_k, kappa)


def second_order_var(kappa, sigma2_lr, kappa3_lr, sum_k_gamma_k, L):
    """Var[N] ~ sigma_LR^2 L / kappa^3 + C_dep (see `second_order_constant`). Floats; L > 0.

    Returns VarianceLaw; raises OutsideRegime where the expansion is <= 0. Asymptotic: the O(1) term
    is exact in the limit; in_regime is True from L/kappa >= SECOND_ORDER_MULT x the correlation length
    max(|C_dep|, |Bartlett's term|) kappa^2 / sigma_LR^2, where it is within SECOND_ORDER_ACCURACY (see
    VarianceLaw).
    """
    lead = dependent_var(kappa, sigma2_lr, L)
    const = second_order_constant(kappa, sigma2_lr, kappa3_lr, sum_k_gamma_k)
    scale = max(abs(const), abs(bartlett_correction(sum_k_gamma_k, kappa)))
    return _variance_law(lead, const, L, kappa, "the second-order law", scale)


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
