"""The per-head hot paths give the numbers of the code they replaced (frozen copies here) on awkward heads: iid,
AR(1), regime switching, plateaus of zero increments and heads whose rows are censored. Identical where the new
path does the same additions; equal to rounding (bounds below) where it regroups them."""
import math

import numpy as np
import pytest
from scipy import special

from foxwindow.heads import dependence, predict, verdict
from foxwindow.heads import driver as heads
from foxwindow.heads import laws as headlaws
from foxwindow.laws import gates as forget

LS = np.array([forget.threshold(e) for e in sorted(set(heads.EPS_SCAN) | {1e-3}, reverse=True)])
KINDS = ("iid", "ar1", "regime", "plateaus", "censored")


def _head(kind, S, T, seed=0):
    rng = np.random.default_rng([seed, S, T, KINDS.index(kind)])
    if kind == "iid":
        return rng.gamma(0.7, 0.03, (S, T))
    if kind == "ar1":
        return forget.AR1LogitGate(3.0, 0.7, 0.8).sample_paths(rng, S, T)[0]
    if kind == "regime":
        state = np.cumsum(rng.random((S, T)) < 0.005, 1) % 2
        return np.where(state == 1, rng.gamma(2.0, 0.05, (S, T)), rng.gamma(0.5, 0.004, (S, T)))
    if kind == "plateaus":
        x = rng.gamma(0.7, 0.05, (S, T))
        x[rng.random((S, T)) < 0.6] = 0.0
        x[0, : T // 3] = 0.0                                       # a long run of gates of exactly 1
        return x
    return forget.AR1LogitGate(6.0, 0.7, 0.6).sample_paths(rng, S, T)[0]      # windows past the trace start


# ----------------------------------------------------------------------------- the replaced code, frozen


def old_block_sums(x, r0):
    """BlockSums' q1, q2, q3 by power-of-two transforms of 2 (T + 1) points, one inverse per correlation."""
    S, T = x.shape
    nw = T // 2
    kd = x.sum(1) / T
    t = np.arange(T + 1)
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(x, 1)], 1) - kd[:, None] * t[None, :]
    c -= c[:, r0 + 1:].mean(1, keepdims=True)
    n = 1 << int(math.ceil(math.log2(2 * (T + 1))))
    mask = (t >= r0 + 1).astype(np.float64)
    F = {j: np.fft.rfft(c ** j, n) for j in (1, 2)}
    A = {i: np.fft.rfft(c ** i * mask, n) for i in (1, 2)}
    w = np.arange(1, nw + 1)

    def corr(i, j):
        return np.fft.irfft(A[i] * np.conj(F[j]), n)[:, w]

    def masked(i):
        cs = np.concatenate([np.zeros((S, 1)), np.cumsum(c ** i, 1)], 1)
        return cs[:, T + 1 - w] - cs[:, r0 + 1 - w]
    sa = [(c[:, r0 + 1:] ** i).sum(1)[:, None] for i in (1, 2, 3)]
    q1 = sa[0] - masked(1)
    q2 = sa[1] - 2 * corr(1, 1) + masked(2)
    q3 = sa[2] - 3 * corr(2, 1) + 3 * corr(1, 2) - masked(3)
    return q1, q2, q3


def old_s_cdf(L, m, v, m3):
    """_s_cdf with every live cell evaluated."""
    sd = np.sqrt(np.maximum(v, 1e-300))
    z = (L - m) / sd
    out = (z > 0).astype(np.float64)
    live = (np.abs(z) < 60) & (v > 0)
    zl, gl = z[live], m3[live] / sd[live] ** 3
    pos, neg = gl > 1e-3, gl < -1e-3
    o = np.empty_like(zl)
    nrm = ~(pos | neg)
    o[nrm] = special.ndtr(zl[nrm])
    k = 4 / gl[pos] ** 2
    o[pos] = special.gammainc(k, np.maximum(k + zl[pos] * np.sqrt(k), 0))
    ml = m[live]
    bad = np.nonzero(pos)[0][(ml[pos] - 2 * np.sqrt(v[live][pos]) / gl[pos] < 0)]
    kb = 4 / gl[bad] ** 2
    f0 = special.gammainc(kb, np.maximum(kb - (ml[bad] / np.sqrt(v[live][bad])) * np.sqrt(kb), 0))
    o[bad] = np.clip((o[bad] - f0) / np.maximum(1 - f0, 1e-300), 0, 1)
    k = 4 / gl[neg] ** 2
    o[neg] = special.gammaincc(k, np.maximum(k - zl[neg] * np.sqrt(k), 0))
    out[live] = o
    return np.where(v > 0, out, (m <= L).astype(np.float64))


