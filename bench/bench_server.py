"""The reference server: page cost against offset, paging 1M vs 100k rows, bulk creates.

1. Pages/s (limit 100) over HTTP at offsets 0, 100k and 900k of a 1,000,000-row table:
   50 sequential pages from each offset. The first page at a cold offset seeks from the
   nearest remembered key (or scans from the start); its latency is shown separately.
   Then the same sorted by a user column (its expression index is built on first use).
2. Paging through the whole table: 1,000,000 rows against 100,000 rows, goal <= 12x.
   a. over HTTP with limit 1000 (the API's maximum page), every page read for real;
   b. through the storage layer with limit 100 (the API's default), every page read.
   Nothing is sampled or extrapolated; each is the best of two runs. Wall time on a shared
   machine is noisy, so (b) also counts SQLite's work per 100k rows: it must stay flat.
3. Bulk create rows/s over HTTP: 100 requests of 100 rows, one client, then four.

Tables are seeded through the server's storage layer, not the API (fast).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from connector.server.query import parse
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer

BIG = 1_000_000
SMALL = 100_000
GOAL_RATIO = 12.0

SPEC = {
    "name": "Big",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Open", "Closed"]},
        {"name": "Amount", "type": "number"},
        {"name": "Day", "type": "date"},
        {"name": "Flag", "type": "checkbox"},
    ],
}


def _seed(storage: Storage, name: str, rows: int) -> str:
    table = storage.create_table({**SPEC, "name": name})
    batch = 50_000
    for start in range(0, rows, batch):
        cells = [
            {"Name": f"row {i}", "Status": "Open" if i % 3 else "Closed", "Amount": i % 997,
             "Day": f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}", "Flag": i % 2 == 0}
            for i in range(start, min(rows, start + batch))
        ]
        storage.insert_rows(table, cells)
    return table.id


def _page_through_http(client: httpx.Client, table: str, limit: int) -> tuple[int, float, list[float]]:
    """Rows read, seconds, and the seconds of each successive 100,000 rows."""
    started = lap = time.perf_counter()
    laps = []
    offset = 0
    while True:
        page = client.get(f"/tables/{table}/rows", params={"limit": limit, "offset": offset}).json()
        offset += len(page["rows"])
        if offset % SMALL == 0 and page["rows"]:
            now = time.perf_counter()
            laps.append(now - lap)
            lap = now
        if len(page["rows"]) < limit:
            return offset, time.perf_counter() - started, laps


def _page_through_storage(db: str, table_id: str, limit: int) -> tuple[int, float, list[float]]:
    """Rows read, seconds, and SQLite's work (VM steps) for each successive 100,000 rows."""
    storage = Storage(db)  # fresh: no remembered offsets
    table = storage.table(table_id)
    assert table is not None
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    storage.on_progress(count, 100)
    started = time.perf_counter()
    laps: list[float] = []
    offset = last = 0
    while True:
        page = storage.list_rows(table, parse(table, {"limit": str(limit), "offset": str(offset)}))
        offset += len(page.rows)
        if offset % SMALL == 0 and page.rows:
            laps.append((steps[0] - last) * 100)
            last = steps[0]
        if len(page.rows) < limit:
            storage.close()
            return offset, time.perf_counter() - started, laps


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        running = RunningServer(Path(tmp), {"spawn": True})  # the server measured: as a user starts it
        storage = Storage(str(running.db_path))
        started = time.perf_counter()
        big = _seed(storage, "Big", BIG)
        small = _seed(storage, "Small", SMALL)
        storage.close()
        print(f"seeded {BIG:,} + {SMALL:,} rows through storage in {time.perf_counter() - started:.1f} s")
        print(f"database size {os.path.getsize(running.db_path) / 1e6:.0f} MB")
        running.start()
        try:
            with running.client() as client:
                _bench_offsets(client, big)
                _bench_paging(client, str(running.db_path), big, small)
                _bench_bulk(running)
        finally:
            running.stop()


