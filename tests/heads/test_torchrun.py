"""`forget.py --model` (4 sequences: with the per-law evaluation and its states), `--traces` (3), a lone head and a
lone head of many documents under torchrun (2 ranks, gloo on the CPU) against one process, and a SIGTERM to the
torchrun job: the heads the ranks finished are gathered and saved, marked partial.

One job, started by torchrun (`python -m torch.distributed.run --standalone --nproc_per_node=2 test_torchrun.py
TMP`), runs in fresh interpreters (so each analysis sets up the process group itself): --traces, then --model
captured and analysed a layer at a time over the ranks, then --model again with rank 0 sending SIGTERM to torchrun
in the middle of the analysis (torchrun passes it to every rank). Each rank writes what it saw to a JSON file.
"""
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from unittest import mock

import pytest
import torch

from conftest import REPO
from foxwindow import outputs
from foxwindow.heads import bench_scale, command, docsplit, driver
from foxwindow.models import hf_capture
from foxwindow.models import hf_load as hf_models
from foxwindow.training import distributed

DROP = ("capture_s", "total_s", "partial")       # timings; every other field of the run's record agrees


def _model_args(tmp, *more, n_seq=4):
    return ["--model", f"{tmp}/model", "--text", f"{tmp}/text.txt", "--n-seq", str(n_seq), "--seq-len", "64",
            "--batch", "2", "--n-boot", "30", "--seed", "5", "--workers", "1", "--no-progress", *more]


