"""Scratch folders in the system's temp folder: a sync's spool of rows, copies of objects.

A process killed outright (SIGKILL, the OOM killer) cannot remove its scratch folder, and a
spool holds whole tables' rows: left behind, every such kill would keep that much disk for
good. So each scratch folder holds a file its process keeps an exclusive `flock` on (the
kernel releases it however the process dies), and the first scratch folder a process makes
of a kind removes every folder of that kind whose lock no process holds, as
`connector.atomic` does for temp files beside a destination.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from types import TracebackType

__all__ = ["Scratch"]

#: The file each scratch folder's process keeps locked.
LOCK = ".held"

_swept: set[tuple[str, str]] = set()  # (temp folder, prefix) swept by this process
_swept_lock = threading.Lock()


class Scratch:
    """A new folder named `prefix`... in the temp folder, removed by `cleanup` (or on leaving
    a ``with`` block, or when garbage collected); one a killed process left is removed by
    the next process to make one of its `prefix`."""

    def __init__(self, prefix: str) -> None:
        _sweep(tempfile.gettempdir(), prefix)
        self.path, fd = _locked_folder(prefix)
        self._finalizer = weakref.finalize(self, _remove, self.path, fd)

    def cleanup(self) -> None:
        self._finalizer()

    def __enter__(self) -> Path:
        return self.path

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.cleanup()


def _locked_folder(prefix: str) -> tuple[Path, int]:
    """A new folder holding its lock, locked. Another process may take the new folder for a
    dead one's and remove it (while it is empty, or between making its lock and locking
    it): then another is made."""
    for _ in range(5):
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        lock = folder / LOCK
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # swept while empty, before its lock was made
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return folder, fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise OSError(f"cannot make a scratch folder in {tempfile.gettempdir()}: it kept being removed")


def _sweep(parent: str, prefix: str) -> None:
    """Remove the `prefix` folders in `parent` whose lock no process holds, and those left
    empty with no lock (a kill between removing a folder's lock and the folder). A folder
    holding files but no lock is not ours to judge: it stays."""
    with _swept_lock:
        if (parent, prefix) in _swept:
            return
        _swept.add((parent, prefix))
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        folder = Path(parent, name)
        try:
            fd = os.open(folder / LOCK, os.O_RDONLY)
        except FileNotFoundError:
            with contextlib.suppress(OSError):  # only while empty
                folder.rmdir()
            continue
        except OSError:  # another user's, or gone
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its process is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)


def _remove(folder: Path, fd: int) -> None:
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(fd)
