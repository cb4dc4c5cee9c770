"""The HTTP client: one method per endpoint, one request path, one async core.

`AsyncClient` is the engine: an endpoint method describes its request as a `_Call` (what to
send, which answers are fine, how to read the body, whether a replay is safe); `_send` is
the only place that talks to httpx, paces the request through the key's `RateLimiter`,
retries per the `RetryPolicy` (tenacity), and turns every failure into one of `connector.errors`.
httpx's exceptions never escape.

`Client` is the blocking facade for scripts and notebooks: it holds ONE `AsyncClient` (so
one transport, one rate limiter, one retry policy) and an `Engine` that runs each blocking
call as one coroutine of that core on the client's own event loop (see `connector.api.engine`).
Library code that needs more than one call in one operation runs its own coroutine with
`Client.run`, drives an async generator with `Client.stream`, and reaches the core as
`Client.aio`.

A transport passed to either client is used by every request: an async one
(`httpx.AsyncBaseTransport`, e.g. `httpx.ASGITransport`, `httpx.MockTransport`) as is, a
sync-only one (`httpx.BaseTransport`, e.g. `httpx.WSGITransport`) through its public
`handle_request`, called on the loop (a sync transport blocks while it answers).

Where `API.md` leaves a choice open, every alternative in DESIGN.md's table is accepted:
200 or 201 on create, 200-with-row or 204 on update, ``{"rows": [...]}`` or a bare array on
bulk create, any 2xx on deletes, 400 or 422 for validation (decided by the body's code).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import (
    AsyncIterable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from operator import itemgetter
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar
from urllib.parse import urlencode, urlsplit

import httpx
import orjson
from tenacity import RetryCallState

from connector.api.concurrency import (
    DEFAULT_MAX_CONCURRENCY,
    MAX_CONCURRENCY,
    ConcurrencyLimit,
    check_max_concurrency,
)
from connector.api.engine import Engine
from connector.api.keys import (
    ENV_API_KEY,
    check_key,
    looks_like_key,
    redact,
    remember_key,
)
from connector.api.limits import DEFAULT_PAGE_SIZE, MAX_BULK_ROWS
from connector.api.models import Row, RowPage, TableSummary
from connector.api.ratelimit import RateLimiter, limiter_for
from connector.api.retry import RetryEvent, RetryObserver, RetryPolicy, resolve_policy
from connector.errors import (
    ApiError,
    ApiValidationError,
    AuthError,
    BadRequest,
    BaseUrlError,
    ConfigError,
    NotFound,
    NotSent,
    PermissionDenied,
    RateLimited,
    ServerError,
    TransportError,
)

if TYPE_CHECKING:  # at run time only where a schema is read: it brings pyarrow
    from connector.schema import Table

__all__ = ["AsyncClient", "Client", "Filter", "RequestCounts"]

T = TypeVar("T")

#: ``{"Column": {"eq": value}}``; several columns are ANDed. Operators: ``eq``, ``gt``.
Filter = Mapping[str, Mapping[str, Any]]
#: The filter operators API.md names, in its order: the one definition (job files use it).
FILTER_OPERATORS: tuple[str, ...] = ("eq", "gt")

ENV_BASE_URL = "CONNECTOR_BASE_URL"
#: The cap of requests in flight when none is given (`connector.api.concurrency`).
ENV_MAX_CONCURRENCY = "CONNECTOR_MAX_CONCURRENCY"
#: How a base URL must look, said in every error about one.
BASE_URL_SHAPE = "base URL must look like https://host/v1"
#: Retry waits are announced here when a client has no `on_retry` observer.
retry_log = logging.getLogger("connector.api.retry")
#: The longest Retry-After we honour; a server asking for more gets this.
MAX_RETRY_AFTER = 60.0


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request, described: sent by `Client._send` or `AsyncClient._send`."""

    method: Literal["GET", "POST", "PATCH", "DELETE"]
    path: str
    read: Callable[[httpx.Response], T]
    params: Mapping[str, str | int] = field(default_factory=dict)
    body: Any = None
    #: For a DELETE: a 404 on a replay means an earlier, unanswered try did the work.
    gone_is_done: bool = False

    def replayable(self, exc: BaseException) -> bool:
        """Whether repeating this call after `exc` can do no harm."""
        if not isinstance(exc, ApiError) or not exc.retriable:
            return False
        if self.method != "POST":
            return True  # reads, PATCH (sets values) and DELETE are idempotent
        return isinstance(exc, RateLimited | NotSent)  # the POST certainly did not happen


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


