"""Arrow batches -> a SQL table through SQLAlchemy: replace, append, or merge by row id.

- ``replace`` loads a fresh staging table and swaps it in, all in ONE transaction: readers
  see the old table until the commit, then the new one, never a partial or empty table; a
  killed load rolls back and leaves nothing behind (both PostgreSQL and SQLite have
  transactional DDL).
- ``append`` adds the rows the table does not hold yet (by the ``_id`` primary key) and
  leaves those it holds unchanged, so a second full run adds only new rows; ``merge``
  upserts by row id. Both are ``INSERT ... ON CONFLICT`` (DO NOTHING / DO UPDATE);
  `delete_ids` removes rows deleted upstream.

The table's columns come from the API schema, typed by `connector.schema` (the one
mapping). Identifiers are always quoted. PostgreSQL through psycopg is loaded with
``COPY`` (Arrow writes the CSV in C++); every other database gets an ``executemany``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
import sqlalchemy as sa
from psycopg.copy import QueuedLibpqWriter
from sqlalchemy.dialects import postgresql, sqlite

from connector.errors import ConfigError, DestinationError
from connector.load.csv import as_text
from connector.modes import WRITE_MODES, WriteMode
from connector.schema import Column, Table, arrow_schema

__all__ = ["connect", "database_errors", "delete_ids", "id_chunks", "load_table"]

#: Ids per DELETE statement (well under every database's bound-parameter limit).
DELETE_CHUNK = 500


def load_table(
    batches: Iterable[pa.RecordBatch],
    table: Table,
    engine_or_url: sa.Engine | str,
    *,
    mode: WriteMode = "replace",
    name: str | None = None,
    deleted_ids: Collection[str] | pa.Array = (),
) -> int:
    """Load `batches` (rows of `table`) into the SQL table `name` (default: the table's name).

    Returns the rows loaded. `deleted_ids` (merge mode) are removed in the same transaction,
    so an incremental sync applies its changes and deletions at once or not at all.
    """
    if mode not in WRITE_MODES:
        raise ConfigError(f"unknown load mode {mode!r}; use one of {', '.join(WRITE_MODES)}")
    if len(deleted_ids) and mode != "merge":
        raise ConfigError("deleted_ids only make sense with mode='merge'")
    name = name or table.name
    stream = iter(batches)
    first = next(stream, None)
    schema = first.schema if first is not None else arrow_schema(table)
    everything = _chain(first, stream)
    with _engine(engine_or_url) as engine, database_errors(engine, f"loading table {name!r}"):
        if mode != "replace" and engine.dialect.name not in ("postgresql", "sqlite"):
            raise ConfigError(f"{mode} is supported on PostgreSQL and SQLite, not {engine.dialect.name}")
        target = _sql_table(table, schema, name)
        _check_identifiers(engine, target)
        with _transaction(engine) as conn:
            if mode == "replace":
                return _replace(conn, target, everything)
            target.create(conn, checkfirst=True)
            _add_missing_columns(conn, target)
            if mode == "append":
                return _merge(conn, target, everything, update=False)
            rows = _merge(conn, target, everything, update=True)
            _delete(conn, target, deleted_ids)
            return rows


def delete_ids(
    engine_or_url: sa.Engine | str, table: Table, ids: Collection[str], *, name: str | None = None
) -> int:
    """Delete the rows with these row ids from the SQL table (a missing table has none)."""
    name = name or table.name
    target = _sql_table(table, arrow_schema(table, columns=[]), name)
    with (
        _engine(engine_or_url) as engine,
        database_errors(engine, f"deleting rows of table {name!r}"),
        _transaction(engine) as conn,
    ):
        if not sa.inspect(conn).has_table(name):
            return 0
        return _delete(conn, target, ids)


def _sql_table(table: Table, schema: pa.Schema, name: str) -> sa.Table:
    """The SQLAlchemy table for the Arrow `schema` of `table`'s rows: ``_id`` is the key."""
    system = {frame_name: attr for attr, frame_name in table.system_names().items()}
    columns = []
    for field in schema:
        if system.get(field.name) == "id":  # ids are text
            column = sa.Column(field.name, Column("id", "text").sql_type, primary_key=True, quote=True)
        elif field.name in system:  # created_at / updated_at: UTC timestamps
            column = sa.Column(field.name, sa.DateTime(timezone=True), quote=True)
        else:
            column = sa.Column(field.name, table.column(field.name).sql_type, quote=True)
        columns.append(column)
    return sa.Table(name, sa.MetaData(), *columns, quote=True)


def _replace(conn: sa.Connection, target: sa.Table, batches: Iterable[pa.RecordBatch]) -> int:
    # With COPY the key is added after the load: one bulk index build beats a per-row one.
    late_key = _copy_capable(conn)
    staging = sa.Table(
        f"_connector_staging_{secrets.token_hex(6)}",
        sa.MetaData(),
        *(
            sa.Column(c.name, c.type, primary_key=c.primary_key and not late_key, quote=True)
            for c in target.columns
        ),
        quote=True,
    )
    staging.create(conn)
    rows = _insert(conn, staging, batches)
    quote = conn.dialect.identifier_preparer.quote_identifier
    if late_key:
        key = ", ".join(quote(c.name) for c in target.primary_key.columns)
        conn.exec_driver_sql(f"ALTER TABLE {quote(staging.name)} ADD PRIMARY KEY ({key})")
    if sa.inspect(conn).has_table(target.name):
        conn.exec_driver_sql(f"DROP TABLE {quote(target.name)}")
    conn.exec_driver_sql(f"ALTER TABLE {quote(staging.name)} RENAME TO {quote(target.name)}")
    return rows


def _insert(conn: sa.Connection, target: sa.Table, batches: Iterable[pa.RecordBatch]) -> int:
    if _copy_capable(conn):
        return _copy(conn, target, batches)
    rows = 0
    for batch in batches:
        if batch.num_rows:
            conn.execute(target.insert(), _pylist(conn, batch))
            rows += batch.num_rows
    return rows


def _pylist(conn: sa.Connection, batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """The batch's rows as dicts for an ``executemany``. On SQLite, UTC timestamps go as
    naive datetimes: SQLite stores them without a zone anyway, and converting zone-aware
    Arrow timestamps to Python makes pyarrow import pandas (~40 MB)."""
    if conn.dialect.name == "sqlite":
        columns = [
            c.cast(pa.timestamp(c.type.unit)) if pa.types.is_timestamp(c.type) and c.type.tz else c
            for c in batch.columns
        ]
        batch = pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
    rows: list[dict[str, Any]] = batch.to_pylist()
    return rows


def _copy_capable(conn: sa.Connection) -> bool:
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


def _copy(conn: sa.Connection, target: sa.Table, batches: Iterable[pa.RecordBatch]) -> int:
    """PostgreSQL's COPY, fed CSV that Arrow writes: quoted text, so '' and NULL stay apart.

    A writer thread sends each chunk while the next batch is being encoded.
    """
    quote = conn.dialect.identifier_preparer.quote_identifier
    names = [c.name for c in target.columns]
    sql = f"COPY {quote(target.name)} ({', '.join(map(quote, names))}) FROM STDIN (FORMAT csv)"
    options = pacsv.WriteOptions(include_header=False)
    rows = 0
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor, cursor.copy(sql, writer=QueuedLibpqWriter(cursor)) as copy:
        for batch in batches:
            sink = pa.BufferOutputStream()
            pacsv.write_csv(as_text(batch.select(names)), sink, options)
            copy.write(sink.getvalue())
            rows += batch.num_rows
    return rows


def _merge(
    conn: sa.Connection, target: sa.Table, batches: Iterable[pa.RecordBatch], *, update: bool
) -> int:
    """Insert `batches` by row id: a row already held is updated, or with `update` off kept."""
    key = next(c for c in target.columns if c.primary_key)
    others = [c.name for c in target.columns if not c.primary_key] if update else []
    if _copy_capable(conn):
        changes = sa.Table(
            f"_connector_merge_{secrets.token_hex(6)}",
            sa.MetaData(),
            *(sa.Column(c.name, c.type, quote=True) for c in target.columns),
            prefixes=["TEMPORARY"],
            postgresql_on_commit="DROP",
            quote=True,
        )
        changes.create(conn)
        rows = _copy(conn, changes, batches)
        pg = postgresql.insert(target).from_select(list(target.columns.keys()), changes.select())
        conn.execute(_on_conflict(pg, key, others))
        return rows
    rows = 0
    lite = sqlite.insert(target)
    statement = _on_conflict(lite, key, others)
    for batch in batches:
        if batch.num_rows:
            conn.execute(statement, _pylist(conn, batch))
            rows += batch.num_rows
    return rows


def _on_conflict(insert: Any, key: sa.Column[Any], others: list[str]) -> Any:
    if not others:
        return insert.on_conflict_do_nothing(index_elements=[key])
    return insert.on_conflict_do_update(
        index_elements=[key], set_={name: insert.excluded[name] for name in others}
    )


def _delete(conn: sa.Connection, target: sa.Table, ids: Collection[str] | pa.Array) -> int:
    key = next(c for c in target.columns if c.primary_key)
    deleted = 0
    for chunk in id_chunks(ids):
        deleted += conn.execute(target.delete().where(key.in_(chunk))).rowcount
    return deleted


def id_chunks(ids: Collection[str] | pa.Array, size: int = DELETE_CHUNK) -> Iterator[list[str]]:
    """Ids (a Python collection or an Arrow array) as lists of at most `size`: one statement
    each; an Arrow array is turned into Python strings one chunk at a time."""
    if isinstance(ids, pa.Array):
        for start in range(0, len(ids), size):
            yield ids.slice(start, size).to_pylist()
        return
    ordered = list(ids)
    for start in range(0, len(ordered), size):
        yield ordered[start : start + size]


def _add_missing_columns(conn: sa.Connection, target: sa.Table) -> None:
    """Columns added upstream since the table was created are added to it (nullable)."""
    existing = {c["name"] for c in sa.inspect(conn).get_columns(target.name)}
    quote = conn.dialect.identifier_preparer.quote_identifier
    for column in target.columns:
        if column.name not in existing:
            sql_type = column.type.compile(dialect=conn.dialect)
            conn.exec_driver_sql(
                f"ALTER TABLE {quote(target.name)} ADD COLUMN {quote(column.name)} {sql_type}"
            )


def connect(url: str) -> sa.Engine:
    """An engine for `url`, checked by connecting once: fail before any table is read.

    A bad URL is a ConfigError; an unreachable database a DestinationError. Dispose it after.
    """
    engine = _create_engine(url)
    try:
        with database_errors(engine, "connecting"), engine.connect():
            pass
    except DestinationError:
        engine.dispose()
        raise
    return engine


def _create_engine(url: str) -> sa.Engine:
    """psycopg (3) for plain ``postgresql://`` URLs; errors never echo the URL (passwords)."""
    try:
        parsed = sa.make_url(url)
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return sa.create_engine(parsed)
    except (sa.exc.ArgumentError, ImportError) as exc:
        scheme = str(url).partition(":")[0]
        raise ConfigError(
            f"cannot use database URL with scheme {scheme!r}: {type(exc).__name__}; "
            "expected e.g. sqlite:///out.db or postgresql://user@host/db"
        ) from None


@contextlib.contextmanager
def _engine(engine_or_url: sa.Engine | str) -> Iterator[sa.Engine]:
    """The engine given, or one made from a URL and disposed after."""
    if isinstance(engine_or_url, sa.Engine):
        yield engine_or_url
        return
    engine = _create_engine(engine_or_url)
    try:
        yield engine
    finally:
        engine.dispose()


@contextlib.contextmanager
def _transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One transaction that includes DDL. Python's sqlite3 would autocommit a CREATE TABLE
    issued before any INSERT, so on SQLite we open the transaction ourselves."""
    with engine.begin() as conn:
        raw: Any = conn.connection.driver_connection
        if engine.dialect.name == "sqlite" and not raw.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        yield conn


def _check_identifiers(engine: sa.Engine, target: sa.Table) -> None:
    """PostgreSQL silently truncates names over 63 bytes: refuse them instead."""
    limit = engine.dialect.max_identifier_length
    for identifier in (target.name, *(c.name for c in target.columns)):
        if len(identifier.encode()) > limit:
            raise ConfigError(
                f"name {identifier!r} is longer than {engine.dialect.name}'s limit of {limit} "
                "bytes; load the table under a shorter name"
            )


@contextlib.contextmanager
def database_errors(engine: sa.Engine, doing: str) -> Iterator[None]:
    """Database errors become a DestinationError saying what failed, and where (no password)."""
    try:
        yield
    except (sa.exc.SQLAlchemyError, psycopg.Error) as exc:  # psycopg's own: from COPY
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())  # psycopg's span lines
        where = engine.url.render_as_string(hide_password=True)
        raise DestinationError(f"{doing} ({where}) failed: {reason}") from exc


def _chain(first: pa.RecordBatch | None, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first is not None:
        yield first
        yield from rest
