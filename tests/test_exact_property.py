"""Property: any value the reference server accepts reads back exactly from every kind of
destination, and a push of that export back plans no write.

For each destination kind, Hypothesis draws rows of a table with every column type: integers
across the whole int64 range (a column typed ``int64``), any double (``1e308``, ``5e-324``,
``-0.0``: the default float64), any JSON number (a column typed ``text``), text with ``""``,
CR/LF and emoji, choices (``""`` among the options), checkboxes, dates of years 1 to 9999.
The rows go into a new table on one shared server, `connector export` / `load` copies it, and
the destination is read back with its own library and compared cell by cell with what the
API serves; then the export is pushed back (``--dry-run``) and must plan nothing.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connector.api import Client
from connector.jobs.config import one_shot_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.push import PushSpec, Query, push
from connector.push.sheet import arrow_frame
from connector.values import TypeSetting
from tests.destinations.helpers import Place, config
from tests.destinations.test_iceberg import IcebergPlace
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.server import RunningServer

OPTIONS = ["", "a", "b b", "ü ✓"]
COLUMNS = [
    {"name": "Key", "type": "text", "required": True},
    {"name": "Int", "type": "number"},  # typed int64
    {"name": "Real", "type": "number"},  # float64, the default
    {"name": "Any", "type": "number"},  # typed text: the number's JSON text
    {"name": "Text", "type": "text"},
    {"name": "Pick", "type": "choice", "options": OPTIONS},
    {"name": "Flag", "type": "checkbox"},
    {"name": "Day", "type": "date"},
]
TYPES = {"Int": "int64", "Any": "text"}
KINDS = ["parquet", "csv", "sqlite", "postgresql", "duckdb", "delta", "iceberg"]

ints = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([2**53 + 1, 2**63 - 1, -(2**63)])
doubles = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e308, 5e-324, -0.0, 0.1, 2.0**60])
texts = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
                max_size=12) | st.sampled_from(["", " ", "a\r\nb", "\r", "😀 ✓", "=1+1", "NULL"])
CELLS: dict[str, st.SearchStrategy[Any]] = {
    "Int": ints, "Real": doubles, "Any": ints | doubles, "Text": texts,
    "Pick": st.sampled_from(OPTIONS), "Flag": st.booleans(),
    "Day": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)).map(dt.date.isoformat),
}
rows = st.lists(st.fixed_dictionaries({n: st.none() | s for n, s in CELLS.items()}),
                min_size=1, max_size=6)
#: The edges, in every run: then what Hypothesis draws.
EDGES: list[dict[str, Any]] = [
    {"Int": 2**53 + 1, "Real": 1e308, "Any": 2**63 - 1, "Text": "", "Pick": "", "Flag": False,
     "Day": "0001-01-01"},
    {"Int": 2**63 - 1, "Real": 5e-324, "Any": 0.1, "Text": "a\r\nb 😀", "Pick": "ü ✓",
     "Flag": True, "Day": "9999-12-31"},
    {"Int": -(2**63), "Real": -0.0, "Any": -(2**63), "Text": " ", "Pick": None, "Flag": None,
     "Day": None},
    {"Int": None, "Real": 2.0**60, "Any": 1e-7, "Text": None, "Pick": "a", "Flag": None,
     "Day": "2024-02-29"},
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server for every example: each draws a table of its own."""
    server = RunningServer(tmp_path_factory.mktemp("exact"), {}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pg(postgres_server: PostgresServer) -> Iterator[str]:
    """One PostgreSQL database for every example (each table has a name of its own), owned
    by a role that is no superuser: a push reads from it, and `push --db` refuses a role
    that can write files on the server."""
    import psycopg
    from sqlalchemy.engine import make_url

    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute('CREATE ROLE "exact_user" LOGIN')
        conn.execute('CREATE DATABASE "exact_values" OWNER "exact_user"')
    url = make_url(postgres_server.url("exact_values")).set(username="exact_user")
    yield url.render_as_string(hide_password=False)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "exact_values" WITH (FORCE)')
        conn.execute('DROP ROLE "exact_user"')


_names = itertools.count()


def served(server: RunningServer, table_id: str) -> dict[str, dict[str, Any]]:
    """The table's rows as the API serves them, by Key (plain httpx; JSON integers stay ints)."""
    with server.client() as http:
        answer = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()
    return {r["fields"]["Key"]: {c["name"]: r["fields"].get(c["name"]) for c in COLUMNS}
            for r in answer["rows"]}


def as_api(value: Any, column: str) -> Any:
    """A value a destination's reader gave, as the API writes it: numbers as numbers (the
    text-typed column's JSON text parsed), dates ISO, checkboxes booleans."""
    if value is None:
        return None
    if column == "Any":
        return json.loads(value)
    if column == "Day":
        return value if isinstance(value, str) else value.isoformat()
    if column == "Flag":
        return bool(value)
    return value


def same(expected: Any, got: Any) -> bool:
    """Equal, and an integer where the API serves one (2**53 + 1 is not 2.0**53)."""
    return (bool(expected == got) and type(expected) is type(got)) or (
        isinstance(expected, float) and isinstance(got, float) and expected == got)


def read_csv(path: Path) -> list[dict[str, Any]]:
    """A CSV export with pyarrow's reader: an unquoted empty cell is null, a quoted one
    (``""``) the empty string; every cell text, converted as the column says."""
    names = ["_id", "_created_at", "_updated_at", *(c["name"] for c in COLUMNS)]
    options = pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                   strings_can_be_null=True, quoted_strings_can_be_null=False)
    out = []
    for row in pacsv.read_csv(path, convert_options=options).to_pylist():
        cells = dict(row)
        for name, parse in (("Int", int), ("Real", float), ("Flag", lambda v: v == "true")):
            if cells[name] is not None:
                cells[name] = parse(cells[name])
        out.append(cells)
    return out


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(drawn=rows)
@example(drawn=EDGES)
def test_every_value_the_server_takes_round_trips_exactly_and_pushes_back_with_no_write(
    shared: RunningServer, pg: str, tmp_path: Path, kind: str,
    drawn: list[dict[str, Any]],
) -> None:
    name = f"T{next(_names)}"
    table_id = shared.create_table({"name": name, "columns": COLUMNS})
    shared.insert_rows(table_id, [{"Key": f"k{i}", **cells} for i, cells in enumerate(drawn)])
    expected = served(shared, table_id)
    out = tmp_path / f"{name}-{kind}"
    place, location = _place(kind, out, pg)
    destination = config("url" if kind in ("sqlite", "postgresql", "duckdb") else kind, location)
    settings_ = [TypeSetting(name, c, t, f"test {c}") for c, t in TYPES.items()]
    job = one_shot_job("export", destination, tables=[name], types=settings_)
    summary = run_job(job, RunOptions(environ={"CONNECTOR_API_KEY": shared.api_key,
                                    "CONNECTOR_BASE_URL": shared.base_url}))
    assert summary.status == "ok", (summary.error, [t.error for t in summary.tables])

    held = read_csv(out / f"{name}.csv") if place is None else list(
        (place.held(name) or {}).values())
    got = {r["Key"]: {c: as_api(r[c], c) for c in expected["k0"]} for r in held}
    assert set(got) == set(expected)
    for key, cells in expected.items():
        for column, value in cells.items():
            assert same(value, got[key][column]), (kind, key, column, value, got[key][column])

    with Client(shared.base_url, shared.api_key) as client:
        done = push(client, PushSpec(_source(kind, out, place, location, name), table=name, key="Key"), dry_run=True)
    assert done.plan.is_empty, (kind, done.plan.updates, done.plan.creates)
    assert done.plan.unchanged == len(expected)


def _place(kind: str, out: Path, pg: str) -> tuple[Any, str]:
    """The destination's independent reader (None for CSV: `read_csv`), and its location."""
    if kind in ("parquet", "csv", "delta"):
        return (None if kind == "csv" else Place(kind, str(out))), str(out)
    if kind == "iceberg":
        return IcebergPlace(str(out)), str(out)
    url = {"sqlite": f"sqlite:///{out}.db", "duckdb": f"duckdb:///{out}.duckdb",
           "postgresql": pg}[kind]
    return Place(kind, url), url


def _source(kind: str, out: Path, place: Any, location: str, name: str) -> Any:
    """The export as a push reads it back: a file, a query, or (Delta, Iceberg) the table
    read by its own library."""
    if kind in ("parquet", "csv"):
        return out / f"{name}.{kind}"
    if kind in ("sqlite", "postgresql", "duckdb"):
        return Query(location, f'SELECT * FROM "{name}"')
    if kind == "delta":
        from deltalake import DeltaTable

        return arrow_frame(DeltaTable(str(out / name)).to_pyarrow_table())
    return arrow_frame(place.arrow(name))
