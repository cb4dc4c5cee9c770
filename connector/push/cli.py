"""The `push` and `apply` commands: a spreadsheet, a folder, an object or a query's rows into
a table. Parse, call `connector.push`, end through `connector.driver.drive` (one summary,
one exit code, whatever happens). Loaded only when one of them runs (`connector.cli._LAZY`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click

from connector.cli import (
    base_url_option,
    command_client,
    max_concurrency_option,
    show_traceback,
    with_exit_codes,
)
from connector.errors import ConnectorError, ExitCode
from connector.modes import DEFAULT_PUSH_MODE, MERGED_CELLS, PUSH_MODES, MergedCells, PushMode
from connector.push.spec import PushSpec, Query

__all__ = ["apply_command", "push_command"]

_json_option = click.option(
    "--json", "as_json", is_flag=True,
    help="Print one JSON summary (the shape `connector sync --log-format json` prints).",
)


def _max_concurrency_options(command: Any) -> Any:
    """--max-concurrency, and --concurrency: its first name, hidden, still read."""
    command = click.option(
        "--concurrency", type=int, hidden=True, callback=max_concurrency_option,
        help="Deprecated name of --max-concurrency.",
    )(command)
    return click.option(
        "--max-concurrency", type=int, metavar="N", callback=max_concurrency_option,
        help="At most N write requests in flight; below it the client adapts to how fast the "
        "server answers [1 to 64; env CONNECTOR_MAX_CONCURRENCY; default 32].",
    )(command)


def _cap(max_concurrency: int | None, concurrency: int | None) -> int | None:
    """The cap the client gets from --max-concurrency or its old name --concurrency (None:
    CONNECTOR_MAX_CONCURRENCY, else the client's default)."""
    if concurrency is None:
        return max_concurrency
    if max_concurrency is not None:
        raise click.UsageError("give --max-concurrency or --concurrency (its old name), not both")
    click.echo("note: --concurrency is now --max-concurrency", err=True)
    return concurrency


def _null_values(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """``--null-values NA,-`` as its markers; an empty one is refused (empty is always empty)."""
    if value is None:
        return ()
    markers = tuple(v.strip() for v in value.split(","))
    if not all(markers):
        raise click.BadParameter(f"{value!r}: give non-empty texts separated by commas, like NA,-")
    return markers


@with_exit_codes
@click.command("push")
@click.argument("file", required=False)
@click.option("--db", metavar="URL",
              help="Push what --sql returns from this database instead of a FILE: a SQLAlchemy "
              "URL (sqlite:///shop.db, postgresql://user@host/db; the password from the "
              "driver's environment, e.g. PGPASSWORD) or duckdb:///file.duckdb or "
              "duckdb:///:memory: (DuckDB's SQL reads Parquet, CSV and s3:// objects itself).")
@click.option("--sql", metavar="QUERY",
              help="The query whose rows are pushed (with --db); run read-only.")
@click.option("--table", required=True, help="Table name or id.")
@click.option("--key", required=True, help="Key column(s), comma-separated; or 'id' (row id).")
@click.option(
    "--mode",
    type=click.Choice(PUSH_MODES),
    default=DEFAULT_PUSH_MODE,
    show_default=True,
    help="mirror = upsert, then delete table rows the source lacks.",
)
@click.option("--sheet", help="Excel sheet name (default: the first sheet).")
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option(
    "--plan-out", type=click.Path(dir_okay=False, path_type=Path),
    help="Save the plan as JSON for `connector apply`; write nothing now.",
)
@click.option(
    "--max-delete-ratio", type=click.FloatRange(0, 1),
    help="mirror: largest share of the table it may delete [default 0.2; 0 if the source is empty].",
)
@click.option("--allow-delete", type=click.IntRange(min=0), help="mirror: allow up to N deletes.")
@click.option(
    "--rejects", type=click.Path(dir_okay=False, path_type=Path),
    help="CSV for rows the server rejects [default FILE.rejects.csv, only when there are any].",
)
@_max_concurrency_options
@click.option(
    "--date-format", metavar="FORMAT",
    help="Read day/month dates such as 05/03/2024 with this strptime format (%d/%m/%Y or "
    "%m/%d/%Y); needed only where a date column leaves the order open.",
)
@click.option(
    "--null-values", metavar="A,B,...", callback=_null_values,
    help="Cell texts that mean an empty cell, comma-separated (e.g. NA,-). By default only an "
    "empty cell is empty: None, null or NA is text.",
)
@click.option(
    "--excel-safe", is_flag=True,
    help="FILE came from `export --format csv --excel-safe`: take off the ' it put before "
    "text starting with = + - @ (or a tab or carriage return), in the header too.",
)
@click.option(
    "--merged-cells", type=click.Choice(MERGED_CELLS), default="refuse", show_default=True,
    help="Excel: refuse a sheet with merged cells (naming each range), or fill the cells a "
    "merge covers with its value.",
)
@base_url_option
@_json_option
@click.pass_context
def push_command(
    ctx: click.Context, file: str | None, db: str | None, sql: str | None, table: str,
    key: str, mode: str, sheet: str | None,
    dry_run: bool, plan_out: Path | None, max_delete_ratio: float | None,
    allow_delete: int | None, rejects: Path | None, max_concurrency: int | None,
    concurrency: int | None, date_format: str | None, null_values: tuple[str, ...],
    excel_safe: bool, merged_cells: str, base_url: str | None, as_json: bool,
) -> None:
    """Make TABLE match FILE (CSV, .xlsx or Parquet) by --key: validate, plan, apply.

    FILE may be a folder of Parquet files or an object storage URL (s3://bucket/key.parquet,
    a CSV, or a prefix of Parquet files). Or push the rows a query returns: --db URL --sql
    QUERY (reverse ETL from a warehouse). The columns are checked against TABLE before a row
    is read; every problem in the rows is reported (row, column, value) before any write.
    The API key is read from CONNECTOR_API_KEY. With --json, one summary is printed on
    stdout whatever happens, failures before any write included.

    \b
    Examples:
      connector push prices.csv --table Products --key Name --dry-run
      connector push --db sqlite:///shop.db --sql "SELECT sku AS Sku, qty AS Qty FROM stock" \\
          --table Stock --key Sku
      connector push --db duckdb:///:memory: --sql "SELECT * FROM 'exports/*.parquet'" \\
          --table Stock --key Sku --mode mirror
    """
    cap = _cap(max_concurrency, concurrency)
    source = _push_source(file, db, sql)
    planning = dry_run or plan_out is not None
    shown: list[Any] = []

    def call(client: Any) -> Any:
        from connector.push.pipeline import push
        from connector.push.plan import check_delete_guard

        spec = PushSpec(
            source, table=table, key=key, mode=cast(PushMode, mode), sheet=sheet,
            date_format=date_format, null_values=null_values, excel_safe=excel_safe,
            merged_cells=cast(MergedCells, merged_cells), max_delete_ratio=max_delete_ratio,
            allow_delete=allow_delete, rejects=rejects or _rejects_beside(file, table),
            plan_out=plan_out, names="flags",
        )
        result = push(client, spec, dry_run=dry_run, progress=None if not as_json else False)
        if planning and result.plan is not None:  # a dry run shows the plan, and whether
            shown.append(result)                   # the guard would stop it
            check_delete_guard(result.plan, max_delete_ratio=max_delete_ratio,
                               allow_delete=allow_delete, names="flags")
        return result

    label = source if isinstance(source, str) else source.name  # a query's: no password
    _drive_push(ctx, "push", call, as_json=as_json, base_url=base_url, cap=cap, file=label,
                table=table, planning=planning, shown=shown)


@with_exit_codes
@click.command("apply")
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--rejects", type=click.Path(dir_okay=False, path_type=Path),
    help="CSV for rows the server rejects [default PLAN.rejects.csv, only when there are any].",
)
@_max_concurrency_options
@base_url_option
@_json_option
@click.pass_context
def apply_command(
    ctx: click.Context, plan: Path, rejects: Path | None, max_concurrency: int | None,
    concurrency: int | None, base_url: str | None, as_json: bool,
) -> None:
    """Apply a plan saved by `push --plan-out`; refuses if the rows it touches changed since.
    """
    cap = _cap(max_concurrency, concurrency)
    rejects = rejects or plan.with_name(plan.stem + ".rejects.csv")

    def call(client: Any) -> Any:
        from connector.push.pipeline import apply

        return apply(client, plan, rejects=rejects, progress=None if not as_json else False)

    _drive_push(ctx, "apply", call, as_json=as_json, base_url=base_url, cap=cap, file=str(plan),
                table=None, planning=False, shown=[])


def _push_source(file: str | None, db: str | None, sql: str | None) -> str | Query:
    """FILE, or the query --db and --sql name (a usage error unless it is one of the two)."""
    if file is not None and (db is not None or sql is not None):
        raise click.UsageError("give a FILE or --db and --sql, not both")
    if file is not None:
        return file
    if db is None or sql is None:
        missing = "a FILE, or --db and --sql" if db is None and sql is None else (
            "--sql (the query to run on --db)" if sql is None else "--db (the database --sql runs on)"
        )
        raise click.UsageError(f"missing {missing}")
    return Query(db, sql)


def _rejects_beside(file: str | None, table: str) -> Path:
    """Where rejected rows go by default: beside a local FILE, else in the working directory
    named after the table."""
    from connector.locations import is_remote

    if file is not None and not is_remote(file) and not Path(file).is_dir():
        return Path(file).with_name(Path(file).stem + ".rejects.csv")
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in table)
    return Path(f"{stem}.rejects.csv")


