"""Safe outputs for every command: the write guard, atomic writes, fresh run folders, one-line errors.

    check_writable(path, force=...)      before any work: the folder exists, takes new files and has room,
                                          the path is not a folder, an existing file is only replaced with
                                          force, and the output's lock is taken (a second run writing the
                                          same file is refused). guard_output is the same for outside scripts.
    check_dir(folder, names, force=...)  the same for files in one output folder (made if missing)
    distinct((what, path), ...)          outputs of one command that are the same file: refused
    atomic(path) / write_bytes / write_text / write_json / save_npz / save_torch / save_figure
                                          write a temporary file in the same folder, then rename it onto
                                          path (create-exclusive when the file was absent when checked):
                                          an interrupted run leaves the previous file intact, no partial file
    run_dir(command)                      a fresh runs/<command>-<timestamp>/ folder in the working directory
    cli(main)                             run a command's main: UsageError and other expected errors become
                                          one line on stderr and exit code 2 (1 for a missing environment
                                          piece or an unexpected error, 130 on Ctrl-C); --debug shows the
                                          traceback

Overwrite rule: an existing file is replaced only when the caller passes force=True (`--force` on the
command line). Even then, tracked source and documentation files of the repository (code, the top-level
README, configuration) are never replaced, by whatever path they are reached (symlinks, `..`, a bind mount
of the repository: paths are compared resolved and by device and inode); only generated artifacts are
(checkpoints/, results/, figures' images and JSON), which is how the shipped outputs are regenerated on
purpose. Nothing is ever written inside a .git folder, the installed package, /proc, /sys or /dev.

Concurrent runs: check_writable takes a lock file .NAME.foxwindow-lock beside each output (created whole,
exclusively) for the run; a second run naming the same output gets a one-line error before its work, naming
the way out (--break-lock, or the file to remove). The lock goes when the file is written or the process exits
(SIGTERM and SIGHUP included); a stale one (empty, its process gone, no heartbeat) is taken over, and the
temporary files a killed run left beside the output are removed (safety.py). No output may be an input of the
same command (note_input; input_file notes its file).
"""
import argparse
import atexit
import contextlib
import functools
import json
import math
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import time
import warnings

from foxwindow import __version__, safety

__all__ = ["REPO", "PACKAGE", "RUNS", "SPECIAL_ROOTS", "MIN_FREE_BYTES", "GENERATED_PREFIXES", "GENERATED_SUFFIXES",
           "UsageError", "MissingPiece", "repo_path", "resolve", "check_writable", "release", "scope", "scoped",
           "guard_output", "distinct", "check_dir", "runs_root", "run_dir", "atomic", "write_bytes", "write_text",
           "SCHEMA_VERSION", "stamped", "json_clean", "write_json", "save_npz", "save_torch", "save_figure",
           "WIDTH", "fill", "fill_items",
           "positive", "eps_arg", "device_arg", "input_file", "json_input", "add_common", "NEGATIVE_NUMBER", "parser",
           "cli", "describe"]

# the folder above the package: the repository in a source checkout, site-packages (or --target) when installed
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.dirname(os.path.abspath(__file__))
# the default output folder: runs/ in the working directory (resolved when used; a test may set a path)
RUNS = None
# outputs are never written below these (kernel and process views: writes fail or do harm after the work)
SPECIAL_ROOTS = ("/proc", "/sys", "/dev")
# an output folder must have this much free space before the work starts
MIN_FREE_BYTES = 1 << 20
# generated artifacts inside the repository that --force may replace (paths relative to REPO)
GENERATED_PREFIXES = ("checkpoints/", "results/")
GENERATED_SUFFIXES = (".png", ".pdf", ".json", ".npz", ".pt")


UsageError = safety.UsageError          # a bad argument or output location: one line, exit code 2


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


