"""Per-head verdict: do a trained FoX model's gates obey the window laws?

For every layer and head, from log-gate traces (S sequences, T positions):
  - kappa, sigma^2 of X = -log g; rho_k of X; tau = 1 + 2 sum rho_k (Geyer's initial positive
    sequence), with each sequence centred on its own mean (tau) and on the grand mean (tau_grand: a
    document-level shift in kappa then counts as long memory); sigma_LR^2 = sigma^2 tau;
  - per-row windows W_i(eps) over a scan of eps, on query rows in the second half of each sequence
    (rows 1024-2047 of the default 2048-token sequences lie beyond the shipped model's 1024-token
    training context; max_len analyses rows inside it); an eps at which any such row is censored (its
    window reaches the sequence start) is reported but kept out of every fit, and so is an eps outside
    the regime the laws claim (L/kappa >= 4 tau, sigma^2 L/kappa^3 >= 0.3);
  - three laws for Var[W](L): iid sigma^2 L/kappa^3, autocorrelation-adjusted sigma_LR^2 L/kappa^3, and
    the document mixture A L + B L^2 (each sequence a document with its own kappa_d: A the mean
    within-document slope, B = Var_d(1/kappa_d) with the stationary sampling noise of kappa_d removed),
    with the between-document share of Var[W] and, where the sequences' sources are known, the part of
    it between sources;
  - two tests per law, with jackknife-over-sequences errors (rows of one sequence share their gates;
    sequences are the independent units): the slope of Var[W] against L, and a Hotelling lack-of-fit
    test of the whole curve (free constant) with the jackknife covariance across eps;
  - calibration: a parametric bootstrap per head and law (the head's empirical quantile function on a
    Gaussian AR(1) latent with the head's tau; for the mixture each sequence scaled to its own kappa_d)
    fits a scaled chi-square to each statistic's null draws; a p-value is the larger of nominal and
    calibrated (never more liberal than nominal);
  - the attention-mass window (smallest d holding 1 - eps of row i's actual attention) against the
    decay-only window, to show how much the content term q.k moves it.
Verdicts: "iid law holds", "autocorrelation-adjusted law holds", "document-mixture law holds" (the
first law that both tests keep and whose slope band is narrower than half its prediction; the mixture
only with a resolved between-document term), "falsified" (every law rejected), or "undetermined" (too
few usable eps, too imprecise, no forgetting, or a censored head on traces shorter than 8192 tokens).

Level: the two-sided 95% Student-t quantile with S - 1 degrees of freedom, Bonferroni-corrected over the
heads analysed (critical_z), for each test. analyse_model and analyse_traces pass the number of heads
they analyse; a single analyse_head call reproduces their verdict with the same n_heads. The command
line is `python forget.py` (main here parses it; `python heads.py` only describes the module).
"""
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from scipy import stats
from tqdm import tqdm

from foxwindow import data, distributed, exact, forget, hf_models, outputs, renewal
from foxwindow.fox_attention import cum_log_gate, fox_logits
from foxwindow.model import load_model
from foxwindow.traces import load_trace, run_with_cache, save_trace

EPS_SCAN = exact.EPS_SCAN
MAX_LAG = 256
LAWS = ("iid", "lr", "mix")                 # iid, autocorrelation-adjusted, document-mixture
LAW_NAMES = dict(iid="iid law holds", lr="autocorrelation-adjusted law holds", mix="document-mixture law holds")
L_SHARE = math.log(1e3)                      # L at which the between-document share of Var[W] is reported
CURVE_POINTS = 4                             # thresholds in the curve test (spread evenly over the usable ones)
LONG_TRACES = 8192                           # the trace length a censored head needs before it is falsified


def _jackknife(values_loo):
    """Standard error from leave-one-out estimates (S,) or (S, ...)."""
    v = np.asarray(values_loo, dtype=np.float64)
    S = v.shape[0]
    return np.sqrt((S - 1) / S * np.sum((v - v.mean(axis=0)) ** 2, axis=0))


def _loo(per_seq):
    """Leave-one-sequence-out totals of per-sequence sums (S, ...) -> (S, ...)."""
    return per_seq.sum(axis=0, keepdims=True) - per_seq


def _nan():
    return float("nan")


@dataclass
class HeadResult:
    """One head's verdict. Every field has a default; build it from keywords. Lists run over eps_list.
    se_*: jackknife-over-sequences standard errors."""
    layer: int = 0
    head: int = 0
    # gate statistics of X = -log g
    kappa: float = field(default_factory=_nan)
    se_kappa: float = field(default_factory=_nan)
    sigma2: float = field(default_factory=_nan)
    se_sigma2: float = field(default_factory=_nan)
    excess_kurtosis: float = field(default_factory=_nan)
    tau: float = field(default_factory=_nan)                # each sequence centred on its own mean
    se_tau: float = field(default_factory=_nan)
    tau_grand: float = field(default_factory=_nan)          # centred on the grand mean (document shifts count)
    se_tau_grand: float = field(default_factory=_nan)
    sigma2_lr: float = field(default_factory=_nan)
    se_sigma2_lr: float = field(default_factory=_nan)
    # windows per eps
    eps_list: list = field(default_factory=list)
    L_list: list = field(default_factory=list)
    usable: list = field(default_factory=list)             # per eps: in the fit (uncensored, in the laws' regime)
    censored_frac: list = field(default_factory=list)      # per eps: fraction of analysed rows hitting the start
    mean_W: list = field(default_factory=list)
    se_mean_W: list = field(default_factory=list)
    var_W: list = field(default_factory=list)
    se_var_W: list = field(default_factory=list)
    law_mean_iid: list = field(default_factory=list)
    law_mean_lr: list = field(default_factory=list)
    law_var_iid: list = field(default_factory=list)
    law_var_lr: list = field(default_factory=list)
    law_var_mix: list = field(default_factory=list)        # A L + B L^2 (leading terms, no constant)
    # the slope test: d Var[W] / dL over the usable eps against each law's
    slope: float = field(default_factory=_nan)
    slope_se: float = field(default_factory=_nan)
    slope_ci: list = field(default_factory=lambda: [float("nan"), float("nan")])
    pred_slope_iid: float = field(default_factory=_nan)
    pred_slope_lr: float = field(default_factory=_nan)
    pred_slope_mix: float = field(default_factory=_nan)   # least-squares slope of the mixture law over usable L
    z_iid: float = field(default_factory=_nan)
    z_lr: float = field(default_factory=_nan)
    z_mix: float = field(default_factory=_nan)
    # the curve test: Hotelling lack-of-fit of Var[W](L) - law(L) (free constant), jackknife covariance
    curve_p_iid: float = field(default_factory=_nan)
    curve_p_lr: float = field(default_factory=_nan)
    curve_p_mix: float = field(default_factory=_nan)
    linear_p: float = field(default_factory=_nan)          # lack of fit of a straight line a + b L
    # the document mixture: Var[W] ~ A L + B L^2, A = E_d[sigma_LR,d^2/kappa_d^3], B = Var_d(1/kappa_d)
    mix_A: float = field(default_factory=_nan)
    se_mix_A: float = field(default_factory=_nan)
    mix_B: float = field(default_factory=_nan)             # sampling noise of kappa_d removed
    se_mix_B: float = field(default_factory=_nan)
    between_share: float = field(default_factory=_nan)     # B L^2 / (A L + B L^2) at L = ln 1000
    se_between_share: float = field(default_factory=_nan)
    stratum_kappa: dict = field(default_factory=dict)      # label -> mean of per-sequence kappa_d
    stratum_share: float = field(default_factory=_nan)     # share of B between strata
    se_stratum_share: float = field(default_factory=_nan)
    # calibration per law: [c, nu] of the scaled chi-square fitted to the bootstrap's z^2 and curve F
    # (curve_p_* are then the calibrated p-values: the larger of nominal and calibrated)
    n_boot: int = 0
    calib_slope: dict = field(default_factory=dict)
    calib_curve: dict = field(default_factory=dict)
    z_crit: float = field(default_factory=_nan)
    alpha: float = field(default_factory=_nan)
    rejected: list = field(default_factory=list)           # laws rejected by the slope or the curve test
    verdict: str = "undetermined"
    reasons: list = field(default_factory=list)
    # the attention-mass window against the decay window (analyse_model)
    decay_window_mean: float = field(default_factory=_nan)
    decay_window_censored: float = field(default_factory=_nan)   # fraction of those rows whose window hit the start
    mass_window_mean: float = field(default_factory=_nan)
    mass_window_censored: float = field(default_factory=_nan)    # fraction of rows whose mass window hit the start
    mass_eps: float = field(default_factory=_nan)


