"""A job's destinations, seen the way the runner needs them: what is there, and write this.

A thin layer over `connector.load` (which does the atomic writes, merges and deletes); it
adds what only the runner asks: the ids a destination holds (as one Arrow string array, not
a Python set: a million ids cost ~30 MB, not ~100), a digest of every row for
``--verify``, appends of new ids to Parquet, and *marking* deleted rows (a ``_deleted_at``
timestamp) instead of removing them.

Every sink stores a table under one name, given by `target_names` for the whole run: the
table's name, or ``<name>-<table id>`` for a later table with a name an earlier one has
(compared case-insensitively, as file systems and SQL may). Files sanitise it further
(`file_name`).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connector.errors import ConfigError, DestinationError
from connector.extract import string_array
from connector.extras import require
from connector.jobs.config import Destination
from connector.jobs.ids import IdSet, arrow_ints, arrow_mask, hash_ids
from connector.load.csv import write_csv
from connector.load.parquet import ROW_GROUP_ROWS, conform, write_parquet
from connector.modes import WriteMode
from connector.schema import Table

if TYPE_CHECKING:
    import sqlalchemy as sa

    from connector.api.models import TableSummary

__all__ = [
    "DELETED_AT",
    "DeltaSink",
    "DuckdbSink",
    "ObjectSink",
    "Sink",
    "batch_digest",
    "digest",
    "file_name",
    "fit_name",
    "no_ids",
    "open_sink",
    "target_names",
]

#: Column set on rows deleted upstream when the job's ``deletes = "mark"``.
DELETED_AT = "_deleted_at"
_DELETED_FIELD = pa.field(DELETED_AT, pa.timestamp("us", tz="UTC"))
#: Rows fetched from a SQL destination at a time (ids, digests).
_FETCH_ROWS = 10_000


class Sink(Protocol):
    """One destination of a job. `name` is the table's name here (see `target_names`)."""

    destination: Destination

    def check(self) -> None:
        """Fail now (DestinationError) if the destination cannot be reached at all."""

    def target(self, name: str) -> str:
        """Where a table goes, as a person reads it (a file path, a SQL table name)."""

    def exists(self, table: Table, name: str) -> bool:
        """Whether a previous run left this table here."""

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        """Row ids held here, chunk by chunk, not counting rows marked deleted."""

    def digest(self, table: Table, name: str, schema: pa.Schema) -> Iterator[pa.Table]:
        """``id`` and ``hash`` (see `digest`) of every live row held here, chunk by chunk."""

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        """Write in `mode`; with merge also remove (or, with `mark`, stamp) `deleted`.

        `changed` holds the ids of `batches` (a merge streams them; marks are cleared there).
        Rows and removals commit together. A SQL destination stamps marks in a second
        transaction: a crash between the two leaves the job's state where it was, so the
        next run reads the changes again and stamps them then.
        """

    def close(self) -> None:
        """Release connections."""


def open_sink(destination: Destination) -> Sink:
    from connector.load.storage import is_remote

    if destination.kind == "delta":
        return DeltaSink(destination)
    if destination.kind == "duckdb":
        return DuckdbSink(destination)
    if destination.kind in ("parquet", "csv") and is_remote(destination.target):
        return ObjectSink(destination)
    if destination.kind == "parquet":
        return ParquetSink(destination)
    if destination.kind == "csv":
        return CsvSink(destination)
    return SqlSink(destination)


def target_names(tables: Sequence[TableSummary]) -> dict[str, str]:
    """Each table's name in every destination: the first table (in listing order) with a
    name keeps it; each later one with the same name (in any case) gets ``<name>-<id>``.
    A name too long for a file (see `fit_name`) is cut and gets ``-<id>`` as well."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for t in tables:
        if t.id in names:
            continue
        name = fit_name(t.name, t.id)
        names[t.id] = name if name.casefold() not in taken else f"{name}-{t.id}"
        taken.add(name.casefold())
    return names


#: File systems allow 255 bytes a name. A table's file also gets a suffix (``.parquet``)
#: and, while it is written, a temp name around it (``.<name>.<8 random>.partial``):
#: this many bytes are left for the table's name.
NAME_BYTES = 255 - len(".parquet") - len("..12345678.partial") - 1


def fit_name(name: str, table_id: str) -> str:
    """`name`, or when its UTF-8 form is longer than `NAME_BYTES`, its start cut on a
    character boundary plus ``-<table id>``: still recognisable, and unique."""
    if len(name.encode("utf-8")) <= NAME_BYTES:
        return name
    tail = f"-{table_id}"
    room = NAME_BYTES - len(tail.encode("utf-8"))
    cut = name.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return cut + tail


def file_name(table_name: str) -> str:
    """A file name for a table: path separators and a leading dot are replaced."""
    name = re.sub(r"[/\\\x00]", "_", table_name)
    return f"_{name}" if name.startswith(".") or not name else name


def no_ids() -> pa.Array:
    """An empty id array (built without `pa.array`, which would import pandas)."""
    return string_array([])


# --- digests: one hash per row, equal when the cells are equal wherever they are stored ------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _norm(value: Any) -> Any:
    """A cell as one comparable value, however the destination typed it on the way back."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, float):
        return None if value != value else value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:  # SQLite hands back UTC timestamps without a zone
            value = value.replace(tzinfo=UTC)
        return (value - _EPOCH) // _MICROSECOND
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


