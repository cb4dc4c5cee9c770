"""A corpus of bad spreadsheets and bad `push` / `apply` arguments, run as real processes.

Each case asserts the exit code; one headline line on stderr that names the row, column, cell
or setting to fix; the same line as the ``--json`` summary's ``error`` (one summary, also
when nothing could start); that it fails fast (no retry wait: nothing here can heal by
waiting); and, read back through the API, that the table holds exactly what it held before.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openpyxl
import pytest

from tests.fixtures.server import ROOT, RunningServer

SPEC = {
    "columns": [
        {"name": "Code", "type": "text", "required": True},
        {"name": "Name", "type": "text", "required": True},
        {"name": "Age", "type": "number"},
        {"name": "Status", "type": "choice", "options": ["active", "paused"]},
        {"name": "Born", "type": "date"},
        {"name": "Member", "type": "checkbox"},
    ],
}
SEED = [{"Code": "001", "Name": "Ann", "Age": 41, "Status": "active", "Born": "1983-05-01"}]
HEADER = "Code,Name,Age,Status,Born,Member\n"
GOOD = "001,Ann,41,active,1983-05-01,TRUE\n"

Make = Callable[[Path], Path]


@dataclass(frozen=True)
class Case:
    """A bad input: how to make it, the arguments, and what the headline must name."""

    make: Make
    headline: tuple[str, ...]
    code: int = 1
    args: tuple[str, ...] = ()
    command: str = "push"
    #: Extra lines the error must print below the headline.
    details: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def xlsx(rows: list[list[object]]) -> Make:
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


def csv(text: str) -> Make:
    def make(path: Path) -> Path:
        target = path.with_suffix(".csv")
        target.write_text(text, encoding="utf-8")
        return target

    return make


def raw(data: bytes, suffix: str) -> Make:
    def make(path: Path) -> Path:
        target = path.with_suffix(suffix)
        target.write_bytes(data)
        return target

    return make


def missing(path: Path) -> Path:
    return path.with_suffix(".csv")


CORPUS: dict[str, Case] = {
    "formula without a cached value": Case(
        xlsx([["Code", "Name", "Age"], ["001", "Ann", "=40+1"], ["002", "Bo", "=B3"]]),
        ("formula cell(s) saved without a value (C2, C3) in column(s) 'Age'",),
    ),
    "ambiguous dates": Case(
        csv(HEADER + "001,Ann,41,active,05/03/2024,\n002,Bo,3,active,06/04/2024,\n"),
        ("row 2, column 'Born', value '05/03/2024': ambiguous date", "--date-format"),
        details=("row 3, column 'Born', value '06/04/2024': ambiguous date",),
    ),
    "dates both day-first and month-first": Case(
        csv(HEADER + "001,Ann,,,25/03/2024,\n002,Bo,,,03/25/2024,\n003,Cy,,,05/03/2024,\n"),
        ("row 4, column 'Born', value '05/03/2024'", "both day-first and month-first",
         "--date-format ('%d/%m/%Y' or '%m/%d/%Y')"),
    ),
    "a date the --date-format does not read": Case(
        csv(HEADER + "001,Ann,,,05/03/2024,\n002,Bo,,,2024-13-45,\n"),
        ("row 3, column 'Born', value '2024-13-45': not a date",),
        args=("--date-format", "%d/%m/%Y"),
    ),
    "a --date-format without a day": Case(
        csv(HEADER + GOOD), ("--date-format '%m/%Y'", "a day, a month and a year"), code=2,
        args=("--date-format", "%m/%Y"),
    ),
    "unknown column": Case(
        csv("Code,Name,Shoe\n001,Ann,42\n"), ("row 1, column 'Shoe': not a column of table",),
    ),
    # a header in another case is taken as the one column it matches (tests/push/test_headers)
    "two headers naming one column": Case(
        csv("Code,Name,name \n001,Ann,Bo\n"),
        ("headers 'Name' and 'name ' both name column 'Name'", "nothing was written"), code=2,
    ),
    "invalid choice": Case(
        csv(HEADER + GOOD + "002,Bo,3,gone,,\n"),
        ("row 3, column 'Status', value 'gone': not one of the options: 'active', 'paused'",),
    ),
    "missing required value": Case(
        csv(HEADER + GOOD + "002,,3,active,,\n"), ("row 3, column 'Name': a value is required",),
    ),
    "not a number in an xlsx": Case(
        xlsx([["Code", "Name", "Age", "Born"], ["001", "Ann", "forty", dt.date(2024, 1, 31)]]),
        ("row 2, column 'Age', value 'forty': not a number",),
    ),
    "duplicate key": Case(
        csv(HEADER + GOOD + "001,Bo,,,,\n"),
        ("row 2, column 'Code', value '001': duplicate key: also on row(s) 3",),
    ),
    "malformed xlsx": Case(raw(b"PK\x03\x04 not really a zip", ".xlsx"), ("not a readable .xlsx",)),
    "empty file": Case(raw(b"", ".csv"), ("the file is empty",)),
    # a file of another kind is refused, not read as CSV (a CSV in it would create row 002)
    "CSV text in a .txt file": Case(
        raw((HEADER + GOOD + "002,Bo,3,active,,\n").encode(), ".txt"),
        ("members.txt: a .txt file is not read; push reads .csv, .xlsx, .xlsm, .parquet, .pq",
         "rename it to .csv"),
    ),
    "a file with no suffix": Case(
        raw((HEADER + "002,Bo,3,active,,\n").encode(), ""), ("members: a file with no suffix is not read",),
    ),
    "a JSON file": Case(
        raw(b'[{"Code": "002", "Name": "Bo"}]', ".json"), ("a .json file is not read", ".csv, .xlsx"),
    ),
    "no such file": Case(missing, ("no such file",)),
    "no such sheet": Case(
        xlsx([["Code", "Name"], ["001", "Ann"]]), ("no sheet 'Nope'; sheets: ['Sheet']",),
        args=("--sheet", "Nope"),
    ),
    "a key column the table lacks": Case(
        csv(HEADER + GOOD), ("--key: table", "has no column 'Nope'"), code=2,
        args=("--key", "Nope"),
    ),
    "an unknown table": Case(
        csv(HEADER + GOOD), ("no table named 'Membres'",), code=2, args=("--table", "Membres"),
    ),
    "an API key the server refuses": Case(
        csv(HEADER + GOOD), ("the API key was refused", "CONNECTOR_API_KEY"), code=2,
        extra={"key": "not-a-key-of-this-server"},
    ),
    "a plan file that is not a plan": Case(
        raw(b'{"format": 1, "table": {}}', ".json"), ("not a push plan file",), code=2,
        command="apply",
    ),
    "a plan file that is not JSON": Case(
        raw(b"Code,Name\n", ".json"), ("not a push plan file",), code=2, command="apply",
    ),
    "a plan file that does not exist": Case(
        lambda path: path.with_suffix(".json"), ("cannot read the plan",), code=2,
        command="apply",
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("corpus-sheets"), {}).start()
    yield running
    running.stop()


def table_rows(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    with server.client() as http:
        rows: list[dict[str, Any]] = http.get(f"/tables/{table_id}/rows").json()["rows"]
    return rows


@pytest.mark.parametrize("name", list(CORPUS))
def test_bad_input_fails_fast_with_one_line_and_writes_nothing(
    server: RunningServer, tmp_path: Path, name: str
) -> None:
    case = CORPUS[name]
    table = f"Members {name}"
    table_id = server.create_table({**SPEC, "name": table})
    server.insert_rows(table_id, SEED)
    before = table_rows(server, table_id)
    path = case.make(tmp_path / "members")
    if case.command == "push":
        argv = ["push", str(path), "--table", table, "--key", "Code"]
        for option, value in zip(case.args[::2], case.args[1::2], strict=True):
            if option in argv:
                argv[argv.index(option) + 1] = value
            else:
                argv += [option, value]
    else:
        argv = ["apply", str(path), *case.args]
    env = {**os.environ, "CONNECTOR_API_KEY": case.extra.get("key", server.api_key)}

    done = subprocess.run(
        [sys.executable, "-m", "connector", *argv, "--json", "--base-url", server.base_url],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )

    assert done.returncode == case.code, done.stderr
    lines = done.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), done.stderr
    headline = lines[0].removeprefix("error: ")
    for text in case.headline:
        assert text in headline, f"{text!r} not in the headline {headline!r}"
    for text in case.details:
        assert any(text in line for line in lines[1:]), done.stderr
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)  # one summary, and nothing else, on stdout
    assert (summary["status"], summary["exit_code"], summary["error"]) == (
        "failed", case.code, headline
    )
    (push,) = summary["pushes"]
    assert push["status"] == "failed" and push["error"] == headline
    assert (push["created"], push["updated"], push["deleted"], push["rejected"]) == (0, 0, 0, 0)
    assert not [line for line in lines if line.startswith("retrying in ")], done.stderr  # fast
    assert table_rows(server, table_id) == before  # nothing written
    assert not list(tmp_path.glob("*.rejects.csv"))


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 14
