"""Delta Lake tables (the `deltalake` package), one per table in a folder or object storage
URL, each `apply` ONE commit.

A Delta table is a folder of Parquet files and a log of commits; readers see the last
commit. A replace is an overwrite; an append a merge that inserts the ids the table lacks;
a merge an upsert by row id whose deletions (or marks) are in the same commit. A column
added upstream is added by the merge itself (``merge_schema``); any other column change
rewrites the table (its held rows renamed and converted, `connector.destinations.rewrite`)
in one overwrite commit. A write that fails or is killed before its commit leaves the table
as it was, and files no commit refers to: they are removed when the write fails, and before
the next write of the table (a killed one's): every file written after the table's last
commit (all of them when it has none). A table is written by one writer at a time (a job's
runs hold its lock; the name map's record says which table a folder holds), so such a file
is never another writer's work in progress. deltalake's runtime may panic on its way out of
a failed write: the panic is kept off stderr (`connector.destinations.panics`), the failure
is the usual one line. A stop does not wait for a write under way in deltalake's native code
(`connector.process.uninterruptible`): the process ends before its commit.

**Rows reach deltalake from a local spool, never from a Python iterator.** deltalake runs
its writes on a Rust runtime whose worker threads would call back into Python (taking the
GIL) to pull each batch of a Python-backed stream, while a call such as
``DeltaTable.is_deltatable`` on another thread holds the GIL and waits on that same
runtime: with tables written in parallel, the runtime's workers and that call waited for
each other for ever (a sync to S3 hung in 3 of 23 runs, SIGTERM ignored). So each table's
rows are first written, in our own thread, to an Arrow IPC file, and deltalake reads that
file through Arrow's C++ reader, which needs no GIL.

On S3 the commit is a conditional put (``If-None-Match``, which S3 and S3-compatible stores
honour): two writers never both commit the same version, so no external lock and no
``AWS_S3_ALLOW_UNSAFE_RENAME``. Credentials come from the provider's standard chain, as for
`connector.destinations.storage`; only the endpoint's plain-HTTP allowance and the request
time limit are set here. Choices are stored as their text (Delta has no dictionary type).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

from connector.arrays import stamp_scalar, text_scalar
from connector.destinations.arrow import conform, plain_type
from connector.destinations.base import (
    MARK_TYPE,
    Committed,
    TableChange,
    Target,
    library_errors,
    live_batches,
    own_errors,
)
from connector.destinations.evolve import renames
from connector.destinations.formats import ROW_GROUP_ROWS
from connector.destinations.held import FolderRecord, held
from connector.destinations.panics import quiet_panics
from connector.destinations.registry import DestinationConfig, kind
from connector.destinations.rewrite import CountingRows, KeptRows
from connector.destinations.storage import Store, open_store, remove_uncommitted
from connector.extras import require
from connector.locations import is_remote
from connector.process import uninterruptible
from connector.scratch import Scratch

__all__ = ["DeltaDestination", "open_delta", "storage_options"]

#: A merge's source says per row whether it is an upsert or a deletion, in a column of this
#: name (more underscores while a column of the table has it: `_op_column`).
_OP = "_connector_op"
_FEATURE = "Delta Lake destinations"
#: A commit in a table's log (``_delta_log/00000000000000000003.json``): the names sort by version.
_COMMIT = re.compile(r"_delta_log/\d{20}\.json")


def open_delta(config: DestinationConfig) -> DeltaDestination:
    return DeltaDestination(config)


def storage_options(uri: str, timeout: float) -> dict[str, str] | None:
    """What deltalake needs beyond the provider's chain (which it reads itself): a time
    limit per request; on S3, commits by conditional put, and plain HTTP allowed when the
    endpoint is http://; on Azure, what ``AZURE_STORAGE_CONNECTION_STRING`` holds, which
    adlfs reads and deltalake does not (it reads ``AZURE_STORAGE_ACCOUNT_NAME`` / ``_KEY``
    itself)."""
    if not is_remote(uri):
        return None
    seconds = max(1, round(timeout))
    # each request bounded, and its retries too (object_store's default: 10 over 3 minutes)
    options = {"timeout": f"{seconds}s", "max_retries": "2", "retry_timeout": f"{3 * seconds}s"}
    scheme = uri.partition("://")[0].lower()
    if scheme in ("az", "abfs", "abfss"):
        options |= _azure_options(os.environ.get("AZURE_STORAGE_CONNECTION_STRING", ""))
    elif scheme == "s3":
        options["conditional_put"] = "etag"
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL", "")
        if endpoint.startswith("http://"):
            options["allow_http"] = "true"
    return options


#: Connection string settings -> deltalake's (object_store's) Azure options.
_AZURE_SETTINGS = {
    "accountname": "account_name",
    "accountkey": "access_key",
    "sharedaccesssignature": "sas_key",
    "blobendpoint": "endpoint",
}


def _azure_options(connection_string: str) -> dict[str, str]:
    """An Azure connection string (``Name=value;...``, names in any case) as deltalake's
    options; the endpoint of the development storage or of a BlobEndpoint included."""
    settings = {}
    for part in connection_string.split(";"):
        name, _, value = part.partition("=")
        settings[name.strip().lower()] = value.strip()
    options = {_AZURE_SETTINGS[k]: v for k, v in settings.items() if k in _AZURE_SETTINGS and v}
    if settings.get("usedevelopmentstorage", "").lower() == "true":
        options["use_emulator"] = "true"
    suffix, account = settings.get("endpointsuffix"), settings.get("accountname")
    if "endpoint" not in options and suffix and account:
        protocol = settings.get("defaultendpointsprotocol") or "https"
        options["endpoint"] = f"{protocol}://{account}.blob.{suffix}"
    endpoint = options.get("endpoint", "")
    if endpoint and "account_name" not in options:  # a SAS string names only the endpoint
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
        path = parts.path.strip("/").split("/")[0]  # an emulator's: http://host:port/account
        options["account_name"] = host.split(".")[0] if ".blob." in host else path
    if endpoint.startswith("http://"):
        options["allow_http"] = "true"
    return options


class DeltaDestination:
    """A folder (local or object storage) with one Delta table per table, named like it."""

    def __init__(self, config: DestinationConfig) -> None:
        self.deltalake = require("deltalake", _FEATURE)
        self.config = config
        self.capabilities = kind("delta").capabilities
        self._spools = Scratch("connector-delta-")
        # deltalake's Parquet writer holds a row group's encoded pages until it is full, and
        # its default row group is 1M rows: a whole table of that size was held. Ours is
        # the file formats' (`ROW_GROUP_ROWS`); compressed as deltalake's default does.
        self._writer = self.deltalake.WriterProperties(
            max_row_group_size=ROW_GROUP_ROWS, compression="SNAPPY"
        )

    def check(self) -> None:
        if is_remote(self.config.target):
            store = self._store()
            try:
                store.check()
            finally:
                store.close()

    def close(self) -> None:
        self._spools.cleanup()

    def _store(self) -> Store:
        return open_store(self.config.target, self.config.timeout)

    def version(self) -> None:  # reading what is held costs little here
        return None

    def held(self) -> dict[str, str | None]:
        store = self._store()
        try:
            folders = [n for n, folder in store.listing().items() if folder and not n.startswith(".")]
            return held(folders, FolderRecord(store).read())
        finally:
            store.close()

    def claim(self, names: Mapping[str, str]) -> None:
        store = self._store()
        try:
            FolderRecord(store).claim(names)
        finally:
            store.close()

    def locate(self, target: Target) -> str:
        return f"{self.config.target.rstrip('/')}/{target.name}"

    def _options(self, uri: str) -> dict[str, str] | None:
        return storage_options(uri, self.config.timeout)

    def _open(self, uri: str) -> Any:
        """The Delta table at `uri`, or None when there is none yet."""
        with self._failures("reading", uri):
            if not self.deltalake.DeltaTable.is_deltatable(uri, self._options(uri)):
                return None
            return self.deltalake.DeltaTable(uri, storage_options=self._options(uri))

    def stored(self, target: Target) -> pa.Schema | None:
        uri = self.locate(target)
        table = self._open(uri)
        if table is None:
            return None
        with self._failures("reading", uri):
            held = pa.schema(table.schema().to_arrow())
        ours = {f.name: f for f in target.with_marks(True)}
        return pa.schema([
            ours[f.name].with_type(f.type)
            if f.name in ours and plain_type(ours[f.name].type) == plain_type(f.type) else f
            for f in held
        ])

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        uri = self.locate(target)
        table = self._open(uri)
        if table is None:
            return
        with self._failures("reading", uri):
            yield from live_batches(
                _names(table), target, columns, updated_after, partial(_rows, table)
            )

    def apply(self, target: Target, change: TableChange) -> Committed:
        uri = self.locate(target)
        self._sweep(uri)  # what a killed write left (on a full disk: the room it took)
        try:
            return self._apply(uri, target, change)
        except BaseException:
            self._sweep(uri)
            raise

    def _apply(self, uri: str, target: Target, change: TableChange) -> Committed:
        table = None if change.mode == "replace" else self._open(uri)
        marks = change.mark or (table is not None and target.deleted_name in _names(table))
        schema = target.with_marks(marks)
        change = replace(change, rows=own_errors(change.rows))
        with self._failures("writing", uri):
            if table is None:
                return Committed(written=self._overwrite(uri, change.rows, schema))
            held = set(_names(table))
            if renames(change.evolve) or not held <= set(schema.names) or _retyped(table, schema):
                return self._rewrite(uri, table, target, change, schema)
            return self._merge(uri, table, target, change, schema, add=not set(schema.names) <= held)

    def _overwrite(self, uri: str, rows: Iterable[pa.RecordBatch], schema: pa.Schema) -> int:
        fitted = (conform(b, schema) for b in rows)
        with self._spool(fitted, schema) as (reader, count), quiet_panics(), uninterruptible():
            self.deltalake.write_deltalake(
                uri, reader, mode="overwrite", schema_mode="overwrite",
                storage_options=self._options(uri), writer_properties=self._writer,
            )
        return count

    def _rewrite(
        self, uri: str, table: Any, target: Target, change: TableChange, schema: pa.Schema
    ) -> Committed:
        """Columns renamed, retyped or dropped: the table rewritten in one overwrite commit,
        its kept rows converted, then the change's rows."""
        kept = KeptRows(lambda columns: _rows(table, columns), target, change, schema)
        new = kept.new_rows()
        counted = CountingRows(new)
        self._overwrite(uri, itertools.chain(kept, counted), schema)
        return Committed(written=counted.count, deleted=kept.deleted)

    def _merge(
        self, uri: str, table: Any, target: Target, change: TableChange, schema: pa.Schema,
        *, add: bool,
    ) -> Committed:
        """Upsert (or, appending, insert new ids) and delete or stamp, in one merge commit;
        `add`: columns new upstream are added by the merge (``merge_schema``)."""
        merging = change.mode == "merge"
        gone = change.deleted if merging else change.deleted.slice(0, 0)
        op = _op_column(schema)
        source = pa.schema([*(_stored_field(f) for f in schema), pa.field(op, pa.string())])
        t, s = "t", "s"
        key = f"{t}.{_q(target.id_name)} = {s}.{_q(target.id_name)}"
        upsert, delete = f"{s}.{_q(op)} = 'upsert'", f"{s}.{_q(op)} = 'delete'"
        rows = CountingRows(change.rows)
        batches = _with_ops(rows, gone, schema, source, target, change.mark)
        # every column named, quoted by `_q`: deltalake's *_all forms quote names without
        # escaping, so a column with a backtick in its name failed ("No field named ...")
        every = {_q(f.name): f"{s}.{_q(f.name)}" for f in schema}
        with self._spool(batches, source) as (reader, _):
            merger = table.merge(
                reader, key, source_alias=s, target_alias=t, merge_schema=add,
                streamed_exec=True, writer_properties=self._writer,
            )
            if merging:
                merger = merger.when_matched_update(every, upsert)
                if change.mark:
                    mark = _q(target.deleted_name)
                    stamped = f"{delete} AND {t}.{mark} IS NULL"
                    merger = merger.when_matched_update({mark: f"{s}.{mark}"}, stamped)
                else:
                    merger = merger.when_matched_delete(delete)
            with quiet_panics(), uninterruptible():
                metrics = merger.when_not_matched_insert(every, upsert).execute()
        inserted = int(metrics.get("num_target_rows_inserted", 0))
        if not merging:
            return Committed(written=inserted)
        updated = int(metrics.get("num_target_rows_updated", 0))
        if change.mark:  # the stamps are updates too: those beyond the upserts that matched
            deleted = updated - (rows.count - inserted)
        else:
            deleted = int(metrics.get("num_target_rows_deleted", 0))
        return Committed(written=rows.count, deleted=deleted)

    @contextlib.contextmanager
    def _spool(
        self, batches: Iterable[pa.RecordBatch], schema: pa.Schema
    ) -> Iterator[tuple[pa.RecordBatchReader, int]]:
        """`batches` (shaped as Delta stores them) written to a local Arrow IPC file by this
        thread, then handed over as a C++ reader of that file (see the module docstring)."""
        out = pa.schema([_stored_field(f) for f in schema])
        fd, name = tempfile.mkstemp(suffix=".arrow", dir=self._spools.path)
        os.close(fd)
        path = Path(name)
        count = 0
        try:
            options = pa.ipc.IpcWriteOptions(compression="lz4")
            with pa.OSFile(name, "wb") as sink, pa.ipc.new_stream(sink, out, options=options) as w:
                for batch in batches:
                    if batch.num_rows:
                        w.write_batch(_stored(batch, out))
                        count += batch.num_rows
            with pa.OSFile(name, "rb") as source:
                yield pa.ipc.open_stream(source), count
        finally:
            path.unlink(missing_ok=True)

    def _sweep(self, uri: str) -> None:
        """Remove the files of writes that never committed from the table's folder: those
        written after its last commit (every file, when it has none; in the log, only a
        commit's temporary copy). Best effort: a failure to remove is a warning."""
        def doomed(files: dict[str, float]) -> list[str]:
            commits = sorted(n for n in files if _COMMIT.fullmatch(n))
            last = files[commits[-1]] if commits else None
            return [
                n for n, written in files.items()
                if (last is None or written > last)
                and (not n.startswith("_delta_log/") or "#" in n or n.endswith(".tmp"))
            ]

        remove_uncommitted(uri, self.config.timeout, doomed, "commit")

    def _failures(self, doing: str, uri: str) -> contextlib.AbstractContextManager[None]:
        """deltalake's and the object store's exceptions as one DestinationError line."""
        return library_errors(f"{doing} Delta table {uri}")


