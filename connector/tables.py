"""Which tables a user meant: the one resolver (what a user typed -> a table id), and the one
way every entry point selects tables and fetches their schemas (`select`, `fetch`).

Every command and API that takes a table by name or id goes through `resolve_table`, so one
value finds the same table, or fails with the same message and exit code (2), everywhere:

1. an exact table id;
2. else an exact table name;
3. else a name equal to it ignoring case (`str.casefold`).

Two tables matching at the same step are ambiguous: the error lists their ids, to use one.
Nothing matching is a `TableNotFound` that names the value and the close matches
("did you mean 'Orders'?"), or the tables there are. One exception: a value shaped like a
table id (``tbl_...``) that the listing lacks is returned as is, because a scoped key does
not list every table it may address; the server then answers 403 (the caller skips the
table) or 404 (the caller raises `table_not_found`).

`select` (every table, or `include` less `exclude`, each schema fetched at once, a table the
key may not read set aside) and `fetch` (one table by the resolver's rules) are what the
commands, jobs, the Python API, Dagster, dlt, Singer, Spark and push all call. Cheap to
import (the CLI imports this): the client is only named here.
"""

from __future__ import annotations

import asyncio
import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from connector.errors import AuthError, ConfigError, ConnectorError, NotFound, TableNotFound

if TYPE_CHECKING:
    from connector.api.core import AsyncClient
    from connector.api.models import TableSummary
    from connector.schema import Table

__all__ = [
    "Refused",
    "Selection",
    "fetch",
    "is_table_id",
    "resolve_table",
    "resolve_tables",
    "select",
    "selected_ids",
    "table_not_found",
]

#: A table id as the API writes it (`tbl_<id>`).
TABLE_ID = re.compile(r"tbl_[A-Za-z0-9_-]+")

#: At most this many close matches are suggested, and this many names listed otherwise.
MAX_SUGGESTIONS = 3
MAX_LISTED = 10
#: The most cells the first pages fetched with the schemas may hold together (`select`):
#: a page's rows times the listing's columns and the three system fields (tens of MB).
EARLY_CELLS = 250_000


def is_table_id(value: str) -> bool:
    """True when `value` has the shape of a table id (``tbl_...``)."""
    return TABLE_ID.fullmatch(value) is not None


def resolve_table(tables: Sequence[TableSummary], wanted: str) -> str:
    """The id of the table `wanted` names: its id, else its exact name, else its name in any case.

    `tables` is the listing (`GET /tables`) the value is resolved against. Raises
    `TableNotFound` when no table or several tables match; returns an unlisted id-shaped
    value unchanged (see the module docstring).
    """
    folded = wanted.casefold()
    for matches in (
        [t for t in tables if t.id == wanted],
        [t for t in tables if t.name == wanted],
        [t for t in tables if t.name.casefold() == folded],
    ):
        if len(matches) == 1:
            return matches[0].id
        if len(matches) > 1:
            ids = ", ".join(t.id for t in matches)
            raise TableNotFound(
                f"several tables are named {wanted!r} ({ids}); use an id", wanted=wanted
            )
    if is_table_id(wanted):
        return wanted
    raise table_not_found(tables, wanted)


def resolve_tables(tables: Sequence[TableSummary], wanted: Iterable[str]) -> list[str]:
    """The ids of several wanted tables, in the order asked, each once.

    Two values naming the same table (its name and its id, say) yield it once, where it was
    first asked for. The first value that resolves to nothing raises `TableNotFound`.
    """
    return list(dict.fromkeys(resolve_table(tables, value) for value in wanted))


def table_not_found(tables: Sequence[TableSummary], wanted: str) -> TableNotFound:
    """The error for a value no table answers to, with the close matches or the tables there are.

    Also for callers whose unlisted id-shaped value drew a 404 from the server.
    """
    names = list(dict.fromkeys(t.name for t in tables))
    by_folded = {name.casefold(): name for name in reversed(names)}
    close = [
        by_folded[match]
        for match in difflib.get_close_matches(
            wanted.casefold(), list(by_folded), n=MAX_SUGGESTIONS, cutoff=0.6
        )
    ]
    if close:
        hint = "did you mean " + " or ".join(repr(name) for name in close) + "?"
    elif names:
        listed = ", ".join(repr(name) for name in names[:MAX_LISTED])
        more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
        hint = f"the tables this key can read are {listed}{more}"
    else:
        hint = "this key can read no tables"
    what = "with id" if is_table_id(wanted) else "named"
    return TableNotFound(f"no table {what} {wanted!r}; {hint}", wanted=wanted, suggestions=close)


