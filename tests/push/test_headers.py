"""A header names the column it spells, exactly (issue 24, item 3).

``x `` is not ``x``, ``" "`` is a name, ``Name`` and ``name`` are two columns. A header that
matches a column only once trimmed and case-folded is taken as that column when it is the only
such column and none is spelled by the header exactly, and the plan says so; a header matching
several that way, or two headers naming one column, stop the push (exit 2, one line, nothing
written). A table's own export pushes back with zero writes whatever its column names are.

Everything goes through `connector export` and `connector push` against `connector serve`;
tables are made the way `connector server create-table` makes them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.api import Client
from connector.cli import main
from connector.destinations.formats import encode_csv
from connector.push import PushSpec, push
from connector.push.source import open_source, read_source
from tests.fixtures.server import RunningServer

counter = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("headers"), {}).start()
    yield running
    running.stop()


def cli(server: RunningServer, *args: str) -> Result:
    return CliRunner().invoke(
        main, [*args, "--base-url", server.base_url], env={"CONNECTOR_API_KEY": server.api_key}
    )


def table(server: RunningServer, names: list[str], rows: list[dict[str, Any]]) -> str:
    """A table of text columns `names`, holding `rows`."""
    table_id = server.create_table({
        "name": f"Headers {next(counter)}",
        "columns": [{"name": n, "type": "text"} for n in names],
    })
    server.insert_rows(table_id, rows)
    return table_id


def held(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    """Every row as the API serves it (id, cells, timestamps), read with plain HTTP."""
    with server.client() as http:
        found: list[dict[str, Any]] = http.get(
            f"/tables/{table_id}/rows", params={"limit": 1000}
        ).json()["rows"]
    return sorted(found, key=lambda r: str(r["id"]))


def cells(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    """Each row's cells that hold a value (the server may list an empty one as null)."""
    found = [{k: v for k, v in r["fields"].items() if v is not None} for r in held(server, table_id)]
    return sorted(found, key=repr)


def export(server: RunningServer, table_id: str, out: Path, *options: str) -> Path:
    """`connector export` of one table; the file it wrote."""
    result = cli(server, "export", "--out", str(out), "--table", table_id, *options)
    assert result.exit_code == 0, result.output
    (path,) = (p for p in out.iterdir() if p.name != "_connector_tables.json")
    return path


