"""Arrow batches -> a Delta Lake table (the `deltalake` package), each write one commit.

A Delta table is a folder of Parquet files and a log of commits; readers see the last
commit. So every write here is one commit: a replace (overwrite), an append of the ids the
table does not hold yet, and a merge (upsert by row id, plus the rows deleted upstream
removed or stamped ``_deleted_at``) — one transaction, as a SQL load is. A write that fails
or is killed before its commit leaves only unreferenced files: the table is as it was.

On S3 the commit is a conditional put (``If-None-Match``, which S3 and S3-compatible stores
honour): two writers never both commit the same version, so no external lock and no
``AWS_S3_ALLOW_UNSAFE_RENAME``. Credentials come from the provider's standard chain, as
for `connector.load.storage`; only the endpoint's plain-HTTP allowance is derived here.

Choice columns are stored as their text (Delta has no dictionary type); the rest keep their
types (double, boolean, date, timestamp UTC, string).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from connector.errors import ConnectorError, DestinationError
from connector.extract import string_array
from connector.extras import require
from connector.load.parquet import conform

__all__ = [
    "DELETED_AT",
    "delta_exists",
    "delta_schema",
    "merge_delta",
    "read_delta",
    "storage_options",
    "write_delta",
]

#: The column a ``deletes = "mark"`` sync stamps (the same name the other sinks use).
DELETED_AT = "_deleted_at"
_DELETED_FIELD = pa.field(DELETED_AT, pa.timestamp("us", tz="UTC"))
#: A merge's source says per row whether it is an upsert or a deletion.
_OP = "_connector_op"
_FEATURE = "Delta Lake destinations"


def storage_options(uri: str) -> dict[str, str] | None:
    """What deltalake needs beyond the provider's chain (which it reads itself): on S3,
    commits by conditional put, and plain HTTP allowed when the endpoint is http://; on
    Azure, what ``AZURE_STORAGE_CONNECTION_STRING`` holds, which adlfs reads and deltalake
    does not (it reads ``AZURE_STORAGE_ACCOUNT_NAME`` / ``_KEY`` itself)."""
    scheme = uri.partition("://")[0].lower()
    if scheme in ("az", "abfs", "abfss"):
        return _azure_options(os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")) or None
    if scheme != "s3":
        return None
    options = {"conditional_put": "etag"}
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


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` as Delta stores it: choices (dictionaries) as their text."""
    return pa.schema([
        f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema
    ])


def delta_exists(uri: str) -> bool:
    deltalake = require("deltalake", _FEATURE)
    with _failures("reading", uri):
        return bool(deltalake.DeltaTable.is_deltatable(uri, storage_options(uri)))