def _with_ops(
    rows: Iterable[pa.RecordBatch],
    gone: pa.Array,
    schema: pa.Schema,
    source: pa.Schema,
    target: Target,
    stamp: bool,
) -> Iterator[pa.RecordBatch]:
    """A merge's source: the rows as upserts, then the deleted ids as rows (nulls but the id,
    and the stamp when marking)."""
    upsert = text_scalar("upsert")
    for batch in rows:
        batch = conform(batch, schema)
        columns = [*batch.columns, pa.repeat(upsert, batch.num_rows)]
        yield pa.RecordBatch.from_arrays(columns, names=source.names)
    if not len(gone):
        return
    now = stamp_scalar(datetime.now(UTC), MARK_TYPE)
    columns = []
    for f in source:
        if f.name == target.id_name:
            columns.append(gone.cast(f.type))
        elif f.name == source.names[-1]:  # the op column
            columns.append(pa.repeat(text_scalar("delete"), len(gone)))
        elif f.name == target.deleted_name and stamp:
            columns.append(pa.repeat(now, len(gone)))
        else:
            columns.append(pa.nulls(len(gone), f.type))
    yield pa.RecordBatch.from_arrays(columns, schema=source)


def _op_column(schema: pa.Schema) -> str:
    """The merge source's op column: a name no column of the table has."""
    name = _OP
    while name in schema.names:
        name = "_" + name
    return name


