"""`python chunks.py` and `python prune.py` fed careless and hostile input: each refusal is one line naming the flag
or the file and what is wrong, exit 2, before any work; nothing is written and no input is changed. And the inputs
that are data, not mistakes (a gate that is 0 in float32, escape codes and line breaks in layer names, names of 150
characters): the run goes through, its lines within 120 columns and every name shown escaped."""
import hashlib
import json

import numpy as np
import pytest

from conftest import run_cli_out as _run
from foxwindow import outputs
from foxwindow.laws import gates
from foxwindow.models import traces
from foxwindow.uses import StoreGiven, chunks_report, fit_number, prune, record_given
from foxwindow.uses import chunks as ch
from foxwindow.uses import prune_laws as pl


def _gates(S=8, T=256, seed=0):
    """(S, T, 2) float32 log gates: head 0 iid logit-normal(1, 1), head 1 the constant gate e^-0.3."""
    x = gates.LogitNormalGate(1, 1).sample(np.random.default_rng(seed), (S, T))
    return np.stack([-x, np.full((S, T), -0.3)], -1).astype(np.float32)


def _raw(path, arrays, names, meta=None):
    """A trace file written by hand (save_trace refuses some of what these tests need)."""
    m = dict(meta or {}, format=traces.TRACE_FORMAT, names=names, shapes=[list(a.shape) for a in arrays])
    with open(path, "wb") as fh:
        np.savez(fh, meta_json=np.frombuffer(json.dumps(m).encode(), dtype=np.uint8),
                 **{f"trace_{i}": a for i, a in enumerate(arrays)})
    return str(path)


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    f = {"good": _raw(d / "good.npz", [_gates()], ["a"], {"kind": "softmax"}),
         "rec": _raw(d / "rec.npz", [_gates()], ["a"], {"kind": "recurrent"}),
         "none": _raw(d / "none.npz", [], [], {"kind": "softmax"}),
         "four": _raw(d / "four.npz", [_gates(S=4)], ["a"], {"kind": "softmax"}),
         "huge": _raw(d / "huge.npz", [np.full((8, 256, 2), -3e38, np.float32)], ["a"], {"kind": "softmax"}),
         "ctrl": _raw(d / "ctrl.npz", [_gates(), _gates(seed=1)], ["lay\x1b[31mer\nX", "b\rc"],
                      {"kind": "softmax", "model": "evil\x1b[2J\nmodel"}),
         "long": _raw(d / "long.npz", [_gates(), _gates(seed=1)], ["model.layers.0." + "x" * 150 + ".attn",
                                                                   "model.layers.1.self_attention.f_proj"],
                      {"kind": "softmax"})}
    (d / "empty.npz").write_bytes(b"")
    f["empty"] = str(d / "empty.npz")
    (d / "heads_str.json").write_text(json.dumps({"heads": "nope"}))
    (d / "heads_nodtype.json").write_text(json.dumps({"heads": [{"name": "x", "head": 0}]}))
    f["heads_str"], f["heads_nodtype"] = str(d / "heads_str.json"), str(d / "heads_nodtype.json")
    f["dir"] = str(d)
    return f


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _refused(capsys, main, argv, words, tmp_path):
    """One line on stderr holding every word, exit 2, no traceback; the inputs unchanged and nothing written."""
    ins = tmp_path / "in"
    before = _digest(ins) if ins.exists() else {}
    listing = sorted(p.name for p in tmp_path.iterdir())
    rc, _, err = _run(capsys, main, argv)
    lines = [li for li in err.strip().splitlines() if li.strip()]
    assert rc == 2, (argv, rc, err)
    assert len(lines) == 1, (argv, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Traceback" not in err and "invalid literal" not in err and "unexpected" not in err
    assert (_digest(ins) if ins.exists() else {}) == before                         # inputs untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == listing                    # nothing written, no folder made
    return lines[0]


# ----------------------------------------------------------------------------- chunks.py


CHUNKS_REFUSED = [
    (["--traces", ""], ["--traces: expected a file path", "empty"]),
    (["--traces", "{good}", "--chunks", "16", "--json", ""], ["--json: expected a file path", "empty"]),
    (["--markdown", ""], ["--markdown: expected a file path"]),
    (["--markdown", "{dir}/nosuch.json"], ["--markdown", "nosuch.json not found"]),
    (["--markdown", "{dir}"], ["--markdown", "is not a file"]),
    (["--markdown", "{heads_str}"], ["--markdown", "'heads' is str, not a list"]),
    (["--markdown", "{heads_nodtype}"], ["--markdown", "heads[0]: 'dtype' is missing"]),
    (["--markdown", "{heads_str}", "--json", "{out}/c.json"], ["--markdown", "--json would be ignored"]),
    (["--traces", "{good}", "--chunks", "16", "--dtypes", "float32", "float32"], ["--dtypes: float32 given more"]),
    (["--gate-range", "-1", "0", "--chunks", "99999999999999999999999"], ["--chunks: 99999999999999999999999",
                                                                           "beyond any chunked kernel"]),
    (["--n-seq", "1000000000"], ["--n-seq 1000000000 x --seq-len 2048", "held-out text holds"]),
    (["--seq-len", "0"], ["--seq-len must be >= 1"]),
    (["--seq-len", "8", "--n-seq", "2", "--chunks", "16"], ["--seq-len 8 is shorter than the largest of --chunks"]),
    (["--traces", "{good}", "--chunks", "16", "--seq-len", "64"], ["--seq-len", "--traces analyses the file's own",
                                                                   "ignored"]),
    (["--synthetic", "--chunks", "16"], ["--chunks", "--synthetic runs its fixed", "ignored"]),
    (["--synthetic", "--op"], ["--op", "--synthetic", "ignored"]),
    (["--gate-range", "-1", "0", "--risk", "0.1"], ["--risk", "a gate range alone", "ignored"]),
    (["--gate-range", "-1", "0", "--chunks", "16", "--sub-chunk", "32"], ["--sub-chunk 32 is longer"]),
    (["--a-log-range", "0", "1", "--dt-raw-range", "0", "1e308"], ["--a-log-range 0 1 --dt-raw-range", "float64"]),
    (["--a-log-range", "0", "1"], ["--a-log-range needs one of --dt-range", "--dt-raw-range"]),
    (["--a-log-range", "nan", "1", "--dt-range", "0", "1"], ["--a-log-range needs finite LO <= HI", "nan"]),
    (["--traces", "{none}", "--chunks", "16"], ["--traces", "holds no traces"]),
    (["--traces", "{empty}", "--chunks", "16"], ["--traces", "is empty (0 bytes)"]),
    (["--traces", "{good}", "--chunks", "16", "1024"], ["--chunks: 1024 exceeds the trace length T = 256"]),
]


@pytest.mark.parametrize("argv, words", CHUNKS_REFUSED)
def test_chunks_refuses_in_one_line_and_writes_nothing(argv, words, files, capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fill = dict(files, out=str(out))
    argv = [a.format(**fill) for a in argv]
    if "--json" not in argv and "--markdown" not in argv:
        argv += ["--json", str(out / "c.json")]                           # an output that must not appear
    _refused(capsys, chunks_report.main, argv, words, tmp_path)
    assert list(out.iterdir()) == []


def test_chunks_on_a_gate_that_is_zero_in_float32(files, capsys):
    """log g = -3e38 (g = 0 in every float format): every chunk overflows (it crashed on the lattice's int64 cast)."""
    rc, out, err = _run(capsys, chunks_report.main, ["--traces", files["huge"], "--chunks", "16", "32"])
    assert rc == 0, err
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["a:0"], ["a:1"])]
    assert len(rows) == 6 and all(r[3:6] == ["pred", "1", "1"] for r in rows)     # predicted P = 1 at C = 16, 32
    assert all(r[2] == "3.0e+38" for r in rows)                                   # kappa in its 7 columns
    assert max(map(len, out.splitlines())) <= 120


