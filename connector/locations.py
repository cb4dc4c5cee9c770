"""Where data lives, parsed once: database URLs (`DatabaseUrl`) and storage locations (a
local folder, or an object storage URL read and written through fsspec).

Every side that names a database or a folder — destinations, a push's source query, job
files, the Iceberg catalog — parses it here, so one value is checked, made absolute,
redacted and told apart by engine in one place. Cheap to import: SQLAlchemy and fsspec are
imported when a URL is parsed or a filesystem opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from connector.errors import ConfigError
from connector.extras import require

__all__ = [
    "DEFAULT_TIMEOUT",
    "DUCKDB_SCHEME",
    "SCHEMES",
    "DatabaseUrl",
    "check_location",
    "filesystem",
    "is_remote",
    "within",
]

#: Seconds one request to a database or to object storage may take (connect, read, a
#: storage request): past it the place counts as not answering.
DEFAULT_TIMEOUT = 60.0
#: A call to a store whose implementation bounds only some of its requests (adlfs) may take
#: this many times the timeout in all.
DEADLINE_TIMES = 6

DUCKDB_SCHEME = "duckdb:///"
_DUCKDB_EXAMPLE = "like duckdb:///analytics.duckdb (relative) or duckdb:////srv/analytics.duckdb"
_SQL_EXAMPLES = "like sqlite:///out.db, postgresql://user@host/db or duckdb:///analytics.duckdb"

#: A database's engine as the connector tells them apart; ``other``: a database SQLAlchemy
#: knows that we treat as plain SQL.
Engine = Literal["duckdb", "sqlite", "postgresql", "other"]


@dataclass(frozen=True)
class DatabaseUrl:
    """A database as a URL: DuckDB's own ``duckdb:///<path>`` or any SQLAlchemy URL,
    checked, with a file database's path made absolute. Shown (``str``, ``repr``) without
    its password; `url` keeps it for the driver."""

    #: The URL a driver connects with (a password included).
    url: str
    engine: Engine
    #: SQLAlchemy's driver (``pysqlite``, ``psycopg``); ``duckdb`` for DuckDB.
    driver: str
    #: A file database's absolute path, or ``:memory:``; None for a server's database.
    path: str | None

    @classmethod
    def parse(
        cls,
        value: str,
        *,
        where: str,
        base: Path | None = None,
        memory: bool = False,
        secrets_allowed: bool = True,
    ) -> DatabaseUrl:
        """`value` checked: a relative file path is made absolute against `base` (the
        working directory when None); ``:memory:`` only where `memory` allows; a password
        only where `secrets_allowed` (not in a job file). ConfigError naming `where` (the
        value is not repeated when it may hold a password)."""
        folder = Path.cwd() if base is None else base
        if value.lower().startswith("duckdb:"):
            return cls._duckdb(value, where, folder, memory)
        import sqlalchemy as sa
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = sa.engine.make_url(value)
        except ArgumentError:
            raise ConfigError(f"{where}: not a database URL (write it {_SQL_EXAMPLES})") from None
        try:
            parsed.get_dialect()  # the database kind is known (its driver loads at connect)
        except (ArgumentError, ImportError):
            raise ConfigError(
                f"{where}: not a database URL SQLAlchemy knows ({parsed.drivername!r}); write "
                f"it {_SQL_EXAMPLES}"
            ) from None
        if parsed.password and not secrets_allowed:
            raise ConfigError(
                f"{where}: holds a password: leave it out and let the driver read it from the "
                "environment (PGPASSWORD, ~/.pgpass) — job files hold no secrets"
            )
        backend = parsed.get_backend_name()
        path = None
        if backend == "sqlite":
            path = parsed.database or ":memory:"
            if path != ":memory:":
                path = str((folder / Path(path).expanduser()).resolve())
                parsed = parsed.set(database=path)
            elif not memory:
                raise ConfigError(f"{where}: an in-memory database keeps nothing; name a file")
        engine: Engine = "sqlite" if backend == "sqlite" else (
            "postgresql" if backend == "postgresql" else "other")
        return cls(
            parsed.render_as_string(hide_password=False), engine, parsed.get_driver_name(), path
        )

    @classmethod
    def _duckdb(cls, value: str, where: str, base: Path, memory: bool) -> DatabaseUrl:
        if not value.startswith(DUCKDB_SCHEME):
            raise ConfigError(f"{where}: {value!r} is not a DuckDB URL; write it {_DUCKDB_EXAMPLE}")
        path = value.removeprefix(DUCKDB_SCHEME)
        if path == ":memory:" and memory:
            return cls(value, "duckdb", "duckdb", path)
        if not path or path == ":memory:" or "?" in path or path.endswith("/"):
            raise ConfigError(
                f"{where}: {value!r} names no database file; write it {_DUCKDB_EXAMPLE}"
            )
        path = str((base / Path(path).expanduser()).resolve())
        return cls(DUCKDB_SCHEME + path, "duckdb", "duckdb", path)

    def redacted(self) -> str:
        """The URL without its password: what messages and summaries show."""
        if self.engine == "duckdb":
            return self.url
        import sqlalchemy as sa

        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"DatabaseUrl({self.redacted()!r})"

    @property
    def file(self) -> Path | None:
        """The database's file (None: in memory, or on a server)."""
        return None if self.path in (None, ":memory:") else Path(str(self.path))

    def sqlalchemy(self) -> Any:
        """The URL as SQLAlchemy's `URL` (not for DuckDB's)."""
        import sqlalchemy as sa

        return sa.engine.make_url(self.url)


