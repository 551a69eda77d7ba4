"""foxwindow test suite. `python test_foxwindow.py` runs every test in the repository (as pytest does)."""
import sys

if __name__ == "__main__":
    import pytest
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
