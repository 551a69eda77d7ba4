"""Safe outputs for every command: atomic writes, checks before the work, fresh run folders, one-line errors.

    check_writable(path, force=...)      before any work: the folder exists (or can be made), the path is
                                          not a folder, and an existing file is only replaced with force
    atomic(path) / write_bytes / write_text / write_json / save_npz / save_torch / save_figure
                                          write a temporary file in the same folder, then os.replace it:
                                          an interrupted run leaves the previous file intact, no partial file
    run_dir(command)                      a fresh runs/<command>-<timestamp>/ folder (git-ignored)
    cli(main)                             run a command's main: UsageError and other expected errors become
                                          one line on stderr and exit code 2 (1 for a missing environment
                                          piece, 130 on Ctrl-C); --debug shows the traceback

Overwrite rule: an existing file is replaced only when the caller passes force=True (`--force` on the
command line). Even then, tracked source and documentation files of the repository (code, the top-level
README, configuration) are never replaced; only generated artifacts are (checkpoints/, results/, figures'
images and JSON), which is how the shipped outputs are regenerated on purpose.
"""
import contextlib
import json
import math
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

# the folder above the package: the repository in a source checkout, site-packages (or --target) when installed
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(REPO, "runs")
# generated artifacts inside the repository that --force may replace (paths relative to REPO)
GENERATED_PREFIXES = ("checkpoints/", "results/")
GENERATED_SUFFIXES = (".png", ".pdf", ".json", ".npz", ".pt")


class UsageError(ValueError):
    """A bad argument or output location: reported as one line, exit code 2."""


class MissingPiece(RuntimeError):
    """Something the command needs is not installed or not present: one line, exit code 1."""


# ----------------------------------------------------------------------------- paths


def repo_path(path):
    """A path given relative to the repository (defaults in the code, shipped files such as
    "checkpoints/fox_shakespeare.pt") resolved to an absolute one, from any working directory.

    A source checkout keeps the files beside the modules; an installed copy has them under
    <prefix>/share/foxwindow/ (pyproject's data-files), or share/foxwindow beside the modules (pip --target).
    The first that exists is returned; when none does, the source-tree path, so that a missing-file error
    names where it was looked for. An absolute path is returned unchanged.
    """
    if os.path.isabs(path):
        return path
    cands = [os.path.join(REPO, path), os.path.join(REPO, "share", "foxwindow", path)]
    for prefix in (sysconfig.get_path("data"), sys.prefix, getattr(sys, "base_prefix", sys.prefix)):
        cands.append(os.path.join(prefix, "share", "foxwindow", path))
    return next((c for c in cands if os.path.exists(c)), cands[0])


