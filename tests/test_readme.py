"""The README is the front door: at most about 300 lines, the test command CI runs, and a Python example of at most
10 lines that runs as written (this test runs it verbatim)."""
import os
import re

from conftest import REPO


def _readme():
    with open(os.path.join(REPO, "README.md")) as fh:
        return fh.read()


def test_readme_is_short_and_keeps_the_test_command():
    text = _readme()
    assert len(text.splitlines()) <= 300
    assert "make test" in text and "python test_foxwindow.py" in text
    with open(os.path.join(REPO, ".ci", "run")) as fh:
        assert "make test" in fh.read()
    for target in re.findall(r"\]\(((?:docs|figures)/[^)#\s]+)", text):     # every linked file exists
        assert os.path.exists(os.path.join(REPO, target)), target


def test_readme_python_example_runs(capsys):
    (code,) = re.findall(r"```python\n(.*?)```", _readme(), re.S)
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert out.startswith("E[W]: exact ") and "Per-head window laws" in out
