"""Extraction to Parquet: throughput against a bare httpx loop, under a rate limit, and memory.

1. 100,000 rows -> Parquet with our extraction (pages of 100, 4 in flight), against a bare
   httpx loop that fetches the very same pages with the same concurrency and parses them
   (orjson) but does nothing else: goal >= 0.9x. Once on a plain server, once with
   ``--latency-ms 20``. After a warm-up of each, contenders alternate for three rounds;
   best is compared with best, and the median of the paired ratios is shown too.
2. A server with ``--rate-limit 50``: achieved rows/s against limit x page size (goal
   >= 0.9x) and the share of requests answered 429. The server's burst allowance is spent
   before the clock starts, so the figure is the sustained rate.
3. Peak RSS (VmHWM / ru_maxrss of a fresh subprocess that extracts one table to Parquet) for
   100,000 and 1,000,000 rows: goal flat (<= 1.5x) and <= 150 MB. The RSS of the imports
   alone is printed too, for scale, and a note if the export imported pandas (it must not:
   pyarrow imports it on its first `pa.array` of Python objects, ~37 MB).

Tables are seeded through the server's storage layer (as the test fixtures do), not the API.
Parquet is written by `connector.destinations.formats.write_parquet`.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from connector.api import Client, RateLimiter
from connector.destinations.formats import write_parquet
from connector.extract import Extraction
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer

SPEC: dict[str, Any] = {
    "name": "Bench",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["open", "on hold", "closed"]},
        {"name": "Amount", "type": "number"},
        {"name": "Paid", "type": "checkbox"},
        {"name": "Due", "type": "date"},
    ],
}
PAGE = 100
CONCURRENCY = 4
RUNS = 3
RATE_LIMIT = 50
RATE_ROWS = 60_000
GOAL_VS_BARE = 0.9
GOAL_VS_LIMIT = 0.9
GOAL_RSS_RATIO = 1.5
GOAL_RSS_MB = 150


def _seed(db: Path, rows: int, name: str) -> str:
    """A table of `rows` rows, every type, a tenth of the optional cells empty."""
    with contextlib.closing(Storage(str(db))) as storage:
        table = storage.create_table({**SPEC, "name": name})
        for start in range(0, rows, 50_000):
            cells = []
            for i in range(start, min(rows, start + 50_000)):
                fields: dict[str, Any] = {"Name": f"customer {i}"}
                if i % 10:
                    fields |= {"Status": SPEC["columns"][1]["options"][i % 3], "Amount": i * 1.25,
                               "Paid": i % 2 == 0, "Due": f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}"}
                cells.append(table.check_create(fields, index=i))
            storage.insert_rows(table, cells)
        return table.id


def _ours(server: RunningServer, table_id: str, out: Path, limiter: RateLimiter | None = None) -> float:
    """Rows/s of our extraction into a Parquet file."""
    with Client(server.base_url, server.api_key, limiter=limiter or RateLimiter()) as client:
        table = client.get_table(table_id)
        started = time.perf_counter()
        extraction = Extraction(client, table, page_size=PAGE, concurrency=CONCURRENCY)
        rows = write_parquet(extraction, extraction.schema, out)
        return rows / (time.perf_counter() - started)


def _bare(server: RunningServer, table_id: str, total: int) -> float:
    """Rows/s of a bare httpx loop over the same pages (one-row overlap), same concurrency."""
    offsets = range(0, total, PAGE - 1)

    async def run() -> int:
        gate = asyncio.Semaphore(CONCURRENCY)
        headers = {"Authorization": f"Bearer {server.api_key}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as http:

            async def fetch(offset: int) -> int:
                async with gate:
                    response = await http.get(
                        f"/tables/{table_id}/rows",
                        params={"limit": PAGE, "offset": offset, "sort": "created_at", "order": "asc"},
                    )
                    return len(orjson.loads(response.content)["rows"])

            first = await fetch(0)
            rest = await asyncio.gather(*(fetch(o) for o in offsets[1:]))
            return first + sum(rest) - len(rest)  # overlapping rows count once

    started = time.perf_counter()
    rows = asyncio.run(run())
    return rows / (time.perf_counter() - started)


def _compare(label: str, server: RunningServer, table_id: str, rows: int, out: Path) -> None:
    """Alternating rounds after a warm-up of each; best against best, and the median pair."""
    _ours(server, table_id, out)
    _bare(server, table_id, rows)
    ours, bare = [], []
    for _ in range(RUNS):
        ours.append(_ours(server, table_id, out))
        bare.append(_bare(server, table_id, rows))
    ratio = max(ours) / max(bare)
    paired = statistics.median(o / b for o, b in zip(ours, bare, strict=True))
    print(f"{label}: ours {max(ours):,.0f} rows/s, bare httpx {max(bare):,.0f} rows/s, "
          f"ratio {ratio:.2f} (median of {RUNS} paired runs {paired:.2f}; goal >= {GOAL_VS_BARE}) "
          f"{'OK' if ratio >= GOAL_VS_BARE else 'MISSED'}")


def _rate_limited(directory: Path, table_id: str, out: Path) -> None:
    server = RunningServer(directory, {"rate_limit": RATE_LIMIT, "rate_headers": "none"}).start()  # learned
    try:
        with httpx.Client(base_url=server.base_url,
                          headers={"Authorization": f"Bearer {server.api_key}"}) as http:
            while http.get("/tables").status_code != 429:  # spend the burst allowance
                pass
        limiter = RateLimiter()
        achieved = _ours(server, table_id, out, limiter)
    finally:
        server.stop()
    bound = RATE_LIMIT * PAGE
    share = limiter.throttled / max(1, limiter.throttled + limiter.accepted)
    ratio = achieved / bound
    print(f"rate limit {RATE_LIMIT}/s x {PAGE} rows = {bound:,} rows/s: achieved {achieved:,.0f} rows/s, "
          f"ratio {ratio:.2f} (goal >= {GOAL_VS_LIMIT}) {'OK' if ratio >= GOAL_VS_LIMIT else 'MISSED'}; "
          f"429s {limiter.throttled} of {limiter.throttled + limiter.accepted} requests ({share:.1%})")


#: The measured subprocess imports only what an extraction to Parquet needs.
_CHILD = """
import re, resource, sys, time
from connector.api import Client
from connector.extract import Extraction
from connector.destinations.formats import write_parquet
base_url, table_id, out, page, concurrency = sys.argv[1:6]
started = time.perf_counter()
if table_id == "+":
    import pyarrow as pa
    pa.array(["x"])  # pyarrow imports pandas on its first conversion from Python objects
