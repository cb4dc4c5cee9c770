"""The pacer: paces to the limit a server publishes, else learns it from 429s and keeps
measuring it; shared per key and remembered between processes (`connector.api.ratelimit`).

Its logic runs on a clock the test moves, against the reference server's own token bucket
(`connector.server.ratelimit`, on the same clock): `drive` sends requests one after another,
each at the start the pacer books, and answers each as the bucket (and the header forms it
publishes) would; `drive_in_flight` keeps several on their way at once. Then a few reads
over real HTTP, counted by the server."""

from __future__ import annotations

import heapq
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from bench._procs import CountingServer, start
from connector.api import Client, RateLimiter, ratelimit
from connector.api.quota import Quota, published
from connector.api.ratelimit import (
    BACKOFF,
    BURST,
    DECREASE,
    PROBE_AFTER,
    PUBLISHED_SHARE,
    RESERVE,
    SHORT_CUT,
    STRIKES,
    TRUSTED,
    Learned,
    RateMemory,
    Slot,
    limiter_for,
)
from connector.extract import Extraction
from connector.server.ratelimit import RateLimiter as Bucket

EPOCH = 1_767_225_600.0  # the Unix time the clock's 0 is, for X-RateLimit-Reset


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Server:
    """The reference server's bucket of `rate` a second on `clock`, answering requests as
    the server does: 429 when empty, and its limit published in `forms`."""

    def __init__(self, clock: Clock, rate: float, forms: tuple[str, ...] = (), saved: float = 1.0) -> None:
        self.clock = clock
        self.bucket = Bucket(rate, clock, wall=lambda: EPOCH + clock.now)
        self.forms = forms
        self.statuses: Counter[int] = Counter()
        if saved < 1.0:  # another client spent it `saved` seconds ago
            while self.bucket.wait("k") == 0:
                pass
            clock.now += saved

    def answer(self) -> tuple[int, httpx.Headers]:
        status = 429 if self.bucket.wait("k") > 0 else 200
        self.statuses[status] += 1
        return status, httpx.Headers(self.bucket.published("k", self.forms))


def drive(limiter: RateLimiter, server: Server, requests: int, gap: float = 0.002,
          headers: Callable[[], dict[str, str]] | None = None, until: float | None = None) -> float:
    """`requests` requests (or as many as `until` seconds from now take) one after another,
    each sent at the start `limiter` books (booked again if a cut came while it waited),
    answered `gap` seconds later; returns the seconds they took. `headers` replaces what the
    server publishes."""
    clock = server.clock
    began = clock.now
    for _ in range(requests) if until is None else iter(lambda: clock.now < began + until, False):
        while True:
            slot = limiter.reserve()
            clock.now += slot.wait
            if slot.wait <= 0 or limiter.epoch == slot.epoch:
                break
        status, sent = server.answer()
        clock.now += gap
        quota = published(httpx.Headers(headers()) if headers else sent, now=EPOCH + clock.now)
        if status == 429:
            limiter.on_throttled(slot, quota)
        else:
            limiter.on_accepted(slot, quota)
    return clock.now - began


def drive_in_flight(limiter: RateLimiter, server: Server, requests: int, in_flight: int,
                    latency: Callable[[int], float]) -> float:
    """`requests` requests sent by `in_flight` workers at once, each at the start `limiter`
    books (booked again if a cut came while it waited), judged by the bucket when sent and
    answered `latency(n)` seconds later (n: the answer's number); returns the seconds taken."""
    clock = server.clock
    began, sent = clock.now, itertools.count()
    events: list[tuple[float, int, int, Slot]] = []  # (when, order, status: 0 to send, slot)
    order = itertools.count()

    def book() -> None:
        slot = limiter.reserve()
        heapq.heappush(events, (clock.now + slot.wait, next(order), 0, slot))

    for _ in range(in_flight):
        book()
    while events:
        clock.now, _, status, slot = heapq.heappop(events)
        if status == 0:  # a start: send it, unless a cut came while it waited
            if slot.wait > 0 and limiter.epoch != slot.epoch:
                book()
                continue
            status, _ = server.answer()
            heapq.heappush(events, (clock.now + latency(next(sent)), next(order), status, slot))
            continue
        (limiter.on_throttled if status == 429 else limiter.on_accepted)(slot)
        if sum(server.statuses.values()) < requests:
            book()
    return clock.now - began


