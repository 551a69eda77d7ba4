"""`python reach.py`: how far each attention kind reaches.

The same command as `python -m foxwindow reach` (installed: `foxwindow reach`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("reach"))
