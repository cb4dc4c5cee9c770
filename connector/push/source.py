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
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import os
import re
import zipfile
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from connector.destinations.formats import undo_excel_safe
from connector.destinations.storage import check_location, filesystem, is_remote
from connector.errors import ConfigError, SourceError
from connector.modes import MERGED_CELLS, PUSH_SUFFIXES, MergedCells

__all__ = ["Query", "Sheet", "Source", "SourceError", "arrow_frame", "open_source", "read_source"]

#: A formula element in a worksheet's XML (``<f>``, ``<f t="shared" .../>``, ``<x:f>``).
_FORMULA_TAG = re.compile(rb"<(?:\w+:)?f[\s>/]")
#: A merged range in a worksheet's XML (``<mergeCell ref="B2:B4"/>``).
_MERGE_TAG = re.compile(rb"<(?:\w+:)?mergeCell[\s>/]")
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
    def from_frame(cls, frame: pd.DataFrame, name: str = "DataFrame") -> Source:
        """A DataFrame as a source; its rows are numbered as if written under a header row."""
        if frame.columns.has_duplicates:
            dupes = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
            raise SourceError(f"{name}: duplicate column names {dupes}")
        frame = frame.reset_index(drop=True)
        frame.columns = [str(c) for c in frame.columns]
        return cls(name, frame, np.arange(2, len(frame) + 2, dtype=np.int64))


@dataclass(frozen=True)
class Query:
    """`sql` run on the database at `url` (`connector.push.query`: SQLAlchemy or DuckDB). `where` names the two settings in messages (the
    command's flags, or a job file's keys)."""

    url: str
    sql: str
    where: tuple[str, str] = ("--db", "--sql")

    @property
    def name(self) -> str:
        """The query as reports name it: its database, password left out."""
        from connector.push.query import safe_url

        return f"query on {safe_url(self.url)}"


@dataclass(frozen=True)
class Sheet:
    """A source opened, not yet read: its name and column names, known from the header alone
    where the format allows (a Parquet file's schema, a CSV's first record, a query's result
    columns), so a push checks them against the table before reading its rows."""

    name: str
    #: The column names; None when they cannot be told before the rows are read.
    columns: tuple[str, ...] | None
    #: Reads every row; given column names, only those (where the format can: Parquet).
    reader: Callable[[frozenset[str] | None], Source]

    def read(self, columns: Collection[str] | None = None) -> Source:
        """Every row, and of `columns` only when given."""
        data = self.reader(None if columns is None else frozenset(columns))
        if columns is not None:
            keep = [c for c in data.frame.columns if c in columns]
            if len(keep) < len(data.frame.columns):
                data = Source(data.name, data.frame[keep], data.rows, data.columns)
        return data


def read_source(
    source: str | Path | pd.DataFrame | Query,
    *,
    sheet: str | None = None,
    null_values: Sequence[str] = (),
    excel_safe: bool = False,
    merged_cells: MergedCells = "refuse",
) -> Source:
    """Read a CSV, ``.xlsx`` or Parquet file (by extension), a folder of Parquet files, an
    object in object storage (``s3://bucket/key.parquet``, a CSV, or a Parquet prefix), or
    take a DataFrame as it is.

    `null_values`: texts that mean an empty cell (only an empty cell is empty by default).
    `excel_safe`: undo ``export --excel-safe``. `merged_cells`: ``refuse`` or ``fill``.
    """
    return open_source(
        source, sheet=sheet, null_values=null_values, excel_safe=excel_safe,
        merged_cells=merged_cells,
    ).read()


