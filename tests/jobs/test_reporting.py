"""What `connector sync` tells a person and a scheduler: a line (text) or a `table` event
(JSON) for every table, skipped and failed included; each retry wait; the full summary
shape even when the run fails before it starts; and the job-file settings behind them
(source.max_wait, [[push]] date_format)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from connector.errors import ConfigError, ExitCode
from connector.jobs.config import Source, load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from tests.fixtures.server import free_port
from tests.jobs.conftest import MakeWorkspace, Proxy, Workspace

ROOT = Path(__file__).resolve().parents[2]
#: Written out, not read from the dataclass: a field dropped from the summary fails here.
SUMMARY_KEYS = {
    "job", "status", "exit_code", "dry_run", "started_at", "finished_at", "state_file",
    "destinations", "tables", "pushes", "error", "seconds", "verified", "concurrency",
    "max_concurrency", "totals",
}


def sync(ws: Workspace, job: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "connector", "sync", str(job), *args],
        cwd=ROOT, env={**os.environ, **ws.environ, **env}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def skipping_job(ws: Workspace) -> tuple[Path, str]:
    """A job whose key may read People only, naming Notes by id (its name is not listed)."""
    scoped = ws.server.create_key(tables=["People"])
    job = ws.job(f'[tables]\ninclude = ["People", "{ws.notes}"]\n[[destination]]\nparquet = "pq"\n')
    return job, scoped


def test_text_output_has_a_line_for_every_table_with_the_reason_for_a_skip(
    workspace: Workspace,
) -> None:
    job, scoped = skipping_job(workspace)

    done = sync(workspace, job, JOB_KEY=scoped)

    assert done.returncode == ExitCode.PARTIAL, done.stderr
    lines = done.stderr.splitlines()
    people = [ln for ln in lines if ln.strip().startswith("People")]
    notes = [ln for ln in lines if ln.strip().startswith(workspace.notes)]
    assert len(people) == 1 and "10 read" in people[0]
    assert len(notes) == 1 and "SKIPPED: " in notes[0]
    assert len(notes[0].split("SKIPPED: ", 1)[1]) > 10  # the reason, as the API gave it
    assert scoped not in done.stdout + done.stderr
    assert done.stdout.startswith("job: partial — 2 tables")


def test_json_has_a_table_event_for_every_table_skipped_included(workspace: Workspace) -> None:
    job, scoped = skipping_job(workspace)

    done = sync(workspace, job, "--log-format", "json", JOB_KEY=scoped)

    assert done.returncode == ExitCode.PARTIAL
    events = [json.loads(line) for line in done.stderr.splitlines()]
    tables = {e["table"]: e for e in events if e["event"] == "table"}
    assert tables["People"]["status"] == "ok"
    assert tables[workspace.notes]["status"] == "skipped"
    assert tables[workspace.notes]["error"]
    summary = json.loads(done.stdout)
    assert summary["totals"]["skipped"] == 1 and summary["status"] == "partial"


def test_a_table_that_fails_has_its_line_and_event_and_the_run_goes_on(
    workspace: Workspace, tmp_path: Path, proxy: Proxy
) -> None:
    """A table whose read fails (a 400 the server would not give) is reported; the next
    one is still copied."""
    job = workspace.job('[tables]\ninclude = ["People", "Notes"]\n[[destination]]\nparquet = "pq"\n')

    def refuse_people_rows(request: httpx.Request) -> httpx.Response | None:
        if request.url.path.endswith(f"{workspace.people}/rows"):
            return httpx.Response(400, json={"error": {"code": "BAD_REQUEST",
                                                        "message": "no reading today"}})
        return None

    events: list[tuple[str, dict[str, object]]] = []
    summary = run_job(
        load_job(job), RunOptions(environ=workspace.environ, transport=proxy(refuse_people_rows),
        report=lambda event, **fields: events.append((event, fields))))  # fmt: skip

    assert (summary.status, summary.exit_code) == ("failed", ExitCode.FAILED)
    reported = {f["table"]: f for e, f in events if e == "table"}
    assert reported["People"]["status"] == "failed"
    assert "no reading today" in str(reported["People"]["error"])
    assert reported["Notes"]["status"] == "ok", reported["Notes"]
    from connector.reporting import describe_event

    line = describe_event("table", **reported["People"])
    assert line is not None and "FAILED: " in line and "no reading today" in line


def test_a_misspelt_include_is_a_usage_error_before_anything_runs(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job('[tables]\ninclude = ["Peple"]\n[[destination]]\nparquet = "pq"\n')

    for args in ((), ("--log-format", "json")):
        done = sync(workspace, job, *args)
        assert done.returncode == ExitCode.USAGE
        assert "tables.include: " in done.stderr and "People" in done.stderr  # did you mean
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "pq").exists()


def test_json_failing_before_the_run_prints_the_full_summary_shape(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job('[[destination]]\nparquet = "pq"\nmode = "upsert"\n')

    done = sync(workspace, job, "--log-format", "json")

    assert done.returncode == ExitCode.USAGE
    summary = json.loads(done.stdout)
    assert set(summary) == SUMMARY_KEYS
    assert (summary["job"], summary["status"], summary["exit_code"]) == ("job", "failed", 2)
    assert "destination[0].mode" in summary["error"]
    assert summary["tables"] == [] and summary["totals"]["tables"] == 0
    assert done.stderr.count("\n") == 1  # the one error line


def test_retry_waits_are_json_events_and_text_lines(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(fail_rate=0.5, seed=7)
    job = ws.job('[tables]\ninclude = ["Notes"]\n[[destination]]\nparquet = "pq"\n')

    as_json = sync(ws, job, "--log-format", "json")
    as_text = sync(ws, job)

    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    retries = [e for e in map(json.loads, as_json.stderr.splitlines()) if e["event"] == "retry"]
    assert retries, as_json.stderr
    assert {"seconds", "attempt", "of", "reason", "method", "url", "message"} <= set(retries[0])
    assert retries[0]["message"].startswith("retrying in ")
    assert any(ln.strip().startswith("retrying in ") for ln in as_text.stderr.splitlines())
    assert ws.server.api_key not in as_json.stderr + as_text.stderr


def test_source_max_wait_bounds_the_retries(workspace: Workspace, tmp_path: Path) -> None:
    """The waits a run announces add up to no more than the job's max_wait, and end before
    the policy's tries run out (under the default budget, 120 s, all 9 retries would come)."""
    job = tmp_path / "gone.toml"
    job.write_text(
        f'[source]\nbase_url = "http://127.0.0.1:{free_port()}/v1"\napi_key_env = "JOB_KEY"\n'
        'max_wait = 1.5\n[[destination]]\nparquet = "pq"\n'
    )
    assert load_job(job).source.max_wait == 1.5

    done = sync(workspace, job, "--log-format", "json")

    assert done.returncode == ExitCode.FAILED
    events = [json.loads(line) for line in done.stderr.splitlines()]
    waits = [e for e in events if e["event"] == "retry"]
    assert waits, done.stderr
    assert sum(e["seconds"] for e in waits) <= 1.5
    assert len(waits) < waits[0]["of"] - 1  # the budget ended them, not the tries
    assert json.loads(done.stdout)["status"] == "failed"
    assert not (tmp_path / "pq").exists() or not list((tmp_path / "pq").iterdir())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must be a number of seconds >= 0, like 30, got -1"),
        ('"30"', "must be a number of seconds >= 0, like 30, got a string"),
        ("nan", "must be a number of seconds >= 0, like 30, got nan"),
        ("inf", "must be a number of seconds >= 0, like 30, got inf"),
        ("true", "must be a number of seconds >= 0, like 30, got a boolean"),
    ],
)
def test_a_bad_max_wait_names_the_key(tmp_path: Path, value: str, message: str) -> None:
    job = tmp_path / "job.toml"
    job.write_text(f'[source]\nmax_wait = {value}\n[[destination]]\nparquet = "pq"\n')

    with pytest.raises(ConfigError) as caught:
        load_job(job)

    assert str(caught.value) == f"{job}: source.max_wait: {message}"


