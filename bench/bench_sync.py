"""`connector sync` of 100,000 and 1,000,000 rows to SQLite + Parquet: seconds and peak RSS.

For each size, three runs of one job (``incremental = true``, ``deletes = "delete"``, a
SQLite database and a Parquet directory), each a fresh `connector sync` process:

1. full: the first run reads every row;
2. incremental: after 1% of the rows were changed and 0.1% deleted upstream (so the run
   reads the changes, finds the counts differ and makes the id pass);
3. quiet: nothing changed;
4. verify: ``--verify`` (every row read and compared with both destinations; nothing to
   repair).

and, for comparison, `connector export` of the same table to Parquet. Peak RSS is the
process's own high-water mark (VmHWM, read by a launcher at exit; ru_maxrss of an exec'd
child would also count the parent's pages). Goal (issue 8): every sync <= 250 MB and the
1,000,000-row figure <= 1.5x the 100,000-row one, full and incremental.

Tables are seeded through the server's storage layer (as the test fixtures do).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_extract import _seed
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer

#: `BENCH_SYNC_SIZES=1000,10000` for a quick try of the bench itself.
SIZES = tuple(int(n) for n in os.environ.get("BENCH_SYNC_SIZES", "100000,1000000").split(","))
CHANGED = 0.01
DELETED = 0.001
GOAL_MB = 250
GOAL_RATIO = 1.5
ROOT = Path(__file__).resolve().parents[1]

#: Runs `connector ARGS...` and writes its peak RSS (kB) to the file named first.
_LAUNCH = """
import re, sys
out = sys.argv.pop(1)
from connector.cli import main
try:
    main(args=sys.argv[1:], prog_name="connector")
finally:
    hwm = re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)
    open(out, "w").write(hwm)
"""

JOB = """
name = "bench"
[source]
api_key_env = "CONNECTOR_API_KEY"
page_size = 100
concurrency = 4
[tables]
include = ["{table}"]
[sync]
incremental = true
deletes = "delete"
[[destination]]
url = "sqlite:///{out}/bench.db"
[[destination]]
parquet = "{out}/parquet"
"""


def _connector(server: RunningServer, *args: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one `connector ARGS` process; it must exit 0."""
    with tempfile.NamedTemporaryFile(suffix=".hwm") as hwm:
        env = {**os.environ, "CONNECTOR_API_KEY": server.api_key,
               "CONNECTOR_BASE_URL": server.base_url}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _LAUNCH, hwm.name, *args], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"connector {' '.join(args)} exited {done.returncode}:\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return seconds, int(Path(hwm.name).read_text()) / 1024


def _change(db: Path, table_id: str, rows: int) -> tuple[int, int]:
    """Update 1% of the rows (spread over the table) and delete 0.1%; returns the counts."""
    with contextlib.closing(Storage(str(db))) as storage:
        table = storage.table(table_id)
        assert table is not None
        with storage._read() as conn:  # a bench's shortcut to every id
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM rows WHERE table_id = ? ORDER BY created_at", (table_id,))]
        changed = ids[:: int(1 / CHANGED)]
        deleted = ids[5 :: int(1 / DELETED)]
        for row_id in changed:
            storage.update_row(table, row_id, table.check_update({"Amount": -1.0}))
        storage.delete_rows(table, deleted)
    return len(changed), len(deleted)


def main() -> None:
    results: dict[int, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        db = directory / "server.db"
        tables = {}
        for rows in SIZES:
            started = time.perf_counter()
            tables[rows] = _seed(db, rows, f"sync{rows}")
            print(f"seeded {rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
        server = RunningServer(directory, {}).start()
        try:
            for rows in SIZES:
                out = directory / f"out{rows}"
                out.mkdir()
                job = out / "bench.toml"
                job.write_text(JOB.format(table=f"sync{rows}", out=out))
                figures = results[rows] = {}
                figures["export"] = _connector(server, "export", "--out", str(out / "export"),
                                               "--table", f"sync{rows}")
                figures["full"] = _connector(server, "sync", str(job))
                changed, deleted = _change(db, tables[rows], rows)
                figures["incremental"] = _connector(server, "sync", str(job))
                figures["quiet"] = _connector(server, "sync", str(job))
                figures["verify"] = _connector(server, "sync", str(job), "--verify")
                for kind, (seconds, mb) in figures.items():
                    print(f"{rows:>9,} rows  {kind:<12} {seconds:7.1f} s  {mb:6.0f} MB peak RSS"
                          + (f"  ({changed:,} changed, {deleted:,} deleted)"
                             if kind == "incremental" else ""), flush=True)
        finally:
            server.stop()
    small, big = results[SIZES[0]], results[SIZES[-1]]
    for kind in ("full", "incremental"):
        ratio = big[kind][1] / small[kind][1]
        ok = big[kind][1] <= GOAL_MB and ratio <= GOAL_RATIO
        print(f"sync {kind}: {SIZES[-1]:,} rows {big[kind][1]:.0f} MB (goal <= {GOAL_MB}), "
              f"ratio to {SIZES[0]:,} rows {ratio:.2f} (goal <= {GOAL_RATIO}): "
              f"{'OK' if ok else 'MISSED'}; export of the same table {big['export'][1]:.0f} MB")


if __name__ == "__main__":
    main()
