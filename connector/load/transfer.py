"""Copy many tables from the API into one destination, table by table.

What `connector export` and `connector load` share: pick the tables (all by default, else
by name or id), stream each through extraction into a writer with a progress bar, skip a
table the key may not read (403) and go on, and keep a summary. A table that fails is
reported and the rest still go; a bad key (401) stops everything.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from connector.api import Client
from connector.api.models import TableSummary
from connector.errors import AuthError, ConfigError, ConnectorError, NotFound, PermissionDenied
from connector.extract import read_batches
from connector.progress import Progress, progress
from connector.schema import Table

__all__ = ["Summary", "TableResult", "Writer", "export_path", "file_name", "transfer"]

log = logging.getLogger(__name__)

#: Writes one table's batches (with their Arrow schema); returns (rows, where they went).
Writer = Callable[[Table, Iterable[pa.RecordBatch], pa.Schema], tuple[int, str]]

Status = Literal["ok", "skipped", "failed"]


@dataclass(frozen=True)
class TableResult:
    """What happened to one table."""

    name: str
    id: str
    status: Status
    rows: int = 0
    seconds: float = 0.0
    target: str = ""
    error: str = ""


@dataclass
class Summary:
    """Every table's result, and the exit code they add up to (0 ok, 1 failed, 3 partial)."""

    tables: list[TableResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    def count(self, status: Status) -> int:
        return sum(t.status == status for t in self.tables)

    @property
    def exit_code(self) -> int:
        if self.count("failed"):
            return 1
        return 3 if self.count("skipped") else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": [asdict(t) for t in self.tables],
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "ok": self.count("ok"),
            "skipped": self.count("skipped"),
            "failed": self.count("failed"),
            "exit_code": self.exit_code,
        }


def transfer(
    client: Client,
    wanted: Sequence[str],
    write: Writer,
    *,
    page_size: int,
    show_progress: bool | None = None,
) -> Summary:
    """Extract each wanted table (every table when `wanted` is empty) and `write` it."""
    started = time.monotonic()
    summary = Summary()
    targets, skipped = _select(client, wanted)
    summary.tables.extend(skipped)
    for summary_row, table in targets:
        begun = time.monotonic()
        try:
            table = table or client.get_table(summary_row.id)
            extraction = read_batches(client, table, page_size=page_size)
            with progress(table.name, summary_row.rows or None, enabled=show_progress) as bar:
                rows, target = write(table, _counted(extraction, bar), extraction.schema)
            result = TableResult(table.name, table.id, "ok", rows, time.monotonic() - begun, target)
        except (AuthError, ConfigError):
            raise
        except PermissionDenied as exc:
            log.warning("skipping table %r: %s", summary_row.name, exc)
            result = TableResult(summary_row.name, summary_row.id, "skipped", error=str(exc))
        except ConnectorError as exc:
            log.error("table %r failed: %s", summary_row.name, exc)
            result = TableResult(summary_row.name, summary_row.id, "failed",
                                 seconds=time.monotonic() - begun, error=str(exc))
        summary.tables.append(result)
    summary.seconds = time.monotonic() - started
    return summary


def file_name(table_name: str) -> str:
    """A file name for a table: path separators and a leading dot are replaced."""
    name = re.sub(r"[/\\\x00]", "_", table_name)
    return f"_{name}" if name.startswith(".") or not name else name


def _select(
    client: Client, wanted: Sequence[str]
) -> tuple[list[tuple[TableSummary, Table | None]], list[TableResult]]:
    """The tables to copy, by name or id. A value the listing lacks is tried as an id
    (a scoped key does not list what it may not read: that is a skip, not a typo)."""
    listed = client.list_tables()
    if not wanted:
        return [(t, None) for t in listed], []
    chosen: list[tuple[TableSummary, Table | None]] = []
    skipped: list[TableResult] = []
    for value in dict.fromkeys(wanted):
        matches = [t for t in listed if value in (t.name, t.id)]
        if matches:
            chosen.extend((t, None) for t in matches if all(t.id != c.id for c, _ in chosen))
            continue
        try:
            table = client.get_table(value)
        except PermissionDenied as exc:
            log.warning("skipping table %r: %s", value, exc)
            skipped.append(TableResult(value, value, "skipped", error=str(exc)))
            continue
        except NotFound:
            names = ", ".join(t.name for t in listed) or "none"
            raise ConfigError(f"no table named or with id {value!r}; tables: {names}") from None
        chosen.append((TableSummary(table.id, table.name, len(table.columns), 0, ""), table))
    return chosen, skipped


def _counted(batches: Iterable[pa.RecordBatch], bar: Progress) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        bar.update(batch.num_rows)
        yield batch


def export_path(directory: Path, table: Table, suffix: str, taken: set[Path]) -> Path:
    """``<dir>/<table name>.<suffix>``; the table id is added when two tables share a name."""
    path = directory / f"{file_name(table.name)}.{suffix}"
    if path in taken:
        path = directory / f"{file_name(table.name)}-{table.id}.{suffix}"
    taken.add(path)
    return path
