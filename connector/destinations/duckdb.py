"""A DuckDB database file (``duckdb:///analytics.duckdb``), written natively and in bulk.

The `duckdb` package (the ``[duckdb]`` extra) takes Arrow straight in: a write's batches are
handed to DuckDB as ONE Arrow stream read by one ``INSERT ... SELECT`` (no row-by-row
inserts, no statement per chunk, no SQLAlchemy); DuckDB pulls each batch as it needs it, so
no more than a batch is held on our side. (Registering each chunk as a table of its own kept
every chunk alive until the commit: a registration is dropped with the transaction; a
1,000,000-row load held all its rows, 167 MB of Arrow buffers.) Every `apply` is ONE
transaction, as a SQL one is:

- ``replace`` fills a staging table and swaps it in (drop the old, rename the new): readers
  see the old table or the new one; a failed or killed load leaves the previous table and no
  staging table (DuckDB's DDL is transactional, and rows of an uncommitted transaction are
  never replayed from its write-ahead log);
- ``append`` adds the rows whose ids the table does not hold yet; ``merge`` stages the rows
  in a table of their own, deletes the held rows whose ids come again and inserts the staged
  versions (so a mark is gone with the old version), then removes, or stamps the mark
  on, the rows deleted upstream.

A column added upstream is added in place; any other change (renamed, retyped, dropped)
rebuilds the table in the same transaction, its held rows renamed and converted by
`connector.destinations.evolve`. Column types come from `connector.schema` (each column
type's SQL type, named here as DuckDB spells it; a number column's value type as
`connector.values` spells it for DuckDB: DOUBLE, BIGINT, DECIMAL(P,S), VARCHAR); choices are
text, timestamps ``TIMESTAMPTZ`` (read back in UTC). The table has no primary key: ids are unique by
construction (a merge deletes before it inserts), and DuckDB's key index would make every
bulk insert check it row by row. One connection a run (DuckDB lets one process at a time
write a file), a cursor a call.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import secrets
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from connector.destinations.arrow import conform
from connector.destinations.base import Committed, TableChange, Target, system_kind
from connector.destinations.evolve import rename_fields, renames
from connector.destinations.held import held
from connector.destinations.registry import DestinationConfig, kind
from connector.errors import DestinationError
from connector.extras import require
from connector.naming import NAME_REGISTRY, OWN_PREFIX, fold
from connector.process import raise_if_stopped

__all__ = ["MEMORY_LIMIT", "READ_ROWS", "THREADS", "DuckdbDestination", "connect", "open_duckdb"]

#: Rows a scan reads back at a time.
READ_ROWS = 64 * 1024
#: DuckDB's buffer memory: by default 80% of RAM, which it fills with the blocks a big load
#: wrote. Past it DuckDB evicts written blocks and spills to ``<file>.tmp``: a load's peak
#: memory stays flat (bench/RESULTS.md has the figures), and a merge of as many rows as the
#: table holds works within it.
MEMORY_LIMIT = "32MB"
#: DuckDB's worker threads: the rows come from one stream, so more threads add only their
#: buffers, not speed.
THREADS = 1
_FEATURE = "duckdb:/// destinations"
#: `connector.schema`'s SQL type names (`ColumnType.sql_name`) as DuckDB spells them
#: (number columns: their value type's, `ValueType.duckdb`).
_DUCKDB_TYPES = {
    "Text": "VARCHAR",
    "Boolean": "BOOLEAN",
    "Date": "DATE",
    "DateTime": "TIMESTAMPTZ",
}
#: DuckDB's type names back to Arrow (what `stored` reports; DECIMAL(P,S) by `_arrow_type`).
_ARROW_TYPES = {
    "VARCHAR": pa.string(),
    "DOUBLE": pa.float64(),
    "BIGINT": pa.int64(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def open_duckdb(config: DestinationConfig) -> DuckdbDestination:
    return DuckdbDestination(config)


class DuckdbDestination:
    """A DuckDB database file with one table per table, named like it."""

    def __init__(self, config: DestinationConfig) -> None:
        require("duckdb", _FEATURE)
        self.config = config
        assert config.database is not None and config.database.path is not None
        self.path = config.database.path
        self.capabilities = kind("duckdb").capabilities
        self._con: Any = None
        self._opening = threading.Lock()
        self._failed = False  # a write failed: see `close`

    def _cursor(self) -> Any:
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
        if self._failed:
            # A commit that failed writing the log (a full disk) leaves an empty
            # ``<file>.wal`` beside the database, which DuckDB removes when it opens the file.
            self._failed = False
            with contextlib.suppress(Exception):
                connect(self.path).close()

    def locate(self, target: Target) -> str:
        return target.name

    def version(self) -> None:  # reading what is held costs little here
        return None

    def held(self) -> dict[str, str | None]:
        if not Path(self.path).is_file():  # not created by asking (a dry run writes nothing)
            return {}
        with self._failures("reading the table names of", None), contextlib.closing(
            self._cursor()
        ) as cur:
            tables = [str(r[0]) for r in cur.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT temporary"
            ).fetchall()]
            recorded: dict[str, str] = {}
            if _find(cur, NAME_REGISTRY) is not None:
                rows = cur.execute(
                    f"SELECT name, table_id FROM {_q(NAME_REGISTRY)} ORDER BY seq, name"
                ).fetchall()
                recorded = {str(r[0]): str(r[1]) for r in rows}
        return held((t for t in tables if not fold(t).startswith(OWN_PREFIX)), recorded)

    def claim(self, names: Mapping[str, str]) -> None:
        with self._failures("recording table names in", None), contextlib.closing(
            self._cursor()
        ) as cur:
            cur.begin()
            try:
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {_q(NAME_REGISTRY)} "
                    "(name VARCHAR PRIMARY KEY, table_id VARCHAR NOT NULL, seq BIGINT NOT NULL)"
                )
                row = cur.execute(f"SELECT coalesce(max(seq), 0) FROM {_q(NAME_REGISTRY)}").fetchone()
                last = int(row[0]) if row else 0
                for i, (name, table_id) in enumerate(names.items(), start=1):
                    cur.execute(f"DELETE FROM {_q(NAME_REGISTRY)} WHERE name = ?", [name])
                    cur.execute(f"INSERT INTO {_q(NAME_REGISTRY)} VALUES (?, ?, ?)",
                                [name, table_id, last + i])
                cur.commit()
            except BaseException:
                with contextlib.suppress(Exception):
                    cur.rollback()
                raise

    def stored(self, target: Target) -> pa.Schema | None:
        if not Path(self.path).is_file():  # not created by asking (a dry run writes nothing)
            return None
        with self._failures("reading", target), contextlib.closing(self._cursor()) as cur:
            columns = _columns(cur, target.name)
        if columns is None:
            return None
        ours = {f.name.casefold(): f for f in target.with_marks(True)}
        fields = []
        for name, type_name in columns.items():
            type_ = _arrow_type(type_name)
            known = ours.get(name.casefold())
            if known is not None and _plain(known.type) == type_:
                fields.append(known.with_type(type_))
            else:
                fields.append(pa.field(name, type_))
        return pa.schema(fields)

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        if not Path(self.path).is_file():
            return
        with self._failures("reading", target), contextlib.closing(self._cursor()) as cur:
            after = None if updated_after is None else (target.updated_name, updated_after)
            yield from _read(cur, target.name, columns, live=target.deleted_name, after=after)

    def apply(self, target: Target, change: TableChange) -> Committed:
        duckdb = require("duckdb", _FEATURE)
        name = target.name
        with contextlib.closing(self._cursor()) as cur:
            cur.begin()
            try:
                applied = self._apply(cur, target, change)
                cur.commit()
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    cur.rollback()
                self._failed = True
                if isinstance(exc, duckdb.Error):
                    raise DestinationError(
                        f"writing table {name!r} in duckdb:{self.path} failed: {_line(exc)}"
                    ) from exc
                raise
        return applied

    def _apply(self, cur: Any, target: Target, change: TableChange) -> Committed:
        name, id_name = target.name, target.id_name
        held = None if change.mode == "replace" else _columns(cur, name)
        marks = change.mark or (held is not None and target.deleted_name.casefold() in _folded(held))
        wanted = _column_types(target, marks=marks)
        schema = target.with_marks(marks)
        rows = (conform(b, schema) for b in change.rows)
        if change.mode == "replace":
            return Committed(written=_replace(cur, name, wanted, rows))
        if held is None:
            cur.execute(f"CREATE TABLE {_q(name)} ({_definitions(wanted)})")
        elif _folded(held) != _folded(wanted) or renames(change.evolve):
            self._evolve(cur, target, change, held, wanted)
        key = _q(id_name)
        columns = list(target.schema.names)  # a mark is cleared by inserting afresh
        if change.mode == "append":
            not_held = f"WHERE {key} NOT IN (SELECT {key} FROM {_q(name)})"
            return Committed(written=_insert(cur, name, columns, rows, where=not_held))
        written = _upsert(cur, name, columns, rows, key)
        mark = target.deleted_name if change.mark else None
        deleted = _remove(cur, name, id_name, change.deleted, mark=mark) if len(
            change.deleted
        ) else 0
        return Committed(written=written, deleted=deleted)

    def _evolve(
        self, cur: Any, target: Target, change: TableChange, held: dict[str, str],
        wanted: dict[str, str],
    ) -> None:
        """Make the held table's columns `wanted`: added in place when that is all, else the
        table rebuilt from its rows (read through a second cursor: the old table is unchanged
        in this transaction until the swap), renamed and converted."""
        name = target.name
        have, want = _folded(held), _folded(wanted)
        if not renames(change.evolve) and all(want.get(c) == t for c, t in have.items()):
            for column, type_name in wanted.items():
                if column.casefold() not in have:
                    cur.execute(f"ALTER TABLE {_q(name)} ADD COLUMN {_q(column)} {type_name}")
            return
        schema = target.with_marks(target.deleted_name in wanted)
        names = renames(change.evolve)
        with contextlib.closing(self._cursor()) as reader:
            old = (conform(rename_fields(b, names), schema)
                   for b in _read(reader, name, list(held), live=None))
            _replace(cur, name, wanted, old)

    @contextlib.contextmanager
    def _failures(self, doing: str, target: Target | None) -> Iterator[None]:
        """DuckDB's errors become a DestinationError naming the table and the file."""
        duckdb = require("duckdb", _FEATURE)
        try:
            yield
        except duckdb.Error as exc:
            what = f"{doing} {target.name!r} in" if target is not None else doing
            raise DestinationError(f"{what} duckdb:{self.path} failed: {_line(exc)}") from exc
        except RuntimeError:
            # a signal during a query on the main thread (reading the table names while the
            # run chooses its tables): DuckDB runs Python's handler and says "Query
            # interrupted"; the stop the handler recorded is what ends the run
            raise_if_stopped()
            raise


