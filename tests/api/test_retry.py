"""Retries: what is replayed, how long we wait, and that httpx's exceptions never escape."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest

from connector.api import Client, RateLimiter, RetryPolicy
from connector.api.retry import DEFAULT_TOTAL_SECONDS, RetryEvent, default_max_wait, resolve_policy
from connector.errors import (
    ApiError,
    ApiValidationError,
    AuthError,
    BadRequest,
    ConfigError,
    NotFound,
    NotSent,
    PermissionDenied,
    RateLimited,
    ServerError,
    TransportError,
)
from tests.fixtures.server import ServerFactory, free_port

ROW = {"id": "row_1", "fields": {}, "created_at": "2024-01-01T00:00:00Z",
       "updated_at": "2024-01-01T00:00:00Z"}
TABLES = {"tables": []}
FAST = RetryPolicy(attempts=5, initial_backoff=0.01, max_backoff=0.05, total_seconds=5)


def scripted(*answers: httpx.Response | Exception) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    """A transport handler answering with `answers` in turn (the last one repeats)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[min(len(seen), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handler, seen


def client_for(handler: Callable[[httpx.Request], httpx.Response], retry: RetryPolicy = FAST) -> Client:
    return Client("http://api.test/v1", "k-test", transport=httpx.MockTransport(handler),
                  retry=retry, limiter=RateLimiter())


@pytest.mark.parametrize("failure", [
    httpx.Response(500), httpx.Response(503), httpx.Response(429),
    httpx.ReadTimeout("slow"), httpx.ConnectError("refused"), httpx.RemoteProtocolError("cut"),
])
def test_reads_are_retried_on_5xx_429_and_connection_errors(failure: httpx.Response | Exception) -> None:
    handler, seen = scripted(failure, failure, httpx.Response(200, json=TABLES))
    with client_for(handler) as client:
        assert client.list_tables() == []
    assert len(seen) == 3


@pytest.mark.parametrize("failure", [httpx.Response(429), httpx.ConnectError("refused")])
def test_a_post_is_replayed_when_it_certainly_did_not_happen(failure: httpx.Response | Exception) -> None:
    handler, seen = scripted(failure, httpx.Response(201, json=ROW))
    with client_for(handler) as client:
        assert client.create_row("tbl_1", {}).id == "row_1"
    assert len(seen) == 2


@pytest.mark.parametrize(("failure", "error"), [
    (httpx.Response(500), ServerError),
    (httpx.ReadTimeout("no answer"), TransportError),
    (httpx.RemoteProtocolError("cut mid-response"), TransportError),
])
def test_an_ambiguous_post_failure_is_not_replayed(failure: httpx.Response | Exception,
                                                   error: type[Exception]) -> None:
    handler, seen = scripted(failure, httpx.Response(201, json=ROW))
    with client_for(handler) as client, pytest.raises(error) as caught:
        client.create_rows("tbl_1", [{}])
    assert len(seen) == 1
    assert not isinstance(caught.value, NotSent)


def test_patch_and_delete_are_replayed_after_an_ambiguous_failure() -> None:
    handler, seen = scripted(httpx.Response(500), httpx.Response(200, json=ROW), httpx.Response(500),
                             httpx.Response(204))
    with client_for(handler) as client:
        client.update_row("tbl_1", "row_1", {"Name": "x"})
        client.delete_row("tbl_1", "row_1")
    assert [r.method for r in seen] == ["PATCH", "PATCH", "DELETE", "DELETE"]


def test_a_delete_whose_replay_finds_the_row_gone_succeeded() -> None:
    handler, seen = scripted(httpx.ReadTimeout("answer lost"), httpx.Response(404))
    with client_for(handler) as client:
        client.delete_row("tbl_1", "row_1")  # no NotFound: the replay's 404 means done
    assert [(r.method, r.url.path) for r in seen] == [("DELETE", "/v1/tables/tbl_1/rows/row_1")] * 2


def test_a_delete_of_a_missing_row_is_not_found_at_first_try() -> None:
    handler, _ = scripted(httpx.Response(404))
    with client_for(handler) as client, pytest.raises(NotFound):
        client.delete_row("tbl_1", "row_1")


def test_retry_after_is_honoured_as_a_minimum() -> None:
    handler, _ = scripted(httpx.Response(429, headers={"Retry-After": "0.4"}),
                             httpx.Response(200, json=TABLES))
    started = time.monotonic()
    with client_for(handler) as client:
        client.list_tables()
    assert time.monotonic() - started >= 0.4


def test_retry_after_zero_still_backs_off() -> None:
    policy = RetryPolicy(attempts=3, initial_backoff=0.2, max_backoff=1, total_seconds=5)
    handler, _ = scripted(httpx.Response(429, headers={"Retry-After": "0"}),
                          httpx.Response(200, json=TABLES))
    started = time.monotonic()
    with client_for(handler, policy) as client:
        client.list_tables()
    assert time.monotonic() - started >= 0.2


def test_retries_give_up_after_the_total_time() -> None:
    policy = RetryPolicy(attempts=1000, initial_backoff=0.05, max_backoff=0.1, total_seconds=0.5)
    handler, seen = scripted(httpx.Response(503))
    client, events = observed(handler, retry=policy)
    with client, pytest.raises(ServerError) as caught:
        client.list_tables()
    assert sum(e.seconds for e in events) <= 0.5  # the waits fit the total time
    assert 2 < len(seen) == len(events) + 1 < 50
    assert caught.value.retriable


def test_retries_give_up_after_the_attempts() -> None:
    handler, seen = scripted(httpx.Response(429))
    with client_for(handler) as client, pytest.raises(RateLimited):
        client.list_tables()
    assert len(seen) == FAST.attempts


@pytest.mark.parametrize(("status", "error"), [
    (400, BadRequest), (401, AuthError), (403, PermissionDenied), (404, NotFound),
    (422, ApiValidationError),
])
def test_client_errors_fail_fast(status: int, error: type[ApiError]) -> None:
    handler, seen = scripted(httpx.Response(status, json={"error": {"code": "X", "message": "no"}}))
    with client_for(handler) as client, pytest.raises(error, match=rf"^{status} .*: no") as caught:
        client.list_tables()
    assert len(seen) == 1
    assert caught.value.status == status and not caught.value.retriable


def test_retry_off_tries_once() -> None:
    handler, seen = scripted(httpx.Response(500), httpx.Response(200, json=TABLES))
    with client_for(handler, RetryPolicy.off()) as client, pytest.raises(ServerError):
        client.list_tables()
    assert len(seen) == 1


@pytest.mark.parametrize("failure", [httpx.ConnectError("refused"), httpx.ReadError("reset"),
                                     httpx.WriteTimeout("stuck"), httpx.PoolTimeout("busy")])
def test_httpx_errors_are_wrapped_and_chained(failure: Exception) -> None:
    handler, _ = scripted(failure)
    with client_for(handler, RetryPolicy.off()) as client, pytest.raises(TransportError) as caught:
        client.list_tables()
    assert caught.value.__cause__ is failure
    assert not isinstance(caught.value, httpx.HTTPError)


def test_a_body_that_is_not_json_is_a_server_error() -> None:
    handler, _ = scripted(httpx.Response(200, text="<html>proxy error</html>"))
    with client_for(handler, RetryPolicy.off()) as client, pytest.raises(ServerError, match="not JSON"):
        client.list_tables()


def test_retry_after_is_honoured_against_the_real_server(server_factory: ServerFactory) -> None:
    """The reference server's throttling fault answers 429 with ``Retry-After: 1``; the next
    try waits at least that second (backoff alone would be milliseconds) and then succeeds."""
    server = server_factory(throttle_rate=0.5, seed=1)  # seed 1: the very first request is a 429
    answers: list[tuple[float, float, int]] = []  # (sent, answered, status)

    class Timed(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent = time.monotonic()
            response = self.inner.handle_request(request)
            answers.append((sent, time.monotonic(), response.status_code))
            return response

    limiter = RateLimiter()
    with Client(server.base_url, server.api_key, transport=Timed(), limiter=limiter,
                retry=RetryPolicy(initial_backoff=0.001, max_backoff=0.01)) as client:
        for _ in range(2):
            assert client.list_tables() == []
    statuses = [status for _, _, status in answers]
    assert statuses.count(429) >= 1 and limiter.throttled == statuses.count(429)
    assert statuses.count(200) == 2 and statuses[-1] == 200
    for (_, answered, status), (sent, _, _) in itertools.pairwise(answers):
        if status == 429:
            assert sent - answered >= 0.99  # the loop's clock may wake a hair early


# -- retrying visibly: each wait is announced; the budget is a setting -----------------------


def observed(
    handler: Callable[[httpx.Request], httpx.Response], retry: RetryPolicy | None = None
) -> tuple[Client, list[RetryEvent]]:
    events: list[RetryEvent] = []
    client = Client("http://api.test/v1", "k-test", transport=httpx.MockTransport(handler),
                    limiter=RateLimiter(),
                    retry=replace(retry or RetryPolicy(), on_retry=events.append))
    return client, events


@pytest.mark.parametrize(("failure", "reason"), [
    (httpx.Response(503), "server error 503"),
    (httpx.Response(429), "rate limited (429)"),
    (httpx.ReadTimeout("slow"), "timed out"),
    (httpx.ConnectTimeout("slow"), "timed out connecting"),
    (httpx.RemoteProtocolError("cut"), "the server closed the connection"),
])
def test_each_wait_is_announced_before_it_starts(failure: httpx.Response | Exception, reason: str) -> None:
    handler, seen = scripted(failure, failure, httpx.Response(200, json=TABLES))
    client, events = observed(handler, FAST)
    with client:
        assert client.list_tables() == []
    assert len(seen) == 3
    assert [(e.attempt, e.of, e.reason, e.method, e.url) for e in events] == [
        (2, FAST.attempts, reason, "GET", "http://api.test/v1/tables"),
        (3, FAST.attempts, reason, "GET", "http://api.test/v1/tables"),
    ]
    assert all(0 < e.seconds <= FAST.max_backoff for e in events)


def test_a_retry_event_reads_as_one_line_and_as_json() -> None:
    event = RetryEvent(seconds=4.0, attempt=3, of=10, reason="connection refused", method="GET",
                       url="http://h/v1/tables")
    assert str(event) == "retrying in 4.0 s (attempt 3 of 10): connection refused"
    assert event.as_dict() == {"seconds": 4.0, "attempt": 3, "of": 10, "reason": "connection refused",
                               "method": "GET", "url": "http://h/v1/tables",
                               "message": "retrying in 4.0 s (attempt 3 of 10): connection refused"}


def test_without_an_observer_waits_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    handler, _ = scripted(httpx.Response(500), httpx.Response(200, json=TABLES))
    caplog.set_level(logging.INFO, logger="connector.api.retry")
    with client_for(handler) as client:
        client.list_tables()
    [record] = [r for r in caplog.records if r.name == "connector.api.retry"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("retrying in ") and record.getMessage().endswith(
        "(attempt 2 of 5): server error 500")


def test_an_answer_that_cannot_heal_is_not_announced() -> None:
    handler, seen = scripted(httpx.Response(404))
    client, events = observed(handler, FAST)
    with client, pytest.raises(NotFound):
        client.list_tables()
    assert events == [] and len(seen) == 1


def test_max_wait_is_the_total_budget() -> None:
    handler, seen = scripted(httpx.Response(503))
    client, events = observed(handler, RetryPolicy(total_seconds=0.6))
    with client, pytest.raises(ServerError):
        client.list_tables()
    assert client.retry.total_seconds == 0.6
    assert sum(e.seconds for e in events) <= 0.6
    assert len(seen) == len(events) + 1 >= 2


def test_max_wait_zero_means_no_retry() -> None:
    handler, seen = scripted(httpx.Response(503), httpx.Response(200, json=TABLES))
    client, events = observed(handler, RetryPolicy(total_seconds=0))
    with client, pytest.raises(ServerError):
        client.list_tables()
    assert len(seen) == 1 and events == []


def test_where_the_budget_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONNECTOR_MAX_WAIT", raising=False)
    unset = replace(FAST, total_seconds=None)
    assert resolve_policy(None) == RetryPolicy(total_seconds=DEFAULT_TOTAL_SECONDS)
    assert resolve_policy(unset) == replace(FAST, total_seconds=DEFAULT_TOTAL_SECONDS)
    assert resolve_policy(FAST) == FAST
    monkeypatch.setenv("CONNECTOR_MAX_WAIT", "7")
    assert resolve_policy(None).total_seconds == 7
    assert resolve_policy(unset).total_seconds == 7  # a policy without a budget takes the default
    assert resolve_policy(FAST) == FAST  # a budget set is not overridden by the environment
    with default_max_wait(3):  # the CLI's --max-wait, for one command
        assert resolve_policy(None).total_seconds == 3
        assert resolve_policy(RetryPolicy(total_seconds=1)).total_seconds == 1
    assert resolve_policy(None).total_seconds == 7


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", ""])
def test_a_bad_budget_in_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CONNECTOR_MAX_WAIT", value)
    if not value:
        assert resolve_policy(None).total_seconds == DEFAULT_TOTAL_SECONDS  # empty: unset
        return
    with pytest.raises(ConfigError, match="CONNECTOR_MAX_WAIT must be a number of seconds >= 0"):
        Client("http://api.test/v1", "k")


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), True])
def test_a_bad_max_wait_is_a_configuration_error(value: float) -> None:
    with pytest.raises(ConfigError, match="max_wait must be a number of seconds"):
        Client("http://api.test/v1", "k", retry=RetryPolicy(total_seconds=value))


# -- against the reference server over HTTP ---------------------------------------------------


def test_5xx_faults_are_retried_and_announced(server_factory: ServerFactory) -> None:
    server = server_factory(fail_rate=0.5, seed=3)
    events: list[RetryEvent] = []
    with Client(server.base_url, server.api_key, limiter=RateLimiter(),
                retry=RetryPolicy(attempts=30, initial_backoff=0.01, max_backoff=0.02,
                                  on_retry=events.append)) as client:
        for _ in range(6):
            assert client.list_tables() == []
    assert events and {e.reason for e in events} == {"server error 500"}
    assert all(e.url == f"{server.base_url}/tables" for e in events)


def test_429_faults_are_retried_and_announced(server_factory: ServerFactory) -> None:
    server = server_factory(throttle_rate=0.5, seed=1)
    events: list[RetryEvent] = []
    with Client(server.base_url, server.api_key, limiter=RateLimiter(),
                retry=RetryPolicy(initial_backoff=0.001, max_backoff=0.01,
                                  on_retry=events.append)) as client:
        assert client.list_tables() == []
    assert events and {e.reason for e in events} == {"rate limited (429)"}
    assert all(e.seconds >= 0.99 for e in events)  # the server's Retry-After: 1


def test_a_refused_connection_is_retried_within_the_budget_and_announced() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    events: list[RetryEvent] = []
    with Client(url, "k-test", retry=RetryPolicy(on_retry=events.append, total_seconds=1.5)) as client, \
            pytest.raises(NotSent, match=f"could not connect to {url}: connection refused"):
        client.list_tables()
    assert sum(e.seconds for e in events) <= 1.5  # within the budget
    assert events and {e.reason for e in events} == {"connection refused"}
    assert [e.attempt for e in events] == list(range(2, len(events) + 2))
