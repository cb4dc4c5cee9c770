"""The file formats: Arrow batches -> a Parquet or a CSV file, streamed, with nothing held.

Parquet: types survive a round trip through pandas, pyarrow and DuckDB: choices are dictionary
columns whose dictionary is the column's options (so pandas reads a categorical with every
option), numbers their value type (float64 unless set: int64, decimal128, text;
`connector.values`), checkboxes bool, dates date32, timestamps UTC. The file says what
it was extracted from: table id and name, each column's API type and options (also as one
JSON document, readable where Arrow field metadata is not), and the extraction time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from connector.arrays import string_array
from connector.atomic import atomic_path
from connector.destinations.arrow import conform
from connector.schema import (
    META_COLUMN_TYPE,
    META_OPTIONS,
    META_SYSTEM,
    META_VALUE_TYPE,
    TYPES,
    column_type,
)
from connector.values import value_type

__all__ = [
    "FORMULA_STARTS",
    "ROW_GROUP_ROWS",
    "as_text",
    "encode_csv",
    "encode_parquet",
    "excel_safe",
    "excel_safe_batch",
    "parquet_batches",
    "undo_excel_safe",
    "write_csv",
    "write_parquet",
]

#: Rows per Parquet row group: pages are buffered up to this, so memory stays bounded
#: (larger groups held more while streaming an export, and smaller ones gained nothing).
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
    with atomic_path(path) as temp:
        return encode_parquet(batches, schema, temp, extracted_at=extracted_at)


def encode_parquet(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: str | os.PathLike[str],
    *,
    extracted_at: datetime | None = None,
) -> int:
    """Write `batches` (conformed to `schema`) to the file `path` as Parquet; the row count."""
    schema = _file_schema(schema, extracted_at or datetime.now(UTC))
    rows = 0
    # Row groups are encoded in a helper thread (Arrow releases the GIL) while the next pages
    # are fetched; at most one group is being written while the next one fills. The last
    # is written here: a small table (one group) never starts a thread.
    writing: Future[None] | None = None
    with (
        pq.ParquetWriter(path, schema) as writer,
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
    (string, Float64, Int64, boolean, date) instead of object and float columns.

    Written by hand from `connector.schema`'s dtype names, so writing Parquet never imports
    pandas. Choices (dictionary -> categorical), decimals (exact `Decimal`s) and UTC
    timestamps need no note.
    """
    columns = []
    for f in schema:
        meta = f.metadata or {}
        if META_VALUE_TYPE in meta:
            held = value_type(meta[META_VALUE_TYPE].decode()).pandas_name
            if held is None:
                continue
            dtype = held
        elif META_COLUMN_TYPE in meta:
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