def read_delta(uri: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The table's `columns` (those it has), batch by batch, without rows marked deleted."""
    table = _open(uri)
    if table is None:
        return
    with _failures("reading", uri):
        names = set(_names(table))
        wanted = [c for c in columns if c in names]
        marked = pc.field(DELETED_AT).is_null() if DELETED_AT in names else None
        dataset = table.to_pyarrow_dataset()
        yield from dataset.to_batches(columns=wanted, filter=marked)


def write_delta(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    uri: str,
    mode: Literal["replace", "append"],
    *,
    id_name: str,
) -> int:
    """Replace the table at `uri` with `batches` (one overwrite commit, schema included), or
    append the rows whose ids it does not hold yet (one commit). Returns the rows written."""
    deltalake = require("deltalake", _FEATURE)
    table = _open(uri)
    if mode == "append" and table is not None:
        return merge_delta(batches, schema, uri, id_name=id_name, insert_only=True)
    stream = _Stream(batches, schema)
    with stream.reraised(), _failures("writing", uri):
        deltalake.write_deltalake(
            uri, stream.reader(), mode="overwrite", schema_mode="overwrite",
            storage_options=storage_options(uri),
        )
    return stream.rows


def merge_delta(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    uri: str,
    *,
    id_name: str,
    deleted: pa.Array | None = None,
    mark: bool = False,
    insert_only: bool = False,
) -> int:
    """Upsert `batches` by `id_name` and remove `deleted` (or, with `mark`, stamp them
    ``_deleted_at`` unless already stamped; an upserted row loses its stamp) in one commit.

    `insert_only`: the append of a full run (new ids only; held rows left as they are).
    A missing table is created from `batches`. Returns the rows upserted.
    """
    table = _open(uri)
    if table is None:
        return write_delta(batches, schema, uri, "replace", id_name=id_name)
    gone = deleted if deleted is not None else string_array([])
    target = set(_names(table))
    if DELETED_AT in target or (mark and len(gone)):
        schema = schema if DELETED_AT in schema.names else schema.append(_DELETED_FIELD)
    _add_columns(table, uri, delta_schema(schema), target)
    stream = _Stream(batches, schema, deleted=gone, id_name=id_name, stamp=mark)
    t, s = "t", "s"
    key = f"{t}.{_q(id_name)} = {s}.{_q(id_name)}"
    upsert, delete = f"{s}.{_OP} = 'upsert'", f"{s}.{_OP} = 'delete'"
    with stream.reraised(), _failures("writing", uri):
        merger = table.merge(
            stream.reader(), key, source_alias=s, target_alias=t, streamed_exec=True
        )
        if not insert_only:
            merger = merger.when_matched_update_all(upsert, except_cols=[_OP])
            if mark:
                stamped = f"{delete} AND {t}.{_q(DELETED_AT)} IS NULL"
                merger = merger.when_matched_update(
                    {_q(DELETED_AT): f"{s}.{_q(DELETED_AT)}"}, stamped
                )
            else:
                merger = merger.when_matched_delete(delete)
        merger.when_not_matched_insert_all(upsert, except_cols=[_OP]).execute()
    return stream.rows


def _add_columns(table: Any, uri: str, schema: pa.Schema, present: set[str]) -> None:
    """Columns new upstream (or ``_deleted_at``) added before the merge: a metadata-only
    commit of nullable columns, harmless if the merge then fails (as SQL's ALTER is)."""
    deltalake = require("deltalake", _FEATURE)
    missing = [f for f in schema if f.name not in present]
    if not missing:
        return
    with _failures("writing", uri):
        fields = [deltalake.Field.from_arrow(f.with_nullable(True)) for f in missing]
        table.alter.add_columns(fields)


class _Stream:
    """Batches as one Arrow stream for deltalake, counted; an exception raised while
    reading them (a stop, a failed read) is re-raised as itself, not as deltalake's."""

    def __init__(
        self,
        batches: Iterable[pa.RecordBatch],
        schema: pa.Schema,
        *,
        deleted: pa.Array | None = None,
        id_name: str = "",
        stamp: bool = False,
    ) -> None:
        self.batches, self.schema, self.rows = batches, schema, 0
        self.merging = deleted is not None
        self.deleted, self.id_name, self.stamp = deleted, id_name, stamp
        self.out = delta_schema(schema)
        if self.merging:
            self.out = self.out.append(pa.field(_OP, pa.string()))
        self.error: BaseException | None = None

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.out, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            for batch in self.batches:
                self.rows += batch.num_rows
                yield self._shaped(conform(batch, self.schema), "upsert")
            if self.deleted is not None and len(self.deleted):
                yield self._gone(self.deleted)
        except BaseException as exc:
            self.error = exc
            raise

    def _shaped(self, batch: pa.RecordBatch, op: str) -> pa.RecordBatch:
        columns = [
            c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
            for c in batch.columns
        ]
        if self.merging:
            columns.append(pa.repeat(pa.scalar(op), batch.num_rows))
        return pa.RecordBatch.from_arrays(columns, schema=self.out)

    def _gone(self, ids: pa.Array) -> pa.RecordBatch:
        """The deleted ids as rows of the source: nulls but the id (and the stamp)."""
        now = pa.scalar(datetime.now(UTC), _DELETED_FIELD.type)
        columns = []
        for f in self.out:
            if f.name == self.id_name:
                columns.append(ids.cast(f.type))
            elif f.name == _OP:
                columns.append(pa.repeat(pa.scalar("delete"), len(ids)))
            elif f.name == DELETED_AT and self.stamp:
                columns.append(pa.repeat(now, len(ids)))
            else:
                columns.append(pa.nulls(len(ids), f.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.out)

    @contextlib.contextmanager
    def reraised(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            if self.error is not None and exc is not self.error:
                raise self.error from None
            raise


def _open(uri: str) -> Any:
    """The Delta table at `uri`, or None when there is none yet."""
    deltalake = require("deltalake", _FEATURE)
    if not delta_exists(uri):
        return None
    with _failures("reading", uri):
        return deltalake.DeltaTable(uri, storage_options=storage_options(uri))


def _names(table: Any) -> list[str]:
    return [f.name for f in table.schema().fields]


def _q(name: str) -> str:
    """A column name in a deltalake SQL predicate."""
    return "`" + name.replace("`", "``") + "`"


@contextlib.contextmanager
def _failures(doing: str, uri: str) -> Iterator[None]:
    """deltalake's and the object store's exceptions become one DestinationError line."""
    try:
        yield
    except ConnectorError:
        raise
    except Exception as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise DestinationError(f"{doing} Delta table {uri} failed: {text[:300]}") from exc
