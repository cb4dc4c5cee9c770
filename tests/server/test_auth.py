"""Keys (API.md 5): 401 without a valid key, 403 outside a key's scope, rate limit per key."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import httpx
import pytest

from connector.server.app import create_app
from connector.server.keys import ApiKey, hash_key
from connector.server.storage import Storage
from tests.server.conftest import PEOPLE, Clock, make_client


@pytest.fixture
def two_tables(storage: Storage) -> tuple[str, str]:
    a = storage.create_table(PEOPLE).id
    b = storage.create_table({**PEOPLE, "name": "Others"}).id
    return a, b


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer"}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}],
)
def test_missing_or_invalid_key_is_401_on_every_endpoint(
    storage: Storage, key: str, two_tables: tuple[str, str], headers: dict[str, str]
) -> None:
    table = two_tables[0]
    with make_client(create_app(storage), None) as client:
        client.headers.update(headers)
        for response in (
            client.get("/tables"),
            client.get(f"/tables/{table}"),
            client.get(f"/tables/{table}/rows"),
            client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x"}}),
            client.patch(f"/tables/{table}/rows/row_x", json={"fields": {}}),
            client.delete(f"/tables/{table}/rows/row_x"),
            client.post(f"/tables/{table}/rows/bulk", json={"rows": []}),
            client.request("DELETE", f"/tables/{table}/rows/bulk", json={"row_ids": []}),
        ):
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "UNAUTHORIZED"
            assert response.headers["www-authenticate"] == "Bearer"


def test_the_bearer_scheme_is_case_insensitive(storage: Storage, key: str) -> None:
    with make_client(create_app(storage), None) as client:
        assert client.get("/tables", headers={"Authorization": f"bearer {key}"}).status_code == 200


def test_keys_are_stored_hashed(storage: Storage, key: str) -> None:
    dump = "\n".join(sqlite3.connect(storage.path).iterdump())
    assert key not in dump


def test_read_only_key_reads_but_may_not_write(storage: Storage, two_tables: tuple[str, str]) -> None:
    table = two_tables[0]
    people = storage.table(table)
    assert people is not None
    row = storage.insert_rows(people, [{"Name": "Ada"}])[0]
    with make_client(create_app(storage), storage.create_key(read_only=True)) as client:
        assert client.get(f"/tables/{table}/rows").json()["total"] == 1
        for response in (
            client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x"}}),
            client.patch(f"/tables/{table}/rows/{row['id']}", json={"fields": {"Name": "y"}}),
            client.delete(f"/tables/{table}/rows/{row['id']}"),
            client.post(f"/tables/{table}/rows/bulk", json={"rows": [{"fields": {"Name": "x"}}]}),
            client.request("DELETE", f"/tables/{table}/rows/bulk", json={"row_ids": [row["id"]]}),
        ):
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "FORBIDDEN"
            assert "read-only" in response.json()["error"]["message"]
        assert client.get(f"/tables/{table}/rows").json()["rows"][0]["fields"]["Name"] == "Ada"


def test_scoped_key_sees_and_uses_only_its_tables(storage: Storage, two_tables: tuple[str, str]) -> None:
    mine, theirs = two_tables
    with make_client(create_app(storage), storage.create_key(tables=["People"])) as client:
        assert [t["id"] for t in client.get("/tables").json()["tables"]] == [mine]
        assert client.post(f"/tables/{mine}/rows", json={"fields": {"Name": "x"}}).status_code == 201
        for response in (
            client.get(f"/tables/{theirs}"),
            client.get(f"/tables/{theirs}/rows"),
            client.post(f"/tables/{theirs}/rows", json={"fields": {"Name": "x"}}),
        ):
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "FORBIDDEN"


def test_scoped_keys_reject_unknown_tables(storage: Storage) -> None:
    with pytest.raises(KeyError, match="Nope"):
        storage.create_key(tables=["Nope"])


def test_rate_limit_is_per_key_with_retry_after(storage: Storage, key: str) -> None:
    other = storage.create_key()
    with make_client(create_app(storage, rate_limit=3, clock=Clock()), key) as client:
        statuses = [client.get("/tables").status_code for _ in range(3)]
        limited = client.get("/tables")
        fresh = client.get("/tables", headers={"Authorization": f"Bearer {other}"})
    assert statuses == [200, 200, 200]
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "RATE_LIMITED"
    assert int(limited.headers["retry-after"]) >= 1
    assert fresh.status_code == 200


def test_failed_authentications_are_limited_per_address_not_charged_to_keys(storage: Storage, key: str) -> None:
    """A key's budget is its own; failures spend the address's (see test_hostile.py for HTTP)."""
    with make_client(create_app(storage, rate_limit=2, clock=Clock()), None) as client:
        assert client.get("/tables", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert client.get("/tables").status_code == 401
        assert client.get("/tables", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert [client.get("/tables").status_code for _ in range(2)] == [401, 429]


def test_a_key_that_worked_is_not_held_up_by_failures_from_its_address(storage: Storage, key: str) -> None:
    """A bad client behind the same address (a proxy, a shared host) cannot lock out a good
    one that was already working; a key first seen during the block waits like a guess."""
    other = storage.create_key()
    good = {"Authorization": f"Bearer {key}"}
    clock = Clock()
    with make_client(create_app(storage, rate_limit=1, clock=clock), None) as client:
        assert client.get("/tables", headers=good).status_code == 200
        clock.now += 1.1  # the key's own budget back
        assert [client.get("/tables").status_code for _ in range(3)] == [401, 429, 429]
        assert client.get("/tables", headers=good).status_code == 200
        assert client.get("/tables", headers={"Authorization": f"Bearer {other}"}).status_code == 429


def test_error_messages_never_contain_the_key(storage: Storage, key: str, two_tables: tuple[str, str]) -> None:
    read_only = storage.create_key(read_only=True)
    with make_client(create_app(storage, rate_limit=1, clock=Clock()), read_only) as client:
        bodies = [
            client.post(f"/tables/{two_tables[0]}/rows", json={"fields": {"Name": "x"}}).text,
            client.get("/tables").text,
            client.get("/tables", headers={"Authorization": f"Bearer {key}x"}).text,
        ]
    assert not any(read_only in b or key in b for b in bodies)


def test_responses_are_json(api: httpx.Client) -> None:
    assert api.get("/tables").headers["content-type"] == "application/json"


def test_a_database_from_before_admin_keys_opens_with_its_keys_as_they_were(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE keys (hash TEXT PRIMARY KEY, read_only INTEGER NOT NULL, tables TEXT, "
                     "created_at TEXT NOT NULL)")
        conn.execute("INSERT INTO keys VALUES (?, 1, NULL, '2024-01-01T00:00:00Z')", (hash_key("key_old"),))
        conn.commit()
    with contextlib.closing(Storage(str(db))) as storage:
        assert storage.find_key("key_old") == ApiKey(hash_key("key_old"), read_only=True, tables=None, admin=False)
        admin = storage.find_key(storage.create_key(admin=True))
        assert admin is not None and admin.admin and not admin.read_only
    with contextlib.closing(Storage(str(db))) as again:  # opened a second time: nothing to add
        assert again.find_key("key_old") is not None