def _worker(tmp):
    """One rank of the job: every check, results to tmp/rank{rank}.json (errors included)."""
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    out = {}

    def check(name, argv, *patches):
        """forget's main on argv, with patches (obj, attribute, replacement) in place for the call: its exit code,
        stdout and stderr (or the traceback of an error that escaped it)."""
        printed, said = io.StringIO(), io.StringIO()
        try:
            with contextlib.ExitStack() as stack:
                for obj, attr, new in patches:
                    stack.enter_context(mock.patch.object(obj, attr, new))
                stack.enter_context(contextlib.redirect_stdout(printed))
                stack.enter_context(contextlib.redirect_stderr(said))
                code = outputs.cli(command.main, argv)
            out[name] = {"code": code, "printed": printed.getvalue(), "stderr": said.getvalue()}
        except BaseException:
            out[name] = {"error": traceback.format_exc()}
    check("traces", ["--traces", f"{tmp}/t1.npz", "--json", f"{tmp}/traced2.json", "--seed", "5", "--n-boot", "30",
                     "--no-progress", "--workers", "1"])
    check("noseed", ["--traces", f"{tmp}/t1.npz", "--json", f"{tmp}/noseed2.json", "--n-boot", "30",
                     "--no-progress", "--workers", "1"])                     # a fresh seed: rank 0's for every rank
    check("model", _model_args(tmp, "--json", f"{tmp}/model2.json", "--trace-gib", "1e-9"))
    real_load = hf_models.load_pretrained

    def other_weights(*a, **k):                              # rank 1's copy of the model differs in one weight
        model, config = real_load(*a, **k)
        if rank == 1:
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1.0
        return model, config

    def missing_on_rank_1(*a, **k):                          # rank 1's machine has no copy of the model
        if rank == 1:
            raise hf_models.ModelError(f"--model {tmp}/model: not found on this machine")
        return real_load(*a, **k)
    real_batches = hf_capture.capture_batches

    def batches_failing_on_rank_1(model, ids, *a, **k):     # rank 1 runs out of memory in its block's forward
        if rank == 1 and len(ids) > 1:                       # (not the one-sequence probe)
            raise RuntimeError("CUDA out of memory")
        return real_batches(model, ids, *a, **k)
    real_job = driver._head_job

    def failing_job(i):                                      # rank 1 runs out of memory in its first head
        if rank == 1:
            raise MemoryError()
        return real_job(i)
    check("othermodel", _model_args(tmp, "--json", f"{tmp}/othermodel2.json"),
          (hf_models, "load_pretrained", other_weights))
    check("nomodel", _model_args(tmp, "--json", f"{tmp}/nomodel2.json"),
          (hf_models, "load_pretrained", missing_on_rank_1))
    check("capturefail", _model_args(tmp, "--json", f"{tmp}/capturefail2.json"),
          (hf_capture, "capture_batches", batches_failing_on_rank_1))
    check("failed", ["--traces", f"{tmp}/t1.npz", "--json", f"{tmp}/failed2.json", "--seed", "5", "--n-boot", "30",
                     "--no-progress", "--workers", "1"], (driver, "_head_job", failing_job))
    parts, real_part = [], driver._part_job                 # one head, two ranks: a half on each
    check("one", ["--traces", f"{tmp}/one.npz", "--json", f"{tmp}/one2.json", "--seed", "5", "--n-boot", "30",
                  "--no-progress", "--workers", "1"],
          (driver, "SPLIT", True), (driver, "SPLIT_MIN", 0),    # (split however small the head)
          (driver, "_part_job", lambda k: parts.append(k) or real_part(k)))
    out["one_parts"] = parts
    rows, real_rows = [], docsplit.doc_rows                  # one head of many documents: a block on each rank
    check("docs", ["--traces", f"{tmp}/docs.npz", "--json", f"{tmp}/docs2.json", "--seed", "5", "--n-boot", "30",
                   "--no-progress", "--workers", "1"],
          (driver, "DOCS_MIN_S", 0), (driver, "DOCS_MIN", 0),   # (however few its documents)
          (docsplit, "doc_rows", lambda x, Ls, r, *a, **k: rows.append(list(r)) or real_rows(x, Ls, r, *a, **k)))
    out["doc_rows"] = rows
    # a SIGTERM that reaches rank 1 while it waits for rank 0 after its heads (torchrun signals the ranks one after
    # the other): rank 1 marks where it waits, rank 0 signals it there and then finishes its own heads
    real_together = distributed.together
    if rank == 1:
        with open(f"{tmp}/pid1", "w") as fh:
            fh.write(str(os.getpid()))

        def marked_together(fn, what="stopped before any work"):
            if what == "failed in the analysis":
                open(f"{tmp}/waiting1", "w").close()
            return real_together(fn, what)
        late = (distributed, "together", marked_together)
    else:
        def job_signalling_rank_1(i):
            if not os.path.exists(f"{tmp}/signalled"):
                for _ in range(600):
                    if os.path.exists(f"{tmp}/waiting1"):
                        break
                    time.sleep(0.1)
                with open(f"{tmp}/pid1") as fh:
                    os.kill(int(fh.read()), signal.SIGTERM)
                open(f"{tmp}/signalled", "w").close()
                time.sleep(1.0)
            return real_job(i)
        late = (driver, "_head_job", job_signalling_rank_1)
    check("late", ["--traces", f"{tmp}/t1.npz", "--json", f"{tmp}/late2.json", "--seed", "5", "--n-boot", "30",
                   "--no-progress", "--workers", "1"], late)
    with open(f"{tmp}/rank{rank}.json", "w") as fh:
        json.dump(out, fh)
    # the stop: rank 0 sends SIGTERM to torchrun when it starts its second head (the second layer: both ranks
    # are past the first), and waits there; torchrun sends SIGTERM to both ranks
    real = driver._analyse_x
    calls = []

    def term_job(*a, **k):
        calls.append(1)
        if rank == 0 and len(calls) == 2:
            os.kill(os.getppid(), signal.SIGTERM)
            # the SIGTERM arrives here; short sleeps, so that its handler runs within 0.1 s even where the
            # kernel hands the signal to another of the rank's threads (gloo's), which one long sleep of the
            # main thread would not notice until it ends
            for _ in range(600):
                time.sleep(0.1)
        return real(*a, **k)
    driver._analyse_x = term_job
    check("stopped", _model_args(tmp, "--json", f"{tmp}/stopped2.json", "--trace-gib", "1e-9", n_seq=3))
    with open(f"{tmp}/stop{rank}.json", "w") as fh:
        json.dump(out["stopped"], fh)


