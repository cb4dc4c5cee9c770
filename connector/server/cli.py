"""`connector serve`, `connector server create-table`, `connector keys create`."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from pathlib import Path
from types import FrameType

import click

from connector.errors import ConfigError
from connector.server import alter
from connector.server.columns import SpecError
from connector.server.limits import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    KEEP_ALIVE_TIMEOUT,
    MAX_BODY_BYTES,
    MAX_CELL_BYTES,
    MAX_HEAD_BYTES,
    MAX_RESPONSE_BYTES,
    Limits,
)
from connector.server.ratelimit import DEFAULT_HEADERS, header_forms
from connector.server.storage import DEFAULT_DB, Storage

_rate = click.FloatRange(0.0, 1.0)
_bytes = click.IntRange(min=1)


def _forms(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        header_forms(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value

#: Seconds a stopping server gives requests in flight to finish before it cuts them.
SHUTDOWN_GRACE_SECONDS = 10

# A key is printable ASCII without spaces: what an Authorization header carries intact.
_KEY = re.compile(r"[\x21-\x7e]{1,512}")


def _stamp(context: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A stamping fault's time, checked and written as the server writes stamps."""
    from connector.server.faults import BadSetting, Faults

    if value is None:
        return None
    name = str(param.name)
    try:
        stamped = Faults().replace({name: value})
    except BadSetting as exc:
        raise click.BadParameter(str(exc)) from None
    return str(getattr(stamped, name))


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port to listen on.")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="SQLite file (or :memory:).")
@click.option("--demo", is_flag=True, help="Seed the demo workspace if the database has no tables.")
@click.option(
    "--demo-key",
    envvar="CONNECTOR_DEMO_KEY",
    default=None,
    help="Register this full-access key unless it exists (an existing key keeps its "
    "permissions). Prefer the environment variable CONNECTOR_DEMO_KEY or --demo-key-file: "
    "other users see command lines in `ps`. Without a key, --demo on a database with no key "
    "creates one and prints it once on stderr.",
)
@click.option("--demo-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Read the --demo-key from this file (one line; a trailing newline is ignored).")
@click.option("--rate-limit", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="Requests a second allowed per key, and failed authentications a second per "
              "client address; above it 429 with Retry-After.")
@click.option("--fail-rate", type=_rate, default=0.0, help="Fault: random 500 before doing anything.")
@click.option("--throttle-rate", type=_rate, default=0.0, help="Fault: random 429 with Retry-After.")
@click.option("--latency-ms", type=click.FloatRange(min=0.0), default=0.0, help="Fault: delay every request.")
@click.option("--fail-after-write-rate", type=_rate, default=0.0,
              help="Fault: commit a write, then answer 500.")
@click.option("--drop-rate", type=_rate, default=0.0,
              help="Fault: cut the connection mid-response (after committing, for writes).")
@click.option("--seed", type=int, default=None, help="Seed the fault dice (reproducible runs).")
@click.option("--delete-on-read", type=click.IntRange(min=0), default=0, metavar="N",
              help="Fault: before serving each page of rows, delete up to N rows that sort before "
              "its offset (rows the reader has passed).")
@click.option("--insert-on-read", type=click.IntRange(min=0), default=0, metavar="N",
              help="Fault: before serving each page of rows, insert N copies of random rows "
              "of the table.")
@click.option("--max-page-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Fault: clamp `limit` to N instead of 1000 (the applied limit is reported).")
@click.option("--refuse-system-filters", is_flag=True,
              help="Fault: answer 400 (field 'filter') to filters on id, created_at, updated_at.")
@click.option("--late-visibility-ms", type=click.FloatRange(min=0.0), default=0.0, metavar="D",
              help="Fault: row writes (creates, updates, deletes) are answered and stamped on arrival "
              "but reach reads (pages, totals, filters, sorts) D ms later, in arrival order, like a "
              "lagging replica; a stop (SIGTERM, Ctrl-C) applies them first.")
@click.option("--stamp-updated-at", callback=_stamp, default=None, metavar="STAMP",
              help="Fault: rows created or changed get this updated_at instead of the clock's "
              "(a wrong clock, an import with odd stamps): a UTC time from year 1 to 9999, like "
              "2999-01-01T00:00:00Z.")
@click.option("--stamp-created-at", callback=_stamp, default=None, metavar="STAMP",
              help="Fault: rows created get this created_at instead of the clock's.")
