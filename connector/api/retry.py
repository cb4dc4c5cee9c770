"""When and how a failed request is tried again: a policy with named defaults, on tenacity.

Retried: 429, 5xx and connection failures, and only when replaying cannot do harm. Reads,
PATCHes (they set values) and DELETEs are safe to replay; a POST is replayed only when it
certainly did not happen (a 429, or a connection that was never made). Backoff is
exponential with jitter; a ``Retry-After`` is honoured as a minimum, and ``Retry-After: 0``
still waits the backoff, so a server that answers "now" is not hammered. Every request
has a bounded total time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
)

from connector.errors import ApiError

__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_INITIAL_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_TOTAL_SECONDS",
    "RetryPolicy",
]

#: Tries per request, the first one included.
DEFAULT_ATTEMPTS = 10
#: First backoff in seconds; it doubles per retry, plus up to as much again in jitter.
DEFAULT_INITIAL_BACKOFF = 0.1
#: Longest single backoff in seconds (a longer ``Retry-After`` still wins).
DEFAULT_MAX_BACKOFF = 10.0
#: No retry starts once this many seconds have gone by since the first try.
DEFAULT_TOTAL_SECONDS = 120.0

#: Decides whether a given failure may be replayed (it depends on the request's method).
Replayable = Callable[[BaseException], bool]


@dataclass(frozen=True)
class RetryPolicy:
    """How many times, how long apart, and for how long a replayable request is retried."""

    attempts: int = DEFAULT_ATTEMPTS
    initial_backoff: float = DEFAULT_INITIAL_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    total_seconds: float = DEFAULT_TOTAL_SECONDS

    @classmethod
    def off(cls) -> RetryPolicy:
        """Every request is tried once; failures reach the caller as they happen."""
        return cls(attempts=1)

    def after(self, elapsed: float) -> RetryPolicy:
        """This policy for a request whose first try took `elapsed` seconds (and failed)."""
        return replace(self, total_seconds=self.total_seconds - elapsed)

    def backoff(self, state: RetryCallState) -> float:
        """Exponential backoff with jitter, never shorter than the server's Retry-After."""
        retries = state.attempt_number - 1
        exponential = self.initial_backoff * 2.0 ** min(retries, 32)
        jittered = min(self.max_backoff, exponential + random.uniform(0, self.initial_backoff))
        exc = state.outcome.exception() if state.outcome else None
        asked = exc.retry_after if isinstance(exc, ApiError) else None
        return max(jittered, asked or 0.0)

    def _kwargs(self, replayable: Replayable) -> dict[str, object]:
        return {
            "stop": stop_after_attempt(self.attempts) | stop_before_delay(self.total_seconds),
            "wait": self.backoff,
            "retry": retry_if_exception(replayable),
            "reraise": True,
        }

    def async_retrying(self, replayable: Replayable) -> AsyncRetrying:
        """A tenacity loop for one request of the async core (every request is one);
        `replayable` says which failures to retry."""
        return AsyncRetrying(**self._kwargs(replayable))  # type: ignore[arg-type]
