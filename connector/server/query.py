"""`GET /rows` query parameters, validated into a `RowQuery` that knows its SQL.

Sorting is always total: the sort column, then `created_at`, then `id`, all in the same
direction, so a page boundary is a single key and paging can seek by it (see `paging`).
Filters compare by column type: numbers as numbers, dates as ISO strings, checkboxes as
booleans; ``{"eq": null}`` matches empty cells. A filter holds at most `MAX_CONDITIONS`
conditions; a number outside the 64-bit integer range is refused like any bad value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connector.server.columns import ColumnDef, TableDef, parse_json
from connector.server.problems import bad_request, echo, invalid

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
SYSTEM_FIELDS = ("id", "created_at", "updated_at")
OPERATORS = {"eq": "=", "gt": ">"}
#: Conditions a filter may hold (SQLite nests each one deeper; 1000 overflow its parser).
MAX_CONDITIONS = 100

_NATURAL = re.compile(r"[0-9]{1,15}")

# Empty cells sort first ascending, like SQL NULLs, but stay comparable for seeking.
_EMPTY_SORTS_AS = "-9e999"


@dataclass(frozen=True)
class Condition:
    """One filter term: `sql` with a single `?` for `value` (None means no parameter)."""

    sql: str
    value: Any


@dataclass(frozen=True)
class RowQuery:
    """A validated list request: what to match, how to order, which slice."""

    table_id: str
    limit: int
    offset: int
    keys: tuple[str, ...]  # SQL expressions of the total order, most significant first
    descending: bool
    conditions: tuple[Condition, ...]

    @property
    def signature(self) -> tuple[Any, ...]:
        """Identifies the ordered result set (not the slice): pages of one query share it."""
        return (self.table_id, self.keys, self.descending, self.conditions)

    def where(self, *, seeking: bool = False) -> tuple[str, list[Any]]:
        """The conditions. `seeking` (a page found by seeking a key of the order): a filter
        on the order's own leading column is written so SQLite cannot use it as the index
        range (``+created_at > ?``), or it starts at the filter's bound and walks every row
        up to the key: each page then costs more the deeper it is (20-30 ms against 0.05)."""
        sql = ["table_id = ?"]
        params: list[Any] = [self.table_id]
        lead = self.keys[0]
        for cond in self.conditions:
            sql.append("+" + cond.sql if seeking and cond.sql.startswith(lead + " ") else cond.sql)
            if cond.value is not None:
                params.append(cond.value)
        return " AND ".join(sql), params

    def order_by(self, keys: tuple[str, ...] | None = None) -> str:
        direction = " DESC" if self.descending else ""
        return ", ".join(k + direction for k in (keys or self.keys))

    @property
    def by_cell(self) -> bool:
        """Sorted by a user column: the leading key is a JSON expression, not a column."""
        return len(self.keys) == 3

    def sort_index(self) -> str | None:
        """DDL of the expression index that lets SQLite walk a user-column order."""
        if not self.by_cell:
            return None
        name = "rows_by_" + hashlib.sha1(self.keys[0].encode()).hexdigest()[:16]
        return f"CREATE INDEX IF NOT EXISTS {name} ON rows (table_id, {', '.join(self.keys)})"

    def segments(self, key: tuple[Any, ...] | None, *, exact: bool) -> list[tuple[str, list[Any]]]:
        """SELECTs (without LIMIT) whose results, concatenated, are this order from `key` on.

        With no key: the whole order. With a key: rows at or after it, as index ranges.
        SQLite seeks a row-value range on plain columns, but not on an expression, so a
        user-column order with `exact` seeks in two ranges: the rest of the key's group
        (equal cell, then created_at, id), then the later groups. Without `exact` (an
        OFFSET follows) it seeks to the group and filters by the whole key.
        """
        where, params = self.where(seeking=key is not None)
        select = f"SELECT id, created_at, updated_at, fields, {', '.join(self.keys)} FROM rows WHERE "
        if key is None:
            return [(f"{select}{where} ORDER BY {self.order_by()}", params)]
        at_or_after = "<=" if self.descending else ">="
        after = "<" if self.descending else ">"
        cols, marks = ", ".join(self.keys), ", ".join("?" for _ in self.keys)
        whole = f"({cols}) {at_or_after} ({marks})"
        if not self.by_cell:
            return [(f"{select}{where} AND {whole} ORDER BY {self.order_by()}", [*params, *key])]
        head, rest = self.keys[0], self.keys[1:]
        if not exact:
            sql = f"{select}{where} AND {head} {at_or_after} ? AND {whole} ORDER BY {self.order_by()}"
            return [(sql, [*params, key[0], *key])]
        same = f"{where} AND {head} = ? AND ({', '.join(rest)}) {at_or_after} (?, ?)"
        later = f"{where} AND {head} {after} ?"
        return [
            (f"{select}{same} ORDER BY {self.order_by(rest)}", [*params, *key]),
            (f"{select}{later} ORDER BY {self.order_by()}", [*params, key[0]]),
        ]


def parse(
    table: TableDef,
    params: Mapping[str, str],
    *,
    max_limit: int = MAX_LIMIT,
    system_filters: bool = True,
) -> RowQuery:
    """Validate `limit`, `offset`, `sort`, `order` and `filter`; 400 naming the parameter.

    `max_limit` and `system_filters` are for faults: a server with smaller pages, or one
    that refuses filters on `id`, `created_at` and `updated_at` (field "filter").
    """
    limit = min(_natural(params, "limit", DEFAULT_LIMIT), max_limit)
    offset = _natural(params, "offset", 0)
    order = params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise bad_request(f"`order` must be 'asc' or 'desc', got {echo(params['order'])}", field="order")
    sort = params.get("sort") or "created_at"
    return RowQuery(
        table_id=table.id,
        limit=limit,
        offset=offset,
        keys=_order_keys(table, sort),
        descending=order == "desc",
        conditions=_conditions(table, params.get("filter"), system_filters=system_filters),
    )


def _natural(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not _NATURAL.fullmatch(raw):
        raise bad_request(f"`{name}` must be a non-negative integer, got {echo(raw)}", field=name)
    return int(raw)


def _cell(col: ColumnDef) -> str:
    # Column names never hold quotes or backslashes (columns.parse_spec); ' is doubled for SQL.
    path = '$."' + col.name + '"'
    return "json_extract(fields, '" + path.replace("'", "''") + "')"


def _target(table: TableDef, key: str) -> ColumnDef | str | None:
    """A user column, else a system field, else a unique case-insensitive column match."""
    exact = table.column(key)
    if exact is not None:
        return exact
    if key in SYSTEM_FIELDS:
        return key
    return table.resolve(key)


def _order_keys(table: TableDef, sort: str) -> tuple[str, ...]:
    target = _target(table, sort)
    if target is None:
        raise invalid(sort, f"cannot sort by {echo(sort)}: no such column; columns: {table.names()} or {list(SYSTEM_FIELDS)}")
    if target == "id":
        return ("id",)
    if isinstance(target, str):
        return (target, "id")
    return (f"coalesce({_cell(target)}, {_EMPTY_SORTS_AS})", "created_at", "id")


def _conditions(table: TableDef, raw: str | None, *, system_filters: bool) -> tuple[Condition, ...]:
    if raw is None or raw.strip() == "":
        return ()
    try:
        spec = parse_json(raw)
    except ValueError as exc:
        raise invalid("filter", f"`filter` is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise invalid("filter", '`filter` must be a JSON object like {"Status": {"eq": "Active"}}')
    conditions: list[Condition] = []
    if sum(len(ops) if isinstance(ops, dict) else 1 for ops in spec.values()) > MAX_CONDITIONS:
        raise invalid("filter", f"`filter` holds more than {MAX_CONDITIONS} conditions")
    for key, ops in spec.items():
        target = _target(table, key)
        if target is None:
            raise invalid(key, f"cannot filter on {echo(key)}: no such column; columns: {table.names()}")
        if isinstance(target, str) and not system_filters:
            raise invalid("filter", f"this server cannot filter on the system field {echo(key)}")
        if not isinstance(ops, dict) or not ops:
            raise invalid(key, f'filter on {echo(key)} must be an object like {{"eq": value}} or {{"gt": value}}')
        for op, value in ops.items():
            if op not in OPERATORS:
                raise invalid(key, f"filter on {echo(key)}: unknown operator {echo(op)}; operators: {sorted(OPERATORS)}")
            conditions.append(_condition(target, key, op, value))
    return tuple(conditions)


def _condition(target: ColumnDef | str, key: str, op: str, value: Any) -> Condition:
    expr = target if isinstance(target, str) else _cell(target)
    if value is None:
        if op != "eq":
            raise invalid(key, f"filter on {echo(key)}: {echo(op)} needs a value, not null")
        return Condition(f"{expr} IS NULL", None)
    if isinstance(target, str):  # system fields are strings: ids and ISO timestamps
        if not isinstance(value, str):
            raise invalid(key, f"filter on {echo(key)} compares with a string")
        return Condition(f"{expr} {OPERATORS[op]} ?", value)
    try:
        checked = _filter_value(target, value)
    except ValueError as exc:
        raise invalid(key, f"filter on {echo(key)} ({target.type}): {exc}") from None
    return Condition(f"{expr} {OPERATORS[op]} ?", checked)


def _filter_value(col: ColumnDef, value: Any) -> Any:
    if col.type == "choice":  # comparing with a value outside the options is allowed
        if not isinstance(value, str):
            raise ValueError("expects a string")
        return value
    if col.type == "checkbox":
        return int(col.check(value))  # SQLite's json_extract gives 1 / 0
    return col.check(value)
