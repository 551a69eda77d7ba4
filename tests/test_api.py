"""The public API: `import foxwindow` loads nothing heavy and exports its documented names on first use;
analyse() takes a trace file, a mapping, an array or a model and returns one result type; a model's gates are
captured on the CPU through the CPU fallbacks (fla's Triton-only ops included)."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO
from foxwindow.heads import table
from foxwindow.heads.result import HeadsResult
from foxwindow.laws import gates
from foxwindow.models import adapters, traces


def _lg(S=6, T=400, H=2, seed=0):
    return -gates.LogitNormalGate(2, 0.5).sample(np.random.default_rng(seed), (S, T, H))


def test_import_is_light_and_the_names_are_documented():
    code = ("import sys, foxwindow; heavy = [m for m in ('torch', 'numpy', 'scipy', 'numba') if m in sys.modules]; "
            "print(heavy, len(foxwindow.__all__), all(n in foxwindow.__doc__ for n in foxwindow.__all__), "
            "foxwindow.__version__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "17", "True", "0.3.0"], out
    import foxwindow
    for name in foxwindow.__all__:
        assert getattr(foxwindow, name) is not None
    with pytest.raises(AttributeError):
        foxwindow.nothing_of_that_name


def test_analyse_takes_a_mapping_an_array_a_file_and_a_model(tmp_path):
    import foxwindow
    lg = _lg()
    a = foxwindow.analyse({"l0": lg}, eps=[1e-2, 1e-3], n_boot=50, seed=2)
    b = foxwindow.analyse(lg, eps=[1e-2, 1e-3], n_boot=50, seed=2)
    path = traces.save_trace(str(tmp_path / "t.npz"), {"l0": torch.from_numpy(lg).float()}, {"model": "mine"})
    c = foxwindow.analyse(path or str(tmp_path / "t.npz"), eps=[1e-2, 1e-3], n_boot=50, seed=2)
    for r in (a, b, c):
        assert isinstance(r, foxwindow.HeadsResult) and len(r.heads) == 2
        rec = r.at(eps=1e-3)
        assert [x["head"] for x in rec] == [0, 1] and rec[0]["L"] == pytest.approx(gates.threshold(1e-3))
    assert a.at(eps=1e-3)[0]["measured"]["mean"] == b.at(eps=1e-3)[0]["measured"]["mean"]
    assert c.at(L=gates.threshold(1e-3))[0]["measured"]["mean"] == pytest.approx(
        a.at(eps=1e-3)[0]["measured"]["mean"], rel=1e-6)
    assert set(a.at(eps=1e-3)[0]["laws"]) >= {"iid", "bootstrap"}
    label = a.to_json()["heads"][1]["label"]
    assert a.plot(head=label, eps=1e-3).axes and a.plot_overview(eps=1e-3).axes   # matplotlib figures
    with pytest.raises(KeyError, match="not in the scan"):
        a.at(eps=1e-4)
    doc = json.loads(json.dumps(a.to_json()))
    assert doc["schema_version"] == 1 and doc["foxwindow_version"] == foxwindow.__version__ and doc["kind"] == "heads"
    text = a.table()
    assert "held-out sequences" not in text and "eps = nan" not in text and "6 sequences x 400 tokens" in text
    rep = repr(a)                                  # the laws' summary of the table's last line, not a verdict
    assert rep.startswith("HeadsResult(2 heads") and "pre-asymptotic" not in rep
    from foxwindow.heads import table as heads_table
    vl, false = heads_table.summary_counts(a.heads)
    assert sum(vl.values()) == 2 and all(f"{k} {c}" in rep for k, c in {**vl, **false}.items())
    assert "variance explained by " + ", ".join(f"{k}: {c}" for k, c in vl.items()) in " ".join(text.split())
    assert repr(type(a)([], {})) == "HeadsResult(0 heads, no thresholds)"
    net = torch.nn.LSTM(3, 4, batch_first=True).eval()
    d = foxwindow.analyse(net, tokens=torch.randn(4, 300, 3), eps=1e-2, n_boot=0, seed=0)
    assert len(d.heads) == 4                                   # one per LSTM unit
    with pytest.raises(ValueError, match="tokens="):
        foxwindow.analyse(net, eps=1e-2)


def test_analyse_refuses_bad_arrays_before_any_work():
    """Every malformed input to analyse() gets one ValueError naming the layer and the problem, before a head is
    analysed: dtype, emptiness, shape, layout, layers that disagree, values (checked per head)."""
    import foxwindow
    lg = _lg(S=6, T=64, H=1)
    nan = lg.copy()
    nan[2, 5, 0] = np.nan
    cases = [({"l": lg.astype(np.int64)}, "real floating-point.*int64"),
             ({"l": lg.astype(np.complex128)}, "real floating-point.*complex128"),
             ({"l": lg > 0}, "real floating-point.*bool"),
             ({"l": torch.zeros(6, 64, 1, dtype=torch.int32)}, "floating point.*int32"),
             ({"l": [[0.0, -1.0], [-1.0]]}, "'l' are not one array"),
             ({"l": lg[:0]}, r"'l' are empty: shape \(S, T, H\) = \(0, 64, 1\)"),
             ({"l": lg[:, :, :0]}, "'l' are empty"),
             ({"l": lg[None]}, "must be \\(S, T, H\\)"),
             ({"l": lg[:2]}, "holds 2 sequences; the jackknife needs at least 3"),
             ({"l": lg.transpose(0, 2, 1)}, "T >= max"),
             ({"a": lg, "b": lg[:, :32]}, "layers disagree"),
             ({"a\x1b[31m": lg[:, :8]}, "trace 'a\\\\x1b\\[31m'"),
             ({}, "mapping is empty"),
             ({"l": nan}, "NaN"),
             ({"l": -lg}, "<= 0")]
    for x, msg in cases:
        with pytest.raises(ValueError, match=msg):
            foxwindow.analyse(x, eps=1e-2, n_boot=0, seed=0)
    for seed in ("a", -1, 1.5, True):
        with pytest.raises(ValueError, match="seed must be None or an integer >= 0"):
            foxwindow.analyse({"l": lg}, eps=1e-2, n_boot=0, seed=seed)
    r = foxwindow.analyse({"l": torch.from_numpy(lg).to(torch.bfloat16)}, eps=1e-2, n_boot=0, seed=0)
    assert len(r.heads) == 1                                     # bfloat16 read exactly as float32
    r16 = foxwindow.analyse({"l": lg.astype(np.float16)}, eps=1e-2, n_boot=0, seed=0)
    assert len(r16.heads) == 1
    # a capture's layout is its own: more units than tokens is an LSTM of 40 units on 30 tokens, not a transpose
    net = torch.nn.LSTM(3, 40, batch_first=True).eval()
    assert len(foxwindow.analyse(net, tokens=torch.randn(4, 30, 3), eps=1e-2, n_boot=0, seed=0).heads) == 40
    with pytest.raises(ValueError, match="T >= max"):
        foxwindow.analyse({"l": _lg(S=4, T=30, H=40)}, eps=1e-2, n_boot=0, seed=0)


def test_analyse_checks_every_value_first_and_names_the_head(monkeypatch):
    """A bad value in the last head of the last layer stops analyse() before the first head is analysed, naming
    the layer and the head; so do log-gates beyond float32's range (their sums would overflow float64)."""
    import foxwindow
    from foxwindow.heads import driver
    lg = _lg(S=6, T=64, H=3)
    bad = lg.copy()
    bad[5, 63, 2] = np.nan
    calls = []
    monkeypatch.setattr(driver, "_analyse_x", lambda *a, **k: calls.append(1))
    with pytest.raises(ValueError, match=r"'b', head 2: log-gates contain NaN"):
        foxwindow.analyse({"a": lg, "b": bad}, eps=1e-2, n_boot=0, seed=0)
    with pytest.raises(ValueError, match=r"'layer0', head 0: log-gates must be >= -3.4e\+38.*min is -1e\+300"):
        foxwindow.analyse(np.full((6, 64, 1), -1e300), eps=1e-2, n_boot=0, seed=0)
    with pytest.raises(ValueError, match="eps: 0.01 is given twice"):
        foxwindow.analyse({"a": lg}, eps=[1e-2, 1e-3, 1e-2], n_boot=0, seed=0)
    assert calls == []


