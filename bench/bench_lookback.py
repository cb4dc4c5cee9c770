"""The lookback window's cost on a quiet incremental `connector sync` (issue 17), whole processes.

For each size (100,000 and 1,000,000 rows of bench_throughput's table, seeded through the
server's storage just before), three jobs of the same shape (``incremental = true``,
``deletes = "delete"``, a SQLite database and a Parquet folder, defaults otherwise) each run a
full sync, then a quiet one (nothing changed upstream):

1. ``lookback`` at its default (5 minutes), right after the full sync: every row was stamped
   inside the window, so the quiet run reads them all again and compares them with what each
   destination holds (none written);
2. ``lookback = "1s"`` with a pause of `PAUSE` seconds before the quiet run: the full sync
   recorded the window as settled (`connector/jobs/reads.py`), so the quiet run starts at
   the cursor and reads nothing again; the 5-minute window settles the same way 5 minutes on;
3. ``lookback = 0``: the quiet run reads from the cursor.

Printed per run: wall seconds (spawn to exit), requests the server answered
(`bench._procs.CountingServer`), rows read, rows the window read again, rows written, peak
RSS (GNU time). Measured, never asserted. ``BENCH_QUICK=1``: 10,000 and 50,000 rows;
``BENCH_SIZES=N,M`` sets them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench._procs import CONNECTOR, CountingServer, run, start, user_env
from bench.bench_throughput import seed

#: Seconds between the full sync and the quiet run of the ``lookback = "1s"`` job.
PAUSE = 2.0
#: The three windows: a job file's ``lookback`` line (None: the default, 5 minutes).
WINDOWS: dict[str, str | None] = {"5m (default)": None, '"1s", settled': '"1s"', "0": "0"}

JOB = """
name = "{name}"
[source]
api_key_env = "CONNECTOR_API_KEY"
[tables]
include = ["{table}"]
[sync]
incremental = true
deletes = "delete"
{lookback}
[[destination]]
url = "sqlite:///{out}/bench.db"
[[destination]]
parquet = "{out}/parquet"
"""


def sizes() -> tuple[int, ...]:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    default = "10000,50000" if quick else "100000,1000000"
    return tuple(int(n) for n in os.environ.get("BENCH_SIZES", default).split(","))


@dataclass(frozen=True)
class Run:
    """One `connector sync` process."""

    seconds: float
    requests: int
    rows_read: int
    window_rows: int
    rows_written: int
    rss_mb: float

    def text(self) -> str:
        return (f"{self.seconds:6.2f} s, {self.requests:>5} requests, read {self.rows_read:>9,}, "
                f"window {self.window_rows:>9,}, written {self.rows_written:>9,}, "
                f"peak RSS {self.rss_mb:.0f} MB")


def sync(server: CountingServer, job: Path) -> Run:
    server.take_counts()
    timed = run([CONNECTOR, "sync", str(job), "--log-format", "json"], user_env(server),
                cwd=job.parent)
    counts = server.take_counts()
    summary = json.loads(timed.stdout)
    if summary["status"] not in ("ok", "unchanged"):
        raise RuntimeError(f"{job}: {summary['status']}: {summary.get('error')}")
    totals = summary["totals"]
    return Run(timed.seconds, sum(counts.values()), totals["rows_read"], totals["window_rows"],
               totals["rows_written"], timed.rss_mb)


def one_size(root: Path, rows: int) -> None:
    """Seeds the table (its rows stamped now), then starts a server over it and runs the jobs."""
    directory = root / str(rows)
    directory.mkdir()
    table = f"Lookback {rows}"
    started = time.perf_counter()
    seed(directory / "server.db", rows, table)
    print(f"{rows:,} rows seeded in {time.perf_counter() - started:.1f} s", flush=True)
    server = start(directory)
    try:
        for n, (label, lookback) in enumerate(WINDOWS.items()):
            out = directory / f"job{n}"
            out.mkdir()
            job = out / "job.toml"
            line = "" if lookback is None else f"lookback = {lookback}"
            job.write_text(JOB.format(name=f"lookback{n}", table=table, out=out, lookback=line))
            full = sync(server, job)
            if lookback == '"1s"':
                time.sleep(PAUSE)
            quiet = sync(server, job)
            print(f"  lookback {label:<14} full  {full.text()}", flush=True)
            print(f"  {'':<23} quiet {quiet.text()}", flush=True)
    finally:
        server.stop()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for rows in sizes():
            one_size(Path(tmp), rows)


if __name__ == "__main__":
    main()
