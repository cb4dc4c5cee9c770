"""Data stays true (issue 17, the push side): what `connector export` wrote, a push of that file
reads back as the very values the table holds.

Property, for every column type and awkward value: a table's own export (Parquet, CSV, CSV
with ``--excel-safe`` pushed with ``--excel-safe``) pushed straight back plans zero writes; and
pushed into an empty table of the same columns it makes rows equal, value by value, to the
rows the table was seeded with (read back through the API, not through the code under test).

The exports are made by the `connector export` command against `connector serve`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.api import Client
from connector.cli import main
from connector.push import PushSpec, push
from tests.fixtures.server import RunningServer, ServerFactory

#: Texts that spreadsheets, pandas or we once read as "no value", and other awkward text:
#: formula starts (what --excel-safe guards), quotes, separators, line breaks, spaces,
#: numbers and booleans as text.
AWKWARD = [
    "None", "null", "NULL", "NA", "nan", "NaN", "N/A", "n/a", "<NA>", "NaT", "#N/A", "-",
    " ", "  padded  ", "=1+1", "+1", "-5", "@SUM(A1)", "\tx", "\rx", "'quoted", "'", "''",
    "a,b", 'say "hi"', "line\nbreak", "crlf\r\nline", "semi;colon|pipe\ttab", "007",
    "1e5", "TRUE", "false", "2024-01-31", "é ü 中 🙂", "\\", "#",
]
OPTIONS = ["NA", "None", "null", "=opt", "-", "a,b", " padded ", "plain"]
#: Column names as the export writes them in its header (``=Note`` gets guarded).
SPEC_COLUMNS: list[dict[str, Any]] = [
    {"name": "Key", "type": "text", "required": True},
    {"name": "=Note", "type": "text"},
    {"name": "Pick", "type": "choice", "options": OPTIONS},
    {"name": "Amount", "type": "number"},
    {"name": "Done", "type": "checkbox"},
    {"name": "Day", "type": "date"},
]
FORMATS = ["parquet", "csv", "csv-excel-safe"]


texts = (st.sampled_from(AWKWARD) | st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12,
))
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "=Note": texts,
    "Pick": st.sampled_from(OPTIONS),
    "Amount": st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.1, 1e-300, 5e-324, -0.0, 123456789.123, 1e15, 1e16]),
    "Done": st.booleans(),
    "Day": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)).map(dt.date.isoformat),
}


@st.composite
def tables(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(st.lists(texts.filter(lambda t: t != ""), min_size=1, max_size=12, unique=True))
    return [
        {"Key": key, **{name: draw(st.none() | values) for name, values in VALUES.items()}}
        for key in keys
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("fidelity"), {}).start()
    yield running
    running.stop()


counter = itertools.count()


def export(server: RunningServer, table_id: str, out: Path, fmt: str) -> Path:
    """`connector export` of one table; the path of the file it wrote."""
    options = ["--format", "csv", "--excel-safe"] if fmt == "csv-excel-safe" else ["--format", fmt]
    result = CliRunner().invoke(
        main,
        ["export", "--out", str(out), "--table", table_id, *options, "--base-url", server.base_url],
        env={"CONNECTOR_API_KEY": server.api_key},
    )
    assert result.exit_code == 0, result.output
    (path,) = (p for p in out.iterdir() if p.name != "_connector_tables.json")
    return path


def api_rows(server: RunningServer, table_id: str) -> dict[str, dict[str, Any]]:
    """User cells by key, read with plain HTTP; an empty string is an empty cell."""
    with server.client() as http:
        found = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()["rows"]
    return {
        r["fields"]["Key"]: {k: None if v == "" else v for k, v in r["fields"].items()}
        for r in found
    }


def expected(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        r["Key"]: {c["name"]: None if r[c["name"]] == "" else r[c["name"]] for c in SPEC_COLUMNS}
        for r in rows
    }


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return a == b or math.isclose(a, b, rel_tol=1e-15)
    return a == b and type(a) is type(b)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=tables(), fresh=st.sampled_from(FORMATS))
def test_an_export_pushed_back_plans_no_write_and_recreates_every_value(
    server: RunningServer, tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]],
    fresh: str,
) -> None:
    n = next(counter)
    table_id = server.create_table({"name": f"Fidelity {n}", "columns": SPEC_COLUMNS})
    server.insert_rows(table_id, [{k: v for k, v in r.items() if v is not None} for r in rows])
    seeded = api_rows(server, table_id)
    assert seeded == expected(rows)  # the server holds what the test meant, as the test reads it

    with Client(server.base_url, server.api_key) as client:
        for fmt in FORMATS:
            path = export(server, table_id, tmp_path_factory.mktemp(f"export{n}-{fmt}"), fmt)
            back = push(client, PushSpec(path, table=table_id, key="Key", excel_safe=fmt == "csv-excel-safe"), dry_run=True)
            assert back.plan.is_empty, (fmt, back.plan.updates[:3], back.plan.creates[:3])
            assert back.plan.unchanged == len(rows)
            if fmt == fresh:  # into an empty copy: every row created, every value as seeded
                copy = server.create_table({"name": f"Fidelity {n} copy", "columns": SPEC_COLUMNS})
                done = push(client, PushSpec(path, table=copy, key="Key", excel_safe=fmt == "csv-excel-safe"))
                assert (done.created, done.rejected) == (len(rows), ())
                made = api_rows(server, copy)
                assert made.keys() == seeded.keys()
                for key, cells in seeded.items():
                    for name, value in cells.items():
                        assert same(made[key][name], value), (fmt, key, name, made[key][name], value)


# --- the parts, one by one, through the command a user types ---------------------------------

PEOPLE = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Code", "type": "text"},
        {"name": "Grade", "type": "choice", "options": ["A", "B", "NA"]},
        {"name": "Score", "type": "number"},
        {"name": "Team", "type": "text", "required": True},
    ],
}


def people(server: RunningServer, rows: list[dict[str, Any]]) -> str:
    table_id = server.create_table({**PEOPLE, "name": f"People {next(counter)}"})
    server.insert_rows(table_id, rows)
    return table_id


def cli(server: RunningServer, *args: str) -> Any:
    return CliRunner().invoke(
        main, [*args, "--base-url", server.base_url], env={"CONNECTOR_API_KEY": server.api_key}
    )


def cells(server: RunningServer, table_id: str, *names: str) -> list[tuple[Any, ...]]:
    with server.client() as http:
        found = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()["rows"]
    return sorted(tuple(r["fields"].get(n) for n in names) for r in found)


def test_null_markers_are_text_unless_named(server: RunningServer, tmp_path: Path) -> None:
    """A person named Null, a code NA, a grade NA: text. `--null-values NA,-` makes NA and -
    (only those, and only whole cells) empty."""
    path = tmp_path / "people.csv"
    path.write_text(
        "Name,Code,Grade,Score,Team\nNull,NA,NA,1,x\nNone,-,A,-,y\nN/A,NAB,,2,z\n", encoding="utf-8"
    )
    plain = people(server, [])
    result = cli(server, "push", str(path), "--table", plain, "--key", "Name")
    assert result.exit_code == 1 and "row 3, column 'Score', value '-': not a number" in result.output
    path.write_text(path.read_text().replace("None,-,A,-,y", "None,-,A,3,y"), encoding="utf-8")
    result = cli(server, "push", str(path), "--table", plain, "--key", "Name")
    assert result.exit_code == 0, result.output
    assert cells(server, plain, "Name", "Code", "Grade", "Score") == [
        ("N/A", "NAB", None, 2), ("None", "-", "A", 3), ("Null", "NA", "NA", 1),
    ]

    named = people(server, [])
    result = cli(server, "push", str(path), "--table", named, "--key", "Name",
                 "--null-values", "NA, -")
    assert result.exit_code == 0, result.output
    assert cells(server, named, "Name", "Code", "Grade", "Score") == [
        ("N/A", "NAB", None, 2), ("None", None, "A", 3), ("Null", None, None, 1),
    ]
    refused = cli(server, "push", str(path), "--table", named, "--key", "Name",
                  "--null-values", "NA,,")
    assert refused.exit_code == 2 and "non-empty texts" in refused.output


def test_null_markers_apply_to_every_kind_of_source(server: RunningServer, tmp_path: Path) -> None:
    import openpyxl
    import pandas as pd

    frame = pd.DataFrame({"Name": ["a", "b"], "Code": ["n/a", "n/a!"], "Team": ["t", "t"]})
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    for row in [list(frame.columns), *frame.to_numpy().tolist()]:
        sheet.append(row)
    book.save(tmp_path / "p.xlsx")
    frame.to_parquet(tmp_path / "p.parquet")
    with Client(server.base_url, server.api_key) as client:
        for source in (frame, tmp_path / "p.xlsx", tmp_path / "p.parquet"):
            table_id = people(server, [])
            push(client, PushSpec(source, table=table_id, key="Name", null_values=["n/a"]))
            assert cells(server, table_id, "Name", "Code") == [("a", None), ("b", "n/a!")]


def test_an_excel_safe_export_pushes_back_with_excel_safe(server: RunningServer, tmp_path: Path) -> None:
    """Without --excel-safe every guarded cell would get its ``'`` upstream; with it, nothing
    changes. The export guards a leading ``'`` too (``'quoted`` is written ``''quoted``), so
    the undo takes off exactly one guard and ``'quoted`` comes back as it was."""
    guarded = ["=SUM(A1)", "+44 20", "-3", "@home", "\tindent", "\rreturn"]
    rows = [{"Name": f"p{i}", "Code": code, "Team": "t"} for i, code in enumerate(guarded)]
    rows += [{"Name": "q", "Code": "'quoted", "Team": "=team"}, {"Name": "r", "Team": "-"}]
    table_id = people(server, rows)
    out = tmp_path / "out"
    assert cli(server, "export", "--out", str(out), "--table", table_id, "--format", "csv",
               "--excel-safe").exit_code == 0
    (path,) = (p for p in out.iterdir() if p.name != "_connector_tables.json")
    text = path.read_text(encoding="utf-8")
    assert "\"'=SUM(A1)\"" in text and "\"''quoted\"" in text

    kept = cli(server, "push", str(path), "--table", table_id, "--key", "Name", "--dry-run")
    assert kept.exit_code == 0, kept.output
    assert "update 8," in kept.output  # 6 guarded codes, and the teams of q and r

    undone = cli(server, "push", str(path), "--table", table_id, "--key", "Name", "--dry-run",
                 "--excel-safe")
    assert undone.exit_code == 0, undone.output
    assert "create 0, update 0, delete 0, unchanged 8" in undone.output


