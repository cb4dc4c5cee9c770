"""The Spark data source (`connector.spark`) against `connector export`: 1,000,000 rows to
Parquet, whole processes, against the same server in the same run.

Contenders, each a fresh process timed from spawn to exit (GNU time, `bench._procs.run`):

* ``connector export --out DIR --table Bench`` (the reference: one process, one read);
* a ``python -c`` script that starts Spark in local mode (``local[2]``, the machine's cores),
  reads the table with ``spark.read.format("tabledata")`` in 2 and in 10 partitions, and writes
  it with ``frame.write.parquet``: the whole process, JVM start included, and the script's
  own seconds from the session being ready to the files being written.

The table is bench_throughput's (5 columns, an ~80-character free-text one), seeded through
the server's storage; the server shares the machine's 2 cores with the contenders. Each
contender runs once to warm up, then RUNS rounds in alternating order; best against best.
Measured, never asserted: the ratios are printed. ``BENCH_QUICK=1``: 50,000 rows;
``BENCH_ROWS``, ``BENCH_RUNS`` as for bench_platforms.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from bench._procs import CONNECTOR, contest, start, user_env
from bench.bench_platforms import Contender, rows_setting
from bench.bench_throughput import seed

#: Partitions of the Spark read: one per core of local[2], and the default for 1M rows.
PARTITIONS = (2, 10)

#: argv: base URL, table, output directory, partitions. Prints one JSON line: rows written,
#: seconds from the session being ready to the files written, seconds to start the session.
SPARK_EXPORT = """
import json, sys, time
started = time.perf_counter()
from pyspark.sql import SparkSession
from connector.spark import TableDataSource
base, table, out, partitions = sys.argv[1:5]
spark = (SparkSession.builder.master("local[2]")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .getOrCreate())
spark.dataSource.register(TableDataSource)
ready = time.perf_counter()
frame = (spark.read.format("tabledata").option("base_url", base).option("table", table)
         .option("partitions", partitions).load())
frame.write.mode("overwrite").parquet(out)
seconds = time.perf_counter() - ready
rows = spark.read.parquet(out).count()
spark.stop()
print(json.dumps({"rows": rows, "seconds": seconds, "session": ready - started}))
"""


def main() -> None:
    rows, runs = rows_setting()
    print(f"rows {rows:,}, rounds {runs} (BENCH_QUICK=1 for a smoke run, BENCH_ROWS, BENCH_RUNS)")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        started = time.perf_counter()
        seed(directory / "server.db", rows, "Bench")
        print(f"seeded {rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
        server = start(directory)
        try:
            env = user_env(server) | {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
            out = directory / "out"
            contenders = {
                "connector export (reference)": Contender(
                    [CONNECTOR, "export", "--out", str(out / "export"), "--table", "Bench", "--json"],
                    env, rows,
                ),
                **{
                    f"spark local[2], {n} partitions": Contender(
                        [sys.executable, "-c", SPARK_EXPORT, server.base_url, "Bench",
                         str(out / f"spark{n}"), str(n)],
                        env, rows,
                    )
                    for n in PARTITIONS
                },
            }
            figures = contest(contenders, runs)
        finally:
            server.stop()
    reference = figures["connector export (reference)"]
    own_reference = min(contenders["connector export (reference)"].own)
    print(f"{rows:,} rows to Parquet, whole processes, best of {runs} after a warm-up "
          f"(load average {os.getloadavg()[0]:.1f})")
    for name, fig in figures.items():
        own = min(contenders[name].own)
        print(f"  {name:<30} {fig.text()}, {rows / fig.best:>9,.0f} rows/s, ratio to export "
              f"{reference.best / fig.best:.2f}; the read itself {own:.2f} s (ratio "
              f"{own_reference / own:.2f}), peak RSS of the process {fig.peak_mb:.0f} MB", flush=True)


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        os.environ["BENCH_QUICK"] = "1"
    main()
