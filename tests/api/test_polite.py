"""A polite client, as users run it: `connector export`, `sync` and `push` as processes against
a rate-limited reference server whose answers are counted by status (`bench._procs`).

A server that publishes nothing: a key's limit is learned once, the first process meets it (a
few 429s while it learns), and each later process, of any command, starts from what was
learned (`RateMemory`), so it is refused about once (where the burst allowance it starts with
runs out), however many tables it reads in parallel: they share the key's one pacer. A limit
since lifted is forgotten by the next process. A server that publishes its limit is never
refused, by any process.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench._procs import CountingServer, start
from connector.api.ratelimit import Learned, RateMemory
from tests.fixtures.server import ROOT

pytestmark = pytest.mark.needs_server  # every test runs the connector against a server

LIMIT = 25  #: requests a second the server allows the key (its burst allowance too)
TABLES = 3
ROWS = 400  #: each: 21 pages of 20 rows (they overlap by one), 63 a read of every table
PAGE = "20"
UPDATES = 60  #: rows a push changes: one PATCH each
#: 429s a later run may meet: where its burst allowance runs out, one, and those of the
#: requests on their way with it (about `EXCESS`, reckoned by how long answers take now, so
#: a loaded machine's slow answers do not put more on their way). Without the memory every
#: run meets the limit anew: 9 429s a run here.
LATER_429S = 3
SPEC = {"columns": [{"name": "Code", "type": "text"}, {"name": "Qty", "type": "number"}]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[CountingServer]:
    """A server that says nothing of its limit (``--rate-headers none``)."""
    directory = tmp_path / "server"
    directory.mkdir()
    running = start(directory, rate_limit=LIMIT, rate_headers="none")
    try:
        yield running
    finally:
        running.stop()


def seed(server: CountingServer) -> list[str]:
    ids = []
    for t in range(TABLES):
        table = server.create_table({**SPEC, "name": f"T{t}"})
        server.insert_rows(table, [{"Code": f"c{i:04d}", "Qty": i} for i in range(ROWS)])
        ids.append(table)
    return ids


def connector(server: CountingServer, cache: Path, *args: str, spend: bool = True) -> tuple[dict[str, int], float, str]:
    """One `connector` process with the server's URL and key and `cache` for what it learns,
    run after the key's burst allowance is spent (unless not `spend`: a server with no
    limit); the answers it got by status, its wall time, and its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    env |= {"CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key,
            "CONNECTOR_CACHE_DIR": str(cache)}
    with server.client() as http:  # another client of the key spends the allowance
        while spend and http.get("/tables").status_code != 429:
            pass
    server.take_counts()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "connector", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return server.take_counts(), took, done.stdout


def server_rows(server: CountingServer, table_id: str) -> dict[str, dict[str, Any]]:
    with server.client() as http:
        page = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()
    return {row["id"]: row["fields"] for row in page["rows"]}


def assert_polite(runs: list[tuple[dict[str, int], float, str]]) -> None:
    """Every run after the first meets at most `LATER_429S` 429s; none is slow (a pace
    learned far too low would take many times its requests / LIMIT)."""
    for counts, took, _ in runs[1:]:
        assert counts.get("429", 0) <= LATER_429S, runs
        requests = sum(counts.values())
        assert took < 3 * requests / LIMIT + 10, (took, requests)


def test_exports_after_the_first_start_at_the_learned_pace(server: CountingServer, tmp_path: Path) -> None:
    ids = seed(server)
    out = tmp_path / "out"
    runs = [connector(server, tmp_path / "cache", "export", "--out", str(out), "--page-size", PAGE)
            for _ in range(3)]
    assert_polite(runs)
    for t, table_id in enumerate(ids):  # every row, value by value
        written = pq.read_table(out / f"T{t}.parquet").to_pylist()
        assert {r["_id"]: {"Code": r["Code"], "Qty": r["Qty"]} for r in written} == server_rows(server, table_id)


def test_syncs_after_the_first_start_at_the_learned_pace(server: CountingServer, tmp_path: Path) -> None:
    ids = seed(server)
    job = tmp_path / "job.toml"
    job.write_text(
        f'[source]\npage_size = {PAGE}\n[sync]\nincremental = false\nstate_dir = "{tmp_path / "state"}"\n'
        f'[[destination]]\nparquet = "{tmp_path / "synced"}"\n',
        encoding="utf-8",
    )
    runs = [connector(server, tmp_path / "cache", "sync", str(job)) for _ in range(3)]
    assert_polite(runs)
    for t, table_id in enumerate(ids):
        written = pq.read_table(tmp_path / "synced" / f"T{t}.parquet").to_pylist()
        assert {r["_id"]: {"Code": r["Code"], "Qty": r["Qty"]} for r in written} == server_rows(server, table_id)


def test_pushes_after_the_first_start_at_the_learned_pace(server: CountingServer, tmp_path: Path) -> None:
    [table_id, *_] = seed(server)
    runs = []
    for run in range(3):  # each run changes UPDATES rows: one PATCH each
        sheet = tmp_path / f"run{run}.csv"
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["Code", "Qty"])
        writer.writerows([f"c{i:04d}", 1000 * (run + 1) + i] for i in range(UPDATES))
        sheet.write_text(text.getvalue(), encoding="utf-8")
        runs.append(connector(server, tmp_path / "cache", "push", str(sheet), "--table", "T0", "--key",
                              "Code", "--json"))
        summary = json.loads(runs[-1][2])
        assert summary["pushes"][0]["updated"] == UPDATES
    assert_polite(runs)
    rows = sorted(server_rows(server, table_id).values(), key=lambda f: f["Code"])
    assert [f["Qty"] for f in rows] == [3000 + i for i in range(UPDATES)] + list(range(UPDATES, ROWS))


def test_a_published_limit_is_kept_by_every_process(tmp_path: Path) -> None:
    directory = tmp_path / "published"
    directory.mkdir()
    server = start(directory, rate_limit=LIMIT, rate_headers="ietf")
    try:
        seed(server)
        runs = [connector(server, tmp_path / "cache", "export", "--out", str(tmp_path / "out"), "--page-size", PAGE)
                for _ in range(2)]
    finally:
        server.stop()
    assert [counts.get("429", 0) for counts, _, _ in runs] == [0, 0], runs
    assert len({sum(counts.values()) for counts, _, _ in runs}) == 1  # none sent twice


def test_a_limit_since_lifted_is_forgotten_by_the_next_process(server: CountingServer, tmp_path: Path) -> None:
    seed(server)
    cache = tmp_path / "cache"
    entry = RateMemory.entry(server.base_url, server.api_key)
    RateMemory(cache).remember(entry, Learned(5, measured=True))  # as an earlier process measured
    server.options = {}  # the same URL and key, no limit any more
    server.restart()
    counts, _, _ = connector(server, cache, "export", "--out", str(tmp_path / "out"), "--page-size", PAGE,
                             spend=False)
    assert counts.get("429", 0) == 0
    assert RateMemory(cache).recall(entry) is None  # forgotten: the next process starts free
