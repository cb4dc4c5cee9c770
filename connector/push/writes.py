"""Send a plan's writes with the fewest requests, and never create a row twice.

Creates go in bulk requests of at most 100 rows (a lone row as a single create), updates as PATCHes of only the changed
cells, deletes in bulk requests of at most 100 ids — concurrently, at most `concurrency`
requests in flight, all paced by the client's shared adaptive rate limiter.

Two failures need care:

* A bulk create that fails *ambiguously* (a 5xx, a timeout, a dropped connection) may have
  been committed. It is never retried blindly: the table is re-read, and only the rows whose
  key is still missing are sent again. (The API has no idempotency keys, so a request that a
  server is *still* processing when our timeout fires cannot be seen by the re-read; a rerun
  of the push would then find the duplicate key and refuse with `PlanError`.)
* A bulk create rejected with ``VALIDATION_ERROR`` (all or nothing) is split in halves until
  the bad rows are alone: the good rows go in, the bad ones are reported as `Rejected`.
* A request too large for the server (413) is split by size, and later bulk creates are sized
  under what it refused; a single row too large even alone is `Rejected`, the rest go on.
  Bulk creates are sized by bytes (`plan.MAX_REQUEST_BYTES`) as well as by rows from the start.

When an apply stops on an error, the error carries what was written before it
(`ConnectorError.written`, read by `written_before`): the push's summary says so, and a rerun
converges.
"""

from __future__ import annotations

import asyncio
import csv
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from connector.api import MAX_BULK_ROWS, AsyncClient
from connector.atomic import atomic_path
from connector.destinations.formats import excel_safe
from connector.errors import (
    ApiValidationError,
    BadRequest,
    ConnectorError,
    NotFound,
    ServerError,
    TransportError,
)
from connector.progress import Progress
from connector.push.diff import canonical_keys
from connector.push.live import Live, read_live_async
from connector.push.plan import (
    MAX_REQUEST_BYTES,
    Create,
    Plan,
    Update,
    body_bytes,
    create_batches,
)
from connector.results import PushResult, Rejected

__all__ = [
    "apply_plan",
    "excel_safe",
    "write_rejects",
    "written_before",
]

#: Re-reads after ambiguous failures of one batch before giving up (a rerun converges).
MAX_RECOVERIES = 5
#: A re-read waits this long to start, so failures arriving together share one read.
REREAD_GATHER_SECONDS = 0.05
#: HTTP status of a body too large for the server.
TOO_LARGE = 413

T = TypeVar("T")


async def apply_plan(
    client: AsyncClient,
    plan: Plan,
    *,
    concurrency: int | None = None,
    bar: Progress | None = None,
) -> PushResult:
    """Send `plan`'s writes (creates, then updates, then deletes) and count what happened.

    As many requests are in flight as the client's adaptive limit allows (`concurrency`, if
    given, caps this apply below it).

    Everything, re-reads after ambiguous failures included, is awaited on `client` (a
    `Client`'s async core, `Client.aio`) in this one coroutine.
    """
    run = _Run(client, plan, asyncio.Semaphore(concurrency or client.concurrency.maximum), bar)
    started = time.perf_counter()
    ids = [d.id for d in plan.deletes]
    try:
        await _all(run.create(batch) for batch in plan.batches(run.max_bytes))
        await _all(run.update(update) for update in plan.updates)
        await _all(run.delete(chunk) for chunk in _chunks(ids, MAX_BULK_ROWS))
    except ConnectorError as exc:
        exc.written = run.result(time.perf_counter() - started)
        raise
    finally:
        await run.settle()
    return run.result(time.perf_counter() - started)


def written_before(exc: BaseException) -> PushResult | None:
    """What an apply that stopped with `exc` had written before (None: `exc` did not come
    from an apply). Rows in flight when it stopped may have been written too: a rerun of the
    push finds them and converges."""
    written = exc.written if isinstance(exc, ConnectorError) else None
    return written if isinstance(written, PushResult) else None


