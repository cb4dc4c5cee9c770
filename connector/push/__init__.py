"""Push a spreadsheet, a DataFrame or a query's rows into a table: read, validate, plan, apply.

    PushSpec    what to push where, by which key, how: checked when built (`spec`)
    source      CSV / xlsx / Parquet file, folder or object / DataFrame / `Query`
      -> header     its columns against the table's, before a row is read (`check_header`)
      -> validate   every problem at once, before any write (`ValidationReport`)
      -> diff       by key against the live table, read in chunks (`Diff` -> `Plan`)
      -> apply      bulk creates, PATCHes of changed cells, bulk deletes (`PushResult`)

`push(client, spec)` does it all in one call (`pipeline`); `apply` applies a plan saved
earlier, after checking that the rows it touches have not changed since.

The names load on first use (PEP 562), as `connector`'s do: a job file's pushes are read
into `PushSpec`s (`spec`, no pandas) by a sync that may never push.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from connector.errors import (
        DeleteGuard,
        PlanError,
        Problem,
        SourceError,
        ValidationReport,
    )
    from connector.push.pipeline import apply, push
    from connector.push.plan import MODES, Counts, Mode, Plan
    from connector.push.spec import PushSpec, Query
    from connector.push.writes import written_before
    from connector.results import PushResult, Rejected

__all__ = [
    "MODES",
    "Counts",
    "DeleteGuard",
    "Mode",
    "Plan",
    "PlanError",
    "Problem",
    "PushResult",
    "PushSpec",
    "Query",
    "Rejected",
    "SourceError",
    "ValidationReport",
    "apply",
    "push",
    "written_before",
]

#: Where each public name is defined (the module imported when the name is first read).
_HOMES = {
    **dict.fromkeys(("DeleteGuard", "PlanError", "Problem", "SourceError", "ValidationReport"),
                    "connector.errors"),
    **dict.fromkeys(("MODES", "Counts", "Mode", "Plan"), "connector.push.plan"),
    **dict.fromkeys(("PushResult", "Rejected"), "connector.results"),
    **dict.fromkeys(("PushSpec", "Query"), "connector.push.spec"),
    **dict.fromkeys(("apply", "push"), "connector.push.pipeline"),
    "written_before": "connector.push.writes",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