def _launch(tmp, limit_s=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.abspath(__file__), tmp]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, env=env)
    with open(f"{tmp}/job_stderr.txt", "w") as fh:
        fh.write(r.stderr)
    return r


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The single-process references, then the 2-rank job; returns (tmp, [rank results], [stop results], rc)."""
    pytest.importorskip("fla", reason="flash-linear-attention (requirements-models.txt)")
    from test_stream import build_fla_fox
    tmp_path = tmp_path_factory.mktemp("torchrun")
    build_fla_fox(tmp_path)
    tmp = str(tmp_path)
    bench_scale.write_traces(f"{tmp}/one.npz", 1, 1, 8, 512)
    bench_scale.write_traces(f"{tmp}/docs.npz", 1, 1, 64, 512)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for argv in (["--traces", f"{tmp}/one.npz", "--json", f"{tmp}/one1.json", "--seed", "5", "--n-boot", "30",
                      "--no-progress", "--workers", "1"],
                     _model_args(tmp, "--json", f"{tmp}/model1.json"),
                     _model_args(tmp, "--json", f"{tmp}/stopref.json", "--save-traces", f"{tmp}/t1.npz", n_seq=3),
                     ["--traces", f"{tmp}/t1.npz", "--json", f"{tmp}/traced1.json", "--seed", "5", "--n-boot", "30",
                      "--no-progress", "--workers", "1"],
                     ["--traces", f"{tmp}/docs.npz", "--json", f"{tmp}/docs1.json", "--seed", "5", "--n-boot", "30",
                      "--no-progress", "--workers", "1"]):
            with contextlib.redirect_stdout(io.StringIO()):
                assert outputs.cli(command.main, argv) == 0
    finally:
        torch.set_num_threads(threads)
    r = _launch(tmp)
    ranks, stops = [], []
    for k in range(2):
        for name, into in ((f"rank{k}.json", ranks), (f"stop{k}.json", stops)):
            if not os.path.exists(f"{tmp}/{name}"):
                pytest.fail(f"rank {k} wrote no {name}; torchrun exited with {r.returncode}:\n{r.stderr[-4000:]}")
            with open(f"{tmp}/{name}") as fh:
                into.append(json.load(fh))
    return tmp, ranks, stops, r.returncode


def _ok(results, name=None):
    for k, res in enumerate(results):
        got = res[name] if name else res
        if "error" in got:
            pytest.fail(f"rank {k}, {name}:\n{got['error']}")
    return [res[name] if name else res for res in results]


def _json(tmp, name):
    with open(f"{tmp}/{name}") as fh:
        return json.load(fh)


def _same_run(a, b):
    assert a["heads"] == b["heads"]                                      # every number of every head
    assert {k: v for k, v in a["info"].items() if k not in DROP} == {k: v for k, v in b["info"].items()
                                                                       if k not in DROP}


def test_traces_under_torchrun_equal_one_process(job):
    tmp, ranks, _, _ = job
    got = _ok(ranks, "traces")
    assert [g["code"] for g in got] == [0, 0] and "Per-head window laws" in got[0]["printed"] and not got[1]["printed"]
    one = _json(tmp, "traced1.json")
    assert len(one["heads"]) == 6
    _same_run(one, _json(tmp, "traced2.json"))


def test_fresh_seed_under_torchrun_is_one_seed_that_reproduces_every_head(job):
    """Without --seed each rank would draw its own fresh seed; rank 0's is broadcast, so the recorded seed
    reproduces the heads of both ranks in one process (the bootstrap's draws included)."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "noseed")
    assert [g["code"] for g in got] == [0, 0]
    two = _json(tmp, "noseed2.json")
    seed = two["info"]["seed"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert outputs.cli(command.main, ["--traces", f"{tmp}/t1.npz", "--json", f"{tmp}/noseed1.json", "--seed",
                                          str(seed), "--n-boot", "30", "--no-progress", "--workers", "1"]) == 0
    _same_run(_json(tmp, "noseed1.json"), two)


def test_ranks_with_different_weights_stop_before_the_capture(job):
    """Rank 1 loads a model that differs from rank 0's in one weight (a stale copy on another machine): every
    rank stops before the capture with one line naming the weights and rank 1; nothing is written."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "othermodel")
    assert [g["code"] for g in got] == [2, 2]
    for g in got:
        assert re.search(r"the model or its held-out text differ between the ranks \(rank 1 \(.+\): the weights "
                         r"differ from rank 0's", g["stderr"]), g["stderr"]
        assert "held-out text," not in g["stderr"] and "Per-head" not in g["printed"]
    assert not os.path.exists(f"{tmp}/othermodel2.json")


def test_a_model_missing_on_one_rank_stops_every_rank_before_any_work(job):
    """Rank 1 cannot load the model (its machine has no copy): it says so, rank 0 names rank 1 and its message
    (before, rank 0 went on alone and waited for rank 1 in the capture's gather)."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "nomodel")
    assert [g["code"] for g in got] == [2, 2]
    assert f"error: --model {tmp}/model: not found on this machine" in got[1]["stderr"]
    assert re.search(r"error: rank 1 \(.+\) stopped before any work: --model .+: not found on this machine",
                     got[0]["stderr"]), got[0]["stderr"]
    assert not os.path.exists(f"{tmp}/nomodel2.json")


def test_an_error_in_one_ranks_capture_stops_every_rank_with_its_message(job):
    """Rank 1's forward passes fail (out of memory on its machine): rank 1 reports its error, rank 0 one line
    naming rank 1 and the error (before, rank 0 waited for rank 1's traces in the gather); nothing is written."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "capturefail")
    assert got[1]["code"] == 1 and "CUDA out of memory" in got[1]["stderr"]
    assert got[0]["code"] == 2
    assert re.search(r"error: rank 1 \(.+\) failed in the capture: RuntimeError: CUDA out of memory",
                     got[0]["stderr"]), got[0]["stderr"]
    assert not os.path.exists(f"{tmp}/capturefail2.json")


def test_an_error_in_one_ranks_heads_stops_every_rank_with_its_message(job):
    """Rank 1 fails in its heads (a MemoryError, as on a machine with less memory): it reports its own error, rank
    0 one line naming rank 1 and the error, and nothing is written (before, rank 0 waited for rank 1's heads for
    the process group's 30-minute timeout)."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "failed")
    assert got[1]["code"] == 1 and "error: out of memory" in got[1]["stderr"]
    assert got[0]["code"] == 2
    assert re.search(r"error: rank 1 \(.+\) failed in the analysis: MemoryError", got[0]["stderr"]), got[0]["stderr"]
    assert not os.path.exists(f"{tmp}/failed2.json")


def test_a_sigterm_while_a_rank_waits_for_the_others_leaves_none_waiting(job):
    """Rank 1 is signalled while it waits for rank 0 in the collectives after its heads: the signal only marks it
    (raised there, it would leave rank 0 waiting in the gather for the 30-minute timeout), and rank 0 writes every
    head, the numbers of one process."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "late")
    assert [g["code"] for g in got] == [0, 0]
    _same_run(_json(tmp, "traced1.json"), _json(tmp, "late2.json"))


def test_one_head_under_torchrun_runs_its_two_halves_on_the_two_ranks(job):
    """A head alone on 2 ranks: its verdict on rank 0, its per-law evaluation on rank 1, joined on rank 0 into
    the numbers of one process."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "one")
    assert [g["code"] for g in got] == [0, 0] and not got[1]["printed"]
    assert [r["one_parts"] for r in ranks] == [[0], [1]]
    one = _json(tmp, "one1.json")
    assert len(one["heads"]) == 1 and one["heads"][0]["at"][0]["laws"]
    _same_run(one, _json(tmp, "one2.json"))


def test_one_head_of_many_documents_under_torchrun_has_its_documents_split_over_the_ranks(job):
    """A head of 64 documents alone on 2 ranks: each rank forms the per-document statistics of its 32 documents,
    rank 0 gathers them and runs the head's verdict and per-law evaluation: the numbers of one process."""
    tmp, ranks, _, _ = job
    got = _ok(ranks, "docs")
    assert [g["code"] for g in got] == [0, 0] and not got[1]["printed"]
    assert [r["doc_rows"] for r in ranks] == [[[0, 32]], [[32, 64]]]
    one = _json(tmp, "docs1.json")
    assert len(one["heads"]) == 1 and one["heads"][0]["at"][0]["laws"]
    _same_run(one, _json(tmp, "docs2.json"))


def test_model_under_torchrun_layer_by_layer_equals_one_process(job):
    tmp, ranks, _, _ = job
    got = _ok(ranks, "model")
    assert [g["code"] for g in got] == [0, 0] and "Per-head window laws" in got[0]["printed"] and not got[1]["printed"]
    one = _json(tmp, "model1.json")
    assert len(one["heads"]) == 6 and all(h["mass"]["mass_window"] is not None for h in one["heads"])
    assert all(h["summary"] and h["at"][0]["laws"] for h in one["heads"])          # the laws and their states too
    _same_run(one, _json(tmp, "model2.json"))


def test_sigterm_to_the_torchrun_job_saves_the_finished_heads(job):
    tmp, _, stops, rc = job
    got = _ok(stops)
    assert got[0]["code"] == 143 and rc != 0                 # rank 0 says SIGTERM; torchrun reports the stop
    part, ref = _json(tmp, "stopped2.json"), _json(tmp, "stopref.json")
    p = part["info"]["partial"]
    assert p["reason"] == "SIGTERM" and p["heads_total"] == 6
    # the first layer's two heads were done on both ranks; rank 1 may have finished its head of the second
    labels = [h["label"] for h in part["heads"]]
    assert labels in (["0.0", "0.1"], ["0.0", "0.1", "1.1"]), labels
    by = {h["label"]: h for h in ref["heads"]}
    assert all(h == by[h["label"]] for h in part["heads"])                           # as one process has them


if __name__ == "__main__":          # a rank of the job that the `job` fixture starts with torchrun
    _worker(sys.argv[1])