def old_parts_terms(docs, vf, idx_L, Ls, w):
    """verdict.parts' document-mixture variance P through (B, S, n) arrays."""
    T, S = docs.T, w.shape[1]
    Wt = w.sum(1)
    kd = docs.p1 / T
    s2d = docs.p2 / T - kd ** 2
    tau_L = vf.tau_within(w)[:, idx_L]
    v = s2d[None, :] * vf.tau_within(w)[:, -1:] / T
    inv = 1 / kd
    a = (s2d / kd ** 3)[None, :, None] * tau_L[:, None, :] * (1 - 6 * v / kd ** 2)[:, :, None]
    A = np.einsum("bs,bsn->bn", w, a) / Wt[:, None]
    m_inv = (w @ inv) / Wt
    Bt = (w @ (inv * inv)) / Wt - m_inv ** 2 - (S - 1) / S * np.einsum("bs,bs->b", w, v / kd ** 4) / Wt
    c = (s2d / (2 * kd ** 2))[None, :, None] * tau_L[:, None, :]
    cov = np.einsum("bs,bsn->bn", w, inv[None, :, None] * c) / Wt[:, None] - m_inv[:, None] * (
        np.einsum("bs,bsn->bn", w, c) / Wt[:, None])
    Ls = np.asarray(Ls)[None, :]
    return Ls * A + Ls ** 2 * Bt[:, None] + 2 * Ls * cov


def old_cover(F, W, C):
    return float(np.mean([predict.coverage(F, W[d], C[d]).mean() for d in range(W.shape[0])]))


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("kind,S,T,r0", [("iid", 7, 333, 5), ("ar1", 13, 257, 0), ("regime", 5, 501, 17),
                                          ("plateaus", 6, 1024, 512), ("censored", 4, 2048, 1024)])
def test_block_sums_equal_the_power_of_two_transforms(kind, S, T, r0):
    x = _head(kind, S, T)
    bs = headlaws.BlockSums(x, r0)
    for got, ref in zip((bs.q1, bs.q2, bs.q3), old_block_sums(x, r0)):
        assert np.max(np.abs(got - ref)) <= 1e-12 * np.max(np.abs(ref))      # the transforms' rounding


@pytest.mark.parametrize("kind,S,T,r0", [("iid", 7, 333, 166), ("regime", 5, 501, 250), ("censored", 4, 2048, 1024)])
def test_lead_law_moments_of_the_columns_it_reads_are_those_of_every_column(kind, S, T, r0):
    """lead_survival forms the pooled moments at w = T/4, T/2 first and then only up to the longest walk: those
    columns are the columns of the moments of every w, under any weights."""
    bs = headlaws.BlockSums(_head(kind, S, T), r0)
    wts = np.concatenate([np.ones((1, S)), dependence.group_weights(S, 4)])
    full = bs.moments(wts)
    h, nw = bs.nw // 2, bs.nw
    for cols, ref in (([h - 1, nw - 1], [a[:, [h - 1, nw - 1]] for a in full]),
                      (slice(0, 37), [a[:, :37] for a in full]), (slice(0, nw), full)):
        for got, want in zip(bs.moments(wts, cols), ref):
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())


@pytest.mark.parametrize("kind", KINDS)
def test_s_cdf_skips_only_cells_beyond_its_tail_bound(kind, monkeypatch):
    """Every _s_cdf call of a head's evaluation, against every cell evaluated: within e^-TAIL_E of it."""
    calls = []
    real = headlaws._s_cdf

    def spy(L, m, v, m3, parts=None):
        calls.append((L, m, v, m3, parts))
        return real(L, m, v, m3, parts)
    monkeypatch.setattr(headlaws, "_s_cdf", spy)
    monkeypatch.setattr(forget, "COMPILED", False)       # the numpy cells, also where this process compiled the loop
    headlaws.evaluate(_head(kind, 12, 512), LS, np.random.default_rng(0))
    assert calls
    for L, m, v, m3, parts in calls:
        got = real(L, m, v, m3, parts)
        assert np.max(np.abs(got - old_s_cdf(L, m, v, m3))) <= 3 * math.exp(-headlaws.TAIL_E)
        assert np.array_equal(got, real(L, m, v, m3))          # the caller's L-independent parts: the same cells
        if parts[4] is not None:                                # P(S <= 0) of the kept cells formed per L instead
            assert np.array_equal(got, real(L, m, v, m3, parts[:4] + (np.full(m.shape, np.nan),)))