@pytest.mark.parametrize(
    "value", ["sk_live_9aF3kQ2mZx81LpQeR7t", "Bearer abc", "tok-123456789012345678", "k ey"]
)
def test_api_key_env_holding_a_key_is_never_echoed(value: str) -> None:
    source = Source(base_url="http://127.0.0.1:1/v1", base_url_env="U", api_key_env=value)

    with pytest.raises(ConfigError) as caught:
        source.resolve({})

    assert value not in str(caught.value)
    assert str(caught.value) == (
        "source.api_key_env must name an environment variable (it looks like a key itself: "
        "put the key in a variable and name that)"
    )


def test_api_key_env_naming_an_unset_variable_names_it() -> None:
    source = Source(base_url="http://127.0.0.1:1/v1", base_url_env="U", api_key_env="MY_KEY")

    with pytest.raises(ConfigError, match="the environment variable MY_KEY is not set"):
        source.resolve({})


def test_push_date_format_reads_ambiguous_dates(workspace: Workspace, tmp_path: Path) -> None:
    (tmp_path / "people.csv").write_text("Name,Joined\nP001,05/03/2024\nP002,12/01/2024\n")
    job = workspace.job(
        '[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n'
        'date_format = "%d/%m/%Y"\n'
    )
    assert load_job(job).pushes[0].date_format == "%d/%m/%Y"

    summary = workspace.run(job)

    assert summary.status == "ok", summary.pushes
    rows = workspace.api("GET", f"/tables/{workspace.people}/rows", params={"limit": 1000})["rows"]
    joined = {r["fields"]["Name"]: r["fields"]["Joined"] for r in rows}
    assert (joined["P001"], joined["P002"]) == ("2024-03-05", "2024-01-12")