def test_chunks_long_and_escaped_names_keep_the_table_within_120_columns(files, capsys):
    rc, out, err = _run(capsys, chunks_report.main, ["--traces", files["long"], "--chunks", "16", "32", "64", "128",
                                                     "256"])
    assert rc == 0, err
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120, max(map(len, lines))
    # one row a dtype in each of the two blocks of chunk columns (the wide head column leaves room for four)
    assert sum(line.lstrip().startswith("...") and "x.attn:0 " in line for line in lines) == 6
    assert any("model.layers.1.self_attention.f_proj:1 " in line for line in lines)
    rc, out, err = _run(capsys, chunks_report.main, ["--traces", files["ctrl"], "--chunks", "16", "32"])
    assert rc == 0, err
    assert "\x1b" not in out and "\r" not in out
    limiting = [line for line in out.splitlines() if "limiting:" in line]
    assert limiting and any("lay\\x1b[31mer" in line for line in limiting)


def test_chunks_gate_range_alone_takes_any_chunk_size(capsys):
    """--block belongs to the trace prediction: a gate range alone takes --chunks 12 (refused before as not a multiple
    of the default --block 8); with traces the multiple is still required."""
    rc, out, err = _run(capsys, chunks_report.main, ["--gate-range", "-1", "0", "--chunks", "12"])
    assert rc == 0, err
    assert "C=12 " in out


