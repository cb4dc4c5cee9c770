"""A write killed with SIGKILL mid-way leaves nothing behind once the next run is done.

A killed process cannot clean up: what it left is the next run's to remove. Each kind is
killed where its write is provably under way -- a Parquet or CSV file's temp file beside
it, SQLite's journal, an Iceberg table's manifests or a Delta table's data files that no
commit refers to yet, PostgreSQL in its COPY, DuckDB inside its transaction -- and the
leftovers are listed (proof the kill landed mid-write). Then the next run: every file left
is one the kind's records account for, no staging table is left in a database, and the
rows are exactly what was last written, value by value.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from tests.destinations.helpers import Place
from tests.destinations.outcomes import (
    SPEC,
    command,
    connector,
    delta_files,
    files,
    held_rows,
    orphans,
    rows_of,
    server_rows,
    until,
)
from tests.destinations.samples import kill_midway, kill_when, numbered
from tests.fixtures.server import RunningServer, ServerFactory

pytestmark = pytest.mark.slow  # each kills a process mid-write

FIRST, MORE = 300, 2700


def connector_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "connector", *args, "--page-size", "50"]


@pytest.fixture
def slow(server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> tuple[RunningServer, str]:
    """A server answering a page every 40 ms, holding `FIRST` rows of `SPEC`; the
    environment set for a connector process to read it two pages at a time."""
    server = server_factory(latency_ms=40)
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, rows_of(0, FIRST))
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    monkeypatch.setenv("CONNECTOR_MAX_CONCURRENCY", "2")
    return server, table_id


#: Where each kind's write shows that it is under way, seen from outside (given the files
#: the first run left). Iceberg's: a file that run did not leave. Every file of a write is
#: unreferenced until the catalog's row moves, its last step; a cheap check, polled often
#: enough to land within that span even on a loaded machine (reading the catalog to find
#: orphans took long enough to miss it: the export finished first).
WRITING: dict[str, Callable[[Path, dict[str, int]], bool]] = {
    "parquet": lambda d, _: any(p.name.endswith(".partial") for p in (d / "out").iterdir()),
    "csv": lambda d, _: any(p.name.endswith(".partial") for p in (d / "out").iterdir()),
    "sqlite": lambda d, _: (d / "w.db-journal").exists(),
    "iceberg": lambda d, first: bool(files(d).keys() - first.keys()),
}


@pytest.mark.parametrize("kind", list(WRITING))
def test_a_killed_export_or_load_leaves_nothing_after_the_next_run(
    slow: tuple[RunningServer, str], tmp_path: Path, kind: str
) -> None:
    server, table_id = slow
    args = command(kind, tmp_path)
    code, out, err = connector(server, *args)
    assert code == 0, out + err
    server.insert_rows(table_id, rows_of(FIRST, MORE))
    first = files(tmp_path)

    kill_when(connector_argv(*args), until(lambda: WRITING[kind](tmp_path, first)))

    left = orphans(kind, tmp_path)
    if kind != "sqlite":  # SQLite's journal is its own: accounted for by nothing but itself
        assert left, files(tmp_path)  # the kill landed mid-write, and left these
    code, out, err = connector(server, *args)
    assert code == 0, out + err
    assert orphans(kind, tmp_path) == {}, left
    assert held_rows(kind, tmp_path) == server_rows(server, table_id)
    if kind == "sqlite":
        with sa.create_engine(f"sqlite:///{tmp_path / 'w.db'}").connect() as conn:
            assert set(sa.inspect(conn).get_table_names()) == {"Orders", "_connector_tables"}


# -- killed inside a library's own write: rows from a generator that stops half-way


CHILD = """
import sys, time
from pathlib import Path
from tests.destinations.helpers import config, apply
from tests.destinations.samples import batch, numbered

kind, location, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])


def rows():
    for start in range(0, 100_000, 500):
        yield batch(numbered(500, start=start, name="killed"))
        if start == 5_000:  # the transaction (or COPY) is open and has rows: die in it
            marker.touch()
            time.sleep(120)


apply(config(kind, location), rows())
"""


def _names(place: Place) -> dict[str, str]:
    held = place.held()
    assert held is not None
    return {i: row["Name"] for i, row in held.items()}


def test_a_duckdb_load_killed_in_its_transaction_leaves_one_file(tmp_path: Path) -> None:
    place = Place("duckdb", f"duckdb:///{tmp_path / 'w.duckdb'}")
    place.apply(numbered(10, name="before"))
    kill_midway(CHILD, "url", place.location, marker=tmp_path / "marker")

    place.apply(numbered(20, name="after"))
    assert sorted(files(tmp_path)) == ["marker", "w.duckdb"]
    assert place.tables() == ["orders"]  # no staging table
    assert _names(place) == {f"row_{i}": f"after {i}" for i in range(20)}


def test_postgresql_killed_mid_copy_leaves_no_staging_table(postgres_db: str, tmp_path: Path) -> None:
    place = Place("postgresql", postgres_db)
    place.apply(numbered(10, name="before"))
    dsn = sa.make_url(postgres_db).set(drivername="postgresql").render_as_string(hide_password=False)
    kill_midway(CHILD, "url", postgres_db, marker=tmp_path / "marker")  # inside its COPY

    place.apply(numbered(20, name="after"))
    with psycopg.connect(dsn) as conn:
        ours = conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE '\\_connector\\_%'"
        ).fetchall()
    assert [r[0] for r in ours if r[0] != "_connector_tables"] == []
    assert _names(place) == {f"row_{i}": f"after {i}" for i in range(20)}


DELTA_CHILD = """
import os, sys
import pyarrow as pa
from tests.destinations.helpers import config, apply
from tests.destinations.samples import batch, numbered

location = sys.argv[1]
rows = numbered(2_000, name="killed")
big = batch(rows)
name = pa.array([os.urandom(400).hex() for _ in range(len(rows))])
big = big.set_column(big.schema.get_field_index("Name"), big.schema.field("Name"), name)
apply(config("delta", location), [big] * 60)  # ~100 MB that does not compress
"""


def test_a_delta_write_killed_before_its_commit_leaves_nothing_after_the_next(
    tmp_path: Path,
) -> None:
    place = Place("delta", str(tmp_path / "lake"))
    place.apply(numbered(10, name="before"))
    table = tmp_path / "lake" / "orders"
    committed = set(files(table))

    def writing() -> bool:
        return any(not n.startswith("_delta_log/") for n in set(files(table)) - committed)

    kill_when([sys.executable, "-c", DELTA_CHILD, place.location], until(writing))
    left = set(files(table)) - committed
    assert left and not any(n.startswith("_delta_log/0") for n in left)  # data, never a commit

    place.apply(numbered(20, name="after"))
    assert set(files(table)) == delta_files(table)  # a commit, or a version's data file
    assert _names(place) == {f"row_{i}": f"after {i}" for i in range(20)}
