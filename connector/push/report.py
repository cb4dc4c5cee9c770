"""Plans and results as text a person reads before (and after) anything is written."""

from __future__ import annotations

import math
from typing import Any

from connector.api import MAX_BULK_ROWS
from connector.push.apply import PushResult
from connector.push.plan import Plan

__all__ = ["describe_plan", "describe_result"]

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
