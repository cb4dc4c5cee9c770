"""What a table is called in a destination: one name per table for the whole run.

The table's name, or ``<name>-<table id>`` for a later table with a name an earlier one has
(compared case-insensitively, as file systems and SQL may). Files sanitise it further
(`file_name`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from connector.api.models import TableSummary

__all__ = ["NAME_BYTES", "file_name", "fit_name", "target_names"]


def target_names(tables: Sequence[TableSummary]) -> dict[str, str]:
    """Each table's name in every destination: the first table (in listing order) with a
    name keeps it; each later one with the same name (in any case) gets ``<name>-<id>``.
    A name too long for a file (see `fit_name`) is cut and gets ``-<id>`` as well."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for t in tables:
        if t.id in names:
            continue
        name = fit_name(t.name, t.id)
        names[t.id] = name if name.casefold() not in taken else f"{name}-{t.id}"
        taken.add(name.casefold())
    return names


#: File systems allow 255 bytes a name. A table's file also gets a suffix (``.parquet``)
#: and, while it is written, a temp name around it (``.<name>.<8 random>.partial``):
#: this many bytes are left for the table's name.
NAME_BYTES = 255 - len(".parquet") - len("..12345678.partial") - 1


def fit_name(name: str, table_id: str) -> str:
    """`name`, or when its UTF-8 form is longer than `NAME_BYTES`, its start cut on a
    character boundary plus ``-<table id>``: still recognisable, and unique."""
    if len(name.encode("utf-8")) <= NAME_BYTES:
        return name
    tail = f"-{table_id}"
    room = NAME_BYTES - len(tail.encode("utf-8"))
    cut = name.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return cut + tail


def file_name(table_name: str) -> str:
    """A file name for a table: path separators and a leading dot are replaced."""
    name = re.sub(r"[/\\\x00]", "_", table_name)
    return f"_{name}" if name.startswith(".") or not name else name
