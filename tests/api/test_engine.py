"""One engine: the blocking `Client` runs its async core on one loop, over one transport.

Every read and write goes through the transport given to `Client`, sync or async; in a
script no thread is started and every request runs in the caller's thread; inside a running
loop (a notebook) one helper thread runs the client's loop until it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.server
import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from connector.api import AsyncClient, Client
from connector.api.engine import EngineError
from connector.errors import ConfigError
from connector.extract import Extraction
from connector.push import PushSpec, apply, push
from connector.workspace import Workspace
from tests.fixtures.server import RunningServer

SPEC: dict[str, Any] = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Age", "type": "number"},
    ],
}


class Recording(httpx.BaseTransport):
    """A sync-only transport to the real server: records each request and its thread."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.seen: list[tuple[str, str]] = []
        self.threads: set[int] = set()
        self.closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rsplit("/", 1)[-1]
        self.seen.append((request.method, path if path in ("rows", "bulk") else "other"))
        self.threads.add(threading.get_ident())
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.closed = True
        self.inner.close()


@pytest.fixture
def people(server: RunningServer) -> str:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"p{i}", "Age": i} for i in range(30)])
    return table_id


def test_a_sync_transport_carries_every_read_and_write(
    server: RunningServer, people: str, tmp_path: Path
) -> None:
    transport = Recording()
    with Client(server.base_url, server.api_key, transport=transport) as client:
        assert len(client.list_rows(people, limit=5).rows) == 5
        assert transport.seen == [("GET", "rows")]

        table = client.get_table(people)
        assert len(Extraction(client, table, page_size=10).to_pandas()) == 30
        reads = transport.seen.count(("GET", "rows"))
        assert reads >= 4  # 30 rows in pages of 10, overlapping by one

        assert len(Workspace(client=client).read("People")) == 30
        assert transport.seen.count(("GET", "rows")) > reads

        source = pd.DataFrame({"Name": [f"p{i}" for i in range(1, 30)] + ["new"],
                               "Age": ["100", *(str(i) for i in range(2, 30)), "1"]})
        result = push(client, PushSpec(source, table="People", key="Name", mode="mirror"))
        assert (result.created, result.updated, result.deleted) == (1, 1, 1)

        newer = pd.DataFrame({"Name": ["new"], "Age": ["2"]})
        push(client, PushSpec(newer, table="People", key="Name", plan_out=tmp_path / "plan.json"))
        assert apply(client, tmp_path / "plan.json").updated == 1
    # one row created goes as a single create (its errors then name no "row 0")
    assert {("POST", "rows"), ("PATCH", "other"), ("DELETE", "bulk")} <= set(transport.seen)
    assert transport.threads == {threading.get_ident()}  # no thread hop, reads or writes
    assert transport.closed
    with server.client() as http:
        rows = http.get(f"/tables/{people}/rows", params={"limit": 100}).json()["rows"]
    assert sorted(r["fields"]["Name"] for r in rows) == sorted([*(f"p{i}" for i in range(1, 30)), "new"])
    assert [r["fields"]["Age"] for r in rows if r["fields"]["Name"] == "new"] == [2]


def test_in_a_script_the_loop_runs_in_the_callers_thread(server: RunningServer, people: str) -> None:
    before = threading.active_count()
    with Client(server.base_url, server.api_key) as client:
        loops = {client.run(_running_loop()) for _ in range(3)}
        for _ in Extraction(client, client.get_table(people), page_size=10):
            assert threading.active_count() == before
        loops.add(client.run(_running_loop()))
    assert len(loops) == 1  # one loop for the client's life: its connections stay on it
    assert threading.active_count() == before


def test_inside_a_running_loop_one_helper_thread_runs_the_clients_loop(
    server: RunningServer, people: str
) -> None:
    """Notebooks run a loop in the main thread: blocking calls still work there."""
    transport = Recording()

    async def notebook() -> tuple[int, int, set[asyncio.AbstractEventLoop], list[str]]:
        mine = asyncio.get_running_loop()
        with Client(server.base_url, server.api_key, transport=transport) as client:
            rows = len(client.list_rows(people, limit=1000).rows)
            frame = Extraction(client, client.get_table(people), page_size=10).to_pandas()
            loops = {client.run(_running_loop()) for _ in range(3)}
            helpers = _engine_threads()
        assert mine not in loops
        return rows, len(frame), loops, helpers

    rows, read, loops, helpers = asyncio.run(notebook())
    assert (rows, read, len(loops), len(helpers)) == (30, 30, 1, 1)
    assert len(transport.threads) == 1 and threading.get_ident() not in transport.threads
    assert _engine_threads() == []  # closing the client stopped it


