"""Bad input and safe outputs: every entry point rejects bad arguments with one clear line (exit code 2 on
the command line, ValueError in the API) before any work, and no command overwrites what the user has.

Command-line cases run in-process through outputs.cli (the same wrapper `python X.py` uses); a few
subprocesses check the real entry points, and the shipped files stay byte-identical after tiny default
runs of train.py, reach.py and make_figures.py --fast in a temporary copy of the repository.
"""
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import run_cli
from foxwindow import outputs
from foxwindow.heads import command, seed_spread
from foxwindow.heads import driver as heads
from foxwindow.laws import bench as bench_laws
from foxwindow.laws import gates, lawtable, renewal
from foxwindow.laws import second_order_regime as sor
from foxwindow.models import attention as fa
from foxwindow.models import fox as model
from foxwindow.training import reach, train
from foxwindow.uses import chunks_fla

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "figures"))
import make_figures  # noqa: E402
from foxwindow.models import traces

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = torch.cuda.is_available()


_cli = run_cli


def _check_usage(capsys, main, argv, *words):
    """Assert exit code 2 and one stderr line that contains every word."""
    rc, err = _cli(capsys, main, argv)
    assert rc == 2, (argv, rc, err)
    lines = [li for li in err.strip().splitlines() if li.strip()]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "garbage.pt").write_bytes(b"not a checkpoint at all")
    torch.save({"weights": torch.zeros(3)}, d / "foreign.pt")
    marker = d / "ran"                   # a pickle that runs code when loaded: refused, and it never runs
    (d / "code.pt").write_bytes(b"cposix\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR.")
    (d / "corrupt.npz").write_bytes(b"PK\x03\x04 truncated")
    (d / "corrupt.json").write_text("{not json")
    (d / "wrong.json").write_text(json.dumps({"hello": 1}))
    (d / "existing.json").write_text("keep me")
    (d / "plainfile").write_text("a file, not a folder")
    rng = np.random.default_rng(0)
    lg = np.log(rng.beta(20, 1, (8, 2, 512))).astype(np.float32)        # (B, H, T): the wrong layout
    traces.save_trace(str(d / "bht.npz"), {"blocks.0.attn.hook_log_fgate": lg}, {"model": "test"})
    return d


# ----------------------------------------------------------------------------- forget.py


@pytest.mark.parametrize("argv, words", [
    (["--eps", "2"], ["--eps", "(0, 1)"]),
    (["--eps", "0", "--synthetic"], ["--eps"]),
    (["--synthetic", "--trials", "1"], ["--trials", ">= 2"]),
    (["--seq-len", "1"], ["--seq-len"]),
    (["--n-seq", "2"], ["--n-seq", ">= 3"]),
    (["--synthetic", "--traces", "x.npz"], ["--synthetic", "--traces"]),
    (["--traces", "x.npz", "--n-seq", "4"], ["--n-seq sets the held-out text of a live model", "drop it"]),
    (["--traces", "x.npz", "--n-seq", "4", "--seq-len", "64"], ["--n-seq and --seq-len set", "drop them"]),
    (["--synthetic", "--save-traces", "x.npz"], ["--synthetic", "--save-traces"]),
    (["--device", "bogus"], ["--device", "bogus"]),
    (["--n-seq", "100000"], ["--n-seq", "windows"]),
])
def test_forget_cli_usage(capsys, argv, words):
    _check_usage(capsys, command.main, argv, *words)


def test_forget_cli_files(capsys, bad_files, tmp_path):
    d = bad_files
    _check_usage(capsys, command.main, ["--json", str(tmp_path / "nodir" / "x.json")], "--json", "does not exist")
    _check_usage(capsys, command.main, ["--json", str(tmp_path)], "--json", "is a folder")
    _check_usage(capsys, command.main, ["--json", str(d / "existing.json"), "--synthetic"], "--json", "--force")
    _check_usage(capsys, command.main, ["--save-traces", str(d / "existing.json" / "x.npz")],
                 "--save-traces", "is a file")
    _check_usage(capsys, command.main, ["--traces", str(d / "absent.npz")], "--traces", "not found")
    _check_usage(capsys, command.main, ["--traces", str(d / "corrupt.npz")], "corrupt")
    _check_usage(capsys, command.main, ["--traces", str(d / "bht.npz")], "(B, H, T)", "512 heads")
    _check_usage(capsys, command.main, ["--checkpoint", str(d / "garbage.pt")], "--checkpoint", "corrupt")
    _check_usage(capsys, command.main, ["--checkpoint", str(d / "foreign.pt")], "--checkpoint", "not a foxwindow")
    _check_usage(capsys, command.main, ["--checkpoint", str(d / "code.pt")], "--checkpoint",
                 "names the Python object posix.system", "would run code from the file", "reads weights only")
    assert not (d / "ran").exists()
    assert (d / "existing.json").read_text() == "keep me"
    if not CUDA:
        _check_usage(capsys, command.main, ["--device", "cuda"], "--device", "CUDA")


