"""A SQL database through SQLAlchemy (SQLite, PostgreSQL): one SQL table per table.

Every `apply` is ONE transaction (both databases have transactional DDL): the table evolved,
the rows written, deleted rows removed or stamped in the mark column; readers see the old table
until the commit, and a failed or killed write rolls back whole.

- ``replace`` fills a staging table and swaps it in (drop the old, rename the new);
- ``append`` inserts the rows whose ids the table does not hold (``ON CONFLICT DO NOTHING``);
- ``merge`` upserts by id (``ON CONFLICT DO UPDATE``, which also clears a mark), then
  removes or stamps the deleted ids.

Columns are typed by `connector.schema` (the one mapping; a number column by its value type:
DOUBLE PRECISION, BIGINT, NUMERIC(P,S) or TEXT); the row id is the primary key; identifiers
are always quoted. SQLite has no exact decimal (its NUMERIC keeps 15 digits), so a decimal
column is refused there, naming the setting: ``text`` holds the exact digits instead. A column added upstream is added in place; any other change
(renamed, retyped, dropped) rebuilds the table in the same transaction, its held rows
renamed and converted by `connector.destinations.evolve`. PostgreSQL through psycopg is
loaded with ``COPY`` (Arrow writes the CSV in C++); other databases get an ``executemany``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from connector.arrays import bool_array, float_array, string_array
from connector.destinations.arrow import conform, plain_type
from connector.destinations.base import (
    Committed,
    TableChange,
    Target,
    sqlite_version,
    system_kind,
)
from connector.destinations.evolve import rename_fields, renames
from connector.destinations.formats import as_text
from connector.destinations.held import held
from connector.destinations.registry import DestinationConfig
from connector.destinations.sqlengine import connect, database_errors, settle, transaction
from connector.errors import ConfigError, DestinationError
from connector.locations import DatabaseUrl
from connector.naming import NAME_REGISTRY, OWN_PREFIX, fold

__all__ = ["SqlDestination", "open_sql"]

#: Ids per DELETE / UPDATE statement (well under every database's bound-parameter limit).
ID_CHUNK = 500
#: Rows fetched from the database at a time (scans, rebuilds).
FETCH_ROWS = 10_000


def open_sql(config: DestinationConfig) -> SqlDestination:
    return SqlDestination(config)


class SqlDestination:
    """One SQL database; one engine a run, a connection per call (tables may run on threads)."""

    def __init__(self, config: DestinationConfig) -> None:
        self.config = config
        self._engine: sa.Engine | None = None
        self.capabilities = config.capabilities

    @property
    def database(self) -> DatabaseUrl:
        assert self.config.database is not None  # a database kind's config has one
        return self.config.database

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            file = self.database.file
            if file is not None:
                try:
                    file.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise DestinationError(
                        f"{self.config.describe()}: cannot create the folder for the database "
                        f"({exc.strerror})"
                    ) from None
            self._engine = connect(self.database, self.config.timeout)
        return self._engine

    def check(self) -> None:
        self.engine  # noqa: B018 - connects once, so an unreachable database fails first

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def locate(self, target: Target) -> str:
        return target.name

    def version(self) -> str | None:
        """A SQLite file's (`sqlite_version`); None for a server's database."""
        file = self.database.file
        return None if file is None or self.database.engine != "sqlite" else sqlite_version(file)

    def held(self) -> dict[str, str | None]:
        if self._absent():
            return {}
        with database_errors(self.engine, "reading the table names"), self.engine.connect() as conn:
            tables = sa.inspect(conn).get_table_names()
            recorded: dict[str, str] = {}
            if NAME_REGISTRY in tables:
                order = _RECORD.c.seq, _RECORD.c.name
                rows = conn.execute(sa.select(_RECORD.c.name, _RECORD.c.table_id).order_by(*order))
                recorded = {str(r.name): str(r.table_id) for r in rows}
        return held((t for t in tables if not fold(t).startswith(OWN_PREFIX)), recorded)

    def claim(self, names: Mapping[str, str]) -> None:
        with database_errors(self.engine, "recording table names"), transaction(self.engine) as conn:
            _RECORD.create(conn, checkfirst=True)
            last = conn.execute(sa.select(sa.func.coalesce(sa.func.max(_RECORD.c.seq), 0))).scalar()
            conn.execute(_RECORD.delete().where(_RECORD.c.name.in_(list(names))))
            conn.execute(_RECORD.insert(), [
                {"name": name, "table_id": table_id, "seq": int(last or 0) + i}
                for i, (name, table_id) in enumerate(names.items(), start=1)
            ])

    def _absent(self) -> bool:
        """A SQLite file not created yet: nothing is held (and asking must not create it:
        a dry run writes nothing)."""
        file = self.database.file
        return file is not None and not file.is_file()

    def stored(self, target: Target) -> pa.Schema | None:
        if self._absent():
            return None
        with self._failures("reading", target), self.engine.connect() as conn:
            table = _reflect(conn, target.name)
            return None if table is None else _arrow_schema(table, target)

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        if self._absent():
            return
        with self._failures("reading", target), self.engine.connect() as conn:
            table = _reflect(conn, target.name)
            if table is None:
                return
            wanted = [c for c in columns if c in table.c]
            yield from _select(
                conn, table, target, wanted, live=True, updated_after=updated_after
            )

    def apply(self, target: Target, change: TableChange) -> Committed:
        try:
            return self._apply(target, change)
        except BaseException:
            settle(self.engine)
            raise

    def _apply(self, target: Target, change: TableChange) -> Committed:
        inexact = self.capabilities.inexact_columns(target.table)
        if inexact:
            raise ConfigError(
                f"{self.config.describe()}: table {target.table.name!r}: " + "; ".join(inexact)
            )
        with (
            self._failures("writing", target),
            transaction(self.engine) as conn,
        ):
            _check_identifiers(conn, target)
            # a replace needs nothing of the held table (reflecting it costs queries)
            held = None if change.mode == "replace" else _reflect(conn, target.name)
            marks = change.mark or (
                change.mode != "replace" and held is not None and target.deleted_name in held.c
            )
            wanted = _sql_table(target, target.name, marks=marks)
            if change.mode == "replace":
                return Committed(written=_replace(conn, wanted, target, change.rows))
            if held is None:
                wanted.create(conn)
            elif not _fits(held, wanted, change):
                held = _evolve(conn, held, wanted, target, change)
            if change.mode == "append":
                return Committed(written=_upsert(conn, wanted, target, change.rows, update=False))
            written = _upsert(conn, wanted, target, change.rows, update=True)
            return Committed(written=written, deleted=_remove(conn, wanted, target, change))

    def _failures(self, doing: str, target: Target) -> contextlib.AbstractContextManager[None]:
        return database_errors(self.engine, f"{doing} table {target.name!r}")


#: Which table id each name holds (`connector.destinations.held`), in the order recorded.
_RECORD = sa.Table(
    NAME_REGISTRY,
    sa.MetaData(),
    sa.Column("name", sa.Text(), primary_key=True),
    sa.Column("table_id", sa.Text(), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
)


# --- the table's shape ---------------------------------------------------------------------


def _sql_table(target: Target, name: str, *, marks: bool) -> sa.Table:
    """The SQLAlchemy table for `target`'s rows: the row id is the primary key."""
    table = target.table
    columns = []
    for f in target.schema:
        system = system_kind(f)
        if system == "id":
            columns.append(sa.Column(f.name, sa.Text(), primary_key=True, quote=True))
        elif system is not None:
            columns.append(sa.Column(f.name, sa.DateTime(timezone=True), quote=True))
        else:
            columns.append(sa.Column(f.name, table.column(f.name).sql_type, quote=True))
    if marks:
        columns.append(sa.Column(target.deleted_name, sa.DateTime(timezone=True), quote=True))
    return sa.Table(name, sa.MetaData(), *columns, quote=True)


