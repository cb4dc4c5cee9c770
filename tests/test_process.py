"""A stop and the calls it cannot interrupt (`connector.process`), in this process: a real
SIGTERM, raised in the main thread by `stop_signals`, while another thread is inside a call
marked `uninterruptible` (as a Delta write is)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from connector.process import Terminated, stop_signals, uninterruptible, unwaited


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
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
                pytest.fail("SIGTERM did not raise")
            except Terminated:
                during = unwaited()
                with pytest.raises(Terminated), uninterruptible():
                    pytest.fail("a call that would commit started after the stop")
    finally:
        release.set()
        worker.join(10)

    assert (before, during) == (0, 1)
    assert unwaited() == 0  # the stop is over with its block
