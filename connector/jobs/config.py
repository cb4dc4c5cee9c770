"""Job files: TOML read once at the boundary, validated into frozen objects.

A job names where data comes from (`[source]`), which tables (`[tables]`), where they go
(`[[destination]]`: one key naming a kind of `connector.destinations.registry` and its
location, a mode), how (`[sync]`: incremental or full, the lookback window, what to do with
deleted rows, the schema contract, where to write metrics) and optionally which
spreadsheets to push into tables first (`[[push]]`). Every error names the file, the key
path (``destination[1].url``) and what is wrong; unknown keys are errors, so a typo never
silently changes what a nightly job does. Relative paths are relative to the job file.

The API key never appears in a job file: ``source.api_key_env`` holds the *name* of the
environment variable that holds it.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from connector.api import MAX_PAGE_SIZE
from connector.api.calls import FILTER_OPERATORS
from connector.api.concurrency import MAX_CONCURRENCY
from connector.api.retry import check_max_wait
from connector.destinations.registry import (
    DEFAULT_TIMEOUT,
    DELETE_POLICIES,
    DeletePolicy,
    DestinationConfig,
    job_keys,
    make_config,
)
from connector.errors import ConfigError
from connector.modes import (
    MERGED_CELLS,
    PUSH_MODES,
    PUSH_SUFFIXES,
    WRITE_MODES,
    MergedCells,
    PushMode,
    WriteMode,
)

__all__ = [
    "DEFAULT_BASE_URL_ENV",
    "DEFAULT_KEY_ENV",
    "DEFAULT_LOOKBACK",
    "SCHEMA_CONTRACTS",
    "Condition",
    "Job",
    "PushSpec",
    "Source",
    "TableSelection",
    "key_path",
    "load_job",
    "one_shot_job",
]

DEFAULT_KEY_ENV = "CONNECTOR_API_KEY"
DEFAULT_BASE_URL_ENV = "CONNECTOR_BASE_URL"
#: Seconds an incremental read looks back behind its cursor (``[sync] lookback``): a write
#: stamped before the cursor but visible only later (a slow transaction, a lagging replica)
#: is read by the next run as long as it became visible within this time of its stamp.
#: Five minutes is longer than the commit lag of any store we know of in practice (replica
#: lag and long transactions are seconds to a few minutes); rows the window reads again
#: unchanged are neither rewritten nor counted, so a longer window costs only reads.
DEFAULT_LOOKBACK = 300.0

#: What a sync does when a table's columns change: ``evolve`` every destination's table to
#: match (and re-read the rows), or ``freeze``: leave that table as it was and say why.
SchemaContract = Literal["evolve", "freeze"]
SCHEMA_CONTRACTS: tuple[SchemaContract, ...] = ("evolve", "freeze")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Names a secret would go under; refused with a pointer to ``api_key_env``.
_SECRET_KEYS = frozenset({"api_key", "key", "token", "secret", "password", "apikey"})
#: Storage credentials: they come from the provider's own chain (environment, profile, role).
_STORAGE_SECRETS = frozenset({
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "access_key",
    "secret_key", "account_key", "sas_token", "connection_string", "credentials",
    "client_secret", "storage_options",
})


@dataclass(frozen=True)
class Source:
    """Where the API is and which environment variables hold its URL and key."""

    base_url: str | None
    base_url_env: str
    api_key_env: str
    page_size: int = 100
    #: The most requests in flight to this server at once (the client adapts below it);
    #: None: the client's default (`connector.api.DEFAULT_MAX_CONCURRENCY`).
    max_concurrency: int | None = None
    #: Seconds a request may spend retrying in all (the client's ``max_wait``); None: the
    #: client's default (``--max-wait``, ``CONNECTOR_MAX_WAIT``, else 120).
    max_wait: float | None = None

    def resolve(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        one_shot: bool = False,
        job_file: Path | None = None,
    ) -> tuple[str, str]:
        """The base URL and the key, read from the environment at run time. A missing one
        is a ConfigError naming where it is set: the job file's key and the variable, or
        for a command (`one_shot`) its flag and variable."""
        env = os.environ if environ is None else environ
        where = "" if one_shot or job_file is None else f"{job_file}: "
        if not _ENV_NAME.fullmatch(self.api_key_env) or _looks_like_a_key(self.api_key_env):
            # Not shown: a value that is no variable's name may be the key itself.
            raise ConfigError(
                f"{where}source.api_key_env must name an environment variable (it looks like "
                "a key itself: put the key in a variable and name that)"
            )
        base_url = self.base_url or env.get(self.base_url_env, "")
        if not base_url:
            if one_shot:
                raise ConfigError(
                    f"no API base URL: set {self.base_url_env} or pass --base-url (it ends in /v1)"
                )
            raise ConfigError(
                f"{where}source.base_url is not set and the environment variable "
                f"{self.base_url_env} is empty"
            )
        key = env.get(self.api_key_env, "")
        if not key:
            if one_shot:
                raise ConfigError(f"no API key: set the environment variable {self.api_key_env}")
            raise ConfigError(
                f"{where}source.api_key_env: the environment variable {self.api_key_env} "
                "is not set (it must hold the API key)"
            )
        return base_url, key

    def url_source(self, *, one_shot: bool, job_file: Path | None) -> str:
        """Where the base URL was set, for messages that ask to fix it."""
        if one_shot or job_file is None:
            return f"{self.base_url_env} or --base-url"
        if self.base_url:
            return f"source.base_url in {job_file}"
        return f"{self.base_url_env} (named by source.base_url_env in {job_file})"

    def key_source(self, *, one_shot: bool, job_file: Path | None) -> str:
        """Where the key was set, for messages that ask to fix it (never the key)."""
        if one_shot or job_file is None:
            return self.api_key_env
        return f"{self.api_key_env} (named by source.api_key_env in {job_file})"


@dataclass(frozen=True)
class Condition:
    """One filter condition, ``column op value``, as the API's filter object spells it."""

    column: str
    op: str
    value: str | int | float | bool


