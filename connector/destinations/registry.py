"""Every kind of destination, and the one place a setting becomes a kind.

Cheap to import (no pyarrow, no database driver): the CLI builds its choices from it.
A job file's ``[[destination]]`` keys, `export --format/--out`, `load --to`, the runner, the
Dagster assets and the docs all read `KINDS`: a kind's name, the key or flag that selects it,
the URL schemes it claims, what it can do (`Capabilities`) and the extra it needs. Modules
are imported only when a destination of their kind is opened, so a job file is checked
without importing SQLAlchemy, DuckDB or deltalake.

Locations are checked here too, the same way wherever they come from: a folder kind takes a
local path (made absolute against the job file's folder, or the working directory for a
command) or an object storage URL; ``url`` takes ``duckdb:///path`` (relative the same way)
or any SQLAlchemy URL (a relative ``sqlite:///`` path likewise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from connector.errors import ConfigError
from connector.locations import DEFAULT_TIMEOUT, DatabaseUrl, check_location, is_remote
from connector.modes import WriteMode
from connector.naming import NameRules

if TYPE_CHECKING:
    from connector.schema import Table

__all__ = [
    "DEFAULT_TIMEOUT",
    "DELETE_POLICIES",
    "FILE_NAME_BYTES",
    "KINDS",
    "Capabilities",
    "DeletePolicy",
    "DestinationConfig",
    "Kind",
    "export_formats",
    "job_keys",
    "kind",
    "make_config",
]

#: What a merge does with rows deleted upstream: remove them, stamp ``_deleted_at``, or
#: leave them.
DeletePolicy = Literal["delete", "mark", "keep"]
DELETE_POLICIES: tuple[DeletePolicy, ...] = ("delete", "mark", "keep")


@dataclass(frozen=True)
class Capabilities:
    """What a kind of destination can do, as data the runner and the docs read."""

    #: Several tables may be written at once (a file or table directory each, a server
    #: database); otherwise one table at a time while the others read into a spool.
    parallel_writes: bool
    modes: frozenset[WriteMode] = frozenset({"replace", "append", "merge"})
    #: Takes ``deletes = "mark"``.
    marks: bool = True
    #: How it spells and compares the names of tables and columns (`connector.naming`).
    names: NameRules = field(default_factory=lambda: NameRules(max_bytes=255))
    #: Holds a ``decimal(P,S)`` column exactly (SQLite keeps 15 digits of a NUMERIC).
    decimals: bool = True

    def inexact_columns(self, table: Table) -> list[str]:
        """What is wrong with each column of `table` this kind cannot hold exactly (a
        decimal in SQLite), naming the setting that typed it: the runner fails the table
        with them before any write, and the destination refuses them when called alone."""
        if self.decimals:
            return []
        return [
            f"{c.typed_by or 'types'}: column {c.name!r} is {c.values}, and it holds no exact "
            'decimal: type it "text" (the exact digits), "int64" or "float64" for it, or write '
            "the table to PostgreSQL or DuckDB"
            for c in table.columns
            if c.values is not None and c.values.name == "decimal"
        ]


@dataclass(frozen=True)
class Kind:
    """One kind of destination."""

    name: str
    #: What it is, as the docs and ``--help`` say it.
    title: str
    #: ``module:function`` that opens one: ``(DestinationConfig) -> Destination``.
    opener: str
    #: The ``[[destination]]`` key that selects it (``url`` kinds are told apart by scheme).
    job_key: str | None
    #: Its name for ``export --format`` (None: not an export format).
    export_format: str | None
    #: ``folder``: a local directory or object storage URL; ``database``: a URL.
    location: Literal["folder", "database"]
    capabilities: Capabilities
    #: The pip extra it needs beyond the core install (None: none).
    extra: str | None = None
    #: URL schemes it claims among ``url`` destinations (the rest go to SQLAlchemy).
    schemes: tuple[str, ...] = ()
    #: Options it takes besides its location and mode (``excel_safe``, ``catalog``): any
    #: other kind refuses them, naming the kinds that take them.
    options: frozenset[str] = frozenset()


#: File systems allow 255 bytes a name. A table's file also gets a suffix (``.parquet``)
#: and, while it is written, a temp name around it (``.<name>.<8 random>.partial``):
#: this many bytes are left for the table's name.
FILE_NAME_BYTES = 255 - len(".parquet") - len("..12345678.partial") - 1
_FILES = NameRules(max_bytes=FILE_NAME_BYTES, files=True)

KINDS: tuple[Kind, ...] = (
    Kind("parquet", "Parquet files, one per table", "connector.destinations.files:open_parquet",
         "parquet", "parquet", "folder", Capabilities(parallel_writes=True, names=_FILES)),
    Kind("csv", "CSV files, one per table (replaced whole)",
         "connector.destinations.files:open_csv", None, "csv", "folder",
         Capabilities(parallel_writes=True, modes=frozenset({"replace"}), marks=False,
                      names=_FILES),
         options=frozenset({"excel_safe"})),
    Kind("delta", "Delta Lake tables, one per table", "connector.destinations.delta:open_delta",
         "delta", "delta", "folder",
         Capabilities(parallel_writes=True,
                      names=NameRules(max_bytes=FILE_NAME_BYTES, files=True, columns_fold=True)),
         extra="delta"),
    Kind("iceberg", "Apache Iceberg tables in a catalog", "connector.destinations.iceberg:open_iceberg",
         "iceberg", "iceberg", "folder", Capabilities(parallel_writes=False, names=_FILES),
         extra="iceberg", options=frozenset({"catalog"})),
    Kind("duckdb", "a DuckDB database file", "connector.destinations.duckdb:open_duckdb",
         "url", None, "database",
         Capabilities(parallel_writes=False, names=NameRules(max_bytes=255, columns_fold=True)),
         extra="duckdb", schemes=("duckdb",)),
    Kind("sql", "a SQL database through SQLAlchemy (SQLite, PostgreSQL)",
         "connector.destinations.sql:open_sql", "url", None, "database",
         Capabilities(parallel_writes=False, names=NameRules(
             max_bytes=255, reserved_prefixes=("sqlite_",), columns_fold=True))),
)
#: PostgreSQL's identifiers: 63 bytes (NAMEDATALEN - 1), longer ones cut silently; compared
#: exactly when quoted, as ours always are.
_POSTGRES_NAMES = NameRules(max_bytes=63, column_bytes=63)
_BY_NAME: Mapping[str, Kind] = {k.name: k for k in KINDS}


def kind(name: str) -> Kind:
    return _BY_NAME[name]


def export_formats() -> tuple[str, ...]:
    """``export --format`` choices, in the registry's order."""
    return tuple(k.export_format for k in KINDS if k.export_format)


