"""A push killed with SIGKILL half-way converges when run again, with no duplicate rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pandas as pd

from connector.api import Client
from connector.push import PushSpec, push
from tests.fixtures.server import ROOT, ServerFactory
from tests.push.conftest import PEOPLE

ROWS = 3000


def total(http: httpx.Client, table_id: str) -> int:
    return int(http.get(f"/tables/{table_id}/rows", params={"limit": 1}).json()["total"])


def test_kill_9_half_way_then_rerun_converges(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory(latency_ms=150)  # one bulk create takes > 150 ms
    table_id = server.create_table(PEOPLE)
    server.insert_rows(table_id, [{"Name": f"n{i:05d}", "Age": i} for i in range(0, ROWS, 7)])
    source = pd.DataFrame({"Name": [f"n{i:05d}" for i in range(ROWS)], "Age": list(range(ROWS))})
    path = tmp_path / "people.csv"
    source.to_csv(path, index=False)

    proc = subprocess.Popen(
        [sys.executable, "-m", "connector", "push", str(path), "--table", "People", "--key", "Name",
         "--concurrency", "1", "--base-url", server.base_url],
        cwd=ROOT, env={**os.environ, "CONNECTOR_API_KEY": server.api_key},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    seeded = len(range(0, ROWS, 7))
    with server.client() as http:
        deadline = time.monotonic() + 60
        while total(http, table_id) < seeded + 500 and time.monotonic() < deadline:
            assert proc.poll() is None, "the push finished before it could be interrupted"
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        assert seeded + 500 <= total(http, table_id) < ROWS, "not killed half-way"

    with Client(server.base_url, server.api_key) as client:
        rerun = push(client, PushSpec(path, table="People", key="Name"))
        assert rerun.rejected == ()
        assert push(client, PushSpec(path, table="People", key="Name")).plan.is_empty

    with server.client() as http:
        found = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()
        rows = found["rows"]
        offset = 1000
        while len(rows) < found["total"]:
            rows += http.get(f"/tables/{table_id}/rows",
                             params={"limit": 1000, "offset": offset}).json()["rows"]
            offset += 1000
    names = Counter(r["fields"]["Name"] for r in rows)
    assert max(names.values()) == 1, "a row was created twice"
    assert sorted((r["fields"]["Name"], r["fields"]["Age"]) for r in rows) == [
        (f"n{i:05d}", i) for i in range(ROWS)
    ]


def test_ctrl_c_still_prints_the_one_json_summary(server_factory: ServerFactory, tmp_path: Path) -> None:
    import json
    import signal

    server = server_factory(latency_ms=150)
    table_id = server.create_table(PEOPLE)
    path = tmp_path / "people.csv"
    pd.DataFrame({"Name": [f"n{i:05d}" for i in range(ROWS)]}).to_csv(path, index=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "connector", "push", str(path), "--table", "People", "--key", "Name",
         "--concurrency", "1", "--json", "--base-url", server.base_url],
        cwd=ROOT, env={**os.environ, "CONNECTOR_API_KEY": server.api_key},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while server.row_count(table_id) < 200 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert (summary["status"], summary["exit_code"]) == ("interrupted", 130)
    assert summary["pushes"][0]["status"] == "failed" and "run the push again" in summary["error"]
