"""heads/laws.py, every law at every eps, out of sample: the marginal law's lattice numerics against the exact
oracle, the block-sum moments against brute force, the lead law on gates where its shifted-gamma law of S_w is exact,
the four states, the schema-1 document (against the golden tests/data/heads_small.json) and the table's width."""
import json
import math
import os
import sys

import numpy as np
import pytest
from scipy import stats

from foxwindow import outputs
from foxwindow.heads import calibration as verdict_calibration
from foxwindow.heads import dependence, predict, table
from foxwindow.heads import driver as heads
from foxwindow.heads import laws as headlaws
from foxwindow.laws import exact
from foxwindow.laws import gates as forget

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
GOLDEN = os.path.join(DATA, "heads_small.json")
ORACLE = os.path.join(DATA, "marginal_oracle.json")


def test_marginal_law_matches_the_exact_first_passage_within_its_claim():
    # the exact oracle (laws.exact.exact_first_passage, about 4 s of CPU per L) read from
    # tests/data/marginal_oracle.json, written by tests/data/make_marginal_oracle.py
    sys.path.insert(0, DATA)
    import make_marginal_oracle
    orc = json.load(open(ORACLE))
    assert orc["sample"] == make_marginal_oracle.SAMPLE and orc["q"] == list(headlaws.Q)
    x = make_marginal_oracle.sample(**orc["sample"])
    Ls = np.array([r["L"] for r in orc["at"]])
    mean, var = headlaws.marginal_moments(x, Ls)
    for k, (mp, fp) in enumerate(zip(headlaws.marginal_passage(x, Ls), orc["at"])):
        assert mean[k] == pytest.approx(fp["mean"], rel=headlaws.MARGINAL_CLAIM / 5, abs=1e-3)
        assert var[k] == pytest.approx(fp["var"], rel=headlaws.MARGINAL_CLAIM)
        assert (mp.mean, mp.var) == (mean[k], var[k])
        # its distribution: P(W >= w) on the same lattice within 1e-3 of the exact survival, the same quantiles
        w = np.arange(0, fp["n0"] + len(fp["survival"]))
        exact_ge = np.concatenate([np.ones(fp["n0"]), fp["survival"]])
        assert np.abs(mp.ge(w) - exact_ge).max() < 1e-3
        assert [mp.quantile(q) for q in headlaws.Q] == fp["quantiles"]
        # the pmf block's entry: P(W = w) within 1e-3 of the exact pmf where it keeps w, the rest below its 1e-6
        assert np.abs(mp.ge_upto(len(w)) - mp.ge(np.arange(1, len(w) + 1))).max() < 1e-12
        pb = headlaws.marginal_pmf(mp)
        exact_p = exact_ge - np.concatenate([exact_ge[1:], [0.0]])
        kept = pb["offset"] + np.arange(len(pb["p"]))
        assert abs(sum(pb["p"]) - 1) < 1e-4 and pb["offset"] <= fp["quantiles"][0]
        assert np.abs(np.array(pb["p"]) - exact_p[kept]).max() < 1e-3
        assert np.delete(exact_p, kept[kept < len(exact_p)]).max(initial=0.0) < 1e-3


def test_marginal_coverage_from_four_points_equals_the_full_cdf():
    # the 90% coverage read from the CDF at q05 - 1, q05, q95 - 1, q95 only is the randomised PIT of the full CDF
    rng = np.random.default_rng(7)
    x = rng.gamma(0.5, 0.6, (8, 256))
    Ls = np.array([forget.threshold(e) for e in (1e-1, 1e-3)])
    W, C = predict.window_rows(x[1::2], Ls, 128)
    for k, mp in enumerate(headlaws.marginal_passage(x[0::2], Ls)):
        q = [mp.quantile(p) for p in headlaws.Q]
        full = np.mean([predict.coverage(mp.cdf, W[d, :, k], C[d, :, k]).mean() for d in range(4)])
        assert headlaws._cover_quantiles(mp.cdf, q, W[:, :, k], C[:, :, k]) == pytest.approx(full, abs=1e-12)
        assert 0.0 < full < 1.0


def test_block_sums_match_brute_force():
    rng = np.random.default_rng(1)
    x = rng.gamma(0.5, 1.0, (3, 64)) * (1 + np.arange(3))[:, None]
    bs = headlaws.BlockSums(x, 32)
    wts = np.array([[1.0, 1.0, 1.0], [2.0, 0.0, 1.0]])
    m, v, m3 = bs.moments(wts)
    c = np.concatenate([np.zeros((3, 1)), np.cumsum(x, 1)], 1)
    for b, wt in enumerate(wts):
        S = np.array([[c[s, r + 1] - c[s, r + 1 - w] for s in range(3) for r in range(32, 64) for _ in
                       range(int(wt[s]))] for w in range(1, 33)])
        assert np.allclose(m[b], S.mean(1), atol=1e-10)
        assert np.allclose(v[b], S.var(1), atol=1e-9)
        assert np.allclose(m3[b], ((S - S.mean(1, keepdims=True)) ** 3).mean(1), atol=1e-8)


def test_lead_law_is_right_where_its_law_of_s_w_is_exact():
    # gamma increments: S_w is gamma, which the shifted-gamma law of three cumulants reproduces exactly
    rng = np.random.default_rng(2)
    S, T = 64, 512
    x = rng.gamma(2.0, 0.25, (S, T))
    Ls = np.array([forget.threshold(e) for e in (1e-2, 1e-3, 1e-4)])
    out = headlaws.evaluate(x, Ls, rng)
    for k, L in enumerate(Ls):
        fp = exact.exact_first_passage(forget.GammaIncrement(2.0, 0.25), L=L)
        lw = out["at"][k]["laws"][headlaws.LEAD]
        assert abs(lw["var"] - fp.var) <= 3 * lw["var_se"] + 0.01 * fp.var
        assert abs(lw["mean"] - fp.mean) <= 3 * lw["mean_se"] + 0.01
        # and the iid laws (true here) sit within their claim + 3 SE of the exact variance
        for law in ("marginal", "iid"):
            d = out["at"][k]["laws"][law]
            assert abs(d["var"] / fp.var - 1) <= d["claim"] + 3 * d["var_se"] / d["var"], law


def _model(family, rng, H=3, S=16, T=1024):
    return [verdict_calibration.increments(family, mu, rng, S, T) for mu in (1.0, 2.0, 3.0)[:H]]


