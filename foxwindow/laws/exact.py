"""Exact first-passage numerics: the oracle the laws are checked against.

The law of W = N - 1 computed, not approximated, to a stated error (see renewal.py for the laws themselves):

  exact_first_passage    iid increments: closed forms first (gamma, exponential, constant X), laws with atoms
                         by exact sums (discrete.py: up to four values, an atom at 0), else the
                         lattice + Fourier inversion with Richardson over three resolutions and Chernoff
                         bounds on every truncated tail; the result carries its own error estimate
                         (AccuracyWarning / AccuracyError when tol is not met)
  closed_form_survival   P(N > n) for the gates that have a closed form (None otherwise)
  alibi_limit            gamma increments of fixed mean as cv -> 0: the distribution converges to ALiBi's window
  markov_first_passage   AR(1)-logit gates: the Markov-additive walk (S_n, y_n) on y cells (markov.py: three y
                         grids extrapolated in dy^2, Richardson over (h, h/2); any finite chain there too)
  ar1_long_run           long-run cumulants of an AR(1)-logit gate from its law (LongRun)

Derivations: docs/THEORY.md section 5. Monte Carlo and the laws against these numerics (`python renewal.py`,
`python forget.py --synthetic`) are in lawtable.py.
"""
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from foxwindow.laws import discrete, gates, lattice, markov
from foxwindow.laws.lattice import (  # noqa: F401  (the results and errors of exact_first_passage)
    MAX_STEPS,
    AccuracyError,
    AccuracyWarning,
    FirstPassage,
    LongRun,
)
from foxwindow.laws.renewal import alibi_window, gamma_survival

__all__ = ["closed_form_survival", "exact_first_passage", "alibi_limit", "ar1_chain", "ar1_long_run", "MarkovPassage",
           "markov_first_passage"]

# ----------------------------------------------------------------------------- exact first passage


