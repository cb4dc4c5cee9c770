"""Read what a user pushes — CSV, an Excel sheet, Parquet or a DataFrame — into one shape.

Cells are kept as the file holds them: CSV cells are *strings* (so ``007`` and
``12345678901234567890`` survive), Excel and Parquet cells keep their native values. Turning a
cell into a column's type is `coerce`'s job, done per column with the table's schema in hand.
Every row remembers its spreadsheet row number (the header is row 1), for error reports.

Text is text: ``NA``, ``None`` or ``null`` is read as that text, never as a missing value. Only
the markers the user names (`null_values`, ``--null-values``) read as empty cells: a CSV's
through pandas' own ``na_values`` as it is parsed, other sources' (a workbook's, Parquet's, a
DataFrame's text cells) by the same exact match. `excel_safe` takes off the ``'`` that
``export --excel-safe`` put before text a spreadsheet would run (`undo_excel_safe`), in the
header too.

A workbook's merged cells read as empty except the first: a merge that holds a value is an
error naming every such range (``Sheet1!B2:B4``), unless `merged_cells` is ``fill``, which
copies each merge's value into the cells it covers.

An ``.xlsx`` formula is read as the value the spreadsheet saved with it. A formula saved
without one (files written by scripts, e.g. openpyxl, carry none until a spreadsheet app
recalculates and saves them) is an error naming its cells: read as empty, it would clear
those cells upstream.

Here: which reader a source takes, and the options every reader honours. The readers, one a
kind: `csvfile`, `excel`, `parquetfiles`, `query`; what they read into, `sheet`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from connector.destinations.formats import undo_excel_safe
from connector.errors import ConfigError, SourceError
from connector.locations import DEFAULT_TIMEOUT, check_location, filesystem, is_remote, within
from connector.modes import PUSH_SUFFIXES, MergedCells
from connector.push.csvfile import open_csv
from connector.push.excel import read_excel
from connector.push.parquetfiles import open_parquet
from connector.push.query import open_query
from connector.push.sheet import (
    Sheet,
    SourceFrame,
    arrow_frame,
    blanked,
    check_header,
    holds_text,
    one_line,
)
from connector.push.spec import Names, Query, check_merged_cells, check_null_values, setting

__all__ = [
    "Query",
    "Sheet",
    "SourceError",
    "SourceFrame",
    "arrow_frame",
    "open_source",
    "read_source",
]


def read_source(
    source: str | Path | pd.DataFrame | Query,
    *,
    sheet: str | None = None,
    null_values: Sequence[str] = (),
    excel_safe: bool = False,
    merged_cells: MergedCells = "refuse",
    names: Names = "parameters",
) -> SourceFrame:
    """Read a CSV, ``.xlsx`` or Parquet file (by extension), a folder of Parquet files, an
    object in object storage (``s3://bucket/key.parquet``, a CSV, or a Parquet prefix), or
    take a DataFrame as it is.

    `null_values`: texts that mean an empty cell (only an empty cell is empty by default).
    `excel_safe`: undo ``export --excel-safe``. `merged_cells`: ``refuse`` or ``fill``.
    Messages name these settings as `names` say.
    """
    return open_source(
        source, sheet=sheet, null_values=null_values, excel_safe=excel_safe,
        merged_cells=merged_cells, names=names,
    ).read()


def open_source(
    source: str | Path | pd.DataFrame | Query,
    *,
    sheet: str | None = None,
    null_values: Sequence[str] = (),
    excel_safe: bool = False,
    merged_cells: MergedCells = "refuse",
    names: Names = "parameters",
) -> Sheet:
    """`read_source`'s source, opened: a missing file, a bad option or an unreadable header
    fails here; the rows are read by `Sheet.read`."""
    markers = frozenset(check_null_values(null_values, names))
    check_merged_cells(merged_cells, names)
    opened = _open(source, sheet, markers, merged_cells, names)
    if not excel_safe:
        return opened
    if opened.columns is None:
        return Sheet(opened.name, None, lambda columns: _unguarded(opened.reader(None)))
    unguarded = tuple(undo_excel_safe(c) for c in opened.columns)
    raw = dict(zip(unguarded, opened.columns, strict=True))

    def read(columns: frozenset[str] | None) -> SourceFrame:
        wanted = None if columns is None else frozenset(raw[c] for c in columns if c in raw)
        return _unguarded(opened.reader(wanted))

    return Sheet(opened.name, unguarded, read)


def _open(
    source: str | Path | pd.DataFrame | Query, sheet: str | None, markers: frozenset[str],
    merged_cells: MergedCells, names: Names,
) -> Sheet:
    if isinstance(source, Query):
        _only_excel(source.name, sheet, merged_cells, names)
        opened = open_query(source, names)
        return Sheet(opened.name, opened.columns,
                     lambda columns: blanked(opened.reader(columns), markers))
    if isinstance(source, pd.DataFrame):
        frame = blanked(SourceFrame.from_frame(source), markers)
        return Sheet(frame.name, frame.columns, lambda _: frame)
    if not isinstance(source, str | os.PathLike):
        raise SourceError(
            f"a source is a DataFrame or the path of a CSV, .xlsx or Parquet file, "
            f"not {type(source).__name__}"
        )
    if isinstance(source, str) and is_remote(source):
        return _open_remote(source, sheet, markers, merged_cells, names)
    path = Path(source)
    if path.is_dir():
        _only_excel(str(path), sheet, merged_cells, names)
        return open_parquet(str(path), markers)
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in (".xlsx", ".xlsm"):
        _only_excel(str(path), sheet, merged_cells, names)
    if suffix in (".xls", ".ods", ".numbers"):
        raise SourceError(f"{path}: {suffix} files are not read; save the sheet as .xlsx or CSV")
    if suffix not in PUSH_SUFFIXES:
        kind = f"a {suffix} file" if suffix else "a file with no suffix"
        raise SourceError(
            f"{path}: {kind} is not read; push reads {', '.join(PUSH_SUFFIXES)} (a CSV file "
            "saved under another name: rename it to .csv)"
        )
    if suffix in (".xlsx", ".xlsm"):  # a sheet is small: read whole, its checks at once
        data = read_excel(path, sheet, markers, merged_cells, names)
        return Sheet(data.name, data.columns, lambda _: data)
    if suffix in (".parquet", ".pq"):
        return open_parquet(str(path), markers)
    return open_csv(str(path), path.read_bytes, markers)


def _only_excel(name: str, sheet: str | None, merged_cells: MergedCells, names: Names) -> None:
    if sheet is not None:
        raise SourceError(f"{name}: {setting('sheet', names)} applies to Excel files only")
    if merged_cells != "refuse":
        raise SourceError(f"{name}: {setting('merged_cells', names)} applies to Excel files only")


def _open_remote(
    url: str, sheet: str | None, markers: frozenset[str], merged_cells: MergedCells,
    names: Names,
) -> Sheet:
    """An object in object storage (CSV or Parquet), or a prefix holding Parquet files;
    credentials from the provider's standard chain (`connector.destinations.storage`)."""
    try:
        location = check_location(url, url)
    except ConfigError as exc:
        raise SourceError(str(exc)) from None
    _only_excel(location, sheet, merged_cells, names)
    fs = filesystem(location)
    path = location.split("://", 1)[1]
    try:  # `within` a deadline: adlfs's isfile says False for any failure, a timeout
        # included, and its listings wait as long as the Azure SDK retries
        is_file = within(fs, DEFAULT_TIMEOUT, "info", path)["type"] == "file"
        listed = [path] if is_file else list(within(fs, DEFAULT_TIMEOUT, "find", path))
    except FileNotFoundError:
        raise SourceError(f"{location}: no such object or prefix") from None
    except Exception as exc:  # each store raises its own
        raise SourceError(f"{location}: cannot be read ({one_line(exc)})") from None
    suffix = Path(path).suffix.lower()
    if is_file and suffix == ".csv":

        def data() -> bytes:
            with fs.open(path, "rb") as handle:
                return bytes(handle.read())

        return open_csv(location, data, markers)
    if is_file and suffix not in (".parquet", ".pq"):
        raise SourceError(f"{location}: only CSV and Parquet objects are read from object storage")
    return open_parquet(location, markers, fs, listed)


def _unguarded(data: SourceFrame) -> SourceFrame:
    """`data` with what ``export --excel-safe`` added taken off (`undo_excel_safe`): in the
    header, and in every text cell (only text can carry the guard)."""
    frame = data.frame.rename(columns=undo_excel_safe)
    header = None if data.header is None else tuple(map(undo_excel_safe, data.header))
    check_header(list(frame.columns if header is None else header), data.name)
    for column in frame.columns:
        cells = frame[column]
        if not holds_text(cells):
            continue
        quoted = cells.astype("string").str.startswith("'").fillna(False).to_numpy(dtype=bool)
        if quoted.any():
            fixed = cells.astype(object).copy()
            fixed[quoted] = [undo_excel_safe(v) if isinstance(v, str) else v
                             for v in fixed[quoted]]
            frame[column] = fixed
    return SourceFrame(data.name, frame, data.rows, header)
