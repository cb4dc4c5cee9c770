"""When and how a failed request is tried again: a policy with named defaults, on tenacity.

Retried: 429, 5xx and connection failures, and only when replaying cannot do harm. Reads,
PATCHes (they set values) and DELETEs are safe to replay; a POST is replayed only when it
certainly did not happen (a 429, or a connection that was never made). Backoff is
exponential with jitter; a ``Retry-After`` is honoured as a minimum, and ``Retry-After: 0``
still waits the backoff, so a server that answers "now" is not hammered. Every request
has a bounded total time: `max_wait` (``--max-wait``, ``CONNECTOR_MAX_WAIT``, a job's
``source.max_wait``) sets it.

Every wait is announced before it starts, as a `RetryEvent` handed to the client's observer
(``on_retry``): the CLI prints it as one line on stderr, a JSON reporter as an event.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
)

from connector.errors import ApiError, ConfigError

__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_INITIAL_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_TOTAL_SECONDS",
    "ENV_MAX_WAIT",
    "RetryEvent",
    "RetryObserver",
    "RetryPolicy",
    "check_max_wait",
    "default_max_wait",
    "resolve_policy",
]

#: Tries per request, the first one included.
DEFAULT_ATTEMPTS = 10
#: First backoff in seconds; it doubles per retry, plus up to as much again in jitter.
DEFAULT_INITIAL_BACKOFF = 0.1
#: Longest single backoff in seconds (a longer ``Retry-After`` still wins).
DEFAULT_MAX_BACKOFF = 10.0
#: No retry starts once this many seconds have gone by since the first try.
DEFAULT_TOTAL_SECONDS = 120.0

#: The environment variable a client reads its total retry budget from (seconds).
ENV_MAX_WAIT = "CONNECTOR_MAX_WAIT"

#: Decides whether a given failure may be replayed (it depends on the request's method).
Replayable = Callable[[BaseException], bool]


@dataclass(frozen=True)
class RetryEvent:
    """A wait before trying a request again, announced before it starts.

    ``str(event)`` is the line a person reads: ``retrying in 4.0 s (attempt 3 of 10):
    connection refused``. `attempt` is the try about to be made after the wait, `of` the
    most the policy makes; `url` never holds the key (it travels in a header).
    """

    seconds: float
    attempt: int
    of: int
    reason: str
    method: str
    url: str

    def __str__(self) -> str:
        return f"retrying in {self.seconds:.1f} s (attempt {self.attempt} of {self.of}): {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        """The event's fields for a JSON log, with ``message``: the line `str` gives."""
        return {**asdict(self), "seconds": round(self.seconds, 3), "message": str(self)}


#: Called with each `RetryEvent`, on the client's event loop: keep it quick.
RetryObserver = Callable[[RetryEvent], None]


@dataclass(frozen=True)
class RetryPolicy:
    """How many times, how long apart, and for how long a replayable request is retried, and
    who hears of each wait: one value a client takes, as httpx takes a `Timeout`."""

    attempts: int = DEFAULT_ATTEMPTS
    initial_backoff: float = DEFAULT_INITIAL_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    #: No retry starts once this many seconds have gone by since the first try (a job's
    #: ``source.max_wait``); None: ``--max-wait``'s block, else ``CONNECTOR_MAX_WAIT``, else
    #: `DEFAULT_TOTAL_SECONDS` (`resolve_policy`).
    total_seconds: float | None = None
    #: Hears of each wait before it starts (the CLI prints it, a JSON reporter emits it);
    #: None: the ``connector.api.retry`` log.
    on_retry: RetryObserver | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.total_seconds is not None:
            check_max_wait(self.total_seconds, "max_wait")

    @classmethod
    def off(cls) -> RetryPolicy:
        """Every request is tried once; failures reach the caller as they happen."""
        return cls(attempts=1)

    def after(self, elapsed: float) -> RetryPolicy:
        """This policy for a request whose first try took `elapsed` seconds (and failed)."""
        return replace(self, total_seconds=max(0.0, self.budget - elapsed))

    @property
    def budget(self) -> float:
        """`total_seconds`, as resolved (`resolve_policy`) or the default."""
        return DEFAULT_TOTAL_SECONDS if self.total_seconds is None else self.total_seconds

    def backoff(self, state: RetryCallState) -> float:
        """Exponential backoff with jitter, never shorter than the server's Retry-After."""
        retries = state.attempt_number - 1
        exponential = self.initial_backoff * 2.0 ** min(retries, 32)
        jittered = min(self.max_backoff, exponential + random.uniform(0, self.initial_backoff))
        exc = state.outcome.exception() if state.outcome else None
        asked = exc.retry_after if isinstance(exc, ApiError) else None
        return max(jittered, asked or 0.0)

    def _kwargs(
        self, replayable: Replayable, before_sleep: Callable[[RetryCallState], None] | None
    ) -> dict[str, object]:
        kwargs: dict[str, object] = {
            "stop": stop_after_attempt(self.attempts) | stop_before_delay(self.budget),
            "wait": self.backoff,
            "retry": retry_if_exception(replayable),
            "reraise": True,
        }
        if before_sleep is not None:
            kwargs["before_sleep"] = before_sleep
        return kwargs

    def async_retrying(
        self,
        replayable: Replayable,
        before_sleep: Callable[[RetryCallState], None] | None = None,
    ) -> AsyncRetrying:
        """A tenacity loop for one request of the async core (every request is one);
        `replayable` says which failures to retry, `before_sleep` hears of each wait."""
        return AsyncRetrying(**self._kwargs(replayable, before_sleep))  # type: ignore[arg-type]


#: The budget `default_max_wait` set for clients built without one (the CLI's --max-wait).
_default_max_wait: float | None = None


def check_max_wait(value: object, source: str = "max_wait") -> float:
    """`value` as a number of seconds >= 0 (finite); else a `ConfigError` naming `source`."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{source} must be a number of seconds >= 0, like 30, not {value!r}")
    return seconds


@contextmanager
def default_max_wait(seconds: float | None) -> Iterator[None]:
    """Within the block, clients built with neither `retry` nor `max_wait` give up retrying
    after `seconds` (None: no change). The CLI's ``--max-wait`` is this, for one command."""
    global _default_max_wait
    previous = _default_max_wait
    if seconds is not None:
        _default_max_wait = check_max_wait(seconds)
    try:
        yield
    finally:
        _default_max_wait = previous


def resolve_policy(retry: RetryPolicy | None) -> RetryPolicy:
    """The policy a client uses: `retry` (default `RetryPolicy()`), its total budget, when
    it sets none, from `default_max_wait`'s block, else ``CONNECTOR_MAX_WAIT``, else
    `DEFAULT_TOTAL_SECONDS`."""
    policy = retry if retry is not None else RetryPolicy()
    if policy.total_seconds is not None:
        return policy
    if _default_max_wait is not None:
        return replace(policy, total_seconds=_default_max_wait)
    if os.environ.get(ENV_MAX_WAIT, "").strip():
        seconds = check_max_wait(os.environ[ENV_MAX_WAIT].strip(), ENV_MAX_WAIT)
        return replace(policy, total_seconds=seconds)
    return replace(policy, total_seconds=DEFAULT_TOTAL_SECONDS)
