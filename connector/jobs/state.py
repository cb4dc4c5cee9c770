"""What a job remembers between runs: a cursor per table, the last run, row counts.

The state file is JSON, replaced atomically (`connector.atomic`: written aside,
fsynced, renamed into place), and only after the destination has committed; so a run that
crashes or is killed leaves the state of the last good run, and the next run redoes the
work it lost. It holds no secrets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, get_args

from connector.atomic import atomic_path
from connector.errors import ConfigError
from connector.results import RunStatus
from connector.stamps import iso, parse

__all__ = ["JobState", "RunRecord", "TableState", "load_state", "save_state"]

#: 2 added a table's columns and settled window, and the job file a state belongs to;
#: a version 1 state is still read (those fields then unknown).
STATE_VERSION = 2
_READABLE = (1, 2)
_RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)


@dataclass(frozen=True)
class TableState:
    """One table after its last committed sync."""

    table_id: str
    name: str
    #: The newest `updated_at` loaded (ISO 8601, as the server wrote it); None: none yet.
    cursor: str | None
    #: Rows the destinations held for this table after the commit.
    rows: int
    #: A fingerprint of the column definitions; a change forces a full re-read.
    schema: str
    synced_at: str
    #: Every write stamped at or before this time has been read (the lookback window's
    #: settled end, `connector.jobs.reads`); None: not known.
    settled: str | None = None
    #: The columns as the API described them at that sync (id, name, type, required,
    #: options): the next run names each change against them. None: not known.
    columns: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class RunRecord:
    """The outcome of the last run, for people and schedulers reading the state."""

    started_at: str
    finished_at: str
    status: str
    rows_written: int = 0
    rows_deleted: int = 0


@dataclass(frozen=True)
class JobState:
    tables: Mapping[str, TableState] = field(default_factory=dict)
    last_run: RunRecord | None = None
    #: Runs since the last one that verified every row (``[sync] verify_every``).
    runs_since_verify: int = 0
    #: The job file this state belongs to (two job files of one name share a folder's
    #: state file name: the second is refused, naming both). None: not recorded.
    job_file: str | None = None

    def table(self, table_id: str) -> TableState | None:
        return self.tables.get(table_id)

    def with_table(self, table: TableState) -> JobState:
        return replace(self, tables={**self.tables, table.table_id: table})

    def with_run(self, run: RunRecord, *, verified: bool = False) -> JobState:
        """After a run: its record, and the count of runs since one verified every row."""
        since = 0 if verified else self.runs_since_verify + 1
        return replace(self, last_run=run, runs_since_verify=since)


def load_state(path: Path) -> JobState:
    """The saved state, or an empty one when the job never ran. A file that is not a state
    this version wrote, whole and valid (JSON, every key of the right type and value,
    cursors API timestamps), is a `ConfigError` naming the file and the key at fault."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return JobState()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the job state ({exc.strerror or exc})") from None
    try:
        return _state(_json(raw))
    except _Bad as exc:
        raise ConfigError(
            f"{path}: the job state is unreadable ({exc}); delete it to re-sync every table in full"
        ) from None


def save_state(path: Path, state: JobState) -> None:
    """Replace the state file atomically: readers see the old state or the new, never half."""
    payload: dict[str, Any] = {
        "version": STATE_VERSION,
        "tables": {k: asdict(v) for k, v in sorted(state.tables.items())},
        "last_run": asdict(state.last_run) if state.last_run else None,
        "runs_since_verify": state.runs_since_verify,
        "job_file": state.job_file,
    }
    with atomic_path(path) as temp:
        temp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --- reading a state file: every key checked, named when it is wrong ----------------------