def csv_file(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- what the careful user found ---------------------------------------------------------


def test_a_header_with_a_trailing_space_names_that_column_not_the_trimmed_one(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = table(server, ["K", "x", "x "], [{"K": "k1", "x": "plain", "x ": "spaced"}])
    source = csv_file(tmp_path / "s.csv", "K,x \nk1,NEW\n")
    planned = cli(server, "push", str(source), "--table", table_id, "--key", "K", "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert "'x ': 'spaced' → 'NEW'" in planned.output and "plain" not in planned.output
    assert "taken as" not in planned.output

    done = cli(server, "push", str(source), "--table", table_id, "--key", "K")
    assert done.exit_code == 0, done.output
    assert cells(server, table_id) == [{"K": "k1", "x": "plain", "x ": "NEW"}]


def test_a_key_with_a_trailing_space_is_that_column(server: RunningServer, tmp_path: Path) -> None:
    table_id = table(server, ["x", "x ", "v"], [{"x": "1", "x ": "2", "v": "old"}])
    source = csv_file(tmp_path / "s.csv", "x ,v\n2,new\n")
    with Client(server.base_url, server.api_key) as client:
        done = push(client, PushSpec(source, table=table_id, key=["x "]))
    assert (done.plan.key.columns, len(done.plan.updates), done.plan.creates) == (("x ",), 1, ())
    assert cells(server, table_id) == [{"x": "1", "x ": "2", "v": "new"}]


def test_an_export_of_columns_that_trim_alike_pushes_back_with_no_write(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = table(server, ["K", "x", "x ", " x"], [{"K": "k1", "x": "a", "x ": "b", " x": "c"}])
    path = export(server, table_id, tmp_path / "out", "--format", "csv")
    back = cli(server, "push", str(path), "--table", table_id, "--key", "K", "--dry-run")
    assert back.exit_code == 0, back.output
    assert "create 0, update 0, delete 0, unchanged 1" in back.output


def test_a_column_named_one_space_has_a_header(server: RunningServer, tmp_path: Path) -> None:
    names = ["K", *(f"c{i}" for i in range(12)), " "]  # " " is column 14
    table_id = table(server, names, [{"K": "k1", " ": "blank-named"}])
    path = export(server, table_id, tmp_path / "out", "--format", "csv")
    back = cli(server, "push", str(path), "--table", table_id, "--key", "K", "--dry-run")
    assert back.exit_code == 0, back.output
    assert "create 0, update 0, delete 0, unchanged 1" in back.output

    source = csv_file(tmp_path / "s.csv", "K, \nk1,new\n")
    done = cli(server, "push", str(source), "--table", table_id, "--key", "K")
    assert done.exit_code == 0, done.output
    assert cells(server, table_id) == [{"K": "k1", " ": "new"}]


def test_a_header_matching_one_column_loosely_is_taken_as_it_and_the_plan_says_so(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = table(server, ["K", "Name"], [{"K": "k1", "Name": "Ann"}])
    source = csv_file(tmp_path / "s.csv", "K,name \nk1,Bo\n")
    planned = cli(server, "push", str(source), "--table", table_id, "--key", "K", "--dry-run",
                  "--json")
    assert planned.exit_code == 0, planned.output
    (entry,) = json.loads(planned.stdout)["pushes"]
    assert "header 'name ' taken as column 'Name'" in entry["plan"]
    assert "Name: 'Ann' → 'Bo'" in entry["plan"]
    text = cli(server, "push", str(source), "--table", table_id, "--key", "K", "--dry-run")
    assert "header 'name ' taken as column 'Name'" in text.output
    saved = tmp_path / "plan.json"
    assert cli(server, "push", str(source), "--table", table_id, "--key", "K",
               "--plan-out", str(saved)).exit_code == 0
    assert json.loads(saved.read_text())["taken"] == [["name ", "Name"]]

    applied = cli(server, "apply", str(saved))
    assert applied.exit_code == 0, applied.output
    assert cells(server, table_id) == [{"K": "k1", "Name": "Bo"}]


def _refused(server: RunningServer, table_id: str, source: Path) -> str:
    """A push that must stop before any write: exit 2, one line; the table as it was."""
    before = held(server, table_id)
    result = cli(server, "push", str(source), "--table", table_id, "--key", "K")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert held(server, table_id) == before
    return lines[0]


def test_a_header_matching_several_columns_loosely_is_refused(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = table(server, ["K", "Name", "name"], [{"K": "k1", "Name": "A", "name": "a"}])
    line = _refused(server, table_id, csv_file(tmp_path / "s.csv", "K,NAME\nk1,B\n"))
    assert "header 'NAME' matches columns 'Name' and 'name'" in line
    assert "nothing was written" in line

    spaced = table(server, ["K", "x", "X"], [{"K": "k1"}])
    line = _refused(server, spaced, csv_file(tmp_path / "t.csv", "K,x \nk1,B\n"))
    assert "header 'x ' matches columns 'x' and 'X'" in line


def test_two_headers_naming_one_column_are_refused_naming_both(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = table(server, ["K", "Name"], [{"K": "k1", "Name": "A"}])
    line = _refused(server, table_id, csv_file(tmp_path / "s.csv", "K,Name,name \nk1,B,C\n"))
    assert "headers 'Name' and 'name ' both name column 'Name'" in line
    line = _refused(server, table_id, csv_file(tmp_path / "t.csv", "K,NAME,name\nk1,B,C\n"))
    assert "headers 'NAME' and 'name' both name column 'Name'" in line


def test_a_workbook_header_names_the_column_it_spells(server: RunningServer, tmp_path: Path) -> None:
    """A sheet saved from the table (its header the column names, exactly) plans no write."""
    import openpyxl

    names = ["K", "x", "x ", " ", "Name", "name"]
    rows = [{"K": "k1", "x": "a", "x ": "b", " ": "c", "Name": "d", "name": "e"}, {"K": "k2"}]
    table_id = table(server, names, rows)
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(names)
    for row in cells(server, table_id):
        sheet.append([row.get(n) for n in names])
    book.save(tmp_path / "t.xlsx")
    with Client(server.base_url, server.api_key) as client:
        back = push(client, PushSpec(tmp_path / "t.xlsx", table=table_id, key="K"), dry_run=True)
    assert back.plan.is_empty and back.plan.unchanged == 2 and back.plan.taken == ()


def test_names_no_reference_table_holds_read_back_as_written(tmp_path: Path) -> None:
    """Quotes, line breaks and backslashes (the reference server refuses them in a column
    name; another server may not): the header our CSV export writes reads back as the names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = ['say "hi"', "two\nlines", "cr\r\nlf", "back\\slash", " ", "x ", "x", "a,b", "é", "\xa0"]
    schema = pa.schema([pa.field(n, pa.string()) for n in names])
    batch = pa.record_batch([pa.array([f"v{i}"]) for i in range(len(names))], schema=schema)
    encode_csv([batch], schema, tmp_path / "t.csv")
    pq.write_table(pa.Table.from_batches([batch]), tmp_path / "t.parquet")
    for path in (tmp_path / "t.csv", tmp_path / "t.parquet"):
        assert open_source(path).columns == tuple(names), path  # the header alone
        data = read_source(path)
        assert list(data.columns) == names, path
        assert data.frame.iloc[0].tolist() == [f"v{i}" for i in range(len(names))]


# --- the property: a table's own export pushes back with zero writes -------------------------

#: Names a header reader once trimmed, folded, merged or took for something else.
HOSTILE = [
    " ", "  ", "x", "x ", " x", "X", "Name", "name", "NAME", "id", "ID", "_id", "__id",
    "created_at", "_created_at", "updated_at", "_updated_at", "a,b", ",", "it's", "'", "''",
    "=1+1", "'=1+1", "+x", "-", "@a", "é ü", "中文", "🙂", "NA", "None", "null", "nan", "0",
    "1.5", "a;b", "a|b", "#", "K",
]
#: What the reference server takes in a column name: no quotes, backslashes or control
#: characters (`connector.server.columns`).
allowed = st.characters(
    exclude_categories=["Cs", "Cc"], exclude_characters='"\\\u2028\u2029'
)
column_names = st.lists(
    st.sampled_from(HOSTILE) | st.text(allowed, min_size=1, max_size=6),
    min_size=1, max_size=10, unique=True,
)
FORMATS = {
    "csv": ["--format", "csv"],
    "csv-excel-safe": ["--format", "csv", "--excel-safe"],
    "parquet": ["--format", "parquet"],
}


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(names=column_names, filled=st.lists(st.booleans(), min_size=30, max_size=30),
       fresh=st.sampled_from(sorted(FORMATS)))
def test_an_export_pushes_back_with_no_write_whatever_its_column_names(
    server: RunningServer, tmp_path_factory: pytest.TempPathFactory, names: list[str],
    filled: list[bool], fresh: str,
) -> None:
    """The first column is the key; other cells are set or left empty by `filled`. Pushed
    into an empty table of the same columns, the export makes the same rows: each header
    landed on its own column."""
    key = names[0]
    rows = [
        {n: f"{i}:{j}" for j, n in enumerate(names) if j == 0 or filled[(i * 7 + j) % 30]}
        for i in range(3)
    ]
    table_id = table(server, names, rows)
    seeded = cells(server, table_id)
    out = tmp_path_factory.mktemp("export")
    with Client(server.base_url, server.api_key) as client:
        for fmt, options in FORMATS.items():
            path = export(server, table_id, out / fmt, *options)
            safe = fmt == "csv-excel-safe"
            back = push(client, PushSpec(path, table=table_id, key=[key], excel_safe=safe), dry_run=True)
            assert back.plan.is_empty, (fmt, back.plan.updates[:2], back.plan.creates[:2])
            assert (back.plan.unchanged, back.plan.taken) == (3, ()), fmt
            if fmt == fresh:
                copy = table(server, names, [])
                done = push(client, PushSpec(path, table=copy, key=[key], excel_safe=safe))
                assert (done.created, done.rejected) == (3, ())
                assert cells(server, copy) == seeded
