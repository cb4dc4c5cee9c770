"""The client accepts every answer DESIGN.md's table allows, not only our server's choices.

Our reference server makes one choice per open point; these scripted transports make the
others (httpx.MockTransport), so the client is held to the contract, not to one server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from connector.api import Client, RetryPolicy
from connector.errors import ApiValidationError, BadRequest
from connector.extract import Extraction
from connector.schema import Table

ROW = {"id": "row_1", "fields": {"Name": "Ada"}, "created_at": "2024-01-01T00:00:00Z",
       "updated_at": "2024-01-01T00:00:00Z"}
ROW2 = {**ROW, "id": "row_2", "fields": {"Name": "Bob"}}

Handler = Callable[[httpx.Request], httpx.Response]


def client_for(handler: Handler) -> Client:
    return Client("http://api.test/v1", "k-test", transport=httpx.MockTransport(handler),
                  retry=RetryPolicy.off())


@pytest.mark.parametrize("status", [200, 201])
def test_create_accepts_200_or_201(status: int) -> None:
    with client_for(lambda r: httpx.Response(status, json=ROW)) as client:
        assert client.create_row("tbl_1", {"Name": "Ada"}).id == "row_1"


def test_update_accepts_the_row_or_204() -> None:
    with client_for(lambda r: httpx.Response(200, json=ROW)) as client:
        row = client.update_row("tbl_1", "row_1", {"Name": "Ada"})
        assert row is not None and row.fields == {"Name": "Ada"}
    with client_for(lambda r: httpx.Response(204)) as client:
        assert client.update_row("tbl_1", "row_1", {"Name": "Ada"}) is None


@pytest.mark.parametrize("body", [{"rows": [ROW, ROW2]}, [ROW, ROW2]])
def test_bulk_create_accepts_an_object_or_a_bare_array(body: Any) -> None:
    with client_for(lambda r: httpx.Response(201, json=body)) as client:
        rows = client.create_rows("tbl_1", [{"Name": "Ada"}, {"Name": "Bob"}])
    assert [r.id for r in rows] == ["row_1", "row_2"]


@pytest.mark.parametrize(
    "response",
    [httpx.Response(200, json={"deleted": ["row_1"]}), httpx.Response(204),
     httpx.Response(202, text="accepted")],
)
def test_bulk_delete_accepts_any_2xx(response: httpx.Response) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return response

    with client_for(handler) as client:
        client.delete_rows("tbl_1", ["row_1"])
    assert sent[0].method == "DELETE"
    assert json.loads(sent[0].content) == {"row_ids": ["row_1"]}


@pytest.mark.parametrize("status", [400, 422])
def test_validation_error_by_body_code_at_400_or_422(status: int) -> None:
    body = {"error": {"code": "VALIDATION_ERROR", "message": "Status must be one of a, b",
                      "field": "Status"}}
    with client_for(lambda r: httpx.Response(status, json=body)) as client, \
            pytest.raises(ApiValidationError) as caught:
        client.create_row("tbl_1", {"Status": "zzz"})
    assert caught.value.field == "Status"
    assert "Status" in str(caught.value)


def test_a_400_with_another_code_is_a_bad_request() -> None:
    body = {"error": {"code": "BAD_REQUEST", "message": "`limit` must be a non-negative integer"}}
    with client_for(lambda r: httpx.Response(400, json=body)) as client, \
            pytest.raises(BadRequest, match="limit"):
        client.list_rows("tbl_1")


def paging_server(n_rows: int, *, clamp: int, total: Callable[[int], int]) -> tuple[Handler, list[int]]:
    """Serves rows row_0..row_{n-1}, clamping `limit` and reporting `total(n)`."""
    offsets: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        limit = min(int(request.url.params["limit"]), clamp)
        offset = int(request.url.params["offset"])
        offsets.append(offset)
        rows = [{**ROW, "id": f"row_{i}"} for i in range(offset, min(offset + limit, n_rows))]
        return httpx.Response(200, json={"rows": rows, "total": total(n_rows), "limit": limit,
                                         "offset": offset})

    return handler, offsets


TABLE = Table.from_api({"id": "tbl_1", "name": "T", "columns": [{"name": "Name", "type": "text"}]})


def read_ids(handler: Handler, **options: Any) -> list[str]:
    """Every id the one page reader (through an extraction) reads from `handler`."""
    with client_for(handler) as client:
        frame = Extraction(client, TABLE, **options).to_pandas()
    return frame["_id"].tolist()


def test_pages_advance_by_the_limit_the_server_applied() -> None:
    handler, offsets = paging_server(2500, clamp=1000, total=lambda n: n)
    assert read_ids(handler, page_size=1000) == [f"row_{i}" for i in range(2500)]
    assert sorted(offsets) == [0, 999, 1998]  # steps of the applied 1000, overlapping by one


def test_a_filtered_read_stops_on_a_short_page_though_the_total_is_too_big() -> None:
    handler, offsets = paging_server(250, clamp=1000, total=lambda n: 10 * n)
    ids = read_ids(handler, filter={"Name": {"eq": "Ada"}}, concurrency=1)
    assert ids == [f"row_{i}" for i in range(250)]
    assert offsets == [0, 99, 198]


def test_pages_always_ask_for_an_explicit_stable_order() -> None:
    handler, _ = paging_server(5, clamp=1000, total=lambda n: n)
    seen: list[httpx.Request] = []

    def spy(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    read_ids(spy)
    assert seen[0].url.params["sort"] == "created_at"
    assert seen[0].url.params["order"] == "asc"
