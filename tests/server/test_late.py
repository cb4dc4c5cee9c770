"""The late-visibility fault over real HTTP: a write stamped on arrival reaches reads D ms later.

Each test shows the three things a client meets: a read right after the write does not see
it (pages, totals, filters, sorts, the table list), its stamp is earlier than the moment it
became visible, and after D ms it is seen with exactly that stamp.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from connector.server.storage import Storage
from tests.fixtures.server import ServerFactory
from tests.server.conftest import PEOPLE

Page = dict[str, Any]


def stamp(text: str) -> float:
    """An API timestamp as seconds since the epoch."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def rows_of(client: httpx.Client, table: str, **params: Any) -> Page:
    response = client.get(f"/tables/{table}/rows", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    page: Page = response.json()
    return page


def first_seen(read: Callable[[], Page], seen: Callable[[Page], bool], timeout: float = 15.0) -> tuple[float, Page]:
    """Polls `read` until `seen` holds; returns the wall time that read ended, and the page.

    The change was visible by then, so that time minus its stamp is at least D.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = read()
        if seen(page):
            return time.time(), page
        time.sleep(0.05)
    raise AssertionError(f"not visible within {timeout} s")


def landings(read: Callable[[], Page], rows: list[dict[str, Any]], timeout: float = 15.0) -> dict[str, float]:
    """Polls `read` until it shows each of `rows` exactly (values and stamps); returns, by row
    id, the wall time the first read that showed it ended (see `first_seen`)."""
    want = {r["id"]: r for r in rows}
    first: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(first) < len(want) and time.monotonic() < deadline:
        page = read()
        ended = time.time()
        for row in page["rows"]:
            if row["id"] in want and row["id"] not in first and row == want[row["id"]]:
                first[row["id"]] = ended
        time.sleep(0.05)
    assert len(first) == len(want), f"{len(want) - len(first)} rows not seen within {timeout} s"
    return first


def newer_than(moment: str) -> str:
    return json.dumps({"updated_at": {"gt": moment}})


def test_created_rows_are_stamped_on_arrival_and_seen_d_ms_later(server_factory: ServerFactory) -> None:
    running = server_factory(late_visibility_ms=1000)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        before = time.time()
        one = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "one", "Age": 1}})
        bulk = client.post(f"/tables/{table}/rows/bulk",
                           json={"rows": [{"fields": {"Name": f"b{i}", "Status": "Active"}} for i in range(3)]})
        after = time.time()
        assert one.status_code == bulk.status_code == 201
        written = [one.json(), *bulk.json()["rows"]]
        for row in written:
            assert row["created_at"] == row["updated_at"]
            assert before <= stamp(row["created_at"]) <= after, "stamped when the request arrived"

        # Right after: no read sees them.
        assert rows_of(client, table) == {"rows": [], "total": 0, "limit": 1000, "offset": 0}
        assert rows_of(client, table, sort="updated_at", order="desc")["rows"] == []
        assert rows_of(client, table, filter=json.dumps({"Status": {"eq": "Active"}}))["total"] == 0
        assert rows_of(client, table, filter=newer_than("2000-01-01T00:00:00Z"))["total"] == 0
        assert client.get("/tables").json()["tables"][0]["rows"] == 0
        assert running.row_count(table) == 0

        seen = landings(lambda: rows_of(client, table), written)
        assert rows_of(client, table)["rows"] == written, "seen with the stamps and values of the answers"
    for row in written:
        assert seen[row["id"]] - stamp(row["updated_at"]) >= 1.0, "the stamp is D older than its first sighting"
    assert running.row_count(table) == 4


def test_updates_are_seen_d_ms_after_their_stamp_and_an_incremental_read_misses_them(
    server_factory: ServerFactory,
) -> None:
    """The client's case scaled down: 5 updates visible D after their stamp, read by cursor."""
    running = server_factory(fault_control=True)
    table = running.create_table(PEOPLE)
    seeded = running.insert_rows(table, [{"Name": f"p{i}", "Age": i} for i in range(8)])
    cursor = max(r["updated_at"] for r in seeded)
    running.set_faults(late_visibility_ms=1500)
    with running.client() as client:
        answers = [
            client.patch(f"/tables/{table}/rows/{row['id']}", json={"fields": {"Age": 100 + i}}).json()
            for i, row in enumerate(seeded[:5])
        ]
        for i, answer in enumerate(answers):
            assert answer["fields"] == {**seeded[i]["fields"], "Age": 100 + i}
            assert answer["created_at"] == seeded[i]["created_at"] and answer["updated_at"] > cursor

        # An incremental read right after: nothing newer than the cursor, old values everywhere.
        assert rows_of(client, table, filter=newer_than(cursor))["total"] == 0
        assert rows_of(client, table)["rows"] == seeded
        assert rows_of(client, table, sort="Age", order="desc")["rows"][0] == seeded[-1]
        # A later write moves the cursor past the updates' stamps before they are visible.
        later = running.insert_rows(table, [{"Name": "later"}])[0]
        moved = rows_of(client, table, filter=newer_than(cursor))
        assert [r["id"] for r in moved["rows"]] == [later["id"]]
        assert all(a["updated_at"] < later["updated_at"] for a in answers)

        seen = landings(lambda: rows_of(client, table, filter=newer_than(cursor)), answers)
        page = rows_of(client, table, filter=newer_than(cursor))
    assert page["rows"] == [*answers, later] and page["total"] == 6, (
        "visible now, with the stamps of their answers: before a row the cursor already passed"
    )
    for answer in answers:
        assert seen[answer["id"]] - stamp(answer["updated_at"]) >= 1.5


def test_deleted_rows_stay_visible_for_d_ms(server_factory: ServerFactory) -> None:
    running = server_factory(late_visibility_ms=1000)
    table = running.create_table(PEOPLE)
    seeded = running.insert_rows(table, [{"Name": f"p{i}"} for i in range(5)])
    with running.client() as client:
        sent_at = time.time()
        assert client.delete(f"/tables/{table}/rows/{seeded[0]['id']}").status_code == 204
        bulk = client.request("DELETE", f"/tables/{table}/rows/bulk",
                              json={"row_ids": [seeded[1]["id"], seeded[2]["id"]]})
        assert bulk.status_code == 200 and bulk.json() == {"deleted": [seeded[1]["id"], seeded[2]["id"]]}
        # Deleted for the writer: a second delete or an update is a 404 at once.
        assert client.delete(f"/tables/{table}/rows/{seeded[0]['id']}").status_code == 404
        gone = client.patch(f"/tables/{table}/rows/{seeded[1]['id']}", json={"fields": {"Name": "x"}})
        assert gone.status_code == 404
        # Still there for readers.
        assert rows_of(client, table)["rows"] == seeded
        seen_at, page = first_seen(lambda: rows_of(client, table), lambda p: p["total"] < 5)
        assert seen_at - sent_at >= 1.0
        _, page = first_seen(lambda: rows_of(client, table), lambda p: p["total"] == 2)
    assert page["rows"] == seeded[3:]


def test_writes_are_checked_against_writes_not_yet_visible(server_factory: ServerFactory) -> None:
    running = server_factory(late_visibility_ms=800)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        created = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "a", "Age": 1}}).json()
        updated = client.patch(f"/tables/{table}/rows/{created['id']}", json={"fields": {"Age": 2}})
        assert updated.status_code == 200
        assert updated.json()["fields"] == {**created["fields"], "Age": 2}
        assert updated.json()["created_at"] == created["created_at"] < updated.json()["updated_at"]
        # A bad write is refused at once and queues nothing.
        bad = client.post(f"/tables/{table}/rows/bulk", json={"rows": [{"fields": {"Name": "b"}}, {"fields": {}}]})
        assert bad.status_code == 400 and bad.json()["error"]["index"] == 1
        assert client.patch(f"/tables/{table}/rows/row_nope", json={"fields": {"Age": 3}}).status_code == 404
        assert rows_of(client, table)["total"] == 0
        landings(lambda: rows_of(client, table), [updated.json()])
        assert rows_of(client, table)["rows"] == [updated.json()]


