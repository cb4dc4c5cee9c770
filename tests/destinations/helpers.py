"""Applying a change through the destination protocol, and reading what a destination holds
with readers that share no code with it.

    config(kind, location)      a checked `DestinationConfig` (`make_config`)
    apply(config, rows, ...)    `open_destination(config).apply(Target(table, name), TableChange(...))`
    Place                       one destination under test (a kind at a location), with its
                                independent reader: `held` (every row, marked ones included,
                                values as Python sees them) and `types` (each column's kind of
                                value as the storage itself reports it)

The readers are SQLAlchemy (SQLite, PostgreSQL) and sqlite3, duckdb, deltalake, pyarrow
(through s3fs on object storage) and, for CSV, a tokenizer of RFC 4180 here that types each
cell by its form (quoted: text or a time; bare: a number, a date, ...): never `scan`/`stored`,
which are under test.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from connector.destinations import (
    Committed,
    DestinationConfig,
    TableChange,
    Target,
    make_config,
    open_destination,
)
from connector.destinations.evolve import SchemaOp
from connector.ids import IdSet
from connector.modes import WriteMode
from connector.schema import Table, arrow_schema
from tests.destinations.samples import TABLE
from tests.fixtures.s3 import S3Bucket

__all__ = ["Place", "apply", "arrow_kind", "config", "to_batches"]

Rows = Sequence[dict[str, Any]] | Iterable[pa.RecordBatch]


def config(
    kind: str, location: str, mode: WriteMode = "replace", *, where: str = "test", **options: Any
) -> DestinationConfig:
    """A destination of `kind` (``url`` picks duckdb or sql by scheme) at `location`."""
    return make_config(kind, location, mode=mode, where=where, base=Path.cwd(), **options)


def to_batches(rows: Rows, table: Table = TABLE, size: int = 3) -> Iterable[pa.RecordBatch]:
    """`rows` as Arrow batches of `table`'s rows schema (dicts are converted, batches kept)."""
    if isinstance(rows, Sequence) and (not rows or isinstance(rows[0], dict)):
        schema = arrow_schema(table)
        listed = list(rows)
        return [pa.RecordBatch.from_pylist(listed[i : i + size], schema=schema)  # type: ignore[arg-type]
                for i in range(0, len(listed), size)]
    return rows  # type: ignore[return-value]


def apply(
    destination: DestinationConfig,
    rows: Rows = (),
    *,
    table: Table = TABLE,
    name: str | None = None,
    mode: WriteMode | None = None,
    deleted: Sequence[str] = (),
    mark: bool = False,
    evolve: tuple[SchemaOp, ...] = (),
    ids: IdSet | None = None,
) -> Committed:
    """One change applied through the protocol, the destination opened and closed around it."""
    opened = open_destination(destination)
    try:
        change = TableChange(
            mode or destination.mode,
            to_batches(rows, table),
            deleted=pa.array(list(deleted), pa.string()),
            mark=mark,
            evolve=evolve,
            ids=ids,
        )
        return opened.apply(Target(table, name or table.name), change)
    finally:
        opened.close()


# --- independent readers -------------------------------------------------------------------

#: What the storage reports for a column, in these words.
TEXT, CHOICE, NUMBER, CHECKBOX, DATE, TIMESTAMP, INT64 = (
    "text", "choice", "number", "checkbox", "date", "timestamp", "int64")


