"""Push from a warehouse query (`--db URL --sql QUERY`, a job's ``db`` and ``sql``) and from
Parquet folders and object storage, against the reference server; the sheet's header checked
before its rows or the table's are read."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.errors import ConfigError, ExitCode, SourceError, ValidationReport
from connector.jobs.config import load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.push import PushSpec, Query, push
from tests.fixtures.azurite import AzureContainer
from tests.fixtures.s3 import S3Bucket
from tests.fixtures.server import RunningServer
from tests.push.conftest import InProcess

SPEC = {
    "name": "Stock",
    "columns": [
        {"name": "Sku", "type": "text", "required": True},
        {"name": "Qty", "type": "number"},
        {"name": "Kind", "type": "choice", "options": ["a", "b"]},
        {"name": "Since", "type": "date"},
        {"name": "Open", "type": "checkbox"},
    ],
}
#: What every source below holds, as the table should read back.
ROWS = [
    {"Sku": "s1", "Qty": 1, "Kind": "a", "Since": "2024-03-05", "Open": True},
    {"Sku": "s2", "Qty": 2.5, "Kind": "b", "Since": "2023-12-31", "Open": False},
    {"Sku": "s3", "Qty": None, "Kind": None, "Since": None, "Open": None},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("push-queries"), {}).start()
    yield running
    running.stop()


def cli(server: RunningServer, *args: str) -> Result:
    return CliRunner().invoke(
        main, [*args, "--base-url", server.base_url], env={"CONNECTOR_API_KEY": server.api_key}
    )


def table_rows(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    """The table's cells as the server gives them, by Sku (not through the code under test)."""
    with server.client() as http:
        found = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()["rows"]
    names = [c["name"] for c in SPEC["columns"]]
    return sorted(({n: r["fields"].get(n) for n in names} for r in found), key=lambda r: r["Sku"])


def sqlite_shop(path: Path) -> str:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE stock (sku TEXT, qty REAL, kind TEXT, since TEXT, open INTEGER)")
        db.executemany("INSERT INTO stock VALUES (?, ?, ?, ?, ?)", [
            (r["Sku"], r["Qty"], r["Kind"], r["Since"],
             None if r["Open"] is None else int(r["Open"])) for r in ROWS
        ])
    return f"sqlite:///{path}"


SELECT = "SELECT sku AS Sku, qty AS Qty, kind AS Kind, since AS Since, open AS Open FROM stock"