# --- the endpoints: what to send and how to read the answer -------------------------------


def _list_tables() -> _Call[list[TableSummary]]:
    def read(response: httpx.Response) -> list[TableSummary]:
        data = _body(response)
        items = data["tables"] if isinstance(data, dict) else data
        return [TableSummary.from_api(t) for t in items]

    return _Call("GET", "/tables", read)


def _get_table(table_id: str) -> _Call[Table]:
    from connector.schema import Table

    return _Call("GET", f"/tables/{table_id}", lambda r: Table.from_api(_body(r)))


def _list_rows(
    table_id: str,
    *,
    limit: int,
    offset: int,
    sort: str | None,
    order: Literal["asc", "desc"] | None,
    filter: Filter | None,
) -> _Call[RowPage]:
    if limit < 1 or offset < 0:
        raise ConfigError(f"limit must be >= 1 and offset >= 0 (got {limit}, {offset})")
    params: dict[str, str | int] = {"limit": limit, "offset": offset}
    if sort is not None:
        params["sort"] = sort
    if order is not None:
        params["order"] = order
    if filter:
        params["filter"] = _encode_filter(filter)

    def read(response: httpx.Response) -> RowPage:
        data = _body(response)
        rows = data.get("rows") or []
        if not isinstance(rows, list) or not _all_rows(rows):
            raise ServerError(
                "the server sent a page whose `rows` are not row objects with an `id`",
                status=response.status_code,
                method="GET",
                url=str(response.request.url),
            )
        total, applied, at = data.get("total"), data.get("limit"), data.get("offset")
        return RowPage(
            raw=rows,
            total=int(total) if total is not None else None,
            limit=int(applied) if applied else limit,
            offset=int(at) if at is not None else offset,
            served_at=_served_at(response),
        )

    return _Call("GET", f"/tables/{table_id}/rows", read, params=params)


def _served_at(response: httpx.Response) -> datetime | None:
    """The server's ``Date`` header (RFC 9110: its clock when it answered), None if absent
    or unreadable."""
    value = response.headers.get("Date")
    if not value:
        return None
    try:
        served = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return served if served.tzinfo is not None else served.replace(tzinfo=UTC)


def _create_row(table_id: str, fields: Mapping[str, Any]) -> _Call[Row]:
    return _Call(
        "POST",
        f"/tables/{table_id}/rows",
        lambda r: Row.from_api(_body(r)),
        body={"fields": dict(fields)},
    )


def _update_row(table_id: str, row_id: str, fields: Mapping[str, Any]) -> _Call[Row | None]:
    def read(response: httpx.Response) -> Row | None:
        if response.status_code == 204 or not response.content:
            return None
        return Row.from_api(_body(response))

    return _Call(
        "PATCH", f"/tables/{table_id}/rows/{row_id}", read, body={"fields": dict(fields)}
    )


def _delete_row(table_id: str, row_id: str) -> _Call[None]:
    return _Call("DELETE", f"/tables/{table_id}/rows/{row_id}", _nothing, gone_is_done=True)


def _create_rows(table_id: str, rows: Sequence[Mapping[str, Any]]) -> _Call[list[Row]]:
    if not 1 <= len(rows) <= MAX_BULK_ROWS:
        raise ConfigError(f"create_rows sends 1 to {MAX_BULK_ROWS} rows per request, not {len(rows)}")

    def read(response: httpx.Response) -> list[Row]:
        data = _body(response)
        items = data["rows"] if isinstance(data, dict) else data
        return [Row.from_api(r) for r in items]

    body = {"rows": [{"fields": dict(f)} for f in rows]}
    return _Call("POST", f"/tables/{table_id}/rows/bulk", read, body=body)


