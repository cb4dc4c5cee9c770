"""Iceberg through the commands: ``export --format iceberg`` and job files with
``[[destination]] iceberg = "DIR"`` (a SQLite catalog in DIR, or ``catalog = `` the suite's
PostgreSQL), against the reference server over HTTP.

Every check reads the table back with pyiceberg's own catalog and scan and compares it with
the rows the server serves, value by value. Spark reads the same table's current data files
(see `test_spark_reads_the_current_data_files`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table as IcebergTable

from connector.errors import ExitCode
from tests.jobs.conftest import Workspace
from tests.jobs.test_sync import EXPECTED_AFTER_CHANGES, change_people, result

INCREMENTAL = "[sync]\nincremental = true\nlookback = 0\n"


@contextlib.contextmanager
def iceberg_table(folder: Path, name: str = "People", catalog: str | None = None) -> Iterator[IcebergTable]:
    """The table as pyiceberg itself opens it (the catalog is named ``connector``)."""
    uri = catalog or f"sqlite:///{folder / 'catalog.db'}"
    opened = SqlCatalog("connector", uri=uri, warehouse=str(folder))
    try:
        yield opened.load_table(("tabledata", name))
    finally:
        opened.close()


def held(folder: Path, name: str = "People", catalog: str | None = None) -> dict[str, dict[str, Any]]:
    """Every row (marked ones too) by row id, read by pyiceberg's scan."""
    with iceberg_table(folder, name, catalog) as table:
        rows = table.scan().to_arrow().to_pylist()
    out = {r["_id"]: r for r in rows}
    assert len(out) == len(rows)
    return out


def commits(folder: Path, name: str = "People", catalog: str | None = None) -> int:
    with iceberg_table(folder, name, catalog) as table:
        return len(table.metadata.metadata_log) + 1


def upstream(ws: Workspace, table_id: str) -> dict[str, dict[str, Any]]:
    """The table as the API serves it: row id -> system fields and every column's cell."""
    schema = ws.api("GET", f"/tables/{table_id}")
    columns = [c["name"] for c in schema["columns"]]
    rows = ws.api("GET", f"/tables/{table_id}/rows", params={"limit": 1000})["rows"]
    return {r["id"]: {"_created_at": r["created_at"], "_updated_at": r["updated_at"],
                      **{c: r["fields"].get(c) for c in columns}} for r in rows}


def as_api(value: Any) -> Any:
    """A value read from Iceberg as the API writes it."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return value.isoformat()
    return value


def api_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def assert_same_as_server(ws: Workspace, table_id: str, rows: dict[str, dict[str, Any]]) -> None:
    """`rows` (live ones) hold exactly the server's rows, value by value."""
    want = upstream(ws, table_id)
    live = {i: r for i, r in rows.items() if r.get("_deleted_at") is None}
    assert sorted(live) == sorted(want)
    for row_id, cells in want.items():
        got = live[row_id]
        for column, value in cells.items():
            if column in ("_created_at", "_updated_at"):
                assert got[column] == api_time(value), (row_id, column)
            else:
                assert as_api(got[column]) == value, (row_id, column)
        assert set(got) - set(cells) <= {"_id", "_deleted_at"}


