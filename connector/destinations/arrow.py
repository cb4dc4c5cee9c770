"""Batches made to fit a schema exactly: the one place rows meet the columns they go into.

Every destination writes through `conform`: rows read from the API, rows held from an older
version of the table (a column added, dropped or retyped since), rows of a spool. Missing
columns become nulls, extra ones are left out, other types are converted by the shared rules
of `connector.destinations.evolve.convert`, and choices are re-encoded so their dictionary is
the column's options (then any other value), which pandas reads as a categorical.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from connector.arrays import string_array
from connector.destinations.evolve import convert
from connector.schema import META_OPTIONS

__all__ = ["conform", "plain_type"]


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s fields: converted where types differ, nulls where
    missing (a column added since), columns `schema` lacks left out (one dropped)."""
    names = set(batch.schema.names)
    columns = []
    for f in schema:
        column = batch.column(f.name) if f.name in names else pa.nulls(batch.num_rows, f.type)
        if META_OPTIONS in (f.metadata or {}) and pa.types.is_dictionary(f.type):
            if not _is_text(column.type) and not pa.types.is_dictionary(column.type):
                column = convert(column, pa.string())
            column = _encode_choice(column, json.loads(f.metadata[META_OPTIONS]), f.type)
        elif column.type != f.type:
            column = _cast(column, f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def plain_type(type_: pa.DataType) -> pa.DataType:
    """A type as a table stores it when it has no dictionaries: choices as their text."""
    if pa.types.is_dictionary(type_):
        return type_.value_type
    if pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
        return pa.string()
    return type_


def _cast(column: pa.Array, to: pa.DataType) -> pa.Array:
    """Same kind of value (a wider string, a zone-less timestamp): a cast; another kind
    (a column retyped upstream): the shared conversion rules."""
    if plain_type(column.type) == plain_type(to) or (
        pa.types.is_timestamp(column.type) and pa.types.is_timestamp(to)
    ):
        return column.cast(to)
    return convert(column, to)


def _is_text(type_: pa.DataType) -> bool:
    return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_))


def _encode_choice(column: pa.Array, options: list[str], type_: pa.DataType) -> pa.Array:
    dictionary = string_array(options)  # not pa.array: that would import pandas
    if isinstance(column, pa.DictionaryArray) and column.dictionary.equals(dictionary):
        return column.cast(type_) if column.type != type_ else column
    values = column.cast(pa.string())
    unexpected = pc.unique(values.filter(pc.invert(pc.is_in(values, dictionary)))).drop_null()
    dictionary = pa.concat_arrays([dictionary, unexpected])
    indices = pc.index_in(values, dictionary).cast(type_.index_type)
    return pa.DictionaryArray.from_arrays(indices, dictionary)
