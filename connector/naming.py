"""What a table is called in a destination: the one name map.

A table's name in a destination is a function of its id, its name, the destination's rules
(`NameRules`) and what the destination already holds — nothing else: not which other tables
a key can see, nor the order of a listing. Every entry point (commands, jobs, the Python
API, Dagster, dlt, Singer) names tables through `assign`; `docs/naming.md` states the rules.

1. The name is **spelled** for the destination (`spell`): control characters (and, where a
   name becomes a file or folder, path separators) become ``_``; a leading dot or a prefix the
   destination keeps for itself (``_connector_`` everywhere, ``sqlite_`` in SQLite) gets a
   ``_`` in front; an empty name is ``_``; a name longer
   than the destination allows is cut and ends in ``-<table id>``.
2. Names are **compared folded** (`fold`: Unicode NFC, then case folded), in every destination:
   file systems and SQL catalogs that fold case or normalise Unicode must never see two tables
   land on one object.
3. A table the destination already holds (it records which table id holds each name:
   `Destination.claim`) keeps that name, run after run, whichever tables a key can see, and
   also when the table is renamed upstream (a rename setting moves it: rule 5). Held under
   several names (renamed before), it keeps the one recorded last.
4. Otherwise a table takes its spelled name when no other table holds or takes it, else
   ``<spelled>-<table id>``. The tables of one run are named in listing order, so the older
   table keeps the plain name.
5. A name asked for (`renames`: ``[tables.rename]``, ``--rename``) is taken as written; one
   the destination cannot hold, or one another table holds or takes, stops the run before
   anything is written (`NameClash`), naming both tables.

An object the destination holds without a record of its table (written before names were
recorded, or not by us) is taken by nobody, except by a table whose spelled name (plain, or
with its id) is exactly its name: that table adopts it. A destination records the names of
a run's tables once the first of them committed there (`Destination.claim`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from connector.errors import NameClash

__all__ = [
    "NAME_REGISTRY",
    "OWN_PREFIX",
    "NameClash",
    "NameRules",
    "assign",
    "column_problems",
    "fold",
    "spell",
]

#: Where a destination records which table id holds each name: a table in a database, a
#: ``<this>.json`` file in a folder.
NAME_REGISTRY = "_connector_tables"
#: Names starting with this (folded) are the connector's own in every destination (its
#: record, staging tables): a table whose name starts so gets a ``_`` in front.
OWN_PREFIX = "_connector_"

#: Characters no name keeps in any destination: C0 and C1 controls, DEL, the Unicode line and
#: paragraph separators, and the bidirectional formatting marks (a name shown with U+202E in
#: it reads backwards).
_CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROLS}]")
_UNSAFE_IN_FILES = re.compile(f"[/\\\\{_CONTROLS}]")


@dataclass(frozen=True)
class NameRules:
    """A destination's own rules for the names of its tables and columns."""

    #: UTF-8 bytes a table's name may take (a file name's room once its suffix and a
    #: temporary name's decoration are added; PostgreSQL's 63-byte identifiers).
    max_bytes: int
    #: Names become file or folder names: path separators are replaced, a leading dot too.
    files: bool = False
    #: Folded prefixes the destination keeps for itself (SQLite's ``sqlite_``).
    reserved_prefixes: tuple[str, ...] = ()
    #: UTF-8 bytes a column's name may take (None: no limit).
    column_bytes: int | None = None
    #: Column names are compared folded (SQLite, DuckDB and Delta fold case).
    columns_fold: bool = False
    #: What the destination makes of a name before anything else (dlt's naming convention:
    #: ``Orders-1`` -> ``orders_1``), so names stay distinct after it; must be idempotent.
    normalize: Callable[[str], str] | None = None


