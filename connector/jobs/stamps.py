"""Timestamps as the API writes them (ISO 8601, UTC, microseconds, ``Z``): comparable as
strings, which is how cursors are kept in a job's state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["EPOCH", "iso", "micros", "newer", "now", "parse"]

#: The cursor of a table that was empty when synced: every row is newer.
EPOCH = "1970-01-01T00:00:00.000000Z"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso(value: datetime) -> str:
    """The API's timestamp shape (microseconds, ``Z``), comparable as a string; a time
    without a zone is taken as UTC."""
    stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


def micros(stamp: str) -> int:
    """UTC microseconds of an API timestamp, to compare with stamps cast to integers (a
    time-zone-aware Arrow scalar made from a datetime makes pyarrow import pandas)."""
    return (parse(stamp) - _EPOCH) // timedelta(microseconds=1)


def now() -> str:
    return iso(datetime.now(UTC))


def newer(cursor: str | None, stamps: pa.Array | pa.ChunkedArray) -> str | None:
    """The later of `cursor` and the newest of `stamps` (UTC microseconds). Read as integers:
    a time-zone-aware timestamp scalar's `as_py` would make pyarrow import pandas."""
    micros = pc.max(stamps.cast(pa.int64())).as_py() if len(stamps) else None
    if micros is None:
        return cursor
    stamp = iso(_EPOCH + timedelta(microseconds=micros))
    return max(cursor or stamp, stamp)
