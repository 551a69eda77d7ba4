"""`python chunks.py`: per head, the chunk sizes that overflow a chunked kernel (--traces FILE or the shipped model).

The same command as `python -m foxwindow chunks` (installed: `foxwindow chunks`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("chunks"))