def pace(server: Server, rate: float, requests: int, limiter: RateLimiter) -> float:
    """The share of `rate` that `requests` more requests are accepted at (no 429 among them
    counted as accepted)."""
    before = server.statuses[200]
    seconds = drive(limiter, server, requests)
    return (server.statuses[200] - before) / seconds / rate


# -- learning from 429s ------------------------------------------------------------------------


def test_requests_are_not_paced_until_something_is_known() -> None:
    limiter = RateLimiter()
    assert [limiter.reserve().wait for _ in range(100)] == [0.0] * 100


def test_a_first_process_learns_the_limit_with_a_429_to_meet_it_and_one_to_measure_it() -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, learned=told.append)
    server = Server(clock, 40)
    drive(limiter, server, 400)
    assert server.statuses[429] <= 3
    assert limiter.learned == pytest.approx(40, rel=0.03)
    guess, measured = told
    assert not guess.measured and guess.rate <= 40  # the first guess, to start the next from
    assert measured.measured and measured.rate == limiter.learned
    assert pace(server, 40, 500, limiter) >= 0.95  # cruising just under it...
    assert server.statuses[429] <= 3  # ...without another 429


@pytest.mark.parametrize("saved", [1.0, 0.5, 0.2])
def test_the_first_guess_is_never_above_the_limit_of_a_bucket_of_a_second(saved: float) -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    server = Server(clock, 40, saved=saved)
    while not server.statuses[429]:
        drive(limiter, server, 1)
    assert limiter.rate is not None and limiter.rate <= 40
    assert limiter.learned is None  # a guess: not a limit, and not remembered


def test_a_first_429_with_nothing_to_guess_from_measures_instead() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    server = Server(clock, 40, saved=0.0)  # another client just emptied it
    drive(limiter, server, 1)
    assert server.statuses[429] == 1 and limiter.rate is None  # not paced: its retry backs off
    clock.now += 1.0  # Retry-After
    drive(limiter, server, 200)
    assert limiter.learned == pytest.approx(40, rel=0.03)
    assert server.statuses[429] <= 3


@pytest.mark.parametrize(("limit", "saved"), [(50, 0.1), (50, 0.2), (20, 0.3)])
def test_a_search_that_fell_a_bucket_behind_the_limit_still_measures_it(limit: int, saved: float) -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, learned=told.append)
    server = Server(clock, limit, saved=saved)  # little saved: a first guess far below the limit
    drive(limiter, server, 0, until=6.0)
    guess, measured = told[:2]
    assert guess.rate < 0.35 * limit  # the search climbed from it for over a second: overflowed
    assert measured.rate == pytest.approx(limit, rel=0.03)  # measured at once all the same
    assert server.statuses[429] <= 3


def test_a_search_that_heard_nothing_while_it_held_its_guess_resumes_from_the_guess() -> None:
    """Every request on its way when the bucket ran dry was refused, and each waits out the
    server's Retry-After (1 s): nothing is answered while the guess is held. Only time past
    the hold doubles the guess: when answers resume, the pace is still near the guess, not
    four times it."""
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    server = Server(clock, 50)
    while not server.statuses[429]:
        drive(limiter, server, 1)
    guess = limiter.rate
    assert guess is not None and guess <= 50
    for _ in range(3):  # sent before the 429 came: refused as well
        assert server.answer()[0] == 429
        limiter.on_throttled(Slot(0.0, limiter.epoch - 1))
    clock.now += 1.0  # their Retry-After: nothing sent, nothing answered
    retries = [limiter.reserve() for _ in range(3)]  # all at once, at the pace
    began = clock.now
    for slot in retries:
        clock.now = began + slot.wait
        assert server.answer()[0] == 200
        limiter.on_accepted(slot)
    assert limiter.rate is not None and limiter.rate <= 1.2 * guess
    drive(limiter, server, 0, until=4.0)
    assert limiter.learned == pytest.approx(50, rel=0.03)
    assert server.statuses[429] == 5  # the first, the three on their way, one to measure


