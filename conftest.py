# Without a GPU, run Triton kernels through Triton's CPU interpreter. This must happen before
# anything imports a @triton.jit kernel, hence a root conftest.
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# ----------------------------------------------------------------------------- helpers shared by the tests
# (imported as `from conftest import ...`: this root conftest is the one module pytest puts on sys.path
# for every test folder)
from scipy import stats  # noqa: E402

from foxwindow.laws import gates  # noqa: E402  (after TRITON_INTERPRET is set)

REPO = os.path.dirname(os.path.abspath(__file__))       # the checkout's root (tests/<part>/ lie below)


def bonferroni_z(n_checks, alpha=1e-3):
    """Two-sided z for n_checks simultaneous checks at family-wise level alpha."""
    return float(stats.norm.isf(alpha / (2 * n_checks)))


class CdfOnly(gates.Gate):
    """A law seen only through its moments and CDF (its closed form, sampler and atoms hidden), so the
    lattice numerics are exercised on it."""

    def __init__(self, law):
        self.law = law
        self.name = f"cdf-{law}"

    def moments(self):
        return self.law.moments()

    def cdf(self, x):
        return self.law.cdf(x)


def run_cli_out(capsys, main, argv):
    """Run a command's main in-process through outputs.cli; returns (exit code, stdout, stderr)."""
    from foxwindow import outputs
    capsys.readouterr()
    try:
        rc = outputs.cli(main, argv)
    except SystemExit as e:                     # argparse's own usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def run_cli(capsys, main, argv):
    """Run a command's main in-process through outputs.cli; returns (exit code, stderr)."""
    rc, _, err = run_cli_out(capsys, main, argv)
    return rc, err