def test_a_bad_push_date_format_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "people.csv").write_text("Name\nx\n")
    job = tmp_path / "job.toml"
    job.write_text(
        '[source]\n[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n'
        'date_format = "dd/mm/yyyy"\n'
    )

    with pytest.raises(ConfigError, match=r"push\[0\]\.date_format: must be a strftime format"):
        load_job(job)


def test_a_push_failing_part_way_counts_what_it_wrote(
    workspace: Workspace, tmp_path: Path, proxy: Proxy
) -> None:
    """The second bulk create meets a server error that is not retried: the summary counts
    the rows the first one wrote, which are on the server; a rerun converges."""
    rows = "\n".join(f"New{i:03d},{i}" for i in range(250))
    (tmp_path / "people.csv").write_text(f"Name,Score\n{rows}\n")
    job = workspace.job('[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n')
    posts = 0

    def fail_the_second_create(request: httpx.Request) -> httpx.Response | None:
        nonlocal posts
        if request.method == "POST":
            posts += 1
            if posts >= 2:
                return httpx.Response(401, json={"error": {"code": "UNAUTHORIZED",
                                                            "message": "key revoked"}})
        return None

    summary = run_job(load_job(job), RunOptions(environ=workspace.environ,
                      transport=proxy(fail_the_second_create)))

    (push,) = summary.pushes
    assert push.status == "failed" and push.error is not None
    written = workspace.server.row_count(workspace.people) - 10
    assert 0 < written < 250
    assert push.created == written

    rerun = workspace.run(job)

    assert rerun.pushes[0].created == 250 - written
    assert workspace.server.row_count(workspace.people) == 260


def test_json_with_the_lock_held_prints_the_full_summary_with_exit_75(
    workspace: Workspace, tmp_path: Path
) -> None:
    from connector.jobs.lock import job_lock

    job = tmp_path / "lockme.toml"  # the job's name, not the file's, names the lock
    job.write_text('name = "nightly"\n[source]\napi_key_env = "JOB_KEY"\n'
                   '[[destination]]\nparquet = "pq"\n')

    with job_lock(tmp_path / "nightly.lock", wait=0, job="nightly"):
        done = sync(workspace, job, "--log-format", "json")

    assert done.returncode == ExitCode.LOCKED
    summary = json.loads(done.stdout)
    assert set(summary) == SUMMARY_KEYS
    assert (summary["job"], summary["status"], summary["exit_code"]) == ("nightly", "failed", 75)
    assert "already running" in summary["error"]
    assert not (tmp_path / "pq").exists()
