"""Apache Iceberg tables (the `pyiceberg` package) in a catalog, each `apply` ONE commit.

``[[destination]] iceberg = "DIR"`` (or ``export --format iceberg --out DIR``) keeps one
Iceberg table per API table, named as the name map names it (`connector.naming`), in the
namespace `NAMESPACE`. The catalog is a
SQLite file inside DIR (``DIR/catalog.db``, pyiceberg's `SqlCatalog`) with the tables'
files beside it (``DIR/tabledata/<table>/``), unless ``catalog`` names a real one: a
database URL (``postgresql://user@host/db``, also SQLite elsewhere; pyiceberg's SQL catalog
there, DIR the warehouse new tables are created in) or ``http(s)://`` for a REST catalog
(its settings and credentials from pyiceberg's own ``PYICEBERG_CATALOG__CONNECTOR__*``
environment variables; the server places the tables). Object storage (``s3://``) needs
such a catalog: a SQLite file cannot be shared there.

Every change is one pyiceberg `Transaction`, committed once: the schema update, the rows
deleted, stamped or written, together. A failure before the commit leaves the table as it
was, and files no snapshot refers to (data files, manifests, a metadata file whose commit
the catalog refused): they are removed when the write fails, and before the next write of
the table (a killed one's): every file under the table's location written after its
current metadata file, which nothing committed can refer to. A table is written by one
writer at a time (a job's runs hold its lock; the catalog holds our tables one at a time),
so such a file is never another writer's work in progress. A new table's files go when its
first commit fails; in the folder's own catalog, a killed first write's files go when the
table is created again (a shared catalog's location may hold files of other catalogs' tables).

- columns: added, renamed and dropped by ``update_schema()`` (Iceberg keeps values by field
  id); any other change (a column retyped, a rename onto a held name) rewrites the table:
  its held rows renamed and converted (`connector.destinations.rewrite.KeptRows`). Choices
  are stored as their text (Iceberg has no dictionary type), so options need nothing;
- ``replace``: everything deleted, then the rows appended;
- ``append``: the rows whose ids the table does not hold;
- ``merge``: the ids written or deleted (at most `MERGE_IDS`) are deleted by predicate,
  which rewrites only the data files holding them, then the rows (and stamped rows, when
  marking) appended; more ids than that rewrite the table in one pass.

Memory stays bounded: pyiceberg writes whole Arrow tables, so rows are appended in chunks
of `CHUNK_BYTES` (one data file, and one snapshot, each; the commit still publishes them
at once), and tables are read one data file at a time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.arrays import stamp_scalar
from connector.destinations.arrow import conform, plain_type
from connector.destinations.base import (
    MARK_TYPE,
    Committed,
    TableChange,
    Target,
    file_stamp,
    library_errors,
    live_batches,
    own_errors,
    sqlite_version,
)
from connector.destinations.evolve import rename_fields, renames
from connector.destinations.held import RECORD_FILE, FolderRecord, held
from connector.destinations.registry import DestinationConfig, kind
from connector.destinations.rewrite import CountingRows, KeptRows
from connector.destinations.storage import open_store, remove_uncommitted
from connector.errors import ConfigError
from connector.extras import require
from connector.locations import DatabaseUrl, is_remote
from connector.process import uninterruptible

__all__ = ["CATALOG_FILE", "CHUNK_BYTES", "MERGE_IDS", "NAMESPACE", "IcebergDestination",
           "open_iceberg"]

#: The namespace every table is created in.
NAMESPACE = "tabledata"
#: The SQLite catalog inside the folder when no ``catalog`` is set.
CATALOG_FILE = "catalog.db"
#: Arrow bytes of rows appended at a time: one data file each. pyiceberg holds what it
#: writes whole (a 200k-row export in one piece peaked ~3x its size), and reads a data file
#: whole when it deletes from it.
CHUNK_BYTES = 32 * 1024 * 1024
#: A merge that writes or deletes at most this many ids deletes them by predicate (only
#: the data files holding them are rewritten); a larger one rewrites the table, streamed.
MERGE_IDS = 20_000
#: The name pyiceberg's environment settings use for our catalog
#: (``PYICEBERG_CATALOG__CONNECTOR__TOKEN`` and the like).
CATALOG_NAME = "connector"

_FEATURE = "Apache Iceberg destinations"


class _NoMissingStatistics(logging.Filter):
    """pyiceberg warns of each column's missing statistics when the Parquet file it was
    writing failed (a full disk): lines beside the failure's one, saying nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("PyArrow statistics missing")


logging.getLogger("pyiceberg.io.pyarrow").addFilter(_NoMissingStatistics())


