"""CSV sources: every cell read as text (so ``007`` survives), the delimiter sniffed, the
header from the first record, each name as spelled (spaces kept); only the markers the user
names read as empty cells."""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from connector.errors import SourceError
from connector.push.sheet import Sheet, SourceFrame, check_header, numbered, one_line

__all__ = ["CSV_DELIMITERS", "open_csv"]

#: Delimiters the CSV sniffer may choose between.
CSV_DELIMITERS = ",;\t|"
_SNIFF_CHARS = 64 * 1024


def open_csv(name: str, data: Callable[[], bytes], markers: frozenset[str]) -> Sheet:
    """A CSV file, its header from its first record (`_read_csv` parses it again with the
    rows and has the last word)."""
    try:
        raw = data()
    except OSError as exc:
        raise SourceError(f"{name}: cannot read the file ({exc.strerror or one_line(exc)})") from None
    return Sheet(name, _csv_header(raw), lambda _: _read_csv(name, raw, markers))


def _csv_header(raw: bytes) -> tuple[str, ...] | None:
    """The names of a CSV's first record, as `_read_csv` reads them (empty ones left out);
    None when the first bytes do not tell (`_read_csv` then says what is wrong)."""
    head = raw[:_SNIFF_CHARS]
    try:
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=len(head) == len(raw))
        if "\n" not in text and len(head) < len(raw):
            return None
        first = next(csv.reader(io.StringIO(text), delimiter=_sniff_delimiter(text)), None)
    except (UnicodeDecodeError, csv.Error):
        return None
    return None if first is None else tuple(n for n in first if n)


def _read_csv(path: str, data: bytes, markers: frozenset[str]) -> SourceFrame:
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
    header, frame = (
        _arrow_cells(data, delimiter, markers) or _pandas_cells(path, text, delimiter, markers)
    )
    keep = []
    for i, name in enumerate(header):
        if name:
            keep.append(i)
        elif (frame[i].astype("string").str.strip().fillna("") != "").any():
            raise SourceError(f"{path}: column {i + 1} has values but no header")
    header = [header[i] for i in keep]  # unnamed, empty columns (a spreadsheet's leftovers) go
    check_header(header, path)
    frame = frame[keep]
    frame.columns = pd.Index(header)
    return numbered(path, frame, first_row=2)


def _arrow_cells(
    data: bytes, delimiter: str, markers: frozenset[str]
) -> tuple[list[str], pd.DataFrame] | None:
    """The header and the cells (text; null where empty or a marker) as Arrow's reader reads
    them: several times faster than pandas' (300,000 rows: 0.1 s, not 0.6 s), with no cell
    a Python string. None where its reading could differ from `_pandas_cells`'s: a record
    of another length than the first (pandas pads a short one), a header cell that is empty
    or a marker when markers are named (read as null), a file Arrow's reader refuses."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        head = data[:_SNIFF_CHARS].decode("utf-8", "replace")
        first = next(csv.reader(io.StringIO(head, newline=""), delimiter=delimiter))
    except (StopIteration, csv.Error):
        return None
    names = [f"c{i}" for i in range(len(first))]
    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(
                delimiter=delimiter, newlines_in_values=True, ignore_empty_lines=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()), null_values=["", *markers],
                strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid:
        return None
    header = [table.column(i)[0].as_py() for i in range(len(names))] if table.num_rows else []
    if not header or (markers and None in header):
        return None
    body = table.slice(1)
    frame = pd.DataFrame(
        {i: pd.array(body.column(i).combine_chunks(), dtype="string[pyarrow]")
         for i in range(len(names))},
        index=pd.RangeIndex(body.num_rows),
    )
    # The read's own buffers, now copied into one chunk a column, go back to the system:
    # Arrow's allocator kept them (a 300,000-row sheet's push peaked 40 MB higher).
    del table, body
    pa.default_memory_pool().release_unused()
    return [h or "" for h in header], frame


def _pandas_cells(
    path: str, text: str, delimiter: str, markers: frozenset[str]
) -> tuple[list[str], pd.DataFrame]:
    """`_arrow_cells` by pandas' reader, which reads any file that is one table and names
    what is wrong with any other."""
    # No header row for pandas: a record longer than the header is then an error, where
    # pandas would otherwise take the extra cell as an index and shift the rest. Every cell
    # is text; none is a missing value but the markers named (`keep_default_na=False`).
    options: dict[str, Any] = {
        "sep": delimiter, "header": None, "dtype": object, "skip_blank_lines": False,
        "engine": "c", "keep_default_na": False, "na_values": sorted(markers),
    }
    try:
        cells = pd.read_csv(io.StringIO(text), **options)
        # The header's names are names, even one that reads like a marker.
        first = cells if not markers else pd.read_csv(
            io.StringIO(text), **options | {"nrows": 1, "na_values": []}
        )
    except (pd.errors.ParserError, ValueError) as exc:
        raise SourceError(f"{path}: malformed CSV: {one_line(exc)}") from None
    header = [str(h) for h in first.iloc[0].tolist()]  # as spelled: `x ` is not `x`
    return header, _typed_text(cells.iloc[1:].reset_index(drop=True))


def _typed_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell of a CSV is text: its columns typed as text (coerced all at once, not
    cell by cell), an empty cell null (as a spreadsheet means it)."""
    typed = frame.astype("string[pyarrow]")
    return pd.DataFrame({name: cells.mask(cells.eq("").fillna(False)) for name, cells in typed.items()})


def _sniff_delimiter(text: str) -> str:
    try:
        return csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:
        return ","
