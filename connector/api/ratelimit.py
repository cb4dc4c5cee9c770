"""One request pacer per API key, learned from 429s, shared by every request that uses the key
and remembered between processes.

The API does not publish its rate limits, so we learn them. A server's limit is, in effect, a
token bucket: a 429 means the bucket is empty, so what the server accepted between two 429s
is its refill rate. The pacer aims just under that rate (``BACKOFF`` of it): a 429 is
expensive (its Retry-After stalls that request a second or more), so it sits below the limit
rather than oscillating around it.

* **Unknown limit**: requests start unpaced (only the concurrency limit bounds them). The
  first 429 paces them at ``BACKOFF`` of the rate accepted over the last second: a guess,
  which counts the bucket's burst allowance too (with almost no answers to guess from, the
  retries back off while a ``WINDOW`` is measured instead). The pace then climbs quickly
  (``GUESS_INCREASE``) until the next 429 measures the limit.
* **A 429 to a request booked at the current pace** cuts it again: to ``BACKOFF`` of the
  rate accepted since the bucket was last empty, when that spans a ``WINDOW`` (the refill
  rate, exactly), else by ``SHORT_CUT`` (at most halving the pace before a measurement).
  Requests booked before a cut were paced too fast: those still waiting book again, and
  their 429s are not judged twice (`Slot.epoch`).
* **Without 429s** the pace creeps up by ``INCREASE`` of the measured rate a second while it
  is what holds requests back, so a raised limit is found, slowly: each probe costs a 429.
* **A known limit** (learned by an earlier process: `RateMemory`) starts the pace at
  ``BURST`` x it, which spends the burst allowance that built up while no request was made;
  the first 429 then means the bucket is empty, and the pace drops to ``BACKOFF`` of the
  known rate, trusted. A starting pace that binds ``RAISED_AFTER`` seconds without a 429
  doubles (the limit was raised, or lifted), and what was known is no longer trusted.

So a key's limit costs a few 429s the first time a process meets it (the requests in flight
when the bucket runs dry), and about one a run after (where the burst allowance runs out).

The pacer is thread-safe and loop-agnostic: `reserve()` books a start slot under a lock and
says how long to wait; the async client awaits it. `limiter_for` keeps one per key and
server in the process, every table a run reads sharing it, with the memory of the user's
cache folder (``CONNECTOR_CACHE_DIR``; empty: no memory).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "BACKOFF",
    "BURST",
    "DECREASE",
    "ENV_CACHE_DIR",
    "GUESS_INCREASE",
    "INCREASE",
    "MIN_RATE",
    "RAISED_AFTER",
    "SHORT_CUT",
    "WINDOW",
    "Learned",
    "RateLimiter",
    "RateMemory",
    "Slot",
    "limiter_for",
]

#: After a 429, the pace is this share of the rate the server was accepting.
BACKOFF = 0.97
#: A cut never takes the pace below this share of the pace it was at.
DECREASE = 0.5
#: A 429 met at the new pace sooner than a WINDOW after the last measurement: pace x this.
SHORT_CUT = 0.9
#: Share of the learned rate added back per second without a 429.
INCREASE = 0.003
#: Share of the guessed rate added per second while paced on a guess (not yet measured).
GUESS_INCREASE = 0.1
#: Answers in the last WINDOW needed for a first guess; with fewer, a WINDOW is measured.
GUESS_ANSWERS = 5
#: With a known limit, a process starts at this many times it (spending the burst allowance).
BURST = 1.5
#: Seconds a known limit's starting pace may bind without a 429 before it doubles (the limit
#: was raised, or lifted); spending a burst allowance of a second's requests takes 1 / (BURST
#: - 1) of them.
RAISED_AFTER = 4.0
#: The pace never drops below this many requests per second.
MIN_RATE = 1.0
#: Seconds: the shortest span a rate is measured over; the history kept for a first guess.
WINDOW = 1.0
#: Where limits learned are remembered between processes (empty: nowhere).
ENV_CACHE_DIR = "CONNECTOR_CACHE_DIR"
#: A remembered limit older than this many seconds is forgotten.
MEMORY_SECONDS = 7 * 24 * 3600.0


class Slot(NamedTuple):
    """A request's start, booked: `wait` seconds from now, at the pace of `epoch`."""

    wait: float
    epoch: int


