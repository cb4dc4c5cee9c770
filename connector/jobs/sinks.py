"""A job's destinations, seen the way a sync needs them: what is there, and write this.

A thin layer over `connector.load` (which does the atomic writes, merges and deletes); it
adds what only a sync asks: the ids a destination holds, appends of new ids to Parquet, and
*marking* deleted rows (a ``_deleted_at`` timestamp) instead of removing them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Collection, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa

from connector.errors import DestinationError
from connector.jobs.config import Destination, WriteMode
from connector.load.parquet import merge_parquet, write_parquet
from connector.load.sql import DELETE_CHUNK, connect, load_table
from connector.load.transfer import file_name
from connector.schema import Table

__all__ = ["DELETED_AT", "Sink", "open_sink"]

#: Column set on rows deleted upstream when the job's ``deletes = "mark"``.
DELETED_AT = "_deleted_at"
_DELETED_FIELD = pa.field(DELETED_AT, pa.timestamp("us", tz="UTC"))


class Sink(Protocol):
    """One destination of a job."""

    destination: Destination

    def exists(self, table: Table) -> bool:
        """Whether a previous run left this table here."""

    def live_ids(self, table: Table) -> set[str]:
        """Row ids held here, not counting rows marked deleted."""

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        deleted: Collection[str] = (),
        mark: bool = False,
    ) -> int:
        """Write in `mode`; with merge also remove (or, with `mark`, stamp) `deleted`.

        Rows and removals commit together. A SQL destination stamps marks in a second
        transaction: a crash between the two leaves the job's state where it was, so the
        next run reads the changes again and stamps them then.
        """

    def close(self) -> None:
        """Release connections."""


def open_sink(destination: Destination) -> Sink:
    if destination.kind == "parquet":
        return ParquetSink(destination)
    return SqlSink(destination)


class ParquetSink:
    """A directory with one ``<table name>.parquet`` per table."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.directory = Path(destination.target)

    def close(self) -> None:
        pass

    def path(self, table: Table) -> Path:
        return self.directory / f"{file_name(table.name)}.parquet"

    def exists(self, table: Table) -> bool:
        return self.path(table).is_file()

    def live_ids(self, table: Table) -> set[str]:
        path = self.path(table)
        if not path.is_file():
            return set()
        id_name = table.system_names()["id"]
        if not _has_marks(path):
            return set(pq.read_table(path, columns=[id_name]).column(id_name).to_pylist())
        data = pq.read_table(path, columns=[id_name, DELETED_AT])
        data = data.filter(pc.is_null(data.column(DELETED_AT)))
        return set(data.column(id_name).to_pylist())

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        deleted: Collection[str] = (),
        mark: bool = False,
    ) -> int:
        path = self.path(table)
        try:
            if mode == "replace":
                return write_parquet(batches, schema, path)
            if _has_marks(path):  # keep the marks of earlier runs
                schema = _with_deleted_at(schema)
            if mode == "append":
                new = self._not_held(batches, path, table)
                return write_parquet(itertools.chain(self._old(path), new), schema, path)
            if mark and deleted:
                schema = _with_deleted_at(schema)
                batches = itertools.chain(batches, self._marked(path, table, schema, deleted))
                deleted = ()
            return merge_parquet(batches, schema, path, deleted_ids=deleted)
        except (OSError, pa.ArrowException) as exc:
            raise DestinationError(f"writing {path} failed: {exc}") from exc

    @staticmethod
    def _old(path: Path) -> Iterator[pa.RecordBatch]:
        if path.is_file():
            with pq.ParquetFile(path) as old:
                yield from old.iter_batches()

    @staticmethod
    def _not_held(
        batches: Iterable[pa.RecordBatch], path: Path, table: Table
    ) -> Iterator[pa.RecordBatch]:
        """The rows of `batches` whose ids the file does not hold yet (marked ones count as held).

        Append adds only new ids, like ``ON CONFLICT DO NOTHING`` in SQL: a second full run
        must not repeat every row.
        """
        id_name = table.system_names()["id"]
        held = pa.array([], pa.string())
        if path.is_file():
            held = pq.read_table(path, columns=[id_name]).column(id_name).combine_chunks()
        for batch in batches:
            yield batch.filter(pc.invert(pc.is_in(batch.column(id_name), held)))

    @staticmethod
    def _marked(
        path: Path, table: Table, schema: pa.Schema, ids: Collection[str]
    ) -> Iterator[pa.RecordBatch]:
        """The file's rows with these ids, stamped deleted now."""
        if not path.is_file():
            return
        id_name = table.system_names()["id"]
        old = pq.read_table(path, filters=pc.field(id_name).isin(list(ids)))
        now = pa.scalar(datetime.now(UTC), _DELETED_FIELD.type)
        if DELETED_AT in old.column_names:
            old = old.drop_columns([DELETED_AT])
        old = old.append_column(_DELETED_FIELD, pa.array([now] * old.num_rows, now.type))
        yield from old.select(schema.names).cast(schema).to_batches()


