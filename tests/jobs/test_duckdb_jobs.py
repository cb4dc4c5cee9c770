"""Jobs with a DuckDB destination (``url = "duckdb:///..."``): full and incremental syncs,
modes, marks, verify, and a table that disappeared, checked with duckdb against the server."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.errors import ConfigError
from connector.jobs.config import load_job
from tests.jobs.conftest import Workspace
from tests.jobs.test_sync import EXPECTED_AFTER_CHANGES, NAMES, change_people, result
from tests.jobs.test_sync_invariant import Snapshot, _cells, server_rows

DUCK = '[[destination]]\nurl = "duckdb:///out/wh.duckdb"\n'
INCREMENTAL = "[sync]\nincremental = true\nlookback = 0\n"


def query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows through duckdb's own connection (read-only: the run must have let go of the file)."""
    with contextlib.closing(duckdb.connect(str(path), read_only=True)) as con:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql).fetchall()


def duck_rows(path: Path, where: str = "") -> Snapshot:
    found = query(path, 'SELECT "_id", "_updated_at", "Name", "Team", "Score", "Active", "Joined" '
                        f'FROM "People" {where}')
    return {r[0]: _cells(*r[1:]) for r in found}


def names(path: Path, where: str = "") -> list[str]:
    return sorted(r[0] for r in query(path, f'SELECT "Name" FROM "People" {where}'))


def test_a_full_sync_writes_every_table_typed_relative_to_the_job_file(
    workspace: Workspace, tmp_path: Path
) -> None:
    summary = workspace.run(workspace.job(DUCK))

    assert (summary.status, summary.exit_code) == ("ok", 0), summary
    assert summary.destinations == [f"duckdb:///{tmp_path / 'out' / 'wh.duckdb'}"]
    db = tmp_path / "out" / "wh.duckdb"
    assert duck_rows(db) == server_rows(workspace)
    assert query(db, 'SELECT "Text" FROM "Notes" ORDER BY 1') == [("hello",), ("world",)]
    assert [(r[0], r[1]) for r in query(db, 'DESCRIBE "People"')] == [
        ("_id", "VARCHAR"), ("_created_at", "TIMESTAMP WITH TIME ZONE"),
        ("_updated_at", "TIMESTAMP WITH TIME ZONE"), ("Name", "VARCHAR"), ("Team", "VARCHAR"),
        ("Score", "DOUBLE"), ("Active", "BOOLEAN"), ("Joined", "DATE"),
    ]


def test_incremental_sync_picks_up_creates_updates_and_deletes(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(INCREMENTAL + DUCK)
    workspace.run(job)
    change_people(workspace)

    summary = workspace.run(job)

    people = result(summary, "People")
    assert (people.status, people.read, people.rows_read, people.rows_deleted) == (
        "ok", "incremental", 2, 1)
    assert result(summary, "Notes").status == "unchanged"
    db = tmp_path / "out" / "wh.duckdb"
    assert names(db) == EXPECTED_AFTER_CHANGES
    assert duck_rows(db) == server_rows(workspace)
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}


def test_deleted_rows_can_be_marked_instead_of_removed(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job("[sync]\nincremental = true\nlookback = 0\ndeletes = 'mark'\n" + DUCK)
    workspace.run(job)
    change_people(workspace)

    workspace.run(job)

    db = tmp_path / "out" / "wh.duckdb"
    assert names(db) == sorted([*NAMES, "P100"])
    assert names(db, 'WHERE "_deleted_at" IS NOT NULL') == ["P002"]
    assert duck_rows(db, 'WHERE "_deleted_at" IS NULL') == server_rows(workspace)
    # A third run: the marked row is not "deleted again", nothing changes.
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}


