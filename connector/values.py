"""How a number column's cells are held (its *value type*), and the check that each is exact.

The API sends a number cell as a JSON number: an integer (the reference server keeps any in
the 64-bit range) or a double. A number column is held as one of:

    float64        the default: every double, and every integer a double holds exactly (all
                   of them up to 2**53 in size, and beyond that those with enough trailing
                   zero bits); another integer stops the table
    int64          -2**63 .. 2**63-1; a fraction (or a double beyond that range) stops the table
    decimal(P,S)   Arrow decimal128: P digits in all, S of them after the point (1 <= P <= 38,
                   0 <= S <= P). ``decimal`` alone is `DEFAULT_DECIMAL`, decimal(38,9): every
                   int64 and nine decimal places (BigQuery's NUMERIC). A double with a
                   fraction is held as its shortest decimal text (0.1 is 0.1), a whole one as
                   the integer it is (`decimal_texts`); a value needing more places, or more
                   digits before the point, stops the table
    text           the number's JSON text (``"9007199254740993"``, ``"0.1"``, ``"1e+16"``):
                   exact whatever the number, in any destination

"Stops the table" is `InexactValue`: that table is not written (the others go on), and the
message names the table, column, row, value and the setting that types the column. The
setting is made per column: ``[tables.types.<table>] <column> = "int64"`` in a job file,
``--type TABLE:COLUMN=int64`` on `export`, `load` and `sync`, ``types={...}`` in Python.

Every path that types a number column asks this module (through `connector.schema.Column`):
extraction (`number_array`), the Arrow, pandas and SQL types, every destination.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa

from connector.arrays import from_buffers, string_array

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "DEFAULT_DECIMAL",
    "FLOAT64",
    "Inexact",
    "TypeSetting",
    "ValueType",
    "cast_decimal",
    "decimal_misfit",
    "decimal_texts",
    "number_array",
    "plain_decimal",
    "value_type",
]

#: Arrow's decimal128 holds at most 38 digits.
MAX_PRECISION = 38
#: Integers a double holds whatever their last bits: |n| < 2**53.
_EXACT_FLOAT_INT = 2**53
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_SPEC = re.compile(r"\s*(float64|int64|text|decimal)\s*(?:\(\s*(\d+)\s*,\s*(\d+)\s*\))?\s*")


@dataclass(frozen=True)
class ValueType:
    """One value type: ``float64``, ``int64``, ``decimal`` (with `precision`, `scale`), ``text``."""

    name: str
    precision: int = 0
    scale: int = 0

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def arrow(self) -> pa.DataType:
        """The Arrow type: Parquet, Delta and Iceberg hold it as it is."""
        return _ARROW[self.name] if self.name != "decimal" else pa.decimal128(self.precision, self.scale)

    @property
    def pandas_name(self) -> str | None:
        """The pandas dtype's alias; None for a decimal (an Arrow-backed dtype, no alias)."""
        return _PANDAS.get(self.name)

    @property
    def pandas(self) -> Any:
        """The pandas dtype (nullable; decimals Arrow-backed, exact)."""
        import pandas as pd

        if self.pandas_name is None:
            return pd.ArrowDtype(self.arrow)
        return pd.api.types.pandas_dtype(self.pandas_name)

    def sql(self) -> sa.types.TypeEngine[Any]:
        """The SQLAlchemy type: DOUBLE PRECISION, BIGINT, NUMERIC(P,S) or TEXT."""
        import sqlalchemy as sa

        if self.name == "decimal":
            return sa.Numeric(self.precision, self.scale, asdecimal=True)
        kind: sa.types.TypeEngine[Any] = {"float64": sa.Double, "int64": sa.BigInteger,
                                          "text": sa.Text}[self.name]()
        return kind

    @property
    def duckdb(self) -> str:
        """The DuckDB column type."""
        if self.name == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        return {"float64": "DOUBLE", "int64": "BIGINT", "text": "VARCHAR"}[self.name]

    def array(self, values: list[Any]) -> pa.Array:
        """JSON numbers (ints, floats) and Nones as an array of this type; `Inexact` for a
        number it cannot hold exactly, TypeError when a value is not a JSON number."""
        return _BUILDERS[self.name](values, self)


