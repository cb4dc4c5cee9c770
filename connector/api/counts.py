"""What a client's requests got: answers by HTTP status, and retries."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["RequestCounts"]


class RequestCounts:
    """Every answer a client got, by HTTP status, and the retries it made: what a run's
    metrics report (`connector.metrics`). Counted in the one request path, so every try of
    every request is in it; thread-safe, so clients on different loops may share one.

    `by_status` keys are the status as text (``"200"``, ``"429"``), or `NO_ANSWER` for a
    try that got none (the connection failed or was cut); `throttled` is the 429s.
    """

    #: The key of tries that got no HTTP answer.
    NO_ANSWER = "error"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statuses: Counter[str] = Counter()
        self._retries = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(by_status={self.by_status}, retries={self.retries})"

    def answered(self, status: int | None) -> None:
        """One try ended: with this HTTP status, or (None) with no answer."""
        with self._lock:
            self._statuses[self.NO_ANSWER if status is None else str(status)] += 1

    def retried(self) -> None:
        """A failed request is about to be tried again."""
        with self._lock:
            self._retries += 1

    @property
    def by_status(self) -> dict[str, int]:
        with self._lock:
            return dict(self._statuses)

    @property
    def retries(self) -> int:
        return self._retries

    @property
    def throttled(self) -> int:
        """Answers that were 429 (rate limited)."""
        with self._lock:
            return self._statuses["429"]
