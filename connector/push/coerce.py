"""Turn spreadsheet cells into a column's values the way a spreadsheet user means them.

Each column type has one *canonical* pandas form, used for both the source and the live table,
so the diff compares like with like: text, choice and date → ``string`` (dates as
``YYYY-MM-DD``), checkbox → ``boolean``, number → ``string`` holding the number's *exact key*
(`number_keys`): an integer's digits (``9007199254740993``; a whole double the integer it is
exactly, so ``1``, ``1.0`` and ``1e0`` are one number), any other double its shortest text
(``0.1``). Two numbers are equal exactly when their keys are, and a key is sent as the JSON
number it names (`wire_values`): an integer as an integer, whatever its size in int64.
Every value a rule changed is counted by rule name, so a plan can say what it did to the
data; a cell no rule accepts becomes an error message.

Text is text: only an empty cell is empty. ``None``, ``NA`` or ``null`` in a text or choice cell
is that text (a person named Null, a product code NA); a text cell of spaces is spaces. In a
number, checkbox or date column, a cell of spaces is empty too (it cannot be a value). Other
markers of "no value" are the user's to name (``--null-values``); the source reader applies
them (`connector.push.source`), so no word is special here.

``""`` in a source that types its cells (Parquet, a query, a DataFrame column of dtype
``string``) is the empty string, sent as ``""``. A CSV or a spreadsheet cannot tell an empty
string from a missing value: there an empty cell is no value (null), and a null in the source
matches a table's ``""`` as well as its null (`same_values`), so a table's own export pushes
back with no write.

The work is vectorised over each kind of cell (strings, numbers, dates, booleans) in a column;
only cells of an unusual kind for their column (a number in a text column, say) go one by one.
"""

from __future__ import annotations

import datetime as dt
import numbers
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from connector.push.dates import date_from_date, date_from_serial, date_strings
from connector.push.spec import Names, setting
from connector.schema import CHECKBOX_FALSE, CHECKBOX_TRUE, Column

__all__ = [
    "Coerced",
    "canonical_dtype",
    "coerce_column",
    "json_keys",
    "number_keys",
    "same_values",
    "wire_values",
]

#: Column types whose cells are kept as written: no trimming, spaces are text.
TEXT_KINDS = frozenset({"text", "choice"})
#: Integers a double holds whatever their last bits (|n| < 2**53).
_MAX_EXACT_INT = 2**53
#: An integer's text (a whole number with an optional zero fraction: ``12``, ``12.000``).
_INTEGER = r"[+-]?\d+(?:\.0*)?"
#: Significant digits a double's text needs at most (``%.17g``): a text of more names a
#: decimal no double holds, unless it is the double's exact expansion or shortest text.
_DOUBLE_DIGITS = 17
_THOUSANDS = r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?"
_CANONICAL: dict[str, str] = {
    "text": "string",
    "choice": "string",
    "date": "string",
    "number": "string",  # the number's exact key: `number_keys`
    "checkbox": "boolean",
}


@dataclass(frozen=True)
class Coerced:
    """A column's canonical values, the cells no rule accepted, and what each rule did."""

    values: pd.Series
    #: Error message by frame position, for the cells that could not be coerced.
    errors: dict[int, str]
    counts: Counter[str]


def canonical_dtype(column: Column) -> str:
    """The pandas dtype both sides of a diff use for `column`."""
    return _CANONICAL[column.kind.name]


