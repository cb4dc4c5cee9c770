"""`connector sync --metrics-file`: the run in node_exporter's textfile format.

Every file is parsed with prometheus_client's own parser and compared value by value with
the run's JSON summary, the job's state file (each table's ``synced_at``) and what the
server answered: the requests are counted independently by a forwarding HTTP proxy the
client goes through (``HTTP_PROXY``), which sees every answer, 429s included.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from connector.api.client import Client, RequestCounts
from connector.api.retry import RetryPolicy
from connector.cli import main
from connector.errors import ExitCode, NotSent
from connector.jobs.lock import job_lock
from connector.stamps import parse
from tests.fixtures.server import free_port
from tests.jobs import conftest as jobs
from tests.jobs.conftest import MakeWorkspace, Workspace

ROOT = Path(__file__).resolve().parents[1]
BOTH = '[tables]\ninclude = ["Notes", "People"]\n[[destination]]\nparquet = "pq"\n'
INCREMENTAL = '[sync]\nincremental = true\nlookback = 0\nmetrics_file = "metrics/job.prom"\n'
RUN_STATUSES = ("ok", "partial", "failed", "interrupted")

# The job tests' fixtures (a server with People and Notes, job files for it), used here too.
make_workspace, workspace = jobs.make_workspace, jobs.workspace


# --- what the file says --------------------------------------------------------------------

class Metrics:
    """A metrics file, parsed by prometheus_client: every sample by name and labels."""

    def __init__(self, path: Path) -> None:
        self.text = path.read_text(encoding="utf-8")
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(self.text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def __call__(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset({"sync_job": "job", **labels}.items()))]

    def by(self, name: str, label: str) -> dict[str, float]:
        """Every sample of `name`, keyed by one label's value."""
        return {dict(k)[label]: v for (n, k), v in self.samples.items() if n == name}

    def tables(self) -> dict[str, str]:
        """table id -> table name, from the last-success series."""
        return {dict(k)["table_id"]: dict(k)["table"] for (n, k) in self.samples
                if n == "connector_table_last_success_timestamp_seconds"}


def same(expected: Any) -> Any:
    """Equal to the microsecond: timestamps are ~1.8e9, where approx's default relative
    tolerance would be half an hour."""
    return pytest.approx(expected, rel=0, abs=1e-3)


def unix(stamp: str) -> float:
    return parse(stamp).timestamp()


def synced_at(ws: Workspace) -> dict[str, float]:
    """Each table's ``synced_at`` as the job's state file holds it (read as JSON)."""
    state = json.loads((ws.directory / "job.state.json").read_text())
    return {i: unix(t["synced_at"]) for i, t in state["tables"].items()}


# --- the independent count: a forwarding proxy ---------------------------------------------

class CountingProxy:
    """A plain HTTP proxy on a free 127.0.0.1 port: forwards each GET to the URL asked for
    and counts the statuses the server answered."""

    HOP = frozenset(
        {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"})

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._upstream = httpx.Client(trust_env=False, timeout=30.0)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("authorization", "accept")}
                answer = proxy._upstream.get(self.path, headers=headers)
                with proxy._lock:
                    proxy.statuses[str(answer.status_code)] += 1
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in proxy.HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def counted(self) -> dict[str, float]:
        with self._lock:
            return {k: float(v) for k, v in self.statuses.items()}

    @property
    def environ(self) -> dict[str, str | None]:
        """The variables that send a client through this proxy (and no other)."""
        unset: dict[str, str | None] = dict.fromkeys(
            ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "HTTPS_PROXY",
             "https_proxy"))
        return {**unset, "HTTP_PROXY": self.url}


@pytest.fixture
def proxy() -> Iterator[CountingProxy]:
    running = CountingProxy()
    running._thread.start()
    try:
        yield running
    finally:
        running._server.shutdown()
        running._server.server_close()
        running._thread.join()
        running._upstream.close()


def sync(ws: Workspace, job: Path, proxy: CountingProxy | None, *args: str,
         env: dict[str, str | None] | None = None) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """`connector sync JOB --log-format json ARGS`: exit code, JSON summary, events."""
    environ = {**ws.environ, **(proxy.environ if proxy else {}), **(env or {})}
    done = CliRunner().invoke(main, ["sync", str(job), "--log-format", "json", *args], env=environ)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return done.exit_code, json.loads(done.stdout), events


