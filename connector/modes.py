"""What a push or a load may do to its target: the modes, named once.

The CLI's choices, the job file's checks and the library's own all import these. The
module is cheap to import on purpose (no pandas, no SQLAlchemy): `connector --help` lists
the choices without loading either.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "DEFAULT_PUSH_MODE",
    "MERGED_CELLS",
    "PUSH_MODES",
    "PUSH_SUFFIXES",
    "WRITE_MODES",
    "MergedCells",
    "PushMode",
    "WriteMode",
]

#: How a push changes a table to match its source, by key:
#: ``insert`` creates rows whose key is new; ``update`` changes rows whose key exists;
#: ``upsert`` does both; ``mirror`` upserts, then deletes the rows the source lacks.
PushMode = Literal["insert", "update", "upsert", "mirror"]
PUSH_MODES: tuple[PushMode, ...] = get_args(PushMode)
DEFAULT_PUSH_MODE: PushMode = "upsert"
#: The files a push reads, by suffix (any case); any other suffix is refused, naming these:
#: a file read as the wrong kind would plan wrong writes.
PUSH_SUFFIXES = (".csv", ".xlsx", ".xlsm", ".parquet", ".pq")

#: How a load writes a table into a destination: ``replace`` it whole, ``append`` the rows,
#: or ``merge`` them by ``_id`` (an upsert).
WriteMode = Literal["replace", "append", "merge"]
WRITE_MODES: tuple[WriteMode, ...] = get_args(WriteMode)

#: What a push does with a workbook's merged cells, whose covered cells read as empty:
#: ``refuse`` names each merged range and writes nothing; ``fill`` copies each merge's value
#: into the cells it covers.
MergedCells = Literal["refuse", "fill"]
MERGED_CELLS: tuple[MergedCells, ...] = get_args(MergedCells)
