"""A nightly job meets its lake: parallel Delta syncs to object storage never hang, a signal
during a commit ends the run at once, before the commit lands, and a store that stops
answering fails the run within the destination's time limit, naming it.

Against the reference server and a real S3 endpoint (moto, a process of its own); whole
`connector sync` processes, each bounded by a timeout, so a hang fails the test instead of
stalling the suite.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog

from connector.locations import filesystem, within
from connector.process import STOP_GRACE
from tests.destinations.test_object_storage import StallingProxy
from tests.fixtures.azurite import connection_string
from tests.fixtures.s3 import S3Bucket
from tests.fixtures.server import ROOT
from tests.jobs.conftest import MakeWorkspace, Workspace, person
from tests.jobs.test_lake_jobs import reader_options

#: Four tables written in parallel, as in the report (two table threads inside
#: write_deltalake, one inside DeltaTable.is_deltatable).
EXTRA = [{"name": f"Extra{i}", "columns": [{"name": "Text", "type": "text"}]} for i in range(2)]


def sync(ws: Workspace, job: Path, env: dict[str, str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "connector", "sync", str(job)], cwd=ROOT,
        env={**os.environ, **ws.environ, **env}, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def four_tables(make_workspace: MakeWorkspace) -> Workspace:
    ws = make_workspace(people=300)
    for spec in EXTRA:
        table = ws.server.create_table(spec)
        ws.server.insert_rows(table, [{"Text": f"t{i}"} for i in range(200)])
    return ws


def test_parallel_delta_syncs_to_s3_finish_every_time(four_tables: Workspace, s3: S3Bucket) -> None:
    """Before the fix, 3 of 23 such runs hung for good (deltalake's runtime threads waited for
    the GIL inside the Python generator feeding the write, while a thread asking
    is_deltatable held the GIL and waited for that runtime)."""
    ws = four_tables
    job = ws.job(
        "[sync]\nincremental = true\nlookback = 0\n"
        f'[[destination]]\ndelta = "{s3.url("lake")}"\n', concurrency=8,
    )
    for run in range(5):
        done = sync(ws, job, s3.server.env(), timeout=120)
        assert done.returncode == 0, (run, done.stderr[-2000:])
        ws.server.insert_rows(ws.people, [person(1000 + run)])
    held = DeltaTable(s3.url("lake/People"), storage_options=reader_options(s3)).to_pyarrow_table()
    assert held.num_rows == 300 + 5 - 1  # the last run's insert is not synced yet


STRESS = """
import sys, threading, time
from connector.destinations import DestinationConfig, TableChange, Target, open_destination
from connector.schema import Column, Table, arrow_schema
import pyarrow as pa

root, seconds = sys.argv[1], float(sys.argv[2])
tables = [Table(f"tbl_{i}", f"T{i}", (Column("Text", "text"),)) for i in range(3)]
destination = open_destination(DestinationConfig("delta", root, "replace", "stress"))
stop = time.monotonic() + seconds

def rows(table):
    schema = arrow_schema(table)
    for b in range(100):
        sum(range(20000))  # Python work between batches, as a read's conform is
        ids = [f"r{b}-{i}" for i in range(100)]
        yield pa.RecordBatch.from_pydict(
            {"_id": ids, "_created_at": [None] * 100, "_updated_at": [None] * 100,
             "Text": ids}, schema=schema)

def write(table):
    while time.monotonic() < stop:
        destination.apply(Target(table, table.name), TableChange("replace", rows(table)))

def ask(table):
    while time.monotonic() < stop:
        destination.stored(Target(table, table.name))

threads = [threading.Thread(target=write, args=(t,)) for t in tables]
threads += [threading.Thread(target=ask, args=(tables[0],)) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done")
"""


def test_delta_writes_and_table_lookups_on_threads_never_wait_for_each_other(
    s3: S3Bucket,
) -> None:
    """The hang's own conditions, held for 20 s: three tables written to S3 at once, fed by
    batches made in Python, while two threads keep asking whether a table exists. Fed from
    a Python iterator, deltalake's runtime hung here within a minute; fed from the spool it
    cannot."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", STRESS, s3.url("stress"), "20"], cwd=ROOT,
            env={**os.environ, **s3.server.env()}, capture_output=True, text=True, timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("Delta writes on threads hung (no progress for 100 s past their 20 s)")
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-3000:]


