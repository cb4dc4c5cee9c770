"""A push's plan: every write it would make (`Plan`), as a person reads it (`Plan.describe`),
saved as JSON, cut into requests, and held to its delete guard.

For each row it touches a plan holds what it expected to find, so a plan saved to JSON and
applied later (`connector apply`) can refuse when those rows changed in between
(`connector.push.diff.check_current`). How a plan is made: `connector.push.diff`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

import orjson

from connector.api import MAX_BULK_ROWS
from connector.errors import ConfigError, DeleteGuard, PlanError
from connector.modes import PUSH_MODES, PushMode
from connector.push.spec import Names, setting
from connector.push.validate import Key
from connector.schema import Column, Table

__all__ = [
    "MODES",
    "Counts",
    "Create",
    "Delete",
    "DeleteGuard",
    "Mode",
    "Plan",
    "PlanError",
    "Update",
    "body_bytes",
    "check_delete_guard",
    "create_batches",
]

#: Kept as names here for `connector.push`'s exports; defined in `connector.modes`.
Mode = PushMode
MODES = PUSH_MODES
#: The largest bulk create body we send (compact JSON bytes): just under the 1 MiB that
#: common proxies (nginx's default ``client_max_body_size``) accept. A server that answers
#: 413 to less teaches the apply a smaller size (`connector.push.writes`).
MAX_REQUEST_BYTES = 1_000_000
#: The bytes a bulk create body adds around its rows: ``{"rows":[`` ... ``]}``.
_BODY_BYTES = len(b'{"rows":[]}')
#: A mirror may delete at most this share of the table unless the user raises it.
DEFAULT_MAX_DELETE_RATIO = 0.2
PLAN_FORMAT = 1
#: Rows of each kind shown in a plan's sample (`Plan.describe`).
SAMPLE = 5


@dataclass(frozen=True)
class Create:
    """A row to create: its source row number and its non-empty cells (JSON values)."""

    row: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class Update:
    """A PATCH of only the changed cells, with the values and timestamp it expects to replace,
    and the row's key cells (for a report of a rejected update; empty when the key is the id)."""

    row: int
    id: str
    fields: dict[str, Any]
    old: dict[str, Any]
    updated_at: str | None
    key: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Delete:
    """A row to delete (mirror), with its key cells and the timestamp it expects."""

    id: str
    key: dict[str, Any]
    updated_at: str | None


