"""`connector export` and `connector load`: one-shot jobs on the sync's runner.

Each builds a job from its flags (`connector.jobs.config.one_shot_job`: the tables, one
destination, every table read in full, no state file, no lock), runs it with
`connector.jobs.runner.run_job` and prints the same summary a sync does (``--json``: the
shape of ``connector sync --log-format json``). Exit codes are `connector.errors.ExitCode`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from connector.cli import max_concurrency_option
from connector.errors import ConnectorError, ExitCode
from connector.modes import WRITE_MODES

__all__ = ["export", "load"]

_EXIT_CODES = """
    \b
    Exit codes: 0 every table copied · 1 a table failed, or none could be read
                2 bad usage or configuration (an unknown --table among them)
                3 partial (a table the key may not read was skipped)
                130 / 143 stopped by Ctrl-C / SIGTERM (cleanly: the previous file or
                    SQL table is left as it was; JSON: status "interrupted")
"""


class _OneShot(click.Command):
    """A command whose ``--json`` summary is printed also when its arguments are refused."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, list(args), parent=parent, **extra)
        except click.UsageError as exc:
            if "--json" in args:
                message = " ".join(exc.format_message().split())
                _echo_json(_failed(self.name or "export", message, ExitCode.USAGE, _now(),
                                   time.monotonic()))
            raise