def test_states_call_the_iid_law_false_on_long_regimes_and_never_on_iid_gates():
    rng = np.random.default_rng(3)
    Ls = np.array([forget.threshold(e) for e in (1e-1, 1e-2, 1e-3)])
    for fam, expect_false in (("iid", False), ("long_regimes", True)):
        at = [headlaws.evaluate(x, Ls, rng)["at"] for x in _model(fam, rng)]
        fam_info = headlaws.assign_states(at, df=7)
        assert fam_info["m"] > 0 and fam_info["alpha_test"] == pytest.approx(0.05 / fam_info["m"])
        states = [rec["laws"]["iid"]["state"] for recs in at for rec in recs]
        assert all(s in headlaws.STATES for recs in at for rec in recs for s in
                   [d["state"] for d in rec["laws"].values()])
        if expect_false:
            assert states.count("false") >= len(states) // 2, states
            assert "holds" not in states
        else:
            assert "false" not in states


def test_schema_one_document_matches_the_golden_file():
    sys.path.insert(0, DATA)
    import make_heads_small
    doc = json.loads(json.dumps(make_heads_small.small_document()))
    gold = json.load(open(GOLDEN))
    for key in ("schema_version", "foxwindow_version", "kind", "source", "lead_law", "alpha", "laws", "heads"):
        assert key in doc and key in gold
    assert doc["schema_version"] == 1 and doc["lead_law"] == headlaws.LEAD and list(doc["laws"]) == list(headlaws.LAWS)
    assert list(doc["laws"])[-1] == "bootstrap"
    for h, g in zip(doc["heads"], gold["heads"]):
        assert isinstance(h["layer"], str) and isinstance(h["head"], int) and h["label"] == g["label"]
        assert set(h) >= {"kappa", "sigma2", "tau", "tau_se", "summary", "dependence", "mass", "at", "pmf"}
        assert [r["eps"] for r in h["at"]] == [r["eps"] for r in g["at"]]
        assert all(a["L"] < b["L"] for a, b in zip(h["at"], h["at"][1:]))
        for r, rg in zip(h["at"], g["at"]):
            assert set(r["measured"]) >= {"mean", "var", "mean_se", "var_se", "censored_share", "quantiles"}
            assert list(r["laws"]) == list(headlaws.LAWS)
            for n, d in r["laws"].items():
                assert set(d) >= {"mean", "var", "quantiles", "var_ratio", "var_ratio_ci", "state", "claim", "why"}
                assert d["state"] in headlaws.STATES
                assert d["state"] == rg["laws"][n]["state"]
                if d["var"] is not None:
                    assert d["var"] == pytest.approx(rg["laws"][n]["var"], rel=1e-6)
                for k in ("var_se", "claim"):          # the law's jackknife (every fitted term refitted) and claim
                    if rg["laws"][n].get(k) is not None:
                        assert d[k] == pytest.approx(rg["laws"][n][k], rel=1e-6), (n, k)
        assert h["pmf"]["eps"] == pytest.approx(1e-3)
        assert list(h["pmf"]["laws"]) == list(g["pmf"]["laws"]) == ["marginal", headlaws.LEAD, "bootstrap"]
        for n, pl in h["pmf"]["laws"].items():
            assert abs(sum(pl["p"]) - 1) < 1e-4 and pl["offset"] >= 0, n
        assert h["pmf"]["laws"]["marginal"]["p"] == pytest.approx(g["pmf"]["laws"]["marginal"]["p"], abs=1e-9)


def test_table_fits_120_columns(capsys):
    rng = np.random.default_rng(5)
    lg = np.stack([-x for x in _model("ar1", rng, H=2, S=8, T=256)], 2)
    Ls = [forget.threshold(e) for e in sorted(set(heads.EPS_SCAN) | {1e-3}, reverse=True)]
    results, seed = heads.analyse_layers({"x": lg}, L=Ls, n_boot=100, seed=1)
    info = dict(checkpoint="x.npz", n_seq=8, seq_len=256, capture_s=0.0, total_s=0.0, seed=seed)
    table.print_table(results, info)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= table.WIDTH
    assert "lead1e-3" in out and all(r.summary["text"] for r in results)
    assert math.isfinite(results[0].laws["at"][0]["laws"][headlaws.LEAD]["var"])
    # every cell of the JSON's records: '~' exactly where the held-out interval spans more than WIDE_CI
    for r in results:
        for rec in r.laws["at"]:
            for lw in rec["laws"].values():
                lo, hi = lw.get("var_ratio_ci") or (None, None)
                cell = table.ratio_cell(lw)
                wide = lo is not None and hi is not None and (lo <= 0 or hi / lo > table.WIDE_CI)
                assert ("~" in cell) == (wide and lw["var_ratio"] is not None), (cell, lo, hi)
    assert table.ratio_cell({"var_ratio": 1.59, "var_ratio_ci": [0.64, 3.97], "state": "holds"}) == "1.59~H"
    assert table.ratio_cell({"var_ratio": 0.97, "var_ratio_ci": [0.8, 1.2], "state": "false"}) == "0.97F"
    assert table.ratio_cell({"var_ratio": None, "var_ratio_ci": None, "state": "undetermined"}) == "?"
    assert table.ratio_cell({"var_ratio": 0.0031, "var_ratio_ci": [0.002, 0.005], "state": "false"}) == "0.003F"
    assert table.ratio_cell({"var_ratio": 2e-7, "var_ratio_ci": [1e-8, 1e-5], "state": "false"}) == "2e-07~F"
    # every law's state at eps 1e-2 ... 1e-4, a letter an eps, read back against the JSON's records
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("every law's state at eps 0.01, 0.003, 0.001"))
    head = lines[start + 1].split()
    assert head[0] == "L.H" and set(head[1:]) == {table.SHORT[n] for n in headlaws.LAWS} and head[-1] == "boot"
    band = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4)
    for r, line in zip(results, lines[start + 2:start + 2 + len(results)]):
        cells = line.split()
        assert cells[0] == f"{r.layer}.{r.head}"
        for name, cell in zip(head[1:], cells[1:]):
            law = next(n for n in headlaws.LAWS if table.SHORT[n] == name)
            recs = [next(rec for rec in r.laws["at"] if abs(rec["eps"] - e) < 1e-12) for e in band]
            assert cell == "".join(table._CODE[rec["laws"][law]["state"]] for rec in recs), (r.head, law, cell)
    # an asked eps outside the table's three: a block of its own, every law's cell there, within 120 columns
    table.print_table(results, info, eps=0.03)
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("at --eps 0.03 (L = 3.507)"))
    head, rows = out[start + 1].split(), out[start + 2:start + 2 + len(results)]
    assert head[:2] == ["L.H", "V"] and "3cum" in head and "boot" in head and max(map(len, out)) <= table.WIDTH
    k = next(i for i, Lk in enumerate(results[1].L_list) if abs(Lk - forget.threshold(0.03)) < 1e-9)
    rec = results[1].laws["at"][k]
    assert rows[1].split()[0] == f"{results[1].layer}.{results[1].head}"
    assert rows[1].split()[2 + head[2:].index("boot")] == table.ratio_cell(rec["laws"]["bootstrap"])
    table.print_table(results, info, eps=1e-3)                           # in the table: no block
    assert "at --eps" not in capsys.readouterr().out


