"""`python bench_laws.py`: speed of the window numerics.

The same command as `python -m foxwindow bench-laws` (installed: `foxwindow bench-laws`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("bench-laws"))
