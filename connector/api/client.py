"""The blocking client, for scripts and notebooks: a facade over the async core.

`Client` holds ONE `AsyncClient` (`connector.api.core`: one transport, one rate limiter, one
retry policy, the one request path) and an `Engine` that runs each blocking call as one
coroutine of that core on the client's own event loop (see `connector.api.engine`).
Library code that needs more than one call in one operation runs its own coroutine with
`Client.run`, drives an async generator with `Client.stream`, and reaches the core as
`Client.aio`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Coroutine, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

import httpx

from connector.api.concurrency import ConcurrencyLimit
from connector.api.core import AsyncClient
from connector.api.counts import RequestCounts
from connector.api.endpoints import Filter
from connector.api.engine import Engine
from connector.api.limits import DEFAULT_PAGE_SIZE
from connector.api.models import Row, RowPage, TableSummary
from connector.api.ratelimit import RateLimiter
from connector.api.retry import RetryPolicy

if TYPE_CHECKING:  # at run time only where a schema is read: it brings pyarrow
    from connector.schema import Table

__all__ = ["AsyncClient", "Client", "Filter", "RequestCounts"]

T = TypeVar("T")


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
        key_source: str | None = None,
        url_source: str | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        limiter: RateLimiter | None = None,
        max_concurrency: int | None = None,
        counts: RequestCounts | None = None,
    ) -> None:
        self._aio = AsyncClient(
            base_url, api_key, timeout=timeout, retry=retry,
            key_source=key_source, url_source=url_source,
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