def test_forget_eps_needs_a_value(capsys):
    rc, err = _cli(capsys, command.main, ["--eps"])
    assert rc == 2 and "--eps" in err and len(err.strip().splitlines()) == 1


def test_forget_synthetic_json_is_strict(capsys, tmp_path):
    out = tmp_path / "s.json"
    rc, _ = _cli(capsys, command.main, ["--synthetic", "--trials", "500", "--no-progress", "--json", str(out)])
    assert rc == 0

    def no_nan(c):
        raise AssertionError(f"non-JSON constant {c}")
    doc = json.loads(out.read_text(), parse_constant=no_nan)
    assert doc["schema_version"] == 1 and doc["kind"] == "synthetic"
    rows = doc["rows"]
    alibi = [r for r in rows if r["gate"].startswith("alibi")]
    assert alibi and all(r["law_mean_W"] is None for r in alibi)
    assert all(math.isfinite(r["exact_mean_W"]) for r in rows)


# ----------------------------------------------------------------------------- train.py


@pytest.mark.parametrize("argv, words", [
    (["--warmup", "-5"], ["--warmup", ">= 0"]),
    (["--steps", "0"], ["--steps"]),
    (["--batch", "0"], ["--batch"]),
    (["--eval-seqs", "0"], ["--eval-seqs"]),
    (["--context", "100000000"], ["--context", "exceeds"]),
    (["--context", "60000", "--eval-seqs", "64"], ["--eval-seqs", "windows"]),
    (["--lr", "0"], ["--lr"]),
    (["--heads", "3"], ["--d-model", "--n-heads"]),
    (["--device", "bogus"], ["--device"]),
    (["--out", "README.md", "--force"], ["--out", "tracked source file"]),
    (["--out", "checkpoints/fox_shakespeare.pt"], ["--out", "--force"]),
    (["--eval-only", "--checkpoint", "absent.pt"], ["--checkpoint", "not found"]),
    (["--compare", "checkpoints/fox_shakespeare.pt", "absent.pt"], ["--compare", "not found"]),
    (["--compare", "checkpoints/fox_shakespeare.pt", "checkpoints/fox_shakespeare.pt"], ["--compare", "twice"]),
])
def test_train_cli_usage(capsys, monkeypatch, argv, words):
    monkeypatch.chdir(REPO)
    _check_usage(capsys, train.main, argv, *words)


TINY_TRAIN = ["--steps", "2", "--context", "64", "--batch", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
              "--eval-seqs", "2", "--log-every", "0", "--device", "cpu"]


def test_train_interrupt_keeps_previous_file(capsys, monkeypatch, tmp_path):
    out = tmp_path / "m.pt"
    out.write_bytes(b"previous model")

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(train, "evaluate_bpc", interrupted)
    rc, err = _cli(capsys, train.main, TINY_TRAIN + ["--out", str(out), "--force"])
    assert rc == 130 and "interrupted" in err
    assert out.read_bytes() == b"previous model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]           # no temporary file left


def test_train_debug_shows_traceback(capsys):
    with pytest.raises(outputs.UsageError, match="--steps"):
        outputs.cli(train.main, ["--steps", "0", "--debug"])


@pytest.mark.parametrize("how", ["script", "module"])
def test_forget_script_and_package_share_one_command_line(capsys, monkeypatch, how):
    import runpy
    monkeypatch.setattr(sys, "argv", ["forget.py", "--help"] if how == "script" else ["foxwindow", "forget", "--help"])
    with pytest.raises(SystemExit) as e:
        if how == "script":
            runpy.run_path(os.path.join(REPO, "forget.py"), run_name="__main__")
        else:
            runpy.run_module("foxwindow", run_name="__main__")
    out = capsys.readouterr().out
    assert e.value.code in (0, None) and "Every window law at every eps of every head" in " ".join(out.split())
    assert all(f in out for f in ("--synthetic", "--traces", "--model", "--n-boot", "--force"))


def test_every_command_help_fits_120_columns(capsys, monkeypatch):
    """`foxwindow --help` and each command's --help (argparse wraps to COLUMNS) within 120 columns."""
    from foxwindow import cli
    monkeypatch.setenv("COLUMNS", "120")
    assert cli.main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120 and sum(line.startswith("  ") and line.split()[0] in cli.COMMANDS
                                              for line in lines) == len(cli.COMMANDS), lines
    for name in cli.COMMANDS:
        if cli.COMMANDS[name][0] is None:                     # figures: a script of the source checkout
            continue
        with pytest.raises(SystemExit) as e:
            cli.main([name, "--help"])
        out = capsys.readouterr().out
        assert e.value.code in (0, None) and out, name
        wide = [line for line in out.splitlines() if len(line) > 120]
        assert not wide, (name, wide)


