"""Read what a user pushes — CSV, an Excel sheet, Parquet or a DataFrame — into one shape.

Cells are kept as the file holds them: CSV cells are *strings* (so ``007`` and
``12345678901234567890`` survive), Excel and Parquet cells keep their native values. Turning a
cell into a column's type is `coerce`'s job, done per column with the table's schema in hand.
Every row remembers its spreadsheet row number (the header is row 1), for error reports.

An ``.xlsx`` formula is read as the value the spreadsheet saved with it. A formula saved
without one (files written by scripts, e.g. openpyxl, carry none until a spreadsheet app
recalculates and saves them) is an error naming its cells: read as empty, it would clear
those cells upstream.
"""

from __future__ import annotations

import csv
import io
import os
import re
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import SourceError

__all__ = ["Source", "SourceError", "read_source"]

#: A formula element in a worksheet's XML (``<f>``, ``<f t="shared" .../>``, ``<x:f>``).
_FORMULA_TAG = re.compile(rb"<(?:\w+:)?f[\s>/]")
#: Formula cells named in an error before "and N more".
_SHOWN_CELLS = 10
#: Delimiters the CSV sniffer may choose between.
CSV_DELIMITERS = ",;\t|"
_SNIFF_CHARS = 64 * 1024


@dataclass(frozen=True)
class Source:
    """A source table: its cells by column, and each row's spreadsheet row number."""

    name: str
    frame: pd.DataFrame
    rows: np.ndarray[Any, np.dtype[np.int64]]

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.frame):
            raise ValueError("one row number per frame row")

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, name: str = "DataFrame") -> Source:
        """A DataFrame as a source; its rows are numbered as if written under a header row."""
        if frame.columns.has_duplicates:
            dupes = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
            raise SourceError(f"{name}: duplicate column names {dupes}")
        frame = frame.reset_index(drop=True)
        frame.columns = [str(c) for c in frame.columns]
        return cls(name, frame, np.arange(2, len(frame) + 2, dtype=np.int64))


def read_source(source: str | Path | pd.DataFrame, *, sheet: str | None = None) -> Source:
    """Read a CSV, ``.xlsx`` or Parquet file (by extension), or take a DataFrame as it is."""
    if isinstance(source, pd.DataFrame):
        return Source.from_frame(source)
    if not isinstance(source, str | os.PathLike):
        raise SourceError(
            f"a source is a DataFrame or the path of a CSV, .xlsx or Parquet file, "
            f"not {type(source).__name__}"
        )
    path = Path(source)
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if sheet is not None and suffix not in (".xlsx", ".xlsm"):
        raise SourceError(f"{path}: --sheet applies to Excel files only")
    if suffix in (".xls", ".ods", ".numbers"):
        raise SourceError(f"{path}: {suffix} files are not read; save the sheet as .xlsx or CSV")
    if suffix in (".xlsx", ".xlsm"):
        return _read_excel(path, sheet)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    return _read_csv(path)


