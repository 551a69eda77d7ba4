"""Untrusted inputs and hard stops (docs/SAFETY.md): no code from a model folder, no terminal injection, no input
overwritten, no lock that strands a user, Ctrl-C / SIGTERM / a full disk in one line, checks before the work.

Every hostile fixture is made here, in tmp_path. Cases run in-process through outputs.cli where they can; the
prompts, signals and killed writers need real processes.
"""
import errno
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
import zipfile

import numpy as np
import pytest

from conftest import run_cli
from foxwindow import cli, outputs, safety
from foxwindow.laws import dependent_errors, lawtable
from foxwindow.models import hf_load as hf_models
from foxwindow.models import traces
from foxwindow.training import reach

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
ESC = "\x1b]0;owned\x07\x1b[2J\x1b[31m"


def _cmd(name):
    return lambda argv: cli.command(name, argv)


def _one_line(capsys, main, argv, *words, rc=2):
    got, err = run_cli(capsys, main, argv)
    lines = [li for li in err.strip().splitlines() if li.strip()]
    assert got == rc and len(lines) == 1 and "Traceback" not in err, (argv, got, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _raw_trace(path, arrays, names, meta=None):
    """An .npz trace written by hand (save_trace refuses what these tests need to build)."""
    m = dict(meta or {}, format=traces.TRACE_FORMAT, names=names, shapes=[list(a.shape) for a in arrays])
    with open(path, "wb") as fh:
        np.savez(fh, meta_json=np.frombuffer(json.dumps(m).encode(), dtype=np.uint8),
                 **{f"trace_{i}": a for i, a in enumerate(arrays)})
    return str(path)


def _gates(S=6, T=64, H=2, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (-rng.uniform(0.01, 0.3, size=(S, T, H))).astype(dtype)


# ----------------------------------------------------------------------------- 1. no code from a model folder

MARKER_CODE = """
import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import PretrainedConfig
class EvilConfig(PretrainedConfig):
    model_type = "evil"
"""


def _evil_folder(tmp_path, where):
    """A model folder whose `where` JSON has an auto_map naming evil.py, which writes a marker when imported."""
    d = tmp_path / f"model_{where.split('.')[0]}"
    d.mkdir()
    marker = tmp_path / f"marker_{where}"
    (d / "evil.py").write_text(MARKER_CODE.format(marker=str(marker)))
    cfg = {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "vocab_size": 64}
    tok = {"tokenizer_class": "GPT2Tokenizer"}
    auto = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilConfig",
            "AutoTokenizer": ["evil.EvilConfig", None]}
    if where == "config.json":
        cfg.update(model_type="evil", auto_map=auto)
    elif where == "tokenizer_config.json":
        tok["auto_map"] = auto
    else:
        (d / where).write_text(json.dumps({"auto_map": auto}))
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "tokenizer_config.json").write_text(json.dumps(tok))
    return d, marker


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json", "generation_config.json"])
def test_model_folder_code_never_runs(tmp_path, where):
    """forget --model DIR, with no terminal and stdin closed: refused in one line naming the file and auto_map,
    before anything is loaded; no prompt, no marker."""
    d, marker = _evil_folder(tmp_path, where)
    r = subprocess.run([PY, "forget.py", "--model", str(d), "--n-seq", "3", "--seq-len", "32", "--no-progress"],
                       cwd=REPO, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert where in r.stderr and "auto_map" in r.stderr and "[y/N]" not in r.stdout + r.stderr
    assert not marker.exists()


def test_a_config_far_larger_than_its_weights_is_refused_before_building(tmp_path):
    """A crafted folder: a Mamba-2 config.json of 5e13 parameters beside a safetensors file of 2 values is refused
    from the meta-device count before any memory is taken (it tried to allocate 16 TB); a config that its class's
    validator rejects says the validator's reason."""
    pytest.importorskip("safetensors")
    import torch
    from safetensors.torch import save_file
    cfg = dict(model_type="mamba2", hidden_size=1_000_000, num_hidden_layers=8, vocab_size=50_000,
               num_heads=31_250, head_dim=64, state_size=16, expand=2, n_groups=1)
    d = tmp_path / "big"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    save_file({"x": torch.zeros(2)}, str(d / "model.safetensors"))
    with pytest.raises(hf_models.ModelError, match="describes a model of 4.[0-9]+e\\+13 parameters; its safetensors "
                                                   "files hold 2 values: refused before building it"):
        hf_models.load_pretrained(str(d))
    (d / "config.json").write_text(json.dumps(dict(cfg, num_heads=8)))
    with pytest.raises(hf_models.ModelError, match="cannot read its config .*must equal num_heads \\* head_dim"):
        hf_models.load_pretrained(str(d))


def test_tokenizer_folder_and_library_calls_refuse_code(capsys, tmp_path):
    d, marker = _evil_folder(tmp_path, "tokenizer_config.json")
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    _one_line(capsys, _cmd("forget"), ["--model", str(good), "--tokenizer", str(d), "--n-seq", "3"],
              "--tokenizer", "tokenizer_config.json", "auto_map")
    for call in (lambda: hf_models.load_tokenizer(str(d)), lambda: hf_models.load_pretrained(str(d))):
        with pytest.raises(outputs.UsageError, match="auto_map"):
            call()
    assert not marker.exists()


def test_every_transformers_load_passes_trust_remote_code_false():
    """Source check: every from_pretrained call of the package says trust_remote_code=False."""
    import re
    for root, _, files in os.walk(os.path.join(REPO, "foxwindow")):
        for f in files:
            if not f.endswith(".py"):
                continue
            src = open(os.path.join(root, f)).read()
            for m in re.finditer(r"\.from_pretrained\(", src):
                depth, i = 1, m.end()
                while depth:
                    depth += {"(": 1, ")": -1}.get(src[i], 0)
                    i += 1
                assert "trust_remote_code=False" in src[m.end():i], (f, src[m.start():i])


def test_adapter_code_is_announced(capsys, tmp_path):
    f = tmp_path / "my_gates.py"
    f.write_text(textwrap.dedent("""
        from foxwindow.models import adapters
        A = adapters.GateAdapter("my-family", ("nowhere.Layer",), lambda m, x, c: None, lambda m: 1)
    """))
    capsys.readouterr()
    got = hf_models.load_adapters([f"{f}:A"])
    err = capsys.readouterr().err
    assert [a.family for a in got][-1] == "my-family"
    assert "loaded code: --adapter" in err and "my_gates.py:A" in err and "my-family" in err


# ----------------------------------------------------------------------------- 2. text from files is data


def test_shown_escapes_every_control_character():
    assert safety.shown("a\x1b[2Jb\x07\r\n\t\x9b\u202e") == "a\\x1b[2Jb\\x07\\r\\n\\t\\x9b\\u202e"
    assert safety.shown("plain ± é") == "plain ± é"
    import io
    buf = io.StringIO()
    safety.TerminalText(buf).write("bar\r50%\n\x1b[31mred")
    assert buf.getvalue() == "bar\r50%\n\\x1b[31mred"


@pytest.fixture
def esc_trace(tmp_path):
    """Two layers whose names carry escape sequences (title, clear screen, colour)."""
    return _raw_trace(tmp_path / "esc.npz", [_gates(seed=1), _gates(seed=2)],
                      [f"blocks.0.{ESC}attn", f"layer{ESC}1"], meta={"model": f"m{ESC}", "family": "fox"})


@pytest.mark.parametrize("name,argv", [
    ("forget", ["--n-boot", "0", "--no-progress"]),
    ("chunks", ["--chunks", "16", "32"]),
    ("prune", ["--U", "1", "--kind", "softmax", "--no-progress"]),
])
def test_escape_codes_in_layer_names_are_shown_escaped(capsys, tmp_path, esc_trace, name, argv):
    extra = ["--out", str(tmp_path / "P")] if name == "prune" else []
    capsys.readouterr()
    rc = outputs.cli(_cmd(name), ["--traces", esc_trace, *argv, *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    if name != "forget":                         # forget's table shows layer indices; the others names
        assert "\\x1b" in out


# ----------------------------------------------------------------------------- 3. no output is an input


@pytest.mark.parametrize("name,argv", [
    ("forget", ["--n-boot", "0", "--no-progress", "--json"]),
    ("chunks", ["--chunks", "16", "--json"]),
    ("prune", ["--U", "1", "--kind", "softmax", "--no-progress", "--json"]),
])
def test_traces_never_overwritten_by_the_report(capsys, tmp_path, name, argv):
    t = _raw_trace(tmp_path / "t.npz", [_gates(seed=3)], ["L0"], meta={"family": "fox"})
    before = open(t, "rb").read()
    alias = tmp_path / "alias.npz"
    os.link(t, alias)                            # another name of the same file: caught by device and inode
    extra = ["--out", str(tmp_path / "P")] if name == "prune" else []
    for target in (t, str(alias)):
        for force in ([], ["--force"]):
            line = _one_line(capsys, _cmd(name), ["--traces", t, *argv, target, *force, *extra])
            assert "exists" in line or "input" in line
        _one_line(capsys, _cmd(name), ["--traces", t, *argv, target, "--force", *extra], "input of this command")
    assert open(t, "rb").read() == before


def test_two_layers_with_one_name_are_refused(capsys, tmp_path):
    t = _raw_trace(tmp_path / "dup.npz", [_gates(seed=4), _gates(seed=5)], ["L0", "L0"])
    prune = ["--U", "1", "--kind", "softmax", "--out", str(tmp_path / "P")]
    for name, argv in (("forget", ["--n-boot", "0"]), ("chunks", []), ("prune", prune)):
        msg = _one_line(capsys, _cmd(name), ["--traces", t, *argv], "'L0'", "2 times")
        assert str(t) in msg, msg                                # the file whose names clash
    assert not (tmp_path / "P").exists()                         # refused before prune made its folder


def test_model_flags_without_a_model_are_refused(capsys, tmp_path):
    t = _raw_trace(tmp_path / "t.npz", [_gates(seed=6)], ["L0"])
    f = tmp_path / "gates.py"
    f.write_text("import pathlib; pathlib.Path(__file__).with_suffix('.ran').write_text('x')\nA = 1\n")
    for argv in (["--traces", t], ["--synthetic"], []):
        _one_line(capsys, _cmd("forget"), argv + ["--adapter", f"{f}:A"], "--adapter", "--model only")
    _one_line(capsys, _cmd("forget"), ["--traces", t, "--tokenizer", "gpt2", "--per-channel"], "--tokenizer",
              "--per-channel")
    assert not f.with_suffix(".ran").exists()


# ----------------------------------------------------------------------------- 4. locks that cannot strand anyone


def _lock_of(out):
    return safety.lock_path(outputs.resolve(str(out)))


def _dead_pid():
    return int(subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout)


def _write(out, text="ok"):
    outputs.check_writable(str(out), what="--json")
    outputs.write_text(str(out), text)
    return out.read_text()


@pytest.mark.parametrize("content", [b"", b"\x00\xff garbage", b"{not json", None])
def test_stale_locks_are_taken_over(tmp_path, content):
    """Empty, unreadable, a dead process's (both formats), a reused pid, a silent heartbeat, another host's
    silent one: the next run takes the lock over and writes."""
    host = socket.gethostname()
    dead = _dead_pid()
    if content is not None:
        cases = [content]
    else:
        cases = [f"{dead}\n{host}\n".encode(),
                 json.dumps(dict(pid=dead, host=host, started=time.time())).encode(),
                 json.dumps(dict(pid=os.getppid(), host=host, proc_start=1)).encode(),      # pid now someone else's
                 json.dumps(dict(pid=os.getppid(), host=host)).encode(),                     # no heartbeat
                 json.dumps(dict(pid=1, host="elsewhere.example")).encode()]                  # idem, another host
    for i, raw in enumerate(cases):
        out = tmp_path / f"o{i}.json"
        lock = _lock_of(out)
        with open(lock, "wb") as fh:
            fh.write(raw)
        if i >= 3:
            old = time.time() - safety.STALE_S - 60
            os.utime(lock, (old, old))
        assert _write(out) == "ok" and not os.path.exists(lock), raw
    assert sorted(os.listdir(tmp_path)) == sorted(f"o{i}.json" for i in range(len(cases)))


def test_live_locks_name_the_way_out(capsys, tmp_path):
    """A fresh lock of a live process on this host, or of another host: refused, naming --break-lock and the
    lock file; --break-lock on the command line takes it."""
    for i, rec in enumerate([f"{os.getppid()}\n{socket.gethostname()}\n",
                             json.dumps(dict(pid=4242, host="elsewhere.example", started=time.time()))]):
        out = tmp_path / f"r{i}.json"
        lock = _lock_of(out)
        open(lock, "w").write(rec)
        line = _one_line(capsys, _cmd("renewal"), ["--eps", "0.1", "--json", str(out)], "--break-lock", lock,
                         "another run")
        assert "elsewhere.example" in line if i else "process" in line
        flag = "--break" if i else "--break-lock"             # an abbreviation argparse accepts counts as the flag
        rc, err = run_cli(capsys, _cmd("renewal"), ["--eps", "0.1", "--json", str(out), flag])
        assert rc == 0 and "removing the lock" in err and out.exists() and not os.path.exists(lock)
    assert not outputs.BREAK_LOCK and not outputs.DEBUG                    # a run's flags end with it


def test_abbreviated_debug_shows_the_traceback(capsys, tmp_path):
    with pytest.raises(outputs.UsageError, match="--eps must lie in"):
        cli.command("renewal", ["--eps", "0", "--deb"])
    assert not outputs.DEBUG
    # a main called from Python reads the flags into its namespace only: nothing outlives the call
    out = tmp_path / "r.json"
    lock = _lock_of(out)
    open(lock, "w").write(json.dumps(dict(pid=4242, host="elsewhere.example", started=time.time())))
    with pytest.raises(outputs.UsageError, match="another run"):
        lawtable.main(["--eps", "0.1", "--json", str(out), "--break-lock", "--debug"])
    assert not outputs.BREAK_LOCK and not outputs.DEBUG and os.path.exists(lock)


def test_failed_lock_write_leaves_nothing(tmp_path, monkeypatch):
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(safety.os, "write", full)
    with pytest.raises(outputs.UsageError, match="No space left"):
        outputs.check_writable(str(tmp_path / "x.json"), what="--json")
    monkeypatch.setattr(safety.os, "write", real_write)
    assert os.listdir(tmp_path) == []
    assert _write(tmp_path / "x.json") == "ok"


def test_a_250_character_output_name(capsys, tmp_path):
    name = "r" * 245 + ".json"
    out = tmp_path / name
    assert len(name) == 250
    rc, err = run_cli(capsys, _cmd("renewal"), ["--eps", "0.1", "--no-progress", "--json", str(out)])
    assert rc == 0, err
    assert os.listdir(tmp_path) == [name] and isinstance(json.loads(out.read_text())["rows"], list)
    assert len(os.path.basename(_lock_of(out)).encode()) <= 255
    assert len(os.path.basename(safety.temp_name(str(out), ".json")).encode()) <= 255


SLOW_WRITER = """
import os, sys, time
from foxwindow import outputs, safety
safety.HEARTBEAT_S = float(os.environ.get("BEAT", "30"))
out = sys.argv[1]
def main(argv):
    outputs.check_writable(out, what="--json")
    with outputs.atomic(out) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(b"x" * (4 << 20))
            fh.flush()
        print("writing", flush=True)
        for _ in range(1200):                    # short sleeps: the handler runs whichever thread the signal hits
            time.sleep(0.1)
sys.exit(outputs.cli(main, []))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_leave_no_lock_and_no_temporary_file(tmp_path, sig):
    out = tmp_path / "o.json"
    p = subprocess.Popen([PY, "-c", SLOW_WRITER, str(out)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "writing"
    assert len(os.listdir(tmp_path)) == 2                       # the lock and the 4 MiB temporary file
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig and err.count("\n") == 1 and signal.Signals(sig).name in err, err
    assert os.listdir(tmp_path) == []


def test_what_sigkill_leaves_is_cleared_by_the_next_run(tmp_path):
    out = tmp_path / "o.json"
    p = subprocess.Popen([PY, "-c", SLOW_WRITER, str(out)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "writing"
    p.kill()
    p.communicate(timeout=60)
    left = sorted(os.listdir(tmp_path))
    assert len(left) == 2 and any(n.endswith(safety.LOCK_SUFFIX) for n in left) and \
        any(f".{p.pid}-" in n for n in left), left
    assert _write(out) == "ok" and os.listdir(tmp_path) == ["o.json"]


def test_the_heartbeat_keeps_a_live_lock_fresh(tmp_path):
    out = tmp_path / "o.json"
    p = subprocess.Popen([PY, "-c", SLOW_WRITER, str(out)], env=dict(ENV, BEAT="0.2"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "writing"
        lock = _lock_of(out)
        rec = json.loads(open(lock).read())
        assert rec["pid"] == p.pid and rec["host"] == socket.gethostname() and rec["output"] == str(out)
        old = time.time() - 3600
        os.utime(lock, (old, old))
        time.sleep(1.5)
        assert time.time() - os.stat(lock).st_mtime < 60
        with pytest.raises(outputs.UsageError, match="another run"):
            outputs.check_writable(str(out), what="--json", force=True)
    finally:
        p.terminate()
        p.communicate(timeout=60)
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- 5. hard stops

TINY = ["--steps", "1", "--context", "32", "--batch", "1", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
        "--eval-seqs", "1", "--warmup", "0", "--log-every", "0", "--device", "cpu", "--threads", "1"]


def test_ctrl_c_during_start_up_is_one_line(capsys, monkeypatch):
    def interrupted(name, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    for name in ("forget", "train", "chunks", "prune"):
        msg = _one_line(capsys, _cmd(name), [], "interrupted", rc=130)
        assert "earlier files are intact" in msg, (name, msg)


def test_a_full_disk_is_one_line_naming_the_file(capsys, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text("earlier")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(outputs.os, "fsync", full)
    _one_line(capsys, _cmd("renewal"), ["--eps", "0.1", "--no-progress", "--json", str(out), "--force"],
              "no space left", str(out))
    assert out.read_text() == "earlier" and os.listdir(tmp_path) == ["r.json"]


def test_train_full_disk_and_free_space_before_the_work(capsys, tmp_path, monkeypatch):
    import torch
    out = tmp_path / "m.pt"

    def torch_full(*a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 8256 vs 8144")
    monkeypatch.setattr(torch, "save", torch_full)
    rc, err = run_cli(capsys, _cmd("train"), TINY + ["--out", str(out)])
    last = err.strip().splitlines()[-1]                    # after the training's progress bar
    assert rc == 2 and "Traceback" not in err and "no space left" in last and str(out) in last, err
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(safety, "_free", lambda folder: 1000)
    t0 = time.perf_counter()
    _one_line(capsys, _cmd("train"), TINY + ["--out", str(out)], "--out", "MiB free")
    assert time.perf_counter() - t0 < 30 and os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- 6. checks before the work


@pytest.mark.parametrize("mt", ["gla", "hgrn", "gated_deltanet"])
def test_triton_only_families_refused_from_config_json(capsys, tmp_path, mt):
    """No weights, no tokenizer, no text: the refusal comes from config.json alone, before fla is imported."""
    d = tmp_path / mt
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": mt, "hidden_size": 8, "num_hidden_layers": 1}))
    t0 = time.perf_counter()
    _one_line(capsys, _cmd("forget"), ["--model", str(d), "--device", "cpu", "--n-seq", "3", "--seq-len", "32"],
              f"'{mt}'", "Triton-only", "--device cuda")
    assert time.perf_counter() - t0 < 30


def _safetensors(path, n_floats, cut=0):
    header = json.dumps({"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}).encode()
    blob = struct.pack("<Q", len(header)) + header + b"\0" * (4 * n_floats)
    path.write_bytes(blob[:len(blob) - cut])


def test_truncated_and_foreign_safetensors_named(capsys, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "mamba2"}))
    f = d / "model.safetensors"
    for make, words in ((lambda: _safetensors(f, 1000, cut=100), ("model.safetensors", "truncated")),
                        (lambda: f.write_bytes(b"PK\x03\x04 not a safetensors file at all"), ("model.safetensors",)),
                        (lambda: f.write_bytes(b"\x05"), ("model.safetensors",))):
        make()
        before = f.read_bytes()
        _one_line(capsys, _cmd("forget"), ["--model", str(d), "--n-seq", "3", "--seq-len", "32"], *words)
        assert f.read_bytes() == before                          # the input is read, never rewritten


def test_dependent_errors_values_refused_before_the_work(capsys):
    for argv, words in ((["--trials", "2"], ("--trials", ">= 100")), (["--seed", "-1"], ("--seed", ">= 0")),
                        (["--mu", "-40"], ("--mu -40", "L in [1e-6, 700]")),
                        (["--mu", "40"], ("--mu 40", "L in [1e-6, 700]")),
                        (["--s", "1e-8"], ("--s 1e-08", "hardly vary", "1.6e-")),   # (Var X, tiny, not 0)
                        (["--s", "1e6"], ("--s 1e+06", "L in [1e-6, 700]"))):
        t0 = time.perf_counter()
        _one_line(capsys, dependent_errors.main, argv + ["--no-progress"], *words)
        assert time.perf_counter() - t0 < 20, argv
    assert dependent_errors._z(1.0, 0.0) != dependent_errors._z(1.0, 0.0)           # NaN, not ZeroDivisionError


def test_figures_heads_json_shapes(capsys, tmp_path):
    fig = lambda argv: cli.command("figures", argv)                                  # noqa: E731
    bad = tmp_path / "h.json"
    for doc, words in (([1, 2], ("--heads-json", "list")),
                       ({"heads": {"a": 1}}, ("'heads' is a dict",)),
                       ({"heads": [{"layer": "x", "head": 0, "kappa": 1.0}]}, ("heads[0]",)),
                       ({"heads": [{"layer": 0, "head": 0, "kappa": 1.0}] * 2}, ("0.0", "twice"))):
        bad.write_text(json.dumps(doc))
        _one_line(capsys, fig, ["--only", "6", "--fast", "--heads-json", str(bad), "--out", str(tmp_path / "F")],
                  *words)
        assert not list(tmp_path.glob("F/*.png")), "a figure was drawn from a refused input"


def test_reach_notes_must_be_text_before_the_training(capsys, tmp_path):
    notes = tmp_path / "notes.bin"
    notes.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    t0 = time.perf_counter()
    _one_line(capsys, reach.main, ["--kinds", "fox", "--steps", "1", "--notes", str(notes), "--out",
                                   str(tmp_path / "R")], "--notes", "text")
    assert time.perf_counter() - t0 < 30 and not (tmp_path / "R" / "reach.json").exists()


def test_bad_trace_files_named(capsys, tmp_path):
    good = _gates(seed=7)
    npy = tmp_path / "arr.npz"
    with open(npy, "wb") as fh:
        np.save(fh, good)
    cases = [(npy, ("arr.npz", ".npy")),
             (_raw_trace(tmp_path / "int.npz", [good], [3]), ("int.npz", "3", "string")),
             (_raw_trace(tmp_path / "huge.npz", [np.full((6, 64, 2), -1e300)], ["L0"]), ("huge.npz", "float32")),
             (_raw_trace(tmp_path / "esc.npz", [good * 0 + 1.0], [f"x{ESC}"]), ("esc.npz", "\\x1b"))]
    for path, words in cases:
        for name, argv in (("forget", ["--n-boot", "0"]), ("chunks", []),
                           ("prune", ["--U", "1", "--kind", "softmax", "--out", str(tmp_path / "P")])):
            line = _one_line(capsys, _cmd(name), ["--traces", str(path), *argv], *words)
            assert "\x1b" not in line


def test_forget_save_traces_needs_its_room_before_the_capture(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(safety, "_free", lambda folder: 1000)
    t0 = time.perf_counter()
    _one_line(capsys, _cmd("forget"), ["--save-traces", str(tmp_path / "t.npz"), "--n-seq", "3", "--seq-len", "64",
                                       "--no-progress"], "--save-traces", "MiB free")
    assert time.perf_counter() - t0 < 60 and os.listdir(tmp_path) == []


def _npy_bytes(a, shape=None):
    """An .npy file of array a as bytes, its header claiming `shape` (None: a's own)."""
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, dict(descr=np.lib.format.dtype_to_descr(a.dtype), fortran_order=False,
                                                   shape=tuple(a.shape if shape is None else shape)))
    return buf.getvalue() + a.tobytes()


@pytest.mark.parametrize("compress", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_trace_header_claiming_more_than_the_file_holds_is_refused_before_any_allocation(tmp_path, capsys,
                                                                                           compress):
    """A crafted .npy header (6 x 2e9 x 2 float32: 89 GiB, a layout the checks accept) in a file of kilobytes: one
    line naming the file and the member, before the check or the analysis allocates anything for it."""
    good = _gates()
    huge = (6, 2_000_000_000, 2)
    path = str(tmp_path / "crafted.npz")
    meta = dict(format=traces.TRACE_FORMAT, names=["L0"], shapes=[list(huge)])
    with zipfile.ZipFile(path, "w", compression=compress) as zf:
        zf.writestr("meta_json.npy", _npy_bytes(np.frombuffer(json.dumps(meta).encode(), np.uint8)))
        zf.writestr("trace_0.npy", _npy_bytes(good, shape=huge))
    with pytest.raises(ValueError, match=r"crafted.npz: member 'trace_0' claims 96000000000 bytes .* a truncated "
                                         r"or crafted file"):
        traces.check_trace_file(path)
    for name, argv in (("forget", ["--n-boot", "0"]), ("chunks", []),
                       ("prune", ["--U", "1", "--kind", "softmax", "--out", str(tmp_path / "P")])):
        _one_line(capsys, _cmd(name), ["--traces", path, *argv], "crafted.npz", "trace_0", "claims")
    # a header that is not one: named, one line
    with zipfile.ZipFile(str(tmp_path / "garbled.npz"), "w", compression=compress) as zf:
        zf.writestr("meta_json.npy", _npy_bytes(np.frombuffer(json.dumps(meta).encode(), np.uint8)))
        zf.writestr("trace_0.npy", b"not an npy header at all" * 4)
    with pytest.raises(ValueError, match="garbled.npz: member 'trace_0' is not a readable .npy array"):
        traces.check_trace_file(str(tmp_path / "garbled.npz"))


WARNER = """
import sys, warnings
from foxwindow import outputs
def main(argv):
    warnings.warn("exact numerics reached |err E[W]| <= 0.02\\n(tol 1e-3) for 'a\\x1b[31m'", RuntimeWarning)
    return 0
sys.exit(outputs.cli(main, sys.argv[1:]))
"""


def test_a_commands_warning_is_one_line_and_still_a_warning():
    """A warning inside a command prints as `prog: warning: Category: message` on one line (Python's file, line and
    source line only with --debug); a recorder such as pytest.warns still receives the warning itself."""
    import warnings
    err = subprocess.run([PY, "-c", WARNER], env=ENV, capture_output=True, text=True, check=True).stderr
    assert err.count("\n") == 1 and err.startswith("foxwindow: warning: RuntimeWarning: exact numerics reached"), err
    assert "(tol 1e-3)" in err and "\x1b" not in err and "warnings.warn" not in err
    err = subprocess.run([PY, "-c", WARNER, "--debug"], env=ENV, capture_output=True, text=True, check=True).stderr
    assert err.startswith("<string>:5: RuntimeWarning:")                   # Python's own format with --debug

    def main(argv):
        warnings.warn("exact numerics reached", RuntimeWarning)
        return 0
    with pytest.warns(RuntimeWarning, match="exact numerics"):
        assert outputs.cli(main, []) == 0
    assert warnings.formatwarning.__name__ == "formatwarning"               # restored after the command
