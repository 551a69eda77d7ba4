"""Untrusted inputs and hard stops: what every command guarantees besides the write guard of outputs.py.

    shown(value)                 a name or string read from a file, for the terminal: control characters
                                 (escape sequences, carriage returns, bidi overrides) written as \\xNN escapes
    TerminalText(stream)         a text stream that writes what it gets with those characters escaped (all but
                                 newline, tab and carriage return): outputs.cli puts stdout and stderr behind it
    no_remote_code(folder, flag) a model or tokenizer folder whose JSON files name custom code (`auto_map`) is
                                 refused before anything is loaded (transformers is always called with
                                 trust_remote_code=False, so nothing ever prompts)
    locks                        write_lock / judge_lock / take_over: the lock file beside an output holds JSON
                                 {pid, host, started, proc_start, output}; its mtime is a heartbeat refreshed
                                 every HEARTBEAT_S by a running command. A lock is stale, and taken over, when
                                 it is empty or unreadable, its process is gone (or the pid now belongs to a
                                 process started at another time), or its heartbeat is older than STALE_S;
                                 any other lock is refused with the way out (--break-lock, or the file to remove)
    temp_name / stale_temps      temporary files beside an output are named .NAME.PID-XXXXXXXX.tmp[.EXT]; those
                                 left by a killed process (SIGKILL) are removed by the next run on that output
    signals()                    while a command runs: SIGTERM and SIGHUP raise Stopped, so that its temporary
                                 files and locks are removed on the way out (exit 128 + the signal)
    space_error(exc, path)       a write that failed for space (ENOSPC, EDQUOT, torch's "unexpected pos"): the
                                 one-line error naming the file; need_space(path, nbytes, what) before the work
    need_memory(nbytes, what)    before the work: ValueError when the memory available is less than nbytes

Names longer than the file system allows once decorated (a 250-character output) get a shortened lock and
temporary name: the first characters of the name, "~" and 12 hex digits of its SHA-1.
"""
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time


class UsageError(ValueError):
    """A bad argument, input or output location: reported as one line, exit code 2 (outputs.UsageError: the
    same class)."""


HEARTBEAT_S = 30            # a running command refreshes the mtime of its locks this often
STALE_S = 600               # a lock whose heartbeat (mtime) is older than this is taken over
LOCK_SUFFIX = ".foxwindow-lock"

# ----------------------------------------------------------------------------- text from files is data

# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI), and the bidi overrides / isolates that reorder
# what a terminal or editor shows
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ALL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
# what a stream lets through: backspace, tab, newline and carriage return (progress bars redraw with them)
_STREAM = re.compile(f"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\x1b"}


def _escape(m):
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


JSON_ERRORS = (UnicodeDecodeError, ValueError, RecursionError)   # json.load's: bad bytes, bad JSON, too deep


def read_json(path):
    """json.load of the file at path (UTF-8; a byte-order mark at its start is read past, as JSON allows).
    ValueError "not valid JSON (why)" for bad bytes, bad JSON or nesting past the parser (the caller names the
    file); OSError as open raises it."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return json.load(fh)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid JSON (not UTF-8 text: byte {exc.start})") from None
    except JSON_ERRORS as exc:
        raise ValueError(f"not valid JSON ({json_error(exc)})") from None


def json_error(exc):
    """Why json.load failed (one of JSON_ERRORS), in a few words: too deep for the parser, a number past Python's
    4300-digit limit (not its advice to raise the limit), else the parser's own message on one line."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if "integer string conversion" in str(exc):
        return "a number of more than 4300 digits"
    return " ".join(str(exc).split())[:160]


def shown(value):
    """str(value) with every control character escaped (ESC as \\x1b, newline as \\n, ...): names, labels and
    paths read from traces, checkpoints, configs and JSON are printed through this, never raw."""
    return _ALL.sub(_escape, value if isinstance(value, str) else str(value))


def shown_lines(value):
    """shown() line by line: every control character escaped but the line breaks (text laid out in lines: a page,
    a figure's title)."""
    return "\n".join(shown(part) for part in str(value).split("\n"))


