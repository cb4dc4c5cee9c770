"""The adaptive concurrency limit: it grows while a server keeps up, backs off when it does not,
and never passes its cap (`connector.api.concurrency`).

The rules are checked on the limit itself, answer by answer; what a client does with it is
checked against the reference server, counting the requests really in flight.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from connector.api import Client
from connector.api.concurrency import (
    BACKOFF,
    DEFAULT_MAX_CONCURRENCY,
    INITIAL,
    MAX_CONCURRENCY,
    START_CEILING,
    ConcurrencyLimit,
)
from connector.api.retry import RetryPolicy
from connector.errors import ConfigError
from connector.extract import Extraction
from tests.fixtures.server import RunningServer, ServerFactory

# -- the rules, answer by answer ------------------------------------------------------------


def answered(limit: ConcurrencyLimit, latencies: list[float], ok: bool = True) -> None:
    """Take as many slots as the latencies (at once, as a busy reader does), then answer."""

    async def go() -> None:
        for _ in latencies:
            await limit.acquire()
        for latency in latencies:
            limit.release(latency, ok=ok)

    asyncio.run(go())


def full_round(limit: ConcurrencyLimit, latency: float = 0.02, ok: bool = True) -> None:
    answered(limit, [latency] * limit.level, ok)


def test_it_starts_modestly_and_doubles_each_clean_full_round_up_to_its_ceiling() -> None:
    limit = ConcurrencyLimit(32)
    assert limit.level == INITIAL
    levels = []
    for _ in range(4):
        full_round(limit)
        levels.append(limit.level)
    assert START_CEILING == 16
    assert levels == [8, 16, 17, 18]  # then one a round: 32 at once reads slower than 16
    assert limit.peak == 18


def test_a_round_that_opens_connections_does_not_end_slow_start() -> None:
    """Its first answers wait for their connections: the mean is slow, the quickest is not
    (measured at +20 ms: a mean of 31 ms against a quickest of 26 ms)."""
    limit = ConcurrencyLimit(32)
    for _ in range(2):  # each round: three quarters wait for a new connection
        quick = limit.level // 4
        answered(limit, [0.033] * (limit.level - quick) + [0.026] * quick)
    assert limit.level == 16


def test_a_round_whose_quickest_answer_slowed_ends_slow_start() -> None:
    limit = ConcurrencyLimit(32)
    full_round(limit, 0.02)  # 8
    full_round(limit, 0.025)  # every answer slower: a queue; not yet past the tolerance
    assert limit.level == 9
    full_round(limit, 0.021)
    assert limit.level == 10  # one a round now, not twice as many


def test_past_slow_start_it_grows_only_while_less_than_a_request_waits_in_a_queue() -> None:
    """Little's law, as TCP Vegas reckons its backlog: even the round's quickest answer came
    late by a share of the round trip, and so many of the level's requests waited. More in
    flight then adds latency, not throughput, though the answers are still well inside the
    tolerance that cuts."""
    limit = ConcurrencyLimit(64)
    for _ in range(3):
        full_round(limit, 0.02)  # 8, 16, then 17: the fastest answer seen is 20 ms
    assert limit.level == 17
    full_round(limit, 0.0205)  # 17 x (1 - 20 / 20.5) = 0.4 waiting
    assert limit.level == 18
    for _ in range(5):
        full_round(limit, 0.024)  # 18 x (1 - 20 / 24) = 3 waiting; 24 ms < the cut's 27 ms
        assert limit.level == 18
    full_round(limit, 0.02)  # the queue drained
    assert limit.level == 19


def test_answers_that_vary_do_not_read_as_a_queue_while_one_stays_quick() -> None:
    """A distant server's answers spread (jitter); a queue would delay them all."""
    limit = ConcurrencyLimit(64)
    for _ in range(3):
        full_round(limit, 0.02)  # 17
    for level in range(18, 23):
        spread = [0.02 + 0.01 * i / (limit.level - 1) for i in range(limit.level)]
        answered(limit, spread)  # 20 to 30 ms, a mean of 25 ms: within the cut's 27 ms
        assert limit.level == level


def test_an_error_round_cuts_it_and_growth_is_then_one_a_round() -> None:
    limit = ConcurrencyLimit(64)
    full_round(limit)
    full_round(limit)  # 16
    full_round(limit, ok=False)
    assert limit.level == int(16 * BACKOFF)
    before = limit.level
    full_round(limit)
    assert limit.level == before + 1


def test_inflated_latency_eases_it_but_not_below_the_start() -> None:
    limit = ConcurrencyLimit(64)
    full_round(limit, 0.02)
    full_round(limit, 0.02)  # 16, the fastest answer seen: 20 ms
    full_round(limit, 0.2)  # queueing: ten times as slow
    assert INITIAL <= limit.level < 16
    for _ in range(30):
        full_round(limit, 0.2)
    assert limit.level == INITIAL