def _identity(path):
    """(st_dev, st_ino) of an existing path, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _rel_under(real, root):
    """The path of `real` (resolved, absolute) relative to folder `root` when `real` lies inside it, by the
    identity (device, inode) of the folder, so that a symlink, `..` or a bind mount of the folder under
    another name is still seen as inside it. None otherwise (or when root is missing)."""
    rid = _identity(root)
    if rid is None:
        return None
    parts = []
    d = real
    while True:
        if _identity(d) == rid:
            return os.path.join(*reversed(parts)) if parts else "."
        up = os.path.dirname(d)
        if up == d:
            return None
        parts.append(os.path.basename(d))
        d = up


def _tracked(path, rel=None):
    """True if `path` is a file tracked by the repository's git (False when git or the repo is absent).
    rel: its path relative to REPO when known (found by identity, see _rel_under)."""
    if rel is None:
        rel = _rel_under(os.path.realpath(path), REPO)
    if rel is None or not os.path.exists(os.path.join(REPO, ".git")):
        return False
    try:
        r = subprocess.run(["git", "-C", REPO, "ls-files", "--error-unmatch", "--", rel],
                           capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def _generated(path, rel=None):
    """A repository file that a command produces (so --force may replace it), as opposed to source/docs."""
    rel = (os.path.relpath(path, REPO) if rel is None else rel).replace(os.sep, "/")
    if rel.startswith(GENERATED_PREFIXES) and not rel.endswith(".py"):
        return True
    return rel.startswith("figures/") and rel.endswith(GENERATED_SUFFIXES)


def resolve(path):
    """The file an atomic write to `path` replaces: the folder resolved (symlinks, `..`) and the name kept,
    so a symlink named `path` is itself replaced (its target is left alone)."""
    p = os.path.abspath(os.fspath(path))
    return os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))


def _refuse_protected(p, real, what, force, force_flag="--force"):
    """UsageError when `real` (the resolved output) is on a special filesystem, inside a .git folder, inside
    the installed package, or a tracked source file of the repository (any spelling of its path)."""
    for top in SPECIAL_ROOTS:
        if real == top or real.startswith(top + os.sep):
            raise UsageError(f"{what}: {p} is on {top}, a special filesystem; choose an ordinary folder")
    if ".git" in real.split(os.sep):
        raise UsageError(f"{what}: refusing to write {p} inside a .git folder (not even with {force_flag})")
    if _rel_under(real, PACKAGE) is not None:
        raise UsageError(f"{what}: refusing to write {p} inside the foxwindow package's own folder "
                         f"{PACKAGE} (choose a folder of your own)")
    rel = _rel_under(real, REPO)
    if (rel is not None and os.path.lexists(real) and not os.path.isdir(real) and _tracked(real, rel)
            and not _generated(real, rel)):
        raise UsageError(f"{what}: refusing to overwrite {rel}, a tracked source file of the repository "
                         f"(not even with {force_flag})")


def _refuse_other_kind(real, what, force_flag):
    """UsageError when a --json output would replace a tracked artefact of the repository that is not JSON (the
    shipped checkpoint, a trace file): a committed artefact is replaced only by an output of its own kind."""
    rel = _rel_under(real, REPO)
    if (rel is not None and what.split(" ")[0] == "--json" and not real.endswith(".json") and os.path.lexists(real)
            and not os.path.isdir(real) and _tracked(real, rel)):
        raise UsageError(f"{what}: refusing to replace {rel}, a tracked {os.path.splitext(rel)[1] or 'extensionless'} "
                         f"file of the repository, with JSON (not even with {force_flag})")


def check_writable(path, force=False, what="output", claim=True, force_flag="--force", size=None):
    """Check before any work that `path` can be written as a file, and claim it. Returns the absolute path.

    path: str, the output file. force: replace an existing file (never a tracked source file of the
    repository, reached by any path: symlinks, `..` and bind mounts are resolved). what: the argument's name
    for the message (e.g. "--json"). Raises UsageError naming it when the path is a folder, on /proc, /sys
    or /dev, inside a .git folder or the installed package, its folder is missing, a file, not writable or
    full, the file exists and force is False, or another run is writing it now. force_flag: the flag that
    sets force, named in the message. size: the output's size in bytes when known before the work (a
    checkpoint, a trace file): its folder must have that much free (safety.need_space).

    claim: take the output's lock, a file .NAME.foxwindow-lock beside it made with O_CREAT|O_EXCL (which
    also proves the folder takes new files): a second run that checks the same output while this one works
    gets a clear error instead of silently replacing the result. The lock goes when the output is written
    (atomic) or when the process exits; a lock left by a killed process is taken over. The same output
    checked again in this process under another argument's name is refused (one command writing one file
    twice), except with claim="shared" (check_dir's default files, which an argument may name again).
    False: check only.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise UsageError(f"{what}: expected a file path; got {path!r}")
    if "\0" in os.fspath(path):
        raise UsageError(f"{what}: the path holds a NUL byte")
    p = os.path.abspath(os.fspath(path))
    real = resolve(p)
    _refuse_protected(p, real, what, force, force_flag)        # first: whatever else is wrong with the path
    _refuse_input(p, what)
    _refuse_other_kind(real, what, force_flag)
    if os.path.isdir(p):
        raise UsageError(f"{what}: {p} is a folder; expected a file path")
    parent = os.path.dirname(p)
    if not os.path.exists(parent):
        raise UsageError(f"{what}: folder {parent} does not exist (create it first)")
    if not os.path.isdir(parent):
        raise UsageError(f"{what}: {parent} is a file, so {p} cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: folder {parent} is not writable")
    exists = os.path.lexists(p)
    if exists:
        if not force:
            raise UsageError(f"{what}: {p} exists; pass {force_flag} to replace it (or choose another path)")
        if os.path.exists(p) and not os.path.islink(p) and not os.path.isfile(p):
            raise UsageError(f"{what}: {p} is not a regular file; refusing to replace it")
        if not os.access(p, os.W_OK) and not os.path.islink(p):
            raise UsageError(f"{what}: {p} exists and is not writable")
    try:
        st = os.statvfs(parent)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    if free is not None and free < MIN_FREE_BYTES:
        raise UsageError(f"{what}: the filesystem of {parent} has {free / 2 ** 20:.1f} MiB free; "
                         f"at least {MIN_FREE_BYTES // 2 ** 20} MiB needed")
    if size:
        safety.need_space(p, size, what)
    if claim and os.environ.get("RANK", "0") in ("", "0"):     # under torchrun rank 0 writes: it holds the lock
        _claim(real, what, replace=exists, shared=claim == "shared")
    return p


# the locks this process holds: resolved output path -> (lock path, the output existed when claimed, the
# argument that named it)
_CLAIMS = {}


def _lock_path(real):
    return safety.lock_path(real)


# --break-lock on the command line (set by cli for the run): a lock that looks live is removed, said on stderr
BREAK_LOCK = False
# --debug on the command line (set by cli, or by the parser for an abbreviation): errors keep their traceback
DEBUG = False
_PLAIN_WARNING = warnings.formatwarning     # (Python's own format, put back by a --debug the parser reads)
_IN_CLI = 0                                 # how many `cli` runs are going (nested: a command run by a command)


def _same_arg(a, b):
    return a.lstrip("-").replace("-", "_").split(" ")[0] == b.lstrip("-").replace("-", "_").split(" ")[0]


def _claim(real, what, replace, shared=False):
    """Take the lock of output `real` for this process (see check_writable). The same output claimed again
    under another argument's name is one command writing one file twice: UsageError naming both.
    A stale lock (empty, unreadable, its process gone, no heartbeat for safety.STALE_S) is taken over; a live
    one is refused with the way out (--break-lock, or the lock file to remove). See safety.py."""
    if real in _CLAIMS:
        lock, was, other = _CLAIMS[real]
        if other is None or shared:         # a folder's default file, named again by an argument: one output
            if other is None and not shared:
                _CLAIMS[real] = (lock, was, what)
            return
        if not _same_arg(what, other):
            raise UsageError(f"{what} and {other} name the same file {real}: one would overwrite the other; "
                             "choose distinct paths")
        return
    lock = _lock_path(real)
    for _ in range(5):
        try:
            taken = safety.write_lock(lock, real)
        except OSError as exc:
            raise UsageError(f"{what}: cannot create the lock file {lock} in {os.path.dirname(real)}: "
                             f"{exc.strerror or exc}") from None
        if taken:
            _CLAIMS[real] = (lock, replace, None if shared else what)
            safety.hold(lock)
            safety.stale_temps(real)            # temporary files of a killed run on this output
            return
        rec, ident = safety.read_lock(lock)
        if ident is None:
            continue                            # gone meanwhile: try again
        why = safety.judge_lock(rec, ident)
        if why is None and BREAK_LOCK:
            why = "--break-lock"
            print(f"{what}: removing the lock {lock} of {safety.describe_holder(rec, ident)} (--break-lock)",
                  file=sys.stderr)
        if why is not None:
            safety.take_over(lock, ident)
            continue
        raise UsageError(f"{what}: another run ({safety.describe_holder(rec, ident)}) is writing {real} now; "
                         f"wait for it, or if no such run is going: rerun with --break-lock (or remove {lock})"
                         ) from None
    raise UsageError(f"{what}: cannot take the lock {lock} of {real} (other runs keep taking it); rerun with "
                     f"--break-lock or remove {lock}")


def release(path):
    """Give up this process's lock on output `path` (done by atomic once the file is written)."""
    c = _CLAIMS.pop(resolve(path), None)
    if c is not None:
        safety.drop(c[0])


@contextlib.contextmanager
def scope():
    """Release, on leaving, the output locks taken inside (those of outputs not written, after an error or
    an output the run did not need in the end). cli runs every command in one; scoped(main) for a main
    called directly."""
    global _DEPTH
    held, read, made = set(_CLAIMS), set(_INPUTS), len(_MADE)
    _DEPTH += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _DEPTH -= 1
        for real in set(_CLAIMS) - held:
            release(real)
        for ident in set(_INPUTS) - read:
            _INPUTS.pop(ident, None)
        if failed:
            unmake(made)                            # after the locks: a folder holding only them is empty now
        del _MADE[made:]


def unmake(since=0):
    """Remove the folders check_dir made from the since-th on (a run that then failed), those still empty."""
    for d in reversed(_MADE[since:]):
        with contextlib.suppress(OSError):
            os.rmdir(d)


def scoped(fn):
    """Decorator: run fn inside scope()."""
    @functools.wraps(fn)
    def run(*a, **k):
        with scope():
            return fn(*a, **k)
    return run


@atexit.register
def _release_all():
    for real in list(_CLAIMS):
        release(real)


def guard_output(path, force=False, what="--json", force_flag="--force"):
    """The write guard as one call for scripts outside the command table (e.g. the kernel benchmark):
    check_writable with the lock, held until the process exits when the file is written with hold=True
    (write_json(path, obj, hold=True): a file rewritten as results come in). Returns the absolute path;
    raises UsageError naming `what` (and force_flag when the file exists)."""
    return check_writable(path, force=force, what=what, force_flag=force_flag)


def need_space(path, nbytes, what):
    """Before the work: UsageError naming `what` when the folder of `path` has less than about nbytes free."""
    safety.need_space(path, nbytes, what)


def distinct(*named):
    """Refuse, before any work, outputs of one command that are the same file.

    named: (argument name, path) pairs (a None path is skipped). Paths are compared resolved (symlinks,
    `..`, and by (device, inode) where the file exists). Raises UsageError naming both arguments."""
    seen = {}
    for what, path in named:
        if path is None:
            continue
        real = resolve(path)
        keys = [("path", real)]
        ident = _identity(real)
        if ident is not None:
            keys.append(("inode", ident))
        for k in keys:
            if k in seen:
                raise UsageError(f"{what} and {seen[k]} name the same file {real}: one would overwrite "
                                 "the other; choose distinct paths")
        for k in keys:
            seen[k] = what
    return [resolve(p) for _, p in named if p is not None]


def check_dir(path, files, force=False, what="--out"):
    """Check before any work that folder `path` can receive `files` (names), and claim them. Returns the
    absolute folder.

    The folder may be missing (it is made, below an existing folder), empty, or hold other files; each of
    `files` that exists is replaced only with force (and never a tracked source file). Raises UsageError
    naming `what`. The folder's own path is checked like a file's (special filesystems, .git, the package).
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path) or "\0" in os.fspath(path):
        raise UsageError(f"{what}: expected a folder path; got {path!r}")
    d = os.path.abspath(os.fspath(path))
    if os.path.exists(d) and not os.path.isdir(d):
        raise UsageError(f"{what}: {d} is a file; expected a folder")
    _refuse_protected(d, os.path.realpath(d), what, force)
    if not os.path.exists(d):
        up = os.path.dirname(d)
        if not os.path.isdir(up):
            raise UsageError(f"{what}: cannot create folder {d}: {up} is not an existing folder")
        if not os.access(up, os.W_OK | os.X_OK):
            raise UsageError(f"{what}: folder {up} is not writable")
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{what}: cannot create folder {d}: {exc.strerror}") from exc
        _MADE.append(d)                             # removed again (if still empty) where the command fails
    for f in files:
        check_writable(os.path.join(d, f), force=force, what=what, claim="shared")
    return d


def runs_root():
    """The folder of the default run folders: RUNS when set, else runs/ in the working directory."""
    return RUNS or os.path.join(os.getcwd(), "runs")


_MADE_RUN_DIRS = []


def run_dir(command, make=True):
    """A fresh folder runs/<command>-<UTC timestamp>[-n]/ in the working directory (git-ignored in a
    checkout). Returns its path. The folder is made at once (exclusively, so two runs started in the same
    second get two folders); make=False: it is removed again at exit if nothing was written into it."""
    root = runs_root()
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the default output folder {root}: {exc.strerror} (run from a "
                         "writable folder or pass an output path)") from exc
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = os.path.join(root, f"{command}-{stamp}")
    for n in range(1, 10000):
        d = base if n == 1 else f"{base}-{n}"
        try:
            os.mkdir(d)
        except FileExistsError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot create run folder {d}: {exc.strerror}") from exc
        if not make:
            _MADE_RUN_DIRS.append(d)
        return d
    raise UsageError(f"cannot create a fresh run folder {base}-N")


@atexit.register
def _drop_empty_run_dirs():
    _release_all()                      # the locks first: a folder holding only a lock is empty
    for d in _MADE_RUN_DIRS:
        with contextlib.suppress(OSError):
            os.rmdir(d)                 # only when empty


# ----------------------------------------------------------------------------- atomic writes


@contextlib.contextmanager
def atomic(path, suffix=None, hold=False):
    """Yield a temporary path in the folder of `path`; on success os.replace it onto `path`.

    On any exception (KeyboardInterrupt included) the temporary file is removed and `path` is left as it
    was. suffix: the temporary file's extension (default: that of path, so writers that choose a format
    by extension, like matplotlib, still see it). hold: keep the output's lock (check_writable) after the
    write, for a file written again later in the run; it goes at the end of the command or process.
    """
    p = os.path.abspath(os.fspath(path))
    sfx = os.path.splitext(p)[1] if suffix is None else suffix
    tmp = safety.temp_name(p, sfx)
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        raise (safety.space_error(exc, p) or UsageError(f"cannot create a file beside {p}: {exc.strerror or exc}")) \
            from None
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
        claim = _CLAIMS.get(resolve(p))
        if claim is not None and not claim[1]:
            _link_new(tmp, p)             # the output was absent when checked: never replace what appeared since
        else:
            os.replace(tmp, p)
        if claim is not None and hold:
            _CLAIMS[resolve(p)] = (claim[0], True, claim[2])      # written now: the next write replaces it
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        full = safety.space_error(exc, p) if isinstance(exc, Exception) else None
        if full is not None:
            raise full from None
        raise
    if not hold:
        release(p)


def _link_new(tmp, p):
    """Put tmp at p only if p does not exist (create-exclusive via a hard link), then drop tmp. When p
    appeared meanwhile (written by a program that did not take the lock), the result is kept beside it
    under a fresh name and UsageError says where."""
    try:
        os.link(tmp, p)
    except FileExistsError:
        keep = f"{p}.new-{os.getpid()}"
        os.replace(tmp, keep)
        raise UsageError(f"{p} appeared while this run worked (another program wrote it); it was left as it is "
                         f"and this run's result is in {keep}") from None
    except OSError:                       # no hard links on this filesystem: the plain rename
        if os.path.lexists(p):
            keep = f"{p}.new-{os.getpid()}"
            os.replace(tmp, keep)
            raise UsageError(f"{p} appeared while this run worked; it was left as it is and this run's "
                             f"result is in {keep}") from None
        os.replace(tmp, p)
        return
    os.remove(tmp)


def write_bytes(path, data, hold=False):
    """Write bytes atomically (hold: see atomic)."""
    with atomic(path, hold=hold) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def write_text(path, text, hold=False):
    """Write str atomically (UTF-8)."""
    return write_bytes(path, text.encode("utf-8"), hold=hold)


SCHEMA_VERSION = 1        # of every JSON document the commands write (fields: docs/JSON.md)


def stamped(obj, kind=None):
    """obj with schema_version, foxwindow_version (and kind, when given) first: the one stamp of every JSON
    document a command writes (a list becomes {"rows": [...]}). Fields: docs/JSON.md."""
    obj = dict(rows=obj) if isinstance(obj, (list, tuple)) else obj
    out = dict(schema_version=SCHEMA_VERSION, foxwindow_version=__version__)
    kind = obj.get("kind", kind)                          # a document that names its own kind keeps it
    if kind is not None:
        out["kind"] = kind
    out.update({k: v for k, v in obj.items() if k not in out})
    return out


def json_clean(v):
    """JSON-ready, recursively: numpy arrays and scalars to Python values (their tolist()), non-finite floats
    (NaN, inf) to None (strict JSON has no NaN). The one cleaner every command's JSON goes through."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):      # numpy arrays and scalars, torch tensors
        v = v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_clean(u) for k, u in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_clean(u) for u in v]
    return v