def _utc(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def arrow_kind(type_: pa.DataType) -> str:
    if pa.types.is_dictionary(type_):
        return CHOICE
    if pa.types.is_floating(type_):
        return NUMBER
    if pa.types.is_integer(type_):
        return INT64
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if pa.types.is_boolean(type_):
        return CHECKBOX
    if pa.types.is_date(type_):
        return DATE
    if pa.types.is_timestamp(type_):
        return TIMESTAMP
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
        return TEXT
    return str(type_)


def _sql_kind(type_: sa.types.TypeEngine[Any]) -> str:
    if isinstance(type_, sa.DateTime):
        return TIMESTAMP
    if isinstance(type_, sa.Date):
        return DATE
    if isinstance(type_, sa.Boolean):
        return CHECKBOX
    if isinstance(type_, sa.Float):
        return NUMBER
    if isinstance(type_, sa.Numeric):
        return f"decimal({type_.precision},{type_.scale})"
    if isinstance(type_, sa.Integer):
        return INT64
    if isinstance(type_, sa.String):
        return TEXT
    return str(type_)


#: A CSV cell is typed by its form: a time is quoted ``YYYY-MM-DD hh:mm:ss.ffffffZ``; other
#: quoted cells are text (so ``""`` is text and an empty bare cell is null); a bare cell is
#: a checkbox, a date or a number.
_CSV_CELL = re.compile(r'"((?:[^"]|"")*)"|([^,\n"]*)')
_CSV_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}Z")
_CSV_FORMS = ((re.compile(r"true|false"), CHECKBOX, lambda t: t == "true"),
              (re.compile(r"\d{4}-\d\d-\d\d"), DATE, date.fromisoformat),
              (re.compile(r"-?\d+"), INT64, int),
              (re.compile(r"-?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?|-?inf|nan", re.IGNORECASE), NUMBER,
               float))


def csv_records(text: str) -> list[list[tuple[str, bool]]]:
    """The records of a CSV file (RFC 4180, ``\\n`` line ends) as (text, quoted) cells."""
    records: list[list[tuple[str, bool]]] = []
    record: list[tuple[str, bool]] = []
    at = 0
    while at < len(text):
        cell = _CSV_CELL.match(text, at)
        assert cell is not None
        quoted, bare = cell.group(1), cell.group(2)
        record.append((quoted.replace('""', '"'), True) if quoted is not None else (bare, False))
        at, end = cell.end() + 1, text[cell.end() : cell.end() + 1]
        if end in ("\n", ""):
            records.append(record)
            record = []
        else:
            assert end == ",", f"not CSV at byte {cell.end()}: {text[cell.end() - 20 : at + 20]!r}"
    return records


def _csv_cell(text: str, quoted: bool) -> tuple[str | None, Any]:
    """A cell's kind (None: empty) and value, by its form."""
    if quoted:
        return (TIMESTAMP, datetime.fromisoformat(text)) if _CSV_TIME.fullmatch(text) else (TEXT, text)
    if text == "":
        return None, None
    for form, kind, value in _CSV_FORMS:
        if form.fullmatch(text):
            return kind, value(text)
    raise AssertionError(f"a bare CSV cell that is no checkbox, date or number: {text!r}")


def _csv_kind(kinds: set[str | None]) -> str:
    """A column's kind from its cells' kinds: whole numbers among others are numbers."""
    kinds.discard(None)
    if kinds == {INT64, NUMBER}:
        return NUMBER
    return "/".join(sorted(k for k in kinds if k)) or "empty"


_DUCK_KINDS = {"VARCHAR": TEXT, "DOUBLE": NUMBER, "BOOLEAN": CHECKBOX, "DATE": DATE,
               "TIMESTAMP WITH TIME ZONE": TIMESTAMP, "BIGINT": INT64,
               "DECIMAL(38,9)": "decimal(38,9)", "DECIMAL(10,2)": "decimal(10,2)"}


