"""Loads: Arrow record batches from extraction into files and SQL tables, atomically.

    parquet.write_parquet / merge_parquet   one Parquet file per table (merge = upsert by _id)
    csv.write_csv                           one CSV file per table
    sql.load_table / delete_ids             a SQL table: replace, append or merge by _id

They know no readers and no jobs: `connector.jobs.runner` (sync, and the one-shot jobs
`export` and `load` in `cli.py`) feeds them. Every write leaves the previous file or table
intact until the new one is complete.
"""
