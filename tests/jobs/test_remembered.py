"""What a sync remembers of a destination (`connector.destinations.remembered`): a quiet
run after a quiet run leaves an Iceberg catalog unopened, and nothing remembered outlives a
change there, ours or another writer's.

Every check reads the table back with pyiceberg's own catalog (SQLAlchemy for SQLite) and
compares it with the server, value by value.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from connector.jobs.config import load_job
from tests.jobs.conftest import Workspace, sql_rows
from tests.jobs.test_iceberg_jobs import assert_same_as_server, held, iceberg_table, upstream
from tests.jobs.test_sync import change_people, result

JOB = '[sync]\nincremental = true\ndeletes = "delete"\n[[destination]]\niceberg = "lake"\n'

#: `connector sync` in a process of its own, saying at exit whether pyiceberg's catalog was
#: imported (its package alone is, to tell a missing extra).
_SYNC_SAYING_IMPORTS = """
import atexit, runpy, sys
atexit.register(lambda: print("pyiceberg imported:", "pyiceberg.catalog" in sys.modules, file=sys.stderr))
sys.argv = ["connector", "sync", sys.argv[1]]
runpy.run_module("connector", run_name="__main__")
"""


def sync_saying_imports(ws: Workspace, job: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", _SYNC_SAYING_IMPORTS, str(job)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **ws.environ},
        cwd=job.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("pyiceberg imported:")]
    assert len(said) == 1, done.stderr[-2000:]
    return said[0].endswith("True")


def remembered(job: Path) -> list[Path]:
    """The indexes of what the job's runs remember, one a destination."""
    return sorted(load_job(job).memory_path.glob("*/index.json"))


def test_a_quiet_run_after_a_quiet_run_does_not_import_pyiceberg(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(JOB)
    assert workspace.run(job).status == "ok"
    assert sync_saying_imports(workspace, job)  # reads the catalog, keeps what it read
    assert remembered(job)

    index = remembered(job)[0]
    written = (index.stat().st_ino, index.stat().st_mtime_ns)
    assert not sync_saying_imports(workspace, job)
    assert not sync_saying_imports(workspace, job)
    assert (index.stat().st_ino, index.stat().st_mtime_ns) == written  # nothing new to keep

    kept = {p: p.read_bytes() for p in load_job(job).memory_path.rglob("*") if p.is_file()}
    assert workspace.run(job, dry_run=True).status == "ok"  # writes nothing, here neither
    assert {p: p.read_bytes() for p in load_job(job).memory_path.rglob("*") if p.is_file()} == kept
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}
    assert_same_as_server(workspace, workspace.people, held(tmp_path / "lake"))


def test_changes_upstream_after_quiet_runs_reach_the_table_value_by_value(
    workspace: Workspace, tmp_path: Path
) -> None:
    """The default lookback: every quiet run reads all rows again, and the remembered stamps
    say they are held as they are."""
    job = workspace.job(JOB)
    for _ in range(3):
        workspace.run(job)
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}
    change_people(workspace)  # one update, one delete, one create

    changed = workspace.run(job)

    people = result(changed, "People")
    assert (people.status, people.rows_deleted) == ("ok", 1), people.error
    assert_same_as_server(workspace, workspace.people, held(tmp_path / "lake"))
    assert not remembered(job)  # this run wrote: it keeps nothing
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}
    assert remembered(job)


def test_another_writers_commit_is_seen_though_runs_remembered_the_table(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A row no server holds, appended by someone else: the version moved, so the next run
    reads the table again, its count check finds the row, and the id pass removes it. Taken
    from memory, the count would have matched and the row stayed."""
    job = workspace.job(JOB)
    for _ in range(3):
        workspace.run(job)
    lake = tmp_path / "lake"
    with iceberg_table(lake) as table:
        row = table.scan(limit=1).to_arrow()
        stranger = row.set_column(
            row.schema.get_field_index("_id"), row.schema.field("_id"), pa.array(["row_stranger"])
        )
        table.append(stranger)
    assert "row_stranger" in held(lake)

    people = result(workspace.run(job), "People")

    assert (people.status, people.rows_deleted) == ("ok", 1), people.error
    assert_same_as_server(workspace, workspace.people, held(lake))


def test_another_writers_row_in_a_sqlite_table_is_seen_though_runs_remembered_it(
    workspace: Workspace, tmp_path: Path
) -> None:
    """SQLite files have the same version (`connector.destinations.base.sqlite_version`)."""
    job = workspace.job(JOB.replace('iceberg = "lake"', 'url = "sqlite:///wh.db"'))
    for _ in range(3):
        workspace.run(job)
    assert remembered(job)
    with sqlite3.connect(tmp_path / "wh.db") as db:
        columns = [row[1] for row in db.execute('PRAGMA table_info("People")')]
        rest = ", ".join(f'"{c}"' for c in columns[1:])
        db.execute(f'INSERT INTO "People" SELECT \'row_stranger\', {rest} FROM "People" LIMIT 1')

    people = result(workspace.run(job), "People")

    assert (people.status, people.rows_deleted) == ("ok", 1), people.error
    rows = {r["_id"]: r for r in sql_rows(f"sqlite:///{tmp_path / 'wh.db'}")}
    want = upstream(workspace, workspace.people)
    assert sorted(rows) == sorted(want)
    assert {i: (r["Name"], r["Score"]) for i, r in rows.items()} == {
        i: (r["Name"], r["Score"]) for i, r in want.items()
    }


def test_a_catalog_that_does_not_count_its_changes_is_read_every_run(
    workspace: Workspace, tmp_path: Path
) -> None:
    """In WAL mode a SQLite file's change counter need not move: nothing is remembered."""
    job = workspace.job(JOB)
    workspace.run(job)
    with sqlite3.connect(tmp_path / "lake" / "catalog.db") as catalog:
        assert catalog.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)

    assert sync_saying_imports(workspace, job)
    assert sync_saying_imports(workspace, job)
    assert not remembered(job)
    change_people(workspace)
    assert result(workspace.run(job), "People").rows_deleted == 1
    assert_same_as_server(workspace, workspace.people, held(tmp_path / "lake"))


def test_a_memory_that_cannot_be_kept_leaves_the_runs_as_they_were(
    workspace: Workspace, tmp_path: Path
) -> None:
    """The memory's place is taken by a file: nothing is kept, and every run reads the
    destination and writes what changed."""
    job = workspace.job(JOB)
    load_job(job).memory_path.write_text("not a folder")
    for _ in range(3):
        assert workspace.run(job).status == "ok"
    change_people(workspace)

    people = result(workspace.run(job), "People")

    assert (people.status, people.rows_deleted) == ("ok", 1), people.error
    assert_same_as_server(workspace, workspace.people, held(tmp_path / "lake"))
    assert load_job(job).memory_path.read_text() == "not a folder"
