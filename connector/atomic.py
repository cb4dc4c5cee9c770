"""Write a file aside and rename it into place, so readers see the old file or the new one.

A failed or killed writer leaves the previous file untouched: the new content goes to a
hidden temp file in the same directory (same filesystem, so the rename is atomic), is
fsynced, and only then replaces the target. The directory is fsynced after the rename so
the swap itself survives a crash.

A writer killed outright (SIGKILL, a crash) cannot remove its temp file, so each writer
holds an exclusive `flock` on its temp file while it writes (the kernel releases it when
the process dies, however it dies), and the next write in that folder removes every temp
file that no writer holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from connector.errors import DestinationError

__all__ = ["atomic_path"]

#: Temp files end with this, so globs on `*.parquet` / `*.csv` never pick up a partial file.
PARTIAL_SUFFIX = ".partial"
#: Random temp names tried before giving up.
_NAME_TRIES = 100


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside `path`; on a clean exit it replaces `path` atomically.

    On an exception the temp file is removed and `path` is left as it was, and so are the
    folders: those this process made for writes that never finished are removed while empty
    (a failed or stopped first export leaves no empty folder, whichever of its parallel
    writers made it). A file system error (no space, no permission...) becomes a
    DestinationError naming the file and saying the operating system's error.
    """
    target = Path(path)
    fd, temp = _locked_temp(target)
    _remove_stale(target.parent, temp)
    try:
        yield temp
        with open(temp, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temp, target)
        _fsync_dir(target.parent)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        _remove_empty(target.parent)
        raise DestinationError(f"writing {target} failed: {_said(exc)}") from exc
    except BaseException:
        temp.unlink(missing_ok=True)
        _remove_empty(target.parent)
        raise
    finally:
        os.close(fd)
    _kept(target.parent)


def _locked_temp(target: Path) -> tuple[int, Path]:
    """A new temp file beside `target`, open and locked (held while written: not a dead
    writer's leftover). Between making a file and locking it, another writer may take it for
    a dead writer's and remove it: then the file locked is no longer at its path, and
    another is made."""
    for attempt in range(1, 6):
        _make_folder(target)
        try:
            fd, name = _new_file(target)
        except FileNotFoundError as exc:  # another writer's failure just removed the empty folder
            if attempt == 5:
                raise DestinationError(f"cannot write {target}: {_said(exc)}") from exc
            continue
        except OSError as exc:
            raise DestinationError(f"cannot write {target}: {_said(exc)}") from exc
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(name).st_ino == os.fstat(fd).st_ino:
                return fd, name
        except FileNotFoundError:
            pass
        os.close(fd)  # removed before it was locked: make another
    raise DestinationError(f"cannot write {target}: its temp files kept being removed")


#: Folders this process made for `atomic_path` writes that have not held a finished file
#: yet: a failed write removes them while empty. Process-wide, because parallel writers
#: share a new folder and only one of them made it.
_made: set[Path] = set()
_made_lock = threading.Lock()


def _said(exc: OSError) -> str:
    """The operating system's words for `exc` (``No such file or directory``)."""
    return exc.strerror or str(exc)


#: Folders swept of dead writers' temp files (`_remove_stale`), and when: a folder is swept
#: again only after SWEEP_SECONDS, not before each of its writes (a run writing 2,000 files
#: into one folder listed it 2,000 times).
_swept: dict[Path, float] = {}
_swept_lock = threading.Lock()
SWEEP_SECONDS = 60.0


def _remove_stale(folder: Path, ours: Path) -> None:
    """Remove the temp files in `folder` that no writer holds: those of writers that died
    (killed mid-write), which nothing else would ever remove."""
    now = time.monotonic()
    with _swept_lock:
        if now - _swept.get(folder, -SWEEP_SECONDS) < SWEEP_SECONDS:
            return
        _swept[folder] = now
    try:
        names = [n for n in os.listdir(folder) if n.startswith(".") and n.endswith(PARTIAL_SUFFIX)]
    except OSError:
        return
    for name in names:
        path = folder / name
        if path == ours:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # gone already, or another user's
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)  # a writer that had not locked it yet makes another
        except OSError:  # held: being written
            pass
        finally:
            os.close(fd)


def _make_folder(target: Path) -> None:
    """Make the folder `target` goes in (remembering what was made); the OS's error if not."""
    folder = target.parent
    missing = []
    for f in (folder, *folder.parents):
        if f.exists():
            break
        missing.append(f)
    if not missing:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        with _made_lock:
            _made.update(f for f in missing if f.is_dir())
        _remove_empty(folder)
        raise DestinationError(
            f"cannot write {target}: making the folder {exc.filename or folder} failed: {_said(exc)}"
        ) from exc
    with _made_lock:
        _made.update(missing)


def _remove_empty(folder: Path) -> None:
    """Remove `folder` and its parents while this process made them for writes that never
    finished and they are empty (another writer's file keeps them)."""
    with _made_lock:
        for made in (folder, *folder.parents):
            if made not in _made:
                return
            try:
                made.rmdir()
            except FileNotFoundError:
                pass
            except OSError:  # not empty: another table's file is there, or being written
                return
            _made.discard(made)


def _kept(folder: Path) -> None:
    """`folder` holds a finished file now: it and its parents are no longer ours to remove."""
    with _made_lock:
        _made.difference_update((folder, *folder.parents))


def _new_file(target: Path) -> tuple[int, Path]:
    """A file of a name no other has, beside `target`, made as ``open()`` makes one: 0666
    less the umask, which the kernel applies (``mkstemp`` makes 0600, and reading the umask
    to widen it took a read of ``/proc`` and a ``chmod`` a file)."""
    for _ in range(_NAME_TRIES):
        name = target.with_name(f".{target.name}.{secrets.token_hex(4)}{PARTIAL_SUFFIX}")
        try:
            return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temp file name beside {target}")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