def test_undo_excel_safe_inverts_exactly_the_export_rule() -> None:
    from connector.destinations.formats import excel_safe, undo_excel_safe

    for text in ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "x", "", "a=b", "'x", "'", "''",
                 "'=x", "''=x"]:
        assert undo_excel_safe(excel_safe(text)) == text
    # A lone ' before anything unguarded is data: the export never wrote it as a guard.
    assert [undo_excel_safe(t) for t in ["'x", "'", "' =x", "x'=y"]] == ["'x", "'", "' =x", "x'=y"]


def workbook(path: Path, title: str, rows: list[list[Any]], merges: list[str]) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = title
    for row in rows:
        sheet.append(row)
    for merge in merges:
        sheet.merge_cells(merge)
    book.save(path)
    return path


def test_merged_cells_are_refused_by_name_or_filled(server: RunningServer, tmp_path: Path) -> None:
    rows: list[list[Any]] = [["Name", "Team", "Score"], ["a", "red", 1], ["b", None, None], ["c", None, 3],
            ["d", "blue", 4], ["e", None, None]]
    merges = ["B2:B4", "B5:B6", "C5:C6", "C2:C3", "D8:E9"]
    path = workbook(tmp_path / "teams.xlsx", "Q1 teams", rows, merges)
    table_id = people(server, [])

    refused = cli(server, "push", str(path), "--table", table_id, "--key", "Name")
    assert refused.exit_code == 1
    assert ("sheet 'Q1 teams' has 4 merged range(s) holding a value ('Q1 teams'!B2:B4, "
            "'Q1 teams'!C2:C3, 'Q1 teams'!B5:B6, 'Q1 teams'!C5:C6)") in refused.output
    assert "D8" not in refused.output  # an empty merge hides nothing
    assert "--merged-cells fill" in refused.output and "Traceback" not in refused.output
    assert cells(server, table_id, "Name") == []

    filled = cli(server, "push", str(path), "--table", table_id, "--key", "Name",
                 "--merged-cells", "fill")
    assert filled.exit_code == 0, filled.output
    assert cells(server, table_id, "Name", "Team", "Score") == [
        ("a", "red", 1), ("b", "red", 1), ("c", "red", 3), ("d", "blue", 4), ("e", "blue", 4),
    ]
    csv = tmp_path / "teams.csv"
    csv.write_text("Name,Team\nf,g\n", encoding="utf-8")
    wrong = cli(server, "push", str(csv), "--table", table_id, "--key", "Name",
                "--merged-cells", "fill")
    assert wrong.exit_code == 1 and "--merged-cells applies to Excel files only" in wrong.output