def test_the_limit_is_what_was_accepted_between_two_429s_a_window_apart() -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, learned=told.append)
    limiter.reserve()
    limiter.on_throttled()  # the bucket is empty

    def accepted(requests: int, seconds: float) -> None:
        for _ in range(requests):
            limiter.reserve()
            clock.now += seconds / requests
            limiter.on_accepted()

    accepted(30, 0.5)
    limiter.on_throttled()  # too soon to measure: a guess, the measurement goes on
    assert [t.measured for t in told] == [False] and limiter.learned is None
    accepted(30, 0.6)
    limiter.on_throttled()
    assert limiter.learned == pytest.approx(60 / 1.1)
    assert told[-1] == Learned(pytest.approx(60 / 1.1), measured=True)
    assert limiter.rate == pytest.approx(BACKOFF * 60 / 1.1)


def test_429s_of_requests_booked_before_a_cut_do_not_cut_again() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=40.0, clock=clock)
    slots = [limiter.reserve() for _ in range(8)]
    limiter.on_throttled(slots[0])
    pace_after = limiter.rate
    for slot in slots[1:]:  # already in flight at the old pace
        clock.now += 0.01
        limiter.on_throttled(slot)
    assert limiter.rate == pace_after and limiter.epoch == 1
    assert limiter.throttled == 8


def test_cuts_too_soon_to_measure_never_more_than_halve_the_pace() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=40.0, clock=clock)
    limiter.on_throttled()
    first = limiter.rate
    assert first == pytest.approx(SHORT_CUT * 40)
    for _ in range(30):  # a 429 to every request (random refusals, not a bucket)
        clock.now += 0.02
        limiter.on_throttled()
    assert limiter.rate == pytest.approx(DECREASE * 40)


def test_a_cut_books_again_the_requests_waiting_at_the_old_pace() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=100.0, clock=clock)
    slots = [limiter.reserve() for _ in range(5)]
    limiter.on_throttled(slots[0])
    assert all(slot.epoch < limiter.epoch for slot in slots)  # they book again
    again = limiter.reserve()
    assert again.epoch == limiter.epoch
    assert again.wait >= 1 / limiter.rate  # the bucket is empty: no start at once


# -- what a later process knows ----------------------------------------------------------------


def test_a_remembered_limit_spends_the_bucket_then_cruises_under_it() -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, known=Learned(50.0, measured=True), learned=told.append)
    assert limiter.rate == 50 + BURST
    server = Server(clock, 50)
    drive(limiter, server, 100)
    assert server.statuses[429] == 1  # where the bucket ran dry
    assert limiter.learned == 50 and limiter.rate == pytest.approx(BACKOFF * 50)
    assert pace(server, 50, 500, limiter) >= 0.95 and server.statuses[429] == 1
    assert told == []  # nothing new


def test_a_remembered_limit_is_spent_at_a_pace_its_slower_answers_keep_few_on_their_way() -> None:
    """Under load answers slow, and the quickest round trip seen is no measure of them: the
    requests on their way when the bucket runs dry are refused, so the start's excess is
    reckoned from the round trips answers take now, not the quickest."""
    clock = Clock()
    limiter = RateLimiter(clock=clock, known=Learned(25.0, measured=True))
    server = Server(clock, 25)
    # a new connection's first answer, then mostly 30 ms, one in eight quick
    drive_in_flight(limiter, server, 300, in_flight=4,
                    latency=lambda n: 0.15 if n == 0 else 0.005 if n % 8 == 1 else 0.03)
    assert server.statuses[429] <= 2, server.statuses  # where it ran dry, and about EXCESS more
    assert limiter.learned == 25


def test_a_limit_since_lifted_is_forgotten_at_once() -> None:
    clock = Clock()
    told: list[Learned | None] = []
    limiter = RateLimiter(clock=clock, known=Learned(5.0, measured=True), learned=told.append)
    server = Server(clock, 1e6)  # no limit to speak of
    seconds = drive(limiter, server, 300, gap=0.002)
    assert limiter.rate is None and limiter.learned is None  # free again
    assert seconds < 300 * 0.002 + 0.1  # paced for a tenth of a second at most, not at 5 a second
    assert told == [None]  # and the memory forgets it


def test_a_guess_remembered_from_a_limit_since_lifted_is_forgotten_within_a_second() -> None:
    """Searching up from the guess (doubling from a few requests a second) took seconds."""
    clock = Clock()
    told: list[Learned | None] = []
    limiter = RateLimiter(clock=clock, known=Learned(5.0, measured=False), learned=told.append)
    server = Server(clock, 1e6)
    seconds = drive(limiter, server, 1000, gap=0.002)
    assert limiter.rate is None and limiter.learned is None  # free again
    assert seconds < 1000 * 0.002 + 0.5
    assert told == [None] and server.statuses[429] == 0