def _shared(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options both commands take."""
    for option in reversed([
        click.option("--table", "tables", multiple=True, metavar="NAME",
                     help="A table name or id (repeat for more). Default: every table."),
        click.option("--page-size", type=click.IntRange(2, MAX_PAGE_SIZE),
                     default=DEFAULT_PAGE_SIZE, show_default=True, help="Rows per API request."),
        click.option("--base-url", envvar="CONNECTOR_BASE_URL",
                     help="API base URL ending in /v1 (default: $CONNECTOR_BASE_URL)."),
        click.option("--max-concurrency", type=int, metavar="N", callback=max_concurrency_option,
                     help="At most N API requests in flight; below it the client adapts to "
                          "how fast the server answers [1 to 64; env "
                          "CONNECTOR_MAX_CONCURRENCY; default 32]."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print the summary as JSON (the shape `connector sync` prints)."),
    ]):
        command = option(command)
    return command


@click.command(cls=_OneShot)
@click.option("--out", "out_dir", required=True, metavar="DIR|URL",
              help="Directory for the files (one per table, replaced atomically), or an object "
                   "storage folder: s3://bucket/prefix, gs://bucket/prefix, az://container/prefix "
                   "(credentials from the provider's usual environment, profile or role).")
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv", "delta"]), default="parquet",
              show_default=True, help="parquet keeps every column type; csv is plain text; delta "
                                      "writes one Delta Lake table per table (one commit each).")
@click.option("--excel-safe", is_flag=True,
              help="csv: a text cell starting with = + - @ (or a tab or carriage return) gets a "
                   "leading ' so a spreadsheet shows it instead of running it as a formula.")
@_shared
@click.pass_context
def export(ctx: click.Context, out_dir: str, fmt: str, excel_safe: bool,
           tables: tuple[str, ...], page_size: int, base_url: str | None,
           max_concurrency: int | None, as_json: bool) -> None:
    """Export tables to Parquet, CSV or Delta Lake in a directory or object storage.

    One <table name>.parquet (or .csv, or a Delta table folder) per table, written aside and
    swapped in (uploaded whole), so a failed export leaves the previous file. A second table
    with a name already taken gets <table name>-<table id>. The API key is read from
    CONNECTOR_API_KEY.
    """
    from connector.jobs.config import Destination

    if excel_safe and fmt != "csv":
        _refuse("--excel-safe applies to --format csv only", "excel_safe", as_json)
    target = _out(out_dir, as_json)
    destination = Destination(fmt, target, "replace", "--out", excel_safe=excel_safe)  # type: ignore[arg-type]
    _run(ctx, "export", destination, tables, page_size, base_url, max_concurrency, as_json)


def _out(out: str, as_json: bool) -> str:
    """--out as a destination's target: a checked storage URL, or an absolute directory
    that can be one (no regular file at it or above it); else a usage error naming --out."""
    from connector.errors import ConfigError
    from connector.load.storage import check_location, is_remote

    try:
        checked = check_location(out, "--out")
    except ConfigError as exc:
        _refuse(str(exc), "out_dir", as_json)
    if is_remote(checked):
        return checked
    path = Path(out).expanduser().resolve()
    for at in (path, *path.parents):
        if at.exists():
            if not at.is_dir():
                what = "is a file" if at == path else f"is under a file ({at})"
                _refuse(f"--out: {path} {what}, not a directory", "out_dir", as_json)
            break
    return str(path)


def _refuse(message: str, option: str, as_json: bool) -> NoReturn:
    """A usage error (exit 2), with the JSON summary first when --json was given."""
    if as_json:
        _echo_json(_failed("export", message, ExitCode.USAGE, _now(), time.monotonic()))
    raise click.BadOptionUsage(option, message)


export.help = (export.help or "") + _EXIT_CODES


@click.command(cls=_OneShot)
@click.option("--to", "url", required=True, metavar="URL",
              help="SQLAlchemy database URL, e.g. sqlite:///warehouse.db or postgresql://u@h/db, "
                   "or a DuckDB file: duckdb:///analytics.duckdb.")
@click.option("--mode", type=click.Choice(WRITE_MODES), default="replace", show_default=True,
              help="replace: swap in a fresh table; append: add only rows whose _id the table "
                   "does not hold yet, leaving held rows unchanged; merge: upsert by row id.")
@_shared
@click.pass_context
def load(ctx: click.Context, url: str, mode: str, tables: tuple[str, ...],
         page_size: int, base_url: str | None, max_concurrency: int | None,
         as_json: bool) -> None:
    """Load tables into a SQL database, one SQL table per table.

    replace swaps each table in within one transaction, so readers never see it partial or
    empty. The API key is read from CONNECTOR_API_KEY.
    """
    from connector.jobs.config import Destination

    destination = Destination("sql", url, mode, "--to")  # type: ignore[arg-type]
    if url.startswith("duckdb:"):  # a DuckDB file, written natively (connector.load.duckdb)
        from connector.errors import ConfigError
        from connector.load.duckdb import duckdb_url

        try:
            destination = Destination("duckdb", duckdb_url(url, Path.cwd(), "--to"), mode, "--to")  # type: ignore[arg-type]
        except ConfigError as exc:
            _refuse(str(exc), "url", as_json)
    _run(ctx, "load", destination, tables, page_size, base_url, max_concurrency, as_json)


load.help = (load.help or "") + _EXIT_CODES


def _run(ctx: click.Context, command: str, destination: Any, tables: tuple[str, ...],
         page_size: int, base_url: str | None, max_concurrency: int | None,
         as_json: bool) -> None:
    from connector.jobs.config import one_shot_job
    from connector.jobs.runner import (
        interrupted_summary,
        run_job,
        stop_signals,
        use_system_allocator,
    )

    started, began = _now(), time.monotonic()
    # Ctrl-C and SIGTERM unwind like an error (temp files go, loads roll back) and the run
    # reports status "interrupted": the summary, then one line on stderr.
    with stop_signals():
        try:
            use_system_allocator()
            job = one_shot_job(command, destination, tables=tables, base_url=base_url,
                               page_size=page_size, max_concurrency=max_concurrency)
            summary = run_job(job, show_progress=None)
        except ConnectorError as exc:  # before the first table: a key, an unknown --table
            if as_json:  # a scheduler still gets the one summary, in sync's shape
                _echo_json(_failed(command, str(exc), exc.exit_code, started, began,
                                   [destination.describe()]))
            raise
        except KeyboardInterrupt as exc:  # before the run began: nothing was done
            summary = interrupted_summary(
                command, exc, started_at=started, destinations=[destination.describe()],
                seconds=round(time.monotonic() - began, 3),
            )
        if as_json:
            _echo_json(summary)
            if summary.status == "interrupted":
                click.echo(summary.error, err=True)
            elif summary.error:  # the person reading the log gets the line text output shows
                click.secho(f"error: {summary.error}", fg="red", err=True)
        else:
            _report(summary, "exported" if command == "export" else "loaded")
    ctx.exit(summary.exit_code)


def _failed(command: str, error: str, code: int, started: str, began: float,
            destinations: list[str] | None = None) -> Any:
    """The summary of a command that failed before it read a table (sync's shape)."""
    from connector.jobs.runner import RunSummary

    return RunSummary(
        job=command, status="failed", exit_code=int(code), dry_run=False, started_at=started,
        finished_at=_now(), state_file=None, destinations=destinations or [], error=error,
        seconds=round(time.monotonic() - began, 3),
    )


def _echo_json(summary: Any) -> None:
    click.echo(json.dumps(summary.to_dict(), indent=2))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _report(summary: Any, verb: str) -> None:
    for t in summary.tables:
        if t.status == "ok":
            where = ", ".join(t.targets)
            click.echo(f"{t.table}: {t.rows_written:,} rows in {t.seconds:.1f} s -> {where}")
        else:
            click.echo(f"{t.table}: {t.status}: {t.error}")
    if summary.status == "interrupted":  # one line, as sync prints it
        click.echo(summary.error, err=True)
        return
    if summary.error:
        click.echo(f"error: {summary.error}", err=True)
    rows = sum(t.rows_written for t in summary.tables)
    click.echo(
        f"{summary.count('ok')} of {len(summary.tables)} tables {verb}, {rows:,} rows "
        f"in {summary.seconds:.1f} s"
        + (f"; {summary.count('skipped')} skipped" if summary.count("skipped") else "")
        + (f"; {summary.count('failed')} failed" if summary.count("failed") else "")
    )