def open_source(
    source: str | Path | pd.DataFrame | Query,
    *,
    sheet: str | None = None,
    null_values: Sequence[str] = (),
    excel_safe: bool = False,
    merged_cells: MergedCells = "refuse",
) -> Sheet:
    """`read_source`'s source, opened: a missing file, a bad option or an unreadable header
    fails here; the rows are read by `Sheet.read`."""
    markers = _markers(null_values)
    if merged_cells not in MERGED_CELLS:
        raise ConfigError(
            f"--merged-cells {merged_cells!r}: choose one of {', '.join(MERGED_CELLS)}"
        )
    opened = _open(source, sheet, markers, merged_cells)
    if not excel_safe:
        return opened
    if opened.columns is None:
        return Sheet(opened.name, None, lambda columns: _unguarded(opened.reader(None)))
    names = tuple(undo_excel_safe(c) for c in opened.columns)
    raw = dict(zip(names, opened.columns, strict=True))

    def read(columns: frozenset[str] | None) -> Source:
        wanted = None if columns is None else frozenset(raw[c] for c in columns if c in raw)
        return _unguarded(opened.reader(wanted))

    return Sheet(opened.name, names, read)


def _markers(null_values: Sequence[str]) -> frozenset[str]:
    """The markers as a set; ConfigError unless they are non-empty texts."""
    if isinstance(null_values, str) or not all(
        isinstance(v, str) and v for v in null_values
    ):
        raise ConfigError(
            f"null_values {null_values!r}: give a list of non-empty texts (an empty cell is "
            "always empty)"
        )
    return frozenset(null_values)


def _open(
    source: str | Path | pd.DataFrame | Query, sheet: str | None, markers: frozenset[str],
    merged_cells: MergedCells,
) -> Sheet:
    if isinstance(source, Query):
        from connector.push.query import open_query

        _only_excel(source.name, sheet, merged_cells)
        opened = open_query(source)
        return Sheet(opened.name, opened.columns,
                     lambda columns: _blanked(opened.reader(columns), markers))
    if isinstance(source, pd.DataFrame):
        frame = _blanked(Source.from_frame(source), markers)
        return Sheet(frame.name, frame.columns, lambda _: frame)
    if not isinstance(source, str | os.PathLike):
        raise SourceError(
            f"a source is a DataFrame or the path of a CSV, .xlsx or Parquet file, "
            f"not {type(source).__name__}"
        )
    if isinstance(source, str) and is_remote(source):
        return _open_remote(source, sheet, markers, merged_cells)
    path = Path(source)
    if path.is_dir():
        _only_excel(str(path), sheet, merged_cells)
        return _open_parquet(str(path), markers)
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in (".xlsx", ".xlsm"):
        _only_excel(str(path), sheet, merged_cells)
    if suffix in (".xls", ".ods", ".numbers"):
        raise SourceError(f"{path}: {suffix} files are not read; save the sheet as .xlsx or CSV")
    if suffix not in PUSH_SUFFIXES:
        kind = f"a {suffix} file" if suffix else "a file with no suffix"
        raise SourceError(
            f"{path}: {kind} is not read; push reads {', '.join(PUSH_SUFFIXES)} (a CSV file "
            "saved under another name: rename it to .csv)"
        )
    if suffix in (".xlsx", ".xlsm"):  # a sheet is small: read whole, its checks at once
        data = _read_excel(path, sheet, markers, merged_cells)
        return Sheet(data.name, data.columns, lambda _: data)
    if suffix in (".parquet", ".pq"):
        return _open_parquet(str(path), markers)
    return _open_csv(str(path), path.read_bytes, markers)


def _only_excel(name: str, sheet: str | None, merged_cells: MergedCells) -> None:
    if sheet is not None:
        raise SourceError(f"{name}: --sheet applies to Excel files only")
    if merged_cells != "refuse":
        raise SourceError(f"{name}: --merged-cells applies to Excel files only")