@dataclass(frozen=True)
class TableSelection:
    """Which tables a job reads (by name or id), and a filter per table."""

    include: tuple[str, ...] | None = None  # None: every table the key can read
    exclude: tuple[str, ...] = ()
    filters: tuple[tuple[str, tuple[Condition, ...]], ...] = ()


@dataclass(frozen=True)
class PushSpec:
    """Push a spreadsheet (a Parquet file or folder, an object storage URL), or the rows a
    query returns (`db` and `sql`), into a table, matching rows by `key`."""

    #: The file, folder or ``s3://`` URL; None for a query.
    file: Path | str | None
    table: str
    key: tuple[str, ...]
    mode: PushMode
    sheet: str | None
    where: str
    #: How ambiguous dates in the file are read (``%d/%m/%Y``), as push's ``--date-format``.
    date_format: str | None = None
    #: Cell texts that mean an empty cell (push's ``--null-values``); only "" by default.
    null_values: tuple[str, ...] = ()
    #: The file came from ``export --format csv --excel-safe`` (push's ``--excel-safe``).
    excel_safe: bool = False
    #: An Excel sheet's merged cells: ``refuse`` or ``fill`` (push's ``--merged-cells``).
    merged_cells: MergedCells = "refuse"
    #: A database URL and the query whose rows are pushed (push's ``--db`` and ``--sql``).
    db: str | None = None
    sql: str | None = None

    @property
    def source(self) -> str:
        """What is pushed, as reports name it (a query by its database, no password)."""
        if self.file is not None:
            return str(self.file)
        from connector.push.query import safe_url

        return f"query on {safe_url(self.db or '')}"


