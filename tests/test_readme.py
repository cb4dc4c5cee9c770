"""The docs are true: every command in the README and on the site's pages runs as written,
here or in the test it names.

`test_the_docs_run_as_written` reads the ``sh`` blocks of the README and then of every page
of the site in the order of mkdocs.yml's ``nav`` (a page's blocks in order), and runs each
command as a reader following along would, in one shell session (``export`` carries over):
in a copy of the checkout whose ``.venv`` is the suite's environment, on ``PATH`` as
``source .venv/bin/activate`` puts it, with ``HOME`` in the copy. The server is the one the
docs start (``connector serve --demo``, in the background as "in one terminal" says; a
later page's ``serve`` stops the one before), and a command ending in ``&`` runs in the
background (the object storage emulators), each on a free port where the docs say 8000,
4443 or 10000; PostgreSQL and S3 are the suite's own (``localhost`` through ``PGPORT``, a
bucket named as the docs name it), as a reader's warehouse and bucket would be. A ``python``
block runs too where the reader runs it (`RUNS_HERE`). A ``toml`` block opening with
``# <path>`` is the file shipped there. A command followed by ``# → TEXT`` must print TEXT.
After the commands that write somewhere, the outcome is compared with the server's rows,
read over HTTP, value by value (`CHECKS`).

Commands that cannot run here (the install itself, files the reader brings, a real
workspace, a Singer target, Spark) are in `ELSEWHERE` with the test that runs them; a
command in neither place fails `test_every_command_runs_here_or_names_the_test_that_does`.
"""

from __future__ import annotations

import ast
import datetime as dt
import io
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
import yaml

from connector.destinations.registry import job_keys
from connector.jobs.config import load_job
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.s3 import S3Server

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _nav(items: list[Any]) -> Iterator[str]:
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        yield from _nav(value) if isinstance(value, list) else [value]


#: What a reader reads, in order: the README, then the site's pages as its nav lists them.
PAGES: list[str] = [
    "README.md",
    *(f"docs/{page}" for page in _nav(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])),
]

_SINGER = "tests/test_singer.py::test_the_first_run_needs_no_state_and_the_next_starts_from_the_last"

