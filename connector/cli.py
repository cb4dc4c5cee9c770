"""The `connector` command: parse, call the library, print. No logic lives here.

Exit codes are `connector.errors.ExitCode`, the same from every command:

    0  done
    1  failed: a table, a push or a destination failed, the source file is invalid, or
       the server could not be reached (after the retry policy gave up)
    2  bad usage or configuration, including a table no table answers to ("did you mean")
    3  partial: some tables were skipped or failed, or the server rejected some rows
    75 another run of the same job holds its lock
    130 / 143  interrupted by Ctrl-C / SIGTERM

Errors print one line without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from connector.errors import ConnectorError, ExitCode
from connector.modes import DEFAULT_PUSH_MODE, PUSH_MODES


class _Root(click.Group):
    """Turns our errors into one clean line and a meaningful exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConnectorError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.secho(f"error: {exc}", fg="red", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(ExitCode.INTERRUPTED)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging.")
@click.version_option(package_name="table-data-connector")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Move data between the Table Data REST API and DataFrames, Parquet and SQL.

    The API key is read from CONNECTOR_API_KEY and the base URL from CONNECTOR_BASE_URL
    (or --base-url). The key is never printed or logged.

    \b
    Exit codes, the same from every command:
      0    done
      1    failed (a table, push or destination; an invalid file; server unreachable)
      2    bad usage or configuration (an unknown table: "did you mean ...?")
      3    partial (tables skipped or failed, or rows rejected by the server)
      75   another run of the same job holds its lock
      130  interrupted by Ctrl-C
      143  terminated (SIGTERM)
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# Subcommands register themselves below, one import per area.

from connector.server.cli import keys, serve, server  # noqa: E402

main.add_command(serve)
main.add_command(server)
main.add_command(keys)

from connector.jobs.cli import sync  # noqa: E402

main.add_command(sync)

from connector.load.cli import export, load  # noqa: E402

main.add_command(export)
main.add_command(load)

# --- tables, schema: what the workspace holds (owner: client) ------------------------------

_base_url_option = click.option(
    "--base-url", envvar="CONNECTOR_BASE_URL", help="API base URL ending in /v1 [env CONNECTOR_BASE_URL]."
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
#: connector.push.DEFAULT_CONCURRENCY, repeated: importing it would load pandas at every CLI
#: start. tests/push/test_cli.py keeps the two equal.
_PUSH_CONCURRENCY = 8


@main.command()
@_base_url_option
@_json_option
def tables(base_url: str | None, as_json: bool) -> None:
    """List the tables the API key can read."""
    import dataclasses
    import json

    from connector.workspace import Workspace

    with Workspace(base_url) as ws:
        found = ws.tables()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(t) for t in found], indent=2))
        return
    rows = [("ID", "NAME", "COLUMNS", "ROWS")]
    rows += [(t.id, t.name, str(t.columns), str(t.rows)) for t in found]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[3])


@main.command()
@click.argument("table")
@_base_url_option
@_json_option
def schema(table: str, base_url: str | None, as_json: bool) -> None:
    """Show the columns of TABLE (a name or an id) and how they load."""
    import json

    from connector.workspace import Workspace

    with Workspace(base_url) as ws:
        found = ws.schema(table)
    if as_json:
        columns = [
            {"name": c.name, "type": c.type, "required": c.required, "options": c.options}
            for c in found.columns
        ]
        click.echo(json.dumps({"id": found.id, "name": found.name, "columns": columns}, indent=2))
        return
    click.echo(f"{found.name} ({found.id})")
    width = max((len(c.name) for c in found.columns), default=0)
    for c in found.columns:
        extra = " required" if c.required else ""
        if c.options is not None:
            extra += " options: " + ", ".join(c.options)
        click.echo(f"  {c.name.ljust(width)}  {c.type.ljust(8)} -> {c.pandas_dtype}{extra}")


# --- push, apply: a spreadsheet or frame into a table (owner: push) -------------------------


@main.command("push")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
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
@click.option("--concurrency", type=click.IntRange(min=1), default=_PUSH_CONCURRENCY, show_default=True,
              help="Write requests in flight at once (under the shared rate limiter).")
@_base_url_option
def push_command(
    file: Path, table: str, key: str, mode: str, sheet: str | None, dry_run: bool,
    plan_out: Path | None, max_delete_ratio: float | None, allow_delete: int | None,
    rejects: Path | None, concurrency: int, base_url: str | None,
) -> None:
    """Make TABLE match FILE (CSV, .xlsx or Parquet) by --key: validate, plan, apply.

    Every problem in FILE is reported (spreadsheet row, column, value) before any write. The
    API key is read from CONNECTOR_API_KEY.

    Exit codes: 0 done · 1 invalid FILE or a failed push (an invalid FILE writes nothing) ·
    2 bad usage, or a mirror stopped by its delete guard · 3 rows rejected by the server
    (written to --rejects).
    """
    from connector.api import Client
    from connector.push import push
    from connector.push.plan import check_delete_guard
    from connector.push.report import describe_plan, describe_result

    rejects = rejects or file.with_name(file.stem + ".rejects.csv")
    with Client(base_url) as client:
        result = push(
            client, file, table=table, key=key, mode=mode, dry_run=dry_run, sheet=sheet,
            max_delete_ratio=max_delete_ratio, allow_delete=allow_delete, plan_out=plan_out,
            rejects=rejects, concurrency=concurrency,
        )
    if dry_run or plan_out is not None:
        click.echo(describe_plan(result.plan))
        check_delete_guard(result.plan, max_delete_ratio=max_delete_ratio, allow_delete=allow_delete)
        if plan_out is not None:
            click.echo(f"plan saved to {plan_out}; apply it with: connector apply {plan_out}")
        return
    _push_finish(result, rejects, describe_result(result))


@main.command("apply")
@click.argument("plan", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--rejects", type=click.Path(dir_okay=False, path_type=Path),
    help="CSV for rows the server rejects [default PLAN.rejects.csv, only when there are any].",
)
@click.option("--concurrency", type=click.IntRange(min=1), default=_PUSH_CONCURRENCY, show_default=True,
              help="Write requests in flight at once (under the shared rate limiter).")
@_base_url_option
def apply_command(plan: Path, rejects: Path | None, concurrency: int, base_url: str | None) -> None:
    """Apply a plan saved by `push --plan-out`; refuses if the rows it touches changed since.

    Exit codes: 0 done · 1 the rows changed since the plan (nothing written) or the apply
    failed · 2 not a plan file, or bad usage · 3 rows rejected by the server (see --rejects).
    """
    from connector.api import Client
    from connector.push import apply
    from connector.push.report import describe_result

    rejects = rejects or plan.with_name(plan.stem + ".rejects.csv")
    with Client(base_url) as client:
        result = apply(client, plan, rejects=rejects, concurrency=concurrency)
    _push_finish(result, rejects, describe_result(result))


def _push_finish(result: Any, rejects: Path, summary: str) -> None:
    click.echo(summary)
    if result.rejected:
        click.secho(f"{len(result.rejected)} row(s) rejected; written to {rejects}", fg="yellow", err=True)
        sys.exit(ExitCode.PARTIAL)