@pytest.mark.parametrize("module, first", [("models/attention.py", "Forgetting attention"),
                                           ("outputs.py", "Safe outputs"), ("models/fox.py", "The model"),
                                           ("training/data.py", "The corpus"), ("models/kinds.py", "Attention kinds")])
def test_library_modules_say_what_they_are(capsys, monkeypatch, module, first):
    import runpy
    monkeypatch.setattr(sys, "argv", [os.path.basename(module), "--help"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("foxwindow." + module[:-3].replace("/", "."), run_name="__main__")
    assert e.value.code in (0, None) and capsys.readouterr().out.startswith(first)


# ----------------------------------------------------------------------------- reach.py


@pytest.mark.parametrize("argv, words", [
    (["--steps", "0"], ["--steps"]),
    (["--n-eval", "0"], ["--n-eval"]),
    (["--depths", "999"], ["--depths", "999"]),
    (["--kinds", "bogus"], ["--kinds", "bogus"]),
    (["--eps", "1"], ["--eps"]),
    (["--text-batch", "0", "--key-batch", "0"], ["--text-batch", "--key-batch"]),
    (["--out", "x.json", "--json", "y"], ["unrecognized"]),
])
def test_reach_cli_usage(capsys, argv, words):
    _check_usage(capsys, reach.main, argv, *words)


def test_reach_outputs(capsys, bad_files, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    d = bad_files
    _check_usage(capsys, reach.main, ["--out", "reach.png"], "--out", "folder")
    _check_usage(capsys, reach.main, ["--out", "."], "README.md", "tracked source file")
    _check_usage(capsys, reach.main, ["--out", ".", "--force"], "README.md", "tracked source file")
    _check_usage(capsys, reach.main, ["--out", "results/kinds"], "reach.json", "--force")
    _check_usage(capsys, reach.main, ["--out", str(d / "plainfile")], "--out", "is a file")
    _check_usage(capsys, reach.main, ["--replot", str(d / "corrupt.json"), "--out", str(tmp_path / "r")],
                 "--replot", "JSON")
    _check_usage(capsys, reach.main, ["--replot", str(d / "wrong.json"), "--out", str(tmp_path / "r")],
                 "--replot", "results")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "reach.json").write_text("user data")
    _check_usage(capsys, reach.main, ["--out", str(tmp_path / "mine")], "reach.json", "--force")
    assert (tmp_path / "mine" / "reach.json").read_text() == "user data"


# ----------------------------------------------------------------------------- figures, bench_laws, renewal


def test_make_figures_outputs(capsys, bad_files, tmp_path):
    _check_usage(capsys, make_figures.main, ["--fast", "--out", os.path.join(REPO, "figures")], "--fast", "committed")
    _check_usage(capsys, make_figures.main, ["--fast", "--out", str(bad_files / "existing.json")], "--out", "is a file")
    _check_usage(capsys, make_figures.main, ["--fast", "--heads-json", str(bad_files / "corrupt.json"), "--out",
                                       str(tmp_path)], "--heads-json", "JSON")
    (tmp_path / "fig1_decay.png").write_bytes(b"mine")
    _check_usage(capsys, make_figures.main, ["--fast", "--only", "1", "--out", str(tmp_path)],
                 "fig1_decay.png", "--force")
    assert (tmp_path / "fig1_decay.png").read_bytes() == b"mine"


def test_bench_laws_cli(capsys, bad_files, tmp_path):
    _check_usage(capsys, bench_laws.main, ["--checkpoint", str(bad_files / "absent.pt")], "--checkpoint", "not found")
    _check_usage(capsys, bench_laws.main, ["--checkpoint", str(bad_files / "foreign.pt")], "--checkpoint")
    _check_usage(capsys, bench_laws.main, ["--repeats", "0"], "--repeats")
    _check_usage(capsys, bench_laws.main, ["--json", str(tmp_path)], "--json", "folder")
    if not CUDA:
        _check_usage(capsys, bench_laws.main, ["--gpu-only"], "--gpu-only", "CUDA")


def test_a_zero_count_is_refused_not_taken_for_the_default(capsys):
    """0 given for a count whose flag has a default is refused, not read as "not given" (it ran the default)."""
    from foxwindow.heads import bench_scale, calibration
    _check_usage(capsys, bench_scale.main, ["--repeats", "0"], "--repeats", ">= 1", "got 0")
    _check_usage(capsys, bench_scale.main, ["--big-heads", "0"], "--big-heads", ">= 2", "got 0")
    _check_usage(capsys, calibration.main, ["--n-seq", "0"], "--n-seq", "got 0")
    _check_usage(capsys, calibration.main, ["--laws", "--seq-len", "0"], "--seq-len", "got 0")
    with pytest.raises(outputs.UsageError, match="--reps must be >= 1"):      # the --debug its errors offer exists
        calibration.main(["--reps", "0", "--debug"])


def test_synthetic_table_fits_120_columns_at_any_size(capsys):
    """forget.py --synthetic: windows of 1e4-1e7 tokens (eps 1e-300) and a long gate name stay in their columns."""
    row = dict(gate="logit-normal(mu=3, s=0.3)" + "x" * 20, eps=1e-300, trials=2000, mc_mean_W=13638.04,
               se_mean=0.7767, law_mean_W=13636.8, exact_mean_W=13636.81, mc_var_W=1.2345678e7, se_var=3.6e5,
               law_var_leading=1.2098e7, law_var_smith=float("nan"), exact_var_W=1.2e7, z_mean=-123.4, z_var=0.004)
    lawtable.print_synthetic([row, dict(row, gate="alibi(m=0.1)")])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120, max(map(len, lines))
    assert lines[4].startswith("logit-normal(mu=3, s=0.3)xxx…")                             # the name cut
    cells, head = lines[5].split(), lines[2].split()                   # the alibi row: one word a column
    assert len(cells) == 10 and len(head) == 12, (cells, head)           # 'MC E[W]', 'MC Var[W]': two words
    assert cells[1:4] == ["13638±0.78", "13636.8", "13636.8"] and cells[4] == "1.23e+07±3.6e+05", cells
    ends = [m.end() for m in re.finditer(r"\S+", lines[2])]             # right-aligned: each ends at its title
    assert [m.end() for m in re.finditer(r"\S+", lines[5])][1:] == [e for i, e in enumerate(ends) if i not in
                                                                     (0, 1, 5)], (lines[2], lines[5])
    assert cells[6] == "nan" and cells[8:] == ["-123", "0.00"], cells


def test_renewal_rows_show_their_eps_and_fit_120_columns(capsys):
    """0.999999 is shown as itself (not '1e+00', an eps the command refuses), a repeated eps is one row, and every
    line fits 120 columns."""
    lawtable.main(["--eps", "0.25", "0.999999", "0.01", "0.01", "--no-progress"])
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 120
    rows = [li for li in out.splitlines() if li.startswith("logit-normal(mu=2, s=0.5)")]
    assert [li.split()[2] for li in rows] == ["0.25", "0.999999", "0.01"], rows


def test_renewal_cli(capsys, tmp_path):
    _check_usage(capsys, lawtable.main, ["--eps", "0"], "--eps")
    _check_usage(capsys, lawtable.main, ["--eps", "0.1", "1.5"], "--eps", "1.5")
    _check_usage(capsys, lawtable.main, ["--json", str(tmp_path)], "--json", "folder")
    rc, err = _cli(capsys, lawtable.main, ["--eps"])
    assert rc == 2 and "--eps" in err


# ----------------------------------------------------------------------------- API


def test_forgetting_attention_rejects_zero_gate():
    q = k = v = torch.randn(1, 6, 2, 4)
    lg = torch.full((1, 6, 2), -0.1)
    lg[0, 2, 1] = -math.inf                                                  # a gate of exactly 0
    for f in (fa.forgetting_attention, fa.forgetting_attention_reference):
        with pytest.raises(ValueError, match="log_fgate.*-inf"):
            f(q, k, v, lg)
    lg[0, 2, 1] = math.inf
    with pytest.raises(ValueError, match="log_fgate"):
        fa.forgetting_attention(q, k, v, lg)


def test_windows_needs_time_dim_for_captures():
    rng = np.random.default_rng(1)
    lg = np.log(rng.beta(5, 1, (2, 40, 3)))                                 # (B, T, H)
    with pytest.raises(ValueError, match="dim"):
        gates.windows(lg, eps=1e-2)
    with pytest.raises(ValueError, match="dim"):
        gates.windows(lg, eps=1e-2, dim=3)
    W, c = gates.windows(lg, eps=1e-2, dim=1)
    for b in range(2):
        for h in range(3):
            w1, c1 = gates.windows(lg[b, :, h], eps=1e-2)
            assert np.array_equal(W[b, :, h], w1) and np.array_equal(c[b, :, h], c1)


def test_windows_refuses_alike_from_numpy_and_torch():
    """Integer log-gates are refused from numpy as from torch (one message), a number without a time axis is told
    so (not "empty"), and a ragged list gets one line naming log_g, not numpy's own message."""
    for bad in (np.zeros(8, np.int64), torch.zeros(8, dtype=torch.int64)):
        with pytest.raises(ValueError, match=r"^windows: log_g \(log-gates\) must be floating point; got dtype "
                                             r"int64$"):
            gates.windows(bad, eps=1e-2)
    for bad in (np.zeros(8, bool), torch.zeros(8, dtype=torch.bool)):
        with pytest.raises(ValueError, match="must be floating point; got dtype bool$"):
            gates.windows(bad, eps=1e-2)
    for bad in (-0.5, np.float32(-0.5), torch.tensor(-0.5)):
        with pytest.raises(ValueError, match=r"^windows: log_g is one number \(-0.5\); it needs at least one "
                                             r"dimension, the time axis: a trace \(T,\) or traces \(S, T\)$"):
            gates.windows(bad, eps=1e-2)
    with pytest.raises(ValueError, match=r"^windows: log_g must be one array of log-gates, \(T,\) or \(S, T\); "
                                         r"got a list that is not one \(rows of different lengths\?\)$"):
        gates.windows([[-0.1, -0.2], [-0.1]], eps=1e-2)
    # what is valid still works, the same from either: float lists, float32 tensors
    W, c = gates.windows([-0.1, -0.2, -5.0], eps=0.5)
    Wt, ct = gates.windows(torch.tensor([-0.1, -0.2, -5.0]), eps=0.5)
    assert W.tolist() == Wt.tolist() == [1, 2, 0] and c.tolist() == ct.tolist() == [True, True, False]


def test_load_checkpoint_of_a_folder_says_it_is_one(tmp_path):
    """A folder given as a checkpoint is not "not found": the error says it is a folder, which file is expected and
    which .pt files the folder holds (or that it is a Hugging Face style model folder)."""
    with pytest.raises(ValueError, match=f"^checkpoint {re.escape(str(tmp_path))} is a folder; load_checkpoint "
                                         r"reads one .pt file written by save_model or train.py \(such as "
                                         r"fox_shakespeare.pt\), and this folder holds no .pt file$"):
        model.load_checkpoint(str(tmp_path))
    (tmp_path / "b.pt").write_bytes(b"x")
    (tmp_path / "a.pt").write_bytes(b"x")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"this folder holds a.pt, b.pt: pass one of them; a folder with "
                                         r"config.json is a Hugging Face style model: "
                                         r"foxwindow.load_pretrained\(folder\) reads it$"):
        model.load_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):       # a missing path is still missing
        model.load_checkpoint(str(tmp_path / "absent.pt"))


