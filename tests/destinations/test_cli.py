"""`connector export` and `connector load` end to end: reference server over HTTP -> files/SQL."""

from __future__ import annotations

import json
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import psycopg
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from connector.cli import main
from tests.destinations.samples import kill_when
from tests.fixtures.server import RunningServer, ServerFactory

SPEC = {
    "name": "orders",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["open", "on hold", "closed"]},
        {"name": "Amount", "type": "number"},
        {"name": "Paid", "type": "checkbox"},
        {"name": "Due", "type": "date"},
        {"name": "Order Date", "type": "text"},
    ],
}
FIELDS: list[dict[str, Any]] = [
    {"Name": "Ada", "Status": "open", "Amount": 12.5, "Paid": True, "Due": "2024-03-31",
     "Order Date": "March"},
    {"Name": 'quote " comma , newline \n', "Status": "on hold", "Amount": -3, "Paid": False,
     "Due": "1970-01-01", "Order Date": ""},
    {"Name": "Empty cells"},  # every optional cell null
]
#: What each row reads back as, by Name: (Status, Amount, Paid, Due, Order Date).
EXPECTED = {
    "Ada": ("open", 12.5, True, date(2024, 3, 31), "March"),
    # "" is text, not a missing cell: the API serves it, every destination keeps it
    'quote " comma , newline \n': ("on hold", -3.0, False, date(1970, 1, 1), ""),
    "Empty cells": (None, None, None, None, None),
}


@pytest.fixture
def orders(server: RunningServer) -> tuple[RunningServer, str, list[dict[str, Any]]]:
    table_id = server.create_table(SPEC)
    return server, table_id, server.insert_rows(table_id, FIELDS)


def run(server: RunningServer, *args: str, key: str | None = None) -> Result:
    env = {"CONNECTOR_API_KEY": key or server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, list(args), env=env)


def cells(frame: pd.DataFrame) -> dict[str, tuple[Any, ...]]:
    columns = ["Status", "Amount", "Paid", "Due", "Order Date"]
    return {
        row["Name"]: tuple(None if pd.isna(row[c]) else row[c] for c in columns)
        for row in frame.to_dict("records")
    }


