"""Diff a validated source against the live table by key: what to create, patch and delete.

The diff is a pandas merge on the key and a column-by-column comparison of canonical values
(see `coerce.same_values`), so a re-read value never looks changed. A `Plan` holds every write
and, for each row it touches, what it expected to find — so a plan saved to JSON and applied
later (`connector apply`) can refuse when those rows changed in between.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
from pandas.arrays import ArrowExtensionArray

from connector.api import MAX_BULK_ROWS
from connector.errors import ConfigError, DeleteGuard, PlanError, ValidationReport
from connector.modes import PUSH_MODES, PushMode
from connector.push.coerce import coerce_column, same_values, wire_values
from connector.push.live import Live, stamps_of
from connector.push.validate import Key, Prepared, Problem, duplicated, key_hashes
from connector.schema import Column, Table

__all__ = [
    "MODES",
    "Counts",
    "Create",
    "Delete",
    "DeleteGuard",
    "Diff",
    "Mode",
    "Plan",
    "PlanError",
    "Update",
    "canonical_keys",
    "check_current",
    "check_delete_guard",
    "create_batches",
    "gather",
    "make_plan",
]

#: Kept as names here for `connector.push`'s exports; defined in `connector.modes`.
Mode = PushMode
MODES = PUSH_MODES
#: The largest bulk create body we send (compact JSON bytes): just under the 1 MiB that
#: common proxies (nginx's default ``client_max_body_size``) accept. A server that answers
#: 413 to less teaches the apply a smaller size (`connector.push.apply`).
MAX_REQUEST_BYTES = 1_000_000
#: The bytes a bulk create body adds around its rows: ``{"rows":[`` ... ``]}``.
_BODY_BYTES = len(b'{"rows":[]}')
#: A mirror may delete at most this share of the table unless the user raises it.
DEFAULT_MAX_DELETE_RATIO = 0.2
PLAN_FORMAT = 1


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

    @property
    def create_requests(self) -> int:
        """Bulk creates needed: at most 100 rows and `MAX_REQUEST_BYTES` each."""
        return len(create_batches(self.creates))

    @property
    def requests(self) -> int:
        """Write requests needed: bulk creates (by rows and bytes), one per update, one per
        100 deletes."""
        return (
            self.create_requests
            + len(self.updates)
            + math.ceil(len(self.deletes) / MAX_BULK_ROWS)
        )

    @property
    def counts(self) -> Counts:
        return Counts(len(self.creates), len(self.updates), len(self.deletes), self.unchanged)

    @property
    def is_empty(self) -> bool:
        return not (self.creates or self.updates or self.deletes)

    def to_json(self) -> bytes:
        data = asdict(self)
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


def create_batches(
    creates: Sequence[Create], max_bytes: int = MAX_REQUEST_BYTES, max_rows: int = MAX_BULK_ROWS
) -> list[list[Create]]:
    """`creates` in order, cut into bulk requests of at most `max_rows` rows and `max_bytes`
    bytes of body; a row larger than `max_bytes` by itself goes alone."""
    batches: list[list[Create]] = []
    batch: list[Create] = []
    size = _BODY_BYTES
    for create in creates:
        row = body_bytes(create.fields)
        if batch and (len(batch) >= max_rows or size + row > max_bytes):
            batches.append(batch)
            batch, size = [], _BODY_BYTES
        batch.append(create)
        size += row
    if batch:
        batches.append(batch)
    return batches


def make_plan(prepared: Prepared, live: Live, mode: Mode = "upsert") -> Plan:
    """Diff `prepared` against `live` (read whole) by the key; ValidationReport for ids the
    table lacks. A push reads the table in chunks into a `Diff` instead."""
    diff = Diff(prepared, mode)
    diff.add(live)
    return diff.plan()


class Diff:
    """A plan in the making: the source indexed by its key, and the live table compared with
    it chunk by chunk as it is read (`add`). Of the table's rows it keeps which source row
    each matched (8 bytes a row), the old cells, id and timestamp of those that differ, and
    the id, timestamp and key of those the source lacks (a mirror's deletes): a large table
    the source covers is never held.

    Matching is exact on the canonical key cells (as a join on them would be); cells compare
    by column type (`coerce.same_values`)."""

    def __init__(self, prepared: Prepared, mode: Mode = "upsert") -> None:
        if mode not in MODES:
            raise ConfigError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
        self.prepared, self.mode = prepared, mode
        self.key = list(prepared.key.columns)
        self.values = [c for c in prepared.columns if c not in self.key]
        self._index = _KeyIndex(prepared.frame[self.key])
        system = prepared.table.system_names()
        self._id, self._stamp = system["id"], system["updated_at"]
        #: What is kept of a live row the source lacks (the key may be the id itself).
        self._kept = list(dict.fromkeys([self._id, self._stamp, *self.key]))
        #: Per chunk: the source positions the live rows matched.
        self._matched: list[np.ndarray[Any, np.dtype[np.intp]]] = []
        #: Per chunk: the id, updated_at and key cells of the live rows the source lacks.
        self._unmatched: list[pd.DataFrame] = []
        self._rows = 0
        self._unchanged = 0
        self._differing = 0  # live rows in the source with a changed cell
        #: Live rows that differ: (source position, row id, updated_at, changed, old cells).
        self._changes: list[tuple[int, str, str | None, list[str], dict[str, Any]]] = []

    def add(self, live: Live) -> None:
        """Compare a chunk of the live table's rows (every column the source sets) with the
        source rows of the same keys."""
        frame = live.frame
        found = self._index.find(frame[self.key])
        self._rows += len(frame)
        hit = np.flatnonzero(found >= 0)
        self._matched.append(found[hit])
        if len(hit) < len(frame):
            self._unmatched.append(
                frame.iloc[np.flatnonzero(found < 0)][self._kept]
            )
        if not len(hit):
            return
        source = self.prepared.frame
        table = self.prepared.table
        changed = np.zeros((len(hit), len(self.values)), dtype=bool)
        for j, name in enumerate(self.values):
            new = gather(source[name], found[hit])
            old = frame[name].take(hit).reset_index(drop=True)
            changed[:, j] = ~same_values(new, old, table.column(name))
        differs = changed.any(axis=1)
        self._unchanged += int((~differs).sum())
        self._differing += int(differs.sum())
        if self.mode == "insert" or not differs.any():
            return
        rows = hit[differs]
        ids = frame[self._id].take(rows).tolist()
        stamps = stamps_of(frame[self._stamp].take(rows))
        old_cells = {
            n: wire_values(frame[n].take(rows), table.column(n))
            for j, n in enumerate(self.values) if changed[differs, j].any()
        }
        for i, (position, mask) in enumerate(zip(found[rows], changed[differs], strict=True)):
            names = [n for n, c in zip(self.values, mask, strict=True) if c]
            self._changes.append((
                int(position), str(ids[i]), stamps[i], names, {n: old_cells[n][i] for n in names},
            ))

    def plan(self) -> Plan:
        """The plan, once every chunk of the table was added."""
        prepared, mode, table = self.prepared, self.mode, self.prepared.table
        found = np.concatenate(self._matched) if self._matched else np.empty(0, np.intp)
        counts = np.bincount(found, minlength=len(prepared.frame))
        gone = (
            pd.concat(self._unmatched, ignore_index=True) if self._unmatched
            else pd.DataFrame(columns=self._kept)
        )
        self._check_unique_keys(counts, gone)
        only_src = np.flatnonzero(counts == 0)
        if prepared.key.by_id and len(only_src):
            raise ValidationReport(prepared.name, [
                Problem(int(prepared.rows[p]), "id", prepared.frame[self._id].iat[int(p)],
                        f"no row with this id in table {table.name!r} (new rows need a key column)")
                for p in only_src
            ])
        creates: tuple[Create, ...] = ()
        updates: tuple[Update, ...] = ()
        deletes: tuple[Delete, ...] = ()
        skipped = 0
        if mode in ("insert", "upsert", "mirror"):
            creates = _creates(prepared, only_src)
            _check_required(prepared, creates)
        else:
            skipped += len(only_src)
        if mode == "insert":
            skipped += self._differing
        else:
            updates = self._updates()
        if mode == "mirror":
            deletes = _deletes(prepared, table, gone, self.key, self._id, self._stamp)
        return Plan(
            table=table,
            key=prepared.key,
            mode=mode,
            source=prepared.name,
            source_rows=len(prepared.frame),
            table_rows=self._rows,
            creates=creates,
            updates=updates,
            deletes=deletes,
            unchanged=self._unchanged,
            skipped=skipped,
            coercions=dict(sorted(prepared.coercions.items())),
            ignored=prepared.ignored,
            taken=prepared.taken,
        )

    def _check_unique_keys(self, counts: np.ndarray[Any, Any], gone: pd.DataFrame) -> None:
        """PlanError when rows of the table share a key: a source key more than one table
        row matched, or a key several rows the source lacks hold."""
        twice = np.flatnonzero(counts > 1)
        keys = gone[self.key]
        dupes = duplicated(keys) & ~keys.isna().any(axis=1).to_numpy()
        total = int(counts[twice].sum()) + int(dupes.sum())
        if not total:
            return
        source = self.prepared.frame
        shown = [
            f"{tuple(source[k].iat[int(p)] for k in self.key)} on {int(counts[p])} rows"
            for p in twice[:6]
        ] + [
            f"{tuple(r[k] for k in self.key)} on {r[self._id]}"
            for r in gone.loc[dupes, [*self.key, self._id]].head(6).to_dict("records")
        ]
        raise PlanError(
            f"table {self.prepared.table.name!r} has {total} rows sharing a key "
            f"({', '.join(self.key)}), so the key cannot identify rows: {'; '.join(shown[:6])}. "
            "Choose another key or remove the duplicates."
        )

    def _updates(self) -> tuple[Update, ...]:
        """A PATCH of each differing row's changed cells, in source order."""
        if not self._changes:
            return ()
        prepared, table = self.prepared, self.prepared.table
        positions = np.array([c[0] for c in self._changes], dtype=np.intp)
        changed = {n for _, _, _, names, _ in self._changes for n in names}
        new = {
            n: wire_values(gather(prepared.frame[n], positions), table.column(n))
            for n in self.values if n in changed
        }
        keys = [] if prepared.key.by_id else self.key
        key_cells = {k: wire_values(gather(prepared.frame[k], positions), table.column(k)) for k in keys}
        updates = [
            Update(
                row=int(prepared.rows[position]),
                id=row_id,
                fields={n: new[n][i] for n in names},
                old=old,
                updated_at=stamp,
                key={k: key_cells[k][i] for k in keys},
            )
            for i, (position, row_id, stamp, names, old) in enumerate(self._changes)
        ]
        updates.sort(key=lambda u: u.row)
        return tuple(updates)


def gather(values: pd.Series, positions: np.ndarray[Any, Any]) -> pd.Series:
    """``values.take(positions)`` (a new RangeIndex), without first joining the chunks of an
    Arrow-backed column as pandas' take does: a copy of the whole column for every chunk of
    the table compared (~90 MB each for a million ~85-character cells)."""
    if not isinstance(values.array, ArrowExtensionArray):
        return values.take(positions).reset_index(drop=True)
    column = pa.chunked_array(pa.array(values.array))
    if column.num_chunks <= 1:
        taken = column.take(pa.array(positions))
    else:
        starts = np.cumsum([0, *(len(c) for c in column.chunks)])
        which = np.searchsorted(starts, positions, side="right") - 1
        order = np.argsort(which, kind="stable")
        pieces = [
            column.chunk(int(c)).take(pa.array(positions[order][which[order] == c] - starts[c]))
            for c in np.unique(which)
        ]
        joined = pa.concat_arrays(pieces) if pieces else pa.array([], column.type)
        taken = joined.take(pa.array(np.argsort(order)))
    return pd.Series(taken.to_pandas(types_mapper=lambda _: values.dtype))


class _KeyIndex:
    """Where each key is in the source: its rows' key hashes sorted (8 bytes a row and a
    binary search, not a hash table of Python objects), each match then checked cell by
    cell, so it is as exact as a join on the key cells. Source keys are distinct (validated);
    should two share a hash, pandas' own index is used instead."""

    def __init__(self, keys: pd.DataFrame) -> None:
        self.keys = keys.reset_index(drop=True)
        hashes = key_hashes(self.keys)
        self.order = np.argsort(hashes)
        self.ranked = hashes[self.order]
        self.exact: pd.Index | None = None
        if len(hashes) > 1 and bool((self.ranked[1:] == self.ranked[:-1]).any()):
            self.exact = pd.MultiIndex.from_frame(self.keys)

    def find(self, keys: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.intp]]:
        """The source position of each row of `keys`, or -1."""
        keys = keys.reset_index(drop=True)
        if self.exact is not None:
            return np.asarray(self.exact.get_indexer(pd.MultiIndex.from_frame(keys)), dtype=np.intp)
        found = np.full(len(keys), -1, dtype=np.intp)
        if not len(self.ranked):
            return found
        hashes = key_hashes(keys)
        at = np.minimum(np.searchsorted(self.ranked, hashes), len(self.ranked) - 1)
        hit = np.flatnonzero(self.ranked[at] == hashes)
        candidates = self.order[at[hit]]
        same = np.ones(len(hit), dtype=bool)
        for name in keys.columns:
            mine = gather(self.keys[name], candidates)
            theirs = keys[name].take(hit).reset_index(drop=True)
            same &= (mine == theirs).fillna(False).to_numpy(dtype=bool)
        found[hit[same]] = candidates[same]
        return found