def _tracked(path):
    """True if `path` is a file tracked by the repository's git (False when git or the repo is absent)."""
    rel = os.path.relpath(path, REPO)
    if rel.startswith(".."):
        return False
    try:
        r = subprocess.run(["git", "-C", REPO, "ls-files", "--error-unmatch", "--", rel],
                           capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def _generated(path):
    """A repository file that a command produces (so --force may replace it), as opposed to source/docs."""
    rel = os.path.relpath(path, REPO).replace(os.sep, "/")
    if rel.startswith(GENERATED_PREFIXES):
        return True
    return rel.startswith("figures/") and rel.endswith(GENERATED_SUFFIXES)


def check_writable(path, force=False, what="output"):
    """Check before any work that `path` can be written as a file. Returns the absolute path.

    path: str, the output file. force: replace an existing file (never a tracked source file).
    what: the argument's name for the message (e.g. "--json"). Raises UsageError naming it when the
    path is a folder, its parent is a file or cannot be created or written, or the file exists and
    force is False, or its folder does not exist. Creates nothing.
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise UsageError(f"{what}: expected a file path; got {path!r}")
    p = os.path.abspath(os.fspath(path))
    if os.path.isdir(p):
        raise UsageError(f"{what}: {p} is a folder; expected a file path")
    parent = os.path.dirname(p)
    if not os.path.exists(parent):
        raise UsageError(f"{what}: folder {parent} does not exist (create it first)")
    if not os.path.isdir(parent):
        raise UsageError(f"{what}: {parent} is a file, so {p} cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: folder {parent} is not writable")
    if os.path.exists(p):
        if _tracked(p) and not _generated(p):
            raise UsageError(f"{what}: refusing to overwrite {os.path.relpath(p, REPO)}, a tracked source file "
                             "of the repository (not even with --force)")
        if not force:
            raise UsageError(f"{what}: {p} exists; pass --force to replace it (or choose another path)")
        if not os.access(p, os.W_OK):
            raise UsageError(f"{what}: {p} exists and is not writable")
    return p


def check_dir(path, files, force=False, what="--out"):
    """Check before any work that folder `path` can receive `files` (names). Returns the absolute folder.

    The folder may be missing (it is made, below an existing folder), empty, or hold other files; each of
    `files` that exists is replaced only with force (and never a tracked source file). Raises UsageError
    naming `what`.
    """
    d = os.path.abspath(os.fspath(path))
    if os.path.exists(d) and not os.path.isdir(d):
        raise UsageError(f"{what}: {d} is a file; expected a folder")
    if not os.path.exists(d):
        up = os.path.dirname(d)
        if not os.path.isdir(up):
            raise UsageError(f"{what}: cannot create folder {d}: {up} is not an existing folder")
        if not os.access(up, os.W_OK | os.X_OK):
            raise UsageError(f"{what}: folder {up} is not writable")
        try:
            os.makedirs(d)
        except OSError as exc:
            raise UsageError(f"{what}: cannot create folder {d}: {exc.strerror}") from exc
    for f in files:
        check_writable(os.path.join(d, f), force=force, what=what)
    return d


def run_dir(command, make=True):
    """A fresh folder runs/<command>-<UTC timestamp>[-n]/ in the repository (git-ignored). Returns its path.
    make=False leaves the run folder itself to the caller (check_dir makes it) but makes runs/."""
    try:
        os.makedirs(RUNS, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {RUNS}: {exc.strerror}") from exc
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = os.path.join(RUNS, f"{command}-{stamp}")
    d, n = base, 1
    while os.path.exists(d):
        n += 1
        d = f"{base}-{n}"
    if make:
        try:
            os.makedirs(d)
        except OSError as exc:
            raise UsageError(f"cannot create run folder {d}: {exc.strerror}") from exc
    return d


# ----------------------------------------------------------------------------- atomic writes


@contextlib.contextmanager
def atomic(path, suffix=None):
    """Yield a temporary path in the folder of `path`; on success os.replace it onto `path`.

    On any exception (KeyboardInterrupt included) the temporary file is removed and `path` is left as it
    was. suffix: the temporary file's extension (default: that of path, so writers that choose a format
    by extension, like matplotlib, still see it).
    """
    p = os.path.abspath(os.fspath(path))
    d = os.path.dirname(p)
    sfx = os.path.splitext(p)[1] if suffix is None else suffix
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(p)}.", suffix=".tmp" + sfx, dir=d)
    os.close(fd)
    try:
        yield tmp
        # mkstemp makes the file private (0600): give it the mode the replaced file had, else the umask's
        if os.path.exists(p):
            mode = os.stat(p).st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_bytes(path, data):
    """Write bytes atomically."""
    with atomic(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def write_text(path, text):
    """Write str atomically (UTF-8)."""
    return write_bytes(path, text.encode("utf-8"))


def json_clean(v):
    """Replace non-finite floats (NaN, inf) by None, recursively: strict JSON has no NaN."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_clean(u) for k, u in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_clean(u) for u in v]
    return v


def write_json(path, obj, indent=1):
    """Write obj as strict JSON (NaN/inf written as null) atomically."""
    return write_text(path, json.dumps(json_clean(obj), indent=indent, allow_nan=False) + "\n")


