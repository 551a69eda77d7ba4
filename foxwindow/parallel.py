"""Per-head work over processes, with stop handling: the one engine the analysis drivers share.

    default_workers()                  the processors this process may run on (os.sched_getaffinity)
    run_jobs(fn, n, workers, ...)      fn(0), ..., fn(n - 1) in `workers` forked processes (1: in this one),
                                       results in job order; on Ctrl-C or SIGTERM the finished jobs are
                                       returned and the stop is reported (Stopped), never lost
    stop_signals()                     a context in which SIGTERM stops a run as Ctrl-C does
    deferred_stops()                   a context in which Ctrl-C and SIGTERM only set a flag, for work that
                                       stops where it chooses (a capture between its batches)

The jobs read their data from the parent's memory (fork: nothing is pickled but the job's index and its
result), so a driver sets up what fn needs before calling run_jobs. Each job must be self-contained and
deterministic (its own random stream): the results then do not depend on the number of workers.
"""
import concurrent.futures as cf
import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time

from threadpoolctl import threadpool_limits

from foxwindow import safety


def default_workers():
    """The processors available to this process (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def threads_arg(flag, n, note=""):
    """A command's torch CPU threads: an int from 1 to the processors available (torch's thread pool far past them
    ends the process: `torch.set_num_threads(100000)` crashes it). Returns n; safety.UsageError naming `flag`
    otherwise (`note`: appended to its line)."""
    cpus = default_workers()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cpus:
        raise safety.UsageError(f"{flag} {n}: this machine lets the command use {cpus} processor"
                                f"{'s' if cpus > 1 else ''}; give 1 to {cpus}{note}")
    return n


def resolve_workers(workers, n_jobs):
    """workers None: default_workers(); never more than the jobs; at least 1. ValueError for < 1."""
    if workers is None:
        workers = default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1 (or None: the available processors); got {workers!r}")
    return max(1, min(workers, n_jobs))


_TUNED = []


def tune_allocator():
    """Keep freed large arrays in this process's heap (glibc mallopt: mmap and trim thresholds of 1 GiB), so
    that the per-head analysis reuses its memory instead of faulting fresh pages in for every big temporary
    (measured at 256 x 16384 tokens a head: system time 2.95 s -> 0.94 s for two heads, the same peak). Set in
    the forked workers, and in a process that analyses saved traces (driver.analyse_traces: no model there);
    not in a parent that holds a model and its captures, where memory kept in the heap raised the peak of
    `python forget.py` from 1.9 to 2.9 GB. A no-op where the C library has no mallopt."""
    if _TUNED:
        return
    _TUNED.append(True)
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)                  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)                  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def one_blas_thread():
    """A context in which numpy's and scipy's BLAS run on one thread (threadpoolctl), for
    the per-head jobs: each job is one core's work, and the BLAS's own threads only spin beside it. Measured
    on 8 heads of 128 x 8192 on the 2 cores: 2 workers 9.0-10.4 s of wall and 15.5-16.7 CPU-s with the BLAS's
    default 2 threads a worker against 6.4-6.9 s and 11.0-12.1 CPU-s with one; one process 12.0-13.9 s and
    16.4-16.9 CPU-s against 12.0-12.2 s and 12.0 CPU-s."""
    return threadpool_limits(1, user_api="blas")


class Stopped(Exception):
    """A run stopped before its end (Ctrl-C, SIGTERM or a time bound): `done` {job index: result} of the
    finished jobs, `reason` what stopped it."""

    def __init__(self, done, reason):
        super().__init__(reason)
        self.done, self.reason = done, reason


class _Term(BaseException):
    """SIGTERM, raised in the main thread by stop_signals' handler."""


@contextlib.contextmanager
def stop_signals():
    """SIGTERM raises in the main thread (as Ctrl-C's KeyboardInterrupt does) while inside, and Ctrl-C raises
    KeyboardInterrupt (also inside deferred_stops); restored after."""
    def handler(signum, frame):
        raise _Term()
    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:                               # not the main thread: leave signals alone
        yield
        return
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)


class StopFlag:
    """What asked a run to stop inside deferred_stops: `reason` ("Ctrl-C", "SIGTERM") or None; true once set."""

    def __init__(self):
        self.reason = None

    def __bool__(self):
        return self.reason is not None


@contextlib.contextmanager
def deferred_stops():
    """While inside, Ctrl-C and SIGTERM raise nothing: they set the yielded StopFlag, and the work stops where it
    chooses (a capture between two batches, where every rank of a torchrun job can agree to stop). stop_signals
    inside it makes them raise again for its own span. Main thread only (elsewhere the flag stays unset);
    the earlier handlers come back after."""
    flag = StopFlag()

    def handler(signum, frame):
        flag.reason = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
    saved = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            saved[s] = signal.signal(s, handler)
    except ValueError:                               # not the main thread
        pass
    try:
        yield flag
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def _child_init():
    # the parent decides what a Ctrl-C means; a worker only stops when it is told to
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    tune_allocator()
    one_blas_thread()                # for the worker's life (its jobs are its only work)


_FN = None


def _call(i):
    return i, _FN(i)


def run_jobs(fn, n, workers=1, on_result=None, deadline=None):
    """fn(i) for i in range(n): in this process (workers 1) or in `workers` forked processes. Returns the list
    of results in job order. on_result(i, result): called in this process as each job finishes (progress).
    deadline: a time.monotonic() value past which no new job is started and the run stops.
    Raises Stopped (with the finished results) on Ctrl-C, SIGTERM or the deadline; a job's own exception
    propagates (the pool is shut down first)."""
    global _FN
    done = {}
    if workers <= 1 or n <= 1 or "fork" not in mp.get_all_start_methods():
        try:
            with one_blas_thread():
                for i in range(n):
                    if deadline is not None and time.monotonic() > deadline:
                        raise Stopped(done, "the time bound (--max-minutes) was reached")
                    done[i] = fn(i)
                    if on_result:
                        on_result(i, done[i])
        except (KeyboardInterrupt, _Term) as exc:
            raise Stopped(done, "SIGTERM" if isinstance(exc, _Term) else "Ctrl-C") from None
        return [done[i] for i in range(n)]
    _FN = fn
    ex = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_child_init)
    reason = None
    try:
        pending = set()
        nxt = 0
        while nxt < n or pending:
            while nxt < n and len(pending) < 2 * workers:       # a short queue: a stop wastes little
                if deadline is not None and time.monotonic() > deadline:
                    reason = "the time bound (--max-minutes) was reached"
                    break
                pending.add(ex.submit(_call, nxt))
                nxt += 1
            if reason and not pending:
                break
            fin, pending = cf.wait(pending, timeout=1.0, return_when=cf.FIRST_COMPLETED)
            for f in fin:
                i, r = f.result()
                done[i] = r
                if on_result:
                    on_result(i, r)
            if reason:
                nxt = n                                         # submit nothing more; let the running ones end
    except (KeyboardInterrupt, _Term) as exc:
        reason = "SIGTERM" if isinstance(exc, _Term) else "Ctrl-C"
    finally:
        _FN = None
        if reason and reason.startswith(("Ctrl", "SIG")):
            for p in list(getattr(ex, "_processes", {}).values()):
                p.terminate()
            ex.shutdown(wait=False, cancel_futures=True)
        else:
            ex.shutdown(wait=True, cancel_futures=True)
    if reason:
        raise Stopped(done, reason)
    return [done[i] for i in range(n)]


def say(msg):
    """One line on stderr (progress and estimates never go to stdout, which holds the results)."""
    print(msg, file=sys.stderr, flush=True)
