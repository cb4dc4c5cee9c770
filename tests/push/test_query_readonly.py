"""`push --db URL --sql QUERY` (and a job's ``db`` and ``sql``) runs read-only on DuckDB,
SQLite and PostgreSQL: a query may read what it names and change nothing anywhere. Each kind
of statement that writes is refused before it runs, through the real CLI: exit 2, one line
naming the statement, no traceback; afterwards the database, the other files of its folder
and the table pushed to are exactly as they were (bytes and times compared, tables read back)."""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.errors import ExitCode
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.server import RunningServer

SPEC = {"columns": [{"name": "Sku", "type": "text", "required": True}, {"name": "Qty", "type": "number"}]}
ROWS = [("s1", 1.0), ("s2", 2.5)]
_tables = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("push-readonly"), {}).start()
    yield running
    running.stop()


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder, where a relative path in a query lands, with a home of its own
    (DuckDB keeps extensions and persistent secrets under ~/.duckdb)."""
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under `folder`: its modification time and its bytes' hash."""
    return {
        str(p.relative_to(folder)): (
            p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "/"
        )
        for p in sorted(folder.rglob("*"))
    }


def table_rows(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    """The table's rows as the server gives them (not through the code under test)."""
    with server.client() as http:
        return list(http.get(f"/tables/{table_id}/rows").json()["rows"])


def refused(server: RunningServer, *args: str) -> str:
    """The one line `connector push *args` exits 2 with; the table it names stays empty."""
    table = f"readonly {next(_tables)}"
    table_id = server.create_table({**SPEC, "name": table})
    done = CliRunner().invoke(
        main, ["push", *args, "--table", table, "--key", "Sku", "--base-url", server.base_url],
        env={"CONNECTOR_API_KEY": server.api_key},
    )
    assert done.exit_code == ExitCode.USAGE, done.output
    assert "Traceback" not in done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1, done.output
    assert table_rows(server, table_id) == []
    return lines[0]


# -- DuckDB -----------------------------------------------------------------------------------


def duckdb_files(folder: Path) -> None:
    """warehouse.duckdb (queried) and other.duckdb, each with a table s; data.csv."""
    import duckdb

    for name in ("warehouse", "other"):
        with duckdb.connect(str(folder / f"{name}.duckdb")) as db:
            db.execute("CREATE TABLE s (Sku VARCHAR, Qty DOUBLE)")
            db.executemany("INSERT INTO s VALUES (?, ?)", ROWS)
            db.execute("CREATE SEQUENCE n")
    (folder / "data.csv").write_text("Sku,Qty\ns9,9\n")


def duckdb_tables(folder: Path) -> dict[str, Any]:
    import duckdb

    found = {}
    for name in ("warehouse", "other"):
        with duckdb.connect(str(folder / f"{name}.duckdb"), read_only=True) as db:
            found[name] = (db.execute("SELECT * FROM s ORDER BY Sku").fetchall(),
                           db.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall())
    return found


DUCKDB_WRITES = [
    ("ATTACH 'other.duckdb' AS o; DROP TABLE o.s; SELECT * FROM s", "3 statements (ATTACH; DROP; SELECT)"),
    ("SELECT 's1' AS Sku; COPY (SELECT 1 AS Sku) TO 'out.csv'", "2 statements (SELECT; COPY)"),
    ("COPY (SELECT 's1' AS Sku) TO 'out.csv'", "COPY"),
    ("COPY (FROM read_csv('data.csv')) TO 'out.parquet' (FORMAT parquet)", "COPY"),
    ("COPY s FROM 'data.csv'", "COPY"),
    ("ATTACH 'new.duckdb' AS n", "ATTACH"),
    ("ATTACH 'other.duckdb' AS o (READ_ONLY)", "ATTACH"),
    ("EXPORT DATABASE 'dump'", "EXPORT"),
    ("COPY FROM DATABASE memory TO other", "COPY"),
    ("INSTALL sqlite", "INSTALL"),
    ("LOAD parquet", "LOAD"),
    ("UPDATE EXTENSIONS", "UPDATE"),
    ("SET threads = 1", "SET"),
    ("RESET threads", "RESET"),
    ("PRAGMA enable_profiling = 'json'", "PRAGMA"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("CALL force_checkpoint()", "CALL"),
    ("VACUUM", "VACUUM"),
    ("ANALYZE", "ANALYZE"),
    ("CREATE PERSISTENT SECRET k (TYPE s3, KEY_ID 'id', SECRET 'shh')", "CREATE"),
    ("CREATE TABLE t AS SELECT 1 AS Sku", "CREATE"),
    ("CREATE MACRO one() AS 1", "CREATE"),
    ("INSERT INTO s VALUES ('x', 1) RETURNING *", "INSERT"),
    ("UPDATE s SET Qty = 0 RETURNING *", "UPDATE"),
    ("DELETE FROM s RETURNING *", "DELETE"),
    ("MERGE INTO s USING (SELECT 'x' AS Sku) n ON s.Sku = n.Sku "
     "WHEN NOT MATCHED THEN INSERT VALUES ('x', 1)", "MERGE"),
    ("DROP TABLE s", "DROP"),
    ("ALTER TABLE s ADD COLUMN c INTEGER", "ALTER"),
    ("BEGIN", "BEGIN"),
    ("EXPLAIN ANALYZE COPY (SELECT 1 AS Sku) TO 'out.csv'", "EXPLAIN"),
    ("  -- a comment first\n  DROP TABLE s", "DROP"),
]


@pytest.mark.parametrize("database", ["warehouse.duckdb", ":memory:"])
@pytest.mark.parametrize(("sql", "kind"), DUCKDB_WRITES)
def test_duckdb_refuses_every_statement_that_writes_before_it_runs(
    server: RunningServer, folder: Path, database: str, sql: str, kind: str
) -> None:
    duckdb_files(folder)
    before, tables = snapshot(folder), duckdb_tables(folder)

    line = refused(server, "--db", f"duckdb:///{database}", "--sql", sql)

    assert f"--sql: {kind} refused: the query runs read-only, as one SELECT" in line
    assert snapshot(folder) == before
    assert duckdb_tables(folder) == tables


def test_a_write_smuggled_into_a_dry_run_changes_no_other_file(
    server: RunningServer, folder: Path
) -> None:
    """The report of issue 25: a dry run's query dropped a table in another file."""
    duckdb_files(folder)
    before, tables = snapshot(folder), duckdb_tables(folder)
    sql = "ATTACH 'other.duckdb' AS o; DROP TABLE o.s; SELECT * FROM s"

    for database in ("warehouse.duckdb", ":memory:"):
        line = refused(server, "--db", f"duckdb:///{database}", "--sql", sql, "--dry-run")
        assert "3 statements (ATTACH; DROP; SELECT) refused" in line

    assert snapshot(folder) == before
    assert duckdb_tables(folder) == tables


@pytest.mark.parametrize("sql", [
    "SELECT * FROM enable_logging(storage = 'file', storage_path = 'logs')",
    "SELECT * FROM enable_profiling()",
])
def test_a_duckdb_select_cannot_change_a_setting(server: RunningServer, folder: Path, sql: str) -> None:
    """A SELECT can call functions that change settings, some of which write files: the
    connection's configuration is locked."""
    duckdb_files(folder)
    before = snapshot(folder)

    line = refused(server, "--db", "duckdb:///:memory:", "--sql", sql)

    assert "--sql: DuckDB refused the query: " in line and "the configuration has been locked" in line
    assert snapshot(folder) == before


def test_a_locked_duckdb_query_still_reads_its_database_and_files(
    server: RunningServer, folder: Path
) -> None:
    duckdb_files(folder)
    before = snapshot(folder)
    table_id = server.create_table({**SPEC, "name": "read through duckdb"})
    sql = ("SELECT Sku, Qty FROM s UNION ALL SELECT Sku, Qty FROM read_csv('data.csv') "
           "UNION ALL SELECT Sku || 'o', Qty FROM read_duckdb('other.duckdb', table_name := 's')")

    done = CliRunner().invoke(
        main, ["push", "--db", "duckdb:///warehouse.duckdb", "--sql", sql, "--table",
               "read through duckdb", "--key", "Sku", "--base-url", server.base_url],
        env={"CONNECTOR_API_KEY": server.api_key},
    )

    assert done.exit_code == 0, done.output
    assert sorted((r["fields"]["Sku"], r["fields"]["Qty"])
                  for r in table_rows(server, table_id)) == [
        ("s1", 1), ("s1o", 1), ("s2", 2.5), ("s2o", 2.5), ("s9", 9)
    ]
    assert snapshot(folder) == before


# -- SQLite -----------------------------------------------------------------------------------


def sqlite_files(folder: Path) -> None:
    """shop.db (queried) and other.db, each with a table stock and an index."""
    for name in ("shop", "other"):
        with sqlite3.connect(folder / f"{name}.db") as db:
            db.execute("CREATE TABLE stock (Sku TEXT PRIMARY KEY, Qty REAL)")
            db.execute("CREATE INDEX by_qty ON stock (Qty)")
            db.executemany("INSERT INTO stock VALUES (?, ?)", ROWS)
        db.close()


def sqlite_tables(folder: Path) -> dict[str, Any]:
    found = {}
    for name in ("shop", "other"):
        db = sqlite3.connect(f"file:{folder / name}.db?mode=ro", uri=True)
        found[name] = (db.execute("SELECT * FROM stock ORDER BY Sku").fetchall(),
                       db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall(),
                       db.execute("PRAGMA user_version").fetchall(),
                       db.execute("PRAGMA journal_mode").fetchall())
        db.close()
    return found


SQLITE_WRITES = [
    ("SELECT * FROM stock; DROP TABLE stock", "more than one statement"),
    ("ATTACH 'new.db' AS n", "ATTACH"),
    ("ATTACH 'other.db' AS o", "ATTACH"),
    ("DETACH main", "DETACH"),
    ("VACUUM INTO 'copy.db'", "VACUUM"),
    ("VACUUM INTO (SELECT 'copy.db')", "VACUUM"),
    ("VACUUM", "VACUUM"),
    ("PRAGMA query_only = OFF", "PRAGMA"),
    ("PRAGMA user_version = 7", "PRAGMA"),
    ("PRAGMA journal_mode = WAL", "PRAGMA"),
    ("INSERT INTO stock VALUES ('x', 1) RETURNING *", "INSERT"),
    ("REPLACE INTO stock VALUES ('s1', 9) RETURNING *", "REPLACE"),
    ("UPDATE stock SET Qty = 0 RETURNING *", "UPDATE"),
    ("DELETE FROM stock RETURNING *", "DELETE"),
    ("WITH old AS (SELECT 1) DELETE FROM stock RETURNING *", "WITH"),
    ("DROP TABLE stock", "DROP"),
    ("CREATE TABLE t AS SELECT 1 AS Sku", "CREATE"),
    ("CREATE TEMP TABLE t AS SELECT 1 AS Sku", "CREATE"),
    ("CREATE INDEX by_sku ON stock (Sku)", "CREATE"),
    ("CREATE VIEW v AS SELECT 1 AS Sku", "CREATE"),
    ("CREATE VIRTUAL TABLE v USING fts5(Sku)", "CREATE"),
    ("ALTER TABLE stock ADD COLUMN c", "ALTER"),
    ("REINDEX", "REINDEX"),
    ("ANALYZE", "ANALYZE"),
    ("BEGIN", "BEGIN"),
    ("SAVEPOINT p", "SAVEPOINT"),
    ("/* a comment first */ DELETE FROM stock RETURNING *", "DELETE"),
]


@pytest.mark.parametrize(("sql", "kind"), SQLITE_WRITES)
def test_sqlite_refuses_every_statement_that_writes_before_it_runs(
    server: RunningServer, folder: Path, sql: str, kind: str
) -> None:
    sqlite_files(folder)
    before, tables = snapshot(folder), sqlite_tables(folder)

    line = refused(server, "--db", "sqlite:///shop.db", "--sql", sql)

    assert f"--sql: {kind} refused: the query runs read-only, as one SELECT" in line
    assert snapshot(folder) == before
    assert sqlite_tables(folder) == tables


def test_a_sqlite_select_asking_for_more_than_reading_is_refused(
    server: RunningServer, folder: Path
) -> None:
    """A pragma function: it reads, but SQLite's authorizer sees it ask for more."""
    sqlite_files(folder)
    before = snapshot(folder)

    line = refused(server, "--db", "sqlite:///shop.db", "--sql",
                   "SELECT name AS Sku FROM pragma_table_info('stock')")

    assert "--sql: SQLite refused the query: it asks for more than reading" in line
    assert snapshot(folder) == before


@pytest.mark.parametrize(("sql", "kind"), [
    ("SELECT 1 AS Sku; ATTACH 'other.db' AS o", "more than one statement"),
    ("ATTACH 'new.db' AS n", "ATTACH"),
    ("VACUUM INTO 'copy.db'", "VACUUM"),
    ("PRAGMA temp_store_directory = 'spill'", "PRAGMA"),
    ("CREATE TABLE t AS SELECT 1 AS Sku", "CREATE"),
])
def test_an_in_memory_sqlite_database_refuses_them_too(
    server: RunningServer, folder: Path, sql: str, kind: str
) -> None:
    sqlite_files(folder)
    before, tables = snapshot(folder), sqlite_tables(folder)

    line = refused(server, "--db", "sqlite://", "--sql", sql)

    assert f"--sql: {kind} refused: the query runs read-only, as one SELECT" in line
    assert snapshot(folder) == before
    assert sqlite_tables(folder) == tables


# -- PostgreSQL -------------------------------------------------------------------------------


def postgres_tables(dsn: str) -> dict[str, Any]:
    """What the database holds, as its superuser reads it: rows, relations, functions, the
    sequence, large objects and the settings made for a role or database."""
    import psycopg

    with psycopg.connect(dsn) as db:
        return {
            "stock": db.execute("SELECT * FROM stock ORDER BY sku").fetchall(),
            "relations": db.execute(
                "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'public'::regnamespace"
                " ORDER BY 1").fetchall(),
            "functions": db.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace "
                "ORDER BY 1").fetchall(),
            "sequence": db.execute("SELECT last_value, is_called FROM n").fetchall(),
            "large objects": db.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchall(),
            "settings": db.execute("SELECT setconfig FROM pg_db_role_setting").fetchall(),
        }


@pytest.fixture
def warehouse(postgres_db: str, postgres_user: str) -> Iterator[str]:
    """A database holding table stock, sequence n, function wipe() that deletes the table's
    rows and procedure purge() that does too, all owned by `postgres_user`, who queries them;
    the superuser's URL, to read them back."""
    import psycopg

    with psycopg.connect(postgres_user.replace("postgresql+psycopg://", "postgresql://")) as db:
        db.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty numeric)")
        with db.cursor() as cur:
            cur.executemany("INSERT INTO stock VALUES (%s, %s)", ROWS)
        db.execute("CREATE SEQUENCE n")
        db.execute("CREATE FUNCTION wipe() RETURNS int LANGUAGE plpgsql "
                   "AS $$BEGIN DELETE FROM stock; RETURN 0; END$$")
        db.execute("CREATE PROCEDURE purge() LANGUAGE sql AS 'DELETE FROM stock'")
    yield postgres_db.replace("postgresql+psycopg://", "postgresql://")


