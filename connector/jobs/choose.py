"""Which tables a run copies and what each is called in each destination: resolved by the
one resolver, their filters checked against their columns, every schema fetched at once,
every name given (`connector.naming`) and every column checked, before anything is written.

An unknown table name or a filter naming a missing column is a ConfigError that leaves every
destination (and every pushed table) as it was, and so is a name that cannot be given
(`NameClash`). A table id the listing lacks (a scoped key lists only what it may read) is
fetched: a 403 skips it, a 404 is a TableNotFound. A table whose columns a destination
cannot hold (two names it compares as one, a name too long) fails before any write, and the
others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from connector.api import Client
from connector.destinations import Destination
from connector.errors import ConfigError, NotFound, PermissionDenied
from connector.jobs.config import Job, key_path
from connector.jobs.jobfile import quote
from connector.naming import assign, column_problems
from connector.results import Status, TableResult
from connector.schema import Table
from connector.tables import resolve_table, select
from connector.values import TypeSetting

__all__ = ["Filter", "Placement", "RunPlan", "choose"]

#: A table's filter as the API's filter object spells it: ``{column: {op: value}}``.
Filter = dict[str, dict[str, Any]]


@dataclass
class Placement:
    """One destination's names: each chosen table's (table id -> name), and what the
    destination held before the run (name -> table id, None: not recorded)."""

    names: dict[str, str]
    held: dict[str, str | None]


@dataclass
class RunPlan:
    """What a run will copy: tables with their filters, their names in each destination
    (`placements`, in the job's order of destinations), the rows the listing gave each (a
    full read's progress bar), and the tables already decided (skipped: the key may not read
    them; failed: deleted since listed, or columns a destination cannot hold)."""

    tables: list[tuple[Table, Filter]] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    listed_rows: dict[str, int] = field(default_factory=dict)
    decided: list[TableResult] = field(default_factory=list)


def choose(
    client: Client,
    job: Job,
    destinations: Sequence[Destination],
    note: Callable[[str, str], None],
    *,
    early_pages: bool = False,
) -> RunPlan:
    """The tables of `job`'s selection, named in each of `destinations`; `note(table, text)`
    for a selection naming nothing. `early_pages`: every table will be read in full from its
    first page, with no write through the client before: each schema brings that page along
    (`select`'s `first_pages`)."""
    selection = job.tables
    where = "" if job.one_shot else f"{job.path}: "
    exclude_key = "--exclude" if job.one_shot else "tables.exclude"
    picked = client.run(select(
        client.aio, selection.include, selection.exclude,
        where=f"{where}{'--table' if job.one_shot else 'tables.include'}: ",
        unknown_exclude=lambda value: note(value, f"{exclude_key} names no table; ignored"),
        first_pages=job.source.page_size if early_pages else 0,
    ))
    summaries = picked.listing

    def resolve(value: str, key: str) -> str:
        try:
            return resolve_table(summaries, value)
        except ConfigError as exc:
            raise exc.where(f"{where}{key}") from None

    filters = {
        resolve(name, f"tables.filter.{name}: "): conditions
        for name, conditions in selection.filters
    }
    renames = {
        resolve(value, f"tables.rename.{quote(value)}: " if not job.one_shot else "--rename: "): name
        for value, name in selection.renames
    }
    types: dict[str, list[TypeSetting]] = {}
    for setting in selection.types:  # where: the setting as the user made it
        try:
            types.setdefault(resolve_table(summaries, setting.table), []).append(setting)
        except ConfigError as exc:
            raise exc.where(f"{setting.where}: ") from None
    chosen = RunPlan(listed_rows={s.id: s.rows for s in summaries})
    ids = {t.id for t in picked.tables} | {r.table_id for r in picked.refused}
    for table_id, settings in types.items():
        if selection.include is not None and table_id not in ids:
            raise ConfigError(f"{settings[0].where}: types a table the run does not read")
    for refused in picked.refused:
        status: Status = "skipped" if isinstance(refused.error, PermissionDenied) else "failed"
        error = "table deleted" if isinstance(refused.error, NotFound) else str(refused.error)
        chosen.decided.append(TableResult(refused.name, refused.table_id, status, error=error))
    for table in picked.tables:
        table = table.typed(types.get(table.id, ()))
        chosen.tables.append((table, _filter(job, table, filters.get(table.id, ()))))
    _place(chosen, destinations, renames, job)
    return chosen


def _place(
    chosen: RunPlan, destinations: Sequence[Destination], renames: dict[str, str], job: Job
) -> None:
    """Name every chosen table in each destination; a table with columns some destination
    cannot hold is decided failed, naming them."""
    tables = [(t.id, t.name) for t, _ in chosen.tables]
    for destination in destinations:
        held = destination.held()
        where = destination.config.describe()
        rules = destination.capabilities.names
        names = assign(tables, rules, held, renames, where=where)
        chosen.placements.append(Placement(names, held))
    kept = []
    for table, filter in chosen.tables:
        problems = [
            f"{d.config.describe()}: {problem}"
            for d in destinations
            for problem in [
                *column_problems(_columns(table, job), d.capabilities.names),
                *d.capabilities.inexact_columns(table),
            ]
        ]
        if problems:
            chosen.decided.append(TableResult(
                table.name, table.id, "failed",
                error="; ".join(problems) + " — nothing was written; rename the column "
                "upstream, or leave the table out ("
                + ("--exclude" if job.one_shot else "tables.exclude") + ")",
            ))
        else:
            kept.append((table, filter))
    chosen.tables = kept



def _columns(table: Table, job: Job) -> list[str]:
    """The columns a destination holds for `table`: system and bookkeeping ones too."""
    names = table.system_names()
    own = [names["id"], names["created_at"], names["updated_at"]]
    if job.deletes == "mark":
        own.append(names["deleted_at"])
    return [*own, *table.column_names]


def _filter(job: Job, table: Table, conditions: Iterable[Any]) -> Filter:
    conditions = tuple(conditions)
    for c in conditions:
        if c.column not in table.column_names:
            raise ConfigError(
                f"{job.path}: {key_path('tables', 'filter', table.name, c.column)}: table "
                f"{table.name!r} has no column {c.column!r}; columns: {table.column_names}"
            )
    return {c.column: {c.op: c.value} for c in conditions}
