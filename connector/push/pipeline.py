"""A push in one call (`push`): read, validate, plan, apply; or a saved plan applied (`apply`).

Reading the source is blocking work done first; the rest is one coroutine on the client's
async core (`Client.aio`), run on the client's engine (`Client.run`): reads, writes and
re-reads share its one transport, rate limiter and retry policy. Either returns the push's
`connector.results.PushResult`, the entry a run's summary reports as it is.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from connector.api import AsyncClient, Client
from connector.atomic import atomic_path
from connector.errors import ConfigError, ConnectorError
from connector.progress import progress as progress_bar
from connector.push.diff import Diff, check_current
from connector.push.live import read_live_async
from connector.push.plan import Plan, check_delete_guard
from connector.push.source import open_source
from connector.push.spec import PushSpec
from connector.push.validate import Key, Prepared, check_header, validate
from connector.push.writes import apply_plan, write_rejects, written_before
from connector.results import PushResult
from connector.tables import fetch

__all__ = ["apply", "push"]


def push(
    client: Client, spec: PushSpec, *, dry_run: bool = False, progress: bool | None = None
) -> PushResult:
    """Make `spec.table` match `spec.source` on `spec.key`, and report what was done.

    The source's columns are checked against the table before its rows, or the table's,
    are read. Nothing is written when the source is invalid (`ValidationReport`), when a
    mirror would delete more than allowed (`DeleteGuard`), on a `dry_run`, or when the plan
    is saved to `spec.plan_out` for `apply`. Rows the server rejects are reported in the
    result and, given `spec.rejects`, written there as CSV. `progress` shows a bar
    (default: on a terminal). An error raised part-way through the writes carries what was
    written before it (`ConnectorError.written`, `written_before`).
    """
    started = time.perf_counter()
    opened = open_source(  # a bad file fails before any request
        spec.source, sheet=spec.sheet, null_values=spec.null_values, excel_safe=spec.excel_safe,
        merged_cells=spec.merged_cells, names=spec.names,
    )
    schema = client.run(fetch(client.aio, spec.table))
    key = Key.parse(spec.key, schema, spec.names)
    # A wrong key or column is said before any row is read; only the columns used are read.
    columns = None if opened.columns is None else check_header(
        opened.name, opened.columns, schema, key
    )
    # The source as read is let go once validated: only its canonical cells are kept.
    prepared = validate(
        opened.read(columns), schema, key, date_format=spec.date_format, names=spec.names
    )
    return client.run(_push(client.aio, spec, prepared, dry_run, progress, started))


def apply(
    client: Client,
    plan: Plan | str | Path,
    *,
    rejects: str | Path | None = None,
    concurrency: int | None = None,
    progress: bool | None = None,
) -> PushResult:
    """Apply a saved plan; `PlanError` (nothing written) if the rows it touches changed since."""
    file = None
    if not isinstance(plan, Plan):
        path = Path(plan)
        try:
            plan = Plan.from_json(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the plan ({exc.strerror})") from None
        file = str(path)
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
    return client.run(_apply_saved(client.aio, plan, file, rejects, concurrency, progress))


async def _push(
    client: AsyncClient, spec: PushSpec, prepared: Prepared, dry_run: bool,
    progress: bool | None, started: float,
) -> PushResult:
    diff = Diff(prepared, spec.mode, spec.names)
    await read_live_async(client, prepared.table, columns=(), each=diff.add, keep=False)
    plan = diff.plan()
    if spec.plan_out is None and dry_run:
        return _planned(spec, plan, started)
    check_delete_guard(plan, max_delete_ratio=spec.max_delete_ratio,
                       allow_delete=spec.allow_delete, names=spec.names)
    if spec.plan_out is not None:
        _write_plan(spec.plan_out, plan)
        return _planned(spec, plan, started)
    return await _apply(client, plan, spec.label, spec.rejects, spec.concurrency, progress,
                        started)


def _planned(spec: PushSpec, plan: Plan, started: float) -> PushResult:
    """A plan made and not applied: a dry run's, or one saved to `spec.plan_out`."""
    return PushResult(
        spec.label, plan.table.name, "planned", plan=plan,
        plan_file=None if spec.plan_out is None else str(spec.plan_out),
        seconds=time.perf_counter() - started,
    )


async def _apply_saved(
    client: AsyncClient, plan: Plan, file: str | None, rejects: str | Path | None,
    concurrency: int | None, progress: bool | None,
) -> PushResult:
    started = time.perf_counter()
    current = await client.get_table(plan.table.id)
    live = await read_live_async(client, current, columns=plan.key.columns)
    check_current(plan, live)
    return await _apply(client, plan, file, rejects, concurrency, progress, started)


async def _apply(
    client: AsyncClient, plan: Plan, file: str | None, rejects: str | Path | None,
    concurrency: int | None, progress: bool | None, started: float,
) -> PushResult:
    """`plan` applied; its rejected rows written to `rejects`. The result (also the one an
    error that stopped the writes carries) names `file` and takes its time from `started`."""

    def named(result: PushResult) -> PushResult:
        written = rejects is not None and bool(result.rejected)
        return replace(result, file=file, seconds=time.perf_counter() - started,
                       rejects_file=str(rejects) if written else None)

    if plan.is_empty:
        return named(PushResult(file, plan.table.name, "ok", unchanged=plan.unchanged, plan=plan))
    with progress_bar(f"push {plan.table.name}", plan.requests, enabled=progress) as bar:
        try:
            result = await apply_plan(client, plan, concurrency=concurrency, bar=bar)
        except ConnectorError as exc:
            if (written := written_before(exc)) is not None:
                exc.written = named(written)
            raise
    if rejects is not None and result.rejected:
        write_rejects(rejects, result.rejected, plan.table.column_names)
    return named(result)




def _write_plan(path: Path, plan: Plan) -> None:
    """Written aside and renamed into place: `connector apply` never reads half a plan."""
    with atomic_path(path) as temp:
        temp.write_bytes(plan.to_json())