def metered_job(ws: Workspace, body: str = BOTH + INCREMENTAL, **options: Any) -> Path:
    (ws.directory / "metrics").mkdir(exist_ok=True)
    return ws.job(body, **options)


def assert_run(m: Metrics, summary: dict[str, Any]) -> None:
    """The run's own series equal the summary's values."""
    assert m.by("connector_run_status", "status") == {
        s: float(s == summary["status"]) for s in RUN_STATUSES
    }
    assert m("connector_run_duration_seconds") == same(summary["seconds"])
    assert m("connector_last_run_timestamp_seconds") == same(unix(summary["finished_at"]))


def assert_tables(m: Metrics, *summaries: dict[str, Any]) -> None:
    """Row counters are the sum of the runs' per-table counts."""
    for what in ("read", "written", "deleted"):
        expected: Counter[str] = Counter()
        for summary in summaries:
            for t in summary["tables"]:
                expected[t["table_id"]] += t[f"rows_{what}"]
        counted = m.by(f"connector_table_rows_{what}_total", "table_id")
        assert counted == {k: float(v) for k, v in expected.items()}, what


# --- the scenarios ---------------------------------------------------------------------------


def test_a_good_run_writes_its_counts_and_the_next_adds_to_them(
    make_workspace: MakeWorkspace, proxy: CountingProxy
) -> None:
    ws = make_workspace(people=120)
    odd = ws.server.create_table({"name": 'Odd "name" \\ with é', "columns": [{"name": "N", "type": "number"}]})
    ws.server.insert_rows(odd, [{"N": 1}, {"N": 2}, {"N": 3}])
    job = metered_job(ws, '[[destination]]\nparquet = "pq"\n' + INCREMENTAL)
    path = ws.directory / "metrics" / "job.prom"

    code, first, _ = sync(ws, job, proxy)

    assert (code, first["status"]) == (0, "ok")
    m = Metrics(path)
    assert m.types["connector_table_rows_read"] == "counter"
    assert m.types["connector_run_duration_seconds"] == "gauge"
    assert_run(m, first)
    assert m("connector_last_success_timestamp_seconds") == same(unix(first["finished_at"]))
    assert m.by("connector_runs_total", "status") == {s: float(s == "ok") for s in RUN_STATUSES}
    assert m.by("connector_requests_total", "status") == proxy.counted()
    assert set(proxy.counted()) == {"200"}
    assert (m("connector_retries_total"), m("connector_rate_limited_total")) == (0.0, 0.0)
    assert m.tables() == {ws.people: "People", ws.notes: "Notes", odd: 'Odd "name" \\ with é'}
    assert_tables(m, first)
    assert m.by("connector_table_last_success_timestamp_seconds", "table_id") == same(
        synced_at(ws))
    assert ws.server.api_key not in m.text

    gone = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 2})["rows"]
    ws.api("DELETE", f"/tables/{ws.people}/rows/bulk", json={"row_ids": [r["id"] for r in gone]})
    ws.server.insert_rows(ws.notes, [{"Text": "again"}])
    code, second, _ = sync(ws, job, proxy)

    assert (code, second["status"]) == (0, "ok")
    assert {t["table"]: t["rows_deleted"] for t in second["tables"]}["People"] == 2
    m = Metrics(path)
    assert_run(m, second)
    assert m.by("connector_runs_total", "status") == {s: 2.0 * (s == "ok") for s in RUN_STATUSES}
    assert m.by("connector_requests_total", "status") == proxy.counted()  # both runs'
    assert_tables(m, first, second)
    assert m.by("connector_table_last_success_timestamp_seconds", "table_id") == same(
        synced_at(ws))
    assert m("connector_last_success_timestamp_seconds") == same(unix(second["finished_at"]))


