"""Dagster definitions for a connector job: one asset per table, its pushes upstream,
materialised every night at 02:15 (pip install 'table-data-connector[dagster]').

    TABLES_API_KEY=... dagster dev -f examples/dagster_defs.py
"""

import os

from connector.dagster import definitions_from_job

defs = definitions_from_job(
    os.environ.get("CONNECTOR_JOB", "configs/nightly-warehouse.toml"),
    cron="15 2 * * *",
)
