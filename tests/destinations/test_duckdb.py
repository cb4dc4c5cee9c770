"""DuckDB destinations: the destination (types, modes, one transaction a write, a locked
file) and `load --to duckdb:///` against the reference server over HTTP, read back with
duckdb itself; a killed or stopped load keeps the old table. Modes, marks, schema changes and
failed streams for every kind: `test_conformance`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.destinations import Committed, open_destination
from connector.destinations.evolve import AddColumn
from connector.errors import ConfigError, DestinationError
from connector.modes import WriteMode
from connector.process import stop_signals
from connector.schema import Table, arrow_schema
from connector.server.demo import SPECS
from tests.destinations.helpers import apply, config
from tests.destinations.samples import (
    ROWS,
    SCHEMA,
    TABLE,
    batches,
    kill_when,
    numbered,
    wait_while_running,
)
from tests.destinations.test_interrupt import (
    FIRST,
    MORE,
    SIGNALS,
    check_stopped,
    finish,
    seeded,
    start,
)
from tests.fixtures.server import ROOT, RunningServer, ServerFactory

#: The API's column types as DuckDB reports the columns we create (choices are text).
DUCK_TYPES = {"text": "VARCHAR", "choice": "VARCHAR", "number": "DOUBLE", "checkbox": "BOOLEAN",
              "date": "DATE"}
STAMP = "TIMESTAMP WITH TIME ZONE"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse.duckdb")


def write(db: str, rows: list[dict[str, Any]] | Iterator[pa.RecordBatch], mode: WriteMode = "replace",
          **options: Any) -> Committed:
    stream = batches(rows, size=3) if isinstance(rows, list) else rows
    return apply(config("url", f"duckdb:///{db}", mode), stream, **options)


def read(db: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of `sql`, through a connection of duckdb's own (no code under test)."""
    with contextlib.closing(duckdb.connect(db, read_only=True)) as con:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql).fetchall()


def types(db: str, table: str) -> dict[str, str]:
    return {r[0]: r[1] for r in read(db, f'DESCRIBE "{table}"')}


def tables(db: str) -> list[str]:
    """The tables of the database but the record of names (`_connector_tables`)."""
    return sorted(r[0] for r in read(db, "SELECT table_name FROM duckdb_tables()")
                  if r[0] != "_connector_tables")


def as_tuples(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in SCHEMA.names) for r in sorted(rows, key=lambda r: r["_id"])]


ALL = "SELECT " + ", ".join(f'"{c}"' for c in SCHEMA.names) + ' FROM orders ORDER BY "_id"'


def test_every_type_loads_with_its_duckdb_type_and_nulls(db: str) -> None:
    assert write(db, ROWS) == Committed(written=len(ROWS))
    assert types(db, "orders") == {
        "_id": "VARCHAR", "_created_at": STAMP, "_updated_at": STAMP, "Name": "VARCHAR",
        "Status": "VARCHAR", "Amount": "DOUBLE", "Paid": "BOOLEAN", "Due": "DATE", "id": "VARCHAR",
        "created_at": "VARCHAR",
    }
    assert read(db, ALL) == as_tuples(ROWS)


def test_replace_swaps_the_whole_table_and_leaves_no_staging_table(db: str) -> None:
    write(db, ROWS)
    assert write(db, numbered(250), mode="replace") == Committed(written=250)
    assert read(db, "SELECT count(*), min(\"Name\") FROM orders") == [(250, "row 0")]
    assert tables(db) == ["orders"]


def test_replace_with_no_rows_leaves_an_empty_typed_table(db: str) -> None:
    write(db, ROWS)
    assert write(db, []) == Committed(written=0)
    assert read(db, "SELECT count(*) FROM orders") == [(0,)]
    assert types(db, "orders")["Due"] == "DATE"


def test_append_adds_only_new_ids_and_leaves_held_rows_unchanged(db: str) -> None:
    write(db, numbered(5))
    changed = numbered(8, name="changed")
    assert write(db, changed, mode="append") == Committed(written=3)
    names = read(db, 'SELECT "_id", "Name" FROM orders ORDER BY "_id"')
    assert names == sorted([(f"row_{i}", f"row {i}") for i in range(5)]
                           + [(f"row_{i}", f"changed {i}") for i in range(5, 8)])


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_append_and_merge_add_columns_added_upstream(db: str, mode: WriteMode) -> None:
    narrow = Table(TABLE.id, TABLE.name, TABLE.columns[:2])
    schema = arrow_schema(narrow)
    rows = [{k: r[k] for k in schema.names} for r in ROWS[:2]]
    write(db, iter([pa.RecordBatch.from_pylist(rows, schema=schema)]), table=narrow)
    assert list(types(db, "orders")) == ["_id", "_created_at", "_updated_at", "Name", "Status"]
    added = tuple(AddColumn(c.name, c.type) for c in TABLE.columns[2:])
    assert write(db, ROWS[2:], mode=mode, evolve=added) == Committed(written=2)
    assert list(types(db, "orders")) == SCHEMA.names
    assert read(db, 'SELECT "_id", "Amount" FROM orders ORDER BY "_id"') == [
        ("row_1", None), ("row_2", None), ("row_3", None), ("row_4", 1e300)]


