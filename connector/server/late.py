"""The late-visibility fault: writes stamped on arrival, seen by reads D ms later.

What a client meets behind a lagging read replica, or a server that stamps a row when the
request arrives and commits it later: a row whose `updated_at` is older than the moment it
became visible. An incremental reader that keeps only rows newer than its last cursor
misses it, unless it re-reads a window behind the cursor.

With `late_visibility_ms` = D > 0, row creates, bulk creates, updates and deletes are
checked and answered at once, against everything written so far (visible or not, as the
primary of a replicated database would), and stamped then: `created_at` and `updated_at`
are the arrival time. The write is queued, and reaches the database, where every read
looks (pages, `total`, filters, sorts, the table list's row counts), D ms after it
arrived. Deletes are delayed too: a deleted row stays visible for D ms, as on a replica.

Queued writes reach the database in arrival order (a replica replays its log in order),
so one whose D was shortened at run time waits for those before it. Every request first
applies the writes that are due, and a timer applies them on time between requests. A
server stopped by SIGTERM or Ctrl-C applies what is still queued before it exits; `kill
-9` loses it, like any write a server had acknowledged but not committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from connector.server.columns import TableDef
from connector.server.problems import ApiProblem, echo, not_found
from connector.server.storage import Storage

log = logging.getLogger("connector.server")


@dataclass(frozen=True)
class _Insert:
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class _Update:
    row_id: str
    changes: dict[str, Any]
    stamp: str


@dataclass(frozen=True)
class _Delete:
    row_ids: list[str]


@dataclass(frozen=True)
class _Pending:
    due: float  # time.monotonic() at which it becomes visible
    table: TableDef
    write: _Insert | _Update | _Delete


class LateWrites:
    """Row writes through `storage`, each visible `delay_ms` after it arrived (0: at once)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._queue: deque[_Pending] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    # -- the writes: each answers as the storage's own would ------------------------------

    def insert_rows(
        self, table: TableDef, cells: Sequence[dict[str, Any]], delay_ms: float, *,
        created_at: str | None = None, updated_at: str | None = None,
    ) -> list[dict[str, Any]]:
        """`created_at` / `updated_at`: stamps instead of the clock's (see `faults`)."""
        stamps = {"created_at": created_at, "updated_at": updated_at}
        if self._direct(delay_ms):
            return self.storage.insert_rows(table, cells, **stamps)
        rows = self.storage.new_rows(table, cells, **stamps)
        self._queue_up(table, _Insert(rows), delay_ms)
        return rows

    def update_row(
        self, table: TableDef, row_id: str, changes: dict[str, Any], delay_ms: float, *,
        stamp: str | None = None,
    ) -> dict[str, Any]:
        """`stamp`: the ``updated_at`` instead of the clock's (see `faults`)."""
        if self._direct(delay_ms):
            return self.storage.update_row(table, row_id, changes, stamp=stamp)
        row = self._latest(table, row_id)
        if row is None:
            raise not_found(f"row {echo(row_id)} does not exist in table {table.id!r}")
        stamp = stamp or self.storage.clock.now()
        self._queue_up(table, _Update(row_id, changes, stamp), delay_ms)
        fields = table.present({**row["fields"], **changes})
        return {"id": row_id, "fields": fields, "created_at": row["created_at"], "updated_at": stamp}

    def delete_rows(self, table: TableDef, row_ids: Sequence[str], delay_ms: float) -> list[str]:
        if self._direct(delay_ms):
            return self.storage.delete_rows(table, row_ids)
        unique = list(dict.fromkeys(row_ids))
        for row_id in unique:
            if self._latest(table, row_id) is None:
                raise ApiProblem(
                    404, f"row {echo(row_id)} does not exist in table {table.id!r}; nothing was deleted"
                )
        self._queue_up(table, _Delete(unique), delay_ms)
        return unique

    # -- making them visible --------------------------------------------------------------

    def apply_due(self) -> None:
        """Apply, in arrival order, every queued write whose time has come."""
        now = time.monotonic()
        while self._queue and self._queue[0].due <= now:
            self._apply(self._queue[0])
            self._queue.popleft()

    def apply_all(self) -> None:
        """Apply every queued write now (the server is stopping)."""
        while self._queue:
            self._apply(self._queue[0])
            self._queue.popleft()

    def _apply(self, pending: _Pending) -> None:
        table, write = pending.table, pending.write
        try:
            if isinstance(write, _Insert):
                self.storage.put_rows(table, write.rows)
            elif isinstance(write, _Update):
                self.storage.update_row(table, write.row_id, write.changes, stamp=write.stamp)
            else:
                self.storage.delete_rows(table, write.row_ids, missing_ok=True)
        except ApiProblem as exc:
            # The row or a column went away in the meantime (another writer, `alter-table`):
            # the write is dropped, as a replica drops a change its data no longer allows.
            log.warning("a late write to table %s was dropped: %s", table.id, exc.message)

    # -- helpers --------------------------------------------------------------------------

    def _direct(self, delay_ms: float) -> bool:
        """Write straight through: no delay, and nothing queued that must land first."""
        return delay_ms <= 0 and not self._queue

    def _queue_up(self, table: TableDef, write: _Insert | _Update | _Delete, delay_ms: float) -> None:
        due = time.monotonic() + delay_ms / 1000
        if self._queue:
            due = max(due, self._queue[-1].due)  # in arrival order
        self._queue.append(_Pending(due, table, write))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a direct call): requests apply it when due
            return
        loop.call_later(max(0.0, due - time.monotonic()), self._on_timer)

    def _on_timer(self) -> None:
        try:
            self.apply_due()
        except Exception:  # e.g. the database is locked: the next request tries again
            log.exception("applying late writes failed; the next request tries again")

    def _latest(self, table: TableDef, row_id: str) -> dict[str, Any] | None:
        """The row as the queued writes leave it (None: absent or deleted)."""
        row = self.storage.row(table.id, row_id)
        for pending in self._queue:
            write = pending.write
            if pending.table.id != table.id:
                continue
            if isinstance(write, _Insert):
                row = next((r for r in write.rows if r["id"] == row_id), row)
            elif isinstance(write, _Update) and row is not None and write.row_id == row_id:
                row = {**row, "fields": {**row["fields"], **write.changes}, "updated_at": write.stamp}
            elif isinstance(write, _Delete) and row_id in write.row_ids:
                row = None
        return row