def test_load_checkpoint_refuses_crafted_fields(tmp_path):
    """A file with the right format tag but crafted fields: one ValueError naming the field, before any model of
    the file's sizes is allocated (a config of 10^9 blocks or a width past torch's sizes is refused at once)."""
    good = torch.load(model.shipped_checkpoint(), weights_only=True)
    sd = good["state_dict"]
    first = next(iter(sd))
    cases = [(dict(good, config=[1, 2]), "its 'config' is a list, not a dict"),
             (dict(good, state_dict=5), "its 'state_dict' is a int, not a dict"),
             (dict(good, meta="x"), "its 'meta' is a str, not a dict"),
             (dict(good, config={1: 2}), "its 'config' has a key that is not a string"),
             (dict(good, state_dict=dict(sd, **{first: 3.0})), f"its weight '{first}' is not a tensor"),
             (dict(good, config=dict(good["config"], n_layers=10 ** 9)), "n_layers is 1000000000"),
             (dict(good, config=dict(good["config"], d_model=2 ** 30)), "bad config"),
             (dict(good, state_dict={k: v.to(torch.complex64) for k, v in sd.items()}), "complex64, the model's is"),
             (dict(good, state_dict={k: v.to(torch.int32) for k, v in sd.items()}), "int32, the model's is")]
    for i, (ck, words) in enumerate(cases):
        path = tmp_path / f"c{i}.pt"
        torch.save(ck, path)
        with pytest.raises(ValueError, match=re.escape(words)):
            model.load_checkpoint(str(path))
    torch.save(good, tmp_path / "good.pt")
    assert model.load_checkpoint(str(tmp_path / "good.pt"))[1] == good["meta"]


