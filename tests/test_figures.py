"""Smoke tests for figures/make_figures.py: figures 1-5 in --fast mode, 6-7 refused without their JSON
and drawn from small synthetic JSON files."""
import json
import os
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "figures"))
import make_figures  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAMES = {1: "fig1_decay", 2: "fig2_window_pmf", 3: "fig3_moments_vs_L", 4: "fig4_alibi_limit",
         5: "fig5_dependent", 6: "fig6_heads", 7: "fig7_kernels"}


def _check_written(out, n):
    png, pdf = (out / f"{NAMES[n]}.{ext}" for ext in ("png", "pdf"))
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert png.stat().st_size > 10_000 and pdf.stat().st_size > 10_000


def _run(out, *extra):
    return {r["figure"]: r for r in make_figures.main(["--fast", "--out", str(out), *extra])}


def test_figures_1_to_5_fast(tmp_path):
    res = _run(tmp_path, "--only", "1", "2", "3", "4", "5", "--trials", "2000", "--json", str(tmp_path / "s.json"))
    for n in range(1, 6):
        assert res[n]["status"] == "written", res[n]
        _check_written(tmp_path, n)
    assert json.loads((tmp_path / "s.json").read_text())["trials"] == 2000


def test_figures_6_7_missing_json(tmp_path, capsys):
    """Asked for (--only) without their input: an error before any work. In the default run (all figures)
    they are left out, said before and after the work and listed as not made."""
    with pytest.raises(make_figures.outputs.UsageError, match="--heads-json"):
        _run(tmp_path, "--only", "6", "7", "--heads-json", str(tmp_path / "none.json"))
    with pytest.raises(make_figures.outputs.UsageError, match="--bench-json"):
        _run(tmp_path, "--only", "7", "--bench-json", str(tmp_path / "none2.json"))
    assert not list(tmp_path.glob("*.png"))
    ins = SimpleNamespace(heads_json=str(tmp_path / "none.json"), overview_json=str(tmp_path / "none4.json"),
                          bench_json=str(tmp_path / "none2.json"),
                          prune_json=str(tmp_path / "none3.json"), given=set())
    only, left = make_figures.check_inputs(ins, [1, 6, 7, 8], asked=False)
    assert only == [1] and sorted(left) == [6, 7, 8] and "not found" in left[7]


def _synthetic_heads():
    # a made-up 2 x 3 grid, only to exercise the plotting code
    heads = []
    for layer in range(2):
        for head in range(3):
            k, s2, tau = 0.05 * (head + 1), 0.01 * (layer + 1), 1.0 + head
            eps = [1e-2, 1e-3, 1e-4]
            L = [4.6, 6.9, 9.2]
            slope = s2 * tau / k ** 3 * (0.9 + 0.1 * layer)
            heads.append(dict(layer=layer, head=head, kappa=k, sigma2=s2, tau=tau,
                              verdict="consistent" if head < 2 else "falsified", eps_list=eps, L_list=L,
                              var_W=[slope * x for x in L], se_var_W=[0.1] * 3,
                              mean_W=[x / k for x in L], slope=slope, slope_ci=[0.8 * slope, 1.2 * slope],
                              pred_slope_iid=s2 / k ** 3, pred_slope_lr=s2 * tau / k ** 3,
                              decay_window_mean=6.9 / k, mass_window_mean=4.0 / k))
    return {"info": {"model": "synthetic", "n_seq": 4, "seq_len": 64, "seed": 0}, "heads": heads}


def _synthetic_bench():
    rows = [dict(impl=name, T=T, fwd_tflops=f * T ** 0.1, fwdbwd_tflops=0.8 * f * T ** 0.1, ours=(name == "ours"))
            for name, f in (("ours", 150.0), ("official FoX Triton", 140.0)) for T in (2048, 8192, 32768)]
    return {"gpu": "Synthetic GPU", "results": rows}


def test_figures_6_7_from_synthetic_json(tmp_path):
    hj, bj = tmp_path / "heads.json", tmp_path / "bench.json"
    hj.write_text(json.dumps(_synthetic_heads()))
    bj.write_text(json.dumps(_synthetic_bench()))
    res = _run(tmp_path, "--only", "6", "7", "--heads-json", str(hj), "--bench-json", str(bj))
    for n in (6, 7):
        assert res[n]["status"] == "written", res[n]
        _check_written(tmp_path, n)
    assert "Synthetic GPU" in res[7]["summary"]


def test_bad_trials_rejected():
    with pytest.raises(SystemExit):
        make_figures.main(["--trials", "1", "--only", "1"])


def test_figure_11_law_errors_from_the_golden_per_head_json(tmp_path):
    """Figure 11 (each law's Var[W] and E[W] over the measured ones, out of sample) from a schema-1 per-head JSON:
    its cells are exactly the (head, eps) records at eps 1e-4 ... 1e-2 with a measured Var[W]; without the LSTM's
    JSON the default run leaves it out, asked for it is an error."""
    import fig11_law_errors
    from foxwindow.report import schema
    golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "heads_small.json")
    doc = json.load(open(golden))
    data = fig11_law_errors.cells(schema.read(golden))
    want = [(rec, h) for h in doc["heads"] for rec in h["at"]
            if 1e-4 * 0.999 <= rec["eps"] <= 1e-2 * 1.001 and rec["measured"]["var"]]
    lead = doc["lead_law"]
    assert want and len(data[lead][0]) == sum(rec["laws"][lead]["var"] is not None for rec, _ in want)
    rec = next(r for r, _ in want if r["laws"][lead]["var"] is not None)
    assert data[lead][0][0] == rec["laws"][lead]["var"] / rec["measured"]["var"]
    res = {r["figure"]: r for r in make_figures.main(["--only", "6", "11", "--overview-json", golden, "--lstm-json",
                                                      golden, "--heads-json", golden, "--out", str(tmp_path)])}
    assert res[11]["status"] == "written" and lead in res[11]["summary"]
    n_att = sum(1 for h in doc["heads"] for rec in h["at"] if 1e-4 * 0.999 <= rec["eps"] <= 1e-2 * 1.001
                and lead in rec["laws"])          # figure 6 counts the lead law's states over these cells
    told = res[6]["summary"].split(": ", 1)[1]
    assert res[6]["status"] == "written" and sum(int(x.split()[-1]) for x in told.split(", ")) == n_att
    png = tmp_path / "fig11_law_errors.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20_000
    with pytest.raises(make_figures.outputs.UsageError, match="--lstm-json"):
        make_figures.main(["--only", "11", "--lstm-json", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")])
    ins = SimpleNamespace(heads_json=golden, overview_json=golden, lstm_json=str(tmp_path / "none.json"),
                          bench_json=golden, prune_json=golden, given=set())
    only, left = make_figures.check_inputs(ins, [10, 11], asked=False)
    assert only == [10] and list(left) == [11]
