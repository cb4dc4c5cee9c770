"""Per-key rate limiting: a token bucket of `rate` requests a second, bursting to `rate`
(at least one request, so a rate below 1/s still lets a request through now and then).

The app keeps two: one per key for the requests a key makes, and one per client address
for failed authentications, so guessing keys is as slow as the rate limit."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class RateLimiter:
    """`wait(key)` is 0 when the request may go now, else the seconds until it may."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"rate limit must be positive, got {rate}")
        self.rate = rate
        self.burst = max(rate, 1.0)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)

    def blocked(self, key: str) -> float:
        """Like `wait`, but spends nothing: the seconds until `key` may go (0: now)."""
        now = self._clock()
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def wait(self, key: str) -> float:
        now = self._clock()
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait: float) -> str:
        """Retry-After is whole seconds (RFC 9110); never 0, so clients do pause."""
        return str(max(1, math.ceil(wait)))
