"""Jobs: what to copy where (and what to push first), run once or on a schedule.

    job file --load_job--> Job --run_job--> RunSummary      (`connector sync`)
    flags --one_shot_job--> Job --run_job--> RunSummary     (`connector export`, `load`)

    config      job files -> frozen objects        run        run_job: lock, state, pushes
    jobfile     typed reads of a job file's TOML   pushes     [[push]]: what goes where
    choose      which tables, their filters        schedule   tables on threads, stops
    context     what a run's tables share          table      one table: read, delete, write
    reads       reads through the one page reader  deletions  which rows go, never a live one
    spool       rows kept until written            verify     --verify: digests compared
    state       cursors, columns, windows          lock       one run of a job at a time
    stamps      the API's timestamps
    cli         sync, export, load
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from connector.jobs.config import Job, load_job
    from connector.jobs.context import RunOptions
    from connector.jobs.lock import JobLocked
    from connector.jobs.run import run_job
    from connector.results import RunSummary

__all__ = ["Job", "JobLocked", "RunOptions", "RunSummary", "load_job", "run_job"]

#: Where each name lives; loaded on first use, so `connector sync` handles a stop before
#: the heavy modules (pyarrow, the destinations) are imported.
_HOMES = {
    "Job": "connector.jobs.config",
    "load_job": "connector.jobs.config",
    "JobLocked": "connector.jobs.lock",
    "RunOptions": "connector.jobs.context",
    "run_job": "connector.jobs.run",
    "RunSummary": "connector.results",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
