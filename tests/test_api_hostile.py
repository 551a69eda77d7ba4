"""Misuse of the public Python API (foxwindow.__all__ and foxwindow.report): each bad argument, file or model is
refused in one line naming the argument and what is allowed, before any capture, analysis or write; nothing the
user has is replaced by default."""
import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch

import foxwindow
from conftest import REPO
from foxwindow import report
from foxwindow.laws import gates
from foxwindow.models import hf_capture, hf_load, traces


def _lg(S=6, T=64, H=2, seed=0):
    return -gates.LogitNormalGate(2, 0.5).sample(np.random.default_rng(seed), (S, T, H))


@pytest.fixture(scope="module")
def result():
    return foxwindow.analyse(_lg(), eps=[1e-2, 1e-3], n_boot=20, seed=1)


def _one_line(exc):
    assert "\n" not in str(exc.value), str(exc.value)
    return str(exc.value)


# ----------------------------------------------------------------------------- trace files


def _crafted(path, shape, compression=zipfile.ZIP_STORED):
    """A trace file whose member's .npy header claims `shape` and holds 1 KiB of data."""
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": shape})
    member.write(np.full(256, -0.1, np.float32).tobytes())
    meta = io.BytesIO()
    blob = json.dumps({"format": traces.TRACE_FORMAT, "names": ["l"], "shapes": [list(shape)]}).encode()
    np.lib.format.write_array(meta, np.frombuffer(blob, np.uint8))
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.writestr("trace_0.npy", member.getvalue())
        z.writestr("meta_json.npy", meta.getvalue())
    return str(path)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_load_trace_refuses_a_crafted_shape_before_allocating_it(tmp_path, compression):
    path = _crafted(tmp_path / "huge.npz", (100000, 1000000, 1000), compression)     # 364 TiB claimed
    with pytest.raises(ValueError, match="claims 400000000000000 bytes .* a truncated or crafted file") as exc:
        foxwindow.load_trace(path)
    _one_line(exc)


@pytest.mark.parametrize("path, kind, match", [(None, TypeError, "str or os.PathLike; got NoneType"),
                                               (3, TypeError, "str or os.PathLike; got int"),
                                               ("", ValueError, "give the path of an .npz trace file")])
def test_load_trace_and_analyse_name_a_path_that_is_none(path, kind, match):
    with pytest.raises(kind, match=match):
        foxwindow.load_trace(path)
    if isinstance(path, str):
        with pytest.raises(kind, match=match):
            foxwindow.analyse(path, eps=1e-3)


def test_save_trace_writes_only_what_load_trace_reads(tmp_path):
    x = _lg(S=4, T=32).astype(np.float32)
    cases = [({"": x}, None, "non-empty strings; got ''"),
             ({"l": x}, {"heads": "two"}, "save_trace: metadata 'heads' is 'two'; it must be an integer >= 1"),
             ({"l": x}, {"seq_len": -1}, "metadata 'seq_len' is -1"),
             ({"l": x}, {"family": 3}, "metadata 'family' is 3; it must be a string"),
             ({"l": [[[-1.0]], [[-1.0, -2.0]]]}, None, "trace 'l' is not one array")]
    for tr, meta, match in cases:
        with pytest.raises(ValueError, match=match) as exc:
            foxwindow.save_trace(str(tmp_path / "t.npz"), tr, meta)
        _one_line(exc)
    assert not list(tmp_path.iterdir())


def test_save_trace_paths_and_force(tmp_path):
    x = _lg(S=4, T=32).astype(np.float32)
    p = tmp_path / "t.npz"
    foxwindow.save_trace(str(p), {"l": x})
    before = p.read_bytes()
    for force in ("no", 1, None):                   # a truthy string had replaced the file
        with pytest.raises(ValueError, match="force must be True or False"):
            foxwindow.save_trace(str(p), {"l": 2 * x}, force=force)
    assert p.read_bytes() == before
    for path in (None, "", 3):                      # '' had tried to replace the working folder
        with pytest.raises(ValueError, match="save_trace: expected a file path"):
            foxwindow.save_trace(path, {"l": x})


# ----------------------------------------------------------------------------- models and tokens


@pytest.fixture(scope="module")
def fox():
    return foxwindow.load_checkpoint(foxwindow.models.fox.shipped_checkpoint())[0]


@pytest.mark.parametrize("inputs, match", [(torch.tensor(5), "got a single number"),
                                           ("hello", "got a str that is not one numeric array"),
                                           ([[1, 2, 3], [1, 2]], "got a list that is not one numeric array")])