def test_table_cuts_no_label_and_no_number(capsys):
    """Heads past 99 (an LSTM layer's units 100-127: "0.127" was cut to "0.12", a label that another unit has) and
    a rate of 1e29 per token ("1032707" was the first digits of its fixed-point text): whole in every block."""
    rng = np.random.default_rng(5)
    lg = np.stack([-x for x in _model("ar1", rng, H=2, S=8, T=256)], 2)
    lg[:, :, 1] *= 1e30                                                    # every window 0, kappa ~1e29
    results, seed = heads.analyse_layers({"x": lg}, n_boot=100, seed=1)
    results[0].head, results[1].head = 127, 1005
    info = dict(checkpoint="x.npz", n_seq=8, seq_len=256, seed=seed)
    table.print_table(results, info, eps=0.03)
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.split() and line.split()[0] in ("0.127", "0.1005")]
    assert len(rows) == 6 and max(map(len, out)) <= table.WIDTH               # the table, the states, the eps block
    main = [r for r in rows if len(r) > 10]
    assert [r[0] for r in main] == ["0.127", "0.1005"]
    kappa = float(main[1][1])
    assert kappa == pytest.approx(results[1].kappa, rel=1e-2) and kappa > 1e28
    assert table._fit(1.1007, 7, 4) == "1.1007" and table._fit(123456.7, 7, 4) == "123457"
    assert table._fit(140.65, 5, 2) == "140.7" and table._fit(1.234e-5, 7, 4) == "1.23e-5"
    assert table._fit(None, 7, 4) == "-" and table._fit(float("nan"), 5, 2) == "-"
    assert table._g(3.4e-29) == "3e-29" and table._g(1.2e-5) == "1.2e-5" and table._g(0.5) == "0.5"
    assert table._g(2.5e4) == "2.5e4" and table._g(1e300) == "1e300"


def test_law_study_runs_small_and_calls_the_iid_law_false_on_regimes():
    # a small always-on version of `python -m foxwindow.heads.calibration --laws` (the full run: results/verdict)
    res = verdict_calibration.law_study(["regime_switching"], reps=2, S=16, T=512, seed=0)["regime_switching"]
    off = res["cells"].get("iid|off")
    assert off is not None and off["holds"] == 0 and off["false"] >= 0.8 * (sum(off.values()) - off["not claimed"])
    assert res["runs_any_false_on_null"] <= 1
    text = verdict_calibration.law_tables({"regime_switching": res}, 16, 512)
    assert "false where claimed" in text
    for key, c in res["cells"].items():                    # the counts by eps add up to each law's counts
        by_eps = [v for k, v in res["cells_eps"].items() if k.rsplit("|", 1)[0] == key]
        assert {st: sum(v[st] for v in by_eps) for st in c} == c, key
    rows = verdict_calibration.eps_table({"as_power": dict(res, null=False)}).splitlines()[2:]
    iid = next(r for r in rows if r.startswith("| as_power | iid |")).strip("| ").split(" | ")
    n_lo, n_hi = int(iid[2]), int(iid[4])
    assert n_lo + n_hi == sum(off.values())



def test_lead_variants_document_rates_pooled_runs_away_mixture_does_not():
    """--lead-variants on the document-rates family (law_study's population draws, 128 x 512 tokens a head): the
    pooled S_w law's Var[W] is beyond 1.5x on every cell with a measured Var[W] (median error 7.75 in
    docs/LAWS.md), the mixture of the documents' own laws within 1.5x on every such cell; the table names every
    form, and MIXED is restored."""
    before = headlaws.MIXED
    res = verdict_calibration.lead_variants(["document_rates"])["document_rates"]
    assert headlaws.MIXED == before
    pooled, docs = np.array(res["pooled"]), np.array(res["documents"])
    assert len(pooled) == len(verdict_calibration.LAW_MUS) * len(verdict_calibration.LAW_EPS)
    ok = np.isfinite(pooled)                                               # the cells with a measured Var[W]
    assert np.array_equal(ok, np.isfinite(docs)) and ok.sum() >= 10
    assert np.all(np.abs(np.log(pooled[ok])) > math.log(1.5)) and np.all(np.abs(np.log(docs[ok])) < math.log(1.5))
    text = verdict_calibration.lead_variants_table({"document_rates": res})
    assert all(n in text for n in verdict_calibration.LEAD_VARIANTS)


def test_population_table_reads_the_committed_study_and_refuses_other_json(tmp_path, capsys):
    path = os.path.join(outputs.REPO, "results", "verdict", "laws_calibration.json")
    assert outputs.cli(verdict_calibration.main, ["--population", path]) == 0
    out = capsys.readouterr().out
    assert "| document_rates |" in out and all(law in out.splitlines()[0] for law in headlaws.LAWS)
    assert outputs.cli(verdict_calibration.main, ["--lead-variants"]) == 2      # it goes with --laws
    assert "--lead-variants goes with --laws" in capsys.readouterr().err
    bad = tmp_path / "other.json"
    bad.write_text('{"results": {"iid": {"population_ratio": {"iid@0.1@0": "x"}}}}')
    for arg, words in ((str(bad), "is not a number"), (str(tmp_path / "none.json"), "not found")):
        assert outputs.cli(verdict_calibration.main, ["--population", arg]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0]