def coerce_column(
    cells: pd.Series, column: Column, *, date_format: str | None = None,
    names: Names = "parameters",
) -> Coerced:
    """Coerce one source (or table) column to `column`'s canonical form.

    `date_format` (``strptime``, e.g. ``%d/%m/%Y``) reads dates whose day and month order
    the column cannot settle by itself (see `connector.push.dates.date_strings`); a message
    that asks for one names it as `names` say.
    """
    kind = column.kind.name
    cells = cells.reset_index(drop=True)
    hint = setting("date_format", names)
    typed = _typed(cells, column, date_format, hint)
    if typed is not None:
        return typed
    obj = cells.astype(object) if cells.dtype != object else cells
    types = obj.map(type)
    kinds = types.map({t: _kind_of_type(t) for t in types.unique()}).to_numpy()
    nulls = obj.isna().to_numpy(dtype=bool, copy=True)
    is_str = (kinds == "str") & ~nulls
    texts = pd.Series(obj[is_str], dtype="string")
    blank = (texts if kind in TEXT_KINDS else texts.str.strip()).eq("").to_numpy(dtype=bool)
    counts: Counter[str] = Counter()
    counts["empty → null"] = int(blank.sum())
    nulls[np.flatnonzero(is_str)[blank]] = True
    is_str[np.flatnonzero(is_str)[blank]] = False
    # NaN floats and NaT are nulls already; keep counting honest for them too.
    counts["empty → null"] += int((nulls & (kinds != "str")).sum())
    out = pd.Series(pd.NA, index=cells.index, dtype=canonical_dtype(column))
    ctx = _Ctx(kind, obj, kinds, nulls, out, {}, counts, date_format, hint)
    ctx.strings(is_str, texts[~blank])
    for cell_kind in ("number", "bool", "date", "datetime", "other"):
        ctx.natives(cell_kind)
    return Coerced(ctx.out, ctx.errors, +counts)


def _typed(
    cells: pd.Series, column: Column, date_format: str | None, hint: str
) -> Coerced | None:
    """A column whose cells are all of one type (a Parquet file's, a query's), coerced without
    a Python object per cell: text into any column, numbers into a number column, booleans
    into a checkbox, dates into a date. None for the other pairs (the cell-by-cell path)."""
    kind, dtype = column.kind.name, cells.dtype
    nulls = cells.isna().to_numpy(dtype=bool)
    counts: Counter[str] = Counter({"empty → null": int(nulls.sum())})
    if isinstance(dtype, pd.StringDtype):
        return _texts(cells, column, nulls, counts, date_format, hint)
    if kind == "date" and isinstance(dtype, pd.ArrowDtype) and pa.types.is_date(dtype.pyarrow_dtype):
        iso = pa.array(cells.array).cast(pa.string())  # YYYY-MM-DD, years before 1000 too
        text = pd.Series(iso.to_pandas(types_mapper=lambda _: pd.StringDtype("pyarrow")))
        return Coerced(text.set_axis(cells.index), {}, +counts)
    if kind == "number" and _is_number_dtype(dtype):
        keys, failed, notes = number_keys(cells)
        errors = {int(i): notes.get(int(i), _not(kind, hint)) for i in np.flatnonzero(failed & ~nulls)}
        return Coerced(keys.set_axis(cells.index), errors, +counts)
    if kind == "checkbox" and pd.api.types.is_bool_dtype(dtype):
        return Coerced(cells.astype("boolean"), {}, +counts)
    return None


def _texts(
    cells: pd.Series, column: Column, nulls: np.ndarray[Any, Any], counts: Counter[str],
    date_format: str | None, hint: str,
) -> Coerced:
    """`_typed` for text cells: the string rules of the column's type, all at once. Typed
    text is exact: ``""`` in a text or choice column is the empty string."""
    texts = cells.astype("string")
    if column.kind.name in TEXT_KINDS:  # text is text: nothing to convert, nothing can fail
        return Coerced(texts, {}, +counts)
    blank = texts.str.strip().eq("").fillna(False).to_numpy(dtype=bool)
    counts["empty → null"] += int(blank.sum())
    if blank.any():
        texts = texts.mask(blank)
    out = pd.Series(pd.NA, index=cells.index, dtype=canonical_dtype(column))
    ctx = _Ctx(
        column.kind.name, cells, np.array([]), nulls | blank, out, {}, counts, date_format, hint
    )
    ctx.strings(~(nulls | blank), texts)
    return Coerced(ctx.out, ctx.errors, +counts)


