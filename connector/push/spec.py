"""What a push does, said once: `PushSpec`, checked when it is built.

The library's callers build one (``PushSpec(frame, table="People", key="Name")``), and so do
``connector push`` from its flags and a job file from each ``[[push]]``; `connector.push.push`
takes it. Only what belongs to one call is left out: whether it is a dry run, whether a
progress bar shows.

A message names a setting the way its author wrote it (`PushSpec.names`): a library call's
parameter (``date_format``, also a job file's key, after the job's ``push[0]``) or a
command's flag (``--date-format``).

Cheap to import (no pandas): a job file's pushes are read into specs before any runs.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from connector.errors import ConfigError
from connector.locations import DatabaseUrl
from connector.modes import DEFAULT_PUSH_MODE, MERGED_CELLS, PUSH_MODES, MergedCells, PushMode

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Names",
    "PushSpec",
    "Query",
    "check_date_format",
    "check_merged_cells",
    "check_null_values",
    "safe_url",
    "setting",
]

#: How messages name a push's settings: as the library's parameters (``date_format``), which
#: a job file's keys are too, or as the command's flags (``--date-format``).
Names = Literal["parameters", "flags"]


def setting(name: str, names: Names = "parameters", value: object = None) -> str:
    """A setting (a parameter's name) as a message names it, with a value to give it if
    any: ``allow_delete=9`` or ``--allow-delete 9``."""
    if names == "flags":
        flag = "--" + name.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    return name if value is None else f"{name}={value!r}"


@dataclass(frozen=True)
class Query:
    """`sql` run read-only on the database at `db` (`connector.push.query`: SQLite,
    PostgreSQL or DuckDB): its rows are pushed."""

    db: str
    sql: str

    @property
    def name(self) -> str:
        """The query as reports name it: its database, password left out."""
        return f"query on {safe_url(self.db)}"


@dataclass(frozen=True)
class PushSpec:
    """Make `table` match `source` on `key`: everything a push is told, checked when built.

    `source` is a DataFrame, a CSV, ``.xlsx`` or Parquet file, a folder of Parquet files, an
    object storage URL, or a `Query`. `key` is column names (``"a,b"`` or ``("a", "b")``),
    or ``"id"`` for the row id.
    """

    source: str | Path | pd.DataFrame | Query
    #: The table's name or id.
    table: str
    key: str | tuple[str, ...]
    #: ``insert``, ``update``, ``upsert`` or ``mirror`` (upsert, then delete the rows the
    #: source lacks).
    mode: PushMode = DEFAULT_PUSH_MODE
    #: An Excel workbook's sheet (default: the first).
    sheet: str | None = None
    #: How dates whose day/month order a column leaves open are read (``%d/%m/%Y``).
    date_format: str | None = None
    #: Cell texts that mean an empty cell (``("NA", "-")``); only an empty cell is by default.
    null_values: tuple[str, ...] = ()
    #: The source came from ``export --excel-safe``: the ``'`` it put before text is taken off.
    excel_safe: bool = False
    #: A workbook's merged cells: ``refuse`` them, or ``fill`` each merge's cells with its value.
    merged_cells: MergedCells = "refuse"
    #: A mirror deletes at most this share of the table (default 0.2; 0 for an empty
    #: source), or `allow_delete` rows, whichever is more (`DeleteGuard` otherwise).
    max_delete_ratio: float | None = None
    allow_delete: int | None = None
    #: At most this many write requests in flight (below the client's own cap).
    concurrency: int | None = None
    #: Where rows the server rejects are written as CSV (only when there are any).
    rejects: Path | None = None
    #: Save the plan here for `connector.push.apply` and write nothing now.
    plan_out: Path | None = None
    #: How messages name the settings above (see the module docstring).
    names: Names = "parameters"
    #: Where a job file set this push (``push[0]``): its run's errors are located there.
    where: str | None = None

    def __post_init__(self) -> None:
        # The sequences and paths as one type each (a caller may pass a list or a str).
        if not isinstance(self.key, str):
            object.__setattr__(self, "key", tuple(self.key))
        object.__setattr__(self, "null_values", check_null_values(self.null_values, self.names))
        for name in ("rejects", "plan_out"):
            if (path := getattr(self, name)) is not None:
                object.__setattr__(self, name, Path(path))
        self._check()

    def _check(self) -> None:
        named = self.name
        if self.mode not in PUSH_MODES:
            raise ConfigError(f"{named('mode')} {self.mode!r}: choose one of {', '.join(PUSH_MODES)}")
        check_merged_cells(self.merged_cells, self.names)
        if (date_format := self.date_format) is not None:
            if "%" not in date_format:
                raise ConfigError(f"{named('date_format')}: must be a strftime format like "
                                  f"%d/%m/%Y, got {date_format!r}")
            if (why := check_date_format(date_format)) is not None:
                raise ConfigError(f"{named('date_format')} {date_format!r}: {why}")
        ratio = self.max_delete_ratio
        if ratio is not None and not 0.0 <= ratio <= 1.0:  # NaN too
            raise ConfigError(f"{named('max_delete_ratio')} must be between 0 and 1, not {ratio}")
        if self.allow_delete is not None and self.allow_delete < 0:
            raise ConfigError(f"{named('allow_delete')} must be 0 or more, not {self.allow_delete}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"{named('concurrency')} must be at least 1, not {self.concurrency}")

    def name(self, setting_name: str) -> str:
        """A setting as this spec's messages name it (`setting`)."""
        return setting(setting_name, self.names)

    @property
    def label(self) -> str:
        """What is pushed, as reports name it: a file's path, a query's database (no
        password), or ``DataFrame``."""
        source = self.source
        if isinstance(source, Query):
            return source.name
        if isinstance(source, str | os.PathLike):
            return os.fspath(source)
        return "DataFrame"


def check_null_values(null_values: object, names: Names = "parameters") -> tuple[str, ...]:
    """The texts that mean an empty cell, as a tuple; ConfigError unless they are non-empty
    texts (an empty cell is always empty)."""
    listed = isinstance(null_values, Iterable) and not isinstance(null_values, str)
    values = tuple(null_values) if isinstance(null_values, Iterable) and listed else None
    if values is None or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(
            f"{setting('null_values', names)} {null_values!r}: give a list of non-empty texts "
            "(an empty cell is always empty)"
        )
    return values


def check_merged_cells(merged_cells: str, names: Names = "parameters") -> None:
    """ConfigError unless `merged_cells` is one of `MERGED_CELLS`."""
    if merged_cells not in MERGED_CELLS:
        raise ConfigError(
            f"{setting('merged_cells', names)} {merged_cells!r}: choose one of "
            f"{', '.join(MERGED_CELLS)}"
        )


def check_date_format(date_format: str) -> str | None:
    """Why `date_format` cannot read dates back exactly (None when it can): it must hold
    a day, a month and a year, as ``%d/%m/%Y`` does."""
    sample = dt.date(2024, 3, 25)
    try:
        written = sample.strftime(date_format)
        read = dt.datetime.strptime(written, date_format).date()
    except ValueError as exc:
        return str(exc)
    if read != sample:
        return "it must hold a day, a month and a year, e.g. %d/%m/%Y or %m/%d/%Y"
    return None


def safe_url(url: str) -> str:
    """`url` with any password left out (a URL that does not parse is not shown)."""
    try:
        return DatabaseUrl.parse(url, where="db", memory=True).redacted()
    except ConfigError:
        return "an unparsable database URL"