@pytest.mark.parametrize("raised", [60.0, 200.0])
def test_a_raised_limit_is_found(raised: float) -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, known=Learned(40.0, measured=True), learned=told.append)
    server = Server(clock, raised)
    drive(limiter, server, int(raised * 15))
    assert limiter.learned == pytest.approx(raised, rel=0.05)
    assert told[-1].measured and told[-1].rate == pytest.approx(raised, rel=0.05)
    assert server.statuses[429] <= 6


def test_a_lowered_limit_is_found() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock, known=Learned(50.0, measured=True))
    server = Server(clock, 20)
    drive(limiter, server, 300)
    assert limiter.learned == pytest.approx(20, rel=0.05)
    assert server.statuses[429] <= 12  # cut after cut until a WINDOW measures it
    assert pace(server, 20, 300, limiter) >= 0.95


def test_a_cruising_pace_is_probed_and_less_often_when_the_limit_holds() -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, known=Learned(50.0, measured=True), learned=told.append)
    server = Server(clock, 50)
    drive(limiter, server, 0, until=PROBE_AFTER + 5)
    assert server.statuses[429] == 2  # where the bucket ran dry, and the first probe
    assert told == [Learned(pytest.approx(50, rel=0.03), measured=True)]
    drive(limiter, server, 0, until=6 * PROBE_AFTER + 5)  # probes after 2x, then 4x as long
    assert server.statuses[429] == 4
    assert pace(server, 50, 500, limiter) >= 0.95


@pytest.mark.parametrize("known", [Learned(50.0, measured=True, age=TRUSTED + 1), Learned(50.0, measured=False)])
def test_an_old_memory_or_a_remembered_guess_is_probed_soon(known: Learned) -> None:
    clock = Clock()
    told: list[Learned | None] = []
    limiter = RateLimiter(clock=clock, known=known, learned=told.append)
    server = Server(clock, 55)  # a little more: the start shows nothing, a probe does
    drive(limiter, server, 55 * 5)
    assert limiter.learned == pytest.approx(55, rel=0.03)
    assert told == [Learned(pytest.approx(55, rel=0.03), measured=True)]
    assert server.statuses[429] <= 3


@pytest.mark.parametrize("guess", [40.0, 20.0])
def test_a_remembered_guess_given_more_than_it_allows_searches_on_from_there(guess: float) -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock, known=Learned(guess, measured=False))
    server = Server(clock, 50)
    drive(limiter, server, 0, until=8.0)
    assert limiter.learned == pytest.approx(50, rel=0.03)
    assert server.statuses[429] <= 3


# -- a published limit ---------------------------------------------------------------------


@pytest.mark.parametrize("form", ["ietf", "draft", "x"])
def test_a_published_limit_is_paced_to_with_no_429(form: str) -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, learned=told.append)
    server = Server(clock, 50, forms=(form,))
    drive(limiter, server, 100)  # the bucket's saving, spent
    assert limiter.learned == pytest.approx(50, rel=0.03)
    assert told and told[-1].measured
    assert pace(server, 50, 1000, limiter) >= 0.98
    assert server.statuses[429] == 0


@pytest.mark.parametrize("form", ["ietf", "draft", "x"])
def test_a_published_limit_is_paced_to_by_a_later_process_too(form: str) -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock, known=Learned(50.0, measured=True))
    server = Server(clock, 50, forms=(form,), saved=0.0)  # another client just emptied it
    assert pace(server, 50, 500, limiter) >= 0.97
    assert server.statuses[429] <= 1  # the first request, sent before any answer said so


def test_what_remains_is_spent_at_once_less_what_is_on_its_way() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    slots = [limiter.reserve() for _ in range(10)]
    limiter.on_accepted(slots[0], Quota(50, 1.0, remaining=12, reset=1.0))
    # 12 remain as the server answered the first; 9 more are on their way; RESERVE kept
    allowed = 12 - 9 - RESERVE
    waits = [limiter.reserve().wait for _ in range(allowed + 2)]
    assert waits[:allowed] == [0.0] * allowed
    assert waits[allowed] == pytest.approx(1 / (PUBLISHED_SHARE * 50))
    assert waits[allowed + 1] == pytest.approx(2 / (PUBLISHED_SHARE * 50))


