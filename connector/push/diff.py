"""Diff a validated source against the live table by key: what to create, patch and delete.

The live table is read in chunks into a `Diff`, each chunk matched to the source by its key
cells (`_KeyIndex`) and compared column by column on canonical values (see
`coerce.same_values`), so a re-read value never looks changed. The result is a `Plan`
(`connector.push.plan`); `check_current` is the same comparison made again, before a saved
plan is applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.arrays import ArrowExtensionArray

from connector.errors import PlanError, Problem, ValidationReport
from connector.process import collector_paused
from connector.push.coerce import coerce_column, same_values, wire_values
from connector.push.live import Live, stamps_of
from connector.push.plan import Create, Delete, Mode, Plan, Update
from connector.push.spec import Names, setting
from connector.push.validate import Key, Prepared, duplicated, key_hashes
from connector.schema import Table

__all__ = ["Diff", "canonical_keys", "check_current", "gather", "make_plan"]


def make_plan(
    prepared: Prepared, live: Live, mode: Mode = "upsert", names: Names = "parameters"
) -> Plan:
    """Diff `prepared` against `live` (read whole) by the key; ValidationReport for ids the
    table lacks. A push reads the table in chunks into a `Diff` instead."""
    diff = Diff(prepared, mode, names)
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

    def __init__(
        self, prepared: Prepared, mode: Mode = "upsert", names: Names = "parameters"
    ) -> None:
        """`mode` as a `PushSpec` checked it; `names`: how messages name the settings."""
        self.prepared, self.mode, self.names = prepared, mode, names
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
            _check_required(prepared, creates, self.names)
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


def _check_required(prepared: Prepared, creates: Sequence[Create], names: Names) -> None:
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
                f"{setting('mode', names, 'update')} leaves new rows out)")
        for c in creates for name in missing
    ])


def _records(frame: pd.DataFrame, table: Table, names: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of `frame` as JSON cell dicts over `names`, leaving out empty cells."""
    if not names:
        return [{} for _ in range(len(frame))]
    columns = [wire_values(frame[n], table.column(n)) for n in names]
    rows = zip(*columns, strict=True)
    if not any(None in cells for cells in columns):  # no empty cell: every row has every name
        # made in C by map (300,000 rows: 0.2 s; a comprehension's loop took 0.42 s)
        return list(map(dict, map(zip, repeat(names), rows)))
    return [{n: v for n, v in zip(names, cells, strict=True) if v is not None} for cells in rows]


def _creates(prepared: Prepared, positions: np.ndarray[Any, Any]) -> tuple[Create, ...]:
    """The rows at `positions` to create, with the cyclic garbage collector paused: their
    objects hold no cycles, and making 300,000 of them set off collections that scanned every
    object the process holds (a third of the time)."""
    positions = np.sort(positions)
    every = len(positions) == len(prepared.frame)  # sorted and distinct: each row, in order
    frame = prepared.frame if every else pd.DataFrame(
        {n: gather(prepared.frame[n], positions) for n in prepared.columns},
        index=pd.RangeIndex(len(positions)),
    )
    with collector_paused():
        records = _records(frame, prepared.table, prepared.columns)
        return tuple(map(Create, prepared.rows[positions].tolist(), records))


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
