"""A quiet incremental sync in every destination kind: what a table costs when nothing changed.

Seven tables of 1,000 rows (the demo workspace's count, a lookback window that re-reads some
rows: the last 200 of each table were written within it), one job per kind (SQLite, DuckDB,
Parquet, Delta, Iceberg), ``incremental = true``, ``deletes = "delete"``. Each job's first
sync loads every row; then `BENCH_RUNS` (default 3) quiet syncs, each a fresh `connector sync`
process, and the median is reported: the process's wall time, the run's own seconds (its
summary) and the slowest table's seconds. Goal (issue 27): a kind's quiet run <= 1.2x
SQLite's, and <= 0.1 s per unchanged table in every kind.

    python -m bench quiet
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench._procs import CountingServer, run, start, user_env

TABLES = 7
ROWS = 1000
RECENT = 200  #: rows of each table written within the lookback window
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
KINDS = {
    "sqlite": 'url = "sqlite:///{out}/w.db"',
    "duckdb": 'url = "duckdb:///{out}/w.duckdb"',
    "parquet": 'parquet = "{out}/parquet"',
    "delta": 'delta = "{out}/delta"',
    "iceberg": 'iceberg = "{out}/iceberg"',
}
GOAL_RATIO = 1.2
GOAL_PER_TABLE = 0.1
OLD = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
SPEC = {"columns": [{"name": "Code", "type": "text"}, {"name": "Qty", "type": "number"},
                    {"name": "When", "type": "date"}]}


def seed(server: CountingServer) -> None:
    """Each table's first rows stamped a day ago (the server's stamp faults), the last
    `RECENT` now."""
    ids = [server.create_table({**SPEC, "name": f"T{t}"}) for t in range(TABLES)]
    for stamped, rows in ((True, range(ROWS - RECENT)), (False, range(ROWS - RECENT, ROWS))):
        server.options = {"stamp_created_at": OLD, "stamp_updated_at": OLD} if stamped else {}
        server.restart()
        with server.client() as http:  # through the API: the server stamps them
            for table in ids:
                cells = [{"Code": f"c{i:05d}", "Qty": i, "When": "2026-01-02"} for i in rows]
                for start_ in range(0, len(cells), 100):
                    chunk = [{"fields": c} for c in cells[start_:start_ + 100]]
                    http.post(f"/tables/{table}/rows/bulk", json={"rows": chunk}).raise_for_status()


def sync(server: CountingServer, job: Path) -> tuple[float, float, float]:
    """One `connector sync --json` process: its wall seconds, the run's, the slowest table's."""
    timed = run([sys.executable, "-m", "connector", "sync", str(job), "--log-format", "json"],
                user_env(server), cwd=job.parent)
    summary = json.loads(timed.stdout)
    assert summary["status"] == "ok", timed.stdout[-500:]
    return timed.seconds, summary["seconds"], max(t["seconds"] for t in summary["tables"])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-quiet-") as tmp:
        root = Path(tmp)
        (root / "server").mkdir()
        server = start(root / "server")
        try:
            seed(server)
            figures: dict[str, tuple[float, float, float]] = {}
            for kind, line in KINDS.items():
                out = root / kind
                out.mkdir()
                job = out / "job.toml"
                job.write_text(
                    f'name = "quiet-{kind}"\n[source]\npage_size = 100\n'
                    f'[sync]\nincremental = true\ndeletes = "delete"\nstate_dir = "{out}/state"\n'
                    f"[[destination]]\n{line.format(out=out)}\n", encoding="utf-8")
                sync(server, job)  # the first run loads every row
                runs = [sync(server, job) for _ in range(RUNS)]
                figures[kind] = tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[assignment]
        finally:
            server.stop()
    base_wall, base_run, _ = figures["sqlite"]
    print(f"quiet incremental sync, {TABLES} tables of {ROWS} rows, median of {RUNS} processes")
    for kind, (wall, own, slowest) in figures.items():
        per_table = own / TABLES
        print(f"  {kind:8} wall {wall:5.2f} s ({wall / base_wall:4.2f}x SQLite's), run {own:5.2f} s "
              f"({own / base_run:4.2f}x), {per_table:5.3f} s a table, slowest table {slowest:5.2f} s; "
              f"goal <= {GOAL_RATIO}x and <= {GOAL_PER_TABLE} s a table -> "
              f"{'PASS' if own / base_run <= GOAL_RATIO and per_table <= GOAL_PER_TABLE else 'MISS'}")
