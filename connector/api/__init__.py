"""The HTTP client of the Table Data REST API.

`AsyncClient` is the engine (one request path, retries, the shared rate limiter); `Client`
is its blocking facade, running each call on its own event loop (`connector.api.engine`).
Library code drives the core through `Client.run`, `Client.stream` and `Client.aio`;
every read of rows goes through the one page reader, `connector.api.paging.PageReader`.
"""

from __future__ import annotations

from connector.api.client import Client
from connector.api.core import AsyncClient
from connector.api.limits import DEFAULT_PAGE_SIZE, MAX_BULK_ROWS, MAX_PAGE_SIZE
from connector.api.ratelimit import RateLimiter
from connector.api.retry import RetryPolicy

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_BULK_ROWS",
    "MAX_PAGE_SIZE",
    "AsyncClient",
    "Client",
    "RateLimiter",
    "RetryPolicy",
]
