"""The adaptive limiter: learns a server's limit from 429s, runs just under it, shared per key."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from connector.api import Client, RateLimiter
from connector.api.ratelimit import limiter_for
from connector.extract import Extraction
from tests.fixtures.server import ServerFactory


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def learned(accepted_per_second: int) -> tuple[RateLimiter, Clock]:
    """A limiter that saw `accepted_per_second` answers over a second, then a 429."""
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    first = clock.now
    for i in range(accepted_per_second):
        clock.now = first + i / accepted_per_second
        limiter.on_accepted()
    clock.now = first + 1.0
    limiter.on_throttled()
    return limiter, clock


def test_requests_are_not_paced_until_the_first_429() -> None:
    limiter = RateLimiter()
    assert [limiter.reserve() for _ in range(100)] == [0.0] * 100


def test_a_429_in_the_first_second_only_backs_off_its_own_request() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    limiter.on_accepted()
    clock.now += 0.2
    limiter.on_throttled()
    assert limiter.rate is None


def test_a_429_paces_requests_at_just_under_the_accepted_rate() -> None:
    limiter, _ = learned(40)
    assert limiter.rate == pytest.approx(0.95 * 40)
    waits = [limiter.reserve() for _ in range(10)]
    assert waits == sorted(waits)  # each later request starts later
    assert waits[-1] - waits[0] == pytest.approx(9 / limiter.rate, rel=0.05)


def test_429s_of_requests_already_in_flight_cut_once() -> None:
    limiter, clock = learned(40)
    for _ in range(7):
        clock.now += 0.01
        limiter.on_throttled()
    assert limiter.rate == pytest.approx(0.95 * 40)
    assert limiter.throttled == 8


def test_later_cuts_learn_the_rate_accepted_since_the_last_one() -> None:
    """A token bucket is empty at each 429, so what came through in between is its refill rate."""
    limiter, clock = learned(40)  # the first second included a burst allowance
    for _ in range(60):  # 30 a second for two seconds
        clock.now += 1 / 30
        limiter.on_accepted()
    limiter.on_throttled()
    assert limiter.rate == pytest.approx(0.95 * 30, rel=0.02)


def test_the_pace_creeps_back_up_without_429s() -> None:
    limiter, clock = learned(40)
    start = limiter.rate
    assert start is not None
    for _ in range(200):
        clock.now += 1 / 40
        limiter.on_accepted()
    assert limiter.rate is not None and limiter.rate > start


def test_a_cut_never_more_than_halves_the_pace() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=100.0, clock=clock)
    limiter.on_accepted()
    clock.now += 2
    limiter.on_throttled()
    assert limiter.rate == pytest.approx(50.0)


def test_one_limiter_per_key_and_server_holding_no_key() -> None:
    a = limiter_for("http://x/v1", "key-one")
    assert limiter_for("http://x/v1", "key-one") is a
    assert limiter_for("http://x/v1", "key-two") is not a
    assert limiter_for("http://y/v1", "key-one") is not a
    assert "key-one" not in repr(vars(a))
    with Client("http://x/v1", "key-one") as one, Client("http://x/v1", "key-one") as two:
        assert one.limiter is two.limiter is a


def test_the_limiter_is_safe_across_threads() -> None:
    limiter = RateLimiter(rate=1000.0)
    starts: list[float] = []
    lock = threading.Lock()

    def book() -> None:
        for _ in range(50):
            wait = limiter.reserve()
            with lock:
                starts.append(time.monotonic() + wait)

    threads = [threading.Thread(target=book) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    starts.sort()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 200
    assert sum(gaps) >= 199 / 1000 * 0.9  # 200 starts spread at 1000/s, not bunched


def test_a_rate_limited_server_is_read_near_its_limit_without_a_429_storm(
    server_factory: ServerFactory,
) -> None:
    limit = 40  # requests per second, per key
    server = server_factory(rate_limit=limit)
    table_id = server.create_table({"name": "T", "columns": [{"name": "N", "type": "number"}]})
    server.insert_rows(table_id, [{"N": i} for i in range(3000)])
    limiter = RateLimiter()
    with Client(server.base_url, server.api_key, limiter=limiter) as client:
        table = client.get_table(table_id)
        time.sleep(1.0)  # the server's bucket refills: the read starts with its burst allowance
        started = time.monotonic()
        rows = sum(b.num_rows for b in Extraction(client, table, page_size=25, concurrency=8))
        seconds = time.monotonic() - started
    requests = limiter.accepted + limiter.throttled
    assert rows == 3000
    assert limiter.throttled / requests < 0.15  # a few probes, not a storm
    # 3000 rows in pages of 25 (overlapping by one) is 131 requests: at 40/s with a burst
    # of 40, about 2.3 s. Allow for a 429's Retry-After stall (1 s) and a busy machine; a pace
    # learned wrong (a tenth of the limit, as once happened) would take over 30 s.
    assert seconds < 2 * 131 / limit + 3.0
