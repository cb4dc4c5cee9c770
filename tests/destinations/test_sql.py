"""SQL destinations on SQLite and a real PostgreSQL, through the destination protocol: types,
modes, atomic replace, hostile names, errors without passwords, COPY specifics.

Read back with SQLAlchemy's own reflection and queries (no code under test). Modes, marks,
schema changes and failed streams for every kind: `test_conformance`.
"""

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

from connector.destinations import Committed
from connector.destinations.evolve import AddColumn
from connector.errors import ConfigError, DestinationError
from connector.modes import WriteMode
from connector.schema import Column, Table, arrow_schema
from tests.destinations.helpers import apply, config
from tests.destinations.samples import ROWS, TABLE, batch, batches, kill_midway, numbered


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.needs_server)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'warehouse.db'}"
    return str(request.getfixturevalue("postgres_db"))


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()


def load(url: str, rows: Any, mode: WriteMode = "replace", **options: Any) -> Committed:
    """`rows` (dicts or batches) applied to the table ``orders`` at `url`."""
    return apply(config("url", url, mode), rows, **options)


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
    assert load(url, batches(ROWS, size=3)) == Committed(written=len(ROWS))
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
    load(url, batches(ROWS))
    assert load(url, batches(numbered(250))) == Committed(written=250)
    assert [r["_id"] for r in rows_of(engine)] == sorted(f"row_{i}" for i in range(250))
    assert tables_in(engine) == ["orders"]


def test_replace_with_no_rows_leaves_an_empty_typed_table(url: str, engine: sa.Engine) -> None:
    load(url, batches(ROWS))
    assert load(url, []) == Committed(written=0)
    assert rows_of(engine) == []
    assert len(sa.inspect(engine).get_columns("orders")) == len(ROWS[0])


def test_append_adds_rows_and_columns_added_upstream(url: str, engine: sa.Engine) -> None:
    load(url, batches(ROWS[:2]), mode="append")
    grown = Table(TABLE.id, TABLE.name, (*TABLE.columns, Column("Notes", "text")))
    row = {**numbered(1, start=5)[0], "Notes": "added later"}
    batch_ = pa.RecordBatch.from_pylist([row], schema=arrow_schema(grown))
    done = load(url, [batch_], mode="append", table=grown, evolve=(AddColumn("Notes", "text"),))
    assert done == Committed(written=1)
    got = rows_of(engine)
    assert [r["_id"] for r in got] == ["row_1", "row_2", "row_5"]
    assert [r["Notes"] for r in got] == [None, None, "added later"]


def test_append_again_adds_only_new_ids_and_leaves_held_rows_unchanged(
    url: str, engine: sa.Engine
) -> None:
    assert load(url, batches(ROWS[:2]), mode="append") == Committed(written=2)
    edited = {**ROWS[0], "Name": "changed upstream"}
    # A second full read: the same two ids (one edited since) plus a new one, over COPY's
    # temp table on PostgreSQL.
    again = batches([edited, ROWS[1], numbered(1, start=5)[0]], size=2)
    assert load(url, again, mode="append") == Committed(written=1)
    got = rows_of(engine)
    assert [r["_id"] for r in got] == ["row_1", "row_2", "row_5"]
    assert got[0] == ROWS[0]  # held rows are left as they were, not updated
    assert tables_in(engine) == ["orders"]


def test_merge_upserts_by_row_id_and_deletes_in_the_same_transaction(
    url: str, engine: sa.Engine
) -> None:
    load(url, batches(ROWS))
    changed = {**ROWS[0], "Name": "Ada Lovelace", "Amount": None, "Status": "closed"}
    new = numbered(1, start=8)[0]
    done = load(url, [batch([changed, new])], mode="merge", deleted=["row_2", "row_missing"])
    assert done == Committed(written=2, deleted=1)
    assert rows_of(engine) == [changed, ROWS[2], ROWS[3], new]


def test_a_merge_that_marks_stamps_in_the_same_transaction(url: str, engine: sa.Engine) -> None:
    """One transaction: the upsert clears a returning row's mark (``ON CONFLICT``), the
    deletions are stamped; no second commit in between."""
    load(url, batches(ROWS), mode="merge", mark=True)
    load(url, [], mode="merge", deleted=["row_1", "row_2"], mark=True)
    done = load(url, [batch([ROWS[0]])], mode="merge", deleted=["row_3"], mark=True)
    assert done == Committed(written=1, deleted=1)
    marks = {r["_id"]: r["_deleted_at"] for r in rows_of(engine)}
    assert marks["row_1"] is None and marks["row_4"] is None
    assert marks["row_2"] is not None and marks["row_3"] is not None


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

    def one(r: dict[str, Any]) -> list[pa.RecordBatch]:
        return [pa.RecordBatch.from_pylist([r], schema=schema)]

    load(url, one(row), table=hostile)
    load(url, one(changed), mode="merge", table=hostile)
    load(url, one(other), mode="append", table=hostile)
    assert load(url, [], mode="merge", table=hostile, deleted=["row_2"]).deleted == 1
    load(url, [], mode="merge", table=hostile, deleted=["row_9"], mark=True)  # a mark column added
    assert tables_in(engine) == sorted([HOSTILE, "y"])
    assert rows_of(engine, HOSTILE) == [{**changed, "_deleted_at": None}]


