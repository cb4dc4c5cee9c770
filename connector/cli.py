"""The `connector` command: parse, call the library, print. No logic lives here.

Exit codes are `connector.errors.ExitCode`, the same from every command; every command's
`--help` ends with them in words (`connector.errors.EXIT_CODES`, `exit_codes_help`).

Errors print one line without a traceback unless ``--debug`` is given; usage errors too
(``error: Invalid value for '--max-wait': ...``). Every wait before a retry prints one line
on stderr (``retrying in 4.0 s (attempt 3 of 10): connection refused``); ``--max-wait``
bounds their total. The API key never appears: it is checked before any request, and taken
out of every log record and traceback (``connector.api.keys``).
"""

from __future__ import annotations

import signal
import sys


def _stop_starting(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while this module imports: one line and the exit code, not a
    traceback from deep inside an import. (The codes are `ExitCode.INTERRUPTED` and
    `TERMINATED`; importing it here would widen the window this closes.)"""
    interrupted = signum == signal.SIGINT
    sys.stderr.write("interrupted\n" if interrupted else "terminated\n")
    raise SystemExit(130 if interrupted else 143)


def _catch_starting() -> list[signal.Signals]:
    """Take Ctrl-C and SIGTERM while the imports below run, first thing; they are given back
    at the end of this module, so a program importing it keeps its own handling. Only the
    defaults are replaced, and only on the main thread (where handlers can be set at all)."""
    taken = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        if signal.getsignal(signum) is default:
            try:
                signal.signal(signum, _stop_starting)
            except ValueError:  # not the main thread
                break
            taken.append(signum)
    return taken


_starting = _catch_starting()

import atexit  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
from typing import TYPE_CHECKING, Any, TypeVar  # noqa: E402

import click  # noqa: E402

from connector.errors import EXIT_CODES, ConnectorError, ExitCode  # noqa: E402

_Command = TypeVar("_Command", bound=click.Command)

if TYPE_CHECKING:  # imported where a command runs: `connector --help` stays light
    from connector.api import Client


class _UsageLine(click.ClickException):
    """A usage error as one line (``error: ...``), exit 2: what to fix, then where to read."""

    exit_code = ExitCode.USAGE

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message())
        self.command = error.ctx.command_path if error.ctx else "connector"

    def show(self, file: Any = None) -> None:
        message = " ".join(self.format_message().split())  # one line, whatever click wrapped
        click.secho(f"error: {message} (see: {self.command} --help)", fg="red", err=True)


#: Commands whose modules load only when the command runs (the server's brings starlette,
#: sync's and load's bring pandas and SQLAlchemy, push's and apply's pandas): name ->
#: (module, attribute, the first sentence of its help, which `connector --help` shows
#: without importing the module).
#: tests/test_startup.py keeps these sentences equal to the commands' own.
_LAZY: dict[str, tuple[str, str, str]] = {
    "export": ("connector.jobs.cli", "export",
               "Export tables to Parquet, CSV, Delta Lake or Iceberg in a directory or object storage."),
    "keys": ("connector.server.cli", "keys",
             "Manage API keys of a reference server's database."),
    "load": ("connector.jobs.cli", "load",
             "Load tables into a SQL database, one SQL table per table."),
    "apply": ("connector.push.cli", "apply_command",
              "Apply a plan saved by `push --plan-out`; refuses if the rows it touches changed since."),
    "push": ("connector.push.cli", "push_command",
             "Make TABLE match FILE (CSV, .xlsx or Parquet) by --key: validate, plan, apply."),
    "serve": ("connector.server.cli", "serve",
              "Run the reference Table Data REST API server (base path /v1) until Ctrl-C or SIGTERM."),
    "server": ("connector.server.cli", "server",
               "Administer a reference server's database (works while the server runs)."),
    "sync": ("connector.jobs.cli", "sync",
             "Run the job in JOB_FILE: push its spreadsheets, then sync its tables."),
}


class _Root(click.Group):
    """Turns our errors into one clean line and a meaningful exit code, and imports a
    command's module only when that command runs (`_LAZY`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _LAZY:
            module, attribute, _ = _LAZY[cmd_name]
            from connector.process import collector_paused

            with collector_paused():  # an export's start: one full collection, ~20 ms
                command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's list of commands, with the lazy ones' help taken from `_LAZY`."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is None:
                command = click.Command(name, help=_LAZY[name][2])  # shortened as click would
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:  # the root's own options (--max-wait)
            raise _UsageLine(exc) from exc
        except KeyboardInterrupt:  # while parsing, or printing --help
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(ExitCode.INTERRUPTED) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a command's options and arguments
            raise _UsageLine(exc) from exc
        except ConnectorError as exc:
            show_traceback(ctx)
            click.secho(f"error: {exc}", fg="red", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # a stop, while a command loaded or ran
            from connector.process import interrupt_code

            code = interrupt_code(exc)
            click.echo("interrupted" if code == ExitCode.INTERRUPTED else "terminated", err=True)
            ctx.exit(code)


def show_traceback(ctx: click.Context) -> None:
    """With ``--debug``, the exception being handled as a traceback on stderr (no key)."""
    if ctx.obj and ctx.obj.get("debug"):
        import traceback

        from connector.api.keys import redact

        click.echo(redact(traceback.format_exc()).rstrip("\n"), err=True)


def _max_wait(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """--max-wait: seconds >= 0, finite (click's FloatRange lets nan and inf through)."""
    if value is None:
        return None
    from connector.api.retry import check_max_wait
    from connector.errors import ConfigError

    try:
        return check_max_wait(value, "--max-wait")
    except ConfigError:
        from_env = ctx.get_parameter_source("max_wait") is click.core.ParameterSource.ENVIRONMENT
        hint = "'--max-wait' (from the environment variable CONNECTOR_MAX_WAIT)" if from_env else None
        raise click.BadParameter(
            f"must be a number of seconds >= 0, like 30, not {value!r}", ctx, param, hint
        ) from None


class _Lines(logging.Handler):
    """Log records as bare lines on the current stderr (retry waits: ``retrying in ...``)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except Exception:
            self.handleError(record)


def _setup_logging(ctx: click.Context, debug: bool) -> None:
    """Warnings (debug: everything) on stderr; retry waits as bare lines; no key anywhere.
    The retry logger is given back as it was when the command ends."""
    from connector.api.keys import RedactingFilter

    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    retries = logging.getLogger("connector.api.retry")
    lines = _Lines()
    lines.addFilter(RedactingFilter())
    level, propagate = retries.level, retries.propagate
    retries.addHandler(lines)
    retries.setLevel(logging.INFO)
    retries.propagate = False

    def restore() -> None:
        retries.removeHandler(lines)
        retries.setLevel(level)
        retries.propagate = propagate

    ctx.call_on_close(restore)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging (never the key).")
@click.option(
    "--max-wait",
    metavar="SECONDS",
    envvar="CONNECTOR_MAX_WAIT",
    callback=_max_wait,
    help="Give up retrying a request (connection refused or reset, timeouts, 5xx, 429) "
    "after this many seconds in all; 0: no retries [env CONNECTOR_MAX_WAIT; default 120].",
)
@click.version_option(package_name="table-data-connector")
@click.pass_context
def main(ctx: click.Context, debug: bool, max_wait: float | None) -> None:
    """Move data between the Table Data REST API and DataFrames, Parquet and SQL.

    The API key is read from CONNECTOR_API_KEY and the base URL from CONNECTOR_BASE_URL
    (or --base-url). The key is never printed or logged. Each wait before a retry prints
    one line on stderr; --max-wait bounds them.
    """
    from connector.api.retry import default_max_wait
    from connector.process import stop_signals

    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["max_wait"] = max_wait
    _setup_logging(ctx, debug)
    ctx.with_resource(default_max_wait(max_wait))
    # From here to the command's end, Ctrl-C and SIGTERM unwind as a stop (130 / 143), while
    # the command's module loads too; commands that run jobs report it in their summary.
    ctx.with_resource(stop_signals())


def run() -> None:
    """The `connector` program (its script and ``python -m connector``): `main` in a process
    of its own. A program calling `main` itself keeps its environment as it is."""
    # Before a command's module imports numpy: OpenBLAS starts a thread per core that spins
    # while the process starts (0.09 s of CPU on 2 cores), and no command does linear
    # algebra. A value the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    atexit.register(_collect_once_at_exit)
    main()


def _collect_once_at_exit() -> None:
    """The program's garbage collected once, the rest frozen: the interpreter's own
    collections at exit, several of them, walked every object a command left behind (0.3 to
    0.8 s of a quiet sync into SQLite or Iceberg, more after a large push). This one is
    registered before any command runs, so it runs after their exit handlers; what is left
    is still freed when nothing refers to it (files close, buffers flush).

    Not where DuckDB was loaded: its bindings report every object still alive at their
    teardown as a leak on stderr, and an object a module refers to (a stop's traceback, its
    frames) only becomes garbage as the modules are torn down, after the freeze."""
    if "duckdb" in sys.modules:
        return
    gc.collect()
    gc.freeze()


def exit_codes_help() -> str:
    """`EXIT_CODES` as a help paragraph (``\\b``: click keeps its lines as they are)."""
    import textwrap

    lines = ["\b", "Exit codes, the same from every command:"]
    for code, meaning in EXIT_CODES.items():
        lines += textwrap.wrap(meaning, 78, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7)
    return "\n".join(lines)


def with_exit_codes(command: _Command) -> _Command:
    """`command` with the exit codes as the last paragraph of its help."""
    import inspect

    command.help = f"{inspect.cleandoc(command.help or '')}\n\n{exit_codes_help()}"
    return command


with_exit_codes(main)


# The other areas' commands (serve, server, keys, sync, export, load, push, apply) are
# in `_LAZY`.

# --- tables, schema: what the workspace holds (owner: client) ------------------------------

base_url_option = click.option(
    "--base-url", envvar="CONNECTOR_BASE_URL", help="API base URL ending in /v1 [env CONNECTOR_BASE_URL]."
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def command_client(base_url: str | None, max_concurrency: int | None = None) -> Client:
    """A command's client: its errors name the flag and variable the URL and key come from
    (a library caller's errors name its parameters)."""
    from connector.api import Client

    return Client(
        base_url, max_concurrency=max_concurrency,
        url_source="CONNECTOR_BASE_URL or --base-url", key_source="CONNECTOR_API_KEY",
    )


@main.command()
@base_url_option
@_json_option
def tables(base_url: str | None, as_json: bool) -> None:
    """List the tables the API key can read."""
    import dataclasses
    import json

    with command_client(base_url) as client:  # not the Workspace: it brings pyarrow, unused here
        found = client.list_tables()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(t) for t in found], indent=2))
        return
    from connector.reporting import shown

    rows = [("ID", "NAME", "COLUMNS", "ROWS")]
    rows += [(t.id, shown(t.name), str(t.columns), str(t.rows)) for t in found]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[3])


