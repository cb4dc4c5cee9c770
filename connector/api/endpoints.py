"""The endpoints: what each request sends and how its answer is read.

An endpoint is described as a `Call` (method, path, parameters, body, how to read the body,
whether a replay is safe); `connector.api.core.AsyncClient._send` is what sends one. Arguments
are checked here, at the boundary, before anything is sent.

Where `API.md` leaves a choice open, every alternative in DESIGN.md's table is accepted:
200 or 201 on create, 200-with-row or 204 on update, ``{"rows": [...]}`` or a bare array on
bulk create, any 2xx on deletes, 400 or 422 for validation (decided by the body's code).
"""

from __future__ import annotations

import email.utils
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import httpx
import orjson

from connector.api.limits import MAX_BULK_ROWS
from connector.api.models import Row, RowPage, TableSummary
from connector.errors import ApiError, ConfigError, NotSent, RateLimited, ServerError

if TYPE_CHECKING:  # at run time only where a schema is read: it brings pyarrow
    from connector.schema import Table

__all__ = [
    "FILTER_OPERATORS",
    "Call",
    "Filter",
    "create_row",
    "create_rows",
    "delete_row",
    "delete_rows",
    "get_table",
    "list_rows",
    "list_tables",
    "update_row",
]

T = TypeVar("T")

