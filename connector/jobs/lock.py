"""One run of a job at a time: an exclusive `flock` on a lock file beside the state.

The kernel drops the lock when the process dies, even by `kill -9`, so a crashed run never
leaves a stale lock behind. The file itself stays (deleting it would race with a waiter).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from connector.errors import ConfigError, JobLocked

__all__ = ["JobLocked", "job_lock"]

_POLL_SECONDS = 0.05


@contextmanager
def job_lock(
    path: Path,
    *,
    wait: float = 0.0,
    job: str = "",
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the job's lock for the block; wait up to `wait` seconds for it, else JobLocked.
    `on_wait(holder)` hears once that the run waits (holder: "" or " as process N"). A
    folder where the lock cannot be made (read-only, not ours) is a ConfigError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot open the job's lock file ({exc.strerror or exc}); the job's state "
            "folder must be writable (sync.state_dir or --state-dir puts it elsewhere)"
        ) from None
    try:
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if on_wait is not None and wait > 0:
                    on_wait(_holder(fd))
                    on_wait = None
                if time.monotonic() >= deadline:
                    holder = _holder(fd)
                    raise JobLocked(
                        f"job {job or path.stem!r} is already running{holder} "
                        f"(lock file {path}); waited {wait:g}s — nothing was done"
                    ) from None
                time.sleep(_POLL_SECONDS)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f" as process {pid}" if pid.isdigit() else ""
