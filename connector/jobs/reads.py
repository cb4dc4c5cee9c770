"""How a sync reads one table: every read goes through the one page reader
(`connector.extract.Extraction`: overlap-checked, resuming after a shift), so no row that
exists throughout a read is missed.

- full: every row matching the job's filter;
- incremental: rows with ``updated_at`` > L, the read's lower bound. L is the last run's
  cursor moved back by the lookback window (``[sync] lookback``), and no further than the
  window needs (below). The next cursor S is the newest ``updated_at`` asked *before* the
  read (one row, sorted by ``updated_at`` descending): a row changed during the read gets a
  later timestamp, so the next run reads it again;
- sorted fallback, where a server refuses filters on ``updated_at``: every matching row is
  read, the rows newer than L are kept, and the ids of all of them serve as the id pass.
  S is asked first as above (a sort, not a filter); where the sort is refused too, the
  newest row read stands in and a note says so;
- the id pass: ids only (``columns=[]``), in pages of 1000.

**The lookback window.** A write stamped T but visible to readers only later (a slow
transaction, a lagging replica, a server that stamps on arrival and commits later) is not
seen by a read that ran in between; if T is at or before that run's cursor, a read from the
cursor never sees it. So every incremental read also reads the rows stamped within
`lookback` before the cursor. The rule is correct for writes that become visible within
`lookback` of their stamp. The window is also cut short once it is settled: the answer to S
carries the server's clock W (its ``Date``), and every write stamped at or before
W - lookback was visible when that read began, so it was read then or by an earlier run.
The state keeps that bound (``settled``), and the next read starts at
L = min(cursor, settled): a table that stayed quiet for longer than the window reads nothing
again. A row the window reads again unchanged (the destination holds its id with the same
``updated_at``) is neither rewritten nor counted as written; one that changed is a late
write, written and counted (``late_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.api import MAX_PAGE_SIZE, Client
from connector.api.paging import shadowed
from connector.errors import ApiValidationError, BadRequest
from connector.extract import Extraction
from connector.ids import IdSet, hash_ids
from connector.jobs.spool import Spool
from connector.jobs.stamps import iso, parse
from connector.progress import Progress
from connector.schema import Table

__all__ = ["ChangeRead", "TableReads", "counted", "lower_bound"]


@dataclass(frozen=True)
class ChangeRead:
    """What an incremental read found out besides its rows."""

    #: The next cursor (S, or the last one when nothing is newer).
    cursor: str
    #: S, from which the count check re-reads ids (None: the fallback read every id,
    #: `present` then holds them).
    since: str | None
    present: IdSet | None
    #: Every write stamped at or before it has been read (see the module docstring).
    settled: str | None


def lower_bound(cursor: str, settled: str | None, lookback: float) -> str:
    """L, where an incremental read starts: the cursor moved back by `lookback` seconds, and
    no further back than `settled`."""
    if lookback <= 0:
        return cursor
    back = iso(parse(cursor) - timedelta(seconds=lookback))
    if settled is None:
        return back
    return min(cursor, max(back, settled))


class TableReads:
    """The reads of one table, every one through the one page reader."""

    def __init__(
        self,
        client: Client,
        table: Table,
        filter: Mapping[str, Any],
        page_size: int,
        lookback: float,
        note: Callable[[str], None],
    ) -> None:
        self.client = client
        self.table = table
        self.filter = dict(filter)
        self.page_size = page_size
        self.lookback = lookback
        self.note = note
        self.updated_name = table.system_names()["updated_at"]
        #: A user column shadows ``updated_at``: the API would sort and filter by it, so
        #: every incremental read reads every row and keeps the changed ones itself.
        self.shadowed = shadowed(table, "updated_at")

    def rows(
        self,
        filter: Mapping[str, Any] | None = None,
        *,
        columns: Sequence[str] | None = None,
        page_size: int | None = None,
    ) -> Extraction:
        return Extraction(
            self.client,
            self.table,
            columns=columns,
            filter=(self.filter if filter is None else filter) or None,
            page_size=page_size or self.page_size,
        )

    def ids(self, filter: Mapping[str, Any] | None = None) -> IdSet:
        """The id pass: ids only, through the one reader, from the largest pages the API gives."""
        return IdSet.of(b.column(0) for b in self.rows(filter, columns=[], page_size=MAX_PAGE_SIZE))

    def count(self) -> int | None:
        """The server's count of the rows matching the job's filter (None: it does not say)."""
        return self.client.list_rows(self.table.id, limit=1, filter=self.filter or None).total

    def newest(self, filter: Mapping[str, Any]) -> tuple[str | None, datetime | None]:
        """The newest ``updated_at`` among matching rows, asked *before* reading them, and
        the server's clock when it answered.

        It becomes the next cursor: a row changed while the read runs gets a later
        timestamp, so the next run reads it again, whether or not this run saw the change.
        """
        if self.shadowed:  # sorting would sort by the user's column: only the clock
            page = self.client.list_rows(self.table.id, limit=1, filter=filter or None)
            return None, page.served_at
        page = self.client.list_rows(
            self.table.id, limit=1, sort="updated_at", order="desc", filter=filter or None
        )
        return (page.rows[0].updated_at if page.rows else None), page.served_at

    def newest_or_none(self, filter: Mapping[str, Any]) -> tuple[str | None, datetime | None]:
        """`newest`, or (None, None) where the server will not sort by ``updated_at``."""
        try:
            return self.newest(filter)
        except (BadRequest, ApiValidationError):
            return None, None

    def settled(self, served_at: datetime | None) -> str | None:
        """The bound of the window the next run still needs (see the module docstring)."""
        if served_at is None:
            return None
        # The Date header has whole seconds: the clock may be up to a second later.
        return iso(served_at - timedelta(seconds=self.lookback))

    def changes(
        self, cursor: str, settled: str | None, spool: Spool, bar: Progress | None
    ) -> ChangeRead:
        """Spool the rows changed since L (`lower_bound`)."""
        since = lower_bound(cursor, settled, self.lookback)
        if self.shadowed:
            return self._everything_keep_newer(cursor, since, spool, bar)
        changed = {**self.filter, "updated_at": {"gt": since}}
        try:
            newest, served_at = self.newest(changed)
        except (BadRequest, ApiValidationError) as exc:
            if exc.field not in (None, "filter", "sort", "updated_at"):
                raise
            return self._everything_keep_newer(cursor, since, spool, bar)
        if newest is not None:
            spool.extend(counted(self.rows(changed), bar))
        top = max(newest or cursor, cursor)
        return ChangeRead(top, top, None, self.settled(served_at))

    def _everything_keep_newer(
        self, cursor: str, since: str, spool: Spool, bar: Progress | None
    ) -> ChangeRead:
        """The sorted fallback: every matching row through the reader; those newer than L
        are spooled, and every id read is the id pass."""
        if self.shadowed:
            self.note("a column called 'updated_at' hides the system field from the API's "
                      "filters: every row read, the changed ones kept")
        else:
            self.note("updated_at filter refused: every row read, the changed ones kept")
        newest, served_at = self.newest_or_none(self.filter)
        if newest is None and not self.shadowed:
            self.note(
                "sorting by updated_at refused too: the next cursor is the newest row read, "
                "so a change made during this read may wait for a --verify"
            )
        schema_type = self.rows().schema.field(self.updated_name).type
        after = pa.scalar(parse(since), schema_type)
        ids: list[np.ndarray[Any, Any]] = []

        def newer(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                ids.append(hash_ids(batch.column(0)))
                updated = batch.column(self.updated_name)
                yield batch.filter(pc.fill_null(pc.greater(updated, after), False))

        spool.extend(newer(counted(self.rows(), bar)))
        top = max(newest or spool.cursor or cursor, cursor)
        return ChangeRead(top, None, IdSet.of_hashes(ids), self.settled(served_at))


def counted(batches: Iterable[pa.RecordBatch], bar: Progress | None) -> Iterator[pa.RecordBatch]:
    """Batches passed on, each counted on `bar`; a stop asked for is raised between them."""
    from connector.process import raise_if_stopped

    for batch in batches:
        raise_if_stopped()  # a table thread sees a stop at its next batch
        if bar is not None:
            bar.update(batch.num_rows)
        yield batch
