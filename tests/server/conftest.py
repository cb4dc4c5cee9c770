"""In-process fixtures: an httpx.Client driving the app through httpx.ASGITransport.

Fast tests of the HTTP contract use these; tests that need a real socket, a real process
(kill -9, dropped connections) or real concurrency use the `server` fixtures instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from connector.server.app import create_app
from connector.server.storage import Storage

#: A table with every column type; `Name` is required.
PEOPLE: dict[str, Any] = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Active", "Inactive"]},
        {"name": "Age", "type": "number"},
        {"name": "Member", "type": "checkbox"},
        {"name": "Joined", "type": "date"},
    ],
}


@pytest.fixture
def storage(tmp_path: Any) -> Iterator[Storage]:
    store = Storage(str(tmp_path / "api.db"))
    yield store
    store.close()


@pytest.fixture
def key(storage: Storage) -> str:
    return storage.create_key()


class Clock:
    """Seconds that pass only when a test moves them (`now`): a rate limit's tokens come
    back when the test says, not when a loaded machine happens to be slow."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class InProcess(httpx.BaseTransport):
    """A synchronous face on httpx.ASGITransport: each request runs the app on a fresh loop."""

    def __init__(self, app: Any) -> None:
        # An app exception must reach the client as the 500 the app sends, not as a raise.
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def call() -> httpx.Response:
            response = await self._asgi.handle_async_request(request)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=body)

        return asyncio.run(call())


def make_client(app: Any, key: str | None) -> httpx.Client:
    """An httpx.Client of the in-process `app`, sending `key` if given."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(transport=InProcess(app), base_url="http://testserver/v1", headers=headers)


@pytest.fixture
def api(storage: Storage, key: str) -> Iterator[httpx.Client]:
    """A client of a fault-free app, with a full-access key."""
    with make_client(create_app(storage), key) as client:
        yield client


@pytest.fixture
def people(storage: Storage) -> str:
    """The id of an empty `People` table."""
    return storage.create_table(PEOPLE).id
