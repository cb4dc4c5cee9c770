"""Shared pieces for job tests: a small typed table on a real server, and job files for it.

Tests that specify the incremental read itself (what it reads, its requests) set
``lookback = 0``: every row of these tests is seconds old, so the default window would read
them all again (and, correctly, write none of them). The window has its own tests
(tests/jobs/test_lookback.py), which run with the default.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from connector.jobs.config import load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.results import RunSummary
from tests.fixtures.server import RunningServer

PEOPLE = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Team", "type": "choice", "options": ["Red", "Blue"]},
        {"name": "Score", "type": "number"},
        {"name": "Active", "type": "checkbox"},
        {"name": "Joined", "type": "date"},
    ],
}
NOTES = {"name": "Notes", "columns": [{"name": "Text", "type": "text"}]}


def person(i: int, team: str = "Red") -> dict[str, Any]:
    return {
        "Name": f"P{i:03d}",
        "Team": team,
        "Score": float(i),
        "Active": i % 2 == 0,
        "Joined": "2024-01-02",
    }


@dataclass
class Workspace:
    """A running server with People (and Notes) tables, and a way to run job files on it."""

    server: RunningServer
    directory: Path
    people: str
    notes: str

    @property
    def environ(self) -> dict[str, str]:
        return {"CONNECTOR_BASE_URL": self.server.base_url, "JOB_KEY": self.server.api_key}

    def job(self, body: str, name: str = "job", *, concurrency: int = 4) -> Path:
        """A job file on this server; `concurrency=1` makes a read's pace predictable."""
        path = self.directory / f"{name}.toml"
        header = f'[source]\napi_key_env = "JOB_KEY"\npage_size = 50\nconcurrency = {concurrency}\n'
        path.write_text(header + textwrap.dedent(body))
        return path

    def run(self, path: Path, **options: Any) -> RunSummary:
        return run_job(load_job(path), RunOptions(environ=self.environ, **options))

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        with self.server.client() as http:
            response = http.request(method, path, **kwargs)
            response.raise_for_status()
            return response.json() if response.content else None


MakeWorkspace = Callable[..., Workspace]


@pytest.fixture
def make_workspace(server_factory: Callable[..., RunningServer], tmp_path: Path) -> MakeWorkspace:
    def make(people: int = 10, **server_options: Any) -> Workspace:
        server = server_factory(**server_options)
        people_id = server.create_table(PEOPLE)
        notes_id = server.create_table(NOTES)
        server.insert_rows(people_id, [person(i) for i in range(people)])
        server.insert_rows(notes_id, [{"Text": "hello"}, {"Text": "world"}])
        return Workspace(server, tmp_path, people_id, notes_id)

    return make


@pytest.fixture
def workspace(make_workspace: MakeWorkspace) -> Workspace:
    return make_workspace()


def sql_rows(url: str, table: str = "People") -> list[dict[str, Any]]:
    """Every row of a SQL table, read back by SQLAlchemy (not by the code under test)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        reflected = sa.Table(table, sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(reflected)).mappings()]
    finally:
        engine.dispose()


#: Answers a request itself, or returns None to let it through to the real server.
Intercept = Callable[[httpx.Request], httpx.Response | None]
Proxy = Callable[[Intercept], httpx.MockTransport]


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """Transports in front of the real server: for server behaviour ours does not show."""
    with httpx.Client() as upstream:

        def make(intercept: Intercept) -> httpx.MockTransport:
            def handle(request: httpx.Request) -> httpx.Response:
                answer = intercept(request)
                if answer is not None:
                    return answer
                forwarded = upstream.send(
                    upstream.build_request(
                        request.method, request.url, headers=request.headers, content=request.read()
                    )
                )
                return httpx.Response(
                    forwarded.status_code, headers=forwarded.headers, content=forwarded.content
                )

            return httpx.MockTransport(handle)

        yield make
