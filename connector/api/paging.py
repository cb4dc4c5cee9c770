"""The one page reader: every read of a table's rows goes through `PageReader`.

Export, load, `Workspace.read`, push's live read and every read of a sync (full, incremental,
the id pass) page through here: in an explicit, stable order (by the system ``created_at``
ascending; by ``id`` when a user column is called ``created_at``; by ``updated_at`` when both
are taken; else the server's default order), stepping by the limit the server applied to
each page. Any page may apply a smaller limit than asked, and than the page before it (the
reference server cuts a page by size, --max-response-bytes, to as few as two rows, and
reports how many in `limit`): a page's successor starts at its own offset plus its own
limit less the overlap, and a page with fewer rows than its own limit ends the read. The
pages after the first are fetched concurrently (as many in flight as the client's adaptive
limit allows, `connector.api.concurrency`, or a read's own `concurrency`) at offsets
predicted from the latest applied limit, and handed over in order; a page that comes back
with a smaller limit leaves a hole before the one planned after it, fetched first. The
reader asks for two rows at least (one row cannot overlap the next page); a server that
still answers a full page of one row cannot be read with an edge check, and is refused.
Naive offset stepping skips a row for every row deleted before the offset; it is never
used, least of all to decide a deletion.

Consistency while others write. Consecutive pages overlap: page k starts at the offset of
one of page k-1's last rows. By ``created_at``, rows are only ever appended at the end (a
new row has the newest timestamp; updates do not move a row), so a delete before an edge
shifts later rows left, and the row emitted last is then not where it was (by ``id``, a new
row may also shift rows right; the check sees that too). Each page continues after the row
emitted last that it holds (the anchor): every row after the anchor when the page was read
is in it, so nothing is skipped. A page that holds no row emitted lately is repaired where
it stands, while the pages after it go on loading: windows read around the offset where the
last row was, stepping back until one holds it (or another row emitted lately), then forward
until the waiting page joins on; after a repair the overlap grows (up to half a page), so a
table under steady change needs few repairs. Only if every row emitted lately has vanished
does the read resume by key, where the server accepts filters on the order key (checked
once): by ``created_at``, first ``created_at == t and id > last id`` (the rest of its
timestamp), then ``created_at > t``; by ``id``, ``id > last id``; on other servers it reads
again from the start and drops every id already emitted. `MAX_RESUMES` repairs in a row
that read no new row end the read; repairs that move it on are not counted.

No id is emitted twice: rows found after an anchor are dropped when emitted lately (the last
two pages' worth, at least `MIN_RECENT`); every row emitted before those sorts before them.
Rows come in the read's order: a page read before a later one was emitted may still hold a
row deleted since, after its anchor; one sorting before the row emitted last is passed over.
Every page is checked to really come in the order asked (its system key non-decreasing). A
server that does not honour the sort (or one where no key is free) is read in its default
order, by offset, and every id already emitted is dropped. For that, emitted ids are
remembered as 64-bit hashes (8 bytes a row in an array; a set of them once in that mode, or
from the start when reading by ``updated_at``); two ids sharing a hash would drop the
second, never repeat it.

The read ends on a short or empty page (or repair window) that continues it, never on the
total alone (the total is unreliable under a filter): every row after its anchor when it was
read is in it, so no row that existed throughout the read comes later.
"""

from __future__ import annotations

import asyncio
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import chain, compress
from typing import Any

from connector.api.ahead import AHEAD, Cells, Page, PagesAhead, split_rows
from connector.api.core import AsyncClient
from connector.errors import ApiValidationError, BadRequest, ExtractionError
from connector.schema import Table

__all__ = [
    "AHEAD",
    "MAX_RESUMES",
    "MAX_SEARCH_WINDOWS",
    "MIN_RECENT",
    "ORDER_KEYS",
    "PACED_AHEAD",
    "Cells",
    "ExtractionError",
    "PageReader",
    "order_key",
    "shadowed",
    "split_rows",
]