def test_capture_traces_names_inputs_that_are_not_token_ids(fox, inputs, match):
    with pytest.raises(ValueError, match="^inputs must be \\(S, T\\) token ids.*" + match) as exc:
        foxwindow.capture_traces(fox, inputs)
    _one_line(exc)


def test_capture_traces_per_channel_is_a_bool(fox):
    with pytest.raises(ValueError, match="per_channel must be True or False; got 'no'"):
        foxwindow.capture_traces(fox, torch.zeros(3, 8, dtype=torch.long), per_channel="no")


@pytest.fixture
def no_capture(monkeypatch):
    """capture_traces replaced by one that fails the test: the refusals come before any forward pass."""
    def refuse(*a, **k):
        raise AssertionError("the model was run before the arguments were checked")
    monkeypatch.setattr(hf_capture, "capture_traces", refuse)


@pytest.mark.parametrize("kw, match", [(dict(eps=2), "eps must lie in \\(0, 1\\)"),
                                       (dict(eps=[1e-3, 1e-3]), "given twice"),
                                       (dict(L=1000), "beyond 708.4"),
                                       (dict(eps=1e-3, n_boot=-5), "n_boot must be an int >= 0"),
                                       (dict(eps=1e-3, seed=-1), "seed must be None or an integer >= 0"),
                                       (dict(eps=1e-3, n_boot=10 ** 13), "would hold about .* GiB")])
def test_analyse_checks_its_own_arguments_before_the_capture(fox, no_capture, kw, match):
    with pytest.raises(ValueError, match=match) as exc:
        foxwindow.analyse(fox, tokens=torch.randint(0, 256, (4, 64)), **kw)
    _one_line(exc)


@pytest.mark.parametrize("kw, match", [(dict(seq_len=2, n_seq=4), "seq_len >= max\\(n_seq, 4\\).*seq_len=2"),
                                       (dict(n_seq=True), "n_seq must be an integer; got True"),
                                       (dict(n_seq=2.5), "n_seq must be an integer; got 2.5"),
                                       (dict(n_seq=1, seq_len=64), "n_seq must be >= 3 sequences")])
def test_analyse_checks_the_held_out_sizes_before_the_capture(fox, no_capture, kw, match):
    with pytest.raises(ValueError, match=match):
        foxwindow.analyse(fox, eps=1e-3, **kw)


def test_analyse_refuses_what_its_input_would_ignore(fox, no_capture):
    x = _lg()
    for kw in (dict(batch=0), dict(per_channel=True), dict(n_seq=4), dict(seq_len=128)):
        with pytest.raises(ValueError, match=f"^{next(iter(kw))}= is for a model's capture.*drop it"):
            foxwindow.analyse(x, eps=1e-3, **kw)
    with pytest.raises(ValueError, match="n_seq= is for this package's FoX model's held-out text; tokens= are given"):
        foxwindow.analyse(fox, eps=1e-3, tokens=torch.randint(0, 256, (4, 64)), n_seq=5)
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    with pytest.raises(ValueError, match="seq_len= is for .* LSTM is captured on tokens="):
        foxwindow.analyse(lstm, eps=1e-3, seq_len=128)


def test_analyse_refuses_features_that_are_not_finite(no_capture):
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    bad = torch.randn(4, 64, 3)
    bad[1, 7, 2] = float("nan")
    for tokens in (bad, bad.numpy()):
        with pytest.raises(ValueError, match=r"tokens hold NaN or infinite values \(1 of 768\)"):
            foxwindow.analyse(lstm, eps=1e-2, tokens=tokens)


def test_analyse_refuses_a_masked_array():
    x = np.ma.masked_array(_lg(), mask=np.zeros((6, 64, 2), bool))
    x.mask[0, :5] = True
    with pytest.raises(ValueError, match="a masked array with 10 masked values; .*its mask would be ignored"):
        foxwindow.analyse(x, eps=1e-3)


def test_analyse_a_trace_file_checks_n_boot_before_reading_the_values(tmp_path, monkeypatch):
    p = str(tmp_path / "t.npz")
    foxwindow.save_trace(p, {"l": _lg().astype(np.float32)})
    monkeypatch.setattr(traces, "check_trace_file", lambda *a: pytest.fail("the values were read first"))
    with pytest.raises(ValueError, match="n_boot 10000000000000: the bootstrap draws over 6 sequences would hold"):
        foxwindow.analyse(p, eps=1e-3, n_boot=10 ** 13)
    with pytest.raises(ValueError, match="eps must lie in"):
        foxwindow.analyse(p, eps=5)


