"""One request pacer per API key, shared by every request that uses the key and remembered
between processes. It paces to the limit a server publishes, else to the limit it learns from
429s, and it keeps measuring: what it knows is where it starts, never a ceiling.

**A published limit** (`connector.api.quota`: the IETF ``RateLimit`` fields, their older
drafts, ``X-RateLimit-*``) is paced to directly: starts at ``PUBLISHED_SHARE`` of its rate,
the requests the answer says remain spent at once (less those already on their way and
``RESERVE``), and none while the server says none remain, until its reset. A limit whose
window is not said (``X-RateLimit-*``) is taken as a second's: what the server says remains
still rules, so a quota of an hour is spent, then waited for. A server that refuses (429)
``STRIKES`` times what it publishes is paced by learning instead.

**A learned limit.** A server's limit is, in effect, a token bucket: a 429 means the bucket is
empty, so what it accepted between two 429s at least ``WINDOW`` apart is its refill rate,
exactly, whatever the pace in between; where the pace fell behind it, the bucket (about a
second's requests, ``BURST_SECONDS``) overflowed, and what it could not keep counts too
(`_refill`). So the pacer goes through phases, as TCP BBR does (startup, cruise, periodic
probes of the bandwidth) and as Netflix's Gradient2 keeps its limit probing:

* **free**: nothing known; requests go unpaced (only the concurrency limit bounds them).
* **search**: after the first 429 the pace starts at a guess that cannot be above the limit
  of a bucket of ``BURST_SECONDS`` (what was accepted lately over that span plus a second),
  holds it for a ``WINDOW`` (a 429 sooner could measure nothing), then doubles every
  ``SEARCH_DOUBLING`` seconds while it is what holds requests back. What it leaves unspent
  stays in the bucket, so the next 429 comes once the pace passes the limit and has spent
  it, and measures the limit. (With too few answers to guess from, ``GUESS_ANSWERS``,
  requests stay free while the retries back off, and the next 429 measures.)
* **cruise**: at ``BACKOFF`` of the measured limit, after skipping ``DRAIN`` starts so the
  bucket holds a little against uneven arrivals. A 429 too soon to measure cuts by
  ``SHORT_CUT`` (never below ``DECREASE`` of the pace the measurement began at) and searches
  again; a 429 that measures sets the limit.
* **probe**: after ``PROBE_AFTER`` seconds of cruising while the pace binds, the pace climbs
  past the limit (doubling every ``PROBE_DOUBLING`` seconds) until a 429 measures the limit
  again: a raised limit is found, a lowered one too. A probe that finds what was known
  doubles the time to the next (up to ``PROBE_MAX``).
* **start** (a later process): the limit remembered (`RateMemory`) starts the pace above it,
  by ``EXCESS`` requests a round trip (as answers take now), which spends what the bucket
  saved while no request was made; the first 429 means the bucket is empty: cruise. If more
  was accepted by then than the limit allows (its rate over the time plus a full bucket, x
  ``RAISED``), the limit was raised, or lifted: it is forgotten and requests go free. A
  remembered first guess is a start too, probed after ``PROBE_SOON`` seconds of cruise, as is
  a limit older than ``TRUSTED`` seconds (a guess given more than it allows by its first 429
  searches on from there; given ``LIFTED`` times as much before one, it is forgotten).

Measured and published limits are remembered as limits; a first guess as a guess, which never
replaces a limit. Requests booked before a cut were paced too fast: those still waiting book
again, and their 429s are not judged twice (`Slot.epoch`).

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

from connector.api.quota import Quota

__all__ = [
    "BACKOFF",
    "BURST",
    "BURST_LEAST",
    "BURST_SECONDS",
    "DECREASE",
    "ENV_CACHE_DIR",
    "EXCESS",
    "LIFTED",
    "MIN_RATE",
    "PROBE_AFTER",
    "PROBE_MAX",
    "PROBE_SOON",
    "PUBLISHED_SHARE",
    "RAISED",
    "RESERVE",
    "ROUND_TRIPS",
    "SEARCH_DOUBLING",
    "SHORT_CUT",
    "STRIKES",
    "TRUSTED",
    "WINDOW",
    "Learned",
    "RateLimiter",
    "RateMemory",
    "Slot",
    "limiter_for",
]

#: Cruising pace: this share of the measured limit (the bucket keeps the rest against jitter).
BACKOFF = 0.97
#: Starts skipped after a 429 that measured: the bucket saves them against uneven arrivals.
DRAIN = 2
#: A 429 too soon to measure: pace x this...
SHORT_CUT = 0.9
#: ...but never below this share of the pace the measurement began at.
DECREASE = 0.5
#: Seconds: the shortest span between two 429s that measures a limit.
WINDOW = 1.0
#: Seconds of requests a server's bucket is taken to hold beyond its rate.
BURST_SECONDS = 1.0
#: Seconds the guessed pace takes to double while searching for the limit; and while probing.
SEARCH_DOUBLING = 0.5
PROBE_DOUBLING = 1.0
#: Seconds of cruising (while the pace binds) before the limit is probed, at first; each probe
#: that finds the same limit doubles it, up to PROBE_MAX.
PROBE_AFTER = 10.0
PROBE_MAX = 120.0
#: A remembered limit older than TRUSTED seconds is probed after PROBE_SOON seconds of cruise.
TRUSTED = 3600.0
PROBE_SOON = 2.0
#: A probe's limit within this share of the one known is the same limit.
SAME = 0.05
#: With a known limit, a process starts above it, spending what the bucket saved: by EXCESS
#: requests a round trip (so about that many are on their way when the bucket runs dry, to be
#: refused), at least BURST_LEAST and at most BURST requests a second (BURST before a round
#: trip is timed). Fast enough that a limit since lifted shows within a fraction of a second.
#: The round trip: the median of the last ROUND_TRIPS (under load, many times the quickest).
EXCESS = 0.5
ROUND_TRIPS = 8
BURST_LEAST = 20.0
BURST = 100.0
#: Accepted past the known limit's allowance x this: the limit was raised, or lifted. Past a
#: remembered guess's x LIFTED: no limit is near it (searching up from it took seconds).
RAISED = 1.1
LIFTED = 3.0
#: Pace of a published limit: this share of its rate.
PUBLISHED_SHARE = 0.99
#: Requests of a published remaining left unspent (against requests the server sees first).
RESERVE = 2
#: 429s to requests booked at a published limit before it is no longer believed.
STRIKES = 3
#: The pace never drops below this many requests per second.
MIN_RATE = 1.0
#: Seconds of answers a first guess is made from, and how many it needs (with fewer, the
#: retries back off while a WINDOW is measured instead).
GUESS_SPAN = 2.0
GUESS_ANSWERS = 5
#: Where limits learned are remembered between processes (empty: nowhere).
ENV_CACHE_DIR = "CONNECTOR_CACHE_DIR"
#: A remembered limit older than this many seconds is forgotten.
MEMORY_SECONDS = 7 * 24 * 3600.0

_FREE, _START, _SEARCH, _CRUISE, _PROBE = "free", "start", "search", "cruise", "probe"


class Slot(NamedTuple):
    """A request's start, booked: `wait` seconds from now, at the pace of `epoch`; `seq`
    numbers the bookings (what a published count of remaining requests has not seen)."""

    wait: float
    epoch: int
    seq: int = 0


@dataclass(frozen=True)
class Learned:
    """A server's rate for one key (requests a second): `measured` between two 429s or
    published by the server (a limit), else a first guess (no more than a bucket of a second
    could give: a start, to be probed). `age`: seconds since it was learned."""

    rate: float
    measured: bool
    age: float = 0.0


class RateLimiter:
    """Paces request starts for one key (see the module doc).

    `rate`: a starting pace (requests a second), else unpaced until something is known.
    `known`: the server's rate as learned before (`RateMemory`); `learned` is called with
    each limit measured or published and each first guess, to remember it, and with None
    when a limit known was lifted, to forget it.
    """

    def __init__(
        self,
        rate: float | None = None,
        *,
        known: Learned | None = None,
        learned: Callable[[Learned | None], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tell = learned
        self._told = 0.0  # the last limit told (not told again unless it moves)
        #: The server's refill rate as measured, published or remembered; 0: not known.
        self._limit = known.rate if known is not None else 0.0
        #: Whether `_limit` is a guess (remembered from a first 429): probed soon, and a start
        #: given more than it allows searches on from what it was given.
        self._guessed = known is not None and not known.measured
        self._rate: float | None = rate
        self._phase = _CRUISE if rate is not None else _FREE
        if rate is None and self._limit:
            self._phase, self._rate = _START, self._limit + BURST
        self._probe_every = PROBE_AFTER
        if known is not None and (self._guessed or known.age > TRUSTED):
            self._probe_every = PROBE_SOON
        self._next_start = 0.0
        self._epoch = 0  #: how many times the pace was cut
        self._seq = 0  #: bookings made
        self._open: dict[int, float] = {}  #: bookings not answered yet: when each starts
        #: The last round trips (a start to its answer): their median is what answers take
        #: now, not a new connection's first (many times a kept one's) nor a rare quick one.
        self._trips: deque[float] = deque(maxlen=ROUND_TRIPS)
        self._began: float | None = None  # the first booking
        self._bound_at = -math.inf  # the last booking that had to wait: the pace binds
        self._grown_at = 0.0  # when a rising pace last grew
        self._cruise_binding = 0.0  # seconds the cruising pace has bound since the last probe
        #: The last 429 (the bucket was empty then) and the requests accepted since: the
        #: refill rate, once the next 429 comes at least WINDOW later.
        self._mark: float | None = None
        self._since = 0
        self._log: list[tuple[float, int]] = []  # (when, `_since`) at each accepted answer
        #: The pace cuts too soon to measure may at most halve (DECREASE) before one does.
        self._cut_from = rate or 0.0
        self._recent: deque[float] = deque()  # accepted answers of the last GUESS_SPAN
        #: Published: the quota the server says (what its bucket holds at most; None: it says
        #: nothing), and 429s despite it.
        self._published: float | None = None
        self._anchored = 0  # the booking whose answer the published remaining was last read from
        self._strikes = 0
        self._forget = False  # the limit known was lifted: the memory is to forget it
        self.throttled = 0  #: 429s seen, for reports and benchmarks
        self.accepted = 0  #: other answers seen

    @property
    def rate(self) -> float | None:
        """The current pace in requests per second (None: not limited so far)."""
        return self._rate

    @property
    def learned(self) -> float | None:
        """The server's limit as known: measured, published, or remembered (None: unknown)."""
        return self._limit or None

    @property
    def sustained(self) -> float | None:
        """Requests a second the key may keep up, as known now: `PUBLISHED_SHARE` of a
        published limit, `BACKOFF` of a learned or remembered one (None: unknown). What a
        budget split between processes starts from (`connector.spark`)."""
        if not self._limit:
            return None
        return (PUBLISHED_SHARE if self._published else BACKOFF) * self._limit

    @property
    def epoch(self) -> int:
        """How many times the pace was cut: a request booked in an earlier epoch and still
        waiting was booked too fast (book it again), and its 429 is not judged again."""
        return self._epoch

    def reserve(self) -> Slot:
        """Book the next start slot: the seconds to wait before sending, and the epoch."""
        with self._lock:
            now = self._clock()
            self._seq += 1
            if len(self._open) >= 1024:  # bookings given up (a cut re-booked them) or never answered
                del self._open[next(iter(self._open))]
            if self._began is None:
                self._began = self._grown_at = now
            start = now
            if self._rate is not None:
                # a published limit lends what the server said remains; a learned one nothing
                credit = max(1.0, self._published - RESERVE) if self._published else 1.0
                start = max(now - (credit - 1.0) / self._rate, self._next_start)
                self._next_start = start + 1.0 / self._rate
                if start > now:
                    self._bound_at = now
            self._open[self._seq] = start
            return Slot(max(0.0, start - now), self._epoch, self._seq)

    def on_accepted(self, slot: Slot | None = None, quota: Quota | None = None) -> None:
        """The server answered `slot`'s request with something other than 429 (`quota`:
        what the answer says of the limit)."""
        told: Learned | None = None
        with self._lock:
            now = self._clock()
            self.accepted += 1
            self._since += 1
            if self._mark is not None:
                self._log.append((now, self._since))
                if len(self._log) > 4096:  # a long measurement: every other answer will do
                    self._log = self._log[::2]
            self._recent.append(now)
            while self._recent and self._recent[0] < now - GUESS_SPAN:
                self._recent.popleft()
            self._answered(slot, now)
            if quota is not None and self._strikes < STRIKES:
                told = self._follow(quota, slot, now)
            if self._published is None:
                told = self._grow(now) or told
        self._remember(told)

    def on_throttled(self, slot: Slot | None = None, quota: Quota | None = None) -> None:
        """The server answered 429 to `slot`'s request (None: one booked at the current pace):
        measure the limit if this 429 can, else cut the pace, unless the request was booked
        before the last cut."""
        told: Learned | None = None
        with self._lock:
            now = self._clock()
            self.throttled += 1
            self._answered(slot, now)
            judged = slot is None or slot.epoch >= self._epoch
            self._strikes += judged and self._published is not None
            if self._published is not None and self._strikes >= STRIKES:
                # refused despite what it says: learn, as from a first 429
                self._published, self._phase, self._rate, self._limit = None, _FREE, None, 0.0
            if self._published is not None:
                told = self._follow(quota, slot, now) if quota is not None else None
                self._epoch += 1  # those waiting book again, after the hold the server asks
                self._next_start = max(self._next_start, now + 1.0 / (self._rate or MIN_RATE))
            else:
                told = self._throttled(now, judged)
        self._remember(told)

    def _answered(self, slot: Slot | None, now: float) -> None:
        """`slot`'s request is no longer on its way; how long it took is a round trip."""
        start = self._open.pop(slot.seq, None) if slot is not None else None
        if start is not None and now >= start:
            self._trips.append(now - start)

    # -- learning ---------------------------------------------------------------------------

    def _throttled(self, now: float, judged: bool) -> Learned | None:
        """A 429 while learning: measure, or cut, by phase (see the module doc)."""
        mark, since = self._mark, self._since
        if mark is None or now - mark >= WINDOW:  # else measure on from the earlier 429
            self._mark, self._since, log = now, 0, self._log
            self._log = []
            if mark is not None:
                return self._measured(max(MIN_RATE, _refill(mark, now, log, since)), now)
        if not judged:
            return None
        elapsed = now - (self._began or now)
        if self._phase == _FREE and len(self._recent) < GUESS_ANSWERS:
            return None  # nothing to guess from: the retries back off while a WINDOW passes
        told: Learned | None = None
        # no more than a bucket of a second could have given lately: not above its limit
        guess = max(MIN_RATE, len(self._recent) / (min(GUESS_SPAN, elapsed) + BURST_SECONDS))
        if self._phase == _FREE:
            self._search(guess, now)
            told = Learned(guess, measured=False)  # where the next process starts, to probe
        elif self._phase == _SEARCH and mark is None:  # a search that began with no 429 met one
            self._search(min(SHORT_CUT * (self._rate or guess), guess), now)
        elif self._phase == _START and self.accepted > RAISED * self._limit * (elapsed + BURST_SECONDS):
            self._search(self.accepted / (elapsed + BURST_SECONDS), now)  # more than it could give
        elif self._phase == _START:
            self._cruise(now)
        else:  # too soon to measure: still too fast
            pace = self._rate or self._limit or MIN_RATE
            self._set(_SEARCH, max(MIN_RATE, SHORT_CUT * pace, DECREASE * self._cut_from), now)
        self._cut_epoch(now, skip=DRAIN)  # the bucket is empty: let it save a little
        return told

    def _measured(self, limit: float, now: float) -> Learned:
        """A 429 measured the limit: cruise just under it, probing again later (sooner if
        the limit moved)."""
        if self._phase == _PROBE and abs(limit - self._limit) <= SAME * self._limit:
            self._probe_every = min(PROBE_MAX, 2 * self._probe_every)
        else:
            self._probe_every = PROBE_AFTER
        self._limit, self._guessed = limit, False
        self._cruise(now)
        self._cut_epoch(now, skip=DRAIN)
        return Learned(limit, measured=True)

    def _search(self, rate: float, now: float) -> None:
        self._set(_SEARCH, rate, now)
        self._cut_from = rate

    def _cruise(self, now: float) -> None:
        self._set(_CRUISE, max(MIN_RATE, BACKOFF * self._limit), now)
        self._cut_from = self._rate or MIN_RATE
        self._cruise_binding = 0.0

    def _set(self, phase: str, rate: float, now: float) -> None:
        self._phase, self._rate, self._grown_at, self._bound_at = phase, rate, now, now

    def _cut_epoch(self, now: float, skip: int = 0) -> None:
        """The pace changed: waiting bookings book again; the next `skip` slots stay empty."""
        self._epoch += 1
        self._next_start = now + (1 + skip) / (self._rate or MIN_RATE)

    def _grow(self, now: float) -> Learned | None:
        """An accepted answer while learning: a starting pace checks it was not given more
        than it knows; a rising one rises while it binds; a cruising one probes when due."""
        since, self._grown_at = now - self._grown_at, now
        if self._rate is None:
            return None
        if self._phase == _START:
            return self._starting(now)
        if now - self._bound_at > max(0.05, 2.0 / self._rate):  # the pace does not bind
            if now - self._bound_at > BURST_SECONDS:
                self._mark = None  # the bucket refilled while unused: a measurement would be short
            return None
        if self._phase in (_SEARCH, _PROBE):
            # a search holds its guess for a WINDOW after a 429 (a 429 sooner would measure
            # nothing), and only time past the hold doubles it: answers may resume just as the
            # hold ends (every request on its way at the first 429 refused, waiting out its
            # Retry-After)
            if self._phase == _SEARCH and self._mark is not None:
                since = min(since, now - self._mark - WINDOW)
            if since > 0:
                doubling = SEARCH_DOUBLING if self._phase == _SEARCH else PROBE_DOUBLING
                self._rate *= 2.0 ** (since / doubling)
        elif self._phase == _CRUISE and self._limit:
            self._cruise_binding += since
            if self._cruise_binding >= self._probe_every:
                self._phase = _PROBE
                self._rate = self._limit
        return None

    def _starting(self, now: float) -> Learned | None:
        """A process starting from a known limit: EXCESS requests a round trip above it, until
        the bucket runs dry (a guess given more by then searches on from what was given), or
        more is accepted than the limit could give (x LIFTED for a guess): the limit was raised
        or lifted (forget it: go free)."""
        if self._trips and (trip := sorted(self._trips)[len(self._trips) // 2]) > 0:
            self._rate = self._limit + max(BURST_LEAST, min(BURST, EXCESS / trip))
        elapsed = now - (self._began or now)
        allowed = self._limit * (elapsed + BURST_SECONDS)
        if self.accepted <= (LIFTED if self._guessed else RAISED) * allowed:
            return None  # a guess given a little more starts on: its 429 searches from there
        self._limit, self._phase, self._rate, self._mark = 0.0, _FREE, None, None
        self._epoch += 1
        self._forget = True
        return None

    # -- published --------------------------------------------------------------------------

    def _follow(self, quota: Quota, slot: Slot | None, now: float) -> Learned | None:
        """Pace to what the server publishes: its rate, and what it says remains."""
        # a window not said (X-RateLimit-*) is taken as a second's: what remains still rules
        rate = quota.rate or (float(quota.limit) if quota.limit else None)
        if not rate:
            return None
        first = self._published is None
        self._published = max(1.0, float(quota.limit or rate))
        self._limit = rate
        pace = max(MIN_RATE, PUBLISHED_SHARE * rate)
        self._phase, self._rate = _CRUISE, pace
        seq = self._seq if slot is None else slot.seq
        if quota.remaining is not None and seq >= self._anchored:  # an older answer is stale
            self._anchored = seq
            ahead = sum(1 for booked in self._open if booked > seq)
            may = quota.remaining - ahead - RESERVE  # starts that may go now
            self._next_start = now - (may - 1.0) / pace if may >= 1 else now + (1.0 - may) / pace
            if quota.remaining == 0 and quota.reset:
                self._next_start = max(self._next_start, now + quota.reset)
        if first:
            self._epoch += 1  # waiting bookings were made without it: book again
        if abs(rate - self._told) > 0.01 * rate:
            self._told = rate
            return Learned(rate, measured=True)
        return None

    def _remember(self, told: Learned | None) -> None:
        """Tell the memory what was learned, or (`_forget`) that what it knew is gone."""
        if self._tell is None:
            return
        if self._forget:
            self._forget = False
            self._tell(None)
        if told is not None:
            self._tell(told)


def _refill(mark: float, now: float, log: list[tuple[float, int]], accepted: int) -> float:
    """The refill rate of a bucket of `BURST_SECONDS` of it, empty at `mark` and at `now`,
    that let through the `accepted` requests `log` counts (when, how many since `mark`).

    That is what was accepted over the time, unless the requests fell more than a bucket
    behind the rate meanwhile: what the full bucket could not keep was never accepted, and
    the rate is the one that also refilled it (found by bisection: what a rate leaves in
    the bucket grows with the rate)."""

    def left(rate: float) -> float:
        held, tokens, last, taken = rate * BURST_SECONDS, 0.0, mark, 0
        for at, count in log:
            tokens = min(held, tokens + rate * (at - last)) - (count - taken)
            last, taken = at, count
        return min(held, tokens + rate * (now - last)) - (accepted - taken)

    low = accepted / (now - mark)
    if left(low) >= 0.0:  # nothing overflowed
        return low
    high = 2.0 * low
    while left(high) < 0.0:
        low, high = high, 2.0 * high
    while high - low > 1e-4 * low:
        middle = (low + high) / 2.0
        low, high = (middle, high) if left(middle) < 0.0 else (low, middle)
    return high


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
        age = max(0.0, time.time() - at)
        if not (math.isfinite(rate) and rate >= MIN_RATE) or age > MEMORY_SECONDS:
            return None
        return Learned(float(rate), measured is True, age)

    def remember(self, entry: str, learned: Learned | None) -> None:
        """Keep `learned` for `entry`, unless it is a guess and a limit is kept; None: forget
        what is kept (written aside, then renamed: readers see a whole file)."""
        if self.path is None:
            return
        with self._lock, contextlib.suppress(OSError):
            entries = self._read()
            kept = self.recall(entry)
            if learned is None:
                if entries.pop(entry, None) is None:
                    return
            elif kept is not None and kept.measured and not learned.measured:
                return
            else:
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
