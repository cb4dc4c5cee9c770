"""Pages as the reader holds them (cells column by column, their ids), and the pages of a
pass fetched ahead, concurrently, in offset order (`PagesAhead`): where each one starts, which
holes a smaller applied limit left. What a page means for the read is `paging`'s."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol, TypeAlias

__all__ = ["AHEAD", "Cells", "Fetcher", "Page", "PagesAhead", "split_rows"]

#: Finished pages that may wait for an earlier, slower one, per request in flight.
AHEAD = 4

#: A page's cells column by column (id, created_at, updated_at, then the selected columns):
#: plain values in a few lists, so the API's row objects die young and the GC stays cheap.
Cells: TypeAlias = list[list[Any]]

_SYSTEM_KEYS = itemgetter("id", "created_at", "updated_at")
_FIELDS_KEY = itemgetter("fields")


class Fetcher(Protocol):
    """What a plan fetches its pages with (the page reader)."""

    def window(self) -> int:
        """Pages to keep in flight now."""
        ...

    def paced_ahead(self) -> int:
        """Pages a paced read may hold ahead of an earlier one."""
        ...

    async def fetch(
        self, filter: Mapping[str, Mapping[str, Any]], offset: int, limit: int
    ) -> Page:
        """The page of `limit` rows at `offset` of `filter`."""
        ...


@dataclass(frozen=True)
class Page:
    """A page's cells, column by column, and its row ids."""

    ids: list[str]
    cells: Cells
    limit: int
    total: int | None


def _finished(task: asyncio.Task[Page]) -> Page | None:
    """The page a task fetched, or None while it runs (or if it failed: raised when taken)."""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return None
    return task.result()


class PagesAhead:
    """The pages of one pass fetched ahead and not yet taken, in offset order.

    Each page's successor starts at its own offset plus its own applied limit less the
    overlap, so the next page holds the last row of the one before. Pages still running are
    assumed to apply `stride`, the applied limit of the latest page finished: where every
    page applies the same limit, the offsets are those of plain stepping. A finished page
    whose applied limit came out smaller leaves a hole before the page planned after it; the
    hole is fetched before any page further on (and may itself leave one).
    """

    def __init__(
        self,
        reader: Fetcher,
        filter: Mapping[str, Mapping[str, Any]],
        ask: int,
        limit: int,
        total: int | None,
    ) -> None:
        self._reader = reader
        self._filter = filter
        self._ask = ask
        self.stride = limit
        self.overlap = 1
        self._end = total if total is not None else 0  # a hint, never trusted
        self.pending: deque[tuple[int, asyncio.Task[Page]]] = deque()
        #: The page taken last and its offset: where the page after it must start.
        self._taken: tuple[int, Page] | None = None

    def _launch(self, index: int, offset: int) -> None:
        task = asyncio.create_task(self._reader.fetch(self._filter, offset, self._ask))
        self.pending.insert(index, (offset, task))

    def _step(self, limit: int) -> int:
        return max(1, limit - self.overlap)

    def schedule(self) -> None:
        """Starts holes first, then pages past the last planned, while fewer than
        `concurrency` run (finished pages may wait for an earlier one, up to `AHEAD` per
        request in flight: one stalled by a Retry-After)."""
        concurrency = self._reader.window()
        finished = [_finished(task) for _, task in self.pending]
        for page in finished:
            if page is not None:
                self.stride = page.limit
        running = sum(not task.done() for _, task in self.pending)
        holes = [
            (offset, page)
            for (offset, _), page, (following, _) in zip(
                self.pending, finished, list(self.pending)[1:], strict=False
            )
            if page is not None
            and len(page.ids) >= page.limit
            and following > offset + page.limit - 1  # the next page misses this one's last row
        ]
        for offset, page in holes:
            if running >= concurrency:
                break
            index = next(i for i, (o, _) in enumerate(self.pending) if o == offset) + 1
            self._launch(index, offset + self._step(page.limit))
            running += 1
        ahead = max(AHEAD * concurrency, self._reader.paced_ahead())
        while running < concurrency and len(self.pending) < ahead:
            after = self._next()
            if after is None or (self.pending and after >= self._end):
                break
            self._launch(len(self.pending), after)
            running += 1

    def _next(self) -> int | None:
        """Where the page after the last planned starts; None past a short page (the end)."""
        if not self.pending:
            assert self._taken is not None  # the first page is taken before anything is planned
            offset, taken = self._taken
            return offset + self._step(taken.limit)
        offset, task = self.pending[-1]
        page = _finished(task)
        if page is None:
            return offset + self._step(self.stride)
        if len(page.ids) < page.limit:
            return None
        return offset + self._step(page.limit)

    def taken(self, offset: int, page: Page) -> None:
        """`page`, read at `offset`, was taken: the next page must hold its last row. One
        planned further on (the page came back with a smaller limit than planned, before
        `schedule` saw it finish) leaves a hole, fetched first."""
        self._taken = offset, page
        if self.pending and self.pending[0][0] > offset + page.limit - 1:
            self._launch(0, offset + self._step(page.limit))

    async def cancel(self) -> None:
        for _, task in self.pending:
            task.cancel()
        if self.pending:
            await asyncio.gather(*(task for _, task in self.pending), return_exceptions=True)


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