elif table_id != "-":
    with Client(base_url) as client:
        table = client.get_table(table_id)
        extraction = Extraction(client, table, page_size=int(page), concurrency=int(concurrency))
        write_parquet(extraction, extraction.schema, out)
# ru_maxrss of an exec'd child still counts the parent's pages at fork (Linux keeps the
# high-water mark across exec); VmHWM is this process image's own peak. Report the smaller.
hwm = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
print(min(hwm, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), time.perf_counter() - started,
      "pandas" in sys.modules)
"""


def _peak_rss_mb(
    server: RunningServer, table_id: str | None, out: Path, pool: str | None = None
) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of a fresh process extracting `table_id` (None: imports only).

    `pool` sets ARROW_DEFAULT_MEMORY_POOL (None: Arrow's default, mimalloc, which keeps
    freed memory for reuse and so shows a higher peak).
    """
    argv = [sys.executable, "-c", _CHILD, server.base_url, table_id or "-", str(out), str(PAGE),
            str(CONCURRENCY)]
    env = {"CONNECTOR_API_KEY": server.api_key} | ({"ARROW_DEFAULT_MEMORY_POOL": pool} if pool else {})
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env,
                          cwd=Path(__file__).parents[1])
    rss_kb, seconds, pandas = done.stdout.split()
    if table_id not in (None, "+") and pandas != "False":
        print("  (note: pandas was imported during the export)")
    return int(rss_kb) / 1024, float(seconds)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        db = directory / "server.db"
        started = time.perf_counter()
        small = _seed(db, 100_000, "small")
        limited = _seed(db, RATE_ROWS, "limited")
        print(f"seeded {100_000 + RATE_ROWS:,} rows in {time.perf_counter() - started:.1f} s")
        out = directory / "out.parquet"

        server = RunningServer(directory, {}).start()
        try:
            _compare("100,000 rows -> Parquet", server, small, 100_000, out)
        finally:
            server.stop()
        slow = RunningServer(directory, {"latency_ms": 20}).start()
        try:
            _compare("100,000 rows -> Parquet, server --latency-ms 20", slow, small, 100_000, out)
        finally:
            slow.stop()

        _rate_limited(directory, limited, out)

        started = time.perf_counter()
        big = _seed(db, 1_000_000, "big")
        print(f"seeded 1,000,000 rows in {time.perf_counter() - started:.1f} s")
        server = RunningServer(directory, {}).start()
        try:
            imports, _ = _peak_rss_mb(server, None, out)
            arrow, _ = _peak_rss_mb(server, "+", out)
            print(f"peak RSS of the imports alone: {imports:.0f} MB; with pyarrow's first conversion "
                  f"from Python objects (it imports pandas then; the export avoids it): {arrow:.0f} MB")
            for pool in (None, "system"):
                rss_small, t_small = _peak_rss_mb(server, small, out, pool)
                rss_big, t_big = _peak_rss_mb(server, big, out, pool)
                ratio = rss_big / rss_small
                ok = ratio <= GOAL_RSS_RATIO and rss_big <= GOAL_RSS_MB
                print(f"peak RSS, Arrow pool {pool or 'default (mimalloc)'}: 100,000 rows {rss_small:.0f} MB "
                      f"({t_small:.1f} s); 1,000,000 rows {rss_big:.0f} MB ({t_big:.1f} s, "
                      f"{1_000_000 / t_big:,.0f} rows/s); ratio {ratio:.2f} (goal <= {GOAL_RSS_RATIO}), "
                      f"goal <= {GOAL_RSS_MB} MB: {'OK' if ok else 'MISSED'}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
