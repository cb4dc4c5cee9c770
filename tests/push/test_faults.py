"""Pushing through a failing server (real uvicorn process): the table ends right, never doubled."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pandas as pd

from connector.api import Client, RetryPolicy
from connector.push import PushSpec, push
from tests.fixtures.server import RunningServer, ServerFactory
from tests.push.conftest import PEOPLE

FAST_RETRY = RetryPolicy(initial_backoff=0.01, max_backoff=0.2)


def client(server: RunningServer) -> Client:
    return Client(server.base_url, server.api_key, retry=FAST_RETRY)


def table_rows(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    """Every row, read with plain httpx (retrying the server's injected faults by hand)."""
    rows: list[dict[str, Any]] = []
    with server.client() as http:
        offset = 0
        while True:
            for _ in range(50):
                try:
                    response = http.get(f"/tables/{table_id}/rows",
                                        params={"limit": 1000, "offset": offset})
                except httpx.HTTPError:
                    continue
                if response.status_code == 200:
                    break
            page = response.json()["rows"]
            rows += page
            if len(page) < 1000:
                return rows
            offset += 1000


def source(n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "Name": [f"n{i:04d}" for i in range(n)],
        "Zip": [f"{i:05d}" for i in range(n)],
        "Age": [str(i) for i in range(n)],
    })


def test_an_ambiguous_bulk_create_is_re_read_never_re_sent(server_factory: ServerFactory) -> None:
    # Every write commits, then answers 500: a blind retry would create everything twice.
    server = server_factory(fail_after_write_rate=1.0)
    table_id = server.create_table(PEOPLE)
    with client(server) as c:
        result = push(c, PushSpec(source(250), table="People", key="Name", mode="insert"))
    assert result.created == 250 and 1 <= result.rereads <= 3
    # Each of the 3 batches was committed on its first send: any re-send would have doubled it.
    names = Counter(r["fields"]["Name"] for r in table_rows(server, table_id))
    assert names == Counter(f"n{i:04d}" for i in range(250))


def test_every_fault_at_once_converges_without_duplicates(server_factory: ServerFactory) -> None:
    server = server_factory(
        fail_rate=0.05, throttle_rate=0.05, fail_after_write_rate=0.1, drop_rate=0.05, seed=7
    )
    table_id = server.create_table(PEOPLE)
    # 150 creates (2 bulk requests), 40 updates, 40 mirror deletes (20% of the table).
    server.insert_rows(table_id, [
        {"Name": f"n{i:04d}", "Zip": f"{i:05d}", "Age": i + (i % 4 == 0)} for i in range(150, 350)
    ])
    wanted = source(310)

    with client(server) as c:
        first = push(c, PushSpec(wanted, table="People", key="Name", mode="mirror", concurrency=8))
        assert (first.created, first.updated, first.deleted, first.rejected) == (150, 40, 40, ())
        second = push(c, PushSpec(wanted, table="People", key="Name", mode="mirror"))

    rows = table_rows(server, table_id)
    names = Counter(r["fields"]["Name"] for r in rows)
    assert max(names.values()) == 1, "a row was created twice"
    assert sorted((r["fields"]["Name"], r["fields"]["Zip"], r["fields"]["Age"]) for r in rows) == [
        (f"n{i:04d}", f"{i:05d}", i) for i in range(310)
    ]
    assert second.plan.is_empty and second.requests == 0


def test_a_rate_limited_server_gets_the_minimum_writes(server_factory: ServerFactory) -> None:
    # burst 10, then 10/s: 35 requests (3 reads, 32 writes) meet 429s even on a slow machine
    server = server_factory(rate_limit=10, rate_headers="none")  # learned from 429s
    table_id = server.create_table(PEOPLE)
    server.insert_rows(table_id, [{"Name": f"n{i:04d}", "Zip": f"{i:05d}", "Age": -1} for i in range(30)])
    with client(server) as c:
        result = push(c, PushSpec(source(230), table="People", key="Name", concurrency=8))
        assert c.limiter.throttled > 0, "the server never said 429: the test tests nothing"
    assert (result.created, result.updated) == (200, 30)
    assert result.requests == result.plan.requests == 2 + 30  # 429s are retried by the client
    rows = table_rows(server, table_id)
    assert sorted((r["fields"]["Name"], r["fields"]["Age"]) for r in rows) == [
        (f"n{i:04d}", i) for i in range(230)
    ]
