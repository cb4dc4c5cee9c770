"""The async core: the one request path of every client.

`AsyncClient._send` is the only place that talks to httpx: it takes a slot of the client's
`ConcurrencyLimit`, paces the request through the key's `RateLimiter`, retries per the
`RetryPolicy` (tenacity) what may be replayed, and turns every failure into one of
`connector.errors` (`connector.api.responses`). httpx's exceptions never escape. What each
endpoint sends and reads is `connector.api.endpoints`; the blocking facade, `connector.api.client`.

A transport passed to the client is used by every request: an async one
(`httpx.AsyncBaseTransport`, e.g. `httpx.ASGITransport`, `httpx.MockTransport`) as is, a
sync-only one (`httpx.BaseTransport`, e.g. `httpx.WSGITransport`) through its public
`handle_request`, called on the loop (a sync transport blocks while it answers).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections.abc import Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar
from urllib.parse import urlencode

import httpx
import orjson
from tenacity import RetryCallState

from connector.api import endpoints
from connector.api.concurrency import ConcurrencyLimit
from connector.api.counts import RequestCounts
from connector.api.endpoints import Call, Filter
from connector.api.limits import DEFAULT_PAGE_SIZE
from connector.api.models import Row, RowPage, TableSummary
from connector.api.quota import published
from connector.api.ratelimit import RateLimiter, Slot
from connector.api.responses import retry_reason, shape_error, status_error, transport_error
from connector.api.retry import RetryEvent, RetryPolicy
from connector.api.settings import Settings, resolve_max_concurrency
from connector.errors import ApiError, ConfigError, ConnectorError

if TYPE_CHECKING:  # at run time only where a schema is read: it brings pyarrow
    from connector.schema import Table

__all__ = ["CONNECTION_LIMITS", "AsyncClient"]

T = TypeVar("T")

#: Retry waits are announced here when a client has no `on_retry` observer.
retry_log = logging.getLogger("connector.api.retry")

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


#: What tells two requests apart: method, path and query.
_Key = tuple[str, str, tuple[tuple[str, str | int], ...]]


def _key(call: Call[Any]) -> _Key:
    return call.method, call.path, tuple(sorted(call.params.items()))


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


class AsyncClient(Settings):
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
        key_source: str | None = None,
        url_source: str | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        limiter: RateLimiter | None = None,
        max_concurrency: int | None = None,
        counts: RequestCounts | None = None,
    ) -> None:
        super().__init__(
            base_url, api_key, timeout, retry, limiter,
            key_source=key_source, url_source=url_source, counts=counts,
        )
        #: Requests in flight, adapted below the cap; shared by every read and write of
        #: this client (`connector.api.concurrency`).
        self.concurrency = ConcurrencyLimit(resolve_max_concurrency(max_concurrency))
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
        #: First pages fetched early (`fetch_early`), by table id, with the request each answers.
        self._early: dict[str, tuple[_Key, RowPage]] = {}
        #: Writes sent so far: a page fetched early while one went is not kept.
        self._writes = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._early.clear()
        await self._http.aclose()

    async def fetch_early(self, table_id: str, *, limit: int, sort: str) -> None:
        """Fetches now the first page a full read of `table_id` will ask for (`limit` rows
        by `sort` ascending, unfiltered), so the read waits for no round trip of its own:
        the first `list_rows` asking exactly that takes this answer instead of sending. A
        failure is dropped (the read meets it again). A write through this client drops
        every page fetched early: it may have changed what the read must see."""
        call = endpoints.list_rows(
            table_id, limit=limit, offset=0, sort=sort, order="asc", filter=None
        )
        writes = self._writes
        try:
            page = await self._send(call)
        except ConnectorError:
            return
        if writes == self._writes:
            self._early[table_id] = (_key(call), page)

    async def _send(self, call: Call[T]) -> T:
        """The one request path: pace, send, retry what is safe, map failures to our errors."""
        if call.method != "GET":
            self._writes += 1
            self._early.clear()
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

    async def _try(self, call: Call[T], *, replay: bool) -> T:
        await self.concurrency.acquire()
        latency: float | None = None
        ok = False
        try:
            slot = await self._paced()
            request = self._request(self._http, call)
            started = time.monotonic()
            try:
                response = await self._exchange(request)
            except httpx.HTTPError as exc:
                latency = time.monotonic() - started
                self.counts.answered(None)
                raise transport_error(exc, call, self.base_url, self._url_source) from exc
            # A 429 is about the rate, the pacer's to learn; it tells the level nothing (and
            # its quick answer would make real ones look slow).
            latency = time.monotonic() - started if response.status_code != 429 else None
            self.counts.answered(response.status_code)
            ok = response.status_code < 500
        finally:
            self.concurrency.release(latency, ok=ok)
        return self._finish(call, response, replay, slot)

    async def _paced(self) -> Slot:
        """Waits for the request's start slot and returns it. A slot booked at a pace cut
        while it waited is booked again, at the new pace."""
        while True:
            slot = self.limiter.reserve()
            if slot.wait <= 0:
                return slot
            await asyncio.sleep(slot.wait)
            if self.limiter.epoch == slot.epoch:
                return slot

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

    def _announce(self, call: Call[Any], state: RetryCallState) -> None:
        """Tells the observer (or the ``connector.api.retry`` log) of the wait to come."""
        exc = state.outcome.exception() if state.outcome else None
        self.counts.retried()
        event = RetryEvent(
            seconds=state.upcoming_sleep,
            attempt=state.attempt_number + 1,
            of=self.retry.attempts,
            reason=retry_reason(exc),
            method=call.method,
            url=f"{self.base_url}{call.path}",
        )
        if self.retry.on_retry is not None:
            self.retry.on_retry(event)
        else:
            retry_log.warning("%s", event, extra={"retry_event": event})

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
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

    def _finish(self, call: Call[T], response: httpx.Response, replay: bool, slot: Slot) -> T:
        """Feeds the limiter (with the limit the answer publishes, if any), then reads the
        body or raises the error the status means."""
        quota = published(response.headers)
        if response.status_code == 429:
            self.limiter.on_throttled(slot, quota)
        else:
            self.limiter.on_accepted(slot, quota)
        if response.is_success or (response.status_code == 404 and call.gone_is_done and replay):
            try:
                return call.read(response)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                raise shape_error(call, response, exc, self.base_url) from exc
        raise status_error(call, response, self.base_url, self._key_source)

    async def list_tables(self) -> list[TableSummary]:
        return await self._send(endpoints.list_tables())

    async def get_table(self, table_id: str) -> Table:
        return await self._send(endpoints.get_table(table_id))

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
        call = endpoints.list_rows(
            table_id, limit=limit, offset=offset, sort=sort, order=order, filter=filter
        )
        early = self._early.get(table_id)
        if early is not None and early[0] == _key(call):
            del self._early[table_id]
            return early[1]
        return await self._send(call)

    async def create_row(self, table_id: str, fields: Mapping[str, Any]) -> Row:
        return await self._send(endpoints.create_row(table_id, fields))

    async def update_row(
        self, table_id: str, row_id: str, fields: Mapping[str, Any]
    ) -> Row | None:
        return await self._send(endpoints.update_row(table_id, row_id, fields))

    async def delete_row(self, table_id: str, row_id: str) -> None:
        await self._send(endpoints.delete_row(table_id, row_id))

    async def create_rows(self, table_id: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        return await self._send(endpoints.create_rows(table_id, rows))

    async def add_rows(self, table_id: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """`create_rows` saying only how many rows were created (none is read back)."""
        return await self._send(endpoints.add_rows(table_id, rows))

    async def delete_rows(self, table_id: str, row_ids: Sequence[str]) -> None:
        await self._send(endpoints.delete_rows(table_id, row_ids))