@dataclass(frozen=True)
class Counts:
    """Rows by what happens to them (planned, or done)."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class Plan:
    """Every write a push would make, and what it expects of the rows it touches."""

    table: Table
    key: Key
    mode: Mode
    source: str
    source_rows: int
    table_rows: int
    creates: tuple[Create, ...] = ()
    updates: tuple[Update, ...] = ()
    deletes: tuple[Delete, ...] = ()
    unchanged: int = 0
    #: Source rows the mode leaves alone (insert: already there; update: not there).
    skipped: int = 0
    coercions: dict[str, int] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    #: (header, column) for each header taken as a column it spells only loosely
    #: (`connector.push.validate.match_header`).
    taken: tuple[tuple[str, str], ...] = ()
    #: `batches` by body bound: each row's body measured once (300,000 rows: 0.4 s a time).
    _batches: dict[int, list[list[Create]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def batches(self, max_bytes: int = MAX_REQUEST_BYTES) -> list[list[Create]]:
        """The creates cut into bulk requests (`create_batches`), for the summary and the
        writes alike."""
        if max_bytes not in self._batches:
            self._batches[max_bytes] = create_batches(self.creates, max_bytes)
        return self._batches[max_bytes]

    @property
    def create_requests(self) -> int:
        """Bulk creates needed: at most 100 rows and `MAX_REQUEST_BYTES` each."""
        return len(self.batches())

    @property
    def delete_requests(self) -> int:
        """Bulk deletes needed: at most 100 ids each."""
        return math.ceil(len(self.deletes) / MAX_BULK_ROWS)

    @property
    def requests(self) -> int:
        """Write requests needed: bulk creates (by rows and bytes), one per update, one per
        100 deletes."""
        return self.create_requests + len(self.updates) + self.delete_requests

    @property
    def counts(self) -> Counts:
        return Counts(len(self.creates), len(self.updates), len(self.deletes), self.unchanged)

    @property
    def is_empty(self) -> bool:
        return not (self.creates or self.updates or self.deletes)

    def describe(self, sample: int = SAMPLE) -> str:
        """The plan as a person reads it: counts, coercions, a sample of each kind of write,
        and the exact request count."""
        creates, updates, deletes = len(self.creates), len(self.updates), len(self.deletes)
        lines = [
            f"plan: {self.source} -> table {self.table.name!r} ({self.table.id}), "
            f"key {self.key}, mode {self.mode}",
            f"  source rows {self.source_rows}, table rows {self.table_rows}",
            f"  create {creates}, update {updates}, delete {deletes}, "
            f"unchanged {self.unchanged}, skipped {self.skipped}",
            f"  requests: {self.create_requests} bulk create + {updates} update + "
            f"{self.delete_requests} bulk delete = {self.requests}",
        ]
        if self.ignored:
            lines.append(f"  ignored columns: {', '.join(self.ignored)}")
        lines += [f"  header {header!r} taken as column {column!r}" for header, column in self.taken]
        if self.coercions:
            lines.append("coercions:")
            lines += [f"  {rule}: {count}" for rule, count in self.coercions.items()]
        if self.creates:
            lines.append(f"creates ({_shown(creates, sample)}):")
            lines += [f"  row {c.row}: {_cells(c.fields)}" for c in self.creates[:sample]]
        if self.updates:
            lines.append(f"updates ({_shown(updates, sample)}):")
            for u in self.updates[:sample]:
                changes = "; ".join(
                    f"{_column(name)}: {_value(u.old.get(name))} → {_value(value)}"
                    for name, value in u.fields.items()
                )
                lines.append(f"  row {u.row} ({u.id}): {changes}")
        if self.deletes:
            lines.append(f"deletes ({_shown(deletes, sample)}):")
            lines += [
                f"  {d.id}" + (f": {_cells(d.key)}" if d.key else "") for d in self.deletes[:sample]
            ]
        return "\n".join(lines)

    def to_json(self) -> bytes:
        data = asdict(replace(self))  # a copy without the batches measured for the writes
        del data["_batches"]
        data["format"] = PLAN_FORMAT
        data["key"] = {"columns": list(self.key.columns), "by_id": self.key.by_id}
        return orjson.dumps(data, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Plan:
        """Load a saved plan; ConfigError when it is not one of ours."""
        try:
            data = orjson.loads(raw)
            if data.get("format") != PLAN_FORMAT:
                raise ValueError(f"unknown plan format {data.get('format')!r}")
            table = data["table"]
            columns = tuple(
                Column(**{**c, "options": tuple(c["options"]) if c.get("options") else None})
                for c in table["columns"]
            )
            mode = data["mode"]
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}")
            return cls(
                table=Table(table["id"], table["name"], columns),
                key=Key(tuple(data["key"]["columns"]), bool(data["key"]["by_id"])),
                mode=mode,
                source=str(data["source"]),
                source_rows=int(data["source_rows"]),
                table_rows=int(data["table_rows"]),
                creates=tuple(Create(**c) for c in data["creates"]),
                updates=tuple(Update(**u) for u in data["updates"]),
                deletes=tuple(Delete(**d) for d in data["deletes"]),
                unchanged=int(data["unchanged"]),
                skipped=int(data["skipped"]),
                coercions={str(k): int(v) for k, v in data["coercions"].items()},
                ignored=tuple(data["ignored"]),
                taken=tuple((str(h), str(c)) for h, c in data.get("taken", ())),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"not a push plan file: {exc}") from None


def body_bytes(fields: Mapping[str, Any]) -> int:
    """The bytes one row adds to a bulk create body (its ``{"fields":...}`` and a comma)."""
    return len(orjson.dumps({"fields": fields})) + 1


#: What ``{"fields":...}`` adds to a row's fields.
_ROW_BYTES = len(b'{"fields":}')


def create_batches(
    creates: Sequence[Create], max_bytes: int = MAX_REQUEST_BYTES, max_rows: int = MAX_BULK_ROWS
) -> list[list[Create]]:
    """`creates` in order, cut into bulk requests of at most `max_rows` rows and `max_bytes`
    bytes of body; a row larger than `max_bytes` by itself goes alone.

    While batches fill by count, the next `max_rows` rows are measured in one serialization
    and taken whole when they fit (300,000 short rows: 0.06 s, not 0.12 s a row at a time);
    after a batch the bytes closed, rows are measured one at a time (about once each: wide rows
    measured a hundred at a time for a batch of a few were measured many times over)."""
    batches: list[list[Create]] = []
    start, by_count = 0, True
    while start < len(creates):
        batch = list(creates[start:start + max_rows])
        if not (by_count and _batch_bytes(batch) <= max_bytes):
            batch = _fitting(batch, max_bytes)
        by_count = len(batch) == max_rows
        batches.append(batch)
        start += len(batch)
    return batches


def _batch_bytes(batch: list[Create]) -> int:
    """The bytes of `batch`'s whole bulk create body, in one serialization of its rows' fields (the list's
    commas are the body's; its brackets are not)."""
    return _BODY_BYTES + len(orjson.dumps([c.fields for c in batch])) - 2 + len(batch) * _ROW_BYTES


def _fitting(creates: list[Create], max_bytes: int) -> list[Create]:
    """The first of `creates` that fit a body of `max_bytes` together (at least one)."""
    size = _BODY_BYTES - 1  # `body_bytes` counts a comma after each row, a body one fewer
    for taken, create in enumerate(creates):
        size += body_bytes(create.fields)
        if taken and size > max_bytes:
            return creates[:taken]
    return creates


def check_delete_guard(
    plan: Plan, *, max_delete_ratio: float | None = None, allow_delete: int | None = None,
    names: Names = "parameters",
) -> None:
    """Refuse a mirror deleting more than allowed (default 20% of the table; none if the
    source is empty) unless `max_delete_ratio` or `allow_delete` (in range: a `PushSpec`
    checked them) raise the limit."""
    if not plan.deletes:
        return
    if max_delete_ratio is None and allow_delete is None:
        ratio = 0.0 if plan.source_rows == 0 else DEFAULT_MAX_DELETE_RATIO
    else:
        ratio = max_delete_ratio or 0.0
    # As the decimal the user typed (repr is the shortest that round-trips): 0.57 of 100
    # rows is 57, where the float product 56.99999999999999 would floor to 56.
    share = Fraction(repr(ratio)) * plan.table_rows
    limit = max(math.floor(share), allow_delete or 0)
    if len(plan.deletes) > limit:
        why = "the source is empty" if plan.source_rows == 0 else f"the limit is {limit}"
        raise DeleteGuard(
            f"mirror would delete {len(plan.deletes)} of {plan.table_rows} rows of table "
            f"{plan.table.name!r} and {why}; nothing was written. Check the source, or allow "
            f"it with {setting('allow_delete', names, len(plan.deletes))} (or "
            f"{setting('max_delete_ratio', names)})"
        )


def _shown(total: int, sample: int) -> str:
    return f"first {sample} of {total}" if total > sample else str(total)


def _cells(fields: dict[str, Any]) -> str:
    return ", ".join(f"{_column(k)}={_value(v)}" for k, v in fields.items())


def _column(name: str) -> str:
    """A column's name as shown, quoted when spaces at an end or unprintable characters
    would hide how it is spelled (``x `` and ``x`` are two columns)."""
    return name if name == name.strip() and name.isprintable() else repr(name)


def _value(value: Any) -> str:
    if value is None:
        return "(empty)"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value) if isinstance(value, str) else str(value)