def test_merge_upserts_by_row_id_and_deletes_in_the_same_transaction(db: str) -> None:
    write(db, numbered(6))
    gone = ["row_1", "row_4", "row_unknown"]
    done = write(db, numbered(2, start=3, name="new") + numbered(1, start=9), mode="merge",
                 deleted=gone)
    assert done == Committed(written=3, deleted=2)
    assert read(db, 'SELECT "_id", "Name" FROM orders ORDER BY "_id"') == [
        ("row_0", "row 0"), ("row_2", "row 2"), ("row_3", "new 3"), ("row_5", "row 5"),
        ("row_9", "row 9")]


def test_merge_marks_deleted_rows_and_a_row_that_comes_back_is_unmarked(db: str) -> None:
    write(db, numbered(4), mode="merge", mark=True)
    before = datetime.now(UTC)
    write(db, numbered(1, start=0, name="new"), mode="merge", deleted=["row_2", "row_3"], mark=True)
    stamps = dict(read(db, 'SELECT "_id", "_deleted_at" FROM orders'))
    assert stamps["row_0"] is None and stamps["row_1"] is None
    assert stamps["row_2"] >= before and stamps["row_3"] == stamps["row_2"]
    assert types(db, "orders")["_deleted_at"] == STAMP
    first = stamps["row_2"]
    # marked again: the first stamp stays; row_3 comes back: its stamp goes
    write(db, numbered(1, start=3, name="back"), mode="merge", deleted=["row_2"], mark=True)
    stamps = dict(read(db, 'SELECT "_id", "_deleted_at" FROM orders'))
    assert (stamps["row_2"], stamps["row_3"]) == (first, None)
    assert read(db, "SELECT \"Name\" FROM orders WHERE \"_id\" = 'row_3'") == [("back 3",)]


def test_a_failed_write_leaves_the_previous_table_in_every_mode(db: str) -> None:
    """Past DuckDB's row group (122,880 rows, written into the file before the commit): rows
    of the open transaction were inserted."""
    write(db, ROWS)

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(numbered(130_000, name="new"), size=10_000)
        raise RuntimeError("the read broke")

    for mode in ("replace", "append", "merge"):
        with pytest.raises(RuntimeError, match="the read broke"):
            write(db, failing(), mode=mode, deleted=["row_1"] if mode == "merge" else ())  # type: ignore[arg-type]
        assert read(db, ALL) == as_tuples(ROWS), mode
        assert tables(db) == ["orders"]


def test_hostile_table_and_column_names_load_safely(db: str) -> None:
    hostile = Table("tbl_x", 'we"ird; DROP TABLE orders; --', TABLE.columns)
    write(db, ROWS)
    write(db, batches(ROWS), table=hostile)
    write(db, batches(numbered(1, start=7)), table=hostile, mode="merge", deleted=["row_1"])
    assert tables(db) == sorted(["orders", hostile.name])
    assert read(db, 'SELECT count(*) FROM "we""ird; DROP TABLE orders; --"') == [(len(ROWS),)]
    assert read(db, "SELECT count(*) FROM orders") == [(len(ROWS),)]


@pytest.mark.slow
def test_a_database_another_process_holds_is_a_destination_error(db: str) -> None:
    write(db, ROWS)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); time.sleep(60)", db],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        destination = open_destination(config("url", f"duckdb:///{db}"))
        try:
            with pytest.raises(DestinationError,
                               match=r"^opening duckdb:.*warehouse\.duckdb failed: .*lock"):
                destination.check()
        finally:
            destination.close()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_long_write_prints_nothing_on_stdout(db: str) -> None:
    """DuckDB's progress bar (drawn on stdout, a pipe too, for a query past a threshold, here
    lowered to none) would break `load --json`: a connection we open draws none."""
    script = (
        "import sys; from connector.destinations.duckdb import connect; "
        "con = connect(sys.argv[1]); con.execute('SET progress_bar_time = 0'); "
        "con.execute('CREATE TABLE t AS SELECT i, md5(i::VARCHAR) s FROM range(2000000) r(i)'); "
        "print(con.execute('SELECT count(*) FROM t').fetchone()[0])"
    )
    done = subprocess.run([sys.executable, "-c", script, db], capture_output=True, text=True, check=True)
    assert done.stdout == "2000000\n"


