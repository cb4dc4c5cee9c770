"""Fault injection over real sockets: what clients of a flaky server really see."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.server.query import parse
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer, ServerFactory
from tests.server.conftest import PEOPLE


def stored_names(running: RunningServer, table_id: str) -> list[str]:
    """What the database holds, read without going through the (faulty) server."""
    with contextlib.closing(Storage(str(running.db_path))) as storage:
        table = storage.table(table_id)
        assert table is not None
        page = storage.list_rows(table, parse(table, {"limit": "1000"}))
    return [r["fields"]["Name"] for r in page.rows]


def test_fail_rate_answers_500_and_does_nothing(server_factory: ServerFactory) -> None:
    running = server_factory(fail_rate=1.0)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        response = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x"}})
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "INTERNAL"
        assert client.get("/tables").status_code == 500
    assert stored_names(running, table) == []


def test_throttle_rate_answers_429_with_retry_after(server_factory: ServerFactory) -> None:
    running = server_factory(throttle_rate=1.0)
    with running.client() as client:
        response = client.get("/tables")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "RATE_LIMITED"
    assert response.headers["retry-after"] == "1"


def test_latency_delays_every_request(server_factory: ServerFactory) -> None:
    running = server_factory(latency_ms=150)
    with running.client() as client:
        started = time.perf_counter()
        assert client.get("/tables").status_code == 200
        assert time.perf_counter() - started >= 0.15


def test_fail_after_write_commits_then_answers_500(server_factory: ServerFactory) -> None:
    running = server_factory(fail_after_write_rate=1.0)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        response = client.post(f"/tables/{table}/rows", json={"fields": {"Name": "written"}})
        assert response.status_code == 500 and response.json()["error"]["code"] == "INTERNAL"
        assert client.get(f"/tables/{table}/rows").json()["total"] == 1  # reads are not affected
    assert stored_names(running, table) == ["written"]


def test_drop_cuts_the_connection_after_committing(server_factory: ServerFactory) -> None:
    running = server_factory(drop_rate=1.0)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(f"/tables/{table}/rows/bulk", json={"rows": [{"fields": {"Name": "a"}}, {"fields": {"Name": "b"}}]})
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(f"/tables/{table}/rows")
    assert stored_names(running, table) == ["a", "b"]


def test_fault_rates_are_rates(server_factory: ServerFactory) -> None:
    running = server_factory(fail_rate=0.3, seed=7)
    with running.client() as client:
        statuses = [client.get("/tables").status_code for _ in range(100)]
    assert set(statuses) == {200, 500}
    assert 10 <= statuses.count(500) <= 50


def test_a_streamed_body_over_the_limit_is_refused(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to refuse it up front
        yield b'{"fields": {"Name": "'
        for _ in range(9):
            yield b"x" * (1024 * 1024)
        yield b'"}}'

    with server.client() as client:
        response = client.post(
            f"/tables/{table}/rows", content=chunks(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "CONTENT_TOO_LARGE"
        assert client.get(f"/tables/{table}/rows").json()["total"] == 0


# -- faults that change a table while it is read ------------------------------------------


def stored_ids(running: RunningServer, table_id: str, **params: str) -> list[str]:
    """Ids in the order of `params` (sort/order/filter), read straight from a fresh storage."""
    with contextlib.closing(Storage(str(running.db_path))) as storage:
        table = storage.table(table_id)
        assert table is not None
        q = parse(table, {"limit": "1000", **params})
        return [r["id"] for r in storage.list_rows(table, q).rows]


def people_table(running: RunningServer, rows: int) -> tuple[str, list[str]]:
    table = running.create_table(PEOPLE)
    statuses = ["Active", "Inactive"]
    made = running.insert_rows(
        table,
        [
            {"Name": f"p{i:03}", "Status": statuses[i % 2], "Age": i, "Member": i % 3 == 0,
             "Joined": f"2024-01-{i % 28 + 1:02}"}
            for i in range(rows)
        ],
    )
    return table, [r["id"] for r in made]


def test_delete_on_read_deletes_only_rows_before_the_offset(server_factory: ServerFactory) -> None:
    running = server_factory(delete_on_read=3, seed=1)
    table, ids = people_table(running, 100)
    with running.client() as client:
        first = client.get(f"/tables/{table}/rows", params={"limit": 10, "offset": 0})
        assert first.status_code == 200 and len(first.json()["rows"]) == 10
        assert running.row_count(table) == 100, "nothing sorts before offset 0"
        page = client.get(f"/tables/{table}/rows", params={"limit": 10, "offset": 50}).json()
    left = stored_ids(running, table)
    gone = set(ids) - set(left)
    assert len(gone) == 3 and gone <= set(ids[:50])
    assert page["total"] == 97
    assert [r["id"] for r in page["rows"]] == left[50:60], "the page is served after the deletes"


def test_delete_on_read_follows_the_requested_order_and_filter(server_factory: ServerFactory) -> None:
    running = server_factory(delete_on_read=5, seed=2)
    table, ids = people_table(running, 100)
    active = {"Status": {"eq": "Active"}}
    with running.client() as client:
        params = {"limit": 5, "offset": 10, "order": "desc", "filter": json.dumps(active)}
        assert client.get(f"/tables/{table}/rows", params=params).status_code == 200
    gone = set(ids) - set(stored_ids(running, table))
    newest_active = [i for n, i in enumerate(ids) if n % 2 == 0][::-1][:10]
    assert len(gone) == 5 and gone <= set(newest_active)


def test_delete_on_read_deletes_no_more_than_the_rows_passed(server_factory: ServerFactory) -> None:
    running = server_factory(delete_on_read=10, seed=3)
    table, ids = people_table(running, 20)
    with running.client() as client:
        assert client.get(f"/tables/{table}/rows", params={"limit": 5, "offset": 2}).status_code == 200
    assert set(ids) - set(stored_ids(running, table)) == set(ids[:2])


def test_insert_on_read_adds_valid_copies_of_existing_rows(server_factory: ServerFactory) -> None:
    running = server_factory(insert_on_read=4, seed=4)
    table, ids = people_table(running, 30)
    with running.client() as client:
        page = client.get(f"/tables/{table}/rows", params={"limit": 100}).json()
        assert page["total"] == 34 and len(page["rows"]) == 34
        again = client.get(f"/tables/{table}/rows", params={"limit": 100}).json()
    assert again["total"] == 38 and running.row_count(table) == 38
    originals = {r["fields"]["Name"]: r["fields"] for r in page["rows"] if r["id"] in ids}
    copies = [r for r in again["rows"] if r["id"] not in ids]
    assert len(copies) == 8
    for row in copies:
        assert row["fields"] == originals[row["fields"]["Name"]]


def test_insert_on_read_leaves_an_empty_table_empty(server_factory: ServerFactory) -> None:
    running = server_factory(insert_on_read=2)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        assert client.get(f"/tables/{table}/rows").json()["rows"] == []
    assert running.row_count(table) == 0


def test_pages_stay_exact_across_read_faults(server_factory: ServerFactory) -> None:
    """The faults write through storage, so the offset marks a read seeks by move with them:
    every page served equals a cold scan of the table as it then was."""
    running = server_factory(delete_on_read=2, insert_on_read=1, seed=5)
    table, _ = people_table(running, 200)
    with running.client() as client:
        for sort, order in [("created_at", "asc"), ("id", "asc"), ("created_at", "desc"), ("Age", "asc")]:
            for offset in range(0, 150, 20):
                params = {"limit": "20", "offset": str(offset), "sort": sort, "order": order}
                page = client.get(f"/tables/{table}/rows", params=params).json()
                cold = stored_ids(running, table, sort=sort, order=order)
                assert [r["id"] for r in page["rows"]] == cold[offset : offset + 20], (sort, order, offset)


def test_max_page_size_clamps_the_limit_and_reports_it(server_factory: ServerFactory) -> None:
    running = server_factory(max_page_size=50)
    table, _ = people_table(running, 120)
    with running.client() as client:
        page = client.get(f"/tables/{table}/rows", params={"limit": 1000}).json()
        assert page["limit"] == 50 and len(page["rows"]) == 50 and page["total"] == 120
        default = client.get(f"/tables/{table}/rows").json()
        assert default["limit"] == 50 and len(default["rows"]) == 50
        small = client.get(f"/tables/{table}/rows", params={"limit": 7}).json()
        assert small["limit"] == 7 and len(small["rows"]) == 7


@pytest.mark.parametrize("field", ["id", "created_at", "updated_at"])
def test_refuse_system_filters_answers_400_with_field_filter(server_factory: ServerFactory, field: str) -> None:
    running = server_factory(refuse_system_filters=True)
    table, _ = people_table(running, 10)
    with running.client() as client:
        refused = client.get(f"/tables/{table}/rows", params={"filter": json.dumps({field: {"gt": ""}})})
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and error["field"] == "filter"
        sorted_page = client.get(f"/tables/{table}/rows", params={"sort": field, "order": "desc"})
        assert sorted_page.status_code == 200 and len(sorted_page.json()["rows"]) == 10
        by_column = client.get(f"/tables/{table}/rows", params={"filter": json.dumps({"Age": {"gt": 4}})})
        assert by_column.status_code == 200 and len(by_column.json()["rows"]) == 5


def test_refuse_system_filters_still_filters_user_columns_named_like_them(server_factory: ServerFactory) -> None:
    running = server_factory(refuse_system_filters=True)
    table = running.create_table({"name": "T", "columns": [{"name": "id", "type": "text"}]})
    running.insert_rows(table, [{"id": "a"}, {"id": "b"}])
    with running.client() as client:
        page = client.get(f"/tables/{table}/rows", params={"filter": json.dumps({"id": {"eq": "b"}})})
    assert page.status_code == 200 and [r["fields"]["id"] for r in page.json()["rows"]] == ["b"]


def test_fault_control_changes_faults_while_running(server_factory: ServerFactory) -> None:
    running = server_factory(fault_control=True, fail_rate=1.0, seed=6)
    table, _ = people_table(running, 40)
    with running.client() as client:
        assert client.get("/tables").status_code == 500
        applied = running.set_faults(fail_rate=0, delete_on_read=2, max_page_size=10)
        assert applied["fail_rate"] == 0 and applied["delete_on_read"] == 2 and applied["max_page_size"] == 10
        assert applied["insert_on_read"] == 0 and applied["refuse_system_filters"] is False
        page = client.get(f"/tables/{table}/rows", params={"limit": 100, "offset": 20}).json()
        assert page["limit"] == 10 and running.row_count(table) == 38
        running.set_faults(delete_on_read=0, max_page_size=None, refuse_system_filters=True)
        assert client.get(f"/tables/{table}/rows", params={"limit": 100, "offset": 20}).json()["limit"] == 100
        assert running.row_count(table) == 38
        refused = client.get(f"/tables/{table}/rows", params={"filter": json.dumps({"id": {"gt": ""}})})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "filter"
    with admin_client(running) as admin:
        assert admin.get("/_faults").json()["refuse_system_filters"] is True


def admin_client(running: RunningServer) -> httpx.Client:
    return running.client(headers={"Authorization": f"Bearer {running.admin_key}"})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"no_such_fault": 1}, "no_such_fault"),
        ({"fail_rate": 2}, "fail_rate"),
        ({"delete_on_read": -1}, "delete_on_read"),
        ({"insert_on_read": 1.5}, "insert_on_read"),
        ({"max_page_size": 0}, "max_page_size"),
        ({"refuse_system_filters": "yes"}, "refuse_system_filters"),
        ({"latency_ms": "slow"}, "latency_ms"),
    ],
)
def test_fault_control_refuses_unknown_names_and_bad_values(
    server_factory: ServerFactory, body: dict[str, object], field: str
) -> None:
    running = server_factory(fault_control=True)
    with admin_client(running) as client:
        before = client.get("/_faults").json()
        response = client.put("/_faults", json=body)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"
        assert response.json()["error"]["field"] == field
        assert client.get("/_faults").json() == before, "a refused change changes nothing"


def test_fault_control_needs_the_flag_and_a_key(server_factory: ServerFactory) -> None:
    plain = server_factory()
    with plain.client() as client:
        assert client.put("/_faults", json={"delete_on_read": 1}).status_code == 404
    controlled = server_factory(fault_control=True)
    assert httpx.put(f"{controlled.base_url}/_faults", json={"delete_on_read": 1}).status_code == 401
    with pytest.raises(RuntimeError, match="404"):
        plain.set_faults(delete_on_read=1)


def test_only_an_admin_key_may_read_or_change_faults(server_factory: ServerFactory) -> None:
    running = server_factory(fault_control=True)
    table = running.create_table(PEOPLE)
    others = {
        "full access": running.api_key,
        "read-only": running.create_key(read_only=True),
        "scoped": running.create_key(tables=[table]),
        "read-only, scoped": running.create_key(read_only=True, tables=[table]),
    }
    with admin_client(running) as admin:
        before = admin.get("/_faults").json()
    for kind, key in others.items():
        headers = {"Authorization": f"Bearer {key}"}
        for method in ("PUT", "GET"):
            refused = httpx.request(method, f"{running.base_url}/_faults", headers=headers,
                                    json={"fail_rate": 1.0} if method == "PUT" else None)
            assert refused.status_code == 403, (kind, method, refused.text)
            assert refused.json()["error"]["code"] == "FORBIDDEN"
            assert "--admin" in refused.json()["error"]["message"]
    with admin_client(running) as admin:
        assert admin.get("/_faults").json() == before, "no refused change landed"
    # `connector keys create --admin` makes such a key, read-only for tables if asked.
    made = CliRunner().invoke(main, ["keys", "create", "--db", str(running.db_path), "--admin", "--read-only"])
    assert made.exit_code == 0, made.output
    headers = {"Authorization": f"Bearer {made.output.strip()}"}
    changed = httpx.put(f"{running.base_url}/_faults", headers=headers, json={"latency_ms": 5})
    assert changed.status_code == 200 and changed.json()["latency_ms"] == 5
    written = httpx.post(f"{running.base_url}/tables/{table}/rows", headers=headers, json={"fields": {"Name": "x"}})
    assert written.status_code == 403, "admin changes faults, not what a key may do to tables"
