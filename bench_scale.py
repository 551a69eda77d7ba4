"""`python bench_scale.py`: scaling of the per-head analysis (hot paths, workers, torchrun ranks, memory).

The same command as `python -m foxwindow bench-scale` (installed: `foxwindow bench-scale`); the code is in the
foxwindow package, and foxwindow/cli.py lists every command."""
import sys

if __name__ == "__main__":
    from foxwindow.cli import command
    sys.exit(command("bench-scale"))
