"""A push as people read it, and as its entry in the one result model.

`describe_plan`, `describe_result` and `headline` are text. `reported` turns what a push did
(an `Applied`, or the error that stopped it) into its `connector.results.PushResult`, the
entry every command and job reports (``connector push --json`` and ``sync`` alike, through
`connector.results.RunSummary.to_dict`), so a push has one status rule: `outcome`'s.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from connector.api import MAX_BULK_ROWS
from connector.errors import ConnectorError, PermissionDenied
from connector.push.apply import Applied, Rejected, written_before
from connector.push.plan import Counts, Plan
from connector.results import PushResult

__all__ = ["describe_plan", "describe_result", "headline", "reported"]

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
    lines += [f"  header {header!r} taken as column {column!r}" for header, column in plan.taken]
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
                f"{_column(name)}: {_value(u.old.get(name))} → {_value(value)}"
                for name, value in u.fields.items()
            )
            lines.append(f"  row {u.row} ({u.id}): {changes}")
    if plan.deletes:
        lines.append(f"deletes ({_shown(deletes, sample)}):")
        lines += [
            f"  {d.id}" + (f": {_cells(d.key)}" if d.key else "") for d in plan.deletes[:sample]
        ]
    return "\n".join(lines)


def describe_result(result: Applied) -> str:
    """The summary line, then each rejected row with its reason."""
    return "\n".join([result.summary(), *(f"  {_rejection(r)}" for r in result.rejected)])


def _rejection(r: Rejected) -> str:
    where = f"row {r.row}" if r.row is not None else str(r.id)
    column = f", column {r.column!r}" if r.column else ""
    return f"rejected {where}{column}: {r.message}"


def _shown(total: int, sample: int) -> str:
    return f"first {sample} of {total}" if total > sample else str(total)


def _cells(fields: dict[str, Any]) -> str:
    return ", ".join(f"{_column(k)}={_value(v)}" for k, v in fields.items())


def _column(name: str) -> str:
    """A column's name as shown, quoted when spaces at an end or unprintable characters
    would hide how it is spelled (``x `` and ``x`` are two columns)."""
    return name if name == name.strip() and name.isprintable() else repr(name)


def _value(value: Any) -> str:
    if value is None:
        return "(empty)"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value) if isinstance(value, str) else str(value)


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


def reported(
    file: str | Path | None,
    table: str | None,
    applied: Applied | None = None,
    *,
    error: ConnectorError | None = None,
    dry_run: bool = False,
    rejects_file: str | Path | None = None,
    plan_file: str | Path | None = None,
) -> PushResult:
    """A push's entry in a run's summary. `file`: what was pushed (or the plan applied);
    `table`: as the user named it, until a plan names it exactly. With `error`, the push
    failed; what an apply stopped part-way had written (`written_before`) is counted.
    Rows the server rejected make it failed too (the run is then partial: `outcome`),
    each named in ``problems``; a dry run's entry is ``planned`` with the plan as text."""
    if error is not None and applied is None:
        applied = written_before(error)
    planned = dry_run and error is None
    plan = applied.plan if applied is not None else None
    counts = Counts() if applied is None or plan is None else (
        plan.counts if planned else applied.applied
    )
    rejected = applied.rejected if applied is not None else ()
    head, problems = headline(error) if error is not None else (None, [])
    if not problems:
        problems = [_rejection(r) for r in rejected]
    return PushResult(
        file=str(file) if file is not None else None,
        table=plan.table.name if plan is not None else table,
        status="planned" if planned else "failed" if error is not None or rejected else "ok",
        created=counts.created,
        updated=counts.updated,
        deleted=counts.deleted,
        unchanged=counts.unchanged,
        error=head or (f"the server rejected {len(rejected)} rows" if rejected else None),
        plan=describe_plan(plan) if planned and plan is not None else None,
        rejected=len(rejected),
        source=plan.source if plan is not None else None,
        table_id=plan.table.id if plan is not None else None,
        key=str(plan.key) if plan is not None else None,
        mode=plan.mode if plan is not None else None,
        requests=applied.requests if applied is not None else 0,
        rejects_file=str(rejects_file) if rejects_file is not None and rejected else None,
        plan_file=str(plan_file) if plan_file is not None and planned else None,
        problems=tuple(problems),
    )
