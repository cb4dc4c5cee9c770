"""Parquet files through the destination protocol: every type reads back right in pyarrow,
pandas and DuckDB; the file says what it was extracted from; writes are atomic (a failed or
killed write leaves the previous file). Modes, marks, schema changes for every kind:
`test_conformance`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.destinations import Committed, DestinationConfig, Target, open_destination
from connector.destinations.evolve import AddColumn
from connector.destinations.formats import ROW_GROUP_ROWS
from connector.errors import DestinationError
from connector.schema import Column, Table, arrow_schema
from tests.destinations.helpers import apply, config
from tests.destinations.samples import (
    OPTIONS,
    ROWS,
    SCHEMA,
    TABLE,
    batch,
    batches,
    kill_midway,
    numbered,
)


def parquet(folder: Path, mode: str = "replace") -> DestinationConfig:
    return config("parquet", str(folder), mode)  # type: ignore[arg-type]


@pytest.fixture
def extracted(tmp_path: Path) -> tuple[Path, datetime, datetime]:
    """ROWS written to ``out/orders.parquet``, with the times before and after the write."""
    before = datetime.now(UTC)
    assert apply(parquet(tmp_path / "out"), batches(ROWS, size=2)) == Committed(written=len(ROWS))
    return tmp_path / "out" / "orders.parquet", before, datetime.now(UTC)


@pytest.fixture
def exported(extracted: tuple[Path, datetime, datetime]) -> Path:
    return extracted[0]


def test_pyarrow_reads_every_type_and_value_back(exported: Path) -> None:
    read = pq.read_table(exported)
    assert {f.name: f.type for f in read.schema} == {
        "_id": pa.string(),
        "_created_at": pa.timestamp("us", tz="UTC"),
        "_updated_at": pa.timestamp("us", tz="UTC"),
        "Name": pa.string(),
        "Status": pa.dictionary(pa.int32(), pa.string()),
        "Amount": pa.float64(),
        "Paid": pa.bool_(),
        "Due": pa.date32(),
        "id": pa.string(),
        "created_at": pa.string(),
    }
    assert read.to_pylist() == ROWS


def test_pandas_reads_nullable_dtypes_and_every_choice_option(exported: Path) -> None:
    frame = pd.read_parquet(exported)
    assert {name: str(dtype) for name, dtype in frame.dtypes.items()} == {
        "_id": "string",
        "_created_at": "datetime64[us, UTC]",
        "_updated_at": "datetime64[us, UTC]",
        "Name": "string",
        "Status": "category",
        "Amount": "Float64",
        "Paid": "boolean",
        "Due": "date32[day][pyarrow]",
        "id": "string",
        "created_at": "string",
    }
    assert list(frame["Status"].cat.categories) == list(OPTIONS)
    empty = frame.iloc[2]
    assert empty["Name"] == ""  # an empty string stays a string
    for column in ("Status", "Amount", "Paid", "Due", "id", "created_at"):
        assert pd.isna(empty[column]), column
    assert frame["Amount"].tolist()[:2] == [12.5, -0.1]
    assert frame["Paid"].tolist()[:2] == [True, False]
    assert frame["_created_at"].iloc[0] == pd.Timestamp("2024-03-01 12:30:15.123456", tz="UTC")


def test_duckdb_reads_sql_types_and_nulls(exported: Path) -> None:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    relation = con.read_parquet(str(exported))
    assert dict(zip(relation.columns, map(str, relation.types), strict=True)) == {
        "_id": "VARCHAR",
        "_created_at": "TIMESTAMP WITH TIME ZONE",
        "_updated_at": "TIMESTAMP WITH TIME ZONE",
        "Name": "VARCHAR",
        "Status": "VARCHAR",
        "Amount": "DOUBLE",
        "Paid": "BOOLEAN",
        "Due": "DATE",
        "id": "VARCHAR",
        "created_at": "VARCHAR",
    }
    got = con.execute(
        'SELECT "_id", CAST("_created_at" AS VARCHAR), "Status", "Amount", "Paid", "Due" FROM read_parquet(?) '
        'ORDER BY "_id"',
        [str(exported)],
    ).fetchall()
    assert got == [
        ("row_1", "2024-03-01 12:30:15.123456+00", "open", 12.5, True, date(2024, 3, 31)),
        ("row_2", "2024-03-01 12:30:15.123456+00", "on hold", -0.1, False, date(1970, 1, 1)),
        ("row_3", "2025-01-02 03:04:05+00", None, None, None, None),
        ("row_4", "2025-01-02 03:04:05+00", "closed", 1e300, True, date(2999, 12, 31)),
    ]


def test_file_says_what_it_was_extracted_from(extracted: tuple[Path, datetime, datetime]) -> None:
    exported, before, after = extracted
    schema = pq.read_schema(exported)
    meta = schema.metadata
    assert meta[b"connector.table_id"] == b"tbl_orders"
    assert meta[b"connector.table_name"] == b"orders"
    assert before <= datetime.fromisoformat(meta[b"connector.extracted_at"].decode()) <= after
    columns = json.loads(meta[b"connector.columns"])
    assert columns[:3] == [
        {"name": "_id", "system": "id"},
        {"name": "_created_at", "system": "created_at"},
        {"name": "_updated_at", "system": "updated_at"},
    ]
    assert {"name": "Status", "type": "choice", "options": list(OPTIONS)} in columns
    assert {"name": "Due", "type": "date"} in columns
    assert schema.field("Status").metadata[b"connector.options"] == json.dumps(list(OPTIONS)).encode()
    # the same description is visible to tools that read only Parquet key/value metadata
    kv = duckdb.sql(f"SELECT key FROM parquet_kv_metadata('{exported}')").fetchall()
    assert (b"connector.columns",) in kv


def test_pages_are_gathered_into_large_row_groups(tmp_path: Path) -> None:
    rows = numbered(ROW_GROUP_ROWS + 100)
    assert apply(parquet(tmp_path), batches(rows, size=1000)) == Committed(written=len(rows))
    meta = pq.ParquetFile(tmp_path / "orders.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [ROW_GROUP_ROWS, 100]


def test_a_table_without_rows_is_a_valid_empty_file(tmp_path: Path) -> None:
    assert apply(parquet(tmp_path), []) == Committed()
    read = pq.read_table(tmp_path / "orders.parquet")
    assert read.num_rows == 0
    assert read.schema.names == SCHEMA.names


def test_a_choice_value_outside_the_options_is_kept(tmp_path: Path) -> None:
    apply(parquet(tmp_path), [batch([{**ROWS[0], "Status": "archived"}])])
    frame = pd.read_parquet(tmp_path / "orders.parquet")
    assert frame["Status"].tolist() == ["archived"]
    assert list(frame["Status"].cat.categories) == [*OPTIONS, "archived"]


@pytest.mark.parametrize("mode", ["replace", "append", "merge"])
def test_a_failed_write_leaves_the_previous_file_untouched(exported: Path, mode: str) -> None:
    """Past the first row group: bytes of the new file were already written aside."""
    before = exported.read_bytes()

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(numbered(ROW_GROUP_ROWS + 10), size=5000)
        raise RuntimeError("the API went away")

    with pytest.raises(RuntimeError, match="went away"):
        apply(parquet(exported.parent, mode), failing(), deleted=["row_1"])
    assert exported.read_bytes() == before
    assert [p.name for p in exported.parent.iterdir()] == [exported.name]  # no temp file left


KILLED_EXPORT = """
import pathlib, sys, time
import pyarrow as pa
from connector.ids import IdSet
from tests.destinations.helpers import apply, config
from tests.destinations.samples import batches, numbered