def write_result(path, obj, kind, indent=1, hold=False):
    """A command's JSON output: obj stamped (stamped: schema and package versions, its kind) and written with
    write_json."""
    return write_json(path, stamped(obj, kind), indent=indent, hold=hold)


def write_json(path, obj, indent=1, hold=False):
    """Write obj as strict JSON (NaN/inf written as null) atomically (hold: see atomic)."""
    return write_text(path, json.dumps(json_clean(obj), indent=indent, allow_nan=False) + "\n", hold=hold)


def save_npz(path, **arrays):
    """numpy.savez to `path` atomically (no ".npz" appended to the name)."""
    import numpy as np  # numpy: on use (outputs itself imports the standard library only)
    with atomic(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    return path


def save_torch(path, obj):
    """torch.save to `path` atomically."""
    import torch  # torch: heavy, on use (outputs itself imports the standard library only)
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


WIDTH = 120                     # the columns every command's printed lines fit in


def fill(text, indent="  ", width=WIDTH):
    """Prose wrapped to `width` columns, later lines indented: one string."""
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)


def fill_items(lead, items, indent=None, width=WIDTH):
    """`lead` and the items joined by ', ' within `width` columns, an item never cut: a list of lines (later lines
    indented by `indent`, default as wide as lead)."""
    pad = " " * len(lead) if indent is None else indent
    lines, line, fresh = [], lead, True               # fresh: nothing after the lead or the indent yet
    for k, item in enumerate(items):
        piece = item + ("," if k < len(items) - 1 else "")
        if not fresh and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line, fresh = pad, True
        line += piece if fresh else " " + piece
        fresh = False
    lines.append(line.rstrip())
    return lines


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
    import torch  # torch: heavy, on use (outputs itself imports the standard library only)
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


