"""Requests sized by bytes as well as rows; a server's 413 splits them; a row too large alone is
rejected (and reported in a rejects CSV a spreadsheet opens safely); a push stopped part-way
says what it wrote, and a rerun converges. Against `connector serve` over real HTTP."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from connector.api import Client, RetryPolicy
from connector.push import PushSpec, push
from connector.push.plan import MAX_REQUEST_BYTES, Create, create_batches
from connector.push.writes import excel_safe
from tests.fixtures.server import ROOT, ServerFactory

SPEC = {
    "name": "Notes",
    "columns": [
        {"name": "Code", "type": "text", "required": True},
        {"name": "Text", "type": "text"},
    ],
}
FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.05)


def rows(server: Any, table_id: str) -> dict[str, str | None]:
    found: list[dict[str, Any]] = []
    with server.client() as http:
        offset = 0
        while True:
            page = http.get(f"/tables/{table_id}/rows", params={"limit": 1000, "offset": offset})
            found += page.json()["rows"]
            if len(page.json()["rows"]) < page.json()["limit"]:
                break
            offset += page.json()["limit"]
    return {r["fields"]["Code"]: r["fields"].get("Text") for r in found}


def test_batches_are_cut_by_bytes_as_well_as_rows() -> None:
    small = [Create(i, {"Code": f"c{i}"}) for i in range(250)]
    assert [len(b) for b in create_batches(small)] == [100, 100, 50]
    big = [Create(i, {"Code": f"c{i}", "Text": "x" * 300_000}) for i in range(7)]
    assert [len(b) for b in create_batches(big)] == [3, 3, 1]  # 3 x 300 kB < 1 MB < 4 x
    huge = [Create(0, {"Code": "a"}), Create(1, {"Text": "x" * (MAX_REQUEST_BYTES + 1)})]
    assert [len(b) for b in create_batches(huge)] == [1, 1]  # a huge row goes alone


@pytest.mark.parametrize("max_bytes", [300, 2_000, 9_999, 40_000, MAX_REQUEST_BYTES])
def test_each_batch_is_as_full_as_its_body_bound_allows(max_bytes: int) -> None:
    widths = [0, 1, 7, 90, 260, 1_500, 4_000]
    creates = [
        Create(i, {"Code": f"c{i}", "Text": "é" * widths[i * 7 % len(widths)], "N": i / 3})
        for i in range(700)
    ]
    batches = create_batches(creates, max_bytes)

    assert [c for b in batches for c in b] == creates
    for batch, after in zip(batches, [*batches[1:], []], strict=True):
        assert len(batch) <= 100 and (len(batch) == 1 or body(batch) <= max_bytes)
        if after:  # the next row would have broken a bound
            assert len(batch) == 100 or body([*batch, after[0]]) > max_bytes


@pytest.mark.parametrize("rows", [2, 37, 100])
def test_a_batch_is_measured_to_the_byte(rows: int) -> None:
    creates = [Create(i, {"Code": f"c{i}", "Text": "ü" * (i % 5)}) for i in range(150)]
    exact = body(creates[:rows])
    assert len(create_batches(creates, exact)[0]) == rows
    assert len(create_batches(creates, exact - 1)[0]) == rows - 1


def body(batch: list[Create]) -> int:
    """The bytes of a bulk create's body, as the writer sends it."""
    return len(orjson.dumps({"rows": [{"fields": c.fields} for c in batch]}))


