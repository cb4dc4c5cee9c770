"""Check a whole source against the table before anything is written, and say everything wrong.

A header names the column it spells exactly (`match_header`). One that matches a column only
once both are trimmed and case-folded (``name `` for ``Name``) is taken as that column when it
is the only such column and none is spelled exactly; the plan says so. A header that matches
several that way, or two headers naming one column, is a `ConfigError`: nothing is guessed.

One pass finds every problem — unknown columns, cells of the wrong type, choices outside their
options, missing required values, empty or repeated keys — and raises them together in one
`ValidationReport`, each naming the spreadsheet row (header = row 1), the column and the value.
What passes comes out as a `Prepared` source: canonical values, ready to diff.

A required column the source leaves out is no problem yet: an update needs only the columns it
changes. Whether a row would be *created* without it is known once the plan is made
(`connector.push.plan`), which then names each such row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from connector.errors import ConfigError, Problem, ValidationReport
from connector.push.coerce import coerce_column, wire_values
from connector.push.sheet import SourceFrame
from connector.push.spec import Names, setting
from connector.schema import Column, Table

__all__ = [
    "Header",
    "Key",
    "Prepared",
    "Problem",
    "ValidationReport",
    "check_header",
    "duplicated",
    "key_hashes",
    "match_header",
    "validate",
]

#: Rows hashed at a time (`key_hashes`).
HASH_CHUNK = 65_536

@dataclass(frozen=True)
class Key:
    """What identifies a row: one or more table columns, or the row id itself."""

    columns: tuple[str, ...]
    #: True when the key is the API's row id (``--key id`` on a table without an ``id`` column).
    by_id: bool = False

    @classmethod
    def parse(cls, spec: str | Sequence[str], table: Table, names: Names = "parameters") -> Key:
        """`spec` (``"a, b"`` or ``["a", "b"]``) as a key of `table`; each name is the
        column it spells, else the column it spells once trimmed (``"x "`` is the column
        ``x `` where the table has one). Messages name the setting as `names` say."""
        key = setting("key", names)
        parts = spec.split(",") if isinstance(spec, str) else list(spec)
        columns = [n if n in table.column_names else n.strip() for n in parts]
        if not columns or any(not n for n in columns) or len(set(columns)) != len(columns):
            raise ConfigError(f"{key} {spec!r}: give one or more distinct column names")
        if columns == ["id"] and "id" not in table.column_names:
            return cls((table.system_names()["id"],), by_id=True)
        unknown = [n for n in columns if n not in table.column_names]
        if unknown:
            raise ConfigError(
                f"{key}: table {table.name!r} has no column {unknown[0]!r}; "
                f"columns: {table.column_names} (or 'id' for the row id)"
            )
        return cls(tuple(columns))

    def __str__(self) -> str:
        return "id" if self.by_id else ",".join(self.columns)


@dataclass(frozen=True)
class Prepared:
    """A source that passed validation, in canonical form, aligned with its row numbers. It
    holds no raw cell: the source as read can be let go."""

    #: The source's name (a file, a query), for reports.
    name: str
    rows: np.ndarray[Any, np.dtype[np.int64]]
    table: Table
    key: Key
    #: Canonical values: the key's frame columns, then each table column the source sets.
    frame: pd.DataFrame
    #: The table columns the source sets (key columns included, the row id excluded).
    columns: tuple[str, ...]
    #: Source columns left out on purpose (an export's ``_created_at``, ``_updated_at``).
    ignored: tuple[str, ...]
    coercions: Counter[str]
    #: (header, column) for each header taken as a column it spells only loosely.
    taken: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Header:
    """A source's header against a table (`match_header`)."""

    #: Each header that names a column, and the frame column it names: a table column, or
    #: the row id's (``_id``) for a key by id.
    named: dict[str, str]
    #: (header, column) for the headers that name their column only loosely (`_loose`).
    taken: tuple[tuple[str, str], ...]
    #: Headers left out on purpose (an export's ``_created_at``, ``_updated_at``).
    ignored: tuple[str, ...]
    #: Headers that name no column.
    unknown: tuple[str, ...]

    def problems(self, table: Table, key: Key) -> list[Problem]:
        """Unknown columns, and key columns the source lacks (all on row 1)."""
        found = [
            Problem(1, name, None,
                    f"not a column of table {table.name!r} (columns: {', '.join(table.column_names)})")
            for name in self.unknown
        ]
        found += [
            Problem(1, "id" if key.by_id else name, None, "key column missing from the source")
            for name in key.columns if name not in self.named.values()
        ]
        return found


