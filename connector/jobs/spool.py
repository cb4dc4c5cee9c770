"""A table's rows read from the API, kept in a local Arrow file until every destination
has them.

A sync reads a table once and writes it to each of its destinations, each taking the rows
minus the ids it must delete; a database that takes one writer at a time gets them after
the read. The spool holds them on disk (an Arrow IPC file, read back batch by batch), and
their ids as 64-bit hashes (8 bytes a row, `connector.ids`): memory stays flat.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.arrays import newer
from connector.ids import IdSet, hash_ids

__all__ = ["Spool"]

#: Filtered spool batches compacted together (see `Spool.batches`).
_COMPACT = 64


class Spool:
    """Rows read from the API, kept in a local Arrow file so every destination gets them."""

    def __init__(self, path: Path, schema: pa.Schema, id_name: str, updated_name: str) -> None:
        self.path = path
        self.schema = schema
        self.id_name = id_name
        self.updated_name = updated_name
        self.rows = 0
        #: The newest ``updated_at`` spooled.
        self.cursor: str | None = None
        self._hashes: list[np.ndarray[Any, Any]] = []
        self._ids: IdSet | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = pa.ipc.new_file(str(path), schema)

    def extend(self, batches: Iterable[pa.RecordBatch]) -> None:
        assert self._writer is not None
        for batch in batches:
            if not batch.num_rows:
                continue
            self._writer.write_batch(batch)
            self.rows += batch.num_rows
            self._hashes.append(hash_ids(batch.column(self.id_name)))
            self._ids = None
            self.cursor = newer(self.cursor, batch.column(self.updated_name))

    def ids(self) -> IdSet:
        """The ids spooled."""
        if self._ids is None:
            self._ids = IdSet.of_hashes(self._hashes)
            self._hashes = [self._ids.hashes]
        return self._ids

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def batches(
        self, *, exclude: pa.Array | None = None, only: pa.Array | None = None,
        columns: list[str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The spooled rows (`columns` of them), without the ids in `exclude`, or just those
        in `only`.

        Filtered batches are gathered and compacted every `_COMPACT` batches: a few rows
        filtered out of a batch read from the spool still share its dictionaries, which keep
        the whole batch's memory alive while a writer waits to fill a row group.
        """
        filtered: list[pa.RecordBatch] = []
        # Read, not memory-mapped: mapped pages of a large spool would count as resident.
        with pa.OSFile(str(self.path)) as source:
            # Only the columns asked for are read from the file: the others' buffers would
            # be read, then freed, and kept by the allocator.
            wanted = None if columns is None else [self.schema.get_field_index(c) for c in columns]
            reader = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=wanted))
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                if columns is not None:
                    batch = batch.select(columns)
                rows = batch.num_rows
                if exclude is not None and len(exclude):
                    batch = batch.filter(pc.invert(pc.is_in(batch.column(self.id_name), exclude)))
                if only is not None:
                    batch = batch.filter(pc.is_in(batch.column(self.id_name), only))  # few
                if batch.num_rows == rows:
                    yield batch
                elif batch.num_rows:
                    filtered.append(batch)
                    if len(filtered) >= _COMPACT:
                        yield from _compacted(filtered)
                        filtered = []
        yield from _compacted(filtered)


def _compacted(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if batches:
        yield from pa.Table.from_batches(batches).combine_chunks().to_batches()
