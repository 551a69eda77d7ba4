"""The prediction's printed SE covers what another seed moves it by (seed_spread.py)."""
import numpy as np
import pytest
from scipy import stats

from foxwindow.heads import predict, seed_spread
from foxwindow.laws import gates

K = 12                       # seeds per head
HEADS = [(2.0, 0.5, 0.5), (1.0, 1.0, 0.9), (3.0, 0.3, 0.0), (0.5, 1.5, 0.7), (2.5, 0.8, 0.95), (1.5, 0.6, 0.3)]


def _trace(mu, s, phi, seed, S=16, T=512):
    x, _ = gates.AR1LogitGate(mu, s, phi).sample_paths(np.random.default_rng(seed), S, T)
    return x


@pytest.fixture(scope="module")
def spreads():
    L = np.array([gates.threshold(1e-2)])                # one eps per head: the heads' cells are independent
    return [seed_spread.spread(_trace(*h, seed=i), L, range(K)) for i, h in enumerate(HEADS)]


@pytest.mark.parametrize("what", ["mean", "var"])
def test_printed_se_covers_the_seed_spread(spreads, what):
    # (K - 1) sd^2 / se^2 summed over independent heads is at most chi^2 with heads (K - 1) degrees of freedom
    # when the SE is the Monte Carlo SD itself, smaller when it also covers document sampling: an SE that
    # undercovers by more than its sampling error exceeds the 0.999 quantile
    parts = [seed_spread.coverage_statistic(sp, what) for sp in spreads]
    stat, df = sum(p[0] for p in parts), sum(p[1] for p in parts)
    q = stats.chi2.ppf(0.999, df)
    assert stat <= q, (what, stat / df)
    # the Monte Carlo part alone is the seed spread's own scale (chi^2 within its two-sided 0.999 band) ...
    mc = [seed_spread.coverage_statistic(sp, what, se="se_mc_") for sp in spreads]
    assert stats.chi2.ppf(0.0005, df) <= sum(p[0] for p in mc) <= stats.chi2.ppf(0.9995, df)
    # ... and the check has power: an SE of half that undercovers and is rejected
    half = [seed_spread.coverage_statistic(sp, what, shrink=2.0, se="se_mc_") for sp in spreads]
    assert sum(p[0] for p in half) > q


def test_mc_part_is_below_the_printed_se_and_shrinks_with_walks():
    x = _trace(2.0, 0.5, 0.9, seed=7)
    L = np.array([gates.threshold(1e-3)])
    p16 = predict.predict(x, L, np.random.default_rng(0), per_doc=16)
    p64 = predict.predict(x, L, np.random.default_rng(0), per_doc=64)
    for p in (p16, p64):
        assert p.se_mc_mean[0] <= p.se_mean[0] and p.se_mc_var[0] <= p.se_var[0]
    assert p64.se_mc_mean[0] < 0.7 * p16.se_mc_mean[0]       # 1/sqrt(4) = 0.5 in expectation


def test_ratio_nan_for_a_constant_window():
    sp = {"mean": np.zeros((4, 2)), "se_mean": np.zeros((4, 2))}
    assert np.isnan(seed_spread.ratios(sp)).all()


def test_measure_reads_a_trace_file_a_block_of_heads_at_a_time(tmp_path, monkeypatch):
    """seed_spread.measure on a trace file: the heads read through traces.HeadBlocks (one head a block here), never
    the whole file, with the numbers of the default blocks."""
    from foxwindow.models import traces
    lg = np.stack([-_trace(*h[:3], seed=i, S=6, T=256) for i, h in enumerate(HEADS[:3])], 2).astype(np.float32)
    path = str(tmp_path / "t.npz")
    traces.save_trace(path, {"layer": lg})
    ref = seed_spread.measure(path, seeds=[0, 1], per_docs=[8], eps=[1e-2], progress=False)
    monkeypatch.setattr(traces, "load_trace", lambda *a, **k: pytest.fail("the whole file was loaded"))
    monkeypatch.setattr(traces, "HEAD_BLOCK_BYTES", 1)
    got = seed_spread.measure(path, seeds=[0, 1], per_docs=[8], eps=[1e-2], progress=False)
    assert got["rows"] == ref["rows"] and len(got["rows"]) == 3
