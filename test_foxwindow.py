"""foxwindow's test suite: `python test_foxwindow.py [pytest options]` runs every test in the repository
(tests/, mirroring the subpackages; the kernel tests in tests/kernels/), as `pytest` does, over one
pytest-xdist worker per available processor, a test file to a worker (`--dist loadfile`: the tests of a file
share its module-scoped fixtures, a torchrun job or a trained model, set up once); `-n 0` or `-p no:xdist`
runs them in this process.

Statistical checks compare Monte Carlo estimates with moments computed from the distribution (exact
numerics or quadrature), never from the samples under test, at |estimate - law| <= z * SE with z
Bonferroni-corrected over the checks in one test (docs/THEORY.md section 6). Seeds are fixed.
"""
import importlib.util
import os
import sys


def _workers():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _args(argv):
    """pytest's arguments: the user's, with xdist's workers unless the user chose a number (-n, --numprocesses),
    turned xdist off (-p no:xdist) or asked for what needs this process (--pdb, --trace, -s)."""
    chose = any(a.startswith(("-n", "--numprocesses", "--dist", "--pdb", "--trace", "--capture"))
                or a in ("-s", "no:xdist") for a in argv)
    if chose or importlib.util.find_spec("xdist") is None or _workers() < 2:
        return argv
    return ["-n", str(_workers()), "--dist", "loadfile", *argv]


if __name__ == "__main__":
    import pytest
    os.chdir(os.path.dirname(os.path.abspath(__file__)))            # pyproject's testpaths, from any folder
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *_args(sys.argv[1:])]))
