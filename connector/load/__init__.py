"""Loads: Arrow record batches from extraction into files and SQL tables, atomically.

    parquet.write_parquet / merge_parquet   one Parquet file per table (merge = upsert by _id)
    csv.write_csv                           one CSV file per table
    sql.load_table / delete_ids             a SQL table: replace, append or merge by _id
    transfer.transfer                       many tables from the API into one of those

Every write leaves the previous file or table intact until the new one is complete.
"""
