"""What a run did: one result model for export, load, sync, push and apply.

A command's outcome is a `RunSummary`: the tables it copied (`TableResult`), the pushes it
applied (`PushResult`), and one status and exit code decided by `outcome`, the one rule
every command follows. `RunSummary.to_dict` is the JSON summary every ``--json`` (and
``sync --log-format json``) prints, built here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from connector.errors import ConnectorError, ExitCode
from connector.process import interrupt_code, interrupt_message
from connector.stamps import now

if TYPE_CHECKING:
    from connector.push.plan import Plan

__all__ = [
    "STATUSES",
    "DestinationResult",
    "PushResult",
    "Read",
    "Rejected",
    "RunStatus",
    "RunSummary",
    "Status",
    "TableResult",
    "Verified",
    "outcome",
]

#: What happened to a table or a push. ``unchanged``: nothing to write (incremental);
#: ``planned``: a dry run; ``skipped``: the key may not read it (403); ``frozen``: its
#: columns changed under a ``schema = "freeze"`` contract, so it was left as it was.
Status = Literal["ok", "unchanged", "planned", "skipped", "frozen", "failed"]
STATUSES: tuple[Status, ...] = ("ok", "unchanged", "planned", "skipped", "frozen", "failed")
#: How a table was read: every row, the rows changed since the last run, every row compared
#: with the destinations (``--verify``), or not at all.
Read = Literal["full", "incremental", "verify", "none"]
#: A run's outcome. ``interrupted``: stopped by Ctrl-C or SIGTERM (exit 130 / 143); every
#: table finished before the stop is written and its state saved, the one in flight is left
#: as it was (its writes rolled back), as after a crash-safe stop.
RunStatus = Literal["ok", "partial", "failed", "interrupted"]


@dataclass(frozen=True)
class Verified:
    """What a verifying run found wrong in the destinations (summed over them) and repaired:
    rows missing or different rewritten, extra rows (the server has no such id) deleted."""

    missing: int = 0
    different: int = 0
    extra: int = 0

    def __add__(self, other: Verified) -> Verified:
        return Verified(
            self.missing + other.missing, self.different + other.different, self.extra + other.extra
        )


@dataclass(frozen=True)
class DestinationResult:
    """What one destination of a run holds of a table afterwards: the commit it made (its
    rows written and deleted), or why it made none (the table there left as it was)."""

    #: The destination as the summary's ``destinations`` lists it, and the table in it.
    destination: str
    target: str
    status: Literal["ok", "failed"]
    rows_written: int = 0
    rows_deleted: int = 0
    error: str | None = None


@dataclass(frozen=True)
class TableResult:
    """What a run did to one table. Rows are counted the same way for every destination:
    read from the API, written (inserted or replaced; an append counts only the rows it
    added), deleted (removed, or newly marked); with several destinations, the most any of
    them wrote or deleted."""

    table: str
    table_id: str
    status: Status
    read: Read = "none"
    rows_read: int = 0
    rows_written: int = 0
    rows_deleted: int = 0
    #: Rows an incremental read read again from its lookback window (changed at or before
    #: the last run's cursor), and how many of them had changed after all (committed late):
    #: only those are written.
    window_rows: int = 0
    late_rows: int = 0
    #: Rows read that are stamped ahead of the server's clock (a wrong clock): the cursor
    #: stops at the clock, so each run reads them again until it passes them; a note names
    #: the first few.
    ahead_rows: int = 0
    #: The table's column changes since the last run, as a person reads them
    #: (``Estimate: number -> text``); every destination evolved its table to match.
    schema_changes: tuple[str, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    #: Where the table went: a file per file destination, a table name per SQL one.
    targets: tuple[str, ...] = ()
    #: Set on a verifying run (``--verify``): what it found and repaired.
    verified: Verified | None = None
    #: What each destination committed, when the table got as far as writing: a table that
    #: failed in one destination may have been committed in the others.
    destinations: tuple[DestinationResult, ...] = ()


@dataclass(frozen=True)
class Rejected:
    """A row of a push the server refused: where it came from, which column, and why."""

    row: int | None
    id: str | None
    column: str | None
    message: str
    fields: dict[str, Any]

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row is not None else str(self.id)
        column = f", column {self.column!r}" if self.column else ""
        return f"rejected {where}{column}: {self.message}"


@dataclass(frozen=True)
class PushResult:
    """What a push did (or, dry, would do) with one source: what `connector.push.push`
    returns, and the entry every command and job reports (`to_dict`).

    The counts are rows written: a dry run's are 0 (its plan holds what it would write, and
    its JSON entry counts that). Rows the server rejected make the push failed, and the
    run partial (`outcome`); an error that stopped it is its `error`, one line, with the
    lines that follow in `problems`.
    """

    #: What was pushed (a file, a query's database, ``DataFrame``), or the plan applied.
    file: str | None
    #: The table as the plan names it; as the user named it when there is no plan.
    table: str | None
    status: Literal["ok", "planned", "failed"]
    created: int = 0
    updated: int = 0
    deleted: int = 0
    #: Rows the push found equal and left as they were (0 on a dry run).
    unchanged: int = 0
    error: str | None = None
    plan: Plan | None = None
    rejected: tuple[Rejected, ...] = ()
    #: Write requests sent, the extra ones failures needed included (bisects, re-sends).
    requests: int = 0
    #: Where rejected rows were written, and where the plan was saved (``plan_out``).
    rejects_file: str | None = None
    plan_file: str | None = None
    #: Every problem found in the source (row, column, value), or each rejected row.
    problems: tuple[str, ...] = ()
    #: Reads of the whole table made to settle ambiguous failures.
    rereads: int = 0
    #: Wall time of the whole push (read, plan and writes).
    seconds: float = 0.0
    #: The most write requests in flight at once (the client's adaptive level's peak).
    concurrency: int = 0

    def as_failed(self, error: str, problems: Sequence[str] = ()) -> PushResult:
        """This push stopped by `error`: what it had written still counted."""
        return replace(
            self, status="failed", error=error,
            problems=tuple(problems) or tuple(map(str, self.rejected)), plan_file=None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The push's entry in a run's JSON summary. A dry run counts what it would do,
        and shows its plan as a person reads it."""
        plan = self.plan
        planned = plan.counts if plan is not None and self.status == "planned" else None
        done = planned or self
        return {
            "file": self.file,
            "table": self.table,
            "status": self.status,
            "created": done.created,
            "updated": done.updated,
            "deleted": done.deleted,
            "unchanged": done.unchanged,
            "error": self.error,
            "plan": plan.describe() if plan is not None and planned else None,
            "rejected": len(self.rejected),
            "source": plan.source if plan is not None else None,
            "table_id": plan.table.id if plan is not None else None,
            "key": str(plan.key) if plan is not None else None,
            "mode": plan.mode if plan is not None else None,
            "requests": self.requests,
            "rejects_file": self.rejects_file,
            "plan_file": self.plan_file,
            "problems": self.problems,
        }