@dataclass(frozen=True)
class Job:
    """A whole job file, validated."""

    path: Path
    name: str
    source: Source
    tables: TableSelection
    destinations: tuple[DestinationConfig, ...]
    incremental: bool
    deletes: DeletePolicy
    state_dir: Path
    pushes: tuple[PushSpec, ...]
    #: Every Nth run compares every row of each merging destination with the server and
    #: repairs it (as ``connector sync --verify`` does); 0: only when asked.
    verify_every: int = 0
    #: Seconds an incremental read looks back behind its cursor (`DEFAULT_LOOKBACK`).
    lookback: float = DEFAULT_LOOKBACK
    #: What a column change does (`SCHEMA_CONTRACTS`).
    schema: SchemaContract = "evolve"
    #: A command's job (`export`, `load`): every table read in full, no state file, no lock.
    one_shot: bool = False
    #: Where a sync writes the run's metrics for Prometheus (``[sync] metrics_file``,
    #: `connector.metrics`); None: nowhere.
    metrics_file: Path | None = None

    @property
    def state_path(self) -> Path:
        return self.state_dir / f"{self.name}.state.json"

    @property
    def lock_path(self) -> Path:
        return self.state_dir / f"{self.name}.lock"

    def with_state_dir(self, state_dir: Path) -> Job:
        return replace(self, state_dir=state_dir.resolve())


def one_shot_job(
    command: str,
    destination: DestinationConfig,
    *,
    tables: Sequence[str] = (),
    base_url: str | None = None,
    page_size: int = 100,
    max_concurrency: int | None = None,
    deletes: DeletePolicy = "keep",
) -> Job:
    """The job a command (`export`, `load`) runs: `tables` (default every one) read in full
    into `destination`, with the URL and key from the usual environment variables. A
    merging load applies deletions as `deletes` says (every live id is read)."""
    source = Source(
        base_url=base_url.rstrip("/") if base_url else None,
        base_url_env=DEFAULT_BASE_URL_ENV,
        api_key_env=DEFAULT_KEY_ENV,
        page_size=page_size,
        max_concurrency=max_concurrency,
    )
    return Job(
        path=Path(command),
        name=command,
        source=source,
        tables=TableSelection(include=tuple(tables) or None),
        destinations=(destination,),
        incremental=False,
        deletes=deletes,
        state_dir=Path.cwd(),
        pushes=(),
        one_shot=True,
    )