class SqlSink:
    """A SQL database (any SQLAlchemy URL) with one table per table, named like it."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self._engine: sa.Engine | None = None

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            url = sa.make_url(self.destination.target)
            if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
                Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            self._engine = connect(self.destination.target)  # the loads' driver choice
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def exists(self, table: Table) -> bool:
        with self._failures(table):
            return sa.inspect(self.engine).has_table(table.name)

    def live_ids(self, table: Table) -> set[str]:
        id_name = table.system_names()["id"]
        with self._failures(table), self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(table.name):
                return set()
            target = self._reflect(conn, table)
            query = sa.select(target.c[id_name])
            if DELETED_AT in target.c:
                query = query.where(target.c[DELETED_AT].is_(None))
            return set(conn.execute(query).scalars())

    def write(
        self,
        batches: Iterable[pa.RecordBatch],
        table: Table,
        schema: pa.Schema,
        mode: WriteMode,
        *,
        deleted: Collection[str] = (),
        mark: bool = False,
    ) -> int:
        if not mark:
            return load_table(batches, table, self.engine, mode=mode, deleted_ids=deleted)
        id_name = table.system_names()["id"]
        changed: list[str] = []

        def tapped() -> Iterator[pa.RecordBatch]:  # note the ids while the load streams
            for batch in batches:
                changed.extend(batch.column(id_name).to_pylist())
                yield batch

        rows = load_table(tapped(), table, self.engine, mode=mode)
        self._mark(table, deleted, changed)
        return rows

    def _mark(self, table: Table, deleted: Collection[str], changed: list[str]) -> None:
        """Stamp `deleted` rows, and clear the stamp of rows that came back (`changed`)."""
        id_name = table.system_names()["id"]
        with self._failures(table), self.engine.begin() as conn:
            target = self._reflect(conn, table)
            if DELETED_AT not in target.c:
                if not deleted:
                    return
                quote = conn.dialect.identifier_preparer.quote_identifier
                sql_type = sa.DateTime(timezone=True).compile(dialect=conn.dialect)
                conn.exec_driver_sql(
                    f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(DELETED_AT)} {sql_type}"
                )
                target = self._reflect(conn, table)
            key, stamp = target.c[id_name], target.c[DELETED_AT]
            now = datetime.now(UTC)
            for chunk in _chunks(list(deleted)):
                conn.execute(
                    target.update().where(key.in_(chunk), stamp.is_(None)).values({DELETED_AT: now})
                )
            for chunk in _chunks(changed):
                conn.execute(
                    target.update()
                    .where(key.in_(chunk), stamp.is_not(None))
                    .values({DELETED_AT: None})
                )

    @staticmethod
    def _reflect(conn: sa.Connection, table: Table) -> sa.Table:
        return sa.Table(table.name, sa.MetaData(), autoload_with=conn)

    @contextlib.contextmanager
    def _failures(self, table: Table) -> Iterator[None]:
        """Database errors become a DestinationError naming the table and the safe URL."""
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            reason = getattr(exc, "orig", None) or exc
            where = f"{table.name!r} in {self.destination.describe()}"
            raise DestinationError(f"reading {where} failed: {reason}") from exc


def _with_deleted_at(schema: pa.Schema) -> pa.Schema:
    return schema if DELETED_AT in schema.names else schema.append(_DELETED_FIELD)


def _has_marks(path: Path) -> bool:
    """Whether an earlier run added the ``_deleted_at`` column to the file at `path`."""
    return path.is_file() and DELETED_AT in pq.read_schema(path).names


def _chunks(items: list[str], size: int = DELETE_CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