#: Seconds of pages at the rate limiter's pace that may wait for an earlier one (a 429's
#: Retry-After is usually a second; the server's bucket keeps no more for a read that stalls).
PACED_AHEAD = 1.5
#: A read that had to repair this many shifts in a row without reading a new row gives up
#: (the table changes faster than we read). Repairs that move the read on are not counted.
MAX_RESUMES = 1000
#: Windows searched backwards for the rows emitted last when repairing a shift.
MAX_SEARCH_WINDOWS = 20
#: Ids emitted lately that a repair may find again: at least two pages, and at least this many.
MIN_RECENT = 64
#: Order keys in preference: system fields new rows cannot enter in the middle of (creation
#: time), that filters resume after exactly (ids), or where rows only move to the end (last
#: update). The first a user column does not shadow is used; none: the server's default order.
ORDER_KEYS = ("created_at", "id", "updated_at")
#: Which of a page's cell columns (id, created_at, updated_at first) holds each order key.
_KEY_CELLS = {"id": 0, "created_at": 1, "updated_at": 2}



def shadowed(table: Table, field: str) -> bool:
    """Whether a user column shadows the system field `field` in the API's ``sort`` and
    ``filter`` (compared case-insensitively, as a server may match names): asking for it
    would then sort or filter by the user's column."""
    return field.lower() in {name.lower() for name in table.column_names}


def order_key(table: Table) -> str | None:
    """The first of `ORDER_KEYS` no user column shadows, or None: read in the server's
    default order."""
    return next((key for key in ORDER_KEYS if not shadowed(table, key)), None)


class _Unordered(Exception):
    """A page did not come in the order asked: the server does not honour the sort."""


def _ascending(values: list[Any]) -> bool:
    try:
        return sorted(values) == values  # linear on sorted input, and in C
    except TypeError:  # a missing (None) key: the order cannot be checked, so it is not trusted
        return False


@dataclass(frozen=True)
class _Edge:
    """The last row emitted when the read lost its place: where a keyed resume goes on from."""

    row_id: str
    created_at: str | None


class _Recent:
    """The ids emitted lately, in the order emitted (the read's order): anchors to find the
    read's place again after a shift, and ids not to emit twice.

    Keeps at least `keep` ids (whole emissions); everything emitted before them sorts before
    them, so a row found after an anchor is new unless it is one of these.
    """

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._chunks: deque[list[str]] = deque()
        self._count = 0
        self.ids: set[str] = set()
        self.last: str | None = None
        self.last_created_at: str | None = None

    def add(self, ids: list[str], last_created_at: str | None) -> None:
        self._chunks.append(ids)
        self.ids.update(ids)
        self._count += len(ids)
        self.last, self.last_created_at = ids[-1], last_created_at
        while self._count - len(self._chunks[0]) >= self._keep:
            old = self._chunks.popleft()
            self._count -= len(old)
            self.ids.difference_update(old)

    def anchor(self, ids: list[str]) -> int | None:
        """The index in `ids` of the row emitted last of those there, or None."""
        if self.last is None:
            return None
        try:
            return ids.index(self.last)  # the usual case: the overlap row, near the start
        except ValueError:
            pass
        if self.ids.isdisjoint(ids):
            return None
        rank = {row_id: i for i, row_id in enumerate(chain.from_iterable(self._chunks))}
        return max((rank[row_id], i) for i, row_id in enumerate(ids) if row_id in rank)[1]


class _Took(Enum):
    """What a snapshot (a page or a repair window) did for the read."""

    JOINED = "joined"  # it continued where the read stood
    BEHIND = "behind"  # its rows after the read's place were all emitted already: dropped
    MISSED = "missed"  # no row emitted lately is in it: a shift opened a gap before it
    DONE = "done"  # it continued the read to the end of the table


