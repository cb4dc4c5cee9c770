"""Data platforms: rows/s and peak RSS of whole `connector` processes writing 1,000,000 rows to
DuckDB, S3 (Parquet), Delta Lake (local and S3), Iceberg, SQLite and PostgreSQL, each against
the local Parquet export of the same rows in the same run; and our DuckDB writer against
DuckDB itself.

1. ``connector export --out DIR`` (the reference), ``connector load --to duckdb:///FILE``,
   ``export --out s3://bucket/parquet``, ``export --format delta --out DIR`` and
   ``--out s3://bucket/delta``, ``export --format iceberg --out DIR``, ``load --to
   sqlite:///FILE`` and ``load --to postgresql://...``: wall time (spawn to exit), rows/s,
   the ratio to the local Parquet export, and peak RSS (GNU time, per process). The goal
   for RSS (issue 18 part 4): within 1.25x of the Parquet export and flat from 100,000 to
   1,000,000 rows (a whole table never in memory). S3 is moto in server mode on 127.0.0.1,
   PostgreSQL a throwaway server (`tests.fixtures.postgres`), both processes the bench
   starts: their CPU competes with ours on 2 cores.
2. DuckDB: our writer (`connector.destinations.duckdb`, a replace through `apply`, fed the
   local Parquet export's rows in batches of a page, as an export hands them over) against DuckDB reading the same
   file itself (``CREATE TABLE t AS SELECT * FROM read_parquet(...)``), each a whole process
   timing its own write; goal >= 0.6x (issue 18 part 6). Also printed: the whole ``connector load`` against
   the same, which includes reading every row from the API (that side's fair counterpart is
   the Parquet export ratio of part 1).

The table is bench_throughput's: 5 columns including an ~80-character free-text one, seeded
through the server's storage. Each contender runs once to warm up, then RUNS rounds in
alternating order; best against best is the ratio. Measured, never asserted.

``BENCH_QUICK=1`` (or ``--quick``): 50,000 rows; ``BENCH_ROWS=N`` sets the rows,
``BENCH_RUNS=N`` the rounds (default 2); ``BENCH_ONLY=duckdb,delta`` runs only the part 1
contenders whose names contain one of those words (the reference always runs);
``BENCH_PARTS=1`` (or ``2``) one part.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench._procs import CONNECTOR, Figures, Timed, contest, run, start, user_env, verdict
from bench.bench_throughput import SPEC, seed
from tests.fixtures.postgres import start_postgres
from tests.fixtures.s3 import start_s3_server

GOAL_DUCKDB = 0.6
#: Peak RSS of each destination at most this times the local Parquet export's (issue 18.4).
GOAL_RSS = 1.25
REFERENCE = "parquet, local (reference)"
BUCKET = "bench"
#: Rows a batch holds when an export hands them to a writer (one page).
PAGE_ROWS = 1000

#: Our DuckDB writer alone: argv parquet file, database, the table's API schema (JSON).
OUR_WRITER = """
import json, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from connector.destinations import TableChange, Target, make_config, open_destination
from connector.schema import Table
source, target, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
table = Table.from_api(spec)
started = time.perf_counter()
file = pq.ParquetFile(source)
config = make_config("url", "duckdb:///" + target, mode="replace", where="bench", base=Path.cwd())
destination = open_destination(config)
done = destination.apply(Target(table, table.name), TableChange("replace", file.iter_batches(PAGE_ROWS)))
destination.close()
print(json.dumps({"rows": done.written, "seconds": time.perf_counter() - started}))
""".replace("PAGE_ROWS", str(PAGE_ROWS))

#: DuckDB itself: argv parquet file, database.
DUCKDB_CTAS = """
import json, sys, time
import duckdb
started = time.perf_counter()
con = duckdb.connect(sys.argv[2])
con.execute("SET enable_progress_bar = false")  # drawn on stdout past 2 s
con.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM read_parquet(?)", [sys.argv[1]])
rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
con.close()
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - started}))
"""


def rows_setting() -> tuple[int, int]:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    rows = int(os.environ.get("BENCH_ROWS", 50_000 if quick else 1_000_000))
    return rows, int(os.environ.get("BENCH_RUNS", 2))


class Contender:
    """One whole process, run again each round; checks the rows it reports writing and keeps
    the seconds it reports for its own work (JSON ``seconds``) beside the wall time."""

    def __init__(self, argv: list[str], env: dict[str, str], rows: int, cwd: Path | None = None,
                 *, reset: Callable[[], None] | None = None) -> None:
        self.argv, self.env, self.rows, self.cwd, self.reset = argv, env, rows, cwd, reset
        self.own: list[float] = []

    def __call__(self) -> Timed:
        if self.reset is not None:
            self.reset()
        timed = run(self.argv, self.env, self.cwd)
        out = json.loads(timed.stdout)
        done = out["totals"]["rows_written"] if "totals" in out else out["rows"]
        if done != self.rows:
            raise RuntimeError(f"{self.argv[:4]} wrote {done} rows, expected {self.rows}")
        self.own.append(float(out["seconds"]))
        return timed


def chosen(name: str) -> bool:
    """Whether BENCH_ONLY (comma-separated words) picks the contender `name`."""
    words = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
    return name == REFERENCE or not words or any(w in name for w in words)


def platforms(directory: Path, rows: int, runs: int, s3_env: dict[str, str],
              postgres: str) -> tuple[Path, Figures | None]:
    """Part 1; returns the local Parquet file and the DuckDB load's runs, for part 2."""
    server = start(directory)
    out = directory / "out"
    env = user_env(server) | s3_env
    local = out / "parquet"

    def export(*args: str) -> list[str]:
        return [CONNECTOR, "export", *args, "--json"]

    def load(url: str) -> list[str]:
        return [CONNECTOR, "load", "--to", url, "--json"]

    every = {
        REFERENCE: Contender(export("--out", str(local)), env, rows),
        "duckdb:/// (load)": Contender(load(f"duckdb:///{out / 'load.duckdb'}"), env, rows),
        "parquet, s3:// (moto)": Contender(export("--out", f"s3://{BUCKET}/parquet"), env, rows),
        "delta, local": Contender(export("--format", "delta", "--out", str(out / "delta")), env, rows),
        "delta, s3:// (moto)": Contender(export("--format", "delta", "--out", f"s3://{BUCKET}/delta"),
                                         env, rows),
        "iceberg, local": Contender(export("--format", "iceberg", "--out", str(out / "iceberg")), env, rows),
        "sqlite:/// (load)": Contender(load(f"sqlite:///{out / 'load.db'}"), env, rows),
        "postgresql:// (load)": Contender(load(postgres), env, rows),
    }
    contenders = {name: c for name, c in every.items() if chosen(name)}
    try:
        figures = contest(contenders, runs)
    finally:
        server.stop()
    reference = figures[REFERENCE]
    print(f"1. {rows:,} rows (a free-text column), whole processes, best of {runs} after a warm-up")
    for name, fig in figures.items():
        own = min(contenders[name].own)
        rss = fig.peak_mb / reference.peak_mb
        print(f"  {name:<28} {fig.text()}, {rows / fig.best:>9,.0f} rows/s, ratio to local Parquet "
              f"{reference.best / fig.best:.2f}, peak RSS {fig.peak_mb:.0f} MB = {rss:.2f}x local "
              f"Parquet's {reference.peak_mb:.0f} MB (goal <= {GOAL_RSS}x -> "
              f"{verdict(rss, GOAL_RSS, at_most=True)}); the run itself {own:.2f} s", flush=True)
    return local / "Bench.parquet", figures.get("duckdb:/// (load)")