def test_writes_land_in_arrival_order_when_d_shrinks(server_factory: ServerFactory) -> None:
    running = server_factory(fault_control=True)
    table = running.create_table(PEOPLE)
    running.set_faults(late_visibility_ms=1200)
    with running.client() as client:
        first = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "first"}}).json()
        running.set_faults(late_visibility_ms=0)
        second = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "second"}}).json()
        assert rows_of(client, table)["total"] == 0, "the second waits behind the first"
        seen_at, page = first_seen(lambda: rows_of(client, table), lambda p: p["total"] > 0)
        assert page["rows"] == [first, second], "never the second without the first"
        assert seen_at - stamp(first["created_at"]) >= 1.2
        # With nothing queued and D = 0, a write is visible at once again.
        third = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "third"}}).json()
        assert rows_of(client, table)["rows"] == [first, second, third]


def test_a_stopping_server_applies_the_writes_it_still_holds(server_factory: ServerFactory) -> None:
    running = server_factory(late_visibility_ms=60_000)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        created = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "kept"}}).json()
        assert rows_of(client, table)["total"] == 0
    assert running.terminate() == 0
    with contextlib.closing(Storage(str(running.db_path))) as storage:
        assert storage.row(table, created["id"]) == created


def test_late_visibility_is_a_fault_setting(server_factory: ServerFactory) -> None:
    running = server_factory(fault_control=True)
    applied = running.set_faults(late_visibility_ms=250)
    assert applied["late_visibility_ms"] == 250
    with running.client(headers={"Authorization": f"Bearer {running.admin_key}"}) as admin:
        refused = admin.put("/_faults", json={"late_visibility_ms": -1})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "late_visibility_ms"
