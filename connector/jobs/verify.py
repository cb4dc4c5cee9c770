"""``--verify``: every row compared with each destination by a hash of its cells.

Upstream rows are read in full (through the one reader) into the spool; each row's id and
a hash of its cells are kept (16 bytes a row, sorted by id hash). Each merging destination's
live rows are scanned the same way and compared: rows missing or with other cells are
rewritten, rows the server does not have are deleted (or marked). A hash is Python's `hash`
of the row's cells normalised (`_norm`), so a value reads the same whatever type a
destination gave it on the way back (SQLite's naive timestamps, DuckDB's dates).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from connector.arrays import arrow_ints, arrow_mask, concat_ids, no_ids, string_array
from connector.ids import IdSet, hash_ids
from connector.jobs.spool import Spool
from connector.stamps import micros_of

__all__ = ["Digest", "batch_digest"]


def _norm(value: Any) -> Any:
    """A cell as one comparable value, however the destination typed it on the way back."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, float):
        return None if value != value else value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, datetime):
        return micros_of(value)  # SQLite hands back UTC timestamps without a zone
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def digest(ids: Sequence[str], columns: Sequence[Sequence[Any]]) -> pa.Table:
    """``id`` and ``hash`` of rows given column by column (id first, excluded from the hash).

    Python's `hash` of the normalised cells: salted per process, which is fine: both sides
    of a comparison are hashed by the same process.
    """
    rows = zip(*columns, strict=True) if columns else ((),) * len(ids)
    hashes = np.fromiter((hash(tuple(map(_norm, row))) for row in rows), np.int64, len(ids))
    return pa.table({"id": string_array(list(ids)), "hash": arrow_ints(hashes)})


def batch_digest(batch: pa.RecordBatch, names: Sequence[str]) -> pa.Table:
    """`digest` of a record batch's rows over the fields `names` (the first: the id)."""
    present = set(batch.schema.names)
    columns = [
        _plain(batch.column(n)).to_pylist() if n in present else [None] * batch.num_rows
        for n in names[1:]
    ]
    return digest(batch.column(names[0]).to_pylist(), columns)


def _plain(column: pa.Array) -> pa.Array:
    """A column whose Python values `_norm` turns into what it makes of a database's: UTC
    timestamps as microseconds (converting zone-aware ones to Python would import pandas),
    dates as ISO text, choices as their text."""
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("us")).cast(pa.int64())
    if pa.types.is_date(column.type) or pa.types.is_dictionary(column.type):
        return column.cast(pa.string())
    return column


class Digest:
    """Every upstream row's id hash and cell hash, sorted by id hash (16 bytes a row)."""

    def __init__(self, pairs: np.ndarray[Any, Any]) -> None:
        pairs.sort(order="id")  # in place
        self.ids: np.ndarray[Any, Any] = np.ascontiguousarray(pairs["id"])
        self.cells: np.ndarray[Any, Any] = np.ascontiguousarray(pairs["cells"])

    @classmethod
    def of(cls, digests: Iterable[pa.Table], rows: int) -> Digest:
        """From the digests of `rows` rows, filled into one array as they come."""
        pairs = np.empty(rows, dtype=[("id", np.int64), ("cells", np.int64)])
        at = 0
        for d in digests:
            n = d.num_rows
            pairs["id"][at : at + n] = hash_ids(d.column("id"))
            pairs["cells"][at : at + n] = d.column("hash").to_numpy()
            at += n
        return cls(pairs[:at])

    def compare(
        self, held: Iterable[pa.Table], spool: Spool
    ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """Ids missing from `held` (a destination's digest, streamed), held with other
        cells, and held but not upstream."""
        seen = np.zeros(len(self.ids), np.bool_)
        different: list[pa.Array] = []
        extra: list[pa.Array] = []
        for chunk in held:
            ids = chunk.column("id").combine_chunks()
            hashes = hash_ids(ids)
            at = np.searchsorted(self.ids, hashes)
            at[at == len(self.ids)] = 0
            found = self.ids[at] == hashes if len(self.ids) else np.zeros(len(ids), np.bool_)
            seen[at[found]] = True
            cells = chunk.column("hash").to_numpy()
            changed = found.copy()
            changed[found] = self.cells[at[found]] != cells[found]
            extra.append(ids.filter(arrow_mask(~found)))
            different.append(ids.filter(arrow_mask(changed)))
        lost = IdSet(self.ids[~seen])
        missing = concat_ids(
            b.column(0).filter(arrow_mask(lost.contains(b.column(0)))) for b in spool.batches()
        ) if len(lost) else no_ids()
        return missing, concat_ids(different), concat_ids(extra)

