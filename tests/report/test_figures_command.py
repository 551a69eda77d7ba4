"""`foxwindow figures`: in a checkout it runs that checkout's figures/make_figures.py (with the checkout's own
package); an installed package run outside any checkout says in one line what is missing and where it is;
a figure asked for without its input is named with the missing file before any work."""
import os
import sys

import pytest

from foxwindow import cli, outputs


def _fake_checkout(root, rc=3):
    (root / "foxwindow").mkdir(parents=True)
    (root / "figures").mkdir()
    (root / "figures" / "make_figures.py").write_text(
        "import os, sys, json\n"
        "json.dump({'argv': sys.argv[1:], 'path': os.environ.get('PYTHONPATH', '')},"
        " open(os.path.join(os.path.dirname(__file__), 'ran.json'), 'w'))\n"
        f"sys.exit({rc})\n")
    return root


def test_an_installed_package_runs_the_checkout_it_is_called_in(tmp_path, monkeypatch):
    repo = _fake_checkout(tmp_path / "checkout")
    (repo / "sub" / "deeper").mkdir(parents=True)
    monkeypatch.setattr(outputs, "REPO", str(tmp_path / "site-packages"))      # as installed: no scripts there
    monkeypatch.chdir(repo / "sub" / "deeper")
    assert cli.find_checkout() == str(repo)
    assert cli.command("figures", ["--fast", "--only", "1"]) == 3                   # the script's own exit code
    import json
    ran = json.loads((repo / "figures" / "ran.json").read_text())
    assert ran["argv"] == ["--fast", "--only", "1"] and ran["path"].split(os.pathsep)[0] == str(repo)


def test_outside_any_checkout_one_line_says_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(outputs, "REPO", str(tmp_path / "site-packages"))
    monkeypatch.chdir(tmp_path)
    assert cli.find_checkout() is None
    assert cli.command("figures", ["--fast"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "figures/make_figures.py" in err and "results/laws/fox_heads.json" in err
    assert "source checkout" in err


@pytest.mark.skipif(not os.path.isfile(os.path.join(outputs.REPO, "figures", "make_figures.py")),
                    reason="not a source checkout")
def test_in_this_checkout_a_figure_without_its_input_is_named(tmp_path, capsys):
    missing = tmp_path / "kernel_bench.json"
    assert cli.command("figures", ["--only", "7", "--bench-json", str(missing), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bench-json" in err and str(missing) in err
    assert not list(tmp_path.glob("*.png"))
    sys.modules.pop("make_figures", None)


@pytest.mark.skipif(not os.path.isfile(os.path.join(outputs.REPO, "figures", "make_figures.py")),
                    reason="not a source checkout")
def test_figure_10_is_the_report_overview(tmp_path):
    """make_figures' figure 10 is the report's overview, drawn from a schema-1 or an earlier per-head JSON."""
    sys.path.insert(0, os.path.join(outputs.REPO, "figures"))
    try:
        import make_figures
        golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "heads_schema1.json")
        (res,) = make_figures.main(["--only", "10", "--overview-json", golden, "--out", str(tmp_path)])
        assert res["status"] == "written" and "4 heads" in res["summary"]
        assert (tmp_path / "fig10_overview.png").stat().st_size > 20_000
        assert (tmp_path / "fig10_overview.pdf").read_bytes()[:5] == b"%PDF-"
    finally:
        sys.path.remove(os.path.join(outputs.REPO, "figures"))
