"""Dagster assets from a job file: one asset per table, the job's pushes upstream of them.

    defs = definitions_from_job("configs/nightly-warehouse.toml", cron="15 2 * * *")

(`pip install 'table-data-connector[dagster]'`; without it, importing this module raises
`MissingExtra` naming the extra.)

**Which tables.** The job's ``tables.include`` when it has one: the assets are declared
from the file, and loading the definitions makes no request. Without an include list,
every table the key can read (minus ``tables.exclude``), listed from the server when the
definitions load, so the URL and key must be in the environment then; a table created
later appears when the code location is reloaded.

**What an asset does.** It runs the job's one pipeline (`connector.jobs.run_job`)
for its table alone — the same reads, writes, state and verification as ``connector
sync`` — and records the table's result (status, rows, seconds, targets) as the
materialisation's metadata. A failed table, or one the key may not read (skipped), raises
`dagster.Failure`, so the asset fails and the others go on. Each ``[[push]]`` is an asset
of its own, upstream of the table it writes to when that table is one of the assets, as
``connector sync`` pushes before it reads.

**State and lock.** A job's lock allows one run at a time and its state file has one
writer, but Dagster materialises the tables as separate steps, at once and possibly in
separate processes. So each asset runs as a job of its own, named ``<job>.<asset>``: its
state file ``<job>.<asset>.state.json`` and lock ``<job>.<asset>.lock`` sit in the job's
``state_dir``. Tables never wait for each other; two runs of the same asset still exclude
each other (the second fails at once with `JobLocked`, writing nothing). That state is not
the state ``connector sync`` keeps for the whole job: schedule a job file from Dagster or
from cron, not both.

**Destinations that take one writer at a time** (SQLite, DuckDB, an Iceberg catalog on
SQLite: `connector.destinations.registry`'s capabilities) put the job's table assets in one
Dagster pool, named ``connector:`` and those destinations (`pool_of`), so a pool limit of 1
(``dagster instance concurrency set <pool> 1``, or ``concurrency: pools: default_limit: 1``
in ``dagster.yaml``) runs them one at a time; a job whose destinations all take parallel
writes (Parquet, Delta, PostgreSQL) has no pool and its tables run at once.
"""

# No `from __future__ import annotations` here: Dagster reads the assets' `context`
# annotation at definition time and accepts only the class itself, not its name.
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connector.api import Client
from connector.api.retry import RetryPolicy
from connector.errors import ConfigError, ConnectorError
from connector.extras import require
from connector.jobs.config import Job, PushSpec, load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.push.spec import Query
from connector.reporting import describe_event
from connector.results import RunSummary
from connector.tables import selected_ids

if TYPE_CHECKING:
    import dagster as dg
else:
    dg = require("dagster", "connector.dagster (Dagster assets)")

__all__ = ["assets_from_job", "definitions_from_job", "pool_of"]

#: What Dagster allows in an asset name or key part.
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")


def definitions_from_job(path: str | Path, *, cron: str | None = None) -> dg.Definitions:
    """The assets of a job file, an asset job materialising them all (named as the job, in
    Dagster's spelling) and, with `cron`, a schedule running that job."""
    job = load_job(path)
    assets = _assets(job)
    asset_job = dg.define_asset_job(_name(job.name), selection=dg.AssetSelection.assets(*assets))
    schedules = [] if cron is None else [dg.ScheduleDefinition(job=asset_job, cron_schedule=cron)]
    return dg.Definitions(assets=assets, jobs=[asset_job], schedules=schedules)


def assets_from_job(path: str | Path) -> list[dg.AssetsDefinition]:
    """One asset per table of the job's selection and one per push, keyed ``[job, name]``."""
    return _assets(load_job(path))


def _assets(job: Job) -> list[dg.AssetsDefinition]:
    group = _name(job.name)
    tables = _tables(job)
    pushes = [
        _PushAsset(f"push_{_name(s.table if isinstance(s.source, Query) else Path(s.label).stem)}",
                   s)
        for s in job.pushes
    ]
    taken: dict[str, str] = {}
    named = [*((t.asset, t.value) for t in tables),
             *((p.asset, p.spec.where or p.spec.label) for p in pushes)]
    for asset, where in named:
        if asset in taken:
            raise ConfigError(
                f"{job.path}: {where}: its Dagster asset name {asset!r} is already taken by "
                f"{taken[asset]} (names are cut to letters, digits and '_')"
            )
        taken[asset] = where
    out = [_push_asset(job, group, p) for p in pushes]
    for table in tables:
        deps = [dg.AssetKey([group, p.asset]) for p in pushes if table.written_by(p.spec)]
        out.append(_table_asset(job, group, table, deps))
    return out


@dataclass(frozen=True)
class _TableAsset:
    asset: str
    #: What the one-table job's ``include`` names: the file's value, or the listed id.
    value: str
    #: Every spelling a push may use for it (a name, an id), case-folded.
    aliases: frozenset[str]

    def written_by(self, spec: PushSpec) -> bool:
        return spec.table.casefold() in self.aliases