def _open_remote(
    url: str, sheet: str | None, markers: frozenset[str], merged_cells: MergedCells
) -> Sheet:
    """An object in object storage (CSV or Parquet), or a prefix holding Parquet files;
    credentials from the provider's standard chain (`connector.destinations.storage`)."""
    try:
        location = check_location(url, url)
    except ConfigError as exc:
        raise SourceError(str(exc)) from None
    _only_excel(location, sheet, merged_cells)
    fs = filesystem(location)
    path = location.split("://", 1)[1]
    try:
        is_file = fs.isfile(path)
        exists = is_file or fs.isdir(path)
    except Exception as exc:  # each store raises its own
        raise SourceError(f"{location}: cannot be read ({_one_line(exc)})") from None
    if not exists:
        raise SourceError(f"{location}: no such object or prefix")
    suffix = Path(path).suffix.lower()
    if is_file and suffix == ".csv":

        def data() -> bytes:
            with fs.open(path, "rb") as handle:
                return bytes(handle.read())

        return _open_csv(location, data, markers)
    if is_file and suffix not in (".parquet", ".pq"):
        raise SourceError(f"{location}: only CSV and Parquet objects are read from object storage")
    return _open_parquet(location, markers, fs)


def _open_csv(name: str, data: Callable[[], bytes], markers: frozenset[str]) -> Sheet:
    """A CSV file, its header from its first record (`_read_csv` parses it again with the
    rows and has the last word)."""
    try:
        raw = data()
    except OSError as exc:
        raise SourceError(f"{name}: cannot read the file ({exc.strerror or _one_line(exc)})") from None
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
    return None if first is None else tuple(n for n in (c.strip() for c in first) if n)


def _read_csv(path: str, data: bytes, markers: frozenset[str]) -> Source:
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
        raise SourceError(f"{path}: malformed CSV: {_one_line(exc)}") from None
    header = [str(h).strip() for h in first.iloc[0].tolist()]
    frame = cells.iloc[1:].reset_index(drop=True)
    keep = []
    for i, name in enumerate(header):
        if name:
            keep.append(i)
        elif (frame[i].astype("string").str.strip().fillna("") != "").any():
            raise SourceError(f"{path}: column {i + 1} has values but no header")
    header = [header[i] for i in keep]  # unnamed, empty columns (a spreadsheet's leftovers) go
    _check_header(header, path)
    frame = frame[keep]
    frame.columns = pd.Index(header)
    return _numbered(path, frame, first_row=2)


def _sniff_delimiter(text: str) -> str:
    try:
        return csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:
        return ","


def _read_excel(
    path: Path, sheet: str | None, markers: frozenset[str], merged_cells: MergedCells
) -> Source:
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
    if _sheets_hold(path, _FORMULA_TAG):
        _check_formulas(path, title, cells)
    if _sheets_hold(path, _MERGE_TAG):
        _merges(path, title, cells, merged_cells)
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
    return _numbered(str(path), _blank_markers(frame, markers), first_row=first + 2)


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