def _delete_rows(table_id: str, row_ids: Sequence[str]) -> _Call[None]:
    if not 1 <= len(row_ids) <= MAX_BULK_ROWS:
        raise ConfigError(f"delete_rows sends 1 to {MAX_BULK_ROWS} ids per request, not {len(row_ids)}")
    return _Call(
        "DELETE", f"/tables/{table_id}/rows/bulk", _nothing, body={"row_ids": list(row_ids)}
    )


_ROW_ID = itemgetter("id")


def _all_rows(items: list[Any]) -> bool:
    """Whether every item is a JSON object with an ``id``: looked up in C, as this runs per
    row (from JSON, only an object can be indexed by a string key)."""
    try:
        deque(map(_ROW_ID, items), maxlen=0)
    except (KeyError, TypeError, IndexError):
        return False
    return True


def _nothing(response: httpx.Response) -> None:
    return None


def _body(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise ServerError(
            f"the server sent a body that is not JSON (status {response.status_code})",
            status=response.status_code,
            method=response.request.method,
            url=str(response.request.url),
        ) from exc


def _encode_filter(filter: Filter) -> str:
    """Checks a filter's shape at the boundary and renders it for the query string."""
    if not isinstance(filter, Mapping):
        raise ConfigError(
            "a filter must be a mapping of column to one condition, like "
            f"{{'Status': {{'eq': 'Open'}}}}, not {type(filter).__name__}"
        )
    for column, condition in filter.items():
        if not isinstance(condition, Mapping) or len(condition) != 1:
            raise ConfigError(
                f"filter on {column!r} must be one operator and a value, like {{'eq': 1}}"
            )
        (op,) = condition
        if op not in FILTER_OPERATORS:
            raise ConfigError(
                f"filter on {column!r}: operator {op!r} is not one of {list(FILTER_OPERATORS)}"
            )
    return json.dumps(filter, separators=(",", ":"), default=str)


# --- answers into errors ------------------------------------------------------------------

#: getaddrinfo's answers meaning the name has no address (not "try again later").
_NO_SUCH_HOST = frozenset(
    getattr(socket, name)
    for name in ("EAI_NONAME", "EAI_NODATA", "EAI_FAIL", "EAI_SERVICE", "EAI_ADDRFAMILY")
    if hasattr(socket, name)
)

E = TypeVar("E", bound=BaseException)


def _cause(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of `kind` in `exc`'s chain (httpx wraps httpcore wraps the OS's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _transport_reason(exc: BaseException) -> str:
    """A few words for what happened to the connection: ``connection refused``..."""
    if _cause(exc, ConnectionRefusedError) is not None:
        return "connection refused"
    if _cause(exc, ConnectionResetError) is not None:
        return "connection reset"
    lookup = _cause(exc, socket.gaierror)
    if lookup is not None:
        return f"name lookup failed ({lookup.strerror})"
    if isinstance(exc, httpx.ConnectTimeout):
        return "timed out connecting"
    if isinstance(exc, httpx.PoolTimeout):
        return "timed out waiting for a free connection"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the server closed the connection"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    return "connection lost"


def _reason(exc: BaseException | None) -> str:
    """Why a request is tried again, as a retry line says it."""
    if isinstance(exc, RateLimited):
        return f"rate limited ({exc.status or 429})"
    if isinstance(exc, ServerError):
        return f"server error {exc.status}" if exc.status else "server error"
    if isinstance(exc, TransportError):
        return _transport_reason(exc.__cause__) if exc.__cause__ is not None else "connection lost"
    return type(exc).__name__ if exc is not None else "unknown"



def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value else None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _max_concurrency(value: int | None) -> int:
    """The cap: `value`, else ``CONNECTOR_MAX_CONCURRENCY``, else the default."""
    where = "max_concurrency"
    if value is None:
        raw = os.environ.get(ENV_MAX_CONCURRENCY, "").strip()
        if not raw:
            return DEFAULT_MAX_CONCURRENCY
        where = ENV_MAX_CONCURRENCY
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(
                f"{where} must be an integer from 1 to {MAX_CONCURRENCY}, got {raw!r}"
            ) from None
    try:
        return check_max_concurrency(value, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_base_url(base_url: str, source: str) -> str:
    """`base_url` without a trailing slash, if a request can be sent to it; else a
    `BaseUrlError` saying what is wrong and where to fix it (`source`), showing the value
    only where it cannot be a secret."""
    secret = looks_like_key(base_url) and re.fullmatch(r"[\w.~+/=-]+", base_url) is not None
    shown = "" if secret else f" ({base_url!r})"
    problem = None
    if base_url != base_url.strip() or not base_url.isprintable():
        problem = "it holds whitespace or a control character"
        shown = ""
    elif "://" not in base_url:
        problem = "it has no scheme (http:// or https://)"
    else:
        parts = urlsplit(base_url)
        if parts.scheme.lower() not in ("http", "https"):
            problem = f"the scheme {parts.scheme!r} is not http or https"
        elif "@" in parts.netloc:
            problem, shown = f"it carries credentials (the key comes from {ENV_API_KEY})", ""
        else:
            try:
                host = httpx.URL(base_url).host
            except (httpx.InvalidURL, ValueError) as exc:
                problem = f"it cannot be parsed ({exc})"
            else:
                if not host:
                    problem = "it has no host"
    if problem is not None:
        raise BaseUrlError(f"{BASE_URL_SHAPE}: {problem}{shown}; fix {source}")
    return base_url.rstrip("/")


class _Settings:
    """Where, who (kept secret), and how to turn answers into values."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy | None,
        limiter: RateLimiter | None,
        *,
        max_wait: float | None = None,
        on_retry: RetryObserver | None = None,
        key_source: str | None = None,
        url_source: str | None = None,
        counts: RequestCounts | None = None,
    ) -> None:
        # A library caller is told of parameters; a command passes its own words (its flag
        # and variable) as the sources.
        self._key_source = key_source or ENV_API_KEY
        self._url_source = url_source or f"{ENV_BASE_URL} (or base_url)"
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        if not base_url:
            fix = f"set {url_source}" if url_source else f"pass base_url or set {ENV_BASE_URL}"
            raise ConfigError(f"no API base URL: {fix} (it ends in /v1)")
        if not api_key:
            fix = f"set {key_source}" if key_source else f"pass api_key or set {ENV_API_KEY}"
            raise ConfigError(f"no API key: {fix}")
        self._api_key = check_key(api_key, self._key_source)
        remember_key(api_key)
        self.base_url = _check_base_url(base_url, self._url_source)
        self.timeout = timeout
        self.retry = resolve_policy(retry, max_wait)
        self.on_retry = on_retry
        self.limiter = limiter if limiter is not None else limiter_for(self.base_url, api_key)
        #: Every try's answer and every retry (`RequestCounts`).
        self.counts = counts if counts is not None else RequestCounts()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}

    def _redact(self, text: str) -> str:
        return redact(text)  # every key of the process, this one included (`remember_key`)

    def _announce(self, call: _Call[Any], state: RetryCallState) -> None:
        """Tells the observer (or the ``connector.api.retry`` log) of the wait to come."""
        exc = state.outcome.exception() if state.outcome else None
        self.counts.retried()
        event = RetryEvent(
            seconds=state.upcoming_sleep,
            attempt=state.attempt_number + 1,
            of=self.retry.attempts,
            reason=_reason(exc),
            method=call.method,
            url=f"{self.base_url}{call.path}",
        )
        if self.on_retry is not None:
            self.on_retry(event)
        else:
            retry_log.warning("%s", event, extra={"retry_event": event})

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: _Call[Any]) -> httpx.Request:
        """The request, built directly: `build_request` parses and merges the URL twice, half
        of the client's CPU per page on a fast server. Same headers, same timeouts."""
        url = f"{self.base_url}{call.path}"
        if call.params:
            url = f"{url}?{urlencode(call.params)}"
        headers = http.headers
        content = None
        if call.body is not None:
            content = orjson.dumps(call.body)
            headers = httpx.Headers(headers)
            headers["Content-Type"] = "application/json"
        return httpx.Request(
            call.method, url, headers=headers, content=content,
            extensions={"timeout": http.timeout.as_dict()},
        )

    def _transport_error(self, exc: httpx.HTTPError, call: _Call[Any]) -> ApiError:
        """Our error for a failed exchange: a `BaseUrlError` (not retried) for what cannot
        heal, a DNS name with no address or a failed TLS handshake; else a (retriable)
        `NotSent` when no connection was made, or a `TransportError`."""
        method, url = call.method, f"{self.base_url}{call.path}"
        if isinstance(exc, httpx.ConnectError):
            lookup = _cause(exc, socket.gaierror)
            if lookup is not None and lookup.errno in _NO_SUCH_HOST:
                host = urlsplit(self.base_url).hostname
                return BaseUrlError(
                    self._redact(
                        f"the host {host!r} of the base URL has no address (DNS: "
                        f"{lookup.strerror}); fix {self._url_source}"
                    ),
                    method=method,
                    url=url,
                )
            tls = _cause(exc, ssl.SSLError)
            if tls is not None and not isinstance(tls, ssl.SSLEOFError | ssl.SSLZeroReturnError):
                said = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or tls
                return BaseUrlError(
                    self._redact(
                        f"TLS with {self.base_url} failed ({said}): is it http:// rather than "
                        f"https://, the right port, a trusted certificate? Fix {self._url_source}"
                    ),
                    method=method,
                    url=url,
                )
        never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        kind = NotSent if never_sent else TransportError
        what = "could not connect to" if never_sent else "lost the connection to"
        return kind(
            self._redact(f"{what} {self.base_url}: {_transport_reason(exc)} ({type(exc).__name__})"),
            method=method,
            url=url,
        )

    def _finish(self, call: _Call[T], response: httpx.Response, replay: bool, epoch: int) -> T:
        """Feeds the limiter, then reads the body or raises the error the status means."""
        if response.status_code == 429:
            self.limiter.on_throttled(epoch)
        else:
            self.limiter.on_accepted()
        if response.is_success or (response.status_code == 404 and call.gone_is_done and replay):
            try:
                return call.read(response)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                raise self._shape_error(call, response, exc) from exc
        raise self._error(call, response)

    def _shape_error(
        self, call: _Call[Any], response: httpx.Response, exc: Exception
    ) -> ServerError:
        """A body we cannot read as the answer API.md describes: a `ServerError` that fails
        at once (the same request would get the same answer)."""
        error = ServerError(
            self._redact(
                f"the server sent an answer of an unexpected shape (status "
                f"{response.status_code}; {type(exc).__name__}: {exc})"
            ),
            status=response.status_code,
            method=call.method,
            url=f"{self.base_url}{call.path}",
        )
        error.retriable = False
        return error

    def _error(self, call: _Call[Any], response: httpx.Response) -> ApiError:
        status = response.status_code
        code = message = field_name = None
        try:
            detail = orjson.loads(response.content).get("error") or {}
            code, message, field_name = detail.get("code"), detail.get("message"), detail.get("field")
        except (orjson.JSONDecodeError, AttributeError):
            pass
        said = f": {message}" if message else ""
        kind: type[ApiError]
        if status == 401:
            kind = AuthError
            text = f"the API key was refused{said}; set {self._key_source} to a valid key"
        elif status == 403:
            kind = PermissionDenied
            if call.method == "GET":
                text = (
                    f"the key may not read this{said}; use a key with access to the table "
                    "(this one may be scoped to other tables)"
                )
            else:
                text = (
                    f"the key may not change this table{said}; use a key that may write to it "
                    "(this one is read-only or scoped to other tables)"
                )
        elif status == 404:
            kind = NotFound
            text = (
                f"not found{said}; check the table id or name (`connector tables` lists them), "
                f"the row id, and that the base URL {self.base_url} ends in /v1"
            )
        elif code == "VALIDATION_ERROR" or status == 422:
            column = f" in column {field_name!r}" if field_name else ""
            kind, text = ApiValidationError, f"invalid value{column}{said}"
        elif status == 429:
            kind, text = RateLimited, "rate limited by the server; retries ran out, try again later"
        elif status >= 500:
            kind, text = ServerError, f"the server failed{said}"
        else:
            kind, text = BadRequest, f"the server rejected the request{said}"
        return kind(
            self._redact(text),
            status=status,
            code=code,
            field=field_name,
            method=call.method,
            url=f"{self.base_url}{call.path}",
            retry_after=_retry_after(response),
        )


class Client:
    """A blocking client for one workspace. Use it as a context manager, or `close()` it.

    `base_url` (ending in ``/v1``) and `api_key` default to ``CONNECTOR_BASE_URL`` and
    ``CONNECTOR_API_KEY``. Both are checked here, before any request: a key with whitespace,
    control or non-ASCII characters, or a base URL that is not ``http(s)://host...``, is a
    `ConfigError` naming `key_source` / `url_source` (where the value came from, in the
    caller's words: a command names its flag and variable; default ``CONNECTOR_API_KEY`` /
    ``CONNECTOR_BASE_URL (or base_url)``), never the key.

    `retry` is the policy (`RetryPolicy`); `max_wait` caps its total seconds (without
    either: ``CONNECTOR_MAX_WAIT``, else the default). `on_retry` hears of each wait before
    it starts (a `connector.api.retry.RetryEvent`; default: a warning on the
    ``connector.api.retry`` logger, which the CLI prints as one line on stderr).

    `transport` is the test seam (an httpx transport, sync or async), used by every read and
    write; `limiter` defaults to the one shared by every client of this key in the process,
    starting from the rate an earlier process learned (`connector.api.ratelimit.RateMemory`).
    `max_concurrency` caps the requests in flight, which the client adapts below the cap
    (`connector.api.concurrency`; default ``CONNECTOR_MAX_CONCURRENCY``, else 32).
    `counts` tallies every try's answer and every retry (`RequestCounts`; default: the
    client's own, `counts`).
    Each method is one call of the async core (`aio`), run on this client's event loop.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        max_wait: float | None = None,
        on_retry: RetryObserver | None = None,
        key_source: str | None = None,
        url_source: str | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        limiter: RateLimiter | None = None,
        max_concurrency: int | None = None,
        counts: RequestCounts | None = None,
    ) -> None:
        self._aio = AsyncClient(
            base_url, api_key, timeout=timeout, retry=retry, max_wait=max_wait,
            on_retry=on_retry, key_source=key_source, url_source=url_source,
            transport=transport, limiter=limiter, max_concurrency=max_concurrency,
            counts=counts,
        )
        self._engine = Engine()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections and stops the client's event loop (and helper thread)."""
        self._engine.close(self._aio.aclose())

    def cancel(self) -> None:
        """Cancels the calls other threads are waiting for, and refuses new ones
        (`EngineError`) until `close`: how a stopped run ends the tables it reads in
        parallel. The calling thread's own call, if any, is ended by its interrupt."""
        self._engine.cancel()

    @property
    def aio(self) -> AsyncClient:
        """The async core every call goes through: await it inside `run` or `stream`."""
        return self._aio

    @property
    def base_url(self) -> str:
        return self._aio.base_url

    @property
    def timeout(self) -> float:
        return self._aio.timeout

    @property
    def retry(self) -> RetryPolicy:
        return self._aio.retry

    @property
    def limiter(self) -> RateLimiter:
        return self._aio.limiter

    @property
    def concurrency(self) -> ConcurrencyLimit:
        """The requests in flight this client allows now, and the most it reached (`peak`)."""
        return self._aio.concurrency

    @property
    def counts(self) -> RequestCounts:
        """The answers this client got, by status, and its retries."""
        return self._aio.counts

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs one operation written against `aio` (a coroutine) to completion, blocking.

        No thread hop where the calling thread runs no event loop; inside one (a notebook)
        it runs on the client's helper thread. Do not call blocking methods of this client
        from inside `coro`: await `aio`'s instead.
        """
        return self._engine.run(coro)

    def stream(self, items: AsyncIterable[T]) -> Iterator[T]:
        """An async iterable (an async generator reading with `aio`) as a blocking iterator.

        Items are produced one at a time as the consumer asks; when the consumer stops early
        the generator is closed on the client's loop, so nothing keeps reading behind it.
        """
        return self._engine.stream(items)

    def list_tables(self) -> list[TableSummary]:
        """Every table the key may read."""
        return self.run(self._aio.list_tables())

    def get_table(self, table_id: str) -> Table:
        """A table's schema: its name and column definitions."""
        return self.run(self._aio.get_table(table_id))

    def list_rows(
        self,
        table_id: str,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        offset: int = 0,
        sort: str | None = None,
        order: Literal["asc", "desc"] | None = None,
        filter: Filter | None = None,
    ) -> RowPage:
        """One page of rows; the page reports the limit the server actually applied."""
        return self.run(
            self._aio.list_rows(
                table_id, limit=limit, offset=offset, sort=sort, order=order, filter=filter
            )
        )

    def create_row(self, table_id: str, fields: Mapping[str, Any]) -> Row:
        """Creates one row. Not replayed after an ambiguous failure (it may have happened)."""
        return self.run(self._aio.create_row(table_id, fields))

    def update_row(self, table_id: str, row_id: str, fields: Mapping[str, Any]) -> Row | None:
        """Sets the given fields; returns the row, or None when the server answers 204."""
        return self.run(self._aio.update_row(table_id, row_id, fields))

    def delete_row(self, table_id: str, row_id: str) -> None:
        """Deletes one row."""
        self.run(self._aio.delete_row(table_id, row_id))

    def create_rows(self, table_id: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        """Creates up to `MAX_BULK_ROWS` rows in ONE request; rows come back in order."""
        return self.run(self._aio.create_rows(table_id, rows))

    def delete_rows(self, table_id: str, row_ids: Sequence[str]) -> None:
        """Deletes up to `MAX_BULK_ROWS` rows in ONE request."""
        self.run(self._aio.delete_rows(table_id, row_ids))


#: Connections kept to the server (a read keeps a few pages in flight, a push up to 8 writes).
CONNECTION_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=64)


def _proxies_in_environment() -> bool:
    """Whether the environment names a proxy httpx would use (it reads the same variables)."""
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def _async_transport(transport: httpx.BaseTransport | httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """The transport as the async core uses it: an async one as is, a sync one adapted."""
    if isinstance(transport, httpx.AsyncBaseTransport):
        return transport
    if isinstance(transport, httpx.BaseTransport) or hasattr(transport, "handle_request"):
        return _SyncTransport(transport)
    raise ConfigError(
        f"transport must be an httpx transport (sync or async), not {type(transport).__name__}"
    )


class _SyncTransport(httpx.AsyncBaseTransport):
    """A sync-only transport (`httpx.WSGITransport`, a custom one) for the async core.

    Called through its public `handle_request`, on the event loop: it blocks the loop while
    it answers, as a sync transport blocks its caller. The body is read fully before the
    answer is handed on (still encoded: the core decodes it as from any transport).
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        try:
            raw = b"".join(response.iter_raw())
        finally:
            response.close()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(raw),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        self._inner.close()


class AsyncClient(_Settings):
    """The async core: `Client`'s constructor and methods, awaited.

    Use it directly from async code (``async with AsyncClient() as client``); a `Client`
    holds one and exposes it as `Client.aio`.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        max_wait: float | None = None,
        on_retry: RetryObserver | None = None,
        key_source: str | None = None,
        url_source: str | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        limiter: RateLimiter | None = None,
        max_concurrency: int | None = None,
        counts: RequestCounts | None = None,
    ) -> None:
        super().__init__(
            base_url, api_key, timeout, retry, limiter, max_wait=max_wait, on_retry=on_retry,
            key_source=key_source, url_source=url_source, counts=counts,
        )
        #: Requests in flight, adapted below the cap; shared by every read and write of
        #: this client (`connector.api.concurrency`).
        self.concurrency = ConcurrencyLimit(_max_concurrency(max_concurrency))
        #: Where requests go straight to; None: through `httpx.AsyncClient.send`, which
        #: picks the proxy the environment names (HTTP_PROXY, NO_PROXY...) as httpx does.
        self._transport: httpx.AsyncBaseTransport | None
        if transport is not None:
            self._transport = _async_transport(transport)
        elif _proxies_in_environment():
            self._transport = None
        else:
            self._transport = httpx.AsyncHTTPTransport(limits=CONNECTION_LIMITS, trust_env=True)
        self._http = httpx.AsyncClient(  # owns the transport: `aclose` closes it
            transport=self._transport,
            timeout=timeout,
            headers=self._headers(),
            limits=CONNECTION_LIMITS,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        """The one request path: pace, send, retry what is safe, map failures to our errors."""
        started = time.monotonic()
        try:  # the first try outside tenacity, whose bookkeeping would cost more than it
            return await self._try(call, replay=False)
        except ApiError as exc:
            if not call.replayable(exc):
                raise
            failed = exc
        retry = self.retry.after(time.monotonic() - started)
        announce = partial(self._announce, call)
        async for attempt in retry.async_retrying(call.replayable, announce):
            with attempt:
                if attempt.retry_state.attempt_number == 1:
                    raise failed
                return await self._try(call, replay=True)
        raise AssertionError("unreachable: tenacity reraises the last failure")

    async def _try(self, call: _Call[T], *, replay: bool) -> T:
        await self.concurrency.acquire()
        latency: float | None = None
        ok = False
        try:
            epoch = await self._paced()
            request = self._request(self._http, call)
            started = time.monotonic()
            try:
                response = await self._exchange(request)
            except httpx.HTTPError as exc:
                latency = time.monotonic() - started
                self.counts.answered(None)
                raise self._transport_error(exc, call) from exc
            # A 429 is about the rate, the pacer's to learn; it tells the level nothing (and
            # its quick answer would make real ones look slow).
            latency = time.monotonic() - started if response.status_code != 429 else None
            self.counts.answered(response.status_code)
            ok = response.status_code < 500
        finally:
            self.concurrency.release(latency, ok=ok)
        return self._finish(call, response, replay, epoch)

    async def _paced(self) -> int:
        """Waits for the request's start slot; returns the epoch it was booked in. A slot
        booked at a pace cut while it waited is booked again, at the new pace."""
        while True:
            wait, epoch = self.limiter.reserve()
            if wait <= 0:
                return epoch
            await asyncio.sleep(wait)
            if self.limiter.epoch == epoch:
                return epoch

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        """Sends `request` and reads the answer fully.

        Straight through the transport's public `handle_async_request`: `httpx.AsyncClient.send`
        adds what we never use (auth flows, redirects, cookie jar, event hooks), and its cookie
        extraction alone cost ~5% of a fast extraction's CPU. Only where the environment names
        a proxy does the request take `send`, so httpx routes it exactly as it would for us.
        """
        if self._transport is None:
            return await self._http.send(request)
        response = await self._transport.handle_async_request(request)
        response.request = request
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def list_tables(self) -> list[TableSummary]:
        return await self._send(_list_tables())

    async def get_table(self, table_id: str) -> Table:
        return await self._send(_get_table(table_id))

    async def list_rows(
        self,
        table_id: str,
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        offset: int = 0,
        sort: str | None = None,
        order: Literal["asc", "desc"] | None = None,
        filter: Filter | None = None,
    ) -> RowPage:
        return await self._send(
            _list_rows(table_id, limit=limit, offset=offset, sort=sort, order=order, filter=filter)
        )

    async def create_row(self, table_id: str, fields: Mapping[str, Any]) -> Row:
        return await self._send(_create_row(table_id, fields))

    async def update_row(
        self, table_id: str, row_id: str, fields: Mapping[str, Any]
    ) -> Row | None:
        return await self._send(_update_row(table_id, row_id, fields))

    async def delete_row(self, table_id: str, row_id: str) -> None:
        await self._send(_delete_row(table_id, row_id))

    async def create_rows(self, table_id: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        return await self._send(_create_rows(table_id, rows))

    async def delete_rows(self, table_id: str, row_ids: Sequence[str]) -> None:
        await self._send(_delete_rows(table_id, row_ids))

