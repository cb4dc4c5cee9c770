"""The one page reader: every read of a table's rows goes through `PageReader`.

Export, load, `Workspace.read`, push's live read and every read of a sync (full, incremental,
the id pass) page through here: in an explicit, stable order (by the system ``created_at``
ascending; by ``id`` when a user column is called ``created_at``; by ``updated_at`` when both
are taken; else the server's default order), stepping by the limit the server applied. The
first page gives the applied limit; the pages after it are fetched concurrently (at most
`concurrency` in flight) and handed over in order. Naive offset stepping skips a row for
every row deleted before the offset; it is never used, least of all to decide a deletion.

Consistency while others write. Consecutive pages overlap by one row: page k starts at the
offset of page k-1's last row. By ``created_at``, rows are only ever appended at the end (a
new row has the newest timestamp; updates do not move a row), so a delete before an edge
shifts later rows left, and the overlap row is then not where it was (by ``id``, a new row
may also shift rows right; the overlap check sees that too). When page k does not
start with page k-1's last row, the pages after k-1 are dropped and the read resumes right
after the last row it emitted:

* by key, where the server accepts filters on the order key (checked once): by
  ``created_at``, first ``created_at == t and id > last id`` (the rest of its timestamp),
  then ``created_at > t``; by ``id``, ``id > last id``; each read the same way;
* otherwise by finding that row (or a later one of its page) again near its old offset.

Every page is checked to really come in the order asked (its system key non-decreasing). A
server that does not honour the sort (or one where no key is free) is read in its default
order, by offset, resuming by finding the last rows again, and every id already emitted is
dropped, so no id is emitted twice. For that, emitted ids are remembered as 64-bit hashes
(8 bytes a row in an array; a set of them once in that mode, or from the start when reading
by ``updated_at``); two ids sharing a hash would drop the second, never repeat it.

If every edge matches, each page continues exactly where the previous one ended, so no row
that existed throughout the read is skipped and no id is emitted twice (ids of the previous
page are also dropped, belt and braces). The read ends on a short or empty page, never on
the total alone (the total is unreliable under a filter).
"""

from __future__ import annotations

import asyncio
from array import array
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeAlias

from connector.api.client import AsyncClient
from connector.errors import ApiValidationError, BadRequest, ConnectorError
from connector.schema import Table

__all__ = [
    "AHEAD",
    "MAX_RESUMES",
    "MAX_SEARCH_WINDOWS",
    "ORDER_KEYS",
    "Cells",
    "ExtractionError",
    "PageReader",
    "split_rows",
]

#: Finished pages that may wait for an earlier, slower one, per request in flight.
AHEAD = 4
#: A read that had to resume this many times gives up (the table changes faster than we read).
MAX_RESUMES = 1000
#: Windows searched backwards for the last emitted row when resuming by offset.
MAX_SEARCH_WINDOWS = 20
#: Order keys in preference: system fields new rows cannot enter in the middle of (creation
#: time), that filters resume after exactly (ids), or where rows only move to the end (last
#: update). The first a user column does not shadow is used; none: the server's default order.
ORDER_KEYS = ("created_at", "id", "updated_at")
#: Which of a page's cell columns (id, created_at, updated_at first) holds each order key.
_KEY_CELLS = {"id": 0, "created_at": 1, "updated_at": 2}

#: A page's cells column by column (id, created_at, updated_at, then the selected columns):
#: plain values in a few lists, so the API's row objects die young and the GC stays cheap.
Cells: TypeAlias = list[list[Any]]

_SYSTEM_KEYS = itemgetter("id", "created_at", "updated_at")
_FIELDS_KEY = itemgetter("fields")


class ExtractionError(ConnectorError):
    """The table changed so much during the read that it could not be repaired."""


def _order_key(table: Table) -> str | None:
    """The first of `ORDER_KEYS` no user column shadows (compared case-insensitively, as a
    server may match names), or None: read in the server's default order."""
    taken = {name.lower() for name in table.column_names}
    return next((key for key in ORDER_KEYS if key not in taken), None)


class _Unordered(Exception):
    """A page did not come in the order asked: the server does not honour the sort."""


def _ascending(values: list[Any]) -> bool:
    try:
        return sorted(values) == values  # linear on sorted input, and in C
    except TypeError:  # a missing (None) key: the order cannot be checked, so it is not trusted
        return False


