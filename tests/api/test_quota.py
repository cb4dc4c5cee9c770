"""Reading what a server publishes of its rate limit, in each header form it may use
(`connector.api.quota`); malformed fields are ignored, never fatal."""

from __future__ import annotations

import math

import httpx
import pytest

from connector.api.quota import Quota, published
from connector.server.ratelimit import RateLimiter as ServerBucket

NOW = 1_767_225_600.0  # a Unix time the X- resets below count from


@pytest.mark.parametrize(
    ("headers", "quota"),
    [
        # the IETF draft, -08 on: structured fields, the service limit naming its policy
        ({"RateLimit-Policy": '"default";q=50;w=1', "RateLimit": '"default";r=12;t=1'}, Quota(50, 1.0, 12, 1.0)),
        ({"RateLimit-Policy": '"burst";q=100;w=60, "daily";q=1000;w=86400', "RateLimit": '"daily";r=999'},
         Quota(1000, 86400.0, 999, None)),
        # several service limits: the one with least remaining, and its own policy
        ({"RateLimit-Policy": '"sec";q=10;w=1, "hour";q=1000;w=3600',
          "RateLimit": '"sec";r=9;t=1, "hour";r=3;t=1200'}, Quota(1000, 3600.0, 3, 1200.0)),
        # a service limit with no policy said: the strictest policy's rate
        ({"RateLimit-Policy": '"a";q=100;w=10, "b";q=50;w=1', "RateLimit": '"other";r=7'}, Quota(100, 10.0, 7, None)),
        ({"RateLimit": '"default";r=5;t=2'}, Quota(None, None, 5, 2.0)),
        # a policy split over two header lines is one list (RFC 9651 3.1)
        ([("RateLimit-Policy", '"a";q=5;w=1'), ("RateLimit-Policy", '"b";q=50;w=1'), ("RateLimit", '"a";r=1')],
         Quota(5, 1.0, 1, None)),
        # draft -07: a dictionary, and integer policies
        ({"RateLimit": "limit=50, remaining=12, reset=1", "RateLimit-Policy": "50;w=1"}, Quota(50, 1.0, 12, 1.0)),
        ({"RateLimit": "limit=100, remaining=50, reset=5"}, Quota(100, None, 50, 5.0)),
        # drafts to -06: three fields, the policy apart (-03 to -06) or after the limit (to -02)
        ({"RateLimit-Limit": "50", "RateLimit-Remaining": "12", "RateLimit-Reset": "1",
          "RateLimit-Policy": "50;w=1"}, Quota(50, 1.0, 12, 1.0)),
        ({"RateLimit-Limit": "10, 10;w=1, 50;w=60", "RateLimit-Remaining": "3", "RateLimit-Reset": "1"},
         Quota(10, 1.0, 3, 1.0)),
        ({"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": "30"}, Quota(100, None, 0, 30.0)),
        # the X- fields: a reset past 2001 is a Unix time, else seconds
        ({"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4987", "X-RateLimit-Reset": str(int(NOW) + 1200)},
         Quota(5000, None, 4987, 1200.0)),
        ({"X-RateLimit-Limit": "40", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2"}, Quota(40, None, 0, 2.0)),
        ({"X-RateLimit-Limit": "40", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": str(NOW - 5)},
         Quota(40, None, 3, 0.0)),  # a reset already past: more is there now
        ({"x-ratelimit-remaining": "7"}, Quota(None, None, 7, None)),
        # the IETF fields win over the X- ones sent beside them
        ({"RateLimit-Policy": '"default";q=50;w=1', "RateLimit": '"default";r=12;t=1',
          "X-RateLimit-Limit": "999", "X-RateLimit-Remaining": "999"}, Quota(50, 1.0, 12, 1.0)),
    ],
)
def test_each_form_is_read(headers: dict[str, str] | list[tuple[str, str]], quota: Quota) -> None:
    assert published(httpx.Headers(headers), now=NOW) == quota


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Retry-After": "1", "Content-Type": "application/json"},
        # not structured fields, or not the draft's: ignored, never raised
        {"RateLimit": '"default";r=-1'},
        {"RateLimit": '"default";r=1.5'},
        {"RateLimit": 'default;r=5'},  # a token, not a string: neither -08 nor -07
        {"RateLimit": '"default";r=5;t=soon'},
        {"RateLimit": '"unterminated;r=5'},
        {"RateLimit": "limit=ten, remaining=many"},
        {"RateLimit": '"default";r=99999999999999999'},  # past RFC 9651's 15 digits
        {"RateLimit": '"\u20ac";r=5'.encode()},  # bytes past ASCII: not a structured field
        {"RateLimit": "\u00e9t\u00e9;r=5".encode()},
        {"RateLimit-Limit": "fifty", "RateLimit-Remaining": "-3"},
        {"RateLimit-Limit": "\uff15\uff10".encode(), "X-RateLimit-Remaining": "\uff11".encode()},  # full-width digits
        {"X-RateLimit-Limit": "", "X-RateLimit-Remaining": "lots"},
        {"X-RateLimit-Limit": "1e3", "X-RateLimit-Remaining": "0x10"},
    ],
)
def test_malformed_or_absent_fields_tell_nothing(headers: dict[str, str | bytes]) -> None:
    assert published(httpx.Headers(headers), now=NOW) is None


def test_a_malformed_part_is_ignored_and_the_rest_read() -> None:
    both = httpx.Headers({"RateLimit-Policy": '"a";q=bad;w=1, "b";q=20;w=2', "RateLimit": '"b";r=4;t=1'})
    assert published(both) == Quota(20, 2.0, 4, 1.0)
    units = httpx.Headers({"RateLimit-Policy": '"bytes";q=65535;qu="content-bytes";w=10, "req";q=30;w=1',
                           "RateLimit": '"req";r=2'})
    assert published(units) == Quota(30, 1.0, 2, None)  # a quota of bytes is not one of requests
    bad_policy = httpx.Headers({"RateLimit-Policy": "not a policy", "RateLimit": '"default";r=3;t=1'})
    assert published(bad_policy) == Quota(None, None, 3, 1.0)
    bad_reset = httpx.Headers({"X-RateLimit-Limit": "40", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "nan"})
    assert published(bad_reset, now=NOW) == Quota(40, None, 3, None)


def test_rate_is_the_quota_over_its_window() -> None:
    assert Quota(50, 1.0).rate == 50.0
    assert Quota(5, 2.0).rate == 2.5
    assert Quota(50, None).rate is None and Quota(None, 1.0).rate is None and Quota(50, 0.0).rate is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("rate", [50.0, 2.5, 0.5])
def test_what_the_reference_server_publishes_reads_back_in_every_form(rate: float) -> None:
    """The server shares no code with the client: each must read what the other writes."""
    clock = Clock()
    bucket = ServerBucket(rate, clock, wall=lambda: NOW)
    bucket.wait("k")
    for form in ("ietf", "draft", "x"):
        quota = published(httpx.Headers(bucket.published("k", [form])), now=NOW)
        assert quota is not None
        assert quota.remaining == int(bucket.burst - 1)
        assert quota.reset == math.ceil(1 / rate)  # the whole seconds until it is full again
        assert quota.rate == (rate if form != "x" else None)
        assert quota.limit is not None and quota.limit >= 1
