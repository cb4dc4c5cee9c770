"""The lookback window: an update committed late is not lost, and rows read again unchanged
are neither rewritten nor counted.

The reference server produces the late commit itself (`late_visibility_ms`: a write is
stamped when it arrives and reaches reads that much later). Every destination is compared
with the server value by value after the change, read back with its own library.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from connector.errors import ConfigError
from connector.jobs.config import load_job
from tests.jobs.conftest import MakeWorkspace, Workspace, person, sql_rows

DESTINATIONS = (
    '[[destination]]\nurl = "sqlite:///wh.db"\n'
    '[[destination]]\nparquet = "pq"\n'
    '[[destination]]\nurl = "duckdb:///wh.duckdb"\n'
    '[[destination]]\ndelta = "lake"\n'
)
PEOPLE_ONLY = '[tables]\ninclude = ["People"]\n'
LATE_MS = 4000


def scores_upstream(ws: Workspace) -> dict[str, float]:
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    return {r["fields"]["Name"]: r["fields"]["Score"] for r in rows}


def scores_held(ws: Workspace, tmp_path: Path) -> dict[str, dict[str, float]]:
    """Each destination's People scores, read back with its own library."""
    held = {
        "sqlite": {r["Name"]: r["Score"] for r in sql_rows(f"sqlite:///{tmp_path / 'wh.db'}")},
        "parquet": dict(zip(*pq.read_table(tmp_path / "pq" / "People.parquet",
                                           columns=["Name", "Score"]).to_pydict().values(),
                            strict=True)),
        "delta": {r["Name"]: r["Score"] for r in
                  DeltaTable(str(tmp_path / "lake" / "People")).to_pyarrow_table().to_pylist()},
    }
    with duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True) as con:
        held["duckdb"] = dict(con.execute('SELECT "Name", "Score" FROM "People"').fetchall())
    return held


def update_late(ws: Workspace, count: int) -> dict[str, float]:
    """`count` updates through the API, stamped now but visible only `LATE_MS` later; then a
    row written by another writer (the server's storage, at once), stamped after them, which
    moves the next run's cursor past their stamps while they are not visible yet."""
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    by_name = {r["fields"]["Name"]: r["id"] for r in rows}
    ws.server.set_faults(late_visibility_ms=LATE_MS)
    late = {f"P{i:03d}": 1000.0 + i for i in range(count)}
    for name, score in late.items():
        ws.api("PATCH", f"/tables/{ws.people}/rows/{by_name[name]}", json={"fields": {"Score": score}})
    time.sleep(0.01)
    ws.server.insert_rows(ws.people, [person(99)])
    return late


@pytest.fixture
def lagging(make_workspace: MakeWorkspace) -> Workspace:
    return make_workspace(fault_control=True)


def run_ok(ws: Workspace, job: Path, **options: Any) -> Any:
    summary = ws.run(job, **options)
    assert summary.status == "ok", (summary.error, [t.error for t in summary.tables])
    return summary


def test_without_a_window_a_late_commit_is_lost_for_good(lagging: Workspace, tmp_path: Path) -> None:
    """What the window is for: with ``lookback = 0`` the late updates never arrive."""
    job = lagging.job("[sync]\nincremental = true\nlookback = 0\n" + PEOPLE_ONLY + DESTINATIONS)
    run_ok(lagging, job)
    late = update_late(lagging, 5)
    run_ok(lagging, job)  # reads past their stamps before they are visible
    time.sleep(LATE_MS / 1000 + 0.5)

    for _ in range(3):
        run_ok(lagging, job)

    upstream = scores_upstream(lagging)
    assert all(upstream[name] == score for name, score in late.items())  # the fault landed
    for kind, held in scores_held(lagging, tmp_path).items():
        stale = sorted(name for name in late if held[name] != upstream[name])
        assert stale == sorted(late), kind


