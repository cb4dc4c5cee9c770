"""A push as people read it, and a failed push as its entry in the one result model.

`describe_result` and `headline` are text (a plan's own is `Plan.describe`). `failed` is the
`connector.results.PushResult` of a push an error stopped, what it had written counted: the
entry every command and job reports (``connector push --json`` and ``sync`` alike, through
`connector.results.RunSummary.to_dict`), so a push has one status rule: `outcome`'s.
"""

from __future__ import annotations

from dataclasses import replace

from connector.errors import ConnectorError, PermissionDenied
from connector.push.writes import written_before
from connector.results import PushResult

__all__ = ["describe_result", "failed", "headline"]


def describe_result(result: PushResult) -> str:
    """The summary line (counts, requests and seconds), then each rejected row."""
    line = (
        f"created {result.created}, updated {result.updated}, deleted {result.deleted}, "
        f"rejected {len(result.rejected)}, requests {result.requests}, {result.seconds:.2f} s"
    )
    return "\n".join([line, *(f"  {r}" for r in result.rejected)])


def headline(exc: ConnectorError) -> tuple[str, list[str]]:
    """An error as one line naming what to fix, and the lines that follow it.

    A `ValidationReport`'s message already leads with its first problem (row, column,
    value) and lists them all below when there are more; an error that stopped the writes
    says what was written first.
    """
    head, *details = str(exc).splitlines() or [type(exc).__name__]
    details = [d.strip() for d in details]
    written = written_before(exc)
    if written is not None and written.plan is not None:
        plan = written.plan
        # A refused key fails the same way on a rerun: say so rather than "run again".
        then = (
            "this key cannot write to the table: run the push again with a key that may"
            if isinstance(exc, PermissionDenied) else "run the push again to finish"
        )
        details.append(
            f"written before the failure: created {written.created}, updated "
            f"{written.updated}, deleted {written.deleted} (of {len(plan.creates)}, "
            f"{len(plan.updates)}, {len(plan.deletes)} planned); {then}"
        )
    return head, details


def failed(
    exc: ConnectorError, file: str | None, table: str | None, planned: PushResult | None = None
) -> PushResult:
    """The entry of a push `exc` stopped: `file` (what was pushed, or the plan applied) into
    `table` (as the user named it, until a plan names it exactly). What an apply stopped
    part-way had written (`written_before`), or the dry run the delete guard then refused
    (`planned`), is counted: nothing, for the dry run."""
    head, details = headline(exc)
    done = written_before(exc) or planned or PushResult(file, table, "failed")
    return replace(done, file=file).as_failed(head, details)