def selected_ids(
    listing: Sequence[TableSummary],
    include: Sequence[str] | None,
    exclude: Sequence[str] = (),
    *,
    where: str = "",
    unknown_exclude: Callable[[str], None] | None = None,
) -> list[str]:
    """The ids a selection names, in the order asked: every listed table, or each of
    `include` resolved (an unknown one a `TableNotFound` naming `where`), less `exclude`
    (one naming no table is handed to `unknown_exclude`, or ignored)."""
    def resolve(value: str) -> str:
        try:
            return resolve_table(listing, value)
        except ConfigError as exc:
            raise exc.where(where) from None

    wanted = (
        [t.id for t in listing] if include is None else list(dict.fromkeys(map(resolve, include)))
    )
    excluded = set()
    for value in exclude:
        try:
            excluded.add(resolve_table(listing, value))
        except ConfigError:
            if unknown_exclude is not None:
                unknown_exclude(value)
    return [t for t in wanted if t not in excluded]


@dataclass(frozen=True)
class Refused:
    """A selected table whose schema could not be fetched: the key may not read it
    (`PermissionDenied`), it was deleted since it was listed, or another failure."""

    table_id: str
    name: str
    error: ConnectorError


@dataclass
class Selection:
    """The tables a selection named: the listing, each schema (in the order asked), and the
    tables set aside."""

    listing: list[TableSummary]
    tables: list[Table] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)


async def select(
    client: AsyncClient,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    *,
    where: str = "",
    unknown_exclude: Callable[[str], None] | None = None,
    first_pages: int = 0,
) -> Selection:
    """The tables `include` names (default every one the key can read) less `exclude`
    (`selected_ids`), every schema fetched at once. A table the key may not read, or one
    deleted since it was listed, is `refused`; an id the listing lacks that the server does
    not know is a `TableNotFound`; a refused key (`AuthError`) is raised.

    `first_pages`: the tables will be read in full, in pages of that many rows. Each table's
    first page is fetched beside its schema (`AsyncClient.fetch_early`; up to `EARLY_CELLS`
    cells in all): a small table costs one round trip, not two, and its read none of its own;
    a larger one's read fans out without first waiting for its first page."""
    from connector.api.paging import ORDER_KEYS  # here: it brings pyarrow

    listing = await client.list_tables()
    ids = selected_ids(listing, include, exclude, where=where, unknown_exclude=unknown_exclude)
    listed = {t.id: t.name for t in listing}

    async def one(table_id: str) -> Table | ConnectorError:
        try:
            return await client.get_table(table_id)
        except AuthError:
            raise
        except ConnectorError as exc:
            return exc

    schemas = asyncio.gather(*map(one, ids))  # sent first: the early pages queue behind them
    early, wanted, room = [], set(ids), EARLY_CELLS
    for summary in listing if first_pages else ():
        cells = first_pages * (summary.columns + 3)
        if summary.id in wanted and cells <= room:
            early.append(client.fetch_early(summary.id, limit=first_pages, sort=ORDER_KEYS[0]))
            room -= cells
    answers, _ = await asyncio.gather(schemas, asyncio.gather(*early))
    selection = Selection(listing)
    for table_id, answer in zip(ids, answers, strict=True):
        if isinstance(answer, NotFound) and table_id not in listed:
            raise table_not_found(listing, table_id) from None
        if isinstance(answer, ConnectorError):
            error = NotFound("table deleted since it was listed") if isinstance(
                answer, NotFound) else answer
            selection.refused.append(Refused(table_id, listed.get(table_id, table_id), error))
        else:
            selection.tables.append(answer)
    return selection


async def fetch(client: AsyncClient, wanted: str) -> Table:
    """The table `wanted` names (the resolver's rules), its schema fetched. An id the server
    does not know is a `TableNotFound` naming the close matches; one the key may not read a
    `PermissionDenied`."""
    listing = await client.list_tables()
    table_id = resolve_table(listing, wanted)
    try:
        return await client.get_table(table_id)
    except NotFound:
        raise table_not_found(listing, wanted) from None
