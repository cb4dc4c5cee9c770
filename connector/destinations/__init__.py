"""Where tables go: one protocol every destination implements, one registry of kinds.

    base        the protocol (`Destination`): check, version, held, claim, locate, stored,
                scan, apply, close; what crosses it (`Target`, `TableChange`, `Committed`);
                `open_destination`
    registry    every kind (`KINDS`, `Capabilities`, its options), `DestinationConfig`,
                `make_config` (cheap to import)
    evolve      column changes (`diff`) and the one set of rules converting held values
    held        which table each name holds (a destination's record of names; the names
                themselves: `connector.naming`)
    remembered  what a sync keeps of a destination whose version it can read cheaply
    storage     the filesystem layer under the file formats: a local folder or object storage
    files       Parquet / CSV files          sql      SQLAlchemy (SQLite, PostgreSQL)
    duckdb      a DuckDB file                delta    Delta Lake tables
    iceberg     Apache Iceberg tables

Destinations know no readers, jobs or push: the runner (`connector.jobs`) feeds them Arrow
batches and reads back what they hold. The names below load on first use, so reading the
registry (the CLI's choices) costs no pyarrow.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from connector.destinations.base import (
        Committed,
        Destination,
        TableChange,
        Target,
        open_destination,
    )
    from connector.destinations.registry import (
        KINDS,
        Capabilities,
        DeletePolicy,
        DestinationConfig,
        Kind,
        make_config,
    )

__all__ = [
    "KINDS",
    "Capabilities",
    "Committed",
    "DeletePolicy",
    "Destination",
    "DestinationConfig",
    "Kind",
    "TableChange",
    "Target",
    "make_config",
    "open_destination",
]

_REGISTRY = {
    "KINDS", "Capabilities", "DeletePolicy", "DestinationConfig", "Kind", "make_config",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = "registry" if name in _REGISTRY else "base"
    value = getattr(importlib.import_module(f"connector.destinations.{home}"), name)
    globals()[name] = value
    return value
