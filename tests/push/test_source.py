"""Reading sources: cells stay as the file holds them; rows keep their spreadsheet numbers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import openpyxl
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.errors import ConfigError, SourceError
from connector.push.source import read_source


def write(path: Path, text: str, *, bom: bool = False, encoding: str = "utf-8") -> Path:
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode(encoding))
    return path


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_csv_delimiter_is_sniffed_and_bom_dropped(tmp_path: Path, sep: str, bom: bool) -> None:
    text = sep.join(["Name", "Zip", "Age"]) + "\n" + sep.join(["Ann", "007", "1.5"]) + "\n"
    source = read_source(write(tmp_path / "a.csv", text, bom=bom))
    assert list(source.frame.columns) == ["Name", "Zip", "Age"]
    assert source.frame.iloc[0].tolist() == ["Ann", "007", "1.5"]


def test_csv_cells_stay_text_and_rows_keep_spreadsheet_numbers(tmp_path: Path) -> None:
    text = 'Name,Id\nAnn,00012\n\n"Bo, Jr.","12345678901234567890"\n,\n"multi\nline",7\n'
    source = read_source(write(tmp_path / "a.csv", text))
    assert source.frame["Id"].tolist() == ["00012", "12345678901234567890", "7"]
    assert source.frame["Name"].tolist() == ["Ann", "Bo, Jr.", "multi\nline"]
    # header = row 1; the blank line is row 3 and the all-empty record row 5: both dropped
    assert source.rows.tolist() == [2, 4, 6]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a,b\n1,2,3\n", "malformed CSV"),
        ('a,b\n"1,2\n', "malformed CSV"),
        ("", "empty"),
        ("a,a\n1,2\n", "duplicate column names"),
        ("a,,b\n1,2,3\n", "column 2 has values but no header"),
        (",\n,\n", "the header row has no column names"),
    ],
)
def test_malformed_csv_is_a_clear_source_error(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(SourceError, match=expected):
        read_source(write(tmp_path / "bad.csv", text))


#: CSVs a spreadsheet, a script or a hand may write: quotes in and around cells, line breaks
#: in cells and between records, blank and short records, markers, a BOM, other delimiters.
HOSTILE_CSVS = [
    'a,b\n1,2\n', 'a,b\n"x,y",2\n', 'a,b\n"x""y",2\n', 'a,b\nx"y,2\n', 'a,b\n"ab"c,2\n',
    'a,b\n"multi\nline",2\n', 'a,b\r\n1,2\r\n', 'a,b\r1,2\r', 'a,b\n1,2\n\n3,4\n', 'a,b\n1\n',
    'a,b\n 1 , 2 \n', 'a,b\n,\n', 'a,b\n"",""\n', 'a,b\nNA,null\n', 'a\n\n1\n', 'a,b\n1,2',
    '\ufeffa,b\n1,2\n', 'a;b\n1;2\n', 'a,b\n"a" ,b\n', 'a,b\n\\"x,y\n', 'a,,c\n1,,3\n',
    'a,b\n\t1,2\n', 'a,b\n"x\r\ny",1\n', "a,b\n'q,1\n", 'NA,b\n1,2\n', ',b\n,2\n', 'a,b\n',
    'a, b\n1, 2\n', '"a,1",b\n1,2\n', 'a,b\n1,"2\n3"\n', 'ä,ö\nü,ß\n', 'a,b\n007,1e5\n',
    'a\tb\n"1\t2"\t3\n', 'a|b\n|\n',
]


@pytest.mark.parametrize("markers", [frozenset(), frozenset({"NA", "-"})])
@pytest.mark.parametrize("text", HOSTILE_CSVS)
def test_arrows_csv_reader_reads_what_pandas_reads_or_leaves_the_file_to_it(
    text: str, markers: frozenset[str]
) -> None:
    """The fast reader (Arrow's) reads a CSV cell for cell as pandas' does, or declines."""
    from connector.push.csvfile import _arrow_cells, _pandas_cells, _sniff_delimiter

    data = text.encode()
    delimiter = _sniff_delimiter(data.decode("utf-8-sig"))
    fast = _arrow_cells(data, delimiter, markers)
    header, frame = _pandas_cells("a.csv", data.decode("utf-8-sig"), delimiter, markers)
    if fast is None:  # only a short record (pandas pads it) or, given markers, a header cell
        # that is empty or one of them (Arrow's reader would read it as null)
        assert text == "a,b\n1\n" or (markers and any(h in markers or not h for h in header))
        return
    assert fast[0] == header
    assert {i: c.tolist() for i, c in fast[1].items()} == {i: c.tolist() for i, c in frame.items()}
    assert list(fast[1].dtypes) == list(frame.dtypes)


def test_csv_drops_unnamed_empty_columns(tmp_path: Path) -> None:
    source = read_source(write(tmp_path / "a.csv", "Name,Age,,\nAnn,3,,\nBo,4,,\n"))
    assert list(source.frame.columns) == ["Name", "Age"]
    assert source.frame["Age"].tolist() == ["3", "4"]


def test_csv_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not UTF-8"):
        read_source(write(tmp_path / "latin.csv", "Name\nJosé\n", encoding="latin-1"))


def test_xlsx_keeps_native_cells_and_picks_the_sheet(tmp_path: Path) -> None:
    book = openpyxl.Workbook()
    first = book.active
    assert first is not None
    first.title = "Other"
    first.append(["x"])
    sheet = book.create_sheet("People")
    sheet.append([None])  # a blank first row: the header is row 2
    sheet.append(["Name", "Zip", "Born", "Age", "Member"])
    sheet.append(["Ann", "007", dt.datetime(2024, 1, 31), 41, True])
    sheet.append([None, None, None, None, None])
    sheet.append(["Bo", "08", 45000, 2.5, False])
    path = tmp_path / "people.xlsx"
    book.save(path)

    source = read_source(path, sheet="People")
    assert list(source.frame.columns) == ["Name", "Zip", "Born", "Age", "Member"]
    assert source.frame.iloc[0].tolist() == ["Ann", "007", dt.datetime(2024, 1, 31), 41, True]
    assert source.rows.tolist() == [3, 5]
    assert read_source(path).frame.columns.tolist() == ["x"]


def test_xlsx_errors_name_the_problem(tmp_path: Path) -> None:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Name", None])
    sheet.append(["Ann", "stray"])
    path = tmp_path / "stray.xlsx"
    book.save(path)
    with pytest.raises(SourceError, match="column B has values but no header"):
        read_source(path)
    with pytest.raises(SourceError, match=r"no sheet 'Nope'; sheets: \['Sheet'\]"):
        read_source(path, sheet="Nope")
    with pytest.raises(SourceError, match=r"not a readable \.xlsx"):
        read_source(write(tmp_path / "fake.xlsx", "Name\nAnn\n"))
    with pytest.raises(SourceError, match=r"\.xls files are not read; save the sheet as \.xlsx"):
        read_source(write(tmp_path / "old.xls", "binary"))


def test_parquet_and_dataframe_keep_their_types(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"Name": ["Ann", None], "Age": [1.5, None]}), path)
    source = read_source(path)
    assert source.frame["Name"].tolist()[0] == "Ann"
    assert source.frame["Age"].tolist()[0] == 1.5
    assert source.rows.tolist() == [2, 3]
    frame = pd.DataFrame({"Name": ["Ann"]}, index=[10])
    assert read_source(frame).rows.tolist() == [2]
    with pytest.raises(SourceError, match="not a readable Parquet"):
        read_source(write(tmp_path / "bad.parquet", "nope"))


def test_a_source_that_is_neither_a_frame_nor_a_path_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"a DataFrame or the path of a CSV, \.xlsx or Parquet file, not int"):
        read_source(42)
    with pytest.raises(SourceError, match="no such file"):
        read_source(tmp_path / "missing.csv")


def _with_cached_values(path: Path, values: dict[str, str]) -> None:
    """Store results for formula cells, as a spreadsheet app does on save (openpyxl does not)."""
    import re
    import zipfile

    with zipfile.ZipFile(path) as archive:
        parts = {name: archive.read(name) for name in archive.namelist()}
    sheet = parts["xl/worksheets/sheet1.xml"].decode()
    for cell, value in values.items():
        sheet = re.sub(rf'(<c r="{cell}"[^>]*><f>[^<]*</f>)<v ?/>', rf"\g<1><v>{value}</v>", sheet)
    parts["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in parts.items():
            archive.writestr(name, data)


def test_formulas_are_read_as_their_saved_values_and_never_as_empty(tmp_path: Path) -> None:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Name", "Age", "Total"])
    sheet.append(["Ann", 41, "=B2*2"])
    sheet.append(["Bo", 3, "=B3*2"])
    sheet.append(["Cy", "=B3+1", "=B4*2"])
    path = tmp_path / "f.xlsx"
    book.save(path)
    with pytest.raises(SourceError) as caught:
        read_source(path)
    message = str(caught.value)
    assert "\n" not in message
    assert "4 formula cell(s) saved without a value (C2, C3, B4, C4) in column(s) 'Age', 'Total'" in message
    assert "save it" in message

    _with_cached_values(path, {"C2": "82", "C3": "6", "B4": "4", "C4": "8"})
    source = read_source(path)
    assert source.frame.to_numpy().tolist() == [["Ann", 41, 82], ["Bo", 3, 6], ["Cy", 4, 8]]


def test_a_workbook_without_formulas_is_read_once(tmp_path: Path) -> None:
    from connector.push.excel import _FORMULA_TAG, _sheets_hold

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Name", "Note"])
    sheet.append(["Ann", "<f> is text here, escaped in the XML"])
    book.save(tmp_path / "plain.xlsx")
    assert not _sheets_hold(tmp_path / "plain.xlsx", _FORMULA_TAG)
    assert read_source(tmp_path / "plain.xlsx").frame.iloc[0, 1].startswith("<f>")


def test_words_are_text_and_only_named_markers_are_empty(tmp_path: Path) -> None:
    """pandas' own NA words stay text; markers empty whole cells only, never a header name."""
    path = write(tmp_path / "a.csv", 'NA,Name\nNA,None\n"NA",null\n" NA",NaN\n-,#N/A\n')
    plain = read_source(path)
    assert list(plain.frame.columns) == ["NA", "Name"]
    assert plain.frame.to_numpy().tolist() == [
        ["NA", "None"], ["NA", "null"], [" NA", "NaN"], ["-", "#N/A"]
    ]
    marked = read_source(path, null_values=["NA", "-"])
    assert list(marked.frame.columns) == ["NA", "Name"]
    assert marked.frame.isna().to_numpy().tolist() == [
        [True, False], [True, False], [False, False], [True, False]
    ]
    assert marked.rows.tolist() == [2, 3, 4, 5]
    with pytest.raises(ConfigError, match="non-empty texts"):
        read_source(path, null_values=["NA", ""])


def test_excel_safe_undo_checks_the_header_it_makes(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "'=A,=A\n1,2\n")
    assert list(read_source(path).frame.columns) == ["'=A", "=A"]
    with pytest.raises(SourceError, match="duplicate column names in the header: \\['=A'\\]"):
        read_source(path, excel_safe=True)


def test_a_merge_wider_than_the_rows_read_is_filled(tmp_path: Path) -> None:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Name", "Note"])
    sheet.append(["a", "wide"])
    sheet.merge_cells("B2:B5")
    sheet["A5"] = "d"
    book.save(tmp_path / "m.xlsx")
    source = read_source(tmp_path / "m.xlsx", merged_cells="fill")
    assert source.frame.to_numpy().tolist() == [
        ["a", "wide"], [None, "wide"], [None, "wide"], ["d", "wide"]
    ]
    assert source.rows.tolist() == [2, 3, 4, 5]
