"""`python dependent_errors.py`: the dependent-increment laws against exact numerics.

The same command as `python -m foxwindow dependent-errors` (installed: `foxwindow dependent-errors`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("dependent-errors"))