_MICROSECOND = datetime.resolution


def digest(ids: Sequence[str], columns: Sequence[Sequence[Any]]) -> pa.Table:
    """``id`` and ``hash`` of rows given column by column (id first, excluded from the hash).

    Python's `hash` of the normalised cells: salted per process, which is fine: both sides
    of a comparison are hashed by the same process.
    """
    rows = zip(*columns, strict=True) if columns else ((),) * len(ids)
    hashes = np.fromiter((hash(tuple(map(_norm, row))) for row in rows), np.int64, len(ids))
    return pa.table({"id": string_array(list(ids)), "hash": arrow_ints(hashes)})


def batch_digest(batch: pa.RecordBatch, names: Sequence[str]) -> pa.Table:
    """`digest` of a record batch's rows over the fields `names` (the first: the id)."""
    present = set(batch.schema.names)
    columns = [
        _plain(batch.column(n)).to_pylist() if n in present else [None] * batch.num_rows
        for n in names[1:]
    ]
    return digest(batch.column(names[0]).to_pylist(), columns)


def _plain(column: pa.Array) -> pa.Array:
    """A column whose Python values `_norm` turns into what it makes of a database's: UTC
    timestamps as microseconds (converting zone-aware ones to Python would import pandas),
    dates as ISO text, choices as their text."""
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("us")).cast(pa.int64())
    if pa.types.is_date(column.type) or pa.types.is_dictionary(column.type):
        return column.cast(pa.string())
    return column


class ParquetSink:
    """A directory with one ``<table name>.parquet`` per table."""

    suffix = "parquet"

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.directory = Path(destination.target)

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass

    def path(self, name: str) -> Path:
        return self.directory / f"{file_name(name)}.{self.suffix}"

    def target(self, name: str) -> str:
        return str(self.path(name))

    def exists(self, table: Table, name: str) -> bool:
        return self.path(name).is_file()

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        path = self.path(name)
        if not path.is_file():
            return
        id_name = table.system_names()["id"]
        marks = _has_marks(path)
        with pq.ParquetFile(path) as file:  # not pq.read_table: pyarrow.dataset loads pandas
            for batch in _batches(file, [id_name] + [DELETED_AT] * marks):
                if marks:
                    batch = batch.filter(pc.is_null(batch.column(DELETED_AT)))
                yield batch.column(0)

    def digest(self, table: Table, name: str, schema: pa.Schema) -> Iterator[pa.Table]:
        path = self.path(name)
        if not path.is_file():
            return
        marks = _has_marks(path)
        with pq.ParquetFile(path) as file:
            wanted = [n for n in schema.names if n in file.schema_arrow.names]
            for batch in _batches(file, wanted + [DELETED_AT] * marks):
                if marks:
                    batch = batch.filter(pc.is_null(batch.column(DELETED_AT)))
                yield batch_digest(batch, schema.names)

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        path = self.path(name)
        try:
            if mode == "replace":
                return write_parquet(batches, schema, path)
            if _has_marks(path) or (mark and deleted is not None and len(deleted)):
                schema = _with_deleted_at(schema)  # keep the marks of earlier runs, or add some
            if mode == "append":
                new = self._not_held(batches, path, table)
                return write_parquet(itertools.chain(self._old(path), new), schema, path)
            gone = IdSet.of([deleted]) if deleted is not None and len(deleted) else IdSet()
            old = self._kept(path, table, schema, changed or IdSet(), gone, mark=mark)
            new = (conform(b, schema) for b in batches)
            return write_parquet(itertools.chain(old, new), schema, path)
        except (OSError, pa.ArrowException) as exc:
            raise DestinationError(f"writing {path} failed: {exc}") from exc

    @staticmethod
    def _kept(
        path: Path, table: Table, schema: pa.Schema, changed: IdSet, gone: IdSet, *, mark: bool
    ) -> Iterator[pa.RecordBatch]:
        """The file's rows a merge keeps: not `changed` (they come anew), not `gone` (or,
        with `mark`, those stamped deleted now; a stamp already set stays)."""
        if not path.is_file():
            return
        id_name = table.system_names()["id"]
        now = datetime.now(UTC)
        with pq.ParquetFile(path) as old:
            for batch in _batches(old):
                hashes = hash_ids(batch.column(id_name))
                is_gone = gone.contains_hashes(hashes)
                keep = ~changed.contains_hashes(hashes)
                if not mark:
                    keep &= ~is_gone
                batch = conform(batch.filter(arrow_mask(keep)), schema)
                if mark and is_gone.any():
                    stamps = batch.column(DELETED_AT)
                    fresh = arrow_mask(is_gone[keep])
                    now_ = pa.scalar(now, _DELETED_FIELD.type)
                    stamped = pc.if_else(pc.and_(fresh, pc.is_null(stamps)), now_, stamps)
                    index = batch.schema.get_field_index(DELETED_AT)
                    batch = batch.set_column(index, _DELETED_FIELD, stamped)
                yield batch

    @staticmethod
    def _old(path: Path) -> Iterator[pa.RecordBatch]:
        if path.is_file():
            with pq.ParquetFile(path) as old:
                yield from _batches(old)

    @staticmethod
    def _not_held(
        batches: Iterable[pa.RecordBatch], path: Path, table: Table
    ) -> Iterator[pa.RecordBatch]:
        """The rows of `batches` whose ids the file does not hold yet (marked ones count as held).

        Append adds only new ids, like ``ON CONFLICT DO NOTHING`` in SQL: a second full run
        must not repeat every row.
        """
        id_name = table.system_names()["id"]
        held = IdSet()
        if path.is_file():
            with pq.ParquetFile(path) as file:
                held = IdSet.of(b.column(0) for b in _batches(file, [id_name]))
        for batch in batches:
            yield batch.filter(arrow_mask(~held.contains(batch.column(id_name))))


