"""A table, read as a stream of typed Arrow record batches (and, on request, one DataFrame).

Reading is offset paging in an explicit, stable order: by the system ``created_at``
ascending (the reference server breaks ties by id), else by ``id`` when a user column is
called ``created_at`` (a server may then sort and filter by the user's column, so the name
no longer means ours), else by ``updated_at`` (an update moves a row to the end, so ids
already emitted are dropped), else, when all three are taken, in the server's default order.
The first page gives the applied limit and the total; the pages after it are fetched
concurrently (at most `concurrency` in flight) and emitted in order, so memory stays flat
however large the table.

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
import contextlib
import datetime as dt
import operator
import queue
import threading
import warnings
from array import array
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, AsyncClient, Client
from connector.api.client import Filter
from connector.api.models import Row
from connector.errors import ApiValidationError, BadRequest, ConfigError, ConnectorError
from connector.schema import SYSTEM_FIELDS, Column, Table, arrow_schema, frame_from_arrow

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_CONCURRENCY",
    "CellWarning",
    "Extraction",
    "ExtractionError",
    "read_batches",
    "string_array",
]

#: Pages in flight at once after the first.
DEFAULT_CONCURRENCY = 4
#: Finished pages that may wait for an earlier, slower one, per request in flight.
AHEAD = 4
#: Pages are gathered into record batches of about this many rows.
BATCH_ROWS = 1000  # large enough that Arrow's per-call costs vanish
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


class ExtractionError(ConnectorError):
    """The table changed so much during the read that it could not be repaired."""


class CellWarning(UserWarning):
    """A cell could not be read as its column's type; it was loaded as null."""


