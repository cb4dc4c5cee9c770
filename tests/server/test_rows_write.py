"""Creating, updating and deleting rows, one at a time and in bulk (API.md 4.4-4.8).

Each DESIGN.md choice is pinned here: create is 201 with the row; update is 200 with the
whole row; bulk create is 201 {"rows": [...]} in request order, all or nothing, at most
100; bulk delete is 200 {"deleted": [...]}, all or nothing, at most 100.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

ALL_EMPTY = {"Name": None, "Status": None, "Age": None, "Member": None, "Joined": None}


def rows_of(api: httpx.Client, table: str) -> list[dict[str, Any]]:
    return list(api.get(f"/tables/{table}/rows", params={"limit": 1000}).json()["rows"])


def error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    return dict(body["error"])


def test_create_returns_201_with_the_whole_row(api: httpx.Client, people: str) -> None:
    fields = {"Name": "Ada", "Status": "Active", "Age": 36, "Member": True, "Joined": "1843-07-01"}
    response = api.post(f"/tables/{people}/rows", json={"fields": fields})
    assert response.status_code == 201
    row = response.json()
    assert re.fullmatch(r"row_\w+", row["id"])
    assert row["fields"] == fields
    assert row["created_at"] == row["updated_at"]
    assert rows_of(api, people) == [row]


def test_omitted_cells_read_back_as_null(api: httpx.Client, people: str) -> None:
    row = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Bo"}}).json()
    assert row["fields"] == {**ALL_EMPTY, "Name": "Bo"}


@pytest.mark.parametrize(
    ("column", "value", "message_part"),
    [
        ("Status", "Gone", "['Active', 'Inactive']"),
        ("Status", 3, "string"),
        ("Name", 12, "string"),
        ("Age", "12", "number"),
        ("Age", True, "number"),
        ("Member", "yes", "true or false"),
        ("Member", 1, "true or false"),
        ("Joined", "2024-02-30", "YYYY-MM-DD"),
        ("Joined", "01/02/2024", "YYYY-MM-DD"),
        ("Joined", "2024-01-01T00:00:00", "YYYY-MM-DD"),
        ("Nickname", "x", "unknown column"),
        ("name", "x", "did you mean 'Name'"),
    ],
)
def test_a_bad_value_is_400_validation_error_naming_the_column(
    api: httpx.Client, people: str, column: str, value: Any, message_part: str
) -> None:
    fields = {"Name": "Ada", column: value}
    response = api.post(f"/tables/{people}/rows", json={"fields": fields})
    assert response.status_code == 400
    err = error(response)
    assert err["code"] == "VALIDATION_ERROR"
    assert err["field"] == column
    assert column in err["message"] and message_part in err["message"]
    assert rows_of(api, people) == []


@pytest.mark.parametrize("fields", [{}, {"Name": None}, {"Name": ""}, {"Age": 3}])
def test_missing_required_value_on_create_is_rejected(api: httpx.Client, people: str, fields: dict[str, Any]) -> None:
    response = api.post(f"/tables/{people}/rows", json={"fields": fields})
    assert response.status_code == 400
    assert error(response)["field"] == "Name"
    assert "required" in error(response)["message"]


@pytest.mark.parametrize("body", [{}, {"fields": "Ada"}, {"fields": ["Ada"]}, {"Name": "Ada"}])
def test_a_body_without_a_fields_object_is_rejected(api: httpx.Client, people: str, body: Any) -> None:
    response = api.post(f"/tables/{people}/rows", json=body)
    assert response.status_code == 400
    assert error(response)["field"] == "fields"


def test_update_changes_only_the_given_cells_and_returns_the_row(api: httpx.Client, people: str) -> None:
    created = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Ada", "Age": 36}}).json()
    response = api.patch(f"/tables/{people}/rows/{created['id']}", json={"fields": {"Status": "Active"}})
    assert response.status_code == 200
    row = response.json()
    assert row["id"] == created["id"]
    assert row["fields"] == {**ALL_EMPTY, "Name": "Ada", "Age": 36, "Status": "Active"}
    assert row["created_at"] == created["created_at"]
    assert row["updated_at"] > created["updated_at"]
    assert rows_of(api, people) == [row]


def test_update_with_null_clears_a_cell(api: httpx.Client, people: str) -> None:
    created = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Ada", "Age": 36}}).json()
    row = api.patch(f"/tables/{people}/rows/{created['id']}", json={"fields": {"Age": None}}).json()
    assert row["fields"]["Age"] is None


@pytest.mark.parametrize("value", [None, ""])
def test_update_may_not_clear_a_required_cell(api: httpx.Client, people: str, value: Any) -> None:
    created = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Ada"}}).json()
    response = api.patch(f"/tables/{people}/rows/{created['id']}", json={"fields": {"Name": value}})
    assert response.status_code == 400
    assert error(response)["code"] == "VALIDATION_ERROR" and error(response)["field"] == "Name"
    assert rows_of(api, people)[0]["fields"]["Name"] == "Ada"


def test_update_validates_values(api: httpx.Client, people: str) -> None:
    created = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Ada"}}).json()
    response = api.patch(f"/tables/{people}/rows/{created['id']}", json={"fields": {"Status": "Nope"}})
    assert response.status_code == 400
    assert error(response)["field"] == "Status" and "Active" in error(response)["message"]


def test_update_of_an_unknown_row_is_404(api: httpx.Client, people: str) -> None:
    response = api.patch(f"/tables/{people}/rows/row_missing", json={"fields": {"Name": "x"}})
    assert response.status_code == 404
    assert error(response)["code"] == "NOT_FOUND" and "row_missing" in error(response)["message"]


def test_delete_is_204_without_content_then_404(api: httpx.Client, people: str) -> None:
    created = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Ada"}}).json()
    response = api.delete(f"/tables/{people}/rows/{created['id']}")
    assert response.status_code == 204 and response.content == b""
    assert rows_of(api, people) == []
    again = api.delete(f"/tables/{people}/rows/{created['id']}")
    assert again.status_code == 404 and error(again)["code"] == "NOT_FOUND"


def test_bulk_create_returns_rows_in_request_order(api: httpx.Client, people: str) -> None:
    sent = [{"fields": {"Name": f"p{i}", "Age": i}} for i in range(100)]
    response = api.post(f"/tables/{people}/rows/bulk", json={"rows": sent})
    assert response.status_code == 201
    created = response.json()["rows"]
    assert [r["fields"]["Name"] for r in created] == [f"p{i}" for i in range(100)]
    assert len({r["id"] for r in created}) == 100
    assert [r["id"] for r in rows_of(api, people)] == [r["id"] for r in created]


def test_bulk_create_of_101_rows_writes_nothing(api: httpx.Client, people: str) -> None:
    sent = [{"fields": {"Name": f"p{i}"}} for i in range(101)]
    response = api.post(f"/tables/{people}/rows/bulk", json={"rows": sent})
    assert response.status_code == 400
    assert "100" in error(response)["message"]
    assert rows_of(api, people) == []


def test_bulk_create_with_one_bad_row_writes_nothing_and_names_the_row(api: httpx.Client, people: str) -> None:
    sent = [{"fields": {"Name": "ok"}}, {"fields": {"Name": "ok"}}, {"fields": {"Name": "bad", "Age": "x"}}]
    response = api.post(f"/tables/{people}/rows/bulk", json={"rows": sent})
    assert response.status_code == 400
    err = error(response)
    assert err["code"] == "VALIDATION_ERROR" and err["field"] == "Age" and err["index"] == 2
    assert err["message"].startswith("row 2:")
    assert rows_of(api, people) == []


@pytest.mark.parametrize("body", [{}, {"rows": {}}, {"rows": [{"Name": "x"}]}, {"rows": ["x"]}])
def test_bulk_create_rejects_malformed_bodies(api: httpx.Client, people: str, body: Any) -> None:
    response = api.post(f"/tables/{people}/rows/bulk", json=body)
    assert response.status_code == 400
    assert error(response)["field"] == "rows"


def test_bulk_delete_returns_the_deleted_ids(api: httpx.Client, people: str) -> None:
    created = api.post(
        f"/tables/{people}/rows/bulk", json={"rows": [{"fields": {"Name": n}} for n in "abc"]}
    ).json()["rows"]
    ids = [created[0]["id"], created[2]["id"]]
    response = api.request("DELETE", f"/tables/{people}/rows/bulk", json={"row_ids": ids})
    assert response.status_code == 200
    assert response.json() == {"deleted": ids}
    assert [r["id"] for r in rows_of(api, people)] == [created[1]["id"]]


def test_bulk_delete_with_an_unknown_id_deletes_nothing(api: httpx.Client, people: str) -> None:
    created = api.post(f"/tables/{people}/rows", json={"fields": {"Name": "a"}}).json()
    response = api.request(
        "DELETE", f"/tables/{people}/rows/bulk", json={"row_ids": [created["id"], "row_nope"]}
    )
    assert response.status_code == 404
    assert "row_nope" in error(response)["message"]
    assert len(rows_of(api, people)) == 1


def test_bulk_delete_of_more_than_100_ids_is_400(api: httpx.Client, people: str) -> None:
    response = api.request("DELETE", f"/tables/{people}/rows/bulk", json={"row_ids": ["row_x"] * 101})
    assert response.status_code == 400
    assert error(response)["field"] == "row_ids"


def test_row_counts_follow_writes(api: httpx.Client, people: str) -> None:
    api.post(f"/tables/{people}/rows/bulk", json={"rows": [{"fields": {"Name": "x"}}] * 7})
    first = rows_of(api, people)[0]["id"]
    api.delete(f"/tables/{people}/rows/{first}")
    assert api.get("/tables").json()["tables"][0]["rows"] == 6
    assert api.get(f"/tables/{people}/rows").json()["total"] == 6


def test_one_app_driven_from_several_threads_serves_every_request(
    api: httpx.Client, people: str
) -> None:
    """In-process clients may call one app from several threads' event loops at once."""
    from concurrent.futures import ThreadPoolExecutor

    def write_and_read(worker: int) -> int:
        for batch in range(5):
            rows = [{"fields": {"Name": f"w{worker}-{batch}-{i}"}} for i in range(10)]
            assert api.post(f"/tables/{people}/rows/bulk", json={"rows": rows}).status_code == 201
            assert api.get(f"/tables/{people}/rows", params={"limit": 5}).status_code == 200
        return worker

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert sorted(pool.map(write_and_read, range(4))) == [0, 1, 2, 3]
    assert api.get(f"/tables/{people}/rows", params={"limit": 1}).json()["total"] == 4 * 5 * 10
