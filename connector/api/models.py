"""Typed values the API returns. Tables and columns live in `connector.schema`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

__all__ = ["Row", "RowPage", "TableSummary"]


@dataclass(frozen=True)
class TableSummary:
    """An element of `GET /tables`."""

    id: str
    name: str
    columns: int
    rows: int
    created_at: str

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> TableSummary:
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            columns=int(data.get("columns", 0)),
            rows=int(data.get("rows", 0)),
            created_at=str(data.get("created_at", "")),
        )


@dataclass(slots=True)
class Row:
    """A row: its id, its cells by column name, and its timestamps (ISO 8601 strings).

    Not frozen, unlike the other models: one is built per row read, and a frozen dataclass
    costs about three times as much to build. Treat it as read-only all the same.
    """

    id: str
    fields: dict[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    updated_at: str | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Row:
        # Called once per row read: positional, and the parsed `fields` dict is taken as is.
        row_id, fields = data["id"], data.get("fields")
        return cls(
            row_id if isinstance(row_id, str) else str(row_id),
            fields if isinstance(fields, dict) else dict(fields or {}),
            data.get("created_at"),
            data.get("updated_at"),
        )


@dataclass(frozen=True)
class RowPage:
    """One page of `GET /tables/:id/rows`, with the limit and offset the server applied.

    `raw` holds the rows as the server sent them; `rows` builds the typed `Row`s on first
    use. The extraction types cells straight from `raw` into Arrow and never pays for them.
    """

    raw: Sequence[Mapping[str, Any]]
    total: int | None
    limit: int
    offset: int
    #: The server's clock when it answered (its ``Date`` header, to the second), if it said.
    served_at: datetime | None = None

    @cached_property
    def rows(self) -> list[Row]:
        return [Row.from_api(r) for r in self.raw]