def critical_z(n_heads, n_seq):
    """The default critical value: two-sided 95% Student-t quantile with n_seq - 1 degrees of freedom
    (jackknife over sequences), Bonferroni over n_heads heads."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1; got {n_heads!r}")
    if n_seq < 2:
        raise ValueError(f"n_seq must be >= 2; got {n_seq!r}")
    return float(stats.t.isf(0.05 / (2 * n_heads), n_seq - 1))


# ----------------------------------------------------------------------------- the statistics


def _window_sums(x, Ls, r0):
    """Windows W = N - 1 of rows r0..T-1 of increments x (S, T) float64 for thresholds Ls (n,), as
    per-sequence sums: (s1, s2, cens) each (S, n) float64 (sum W, sum W^2, count of censored rows).
    Same windows as forget.windows (smallest j with c_j >= c_i - L, censored when j = 0)."""
    S, T = x.shape
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(x, 1)], 1)                     # (S, T+1), c_0 = 0
    i = np.arange(r0 + 1, T + 1)[:, None]                                          # (R, 1) query positions
    Ls = np.asarray(Ls, dtype=np.float64)
    s1, s2, cens = (np.empty((S, len(Ls))) for _ in range(3))
    for s in range(S):                                                             # np.searchsorted is 1-D
        j = np.searchsorted(c[s], c[s, r0 + 1:, None] - Ls[None, :], side="left")  # (R, n)
        W = (i - j).astype(np.float64)
        s1[s], s2[s], cens[s] = W.sum(0), (W * W).sum(0), (j == 0).sum(0)
    return s1, s2, cens


@dataclass
class _Gates:
    """Gate statistics of increments x (S, T) with leave-one-sequence-out versions (suffix _loo, (S,))."""
    kappa: float
    sigma2: float
    k_loo: np.ndarray
    v_loo: np.ndarray
    tau: float
    tau_loo: np.ndarray
    tau_grand: float
    tau_grand_loo: np.ndarray
    kd: np.ndarray          # (S,) per-sequence kappa_d
    vd: np.ndarray          # (S,) per-sequence sigma_d^2


def _tau(xx, nk, cut=None):
    """tau = 1 + 2 sum rho_k from pooled lag sums xx (K+1,) and pair counts nk; Geyer's cut if none given."""
    g = xx / nk
    rho = g / g[0]
    cut = renewal.geyer_cut(rho) if cut is None else cut
    return 1 + 2 * rho[1:cut].sum(), cut


def _gates(x):
    S, T = x.shape
    p1, p2 = x.sum(1), (x * x).sum(1)
    n = S * T
    kappa = p1.sum() / n
    sigma2 = p2.sum() / n - kappa ** 2
    k_loo = _loo(p1) / (n - T)
    v_loo = _loo(p2) / (n - T) - k_loo ** 2
    K = min(MAX_LAG, T - 1)
    nk = (T - np.arange(K + 1)) * 1.0
    taus = []
    for centre in ("sequence", "grand"):
        # pooled over sequences, (T - k) S pairs per lag (renewal.acf(x, K, pooled=True, centre=...))
        xx = renewal.lag_sums(x, K, centre)                                        # (S, K+1)
        tau, cut = _tau(xx.sum(0), nk * S)
        loo = _loo(xx) / (nk * (S - 1))
        tau_loo = 1 + 2 * (loo[:, 1:cut] / loo[:, :1]).sum(1)                      # the same cut: a smooth statistic
        taus += [tau, tau_loo]
    kd = p1 / T
    return _Gates(kappa, sigma2, k_loo, v_loo, taus[0], taus[1], taus[2], taus[3], kd, p2 / T - kd ** 2)


def _mixture(g, T, Lref, strata=None):
    """Document-mixture coefficients A, B (and leave-one-out (S,)), the between-document share of Var[W]
    at Lref and the part of B between strata. Each sequence d is a document with its own kappa_d and
    sigma_LR,d^2 = sigma_d^2 tau (the pooled tau: one sequence's own is too noisy). With
    v_d = sigma_LR,d^2 / T the variance of kappa_d under a stationary walk (delta method):
      Var[W] ~ A L + B L^2,  A = mean_d sigma_LR,d^2 / kappa_d^3 (1 - 6 v_d / kappa_d^2),
                             B = var_d(1/kappa_d) - mean_d v_d / kappa_d^4
    (the (1 - 6 v/kappa^2) and - v/kappa^4 terms remove the bias the noise of kappa_d puts into
    1/kappa_d^3 and into the spread of 1/kappa_d)."""
    kd, vd, S = g.kd, g.vd, len(g.kd)

    def coef(keep, tau):
        k, s = kd[keep], vd[keep] * tau
        v = s / T
        A = np.mean(s / k ** 3 * (1 - 6 * v / k ** 2))
        B = np.var(1 / k) - (len(k) - 1) / len(k) * np.mean(v / k ** 4)    # var (ddof 0) as the pooled Var[W]
        return A, B

    if np.any(kd <= 0):                       # a sequence with no forgetting: 1/kappa_d does not exist
        return None
    A, B = coef(np.ones(S, bool), g.tau)
    AB_loo = np.array([coef(np.arange(S) != d, g.tau_loo[d]) for d in range(S)])        # (S, 2)

    def share(A, B):                                   # the between-document share of Var[W] at Lref
        return B * Lref ** 2 / (A * Lref + B * Lref ** 2)

    out = dict(A=A, B=B, A_loo=AB_loo[:, 0], B_loo=AB_loo[:, 1], share=share(A, B),
               se_share=float(_jackknife(share(AB_loo[:, 0], AB_loo[:, 1]))))
    if strata is not None:
        lab = np.asarray(strata)
        groups = sorted(set(lab.tolist()))
        out["stratum_kappa"] = {str(gname): float(kd[lab == gname].mean()) for gname in groups}
        if len(groups) > 1:
            def between(keep):
                inv, l = 1 / kd[keep], lab[keep]
                tot = np.var(inv)
                b = sum((l == gname).mean() * (inv[l == gname].mean() - inv.mean()) ** 2 for gname in groups
                        if (l == gname).any())
                return b / tot
            out["stratum_share"] = between(np.ones(S, bool))
            out["se_stratum_share"] = float(_jackknife([between(np.arange(S) != d) for d in range(S)]))
    return out


def _law_curves(g, Lu, mix):
    """Each law's Var[W] at L = Lu (n,) and its leave-one-out versions (S, n), in a dict by law."""
    Lu = np.asarray(Lu)
    out = {"iid": (g.sigma2 / g.kappa ** 3 * Lu, (g.v_loo / g.k_loo ** 3)[:, None] * Lu),
           "lr": (g.sigma2 * g.tau / g.kappa ** 3 * Lu, (g.v_loo * g.tau_loo / g.k_loo ** 3)[:, None] * Lu)}
    if mix is not None:
        out["mix"] = (mix["A"] * Lu + mix["B"] * Lu ** 2, mix["A_loo"][:, None] * Lu + mix["B_loo"][:, None] * Lu ** 2)
    return out