@pytest.mark.parametrize("url", ["duckdb://", "duckdb:///", "duckdb:///:memory:", "duckdb:///x.db?a=1",
                                 "duckdb://host/x.db", "duckdb:///dir/"])
def test_a_url_without_a_database_file_is_a_config_error(url: str) -> None:
    for kind in ("url", "duckdb"):
        with pytest.raises(ConfigError, match=r"^--to: .*duckdb:///analytics\.duckdb"):
            config(kind, url, where="--to")


def test_a_url_of_another_kind_is_not_a_duckdb_url() -> None:
    with pytest.raises(ConfigError, match=r"^--to: 'sqlite:///x.db' is not a DuckDB URL"):
        config("duckdb", "sqlite:///x.db", where="--to")


# --- connector load --to duckdb:/// against the reference server ---------------------------------


def cli(server: RunningServer, *args: str) -> Result:
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, list(args), env=env)


def api_rows(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with httpx.Client(base_url=server.base_url,
                      headers={"Authorization": f"Bearer {server.api_key}"}) as http:
        while True:
            page = http.get(f"/tables/{table_id}/rows", params={"limit": 1000, "offset": len(rows)})
            page.raise_for_status()
            got = page.json()["rows"]
            rows += got
            if len(got) < 1000:
                return rows


def expected_cell(kind: str, value: Any) -> Any:
    """A cell as the API sends it, in the Python type DuckDB hands back for its column."""
    if value is None:
        return None
    if kind == "date":
        return date.fromisoformat(value)
    if kind == "number":
        return float(value)
    return value


def test_load_every_demo_table_into_duckdb_keeps_every_type_and_value(
    server_factory: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(demo=True)
    monkeypatch.chdir(tmp_path)
    result = cli(server, "load", "--to", "duckdb:///out/demo.duckdb")  # relative to the cwd
    assert result.exit_code == 0, result.output
    db = str(tmp_path / "out" / "demo.duckdb")
    assert tables(db) == sorted(s["name"] for s in SPECS)
    with httpx.Client(base_url=server.base_url,
                      headers={"Authorization": f"Bearer {server.api_key}"}) as http:
        listed = {t["name"]: t["id"] for t in http.get("/tables").json()["tables"]}
    for spec in SPECS:
        columns = [(c["name"], c["type"]) for c in spec["columns"]]
        assert types(db, spec["name"]) == {
            "_id": "VARCHAR", "_created_at": STAMP, "_updated_at": STAMP,
            **{name: DUCK_TYPES[kind] for name, kind in columns},
        }
        want = sorted(
            (r["id"], datetime.fromisoformat(r["created_at"]), datetime.fromisoformat(r["updated_at"]),
             *(expected_cell(kind, r["fields"].get(name)) for name, kind in columns))
            for r in api_rows(server, listed[spec["name"]])
        )
        names = ", ".join(f'"{c}"' for c in ["_id", "_created_at", "_updated_at", *dict(columns)])
        got = read(db, f'SELECT {names} FROM "{spec["name"]}" ORDER BY "_id"')
        assert len(got) == len(want) > 0, spec["name"]
        assert got == want, spec["name"]


def test_load_modes_from_the_cli(server: RunningServer, tmp_path: Path) -> None:
    table = server.create_table({"name": "Notes", "columns": [{"name": "Text", "type": "text"}]})
    server.insert_rows(table, [{"Text": "a"}, {"Text": "b"}])
    url = f"duckdb:///{tmp_path / 'w.duckdb'}"
    assert cli(server, "load", "--to", url).exit_code == 0
    server.insert_rows(table, [{"Text": "c"}])
    result = cli(server, "load", "--to", url, "--mode", "append")
    assert result.exit_code == 0, result.output
    result = cli(server, "load", "--to", url, "--mode", "merge")
    assert result.exit_code == 0, result.output
    assert read(str(tmp_path / "w.duckdb"), 'SELECT "Text" FROM "Notes" ORDER BY 1') == [
        ("a",), ("b",), ("c",)]


def test_a_bad_duckdb_url_is_a_usage_error_naming_to(server: RunningServer, tmp_path: Path) -> None:
    result = cli(server, "load", "--to", "duckdb:///:memory:")
    assert result.exit_code == 2
    assert "--to" in result.output and "names no database file" in result.output


def test_without_the_extra_load_is_one_line_naming_it(server: RunningServer, tmp_path: Path) -> None:
    """A real process in which `import duckdb` fails as it does when the extra is missing."""
    code = ("import sys; sys.modules['duckdb'] = None; sys.argv[0] = 'connector'; "
            "from connector.cli import main; main()")
    env = {**os.environ, "CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    db = tmp_path / "w.duckdb"
    done = subprocess.run([sys.executable, "-c", code, "load", "--to", f"duckdb:///{db}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "[duckdb]" in lines[0] and "duckdb:///" in lines[0], done.stderr
    assert not db.exists()


#: Rows the killed load reads: more than DuckDB's row group (122,880), which it writes into the
#: file before the commit, so the file growing proves rows of the open transaction went in.
KILL_ROWS = 160_000


def test_a_load_killed_mid_write_leaves_the_previous_table(
    server_factory: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(latency_ms=30)
    table = server.create_table({"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]})
    server.insert_rows(table, [{"Sku": f"old {i}"} for i in range(300)])
    db = tmp_path / "w.duckdb"
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key,
           "CONNECTOR_MAX_CONCURRENCY": "4"}
    argv = [sys.executable, "-m", "connector", "load", "--to", f"duckdb:///{db}", "--page-size", "1000"]
    subprocess.run(argv, env=env, cwd=ROOT, check=True, capture_output=True, timeout=60)
    previous = read(str(db), 'SELECT * FROM "Orders" ORDER BY "_id"')
    size = db.stat().st_size
    server.insert_rows(table, [{"Sku": f"new {i}"} for i in range(KILL_ROWS)])

    for name, value in env.items():  # kill_when starts it with this process's environment
        monkeypatch.setenv(name, value)
    kill_when(argv, lambda: db.stat().st_size > size + 1_000_000, timeout=120)

    assert read(str(db), 'SELECT * FROM "Orders" ORDER BY "_id"') == previous
    assert tables(str(db)) == ["Orders"]
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert read(str(db), 'SELECT count(*) FROM "Orders"') == [(300 + KILL_ROWS,)]


@pytest.mark.parametrize("name", SIGNALS)
def test_a_signal_mid_load_keeps_the_previous_table_and_a_rerun_finishes(
    server_factory: ServerFactory, tmp_path: Path, name: str
) -> None:
    signum, expected, by = SIGNALS[name]
    server, table = seeded(server_factory)
    db = tmp_path / "w.duckdb"
    url = f"duckdb:///{db}"
    code, _, err = finish(start(server, "load", "--to", url))
    assert code == 0, err
    previous = read(str(db), 'SELECT * FROM "Orders" ORDER BY "_id"')
    server.insert_rows(table, [{"Sku": f"t{i}"} for i in range(MORE)])

    run = start(server, "load", "--to", url, "--json")
    # the load has the file: rows stream into it as pages come
    wait_while_running(run, lambda: holds(run.pid, db))
    time.sleep(0.3)
    assert run.poll() is None
    run.send_signal(signum)
    check_stopped(*finish(run), expected, by, True)

    assert read(str(db), 'SELECT * FROM "Orders" ORDER BY "_id"') == previous
    assert tables(str(db)) == ["Orders"]
    code, _, err = finish(start(server, "load", "--to", url))
    assert code == 0, err
    assert read(str(db), 'SELECT count(*) FROM "Orders"') == [(FIRST + MORE,)]


def holds(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (read from /proc: probing with a connection of
    our own would take DuckDB's lock and make the load fail)."""
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    return False


def test_a_signal_during_a_query_on_the_main_thread_is_the_stop_not_a_runtime_error(tmp_path: Path) -> None:
    """A run reads a DuckDB file's table names on the main thread while it chooses its tables.
    DuckDB runs Python's signal handler inside a query and raises ``RuntimeError: Query
    interrupted`` (a load stopped then printed a traceback and exited 1): the stop is raised."""
    destination = open_destination(config("url", f"duckdb:///{tmp_path / 'w.duckdb'}"))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        with stop_signals(), pytest.raises(KeyboardInterrupt):
            timer.start()
            with destination._failures("reading the table names of", None):  # as held() reads
                destination._cursor().execute("SELECT sum(i) FROM range(100000000000) t(i)").fetchall()
    finally:
        timer.cancel()
        destination.close()