def test_nothing_remaining_holds_every_start_until_the_reset() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    slot = limiter.reserve()
    limiter.on_accepted(slot, Quota(100, 60.0, remaining=0, reset=30.0))  # a window of a minute
    assert limiter.reserve().wait == pytest.approx(30.0)


def test_an_answer_older_than_the_one_counted_from_does_not_move_the_count() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    early, late = limiter.reserve(), limiter.reserve()
    limiter.on_accepted(late, Quota(50, 1.0, remaining=0, reset=1.0))
    limiter.on_accepted(early, Quota(50, 1.0, remaining=40, reset=1.0))  # served before `late`
    assert limiter.reserve().wait == pytest.approx(1.0)


def test_a_server_refusing_what_it_publishes_is_paced_by_learning() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    server = Server(clock, 20)
    claims = {"RateLimit-Policy": '"default";q=100;w=1', "RateLimit": '"default";r=50;t=1'}
    drive(limiter, server, 400, headers=lambda: claims)
    assert server.statuses[429] <= STRIKES + 4
    assert limiter.learned == pytest.approx(20, rel=0.05)


@pytest.mark.parametrize(
    "junk",
    [{"RateLimit": "garbage"}, {"RateLimit": '"default";r=-5'}, {"X-RateLimit-Remaining": "many"}],
)
def test_malformed_headers_leave_the_pacer_learning(junk: dict[str, str]) -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    server = Server(clock, 40)
    drive(limiter, server, 400, headers=lambda: junk)
    assert server.statuses[429] <= 3
    assert limiter.learned == pytest.approx(40, rel=0.03)


def test_the_limiter_is_safe_across_threads() -> None:
    limiter = RateLimiter(rate=1000.0)
    starts: list[float] = []
    lock = threading.Lock()

    def book() -> None:
        for _ in range(50):
            wait = limiter.reserve().wait
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


# -- the memory between processes -------------------------------------------------------------


def test_a_rate_is_remembered_per_server_and_key_never_holding_the_key(tmp_path: Path) -> None:
    memory = RateMemory(tmp_path)
    one, two = RateMemory.entry("http://x/v1", "key-one-secret"), RateMemory.entry("http://y/v1", "key-one-secret")
    memory.remember(one, Learned(42.5, measured=True))
    recalled = RateMemory(tmp_path).recall(one)
    assert recalled is not None and (recalled.rate, recalled.measured) == (42.5, True)
    assert 0 <= recalled.age < 60
    assert RateMemory(tmp_path).recall(two) is None
    text = (tmp_path / RateMemory.FILE).read_text(encoding="utf-8")
    assert "key-one-secret" not in text and "http" not in text
    assert json.loads(text)[one]["rate"] == 42.5


def test_a_guess_never_replaces_a_limit_and_a_lifted_limit_is_forgotten(tmp_path: Path) -> None:
    memory = RateMemory(tmp_path)
    entry, other = RateMemory.entry("http://x/v1", "k"), RateMemory.entry("http://x/v1", "other")

    def kept() -> tuple[float, bool] | None:
        found = memory.recall(entry)
        return None if found is None else (found.rate, found.measured)

    memory.remember(entry, Learned(20.0, measured=False))
    assert kept() == (20.0, False)
    memory.remember(entry, Learned(50.0, measured=True))
    memory.remember(entry, Learned(80.0, measured=False))  # a guess says nothing of a limit
    assert kept() == (50.0, True)
    memory.remember(entry, Learned(30.0, measured=True))
    assert kept() == (30.0, True)
    memory.remember(other, Learned(9.0, measured=True))
    memory.remember(entry, None)  # lifted
    assert kept() is None and memory.recall(other) is not None


def test_an_old_or_unreadable_memory_is_none(tmp_path: Path) -> None:
    memory = RateMemory(tmp_path)
    entry = RateMemory.entry("http://x/v1", "k")
    old = time.time() - ratelimit.MEMORY_SECONDS - 60
    (tmp_path / RateMemory.FILE).write_text(json.dumps({entry: {"rate": 5, "measured": True, "at": old}}))
    assert memory.recall(entry) is None
    for junk in ("not json", "[1, 2]", json.dumps({entry: {"rate": "fast", "at": time.time()}})):
        (tmp_path / RateMemory.FILE).write_text(junk)
        assert memory.recall(entry) is None
    memory.remember(entry, Learned(7.0, measured=True))  # a bad file is replaced, not kept
    found = memory.recall(entry)
    assert found is not None and (found.rate, found.measured) == (7.0, True)