def check_delete_guard(
    plan: Plan, *, max_delete_ratio: float | None = None, allow_delete: int | None = None
) -> None:
    """Refuse a mirror deleting more than allowed (default 20% of the table; none if the
    source is empty) unless `max_delete_ratio` or `allow_delete` raise the limit."""
    if max_delete_ratio is not None and not 0.0 <= max_delete_ratio <= 1.0:  # NaN too
        raise ConfigError(f"max_delete_ratio must be between 0 and 1, not {max_delete_ratio}")
    if allow_delete is not None and allow_delete < 0:
        raise ConfigError(f"allow_delete must be 0 or more, not {allow_delete}")
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
            f"it with --allow-delete {len(plan.deletes)} (or --max-delete-ratio)"
        )


def _check_required(prepared: Prepared, creates: Sequence[Create]) -> None:
    """A row to create needs every required column; ValidationReport naming each row and
    column when the source lacks one. (Rows that exist need only the columns they change.)"""
    missing = [
        c.name for c in prepared.table.columns if c.required and c.name not in prepared.columns
    ]
    if not (missing and creates):
        return
    raise ValidationReport(prepared.name, [
        Problem(c.row, name, None,
                f"a value is required to create this row, and the source has no column "
                f"{name!r} (rows the table already has need only the columns they change; "
                "--mode update leaves new rows out)")
        for c in creates for name in missing
    ])