def against_ctas(parquet: Path, directory: Path, rows: int, runs: int, load: Figures | None) -> None:
    """Part 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    spec = json.dumps({"id": "tbl_bench", **SPEC})
    ours_db, theirs_db = directory / "ours.duckdb", directory / "theirs.duckdb"

    def fresh(path: Path) -> Callable[[], None]:
        def remove() -> None:
            for p in (path, path.with_name(path.name + ".wal")):
                p.unlink(missing_ok=True)
        return remove

    contenders = {
        "our writer": Contender([sys.executable, "-c", OUR_WRITER, str(parquet), str(ours_db), spec],
                                env, rows, reset=fresh(ours_db)),
        "duckdb read_parquet": Contender([sys.executable, "-c", DUCKDB_CTAS, str(parquet), str(theirs_db)],
                                         env, rows, reset=fresh(theirs_db)),
    }
    figures = contest(contenders, runs)
    ours, theirs = min(contenders["our writer"].own), min(contenders["duckdb read_parquet"].own)
    ratio = theirs / ours
    mine: Figures = figures["our writer"]
    print(f"2. DuckDB: {rows:,} rows from the local Parquet file into a table, own seconds (wall)")
    print(f"  our writer (batches of {PAGE_ROWS}): {ours:.2f} s ({mine.best:.2f} s wall, peak RSS "
          f"{mine.peak_mb:.0f} MB); duckdb CREATE TABLE AS read_parquet: {theirs:.2f} s "
          f"({figures['duckdb read_parquet'].best:.2f} s wall, peak RSS "
          f"{figures['duckdb read_parquet'].peak_mb:.0f} MB)")
    print(f"  ratio ours/duckdb {ratio:.2f} (goal >= {GOAL_DUCKDB}) -> {verdict(ratio, GOAL_DUCKDB)}")
    if load is None:
        return
    whole = figures["duckdb read_parquet"].best / load.best
    print(f"  whole `connector load` (API read included) vs duckdb read_parquet, wall: {whole:.2f} "
          "(the API read dominates: compare part 1's ratio to the Parquet export)", flush=True)


def main() -> None:
    rows, runs = rows_setting()
    print(f"rows {rows:,}, rounds {runs} (BENCH_QUICK=1 for a smoke run, BENCH_ROWS, BENCH_RUNS)")
    parts = os.environ.get("BENCH_PARTS", "1,2").split(",")
    s3 = start_s3_server()
    postgres = start_postgres()
    try:
        s3.create_bucket(BUCKET)
        s3_env = s3.env() | {"AWS_SHARED_CREDENTIALS_FILE": os.devnull}
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            started = time.perf_counter()
            seed(directory / "server.db", rows, "Bench")
            print(f"seeded {rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
            if "1" not in parts:  # part 2 reads the export's file: one round of it
                os.environ["BENCH_ONLY"] = "reference"
            parquet, load = platforms(directory, rows, runs if "1" in parts else 1, s3_env, postgres.url())
            if "2" in parts:
                against_ctas(parquet, directory, rows, runs, load)
    finally:
        s3.stop()
        postgres.stop()


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        os.environ["BENCH_QUICK"] = "1"
    main()
