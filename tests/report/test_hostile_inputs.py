"""A careless or hostile user of `foxwindow report` / `compare`, `figures/make_figures.py`, `dependent_errors.py` and
`python -m foxwindow.heads.calibration`: valid JSON with the wrong thing deep inside, flags out of range, flags the
mode ignores, an output that is an input. Each: exit 2, one stderr line naming the field or flag, no traceback,
nothing written, the input unchanged."""
import copy
import json
import math
import os
import sys

import pytest

from conftest import run_cli
from foxwindow import cli, outputs
from foxwindow.heads import calibration
from foxwindow.laws import dependent_errors
from foxwindow.report import command, compare, schema

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "heads_schema1.json")
sys.path.insert(0, os.path.join(outputs.REPO, "figures"))
import make_figures  # noqa: E402


def _golden():
    with open(GOLDEN) as fh:
        return json.load(fh)


def _one_line(capsys, main, argv, *words):
    rc, err = run_cli(capsys, main, argv)
    lines = [li for li in err.splitlines() if li.strip()]
    assert rc == 2 and len(lines) == 1, (argv, rc, err)
    assert "Traceback" not in err and "KeyError" not in err and "invalid literal" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _set(path, value):
    """A change to the golden result: the field at `path` (keys and indices) set to value (a callable: applied)."""
    def change(d):
        *head, last = path
        for k in head:
            d = d[k]
        d[last] = value(d[last]) if callable(value) else value
    return change


CRAFTED = [  # (name, change of the golden dict or raw JSON text, words of the refusal)
    ("str-mean", _set(("heads", 0, "at", 0, "measured", "mean"), "2.4"), ["measured.mean", "expected a number"]),
    ("huge-int", _set(("heads", 0, "kappa"), 10 ** 400), ["heads[0].kappa", "401 digits"]),
    ("huge-float", _set(("heads", 0, "at", 0, "measured", "mean"), 1e308), ["measured.mean", "beyond"]),
    ("nan-in-list", "NaN-tau_n", ["dependence.tau_n[0]", "finite"]),
    ("eps-0", _set(("heads", 0, "at", 0, "eps"), 0), ["at[0].eps", "(0, 1)"]),
    ("eps-2", _set(("heads", 0, "at", 0, "eps"), 2.0), ["at[0].eps", "(0, 1)"]),
    ("eps-twice", lambda d: d["heads"][0]["at"].__setitem__(1, copy.deepcopy(d["heads"][0]["at"][0])),
     ["heads[0].at[1]", "listed twice"]),
    ("L-not-eps", _set(("heads", 0, "at", 0, "L"), 9.0), ["at[0].L", "ln(1/eps)"]),
    ("ci-number", _set(("heads", 0, "at", 0, "laws", "iid", "var_ratio_ci"), 5), ["var_ratio_ci", "list"]),
    ("ci-string", _set(("heads", 0, "at", 0, "laws", "iid", "var_ratio_ci"), "ab"), ["var_ratio_ci", "list"]),
    ("state-list", _set(("heads", 0, "at", 0, "laws", "iid", "state"), []), ["laws.iid.state", "not one of"]),
    ("bound-string", _set(("heads", 0, "at", 0, "measured", "mean_is_bound"), "no"),
     ["mean_is_bound", "true or false"]),
    ("quantiles-list", _set(("heads", 0, "at", 0, "measured", "quantiles"), [1, 2]), ["measured.quantiles"]),
    ("false-string", _set(("heads", 0, "summary", "false"), "iid"), ["summary.false", "list"]),
    ("censored-5", _set(("heads", 0, "at", 0, "measured", "censored_share"), 5.0), ["censored_share", "[0, 1]"]),
    ("var-negative", _set(("heads", 0, "at", 0, "measured", "var"), -3.0), ["measured.var", "< 0"]),
    ("p-negative", _set(("heads", 0, "pmf", "measured", "p"), [-1.0, 2.0]), ["pmf.measured.p[0]", "< 0"]),
    ("offset-negative", _set(("heads", 0, "pmf", "measured", "offset"), -5), ["pmf.measured.offset", ">= 0"]),
    ("dependence-lengths", _set(("heads", 0, "dependence", "tau_n"), [1.0]), ["dependence.tau_n", "one a lag"]),
    ("levelled-string", _set(("heads", 0, "dependence", "levelled_at"), "x"), ["levelled_at", "integer"]),
    ("layer-bool", _set(("heads", 0, "layer"), True), ["heads[0].layer", "layer name"]),
    ("layer-float", _set(("heads", 0, "layer"), 0.5), ["heads[0].layer", "layer name"]),
    ("label-twice", lambda d: d["heads"][1].__setitem__("label", d["heads"][0]["label"]),
     ["heads[1].label", "listed twice"]),
    ("label-list", _set(("heads", 1, "label"), [1]), ["heads[1].label", "string"]),
    ("lead-list", _set(("lead_law",), ["x"]), ["lead_law", "string"]),
    ("lead-unknown", _set(("lead_law",), "nosuch"), ["lead_law", "not one of the result's laws"]),
    ("alpha-2", _set(("alpha",), 2.0), ["alpha", "(0, 1)"]),
    ("n_seq-string", _set(("source", "n_seq"), "many"), ["source.n_seq", "integer"]),
    ("unit-escape", _set(("source", "unit"), "x\x1b[2J"), ["source.unit", "\\x1b", "head, unit, channel"]),
    ("note-object", _set(("note",), {"a": 1}), ["note", "string"]),
    ("note-100MB-like", _set(("note",), "x" * (schema.MAX_TEXT + 1)), ["note", "at most 65536"]),
    ("bad-utf8", b'{"schema_version": 1, "kind": "\xe9"}', ["not UTF-8 text: byte"]),
]