def test_stopping_a_read_early_leaves_nothing_reading_behind(
    server: RunningServer, people: str
) -> None:
    transport = Recording()
    with Client(server.base_url, server.api_key, transport=transport) as client:
        table = client.get_table(people)
        for batch in Extraction(client, table, page_size=2, concurrency=4):
            assert batch.num_rows > 0
            break
        assert client.run(_other_tasks()) == 0  # the page reader and its fetches are gone
        sent = len(transport.seen)
        client.run(asyncio.sleep(0.05))  # the loop runs again: nothing more is fetched
        assert len(transport.seen) == sent


def test_a_blocking_call_inside_the_clients_own_loop_is_refused_not_hung(
    server: RunningServer,
) -> None:
    with Client(server.base_url, server.api_key) as client:

        async def mixed() -> None:
            client.list_tables()

        with pytest.raises(EngineError, match=r"await the async core"):
            client.run(mixed())
        assert client.list_tables() == []  # the client still works


def test_a_closed_client_says_so() -> None:
    client = Client("http://api.test/v1", "k")
    client.close()
    client.close()  # twice is fine
    with pytest.raises(EngineError, match="closed"):
        client.list_tables()


def test_stream_closes_the_generator_when_the_consumer_stops() -> None:
    closed: list[int] = []

    async def numbers() -> AsyncIterator[int]:
        i = 0
        try:
            while True:
                yield i
                i += 1
        finally:
            closed.append(i)

    with Client("http://api.test/v1", "k") as client:
        for i in client.stream(numbers()):
            if i == 2:
                break
        assert closed == [2]

        def fail() -> Iterator[int]:
            async def broken() -> AsyncIterator[int]:
                yield 1
                raise ConfigError("from inside")

            return client.stream(broken())

        with pytest.raises(ConfigError, match="from inside"):
            list(fail())


def test_the_async_core_reads_an_extraction_with_async_for(
    server: RunningServer, people: str
) -> None:
    async def rows_of(client: AsyncClient) -> int:
        table = await client.get_table(people)
        return sum([batch.num_rows async for batch in Extraction(client, table, page_size=7)])

    with Client(server.base_url, server.api_key) as client:
        assert client.run(rows_of(client.aio)) == 30

    async def standalone() -> int:
        async with AsyncClient(server.base_url, server.api_key) as client:
            table = await client.get_table(people)
            with pytest.raises(ConfigError, match="async for"):
                iter(Extraction(client, table))
            return await rows_of(client)

    assert asyncio.run(standalone()) == 30


def test_an_async_transport_is_used_as_is(server: RunningServer, people: str) -> None:
    seen: list[str] = []
    inner = httpx.AsyncHTTPTransport()

    class Spy(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.method)
            return await inner.handle_async_request(request)

        async def aclose(self) -> None:
            await inner.aclose()

    with Client(server.base_url, server.api_key, transport=Spy()) as client:
        assert len(Extraction(client, client.get_table(people)).to_pandas()) == 30
    assert seen and set(seen) == {"GET"}


def test_a_wsgi_transport_answer_is_decoded_once() -> None:
    """A gzip-encoded answer (our server never sends one) through a sync-only transport."""
    body = gzip.compress(json.dumps({"tables": [{"id": "tbl_1", "name": "T"}]}).encode())

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Encoding", "gzip")])
        return [body]

    transport = httpx.WSGITransport(app=app)
    assert not isinstance(transport, httpx.AsyncBaseTransport)
    with Client("http://api.test/v1", "k", transport=transport) as client:
        assert [t.name for t in client.list_tables()] == ["T"]


def test_something_that_is_not_a_transport_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="httpx transport"):
        Client("http://api.test/v1", "k", transport=object())  # type: ignore[arg-type]


def test_a_proxy_named_by_the_environment_is_used(
    server: RunningServer, people: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a transport, the client routes as httpx would: through HTTP_PROXY."""
    with _forwarding_proxy() as (proxy_url, forwarded):
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        with Client(server.base_url, server.api_key) as client:
            assert len(client.list_rows(people, limit=3).rows) == 3
    assert forwarded == [f"{server.base_url}/tables/{people}/rows?limit=3&offset=0"]


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


async def _other_tasks() -> int:
    return len(asyncio.all_tasks() - {asyncio.current_task()})


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "connector-engine"]


@contextlib.contextmanager
def _forwarding_proxy() -> Iterator[tuple[str, list[str]]]:
    """A plain HTTP proxy on a free port: forwards GETs to the absolute URL asked for."""
    forwarded: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            forwarded.append(self.path)
            with httpx.Client(trust_env=False) as upstream:
                answer = upstream.get(self.path, headers={"Authorization": self.headers["Authorization"]})
            self.send_response(answer.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}", forwarded
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()