def sigterm_mid_commit(
    ws: Workspace, job: Path, s3: S3Bucket, commit: Callable[[bytes], bool]
) -> None:
    """`connector sync` of `job`, SIGTERM once its request `commit` picks is held by a proxy
    in front of S3: the run says it was stopped and ends well within `STOP_GRACE`."""
    proxy = StallingProxy(urlsplit(s3.server.endpoint).port or 80, 0, commit)
    try:
        env = {**s3.server.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
        run = subprocess.Popen(
            [sys.executable, "-m", "connector", "sync", str(job)], cwd=ROOT,
            env={**os.environ, **ws.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proxy.stalled.wait(120), run.communicate(timeout=60)
        run.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        out, err = run.communicate(timeout=60)
        took = time.monotonic() - stopped
    finally:
        proxy.close()

    assert run.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "Traceback" not in out + err
    assert took < STOP_GRACE, f"{took:.1f} s: the stop waited for the commit"


def people_commit(head: bytes) -> bool:
    """The request that commits a new version of the People table: a PUT into its log."""
    return head.startswith(b"PUT ") and b"/lake/People/_delta_log/" in head


def test_sigterm_while_a_delta_commit_is_under_way_ends_the_run_at_once_and_commits_nothing(
    make_workspace: MakeWorkspace, s3: S3Bucket
) -> None:
    """deltalake's write runs in native code a stop cannot interrupt; waiting for it (as for
    a table that unwinds) would let its commit land after the signal. The commit's PUT is
    held by a proxy in front of S3 when the signal comes: the run ends well within
    `STOP_GRACE`, and the table keeps its version."""
    ws = make_workspace(people=2_000)
    job = ws.job(f'[[destination]]\ndelta = "{s3.url("lake")}"\n', concurrency=8)
    first = sync(ws, job, s3.server.env(), timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    options = reader_options(s3)
    version = DeltaTable(s3.url("lake/People"), storage_options=options).version()
    ws.server.insert_rows(ws.people, [person(i) for i in range(2_000, 2_100)])

    sigterm_mid_commit(ws, job, s3, people_commit)
    assert DeltaTable(s3.url("lake/People"), storage_options=options).version() == version
    rerun = sync(ws, job, s3.server.env(), timeout=180)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    names = DeltaTable(s3.url("lake/People"), storage_options=options).to_pyarrow_table(
        columns=["Name"]).column("Name").to_pylist()
    assert sorted(names) == sorted(person(i)["Name"] for i in range(2_100))


def people_metadata(head: bytes) -> bool:
    """The request that publishes the People table's next Iceberg metadata file: inside
    pyiceberg's ``commit_transaction``, before the catalog's row moves to it."""
    line = head.split(b"\r\n", 1)[0]
    return line.startswith(b"PUT ") and b"/People/metadata/" in line and b".metadata.json" in line


def test_sigterm_while_an_iceberg_commit_is_under_way_ends_the_run_at_once_and_commits_nothing(
    make_workspace: MakeWorkspace, s3: S3Bucket, postgres_db: str
) -> None:
    """As for Delta: the commit's metadata file is held by a proxy in front of S3 when the
    signal comes (a PostgreSQL catalog, the warehouse in S3). The run ends well within
    `STOP_GRACE`, the catalog still names the snapshot it named, and a rerun writes every row."""
    ws = make_workspace(people=2_000)
    job = ws.job(
        f'[[destination]]\niceberg = "{s3.url("lake")}"\ncatalog = "{postgres_db}"\n',
        concurrency=8,
    )
    first = sync(ws, job, s3.server.env(), timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    snapshot = iceberg_snapshot(s3, postgres_db)
    ws.server.insert_rows(ws.people, [person(i) for i in range(2_000, 2_100)])

    sigterm_mid_commit(ws, job, s3, people_metadata)
    assert iceberg_snapshot(s3, postgres_db) == snapshot
    rerun = sync(ws, job, s3.server.env(), timeout=180)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    names = iceberg_people(s3, postgres_db).column("Name").to_pylist()
    assert sorted(names) == sorted(person(i)["Name"] for i in range(2_100))


def iceberg_catalog(s3: S3Bucket, catalog: str) -> SqlCatalog:
    """The job's catalog as pyiceberg itself opens it, reaching moto directly."""
    return SqlCatalog("connector", uri=catalog, warehouse=s3.url("lake"),
                      **{"s3.endpoint": s3.server.endpoint, "s3.region": "us-east-1"})


def iceberg_snapshot(s3: S3Bucket, catalog: str) -> int | None:
    opened = iceberg_catalog(s3, catalog)
    try:
        return opened.load_table(("tabledata", "People")).metadata.current_snapshot_id
    finally:
        opened.close()


def iceberg_people(s3: S3Bucket, catalog: str) -> pa.Table:
    opened = iceberg_catalog(s3, catalog)
    try:
        return opened.load_table(("tabledata", "People")).scan(selected_fields=("Name",)).to_arrow()
    finally:
        opened.close()


@dataclass
class SilentEndpoint:
    """An HTTP endpoint that accepts connections, reads, and never answers."""

    url: str
    #: The request line of each request it was sent (``GET /bucket?list-type=2... HTTP/1.1``).
    requests: list[str]


@contextlib.contextmanager
def silent_endpoint() -> Iterator[SilentEndpoint]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    endpoint = SilentEndpoint(f"http://127.0.0.1:{listener.getsockname()[1]}", [])
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                conn.settimeout(2.0)
                head = conn.recv(4096)
            except OSError:
                continue
            held.append(conn)
            endpoint.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_a_store_that_stops_answering_fails_the_run_within_its_timeout(
    workspace: Workspace, s3: S3Bucket, kind: str
) -> None:
    """Each request is tried 5 times (s3fs's own tries, botocore's retries off), each
    bounded by the destination's timeout: about 6 times the timeout in all."""
    with silent_endpoint() as endpoint:
        env = {**s3.server.env(), "AWS_ENDPOINT_URL": endpoint.url}
        took = fails_naming_the_store(workspace, kind, "s3://quiet-bucket", env)

    tries = Counter(endpoint.requests)
    assert tries and max(tries.values()) == 5, tries
    assert took < 20, f"took {took:.0f} s with a 1 s time limit"


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_an_azure_store_that_stops_answering_fails_the_run_within_its_timeout(
    workspace: Workspace, kind: str
) -> None:
    """adlfs bounds only uploads and downloads, and its client retries for minutes: a
    listing gets `DEADLINE_TIMES` the timeout in all."""
    with silent_endpoint() as endpoint:
        env = {"AZURE_STORAGE_CONNECTION_STRING": connection_string(endpoint.url)}
        took = fails_naming_the_store(workspace, kind, "az://quiet", env)

    assert endpoint.requests  # the store was asked, and said nothing
    assert took < 20, f"took {took:.0f} s with a 1 s time limit"


@pytest.mark.needs_server  # the silent endpoint stands in for a store (and azure-core probes `uname`)
def test_an_azure_call_that_gets_no_answer_is_given_6x_the_timeout() -> None:
    """`within`, which a destination's calls and a push source's first look (`info`) go
    through on Azure: here that look, with a 1 s timeout (a push's own is the default 60 s,
    too long to wait out in a test)."""
    with silent_endpoint() as endpoint:
        env = {"AZURE_STORAGE_CONNECTION_STRING": connection_string(endpoint.url)}
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            fs = filesystem("az://quiet", timeout=1)
            began = time.monotonic()
            with pytest.raises(TimeoutError, match="no answer within 6 s"):
                within(fs, 1, "info", "quiet/sheet.csv")
            took = time.monotonic() - began

    assert endpoint.requests
    assert 5 < took < 10


def fails_naming_the_store(workspace: Workspace, kind: str, store: str, env: dict[str, str]) -> float:
    """A sync into `store`/out with a 1 s timeout: it fails naming the store, in one line;
    returns how long it took."""
    job = workspace.job(f'[[destination]]\n{kind} = "{store}/out"\ntimeout = 1\n')
    began = time.monotonic()
    done = sync(workspace, job, env, timeout=120)
    took = time.monotonic() - began
    assert done.returncode == 1, done.stderr
    assert store in done.stdout  # the summary line names the store
    assert "Traceback" not in done.stdout + done.stderr
    return took