FLOAT64 = ValueType("float64")
#: ``decimal`` without a precision: every int64 and nine places after the point.
DEFAULT_DECIMAL = ValueType("decimal", MAX_PRECISION, 9)

_ARROW = {"float64": pa.float64(), "int64": pa.int64(), "text": pa.string()}
_PANDAS = {"float64": "Float64", "int64": "Int64", "text": "string"}


@cache
def value_type(spec: str) -> ValueType:
    """The value type `spec` names (``"int64"``, ``"decimal(18,2)"``); ValueError saying what
    is wrong otherwise (the caller names the setting)."""
    match = _SPEC.fullmatch(spec.lower())
    if match is None:
        raise ValueError(
            f"{spec!r} is not a value type; use float64, int64, decimal, decimal(P,S) or text"
        )
    name, precision, scale = match.groups()
    if precision is None:
        return DEFAULT_DECIMAL if name == "decimal" else ValueType(name)
    if name != "decimal":
        raise ValueError(f"{spec!r}: only decimal takes (precision, scale)")
    p, s = int(precision), int(scale)
    if not 1 <= p <= MAX_PRECISION or s > p:
        raise ValueError(
            f"{spec!r}: a decimal's precision is 1 to {MAX_PRECISION} and its scale 0 to "
            "the precision"
        )
    return ValueType("decimal", p, s)


@dataclass(frozen=True)
class TypeSetting:
    """One column's value type as a user set it: the table (a name or id, as written), the
    column, the type (checked: `value_type` reads it), and where it was set, as errors name
    it (``jobs/nightly.toml: tables.types.Orders.OrderNo``, ``--type Orders:OrderNo=int64``)."""

    table: str
    column: str
    type: str
    where: str

    @classmethod
    def parse(cls, option: str, where: str = "--type") -> TypeSetting:
        """``TABLE:COLUMN=TYPE`` (a command's ``--type``): the table is everything before the
        first ``:`` (a table whose name holds one is given by its id), the type everything
        after the last ``=``; ValueError saying what is wrong."""
        left, equals, spec = option.rpartition("=")
        table, colon, column = left.partition(":")
        if not (equals and colon and table and column):
            raise ValueError(
                f"{option!r} is not TABLE:COLUMN=TYPE (e.g. Orders:OrderNo=int64; a table "
                "whose name holds ':' is given by its id)"
            )
        value_type(spec)
        return cls(table, column, spec.strip(), f"{where} {option}")


class Inexact(Exception):
    """A number a value type cannot hold exactly: which one (its position and value), and why.
    Internal: extraction makes it an `InexactValue` naming the table, column and row."""

    def __init__(self, position: int, value: Any, why: str) -> None:
        super().__init__(why)
        self.position, self.value, self.why = position, value, why


def number_array(values: list[Any], held: ValueType | None) -> pa.Array:
    """`values` (JSON numbers and Nones) held as `held` (None: float64)."""
    return (held or FLOAT64).array(values)


def _number_texts(values: list[Any]) -> list[str | None]:
    """JSON numbers as the JSON text orjson writes them (``9007199254740993``, ``0.1``,
    ``1e+16``), None for None: the exact text of each; TypeError for anything else."""
    _check_numbers(values)
    if not values:
        return []
    texts = orjson.dumps(values)[1:-1].decode("ascii").split(",")
    return [None if t == "null" else t for t in texts]


_JSON_NUMBER = {int, float, type(None)}


def _check_numbers(values: list[Any]) -> set[type]:
    types = set(map(type, values))
    if not types <= _JSON_NUMBER:
        raise TypeError("not all numbers")
    return types


def _float64(values: list[Any], held: ValueType) -> pa.Array:
    types = _check_numbers(values)
    numbers = np.array(values, np.float64)  # None becomes NaN, which JSON cannot send
    if int in types:  # an integer a double cannot hold is rounded by np.array: find it
        for i in np.flatnonzero(np.abs(numbers) >= _EXACT_FLOAT_INT).tolist():
            value = values[i]
            if type(value) is int and int(numbers[i]) != value:
                raise Inexact(i, value, f"float64 would hold it as {float(numbers[i])!r}")
    nan = np.isnan(numbers)
    valid = ~nan if nan.any() else None
    return from_buffers(pa.float64(), valid, len(values), [pa.py_buffer(numbers)])