def test_a_failed_table_and_a_failed_run_keep_the_last_successes(
    make_workspace: MakeWorkspace, proxy: CountingProxy
) -> None:
    ws = make_workspace(people=30)
    job = metered_job(ws)
    path = ws.directory / "metrics" / "job.prom"
    code, first, _ = sync(ws, job, proxy)
    assert code == 0
    before = synced_at(ws)

    # People's held file is no longer Parquet: its merge fails, Notes goes on.
    (ws.directory / "pq" / "People.parquet").write_text("not parquet")
    ws.server.insert_rows(ws.people, [{"Name": "late"}])
    ws.server.insert_rows(ws.notes, [{"Text": "new"}])
    code, second, _ = sync(ws, job, proxy)

    assert (code, second["status"]) == (ExitCode.FAILED, "failed")
    assert {t["table"]: t["status"] for t in second["tables"]} == {"People": "failed", "Notes": "ok"}
    m = Metrics(path)
    assert_run(m, second)
    assert m.by("connector_runs_total", "status") == {
        "ok": 1.0, "partial": 0.0, "failed": 1.0, "interrupted": 0.0}
    assert m("connector_last_success_timestamp_seconds") == same(unix(first["finished_at"]))
    after = synced_at(ws)
    assert after[ws.people] == before[ws.people] and after[ws.notes] > before[ws.notes]
    assert m.by("connector_table_last_success_timestamp_seconds", "table_id") == same(after)
    assert_tables(m, first, second)
    assert m.by("connector_requests_total", "status") == proxy.counted()

    # A run that stops before its table list (the key is refused) keeps every table's series.
    code, third, _ = sync(ws, job, proxy, env={"JOB_KEY": "not-a-key"})

    assert (code, third["status"], third["tables"]) == (ExitCode.USAGE, "failed", [])
    m = Metrics(path)
    assert_run(m, third)
    assert m("connector_runs_total", status="failed") == 2.0
    assert m("connector_last_success_timestamp_seconds") == same(unix(first["finished_at"]))
    assert m.by("connector_table_last_success_timestamp_seconds", "table_id") == same(after)
    assert_tables(m, first, second)
    assert m.by("connector_requests_total", "status") == proxy.counted()
    assert proxy.counted()["401"] >= 1
    assert "not-a-key" not in m.text


def test_a_throttled_run_counts_its_429s_and_retries(
    make_workspace: MakeWorkspace, proxy: CountingProxy
) -> None:
    ws = make_workspace(people=400, rate_limit=4, rate_headers="none")  # learned: 429s
    job = metered_job(ws)
    time.sleep(1.0)  # the seeding left the bucket alone; start from a full burst all the same

    code, summary, events = sync(ws, job, proxy)

    assert (code, summary["status"]) == (0, "ok")
    counted = proxy.counted()
    assert counted.get("429", 0) > 0, f"the server never throttled: {counted}"
    m = Metrics(Path(ws.directory / "metrics" / "job.prom"))
    assert m.by("connector_requests_total", "status") == counted
    assert m("connector_rate_limited_total") == counted["429"]
    # every 429 was retried (the run is ok), and each retry was announced as an event
    assert m("connector_retries_total") == counted["429"]
    assert m("connector_retries_total") == sum(e["event"] == "retry" for e in events)
    assert_run(m, summary)
    assert_tables(m, summary)


