"""Rows a SQL query returns, as a push source: reverse ETL from a warehouse.

`Query` names a database and a query: a SQLAlchemy URL (``sqlite:///shop.db``,
``postgresql://user@host/db``; the driver reads a password from its own environment, e.g.
``PGPASSWORD``) or DuckDB (``duckdb:///analytics.duckdb``, ``duckdb:///:memory:``), whose SQL
reads Parquet, CSV and JSON files itself (``SELECT * FROM 'exports/*.parquet'``) and, with
the ``[s3]`` extra, objects in storage (``read_parquet('s3://bucket/key.parquet')``: the
filesystem layer of `connector.destinations.storage`, credentials from the standard chain).

The query runs read-only (a DuckDB file opened read-only, SQLite's ``query_only``, a
PostgreSQL read-only transaction, always rolled back) when the push opens its source, so a
bad URL or a query the database refuses is a `ConfigError` naming the flag or job key
(`Query.where`) before a row is read or written. Its result columns are the header the push
checks against the table; rows are numbered from 1, in the order the query returns them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from connector.destinations.storage import SCHEMES, filesystem
from connector.errors import ConfigError
from connector.extras import require
from connector.push.sheet import Sheet, Source, arrow_frame
from connector.push.source import Query

__all__ = ["check_url", "open_query", "safe_url"]

DUCKDB_SCHEME = "duckdb:///"
#: Rows fetched from a database at a time.
FETCH_ROWS = 65_536
_STORAGE_URL = re.compile(r"\b(" + "|".join(map(re.escape, SCHEMES)) + r")://", re.IGNORECASE)


def open_query(query: Query) -> Sheet:
    """Run `query` and return its rows as a source; ConfigError (naming `query.where`) when
    the URL, the database or the query cannot be used."""
    sql = query.where[1]
    if not query.sql.strip():
        raise ConfigError(f"{sql}: the query is empty")
    if query.url.lower().startswith("duckdb:"):
        return _duckdb(query)
    return _sqlalchemy(query)


def safe_url(url: str) -> str:
    """`url` with any password left out (a URL that does not parse is not shown)."""
    if url.lower().startswith("duckdb:"):
        return url
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "an unparsable database URL"


def check_url(url: str, where: str) -> None:
    """A URL `open_query` can try: DuckDB's, or one SQLAlchemy parses for a database kind it
    knows. ConfigError naming `where` otherwise (the value is not shown: it may hold a
    password)."""
    if url.lower().startswith("duckdb:"):
        _duckdb_path(url, where)
        return
    import sqlalchemy as sa

    try:
        sa.engine.make_url(url).get_dialect()
    except (sa.exc.ArgumentError, ImportError):
        raise ConfigError(
            f"{where}: not a database URL SQLAlchemy knows (write it like sqlite:///shop.db, "
            "postgresql://user@host/db or duckdb:///analytics.duckdb)"
        ) from None


def _duckdb_path(url: str, where: str) -> str:
    if not url.startswith(DUCKDB_SCHEME) or not url.removeprefix(DUCKDB_SCHEME):
        raise ConfigError(
            f"{where}: {url!r} is not a DuckDB URL; write it like duckdb:///analytics.duckdb "
            "(relative), duckdb:////srv/analytics.duckdb or duckdb:///:memory:"
        )
    return url.removeprefix(DUCKDB_SCHEME)


def _duckdb(query: Query) -> Sheet:
    db, sql = query.where
    path = _duckdb_path(query.url, db)
    duckdb = require("duckdb", "duckdb:/// queries")
    if path != ":memory:" and not Path(path).is_file():
        raise ConfigError(f"{db}: no DuckDB database file {path}")
    try:
        con = duckdb.connect() if path == ":memory:" else duckdb.connect(path, read_only=True)
    except duckdb.Error as exc:
        raise ConfigError(f"{db}: cannot open {path}: {_line(exc)}") from None
    try:
        con.execute("SET TimeZone = 'UTC'")
        for scheme in {m.lower() for m in _STORAGE_URL.findall(query.sql)}:
            con.register_filesystem(filesystem(f"{scheme}://bucket"))
        relation = con.sql(query.sql)
        if relation is None:  # a statement, not a query
            raise ConfigError(f"{sql}: the query returns no rows (a SELECT is needed)")
        columns = tuple(relation.columns)  # bound, not run: rows are read by `read`
    except duckdb.Error as exc:
        con.close()
        raise ConfigError(f"{sql}: DuckDB refused the query: {_line(exc)}") from None
    except BaseException:
        con.close()
        raise

    def read(wanted: frozenset[str] | None) -> Source:
        # Only the columns the push uses: a `SELECT *` over an export would otherwise read
        # and hold its row ids and stamps too (+60 MB at 1M rows).
        kept = [c for c in columns if wanted is None or c in wanted]
        projected = relation if len(kept) == len(columns) else relation.project(
            ", ".join('"' + c.replace('"', '""') + '"' for c in kept)
        )
        try:
            data = projected.to_arrow_reader(FETCH_ROWS).read_all()
        except duckdb.Error as exc:
            raise ConfigError(f"{sql}: the query failed: {_line(exc)}") from None
        finally:
            con.close()
        return _numbered(query.name, arrow_frame(data), columns)

    return Sheet(query.name, _checked(columns, sql), read)


def _sqlalchemy(query: Query) -> Sheet:
    import sqlalchemy as sa

    db, sql = query.where
    check_url(query.url, db)
    url = sa.engine.make_url(query.url)
    backend = url.get_backend_name()
    if backend == "sqlite" and url.database not in (None, "", ":memory:") and not Path(
        str(url.database)
    ).is_file():
        raise ConfigError(f"{db}: no SQLite database file {url.database}")
    try:
        engine = sa.create_engine(url)
        con = engine.connect()
    except (sa.exc.SQLAlchemyError, ImportError) as exc:
        raise ConfigError(f"{db}: cannot connect to {safe_url(query.url)}: {_line(exc)}") from None
    try:
        if backend == "sqlite":
            con.exec_driver_sql("PRAGMA query_only = ON")
        elif backend == "postgresql":
            con.exec_driver_sql("SET TRANSACTION READ ONLY")
        result = con.exec_driver_sql(query.sql)
        if not result.returns_rows:
            raise ConfigError(f"{sql}: the query returns no rows (a SELECT is needed)")
        columns = tuple(map(str, result.keys()))
    except sa.exc.SQLAlchemyError as exc:
        con.close()
        engine.dispose()
        raise ConfigError(f"{sql}: the database refused the query: {_line(exc)}") from None
    except BaseException:
        con.close()
        engine.dispose()
        raise

    def read(_: frozenset[str] | None) -> Source:
        try:
            rows = result.fetchall()
        except sa.exc.SQLAlchemyError as exc:
            raise ConfigError(f"{sql}: the query failed: {_line(exc)}") from None
        finally:
            con.rollback()
            con.close()
            engine.dispose()
        cells = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
        frame = pd.DataFrame(
            {i: _compact(pd.Series(list(c), dtype=object)) for i, c in enumerate(cells)},
            index=pd.RangeIndex(len(rows)),
        )
        frame.columns = pd.Index(columns)
        return _numbered(query.name, frame, columns)

    return Sheet(query.name, _checked(columns, sql), read)


def _checked(columns: tuple[str, ...], sql: str) -> tuple[str, ...]:
    """A query's result columns as a header: named, each once."""
    if not columns:
        raise ConfigError(f"{sql}: the query returns no columns")
    repeated = sorted(c for c, n in Counter(columns).items() if n > 1)
    if repeated:
        raise ConfigError(f"{sql}: the query returns columns of the same name: {repeated}; name each once (AS)")
    return columns


def _compact(cells: pd.Series) -> pd.Series:
    """A column of a database's Python values; text as compact strings when it is all text."""
    values = cells.dropna()
    if len(values) and all(isinstance(v, str) for v in values):
        return cells.astype("string")
    return cells


def _numbered(name: str, frame: pd.DataFrame, columns: tuple[str, ...]) -> Source:
    return Source(name, frame, np.arange(1, len(frame) + 1, dtype=np.int64), columns)


def _line(exc: BaseException) -> str:
    """The first line of a database's error, without SQLAlchemy's background link."""
    text = str(getattr(exc, "orig", None) or exc)
    return " ".join(text.split("\n")[0].split()) or type(exc).__name__

