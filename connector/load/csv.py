"""Arrow batches -> one CSV file per table (header row, nulls as empty cells), swapped in."""

from __future__ import annotations

import os
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.csv as pacsv

from connector.load.atomic import atomic_path
from connector.load.parquet import conform

__all__ = ["plain_schema", "write_csv"]


def write_csv(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, path: str | os.PathLike[str]
) -> int:
    """Write `batches` to `path` as CSV and return the row count.

    Written aside and renamed into place, like Parquet: a failed export leaves the old file.
    Text cells are quoted, so an empty string (``""``) and a null (empty cell) differ.
    """
    schema = plain_schema(schema)
    rows = 0
    with atomic_path(path) as temp, pacsv.CSVWriter(temp, schema) as writer:
        for batch in batches:
            writer.write_batch(conform(batch, schema))
            rows += batch.num_rows
    return rows


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with dictionary (choice) columns as their plain value type, for text formats."""
    return pa.schema(
        [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
        metadata=schema.metadata,
    )