class _Run:
    """The state of one apply: counts, rejects, and the in-flight bound."""

    def __init__(
        self,
        client: AsyncClient,
        plan: Plan,
        slots: asyncio.Semaphore,
        bar: Progress | None,
    ) -> None:
        self.client = client
        self.plan = plan
        self.table_id = plan.table.id
        self.slots = slots
        self.bar = bar
        self.created = self.updated = self.deleted = self.requests = self.rereads = 0
        self.rejected: list[Rejected] = []
        #: Bulk create bodies stay under this; a 413 lowers it.
        self.max_bytes = MAX_REQUEST_BYTES
        self._next_read: asyncio.Future[Live] | None = None
        self._reads: set[asyncio.Future[Live]] = set()  # re-reads not yet finished

    def result(self, seconds: float) -> PushResult:
        """What was written so far; rows the server rejected make the push failed."""
        rejected = tuple(sorted(self.rejected, key=lambda r: (r.row or 0, r.id or "")))
        return PushResult(
            file=None,
            table=self.plan.table.name,
            status="failed" if rejected else "ok",
            created=self.created,
            updated=self.updated,
            deleted=self.deleted,
            unchanged=self.plan.unchanged,
            error=f"the server rejected {len(rejected)} rows" if rejected else None,
            plan=self.plan,
            rejected=rejected,
            requests=self.requests,
            problems=tuple(map(str, rejected)),
            rereads=self.rereads,
            seconds=seconds,
            concurrency=self.client.concurrency.peak,
        )

    async def send(self, request: Callable[[], Awaitable[T]]) -> T:
        """One write request, when a slot is free (the client's limiter paces it too)."""
        async with self.slots:
            self.requests += 1
            try:
                return await request()
            finally:
                if self.bar is not None:
                    self.bar.update(1)

    async def post(self, batch: list[Create]) -> bool:
        """One bulk create, when a slot is free; False (nothing sent) if by then a 413 has
        taught a size the batch exceeds. A row alone goes as a single create: a server's
        error then names no position in a request ("row 0") to confuse the report."""
        async with self.slots:
            if self.max_bytes < MAX_REQUEST_BYTES and len(create_batches(batch, self.max_bytes)) > 1:
                return False
            self.requests += 1
            try:
                if len(batch) == 1:
                    await self.client.create_row(self.table_id, batch[0].fields)
                else:
                    await self.client.add_rows(self.table_id, [c.fields for c in batch])
            finally:
                if self.bar is not None:
                    self.bar.update(1)
        return True

    async def create(self, batch: list[Create]) -> None:
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                if not await self.post(batch):
                    await _all(self.create(p) for p in create_batches(batch, self.max_bytes))
                    return
            except ApiValidationError as exc:
                await self._bisect(batch, exc)
                return
            except BadRequest as exc:
                if exc.status != TOO_LARGE:
                    raise
                await self._smaller(batch, exc)
                return
            except (ServerError, TransportError):
                if attempt == MAX_RECOVERIES:
                    raise
                batch = await self._still_missing(batch)
                if not batch:
                    return
                continue
            self.created += len(batch)
            return

    async def _bisect(self, batch: list[Create], exc: ApiValidationError) -> None:
        if len(batch) == 1:
            self._reject(batch[0].row, None, batch[0].fields, exc)
            return
        middle = len(batch) // 2
        await _all([self.create(batch[:middle]), self.create(batch[middle:])])

    async def _smaller(self, batch: list[Create], exc: BadRequest) -> None:
        """After a 413: send the batch again in parts at most half its size, and size every
        later batch so too; a row refused alone is rejected."""
        sizes = [body_bytes(c.fields) for c in batch]
        if len(batch) == 1:
            self._reject(batch[0].row, None, batch[0].fields, _too_large(sizes[0], exc))
            return
        self.max_bytes = min(self.max_bytes, max(sum(sizes) // 2, 1))
        await self.create(batch)  # cut to the size learnt (by this or another request)

    async def _still_missing(self, batch: list[Create]) -> list[Create]:
        """Re-read the table; count the batch's rows that made it, return the others."""
        live = await self._reread()
        present = _key_set(live, self.plan.key.columns)
        wanted = canonical_keys(self.plan.table, self.plan.key, [c.fields for c in batch])
        found = [k in present for k in _tuples(wanted)]
        self.created += sum(found)
        return [c for c, there in zip(batch, found, strict=True) if not there]

    async def update(self, update: Update) -> None:
        try:
            await self.send(
                partial(self.client.update_row, self.table_id, update.id, update.fields)
            )
        except ApiValidationError as exc:
            self._reject(update.row, update.id, update.key | update.fields, exc)
            return
        except BadRequest as exc:
            if exc.status != TOO_LARGE:
                raise
            reason = _too_large(body_bytes(update.fields), exc)
            self._reject(update.row, update.id, update.key | update.fields, reason)
            return
        except NotFound:
            reason = "the row was deleted meanwhile"
            self._reject(update.row, update.id, update.key | update.fields, reason)
            return
        self.updated += 1

    async def delete(self, ids: list[str]) -> None:
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                await self.send(partial(self.client.delete_rows, self.table_id, ids))
            except BadRequest as exc:
                if exc.status != TOO_LARGE or len(ids) == 1:
                    raise
                middle = len(ids) // 2
                await _all([self.delete(ids[:middle]), self.delete(ids[middle:])])
                return
            except NotFound:
                # All or nothing: some id is gone already (an unanswered earlier try, or
                # someone else). Delete the ones still there.
                if attempt == MAX_RECOVERIES:
                    raise
                live = await self._reread()
                existing = set(live.frame[live.table.system_names()["id"]].tolist())
                remaining = [i for i in ids if i in existing]
                self.deleted += len(ids) - len(remaining)
                ids = remaining
                if not ids:
                    return
                continue
            self.deleted += len(ids)
            return

    async def settle(self) -> None:
        """Stop a re-read no request waits for any more (the apply failed meanwhile): left
        running, it would outlive the apply and the loop."""
        for read in self._reads:
            read.cancel()
        await asyncio.gather(*self._reads, return_exceptions=True)

    async def _reread(self) -> Live:
        """The table as it is now. Failures seen while a re-read waits to start share it
        (a read that starts after a failure was seen shows whatever that request committed)."""
        if self._next_read is None:
            self._next_read = asyncio.ensure_future(self._read_soon())
            self._reads.add(self._next_read)
            self._next_read.add_done_callback(self._reads.discard)
        return await asyncio.shield(self._next_read)

    async def _read_soon(self) -> Live:
        await asyncio.sleep(REREAD_GATHER_SECONDS)
        self._next_read = None  # failures seen from now on need a later read
        self.rereads += 1
        return await read_live_async(self.client, self.plan.table, columns=self.plan.key.columns)

    def _reject(
        self, row: int | None, row_id: str | None, fields: dict[str, Any],
        reason: ApiValidationError | str,
    ) -> None:
        column = reason.field if isinstance(reason, ApiValidationError) else None
        message = reason.message if isinstance(reason, ApiValidationError) else reason
        self.rejected.append(Rejected(row, row_id, column, message, dict(fields)))


def write_rejects(path: str | Path, rejected: Sequence[Rejected], columns: Sequence[str]) -> None:
    """Rejected rows as CSV (UTF-8): source row, row id, column at fault, error, then cells.

    Text a spreadsheet would run as a formula is neutralised (`excel_safe`): the file is
    meant to be opened, fixed and pushed again.
    """
    with atomic_path(path) as temp, temp.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([excel_safe(c) for c in ["row", "id", "column", "error", *columns]])
        for r in rejected:
            cells = ["" if r.fields.get(c) is None else r.fields[c] for c in columns]
            line = [r.row or "", r.id or "", r.column or "", r.message, *cells]
            writer.writerow([excel_safe(c) if isinstance(c, str) else c for c in line])


def _too_large(size: int, exc: BadRequest) -> str:
    return f"the row is too large for one request ({size:,} bytes of JSON): {exc.message}"


async def _all(steps: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run `steps` concurrently; the first failure cancels the rest and is raised as itself."""
    try:
        async with asyncio.TaskGroup() as group:
            for step in steps:
                group.create_task(step)
    except BaseExceptionGroup as failed:
        first: BaseException = failed
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


def _key_set(live: Live, key: Sequence[str]) -> set[tuple[Any, ...]]:
    return set(_tuples(live.frame[list(key)]))


def _tuples(frame: Any) -> Iterable[tuple[Any, ...]]:
    return zip(*(frame[c].tolist() for c in frame.columns), strict=True)


def _chunks(items: list[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