POSTGRES_WRITES = [
    ("COMMIT; DROP TABLE stock", "COMMIT"),
    ("DROP TABLE stock", "DROP"),
    ("TRUNCATE stock", "TRUNCATE"),
    ("INSERT INTO stock VALUES ('x', 1) RETURNING *", "INSERT"),
    ("UPDATE stock SET qty = 0 RETURNING *", "UPDATE"),
    ("DELETE FROM stock RETURNING *", "DELETE"),
    ("MERGE INTO stock USING (SELECT 'x' AS sku) n ON stock.sku = n.sku "
     "WHEN NOT MATCHED THEN INSERT VALUES ('x', 1)", "MERGE"),
    ("CREATE TABLE t AS SELECT 1 AS sku", "CREATE"),
    ("ALTER TABLE stock ADD COLUMN c int", "ALTER"),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "SET"),
    ("COPY stock TO '/tmp/stock.csv'", "COPY"),
    ("COPY (SELECT 1) TO PROGRAM 'touch /tmp/connector-readonly'", "COPY"),
    ("COPY stock FROM STDIN", "COPY"),
    ("DO $$BEGIN DELETE FROM stock; END$$", "DO"),
    ("CALL purge()", "CALL"),
    ("PREPARE p AS DELETE FROM stock", "PREPARE"),
    ("EXPLAIN ANALYZE DELETE FROM stock", "EXPLAIN"),
    ("VACUUM stock", "VACUUM"),
    ("ANALYZE stock", "ANALYZE"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("LOCK stock", "LOCK"),
    ("ALTER ROLE CURRENT_USER SET work_mem = '8MB'", "ALTER"),
    ("ALTER SYSTEM SET work_mem = '8MB'", "ALTER"),
]