def test_export_to_parquet_keeps_every_type(orders: tuple[RunningServer, str, Any], tmp_path: Path) -> None:
    server, table_id, rows = orders
    result = run(server, "export", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "1 of 1 tables exported: 3 rows read, 3 written, 0 deleted" in result.output
    path = tmp_path / "orders.parquet"

    frame = pd.read_parquet(path)
    assert {c: str(t) for c, t in frame.dtypes.items()} == {
        "_id": "string", "_created_at": "datetime64[us, UTC]", "_updated_at": "datetime64[us, UTC]",
        "Name": "string", "Status": "category", "Amount": "Float64", "Paid": "boolean",
        "Due": "date32[day][pyarrow]", "Order Date": "string",
    }
    assert list(frame["Status"].cat.categories) == ["open", "on hold", "closed"]
    assert cells(frame) == EXPECTED
    assert sorted(frame["_id"]) == sorted(r["id"] for r in rows)
    created = {r["id"]: datetime.fromisoformat(r["created_at"]) for r in rows}
    assert {i: t.to_pydatetime() for i, t in zip(frame["_id"], frame["_created_at"], strict=True)} == created

    meta = pq.read_schema(path).metadata
    assert meta[b"connector.table_id"].decode() == table_id
    assert meta[b"connector.table_name"] == b"orders"
    types = duckdb.sql(f"SELECT Status, Amount, Paid, Due, _created_at FROM '{path}'").types
    assert list(map(str, types)) == ["VARCHAR", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMP WITH TIME ZONE"]


def test_export_csv_of_chosen_tables_with_a_json_summary(
    orders: tuple[RunningServer, str, Any], tmp_path: Path
) -> None:
    server, table_id, _ = orders
    server.create_table({"name": "other", "columns": [{"name": "x", "type": "text"}]})
    result = run(server, "export", "--out", str(tmp_path), "--format", "csv", "--table", table_id,
                 "--json", "--page-size", "2")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # the shape `connector sync --log-format json` prints
    totals = summary["totals"]
    assert (totals["rows_written"], totals["ok"], totals["skipped"], totals["failed"]) == (3, 1, 0, 0)
    assert (summary["job"], summary["status"], summary["exit_code"], summary["state_file"]) == (
        "export", "ok", 0, None)
    assert [(t["table"], t["status"], t["read"], t["rows_written"]) for t in summary["tables"]] == [
        ("orders", "ok", "full", 3)]
    assert summary["tables"][0]["targets"] == [str(tmp_path / "orders.csv")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_connector_tables.json", "orders.csv"]
    frame = pd.read_csv(tmp_path / "orders.csv", keep_default_na=False, na_values={"Amount": [""]})
    assert len(frame) == 3 and set(frame["Name"]) == set(EXPECTED)


@pytest.mark.parametrize("warehouse", ["sqlite", "postgresql"])
def test_load_to_sql_keeps_every_type(
    orders: tuple[RunningServer, str, Any], warehouse: str, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    server, _, rows = orders
    url = (f"sqlite:///{tmp_path / 'w.db'}" if warehouse == "sqlite"
           else str(request.getfixturevalue("postgres_db")))
    result = run(server, "load", "--to", url)
    assert result.exit_code == 0, result.output
    engine = sa.create_engine(url)
    try:
        table = sa.Table("orders", sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            got = conn.execute(sa.select(table)).mappings().all()
    finally:
        engine.dispose()
    assert isinstance(table.c["Amount"].type, sa.Float)
    assert isinstance(table.c["Paid"].type, sa.Boolean)
    assert isinstance(table.c["Due"].type, sa.Date)
    assert isinstance(table.c["_created_at"].type, sa.DateTime)
    assert {r["Name"]: (r["Status"], r["Amount"], r["Paid"], r["Due"], r["Order Date"])
            for r in got} == EXPECTED
    assert sorted(r["_id"] for r in got) == sorted(r["id"] for r in rows)


def test_load_merge_applies_upstream_changes(
    orders: tuple[RunningServer, str, Any], tmp_path: Path
) -> None:
    server, table_id, rows = orders
    url = f"sqlite:///{tmp_path / 'w.db'}"
    assert run(server, "load", "--to", url).exit_code == 0
    with server.client() as http:
        http.patch(f"/tables/{table_id}/rows/{rows[0]['id']}", json={"fields": {"Amount": 99}}).raise_for_status()
    server.insert_rows(table_id, [{"Name": "Newcomer"}])
    result = run(server, "load", "--to", url, "--mode", "merge")
    assert result.exit_code == 0, result.output
    with sa.create_engine(url).connect() as conn:
        got = dict(conn.exec_driver_sql('SELECT "Name", "Amount" FROM orders').fetchall())
    assert got == {"Ada": 99.0, 'quote " comma , newline \n': -3.0, "Empty cells": None,
                   "Newcomer": None}


def test_load_append_run_again_adds_only_new_rows(
    orders: tuple[RunningServer, str, Any], tmp_path: Path
) -> None:
    server, table_id, rows = orders
    url = f"sqlite:///{tmp_path / 'w.db'}"
    assert run(server, "load", "--to", url, "--mode", "append").exit_code == 0
    with server.client() as http:
        http.patch(f"/tables/{table_id}/rows/{rows[0]['id']}", json={"fields": {"Amount": 99}}).raise_for_status()
    server.insert_rows(table_id, [{"Name": "Newcomer"}])
    result = run(server, "load", "--to", url, "--mode", "append")
    assert result.exit_code == 0, result.output
    with sa.create_engine(url).connect() as conn:
        got = conn.exec_driver_sql('SELECT "Name", "Amount" FROM orders').fetchall()
    # the held rows are left as they were (Ada keeps 12.5); only the new id is added
    assert sorted(got, key=lambda r: r[0]) == sorted(
        [("Ada", 12.5), ('quote " comma , newline \n', -3.0), ("Empty cells", None),
         ("Newcomer", None)], key=lambda r: r[0])


def test_a_table_the_key_may_not_read_is_skipped_with_exit_3(
    orders: tuple[RunningServer, str, Any], tmp_path: Path
) -> None:
    server, orders_id, _ = orders
    secret_id = server.create_table({"name": "secret", "columns": [{"name": "x", "type": "text"}]})
    scoped = server.create_key(read_only=True, tables=[orders_id])
    result = run(server, "export", "--out", str(tmp_path), "--table", "orders",
                 "--table", secret_id, "--json", key=scoped)
    assert result.exit_code == 3, result.output
    summary = json.loads(result.stdout)
    assert [(t["table_id"], t["status"]) for t in summary["tables"]] == [
        (secret_id, "skipped"), (orders_id, "ok")]
    assert "403" in summary["tables"][0]["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_connector_tables.json", "orders.parquet"]
    assert scoped not in result.output


def test_a_table_that_fails_is_reported_and_the_others_still_load_with_exit_1(
    orders: tuple[RunningServer, str, Any], tmp_path: Path
) -> None:
    server, _, _ = orders
    server.create_table({"name": "other", "columns": [{"name": "x", "type": "text"}]})
    url = f"sqlite:///{tmp_path / 'w.db'}"
    with sa.create_engine(url).begin() as conn:  # `_id` without a key: merge cannot upsert
        conn.exec_driver_sql('CREATE TABLE orders ("_id" text)')
    result = run(server, "load", "--to", url, "--mode", "merge", "--json")
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert sorted((t["table"], t["status"]) for t in summary["tables"]) == [
        ("orders", "failed"), ("other", "ok")]
    failed = next(t for t in summary["tables"] if t["status"] == "failed")
    assert "'orders'" in failed["error"] and "ON CONFLICT" in failed["error"]


def test_a_bad_key_fails_with_exit_2_without_showing_the_key(
    orders: tuple[RunningServer, str, Any], tmp_path: Path
) -> None:
    server, _, _ = orders
    result = run(server, "export", "--out", str(tmp_path), key="wrong-key-123456")
    assert result.exit_code == 2  # a key the server refuses is the user's to fix
    assert "401" in result.output
    assert "wrong-key-123456" not in result.output
    assert "Traceback" not in result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args",
    [
        ["export", "--out", "{tmp}", "--table", "no such table"],
        ["load", "--to", "nosuchdb://user:secret-pw@host/db"],
        ["export", "--out", "{tmp}", "--page-size", "5000"],
        ["load", "--to", "sqlite:///{tmp}/w.db", "--mode", "upsert"],
    ],
)
def test_usage_and_configuration_errors_exit_2(
    orders: tuple[RunningServer, str, Any], tmp_path: Path, args: list[str]
) -> None:
    server, _, _ = orders
    result = run(server, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.exit_code == 2, result.output
    assert "secret-pw" not in result.output
    assert not any(tmp_path.iterdir())


def test_an_unreachable_database_fails_before_reading_the_api(
    orders: tuple[RunningServer, str, Any],
) -> None:
    server, _, _ = orders
    result = run(server, "load", "--to", "postgresql://nobody:pw-xyz@127.0.0.1:1/db")
    assert result.exit_code == 1
    assert "connecting" in result.output and "pw-xyz" not in result.output


def test_export_through_500s_and_latency_equals_a_clean_export(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = server_factory(seed=7)
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"n{i}", "Amount": i, "Status": "open"} for i in range(600)])
    assert run(server, "export", "--out", str(tmp_path / "clean")).exit_code == 0
    # 429s are covered by the extraction tests; their Retry-After waits would make this slow
    server.options.update(fail_rate=0.15, latency_ms=5)
    server.restart()
    result = run(server, "export", "--out", str(tmp_path / "faulty"), "--page-size", "40")
    assert result.exit_code == 0, result.output
    clean = pq.read_table(tmp_path / "clean" / "orders.parquet")
    faulty = pq.read_table(tmp_path / "faulty" / "orders.parquet")
    assert faulty.num_rows == 600
    assert faulty.equals(clean)


def cli(server: RunningServer, *args: str) -> list[str]:
    return [sys.executable, "-m", "connector", *args, "--base-url", server.base_url]


@pytest.fixture
def slow_orders(server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> RunningServer:
    """A server whose every request takes 100 ms, with 4,000 rows: a read of a few seconds."""
    server = server_factory(latency_ms=100)
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"n{i}", "Amount": i} for i in range(4000)])
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    return server


def test_killed_export_keeps_the_previous_file_and_a_rerun_works(
    slow_orders: RunningServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    previous = out / "orders.parquet"
    previous.write_bytes(b"the previous export")
    kill_when(cli(slow_orders, "export", "--out", str(out)),
              lambda: any(p.name.endswith(".partial") for p in out.iterdir()))
    assert previous.read_bytes() == b"the previous export"
    assert run(slow_orders, "export", "--out", str(out), "--page-size", "1000").exit_code == 0
    assert pq.read_table(previous).num_rows == 4000


def test_killed_load_keeps_the_previous_table_and_a_rerun_works(
    slow_orders: RunningServer, postgres_db: str
) -> None:
    engine = sa.create_engine(postgres_db)
    with engine.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE orders ("Name" text)')
        conn.exec_driver_sql("INSERT INTO orders VALUES ('previous')")
    dsn = sa.make_url(postgres_db).set(drivername="postgresql").render_as_string(hide_password=False)

    def copying() -> bool:  # the load is inside its COPY: mid-replace
        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY%' AND pid <> pg_backend_pid()"
            ).fetchone()
        return bool(found and found[0])

    kill_when(cli(slow_orders, "load", "--to", postgres_db), copying)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql('SELECT "Name" FROM orders').fetchall() == [("previous",)]
        assert run(slow_orders, "load", "--to", postgres_db, "--page-size", "1000").exit_code == 0
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM orders").scalar_one() == 4000
            tables = conn.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).scalars().all()
        assert sorted(tables) == ["_connector_tables", "orders"]  # its rows, and the names record
    finally:
        engine.dispose()



