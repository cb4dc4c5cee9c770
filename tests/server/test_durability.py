"""Whatever the server acknowledged survives `kill -9`; concurrent writers lose nothing;
SIGTERM lets requests in flight finish and leaves the database one self-contained file."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.server import RunningServer, ServerFactory

COUNTERS = {
    "name": "Counters",
    "columns": [{"name": "Name", "type": "text", "required": True}]
    + [{"name": f"C{i}", "type": "number"} for i in range(8)],
}


def all_rows(client: httpx.Client, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        page = client.get(f"/tables/{table}/rows", params={"limit": 1000, "offset": len(rows)}).json()
        rows += page["rows"]
        if len(page["rows"]) < 1000:
            return rows


def test_acknowledged_writes_survive_kill_9(server: RunningServer) -> None:
    table = server.create_table(COUNTERS)
    expected: dict[str, dict[str, Any]] = {}
    with server.client() as client:
        for batch in range(10):
            rows = [{"fields": {"Name": f"b{batch}r{i}", "C0": i}} for i in range(100)]
            for row in client.post(f"/tables/{table}/rows/bulk", json={"rows": rows}).json()["rows"]:
                expected[row["id"]] = row["fields"]
        victims = list(expected)[:50]
        deleted = client.request("DELETE", f"/tables/{table}/rows/bulk", json={"row_ids": victims})
        assert deleted.status_code == 200
        for rid in victims:
            del expected[rid]
        for rid in list(expected)[:20]:
            expected[rid] = client.patch(f"/tables/{table}/rows/{rid}", json={"fields": {"C1": 1.5}}).json()["fields"]
    server.kill()
    server.restart()
    with server.client() as client:
        after = {r["id"]: r["fields"] for r in all_rows(client, table)}
        assert client.get("/tables").json()["tables"][0]["rows"] == 950
    assert after == expected


def test_writes_acknowledged_up_to_a_kill_during_load_are_all_there(server: RunningServer) -> None:
    table = server.create_table(COUNTERS)
    acknowledged: list[str] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        with server.client(timeout=5.0) as client:
            i = 0
            while not stop.is_set():
                try:
                    response = client.post(f"/tables/{table}/rows", json={"fields": {"Name": f"w{n}-{i}"}})
                except httpx.HTTPError:
                    return  # the server died under us: this write was not acknowledged
                if response.status_code == 201:
                    acknowledged.append(response.json()["id"])
                i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(acknowledged) >= 300, "writers stalled before the kill"
    server.kill()
    stop.set()
    for t in threads:
        t.join()
    server.restart()
    with server.client() as client:
        stored = {r["id"] for r in all_rows(client, table)}
    assert set(acknowledged) <= stored


def test_concurrent_patches_of_one_row_lose_no_update(server: RunningServer) -> None:
    table = server.create_table(COUNTERS)
    with server.client() as client:
        row = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "shared"}}).json()["id"]

    def bump(column: int) -> None:
        with server.client() as client:
            for value in range(1, 16):
                response = client.patch(f"/tables/{table}/rows/{row}", json={"fields": {f"C{column}": value}})
                assert response.status_code == 200

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(bump, range(8)))
    with server.client() as client:
        fields = client.get(f"/tables/{table}/rows").json()["rows"][0]["fields"]
    assert fields == {"Name": "shared", **{f"C{i}": 15 for i in range(8)}}


def test_parallel_bulk_writers_and_readers_see_consistent_totals(server: RunningServer) -> None:
    table = server.create_table(COUNTERS)
    writers, batches, size = 4, 8, 50
    seen: dict[int, list[int]] = {0: [], 1: []}  # totals each reader saw, in its order
    done = threading.Event()

    def write(n: int) -> list[str]:
        ids = []
        with server.client() as client:
            for b in range(batches):
                rows = [{"fields": {"Name": f"w{n}b{b}r{i}"}} for i in range(size)]
                response = client.post(f"/tables/{table}/rows/bulk", json={"rows": rows})
                assert response.status_code == 201
                ids += [r["id"] for r in response.json()["rows"]]
        return ids

    reading = threading.Barrier(len(seen) + 1)

    def read(n: int) -> None:
        with server.client() as client:
            while True:
                page = client.get(f"/tables/{table}/rows", params={"limit": 10}).json()
                seen[n].append(page["total"])
                if len(seen[n]) == 1:
                    reading.wait()  # every reader is reading before any writer starts
                if done.is_set():
                    break

    readers = [threading.Thread(target=read, args=(n,)) for n in seen]
    for t in readers:
        t.start()
    reading.wait(timeout=30)
    with ThreadPoolExecutor(writers) as pool:
        written = [rid for ids in pool.map(write, range(writers)) for rid in ids]
    done.set()
    for t in readers:
        t.join()
    with server.client() as client:
        stored = all_rows(client, table)
        summary = client.get("/tables").json()["tables"][0]
    assert len(written) == len(set(written)) == writers * batches * size
    assert sorted(r["id"] for r in stored) == sorted(written)
    assert summary["rows"] == writers * batches * size
    for totals in seen.values():
        # Bulk creates are atomic: a reader never sees part of one, and never goes back.
        assert totals and all(t % size == 0 for t in totals)
        assert totals == sorted(totals)


def test_sigterm_finishes_requests_in_flight_and_leaves_one_self_contained_file(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    running = server_factory(fault_control=True)
    table = running.create_table(COUNTERS)
    with running.client() as client:
        rows = [{"fields": {"Name": f"r{i}"}} for i in range(50)]
        assert client.post(f"/tables/{table}/rows/bulk", json={"rows": rows}).status_code == 201
    running.set_faults(latency_ms=1500)
    answers: list[httpx.Response] = []

    def slow_read() -> None:
        with running.client() as client:
            answers.append(client.get(f"/tables/{table}/rows", params={"limit": 1000}))

    reader = threading.Thread(target=slow_read)
    reader.start()
    time.sleep(0.5)  # the read is in flight, waiting out its latency
    started = time.monotonic()
    assert running.terminate() == 0
    reader.join()
    assert time.monotonic() - started < 10
    assert [a.status_code for a in answers] == [200] and len(answers[0].json()["rows"]) == 50
    wal = Path(f"{running.db_path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    alone = tmp_path / "alone" / "copy.db"
    alone.parent.mkdir()
    shutil.copyfile(running.db_path, alone)  # the .db file only: no -wal, no -shm
    with contextlib.closing(sqlite3.connect(alone)) as db:
        assert db.execute("SELECT count(*) FROM rows WHERE table_id = ?", (table,)).fetchone() == (50,)
