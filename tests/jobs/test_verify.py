"""`connector sync --verify` (and `[sync] verify_every`): compare every row, repair, report."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa
from click.testing import CliRunner

from connector.cli import main
from connector.jobs.state import load_state
from tests.jobs.conftest import Workspace
from tests.jobs.test_sync_invariant import parquet_rows, server_rows, sql_rows

JOB = """
[tables]
include = ["People"]
[sync]
incremental = true
{extra}
[[destination]]
url = "sqlite:///wh.db"
[[destination]]
parquet = "pq"
"""


def corrupt(tmp_path: Path) -> None:
    """SQLite: one row deleted, one value changed, one stray row. Parquet: one row deleted."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'wh.db'}")
    with engine.begin() as conn:
        ids = conn.exec_driver_sql('SELECT "_id" FROM "People" ORDER BY "Name"').scalars().all()
        conn.exec_driver_sql('DELETE FROM "People" WHERE "_id" = ?', (ids[0],))
        conn.exec_driver_sql('UPDATE "People" SET "Score" = -1 WHERE "_id" = ?', (ids[1],))
        conn.exec_driver_sql(
            'INSERT INTO "People" ("_id", "Name") VALUES (?, ?)', ("row_stray", "Stray")
        )
    engine.dispose()
    path = tmp_path / "pq" / "People.parquet"
    data = pq.read_table(path)
    pq.write_table(data.filter(pc.invert(pc.equal(data["_id"], pa.scalar(ids[2])))), path)


def test_verify_repairs_missing_different_and_extra_rows_and_reports_them(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(JOB.format(extra=""))
    workspace.run(job)
    corrupt(tmp_path)
    env = workspace.environ

    outcome = CliRunner().invoke(main, ["sync", str(job), "--verify"], env=env)

    assert outcome.exit_code == 0, outcome.output
    assert "verified: 2 missing, 1 different rewritten; 1 extra removed" in outcome.output
    expected = server_rows(workspace)
    assert sql_rows(f"sqlite:///{tmp_path / 'wh.db'}") == expected
    assert parquet_rows(tmp_path / "pq") == expected
    # JSON: counts per table; and a second verify finds nothing.
    again = CliRunner().invoke(main, ["sync", str(job), "--verify", "--log-format", "json"], env=env)
    summary = json.loads(again.stdout)
    assert summary["verified"] is True
    (people,) = summary["tables"]
    assert (people["read"], people["verified"]) == (
        "verify",
        {"missing": 0, "different": 0, "extra": 0},
    )


def test_verify_every_n_runs_is_counted_in_the_state(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(JOB.format(extra="verify_every = 2"))
    workspace.run(job)  # run 1: full
    assert load_state(tmp_path / "job.state.json").runs_since_verify == 1
    corrupt(tmp_path)

    summary = workspace.run(job)  # run 2: verifies

    (people,) = summary.tables
    assert summary.verified and people.read == "verify"
    assert people.verified is not None
    assert (people.verified.missing, people.verified.different, people.verified.extra) == (2, 1, 1)
    assert load_state(tmp_path / "job.state.json").runs_since_verify == 0
    assert sql_rows(f"sqlite:///{tmp_path / 'wh.db'}") == server_rows(workspace)
    assert workspace.run(job).tables[0].read == "incremental"  # run 3: an ordinary one


def test_a_clean_postgresql_destination_verifies_with_nothing_to_repair(
    workspace: Workspace, postgres_db: str
) -> None:
    """Cells read back from PostgreSQL (zone-aware timestamps, dates, floats, booleans) hash
    like the server's: a verify of an exact copy rewrites nothing."""
    job = workspace.job(
        '[tables]\ninclude = ["People"]\n[sync]\nincremental = true\n'
        f'[[destination]]\nurl = "{postgres_db}"\n'
    )
    workspace.run(job)

    summary = workspace.run(job, verify=True)

    (people,) = summary.tables
    assert people.verified is not None
    assert (people.read, people.verified.missing, people.verified.different) == ("verify", 0, 0)
    assert people.verified.extra == 0 and people.rows_written == 0
