"""`connector sync`, `connector export`, `connector load`: each runs a job and prints its summary.

`sync` runs a job file; `export` and `load` build a one-shot job from their flags
(`connector.jobs.config.one_shot_job`: the tables, one destination, every table read in
full, no state file, no lock). Destinations come from the one registry
(`connector.destinations.registry`); every command ends through `connector.driver.drive`:
one summary (``--json``: sync's shape), one exit code. No logic lives here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from connector.cli import base_url_option, max_concurrency_option, with_exit_codes
from connector.destinations.registry import export_formats
from connector.driver import drive, print_json
from connector.errors import ConfigError, ConnectorError, ExitCode
from connector.modes import WRITE_MODES
from connector.results import RunSummary

if TYPE_CHECKING:
    from connector.api.counts import RequestCounts
    from connector.jobs.config import Job

__all__ = ["export", "load", "sync"]


# --- sync -----------------------------------------------------------------------------------


@with_exit_codes
@click.command()
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Read and plan only: no writes, no state change.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON event per line on stderr and a JSON summary on stdout.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the job's state and lock here (overrides sync.state_dir).",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for another run of the same job to finish before giving up.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Read every row, compare it with each merging destination, repair what differs "
    "(missing, different, extra rows) and report it. See also sync.verify_every.",
)
@click.option(
    "--lookback",
    metavar="DURATION",
    help="Incremental reads also read the rows changed this long before the last cursor "
    "(a write committed late), like 90s, 5m, 0 [default: sync.lookback, else 5m].",
)
@click.option(
    "--schema",
    "contract",
    type=click.Choice(["evolve", "freeze"]),
    help="evolve: a table whose columns changed is evolved in every destination; freeze: "
    "it is left as it was, named, and the run ends partial (exit 3) [default: sync.schema, "
    "else evolve].",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TABLE:COLUMN=TYPE",
    help="Hold a number column as float64 (default), int64, decimal, decimal(P,S) or text, "
    "e.g. Orders:OrderNo=int64 (repeat for more; over [tables.types]). A table whose name "
    "holds ':' is given by its id. A changed type retypes the column in every destination.",
)
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="After the run, also a failed or stopped one, write its metrics (rows per table, "
    "requests, retries, status, duration, last successes) to this .prom file for "
    "node_exporter's textfile collector, replaced atomically; needs the [metrics] extra. "
    "Not on --dry-run [default: sync.metrics_file].",
)
@click.pass_context
def sync(
    ctx: click.Context,
    job_file: Path,
    dry_run: bool,
    log_format: str,
    state_dir: Path | None,
    wait: float,
    verify: bool,
    lookback: str | None,
    contract: str | None,
    types: tuple[str, ...],
    metrics_file: Path | None,
) -> None:
    """Run the job in JOB_FILE: push its spreadsheets, then sync its tables.

    Incremental jobs read only rows changed since the last run (and, again, those changed
    within the lookback window before it) and merge them into every destination, removing
    (or marking) rows deleted upstream. The API key comes from the environment variable the
    job names in source.api_key_env.

    \b
    Examples:
      connector sync demo-out/demo.toml
      connector sync configs/nightly-warehouse.toml --log-format json --wait 600
      connector sync demo-out/demo.toml --dry-run
      connector sync demo-out/demo.toml --verify
    """
    from dataclasses import replace

    from connector.api.counts import RequestCounts
    from connector.jobs.config import load_job
    from connector.jobs.jobfile import parse_duration

    if lookback is not None:
        try:
            seconds = parse_duration(lookback)
        except ValueError:
            raise click.BadParameter(
                f'must be a duration like "5m", "90s" or 0, not {lookback!r}',
                ctx, param=next(p for p in ctx.command.params if p.name == "lookback"),
            ) from None
    settings = _type_settings(ctx, types)
    as_json = log_format == "json"
    report = _json_event if as_json else _TextReport()
    name = [job_file.stem]  # the job's name once its file is read
    metered: list[Job] = []  # the job, once its metrics file is known to be writable
    counts = RequestCounts()

    def body() -> RunSummary:
        from connector.jobs.context import RunOptions  # under stop_signals: a stop while
        from connector.jobs.run import run_job  # it imports is handled

        job = load_job(job_file)
        name[0] = job.name
        if state_dir is not None:
            job = job.with_state_dir(state_dir)
        if lookback is not None:
            job = replace(job, lookback=seconds)
        if contract is not None:
            job = replace(job, schema=contract)  # type: ignore[arg-type]
        if settings:
            job = replace(job, tables=replace(job.tables, types=(*job.tables.types, *settings)))
        if metrics_file is not None:
            job = replace(job, metrics_file=metrics_file.resolve())
        if job.metrics_file is not None and not dry_run:
            from connector.metrics import check_metrics_file

            where = "--metrics-file" if metrics_file else f"{job_file}: sync.metrics_file"
            check_metrics_file(job.metrics_file, job.name, where)
            metered.append(job)
        return run_job(job, RunOptions(dry_run=dry_run, wait=wait, report=report,
                                       verify=verify, counts=counts))

    def finish(summary: RunSummary) -> None:  # a run stopped before it began (a lock wait)
        report("finish", **{k: v for k, v in summary.to_dict().items()
                            if k not in ("tables", "pushes")})

    def metrics(summary: RunSummary) -> None:  # not for a run the lock kept from starting
        if metered and summary.exit_code != ExitCode.LOCKED:
            _write_metrics(metered[0], summary, counts, as_json)

    drive(
        ctx, lambda: name[0], body, as_json=as_json, indent=None, dry_run=dry_run,
        text=_sync_text, events=finish, ended=metrics,
    )


def _type_settings(ctx: click.Context, types: tuple[str, ...], as_json: bool = False) -> list[Any]:
    """Each ``--type`` read (`connector.values.TypeSetting.parse`); a usage error naming it."""
    from connector.values import TypeSetting

    settings = []
    for option in types:
        try:
            settings.append(TypeSetting.parse(option))
        except ValueError as exc:
            if as_json:
                _refuse(f"--type: {exc}", "types", as_json)
            raise click.BadParameter(
                str(exc), ctx, param=next(p for p in ctx.command.params if p.name == "types")
            ) from None
    return settings


def _write_metrics(job: Job, summary: RunSummary, counts: RequestCounts, as_json: bool) -> None:
    """The run's metrics file; a failure to write it is one error line (a JSON ``error``
    event), and the run's exit code stands."""
    from connector.metrics import write_metrics

    try:
        write_metrics(job, summary, counts)
    except ConnectorError as exc:
        if as_json:
            _json_event("error", error=str(exc))
        else:
            click.secho(f"error: {exc}", fg="red", err=True)


