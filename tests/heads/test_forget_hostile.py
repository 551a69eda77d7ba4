"""`python forget.py` fed careless and hostile flags: each refusal is one line naming the flag and what is allowed,
exit 2, before any capture or analysis; a flag the chosen source of gates would not read is refused, not dropped;
a run stopped before any head finished prints and writes nothing."""
import json

import numpy as np
import pytest

from conftest import run_cli_out
from foxwindow.heads import command, driver, hf_run
from foxwindow.laws import gates, lawtable
from foxwindow.models import traces


@pytest.fixture
def trace_file(tmp_path):
    """A small trace file: one layer of (6 sequences, 128 tokens, 2 heads) log gates."""
    x = gates.LogitNormalGate(1, 1).sample(np.random.default_rng(0), (6, 128, 2))
    path = tmp_path / "t.npz"
    traces.save_trace(str(path), {"a": (-x).astype(np.float32)}, {"model": "test"})
    return str(path)


@pytest.fixture
def started(monkeypatch):
    """The analyses forget.py runs (the shipped model's, a trace file's, --model's, --synthetic's), replaced by
    stand-ins that record their start and stop: a refusal that comes after the work began shows in the list."""
    seen = []

    def stand_in(name):
        def run(*a, **k):
            seen.append(name)
            raise RuntimeError(f"{name} started")
        return run
    for mod, name in ((command, "analyse_model"), (command, "analyse_traces"), (hf_run, "main_hf_model"),
                      (lawtable, "synthetic_table")):
        monkeypatch.setattr(mod, name, stand_in(name))
    return seen


def _refused(capsys, argv, *words):
    rc, out, err = run_cli_out(capsys, command.main, argv)
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Per-head" not in out and "gate" not in out
    return lines[0]


@pytest.mark.parametrize("eps", ["1e-320", "1e-310", "5e-324"])
def test_an_eps_below_the_normal_floats_is_named_as_eps(capsys, eps):
    line = _refused(capsys, ["--eps", eps, "--synthetic", "--trials", "2", "--no-progress"], "--eps", "2.225e-308")
    assert "give L" not in line                 # there is no --L flag to give


@pytest.mark.parametrize("flag", ["--json", "--report", "--save-traces", "--checkpoint", "--traces", "--tokenizer",
                                  "--text"])
def test_an_empty_path_is_refused_not_read_as_none(capsys, tmp_path, flag):
    # --json "" had run the table and written nothing; --traces "" had analysed the shipped model instead
    _refused(capsys, ["--synthetic", "--trials", "2", "--no-progress", flag, ""], flag, "empty")


@pytest.mark.parametrize("argv, words", [
    (["--synthetic", "--trials", "2", "--n-seq", "5"], ["--n-seq", "--synthetic"]),
    (["--synthetic", "--trials", "2", "--seq-len", "2048"], ["--seq-len", "--synthetic"]),
    (["--synthetic", "--trials", "2", "--device", "cpu"], ["--device", "--synthetic"]),
    (["--synthetic", "--trials", "2", "--workers", "2", "--max-minutes", "5"], ["--workers and --max-minutes"]),
    (["--trials", "5", "--n-seq", "2"], ["--trials", "the shipped model", "--synthetic"]),
    (["--model", "no/such/folder", "--trials", "5"], ["--trials", "--model"]),
])
def test_a_flag_the_source_does_not_read_is_refused(capsys, started, argv, words):
    _refused(capsys, [*argv, "--no-progress"], *words, "drop")
    assert started == []


@pytest.mark.parametrize("more, words", [
    (["--trials", "5"], ["--trials", "--traces"]),
    (["--device", "cpu"], ["--device", "--traces"]),
    (["--n-seq", "32"], ["--n-seq", "trace file"]),          # the default value, typed: still ignored
    (["--seq-len", "2048"], ["--seq-len", "trace file"]),
])
def test_a_flag_traces_do_not_read_is_refused(capsys, started, trace_file, more, words):
    _refused(capsys, ["--traces", trace_file, "--n-boot", "0", "--no-progress", *more], *words)
    assert started == []


@pytest.mark.parametrize("source", ["traces", "model"])
def test_bootstrap_draws_past_the_memory_are_refused_before_the_work(capsys, started, trace_file, source):
    argv = ["--traces", trace_file] if source == "traces" else ["--model", "no/such/folder"]
    line = _refused(capsys, [*argv, "--n-boot", str(10 ** 15), "--no-progress"], "--n-boot", "GiB")
    S = 6 if source == "traces" else 32                   # the trace file's sequences; --model's default --n-seq
    assert started == [] and f"over {S} sequences" in line


def test_a_run_stopped_before_any_head_prints_and_writes_nothing(capsys, trace_file, tmp_path, monkeypatch):
    earlier = tmp_path / "h.json"
    earlier.write_text('{"earlier": 1}')

    def stopped(traces_, Ls, n_boot, seed, *args, **kw):
        return [], 1, dict(reason="SIGTERM", heads_done=0, heads_total=2)
    monkeypatch.setattr(driver, "analyse_or_partial", stopped)
    rc, out, err = run_cli_out(capsys, command.main, ["--traces", trace_file, "--n-boot", "0", "--no-progress",
                                                      "--json", str(earlier), "--force"])
    assert rc == 143, err
    assert "Per-head" not in out and "summary" not in out
    assert len(err.strip().splitlines()) == 1 and "SIGTERM" in err
    assert json.loads(earlier.read_text()) == {"earlier": 1}


def test_model_flags_typed_at_their_defaults_are_refused_without_model(capsys, started):
    # --dtype float32 and --batch 4 are the defaults: typed without --model they had been dropped silently
    for argv in (["--dtype", "float32"], ["--batch", "4"]):
        _refused(capsys, [*argv, "--no-progress"], argv[0], "--model only")
    assert started == []


def test_json_never_replaces_a_tracked_artefact_of_another_kind(capsys, trace_file):
    # with --traces the shipped checkpoint is not read, so it was no input: --json onto it with --force replaced it
    ck = driver.DEFAULT_CHECKPOINT
    before = open(ck, "rb").read()
    _refused(capsys, ["--traces", trace_file, "--json", ck, "--force", "--no-progress"], "--json", "tracked .pt",
             "with JSON")
    assert open(ck, "rb").read() == before


def test_synthetic_trials_past_the_memory_name_the_flag(capsys, started):
    # first_passage_mc's own check had named the routine, not --trials
    line = _refused(capsys, ["--synthetic", "--trials", "100000000000000", "--no-progress"],
                    "--trials 100000000000000", "GiB")
    assert started == [] and "first_passage_mc" not in line


def test_the_time_bound_of_a_trace_file_advises_what_it_can_take(capsys, trace_file):
    line = _refused(capsys, ["--traces", trace_file, "--max-minutes", "1e-9", "--no-progress"], "--max-minutes")
    assert "--max-len" in line and "from a model also fewer sequences" in line


def test_n_boot_typed_at_its_default_with_synthetic_is_refused(capsys, started):
    # --n-boot 4000 is the default: typed with --synthetic it had been dropped silently
    _refused(capsys, ["--synthetic", "--trials", "2", "--n-boot", "4000", "--no-progress"],
             "--n-boot applies to the models and --traces, not to --synthetic")
    assert started == []
