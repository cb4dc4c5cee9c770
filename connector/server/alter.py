"""Changing a live table's columns: add, rename, retype, drop, set a choice's options.

One change at a time (`ColumnChange`), worked out on the table as stored (`plan`) and
applied by `Storage.alter_table` in one transaction: the schema and every row's cells, or
nothing. A running server reads schemas on every request, so it sees the change at once.
The rules, which `connector server alter-table --help` prints too, are `RULES`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from connector.server.columns import (
    INT64_MAX,
    INT64_MIN,
    ColumnDef,
    SpecError,
    TableDef,
    is_date,
    parse_column,
)
from connector.server.problems import echo

RULES = """\
- A column keeps its id when renamed. Ids are given at creation as col_<name>; a new
  column whose col_<name> is taken (by a renamed column) gets col_<name>_2, _3, ...
- Retype converts every stored cell; a value that does not convert becomes empty:
    to text      a number as JSON writes it (0.5 -> "0.5", 3 -> "3"), a checkbox
                 "true" / "false", a date or choice as it is
    to number    text or a choice holding a JSON number, spaces around ignored
                 ("0.5" -> 0.5, "3" -> 3; "3 kg", "1,5" -> empty); checkbox true 1,
                 false 0; a date -> empty
    to checkbox  text or a choice "true", "yes", "1" -> true and "false", "no", "0"
                 -> false, in any case; number 1 -> true, 0 -> false; a date -> empty
    to date      text or a choice holding a real date YYYY-MM-DD; number, checkbox
                 -> empty
    to choice    the value as text (as above), kept if it is one of the options