@main.command()
@click.argument("table")
@base_url_option
@_json_option
def schema(table: str, base_url: str | None, as_json: bool) -> None:
    """Show the columns of TABLE (a name or an id) and how they load."""
    import json

    from connector.workspace import Workspace

    with command_client(base_url) as client:
        found = Workspace(client=client).schema(table)
    if as_json:
        columns = [
            {"name": c.name, "type": c.type, "required": c.required, "options": c.options}
            for c in found.columns
        ]
        click.echo(json.dumps({"id": found.id, "name": found.name, "columns": columns}, indent=2))
        return
    from connector.reporting import shown

    click.echo(f"{shown(found.name)} ({found.id})")
    width = max((len(shown(c.name)) for c in found.columns), default=0)
    for c in found.columns:
        extra = " required" if c.required else ""
        if c.options is not None:
            extra += " options: " + ", ".join(map(shown, c.options))
        click.echo(f"  {shown(c.name).ljust(width)}  {shown(c.type).ljust(8)} -> {c.pandas_dtype}{extra}")


def max_concurrency_option(
    ctx: click.Context, param: click.Parameter, value: int | None
) -> int | None:
    """--max-concurrency on every command that has it (and push's old name --concurrency):
    1 to connector.api.concurrency.MAX_CONCURRENCY, else a usage error naming the option."""
    if value is None:
        return None
    from connector.api.concurrency import MAX_CONCURRENCY, check_max_concurrency

    try:
        return check_max_concurrency(value)
    except ValueError:
        raise click.BadParameter(
            f"must be an integer from 1 to {MAX_CONCURRENCY}, not {value}", ctx, param
        ) from None


# Start-up is over: Ctrl-C is a KeyboardInterrupt again, which `_Root` turns into exit 130
# and a command may catch to tidy up; SIGTERM is the default (or the runner's) again.
if signal.SIGINT in _starting:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.SIGTERM in _starting:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
