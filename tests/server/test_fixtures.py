"""The `server` fixtures behave as the common contract says other areas rely on."""

from __future__ import annotations

import httpx

from tests.fixtures.server import RunningServer, ServerFactory

SPEC = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Age", "type": "number"},
    ],
}


def test_server_starts_empty_and_answers_with_its_key(server: RunningServer) -> None:
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    with server.client() as client:
        assert client.get("/tables").json() == {"tables": []}
    assert httpx.get(f"{server.base_url}/tables").status_code == 401


def test_seeded_rows_are_served_in_insertion_order(server: RunningServer) -> None:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"p{i}", "Age": i} for i in range(250)])
    with server.client() as client:
        page = client.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()
    assert page["total"] == 250
    assert [r["fields"]["Name"] for r in page["rows"]] == [f"p{i}" for i in range(250)]


def test_restart_keeps_port_and_data_after_kill(server: RunningServer) -> None:
    table_id = server.create_table(SPEC)
    with server.client() as client:
        created = client.post(f"/tables/{table_id}/rows", json={"fields": {"Name": "kept"}})
        assert created.status_code == 201
    base_url = server.base_url
    server.kill()
    server.restart()
    assert server.base_url == base_url
    with server.client() as client:
        rows = client.get(f"/tables/{table_id}/rows").json()["rows"]
    assert [r["id"] for r in rows] == [created.json()["id"]]


def test_factory_passes_options_and_scoped_keys_work(server_factory: ServerFactory) -> None:
    running = server_factory(demo=True, rate_limit=1000)
    with running.client() as client:
        names = {t["name"] for t in client.get("/tables").json()["tables"]}
    assert {"Customers", "Orders"} <= names
    key = running.create_key(read_only=True, tables=["Customers"])
    listed = httpx.get(f"{running.base_url}/tables", headers={"Authorization": f"Bearer {key}"})
    assert [t["name"] for t in listed.json()["tables"]] == ["Customers"]