def input_file(name, path, note=True):
    """Raise UsageError unless `path` is an existing file. Returns the absolute path, noted as an input of
    the command (note_input: no output of the command may be this file; note=False for a file the command
    updates in place on purpose, such as train --compare's FOX_CKPT)."""
    p = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(p):
        raise UsageError(f"{name}: {path} not found")
    if not os.path.isfile(p):
        raise UsageError(f"{name}: {path} is not a file")
    return note_input(p, name) if note else p


def json_input(name, path):
    """The JSON document of input file `path` (input_file, then safety.read_json: strict, UTF-8). UsageError naming
    `name` and the file where it is missing, unreadable or not valid JSON."""
    real = input_file(name, path)
    try:
        return safety.read_json(real)
    except ValueError as exc:
        raise UsageError(f"{name}: {path} is {exc}") from None
    except OSError as exc:
        raise UsageError(f"{name}: {path} is not readable ({exc.strerror or exc})") from None


def text_file(name, path, limit=1 << 20):
    """Raise UsageError unless `path` (an existing file) holds UTF-8 text without NUL bytes, of at most
    `limit` bytes. Returns the text."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"{name}: {path} is not readable ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise UsageError(f"{name}: {path} is over {limit // 2 ** 20} MiB; expected a short text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: {path} is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}); "
                         "expected a text file") from None
    if "\0" in text:
        raise UsageError(f"{name}: {path} holds NUL bytes (a binary file); expected a text file")
    return text


# the inputs of the running command: (st_dev, st_ino) -> (argument, path); recorded only inside a command's
# scope(), so a file a library caller read earlier in the same process binds no later command
_INPUTS = {}
_DEPTH = 0
_MADE = []                  # folders check_dir made inside the running command's scope


def note_input(path, what="the input"):
    """Record `path` as an input of the command: an output that is the same file (by device and inode, whatever
    the spelling) is refused, with or without --force, whichever of the two is checked first. Returns path."""
    ident = _identity(path) if _DEPTH else None
    if ident is None:
        return path
    for real, (_, _, other) in _CLAIMS.items():
        if _identity(real) == ident:
            raise UsageError(f"{other or 'an output'}: {real} is also {what}, an input of this command; a command "
                             "never overwrites its own input (not even with --force): choose another output path")
    _INPUTS.setdefault(ident, (what, path))
    return path


def is_input(path):
    """Whether `path` is a recorded input of the running command (note_input), by device and inode."""
    ident = _identity(path)
    return ident is not None and ident in _INPUTS


def _refuse_input(p, what):
    ident = _identity(p)
    if ident is not None and ident in _INPUTS:
        arg, src = _INPUTS[ident]
        raise UsageError(f"{what}: {p} is also {arg} ({src}), an input of this command; a command never "
                         "overwrites its own input (not even with --force): choose another output path")


class _RunFlag(argparse.Action):
    """--debug / --break-lock: a store_true that also tells the running `cli`, so that an abbreviation argparse
    accepts (`--deb`, `--break`) is honoured like the full flag (cli itself sees only the words as typed)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=False, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        global BREAK_LOCK, DEBUG
        setattr(namespace, self.dest, True)
        if not _IN_CLI:                 # a main called from Python: its flags stay in its namespace
            return
        if self.dest == "break_lock":
            BREAK_LOCK = True
        else:
            DEBUG = True
            warnings.formatwarning = _PLAIN_WARNING


