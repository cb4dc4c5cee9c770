"""What every push source becomes: a `Sheet` (opened: name and header) read into a
`SourceFrame` (cells by column, each row's spreadsheet row number), and the steps every reader
shares: header checks, row numbers, the empty-cell markers, Arrow columns as pandas ones."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from connector.errors import SourceError

__all__ = [
    "Sheet",
    "SourceFrame",
    "arrow_frame",
    "blank_markers",
    "blanked",
    "check_header",
    "holds_text",
    "numbered",
    "one_line",
]


@dataclass(frozen=True)
class SourceFrame:
    """A source table: its cells by column, and each row's spreadsheet row number."""

    name: str
    frame: pd.DataFrame
    rows: np.ndarray[Any, np.dtype[np.int64]]
    #: Every column name the source has, when only some were read (`Sheet.read`).
    header: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.frame):
            raise ValueError("one row number per frame row")

    @property
    def columns(self) -> tuple[str, ...]:
        """The source's column names, read or not."""
        return self.header if self.header is not None else tuple(map(str, self.frame.columns))

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, name: str = "DataFrame") -> SourceFrame:
        """A DataFrame as a source; its rows are numbered as if written under a header row."""
        if frame.columns.has_duplicates:
            dupes = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
            raise SourceError(f"{name}: duplicate column names {dupes}")
        frame = frame.reset_index(drop=True)
        frame.columns = [str(c) for c in frame.columns]
        return cls(name, frame, np.arange(2, len(frame) + 2, dtype=np.int64))


@dataclass(frozen=True)
class Sheet:
    """A source opened, not yet read: its name and column names, known from the header alone
    where the format allows (a Parquet file's schema, a CSV's first record, a query's result
    columns), so a push checks them against the table before reading its rows."""

    name: str
    #: The column names; None when they cannot be told before the rows are read.
    columns: tuple[str, ...] | None
    #: Reads every row; given column names, only those (where the format can: Parquet).
    reader: Callable[[frozenset[str] | None], SourceFrame]

    def read(self, columns: Collection[str] | None = None) -> SourceFrame:
        """Every row, and of `columns` only when given."""
        data = self.reader(None if columns is None else frozenset(columns))
        if columns is not None:
            keep = [c for c in data.frame.columns if c in columns]
            if len(keep) < len(data.frame.columns):
                data = SourceFrame(data.name, data.frame[keep], data.rows, data.columns)
        return data


def arrow_frame(data: pa.Table) -> pd.DataFrame:
    """Arrow columns as pandas ones with no Python object per cell where a compact type holds
    the values (text, dates, integers and booleans with gaps), each column let go once
    converted, so a large file is held about once."""
    columns: dict[str, pd.Series] = {}
    for name in data.column_names:
        columns[name] = _series(data.column(name))
        data = data.drop_columns([name])
    return pd.DataFrame(columns, copy=False)


def _series(values: pa.ChunkedArray) -> pd.Series:
    kind = values.type
    if pa.types.is_dictionary(kind):
        values, kind = values.cast(kind.value_type), kind.value_type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pd.Series(values.to_pandas(types_mapper=lambda _: pd.StringDtype("pyarrow")))
    if pa.types.is_date(kind):
        return pd.Series(values.to_pandas(types_mapper=pd.ArrowDtype))
    if pa.types.is_boolean(kind):
        return pd.Series(values.to_pandas(types_mapper=lambda _: pd.BooleanDtype()))
    if pa.types.is_signed_integer(kind):
        return pd.Series(values.cast(pa.int64()).to_pandas(types_mapper=lambda _: pd.Int64Dtype()))
    return pd.Series(values.to_pandas())


def blank_markers(frame: pd.DataFrame, markers: frozenset[str]) -> pd.DataFrame:
    """`frame` with the text cells that equal a marker emptied (None): what pandas'
    ``na_values`` does to a CSV, for cells read otherwise."""
    if not markers:
        return frame
    out = frame.copy()
    for column in out.columns:
        cells = out[column]
        if holds_text(cells):
            hit = cells.isin(markers).to_numpy(dtype=bool)
            if hit.any():
                out[column] = cells.astype(object).mask(hit, None)
    return out


def holds_text(cells: pd.Series) -> bool:
    """Whether a column may hold text cells (objects, strings, categories)."""
    return cells.dtype == object or isinstance(cells.dtype, pd.StringDtype | pd.CategoricalDtype)


def blanked(data: SourceFrame, markers: frozenset[str]) -> SourceFrame:
    return SourceFrame(data.name, blank_markers(data.frame, markers), data.rows, data.header)


def check_header(names: list[str], path: Path | str) -> None:
    if not names:
        raise SourceError(f"{path}: the header row has no column names")
    dupes = sorted(n for n, count in Counter(names).items() if count > 1)
    if dupes:
        raise SourceError(f"{path}: duplicate column names in the header: {dupes}")


def numbered(name: str, frame: pd.DataFrame, *, first_row: int) -> SourceFrame:
    """Number rows as a spreadsheet does, then drop the wholly empty ones."""
    rows = np.arange(first_row, first_row + len(frame), dtype=np.int64)
    blank = np.ones(len(frame), dtype=bool)
    for column in frame.columns:
        cells = frame[column]
        text = (cells if isinstance(cells.dtype, pd.StringDtype) else cells.astype("string"))
        text = text.str.strip().fillna("")
        blank &= (text == "").to_numpy(dtype=bool)
    return SourceFrame(name, frame.loc[~blank].reset_index(drop=True), rows[~blank])


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
