"""Changing a live table's columns (`connector server alter-table`, `RunningServer.add_column`...).

The running server sees every change at once; no row's `updated_at` moves; a refused change
changes nothing. Cell conversions follow `connector.server.alter.RULES`, spelled out here
value by value.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.server.alter import convert
from connector.server.columns import ColumnDef, SpecError
from connector.server.problems import ApiProblem
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer
from tests.server.conftest import PEOPLE

# -- the conversion rules, every pair of types ---------------------------------------------

CHOICE = ColumnDef("C", "choice", options=("0.5", "true", "2024-02-29", "Won", "3"))

#: (type before, value, type after, the cell after)
CONVERSIONS: list[tuple[str, Any, str, Any]] = [
    ("number", 0.5, "text", "0.5"),
    ("number", 3, "text", "3"),
    ("number", -1.25e20, "text", "-1.25e+20"),
    ("checkbox", True, "text", "true"),
    ("checkbox", False, "text", "false"),
    ("date", "2024-02-29", "text", "2024-02-29"),
    ("choice", "Won", "text", "Won"),
    ("text", "0.5", "number", 0.5),
    ("text", " 42 ", "number", 42),
    ("text", "-0", "number", 0),
    ("text", "1e3", "number", 1000.0),
    ("text", "3 kg", "number", None),
    ("text", "1,5", "number", None),
    ("text", "", "number", None),
    ("text", "1e999", "number", None),
    ("text", "9223372036854775808", "number", None),
    ("text", "-9223372036854775808", "number", -(2**63)),
    ("text", "9" * 5000, "number", None),  # past the digits Python turns into an int
    ("text", "NaN", "number", None),
    ("choice", "3", "number", 3),
    ("checkbox", True, "number", 1),
    ("checkbox", False, "number", 0),
    ("date", "2024-02-29", "number", None),
    ("text", "Yes", "checkbox", True),
    ("text", " TRUE ", "checkbox", True),
    ("text", "1", "checkbox", True),
    ("text", "no", "checkbox", False),
    ("text", "0", "checkbox", False),
    ("text", "maybe", "checkbox", None),
    ("choice", "true", "checkbox", True),
    ("number", 1, "checkbox", True),
    ("number", 0, "checkbox", False),
    ("number", 2, "checkbox", None),
    ("date", "2024-02-29", "checkbox", None),
    ("text", "2024-02-29", "date", "2024-02-29"),
    ("text", " 2024-02-29 ", "date", "2024-02-29"),
    ("text", "2023-02-29", "date", None),
    ("text", "29/02/2024", "date", None),
    ("choice", "2024-02-29", "date", "2024-02-29"),
    ("number", 20240229, "date", None),
    ("checkbox", True, "date", None),
    ("text", "Won", "choice", "Won"),
    ("text", "won", "choice", None),
    ("number", 0.5, "choice", "0.5"),
    ("number", 3, "choice", "3"),
    ("checkbox", True, "choice", "true"),
    ("checkbox", False, "choice", None),
    ("date", "2024-02-29", "choice", "2024-02-29"),
    ("choice", "Lost", "choice", None),
]


@pytest.mark.parametrize(("before", "value", "after", "expected"), CONVERSIONS,
                         ids=[f"{b}-{str(v)[:24]}-{a}" for b, v, a, _ in CONVERSIONS])
def test_a_retype_converts_a_cell_by_the_written_rule(before: str, value: Any, after: str, expected: Any) -> None:
    target = CHOICE if after == "choice" else ColumnDef("C", after)
    got = convert(value, before, target)
    assert got == expected and type(got) is type(expected)


def test_every_pair_of_types_has_a_rule_here() -> None:
    types = ("text", "choice", "number", "checkbox", "date")
    covered = {(b, a) for b, _, a, _ in CONVERSIONS}
    assert {(b, a) for b in types for a in types if b != a} <= covered


# -- on a running server ---------------------------------------------------------------------

MIXED = {
    "name": "Deals",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Code", "type": "text"},
        {"name": "Stage", "type": "choice", "options": ["New", "Won", "Lost"]},
        {"name": "Amount", "type": "number"},
        {"name": "Paid", "type": "checkbox"},
    ],
}
DEALS = [
    {"Name": "a", "Code": "10", "Stage": "New", "Amount": 0.5, "Paid": True},
    {"Name": "b", "Code": "9", "Stage": "Won", "Amount": 3, "Paid": False},
    {"Name": "c", "Code": "100", "Stage": "Lost"},
    {"Name": "d", "Code": "n/a", "Stage": "Won", "Amount": 1},
]


def live(running: RunningServer) -> tuple[str, list[dict[str, Any]]]:
    table = running.create_table(MIXED)
    return table, running.insert_rows(table, DEALS)


def read(running: RunningServer, table: str, **params: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The schema and every row, over HTTP."""
    with running.client() as client:
        schema = client.get(f"/tables/{table}").json()
        rows = client.get(f"/tables/{table}/rows", params={"limit": 1000, **params}).json()["rows"]
    return schema, rows