- Options changed: a cell holding an option no longer listed becomes empty.
- No row's updated_at (or created_at) moves: only the schema and the cells change.
- Refused, and nothing changed: a name that exists, an unknown column or type, options
  on a column that is not a choice, dropping the last column, and a change that would
  leave a required column empty in a row (such as a required column added to a table
  with rows)."""


@dataclass(frozen=True)
class AddColumn:
    """A new column, empty in every row."""

    name: str
    type: str
    required: bool = False
    options: Sequence[str] | None = None


@dataclass(frozen=True)
class RenameColumn:
    name: str
    new_name: str


@dataclass(frozen=True)
class RetypeColumn:
    """`options` for a choice column (required then), None otherwise."""

    name: str
    type: str
    options: Sequence[str] | None = None


@dataclass(frozen=True)
class DropColumn:
    name: str


@dataclass(frozen=True)
class SetOptions:
    name: str
    options: Sequence[str]


ColumnChange = AddColumn | RenameColumn | RetypeColumn | DropColumn | SetOptions


@dataclass(frozen=True)
class Altered:
    """What `Storage.alter_table` did: the table after, in words, and how many cells that
    held a value are empty now (they did not convert, or held a removed option)."""

    table: TableDef
    summary: str
    emptied: int


@dataclass(frozen=True)
class Alteration:
    """A change worked out on one table: its columns after, and for each the column before
    whose cells it takes (None: a new column)."""

    table: TableDef
    sources: tuple[ColumnDef | None, ...]
    summary: str

    def rewrite(self, stored: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        """A row's stored `fields` after the change, and how many of its cells it emptied;
        SpecError if a required column would be left empty."""
        fields: dict[str, Any] = {}
        emptied = 0
        for new, old in zip(self.table.columns, self.sources, strict=True):
            if old is not None and (old.type, old.options) == (new.type, new.options):
                fields[new.name] = stored.get(old.name)
                continue
            before = None if old is None else stored.get(old.name)
            value = None if old is None or before is None else convert(before, old.type, new)
            if value is None and not new.is_empty(before):
                emptied += 1
            if new.required and new.is_empty(value):
                why = "would be empty" if new.is_empty(before) else f"{echo(before)} does not convert to {_kind(new)}"
                raise SpecError(f"column {new.name!r} is required, and {why}")
            fields[new.name] = value
        return fields, emptied


def plan(table: TableDef, change: ColumnChange) -> Alteration:
    """Work out `change` on `table`; SpecError naming what is wrong, nothing else done."""
    columns = list(table.columns)
    sources: list[ColumnDef | None] = list(columns)
    where = f"table {table.name!r}"
    if isinstance(change, AddColumn):
        if table.column(change.name) is not None:
            raise SpecError(f"{where} has a column {change.name!r} already")
        raw = {"name": change.name, "type": change.type, "required": change.required}
        if change.options is not None:
            raw["options"] = list(change.options)
        new = parse_column(raw, f"{where}: new column")
        new = dataclasses.replace(new, id=_free_id(new.id, {c.id for c in columns}))
        return Alteration(dataclasses.replace(table, columns=(*columns, new)), (*sources, None),
                    f"added column {new.name!r} ({_kind(new)}, id {new.id})")
    i, old = _find(table, change.name)
    if isinstance(change, RenameColumn):
        if change.new_name == old.name:
            raise SpecError(f"{where}: column {old.name!r} is called that already")
        if table.column(change.new_name) is not None:
            raise SpecError(f"{where} has a column {change.new_name!r} already")
        checked = parse_column({"name": change.new_name, "type": "text"}, f"{where}: new name")
        columns[i] = dataclasses.replace(old, name=checked.name)
        summary = f"renamed column {old.name!r} to {checked.name!r} (id {old.id} kept)"
    elif isinstance(change, RetypeColumn | SetOptions):
        kind = change.type if isinstance(change, RetypeColumn) else old.type
        if isinstance(change, SetOptions) and old.type != "choice":
            raise SpecError(f"{where}: column {old.name!r} is {old.type}, not a choice: it has no options")
        raw = {"name": old.name, "type": kind, "required": old.required}
        if change.options is not None:
            raw["options"] = list(change.options)
        new = dataclasses.replace(parse_column(raw, f"{where}: column {old.name!r}"), id=old.id)
        if (new.type, new.options) == (old.type, old.options):
            raise SpecError(f"{where}: column {old.name!r} is {_kind(old)} already")
        if isinstance(change, SetOptions):
            summary = f"options of column {old.name!r} set to {list(new.options or ())}"
        else:
            summary = f"retyped column {old.name!r} from {_kind(old)} to {_kind(new)}"
        columns[i] = new
    else:
        if len(columns) == 1:
            raise SpecError(f"{where}: {old.name!r} is its only column; a table keeps at least one")
        del columns[i], sources[i]
        summary = f"dropped column {old.name!r} (id {old.id})"
    return Alteration(dataclasses.replace(table, columns=tuple(columns)), tuple(sources), summary)


# -- converting cells -------------------------------------------------------------------

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


def convert(value: Any, kind: str, new: ColumnDef) -> Any:
    """A stored `value` of a column of type `kind` as a cell of `new`, or None (by `RULES`)."""
    if new.type == "choice":
        text = _text(value, kind)
        return text if text in (new.options or ()) else None
    if kind == new.type:
        return value
    if new.type == "text":
        return _text(value, kind)
    if new.type == "number":
        if kind == "checkbox":
            return int(value)
        return _number(value.strip()) if kind in ("text", "choice") else None
    if new.type == "checkbox":
        if kind == "number":
            return True if value == 1 else False if value == 0 else None
        if kind in ("text", "choice"):
            word = value.strip().lower()
            return True if word in _TRUE else False if word in _FALSE else None
        return None
    if new.type == "date" and kind in ("text", "choice"):
        text = value.strip()
        return text if is_date(text) else None
    return None


def _text(value: Any, kind: str) -> str:
    if kind == "number":
        return orjson.dumps(value).decode()
    if kind == "checkbox":
        return "true" if value else "false"
    return str(value)


def _number(text: str) -> int | float | None:
    found = _JSON_NUMBER.fullmatch(text)
    if found is None:
        return None
    if found.group(1) is None and found.group(2) is None:
        whole = int(text) if len(text) <= 20 else None  # longer is outside 64 bits
        return whole if whole is not None and INT64_MIN <= whole <= INT64_MAX else None
    number = float(text)
    return number if math.isfinite(number) else None


# -- helpers ----------------------------------------------------------------------------


def _find(table: TableDef, name: str) -> tuple[int, ColumnDef]:
    for i, col in enumerate(table.columns):
        if col.name == name:
            return i, col
    raise SpecError(f"table {table.name!r} has no column {name!r}; columns: {table.names()}")


def _free_id(wanted: str, taken: set[str]) -> str:
    if wanted not in taken:
        return wanted
    n = 2
    while f"{wanted}_{n}" in taken:
        n += 1
    return f"{wanted}_{n}"


def _kind(col: ColumnDef) -> str:
    return f"choice of {list(col.options or ())}" if col.type == "choice" else col.type

