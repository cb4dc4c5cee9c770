"""`connector sync` as a scheduler sees it: exit codes, JSON summaries, locking, kill -9."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from connector import scratch
from connector.cli import main
from tests.jobs.conftest import MakeWorkspace, Workspace, person

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
PARQUET = '[tables]\ninclude = ["People"]\n[[destination]]\nparquet = "pq"\n'


def cli(ws: Workspace, *args: str) -> subprocess.Popen[str]:
    """`connector ARGS` in its own process, with the workspace's URL and key in its environment."""
    env = {**os.environ, **ws.environ}
    return subprocess.Popen(
        [sys.executable, "-m", "connector", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(found: Callable[[], T], what: str, timeout: float = 20.0) -> T:
    """What `found` finds once it finds something, asked every 10 ms while a process changes
    the files it looks at (one gone as it looks finds nothing yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if result := found():
                return result
        time.sleep(0.01)
    raise AssertionError(f"no {what} within {timeout}s")


def wait_for_lock_holder(lock: Path) -> None:
    """Until a run has taken the job's lock (it writes its pid into the lock file)."""
    wait_for(lambda: lock.read_text().strip(), f"run took {lock}")


def test_a_bad_job_file_exits_2_naming_the_key_without_a_traceback(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('[source]\napi_key_env = "K"\n[[destination]]\nparquet = "x"\nmode = "upsert"\n')

    outcome = CliRunner().invoke(main, ["sync", str(job)])

    assert outcome.exit_code == 2
    assert f"{job}: destination[0].mode: must be one of replace, append, merge" in outcome.output
    assert "Traceback" not in outcome.output


def test_a_missing_key_variable_exits_2_naming_it(workspace: Workspace) -> None:
    job = workspace.job(PARQUET)

    outcome = CliRunner().invoke(
        main,
        ["sync", str(job)],
        env={"CONNECTOR_BASE_URL": workspace.server.base_url, "JOB_KEY": ""},
    )

    assert outcome.exit_code == 2
    assert "source.api_key_env: the environment variable JOB_KEY is not set" in outcome.output


def test_json_log_format_gives_events_and_one_summary_for_schedulers(workspace: Workspace) -> None:
    job = workspace.job(PARQUET)

    outcome = CliRunner().invoke(
        main, ["sync", str(job), "--log-format", "json"], env=workspace.environ
    )

    assert outcome.exit_code == 0
    summary = json.loads(outcome.stdout)
    assert summary["status"] == "ok" and summary["exit_code"] == 0
    assert [(t["table"], t["rows_written"]) for t in summary["tables"]] == [("People", 10)]
    events = [json.loads(line) for line in outcome.stderr.splitlines()]
    assert [e["event"] for e in events] == ["start", "table", "finish"]
    assert workspace.server.api_key not in outcome.output


def test_state_dir_option_moves_state_and_lock(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(PARQUET)
    elsewhere = tmp_path / "state-elsewhere"

    outcome = CliRunner().invoke(
        main, ["sync", str(job), "--state-dir", str(elsewhere)], env=workspace.environ
    )

    assert outcome.exit_code == 0, outcome.output
    assert sorted(p.name for p in elsewhere.iterdir()) == ["job.lock", "job.state.json"]
    assert not (tmp_path / "job.state.json").exists()


def test_two_runs_of_one_job_never_overlap(make_workspace: MakeWorkspace, tmp_path: Path) -> None:
    ws = make_workspace(people=600, latency_ms=50)
    job = ws.job(PARQUET, concurrency=1)
    first = cli(ws, "sync", str(job))
    wait_for_lock_holder(tmp_path / "job.lock")

    refused = CliRunner().invoke(main, ["sync", str(job)], env=ws.environ)
    still_running = first.poll() is None
    waited = CliRunner().invoke(
        main, ["sync", str(job), "--wait", "60", "--log-format", "json"], env=ws.environ
    )
    first.communicate(timeout=60)

    assert still_running, "the first run should still hold the lock when the second starts"
    assert refused.exit_code == 75
    assert "job 'job' is already running as process" in refused.stderr
    assert "nothing was done" in refused.stderr
    assert first.returncode == 0
    assert waited.exit_code == 0
    assert json.loads(waited.stdout)["tables"][0]["rows_written"] == 600


def test_kill_9_mid_sync_leaves_state_and_outputs_then_a_rerun_is_correct(
    make_workspace: MakeWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed run's spool (rows it had read, in the temp folder) is removed by the next."""
    ws = make_workspace(people=50, latency_ms=40)
    job = ws.job("[sync]\nincremental = true\nlookback = 0\n" + PARQUET, concurrency=1)
    assert ws.run(job).status == "ok"
    state_before = (tmp_path / "job.state.json").read_bytes()
    parquet_before = (tmp_path / "pq" / "People.parquet").read_bytes()
    ws.server.insert_rows(ws.people, [person(i) for i in range(50, 1050)])
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the killed run's and the rerun's
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(scratch, "_swept", set())

    run = cli(ws, "sync", str(job))
    spooled = wait_for(lambda: [f for f in temp.glob("connector-sync-*/*.arrow") if f.stat().st_size],
                       "spooled rows")
    run.kill()  # reading 20 pages at 40 ms each, the first already spooled
    run.communicate()

    assert run.returncode == -9
    assert (tmp_path / "job.state.json").read_bytes() == state_before
    assert (tmp_path / "pq" / "People.parquet").read_bytes() == parquet_before
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == [
        "People.parquet", "_connector_tables.json"]
    assert all(f.is_file() for f in spooled)  # the kill left the spool

    summary = ws.run(job)
    assert list(temp.iterdir()) == []

    people = summary.tables[0]
    assert (people.status, people.read, people.rows_read) == ("ok", "incremental", 1000)
    names = (
        pq.read_table(tmp_path / "pq" / "People.parquet", columns=["Name"]).column(0).to_pylist()
    )
    assert sorted(names) == sorted(f"P{i:03d}" for i in range(1050))


def test_sigterm_mid_sync_stops_cleanly(make_workspace: MakeWorkspace, tmp_path: Path) -> None:
    """What systemd or Airflow send to stop a job: no temp files left, state untouched."""
    ws = make_workspace(people=1000, latency_ms=40)
    job = ws.job(PARQUET, concurrency=1)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, **ws.environ, "TMPDIR": str(scratch)}
    run = subprocess.Popen(
        [sys.executable, "-m", "connector", "sync", str(job)], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for_lock_holder(tmp_path / "job.lock")
    time.sleep(0.4)
    run.terminate()
    run.communicate(timeout=30)

    assert run.returncode == 128 + 15
    assert list(scratch.iterdir()) == []  # the spool is gone
    assert not (tmp_path / "job.state.json").exists()
    assert not (tmp_path / "pq").exists() or list((tmp_path / "pq").iterdir()) == []


@pytest.mark.parametrize("warehouse", ["sqlite", "postgresql"])
def test_kill_9_while_a_sql_destination_is_written_keeps_the_previous_rows(
    make_workspace: MakeWorkspace,
    tmp_path: Path,
    warehouse: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kill lands inside the write's transaction (SQLite: its rollback journal exists;
    PostgreSQL: a COPY is running), and the table is then exactly what the last run left."""
    from tests.destinations.samples import kill_when
    from tests.jobs.test_sync_invariant import server_rows, sql_rows

    ws = make_workspace(people=200)
    if warehouse == "sqlite":
        url = f"sqlite:///{tmp_path / 'wh.db'}"
        journal = tmp_path / "wh.db-journal"

        def writing() -> bool:
            return journal.exists()
    else:
        url = str(request.getfixturevalue("postgres_db"))
        dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

        def writing() -> bool:
            with psycopg.connect(dsn) as conn:
                found = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE query LIKE 'COPY%' AND pid <> pg_backend_pid()"
                ).fetchone()
            return bool(found and found[0])

    job = tmp_path / "job.toml"
    job.write_text(
        '[source]\napi_key_env = "JOB_KEY"\npage_size = 1000\n[tables]\ninclude = ["People"]\n'
        f'[sync]\nincremental = true\nlookback = 0\n[[destination]]\nurl = "{url}"\n'
    )
    assert ws.run(job).status == "ok"
    before = sql_rows(url)
    state_before = (tmp_path / "job.state.json").read_bytes()
    ws.server.insert_rows(ws.people, [person(i) for i in range(200, 12_200)])
    for name, value in ws.environ.items():
        monkeypatch.setenv(name, value)

    kill_when([sys.executable, "-m", "connector", "sync", str(job)], writing)

    if warehouse == "sqlite":
        assert journal.exists()  # a hot journal: the transaction was open when it died
    assert sql_rows(url) == before
    assert (tmp_path / "job.state.json").read_bytes() == state_before
    summary = ws.run(job)
    assert (summary.tables[0].read, summary.tables[0].rows_read) == ("incremental", 12_000)
    assert sql_rows(url) == server_rows(ws)
