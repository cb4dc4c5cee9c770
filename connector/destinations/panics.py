"""Keep a Rust library's panic messages off stderr while it runs (deltalake's writes).

deltalake's runtime can panic on a worker thread after a write failed, and the panic is
then only how the failure travels: a full disk makes object_store's buffered writer panic
("Already shut down", apache/arrow-rs-object-store#810) and the write returns the disk's
error as usual. Rust's default panic hook prints the panic, with a backtrace when
``RUST_BACKTRACE`` is set, straight to file descriptor 2, where no Python setting reaches.
So while such a call runs, descriptor 2 goes to a temporary file, and Python's own writers
(``sys.stderr`` and the logging handlers on it) write to the real stderr meanwhile. When the
last such call ends, descriptor 2 is restored and what native code wrote there is passed
on, panics left out (logged at debug level: ``--debug`` shows them).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["quiet_panics"]

log = logging.getLogger(__name__)

#: A panic as Rust's default hook prints it: the header, the message's line, then a
#: backtrace (``RUST_BACKTRACE``) or the note about one.
_PANIC = re.compile(
    r"^thread '[^'\n]*'(?: \(\d+\))? panicked at [^\n]*\n"
    r"[^\n]*\n"
    r"(?:stack backtrace:\n)?"
    r"(?:[ \t]+(?:\d+:|at )[^\n]*\n)*"
    r"(?:note: [^\n]*(?:RUST_BACKTRACE|backtrace)[^\n]*\n)?",
    re.MULTILINE,
)

_lock = threading.Lock()
_users = 0
_diverted: tuple[int, IO[bytes], Any, Any] | None = None  # real fd 2, capture, old and new stderr


@contextlib.contextmanager
def quiet_panics() -> Iterator[None]:
    """Run the block with Rust panics kept off stderr (calls on several threads share one
    diversion; the last to finish restores stderr)."""
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _users, _diverted
    with _lock:
        _users += 1
        if _users > 1:
            return
        try:
            sys.stderr.flush()
            real = os.dup(2)
        except (OSError, ValueError, AttributeError):
            return  # no stderr to divert
        capture = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the last `_leave`
        os.dup2(capture.fileno(), 2)
        old = sys.stderr
        new = _python_stderr(old, real)
        if new is not None:
            sys.stderr = new
            _restream(old, new)
        _diverted = (real, capture, old, new)


def _leave() -> None:
    global _users, _diverted
    with _lock:
        _users -= 1
        if _users or _diverted is None:
            return
        real, capture, old, new = _diverted
        _diverted = None
        if new is not None:
            new.flush()
            if sys.stderr is new:
                sys.stderr = old
            _restream(new, old)
        os.dup2(real, 2)
        os.close(real)
        capture.seek(0)
        text = capture.read().decode(errors="replace")
        capture.close()
    panics = _PANIC.findall(text)
    if panics:
        log.debug("kept off stderr: %s", "".join(panics).strip())
    rest = _PANIC.sub("", text)
    if rest.strip():
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(rest)
            sys.stderr.flush()


def _python_stderr(current: Any, real: int) -> Any:
    """A text stream on the real stderr for Python's writers, when `current` writes to
    descriptor 2 (None when it writes elsewhere: a test's capture, a redirected stream)."""
    try:
        if current.fileno() != 2:
            return None
    except (OSError, ValueError, AttributeError):
        return None
    raw = io.FileIO(real, "w", closefd=False)
    return io.TextIOWrapper(
        raw, encoding=current.encoding, errors=current.errors, line_buffering=True,
        write_through=True,
    )


def _restream(old: Any, new: Any) -> None:
    """Point the logging handlers writing to `old` at `new`."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                handler.setStream(new)