@pytest.mark.parametrize("name, change, words", CRAFTED, ids=[c[0] for c in CRAFTED])
def test_crafted_results_are_refused_in_one_line(name, change, words, tmp_path, capsys):
    if isinstance(change, bytes):
        raw = change
    elif change == "NaN-tau_n":
        raw = json.dumps(_golden()).replace('"tau_n": [', '"tau_n": [NaN, ', 1).encode()
    else:
        d = _golden()
        change(d)
        raw = json.dumps(d).encode()
    src = tmp_path / "r.json"
    src.write_bytes(raw)
    line = _one_line(capsys, cli.main, ["report", str(src), "--out", str(tmp_path / "rep"), "--jobs", "1"],
                     "r.json", *words)
    assert "\x1b" not in line
    assert not (tmp_path / "rep").exists() and src.read_bytes() == raw
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_golden()))
    _one_line(capsys, cli.main, ["compare", str(good), str(src), "--out", str(tmp_path / "cmp")], *words)
    assert not (tmp_path / "cmp").exists() and src.read_bytes() == raw


def test_valid_results_read_as_before():
    """The stricter reader changes nothing in a valid result: every field the report draws is as it was."""
    res = schema.read(GOLDEN)
    assert len(res.heads) == 4 and res.lead_law == "edgeworth"
    assert [a.eps for a in res.heads[0].at] == sorted((a.eps for a in res.heads[0].at), reverse=True)
    assert res.heads[0].kappa == 0.9 and math.isclose(res.heads[0].at[0].L, math.log(1 / res.heads[0].at[0].eps))
    for path in ("figures/heads.json", "results/laws/fox_heads.json", "results/laws/lstm_heads.json"):
        assert schema.read(os.path.join(outputs.REPO, path)).heads


def test_report_and_compare_flags(tmp_path, capsys):
    good = tmp_path / "a.json"
    good.write_text(json.dumps(_golden()))
    other = tmp_path / "b.json"
    other.write_text(json.dumps(_golden()))
    _one_line(capsys, cli.main, ["report", str(good), "--jobs", str(10 ** 6), "--out", str(tmp_path / "r")],
              "--jobs 1000000", "CPUs")
    _one_line(capsys, cli.main, ["report", "", "--out", str(tmp_path / "r")], "RESULT", "empty path")
    _one_line(capsys, cli.main, ["compare", str(good), str(other), "--eps", "0.5", "--out", str(tmp_path / "c")],
              "--eps 0.5", "one of 0.1, 0.01, 0.001, 0.0001")
    assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()
    assert command.check_jobs(1) == 1


