"""Apache Iceberg: peak RSS and time of whole processes, as a user runs them.

1. ``connector export --format iceberg`` of ROWS rows (200,000 by default; the table of
   bench_throughput, with an ~80-character free-text column) against the local Parquet export
   of the same rows in the same run; and the same Iceberg export with the chunking switched
   off (`CHUNK_BYTES` set past the table's size in that process): what the chunks save.
2. Merges into a table of ROWS rows through the destination protocol, one process each,
   Iceberg against Delta Lake: a small merge (MERGE_ROWS rows upserted and as many deleted:
   Iceberg's delete by ids) and a large one (a quarter of the rows: Iceberg rewrites the
   table). The figure is the merge's own seconds (the process times it) and the process's
   peak RSS.

Each contender runs once to warm up, then RUNS rounds in alternating order; best against
best. Measured, never asserted. ``BENCH_ROWS=N``, ``BENCH_RUNS=N`` (default 2),
``BENCH_QUICK=1`` (20,000 rows), ``BENCH_PARTS=export`` (or ``merge``) for one part.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench._procs import CONNECTOR, Timed, contest, run, start, user_env
from bench.bench_throughput import seed

MERGE_ROWS = 1_000

#: `connector export` with Iceberg's chunks as large as the whole table.
UNCHUNKED = """
import sys
import connector.destinations.iceberg as iceberg
iceberg.CHUNK_BYTES = 1 << 40
from connector.cli import main
sys.argv[0] = "connector"
main()
"""

#: One merge through the protocol: argv kind, folder, rows, rows merged; prints JSON.
MERGE = """
import json, sys, time
from datetime import UTC, datetime, timedelta
import pyarrow as pa
from connector.destinations import TableChange, Target, make_config, open_destination
from connector.ids import IdSet
from connector.schema import Column, Table, arrow_schema
from pathlib import Path

kind, folder, rows, merged = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
table = Table("tbl_bench", "Bench", (Column("Name", "text"), Column("Note", "text"),
              Column("Amount", "number"), Column("Due", "date"), Column("Paid", "checkbox")))
schema = arrow_schema(table)
t0 = datetime(2024, 1, 1, tzinfo=UTC)

def batch(numbers, name):
    n = len(numbers)
    return pa.RecordBatch.from_arrays([
        pa.array([f"row_{i:08d}" for i in numbers]),
        pa.array([t0] * n, schema.field(1).type), pa.array([t0 + timedelta(seconds=1)] * n, schema.field(2).type),
        pa.array([f"{name} {i}" for i in numbers]),
        pa.array(["a free-text note of some eighty characters, as people write them " + str(i % 97)
                  for i in numbers]),
        pa.array([i * 1.25 for i in numbers], pa.float64()),
        pa.array([None] * n, pa.date32()), pa.array([i % 2 == 0 for i in numbers]),
    ], schema=schema)

def pages(numbers, name):
    for begin in range(0, len(numbers), 1000):
        yield batch(numbers[begin:begin + 1000], name)

target = Target(table, "Bench")
destination = open_destination(make_config(kind, folder, mode="merge", where="bench", base=Path.cwd()))
destination.apply(target, TableChange("replace", pages(range(rows), "customer")))
# the merge: `merged` rows changed (spread over the table), as many deleted
step = rows // merged
changed = list(pages(range(0, rows, step)[:merged], "changed"))
ids = IdSet.of(b.column(0) for b in changed)
gone = pa.array([f"row_{i + 1:08d}" for i in range(0, rows, step)][:merged])
started = time.perf_counter()
done = destination.apply(target, TableChange("merge", changed, deleted=gone, ids=ids))
seconds = time.perf_counter() - started
destination.close()
assert (done.written, done.deleted) == (merged, merged), done
print(json.dumps({"rows": merged, "seconds": seconds}))
"""


def settings() -> tuple[int, int]:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    return int(os.environ.get("BENCH_ROWS", 20_000 if quick else 200_000)), int(
        os.environ.get("BENCH_RUNS", 2))


def exports(directory: Path, rows: int, runs: int) -> None:
    server = start(directory)
    env = user_env(server)
    out = directory / "out"

    def export(argv: list[str]) -> Timed:
        timed = run(argv, env)
        written = json.loads(timed.stdout)["totals"]["rows_written"]
        if written != rows:
            raise RuntimeError(f"{argv[:4]} wrote {written} rows, expected {rows}")
        return timed

    contenders = {
        "parquet (reference)": lambda: export(
            [CONNECTOR, "export", "--out", str(out / "parquet"), "--json"]),
        "iceberg": lambda: export(
            [CONNECTOR, "export", "--format", "iceberg", "--out", str(out / "iceberg"), "--json"]),
        "iceberg, one chunk": lambda: export(
            [sys.executable, "-c", UNCHUNKED, "export", "--format", "iceberg", "--out",
             str(out / "whole"), "--json"]),
    }
    try:
        figures = contest(contenders, runs)
    finally:
        server.stop()
    reference = figures["parquet (reference)"]
    print(f"1. export of {rows:,} rows, whole processes, best of {runs} after a warm-up")
    for name, fig in figures.items():
        print(f"  {name:<22} {fig.text()}, ratio to Parquet {reference.best / fig.best:.2f}, "
              f"peak RSS {fig.peak_mb:.0f} MB (Parquet {reference.peak_mb:.0f} MB)", flush=True)


def merges(directory: Path, rows: int, runs: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    own: dict[str, list[float]] = {}

    def merge(kind: str, merged: int) -> Timed:
        folder = directory / f"{kind}-{merged}-{time.monotonic_ns()}"
        timed = run([sys.executable, "-c", MERGE, kind, str(folder), str(rows), str(merged)], env)
        own.setdefault(f"{kind}, {merged:,}", []).append(json.loads(timed.stdout)["seconds"])
        return timed

    large = rows // 4
    contenders = {
        f"iceberg, {MERGE_ROWS:,}": lambda: merge("iceberg", MERGE_ROWS),
        f"delta, {MERGE_ROWS:,}": lambda: merge("delta", MERGE_ROWS),
        f"iceberg, {large:,}": lambda: merge("iceberg", large),
        f"delta, {large:,}": lambda: merge("delta", large),
    }
    figures = contest(contenders, runs)
    print(f"2. merges into {rows:,} rows (n upserted + n deleted), the merge's own seconds, "
          f"best of {runs}")
    for name, fig in figures.items():
        print(f"  {name:<18} merge {min(own[name]):.2f} s, process peak RSS {fig.peak_mb:.0f} MB",
              flush=True)


def main() -> None:
    rows, runs = settings()
    print(f"rows {rows:,}, rounds {runs} (BENCH_QUICK=1, BENCH_ROWS, BENCH_RUNS)")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        started = time.perf_counter()
        seed(directory / "server.db", rows, "Bench")
        print(f"seeded {rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
        parts = os.environ.get("BENCH_PARTS", "export,merge").split(",")
        if "export" in parts:
            exports(directory, rows, runs)
        if "merge" in parts:
            merges(directory, rows, runs)


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        os.environ["BENCH_QUICK"] = "1"
    main()
