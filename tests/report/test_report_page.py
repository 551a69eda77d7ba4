"""The report as a reader meets it: a golden schema-1 result (tests/report/data/heads_schema1.json, written by
make_golden.py) turned into pages and pictures, every picture a non-empty PNG referenced by a page and every
page link resolving, nothing fetched from outside, every string of the result escaped, the write guard's
rules; the page rendered by headless Chromium (skipped, saying why, where none is installed); the figures
from Python; `forget.py --traces ... --report DIR` end to end on tiny traces; a 384-head layout."""
import copy
import json
import os
import re
import shutil
import struct

import numpy as np
import pytest

from foxwindow import cli, outputs
from foxwindow.report import command, pages, plots, schema, screenshot
from foxwindow.report import pages as pages_mod

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "heads_schema1.json")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory, golden):
    out = tmp_path_factory.mktemp("report") / "rep"
    index, _ = command.write_report(golden, str(out), jobs=1)
    assert index == str(out / "index.html")
    return out


@pytest.fixture
def stub_pictures(monkeypatch):
    """Pages without drawing (the pictures are checked on the report_dir fixture): a stub PNG each."""
    monkeypatch.setattr(command, "_render", lambda job: PNG_MAGIC + b"\0" * 32)


def _png_size(path):
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == PNG_MAGIC, path
    return struct.unpack(">II", head[16:24])


def _refs(page):
    text = page.read_text(encoding="utf-8")
    return re.findall(r'<img[^>]*\ssrc="([^"]+)"', text), re.findall(r'<a\s[^>]*href="([^"]+)"', text), text


def test_every_picture_is_a_png_on_a_page_and_every_link_resolves(report_dir):
    pages = sorted(report_dir.glob("*.html"))
    assert [p.name for p in pages] == ["index.html", "layer-00.html", "layer-01.html"]
    shown = set()
    for page in pages:
        imgs, links, text = _refs(page)
        shown |= set(imgs)
        for src in imgs:
            assert (report_dir / src).is_file(), (page.name, src)
        for href in links:
            target, _, anchor = href.partition("#")
            target_page = report_dir / (target or page.name)
            assert target_page.is_file(), (page.name, href)
            if anchor:
                assert f'id="{anchor}"' in target_page.read_text(encoding="utf-8"), (page.name, href)
        # self-contained: no script, no stylesheet or font fetched, no address outside the folder
        assert "<script" not in text and "<link" not in text and "@import" not in text and "url(" not in text
        assert not re.search(r'(src|href)="(https?:|//|file:|/)', text)
    pngs = {p.name for p in report_dir.glob("*.png")}
    assert pngs == shown and len(pngs) == 1 + 2 + 2 + 4      # overview, two per layer, one per head
    for p in pngs:
        w, h = _png_size(report_dir / p)
        assert w > 500 and h > 200 and (report_dir / p).stat().st_size > 10_000


def test_every_string_of_the_result_is_escaped(report_dir, tmp_path, golden, stub_pictures):
    index = (report_dir / "index.html").read_text(encoding="utf-8")
    assert "&lt;b&gt;tag&lt;/b&gt;" in index and "<b>tag</b>" not in index
    assert "Edgeworth &lt;lead&gt;" in index
    # a hostile label and reason: escaped in text and in attributes, never markup
    d = copy.deepcopy(golden)
    d["heads"][0]["summary"]["text"] = '<img src=x onerror="alert(1)">'
    d["heads"][0]["at"][1]["laws"]["iid"]["why"] = '" onmouseover="alert(2)'
    d["source"]["path"] = "</dd><script>alert(3)</script>"
    command.write_report(d, str(tmp_path / "bad"), jobs=1)
    for page in (tmp_path / "bad").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text and 'onerror="' not in text and 'onmouseover="' not in text
        assert "<img src=x" not in text


def test_units_are_named_as_the_source_says(golden, tmp_path, stub_pictures):
    d = copy.deepcopy(golden)
    d["source"]["unit"], d["source"]["family"] = "unit", "lstm"
    command.write_report(d, str(tmp_path / "lstm"), jobs=1)
    text = (tmp_path / "lstm" / "index.html").read_text(encoding="utf-8")
    assert "Every unit" in text and "Every head" not in text


