"""How many requests may be in flight to one server: learned while a run goes, capped.

A fixed level is wrong everywhere but one place: 4 requests in flight leave most of a server
100 ms away idle, and 32 on a server already busy only queue. So the level adapts, as TCP's
window does, from what each answer says:

* **slow start**: from ``INITIAL``, the level doubles every round (a round is as many
  answers as the level: about one round trip) in which it was used in full, the answers
  were clean and the round's quickest answer stayed near the quickest of the round before
  (within ``START_TOLERANCE`` of it, plus ``SLACK``), up to ``START_CEILING``: the server
  keeps up, so more in flight is more throughput. The quickest answer, not the mean, as
  TCP's HyStart++ judges it: the answers of a round that opens new connections are slow
  whatever the server's load, and a queue at the server slows every answer, the quickest
  too;
* **congestion avoidance**: past ``START_CEILING``, once the quickest answer slows, or after
  a cut, it grows by one per such round while the round's requests spent less than
  ``QUEUED`` request's worth of time in a queue, as TCP Vegas reckons its backlog (the
  level times 1 - fastest / the round's quickest answer: a queue delays every answer, the
  quickest too, where jitter leaves a quick one). Requests waiting at the server, or for
  our own busy loop to read their answers, add latency and no throughput: at +20 ms our
  reader read ~750 pages/s at 20 in flight and 380 at 23, where the mean answer was still
  inside the cut's tolerance;
* **backing off**: a round with a 5xx or a transport failure multiplies the level by
  ``BACKOFF``; a round whose latency inflated past ``TOLERANCE`` x the fastest (requests
  queue at the server or in our own loop) scales it by how far: ``TOLERANCE`` x fastest
  / mean, at most halving it, and not below ``INITIAL``: a loaded machine still overlaps
  a few requests, which is always faster than one at a time. Past the point where a
  server keeps up, more in flight does not just queue: a server on a few cores gets
  *slower* in all (measured on ours: 16 in flight at 20 ms read 630 pages/s, 32 read 310),
  so the level must come back quickly, not by a tenth a round. Answers to requests sent
  before a cut are not judged: they tell of the old level's queue, and would cut it twice.

The cap (`maximum`: ``--max-concurrency``, ``source.max_concurrency``) bounds it. Pacing
of request *starts* after 429s is the rate limiter's job (`connector.api.ratelimit`); the
two compose: the pacer spaces requests out, this bounds how many are outstanding. A 429 says
nothing about how many requests the server takes at once, so the client does not report it
here (cut for 429s, a paced read fell to one request in flight, stalled by each Retry-After).

One `ConcurrencyLimit` belongs to one client and its event loop; every table a run reads
in parallel and every request of a push share it.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "INITIAL",
    "MAX_CONCURRENCY",
    "QUEUED",
    "START_CEILING",
    "ConcurrencyLimit",
    "check_max_concurrency",
]

#: The cap unless one is set: enough for a server 100 ms away, gentle on one that is near.
DEFAULT_MAX_CONCURRENCY = 32
#: The highest cap a setting may ask for (the client's connection pool holds 64).
MAX_CONCURRENCY = 64
#: Requests in flight at the start, and the floor of latency-driven cuts.
INITIAL = 4
#: A round's mean latency counts as inflated past TOLERANCE x the fastest, plus SLACK
#: seconds; slow start ends when a round's quickest answer is past START_TOLERANCE x the
#: quickest of the round before, plus SLACK.
TOLERANCE = 1.25
START_TOLERANCE = 1.1
SLACK = 0.002
#: Slow start doubles the level up to here, then grows it by one a round: a doubling past it
#: lands on 32 at once, where a server on a few cores reads slower than at 16.
START_CEILING = 16
#: The level after a round with an error answer (5xx, transport failure).
BACKOFF = 0.7
#: The deepest cut a round of inflated latency makes (its level times this, at least).
EASE = 0.5
#: Past slow start, the level grows only while a round queued less than this (`_queued`).
QUEUED = 1.0


def check_max_concurrency(value: int, where: str = "max_concurrency") -> int:
    """A cap a setting may hold: 1 to `MAX_CONCURRENCY` (`ValueError` naming `where`)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise ValueError(f"{where} must be an integer from 1 to {MAX_CONCURRENCY}, got {value!r}")
    return value