class _Bad(ValueError):
    """What is wrong with a state file, starting with the key path at fault."""


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Bad("not UTF-8 text") from None
    except RecursionError:
        raise _Bad("not JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or a number too long to read
        raise _Bad(f"not JSON: {' '.join(str(exc).split())}") from None


class _Object:
    """Typed reads of one JSON object of the file; `done()` refuses keys nobody read."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise _Bad(f"{where or 'the file'}: must be a JSON object, got {_shown(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{_segment(name)}" if self.where else _segment(name)

    def get(self, name: str, *, required: bool = True) -> Any:
        self.seen.add(name)
        if name not in self.data and required:
            raise _Bad(f"{self.key(name)}: missing")
        return self.data.get(name)

    def bad(self, name: str, what: str) -> _Bad:
        return _Bad(f"{self.key(name)}: must be {what}, got {_shown(self.data.get(name))}")

    def text(self, name: str, *, required: bool = True, null: bool = False) -> str | None:
        value = self.get(name, required=required)
        if value is None and (null or not required):
            return None
        if not isinstance(value, str) or "\x00" in value:
            raise self.bad(name, "a string" + " or null" * null)
        return value

    def count(self, name: str, *, required: bool = True) -> int:
        value = self.get(name, required=required)
        if value is None and not required:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.bad(name, "an integer >= 0")
        return value

    def stamp(self, name: str, *, null: bool = False, keep: bool = False) -> str | None:
        """An API timestamp, in the one shape whose text order is time order (`keep`: as
        written, for one that is only shown or read as a time)."""
        value = self.get(name, required=not null)
        if value is None and null:
            return None
        try:
            return value if keep and parse(value) else iso(parse(value))
        except ValueError:
            raise self.bad(
                name, "a UTC timestamp like 2024-05-06T07:08:09.123456Z" + " or null" * null
            ) from None

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise _Bad(f"{self.key(unknown[0])}: unknown key")


def _segment(name: str) -> str:
    """A key as a key path shows it: bare when plain, else quoted with escapes (one line)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _state(data: Any) -> JobState:
    top = _Object(data, "")
    version = top.get("version")
    if type(version) is not int or version not in _READABLE:
        raise _Bad(f"version: unsupported version {_shown(version)}")
    tables = _Object(top.get("tables"), "tables")
    found = {key: _table(_Object(tables.get(key), tables.key(key)), key) for key in tables.data}
    last = top.get("last_run", required=False)
    state = JobState(
        found,
        None if last is None else _run(_Object(last, "last_run")),
        top.count("runs_since_verify", required=False),
        top.text("job_file", required=False, null=True),
    )
    top.done()
    return state


def _table(table: _Object, key: str) -> TableState:
    if table.text("table_id") != key:
        raise table.bad("table_id", f"the id it is filed under ({key!r})")
    state = TableState(
        table_id=key,
        name=str(table.text("name")),
        cursor=table.stamp("cursor", null=True),
        rows=table.count("rows"),
        schema=str(table.text("schema")),
        synced_at=str(table.stamp("synced_at", keep=True)),
        settled=table.stamp("settled", null=True),
        columns=_columns(table),
    )
    table.done()
    return state


def _columns(table: _Object) -> tuple[Mapping[str, Any], ...] | None:
    """A table's columns as the API described them (only what the next run reads is
    checked: the API's description may grow)."""
    value = table.get("columns", required=False)
    if value is None:
        return None
    if not isinstance(value, list):
        raise table.bad("columns", "a list of columns or null")
    for i, data in enumerate(value):
        column = _Object(data, f"{table.key('columns')}[{i}]")
        column.text("id", required=False)
        column.text("name")
        column.text("type", required=False)
        if not isinstance(column.get("required", required=False) or False, bool):
            raise column.bad("required", "true or false")
        options = column.get("options", required=False)
        if options is not None and not (
            isinstance(options, list) and all(isinstance(o, str) for o in options)
        ):
            raise column.bad("options", "a list of strings or null")
    return tuple(value)


def _run(run: _Object) -> RunRecord:
    status = run.get("status")
    if status not in _RUN_STATUSES:
        raise run.bad("status", f"one of {', '.join(_RUN_STATUSES)}")
    record = RunRecord(
        started_at=str(run.stamp("started_at", keep=True)),
        finished_at=str(run.stamp("finished_at", keep=True)),
        status=status,
        rows_written=run.count("rows_written", required=False),
        rows_deleted=run.count("rows_deleted", required=False),
    )
    run.done()
    return record
