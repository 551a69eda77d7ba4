"""Hostile input to `reach.py --replot` (a crafted or corrupt earlier result), `reach.py`'s own flags, and
`gru_traces.py` / `lstm_traces.py` (crafted Keras weight files and vocabularies): each refused in one line that
names the field or file, exit 2, before any work, and nothing written. The weight files are small Keras-layout
HDF5 files made here with h5py (compressed ones with chunks written as is: decompression bombs)."""
import io
import json
import os
import tarfile
import zlib

import h5py
import numpy as np
import pytest

from conftest import REPO, run_cli
from foxwindow.models import gru, lstm, traces
from foxwindow.training import reach

SHIPPED = os.path.join(REPO, "results", "kinds", "reach.json")


def _one_line(capsys, main, argv, *words):
    rc, err = run_cli(capsys, main, argv)
    lines = [li for li in err.strip().splitlines() if li.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- reach.py --replot


def _shipped():
    with open(SHIPPED) as fh:
        return json.load(fh)


def _edit(path, **changes):
    """The shipped result with one change, written to `path` (raw text where JSON cannot say it)."""
    doc = _shipped()
    if "raw" in changes:
        path.write_text(changes["raw"](json.dumps(doc)))
        return path
    changes["fn"](doc)
    path.write_text(json.dumps(doc))
    return path


def _set(keys, value):
    def fn(doc):
        d = doc
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return fn


REPLOTS = [
    ("nan", dict(raw=lambda t: t.replace('"window_mean": ', '"window_mean": NaN, "x": ', 1)),
     "results[0].attribution.window_mean is nan"),
    ("inf", dict(raw=lambda t: t.replace('"val_bpc": ', '"val_bpc": 1e999, "x": ', 1)), "results[0].val_bpc is inf"),
    ("list", dict(raw=lambda t: "[1, 2]"), "not a reach.py results JSON"),
    ("deep", dict(raw=lambda t: "[" * 100000 + "]" * 100000), "nested too deeply"),
    ("digits", dict(raw=lambda t: t[:-1] + ', "x": ' + "9" * 5000 + "}"), "more than 4300 digits"),
    ("nested", dict(fn=_set(["results", 0, "extra"], json.loads("[" * 30 + "]" * 30))), "nested more than 16"),
    ("no_context", dict(fn=lambda d: d["args"].pop("context")), "args.context must be an integer >= 2; got None"),
    ("context_str", dict(fn=_set(["args", "context"], "big")), "args.context must be an integer"),
    ("negative_window", dict(fn=_set(["results", 1, "predicted", "model"], -30)), "results[1].predicted.model"),
    ("negative_depth", dict(fn=_set(["results", 0, "passkey", "depths", 0], -4)), "results[0].passkey.depths[0]"),
    ("short_accuracy", dict(fn=_set(["results", 0, "passkey", "accuracy"], [0.5])), "results[0].passkey.accuracy"),
    ("bool_accuracy", dict(fn=_set(["results", 0, "passkey", "accuracy", 0], True)),
     "results[0].passkey.accuracy[0] must be a finite number >= 0 and <= 1; got True"),
    ("null_loss", dict(fn=_set(["results", 0, "final_key_loss"], None)), "results[0].final_key_loss"),
    ("no_passkey", dict(fn=lambda d: d["results"][0].pop("passkey")), "results[0] needs the objects"),
    ("escape_kind", dict(fn=_set(["results", 0, "kind"], "fox\x1b]0;pwned\x07")), "results[0].kind holds control"),
    ("unknown_kind", dict(fn=_set(["results", 0, "kind"], "nosuch")), "results[0].kind 'nosuch' is not one of"),
    ("twice", dict(fn=_set(["results", 1, "kind"], "softmax")), "results[1].kind 'softmax'"),
    ("params", dict(fn=_set(["results", 3, "params"], {"w": -1})), "results[3].params are not swa's"),
    ("no_results", dict(fn=_set(["results"], [])), "results is empty"),
    ("eps", dict(fn=_set(["args", "eps"], 1.5)), "args.eps must be a finite number > 0 and <= 1"),
    ("other_kind", dict(fn=_set(["kind"], "forget")), "kind is 'forget'"),
]


@pytest.mark.parametrize("case, change, words", REPLOTS, ids=[c[0] for c in REPLOTS])
def test_replot_refuses_a_crafted_result_naming_the_field(capsys, tmp_path, case, change, words):
    src = _edit(tmp_path / f"{case}.json", **change)
    line = _one_line(capsys, reach.main, ["--replot", str(src), "--out", str(tmp_path / "out")], "--replot", words)
    assert "\x1b" not in line and "\x07" not in line
    assert not (tmp_path / "out").exists()


def test_replot_refuses_a_huge_file_before_reading_it(capsys, tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"args": {}, "results": [' + "0," * (9 << 20) + "0]}")
    _one_line(capsys, reach.main, ["--replot", str(big), "--out", str(tmp_path / "out")], "--replot", "over 16 MiB")
    assert not (tmp_path / "out").exists()


def test_replot_of_an_untouched_result_still_works(capsys, tmp_path):
    src = _edit(tmp_path / "same.json", fn=lambda d: None)
    assert run_cli(capsys, reach.main, ["--replot", str(src), "--out", str(tmp_path / "out")])[0] == 0
    assert sorted(os.listdir(tmp_path / "out")) == ["README.md", "reach.json", "reach.png"]


def test_replot_refuses_the_flags_it_would_ignore(capsys, tmp_path):
    _one_line(capsys, reach.main, ["--replot", SHIPPED, "--steps", "5", "--kinds", "swa", "--out",
                                   str(tmp_path / "out")], "--kinds and --steps would be ignored", "--replot")
    _one_line(capsys, reach.main, ["--replot", SHIPPED, "--eps", "0.01"], "--eps would be ignored")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, words", [
    (["--kinds", "swa", "fox", "swa"], ["--kinds", "swa", "more than once"]),
    (["--depths", "4", "8", "4"], ["--depths", "4", "more than once"]),
    (["--attr-rows", "1"], ["--attr-rows", ">= 2"]),          # the sd over one row would be NaN, written as null
])
def test_reach_refuses_repeats_and_one_attribution_row(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    _one_line(capsys, reach.main, argv, *words)
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- gru_traces.py, lstm_traces.py

UNITS, WIDTH = 4, 3
VOCAB = {chr(b): b for b in range(1, 128)}                   # every ASCII byte: the held-out text maps whole


def _weights(path, family, edit=None, config=None, stored=None):
    """A small Keras-layout weight file: embedding (128, WIDTH) and one GRU (3 gates) or LSTM (4) layer; stored:
    create_dataset's filter arguments for every array (compression, shuffle, ...)."""
    rng = np.random.default_rng(0)
    g = 3 if family == "gru" else 4
    arrays = {"embedding": {"embeddings:0": rng.normal(size=(128, WIDTH))},
              "rnn": {"kernel:0": rng.normal(size=(WIDTH, g * UNITS)), "bias:0": np.zeros(g * UNITS),
                      "recurrent_kernel:0": rng.normal(size=(UNITS, g * UNITS))}}
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n in arrays])
        f.attrs["keras_version"] = b"2.1.5"
        if config is not None:
            f.attrs["model_config"] = config
        for ln, ws in arrays.items():
            grp = f.create_group(ln)
            grp.attrs["weight_names"] = np.array([f"{ln}/{w}".encode() for w in ws])
            for w, a in ws.items():
                grp.create_dataset(f"{ln}/{w}", data=a.astype(np.float32), **(stored or {}))
        if edit is not None:
            edit(f)
    return path


