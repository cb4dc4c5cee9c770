"""A stop and the calls it cannot interrupt (`connector.process`), in this process: a real
SIGTERM, raised in the main thread by `stop_signals`, while another thread is inside a call
marked `uninterruptible` (as a Delta write or an Iceberg commit is)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from connector.process import Terminated, holding, stop_signals, uninterruptible, unwaited


def sigterm_here() -> None:
    """SIGTERM to this process: within `stop_signals`, it raises `Terminated` here."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    pytest.fail("SIGTERM did not raise")


def test_a_stop_does_not_wait_for_a_call_it_cannot_interrupt_and_starts_none() -> None:
    inside, release = threading.Event(), threading.Event()

    def commit() -> None:
        with uninterruptible():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=commit)
    worker.start()
    try:
        assert inside.wait(10)
        before = unwaited()  # an error that ends a run lets a commit under way finish
        with stop_signals():
            try:
                sigterm_here()
            except Terminated:
                during = unwaited()
                with pytest.raises(Terminated), uninterruptible():
                    pytest.fail("a call that would commit started after the stop")
    finally:
        release.set()
        worker.join(10)

    assert (before, during) == (0, 1)
    assert unwaited() == 0  # the stop is over with its block


def test_a_thread_waiting_for_a_lock_held_through_such_a_call_stops_with_the_run() -> None:
    """A table waiting for a one-writer destination (an Iceberg catalog, SQLite) while
    another table's commit holds it: the commit is not waited for, so neither is the wait."""
    lock = threading.Lock()
    inside, release = threading.Event(), threading.Event()
    ended: list[BaseException | None] = []

    def commit() -> None:
        with holding(lock), uninterruptible():
            inside.set()
            release.wait(10)

    def wait_for_the_lock() -> None:
        try:
            with holding(lock):
                ended.append(None)
        except BaseException as exc:
            ended.append(exc)

    committer, waiter = threading.Thread(target=commit), threading.Thread(target=wait_for_the_lock)
    committer.start()
    try:
        assert inside.wait(10)
        waiter.start()
        with stop_signals():
            try:
                sigterm_here()
            except Terminated:
                stopped = time.monotonic()
                waiter.join(5)
                took = time.monotonic() - stopped
    finally:
        release.set()
        committer.join(10)
        waiter.join(10)

    assert len(ended) == 1 and isinstance(ended[0], Terminated), ended
    assert took < 1, f"the waiting thread took {took:.1f} s to see the stop"
    assert not lock.locked()