def closed_form_survival(gate, L):
    """Closed-form P(N > n), n = 0, 1, ..., for the laws that have one; None for every other gate.

    gate: a gates.Gate. The closed forms are keyed by the gate's type and parameters: gamma X
    (GammaIncrement(k, theta); BetaGate(a, 1) is exponential X with rate a, so N - 1 ~ Poisson(a L)) gives
    P(Gamma(n k, theta) <= L), down to 1e-30; a constant X = m (ConstantGate, ALiBi) gives W = floor(L/m),
    i.e. P(N > n) = 1 for n <= W and 0 after. L: float >= 0, the threshold ln(1/eps).
    Returns a float64 array (length W + 2 for a constant gate) or None.
    """
    if isinstance(gate, gates.ConstantGate):
        w = int(Fraction(float(L)) // Fraction(gate.m))    # W = floor(L/m) in exact rationals, as alibi_window
        return np.concatenate([np.ones(w + 1), [0.0]])
    kt = lattice.closed_gamma(gate)
    return None if kt is None else gamma_survival(*kt, L)


def exact_first_passage(gate, *, eps=None, L=None, tol=1e-8, strict=False, richardson=True, var_tol=None):
    """Exact distribution and moments of the eps-window W = N - 1 for an iid increment law, with its error.

    gate: a gates.Gate with iid increments (moments() and cdf(); an EmpiricalGate's atoms are used directly).
    eps=: float in (0, 1), or L= ln(1/eps) > 0 (keywords, exactly one). tol: relative target on E[W] and
    Var[W] (absolute below 1). The lattice is refined (up to _MAX_LEVEL) until the estimated error meets tol;
    otherwise AccuracyWarning, or AccuracyError when strict=True, naming the achieved error. richardson=False:
    no extrapolation (finest lattice, error from the order estimated on three resolutions). var_tol: relative target
    on Var[W] (None: tol); math.inf when only
    the survival is needed (sum_n |error of P(N > n)| is within mean_err), e.g. for many-atom trace laws, whose
    O(h) bracket bounds E[W] long before Var[W].
    Closed forms: gamma X (and Beta(a, 1) gates, exponential X); W = floor(L/m) for any law with Var X = 0.
    Returns FirstPassage (mean_err, var_err, h, method, and survival from n0).
    Raises ValueError at once, before any work, when the expected window L/kappa exceeds MAX_STEPS steps
    (a constant increment excepted: its window is returned in closed form however long).
    """
    if not isinstance(gate, gates.Gate):
        raise TypeError(f"gate must be a foxwindow Gate (e.g. LogitNormalGate(2, 0.5)); got {type(gate).__name__}")
    L = gates.recordable(gates.level(eps, L))
    eps = math.exp(-L) if eps is None else float(eps)       # recorded with the result (L <= gates.L_MAX: normal)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1); got {tol!r}")
    var_tol = tol if var_tol is None else var_tol
    if isinstance(var_tol, bool) or not isinstance(var_tol, (int, float)) or not var_tol > 0:
        raise ValueError(f"var_tol must be a number > 0 (math.inf: no target on Var[W]); got {var_tol!r}")
    if not gate.iid:
        raise ValueError(f"{gate} has dependent increments: exact numerics cover iid laws only")
    if isinstance(gate, gates.ConstantGate):
        return lattice.constant_passage(gate, eps, L, gate.m)
    m = gate.moments()
    if not (m.kappa > 0 and math.isfinite(m.kappa) and math.isfinite(m.sigma2)):
        raise ValueError(f"{gate} has kappa = E X = {m.kappa}, Var X = {m.sigma2}: no finite window")
    if m.sigma2 <= 0:
        return lattice.constant_passage(gate, eps, L, m.kappa)
    fp = discrete.atomic_passage(gate, eps, L, m, tol, strict, richardson, var_tol)
    if fp is not None:
        return fp
    return lattice.lattice_passage(gate, eps, L, m, tol, strict, richardson, var_tol)


def alibi_limit(m, eps, cvs=(1.0, 0.3, 0.1, 0.03, 0.01)):
    """The zero-variance limit: gamma increments with mean m and coefficient of variation cv -> 0.
    Returns [(cv, P(W = floor(L/m)), E[W], Var[W])]: the distribution converges to ALiBi's integer
    window (the formulas do not: they break down once sigma2 L / kappa^3 < ~0.3)."""
    w = alibi_window(m, eps)
    out = []
    for cv in cvs:
        k = 1.0 / cv ** 2
        fp = exact_first_passage(gates.GammaIncrement(k, m / k), eps=eps)
        pmf, i = fp.pmf, w - fp.n0
        out.append((cv, float(pmf[i]) if 0 <= i < len(pmf) else 0.0, fp.mean, fp.var))
    return out


# ----------------------------------------------------------------------------- Markov-additive exact numerics


def ar1_chain(gate, dy=None, ymax=8.0):
    """The AR(1) driver on a uniform grid y (M,): stationary weights pi (M,), transition P (M, M) row i ->
    column j, increments x(y) (M,). Node weights of the Gaussian densities on a grid of spacing
    dy <= a/2, a = sqrt(1 - phi^2) the innovation scale, are accurate to ~exp(-2 pi^2 (a/dy)^2)
    (trapezoid rule on a Gaussian): the marginal moments match the gate's quadrature to ~1e-12."""
    if not isinstance(gate, gates.AR1LogitGate):
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
    y, pi, P, x = ar1_chain(gate)
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
class MarkovPassage(lattice.WindowLaw):
    """Exact (numerical) moments of W = N - 1 for one L; err_* estimate the error: the Richardson step in the
    S grid, the change between two y grids and the truncated tail (markov.ar1_passage)."""
    gate: str
    L: float
    mean: float
    var: float
    err_mean: float
    err_var: float
    survival: np.ndarray    # P(N > n) = P(W >= n), n = 0..
    offset = 0

    def _widen(self, e1, e2):
        self.err_mean += e1
        self.err_var += e2

    @property
    def mean_err(self):
        """err_mean under the name every first-passage result uses."""
        return self.err_mean

    @property
    def var_err(self):
        return self.err_var

    @property
    def eps(self):
        return math.exp(-self.L)


def markov_first_passage(gate, *, eps=None, L=None, cells_per_kappa=8, tol=1e-13, nmax=1_000_000, max_seconds=120.0,
                         progress=False):
    """Exact law of W = N - 1 for AR(1)-logit gates, by the Markov-additive walk (S_n, y_n) (markov.ar1_passage).

    gate: AR1LogitGate. eps: float or sequence of floats in (0, 1) (one walk serves them all); or L: the
    thresholds ln(1/eps) themselves, by keyword (exactly one of eps and L).
    cells_per_kappa: S-grid cells per mean increment (h = kappa / cells_per_kappa), int >= 2.
    tol: the survival at which the walk stops, in (0, 1e-6] (the rest is bounded in the error).
    The y axis is cut into cells, each cell's increment law continuous (X given y in the cell), and computed on
    two y grids; the S axis by a mean-preserving split, Richardson over (h, h/2). err_mean, err_var: the
    Richardson step + the change between the y grids + the truncated tail. max_seconds: the cost is estimated
    first and refused (ValueError) beyond it; progress: a tqdm bar over steps.
    Returns a list of MarkovPassage, one per eps (in order).
    """
    if (eps is None) == (L is None):
        raise ValueError("give exactly one of eps and L")
    Ls = np.array(gates.levels(eps, L))
    if isinstance(cells_per_kappa, bool) or int(cells_per_kappa) != cells_per_kappa or cells_per_kappa < 2:
        raise ValueError(f"cells_per_kappa must be an integer >= 2; got {cells_per_kappa}")
    if not isinstance(gate, gates.AR1LogitGate):
        raise TypeError(f"Markov-additive numerics need an AR1LogitGate; got {type(gate).__name__} "
                        "(markov.markov_chain_first_passage takes any finite chain)")
    res = markov.ar1_passage(gate, Ls, int(cells_per_kappa), tol, nmax, max_seconds, progress)
    return [MarkovPassage(str(gate), r.L, r.mean, r.var, r.mean_err, r.var_err, r.survival) for r in res]
