"""Table schemas, and the one table that maps a column type to pandas, Arrow and SQL types.

Every path (extract, load, push) asks this module what a column *is*; none keeps its own
mapping. Unknown column types load as text, with one warning naming the type.

pandas and SQLAlchemy are named here but imported only when a dtype or SQL type is asked
for: commands that need neither (`connector tables`, an export to Parquet) skip SQLAlchemy,
and pandas until pyarrow itself asks for it.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connector.errors import ColumnNotFound, ConfigError, UnknownColumnTypeWarning
from connector.values import FLOAT64, TypeSetting, ValueType, value_type

if TYPE_CHECKING:
    import pandas as pd
    import sqlalchemy as sa

__all__ = [
    "BOOKKEEPING",
    "CHECKBOX_FALSE",
    "CHECKBOX_TRUE",
    "SYSTEM_FIELDS",
    "TYPES",
    "Column",
    "ColumnType",
    "Table",
    "UnknownColumnTypeWarning",
    "arrow_schema",
    "column_type",
    "frame_from_arrow",
]

#: Row attributes that are not user columns, in the order they lead a frame.
SYSTEM_FIELDS: tuple[str, ...] = ("id", "created_at", "updated_at")
#: Columns of the connector's own that some destinations hold: the time a row was seen
#: deleted (``deletes = "mark"``) and dlt's deletion flag. Named with the system fields
#: (`Table.system_names`), after them, so adding one never renames those.
BOOKKEEPING: tuple[str, ...] = ("deleted_at", "deleted")

#: The words a checkbox cell may be written as, compared stripped and lower-cased, by every
#: path that meets one as text (a spreadsheet being pushed, a server that sends strings).
#: The API itself sends JSON true/false. "t"/"f" are PostgreSQL's, "x" a ticked box.
CHECKBOX_TRUE: frozenset[str] = frozenset({"true", "t", "yes", "y", "1", "on", "x"})
CHECKBOX_FALSE: frozenset[str] = frozenset({"false", "f", "no", "n", "0", "off"})

#: Metadata keys written on Arrow (and so Parquet) schemas and fields.
META_TABLE_ID = b"connector.table_id"
META_TABLE_NAME = b"connector.table_name"
META_COLUMN_TYPE = b"connector.type"
META_OPTIONS = b"connector.options"
META_SYSTEM = b"connector.system"
#: A number column's value type (`connector.values`), written when it is not the default.
META_VALUE_TYPE = b"connector.value_type"


@dataclass(frozen=True)
class ColumnType:
    """How one API column type is represented in each of our destinations."""

    name: str
    arrow: pa.DataType
    pandas_name: str  # a pandas dtype alias; `choice` refines it with the column's options
    sql_name: str  # a SQLAlchemy type class

    @property
    def pandas(self) -> Any:
        """The pandas dtype."""
        import pandas as pd

        return pd.api.types.pandas_dtype(self.pandas_name)

    @property
    def sql(self) -> type[sa.types.TypeEngine[Any]]:
        """The SQLAlchemy type class."""
        import sqlalchemy as sa

        kind: type[sa.types.TypeEngine[Any]] = getattr(sa, self.sql_name)
        return kind


_UTC_TIMESTAMP = ColumnType(
    "timestamp", pa.timestamp("us", tz="UTC"), "datetime64[us, UTC]", "DateTime"
)

#: The one mapping. Keys are API column types.
TYPES: Mapping[str, ColumnType] = {
    "text": ColumnType("text", pa.string(), "string", "Text"),
    "choice": ColumnType("choice", pa.dictionary(pa.int32(), pa.string()), "category", "Text"),
    "number": ColumnType("number", pa.float64(), "Float64", "Double"),
    "checkbox": ColumnType("checkbox", pa.bool_(), "boolean", "Boolean"),
    "date": ColumnType("date", pa.date32(), "date32[pyarrow]", "Date"),
}

def column_type(type_name: str) -> ColumnType:
    """The representation of `type_name`; unknown types are text.

    The warning about an unknown type is given once per table schema read (`Table.from_api`),
    not here: this is called for every value path and must stay quiet.
    """
    return TYPES.get(type_name) or TYPES["text"]


@dataclass(frozen=True)
class Column:
    """A column definition as the API describes it."""

    name: str
    type: str
    id: str = ""
    required: bool = False
    options: tuple[str, ...] | None = None
    #: How a number column's cells are held (`connector.values`): ``int64``,
    #: ``decimal(38,9)``...; empty for the default (float64) and for other columns.
    value_type: str = ""
    #: The setting that gave `value_type`, as errors name it (not part of the column's identity).
    typed_by: str = field(default="", compare=False, repr=False)

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Column:
        options = data.get("options")
        return cls(
            name=str(data["name"]),
            type=str(data.get("type", "text")),
            id=str(data.get("id", f"col_{data['name']}")),
            required=bool(data.get("required", False)),
            options=tuple(str(o) for o in options) if options is not None else None,
        )

    @property
    def kind(self) -> ColumnType:
        return column_type(self.type)

    @property
    def values(self) -> ValueType | None:
        """A number column's value type (float64 unless set); None for other columns."""
        if self.kind.name != "number":
            return None
        return value_type(self.value_type) if self.value_type else FLOAT64

    @property
    def arrow_type(self) -> pa.DataType:
        values = self.values
        return values.arrow if values is not None else self.kind.arrow

    @property
    def pandas_dtype(self) -> Any:
        if self.type == "choice":
            import pandas as pd

            return pd.CategoricalDtype(list(self.options or ()), ordered=False)
        values = self.values
        return values.pandas if values is not None else self.kind.pandas

    @property
    def sql_type(self) -> sa.types.TypeEngine[Any]:
        import sqlalchemy as sa

        values = self.values
        if values is not None:
            return values.sql()
        if self.kind.sql is sa.DateTime:
            return sa.DateTime(timezone=True)
        return self.kind.sql()

    @property
    def type_label(self) -> str:
        """The column's type as messages name it: ``number``, or ``number (int64)`` when set."""
        return f"{self.type} ({self.values})" if self.value_type else self.type

    def arrow_field(self, name: str | None = None) -> pa.Field:
        meta = {META_COLUMN_TYPE: self.type.encode()}
        if self.options is not None:
            meta[META_OPTIONS] = json.dumps(list(self.options)).encode()
        if self.value_type:
            meta[META_VALUE_TYPE] = str(self.values).encode()
        return pa.field(name or self.name, self.arrow_type, nullable=True, metadata=meta)


