"""Optional dependencies, imported on first use with one clear message when missing.

Each platform lives behind an extra (`pip install 'table-data-connector[s3]'`); the core
install never imports them. `require` is the one way to import one, so a missing extra is
always a `MissingExtra` (exit 2) naming the extra to install, never an ImportError.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from connector.errors import MissingExtra

__all__ = ["EXTRAS", "require"]

#: Top-level module → the extra that installs it.
EXTRAS: dict[str, str] = {
    "s3fs": "s3",
    "gcsfs": "gcs",
    "adlfs": "azure",
    "duckdb": "duckdb",
    "deltalake": "delta",
    "pyiceberg": "iceberg",
    "dagster": "dagster",
    "dlt": "dlt",
    "singer_sdk": "singer",
    "prometheus_client": "metrics",
}


def require(module: str, feature: str) -> ModuleType:
    """Import `module` (a dotted name) for `feature`, or raise `MissingExtra` naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        if exc.name is not None and exc.name.partition(".")[0] != top:
            raise  # the extra is installed but broken: show the real cause
        raise MissingExtra(feature, EXTRAS.get(top, top)) from exc