def test_a_413_splits_by_size_a_row_too_large_alone_is_rejected_and_the_rest_goes_in(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = server_factory(max_body_bytes=20_000)
    table_id = server.create_table(SPEC)
    texts = {f"c{i:03d}": f"note {i} " + "y" * 400 for i in range(120)}  # ~50 kB, 120 rows
    texts["c050"] = "=HYPERLINK(\"http://x\")" + "z" * 30_000  # too large even alone
    frame = pd.DataFrame({"Code": list(texts), "Text": list(texts.values())})
    rejects = tmp_path / "notes.rejects.csv"

    with Client(server.base_url, server.api_key, retry=FAST_RETRY) as client:
        result = push(client, PushSpec(frame, table="Notes", key="Code", rejects=rejects))
        assert result.created == 119
        (bad,) = result.rejected
        assert bad.row == 52 and "too large for one request" in bad.message
        assert "larger than 20000 bytes" in bad.message
        assert result.requests > result.plan.requests  # the refused requests, then the parts
        held = rows(server, table_id)
        assert held == {k: v for k, v in texts.items() if k != "c050"}

        with rejects.open(newline="", encoding="utf-8") as f:
            header, line = list(csv.reader(f))
        assert header == ["row", "id", "column", "error", "Code", "Text"]
        assert line[0] == "52" and line[4] == "c050"
        assert line[5].startswith("'=HYPERLINK(")  # shown as text, never run as a formula

        again = push(client, PushSpec(frame, table="Notes", key="Code"))  # a rerun converges
        assert again.plan.counts.created == 1 and again.created == 0 and len(again.rejected) == 1


def test_excel_safe_neutralises_what_a_spreadsheet_would_run() -> None:
    assert [excel_safe(t) for t in ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx"]] == [
        "'=1+1", "'+1", "'-2", "'@SUM(A1)", "'\tx", "'\rx"
    ]
    assert [excel_safe(t) for t in ["", "a=b", "1", "x'y"]] == ["", "a=b", "1", "x'y"]
    # a leading ' is guarded too, so undoing the guard is exact (see undo_excel_safe)
    assert excel_safe("'quoted") == "''quoted"


def test_updates_and_deletes_too_large_for_one_request(
    server_factory: ServerFactory,
) -> None:
    server = server_factory(max_body_bytes=2_000)
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Code": f"d{i:03d}"} for i in range(150)])
    server.insert_rows(table_id, [{"Code": "keep", "Text": "old"}])
    frame = pd.DataFrame({"Code": ["keep", "new"], "Text": ["w" * 3_000, "short"]})
    with Client(server.base_url, server.api_key, retry=FAST_RETRY) as client:
        result = push(client, PushSpec(frame, table="Notes", key="Code", mode="mirror", allow_delete=150))
    # 100 ids make a body over 2,000 bytes: the bulk delete is split until it fits
    assert (result.created, result.deleted) == (1, 150)
    (bad,) = result.rejected
    assert bad.id is not None and "too large for one request" in bad.message
    assert rows(server, table_id) == {"keep": "old", "new": "short"}


def test_a_push_stopped_part_way_says_what_it_wrote_and_a_rerun_converges(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = server_factory(latency_ms=100, fault_control=True)
    table_id = server.create_table(SPEC)
    path = tmp_path / "notes.csv"
    pd.DataFrame({"Code": [f"c{i:04d}" for i in range(2000)]}).to_csv(path, index=False)
    argv = [sys.executable, "-m", "connector", "push", str(path), "--table", "Notes",
            "--key", "Code", "--concurrency", "1", "--json", "--base-url", server.base_url]
    env = {**os.environ, "CONNECTOR_API_KEY": server.api_key, "CONNECTOR_MAX_WAIT": "1"}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while server.row_count(table_id) < 300 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    server.set_faults(fail_rate=1.0)  # every request from now on: 500
    out, err = proc.communicate(timeout=120)
    server.set_faults(fail_rate=0.0)

    assert proc.returncode == 1, err
    summary = json.loads(out)
    (entry,) = summary["pushes"]
    written = server.row_count(table_id)
    assert 300 <= written < 2000
    assert summary["status"] == "failed" and summary["error"]
    assert entry["created"] == written  # what was written before the failure, exactly
    assert any(p.startswith(f"written before the failure: created {written}")
               for p in entry["problems"]), entry
    assert "Traceback" not in err, err

    rerun = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["pushes"][0]["created"] == 2000 - written
    assert server.row_count(table_id) == 2000
