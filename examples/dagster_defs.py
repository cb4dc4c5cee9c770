"""Dagster definitions for a connector job: one asset per table, its pushes upstream,
materialised every night at 02:15 (pip install 'table-data-connector[dagster]').

With the reference server's demo workspace running (docs/quickstarts.md), from any folder:

    CONNECTOR_BASE_URL=http://127.0.0.1:8000/v1 CONNECTOR_API_KEY=demo-key-change-me \\
        dagster dev -f examples/dagster_defs.py

It runs this folder's dagster_job.toml; set CONNECTOR_JOB to run another job file instead
(configs/nightly-warehouse.toml reads its server from that file and its key from
TABLES_API_KEY).
"""

import os
from pathlib import Path

from connector.dagster import definitions_from_job

defs = definitions_from_job(
    os.environ.get("CONNECTOR_JOB") or Path(__file__).with_name("dagster_job.toml"),
    cron="15 2 * * *",
)