def _head_traces(S=4, T=600, seed=0):
    rng = np.random.default_rng(seed)
    return -gates.LogitNormalGate(1, 1).sample(rng, (S, T))


def test_analyse_head_validates():
    lg = _head_traces()
    with pytest.raises(ValueError, match="transposed"):
        heads.analyse_head(lg.T)
    for z in (-1, 0, float("nan"), float("inf"), "3"):
        with pytest.raises(ValueError, match="z must"):
            heads.analyse_head(lg, z=z)
    with pytest.raises(ValueError, match="eps is empty"):
        heads.analyse_head(lg, eps=[])
    with pytest.raises(ValueError, match="eps"):
        heads.analyse_head(lg, eps=[0.1, 2.0])
    with pytest.raises(ValueError, match="n_heads"):
        heads.analyse_head(lg, n_heads=0)


def test_one_default_level_in_python_and_cli(tmp_path):
    """analyse_head's default family is the one the command line uses, given the same head count and seed."""
    tr = np.stack([_head_traces(6, 700, s) for s in range(3)], -1).astype(np.float32)   # (S, T, H)
    path = str(tmp_path / "t.npz")
    traces.save_trace(path, {"blocks.0.attn.hook_log_fgate": tr}, {"heads": 3})
    results, info = heads.analyse_traces(path, seed=7, n_boot=300)
    assert info["alpha_test"] == pytest.approx(0.05 / 6) and info["seed"] == 7
    seeds = np.random.SeedSequence(7).spawn(3)                               # the drivers' per-head seeds
    for h, r in enumerate(results):
        direct = heads.analyse_head(tr[:, :, h].astype(np.float64), n_heads=3, head=h, seed=seeds[h], n_boot=300)
        assert direct.verdict == r.verdict and direct.pred_mean == pytest.approx(r.pred_mean, rel=1e-5)
    one = heads.analyse_head(tr[:, :, 0], n_boot=300)                      # one head: a family of 2 tests
    assert one.alpha_test == pytest.approx(0.05 / 2)


