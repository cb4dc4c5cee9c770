"""Ctrl-C and SIGTERM during `connector sync`, as real processes: one line, a JSON `finish`
event with status ``interrupted``, no Python noise, destinations and state as a crash-safe
stop leaves them, and a rerun that converges."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connector.errors import ExitCode
from connector.jobs.lock import job_lock
from tests.jobs.conftest import MakeWorkspace, Workspace

ROOT = Path(__file__).resolve().parents[2]
BOTH = (
    '[tables]\ninclude = ["Notes", "People"]\n[sync]\nincremental = true\nlookback = 0\n'
    '[[destination]]\nparquet = "pq"\n'
)
SIGNALS = {"SIGINT": (signal.SIGINT, ExitCode.INTERRUPTED), "SIGTERM": (signal.SIGTERM,
                                                                         ExitCode.TERMINATED)}


def start(ws: Workspace, job: Path, scratch: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **ws.environ, "TMPDIR": str(scratch)}
    return subprocess.Popen(
        [sys.executable, "-m", "connector", "sync", str(job), *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def interrupt(run: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    """Signal `run` once Notes is done, while People is read (a page every 40 ms)."""
    assert run.stderr is not None
    seen = []
    for line in run.stderr:
        seen.append(line)
        if "Notes" in line:  # its table line (text) or event (JSON)
            break
    time.sleep(0.2)
    assert run.poll() is None, "the run ended before the signal: make the server slower"
    run.send_signal(signum)
    out, err = run.communicate(timeout=30)
    return out, "".join(seen) + err


def assert_no_noise(stderr: str) -> None:
    for noise in ("Traceback", "Event loop is closed", "Exception ignored", "Error in sys"):
        assert noise not in stderr, stderr


@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_mid_sync_prints_one_line_and_keeps_what_finished(
    make_workspace: MakeWorkspace, tmp_path: Path, name: str
) -> None:
    signum, code = SIGNALS[name]
    ws = make_workspace(people=1000, latency_ms=40)
    job = ws.job(BOTH, concurrency=1)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    run = start(ws, job, scratch)
    out, err = interrupt(run, signum)

    assert run.returncode == code
    assert_no_noise(err)
    lines = [ln for ln in err.splitlines() if not ln.startswith("  ")]  # table lines: indented
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert [ln for ln in lines if ln.startswith("interrupted")] == [
        f"interrupted by {by}: tables finished before it are written, the one in flight is "
        "left as it was; run again to finish"
    ]
    assert [ln for ln in lines if not ln.startswith(("job ", "interrupted"))] == []
    assert re.fullmatch(
        r"job: interrupted — 1 tables, 2 rows written, 0 deleted — [\d.]+ s, up to 1 request in flight",
        out.strip(),
    ), out
    # Notes finished: written, its cursor saved; People was in flight: nothing of it.
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == [
        "Notes.parquet", "_connector_tables.json"]
    state = json.loads((tmp_path / "job.state.json").read_text())
    assert set(state["tables"]) == {ws.notes}
    with job_lock(tmp_path / "job.lock", wait=0, job="job"):  # released
        pass

    summary = ws.run(job)  # the rerun converges

    assert summary.status == "ok"
    assert {t.table: t.read for t in summary.tables} == {"Notes": "incremental", "People": "full"}
    assert pq.read_table(tmp_path / "pq" / "People.parquet").num_rows == 1000


@pytest.mark.parametrize("name", SIGNALS)
def test_json_logs_end_with_a_finish_event_status_interrupted(
    make_workspace: MakeWorkspace, tmp_path: Path, name: str
) -> None:
    signum, code = SIGNALS[name]
    ws = make_workspace(people=1000, latency_ms=40)
    job = ws.job(BOTH, concurrency=1)
    ws.run(job)  # a first run: People's parquet file and cursor exist
    before = (tmp_path / "pq" / "People.parquet").read_bytes()
    state_before = json.loads((tmp_path / "job.state.json").read_text())
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    run = start(ws, job, scratch, "--log-format", "json", "--verify")  # reads every row
    out, err = interrupt(run, signum)

    assert run.returncode == code, (out, err)
    assert_no_noise(err)
    events = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    assert events[-1]["event"] == "finish"
    assert (events[-1]["status"], events[-1]["exit_code"]) == ("interrupted", code)
    assert "interrupted by" in events[-1]["error"]
    summary = json.loads(out)
    assert (summary["status"], summary["exit_code"]) == ("interrupted", code)
    assert [t["table"] for t in summary["tables"]] == ["Notes"]
    # People was in flight: its file and its state are as the first run left them.
    assert (tmp_path / "pq" / "People.parquet").read_bytes() == before
    state = json.loads((tmp_path / "job.state.json").read_text())
    assert state["tables"][ws.people] == state_before["tables"][ws.people]
    assert state["last_run"] == state_before["last_run"]  # no record of the stopped run
    assert list(scratch.iterdir()) == []

    rerun = ws.run(job)

    assert rerun.status == "ok"
    assert pq.read_table(tmp_path / "pq" / "People.parquet").num_rows == 1000


def test_a_signal_while_waiting_for_the_lock_reports_interrupted(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(BOTH)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with job_lock(tmp_path / "job.lock", wait=0, job="job"):
        run = start(workspace, job, scratch, "--log-format", "json", "--wait", "60")
        assert run.stderr is not None
        waiting = json.loads(run.stderr.readline())  # it says it waits before it does
        assert (waiting["event"], waiting["seconds"]) == ("waiting", 60)
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=30)

    assert run.returncode == ExitCode.TERMINATED
    assert_no_noise(err)
    assert json.loads(err.splitlines()[-1])["status"] == "interrupted"
    assert json.loads(out)["status"] == "interrupted"
    assert not (tmp_path / "pq").exists()


def test_sigterm_while_a_sql_table_is_replaced_keeps_the_previous_copy(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    """People streams into SQLite inside one transaction; the stop rolls it back."""
    import sqlite3

    ws = make_workspace(people=1000, latency_ms=40)
    job = ws.job('[tables]\ninclude = ["Notes", "People"]\n[[destination]]\n'
                 'url = "sqlite:///wh.db"\n', concurrency=1)
    ws.run(job)
    ws.api("PATCH", f"/tables/{ws.people}/rows/{first_id(ws)}", json={"fields": {"Score": -1}})

    def people() -> list[tuple[object, ...]]:
        with sqlite3.connect(tmp_path / "wh.db") as db:
            return db.execute('select "Name", "Score" from "People" order by "Name"').fetchall()

    before = people()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run = start(ws, job, scratch)
    _, err = interrupt(run, signal.SIGTERM)

    assert run.returncode == ExitCode.TERMINATED
    assert_no_noise(err)
    assert people() == before  # not a row of the new copy, none of the old one lost
    assert list(scratch.iterdir()) == []

    assert ws.run(job).status == "ok"
    assert -1 in [score for _, score in people()]


def first_id(ws: Workspace) -> str:
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1})["rows"]
    return str(rows[0]["id"])


def test_sigterm_during_a_push_reports_it_and_a_rerun_converges(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    ws = make_workspace(people=10, latency_ms=150)
    rows = "\n".join(f"New{i:04d},{i}" for i in range(3000))
    (tmp_path / "people.csv").write_text(f"Name,Score\n{rows}\n")
    job = ws.job('[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n')
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    run = start(ws, job, scratch, "--log-format", "json")
    assert run.stderr is not None
    first = run.stderr.readline()  # the start event
    time.sleep(1.2)  # the push reads People, plans, and is sending its bulk creates
    assert run.poll() is None
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=30)

    assert run.returncode == ExitCode.TERMINATED, (out, err)
    assert_no_noise(err)
    events = [json.loads(line) for line in (first + err).splitlines()]
    assert events[-1]["event"] == "finish" and events[-1]["status"] == "interrupted"
    (push,) = json.loads(out)["pushes"]
    assert push["status"] == "failed" and push["error"].startswith("interrupted")
    assert ws.server.row_count(ws.people) < 3010

    rerun = ws.run(job)

    assert rerun.status == "ok"
    assert ws.server.row_count(ws.people) == 3010