@click.option("--rate-headers", default=DEFAULT_HEADERS, show_default=True, metavar="FORMS", callback=_forms,
              help="With --rate-limit: the header forms each answer publishes the key's limit in, "
              "comma-separated: ietf (RateLimit-Policy and RateLimit, the IETF draft's fields), draft "
              "(RateLimit-Limit/-Remaining/-Reset, its older drafts), x (X-RateLimit-*); or none.")
@click.option("--fault-control", is_flag=True,
              help="Accept PUT /v1/_faults {setting: value, ...} to change faults while running.")
@click.option("--max-body-bytes", type=_bytes, default=MAX_BODY_BYTES, show_default=True,
              help="Largest request body; above it 413.")
@click.option("--max-cell-bytes", type=_bytes, default=MAX_CELL_BYTES, show_default=True,
              help="Largest text cell (UTF-8 bytes) a write may store; above it 400 VALIDATION_ERROR "
              "naming the column.")
@click.option("--max-response-bytes", type=_bytes, default=MAX_RESPONSE_BYTES, show_default=True,
              help="About the largest page of rows: when the rows asked for would exceed it, the page "
              "holds fewer (at least two, one if limit=1) and its `limit` says how many; step by it.")
@click.option("--max-head-bytes", type=_bytes, default=MAX_HEAD_BYTES, show_default=True,
              help="Largest request head (request line and headers); above it 414 when the request "
              "line alone is, else 431.")
@click.option("--header-timeout", type=click.FloatRange(min=0.0, min_open=True), default=HEADER_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="A request's head must be whole this long after the connection opened or the previous "
              "answer ended; else 408 and the connection closes.")
@click.option("--body-timeout", type=click.FloatRange(min=0.0, min_open=True), default=BODY_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="The longest pause while a client sends a body; then 408 and the connection closes.")
@click.option("--keep-alive-timeout", type=click.IntRange(min=1), default=KEEP_ALIVE_TIMEOUT, show_default=True,
              metavar="SECONDS", help="Close a connection idle this long between requests.")
