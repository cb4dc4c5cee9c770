"""Column definitions as the server enforces them: which JSON values each type accepts.

Deliberately independent of `connector.schema` (the client's type table): the server and
the connector share no code, so each checks the other.

    text      any string
    choice    one of the column's `options`
    number    a JSON number (not a boolean), finite
    checkbox  true / false
    date      "YYYY-MM-DD", a real calendar date

``null`` empties a cell. A `required` column may not be empty (null, absent, or "").
Integers must fit in 64 bits (what SQLite stores and what clients read as int64): bodies and
filters are read by `parse_json`, which keeps a wider integer literal as a `WideInt` for the
column to refuse, where orjson would round it into a float.

Names of tables and columns never hold control characters (C0, DEL, C1, the Unicode line
and paragraph separators) nor the bidirectional formatting ones (U+061C, U+200E, U+200F,
U+202A-U+202E, U+2066-U+2069): they are printed in logs, terminals and file names, where
the first can rewrite a screen and the second make "gpj.exe" show as "exe.jpg".
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from connector.server.problems import ApiProblem, echo, invalid

TYPES: tuple[str, ...] = ("text", "choice", "number", "checkbox", "date")

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Digits in a row: only a number written with as many can be an integer outside 64 bits.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


class WideInt:
    """An integer literal outside the 64-bit range, as `parse_json` reads it: its text.

    Not a number to any code that stores one (orjson cannot even write it), so a value
    no check looked at fails loudly instead of landing rounded.
    """

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal

    def __repr__(self) -> str:
        return self.literal


def parse_json(data: bytes | bytearray | str) -> Any:
    """A request's JSON (a body, a filter), with integer literals outside 64 bits as `WideInt`;
    ValueError (a JSONDecodeError, mostly) if it is not JSON.

    orjson reads such a literal as a float once it passes unsigned 64 bits (2**64 becomes
    1.8446744073709552e19, which a number column would take), and refuses one past a
    double's range as not JSON. Only a document holding 19 digits in a row can hold one:
    that one the standard library reads, whose `parse_int` sees each literal's text, held
    to what orjson refuses (NaN, a float that overflows, lone surrogates, deep nesting).
    """
    if not _LONG_DIGITS.search(data.encode() if isinstance(data, str) else data):
        return orjson.loads(data)
    try:
        text = data if isinstance(data, str) else data.decode()
        parsed = json.loads(text, parse_int=_int64, parse_float=_finite, parse_constant=_finite)
        orjson.dumps(parsed, default=repr)  # refuses a lone surrogate, as orjson.loads does
    except RecursionError:
        raise ValueError("the document is nested too deeply") from None
    except orjson.JSONEncodeError as exc:
        raise ValueError(str(exc)) from None
    return parsed


def _int64(literal: str) -> int | WideInt:
    if len(literal) <= 20 and INT64_MIN <= (value := int(literal)) <= INT64_MAX:
        return value
    return WideInt(literal)


def _finite(literal: str) -> float:
    """A float literal (or NaN, Infinity), refused unless finite."""
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number {echo(literal)} is not a finite double")
    return value


class SpecError(ValueError):
    """A table spec (from `server create-table` or the demo) is malformed."""


@dataclass(frozen=True)
class ColumnDef:
    """One column: its name (the key in a row's `fields`), type, and constraints.

    `id` is ``col_<name>`` when the column is created, and stays when it is renamed
    (`alter`); left empty, it is ``col_<name>``.
    """

    name: str
    type: str
    required: bool = False
    options: tuple[str, ...] | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", f"col_{self.name}")

    def to_api(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name, "type": self.type}
        if self.required:
            data["required"] = True
        if self.options is not None:
            data["options"] = list(self.options)
        return data

    def check(self, value: Any) -> Any:
        """`value` if this column accepts it (None empties); raises the reason otherwise."""
        if value is None:
            return None
        kind = self.type
        if kind in ("text", "choice", "date") and not isinstance(value, str):
            raise ValueError(f"expects a string, got {_json_type(value)}")
        if kind == "choice" and value not in (self.options or ()):
            raise ValueError(f"{echo(value)} is not one of the options {list(self.options or ())}")
        if kind == "date" and not is_date(value):
            raise ValueError(f"expects a date as YYYY-MM-DD, got {echo(value)}")
        if kind == "number" and (
            isinstance(value, WideInt) or (isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX)
        ):
            raise ValueError(f"{echo(value)} is outside the 64-bit integer range ({INT64_MIN} to {INT64_MAX})")
        if kind == "number" and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"expects a number, got {_json_type(value)}")
        if kind == "checkbox" and not isinstance(value, bool):
            raise ValueError(f"expects true or false, got {_json_type(value)}")
        return value

    def is_empty(self, value: Any) -> bool:
        return value is None or value == ""


@dataclass(frozen=True)
class TableDef:
    """A table's identity and columns, as stored."""

    id: str
    name: str
    columns: tuple[ColumnDef, ...]
    created_at: str

    def column(self, name: str) -> ColumnDef | None:
        for col in self.columns:
            if col.name == name:
                return col
        return None

    def resolve(self, key: str) -> ColumnDef | None:
        """The column called exactly `key`, else the only one whose name matches ignoring case."""
        exact = self.column(key)
        if exact is not None:
            return exact
        folded = [c for c in self.columns if c.name.casefold() == key.casefold()]
        return folded[0] if len(folded) == 1 else None

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "columns": [c.to_api() for c in self.columns]}

    def check_create(self, fields: Any, *, index: int | None = None) -> dict[str, Any]:
        """The cells to store for a new row (empties dropped); 400 naming the column otherwise."""
        cells = self._check(fields, index=index)
        for col in self.columns:
            if col.required and col.is_empty(cells.get(col.name)):
                raise invalid(
                    col.name, _where(index) + f"column {col.name!r} is required", index=index
                )
        return {k: v for k, v in cells.items() if v is not None}

    def check_update(self, fields: Any) -> dict[str, Any]:
        """The cells to change (None clears); a required column may not be cleared."""
        cells = self._check(fields, index=None)
        for name, value in cells.items():
            col = self.column(name)
            if col is not None and col.required and col.is_empty(value):
                raise invalid(name, f"column {name!r} is required and cannot be cleared")
        return cells

    def _check(self, fields: Any, *, index: int | None) -> dict[str, Any]:
        where = _where(index)
        if not isinstance(fields, Mapping):
            raise ApiProblem(
                400,
                where + f"`fields` must be an object of column name to value, got {_json_type(fields)}",
                code="VALIDATION_ERROR",
                field="fields",
                index=index,
            )
        cells: dict[str, Any] = {}
        for name, value in fields.items():
            col = self.column(name)
            if col is None:
                hint = self.resolve(name)
                tip = f"; did you mean {hint.name!r}?" if hint else f"; columns: {self.names()}"
                raise invalid(name, where + f"unknown column {echo(name)}{tip}", index=index)
            try:
                cells[name] = col.check(value)
            except ValueError as exc:
                raise invalid(name, where + f"column {name!r} ({col.type}) {exc}", index=index) from None
        return cells

    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @cached_property
    def _names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def present(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """A row's `fields` for the API: every column, in schema order, null when empty."""
        get = stored.get
        return {name: get(name) for name in self._names}


def parse_spec(spec: Any) -> tuple[str, tuple[ColumnDef, ...]]:
    """Validate a table spec ``{"name", "columns": [{"name", "type", ...}]}``."""
    if not isinstance(spec, Mapping):
        raise SpecError("a table spec must be a JSON object with `name` and `columns`")
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError("the table spec needs a non-empty string `name`")
    if control := _control(name):
        raise SpecError(f"table name {name!r} holds {control}; use printable characters only")
    raw_columns = spec.get("columns")
    if not isinstance(raw_columns, list) or not raw_columns:
        raise SpecError(f"table {name!r}: `columns` must be a non-empty list")
    columns: list[ColumnDef] = []
    for i, raw in enumerate(raw_columns):
        columns.append(parse_column(raw, f"table {name!r} column #{i}"))
    seen: set[str] = set()
    for col in columns:
        if col.name in seen:
            raise SpecError(f"table {name!r}: column {col.name!r} is defined twice")
        seen.add(col.name)
    return name, tuple(columns)


def parse_column(raw: Any, where: str) -> ColumnDef:
    """A column of a spec ``{"name", "type", "required"?, "options"?}``; SpecError saying
    what is wrong, after `where`. Its id is ``col_<name>`` (an "id" given is ignored)."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: must be an object")
    unknown = set(raw) - {"name", "type", "required", "options", "id"}
    if unknown:
        raise SpecError(f"{where}: unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name or '"' in name or "\\" in name:
        raise SpecError(f"{where}: `name` must be a non-empty string without quotes, backslashes or control characters")
    if control := _control(name):
        raise SpecError(f"{where}: `name` {name!r} holds {control}; use printable characters only")
    kind = raw.get("type", "text")
    if kind not in TYPES:
        raise SpecError(f"{where} ({name!r}): type {kind!r} is not one of {list(TYPES)}")
    required = raw.get("required", False)
    if not isinstance(required, bool):
        raise SpecError(f"{where} ({name!r}): `required` must be true or false")
    options = raw.get("options")
    if kind == "choice":
        if (
            not isinstance(options, list)
            or not options
            or not all(isinstance(o, str) for o in options)
            or len(set(options)) != len(options)
        ):
            raise SpecError(f"{where} ({name!r}): a choice column needs `options`, a list of distinct strings")
        return ColumnDef(name, kind, required, tuple(options))
    if options is not None:
        raise SpecError(f"{where} ({name!r}): only choice columns take `options`")
    return ColumnDef(name, kind, required)


def _control(name: str) -> str:
    """The first control or bidirectional formatting character in `name`, in words; "" if none."""
    found = _CONTROL.search(name)
    if found is None:
        return ""
    char = found.group()
    title = unicodedata.name(char, "")  # C0 and C1 controls have none
    return f"a control character (U+{ord(char):04X}{', ' + title if title else ''})"


def is_date(value: str) -> bool:
    """`value` is "YYYY-MM-DD", a real calendar date."""
    if not _DATE.fullmatch(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _where(index: int | None) -> str:
    return "" if index is None else f"row {index}: "


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | WideInt):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
