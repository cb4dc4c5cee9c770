"""Excel sources (``.xlsx``): a sheet read whole with its checks at once. Formulas saved
without a value and merged cells holding a value are refused, naming their cells (or, with
``merged_cells="fill"``, a merge's value is copied into the cells it covers)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

from connector.errors import SourceError
from connector.modes import MergedCells
from connector.push.sheet import SourceFrame, blank_markers, check_header, numbered, one_line
from connector.push.spec import Names, setting

__all__ = ["read_excel"]

#: A formula element in a worksheet's XML (``<f>``, ``<f t="shared" .../>``, ``<x:f>``).
_FORMULA_TAG = re.compile(rb"<(?:\w+:)?f[\s>/]")
#: A merged range in a worksheet's XML (``<mergeCell ref="B2:B4"/>``).
_MERGE_TAG = re.compile(rb"<(?:\w+:)?mergeCell[\s>/]")
#: Formula cells named in an error before "and N more".
_SHOWN_CELLS = 10


def read_excel(
    path: Path, sheet: str | None, markers: frozenset[str], merged_cells: MergedCells,
    names: Names = "parameters",
) -> SourceFrame:
    import openpyxl
    from openpyxl.utils import get_column_letter
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise SourceError(f"{path}: not a readable .xlsx workbook ({one_line(exc)})") from None
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
    if _sheets_hold(path, _FORMULA_TAG):
        _check_formulas(path, title, cells)
    if _sheets_hold(path, _MERGE_TAG):
        _merges(path, title, cells, merged_cells, names)
    first = next((i for i, r in enumerate(cells) if any(v is not None for v in r)), None)
    if first is None:
        raise SourceError(f"{path}: sheet {ws.title!r} is empty")
    header = cells[first]
    body = cells[first + 1 :]
    width = max([len(header), *(len(r) for r in body)])
    spelled = [str(header[i]) if i < len(header) and header[i] is not None else ""
               for i in range(width)]  # as spelled: `x ` is not `x`
    for i, name in enumerate(spelled):
        if not name and any(i < len(r) and r[i] is not None for r in body):
            letter = get_column_letter(i + 1)
            raise SourceError(f"{path}: column {letter} has values but no header in row {first + 1}")
    keep = [i for i, name in enumerate(spelled) if name]
    check_header([spelled[i] for i in keep], path)
    frame = pd.DataFrame(
        [[r[i] if i < len(r) else None for i in keep] for r in body],
        columns=[spelled[i] for i in keep],
        dtype=object,
    )
    return numbered(str(path), blank_markers(frame, markers), first_row=first + 2)


def _sheets_hold(path: Path, tag: re.Pattern[bytes]) -> bool:
    """Whether any worksheet of the workbook holds `tag` (a cheap scan of its XML)."""
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                    continue
                with archive.open(name) as part:
                    tail = b""
                    while chunk := part.read(1 << 20):
                        if tag.search(tail + chunk):
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


def _merges(
    path: Path, title: str, cells: list[list[Any]], merged_cells: MergedCells, names: Names
) -> None:
    """Refuse the merges of sheet `title` that hold a value, naming each; or (``fill``) copy
    each one's value into the cells it covers, in `cells` (rows of values, from A1)."""
    import openpyxl
    from openpyxl.utils import quote_sheetname

    book = openpyxl.load_workbook(path, data_only=True)  # read-only sheets show no merges
    try:
        ranges = list(book[title].merged_cells.ranges)
    finally:
        book.close()
    held = []
    for merge in sorted(ranges, key=lambda m: (m.min_row, m.min_col)):
        top, left = merge.min_row - 1, merge.min_col - 1
        value = cells[top][left] if top < len(cells) and left < len(cells[top]) else None
        if value is not None:
            held.append((merge, value))
    if not held:
        return
    if merged_cells == "refuse":
        shown = ", ".join(f"{quote_sheetname(title)}!{merge.coord}" for merge, _ in held)
        raise SourceError(
            f"{path}: sheet {title!r} has {len(held)} merged range(s) holding a value ({shown}); "
            f"the cells a merge covers read as empty. Unmerge them, or give "
            f"{setting('merged_cells', names, 'fill')} to copy each merge's value into its cells"
        )
    for merge, value in held:
        while len(cells) < merge.max_row:
            cells.append([])
        for row in cells[merge.min_row - 1 : merge.max_row]:
            row.extend([None] * (merge.max_col - len(row)))
            row[merge.min_col - 1 : merge.max_col] = [value] * (merge.max_col - merge.min_col + 1)


def _is_formula(cell: Any) -> bool:
    if isinstance(cell, str):
        return cell.startswith("=")
    return type(cell).__name__ in ("ArrayFormula", "DataTableFormula")
