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
import os
import time
import urllib.request
from collections import deque
from collections.abc import (
    AsyncIterable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from operator import itemgetter
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar
from urllib.parse import urlencode

import httpx
import orjson

from connector.api.engine import Engine
from connector.api.limits import DEFAULT_PAGE_SIZE, MAX_BULK_ROWS
from connector.api.models import Row, RowPage, TableSummary
from connector.api.ratelimit import RateLimiter, limiter_for
from connector.api.retry import RetryPolicy
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
from connector.schema import Table

__all__ = ["AsyncClient", "Client", "Filter"]

T = TypeVar("T")

#: ``{"Column": {"eq": value}}``; several columns are ANDed. Operators: ``eq``, ``gt``.
Filter = Mapping[str, Mapping[str, Any]]
FILTER_OPERATORS = frozenset({"eq", "gt"})

ENV_BASE_URL = "CONNECTOR_BASE_URL"
ENV_API_KEY = "CONNECTOR_API_KEY"
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


# --- the endpoints: what to send and how to read the answer -------------------------------


def _list_tables() -> _Call[list[TableSummary]]:
    def read(response: httpx.Response) -> list[TableSummary]:
        data = _body(response)
        items = data["tables"] if isinstance(data, dict) else data
        return [TableSummary.from_api(t) for t in items]

    return _Call("GET", "/tables", read)


def _get_table(table_id: str) -> _Call[Table]:
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
        )

    return _Call("GET", f"/tables/{table_id}/rows", read, params=params)


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
    for column, condition in filter.items():
        if not isinstance(condition, Mapping) or len(condition) != 1:
            raise ConfigError(
                f"filter on {column!r} must be one operator and a value, like {{'eq': 1}}"
            )
        (op,) = condition
        if op not in FILTER_OPERATORS:
            raise ConfigError(
                f"filter on {column!r}: operator {op!r} is not one of {sorted(FILTER_OPERATORS)}"
            )
    return json.dumps(filter, separators=(",", ":"), default=str)


# --- answers into errors ------------------------------------------------------------------


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


class _Settings:
    """Where, who (kept secret), and how to turn answers into values."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy | None,
        limiter: RateLimiter | None,
    ) -> None:
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        api_key = api_key or os.environ.get(ENV_API_KEY)
        if not base_url:
            raise ConfigError(f"no API base URL: pass base_url or set {ENV_BASE_URL} (it ends in /v1)")
        if not api_key:
            raise ConfigError(f"no API key: pass api_key or set {ENV_API_KEY}")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.limiter = limiter if limiter is not None else limiter_for(self.base_url, api_key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

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

    def _transport_error(self, exc: httpx.HTTPError, call: _Call[Any]) -> TransportError:
        never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        kind = NotSent if never_sent else TransportError
        what = "could not connect to" if never_sent else "lost the connection to"
        return kind(
            self._redact(f"{what} {self.base_url} ({type(exc).__name__}: {exc})"),
            method=call.method,
            url=f"{self.base_url}{call.path}",
        )

    def _finish(self, call: _Call[T], response: httpx.Response, replay: bool) -> T:
        """Feeds the limiter, then reads the body or raises the error the status means."""
        if response.status_code == 429:
            self.limiter.on_throttled()
        else:
            self.limiter.on_accepted()
        if response.is_success:
            return call.read(response)
        if response.status_code == 404 and call.gone_is_done and replay:
            return call.read(response)
        raise self._error(call, response)

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
            kind, text = AuthError, f"the API key was refused{said}; set {ENV_API_KEY} to a valid key"
        elif status == 403:
            kind = PermissionDenied
            text = (
                f"the key may not {'read' if call.method == 'GET' else 'change'} this{said}; "
                "use a key with access to the table (it may be read-only or scoped to other tables)"
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
    ``CONNECTOR_API_KEY``. `transport` is the test seam (an httpx transport, sync or async),
    used by every read and write; `limiter` defaults to the one shared by every client of
    this key in the process. Each method is one call of the async core (`aio`), run on this
    client's event loop.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._aio = AsyncClient(
            base_url, api_key, timeout=timeout, retry=retry, transport=transport, limiter=limiter
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
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout, retry, limiter)
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
        async for attempt in retry.async_retrying(call.replayable):
            with attempt:
                if attempt.retry_state.attempt_number == 1:
                    raise failed
                return await self._try(call, replay=True)
        raise AssertionError("unreachable: tenacity reraises the last failure")

    async def _try(self, call: _Call[T], *, replay: bool) -> T:
        wait = self.limiter.reserve()
        if wait > 0:
            await asyncio.sleep(wait)
        request = self._request(self._http, call)
        try:
            response = await self._exchange(request)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, call) from exc
        return self._finish(call, response, replay)

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