def _gls_lack_of_fit(D, D_loo, X):
    """Hotelling lack-of-fit p-value of D (n,) against the column space of X (n, q), with the jackknife
    covariance of D from its leave-one-out values D_loo (S, n): T2 = r' C^-1 r for the GLS residual r,
    referred to (S - 1) p / (S - p) F(p, S - p) with p = n - q. Returns (p-value, F), NaNs when p < 1 or
    p >= S."""
    S, n = D_loo.shape
    p = n - X.shape[1]
    if p < 1 or p >= S:
        return float("nan"), float("nan")
    dev = D_loo - D_loo.mean(0)
    C = (S - 1) / S * dev.T @ dev                                                   # (n, n)
    Ci = np.linalg.pinv(C, rcond=1e-12, hermitian=True)
    beta = np.linalg.pinv(X.T @ Ci @ X) @ (X.T @ Ci @ D)
    r = D - X @ beta
    T2 = float(r @ Ci @ r)
    F = T2 * (S - p) / (p * (S - 1))
    return float(stats.f.sf(F, p, S - p)), float(F)


def _tests(V, V_loo, Lu, curves):
    """Slope z and curve p-value of each law against the measured Var[W] V (n,) at Lu, V_loo (S, n).
    Returns {law: (z, se of the slope difference, predicted slope, curve p, curve F)}, plus the measured slope,
    its SE and the straight line's lack-of-fit p under the keys 'slope', 'slope_se', 'linear_p'."""
    A = np.stack([Lu, np.ones_like(Lu)], 1)
    pinvA = np.linalg.pinv(A)                                                       # least-squares slope: row 0
    slope, slope_loo = pinvA[0] @ V, V_loo @ pinvA[0]
    # the curve tests on CURVE_POINTS thresholds spread over the usable ones: neighbouring eps share most
    # of their windows, and a jackknife covariance of many nearly collinear values is unstable
    sub = np.unique(np.round(np.linspace(0, len(Lu) - 1, min(CURVE_POINTS, len(Lu)))).astype(int))
    out = dict(slope=float(slope), slope_se=float(_jackknife(slope_loo)),
               linear_p=_gls_lack_of_fit(V[sub], V_loo[:, sub], A[sub])[0])
    ones = np.ones((len(sub), 1))
    for law, (P, P_loo) in curves.items():
        d, d_loo = slope - pinvA[0] @ P, slope_loo - P_loo @ pinvA[0]
        se = float(_jackknife(d_loo))
        z = float(d / se) if se > 0 else float("inf")
        out[law] = (z, se, float(pinvA[0] @ P)) + _gls_lack_of_fit((V - P)[sub], (V_loo - P_loo)[:, sub], ones)
    return out


def _fit(x, Lu, r0, strata=None):
    """Gate statistics, mixture and tests of every law on the usable thresholds Lu; the part of the
    analysis the parametric bootstrap repeats."""
    S, T = x.shape
    g = _gates(x)
    s1, s2, _ = _window_sums(x, Lu, r0)
    nr = T - r0
    mean = s1.sum(0) / (nr * S)
    V = s2.sum(0) / (nr * S) - mean ** 2
    mean_loo = _loo(s1) / (nr * (S - 1))
    V_loo = _loo(s2) / (nr * (S - 1)) - mean_loo ** 2
    mix = _mixture(g, T, L_SHARE, strata)
    return g, mix, _tests(V, V_loo, np.asarray(Lu), _law_curves(g, Lu, mix))


def _null_traces(x, law, phi, rng, kd=None):
    """Stationary traces (S, T) on which `law` holds, matched to the head's traces x: the empirical
    quantile function of x (its kappa, sigma^2 and tails) applied to a Gaussian AR(1) latent
    (phi = 0 for the iid law; else the head's tau as the latent's (1 + phi) / (1 - phi)); for the
    mixture law each sequence is scaled by kappa_d / kappa, so documents differ as the head's do."""
    from scipy.signal import lfilter
    S, T = x.shape
    e = rng.standard_normal((S, T))
    if law != "iid" and phi != 0:
        e[:, 0] /= math.sqrt(1 - phi * phi)                                        # start in the stationary law
        e = lfilter([math.sqrt(1 - phi * phi)], [1, -phi], e, axis=1)
    q = np.sort(x.ravel())
    u = stats.norm.cdf(e)
    y = q[np.minimum((u * q.size).astype(np.int64), q.size - 1)]
    if law == "mix":
        y = y * (kd / kd.mean())[:, None]
    return y


def _scaled_chi2(u):
    """Two-moment (Satterthwaite) fit of c chi^2_nu to bootstrap draws u (B,) of a squared statistic:
    c = var / (2 mean), nu = 2 mean^2 / var. Returns (c, nu), or None with fewer than 3 finite draws."""
    u = np.asarray(u, dtype=np.float64)
    u = u[np.isfinite(u)]
    if len(u) < 3 or u.var(ddof=1) <= 0:
        return None
    m, v = u.mean(), u.var(ddof=1)
    return float(v / (2 * m)), float(2 * m * m / v)


def _calibrate(x, Lu, r0, n_boot, seed, laws):
    """The null law of each law's two statistics on n_boot parametric-bootstrap heads where that law holds
    (_null_traces): the squared slope z and the curve test's Hotelling F, each fitted by a scaled
    chi-square (_scaled_chi2, which keeps a heavy tail when the draws have one). Returns
    ({law: [c, nu] of z^2}, {law: [c, nu] of F})."""
    g = _gates(x)
    phi = float(np.clip((g.tau - 1) / (g.tau + 1), -0.95, 0.99))
    rng = np.random.default_rng(seed)
    k_slope, k_curve = {}, {}
    for law in laws:
        z2, F = [], []
        for _ in range(n_boot):
            t = _fit(_null_traces(x, law, phi, rng, g.kd), Lu, r0)[2]
            if law in t:
                z2.append(t[law][0] ** 2)
                F.append(t[law][4])
        k_slope[law], k_curve[law] = _scaled_chi2(z2), _scaled_chi2(F)
    return k_slope, k_curve


def _p_values(t_law, S, calib_slope=None, calib_curve=None):
    """p-values of one law's slope and curve tests: nominal (Student t, Hotelling F), or with a bootstrap
    calibration [c, nu] the larger of the nominal and the scaled chi-square one (never more liberal)."""
    zl, _, _, p_curve, F = t_law
    p_slope = float(2 * stats.t.sf(abs(zl), S - 1))
    if calib_slope:
        p_slope = max(p_slope, float(stats.chi2.sf(zl * zl / calib_slope[0], calib_slope[1])))
    if calib_curve and math.isfinite(F):
        p_curve = max(p_curve, float(stats.chi2.sf(F / calib_curve[0], calib_curve[1])))
    return p_slope, p_curve


def _z_band(z, alpha, S, calib_slope=None):
    """The slope test's critical |z|: z, or the calibrated one where larger."""
    if not calib_slope:
        return z
    return max(z, math.sqrt(calib_slope[0] * stats.chi2.isf(alpha, calib_slope[1])))


def _rejects(t_law, S, alpha, calib_slope=None, calib_curve=None):
    """Whether one law's tests reject it at level alpha each (_p_values)."""
    p_slope, p_curve = _p_values(t_law, S, calib_slope, calib_curve)
    return bool(p_slope < alpha or (math.isfinite(p_curve) and p_curve < alpha))


