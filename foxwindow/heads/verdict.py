"""Per-head verdict: does a head's window obey the renewal laws where they claim to hold, and what is its
window at every L?

For one head, from log-gate traces (S sequences = documents, T positions), with X = -log g:

  - gate statistics kappa, sigma^2 (jackknife over sequences), Geyer's tau (a diagnostic);
  - V(n) = Var(S_n) and tau(n) at every block length up to T/2 (dependence.variance_function), about the
    grand mean and within documents;
  - windows W = N - 1 of the rows in the second half of each sequence at every L asked for, right-censored
    where they reach the sequence start (Kaplan-Meier for those);
  - the regime (dependence.in_regime): an L at which the asymptotic laws claim to hold;
  - the dependent (document-mixture, finite-n) law, tested on the L in the regime:
        E[W](L)   slope mean_d (1/kappa_d)                                    (each document its own kappa_d)
        Var[W](L) = L mean_d sigma_d^2 tau_w(n_L)/kappa_d^3 + L^2 Var_d(1/kappa_d)
                    + 2 L Cov_d(1/kappa_d, sigma_d^2 tau_w(n_L)/(2 kappa_d^2)) + O(1)
    where tau_w(n_L) is the within-document tau(n) at n_L = L/kappa (levelled there, by the regime), with
    the sampling noise of kappa_d removed (delta method). For one document rate it is the
    autocorrelation-adjusted law sigma_LR^2 L/kappa^3; for independent gates the iid law sigma^2 L/kappa^3
    (renewal.dependent_var and renewal.leading_var; `law_curves` evaluates those from renewal.py);
  - two tests of it, each the slope over the in-regime L (free constant, so the O(1) term is not tested):
    of Var[W] against the law's, and of E[W] against mean_d(1/kappa_d); plus the iid law's variance slope
    (it decides only which law is named, never "law false");
  - calibration: a document bootstrap (whole sequences drawn with replacement, so each document keeps
    its own correlation shape, tails and rate; no parametric refit), N_BOOT draws, computed exactly by
    reweighting per-sequence sums; for each statistic D the p-value is the larger of the basic bootstrap
    p = (1 + #{|D* - D| >= |D|}) / (B + 1) and the Student-t p of D / sd(D*) with S - 1 degrees of freedom;
  - the family: 2 tests per head, Bonferroni over the n_heads heads of the model (2 n_heads tests): the
    chance that any head of a model is called "law false" where the law holds is at most ALPHA = 0.05.

Verdicts (one meaning each):
  "law holds"       in the regime at >= MIN_TESTED L, neither test rejects, and the test could have seen a
                    miss: its band (the bootstrap quantile of |D* - D| at the family level) is at most
                    HOLD_TOL of the predicted slope. `law` names the simplest law that passes: "iid" if
                    the iid slope is also not rejected at that precision, else "dependent".
  "law false"       in the regime at >= MIN_TESTED L and a test rejects at the family level.
  "pre-asymptotic"  fewer than MIN_TESTED L in the regime: no law is claimed; the prediction stands. A
                    reason says when kappa drifts along the positions (t-test over documents of the
                    second-half minus first-half kappa, at the per-test level): then no stationary law
                    ever applies, however long the traces.
  "undetermined"    data reasons only: fewer than MIN_DOCS documents, no forgetting, every window
                    censored, or a test in the regime too imprecise for HOLD_TOL (too few documents).
Every head gets a prediction at every L (predict.py: block bootstrap of its own increments) with an
out-of-sample score.
"""
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from foxwindow.heads import dependence, predict
from foxwindow.laws import gates, renewal

__all__ = ["ALPHA", "N_BOOT", "HOLD_TOL", "MIN_TESTED", "MIN_DOCS", "STATES", "HeadResult", "law_curves", "analyse",
           "block_lengths"]