class TerminalText:
    """A text stream whose writes have their control characters escaped, all but newline, tab, carriage
    return and backspace (the progress bars' own). Everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s):
        if isinstance(s, str):
            self._stream.write(_STREAM.sub(_escape, s))
        else:
            self._stream.write(s)
        return len(s)

    def writelines(self, lines):
        for li in lines:
            self.write(li)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def terminal_guard():
    """sys.stdout and sys.stderr behind TerminalText while a command runs (restored after)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, TerminalText) or s is None else TerminalText(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


# ----------------------------------------------------------------------------- no code from a model folder

def no_remote_code(folder, flag="--model"):
    """Refuse a model or tokenizer folder whose JSON files (config.json, tokenizer_config.json, any *.json at
    its top: the files the loaders read) name custom code with an `auto_map` (or a `custom_pipelines`) key:
    loading it would run Python files of the folder. UsageError naming the file and the key; a folder
    that is not there (a hub name) is left to transformers, which is always called with
    trust_remote_code=False."""
    path = os.path.expanduser(folder) if isinstance(folder, str) else None
    if not path or not os.path.isdir(path):
        return
    for f in sorted(os.listdir(path)):
        full = os.path.join(path, f)
        if not f.endswith(".json") or not os.path.isfile(full):
            continue
        try:
            with open(full, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue                    # the loader that reads it says what is wrong with it
        if not isinstance(doc, dict):
            continue
        for key in ("auto_map", "custom_pipelines"):
            if key in doc:
                raise UsageError(f"{flag} {shown(folder)}: {f} has an '{key}' key, which asks to run Python code "
                                 f"from the folder; foxwindow never runs code from a model folder (remove the key "
                                 f"if the model also loads without it)")


# ----------------------------------------------------------------------------- locks


def _name_max(folder):
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def short_name(base, room):
    """base itself when its UTF-8 form fits in `room` bytes, else its first characters, "~" and 12 hex
    digits of its SHA-1 (still told apart from every other name)."""
    if len(base.encode()) <= room:
        return base
    tag = "~" + hashlib.sha1(base.encode()).hexdigest()[:12]
    keep = base
    while len((keep + tag).encode()) > room:
        keep = keep[:-1]
    return keep + tag


def lock_path(real):
    """The lock file of output `real` (resolved path): .NAME.foxwindow-lock beside it, NAME shortened when the
    whole would pass the file system's name limit."""
    d, base = os.path.split(real)
    return os.path.join(d, "." + short_name(base, _name_max(d or ".") - 1 - len(LOCK_SUFFIX)) + LOCK_SUFFIX)


def _proc_start(pid):
    """The start time of process pid in clock ticks since boot (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_STARTED = time.time()


def lock_text(real):
    return json.dumps(dict(pid=os.getpid(), host=socket.gethostname(), started=_STARTED,
                           proc_start=_proc_start(os.getpid()), output=real)) + "\n"


def write_lock(lock, real):
    """Create `lock` holding this process's record, all at once (written to a private file, then hard-linked
    to the lock's name, which fails when the lock exists). Returns True when taken, False when a lock is
    there. OSError (space, permissions) leaves no lock and no partial file behind."""
    tmp = f"{lock}.{os.getpid()}-{secrets.token_hex(4)}.new"
    if len(os.path.basename(tmp).encode()) > _name_max(os.path.dirname(lock) or "."):
        tmp = os.path.join(os.path.dirname(lock), f".foxwindow-lock.{os.getpid()}-{secrets.token_hex(4)}.new")
    data = lock_text(real).encode()
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        try:
            os.link(tmp, lock)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
        # no hard links here: create-exclusive, then write; a failed write removes the lock again
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.remove(lock)
            raise
        os.close(fd)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def read_lock(lock):
    """(record dict or None when empty / unreadable, (st_dev, st_ino, st_mtime) or None when the lock is gone).
    Both lock formats are read: JSON, and the older "PID\\nHOST\\n"."""
    try:
        st = os.stat(lock)
        with open(lock, "rb") as fh:
            raw = fh.read(4096)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, (0, 0, 0.0)
    ident = (st.st_dev, st.st_ino, st.st_mtime)
    try:
        text = raw.decode()
        if text.lstrip().startswith("{"):
            rec = json.loads(text)
            if not isinstance(rec, dict):
                return None, ident
            rec["pid"] = int(rec["pid"])
            rec["host"] = str(rec.get("host", ""))
            return rec, ident
        pid, host = text.split("\n")[:2]
        return dict(pid=int(pid), host=host), ident
    except (ValueError, KeyError, TypeError):
        return None, ident


def _alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def judge_lock(rec, ident, now=None):
    """Why the lock (read_lock's answer) is stale, or None when its owner may still be writing."""
    now = time.time() if now is None else now
    if rec is None:
        return "empty or unreadable"
    age = now - ident[2]
    if rec["host"] == socket.gethostname():
        if not _alive(rec["pid"]):
            return f"process {rec['pid']} has ended"
        ps = rec.get("proc_start")
        if isinstance(ps, int) and _proc_start(rec["pid"]) not in (None, ps):
            return f"process id {rec['pid']} now belongs to another program"
    if age > STALE_S:
        return f"no heartbeat for {age / 60:.0f} min (a running command refreshes it every {HEARTBEAT_S} s)"
    return None


def describe_holder(rec, ident, now=None):
    now = time.time() if now is None else now
    started = rec.get("started")
    when = f", started {time.strftime('%H:%M:%S', time.localtime(started))}" if isinstance(started, (int, float)) \
        else ""
    return f"process {rec['pid']} on {shown(rec['host'])}{when}, heartbeat {now - ident[2]:.0f} s ago"


def take_over(lock, ident):
    """Remove the stale lock `lock`, if it is still the file judged (same inode and mtime): it is renamed
    aside first, so that a lock another run took meanwhile is put back, not deleted. True when removed."""
    aside = f"{lock}.{os.getpid()}-{secrets.token_hex(4)}.stale"
    if len(os.path.basename(aside).encode()) > _name_max(os.path.dirname(lock) or "."):
        aside = os.path.join(os.path.dirname(lock), f".foxwindow-lock.{os.getpid()}-{secrets.token_hex(4)}.stale")
    try:
        os.rename(lock, aside)
    except OSError:
        return False
    try:
        st = os.stat(aside)
        if (st.st_dev, st.st_ino) != ident[:2] and ident[:2] != (0, 0):
            with contextlib.suppress(OSError):         # another run's fresh lock: put it back
                os.link(aside, lock)
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            os.remove(aside)


# locks held by this process, refreshed by the heartbeat thread
HELD = set()
_beat = None


def hold(lock):
    """Keep `lock`'s heartbeat going while this process holds it."""
    global _beat
    HELD.add(lock)
    if _beat is None or not _beat.is_alive():
        _beat = threading.Thread(target=_heartbeat, name="foxwindow-lock-heartbeat", daemon=True)
        _beat.start()


def drop(lock):
    HELD.discard(lock)
    with contextlib.suppress(OSError):
        os.remove(lock)


def _heartbeat():
    while True:
        time.sleep(HEARTBEAT_S)
        for lock in list(HELD):
            with contextlib.suppress(OSError):
                os.utime(lock)


# ----------------------------------------------------------------------------- temporary files

_TEMP = re.compile(r"^\.(?P<base>.+)\.(?P<pid>\d+)-[0-9a-f]{8}\.tmp(\.[^.]*)?$")
_OLD_TEMP = re.compile(r"^\.(?P<base>.+)\.[a-z0-9_]{8}\.tmp(\.[^.]*)?$")


def temp_name(p, sfx):
    """A fresh temporary name beside output p: .NAME.PID-XXXXXXXX.tmp.EXT (NAME shortened when needed)."""
    d, base = os.path.split(p)
    sfx = sfx if len(sfx) <= 16 else ""
    tail = f".{os.getpid()}-{secrets.token_hex(4)}.tmp{sfx}"
    return os.path.join(d, "." + short_name(base, _name_max(d or ".") - 1 - len(tail)) + tail)


def stale_temps(real):
    """Remove the temporary files of output `real` left by processes of this host that are gone (a SIGKILL
    during a write), and older-style ones (no pid in the name) untouched for STALE_S. Called by the run that
    has just taken the output's lock. Returns the names removed."""
    d, base = os.path.split(real)
    try:
        names = os.listdir(d or ".")
    except OSError:
        return []
    gone = []
    for n in names:
        m = _TEMP.match(n)
        old = _OLD_TEMP.match(n) if m is None else None
        hit = m or old
        if hit is None:
            continue
        b = hit.group("base")
        if b != base and not (b.count("~") and b == short_name(base, len(b.encode()))):
            continue
        full = os.path.join(d, n)
        try:
            if m is not None:
                if int(m.group("pid")) == os.getpid() or _alive(int(m.group("pid"))):
                    continue
            elif time.time() - os.stat(full).st_mtime < STALE_S:
                continue
            os.remove(full)
            gone.append(n)
        except OSError:
            continue
    return gone


# ----------------------------------------------------------------------------- signals


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived while a command ran: unwinds like Ctrl-C (temporary files and locks removed)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self):
        return signal.Signals(self.signum).name


def _stop(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def signals():
    """SIGTERM and SIGHUP raise Stopped while inside (main thread only; the earlier handlers come back after)."""
    saved = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if s is None:
                continue
            with contextlib.suppress(OSError, ValueError):
                saved[s] = signal.signal(s, _stop)
    try:
        yield
    finally:
        for s, h in saved.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(s, h)


# ----------------------------------------------------------------------------- disk space

SPACE_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)
SPACE_WORDS = ("no space left", "unexpected pos", "disk quota", "file too large")


def _free(folder):
    try:
        st = os.statvfs(folder)
        return st.f_bavail * st.f_frsize
    except OSError:
        return None


def space_error(exc, path=None):
    """The UsageError for a write that failed for space (OSError ENOSPC / EDQUOT / EFBIG, or torch's and other
    libraries' messages of the same), naming the file; None for any other exception."""
    err = exc if isinstance(exc, OSError) else None
    hit = err is not None and err.errno in SPACE_ERRNOS
    if not hit and isinstance(exc, (OSError, RuntimeError)):
        hit = any(w in str(exc).lower() for w in SPACE_WORDS)
    if not hit:
        return None
    path = path or getattr(exc, "filename", None) or "the output"
    folder = os.path.dirname(os.path.abspath(path)) if path != "the output" else "."
    free = _free(folder)
    left = f" ({free / 2 ** 20:.0f} MiB free there)" if free is not None else ""
    return UsageError(f"no space left on the device writing {shown(path)}{left}: nothing was written there and an "
                      f"earlier file of that name is intact; free some space or choose another folder")


def available_memory():
    """Bytes of memory a new allocation may take now (Linux MemAvailable, else the free physical pages);
    None where neither is known."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def need_memory(nbytes, what):
    """Before the work: ValueError when `what` would hold about nbytes and less memory than that is available."""
    free = available_memory()
    if free is not None and nbytes > free:
        raise ValueError(f"{what} would hold about {nbytes / 2 ** 30:.3g} GiB and {free / 2 ** 30:.3g} GiB of memory "
                         f"is available")


def need_space(path, nbytes, what):
    """Before the work: refuse an output of about nbytes when its folder has less free (with a 10% margin)."""
    folder = os.path.dirname(os.path.abspath(path))
    free = _free(folder)
    if free is not None and nbytes and free < 1.1 * nbytes:
        raise UsageError(f"{what}: {shown(path)} needs about {nbytes / 2 ** 20:.1f} MiB and its folder has "
                         f"{free / 2 ** 20:.1f} MiB free; free some space or choose another folder")