def test_atoms_on_the_lattice_unchanged_and_safe_past_int64():
    rng = np.random.default_rng(1)
    for _ in range(20):
        v = rng.exponential(rng.uniform(0.1, 30), size=int(rng.integers(1, 3000)))
        h, K = rng.uniform(0.001, 0.1), int(rng.integers(10, 5000))
        for mode, f in (("floor", np.floor), ("ceil", np.ceil), ("nearest", np.rint)):
            idx = f(v / h).astype(np.int64)
            old = np.bincount(idx[idx < K], minlength=K)[:K] / len(v)
            assert np.array_equal(ch._atoms_pmf(v, h, K, mode), old)
    pmf = ch._atoms_pmf(np.array([3e38, 1.0]), 0.01, 1000, "nearest")
    assert pmf.sum() == 0.5 and pmf[100] == 0.5                                    # the huge step: past every cell


# ----------------------------------------------------------------------------- prune.py


PRUNE_REFUSED = [
    (["--traces", "{good}", "--U", "0", "--tol", "0.1", "0.1"], ["--tol: 0.1 given more than once"]),
    (["--traces", "{good}", "--U", "0", "--log-tol", "-4", "-4"], ["--log-tol: -4 given more than once"]),
    (["--traces", "{good}", "--U", "0", "--log-tol", "-1e9"], ["--log-tol -1e+09", "smallest normal float64"]),
    (["--traces", "{good}", "--U", "0", "--tol", "1e-310"], ["--tol 1e-310", "smallest normal float64"]),
    (["--traces", "{good}", "--U", "1e300"], ["--U 1e+300 is beyond any attention logit bound", "at most 1000"]),
    (["--traces", "{good}", "--U", "0", "--block", "99999999999999999999999"],
     ["--block 99999999999999999999999", "exceeds the trace length T = 256"]),
    (["--traces", "{good}", "--U", "0", "--block", "512"], ["--block 512", "exceeds the trace length T = 256"]),
    (["--seed", "-1"], ["--seed must be >= 0; got -1"]),
    (["--traces", "{good}", "--U", "0", "--seed", "3"], ["--seed cannot be used with --traces"]),
    (["--traces", "{good}", "--U", "0", "--threads", "100000"], ["--threads 100000", "give 1 to"]),
    (["--n-seq", "3", "--workers", "1"], ["--workers applies to --traces only"]),
    (["--traces", "{good}", "--U", "0", "--context", "99999999999999999999"], ["--context", "at most 2^53"]),
    (["--n-seq", "1000000"], ["--n-seq 1000000 x --seq-len 1024", "held-out text holds"]),
    (["--n-seq", "3", "--decode-seqs", "100"], ["--decode-seqs 100 exceeds --n-seq 3"]),
    (["--n-seq", "2"], ["--n-seq must be >= 3"]),
    (["--n-seq", "3", "--seq-len", "32"], ["--block 64 64", "exceeds --seq-len 32"]),
    (["--checkpoint", "{good}"], ["--checkpoint", "is a gate trace file", "--traces"]),
    (["--traces", ""], ["--traces: expected a path"]),
    (["--traces", "{good}", "--U", "0", "--json", ""], ["--json: expected a path"]),
    (["--traces", "{good}", "--U", "0", "--out", ""], ["--out: expected a path"]),
    (["--traces", "{empty}", "--U", "0"], ["--traces", "is empty (0 bytes)"]),
    (["--traces", "{none}", "--U", "0"], ["--traces", "holds no traces"]),
    (["--traces", "{four}", "--U", "0"], ["--traces", "holds 4 sequences", "at least 6"]),
    (["--traces", "{rec}", "--U", "5"], ["--U", "recurrent model", "ignored"]),
    (["--traces", "{rec}", "--block", "8"], ["--block", "recurrent model", "ignored"]),
]