def _merges(path: Path, title: str, cells: list[list[Any]], merged_cells: MergedCells) -> None:
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
        names = ", ".join(f"{quote_sheetname(title)}!{merge.coord}" for merge, _ in held)
        raise SourceError(
            f"{path}: sheet {title!r} has {len(held)} merged range(s) holding a value ({names}); "
            "the cells a merge covers read as empty. Unmerge them, or give --merged-cells fill "
            "(job setting merged_cells = \"fill\") to copy each merge's value into its cells"
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


def _open_parquet(name: str, markers: frozenset[str], fs: Any = None) -> Sheet:
    """A Parquet file, or a folder (or object storage prefix) of them read as one table in
    name order: the header from the schema; only the columns asked for are read."""
    where = name.split("://", 1)[1] if fs is not None else name
    try:
        files = _parquet_files(where, fs)
        schema = pq.read_schema(_handle(files[0], fs)) if files else pa.schema([])
        names = tuple(schema.names)
        for other in files[1:]:
            if tuple(pq.read_schema(_handle(other, fs)).names) != names:
                raise SourceError(f"{name}: {other} has other columns than {files[0]}")
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SourceError(f"{name}: not a readable Parquet file ({_one_line(exc)})") from None
    if not files:
        raise SourceError(f"{name}: holds no Parquet file (*.parquet)")
    _check_header(list(names), name)

    def read(columns: frozenset[str] | None) -> Source:
        wanted = [n for n in names if columns is None or n in columns]
        try:
            frame = arrow_frame(pa.Table.from_batches(
                [batch for path in files for batch in _batches(path, fs, wanted)],
                schema=pa.schema([schema.field(n) for n in wanted]),
            ))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SourceError(f"{name}: not a readable Parquet file ({_one_line(exc)})") from None
        rows = np.arange(2, len(frame) + 2, dtype=np.int64)
        return _blanked(Source(name, frame, rows, names), markers)

    return Sheet(name, names, read)


def _parquet_files(where: str, fs: Any) -> list[str]:
    """`where` itself, or the Parquet files under the folder `where` (by name; files and
    folders whose names start with ``_`` or ``.`` left out, as Parquet writers mark them)."""
    if fs is None:
        root = Path(where)
        if not root.is_dir():
            return [where]
        found = [str(p) for p in root.rglob("*") if p.is_file()]
        base = str(root)
    else:
        if fs.isfile(where):
            return [where]
        found = list(fs.find(where))
        base = where.rstrip("/")
    return sorted(
        f for f in found
        if Path(f).suffix.lower() in (".parquet", ".pq")
        and not any(part.startswith(("_", ".")) for part in Path(f[len(base):]).parts if part != "/")
    )


def _handle(path: str, fs: Any) -> Any:
    return path if fs is None else fs.open(path, "rb")


def _batches(path: str, fs: Any, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """A file's batches, a row group's pages decoded at a time: reading a file whole holds
    its compressed column chunks and decoded pages besides the values (~2x)."""
    with contextlib.closing(pq.ParquetFile(_handle(path, fs), pre_buffer=False, buffer_size=1 << 20)) as file:
        yield from file.iter_batches(batch_size=65_536, columns=columns, use_threads=False)


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


def _blank_markers(frame: pd.DataFrame, markers: frozenset[str]) -> pd.DataFrame:
    """`frame` with the text cells that equal a marker emptied (None): what pandas'
    ``na_values`` does to a CSV, for cells read otherwise."""
    if not markers:
        return frame
    out = frame.copy()
    for column in out.columns:
        cells = out[column]
        if _holds_text(cells):
            hit = cells.isin(markers).to_numpy(dtype=bool)
            if hit.any():
                out[column] = cells.astype(object).mask(hit, None)
    return out


def _holds_text(cells: pd.Series) -> bool:
    """Whether a column may hold text cells (objects, strings, categories)."""
    return cells.dtype == object or isinstance(cells.dtype, pd.StringDtype | pd.CategoricalDtype)


def _blanked(data: Source, markers: frozenset[str]) -> Source:
    return Source(data.name, _blank_markers(data.frame, markers), data.rows, data.header)


def _unguarded(data: Source) -> Source:
    """`data` with what ``export --excel-safe`` added taken off (`undo_excel_safe`): in the
    header, and in every text cell (only text can carry the guard)."""
    frame = data.frame.rename(columns=undo_excel_safe)
    header = None if data.header is None else tuple(map(undo_excel_safe, data.header))
    _check_header(list(frame.columns if header is None else header), data.name)
    for column in frame.columns:
        cells = frame[column]
        if not _holds_text(cells):
            continue
        quoted = cells.astype("string").str.startswith("'").fillna(False).to_numpy(dtype=bool)
        if quoted.any():
            fixed = cells.astype(object).copy()
            fixed[quoted] = [undo_excel_safe(v) if isinstance(v, str) else v
                             for v in fixed[quoted]]
            frame[column] = fixed
    return Source(data.name, frame, data.rows, header)


def _check_header(names: list[str], path: Path | str) -> None:
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