def test_at_finds_a_float32_eps_and_says_what_the_scan_holds():
    import foxwindow
    r = foxwindow.analyse({"a": _lg(S=6, T=256, H=1)}, eps=np.array([1e-2, 1e-3], np.float32), n_boot=0, seed=0)
    assert r.at(eps=1e-3)[0]["eps"] == pytest.approx(1e-3, rel=1e-6)
    assert r.at(eps=np.float32(1e-2))[0]["eps"] == pytest.approx(1e-2, rel=1e-6)
    with pytest.raises(KeyError, match=r"eps = 0.002 .* not in the scan \(eps = 0.01, 0.001\)"):
        r.at(eps=2e-3)
    with pytest.raises(TypeError):
        r.plot("0.0", 1e-3)                                     # the threshold by keyword only
    assert r.plot(head="0.0", L=r.L[0]).axes and r.plot_overview(eps=1e-2).axes
    assert "at --eps 0.001" not in r.table() and "at --eps 0.005" not in r.table()
    assert r.table(eps=np.float32(1e-3)) == r.table()                 # in the scan: the table's own column
    with pytest.raises(KeyError, match=r"eps = 0.0001 .* not in the scan \(eps = 0.01, 0.001\)"):
        r.table(eps=1e-4)                                       # not in the scan: said, not ignored
    r5 = foxwindow.analyse({"a": _lg(S=6, T=256, H=1)}, eps=[5e-3], n_boot=0, seed=0)
    assert "at --eps 0.005 (L = 5.298)" in r5.table()           # a scan without the table's columns: its own block
    r3 = foxwindow.analyse({"a": _lg(S=3, T=256, H=1)}, eps=[1e-2], n_boot=0, seed=0)   # too few to fit and score
    assert "no law evaluated: every head has fewer than 4 documents" in r3.table()
    with pytest.raises(KeyError, match="no per-eps records .* at least 4 documents"):
        r3.at(eps=1e-2)
    for draw in (r3.plot_laws, r3.plot, r3.plot_overview):
        with pytest.raises(ValueError, match="no per-eps records to draw"):
            draw()


