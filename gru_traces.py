"""`python gru_traces.py`: the update gates of the reactionrnn character GRU on the held-out text, as a trace file.

The same command as `python -m foxwindow gru-traces` (installed: `foxwindow gru-traces`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("gru-traces"))
