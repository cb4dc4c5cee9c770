"""One adaptive request pacer per API key, shared by every concurrent request that uses it.

The API does not publish its rate limits, so we learn them, AIMD-style as TCP does. Requests
start unpaced. A 429 cuts the pace to just under the rate the server accepted since the
previous 429 (``BACKOFF`` of it; a token bucket is empty at each 429, so that rate is the
refill rate, free of the burst allowance), or over the last second at the first 429 (one
that comes in the first second of use only backs off its own request: a second of history
is needed to learn anything), never by more than to ``DECREASE`` of the current pace, and
at most once a second, so a burst of 429s from requests already in flight counts once. Each
accepted request then adds a little (``INCREASE`` of the learned rate per second), so the
pace creeps back up to the limit and probes it rarely. A 429 is expensive (the server's
Retry-After stalls that request a whole second or more), so the pacer aims to sit just
below the limit rather than to oscillate around it.

The pacer is thread-safe and loop-agnostic: `reserve()` books a start time under a lock and
says how long to wait; the sync client sleeps, the async client awaits.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["BACKOFF", "DECREASE", "INCREASE", "MIN_RATE", "RateLimiter", "limiter_for"]

#: After a 429, the pace is this share of the rate the server was accepting.
BACKOFF = 0.95
#: A 429 never cuts the pace below this share of the pace it was at.
DECREASE = 0.5
#: Share of the learned rate added back per second without a 429.
INCREASE = 0.02
#: The pace never drops below this many requests per second.
MIN_RATE = 1.0
#: Seconds of history used to measure the accepted rate; also the cooldown between cuts.
WINDOW = 1.0


class RateLimiter:
    """Paces request starts for one key; learns the rate from 429s (see the module doc)."""

    def __init__(
        self, rate: float | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rate = rate  # requests per second; None = unpaced until the first 429
        self._learned = rate or 0.0
        self._next_start = 0.0
        self._last_cut = float("-inf")
        self._accepted: deque[float] = deque()
        self._since_cut = 0
        self._first_answer: float | None = None
        self.throttled = 0  #: 429s seen, for reports and benchmarks
        self.accepted = 0  #: other answers seen

    @property
    def rate(self) -> float | None:
        """The current pace in requests per second (None: not limited so far)."""
        return self._rate

    def reserve(self) -> float:
        """Book the next start slot; returns the seconds to wait before sending."""
        with self._lock:
            now = self._clock()
            if self._rate is None:
                return 0.0
            start = max(now, self._next_start)
            self._next_start = start + 1.0 / self._rate
            return start - now

    def on_accepted(self) -> None:
        """The server answered with something other than 429: grow the pace a little."""
        with self._lock:
            now = self._clock()
            self.accepted += 1
            self._since_cut += 1
            if self._first_answer is None:
                self._first_answer = now
            self._accepted.append(now)
            self._trim(now)
            # Grow only while the pace is what holds us back (not latency).
            if self._rate is not None and self._rate < 1.2 * len(self._accepted) / WINDOW:
                self._rate += INCREASE * self._learned / self._rate

    def on_throttled(self) -> None:
        """The server answered 429: cut the pace to what it was accepting (once a window)."""
        with self._lock:
            now = self._clock()
            self.throttled += 1
            self._trim(now)
            if self._first_answer is None:
                self._first_answer = now
            if now - self._last_cut < WINDOW:
                return
            if self._rate is None and now - self._first_answer < WINDOW:
                return  # not a full second of history to learn from yet: retries back off
            measured = len(self._accepted) / WINDOW
            if self._last_cut > float("-inf"):
                measured = self._since_cut / (now - self._last_cut)
            self._last_cut = now
            self._since_cut = 0
            floor = DECREASE * self._rate if self._rate is not None else 0.0
            self._learned = max(MIN_RATE, measured)
            self._rate = max(MIN_RATE, BACKOFF * measured, floor)
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