def load_job(path: str | os.PathLike[str]) -> Job:
    """Read and validate a job file; raise ConfigError naming the file and key at fault."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the job file ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    return _Parser(file).job(data)


class _Section:
    """Typed reads from one TOML table; `done()` rejects the keys nobody asked for."""

    def __init__(self, parser: _Parser, data: Any, where: str) -> None:
        self.parser = parser
        self.where = where
        if not isinstance(data, dict):
            raise parser.error(where, f"must be a table, got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str) -> Any:
        self.seen.add(name)
        return self.data.get(name)

    def string(self, name: str, default: str | None = None) -> str | None:
        value = self.get(name)
        if value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.parser.error(
                self.key(name), f"must be a non-empty string, got {_kind(value)}"
            )
        return value

    def integer(self, name: str, default: int, *, low: int, high: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.parser.error(
                self.key(name), f"must be an integer from {low} to {high}, got {value!r}"
            )
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.parser.error(self.key(name), f"must be true or false, got {value!r}")
        return value

    def choice(self, name: str, options: Sequence[str], default: str | None) -> str | None:
        value = self.string(name, default)
        if value is not None and value not in options:
            raise self.parser.error(
                self.key(name), f"must be one of {', '.join(options)}; got {value!r}"
            )
        return value

    def strings(self, name: str) -> tuple[str, ...] | None:
        value = self.get(name)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.parser.error(
                self.key(name), f"must be a list of non-empty strings, got {_kind(value)}"
            )
        return tuple(value)

    def done(self) -> None:
        for name in self.data:
            if name in self.seen:
                continue
            if name.lower() in _SECRET_KEYS:
                raise self.parser.error(
                    self.key(name),
                    "secrets never go in a job file: put the API key in an environment "
                    "variable and set source.api_key_env to that variable's name",
                )
            if name.lower() in _STORAGE_SECRETS:
                raise self.parser.error(
                    self.key(name),
                    "credentials never go in a job file: object storage takes them from its "
                    "provider's chain (AWS_* variables or a profile, GOOGLE_APPLICATION_CREDENTIALS, "
                    "AZURE_* variables, an instance role)",
                )
            known = ", ".join(sorted(self.seen)) or "none"
            raise self.parser.error(self.key(name), f"unknown key (known keys here: {known})")


class _Parser:
    def __init__(self, file: Path) -> None:
        self.file = file  # as the user spelled it, for messages
        self.base = file.resolve().parent

    def error(self, where: str, what: str) -> ConfigError:
        return ConfigError(f"{self.file}: {where}: {what}")

    def path(self, value: str) -> Path:
        return (self.base / os.path.expanduser(value)).resolve()

    def job(self, data: dict[str, Any]) -> Job:
        top = _Section(self, data, "")
        name = top.string("name", self.file.stem)
        assert name is not None
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            hint = "" if "name" in top.data else " (it defaults to the file name: set name = ...)"
            raise self.error(
                "name", f"must be letters, digits, '_', '-' or '.'; got {name!r}{hint}"
            )
        source = self.source(top.get("source"))
        tables = self.tables(top.get("tables"))
        sync = _Section(self, top.get("sync") or {}, "sync")
        incremental = sync.boolean("incremental", False)
        deletes = cast(DeletePolicy, sync.choice("deletes", DELETE_POLICIES, "delete"))
        state_dir_value = sync.string("state_dir")
        verify_every = sync.integer("verify_every", 0, low=0, high=1_000_000)
        lookback = self.duration(sync, "lookback", DEFAULT_LOOKBACK)
        contract = cast(SchemaContract, sync.choice("schema", SCHEMA_CONTRACTS, "evolve"))
        metrics_file = sync.string("metrics_file")
        sync.done()
        destinations = self.destinations(top.get("destination"), incremental)
        pushes = self.pushes(top.get("push"))
        top.done()
        if not destinations and not pushes:
            raise self.error(
                "destination", "missing: a job needs a [[destination]] to sync to or a [[push]]"
            )
        return Job(
            path=self.file.resolve(),
            name=name,
            source=source,
            tables=tables,
            destinations=destinations,
            incremental=incremental,
            deletes=deletes,
            state_dir=self.path(state_dir_value) if state_dir_value else self.base,
            pushes=pushes,
            verify_every=verify_every,
            lookback=lookback,
            schema=contract,
            metrics_file=self.path(metrics_file) if metrics_file else None,
        )

    def duration(self, section: _Section, name: str, default: float) -> float:
        """A duration: seconds as a number, or text like ``"90s"``, ``"5m"``, ``"1h"``."""
        value = section.get(name)
        if value is None:
            return default
        try:
            return parse_duration(value)
        except ValueError:
            raise self.error(
                section.key(name),
                f'must be a duration like "5m", "90s" or 0 (seconds), got {value!r}',
            ) from None

    def source(self, data: Any) -> Source:
        if data is None:
            raise self.error("source", "missing: add a [source] table with api_key_env")
        section = _Section(self, data, "source")
        base_url = section.string("base_url")
        if base_url is not None:
            _check_url(self, "source.base_url", base_url)
        base_url_env = section.string("base_url_env", DEFAULT_BASE_URL_ENV)
        key_env = section.string("api_key_env", DEFAULT_KEY_ENV)
        assert base_url_env is not None and key_env is not None
        for where, value in (
            ("source.base_url_env", base_url_env),
            ("source.api_key_env", key_env),
        ):
            _check_env_name(self, where, value)
        source = Source(
            base_url=base_url.rstrip("/") if base_url else None,
            base_url_env=base_url_env,
            api_key_env=key_env,
            page_size=section.integer("page_size", 100, low=2, high=MAX_PAGE_SIZE),  # reads overlap a row
            max_concurrency=self.max_concurrency(section),
            max_wait=self.max_wait(section),
        )
        section.done()
        return source

    def max_concurrency(self, section: _Section) -> int | None:
        """`max_concurrency`; `concurrency` is its first-wave name, still read."""
        if "max_concurrency" in section.data and "concurrency" in section.data:
            raise self.error(
                section.key("concurrency"), "give max_concurrency or concurrency, not both"
            )
        name = "concurrency" if "concurrency" in section.data else "max_concurrency"
        value = section.integer(name, 0, low=1, high=MAX_CONCURRENCY)
        return value or None

    def max_wait(self, section: _Section) -> float | None:
        value = section.get("max_wait")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(
                section.key("max_wait"), f"must be a number of seconds >= 0, like 30, got {_kind(value)}"
            )
        try:
            return check_max_wait(value, "max_wait")
        except ConfigError:
            raise self.error(
                section.key("max_wait"), f"must be a number of seconds >= 0, like 30, got {value!r}"
            ) from None

    def tables(self, data: Any) -> TableSelection:
        section = _Section(self, data or {}, "tables")
        include = section.strings("include")
        exclude = section.strings("exclude") or ()
        if include is not None and not include:
            raise self.error("tables.include", "is empty; leave it out to sync every table")
        filters_data = section.get("filter")
        section.done()
        filters: list[tuple[str, tuple[Condition, ...]]] = []
        if filters_data is not None:
            by_table = _Section(self, filters_data, "tables.filter")
            for table in list(by_table.data):
                filters.append(
                    (table, self.conditions(by_table.get(table), f"tables.filter.{_q(table)}"))
                )
                if include is not None and table not in include:
                    raise self.error(
                        f"tables.filter.{_q(table)}",
                        "filters a table that tables.include leaves out",
                    )
        return TableSelection(include=include, exclude=exclude, filters=tuple(filters))

    def conditions(self, data: Any, where: str) -> tuple[Condition, ...]:
        section = _Section(self, data, where)
        out: list[Condition] = []
        for column in list(section.data):
            spec = section.get(column)
            at = f"{where}.{_q(column)}"
            if not isinstance(spec, dict) or len(spec) != 1:
                raise self.error(at, 'must be one operator and a value, like { eq = "open" }')
            ((op, value),) = spec.items()
            if op not in FILTER_OPERATORS:
                raise self.error(
                    f"{at}.{op}", f"unknown operator; use one of {', '.join(FILTER_OPERATORS)}"
                )
            if not isinstance(value, str | int | float | bool):
                raise self.error(
                    f"{at}.{op}", f"must be a string, number or boolean, got {_kind(value)}"
                )
            out.append(Condition(column, op, value))
        if not out:
            raise self.error(where, "is empty")
        return tuple(out)

    def destinations(self, data: Any, incremental: bool) -> tuple[DestinationConfig, ...]:
        if data is None:
            return ()
        if isinstance(data, dict):
            items: list[tuple[str, Any]] = [("destination", data)]
        elif isinstance(data, list):
            items = [(f"destination[{i}]", d) for i, d in enumerate(data)]
        else:
            raise self.error(
                "destination", f"must be a table or an array of tables, got {_kind(data)}"
            )
        out = [self.destination(d, where, incremental) for where, d in items]
        targets = [d.target for d in out]
        for i, target in enumerate(targets):
            if target in targets[:i]:
                where = out[i].where.rpartition(".")[0]
                raise self.error(where, "writes to the same place as an earlier destination")
        return tuple(out)

    def destination(self, data: Any, where: str, incremental: bool) -> DestinationConfig:
        """One ``[[destination]]``: exactly one key naming a kind (`job_keys`: a folder for
        ``parquet``, ``delta``, ``iceberg``; a database URL for ``url``), its mode and options."""
        section = _Section(self, data, where)
        keys = job_keys()
        given = {k: section.string(k) for k in keys}
        mode = section.choice("mode", WRITE_MODES, "merge" if incremental else "replace")
        catalog = section.string("catalog")
        timeout = section.get("timeout")
        section.done()
        chosen = [k for k, v in given.items() if v is not None]
        if len(chosen) != 1:
            raise self.error(
                where, "set exactly one of parquet (a directory), delta (a Delta table folder), "
                "iceberg (a warehouse folder) or url (a SQLAlchemy or duckdb:/// URL)"
            )
        (key,) = chosen
        if incremental and mode != "merge":
            raise self.error(
                f"{where}.mode",
                f"an incremental sync merges changed rows; mode must be 'merge', got {mode!r}",
            )
        if catalog is not None and key != "iceberg":
            raise self.error(f"{where}.catalog", "only applies to an iceberg destination")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600
        ):
            raise self.error(
                f"{where}.timeout", f"must be a number of seconds from 1 to 3600, got {timeout!r}"
            )
        value = given[key]
        assert value is not None
        try:
            return make_config(
                key, value, mode=cast(WriteMode, mode), where=f"{where}.{key}", base=self.base,
                catalog=catalog, timeout=float(timeout or DEFAULT_TIMEOUT), secrets_allowed=False,
            )
        except ConfigError as exc:
            raise self.error(f"{where}.{key}", str(exc).removeprefix(f"{where}.{key}: ")) from None

    def pushes(self, data: Any) -> tuple[PushSpec, ...]:
        if data is None:
            return ()
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise self.error("push", f"must be an array of tables ([[push]]), got {_kind(data)}")
        return tuple(self.push(d, f"push[{i}]") for i, d in enumerate(data))

    def push(self, data: Any, where: str) -> PushSpec:
        section = _Section(self, data, where)
        file = section.string("file")
        table = section.string("table")
        key = section.strings("key")
        mode = section.choice("mode", PUSH_MODES, "upsert")
        sheet = section.string("sheet")
        date_format = section.string("date_format")
        null_values = section.strings("null_values") or ()
        excel_safe = section.boolean("excel_safe", False)
        merged_cells = section.choice("merged_cells", MERGED_CELLS, "refuse")
        db = section.string("db")
        sql = section.string("sql")
        section.done()
        if file is not None and (db is not None or sql is not None):
            raise self.error(where, "set file (a spreadsheet) or db and sql (a query), not both")
        if file is None and db is None and sql is None:
            raise self.error(f"{where}.file", "missing: the spreadsheet to push (or db and sql)")
        if table is None:
            raise self.error(f"{where}.table", "missing: the table (name or id) to push into")
        if not key:
            raise self.error(f"{where}.key", "missing: the column(s) that identify a row")
        path: Path | str | None = None
        if file is not None:
            path = self.push_file(file, where)
        else:
            db = self.push_query(db, sql, where)
        excel = isinstance(path, Path) and path.suffix.lower() in (".xlsx", ".xlsm")
        if sheet is not None and not excel:
            raise self.error(f"{where}.sheet", "only applies to Excel files")
        if merged_cells != "refuse" and not excel:
            raise self.error(f"{where}.merged_cells", "only applies to Excel files")
        if date_format is not None and "%" not in date_format:
            raise self.error(
                f"{where}.date_format", f"must be a strftime format like %d/%m/%Y, got {date_format!r}"
            )
        return PushSpec(
            path, table, key, cast(PushMode, mode), sheet, where, date_format,
            null_values=null_values, excel_safe=excel_safe,
            merged_cells=cast(MergedCells, merged_cells), db=db, sql=sql,
        )

    def push_file(self, file: str, where: str) -> Path | str:
        """A push's file: a spreadsheet or Parquet file, a folder of Parquet files (relative
        to the job file), or an object storage URL."""
        from connector.destinations.storage import check_location, is_remote

        if is_remote(file):
            try:
                return check_location(file, f"{where}.file")
            except ConfigError as exc:
                raise self.error(f"{where}.file", str(exc).removeprefix(f"{where}.file: ")) from None
        path = self.path(file)
        if path.is_dir():
            return path
        if path.suffix.lower() not in PUSH_SUFFIXES:
            raise self.error(
                f"{where}.file", f"must end in one of {', '.join(PUSH_SUFFIXES)} (or be a folder "
                f"of Parquet files); got {path.name!r}"
            )
        if not path.is_file():
            raise self.error(f"{where}.file", f"no such file: {path}")
        return path

    def push_query(self, db: str | None, sql: str | None, where: str) -> str:
        """A push's database URL (a relative SQLite or DuckDB file made absolute against the
        job file's folder), checked with its query; job files hold no password."""
        if db is None:
            raise self.error(f"{where}.db", "missing: the database the sql runs on")
        if sql is None or not sql.strip():
            raise self.error(f"{where}.sql", "missing: the query whose rows are pushed")
        from connector.push.query import check_url

        try:
            check_url(db, f"{where}.db")
        except ConfigError as exc:
            raise self.error(f"{where}.db", str(exc).removeprefix(f"{where}.db: ")) from None
        if db.lower().startswith("duckdb:///"):
            path = db.removeprefix("duckdb:///")
            return db if path == ":memory:" else "duckdb:///" + str(self.path(path))
        import sqlalchemy as sa

        url = sa.engine.make_url(db)
        if url.password:
            raise self.error(
                f"{where}.db", "holds a password: leave it out and let the driver read it from "
                "the environment (PGPASSWORD, ~/.pgpass); job files hold no secrets"
            )
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            url = url.set(database=str(self.path(str(url.database))))
        return url.render_as_string(hide_password=False)