def test_the_memory_lives_where_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONNECTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert RateMemory.default().path == tmp_path / "cache" / RateMemory.FILE
    monkeypatch.setenv("CONNECTOR_CACHE_DIR", "")
    off = RateMemory.default()
    assert off.path is None
    off.remember("e", Learned(5.0, measured=True))
    assert off.recall("e") is None
    monkeypatch.delenv("CONNECTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert RateMemory.default().path == tmp_path / "xdg" / "connector" / RateMemory.FILE
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert RateMemory.default().path == tmp_path / "home" / ".cache" / "connector" / RateMemory.FILE

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", no_home)
    assert RateMemory.default().path is None  # nowhere to keep it: nothing is kept


def test_one_limiter_per_key_and_server_starting_from_the_memory(tmp_path: Path) -> None:
    memory = RateMemory(tmp_path)
    memory.remember(RateMemory.entry("http://m/v1", "key-mem"), Learned(20.0, measured=True))
    a = limiter_for("http://x/v1", "key-one", memory)
    assert limiter_for("http://x/v1", "key-one") is a
    assert limiter_for("http://x/v1", "key-two", memory) is not a
    assert limiter_for("http://y/v1", "key-one", memory) is not a
    assert "key-one" not in repr(vars(a))
    with Client("http://x/v1", "key-one") as one, Client("http://x/v1", "key-one") as two:
        assert one.limiter is two.limiter is a
    known = limiter_for("http://m/v1", "key-mem", memory)
    assert known.learned == 20.0 and known.rate == 20.0 + BURST


# -- against the reference server -------------------------------------------------------------

LIMIT = 20  #: requests a second per key
ROWS = 800  #: read in pages of 20, overlapping by a row: 43 pages, a bucket of 20 to start
REQUESTS = 1 + 43  #: the schema and the pages, each once


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[Callable[..., CountingServer]]:
    servers: list[CountingServer] = []

    def make(**options: object) -> CountingServer:
        directory = tmp_path / f"server{len(servers)}"
        directory.mkdir()
        servers.append(start(directory, rate_limit=LIMIT, **options))
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


def read_all(server: CountingServer, limiter: RateLimiter, *, spent: bool = False, rows: int = ROWS) -> dict[str, int]:
    """Every row of a table of `rows`, in pages of 20 (`spent`: right after another client
    of the key emptied its bucket); the answers the server gave, by status."""
    table_id = server.create_table({"name": "T", "columns": [{"name": "N", "type": "number"}]})
    server.insert_rows(table_id, [{"N": i} for i in range(rows)])
    with server.client() as http:
        while spent and http.get("/tables").status_code != 429:
            pass
    server.take_counts()
    with Client(server.base_url, server.api_key, limiter=limiter) as client:
        table = client.get_table(table_id)
        read = sum(b.num_rows for b in Extraction(client, table, page_size=20, concurrency=4))
    assert read == rows
    return server.take_counts()


@pytest.mark.needs_server  # through the module's counting server
@pytest.mark.parametrize("form", ["ietf", "draft", "x"])
def test_a_server_publishing_its_limit_is_read_at_it_without_a_429(
    counting: Callable[..., CountingServer], form: str
) -> None:
    limiter = RateLimiter()
    counts = read_all(counting(rate_headers=form), limiter)
    assert counts.get("429", 0) == 0
    assert sum(counts.values()) == REQUESTS
    assert limiter.learned == pytest.approx(LIMIT, rel=0.1)


@pytest.mark.needs_server  # through the module's counting server
def test_a_server_publishing_nothing_is_learned_from_few_429s(counting: Callable[..., CountingServer]) -> None:
    limiter = RateLimiter()
    # the limit met at once; 2,400 rows (127 pages, 6 s at the limit) to measure it in
    counts = read_all(counting(rate_headers="none"), limiter, spent=True, rows=2_400)
    refused = counts.get("429", 0)
    # met at once, perhaps with nothing to guess from: the 4 requests on their way, again
    # when their retries measure the limit a second later, and that 429 itself
    assert 1 <= refused <= 2 * 4 + 1
    assert sum(counts.values()) == 1 + 127 + refused  # each refused request sent again, once
    assert limiter.learned == pytest.approx(LIMIT, rel=0.1)
