"""Job files: TOML read once at the boundary, validated into frozen objects.

A job names where data comes from (`[source]`), which tables (`[tables]`), where they go
(`[[destination]]`: one key naming a kind of `connector.destinations.registry` and its
location, a mode), how (`[sync]`: incremental or full, the lookback window, what to do with
deleted rows, the schema contract, where to write metrics) and optionally which
spreadsheets to push into tables first (`[[push]]`). Every error names the file, the key
path (``destination[1].url``) and what is wrong; unknown keys are errors, so a typo never
silently changes what a nightly job does. Relative paths are relative to the job file.

The API key never appears in a job file: ``source.api_key_env`` holds the *name* of the
environment variable that holds it. How a file's tables are read (typed, unknown keys
refused) is `connector.jobs.jobfile`; the ``[[push]]`` tables, `connector.jobs.pushes`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from connector.api.concurrency import MAX_CONCURRENCY
from connector.api.endpoints import FILTER_OPERATORS
from connector.api.keys import ENV_API_KEY, is_variable_name
from connector.api.retry import check_max_wait
from connector.api.settings import ENV_BASE_URL
from connector.destinations.registry import (
    DEFAULT_TIMEOUT,
    DELETE_POLICIES,
    KINDS,
    DeletePolicy,
    DestinationConfig,
    job_keys,
    make_config,
)
from connector.errors import ConfigError
from connector.jobs.jobfile import (
    JobFile,
    Section,
    check_env_name,
    check_url,
    key_path,
    kind,
    quote,
)
from connector.jobs.pushes import PushSpec, parse_pushes
from connector.modes import WRITE_MODES, WriteMode
from connector.values import TypeSetting, value_type

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

DEFAULT_KEY_ENV = ENV_API_KEY
DEFAULT_BASE_URL_ENV = ENV_BASE_URL
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


@dataclass(frozen=True)
class Source:
    """Where the API is and which environment variables hold its URL and key."""

    base_url: str | None
    base_url_env: str
    api_key_env: str
    page_size: int = DEFAULT_PAGE_SIZE
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
        if not is_variable_name(self.api_key_env):
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
    """Which tables a job reads (by name or id), a filter per table, and the value types
    set on number columns (``[tables.types.<table>]``, ``--type``; `connector.values`)."""

    include: tuple[str, ...] | None = None  # None: every table the key can read
    exclude: tuple[str, ...] = ()
    filters: tuple[tuple[str, tuple[Condition, ...]], ...] = ()
    #: Names asked for in the destinations (``[tables.rename]``, ``--rename``): a table (as
    #: the resolver reads it) and its name (`connector.naming`, rule 5).
    renames: tuple[tuple[str, str], ...] = ()
    #: Value types asked for number columns (``[tables.types]``, ``--type``).
    types: tuple[TypeSetting, ...] = ()



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
    def memory_path(self) -> Path:
        """What runs remember of the destinations (`connector.destinations.remembered`)."""
        return self.state_dir / f"{self.name}.remembered"

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
    exclude: Sequence[str] = (),
    base_url: str | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    max_concurrency: int | None = None,
    deletes: DeletePolicy = "keep",
    renames: Sequence[tuple[str, str]] = (),
    types: Sequence[TypeSetting] = (),
) -> Job:
    """The job a command (`export`, `load`) runs: `tables` (default every one, less
    `exclude`) read in full into `destination`, with the URL and key from the usual
    environment variables. A merging load applies deletions as `deletes` says (every live
    id is read); `renames` names tables in the destination (``--rename``); `types`
    (``--type``) type number columns."""
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
        tables=TableSelection(
            include=tuple(tables) or None, exclude=tuple(exclude), renames=tuple(renames),
            types=tuple(types),
        ),
        destinations=(destination,),
        incremental=False,
        deletes=deletes,
        state_dir=Path.cwd(),
        pushes=(),
        one_shot=True,
    )


def _kind_keys() -> str:
    """The ``[[destination]]`` keys that select a kind, and what each takes (the registry's)."""
    def said(key: str) -> str:
        chosen = [k for k in KINDS if k.job_key == key]
        takes = "a folder" if chosen[0].location == "folder" else "a database URL"
        return f"{key} ({takes}: {' or '.join(k.title for k in chosen)})"

    keys = [said(k) for k in job_keys()]
    return ", ".join(keys[:-1]) + " or " + keys[-1]


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



class _Parser(JobFile):
    """The job file's tables read into a `Job`."""

    def job(self, data: dict[str, Any]) -> Job:
        top = Section(self, data, "")
        name = top.string("name", self.file.stem)
        assert name is not None
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            hint = "" if "name" in top.data else " (it defaults to the file name: set name = ...)"
            raise self.error(
                "name", f"must be letters, digits, '_', '-' or '.'; got {name!r}{hint}"
            )
        source = self.source(top.get("source"))
        tables = self.tables(top.get("tables"))
        sync = Section(self, top.get("sync") or {}, "sync")
        incremental = sync.boolean("incremental", False)
        deletes = cast(DeletePolicy, sync.choice("deletes", DELETE_POLICIES, "delete"))
        state_dir_value = sync.string("state_dir")
        verify_every = sync.integer("verify_every", 0, low=0, high=1_000_000)
        lookback = self.duration(sync, "lookback", DEFAULT_LOOKBACK)
        contract = cast(SchemaContract, sync.choice("schema", SCHEMA_CONTRACTS, "evolve"))
        metrics_file = sync.string("metrics_file")
        sync.done()
        destinations = self.destinations(top.get("destination"), incremental)
        pushes = parse_pushes(self, top.get("push"))
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


    def source(self, data: Any) -> Source:
        if data is None:
            raise self.error("source", "missing: add a [source] table with api_key_env")
        section = Section(self, data, "source")
        base_url = section.string("base_url")
        if base_url is not None:
            check_url(self, "source.base_url", base_url)
        base_url_env = section.string("base_url_env", DEFAULT_BASE_URL_ENV)
        key_env = section.string("api_key_env", DEFAULT_KEY_ENV)
        assert base_url_env is not None and key_env is not None
        for where, value in (
            ("source.base_url_env", base_url_env),
            ("source.api_key_env", key_env),
        ):
            check_env_name(self, where, value)
        source = Source(
            base_url=base_url.rstrip("/") if base_url else None,
            base_url_env=base_url_env,
            api_key_env=key_env,
            page_size=section.integer("page_size", DEFAULT_PAGE_SIZE, low=2, high=MAX_PAGE_SIZE),  # reads overlap a row
            max_concurrency=self.max_concurrency(section),
            max_wait=self.max_wait(section),
        )
        section.done()
        return source

    def max_concurrency(self, section: Section) -> int | None:
        """`max_concurrency`; `concurrency` is its first-wave name, still read."""
        if "max_concurrency" in section.data and "concurrency" in section.data:
            raise self.error(
                section.key("concurrency"), "give max_concurrency or concurrency, not both"
            )
        name = "concurrency" if "concurrency" in section.data else "max_concurrency"
        value = section.integer(name, 0, low=1, high=MAX_CONCURRENCY)
        return value or None

    def max_wait(self, section: Section) -> float | None:
        value = section.get("max_wait")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(
                section.key("max_wait"), f"must be a number of seconds >= 0, like 30, got {kind(value)}"
            )
        try:
            return check_max_wait(value, "max_wait")
        except ConfigError:
            raise self.error(
                section.key("max_wait"), f"must be a number of seconds >= 0, like 30, got {value!r}"
            ) from None

    def tables(self, data: Any) -> TableSelection:
        section = Section(self, data or {}, "tables")
        include = section.strings("include")
        exclude = section.strings("exclude") or ()
        if include is not None and not include:
            raise self.error("tables.include", "is empty; leave it out to sync every table")
        filters_data = section.get("filter")
        renames_data = section.get("rename")
        types = self.types(section.get("types"), include)
        section.done()
        filters: list[tuple[str, tuple[Condition, ...]]] = []
        if filters_data is not None:
            by_table = Section(self, filters_data, "tables.filter")
            for table in list(by_table.data):
                filters.append(
                    (table, self.conditions(by_table.get(table), f"tables.filter.{quote(table)}"))
                )
                if include is not None and table not in include:
                    raise self.error(
                        f"tables.filter.{quote(table)}",
                        "filters a table that tables.include leaves out",
                    )
        renames: list[tuple[str, str]] = []
        if renames_data is not None:
            by_table = Section(self, renames_data, "tables.rename")
            for table in list(by_table.data):
                name = by_table.string(table)
                assert name is not None  # present: it is a key of the table
                renames.append((table, name))
            by_table.done()
        return TableSelection(
            include=include, exclude=exclude, filters=tuple(filters), renames=tuple(renames),
            types=types,
        )

    def types(self, data: Any, include: tuple[str, ...] | None) -> tuple[TypeSetting, ...]:
        """``[tables.types.<table>] <column> = "<value type>"``: each checked here, the table
        and column against the server when the run starts (`connector.jobs.choose`)."""
        if data is None:
            return ()
        out: list[TypeSetting] = []
        by_table = Section(self, data, "tables.types")
        for table in list(by_table.data):
            columns = Section(self, by_table.get(table), key_path("tables", "types", table))
            if include is not None and table not in include:
                raise self.error(columns.where, "types a table that tables.include leaves out")
            for column in list(columns.data):
                spec = columns.get(column)
                at = key_path("tables", "types", table, column)
                if not isinstance(spec, str):
                    raise self.error(at, f'must be a value type like "int64", got {kind(spec)}')
                try:
                    value_type(spec)
                except ValueError as exc:
                    raise self.error(at, str(exc)) from None
                out.append(TypeSetting(table, column, spec, f"{self.file}: {at}"))
            if not columns.data:
                raise self.error(columns.where, "is empty")
        return tuple(out)

    def conditions(self, data: Any, where: str) -> tuple[Condition, ...]:
        section = Section(self, data, where)
        out: list[Condition] = []
        for column in list(section.data):
            spec = section.get(column)
            at = f"{where}.{quote(column)}"
            if not isinstance(spec, dict) or len(spec) != 1:
                raise self.error(at, 'must be one operator and a value, like { eq = "open" }')
            ((op, value),) = spec.items()
            if op not in FILTER_OPERATORS:
                raise self.error(
                    f"{at}.{op}", f"unknown operator; use one of {', '.join(FILTER_OPERATORS)}"
                )
            if not isinstance(value, str | int | float | bool):
                raise self.error(
                    f"{at}.{op}", f"must be a string, number or boolean, got {kind(value)}"
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
                "destination", f"must be a table or an array of tables, got {kind(data)}"
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
        section = Section(self, data, where)
        keys = job_keys()
        given = {k: section.string(k) for k in keys}
        mode = section.choice("mode", WRITE_MODES, "merge" if incremental else "replace")
        catalog = section.string("catalog")
        timeout = section.get("timeout")
        section.done()
        chosen = [k for k, v in given.items() if v is not None]
        if len(chosen) != 1:
            raise self.error(where, f"set exactly one of {_kind_keys()}")
        (key,) = chosen
        if incremental and mode != "merge":
            raise self.error(
                f"{where}.mode",
                f"an incremental sync merges changed rows; mode must be 'merge', got {mode!r}",
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600
        ):
            raise self.error(
                f"{where}.timeout", f"must be a number of seconds from 1 to 3600, got {timeout!r}"
            )
        value = given[key]
        assert value is not None
        named = {"catalog": f"{where}.catalog"}
        try:
            return make_config(
                key, value, mode=cast(WriteMode, mode), where=f"{where}.{key}", base=self.base,
                catalog=catalog, timeout=float(timeout or DEFAULT_TIMEOUT), secrets_allowed=False,
                named=named,
            )
        except ConfigError as exc:
            at = next((n for n in named.values() if str(exc).startswith(f"{n}: ")), f"{where}.{key}")
            raise self.error(at, str(exc).removeprefix(f"{at}: ")) from None