def test_acf_lag_range():
    x = np.random.default_rng(3).standard_normal(10)
    assert len(renewal.acf(x, 9)) == 10
    for lag in (10, 50, -1, 2.5):
        with pytest.raises(ValueError, match="max_lag"):
            renewal.acf(x, lag)


def test_save_trace_checks(tmp_path):
    tr = {"a": -np.ones((2, 5, 3), np.float32)}
    for key in ("names", "shapes", "format"):
        with pytest.raises(ValueError, match="reserved"):
            traces.save_trace(str(tmp_path / "x.npz"), tr, {key: ["mine"]})
    with pytest.raises(ValueError, match="empty"):
        traces.save_trace(str(tmp_path / "x.npz"), {"a": np.zeros((2, 0, 3), np.float32)}, {})
    with pytest.raises(ValueError, match="heads"):
        traces.save_trace(str(tmp_path / "x.npz"), tr, {"heads": 5})
    assert not list(tmp_path.iterdir())                                     # nothing written on failure
    p = str(tmp_path / "ok.npz")
    traces.save_trace(p, tr, {"heads": 3, "model": "m"})
    back, meta = traces.load_trace(p)
    assert meta["names"] == ["a"] and meta["model"] == "m" and np.array_equal(back["a"], tr["a"])
    # an existing file is the user's: replaced only with force=True, and a folder is not a file name
    before = open(p, "rb").read()
    with pytest.raises(ValueError, match="exists; pass force=True"):
        traces.save_trace(p, {"a": 2 * tr["a"]})
    assert open(p, "rb").read() == before
    traces.save_trace(p, {"a": 2 * tr["a"]}, force=True)                 # meta optional
    back, meta = traces.load_trace(p)
    assert np.array_equal(back["a"], 2 * tr["a"]) and "model" not in meta
    with pytest.raises(ValueError, match="is a folder"):
        traces.save_trace(str(tmp_path), tr, force=True)


