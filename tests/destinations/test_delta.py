"""Delta Lake destinations: each write one commit; read back with deltalake and DuckDB.

Local folders, a real S3-compatible server (moto) and Azure Blob (Azurite). A merge's upserts and deletions (or
marks) are one version of the table; a write that fails leaves the previous version.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from deltalake import DeltaTable

from connector.cli import main
from connector.destinations import Committed, DestinationConfig, Target, open_destination
from connector.destinations.formats import ROW_GROUP_ROWS
from connector.errors import DestinationError
from tests.destinations.helpers import apply, config
from tests.destinations.samples import ROWS, TABLE, batch, batches, numbered
from tests.destinations.test_cli import EXPECTED, FIELDS, SPEC
from tests.fixtures.azurite import AzureContainer
from tests.fixtures.s3 import S3Bucket
from tests.fixtures.server import RunningServer


def run(server: RunningServer, *args: str) -> Result:
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, list(args), env=env)


def s3_options(s3: S3Bucket) -> dict[str, str]:
    """How a reader outside our code reaches the moto server."""
    return {"AWS_ENDPOINT_URL": s3.server.endpoint, "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing"}


def duck(table: DeltaTable, sql: str) -> list[tuple[Any, ...]]:
    """`sql` over the table (named t) in DuckDB, fed from deltalake's Arrow dataset."""
    t = table.to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    return duckdb.sql(sql).fetchall()


def by_name(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    columns = ["Status", "Amount", "Paid", "Due", "Order Date"]
    return {r["Name"]: tuple(r[c] for c in columns) for r in rows}


@pytest.fixture
def orders(server: RunningServer) -> tuple[RunningServer, str]:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, FIELDS)
    return server, table_id


def test_export_to_delta_keeps_types_and_replaces_in_one_commit(
    orders: tuple[RunningServer, str], tmp_path: Path
) -> None:
    server, table_id = orders
    result = run(server, "export", "--format", "delta", "--out", str(tmp_path / "lake"))
    assert result.exit_code == 0, result.output
    table = DeltaTable(str(tmp_path / "lake" / "orders"))
    types = {f.name: str(f.type) for f in table.to_pyarrow_dataset().schema}
    assert types["Amount"] == "double" and types["Paid"] == "bool" and types["Due"] == "date32[day]"
    assert types["_updated_at"] == "timestamp[us, tz=UTC]" and types["Status"] in ("string", "large_string", "string_view")
    assert by_name(table.to_pyarrow_table().to_pylist()) == EXPECTED
    assert duck(table, "SELECT count(*), count(Due), typeof(any_value(Due)) FROM t") == [(3, 2, "DATE")]

    server.insert_rows(table_id, [{"Name": "Zed"}])
    assert run(server, "export", "--format", "delta", "--out", str(tmp_path / "lake")).exit_code == 0
    table = DeltaTable(str(tmp_path / "lake" / "orders"))
    assert table.version() == 1  # the replace was one commit
    assert table.history()[0]["operation"] in ("WRITE", "CREATE OR REPLACE TABLE")
    assert table.to_pyarrow_table().num_rows == 4
    assert DeltaTable(str(tmp_path / "lake" / "orders"), version=0).to_pyarrow_table().num_rows == 3


@pytest.fixture(params=[pytest.param(p, marks=pytest.mark.needs_server) for p in ("s3", "az")])
def store(request: pytest.FixtureRequest) -> S3Bucket | AzureContainer:
    """A bucket or container on an object store Delta runs on (gs://: tests/jobs/test_lake_jobs.py)."""
    store: S3Bucket | AzureContainer = request.getfixturevalue(
        "s3" if request.param == "s3" else "azure"
    )
    return store


def options_for(store: S3Bucket | AzureContainer) -> dict[str, str]:
    return s3_options(store) if isinstance(store, S3Bucket) else store.delta_options()


