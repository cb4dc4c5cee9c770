"""GET /tables and GET /tables/:id (API.md 4.1, 4.2)."""

from __future__ import annotations

import re

import httpx

from connector.server.storage import Storage
from tests.server.conftest import PEOPLE

ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_list_tables_is_empty_for_a_new_workspace(api: httpx.Client) -> None:
    response = api.get("/tables")
    assert response.status_code == 200
    assert response.json() == {"tables": []}


def test_list_tables_summarises_every_table(api: httpx.Client, storage: Storage, people: str) -> None:
    api.post(f"/tables/{people}/rows", json={"fields": {"Name": "Ada"}})
    other = storage.create_table({"name": "Other", "columns": [{"name": "X", "type": "text"}]})
    tables = api.get("/tables").json()["tables"]
    assert [(t["id"], t["name"], t["columns"], t["rows"]) for t in tables] == [
        (people, "People", 5, 1),
        (other.id, "Other", 1, 0),
    ]
    assert all(ISO_UTC.fullmatch(t["created_at"]) for t in tables)
    assert re.fullmatch(r"tbl_\w+", people)


def test_get_table_returns_column_definitions(api: httpx.Client, people: str) -> None:
    response = api.get(f"/tables/{people}")
    assert response.status_code == 200
    assert response.json() == {
        "id": people,
        "name": "People",
        "columns": [
            {"id": "col_Name", "name": "Name", "type": "text", "required": True},
            {"id": "col_Status", "name": "Status", "type": "choice", "options": ["Active", "Inactive"]},
            {"id": "col_Age", "name": "Age", "type": "number"},
            {"id": "col_Member", "name": "Member", "type": "checkbox"},
            {"id": "col_Joined", "name": "Joined", "type": "date"},
        ],
    }


def test_unknown_table_is_404_with_error_body(api: httpx.Client) -> None:
    for response in (
        api.get("/tables/tbl_missing"),
        api.get("/tables/tbl_missing/rows"),
        api.post("/tables/tbl_missing/rows", json={"fields": {}}),
        api.patch("/tables/tbl_missing/rows/row_x", json={"fields": {}}),
        api.delete("/tables/tbl_missing/rows/row_x"),
        api.post("/tables/tbl_missing/rows/bulk", json={"rows": []}),
        api.request("DELETE", "/tables/tbl_missing/rows/bulk", json={"row_ids": []}),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "NOT_FOUND"
        assert "tbl_missing" in response.json()["error"]["message"]


def test_a_table_created_by_another_connection_is_visible_at_once(api: httpx.Client, storage: Storage) -> None:
    assert api.get("/tables").json()["tables"] == []
    other = Storage(storage.path)
    created = other.create_table(PEOPLE)
    other.close()
    assert [t["id"] for t in api.get("/tables").json()["tables"]] == [created.id]
    assert api.get(f"/tables/{created.id}").status_code == 200