def stamps(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["id"], r["created_at"], r["updated_at"]) for r in rows]


def test_rename_keeps_the_id_the_cells_and_every_stamp(server: RunningServer) -> None:
    table, rows = live(server)
    schema = server.rename_column(table, "Stage", "Phase")
    assert [(c["id"], c["name"]) for c in schema["columns"]] == [
        ("col_Name", "Name"), ("col_Code", "Code"), ("col_Stage", "Phase"), ("col_Amount", "Amount"), ("col_Paid", "Paid")]
    served, now = read(server, table)
    assert served == schema
    assert stamps(now) == stamps(rows)
    for before, after in zip(rows, now, strict=True):
        old = before["fields"]
        assert list(after["fields"]) == ["Name", "Code", "Phase", "Amount", "Paid"]
        assert after["fields"] == {"Name": old["Name"], "Code": old["Code"], "Phase": old["Stage"],
                                   "Amount": old["Amount"], "Paid": old["Paid"]}
    with server.client() as client:
        won = client.get(f"/tables/{table}/rows", params={"filter": json.dumps({"Phase": {"eq": "Won"}})}).json()
        assert [r["fields"]["Name"] for r in won["rows"]] == ["b", "d"]
        gone = client.get(f"/tables/{table}/rows", params={"filter": json.dumps({"Stage": {"eq": "Won"}})})
        assert gone.status_code == 400 and gone.json()["error"]["field"] == "Stage"
        written = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "e", "Phase": "New"}})
        assert written.status_code == 201 and written.json()["fields"]["Phase"] == "New"


def test_a_new_column_is_empty_everywhere_and_gets_a_free_id(server: RunningServer) -> None:
    table, rows = live(server)
    server.rename_column(table, "Code", "Reference")
    schema = server.add_column(table, "Code", "choice", options=["x", "y"])
    assert schema["columns"][-1] == {"id": "col_Code_2", "name": "Code", "type": "choice", "options": ["x", "y"]}
    assert schema["columns"][1] == {"id": "col_Code", "name": "Reference", "type": "text"}
    schema = server.add_column(table, "Code_2", "number")
    assert schema["columns"][-1]["id"] == "col_Code_2_2"
    assert len({c["id"] for c in schema["columns"]}) == len(schema["columns"])
    _, now = read(server, table)
    assert stamps(now) == stamps(rows)
    for before, after in zip(rows, now, strict=True):
        assert after["fields"] == {"Name": before["fields"]["Name"], "Reference": before["fields"]["Code"],
                                   "Stage": before["fields"]["Stage"], "Amount": before["fields"]["Amount"],
                                   "Paid": before["fields"]["Paid"], "Code": None, "Code_2": None}


def test_retype_converts_every_stored_cell_and_moves_no_stamp(server: RunningServer) -> None:
    table, rows = live(server)
    server.retype_column(table, "Amount", "text")
    server.retype_column(table, "Code", "number")
    server.retype_column(table, "Paid", "choice", options=["true", "false"])
    schema, now = read(server, table)
    assert [(c["name"], c["type"]) for c in schema["columns"]] == [
        ("Name", "text"), ("Code", "number"), ("Stage", "choice"), ("Amount", "text"), ("Paid", "choice")]
    assert stamps(now) == stamps(rows)
    assert [r["fields"] for r in now] == [
        {"Name": "a", "Code": 10, "Stage": "New", "Amount": "0.5", "Paid": "true"},
        {"Name": "b", "Code": 9, "Stage": "Won", "Amount": "3", "Paid": "false"},
        {"Name": "c", "Code": 100, "Stage": "Lost", "Amount": None, "Paid": None},
        {"Name": "d", "Code": None, "Stage": "Won", "Amount": "1", "Paid": None},
    ]


