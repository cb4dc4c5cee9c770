"""The token bucket behind --rate-limit, on a clock the test moves."""

from __future__ import annotations

import pytest

from connector.server.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_rate_requests_then_one_per_interval() -> None:
    clock = Clock()
    limiter = RateLimiter(4, clock)
    assert [limiter.wait("k") for _ in range(4)] == [0, 0, 0, 0]
    assert limiter.wait("k") == pytest.approx(0.25)
    clock.now += 0.25
    assert limiter.wait("k") == 0
    assert limiter.wait("k") > 0


def test_buckets_are_per_key() -> None:
    limiter = RateLimiter(1, Clock())
    assert limiter.wait("a") == 0
    assert limiter.wait("a") > 0
    assert limiter.wait("b") == 0


def test_a_rate_below_one_a_second_still_lets_requests_through() -> None:
    clock = Clock()
    limiter = RateLimiter(0.5, clock)
    assert limiter.wait("k") == 0
    assert limiter.wait("k") == pytest.approx(2.0)
    clock.now += 2.0
    assert limiter.wait("k") == 0


@pytest.mark.parametrize(("wait", "header"), [(0.01, "1"), (1.0, "1"), (1.2, "2")])
def test_retry_after_is_whole_seconds_never_zero(wait: float, header: str) -> None:
    assert RateLimiter.retry_after(wait) == header
