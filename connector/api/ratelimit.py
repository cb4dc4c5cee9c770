"""One adaptive request pacer per API key, shared by every concurrent request that uses it.

The API does not publish its rate limits, so we learn them (AIMD, as TCP does): requests
start unpaced; a 429 cuts the pace to the rate the server was actually accepting over the
last second (the multiplicative decrease is at most to ``DECREASE`` of the current pace, and
happens at most once per second, so a burst of 429s from requests already in flight counts
once); every accepted request then adds a little to the pace (additive increase of
``INCREASE`` of the learned rate per second). A rate-limited server is thus run just under
its limit, with a 429 now and then rather than in storms.

The pacer is thread-safe and loop-agnostic: `reserve()` books a start time under a lock and
says how long to wait; the sync client sleeps, the async client awaits.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque

__all__ = ["DECREASE", "INCREASE", "MIN_RATE", "RateLimiter", "limiter_for"]

#: A 429 never cuts the pace below this share of the pace it was at.
DECREASE = 0.7
#: Share of the learned rate added back per second without a 429.
INCREASE = 0.1
#: The pace never drops below this many requests per second.
MIN_RATE = 1.0
#: Seconds of history used to measure the accepted rate; also the cooldown between cuts.
WINDOW = 1.0


class RateLimiter:
    """Paces request starts for one key; learns the rate from 429s (see the module doc)."""

    def __init__(self, rate: float | None = None) -> None:
        self._lock = threading.Lock()
        self._rate = rate  # requests per second; None = unpaced until the first 429
        self._learned = rate or 0.0
        self._next_start = 0.0
        self._last_cut = float("-inf")
        self._accepted: deque[float] = deque()
        self.throttled = 0  #: 429s seen, for reports and benchmarks
        self.accepted = 0  #: other answers seen

    @property
    def rate(self) -> float | None:
        """The current pace in requests per second (None: not limited so far)."""
        return self._rate

    def reserve(self) -> float:
        """Book the next start slot; returns the seconds to wait before sending."""
        with self._lock:
            now = time.monotonic()
            if self._rate is None:
                return 0.0
            start = max(now, self._next_start)
            self._next_start = start + 1.0 / self._rate
            return start - now

    def on_accepted(self) -> None:
        """The server answered with something other than 429: grow the pace a little."""
        with self._lock:
            now = time.monotonic()
            self.accepted += 1
            self._accepted.append(now)
            self._trim(now)
            # Grow only while the pace is what holds us back (not latency).
            if self._rate is not None and self._rate < 1.5 * len(self._accepted) / WINDOW:
                self._rate += INCREASE * self._learned / self._rate

    def on_throttled(self) -> None:
        """The server answered 429: cut the pace to what it was accepting (once a window)."""
        with self._lock:
            now = time.monotonic()
            self.throttled += 1
            self._trim(now)
            if now - self._last_cut < WINDOW:
                return
            measured = len(self._accepted) / WINDOW
            if self._rate is None and not measured:
                return  # nothing accepted yet, so nothing learned: the retry backoff paces us
            self._last_cut = now
            floor = DECREASE * self._rate if self._rate is not None else 0.0
            self._rate = max(MIN_RATE, measured, floor)
            self._learned = self._rate
            self._next_start = max(self._next_start, now + 1.0 / self._rate)

    def _trim(self, now: float) -> None:
        while self._accepted and self._accepted[0] < now - WINDOW:
            self._accepted.popleft()


_shared: dict[tuple[str, str], RateLimiter] = {}
_shared_lock = threading.Lock()


def limiter_for(base_url: str, api_key: str) -> RateLimiter:
    """The process-wide limiter of one key on one server (the key is kept only as a hash)."""
    digest = hashlib.sha256(api_key.encode()).hexdigest()
    with _shared_lock:
        return _shared.setdefault((base_url, digest), RateLimiter())