def test_answers_to_requests_sent_before_a_cut_do_not_cut_it_again() -> None:
    """They tell of the old level's queue: judged, they would cut twice for one excess."""
    limit = ConcurrencyLimit(64)
    full_round(limit, 0.02)
    full_round(limit, 0.02)  # 16

    async def go() -> None:
        for _ in range(16):
            await limit.acquire()
        for _ in range(8):
            limit.release(0.2)
        for _ in range(8):
            await limit.acquire()
        for _ in range(8):
            limit.release(0.2)  # a round of slow answers: cut to 8, with 8 still in flight
        assert limit.level == 8
        for _ in range(8):
            limit.release(0.2)  # those 8, sent before the cut: slow too, but not judged

    asyncio.run(go())
    assert limit.level == 8


def test_it_grows_only_when_the_level_was_used() -> None:
    limit = ConcurrencyLimit(32)
    for _ in range(5):
        answered(limit, [0.02])  # one request at a time: the level never held anyone back
    assert limit.level == INITIAL


def test_a_cancelled_request_frees_its_slot_and_teaches_nothing() -> None:
    limit = ConcurrencyLimit(32)

    async def go() -> None:
        for _ in range(INITIAL):
            await limit.acquire()
        waiting = asyncio.ensure_future(limit.acquire())
        await asyncio.sleep(0)
        assert not waiting.done()  # the level is full: it waits
        limit.release(None)
        await asyncio.wait_for(waiting, 1)
        assert limit.in_flight == INITIAL

    asyncio.run(go())
    assert limit.level == INITIAL


@pytest.mark.parametrize("cap", [0, MAX_CONCURRENCY + 1])
def test_a_cap_out_of_range_is_refused(cap: int) -> None:
    with pytest.raises(ValueError, match="max_concurrency must be an integer from 1 to 64"):
        ConcurrencyLimit(cap)


def test_the_cap_comes_from_the_environment_when_not_given(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONNECTOR_MAX_CONCURRENCY", "6")
    with Client(server.base_url, server.api_key) as client:
        assert client.concurrency.maximum == 6
    monkeypatch.setenv("CONNECTOR_MAX_CONCURRENCY", "lots")
    with pytest.raises(ConfigError, match="CONNECTOR_MAX_CONCURRENCY must be an integer from 1"):
        Client(server.base_url, server.api_key)
    monkeypatch.delenv("CONNECTOR_MAX_CONCURRENCY")
    with Client(server.base_url, server.api_key) as client:
        assert client.concurrency.maximum == DEFAULT_MAX_CONCURRENCY


# -- a client against the reference server --------------------------------------------------


class InFlight(httpx.AsyncBaseTransport):
    """The real HTTP transport, counting the requests in flight through it."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.now = 0
        self.most = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            response = await self._inner.handle_async_request(request)
            await response.aread()
            return response
        finally:
            self.now -= 1

    async def aclose(self) -> None:
        await self._inner.aclose()


def slow_table(server_factory: ServerFactory, rows: int = 2000, **faults: Any) -> tuple[RunningServer, str]:
    server = server_factory(latency_ms=100, **faults)
    table = server.create_table({"name": "Slow", "columns": [{"name": "N", "type": "number"}]})
    server.insert_rows(table, [{"N": i} for i in range(rows)])
    return server, table


def test_a_read_from_a_distant_server_raises_the_level_past_the_start(
    server_factory: ServerFactory,
) -> None:
    server, table_id = slow_table(server_factory)
    counting = InFlight()
    with Client(server.base_url, server.api_key, transport=counting) as client:
        rows = sum(b.num_rows for b in Extraction(client, client.get_table(table_id), page_size=50))
        peak = client.concurrency.peak
    assert rows == 2000
    assert peak > INITIAL
    assert counting.most > INITIAL  # really more requests at once, not just a number


def test_the_cap_bounds_the_requests_in_flight(server_factory: ServerFactory) -> None:
    server, table_id = slow_table(server_factory, rows=1000)
    counting = InFlight()
    with Client(server.base_url, server.api_key, transport=counting, max_concurrency=3) as client:
        rows = sum(b.num_rows for b in Extraction(client, client.get_table(table_id), page_size=50))
        assert client.concurrency.peak <= 3
    assert rows == 1000
    assert counting.most == 3


def test_server_errors_bring_the_level_down(server_factory: ServerFactory) -> None:
    server, table_id = slow_table(server_factory, fault_control=True)
    quick = RetryPolicy(initial_backoff=0.05, max_backoff=0.2)  # the level is the point, not the waits
    with Client(server.base_url, server.api_key, max_concurrency=32, retry=quick) as client:
        table = client.get_table(table_id)
        sum(b.num_rows for b in Extraction(client, table, page_size=50))
        grown = client.concurrency.level
        assert grown > INITIAL
        server.set_faults(fail_rate=0.5, seed=7)
        rows = sum(b.num_rows for b in Extraction(client, table, page_size=50))
        assert rows == 2000  # retried through
        assert client.concurrency.level < grown
