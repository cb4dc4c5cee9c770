"""Tables run in parallel under one budget: a workspace of many small tables costs about one
round trip per few tables, not one per table in series; every destination ends up exact.

Parallelism is proven by what the server saw: reads of different tables in flight at once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from connector.destinations import DestinationConfig
from connector.jobs.config import one_shot_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.results import RunSummary
from tests.fixtures.server import ROOT, RunningServer, ServerFactory

TABLES = 12
ROWS = 30


class Overlap(httpx.AsyncBaseTransport):
    """The real transport, noting which tables' rows are being read at each moment."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._reading: dict[str, int] = {}
        self.most_tables_at_once = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.split("/")
        table = parts[3] if parts[-1] == "rows" else None
        if table is not None:
            self._reading[table] = self._reading.get(table, 0) + 1
            self.most_tables_at_once = max(self.most_tables_at_once, len(self._reading))
        try:
            response = await self._inner.handle_async_request(request)
            await response.aread()
            return response
        finally:
            if table is not None:
                self._reading[table] -= 1
                if not self._reading[table]:
                    del self._reading[table]

    async def aclose(self) -> None:
        await self._inner.aclose()


def many_tables(server_factory: ServerFactory, **options: Any) -> tuple[RunningServer, dict[str, str]]:
    server = server_factory(latency_ms=50, **options)
    tables = {}
    for t in range(TABLES):
        name = f"T{t:02d}"
        tables[name] = server.create_table(
            {"name": name, "columns": [{"name": "N", "type": "number"}, {"name": "S", "type": "text"}]}
        )
        server.insert_rows(tables[name], [{"N": t * 1000 + i, "S": f"{name}-{i}"} for i in range(ROWS)])
    return server, tables


def run(server: RunningServer, destination: DestinationConfig, transport: httpx.AsyncBaseTransport) -> RunSummary:
    job = one_shot_job("export", destination)
    environ = {"CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key}
    return run_job(job, RunOptions(environ=environ, transport=transport))


def expected(name: str) -> list[tuple[float, str]]:
    t = int(name[1:])
    return [(float(t * 1000 + i), f"{name}-{i}") for i in range(ROWS)]


def test_an_export_of_many_tables_reads_them_at_once_and_writes_each_exactly(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server, tables = many_tables(server_factory)
    seen = Overlap()

    summary = run(server, DestinationConfig("parquet", str(tmp_path), "replace", "--out"), seen)

    assert summary.status == "ok" and len(summary.tables) == TABLES, summary.error or [
        t.error for t in summary.tables if t.error]
    assert seen.most_tables_at_once >= 4
    assert summary.concurrency >= 4 and summary.max_concurrency == 32
    for name in tables:
        frame = pq.read_table(tmp_path / f"{name}.parquet").to_pydict()
        assert sorted(zip(frame["N"], frame["S"], strict=True)) == expected(name)


def test_a_sqlite_load_reads_in_parallel_and_writes_one_table_at_a_time(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server, tables = many_tables(server_factory)
    seen = Overlap()
    url = f"sqlite:///{tmp_path / 'wh.db'}"

    summary = run(server, DestinationConfig("sql", url, "replace", "--to"), seen)

    assert summary.status == "ok", summary
    assert seen.most_tables_at_once >= 4
    with sqlite3.connect(tmp_path / "wh.db") as db:
        for name in tables:
            assert sorted(db.execute(f'SELECT "N", "S" FROM "{name}"')) == expected(name)


def test_a_table_that_fails_does_not_stop_the_others(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server, tables = many_tables(server_factory)
    blocked = tables["T05"]

    class Refusing(Overlap):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith(f"{blocked}/rows"):
                return httpx.Response(404, json={"error": {"code": "NOT_FOUND", "message": "gone"}})
            return await super().handle_async_request(request)

    summary = run(server, DestinationConfig("parquet", str(tmp_path), "replace", "--out"), Refusing())

    statuses = {t.table: t.status for t in summary.tables}
    assert statuses.pop("T05") == "failed"
    assert set(statuses.values()) == {"ok"} and len(statuses) == TABLES - 1
    assert summary.exit_code == 1
    assert not (tmp_path / "T05.parquet").exists()
    assert (tmp_path / "T11.parquet").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_mid_way_leaves_every_table_whole_and_a_rerun_finishes(
    server_factory: ServerFactory, tmp_path: Path, signum: int
) -> None:
    server, tables = many_tables(server_factory)
    for table_id in tables.values():  # enough rows that the run is surely stopped mid-way
        server.insert_rows(table_id, [{"N": -1, "S": "more"}] * 400)
    job = tmp_path / "job.toml"
    job.write_text(
        '[source]\napi_key_env = "JOB_KEY"\npage_size = 20\nmax_concurrency = 4\n'
        '[[destination]]\nparquet = "out"\n[[destination]]\nurl = "sqlite:///wh.db"\n'
    )
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "JOB_KEY": server.api_key,
           "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "connector", "sync", str(job), "--log-format", "json"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:  # the first table finished (events go to stderr): the others
        if '"event": "table"' in line:  # are in flight
            break
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)

    assert process.returncode == (130 if signum == signal.SIGINT else 143), err
    assert "Traceback" not in err
    finished = {Path(p).stem for p in (tmp_path / "out").glob("*.parquet")}
    assert 1 <= len(finished) < TABLES  # it stopped mid-way
    for name in finished:
        table = pq.read_table(tmp_path / "out" / f"{name}.parquet")
        assert table.num_rows == ROWS + 400  # whole, never half a table
    assert not list((tmp_path / "out").glob(".*partial*"))

    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    with sqlite3.connect(tmp_path / "wh.db") as db:
        for name in tables:
            (count,) = db.execute(f'SELECT count(*) FROM "{name}"').fetchone()
            assert count == ROWS + 400
