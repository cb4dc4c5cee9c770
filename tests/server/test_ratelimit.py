"""The token bucket behind --rate-limit, on a clock the test moves, and the limit it
publishes in each header form (--rate-headers)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from connector.server.app import create_app
from connector.server.cli import serve
from connector.server.faults import Faults
from connector.server.ratelimit import RateLimiter, header_forms
from connector.server.storage import Storage
from tests.server.conftest import Clock, make_client


def test_a_burst_of_rate_requests_then_one_per_interval() -> None:
    clock = Clock()
    limiter = RateLimiter(4, clock)
    assert [limiter.wait("k") for _ in range(4)] == [0, 0, 0, 0]
    assert limiter.wait("k") == pytest.approx(0.25)
    clock.now += 0.25
    assert limiter.wait("k") == 0
    assert limiter.wait("k") > 0


def test_buckets_are_per_key() -> None:
    limiter = RateLimiter(1, Clock())
    assert limiter.wait("a") == 0
    assert limiter.wait("a") > 0
    assert limiter.wait("b") == 0


def test_a_rate_below_one_a_second_still_lets_requests_through() -> None:
    clock = Clock()
    limiter = RateLimiter(0.5, clock)
    assert limiter.wait("k") == 0
    assert limiter.wait("k") == pytest.approx(2.0)
    clock.now += 2.0
    assert limiter.wait("k") == 0


@pytest.mark.parametrize(("wait", "header"), [(0.01, "1"), (1.0, "1"), (1.2, "2")])
def test_retry_after_is_whole_seconds_never_zero(wait: float, header: str) -> None:
    assert RateLimiter.retry_after(wait) == header


# -- the limit published (--rate-headers) ------------------------------------------------------

WALL = 1_767_225_600.0  # the Unix time the tests' wall clock stands at


def test_each_form_tells_the_bucket_as_it_is() -> None:
    clock = Clock()
    limiter = RateLimiter(50, clock, wall=lambda: WALL)
    assert limiter.published("k", ("ietf",)) == {  # a full bucket: nothing to wait for
        "RateLimit-Policy": '"default";q=50;w=1', "RateLimit": '"default";r=50;t=0'}
    for _ in range(12):
        limiter.wait("k")
    clock.now += 0.11  # 5.5 back
    assert limiter.published("k", ("ietf", "draft", "x")) == {
        "RateLimit-Policy": '"default";q=50;w=1', "RateLimit": '"default";r=43;t=1',
        "RateLimit-Limit": "50, 50;w=1", "RateLimit-Remaining": "43", "RateLimit-Reset": "1",
        "X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "43", "X-RateLimit-Reset": str(int(WALL) + 1),
    }
    assert limiter.published("k", ()) == {}


@pytest.mark.parametrize(
    ("rate", "policy", "left"),
    [(0.5, "q=1;w=2", "r=0;t=2"), (2.5, "q=5;w=2", "r=1;t=1"), (1000, "q=1000;w=1", "r=999;t=1")],
)
def test_a_rate_that_is_not_whole_a_second_is_whole_over_a_longer_window(rate: float, policy: str, left: str) -> None:
    limiter = RateLimiter(rate, Clock())
    limiter.wait("k")
    assert limiter.published("k", ("ietf",)) == {
        "RateLimit-Policy": f'"default";{policy}', "RateLimit": f'"default";{left}'}


def test_the_header_forms_are_checked() -> None:
    assert header_forms("ietf,x") == ("ietf", "x")
    assert header_forms(" X , draft, x ") == ("x", "draft")
    assert header_forms("none") == header_forms("") == ()
    for bad in ("ietf,bogus", "none,x", "rfc"):
        with pytest.raises(ValueError, match=r"unknown rate header form .*ietf, draft, x"):
            header_forms(bad)


def test_every_answer_to_a_limited_key_publishes_its_limit(storage: Storage, key: str) -> None:
    with make_client(create_app(storage, rate_limit=3, clock=Clock()), key) as client:
        answers = [client.get("/tables"), client.get("/tables/tbl_nope"), client.get("/tables"),
                   client.get("/tables")]
    assert [a.status_code for a in answers] == [200, 404, 200, 429]
    assert [a.headers["ratelimit"] for a in answers] == [f'"default";r={r};t=1' for r in (2, 1, 0, 0)]
    assert {a.headers["ratelimit-policy"] for a in answers} == {'"default";q=3;w=1'}
    assert [a.headers["x-ratelimit-remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert all(a.headers["x-ratelimit-limit"] == "3" and int(a.headers["x-ratelimit-reset"]) > 1e9 for a in answers)
    assert "ratelimit-limit" not in answers[0].headers  # the default forms: ietf and x


def test_no_limit_or_no_forms_publish_nothing(storage: Storage, key: str) -> None:
    for app in (create_app(storage), create_app(storage, rate_limit=3, faults=Faults(rate_headers="none"))):
        with make_client(app, key) as client:
            answer = client.get("/tables")
        assert not [name for name in answer.headers if "ratelimit" in name]


def test_the_forms_change_while_the_server_runs_and_bad_ones_are_refused(storage: Storage, key: str) -> None:
    admin = storage.create_key(admin=True)
    app = create_app(storage, rate_limit=100, fault_control=True)
    with make_client(app, key) as client, make_client(app, admin) as control:
        assert control.put("/_faults", json={"rate_headers": "draft"}).json()["rate_headers"] == "draft"
        answer = client.get("/tables")
        assert answer.headers["ratelimit-remaining"] == "99" and "ratelimit" not in answer.headers
        refused = control.put("/_faults", json={"rate_headers": "ietf,rfc"})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "rate_headers"
        assert control.put("/_faults", json={"rate_headers": 1}).json()["error"]["field"] == "rate_headers"
        assert "ratelimit-remaining" in client.get("/tables").headers  # unchanged


def test_serve_refuses_an_unknown_form() -> None:
    result = CliRunner().invoke(serve, ["--rate-headers", "ietf,rfc", "--port", "0"])
    assert result.exit_code == 2
    assert "unknown rate header form 'rfc'" in result.output