def _records(frame: pd.DataFrame, table: Table, names: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of `frame` as JSON cell dicts over `names`, leaving out empty cells."""
    columns = [wire_values(frame[n], table.column(n)) for n in names]
    return [
        {n: v for n, v in zip(names, cells, strict=True) if v is not None}
        for cells in zip(*columns, strict=True)
    ] if names else [{} for _ in range(len(frame))]


def _creates(prepared: Prepared, positions: np.ndarray[Any, Any]) -> tuple[Create, ...]:
    positions = np.sort(positions)
    frame = pd.DataFrame(
        {n: gather(prepared.frame[n], positions) for n in prepared.columns},
        index=pd.RangeIndex(len(positions)),
    )
    records = _records(frame, prepared.table, prepared.columns)
    return tuple(
        Create(int(prepared.rows[p]), fields) for p, fields in zip(positions, records, strict=True)
    )


def _deletes(
    prepared: Prepared, table: Table, gone: pd.DataFrame, key: list[str], row_id: str,
    updated_at: str,
) -> tuple[Delete, ...]:
    if not len(gone):
        return ()
    if prepared.key.by_id:
        keys: list[dict[str, Any]] = [{} for _ in range(len(gone))]
    else:
        keys = [
            dict(zip(key, cells, strict=True))
            for cells in zip(*(wire_values(gone[k], table.column(k)) for k in key), strict=True)
        ]
    stamps = stamps_of(gone[updated_at])
    return tuple(
        Delete(str(i), k, s) for i, k, s in zip(gone[row_id].tolist(), keys, stamps, strict=True)
    )


def canonical_keys(table: Table, key: Key, records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Canonical key cells of JSON records (a plan's creates), to match against a live read."""
    data = {}
    for name in key.columns:
        cells = pd.Series([r.get(name) for r in records], dtype=object)
        data[name] = (
            cells.astype("string") if key.by_id else coerce_column(cells, table.column(name)).values
        )
    return pd.DataFrame(data, index=pd.RangeIndex(len(records)))


def check_current(plan: Plan, live: Live) -> None:
    """Refuse a saved plan when the rows it touches changed since it was made.

    Updated or deleted rows must still exist with the ``updated_at`` the plan saw; keys the
    plan creates must still be absent; the table's columns must be the same.
    """
    if live.table.columns != plan.table.columns:
        raise PlanError(
            f"the columns of table {plan.table.name!r} changed since the plan was made; "
            "make a new plan with `connector push`"
        )
    system = live.table.system_names()
    stamps = dict(zip(
        live.frame[system["id"]].tolist(), stamps_of(live.frame[system["updated_at"]]), strict=True
    ))
    touched: list[tuple[str, str | None, str]] = [
        *((u.id, u.updated_at, f"{u.id} (row {u.row})") for u in plan.updates),
        *((d.id, d.updated_at, d.id) for d in plan.deletes),
    ]
    changed = [
        label for row_id, stamp, label in touched
        if row_id not in stamps or (stamp is not None and stamps[row_id] != stamp)
    ]
    if plan.creates:
        wanted = canonical_keys(plan.table, plan.key, [c.fields for c in plan.creates])
        present = set(zip(*(live.frame[k].tolist() for k in plan.key.columns), strict=True))
        rows = zip(*(wanted[k].tolist() for k in plan.key.columns), strict=True)
        changed += [
            f"key {k if len(k) > 1 else k[0]!r} (row {c.row}) now exists"
            for c, k in zip(plan.creates, rows, strict=True)
            if k in present
        ]
    if changed:
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        raise PlanError(
            f"{len(changed)} row(s) of table {plan.table.name!r} changed since the plan was made "
            f"({shown}); nothing was written. Make a new plan with `connector push`"
        )