def test_the_write_guard(golden, tmp_path, capsys, stub_pictures):
    out = tmp_path / "r"
    assert cli.main(["report", GOLDEN, "--out", str(out), "--jobs", "1"]) == 0
    assert "open" in capsys.readouterr().out
    before = (out / "index.html").stat().st_mtime_ns
    # a second run into the same folder: refused in one line, nothing replaced
    assert cli.main(["report", GOLDEN, "--out", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err and (out / "index.html").stat().st_mtime_ns == before
    assert cli.main(["report", GOLDEN, "--out", str(out), "--jobs", "1", "--force"]) == 0
    assert not list(out.glob(".*lock")) and not list(out.glob("*.tmp*"))
    # a file name for --out, a missing result, a JSON of another kind: one line each
    for argv, what in ((["--out", str(tmp_path / "x.html")], "folder"), ([], None)):
        assert cli.main(["report", GOLDEN if what else str(tmp_path / "none.json"), *argv]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "other.json").write_text('{"schema_version": 2, "kind": "heads", "heads": []}')
    assert cli.main(["report", str(tmp_path / "other.json"), "--out", str(tmp_path / "o")]) == 2
    assert "schema 1" in capsys.readouterr().err


def test_an_eps_in_no_heads_scan_is_refused_before_any_output(golden, tmp_path, capsys):
    """A report or overview at an eps no head was analysed at would draw empty maps: refused in one line, naming the
    eps there are, before the output folder is made."""
    scan = sorted({a["eps"] for h in golden["heads"] for a in h["at"]}, reverse=True)
    assert 0.3 not in scan
    assert cli.main(["report", GOLDEN, "--eps", "0.3", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--eps 0.3 is in no head's scan" in err and format(scan[0], "g") in err, err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="eps 0.3 is in no head's scan"):
        plots.plot_overview(golden, eps=0.3)


def test_control_characters_of_names_are_escaped_in_the_pages(golden, tmp_path, stub_pictures):
    """A layer name with ESC and a newline (read from a trace or JSON) is shown as \\x1b in the HTML and in the
    pictures' text, never raw."""
    d = copy.deepcopy(golden)
    for h in d["heads"]:
        h["layer"] = f"lay\x1b[31mer{h['layer']}"
    index, _ = command.write_report(d, str(tmp_path / "r"), jobs=1)
    text = "".join(open(os.path.join(tmp_path / "r", f), encoding="utf-8").read() for f in os.listdir(tmp_path / "r")
                   if f.endswith(".html"))
    assert "\x1b" not in text and "lay\\x1b[31mer" in text
    assert plots.layer_ticks(["a\nb"]) == ["a\\nb"]


def test_layer_ticks_stay_short_and_distinct(golden):
    """Hook names as layer names ('blocks.0.attn.hook_log_fgate') tick as 'blocks.0': the overview of one such
    layer lays out (matplotlib warned that its panels collapsed when the ticks were the whole names)."""
    assert plots.layer_ticks(["blocks.0.attn.hook_log_fgate", "blocks.11.attn.hook_log_fgate"]) == ["blocks.0",
                                                                                                   "blocks.11"]
    assert plots.layer_ticks(["blocks.0", "1"]) == ["blocks.0", "1"]
    assert plots.layer_ticks(["model.layers.12.self_attn"]) == ["…layers.12"]
    assert plots.layer_ticks(["a_very_long_layer_name_x", "b_very_long_layer_name_x"]) == [
        "a_very_long_layer_name_x", "b_very_long_layer_name_x"]             # cut alike: shown whole
    d = copy.deepcopy(golden)
    d["heads"] = [h for h in d["heads"] if h["layer"] == d["heads"][0]["layer"]]
    for h in d["heads"]:
        h["layer"] = "blocks.0.attn.hook_log_fgate"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.plot_overview(d)
        fig.savefig(__import__("io").BytesIO(), format="png")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["blocks.0"]


def test_head_ticks_of_many_heads_do_not_collide(golden):
    """256 heads in one layer (the GRU's units): the overview's wide panel ticks every 16th head, the quarter-width
    law panels every 64th, steps of a power of 2; 16 heads tick each one."""
    import matplotlib.pyplot as plt
    for ncol, most, want in ((256, 16, list(range(0, 256, 16))), (256, 6, [0, 64, 128, 192]), (16, 16, list(range(16))),
                             (24, 6, [0, 4, 8, 12, 16, 20])):
        fig, ax = plt.subplots()
        plots._ticks(ax, ["rnn"], ncol, False, most=most)
        assert list(ax.get_xticks()) == want, (ncol, most)
        plt.close(fig)


def test_default_folder_is_a_fresh_run_folder(tmp_path, monkeypatch, capsys, stub_pictures):
    monkeypatch.setattr(outputs, "RUNS", str(tmp_path / "runs"))
    assert cli.main(["report", GOLDEN, "--jobs", "1"]) == 0
    (run,) = os.listdir(tmp_path / "runs")
    assert run.startswith("report-") and os.path.isfile(tmp_path / "runs" / run / "index.html")


def test_figures_from_python(golden):
    class Analysis:                                        # anything with to_json(), as the result class
        def to_json(self):
            return golden
    for src in (golden, Analysis(), GOLDEN, schema.read(golden)):
        fig = plots.plot_head(src, head="1.1", eps=1e-3)
        assert len([ax for ax in fig.axes if ax.get_title()]) == 6
    fig = plots.plot_head(golden, head=("0", 1), eps=1e-2)       # no pmf there: the quantiles instead
    assert "quantiles" in fig.axes[2].get_title()
    assert plots.plot_overview(golden).axes and plots.plot_overview(golden, layers=["1"]).axes
    d = copy.deepcopy(golden)                              # '$' in a string of the result: text, not mathematics
    d["heads"][0]["summary"]["text"], d["heads"][0]["label"] = "costs $5 and $x^{2", "$0"
    plots.plot_head(d, head="$0").savefig(__import__("io").BytesIO(), format="png")
    # every window censored at the pmf's eps (no measured distribution), a law without one, a wide support
    pmf = d["heads"][1]["pmf"]
    pmf["measured"], pmf["laws"]["iid"] = None, None
    pmf["laws"]["bootstrap"] = {"offset": 100, "p": [1 / 3000] * 3000}
    fig = plots.plot_head(d, head="0.1")
    assert "bins" in fig.axes[2].get_ylabel() and "no measured distribution" in fig.axes[2].texts[0].get_text()
    with pytest.raises(ValueError, match="no head '9.9'.*0.0, 0.1"):
        plots.plot_head(golden, head="9.9")
    with pytest.raises(ValueError, match="expected a per-head result"):
        plots.plot_head(3.0)
    with pytest.raises(ValueError, match="eps 0.3 is not in the scan of 1.1; one of 0.1, "):
        plots.plot_head(golden, head="1.1", eps=0.3)           # not an empty distribution panel


def test_plot_laws_draws_each_law_over_the_measured(golden):
    """plot_laws: one panel per head; each law's line is its Var[W] (or E[W]) over the measured one at the
    uncensored eps (NaN at censored ones), clipped to RATIO_CLIP; the lead law's markers carry its state's
    colour; bad arguments are one ValueError naming the problem."""
    from matplotlib import colors as mcolors
    res = schema.read(golden)
    fig = plots.plot_laws(golden)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(panels) == len(res.heads)
    lead, cols = res.lead_law, plots.law_colors(res)
    checked = 0
    for h, ax in zip(res.heads, panels):
        assert ax.get_title().startswith(h.label)
        line = next((ln for ln in ax.get_lines() if mcolors.to_hex(ln.get_color()) == mcolors.to_hex(cols[lead])
                     and ln.get_linewidth() > 1.5), None)
        if line is None:
            continue
        y = np.asarray(line.get_ydata(), dtype=float)
        for a, v in zip(h.at, y):
            la = a.laws.get(lead)
            if a.measured.bound or la is None or la.var is None or not a.measured.var:
                assert not np.isfinite(v)
            else:
                assert v == pytest.approx(np.clip(la.var / a.measured.var, *plots.RATIO_CLIP), rel=1e-12)
                checked += 1
        marks = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        states = [a.laws[lead].state for a, v in zip(h.at, y) if np.isfinite(v) and lead in a.laws]
        assert [mcolors.to_hex(m.get_markerfacecolor()) for m in marks] == \
            [mcolors.to_hex(plots.STATE_COLORS[s]) for s in states]
    assert checked > 0
    mean_fig = plots.plot_laws(golden, which="mean", laws=["iid", lead])
    assert "E[W]" in mean_fig.axes[0].get_ylabel()
    assert len(plots.plot_laws(golden, layers=["1"]).axes) >= 1
    with pytest.raises(ValueError, match="which must be 'var' or 'mean'"):
        plots.plot_laws(golden, which="median")
    with pytest.raises(ValueError, match="no law 'nope'"):
        plots.plot_laws(golden, laws=["nope"])
    with pytest.raises(ValueError, match="more than max_heads=1"):
        plots.plot_laws(golden, max_heads=1)
    with pytest.raises(ValueError, match="no heads to draw"):
        plots.plot_laws(golden, layers=["99"])


def test_earlier_json_shape_makes_a_report(tmp_path, stub_pictures):
    """The committed per-head JSON of the shipped model in the earlier {info, heads} shape: converted on
    reading, the report says what it lacks."""
    legacy = os.path.join(outputs.REPO, "figures", "heads.json")
    with open(legacy) as fh:
        d = json.load(fh)
    d["heads"] = [h for h in d["heads"] if h["layer"] == 2]              # one layer: quick
    res = schema.read(d)
    assert res.source.what == "shipped" and res.unit == "head" and len(res.heads) == 4 and res.note
    assert res.head("2.1").state("mixture") == "holds"
    command.write_report(d, str(tmp_path / "old"), jobs=1)
    assert "no window distribution" in (tmp_path / "old" / "index.html").read_text(encoding="utf-8")
    fig = plots.plot_head(res, head="2.1")                   # no pmf: the quantiles the record holds
    assert "quantiles" in fig.axes[2].get_title()


def test_forget_with_report_end_to_end(tmp_path, capsys):
    """`forget.py --traces T --report DIR`: the analysis, its table, then the report of it."""
    from foxwindow.heads import command as forget_command
    from foxwindow.laws import gates
    from foxwindow.models import traces as traces_mod
    lg = -gates.LogitNormalGate(2, 0.5).sample(np.random.default_rng(4), (6, 256, 2))
    path = tmp_path / "t.npz"
    traces_mod.save_trace(str(path), {"blocks.0.attn.hook_log_fgate": lg.astype(np.float32)}, {"heads": 2})
    out = tmp_path / "rep"
    argv = ["--traces", str(path), "--report", str(out), "--no-progress", "--n-boot", "100", "--seed", "1"]
    assert outputs.cli(forget_command.main, argv) in (0, None)
    assert "report in" in capsys.readouterr().out
    assert {p.name for p in out.glob("*.png")} == {"overview.png", "layer-00.png", "layer-00-laws.png",
                                                 "head-00-00.png", "head-00-01.png"}
    # before any work: --report over an existing report without --force, and with --synthetic
    assert outputs.cli(forget_command.main, ["--traces", str(path), "--report", str(out), "--no-progress"]) == 2
    assert outputs.cli(forget_command.main, ["--synthetic", "--report", str(tmp_path / "s")]) == 2
    assert "--synthetic has no heads" in capsys.readouterr().err
    # before any work too: --json under a name the report writes, an earlier report's pages, an input there
    new = tmp_path / "rep2"
    new.mkdir()
    named = "gets a file of that name"
    for argv, msg in ((["--report", str(new), "--json", str(new / "index.html"), "--force"], named),
                      (["--report", str(new), "--json", str(new / "head-00-01.png")], named)):
        assert outputs.cli(forget_command.main, ["--traces", str(path), "--no-progress", *argv]) == 2
        assert msg in capsys.readouterr().err
    (out / "index.html").unlink()
    (out / "overview.png").unlink()                               # what remains is only named after the analysis
    assert outputs.cli(forget_command.main, ["--traces", str(path), "--report", str(out), "--no-progress"]) == 2
    assert "holds 5 files of an earlier report (head-00-00.png, ...)" in capsys.readouterr().err
    inside = tmp_path / "rep3"
    inside.mkdir()
    traces_mod.save_trace(str(inside / "t.npz"), {"blocks.0.attn.hook_log_fgate": lg.astype(np.float32)}, {"heads": 2})
    os.replace(inside / "t.npz", inside / "head-00-00.png")
    argv = ["--traces", str(inside / "head-00-00.png"), "--report", str(inside), "--no-progress", "--force"]
    assert outputs.cli(forget_command.main, argv) == 2
    assert "head-00-00.png there is an input of this command" in capsys.readouterr().err


def test_384_heads_make_an_index_and_one_page_per_layer(golden, tmp_path, monkeypatch):
    """A model of 24 layers x 16 heads: the index links 24 layer pages, each with its 16 heads (the
    drawing replaced by a stub picture here: the layout is under test, not matplotlib)."""
    d = copy.deepcopy(golden)
    d["heads"] = [dict(copy.deepcopy(golden["heads"][(l + h) % 4]), layer=str(l), head=h, label=f"{l}.{h}")
                  for l in range(24) for h in range(16)]
    monkeypatch.setattr(command, "_render", lambda job: PNG_MAGIC + b"\0" * 32)
    command.write_report(d, str(tmp_path / "big"), jobs=1)
    pages = sorted(p.name for p in (tmp_path / "big").glob("layer-*.html"))
    assert pages == [f"layer-{i:02d}.html" for i in range(24)]
    imgs, links, _ = _refs(tmp_path / "big" / "index.html")
    assert imgs == ["overview.png"] and {f"layer-{i:02d}.html" for i in range(24)} <= {h.split("#")[0] for h in links}
    imgs, _, text = _refs(tmp_path / "big" / "layer-23.html")
    assert len(imgs) == 18 and text.count('<h2 id="h23-') == 16             # overview, laws, 16 heads
    assert "layer-23-laws.png" in imgs
    # a layer wider than the law-ratio picture's panels: no such picture, and its page says why
    d["heads"] = [dict(copy.deepcopy(golden["heads"][h % 4]), layer="0", head=h, label=f"0.{h}")
                  for h in range(pages_mod.LAWS_PANELS + 1)]
    command.write_report(d, str(tmp_path / "wide"), jobs=1)
    imgs, _, text = _refs(tmp_path / "wide" / "layer-00.html")
    assert not list((tmp_path / "wide").glob("*-laws.png")) and "more than the 64 panels" in text
    # the overview itself draws at this size (one picture, not the stub)
    assert plots.plot_overview(d).axes


def test_chromium_screenshot_of_the_report(report_dir, tmp_path):
    """The index as a browser shows it: a screenshot with the overview picture drawn (not a blank page)."""
    browser = screenshot.find_browser()
    if browser is None:
        pytest.skip("no headless Chromium here (apt-get install chromium, or set $CHROMIUM); "
                    "the page is checked without a browser by the other tests")
    shot = tmp_path / "index.png"
    screenshot.screenshot(str(report_dir / "index.html"), str(shot), size=(1400, 2000), browser=browser)
    from PIL import Image
    img = np.asarray(Image.open(shot).convert("RGB")).astype(float)
    assert img.shape[:2] == (2000, 1400)
    top = img[:900]
    # the overview's colour map and state colours are on screen: many non-grey pixels near the top
    sat = top.max(axis=2) - top.min(axis=2)
    assert (sat > 60).mean() > 0.02, "the screenshot shows no coloured picture"
    assert shutil.which(browser) or os.path.isfile(browser)


def test_names_come_from_positions(golden):
    res = schema.read(golden)
    n = pages.Names(res)
    assert n.files(res)[0] == "overview.png" and n.files(res)[-1] == "index.html"
    assert n.head_png(res.heads[3]) == "head-01-01.png"


LAWS_GOLDEN = os.path.join(outputs.REPO, "tests", "data", "heads_small.json")


@pytest.mark.skipif(not os.path.isfile(LAWS_GOLDEN), reason="tests/data/heads_small.json (the analysis' own "
                    "schema-1 golden file) is not in this tree")
def test_the_analysis_golden_file_makes_a_report(tmp_path):
    """The schema-1 document the per-head analysis writes (its committed golden file): read, drawn, paged."""
    res = schema.read(LAWS_GOLDEN)
    assert res.heads and res.lead_law in res.laws
    h = res.heads[0]
    assert h.at and all(a.measured.mean is not None for a in h.at)
    raw = json.load(open(LAWS_GOLDEN))["heads"]                     # the summary's claim read as written
    assert [r.summary.var_claim for r in res.heads] == [d["summary"].get("var_claim") for d in raw]
    titles = [a.get_title() for a in plots.plot_laws(LAWS_GOLDEN).axes if a.get_title()]
    assert len(titles) == len(res.heads) and any(r.summary.var_law for r in res.heads)
    for r, t in zip(res.heads, titles):                             # the variance law's claim in its panel's title
        s = r.summary
        assert (f"var {s.var_law} ({s.var_claim:.0%})" if s.var_law else "var no law") in t, t
    command.write_report(LAWS_GOLDEN, str(tmp_path / "r"), jobs=1)
    imgs, _, text = _refs(tmp_path / "r" / "layer-00.html")
    assert all((tmp_path / "r" / i).stat().st_size > 10_000 for i in imgs)
    assert "Out-of-sample scores" in text and "No out-of-sample scores" not in text
