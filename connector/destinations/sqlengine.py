"""A SQL database's engine: connecting (checked once), one transaction that includes DDL,
and the database's errors as one line without the password. What `connector.destinations.sql`
writes through; no table logic here."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from connector.errors import ConfigError, DestinationError
from connector.locations import DEFAULT_TIMEOUT, DatabaseUrl

__all__ = ["connect", "create_engine", "database_errors", "settle", "transaction"]


def connect(database: DatabaseUrl, timeout: float = DEFAULT_TIMEOUT) -> sa.Engine:
    """An engine for `database`, checked by connecting once: fail before any table is read.

    A driver that is not installed is a ConfigError; an unreachable database a
    DestinationError. Connecting gives up after `timeout` seconds. Dispose of it after.
    """
    engine = create_engine(database, timeout)
    try:
        with database_errors(engine, "connecting"), engine.connect():
            pass
    except DestinationError:
        engine.dispose()
        raise
    return engine


def create_engine(database: DatabaseUrl, timeout: float) -> sa.Engine:
    """psycopg (3) for plain ``postgresql://`` URLs; errors never echo the URL (passwords)."""
    parsed = database.sqlalchemy()
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    args: dict[str, Any] = {}
    if database.engine == "postgresql":
        args = {"connect_timeout": max(1, round(timeout))}
    elif database.engine == "sqlite":
        args = {"timeout": timeout}  # waiting for another writer's lock
    try:
        return sa.create_engine(parsed, connect_args=args)
    except ImportError as exc:
        raise ConfigError(
            f"{database}: its driver is not installed ({type(exc).__name__}: {exc}); "
            "install it, or use sqlite:/// or postgresql://"
        ) from None


@contextlib.contextmanager
def transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One transaction that includes DDL. Python's sqlite3 would autocommit a CREATE TABLE
    issued before any INSERT, so on SQLite we open the transaction ourselves."""
    with engine.begin() as conn:
        raw: Any = conn.connection.driver_connection
        if engine.dialect.name == "sqlite" and not raw.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        yield conn


def settle(engine: sa.Engine) -> None:
    """After a failed write on SQLite, finish its rollback now: a full disk met while the
    transaction spilled into the database file leaves the ``-journal`` file "hot", and the
    next read of the database rolls it back and removes it. Best effort: the failure itself
    is what the caller reports."""
    if engine.dialect.name != "sqlite":
        return
    with contextlib.suppress(Exception), engine.connect() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")


@contextlib.contextmanager
def database_errors(engine: sa.Engine, doing: str) -> Iterator[None]:
    """Database errors become a DestinationError saying what failed, and where (no password)."""
    try:
        yield
    except Exception as exc:
        if not _database_error(exc):
            raise
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())  # psycopg's span lines
        where = engine.url.render_as_string(hide_password=True)
        raise DestinationError(f"{doing} ({where}) failed: {reason}") from exc


def _database_error(exc: Exception) -> bool:
    """SQLAlchemy's errors, and psycopg's own (from COPY). psycopg is imported only by a
    PostgreSQL engine: a SQLite run does not pay its 0.18 s."""
    psycopg = sys.modules.get("psycopg")
    return isinstance(exc, sa.exc.SQLAlchemyError) or (
        psycopg is not None and isinstance(exc, psycopg.Error)
    )