@pytest.mark.parametrize("argv, words", PRUNE_REFUSED)
def test_prune_refuses_in_one_line_and_writes_nothing(argv, words, files, capsys, tmp_path):
    argv = [a.format(**files) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "P")]                            # a folder that must not appear
    _refused(capsys, prune.main, argv, words, tmp_path)
    assert not (tmp_path / "P").exists()


def test_prune_report_shows_names_escaped_in_the_file_too(files, tmp_path, capsys):
    out = tmp_path / "P"
    rc, printed, err = _run(capsys, prune.main, ["--traces", files["ctrl"], "--U", "0", "--log-tol", "-4", "--block",
                                                 "32", "--out", str(out), "--no-progress"])
    assert rc == 0, err
    txt = (out / "prune.txt").read_text()
    for text in (printed, txt):
        assert "\x1b" not in text and "\r" not in text
        flat = " ".join(text.split())                                           # the prose is wrapped
        assert "lay\\x1b[31mer\\nX" in flat and "evil\\x1b[2J\\nmodel" in flat
        assert max(map(len, text.splitlines())) <= 120
    assert json.loads((out / "prune.json").read_text())["heads"][0]["layer_name"] == "lay\x1b[31mer\nX"   # data


def test_prune_report_of_extreme_values_keeps_120_columns(files, tmp_path, capsys):
    rc, out, err = _run(capsys, prune.main, ["--traces", files["huge"], "--U", "1000", "--log-tol", "-4", "--block",
                                             "32", "--out", str(tmp_path / "P"), "--no-progress"])
    assert rc == 0, err
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120, max(map(len, lines))
    row = next(line for line in lines if line.startswith(" 0.0 "))
    assert row.split()[1:2] == ["3.0e+38"] and "1000.00" not in row and "1e+03" in row


def test_prune_decode_seqs_default_follows_a_small_n_seq(monkeypatch, tmp_path):
    """--n-seq 3 alone: the default of 4 decoded sequences becomes 3 (a default, not a value given); a value given
    above --n-seq is refused (test above), never cut down."""
    from foxwindow import outputs
    seen = {}

    def stop(*a, **k):
        seen.update(k)
        raise KeyboardInterrupt
    monkeypatch.setattr(prune, "analyse_model", stop)
    with pytest.raises(KeyboardInterrupt), outputs.scope():
        prune.run(["--n-seq", "3", "--seq-len", "128", "--out", str(tmp_path / "P")])
    assert seen["decode_seqs"] == 3 and seen["seed"] == 0


def test_window_quantile_beyond_int64_is_a_value_error():
    law = pl.HeadLaw.from_gate(gates.ConstantGate(0.1))
    with pytest.raises(ValueError, match="beyond 2\\^62 steps"):
        pl.window_quantile(law, 1e300)
    assert pl.window_quantile(law, 5.35).h == 53                                    # floor(L / kappa), as before


# ----------------------------------------------------------------------------- the shared pieces


def test_record_given_keeps_the_last_value_and_records_what_was_given():
    p = record_given(outputs.parser("x"))
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--v", type=float, nargs="+")
    p.add_argument("--flag", action="store_true")
    a = p.parse_args(["--n", "4", "--flag"])
    assert a.n == 4 and a.given_flags == {"n"} and isinstance(p._option_string_actions["--n"], StoreGiven)
    a = p.parse_args(["--v", "1", "2", "--n", "1", "--v", "3"])           # the last counts, as in every command
    assert a.v == [3.0] and a.n == 1 and a.given_flags == {"n", "v"}
    assert not hasattr(p.parse_args([]), "given_flags") or p.parse_args([]).given_flags == set()
    assert p.parse_args(["--flag", "--flag"]).flag


def test_fit_number_is_the_plain_format_where_it_fits():
    for v, w, p in ((0.4173, 7, 4), (22.16, 6, 2), (64.3, 5, 1), (-0.005, 6, 3), (999.99, 6, 2)):
        assert fit_number(v, w, p) == f"{v:{w}.{p}f}"
    assert fit_number(3e38, 7, 4) == "3.0e+38" and len(fit_number(1000.0, 6, 2)) == 6