def _reflect(conn: sa.Connection, name: str) -> sa.Table | None:
    if not sa.inspect(conn).has_table(name):
        return None
    return sa.Table(name, sa.MetaData(), autoload_with=conn)


def _arrow_type(column: sa.Column[Any]) -> pa.DataType:
    """A reflected column's values as Arrow holds them (SQLite's affinities included):
    integers int64, NUMERIC(P,S) decimal128, other numbers float64."""
    type_ = column.type
    python = _python_type(type_)
    if python is bool:
        return pa.bool_()
    if python is int:
        return pa.int64()
    if isinstance(type_, sa.Numeric) and not isinstance(type_, sa.Float) and type_.precision:
        return pa.decimal128(type_.precision, type_.scale or 0)
    if isinstance(type_, sa.Numeric) or python is float:
        return pa.float64()
    if python is datetime:
        return pa.timestamp("us", tz="UTC")
    if python is date:
        return pa.date32()
    return pa.string()


def _python_type(type_: sa.types.TypeEngine[Any]) -> type | None:
    try:
        return type_.python_type
    except NotImplementedError:
        return None


def _arrow_schema(table: sa.Table, target: Target) -> pa.Schema:
    """The held columns as Arrow fields; those of `target`'s schema keep its metadata."""
    ours = {f.name: f for f in target.with_marks(True)}
    fields = []
    for column in table.columns:
        type_ = _arrow_type(column)
        known = ours.get(column.name)
        if known is not None and plain_type(known.type) == type_:
            fields.append(known.with_type(type_))
        else:
            fields.append(pa.field(column.name, type_))
    return pa.schema(fields)


