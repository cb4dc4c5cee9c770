"""State survives crashes whole; one run of a job at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from connector.errors import ConfigError, ExitCode
from connector.jobs.lock import JobLocked, job_lock
from connector.jobs.state import JobState, RunRecord, TableState, load_state, save_state

ROOT = Path(__file__).resolve().parents[2]
TABLE = TableState(
    "tbl_1", "Orders", "2026-01-01T00:00:00.000000Z", 3, "abc", "2026-01-02T00:00:00Z"
)


def test_a_job_that_never_ran_has_empty_state(tmp_path: Path) -> None:
    assert load_state(tmp_path / "job.state.json") == JobState()


def test_state_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "job.state.json"
    run = RunRecord("2026-01-02T00:00:00.000000Z", "2026-01-02T00:01:00.000000Z", "ok", 3, 1)
    state = JobState().with_table(TABLE).with_run(run)

    save_state(path, state)

    assert load_state(path) == state
    assert [p.name for p in path.parent.iterdir()] == ["job.state.json"]  # no temp file left


def test_a_failed_write_leaves_the_previous_state(tmp_path: Path) -> None:
    path = tmp_path / "job.state.json"
    save_state(path, JobState().with_table(TABLE))
    before = path.read_bytes()

    bad = JobState().with_table(TABLE).with_run(RunRecord("a", "b", object(), 0, 0))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        save_state(path, bad)

    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["job.state.json"]


@pytest.mark.slow
def test_a_state_killed_mid_write_is_the_old_or_the_new_never_half(tmp_path: Path) -> None:
    """A writer killed with SIGKILL while saving in a loop never leaves an unreadable file."""
    path = tmp_path / "job.state.json"
    save_state(path, JobState().with_table(TABLE))
    script = (
        "import sys, dataclasses\n"
        "from pathlib import Path\n"
        "from connector.jobs.state import *\n"
        "from tests.jobs.test_state_and_lock import TABLE\n"
        "p = Path(sys.argv[1]); i = 0\n"
        "print('go', flush=True)\n"
        "while True:\n"
        "    i += 1\n"
        "    tables = {f't{j}': dataclasses.replace(TABLE, table_id=f't{j}', rows=i) for j in range(200)}\n"
        "    save_state(p, JobState(tables))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
    time.sleep(0.3)
    proc.kill()
    proc.wait()

    state = load_state(path)
    assert len(state.tables) in (1, 200)


def test_an_unreadable_state_file_says_how_to_recover(tmp_path: Path) -> None:
    path = tmp_path / "job.state.json"
    path.write_text("{not json")

    with pytest.raises(ConfigError, match="delete it to re-sync every table in full"):
        load_state(path)


def test_a_second_holder_is_refused_with_a_clear_message_and_exit_code(tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    with (
        job_lock(lock, job="nightly"),
        pytest.raises(JobLocked) as caught,
        job_lock(lock, wait=0.2, job="nightly"),
    ):
        pass  # pragma: no cover

    assert "job 'nightly' is already running" in str(caught.value)
    assert f"as process {os.getpid()}" in str(caught.value)
    assert caught.value.exit_code == ExitCode.LOCKED == 75


def test_a_waiter_gets_the_lock_when_the_holder_lets_go(tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    order: list[str] = []
    held = threading.Event()

    def holder() -> None:
        with job_lock(lock):
            held.set()
            time.sleep(0.3)
            order.append("first done")

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait()
    with job_lock(lock, wait=5):
        order.append("second in")
    thread.join()

    assert order == ["first done", "second in"]


@pytest.mark.slow
def test_a_killed_holder_does_not_leave_a_stale_lock(tmp_path: Path) -> None:
    lock = tmp_path / "job.lock"
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom connector.jobs.lock import job_lock\n"
        "with job_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(lock)], stdout=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
    with pytest.raises(JobLocked), job_lock(lock):
        pass  # pragma: no cover

    proc.kill()
    proc.wait()

    with job_lock(lock, wait=2):
        pass