def add_common(parser):
    """--force, --debug and --break-lock, shared by every command."""
    parser.add_argument("--force", action="store_true",
                        help="replace existing output files (never tracked source files of the repository)")
    parser.add_argument("--debug", action=_RunFlag, help="on error, show the full traceback")
    parser.add_argument("--break-lock", action=_RunFlag,
                        help="remove the lock of an output that another run seems to hold (when no such run is "
                             "going: a lock left by a run on another host or a frozen process); see docs/SAFETY.md")
    return parser


# a number, as argparse should know it: "-1e6", "-.5", "-inf" are values, not options
NEGATIVE_NUMBER = r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$"


def parser(description, **kw):
    """An ArgumentParser that shows every default in --help, exits 2 with one line on bad usage and reads
    negative numbers in any notation ("-1e6") as values."""
    class OneLine(argparse.ArgumentParser):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._negative_number_matcher = re.compile(NEGATIVE_NUMBER, re.IGNORECASE)

        def error(self, message):
            self.exit(2, f"{self.prog}: error: {message}\n")

    return OneLine(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kw)


def cli(main, argv=None):
    """Run main(argv) as a command: returns its exit code (main's int, else 0).

    UsageError, ValueError, FileNotFoundError, json errors -> one line on stderr, exit 2;
    MissingPiece, ImportError -> one line, exit 1; KeyboardInterrupt -> one line, exit 130 (atomic
    writes leave earlier outputs intact); a closed output pipe (`| head`) -> quiet, exit 141; any other
    error (a numerical overflow, an unreadable file, out of memory) -> one line with its kind, exit 1.
    With --debug in argv the traceback is shown instead.
    """
    global BREAK_LOCK, DEBUG, _PLAIN_WARNING, _IN_CLI
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    saved_debug, DEBUG = DEBUG, debug
    prog = os.path.basename(sys.argv[0]) or "foxwindow"
    if prog in ("__main__.py", "-c", ""):
        prog = "foxwindow"
    saved, BREAK_LOCK = BREAK_LOCK, "--break-lock" in argv
    fmt = _PLAIN_WARNING = warnings.formatwarning
    if not debug:                                   # a warning is one line too (its source line with --debug)
        warnings.formatwarning = functools.partial(_one_line_warning, prog)
    _IN_CLI += 1
    try:
        # the command's output locks and inputs end with it; SIGTERM / SIGHUP unwind like Ctrl-C; text read from
        # files reaches the terminal with its control characters escaped
        with safety.terminal_guard(), safety.signals(), scope():
            made, held = len(_MADE), set(_CLAIMS)
            rc = _run(main, argv, debug, prog)
            if rc:
                for real in set(_CLAIMS) - held:    # a failed run: its locks first, then its empty folders
                    release(real)
                unmake(made)
            return rc
    finally:
        _IN_CLI -= 1
        BREAK_LOCK, DEBUG = saved, saved_debug
        warnings.formatwarning = fmt


