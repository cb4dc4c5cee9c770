"""Jobs: what to copy where (and what to push first), run once or on a schedule.

job file --load_job--> Job --run_job--> RunSummary      (`connector sync`)
flags --one_shot_job--> Job --run_job--> RunSummary     (`connector export`, `connector load`)
             config.py      runner.py (the one pipeline: reads through the one page reader,
                                       deletions, --verify; sinks.py: Parquet / CSV / SQL
                                       destinations; ids.py: id sets as 64-bit hashes;
                                       state.py: cursors; lock.py: one run at a time)
"""

from __future__ import annotations

from connector.jobs.config import Job, load_job
from connector.jobs.lock import JobLocked
from connector.jobs.runner import RunSummary, run_job

__all__ = ["Job", "JobLocked", "RunSummary", "load_job", "run_job"]
