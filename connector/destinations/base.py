"""The one protocol every destination implements, and the values that cross it.

A destination holds one table per API table (a file, a SQL table, a Delta or Iceberg table)
and changes it only through `Destination.apply`: the schema evolved, rows written, rows
deleted or marked, all in ONE commit (one transaction, one atomic file swap, one table
commit). So a failed or stopped write leaves the table as it was, and a job's state, saved
only after every destination committed, never runs ahead of what a destination holds.

    check()            unreachable or misconfigured: fail now, before any read
    version()          a token that moves with every change here (None: none read cheaply)
    held()             the table names it holds, and which table id each holds
    claim(names)       record which table id each name holds (after a run's first commit)
    locate(t)          where the table is, as a person reads it
    stored(t)          the table's schema as held here (None: no such table yet)
    scan(t, columns)   its live rows (not marked deleted), batch by batch
    apply(t, change)   evolve + write + delete/mark, atomically -> `Committed`
    close()

What a kind can do is data (`Capabilities`), read by the runner and the docs; how it does it
is its own module's business.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from connector.arrays import arrow_mask, int64_values, no_ids
from connector.destinations.arrow import plain_type
from connector.destinations.registry import Capabilities, DeletePolicy, DestinationConfig, kind
from connector.errors import ConnectorError, DestinationError
from connector.modes import WriteMode
from connector.schema import META_SYSTEM, Table, arrow_schema
from connector.stamps import micros_of

if TYPE_CHECKING:
    from connector.destinations.evolve import SchemaOp
    from connector.ids import IdSet

__all__ = [
    "MARK_TYPE",
    "Capabilities",
    "Committed",
    "DeletePolicy",
    "Destination",
    "TableChange",
    "Target",
]

#: The type of the mark column, which a ``deletes = "mark"`` destination stamps on rows
#: deleted upstream (`Target.deleted_name`): the time the deletion was seen. Every
#: destination that takes marks has it from its first write.
MARK_TYPE = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Target:
    """One API table in one destination: what its rows look like and what it is called there."""

    table: Table
    #: The table's name in this destination, as the destination holds it (`connector.naming`).
    name: str

    @cached_property
    def schema(self) -> pa.Schema:
        """The rows' Arrow schema (`connector.schema.arrow_schema`): system fields, then
        the columns."""
        return arrow_schema(self.table)

    @cached_property
    def _system(self) -> dict[str, str]:
        return self.table.system_names()

    @property
    def id_name(self) -> str:
        return self._system["id"]

    @property
    def updated_name(self) -> str:
        return self._system["updated_at"]

    @property
    def deleted_name(self) -> str:
        """The mark column (``_deleted_at``, or more underscores while a user column has
        that name: `connector.schema.Table.system_names`)."""
        return self._system["deleted_at"]

    @cached_property
    def deleted_field(self) -> pa.Field:
        return pa.field(self.deleted_name, MARK_TYPE, metadata={META_SYSTEM: b"deleted_at"})

    def with_marks(self, marks: bool) -> pa.Schema:
        """The schema a table holds: the rows' fields, and the mark column when it takes marks."""
        return self.schema.append(self.deleted_field) if marks else self.schema


@dataclass(frozen=True)
class TableChange:
    """Everything one commit applies to one table.

    ``replace``: the table becomes `rows`. ``append``: rows whose ids the table does not hold
    yet are added (held ones, marked ones included, stay as they are). ``merge``: `rows` are
    upserted by id (a marked row that comes back loses its mark) and `deleted` removed, or
    with `mark` stamped in the mark column (`Target.deleted_name`; a stamp already set stays).

    `mark` also means the table carries the mark column from its first write, so marks work
    whichever order creates, updates and deletes arrive in. `evolve` lists the column changes
    since the table was written (renames are known only from it); the destination makes its
    columns those of the target's schema before the rows go in, converting held values.
    `ids`, when given, are the ids of `rows` (a file merge then streams them).
    """

    mode: WriteMode
    rows: Iterable[pa.RecordBatch] = ()
    deleted: pa.Array = field(default_factory=no_ids)
    mark: bool = False
    evolve: tuple[SchemaOp, ...] = ()
    ids: IdSet | None = None


@dataclass(frozen=True)
class Committed:
    """What one commit did, in the same terms for every destination: rows written (inserted
    or replaced; for an append only the new ones) and rows deleted (removed, or newly marked)."""

    written: int = 0
    deleted: int = 0


