"""What a server says of its rate limit in an answer's headers, whichever form it uses.

Read in this order, the first form present wins:

* the IETF fields of the httpapi draft "RateLimit header fields for HTTP" (-08 on), structured
  fields (RFC 9651): ``RateLimit-Policy: "default";q=50;w=1`` (q requests per w seconds) and
  ``RateLimit: "default";r=12;t=1`` (r left, more in t seconds);
* draft -07: ``RateLimit: limit=50, remaining=12, reset=1`` with ``RateLimit-Policy: 50;w=1``;
* drafts to -06: ``RateLimit-Limit: 50`` (up to -02 with its policies: ``50, 50;w=1``),
  ``RateLimit-Remaining``, ``RateLimit-Reset`` (seconds), and ``RateLimit-Policy: 50;w=1``;
* the widely used ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (a Unix time, as GitHub
  sends it, or seconds: a value past `EPOCH` is a time).

Where several policies apply, the strictest rate and the least remaining count. A field that
is malformed (not a structured field, a negative or non-integer count, an unknown quota unit)
is ignored, as the draft requires: the answer tells nothing, and the pacer learns instead.
Structured fields are parsed by ``http_sf`` (mnot's RFC 9651 parser, tested against the
standard's suite), so a malformed one is refused exactly where the RFC says.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import http_sf
import httpx

__all__ = ["EPOCH", "Quota", "published"]

#: An ``X-RateLimit-Reset`` past this (2001-09-09) is a Unix time, not seconds from now.
EPOCH = 1e9
#: Fields whose presence means a server may be saying its limit.
_NAMES = ("ratelimit", "ratelimit-limit", "ratelimit-remaining", "x-ratelimit-limit", "x-ratelimit-remaining")
#: Quota units that count requests (the draft's default); others (bytes) are not ours to pace.
_REQUESTS = "requests"


@dataclass(frozen=True)
class Quota:
    """A server's limit as one answer states it.

    `limit` requests per `window` seconds (None: the form does not say the window),
    `remaining` requests left now, and `reset` seconds until more are available.
    """

    limit: int | None = None
    window: float | None = None
    remaining: int | None = None
    reset: float | None = None

    @property
    def rate(self) -> float | None:
        """Requests a second the server refills, when the answer says its window."""
        if self.limit is None or not self.window:
            return None
        return self.limit / self.window


def published(headers: httpx.Headers | Mapping[str, str], now: float | None = None) -> Quota | None:
    """The quota `headers` state (None: none, or only malformed fields). `now` is the Unix
    time an ``X-RateLimit-Reset`` given as a time is counted from (default: this machine's)."""
    headers = headers if isinstance(headers, httpx.Headers) else httpx.Headers(headers)
    if not any(name in headers for name in _NAMES):
        return None  # the common case, and cheap
    for read in (_ietf, _draft7, _draft6, _x):
        quota = read(headers, now)
        if quota is not None:
            return quota
    return None


def _field(headers: httpx.Headers, name: str, kind: str) -> Any:
    """A structured field (`kind` list or dictionary), its lines joined; None if absent or
    malformed."""
    lines = headers.get_list(name)
    if not lines:
        return None
    try:
        return http_sf.parse(", ".join(lines).encode("latin-1"), tltype=kind)
    except (http_sf.StructuredFieldError, UnicodeEncodeError, ValueError):
        return None


def _count(value: object) -> int | None:
    """A non-negative integer (a bool is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _policies(items: object) -> list[tuple[str | None, int, float]]:
    """The policies of request units in a parsed RateLimit-Policy (or, up to -02, the rest of
    RateLimit-Limit): (name, None for the older unnamed integer items; quota; window
    seconds). A malformed item is left out."""
    found: list[tuple[str | None, int, float]] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, tuple) or isinstance(item[0], list):
            continue
        value, params = item
        unit = params.get("qu", _REQUESTS)
        window = _count(params.get("w"))
        if unit != _REQUESTS or not window:
            continue
        if isinstance(value, str):  # -08 on: "name";q=..;w=..
            quota = _count(params.get("q"))
            if quota is not None:
                found.append((value, quota, float(window)))
        elif (quota := _count(value)) is not None:  # -07 and earlier: quota;w=..
            found.append((None, quota, float(window)))
    return found


def _strictest(
    policies: list[tuple[str | None, int, float]], name: str | None = None, quota: int | None = None
) -> tuple[int, float] | None:
    """(quota, window) of the policy named `name`, else of the strictest (of those of `quota`
    requests, if given); None: none."""
    named = [p for p in policies if name is not None and p[0] == name]
    fitting = named or [p for p in policies if quota is None or p[1] == quota]
    if not fitting:
        return None
    _, limit, window = min(fitting, key=lambda p: p[1] / p[2])
    return limit, window


def _ietf(headers: httpx.Headers, now: float | None) -> Quota | None:
    items = _field(headers, "ratelimit", "list")
    if not isinstance(items, list):
        return None
    policies = _policies(_field(headers, "ratelimit-policy", "list"))
    least: tuple[int, float | None, str] | None = None  # remaining, reset, policy
    for item in items:
        if not isinstance(item, tuple) or not isinstance(item[0], str):
            continue
        name, params = item
        remaining = _count(params.get("r"))
        reset = _count(params.get("t")) if "t" in params else None
        if remaining is None or ("t" in params and reset is None):
            continue
        if least is None or remaining < least[0]:
            least = (remaining, None if reset is None else float(reset), name)
    if least is None:
        return None
    policy = _strictest(policies, name=least[2])
    return Quota(policy[0] if policy else None, policy[1] if policy else None, least[0], least[1])


def _draft7(headers: httpx.Headers, now: float | None) -> Quota | None:
    fields = _field(headers, "ratelimit", "dictionary")
    if not isinstance(fields, dict):
        return None
    limit, remaining, reset = (_count(fields.get(key, (None,))[0]) for key in ("limit", "remaining", "reset"))
    if limit is None and remaining is None:
        return None
    policy = _strictest(_policies(_field(headers, "ratelimit-policy", "list")), quota=limit)
    return Quota(policy[0] if policy else limit, policy[1] if policy else None, remaining,
                 None if reset is None else float(reset))


def _draft6(headers: httpx.Headers, now: float | None) -> Quota | None:
    if "ratelimit-limit" not in headers and "ratelimit-remaining" not in headers:
        return None
    limits = _field(headers, "ratelimit-limit", "list")
    limit: int | None = None
    window: float | None = None
    if isinstance(limits, list) and limits and isinstance(limits[0], tuple):
        limit = _count(limits[0][0])
        # up to -02 the policies follow the limit: "50, 50;w=1"
        policies = _policies(_field(headers, "ratelimit-policy", "list")) or _policies(limits[1:])
        policy = _strictest(policies, quota=limit)
        window = policy[1] if policy else None
    remaining = _integer(headers.get("ratelimit-remaining"))
    reset = _integer(headers.get("ratelimit-reset"))
    if limit is None and remaining is None:
        return None
    return Quota(limit, window, remaining, None if reset is None else float(reset))


def _x(headers: httpx.Headers, now: float | None) -> Quota | None:
    limit = _integer(headers.get("x-ratelimit-limit"))
    remaining = _integer(headers.get("x-ratelimit-remaining"))
    if limit is None and remaining is None:
        return None
    reset = _number(headers.get("x-ratelimit-reset"))
    if reset is not None and reset > EPOCH:
        reset = max(0.0, reset - (time.time() if now is None else now))
    return Quota(limit, None, remaining, reset)


def _integer(text: str | None) -> int | None:
    """A header that is one non-negative integer, else None."""
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _number(text: str | None) -> float | None:
    """A header that is one non-negative number (an X- reset may carry a fraction)."""
    try:
        value = float((text or "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