ALPHA = 0.05            # family-wise level per model
N_BOOT = 4000           # document-bootstrap draws per head (reweighting: cheap)
HOLD_TOL = 0.25         # "law holds" needs a band at most 25% of the predicted slope
MIN_TESTED = 3          # L in the regime needed to test a law
MIN_DOCS = 4            # documents needed (two to fit, two to score out of sample)
STATES = ("law holds", "law false", "pre-asymptotic", "undetermined")


def _nan():
    return float("nan")


@dataclass
class HeadResult:
    """One head's verdict and predictions. Lists run over L_list (thresholds L = ln 1/eps).
    se_*: jackknife-over-sequences standard errors unless said otherwise."""
    layer: int = 0
    head: int = 0
    n_seq: int = 0
    kappa: float = field(default_factory=_nan)
    se_kappa: float = field(default_factory=_nan)
    sigma2: float = field(default_factory=_nan)
    se_sigma2: float = field(default_factory=_nan)
    excess_kurtosis: float = field(default_factory=_nan)
    tau: float = field(default_factory=_nan)                # Geyer, within sequences (diagnostic)
    se_tau: float = field(default_factory=_nan)
    tau_grand: float = field(default_factory=_nan)          # Geyer, about the grand mean (diagnostic)
    se_tau_grand: float = field(default_factory=_nan)
    tau_long: float = field(default_factory=_nan)           # within-document tau(n) at n = T/2
    se_tau_long: float = field(default_factory=_nan)
    tau_growth: float = field(default_factory=_nan)         # tau_w(T/2) / tau_w(T/8): 1 once levelled
    # stationarity across positions: per-document kappa of the second half minus the first, t over documents
    position_shift: float = field(default_factory=_nan)
    se_position_shift: float = field(default_factory=_nan)
    p_position: float = field(default_factory=_nan)
    sigma2_lr: float = field(default_factory=_nan)          # sigma^2 tau_long
    # V(n): block lengths and tau(n) (within documents, about the grand mean), with SEs
    n_list: list = field(default_factory=list)
    tau_n: list = field(default_factory=list)
    se_tau_n: list = field(default_factory=list)
    tau_n_grand: list = field(default_factory=list)
    # per L
    eps_list: list = field(default_factory=list)
    L_list: list = field(default_factory=list)
    in_regime: list = field(default_factory=list)
    regime_why: list = field(default_factory=list)
    level_ratio: list = field(default_factory=list)        # tau_w(2n)/tau_w(n) at n = L/kappa
    censored_frac: list = field(default_factory=list)
    mean_W: list = field(default_factory=list)
    se_mean_W: list = field(default_factory=list)
    var_W: list = field(default_factory=list)
    se_var_W: list = field(default_factory=list)
    km_mean: list = field(default_factory=list)            # Kaplan-Meier (restricted) mean: a bound if censored
    km_median: list = field(default_factory=list)          # NaN: beyond km_bound
    km_bound: list = field(default_factory=list)
    law_mean: list = field(default_factory=list)           # renewal.dependent_mean_N - 1 with sigma^2 tau_w(n_L)
    law_var_iid: list = field(default_factory=list)        # renewal.leading_var
    law_var_lr: list = field(default_factory=list)         # renewal.dependent_var with sigma^2 tau_w(n_L)
    law_var_mix: list = field(default_factory=list)        # the dependent (document-mixture) law, tested
    # the prediction (block bootstrap of the head's own increments, all documents)
    pred_model: str = "document-stratified block bootstrap"
    pred_mean: list = field(default_factory=list)
    pred_se_mean: list = field(default_factory=list)
    pred_var: list = field(default_factory=list)
    pred_q05: list = field(default_factory=list)
    pred_q50: list = field(default_factory=list)
    pred_q95: list = field(default_factory=list)
    pred_p_beyond: list = field(default_factory=list)      # P(W > context)
    context: int = 0
    # its out-of-sample score (fit on even documents, score on odd)
    oos_coverage: list = field(default_factory=list)
    oos_se_coverage: list = field(default_factory=list)
    oos_z_mean: list = field(default_factory=list)
    oos_z_var: list = field(default_factory=list)
    oos_censored: list = field(default_factory=list)
    # the tests on the in-regime L (slopes in L; D = measured - predicted)
    n_tested: int = 0
    slope: float = field(default_factory=_nan)             # measured d Var[W] / dL
    slope_se: float = field(default_factory=_nan)
    slope_ci: list = field(default_factory=lambda: [float("nan"), float("nan")])
    pred_slope_iid: float = field(default_factory=_nan)
    pred_slope_lr: float = field(default_factory=_nan)
    pred_slope_mix: float = field(default_factory=_nan)    # the dependent law's (tested)
    mean_slope: float = field(default_factory=_nan)
    pred_mean_slope: float = field(default_factory=_nan)
    p_var: float = field(default_factory=_nan)
    p_mean: float = field(default_factory=_nan)
    p_iid: float = field(default_factory=_nan)
    band_var: float = field(default_factory=_nan)          # bootstrap |D* - D| quantile at the test level
    mix_B: float = field(default_factory=_nan)             # Var_d(1/kappa_d), noise removed
    se_mix_B: float = field(default_factory=_nan)
    between_share: float = field(default_factory=_nan)     # B L^2 / Var law at L = ln 1000
    n_boot: int = 0
    seed: int = -1
    alpha: float = ALPHA
    alpha_test: float = field(default_factory=_nan)        # per-test level: ALPHA / (2 n_heads)
    verdict: str = "undetermined"
    law: str = ""
    reasons: list = field(default_factory=list)
    # the attention-mass window against the decay window (drivers)
    decay_window_mean: float = field(default_factory=_nan)
    decay_window_censored: float = field(default_factory=_nan)
    mass_window_mean: float = field(default_factory=_nan)
    mass_window_censored: float = field(default_factory=_nan)
    mass_eps: float = field(default_factory=_nan)
    # every law at every L, out of sample, with its state (headlaws.evaluate; states set over the model)
    layer_name: str = ""
    laws: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- the laws, reweightable