@dataclass(frozen=True)
class Table:
    """A table's identity and column definitions (the API's "table schema")."""

    id: str
    name: str
    columns: tuple[Column, ...] = field(default_factory=tuple)

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Table:
        """Validates the API's table schema; warns once naming any column type we do not know."""
        table = cls(
            id=str(data["id"]),
            name=str(data["name"]),
            columns=tuple(Column.from_api(c) for c in data.get("columns", ())),
        )
        unknown = {c.name: c.type for c in table.columns if c.type not in TYPES}
        if unknown:
            listed = ", ".join(f"{name!r} ({kind!r})" for name, kind in unknown.items())
            warnings.warn(
                f"table {table.name!r}: unknown column type for {listed}; reading as text",
                UnknownColumnTypeWarning,
                stacklevel=2,
            )
        return table

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        """The column called exactly `name`; `ColumnNotFound` suggests the close ones otherwise."""
        for col in self.columns:
            if col.name == name:
                return col
        names = self.column_names
        close = difflib.get_close_matches(name, names, n=3)
        close += [n for n in names if n.casefold() == name.casefold() and n not in close]
        hint = (
            "did you mean " + " or ".join(map(repr, close)) + "?"
            if close
            else f"columns: {', '.join(map(repr, names)) or 'none'}"
        )
        raise ColumnNotFound(f"table {self.name!r} has no column {name!r}; {hint}")

    def typed(self, settings: Iterable[TypeSetting]) -> Table:
        """This table with the value types `settings` give its number columns; a ConfigError
        naming the setting for a column the table lacks or one that is not a number."""
        columns = {c.name: c for c in self.columns}
        for setting in settings:
            column = columns.get(setting.column)
            if column is None:
                try:
                    self.column(setting.column)
                except ColumnNotFound as exc:
                    raise ConfigError(f"{setting.where}: {exc}") from None
            elif column.kind.name != "number":
                raise ConfigError(
                    f"{setting.where}: column {setting.column!r} of table {self.name!r} is "
                    f"{column.type}; only number columns take a value type"
                )
            else:
                try:
                    held = value_type(setting.type)
                except ValueError as exc:
                    raise ConfigError(f"{setting.where}: {exc}") from None
                columns[setting.column] = replace(
                    column, value_type="" if held == FLOAT64 else str(held), typed_by=setting.where
                )
        return replace(self, columns=tuple(columns[c.name] for c in self.columns))

    def system_names(self) -> dict[str, str]:
        """The names of the columns that are not the user's, in every frame and destination:
        the row id and timestamps (``_id``, ``_created_at``, ``_updated_at``) and the
        bookkeeping ones (``_deleted_at``, ``_deleted``): the one place they are decided.

        Prefixed with underscores so a user column called ``id`` or ``created_at`` survives;
        more underscores are added while a user column already has the name, so no user
        column can take one of ours (a user column called ``_deleted_at`` makes the mark
        column ``__deleted_at``).
        """
        taken = set(self.column_names)
        names: dict[str, str] = {}
        for attr in (*SYSTEM_FIELDS, *BOOKKEEPING):
            name = f"_{attr}"
            while name in taken:
                name = f"_{name}"
            names[attr] = name
            taken.add(name)
        return names