def job_keys() -> tuple[str, ...]:
    """The ``[[destination]]`` keys that select a kind, each once."""
    return tuple(dict.fromkeys(k.job_key for k in KINDS if k.job_key))


@dataclass(frozen=True)
class DestinationConfig:
    """One destination as a job file or a command's flags describe it, checked."""

    kind: str
    #: An absolute directory or an object storage URL (folder kinds), a SQLAlchemy URL,
    #: or ``duckdb:///<absolute path>``.
    target: str
    mode: WriteMode
    #: Where it was set, for messages: ``destination[0]``, ``--out``, ``--to``.
    where: str
    #: CSV: neutralise text a spreadsheet would run as a formula (``--excel-safe``).
    excel_safe: bool = False
    #: Iceberg: the catalog's URI (None: a SQLite catalog inside the folder).
    catalog: str | None = None
    #: Seconds one request to the destination may take (see `DEFAULT_TIMEOUT`).
    timeout: float = DEFAULT_TIMEOUT
    #: The database of a ``database`` kind, parsed (`target` is its URL); None for folders.
    database: DatabaseUrl | None = None

    def __post_init__(self) -> None:
        if self.database is None and kind(self.kind).location == "database":
            parsed = DatabaseUrl.parse(self.target, where=self.where)  # built by hand: parse it
            object.__setattr__(self, "database", parsed)

    @property
    def capabilities(self) -> Capabilities:
        """The kind's, refined by what the location says: a SQL server database (PostgreSQL)
        takes several tables' writes at once, an embedded one (SQLite) one at a time."""
        own = kind(self.kind).capabilities
        if self.database is not None and self.database.engine == "postgresql":
            return replace(own, parallel_writes=True, names=_POSTGRES_NAMES)
        if self.database is not None and self.database.engine == "sqlite":
            return replace(own, decimals=False)
        return own

    def describe(self) -> str:
        """The destination as summaries show it (a database URL without its password)."""
        if self.database is not None:
            return self.database.redacted()
        return f"{self.kind}:{self.target}"


