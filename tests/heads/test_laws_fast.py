"""heads/laws.py BlockSums.moments as matrix products against a frozen copy of its per-row loop, on iid, AR(1)
and regime-switching increments of awkward sizes, under equal and bootstrap-like document weights."""
import numpy as np
import pytest

from foxwindow.heads import laws as headlaws


def _moments_loop(bs, wts):
    """The per-row loop BlockSums.moments replaced, kept as the reference."""
    R, w = bs.R, bs.w[None, :]
    N = wts.sum(1)[:, None] * R
    shift = bs.kappa_d[:, None] * w
    m = (wts @ (bs.q1 + R * shift)) / N
    out_v, out_3 = [], []
    for b in range(wts.shape[0]):
        dlt = shift - m[b]
        s2 = bs.q2 + 2 * dlt * bs.q1 + R * dlt * dlt
        s3 = bs.q3 + 3 * dlt * bs.q2 + 3 * dlt * dlt * bs.q1 + R * dlt ** 3
        out_v.append(wts[b] @ s2)
        out_3.append(wts[b] @ s3)
    return m, np.array(out_v) / N, np.array(out_3) / N


def _head(kind, S, T, rng):
    if kind == "iid":
        return rng.gamma(0.7, 0.4, (S, T))
    if kind == "ar1":
        z = np.empty((S, T))
        z[:, 0] = rng.standard_normal(S)
        for t in range(1, T):
            z[:, t] = 0.9 * z[:, t - 1] + np.sqrt(1 - 0.81) * rng.standard_normal(S)
        return np.exp(0.5 * z - 1.5)
    state = np.cumsum(rng.random((S, T)) < 0.01, 1) % 2                  # regimes
    return np.where(state == 1, rng.gamma(2.0, 0.5, (S, T)), rng.gamma(0.5, 0.02, (S, T)))


@pytest.mark.parametrize("kind,S,T,r0", [("iid", 7, 333, 5), ("ar1", 13, 257, 0), ("regime", 5, 501, 17),
                                          ("iid", 1, 64, 3), ("regime", 16, 1000, 100)])
def test_moments_match_the_loop(kind, S, T, r0):
    rng = np.random.default_rng([S, T, r0])
    bs = headlaws.BlockSums(_head(kind, S, T, rng), r0)
    for wts in (np.ones((1, S)), rng.multinomial(S, np.ones(S) / S, 9).astype(np.float64),
                rng.random((4, S)) + 0.01):
        got, ref = bs.moments(wts), _moments_loop(bs, wts)
        m, v, _ = ref
        np.testing.assert_allclose(got[0], m, rtol=1e-10, atol=0)
        np.testing.assert_allclose(got[1], v, rtol=1e-10, atol=1e-12 * np.abs(v).max())
        # the third moment can sit near 0: judged against the spread's own scale v^1.5
        assert np.all(np.abs(got[2] - ref[2]) <= 1e-10 * np.maximum(v, 0) ** 1.5 + 1e-12 * np.abs(ref[2]).max())