class CsvSink(ParquetSink):
    """A directory with one ``<table name>.csv`` per table; always replaced whole."""

    suffix = "csv"

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        return iter(())

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        return write_csv(
            batches, schema, self.path(name), excel_safe=self.destination.excel_safe
        )


class ObjectSink:
    """Parquet or CSV files in object storage (``s3://bucket/prefix``, gs://, az://).

    Each object is fetched to a local copy the first time a run reads it, written there by
    the local sink (`ParquetSink`, `CsvSink`: the same merges, appends and marks), then
    uploaded whole (`connector.load.storage`): the object is the old one or the new one.
    """

    def __init__(self, destination: Destination) -> None:
        import tempfile

        from connector.load.storage import ObjectStore

        self.destination = destination
        self.store = ObjectStore(destination.target)
        self._copies = tempfile.TemporaryDirectory(prefix="connector-objects-")
        local = replace(destination, target=self._copies.name)
        self.local: ParquetSink = CsvSink(local) if destination.kind == "csv" else ParquetSink(local)
        self._fetched: set[str] = set()

    def check(self) -> None:
        self.store.check()

    def close(self) -> None:
        self._copies.cleanup()

    def _object(self, name: str) -> str:
        return self.local.path(name).name

    def target(self, name: str) -> str:
        return self.store.url_of(self._object(name))

    def _fetch(self, name: str) -> None:
        """The object's local copy, downloaded once a run (then kept in step by writes)."""
        if name not in self._fetched:
            self.store.get(self._object(name), self.local.path(name))
            self._fetched.add(name)

    def exists(self, table: Table, name: str) -> bool:
        return self.store.exists(self._object(name))

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        self._fetch(name)
        return self.local.live_ids(table, name)

    def digest(self, table: Table, name: str, schema: pa.Schema) -> Iterator[pa.Table]:
        self._fetch(name)
        return self.local.digest(table, name, schema)

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        if mode != "replace":
            self._fetch(name)
        copy = self.local.path(name)
        try:
            rows = self.local.write(
                batches, table, schema, mode, name=name, deleted=deleted, changed=changed,
                mark=mark,
            )
            self.store.put(copy, self._object(name))
        except BaseException:
            self._fetched.discard(name)  # the copy may be ahead of the object now
            copy.unlink(missing_ok=True)
            raise
        self._fetched.add(name)
        return rows