def _check_env_name(parser: _Parser, where: str, value: str) -> None:
    if not _ENV_NAME.fullmatch(value) or _looks_like_a_key(value):
        # The value is not shown: it may be the very key we must not print.
        raise parser.error(
            where,
            "must be the NAME of an environment variable (like CONNECTOR_API_KEY), not a "
            "key or URL; the value is not shown in case it is a secret",
        )


def _looks_like_a_key(value: str) -> bool:
    """Mixed-case or digit-heavy long strings are keys, not variable names."""
    if len(value) < 20:
        return False
    has_lower = any(c.islower() for c in value)
    has_upper = any(c.isupper() for c in value)
    digits = sum(c.isdigit() for c in value)
    return (has_lower and has_upper) or (has_lower and digits >= 4) or digits >= 8


def _check_url(parser: _Parser, where: str, url: str) -> None:
    if not re.match(r"https?://[^/\s]+", url):
        raise parser.error(where, "must be an http(s) URL like https://host/v1 (value not shown)")
    if "@" in url.split("/")[2]:
        raise parser.error(
            where, "must not carry credentials; the key comes from source.api_key_env"
        )


def _q(name: str) -> str:
    """A TOML-style key path segment: bare when it can be, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'


def parse_duration(value: object) -> float:
    """Seconds from a number, or from text like ``"90s"``, ``"5m"``, ``"1h"``, ``"0"``;
    ValueError for anything else (or a negative time)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value)
        if match is None:
            raise ValueError(value)
        number, unit = float(match.group(1)), match.group(2) or "s"
        seconds = number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    else:
        raise ValueError(value)
    if not 0 <= seconds < float("inf"):
        raise ValueError(value)
    return seconds


def key_path(*parts: str) -> str:
    """``tables.filter."My Orders".Status``: a key path as a TOML file spells it."""
    return ".".join(_q(p) for p in parts)


def _kind(value: Any) -> str:
    return {
        dict: "a table",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)
