"""`connector export` and `connector load`: parse, pick tables, call `transfer`, summarise.

Exit codes: 0 every table copied, 1 a table failed, 2 usage or configuration error,
3 partial (some tables were skipped because the key may not read them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
import pyarrow as pa

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Client
from connector.load import sql
from connector.load.csv import write_csv
from connector.load.parquet import write_parquet
from connector.load.transfer import Summary, export_path, transfer
from connector.schema import Table

__all__ = ["export", "load"]


def _shared(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options both commands take."""
    for option in reversed([
        click.option("--table", "tables", multiple=True, metavar="NAME",
                     help="A table name or id (repeat for more). Default: every table."),
        click.option("--page-size", type=click.IntRange(2, MAX_PAGE_SIZE),
                     default=DEFAULT_PAGE_SIZE, show_default=True, help="Rows per API request."),
        click.option("--base-url", envvar="CONNECTOR_BASE_URL",
                     help="API base URL ending in /v1 (default: $CONNECTOR_BASE_URL)."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
    ]):
        command = option(command)
    return command


@click.command()
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the files (one per table, replaced atomically).")
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv"]), default="parquet",
              show_default=True, help="parquet keeps every column type; csv is plain text.")
@_shared
@click.pass_context
def export(ctx: click.Context, out_dir: Path, fmt: str, tables: tuple[str, ...],
           page_size: int, base_url: str | None, as_json: bool) -> None:
    """Export tables to Parquet or CSV files in a directory.

    One <table name>.parquet (or .csv) per table, written aside and renamed into place, so
    a failed export leaves the previous file. The API key is read from CONNECTOR_API_KEY.

    Exit codes: 0 every table exported · 1 a table failed · 2 bad usage or configuration ·
    3 partial (a table the key may not read was skipped).
    """
    writer = write_parquet if fmt == "parquet" else write_csv
    taken: set[Path] = set()

    def write(table: Table, batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> tuple[int, str]:
        path = export_path(out_dir, table, fmt, taken)
        return writer(batches, schema, path), str(path)

    with Client(base_url) as client:
        summary = transfer(client, tables, write, page_size=page_size)
    _report(summary, as_json, "exported")
    ctx.exit(summary.exit_code)


@click.command()
@click.option("--to", "url", required=True, metavar="URL",
              help="SQLAlchemy database URL, e.g. sqlite:///warehouse.db or postgresql://u@h/db.")
@click.option("--mode", type=click.Choice(sql.MODES), default="replace", show_default=True,
              help="replace: swap in a fresh table; append: add only rows whose _id the table "
                   "does not hold yet, leaving held rows unchanged; merge: upsert by row id.")
@_shared
@click.pass_context
def load(ctx: click.Context, url: str, mode: sql.Mode, tables: tuple[str, ...],
         page_size: int, base_url: str | None, as_json: bool) -> None:
    """Load tables into a SQL database, one SQL table per table.

    replace swaps each table in within one transaction, so readers never see it partial or
    empty. The API key is read from CONNECTOR_API_KEY.

    Exit codes: 0 every table loaded · 1 a table failed · 2 bad usage or configuration ·
    3 partial (a table the key may not read was skipped).
    """
    engine = sql.connect(url)
    try:
        def write(table: Table, batches: Iterable[pa.RecordBatch], _: pa.Schema) -> tuple[int, str]:
            return sql.load_table(batches, table, engine, mode=mode), table.name

        with Client(base_url) as client:
            summary = transfer(client, tables, write, page_size=page_size)
    finally:
        engine.dispose()
    _report(summary, as_json, "loaded")
    ctx.exit(summary.exit_code)


def _report(summary: Summary, as_json: bool, verb: str) -> None:
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
        return
    for t in summary.tables:
        if t.status == "ok":
            click.echo(f"{t.name}: {t.rows:,} rows in {t.seconds:.1f} s -> {t.target}")
        else:
            click.echo(f"{t.name}: {t.status}: {t.error}")
    click.echo(
        f"{summary.count('ok')} of {len(summary.tables)} tables {verb}, {summary.rows:,} rows "
        f"in {summary.seconds:.1f} s"
        + (f"; {summary.count('skipped')} skipped" if summary.count("skipped") else "")
        + (f"; {summary.count('failed')} failed" if summary.count("failed") else "")
    )