def test_database_errors_name_the_table_and_hide_the_password(url: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:  # a view where the table should be: it cannot be rebuilt
        conn.exec_driver_sql('CREATE VIEW orders AS SELECT 1 AS "_id"')
    secret_url = sa.make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)
    with pytest.raises(DestinationError, match="'orders'") as failure:
        load(secret_url, batches(ROWS), mode="merge")
    assert "s3cret-pw" not in str(failure.value)


def test_a_value_postgresql_refuses_in_copy_is_a_clear_error(postgres_db: str) -> None:
    load(postgres_db, batches(ROWS))
    bad = {**ROWS[0], "_id": "row_9", "Name": "nul \x00 byte"}  # PostgreSQL text cannot hold NUL
    with pytest.raises(DestinationError, match=r"'orders'.*0x00"):
        load(postgres_db, [batch([bad])], mode="merge")
    engine = sa.create_engine(postgres_db)
    try:
        assert rows_of(engine) == ROWS
    finally:
        engine.dispose()


def test_a_name_postgresql_would_truncate_is_refused(postgres_db: str) -> None:
    long_name = "a table name that is far too long for postgresql identifiers, sadly"
    with pytest.raises(ConfigError, match="limit of 63 bytes"):
        load(postgres_db, batches(ROWS), name=long_name)
    engine = sa.create_engine(postgres_db)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_bad_url_and_mode_are_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="'nosuchdb'") as failure:
        config("url", "nosuchdb://user:pw-secret@host/db")
    assert "pw-secret" not in str(failure.value)
    with pytest.raises(ConfigError, match="mode"):
        config("url", "sqlite:///w.db", mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="in-memory database keeps nothing"):
        config("url", "sqlite://")


def test_readers_never_see_a_partial_or_empty_table_during_replace(
    url: str, engine: sa.Engine
) -> None:
    old, new = 500, 1000
    load(url, batches(numbered(old)))
    seen: list[int] = []
    errors: list[BaseException] = []
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
        for b in batches(numbered(new, name="new")):
            time.sleep(0.01)
            yield b

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        load(url, slow())
    finally:
        done.set()
        thread.join(timeout=30)
    assert not errors, errors
    assert set(seen) <= {old, new}, sorted(set(seen))
    assert seen.count(old) > 0 and seen[-1] == new


KILLED_LOAD = """
import pathlib, sys, time
from tests.destinations.helpers import apply, config
from tests.destinations.samples import batches, numbered

def slow():
    for i, b in enumerate(batches(numbered(5000, name="new"))):
        if i == 20:
            pathlib.Path(sys.argv[3]).touch()
            time.sleep(60)
        yield b

apply(config("url", sys.argv[1]), slow(), mode=sys.argv[2], deleted=["row_1"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["replace", "merge"])
def test_a_killed_write_leaves_the_previous_table_and_a_rerun_works(
    url: str, engine: sa.Engine, tmp_path: Path, mode: str
) -> None:
    load(url, batches(ROWS))
    kill_midway(KILLED_LOAD, url, mode, marker=tmp_path / "ready")
    assert rows_of(engine) == ROWS
    assert tables_in(engine) == ["orders"]
    assert load(url, batches(numbered(300))) == Committed(written=300)
    assert len(rows_of(engine)) == 300
    assert tables_in(engine) == ["orders"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"])),
                   min_size=1, max_size=8),
    numbers=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=8, max_size=8),
)
def test_any_text_and_number_survives_exactly(
    url: str, engine: sa.Engine, texts: list[str], numbers: list[float]
) -> None:
    rows = [{**numbered(1, start=i)[0], "Name": text, "id": text, "Amount": numbers[i]}
            for i, text in enumerate(texts)]
    load(url, batches(rows))
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
        load(f"postgresql://etl:pw-hidden@127.0.0.1:{port}/nowhere", batches(ROWS))
    message = str(caught.value)
    assert "\n" not in message and "pw-hidden" not in message
    assert f"127.0.0.1:{port}" in message and "failed" in message