rows = numbered(100_000)

def slow():
    for i, b in enumerate(batches(rows, size=1000)):
        if i == 70:  # past the first row group: bytes are already in the temp file
            pathlib.Path(sys.argv[3]).touch()
            time.sleep(60)
        yield b

ids = IdSet.of([pa.array([r["_id"] for r in rows])])  # given, as the runner does: rows stream
apply(config("parquet", sys.argv[1], sys.argv[2]), slow(), deleted=["row_1"], ids=ids)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["replace", "merge"])
def test_a_killed_write_leaves_the_previous_file_and_a_rerun_works(exported: Path, mode: str) -> None:
    before = exported.read_bytes()
    kill_midway(KILLED_EXPORT, str(exported.parent), mode, marker=exported.parent.parent / "ready")
    assert exported.read_bytes() == before
    partial = [p for p in exported.parent.iterdir() if p != exported]
    assert len(partial) == 1 and partial[0].stat().st_size > 0  # the killed write's leftover
    assert sorted(exported.parent.glob("*.parquet")) == [exported]  # invisible to globs

    assert apply(parquet(exported.parent), batches(numbered(10))) == Committed(written=10)
    assert pq.read_table(exported).column("_id").to_pylist() == [f"row_{i}" for i in range(10)]


def test_merge_upserts_by_row_id_and_drops_deleted_rows(exported: Path) -> None:
    changed = {**ROWS[1], "Name": "Grace", "Paid": True}
    new = numbered(1, start=9)[0]
    done = apply(parquet(exported.parent, "merge"), [batch([changed, new])], deleted=["row_3"])
    assert done == Committed(written=2, deleted=1)
    rows = {r["_id"]: r for r in pq.read_table(exported).to_pylist()}
    assert sorted(rows) == ["row_1", "row_2", "row_4", "row_9"]
    assert rows["row_2"] == changed
    assert rows["row_1"] == ROWS[0]
    assert rows["row_9"] == new