def test_an_expansion_gives_no_value_where_no_window_law_could():
    """E[W] < 0 (the renewal mean below one step at the smallest L of a fast head) or Var[W] <= 0 is no value (null,
    'not claimed', the reason in `why`), never a number a table or a plot would show."""
    rng = np.random.default_rng(3)
    x = np.logaddexp(0.0, -(-2.0 + 0.3 * rng.standard_normal((16, 512))))          # kappa about 2.1: fast
    Ls = np.array([math.log(2.0), math.log(1e2)])
    out = headlaws.evaluate(x, Ls, np.random.default_rng(0))
    small, big = out["at"]
    assert small["laws"]["iid"]["mean"] is None and "no value: its E[W]" in small["laws"]["iid"]["why"]
    assert big["laws"]["iid"]["mean"] is not None and big["laws"]["iid"]["mean"] > 0
    for rec in out["at"]:
        for n in headlaws.EXPANSIONS:
            lw = rec["laws"][n]
            assert lw["mean"] is None or lw["mean"] >= 0, (n, lw)
            assert lw["var"] is None or lw["var"] > 0, (n, lw)
    laws = {"mixture": dict(mean=np.array([2.0, -0.5]), var=np.array([-3.0, 4.0]), mean_se=np.ones(2),
                            var_se=np.ones(2), why=["a", "b"])}
    headlaws._drop_impossible(laws, ["mixture"])
    d = laws["mixture"]
    assert np.isnan(d["var"][0]) and np.isnan(d["var_se"][0]) and d["mean"][0] == 2.0 and d["var"][1] == 4.0
    assert np.isnan(d["mean"][1]) and np.isnan(d["mean_se"][1]) and "Var[W] -3 <= 0" in d["why"][0]


def test_score_command_states_counts_every_cell_and_head(capsys):
    """--states: each law's state counts over the (head, eps) cells at eps 1e-2..1e-4 add up to the cells, and the
    heads line counts every head once, as the heads' own summaries say."""
    path = os.path.join(outputs.REPO, "results", "laws", "fox_heads.json")
    assert outputs.cli(headlaws.main, ["--states", f"fox={path}"]) == 0
    out = capsys.readouterr().out
    with open(path) as fh:
        doc = json.load(fh)
    n_cells = sum(1 for h in doc["heads"] for r in h["at"] if 1e-4 * (1 - 1e-9) <= r["eps"] <= 1e-2 * (1 + 1e-9))
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and "states at eps" not in ln
            and ln.count("|") == 3 and not ln.startswith("| ---")]
    assert {ln.split("|")[1].strip() for ln in rows} == set(doc["laws"])
    for ln in rows:
        assert sum(int(c.rsplit(" ", 1)[1]) for c in ln.split("|")[2].strip().split(", ")) == n_cells, ln
    line = next(ln for ln in out.splitlines() if ln.startswith("Heads: "))
    var = line.split("Var[W] explained by: ")[1].split("; false")[0]
    assert sum(int(c.rsplit(" ", 1)[1]) for c in var.split(", ")) == len(doc["heads"]) == int(line.split()[1][:-1])
    want = sum(1 for h in doc["heads"] if (h["summary"] or {}).get("var_law") == "three_cumulant")
    assert f"three_cumulant {want}" in var