def test_outputs_atomic_and_checks(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with outputs.atomic(str(p)) as tmp:
            with open(tmp, "w") as fh:
                fh.write("half")
            raise RuntimeError("crash mid-write")
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["f.txt"]
    outputs.write_json(str(tmp_path / "n.json"), {"a": float("nan"), "b": [1.0, float("inf")]})
    assert json.loads((tmp_path / "n.json").read_text()) == {"a": None, "b": [1.0, None]}
    with pytest.raises(outputs.UsageError, match="--force"):
        outputs.check_writable(str(p))
    assert outputs.check_writable(str(p), force=True) == str(p)
    with pytest.raises(outputs.UsageError, match="tracked source file"):
        outputs.check_writable(os.path.join(REPO, "forget.py"), force=True)


def test_run_dir_on_first_use(monkeypatch, tmp_path):
    monkeypatch.setattr(outputs, "RUNS", str(tmp_path / "runs"))             # runs/ absent, as in a fresh clone
    r1, r2 = outputs.run_dir("x", make=False), outputs.run_dir("x", make=False)
    assert r1.startswith(outputs.RUNS) and os.path.isdir(r1) and os.path.isdir(r2) and r1 != r2  # never shared
    assert outputs.check_dir(r1, ["a.png"]) == r1 and os.path.isdir(r1)
    r3 = outputs.run_dir("x")
    assert os.path.isdir(r3) and len({r1, r2, r3}) == 3
    outputs._drop_empty_run_dirs()                            # at exit: the unused make=False folders go
    assert not os.path.exists(r1) and os.path.isdir(r3)
    monkeypatch.setattr(outputs, "RUNS", None)                # by default: runs/ in the working directory
    monkeypatch.chdir(tmp_path)
    assert outputs.run_dir("y").startswith(str(tmp_path / "runs") + os.sep)


# ----------------------------------------------------------------------------- real entry points, shipped files


SHIPPED = ("checkpoints", "results", "figures", "README.md")


def _digest(root):
    out = {}
    for s in SHIPPED:
        p = os.path.join(root, s)
        files = [p] if os.path.isfile(p) else [os.path.join(a, f) for a, _, fs in os.walk(p) for f in fs]
        for f in files:
            if "__pycache__" not in f:
                with open(f, "rb") as fh:
                    out[os.path.relpath(f, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_commands_leave_shipped_files_intact(tmp_path):
    """Tiny default-like runs of train.py, reach.py and make_figures.py --fast, plus the wiring of the one-line
    errors, in a temporary git copy of the repository: the shipped files come out byte-identical."""
    root = tmp_path / "repo"
    root.mkdir()
    for f in os.listdir(REPO):
        if f.endswith(".py") or f == "README.md":
            shutil.copy2(os.path.join(REPO, f), root / f)
    for d in ("foxwindow", "checkpoints", "results", "figures"):
        shutil.copytree(os.path.join(REPO, d), root / d, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run(git[:5] + ["init", "-q", str(root)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "copy"], check=True)
    before = _digest(str(root))
    py = sys.executable
    tiny = {
        "train": [py, "train.py"] + TINY_TRAIN,
        "reach": [py, "reach.py", "--steps", "1", "--kinds", "swa", "--context", "32", "--depths", "4", "8",
                  "--n-eval", "2", "--attr-rows", "2", "--eval-seqs", "2", "--d-model", "16", "--layers", "1",
                  "--text-batch", "2", "--key-batch", "2"],
        "figures": [py, "figures/make_figures.py", "--fast", "--only", "1", "--trials", "200"],
        "bad": [py, "forget.py", "--eps", "2"],
        "bad_renewal": [py, "renewal.py", "--eps", "2"],         # renewal.py's __main__ hands over to lawtable.py
    }
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmds = {k: [c[0], str(root / c[1])] + c[2:] for k, c in tiny.items()}
    procs = {k: subprocess.Popen(c, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for k, c in cmds.items()}
    res = {k: (p.wait(timeout=300), *p.communicate()) for k, p in procs.items()}
    for k in ("train", "reach", "figures"):
        assert res[k][0] == 0, (k, res[k][2][-2000:])
    for k in ("bad", "bad_renewal"):
        rc, out, err = res[k]
        assert rc == 2 and err.strip().count("\n") == 0 and "--eps" in err, (k, err)
    assert _digest(str(root)) == before
    assert not os.path.exists(root / "runs")                          # default outputs: runs/ in the working folder
    runs = sorted(os.listdir(tmp_path / "runs"))
    assert [r.split("-")[0] for r in runs] == ["figures", "reach", "train"], runs
    made = {r.split("-")[0]: sorted(os.listdir(tmp_path / "runs" / r)) for r in runs}
    assert made == {"figures": ["fig1_decay.pdf", "fig1_decay.png"], "reach": ["README.md", "reach.json", "reach.png"],
                    "train": ["fox_shakespeare.pt"]}
    _, meta = model.load_checkpoint(str(tmp_path / "runs" / runs[2] / "fox_shakespeare.pt"))
    assert math.isfinite(meta["val_bpc"])


def test_reach_replot_writes_one_set(capsys, tmp_path):
    src = os.path.join(REPO, "results", "kinds", "reach.json")
    out = tmp_path / "r"
    assert _cli(capsys, reach.main, ["--replot", src, "--out", str(out)])[0] == 0
    assert sorted(os.listdir(out)) == ["README.md", "reach.json", "reach.png"]
    first = (out / "reach.json").read_bytes()
    _check_usage(capsys, reach.main, ["--replot", src, "--out", str(out)], "--force")
    assert _cli(capsys, reach.main, ["--replot", src, "--out", str(out), "--force"])[0] == 0
    assert (out / "reach.json").read_bytes() == first and sorted(os.listdir(out)) == ["README.md", "reach.json",
                                                                                        "reach.png"]


def test_analyse_model_checks_trace_path_first(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        heads.analyse_model(n_seq=3, seq_len=64, progress=False, save_traces=str(tmp_path / "no" / "t.npz"))


def test_checkpoint_folder_errors_name_the_flag_given(capsys, tmp_path):
    """A folder passed as --checkpoint is read as a Hugging Face style checkpoint; its errors name --checkpoint."""
    rc, err = _cli(capsys, command.main, ["--checkpoint", str(tmp_path), "--no-progress"])
    assert rc == 2 and ": error: --checkpoint " in err.splitlines()[0] and err.count("\n") == 1 and "--model" not in err
    assert len(err.strip().splitlines()) == 1


def test_monte_carlo_that_cannot_fit_in_memory_is_refused_before_the_walks(monkeypatch):
    from foxwindow import safety
    gate = gates.LogitNormalGate(2.0, 0.5)
    monkeypatch.setattr(safety, "available_memory", lambda: 10_000)                 # bytes
    with pytest.raises(ValueError, match=r"first_passage_mc: 1000 trials would hold about .* GiB and .* GiB of "
                                         r"memory is available"):
        gates.first_passage_mc(gate, eps=1e-3, trials=1000)
    with pytest.raises(ValueError, match="first_passage_samples: 1000 trials"):
        gates.first_passage_samples(gate, eps=1e-3, trials=1000)
    monkeypatch.setattr(safety, "available_memory", lambda: None)                   # unknown: no refusal
    assert gates.first_passage_mc(gate, eps=1e-3, trials=1000).trials == 1000


def test_available_memory_is_a_positive_number_here():
    from foxwindow import safety
    m = safety.available_memory()
    assert m is None or 2 ** 20 < m < 2 ** 50


def test_python_api_inputs_get_one_clear_error_before_any_work(tmp_path):
    """Thresholds, gates and arrays the API cannot use: each a ValueError or TypeError naming the problem."""
    import foxwindow as fw
    from foxwindow.laws import exact
    cases = [(lambda: exact.exact_first_passage(gates.ConstantGate(0.5), L=800.0), ValueError, "beyond 708.4"),
             (lambda: gates.first_passage_mc(gates.ConstantGate(0.5), L=710.0, trials=10), ValueError, "beyond 708.4"),
             (lambda: exact.exact_first_passage(None, eps=1e-3), TypeError, "gate must be a foxwindow Gate"),
             (lambda: gates.first_passage_mc(0.5, eps=1e-3, trials=10), TypeError, "gate must be a foxwindow Gate"),
             (lambda: exact.exact_first_passage(gates.ConstantGate(0.5), eps=[1e-3]), ValueError,
              "eps must be one number; got a list"),
             (lambda: exact.exact_first_passage(gates.ConstantGate(0.5), eps="0.001"), ValueError,
              "eps must be one number; got '0.001'"),
             (lambda: gates.AR1LogitGate(2, 0.5, 0.9).sample(np.random.default_rng(0), (3, 4)), TypeError,
              "dependent increments: sample"),
             (lambda: gates.windows(np.full(10, -1.7e308), eps=1e-3), ValueError, "passes float64's range"),
             (lambda: gates.windows(torch.full((10,), -1.7e308, dtype=torch.float64), eps=1e-3), ValueError,
              "passes float64's range"),
             (lambda: gates.windows(np.zeros((0, 5)), eps=1e-3), ValueError, "empty"),
             (lambda: gates.windows(np.array(-0.1), eps=1e-3), ValueError, "needs at least one dimension"),
             (lambda: gates.EmpiricalGate(None), ValueError, "real-valued array; got dtype object"),
             (lambda: fw.capture_traces(torch.nn.LSTM(3, 4, batch_first=True), torch.randn(4, 30, 3), batch=0),
              ValueError, "batch must be an integer >= 1"),
             (lambda: fw.capture_traces("model", [[1, 2]]), TypeError, "torch.nn.Module")]
    for i, (call, kind, msg) in enumerate(cases):
        with pytest.raises(kind, match=msg):
            call()
    # what is valid there still works: L up to 708.4, a 0-d threshold, bfloat16 tensors
    assert exact.exact_first_passage(gates.ConstantGate(0.5), L=700.0).mean == 1400
    assert exact.exact_first_passage(gates.ConstantGate(0.1), L=6.9).L == pytest.approx(6.9)
    bf = torch.full((4, 64, 1), -0.1).bfloat16()
    assert gates.EmpiricalGate(bf).moments().kappa == pytest.approx(0.10009765625)
    fw.save_trace(str(tmp_path / "bf.npz"), {"x": bf})
    assert float(fw.load_trace(str(tmp_path / "bf.npz"))[0]["x"][0, 0, 0]) == pytest.approx(-0.10009765625)


def test_second_order_regime_chunks_fla_and_seed_spread_refuse_before_work(capsys, monkeypatch):
    """Counts no run can use and lists that would run a case twice: one line naming the flag, before any numerics
    (the work is replaced by a stand-in that fails the test if reached)."""
    def reached(*a, **k):
        raise AssertionError("the work started")
    for mod, name in ((sor, "curve"), (chunks_fla, "check"), (seed_spread, "measure")):
        monkeypatch.setattr(mod, name, reached)
    trace = os.path.join(REPO, "results", "lstm", "textgenrnn_16units.npz")
    for main, argv, words in (
            (sor.main, ["--walks", "1"], ["--walks must be >= 100"]),
            (sor.main, ["--seed", "-1"], ["--seed must be >= 0"]),                  # (numpy's message before)
            (sor.main, ["--cells", "0"], ["--cells must be >= 2"]),
            (sor.main, ["--only", "zzz"], ["--only 'zzz'", "no structure", "AR(1) logits"]),   # (an empty table)
            (sor.main, ["--only"], ["--only names no structure"]),
            (sor.main, ["--only", "AR", "AR"], ["--only lists 'AR' twice"]),
            (chunks_fla.main, ["--seq-len", "64000000"], ["--seq-len 64000000 is beyond 16384"]),
            (chunks_fla.main, ["--kernels", "gla", "gla"], ["--kernels lists gla more than once"]),
            (chunks_fla.main, ["--cases", "strong", "strong"], ["--cases lists strong more than once"]),
            (seed_spread.main, ["--traces", trace, "--per-doc", "64", "64"], ["--per-doc lists a count more"])):
        _check_usage(capsys, main, argv, *words)