def _fits(held: sa.Table, wanted: sa.Table, change: TableChange) -> bool:
    """Whether `held` has every column of `wanted` with its type (after adding the missing
    ones in place, which `_evolve` does), and nothing renamed or extra."""
    if renames(change.evolve):
        return False
    for column in held.columns:
        if column.name not in wanted.c:
            return False
        if _arrow_type(column) != _arrow_type(wanted.c[column.name]):
            return False
    return all(c.name in held.c for c in wanted.columns)


def _evolve(
    conn: sa.Connection, held: sa.Table, wanted: sa.Table, target: Target, change: TableChange
) -> sa.Table:
    """Make `held` into `wanted`: missing columns added in place when that is all; else the
    table rebuilt (held rows renamed and converted into a new table, swapped in)."""
    quote = conn.dialect.identifier_preparer.quote_identifier
    only_added = not renames(change.evolve) and all(
        c.name in wanted.c and _arrow_type(c) == _arrow_type(wanted.c[c.name])
        for c in held.columns
    )
    if only_added:
        for column in wanted.columns:
            if column.name not in held.c:
                sql_type = column.type.compile(dialect=conn.dialect)
                conn.exec_driver_sql(
                    f"ALTER TABLE {quote(held.name)} ADD COLUMN {quote(column.name)} {sql_type}"
                )
        return wanted
    schema = _schema_of(wanted, target)
    names = renames(change.evolve)
    rebuilt = _staging(wanted, conn)
    rebuilt.create(conn)
    # Read as it is written: both tables exist until the swap. A COPY holds its connection,
    # so the old rows (unchanged in this transaction so far) come over a second one, closed
    # before the DROP below would wait for it.
    with conn.engine.connect() if _copy_capable(conn) else contextlib.nullcontext(conn) as source:
        rows = (conform(rename_fields(b, names), schema)
                for b in _select(source, held, target, [c.name for c in held.columns], live=False))
        _insert(conn, rebuilt, rows)
    conn.exec_driver_sql(f"DROP TABLE {quote(held.name)}")
    conn.exec_driver_sql(f"ALTER TABLE {quote(rebuilt.name)} RENAME TO {quote(wanted.name)}")
    return wanted


def _schema_of(table: sa.Table, target: Target) -> pa.Schema:
    """The Arrow schema rows of `table` are written with."""
    return target.with_marks(target.deleted_name in table.c)


# --- writes --------------------------------------------------------------------------------


