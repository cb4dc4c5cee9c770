"""Table Data Connector: extract tables to DataFrames, Parquet and SQL; push frames back."""

from __future__ import annotations

from connector.api import AsyncClient, Client
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
from connector.workspace import Workspace

__all__ = [
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