def _sync_text(summary: RunSummary) -> None:
    from connector.reporting import summary_lines

    for line in summary_lines(summary):
        click.echo(line)


def _json_event(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), file=sys.stderr, flush=True)


class _TextReport:
    """Events as lines on stderr. The ``job NAME`` line waits for the next event, so a job
    stopped by a configuration error found at run time (a push naming a column the table
    lacks) prints its one error line and nothing else."""

    def __init__(self) -> None:
        self.pending: str | None = None

    def __call__(self, event: str, **fields: Any) -> None:
        from connector.reporting import describe_event

        line = describe_event(event, **fields)
        if event == "start":
            self.pending = line
            return
        if self.pending is not None:
            click.echo(self.pending, err=True)
            self.pending = None
        if line is not None:
            click.echo(line, err=True)


# --- export and load: one-shot jobs -----------------------------------------------------------

class _OneShot(click.Command):
    """A command whose ``--json`` summary is printed also when its arguments are refused."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, list(args), parent=parent, **extra)
        except click.UsageError as exc:
            if "--json" in args:
                _refused_json(self.name or "export", " ".join(exc.format_message().split()))
            raise


def _renames_option(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    """``--rename TABLE=NAME`` values as (table, name) pairs; a usage error naming one that
    is not of that shape."""
    out = []
    for value in values:
        table, sep, name = value.partition("=")
        if not sep or not table or not name:
            raise click.BadParameter(f"{value!r} is not TABLE=NAME", ctx, param)
        out.append((table, name))
    return tuple(out)


def _shared(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options both commands take."""
    for option in reversed([
        click.option("--table", "tables", multiple=True, metavar="NAME",
                     help="A table name or id (repeat for more). Default: every table."),
        click.option("--exclude", "excluded", multiple=True, metavar="NAME",
                     help="A table name or id to leave out (repeat for more)."),
        click.option("--rename", "renames", multiple=True, metavar="TABLE=NAME",
                     callback=_renames_option,
                     help="Give TABLE (a name or id; by id when its name holds '=') the name "
                          "NAME in the destination (repeat for more). Default: its own name, "
                          "or <name>-<table id> when another table has that name."),
        click.option("--page-size", type=click.IntRange(2, MAX_PAGE_SIZE),
                     default=DEFAULT_PAGE_SIZE, show_default=True, help="Rows per API request."),
        base_url_option,
        click.option("--max-concurrency", type=int, metavar="N", callback=max_concurrency_option,
                     help="At most N API requests in flight; below it the client adapts to "
                          "how fast the server answers [1 to 64; env "
                          "CONNECTOR_MAX_CONCURRENCY; default 32]."),
        click.option("--type", "types", multiple=True, metavar="TABLE:COLUMN=TYPE",
                     help="Hold a number column as float64 (default), int64, decimal, "
                          "decimal(P,S) or text, e.g. Orders:OrderNo=int64 (repeat for more). "
                          "A table whose name holds ':' is given by its id."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print the summary as JSON (the shape `connector sync` prints)."),
    ]):
        command = option(command)
    return command


@with_exit_codes
@click.command(cls=_OneShot)
@click.option("--out", "out_dir", required=True, metavar="DIR|URL",
              help="Directory for the output (one file or table folder per table, replaced "
                   "atomically), or an object storage folder: s3://bucket/prefix, "
                   "gs://bucket/prefix, az://container/prefix (credentials from the "
                   "provider's usual environment, profile or role).")
@click.option("--format", "fmt", type=click.Choice(export_formats()), default="parquet",
              show_default=True, help="parquet keeps every column type; csv is plain text; "
                                      "delta and iceberg write one lake table per table "
                                      "(one commit each).")
@click.option("--excel-safe", is_flag=True,
              help="csv: a text cell starting with = + - @ (or a tab or carriage return) gets a "
                   "leading ' so a spreadsheet shows it instead of running it as a formula.")
@_shared
@click.pass_context
def export(ctx: click.Context, out_dir: str, fmt: str, excel_safe: bool,
           tables: tuple[str, ...], excluded: tuple[str, ...],
           renames: tuple[tuple[str, str], ...], page_size: int, base_url: str | None,
           max_concurrency: int | None, types: tuple[str, ...], as_json: bool) -> None:
    """Export tables to Parquet, CSV, Delta Lake or Iceberg in a directory or object storage.

    One <table name>.parquet (or .csv, or a Delta or Iceberg table) per table, written aside
    and swapped in (uploaded whole, or one commit), so a failed export leaves the previous
    one. A table keeps the name the folder holds it under; a new table whose name another
    table has (ignoring case; / and \\ count as _) gets <table name>-<table id>. The API key
    is read from CONNECTOR_API_KEY.
    """
    from connector.destinations.registry import make_config

    _check_out(out_dir, as_json)
    try:
        destination = make_config(fmt, out_dir, mode="replace", where="--out", base=Path.cwd(),
                                  excel_safe=excel_safe, named={"excel_safe": "--excel-safe"})
    except ConfigError as exc:
        _refuse(str(exc), "out_dir", as_json)
    _one_shot(ctx, "export", destination,
              (tables, excluded, renames, _type_settings(ctx, types, as_json)), page_size,
              base_url, max_concurrency, as_json)


@with_exit_codes
@click.command(cls=_OneShot)
@click.option("--to", "url", required=True, metavar="URL",
              help="SQLAlchemy database URL, e.g. sqlite:///warehouse.db (relative to the "
                   "working directory) or postgresql://u@h/db, or a DuckDB file: "
                   "duckdb:///analytics.duckdb.")
@click.option("--mode", type=click.Choice(WRITE_MODES), default="replace", show_default=True,
              help="replace: swap in a fresh table; append: add only rows whose _id the table "
                   "does not hold yet, leaving held rows unchanged; merge: upsert by row id and "
                   "apply deletions (see --deletes).")
@click.option("--deletes", type=click.Choice(["delete", "mark", "keep"]), default="delete",
              show_default=True,
              help="merge: what happens to rows the table holds that the API no longer has: "
                   "delete them, mark them (_deleted_at set), or keep them.")
@_shared
@click.pass_context
def load(ctx: click.Context, url: str, mode: str, deletes: str, tables: tuple[str, ...],
         excluded: tuple[str, ...], renames: tuple[tuple[str, str], ...], page_size: int,
         base_url: str | None, max_concurrency: int | None, types: tuple[str, ...],
         as_json: bool) -> None:
    """Load tables into a SQL database, one SQL table per table.

    Each table is written in one transaction: replace swaps it in, so readers never see it
    partial or empty; merge upserts every row read and applies deletions as a full sync
    does. The API key is read from CONNECTOR_API_KEY.
    """
    from connector.destinations.registry import make_config

    if deletes != "delete" and mode != "merge":
        _refuse(f"--deletes {deletes} applies to --mode merge only", "deletes", as_json)
    try:
        destination = make_config("url", url, mode=mode, where="--to",  # type: ignore[arg-type]
                                  base=Path.cwd())
    except ConfigError as exc:
        _refuse(str(exc), "url", as_json)
    _one_shot(ctx, "load", destination,
              (tables, excluded, renames, _type_settings(ctx, types, as_json)), page_size,
              base_url, max_concurrency, as_json, deletes=deletes if mode == "merge" else "keep")


def _check_out(out: str, as_json: bool) -> None:
    """A local --out must be a directory or able to become one (no regular file at it or
    above it); else a usage error naming --out."""
    from connector.locations import is_remote

    if is_remote(out):
        return
    path = Path(out).expanduser().resolve()
    for at in (path, *path.parents):
        if at.exists():
            if not at.is_dir():
                what = "is a file" if at == path else f"is under a file ({at})"
                _refuse(f"--out: {path} {what}, not a directory", "out_dir", as_json)
            break


def _refuse(message: str, option: str, as_json: bool) -> NoReturn:
    """A usage error (exit 2), with the JSON summary first when --json was given."""
    if as_json:
        _refused_json("export", message)
    raise click.BadOptionUsage(option, message)


def _refused_json(command: str, message: str) -> None:
    from connector.stamps import now

    print_json(RunSummary.failed(command, ConfigError(message), started_at=now()))


def _one_shot(ctx: click.Context, command: str, destination: Any, selection: Any,
              page_size: int, base_url: str | None, max_concurrency: int | None,
              as_json: bool, *, deletes: str = "keep") -> None:
    tables, excluded, renames, types = selection
    verb = "exported" if command == "export" else "loaded"

    def body() -> RunSummary:
        from connector.jobs.config import one_shot_job
        from connector.jobs.context import RunOptions
        from connector.jobs.run import run_job

        job = one_shot_job(command, destination, tables=tables, exclude=excluded,
                           renames=renames, types=types, base_url=base_url,
                           page_size=page_size, max_concurrency=max_concurrency,
                           deletes=deletes)  # type: ignore[arg-type]
        return run_job(job, RunOptions(show_progress=None))

    def text(summary: RunSummary) -> None:
        from connector.reporting import summary_lines

        if summary.error and summary.status != "interrupted":
            click.secho(f"error: {summary.error}", fg="red", err=True)
        for line in summary_lines(summary, verb):
            click.echo(line)

    drive(ctx, lambda: command, body, as_json=as_json, text=text,
          destinations=[destination.describe()])