def test_the_window_reads_late_commits_into_every_destination(
    lagging: Workspace, tmp_path: Path
) -> None:
    job = lagging.job("[sync]\nincremental = true\n" + PEOPLE_ONLY + DESTINATIONS)  # default
    run_ok(lagging, job)
    late = update_late(lagging, 5)
    passed = run_ok(lagging, job)  # the cursor passes the late stamps; they are not visible yet
    assert passed.tables[0].late_rows == 0
    time.sleep(LATE_MS / 1000 + 0.5)

    caught = run_ok(lagging, job)

    (table,) = caught.tables
    assert table.late_rows == 5 and table.rows_written == 5
    assert table.window_rows >= 5
    upstream = scores_upstream(lagging)
    assert all(upstream[name] == score for name, score in late.items())
    for kind, held in scores_held(lagging, tmp_path).items():
        assert held == upstream, kind
    again = run_ok(lagging, job)
    assert again.tables[0].status == "unchanged" and again.tables[0].late_rows == 0


def test_rows_the_window_reads_again_unchanged_are_not_rewritten(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job("[sync]\nincremental = true\n" + PEOPLE_ONLY + DESTINATIONS)
    run_ok(workspace, job)
    parquet = tmp_path / "pq" / "People.parquet"
    before = (parquet.stat().st_mtime_ns, DeltaTable(str(tmp_path / "lake" / "People")).version())

    quiet = run_ok(workspace, job)

    (table,) = quiet.tables
    assert table.status == "unchanged"
    assert table.window_rows == 10 and table.rows_read == 10  # every row is seconds old
    assert (table.rows_written, table.late_rows) == (0, 0)
    after = (parquet.stat().st_mtime_ns, DeltaTable(str(tmp_path / "lake" / "People")).version())
    assert after == before


SYNC_TWICE = """
import sys
from connector.jobs.config import load_job
from connector.jobs.run import run_job
runs = [run_job(load_job(sys.argv[1])) for _ in range(2)]
print([t.window_rows for t in runs[1].tables], "pandas" in sys.modules)
"""


@pytest.mark.parametrize("lookback", ["0", '"5m"'])
def test_a_quiet_incremental_sync_never_imports_pandas(
    workspace: Workspace, tmp_path: Path, lookback: str
) -> None:
    """pandas (~40 MB, ~1 s of a quiet sync's start on a loaded machine) stays out of a quiet
    sync, with nothing to read again or with every row inside the window: stamps are compared
    as integers read from their buffers (a zone-aware Arrow scalar made from a datetime, a
    Python scalar in a compute function, and `to_numpy` each import it)."""
    job = workspace.job(f"[sync]\nincremental = true\nlookback = {lookback}\n" + PEOPLE_ONLY
                        + '[[destination]]\nparquet = "pq"\n[[destination]]\nurl = "sqlite:///s.db"\n')
    done = subprocess.run(
        [sys.executable, "-c", SYNC_TWICE, str(job)], capture_output=True, text=True, check=True,
        env={**os.environ, **workspace.environ}, cwd=Path(__file__).parents[2],
    )
    window = "0" if lookback == "0" else str(workspace.server.row_count(workspace.people))
    assert done.stdout.split("\n")[-2] == f"[{window}] False"


def test_a_settled_window_reads_nothing_again(workspace: Workspace, tmp_path: Path) -> None:
    """Once the server's clock is a window past the last read, that run's rows are settled."""
    job = workspace.job(
        '[sync]\nincremental = true\nlookback = "1s"\n' + PEOPLE_ONLY
        + '[[destination]]\nparquet = "pq"\n'
    )
    run_ok(workspace, job)
    # The Date header has whole seconds and uvicorn refreshes it once a second: the server's
    # clock as read may be up to 2 s behind, and the window is 1 s.
    time.sleep(3.2)
    run_ok(workspace, job)  # its read began over a window after the rows' stamps

    settled = run_ok(workspace, job)

    assert (settled.tables[0].status, settled.tables[0].window_rows) == ("unchanged", 0)


def test_lookback_settings_are_checked(workspace: Workspace, tmp_path: Path) -> None:
    for value, seconds in (('"90s"', 90.0), ('"5m"', 300.0), ("0", 0.0), ("2.5", 2.5)):
        job = workspace.job(f"[sync]\nincremental = true\nlookback = {value}\n" + DESTINATIONS)
        assert load_job(job).lookback == seconds
    assert load_job(workspace.job("[sync]\nincremental = true\n" + DESTINATIONS)).lookback == 300.0
    for bad in ('"soon"', "-1", "true", '"5 days"'):
        job = workspace.job(f"[sync]\nincremental = true\nlookback = {bad}\n" + DESTINATIONS)
        with pytest.raises(ConfigError, match=r"sync\.lookback: must be a duration"):
            load_job(job)