def open_iceberg(config: DestinationConfig) -> IcebergDestination:
    return IcebergDestination(config)


class IcebergDestination:
    """The Iceberg tables of one catalog, one per table, in `NAMESPACE`."""

    def __init__(self, config: DestinationConfig) -> None:
        require("pyiceberg", _FEATURE)  # MissingExtra now, naming the extra
        self.config = config
        self.capabilities = kind("iceberg").capabilities
        if config.catalog is None and is_remote(config.target):
            where = config.where.rpartition(".")[0] or config.where
            raise ConfigError(
                f"{where}: an Iceberg warehouse in object storage needs a shared catalog (a job "
                "file's catalog = \"postgresql://user@host/db\", or a REST catalog's https:// URL)"
            )
        self._catalog: Any = None
        self._opening = threading.Lock()  # tables read on several threads share one catalog
        self._namespace = False  # created (if it was not there) by this destination

    # --- the catalog ------------------------------------------------------------------------

    def _local_catalog(self) -> Path | None:
        return None if self.config.catalog else Path(self.config.target) / CATALOG_FILE

    def _open_catalog(self, create: bool) -> Any:
        """The catalog (None when it is the folder's own and `create` is off and there is
        none yet: nothing to read then)."""
        with self._opening:
            if self._catalog is None:
                self._catalog = self._connect(create)
            if create and not self._namespace:
                with self._failures("opening", self._catalog_name()):
                    self._catalog.create_namespace_if_not_exists(NAMESPACE)
                self._namespace = True
            return self._catalog

    def _connect(self, create: bool) -> Any:
        local = self._local_catalog()
        if local is not None and not create and not local.is_file():
            return None
        from pyiceberg.catalog import load_catalog

        properties: dict[str, str] = {}
        uri = self.config.catalog
        if uri is not None and uri.partition(":")[0].lower() in ("http", "https"):
            properties = {"type": "rest", "uri": uri}
        else:
            if local is not None:
                local.parent.mkdir(parents=True, exist_ok=True)
                uri = f"sqlite:///{local}"
            assert uri is not None
            properties = {"type": "sql", "uri": uri, "warehouse": self.config.target}
            properties.update(_s3_properties(self.config.target, self.config.timeout))
        with self._failures("opening", self._catalog_name()):
            return load_catalog(CATALOG_NAME, **properties)

    def _catalog_name(self) -> str:
        """The catalog as messages name it (a database URL without its password)."""
        if self.config.catalog is None:
            return str(Path(self.config.target) / CATALOG_FILE)
        if self.config.catalog.partition(":")[0].lower() in ("http", "https"):
            return self.config.catalog.split("?")[0]
        return DatabaseUrl.parse(self.config.catalog, where="catalog").redacted()

    def _identifier(self, target: Target) -> tuple[str, str]:
        return (NAMESPACE, target.name)

    def _load(self, target: Target, *, create: bool = False) -> Any:
        """The table, or None when there is none yet."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        catalog = self._open_catalog(create)
        if catalog is None:
            return None
        with self._failures("reading", self.locate(target)):
            try:
                return catalog.load_table(self._identifier(target))
            except (NoSuchTableError, NoSuchNamespaceError):
                return None

    # --- the protocol -----------------------------------------------------------------------

    def check(self) -> None:
        """The catalog reachable (and, for the folder's own, creatable)."""
        self._open_catalog(create=True)

    def version(self) -> str | None:
        """Its own catalog file's (every commit) and name record's (every claim); None: shared."""
        local = self._local_catalog()
        counter = None if local is None else sqlite_version(local)
        record = file_stamp(Path(self.config.target) / RECORD_FILE)
        return None if counter is None else f"{counter}:{record}"

    def close(self) -> None:
        if self._catalog is not None:
            with contextlib.suppress(Exception):
                self._catalog.close()
            self._catalog, self._namespace = None, False

    def held(self) -> dict[str, str | None]:
        catalog = self._open_catalog(create=False)
        tables: list[str] = []
        if catalog is not None:
            from pyiceberg.exceptions import NoSuchNamespaceError

            with self._failures("reading", self._catalog_name()), contextlib.suppress(
                NoSuchNamespaceError
            ):
                tables = [identifier[-1] for identifier in catalog.list_tables(NAMESPACE)]
        store = open_store(self.config.target, self.config.timeout)
        try:
            return held(tables, FolderRecord(store).read())
        finally:
            store.close()

    def claim(self, names: Mapping[str, str]) -> None:
        store = open_store(self.config.target, self.config.timeout)
        try:
            FolderRecord(store).claim(names)
        finally:
            store.close()

    def locate(self, target: Target) -> str:
        where = f"{self.config.target.rstrip('/')}/{NAMESPACE}/{target.name}"
        if self.config.catalog is None:
            return where
        return f"{NAMESPACE}.{target.name} in {self._catalog_name()}"

    def stored(self, target: Target) -> pa.Schema | None:
        table = self._load(target)
        if table is None:
            return None
        held = _arrow_schema(table)
        ours = {f.name: f for f in target.with_marks(True)}
        return pa.schema([
            _as_ours(ours[f.name], f.type)
            if f.name in ours and _same_kind(ours[f.name].type, f.type) else f
            for f in held
        ])

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        table = self._load(target)
        if table is None:
            return
        with self._failures("reading", self.locate(target)):
            yield from live_batches(
                _names(table), target, columns, updated_after, partial(_rows, table)
            )

    def apply(self, target: Target, change: TableChange) -> Committed:
        table = self._load(target, create=True)
        held = table is not None and change.mode != "replace"
        marks = change.mark or (held and target.deleted_name in _names(table))
        schema = target.with_marks(marks)
        change = replace(change, rows=own_errors(change.rows))
        with self._failures("writing", self.locate(target)):
            if table is None:
                txn = self._catalog.create_table_transaction(
                    self._identifier(target), schema=_stored_schema(schema)
                )
                location = txn.table_metadata.location
                if self.config.catalog is None:  # the folder is ours: a killed first write's files
                    self._sweep(location, None)
                with _removed_on_failure(location, lambda since: self._sweep(location, since)):
                    done = Committed(written=_append(txn, change.rows, schema))
                    with uninterruptible():
                        txn.commit_transaction()
                return done
            self._sweep_table(table)  # what a killed write left (on a full disk: the room it took)
            try:
                txn = table.transaction()
                rewrite = _evolve(txn, table, schema, renames(change.evolve))
                done = _write(txn, table, target, change, schema, rewrite=rewrite)
                with uninterruptible():  # a stop before it: nothing committed
                    txn.commit_transaction()
            except BaseException:
                with contextlib.suppress(Exception):
                    self._sweep_table(self._catalog.load_table(self._identifier(target)))
                raise
        return done

    def _sweep_table(self, table: Any) -> None:
        """Remove the files under `table`'s location written after its current metadata
        file: no commit refers to them (see the module docstring)."""
        location = table.location()
        current = _relative(table.metadata_location, location)
        if current is not None:
            self._sweep(location, current)

    def _sweep(self, location: str, after: float | str | None) -> None:
        """Remove the files under `location` written after `after`: a time (seconds), a file
        there (its time; none are removed when it is missing), or None: every file. Best
        effort: a failure to remove is a warning."""
        def doomed(files: dict[str, float]) -> list[str]:
            since = files.get(after) if isinstance(after, str) else after
            if isinstance(after, str) and since is None:
                return []  # the metadata file is not where it should be: no judging by it
            return [n for n, written in files.items() if since is None or written > since]

        remove_uncommitted(_local(location), self.config.timeout, doomed, "snapshot")

    def _failures(self, doing: str, where: str) -> contextlib.AbstractContextManager[None]:
        """pyiceberg's, the catalog database's and the file system's exceptions as one
        DestinationError line; a failure of the change's own rows is re-raised as itself."""
        return library_errors(f"{doing} Iceberg table {where}")


# --- writing --------------------------------------------------------------------------------


def _write(
    txn: Any, table: Any, target: Target, change: TableChange, schema: pa.Schema, *, rewrite: bool
) -> Committed:
    """The change's rows into a held table, in `txn` (its schema already evolved)."""
    if change.mode == "replace":
        _delete_all(txn, table)
        return Committed(written=_append(txn, change.rows, schema))
    read_old = _reader(table)
    if change.mode == "append" and not rewrite:
        kept = KeptRows(read_old, target, change, schema)
        return Committed(written=_append(txn, kept.new_rows(), schema))
    if change.mode == "merge" and not rewrite:
        rows: Iterable[pa.RecordBatch] = change.rows
        if change.ids is None:
            rows = list(rows)
            coming = sum(b.num_rows for b in rows)
        else:
            coming = len(change.ids)
        if coming + len(change.deleted) <= MERGE_IDS:
            return _merge_by_ids(txn, table, target, replace(change, rows=list(rows)), schema)
        change = replace(change, rows=rows)
    # a column retyped, or a large merge: the table rewritten whole, in one pass
    kept = KeptRows(read_old, target, change, schema)
    new = CountingRows(kept.new_rows())
    _delete_all(txn, table)
    _append(txn, itertools.chain(kept, new), schema)
    return Committed(written=new.count, deleted=kept.deleted)


def _merge_by_ids(
    txn: Any, table: Any, target: Target, change: TableChange, schema: pa.Schema
) -> Committed:
    """A merge of few ids: the held rows with the ids written (and, deleting, those
    deleted; marking, those newly stamped) deleted by predicate, then the rows appended."""
    rows = list(change.rows)
    id_name = target.id_name
    renamed = renames(change.evolve)
    coming = _ids(b.column(id_name) for b in rows)
    gone = _ids([change.deleted]) - coming
    old_id = next((o for o, n in renamed.items() if n == id_name), id_name)
    stamping = change.mark and bool(gone)
    stamped: list[pa.RecordBatch] = []
    doomed: set[str] = set()  # held ids whose rows go (replaced, deleted or re-stamped)
    deleted = 0
    now = stamp_scalar(datetime.now(UTC), MARK_TYPE)
    if coming or gone:
        wanted = coming | gone
        for batch in _rows(table, None if stamping else [old_id], _in(old_id, wanted)):
            if stamping:
                batch = conform(rename_fields(batch, renamed), schema)
            ids = batch.column(id_name if stamping else old_id).to_pylist()
            doomed.update(i for i in ids if i in coming)
            if not change.mark:
                hit = [i for i in ids if i in gone]
                doomed.update(hit)
                deleted += len(hit)
            elif stamping:
                fresh = pc.and_(pa.array([i in gone for i in ids], pa.bool_()),
                                pc.is_null(batch.column(target.deleted_name)))
                newly = batch.filter(fresh)
                if newly.num_rows:
                    mark = target.deleted_field
                    index = newly.schema.get_field_index(mark.name)
                    newly = newly.set_column(index, mark, pa.repeat(now, newly.num_rows))
                    stamped.append(newly)
                    doomed.update(newly.column(id_name).to_pylist())
                    deleted += newly.num_rows
    if doomed:
        txn.delete(_in(id_name, doomed))
    written = _append(txn, itertools.chain(rows, stamped), schema) - sum(b.num_rows for b in stamped)
    return Committed(written=written, deleted=deleted)


def _in(column: str, ids: set[str]) -> Any:
    """pyiceberg's ``column IN ids`` (its pydantic model confuses mypy's view of the call)."""
    from pyiceberg.expressions import In

    return In(column, sorted(ids))  # type: ignore[call-arg, arg-type]


def _ids(arrays: Iterable[pa.Array | pa.ChunkedArray]) -> set[str]:
    out: set[str] = set()
    for array in arrays:
        out.update(i for i in array.to_pylist() if i is not None)
    return out


def _delete_all(txn: Any, table: Any) -> None:
    """Every row deleted (whole data files dropped: nothing rewritten), if there are any."""
    from pyiceberg.expressions import AlwaysTrue

    if any(True for _ in table.scan().plan_files()):
        txn.delete(AlwaysTrue())


def _append(txn: Any, batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> int:
    """`batches`, made to fit `schema`, appended in chunks of about `CHUNK_BYTES`; the row
    count."""
    stored = _stored_schema(schema)
    count = 0
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        fitted = _stored_batch(conform(batch, schema), stored)
        pending.append(fitted)
        size += fitted.nbytes
        count += fitted.num_rows
        if size >= CHUNK_BYTES:
            txn.append(pa.Table.from_batches(pending, stored))
            pending, size = [], 0
    if pending:
        txn.append(pa.Table.from_batches(pending, stored))
    return count


def _stored_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` as Iceberg stores it: choices as text, plain strings, no field metadata."""
    return pa.schema([pa.field(f.name, plain_type(f.type)) for f in schema])


def _stored_batch(batch: pa.RecordBatch, stored: pa.Schema) -> pa.RecordBatch:
    columns = [c.cast(f.type) if c.type != f.type else c for c, f in zip(batch.columns, stored, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=stored)


# --- schema evolution ------------------------------------------------------------------------


def _evolve(txn: Any, table: Any, schema: pa.Schema, renamed: dict[str, str]) -> bool:
    """The table's columns made `schema`'s in `txn`: renamed, dropped and added in place
    (values kept by field id), ordered as `schema`. True when that cannot keep the held
    values (a column retyped, a rename onto a name held): the caller rewrites the rows."""
    wanted = {f.name: _iceberg_type(f.type) for f in schema}
    held = table.schema().fields
    held_names = [f.name for f in held]
    kept: dict[str, str] = {}  # held name -> its name in `schema`
    for f in held:
        new = renamed.get(f.name, f.name)
        if new in wanted and wanted[new] == f.field_type and (new == f.name or new not in held_names):
            kept[f.name] = new
    added = [n for n in schema.names if n not in kept.values()]
    order = [kept[n] for n in held_names if n in kept] + added
    if len(kept) == len(held) and not added and order == schema.names and all(
        k == v for k, v in kept.items()
    ):
        return False
    with txn.update_schema() as update:
        for f in held:
            if f.name not in kept:
                update.delete_column(f.name)
            elif kept[f.name] != f.name:
                update.rename_column(f.name, kept[f.name])
        for name in added:
            update.add_column(name, wanted[name])
        # a column held under a name (or rename) the schema keeps, but dropped and added again
        again = [n for n in held_names if n not in kept and renamed.get(n, n) in wanted]
        if order != schema.names and not again:  # (pyiceberg cannot move a column added again)
            by = {new: old for old, new in kept.items()}  # a move names a column as held
            update.move_first(by.get(schema.names[0], schema.names[0]))
            for before, name in zip(schema.names, schema.names[1:], strict=False):
                update.move_after(by.get(name, name), by.get(before, before))
    return bool(again)


def _iceberg_type(type_: pa.DataType) -> Any:
    """The Iceberg type a column of `connector.schema`'s Arrow type is stored as."""
    from pyiceberg import types as t

    plain = plain_type(type_)
    if pa.types.is_timestamp(plain):
        return t.TimestamptzType() if plain.tz else t.TimestampType()
    if pa.types.is_decimal(plain):
        return t.DecimalType(plain.precision, plain.scale)
    simple = {pa.float64(): t.DoubleType(), pa.int64(): t.LongType(), pa.bool_(): t.BooleanType(),
              pa.date32(): t.DateType()}
    return simple.get(plain, t.StringType())


# --- reading --------------------------------------------------------------------------------


def _rows(table: Any, columns: Sequence[str] | None, row_filter: Any = None) -> Iterator[pa.RecordBatch]:
    """The table's `columns` (None: all), marked rows included, one data file at a time
    (pyiceberg's own batch reader reads every file at once)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    selected = ("*",) if columns is None else tuple(columns)
    if not selected:
        return
    scan = table.scan(row_filter=row_filter or AlwaysTrue(), selected_fields=selected)
    projection = scan.projection()
    for task in scan.plan_files():
        reader = ArrowScan(table.metadata, table.io, projection, scan.row_filter)
        yield from reader.to_record_batches([task])


def _reader(table: Any) -> Any:
    def read_old(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        return _rows(table, columns)

    return read_old


def _arrow_schema(table: Any) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    held = schema_to_pyarrow(table.schema(), include_field_ids=False)
    return pa.schema([pa.field(f.name, plain_type(f.type)) for f in held])


def _names(table: Any) -> list[str]:
    return [f.name for f in table.schema().fields]


def _as_ours(ours: pa.Field, held: pa.DataType) -> pa.Field:
    """Our field (its column's API type and options) with the type held (a choice's text)."""
    return ours if pa.types.is_timestamp(held) else ours.with_type(held)


def _same_kind(ours: pa.DataType, held: pa.DataType) -> bool:
    if pa.types.is_timestamp(ours) and pa.types.is_timestamp(held):
        return True
    return bool(plain_type(ours) == plain_type(held))


def _s3_properties(warehouse: str, timeout: float) -> dict[str, str]:
    """What pyiceberg's S3 file IO needs beyond the provider's chain (which it reads itself):
    the endpoint, when the environment names one, and a time limit per request."""
    if not warehouse.startswith("s3://"):
        return {}
    properties = {"s3.connect-timeout": str(timeout), "s3.request-timeout": str(timeout)}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        properties["s3.endpoint"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        properties["s3.region"] = region
    return properties


@contextlib.contextmanager
def _removed_on_failure(location: str, sweep: Any) -> Iterator[None]:
    """A new table's files removed when its first commit fails (they belong to no table):
    its local folder whole, when this write made it; else those written since it began
    (`sweep(since)`)."""
    path = None if "://" in location else Path(location)
    existed = path is None or path.exists()
    started = time.time()
    try:
        yield
    except BaseException:
        if not existed and path is not None:
            shutil.rmtree(path, ignore_errors=True)
        else:
            sweep(started)
        raise


def _local(location: str) -> str:
    """A table location as `open_store` takes it (``file:`` URLs as paths)."""
    return location.removeprefix("file://")


def _relative(path: str, location: str) -> str | None:
    """`path` (a metadata file) as a name under `location`, or None when it is not under it."""
    inside, root = _local(path), _local(location).rstrip("/") + "/"
    return inside.removeprefix(root) if inside.startswith(root) else None