@dataclass
class _Docs:
    """Per-document sums of one head: p1, p2 (S,) of X and X^2; s1, s2 (S, n) of W and W^2 over R rows."""
    T: int
    R: int
    p1: np.ndarray
    p2: np.ndarray
    s1: np.ndarray
    s2: np.ndarray


def _wmean(w, a):
    """Weighted mean over documents: w (B, S), a (S,) or (S, n) -> (B,) or (B, n)."""
    return (w @ a) / w.sum(1).reshape((-1,) + (1,) * (a.ndim - 1))


def _parts(docs, vf, idx_L, Ls, w):
    """Under document weights w (B, S): measured E[W], Var[W] (B, n), the dependent law's Var[W] (B, n),
    its mean slope (B,), the iid variance slope (B,) and B = Var_d(1/kappa_d) (B,)."""
    T, S = docs.T, w.shape[1]
    Wt = w.sum(1)
    E = (w @ docs.s1) / (Wt[:, None] * docs.R)
    V = (w @ docs.s2) / (Wt[:, None] * docs.R) - E * E
    kap = (w @ docs.p1) / (Wt * T)
    sig2 = (w @ docs.p2) / (Wt * T) - kap ** 2
    kd = docs.p1 / T
    s2d = docs.p2 / T - kd ** 2
    tw = vf.tau_within(w)                                                   # (B, m)
    tau_L = tw[:, idx_L]                                                    # (B, n)
    v = s2d[None, :] * tw[:, -1:] / T                                       # (B, S): Var of kappa_d, stationary
    inv = 1 / kd
    # the document terms factor into tau_L (B, n) times sums over documents (B,): no (B, S, n) array
    A = tau_L * (np.einsum("bs,bs->b", w, (s2d / kd ** 3)[None, :] * (1 - 6 * v / kd ** 2)) / Wt)[:, None]
    m_inv, m_inv2 = _wmean(w, inv), _wmean(w, inv * inv)
    Bt = m_inv2 - m_inv ** 2 - (S - 1) / S * np.einsum("bs,bs->b", w, v / kd ** 4) / Wt
    h = s2d / (2 * kd ** 2)                                                 # (S,): O(1) term of E_d[W] / tau_L
    cov = tau_L * ((w @ (inv * h)) / Wt - m_inv * ((w @ h) / Wt))[:, None]
    Ls = np.asarray(Ls)[None, :]
    P = Ls * A + Ls ** 2 * Bt[:, None] + 2 * Ls * cov
    mean_slope = m_inv - np.einsum("bs,bs->b", w, v / kd ** 3) / Wt
    return E, V, P, mean_slope, sig2 / kap ** 3, Bt