def _system_column(attr: str) -> ColumnType:
    return TYPES["text"] if attr == "id" else _UTC_TIMESTAMP


def arrow_schema(table: Table, columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema of `table`'s rows: system fields first, then the user columns.

    Carries the table id and name on the schema, and each column's API type and choice
    options on its field, so a Parquet file says what it was extracted from.
    """
    system = table.system_names()
    fields = [
        pa.field(
            system[attr],
            _system_column(attr).arrow,
            nullable=attr != "id",
            metadata={META_SYSTEM: attr.encode()},
        )
        for attr in SYSTEM_FIELDS
    ]
    wanted = table.columns if columns is None else [table.column(c) for c in columns]
    fields.extend(col.arrow_field() for col in wanted)
    return pa.schema(
        fields,
        metadata={META_TABLE_ID: table.id.encode(), META_TABLE_NAME: table.name.encode()},
    )


def frame_from_arrow(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], table: Table) -> pd.DataFrame:
    """A pandas DataFrame with the dtypes of `table`'s columns (choices keep all options)."""
    if isinstance(data, pa.RecordBatch):
        arrow = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        arrow = data
    else:
        batches = list(data)
        schema = batches[0].schema if batches else arrow_schema(table)
        arrow = pa.Table.from_batches(batches, schema=schema)
    frame: pd.DataFrame = arrow.to_pandas(types_mapper=_pandas_type_for_arrow, ignore_metadata=True)
    by_name = {c.name: c for c in table.columns}
    system = {v: k for k, v in table.system_names().items()}
    for name in frame.columns:
        if name in system:
            dtype: Any = "string" if system[name] == "id" else _UTC_TIMESTAMP.pandas
        elif name in by_name:
            dtype = by_name[name].pandas_dtype
        else:
            continue
        frame[name] = frame[name].astype(dtype)
    return frame


def _pandas_type_for_arrow(arrow_type: pa.DataType) -> Any:
    import pandas as pd

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pd.StringDtype()
    if pa.types.is_floating(arrow_type):
        return pd.Float64Dtype()
    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_decimal(arrow_type):
        return pd.ArrowDtype(arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pd.BooleanDtype()
    if pa.types.is_date32(arrow_type):
        return pd.ArrowDtype(pa.date32())
    return None
