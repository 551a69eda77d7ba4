"""`python forget.py`: every window law at every eps of every head, out of sample, with its state.

The same command as `python -m foxwindow forget` (installed: `foxwindow forget`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("forget"))