def _vocab(path, text=None):
    path.write_text(json.dumps(VOCAB) if text is None else text)
    return path


def _replace(name, **kw):
    def edit(f):
        del f[name]
        f.create_dataset(name, **kw)
    return edit


def _rename(new):
    """The recurrent layer renamed `new` (its group and the layer list)."""
    def edit(f):
        f.move("rnn", new)
        f.attrs["layer_names"] = np.array([b"embedding", new.encode()])
    return edit


def _bomb(compression, shape, chunks, unpacks_to):
    """The embedding as a compressed dataset whose every chunk is written as is and unpacks to `unpacks_to` bytes."""
    if compression == "gzip":
        raw = zlib.compress(bytes(unpacks_to), 9)
    else:                                                   # lzf: one zero byte, then back references of 264 bytes
        raw = b"\x00\x00" + b"\xe0\xff\x00" * ((unpacks_to - 1) // 264)

    def edit(f):
        name = "embedding/embedding/embeddings:0"
        del f[name]
        d = f.create_dataset(name, shape=shape, dtype="f4", chunks=chunks, compression=compression)
        for idx in np.ndindex(*(-(-n // c) for n, c in zip(shape, chunks))):
            d.id.write_direct_chunk(tuple(i * c for i, c in zip(idx, chunks)), raw)
    return edit


def _some_chunks(f):
    name = "embedding/embedding/embeddings:0"
    a = f[name][()]
    del f[name]
    f.create_dataset(name, shape=a.shape, dtype="f4", chunks=(16, WIDTH), compression="gzip")[:16] = a[:16]


def _nan_embedding(f):
    d = f["embedding/embedding/embeddings:0"]
    a = d[()]
    a[3, 1] = np.nan
    d[...] = a


WEIGHTS = [
    ("nan_embedding", dict(edit=_nan_embedding), "embedding 'embedding' has NaN or infinite entries"),
    ("complex", dict(edit=_replace("rnn/rnn/bias:0", data=np.ones(12, np.complex64) * 1j)), "has dtype complex64"),
    ("integers", dict(edit=_replace("embedding/embedding/embeddings:0", data=np.ones((128, WIDTH), np.int64))),
     "has dtype int64"),
    # 40 GB claimed by a file of kilobytes (chunks never written): refused before anything is read
    ("unwritten", dict(edit=_replace("embedding/embedding/embeddings:0", shape=(100000, 100000), dtype="f4",
                                     chunks=(1000, 1000))), "the file stores 0.0 MiB of it"),
    ("zero_units", dict(edit=lambda f: [_replace(f"rnn/rnn/{n}", shape=s, dtype="f4")(f) for n, s in
                                        (("kernel:0", (WIDTH, 0)), ("recurrent_kernel:0", (0, 0)), ("bias:0", (0,)))]),
     "layer 'rnn': kernel (3, 0)"),
    ("config_list", dict(config="[1, 2]"), "model_config is not a Keras model config"),
    ("config_deep", dict(config="[" * 100000 + "]" * 100000), "model_config is not valid JSON (nested too deeply)"),
    ("config_layers", dict(config=json.dumps({"config": {"layers": [1]}})), "model_config is not a Keras model"),
    # names are printed and become the trace's layer names: control characters are refused, shown escaped
    ("escape_name", dict(edit=_rename("rnn\x1b[31m")), "layer name 'rnn\\x1b[31m' holds control characters"),
    ("newline_name", dict(edit=_rename("rnn\nwrote t.npz")), "layer name 'rnn\\nwrote t.npz' holds control"),
    ("escape_version", dict(edit=lambda f: f.attrs.__setitem__("keras_version", b"2.1.5\x1b]0;x\x07")),
     "keras_version '2.1.5\\x1b]0;x\\x07' holds control characters"),
    ("cr_weight_name", dict(edit=lambda f: f["rnn"].attrs.__setitem__("weight_names", [b"rnn/kernel:0\r"])),
     "layer 'rnn': weight name 'rnn/kernel:0\\r' holds control characters"),
    ("bytes_name", dict(edit=lambda f: f.attrs.__setitem__("layer_names", np.array([b"embedding", b"rnn\xff"]))),
     "layer name b'rnn\\xff' is not UTF-8 text"),
    ("vlen_bytes_name", dict(edit=lambda f: f.attrs.__setitem__("layer_names", [b"embedding", b"rnn\xff"])),
     "layer name 'rnn\\udcff' is not UTF-8 text"),
    ("dot_name", dict(edit=_rename("rnn.1")), "recurrent layer 'rnn.1' cannot name a torch module"),
    ("keys_name", dict(edit=_rename("keys")), "recurrent layer 'keys' cannot name a torch module"),
    ("scaleoffset", dict(stored=dict(scaleoffset=3)), "is stored with HDF5 filter 6"),
    ("missing_chunks", dict(edit=_some_chunks), "weight 'embedding/embeddings:0' stores 1 of its 8 chunks"),
]


@pytest.mark.parametrize("family", ["gru", "lstm"])
@pytest.mark.parametrize("case, craft, words", WEIGHTS, ids=[c[0] for c in WEIGHTS])
def test_trace_commands_refuse_crafted_weight_files(capsys, tmp_path, family, case, craft, words):
    main = gru.main if family == "gru" else lstm.main
    w = _weights(tmp_path / "w.hdf5", family, **craft)
    before = w.read_bytes()
    line = _one_line(capsys, main, ["--weights", str(w), "--vocab", str(_vocab(tmp_path / "v.json")), "--n-seq", "3",
                                    "--seq-len", "16", "--no-progress", "--out", str(tmp_path / "t.npz")], "w.hdf5",
                     words)
    assert "\x1b" not in line and "\x07" not in line and "Traceback" not in line
    assert not (tmp_path / "t.npz").exists() and w.read_bytes() == before


# the embedding (128, WIDTH) float32: 1536 bytes, one chunk
BOMBS = [
    # every chunk present and unpacking to its own 32 MiB: 320 MiB from a file of kilobytes
    ("gzip_shape", _bomb("gzip", (1024, 81920), (1024, 8192), 32 << 20),
     "weight 'embedding/embeddings:0' has shape (1024, 81920) (320.0 MiB), over the 256 MiB read for one weight"),
    # a small array whose chunk unpacks to 16 MiB: HDF5's filters would grow their buffer to all of it
    ("gzip_chunk", _bomb("gzip", (128, WIDTH), (128, WIDTH), 16 << 20), "unpacks to more than its 1536 bytes"),
    ("lzf_chunk", _bomb("lzf", (128, WIDTH), (128, WIDTH), 16 << 20), "unpacks to more than its 1536 bytes"),
    ("gzip_short", _bomb("gzip", (128, WIDTH), (128, WIDTH), 100), "a chunk unpacks to 100 of its 1536 bytes"),
]


@pytest.mark.parametrize("family", ["gru", "lstm"])
@pytest.mark.parametrize("case, edit, words", BOMBS, ids=[c[0] for c in BOMBS])
def test_trace_commands_refuse_decompression_bombs_unread(capsys, tmp_path, monkeypatch, family, case, edit, words):
    """A compressed weight is measured before HDF5 unpacks it: refused in one line naming it, its data never read."""
    main = gru.main if family == "gru" else lstm.main
    w = _weights(tmp_path / "w.hdf5", family, edit=edit)
    assert os.path.getsize(w) < 2 << 20
    reads = []
    read = h5py.Dataset.__getitem__
    monkeypatch.setattr(h5py.Dataset, "__getitem__", lambda ds, key: reads.append(ds.name) or read(ds, key))
    _one_line(capsys, main, ["--weights", str(w), "--vocab", str(_vocab(tmp_path / "v.json")), "--n-seq", "3",
                             "--seq-len", "16", "--no-progress", "--out", str(tmp_path / "t.npz")], "w.hdf5", words)
    assert reads == [] and not (tmp_path / "t.npz").exists()


@pytest.mark.parametrize("family", ["gru", "lstm"])
@pytest.mark.parametrize("stored", [dict(compression="gzip"), dict(compression="lzf", shuffle=True, fletcher32=True)],
                         ids=["gzip", "lzf_shuffle_fletcher32"])
def test_trace_commands_read_compressed_weights_as_stored_ones(capsys, tmp_path, family, stored):
    main = gru.main if family == "gru" else lstm.main
    v = _vocab(tmp_path / "v.json")
    got = []
    for name, kw in (("plain", None), ("packed", stored)):
        w = _weights(tmp_path / f"{name}.hdf5", family, stored=kw)
        argv = ["--weights", str(w), "--vocab", str(v), "--n-seq", "3", "--seq-len", "16", "--no-progress",
                "--units", "all", "--out", str(tmp_path / f"{name}.npz")]
        assert run_cli(capsys, main, argv)[0] == 0
        got.append(traces.load_trace(str(tmp_path / f"{name}.npz"))[0]["rnn"])
    with h5py.File(tmp_path / "packed.hdf5") as f:
        assert f["rnn/rnn/kernel:0"].compression == stored["compression"]
    assert np.array_equal(got[0], got[1])


@pytest.mark.parametrize("family", ["gru", "lstm"])
def test_trace_commands_read_this_file_only(capsys, tmp_path, family):
    """An external link would open (and read weights from) another file: refused before it is followed."""
    main = gru.main if family == "gru" else lstm.main
    other = _weights(tmp_path / "other.hdf5", family)

    def link(f):
        del f["embedding"]
        f["embedding"] = h5py.ExternalLink(str(other), "/embedding")
    w = _weights(tmp_path / "w.hdf5", family, edit=link)
    _one_line(capsys, main, ["--weights", str(w), "--vocab", str(_vocab(tmp_path / "v.json")), "--n-seq", "3",
                             "--seq-len", "16", "--no-progress", "--out", str(tmp_path / "t.npz")],
              "'embedding' is a link to another file")
    assert not (tmp_path / "t.npz").exists()


@pytest.mark.parametrize("family", ["gru", "lstm"])
@pytest.mark.parametrize("text, words", [("{\"a\": " + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
                                         ("{\"a\": " + "9" * 5000 + "}", "more than 4300 digits")])
def test_trace_commands_refuse_crafted_vocabularies(capsys, tmp_path, family, text, words):
    main = gru.main if family == "gru" else lstm.main
    w = _weights(tmp_path / "w.hdf5", family)
    v = _vocab(tmp_path / "v.json", text)
    rc, err = run_cli(capsys, main, ["--weights", str(w), "--vocab", str(v), "--n-seq", "3", "--seq-len", "16",
                                     "--no-progress", "--out", str(tmp_path / "t.npz")])
    lines = [li for li in err.splitlines() if li.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "v.json: not a JSON vocabulary" in lines[0] and words in lines[0], lines[0]
    assert "RecursionError" not in err and "sys.set_int_max_str_digits" not in err     # not Python's own words
    assert not (tmp_path / "t.npz").exists() and v.read_text() == text                 # nothing written, input kept


@pytest.mark.parametrize("family", ["gru", "lstm"])
def test_trace_commands_on_a_plain_file_work_and_keep_inputs(capsys, tmp_path, family):
    main = gru.main if family == "gru" else lstm.main
    w, v = _weights(tmp_path / "w.hdf5", family), _vocab(tmp_path / "v.json")
    base = ["--weights", str(w), "--vocab", str(v), "--n-seq", "3", "--seq-len", "16", "--no-progress"]
    assert run_cli(capsys, main, base + ["--units", "all", "--out", str(tmp_path / "t.npz")])[0] == 0
    got = traces.load_trace(str(tmp_path / "t.npz"))[0]["rnn"]
    assert got.shape == (3, 16, UNITS) and np.isfinite(got).all() and (got <= 0).all()
    before = w.read_bytes()
    _one_line(capsys, main, base + ["--out", str(w), "--force"], "--out", "is also --weights")
    assert w.read_bytes() == before
    _one_line(capsys, main, base + ["--n-seq", "3", "--seq-len", "100000000"], "--n-seq 3 --seq-len 100000000")


UNITS_BAD = [
    # the form is checked before the weight file is read (here one that is not HDF5 at all)
    ("1e9", True, "(not a whole number >= 0)"),
    ("-3", True, "(not a whole number >= 0)"),
    ("3,1e9", True, "(not a whole number >= 0)"),
    ("", True, "(empty)"),
    (",", True, "(no unit)"),
    # the count and the indices against the layers' 4 units
    ("1000000000", False, "units 1 .. 4 spread over each layer, or unit indices 0 .. 3 separated by commas"),
    ("0", False, "(the layers have 4 units)"),
    ("9" * 5000, False, "(the layers have 4 units)"),
    ("3,99", False, "(unit 99 is past the layers' 4 units)"),
    ("2,2", False, "(unit 2 is listed twice)"),
]


@pytest.mark.parametrize("family", ["gru", "lstm"])
@pytest.mark.parametrize("units, form, words", UNITS_BAD, ids=[c[0][:12] or "empty" for c in UNITS_BAD])
def test_trace_commands_refuse_bad_units_in_their_own_words(capsys, tmp_path, family, units, form, words):
    main = gru.main if family == "gru" else lstm.main
    w = _weights(tmp_path / "w.hdf5", family)
    if form:
        w.write_bytes(b"not an HDF5 file")
    line = _one_line(capsys, main, ["--weights", str(w), "--vocab", str(_vocab(tmp_path / "v.json")), "--n-seq", "3",
                                    "--seq-len", "16", "--no-progress", "--units", units, "--out",
                                    str(tmp_path / "t.npz")], "--units takes 'all', a number of units",
                     f"got '{units[:40]}'", words)
    assert "invalid literal" not in line and "int()" not in line and "Exceeds the limit" not in line
    assert not (tmp_path / "t.npz").exists()


@pytest.mark.parametrize("family", ["gru", "lstm"])
def test_trace_commands_keep_the_units_asked_for(capsys, tmp_path, family):
    main = gru.main if family == "gru" else lstm.main
    w, v = _weights(tmp_path / "w.hdf5", family), _vocab(tmp_path / "v.json")
    for units, want in (("3,1", [3, 1]), ("2", [0, 2]), ("2,", [2])):
        assert run_cli(capsys, main, ["--weights", str(w), "--vocab", str(v), "--n-seq", "3", "--seq-len", "16",
                                      "--no-progress", "--units", units, "--out", str(tmp_path / "t.npz"),
                                      "--force"])[0] == 0
        tr, meta = traces.load_trace(str(tmp_path / "t.npz"))[:2]
        assert meta["units"] == want and tr["rnn"].shape == (3, 16, len(want)), units


def test_gru_refuses_an_archive_it_would_ignore(capsys, tmp_path):
    w, v = _weights(tmp_path / "w.hdf5", "gru"), _vocab(tmp_path / "v.json")
    (tmp_path / "a.tar.gz").write_bytes(b"not read")
    _one_line(capsys, gru.main, ["--weights", str(w), "--vocab", str(v), "--archive", str(tmp_path / "a.tar.gz"),
                                 "--out", str(tmp_path / "t.npz")], "--archive would be ignored")
    assert not (tmp_path / "t.npz").exists()


def _archive(path, files):
    """A tar.gz holding {member name: bytes, or None for a symbolic link}."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def test_gru_archive_is_read_without_writing_beside_it(capsys, tmp_path, monkeypatch):
    """--archive: the two files read from a temporary copy, nothing written beside the archive, and a stale copy
    already there never read in their place; a member that is a link, too large or missing is refused."""
    w, v = _weights(tmp_path / "w.hdf5", "gru"), _vocab(tmp_path / "v.json")
    src = tmp_path / "src"
    src.mkdir()
    a = _archive(src / "reactionrnn-0.1.tar.gz", {gru.ARCHIVE_MEMBERS[0]: w.read_bytes(),
                                                  gru.ARCHIVE_MEMBERS[1]: v.read_bytes()})
    stale = src / "reactionrnn-0.1" / "reactionrnn"
    stale.mkdir(parents=True)
    (stale / gru.WEIGHTS_FILE).write_bytes(b"not an HDF5 file")      # would be refused if it were read
    (stale / gru.VOCAB_FILE).write_text("[]")
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    out = tmp_path / "t.npz"
    argv = ["--archive", str(a), "--n-seq", "3", "--seq-len", "16", "--units", "all", "--no-progress"]
    assert run_cli(capsys, gru.main, argv + ["--out", str(out)])[0] == 0
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before
    assert traces.load_trace(str(out))[0]["rnn"].shape == (3, 16, UNITS)
    _, _, info = gru.load_reactionrnn(archive=str(a))
    assert info["weights"] == f"{a}:{gru.ARCHIVE_MEMBERS[0]}" and info["vocab"] == f"{a}:{gru.ARCHIVE_MEMBERS[1]}"
    link = _archive(tmp_path / "link.tar.gz", {gru.ARCHIVE_MEMBERS[0]: None, gru.ARCHIVE_MEMBERS[1]: b"{}"})
    _one_line(capsys, gru.main, ["--archive", str(link), "--out", str(tmp_path / "u.npz")],
              "not a regular file", "not the reactionrnn 0.1 source archive")
    big = _archive(tmp_path / "big.tar.gz", {gru.ARCHIVE_MEMBERS[0]: b"x" * 65, gru.ARCHIVE_MEMBERS[1]: b"{}"})
    monkeypatch.setattr(gru, "ARCHIVE_MEMBER_MAX", 64)
    _one_line(capsys, gru.main, ["--archive", str(big), "--out", str(tmp_path / "u.npz")],
              f"{gru.ARCHIVE_MEMBERS[0]} is 65 bytes", "not the reactionrnn 0.1 source archive")
    half = _archive(tmp_path / "half.tar.gz", {gru.ARCHIVE_MEMBERS[1]: b"{}"})
    _one_line(capsys, gru.main, ["--archive", str(half), "--out", str(tmp_path / "u.npz")],
              "not the reactionrnn 0.1 source archive")
    assert not (tmp_path / "u.npz").exists()