#: Commands run by another test (``tests/<file>::<test or fixture>``) or by CI
#: (``.ci/run``), keyed by the command's words (`Command.key`); each with why not here.
ELSEWHERE: dict[str, str] = {
    # installing is what CI does before anything runs; the suite runs inside that install
    "make test": ".ci/run",
    "make install": ".ci/run",
    "pip install .": "tests/test_packaging.py::installed",
    "pip wheel --no-deps -w dist . && pip install dist/table_data_connector-*.whl":
        "tests/test_packaging.py::installed",
    "pip install table-data-connector[s3,duckdb]":
        "tests/test_packaging.py::test_each_extra_installs_what_connector_extras_names",
    "pip install table-data-connector[spark]":
        "tests/test_packaging.py::test_each_extra_installs_what_connector_extras_names",
    # a workbook the reader brings
    "connector push prices.xlsx --sheet 2024 --table Products --key Name --plan-out plan.json":
        "tests/push/test_cli.py::test_a_saved_plan_applies_once_and_refuses_when_rows_changed",
    "connector apply plan.json":
        "tests/push/test_cli.py::test_a_saved_plan_applies_once_and_refuses_when_rows_changed",
    # a warehouse the reader has: the same pushes from SQLite, PostgreSQL and DuckDB
    "connector push --db sqlite:///shop.db --sql SELECT sku AS Sku, qty AS Qty FROM stock "
    "--table Stock --key Sku --dry-run":
        "tests/push/test_queries.py::test_push_from_a_sqlite_query_then_again_changes_nothing",
    "connector push --db postgresql://analyst@warehouse/prod --sql SELECT ... FROM churn_scores "
    "--table Accounts --key Email": "tests/push/test_queries.py::test_push_from_postgresql",
    "connector push --db duckdb:///:memory: --sql SELECT * FROM "
    "read_parquet('s3://lake/scores/*.parquet') --table Scores --key Id":
        "tests/push/test_queries.py::test_push_from_duckdb_a_file_and_parquet_it_reads_itself",
    # a real workspace: the quickstart runs the same lines with the reference server's values
    "export CONNECTOR_BASE_URL=https://<your-workspace-host>/v1":
        "tests/test_readme.py::test_the_docs_run_as_written",
    "export CONNECTOR_API_KEY=…": "tests/test_readme.py::test_the_docs_run_as_written",
    "connector tables": "tests/test_readme.py::test_the_docs_run_as_written",
    # a tap for a remote workspace, and a Singer target the suite does not install: the test
    # runs these lines with the target's part (its last state line) done by the test
    "CONNECTOR_API_KEY=… tap-tabledata --config tap.json --discover > catalog.json":
        "tests/test_singer.py::test_discovery_types_each_column_from_the_schema",
    "CONNECTOR_API_KEY=… tap-tabledata --config tap.json | target-jsonl > state.jsonl": _SINGER,
    "tail -n 1 state.jsonl > state.json": _SINGER,
    "CONNECTOR_API_KEY=… tap-tabledata --config tap.json --state state.json | target-jsonl "
    ">> state.jsonl": _SINGER,
    # python blocks that need Spark, Airflow's host or Dagster's: run by their pages' tests
    "python: from datetime import datetime":
        "tests/test_scheduling.py::test_the_airflow_task_runs_its_command_as_written",
    'python: """Dagster definitions for a connector job: one asset per table, its pushes upstream,':
        "tests/test_scheduling.py::test_the_dagster_example_is_the_file_and_materialises_the_job",
    'python: """One process per table, at most 4 tables at once with this key.':
        "tests/test_dagster.py::test_the_multiprocess_executor_syncs_tables_in_parallel_processes",
    "python: from connector.spark import TableDataSource":
        "tests/test_spark.py::test_max_rps_paces_every_partition_to_its_share",
    "python: from pyspark.sql import SparkSession":
        "tests/test_spark.py::test_key_ranges_are_read_in_parallel_each_row_once",
}

#: The python blocks a reader runs as they read (page, heading): the rest are in `ELSEWHERE`.
RUNS_HERE = {
    ("README.md", "Use it"),
    ("docs/quickstarts.md", "Notebook"),
    ("docs/quickstarts.md", "Iceberg tables"),
    ("docs/scheduling.md", "dlt pipelines"),
}

#: Ports the docs name; the walkthrough uses free ones there.
PORTS = ("8000", "4443", "10000")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language, text (dedented), first line and heading."""

    page: str
    lang: str
    text: str
    line: int
    section: str


def blocks() -> Iterator[Block]:
    """Every fenced block of every page, pages in `PAGES` order."""
    fence = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
    for page in PAGES:
        text = (ROOT / page).read_text()
        for m in fence.finditer(text):
            line = text.count("\n", 0, m.start(3)) + 1
            indent = len(m.group(1))
            body = "".join(t[indent:] for t in m.group(3).splitlines(keepends=True))
            headings = re.findall(r"^#+ (.+)$", text[: m.start()], flags=re.MULTILINE)
            yield Block(page, m.group(2), body, line, headings[-1] if headings else "")


@dataclass
class Command:
    """One command of a page's block, as written (it may span lines)."""

    text: str
    line: int
    lang: str
    page: str
    section: str
    #: ``# → TEXT`` lines after it: what it must print.
    expect: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """Its words, without comments or quotes: the same however it is spaced."""
        if self.lang == "python":
            return "python: " + self.text.strip().splitlines()[0]
        return " ".join(shlex.split(self.text.replace("\\\n", " "), comments=True))

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line}"