#: ``{"Column": {"eq": value}}``; several columns are ANDed. Operators: ``eq``, ``gt``.
Filter = Mapping[str, Mapping[str, Any]]
#: The filter operators API.md names, in its order: the one definition (job files use it).
FILTER_OPERATORS: tuple[str, ...] = ("eq", "gt")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, described: sent by `AsyncClient._send`."""

    method: Literal["GET", "POST", "PATCH", "DELETE"]
    path: str
    read: Callable[[httpx.Response], T]
    params: Mapping[str, str | int] = field(default_factory=dict)
    body: Any = None
    #: For a DELETE: a 404 on a replay means an earlier, unanswered try did the work.
    gone_is_done: bool = False

    def replayable(self, exc: BaseException) -> bool:
        """Whether repeating this call after `exc` can do no harm."""
        if not isinstance(exc, ApiError) or not exc.retriable:
            return False
        if self.method != "POST":
            return True  # reads, PATCH (sets values) and DELETE are idempotent
        return isinstance(exc, RateLimited | NotSent)  # the POST certainly did not happen


def list_tables() -> Call[list[TableSummary]]:
    def read(response: httpx.Response) -> list[TableSummary]:
        data = _body(response)
        items = data["tables"] if isinstance(data, dict) else data
        return [TableSummary.from_api(t) for t in items]

    return Call("GET", "/tables", read)


def get_table(table_id: str) -> Call[Table]:
    from connector.schema import Table

    return Call("GET", f"/tables/{table_id}", lambda r: Table.from_api(_body(r)))


def list_rows(
    table_id: str,
    *,
    limit: int,
    offset: int,
    sort: str | None,
    order: Literal["asc", "desc"] | None,
    filter: Filter | None,
) -> Call[RowPage]:
    if limit < 1 or offset < 0:
        raise ConfigError(f"limit must be >= 1 and offset >= 0 (got {limit}, {offset})")
    params: dict[str, str | int] = {"limit": limit, "offset": offset}
    if sort is not None:
        params["sort"] = sort
    if order is not None:
        params["order"] = order
    if filter:
        params["filter"] = _encode_filter(filter)

    def read(response: httpx.Response) -> RowPage:
        data = _body(response)
        rows = data.get("rows") or []
        if not isinstance(rows, list) or not _all_rows(rows):
            raise ServerError(
                "the server sent a page whose `rows` are not row objects with an `id`",
                status=response.status_code,
                method="GET",
                url=str(response.request.url),
            )
        total, applied, at = data.get("total"), data.get("limit"), data.get("offset")
        return RowPage(
            raw=rows,
            total=int(total) if total is not None else None,
            limit=int(applied) if applied else limit,
            offset=int(at) if at is not None else offset,
            served_at=_served_at(response),
        )

    return Call("GET", f"/tables/{table_id}/rows", read, params=params)


def _served_at(response: httpx.Response) -> datetime | None:
    """The server's ``Date`` header (RFC 9110: its clock when it answered), None if absent
    or unreadable."""
    value = response.headers.get("Date")
    return _http_date(value) if value else None


@lru_cache(maxsize=4)
def _http_date(value: str) -> datetime | None:
    """An HTTP date read once: every page a server sends within one second carries the same
    one (1,000 pages: 0.03 s of parsing otherwise)."""
    try:
        served = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return served if served.tzinfo is not None else served.replace(tzinfo=UTC)


def create_row(table_id: str, fields: Mapping[str, Any]) -> Call[Row]:
    return Call(
        "POST",
        f"/tables/{table_id}/rows",
        lambda r: Row.from_api(_body(r)),
        body={"fields": dict(fields)},
    )


def update_row(table_id: str, row_id: str, fields: Mapping[str, Any]) -> Call[Row | None]:
    def read(response: httpx.Response) -> Row | None:
        if response.status_code == 204 or not response.content:
            return None
        return Row.from_api(_body(response))

    return Call(
        "PATCH", f"/tables/{table_id}/rows/{row_id}", read, body={"fields": dict(fields)}
    )


def delete_row(table_id: str, row_id: str) -> Call[None]:
    return Call("DELETE", f"/tables/{table_id}/rows/{row_id}", _nothing, gone_is_done=True)


def create_rows(table_id: str, rows: Sequence[Mapping[str, Any]]) -> Call[list[Row]]:
    return _bulk_create("create_rows", table_id, rows, lambda created: [Row.from_api(r) for r in created])


def add_rows(table_id: str, rows: Sequence[Mapping[str, Any]]) -> Call[int]:
    """`create_rows` counting the rows created instead of reading each back (a push of many
    rows needs no more)."""
    return _bulk_create("add_rows", table_id, rows, len)


def _bulk_create(
    name: str, table_id: str, rows: Sequence[Mapping[str, Any]], take: Callable[[list[Any]], T]
) -> Call[T]:
    """One bulk create of 1 to `MAX_BULK_ROWS` rows; `take` reads the rows the server created."""
    if not 1 <= len(rows) <= MAX_BULK_ROWS:
        raise ConfigError(f"{name} sends 1 to {MAX_BULK_ROWS} rows per request, not {len(rows)}")

    def read(response: httpx.Response) -> T:
        data = _body(response)
        created = data["rows"] if isinstance(data, dict) else data
        if not isinstance(created, list):
            raise TypeError("the rows created are not a list")
        return take(created)

    # orjson writes dicts only: another Mapping is copied, a dict sent as it is
    body = {"rows": [{"fields": f if type(f) is dict else dict(f)} for f in rows]}
    return Call("POST", f"/tables/{table_id}/rows/bulk", read, body=body)


def delete_rows(table_id: str, row_ids: Sequence[str]) -> Call[None]:
    if not 1 <= len(row_ids) <= MAX_BULK_ROWS:
        raise ConfigError(f"delete_rows sends 1 to {MAX_BULK_ROWS} ids per request, not {len(row_ids)}")
    return Call(
        "DELETE", f"/tables/{table_id}/rows/bulk", _nothing, body={"row_ids": list(row_ids)}
    )


_ROW_ID = itemgetter("id")


def _all_rows(items: list[Any]) -> bool:
    """Whether every item is a JSON object with an ``id``: looked up in C, as this runs per
    row (from JSON, only an object can be indexed by a string key)."""
    try:
        deque(map(_ROW_ID, items), maxlen=0)
    except (KeyError, TypeError, IndexError):
        return False
    return True


def _nothing(response: httpx.Response) -> None:
    return None


def _body(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise ServerError(
            f"the server sent a body that is not JSON (status {response.status_code})",
            status=response.status_code,
            method=response.request.method,
            url=str(response.request.url),
        ) from exc


def _encode_filter(filter: Filter) -> str:
    """Checks a filter's shape at the boundary and renders it for the query string."""
    if not isinstance(filter, Mapping):
        raise ConfigError(
            "a filter must be a mapping of column to one condition, like "
            f"{{'Status': {{'eq': 'Open'}}}}, not {type(filter).__name__}"
        )
    for column, condition in filter.items():
        if not isinstance(condition, Mapping) or len(condition) != 1:
            raise ConfigError(
                f"filter on {column!r} must be one operator and a value, like {{'eq': 1}}"
            )
        (op,) = condition
        if op not in FILTER_OPERATORS:
            raise ConfigError(
                f"filter on {column!r}: operator {op!r} is not one of {list(FILTER_OPERATORS)}"
            )
    return json.dumps(filter, separators=(",", ":"), default=str)
