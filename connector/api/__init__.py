"""The HTTP client of the Table Data REST API: `Client`, `AsyncClient`, their retry policy."""

from __future__ import annotations

from connector.api.client import AsyncClient, Client
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
