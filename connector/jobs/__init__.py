"""Jobs: a TOML file that says what to sync where (and what to push first), run on a schedule.

job file --load_job--> Job --run_job--> RunSummary
             config.py      runner.py (state.py: cursors, lock.py: one run at a time,
                                       sinks.py: Parquet / SQL destinations)
"""

from __future__ import annotations

from connector.jobs.config import Job, load_job
from connector.jobs.lock import JobLocked
from connector.jobs.runner import RunSummary, run_job

__all__ = ["Job", "JobLocked", "RunSummary", "load_job", "run_job"]
