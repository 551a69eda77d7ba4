"""`python train.py`, `python renewal.py` and `python bench_scale.py` fed careless and hostile input: each refusal is
one line naming the flag or the file and what is allowed, exit 2, before any work (no training step, no model built,
no numerics run), and nothing written. The work itself is replaced by a stand-in that says it was reached, so a
refusal that comes too late fails here at once instead of training."""
import math
import os

import pytest
import torch

from conftest import REPO, run_cli
from foxwindow import outputs
from foxwindow.heads import bench_scale
from foxwindow.laws import lawtable
from foxwindow.models.fox import FoXConfig, FoXLM, save_model
from foxwindow.training import data, distributed, reach, train

TINY = ["--steps", "3", "--context", "32", "--batch", "1", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
        "--eval-seqs", "1", "--warmup", "0", "--log-every", "0", "--device", "cpu", "--threads", "1"]
TINY_MODEL = FoXConfig(d_model=16, n_layers=1, n_heads=2, context=32)


class Reached(Exception):
    """The work was reached: the refusal came too late (or not at all)."""


_STARTED = []                       # the work each stand-in was asked to do (none, where a refusal comes first)


def _reached(*a, **k):
    _STARTED.append("the work")
    raise Reached("the work started")


@pytest.fixture
def no_work(monkeypatch):
    """train.py's training, scoring and comparison, renewal's numerics and bench_scale's timings: not run. Yields
    the list of what was started."""
    for mod, name in ((train, "train"), (train, "evaluate_bpc"), (train, "FoXLM"), (lawtable, "scan"),
                      (bench_scale, "hot_paths")):
        monkeypatch.setattr(mod, name, _reached)
    _STARTED.clear()
    yield _STARTED


