"""Where the file formats keep their files: a local folder or object storage, one layer.

A `Store` is a folder of named files: does one exist, where can it be read, and replace it
whole. `LocalStore` is a directory (files written aside and renamed: `connector.atomic`);
`ObjectStore` is a prefix in object storage (``s3://``, ``gs://``, ``az://``) through fsspec.
The file formats (`connector.destinations.files`) and their merges are the same on both.

Each scheme's fsspec implementation (s3fs, gcsfs, adlfs) is an optional extra, imported by
`connector.extras.require`, and finds credentials in its provider's standard chain
(environment, profile, instance role; botocore also honours ``AWS_ENDPOINT_URL``): a URL or
a job file never carries them, and `check_location` refuses one that tries.

Objects appear whole or not at all: a file is written locally with the atomic writer, then
uploaded in one put (`ObjectStore.put`). A single PUT that does not finish never becomes an
object, and neither does a multipart upload that is never completed (large files), so a
killed upload leaves the previous object as it was. Uploads read the file a part at a time
(`PART_BYTES`): s3fs's default reads a file under 100 MiB whole into memory for one PUT
(+127 MB of peak RSS exporting 1,000,000 rows to S3).

Every request to object storage is bounded (the destination's ``timeout``, by default
`connector.locations.DEFAULT_TIMEOUT`) and tried a few times (s3fs: 5), so a
store that stops answering fails the table within about 6 times that, with a message naming
it, rather than holding the run for ever (on Azure, see `connector.locations.within`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from connector.atomic import atomic_path
from connector.errors import ConnectorError, DestinationError
from connector.locations import DEFAULT_TIMEOUT, SCHEMES, filesystem, is_remote, within
from connector.scratch import Scratch

__all__ = ["PART_BYTES", "LocalStore", "ObjectStore", "Store", "open_store", "remove_uncommitted"]

log = logging.getLogger(__name__)


#: Bytes of a file an upload holds at a time: a file larger than this goes up in parts of
#: this size, one after the other (S3's smallest part is 5 MiB; GCS's chunks are multiples of
#: 256 KiB). Azure's SDK already uploads in blocks of its own.
PART_BYTES = 8 * 2**20
#: Each implementation's own words for that.
_UPLOADS: dict[str, dict[str, int]] = {
    "s3fs": {"chunksize": PART_BYTES, "max_concurrency": 1},
    "gcsfs": {"chunksize": PART_BYTES},
}


class Store(Protocol):
    """A folder of named files, local or in object storage."""

    def check(self) -> None:
        """Fail now if the folder cannot be reached at all (no bucket, no access)."""

    def locate(self, name: str) -> str:
        """The file's path or URL, as a person reads it."""

    def exists(self, name: str) -> bool: ...

    def listing(self) -> dict[str, bool]:
        """What the folder holds: each name, and whether it is a folder (empty when there is
        no folder yet)."""

    def readable(self, name: str) -> Path | None:
        """A local path holding the file's current content (None: there is no such file)."""

    def replace(self, name: str) -> contextlib.AbstractContextManager[Path]:
        """A local path to write the file's new content to; on a clean exit it replaces the
        file whole (readers see the old one or the new one), on an exception nothing changes."""

    def tree(self) -> dict[str, float]:
        """Every file under the folder, at any depth (names ``/``-separated, relative to it),
        with when it was last written: seconds since the epoch by the storage's own clock (a
        file whose time the storage does not say is left out)."""

    def remove(self, names: Iterable[str]) -> None:
        """Remove these files (`tree`'s names); one gone already is no error."""

    def close(self) -> None: ...


def open_store(location: str, timeout: float = DEFAULT_TIMEOUT) -> Store:
    """The store for a local directory or an object storage URL."""
    return ObjectStore(location, timeout) if is_remote(location) else LocalStore(Path(location))


def remove_uncommitted(
    location: str, timeout: float, doomed: Callable[[dict[str, float]], list[str]], what: str
) -> None:
    """Remove from `location` the files `doomed` picks from its tree (name -> time written):
    those of writes that never committed (no `what` of the table refers to them), which no
    reader sees and nothing else would remove. Best effort: a failure to remove is a
    warning, for the write's own outcome matters more."""
    store = open_store(location, timeout)
    try:
        names = doomed(store.tree())
        store.remove(names)
        if names:
            log.info("removed %d files no %s of %s refers to", len(names), what, location)
    except Exception as exc:
        log.warning("could not remove the files a failed write left in %s: %s", location, exc)
    finally:
        store.close()


