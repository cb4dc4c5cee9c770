"""A live table's columns change (added, renamed, retyped, dropped, options changed) and the
next incremental sync evolves every destination to match, value by value with the server.

The reference server changes the table itself (`connector server alter-table` through the
fixture): no row's ``updated_at`` moves, so only a sync that notices the schema change
brings the new values. Each destination is read back with its own library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.fixtures.server import ROOT
from tests.jobs.conftest import Workspace, sql_rows

INCREMENTAL = "[sync]\nincremental = true\n"
PEOPLE_ONLY = '[tables]\ninclude = ["People"]\n'


def destinations(postgres_db: str) -> str:
    return (
        '[[destination]]\nurl = "sqlite:///wh.db"\n'
        f'[[destination]]\nurl = "{postgres_db}"\n'
        '[[destination]]\nurl = "duckdb:///wh.duckdb"\n'
        '[[destination]]\nparquet = "pq"\n'
        '[[destination]]\ndelta = "lake"\n'
    )


def upstream(ws: Workspace) -> dict[str, dict[str, Any]]:
    """People as the API serves it: name -> cells (missing cells as None)."""
    schema = ws.api("GET", f"/tables/{ws.people}")
    columns = [c["name"] for c in schema["columns"]]
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    return {r["fields"]["Name"]: {c: r["fields"].get(c) for c in columns} for r in rows}


def held(ws: Workspace, tmp_path: Path, postgres_db: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Each destination's People rows (user columns only), name -> cells."""
    def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {r["Name"]: {k: v for k, v in r.items() if not k.startswith("_")} for r in rows}

    out = {
        "sqlite": by_name(sql_rows(f"sqlite:///{tmp_path / 'wh.db'}")),
        "postgresql": by_name(sql_rows(postgres_db)),
        "parquet": by_name(pq.read_table(tmp_path / "pq" / "People.parquet").to_pylist()),
        "delta": by_name(DeltaTable(str(tmp_path / "lake" / "People")).to_pyarrow_table().to_pylist()),
    }
    with duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True) as con:
        cursor = con.execute('SELECT * FROM "People"')
        names = [d[0] for d in cursor.description]
        out["duckdb"] = by_name([dict(zip(names, r, strict=True)) for r in cursor.fetchall()])
    return out


def api_value(value: Any) -> Any:
    """A destination's value as the API writes it (dates ISO, numbers as floats)."""
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def assert_same(ws: Workspace, tmp_path: Path, postgres_db: str) -> None:
    want = upstream(ws)
    for kind, rows in held(ws, tmp_path, postgres_db).items():
        got = {n: {k: api_value(v) for k, v in cells.items()} for n, cells in rows.items()}
        assert got == want, kind


def column_types(tmp_path: Path, postgres_db: str, column: str) -> dict[str, str]:
    """The column's type as each database states it."""
    import sqlite3

    with sqlite3.connect(tmp_path / "wh.db") as db:
        sqlite_type = next(r[2] for r in db.execute('PRAGMA table_info("People")') if r[1] == column)
    with psycopg.connect(postgres_db.replace("+psycopg", "")) as conn:
        pg_type = conn.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'People' "
            "AND column_name = %s", (column,)
        ).fetchone()
    with duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True) as con:
        duck_type = {r[0]: r[1] for r in con.execute('DESCRIBE "People"').fetchall()}[column]
    parquet = pq.read_schema(tmp_path / "pq" / "People.parquet").field(column).type
    delta = pa.schema(DeltaTable(str(tmp_path / "lake" / "People")).schema().to_arrow())
    delta_type = delta.field(column).type
    return {"sqlite": sqlite_type, "postgresql": pg_type[0] if pg_type else "",
            "duckdb": duck_type, "parquet": str(parquet), "delta": str(delta_type)}


def run_ok(ws: Workspace, job: Path) -> Any:
    summary = ws.run(job)
    assert summary.status == "ok", (summary.error, [t.error for t in summary.tables])
    return summary


def set_score(ws: Workspace, name: str, value: Any) -> None:
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    (row,) = [r for r in rows if r["fields"]["Name"] == name]
    ws.api("PATCH", f"/tables/{ws.people}/rows/{row['id']}", json={"fields": {"Score": value}})