def validate(
    source: SourceFrame, table: Table, key: Key, *, date_format: str | None = None,
    names: Names = "parameters",
) -> Prepared:
    """Coerce `source` to `table`'s types and check it, or raise one `ValidationReport`.

    `date_format` reads day/month-ambiguous dates (`connector.push.coerce`); a problem
    that asks for one names it as `names` say."""
    header = match_header(source.name, source.columns, table, key)
    problems = header.problems(table, key)
    frame = source.frame[[c for c in source.frame.columns if c in header.named]]
    frame = frame.rename(columns=header.named)
    columns = tuple(c.name for c in table.columns if c.name in frame.columns)
    out: dict[str, pd.Series] = {}
    coercions: Counter[str] = Counter()
    cells: list[tuple[int, Problem]] = []
    if key.by_id and key.columns[0] in frame.columns:
        ids = frame[key.columns[0]].astype("string").str.strip()
        out[key.columns[0]] = ids.mask(ids == "").reset_index(drop=True)
    for name in columns:
        out[name] = _column(
            source, frame[name], table.column(name), key, coercions, cells, date_format, names
        )
    if all(k in out for k in key.columns) and len(frame):
        cells.extend(_key_problems(source, out, key, {pos for pos, _ in cells}, table))

    cells.sort(key=lambda item: item[0])
    problems.extend(p for _, p in cells)
    if problems:
        raise ValidationReport(source.name, problems)
    ordered = [*key.columns, *(c for c in columns if c not in key.columns)]
    return Prepared(
        name=source.name,
        rows=source.rows,
        table=table,
        key=key,
        frame=pd.DataFrame(out, index=pd.RangeIndex(len(frame)))[ordered],
        columns=columns,
        ignored=header.ignored,
        coercions=coercions,
        taken=header.taken,
    )


def check_header(name: str, columns: Sequence[str], table: Table, key: Key) -> list[str]:
    """The source's column names against the table, before a row is read: a
    `ValidationReport` for columns the table lacks and key columns the source lacks (the
    same problems `validate` finds on row 1), a `ConfigError` for a header that does not say
    which column it names (`match_header`). Returns the columns a push reads: those naming a
    table column, or the row id for a key by id."""
    header = match_header(name, columns, table, key)
    problems = header.problems(table, key)
    if problems:
        raise ValidationReport(name, problems)
    return [c for c in columns if c in header.named]


def _loose(name: str) -> str:
    """A name as a header spells it loosely: trimmed and case-folded."""
    return name.strip().casefold()


def match_header(source: str, names: Sequence[str], table: Table, key: Key) -> Header:
    """Which column each of `names` (a source's header) names: the column it spells exactly;
    else the one column it matches once both are trimmed and case-folded, when no column is
    spelled by it exactly. A `ConfigError` (one line, naming every such header) when a header
    matches several columns that way, or two headers name the same column."""
    system = table.system_names()
    ignorable = _ignorable(table, key)
    by_loose: dict[str, list[str]] = {}
    for column in table.column_names:
        by_loose.setdefault(_loose(column), []).append(column)
    # An export of a key by id names the row id `_id`; a sheet of ids may call it `id`.
    row_id = "id" if key.by_id and system["id"] not in names else system["id"]
    named: dict[str, str] = {}
    taken: list[tuple[str, str]] = []
    ignored: list[str] = []
    unknown: list[str] = []
    wrong: list[str] = []
    for name in names:
        matches = by_loose.get(_loose(name), [])
        if name in table.column_names:
            named[name] = name
        elif key.by_id and name == row_id:
            named[name] = system["id"]
        elif name in ignorable:
            ignored.append(name)
        elif len(matches) == 1:
            named[name] = matches[0]
            taken.append((name, matches[0]))
        elif matches:
            wrong.append(
                f"header {name!r} matches columns {_listed(matches)} of table {table.name!r} "
                "only when trimmed and case-folded, so it names none of them: spell the one "
                "it means exactly"
            )
        else:
            unknown.append(name)
    landed: dict[str, list[str]] = {}
    for name, column in named.items():
        landed.setdefault(column, []).append(name)
    wrong += [
        f"headers {_listed(headers)} {'both' if len(headers) == 2 else 'all'} name column "
        f"{column!r} of table {table.name!r}: keep one of them"
        for column, headers in landed.items() if len(headers) > 1
    ]
    if wrong:
        raise ConfigError(f"{source}: {'; '.join(wrong)}; nothing was written")
    return Header(named, tuple(taken), tuple(ignored), tuple(unknown))


def _listed(names: Sequence[str]) -> str:
    """``'a', 'b' and 'c'``."""
    shown = [repr(n) for n in names]
    return ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else shown[0]