def save_npz(path, **arrays):
    """numpy.savez to `path` atomically (no ".npz" appended to the name)."""
    import numpy as np
    with atomic(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    return path


def save_torch(path, obj):
    """torch.save to `path` atomically."""
    import torch
    with atomic(path) as tmp:
        torch.save(obj, tmp)
    return path


def save_figure(fig, path, **kwargs):
    """fig.savefig(path, **kwargs) atomically (the format follows path's extension)."""
    fmt = kwargs.pop("format", os.path.splitext(path)[1].lstrip(".") or None)
    with atomic(path) as tmp:
        fig.savefig(tmp, format=fmt, **kwargs)
    return path


# ----------------------------------------------------------------------------- command line


def positive(name, v, lo=1):
    """Raise UsageError unless int v >= lo."""
    if v < lo:
        raise UsageError(f"{name} must be >= {lo}; got {v}")
    return v


def eps_arg(name, v):
    """Raise UsageError unless 0 < v < 1."""
    if not (0.0 < v < 1.0):
        raise UsageError(f"{name} must lie in (0, 1); got {v}")
    return v


def device_arg(name, v):
    """Parse a torch device string; CUDA only where it is available. Returns the string."""
    import torch
    try:
        dev = torch.device(v)
    except (RuntimeError, ValueError):
        raise UsageError(f"{name}: unknown device {v!r} (use cpu, cuda or cuda:N)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"{name} {v}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"{name} {v}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise UsageError(f"{name}: unsupported device {v!r} (use cpu, cuda or cuda:N)")
    return v


def input_file(name, path):
    """Raise UsageError unless `path` is an existing file. Returns the absolute path."""
    p = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(p):
        raise UsageError(f"{name}: {path} not found")
    if not os.path.isfile(p):
        raise UsageError(f"{name}: {path} is not a file")
    return p


def add_common(parser):
    """--force and --debug, shared by every command."""
    parser.add_argument("--force", action="store_true",
                        help="replace existing output files (never tracked source files of the repository)")
    parser.add_argument("--debug", action="store_true", help="on error, show the full traceback")
    return parser


def parser(description, **kw):
    """An ArgumentParser that shows every default in --help and exits 2 with one line on bad usage."""
    import argparse

    class OneLine(argparse.ArgumentParser):
        def error(self, message):
            self.exit(2, f"{self.prog}: error: {message}\n")

    return OneLine(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kw)


def cli(main, argv=None):
    """Run main(argv) as a command: returns its exit code (0 for None).

    UsageError, ValueError, FileNotFoundError, json errors -> one line on stderr, exit 2;
    MissingPiece, ImportError -> one line, exit 1; KeyboardInterrupt -> one line, exit 130 (atomic
    writes leave earlier outputs intact). With --debug in argv the traceback is shown instead.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    prog = os.path.basename(sys.argv[0]) or "foxwindow"
    try:
        rc = main(argv)
        return 0 if rc is None else int(rc)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted; outputs not yet written were not written, earlier files are intact",
              file=sys.stderr)
        return 130
    except (MissingPiece, ImportError) as exc:
        if debug:
            raise
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (UsageError, ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
            PermissionError, json.JSONDecodeError) as exc:
        if debug:
            raise
        print(f"{prog}: error: {_one_line(exc)} (--debug for the traceback)", file=sys.stderr)
        return 2


def _one_line(exc):
    msg = str(exc).strip() or type(exc).__name__
    return " ".join(msg.split())


def describe(doc, argv=None):
    """`python module.py [--help]` for a library module: print what it is and exit 0."""
    first = (doc or "").strip().split("\n\n")[0]
    print(first)
    print("This is a library module with no command of its own; see README.md for the commands.")
    return 0


if __name__ == "__main__":
    raise SystemExit(describe(__doc__))