def test_an_update_needs_only_the_columns_it_changes(server: RunningServer, tmp_path: Path) -> None:
    """Team is required: a sheet without it may update rows that exist, and a row it would
    create is named (row and column), with nothing written."""
    table_id = people(server, [{"Name": "a", "Team": "x", "Score": 1},
                               {"Name": "b", "Team": "y", "Score": 2}])
    path = tmp_path / "scores.csv"
    path.write_text("Name,Score\na,10\nb,2\n", encoding="utf-8")
    result = cli(server, "push", str(path), "--table", table_id, "--key", "Name")
    assert result.exit_code == 0, result.output
    assert cells(server, table_id, "Name", "Team", "Score") == [("a", "x", 10), ("b", "y", 2)]

    path.write_text("Name,Score\na,11\nnew,5\nb,2\nnewer,6\n", encoding="utf-8")
    result = cli(server, "push", str(path), "--table", table_id, "--key", "Name")
    assert result.exit_code == 1
    assert ("row 3, column 'Team': a value is required to create this row, and the source has "
            "no column 'Team'") in result.output
    assert "row 5, column 'Team'" in result.output and "row 2" not in result.output
    assert cells(server, table_id, "Name", "Team", "Score") == [("a", "x", 10), ("b", "y", 2)]


def test_rejected_rows_keep_their_source_row_and_key(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """The server refuses cells over 16 bytes: a rejected update's line in the rejects CSV
    names its source row and carries its key (it changed only Code); a rejected create's
    error names no position in a request ("row 0")."""
    import csv

    small = server_factory(max_cell_bytes=16)
    table_id = people(small, [{"Name": "a", "Team": "x", "Code": "old"},
                              {"Name": "b", "Team": "y", "Code": "old"}])
    path = tmp_path / "codes.csv"
    path.write_text(
        "Name,Code,Team\nb,ok,y\na,far too long for it,x\nc,also much too long,z\n",
        encoding="utf-8",
    )
    result = cli(small, "push", str(path), "--table", table_id, "--key", "Name")
    assert result.exit_code == 3, result.output
    with (tmp_path / "codes.rejects.csv").open(newline="", encoding="utf-8") as f:
        lines = list(csv.DictReader(f))
    with small.client() as http:
        found = http.get(f"/tables/{table_id}/rows").json()["rows"]
    ids = {r["fields"]["Name"]: r["id"] for r in found}
    assert [(r["row"], r["Name"], r["Code"], r["Team"], r["column"]) for r in lines] == [
        ("3", "a", "far too long for it", "", "Code"),  # the update sent only Code
        ("4", "c", "also much too long", "z", "Code"),
    ]
    assert (lines[0]["id"], lines[1]["id"]) == (ids["a"], "")
    assert all("row 0" not in r["error"] and "16 bytes" in r["error"] for r in lines)
    assert cells(small, table_id, "Name", "Code") == [("a", "old"), ("b", "ok")]