class PageReader:
    """Reads pages concurrently, checks every page edge, repairs a shift where it happened."""

    def __init__(
        self,
        client: AsyncClient,
        table: Table,
        *,
        fields: Sequence[str],
        filter: Mapping[str, Mapping[str, Any]],
        page_size: int,
        concurrency: int | None,
        emit: Callable[[Cells], Awaitable[None]],
    ) -> None:
        self._client = client
        self._table = table
        self._filter = dict(filter)
        self._page_size = page_size
        self._concurrency = concurrency
        self._emit = emit
        self._names = list(fields)
        self._key = order_key(table)
        # None: not yet known. By updated_at, ties would need the (shadowed) id: by offset.
        self._by_key: bool | None = None if self._key in ("created_at", "id") else False
        #: Hashes of the ids emitted so far (64-bit, 8 bytes a row), for the fallback below.
        self._emitted: array[int] = array("q")
        #: Once reading in the server's default order: every id hash emitted, dropped on sight.
        self._seen: set[int] | None = None if self._key in ("created_at", "id") else set()
        self._recent = _Recent(2 * max(page_size, MIN_RECENT))
        #: Where the last row emitted was (its offset when last read): where a repair looks.
        self._place = 0
        #: Repairs in a row that emitted nothing new; `MAX_RESUMES` of them end the read.
        self._idle = 0
        self.resumes = 0

    def window(self) -> int:
        """Pages to keep in flight: the read's own cap, else what the client allows now."""
        return self._concurrency or self._client.concurrency.level

    def paced_ahead(self) -> int:
        """Pages a paced read may hold ahead of an earlier one: a `PACED_AHEAD` seconds' worth
        at the pace, so a page stalled by a 429's Retry-After does not stall the read."""
        rate = self._client.limiter.rate
        return int(rate * PACED_AHEAD) if rate is not None else 0

    async def read(self) -> None:
        try:
            await self._read()
        except _Unordered:
            # Pages already emitted came in an order we could not trust: read everything again
            # in the server's default order and drop each id emitted before.
            self._key, self._by_key = None, False
            self._start_over()
            await self._read()

    async def _read(self) -> None:
        edge = await self._pass(self._filter)
        while edge is not None:
            self._count_repair()
            if await self._keys_work(edge):
                edge = await self._resume_by_key(edge)
            else:
                # Nowhere to resume from: read again from the start, dropping every id emitted.
                self._start_over()
                edge = await self._pass(self._filter)

    def _start_over(self) -> None:
        """Before a pass from the start: every id emitted is dropped on sight, and the anchors
        begin afresh. The abandoned pass's rows lie after the new pass's place; taken as emitted
        lately they would read as the new pass's own, and a repair among them circles."""
        self._seen = (self._seen or set()).union(self._emitted)
        del self._emitted[:]
        self._recent = _Recent(2 * max(self._page_size, MIN_RECENT))

    def _count_repair(self) -> None:
        self.resumes += 1
        self._idle += 1
        if self._idle > MAX_RESUMES:
            raise ExtractionError(
                f"table {self._table.name!r} changed faster than it could be read; try again"
            )

    async def fetch(
        self, filter: Mapping[str, Mapping[str, Any]], offset: int, limit: int
    ) -> Page:
        key = self._key
        page = await self._client.list_rows(
            self._table.id,
            limit=limit,
            offset=offset,
            sort=key,
            order="asc" if key else None,
            filter=filter,
        )
        if limit >= 2 and page.limit < 2 and len(page.raw) >= page.limit:
            # A full page of one row (or none) cannot overlap the next: the read cannot go on.
            raise ExtractionError(f"the server applied a page limit of {page.limit}; need at least 2")
        rows = page.raw
        cells = split_rows(rows, self._names)
        if not (key is None or _ascending(cells[_KEY_CELLS[key]])):
            raise _Unordered
        return Page(
            ids=cells[0],
            cells=cells,
            limit=page.limit,
            total=page.total,
        )

    async def _pass(self, filter: Mapping[str, Mapping[str, Any]]) -> _Edge | None:
        """Reads from offset 0 of `filter` to the end; an edge if the read lost its place.

        Each page should begin with the last rows of the page before it: a page's successor
        starts at its own offset plus its own applied limit less the overlap. Pages ahead are
        fetched at offsets predicted from the latest applied limit; when a page comes back
        with a smaller one (a server cutting a page by size), the gap after it is a hole,
        fetched first (`connector.api.ahead.PagesAhead`). A page that does not continue the read is repaired on the
        spot (`_repair`) while the pages after it go on loading; the overlap then grows, up to
        half a page, so a table under steady change needs few repairs.
        """
        ask = max(2, self._page_size)  # one row cannot overlap: ask for two at least
        first = await self.fetch(filter, 0, ask)
        await self._emit_from(first, 0, 0)
        if len(first.ids) < first.limit:
            return None
        plan = PagesAhead(self, filter, ask, first.limit, first.total)
        plan.taken(0, first)
        try:
            while True:
                plan.schedule()
                offset, head = plan.pending[0]
                if not head.done():
                    await asyncio.wait(
                        [task for _, task in plan.pending if not task.done()],
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    continue
                plan.pending.popleft()
                page = head.result()
                took = await self._take(page, offset)
                if took is _Took.MISSED:
                    plan.overlap = min(max(1, plan.stride // 2), plan.overlap * 2)
                    repaired = await self._repair(filter, ask, plan.stride, page, offset)
                    if isinstance(repaired, _Edge):
                        return repaired
                    took = repaired
                if took is _Took.DONE:
                    return None
                plan.taken(offset, page)
        finally:
            await plan.cancel()

    async def _take(self, page: Page, offset: int) -> _Took:
        """Emits what `page` (read at `offset`) adds after the row emitted last of those in it."""
        at = self._recent.anchor(page.ids)
        if at is None:
            return _Took.MISSED
        at_last = page.ids[at] == self._recent.last
        emitted = await self._emit_from(page, at + 1, offset)
        if len(page.ids) < page.limit:
            # Every row after the anchor when the page was read is in it: nothing that existed
            # throughout the read comes after it.
            return _Took.DONE
        if emitted:
            return _Took.JOINED
        if at_last:
            self._place = offset + at
            return _Took.JOINED
        return _Took.BEHIND

    async def _repair(
        self, filter: Mapping[str, Mapping[str, Any]], ask: int, stride: int, page: Page, offset: int
    ) -> _Took | _Edge:
        """Fills the gap a shift opened before `page`: windows around where the last row was
        read, stepping back until one holds a row emitted lately, then forward until `page`
        joins on (or is passed). Each window is one consistent read, so the rows after the
        anchor in it are all the rows that followed it then. Every window steps by its own
        applied limit (a server may cut any of them short); a window stepped back to and cut
        shorter than the step leaves rows above it unseen, which are read before going on
        back."""
        self._count_repair()
        start = max(0, self._place + 1 - stride // 2)
        back = 0
        #: Searching back: every row from `seen` up to the first window missed was in a
        #: window, and `lowest` is where the lowest window began (None: nothing missed yet).
        seen = lowest = None
        while True:
            window = await self.fetch(filter, start, ask)
            at = self._recent.anchor(window.ids)
            if at is None:
                lowest = start if lowest is None else min(lowest, start)
                if seen is None or start + window.limit > seen:
                    seen = lowest  # the windows from the lowest up are contiguous
                if seen == 0 or back >= MAX_SEARCH_WINDOWS:
                    last = self._recent.last
                    assert last is not None  # the first page of a pass emits or ends the pass
                    return _Edge(last, self._recent.last_created_at)
                back += 1
                if seen == lowest:  # back by a window's worth
                    start = max(0, lowest - max(1, window.limit - 1))
                else:  # cut shorter than the step back: the rows above it, up to `seen`
                    start += max(1, window.limit - 1)
                continue
            back, seen, lowest = 0, None, None
            at_last = window.ids[at] == self._recent.last
            moved = await self._emit_from(window, at + 1, start)
            if not moved:
                self._count_repair()
                if at_last:
                    self._place = start + at
            if len(window.ids) < window.limit:
                return _Took.DONE
            took = await self._take(page, offset)
            if took is not _Took.MISSED:
                return took
            if self._place >= offset + len(page.ids):
                return _Took.BEHIND  # read past where the page was: nothing of it is missing
            if moved or at_last:
                # Around the read's place again; a window cut short starts at the place itself.
                start = max(0, self._place + 1 - max(1, min(stride, window.limit) // 2))
            else:
                # The window ended before the row emitted last: on from its last row.
                start += max(1, window.limit - 1)

    async def _emit_from(self, page: Page, start: int, offset: int) -> int:
        """Emits the page's rows from index `start` on that were not emitted before.

        Returns how many rows the read moved past: rows not emitted lately (in the server's
        default order some of them may still be dropped as emitted long ago). `offset` is
        where the page was read: the last of those rows becomes the read's place.
        """
        start = max(start, self._behind(page))
        cells = [column[start:] for column in page.cells] if start else page.cells
        ids = cells[0]
        if not ids:
            return 0
        recent = self._recent.ids
        keep: list[bool] | None = None
        if not recent.isdisjoint(ids):
            keep = [row_id not in recent for row_id in ids]
            if not any(keep):
                return 0
        last = len(ids) - 1 if keep is None else max(i for i, k in enumerate(keep) if k)
        self._place = offset + start + last
        self._recent.add(ids if keep is None else list(compress(ids, keep)), cells[1][last])
        self._idle = 0
        moved = len(ids) if keep is None else sum(keep)
        if self._seen is not None:
            hashes = list(map(hash, ids))
            if not self._seen.isdisjoint(hashes):
                unseen = [h not in self._seen for h in hashes]
                keep = unseen if keep is None else [a and b for a, b in zip(keep, unseen, strict=True)]
            self._seen.update(hashes)
        if keep is not None:
            cells = [list(compress(column, keep)) for column in cells]
        if not cells[0]:
            return moved
        if self._seen is None:
            self._emitted.extend(map(hash, cells[0]))
        await self._emit(cells)
        return moved

    def _behind(self, page: Page) -> int:
        """How many of `page`'s first rows sort before the row emitted last (reading by
        ``created_at`` or ``id``). A page read before a later one was emitted may hold a row
        deleted in between, after the page's anchor: not new, and emitting it would break
        the read's order, so it is passed over."""
        if self._key == "created_at":
            last = self._recent.last_created_at
        elif self._key == "id":
            last = self._recent.last
        else:
            return 0
        return 0 if last is None else bisect_left(page.cells[_KEY_CELLS[self._key]], last)

    async def _keys_work(self, edge: _Edge) -> bool:
        """Whether we may resume by key: the server filters on the order key, unambiguously.

        By created_at the ties need an ``id`` filter too, so ``id`` must be ours as well.
        """
        if self._by_key is None:
            names = {c.name.lower() for c in self._table.columns}
            if self._key == "created_at":
                self._by_key = (
                    edge.created_at is not None and "id" not in names and "id" not in self._filter
                )
                probes = [self._tie_filter(edge), self._after_filter(edge)]
            else:
                self._by_key = "id" not in self._filter
                probes = [self._after_id_filter(edge)]
            if self._by_key:
                try:
                    await asyncio.gather(*(self.fetch(probe, 0, 1) for probe in probes))
                except (BadRequest, ApiValidationError):
                    self._by_key = False
        return self._by_key and (self._key == "id" or edge.created_at is not None)

    def _after_id_filter(self, edge: _Edge) -> dict[str, Mapping[str, Any]]:
        return {**self._filter, "id": {"gt": edge.row_id}}

    def _tie_filter(self, edge: _Edge) -> dict[str, Mapping[str, Any]]:
        return {**self._filter, "created_at": {"eq": edge.created_at}, "id": {"gt": edge.row_id}}

    def _after_filter(self, edge: _Edge) -> dict[str, Mapping[str, Any]]:
        # Overriding a caller's `created_at > x` is safe: the row we resume after matched it.
        return {**self._filter, "created_at": {"gt": edge.created_at}}

    async def _resume_by_key(self, edge: _Edge) -> _Edge | None:
        if self._key == "id":
            return await self._pass(self._after_id_filter(edge))
        shift = await self._pass(self._tie_filter(edge))
        if shift is not None:
            return shift
        if "eq" in self._filter.get("created_at", {}):
            return None  # every matching row has the same timestamp: the ties were all of them
        return await self._pass(self._after_filter(edge))
