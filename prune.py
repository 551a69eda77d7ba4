"""`python prune.py`: ACP block pruning and KV-cache horizons.

The same command as `python -m foxwindow prune` (installed: `foxwindow prune`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("prune"))
