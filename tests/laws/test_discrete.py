"""The exact numerics on laws with atoms (discrete.py, discrete.atomic_passage) against independent references:
exact rational enumeration of count vectors, exact integer binomial sums, the Poisson closed form compounded by
hand, and the negative binomial law. Every returned value must lie within its returned error of the reference
(docs/THEORY.md section 5, "Atoms")."""
import math
import time
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from foxwindow.laws import discrete, exact, gates
from foxwindow.laws.gates import EmpiricalGate


def rational_enumeration(values, probs, L):
    """(E[W], Var[W]) exactly (Fractions) for iid atoms: the law of the count vector, S_n <= L in rationals."""
    v = [Fraction(float(x)) for x in values]
    p = [Fraction(x) for x in probs]
    fL = Fraction(float(L))
    cur, s = {(0,) * len(v): Fraction(1)}, [Fraction(1)]
    while cur:
        nxt = {}
        for c, w in cur.items():
            for i in range(len(v)):
                c2 = c[:i] + (c[i] + 1,) + c[i + 1:]
                if sum(ci * vi for ci, vi in zip(c2, v)) <= fL:
                    nxt[c2] = nxt.get(c2, 0) + w * p[i]
        cur = nxt
        s.append(sum(cur.values(), Fraction(0)))
    EN = sum(s)
    E2 = sum((2 * n + 1) * sn for n, sn in enumerate(s))
    return float(EN - 1), float(E2 - EN * EN)


class TwoValues(gates.Gate):
    """A custom gate whose X takes two values, seen only through its moments and CDF."""

    def __init__(self, a, b, pa):
        self.a, self.b, self.pa, self.name = a, b, pa, f"two-values({a:g}, {b:g})"

    def moments(self):
        pa, pb = self.pa, 1 - self.pa
        return gates.Moments.from_raw(*(pa * self.a ** j + pb * self.b ** j for j in (1, 2, 3)))

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        return self.pa * (x >= self.a) + (1 - self.pa) * (x >= self.b)


class Saturating(gates.Gate):
    """X = 0 with probability q (gate exactly 1), else Exp(rate): a gate that saturates at 1."""

    def __init__(self, q, rate):
        self.q, self.rate, self.name = q, rate, f"saturating(q={q:g}, rate={rate:g})"

    def moments(self):
        a, r = 1 - self.q, self.rate
        return gates.Moments.from_raw(a / r, 2 * a / r ** 2, 6 * a / r ** 3)

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        return np.where(x >= 0, self.q + (1 - self.q) * -np.expm1(-self.rate * np.maximum(x, 0.0)), 0.0)


class Mixed(Saturating):
    """An atom at a positive value and a density: refused."""

    def cdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        return np.where(x >= 0.3, self.q, 0.0) + (1 - self.q) * -np.expm1(-self.rate * np.maximum(x, 0.0))


def within(r, mean, var):
    assert abs(r.mean - mean) <= r.mean_err, (r.method, r.mean, mean, r.mean_err)
    assert abs(r.var - var) <= r.var_err, (r.method, r.var, var, r.var_err)


@pytest.mark.parametrize("values,probs,L", [
    ((0.5, 1.0), (0.5, 0.5), 3.3),                    # the custom two-point gate of the report: E[W] 3.890625
    ((0.5, 1.0), (0.5, 0.5), 3.0),                    # sums of atoms equal to L: ties decided in rationals
    ((0.3, 0.7, 1.1), (1 / 3, 1 / 3, 1 / 3), 5.0),    # 0.3 + 0.3 + 4 x 1.1 = 5 in floats, not in rationals
    ((0.1307, 0.2931, 1.0719), (0.25, 0.5, 0.25), 1.2 + 1 / 7),
    ((0.2, 0.45, 0.7, 1.3), (0.1, 0.2, 0.3, 0.4), 3.1),
])
def test_few_atoms_exact_against_rational_enumeration(values, probs, L):
    mean, var = rational_enumeration(values, probs, L)
    r = exact.exact_first_passage(TwoValues(*values[:2], probs[0]) if len(values) == 2 and probs[0] == 0.5 else
                                  discrete.AtomGate(np.array(values), np.array(probs), "atoms"), eps=math.exp(-L))
    assert "exact" in r.method or "closed form" in r.method
    within(r, mean, var)
    assert r.mean_err < 1e-9 * max(mean, 1) and r.var_err < 1e-9 * max(var, 1)