def test_export_to_delta_on_object_storage(
    orders: tuple[RunningServer, str], store: S3Bucket | AzureContainer
) -> None:
    server, table_id = orders
    result = run(server, "export", "--format", "delta", "--out", store.url("lake"))
    assert result.exit_code == 0, result.output
    assert f"-> {store.url('lake/orders')}" in result.output
    assert any(k.startswith("lake/orders/_delta_log/") for k in store.objects())
    table = DeltaTable(store.url("lake/orders"), storage_options=options_for(store))
    assert by_name(table.to_pyarrow_table().to_pylist()) == EXPECTED
    assert duck(table, "SELECT count(*) FROM t WHERE Paid") == [(1,)]

    server.insert_rows(table_id, [{"Name": "Zed"}])
    assert run(server, "export", "--format", "delta", "--out", store.url("lake")).exit_code == 0
    table = DeltaTable(store.url("lake/orders"), storage_options=options_for(store))
    assert table.version() == 1  # the replace was one commit
    assert sorted(r["Name"] for r in table.to_pyarrow_table().to_pylist()) == sorted([*EXPECTED, "Zed"])


@pytest.fixture(
    params=["local", *(pytest.param(p, marks=pytest.mark.needs_server) for p in ("s3", "az"))])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The folder of Delta tables: a local one, or a prefix on the S3 server or Azurite."""
    if request.param == "local":
        return str(tmp_path / "lake")
    store: S3Bucket | AzureContainer = request.getfixturevalue(
        "s3" if request.param == "s3" else "azure"
    )
    return store.url("lake")


def reader_options(uri: str, request: pytest.FixtureRequest) -> dict[str, str] | None:
    if uri.startswith("s3://"):
        return s3_options(request.getfixturevalue("s3"))
    if uri.startswith("az://"):
        container: AzureContainer = request.getfixturevalue("azure")
        return container.delta_options()
    return None


def delta(lake: str, mode: str = "replace") -> DestinationConfig:
    return config("delta", lake, mode)  # type: ignore[arg-type]


def rows_of(uri: str, options: dict[str, str] | None) -> dict[str, dict[str, Any]]:
    table = DeltaTable(uri, storage_options=options)
    return {r["_id"]: r for r in table.to_pyarrow_table().to_pylist()}


def test_merge_upserts_and_deletes_in_one_commit(lake: str, request: pytest.FixtureRequest) -> None:
    uri, options = f"{lake}/orders", reader_options(lake, request)
    assert apply(delta(lake), batches(numbered(10))) == Committed(written=10)
    changed = numbered(2, start=8, name="changed") + numbered(2, start=10, name="new")
    done = apply(delta(lake, "merge"), batches(changed), deleted=["row_0", "row_1", "row_unknown"])
    assert done == Committed(written=4, deleted=2)
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 1  # rows and deletions: one commit
    assert table.history()[0]["operation"] == "MERGE"
    held = rows_of(uri, options)
    assert sorted(held) == sorted(f"row_{i}" for i in range(2, 12))
    assert held["row_9"]["Name"] == "changed 9" and held["row_11"]["Name"] == "new 11"
    assert held["row_5"]["Name"] == "row 5" and held["row_5"]["Due"] == date(2024, 1, 6)
    assert "_deleted_at" not in held["row_5"]


def test_mark_stamps_deleted_rows_and_clears_returning_ones_a_commit_each(
    lake: str, request: pytest.FixtureRequest
) -> None:
    uri, options = f"{lake}/orders", reader_options(lake, request)
    apply(delta(lake, "merge"), batches(numbered(5)), mark=True)
    assert apply(delta(lake, "merge"), [], deleted=["row_0", "row_1"], mark=True) == Committed(
        deleted=2)
    first = rows_of(uri, options)
    assert len(first) == 5
    stamped = {i: r["_deleted_at"] for i, r in first.items() if r["_deleted_at"] is not None}
    assert sorted(stamped) == ["row_0", "row_1"]

    # row_1 deleted again (its first stamp stays); row_0 comes back; row_2 is deleted now
    done = apply(delta(lake, "merge"), batches(numbered(1, name="back")),
                 deleted=["row_1", "row_2"], mark=True)
    assert done == Committed(written=1, deleted=1)
    assert DeltaTable(uri, storage_options=options).version() == 2  # one commit a merge
    second = rows_of(uri, options)
    assert second["row_0"]["_deleted_at"] is None and second["row_0"]["Name"] == "back 0"
    assert second["row_1"]["_deleted_at"] == stamped["row_1"]
    assert second["row_2"]["_deleted_at"] is not None and second["row_3"]["_deleted_at"] is None


def test_append_adds_only_new_ids_in_one_commit(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    apply(delta(lake), batches(numbered(3)))
    again = numbered(3, name="ignored") + numbered(2, start=3)
    assert apply(delta(lake, "append"), batches(again)) == Committed(written=2)
    table = DeltaTable(f"{lake}/orders")
    assert table.version() == 1
    held = rows_of(f"{lake}/orders", None)
    assert len(held) == 5 and held["row_0"]["Name"] == "row 0" and held["row_4"]["Name"] == "row 4"


def test_every_type_survives(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    apply(delta(lake), [batch(ROWS)])
    back = DeltaTable(f"{lake}/orders").to_pyarrow_table().to_pylist()
    assert back == ROWS  # choices come back as their text, timestamps as UTC


def test_a_scan_reads_every_column_in_the_type_the_table_holds(tmp_path: Path) -> None:
    """Our reads go through deltalake's own scan, which hands text over as string views:
    what a scan yields must be the table's own types and values, as deltalake's Arrow
    table reads them."""
    lake = str(tmp_path / "lake")
    apply(delta(lake), [batch(ROWS)])
    held = DeltaTable(f"{lake}/orders").to_pyarrow_table()
    destination = open_destination(delta(lake))
    try:
        read = pa.Table.from_batches(
            destination.scan(Target(TABLE, "orders"), held.schema.names), schema=held.schema
        )
    finally:
        destination.close()
    assert [f.type for f in read.schema] == [f.type for f in held.schema]
    assert sorted(read.to_pylist(), key=lambda r: r["_id"]) == sorted(
        held.to_pylist(), key=lambda r: r["_id"]
    )


def test_data_files_have_our_row_groups_compressed(tmp_path: Path) -> None:
    """deltalake holds a row group's pages until it is full (its default: 1M rows, a whole
    table held): the files it writes for us, by a replace and by a merge, have row groups of
    at most `ROW_GROUP_ROWS` and stay compressed."""
    lake = str(tmp_path / "lake")
    apply(delta(lake), batches(numbered(2 * ROW_GROUP_ROWS + 10), size=1000))
    more = numbered(ROW_GROUP_ROWS + 10, start=2 * ROW_GROUP_ROWS, name="new")  # 10 held ids
    apply(delta(lake, "merge"), batches(more, size=1000))
    table = DeltaTable(f"{lake}/orders")
    assert table.version() == 1 and len(rows_of(f"{lake}/orders", None)) == 3 * ROW_GROUP_ROWS + 10
    files = table.file_uris()
    assert files
    for uri in files:
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        assert max(meta.row_group(g).num_rows for g in range(meta.num_row_groups)) <= ROW_GROUP_ROWS
        assert {meta.row_group(0).column(c).compression for c in range(meta.num_columns)} == {"SNAPPY"}


class Boom(Exception):
    pass


def failing(rows: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    yield from batches(rows, size=2)
    raise Boom("the read failed mid-way")


def test_a_failed_write_or_merge_leaves_the_previous_version(
    lake: str, request: pytest.FixtureRequest
) -> None:
    uri, options = f"{lake}/orders", reader_options(lake, request)
    apply(delta(lake), batches(numbered(4)))
    with pytest.raises(Boom):  # the stream's own error, not a DestinationError
        apply(delta(lake), failing(numbered(6, name="new")))
    with pytest.raises(Boom):
        apply(delta(lake, "merge"), failing(numbered(6, name="new")), deleted=["row_0"])
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 0
    assert sorted(r["Name"] for r in rows_of(uri, options).values()) == [f"row {i}" for i in range(4)]


def test_a_storage_failure_is_one_destination_error(s3: S3Bucket) -> None:
    with pytest.raises(DestinationError, match="s3://no-such-bucket-here/t") as caught:
        apply(delta("s3://no-such-bucket-here/t"), batches(numbered(2)))
    assert "\n" not in str(caught.value) and "testing" not in str(caught.value)
