"""Timestamps as the API writes them (ISO 8601, UTC, microseconds, ``Z``): comparable as
strings, which is how cursors are kept in a job's state.

Any instant from year 1 to 9999 is a stamp: a server with a wrong clock writes them. Every
stamp we keep or send is in one shape, four-digit year included (``0001-01-01T...``;
`strftime` writes year 1 as ``1``, which no parser reads back), so the order of the text is
the order in time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = [
    "CLOCK_MARGIN", "EPOCH", "horizon", "iso", "micros", "micros_of", "now", "parse", "stamp_of",
]

#: The cursor of a table that was empty when synced: every row is newer.
EPOCH = "1970-01-01T00:00:00.000000Z"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)

#: How far past the server's clock (its ``Date``) a row's stamp may be and still be taken as
#: the server's own: the header has whole seconds and may be a second old, and the machines
#: behind one API keep slightly different time. A stamp further ahead is a wrong clock.
CLOCK_MARGIN = timedelta(seconds=60)


def iso(value: datetime) -> str:
    """The API's timestamp shape (microseconds, ``Z``, a four-digit year), comparable as a
    string; a time without a zone is taken as UTC."""
    stamp = value.astimezone(UTC) if value.tzinfo is not None else value
    return stamp.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse(stamp: str) -> datetime:
    """An API timestamp as a UTC datetime; ValueError for text that is not one (a time
    without a zone included: UTC is not to be guessed)."""
    if not isinstance(stamp, str):
        raise ValueError(f"not a timestamp: {stamp!r}")
    value = datetime.fromisoformat(stamp)
    if value.tzinfo is None or "T" not in stamp:
        raise ValueError(f"not a UTC timestamp like 2024-05-06T07:08:09.123456Z: {stamp!r}")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00, an instant before year 1
        raise ValueError(f"a timestamp before year 1 or after 9999: {stamp!r}") from None


def micros(stamp: str) -> int:
    """UTC microseconds of an API timestamp, to compare with stamps cast to integers (a
    time-zone-aware Arrow scalar made from a datetime makes pyarrow import pandas)."""
    return micros_of(parse(stamp))


def micros_of(value: datetime) -> int:
    """UTC microseconds since the epoch of `value` (a time without a zone taken as UTC):
    how every path compares a time with stamps held as integers."""
    stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (stamp - _EPOCH) // timedelta(microseconds=1)


def stamp_of(micros: int) -> str:
    """The API timestamp of UTC microseconds since the epoch (`micros`'s inverse)."""
    return iso(_EPOCH + timedelta(microseconds=micros))


def now() -> str:
    return iso(datetime.now(UTC))


def horizon(clock: datetime | None) -> str:
    """The latest stamp taken as the server's own: its clock (`clock`, its ``Date``; ours
    when it sent none) plus `CLOCK_MARGIN`. A cursor never passes it."""
    base = clock if clock is not None else datetime.now(UTC)
    return iso(base + CLOCK_MARGIN if base < _LAST - CLOCK_MARGIN else _LAST)
