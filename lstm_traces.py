"""`python lstm_traces.py`: the forget gates of the textgenrnn character LSTM on the held-out text, as a trace file.

The same command as `python -m foxwindow lstm-traces` (installed: `foxwindow lstm-traces`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("lstm-traces"))
