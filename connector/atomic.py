"""Write a file aside and rename it into place, so readers see the old file or the new one.

A failed or killed writer leaves the previous file untouched: the new content goes to a
hidden temp file in the same directory (same filesystem, so the rename is atomic), is
fsynced, and only then replaces the target. The directory is fsynced after the rename so
the swap itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from connector.errors import DestinationError

__all__ = ["atomic_path"]

#: Temp files end with this, so globs on `*.parquet` / `*.csv` never pick up a partial file.
PARTIAL_SUFFIX = ".partial"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside `path`; on a clean exit it replaces `path` atomically.

    On an exception the temp file is removed and `path` is left as it was; a file system
    error (no space, no permission...) becomes a DestinationError naming the file.
    """
    target = Path(path)
    made = _missing_dirs(target.parent)
    for attempt in (1, 2):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(
                dir=target.parent, prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX
            )
            break
        except FileNotFoundError:  # another writer's failure just removed the empty folder
            if attempt == 2:
                raise DestinationError(f"cannot write {target}: its folder keeps vanishing") from None
        except OSError as exc:
            raise DestinationError(f"cannot write {target}: {exc.strerror or exc}") from exc
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        with open(temp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temp, 0o666 & ~_umask())  # as open() would have made it: mkstemp makes 0600
        os.replace(temp, target)
        _fsync_dir(target.parent)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        _remove_empty(made)
        raise DestinationError(f"writing {target} failed: {exc.strerror or exc}") from exc
    except BaseException:
        temp.unlink(missing_ok=True)
        _remove_empty(made)
        raise


def _missing_dirs(directory: Path) -> list[Path]:
    """The folders `directory` needs made, deepest first (none when it exists)."""
    missing = []
    for folder in (directory, *directory.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a failed first write made, while they are empty (a failed or
    stopped first export leaves no empty output folder behind)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty: another table's file is there, or being written
            return


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``os.umask`` can
    only be read by setting it, which races with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