def law_curves(kappa, sigma2, mu3_raw, tau_L, Ls):
    """The iid and autocorrelation-adjusted laws from renewal.py at thresholds Ls (n,): floats kappa > 0,
    sigma2 >= 0, mu3_raw = E X^3, tau_L (n,) the within-document tau(n) at n = L/kappa. Returns dict of
    (n,) lists: mean (dependent_mean_N - 1), var_iid (leading_var), var_lr (dependent_var)."""
    m = gates.Moments.from_raw(kappa, sigma2 + kappa ** 2, mu3_raw)
    out = dict(mean=[], var_iid=[], var_lr=[])
    for L, t in zip(Ls, tau_L):
        out["mean"].append(renewal.dependent_mean_N(kappa, sigma2 * t, L) - 1)
        out["var_iid"].append(renewal.leading_var(m, L))
        out["var_lr"].append(renewal.dependent_var(kappa, sigma2 * t, L))
    return out


def _bootstrap_p(D, Dstar, S):
    """p-value of D = 0 from its document-bootstrap draws Dstar (B,) over S documents: the larger of the basic
    bootstrap p, (1 + #{|D* - D| >= |D|}) / (B + 1), and the Student-t p of D / sd(D*) with S - 1 degrees
    of freedom (a bootstrap over S documents sees tails lighter than the sampling law's; the t reference
    widens them as an SE from S independent units must). Never more liberal than either."""
    Dstar = Dstar[np.isfinite(Dstar)]
    if not math.isfinite(D) or len(Dstar) < 2:
        return float("nan")
    p_boot = (1 + np.sum(np.abs(Dstar - D) >= abs(D))) / (len(Dstar) + 1)
    sd = Dstar.std(ddof=1)
    p_t = 2 * stats.t.sf(abs(D) / sd, S - 1) if sd > 0 else float(D == 0)
    return float(max(p_boot, p_t))


def _seed_sequence(seed):
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, a numpy SeedSequence or None; got {seed!r}")
    return np.random.SeedSequence(int(seed))


# ----------------------------------------------------------------------------- one head


def recorded_eps(eps_list, Ls):
    """The eps a head's result records: the user's eps_list (a list), or exp(-L) of each L of Ls to 12 digits."""
    return list(eps_list) if eps_list is not None else [float(f"{math.exp(-L):.12g}") for L in Ls]