def _int64(values: list[Any], held: ValueType) -> pa.Array:
    types = _check_numbers(values)
    nulls = None in values
    filled = [0 if v is None else v for v in values] if nulls else values
    if float in types:  # a double is held if it is whole and in range
        for i, v in enumerate(filled):
            if type(v) is float:
                if not (v.is_integer() and INT64_MIN <= v < 2**63):
                    why = "it is outside int64's range" if v.is_integer() else "int64 holds no fraction"
                    raise Inexact(i, v, why)
                filled[i] = int(v)
    try:
        numbers = np.array(filled, np.int64)
    except OverflowError:
        i = next(i for i, v in enumerate(filled) if not INT64_MIN <= v <= INT64_MAX)
        raise Inexact(i, values[i], "it is outside int64's range") from None
    valid = np.fromiter((v is not None for v in values), np.bool_, len(values)) if nulls else None
    return from_buffers(pa.int64(), valid, len(values), [pa.py_buffer(numbers)])


def decimal_texts(values: list[Any]) -> list[str | None]:
    """JSON numbers as exact decimal text: an integer's digits, a fraction's shortest text
    (0.1 is ``0.1``), and a whole double the integer it is (2.0**60 is
    ``1152921504606846976``, where its shortest text ``1.152921504606847e+18`` says
    ...7000): as int64 holds it, and as a push compares it."""
    texts = _number_texts(values)
    if float in set(map(type, values)):
        numbers = np.array(values, np.float64)
        for i in np.flatnonzero(np.abs(numbers) >= _EXACT_FLOAT_INT).tolist():
            texts[i] = str(int(values[i]))
    return texts


def _decimal(values: list[Any], held: ValueType) -> pa.Array:
    texts = decimal_texts(values)
    try:
        return cast_decimal(string_array(texts), held.arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    for i, text in enumerate(texts):  # which one, and why
        if text is not None:
            why = decimal_misfit(text, held)
            if why:
                raise Inexact(i, values[i], why)
    return string_array([None if t is None else plain_decimal(t) for t in texts]).cast(held.arrow)


#: Characters of the longest decimal text Arrow is trusted to cast: pyarrow 26 reads a text of
#: far more than 38 digits as 0 without a word (309 digits: ``0E-9``), where ~40 fail as they
#: should. A longer text is checked (`decimal_misfit`) and cast as its plain digits.
_LONGEST_CAST = MAX_PRECISION + 8


def cast_decimal(texts: pa.Array, to: pa.DataType) -> pa.Array:
    """Decimal texts as the decimal type `to`; ArrowInvalid when one does not fit it (or is
    too long to trust Arrow's cast with: the caller checks those one by one)."""
    import pyarrow.compute as pc

    if len(texts) and (pc.max(pc.binary_length(texts)).as_py() or 0) > _LONGEST_CAST:
        raise pa.ArrowInvalid("a text too long to cast safely")
    return texts.cast(to)


def plain_decimal(text: str) -> str:
    """A number's text as its plain digits, without trailing zeros (``1e+16`` is
    ``10000000000000000``): what Arrow casts safely, once `decimal_misfit` passed it."""
    return format(Decimal(text).normalize(), "f")


def decimal_misfit(text: str, held: ValueType) -> str | None:
    """Why the number `text` does not fit `held` (a decimal), or None when it does."""
    try:
        number = Decimal(text)
    except InvalidOperation:  # pragma: no cover - JSON numbers always parse
        return "not a number"
    exponent = number.normalize().as_tuple().exponent
    places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    if places > held.scale:
        return f"{held} holds {held.scale} places after the point, and it has {places}"
    whole = len(str(abs(int(number)))) if abs(number) >= 1 else 0
    if whole > held.precision - held.scale:
        return f"{held} holds {held.precision - held.scale} digits before the point, and it has {whole}"
    return None


def _text(values: list[Any], held: ValueType) -> pa.Array:
    return string_array(_number_texts(values))


_BUILDERS = {"float64": _float64, "int64": _int64, "decimal": _decimal, "text": _text}
