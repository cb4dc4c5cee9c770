"""Value types through the commands and job files: `--type`, ``[tables.types]``, a number
no type can hold stopping only its own table, and a changed type retyping every destination.

Destinations are read back with their own libraries (pyarrow, sqlite3, the csv module).
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.errors import ConfigError
from connector.jobs.config import load_job
from tests.fixtures.server import RunningServer
from tests.jobs.conftest import Workspace, sql_rows

BIG = 2**53 + 1
ORDERS = {"name": "Orders", "columns": [
    {"name": "Ref", "type": "text"}, {"name": "OrderNo", "type": "number"},
    {"name": "Note", "type": "text"},
]}


@pytest.fixture
def orders(server: RunningServer) -> RunningServer:
    orders_id = server.create_table(ORDERS)
    server.insert_rows(orders_id, [
        {"Ref": "a", "OrderNo": BIG, "Note": ""}, {"Ref": "b", "OrderNo": -(2**63)},
        {"Ref": "c", "OrderNo": 2**63 - 1, "Note": "x"},
    ])
    notes = server.create_table({"name": "Notes", "columns": [{"name": "Text", "type": "text"}]})
    server.insert_rows(notes, [{"Text": "hello"}])
    return server


def run(server: RunningServer, *args: str) -> Result:
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, list(args), env=env)


def test_a_number_float64_cannot_hold_fails_its_table_and_the_others_are_exported(
    orders: RunningServer, tmp_path: Path
) -> None:
    result = run(orders, "export", "--out", str(tmp_path), "--json")
    assert result.exit_code == 1, result.output
    tables = {t["table"]: t for t in json.loads(result.stdout)["tables"]}
    assert tables["Notes"]["status"] == "ok"
    assert tables["Orders"]["status"] == "failed"
    assert "column 'OrderNo', row row_" in tables["Orders"]["error"]
    assert f": {BIG} cannot be held exactly" in tables["Orders"]["error"]
    assert "--type Orders:OrderNo=int64" in tables["Orders"]["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # nothing half-written
        "Notes.parquet", "_connector_tables.json"]


def test_export_with_a_type_holds_every_integer_exactly_in_parquet_and_csv(
    orders: RunningServer, tmp_path: Path
) -> None:
    result = run(orders, "export", "--out", str(tmp_path / "pq"), "--type", "Orders:OrderNo=int64")
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "pq" / "Orders.parquet")
    assert table.schema.field("OrderNo").type == pa.int64()
    assert {r["Ref"]: (r["OrderNo"], r["Note"]) for r in table.to_pylist()} == {
        "a": (BIG, ""), "b": (-(2**63), None), "c": (2**63 - 1, "x")}

    result = run(orders, "export", "--out", str(tmp_path / "csv"), "--format", "csv",
                 "--type", "orders:OrderNo=text")  # the table as the resolver finds it
    assert result.exit_code == 0, result.output
    with (tmp_path / "csv" / "Orders.csv").open(newline="") as file:
        rows = {r["Ref"]: r["OrderNo"] for r in csv.DictReader(file)}
    assert rows == {"a": str(BIG), "b": str(-(2**63)), "c": str(2**63 - 1)}


def test_load_with_a_type_makes_an_integer_column(orders: RunningServer, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    result = run(orders, "load", "--to", url, "--table", "Orders", "--type", "Orders:OrderNo=int64")
    assert result.exit_code == 0, result.output
    assert {r["Ref"]: r["OrderNo"] for r in sql_rows(url, "Orders")} == {
        "a": BIG, "b": -(2**63), "c": 2**63 - 1}
    with sqlite3.connect(tmp_path / "w.db") as db:
        declared = {r[1]: r[2] for r in db.execute('PRAGMA table_info("Orders")')}
        assert declared["OrderNo"] == "BIGINT"
        assert {r[0] for r in db.execute('SELECT typeof("OrderNo") FROM "Orders"')} == {"integer"}
    before = sql_rows(url, "Orders")
    result = run(orders, "load", "--to", url, "--table", "Orders",
                 "--type", "Orders:OrderNo=decimal(20,0)")
    assert result.exit_code == 1  # that table failed before any write
    assert "--type Orders:OrderNo=decimal(20,0): column 'OrderNo' is decimal(20,0), and it " \
        "holds no exact decimal" in " ".join(result.output.split())
    assert sql_rows(url, "Orders") == before


@pytest.mark.parametrize(("option", "message"), [
    ("Orders:OrderNo=int32", "'int32' is not a value type"),
    ("OrderNo=int64", "is not TABLE:COLUMN=TYPE"),
    ("Orders:Note=int64", "--type Orders:Note=int64: column 'Note' of table 'Orders' is text; "
                          "only number columns take a value type"),
    ("Orders:Nope=int64", "--type Orders:Nope=int64: table 'Orders' has no column 'Nope'"),
    ("Nope:OrderNo=int64", "--type Nope:OrderNo=int64: no table named 'Nope'"),
    ("Notes:Text=text", "column 'Text' of table 'Notes' is text"),
])
def test_a_bad_type_option_is_a_usage_error_naming_it_before_anything_is_written(
    orders: RunningServer, tmp_path: Path, option: str, message: str
) -> None:
    result = run(orders, "export", "--out", str(tmp_path / "out"), "--type", option)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_type_for_a_table_the_run_leaves_out_is_refused(orders: RunningServer, tmp_path: Path) -> None:
    result = run(orders, "export", "--out", str(tmp_path), "--table", "Notes",
                 "--type", "Orders:OrderNo=int64")
    assert result.exit_code == 2
    assert "--type Orders:OrderNo=int64: types a table the run does not read" in result.output


# --- job files ---------------------------------------------------------------------------------


def job_file(tmp_path: Path, tables: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text('[source]\napi_key_env = "K"\n' + tables +
                    '[[destination]]\nurl = "sqlite:///w.db"\nmode = "merge"\n')
    return path


@pytest.mark.parametrize(("tables", "message"), [
    ('[tables.types.Orders]\nOrderNo = "int"\n', "tables.types.Orders.OrderNo: 'int' is not a value type"),
    ('[tables.types.Orders]\nOrderNo = 64\n', 'tables.types.Orders.OrderNo: must be a value type like "int64"'),
    ('[tables]\ninclude = ["Notes"]\n[tables.types.Orders]\nOrderNo = "int64"\n',
     "tables.types.Orders: types a table that tables.include leaves out"),
    ('[tables.types]\nOrders = "int64"\n', "tables.types.Orders: must be a table"),
    ('[tables.types."My Orders"]\n"Order No" = "decimal(39,2)"\n',
     'tables.types."My Orders"."Order No": \'decimal(39,2)\': a decimal\'s precision is 1 to 38'),
])
def test_a_bad_types_table_in_a_job_file_names_its_key(
    tmp_path: Path, tables: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_job(job_file(tmp_path, tables))


def test_a_changed_type_retypes_every_destination_and_rereads_the_table(
    workspace: Workspace, tmp_path: Path
) -> None:
    body = ('[sync]\nincremental = true\nlookback = 0\n[tables]\ninclude = ["People"]\n{types}'
            '[[destination]]\nurl = "sqlite:///wh.db"\n[[destination]]\nparquet = "pq"\n')
    job = workspace.job(body.format(types=""))
    first = workspace.run(job)
    assert first.status == "ok", first.error
    rows = workspace.api("GET", f"/tables/{workspace.people}/rows", params={"limit": 1})["rows"]
    workspace.api("PATCH", f"/tables/{workspace.people}/rows/{rows[0]['id']}",
                  json={"fields": {"Score": BIG}})
    failed = workspace.run(job)  # float64 cannot hold it: the table stops, nothing changes
    assert [t.status for t in failed.tables] == ["failed"]
    assert f"{BIG} cannot be held exactly" in (failed.tables[0].error or "")

    job = workspace.job(body.format(types='[tables.types.People]\nScore = "int64"\n'))
    typed = workspace.run(job)
    (table,) = typed.tables
    assert table.status == "ok", table.error
    assert table.schema_changes == ("Score: number -> number (int64)",)
    assert table.read == "full"
    scores = {r["Name"]: r["Score"] for r in sql_rows(f"sqlite:///{tmp_path / 'wh.db'}")}
    assert scores == {f"P{i:03d}": BIG if f"P{i:03d}" == rows[0]["fields"]["Name"] else i
                      for i in range(10)}
    parquet = pq.read_table(tmp_path / "pq" / "People.parquet")
    assert parquet.schema.field("Score").type == pa.int64()
    assert {r["Name"]: r["Score"] for r in parquet.to_pylist()} == scores
    again = workspace.run(job)
    assert [t.status for t in again.tables] == ["unchanged"]

