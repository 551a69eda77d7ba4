"""The installed package: a wheel built from the checkout holds exactly one top-level import package
(foxwindow, checked in its RECORD) plus the shipped checkpoint as data files, and once installed the
documented commands work from another folder, with modules named like every internal one (distributed,
data, model, train, ...) earlier on the path and, where it is installed, Dask's real `distributed` beside
it; the shipped checkpoint is found under share/foxwindow and default outputs land in the working folder.
"""
import csv
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
# every module's bare name and every subpackage's (laws, heads, models, uses, training, kernels)
MODULES = sorted({f[:-3] for _, _, fs in os.walk(os.path.join(REPO, "foxwindow")) for f in fs
                  if f.endswith(".py") and f != "__init__.py"}
                 | {d for d in os.listdir(os.path.join(REPO, "foxwindow"))
                    if os.path.isfile(os.path.join(REPO, "foxwindow", d, "__init__.py"))})


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder, shadow folder, the wheel's RECORD rows): the wheel built from a copy of the checkout's
    packaging files (so the checkout gets no build/ or egg-info) and installed with pip --target."""
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    src.mkdir()
    for f in os.listdir(REPO):
        if f in ("pyproject.toml", "README.md") or (f.startswith("requirements") and f.endswith(".txt")):
            shutil.copy2(os.path.join(REPO, f), src / f)
    shutil.copytree(os.path.join(REPO, "foxwindow"), src / "foxwindow",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
    (src / "checkpoints").mkdir()
    for f in ("fox_shakespeare.pt", "README.md"):
        shutil.copy2(os.path.join(REPO, "checkpoints", f), src / "checkpoints" / f)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(base / "whl"),
                        str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (base / "whl").glob("foxwindow-*.whl")
    with zipfile.ZipFile(wheel) as z:
        rec = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = [row[0] for row in csv.reader(io.StringIO(z.read(rec).decode()))]
    site = base / "site"
    r = subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # modules named like every internal module, earlier on the path than the package: importing any of them
    # by its bare name (instead of foxwindow.NAME) fails loudly
    shadow = base / "shadow"
    shadow.mkdir()
    for m in MODULES:
        (shadow / f"{m}.py").write_text(f"raise ImportError('the bare module {m} was imported, not foxwindow.{m}')\n")
    (shadow / "distributed").mkdir()
    (shadow / "distributed" / "__init__.py").write_text("raise ImportError('bare distributed imported')\n")
    (shadow / "distributed.py").unlink()
    return site, shadow, rows


def test_wheel_holds_one_import_package(installed):
    _, _, rows = installed
    tops = {r.split("/")[0] for r in rows}
    dist = {t for t in tops if t.endswith((".dist-info", ".data"))}
    assert tops - dist == {"foxwindow"}, tops
    data = sorted(r for r in rows if ".data/" in r)
    assert [r.split(".data/", 1)[1] for r in data] == ["data/share/foxwindow/checkpoints/README.md",
                                                       "data/share/foxwindow/checkpoints/fox_shakespeare.pt"]
    assert any(r == "foxwindow/kernels/__init__.py" for r in rows)
    assert not any(r.endswith(("test_foxwindow.py", "conftest.py")) or r.startswith("tests/") for r in rows)


def _env(*path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORLD_SIZE", "RANK")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_commands_installed_from_another_folder(installed, tmp_path):
    site, shadow, _ = installed
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = _env(shadow, site)
    script = os.path.join(site, "bin", "foxwindow")
    probe = ("import json, foxwindow, foxwindow.training.distributed as d, foxwindow.training.train\n"
             "import foxwindow.heads.driver\n"
             "from foxwindow import outputs\n"
             "print(json.dumps([foxwindow.__file__, d.__file__, outputs.repo_path('checkpoints/fox_shakespeare.pt'),"
             " outputs.runs_root()]))")
    jobs = {
        "renewal": [PY, "-m", "foxwindow", "renewal", "--eps", "0.1", "--no-progress", "--json", "r.json"],
        "forget_help": [script, "forget", "--help"],
        "probe": [PY, "-c", probe],
        "eval": [PY, "-m", "foxwindow", "train", "--eval-only", "--eval-seqs", "1", "--threads", "1",
                 "--device", "cpu"],
        "train": [PY, "-m", "foxwindow", "train", "--steps", "1", "--context", "32", "--batch", "1", "--d-model", "16",
                  "--n-layers", "1", "--n-heads", "2", "--eval-seqs", "1", "--log-every", "0", "--device", "cpu",
                  "--threads", "1"],
        "figures": [PY, "-m", "foxwindow", "figures", "--fast"],
        "bad": [script, "renewal", "--eps", "2"],
    }
    if os.path.exists(os.path.join(site, "share")) is False:
        pytest.fail("pip --target did not place the data files under share/")
    procs = {k: subprocess.Popen(c, cwd=str(work), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, c in jobs.items()}
    res = {k: (p.wait(timeout=300), *p.communicate()) for k, p in procs.items()}
    for k in ("renewal", "forget_help", "probe", "eval", "train"):
        assert res[k][0] == 0, (k, res[k][2][-2000:])
    pkg, dist_file, ckpt, runs = json.loads(res["probe"][1])
    assert pkg.startswith(str(site)) and dist_file.startswith(str(site))
    assert ckpt == os.path.join(str(site), "share", "foxwindow", "checkpoints", "fox_shakespeare.pt")
    assert runs == os.path.join(str(work), "runs")
    assert isinstance(json.loads((work / "r.json").read_text())["rows"], list)
    assert "--model" in res["forget_help"][1]
    assert "val bpc" in res["eval"][1]
    (run,) = os.listdir(work / "runs")
    assert run.startswith("train-") and os.listdir(work / "runs" / run) == ["fox_shakespeare.pt"]
    rc, _, err = res["figures"]
    assert rc == 1 and err.count("\n") == 1 and "source checkout" in err
    rc, _, err = res["bad"]
    assert rc == 2 and err.count("\n") == 1 and "--eps" in err
    # nothing written inside the installed package or beside it
    assert not [f for f in os.listdir(site) if f in ("runs", "r.json")]


def test_beside_dask_distributed(installed, tmp_path):
    """Dask's real `distributed` in the same environment: both import, the commands run."""
    site, _, _ = installed
    if importlib.util.find_spec("distributed") is None:
        pytest.skip("Dask's distributed is not installed here (requirements-test.txt installs it)")
    code = ("import distributed, foxwindow.training.distributed as fd, sys\n"
            "assert hasattr(distributed, 'Client') and fd.__file__.startswith(sys.argv[1]), (distributed, fd)\n"
            "from foxwindow.cli import main\n"
            "sys.exit(main(['renewal', '--eps', '0.1', '--no-progress', '--json', 'd.json']))")
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and
             os.path.realpath(p) != os.path.realpath(REPO)]
    r = subprocess.run([PY, "-c", code, str(site)], cwd=str(tmp_path), env=_env(site, *extra), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and (tmp_path / "d.json").exists(), r.stderr[-2000:]


def test_metadata_states_ranges_and_the_pins_stay_in_the_requirements():
    """The package metadata takes ranges (a user's torch 2.12 or 2.14 stays); the exact versions that make and CI
    install are in requirements*.txt only."""
    import tomllib
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert project["version"] == "0.3.0" and "dynamic" not in project and project.get("authors")
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert not [r for r in reqs if "==" in r], reqs
    assert "torch>=2.4" in project["dependencies"]
    assert "transformers>=4.44" in project["optional-dependencies"]["models"]
    with open(os.path.join(REPO, "requirements.txt")) as fh:
        assert any(line.startswith("torch==") for line in fh)


def test_the_wheel_holds_no_tests(installed):
    _, _, rows = installed
    assert not [r for r in rows if r.startswith("tests/") or "/test_" in r or r.endswith("conftest.py")], rows
