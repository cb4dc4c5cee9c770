"""The pacer: learns a server's limit from 429s, runs just under it, shared per key and
remembered between processes (`connector.api.ratelimit`)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import pytest

from connector.api import Client, RateLimiter, ratelimit
from connector.api.ratelimit import (
    BACKOFF,
    BURST,
    DECREASE,
    INCREASE,
    RAISED_AFTER,
    SHORT_CUT,
    Learned,
    RateMemory,
    limiter_for,
)
from connector.extract import Extraction
from tests.fixtures.server import ServerFactory


class Clock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def answered(limiter: RateLimiter, clock: Clock, per_second: float, seconds: float) -> None:
    """`per_second` accepted answers, evenly spread over `seconds`."""
    for _ in range(round(per_second * seconds)):
        clock.now += 1 / per_second
        limiter.on_accepted()


def test_requests_are_not_paced_until_the_first_429() -> None:
    limiter = RateLimiter()
    assert [limiter.reserve().wait for _ in range(100)] == [0.0] * 100


def test_a_first_429_with_nothing_to_go_on_measures_instead_of_guessing() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    limiter.on_accepted()
    limiter.on_throttled(0)
    assert limiter.rate is None and limiter.epoch == 0  # not paced: retries back off
    answered(limiter, clock, 30, 1.0)  # the bucket empty at both ends: its refill rate
    limiter.on_throttled(0)
    assert limiter.learned == pytest.approx(30, rel=0.05)
    assert limiter.rate == pytest.approx(BACKOFF * 30, rel=0.05)


def test_a_first_429_paces_at_a_guess_which_the_next_measures() -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, learned=told.append)
    answered(limiter, clock, 80, 0.5)  # the burst allowance and the refill: 40 in the last second
    limiter.on_throttled(0)
    assert limiter.rate == pytest.approx(BACKOFF * 40)
    assert told == [Learned(40.0, measured=False)]
    waits = [limiter.reserve().wait for _ in range(10)]
    assert waits == sorted(waits)  # each later request starts later
    assert waits[-1] - waits[0] == pytest.approx(9 / limiter.rate, rel=0.05)
    answered(limiter, clock, 30, 2.0)  # the server's own rate, from one empty bucket to the next
    limiter.on_throttled(limiter.epoch)
    assert told[-1].measured and told[-1].rate == pytest.approx(30, rel=0.05)
    assert limiter.rate == pytest.approx(BACKOFF * 30, rel=0.05)


def test_429s_of_requests_booked_before_a_cut_do_not_cut_again() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    answered(limiter, clock, 40, 1.0)
    before = limiter.epoch
    limiter.on_throttled(before)
    pace = limiter.rate
    for _ in range(7):  # already in flight at the old pace
        clock.now += 0.01
        limiter.on_throttled(before)
    assert limiter.rate == pace and limiter.epoch == before + 1
    assert limiter.throttled == 8


def test_a_429_at_the_new_pace_soon_after_a_cut_cuts_by_a_step() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    answered(limiter, clock, 40, 1.0)
    limiter.on_throttled(limiter.epoch)
    pace = limiter.rate
    assert pace is not None
    clock.now += 0.1
    limiter.on_throttled(limiter.epoch)
    assert limiter.rate == pytest.approx(SHORT_CUT * pace)


def test_steps_never_more_than_halve_the_pace_before_a_measurement() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    answered(limiter, clock, 40, 1.0)
    limiter.on_throttled(limiter.epoch)
    pace = limiter.rate
    assert pace is not None
    for _ in range(30):  # a 429 to every request (random refusals, not a bucket)
        clock.now += 0.02
        limiter.on_throttled(limiter.epoch)
    assert limiter.rate == pytest.approx(DECREASE * pace)


def test_a_cut_booked_again_the_requests_waiting_at_the_old_pace() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=100.0, clock=clock)
    answered(limiter, clock, 100, 0.5)
    slots = [limiter.reserve() for _ in range(5)]
    limiter.on_throttled(slots[0].epoch)
    assert all(slot.epoch < limiter.epoch for slot in slots)  # they book again
    again = limiter.reserve()
    assert again.epoch == limiter.epoch
    assert again.wait == pytest.approx(1 / limiter.rate)  # one slot at the new pace, from now


def test_the_pace_creeps_back_up_without_429s() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    answered(limiter, clock, 40, 1.0)
    limiter.on_throttled(limiter.epoch)
    answered(limiter, clock, 40, 2.0)
    limiter.on_throttled(limiter.epoch)  # measured: 40
    start = limiter.rate
    assert start is not None
    answered(limiter, clock, start, 10.0)  # the pace is what holds requests back
    assert limiter.rate == pytest.approx(start + 10 * INCREASE * 40, rel=0.05)


def test_a_known_limit_spends_the_burst_then_paces_under_it() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock, known=Learned(50.0, measured=True))
    assert limiter.rate == BURST * 50
    answered(limiter, clock, 90, 0.5)
    limiter.on_throttled(limiter.epoch)  # the bucket is empty: what was known holds
    assert limiter.rate == pytest.approx(BACKOFF * 50)


def test_a_known_limit_that_binds_without_a_429_was_raised() -> None:
    clock = Clock()
    told: list[Learned] = []
    limiter = RateLimiter(clock=clock, known=Learned(10.0, measured=True), learned=told.append)
    answered(limiter, clock, BURST * 10, RAISED_AFTER - 0.1)  # the burst would have ended
    assert limiter.rate == pytest.approx(BURST * 10)
    answered(limiter, clock, BURST * 10, 1.5)  # paced at the known burst pace: no 429
    assert limiter.rate == pytest.approx(2 * BURST * 10)
    answered(limiter, clock, 2 * BURST * 10, 1.0)
    limiter.on_throttled(limiter.epoch)  # more than was known: not trusted, guessed anew
    [guess] = told
    assert not guess.measured and guess.rate == pytest.approx(2 * BURST * 10, abs=1)
    assert limiter.rate == pytest.approx(BACKOFF * guess.rate)


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
    assert RateMemory(tmp_path).recall(one) == Learned(42.5, measured=True)
    assert RateMemory(tmp_path).recall(two) is None
    text = (tmp_path / RateMemory.FILE).read_text(encoding="utf-8")
    assert "key-one-secret" not in text and "http" not in text
    assert json.loads(text)[one]["rate"] == 42.5


def test_a_guess_never_replaces_a_measurement(tmp_path: Path) -> None:
    memory = RateMemory(tmp_path)
    entry = RateMemory.entry("http://x/v1", "k")
    memory.remember(entry, Learned(50.0, measured=True))
    memory.remember(entry, Learned(80.0, measured=False))
    assert memory.recall(entry) == Learned(50.0, measured=True)
    memory.remember(entry, Learned(30.0, measured=True))
    assert memory.recall(entry) == Learned(30.0, measured=True)


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
    assert memory.recall(entry) == Learned(7.0, measured=True)


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
    assert known.learned == 20.0 and known.rate == BURST * 20.0


# -- against the reference server -------------------------------------------------------------


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