def test_push_from_a_sqlite_query_then_again_changes_nothing(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = server.create_table({**SPEC, "name": "from sqlite"})
    url = sqlite_shop(tmp_path / "shop.db")

    done = cli(server, "push", "--db", url, "--sql", SELECT, "--table", "from sqlite",
               "--key", "Sku", "--json")

    assert done.exit_code == 0, done.output
    assert table_rows(server, table_id) == ROWS
    entry = json.loads(done.stdout)["pushes"][0]
    assert (entry["created"], entry["status"]) == (3, "ok")
    assert entry["file"] == entry["source"] == f"query on {url}"
    again = cli(server, "push", "--db", url, "--sql", SELECT, "--table", "from sqlite",
                "--key", "Sku", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["pushes"][0] | {"unchanged": 3, "requests": 0} == (
        json.loads(again.stdout)["pushes"][0]
    )


def test_push_from_postgresql(inproc: InProcess, postgres_db: str, postgres_user: str) -> None:
    import psycopg

    table_id = inproc.create_table(SPEC)
    dsn = postgres_db.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as db:
        db.execute("CREATE TABLE stock (sku text, qty numeric, kind text, since date, open boolean)")
        with db.cursor() as cur:
            cur.executemany("INSERT INTO stock VALUES (%s, %s, %s, %s, %s)", [
                (r["Sku"], r["Qty"], r["Kind"],
                 None if r["Since"] is None else dt.date.fromisoformat(r["Since"]), r["Open"])
                for r in ROWS
            ])
    query = 'SELECT sku AS "Sku", qty AS "Qty", kind AS "Kind", since AS "Since", open AS "Open" FROM stock'

    result = push(inproc.client(), PushSpec(Query(postgres_user, query), table="Stock", key="Sku"))

    assert (result.created, result.rejected) == (3, ())
    got = sorted(({n: r["fields"].get(n) for n in ROWS[0]} for r in inproc.rows(table_id)),
                 key=lambda r: r["Sku"])
    assert got == ROWS
    with pytest.raises(ConfigError, match=r"^sql: the database refused the query: .*nope"):
        push(inproc.client(), PushSpec(Query(postgres_user, "SELECT nope FROM stock"), table="Stock", key="Sku"))
    with pytest.raises(ConfigError, match=r"^sql: DELETE refused: the query runs read-only"):
        push(inproc.client(), PushSpec(Query(postgres_user, "DELETE FROM stock RETURNING sku"), table="Stock", key="Sku"))
    with psycopg.connect(dsn) as db:  # the query ran read-only: nothing deleted
        assert db.execute("SELECT count(*) FROM stock").fetchone() == (3,)


def test_push_from_duckdb_a_file_and_parquet_it_reads_itself(
    inproc: InProcess, tmp_path: Path
) -> None:
    import duckdb

    table_id = inproc.create_table(SPEC)
    database = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(database)) as db:
        db.execute("CREATE TABLE stock (sku VARCHAR, qty DECIMAL(9,2), kind VARCHAR, since DATE, open BOOLEAN)")
        db.executemany("INSERT INTO stock VALUES (?, ?, ?, ?, ?)",
                       [[r["Sku"], r["Qty"], r["Kind"], r["Since"], r["Open"]] for r in ROWS])
    result = push(inproc.client(), PushSpec(Query(f"duckdb:///{database}", SELECT), table="Stock", key="Sku"))
    assert result.created == 3
    got = sorted(({n: r["fields"].get(n) for n in ROWS[0]} for r in inproc.rows(table_id)),
                 key=lambda r: r["Sku"])
    assert got == ROWS

    folder = tmp_path / "exports"
    folder.mkdir()
    changed = [{**r, "Qty": 100 + i} for i, r in enumerate(ROWS)]
    for i, row in enumerate(changed):
        pq.write_table(pa.Table.from_pylist([row]).drop_columns(["Since"]), folder / f"part-{i}.parquet")
    query = f"SELECT Sku, Qty FROM read_parquet('{folder}/*.parquet')"
    again = push(inproc.client(), PushSpec(Query("duckdb:///:memory:", query), table="Stock", key="Sku"))
    assert (again.created, again.updated) == (0, 3)
    assert sorted((r["fields"]["Sku"], r["fields"]["Qty"]) for r in inproc.rows(table_id)) == [
        ("s1", 100), ("s2", 101), ("s3", 102)
    ]


def test_a_parquet_folder_and_objects_in_storage(inproc: InProcess, tmp_path: Path, s3: S3Bucket) -> None:
    import duckdb

    table_id = inproc.create_table(SPEC)
    data = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "Since"} for r in ROWS])
    folder = tmp_path / "sheet"
    (folder / "_temporary").mkdir(parents=True)
    pq.write_table(data.slice(0, 2), folder / "a.parquet")
    pq.write_table(data.slice(2), folder / "b.parquet")
    pq.write_table(data.slice(0, 1), folder / "_temporary" / "c.parquet")  # a writer's leftover

    assert push(inproc.client(), PushSpec(folder, table="Stock", key="Sku")).created == 3

    duckdb.sql(f"COPY (SELECT Sku, Qty + 1 AS Qty FROM read_parquet('{folder}/*.parquet')) "
               f"TO '{tmp_path / 'up.parquet'}'")
    s3.server.client().upload_file(str(tmp_path / "up.parquet"), s3.name, "sheets/up.parquet")
    assert push(inproc.client(), PushSpec(s3.url("sheets/up.parquet"), table="Stock", key="Sku")).updated == 2
    assert push(inproc.client(), PushSpec(s3.url("sheets"), table="Stock", key="Sku")).plan.is_empty
    with pytest.raises(SourceError, match="no such object or prefix"):
        push(inproc.client(), PushSpec(s3.url("sheets/gone.parquet"), table="Stock", key="Sku"))
    query = f"SELECT Sku, Qty * 2 AS Qty FROM read_parquet('{s3.url('sheets/up.parquet')}')"
    assert push(inproc.client(), PushSpec(Query("duckdb:///:memory:", query), table="Stock", key="Sku")).updated == 2
    assert sorted((r["fields"]["Sku"], r["fields"].get("Qty")) for r in inproc.rows(table_id)) == [
        ("s1", 4), ("s2", 7), ("s3", None)
    ]