def test_plots_take_layers_by_the_names_the_result_gives_them():
    """plot(head=(layer, head)) takes the layer by its name in `layers` and the table ("attn") or by its number in
    the labels (1); plot_overview / plot_laws take one layer name as a string, not as its characters; an unknown
    layer is refused naming the result's layers."""
    import foxwindow
    r = foxwindow.analyse({"attn": _lg(T=256, seed=0), "mlp": _lg(T=256, seed=1)}, eps=[1e-2, 1e-3], n_boot=0,
                          seed=0)
    assert [h["layer"] for h in r.to_json()["heads"]] == ["attn", "attn", "mlp", "mlp"]
    for head, label in ((("mlp", 1), "1.1"), (("attn", 1), "0.1"), ((1, 0), "1.0"), ((np.int64(0), 0), "0.0"),
                        ("1.0", "1.0")):
        assert r.plot(head=head).get_suptitle().startswith(f"head {label}:"), head
    with pytest.raises(ValueError, match=r"no layer 'mlpx' in this result; its layers: 'attn', 'mlp' \(numbered "
                                         r"0, 1 in the labels\)"):
        r.plot(head=("mlpx", 1))
    with pytest.raises(ValueError, match="no layer 5 in this result; its layers: 'attn', 'mlp'"):
        r.plot(head=(5, 0))
    with pytest.raises(ValueError, match=r"layer 'mlp' has no head 2 \(heads 0..1\)"):
        r.plot(head=("mlp", 2))
    with pytest.raises(TypeError, match=r"head=\(layer, head\): the head must be an integer index; got '1'"):
        r.plot(head=("mlp", "1"))
    for draw in (r.plot_overview, r.plot_laws):
        one, both = draw(layers="mlp"), draw(layers=["attn", "mlp"])
        assert "2 heads" in one.get_suptitle() and "4 heads" in both.get_suptitle()
        with pytest.raises(ValueError, match=r"no heads to draw in layers \['mlpx'\]: the result's layers are "
                                             "'attn', 'mlp'"):
            draw(layers="mlpx")
        with pytest.raises(ValueError, match=r"in layers \['x'\]"):
            draw(layers=["mlp", "x"])                       # one unknown name among known ones: said, not dropped
        with pytest.raises(TypeError, match="layers must be a layer name or a sequence of names; got int 1"):
            draw(layers=1)


