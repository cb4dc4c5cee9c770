"""Listing rows: limit, offset, sort, order, filter (API.md 4.3 and DESIGN.md's choices).

Expected orders are computed here from the data the test inserted, never from the server:
rows are inserted in a known order, which is creation order.
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest

from connector.server.storage import Storage


@pytest.fixture
def filled(storage: Storage, people: str) -> list[dict[str, Any]]:
    """60 rows with every type, some cells empty, duplicates in every column; in creation order."""
    rng = random.Random(5)
    rows = []
    for i in range(60):
        rows.append({
            "Name": f"n{i % 17:02d}",
            "Status": rng.choice(["Active", "Inactive", None]),
            "Age": rng.choice([None, 3, 3.5, 10, 42, -1, 0]),
            "Member": rng.choice([True, False, None]),
            "Joined": rng.choice([None, "2023-12-31", "2024-01-01", "2024-10-02", "2024-09-30"]),
        })
    table = storage.table(people)
    assert table is not None
    storage.insert_rows(table, [table.check_create({k: v for k, v in r.items() if v is not None}) for r in rows])
    return rows


def list_rows(api: httpx.Client, table: str, **params: Any) -> httpx.Response:
    if "filter" in params and not isinstance(params["filter"], str):
        params["filter"] = json.dumps(params["filter"])
    return api.get(f"/tables/{table}/rows", params=params)


def names(page: dict[str, Any]) -> list[str]:
    return [r["fields"]["Name"] for r in page["rows"]]


def read_all(api: httpx.Client, table: str, page_size: int, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = list_rows(api, table, limit=page_size, offset=len(out), **params).json()
        out += [r["fields"] for r in page["rows"]]
        if len(page["rows"]) < page_size:
            return out


def test_defaults_are_limit_100_offset_0_creation_order(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    page = list_rows(api, people).json()
    assert (page["limit"], page["offset"], page["total"]) == (100, 0, 60)
    assert names(page) == [r["Name"] for r in filled]


def test_limit_and_offset_slice_the_order(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    page = list_rows(api, people, limit=7, offset=50).json()
    assert (page["limit"], page["offset"], page["total"]) == (7, 50, 60)
    assert names(page) == [r["Name"] for r in filled[50:57]]
    assert list_rows(api, people, limit=0).json()["rows"] == []
    assert list_rows(api, people, offset=60).json()["rows"] == []
    assert list_rows(api, people, offset=10**9).json()["rows"] == []


def test_limit_above_1000_is_clamped_and_reported(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    page = list_rows(api, people, limit=5000).json()
    assert page["limit"] == 1000 and len(page["rows"]) == 60


@pytest.mark.parametrize(("name", "value"), [("limit", "-1"), ("limit", "ten"), ("limit", "1.5"),
                                            ("offset", "-5"), ("offset", "x"), ("limit", "²"),
                                            ("limit", " 5"), ("limit", "")])
def test_bad_limit_or_offset_is_400_naming_it(api: httpx.Client, people: str, name: str, value: str) -> None:
    response = list_rows(api, people, **{name: value})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == name


def _expected(rows: list[dict[str, Any]], column: str, descending: bool) -> list[dict[str, Any]]:
    # Empty cells first ascending (last descending); ties in creation order (reversed when descending).
    ranked = sorted(
        range(len(rows)),
        key=lambda i: (rows[i][column] is not None, rows[i][column] if rows[i][column] is not None else 0, i),
    )
    if descending:
        ranked.reverse()
    return [rows[i] for i in ranked]


@pytest.mark.parametrize("column", ["Name", "Status", "Age", "Member", "Joined"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_sort_by_any_column_is_typed_and_stable_across_pages(
    api: httpx.Client, people: str, filled: list[dict[str, Any]], column: str, order: str
) -> None:
    expected = _expected(filled, column, order == "desc")
    got = read_all(api, people, 7, sort=column, order=order)
    assert [(r["Name"], r[column]) for r in got] == [(r["Name"], r[column]) for r in expected]


def test_sort_by_system_fields(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    newest_first = [r["Name"] for r in reversed(filled)]
    assert names(list_rows(api, people, sort="created_at", order="desc").json()) == newest_first
    by_id = list_rows(api, people, sort="id").json()["rows"]
    assert [r["id"] for r in by_id] == sorted(r["id"] for r in by_id)
    rows = list_rows(api, people).json()["rows"]
    api.patch(f"/tables/{people}/rows/{rows[3]['id']}", json={"fields": {"Age": 1}})
    assert list_rows(api, people, sort="updated_at", order="desc", limit=1).json()["rows"][0]["id"] == rows[3]["id"]


@pytest.mark.parametrize("order", ["up", "DESC", "", " asc"])
def test_order_is_exactly_asc_or_desc(api: httpx.Client, people: str, order: str) -> None:
    response = list_rows(api, people, order=order)
    assert response.status_code == 400 and response.json()["error"]["field"] == "order"


def test_sort_by_unknown_column_is_400_validation_error(api: httpx.Client, people: str) -> None:
    response = list_rows(api, people, sort="Height")
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "VALIDATION_ERROR",
        "field": "Height",
        "message": response.json()["error"]["message"],
    }


@pytest.mark.parametrize(
    ("flt", "predicate"),
    [
        ({"Status": {"eq": "Active"}}, lambda r: r["Status"] == "Active"),
        ({"Age": {"gt": 3}}, lambda r: r["Age"] is not None and r["Age"] > 3),
        ({"Age": {"eq": 3}}, lambda r: r["Age"] == 3),
        ({"Age": {"gt": 3.2}}, lambda r: r["Age"] is not None and r["Age"] > 3.2),
        ({"Member": {"eq": True}}, lambda r: r["Member"] is True),
        ({"Member": {"eq": False}}, lambda r: r["Member"] is False),
        ({"Joined": {"gt": "2024-01-01"}}, lambda r: r["Joined"] is not None and r["Joined"] > "2024-01-01"),
        ({"Name": {"gt": "n10"}}, lambda r: r["Name"] > "n10"),
        ({"Status": {"eq": None}}, lambda r: r["Status"] is None),
        ({"Status": {"eq": "Active"}, "Age": {"gt": 0}},
         lambda r: r["Status"] == "Active" and r["Age"] is not None and r["Age"] > 0),
        ({"Age": {"gt": 0, "eq": 10}}, lambda r: r["Age"] == 10),
        ({"status": {"eq": "Inactive"}}, lambda r: r["Status"] == "Inactive"),
    ],
)
def test_filters_compare_by_column_type_and_total_counts_matches(
    api: httpx.Client, people: str, filled: list[dict[str, Any]], flt: dict[str, Any], predicate: Any
) -> None:
    expected = [r["Name"] for r in filled if predicate(r)]
    assert expected, "the fixture data should match every filter at least once"
    first = list_rows(api, people, filter=flt, limit=5).json()
    assert first["total"] == len(expected)
    assert [r["Name"] for r in read_all(api, people, 5, filter=flt)] == expected


def test_filter_on_system_fields(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    rows = list_rows(api, people).json()["rows"]
    after = list_rows(api, people, filter={"created_at": {"gt": rows[49]["created_at"]}}).json()
    assert names(after) == [r["Name"] for r in filled[50:]]
    one = list_rows(api, people, filter={"id": {"eq": rows[7]["id"]}}).json()
    assert [r["id"] for r in one["rows"]] == [rows[7]["id"]] and one["total"] == 1


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("{not json", "filter"),
        ('["Status"]', "filter"),
        ('{"Height": {"eq": 1}}', "Height"),
        ('{"Status": {"lt": "a"}}', "Status"),
        ('{"Status": "Active"}', "Status"),
        ('{"Status": {}}', "Status"),
        ('{"Age": {"gt": "ten"}}', "Age"),
        ('{"Joined": {"gt": "next week"}}', "Joined"),
        ('{"Member": {"eq": "yes"}}', "Member"),
        ('{"Age": {"gt": null}}', "Age"),
        ('{"created_at": {"gt": 5}}', "created_at"),
    ],
)
def test_bad_filters_are_400_validation_error_naming_the_key(
    api: httpx.Client, people: str, raw: str, field: str
) -> None:
    response = list_rows(api, people, filter=raw)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert response.json()["error"]["field"] == field


def test_ambiguous_case_insensitive_filter_key_is_refused(api: httpx.Client, storage: Storage) -> None:
    table = storage.create_table({"name": "Twins", "columns": [
        {"name": "Code", "type": "text"}, {"name": "CODE", "type": "text"}]})
    assert list_rows(api, table.id, filter={"Code": {"eq": "a"}}).status_code == 200
    assert list_rows(api, table.id, filter={"code": {"eq": "a"}}).json()["error"]["field"] == "code"


def test_user_columns_named_like_system_fields_win(api: httpx.Client, storage: Storage) -> None:
    table = storage.create_table({"name": "Odd", "columns": [
        {"name": "id", "type": "number"}, {"name": "created_at", "type": "text"}]})
    api.post(f"/tables/{table.id}/rows/bulk", json={"rows": [
        {"fields": {"id": n, "created_at": c}} for n, c in [(3, "b"), (1, "c"), (2, "a")]]})
    page = list_rows(api, table.id, sort="id").json()
    assert [r["fields"]["id"] for r in page["rows"]] == [1, 2, 3]
    page = list_rows(api, table.id, filter={"created_at": {"gt": "a"}}, sort="created_at").json()
    assert [r["fields"]["created_at"] for r in page["rows"]] == ["b", "c"]


def test_quotes_and_dots_in_column_names_are_safe(api: httpx.Client, storage: Storage) -> None:
    table = storage.create_table({"name": "Q", "columns": [{"name": "it's a.b [c]", "type": "number"}]})
    api.post(f"/tables/{table.id}/rows/bulk", json={"rows": [{"fields": {"it's a.b [c]": n}} for n in (2, 1)]})
    page = list_rows(api, table.id, sort="it's a.b [c]", filter={"it's a.b [c]": {"gt": 0}}).json()
    assert [r["fields"]["it's a.b [c]"] for r in page["rows"]] == [1, 2]


def test_paging_stays_correct_when_rows_change_between_pages(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    first = list_rows(api, people, limit=10).json()["rows"]
    api.delete(f"/tables/{people}/rows/{first[0]['id']}")
    second = list_rows(api, people, limit=10, offset=10).json()
    assert names(second) == [r["Name"] for r in filled[11:21]]
    assert second["total"] == 59


def test_filter_on_updated_at_finds_rows_changed_since(api: httpx.Client, people: str, filled: list[dict[str, Any]]) -> None:
    rows = list_rows(api, people).json()["rows"]
    since = max(r["updated_at"] for r in rows)
    changed = [api.patch(f"/tables/{people}/rows/{rows[i]['id']}", json={"fields": {"Age": 99}}).json() for i in (40, 5)]
    page = list_rows(api, people, filter={"updated_at": {"gt": since}}, sort="updated_at").json()
    assert [r["id"] for r in page["rows"]] == [changed[0]["id"], changed[1]["id"]]
    assert page["total"] == 2


def test_head_is_answered_like_get_without_a_body(api: httpx.Client, people: str) -> None:
    response = api.head(f"/tables/{people}/rows")
    assert response.status_code == 200 and response.content == b""
