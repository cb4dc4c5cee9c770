"""Where tables go: one protocol every destination implements, one registry of kinds.

    base        the protocol (`Destination`): check, locate, stored, scan, apply, close;
                what crosses it (`Target`, `TableChange`, `Committed`, `Capabilities`)
    registry    every kind (`KINDS`), `DestinationConfig`, `make_config`, `open_destination`
    evolve      column changes (`diff`) and the one set of rules converting held values
    naming      a table's name in every destination of a run
    storage     the filesystem layer under the file formats: a local folder or object storage
    files       Parquet / CSV files          sql      SQLAlchemy (SQLite, PostgreSQL)
    duckdb      a DuckDB file                delta    Delta Lake tables
    iceberg     Apache Iceberg tables

Destinations know no readers, jobs or push: the runner (`connector.jobs`) feeds them Arrow
batches and reads back what they hold.
"""

from __future__ import annotations

from connector.destinations.base import (
    DELETED_AT,
    Capabilities,
    Committed,
    DeletePolicy,
    Destination,
    TableChange,
    Target,
)
from connector.destinations.registry import (
    KINDS,
    DestinationConfig,
    Kind,
    make_config,
    open_destination,
)

__all__ = [
    "DELETED_AT",
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