def test_pages_remembered_before_a_retype_are_not_reused(server: RunningServer) -> None:
    """The server remembers where deep pages start (`paging`); a retype reorders the rows
    of a sort by that column, and the next pages follow the new order."""
    table, _ = live(server)
    extra = [{"Name": f"z{i}", "Code": str(i * 7 % 50)} for i in range(40)]
    server.insert_rows(table, extra)
    with server.client() as client:
        def names(offset: int) -> list[str]:
            params = {"sort": "Code", "limit": 5, "offset": offset}
            return [r["fields"]["Name"] for r in client.get(f"/tables/{table}/rows", params=params).json()["rows"]]

        as_text = [n for offset in range(0, 45, 5) for n in names(offset)]
        server.retype_column(table, "Code", "number")
        as_numbers = [n for offset in range(0, 45, 5) for n in names(offset)]
    # By number, empty first, ties in creation order ("n/a" did not convert: empty).
    codes = [(r["Name"], r["Code"]) for r in DEALS + extra]
    numbers = [(name, -1 if code == "n/a" else int(code)) for name, code in codes]
    assert as_numbers == [name for name, _ in sorted(numbers, key=lambda pair: pair[1])]
    assert as_text == [name for name, _ in sorted(codes, key=lambda pair: pair[1])]


def test_dropping_a_column_removes_its_cells(server: RunningServer) -> None:
    table, rows = live(server)
    schema = server.drop_column(table, "Stage")
    assert [c["id"] for c in schema["columns"]] == ["col_Name", "col_Code", "col_Amount", "col_Paid"]
    _, now = read(server, table)
    assert stamps(now) == stamps(rows)
    assert [r["fields"] for r in now] == [{k: v for k, v in r["fields"].items() if k != "Stage"} for r in rows]


def test_removed_options_empty_their_cells(server: RunningServer) -> None:
    table, rows = live(server)
    result = CliRunner().invoke(
        main, ["server", "alter-table", "set-options", "--db", str(server.db_path), "Deals", "Stage", "New", "Won", "Open"]
    )
    assert result.exit_code == 0, result.output
    assert "1 cell(s)" in result.output
    schema, now = read(server, table)
    assert schema["columns"][2]["options"] == ["New", "Won", "Open"]
    assert stamps(now) == stamps(rows)
    assert [r["fields"]["Stage"] for r in now] == ["New", "Won", None, "Won"]
    with server.client() as client:
        lost = client.patch(f"/tables/{table}/rows/{rows[0]['id']}", json={"fields": {"Stage": "Lost"}})
        assert lost.status_code == 400 and lost.json()["error"]["field"] == "Stage"


def test_a_choice_takes_its_options_the_same_way_in_every_command(server: RunningServer) -> None:
    """OPTIONS follow the type (add-column, retype-column) or the column (set-options)."""
    table, _ = live(server)
    for args in (["add-column", "Deals", "Size", "choice", "S", "M", "L"],
                 ["retype-column", "Deals", "Code", "choice", "a", "b"],
                 ["set-options", "Deals", "Size", "S", "M", "L", "XL"]):
        result = CliRunner().invoke(main, ["server", "alter-table", args[0], "--db", str(server.db_path), *args[1:]])
        assert result.exit_code == 0, result.output
    columns = {c["name"]: c for c in read(server, table)[0]["columns"]}
    assert (columns["Size"]["type"], columns["Size"]["options"]) == ("choice", ["S", "M", "L", "XL"])
    assert (columns["Code"]["type"], columns["Code"]["options"]) == ("choice", ["a", "b"])


# -- refusals: a clear error, exit 2, nothing changed ----------------------------------------