def false_positive_rate(lg, law, n_rep, levels, seed=0):
    """How often the verdict rejects `law` on n_rep simulated heads where it holds, matched to the head's
    log-gate traces lg (S, T) as the bootstrap's (same usable eps). levels: list of (z, calib_slope,
    calib_curve): the slope test's critical value (both tests run at its level alpha) and the bootstrap
    calibrations of HeadResult.calib_slope/calib_curve[law] (None: nominal), all counted on the same
    replicates. Returns rejections per level (list of ints)."""
    x = forget.increments_from_log_gates(np.asarray(lg, dtype=np.float64))
    S, T = x.shape
    r = analyse_head(lg)
    Lu = np.array([L for L, u in zip(r.L_list, r.usable) if u])
    if len(Lu) < 3:
        raise ValueError(f"lg: only {len(Lu)} usable eps; the verdict does not test this head")
    g = _gates(x)
    phi = float(np.clip((g.tau - 1) / (g.tau + 1), -0.95, 0.99))
    rng = np.random.default_rng(seed)
    counts = [0] * len(levels)
    for _ in range(n_rep):
        t = _fit(_null_traces(x, law, phi, rng, g.kd), Lu, T // 2)[2][law]
        for i, (z, cs, cc) in enumerate(levels):
            counts[i] += _rejects(t, S, float(2 * stats.t.sf(z, S - 1)), cs, cc)
    return counts


def analyse_head(lg, eps_list=EPS_SCAN, z=None, layer=0, head=0, n_heads=1, strata=None, n_boot=0, seed=0):
    """Analyse one head's log-gate traces lg (S, T): S >= 3 sequences of T >= S tokens, numpy or torch,
    any float dtype, values <= 0. Returns a HeadResult.

    eps_list: non-empty sequence of thresholds in (0, 1).
    z: the critical value of the slope test (|measured - predicted slope| <= z * SE of the difference),
       a finite number > 0; None (default) gives critical_z(n_heads, S), the value forget.py uses. The
       curve test runs at the matching level alpha = 2 t_{S-1}(-z).
    n_heads: heads analysed together (for the Bonferroni default of z); int >= 1.
    strata: optional (S,) labels of the sequences' sources (e.g. two editions of the text): the
       between-document variance is split into between and within strata.
    n_boot: parametric-bootstrap replicates per law calibrating both tests (0: nominal levels).
    seed: int seed of the bootstrap.
    """
    if isinstance(lg, torch.Tensor):
        lg = lg.detach().cpu().numpy()
    x = forget.increments_from_log_gates(np.asarray(lg, dtype=np.float64))       # (S, T)
    if x.ndim != 2 or x.shape[0] < 3:
        raise ValueError(f"lg: need traces (S, T) with S >= 3 sequences for jackknife errors; got {x.shape}")
    S, T = x.shape
    if S > T:
        raise ValueError(f"lg: shape {x.shape} reads as {S} sequences x {T} tokens; expected (S sequences, "
                         "T tokens) with T >= S: is the array transposed (T, S)?")
    if isinstance(eps_list, (str, bytes)) or not hasattr(eps_list, "__iter__"):
        raise ValueError(f"eps_list must be a sequence of thresholds in (0, 1); got {eps_list!r}")
    eps_list = [float(e) for e in eps_list]
    if not eps_list:
        raise ValueError("eps_list is empty; give at least one threshold in (0, 1)")
    for e in eps_list:
        forget.threshold(e)
    if z is None:
        z = critical_z(n_heads, S)
    elif isinstance(z, bool) or not isinstance(z, (int, float, np.floating)) or not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a finite number > 0 (or None for the default); got {z!r}")
    if strata is not None and len(strata) != S:
        raise ValueError(f"strata: need one label per sequence ({S}); got {len(strata)}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be an int >= 0; got {n_boot!r}")
    alpha = float(2 * stats.t.sf(z, S - 1))
    Ls = [forget.threshold(e) for e in eps_list]
    res = HeadResult(layer=layer, head=head, eps_list=eps_list, L_list=Ls, z_crit=float(z), alpha=alpha)
    p1, p2 = x.sum(1), (x * x).sum(1)
    kappa = p1.sum() / x.size
    sigma2 = p2.sum() / x.size - kappa ** 2
    res.kappa, res.sigma2 = float(kappa), float(sigma2)
    res.se_kappa = float(_jackknife(_loo(p1) / (x.size - T)))
    res.se_sigma2 = float(_jackknife(_loo(p2) / (x.size - T) - (_loo(p1) / (x.size - T)) ** 2))
    if kappa <= 0 or sigma2 <= 1e-12 * kappa * kappa:                             # rounding leaves ~1e-17
        res.reasons.append("no forgetting (gate = 1)" if kappa <= 0 else "constant gate: lattice (ALiBi) window")
        return res
    res.excess_kurtosis = float(np.mean((x - kappa) ** 4) / sigma2 ** 2 - 3)
    g = _gates(x)
    res.tau, res.se_tau = float(g.tau), float(_jackknife(g.tau_loo))
    res.tau_grand, res.se_tau_grand = float(g.tau_grand), float(_jackknife(g.tau_grand_loo))
    res.sigma2_lr, res.se_sigma2_lr = float(sigma2 * g.tau), float(_jackknife(g.v_loo * g.tau_loo))
    tau = g.tau

    # windows of rows in the second half of each sequence (their walks are in the data)
    r0 = T // 2
    nr = T - r0
    s1, s2, cens = _window_sums(x, Ls, r0)                                         # (S, n_eps)
    mean = s1.sum(0) / (nr * S)
    var = s2.sum(0) / (nr * S) - mean ** 2
    mean_loo = _loo(s1) / (nr * (S - 1))
    var_loo = _loo(s2) / (nr * (S - 1)) - mean_loo ** 2
    m_iid = forget.Moments.from_raw(kappa, p2.sum() / x.size, float(np.mean(x ** 3)))
    res.censored_frac = [float(c) for c in cens.sum(0) / (nr * S)]
    res.mean_W, res.se_mean_W = mean.tolist(), _jackknife(mean_loo).tolist()
    res.var_W, res.se_var_W = var.tolist(), _jackknife(var_loo).tolist()
    n_lattice = 0
    for L, cf in zip(Ls, res.censored_frac):
        res.law_mean_iid.append(renewal.renewal_mean(m_iid, L) - 1)
        res.law_mean_lr.append(renewal.dependent_mean(kappa, sigma2 * tau, L) - 1)
        res.law_var_iid.append(renewal.leading_var(m_iid, L))
        res.law_var_lr.append(renewal.dependent_var(kappa, sigma2 * tau, L))
        # the regime the laws claim: no censoring, L/kappa >= 4 tau, and away from the lattice limit
        # (the smaller of the two predicted variances >= 0.3; below it the expansions break down)
        lattice = sigma2 * min(tau, 1.0) * L / kappa ** 3 < 0.3
        n_lattice += cf == 0.0 and lattice
        res.usable.append(bool(cf == 0.0 and L / kappa >= 4 * max(tau, 1.0) and not lattice))
    mix = _mixture(g, T, L_SHARE, strata)
    if mix is not None:
        res.mix_A, res.se_mix_A = float(mix["A"]), float(_jackknife(mix["A_loo"]))
        res.mix_B, res.se_mix_B = float(mix["B"]), float(_jackknife(mix["B_loo"]))
        res.between_share, res.se_between_share = float(mix["share"]), mix["se_share"]
        res.law_var_mix = [float(mix["A"] * L + mix["B"] * L * L) for L in Ls]
        res.stratum_kappa = mix.get("stratum_kappa", {})
        res.stratum_share = float(mix.get("stratum_share", float("nan")))
        res.se_stratum_share = float(mix.get("se_stratum_share", float("nan")))

    Lu = np.array([L for L, u in zip(Ls, res.usable) if u])
    censored = any(c > 0 for c in res.censored_frac)
    if len(Lu) < 3:
        why = f"only {len(Lu)} eps uncensored (windows < {r0} tokens) and in the asymptotic regime " \
              f"(L/kappa >= 4 tau = {4 * max(tau, 1):.0f}"
        if n_lattice:
            why += f", sigma^2 L/kappa^3 >= 0.3; {n_lattice} eps are near the lattice (ALiBi) limit"
        res.reasons.append(why + ")")
        if censored and T < LONG_TRACES:
            res.reasons.append(f"needs {LONG_TRACES}-token traces")
        return res

    u = np.array(res.usable)
    t = _tests(var[u], var_loo[:, u], Lu, _law_curves(g, Lu, mix))
    res.slope, res.slope_se, res.linear_p = t["slope"], t["slope_se"], t["linear_p"]
    res.slope_ci = [res.slope - z * res.slope_se, res.slope + z * res.slope_se]
    laws = [law for law in LAWS if law in t]
    if n_boot:
        res.n_boot = int(n_boot)
        res.calib_slope, res.calib_curve = _calibrate(x, Lu, r0, n_boot, seed, laws)
    held, rejected, loose = None, [], []
    for law in laws:
        zl, se_d, pred, p, _ = t[law]
        cs, cc = res.calib_slope.get(law), res.calib_curve.get(law)
        p_slope, p_curve = _p_values(t[law], S, cs, cc)
        setattr(res, f"z_{law}", zl)
        setattr(res, f"pred_slope_{law}", pred)
        setattr(res, f"curve_p_{law}", p_curve)
        zb = _z_band(z, alpha, S, cs)
        # a law "holds" only if the test could have seen it fail: the band of the slope difference must
        # be narrower than half the predicted slope; rejecting a law needs no such precision
        if p_slope < alpha or (math.isfinite(p_curve) and p_curve < alpha):
            rejected.append(law)
            res.rejected.append(law)
        elif zb * se_d > 0.5 * abs(pred):
            loose.append(f"{law}: +-{zb * se_d / abs(pred):.0%}")
        elif law == "mix" and not res.mix_B > z * res.se_mix_B:
            # without a resolved between-document term the mixture is the adjusted law with noise added
            loose.append(f"mix: between-document term B unresolved, z = {res.mix_B / res.se_mix_B:.1f}")
        else:
            held = held or law
    if held:
        res.verdict = LAW_NAMES[held]
    elif len(rejected) == len(laws):
        if censored and T < LONG_TRACES:
            res.reasons.append(f"needs {LONG_TRACES}-token traces (windows reach the start of {T}-token ones)")
        else:
            res.verdict = "falsified"
    else:
        res.reasons.append("slope too imprecise to test (" + ", ".join(loose) + ")")
    res.reasons += _diagnose(x, kappa, sigma2, tau, res.excess_kurtosis, res)
    return res


def _diagnose(x, kappa, sigma2, tau, kurt, res):
    """Why a law may fail here: each reason is a measured property, reported with its number."""
    S, T = x.shape
    why = []
    # documents: per-sequence kappa spread against the spread a stationary process would give
    ks = x.mean(1)
    expected = sigma2 * tau / T
    ratio = ks.var(ddof=1) / expected
    if ratio > stats.chi2.isf(1e-3, S - 1) / (S - 1):
        why.append(f"non-stationary across documents (per-sequence kappa spread {ratio:.1f}x a stationary one; "
                   f"between-document share of Var[W] {res.between_share:.2f} +- {res.se_between_share:.2f})")
    # positions: first half against second half
    a, b = x[:, : T // 2].mean(), x[:, T // 2:].mean()
    se = math.sqrt(2 * sigma2 * tau / (S * T / 2))
    if abs(a - b) > 4 * se:
        why.append(f"non-stationary across positions (kappa {a:.4f} first half vs {b:.4f} second)")
    if kurt > 20:
        why.append(f"heavy-tailed increments (excess kurtosis {kurt:.0f})")
    if math.isfinite(res.linear_p) and res.linear_p < res.alpha:
        why.append(f"Var[W] curved in L (straight-line lack of fit p = {res.linear_p:.1e})")
    n_cens = sum(c > 0 for c in res.censored_frac)
    if n_cens:
        why.append(f"{n_cens} of {len(res.censored_frac)} eps censored (excluded)")
    return why


# ----------------------------------------------------------------------------- the model


def capture(model, tokens):
    """Log-gate traces and the attention input of every layer, in one forward pass.

    tokens (S, T) int64. Returns (traces {layer: (S, T, H) float32}, inputs {layer: (S, T, d) float32}).
    """
    inputs, handles = {}, []
    for l, blk in enumerate(model.blocks):
        handles.append(blk.attn.register_forward_pre_hook(
            lambda mod, args, l=l: inputs.__setitem__(l, args[0].detach().float())))
    try:
        _, cache = run_with_cache(model, tokens, names_filter=lambda n: n.endswith("hook_log_fgate"))
    finally:
        for h in handles:
            h.remove()
    traces = {l: cache[f"blocks.{l}.attn.hook_log_fgate"] for l in range(len(model.blocks))}
    return traces, inputs


def _rows(T):
    """Query rows whose windows are reported: 256 evenly spaced in the second half of the sequence."""
    return torch.arange(T // 2, T, max(1, T // 256))


def _decay_window(r, lg, eps, rows):
    """Mean decay window of `rows` of traces lg (S, T) into r; censored rows enter with their lower
    bound, so with censoring the mean is a lower bound (r.decay_window_censored says how often)."""
    W, cens = forget.windows(lg, eps, dim=1)                                      # (S, T)
    r.mass_eps = eps
    r.decay_window_mean = float(W[:, rows].mean())
    r.decay_window_censored = float(cens[:, rows].mean())


@torch.no_grad()
def mass_windows(attn, x, eps, rows):
    """Attention-mass window per head: smallest d with sum_{j=i-d..i} A_ij >= 1 - eps, for query rows
    `rows` (R,) of x (S, T, d). Returns (S, R, H) int64. Uses the layer's own projections and gates."""
    S, T, _ = x.shape
    H, D = attn.num_heads, attn.head_dim
    q = attn.q_proj(x).view(S, T, H, D)[:, rows].transpose(1, 2)                  # (S, H, R, D)
    k = attn.k_proj(x).view(S, T, H, D).transpose(1, 2)                            # (S, H, T, D)
    c = cum_log_gate(attn.log_fgate(x))                                            # (S, H, T) float64
    logits = fox_logits(q, k, c[:, :, rows], c, attn.scale, q_pos=rows, dtype=torch.float64)
    A = torch.softmax(logits, -1)                                                   # (S, H, R, T)
    # suffix mass suf_j = sum_{j' >= j} A_ij' is the mass within distance i - j; the window is i - j*,
    # j* the largest j with suf_j >= 1 - eps (suf_0 = 1, and suf_j = 0 past the query)
    suf = A.flip(-1).cumsum(-1).flip(-1)
    jstar = (suf >= 1 - eps).sum(-1) - 1                                           # (S, H, R)
    d = rows[None, None, :] - jstar
    return d.transpose(1, 2)


N_BOOT = 30                                  # parametric-bootstrap replicates per law and head (--n-boot)


def source_labels(spans):
    """Strata of held-out sequences: the source file's name after its first '_' (the edition of the
    corpus: 'gut' modern, 'gut_f' First Folio). spans: list of {"file": ...} dicts. None when absent."""
    if not spans or not all(isinstance(sp, dict) and "file" in sp for sp in spans):
        return None
    names = [os.path.splitext(os.path.basename(str(sp["file"])))[0] for sp in spans]
    return [n.split("_", 1)[1] if "_" in n else "" for n in names]


def _truncate(traces, max_len):
    """The first max_len positions of every (S, T, H) trace (causal: the same gates a max_len-token run
    sees); max_len None keeps them whole."""
    if max_len is None:
        return traces
    T = next(iter(traces.values())).shape[1]
    if not 32 <= max_len <= T:
        raise ValueError(f"--max-len must lie in [32, {T}] (the traces' length); got {max_len}")
    return {k: v[:, :max_len] for k, v in traces.items()}


def analyse_layers(traces, eps_list=EPS_SCAN, strata=None, n_boot=N_BOOT, seed=0, progress=False):
    """The verdict for every head of traces {layer name: (S, T, H) array or tensor of log-gates}, with
    the critical value Bonferroni over all heads. Returns ([HeadResult], z)."""
    S = next(iter(traces.values())).shape[0]
    n_heads = sum(t.shape[2] for t in traces.values())
    z = critical_z(n_heads, S)                  # Bonferroni over the heads analysed (module docstring)
    results = []
    bar = tqdm(total=n_heads, desc="heads", disable=not progress, file=sys.stderr)
    for l, tr in enumerate(traces.values()):
        lg = tr.cpu().numpy() if isinstance(tr, torch.Tensor) else np.asarray(tr)          # (S, T, H)
        for h in range(lg.shape[2]):
            results.append(analyse_head(lg[:, :, h], eps_list, z=z, layer=l, head=h, n_heads=n_heads,
                                        strata=strata, n_boot=n_boot, seed=seed + 1000 * l + h))
            bar.update()
    bar.close()
    return results, z


def _rows_note(T, context):
    if context is None:
        return f"rows {T // 2}-{T - 1} of each sequence"
    where = "beyond" if T // 2 >= context else ("inside" if T <= context else "partly beyond")
    return f"rows {T // 2}-{T - 1} of each sequence, {where} the {context}-token training context"


def analyse_model(checkpoint=None, n_seq=32, seq_len=2048, eps_list=EPS_SCAN, mass_eps=1e-3,
                  device="cpu", progress=True, save_traces=None, n_boot=N_BOOT, max_len=None, seed=0):
    """Run the per-head analysis on a checkpoint's held-out text. Returns (results, info).
    save_traces: optional .npz path for the captured log-gate traces and their metadata (whole sequences).
    n_boot: bootstrap replicates per law and head (analyse_head). max_len: analyse only each sequence's
    first max_len positions (rows max_len/2 .. max_len - 1), e.g. the model's training context.
    Under torchrun each rank captures a contiguous block of the sequences and rank 0 gathers them, analyses
    and writes; the other ranks return (None, None)."""
    t0 = time.perf_counter()
    path = checkpoint or DEFAULT_CHECKPOINT
    if save_traces:                             # before the capture, not after it
        outputs.check_writable(save_traces, force=True, what="save_traces")
    env = distributed.setup(device)             # under torchrun each rank captures a block of the sequences
    device = str(env.device) if distributed.launched() else device
    model, meta = load_model(path, device=device)
    tokens, spans = data.heldout_tokens(n_seq=n_seq, seq_len=seq_len)
    # capture a few sequences at a time (rows are independent in eval mode): same traces, a progress bar
    # on the longest step, and less peak memory
    per = 4
    a, b = distributed.shard_range(n_seq)       # this rank's block; [0, n_seq) in one process
    traces, inputs = {}, {}
    show = progress and distributed.is_main()
    for s0 in tqdm(range(a, b, per), desc="capture", unit=f"x{per} seq", disable=not show, file=sys.stderr):
        tr, inp = capture(model, tokens[s0:min(s0 + per, b)].to(device))
        for l in tr:
            traces.setdefault(l, []).append(tr[l])
            inputs.setdefault(l, []).append(inp[l])
    traces = {l: torch.cat(v, 0) for l, v in traces.items()}                         # (S_rank, T, H) per layer
    inputs = {l: torch.cat(v, 0) for l, v in inputs.items()}                         # (S_rank, T, d) per layer
    # every rank's block on rank 0, in rank order: (S, T, H) and (S, T, d), as one process captures them
    traces, inputs = distributed.gather_traces(traces), distributed.gather_traces(inputs)
    if not distributed.is_main():
        return None, None                       # rank 0 analyses and writes
    t_capture = time.perf_counter() - t0
    if save_traces:
        save_trace(save_traces, {f"blocks.{l}.attn.hook_log_fgate": t for l, t in traces.items()},
                      dict(model=meta.get("name", path), checkpoint=path, spans=spans, eps=list(eps_list),
                           heads=model.cfg.n_heads, seq_len=seq_len))
    traces = _truncate(traces, max_len)
    T = next(iter(traces.values())).shape[1]
    strata = source_labels(spans)
    results, z = analyse_layers(traces, eps_list, strata, n_boot, seed, progress)
    rows = _rows(T)
    H = model.cfg.n_heads
    for l in traces:
        lg = traces[l].cpu().numpy()                                                 # (S, T, H)
        mw = None
        if not model.cfg.fixed_gate:            # causal: rows < T see the same attention in the first T tokens
            mw = mass_windows(model.blocks[l].attn, inputs[l][:, :T].cpu(), mass_eps, rows)   # (S, R, H)
        for h in range(H):
            r = results[l * H + h]
            _decay_window(r, lg[:, :, h], mass_eps, rows.numpy())
            if mw is not None:
                r.mass_window_mean = float(mw[:, :, h].double().mean())
                r.mass_window_censored = float((mw[:, :, h] == rows[None, :]).double().mean())
    context = getattr(model.cfg, "context", None)
    info = dict(checkpoint=path, model=meta.get("name", "fox_shakespeare"), n_seq=n_seq, seq_len=seq_len,
                analysed_len=T, spans=spans, strata=strata, z=z, n_boot=n_boot, capture_s=t_capture,
                total_s=time.perf_counter() - t0, val_bpc=meta.get("val_bpc"), context=context,
                rows=_rows_note(T, context))
    return results, info


DEFAULT_CHECKPOINT = outputs.repo_path("checkpoints/fox_shakespeare.pt")   # any cwd, installed or not


def _f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def print_table(results, info):
    S, T = info["n_seq"], info.get("analysed_len", info["seq_len"])
    nb = info.get("n_boot", 0)
    print(f"Per-head window laws: {info['checkpoint']}, {S} held-out sequences x {info['seq_len']} tokens"
          + (f" (first {T} analysed)" if T != info["seq_len"] else "")
          + f"; windows W = N - 1 of {info.get('rows', 'rows in each sequence second half')}.")
    print(f"slope: Var[W] against L = ln(1/eps) over uncensored eps with L/kappa >= 4 tau, CI = +-{info['z']:.2f} "
          f"jackknife SE (t, Bonferroni 95% over heads); iid / LR / mix: predicted slopes sigma^2/kappa^3, "
          f"sigma_LR^2/kappa^3 and of the document mixture A L + B L^2; z: (measured - predicted) / SE; "
          f"p: lack of fit of the whole curve Var[W](L) (jackknife covariance); "
          + (f"both tests calibrated per law by a {nb}-replicate parametric bootstrap; " if nb else "nominal levels; ")
          + "tau / tau_g: sequences centred on their own / the grand mean; between: share of Var[W] at eps = 1e-3 "
          "between documents (stationary noise of kappa_d removed).")
    hdr = (f"{'L.H':>4s} {'kappa':>7s} {'tau':>10s} {'tau_g':>6s} {'slope [CI]':>22s} {'iid':>7s} {'LR':>7s} "
           f"{'mix':>7s} {'z iid/LR/mix':>17s} {'p iid/LR/mix':>20s} {'between':>11s} {'W_dec':>6s} {'W_mass':>6s}"
           "  verdict")
    print(hdr)
    print("-" * (len(hdr) + 30))
    for r in results:
        ci = f"{r.slope:7.2f} [{r.slope_ci[0]:.2f},{r.slope_ci[1]:.2f}]" if math.isfinite(r.slope) else "-"
        wdec = (">" if r.decay_window_censored > 0 else "") + _f(r.decay_window_mean, ".0f")
        wmass = (">" if r.mass_window_censored > 0 else "") + _f(r.mass_window_mean, ".0f")
        zs = "/".join(_f(v, ".1f") for v in (r.z_iid, r.z_lr, r.z_mix))
        ps = "/".join(_f(v, ".0e") if math.isfinite(v) and v < 0.01 else _f(v, ".2f")
                      for v in (r.curve_p_iid, r.curve_p_lr, r.curve_p_mix))
        bs = f"{r.between_share:.2f}±{r.se_between_share:.2f}" if math.isfinite(r.between_share) else "-"
        print(f"{r.layer:>2d}.{r.head:<1d} {r.kappa:7.4f} {_f(r.tau, '5.2f')}±{_f(r.se_tau, '<4.2f')} "
              f"{_f(r.tau_grand, '6.2f')} {ci:>22s} {_f(r.pred_slope_iid, '7.2f')} {_f(r.pred_slope_lr, '7.2f')} "
              f"{_f(r.pred_slope_mix, '7.2f')} {zs:>17s} {ps:>20s} {bs:>11s} {wdec:>6s} {wmass:>6s}  "
              f"{r.verdict}" + (f" ({'; '.join(r.reasons)})" if r.reasons else ""))
    counts = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("summary: " + ", ".join(f"{v}: {c}" for v, c in counts.items())
          + f"; W_dec / W_mass: mean decay / attention-mass window at eps = {results[0].mass_eps:g}"
          + " ('>': some windows reach the sequence start, a lower bound)"
          + f"; capture {info['capture_s']:.1f} s, total {info['total_s']:.1f} s")
    strata = info.get("strata")
    if strata and len(set(strata)) > 1:
        labs = sorted(set(strata))
        print("strata (source of each sequence): " + ", ".join(f"{g}: {strata.count(g)}" for g in labs)
              + "; per head: mean kappa_d per stratum, share of the between-document variance between strata")
        for r in results:
            if r.stratum_kappa and math.isfinite(r.stratum_share):
                print(f"  {r.layer}.{r.head}: " + ", ".join(f"{g} {r.stratum_kappa[g]:.4f}" for g in labs)
                      + f"; between strata {r.stratum_share:.2f} ± {r.se_stratum_share:.2f}")
    if info.get("context") and T > info["context"]:
        print(f"note: rows {T // 2}-{T - 1} lie beyond the model's {info['context']}-token training context; "
              f"`--max-len {info['context']}` analyses rows inside it.")


def to_json(results, info):
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (list, tuple)):
            return [clean(u) for u in v]
        if isinstance(v, dict):
            return {k: clean(u) for k, u in v.items()}
        return v
    return dict(info=clean(info), heads=[{k: clean(v) for k, v in asdict(r).items()} for r in results])


def analyse_traces(path, eps_list=EPS_SCAN, mass_eps=1e-3, n_boot=N_BOOT, max_len=None, seed=0, progress=False):
    """Per-head analysis of traces saved with traces.save_trace (any model's gates): each
    (S, T, H) entry is one layer. No attention-mass windows (they need the model). Returns (results, info)."""
    t0 = time.perf_counter()
    traces, meta = load_traces_checked(path)
    traces = _truncate(traces, max_len)
    S, T = next(iter(traces.values())).shape[:2]
    strata = source_labels(meta.get("spans"))
    results, z = analyse_layers(traces, eps_list, strata, n_boot, seed, progress)
    for r, (l, h) in zip(results, [(l, h) for l, tr in enumerate(traces.values()) for h in range(tr.shape[2])]):
        _decay_window(r, list(traces.values())[l][:, :, h], mass_eps, _rows(T).numpy())
    info = dict(checkpoint=path, model=meta.get("model", "?"), n_seq=S, seq_len=meta.get("seq_len", T),
                analysed_len=T, spans=meta.get("spans"), strata=strata, z=z, n_boot=n_boot, capture_s=0.0,
                total_s=time.perf_counter() - t0, layers=list(traces), rows=_rows_note(T, None))
    return results, info


MIN_TRACE_LEN = 16


def load_traces_checked(path):
    """traces.load_trace plus the layout checks the analysis needs: every trace (S, T, H) with
    S >= 3 sequences and T >= max(S, H, 16) tokens, the same S and T in every layer. A (B, H, T) array
    saved as if it were (B, T, H) is caught here (it reads as a few tokens and many heads) unless the
    metadata's 'heads' already rejected it in load_trace. Raises ValueError naming the layout."""
    traces, meta = load_trace(path)
    shapes = {name: t.shape for name, t in traces.items()}
    for name, (S, T, H) in shapes.items():
        if T < H or T < MIN_TRACE_LEN or T < S:
            raise ValueError(f"{path}: trace '{name}' read as (B, T, H) = ({S}, {T}, {H}): {S} sequences x {T} "
                             f"tokens, {H} heads; traces must be (B, T, H) with T >= max(B, H, {MIN_TRACE_LEN}): "
                             "a (B, H, T) array was probably saved as is (transpose it to (B, T, H))")
        if S < 3:
            raise ValueError(f"{path}: trace '{name}' holds {S} sequences; the jackknife needs at least 3")
    if len({s[:2] for s in shapes.values()}) > 1:
        raise ValueError(f"{path}: layers disagree in (sequences, tokens): {shapes}")
    return traces, meta


def check(args):
    """Check the analysis inputs before any work (ValueError naming the argument): the trace file loads
    with a usable layout, or the checkpoint loads and the corpus holds the held-out windows."""
    if args.traces:
        load_traces_checked(args.traces)
        return
    try:
        load_model(args.checkpoint or DEFAULT_CHECKPOINT)
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"--checkpoint: {exc}") from None
    try:
        data.heldout_tokens(n_seq=args.n_seq, seq_len=args.seq_len)
    except ValueError as exc:
        raise ValueError(f"--n-seq {args.n_seq} x --seq-len {args.seq_len}: {exc}") from None


# ----------------------------------------------------------------------------- Hugging Face style models


def analyse_hf_model(cfg, eps_list=None, progress=True, save_traces=None):
    """Per-head analysis of a Hugging Face style checkpoint (see the module docstring).
    Returns (results [HeadResult], info dict) as analyse_model does, info adding the
    families, what the laws mean for each, and whether attention-mass windows exist. save_traces: .npz
    path for the analysed traces (written atomically; check it with outputs.check_writable first)."""
    eps_list = EPS_SCAN if eps_list is None else eps_list
    t0 = time.perf_counter()
    if str(cfg.device).startswith("cuda") and not torch.cuda.is_available():
        raise hf_models.ModelError(f"--device {cfg.device}: no CUDA device here")
    model, config = hf_models.load_model(cfg.model, cfg.device, cfg.dtype)
    tok = hf_models.load_tokenizer(cfg.tokenizer or cfg.model)
    ids, spans = hf_models.heldout_ids(tok, cfg.n_seq, cfg.seq_len, cfg.text, getattr(config, "vocab_size", None))
    rows = _rows(cfg.seq_len)
    decays, fam, lay, mass = hf_models.capture_batches(model, ids, cfg.batch, cfg.device, cfg.mass_eps, rows,
                                                       cfg.per_channel)
    t_capture = time.perf_counter() - t0
    traces = hf_models.analysis_traces(decays, cfg.per_channel)             # {name: (S, T, H or H*K)}
    if save_traces:
        save_trace(save_traces, traces, dict(model=cfg.model, families=fam, spans=spans, eps=list(eps_list),
                                                per_channel=cfg.per_channel))       # written atomically
    n_heads = sum(t.shape[2] for t in traces.values())
    z = critical_z(n_heads, cfg.n_seq)
    results = []
    bar = tqdm(total=n_heads, desc="heads", disable=not progress, file=sys.stderr)
    for i, (n, tr) in enumerate(traces.items()):
        lg = tr.double().numpy()                                                # (S, T, H)
        layer = lay[n] if lay[n] is not None else i
        for h in range(lg.shape[2]):
            r = analyse_head(lg[:, :, h], eps_list, z=z, layer=layer, head=h)
            _decay_window(r, lg[:, :, h], cfg.mass_eps, rows.numpy())
            if n in mass:
                r.mass_window_mean = float(mass[n][:, :, h].double().mean())
            results.append(r)
            bar.update()
    bar.close()
    families = sorted(set(fam.values()))
    no_mass = [f for f in families if hf_models.adapters.get_adapter(f).kind != "softmax"]
    info = dict(checkpoint=cfg.model, model=cfg.model, n_seq=cfg.n_seq, seq_len=cfg.seq_len, spans=spans, z=z,
                capture_s=t_capture, total_s=time.perf_counter() - t0, val_bpc=None,
                rows="second half of each sequence", layers=list(traces), families=families,
                laws={f: hf_models.adapters.get_adapter(f).note for f in families},
                per_channel=cfg.per_channel, tokens="tokenizer ids of " + (cfg.text or "the held-out plays"),
                mass_window=("attention-mass window from the attention op's q, k" if not no_mass else
                             f"not available for {', '.join(no_mass)}: no attention matrix (a recurrent state); "
                             f"W_mass is empty"))
    return results, info


def main_hf_model(args):
    """`python forget.py --model ...` (args parsed by main). Returns the exit code: 0, or 2 after one
    line on stderr for a problem with the model, tokenizer, text or options."""
    force = bool(getattr(args, "force", False))
    try:
        cfg = hf_models.ModelRunConfig(model=args.model, tokenizer=args.tokenizer, text=args.text,
                                       device=args.device, dtype=args.dtype, n_seq=args.n_seq, seq_len=args.seq_len,
                                       batch=args.batch, mass_eps=args.eps, per_channel=args.per_channel)
        json_path, traces_path = getattr(args, "json", None), getattr(args, "save_traces", None)
        for p, what in ((json_path, "--json"), (traces_path, "--save-traces")):
            if p:
                outputs.check_writable(p, force=force, what=what)                 # before any work
        results, info = analyse_hf_model(cfg, progress=not getattr(args, "no_progress", False),
                                         save_traces=traces_path)
        print_table(results, info)
        for f in info["families"]:
            print(f"{f}: {info['laws'][f]}")
        print(f"W_mass: {info['mass_window']}")
        if json_path:
            outputs.write_json(json_path, to_json(results, info))
    except (hf_models.ModelError, ValueError) as exc:
        print(f"forget: error: {exc}", file=sys.stderr)
        return 2
    return 0


# ----------------------------------------------------------------------------- command line


def _input(path, what):
    """An input file: relative to the working directory, else to the repository; UsageError if absent."""
    p = os.path.abspath(path)
    if not os.path.exists(p) and not os.path.isabs(path) and os.path.exists(outputs.repo_path(path)):
        p = outputs.repo_path(path)
    return outputs.input_file(what, p)


def check_args(a):
    """Every argument checked before any work; outputs.UsageError naming the argument."""
    outputs.eps_arg("--eps", a.eps)
    outputs.positive("--trials", a.trials, lo=2)                 # a variance needs two windows
    outputs.positive("--n-seq", a.n_seq, lo=3)                   # the jackknife needs three sequences
    outputs.positive("--seq-len", a.seq_len, lo=32)              # windows are read on the second half
    outputs.device_arg("--device", a.device)
    if a.synthetic:
        clash = [f for f, v in (("--traces", a.traces), ("--checkpoint", a.checkpoint),
                                ("--save-traces", a.save_traces)) if v]
        if clash:
            raise outputs.UsageError(f"--synthetic ignores {' and '.join(clash)}: drop one or the other")
    elif a.traces:
        clash = [f for f, v in (("--checkpoint", a.checkpoint), ("--save-traces", a.save_traces)) if v]
        if clash:
            raise outputs.UsageError(f"--traces analyses saved traces; it cannot be combined with "
                                     f"{' and '.join(clash)}")
        a.traces = _input(a.traces, "--traces")
    if a.checkpoint:
        a.checkpoint = _input(a.checkpoint, "--checkpoint")
    if a.json:
        a.json = outputs.check_writable(a.json, force=a.force, what="--json")
    if a.save_traces:
        a.save_traces = outputs.check_writable(a.save_traces, force=a.force, what="--save-traces")
        if a.json and a.json == a.save_traces:
            raise outputs.UsageError("--json and --save-traces name the same file")


def run_synthetic(a):
    """`python forget.py --synthetic`: the Monte Carlo table (a: parsed and checked arguments)."""
    rows = exact.synthetic_table(a.eps, a.trials, a.seed, progress=not a.no_progress)
    exact.print_synthetic(rows)
    if a.json:
        outputs.write_json(a.json, rows)


def build_parser():
    """The command line of the per-head analysis (`python forget.py`): every per-head flag, the --model
    flags of hf_models and --synthetic (forget's synthetic table)."""
    p = outputs.parser(__doc__.split("\n")[0] + " (python forget.py and python heads.py)")
    p.add_argument("--synthetic", action="store_true", help="synthetic gates instead of the shipped model's traces")
    p.add_argument("--eps", type=float, default=1e-3, help="decay threshold in (0, 1)")
    p.add_argument("--trials", type=int, default=200_000, help="Monte Carlo trials per gate (--synthetic)")
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (--synthetic) and bootstrap seed")
    p.add_argument("--checkpoint", default=None,
                   help="FoX checkpoint for the per-head analysis (None: the shipped checkpoints/fox_shakespeare.pt)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--n-seq", type=int, default=32, help="held-out sequences for the per-head analysis")
    p.add_argument("--traces", default=None, help="analyse saved log-gate traces (.npz from save_trace) instead")
    p.add_argument("--save-traces", default=None, help="write the captured log-gate traces to this .npz")
    p.add_argument("--seq-len", type=int, default=2048,
                   help="tokens per sequence; windows longer than half of it are censored")
    p.add_argument("--max-len", type=int, default=None,
                   help="analyse only the first MAX_LEN positions of each sequence (rows MAX_LEN/2 .. MAX_LEN-1), "
                        "e.g. 1024 to stay inside the shipped model's training context")
    p.add_argument("--n-boot", type=int, default=N_BOOT,
                   help="parametric-bootstrap replicates per law and head calibrating the tests (0: nominal levels)")
    p.add_argument("--json", default=None, help="write the results as JSON to this path (NaN written as null)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    hf_models.add_arguments(p)                     # --model: a gated Hugging Face style checkpoint
    outputs.add_common(p)
    return p


def main(argv=None):
    """`python forget.py ARGV` (forget.main hands over here). Returns the exit code (None for 0)."""
    a = build_parser().parse_args(argv)
    # the verdict's own options apply to the shipped model and saved traces only: never ignored silently
    own = [f for f, on in (("--max-len", a.max_len is not None), ("--n-boot", a.n_boot != N_BOOT)) if on]
    if own and (hf_models.wants_model(a) or a.synthetic):
        raise outputs.UsageError(f"{' and '.join(own)} apply to the shipped model or --traces; "
                                 f"not to {'--model' if hf_models.wants_model(a) else '--synthetic'}")
    single = [f for f, on in (("--model", hf_models.wants_model(a)), ("--traces", a.traces),
                              ("--synthetic", a.synthetic)) if on]
    if single and distributed.launched():
        # only the shipped-model capture is split across ranks; the rest would run once per rank
        raise outputs.UsageError(f"{single[0]} runs in one process; under torchrun only the shipped model's "
                                 "capture is split across ranks (run it without torchrun)")
    if hf_models.wants_model(a):
        clash = [f for f, on in (("--traces", a.traces), ("--synthetic", a.synthetic), ("--checkpoint", a.checkpoint))
                 if on]
        if clash:
            raise outputs.UsageError(f"--model analyses that model; {' and '.join(clash)} would be ignored: drop one")
        return main_hf_model(a)
    check_args(a)
    if a.synthetic:
        return run_synthetic(a)
    outputs.positive("--n-boot", a.n_boot, lo=0)
    if a.max_len is not None:
        outputs.positive("--max-len", a.max_len, lo=32)
        if not a.traces and a.max_len > a.seq_len:
            raise outputs.UsageError(f"--max-len {a.max_len} exceeds --seq-len {a.seq_len}")
    try:
        check(a)
    except ValueError as exc:
        raise outputs.UsageError(str(exc)) from None
    kw = dict(mass_eps=a.eps, n_boot=a.n_boot, max_len=a.max_len, seed=a.seed)
    if a.traces:
        results, info = analyse_traces(a.traces, progress=not a.no_progress, **kw)
    else:
        results, info = analyse_model(a.checkpoint, n_seq=a.n_seq, seq_len=a.seq_len, device=a.device,
                                      progress=not a.no_progress, save_traces=a.save_traces, **kw)
        if results is None:
            return                              # not rank 0: rank 0 prints and writes
    print_table(results, info)
    if a.json:
        outputs.write_json(a.json, to_json(results, info))


def run():
    """The `forget` console command and `python forget.py` / `python heads.py`: main with one-line errors."""
    return outputs.cli(main)


if __name__ == "__main__":
    sys.exit(run())
