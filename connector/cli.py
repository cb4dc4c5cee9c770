"""The `connector` command: parse, call the library, print. No logic lives here.

Exit codes: 0 ok, 1 failed, 2 usage or configuration error, 3 partial (some tables skipped).
Errors print one line without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from connector.errors import ConnectorError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3


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
            ctx.exit(130)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging.")
@click.version_option(package_name="table-data-connector")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Move data between the Table Data REST API and DataFrames, Parquet and SQL.

    The API key is read from CONNECTOR_API_KEY and the base URL from CONNECTOR_BASE_URL
    (or --base-url). The key is never printed or logged.
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