def fold(name: str) -> str:
    """The form two names are compared in: equal folded names are one object to some
    destination (a case-insensitive file system, a catalog that folds case or normalises
    Unicode)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def spell(name: str, table_id: str, rules: NameRules) -> str:
    """`name` as the destination can hold it (rule 1 of the module docstring); not yet unique."""
    if rules.normalize is not None:
        name = rules.normalize(name)
    spelled = (_UNSAFE_IN_FILES if rules.files else _UNSAFE).sub("_", name)
    folded = fold(spelled)
    if (rules.files and spelled.startswith(".")) or any(
        folded.startswith(p) for p in (OWN_PREFIX, *rules.reserved_prefixes)
    ):
        spelled = "_" + spelled
    return _fit(spelled or "_", "", table_id, rules)


def _suffixed(name: str, table_id: str, rules: NameRules) -> str:
    """The name with ``-<table id>`` (as the destination spells that): unique, since ids are."""
    return spell(f"{name}-{table_id}", table_id, rules)


def _fit(name: str, tail: str, table_id: str, rules: NameRules) -> str:
    """``name + tail``, or when too long, its start cut on a character boundary plus
    ``-<table id>``."""
    if len((name + tail).encode()) <= rules.max_bytes:
        return name + tail
    tail = f"-{table_id}"
    room = rules.max_bytes - len(tail.encode())
    return name.encode()[:room].decode(errors="ignore") + tail


def assign(
    tables: Sequence[tuple[str, str]],
    rules: NameRules,
    held: Mapping[str, str | None],
    renames: Mapping[str, str] | None = None,
    *,
    where: str = "the destination",
) -> dict[str, str]:
    """Each table's name in one destination: `tables` are (id, name) pairs in listing
    order, `held` the names the destination holds (name -> the table id it holds, None when
    it does not know; in the order they were recorded), `renames` names asked for by table id. `NameClash` when a name asked
    for cannot be given (nothing is written: this runs before any write)."""
    renames = renames or {}
    names: dict[str, str] = {}
    by_id = dict(tables)
    #: folded name -> the table holding or taking it ("" for an object of no known table)
    taken: dict[str, str] = {fold(n): (h or "") for n, h in held.items()}
    mine = {fold(n): h for n, h in held.items() if h}  # folded name -> its recorded holder

    def take(table_id: str, name: str) -> None:
        names[table_id] = name
        taken[fold(name)] = table_id

    def free(table_id: str, name: str) -> bool:
        return taken.get(fold(name), table_id) == table_id

    for table_id, wanted in renames.items():
        if table_id not in by_id:
            continue
        if spell(wanted, table_id, rules) != wanted:
            raise NameClash(
                f"{where} cannot hold a table named {wanted!r} (asked for table "
                f"{by_id[table_id]!r}, {table_id}); it would be {spell(wanted, table_id, rules)!r}: "
                "rename it to that or to another name"
            )
        holder = taken.get(fold(wanted), table_id)
        if holder != table_id:
            raise NameClash(_clash(wanted, table_id, by_id[table_id], holder, by_id, where))
        take(table_id, wanted)
    for table_id, _name in tables:  # rule 3: a held table keeps its latest name
        own = [n for n, h in held.items() if h == table_id and free(table_id, n)]
        if table_id not in names and own:
            take(table_id, own[-1])
    def adoptable(name: str) -> bool:
        """An object of no recorded table, named exactly `name`, and no folded twin recorded."""
        return taken.get(fold(name)) == "" and held.get(name, "") is None and fold(name) not in mine

    for table_id, name in tables:  # rule 4
        if table_id in names:
            continue
        plain, suffixed = spell(name, table_id, rules), _suffixed(name, table_id, rules)
        if adoptable(suffixed):  # its own id in the name: certainly its data
            take(table_id, suffixed)
            continue
        for candidate in (plain, suffixed):
            if fold(candidate) not in taken or adoptable(candidate):
                take(table_id, candidate)
                break
        else:
            raise NameClash(_clash(candidate, table_id, name, taken[fold(candidate)], by_id, where))
    return names


def _clash(
    name: str, table_id: str, table: str, holder: str, by_id: Mapping[str, str], where: str
) -> str:
    if holder == "":
        other = "an object it holds that records no table (not written by this connector?)"
    elif holder in by_id:
        other = f"table {by_id[holder]!r} ({holder})"
    else:
        other = f"table {holder}, whose data it holds"
    return (
        f"{where}: table {table!r} ({table_id}) cannot be named {name!r}: {other} has that "
        f"name (names are compared ignoring case); give table {table_id} another name with "
        f'[tables.rename] "{table_id}" = "..." in the job file or --rename {table_id}=NAME'
    )


def column_problems(names: Sequence[str], rules: NameRules) -> list[str]:
    """What stops a destination from holding a table with these column names (system and
    bookkeeping columns included): one line each, naming the columns."""
    problems = []
    seen: dict[str, str] = {}
    for name in names:
        key = fold(name) if rules.columns_fold else name
        if key in seen:
            problems.append(
                f"columns {seen[key]!r} and {name!r} would be one column (it compares column "
                "names ignoring case)"
            )
        seen.setdefault(key, name)
        if rules.column_bytes is not None and len(name.encode()) > rules.column_bytes:
            problems.append(
                f"column {name!r} is {len(name.encode())} bytes long; it holds names of at "
                f"most {rules.column_bytes}"
            )
        if "\x00" in name:
            problems.append(f"column {name!r} holds a NUL character")
    return problems