def test_full_syncs_replace_append_or_merge_as_configured(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(
        '[tables]\ninclude = ["People"]\n'
        '[[destination]]\nurl = "duckdb:///replaced.duckdb"\n'
        '[[destination]]\nurl = "duckdb:///appended.duckdb"\nmode = "append"\n'
        '[[destination]]\nurl = "duckdb:///merged.duckdb"\nmode = "merge"\n'
    )
    workspace.run(job)
    change_people(workspace)

    summary = workspace.run(job)

    assert result(summary, "People").read == "full"
    assert names(tmp_path / "replaced.duckdb") == EXPECTED_AFTER_CHANGES
    appended = tmp_path / "appended.duckdb"  # new ids added; held rows as they were
    assert names(appended) == sorted([*NAMES, "P100"])
    assert query(appended, "SELECT \"Score\" FROM \"People\" WHERE \"Name\" = 'P001'") == [(1.0,)]
    merged = tmp_path / "merged.duckdb"  # upserted, and the deleted row removed
    assert duck_rows(merged) == server_rows(workspace)


def test_verify_repairs_missing_different_and_extra_rows(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job('[tables]\ninclude = ["People"]\n' + INCREMENTAL + DUCK)
    workspace.run(job)
    db = tmp_path / "out" / "wh.duckdb"
    with contextlib.closing(duckdb.connect(str(db))) as con:
        ids = [r[0] for r in con.execute('SELECT "_id" FROM "People" ORDER BY "Name"').fetchall()]
        con.execute('DELETE FROM "People" WHERE "_id" = ?', [ids[0]])
        con.execute('UPDATE "People" SET "Score" = -1 WHERE "_id" = ?', [ids[1]])
        con.execute('INSERT INTO "People" ("_id", "Name") VALUES (?, ?)', ["row_stray", "Stray"])

    outcome = CliRunner().invoke(main, ["sync", str(job), "--verify"], env=workspace.environ)

    assert outcome.exit_code == 0, outcome.output
    assert "verified: 1 missing, 1 different rewritten; 1 extra removed" in outcome.output
    assert duck_rows(db) == server_rows(workspace)


def test_a_table_dropped_from_duckdb_forces_a_full_reread(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n' + DUCK)
    workspace.run(job)
    db = tmp_path / "out" / "wh.duckdb"
    with contextlib.closing(duckdb.connect(str(db))) as con:
        con.execute('DROP TABLE "People"')
    change_people(workspace)

    summary = workspace.run(job)

    assert (result(summary, "People").read, result(summary, "People").rows_read) == ("full", 10)
    assert duck_rows(db) == server_rows(workspace)


def test_two_tables_whose_names_differ_only_in_case_get_distinct_tables(
    workspace: Workspace, tmp_path: Path
) -> None:
    """DuckDB does not tell 'Notes' from 'notes' either: the later table gets its id."""
    twin = workspace.server.create_table({"name": "notes", "columns": [{"name": "Other", "type": "text"}]})
    workspace.server.insert_rows(twin, [{"Other": "x"}])

    summary = workspace.run(workspace.job(DUCK))

    assert summary.status == "ok", summary
    db = tmp_path / "out" / "wh.duckdb"
    assert query(db, f'SELECT "Other" FROM "notes-{twin}"') == [("x",)]
    assert query(db, 'SELECT count(*) FROM "Notes"') == [(2,)]


@pytest.mark.parametrize("url", ["duckdb://", "duckdb:///:memory:", "duckdb:///dir/"])
def test_a_duckdb_url_without_a_file_is_a_config_error_naming_the_key(
    workspace: Workspace, url: str
) -> None:
    path = workspace.job(f'[[destination]]\nurl = "{url}"\n')
    with pytest.raises(ConfigError, match=rf"^{path}: destination\[0\]\.url: .*duckdb:///analytics"):
        load_job(path)


def test_a_dry_run_reads_counts_and_creates_no_database(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(INCREMENTAL + DUCK)

    summary = workspace.run(job, dry_run=True)

    assert {(t.table, t.status, t.rows_read) for t in summary.tables} == {
        ("People", "planned", 10), ("Notes", "planned", 2)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.toml"]


def test_a_database_held_by_another_process_fails_before_any_read(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(DUCK)
    workspace.run(job)
    db = tmp_path / "out" / "wh.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); time.sleep(60)", str(db)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        summary = workspace.run(job)
    finally:
        holder.kill()
        holder.wait()
    assert (summary.status, summary.exit_code) == ("failed", 1)
    assert summary.error is not None and "wh.duckdb" in summary.error and "lock" in summary.error
    assert "\n" not in summary.error
    assert summary.tables == [] or all(t.status != "ok" for t in summary.tables)
