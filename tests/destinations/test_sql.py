"""SQL loads on SQLite and a real PostgreSQL: types, modes, atomic replace, hostile names."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.errors import ConfigError, DestinationError
from connector.load.sql import delete_ids, load_table
from connector.schema import Column, Table, arrow_schema
from tests.destinations.samples import ROWS, TABLE, batch, batches, kill_midway, numbered


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'warehouse.db'}"
    return str(request.getfixturevalue("postgres_db"))


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()


def rows_of(engine: sa.Engine, name: str = "orders") -> list[dict[str, Any]]:
    """The table's rows by `_id`, timestamps as aware UTC datetimes (SQLite stores them naive)."""
    table = sa.Table(name, sa.MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        result = conn.execute(sa.select(table).order_by(table.c["_id"])).mappings().all()
    return [
        {k: v.replace(tzinfo=UTC) if isinstance(v, datetime) and v.tzinfo is None else v
         for k, v in row.items()}
        for row in result
    ]


def tables_in(engine: sa.Engine) -> list[str]:
    return sorted(sa.inspect(engine).get_table_names())


def test_every_type_loads_with_a_real_sql_type_and_nulls(url: str, engine: sa.Engine) -> None:
    assert load_table(batches(ROWS, size=3), TABLE, url) == len(ROWS)
    columns = {c["name"]: c for c in sa.inspect(engine).get_columns("orders")}
    assert list(columns) == ["_id", "_created_at", "_updated_at", "Name", "Status", "Amount",
                             "Paid", "Due", "id", "created_at"]
    expected: dict[str, type[sa.types.TypeEngine[Any]]] = {
        "_id": sa.String, "_created_at": sa.DateTime, "_updated_at": sa.DateTime,
        "Name": sa.String, "Status": sa.String, "Amount": sa.Float, "Paid": sa.Boolean,
        "Due": sa.Date, "id": sa.String, "created_at": sa.String,
    }
    for name, sql_type in expected.items():
        assert isinstance(columns[name]["type"], sql_type), (name, columns[name]["type"])
    if engine.dialect.name == "postgresql":
        assert columns["_created_at"]["type"].timezone
        assert str(columns["Amount"]["type"]) == "DOUBLE PRECISION"
    assert sa.inspect(engine).get_pk_constraint("orders")["constrained_columns"] == ["_id"]
    assert rows_of(engine) == ROWS


def test_replace_swaps_the_whole_table_and_leaves_no_staging_table(
    url: str, engine: sa.Engine
) -> None:
    load_table(batches(ROWS), TABLE, url)
    assert load_table(batches(numbered(250)), TABLE, url, mode="replace") == 250
    assert [r["_id"] for r in rows_of(engine)] == sorted(f"row_{i}" for i in range(250))
    assert tables_in(engine) == ["orders"]


def test_replace_with_no_rows_leaves_an_empty_typed_table(url: str, engine: sa.Engine) -> None:
    load_table(batches(ROWS), TABLE, url)
    assert load_table([], TABLE, url) == 0
    assert rows_of(engine) == []
    assert len(sa.inspect(engine).get_columns("orders")) == len(ROWS[0])


def test_append_adds_rows_and_columns_added_upstream(url: str, engine: sa.Engine) -> None:
    load_table(batches(ROWS[:2]), TABLE, url, mode="append")
    grown = Table(TABLE.id, TABLE.name, (*TABLE.columns, Column("Notes", "text")))
    row = {**numbered(1, start=5)[0], "Notes": "added later"}
    batch_ = pa.RecordBatch.from_pylist([row], schema=arrow_schema(grown))
    assert load_table([batch_], grown, url, mode="append") == 1
    got = rows_of(engine)
    assert [r["_id"] for r in got] == ["row_1", "row_2", "row_5"]
    assert [r["Notes"] for r in got] == [None, None, "added later"]


def test_append_again_adds_only_new_ids_and_leaves_held_rows_unchanged(
    url: str, engine: sa.Engine
) -> None:
    assert load_table(batches(ROWS[:2]), TABLE, url, mode="append") == 2
    edited = {**ROWS[0], "Name": "changed upstream"}
    # A second full read: the same two ids (one edited since) plus a new one, over COPY's
    # temp table on PostgreSQL.
    again = batches([edited, ROWS[1], numbered(1, start=5)[0]], size=2)
    load_table(again, TABLE, url, mode="append")
    got = rows_of(engine)
    assert [r["_id"] for r in got] == ["row_1", "row_2", "row_5"]
    assert got[0] == ROWS[0]  # held rows are left as they were, not updated
    assert tables_in(engine) == ["orders"]


def test_merge_upserts_by_row_id_and_deletes_in_the_same_transaction(
    url: str, engine: sa.Engine
) -> None:
    load_table(batches(ROWS), TABLE, url)
    changed = {**ROWS[0], "Name": "Ada Lovelace", "Amount": None, "Status": "closed"}
    new = numbered(1, start=8)[0]
    assert load_table([batch([changed, new])], TABLE, url, mode="merge",
                      deleted_ids=["row_2", "row_missing"]) == 2
    assert rows_of(engine) == [changed, ROWS[2], ROWS[3], new]


def test_merge_into_a_missing_table_creates_it(url: str, engine: sa.Engine) -> None:
    assert load_table(batches(ROWS), TABLE, url, mode="merge") == len(ROWS)
    assert rows_of(engine) == ROWS


def test_delete_ids_removes_exactly_those_rows(url: str, engine: sa.Engine) -> None:
    assert delete_ids(url, TABLE, ["row_1"]) == 0  # no table yet: nothing to delete
    load_table(batches(numbered(1200)), TABLE, url)
    doomed = [f"row_{i}" for i in range(0, 1200, 2)] + ["row_nope"]
    assert delete_ids(url, TABLE, doomed) == 600
    assert [r["_id"] for r in rows_of(engine)] == sorted(f"row_{i}" for i in range(1, 1200, 2))


HOSTILE = 'x"; drop table y; --'


def test_hostile_table_and_column_names_load_safely(url: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE y (v integer)")
    hostile = Table("tbl_h", HOSTILE, (
        Column("select", "text"), Column("Order Date", "date"), Column(HOSTILE, "number"),
        Column("from", "choice", options=("a", "b")),
    ))
    row = {"_id": "row_1", "_created_at": None, "_updated_at": None, "select": "s",
           "Order Date": ROWS[0]["Due"], HOSTILE: 1.0, "from": "b"}
    schema = arrow_schema(hostile)
    changed = {**row, "select": "changed"}
    other = {**row, "_id": "row_2"}
    load_table([pa.RecordBatch.from_pylist([row], schema=schema)], hostile, url)
    load_table([pa.RecordBatch.from_pylist([changed], schema=schema)], hostile, url, mode="merge")
    load_table([pa.RecordBatch.from_pylist([other], schema=schema)], hostile, url, mode="append")
    assert delete_ids(url, hostile, ["row_2"]) == 1
    assert tables_in(engine) == sorted([HOSTILE, "y"])
    assert rows_of(engine, HOSTILE) == [changed]


def test_a_failed_replace_leaves_the_previous_table(url: str, engine: sa.Engine) -> None:
    load_table(batches(ROWS), TABLE, url)

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(numbered(300))
        raise RuntimeError("the API went away")

    with pytest.raises(RuntimeError, match="went away"):
        load_table(failing(), TABLE, url)
    assert rows_of(engine) == ROWS
    assert tables_in(engine) == ["orders"]


def test_database_errors_name_the_table_and_hide_the_password(url: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:  # an existing table whose `_id` is not a key: merge cannot upsert
        conn.exec_driver_sql('CREATE TABLE orders ("_id" integer)')
    secret_url = sa.make_url(url).set(password="s3cret-pw")
    with pytest.raises(DestinationError, match="'orders'") as failure:
        load_table(batches(ROWS), TABLE, secret_url.render_as_string(hide_password=False),
                   mode="merge")
    assert "s3cret-pw" not in str(failure.value)


def test_a_value_postgresql_refuses_in_copy_is_a_clear_error(postgres_db: str) -> None:
    load_table(batches(ROWS), TABLE, postgres_db)
    bad = {**ROWS[0], "_id": "row_9", "Name": "nul \x00 byte"}  # PostgreSQL text cannot hold NUL
    with pytest.raises(DestinationError, match=r"'orders'.*0x00"):
        load_table([batch([bad])], TABLE, postgres_db, mode="merge")
    engine = sa.create_engine(postgres_db)
    try:
        assert rows_of(engine) == ROWS
    finally:
        engine.dispose()


def test_a_name_postgresql_would_truncate_is_refused(postgres_db: str) -> None:
    long_name = "a table name that is far too long for postgresql identifiers, sadly"
    with pytest.raises(ConfigError, match="limit of 63 bytes"):
        load_table(batches(ROWS), TABLE, postgres_db, name=long_name)
    engine = sa.create_engine(postgres_db)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_bad_url_and_mode_are_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="'nosuchdb'") as failure:
        load_table([], TABLE, "nosuchdb://user:pw-secret@host/db")
    assert "pw-secret" not in str(failure.value)
    with pytest.raises(ConfigError, match="mode"):
        load_table([], TABLE, "sqlite://", mode="upsert")  # type: ignore[arg-type]


def test_readers_never_see_a_partial_or_empty_table_during_replace(
    url: str, engine: sa.Engine
) -> None:
    old, new = 500, 1000
    load_table(batches(numbered(old)), TABLE, url)
    seen: list[int] = []
    errors: list[BaseException] = []
    loading = threading.Event()
    done = threading.Event()

    def reader() -> None:
        try:
            with engine.connect() as conn:
                while not done.is_set() or not seen or seen[-1] != new:
                    seen.append(conn.execute(sa.text("SELECT count(*) FROM orders")).scalar_one())
                    conn.rollback()  # a fresh snapshot for each read
        except BaseException as exc:
            errors.append(exc)

    def slow() -> Iterator[pa.RecordBatch]:
        for i, b in enumerate(batches(numbered(new, name="new"))):
            if i == 1:
                loading.set()
            time.sleep(0.01)
            yield b

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        load_table(slow(), TABLE, url)
    finally:
        done.set()
        thread.join(timeout=30)
    assert not errors, errors
    assert set(seen) <= {old, new}, sorted(set(seen))
    assert seen.count(old) > 0 and seen[-1] == new


KILLED_LOAD = """
import pathlib, sys, time
from connector.load.sql import load_table
from tests.destinations.samples import TABLE, batches, numbered

def slow():
    for i, b in enumerate(batches(numbered(5000, name="new"))):
        if i == 20:
            pathlib.Path(sys.argv[2]).touch()
            time.sleep(60)
        yield b

load_table(slow(), TABLE, sys.argv[1])
"""


def test_killed_replace_leaves_the_previous_table_and_a_rerun_works(
    url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    load_table(batches(ROWS), TABLE, url)
    kill_midway(KILLED_LOAD, url, marker=tmp_path / 'ready')
    assert rows_of(engine) == ROWS
    assert tables_in(engine) == ["orders"]
    assert load_table(batches(numbered(300)), TABLE, url) == 300
    assert len(rows_of(engine)) == 300
    assert tables_in(engine) == ["orders"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"])),
                   min_size=1, max_size=8),
    numbers=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=8, max_size=8),
)
def test_any_text_and_number_survives_exactly(
    engine: sa.Engine, texts: list[str], numbers: list[float]
) -> None:
    rows = [{**numbered(1, start=i)[0], "Name": text, "id": text, "Amount": numbers[i]}
            for i, text in enumerate(texts)]
    load_table(batches(rows), TABLE, engine)
    got = rows_of(engine)
    assert [(r["Name"], r["id"], r["Amount"]) for r in got] == [
        (r["Name"], r["id"], r["Amount"]) for r in sorted(rows, key=lambda r: r["_id"])
    ]


def test_an_unreachable_postgresql_is_one_line_naming_the_server() -> None:
    """psycopg's message spans lines ("connection refused\n\tIs the server running..."); ours
    is one, with the host and port and no password."""
    from tests.fixtures.server import free_port

    port = free_port()
    with pytest.raises(DestinationError) as caught:
        load_table(batches(ROWS), TABLE, f"postgresql://etl@127.0.0.1:{port}/nowhere", name="orders")
    message = str(caught.value)
    assert "\n" not in message
    assert f"127.0.0.1:{port}" in message and "failed" in message
