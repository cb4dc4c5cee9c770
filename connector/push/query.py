"""Rows a SQL query returns, as a push source: reverse ETL from a warehouse.

`Query` names a database and a query: SQLite (``sqlite:///shop.db``), PostgreSQL through
psycopg (``postgresql://user@host/db``; the driver reads a password from its own environment,
e.g. ``PGPASSWORD``) or DuckDB (``duckdb:///analytics.duckdb``, ``duckdb:///:memory:``), whose
SQL reads Parquet, CSV and JSON files itself (``SELECT * FROM 'exports/*.parquet'``) and, with
the ``[s3]`` extra, objects in storage (``read_parquet('s3://bucket/key.parquet')``: the
filesystem layer of `connector.destinations.storage`, credentials from the standard chain).

The query reads what it names and changes nothing anywhere, and each engine is what enforces
it, before the query runs (a push with ``--dry-run`` opens its source too):

- DuckDB opens the file read-only with its configuration locked (no SET, nor the settings a
  SELECT can change through a function: ``enable_logging()`` writes files) and downloads no
  extension; its own parser must find one SELECT (not COPY, ATTACH, EXPORT, INSTALL, SET,
  CHECKPOINT, CREATE SECRET...).
- SQLite opens the file ``mode=ro``; the driver takes one statement; an authorizer denies
  every action but reading while SQLite compiles it (INSERT, ATTACH, PRAGMA, BEGIN,
  CREATE...), first under EXPLAIN, which compiles and does not run, so a statement that
  returns no rows (VACUUM INTO) is refused too.
- PostgreSQL runs it in a read-only transaction, rolled back, as a cursor: the server parses
  the query alone (one statement) and takes it only as a SELECT, VALUES or TABLE query with
  no data-modifying WITH. A role that can write files on the server (a superuser) is
  refused: its ``lo_export()`` writes one even from a read-only transaction.

So a bad URL, a statement of another kind (named in the message) or a query the database
refuses is a `ConfigError` naming the setting (the parameter, flag or job key: `open_query`'s
`names`) before a row is read or written. Its result columns are the header the push checks against the table; rows are
numbered from 1, in the order the query returns them.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from connector.errors import ConfigError
from connector.extras import require
from connector.locations import SCHEMES, DatabaseUrl, filesystem
from connector.push.sheet import Sheet, SourceFrame, arrow_frame
from connector.push.spec import Names, Query, safe_url, setting

if TYPE_CHECKING:
    import psycopg
    import sqlalchemy as sa

__all__ = ["check_url", "open_query"]

#: Rows fetched from a database at a time.
FETCH_ROWS = 65_536
#: The SQLAlchemy driver a query runs through, by database: the ones whose read-only guards
#: are below (SQLite's authorizer through pysqlite, a cursor parsed alone through psycopg).
DRIVERS = {"sqlite": "pysqlite", "postgresql": "psycopg"}
_STORAGE_URL = re.compile(r"\b(" + "|".join(map(re.escape, SCHEMES)) + r")://", re.IGNORECASE)
#: A DuckDB connection that changes nothing: `lock_configuration` refuses every later
#: setting, also one a SELECT makes through a function; reading ``https://`` would otherwise
#: download and install httpfs.
_DUCKDB_CONFIG = {
    "TimeZone": "UTC",
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
}
#: The SQLite authorizer actions of a statement that only reads.
_SQLITE_READS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
#: Whether the PostgreSQL role can write files on the server (lo_export, COPY TO): as a
#: superuser or a member of the roles that may, directly or through SET ROLE.
_WRITES_SERVER_FILES = (
    "SELECT current_user, EXISTS (SELECT FROM pg_roles WHERE (rolsuper OR rolname IN "
    "('pg_write_server_files', 'pg_execute_server_program')) AND pg_has_role(oid, 'MEMBER'))"
)
#: The first words of a query: a PostgreSQL cursor's syntax error on a statement that starts
#: otherwise is that kind of statement refused.
_QUERIES = frozenset({"SELECT", "VALUES", "TABLE", "WITH"})
#: A statement's first word past spaces, comments and parentheses: its kind, in messages.
_FIRST_WORD = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/|\()*(\w+)", re.DOTALL)


def open_query(query: Query, names: Names = "parameters") -> Sheet:
    """Run `query` read-only and return its rows as a source; ConfigError (naming the
    setting at fault as `names` say) when the URL, the database or the query cannot be used."""
    where = db, sql = setting("db", names), setting("sql", names)
    if not query.sql.strip():
        raise ConfigError(f"{sql}: the query is empty")
    if query.db.lower().startswith("duckdb:"):
        return _duckdb(query, where)
    import sqlalchemy as sa

    check_url(query.db, db)
    url = sa.engine.make_url(query.db)
    if url.get_backend_name() == "sqlite":
        return _sqlite(query, url.database or ":memory:", where)
    return _postgresql(query, url, where)


def check_url(url: str, where: str) -> None:
    """A URL `open_query` can run a query on read-only: DuckDB's, SQLite's or PostgreSQL's
    through psycopg. ConfigError naming `where` otherwise (the value is not shown: it may
    hold a password)."""
    database = DatabaseUrl.parse(url, where=where, memory=True)
    if database.engine != "duckdb" and DRIVERS.get(database.engine) != database.driver:
        drivername = database.sqlalchemy().drivername
        raise ConfigError(
            f"{where}: a query runs read-only on SQLite (sqlite:///shop.db), PostgreSQL through "
            f"psycopg (postgresql://user@host/db) or DuckDB (duckdb:///analytics.duckdb), not "
            f"on {drivername}"
        )


def _duckdb_path(url: str, where: str) -> str:
    path = DatabaseUrl.parse(url, where=where, memory=True).path
    assert path is not None  # a DuckDB URL names a file or :memory:
    return path


def _duckdb(query: Query, where: tuple[str, str]) -> Sheet:
    db, sql = where
    path = _duckdb_path(query.db, db)
    duckdb = require("duckdb", "duckdb:/// queries")
    if path != ":memory:" and not Path(path).is_file():
        raise ConfigError(f"{db}: no DuckDB database file {path}")
    try:  # an in-memory database cannot open read-only; nothing in it outlives the push
        con = duckdb.connect(path, read_only=path != ":memory:", config=_DUCKDB_CONFIG)
    except duckdb.Error as exc:
        raise ConfigError(f"{db}: cannot open {path}: {_line(exc)}") from None
    try:
        statements = con.extract_statements(query.sql)
        if not statements:
            raise ConfigError(f"{sql}: the query is empty")
        try:
            kinds = [s.type for s in statements]
        except ValueError:  # a kind newer than the Python API's StatementType: UPDATE EXTENSIONS
            kinds = []
        if kinds != [duckdb.StatementType.SELECT]:
            raise _not_a_read(sql, _kinds([s.query for s in statements]))
        for scheme in {m.lower() for m in _STORAGE_URL.findall(query.sql)}:
            con.register_filesystem(filesystem(f"{scheme}://bucket"))
        relation = con.sql(query.sql)
        columns = _checked(tuple(relation.columns), sql)  # bound, not run: `read` reads rows
    except duckdb.Error as exc:
        con.close()
        raise ConfigError(f"{sql}: DuckDB refused the query: {_line(exc)}") from None
    except BaseException:
        con.close()
        raise

    def read(wanted: frozenset[str] | None) -> SourceFrame:
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

    return Sheet(query.name, columns, read)


def _sqlite(query: Query, database: str, where: tuple[str, str]) -> Sheet:
    db, sql = where
    memory = database == ":memory:"
    if not memory and not Path(database).is_file():
        raise ConfigError(f"{db}: no SQLite database file {database}")
    target = database if memory else Path(database).resolve().as_uri() + "?mode=ro"
    try:
        con = sqlite3.connect(target, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise ConfigError(f"{db}: cannot open {database}: {_line(exc)}") from None
    denied: list[int] = []

    def reads_only(action: int, *_: str | None) -> int:
        """SQLite's authorizer: a statement that asks for more than reading does not compile
        (also one SQLite compiles inside another: VACUUM's ATTACH)."""
        if action in _SQLITE_READS:
            return sqlite3.SQLITE_OK
        denied.append(action)
        return sqlite3.SQLITE_DENY

    con.set_authorizer(reads_only)
    try:
        cursor = _sqlite_select(con, sql, query.sql, denied)
        columns = _checked(tuple(str(d[0]) for d in cursor.description), sql)
    except BaseException:
        con.close()
        raise
    return Sheet(query.name, columns,
                 _fetched(query, columns, cursor.fetchall, sqlite3.Error, con.close, sql))


def _sqlite_select(
    con: sqlite3.Connection, where: str, text: str, denied: list[int]
) -> sqlite3.Cursor:
    """`text` run once SQLite compiled it, unrun (EXPLAIN), as one statement that only reads
    and returns rows; `denied` holds the actions the authorizer refused."""
    try:
        program = con.execute("EXPLAIN " + text).fetchall()
    except sqlite3.ProgrammingError as exc:
        if "one statement at a time" in str(exc):  # the driver's rule, checked before a run
            raise _not_a_read(where, "more than one statement") from None
        raise ConfigError(f"{where}: the database refused the query: {_line(exc)}") from None
    except sqlite3.Error as exc:
        if denied and _kinds([text]) in ("SELECT", "VALUES"):
            raise ConfigError(
                f"{where}: SQLite refused the query: it asks for more than reading, as a pragma "
                "function does"
            ) from None
        if denied:
            raise _not_a_read(where, _kinds([text])) from None
        raise ConfigError(f"{where}: the database refused the query: {_line(exc)}") from None
    if not any(row[1] == "ResultRow" for row in program):  # VACUUM asks the authorizer nothing
        raise _not_a_read(where, _kinds([text]))
    try:
        return con.execute(text)
    except sqlite3.Error as exc:
        raise ConfigError(f"{where}: the database refused the query: {_line(exc)}") from None


def _postgresql(query: Query, url: sa.URL, where: tuple[str, str]) -> Sheet:
    import psycopg
    import sqlalchemy as sa

    db, sql = where
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        raw = engine.raw_connection()
    except (sa.exc.SQLAlchemyError, psycopg.Error) as exc:
        raise ConfigError(f"{db}: cannot connect to {safe_url(query.db)}: {_line(exc)}") from None

    def close() -> None:
        raw.close()  # the transaction rolled back
        engine.dispose()

    pg = cast("psycopg.Connection[Any]", raw.driver_connection)  # a live one: it just connected
    try:
        pg.read_only = True  # BEGIN READ ONLY before the first statement
        [(user, writes_files)] = pg.execute(_WRITES_SERVER_FILES).fetchall()
        if writes_files:
            raise ConfigError(
                f"{db}: role {user} can write files on the database server (a superuser, or a "
                "member of pg_write_server_files or pg_execute_server_program), which a "
                "read-only transaction does not stop: connect as a role that only reads"
            )
        cursor = pg.cursor("connector_query")
        cursor.execute(query.sql)  # DECLARE connector_query CURSOR FOR ..., parsed alone
        columns = _checked(tuple(d.name for d in cursor.description or ()), sql)
    except psycopg.Error as exc:
        close()
        kind = _kinds([query.sql])
        if isinstance(exc, psycopg.errors.SyntaxError | psycopg.errors.FeatureNotSupported) and (
            kind not in _QUERIES
        ):
            raise _not_a_read(sql, kind, f" (PostgreSQL: {_line(exc)})") from None
        raise ConfigError(f"{sql}: the database refused the query: {_line(exc)}") from None
    except BaseException:
        close()
        raise
    return Sheet(query.name, columns,
                 _fetched(query, columns, cursor.fetchall, psycopg.Error, close, sql))


def _fetched(
    query: Query, columns: tuple[str, ...], fetchall: Callable[[], Sequence[Sequence[Any]]],
    errors: type[Exception], close: Callable[[], None], sql: str,
) -> Callable[[frozenset[str] | None], SourceFrame]:
    """A `Sheet` reader of the rows a DB-API cursor holds, closing its connection; a
    failure names `sql`, the query's setting."""

    def read(_: frozenset[str] | None) -> SourceFrame:
        try:
            rows = fetchall()
        except errors as exc:
            raise ConfigError(f"{sql}: the query failed: {_line(exc)}") from None
        finally:
            close()
        cells = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
        frame = pd.DataFrame(
            {i: _compact(pd.Series(list(c), dtype=object)) for i, c in enumerate(cells)},
            index=pd.RangeIndex(len(rows)),
        )
        frame.columns = pd.Index(columns)
        return _numbered(query.name, frame, columns)

    return read


def _kinds(statements: Sequence[str]) -> str:
    """The statements' kinds (first words) for a message: ``COPY``, ``3 statements (ATTACH;
    DROP; SELECT)``."""
    kinds = [m.group(1).upper() if (m := _FIRST_WORD.match(s)) else "?" for s in statements]
    return kinds[0] if len(kinds) == 1 else f"{len(kinds)} statements ({'; '.join(kinds)})"


def _not_a_read(where: str, kinds: str, detail: str = "") -> ConfigError:
    return ConfigError(f"{where}: {kinds} refused: the query runs read-only, as one SELECT{detail}")


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


def _numbered(name: str, frame: pd.DataFrame, columns: tuple[str, ...]) -> SourceFrame:
    return SourceFrame(name, frame, np.arange(1, len(frame) + 1, dtype=np.int64), columns)


def _line(exc: BaseException) -> str:
    """The first line of a database's error, without SQLAlchemy's background link."""
    text = str(getattr(exc, "orig", None) or exc)
    return " ".join(text.split("\n")[0].split()) or type(exc).__name__