def test_a_sheet_in_azure_storage_and_one_that_is_not_there(inproc: InProcess, azure: AzureContainer) -> None:
    """An object in Azure Blob Storage pushed like a local CSV; a key that holds nothing is
    said as such (the store's first answer, `within` its deadline), nothing written."""
    table_id = inproc.create_table(SPEC)
    sheet = "Sku,Qty,Kind,Since,Open\ns1,1,a,2024-03-05,true\ns2,2.5,b,2023-12-31,false\ns3,,,,\n"
    with azure.client() as container:
        container.upload_blob("sheets/stock.csv", sheet.encode())

    assert push(inproc.client(), PushSpec(azure.url("sheets/stock.csv"), table="Stock", key="Sku")).created == 3
    held = sorted((r["fields"] for r in inproc.rows(table_id)), key=lambda f: f["Sku"])
    assert [{k: f.get(k) for k in ROWS[0]} for f in held] == ROWS
    with pytest.raises(SourceError, match="no such object or prefix"):
        push(inproc.client(), PushSpec(azure.url("sheets/gone.csv"), table="Stock", key="Sku"))
    assert len(inproc.rows(table_id)) == 3


def test_a_prefix_of_parquet_objects_in_azure_storage(
    inproc: InProcess, azure: AzureContainer, tmp_path: Path
) -> None:
    """The prefix listed `within` its deadline (adlfs's own listing waits as long as the Azure
    SDK retries); a writer's leftovers under ``_`` left out, as in a folder."""
    table_id = inproc.create_table(SPEC)
    inproc.insert(table_id, [{"Sku": "s1", "Qty": 1}, {"Sku": "s2", "Qty": 2}])
    parts = {"parts/a.parquet": [("s1", 10.0)], "parts/b.parquet": [("s2", 20.0), ("s4", 40.0)],
             "parts/_temporary/c.parquet": [("s9", 90.0)]}
    with azure.client() as container:
        for name, rows in parts.items():
            file = tmp_path / name.replace("/", "_")
            pq.write_table(pa.table({"Sku": [r[0] for r in rows], "Qty": [r[1] for r in rows]}), file)
            container.upload_blob(f"sheets/{name}", file.read_bytes())

    result = push(inproc.client(), PushSpec(azure.url("sheets/parts"), table="Stock", key="Sku"))

    assert (result.created, result.updated) == (1, 2)
    held = {r["fields"]["Sku"]: r["fields"].get("Qty") for r in inproc.rows(table_id)}
    assert held == {"s1": 10, "s2": 20, "s4": 40}


def test_bad_urls_and_queries_are_usage_errors_before_any_write(
    server: RunningServer, tmp_path: Path
) -> None:
    table_id = server.create_table({**SPEC, "name": "refusing"})
    url = sqlite_shop(tmp_path / "shop.db")

    def refused(*args: str) -> str:
        done = cli(server, "push", *args, "--table", "refusing", "--key", "Sku")
        assert done.exit_code == ExitCode.USAGE, done.output
        assert "Traceback" not in done.output
        return done.output

    assert "--db: not a database URL" in refused("--db", "nonsense://", "--sql", "SELECT 1")
    assert "--db: no SQLite database file" in refused("--db", "sqlite:///nope.db", "--sql", "SELECT 1")
    assert "--sql: the database refused the query: no such table: stok" in refused(
        "--db", url, "--sql", "SELECT * FROM stok")
    assert "--sql: DELETE refused: the query runs read-only" in refused(
        "--db", url, "--sql", "DELETE FROM stock")
    assert "missing --sql" in refused("--db", url)
    assert "not both" in refused(str(tmp_path / "x.csv"), "--db", url, "--sql", SELECT)
    secret = "postgresql://user:s3cret-pw@127.0.0.1:1/db"
    out = refused("--db", secret, "--sql", "SELECT 1")
    assert "--db: cannot connect" in out and "s3cret-pw" not in out
    assert table_rows(server, table_id) == []
    with sqlite3.connect(tmp_path / "shop.db") as db:
        assert db.execute("SELECT count(*) FROM stock").fetchone() == (3,)