def test_score_command_refuses_bad_files_in_one_line(tmp_path, capsys):
    """python -m foxwindow.heads.laws: a missing file, a file that is not JSON and a JSON of another shape are one
    line each, exit 2, before any work."""
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    text = tmp_path / "notes.txt"
    text.write_text("not json")
    for arg, words in ((str(tmp_path / "none.json"), "not found"), (str(text), "not valid JSON"),
                       (f"x={bad}", "not a per-head result of schema 1")):
        assert outputs.cli(headlaws.main, [arg]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and "Traceback" not in err[0], err
    assert outputs.cli(headlaws.main, []) == 2                               # neither a JSON nor --floor
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--floor" in err[0], err


def test_noise_floor_is_the_median_error_of_exact_predictions():
    # equal SEs: the median of |N(0, r^2)| is 0.6745 r
    assert headlaws.noise_floor([0.1] * 7) == pytest.approx(0.1 * 0.6744898, rel=1e-6)
    # unequal SEs: the pooled median of simulated errors of an exact predictor, within its sampling error
    rng = np.random.default_rng(11)
    r = rng.uniform(0.01, 0.2, 40)
    err = np.abs(r[None, :] * rng.standard_normal((4000, 40)))
    assert headlaws.noise_floor(r) == pytest.approx(np.median(err), rel=0.02)
    assert headlaws.noise_floor([]) is None and headlaws.noise_floor([0.0, 0.0]) == 0.0


def test_score_reports_the_error_beyond_sampling_and_the_floor():
    sc = headlaws.score(json.load(open(GOLDEN)), eps_lo=1e-4, eps_hi=0.5)
    for law, s in sc.items():
        if s["cells"]:
            assert 0.0 <= s["med_rel_var_corrected"] <= s["med_rel_var"], law
            assert 0.0 < s["floor_true"] <= s["floor_law"], law


def test_laws_of_few_statistics_do_not_move_with_the_seed():
    # the seed only draws the bootstrap's walks: the lead law and the marginal law have no seed-to-seed spread
    x = _model("ar1", np.random.default_rng(12), H=1, S=8, T=256)[0]
    Ls = np.array([forget.threshold(e) for e in (1e-2, 1e-3)])
    a, b = (headlaws.evaluate(x, Ls, np.random.default_rng(s))["at"] for s in (1, 2))
    for ra, rb in zip(a, b):
        for law in (headlaws.LEAD, "marginal"):
            assert ra["laws"][law] == rb["laws"][law]
        assert ra["laws"]["bootstrap"]["var"] != rb["laws"]["bootstrap"]["var"]


def test_subsample_floor_shrinks_with_the_held_out_documents():
    rng = np.random.default_rng(13)
    xs = [rng.gamma(0.8, 0.5, (32, 128)) for _ in range(2)]
    Ls = np.array([forget.threshold(e) for e in (1e-1, 1e-2)])
    res = headlaws.subsample_floor(xs, Ls, (4, 16), rng, reps=60)
    assert res[4]["cells"] == 4
    assert res[16]["true"][0] < res[4]["true"][0] and res[4]["true"][0] < res[4]["split"][0]
    assert res[4]["true"][1] <= res[4]["true"][0] <= res[4]["true"][2]
    assert outputs.cli(headlaws.main, ["--floor", "none.npz"]) == 2


def _cell(D, se, claim=0.08, df=30):
    """A crafted model of one head, one eps, one claimed law (`iid`) whose test is D, se on all documents."""
    law = dict(mean=10.0, var=100.0, mean_se=0.1, var_se=1.0, claim=claim, why="", state="undetermined",
               test_all=dict(D=D, se=se, df=df))
    return dict(measured=dict(mean=10.0, var=100.0 * math.exp(D), mean_se=0.1, var_se=1.0), laws={"iid": law},
                n_fit=df + 1, n_test=df + 1)


def test_holds_is_an_equivalence_and_never_an_off_cell():
    # point estimate inside claim + 1 SE (the old rule held it) but its 90% interval leaves the claim band
    for D, se in ((0.10, 0.05), (-0.12, 0.06), (math.log(1 / 1.5) + 0.25, 0.09)):
        at = [[_cell(D, se)]]
        headlaws.assign_states(at, df=15)
        assert at[0][0]["laws"]["iid"]["state"] == "undetermined", (D, se)
    # inside the band with its whole interval: holds
    at = [[_cell(0.01, 0.02)]]
    headlaws.assign_states(at, df=15)
    assert at[0][0]["laws"]["iid"]["state"] == "holds"
    # a cell off by 1.5x never holds, however small its SE: false
    at = [[_cell(math.log(1.5), 0.01)]]
    headlaws.assign_states(at, df=15)
    assert at[0][0]["laws"]["iid"]["state"] == "false"


def test_a_law_claims_up_to_the_claim_bound_and_is_tested_against_its_own_claim():
    # a claim of 30% (within CLAIM_MAX) is tested: off by 2x with a small SE it is false, within 10% it holds
    at = [[_cell(math.log(2.0), 0.02, claim=0.30)], [_cell(math.log(1.10), 0.02, claim=0.30)]]
    headlaws.assign_states(at, df=15)
    assert [h[0]["laws"]["iid"]["state"] for h in at] == ["false", "holds"]
    # a law off by 1.4x is within a claim of 45%: never false there, however small its SE
    at = [[_cell(math.log(1.4), 0.01, claim=0.45)]]
    headlaws.assign_states(at, df=15)
    assert at[0][0]["laws"]["iid"]["state"] == "holds"
    # beyond the bound it claims nothing, even off by 3x
    at = [[_cell(math.log(3.0), 0.01, claim=headlaws.CLAIM_MAX + 0.01)]]
    fam = headlaws.assign_states(at, df=15)
    lw = at[0][0]["laws"]["iid"]
    assert lw["state"] == "not claimed" and "stated accuracy" in lw["why"] and fam["m"] == 0


def _summary_rec(eps, states_claims):
    """One `at` record at eps whose laws (every name of LAWS) have the given (state, claim), the rest undetermined."""
    laws = {n: dict(state="undetermined", claim=0.1, mean_ok=None) for n in headlaws.LAWS}
    for n, (st, c) in states_claims.items():
        laws[n].update(state=st, claim=c)
    return dict(eps=eps, measured=dict(var=1.0), laws=laws)


def test_summary_names_the_law_of_the_tightest_claim_among_those_that_hold():
    eps = (1e-2, 1e-3, 1e-4)
    # iid holds within 45% at every eps, the lead law within 8%: the lead law explains the variance
    recs = [_summary_rec(e, {"iid": ("holds", 0.45), headlaws.LEAD: ("holds", 0.08)}) for e in eps]
    s = headlaws.summary(recs)
    assert (s["var_law"], s["var_claim"]) == (headlaws.LEAD, 0.08) and "within 8%" in s["text"]
    # a law's claim there is its largest over the eps: iid at 5% and 9% against the lead law's 8% everywhere
    recs = [_summary_rec(e, {"iid": ("holds", c), headlaws.LEAD: ("holds", 0.08)}) for e, c in zip(eps, (0.05, 0.09,
                                                                                                             0.05))]
    assert headlaws.summary(recs)["var_law"] == headlaws.LEAD
    # a tie goes to the earlier law in display order; a law that fails to hold at one eps is not named
    recs = [_summary_rec(e, {"iid": ("holds", 0.08), headlaws.LEAD: ("holds", 0.08)}) for e in eps]
    assert headlaws.summary(recs)["var_law"] == "iid"
    recs = [_summary_rec(e, {"iid": ("holds", 0.02), headlaws.LEAD: ("holds", 0.08)}) for e in eps]
    recs[1]["laws"]["iid"]["state"] = "undetermined"
    assert headlaws.summary(recs)["var_law"] == headlaws.LEAD
    # none holds everywhere: no law, no claim
    recs[1]["laws"][headlaws.LEAD]["state"] = "false"
    s = headlaws.summary(recs)
    assert s["var_law"] is None and s["var_claim"] is None and s["false"] == [headlaws.LEAD]
    assert "variance no law" in s["text"]


def test_second_order_law_at_every_l_at_once_is_renewals_law_on_awkward_arguments():
    """The leave-one-out second-order variances formed at every L at once are renewal.second_order_var's numbers
    to the bit, NaN wherever it raises: zero, negative, NaN, infinite, tiny and huge kappa and sigma2_lr, NaN and
    huge kappa3_LR, variances that go negative at small L."""
    from foxwindow.laws import renewal
    rng = np.random.default_rng(0)
    Ls = np.array([0.3, 2.3, 9.2, 40.0])
    for _ in range(3000):
        k = float(rng.choice([rng.uniform(1e-3, 5), 1e-150, 1e120, 0.0, -1.0, np.nan, np.inf]))
        s2 = float(rng.choice([rng.uniform(0, 20), 0.0, 1e300, -1e-3, np.nan]))
        k3 = float(rng.choice([rng.normal() * 10, np.nan, 1e308]))
        skg = float(rng.normal() * 5)
        try:
            c = renewal.second_order_constant(k, s2, k3, skg)
        except (ValueError, ZeroDivisionError, OverflowError):
            c = float("nan")
        ref = []
        for L in Ls:
            try:
                ref.append(renewal.second_order_var(k, s2, k3, skg, L).var)
            except (ValueError, ZeroDivisionError, OverflowError):
                ref.append(np.nan)
        assert np.array_equal(headlaws._second_order_vars(k, s2, c, Ls), np.array(ref), equal_nan=True), (k, s2, k3)


def test_holm_rejects_what_bonferroni_would_not_and_keeps_the_family_level():
    band = math.log(1.08)
    # two cells: one far outside, one whose p lies between alpha/2 (Bonferroni) and alpha (Holm's second step)
    t_mid = float(stats.t.isf(0.035 / 2, 30))
    heads_at = [[_cell(band + 20 * 0.05, 0.05)], [_cell(band + t_mid * 0.05, 0.05)]]
    fam = headlaws.assign_states(heads_at, df=15)
    assert fam["m"] == 2 and fam["rejected"] == 2
    assert [h[0]["laws"]["iid"]["state"] for h in heads_at] == ["false", "false"]
    assert heads_at[1][0]["laws"]["iid"]["test"]["level"] == pytest.approx(0.05)
    # the same second cell alone with a null cell beside it: Bonferroni's first step (0.025) does not reject it
    heads_at = [[_cell(0.0, 0.05)], [_cell(band + t_mid * 0.05, 0.05)]]
    fam = headlaws.assign_states(heads_at, df=15)
    assert fam["rejected"] == 0 and heads_at[1][0]["laws"]["iid"]["state"] == "undetermined"


def test_all_document_test_calls_the_lead_law_false_on_long_regimes_and_holds_it_on_gamma_gates():
    rng = np.random.default_rng(11)
    Ls = np.array([forget.threshold(e) for e in (1e-2, 1e-3)])
    S, T = 32, 512
    for x, want in ((rng.gamma(2.0, 0.25, (S, T)), "holds"),
                    (verdict_calibration.increments("long_regimes", 1.5, rng, S, T), "false")):
        at = [headlaws.evaluate(x, Ls, rng)["at"]]
        headlaws.assign_states(at, df=S // 2 - 1)
        for k, rec in enumerate(at[0]):
            lw = rec["laws"][headlaws.LEAD]
            assert lw["test_all"] is not None and lw["test"]["sample"] == "all documents"
            assert lw["test_all"]["df"] == min(S, headlaws.TEST_GROUPS) - 1
            # regimes of rates 4x apart: the lead law is off 3-20x; false at 1e-2 (|D| 1.3-3.1, SE 0.34-0.46 over
            # seeds 0-5), never holds
            assert lw["state"] == want or (want == "false" and k > 0 and lw["state"] == "undetermined"), lw["test"]


def test_tail_share_is_one_for_the_law_itself_and_near_zero_for_a_law_with_a_spurious_tail():
    # the continuous quantile q of W + U has P(W + U > q) = 1 - p exactly (a geometric law, P(W >= w) = a^w)
    a = 0.8
    ge = a ** np.arange(1, 400)
    for p in (0.5, 0.9, headlaws.TAIL_P):
        q = headlaws._continuous_quantile(ge, p)
        w0 = math.floor(q)
        assert a ** (w0 + 1) + a ** w0 * (1 - a) * (1 - (q - w0)) == pytest.approx(1 - p, abs=1e-12)
    # windows drawn from that law: the share beyond its 99% quantile is 1% (ratio within 4 SE of 1, inside the band);
    # against a law with a heavier tail (a = 0.9, its 99% quantile beyond nearly every window) it is near 0
    rng = np.random.default_rng(21)
    S, R, G = 32, 256, headlaws.TEST_GROUPS
    W = rng.geometric(1 - a, (S, R)) - 1
    onehot = (np.arange(S)[None, :] % G == np.arange(G)[:, None]).astype(np.float64)
    t = headlaws._tail_test(np.tile(ge, (G + 1, 1)), W, onehot, r0=256)
    assert abs(t["ratio"] - 1) <= 4 * t["se"] and t["band"][0] < t["ratio"] < t["band"][1]
    assert t["se"] >= (1 - 1e-9) * math.sqrt(headlaws.TAIL_P * (1 - headlaws.TAIL_P) / (S * R)) / (1 - headlaws.TAIL_P)
    assert t["share"] == pytest.approx(t["ratio"] * (1 - headlaws.TAIL_P))
    heavy = headlaws._tail_test(np.tile(0.9 ** np.arange(1, 400), (G + 1, 1)), W, onehot, r0=256)
    # its 99% quantile (43.7) beyond r0 = 40: tested at 39 instead (the law's share beyond it 0.015), or not at all
    # where the law's share beyond r0 - 1 exceeds TAIL_MAX_SHARE (r0 = 20: 0.12)
    at39 = headlaws._tail_test(np.tile(0.9 ** np.arange(1, 400), (G + 1, 1)), W, onehot, r0=40)
    assert at39["q"] == 39 and at39["law_share"] == pytest.approx(0.9 ** 39) and at39["ratio"] < 0.05
    assert headlaws._tail_test(np.tile(0.9 ** np.arange(1, 400), (G + 1, 1)), W, onehot, r0=20) is None
    assert heavy["ratio"] < 0.05 and headlaws._p_outside(heavy["ratio"], heavy["se"], G - 1, *heavy["band"]) < 1e-3


def test_tail_test_groups_with_different_thresholds_read_their_own_counts():
    # each group's law its own geometric rate, so the rows' quantile floors differ (some shared, some not): the
    # jackknife ratios are those of counting each row's windows beyond its own threshold directly
    rng = np.random.default_rng(5)
    S, R, G = 24, 128, 8
    W = rng.geometric(0.2, (S, R)) - 1
    onehot = (np.arange(S)[None, :] % G == np.arange(G)[:, None]).astype(np.float64)
    a = 0.8 + 0.004 * rng.integers(0, 4, G + 1)
    surv = a[:, None] ** np.arange(1, 400)[None, :]
    got = headlaws._tail_test(surv, W, onehot, r0=256)
    keep = np.concatenate([np.ones((1, S)), 1.0 - onehot])
    ratio = []
    for r in range(G + 1):
        t = headlaws._continuous_quantile(surv[r], headlaws.TAIL_P)
        w0 = math.floor(t)
        beyond = (W > w0).sum(1) + (W == w0).sum(1) * (1.0 - (t - w0))
        ratio.append(float(keep[r] @ beyond) / (keep[r].sum() * R) / headlaws._law_beyond(surv[r], t))
    floors = {math.floor(headlaws._continuous_quantile(s, headlaws.TAIL_P)) for s in surv}
    assert len(floors) > 1
    assert got["ratio"] == ratio[0]
    floor = math.sqrt(got["law_share"] * (1 - got["law_share"]) / (S * R)) / got["law_share"]
    assert got["se"] == max(float(dependence.jackknife(np.array(ratio[1:]))), floor)


def test_tail_test_calls_the_lead_law_false_on_document_rates_where_the_variance_test_cannot():
    # documents of different rates (logit mean 0, sd 1 between documents; seed 9): the lead law's pooled S_w puts
    # about 1% of W beyond every measured window, and one slow document carries its variance error (|D| 1.5-1.9,
    # SE 1.1: p 0.1-0.2, not rejected); no window lies beyond its 99% quantile, and that rejects
    rng = np.random.default_rng(9)
    Ls = np.array([forget.threshold(e) for e in (1e-2, 1e-3)])
    S, T = 32, 512
    at = [headlaws.evaluate(verdict_calibration.increments("document_rates", 0.0, rng, S, T), Ls, rng)["at"]]
    headlaws.assign_states(at, df=S // 2 - 1)
    for rec in at[0]:
        lw = rec["laws"][headlaws.LEAD]
        t, tail = lw["test"], lw["test_all"]["tail"]
        assert lw["state"] == "false" and "tail" in lw["why"], t
        assert t["p_var"] > t["level"] and 2 * t["p_tail"] <= t["level"] and t["p"] == 2 * t["p_tail"]
        assert tail["ratio"] < tail["band"][0] and tail["p"] == headlaws.TAIL_P
    # iid gamma gates (the law exact): the share beyond the law's 99% quantile within its band, the law holds
    rng = np.random.default_rng(11)
    at = [headlaws.evaluate(rng.gamma(2.0, 0.25, (S, T)), Ls, rng)["at"]]
    headlaws.assign_states(at, df=S // 2 - 1)
    for rec in at[0]:
        lw = rec["laws"][headlaws.LEAD]
        tail = lw["test_all"]["tail"]
        assert tail["band"][0] < tail["ratio"] < tail["band"][1] and lw["test"]["p_tail"] > 0.05
        assert lw["state"] == "holds"


def test_all_document_test_is_the_jackknife_of_d_over_groups_of_documents():
    # D of the iid and marginal laws on all documents, and its SE by brute force: each group of documents dropped,
    # the windows and the law refitted (the marginal law by marginal_moments on the remaining documents)
    rng = np.random.default_rng(12)
    S, T = 20, 256
    x = verdict_calibration.increments("ar1", 1.0, rng, S, T)
    Ls = np.array([forget.threshold(e) for e in (1e-1, 1e-2)])
    at = headlaws.evaluate(x, Ls, rng)["at"]
    G = min(S, headlaws.TEST_GROUPS)
    W, C = predict.window_rows(x, Ls, T // 2)
    assert not C.any()
    for k, L in enumerate(Ls):
        def d_of(keep):
            Wk = W[keep, :, k].astype(np.float64)
            v = Wk.var()
            xs = x[keep]
            return (math.log(v / (xs.var() * L / xs.mean() ** 3)),
                    math.log(v / headlaws.marginal_moments(xs, [L])[1][0]))
        full = d_of(np.arange(S))
        loo = np.array([d_of(np.arange(S)[np.arange(S) % G != g]) for g in range(G)])   # (G, 2)
        se = np.sqrt((G - 1) / G * ((loo - loo.mean(0)) ** 2).sum(0))
        for j, law in enumerate(("iid", "marginal")):
            t = at[k]["laws"][law]["test_all"]
            assert t["df"] == G - 1 and t["D"] == pytest.approx(full[j], abs=1e-9)
            assert t["se"] == pytest.approx(se[j], rel=0.02 if law == "marginal" else 1e-6), law


def test_second_order_se_includes_its_fitted_o1_term():
    # iid gates at logit mean 0 (L/kappa 4.7 and 6.1): the second-order law's C_dep is fitted (kappa3_LR of block sums
    # of 16 documents) and on this sample it is off: the law is 0.13-0.18 below the exact variance (the marginal law
    # of a large sample). Its SE, the jackknife of the whole law, covers that; the dependent law's SE (the one it had
    # before) is 4-6x smaller and would call it false.
    Ls = np.array([forget.threshold(e) for e in (3e-2, 1e-2)])
    exact_var = headlaws.marginal_moments(verdict_calibration.increments("iid", 0.0, np.random.default_rng(99),
                                                                         128, 2048), Ls)[1]
    rng = np.random.default_rng(4)
    at = headlaws.evaluate(verdict_calibration.increments("iid", 0.0, rng, 32, 512), Ls, rng, all_docs=False)["at"]
    for k, rec in enumerate(at):
        so, dep = rec["laws"]["second_order"], rec["laws"]["dependent"]
        err = abs(math.log(so["var"] / exact_var[k]))
        assert err > 0.1
        assert so["var_se"] / so["var"] > err / 2 and dep["var_se"] / dep["var"] < err / 3
    headlaws.assign_states([at], df=15)
    assert all(rec["laws"]["second_order"]["state"] != "false" for rec in at)


def test_expansion_claims_are_stated_from_the_omitted_term_plus_two_se():
    # the same iid gates: finite_n omits Smith's constant (0.083 exactly); its fitted value (kappa3_LR of 16 documents)
    # moves by 2x from sample to sample, so the claim is stated from it + 2 SE and covers the law's exact error (the
    # iid law's Smith's constant, a plug-in of three moments, covers it as fitted)
    Ls = np.array([forget.threshold(e) for e in (1e-1, 3e-2, 1e-2)])
    big = verdict_calibration.increments("iid", 0.0, np.random.default_rng(99), 128, 2048)
    exact_var = headlaws.marginal_moments(big, Ls)[1]
    lead_err = 1 - big.var() * Ls / big.mean() ** 3 / exact_var              # 6-11%: Smith's constant / Var
    assert np.all(lead_err > 0.05)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        at = headlaws.evaluate(verdict_calibration.increments("iid", 0.0, rng, 32, 512), Ls, rng,
                               all_docs=False)["at"]
        for k, rec in enumerate(at):
            assert "+ 2 SE" in rec["laws"]["finite_n"]["why"]
            for law in ("iid", "finite_n"):
                d = rec["laws"][law]
                assert d["claim"] >= lead_err[k], (seed, k, law, d["claim"], lead_err[k])


def test_lead_law_se_is_the_grouped_jackknife_beyond_its_groups(monkeypatch):
    # more fitted documents than LEAD_GROUPS: the lead law's SE is the delete-a-group jackknife (group d % G), by
    # brute force each group's documents dropped and the law refitted; its mean and variance those of every
    # document; up to LEAD_GROUPS documents each its own group (the leave-one-out jackknife)
    rng = np.random.default_rng(5)
    S, T = 24, 256
    x = verdict_calibration.increments("ar1", 1.0, rng, S, T)
    Ls = np.array([forget.threshold(e) for e in (1e-1, 1e-2)])
    loo = headlaws.evaluate(x, Ls, np.random.default_rng(0))["at"]
    G = 5
    monkeypatch.setattr(headlaws, "LEAD_GROUPS", G)
    at = headlaws.evaluate(x, Ls, np.random.default_rng(0))["at"]
    xf = x[0::2]
    Sf = len(xf)
    kappa = float(xf.mean())

    def law(keep):                                    # E[W], Var[W] at each L on the fitted documents `keep`
        s = headlaws.lead_survival(headlaws.BlockSums(xf[keep], T // 2), Ls, np.ones((1, len(keep))), kappa)
        w = [np.arange(1, sk.shape[1] + 1) for sk in s]                   # E W = sum P(W >= w), E W^2 likewise
        e = np.array([sk[0].sum() for sk in s])
        return np.array([(sk[0] * (2 * wk - 1)).sum() for sk, wk in zip(s, w)]) - e * e, e
    v_g, e_g = zip(*[law(np.flatnonzero(np.arange(Sf) % G != g)) for g in range(G)])
    v_g, e_g = np.array(v_g), np.array(e_g)                                          # (G, n)
    for k in range(len(Ls)):
        d, d0 = at[k]["laws"][headlaws.LEAD], loo[k]["laws"][headlaws.LEAD]
        assert d["var"] == pytest.approx(d0["var"], rel=1e-12) and d["mean"] == pytest.approx(d0["mean"], rel=1e-12)
        assert d["var_se"] == pytest.approx(dependence.jackknife(v_g[:, k]), rel=1e-6)
        assert d["mean_se"] == pytest.approx(dependence.jackknife(e_g[:, k]), rel=1e-6)
        assert d["var_se"] != pytest.approx(d0["var_se"], rel=1e-3)                 # not the leave-one-out SE
    assert np.array_equal(dependence.group_weights(Sf, Sf), dependence.loo_weights(Sf))
    assert dependence.group_weights(7, 3).sum(1).tolist() == [4, 5, 5]               # groups {0,3,6} {1,4} {2,5}


def test_second_order_claims_only_where_the_fitted_documents_correlation_length_allows(monkeypatch):
    # the per-head second-order law claims by dependence.second_order_claim on its fitted documents (the length
    # measurable, L/kappa >= 5 (ell + 2 SE)): on heavy-tailed gates its plug-in O(1) term is small beside the
    # leading law (renewal's in_regime) at every L, yet the length with its SE (kappa3_LR of 16 heavy-tailed
    # documents) puts every L below 5 of it, so nothing is claimed; on iid gates the length is a fraction of a step
    # and the law claims at every L
    Ls = np.array([forget.threshold(e) for e in (1e-1, 1e-2, 1e-3, 1e-4)])
    for fam, claims in (("heavy_tails", False), ("iid", True)):
        rng = np.random.default_rng(3)
        x = verdict_calibration.increments(fam, 1.5, rng, 32, 512)
        inp = dependence.second_order_inputs(x[::2])
        at = headlaws.evaluate(x, Ls, rng, all_docs=False)["at"]
        for L, rec in zip(Ls, at):
            d = rec["laws"]["second_order"]
            trace_ok = dependence.second_order_claim(L, inp)[0]
            assert trace_ok is claims, (fam, L)
            assert (d["claim"] is not None) is claims, (fam, L, d["why"])
            if claims:
                assert d["claim"] == headlaws.SECOND_ORDER_CLAIM and "ell + 2 SE" in d["why"]
            else:
                assert "correlation length" in d["why"], d["why"]
    # without the trace's rule the heavy tails' law would claim its 4% at every L (the plug-in alone says in_regime)
    monkeypatch.setattr(dependence, "second_order_claim", lambda L, inp: (True, None, ""))
    rng = np.random.default_rng(3)
    x = verdict_calibration.increments("heavy_tails", 1.5, rng, 32, 512)
    at = headlaws.evaluate(x, Ls, rng, all_docs=False)["at"]
    assert all(rec["laws"]["second_order"]["claim"] == headlaws.SECOND_ORDER_CLAIM for rec in at)


def _lognormal(m, sd, g):
    """scipy's shifted lognormal (frozen) of mean m, sd and skewness g > 0: the shape s solves
    (e^{s^2} + 2) sqrt(e^{s^2} - 1) = g (bracketed)."""
    from scipy import optimize
    s = optimize.brentq(lambda s: (np.exp(s * s) + 2) * np.sqrt(np.expm1(s * s)) - g, 1e-6, 3)
    scale = sd / stats.lognorm(s).std()
    return stats.lognorm(s, loc=m - stats.lognorm(s, scale=scale).mean(), scale=scale)


def test_lognormal_shape_matches_scipy_and_its_three_moments():
    """SHAPE = "lognormal" (a variant of the S_w law, not adopted): its P(S <= L) is scipy's shifted lognormal whose
    mean, variance and third central moment are the given ones, reflected for a negative skewness, the normal law
    at |g| <= 1e-3, conditioned on S >= 0 where the shift is below 0; an unknown SHAPE is refused."""
    m, sd = np.array([10.0, 10.0, 10.0, 2.0]), 2.0
    g = np.array([1.34, -0.7, 1e-4, 2.5])
    L = 9.0
    got = headlaws._lognormal_cdf(L, m, np.full(4, sd * sd), g * sd ** 3)
    right = _lognormal(10.0, sd, 1.34)
    assert np.allclose(right.stats("mvs"), [10.0, 4.0, 1.34], rtol=1e-9)
    assert got[0] == pytest.approx(right.cdf(L), rel=1e-9)
    assert got[1] == pytest.approx(_lognormal(-10.0, sd, 0.7).sf(-L), rel=1e-9)       # -S is right-skewed
    assert got[2] == pytest.approx(stats.norm(10.0, sd).cdf(L), rel=1e-12)
    low = _lognormal(2.0, sd, 2.5)                  # its shift is below 0: conditioned on S >= 0
    assert low.cdf(0) > 1e-3
    assert got[3] == pytest.approx((low.cdf(L) - low.cdf(0)) / low.sf(0), rel=1e-9)
    saved = headlaws.SHAPE
    try:
        headlaws.SHAPE = "weibull"
        bs = headlaws.BlockSums(np.full((4, 64), 0.2), 32)
        with pytest.raises(ValueError, match="SHAPE"):
            headlaws.lead_survival(bs, [2.0], np.ones((1, 4)), 0.2)
    finally:
        headlaws.SHAPE = saved
