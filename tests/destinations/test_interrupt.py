"""Ctrl-C and SIGTERM during `connector export` / `connector load`, as real processes.

One line on stderr (or, with ``--json``, the summary with status ``interrupted``), exit 130
or 143, no Python noise, the previous Parquet file or SQL table as it was (no partial file
left beside it), and a rerun that finishes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connector.errors import ExitCode
from tests.destinations.samples import wait_while_running
from tests.fixtures.server import ROOT, RunningServer, ServerFactory

SIGNALS = {"SIGINT": (signal.SIGINT, ExitCode.INTERRUPTED, "Ctrl-C"),
           "SIGTERM": (signal.SIGTERM, ExitCode.TERMINATED, "SIGTERM")}
NOISE = ("Traceback", "Event loop is closed", "Exception ignored", "Error in sys")
FIRST, MORE = 300, 2700
#: A page every `latency_ms`, two at a time: 3000 rows in pages of 50 take over a second.
PAGE = "50"


def seeded(server_factory: ServerFactory) -> tuple[RunningServer, str]:
    server = server_factory(latency_ms=40)
    table = server.create_table({"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]})
    server.insert_rows(table, [{"Sku": f"s{i}"} for i in range(FIRST)])
    return server, table


def start(server: RunningServer, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url,
           "CONNECTOR_API_KEY": server.api_key, "CONNECTOR_MAX_CONCURRENCY": "2"}
    return subprocess.Popen([sys.executable, "-m", "connector", *args, "--page-size", PAGE],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(run: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = run.communicate(timeout=60)
    return run.returncode, out, err


def check_stopped(code: int, out: str, err: str, expected: int, by: str, as_json: bool) -> None:
    assert code == expected, (out, err)
    for noise in NOISE:
        assert noise not in err, err
    line = (f"interrupted by {by}: tables finished before it are written, the one in flight "
            "is left as it was; run again to finish")
    assert err.splitlines() == [line], err
    if as_json:
        summary = json.loads(out)
        assert summary["status"] == "interrupted" and summary["exit_code"] == expected
        assert summary["error"] == line
    else:
        assert "Traceback" not in out


# Each signal once, each output once: the stop does not depend on the pairing (9 s a run).
@pytest.mark.parametrize(("name", "as_json"), [("SIGINT", False), ("SIGTERM", True)],
                         ids=["SIGINT-text", "SIGTERM-json"])
def test_a_signal_mid_export_keeps_the_previous_file(
    server_factory: ServerFactory, tmp_path: Path, name: str, as_json: bool
) -> None:
    signum, expected, by = SIGNALS[name]
    server, table = seeded(server_factory)
    out_dir = tmp_path / "out"
    code, _, err = finish(start(server, "export", "--out", str(out_dir)))
    assert code == 0, err
    previous = (out_dir / "Orders.parquet").read_bytes()
    server.insert_rows(table, [{"Sku": f"t{i}"} for i in range(MORE)])

    run = start(server, "export", "--out", str(out_dir), *(["--json"] if as_json else []))
    # the new file is being written aside
    wait_while_running(run, lambda: bool(list(out_dir.glob(".Orders.parquet.*"))))
    time.sleep(0.2)
    run.send_signal(signum)
    check_stopped(*finish(run), expected, by, as_json)

    assert sorted(p.name for p in out_dir.iterdir()) == [  # no partial file left
        "Orders.parquet", "_connector_tables.json"]
    assert (out_dir / "Orders.parquet").read_bytes() == previous
    code, _, err = finish(start(server, "export", "--out", str(out_dir)))  # a rerun finishes
    assert code == 0, err
    import pyarrow.parquet as pq

    assert pq.read_metadata(out_dir / "Orders.parquet").num_rows == FIRST + MORE


@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_mid_load_keeps_the_previous_table(
    server_factory: ServerFactory, tmp_path: Path, name: str
) -> None:
    signum, expected, by = SIGNALS[name]
    server, table = seeded(server_factory)
    db = tmp_path / "warehouse.db"
    url = f"sqlite:///{db}"
    code, _, err = finish(start(server, "load", "--to", url))
    assert code == 0, err
    server.insert_rows(table, [{"Sku": f"t{i}"} for i in range(MORE)])

    run = start(server, "load", "--to", url, "--json")
    journal = db.with_name(db.name + "-journal")
    wait_while_running(run, journal.exists)  # the load's transaction is open: batches go in
    time.sleep(0.2)
    run.send_signal(signum)
    check_stopped(*finish(run), expected, by, True)

    with sqlite3.connect(db) as conn:
        assert conn.execute('SELECT count(*) FROM "Orders"').fetchone() == (FIRST,)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert names == {"Orders", "_connector_tables"}, names  # no staging table left behind
    code, _, err = finish(start(server, "load", "--to", url))
    assert code == 0, err
    with sqlite3.connect(db) as conn:
        assert conn.execute('SELECT count(*) FROM "Orders"').fetchone() == (FIRST + MORE,)