def commands() -> list[Command]:
    """Every command of the pages' ``sh`` blocks and every ``python`` block, in order."""
    found: list[Command] = []
    for block in blocks():
        if block.lang == "python":
            found.append(Command(block.text, block.line, "python", block.page, block.section))
            continue
        if block.lang != "sh":
            continue
        pending: list[str] = []
        for number, line in enumerate(block.text.splitlines(), block.line):
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                if stripped.startswith("# → ") and found:
                    found[-1].expect.append(stripped.removeprefix("# → "))
                continue
            pending.append(line)
            joined = "\n".join(pending)
            try:
                shlex.split(joined, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            if joined.endswith("\\"):
                continue
            found.append(Command(joined, number - len(pending) + 1, "sh", block.page, block.section))
            pending = []
        assert not pending, f"{block.page} line {block.line}: a command with an unclosed quote"
    return found


def test_the_nav_lists_every_page() -> None:
    """Every page is in the walkthrough's order (and the site's nav)."""
    assert sorted(PAGES[1:]) == sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


def test_every_command_runs_here_or_names_the_test_that_does() -> None:
    keys = {c.key for c in commands()}
    assert set(ELSEWHERE) <= keys, f"not in the docs any more: {set(ELSEWHERE) - keys}"
    for key, where in ELSEWHERE.items():
        if where == ".ci/run":  # which runs `make test`, which installs first
            assert "\nmake test\n" in (ROOT / ".ci/run").read_text(), key
            makefile = (ROOT / "Makefile").read_text()
            assert re.search(r"^test: lint\b", makefile, flags=re.MULTILINE), key
            assert re.search(r"^lint: install\b", makefile, flags=re.MULTILINE), key
            continue
        path, _, name = where.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in defined, f"{key!r}: {where} does not exist"
    # Every other command is the walkthrough's: nothing is left out silently.
    unaccounted = [c for c in commands() if c.key not in ELSEWHERE and not _runs_here(c)]
    assert not unaccounted, [f"{c.where}: {c.key}" for c in unaccounted]


def _runs_here(command: Command) -> bool:
    return command.lang == "sh" or (command.page, command.section) in RUNS_HERE


def test_a_file_a_page_shows_is_the_file_shipped() -> None:
    """A ``toml`` block opening with ``# <path>`` is that file of the checkout, verbatim."""
    shown = [b for b in blocks() if b.lang == "toml" and re.match(r"# [\w./-]+\n", b.text)]
    assert shown
    for block in shown:
        path = ROOT / block.text.splitlines()[0].removeprefix("# ")
        assert path.is_file(), f"{block.page} line {block.line}: {path} is not shipped"
        assert path.read_text() == block.text, f"{block.page} line {block.line}: {path} differs"


def test_the_job_file_reference_is_a_job_file_that_loads(tmp_path: Path) -> None:
    """The Job files page's full example of a job file: every key it shows exists and is valid."""
    (reference,) = [
        b.text for b in blocks()
        if b.lang == "toml" and b.page == "docs/jobs.md" and b.section == "Job files"
    ]  # fmt: skip
    job = tmp_path / "nightly.toml"
    job.write_text(reference)
    (tmp_path / "prices.xlsx").touch()  # the [[push]] file is the reader's
    loaded = load_job(job)
    written = tomllib.loads(reference)
    assert loaded.name == written["name"]
    kinds = []
    for destination in written["destination"]:
        (key,) = set(destination) & set(job_keys())
        scheme = destination[key].partition(":")[0]
        kinds.append(key if key != "url" else "duckdb" if scheme == "duckdb" else "sql")
    assert [d.kind for d in loaded.destinations] == kinds
    assert [p.table for p in loaded.pushes] == [p["table"] for p in written["push"]]
    assert written["sync"]["lookback"] == "5m" and loaded.lookback == 300.0


# -- the walkthrough ----------------------------------------------------------------------


@dataclass
class Reader:
    """The reader's shell: one environment, one working directory, servers in the background."""

    home: Path
    env: dict[str, str]
    #: A free port for each port the docs name (`PORTS`).
    ports: dict[str, int]
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        """The reference server's."""
        return self.ports["8000"]

    def run(self, command: Command) -> str:
        text = re.sub(
            rf"(?<=[:\s])({'|'.join(PORTS)})\b", lambda m: str(self.ports[m.group(1)]), command.text
        )
        words = shlex.split(command.key) if command.lang == "sh" else []
        if command.lang == "python":
            argv = [str(self.home / ".venv/bin/python"), "-c", text]
        elif command.key == "make demo":
            # As written, with the install step marked done: the suite's .venv is installed.
            argv = ["make", "-o", ".venv/.core", "demo"]
        elif re.search(r"\bconnector serve( |$)", command.key):
            self.serve(text, command)
            return ""
        elif words and words[-1] == "&":  # "&" ends it: a server in the background
            self.background.append(self.start(text, command))
            return ""
        elif command.key.startswith("export "):
            done = self.shell(f"{text}\nenv -0", command)
            self.env = dict(
                item.split("=", 1) for item in done.stdout.split("\0") if "=" in item
            )
            return ""
        else:
            argv = ["bash", "-c", text]
        return self.shell_argv(argv, command).stdout

    def shell(self, text: str, command: Command) -> subprocess.CompletedProcess[str]:
        return self.shell_argv(["bash", "-c", text], command)

    def shell_argv(self, argv: list[str], command: Command) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, cwd=self.home, env=self.env, capture_output=True, text=True, timeout=300
        )
        said = done.stdout + done.stderr
        assert done.returncode == 0, (
            f"{command.where}: {command.text!r} exited {done.returncode}:\n{said[-3000:]}"
        )
        for expected in command.expect:
            assert expected in said, f"{command.where}: {expected!r} not in:\n{said}"
        self.outputs[command.key] = done.stdout
        return done

    def start(self, text: str, command: Command) -> subprocess.Popen[bytes]:
        """`text` running on, its output in a log: in the foreground of a shell of its own
        (the trailing ``&`` taken off: its session is what `stop` ends)."""
        text = re.sub(r"\s*&\s*(#[^\n]*)?$", "", text.rstrip())
        log = (self.home / f"{Path(command.page).stem}-{command.line}.log").open("wb")
        return subprocess.Popen(
            ["bash", "-c", text], cwd=self.home,
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def serve(self, text: str, command: Command) -> None:
        """A server "in one terminal": the previous one stops first (Ctrl-C there)."""
        self.stop(self.servers)
        proc = self.start(text, command)
        self.servers.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{command.where}: the server exited"
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/v1/openapi.json", timeout=1.0)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(f"{command.where}: the server did not answer")

    @staticmethod
    def stop(processes: list[subprocess.Popen[bytes]]) -> None:
        for proc in processes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        processes.clear()

    # The server's truth, over HTTP with the reader's URL and key.

    def api(self, path: str, key: str | None = None, **params: Any) -> Any:
        answer = httpx.get(
            f"{self.env['CONNECTOR_BASE_URL']}{path}",
            headers={"Authorization": f"Bearer {key or self.env['CONNECTOR_API_KEY']}"},
            params=params,
            timeout=30,
        )
        answer.raise_for_status()
        return answer.json()

    def tables(self) -> dict[str, dict[str, Any]]:
        """Name -> the table's schema."""
        return {t["name"]: self.api(f"/tables/{t['id']}") for t in self.api("/tables")["tables"]}

    def rows(self, table: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Every row of `table`: id -> its fields."""
        found: dict[str, dict[str, Any]] = {}
        while True:
            page = self.api(f"/tables/{table['id']}/rows", limit=1000, offset=len(found))
            found.update({r["id"]: r["fields"] for r in page["rows"]})
            if len(page["rows"]) < page["limit"]:
                return found


def _same(server: Any, held: Any) -> bool:
    """A server cell and the value a destination holds for it, across their typings."""
    if server is None or server == "":
        return held is None or held == "" or held != held  # NaN
    if isinstance(server, bool):
        return bool(held) == server
    if isinstance(server, (int, float)):
        return float(held) == float(server)
    if isinstance(held, dt.date):  # a date column: the server's "YYYY-MM-DD"
        return held.isoformat()[:10] == server
    return str(held) == server


def _assert_holds_the_server(reader: Reader, held: Callable[[str], list[dict[str, Any]]]) -> None:
    """`held(table)` -> the destination's rows (with ``_id``), equal to the server's, cell by cell."""
    for name, table in reader.tables().items():
        expected = reader.rows(table)
        got = {r["_id"]: r for r in held(name)}
        assert set(got) == set(expected), name
        for row_id, fields in expected.items():
            for column in table["columns"]:
                value = fields.get(column["name"])
                assert _same(value, got[row_id][column["name"]]), (name, row_id, column, value)


def _sqlite_rows(path: Path) -> Callable[[str], list[dict[str, Any]]]:
    def held(name: str) -> list[dict[str, Any]]:
        with sqlite3.connect(path) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(f'SELECT * FROM "{name}"')]

    return held


@pytest.fixture
def reader(
    tmp_path: Path, postgres_server: PostgresServer, s3_server: S3Server
) -> Iterator[Reader]:
    """A copy of the checkout's tracked files, its `.venv` the suite's, and a shell's env."""
    home = tmp_path / "checkout"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (home / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, home / name)
    (home / ".venv").symlink_to(sys.prefix)
    import psycopg

    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS analytics WITH (FORCE)")
        conn.execute("DROP ROLE IF EXISTS etl")
        conn.execute("CREATE ROLE etl LOGIN")
        conn.execute("CREATE DATABASE analytics OWNER etl")
    s3_server.client().create_bucket(Bucket="lake")
    # A reader's shell: no settings of ours, nor the switches the suite sets for Google's and
    # Azure's clients (the docs' recipes must set what they need).
    env = {k: v for k, v in os.environ.items() if not k.startswith(
        ("CONNECTOR_", "PG", "VIRTUAL_ENV", "AZURE_", "GOOGLE_", "GCSFS_", "STORAGE_EMULATOR_HOST",
         "NO_GCE_CHECK")
    )}  # fmt: skip
    env |= s3_server.env() | {
        "HOME": str(home),
        "PATH": f"{home / '.venv/bin'}{os.pathsep}{env['PATH']}",
        "PGPORT": str(postgres_server.port),
        "RUNTIME__DLTHUB_TELEMETRY": "false",  # dlt's usage reports: no network here
        "DLT_DATA_DIR": str(home / ".dlt"),  # dlt's pipelines: ~/.dlt, but /var/dlt for root
    }
    reading = Reader(home, env, {port: _free_port() for port in PORTS})
    yield reading
    reading.stop(reading.servers)
    reading.stop(reading.background)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS analytics WITH (FORCE)")
        conn.execute("DROP ROLE IF EXISTS etl")
    bucket = s3_server.client().list_objects_v2(Bucket="lake").get("Contents", [])
    for item in bucket:
        s3_server.client().delete_object(Bucket="lake", Key=item["Key"])
    s3_server.client().delete_bucket(Bucket="lake")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _check_tables(reader: Reader) -> None:
    listed = reader.outputs[".venv/bin/connector tables"]
    shown = {line.split()[1] for line in listed.splitlines()[1:] if line.strip()}
    assert shown == set(reader.tables())


def _check_sync(reader: Reader) -> None:
    _assert_holds_the_server(reader, _sqlite_rows(reader.home / "configs" / "crm.db"))


def _check_export(reader: Reader) -> None:
    def held(name: str) -> list[dict[str, Any]]:
        return pq.read_table(reader.home / "exports" / f"{name}.parquet").to_pylist()

    _assert_holds_the_server(reader, held)


def _check_push(reader: Reader) -> None:
    import csv

    with (reader.home / "demo-out" / "demo-products.csv").open(newline="") as sheet:
        prices = {row["Name"]: float(row["Price"]) for row in csv.DictReader(sheet)}
    products = reader.rows(reader.tables()["Products"])
    on_server = {f["Name"]: f["Price"] for f in products.values() if f["Name"] in prices}
    assert on_server == prices


def _check_postgres(reader: Reader) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(f"postgresql+psycopg://etl@127.0.0.1:{reader.env['PGPORT']}/analytics")

    def held(name: str) -> list[dict[str, Any]]:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(f'SELECT * FROM "{name}"'))]

    try:
        _assert_holds_the_server(reader, held)
    finally:
        engine.dispose()


