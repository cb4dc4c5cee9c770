"""Our dlt source (`connector.dlt.tabledata`) against `connector load`, both into DuckDB.

Whole processes, as a user runs them, against one `connector serve --latency-ms 20` over
bench_throughput's table (100,000 rows of 5 columns, one of free text):

- `connector load --to duckdb:///… --table main` (defaults);
- a `python -c` dlt pipeline running `tabledata(tables=["main"])` into dlt's `duckdb`
  destination, a fresh pipeline each run (so a full read and a first merge load);
- the same pipeline run again with nothing changed upstream: S, the change read of the
  lookback window (rows are stamped a second apart first, so it holds 300 of them), the
  count and R; no id pass.

Each run is checked to have loaded every row it should. Telemetry off, pipelines
and data directories in a temporary directory: fully offline. A warm-up of each, then 3
rounds (2 quick) alternating. No goal: the figures show what dlt's extract, normalize and
load stages cost on top of our read. ``BENCH_QUICK=1`` / ``BENCH_ROWS=N`` as bench_throughput.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sqlite3
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench._procs import CONNECTOR, contest, run, start, user_env
from bench.bench_throughput import Contender, Sizes, seed
from connector.jobs.config import DEFAULT_LOOKBACK

LATENCY_MS = 20

#: The dlt source into DuckDB: argv table name, work directory; prints the rows it loaded.
DLT = """
import os, sys
import dlt
from connector.dlt import tabledata
name, work = sys.argv[1:3]
pipeline = dlt.pipeline(
    pipeline_name="bench_dlt", dataset_name="bench", pipelines_dir=os.path.join(work, "pipelines"),
    destination=dlt.destinations.duckdb(os.path.join(work, "out.duckdb")),
)
pipeline.run(tabledata(tables=[name]))
print(pipeline.last_trace.last_normalize_info.row_counts.get(name, 0))
"""


def main() -> None:
    if importlib.util.find_spec("dlt") is None:
        print("dlt benchmark skipped: dlt is not installed (pip install 'table-data-connector[dlt]')")
        return
    sizes = Sizes.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        seed(directory / "server.db", sizes.main, "main")
        window = _age(directory / "server.db")
        server = start(directory, latency_ms=LATENCY_MS)
        try:
            env = user_env(server, RUNTIME__DLTHUB_TELEMETRY="false",
                           DLT_DATA_DIR=str(directory / "dlt-data"))
            fresh = itertools.count()

            def ours_argv() -> list[str]:
                out = directory / f"ours-{next(fresh)}.duckdb"
                return [CONNECTOR, "load", "--to", f"duckdb:///{out}", "--table", "main", "--json"]

            def dlt_argv() -> list[str]:
                return [sys.executable, "-c", DLT, "main", str(directory / f"dlt-{next(fresh)}")]

            ours = Contender([], user_env(server), server, sizes.main, prepare=ours_argv)
            full = Contender([], env, server, sizes.main, prepare=dlt_argv)
            quiet_argv = [sys.executable, "-c", DLT, "main", str(directory / "dlt-quiet")]
            run(quiet_argv, env)  # the first load, untimed: later runs find nothing changed
            quiet = Contender(quiet_argv, env, server, window)
            figures = contest({"ours": ours, "dlt": full, "quiet": quiet}, sizes.runs)
        finally:
            server.stop()
    mine, theirs, idle = figures["ours"], figures["dlt"], figures["quiet"]
    print(f"load {sizes.main:,} rows into DuckDB, server --latency-ms {LATENCY_MS}")
    print(f"  ours (connector load --to duckdb:///…): {mine.text()}, "
          f"{sizes.main / mine.best:,.0f} rows/s, {ours.requests} requests, peak RSS {mine.peak_mb:.0f} MB")
    print(f"  connector.dlt tabledata -> dlt duckdb ({_version()}): {theirs.text()}, "
          f"{sizes.main / theirs.best:,.0f} rows/s, {full.requests} requests, "
          f"peak RSS {theirs.peak_mb:.0f} MB")
    print(f"  ours faster by {theirs.best / mine.best:.1f}x (best vs best), "
          f"{theirs.median / mine.median:.1f}x (median vs median)")
    print(f"  dlt source, quiet incremental run ({window} rows in the window): {idle.text()}, "
          f"{quiet.requests} requests, "
          f"peak RSS {idle.peak_mb:.0f} MB", flush=True)


def _age(db: Path) -> int:
    """Rows stamped a second apart, in creation order, the newest a day back: a quiet run
    re-reads only the lookback window behind the cursor. Returns how many rows that is."""
    newest = datetime.now(UTC) - timedelta(days=1)
    with sqlite3.connect(db) as con:
        ids = [r[0] for r in con.execute("SELECT rowid FROM rows ORDER BY created_at, id")]
        stamps = [_iso(newest - timedelta(seconds=len(ids) - 1 - i)) for i in range(len(ids))]
        con.executemany(  # by rowid: `id` alone is no index's prefix (it follows table_id)
            "UPDATE rows SET created_at = ?, updated_at = ? WHERE rowid = ?",
            [(stamp, stamp, rowid) for rowid, stamp in zip(ids, stamps, strict=True)],
        )
    return min(len(ids), int(DEFAULT_LOOKBACK))  # those strictly newer than newest - lookback


def _iso(stamp: datetime) -> str:
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _version() -> str:
    """dlt's version, read in a subprocess: importing dlt here would slow the bench process."""
    out = run([sys.executable, "-c", "import dlt; print(dlt.__version__)"], dict(os.environ))
    return "dlt " + out.stdout.strip()


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        os.environ["BENCH_QUICK"] = "1"
    main()
