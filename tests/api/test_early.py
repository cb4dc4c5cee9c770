"""A table's first page fetched beside its schema (`AsyncClient.fetch_early`, `select`'s
`first_pages`): the read takes it instead of asking again, only when it asks exactly that,
and never after a write through the same client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from connector import tables
from connector.api import AsyncClient, Client
from connector.errors import NotFound
from connector.extract import Extraction
from connector.tables import select
from tests.fixtures.sent import Sent
from tests.fixtures.server import RunningServer, ServerFactory

TEXT = {"name": "T", "columns": [{"name": "N", "type": "number"}]}


def table(server: RunningServer, rows: int, spec: dict[str, Any] = TEXT) -> str:
    table_id = server.create_table({**spec, "name": f"T{rows}-{len(spec['columns'])}"})
    server.insert_rows(table_id, [{"N": i} for i in range(rows)])
    return table_id


def on_server(server: RunningServer, table_id: str) -> list[tuple[str, Any]]:
    """Every row's id and N, as the server holds them (read without the client)."""
    with server.client() as http:
        rows = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()["rows"]
    return sorted((r["id"], r["fields"].get("N")) for r in rows)


def fetch_early(client: Client, table_id: str, limit: int = 10) -> None:
    """The table's first page of `limit` rows by creation, fetched ahead of its read."""
    client.run(client.aio.fetch_early(table_id, limit=limit, sort="created_at"))


def read(client: Client, table_id: str, page_size: int) -> list[tuple[str, Any]]:
    arrow = Extraction(client, client.get_table(table_id), page_size=page_size).to_arrow()
    return sorted(zip(arrow.column(0).to_pylist(), arrow.column(3).to_pylist(), strict=True))


def test_a_read_takes_the_first_page_fetched_early_instead_of_asking_again(
    server: RunningServer,
) -> None:
    table_id = table(server, 7)
    sent = Sent()
    with Client(server.base_url, server.api_key, transport=sent) as client:
        fetch_early(client, table_id)
        assert len(sent.first_pages(table_id)) == 1

        assert read(client, table_id, 10) == on_server(server, table_id)

    assert len(sent.first_pages(table_id)) == 1  # the read sent none of its own


def test_a_page_fetched_early_answers_only_the_request_it_was_fetched_for(
    server: RunningServer,
) -> None:
    table_id = table(server, 7)
    sent = Sent()
    with Client(server.base_url, server.api_key, transport=sent) as client:
        fetch_early(client, table_id)

        assert read(client, table_id, 5) == on_server(server, table_id)

    assert [q["limit"] for q in sent.first_pages(table_id)] == ["10", "5"]


def test_a_page_fetched_early_is_taken_once(server: RunningServer) -> None:
    table_id = table(server, 3)
    sent = Sent()
    with Client(server.base_url, server.api_key, transport=sent) as client:
        fetch_early(client, table_id)
        server.insert_rows(table_id, [{"N": 99}])  # not through the client: unseen by it

        first, again = read(client, table_id, 10), read(client, table_id, 10)

    assert len(first) == 3  # the page as it was when fetched
    assert again == on_server(server, table_id) and len(again) == 4
    assert len(sent.first_pages(table_id)) == 2


def test_a_write_through_the_client_drops_every_page_fetched_early(server: RunningServer) -> None:
    written, other = table(server, 3), table(server, 4)
    with Client(server.base_url, server.api_key) as client:
        for table_id in (written, other):
            fetch_early(client, table_id)

        client.create_rows(written, [{"N": 100}, {"N": 101}])

        assert read(client, written, 10) == on_server(server, written)
        assert len(read(client, written, 10)) == 5
    sent = Sent()
    with Client(server.base_url, server.api_key, transport=sent) as client:
        fetch_early(client, other)
        client.delete_rows(written, [on_server(server, written)[0][0]])

        assert read(client, other, 10) == on_server(server, other)

    assert len(sent.first_pages(other)) == 2  # dropped by a write to another table, fetched again


def test_a_page_on_its_way_while_a_write_goes_is_not_kept(server_factory: ServerFactory) -> None:
    server = server_factory(latency_ms=300)
    table_id = table(server, 3)

    async def fetch_while_writing(client: AsyncClient) -> None:
        early = asyncio.ensure_future(client.fetch_early(table_id, limit=10, sort="created_at"))
        await asyncio.sleep(0.1)  # the page is on its way, answered before the write is done
        await client.create_rows(table_id, [{"N": 100}])
        await early

    with Client(server.base_url, server.api_key) as client:
        client.run(fetch_while_writing(client.aio))

        assert read(client, table_id, 10) == on_server(server, table_id)
        assert len(on_server(server, table_id)) == 4


def test_an_early_page_that_failed_leaves_the_read_to_meet_the_failure(
    server: RunningServer,
) -> None:
    with Client(server.base_url, server.api_key) as client:
        fetch_early(client, "tbl_gone")  # no raise

        with pytest.raises(NotFound):
            client.list_rows("tbl_gone", limit=10, offset=0, sort="created_at", order="asc")


def test_select_fetches_beside_each_schema_the_first_page_each_read_takes(
    server: RunningServer,
) -> None:
    small, exact, big = table(server, 3), table(server, 5), table(server, 6)
    shadowed = table(server, 2, {"name": "S", "columns": [{"name": "N", "type": "number"},
                                                          {"name": "created_at", "type": "text"}]})
    sent = Sent()
    with Client(server.base_url, server.api_key, transport=sent) as client:
        picked = client.run(select(client.aio, first_pages=5))
        assert {t.id for t in picked.tables} == {small, exact, big, shadowed}
        assert [len(sent.first_pages(t)) for t in (small, exact, big, shadowed)] == [1, 1, 1, 1]

        for table_id in (small, exact, big):
            assert read(client, table_id, 5) == on_server(server, table_id)
        shadowed_rows = Extraction(client, client.get_table(shadowed), page_size=5).to_arrow()

    assert [len(sent.first_pages(t)) for t in (small, exact, big)] == [1, 1, 1]
    assert shadowed_rows.num_rows == 2
    # A user's column named created_at makes the read ask by id: the page fetched by
    # created_at answers another request, and is not taken.
    assert [q["sort"] for q in sent.first_pages(shadowed)] == ["created_at", "id"]


def test_select_holds_no_more_early_cells_than_its_bound(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [table(server, n) for n in (1, 2, 3, 4)]
    monkeypatch.setattr(tables, "EARLY_CELLS", 2 * 5 * (1 + 3) + 1)  # two pages of five: N and 3
    sent = Sent()
    with Client(server.base_url, server.api_key, transport=sent) as client:
        client.run(select(client.aio, first_pages=5))

    assert sum(len(sent.first_pages(t)) for t in ids) == 2