def _drive_push(
    ctx: click.Context, command: str, call: Any, *, as_json: bool, base_url: str | None,
    cap: int | None, file: str, table: str | None, planning: bool, shown: list[Any],
) -> None:
    """Run a push or apply (`call(client)` returns its `PushResult`) and end the command
    through `connector.driver.drive`: its one summary (the push as the one entry of
    ``pushes``, one status by `connector.results.outcome`) and exit code, whatever happens.
    `file` and `table` name the push while no plan names it; `shown`: a dry run's result,
    kept to print its plan even when the delete guard then refuses it."""
    from connector.driver import drive

    done: dict[str, Any] = {}

    def body() -> Any:
        import time

        from connector.process import interrupt_code
        from connector.push.report import failed
        from connector.results import PushResult, RunSummary, outcome
        from connector.stamps import now

        started, began = now(), time.monotonic()
        client: Any = None
        result: PushResult | None = None
        error: ConnectorError | None = None
        status: Any = "ok"
        code: int = ExitCode.OK
        message: str | None = None
        try:
            with command_client(base_url, cap) as client:
                result = call(client)
        except ConnectorError as exc:
            error = exc
            show_traceback(ctx)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM mid-push: one summary still
            by = "Ctrl-C" if interrupt_code(exc) == ExitCode.INTERRUPTED else "SIGTERM"
            stop = (f"interrupted by {by}: rows in flight may have been written; run the push "
                    "again to finish")
            entry = PushResult(file, table, "failed", error=stop)
            status, code, message = "interrupted", interrupt_code(exc), stop
        if error is not None:
            entry = failed(error, file, table, shown[0] if shown else None)
            status, code = outcome([entry], entry.error, error.exit_code)
            message = entry.error
        elif result is not None:
            entry = result
            status, code = outcome([entry], None)
        limit = client.concurrency if client is not None else None
        summary = RunSummary(
            job=command, status=status, exit_code=int(code), dry_run=planning,
            started_at=started, finished_at=now(), state_file=None, destinations=[],
            pushes=[entry], error=message, seconds=round(time.monotonic() - began, 3),
            concurrency=limit.peak if limit else 0, max_concurrency=limit.maximum if limit else 0,
        )
        done.update(result=result, error=error)
        if entry.rejected:
            click.secho(f"{len(entry.rejected)} row(s) rejected; written to {entry.rejects_file}",
                        fg="yellow", err=True)
        return summary

    def text(summary: Any) -> None:
        from connector.push.report import describe_result, headline

        if shown:
            click.echo(shown[0].plan.describe())
        error = done.get("error")
        if error is not None:
            head, details = headline(error)
            click.secho(f"error: {head}", fg="red", err=True)
            for line in details:
                click.echo(f"  {line}", err=True)
        elif summary.status == "interrupted":
            return
        elif (saved := summary.pushes[0].plan_file) is not None:
            click.echo(f"plan saved to {saved}; apply it with: connector apply {saved}")
        elif not planning:
            click.echo(describe_result(done["result"]))

    drive(ctx, lambda: command, body, as_json=as_json, text=text, dry_run=planning)
