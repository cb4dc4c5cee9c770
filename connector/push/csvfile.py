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
    frame = cells.iloc[1:].reset_index(drop=True)
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
    return numbered(path, _typed_text(frame), first_row=2)


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