def test_make_figures_refuses_before_any_figure(tmp_path, capsys):
    out = tmp_path / "figs"
    heads = tmp_path / "heads.json"
    heads.write_text(json.dumps(_golden()))
    before = heads.read_bytes()
    nan = tmp_path / "nan.json"
    nan.write_text('{"heads": [{"layer": 0, "head": 0, "kappa": NaN}]}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    bad = _golden()
    bad["heads"][0]["at"][0]["eps"] = 2.0
    eps2 = tmp_path / "eps2.json"
    eps2.write_text(json.dumps(bad))
    prune = tmp_path / "prune.json"
    prune.write_text('{"heads": [{"tols": [{"log_tol": -3, "pred_frac_blocks": NaN, "meas_frac_blocks": 0.1}]}], '
                     '"per_tol": [{}]}')
    m = make_figures.main
    for argv, words in (
            (["--only", "1", "--trials", "0"], ["--trials must be >= 2", "got 0"]),
            (["--only", "1", "--seed", "-1"], ["--seed", ">= 0"]),
            (["--only", "1", "1"], ["--only", "figure 1 is listed twice"]),
            (["--only", "1", "--heads-json", str(heads)], ["--heads-json", "figure 6 only", "ignored"]),
            (["--only", "1", "--heads", str(heads)], ["--heads-json", "figure 6 only", "ignored"]),   # abbreviated
            (["--only", "1", "--heads-json=" + str(heads)], ["--heads-json", "figure 6 only", "ignored"]),
            (["--only", "6", "--heads", str(tmp_path / "none.json")], ["figure 6", "needs its input", "not found"]),
            (["--only", "6", "--heads-json", str(nan)], ["--heads-json", "heads[0]", "finite number"]),
            (["--only", "6", "--heads-json", str(deep)], ["--heads-json", "nested too deeply"]),
            (["--heads-json", str(eps2)], ["--heads-json", "heads[0].at[0].eps", "(0, 1)"]),
            (["--only", "8", "--prune-json", str(prune)], ["--prune-json", "pred_frac_blocks", "finite"]),
            (["--only", "6", "--heads-json", str(heads), "--json", str(heads), "--force"],
             ["--json", "input of this command"])):
        _one_line(capsys, m, ["--fast", "--out", str(out), *argv], *words)
        assert not out.exists() and heads.read_bytes() == before


def test_dependent_errors_markdown_and_lists(tmp_path, capsys):
    m = dependent_errors.main
    part = tmp_path / "part.json"
    part.write_text('{"rows": [{"phi": 0.5}]}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    saved = os.path.join(outputs.REPO, "results", "dependent", "errors.json")
    for argv, words in ((["--markdown", str(part)], ["rows[0].tau", "not a results JSON"]),
                        (["--markdown", str(tmp_path / "none.json")], ["--markdown", "not found"]),
                        (["--markdown", str(deep)], ["--markdown", "nested too deeply"]),
                        (["--markdown", saved, "--json", str(tmp_path / "x.json")], ["--json would be ignored"]),
                        (["--markdown", saved, "--trials", "500"], ["--trials would be ignored"]),
                        (["--phi", "0.5", "0.5"], ["--phi", "listed twice"]),
                        (["--ratios", "2", "2"], ["--ratios", "listed twice"])):
        capsys.readouterr()
        _one_line(capsys, m, argv, *words)
        assert not (tmp_path / "x.json").exists()
    rc, _ = run_cli(capsys, m, ["--markdown", saved])
    assert rc == 0


def test_dependent_errors_markdown_prints_nothing_when_refused(tmp_path, capsys):
    doc = json.load(open(os.path.join(outputs.REPO, "results", "dependent", "errors.json")))
    doc["rows"][-1].pop("mc_var")
    p = tmp_path / "cut.json"
    p.write_text(json.dumps(doc))
    capsys.readouterr()
    try:
        outputs.cli(dependent_errors.main, ["--markdown", str(p)])
    except SystemExit as e:
        assert e.code == 2
    got = capsys.readouterr()
    assert got.out == "" and f"rows[{len(doc['rows']) - 1}].mc_var" in got.err


def test_calibration_flags(tmp_path, capsys):
    m = calibration.main
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    pop = os.path.join(outputs.REPO, "results", "verdict", "laws_calibration.json")
    for argv, words in ((["--seed", "-1"], ["--seed", ">= 0"]),
                        (["--families", "iid", "iid"], ["--families", "'iid' is listed twice"]),
                        (["--population", str(deep)], ["--population", "nested too deeply"]),
                        (["--population", pop, "--reps", "5", "--out", str(tmp_path / "o")],
                         ["--population", "--reps, --out would be ignored"]),
                        (["--laws", "--lead-variants", "--reps", "3"], ["--lead-variants", "--reps would be ignored"])):
        _one_line(capsys, m, argv, *words)
    assert not (tmp_path / "o").exists()
    assert compare.WIDTH == 120


def test_a_head_without_records_is_read_and_the_report_says_why_it_draws_none(tmp_path, capsys):
    """A run of too few documents leaves a head's `at` empty: a valid result (compare and the plots read it), which
    the report refuses in one line saying why, instead of a TypeError in its drawing processes."""
    d = _golden()
    d["heads"][0]["at"] = []
    r = tmp_path / "r.json"
    r.write_text(json.dumps(d))
    before = r.read_bytes()
    assert outputs.cli(command.main, [str(r), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "r.json: 1 of the result's" in err and "no per-eps records to draw" in err
    assert not (tmp_path / "out").exists() and r.read_bytes() == before


def test_a_result_with_a_byte_order_mark_reads_as_without(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(_golden()), encoding="utf-8")
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert schema.as_dict(str(bom)) == schema.as_dict(str(plain))
    assert len(schema.read(str(bom)).heads) == len(schema.read(str(plain)).heads)