def _staging(like: sa.Table, conn: sa.Connection, *, late_key: bool = False) -> sa.Table:
    return sa.Table(
        f"_connector_staging_{secrets.token_hex(6)}",
        sa.MetaData(),
        *(
            # a late key's column is NOT NULL from the start: adding the key then needs no
            # scan to check it
            sa.Column(c.name, c.type, primary_key=c.primary_key and not late_key,
                      nullable=not c.primary_key, quote=True)
            for c in like.columns
        ),
        quote=True,
    )


def _replace(
    conn: sa.Connection, wanted: sa.Table, target: Target, batches: Iterable[pa.RecordBatch]
) -> int:
    # With COPY the key is added after the load: one bulk index build beats a per-row one.
    late_key = _copy_capable(conn)
    staging = _staging(wanted, conn, late_key=late_key)
    staging.create(conn)
    schema = _schema_of(wanted, target)
    rows = _insert(conn, staging, (conform(b, schema) for b in batches))
    quote = conn.dialect.identifier_preparer.quote_identifier
    if late_key:
        key = ", ".join(quote(c.name) for c in wanted.primary_key.columns)
        conn.exec_driver_sql(f"ALTER TABLE {quote(staging.name)} ADD PRIMARY KEY ({key})")
    if sa.inspect(conn).has_table(wanted.name):
        conn.exec_driver_sql(f"DROP TABLE {quote(wanted.name)}")
    conn.exec_driver_sql(f"ALTER TABLE {quote(staging.name)} RENAME TO {quote(wanted.name)}")
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


def _upsert(
    conn: sa.Connection,
    table: sa.Table,
    target: Target,
    batches: Iterable[pa.RecordBatch],
    *,
    update: bool,
) -> int:
    """Insert `batches` by row id: a row already held is updated (its mark cleared), or with
    `update` off kept as it is. Returns the rows inserted or updated."""
    if conn.dialect.name not in ("postgresql", "sqlite"):
        raise ConfigError(
            f"appending and merging are supported on PostgreSQL and SQLite, not {conn.dialect.name}"
        )
    schema = target.schema  # the rows; a mark column is cleared, not written
    key = next(c for c in table.columns if c.primary_key)
    others = [c.name for c in table.columns if not c.primary_key and c.name in schema.names]
    clear = target.deleted_name if update and target.deleted_name in table.c else None
    rows_in = (conform(b, schema) for b in batches)
    if _copy_capable(conn):
        changes = sa.Table(
            f"_connector_merge_{secrets.token_hex(6)}",
            sa.MetaData(),
            *(sa.Column(c.name, c.type, quote=True) for c in table.columns if c.name in schema.names),
            prefixes=["TEMPORARY"],
            postgresql_on_commit="DROP",
            quote=True,
        )
        changes.create(conn)
        _copy(conn, changes, rows_in)
        insert = postgresql.insert(table).from_select(list(changes.columns.keys()), changes.select())
        statement = _on_conflict(insert, key, others if update else [], clear)
        return int(conn.execute(statement, execution_options=_ROWCOUNT).rowcount)
    statement = _on_conflict(sqlite.insert(table), key, others if update else [], clear)
    done = 0
    for batch in rows_in:
        if batch.num_rows:
            done += int(conn.execute(statement, _pylist(conn, batch), execution_options=_ROWCOUNT).rowcount)
    return done


#: SQLAlchemy keeps a cursor's row count only for UPDATE and DELETE unless asked: an INSERT's
#: is -1 otherwise (PostgreSQL's INSERT ... SELECT ... ON CONFLICT).
_ROWCOUNT = {"preserve_rowcount": True}


def _on_conflict(insert: Any, key: sa.Column[Any], others: list[str], clear: str | None) -> Any:
    """Insert, or update the held row (and clear its mark, the column `clear`)."""
    if not others:
        return insert.on_conflict_do_nothing(index_elements=[key])
    changes: dict[str, Any] = {name: insert.excluded[name] for name in others}
    if clear is not None:
        changes[clear] = None
    return insert.on_conflict_do_update(index_elements=[key], set_=changes)