def test_s_cdf_on_every_branch():
    rng = np.random.default_rng(4)
    n = 20_000
    m = rng.uniform(-2, 30, n)
    v = np.exp(rng.uniform(-6, 5, n))
    v[:50] = 0.0                                                  # no spread: a step at m
    g = np.concatenate([rng.uniform(-3, 3, n // 2), rng.uniform(-2e-3, 2e-3, n - n // 2)])   # skew, both signs
    m3 = g * v ** 1.5
    for L in (0.1, 2.3, 13.8):
        assert np.max(np.abs(headlaws._s_cdf(L, m, v, m3) - old_s_cdf(L, m, v, m3))) <= 3 * math.exp(-headlaws.TAIL_E)


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_with_the_callers_windows_is_the_same(kind):
    x = _head(kind, 10, 512)
    a = headlaws.evaluate(x, LS, np.random.default_rng(3), pmf_L=math.log(1e3))
    b = headlaws.evaluate(x, LS, np.random.default_rng(3), pmf_L=math.log(1e3),
                          windows=predict.window_rows(x, LS, 256))
    assert repr(a) == repr(b)


@pytest.mark.parametrize("kind", KINDS)
def test_kaplan_meier_leave_one_out_and_window_sums(kind):
    x = _head(kind, 9, 2048)
    W, C = predict.window_rows(x, LS, 1024)
    for k in range(len(LS)):
        w, c = W[:, :, k], C[:, :, k]
        ref = [predict.kaplan_meier(np.delete(w, d, 0), np.delete(c, d, 0)).mean for d in range(len(w))]
        assert np.array_equal(predict.kaplan_meier_loo_means(w, c), np.array(ref))
    Wf = W.astype(np.float64)
    s1, s2 = predict.window_sums(W)
    assert np.array_equal(s1, Wf.sum(1)) and np.array_equal(s2, (Wf * Wf).sum(1))


@pytest.mark.parametrize("kind", KINDS)
def test_tail_shares_and_coverage_tables(kind):
    x = _head(kind, 10, 1024)
    assert dependence.tail_shares(x, list(LS) + [0.01]) == [dependence.tail_share(x, L) for L in list(LS) + [0.01]]
    W, C = predict.window_rows(x, LS, 512)
    pred = np.sort(np.random.default_rng(0).choice(W[:, :, 5].ravel(), 4000))

    def F(w):
        return np.searchsorted(pred, w, side="right") / len(pred)
    for k in (0, 5, len(LS) - 1):
        got = float(np.mean(predict.doc_coverage(F, W[:, :, k], C[:, :, k])))
        assert abs(got - old_cover(F, W[:, :, k], C[:, :, k])) <= 1e-13


@pytest.mark.parametrize("kind", ("iid", "ar1", "regime", "plateaus"))
def test_mixture_law_terms_factored(kind):
    x = _head(kind, 16, 1024)
    S, T = x.shape
    Ls = LS[2:9]
    W, _ = predict.window_rows(x, Ls, T // 2)
    vf = dependence.variance_function(x)
    idx = np.array([vf.index(n) for n in Ls / x.mean()])
    docs = verdict.Docs(T, T // 2, x.sum(1), (x * x).sum(1), *predict.window_sums(W))
    rng = np.random.default_rng(1)
    for w in (np.ones((1, S)), rng.multinomial(S, np.ones(S) / S, 7).astype(np.float64), dependence.loo_weights(S)):
        got, ref = verdict.parts(docs, vf, idx, Ls, w)[2], old_parts_terms(docs, vf, idx, Ls, w)
        assert np.allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("kind,n_cap", [(k, predict.N_CAP) for k in KINDS] + [("censored", 700), ("plateaus", 600)])
def test_block_walks_from_prefix_sums_equal_one_cumsum_a_walk(kind, n_cap):
    """The windows of walks searched in the document's prefix sums are those of one cumsum of each whole walk (the
    same draws): equal up to the rounding of the sums, identical on these heads."""
    x = _head(kind, 5, 512)
    got = predict.block_walks(x, LS, np.random.default_rng(2), 16, n_cap=n_cap)
    ref = [[], []]
    rng = np.random.default_rng(2)
    L_max, T, bl = LS.max(), 512, 128
    for d in range(5):                                         # one walk at a time, the whole walk at once
        kd = x[d].mean()
        n_len = int(min(n_cap, max(T + 1, 2 * L_max / kd + 2 * bl + 64)))
        ends = rng.integers(T // 2, T, size=16)
        starts = rng.integers(0, T - bl + 1, size=(16, -(-n_len // bl)))
        blocks = (starts[:, :, None] + (bl - 1 - np.arange(bl))).reshape(16, -1)
        for m, e in enumerate(ends):
            cs = np.cumsum(x[d][np.concatenate([np.arange(e, -1, -1), blocks[m, :max(0, n_len - e - 1)]])[:n_len]])
            ref[0].append(np.searchsorted(cs, LS, side="right"))
            ref[1].append(cs[-1] <= LS)
    assert np.array_equal(got[0].reshape(-1, len(LS)), np.array(ref[0]))
    assert np.array_equal(got[1].reshape(-1, len(LS)), np.array(ref[1]))


def old_lattice_cells(x, h, M):
    """The marginal laws' hat-split cells by one bincount over all M cells (the code _lattice_cells replaced)."""
    y = x / h
    k = np.floor(y).astype(np.int64)
    f = y - k
    p = np.bincount(np.minimum(k, M - 1), weights=1 - f, minlength=M)
    p += np.bincount(np.minimum(k + 1, M - 1), weights=f, minlength=M)
    return p


@pytest.mark.parametrize("kind", KINDS)
def test_lattice_cells_and_block_sums_rows(kind):
    x = _head(kind, 12, 1024)
    xr = x.ravel()
    for h, M in ((1e-3, 1 << 16), (0.05, 1 << 9), (0.3, 8)):              # the last: steps past 2L (clamped)
        got = headlaws._lattice_cells(xr, h, M, float(xr.max()))
        ref = old_lattice_cells(xr, h, M)
        assert np.array_equal(got, ref[:len(got)]) and not ref[len(got):].any()
    bs, fit = headlaws.BlockSums(x, 512), np.arange(0, 12, 2)
    sub, ref = bs.rows(fit), headlaws.BlockSums(x[fit], 512)
    for a, b in ((sub.q1, ref.q1), (sub.q2, ref.q2), (sub.q3, ref.q3), (sub.kappa_d, ref.kappa_d)):
        assert np.max(np.abs(a - b)) <= 1e-14 * np.max(np.abs(b))          # row by row: identical up to rounding


@pytest.mark.parametrize("kind", KINDS)
def test_doc_sums_block_columns_in_pieces_are_one_calls_and_the_definition(kind):
    """V(n)'s block sums asked for in pieces (repeated, unsorted, overlapping lengths; a document count that is
    not a multiple of BLOCK_ROWS) are those of one call, bit for bit, and the definition's to rounding."""
    x = _head(kind, 11, 1024)
    ns = dependence.n_grid(512, [37, 500])
    one = dependence.DocSums(x).block_columns(ns)
    parts = dependence.DocSums(x)
    parts.block_columns([500, 1, 500, 3])
    parts.block_columns(ns[::-2])
    got = parts.block_columns(ns)
    assert all(np.array_equal(a, b) for a, b in zip(got, one))
    c = np.concatenate([np.zeros((11, 1)), np.cumsum(x, 1)], 1)
    c -= np.arange(1025) * x.mean(1, keepdims=True)                       # each document about its own mean
    for k, n in enumerate(ns):
        e = c[:, n:] - c[:, :-n]
        np.testing.assert_allclose(one[0][:, k], (e * e).sum(1), rtol=1e-11)
        np.testing.assert_allclose(one[1][:, k], e.sum(1), rtol=1e-9, atol=1e-9 * np.abs(e).sum(1).max())


@pytest.mark.parametrize("kind", KINDS)
def test_shared_doc_sums_give_each_subsets_numbers(kind):
    """V(n) and Geyer's tau of the fitted half read from the head's DocSums equal those of the half's own arrays."""
    x = _head(kind, 14, 2048)
    sums, fit = dependence.DocSums(x), np.arange(0, 14, 2)
    ns = dependence.n_grid(1024, [37, 500])
    for rows, xs in ((None, x), (fit, x[fit])):
        a, b = dependence.variance_function(xs, ns, sums, rows), dependence.variance_function(xs, ns)
        for u, v in ((a.Q, b.Q), (a.A1, b.A1), (a.A2, b.A2), (a.p1, b.p1), (a.cnt, b.cnt)):
            np.testing.assert_allclose(u, v, rtol=1e-13, atol=1e-13 * np.abs(v).max())
        np.testing.assert_allclose(a.tau_within(dependence.loo_weights(len(xs))),
                                   b.tau_within(dependence.loo_weights(len(xs))), rtol=1e-12)
        ta, tb = dependence.tau_estimate(xs, "sequence", sums=sums, rows=rows), dependence.tau_estimate(xs, "sequence")
        assert ta.cut == tb.cut and ta.tau == pytest.approx(tb.tau, rel=1e-13)
        np.testing.assert_allclose(ta.tau_loo, tb.tau_loo, rtol=1e-13)
