"""The process a run lives in: stops by signal, and what is left when one comes.

Cheap to import: the CLI installs `stop_signals` for every command before it imports the
command's module. Ctrl-C and a scheduler's SIGTERM unwind a run like an error (temporary files go, database
transactions roll back, the lock is released, the summary is printed) and end it with 130 or
143. Tables run on worker threads and the main thread only waits, so a stop is seen at once
whatever a destination is doing; a worker that does not unwind within `STOP_GRACE` seconds
(a library call that cannot be interrupted) is left behind, and the command exits without
waiting for it (`exit_now`): its destination commits whole or not at all. A call that would
commit on its own once started (Delta's writes run in native code) is marked
`uninterruptible`: a stop does not wait for it at all, so the table it writes is left as it
was unless its commit had landed before the signal.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from connector.errors import ExitCode

__all__ = [
    "STOP_GRACE",
    "TABLE_THREADS",
    "Terminated",
    "collector_paused",
    "exit_now",
    "holding",
    "interrupt_code",
    "interrupt_message",
    "raise_if_stopped",
    "stop_signals",
    "uninterruptible",
    "unwaited",
    "use_system_allocator",
]

#: Seconds a stopped run waits for its table threads to unwind before it reports and exits.
STOP_GRACE = 5.0
#: The name every table thread's starts with (`connector.jobs.schedule`): a library's idle
#: pool threads are not ours to wait for or to end a process over.
TABLE_THREADS = "connector-table"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread while `stop_signals` is active.

    A KeyboardInterrupt, so everything that unwinds for Ctrl-C (the client's engine cancels
    its task, atomic writes drop their temporary file, SQL loads roll back) does the same
    for a scheduler's stop.
    """


def interrupt_code(exc: BaseException) -> ExitCode:
    """The exit code of a stop: 143 for SIGTERM (`Terminated`), 130 for Ctrl-C."""
    return ExitCode.TERMINATED if isinstance(exc, Terminated) else ExitCode.INTERRUPTED


def interrupt_message(exc: BaseException) -> str:
    by = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
    return (
        f"interrupted by {by}: tables finished before it are written, the one in flight is "
        "left as it was; run again to finish"
    )


_signals_active = False
#: The stop a signal raised within `stop_signals`, kept in case a library swallowed it.
_stopped: KeyboardInterrupt | None = None


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` and Ctrl-C `KeyboardInterrupt`; after
    the first of them both signals are ignored until the block ends, so the unwinding is not
    cut short by a second one. Off the main thread, or nested, it does nothing.

    The stop is also remembered (`raise_if_stopped`): code that swallows a KeyboardInterrupt
    (pyarrow does, when it imports pandas lazily) cannot make a run go on regardless.
    """
    global _signals_active, _stopped
    if _signals_active or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        global _stopped
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stopped = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        raise _stopped

    previous = signal.signal(signal.SIGINT, stop), signal.signal(signal.SIGTERM, stop)
    _signals_active, _stopped = True, None
    try:
        yield
    finally:
        _signals_active, _stopped = False, None
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


#: Seconds between a waiting thread's looks for a stop (`holding`).
_STOP_POLL = 0.05
_inside_lock = threading.Lock()
_inside = 0  # threads within `uninterruptible`


@contextmanager
def uninterruptible() -> Iterator[None]:
    """Around a library call that commits once started and cannot be interrupted: it does
    not start after a stop, and a stop does not wait for it (`unwaited`); the process
    exits while it runs, before its commit."""
    global _inside
    raise_if_stopped()
    with _inside_lock:
        _inside += 1
    try:
        yield
    finally:
        with _inside_lock:
            _inside -= 1


@contextmanager
def holding(lock: threading.Lock) -> Iterator[None]:
    """Hold `lock`, raising a stop that comes while waiting for it. Another thread may hold
    it through an `uninterruptible` call that a stop does not wait for: a plain wait would
    last until the process exits, and the stop would wait out `STOP_GRACE` for it."""
    raise_if_stopped()
    while not lock.acquire(timeout=_STOP_POLL):
        raise_if_stopped()
    try:
        yield
    finally:
        lock.release()


def unwaited() -> int:
    """How many threads a stop need not wait for: those within `uninterruptible` once a
    signal asked for a stop; none before (an error that ends a run lets commits finish)."""
    return _inside if _stopped is not None else 0


def raise_if_stopped() -> None:
    """Raise the stop a signal asked for, if one did and it was swallowed on its way up.
    Table threads call it between batches and before writing."""
    if _stopped is not None:
        raise _stopped


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector held off, for work that makes many objects and no cycles
    (imports, a plan's rows): the collections they would set off only scan what the process
    holds. A collector the program had paused stays paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def use_system_allocator() -> None:
    """Make Arrow allocate with the C library's malloc in this process (the CLI commands do).

    Arrow's default pool (mimalloc) keeps per-thread heaps and freed memory for reuse: reading
    a Parquet file back (a merge) or a read's worker threads then show tens of MB more peak
    RSS than they use. A library call leaves the process's choice alone.
    """
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def exit_now(code: int) -> None:
    """End the process with `code` when a table thread that would not stop is still running
    (left behind after a stop, `STOP_GRACE`): the interpreter would otherwise wait for it at
    exit. Output is flushed first. Does nothing when no table thread is left."""
    lingering = [
        t for t in threading.enumerate()
        if t.name.startswith(TABLE_THREADS) and not t.daemon and t.is_alive()
    ]
    if not lingering:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
