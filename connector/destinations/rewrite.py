"""Rewriting a table whole: the rows it keeps from its old version, then the new ones.

Files, Delta tables rebuilt after a column change and Iceberg tables are written this way:
the old rows stream through `KeptRows` (renamed and converted to the current columns, minus
the rows that come anew and the deleted ones, or with those stamped) into the new version,
followed by the change's rows. One pass, nothing held but a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.arrays import arrow_mask, stamp_scalar
from connector.destinations.arrow import conform
from connector.destinations.base import MARK_TYPE, TableChange, Target
from connector.destinations.evolve import rename_fields, renames
from connector.ids import IdSet, hash_ids

__all__ = ["CountingRows", "KeptRows"]


class CountingRows:
    """Batches passed through, their rows counted."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self.batches = batches
        self.count = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self.batches:
            self.count += batch.num_rows
            yield batch


class KeptRows:
    """The held table's rows that stay, made to fit its current schema (renamed, converted):
    for a merge all but the rows that come anew and (unless marked) the deleted ones; for an
    append, all. Deleted rows are stamped with a mark when the change marks them.

    `read_old(columns)` reads the held rows, marked ones included (None: every column).
    """

    def __init__(
        self,
        read_old: Callable[[list[str] | None], Iterable[pa.RecordBatch]],
        target: Target,
        change: TableChange,
        schema: pa.Schema,
    ) -> None:
        self.read_old = read_old
        self.target = target
        if change.mode == "merge" and change.ids is None:
            # which held rows come anew must be known before they stream: gather the ids
            # (the rows then held in memory; the runner gives them, so its merges stream)
            rows = list(change.rows)
            change = replace(change, rows=rows, ids=IdSet.of(b.column(target.id_name) for b in rows))
        self.change = change
        self.schema = schema
        self.deleted = 0
        self.held = IdSet()  # an append's: the ids the file holds
        self._renames = renames(change.evolve)

    def new_rows(self) -> Iterator[pa.RecordBatch]:
        """The change's rows an append adds (ids the file does not hold yet); a merge's all."""
        rows = self.change.rows
        if self.change.mode != "append":
            yield from rows
            return
        id_name = self.target.id_name
        old_id = next((o for o, n in self._renames.items() if n == id_name), id_name)
        self.held = IdSet.of(b.column(0) for b in self.read_old([old_id]))
        for batch in rows:
            yield batch.filter(arrow_mask(~self.held.contains(batch.column(id_name))))

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        change, id_name = self.change, self.target.id_name
        merging = change.mode == "merge"
        coming = change.ids or IdSet()
        gone = IdSet.of([change.deleted]) if merging and len(change.deleted) else IdSet()
        now = stamp_scalar(datetime.now(UTC), MARK_TYPE)
        for batch in self.read_old(None):
            batch = conform(rename_fields(batch, self._renames), self.schema)
            if not merging:
                yield batch
                continue
            hashes = hash_ids(batch.column(id_name))
            is_gone = gone.contains_hashes(hashes)
            keep = ~coming.contains_hashes(hashes)
            if not change.mark:
                self.deleted += int((is_gone & keep).sum())
                keep &= ~is_gone
            batch = batch.filter(arrow_mask(keep))
            if change.mark and is_gone.any():
                batch = self._stamped(batch, is_gone[keep], now)
            yield batch

    def _stamped(
        self, batch: pa.RecordBatch, fresh: np.ndarray, now: pa.Scalar  # type: ignore[type-arg]
    ) -> pa.RecordBatch:
        """`batch` with the mark set to `now` on the `fresh`ly deleted rows not stamped yet."""
        mark = self.target.deleted_field
        stamps = batch.column(mark.name)
        newly = pc.and_(arrow_mask(fresh), pc.is_null(stamps))
        self.deleted += pc.sum(newly.cast(pa.int64())).as_py() or 0
        index = batch.schema.get_field_index(mark.name)
        return batch.set_column(index, mark, pc.if_else(newly, now, stamps))
