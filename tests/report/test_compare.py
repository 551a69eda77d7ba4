"""`foxwindow compare A.json B.json`: per-head differences of the windows with the SE of the difference from
the two SEs, the states in each, a table of at most 120 columns, a picture; files of different schemas or
with no head in common refused in one line."""
import copy
import json
import math
import os

import pytest

from foxwindow import cli, outputs
from foxwindow.report import compare

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "heads_schema1.json")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A = the golden result; B = its windows 5% longer, one state changed, one head dropped."""
    d = tmp_path_factory.mktemp("cmp")
    with open(GOLDEN) as fh:
        a = json.load(fh)
    b = copy.deepcopy(a)
    for h in b["heads"]:
        for r in h["at"]:
            r["measured"]["mean"] *= 1.05
    b["heads"][1]["at"][2]["laws"]["edgeworth"]["state"] = "false"
    b["heads"][2]["at"][2]["laws"]["iid"]["state"] = "false"
    del b["heads"][3]
    (d / "a.json").write_text(json.dumps(a))
    (d / "b.json").write_text(json.dumps(b))
    return d, a, b


def test_differences_and_their_errors(pair):
    _, a, b = pair
    c = compare.compare(a, b, ("a", "b"))
    assert [r["label"] for r in c["heads"]] == ["0.0", "0.1", "1.0"] and c["only_in"] == [["1.1"], []]
    r = c["heads"][2]["at"][2]
    ma, mb = (x["heads"][2]["at"][2]["measured"] for x in (a, b))
    assert r["eps"] == 1e-3 and r["d_mean"] == pytest.approx(mb["mean"] - ma["mean"])
    assert r["d_mean_se"] == pytest.approx(math.hypot(ma["mean_se"], mb["mean_se"]))
    assert r["z_mean"] == pytest.approx(r["d_mean"] / r["d_mean_se"]) and r["d_var"] == 0
    assert c["heads"][2]["states"]["iid"] == ["holds", "false"] and c["heads"][2]["changed"] == ["iid"]
    # a change at one eps that the head's overall state hides (false elsewhere already) is still named
    assert c["heads"][1]["states"]["edgeworth"] == ["false", "false"]
    assert c["heads"][1]["moved"] == {"edgeworth": [[1e-3, "holds", "false"]]}
    assert c["heads"][0]["changed"] == []


def test_command_table_fits_120_columns_and_writes_three_files(pair, capsys):
    d, _, _ = pair
    assert cli.main(["compare", str(d / "a.json"), str(d / "b.json"), "--out", str(d / "out")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[-1].startswith("wrote compare.txt") and max(map(len, lines[:-1])) <= 120
    assert "iid holds -> false at 0.001" in out and "edgeworth holds -> false at 0.001" in out
    assert "only in a.json: 1 heads" in out
    for f in compare.OUT_FILES:
        assert (d / "out" / f).stat().st_size > 500
    assert (d / "out" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((d / "out" / "compare.json").read_text())["kind"] == "heads-comparison"
    # again without --force: refused, one line
    assert cli.main(["compare", str(d / "a.json"), str(d / "b.json"), "--out", str(d / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_refused_in_one_line(pair, tmp_path, capsys):
    d, a, _ = pair
    legacy = os.path.join(outputs.REPO, "figures", "heads.json")
    other = copy.deepcopy(a)
    for h in other["heads"]:
        h["layer"], h["label"] = f"7{h['layer']}", f"7{h['layer']}.{h['head']}"   # no layer of a's
    (tmp_path / "other.json").write_text(json.dumps(other))
    (tmp_path / "bin.json").write_bytes(b"PK\x03\x04\xb3\xff")
    (tmp_path / "cut.json").write_text('{"a": 1')
    (tmp_path / "arr.json").write_text("[1, 2]")
    (tmp_path / "noheads.json").write_text(json.dumps({k: v for k, v in a.items() if k != "heads"}))
    for b, words in ((legacy, "compare results of one schema"), (str(tmp_path / "other.json"), "no head in common"),
                     (str(tmp_path / "none.json"), "not found"),
                     (str(tmp_path / "bin.json"), "bin.json: not a JSON file"),
                     (str(tmp_path / "cut.json"), "cut.json: not a JSON file (Expecting"),
                     (str(tmp_path / "arr.json"), "arr.json: not a per-head result (a JSON list"),
                     (str(tmp_path / "noheads.json"), "noheads.json: not a schema-1 per-head result: field heads"),
                     (str(d / "a.json"), "are the same file"),
                     (str(d / ".." / d.name / "a.json"), "are the same file")):
        assert cli.main(["compare", str(d / "a.json"), b, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    for b in ("bin.json", "cut.json"):                     # the report says the same, in one line
        assert cli.main(["report", str(tmp_path / b), "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{b}: not a JSON file (" in err, err
    assert not (tmp_path / "o").exists() or not os.listdir(tmp_path / "o")


def test_legacy_files_compare_with_each_other(tmp_path, capsys):
    """Two results of the earlier shape (the shipped model's committed JSON, and it again with a shorter
    window): compared, the table within 120 columns."""
    legacy = os.path.join(outputs.REPO, "figures", "heads.json")
    with open(legacy) as fh:
        d = json.load(fh)
    d["heads"] = d["heads"][:4]
    (tmp_path / "x.json").write_text(json.dumps(d))
    d["heads"][0]["mean_W"] = [m * 0.9 for m in d["heads"][0]["mean_W"]]
    (tmp_path / "y.json").write_text(json.dumps(d))
    assert cli.main(["compare", str(tmp_path / "x.json"), str(tmp_path / "y.json"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines()[:-1])) <= 120 and "0.0" in out


def test_a_censored_mean_gives_no_difference(pair):
    _, a, b = pair
    b = copy.deepcopy(b)
    b["heads"][0]["at"][3]["measured"]["mean_is_bound"] = True
    r = compare.compare(a, b)["heads"][0]["at"][3]
    assert r["bound"] == [False, True] and r["d_mean"] is None and r["z_mean"] is None
    assert any("bounds only" in line for line in compare.table(compare.compare(a, b)))


def test_crafted_results_are_refused_naming_the_field(tmp_path):
    """A head listed twice, a bool or negative head index, a NaN or negative kappa, JSON nested past the parser
    or with a number of 5001 digits: ValueError naming what is wrong, before anything is drawn or compared."""
    from foxwindow.report import schema
    with open(GOLDEN) as fh:
        a = json.load(fh)

    def bad(change):
        d = copy.deepcopy(a)
        change(d)
        return d
    cases = [(bad(lambda d: d["heads"].__setitem__(1, copy.deepcopy(d["heads"][0]))), "is listed twice"),
             (bad(lambda d: d["heads"][0].__setitem__("head", True)), r"heads\[0\].head: expected an integer >= 0"),
             (bad(lambda d: d["heads"][0].__setitem__("head", -3)), r"heads\[0\].head: expected an integer >= 0"),
             (bad(lambda d: d["heads"][0].__setitem__("kappa", float("nan"))), "expected a finite number or null"),
             (bad(lambda d: d["heads"][0].__setitem__("kappa", -1.0)), "kappa is the mean of -log g")]
    for d, msg in cases:
        with pytest.raises(ValueError, match=msg):
            schema.read(d)
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (tmp_path / "big.json").write_text('{"schema_version": ' + "1" * 5001 + "}")
    for name, msg in (("deep.json", "nested too deeply"), ("big.json", "more than 4300 digits")):
        with pytest.raises(ValueError, match=msg):
            schema.read(str(tmp_path / name))
