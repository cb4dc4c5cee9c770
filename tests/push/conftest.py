"""Push test fixtures: the reference server in-process (fast), and counting the writes sent."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from connector.api import Client, RetryPolicy
from connector.server.app import create_app
from connector.server.faults import Faults
from connector.server.storage import Storage

PEOPLE = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Zip", "type": "text"},
        {"name": "Age", "type": "number"},
        {"name": "Status", "type": "choice", "options": ["active", "paused"]},
        {"name": "Born", "type": "date"},
        {"name": "Member", "type": "checkbox"},
    ],
}


class Counting(httpx.AsyncBaseTransport):
    """Counts requests by (method, endpoint kind) on their way to the real app."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        kind = "bulk" if path.endswith("/bulk") else "rows" if path.endswith("/rows") else "row"
        if "/rows" in path:
            self.calls[f"{request.method} {kind}"] += 1
        return await self.inner.handle_async_request(request)

    @property
    def writes(self) -> int:
        return sum(n for k, n in self.calls.items() if not k.startswith("GET"))


@dataclass
class InProcess:
    """A reference server app on a temp SQLite file, with a full-access key."""

    db: Path
    key: str
    transport: Counting
    clients: list[Client] = field(default_factory=list)

    def create_table(self, spec: dict[str, Any]) -> str:
        with contextlib.closing(Storage(str(self.db))) as storage:
            return storage.create_table(spec).id

    def insert(self, table_id: str, rows: list[dict[str, Any]]) -> None:
        with contextlib.closing(Storage(str(self.db))) as storage:
            table = storage.table(table_id)
            assert table is not None
            storage.insert_rows(table, [table.check_create(r) for r in rows])

    def client(self, **options: Any) -> Client:
        options.setdefault("retry", RetryPolicy(initial_backoff=0.001, max_backoff=0.01))
        client = Client("http://push.test/v1", self.key, transport=self.transport, **options)
        self.clients.append(client)
        return client

    def rows(self, table_id: str) -> list[dict[str, Any]]:
        """Every row through the API (a plain httpx client, not the code under test)."""
        app = self.transport.inner
        found: list[dict[str, Any]] = []

        async def read() -> None:
            async with httpx.AsyncClient(
                transport=app, base_url="http://push.test/v1",
                headers={"Authorization": f"Bearer {self.key}"},
            ) as http:
                offset = 0
                while True:
                    page = (await http.get(f"/tables/{table_id}/rows",
                                           params={"limit": 1000, "offset": offset})).json()
                    found.extend(page["rows"])
                    if len(page["rows"]) < 1000:
                        return
                    offset += 1000

        import asyncio

        asyncio.run(read())
        return found


InProcessFactory = Callable[..., InProcess]


@pytest.fixture
def inproc_factory(tmp_path: Path) -> Iterator[InProcessFactory]:
    """Start in-process servers with `create_app` fault options (fail_after_write_rate=...)."""
    made: list[InProcess] = []

    def make(**faults: Any) -> InProcess:
        db = tmp_path / f"push{len(made)}.db"
        with contextlib.closing(Storage(str(db))) as storage:
            key = storage.create_key()
        app = create_app(str(db), faults=Faults(**faults))
        made.append(InProcess(db, key, Counting(httpx.ASGITransport(app=app))))
        return made[-1]

    yield make
    for env in made:
        for client in env.clients:
            client.close()


@pytest.fixture
def inproc(inproc_factory: InProcessFactory) -> InProcess:
    return inproc_factory()


def fields(rows: list[dict[str, Any]], *names: str) -> list[tuple[Any, ...]]:
    """The named cells of API rows, sorted: what a table holds, independent of row order."""
    return sorted(tuple(r["fields"].get(n) for n in names) for r in rows)


@pytest.fixture
def postgres_user(postgres_db: str) -> Iterator[str]:
    """`postgres_db` as a role that is no superuser and may write every table and sequence
    made in it later: a query that changes nothing shows the read-only guard at work, not a
    missing privilege."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(postgres_db)
    role = f"{url.database}_user"
    admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'CREATE ROLE "{role}" LOGIN')
        db.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
        for kind in ("TABLES", "SEQUENCES", "FUNCTIONS"):
            db.execute(f'ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON {kind} TO "{role}"')
    yield url.set(username=role).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'DROP OWNED BY "{role}"')
        db.execute(f'DROP ROLE "{role}"')
