"""Arrow batches -> one CSV file per table (header row, nulls as empty cells), swapped in."""

from __future__ import annotations

import os
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connector.load.atomic import atomic_path
from connector.load.parquet import conform

__all__ = [
    "FORMULA_STARTS", "as_text", "excel_safe", "excel_safe_batch", "undo_excel_safe", "write_csv",
]

#: First characters that make a spreadsheet run a cell as a formula (OWASP CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: The same, as a regular expression over a whole cell (Arrow's RE2 syntax).
_FORMULA_START = "^[=+\\-@\t\r]"


def write_csv(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    path: str | os.PathLike[str],
    *,
    excel_safe: bool = False,
) -> int:
    """Write `batches` to `path` as CSV and return the row count.

    Written aside and renamed into place, like Parquet: a failed export leaves the old file.
    Text cells are quoted, so an empty string (``""``) and a null (empty cell) differ.
    `excel_safe`: text a spreadsheet would run as a formula gets a leading ``'``
    (`excel_safe_batch`); the header too.
    """
    text_schema = pa.schema([
        f.with_type(_text_type(f.type)).with_name(_safe_name(f.name, excel_safe)) for f in schema
    ])
    rows = 0
    with atomic_path(path) as temp, pacsv.CSVWriter(temp, text_schema) as writer:
        for batch in batches:
            text = as_text(conform(batch, schema))
            if excel_safe:
                text = excel_safe_batch(text)
            writer.write_batch(text.rename_columns(text_schema.names))
            rows += batch.num_rows
    return rows


def as_text(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` ready for a CSV writer: choices as their text, timestamps as ISO 8601 UTC
    text ending in ``Z`` (Arrow's own time-zone-aware formatting is ~30x slower)."""
    columns = []
    for column in batch.columns:
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        elif pa.types.is_timestamp(column.type) and column.type.tz is not None:
            utc = column.cast(pa.timestamp(column.type.unit)).cast(pa.string())
            column = pc.binary_join_element_wise(utc, "Z", "")
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def excel_safe(text: str) -> str:
    """`text` as a spreadsheet shows it rather than runs it: a cell starting with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice
    against CSV injection). Other text is returned as it is."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def undo_excel_safe(text: str) -> str:
    """`excel_safe` undone: the ``'`` it put before a formula start is taken off, so a file
    exported with ``--excel-safe`` reads back as the values exported. Nothing else changes:
    a ``'`` before any other character is data."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_STARTS) else text


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
    formula = pc.match_substring_regex(column, _FORMULA_START)
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
