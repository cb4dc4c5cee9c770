"""A job's pushes (``[[push]]``): which spreadsheet, folder, object or query goes into
which table, matched by which key; read into `connector.push.PushSpec`s, checked when the
job file is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from connector.errors import ConfigError
from connector.jobs.jobfile import JobFile, Section, kind
from connector.locations import DatabaseUrl, check_location, is_remote
from connector.modes import MERGED_CELLS, PUSH_MODES, PUSH_SUFFIXES, MergedCells, PushMode
from connector.push.spec import PushSpec, Query

__all__ = ["PushSpec", "parse_pushes"]


def parse_pushes(job: JobFile, data: Any) -> tuple[PushSpec, ...]:
    """A job's ``[[push]]`` tables (one or an array), each checked; none: ()."""
    if data is None:
        return ()
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise job.error("push", f"must be an array of tables ([[push]]), got {kind(data)}")
    return tuple(_push(job, d, f"push[{i}]") for i, d in enumerate(data))

def _push(job: JobFile, data: Any, where: str) -> PushSpec:
    section = Section(job, data, where)
    file = section.string("file")
    table = section.string("table")
    key = section.strings("key")
    mode = section.choice("mode", PUSH_MODES, "upsert")
    sheet = section.string("sheet")
    date_format = section.string("date_format")
    null_values = section.strings("null_values") or ()
    excel_safe = section.boolean("excel_safe", False)
    merged_cells = section.choice("merged_cells", MERGED_CELLS, "refuse")
    db = section.string("db")
    sql = section.string("sql")
    section.done()
    if file is not None and (db is not None or sql is not None):
        raise job.error(where, "set file (a spreadsheet) or db and sql (a query), not both")
    if file is None and db is None and sql is None:
        raise job.error(f"{where}.file", "missing: the spreadsheet to push (or db and sql)")
    if table is None:
        raise job.error(f"{where}.table", "missing: the table (name or id) to push into")
    if not key:
        raise job.error(f"{where}.key", "missing: the column(s) that identify a row")
    source: Path | str | Query = (
        _push_file(job, file, where) if file is not None
        else Query(_push_query(job, db, sql, where), sql or "")
    )
    excel = isinstance(source, Path) and source.suffix.lower() in (".xlsx", ".xlsm")
    if sheet is not None and not excel:
        raise job.error(f"{where}.sheet", "only applies to Excel files")
    if merged_cells != "refuse" and not excel:
        raise job.error(f"{where}.merged_cells", "only applies to Excel files")
    try:
        return PushSpec(
            source, table, key, mode=cast(PushMode, mode), sheet=sheet, date_format=date_format,
            null_values=null_values, excel_safe=excel_safe,
            merged_cells=cast(MergedCells, merged_cells), where=where,
        )
    except ConfigError as exc:  # a setting the spec refuses, named by its key
        raise exc.where(f"{job.file}: {where}.") from None


def _push_file(job: JobFile, file: str, where: str) -> Path | str:
    """A push's file: a spreadsheet or Parquet file, a folder of Parquet files (relative
    to the job file), or an object storage URL."""

    if is_remote(file):
        try:
            return check_location(file, f"{where}.file")
        except ConfigError as exc:
            raise job.error(f"{where}.file", str(exc).removeprefix(f"{where}.file: ")) from None
    path = job.path(file)
    if path.is_dir():
        return path
    if path.suffix.lower() not in PUSH_SUFFIXES:
        raise job.error(
            f"{where}.file", f"must end in one of {', '.join(PUSH_SUFFIXES)} (or be a folder "
            f"of Parquet files); got {path.name!r}"
        )
    if not path.is_file():
        raise job.error(f"{where}.file", f"no such file: {path}")
    return path

def _push_query(job: JobFile, db: str | None, sql: str | None, where: str) -> str:
    """A push's database URL (a relative SQLite or DuckDB file made absolute against the
    job file's folder), checked with its query; job files hold no password."""
    if db is None:
        raise job.error(f"{where}.db", "missing: the database the sql runs on")
    if sql is None or not sql.strip():
        raise job.error(f"{where}.sql", "missing: the query whose rows are pushed")
    from connector.push.query import check_url

    try:
        database = DatabaseUrl.parse(
            db, where=f"{where}.db", base=job.base, memory=True, secrets_allowed=False
        )
        check_url(database.url, f"{where}.db")
    except ConfigError as exc:
        raise job.error(f"{where}.db", str(exc).removeprefix(f"{where}.db: ")) from None
    return database.url