def parquet_batches(
    file: pq.ParquetFile, columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """A Parquet file's rows, one row group at a time, without reader threads.

    One `iter_batches` over the whole file holds on to buffers across row groups (~60 MB
    more peak RSS reading a million rows back); a reader per row group does not.
    """
    for group in range(file.metadata.num_row_groups):
        yield from file.iter_batches(
            ROW_GROUP_ROWS, row_groups=[group], columns=columns, use_threads=False
        )


# --- CSV ----------------------------------------------------------------------------------

#: First characters that make a spreadsheet run a cell as a formula (OWASP CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: What `excel_safe` guards: those, and the guard itself (a text that starts with ``'`` gets
#: one more), so `undo_excel_safe` can tell a guard from data and the round trip is exact.
_GUARDED = (*FORMULA_STARTS, "'")
#: The same, as a regular expression over a whole cell (Arrow's RE2 syntax).
_GUARDED_START = "^[=+\\-@\t\r']"


def write_csv(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: str | os.PathLike[str],
    *,
    excel_safe: bool = False,
) -> int:
    """Write `batches` to `path` as CSV and return the row count; written aside and
    renamed into place, like Parquet: a failed export leaves the old file."""
    with atomic_path(path) as temp:
        return encode_csv(batches, schema, temp, excel_safe=excel_safe)


def encode_csv(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: str | os.PathLike[str],
    *,
    excel_safe: bool = False,
) -> int:
    """Write `batches` to the file `path` as CSV; the row count. Text cells are quoted, so
    an empty string (``""``) and a null (empty cell) differ. `excel_safe`: text a
    spreadsheet would run as a formula gets a leading ``'`` (`excel_safe_batch`); the
    header too."""
    text_schema = pa.schema([
        f.with_type(_text_type(f.type)).with_name(_safe_name(f.name, excel_safe)) for f in schema
    ])
    rows = 0
    with pacsv.CSVWriter(path, text_schema) as writer:
        for batch in batches:
            text = as_text(conform(batch, schema))
            if excel_safe:
                text = excel_safe_batch(text)
            writer.write_batch(text.rename_columns(text_schema.names))
            rows += batch.num_rows
    return rows


#: "Z" and "" as Arrow scalars taken from an array built from buffers: a Python value
#: handed to a compute function makes pyarrow import pandas (a second and a half of a small
#: CSV export).
_Z, _NOTHING = string_array(["Z", ""])


def as_text(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` ready for a CSV writer: choices as their text, timestamps as ISO 8601 UTC
    text ending in ``Z`` (Arrow's own time-zone-aware formatting is ~30x slower), decimals
    as plain digits (Arrow writes ``0E-9`` for a decimal(38,9) zero)."""
    columns = []
    for column in batch.columns:
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        elif pa.types.is_decimal(column.type):
            column = _decimal_text(column)
        elif pa.types.is_timestamp(column.type) and column.type.tz is not None:
            utc = column.cast(pa.timestamp(column.type.unit)).cast(pa.string())
            column = pc.binary_join_element_wise(utc, _Z, _NOTHING)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _decimal_text(column: pa.Array) -> pa.Array:
    """Decimals as plain digits with their scale's places (``0.000000000``, not ``0E-9``)."""

    text = column.cast(pa.string())
    scientific = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(scientific).as_py():
        return text
    fixed = [format(Decimal(t), "f") for t in text.filter(scientific).to_pylist()]
    return pc.replace_with_mask(text, scientific, string_array(fixed))


def excel_safe(text: str) -> str:
    """`text` as a spreadsheet shows it rather than runs it: a cell starting with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice
    against CSV injection), and so does one starting with ``'`` (which a spreadsheet shows
    as the text after its first ``'``, the cell's own value). Other text is returned as it is."""
    return "'" + text if text.startswith(_GUARDED) else text


def undo_excel_safe(text: str) -> str:
    """`excel_safe` undone: the ``'`` it put before a guarded start is taken off, so a file
    exported with ``--excel-safe`` reads back as the values exported. Nothing else changes:
    a ``'`` before any other character is data."""
    return text[1:] if text.startswith("'") and text[1:].startswith(_GUARDED) else text


def excel_safe_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` with every text cell passed through `excel_safe`, column by column in Arrow
    (choice columns too: their dictionary is rewritten, not each cell). Numbers, dates and
    the rest are left alone: a negative number is data, not a formula."""
    columns = [_safe_column(column) for column in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _safe_column(column: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(column.type) and _is_text(column.type.value_type):
        return pa.DictionaryArray.from_arrays(
            column.indices, _safe_column(column.dictionary), ordered=column.type.ordered
        )
    if not _is_text(column.type):
        return column
    formula = pc.match_substring_regex(column, _GUARDED_START)
    return pc.if_else(formula, pc.binary_join_element_wise("'", column, ""), column)


def _is_text(type_: pa.DataType) -> bool:
    return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_))


def _safe_name(name: str, safe: bool) -> str:
    return excel_safe(name) if safe else name


def _text_type(type_: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(type_):
        return type_.value_type
    if pa.types.is_timestamp(type_) and type_.tz is not None:
        return pa.string()
    return type_