class LocalStore:
    """A local directory: files written aside and renamed into place (`atomic_path`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def check(self) -> None:
        pass

    def locate(self, name: str) -> str:
        return str(self.directory / name)

    def exists(self, name: str) -> bool:
        return (self.directory / name).is_file()

    def listing(self) -> dict[str, bool]:
        try:
            return {p.name: p.is_dir() for p in self.directory.iterdir()}
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise DestinationError(f"reading {self.directory} failed: {exc.strerror or exc}") from exc

    def readable(self, name: str) -> Path | None:
        path = self.directory / name
        return path if path.is_file() else None

    def replace(self, name: str) -> contextlib.AbstractContextManager[Path]:
        return atomic_path(self.directory / name)

    def tree(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for folder, _, files in os.walk(self.directory):
            for name in files:
                path = Path(folder) / name
                with contextlib.suppress(FileNotFoundError):
                    found[path.relative_to(self.directory).as_posix()] = path.stat().st_mtime
        return found

    def remove(self, names: Iterable[str]) -> None:
        for name in names:
            try:
                (self.directory / name).unlink(missing_ok=True)
            except OSError as exc:
                raise DestinationError(
                    f"removing {self.directory / name} failed: {exc.strerror or exc}"
                ) from exc

    def close(self) -> None:
        pass


class ObjectStore:
    """A folder of objects under one URL (``s3://bucket/prefix``): get, put, exists, whole.

    An object is read through a local copy, downloaded the first time a run reads it and
    kept in step by this run's writes; a write goes to a local file first, then is uploaded
    in one put.
    """

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.scheme = self.url.partition("://")[0].lower()
        self.fs = filesystem(self.url, timeout)
        self._timeout = timeout
        self.root = self.url.partition("://")[2]
        self._copies = Scratch("connector-objects-")
        self._fetched: set[str] = set()

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def locate(self, name: str) -> str:
        return self.url_of(name)

    def close(self) -> None:
        self._copies.cleanup()

    def readable(self, name: str) -> Path | None:
        """The object's local copy, downloaded once a run (then kept in step by writes)."""
        copy = self._copies.path / name
        if name not in self._fetched:
            if not self.get(name, copy):
                copy.unlink(missing_ok=True)
            self._fetched.add(name)
        return copy if copy.is_file() else None

    @contextlib.contextmanager
    def replace(self, name: str) -> Iterator[Path]:
        copy = self._copies.path / name
        try:
            with atomic_path(copy) as temp:
                yield temp
            self.put(copy, name)
        except BaseException:
            self._fetched.discard(name)  # the copy may be ahead of the object now
            copy.unlink(missing_ok=True)
            raise
        self._fetched.add(name)

    def check(self) -> None:
        """Fail now if the bucket (Azure: container) cannot be listed (missing, or no access)."""
        bucket = self.root.partition("/")[0]
        with self.failures("reaching", f"{self.scheme}://{bucket}"):
            try:
                self._call("ls", bucket, detail=False)
            except FileNotFoundError:
                what = "container" if SCHEMES[self.scheme] == "adlfs" else "bucket"
                raise DestinationError(
                    f"reaching {self.scheme}://{bucket} failed: no such {what}"
                ) from None

    def exists(self, name: str) -> bool:
        with self.failures("reading", self.url_of(name)):
            return bool(self._call("exists", self._key(name)))

    def listing(self) -> dict[str, bool]:
        with self.failures("reading", self.url):
            try:
                self.fs.invalidate_cache(self.root)
                entries = self._call("ls", self.root, detail=True)
            except FileNotFoundError:
                return {}
        return {
            str(e["name"]).rstrip("/").rpartition("/")[2]: e.get("type") == "directory"
            for e in entries
        }

    def get(self, name: str, local: Path) -> bool:
        """Download the object `name` to `local` (whole: written aside, then renamed);
        False when there is no such object."""
        key = self._key(name)
        with self.failures("reading", self.url_of(name)):
            if not self._call("exists", key):
                return False
            with atomic_path(local) as temp:
                self.fs.get_file(key, str(temp))
        return True

    def put(self, local: Path, name: str) -> None:
        """Upload `local` as the object `name`, replacing it only once the upload is complete."""
        with self.failures("writing", self.url_of(name)):
            self.fs.put_file(str(local), self._key(name), **_UPLOADS.get(SCHEMES[self.scheme], {}))
            self.fs.invalidate_cache(self._key(name))

    def tree(self) -> dict[str, float]:
        with self.failures("reading", self.url):
            self.fs.invalidate_cache(self.root)
            try:
                entries = self._call("find", self.root, detail=True)
            except FileNotFoundError:
                return {}
        found = {}
        for key, info in entries.items():
            written = _written(info)
            if written is not None and info.get("type") != "directory":
                found[str(key).removeprefix(self.root + "/")] = written
        return found

    def remove(self, names: Iterable[str]) -> None:
        keys = [self._key(n) for n in names]
        if keys:
            with self.failures("removing files under", self.url):
                self._call("rm", keys)

    def _key(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return within(self.fs, self._timeout, method, *args, **kwargs)

    @contextlib.contextmanager
    def failures(self, doing: str, url: str) -> Iterator[None]:
        """A storage failure (no bucket, no credentials, refused) becomes one DestinationError
        line naming the URL; the provider's exception never escapes unwrapped."""
        try:
            yield
        except (ConnectorError, FileNotFoundError):
            raise  # ours already; a missing object is the caller's answer
        except Exception as exc:
            raise DestinationError(f"{doing} {url} failed: {_one_line(exc)}") from exc


def _written(info: dict[str, Any]) -> float | None:
    """When an object was last written, from its listing entry: each implementation names
    it its own way (s3fs ``LastModified``, adlfs ``last_modified``, gcsfs ``updated``)."""
    for key in ("LastModified", "last_modified", "updated", "mtime"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        if isinstance(value, int | float):
            return float(value)
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."

