"""Fault injection over real sockets: what clients of a flaky server really see."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

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
        assert response.json()["error"]["code"] == "BAD_REQUEST"
        assert client.get(f"/tables/{table}/rows").json()["total"] == 0