REFUSED: list[tuple[list[str], str]] = [
    (["add-column", "Deals", "Owner", "text", "--required"], "row row_"),
    (["add-column", "Deals", "Code", "number"], "has a column 'Code' already"),
    (["add-column", "Deals", "Size", "decimal"], "type 'decimal' is not one of"),
    (["add-column", "Deals", "Size", "number", "S"], "only choice columns take"),
    (["add-column", "Deals", "Kind", "choice"], "needs `options`"),
    (["add-column", "Nope", "Size", "number"], "no table with id or name 'Nope'"),
    (["rename-column", "Deals", "Code", "Stage"], "has a column 'Stage' already"),
    (["rename-column", "Deals", "Cod", "Ref"], "has no column 'Cod'"),
    (["rename-column", "Deals", "Code", 'Re"f'], "quotes"),
    (["rename-column", "Deals", "Code", "Re\u202ef"], "control character (U+202E"),
    (["add-column", "Deals", "\u2067Size", "number"], "control character (U+2067"),
    (["retype-column", "Deals", "Name", "number"], "column 'Name' is required, and 'a' does not convert"),
    (["retype-column", "Deals", "Code", "money"], "type 'money' is not one of"),
    (["retype-column", "Deals", "Amount", "number"], "is number already"),
    (["retype-column", "Deals", "Ghost", "text"], "has no column 'Ghost'"),
    (["drop-column", "Deals", "Ghost"], "has no column 'Ghost'"),
    (["set-options", "Deals", "Code", "x"], "not a choice"),
    (["set-options", "Deals", "Stage", "New", "New"], "distinct"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_a_refused_change_exits_2_and_changes_nothing(server: RunningServer, args: list[str], message: str) -> None:
    table, _ = live(server)
    before = read(server, table)
    command, *rest = args
    result = CliRunner().invoke(main, ["server", "alter-table", command, "--db", str(server.db_path), *rest])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert read(server, table) == before


def test_a_required_column_left_empty_names_the_row(server: RunningServer) -> None:
    table = server.create_table({"name": "T", "columns": [{"name": "Qty", "type": "text", "required": True},
                                                         {"name": "Note", "type": "text"}]})
    rows = server.insert_rows(table, [{"Qty": "1"}, {"Qty": "two"}])
    before = read(server, table)
    with pytest.raises(SpecError, match=f"row {rows[1]['id']}: column 'Qty' is required, and 'two' does not convert"):
        server.retype_column(table, "Qty", "number")
    assert read(server, table) == before
    one = server.create_table({"name": "One", "columns": [{"name": "Only", "type": "text"}]})
    with pytest.raises(SpecError, match="only column"):
        server.drop_column(one, "Only")


def test_every_alter_command_has_help_and_exit_codes() -> None:
    for command in ("add-column", "rename-column", "retype-column", "drop-column", "set-options"):
        shown = CliRunner().invoke(main, ["server", "alter-table", command, "--help"])
        assert shown.exit_code == 0 and "Exit codes:" in shown.output, command
    rules = CliRunner().invoke(main, ["server", "alter-table", "--help"], terminal_width=120).output
    assert "keeps its id when renamed" in rules and "updated_at" in rules and "becomes empty" in rules


def test_alter_table_needs_an_existing_database(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["server", "alter-table", "drop-column", "--db", str(tmp_path / "no.db"), "T", "C"])
    assert result.exit_code == 2 and "no database" in result.output
    assert not (tmp_path / "no.db").exists()


# -- a write racing a change -------------------------------------------------------------------


def test_a_write_checked_against_old_columns_is_checked_again(server: RunningServer) -> None:
    """A request reads the schema, then writes: a change committed in between (another
    process) must not let it store cells under a name that no longer exists."""
    table_id = server.create_table(PEOPLE)
    with contextlib.closing(Storage(str(server.db_path))) as storage:
        stale = storage.table(table_id)
        assert stale is not None
        row = storage.insert_rows(stale, [stale.check_create({"Name": "a", "Age": 1})])[0]
        server.rename_column(table_id, "Age", "Years")
        with pytest.raises(ApiProblem) as refused:
            storage.insert_rows(stale, [stale.check_create({"Name": "b", "Age": 2})])
        assert (refused.value.status, refused.value.field) == (400, "Age")
        with pytest.raises(ApiProblem) as refused:
            storage.update_row(stale, row["id"], stale.check_update({"Age": 5}))
        assert refused.value.field == "Age"
        kept = storage.update_row(stale, row["id"], stale.check_update({"Name": "a2"}))
        assert kept["fields"] == {"Name": "a2", "Status": None, "Years": 1, "Member": None, "Joined": None}
    _, rows = read(server, table_id)
    assert [r["fields"] for r in rows] == [kept["fields"]]


def test_the_running_server_sees_a_cli_change_at_once(server: RunningServer) -> None:
    table, _ = live(server)
    result = CliRunner().invoke(main, ["server", "alter-table", "retype-column", "--db", str(server.db_path),
                                       table, "Code", "number"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"Deals ({table}): retyped column 'Code' from text to number; " \
                                    "1 cell(s) that did not convert are empty now"
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.api_key}"}) as client:
        assert client.get(f"/tables/{table}").json()["columns"][1]["type"] == "number"
        refused = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "e", "Code": "12"}})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "Code"