def _read_csv(path: Path) -> Source:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read the file ({exc.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{path}: not UTF-8 text (invalid byte at offset {exc.start}); "
            "save the spreadsheet as 'CSV UTF-8'"
        ) from None
    if not text.strip():
        raise SourceError(f"{path}: the file is empty")
    delimiter = _sniff_delimiter(text)
    try:
        # No header row for pandas: a record longer than the header is then an error,
        # where pandas would otherwise take the extra cell as an index and shift the rest.
        cells = pd.read_csv(
            io.StringIO(text),
            sep=delimiter,
            header=None,
            dtype=object,
            na_filter=False,
            skip_blank_lines=False,
            engine="c",
        )
    except (pd.errors.ParserError, ValueError) as exc:
        raise SourceError(f"{path}: malformed CSV: {_one_line(exc)}") from None
    header = [str(h).strip() for h in cells.iloc[0].tolist()]
    frame = cells.iloc[1:].reset_index(drop=True)
    keep = []
    for i, name in enumerate(header):
        if name:
            keep.append(i)
        elif (frame[i].astype(str).str.strip() != "").any():
            raise SourceError(f"{path}: column {i + 1} has values but no header")
    header = [header[i] for i in keep]  # unnamed, empty columns (a spreadsheet's leftovers) go
    _check_header(header, path)
    frame = frame[keep]
    frame.columns = pd.Index(header)
    return _numbered(str(path), frame, first_row=2)


def _sniff_delimiter(text: str) -> str:
    try:
        return csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:
        return ","


def _read_excel(path: Path, sheet: str | None) -> Source:
    import openpyxl
    from openpyxl.utils import get_column_letter
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise SourceError(f"{path}: not a readable .xlsx workbook ({_one_line(exc)})") from None
    try:
        if sheet is None:
            ws = book.worksheets[0]
        elif sheet in book.sheetnames:
            ws = book[sheet]
        else:
            raise SourceError(f"{path}: no sheet {sheet!r}; sheets: {book.sheetnames}")
        title = ws.title
        cells = [list(r) for r in ws.iter_rows(min_row=1, values_only=True)]
    finally:
        book.close()
    if _has_formulas(path):
        _check_formulas(path, title, cells)
    first = next((i for i, r in enumerate(cells) if any(v is not None for v in r)), None)
    if first is None:
        raise SourceError(f"{path}: sheet {ws.title!r} is empty")
    header = cells[first]
    body = cells[first + 1 :]
    width = max([len(header), *(len(r) for r in body)])
    names = [str(header[i]).strip() if i < len(header) and header[i] is not None else ""
             for i in range(width)]
    for i, name in enumerate(names):
        if not name and any(i < len(r) and r[i] is not None for r in body):
            letter = get_column_letter(i + 1)
            raise SourceError(f"{path}: column {letter} has values but no header in row {first + 1}")
    keep = [i for i, name in enumerate(names) if name]
    _check_header([names[i] for i in keep], path)
    frame = pd.DataFrame(
        [[r[i] if i < len(r) else None for i in keep] for r in body],
        columns=[names[i] for i in keep],
        dtype=object,
    )
    return _numbered(str(path), frame, first_row=first + 2)


def _has_formulas(path: Path) -> bool:
    """Whether any worksheet of the workbook holds a formula (a cheap scan of its XML)."""
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                    continue
                with archive.open(name) as part:
                    tail = b""
                    while chunk := part.read(1 << 20):
                        if _FORMULA_TAG.search(tail + chunk):
                            return True
                        tail = chunk[-16:]
    except (zipfile.BadZipFile, OSError, KeyError):
        return True  # let openpyxl's read say what is wrong
    return False


def _check_formulas(path: Path, title: str, values: list[list[Any]]) -> None:
    """Refuse formula cells saved without a value (openpyxl reads those as None)."""
    import openpyxl
    from openpyxl.utils import get_column_letter

    book = openpyxl.load_workbook(path, read_only=True, data_only=False)
    try:
        formulas = book[title].iter_rows(min_row=1, values_only=True)
        where = [
            (i, j)
            for i, (row, saved) in enumerate(zip(formulas, values, strict=False))
            for j, cell in enumerate(row)
            if _is_formula(cell) and (j >= len(saved) or saved[j] is None)
        ]
    finally:
        book.close()
    if where:
        header = next((r for r in values if any(v is not None for v in r)), [])
        names = sorted({str(header[j]) for _, j in where if j < len(header) and header[j]})
        missing = [f"{get_column_letter(j + 1)}{i + 1}" for i, j in where]
        shown = ", ".join(missing[:_SHOWN_CELLS])
        more = f" and {len(missing) - _SHOWN_CELLS} more" if len(missing) > _SHOWN_CELLS else ""
        columns = f" in column(s) {', '.join(map(repr, names))}" if names else ""
        raise SourceError(
            f"{path}: sheet {title!r}: {len(missing)} formula cell(s) saved without a value "
            f"({shown}{more}){columns}; open the file in Excel or LibreOffice and save it (that stores "
            "the results), or paste the values in place of the formulas"
        )


def _is_formula(cell: Any) -> bool:
    if isinstance(cell, str):
        return cell.startswith("=")
    return type(cell).__name__ in ("ArrayFormula", "DataTableFormula")


def _read_parquet(path: Path) -> Source:
    try:
        arrow = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None
    frame = arrow.to_pandas(date_as_object=True, ignore_metadata=True)
    return Source.from_frame(frame, str(path))


def _check_header(names: list[str], path: Path) -> None:
    if not names:
        raise SourceError(f"{path}: the header row has no column names")
    dupes = sorted(n for n, count in Counter(names).items() if count > 1)
    if dupes:
        raise SourceError(f"{path}: duplicate column names in the header: {dupes}")


def _numbered(name: str, frame: pd.DataFrame, *, first_row: int) -> Source:
    """Number rows as a spreadsheet does, then drop the wholly empty ones."""
    rows = np.arange(first_row, first_row + len(frame), dtype=np.int64)
    blank = np.ones(len(frame), dtype=bool)
    for column in frame.columns:
        text = frame[column].astype("string").str.strip().fillna("")
        blank &= (text == "").to_numpy(dtype=bool)
    return Source(name, frame.loc[~blank].reset_index(drop=True), rows[~blank])


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