def outcome(
    results: Sequence[TableResult | PushResult], error: str | None, error_code: int | None = None
) -> tuple[Literal["ok", "partial", "failed"], int]:
    """The one status rule: failed (exit 1, or the code of the error that stopped the run:
    2 for a key the server refuses) when the run could not go on, a table or push failed,
    or nothing at all could be read; partial (3) when tables were skipped (403) or frozen (a
    column change under ``schema = "freeze"``), or the server rejected rows of a push; else
    ok (0)."""
    rejected = [r for r in results if isinstance(r, PushResult) and r.rejected]
    failed = [r for r in results if r.status == "failed" and r not in rejected]
    held = [r for r in results if r.status in ("skipped", "frozen")]
    if error is not None:
        return "failed", error_code or ExitCode.FAILED
    if failed or (held and len(held) == len(results)):
        return "failed", ExitCode.FAILED
    if held or rejected:
        return "partial", ExitCode.PARTIAL
    return "ok", ExitCode.OK


@dataclass(frozen=True)
class RunSummary:
    """The outcome of a run: what a scheduler reads (``--log-format json``, ``--json``)."""

    job: str
    status: RunStatus
    exit_code: int
    dry_run: bool
    started_at: str
    finished_at: str
    #: None for a one-shot job (export, load, push): it keeps no state.
    state_file: str | None
    destinations: list[str]
    tables: list[TableResult] = field(default_factory=list)
    pushes: list[PushResult] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    verified: bool = False
    #: The most requests the run allowed in flight at once (its adaptive level's peak), and
    #: the cap it adapted under (``--max-concurrency``); 0 when it stopped before its client
    #: was made (a bad job file, a missing key).
    concurrency: int = 0
    max_concurrency: int = 0

    @classmethod
    def failed(
        cls, job: str, exc: ConnectorError, *, started_at: str, seconds: float = 0.0,
        dry_run: bool = False, destinations: Sequence[str] = (),
    ) -> RunSummary:
        """The summary of a command that failed before it ran (a bad job file, a flag, the
        lock)."""
        return cls(
            job=job, status="failed", exit_code=int(exc.exit_code), dry_run=dry_run,
            started_at=started_at, finished_at=now(), state_file=None,
            destinations=list(destinations), error=str(exc), seconds=seconds,
        )

    @classmethod
    def interrupted(
        cls, job: str, exc: BaseException, *, started_at: str, seconds: float = 0.0,
        dry_run: bool = False, destinations: Sequence[str] = (),
    ) -> RunSummary:
        """The summary of a run stopped by `exc` (Ctrl-C or `Terminated`) before `run_job`
        could report it (a command stopped while it parsed or waited)."""
        return cls(
            job=job, status="interrupted", exit_code=interrupt_code(exc), dry_run=dry_run,
            started_at=started_at, finished_at=now(), state_file=None,
            destinations=list(destinations), error=interrupt_message(exc), seconds=seconds,
        )

    def count(self, status: Status) -> int:
        return sum(t.status == status for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary every command prints: the fields, and totals over the tables
        and pushes."""
        out = asdict(replace(self, pushes=[]))
        out["pushes"] = pushes = [p.to_dict() for p in self.pushes]
        tables = self.tables
        out["totals"] = {
            "tables": len(tables),
            **{s: self.count(s) for s in STATUSES},
            "rows_read": sum(t.rows_read for t in tables),
            "rows_written": sum(t.rows_written for t in tables),
            "rows_deleted": sum(t.rows_deleted for t in tables),
            "window_rows": sum(t.window_rows for t in tables),
            "late_rows": sum(t.late_rows for t in tables),
            "ahead_rows": sum(t.ahead_rows for t in tables),
            "pushes": len(pushes),
            "push_created": sum(p["created"] for p in pushes),
            "push_updated": sum(p["updated"] for p in pushes),
            "push_deleted": sum(p["deleted"] for p in pushes),
            "push_unchanged": sum(p["unchanged"] for p in pushes),
            "push_rejected": sum(p["rejected"] for p in pushes),
        }
        return out