def analyse(x, Ls, n_heads=1, n_boot=N_BOOT, seed=None, context=None, layer=0, head=0, eps_list=None,
            predict_=True, windows=None, sums=None):
    """The verdict and predictions of one head from increments x (S, T) float64 (S >= 2 documents, values >= 0)
    at thresholds Ls (n,) float > 0 (L = ln 1/eps: the only unit here).

    n_heads: heads in the model (int >= 1; the family is 2 n_heads tests). n_boot: document-bootstrap draws
    (int >= 0; 0: no tests, every head pre-asymptotic or undetermined). seed: int >= 0, SeedSequence or
    None (fresh entropy: independent draws between runs). context: int tokens for P(W > context) or None.
    eps_list: the eps the user gave, recorded (default exp(-L)). predict_: False skips the predictions.
    windows: (W, censored) of predict.window_rows(x, Ls, T // 2) when the caller has them (None: computed here).
    sums: dependence.DocSums(x) when the caller shares them with the per-law evaluation (None: formed here).
    Returns HeadResult.
    """
    x = np.asarray(x, dtype=np.float64)
    S, T = x.shape
    Ls = np.asarray(Ls, dtype=np.float64)
    ss = _seed_sequence(seed)
    rng = np.random.default_rng(ss)
    alpha_test = ALPHA / (2 * n_heads)
    res = HeadResult(layer=layer, head=head, n_seq=S, L_list=Ls.tolist(), n_boot=int(n_boot),
                     eps_list=recorded_eps(eps_list, Ls),
                     seed=int(ss.entropy) if isinstance(ss.entropy, int) else -1, alpha_test=alpha_test,
                     context=int(context or 0))
    p1, p2 = x.sum(1), (x * x).sum(1)
    kappa = p1.sum() / x.size
    sigma2 = p2.sum() / x.size - kappa ** 2
    kl = (p1.sum() - p1) / (x.size - T)
    res.kappa, res.sigma2 = float(kappa), float(sigma2)
    res.se_kappa = float(dependence.jackknife(kl))
    res.se_sigma2 = float(dependence.jackknife((p2.sum() - p2) / (x.size - T) - kl ** 2))
    if kappa <= 0 or sigma2 <= 1e-12 * kappa * kappa:                             # rounding leaves ~1e-17
        res.reasons.append("no forgetting (gate = 1)" if kappa <= 0 else
                           "constant gate: lattice (ALiBi) window W = floor(L/m)")
        return res
    d2 = x - kappa
    d2 *= d2
    res.excess_kurtosis = float(np.mean(np.multiply(d2, d2, out=d2)) / sigma2 ** 2 - 3)   # products, no pow pass
    del d2
    # a drift of kappa along the positions (trend, change point) breaks every stationary law: documents are
    # independent, so the t-test of the per-document half differences holds for any dependence within them
    half = x[:, T // 2:].mean(1) - x[:, :T // 2].mean(1)
    res.position_shift, res.se_position_shift = float(half.mean()), float(half.std(ddof=1) / math.sqrt(S))
    if res.se_position_shift > 0:
        res.p_position = float(2 * stats.t.sf(abs(res.position_shift) / res.se_position_shift, S - 1))
    for centre, attr in (("sequence", "tau"), ("grand", "tau_grand")):
        t = dependence.tau_estimate(x, centre, sums=sums)
        setattr(res, attr, t.tau)
        setattr(res, "se_" + attr, t.se)

    # V(n) on a grid with every n_L and 2 n_L
    nL = Ls / kappa
    vf = dependence.variance_function(x, block_lengths(T, nL), sums)
    tw = vf.tau_within()
    res.n_list = vf.ns.tolist()
    res.tau_n = tw.tolist()
    res.se_tau_n = vf.se(vf.tau_within).tolist()
    res.tau_n_grand = vf.tau_grand().tolist()
    res.tau_long, res.se_tau_long = float(tw[-1]), float(res.se_tau_n[-1])
    res.tau_growth = float(tw[-1] / tw[vf.index(T / 8)])
    res.sigma2_lr = float(sigma2 * tw[-1])
    idx_L = np.array([vf.index(n) for n in nL])

    # windows of the rows in the second half of each sequence
    r0 = T // 2
    Wr, Cr = predict.window_rows(x, Ls, r0) if windows is None else windows
    R = T - r0
    docs = _Docs(T, R, p1, p2, *predict.window_sums(Wr))
    cens = Cr.mean((0, 1))
    res.censored_frac = cens.tolist()
    mean = docs.s1.sum(0) / (S * R)
    res.mean_W, res.var_W = mean.tolist(), (docs.s2.sum(0) / (S * R) - mean ** 2).tolist()
    lw = dependence.jack_weights(S)                # leave-one-out, or groups of documents beyond JACK_GROUPS
    nw = lw.sum(1)[:, None] * R
    ml = (lw @ docs.s1) / nw
    res.se_mean_W = dependence.jackknife(ml).tolist()
    res.se_var_W = dependence.jackknife((lw @ docs.s2) / nw - ml ** 2).tolist()
    for k in range(len(Ls)):
        km = predict.kaplan_meier(Wr[:, :, k], Cr[:, :, k])
        res.km_mean.append(km.mean)
        res.km_median.append(km.q50)
        res.km_bound.append(km.median_bound)
    x3 = x * x
    curves = law_curves(kappa, sigma2, float(np.mean(np.multiply(x3, x, out=x3))), tw[idx_L], Ls)
    del x3
    res.law_mean, res.law_var_iid, res.law_var_lr = curves["mean"], curves["var_iid"], curves["var_lr"]
    kd_ok = bool(np.all(p1 > 0))
    if kd_ok:
        one = np.ones((1, S))
        _, _, P, _, _, Bt = _parts(docs, vf, idx_L, Ls, one)
        res.law_var_mix = P[0].tolist()
        res.mix_B = float(Bt[0])
        res.se_mix_B = float(dependence.jackknife(_parts(docs, vf, idx_L, Ls, lw)[5]))
        L3 = math.log(1e3)
        k3 = int(np.argmin(np.abs(Ls - L3)))
        res.between_share = float(Bt[0] * Ls[k3] ** 2 / P[0, k3]) if P[0, k3] > 0 else float("nan")

    # the regime
    tails = dependence.tail_shares(x, [float(L) for L in Ls])
    for k, L in enumerate(Ls):
        g = dependence.in_regime(float(L), kappa, sigma2, vf, float(cens[k]), tails[k])
        res.in_regime.append(g.ok)
        res.regime_why.append(g.why)
        res.level_ratio.append(g.level_ratio)

    # the prediction at every L, and its out-of-sample score
    if predict_:
        p = predict.predict(x, Ls, rng, context)
        res.pred_mean, res.pred_se_mean, res.pred_var = p.mean, p.se_mean, p.var
        res.pred_q05, res.pred_q50, res.pred_q95, res.pred_p_beyond = p.q05, p.q50, p.q95, p.p_beyond
        if S >= MIN_DOCS:
            o = predict.out_of_sample(x, Wr, Cr, Ls, rng)
            res.oos_coverage, res.oos_se_coverage, res.oos_z_mean, res.oos_z_var, res.oos_censored = (
                o.coverage, o.se_coverage, o.z_mean, o.z_var, o.censored)

    # data reasons first
    if S < MIN_DOCS:
        res.reasons.append(f"only {S} documents (needs {MIN_DOCS})")
        return res
    if all(math.isnan(m) for m in res.km_median):
        res.reasons.append("every window censored (no Kaplan-Meier median at any L)")
        return res
    if not kd_ok:
        res.reasons.append("a document with no forgetting (kappa_d = 0): the document law does not exist")
        return res
    U = np.array(res.in_regime)
    res.n_tested = int(U.sum())
    if res.n_tested < MIN_TESTED or n_boot == 0:
        res.verdict = "pre-asymptotic"
        why = [w for w, u in zip(res.regime_why, U) if not u and w]
        res.reasons.append(f"{res.n_tested} of {len(Ls)} L in the regime (needs {MIN_TESTED}"
                           + (f"; {n_boot} bootstrap draws" if n_boot == 0 else "") + ")"
                           + (": " + "; ".join(_short(why)) if why else ""))
        if res.tau_growth > 1 + dependence.LEVEL_TOL:
            res.reasons.append(f"tau(n) still x{res.tau_growth:.2f} from T/8 to T/2: long memory or drift within "
                               "documents")
        if res.p_position < alpha_test:
            res.reasons.append(f"kappa drifts along the positions (second half - first half {res.position_shift:.3g} "
                               f"+- {res.se_position_shift:.2g}, p = {res.p_position:.1e}): no stationary law applies")
        return res
    _test(res, docs, vf, idx_L, Ls, U, n_boot, rng, alpha_test)
    return res


def _short(why):
    """The regime reasons, tau(n) ones collapsed into one."""
    out = []
    for key, what in (("tau(n) still", "tau(n) still moving"), ("L/kappa", "fewer than 4 steps"),
                      ("steps >", "big steps carry > 10% of Var X"), ("tau(n) not", "tau(n) not measurable at 2n")):
        k = sum(w.startswith(key) for w in why)
        if k:
            out.append(f"{what} at {k} L")
    rest = [w for w in why if not any(w.startswith(k) for k in ("tau(n)", "L/kappa", "steps >"))]
    return out + list(dict.fromkeys(rest))


def _test(res, docs, vf, idx_L, Ls, U, n_boot, rng, alpha_test):
    """The two slope tests of the dependent law (and the iid law's) on the in-regime L, by the document
    bootstrap; sets the verdict."""
    S = docs.p1.shape[0]
    Lu = Ls[U]
    coef = np.linalg.pinv(np.stack([Lu, np.ones_like(Lu)], 1))[0]          # least-squares slope over Lu

    def stats_(w):
        E, V, P, ms, iid, _ = _parts(docs, vf, idx_L, Ls, w)
        sv, sp, se = V[:, U] @ coef, P[:, U] @ coef, E[:, U] @ coef
        return np.stack([sv - sp, se - ms, sv - iid, sv, sp, se, ms, iid], 1)

    point = stats_(np.ones((1, S)))[0]
    w = rng.multinomial(S, np.full(S, 1.0 / S), size=n_boot).astype(np.float64)
    star = np.concatenate([stats_(w[i:i + 1000]) for i in range(0, n_boot, 1000)])
    jk = dependence.jackknife(stats_(dependence.jack_weights(S)))
    res.slope, res.slope_se = float(point[3]), float(jk[3])
    res.pred_slope_mix, res.mean_slope, res.pred_mean_slope, res.pred_slope_iid = (
        float(point[4]), float(point[5]), float(point[6]), float(point[7]))
    t_lr = np.array(res.law_var_lr)[U]
    res.pred_slope_lr = float(coef @ t_lr)
    res.p_var, res.p_mean, res.p_iid = (_bootstrap_p(point[i], star[:, i], S) for i in (0, 1, 2))
    # the band: the larger of the bootstrap quantile of |D* - D| and the t quantile times sd(D*), as the p-value
    q = np.maximum(np.quantile(np.abs(star - point), 1 - alpha_test, axis=0),
                   stats.t.isf(alpha_test / 2, S - 1) * star.std(0, ddof=1))
    res.band_var = float(q[0])
    res.slope_ci = [res.slope - float(q[3]), res.slope + float(q[3])]
    if min(res.p_var, res.p_mean) < alpha_test:
        res.verdict = "law false"
        which = [f"{n} p = {p:.1e}" for n, p in (("variance slope", res.p_var), ("mean slope", res.p_mean))
                 if p < alpha_test]
        res.reasons.append(f"dependent law rejected ({', '.join(which)} < {alpha_test:.1e}) at {res.n_tested} L")
        return
    if q[0] > HOLD_TOL * abs(res.pred_slope_mix):
        res.reasons.append(f"in the regime at {res.n_tested} L but the variance-slope band is +-"
                           f"{q[0] / abs(res.pred_slope_mix):.0%} of the law (needs {HOLD_TOL:.0%}): too few documents")
        return
    res.verdict = "law holds"
    iid_ok = res.p_iid >= alpha_test and q[2] <= HOLD_TOL * abs(res.pred_slope_iid)
    res.law = "iid" if iid_ok else "dependent"
    res.reasons.append(f"{res.n_tested} L tested; band +-{q[0] / abs(res.pred_slope_mix):.0%}"
                       + ("" if iid_ok else f"; iid law rejected (p = {res.p_iid:.1e})" if res.p_iid < alpha_test
                          else "; iid law not resolved"))


def block_lengths(T, nL):
    """The block lengths of the verdict's V(n) for documents of T tokens: the grid with every n_L = L/kappa of nL
    (an array) and 2 n_L."""
    return dependence.n_grid(T // 2, np.concatenate([np.round(nL), np.round(2 * nL)]))


# public names of the reweightable law, for the per-law evaluation (heads/laws.py)
Docs = _Docs
parts = _parts
seed_sequence = _seed_sequence
