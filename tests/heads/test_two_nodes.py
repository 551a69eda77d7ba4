"""`forget.py --traces` on two torchrun nodes: two launchers (`--nnodes=2`, one rank each, the c10d rendezvous over
TCP on this machine), each in a folder of its own with its own copy of the trace file, as on two machines that share
no disk. Node 0 writes the results, equal to one process's in every head; node 1 prints and writes nothing. Where
node 1's file is another one (the same path and shape, other traces), both nodes stop before any work with the
one-line error naming rank 1; where node 1 has no file at all, node 0 stops too with rank 1's message (before, it
waited for rank 1 in the process group's rendezvous for its 30-minute timeout). The output folder need exist only on
node 0, which writes."""
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import REPO
from foxwindow.heads import bench_scale
from foxwindow.models import traces

FORGET = os.path.join(REPO, "forget.py")
ARGS = ["--traces", "t.npz", "--json", "h.json", "--seed", "3", "--n-boot", "30", "--workers", "1", "--no-progress"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(dirs, run_id, args=ARGS, limit_s=120):
    """The command on two nodes, node k in dirs[k]; returns [(returncode, stdout, stderr)] per node (a node
    still running after limit_s fails the test: a rank left waiting for another)."""
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                               "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}",
                               FORGET, *args], cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for d in dirs]
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=limit_s)
            out.append((p.returncode, o, e))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nodes")
    bench_scale.write_traces(str(tmp / "a.npz"), 2, 2, 6, 256)
    traces.save_trace(str(tmp / "b.npz"), {f"blocks.{l}.attn.hook_log_fgate":
                                           bench_scale.synthetic_heads(2, 6, 256, seed=10 + l) for l in range(2)},
                      {"model": "synthetic", "heads": 2})
    one = tmp / "one"
    one.mkdir()
    shutil.copy(tmp / "a.npz", one / "t.npz")
    r = subprocess.run([sys.executable, FORGET, *ARGS], cwd=one, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return tmp


def _nodes(tmp, name, second):
    dirs = [tmp / name / "node0", tmp / name / "node1"]
    for d, src in zip(dirs, ("a.npz", second)):
        d.mkdir(parents=True)
        if src:
            shutil.copy(tmp / src, d / "t.npz")
    return dirs


def test_two_nodes_each_with_its_own_copy_equal_one_process(files):
    dirs = _nodes(files, "same", "a.npz")
    (rc0, out0, err0), (rc1, out1, err1) = _two_nodes(dirs, "same")
    assert (rc0, rc1) == (0, 0), err0[-3000:] + err1[-3000:]
    assert "Per-head window laws" in out0 and out1 == ""
    assert sorted(os.listdir(dirs[1])) == ["t.npz"]                    # node 1 writes nothing
    with open(dirs[0] / "h.json") as fh:
        two = json.load(fh)
    with open(files / "one" / "h.json") as fh:
        one = json.load(fh)
    assert len(one["heads"]) == 4 and two["heads"] == one["heads"]
    drop = {"capture_s", "total_s", "checkpoint", "source"}         # timings; the file's path is node 0's
    assert {k: v for k, v in two["info"].items() if k not in drop} == \
        {k: v for k, v in one["info"].items() if k not in drop}


def test_a_node_with_another_file_stops_both_before_any_work(files):
    assert traces.fingerprint(str(files / "a.npz")) != traces.fingerprint(str(files / "b.npz"))
    dirs = _nodes(files, "other", "b.npz")
    (rc0, out0, err0), (rc1, out1, err1) = _two_nodes(dirs, "other")
    assert rc0 != 0 and rc1 != 0
    for node, err in enumerate((err0, err1)):
        line = (f"forget.py: error: --traces: {dirs[node] / 't.npz'}: the trace files differ between the ranks "
                "(rank 1 (")
        assert line in err, err[-3000:]
    assert "Per-head window laws" not in out0 + out1
    assert not (dirs[0] / "h.json").exists() and not (dirs[1] / "h.json").exists()


def test_a_node_without_the_file_stops_the_other_too(files):
    dirs = _nodes(files, "missing", None)
    (rc0, out0, err0), (rc1, out1, err1) = _two_nodes(dirs, "missing")
    assert rc0 != 0 and rc1 != 0 and "(exitcode: 2)" in err0, err0[-3000:]
    assert f"forget.py: error: --traces: {dirs[1] / 't.npz'} not found" in err1
    assert "forget.py: error: rank 1 (" in err0 and f"stopped before any work: --traces: {dirs[1] / 't.npz'} not " \
        "found" in err0
    assert not (dirs[0] / "h.json").exists()


def test_the_output_folder_need_exist_on_node_0_alone(files):
    dirs = _nodes(files, "outdir", "a.npz")
    (dirs[0] / "out").mkdir()
    args = [x if x != "h.json" else "out/h.json" for x in ARGS]
    (rc0, _, err0), (rc1, _, err1) = _two_nodes(dirs, "outdir", args)
    assert (rc0, rc1) == (0, 0), err0[-3000:] + err1[-3000:]
    with open(dirs[0] / "out" / "h.json") as fh, open(files / "one" / "h.json") as ref:
        assert json.load(fh)["heads"] == json.load(ref)["heads"]
    assert sorted(os.listdir(dirs[1])) == ["t.npz"]
