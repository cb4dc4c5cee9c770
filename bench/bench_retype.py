"""A retype's cost in each destination (issue 17), whole `connector sync` processes.

One table of 1,000,000 rows (bench_throughput's), and for each destination (SQLite,
PostgreSQL, DuckDB, Parquet, Delta) a job of its own (``incremental = true``, ``deletes =
"delete"``, that one destination, defaults otherwise):

1. a plain full sync (the first run of the job);
2. the server's ``alter-table retype-column`` (`RunningServer.retype_column`: every cell of
   ``Amount`` converted, number -> text, or back for the next destination), not timed as a
   sync;
3. the sync after it: the columns changed, so the table is read in full again (no row's
   ``updated_at`` moved) and the destination's table evolves in the commit that writes the
   rows: its held values converted (a rebuild) and every row upserted.

Printed: wall seconds (spawn to exit), requests, rows read and written, peak RSS (GNU time)
of each sync, and the retyped sync against the plain one. PostgreSQL is a throwaway server
the bench starts (`tests.fixtures.postgres`); S3 is not involved. Measured, never asserted.
``BENCH_QUICK=1``: 20,000 rows; ``BENCH_ROWS=N`` sets the rows; ``BENCH_DESTINATIONS=sqlite,duckdb``
picks destinations.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from bench._procs import CONNECTOR, CountingServer, Timed, run, start, user_env
from bench.bench_throughput import seed
from tests.fixtures.postgres import start_postgres

COLUMN = "Amount"
#: Each destination's ``[[destination]]`` lines; ``{out}`` a folder of its own, ``{pg}`` the
#: PostgreSQL URL.
DESTINATIONS = {
    "sqlite": 'url = "sqlite:///{out}/bench.db"',
    "postgresql": 'url = "{pg}"',
    "duckdb": 'url = "duckdb:///{out}/bench.duckdb"',
    "parquet": 'parquet = "{out}/parquet"',
    "delta": 'delta = "{out}/delta"',
}

JOB = """
name = "retype-{kind}"
[source]
api_key_env = "CONNECTOR_API_KEY"
[tables]
include = ["Retype"]
[sync]
incremental = true
deletes = "delete"
[[destination]]
{destination}
"""


def rows_setting() -> int:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    return int(os.environ.get("BENCH_ROWS", 20_000 if quick else 1_000_000))


def sync(server: CountingServer, job: Path) -> tuple[Timed, dict[str, int], int]:
    """One run: the process, its totals, the requests it sent."""
    server.take_counts()
    timed = run([CONNECTOR, "sync", str(job), "--log-format", "json"], user_env(server),
                cwd=job.parent)
    requests = sum(server.take_counts().values())
    summary = json.loads(timed.stdout)
    if summary["status"] != "ok":
        raise RuntimeError(f"{job}: {summary['status']}: {summary.get('error')}")
    return timed, summary["totals"], requests


def line(label: str, timed: Timed, totals: dict[str, int], requests: int) -> str:
    return (f"  {label:<22} {timed.seconds:7.2f} s, {requests:>5} requests, read "
            f"{totals['rows_read']:>9,}, written {totals['rows_written']:>9,}, peak RSS "
            f"{timed.rss_mb:.0f} MB")


def main() -> None:
    rows = rows_setting()
    chosen = os.environ.get("BENCH_DESTINATIONS", ",".join(DESTINATIONS)).split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        table_id = seed(root / "server.db", rows, "Retype")
        print(f"{rows:,} rows seeded in {time.perf_counter() - started:.1f} s", flush=True)
        server = start(root)
        postgres = start_postgres() if "postgresql" in chosen else None
        types = ("text", "number")
        try:
            for n, kind in enumerate(chosen):
                out = root / kind
                out.mkdir()
                job = out / "job.toml"
                pg = postgres.url() if postgres is not None else ""
                destination = DESTINATIONS[kind].format(out=out, pg=pg)
                job.write_text(JOB.format(kind=kind, destination=destination))
                full = sync(server, job)
                started = time.perf_counter()
                server.retype_column(table_id, COLUMN, types[n % 2])
                altered = time.perf_counter() - started
                after = sync(server, job)
                print(f"{kind}: {COLUMN} retyped to {types[n % 2]} on the server in {altered:.1f} s",
                      flush=True)
                print(line("plain full sync", *full), flush=True)
                print(line("sync after the retype", *after), flush=True)
                print(f"  retyped / plain: {after[0].seconds / full[0].seconds:.2f}x the seconds, "
                      f"{after[0].rss_mb / full[0].rss_mb:.2f}x the peak RSS", flush=True)
        finally:
            server.stop()
            if postgres is not None:
                postgres.stop()


if __name__ == "__main__":
    main()
