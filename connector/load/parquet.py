"""Arrow batches -> one Parquet file per table, streamed row group by row group, swapped in.

Types survive a round trip through pandas, pyarrow and DuckDB: choices are dictionary
columns whose dictionary is the column's options (so pandas reads a categorical with every
option), numbers float64, checkboxes bool, dates date32, timestamps UTC. The file says what
it was extracted from: table id and name, each column's API type and options (also as one
JSON document, readable where Arrow field metadata is not), and the extraction time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connector.extract import string_array
from connector.load.atomic import atomic_path
from connector.schema import META_COLUMN_TYPE, META_OPTIONS, META_SYSTEM, TYPES, column_type

__all__ = ["ROW_GROUP_ROWS", "conform", "merge_parquet", "write_parquet"]

#: Rows per Parquet row group: pages are buffered up to this, so memory stays bounded
#: (64k-row groups held ~30 MB more while streaming an export; 16k cost nothing measurable).
ROW_GROUP_ROWS = 16 * 1024

META_EXTRACTED_AT = b"connector.extracted_at"
META_COLUMNS = b"connector.columns"
META_PANDAS = b"pandas"


def write_parquet(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: str | os.PathLike[str],
    *,
    extracted_at: datetime | None = None,
) -> int:
    """Write `batches` to `path` as Parquet and return the row count.

    The file is written aside and renamed into place: if anything fails (or the process is
    killed) before the end, the previous file at `path` is untouched.
    """
    schema = _file_schema(schema, extracted_at or datetime.now(UTC))
    rows = 0
    # Row groups are encoded in a helper thread (Arrow releases the GIL) while the next pages
    # are fetched; at most one group is being written while the next one fills. The last
    # is written here: a small table (one group) never starts a thread (3-4 ms each).
    writing: Future[None] | None = None
    with (
        atomic_path(path) as temp,
        pq.ParquetWriter(temp, schema) as writer,
        ThreadPoolExecutor(1, thread_name_prefix="parquet") as behind,
    ):

        def flush(group: list[pa.RecordBatch]) -> None:
            nonlocal writing
            table = pa.Table.from_batches(group, schema)
            if writing is not None:
                writing.result()
            writing = behind.submit(writer.write_table, table, ROW_GROUP_ROWS)

        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for batch in batches:
            pending.append(conform(batch, schema))
            pending_rows += batch.num_rows
            if pending_rows >= ROW_GROUP_ROWS:
                flush(pending)
                rows += pending_rows
                pending, pending_rows = [], 0
        if writing is not None:
            writing.result()
        if pending:  # the last group: nothing left to overlap it with, so no thread for it
            writer.write_table(pa.Table.from_batches(pending, schema), ROW_GROUP_ROWS)
            rows += pending_rows
    return rows


def merge_parquet(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: str | os.PathLike[str],
    *,
    deleted_ids: Collection[str] | pa.Array = (),
    changed_ids: pa.Array | None = None,
    extracted_at: datetime | None = None,
) -> int:
    """Upsert `batches` by row id into the Parquet file at `path`, drop `deleted_ids`.

    For incremental syncs: the file is rewritten (streamed, atomically) with its old rows
    minus those changed or deleted, then the changed rows. Returns the rows now in the file.
    A missing file is simply written. With `changed_ids` (the ids of `batches`, known to
    the caller) the changed rows stream through; without, they are held to learn their ids.
    """
    id_name = _id_field(schema)
    deleted = _id_array(deleted_ids)
    changed: Iterable[pa.RecordBatch]
    if changed_ids is None:
        held = [conform(batch, schema) for batch in batches]
        changed_ids = _concat([b.column(id_name) for b in held])
        changed = held
    else:
        changed = (conform(batch, schema) for batch in batches)
    drop = _concat([deleted, changed_ids.cast(pa.string())])

    def rows() -> Iterator[pa.RecordBatch]:
        if Path(path).exists():
            with pq.ParquetFile(path) as old:
                for batch in old.iter_batches(batch_size=ROW_GROUP_ROWS):
                    kept = batch.filter(pc.invert(pc.is_in(batch.column(id_name), drop)))
                    yield conform(kept, schema)
        yield from changed

    return write_parquet(rows(), schema, path, extracted_at=extracted_at)


def _id_array(ids: Collection[str] | pa.Array) -> pa.Array:
    if isinstance(ids, pa.Array | pa.ChunkedArray):
        return _concat([ids]) if isinstance(ids, pa.ChunkedArray) else ids.cast(pa.string())
    return string_array(list(ids))


def _concat(arrays: list[pa.Array] | list[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """One string array of every id in `arrays` (chunked ones flattened)."""
    flat: list[pa.Array] = []
    for a in arrays:
        flat.extend(a.chunks if isinstance(a, pa.ChunkedArray) else [a])
    return pa.concat_arrays([a.cast(pa.string()) for a in flat]) if flat else string_array([])


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s fields: cast where types differ, nulls where missing.

    Lets an old file's rows join a newer schema (a column added or dropped upstream). Choice
    columns are re-encoded so their dictionary is the column's options (then any value
    outside them): pandas then reads a categorical whose categories are the options.
    """
    names = set(batch.schema.names)
    columns = []
    for f in schema:
        column = batch.column(f.name) if f.name in names else pa.nulls(batch.num_rows, f.type)
        if META_OPTIONS in (f.metadata or {}) and pa.types.is_dictionary(f.type):
            column = _encode_choice(column, json.loads(f.metadata[META_OPTIONS]), f.type)
        elif column.type != f.type:
            column = column.cast(f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _encode_choice(column: pa.Array, options: list[str], type_: pa.DataType) -> pa.Array:
    dictionary = string_array(options)  # not pa.array: that would import pandas
    if isinstance(column, pa.DictionaryArray) and column.dictionary.equals(dictionary):
        return column.cast(type_) if column.type != type_ else column
    values = column.cast(pa.string())
    unexpected = pc.unique(values.filter(pc.invert(pc.is_in(values, dictionary)))).drop_null()
    dictionary = pa.concat_arrays([dictionary, unexpected])
    indices = pc.index_in(values, dictionary).cast(type_.index_type)
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def _id_field(schema: pa.Schema) -> str:
    for f in schema:
        if (f.metadata or {}).get(META_SYSTEM) == b"id":
            return str(f.name)
    raise ValueError("schema has no row id field (build it with connector.schema.arrow_schema)")


def _file_schema(schema: pa.Schema, extracted_at: datetime) -> pa.Schema:
    """`schema` with the extraction time and a JSON description of the columns."""
    columns = []
    for f in schema:
        meta = f.metadata or {}
        described: dict[str, object] = {"name": f.name}
        if META_SYSTEM in meta:
            described["system"] = meta[META_SYSTEM].decode()
        if META_COLUMN_TYPE in meta:
            described["type"] = meta[META_COLUMN_TYPE].decode()
        if META_OPTIONS in meta:
            described["options"] = json.loads(meta[META_OPTIONS])
        columns.append(described)
    return schema.with_metadata(
        {
            **(schema.metadata or {}),
            META_EXTRACTED_AT: extracted_at.astimezone(UTC).isoformat().encode(),
            META_COLUMNS: json.dumps(columns).encode(),
            META_PANDAS: _pandas_metadata(schema),
        }
    )


def _pandas_metadata(schema: pa.Schema) -> bytes:
    """pandas' own schema note, so a plain `pd.read_parquet` restores our nullable dtypes
    (string, Float64, boolean, date) instead of object and float columns.

    Written by hand from `connector.schema`'s dtype names, so writing Parquet never imports
    pandas. Choices (dictionary -> categorical) and UTC timestamps need no note.
    """
    columns = []
    for f in schema:
        meta = f.metadata or {}
        if META_COLUMN_TYPE in meta:
            dtype = column_type(meta[META_COLUMN_TYPE].decode()).pandas_name
        elif meta.get(META_SYSTEM) == b"id":
            dtype = TYPES["text"].pandas_name
        else:
            continue
        if dtype != TYPES["choice"].pandas_name:
            columns.append({"name": f.name, "field_name": f.name, "pandas_type": "object",
                            "numpy_type": dtype, "metadata": None})
    note = {"index_columns": [], "column_indexes": [], "columns": columns,
            "creator": {"library": "connector"}}
    return json.dumps(note).encode()