class DeltaSink:
    """A folder (local or object storage) with one Delta table per table, named like it.

    Every write is one Delta commit (`connector.load.delta`): a replace, an append of new
    ids, or a merge whose deletions (or marks) commit with its rows, as in SQL.
    """

    def __init__(self, destination: Destination) -> None:
        self.destination = destination

    def check(self) -> None:
        from connector.load.storage import ObjectStore, is_remote

        require("deltalake", "Delta Lake destinations")
        if is_remote(self.destination.target):
            ObjectStore(self.destination.target).check()

    def close(self) -> None:
        pass

    def target(self, name: str) -> str:
        return f"{self.destination.target.rstrip('/')}/{file_name(name)}"

    def exists(self, table: Table, name: str) -> bool:
        from connector.load.delta import delta_exists

        return delta_exists(self.target(name))

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        from connector.load.delta import read_delta

        for batch in read_delta(self.target(name), [table.system_names()["id"]]):
            yield batch.column(0)

    def digest(self, table: Table, name: str, schema: pa.Schema) -> Iterator[pa.Table]:
        from connector.load.delta import read_delta

        for batch in read_delta(self.target(name), list(schema.names)):
            yield batch_digest(batch, schema.names)

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        from connector.load.delta import merge_delta, write_delta

        uri, id_name = self.target(name), table.system_names()["id"]
        if mode == "merge":
            return merge_delta(batches, schema, uri, id_name=id_name, deleted=deleted, mark=mark)
        return write_delta(batches, schema, uri, mode, id_name=id_name)


class DuckdbSink:
    """A DuckDB database file (``duckdb:///path``) with one table per table, named like it.

    One connection a run (DuckDB lets one process at a time write a file), a cursor per
    call (tables may be read on several threads). Every write is one transaction
    (`connector.load.duckdb`), marks included: rows that come back are inserted afresh,
    so their stamp is gone with their old version.
    """

    def __init__(self, destination: Destination) -> None:
        from connector.load.duckdb import url_path

        self.destination = destination
        self.path = url_path(destination.target, destination.where)
        self._con: Any = None
        self._opening = threading.Lock()

    def _cursor(self) -> Any:
        from connector.load.duckdb import connect

        with self._opening:
            if self._con is None:
                self._con = connect(self.path)
            return self._con.cursor()

    def check(self) -> None:
        self._cursor().close()  # opens (or creates) the file: a locked one fails first

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def target(self, name: str) -> str:
        return name

    def exists(self, table: Table, name: str) -> bool:
        from connector.load.duckdb import has_table

        if not Path(self.path).is_file():  # not created by asking (a dry run writes nothing)
            return False
        with self._failures(name), contextlib.closing(self._cursor()) as cur:
            return has_table(cur, name)

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        from connector.load.duckdb import read_table

        if not Path(self.path).is_file():
            return
        with self._failures(name), contextlib.closing(self._cursor()) as cur:
            for batch in read_table(cur, name, [table.system_names()["id"]]):
                yield batch.column(0).cast(pa.string())

    def digest(self, table: Table, name: str, schema: pa.Schema) -> Iterator[pa.Table]:
        from connector.load.duckdb import read_table

        if not Path(self.path).is_file():
            return
        with self._failures(name), contextlib.closing(self._cursor()) as cur:
            for batch in read_table(cur, name, list(schema.names)):
                yield batch_digest(batch, schema.names)

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        from connector.load.duckdb import write_table

        with contextlib.closing(self._cursor()) as cur:
            return write_table(cur, batches, table, schema, mode, name=name, deleted=deleted, mark=mark)

    @contextlib.contextmanager
    def _failures(self, name: str) -> Iterator[None]:
        """DuckDB's errors become a DestinationError naming the table and the file."""
        duckdb = require("duckdb", "duckdb:/// destinations")
        try:
            yield
        except duckdb.Error as exc:
            reason = " ".join(str(exc).split())
            raise DestinationError(f"reading {name!r} in duckdb:{self.path} failed: {reason}") from exc