def test_merge_into_a_missing_file_writes_it(tmp_path: Path) -> None:
    assert apply(parquet(tmp_path, "merge"), batches(ROWS)) == Committed(written=len(ROWS))
    assert pq.read_table(tmp_path / "orders.parquet").to_pylist() == ROWS


def test_merge_after_a_column_was_added_upstream_keeps_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "orders.parquet"
    apply(parquet(tmp_path), batches(ROWS))
    grown = Table(TABLE.id, TABLE.name, (*TABLE.columns, Column("Notes", "text")))
    schema = arrow_schema(grown)
    fresh = {**numbered(1, start=7)[0], "Notes": "new column"}
    apply(parquet(tmp_path, "merge"), [pa.RecordBatch.from_pylist([fresh], schema=schema)],
          table=grown, evolve=(AddColumn("Notes", "text"),))
    rows = pq.read_table(path).to_pylist()
    assert pq.read_schema(path).field("Notes").metadata[b"connector.type"] == b"text"
    assert [r["_id"] for r in rows] == ["row_1", "row_2", "row_3", "row_4", "row_7"]
    assert [r["Notes"] for r in rows] == [None, None, None, None, "new column"]


def test_an_unwritable_destination_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the export directory should be")
    with pytest.raises(DestinationError, match="not-a-directory"):
        apply(parquet(blocker), batches(ROWS))


def test_a_file_that_is_not_parquet_is_a_clear_error_and_stays(tmp_path: Path) -> None:
    junk = tmp_path / "orders.parquet"
    junk.write_bytes(b"not a parquet file")
    destination = open_destination(parquet(tmp_path))
    try:
        with pytest.raises(DestinationError, match=r"^reading .*orders\.parquet failed: "):
            destination.stored(Target(TABLE, "orders"))
        with pytest.raises(DestinationError, match=r"^reading .*orders\.parquet failed: "):
            list(destination.scan(Target(TABLE, "orders"), ["_id"]))
    finally:
        destination.close()
    with pytest.raises(DestinationError, match=r"orders\.parquet failed: "):
        apply(parquet(tmp_path, "merge"), batches(ROWS))
    assert junk.read_bytes() == b"not a parquet file"
