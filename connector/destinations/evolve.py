"""Column changes: what changed between two versions of a table's columns, and what held
values become. Pure: no destination, no I/O.

A table's columns can be added, renamed, retyped, dropped, or (choices) get other options.
`diff` names each change, matching columns by their API id where both sides have one (a
column keeps its id when renamed on servers that keep ids; where a server derives ids from
names, a rename shows as a drop and an add) and by name otherwise.

Every destination evolves the same way, decided here once:

- added: the column appears, empty in rows held from before (the next full read fills the
  live ones);
- renamed (same id): the column keeps its values under the new name;
- retyped (another API type, or another value type for a number column: float64, int64,
  decimal, text, `connector.values`): held values are converted by `convert` (the one set
  of rules); a value that does not convert exactly becomes empty;
- dropped: the column and its held values are removed, as on the server;
- options changed: values are kept (a value outside the options stays as text).

The live rows of an evolved table are then rewritten from a full read, so after a change
every live row holds exactly what the API serves; `convert` matters for rows the API no
longer serves (rows marked deleted, rows an append keeps).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.compute as pc

from connector.arrays import string_array
from connector.schema import (
    CHECKBOX_FALSE,
    CHECKBOX_TRUE,
    META_COLUMN_TYPE,
    META_OPTIONS,
    META_VALUE_TYPE,
    Column,
)
from connector.values import (
    INT64_MAX,
    INT64_MIN,
    ValueType,
    cast_decimal,
    decimal_misfit,
    decimal_texts,
    plain_decimal,
)

__all__ = [
    "AddColumn",
    "ChangeOptions",
    "DropColumn",
    "RenameColumn",
    "RetypeColumn",
    "SchemaOp",
    "columns_of",
    "convert",
    "describe",
    "diff",
    "renames",
]


@dataclass(frozen=True)
class AddColumn:
    name: str
    type: str

    def __str__(self) -> str:
        return f"{self.name}: added ({self.type})"


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.old}: renamed to {self.new}"


@dataclass(frozen=True)
class RetypeColumn:
    name: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.name}: {self.old} -> {self.new}"


@dataclass(frozen=True)
class DropColumn:
    name: str
    type: str

    def __str__(self) -> str:
        return f"{self.name}: dropped"


@dataclass(frozen=True)
class ChangeOptions:
    name: str
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def __str__(self) -> str:
        parts = [*(f"+{o}" for o in self.added), *(f"-{o}" for o in self.removed)]
        return f"{self.name}: options changed ({', '.join(parts)})"


SchemaOp = AddColumn | RenameColumn | RetypeColumn | DropColumn | ChangeOptions


def diff(before: Sequence[Column], after: Sequence[Column]) -> tuple[SchemaOp, ...]:
    """The changes that turn the columns `before` into `after`: renames first (a rename and
    a retype of one column are two changes), then retypes and options, adds, drops."""
    old_by_id = {c.id: c for c in before if c.id}
    new_by_id = {c.id: c for c in after if c.id}
    pairs: list[tuple[Column, Column]] = []
    matched_old: set[int] = set()
    matched_new: set[int] = set()
    for i, new in enumerate(after):  # by id, where both sides know the column's id
        old = old_by_id.get(new.id) if new.id else None
        if old is not None and new_by_id.get(new.id) is new:
            pairs.append((old, new))
            matched_old.add(id(old))
            matched_new.add(i)
    by_name = {c.name: c for c in before if id(c) not in matched_old}
    for i, new in enumerate(after):  # then by name
        if i in matched_new:
            continue
        old = by_name.get(new.name)
        if old is not None and (not old.id or not new.id or old.id == new.id
                                or old.id not in new_by_id):
            pairs.append((old, new))
            matched_old.add(id(old))
            matched_new.add(i)
    ops: list[SchemaOp] = []
    for old, new in pairs:
        if old.name != new.name:
            ops.append(RenameColumn(old.name, new.name))
    for old, new in pairs:
        if old.type != new.type or old.values != new.values:
            ops.append(RetypeColumn(new.name, old.type_label, new.type_label))
        elif new.type == "choice" and old.options != new.options and old.options is not None:
            was, now = old.options or (), new.options or ()
            ops.append(ChangeOptions(
                new.name, tuple(o for o in now if o not in was), tuple(o for o in was if o not in now)
            ))
    ops += [AddColumn(c.name, c.type) for i, c in enumerate(after) if i not in matched_new]
    ops += [DropColumn(c.name, c.type) for c in before if id(c) not in matched_old]
    return tuple(ops)


def describe(ops: Iterable[SchemaOp]) -> str:
    """The changes as one line: ``Estimate: number -> text; Notes: added (text)``."""
    return "; ".join(map(str, ops))


def renames(ops: Iterable[SchemaOp]) -> dict[str, str]:
    """Old name -> new name for every rename among `ops`."""
    return {op.old: op.new for op in ops if isinstance(op, RenameColumn)}


def columns_of(schema: pa.Schema, system: Iterable[str]) -> tuple[Column, ...]:
    """The API columns a stored table's schema stands for (its user columns): `system` are
    the names of ours (`connector.schema.Table.system_names`).

    Fields written from `connector.schema` carry their API type and options; others (a SQL
    table's reflected columns) are named by their storage type, as closely as it says.
    """
    skip = set(system)
    out = []
    for field in schema:
        if field.name in skip:
            continue
        meta = field.metadata or {}
        kind = meta[META_COLUMN_TYPE].decode() if META_COLUMN_TYPE in meta else _kind_of(field.type)
        options = tuple(json.loads(meta[META_OPTIONS])) if META_OPTIONS in meta else None
        held = meta[META_VALUE_TYPE].decode() if META_VALUE_TYPE in meta else ""
        if kind == "number" and not held:  # as its storage type says
            held = _value_type_of(field.type)
        out.append(Column(field.name, kind, id="", options=options, value_type=held))
    return tuple(out)


def _value_type_of(type_: pa.DataType) -> str:
    """A number column's value type as a stored type says it ("" for float64, the default)."""
    if pa.types.is_integer(type_):
        return "int64"
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "text"
    return ""


def _kind_of(type_: pa.DataType) -> str:
    if pa.types.is_dictionary(type_):
        return "choice"
    if pa.types.is_floating(type_) or pa.types.is_integer(type_) or pa.types.is_decimal(type_):
        return "number"
    if pa.types.is_boolean(type_):
        return "checkbox"
    if pa.types.is_date(type_):
        return "date"
    return "text"


# --- converting held values --------------------------------------------------------------

#: A number as text: optional sign, digits with an optional fraction, optional exponent.
_NUMBER = r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*$"
#: A date as text: ISO 8601, optionally followed by a time.
_DATE = r"^\s*\d{4}-\d{2}-\d{2}([T ].*)?$"


def convert(values: pa.Array | pa.ChunkedArray, to: pa.DataType) -> pa.Array:
    """`values` as type `to`, by the rules every destination shares; a value that does not
    convert becomes null. Choices (dictionaries) are converted as their text.

    - to text: numbers without a trailing ``.0`` (``3``, ``0.5``), checkboxes ``true`` /
      ``false``, dates ISO (``2024-05-01``);
    - to number (float64, int64, decimal): numbers and text that is a number (``" 12.5 "``,
      ``1e3``) that the target holds exactly (3.0 into int64, not 2.5; 2**53+1 not into
      float64), checkboxes 1 / 0;
    - to checkbox: the words `connector.schema` reads (``yes``, ``x``, ``0``...), numbers
      1 / 0;
    - to date: ISO dates (a time after them is dropped);
    - anything else: null.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    target = to.value_type if pa.types.is_dictionary(to) else to
    if values.type == target:
        out = values
    elif pa.types.is_null(values.type):
        out = pa.nulls(len(values), target)
    elif pa.types.is_string(target) or pa.types.is_large_string(target):
        out = _to_text(values).cast(target)
    elif pa.types.is_floating(target) or pa.types.is_integer(target) or pa.types.is_decimal(target):
        out = _to_number(values, target)
    elif pa.types.is_boolean(target):
        out = _to_checkbox(values)
    elif pa.types.is_date(target):
        out = _to_date(values)
    else:
        out = pa.nulls(len(values), target)
    if pa.types.is_dictionary(to):
        return out.dictionary_encode().cast(to) if len(out) else pa.nulls(0, to)
    return out


def _to_text(values: pa.Array) -> pa.Array:
    if pa.types.is_floating(values.type) or pa.types.is_integer(values.type):
        text = values.cast(pa.string())
        return pc.replace_substring_regex(text, r"\.0$", "")
    if pa.types.is_boolean(values.type):
        return pc.if_else(values, "true", "false")
    return values.cast(pa.string())


def _to_number(values: pa.Array, to: pa.DataType) -> pa.Array:
    """Numbers, checkboxes and numeric text as the number type `to`, through their exact text
    (an int64's digits, a double's shortest text, a decimal's digits); a value `to` does not
    hold exactly becomes null."""
    if pa.types.is_boolean(values.type):
        values = values.cast(pa.int8())
    if pa.types.is_floating(values.type):
        text = string_array(decimal_texts(values.to_pylist()))
    elif pa.types.is_integer(values.type) or pa.types.is_decimal(values.type):
        text = values.cast(pa.string())
    elif pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        numeric = pc.fill_null(pc.match_substring_regex(values, _NUMBER), False)
        text = pc.if_else(numeric, pc.utf8_trim_whitespace(values), pa.scalar(None, values.type))
        text = text.cast(pa.string())
    else:
        return pa.nulls(len(values), to)
    try:
        out = cast_decimal(text, to) if pa.types.is_decimal(to) else text.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _numbers_one_by_one(text, to)
    if pa.types.is_floating(to):
        exact = pc.equal(out.cast(pa.string()), text)  # digits a double does not hold: null
        if not pc.all(pc.fill_null(exact, True)).as_py():
            return _numbers_one_by_one(text, to)
    return out


def _numbers_one_by_one(texts: pa.Array, to: pa.DataType) -> pa.Array:
    """`_to_number` for a column where some text does not convert: each on its own."""

    out: list[str | None] = []
    for text in texts.to_pylist():
        try:
            number = Decimal(text) if text is not None else None
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite():
            out.append(None)
        elif pa.types.is_integer(to):
            whole = number == number.to_integral_value() and INT64_MIN <= number <= INT64_MAX
            out.append(str(int(number)) if whole else None)
        elif pa.types.is_decimal(to):
            fits = decimal_misfit(text, ValueType("decimal", to.precision, to.scale)) is None
            out.append(plain_decimal(text) if fits else None)
        else:
            double = float(number)
            out.append(text if Decimal(double) == number or Decimal(repr(double)) == number
                       else None)
    return string_array(out).cast(to)


def _to_checkbox(values: pa.Array) -> pa.Array:
    if pa.types.is_floating(values.type) or pa.types.is_integer(values.type):
        one, zero = pc.equal(values, 1), pc.equal(values, 0)
        return pc.if_else(pc.or_(one, zero), one, pa.scalar(None, pa.bool_()))
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        words = pc.utf8_lower(pc.utf8_trim_whitespace(values))
        true = pc.is_in(words, value_set=pa.array(sorted(CHECKBOX_TRUE), pa.string()))
        false = pc.is_in(words, value_set=pa.array(sorted(CHECKBOX_FALSE), pa.string()))
        return pc.if_else(pc.or_(true, false), true, pa.scalar(None, pa.bool_()))
    return pa.nulls(len(values), pa.bool_())


def _to_date(values: pa.Array) -> pa.Array:
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        dated = pc.fill_null(pc.match_substring_regex(values, _DATE), False)
        day = pc.utf8_slice_codeunits(pc.utf8_trim_whitespace(values), 0, 10)
        kept = pc.if_else(dated, day, pa.scalar(None, pa.string()))
        try:
            return kept.cast(pa.date32())
        except pa.ArrowInvalid:  # shaped like a date but not one (2024-02-31)
            return _dates_one_by_one(kept)
    if pa.types.is_timestamp(values.type):
        return values.cast(pa.date32())
    return pa.nulls(len(values), pa.date32())


def _dates_one_by_one(texts: pa.Array) -> pa.Array:

    out: list[dt.date | None] = []
    for text in texts.to_pylist():
        try:
            out.append(dt.date.fromisoformat(text) if text else None)
        except ValueError:
            out.append(None)
    return pa.array(out, pa.date32())


def rename_fields(batch: pa.RecordBatch, names: Mapping[str, str]) -> pa.RecordBatch:
    """`batch` with the columns `names` maps renamed (a swap of two names included)."""
    if not names:
        return batch
    return batch.rename_columns([names.get(n, n) for n in batch.schema.names])
