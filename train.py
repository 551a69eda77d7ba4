"""`python train.py`: train the FoX language model.

The same command as `python -m foxwindow train` (installed: `foxwindow train`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("train"))
