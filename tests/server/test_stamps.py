"""The stamping faults: rows written with a chosen ``created_at`` / ``updated_at`` (a
workspace with a wrong clock, an import with odd stamps), from year 1 to 9999, stored,
sorted, filtered and sent back as the server writes every stamp."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.server import ROOT, RunningServer, ServerFactory

TABLE = {"name": "T", "columns": [{"name": "Name", "type": "text"}]}
FAR = "9999-12-31T23:59:59.999999Z"
AHEAD = "2999-01-01T00:00:00Z"
FIRST = "0001-01-01T00:00:00Z"


def rows(client: httpx.Client, table: str, **params: Any) -> list[dict[str, Any]]:
    if "filter" in params:
        params["filter"] = json.dumps(params["filter"])
    response = client.get(f"/tables/{table}/rows", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["rows"]
    return found


def names(found: list[dict[str, Any]]) -> list[str]:
    return [r["fields"]["Name"] for r in found]


def test_rows_take_the_stamps_set_and_sort_and_filter_by_them(server_factory: ServerFactory) -> None:
    running = server_factory(fault_control=True)
    table = running.create_table(TABLE)
    running.insert_rows(table, [{"Name": "before"}])
    with running.client() as client:
        running.set_faults(stamp_updated_at=FAR)
        far = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "far"}}).json()
        running.set_faults(stamp_updated_at=AHEAD)
        ahead = client.post(f"/tables/{table}/rows/bulk", json={"rows": [{"fields": {"Name": "ahead"}}]})
        running.set_faults(stamp_updated_at=FIRST, stamp_created_at=FIRST)
        first = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "first"}}).json()
        before = rows(client, table, filter={"Name": {"eq": "before"}})[0]
        patched = client.patch(f"/tables/{table}/rows/{before['id']}", json={"fields": {"Name": "patched"}})
        running.set_faults(stamp_updated_at=None, stamp_created_at=None)
        after = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "after"}}).json()

        assert far["updated_at"] == FAR and far["created_at"] < "3000"
        assert ahead.json()["rows"][0]["updated_at"] == "2999-01-01T00:00:00.000000Z"
        assert first["created_at"] == first["updated_at"] == "0001-01-01T00:00:00.000000Z"
        assert patched.json()["updated_at"] == "0001-01-01T00:00:00.000000Z"
        assert patched.json()["created_at"] == before["created_at"]  # an update keeps it
        assert after["updated_at"] == after["created_at"] > "2020" and after["updated_at"] < "2999"

        # Stored and sent back as written; ordered in time, either way; filtered exactly.
        by_updated = rows(client, table, sort="updated_at")
        # (first and patched share a stamp: then by id, which leads with the creation time)
        assert names(by_updated) == ["patched", "first", "after", "ahead", "far"]
        assert names(rows(client, table, sort="updated_at", order="desc")) == [
            "far", "ahead", "after", "first", "patched"
        ]
        assert names(rows(client, table)) == ["first", "patched", "far", "ahead", "after"]  # created_at
        assert {r["id"]: r["updated_at"] for r in by_updated} == {
            r["id"]: r["updated_at"] for r in (far, ahead.json()["rows"][0], first, patched.json(), after)
        }
        gt = rows(client, table, filter={"updated_at": {"gt": "2999-01-01T00:00:00.000000Z"}})
        assert names(gt) == ["far"]
        later = rows(client, table, sort="updated_at", filter={"updated_at": {"gt": after["updated_at"]}})
        assert names(later) == ["ahead", "far"]
        eq = rows(client, table, filter={"updated_at": {"eq": "0001-01-01T00:00:00.000000Z"}})
        assert sorted(names(eq)) == ["first", "patched"]
        assert names(rows(client, table, filter={"created_at": {"eq": "0001-01-01T00:00:00.000000Z"}})) == [
            "first"
        ]
        # Paging by updated_at, one row a page, walks them in order too.
        paged = [rows(client, table, sort="updated_at", limit=1, offset=i)[0]["id"] for i in range(5)]
        assert paged == [r["id"] for r in by_updated]


def test_a_late_write_takes_the_stamp_set_too(server_factory: ServerFactory) -> None:
    running = server_factory(fault_control=True)
    table = running.create_table(TABLE)
    (row,) = running.insert_rows(table, [{"Name": "a"}])
    running.set_faults(stamp_updated_at=AHEAD, late_visibility_ms=300)
    with running.client() as client:
        answered = client.patch(f"/tables/{table}/rows/{row['id']}", json={"fields": {"Name": "b"}})
        created = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "c"}}).json()
        time.sleep(0.6)
        seen = {r["id"]: r["updated_at"] for r in rows(client, table)}
    assert answered.json()["updated_at"] == created["updated_at"] == "2999-01-01T00:00:00.000000Z"
    assert seen == {row["id"]: "2999-01-01T00:00:00.000000Z", created["id"]: "2999-01-01T00:00:00.000000Z"}


def test_the_serve_flags_stamp_rows_from_the_start(server_factory: ServerFactory) -> None:
    running = server_factory(stamp_updated_at=FAR, stamp_created_at=FIRST)
    table = running.create_table(TABLE)
    with running.client() as client:
        made = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x"}}).json()
    assert (made["created_at"], made["updated_at"]) == ("0001-01-01T00:00:00.000000Z", FAR)


@pytest.mark.parametrize(
    "bad", ["garbage", "2999-01-01", "2999-01-01T00:00:00", "2999-01-01T00:00:00+01:00",
            "2999-02-30T00:00:00Z", "10000-01-01T00:00:00Z", "999-01-01T00:00:00Z", 12, True],
)
def test_a_stamp_that_is_not_a_utc_time_is_refused(server_factory: ServerFactory, bad: object) -> None:
    running: RunningServer = server_factory(fault_control=True)
    with running.client(headers={"Authorization": f"Bearer {running.admin_key}"}) as admin:
        before = admin.get("/_faults").json()
        for name in ("stamp_updated_at", "stamp_created_at"):
            refused = admin.put("/_faults", json={name: bad})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["field"] == name
        assert admin.get("/_faults").json() == before


@pytest.mark.needs_server  # the serve command, as a process
def test_serve_refuses_a_bad_stamp_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "connector", "serve", "--stamp-updated-at", "yesterday"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 2
    assert "--stamp-updated-at" in done.stderr and "2999-01-01T00:00:00Z" in done.stderr
    assert "Traceback" not in done.stderr