def _stored_field(field: pa.Field) -> pa.Field:
    """A field as Delta stores it: a choice as its text."""
    return field.with_type(plain_type(field.type))


def _stored(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _rows(table: Any, columns: Sequence[str] | None) -> Iterator[pa.RecordBatch]:
    """The table's `columns` (those it has; None: all), marked rows included, batch by batch,
    in the types its schema gives them (deltalake's scan gives text as string views).

    deltalake's own streaming scan (`DeltaTable.scan`), not `to_pyarrow_dataset`: importing
    `pyarrow.dataset` imports pandas, 0.3 s of CPU, most of what a quiet sync into Delta
    cost beyond SQLite."""
    held = pa.schema(table.schema().to_arrow())
    wanted = held.names if columns is None else [c for c in columns if c in held.names]
    types = pa.schema([held.field(c) for c in wanted])
    for batch in pa.RecordBatchReader.from_stream(table.scan(columns=wanted)):
        yield batch.cast(types)


def _retyped(table: Any, schema: pa.Schema) -> bool:
    """Whether a column the table holds has another type than `schema` gives it."""
    held = {f.name: f.type for f in pa.schema(table.schema().to_arrow())}
    return any(
        f.name in held and plain_type(held[f.name]) != plain_type(f.type)
        and not (pa.types.is_timestamp(held[f.name]) and pa.types.is_timestamp(f.type))
        for f in schema
    )


def _names(table: Any) -> list[str]:
    return [f.name for f in table.schema().fields]


def _q(name: str) -> str:
    """A column name in a deltalake SQL predicate."""
    return "`" + name.replace("`", "``") + "`"
