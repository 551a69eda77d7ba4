"""foxwindow's test suite: `python test_foxwindow.py [pytest options]` runs every test in the repository
(tests/, mirroring the subpackages; the kernel tests in tests/kernels/), as `pytest` does.

Statistical checks compare Monte Carlo estimates with moments computed from the distribution (exact
numerics or quadrature), never from the samples under test, at |estimate - law| <= z * SE with z
Bonferroni-corrected over the checks in one test (docs/THEORY.md section 6). Seeds are fixed.
"""
import os
import sys

if __name__ == "__main__":
    import pytest
    os.chdir(os.path.dirname(os.path.abspath(__file__)))            # pyproject's testpaths, from any folder
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
