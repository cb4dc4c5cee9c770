"""Push a spreadsheet, a DataFrame or a query's rows into a table: read, validate, plan, apply.

    source (CSV / xlsx / Parquet file, folder or object / DataFrame / `Query`)
      -> header     its columns against the table's, before a row is read (`check_header`)
      -> validate   every problem at once, before any write (`ValidationReport`)
      -> plan       diff by key against the live table, read in chunks (`Diff` -> `Plan`)
      -> apply      bulk creates, PATCHes of changed cells, bulk deletes (`Applied`)

`push` does it all in one call; `apply` applies a plan saved earlier, after checking that the
rows it touches have not changed since. Reading the source is blocking work done first;
the rest is one coroutine on the client's async core (`Client.aio`), run on the client's
engine (`Client.run`): reads, writes and re-reads share its one transport, rate limiter and
retry policy. A run reports an `Applied` as a `connector.results.PushResult`
(`connector.push.report.reported`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

import pandas as pd

from connector.api import AsyncClient, Client
from connector.atomic import atomic_path
from connector.errors import ConfigError
from connector.modes import MergedCells
from connector.progress import progress as progress_bar
from connector.push.apply import (
    Applied,
    Rejected,
    apply_plan,
    write_rejects,
    written_before,
)
from connector.push.coerce import check_date_format
from connector.push.live import read_live_async
from connector.push.plan import (
    MODES,
    Counts,
    DeleteGuard,
    Diff,
    Mode,
    Plan,
    PlanError,
    check_current,
    check_delete_guard,
)
from connector.push.source import Query, SourceError, open_source
from connector.push.validate import (
    Key,
    Prepared,
    Problem,
    ValidationReport,
    check_header,
    validate,
)
from connector.schema import Table
from connector.tables import fetch

__all__ = [
    "MODES",
    "Applied",
    "Counts",
    "DeleteGuard",
    "Mode",
    "Plan",
    "PlanError",
    "Problem",
    "Query",
    "Rejected",
    "SourceError",
    "ValidationReport",
    "apply",
    "push",
    "written_before",
]


def push(
    client: Client,
    source: str | Path | pd.DataFrame | Query,
    *,
    table: str | Table,
    key: str | Sequence[str],
    mode: str = "upsert",
    dry_run: bool = False,
    sheet: str | None = None,
    max_delete_ratio: float | None = None,
    allow_delete: int | None = None,
    plan_out: str | Path | None = None,
    rejects: str | Path | None = None,
    concurrency: int | None = None,
    progress: bool | None = None,
    date_format: str | None = None,
    null_values: Sequence[str] = (),
    excel_safe: bool = False,
    merged_cells: MergedCells = "refuse",
) -> Applied:
    """Make `table` match `source` on `key` (columns, or ``"id"``), and report what was done.

    `source` is a DataFrame, a CSV, ``.xlsx`` or Parquet file, a folder of Parquet files, an
    object storage URL, or a `Query` (the rows SQL returns from a database). Its columns
    are checked against the table before its rows, or the table's, are read.

    `mode` is ``insert``, ``update``, ``upsert`` or ``mirror`` (upsert, then delete the rows
    the source lacks). Nothing is written when the source is invalid (`ValidationReport`), when a mirror would
    delete more than allowed (`DeleteGuard`), on a `dry_run`, or when the plan is saved to
    `plan_out` for `connector apply`. Rows the server rejects are reported in the result and,
    given `rejects`, written there as CSV. `progress` shows a bar (default: on a terminal).
    `date_format` (``%d/%m/%Y``) reads dates whose day/month order the column leaves open.
    Only an empty cell is empty: `null_values` names other texts that are (``["NA", "-"]``).
    `excel_safe` undoes ``export --excel-safe`` (the ``'`` before text a spreadsheet would run).
    A workbook's merged cells are refused, or with `merged_cells` ``"fill"`` each merge's
    value fills the cells it covers.
    An error raised part-way through the writes carries what was written before it
    (`written_before`).
    """
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    _check_concurrency(concurrency)
    if date_format is not None and (why := check_date_format(date_format)) is not None:
        raise ConfigError(f"--date-format {date_format!r}: {why}")
    started = time.perf_counter()
    opened = open_source(  # a bad file fails before any request
        source, sheet=sheet, null_values=null_values, excel_safe=excel_safe,
        merged_cells=merged_cells,
    )
    schema = table if isinstance(table, Table) else client.run(_resolve(client.aio, table))
    parsed = Key.parse(key, schema)
    # A wrong key or column is said before any row is read; only the columns used are read.
    columns = None if opened.columns is None else check_header(
        opened.name, opened.columns, schema, parsed
    )
    # The source as read is let go once validated: only its canonical cells are kept.
    prepared = validate(opened.read(columns), schema, parsed, date_format=date_format)
    return client.run(_push(
        client.aio, prepared, started, mode=mode, dry_run=dry_run,
        max_delete_ratio=max_delete_ratio, allow_delete=allow_delete, plan_out=plan_out,
        rejects=rejects, concurrency=concurrency, progress=progress,
    ))


def apply(
    client: Client,
    plan: Plan | str | Path,
    *,
    rejects: str | Path | None = None,
    concurrency: int | None = None,
    progress: bool | None = None,
) -> Applied:
    """Apply a saved plan; `PlanError` (nothing written) if the rows it touches changed since."""
    if not isinstance(plan, Plan):
        path = Path(plan)
        try:
            plan = Plan.from_json(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the plan ({exc.strerror})") from None
    _check_concurrency(concurrency)
    return client.run(_apply_saved(client.aio, plan, rejects, concurrency, progress))


async def _push(
    client: AsyncClient,
    prepared: Prepared,
    started: float,
    *,
    mode: str,
    dry_run: bool,
    max_delete_ratio: float | None,
    allow_delete: int | None,
    plan_out: str | Path | None,
    rejects: str | Path | None,
    concurrency: int | None,
    progress: bool | None,
) -> Applied:
    diff = Diff(prepared, cast(Mode, mode))
    await read_live_async(client, prepared.table, columns=(), each=diff.add, keep=False)
    plan = diff.plan()
    if plan_out is None and dry_run:
        return Applied(plan, dry_run=True, seconds=time.perf_counter() - started)
    check_delete_guard(plan, max_delete_ratio=max_delete_ratio, allow_delete=allow_delete)
    if plan_out is not None:
        _write_plan(Path(plan_out), plan)
        return Applied(plan, dry_run=True, seconds=time.perf_counter() - started)
    result = await _apply(client, plan, rejects, concurrency, progress)
    return replace(result, seconds=time.perf_counter() - started)


async def _apply_saved(
    client: AsyncClient, plan: Plan, rejects: str | Path | None, concurrency: int | None,
    progress: bool | None,
) -> Applied:
    started = time.perf_counter()
    current = await client.get_table(plan.table.id)
    live = await read_live_async(client, current, columns=plan.key.columns)
    check_current(plan, live)
    result = await _apply(client, plan, rejects, concurrency, progress)
    return replace(result, seconds=time.perf_counter() - started)


async def _apply(
    client: AsyncClient, plan: Plan, rejects: str | Path | None, concurrency: int | None,
    progress: bool | None,
) -> Applied:
    if plan.is_empty:
        return Applied(plan)
    with progress_bar(f"push {plan.table.name}", plan.requests, enabled=progress) as bar:
        result = await apply_plan(client, plan, concurrency=concurrency, bar=bar)
    if rejects is not None and result.rejected:
        write_rejects(rejects, result.rejected, plan.table.column_names)
    return result


async def _resolve(client: AsyncClient, name_or_id: str) -> Table:
    """A table by the one resolver's rules (`connector.tables`, as everywhere else); an
    unlisted id the server does not know is a `TableNotFound` too."""
    return await fetch(client, name_or_id)


def _check_concurrency(concurrency: int | None) -> None:
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}")


def _write_plan(path: Path, plan: Plan) -> None:
    """Written aside and renamed into place: `connector apply` never reads half a plan."""
    with atomic_path(path) as temp:
        temp.write_bytes(plan.to_json())

