"""Object storage (``s3://``, ``gs://``, ``az://``) through one filesystem layer, fsspec.

Each scheme's fsspec implementation (s3fs, gcsfs, adlfs) is an optional extra, imported by
`connector.extras.require`, and finds credentials in its provider's standard chain
(environment, profile, instance role; botocore also honours ``AWS_ENDPOINT_URL``): a URL or
a job file never carries them, and `check_location` refuses one that tries.

Objects appear whole or not at all: a file is written locally with the atomic writer, then
uploaded in one put (`ObjectStore.put`). A single PUT that does not finish never becomes an
object, and neither does a multipart upload that is never completed (large files), so a
killed upload leaves the previous object as it was.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connector.errors import ConfigError, ConnectorError, DestinationError
from connector.extras import require
from connector.load.atomic import atomic_path

__all__ = ["SCHEMES", "ObjectStore", "check_location", "is_remote"]

#: URL scheme -> the fsspec implementation that serves it.
SCHEMES: dict[str, str] = {
    "s3": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_remote(location: str) -> bool:
    """Whether `location` is an object storage URL (and not a local path)."""
    match = _SCHEME.match(location)
    return match is not None and match.group(1).lower() in SCHEMES


def check_location(location: str, where: str) -> str:
    """`location` as a destination keeps it: an object storage URL without a trailing
    slash, or a local path as given. A URL of another scheme, with no bucket, or carrying
    credentials is a ConfigError naming `where` (the credentials are not repeated)."""
    match = _SCHEME.match(location)
    if match is None:
        return location
    scheme = match.group(1).lower()
    if scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in ("s3", "gs", "az"))
        raise ConfigError(f"{where}: unknown storage scheme {scheme!r} (use a local path or {known})")
    parts = urlsplit(location)
    if "@" in parts.netloc or parts.password or parts.query:
        # adlfs reads az://container@account/...; anything else here may be a secret.
        if scheme in ("abfs", "abfss") and "@" in parts.netloc and not parts.password and not parts.query:
            return location.rstrip("/")
        raise ConfigError(
            f"{where}: a storage URL carries no credentials or options (value not shown); "
            "they come from the provider's standard chain: environment, profile, instance role"
        )
    if not parts.netloc:
        raise ConfigError(f"{where}: {scheme}:// needs a bucket, like {scheme}://bucket/prefix")
    return f"{scheme}://{parts.netloc}{parts.path}".rstrip("/")


def filesystem(url: str) -> Any:
    """The fsspec filesystem for `url`'s scheme (its extra imported, or MissingExtra)."""
    scheme = url.partition("://")[0].lower()
    module = SCHEMES[scheme]
    require(module, f"{scheme}:// destinations")
    fsspec = require("fsspec", f"{scheme}:// destinations")
    return fsspec.filesystem(scheme)


class ObjectStore:
    """A folder of objects under one URL (``s3://bucket/prefix``): get, put, exists, whole."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.scheme = self.url.partition("://")[0].lower()
        self.fs = filesystem(self.url)
        self.root = self.url.partition("://")[2]

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def check(self) -> None:
        """Fail now if the bucket (Azure: container) cannot be listed (missing, or no access)."""
        bucket = self.root.partition("/")[0]
        with self.failures("reaching", f"{self.scheme}://{bucket}"):
            try:
                self.fs.ls(bucket, detail=False)
            except FileNotFoundError:
                what = "container" if SCHEMES[self.scheme] == "adlfs" else "bucket"
                raise DestinationError(
                    f"reaching {self.scheme}://{bucket} failed: no such {what}"
                ) from None

    def exists(self, name: str) -> bool:
        with self.failures("reading", self.url_of(name)):
            return bool(self.fs.exists(self._key(name)))

    def get(self, name: str, local: Path) -> bool:
        """Download the object `name` to `local` (whole: written aside, then renamed);
        False when there is no such object."""
        key = self._key(name)
        with self.failures("reading", self.url_of(name)):
            if not self.fs.exists(key):
                return False
            with atomic_path(local) as temp:
                self.fs.get_file(key, str(temp))
        return True

    def put(self, local: Path, name: str) -> None:
        """Upload `local` as the object `name`, replacing it only once the upload is complete."""
        with self.failures("writing", self.url_of(name)):
            self.fs.put_file(str(local), self._key(name))
            self.fs.invalidate_cache(self._key(name))

    def _key(self, name: str) -> str:
        return f"{self.root}/{name}"

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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."