# --- storage locations -----------------------------------------------------------------------

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
    """`location` as it is kept: an object storage URL without a trailing slash, or a local
    path as given. A URL of another scheme, with no bucket, or carrying credentials is a
    ConfigError naming `where` (the credentials are not repeated)."""
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


def filesystem(url: str, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """The fsspec filesystem for `url`'s scheme (its extra imported, or MissingExtra), its
    requests bounded by `timeout` seconds."""
    scheme = url.partition("://")[0].lower()
    module = SCHEMES[scheme]
    require(module, f"{scheme}:// storage")
    fsspec = require("fsspec", f"{scheme}:// storage")
    return fsspec.filesystem(scheme, **_bounded(module, timeout))


def within(fs: Any, timeout: float, method: str, *args: Any, **kwargs: Any) -> Any:
    """``fs.<method>(...)``, bounded by `timeout` seconds a request. adlfs bounds only its
    uploads and downloads, and its client keeps the Azure SDK's retries (minutes against a
    store that stops answering): its other calls (listings, existence checks, removals) are
    given `DEADLINE_TIMES` the timeout in all, through fsspec's own deadline (`sync` runs
    the implementation's coroutine, ``_<method>``, and gives up on it)."""
    if type(fs).__module__.partition(".")[0] != "adlfs":
        return getattr(fs, method)(*args, **kwargs)
    from fsspec.asyn import sync

    deadline = DEADLINE_TIMES * timeout
    try:
        return sync(fs.loop, getattr(fs, f"_{method}"), *args, timeout=deadline, **kwargs)
    except TimeoutError:  # fsspec's FSTimeoutError is one
        raise TimeoutError(f"no answer within {deadline:g} s") from None


def _bounded(module: str, timeout: float) -> dict[str, Any]:
    """Each implementation's own settings for a request's time limit and attempts."""
    if module == "s3fs":
        # s3fs tries a request up to 5 times itself; botocore's own retries would multiply it
        # (its `max_attempts` counts retries: 1 was two attempts a try, ten in all)
        retries = {"total_max_attempts": 1, "mode": "standard"}
        config = {"connect_timeout": timeout, "read_timeout": timeout, "retries": retries}
        return {"config_kwargs": config}
    if module == "gcsfs":
        return {"timeout": timeout, "retries": 2}
    if module == "adlfs":  # its uploads and downloads; its other calls: `within`
        return {"connection_timeout": timeout, "read_timeout": timeout}
    return {}
