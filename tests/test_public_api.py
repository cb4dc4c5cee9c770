"""The public surface is pinned: it grows only on purpose."""

from __future__ import annotations

import connector
import connector.api


def test_the_package_exports_exactly_these_names() -> None:
    assert connector.__all__ == [
        "ApiError",
        "ApiValidationError",
        "AsyncClient",
        "AuthError",
        "Client",
        "Column",
        "ConfigError",
        "ConnectorError",
        "InputError",
        "NotFound",
        "PermissionDenied",
        "RateLimited",
        "ServerError",
        "Table",
        "TransportError",
        "Workspace",
    ]
    assert all(hasattr(connector, name) for name in connector.__all__)


def test_the_client_package_exports_exactly_these_names() -> None:
    assert connector.api.__all__ == [
        "DEFAULT_PAGE_SIZE",
        "MAX_BULK_ROWS",
        "MAX_PAGE_SIZE",
        "AsyncClient",
        "Client",
        "RateLimiter",
        "RetryPolicy",
    ]
    assert (connector.api.DEFAULT_PAGE_SIZE, connector.api.MAX_PAGE_SIZE, connector.api.MAX_BULK_ROWS) == (
        100, 1000, 100)