def test_analyse_speaks_of_tokens_and_of_the_array_given(monkeypatch):
    """A model's tokens are checked before the capture, the error naming tokens= and what it must be; tokens=
    with traces is refused, not ignored; a (T, H) array of one sequence is told how it is read and what x[None]
    gives."""
    import foxwindow
    from foxwindow.heads import driver
    from foxwindow.models import hf_capture
    net = torch.nn.LSTM(3, 4, batch_first=True).eval()
    captured, analysed = [], []
    real = hf_capture.capture_traces
    monkeypatch.setattr(hf_capture, "capture_traces", lambda *a, **k: (captured.append(1), real(*a, **k))[1])
    monkeypatch.setattr(driver, "_analyse_x", lambda *a, **k: analysed.append(1))
    want = r"tokens must be \(S, T\) token ids, int64 \(floats \(S, T, features\) for a model that takes features"
    for tokens, msg in (((6, 3), want + r".*got a tuple of shape \(2,\) \(a tuple of ints is read as the ids, not "
                         r"as a shape: torch.randint\(vocab, \(6, 3\)\)"),
                        (torch.zeros(6, 3, dtype=torch.long), want + r".*S >= 3 sequences .* and T >= max\(S, 4\) "
                         r"tokens each; got shape \(6, 3\) \(S = 6, T = 3\)"),
                        (torch.randn(2, 30, 3), r"got shape \(2, 30, 3\) \(S = 2, T = 30\)"),
                        ([[1, 2, 3, 4], [1, 2]], want + ".*got a list that is not one array"),
                        (np.zeros((4, 30), bool), want + ".*got dtype bool")):
        with pytest.raises(ValueError, match=msg) as info:
            foxwindow.analyse(net, tokens=tokens, eps=1e-2, n_boot=0, seed=0)
        assert "lg" not in str(info.value).split() and "transpose" not in str(info.value)
    assert captured == []
    lg = _lg(S=6, T=400, H=2)
    for x, kind in ((lg, "an array of log-gates"), ({"l": lg}, "a mapping of traces"),
                    ("no/such/file.npz", "a trace file path")):
        with pytest.raises(ValueError, match=f"tokens= is for a model .*; x is {kind}.*: drop tokens="):
            foxwindow.analyse(x, tokens=torch.zeros(4, 30, dtype=torch.long), eps=1e-2, n_boot=0, seed=0)
    with pytest.raises(ValueError, match=r"'layer0': a 2-D array is read as \(S, T\), S sequences of one head; got "
                                         r"shape \(400, 2\), 400 sequences x 2 tokens.*If it is \(T, H\), one "
                                         r"sequence of H heads, x\[None\] makes it \(1, T, H\)"):
        foxwindow.analyse(lg[0], eps=1e-2, n_boot=0, seed=0)
    assert analysed == []


def test_analyse_checks_a_whole_trace_file_before_any_head(tmp_path, monkeypatch):
    """A trace file's bad value in its last head is found before the first head is analysed."""
    import foxwindow
    from foxwindow.heads import driver
    lg = _lg(S=6, T=64, H=3)
    bad = lg.copy()
    bad[5, 63, 2] = np.nan
    path = str(tmp_path / "t.npz")                                  # written by hand: save_trace refuses a NaN
    meta = dict(format=traces.TRACE_FORMAT, names=["a", "b"], shapes=[list(lg.shape)] * 2)
    np.savez(path, meta_json=np.frombuffer(json.dumps(meta).encode(), np.uint8), trace_0=lg, trace_1=bad)
    analysed = []
    real = driver.increments                                        # each head's first step
    monkeypatch.setattr(driver, "increments", lambda *a, **k: (analysed.append(1), real(*a, **k))[1])
    with pytest.raises(ValueError, match="trace 'b' has NaN"):
        foxwindow.analyse(path, eps=1e-2, n_boot=0, seed=0)
    assert not analysed


def test_print_table_on_user_data_without_info(capsys):
    from foxwindow.heads import driver
    results, _ = driver.analyse_layers({"l0": _lg()}, eps=[1e-2, 1e-3], n_boot=0, seed=0)
    table.print_table(results, {})
    out = capsys.readouterr().out
    assert "eps = nan" not in out and out.startswith("Per-head window laws: user data, 6 held-out sequences")