@pytest.mark.parametrize("kw, match", [(dict(name=None), "^name must be a checkpoint folder or a hub name"),
                                       (dict(name=3), "^name must be"), (dict(name=""), "^name must be"),
                                       (dict(name="x", device="tpu"), "^device: unknown device 'tpu'"),
                                       (dict(name="x", dtype="int8"), "^dtype must be one of 'float32'"),
                                       (dict(name="x", dtype=torch.float16), "^dtype must be one of")])
def test_load_pretrained_checks_its_arguments_first(kw, match):
    with pytest.raises(ValueError, match=match):
        hf_load.load_pretrained(**kw)


# ----------------------------------------------------------------------------- HeadsResult


def test_heads_result_takes_head_results_only(result):
    doc = result.to_json()
    for heads, info, match in [(doc["heads"], {}, "got a dict \\(a per-head JSON document is read by "
                                                  "foxwindow.report.read\\)"),
                               ([1, 2], {}, "got a int"), ("abc", {}, "got str"), (None, {}, "got NoneType"),
                               (result.heads, None, "^info must be a mapping"),
                               (result.heads, [1], "^info must be a mapping")]:
        with pytest.raises(TypeError, match=match) as exc:
            foxwindow.HeadsResult(heads, info)
        _one_line(exc)


def test_heads_result_plot_refuses_eps_and_l_together(result):
    with pytest.raises(ValueError, match="give eps= or L=, not both"):
        result.plot(eps=1e-2, L=3.0)                # eps had been dropped for L
    with pytest.raises(ValueError, match="give eps= or L=, not both"):
        result.plot_overview(eps=1e-2, L=3.0)
    assert result.plot(L=gates.threshold(1e-2)).axes and result.plot(eps=None).axes


# ----------------------------------------------------------------------------- foxwindow.report


def test_write_report_never_replaces_its_input(tmp_path, result):
    out = tmp_path / "rep"
    out.mkdir()
    src = out / "index.html"                        # the result's JSON, under a name the report writes
    src.write_text(json.dumps(result.to_json()))
    before = src.read_bytes()
    with pytest.raises(ValueError, match="is also the result .* never overwrites its own input"):
        report.write_report(str(src), str(out), force=True, jobs=1)
    assert src.read_bytes() == before


@pytest.fixture(scope="module")
def earlier(tmp_path_factory, result):
    """An earlier report and its files' bytes."""
    old = tmp_path_factory.mktemp("earlier") / "old"
    report.write_report(result, str(old), jobs=1)
    return old, {f: (old / f).read_bytes() for f in os.listdir(old)}


@pytest.mark.parametrize("kw, match", [(dict(force="no"), "force must be True or False"),
                                       (dict(eps=0), "eps must lie in \\(0, 1\\)"),
                                       (dict(eps=2), "eps must lie in \\(0, 1\\)"),
                                       (dict(eps=None), "give exactly one of eps"),
                                       (dict(eps=[1e-3]), "eps must be one number"),
                                       (dict(jobs=0), "--jobs must be >= 1"),
                                       (dict(jobs=1.5), "jobs must be None or an integer"),
                                       (dict(jobs="x"), "jobs must be None or an integer"),
                                       (dict(jobs=10 ** 6), "lets the report use"),
                                       (dict(dpi=0), "dpi must be a number from 1 to 600"),
                                       (dict(dpi="x"), "dpi must be a number"),
                                       (dict(dpi=10 ** 6), "dpi must be a number")])
def test_write_report_checks_its_arguments_before_the_folder(tmp_path, earlier, result, kw, match):
    old, before = earlier
    for out in (tmp_path / "new", old):
        with pytest.raises(ValueError, match=match) as exc:
            report.write_report(result, str(out), **{"jobs": 1, **kw})
        _one_line(exc)
    assert not (tmp_path / "new").exists()
    assert {f: (old / f).read_bytes() for f in os.listdir(old)} == before


def test_figures_check_dpi_laws_and_max_heads(result):
    for plot in (report.plot_head, report.plot_overview, report.plot_laws):
        for dpi in (0, -1, "x", 10 ** 6):
            with pytest.raises(ValueError, match="dpi must be a number from 1 to 600"):
                plot(result, dpi=dpi)
    assert report.plot_laws(result, laws="iid").axes        # one name, not its letters ("no law 'i'")
    with pytest.raises(ValueError, match="laws is empty"):
        report.plot_laws(result, laws=[])
    with pytest.raises(TypeError, match="laws must be a law name or a sequence"):
        report.plot_laws(result, laws=3)
    for m in (0, "x", True):
        with pytest.raises(ValueError, match="max_heads must be an integer >= 1"):
            report.plot_laws(result, max_heads=m)