def make_config(
    kind_name: str,
    value: str,
    *,
    mode: WriteMode,
    where: str,
    base: Path,
    excel_safe: bool = False,
    catalog: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    secrets_allowed: bool = True,
    named: Mapping[str, str] | None = None,
) -> DestinationConfig:
    """A destination of `kind_name` (``url`` picks duckdb or sql by scheme) at `value`,
    checked: a relative path is made absolute against `base`; `mode` must be one the kind
    takes, and so must each option set (`Kind.options`; `named` says how the caller spells
    each: ``--excel-safe``). With `secrets_allowed` off (a job file), a URL holding a
    password is refused. A bad value is a ConfigError naming `where`."""
    database = None
    if kind_name == "url" or kind(kind_name).location == "database":
        database = DatabaseUrl.parse(value, where=where, base=base, secrets_allowed=secrets_allowed)
        engine_kind = "duckdb" if database.engine == "duckdb" else "sql"
        if kind_name == "duckdb" != engine_kind:
            said = value if database.sqlalchemy().password is None else database.redacted()
            raise ConfigError(
                f"{where}: {said!r} is not a DuckDB URL; write it like duckdb:///analytics.duckdb"
            )
        kind_name = engine_kind
    chosen = kind(kind_name)
    if mode not in chosen.capabilities.modes:
        modes = ", ".join(sorted(chosen.capabilities.modes))
        raise ConfigError(f"{where}: {chosen.title} take mode {modes}, not {mode!r}")
    for option, set_ in (("excel_safe", excel_safe), ("catalog", catalog is not None)):
        if set_ and option not in chosen.options:
            takers = " or ".join(k.name for k in KINDS if option in k.options)
            said = (named or {}).get(option, f"{where}: {option}")
            raise ConfigError(f"{said}: applies to {takers} destinations only, not {chosen.name}")
    target = database.url if database is not None else _folder(value, where, base)
    if catalog is not None:
        catalog = _catalog_uri(catalog, where, base, secrets_allowed)
    return DestinationConfig(
        chosen.name, target, mode, where, excel_safe=excel_safe, catalog=catalog,
        timeout=timeout, database=database,
    )


def _folder(value: str, where: str, base: Path) -> str:
    """An object storage URL as it is (checked), else a local path made absolute."""
    checked = check_location(value, where)
    if is_remote(checked):
        return checked
    return str((base / Path(value).expanduser()).resolve())


def _catalog_uri(uri: str, where: str, base: Path, secrets_allowed: bool) -> str:
    """An Iceberg catalog: a REST catalog's ``http(s)://`` URL as it is, or a database URL
    checked as ``url`` destinations are (pyiceberg's SQL catalog); no password in a job file."""
    at = f"{where}: catalog"
    if uri.partition(":")[0].lower() in ("http", "https"):
        if urlsplit(uri).password is not None:
            raise ConfigError(
                f"{at}: holds a password (value not shown): a REST catalog's credentials "
                "come from PYICEBERG_CATALOG__CONNECTOR__CREDENTIAL or __TOKEN in the environment"
            )
        return uri
    return DatabaseUrl.parse(uri, where=at, base=base, secrets_allowed=secrets_allowed).url