def export(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    """``connector export`` in its own process, as a user runs it."""
    env = {**os.environ, "CONNECTOR_API_KEY": ws.server.api_key,
           "CONNECTOR_BASE_URL": ws.server.base_url}
    return subprocess.run([sys.executable, "-m", "connector", "export", *args],
                          capture_output=True, text=True, env=env, timeout=180)


def test_export_writes_every_table_as_the_server_serves_it(workspace: Workspace, tmp_path: Path) -> None:
    out = tmp_path / "lake"
    done = export(workspace, "--format", "iceberg", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"-> {out}/tabledata/People" in done.stdout + done.stderr
    assert_same_as_server(workspace, workspace.people, held(out))
    assert_same_as_server(workspace, workspace.notes, held(out, "Notes"))
    with iceberg_table(out) as table:
        types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types == {"_id": "string", "_created_at": "timestamptz", "_updated_at": "timestamptz",
                     "Name": "string", "Team": "string", "Score": "double",
                     "Active": "boolean", "Joined": "date"}

    change_people(workspace)
    again = export(workspace, "--format", "iceberg", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert_same_as_server(workspace, workspace.people, held(out))
    assert commits(out) == 2  # the replace: one commit
    with iceberg_table(out) as table:  # the first export is still there to travel back to
        first = table.history()[0].snapshot_id
        assert table.scan(snapshot_id=first).to_arrow().num_rows == 10


def test_incremental_sync_merges_marks_and_commits_once_a_run(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(INCREMENTAL + "deletes = 'mark'\n" + '[[destination]]\niceberg = "lake"\n')
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    lake = tmp_path / "lake"
    assert result(first, "People").targets == (f"{lake}/tabledata/People",)
    assert_same_as_server(workspace, workspace.people, held(lake))
    before = commits(lake)
    deleted = {r["Name"]: i for i, r in held(lake).items()}["P002"]
    change_people(workspace)

    second = workspace.run(job)

    people = result(second, "People")
    assert (people.status, people.read, people.rows_deleted) == ("ok", "incremental", 1)
    rows = held(lake)
    assert_same_as_server(workspace, workspace.people, rows)
    assert sorted(r["Name"] for r in rows.values() if r["_deleted_at"] is None) == EXPECTED_AFTER_CHANGES
    assert rows[deleted]["_deleted_at"] is not None and rows[deleted]["Name"] == "P002"
    assert commits(lake) == before + 1  # upserts and the mark: one commit
    third = workspace.run(job)
    assert {t.status for t in third.tables} == {"unchanged"}
    assert commits(lake) == before + 1


def test_a_postgresql_catalog_holds_the_tables(
    workspace: Workspace, tmp_path: Path, postgres_db: str
) -> None:
    job = workspace.job(
        INCREMENTAL + f'[[destination]]\niceberg = "lake"\ncatalog = "{postgres_db}"\n'
    )
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    lake = tmp_path / "lake"
    assert not (lake / "catalog.db").exists()
    assert_same_as_server(workspace, workspace.people, held(lake, catalog=postgres_db))
    change_people(workspace)
    second = workspace.run(job)
    assert result(second, "People").read == "incremental"
    rows = held(lake, catalog=postgres_db)
    assert_same_as_server(workspace, workspace.people, rows)
    assert sorted(r["Name"] for r in rows.values()) == EXPECTED_AFTER_CHANGES  # deleted, not marked


@pytest.mark.parametrize("change", ["rename", "retype", "drop", "add"])
def test_column_changes_evolve_the_table_value_by_value(
    workspace: Workspace, tmp_path: Path, change: str
) -> None:
    job = workspace.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n[[destination]]\niceberg = "lake"\n')
    assert workspace.run(job).status == "ok"
    # A quiet run: the next one answers from what it remembers (the change must still land).
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}
    lake = tmp_path / "lake"
    server, people = workspace.server, workspace.people
    with iceberg_table(lake) as table:
        ids = {f.name: f.field_id for f in table.schema().fields}
    if change == "rename":
        server.rename_column(people, "Score", "Points")
    elif change == "retype":
        server.retype_column(people, "Score", "text")
    elif change == "drop":
        server.drop_column(people, "Joined")
    else:
        server.add_column(people, "Notes", "text")

    summary = workspace.run(job)

    assert summary.status == "ok", (summary.error, [t.error for t in summary.tables])
    assert_same_as_server(workspace, people, held(lake))
    with iceberg_table(lake) as table:
        now = {f.name: (f.field_id, str(f.field_type)) for f in table.schema().fields}
    if change == "rename":  # renamed in place: the same Iceberg column
        assert now["Points"] == (ids["Score"], "double") and "Score" not in now
    elif change == "retype":
        assert now["Score"][1] == "string" and now["Score"][0] != ids["Score"]
    elif change == "drop":
        assert "Joined" not in now
    else:
        assert now["Notes"][1] == "string"
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}


def test_verify_repairs_an_iceberg_table(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(INCREMENTAL + '[[destination]]\niceberg = "lake"\n')
    workspace.run(job)
    lake = tmp_path / "lake"
    with iceberg_table(lake) as table:
        table.delete(EqualTo("Name", "P003"))

    summary = workspace.run(job, verify=True)

    people = result(summary, "People")
    assert people.verified is not None and people.verified.missing == 1
    assert_same_as_server(workspace, workspace.people, held(lake))


def test_a_catalog_password_in_a_job_file_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job('[[destination]]\niceberg = "lake"\ncatalog = "postgresql://u:hunter2@db/x"\n')
    done = subprocess.run(
        [sys.executable, "-m", "connector", "sync", str(job), "--log-format", "json"],
        capture_output=True, text=True, env={**os.environ, **workspace.environ}, timeout=120,
    )
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "destination[0].iceberg: catalog: holds a password" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "lake").exists()


SPARK_READ = """
import json, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[1]").appName("iceberg-files")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.sql.session.timeZone", "UTC")
         # a short-lived JVM starts in about half the time (as in tests/test_spark.py)
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .getOrCreate())
frame = spark.read.parquet(*json.loads(sys.argv[1]))
print(json.dumps([{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.asDict().items()}
                  for r in frame.collect()]))
spark.stop()
"""


def test_spark_reads_the_current_data_files(workspace: Workspace, tmp_path: Path) -> None:
    """Spark reads the files of the table's current snapshot (as pyiceberg lists them) and
    finds the server's rows. Spark's own Iceberg catalog is not tested: its runtime jar
    (iceberg-spark-runtime) comes from Maven Central, and no PyPI package ships one for
    Spark 4 (docs/commands.md says so)."""
    job = workspace.job('[tables]\ninclude = ["People"]\n[[destination]]\niceberg = "lake"\n')
    assert workspace.run(job).status == "ok"
    lake = tmp_path / "lake"
    with iceberg_table(lake) as table:
        files = [task.file.file_path for task in table.scan().plan_files()]
    assert files
    done = subprocess.run([sys.executable, "-c", SPARK_READ, json.dumps(files)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    got = {r["_id"]: r for r in rows}
    want = upstream(workspace, workspace.people)
    assert sorted(got) == sorted(want)
    for row_id, cells in want.items():
        for column, value in cells.items():
            if column in ("_created_at", "_updated_at"):
                assert api_time(got[row_id][column]) == api_time(value)
            else:
                assert got[row_id][column] == value, (row_id, column)