def test_an_interrupted_run_writes_its_status_and_keeps_what_it_did_not_finish(
    make_workspace: MakeWorkspace, proxy: CountingProxy, tmp_path: Path
) -> None:
    ws = make_workspace(people=1000, latency_ms=40)
    job = metered_job(ws, concurrency=1)
    path = ws.directory / "metrics" / "job.prom"
    code, first, _ = sync(ws, job, None)
    assert code == 0
    before = synced_at(ws)

    env = {**os.environ, **ws.environ}
    run = subprocess.Popen(
        [sys.executable, "-m", "connector", "sync", str(job), "--log-format", "json", "--verify"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert run.stderr is not None
    for line in run.stderr:  # Notes's table event: People is being read (a page every 40 ms)
        if '"Notes"' in line:
            break
    time.sleep(0.2)
    assert run.poll() is None, "the run ended before the signal"
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=60)

    assert run.returncode == ExitCode.TERMINATED
    summary = json.loads(out)
    assert summary["status"] == "interrupted"
    m = Metrics(path)
    assert_run(m, summary)
    assert m.by("connector_runs_total", "status") == {
        "ok": 1.0, "partial": 0.0, "failed": 0.0, "interrupted": 1.0}
    assert m("connector_last_success_timestamp_seconds") == same(unix(first["finished_at"]))
    after = synced_at(ws)
    assert after[ws.people] == before[ws.people]  # in flight: its state was left as it was
    assert m.by("connector_table_last_success_timestamp_seconds", "table_id") == same(after)
    assert m.tables() == {ws.people: "People", ws.notes: "Notes"}
    assert [t["table"] for t in summary["tables"]] == ["Notes"]
    assert_tables(m, first, summary)


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "prepare", "says"),
    [
        ("metrics/job.txt", None, "must end in .prom"),
        ("absent/job.prom", None, "does not exist"),
        ("metrics/job.prom", "not metrics {\n", "is not in the Prometheus text format"),
        ("metrics/job.prom", 'connector_runs_total{status="ok",sync_job="other"} 1\n',
         "not job 'job''s"),
        ("metrics/job.prom", "node_load1 0.5\n", "not job 'job''s"),
    ],
)
def test_a_metrics_file_that_cannot_be_ours_is_refused_before_the_run(
    workspace: Workspace, setting: str, prepare: str | None, says: str
) -> None:
    job = metered_job(workspace, BOTH + INCREMENTAL.replace("metrics/job.prom", setting))
    target = workspace.directory / setting
    if prepare is not None:
        target.write_text(prepare)

    done = CliRunner().invoke(main, ["sync", str(job)], env=workspace.environ)

    assert done.exit_code == ExitCode.USAGE
    assert f"{job}: sync.metrics_file: " in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert not (workspace.directory / "job.state.json").exists()  # nothing ran
    assert not (workspace.directory / "pq").exists()
    assert (target.read_text() if target.exists() else None) == prepare


def test_the_option_overrides_the_job_file_and_names_itself(workspace: Workspace) -> None:
    job = metered_job(workspace)
    given = workspace.directory / "elsewhere.prom"

    done = CliRunner().invoke(main, ["sync", str(job), "--metrics-file", str(given.with_suffix(""))],
                              env=workspace.environ)
    assert done.exit_code == ExitCode.USAGE
    assert "--metrics-file: " in done.stderr and "must end in .prom" in done.stderr

    done = CliRunner().invoke(main, ["sync", str(job), "--metrics-file", str(given)],
                              env=workspace.environ)
    assert done.exit_code == 0, done.output
    assert Metrics(given)("connector_runs_total", status="ok") == 1.0
    assert not (workspace.directory / "metrics" / "job.prom").exists()


def test_no_metrics_for_a_dry_run_or_a_run_the_lock_kept_out(workspace: Workspace) -> None:
    job = metered_job(workspace)
    path = workspace.directory / "metrics" / "job.prom"

    done = CliRunner().invoke(main, ["sync", str(job), "--dry-run"], env=workspace.environ)
    assert done.exit_code == 0 and not path.exists()

    with job_lock(workspace.directory / "job.lock", wait=0, job="job"):
        done = CliRunner().invoke(main, ["sync", str(job)], env=workspace.environ)
    assert done.exit_code == ExitCode.LOCKED and not path.exists()


def test_without_the_extra_the_option_is_one_line_naming_it(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    job = metered_job(workspace)

    done = CliRunner().invoke(main, ["sync", str(job)], env=workspace.environ)

    assert done.exit_code == ExitCode.USAGE
    assert done.stderr == (
        f"error: {job}: sync.metrics_file needs an optional dependency: "
        "pip install 'table-data-connector[metrics]'\n"
    )
    assert not (workspace.directory / "job.state.json").exists()


def test_a_client_counts_every_try_also_those_that_got_no_answer() -> None:
    """Nothing listens: every try is an ``error``, each retry was announced, and clients
    given one tally add to it."""
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    shared = RequestCounts()
    waits: list[object] = []
    for _ in range(2):
        with Client(base_url, "key", retry=RetryPolicy(total_seconds=0.3, on_retry=waits.append), counts=shared) as client:
            with pytest.raises(NotSent):
                client.list_tables()
            assert client.counts is shared
    assert len(waits) >= 2
    assert shared.by_status == {RequestCounts.NO_ANSWER: len(waits) + 2}  # one first try each
    assert (shared.retries, shared.throttled) == (len(waits), 0)
