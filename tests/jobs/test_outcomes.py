"""Counts tell what was written: a table that fails in one destination reports what the
others committed, each destination's outcome in the summary (JSON and text)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from tests.jobs.conftest import Workspace, sql_rows


def test_a_table_failing_in_its_third_destination_reports_what_the_first_two_hold(
    workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "c" / "People.parquet").mkdir(parents=True)  # no file can replace a folder
    job = workspace.job(
        '[[destination]]\nparquet = "a"\n[[destination]]\nurl = "sqlite:///w.db"\n'
        '[[destination]]\nparquet = "c"\n'
    )

    summary = workspace.run(job)

    assert (summary.status, summary.exit_code) == ("failed", 1)
    people = next(t for t in summary.tables if t.table == "People")
    assert (people.status, people.read, people.rows_read, people.rows_written) == (
        "failed", "full", 10, 10)
    outcomes = [(d.destination, d.status, d.rows_written) for d in people.destinations]
    assert outcomes == [
        (f"parquet:{tmp_path / 'a'}", "ok", 10),
        (f"sqlite:///{tmp_path / 'w.db'}", "ok", 10),
        (f"parquet:{tmp_path / 'c'}", "failed", 0),
    ]
    assert people.error is not None and people.error.startswith(f"parquet:{tmp_path / 'c'}: ")
    assert "People.parquet" in people.error
    names = sorted(r["fields"]["Name"] for r in workspace.api("GET", f"/tables/{workspace.people}/rows")["rows"])
    assert sorted(pq.read_table(tmp_path / "a" / "People.parquet")["Name"].to_pylist()) == names
    assert sorted(r["Name"] for r in sql_rows(f"sqlite:///{tmp_path / 'w.db'}")) == names
    notes = next(t for t in summary.tables if t.table == "Notes")
    assert notes.status == "ok" and [d.status for d in notes.destinations] == ["ok"] * 3
    state = json.loads((tmp_path / "job.state.json").read_text())
    assert workspace.people not in state["tables"]  # the next run writes it again


def test_the_text_summary_lists_the_commits_of_a_failed_table(
    workspace: Workspace, tmp_path: Path
) -> None:
    import subprocess
    import sys

    (tmp_path / "c" / "People.parquet").mkdir(parents=True)
    job = workspace.job('[[destination]]\nparquet = "a"\n[[destination]]\nparquet = "c"\n')
    done = subprocess.run([sys.executable, "-m", "connector", "sync", str(job)],
                          env={**workspace.environ, "PATH": ""}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    text = done.stdout + done.stderr
    assert "People" in text and "FAILED" in text
    assert "read 10 rows; committed nonetheless to:" in text
    assert f"parquet:{tmp_path / 'a'}: 10 written, 0 deleted" in text
