"""The peer tool: dlt's `rest_api` source into Parquet against `connector export`, same run.

Both are whole processes, as a user runs them, against one `connector serve --latency-ms 20`
over the issue's table (100,000 rows of 5 columns, one of free text; see
bench.bench_throughput). dlt is configured the way its documentation shows for an API like
ours: an offset paginator (``offset``/``limit``, page 100, stop at ``total``), the table's
rows endpoint sorted by creation, a bearer token, rows under ``rows``; destination
`filesystem` writing Parquet into a temporary directory, its pipelines and data directory
there too, telemetry off (RUNTIME__DLTHUB_TELEMETRY=false): fully offline. Each side is
checked to have written every row. A warm-up of each, then 3 rounds (2 quick) alternating.
Goal: ours >= 7x faster.

dlt is an optional bench dependency (the `bench` extra): without it this prints that the
benchmark was skipped. ``BENCH_QUICK=1`` / ``BENCH_ROWS=N`` size it as bench_throughput.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from bench._procs import contest, run, start, user_env, verdict
from bench.bench_throughput import Contender, Sizes, export, seed

GOAL = 7.0
LATENCY_MS = 20
PAGE = 100

#: dlt's rest_api into Parquet: argv base_url, table id, work directory, page size; prints the
#: rows loaded.
DLT = """
import os, sys
import dlt
from dlt.sources.rest_api import rest_api_source
base, table_id, work, page = sys.argv[1:5]
source = rest_api_source({
    "client": {
        "base_url": base + "/",
        "auth": {"type": "bearer", "token": os.environ["CONNECTOR_API_KEY"]},
        "paginator": {"type": "offset", "limit": int(page), "offset_param": "offset",
                      "limit_param": "limit", "total_path": "total"},
    },
    "resources": [{
        "name": "bench",
        "endpoint": {"path": f"tables/{table_id}/rows", "data_selector": "rows",
                     "params": {"sort": "created_at", "order": "asc"}},
        "write_disposition": "replace",
    }],
})
pipeline = dlt.pipeline(
    pipeline_name="bench_peer", dataset_name="bench", pipelines_dir=os.path.join(work, "pipelines"),
    destination=dlt.destinations.filesystem(bucket_url="file://" + os.path.join(work, "out")),
)
pipeline.run(source, loader_file_format="parquet")
print(pipeline.last_trace.last_normalize_info.row_counts["bench"])
"""


def main() -> None:
    if importlib.util.find_spec("dlt") is None:
        print("peer benchmark skipped: dlt is not installed (pip install 'table-data-connector[bench]')")
        return
    sizes = Sizes.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "out").mkdir()
        table_id = seed(directory / "server.db", sizes.main, "main")
        server = start(directory, latency_ms=LATENCY_MS)
        try:
            ours = export(server, directory / "out", ["main"], sizes.main)
            work = directory / "dlt"
            env = user_env(server, RUNTIME__DLTHUB_TELEMETRY="false", DLT_DATA_DIR=str(work / "data"))
            argv = [sys.executable, "-c", DLT, server.base_url, table_id, str(work), str(PAGE)]
            peer = Contender(argv, env, server, sizes.main, cwd=directory)
            figures = contest({"ours": ours, "dlt": peer}, sizes.runs)
        finally:
            server.stop()
        parquet = sorted(str(p.relative_to(work)) for p in (work / "out").rglob("*.parquet"))
    mine, theirs = figures["ours"], figures["dlt"]
    ratio = theirs.best / mine.best
    median = theirs.median / mine.median
    print(f"export {sizes.main:,} rows to Parquet, server --latency-ms {LATENCY_MS}")
    print(f"  ours (connector export, defaults): {mine.text()}, {sizes.main / mine.best:,.0f} rows/s, "
          f"{ours.requests} requests, peak RSS {mine.peak_mb:.0f} MB")
    print(f"  dlt {_version()} rest_api -> filesystem parquet: {theirs.text()}, "
          f"{sizes.main / theirs.best:,.0f} rows/s, {peer.requests} requests, peak RSS {theirs.peak_mb:.0f} MB "
          f"(wrote {len(parquet)} Parquet file(s))")
    print(f"  ours faster by {ratio:.1f}x (best vs best), {median:.1f}x (median vs median); "
          f"goal >= {GOAL:g}x -> {verdict(ratio, GOAL)}", flush=True)


def _version() -> str:
    """dlt's version, read in a subprocess: importing dlt here would slow the bench process."""
    return run([sys.executable, "-c", "import dlt; print(dlt.__version__)"], dict(os.environ)).stdout.strip()


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        os.environ["BENCH_QUICK"] = "1"
    main()
