"""Rows as the server stores and sends them: stamps, ids, pages.

Timestamps are ISO 8601 UTC with microseconds, strictly increasing within a process (so rows
of one bulk request keep their order); ids lead with the creation time.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Clock", "Page", "iso", "row_dict", "row_id", "wire_size"]


@dataclass(frozen=True)
class Page:
    """A page of rows as stored: (id, created_at, updated_at, fields JSON) records.

    `cut` is True when the page holds fewer rows than asked because more would have made
    the response larger than the size asked for (see `Storage.list_rows`).
    """

    records: list[tuple[str, str, str, str]]
    total: int
    cut: bool = False

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows as Python values."""
        return [row_dict(r[0], r[1], r[2], orjson.loads(r[3])) for r in self.records]

    def wire_rows(self) -> list[dict[str, Any]]:
        """The rows for a JSON response: stored `fields` text goes out as is, unparsed."""
        return [row_dict(r[0], r[1], r[2], orjson.Fragment(r[3])) for r in self.records]


def wire_size(record: tuple[Any, ...]) -> int:
    """Bytes a stored row takes in a JSON page: its `fields` text plus the rest, roughly."""
    fields: str = record[3]
    return (len(fields) if fields.isascii() else len(fields.encode())) + 128


def row_dict(rid: str, created: str, updated: str, fields: Any) -> dict[str, Any]:
    """A row as the API shows it."""
    return {"id": rid, "fields": fields, "created_at": created, "updated_at": updated}


class Clock:
    """ISO 8601 UTC timestamps with microseconds, strictly increasing within a process.

    Rows created in one bulk request get distinct, ordered stamps, so (created_at, id)
    is request order. Returned as microseconds since the epoch; `iso` formats them.
    """

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def ticks(self, n: int = 1) -> range:
        """`n` consecutive, never reused microsecond stamps."""
        with self._lock:
            start = max(time.time_ns() // 1000, self._last + 1)
            self._last = start + n - 1
        return range(start, start + n)

    def now(self) -> str:
        return iso(self.ticks()[0])


_EPOCH = dt.datetime(1970, 1, 1)


def iso(micros: int) -> str:
    """"2024-05-06T07:08:09.123456Z" for microseconds since the epoch."""
    return (_EPOCH + dt.timedelta(microseconds=micros)).isoformat(timespec="microseconds") + "Z"


def row_id(micros: int) -> str:
    """Ids lead with the creation time, so new rows append to the primary-key index.

    The random tail only keeps ids unique across processes writing the same file; ids are
    not secrets, so `random` (not `secrets`) is enough.
    """
    return f"row_{micros:013x}{random.getrandbits(32):08x}"