def test_a_number_column_retyped_to_text_evolves_every_destination(
    workspace: Workspace, tmp_path: Path, postgres_db: str
) -> None:
    """The issue's case: after a number column became text and a row got a value that is
    not a number, every following sync failed (DuckDB) or kept numeric affinity (SQLite)."""
    job = workspace.job(INCREMENTAL + PEOPLE_ONLY + destinations(postgres_db))
    run_ok(workspace, job)
    workspace.server.retype_column(workspace.people, "Score", "text")
    set_score(workspace, "P003", "about 0.5")
    set_score(workspace, "P004", "0.5")

    changed = run_ok(workspace, job)

    (table,) = changed.tables
    assert table.schema_changes == ("Score: number -> text",)
    assert table.read == "full"  # the values of every row, not only those updated
    assert_same(workspace, tmp_path, postgres_db)
    types = column_types(tmp_path, postgres_db, "Score")
    assert types == {"sqlite": "TEXT", "postgresql": "text", "duckdb": "VARCHAR",
                     "parquet": "string", "delta": "string"}
    again = run_ok(workspace, job)
    assert [t.status for t in again.tables] == ["unchanged"]


@pytest.mark.parametrize("change", ["add", "rename", "drop", "options", "retype-choice"])
def test_each_column_change_reaches_every_destination(
    workspace: Workspace, tmp_path: Path, postgres_db: str, change: str
) -> None:
    job = workspace.job(INCREMENTAL + PEOPLE_ONLY + destinations(postgres_db))
    run_ok(workspace, job)
    server, people = workspace.server, workspace.people
    if change == "add":
        server.add_column(people, "Notes", "text")
        rows = workspace.api("GET", f"/tables/{people}/rows", params={"limit": 1})["rows"]
        # a value in one row, set without moving the others' stamps
        workspace.api("PATCH", f"/tables/{people}/rows/{rows[0]['id']}", json={"fields": {"Notes": "n"}})
        expected = ("Notes: added (text)",)
    elif change == "rename":
        server.rename_column(people, "Score", "Points")
        expected = ("Score: renamed to Points",)
    elif change == "drop":
        server.drop_column(people, "Joined")
        expected = ("Joined: dropped",)
    elif change == "options":
        server.set_options(people, "Team", ["Red", "Green"])
        expected = ("Team: options changed (+Green, -Blue)",)
    else:
        server.retype_column(people, "Team", "text")
        expected = ("Team: choice -> text",)

    evolved = run_ok(workspace, job)

    assert evolved.tables[0].schema_changes == expected
    assert_same(workspace, tmp_path, postgres_db)


def test_freeze_stops_that_table_names_the_change_and_the_others_go_on(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(
        INCREMENTAL + 'schema = "freeze"\n[[destination]]\nparquet = "pq"\n'
    )
    run_ok(workspace, job)
    before = pq.read_table(tmp_path / "pq" / "People.parquet")
    workspace.server.retype_column(workspace.people, "Score", "text")
    workspace.api("POST", f"/tables/{workspace.notes}/rows", json={"fields": {"Text": "more"}})

    done = subprocess.run(
        [sys.executable, "-m", "connector", "sync", str(job), "--log-format", "json"],
        cwd=ROOT, env={**os.environ, **workspace.environ},
        capture_output=True, text=True, timeout=120,
    )

    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stdout)
    tables = {t["table"]: t for t in summary["tables"]}
    assert tables["People"]["status"] == "frozen"
    assert "Score: number -> text" in tables["People"]["error"]
    assert tables["Notes"]["status"] == "ok" and tables["Notes"]["rows_written"] == 1
    assert pq.read_table(tmp_path / "pq" / "People.parquet").equals(before)
    # --schema evolve takes the change on the next run
    taken = subprocess.run(
        [sys.executable, "-m", "connector", "sync", str(job), "--schema", "evolve"],
        cwd=ROOT, env={**os.environ, **workspace.environ},
        capture_output=True, text=True, timeout=120,
    )
    assert taken.returncode == 0, taken.stderr
    assert "Score: number -> text" in taken.stderr
    assert pq.read_schema(tmp_path / "pq" / "People.parquet").field("Score").type == "string"