@pytest.mark.parametrize(("sql", "kind"), POSTGRES_WRITES)
def test_postgresql_refuses_every_statement_that_writes_before_it_runs(
    server: RunningServer, folder: Path, warehouse: str, postgres_user: str, sql: str, kind: str
) -> None:
    before, tables = snapshot(folder), postgres_tables(warehouse)

    line = refused(server, "--db", postgres_user, "--sql", sql)

    assert f"--sql: {kind} refused: the query runs read-only, as one SELECT" in line
    assert "(PostgreSQL: syntax error at or near" in line
    assert snapshot(folder) == before
    assert postgres_tables(warehouse) == tables
    assert not Path("/tmp/connector-readonly").exists()


@pytest.mark.parametrize(("sql", "said"), [
    ("SELECT * FROM stock; DROP TABLE stock", "cannot insert multiple commands"),
    ("SELECT 1; COMMIT; DROP TABLE stock", "cannot insert multiple commands"),
    ("WITH gone AS (DELETE FROM stock RETURNING *) SELECT * FROM gone",
     "must not contain data-modifying statements in WITH"),
    ("SELECT * INTO copied FROM stock", "SELECT ... INTO is not allowed here"),
    ('SELECT wipe()::text AS "Sku"', "cannot execute DELETE in a read-only transaction"),
    ("SELECT nextval('n')::text AS \"Sku\"", "cannot execute nextval() in a read-only transaction"),
    ("SELECT set_config('transaction_read_only', 'off', true) AS \"Sku\"",
     "transaction read-write mode must be set before any query"),
    ('SELECT sku AS "Sku" FROM stock FOR UPDATE',
     "cannot execute SELECT FOR UPDATE in a read-only transaction"),
])
def test_postgresql_refuses_a_query_that_would_write_from_a_select(
    server: RunningServer, warehouse: str, postgres_user: str, sql: str, said: str
) -> None:
    """A write after a SELECT, in its WITH or INTO, or by a function it calls: the server
    parses the query alone and runs it in a read-only transaction."""
    tables = postgres_tables(warehouse)

    line = refused(server, "--db", postgres_user, "--sql", sql)

    assert line.startswith("error: --sql: ") and said in line, line
    assert postgres_tables(warehouse) == tables