def _one_line_warning(prog, message, category, filename, lineno, line=None):
    """warnings' text for a command: `prog: warning: Category: message` on one line, without Python's file, line
    number and source line (printed only; a recorder such as pytest.warns still gets the warning itself)."""
    text = " ".join(str(message).split())
    return f"{prog}: warning: {category.__name__}: {safety.shown(text)}\n"


def _run(main, argv, debug, prog):
    try:
        world = os.environ.get("WORLD_SIZE", "1")
        if world not in ("", "1") and not getattr(main, "ranked", False):
            # a command that does not split its work over torchrun's ranks would run whole on each and write its
            # outputs from each (`ranked`: forget's and train's mains; `command`: its name, cli.command's wrappers)
            raise UsageError(f"{getattr(main, 'command', prog)} runs in one process: under torchrun (WORLD_SIZE="
                             f"{world}) every rank would run it whole and write the same outputs; run it with python, "
                             "not torchrun (or unset WORLD_SIZE)")
        rc = main(argv)
        # an int is the exit code; anything else (None, or the results a main also returns to callers) is 0
        return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0
    except KeyboardInterrupt:
        if debug or DEBUG:
            raise
        print(f"{prog}: interrupted; outputs not yet written were not written, earlier files are intact",
              file=sys.stderr)
        return 130
    except safety.Stopped as exc:
        if debug or DEBUG:
            raise
        print(f"{prog}: stopped by {exc.name}; its lock and temporary files are removed, outputs not yet written "
              "were not written, earlier files are intact", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        # the reader of stdout went away (`foxwindow forget | head`): nothing more to say to anyone
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")
        return 141
    except (MissingPiece, ImportError) as exc:
        if debug or DEBUG:
            raise
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (UsageError, ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
            PermissionError, json.JSONDecodeError) as exc:
        if debug or DEBUG:
            raise
        print(f"{prog}: error: {_one_line(exc)} (--debug for the traceback)", file=sys.stderr)
        return 2
    except MemoryError:
        if debug or DEBUG:
            raise
        print(f"{prog}: error: out of memory (choose smaller sizes; --debug for the traceback)", file=sys.stderr)
        return 1
    except Exception as exc:            # noqa: BLE001  (the promise: no traceback without --debug)
        if debug or DEBUG:
            raise
        full = safety.space_error(exc)
        if full is not None:
            print(f"{prog}: error: {_one_line(full)}", file=sys.stderr)
            return 2
        print(f"{prog}: error: {type(exc).__name__}: {_one_line(exc)} (unexpected; --debug for the traceback)",
              file=sys.stderr)
        return 1


def _one_line(exc, limit=600):
    msg = safety.shown(" ".join((str(exc).strip() or type(exc).__name__).split()))
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


def describe(doc, argv=None):
    """`python module.py [--help]` for a library module: print what it is and exit 0."""
    first = (doc or "").strip().split("\n\n")[0]
    print(first)
    print("This is a library module with no command of its own; see README.md for the commands.")
    return 0


if __name__ == "__main__":
    raise SystemExit(describe(__doc__))
