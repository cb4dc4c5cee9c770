"""The sync invariant, against a server that deletes and inserts rows while pages are read.

After any run a destination lacks no row that existed upstream throughout the run and holds
no row deleted before the run began; the next quiet run makes it equal to the server. For
every read kind of a sync: full, incremental (with its id pass), and the fallback for
servers refusing filters on system fields; server page sizes 50, 100 and 1000.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from connector.jobs.config import load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.results import RunSummary
from tests.jobs.conftest import MakeWorkspace, Workspace, person

ROWS = 2000
#: Rows deleted upstream between the first run and the disturbed one.
DELETED_BEFORE = 15
#: Rows created between the first run and the disturbed one: the change read spans pages.
CREATED_BEFORE = 600

Snapshot = dict[str, tuple[Any, ...]]


def server_rows(ws: Workspace) -> Snapshot:
    """Every People row as stored, read from the server's database (immune to its faults)."""
    with sqlite3.connect(ws.server.db_path) as db:
        found = db.execute(
            "SELECT id, updated_at, fields FROM rows WHERE table_id = ?", (ws.people,)
        ).fetchall()
    out = {}
    for row_id, updated, fields in found:
        f = json.loads(fields)
        out[row_id] = _cells(
            updated, f.get("Name"), f.get("Team"), f.get("Score"), f.get("Active"), f.get("Joined")
        )
    return out


def _cells(updated: Any, *values: Any) -> tuple[Any, ...]:
    def norm(v: Any) -> Any:
        if isinstance(v, datetime):
            if v.tzinfo is not None:
                v = v.astimezone(UTC)
            return v.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
        if isinstance(v, date):
            return v.isoformat()
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        return v

    return (norm(updated), *map(norm, values))


def parquet_rows(directory: Path) -> Snapshot:
    data = pq.read_table(directory / "People.parquet").to_pylist()
    return {
        r["_id"]: _cells(r["_updated_at"], r["Name"], r["Team"], r["Score"], r["Active"], r["Joined"])
        for r in data
    }


def sql_rows(url: str) -> Snapshot:
    engine = sa.create_engine(url)
    try:
        people = sa.Table("People", sa.MetaData(), autoload_with=engine)  # typed values back
        names = ["_id", "_updated_at", "Name", "Team", "Score", "Active", "Joined"]
        with engine.connect() as conn:
            found = conn.execute(sa.select(*(people.c[n] for n in names))).all()
    finally:
        engine.dispose()
    return {r[0]: _cells(*r[1:]) for r in found}


def job_file(ws: Workspace, destinations: str, *, page_size: int) -> Path:
    path = ws.directory / "job.toml"
    path.write_text(
        textwrap.dedent(f"""\
            [source]
            api_key_env = "JOB_KEY"
            page_size = {page_size}
            concurrency = 4
            [tables]
            include = ["People"]
            [sync]
            incremental = true
            deletes = "delete"
            """)
        + destinations
    )
    return path


def run(ws: Workspace, job: Path) -> RunSummary:
    summary = run_job(load_job(job), RunOptions(environ=ws.environ))
    assert summary.status == "ok", summary
    return summary


@pytest.mark.parametrize(
    ("read", "page"),
    [
        ("incremental", 50),
        ("incremental", 100),
        ("incremental", 1000),
        ("fallback", 50),
        ("fallback", 1000),
        ("full", 100),
    ],
)
def test_a_sync_disturbed_by_deletes_and_inserts_keeps_the_invariant_then_converges(
    make_workspace: MakeWorkspace, tmp_path: Path, read: str, page: int
) -> None:
    ws = make_workspace(people=ROWS, fault_control=True, seed=3)
    sqlite_url = f"sqlite:///{tmp_path / 'wh.db'}"
    job = job_file(
        ws, f'[[destination]]\nurl = "{sqlite_url}"\n[[destination]]\nparquet = "pq"\n',
        page_size=min(page, 100),
    )
    run(ws, job)
    # Between runs: rows deleted (the next run must look for deletions) and rows created.
    gone = sorted(server_rows(ws))[:: ROWS // DELETED_BEFORE][:DELETED_BEFORE]
    ws.api("DELETE", f"/tables/{ws.people}/rows/bulk", json={"row_ids": gone})
    ws.server.insert_rows(ws.people, [person(ROWS + i, "Blue") for i in range(CREATED_BEFORE)])
    if read == "full":
        (tmp_path / "job.state.json").unlink()
    before = server_rows(ws)
    ws.server.set_faults(
        delete_on_read=2,
        insert_on_read=1,
        max_page_size=page,
        refuse_system_filters=read == "fallback",
    )

    disturbed = run(ws, job)

    ws.server.set_faults(delete_on_read=0, insert_on_read=0)
    after = server_rows(ws)
    # The faults landed: rows were deleted and created while this run read pages.
    assert before.keys() - after.keys() and after.keys() - before.keys()
    (people,) = disturbed.tables
    assert people.read == ("full" if read == "full" else "incremental")
    throughout = before.keys() & after.keys()
    for held in (sql_rows(sqlite_url), parquet_rows(tmp_path / "pq")):
        assert not throughout - held.keys(), "a row that existed throughout the run is missing"
        assert not held.keys() & set(gone), "a row deleted before the run is still held"

    run(ws, job)  # quiet

    expected = server_rows(ws)
    assert sql_rows(sqlite_url) == expected
    assert parquet_rows(tmp_path / "pq") == expected


def test_the_invariant_holds_for_postgresql_too(
    make_workspace: MakeWorkspace, tmp_path: Path, postgres_db: str
) -> None:
    ws = make_workspace(people=ROWS, fault_control=True, seed=5)
    job = job_file(ws, f'[[destination]]\nurl = "{postgres_db}"\n', page_size=100)
    run(ws, job)
    gone = sorted(server_rows(ws))[3:18]
    ws.api("DELETE", f"/tables/{ws.people}/rows/bulk", json={"row_ids": gone})
    ws.server.insert_rows(ws.people, [person(ROWS + i) for i in range(CREATED_BEFORE)])
    before = server_rows(ws)
    ws.server.set_faults(delete_on_read=3, insert_on_read=2, max_page_size=50)

    run(ws, job)

    ws.server.set_faults(delete_on_read=0, insert_on_read=0)
    after = server_rows(ws)
    assert before.keys() - after.keys() and after.keys() - before.keys()
    held = sql_rows(postgres_db)
    assert not (before.keys() & after.keys()) - held.keys()
    assert not held.keys() & set(gone)
    run(ws, job)
    assert sql_rows(postgres_db) == server_rows(ws)
