"""Fault injection, so clients are tested against real failures over real sockets.

    fail_rate              500 before doing anything
    throttle_rate          429 with Retry-After before doing anything
    latency_ms             every request waits this long first
    fail_after_write_rate  a write commits, then the answer is a 500 (ambiguous failure)
    drop_rate              the connection is cut mid-response (after committing, for writes)
    late_visibility_ms     writes are stamped on arrival and reach reads this long after
                           (`late.LateWrites`: a lagging replica, a slow commit)
    stamp_updated_at       rows created or changed get this `updated_at` (and new rows this
    stamp_created_at       `created_at`) instead of the clock's: a workspace with a wrong
                           clock, an import with odd stamps (any instant from year 1 to 9999,
                           ISO 8601 UTC; kept as the server writes stamps, so the order of the
                           text is the order in time); null: the clock's
    rate_headers           the header forms the rate limit is published in (``ietf``,
                           ``draft``, ``x``, comma-separated; ``none``): `ratelimit.published`

Faults of the rows list: the first two change the table while it is being read
(`disturb_read` runs before a page of ``GET /tables/:id/rows`` is served, through the normal
write path, so the offset marks of `paging.OffsetIndex` are carried as for any client's
write); the last two make a server that pages or filters less than ours:

    delete_on_read         delete up to N rows the read has passed (before its offset, in
                           its order and filter), picked by the seeded dice; none at offset 0
    insert_on_read         insert N rows, each a copy of the fields of a random existing row
                           (none into an empty table)
    max_page_size          clamp `limit` to N instead of 1000 (the applied limit is reported)
    refuse_system_filters  a filter on id, created_at or updated_at is a 400 VALIDATION_ERROR
                           with field "filter" (sorting by them still works)

With ``--fault-control``, ``PUT /v1/_faults`` with a JSON object of settings (these names)
replaces them at once (`Faults.replace`; 400 naming an unknown or bad one), so a test can
disturb one run and leave the next one quiet; ``GET /v1/_faults`` shows them all. Both take
only an admin key (``connector keys create --admin``; any other key gets 403) and bypass the
faults themselves; without the flag they are 404.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from connector.server.ratelimit import DEFAULT_HEADERS, header_forms

if TYPE_CHECKING:
    from connector.server.columns import TableDef
    from connector.server.query import RowQuery
    from connector.server.storage import Storage

class BadSetting(ValueError):
    """A fault setting that is unknown or has a bad value; `setting` names it."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


_RATES = ("fail_rate", "throttle_rate", "fail_after_write_rate", "drop_rate")
_COUNTS = ("delete_on_read", "insert_on_read")
_DELAYS = ("latency_ms", "late_visibility_ms")
_STAMPS = ("stamp_created_at", "stamp_updated_at")


@dataclass(frozen=True)
class Faults:
    """Probabilities (0..1), a delay, and table changes; all zero means a well-behaved server."""

    fail_rate: float = 0.0
    throttle_rate: float = 0.0
    latency_ms: float = 0.0
    fail_after_write_rate: float = 0.0
    drop_rate: float = 0.0
    seed: int | None = None
    delete_on_read: int = 0
    insert_on_read: int = 0
    max_page_size: int | None = None  # None: the API's 1000
    refuse_system_filters: bool = False
    late_visibility_ms: float = 0.0
    stamp_created_at: str | None = None
    stamp_updated_at: str | None = None
    rate_headers: str = DEFAULT_HEADERS
    _rng: random.Random = field(init=False, repr=False, compare=False)
    #: `rate_headers` as the forms it names.
    rate_forms: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Checks types too: settings also arrive as JSON (``PUT /v1/_faults``)."""
        for name in (*_RATES, *_DELAYS):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadSetting(name, f"{name} must be a number, got {value!r}")
        for name in _RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise BadSetting(name, f"{name} must be between 0 and 1, got {value}")
        for name in _DELAYS:
            if getattr(self, name) < 0:
                raise BadSetting(name, f"{name} must be >= 0, got {getattr(self, name)}")
        for name in _COUNTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadSetting(name, f"{name} must be an integer >= 0, got {value!r}")
        size = self.max_page_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise BadSetting("max_page_size", f"max_page_size must be an integer >= 1 (or null), got {size!r}")
        if not isinstance(self.refuse_system_filters, bool):
            raise BadSetting("refuse_system_filters", f"refuse_system_filters must be true or false, got {self.refuse_system_filters!r}")
        if not isinstance(self.rate_headers, str):
            raise BadSetting("rate_headers", f"rate_headers must be a string like \"ietf,x\", got {self.rate_headers!r}")
        try:
            object.__setattr__(self, "rate_forms", header_forms(self.rate_headers))
        except ValueError as exc:
            raise BadSetting("rate_headers", str(exc)) from None
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise BadSetting("seed", f"seed must be an integer (or null), got {self.seed!r}")
        for name in _STAMPS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _stamp(name, value))
        object.__setattr__(self, "_rng", random.Random(self.seed))

    def replace(self, changes: Mapping[str, Any]) -> Faults:
        """These settings with `changes` (field names) applied; `BadSetting` naming a bad one.

        The dice roll on from where they were, unless `changes` sets a new `seed`.
        """
        known = {f.name for f in dataclasses.fields(self) if f.init}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise BadSetting(unknown[0], f"unknown fault setting {unknown[0]!r}; settings: {sorted(known)}")
        new = dataclasses.replace(self, **changes)
        if "seed" not in changes:
            object.__setattr__(new, "_rng", self._rng)
        return new

    def settings(self) -> dict[str, Any]:
        """Every setting by name, as ``PUT /v1/_faults`` takes them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    @property
    def disturbs_reads(self) -> bool:
        return bool(self.delete_on_read or self.insert_on_read)

    def hit(self, rate: float) -> bool:
        """True with probability `rate`."""
        return rate > 0.0 and self._rng.random() < rate


def _stamp(name: str, value: Any) -> str:
    """`value` as the server writes stamps (``0001-01-01T00:00:00.000000Z``): four-digit
    year, microseconds, ``Z``, so stamps compare as text in time order."""
    if isinstance(value, str) and _INSTANT.fullmatch(value):
        try:
            instant = datetime.fromisoformat(value[:-1])
        except ValueError:
            pass
        else:
            return instant.isoformat(timespec="microseconds") + "Z"
    raise BadSetting(
        name, f"{name} must be a UTC time like 2999-01-01T00:00:00Z (or null), got {value!r}"
    )


_INSTANT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z")


def disturb_read(faults: Faults, storage: Storage, table: TableDef, query: RowQuery) -> None:
    """Before a page is served: delete rows the read has passed, and insert copies of rows.

    Both go through the storage's normal writes, so offset marks are carried as for any write.
    """
    rng = faults._rng
    if faults.delete_on_read and query.offset:
        passed = storage.row_ids_before(query)
        victims = rng.sample(passed, min(faults.delete_on_read, len(passed)))
        if victims:
            storage.delete_rows(table, victims)
    if faults.insert_on_read:
        count = storage.row_count(table.id)
        if count:
            copies = [storage.row_fields(table, rng.randrange(count)) for _ in range(faults.insert_on_read)]
            storage.insert_rows(table, [table.check_create(f) for f in copies if f is not None])