@pytest.mark.parametrize("page", [50, 1000])
def test_an_export_while_rows_are_deleted_and_inserted_misses_no_row_and_repeats_none(
    server_factory: ServerFactory, tmp_path: Path, page: int
) -> None:
    """The export reads through the one page reader: every row present throughout is there,
    once; no row deleted before the export began."""
    import sqlite3

    server = server_factory(fault_control=True, seed=11)
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"n{i}", "Amount": i} for i in range(3000)])

    def ids() -> set[str]:
        with sqlite3.connect(server.db_path) as db:
            return {r[0] for r in db.execute("SELECT id FROM rows WHERE table_id = ?", (table_id,))}

    before = ids()
    server.set_faults(delete_on_read=2, insert_on_read=1, max_page_size=page)
    result = run(server, "export", "--out", str(tmp_path), "--page-size", str(min(page, 100)))
    server.set_faults(delete_on_read=0, insert_on_read=0)
    after = ids()

    assert result.exit_code == 0, result.output
    assert before - after and after - before  # the faults landed
    exported = pq.read_table(tmp_path / "orders.parquet").column("_id").to_pylist()
    assert len(exported) == len(set(exported))
    assert not (before & after) - set(exported)


def test_max_concurrency_caps_the_requests_in_flight(orders: tuple[RunningServer, str, Any], tmp_path: Path) -> None:
    server, _, _ = orders
    for command in (["export", "--out", str(tmp_path / "out")], ["load", "--to", f"sqlite:///{tmp_path}/w.db"]):
        result = run(server, *command, "--max-concurrency", "3", "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert summary["max_concurrency"] == 3 and 1 <= summary["concurrency"] <= 3
    refused = run(server, "export", "--out", str(tmp_path / "x"), "--max-concurrency", "65")
    assert refused.exit_code == 2 and "--max-concurrency" in refused.output
    assert not (tmp_path / "x").exists()
