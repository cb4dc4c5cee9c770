"""`load --mode merge` applies deletions as a full sync does, every destination reports rows in
the same terms, and a job's state belongs to that job.

Against the reference server over HTTP; SQLite and DuckDB read back with their own libraries.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.errors import ConfigError
from tests.fixtures.server import RunningServer
from tests.jobs.conftest import Workspace, person

TARGETS = ["sqlite", "duckdb"]


def url(kind: str, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'wh.db'}" if kind == "sqlite" else f"duckdb:///{tmp_path / 'wh.duckdb'}"


def held(kind: str, tmp_path: Path) -> dict[str, Any]:
    """People's names -> deletion mark (None when the table has no mark column)."""
    sql = 'SELECT * FROM "People"'
    if kind == "sqlite":
        with sqlite3.connect(tmp_path / "wh.db") as db:
            cursor = db.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    else:
        with duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True) as con:
            cursor = con.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    return {r["Name"]: r.get("_deleted_at") for r in rows}


def load(server: RunningServer, *args: str) -> Result:
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, ["load", "--table", "People", *args], env=env)


def delete_person(ws: Workspace, name: str) -> None:
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    (row,) = [r for r in rows if r["fields"]["Name"] == name]
    ws.api("DELETE", f"/tables/{ws.people}/rows/{row['id']}")


@pytest.mark.parametrize("kind", TARGETS)
def test_load_merge_deletes_rows_deleted_upstream(workspace: Workspace, tmp_path: Path, kind: str) -> None:
    """The issue: 41 rows held against 40 on the server after one delete."""
    to = url(kind, tmp_path)
    assert load(workspace.server, "--to", to).exit_code == 0
    delete_person(workspace, "P004")
    workspace.server.insert_rows(workspace.people, [person(50)])

    merged = load(workspace.server, "--to", to, "--mode", "merge", "--json")

    assert merged.exit_code == 0, merged.output
    (table,) = json.loads(merged.output)["tables"]
    assert (table["rows_read"], table["rows_written"], table["rows_deleted"]) == (10, 10, 1)
    names = sorted(f"P{i:03d}" for i in [*range(10), 50] if i != 4)
    assert sorted(held(kind, tmp_path)) == names


@pytest.mark.parametrize("kind", TARGETS)
def test_load_merge_marks_or_keeps_rows_deleted_upstream_when_asked(
    workspace: Workspace, tmp_path: Path, kind: str
) -> None:
    to = url(kind, tmp_path)
    assert load(workspace.server, "--to", to, "--mode", "merge", "--deletes", "mark").exit_code == 0
    delete_person(workspace, "P004")

    marked = load(workspace.server, "--to", to, "--mode", "merge", "--deletes", "mark")
    assert marked.exit_code == 0, marked.output
    marks = held(kind, tmp_path)
    assert len(marks) == 10 and [n for n, m in marks.items() if m is not None] == ["P004"]

    delete_person(workspace, "P005")
    kept = load(workspace.server, "--to", to, "--mode", "merge", "--deletes", "keep")
    assert kept.exit_code == 0, kept.output
    assert [n for n, m in held(kind, tmp_path).items() if m is not None] == ["P004"]
    assert "P005" in held(kind, tmp_path)


def test_deletes_applies_to_merge_only(workspace: Workspace, tmp_path: Path) -> None:
    refused = load(workspace.server, "--to", url("sqlite", tmp_path), "--deletes", "mark")
    assert refused.exit_code == 2
    assert "--deletes mark applies to --mode merge only" in refused.output


@pytest.mark.parametrize("kind", TARGETS)
def test_every_destination_reports_an_append_in_the_same_terms(
    workspace: Workspace, tmp_path: Path, kind: str
) -> None:
    """The issue: after one created row, 'Products: 40 rows' from SQLite, '1 rows' from DuckDB."""
    to = url(kind, tmp_path)
    assert load(workspace.server, "--to", to).exit_code == 0
    workspace.server.insert_rows(workspace.people, [person(77)])

    appended = load(workspace.server, "--to", to, "--mode", "append")

    assert appended.exit_code == 0, appended.output
    assert "People: 11 read, 1 written, 0 deleted in" in appended.output
    assert "1 of 1 tables loaded: 11 rows read, 1 written, 0 deleted" in appended.output


def test_two_job_files_of_one_name_in_one_folder_do_not_share_a_state(
    workspace: Workspace, tmp_path: Path
) -> None:
    def job(file: str, out: str) -> Path:
        path = tmp_path / f"{file}.toml"
        path.write_text(
            'name = "nightly"\n[source]\napi_key_env = "JOB_KEY"\n'
            f'[sync]\nincremental = true\n[[destination]]\nparquet = "{out}"\n'
        )
        return path

    first, second = job("first", "a"), job("second", "b")
    assert workspace.run(first).status == "ok"

    with pytest.raises(ConfigError) as refused:
        workspace.run(second)

    assert str(refused.value) == (
        f"{second}: name: job files {first} and {second} are both named 'nightly' and would "
        f"share the state file {tmp_path / 'nightly.state.json'}; give one of "
        "them another name (or another sync.state_dir)")
    assert not (tmp_path / "b").exists()
    assert workspace.run(first).status == "ok"  # the state's own job still runs


def test_a_refused_key_is_a_configuration_error_not_an_empty_workspace(
    workspace: Workspace, tmp_path: Path
) -> None:
    env = {"CONNECTOR_API_KEY": "not-a-key-anyone-has", "CONNECTOR_BASE_URL": workspace.server.base_url}
    done = CliRunner().invoke(main, ["export", "--out", str(tmp_path / "out")], env=env)

    assert done.exit_code == 2, done.output
    assert "refused" in done.output and "CONNECTOR_API_KEY" in done.output
    assert "0 of 0 tables" not in done.output
    assert not (tmp_path / "out").exists()