def test_the_header_is_checked_before_the_rows_or_the_table_are_read(
    inproc: InProcess, tmp_path: Path
) -> None:
    """A query whose rows fail when read (DuckDB's error()) still reports a wrong key or a
    missing column first, and the table is not read at all (no GET of its rows)."""
    inproc.create_table(SPEC)
    inproc.insert(inproc.create_table({**SPEC, "name": "Other"}), [{"Sku": "x"}])
    failing = "SELECT error('rows were read ' || i) AS Sku, i AS Qty FROM range(3) t(i)"
    client = inproc.client()

    with pytest.raises(ConfigError, match=r"^key: table 'Stock' has no column 'Code'"):
        push(client, PushSpec(Query("duckdb:///:memory:", failing), table="Stock", key="Code"))
    with pytest.raises(ValidationReport, match="row 1, column 'Colour': not a column of table"):
        push(client, PushSpec(Query("duckdb:///:memory:", failing.replace(" FROM", ", 'red' AS Colour FROM")), table="Stock", key="Sku"))
    with pytest.raises(ValidationReport, match="row 1, column 'Sku': key column missing"):
        push(client, PushSpec(Query("duckdb:///:memory:", failing.replace("AS Sku", "AS Code")), table="Stock", key="Sku"))
    parquet = tmp_path / "sheet.parquet"
    pq.write_table(pa.table({"Sku": ["a"], "Size": [1]}), parquet)
    with pytest.raises(ValidationReport, match="row 1, column 'Size': not a column of table"):
        push(client, PushSpec(parquet, table="Stock", key="Sku"))
    assert not any(k.startswith("GET rows") for k in inproc.transport.calls), inproc.transport.calls
    with pytest.raises(ConfigError, match=r"the query failed: .*rows were read"):
        push(client, PushSpec(Query("duckdb:///:memory:", failing), table="Stock", key="Sku"))


def _unreadable_past_the_header(path: Path) -> Path:
    """`path` written so its header (a Parquet file's schema, a CSV's first record) reads
    and its rows do not: a push that read the rows before checking the header would fail
    with the rows' error, not the header's."""
    if path.suffix == ".csv":
        path.write_text("Sku,Qty\ns1,1\ns2,2,extra,cells\n")
        return path
    pq.write_table(pa.table({"Sku": [f"s{i}" for i in range(5000)], "Qty": range(5000)}), path)
    raw = bytearray(path.read_bytes())
    raw[4:2000] = b"\xff" * 1996  # the first pages' headers: the footer's schema is intact
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_wrong_key_or_column_is_reported_before_a_sheet_is_read(
    inproc: InProcess, server: RunningServer, tmp_path: Path, suffix: str
) -> None:
    """A sheet whose rows cannot be read reports a wrong --key, a key column it lacks and a
    column the table lacks from its header alone; the table's rows are not read either."""
    sheet = _unreadable_past_the_header(tmp_path / f"sheet{suffix}")
    inproc.create_table(SPEC)
    client = inproc.client()
    with pytest.raises(SourceError, match=r"not a readable Parquet file|malformed CSV"):
        push(client, PushSpec(sheet, table="Stock", key="Sku"))  # read in full, the rows fail

    with pytest.raises(ConfigError, match=r"^key: table 'Stock' has no column 'Code'"):
        push(client, PushSpec(sheet, table="Stock", key="Code"))
    with pytest.raises(ValidationReport, match="row 1, column 'Kind': key column missing"):
        push(client, PushSpec(sheet, table="Stock", key="Kind"))
    inproc.create_table({**SPEC, "name": "Narrow", "columns": SPEC["columns"][:1]})
    with pytest.raises(ValidationReport, match="row 1, column 'Qty': not a column of table 'Narrow'"):
        push(client, PushSpec(sheet, table="Narrow", key="Sku"))
    assert not any(k.startswith("GET rows") for k in inproc.transport.calls), inproc.transport.calls
    assert inproc.transport.writes == 0

    server.create_table({**SPEC, "name": f"header first {suffix}"})
    done = cli(server, "push", str(sheet), "--table", f"header first {suffix}", "--key", "Code")
    assert done.exit_code == ExitCode.USAGE, done.output
    assert "--key: table 'header first" in done.output and "no column 'Code'" in done.output
    assert "Traceback" not in done.output


