"""Per-key rate limiting: a token bucket of `rate` requests a second, bursting to `rate`
(at least one request, so a rate below 1/s still lets a request through now and then).

The app keeps two: one per key for the requests a key makes, and one per client address
for failed authentications, so guessing keys is as slow as the rate limit.

A key's bucket is published on every answer it gets (`published`), in the header forms the
server is set to send (``--rate-headers``, the ``rate_headers`` fault setting):

    ietf   RateLimit-Policy: "default";q=50;w=1  and  RateLimit: "default";r=12;t=1
           (the IETF httpapi draft's structured fields, drafts -08 on)
    draft  RateLimit-Limit: 50, 50;w=1 (the policy after the limit, as drafts to -02 put it),
           RateLimit-Remaining: 12, RateLimit-Reset: 1
    x      X-RateLimit-Limit: 50, X-RateLimit-Remaining: 12, X-RateLimit-Reset: 1767225600
           (the widely used form; its Reset is a Unix time, as GitHub's is)

q per w seconds is the refill rate (w the smallest whole number of seconds that makes q
whole), r the whole requests left now, t (or Reset) the seconds until the bucket is full
again: a client that holds back until then loses nothing, the bucket keeps the refill.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from fractions import Fraction

#: The header forms `published` writes, by the name ``--rate-headers`` takes them.
HEADER_FORMS = ("ietf", "draft", "x")
#: What ``--rate-headers`` is unless set: the IETF fields and the widely used X- fields.
DEFAULT_HEADERS = "ietf,x"


def header_forms(value: str) -> tuple[str, ...]:
    """The forms a ``--rate-headers`` value names (``none`` or empty: none); `ValueError`
    naming a form that is not one of `HEADER_FORMS`."""
    names = [part.strip().lower() for part in value.split(",") if part.strip()]
    if names == ["none"]:
        return ()
    for name in names:
        if name not in HEADER_FORMS:
            raise ValueError(
                f"unknown rate header form {name!r}: give some of {', '.join(HEADER_FORMS)} "
                "separated by commas, or none"
            )
    return tuple(dict.fromkeys(names))


class RateLimiter:
    """`wait(key)` is 0 when the request may go now, else the seconds until it may."""

    def __init__(
        self, rate: float, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate limit must be positive, got {rate}")
        self.rate = rate
        self.burst = max(rate, 1.0)
        self._clock = clock
        self._wall = wall  # the Unix time X-RateLimit-Reset is given in
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)

    def _tokens(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def blocked(self, key: str) -> float:
        """Like `wait`, but spends nothing: the seconds until `key` may go (0: now)."""
        tokens = self._tokens(key, self._clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def wait(self, key: str) -> float:
        now = self._clock()
        tokens = self._tokens(key, now)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def published(self, key: str, forms: Iterable[str]) -> dict[str, str]:
        """The headers that tell `key`'s bucket as it is now, in each of `forms`."""
        forms = tuple(forms)
        if not forms:
            return {}
        now = self._clock()
        tokens = self._tokens(key, now)
        remaining = math.floor(tokens)
        full_in = math.ceil((self.burst - tokens) / self.rate - 1e-9)
        per = Fraction(self.rate).limit_denominator(3600)
        quota, window = max(1, per.numerator), per.denominator
        headers: dict[str, str] = {}
        if "ietf" in forms:
            headers["RateLimit-Policy"] = f'"default";q={quota};w={window}'
            headers["RateLimit"] = f'"default";r={remaining};t={full_in}'
        if "draft" in forms:
            headers["RateLimit-Limit"] = f"{quota}, {quota};w={window}"
            headers["RateLimit-Remaining"] = str(remaining)
            headers["RateLimit-Reset"] = str(full_in)
        if "x" in forms:
            headers["X-RateLimit-Limit"] = str(quota)
            headers["X-RateLimit-Remaining"] = str(remaining)
            headers["X-RateLimit-Reset"] = str(math.ceil(self._wall() + full_in))
        return headers

    @staticmethod
    def retry_after(wait: float) -> str:
        """Retry-After is whole seconds (RFC 9110); never 0, so clients do pause."""
        return str(max(1, math.ceil(wait)))