def _refused(capsys, main, argv, *words, folder=None):
    """One line on stderr holding every word, exit 2, no traceback, nothing written in `folder`."""
    before = sorted(os.listdir(folder)) if folder else None
    rc, err = run_cli(capsys, main, argv)
    lines = [li for li in err.strip().splitlines() if li.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and "unexpected" not in err, (argv, rc, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    if folder:
        assert sorted(os.listdir(folder)) == before
    return lines[0]


def _checkpoint(path, meta, fixed_gate=False):
    save_model(str(path), FoXLM(FoXConfig(d_model=16, n_layers=1, n_heads=2, context=32, fixed_gate=fixed_gate)),
               meta)
    return str(path)


def _state(path, **change):
    """A training state of the TINY run stopped after step 1, as save_state writes it, with `change` applied."""
    cfg = train.TrainConfig(steps=3, batch=1, context=32, warmup=0, log_every=0, threads=1)
    model = FoXLM(TINY_MODEL)
    model_state, optim_state = distributed.train_state(model, train.make_optimizer(model, cfg))
    order = data.ShardedWindows(len(data.train_stream()), cfg.context, cfg.batch, cfg.seed)
    state = {"step": 1, "model": model_state, "optim": optim_state, "order": order.state_dict(),
             "history": [{"loss": 5.5}], "rng": distributed.rng_states()}
    state.update(change)
    torch.save(state, path)
    return str(path)


# ----------------------------------------------------------------------------- train.py


def test_train_threads_past_the_processors_is_refused(capsys, no_work, tmp_path):
    # torch's thread pool of 100000 threads had crashed the process (a segmentation fault, no message)
    _refused(capsys, train.main, TINY + ["--threads", "100000", "--out", str(tmp_path / "m.pt")], "--threads 100000",
             "give 1 to", folder=tmp_path)
    _refused(capsys, reach.main, ["--threads", "100000", "--out", str(tmp_path / "r")], "--threads", "100000",
             "give 1 to", folder=tmp_path)
    with pytest.raises(outputs.UsageError, match="threads .* 100000: this machine lets"):     # the Python API too
        train.TrainConfig(threads=100000)
    assert 1 <= train.TrainConfig().threads <= 2


def test_train_warmup_past_the_steps_is_refused(capsys, no_work, tmp_path):
    line = _refused(capsys, train.main, TINY + ["--steps", "10", "--warmup", "500", "--out", str(tmp_path / "m.pt")],
                    "--warmup 500", "--steps 10", folder=tmp_path)
    assert "never reach --lr" in line and not no_work
    # the default warmup (30) with a shorter run stays allowed: it is what short runs have always used
    i = TINY.index("--warmup")
    argv = TINY[:i] + TINY[i + 2:] + ["--steps", "10", "--out", str(tmp_path / "m.pt")]
    rc, err = run_cli(capsys, train.main, argv)
    assert no_work == ["the work"], err                       # it reached the training (the stand-in)


@pytest.mark.parametrize("extra, words", [
    (["--eval-only", "--steps", "5"], ["--eval-only", "--steps", "ignored"]),
    (["--eval-only", "--resume", "x.state", "--lr", "nan"], ["--eval-only", "--lr", "--resume", "ignored"]),
    (["--eval-only", "--fixed-gate"], ["--eval-only", "--fixed-gate", "ignored"]),
    (["--compare", "a.pt", "b.pt", "--eval-seqs", "3", "--device", "cpu"], ["--compare", "--eval-seqs", "--device"]),
    (["--checkpoint", "checkpoints/fox_shakespeare.pt", "--steps", "3"], ["--checkpoint", "--eval-only"]),
    (TINY + ["--parallel", "fsdp"], ["--parallel fsdp", "torchrun", "one process"]),      # (else ignored)
])
def test_train_flags_the_mode_ignores_are_refused(capsys, no_work, tmp_path, extra, words):
    _refused(capsys, train.main, extra, *words, folder=tmp_path)


@pytest.mark.parametrize("change, words", [
    (dict(history=[{"loss": math.nan}]), ["--resume", "finite losses"]),     # had been written into the checkpoint
    (dict(history=None), ["--resume", "finite losses"]),                     # had been a TypeError after the build
    (dict(history=[]), ["--resume", "finite losses"]),
    (dict(order=5), ["--resume", "order"]),
    (dict(step=True), ["--resume", "step"]),
    (dict(rng=[5]), ["--resume", "rng"]),
])
def test_train_resume_of_a_crafted_state_is_refused_before_the_model(capsys, no_work, tmp_path, change, words):
    state = _state(tmp_path / "s.state", **change)
    before = open(state, "rb").read()
    _refused(capsys, train.main, TINY + ["--resume", state, "--out", str(tmp_path / "m.pt")], *words, folder=tmp_path)
    assert not no_work and open(state, "rb").read() == before          # no model built, the input untouched


def test_train_resume_into_another_model_or_an_earlier_stop_is_refused_before_the_model(capsys, no_work, tmp_path):
    state = _state(tmp_path / "s.state")
    out = ["--out", str(tmp_path / "m.pt")]
    # FoXLM itself is the stand-in: the check builds the model on the meta device only, before any weight exists
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "FoXLM", FoXLM)
        mp.setattr(train, "train", _reached)
        _refused(capsys, train.main, TINY + ["--d-model", "32", "--resume", state] + out, "--resume", "does not fit",
                 folder=tmp_path)
        _refused(capsys, train.main, TINY + ["--fixed-gate", "--resume", state] + out, "--resume", "does not fit",
                 folder=tmp_path)
        _refused(capsys, train.main, TINY + ["--batch", "2", "--resume", state] + out, "--resume", "global_batch",
                 folder=tmp_path)
        _refused(capsys, train.main, TINY + ["--stop-at", "1", "--resume", state] + out, "--stop-at 1", "--resume",
                 folder=tmp_path)
    assert not no_work and not (tmp_path / "m.pt.state").exists()        # the state was not rewritten either


def test_train_default_run_folder_is_not_left_by_a_refused_resume(capsys, no_work, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state = _state(tmp_path / "s.state", history=None)
    _refused(capsys, train.main, TINY + ["--resume", state], "--resume", folder=tmp_path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("meta, words", [
    ({"model": "FoXLM", "steps": 3}, ["--checkpoint", "context"]),           # had been scored at --context 1024
    ({"context": "abc"}, ["--checkpoint", "context", "'abc'"]),
    ({"context": 10 ** 9}, ["--eval-seqs 1", "--checkpoint", "1000000000"]),
])
def test_train_eval_only_of_crafted_metadata_is_refused(capsys, no_work, tmp_path, meta, words):
    ck = _checkpoint(tmp_path / "m.pt", meta)
    _refused(capsys, train.main, ["--eval-only", "--checkpoint", ck, "--eval-seqs", "1", "--threads", "1",
                                  "--device", "cpu"], *words, folder=tmp_path)


def test_train_compare_of_checkpoints_lacking_metadata_is_refused(capsys, no_work, tmp_path):
    run = {"config": {}, "steps": 3, "batch": 1, "context": 32, "seed": 0, "lr": 3e-3, "warmup": 0, "tokens_seen": 96,
           "wall_time_s": 1.0, "final_train_loss": 5.5, "device": "cpu", "params": 1, "data": {"val": []},
           "val_eval": {"n_seq": 1}}
    fox = _checkpoint(tmp_path / "fox.pt", {k: v for k, v in run.items() if k != "val_eval"})
    base = _checkpoint(tmp_path / "base.pt", {**run, "config": {"fixed_gate": True}}, fixed_gate=True)
    # a KeyError had ended it as an unexpected error (exit 1)
    _refused(capsys, train.main, ["--compare", fox, base, "--force"], "FOX_CKPT", "val_eval", folder=tmp_path)
    fox = _checkpoint(tmp_path / "fox.pt", run)
    base = _checkpoint(tmp_path / "base.pt", {k: v for k, v in run.items() if k != "tokens_seen"}, fixed_gate=True)
    _refused(capsys, train.main, ["--compare", fox, base, "--force"], "FIXED_GATE_CKPT", "tokens_seen",
             folder=tmp_path)


# ----------------------------------------------------------------------------- renewal.py


@pytest.mark.parametrize("eps", ["1e-320", "5e-324", "1e-308"])
def test_renewal_subnormal_eps_is_refused_before_the_numerics(capsys, no_work, eps):
    # it had run the numerics of the eps before it, then said "L = 736.827 is beyond 708.4", naming no flag
    line = _refused(capsys, lawtable.main, ["--eps", "0.1", eps, "--no-progress"], "--eps", "smallest normal float64")
    assert not no_work and "708.4" not in line


# ----------------------------------------------------------------------------- bench_scale.py


def test_bench_scale_docs_never_appends_to_a_tracked_file(capsys, no_work):
    for tracked in ("README.md", os.path.join("docs", "SAFETY.md")):
        before = open(os.path.join(REPO, tracked), "rb").read()
        _refused(capsys, bench_scale.main, ["--docs", os.path.join(REPO, tracked), "--force"], "--docs",
                 "tracked source file")
        assert open(os.path.join(REPO, tracked), "rb").read() == before
    assert not no_work


@pytest.mark.parametrize("where, word", [(os.path.join("foxwindow", "notes.md"), "package"),
                                         (os.path.join(".git", "notes.md"), ".git")])
def test_bench_scale_docs_inside_the_package_or_git_is_refused(capsys, no_work, where, word):
    _refused(capsys, bench_scale.main, ["--docs", os.path.join(REPO, where), "--force"], "--docs", word)
    assert not no_work and not os.path.exists(os.path.join(REPO, where))


def test_bench_scale_docs_and_json_of_one_file_are_refused(capsys, no_work, tmp_path):
    md = tmp_path / "b.md"
    md.write_text("# b\n" + bench_scale.BEGIN + "\nold\n" + bench_scale.END + "\n")
    _refused(capsys, bench_scale.main, ["--docs", str(md), "--json", str(md), "--force"], "--docs", "--json",
             "same file", folder=tmp_path)
    assert "old" in md.read_text()


def test_bench_scale_big_heads_past_the_room_is_refused(capsys, no_work):
    # 100000 heads of 256 x 16384 float32 are 1.6 TB of traces, written to the temporary folder
    line = _refused(capsys, bench_scale.main, ["--big-heads", "100000"], "--big-heads 100000", "GiB", "fewer heads")
    gib = float(line.split(" take ")[1].split(" GiB")[0])
    assert not no_work and gib == pytest.approx(1e5 * 256 * 16384 * 4 / 2 ** 30, rel=0.01)


def test_renewal_eps_text_keeps_the_table_within_120_columns():
    # an eps that needs 17 digits to read back had pushed its rows past 120 columns
    assert lawtable._eps_text(2.2250738585072014e-308) == "2.23e-308"
    assert [lawtable._eps_text(e) for e in (0.1, 0.999999, 1e-300, 0.1234)] == ["0.1", "0.999999", "1e-300", "0.1234"]
    assert all(len(lawtable._eps_text(e)) <= 9 for e in (1 / 3, 2.2250738585072014e-308, 0.12345678, 5e-324 * 2 ** 60))