def _remove(conn: sa.Connection, table: sa.Table, target: Target, change: TableChange) -> int:
    """Delete the change's deleted ids, or with a mark stamp those not stamped yet."""
    key = table.c[target.id_name]
    done = 0
    now = datetime.now(UTC)
    for chunk in _id_chunks(change.deleted):
        statement: sa.Executable
        if change.mark:
            stamp = table.c[target.deleted_name]
            statement = table.update().where(key.in_(chunk), stamp.is_(None)).values(
                {target.deleted_name: now}
            )
        else:
            statement = table.delete().where(key.in_(chunk))
        done += int(conn.execute(statement).rowcount)
    return done


def _id_chunks(ids: pa.Array) -> Iterator[list[str]]:
    for start in range(0, len(ids), ID_CHUNK):
        yield ids.slice(start, ID_CHUNK).cast(pa.string()).to_pylist()


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
    from psycopg.copy import QueuedLibpqWriter  # only a PostgreSQL engine's: psycopg loaded

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


# --- reads ---------------------------------------------------------------------------------


def _select(
    conn: sa.Connection,
    table: sa.Table,
    target: Target,
    columns: Sequence[str],
    *,
    live: bool,
    updated_after: datetime | None = None,
) -> Iterator[pa.RecordBatch]:
    """`columns` of the table's rows (with `live`, those not marked deleted; with
    `updated_after`, those changed later) as Arrow."""
    query = sa.select(*(table.c[n] for n in columns))
    if live and target.deleted_name in table.c:
        query = query.where(table.c[target.deleted_name].is_(None))
    if updated_after is not None and target.updated_name in table.c:
        after = updated_after if conn.dialect.name != "sqlite" else _naive_utc(updated_after)
        query = query.where(table.c[target.updated_name] > after)
    fields = [f for f in _arrow_schema(table, target) if f.name in columns]
    fields.sort(key=lambda f: list(columns).index(f.name))
    result = conn.execution_options(yield_per=FETCH_ROWS).execute(query)
    for part in result.partitions():
        cells = list(zip(*part, strict=True)) if part else [() for _ in fields]
        arrays = [_arrow_column(list(v), f.type) for v, f in zip(cells, fields, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _arrow_column(values: list[Any], type_: pa.DataType) -> pa.Array:
    """Python values a database returned, as an Arrow array of `type_` (built from buffers:
    `pa.array` of Python objects would import pandas)."""
    if pa.types.is_floating(type_):
        return float_array([None if v is None else float(v) for v in values])
    if pa.types.is_integer(type_) or pa.types.is_decimal(type_):  # exact: through their digits
        return string_array([None if v is None else str(v) for v in values]).cast(type_)
    if pa.types.is_boolean(type_):
        return bool_array([None if v is None else bool(v) for v in values])
    if pa.types.is_timestamp(type_):
        texts = [None if v is None else _utc_text(v) for v in values]
        return string_array(texts).cast(type_)
    if pa.types.is_date(type_):
        texts = [None if v is None else (v if isinstance(v, str) else v.isoformat()) for v in values]
        return string_array(texts).cast(type_)
    return string_array([None if v is None else str(v) for v in values])


def _naive_utc(value: datetime) -> datetime:
    """A time as SQLite holds UTC timestamps: without a zone."""
    return value.astimezone(UTC).replace(tzinfo=None)


def _utc_text(value: Any) -> str:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:  # SQLite hands back UTC timestamps without a zone
        value = value.replace(tzinfo=UTC)
    # isoformat, not strftime: that writes year 1 as "1", which no parser reads back.
    return str(value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds")) + "Z"


# --- connections and errors ----------------------------------------------------------------


def _check_identifiers(conn: sa.Connection, target: Target) -> None:
    """PostgreSQL silently truncates names over 63 bytes: refuse them instead."""
    limit = conn.dialect.max_identifier_length
    for identifier in (target.name, *target.schema.names):
        if len(identifier.encode()) > limit:
            raise ConfigError(
                f"name {identifier!r} is longer than {conn.dialect.name}'s limit of {limit} "
                "bytes; load the table under a shorter name"
            )