@dataclass(frozen=True)
class _Page:
    """A page's cells, column by column, its row ids, and whether it came in the order asked."""

    ids: list[str]
    cells: Cells
    limit: int
    total: int | None
    last_created_at: str | None
    ordered: bool


@dataclass(frozen=True)
class _Edge:
    """The last row emitted, where it was read, and the ids of its page: where to resume."""

    row_id: str
    created_at: str | None
    offset: int  # absolute, in the unresumed order; only meaningful for offset resumes
    page_ids: tuple[str, ...]

    @classmethod
    def after(cls, page: _Page, offset: int) -> _Edge:
        return cls(page.ids[-1], page.last_created_at, offset + len(page.ids) - 1, tuple(page.ids))


class PageReader:
    """Reads pages concurrently, checks every page edge, resumes after a shift."""

    def __init__(
        self,
        client: AsyncClient,
        table: Table,
        *,
        fields: Sequence[str],
        filter: Mapping[str, Mapping[str, Any]],
        page_size: int,
        concurrency: int,
        emit: Callable[[Cells], Awaitable[None]],
    ) -> None:
        self._client = client
        self._table = table
        self._filter = dict(filter)
        self._page_size = page_size
        self._concurrency = concurrency
        self._emit = emit
        self._names = list(fields)
        self._key = _order_key(table)
        # None: not yet known. By updated_at, ties would need the (shadowed) id: by offset.
        self._by_key: bool | None = None if self._key in ("created_at", "id") else False
        #: Hashes of the ids emitted so far (64-bit, 8 bytes a row), for the fallback below.
        self._emitted: array[int] = array("q")
        #: Once reading in the server's default order: every id hash emitted, dropped on sight.
        self._seen: set[int] | None = None if self._key in ("created_at", "id") else set()
        self.resumes = 0

    async def read(self) -> None:
        try:
            await self._read()
        except _Unordered:
            # Pages already emitted came in an order we could not trust: read everything again
            # in the server's default order and drop each id emitted before.
            self._key, self._by_key = None, False
            self._seen = (self._seen or set()).union(self._emitted)
            del self._emitted[:]
            await self._read()

    async def _read(self) -> None:
        edge = await self._pass(self._filter, 0, None)
        while edge is not None:
            self.resumes += 1
            if self.resumes > MAX_RESUMES:
                raise ExtractionError(
                    f"table {self._table.name!r} changed faster than it could be read; try again"
                )
            if await self._keys_work(edge):
                edge = await self._resume_by_key(edge)
            else:
                edge = await self._resume_by_offset(edge)

    async def _fetch(
        self, filter: Mapping[str, Mapping[str, Any]], offset: int, limit: int
    ) -> _Page:
        key = self._key
        page = await self._client.list_rows(
            self._table.id,
            limit=limit,
            offset=offset,
            sort=key,
            order="asc" if key else None,
            filter=filter,
        )
        rows = page.raw
        cells = split_rows(rows, self._names)
        return _Page(
            ids=cells[0],
            cells=cells,
            limit=page.limit,
            total=page.total,
            last_created_at=rows[-1].get("created_at") if rows else None,
            ordered=key is None or _ascending(cells[_KEY_CELLS[key]]),
        )

    async def _pass(
        self, filter: Mapping[str, Mapping[str, Any]], start: int, anchor: _Edge | None
    ) -> _Edge | None:
        """Reads from offset `start` to a short page; returns the edge where a shift showed.

        With an `anchor`, the first page must begin with the anchor's row (already emitted).
        """
        first = await self._fetch(filter, start, self._page_size)
        limit = first.limit
        if limit < 2:
            raise ExtractionError(f"the server applied a page limit of {limit}; need at least 2")
        if not first.ordered:
            raise _Unordered
        if anchor is None:
            await self._emit_new(first, skip_first=False, seen=())
        elif not first.ids or first.ids[0] != anchor.row_id:
            return _Edge(anchor.row_id, anchor.created_at, start, anchor.page_ids)
        else:
            await self._emit_new(first, skip_first=True, seen=anchor.page_ids)
        if len(first.ids) < limit:
            return None
        step = limit - 1
        planned_end = first.total if first.total is not None else 0  # a hint, never trusted
        next_offset = start + step
        # Pages in offset order; at most `concurrency` of them still running. Finished ones may
        # wait for an earlier page (one stalled by a Retry-After), up to `AHEAD` per request.
        pending: deque[tuple[int, asyncio.Task[_Page]]] = deque()
        prev, prev_offset = first, start
        try:
            while True:
                running = sum(not task.done() for _, task in pending)
                while (
                    running < self._concurrency
                    and len(pending) < AHEAD * self._concurrency
                    and (next_offset < planned_end or not pending)
                ):
                    task = asyncio.create_task(self._fetch(filter, next_offset, limit))
                    pending.append((next_offset, task))
                    next_offset += step
                    running += 1
                offset, head = pending[0]
                if not head.done():
                    await asyncio.wait(
                        [task for _, task in pending if not task.done()],
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    continue
                pending.popleft()
                page = head.result()
                if not page.ordered:
                    raise _Unordered
                if not page.ids or page.ids[0] != prev.ids[-1]:
                    return _Edge.after(prev, prev_offset)
                await self._emit_new(page, skip_first=True, seen=prev.ids)
                if len(page.ids) < page.limit:
                    return None
                prev, prev_offset = page, offset
        finally:
            for _, task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*(task for _, task in pending), return_exceptions=True)

    async def _emit_new(self, page: _Page, *, skip_first: bool, seen: Sequence[str]) -> None:
        """Emits the page without its overlap row, and without ids the previous page had."""
        cells = [column[1:] for column in page.cells] if skip_first else page.cells
        keep: list[bool] | None = None
        if self._seen is not None:
            hashes = list(map(hash, cells[0]))
            if not self._seen.isdisjoint(hashes):
                keep = [h not in self._seen for h in hashes]
            self._seen.update(hashes)
        else:
            again = set(cells[0]).intersection(seen)
            if again:
                keep = [row_id not in again for row_id in cells[0]]
        if keep is not None:
            cells = [[v for v, k in zip(column, keep, strict=True) if k] for column in cells]
        if self._seen is None:
            self._emitted.extend(map(hash, cells[0]))
        if cells[0]:
            await self._emit(cells)

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
                    await asyncio.gather(*(self._fetch(probe, 0, 1) for probe in probes))
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
            return await self._pass(self._after_id_filter(edge), 0, None)
        shift = await self._pass(self._tie_filter(edge), 0, None)
        if shift is not None:
            return shift
        if "eq" in self._filter.get("created_at", {}):
            return None  # every matching row has the same timestamp: the ties were all of them
        return await self._pass(self._after_filter(edge), 0, None)

    async def _resume_by_offset(self, edge: _Edge) -> _Edge | None:
        """Finds the last emitted row (or a later-read one of its page) again, near its offset.

        Rows only move left (deletes before them), so the search walks back from the old offset.
        """
        rank = {row_id: i for i, row_id in enumerate(edge.page_ids)}
        window = self._page_size
        start = max(0, edge.offset + 2 - window)
        for _ in range(MAX_SEARCH_WINDOWS):
            page = await self._fetch(self._filter, start, window)
            found = [(rank[row_id], i) for i, row_id in enumerate(page.ids) if row_id in rank]
            if found:
                _, at = max(found)
                anchor = _Edge(page.ids[at], None, start + at, edge.page_ids)
                return await self._pass(self._filter, start + at, anchor)
            if start == 0:
                break
            start = max(0, start - (page.limit - 1))
        raise ExtractionError(
            f"table {self._table.name!r}: rows read last were deleted while reading and the read "
            "cannot resume safely on this server; try again"
        )


def split_rows(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Cells:
    """Rows as the API sent them (the client checked each has an ``id``), by column: ids,
    created_at, updated_at, then the user columns `names`.

    Transposed in C (itemgetter, zip) when every row has every key, as servers that send
    whole rows do; key by key otherwise.
    """
    if not rows:
        return [[] for _ in range(3 + len(names))]
    try:
        system = list(zip(*map(_SYSTEM_KEYS, rows), strict=True))
        fields = list(map(_FIELDS_KEY, rows))
        values: Cells = []
        if len(names) == 1:
            values = [list(map(itemgetter(names[0]), fields))]
        elif names:
            values = [list(c) for c in zip(*map(itemgetter(*names), fields), strict=True)]
        return [list(column) for column in system] + values
    except (KeyError, TypeError):
        fields = [r.get("fields") or {} for r in rows]
        return [
            [r["id"] for r in rows],
            [r.get("created_at") for r in rows],
            [r.get("updated_at") for r in rows],
            *([f.get(name) for f in fields] for name in names),
        ]