def test_a_role_that_can_write_server_files_is_refused(
    server: RunningServer, warehouse: str, postgres_db: str, postgres_server: PostgresServer
) -> None:
    """A superuser's lo_export() writes a file on the server even from a read-only
    transaction: such a role does not run a query."""
    import psycopg

    with psycopg.connect(warehouse) as db:
        [(oid,)] = db.execute("SELECT lo_from_bytea(0, 'exported')").fetchall()
    target = postgres_server.root / "exported.txt"
    tables = postgres_tables(warehouse)

    line = refused(server, "--db", postgres_db, "--sql",
                   f"SELECT lo_export({oid}, '{target}')::text AS \"Sku\"")

    assert "--db: role postgres can write files on the database server" in line
    assert not target.exists()
    assert postgres_tables(warehouse) == tables


# -- Other databases, and jobs ----------------------------------------------------------------


@pytest.mark.parametrize("url", ["mysql://u@h/db", "postgresql+psycopg2://u@h/db",
                                 "sqlite+aiosqlite:///shop.db"])
def test_a_database_without_a_read_only_guard_is_refused(server: RunningServer, url: str) -> None:
    line = refused(server, "--db", url, "--sql", "SELECT 1 AS Sku")
    assert "--db: a query runs read-only on SQLite" in line and url.split(":")[0] in line


def test_a_job_push_query_that_writes_is_refused(server: RunningServer, folder: Path) -> None:
    data, jobs = folder / "data", folder / "jobs"
    data.mkdir()
    jobs.mkdir()
    sqlite_files(data)
    table_id = server.create_table({**SPEC, "name": "job readonly"})
    job = jobs / "job.toml"
    job.write_text(
        '[source]\napi_key_env = "KEY"\n[[push]]\ntable = "job readonly"\nkey = "Sku"\n'
        "db = \"sqlite:///../data/shop.db\"\nsql = \"ATTACH 'data/new.db' AS n\"\n"
    )
    before, tables = snapshot(data), sqlite_tables(data)

    done = CliRunner().invoke(main, ["sync", str(job), "--state-dir", str(folder / "state")],
                              env={"KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url})

    assert done.exit_code == ExitCode.USAGE, done.output
    assert "push[0]: sql: ATTACH refused: the query runs read-only" in done.output
    assert "Traceback" not in done.output
    assert snapshot(data) == before and sqlite_tables(data) == tables
    assert table_rows(server, table_id) == []