def connect(path: str) -> Any:
    """A connection to the database file at `path` (created, with its folder, if missing);
    timestamps are read back in UTC; memory bounded (`MEMORY_LIMIT`, `THREADS`); nothing
    printed. Fails as a
    DestinationError (another process holding the file, a folder that cannot be made), or a
    MissingExtra naming ``[duckdb]``."""
    duckdb = require("duckdb", _FEATURE)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(path)
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute("SET preserve_insertion_order = false")  # rows have no order to keep
        con.execute(f"SET threads = {THREADS}")
        # DuckDB draws a progress bar on stdout (a pipe too) for a query past 2 s: a long
        # load's `--json` summary was no longer JSON
        con.execute("SET enable_progress_bar = false")
        con.execute("SET enable_progress_bar_print = false")
    except OSError as exc:
        raise DestinationError(f"duckdb:{path}: cannot create the folder ({exc.strerror})") from None
    except duckdb.Error as exc:
        raise DestinationError(f"opening duckdb:{path} failed: {_line(exc)}") from exc
    return con


def _read(
    cur: Any,
    name: str,
    columns: Sequence[str],
    *,
    live: str | None,
    after: tuple[str, datetime] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The table's `columns` (those it has), batch by batch; with `live` (the mark column),
    without rows stamped deleted; with `after` (a column and a time), the rows later than it. Nothing
    when the table is missing."""
    held = _columns(cur, name)
    if held is None:
        return
    folded = _folded(held)
    wanted = [c for c in columns if c.casefold() in folded]
    conditions, parameters = [], []
    if live is not None and live.casefold() in folded:
        conditions.append(f"{_q(live)} IS NULL")
    if after is not None and after[0].casefold() in folded:
        conditions.append(f"{_q(after[0])} > ?")
        parameters.append(after[1])
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    relation = cur.sql(f"SELECT {', '.join(map(_q, wanted))} FROM {_q(name)}{where}", params=parameters or None)
    # duckdb 2 names it to_arrow_reader; 1.x fetch_arrow_reader
    reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
    yield from reader(READ_ROWS)


def _column_types(target: Target, *, marks: bool) -> dict[str, str]:
    """Each field of the target's rows → its DuckDB type: ids text, system timestamps and the
    deletion stamp TIMESTAMPTZ, user columns their `connector.schema` SQL type."""
    types = {}
    for f in target.schema:
        system = system_kind(f)
        if system == "id":
            types[f.name] = "VARCHAR"
        elif system is not None:
            types[f.name] = "TIMESTAMPTZ"
        else:
            column = target.table.column(f.name)
            held = column.values
            types[f.name] = held.duckdb if held is not None else _DUCKDB_TYPES[column.kind.sql_name]
    if marks:
        types[target.deleted_name] = "TIMESTAMPTZ"
    return types


def _arrow_type(type_name: str) -> pa.DataType:
    """A DuckDB column type as Arrow holds its values (text for a type we never write)."""
    decimal = _DECIMAL.fullmatch(type_name)
    if decimal is not None:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    return _ARROW_TYPES.get(type_name, pa.string())


def _replace(cur: Any, name: str, columns: dict[str, str], batches: Iterable[pa.RecordBatch]) -> int:
    staging = f"_connector_staging_{secrets.token_hex(6)}"
    cur.execute(f"CREATE TABLE {_q(staging)} ({_definitions(columns)})")
    rows = _insert(cur, staging, list(columns), batches)
    old = _find(cur, name)
    if old is not None:
        cur.execute(f"DROP TABLE {_q(old)}")
    cur.execute(f"ALTER TABLE {_q(staging)} RENAME TO {_q(name)}")
    return rows


def _insert(
    cur: Any, name: str, columns: list[str], batches: Iterable[pa.RecordBatch], *, where: str = ""
) -> int:
    """Insert the batches (only `columns`) with one ``INSERT ... SELECT`` reading them as an
    Arrow stream (`where` filters them); the rows inserted. A failure while producing them
    (a read upstream) is raised as itself, not as DuckDB's error about the stream."""
    feed = _Feed(b.select(columns) for b in batches if b.num_rows)
    pulled = iter(feed)
    first = next(pulled, None)
    if first is None:
        return 0
    view = f"_connector_rows_{secrets.token_hex(6)}"
    names = ", ".join(map(_q, columns))
    stream = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], pulled))
    cur.register(view, stream)  # gone with the cursor when the transaction fails
    try:
        rows = _count(cur.execute(
            f"INSERT INTO {_q(name)} ({names}) SELECT {names} FROM {_q(view)} {where}"
        ))
    except Exception:
        feed.reraise()
        raise
    cur.unregister(view)
    return rows


