"""`python renewal.py`: the window laws against exact first-passage numerics.

The same command as `python -m foxwindow renewal` (installed: `foxwindow renewal`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("renewal"))