def _check_delta(reader: Reader) -> None:
    import boto3

    s3 = boto3.client(
        "s3", endpoint_url=reader.env["AWS_ENDPOINT_URL"], region_name=reader.env["AWS_REGION"],
        aws_access_key_id=reader.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=reader.env["AWS_SECRET_ACCESS_KEY"],
    )
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="lake", Prefix="crm/")["Contents"]}
    for name in reader.tables():
        assert f"crm/{name}/_delta_log/00000000000000000000.json" in keys, name


def _check_duckdb(reader: Reader) -> None:
    import duckdb

    with duckdb.connect(str(reader.home / "analytics.duckdb"), read_only=True) as conn:

        def held(name: str) -> list[dict[str, Any]]:
            cursor = conn.execute(f'SELECT * FROM "{name}"')
            columns = [d[0] for d in cursor.description]
            return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

        _assert_holds_the_server(reader, held)


def _iceberg_catalog(reader: Reader) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    lake = reader.home / "lake"
    return SqlCatalog("connector", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=str(lake))


def _check_iceberg(reader: Reader) -> None:
    """An Iceberg table per table in the SQLite catalog the docs name, read back."""
    catalog = _iceberg_catalog(reader)

    def held(name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = catalog.load_table(("tabledata", name)).scan().to_arrow().to_pylist()
        return rows

    _assert_holds_the_server(reader, held)


def _sums_printed(printed: str) -> dict[str, float]:
    """``Status  Amount`` lines of a printed pandas Series: status -> the sum it shows."""
    sums: dict[str, float] = {}
    for line in printed.splitlines():
        words = line.split()
        if len(words) == 2 and re.fullmatch(r"-?[\d.]+(e[+-]\d+)?", words[1]):
            sums[words[0]] = float(words[1])
    return sums


def _check_amounts_by_status(key: str) -> Callable[[Reader], None]:
    """What the python block `key` printed: the Orders' Amount summed by Status, as the
    server's rows sum it (to the digits pandas prints)."""

    def check(reader: Reader) -> None:
        expected: dict[str, float] = {}
        for fields in reader.rows(reader.tables()["Orders"]).values():
            if fields.get("Status"):
                expected[fields["Status"]] = expected.get(fields["Status"], 0.0) + (fields.get("Amount") or 0.0)
        printed = _sums_printed(reader.outputs[key])
        assert set(printed) == set(expected), reader.outputs[key]
        for status, total in expected.items():
            assert printed[status] == pytest.approx(total, rel=1e-5), (status, reader.outputs[key])

    return check


def _parquet_objects(reader: Reader, get: Callable[[str], bytes]) -> Callable[[str], list[dict[str, Any]]]:
    def held(name: str) -> list[dict[str, Any]]:
        return pq.read_table(io.BytesIO(get(f"crm/{name}.parquet"))).to_pylist()

    return held


def _check_gcs(reader: Reader) -> None:
    """The export's objects, read from the emulator's own JSON API (not our code)."""
    from urllib.parse import quote

    endpoint = reader.env["STORAGE_EMULATOR_HOST"]

    def get(key: str) -> bytes:
        answer = httpx.get(f"{endpoint}/storage/v1/b/lake/o/{quote(key, safe='')}", params={"alt": "media"})
        answer.raise_for_status()
        return answer.content

    _assert_holds_the_server(reader, _parquet_objects(reader, get))


def _check_azure(reader: Reader) -> None:
    """The export's blobs, read through Azure's own SDK (not our code)."""
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(reader.env["AZURE_STORAGE_CONNECTION_STRING"])
    with service.get_container_client("lake") as container:

        def get(key: str) -> bytes:
            return bytes(container.download_blob(key).readall())

        _assert_holds_the_server(reader, _parquet_objects(reader, get))


def _check_dlt(reader: Reader) -> None:
    """The dlt example's crm.duckdb, opened as the page says: its Orders and Customers hold
    the server's rows (by ``_id``; dlt names tables and columns its own way)."""
    import duckdb

    tables = reader.tables()
    with duckdb.connect(str(reader.home / "crm.duckdb"), read_only=True) as conn:
        for name in ("Orders", "Customers"):
            held = conn.sql(f"SELECT _id FROM tabledata.{name.lower()}").fetchall()
            assert sorted(r[0] for r in held) == sorted(reader.rows(tables[name])), name


def _check_workspace_db(reader: Reader) -> None:
    """The server run on the database the server page built: its Leads table, seen with the key
    `keys create` printed, after the column changes made while it ran."""
    key = reader.outputs["connector keys create --db workspace.db"].split()[-1]
    base = f"http://127.0.0.1:{reader.port}/v1"
    listed = httpx.get(f"{base}/tables", headers={"Authorization": f"Bearer {key}"}).json()
    (leads,) = listed["tables"]
    table = httpx.get(
        f"{base}/tables/{leads['id']}", headers={"Authorization": f"Bearer {key}"}
    ).json()
    columns = {c["name"]: c for c in table["columns"]}
    assert set(columns) == {"Name", "Phase", "Source"}
    assert columns["Phase"]["options"] == ["New", "Won", "Lost", "Parked"]
    assert (columns["Source"]["type"], columns["Source"]["options"]) == ("choice", ["Web", "Referral", "Event"])


#: After these commands (by key), the outcome is compared with the server.
CHECKS: dict[str, Callable[[Reader], None]] = {
    ".venv/bin/connector tables": _check_tables,
    "connector sync configs/crm.toml": _check_sync,
    "connector export --out exports/": _check_export,
    "connector push demo-out/demo-products.csv --table Products --key Name": _check_push,
    "connector load --to postgresql://etl@localhost/analytics --mode merge": _check_postgres,
    "connector export --out s3://lake/crm/ --format delta": _check_delta,
    "connector load --to duckdb:///analytics.duckdb": _check_duckdb,
    "connector export --out lake/ --format iceberg": _check_iceberg,
    "python: from pyiceberg.catalog.sql import SqlCatalog":
        _check_amounts_by_status("python: from pyiceberg.catalog.sql import SqlCatalog"),
    "python: from connector import Workspace":
        _check_amounts_by_status("python: from connector import Workspace"),
    "connector export --out gs://lake/crm/": _check_gcs,
    "connector export --out az://lake/crm/": _check_azure,
    "python: import dlt": _check_dlt,
    "connector server alter-table drop-column --db workspace.db Leads Score": _check_workspace_db,
}


@pytest.mark.long
@pytest.mark.timeout(900)  # every block of every page, one after the other
def test_the_docs_run_as_written(reader: Reader) -> None:
    ran: list[str] = []
    for command in commands():
        if command.key in ELSEWHERE or not _runs_here(command):
            continue
        if command.key in ran and not command.expect:  # said twice (`make demo`): once is enough
            continue
        reader.run(command)
        ran.append(command.key)
        if command.key in CHECKS:
            CHECKS[command.key](reader)
    assert set(CHECKS) <= set(ran)