def _bench_offsets(client: httpx.Client, table: str) -> None:
    print("\n1. pages/s at depth (limit 100, 50 sequential pages from each offset, over HTTP)")
    for offset in (0, 100_000, 900_000):
        first = time.perf_counter()
        client.get(f"/tables/{table}/rows", params={"limit": 100, "offset": offset}).raise_for_status()
        cold = time.perf_counter() - first
        started = time.perf_counter()
        for n in range(1, 51):
            response = client.get(f"/tables/{table}/rows", params={"limit": 100, "offset": offset + 100 * n})
            assert response.json()["rows"][0]["fields"]["Name"] == f"row {offset + 100 * n}"
        rate = 50 / (time.perf_counter() - started)
        print(f"   offset {offset:>7,}: {rate:7.0f} pages/s   (first page, cold: {cold * 1000:6.1f} ms)")
    print("   sorted by a number column (sort=Amount): the first request builds its index")
    for offset in (0, 100_000, 900_000):
        params: dict[str, str | int] = {"limit": 100, "sort": "Amount"}
        first = time.perf_counter()
        client.get(f"/tables/{table}/rows", params={**params, "offset": offset}).raise_for_status()
        cold = time.perf_counter() - first
        started = time.perf_counter()
        for n in range(1, 51):
            client.get(f"/tables/{table}/rows", params={**params, "offset": offset + 100 * n}).raise_for_status()
        rate = 50 / (time.perf_counter() - started)
        print(f"   offset {offset:>7,}: {rate:7.0f} pages/s   (first page, cold: {cold * 1000:6.1f} ms)")


def _bench_paging(client: httpx.Client, db: str, big: str, small: str) -> None:
    print(f"\n2. paging through {BIG:,} vs {SMALL:,} rows, best of 2 each "
          f"(goal: ratio <= {GOAL_RATIO:g}x; linear is 10x)")
    ways: dict[str, Callable[[str], tuple[int, float, list[float]]]] = {
        "a. HTTP, limit 1000:  ": lambda table: _page_through_http(client, table, 1000),
        "b. storage, limit 100:": lambda table: _page_through_storage(db, table, 100),
    }
    for label, page_through in ways.items():
        runs: dict[str, list[float]] = {small: [], big: []}
        laps: list[float] = []
        for _ in range(2):  # alternate, so a busy moment does not hit one size only
            for table, rows in ((small, SMALL), (big, BIG)):
                n, seconds, table_laps = page_through(table)
                assert n == rows
                runs[table].append(seconds)
                if table == big and seconds == min(runs[big]):
                    laps = table_laps
        t_small, t_big = min(runs[small]), min(runs[big])
        ratio = t_big / t_small
        verdict = "ok" if ratio <= GOAL_RATIO else "OVER GOAL"
        print(f"   {label} {t_small:6.2f} s vs {t_big:6.2f} s  ratio {ratio:5.2f}x  [{verdict}]"
              f"  ({BIG / t_big:,.0f} rows/s)")
        if label.startswith("a."):
            print(f"      seconds for each 100k of the 1M pass: {' '.join(f'{x:.2f}' for x in laps)}")
        else:
            print(f"      SQLite VM steps for each 100k of the 1M pass (load-independent): "
                  f"first {laps[0]:,.0f}, last {laps[-1]:,.0f}, max/min {max(laps) / min(laps):.3f}")


def _bench_bulk(running: RunningServer) -> None:
    print("\n3. bulk create over HTTP (100 rows a request)")
    rows = [{"fields": {"Name": f"n{i}", "Status": "Open", "Amount": i, "Day": "2024-05-06", "Flag": True}}
            for i in range(100)]
    for clients in (1, 4):
        table = running.create_table({**SPEC, "name": f"Bulk{clients}"})

        def post(n: int, table: str = table) -> None:
            with running.client() as client:
                for _ in range(n):
                    client.post(f"/tables/{table}/rows/bulk", json={"rows": rows}).raise_for_status()

        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(post, [100 // clients] * clients))
        elapsed = time.perf_counter() - started
        print(f"   {clients} client(s): {10_000 / elapsed:8,.0f} rows/s  ({100 / elapsed:.0f} requests/s)")


if __name__ == "__main__":
    main()