class Extraction:
    """One table read: iterate for record batches, or take it all with `to_pandas()`.

    Iterating again reads the table again. `resumes` counts the repairs of the last read.
    """

    def __init__(
        self,
        client: Client,
        table: Table,
        *,
        columns: Sequence[str] | None = None,
        filter: Filter | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        if not 2 <= page_size <= MAX_PAGE_SIZE:
            raise ConfigError(f"page size must be between 2 and {MAX_PAGE_SIZE}, not {page_size}")
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
        self.table = table
        self.columns: tuple[Column, ...] = _select(table, columns)
        self.schema: pa.Schema = arrow_schema(table, [c.name for c in self.columns])
        self.resumes = 0
        self._client = client
        self._filter = _exact_filter(table, filter)
        self._page_size = page_size
        self._concurrency = concurrency

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        yield from _pages_here(self) if _no_running_loop() else _pages_in_thread(self)

    def cast(self, rows: Sequence[Row]) -> pa.RecordBatch:
        """Rows read some other way (another order, say) typed exactly as this read types them."""
        return _Caster(self).batch(rows)

    def to_arrow(self) -> pa.Table:
        """The whole table as one Arrow table (held in memory: only when asked for)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def to_pandas(self) -> pd.DataFrame:
        """The whole table as a DataFrame with the dtypes `connector.schema` gives its columns."""
        return frame_from_arrow(self.to_arrow(), self.table)


def read_batches(
    client: Client,
    table: Table,
    *,
    columns: Sequence[str] | None = None,
    filter: Filter | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Extraction:
    """Reads `table` as record batches of `arrow_schema(table, columns)`; see `Extraction`."""
    return Extraction(
        client, table, columns=columns, filter=filter, page_size=page_size, concurrency=concurrency
    )


def _select(table: Table, columns: Sequence[str] | None) -> tuple[Column, ...]:
    if columns is None:
        return table.columns
    try:
        return tuple(table.column(name) for name in columns)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None


def _exact_filter(table: Table, filter: Filter | None) -> dict[str, Mapping[str, Any]]:
    """The filter with its keys spelled exactly as the schema does (matched case-insensitively)."""
    if not filter:
        return {}
    known = {name.lower(): name for name in (*table.column_names, *SYSTEM_FIELDS)}
    exact: dict[str, Mapping[str, Any]] = {}
    for key, condition in filter.items():
        name = key if key in known.values() else known.get(key.lower())
        if name is None:
            raise ConfigError(
                f"filter column {key!r} is not in table {table.name!r}; columns: {table.column_names}"
            )
        exact[name] = condition
    return exact


# --- fetching: an event loop in this thread, or in a helper thread under a running loop ------

#: What the fetching side hands the consuming side: batches, then None at the end, or the error.
_Item: TypeAlias = "pa.RecordBatch | Exception | None"
_Put: TypeAlias = Callable[[_Item], Awaitable[None]]
#: A page's cells column by column (id, created_at, updated_at, then the selected columns):
#: plain values in a few lists, so the API's row objects die young and the GC stays cheap.
_Cells: TypeAlias = list[list[Any]]


def _no_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


async def _fetch_all(extraction: Extraction, put: _Put) -> None:
    """Reads every page of the extraction and hands each one over; then None, or the error."""
    cast = _Caster(extraction)
    pending: _Cells = cast.empty()

    async def gather(cells: _Cells) -> None:
        nonlocal pending
        for column, more in zip(pending, cells, strict=True):
            column.extend(more)
        if len(pending[0]) >= BATCH_ROWS:
            batch, pending = cast.from_cells(pending), cast.empty()
            await put(batch)

    try:
        async with extraction._client.async_twin() as client:
            reader = _Reader(client, extraction, gather)
            try:
                await reader.read()
            finally:
                extraction.resumes = reader.resumes
        if pending[0]:
            await put(cast.from_cells(pending))
    except Exception as exc:  # handed over, raised on the consuming side
        await put(exc)
        return
    await put(None)


def _pages_here(extraction: Extraction) -> Iterator[pa.RecordBatch]:
    """Drives an event loop in this thread between batches: no thread hand-offs.

    While the consumer works on a batch the loop is paused, but the server goes on answering
    the requests already sent; their answers are read when the consumer asks for more.
    """
    loop = asyncio.new_event_loop()
    pages: asyncio.Queue[_Item] = asyncio.Queue(extraction._concurrency * 2)
    task = loop.create_task(_fetch_all(extraction, pages.put))
    try:
        while (item := loop.run_until_complete(pages.get())) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        loop.close()


def _pages_in_thread(extraction: Extraction) -> Iterator[pa.RecordBatch]:
    """Runs the event loop in a helper thread, for callers already inside one (notebooks)."""
    pages: queue.Queue[_Item] = queue.Queue(extraction._concurrency * 2)
    stopped = threading.Event()
    started = threading.Event()
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]] = []

    async def put(item: _Item) -> None:
        while True:
            try:
                pages.put_nowait(item)
                return
            except queue.Full:
                if stopped.is_set():
                    raise asyncio.CancelledError from None
                await asyncio.sleep(0.002)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        running.append((asyncio.get_running_loop(), task))
        started.set()
        await _fetch_all(extraction, put)

    thread = threading.Thread(
        target=lambda: asyncio.run(main()), name="connector-extract", daemon=True
    )
    thread.start()
    try:
        while (item := pages.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        stopped.set()
        started.wait()
        loop, task = running[0]
        with contextlib.suppress(RuntimeError):  # the loop may have finished already
            loop.call_soon_threadsafe(task.cancel)
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):  # unblocks a put waiting on a full queue
                pages.get(timeout=0.05)
        thread.join()


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
    cells: _Cells
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


class _Reader:
    """Reads pages concurrently, checks every page edge, resumes after a shift."""

    def __init__(
        self,
        client: AsyncClient,
        extraction: Extraction,
        emit: Callable[[_Cells], Awaitable[None]],
    ) -> None:
        self._client = client
        self._table = extraction.table
        self._filter = extraction._filter
        self._page_size = extraction._page_size
        self._concurrency = extraction._concurrency
        self._emit = emit
        self._split = _Caster(extraction).split
        self._key = _order_key(extraction.table)
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

    async def _fetch(self, filter: Mapping[str, Mapping[str, Any]], offset: int, limit: int) -> _Page:
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
        cells = self._split(rows)
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


# --- typing: API cells into Arrow arrays ---------------------------------------------------


_ID = Column("id", "text")
_SYSTEM_KEYS = itemgetter("id", "created_at", "updated_at")
_FIELDS_KEY = itemgetter("fields")


class _Caster:
    """Turns rows into record batches of the extraction's schema; warns once per bad column."""

    def __init__(self, extraction: Extraction) -> None:
        self._schema: pa.Schema = extraction.schema
        self._columns = extraction.columns
        self._names = [c.name for c in self._columns]
        self._warned: set[str] = set()

    def empty(self) -> _Cells:
        return [[] for _ in range(3 + len(self._columns))]

    def split(self, rows: Sequence[Mapping[str, Any]]) -> _Cells:
        """Rows as the API sent them (the client checked each has an ``id``), by column.

        Transposed in C (itemgetter, zip) when every row has every key, as servers that send
        whole rows do; key by key otherwise.
        """
        if not rows:
            return self.empty()
        try:
            system = list(zip(*map(_SYSTEM_KEYS, rows), strict=True))
            fields = list(map(_FIELDS_KEY, rows))
            values: _Cells = []
            if len(self._names) == 1:
                values = [list(map(itemgetter(self._names[0]), fields))]
            elif self._names:
                values = [list(c) for c in zip(*map(itemgetter(*self._names), fields), strict=True)]
            return [list(column) for column in system] + values
        except (KeyError, TypeError):
            fields = [r.get("fields") or {} for r in rows]
            return [
                [r["id"] for r in rows],
                [r.get("created_at") for r in rows],
                [r.get("updated_at") for r in rows],
                *([f.get(name) for f in fields] for name in self._names),
            ]

    def batch(self, rows: Sequence[Row]) -> pa.RecordBatch:
        """`Row`s (say from `Client.pages` in another order) as one batch of the schema."""
        return self.from_cells(
            [
                [r.id for r in rows],
                [r.created_at for r in rows],
                [r.updated_at for r in rows],
                *([r.fields.get(name) for r in rows] for name in self._names),
            ]
        )

    def from_cells(self, cells: _Cells) -> pa.RecordBatch:
        """Cells by column (see `split`) as one record batch of the extraction's schema."""
        ids, created, updated, *values = cells
        arrays: list[pa.Array] = [
            self._cells(_ID, ids),
            _timestamps(created),
            _timestamps(updated),
        ]
        arrays += [self._cells(c, v) for c, v in zip(self._columns, values, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _cells(self, column: Column, values: list[Any]) -> pa.Array:
        kind = column.kind.name
        if kind == "choice":
            return _choices(column, values)
        arrow_type = column.arrow_type
        try:  # the fast path: the cells already have the column's JSON type
            if kind == "date":
                return string_array(values, blank_is_null=True).cast(arrow_type)
            if kind == "text":
                return string_array(values, blank_is_null=True)
            if kind == "number":
                return _floats(values)
            if kind == "checkbox":
                return _booleans(values)
            return pa.array(values, arrow_type, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            pass
        parse = _PARSERS[kind]
        parsed: list[Any] = []
        bad = 0
        for value in values:
            try:
                parsed.append(None if value is None or value == "" else parse(value))
            except (TypeError, ValueError, OverflowError):
                parsed.append(None)
                bad += 1
        if bad and column.name not in self._warned:
            self._warned.add(column.name)
            warnings.warn(
                f"column {column.name!r}: {bad} value(s) are not a {kind}; loaded as null",
                CellWarning,
                stacklevel=2,
            )
        return pa.array(parsed, arrow_type, from_pandas=True)


# Arrays are built from buffers, not with `pa.array`: its first conversion from Python objects
# makes pyarrow import pandas (~37 MB), which an export to a file never needs otherwise.


def string_array(values: Sequence[Any], *, blank_is_null: bool = False) -> pa.Array:
    """Strings and Nones as a string array (without `pa.array`, see above); TypeError for
    any other value. With `blank_is_null`, empty strings are nulls too."""
    valid = _not_none(values)
    texts = values if valid is None else ["" if v is None else v for v in values]
    joined = "".join(texts)
    if joined.isascii():  # then a string's length is its UTF-8 length: no encoding one by one
        data, sizes = joined.encode("ascii"), map(len, texts)
    else:
        encoded = [t.encode() for t in texts]
        data, sizes = b"".join(encoded), map(len, encoded)
    lengths = np.fromiter(sizes, np.int64, len(values))
    if blank_is_null:
        valid = lengths > 0 if valid is not None or not lengths.all() else None
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise OverflowError("more than 2 GiB of text in one batch")
    buffers = [pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    return _from_buffers(pa.string(), valid, len(values), buffers)


def _floats(values: list[Any]) -> pa.Array:
    """JSON numbers and Nones as a float64 array; TypeError for any other value."""
    if not set(map(type, values)) <= {float, int, type(None)}:
        raise TypeError("not all numbers")
    numbers = np.array(values, np.float64)  # None becomes NaN, which JSON cannot send
    nan = np.isnan(numbers)
    valid = ~nan if nan.any() else None
    return _from_buffers(pa.float64(), valid, len(values), [pa.py_buffer(numbers)])


def _booleans(values: list[Any]) -> pa.Array:
    """JSON booleans and Nones as a boolean array; TypeError for any other value."""
    if not set(map(type, values)) <= {bool, type(None)}:
        raise TypeError("not all booleans")
    numbers = np.array(values, np.float64)  # True 1, False 0, None NaN
    nan = np.isnan(numbers)
    valid = ~nan if nan.any() else None
    bits = np.packbits(numbers == 1.0, bitorder="little")
    return _from_buffers(pa.bool_(), valid, len(values), [pa.py_buffer(bits)])


def _not_none(values: Sequence[Any]) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
    """Which values are not None, or None when all of them are not."""
    if None not in values:
        return None
    return np.fromiter(map(operator.is_not, values, repeat(None)), np.bool_, len(values))


def _from_buffers(
    type_: pa.DataType,
    valid: np.ndarray[Any, np.dtype[np.bool_]] | None,
    length: int,
    buffers: list[pa.Buffer],
) -> pa.Array:
    """An array of `length` values from its data buffers and, when some are null, `valid`."""
    if valid is None:
        return pa.Array.from_buffers(type_, length, [None, *buffers], null_count=0)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = length - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(type_, length, [bitmap, *buffers], null_count=nulls)


def _number(value: Any) -> float:
    if isinstance(value, str):
        return float(value.strip().replace(",", ""))
    return float(value)


_TRUE = {"true", "yes", "y", "1", "on", "x"}
_FALSE = {"false", "no", "n", "0", "off"}


def _checkbox(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(value)


def _date(value: Any) -> dt.date:
    return dt.date.fromisoformat(str(value).strip()[:10])


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_PARSERS: Mapping[str, Callable[[Any], Any]] = {
    "text": _text,
    "number": _number,
    "checkbox": _checkbox,
    "date": _date,
}


def _choices(column: Column, values: list[Any]) -> pa.Array:
    """A dictionary array whose dictionary is the column's options (plus any stray values)."""
    options = list(column.options or ())
    dictionary = string_array(options)
    try:
        strings = string_array(values, blank_is_null=True)
        codes = pc.index_in(strings, value_set=dictionary)
        if codes.null_count == strings.null_count:  # every value is one of the options
            return pa.DictionaryArray.from_arrays(codes.cast(pa.int32()), dictionary)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    index = {option: i for i, option in enumerate(options)}
    indices: list[int | None] = []
    for value in values:
        if value is None or value == "":
            indices.append(None)
            continue
        text = _text(value)
        code = index.get(text)
        if code is None:
            code = index[text] = len(options)
            options.append(text)
        indices.append(code)
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32()), pa.array(options, pa.string())
    )


_UTC = pa.timestamp("us", tz="UTC")


def _timestamps(values: list[str | None]) -> pa.Array:
    try:
        return string_array(values).cast(_UTC)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        parsed = [
            dt.datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None for v in values
        ]
        return pa.array(
            [p if p is None or p.tzinfo else p.replace(tzinfo=dt.UTC) for p in parsed], _UTC
        )
