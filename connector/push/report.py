"""Plans and results as text a person reads, and as the JSON summary a scheduler reads.

`summary` is the one summary `connector push --json` and `connector apply --json` print,
whatever happened (a bad file, a refused key, rows rejected, a failure part-way): the field
names and null conventions of `connector sync --log-format json`'s (`jobs.runner.RunSummary`),
with the push as the one entry of ``pushes``. `headline` is the one line an error prints first.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from connector.api import MAX_BULK_ROWS
from connector.errors import ConnectorError, ExitCode, PermissionDenied
from connector.push.apply import PushResult, written_before
from connector.push.plan import Plan

__all__ = ["describe_plan", "describe_result", "headline", "now", "summary"]

#: Rows of each kind shown in a plan's sample.
SAMPLE = 5


def describe_plan(plan: Plan, sample: int = SAMPLE) -> str:
    """Counts, coercions, a sample of each kind of write, and the exact request count."""
    creates, updates, deletes = len(plan.creates), len(plan.updates), len(plan.deletes)
    lines = [
        f"plan: {plan.source} -> table {plan.table.name!r} ({plan.table.id}), "
        f"key {plan.key}, mode {plan.mode}",
        f"  source rows {plan.source_rows}, table rows {plan.table_rows}",
        f"  create {creates}, update {updates}, delete {deletes}, "
        f"unchanged {plan.unchanged}, skipped {plan.skipped}",
        f"  requests: {plan.create_requests} bulk create + {updates} update + "
        f"{math.ceil(deletes / MAX_BULK_ROWS)} bulk delete = {plan.requests}",
    ]
    if plan.ignored:
        lines.append(f"  ignored columns: {', '.join(plan.ignored)}")
    if plan.coercions:
        lines.append("coercions:")
        lines += [f"  {rule}: {count}" for rule, count in plan.coercions.items()]
    if plan.creates:
        lines.append(f"creates ({_shown(creates, sample)}):")
        lines += [f"  row {c.row}: {_cells(c.fields)}" for c in plan.creates[:sample]]
    if plan.updates:
        lines.append(f"updates ({_shown(updates, sample)}):")
        for u in plan.updates[:sample]:
            changes = "; ".join(
                f"{name}: {_value(u.old.get(name))} → {_value(value)}"
                for name, value in u.fields.items()
            )
            lines.append(f"  row {u.row} ({u.id}): {changes}")
    if plan.deletes:
        lines.append(f"deletes ({_shown(deletes, sample)}):")
        lines += [
            f"  {d.id}" + (f": {_cells(d.key)}" if d.key else "") for d in plan.deletes[:sample]
        ]
    return "\n".join(lines)


def describe_result(result: PushResult) -> str:
    """The summary line, then each rejected row with its reason."""
    lines = [result.summary()]
    for r in result.rejected:
        where = f"row {r.row}" if r.row is not None else str(r.id)
        column = f", column {r.column!r}" if r.column else ""
        lines.append(f"  rejected {where}{column}: {r.message}")
    return "\n".join(lines)


def _shown(total: int, sample: int) -> str:
    return f"first {sample} of {total}" if total > sample else str(total)


def _cells(fields: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in fields.items())


def _value(value: Any) -> str:
    if value is None:
        return "(empty)"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value) if isinstance(value, str) else str(value)


def now() -> str:
    """A summary's timestamp: the API's shape (UTC, microseconds, ``Z``), as sync's."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def headline(exc: ConnectorError) -> tuple[str, list[str]]:
    """An error as one line naming what to fix, and the lines that follow it.

    A `ValidationReport`'s message already leads with its first problem (row, column,
    value) and lists them all below when there are more; an error that stopped the writes
    says what was written first.
    """
    head, *details = str(exc).splitlines() or [type(exc).__name__]
    details = [d.strip() for d in details]
    written = written_before(exc)
    if written is not None:
        # A refused key fails the same way on a rerun: say so rather than "run again".
        then = (
            "this key cannot write to the table: run the push again with a key that may"
            if isinstance(exc, PermissionDenied) else "run the push again to finish"
        )
        details.append(
            f"written before the failure: created {written.created}, updated "
            f"{written.updated}, deleted {written.deleted} (of {len(written.plan.creates)}, "
            f"{len(written.plan.updates)}, {len(written.plan.deletes)} planned); {then}"
        )
    return head, details


def summary(
    command: str,
    *,
    started_at: str,
    seconds: float,
    file: str | Path | None,
    table: str | None,
    result: PushResult | None = None,
    error: ConnectorError | None = None,
    dry_run: bool = False,
    rejects_file: str | Path | None = None,
    plan_file: str | Path | None = None,
    interrupted: bool = False,
    max_concurrency: int = 0,
) -> dict[str, Any]:
    """The JSON summary of one `command` (``push`` or ``apply``); `result` may be None
    (nothing was planned) and is what was written before `error` when both are given.
    `interrupted`: stopped by Ctrl-C (status ``interrupted``, exit code 130).
    `max_concurrency`: the client's cap (the result carries the level it reached)."""
    if interrupted:
        status, code = "interrupted", int(ExitCode.INTERRUPTED)
    elif error is not None:
        status, code = "failed", int(error.exit_code)
    elif result is not None and result.rejected:
        status, code = "partial", int(ExitCode.PARTIAL)
    else:
        status, code = "ok", int(ExitCode.OK)
    if error is not None and result is None:
        result = written_before(error)
    planned = dry_run and error is None
    plan = result.plan if result is not None else None
    counts = (plan.counts if planned else result.applied) if plan and result else None
    rejected = len(result.rejected) if result is not None else 0
    head, problems = headline(error) if error is not None else (None, [])
    if interrupted:
        head = "interrupted: rows in flight may have been written; run the push again to finish"
    entry: dict[str, Any] = {
        "file": str(file) if file is not None else None,
        "table": plan.table.name if plan else table,
        "status": "planned" if planned and not interrupted
        else "failed" if error or rejected or interrupted else "ok",
        "created": counts.created if counts else 0,
        "updated": counts.updated if counts else 0,
        "deleted": counts.deleted if counts else 0,
        "unchanged": counts.unchanged if counts else 0,
        "error": head if head else f"the server rejected {rejected} rows" if rejected else None,
        "plan": describe_plan(plan) if planned and plan else None,
        "rejected": rejected,
        # beyond sync's push entry (`source`: the spreadsheet a plan was made from):
        "source": plan.source if plan else None,
        "table_id": plan.table.id if plan else None,
        "key": str(plan.key) if plan else None,
        "mode": plan.mode if plan else None,
        "requests": result.requests if result is not None else 0,
        "rejects_file": str(rejects_file) if rejects_file is not None and rejected else None,
        "plan_file": str(plan_file) if plan_file is not None and planned else None,
        "problems": problems,
    }
    return {
        "job": command,
        "status": status,
        "exit_code": code,
        "dry_run": dry_run,
        "started_at": started_at,
        "finished_at": now(),
        "state_file": None,
        "destinations": [],
        "tables": [],
        "pushes": [entry],
        "error": head,
        "seconds": round(seconds, 3),
        "verified": False,
        "concurrency": result.concurrency if result is not None else 0,
        "max_concurrency": max_concurrency,
        "totals": {
            "tables": 0, "ok": 0, "unchanged": 0, "planned": 0, "skipped": 0, "failed": 0,
            "rows_read": 0, "rows_written": 0, "rows_deleted": 0,
            "pushes": 1,
            **{k: entry[k] for k in ("created", "updated", "deleted", "unchanged", "rejected")},
        },
    }
