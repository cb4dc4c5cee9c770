"""What a job remembers between runs: a cursor per table, the last run, row counts.

The state file is JSON, replaced atomically (`connector.atomic`: written aside,
fsynced, renamed into place), and only after the destination has committed; so a run that
crashes or is killed leaves the state of the last good run, and the next run redoes the
work it lost. It holds no secrets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from connector.atomic import atomic_path
from connector.errors import ConfigError

__all__ = ["JobState", "RunRecord", "TableState", "load_state", "save_state"]

#: 2 added a table's columns and settled window, and the job file a state belongs to;
#: a version 1 state is still read (those fields then unknown).
STATE_VERSION = 2
_READABLE = (1, 2)


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
    """The saved state, or an empty one when the job never ran."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return JobState()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the job state ({exc.strerror})") from None
    try:
        data = json.loads(text)
        if data.get("version") not in _READABLE:
            raise ValueError(f"unsupported version {data.get('version')!r}")
        tables = {k: _table(v) for k, v in data["tables"].items()}
        last = data.get("last_run")
        since = int(data.get("runs_since_verify", 0))
        return JobState(tables, RunRecord(**last) if last else None, since, data.get("job_file"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
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


def _table(data: Mapping[str, Any]) -> TableState:
    columns = data.get("columns")
    return TableState(**{**data, "columns": tuple(columns) if columns is not None else None})