def same_values(new: pd.Series, old: pd.Series, column: Column) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Element-wise equality of a source's canonical cells (`new`) with a table's (`old`):
    exact (numbers by their keys), null equal to null. A null in the source of a text or
    choice column also matches ``""``: a CSV or spreadsheet cannot tell them apart."""
    a_na = new.isna().to_numpy(dtype=bool)
    b_na = old.isna().to_numpy(dtype=bool)
    equal: np.ndarray[Any, np.dtype[np.bool_]] = a_na & b_na
    same = (new == old).fillna(False).to_numpy(dtype=bool)
    result: np.ndarray[Any, np.dtype[np.bool_]] = equal | (~a_na & ~b_na & same)
    if column.kind.name in TEXT_KINDS:
        result |= a_na & old.eq("").fillna(False).to_numpy(dtype=bool)
    return result


def wire_values(values: pd.Series, column: Column) -> list[Any]:
    """Canonical values as JSON cells (None for null; a number key as the number it names)."""
    raw = values.astype(object).where(values.notna(), None).tolist()
    if column.kind.name != "number":
        return raw
    return [None if v is None else _wire_number(v) for v in raw]


def _wire_number(key: str) -> int | float:
    """A number key (`number_keys`) as JSON: an integer in int64 as an integer (exact at any
    size), anything else a double (which holds it exactly: keys are made so)."""
    if key.lstrip("-").isdigit():
        number = int(key)
        if _INT64_MIN <= number <= _INT64_MAX:
            return number
    return float(key)


# --- numbers: exact keys -----------------------------------------------------------------

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NOT_EXACT = ("has more digits than a number cell holds (a double: 17 significant digits); "
              "round it, or keep it in a text column")
_TOO_BIG = "an integer outside the 64-bit range, which a number cell does not hold exactly"


def number_keys(cells: pd.Series) -> tuple[pd.Series, np.ndarray[Any, Any], dict[int, str]]:
    """Each number cell's exact key (see the module docstring), from numbers of any dtype
    (integers, doubles, Arrow decimals) or from their text; with which cells failed (not a
    number, or one the API's number cells cannot hold exactly) and why, by position.
    Nulls stay null (and are not failures)."""
    dtype = cells.dtype
    nulls = cells.isna().to_numpy(dtype=bool)
    if _is_number_dtype(dtype) and not _is_decimal_dtype(dtype):
        if pd.api.types.is_float_dtype(dtype):
            floats = cells.to_numpy(dtype=float, na_value=np.nan)
            finite = np.isfinite(floats)
            keys = np.full(len(cells), None, dtype=object)
            keys[finite] = _float_keys(floats[finite])
            failed = ~finite & ~nulls
            return pd.Series(keys, dtype="string"), failed, {}
        ints = pd.Series(pa.array(cells.array).cast(pa.string()).to_pandas(), dtype="string")
        return _integer_keys(ints, nulls)
    texts = cells.astype("string").reset_index(drop=True)
    if _is_decimal_dtype(dtype):
        texts = pd.Series(pa.array(cells.array).cast(pa.string()).to_pandas(), dtype="string")
    return _text_keys(texts.str.strip())


def json_keys(texts: pa.Array | pa.ChunkedArray) -> pd.Series:
    """Number keys of JSON number texts as orjson writes them (what a live table is read as:
    the ``text`` value type): an integer's text is its key already, a double is read back
    (exactly: the text is its shortest) and keyed. Several times faster than `number_keys`,
    which must also read what people write."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.string())
    double = pc.fill_null(pc.or_(pc.match_substring(texts, "."), pc.match_substring(texts, "e")),
                          False)
    keys = np.array(texts.to_pylist(), dtype=object)
    where = np.flatnonzero(double.to_numpy(zero_copy_only=False))
    if len(where):
        floats = texts.take(pa.array(where)).cast(pa.float64()).to_numpy(zero_copy_only=False)
        keys[where] = _float_keys(floats)
    return pd.Series(keys, dtype="string")


def _float_keys(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Finite doubles' keys: a whole one's integer digits, another its shortest text."""
    keys: np.ndarray[Any, Any] = np.array(
        pa.array(values, pa.float64()).cast(pa.string()).to_pylist(), dtype=object
    )
    whole = np.floor(values) == values
    small = whole & (np.abs(values) < 2.0**63)
    keys[small] = values[small].astype(np.int64).astype(str)
    for i in np.flatnonzero(whole & ~small).tolist():
        keys[i] = str(int(values[i]))
    return keys


def _integer_keys(
    digits: pd.Series, nulls: np.ndarray[Any, Any]
) -> tuple[pd.Series, np.ndarray[Any, Any], dict[int, str]]:
    """Integers' keys from their digits (``+12``, ``007``, ``12.000`` included): within int64
    as they are; beyond it only those a double holds exactly (the API keeps those as doubles)."""
    body = digits.reset_index(drop=True).str.replace(r"\.0*$", "", regex=True).str.lstrip("+")
    bare = body.str.lstrip("-").str.lstrip("0").replace("", "0")
    negative = body.str.startswith("-").fillna(False).to_numpy(dtype=bool)
    negative &= (bare != "0").fillna(False).to_numpy(dtype=bool)  # -0 is 0
    keys = bare.mask(negative, "-" + bare)
    failed = np.zeros(len(digits), dtype=bool)
    notes: dict[int, str] = {}
    long = (bare.str.len() >= 19).fillna(False).to_numpy(dtype=bool)
    for i in np.flatnonzero(long).tolist():
        number = int(str(keys.iat[i]))
        if not _INT64_MIN <= number <= _INT64_MAX and int(float(number)) != number:
            failed[i] = True
            notes[i] = _TOO_BIG
    if failed.any():
        keys = keys.mask(failed)
    return keys.mask(nulls).reset_index(drop=True), failed, notes


def _text_keys(texts: pd.Series) -> tuple[pd.Series, np.ndarray[Any, Any], dict[int, str]]:
    """Number keys from text (stripped): integers exactly (`_integer_keys`), other numbers
    through the double they name; one with more digits than a double keeps fails."""
    nulls = texts.isna().to_numpy(dtype=bool)
    integer = texts.str.fullmatch(_INTEGER).fillna(False).to_numpy(dtype=bool)
    keys = pd.Series(pd.NA, index=texts.index, dtype="string")
    failed = ~nulls & ~integer
    rest = np.flatnonzero(failed)  # not integers: tried as doubles below
    notes: dict[int, str] = {}
    if integer.any():
        ints, bad, why = _integer_keys(texts[integer], np.zeros(int(integer.sum()), dtype=bool))
        where = np.flatnonzero(integer)
        keys.iloc[where] = ints.to_numpy()
        failed[where[bad]] = True
        notes.update({int(where[i]): note for i, note in why.items()})
    if len(rest):
        floats = pd.to_numeric(texts.iloc[rest].astype(object), errors="coerce").to_numpy(
            dtype=float, na_value=np.nan)
        ok = np.isfinite(floats)
        keys.iloc[rest[ok]] = _float_keys(floats[ok])
        failed[rest[ok]] = False
        read = pa.array(texts.iloc[rest[ok]].array, pa.string())
        # only a text longer than a double's digits can hold more of them
        long = pc.utf8_length(read).to_numpy(zero_copy_only=False) > _DOUBLE_DIGITS
        if long.any():
            where = np.flatnonzero(long)
            mantissa = pc.utf8_ltrim(pc.replace_substring_regex(
                read.take(pa.array(where)), r"[eE].*$|[^0-9]", ""), "0")
            long[where] = pc.utf8_length(mantissa).to_numpy(zero_copy_only=False) > _DOUBLE_DIGITS
        for i, text, number in zip(rest[ok][long], texts.iloc[rest[ok][long]],
                                   floats[ok][long], strict=True):
            if not _names_double(text, float(number)):
                failed[i] = True
                notes[int(i)] = _NOT_EXACT
                keys.iat[int(i)] = pd.NA
    return keys.reset_index(drop=True), failed, notes


def _names_double(text: str, number: float) -> bool:
    """Whether the decimal `text` is exactly the double `number`, or its shortest text."""
    exact = Decimal(text)
    return exact == Decimal(number) or exact == Decimal(repr(number))


def _is_number_dtype(dtype: Any) -> bool:
    return bool(
        (pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))
        or _is_decimal_dtype(dtype)
    )


def _is_decimal_dtype(dtype: Any) -> bool:
    return isinstance(dtype, pd.ArrowDtype) and pa.types.is_decimal(dtype.pyarrow_dtype)


# --- cell kinds --------------------------------------------------------------------------


def _kind_of_type(t: type) -> str:
    if issubclass(t, str):
        return "str"
    if issubclass(t, (bool, np.bool_)):
        return "bool"
    if issubclass(t, numbers.Number):
        return "number"
    if issubclass(t, (dt.datetime, np.datetime64)):
        return "datetime"
    if issubclass(t, dt.date):
        return "date"
    return "other"


@dataclass
class _Ctx:
    """The column being coerced: where each kind of cell is, and where results go."""

    type: str
    cells: pd.Series
    kinds: np.ndarray[Any, Any]
    nulls: np.ndarray[Any, Any]
    out: pd.Series
    errors: dict[int, str]
    counts: Counter[str]
    date_format: str | None = None
    #: The date format's setting as messages name it (``date_format``, ``--date-format``).
    hint: str = "date_format"

    def strings(self, mask: np.ndarray[Any, Any], texts: pd.Series) -> None:
        """The cells at `mask`, whose text is `texts` (all of the column's, or those at
        `mask` only), by the column type's string rule."""
        if not mask.any():
            return
        positions = np.flatnonzero(mask)
        if len(texts) != len(positions):
            texts = texts.iloc[positions]
        texts = texts.reset_index(drop=True)
        notes: dict[int, str] = {}
        if self.type == "date":
            values, failed, counts = date_strings(texts, self.date_format, notes, self.hint)
        elif self.type == "number":
            values, failed, counts = _number_strings(texts, notes)
        else:
            values, failed, counts = _STRING_RULES[self.type](texts)
        ok = ~failed
        if ok.all() and len(positions) == len(self.out):  # the usual case: a clean column
            self.out = values.astype(self.out.dtype).set_axis(self.out.index)
        else:
            self.out.iloc[positions[ok]] = values[ok].to_numpy()  # type: ignore[call-overload]
        self.counts.update(counts)
        for i in np.flatnonzero(failed).tolist():
            self.errors[int(positions[i])] = notes.get(i, _not(self.type, self.hint))

    def natives(self, kind: str) -> None:
        mask = (self.kinds == kind) & ~self.nulls
        if not mask.any():
            return
        if (self.type, kind) in (("number", "number"), ("checkbox", "bool")):
            self._same_kind(np.flatnonzero(mask))
            return
        rule = _NATIVE_RULES[self.type].get(kind)
        done: list[int] = []
        values: list[Any] = []
        for pos in np.flatnonzero(mask).tolist():
            result = rule(self.cells.iat[pos]) if rule else None
            if result is None:
                self.errors[int(pos)] = _not(self.type, self.hint)
                continue
            converted, counted = result
            done.append(pos)
            values.append(converted)
            if counted:
                self.counts[counted] += 1
        if done:  # one assignment: setting cells one by one copies an Arrow column each time
            self.out.iloc[done] = pd.array(values, dtype=self.out.dtype)  # type: ignore[arg-type]


    def _same_kind(self, positions: np.ndarray[Any, Any]) -> None:
        """Numbers into a number column, booleans into a checkbox column: all at once."""
        raw = self.cells.iloc[positions].to_numpy()
        if self.type == "checkbox":
            self.out.iloc[positions] = raw.astype(bool)  # type: ignore[call-overload]
            return
        # each number as the text that names it exactly: an int's digits, a double's
        # integer or shortest text, a Decimal's digits (`number_keys` takes it from there)
        texts = pd.Series([_number_text(v) for v in raw], dtype="string")
        keys, failed, notes = _text_keys(texts)
        self.out.iloc[positions[~failed]] = keys[~failed].to_numpy()  # type: ignore[call-overload]
        for i in np.flatnonzero(failed).tolist():
            self.errors[int(positions[i])] = notes.get(i, _not(self.type, self.hint))


# --- rules for text cells (vectorised) ---------------------------------------------------

_StringRule = Callable[[pd.Series], tuple[pd.Series, np.ndarray[Any, Any], Counter[str]]]
#: Converts one native cell: (value, rule name to count or None), or None when it cannot.
_NativeRule = Callable[[Any], tuple[Any, str | None] | None]

_NOT: dict[str, str] = {
    "text": "not text",
    "choice": "not a choice value",
    "number": "not a number",
    "checkbox": "not a checkbox value (use TRUE/FALSE, yes/no or 1/0)",
    "date": "not a date (use YYYY-MM-DD, a date like '5 March 2024', an Excel date, "
            "or give {hint})",
}


def _not(kind: str, hint: str) -> str:
    """Why a cell is not a value of `kind`; a date's names the date format's setting."""
    return _NOT[kind].format(hint=hint)


def _text_strings(texts: pd.Series) -> tuple[pd.Series, np.ndarray[Any, Any], Counter[str]]:
    return texts, np.zeros(len(texts), dtype=bool), Counter()


def _number_strings(
    texts: pd.Series, notes: dict[int, str] | None = None
) -> tuple[pd.Series, np.ndarray[Any, Any], Counter[str]]:
    """Numbers written as text, to their exact keys; ``1,234.5`` too (thousands separators).
    Why a number failed, when it is one the API cannot hold exactly, goes in `notes`."""
    stripped = texts.str.strip()
    counts: Counter[str] = Counter()
    thousands = stripped.str.fullmatch(_THOUSANDS).fillna(False).to_numpy(dtype=bool)
    if thousands.any():
        stripped = stripped.mask(thousands, stripped.str.replace(",", "", regex=False))
        counts["number with thousands separators"] = int(thousands.sum())
    keys, failed, why = _text_keys(stripped)
    if notes is not None:
        notes.update(why)
    counts["number from text"] = int((~failed).sum()) - counts["number with thousands separators"]
    return keys, failed, counts


def _checkbox_strings(texts: pd.Series) -> tuple[pd.Series, np.ndarray[Any, Any], Counter[str]]:
    lowered = texts.str.strip().str.lower()
    true = lowered.isin(CHECKBOX_TRUE).to_numpy(dtype=bool)
    false = lowered.isin(CHECKBOX_FALSE).to_numpy(dtype=bool)
    values = pd.Series(true, dtype="boolean")
    failed = ~(true | false)
    return values, failed, Counter({"checkbox from text": int((~failed).sum())})


_STRING_RULES: dict[str, _StringRule] = {
    "text": _text_strings,
    "choice": _text_strings,
    "number": _number_strings,
    "checkbox": _checkbox_strings,
    "date": date_strings,
}


# --- rules for native cells (one by one: spreadsheets rarely mix kinds in a column) -------


def _number_text(value: Any) -> str | None:
    """A native number cell as text naming it exactly (None for NaN or infinity)."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if not isinstance(value, float | np.floating):
        return str(value)  # a Decimal's own digits (a Fraction's or a complex's: refused)
    number = float(value)
    if not np.isfinite(number):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


def _text_from_number(value: Any) -> tuple[str, str]:
    if isinstance(value, numbers.Integral):
        return str(int(value)), "text from number"
    number = float(value)
    if number.is_integer() and abs(number) < _MAX_EXACT_INT:
        return str(int(number)), "text from number"
    return repr(number), "text from number"


def _text_from_date(value: Any) -> tuple[str, str]:
    stamp = pd.Timestamp(value)
    if stamp == stamp.normalize():
        return stamp.date().isoformat(), "text from date"  # strftime drops a year's zeros
    return stamp.isoformat(sep=" "), "text from date"


def _checkbox_from_number(value: Any) -> tuple[bool, str] | None:
    number = float(value)
    return (bool(number), "checkbox from number") if number in (0.0, 1.0) else None


_NATIVE_RULES: dict[str, dict[str, _NativeRule]] = {
    "text": {
        "number": _text_from_number,
        "bool": lambda v: ("TRUE" if v else "FALSE", "text from checkbox"),
        "date": _text_from_date,
        "datetime": _text_from_date,
        "other": lambda v: (str(v), "text from other value"),
    },
    "number": {},  # numbers: `_Ctx._same_kind`
    "checkbox": {"number": _checkbox_from_number},  # booleans: `_Ctx._same_kind`
    "date": {"date": date_from_date, "datetime": date_from_date, "number": date_from_serial},
}
_NATIVE_RULES["choice"] = {**_NATIVE_RULES["text"]}