def test_a_query_reads_only_the_columns_the_push_uses(inproc: InProcess) -> None:
    """`SELECT *` over an export returns its row ids and stamps, which a push leaves out:
    DuckDB is asked for the table's columns only, so those are never computed (here, they
    would fail) nor held."""
    table_id = inproc.create_table(SPEC)
    sql = ("SELECT 's' || i AS Sku, i * 1.5 AS Qty, error('computed ' || i) AS _created_at, "
           "error('computed') AS _updated_at FROM range(3) t(i)")

    result = push(inproc.client(), PushSpec(Query("duckdb:///:memory:", sql), table="Stock", key="Sku"))

    assert (result.created, result.plan.ignored) == (3, ("_created_at", "_updated_at"))
    assert sorted((r["fields"]["Sku"], r["fields"]["Qty"]) for r in inproc.rows(table_id)) == [
        ("s0", 0), ("s1", 1.5), ("s2", 3)
    ]


def test_a_job_pushes_a_query(inproc: InProcess, tmp_path: Path, server: RunningServer) -> None:
    table_id = server.create_table({**SPEC, "name": "job query"})
    sqlite_shop(tmp_path / "shop.db")
    job = tmp_path / "job.toml"
    job.write_text(
        '[source]\napi_key_env = "KEY"\n[[push]]\ntable = "job query"\nkey = "Sku"\n'
        f'db = "sqlite:///shop.db"\nsql = "{SELECT}"\n'
    )
    spec = load_job(job).pushes[0]
    assert isinstance(spec.source, Query)
    assert spec.source.db == f"sqlite:///{tmp_path / 'shop.db'}"  # beside the job

    summary = run_job(load_job(job), RunOptions(environ={"KEY": server.api_key,
                                              "CONNECTOR_BASE_URL": server.base_url}))

    assert summary.status == "ok", summary
    assert summary.pushes[0].created == 3 and summary.pushes[0].file == f"query on {spec.source.db}"
    assert table_rows(server, table_id) == ROWS


@pytest.mark.parametrize(("settings", "message"), [
    ('db = "postgresql://u:pw@h/db"\nsql = "SELECT 1"\n', "push[0].db: holds a password"),
    ('db = "nonsense://"\nsql = "SELECT 1"\n', "push[0].db: not a database URL"),
    ('db = "sqlite:///x.db"\n', "push[0].sql: missing"),
    ('file = "x.csv"\ndb = "sqlite:///x.db"\nsql = "SELECT 1"\n', "push[0]: set file"),
])
def test_job_query_settings_name_the_key(tmp_path: Path, settings: str, message: str) -> None:
    job = tmp_path / "job.toml"
    job.write_text('[source]\n[[push]]\ntable = "T"\nkey = "Sku"\n' + settings)
    with pytest.raises(ConfigError) as caught:
        load_job(job)
    assert message in str(caught.value) and "pw@" not in str(caught.value)


def test_a_job_query_the_database_refuses_stops_the_run_naming_the_key(
    tmp_path: Path, server: RunningServer
) -> None:
    sqlite_shop(tmp_path / "shop.db")
    job = tmp_path / "job.toml"
    job.write_text('[source]\napi_key_env = "KEY"\n[[push]]\ntable = "T"\nkey = "Sku"\n'
                   'db = "sqlite:///shop.db"\nsql = "SELECT * FROM nope"\n')
    with pytest.raises(ConfigError, match=r"job\.toml: push\[0\]: sql: the database refused"):
        run_job(load_job(job), RunOptions(environ={"KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}))