def _upsert(cur: Any, name: str, columns: list[str], batches: Iterable[pa.RecordBatch], key: str) -> int:
    """Replace the held rows whose ids come again by the new ones, and add the rest: staged in a
    table of their own first (one pass over the stream, then one delete and one insert)."""
    staging = f"_connector_staging_{secrets.token_hex(6)}"
    cur.execute(f"CREATE TABLE {_q(staging)} AS SELECT {', '.join(map(_q, columns))} FROM {_q(name)} LIMIT 0")
    rows = _insert(cur, staging, columns, batches)
    if rows:
        names = ", ".join(map(_q, columns))
        cur.execute(f"DELETE FROM {_q(name)} WHERE {key} IN (SELECT {key} FROM {_q(staging)})")
        _count(cur.execute(f"INSERT INTO {_q(name)} ({names}) SELECT {names} FROM {_q(staging)}"))
    cur.execute(f"DROP TABLE {_q(staging)}")
    return rows


class _Feed:
    """Batches DuckDB pulls through an Arrow stream (on a thread of its own). An exception
    raised producing them reaches DuckDB only as the stream's error text; it is kept here so
    the writer can raise it as it was (a failed read upstream, a stop)."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = iter(batches)
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._batches
        except BaseException as exc:
            self.error = exc
            raise

    def reraise(self) -> None:
        if self.error is not None:
            raise self.error from None


def _remove(cur: Any, name: str, id_name: str, ids: pa.Array, *, mark: str | None) -> int:
    """Delete the rows with these ids, or with `mark` (the mark column) stamp those not
    stamped yet; the count."""
    view = f"_connector_gone_{secrets.token_hex(6)}"
    key = _q(id_name)
    cur.register(view, pa.table({id_name: ids.cast(pa.string())}))
    try:
        chosen = f"{key} IN (SELECT {key} FROM {_q(view)})"
        if mark is not None:
            stamp = _q(mark)
            return _count(cur.execute(
                f"UPDATE {_q(name)} SET {stamp} = ? WHERE {chosen} AND {stamp} IS NULL",
                [datetime.now(UTC)],
            ))
        return _count(cur.execute(f"DELETE FROM {_q(name)} WHERE {chosen}"))
    finally:
        cur.unregister(view)


def _count(result: Any) -> int:
    """The row count a statement answers (fetched to the end: duckdb 2 refuses other work
    on a connection while a result is unfinished)."""
    rows = result.fetchall()
    return int(rows[0][0]) if rows else 0


def _find(cur: Any, name: str) -> str | None:
    """The table's name as stored, if the database has one called `name` (in any case)."""
    row = cur.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT temporary "
        "AND lower(table_name) = lower(?)",
        [name],
    ).fetchone()
    return str(row[0]) if row else None


def _columns(cur: Any, name: str) -> dict[str, str] | None:
    """The table's columns and their DuckDB types, in order; None when there is no table."""
    stored = _find(cur, name)
    if stored is None:
        return None
    rows = cur.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index",
        [stored],
    ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def _folded(columns: dict[str, str]) -> dict[str, str]:
    """Column names compared as DuckDB compares them: without case."""
    return {c.casefold(): t for c, t in columns.items()}


def _plain(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pa.types.is_dictionary(type_) else type_


def _definitions(columns: dict[str, str]) -> str:
    return ", ".join(f"{_q(column)} {kind}" for column, kind in columns.items())


def _q(identifier: str) -> str:
    """A quoted identifier (DuckDB still matches names case-insensitively)."""
    return '"' + identifier.replace('"', '""') + '"'


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
