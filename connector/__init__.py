"""Table Data Connector: extract tables to DataFrames, Parquet and SQL; push frames back.

The public names load on first use (PEP 562): `import connector.cli` must not pay for
pyarrow, which `Column`, `Table` and `Workspace` bring, before a command asks for it.
"""

from __future__ import annotations

import importlib

#: typing.TYPE_CHECKING without importing typing (mypy reads any `if TYPE_CHECKING:` so):
#: the CLI catches Ctrl-C only once its own module runs, after this one.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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

#: Where each public name is defined (the module imported when the name is first read).
_HOMES = {
    **dict.fromkeys(("AsyncClient", "Client"), "connector.api"),
    **dict.fromkeys(("Column", "Table"), "connector.schema"),
    "Workspace": "connector.workspace",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES.get(name, "connector.errors")), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