def serve(
    host: str,
    port: int,
    db: str,
    demo: bool,
    demo_key: str | None,
    demo_key_file: Path | None,
    rate_limit: float | None,
    fail_rate: float,
    throttle_rate: float,
    latency_ms: float,
    fail_after_write_rate: float,
    drop_rate: float,
    seed: int | None,
    delete_on_read: int,
    insert_on_read: int,
    max_page_size: int | None,
    refuse_system_filters: bool,
    late_visibility_ms: float,
    stamp_updated_at: str | None,
    stamp_created_at: str | None,
    rate_headers: str,
    fault_control: bool,
    max_body_bytes: int,
    max_cell_bytes: int,
    max_response_bytes: int,
    max_head_bytes: int,
    header_timeout: float,
    body_timeout: float,
    keep_alive_timeout: int,
) -> None:
    """Run the reference Table Data REST API server (base path /v1) until Ctrl-C or SIGTERM.

    Requests need a key of the database: create one with `connector keys create`, or use
    --demo / --demo-key. The --*-rate, --latency-ms, --*-on-read, --max-page-size,
    --refuse-system-filters and --seed options inject faults so clients can be tested
    against throttling, failures and tables changing under a read; --fault-control lets a
    test change them while the server runs.

    A key limited to some tables gets the same 403 for any other table id, whether that
    table exists or not. Requests and pages are bounded by --max-body-bytes,
    --max-cell-bytes and --max-response-bytes; connections by --max-head-bytes and the
    --*-timeout options, so clients that send half a request and stop cannot hold them.

    Stopping (Ctrl-C, SIGTERM): requests in flight get up to 10 s to finish, then the
    write-ahead log is folded into the database, which is one self-contained file again.

    Exit codes: 0 stopped · 1 could not listen (e.g. the port is taken) · 2 bad option.
    """
    import uvicorn

    from connector.server.app import create_app
    from connector.server.connection import connection_class
    from connector.server.demo import seed_demo
    from connector.server.faults import Faults

    if demo_key_file is not None:
        if demo_key:
            raise click.UsageError("give --demo-key (or CONNECTOR_DEMO_KEY) or --demo-key-file, not both")
        demo_key = _read_key(demo_key_file)
    if demo_key is not None and not _KEY.fullmatch(demo_key):
        raise click.BadParameter(
            "a key is 1 to 512 printable ASCII characters without spaces", param_hint="--demo-key"
        )
    source = click.get_current_context().get_parameter_source("demo_key")
    if source is click.core.ParameterSource.COMMANDLINE:
        click.echo("note: --demo-key shows in `ps`; CONNECTOR_DEMO_KEY or --demo-key-file does not", err=True)
    listener = _listen(host, port)  # first: a taken port fails before anything is printed or seeded
    storage = Storage(db)
    app = None
    # uvicorn handles SIGTERM and SIGINT while it serves (stop listening, let requests in
    # flight finish) and then raises the signal again: this handler turns that, or a
    # signal before serving, into an orderly exit through the `finally`, which folds the
    # WAL in.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    try:
        if demo:
            seed_demo(storage)
        if demo_key:
            existing = storage.register_key(demo_key)
            if existing is not None and (existing.read_only or existing.tables is not None):
                click.echo("note: the demo key is already a key of this database, read-only or limited "
                           "to tables; its permissions are left as they are", err=True)
        elif demo and not storage.has_keys():
            click.echo(f"demo API key (shown once): {storage.create_key()}", err=True)
        faults = Faults(
            fail_rate, throttle_rate, latency_ms, fail_after_write_rate, drop_rate, seed,
            delete_on_read=delete_on_read, insert_on_read=insert_on_read,
            max_page_size=max_page_size, refuse_system_filters=refuse_system_filters,
            late_visibility_ms=late_visibility_ms, stamp_created_at=stamp_created_at,
            stamp_updated_at=stamp_updated_at, rate_headers=rate_headers,
        )
        limits = Limits(
            body=max_body_bytes, cell=max_cell_bytes, response=max_response_bytes,
            body_timeout=body_timeout,
        )
        app = create_app(storage, faults=faults, rate_limit=rate_limit, limits=limits,
                         fault_control=fault_control)
        protocol = connection_class(
            header_timeout=header_timeout, body_timeout=body_timeout, max_head_bytes=max_head_bytes
        )
        config = uvicorn.Config(app, log_level="warning", access_log=False, http=protocol,
                                h11_max_incomplete_event_size=max_head_bytes,
                                timeout_keep_alive=keep_alive_timeout, lifespan="off",
                                timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS)
        click.echo(f"serving http://{host}:{listener.getsockname()[1]}/v1 from {db}", err=True)
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        listener.close()
        try:
            if app is not None:
                app.state.late.apply_all()  # writes the late-visibility fault still holds
        finally:
            try:
                storage.checkpoint()
            finally:
                storage.close()


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (as uvicorn would bind it), or exit 1 with one line.

    Its protocol is said (TCP), not left 0: asyncio turns Nagle's algorithm off only on
    connections whose socket says TCP, and with it on every answer waited 40 ms for the
    client's delayed acknowledgement."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        click.secho(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", fg="red", err=True)
        raise SystemExit(1) from None
    return sock


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _read_key(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--demo-key-file") from None
    lines = text.splitlines()
    if len(lines) != 1:
        raise click.BadParameter(f"{path} must hold the key on one line", param_hint="--demo-key-file")
    return lines[0].strip()


@click.group()
def server() -> None:
    """Administer a reference server's database (works while the server runs)."""


@server.command("create-table")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="SQLite file of the server.")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def create_table(db: str, spec: Path) -> None:
    """Create a table from SPEC, a JSON file {"name": ..., "columns": [...]}; print its id.

    Column types: text, choice (with "options"), number, checkbox, date; "required": true
    makes a column mandatory. The database file is created if missing.

    Exit codes: 0 created · 2 SPEC unreadable or invalid, or the table name already exists.
    """
    try:
        data = json.loads(spec.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{spec}: not a readable JSON file: {exc}") from None
    try:
        table = Storage(db).create_table(data)
    except SpecError as exc:
        raise ConfigError(f"{spec}: {exc}") from None
    click.echo(table.id)


_ALTER_HELP = f"""Change a table's columns while the server runs: the server sees the change at once.

One change a command, applied to the schema and every row in one transaction, or not at
all. TABLE is a table's name or id.

\b
{alter.RULES}

Exit codes: 0 changed · 2 no database at --db, no such table or column, or a change the
rules refuse (nothing was changed).
"""


@server.group("alter-table", help=_ALTER_HELP)
def alter_table() -> None:
    pass


_alter_db = click.option("--db", default=DEFAULT_DB, show_default=True, help="SQLite file of the server.")
#: A choice column's options, in order: positional after TYPE (add, retype) or NAME (set-options).
_options = click.argument("options", nargs=-1, metavar="[CHOICE]...")


@alter_table.command("add-column")
@_alter_db
@click.option("--required", is_flag=True,
              help="Cells may not be empty; only on a table without rows (theirs would be empty).")
@click.argument("table")
@click.argument("name")
@click.argument("type_", metavar="TYPE")
@_options
def add_column(db: str, required: bool, table: str, name: str, type_: str, options: tuple[str, ...]) -> None:
    """Add column NAME of TYPE (text, choice, number, checkbox, date) to TABLE, empty in every row.

    A choice column's options follow its type, in order (add-column Leads Stage choice New
    Won Lost). Its id is col_NAME, or col_NAME_2, _3, ... when a renamed column holds that id.

    Exit codes: 0 added · 2 no such table, a name that exists, a bad type or options, or
    --required on a table with rows.
    """
    _alter(db, table, alter.AddColumn(name, type_, required, options or None))


@alter_table.command("rename-column")
@_alter_db
@click.argument("table")
@click.argument("name")
@click.argument("new_name")
def rename_column(db: str, table: str, name: str, new_name: str) -> None:
    """Rename column NAME of TABLE to NEW_NAME; it keeps its id and every cell.

    Exit codes: 0 renamed · 2 no such table or column, or NEW_NAME exists or is not a valid name.
    """
    _alter(db, table, alter.RenameColumn(name, new_name))


@alter_table.command("retype-column")
@_alter_db
@click.argument("table")
@click.argument("name")
@click.argument("type_", metavar="TYPE")
@_options
def retype_column(db: str, table: str, name: str, type_: str, options: tuple[str, ...]) -> None:
    """Change column NAME of TABLE to TYPE, converting every cell (see `alter-table --help`).

    A cell that does not convert becomes empty; the command says how many did. To choice,
    give its options after the type, in order, as add-column and set-options take them.

    Exit codes: 0 retyped · 2 no such table or column, an unknown TYPE, options missing or
    not wanted, or a required column a cell of which would be empty.
    """
    _alter(db, table, alter.RetypeColumn(name, type_, options or None))


@alter_table.command("drop-column")
@_alter_db
@click.argument("table")
@click.argument("name")
def drop_column(db: str, table: str, name: str) -> None:
    """Drop column NAME of TABLE and its cells in every row.

    Exit codes: 0 dropped · 2 no such table or column, or NAME is the table's only column.
    """
    _alter(db, table, alter.DropColumn(name))


@alter_table.command("set-options")
@_alter_db
@click.argument("table")
@click.argument("name")
@click.argument("options", nargs=-1, required=True)
def set_options(db: str, table: str, name: str, options: tuple[str, ...]) -> None:
    """Set the OPTIONS of choice column NAME of TABLE, in order.

    A cell holding an option no longer listed becomes empty; the command says how many did.

    Exit codes: 0 set · 2 no such table or column, NAME not a choice column, OPTIONS not
    distinct, or a required column a cell of which would be empty.
    """
    _alter(db, table, alter.SetOptions(name, options))


def _alter(db: str, table: str, change: alter.ColumnChange) -> None:
    if not os.path.exists(db):
        raise ConfigError(f"no database at {db}; create a table or start the server first")
    try:
        done = Storage(db).alter_table(table, change)
    except SpecError as exc:
        raise ConfigError(str(exc)) from None
    emptied = f"; {done.emptied} cell(s) that did not convert are empty now" if done.emptied else ""
    click.echo(f"{done.table.name} ({done.table.id}): {done.summary}{emptied}")


@click.group()
def keys() -> None:
    """Manage API keys of a reference server's database."""


@keys.command("create")
@click.option("--db", default=DEFAULT_DB, show_default=True, help="SQLite file of the server.")
@click.option("--read-only", is_flag=True, help="The key may only read.")
@click.option("--table", "tables", multiple=True, help="Limit the key to this table (name or id); repeatable.")
@click.option("--admin", is_flag=True,
              help="The key may also change the faults of a server started with --fault-control "
              "(PUT /v1/_faults); no other key may.")
def create_key(db: str, read_only: bool, tables: tuple[str, ...], admin: bool) -> None:
    """Create an API key and print it. It is shown only this once (stored hashed).

    Without options the key may read and write every table.

    Exit codes: 0 created · 2 no database at --db, or an unknown --table.
    """
    if not os.path.exists(db) and db != ":memory:":
        raise ConfigError(f"no database at {db}; create a table or start the server first")
    try:
        raw = Storage(db).create_key(read_only=read_only, tables=tables or None, admin=admin)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    click.echo(raw)