@dataclass(frozen=True)
class _PushAsset:
    asset: str
    spec: PushSpec


def _tables(job: Job) -> list[_TableAsset]:
    """The job's tables: declared from its file when it lists them and excludes none (no
    request); otherwise listed from the server and chosen by the one resolver, as a sync
    chooses them (an id and a name of one table are then the same table)."""
    selection = job.tables
    if selection.include is not None and not selection.exclude:
        return [
            _TableAsset(_name(v), v, frozenset({v.casefold()}))
            for v in dict.fromkeys(selection.include)
        ]

    try:
        base_url, key = job.source.resolve(job_file=job.path)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (the tables are listed from the server)") from None
    with Client(base_url, key, retry=RetryPolicy(total_seconds=job.source.max_wait),
                url_source=job.source.url_source(one_shot=False, job_file=job.path),
                key_source=job.source.key_source(one_shot=False, job_file=job.path)) as client:
        listed = client.list_tables()
    by_id = {t.id: t for t in listed}
    ids = selected_ids(  # as a sync selects: an exclude naming no table is no error
        listed, selection.include, selection.exclude, where=f"{job.path}: tables.include: "
    )
    return [
        _TableAsset(_name(by_id[i].name), i, frozenset({i.casefold(), by_id[i].name.casefold()}))
        for i in ids
    ]


def pool_of(job: Job) -> str | None:
    """The Dagster pool of a job's table assets: its destinations that take one writer at a
    time, named; None when every destination takes parallel writes."""
    single = sorted(d.describe() for d in job.destinations if not d.capabilities.parallel_writes)
    return "connector:" + "|".join(single) if single else None


def _table_asset(
    job: Job, group: str, table: _TableAsset, deps: Sequence[dg.AssetKey]
) -> dg.AssetsDefinition:
    one = replace(
        job,
        name=f"{job.name}.{table.asset}",
        tables=replace(job.tables, include=(table.value,)),
        pushes=(),
    )

    @dg.asset(
        name=table.asset,
        key_prefix=[group],
        group_name=group,
        deps=list(deps),
        description=f"Table {table.value!r} of job {job.name} ({job.path}).",
        pool=pool_of(job),
    )
    def _sync(context: dg.AssetExecutionContext) -> dg.MaterializeResult[None]:
        summary = _run(one, context)
        results = summary.tables
        if not results:
            raise dg.Failure(
                description=summary.error or f"{table.value}: not in the job's selection",
                metadata={"status": summary.status},
            )
        (result,) = results
        metadata: dict[str, Any] = {
            "status": result.status,
            "read": result.read,
            "rows_read": result.rows_read,
            "rows_written": result.rows_written,
            "rows_deleted": result.rows_deleted,
            "seconds": round(result.seconds, 3),
            "targets": list(result.targets),
            "state_file": summary.state_file or "",
        }
        if result.status in ("failed", "skipped"):
            raise dg.Failure(
                description=f"{result.table}: {result.status}: {result.error}", metadata=metadata
            )
        return dg.MaterializeResult(metadata=metadata)

    return _sync


def _push_asset(job: Job, group: str, push: _PushAsset) -> dg.AssetsDefinition:
    one = replace(job, name=f"{job.name}.{push.asset}", destinations=(), pushes=(push.spec,))

    @dg.asset(
        name=push.asset,
        key_prefix=[group],
        group_name=group,
        description=f"{push.spec.label} pushed into {push.spec.table!r} ({job.path}).",
    )
    def _push(context: dg.AssetExecutionContext) -> dg.MaterializeResult[None]:
        summary = _run(one, context)
        if not summary.pushes:
            raise dg.Failure(description=summary.error or "the push did not run")
        (result,) = summary.pushes
        metadata: dict[str, Any] = {
            "status": result.status,
            "created": result.created,
            "updated": result.updated,
            "deleted": result.deleted,
            "unchanged": result.unchanged,
            "rejected": len(result.rejected),
        }
        if result.status == "failed":
            raise dg.Failure(description=f"{result.file}: {result.error}", metadata=metadata)
        return dg.MaterializeResult(metadata=metadata)

    return _push


def _run(job: Job, context: dg.AssetExecutionContext) -> RunSummary:
    """`run_job`, its progress lines in the Dagster log; a refused run (a setting, the lock
    held) is a Failure with its one-line message."""
    try:
        return run_job(job, RunOptions(report=_reporter(context)))
    except ConnectorError as exc:
        raise dg.Failure(description=str(exc)) from exc


def _reporter(context: dg.AssetExecutionContext) -> Callable[..., None]:
    def report(event: str, **fields: Any) -> None:
        line = describe_event(event, **fields)
        if line is not None:
            context.log.info(line.strip())

    return report


def _name(value: str) -> str:
    """`value` as Dagster allows a name: runs of other characters become one '_'."""
    name = _NOT_NAME.sub("_", value).strip("_")
    return name if name and not name[0].isdigit() else f"t_{name}"