@dataclass(frozen=True)
class Place:
    """One destination under test: `kind` (``parquet``, ``csv``, ``sqlite``, ``postgresql``,
    ``duckdb``, ``delta``, ``parquet-s3``, ``delta-s3``) at `location`."""

    kind: str
    location: str
    s3: S3Bucket | None = None

    @property
    def registry_kind(self) -> str:
        return {"sqlite": "url", "postgresql": "url", "duckdb": "url"}.get(
            self.kind, self.kind.removesuffix("-s3"))

    def config(self, mode: WriteMode = "replace") -> DestinationConfig:
        return config(self.registry_kind, self.location, mode)

    def apply(self, rows: Rows = (), **kwargs: Any) -> Committed:
        return apply(self.config(kwargs.get("mode") or "replace"), rows, **kwargs)

    @property
    def stores_choices(self) -> bool:
        """Whether a choice column is stored as such (a Parquet dictionary) rather than text."""
        return self.kind.startswith("parquet")

    # -- reading back

    def held(self, name: str = "orders") -> dict[str, dict[str, Any]] | None:
        """Every row the table holds (marked ones too) by id, timestamps in UTC; None when
        there is no table."""
        rows = self._rows(name)
        if rows is None:
            return None
        id_name = next(k for k in ("_id", "__id", "___id") if not rows or k in rows[0])
        out = {r[id_name]: {k: _utc(v) for k, v in r.items()} for r in rows}
        assert len(out) == len(rows), f"{self.kind}: ids held more than once"
        return out

    def rows(self, name: str) -> list[dict[str, Any]] | None:
        """Every row of the table `name`, as the storage holds it (None: no such table)."""
        return self._rows(name)

    def types(self, name: str = "orders") -> dict[str, str]:
        """Each column's kind of value (``text``, ``choice``, ``number``, ...) as the storage
        declares it, in the table's column order."""
        if self.kind in ("sqlite", "postgresql"):
            with self._engine() as engine:
                return {c["name"]: _sql_kind(c["type"])
                        for c in sa.inspect(engine).get_columns(name)}
        if self.kind == "duckdb":
            return {r[0]: _DUCK_KINDS.get(r[1], r[1])
                    for r in self.duck(f'DESCRIBE "{_dq(name)}"')}
        if self.kind == "csv":  # no declared types: what the cells' forms say
            header, *records = csv_records(Path(self._uri(name)).read_text(encoding="utf-8"))
            return {column: _csv_kind({_csv_cell(*r[i])[0] for r in records})
                    for i, (column, _) in enumerate(header)}
        return {f.name: arrow_kind(f.type) for f in self._arrow(name).schema}

    def text(self, name: str) -> list[dict[str, str | None]]:
        """CSV only: every row's cells as written (None: an empty bare cell)."""
        assert self.kind == "csv"
        header, *records = csv_records(Path(self._uri(name)).read_text(encoding="utf-8"))
        return [{column: (cell if quoted or cell else None)
                 for (column, _), (cell, quoted) in zip(header, r, strict=True)} for r in records]

    def storage_classes(self, name: str, column: str) -> set[str]:
        """SQLite only: the storage classes the column's values have (``typeof``): what a
        column's affinity did to them, which its declared type does not show."""
        assert self.kind == "sqlite"
        path = self.location.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as con:
            q = '"' + column.replace('"', '""') + '"'
            rows = con.execute(f'SELECT DISTINCT typeof({q}) FROM "{_dq(name)}"').fetchall()
        return {r[0] for r in rows}

    def tables(self) -> list[str]:
        """The tables (or table folders / files) the destination holds, sorted."""
        if self.kind in ("sqlite", "postgresql"):
            with self._engine() as engine:
                return sorted(sa.inspect(engine).get_table_names())
        if self.kind == "duckdb":
            return sorted(r[0] for r in self.duck("SELECT table_name FROM duckdb_tables()"))
        if self.s3 is not None:
            prefix = self.location.removeprefix(f"s3://{self.s3.name}/") + "/"
            return sorted({k.removeprefix(prefix).split("/")[0] for k in self._keys(prefix)})
        folder = Path(self.location)
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def duck(self, sql: str) -> list[tuple[Any, ...]]:
        """`sql` over the DuckDB file through a read-only connection of duckdb's own."""
        import duckdb

        path = self.location.removeprefix("duckdb:///")
        with contextlib.closing(duckdb.connect(path, read_only=True)) as con:
            con.execute("SET TimeZone = 'UTC'")
            return con.execute(sql).fetchall()

    def delta_version(self, name: str = "orders") -> int:
        from deltalake import DeltaTable

        return int(DeltaTable(self._uri(name), storage_options=self._options()).version())

    # -- per storage

    @contextlib.contextmanager
    def _engine(self) -> Iterator[sa.Engine]:
        engine = sa.create_engine(self.location)
        try:
            yield engine
        finally:
            engine.dispose()

    def _rows(self, name: str) -> list[dict[str, Any]] | None:
        if self.kind in ("sqlite", "postgresql"):
            with self._engine() as engine:
                if not sa.inspect(engine).has_table(name):
                    return None
                table = sa.Table(name, sa.MetaData(), autoload_with=engine)
                with engine.connect() as conn:
                    return [dict(r) for r in conn.execute(sa.select(table)).mappings()]
        if self.kind == "duckdb":
            import duckdb

            path = self.location.removeprefix("duckdb:///")
            if not Path(path).exists():
                return None
            with contextlib.closing(duckdb.connect(path, read_only=True)) as con:
                con.execute("SET TimeZone = 'UTC'")
                found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                                    [name]).fetchone()
                if not found or not found[0]:
                    return None
                result = con.execute(f'SELECT * FROM "{_dq(name)}"')
                columns = [d[0] for d in result.description]
                return [dict(zip(columns, r, strict=True)) for r in result.fetchall()]
        if not self._exists(name):
            return None
        if self.kind == "csv":
            kinds = self.types(name)
            return [{column: float(value) if kinds[column] == NUMBER and value is not None
                     else value for column, value in row.items()}
                    for row in self._csv_values(name)]
        return self._arrow(name).to_pylist()

    def _csv_values(self, name: str) -> list[dict[str, Any]]:
        header, *records = csv_records(Path(self._uri(name)).read_text(encoding="utf-8"))
        return [{column: _csv_cell(*cell)[1] for (column, _), cell in zip(header, r, strict=True)}
                for r in records]

    def _uri(self, name: str) -> str:
        suffix = {"parquet": ".parquet", "csv": ".csv"}.get(self.registry_kind, "")
        return f"{self.location.rstrip('/')}/{name}{suffix}"

    def _options(self) -> dict[str, str] | None:
        if self.s3 is None:
            return None
        return {"AWS_ENDPOINT_URL": self.s3.server.endpoint, "AWS_ALLOW_HTTP": "true",
                "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing"}

    def _exists(self, name: str) -> bool:
        if self.kind.startswith("delta"):
            from deltalake import DeltaTable

            return bool(DeltaTable.is_deltatable(self._uri(name), self._options()))
        if self.s3 is not None:
            key = self._uri(name).removeprefix(f"s3://{self.s3.name}/")
            return key in self._keys(key)
        return Path(self._uri(name)).is_file()

    def _keys(self, prefix: str) -> list[str]:
        assert self.s3 is not None
        listed = _s3_client(self.s3.server.endpoint).list_objects_v2(Bucket=self.s3.name, Prefix=prefix)
        return [o["Key"] for o in listed.get("Contents", [])]

    def _arrow(self, name: str) -> pa.Table:
        if self.kind.startswith("delta"):
            from deltalake import DeltaTable

            return DeltaTable(self._uri(name), storage_options=self._options()).to_pyarrow_table()
        if self.s3 is not None:
            key = self._uri(name).removeprefix(f"s3://{self.s3.name}/")
            body = _s3_client(self.s3.server.endpoint).get_object(Bucket=self.s3.name, Key=key)["Body"]
            return pq.read_table(pa.BufferReader(body.read()))
        return pq.read_table(self._uri(name))


@functools.cache
def _s3_client(endpoint: str) -> Any:
    """One boto3 client a server (a client costs ~0.2 s to make)."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def _dq(name: str) -> str:
    return name.replace('"', '""')