def test_custom_discrete_gate_is_detected_from_its_cdf():
    g, L = TwoValues(0.5, 1.0, 0.5), 3.3
    r = exact.exact_first_passage(g, eps=math.exp(-L))
    assert r.method == "exact binomial sums" and r.mean == pytest.approx(3.890625, abs=1e-12)
    assert exact.exact_first_passage(g, eps=math.exp(-L), richardson=False).mean == pytest.approx(3.890625, abs=1e-12)
    vals, mass = discrete.find_atoms(g.cdf, 2.0)
    assert np.allclose(vals, [0.5, 1.0]) and np.allclose(mass, [0.5, 0.5])
    # a smooth law has none
    assert len(discrete.find_atoms(gates.LogitNormalGate(2, 0.5).cdf, 3.0)[0]) == 0


def test_two_point_law_at_eps_1e_100_against_exact_integer_sums():
    # X in {0.5, 1} with probability 1/2: s_n = #{j : 0.5 j + (n - j) <= L} binomial coefficients / 2^n, in integers
    eps = 1e-100
    L = -math.log(eps)
    fL = Fraction(L)
    row, s = [1], [Fraction(1)]
    n = 0
    while True:
        n += 1
        row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]
        jmin = max(math.ceil((n - fL) / Fraction(1, 2)), 0)        # n - j/2 <= L
        sn = Fraction(sum(row[jmin:]), 2 ** n) if jmin <= n else Fraction(0)
        s.append(sn)
        if sn == 0:
            break
    EN = sum(s)
    mean, var = float(EN - 1), float(sum((2 * i + 1) * x for i, x in enumerate(s)) - EN * EN)
    t = time.perf_counter()
    r = exact.exact_first_passage(EmpiricalGate(np.log([math.exp(-0.5), math.exp(-1.0)])), eps=eps)
    assert time.perf_counter() - t < 1
    # the gates exp(-0.5), exp(-1) round-trip through log to the same floats 0.5, 1.0
    within(r, mean, var)


def test_saturating_custom_gate_against_the_compounded_poisson_law():
    # N_Y - 1 ~ Poisson(rate L) for the exponential part; a Geometric(1 - q) number of steps per step of Y
    q, rate, eps = 0.3, 5.0, 1e-3
    L = -math.log(eps)
    EY, VY = rate * L + 1, rate * L
    a = 1 - q
    mean = EY / a - 1
    var = VY / a ** 2 + q * EY / a ** 2
    r = exact.exact_first_passage(Saturating(q, rate), eps=eps)
    assert "compounded" in r.method
    within(r, mean, var)
    assert r.mean_err < 1e-8 * mean and r.var_err < 1e-8 * var


def test_saturated_empirical_gate_in_closed_form_against_the_negative_binomial():
    # 999 gates equal to 1, one equal to 0.5: X = 0 w.p. 0.999, else ln 2; N_Y = floor(L / ln 2) + 1 and N is
    # negative binomial: E[N] = N_Y / 0.001, Var[N] = N_Y 0.999 / 0.001^2
    x = np.r_[np.zeros(999), math.log(2.0)]
    for eps in (1e-3, 1e-12):
        L = -math.log(eps)
        ny = int(Fraction(L) // Fraction(math.log(2.0))) + 1
        t = time.perf_counter()
        r = exact.exact_first_passage(EmpiricalGate(-x), eps=eps)
        assert time.perf_counter() - t < 1
        within(r, ny / 1e-3 - 1, ny * 0.999 / 1e-6)
        # the survival at the mean against an mpmath binomial sum: P(N > n) = P(Bin(n, 0.001) < N_Y)
        n = int(r.mean)
        mpmath.mp.dps = 30
        ref = mpmath.fsum(mpmath.binomial(n, k) * mpmath.mpf("0.001") ** k * mpmath.mpf("0.999") ** (n - k)
                          for k in range(ny))
        assert abs(r.survival[n - r.n0] - float(ref)) < 1e-12


def test_many_atoms_with_an_atom_at_zero_are_fast_and_honest():
    rng = np.random.default_rng(0)
    x = gates.LogitNormalGate(2, 0.5).sample(rng, 100_000)
    x[:30_000] = 0.0                                              # 30% of the gates saturate at 1
    g = EmpiricalGate(-x)
    for eps in (1e-3, 1e-12):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", exact.AccuracyWarning)
            r = exact.exact_first_passage(g, eps=eps, tol=1e-3)
        assert time.perf_counter() - t < 4                        # about 1 s of refinement, on a loaded machine
        # the compounding identity against the empirical law's own Wald mean: E[N] = E[N_Y] / (1 - q)
        ry = exact.exact_first_passage(EmpiricalGate(-x[x > 0]), eps=eps, tol=1e-3)
        assert abs((r.mean + 1) - (ry.mean + 1) / 0.7) <= r.mean_err + ry.mean_err / 0.7
        assert r.mean_err < 1e-2 * r.mean


def test_mixed_law_is_refused():
    with pytest.raises(ValueError, match="atoms"):
        exact.exact_first_passage(Mixed(0.2, 5.0), eps=1e-3)
