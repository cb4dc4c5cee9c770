"""Table Data Connector: extract tables to DataFrames, Parquet and SQL; push frames back."""

from __future__ import annotations

from connector.errors import (
    ApiError,
    ApiValidationError,
    AuthError,
    ConfigError,
    ConnectorError,
    InputError,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
    TransportError,
)
from connector.schema import Column, Table

__all__ = [
    "ApiError",
    "ApiValidationError",
    "AuthError",
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
]