def test_crafted_json_of_the_figures(result):
    doc = result.to_json()
    h0 = doc["heads"][0]
    cases = [({"pmf": {"eps": 0, "L": 6.9, "measured": {"offset": 0, "p": [1.0]}}}, "pmf.eps: expected a threshold"),
             ({"pmf": {"eps": 0.5, "L": 6.907755, "measured": {"offset": 0, "p": [1.0]}}},
              "pmf.L: expected ln\\(1/eps\\) = 0.693147"),
             ({"mass": {"eps": 5, "decay_window": 3.0, "mass_window": 1.0}}, "mass.eps: expected a threshold"),
             ({"mass": {"eps": 1e-3, "decay_window": -3.0, "mass_window": 1.0}}, "mass.decay_window: -3 < 0")]
    for change, match in cases:
        bad = json.loads(json.dumps(doc))
        bad["heads"][0] = {**h0, **change}
        with pytest.raises(ValueError, match="heads\\[0\\]." + match):
            report.read(bad)
    wide = json.loads(json.dumps(doc))
    wide["heads"][0]["head"] = 2 ** 53              # a grid of 2^53 columns: 64 PiB had been asked for
    with pytest.raises(ValueError, match="head index 9007199254740992 .* more than 4194304 cells"):
        report.plot_overview(wide)


def test_capture_log_decays_checks_its_arguments():
    """A model that is not a module, adapters and names_filter of the wrong kind, cpu_fallbacks that is not a bool:
    one line each before any forward (a family name as a string had been read letter by letter)."""
    fox, _ = foxwindow.load_checkpoint(os.path.join(REPO, "checkpoints", "fox_shakespeare.pt"))
    ids = torch.randint(0, 256, (2, 32))
    assert len(foxwindow.capture_log_decays(fox, ids, adapters="foxwindow").decays) == 4       # one family, named
    for kw, err, words in ((dict(adapters=[3]), TypeError, "3 (int) in it"),
                           (dict(adapters=[]), TypeError, "an empty list"),
                           (dict(names_filter=3), TypeError, "names_filter must be None"),
                           (dict(cpu_fallbacks="no"), TypeError, "cpu_fallbacks must be None, True or False")):
        with pytest.raises(err) as exc:
            foxwindow.capture_log_decays(fox, ids, **kw)
        assert words in _one_line(exc)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module; got str"):
        foxwindow.capture_log_decays("model", ids)


def test_a_recurrent_layer_given_token_ids_says_so():
    with pytest.raises(ValueError) as exc:
        foxwindow.analyse(torch.nn.LSTM(3, 4, batch_first=True), tokens=torch.randint(0, 256, (4, 64)))
    assert "reads float features (B, T, input_size 3); got torch.int64" in _one_line(exc)


def test_trace_spans_are_one_source_a_sequence(tmp_path):
    """The metadata's spans (data.heldout_tokens' {"file", "start", "end"}, one a sequence) are checked by the writer
    and the reader: [["a", "b"]], [[0, 1e30]] or 5 spans for 6 sequences were stored and read as they were."""
    lg = _lg()
    good = [{"file": "hamlet_gut.txt", "start": 2048 * i, "end": 2048 * (i + 1)} for i in range(6)]
    traces.save_trace(str(tmp_path / "ok.npz"), {"a": lg}, {"spans": good})
    assert foxwindow.load_trace(str(tmp_path / "ok.npz"))[1]["spans"] == good
    for i, spans in enumerate(([["a", "b"]] * 6, [[0, 1e30]] * 6, [dict(good[0], end=-1)] * 6, good[:5])):
        with pytest.raises(ValueError, match="spans") as exc:
            traces.save_trace(str(tmp_path / f"bad{i}.npz"), {"a": lg}, {"spans": spans})
        _one_line(exc)
        assert not (tmp_path / f"bad{i}.npz").exists()
    # a file written by other means: refused by the reader, before the analysis
    raw = tmp_path / "raw.npz"
    meta = {"spans": good[:5], "format": traces.TRACE_FORMAT, "names": ["a"], "shapes": [list(lg.shape)]}
    np.savez(raw, trace_0=lg.astype(np.float32), meta_json=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with pytest.raises(ValueError, match="lists 5 sources for 6 sequences"):
        foxwindow.analyse(str(raw), eps=1e-3, n_boot=0)


def test_trace_metadata_is_strict_json(tmp_path):
    # a NaN in the metadata had been written as JSON's NaN, which strict readers refuse
    with pytest.raises(ValueError, match="strict JSON: no NaN or infinity") as exc:
        traces.save_trace(str(tmp_path / "t.npz"), {"a": _lg()}, {"capture_s": float("nan")})
    _one_line(exc)
    assert not (tmp_path / "t.npz").exists()
