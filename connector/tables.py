"""The one table resolver: what a user typed (`--table`, a job file, `Workspace.read`) -> a table id.

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

Pure functions over a listing: no I/O, cheap to import (the CLI imports this).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from connector.errors import TableNotFound

if TYPE_CHECKING:
    from connector.api.models import TableSummary

__all__ = ["is_table_id", "resolve_table", "resolve_tables", "table_not_found"]

#: A table id as the API writes it (`tbl_<id>`).
TABLE_ID = re.compile(r"tbl_[A-Za-z0-9_-]+")

#: At most this many close matches are suggested, and this many names listed otherwise.
MAX_SUGGESTIONS = 3
MAX_LISTED = 10


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
