"""[[push]] jobs: a spreadsheet into a table, planned on --dry-run, applied otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.errors import ConfigError
from tests.jobs.conftest import Workspace

PUSH = '[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n'


def names_and_scores(ws: Workspace) -> dict[str, float | None]:
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    return {r["fields"]["Name"]: r["fields"].get("Score") for r in rows}


def test_a_push_job_plans_on_dry_run_and_applies_otherwise(
    workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "people.csv").write_text("Name,Score\nP001,41\nP002,2\nNew One,7\n")
    job = workspace.job(PUSH)

    planned = workspace.run(job, dry_run=True)

    (push,) = planned.to_dict()["pushes"]  # a dry run's entry counts what it would do
    assert (push["status"], push["created"], push["updated"], push["unchanged"]) == (
        "planned", 1, 1, 1)
    assert push["plan"] is not None and "Score: 1 → 41" in push["plan"]
    assert names_and_scores(workspace)["P001"] == 1.0  # nothing written
    assert not (tmp_path / "job.state.json").exists()

    applied = workspace.run(job)

    (push,) = applied.pushes
    assert (applied.exit_code, push.status, push.created, push.updated) == (0, "ok", 1, 1)
    after = names_and_scores(workspace)
    assert (after["P001"], after["P002"], after["New One"]) == (41.0, 2.0, 7.0)
    assert len(after) == 11


def test_a_bad_spreadsheet_fails_the_push_and_writes_nothing(
    workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "people.csv").write_text("Name,Score\nP001,41\nP003,lots\n")
    job = workspace.job(PUSH)

    summary = workspace.run(job)

    (push,) = summary.pushes
    assert (summary.status, summary.exit_code, push.status) == ("failed", 1, "failed")
    assert push.error is not None and "Score" in push.error and "lots" in push.error
    assert names_and_scores(workspace)["P001"] == 1.0


def test_a_bad_sync_filter_stops_the_job_before_its_push_writes(
    workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "people.csv").write_text("Name,Score\nP001,41\n")
    job = workspace.job(
        PUSH + '[tables.filter]\nPeople = { Colour = { eq = "x" } }\n'
        '[[destination]]\nparquet = "pq"\n'
    )

    with pytest.raises(ConfigError, match=r"tables\.filter\.People\.Colour: .*no column 'Colour'"):
        workspace.run(job)

    assert names_and_scores(workspace)["P001"] == 1.0  # the push wrote nothing
    assert not (tmp_path / "pq").exists()


def test_a_push_key_the_table_lacks_is_a_config_error_naming_the_job_and_push(
    workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "people.csv").write_text("Name,Score\nP001,41\n")
    job = workspace.job(PUSH.replace('key = "Name"', 'key = "Nickname"'))

    with pytest.raises(ConfigError, match=r"job\.toml: push\[0\]: .*Nickname") as caught:
        workspace.run(job)

    assert str(caught.value).startswith(f"{job}: push[0]: ")
    assert names_and_scores(workspace)["P001"] == 1.0
    assert str(caught.value).startswith(f"{job}: push[0]: key: table 'People' has no column")


def test_a_push_job_is_told_what_to_set_by_its_own_keys(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A problem that asks for a setting names the job file's key (``date_format``), not the
    flag `connector push` takes for it."""
    (tmp_path / "people.csv").write_text("Name,Joined\nP001,05/03/2024\n")

    summary = workspace.run(workspace.job(PUSH))

    (push,) = summary.pushes
    assert push.status == "failed" and push.error is not None
    assert "ambiguous date: day and month could be either way; give date_format (" in push.error
    assert "--date-format" not in push.error