def test_the_summary_names_the_eps_it_read(capsys):
    """The summary reads only the eps of 1e-2 ... 1e-4 that were analysed: it lists them when they are not the
    scan's five, and says nothing of any law (not "explained by no law") when none was."""
    from foxwindow.heads import driver
    for eps, band in (([1e-1], None), ([1e-2, 1e-3], "eps 0.01, 0.001"), (None, "eps 1e-2..1e-4")):
        results, _ = driver.analyse_layers({"l0": _lg()}, eps=eps, n_boot=0, seed=0)
        assert table.summary_band(results) == band
        table.print_table(results, {})
        out = capsys.readouterr().out
        last = " ".join(out[out.rindex("\nsummary") + len("\nsummary"):].split())
        rep = repr(HeadsResult(results, {}))
        if band is None:
            assert last.startswith(": no eps of 1e-2..1e-4 analysed") and "explained" not in last
            assert rep.endswith("no eps of 1e-2..1e-4 analysed)")
            assert all(r.summary["text"] == "no eps of 0.01..0.0001 analysed" and r.summary["var_law"] is None
                       for r in results)
        else:
            assert last.startswith(f"({band}): variance explained by ") and f"at {band} Var[W] explained by" in rep
    few, _ = driver.analyse_layers({"l0": _lg()[:3]}, eps=[1e-2], n_boot=0, seed=0)     # below MIN_DOCS: no law
    assert table.summary_band(few) is None and not any(r.laws for r in few)
    table.print_table(few, {})
    out = " ".join(capsys.readouterr().out.split())
    assert "summary: no law evaluated: every head has fewer than 4 documents" in out
    assert "no law evaluated: every head has fewer than 4 documents)" in repr(HeadsResult(few, {}))


def test_a_trace_files_family_names_its_rows(tmp_path):
    """forget.py --traces: the family the trace file states (a GRU's "keras-gru") is the JSON's source family, and
    a recurrent family's row is a unit; a file that states none is of an unknown family, read by heads."""
    from foxwindow.heads import driver
    for meta, fam, unit in (({"family": "keras-gru"}, "keras-gru", "unit"), ({"family": "torch-lstm"}, "lstm", "unit"),
                            ({}, "unknown", "head")):
        path = str(tmp_path / f"t{len(meta)}{fam}.npz")
        traces.save_trace(path, {"rnn": _lg()}, meta)
        results, info = driver.analyse_traces(path, eps=[1e-2], n_boot=0, seed=0)
        src = HeadsResult(results, info).to_json()["source"]
        assert (src["family"], src["unit"]) == (fam, unit), meta


def test_capture_of_an_fla_model_on_the_cpu():
    fla_models = pytest.importorskip("fla.models")
    import foxwindow
    cfg = fla_models.ForgettingTransformerConfig(hidden_size=32, num_hidden_layers=2, num_heads=2, vocab_size=64,
                                                 fuse_norm=False, fuse_swiglu=False, fuse_cross_entropy=False)
    model = fla_models.ForgettingTransformerForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (3, 40), generator=torch.Generator().manual_seed(0))
    cap = adapters.capture_log_decays(model, ids)               # the CPU fallbacks, not Triton's "0 active drivers"
    assert sorted(cap.decays) == ["model.layers.0.attn", "model.layers.1.attn"]
    tr = foxwindow.capture_traces(model, ids, batch=2)
    assert {k: tuple(v.shape) for k, v in tr.items()} == {k: (3, 40, 2) for k in cap.decays}
    assert torch.allclose(tr["model.layers.0.attn"], cap.decays["model.layers.0.attn"], atol=1e-6)


def test_every_first_passage_result_has_the_same_fields():
    from foxwindow.laws import exact, markov
    iid = exact.exact_first_passage(gates.LogitNormalGate(2, 0.5), eps=1e-3)
    ar1 = exact.markov_first_passage(gates.AR1LogitGate(2, 0.5, 0.5), eps=1e-3)[0]
    chain = markov.ar1_passage(gates.AR1LogitGate(2, 0.5, 0.5), np.array([gates.threshold(1e-3)]))[0]
    for r in (iid, ar1, chain):
        for f in ("mean", "var", "mean_err", "var_err", "survival", "offset", "pmf", "eps", "L"):
            assert getattr(r, f) is not None, (type(r).__name__, f)
        w = r.offset + np.arange(len(r.pmf))
        assert float(np.dot(w, r.pmf)) == pytest.approx(r.mean, rel=1e-4)      # the pmf of W, from offset
        assert r.quantile(0.05) <= r.quantile(0.5) <= r.quantile(0.95)
        assert abs(r.quantile(0.5) - r.mean) < 3 * r.var ** 0.5
