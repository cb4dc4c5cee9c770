"""A corpus of bad spreadsheets: each gets one clear error naming row, column and value — and
not one write reaches the table (checked through the API)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import openpyxl
import pytest
from click.testing import CliRunner

from connector.cli import main
from tests.fixtures.server import RunningServer

SPEC = {
    "name": "Members",
    "columns": [
        {"name": "Code", "type": "text", "required": True},
        {"name": "Name", "type": "text", "required": True},
        {"name": "Age", "type": "number"},
        {"name": "Status", "type": "choice", "options": ["active", "paused"]},
        {"name": "Born", "type": "date"},
        {"name": "Member", "type": "checkbox"},
    ],
}
HEADER = "Code,Name,Age,Status,Born,Member\n"
GOOD = "001,Ann,41,active,2024-01-31,TRUE\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("bad-sheets"), {}).start()
    yield running
    running.stop()


def xlsx(rows: list[list[object]]) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        book = openpyxl.Workbook()
        sheet = book.active
        assert sheet is not None
        for row in rows:
            sheet.append(row)
        target = path.with_suffix(".xlsx")
        book.save(target)
        return target

    return make


def csv(text: str, encoding: str = "utf-8") -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        target = path.with_suffix(".csv")
        target.write_bytes(text.encode(encoding))
        return target

    return make


def raw(data: bytes, suffix: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        target = path.with_suffix(suffix)
        target.write_bytes(data)
        return target

    return make


CORPUS: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    "malformed csv": (csv(HEADER + GOOD + "002,Bo,3,active,,,extra\n"), ["malformed CSV", "line 3"]),
    "unclosed quote": (csv(HEADER + '003,"Cy,5,active,,\n'), ["malformed CSV"]),
    "not utf-8": (csv(HEADER + "004,José,1,,,\n", "latin-1"), ["not UTF-8"]),
    "not xlsx": (raw(b"Code,Name\n1,a\n", ".xlsx"), ["not a readable .xlsx"]),
    "unknown column": (
        csv("Code,Name,Shoe\n001,Ann,42\n"),
        ["row 1, column 'Shoe': not a column of table 'Members unknown column'"],
    ),
    "invalid choice": (
        csv(HEADER + GOOD + "002,Bo,3,gone,,\n"),
        ["row 3, column 'Status', value 'gone': not one of the options: 'active', 'paused'"],
    ),
    "missing required": (
        csv(HEADER + GOOD + "002,,3,active,,\n"),
        ["row 3, column 'Name': a value is required"],
    ),
    "missing required column": (
        csv("Code,Age\n001,3\n"),
        ["row 2, column 'Name': a value is required to create this row, and the source has "
         "no column 'Name'"],
    ),
    "wrong types": (
        csv(HEADER + GOOD + "002,Bo,old,active,31/02/2024,maybe\n"),
        ["row 3, column 'Age', value 'old': not a number",
         "row 3, column 'Born', value '31/02/2024': not a date",
         "row 3, column 'Member', value 'maybe': not a checkbox value"],
    ),
    "duplicate and empty keys": (
        csv(HEADER + GOOD + "002,Bo,,,,\n001,Cy,,,,\n,Dee,,,,\n"),
        ["row 2, column 'Code', value '001': duplicate key: also on row(s) 4",
         "row 4, column 'Code', value '001': duplicate key: also on row(s) 2",
         "row 5, column 'Code': the key is empty"],
    ),
    "xlsx wrong type and bad date": (
        xlsx([["Code", "Name", "Age", "Born"], ["001", "Ann", "forty", dt.datetime(2024, 1, 31, 9, 30)]]),
        ["row 2, column 'Age', value 'forty': not a number",
         "row 2, column 'Born', value datetime.datetime(2024, 1, 31, 9, 30): not a date"],
    ),
}


@pytest.mark.parametrize("case", list(CORPUS))
def test_bad_spreadsheet_is_refused_with_zero_writes(
    server: RunningServer, tmp_path: Path, case: str
) -> None:
    make, expected = CORPUS[case]
    table_id = server.create_table({**SPEC, "name": f"Members {case}"})
    path = make(tmp_path / "members")
    result = CliRunner().invoke(
        main,
        ["push", str(path), "--table", table_id, "--key", "Code", "--base-url", server.base_url],
        env={"CONNECTOR_API_KEY": server.api_key},
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    for text in expected:
        assert text in result.output
    with server.client() as http:
        assert http.get(f"/tables/{table_id}/rows").json()["rows"] == []