class SqlSink:
    """A SQL database (any SQLAlchemy URL) with one table per table, named like it."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self._engine: sa.Engine | None = None

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            import sqlalchemy as sa

            from connector.load.sql import connect

            where = self.destination.describe()
            try:
                url = sa.make_url(self.destination.target)
            except sa.exc.ArgumentError:
                raise ConfigError(
                    f"{self.destination.where}: not a database URL (write it like "
                    "sqlite:///warehouse.db or postgresql://user@host/db)"
                ) from None
            if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
                try:
                    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise DestinationError(
                        f"{where}: cannot create the folder for the database ({exc.strerror})"
                    ) from None
            self._engine = connect(self.destination.target)  # the loads' driver choice
        return self._engine

    def check(self) -> None:
        self.engine  # noqa: B018 - connects once, so an unreachable database fails first

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def target(self, name: str) -> str:
        return name

    def exists(self, table: Table, name: str) -> bool:
        import sqlalchemy as sa

        with self._failures(name):
            return sa.inspect(self.engine).has_table(name)

    def live_ids(self, table: Table, name: str) -> Iterator[pa.Array]:
        import sqlalchemy as sa

        id_name = table.system_names()["id"]
        with self._failures(name), self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(name):
                return
            target = self._reflect(conn, name)
            query = sa.select(target.c[id_name])
            if DELETED_AT in target.c:
                query = query.where(target.c[DELETED_AT].is_(None))
            result = conn.execution_options(yield_per=_FETCH_ROWS).execute(query)
            for part in result.partitions():
                yield string_array([r[0] for r in part])

    def digest(self, table: Table, name: str, schema: pa.Schema) -> Iterator[pa.Table]:
        import sqlalchemy as sa

        with self._failures(name), self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(name):
                return
            target = self._reflect(conn, name)
            columns = [
                target.c[n] if n in target.c else sa.null().label(n) for n in schema.names
            ]
            query = sa.select(*columns)
            if DELETED_AT in target.c:
                query = query.where(target.c[DELETED_AT].is_(None))
            result = conn.execution_options(yield_per=_FETCH_ROWS).execute(query)
            for part in result.partitions():
                cells = list(zip(*part, strict=True))
                yield digest(list(cells[0]), cells[1:])

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        name: str,
        deleted: pa.Array | None = None,
        changed: IdSet | None = None,
        mark: bool = False,
    ) -> int:
        from connector.load.sql import load_table

        gone = deleted if deleted is not None else no_ids()
        if not mark:
            return load_table(batches, table, self.engine, mode=mode, name=name, deleted_ids=gone)
        rows = load_table(batches, table, self.engine, mode=mode, name=name)
        self._mark(table, name, gone, changed or IdSet())
        return rows

    def _mark(self, table: Table, name: str, deleted: pa.Array, changed: IdSet) -> None:
        """Stamp `deleted` rows, and clear the stamp of rows that came back (`changed`)."""
        import sqlalchemy as sa

        from connector.load.sql import id_chunks

        id_name = table.system_names()["id"]
        with self._failures(name, "marking rows of"), self.engine.begin() as conn:
            target = self._reflect(conn, name)
            if DELETED_AT not in target.c:
                if not len(deleted):
                    return
                quote = conn.dialect.identifier_preparer.quote_identifier
                sql_type = sa.DateTime(timezone=True).compile(dialect=conn.dialect)
                conn.exec_driver_sql(
                    f"ALTER TABLE {quote(name)} ADD COLUMN {quote(DELETED_AT)} {sql_type}"
                )
                target = self._reflect(conn, name)
            key, stamp = target.c[id_name], target.c[DELETED_AT]
            marked = string_array(conn.execute(sa.select(key).where(stamp.is_not(None))).scalars().all())
            back = marked.filter(arrow_mask(changed.contains(marked))) if len(marked) else marked
            for chunk in id_chunks(back):
                conn.execute(target.update().where(key.in_(chunk)).values({DELETED_AT: None}))
            now = datetime.now(UTC)
            for chunk in id_chunks(deleted):
                conn.execute(
                    target.update().where(key.in_(chunk), stamp.is_(None)).values({DELETED_AT: now})
                )

    @staticmethod
    def _reflect(conn: sa.Connection, name: str) -> sa.Table:
        import sqlalchemy as sa

        return sa.Table(name, sa.MetaData(), autoload_with=conn)

    def _failures(self, name: str, doing: str = "reading") -> contextlib.AbstractContextManager[None]:
        """Database errors as the loads report them: one line, the table, the safe URL."""
        from connector.load.sql import database_errors

        return database_errors(self.engine, f"{doing} table {name!r}")


def _batches(file: pq.ParquetFile, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """A Parquet file's rows, one row group at a time, without reader threads.

    One `iter_batches` over the whole file holds on to buffers across row groups (~60 MB
    more peak RSS reading a million rows back); a reader per row group does not.
    """
    for group in range(file.metadata.num_row_groups):
        yield from file.iter_batches(
            ROW_GROUP_ROWS, row_groups=[group], columns=columns, use_threads=False
        )


def _with_deleted_at(schema: pa.Schema) -> pa.Schema:
    return schema if DELETED_AT in schema.names else schema.append(_DELETED_FIELD)


def _has_marks(path: Path) -> bool:
    """Whether an earlier run added the ``_deleted_at`` column to the file at `path`."""
    return path.is_file() and DELETED_AT in pq.read_schema(path).names