def _ignorable(table: Table, key: Key) -> set[str]:
    """System columns an export writes, left out of a push (the row id unless it is the key)."""
    system = table.system_names()
    ignorable = {system["created_at"], system["updated_at"]}
    if not key.by_id:
        ignorable.add(system["id"])
    return ignorable


def _column(
    source: SourceFrame, cells: pd.Series, col: Column, key: Key, coercions: Counter[str],
    problems: list[tuple[int, Problem]], date_format: str | None, names: Names,
) -> pd.Series:
    """One column's canonical values; its bad cells are added to `problems` by position."""
    coerced = coerce_column(cells, col, date_format=date_format, names=names)
    coercions.update(coerced.counts)
    values = coerced.values
    for pos, message in coerced.errors.items():
        problems.append((pos, _cell(source, pos, col.name, cells.iat[pos], message)))
    if col.kind.name == "choice" and col.options is not None:
        outside = values.notna().to_numpy() & ~values.isin(col.options).to_numpy(dtype=bool)
        options = ", ".join(repr(o) for o in col.options)
        for pos in np.flatnonzero(outside).tolist():
            message = f"not one of the options: {options}"
            problems.append((pos, _cell(source, pos, col.name, cells.iat[pos], message)))
    if col.required and col.name not in key.columns:
        empty = values.isna().to_numpy(dtype=bool, copy=True)
        if col.kind.name in ("text", "choice"):  # "" is text, but the API's required wants more
            empty |= values.eq("").fillna(False).to_numpy(dtype=bool)
        for pos in np.flatnonzero(empty).tolist():
            if pos not in coerced.errors:
                problems.append((pos, _cell(source, pos, col.name, None, "a value is required")))
    return values


def _key_problems(
    source: SourceFrame, values: dict[str, pd.Series], key: Key, already: set[int], table: Table
) -> list[tuple[int, Problem]]:
    """Empty keys, and keys that appear on more than one row (each row names the others)."""
    label = "id" if key.by_id else ", ".join(key.columns)
    keys = pd.DataFrame({k: values[k] for k in key.columns})
    empty = keys.isna().any(axis=1).to_numpy()
    found: list[tuple[int, Problem]] = []
    for pos in np.flatnonzero(empty):
        if int(pos) not in already:
            found.append((int(pos), _cell(source, int(pos), label, None, "the key is empty")))
    dupes = duplicated(keys) & ~empty
    if dupes.any():
        plain = pd.DataFrame({  # JSON cells (a number as a number), for messages
            k: wire_values(keys[k], table.column(k)) if not key.by_id else keys[k].astype(object)
            for k in key.columns
        }, dtype=object)
        positions = np.flatnonzero(dupes)
        groups = keys.iloc[positions].groupby(list(key.columns), sort=False, dropna=False).indices
        for members in groups.values():
            where = positions[members]
            rows = [int(source.rows[p]) for p in where]
            for pos in where:
                others = ", ".join(str(r) for r in rows if r != source.rows[pos])
                value = tuple(plain.iloc[int(pos)])
                shown: Any = value[0] if len(value) == 1 else value
                found.append((int(pos), _cell(
                    source, int(pos), label, shown, f"duplicate key: also on row(s) {others}"
                )))
    return found


def key_hashes(keys: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.int64]]:
    """A 64-bit hash of each row's key cells (Python's `hash` of the cell, or of the cells
    as a tuple), made a chunk of rows at a time: a million keys never stand as Python
    objects at once (pandas' hash tables hold one per cell: ~100 MB a million)."""
    out = np.empty(len(keys), dtype=np.int64)
    for start in range(0, len(keys), HASH_CHUNK):
        part = keys.iloc[start : start + HASH_CHUNK]
        cells = [part[c].tolist() for c in part.columns]
        values = cells[0] if len(cells) == 1 else zip(*cells, strict=True)
        out[start : start + len(part)] = np.fromiter(map(hash, values), np.int64, len(part))
    return out


def duplicated(keys: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Rows whose key cells another row has too (pandas' ``duplicated(keep=False)``),
    found by hash first, then settled exactly among the few rows sharing one."""
    hashes = key_hashes(keys)
    order = np.argsort(hashes, kind="stable")
    ranked = hashes[order]
    repeated = np.zeros(len(keys), dtype=bool)
    if len(keys) > 1:
        same = ranked[1:] == ranked[:-1]
        repeated[order[1:][same]] = True
        repeated[order[:-1][same]] = True
    out = np.zeros(len(keys), dtype=bool)
    if repeated.any():
        where = np.flatnonzero(repeated)
        out[where] = keys.iloc[where].duplicated(keep=False).to_numpy()
    return out


def _cell(source: SourceFrame, pos: int, column: str, value: Any, message: str) -> Problem:
    return Problem(int(source.rows[pos]), column, value, message)