class Destination(Protocol):
    """One destination of a run. Opened by `connector.destinations.open_destination`."""

    config: DestinationConfig
    capabilities: Capabilities

    def check(self) -> None:
        """Fail now (`DestinationError`, `ConfigError`) if the destination cannot be used."""

    def version(self) -> str | None:
        """A token that changes whenever anything held here changes (any writer's commit, a
        name claimed), read without opening the destination's library; None: none such.
        What lets a run answer from what it remembers (`connector.destinations.remembered`)."""

    def held(self) -> dict[str, str | None]:
        """The table names held here (as `Target.name` spells them) and the table id each
        holds (None: an object no record names), in the order recorded
        (`connector.destinations.held`). What `connector.naming` names tables from."""

    def claim(self, names: Mapping[str, str]) -> None:
        """Record that each name holds its table id (called once a run's first table
        committed here, with every name of the run)."""

    def locate(self, target: Target) -> str:
        """Where the table is, as a person reads it (a file, a URL, a SQL table name)."""

    def stored(self, target: Target) -> pa.Schema | None:
        """The table's columns as held here, as Arrow fields; None when there is no table."""

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The live rows held here (marked ones left out), only `columns` (those held;
        a column not held is left out), batch by batch. Nothing when there is no table.
        `updated_after`: only rows whose ``updated_at`` is later are needed (a destination
        may return more)."""

    def apply(self, target: Target, change: TableChange) -> Committed:
        """Evolve, write and delete as `change` says, in one commit; `DestinationError` (the
        table left as it was) when the destination refuses."""

    def close(self) -> None:
        """Release connections and temporary copies."""


def open_destination(config: DestinationConfig) -> Destination:
    """The destination `config` describes, its module imported now (`MissingExtra` naming
    the extra when it is not installed)."""
    module, _, function = kind(config.kind).opener.partition(":")
    opener = getattr(importlib.import_module(module), function)
    destination: Destination = opener(config)
    return destination


def system_kind(field_: pa.Field) -> str | None:
    """``id``, ``created_at`` or ``updated_at`` for a system field of a rows schema."""
    value = (field_.metadata or {}).get(META_SYSTEM)
    return value.decode() if value else None


def fits(stored: pa.Schema, target: Target) -> bool:
    """Whether a held table has exactly the target's columns with their kinds of values (a
    mark column aside): if not, a column was added, dropped or retyped since it was written."""

    def kinds(schema: pa.Schema) -> dict[str, pa.DataType]:
        return {
            f.name: pa.timestamp("us") if pa.types.is_timestamp(f.type) else plain_type(f.type)
            for f in schema
            if f.name != target.deleted_name
        }

    return kinds(stored) == kinds(target.schema)


class LiveRows:
    """The filter a scan applies to held batches: rows not marked deleted (and, when asked,
    changed after a time). `columns` are what it needs read besides the scan's own."""

    def __init__(self, held: Collection[str], target: Target, updated_after: datetime | None) -> None:
        self.mark = target.deleted_name
        self.marks = self.mark in held
        self.updated = target.updated_name if updated_after is not None else None
        self.after = updated_after
        self.columns = [self.mark] * self.marks + ([self.updated] if self.updated else [])

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:

        keep = None
        if self.marks:
            keep = pc.is_null(batch.column(self.mark))
        if self.updated is not None and self.after is not None and self.updated in batch.schema.names:
            column = batch.column(self.updated)
            # As integers read from the buffers: a zone-aware scalar, a Python scalar in a
            # compute function or `to_numpy` would make pyarrow import pandas.
            after = _ticks(self.after, column.type)
            later = arrow_mask(int64_values(column, after) > after)  # a null: not later
            keep = later if keep is None else pc.and_(keep, later)
        return batch if keep is None else batch.filter(keep)


def _ticks(value: datetime, type_: pa.TimestampType) -> int:
    """`value` as the integer a timestamp of `type_` holds (its unit since the epoch, UTC; a
    time without a zone taken as UTC)."""
    per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[type_.unit]
    return micros_of(value) * per_second // 10**6


def live_batches(
    held: Iterable[str],
    target: Target,
    columns: Sequence[str],
    updated_after: datetime | None,
    read: Callable[[list[str]], Iterable[pa.RecordBatch]],
) -> Iterator[pa.RecordBatch]:
    """A `Destination.scan` of a held table whose columns are `held`: the batches
    `read(names)` gives, less the rows marked deleted (and, with `updated_after`, those not
    changed after it), cut to the `columns` asked that the table holds. Every destination
    that reads its tables as Arrow batches scans through this."""
    held = set(held)
    keep = LiveRows(held, target, updated_after)
    wanted = [c for c in columns if c in held]
    extra = [c for c in keep.columns if c not in wanted]
    for batch in read(wanted + extra):
        yield keep(batch).select(wanted)


def sqlite_version(path: Path) -> str | None:
    """A SQLite file's `Destination.version`: its identity and its change counter (the
    header's bytes 24-27, moved by every transaction that changed the file:
    sqlite.org/fileformat.html). None when there is no file, when a hot journal may yet roll
    a change back, or in WAL mode (byte 18 is 2), where the counter need not move."""
    try:
        with open(path, "rb") as file:
            header = file.read(100)
            identity = os.fstat(file.fileno())
    except FileNotFoundError:
        return None
    if (
        len(header) < 100 or not header.startswith(b"SQLite format 3\0") or header[18] != 1
        or path.with_name(path.name + "-journal").exists()
    ):
        return None
    return f"{identity.st_dev}:{identity.st_ino}:{int.from_bytes(header[24:28], 'big')}"


def file_stamp(path: Path) -> str:
    """A file's identity, change time and size, for a version ('' when there is no file):
    a file replaced or written has another."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return ""
    return f"{stat.st_ino}:{stat.st_ctime_ns}:{stat.st_mtime_ns}:{stat.st_size}"


# --- for the kinds: whose failure a failure is ----------------------------------------------


class _RowsFailed(Exception):
    """The change's own row stream failed (a read upstream, a stop): carried past
    `library_errors` to be re-raised as itself, not as the destination's failure."""


def own_errors(rows: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`rows`, with their own failures marked, for a library that calls back into them."""
    try:
        yield from rows
    except Exception as exc:
        raise _RowsFailed() from exc


@contextmanager
def library_errors(what: str) -> Iterator[None]:
    """A library's exceptions become one `DestinationError` line, ``<what> failed: ...``
    (at most 300 characters); our own errors pass as they are, and a failure of the change's
    rows (`own_errors`) is re-raised as itself."""

    try:
        yield
    except ConnectorError:
        raise
    except _RowsFailed as exc:
        raise exc.__cause__ from None  # type: ignore[misc]
    except Exception as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        if len(text) > 300:
            text = text[:297] + "..."
        raise DestinationError(f"{what} failed: {text}") from exc