class ConcurrencyLimit:
    """Bounds the requests in flight; learns the bound from answers (see the module doc)."""

    def __init__(
        self,
        maximum: int = DEFAULT_MAX_CONCURRENCY,
        *,
        initial: int = INITIAL,
    ) -> None:
        self.maximum = check_max_concurrency(maximum)
        self._floor = min(initial, self.maximum)
        self._level = float(self._floor)
        self._slow_start = True
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._fastest = float("inf")
        #: The quickest answer of the round before: slow start's yardstick.
        self._last_quickest = float("inf")
        # the current round: answers, their summed latency and the quickest, errors, and
        # whether it was full
        self._answers = 0
        self._latency = 0.0
        self._quickest = float("inf")
        self._errors = 0
        self._full = False
        #: Answers still due to requests sent before the last cut: they tell of the old
        #: level (the queue it built), so they are not judged, or the level would be cut
        #: again for the same excess.
        self._stale = 0
        #: The highest level reached, for summaries and benchmarks.
        self.peak = int(self._level)

    @property
    def level(self) -> int:
        """Requests allowed in flight now."""
        return max(1, int(self._level))

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def acquire(self) -> None:
        """Waits for a free slot (first come, first served); `release` gives it back."""
        if self._in_flight >= self.level or self._waiters:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._in_flight -= 1  # granted as we were cancelled: hand it on
                    self._wake()
                else:
                    self._waiters.remove(waiter)
                raise
        else:
            self._in_flight += 1
        if self._in_flight >= self.level:
            self._full = True

    def release(self, latency: float | None, *, ok: bool = True) -> None:
        """One request is done after `latency` seconds; `ok` False for a 5xx or a transport
        failure. None: it got no answer to learn from (cancelled, or a 429)."""
        self._in_flight -= 1
        if latency is None or self._stale:
            self._stale = max(0, self._stale - 1)
            self._wake()
            return
        if ok:
            self._fastest = min(self._fastest, latency)
            self._quickest = min(self._quickest, latency)
            self._latency += latency
        else:
            self._errors += 1
        self._answers += 1
        if self._answers >= self.level:
            self._end_round()
        self._wake()

    def _end_round(self) -> None:
        clean = self._answers - self._errors
        mean = self._latency / clean if clean else 0.0
        if self._errors:
            self._cut(max(1.0, self._level * BACKOFF))
        elif mean > self._fastest * TOLERANCE + SLACK:
            gradient = max(EASE, (self._fastest * TOLERANCE + SLACK) / mean)
            self._cut(max(float(self._floor), min(self._level, self._level * gradient)))
        elif self._full and (self._slow_start or self._queued() < QUEUED):
            # the level held us back and the server kept up: offer more
            if self._quickest > self._last_quickest * START_TOLERANCE + SLACK:
                self._slow_start = False
            grown = self._level + 1
            if self._slow_start:
                grown = min(self._level * 2, max(float(START_CEILING), grown))
                self._slow_start = grown < START_CEILING
            self._level = min(float(self.maximum), grown)
        self.peak = max(self.peak, self.level)
        self._last_quickest = self._quickest
        self._answers, self._latency, self._quickest, self._errors = 0, 0.0, float("inf"), 0
        self._full = self._in_flight >= self.level

    def _queued(self) -> float:
        """This round's backlog in requests, as TCP Vegas reckons it: every answer, even the
        quickest, waited ``quickest - fastest`` at least; a level of requests each that late
        is the level times ``1 - fastest / quickest`` requests' worth of round trips."""
        return self._level * (1 - self._fastest / self._quickest)

    def _cut(self, level: float) -> None:
        self._slow_start = False
        self._level = level
        self._stale = self._in_flight

    def _wake(self) -> None:
        while self._waiters and self._in_flight < self.level:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_flight += 1
                waiter.set_result(None)