@dataclass(frozen=True)
class Learned:
    """A server's rate for one key (requests a second): `measured` between two 429s, or a
    first guess (which counts the burst allowance too)."""

    rate: float
    measured: bool


class RateLimiter:
    """Paces request starts for one key; learns the rate from 429s (see the module doc).

    `rate`: a starting pace (requests a second), else unpaced until the first 429.
    `known`: the server's rate as learned before (`RateMemory`); `learned` is called with
    each rate learned (guessed or measured), to remember it.
    """

    def __init__(
        self,
        rate: float | None = None,
        *,
        known: Learned | None = None,
        learned: Callable[[Learned], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tell = learned
        #: Requests per second; None: unpaced.
        self._rate = rate if rate is not None else BURST * known.rate if known else None
        #: The server's refill rate, as measured, guessed or known from before; 0: not yet.
        self._learned = known.rate if known else 0.0
        #: Whether `_learned` was measured: then the pace creeps up, else it climbs.
        self._sure = known.measured if known else False
        self._next_start = 0.0
        #: How many times the pace was cut.
        self._epoch = 0
        #: Start of the current measurement (at a 429: the bucket was empty), and the
        #: requests accepted since.
        self._measure_from: float | None = None
        self._measured = 0
        self._measured_pace = 0.0  # the pace it began at
        #: With a known limit and no 429 yet: since when the pace binds, and when it was
        #: last doubled (then the limit is more than was known).
        self._binding_since: float | None = None
        self._grown_at: float | None = None
        self._recent: deque[float] = deque()  # accepted answers of the last WINDOW
        self.throttled = 0  #: 429s seen, for reports and benchmarks
        self.accepted = 0  #: other answers seen

    @property
    def rate(self) -> float | None:
        """The current pace in requests per second (None: not limited so far)."""
        return self._rate

    @property
    def learned(self) -> float | None:
        """The server's rate as learned: measured, guessed, or known from an earlier process."""
        return self._learned or None

    def reserve(self) -> Slot:
        """Book the next start slot: the seconds to wait before sending, and the epoch."""
        with self._lock:
            now = self._clock()
            if self._rate is None:
                return Slot(0.0, self._epoch)
            start = max(now, self._next_start)
            self._next_start = start + 1.0 / self._rate
            return Slot(start - now, self._epoch)

    def on_accepted(self) -> None:
        """The server answered with something other than 429: grow the pace a little."""
        with self._lock:
            now = self._clock()
            self.accepted += 1
            self._measured += 1
            self._recent.append(now)
            self._trim(now)
            # Grow only while the pace is what holds requests back (not latency).
            if self._rate is None or self._rate >= 1.2 * len(self._recent) / WINDOW:
                self._binding_since = None
                return
            if not self._epoch:  # a known limit, no 429 yet: was it raised?
                if self._binding_since is None:
                    self._binding_since = now
                elif now - self._binding_since >= RAISED_AFTER:
                    self._binding_since = self._grown_at = now
                    self._rate *= 2.0
            elif self._sure:
                self._rate += INCREASE * self._learned / self._rate
            else:  # paced on a guess: find the limit, which the next 429 measures
                self._rate += GUESS_INCREASE * self._learned / self._rate

    @property
    def epoch(self) -> int:
        """How many times the pace was cut: a request booked in an earlier epoch and still
        waiting was booked too fast (book it again), and its 429 is not judged again."""
        return self._epoch

    def on_throttled(self, epoch: int | None = None) -> None:
        """The server answered 429 to a request booked in `epoch` (None: the current one):
        cut the pace, unless the request was booked before the last cut."""
        told: Learned | None = None
        with self._lock:
            now = self._clock()
            self.throttled += 1
            self._trim(now)
            if epoch is not None and epoch < self._epoch:
                return  # booked at the old pace: already cut for
            starts = self._measure_from is None
            if self._measure_from is None:  # the bucket is empty now: measure from here
                self._measure_from, self._measured = now, 0
            span = now - self._measure_from
            if span >= WINDOW:  # from one empty bucket to the next: the refill rate
                self._learned = max(MIN_RATE, self._measured / span)
                self._sure = True
                floor = DECREASE * self._rate if self._rate is not None else 0.0
                self._rate = max(MIN_RATE, BACKOFF * self._learned, floor)
                self._measure_from, self._measured = now, 0
                starts = True
                told = Learned(self._learned, measured=True)
            elif not self._epoch and self._learned and self._grown_at is None:
                self._rate = max(MIN_RATE, BACKOFF * self._learned)  # as known: no need to measure
            elif not self._learned or not self._epoch:
                # Nothing known, or more than was: a first guess, measured at the next 429.
                if len(self._recent) < GUESS_ANSWERS:
                    return  # nothing to guess from: the retries back off while a WINDOW passes
                self._learned = len(self._recent) / WINDOW
                self._sure = False
                self._rate = max(MIN_RATE, BACKOFF * self._learned)
                told = Learned(self._learned, measured=False)
            else:  # still too fast, too soon to measure (at most halving the pace a WINDOW)
                pace = self._rate or self._learned
                self._rate = max(MIN_RATE, SHORT_CUT * pace, DECREASE * self._measured_pace)
            if starts:
                self._measured_pace = self._rate
            self._epoch += 1
            self._next_start = now + 1.0 / self._rate  # requests booked before book again
        if told is not None and self._tell is not None:
            self._tell(told)

    def _trim(self, now: float) -> None:
        while self._recent and self._recent[0] < now - WINDOW:
            self._recent.popleft()


class RateMemory:
    """The rates learned per key and server, kept in one small JSON file between processes.

    Entries are keyed by a SHA-256 of the base URL and the key, never the key itself; an
    unreadable file is as good as none, and a write that fails is dropped (it is a cache).
    """

    FILE = "rate-limits.json"

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / self.FILE if folder is not None else None
        self._lock = threading.Lock()

    @classmethod
    def default(cls) -> RateMemory:
        """In ``CONNECTOR_CACHE_DIR`` if set (empty: no memory), else the user's cache folder."""
        configured = os.environ.get(ENV_CACHE_DIR)
        if configured is not None:
            return cls(Path(configured).expanduser() if configured.strip() else None)
        base = os.environ.get("XDG_CACHE_HOME", "").strip()
        if not base:
            try:
                base = str(Path.home() / ".cache")
            except (RuntimeError, KeyError):  # no home to find: nothing is remembered
                return cls(None)
        return cls(Path(base) / "connector")

    @staticmethod
    def entry(base_url: str, api_key: str) -> str:
        return hashlib.sha256(f"{base_url}\0{api_key}".encode()).hexdigest()

    def recall(self, entry: str) -> Learned | None:
        """The rate remembered for `entry`, unless none is or it is too old."""
        found = self._read().get(entry)
        if not isinstance(found, dict):
            return None
        rate, at, measured = found.get("rate"), found.get("at"), found.get("measured")
        if not isinstance(rate, int | float) or not isinstance(at, int | float):
            return None
        if not (math.isfinite(rate) and rate >= MIN_RATE) or time.time() - at > MEMORY_SECONDS:
            return None
        return Learned(float(rate), measured is True)

    def remember(self, entry: str, learned: Learned) -> None:
        """Keep `learned` for `entry`, unless it is a guess and a measurement is kept
        (written aside, then renamed: readers see a whole file)."""
        if self.path is None:
            return
        with self._lock, contextlib.suppress(OSError):
            entries = self._read()
            kept = self.recall(entry)
            if kept is not None and kept.measured and not learned.measured:
                return
            entries[entry] = {
                "rate": round(learned.rate, 3), "measured": learned.measured, "at": round(time.time()),
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temp = self.path.with_name(f".{self.FILE}.{os.getpid()}.{threading.get_ident()}")
            temp.write_text(json.dumps(entries, indent=1), encoding="utf-8")
            os.replace(temp, self.path)

    def _read(self) -> dict[str, object]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


_shared: dict[str, RateLimiter] = {}
_shared_lock = threading.Lock()


def limiter_for(base_url: str, api_key: str, memory: RateMemory | None = None) -> RateLimiter:
    """The process-wide limiter of one key on one server, starting from the rate `memory`
    (default `RateMemory.default()`) holds for them and telling it each rate learned."""
    entry = RateMemory.entry(base_url, api_key)
    with _shared_lock:
        limiter = _shared.get(entry)
        if limiter is None:
            memory = memory or RateMemory.default()
            limiter = RateLimiter(
                known=memory.recall(entry), learned=lambda found: memory.remember(entry, found)
            )
            _shared[entry] = limiter
        return limiter
