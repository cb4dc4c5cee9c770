"""Extraction: typed record batches from the reference server, paged, concurrent, faithful."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow as pa
import pytest

from connector.api import Client, RateLimiter, RetryPolicy
from connector.arrays import string_array
from connector.errors import ConfigError, ConnectorWarning
from connector.extract import CellWarning, Extraction
from connector.schema import Table, UnknownColumnTypeWarning
from tests.fixtures.server import RunningServer, ServerFactory

EVERY_TYPE: dict[str, Any] = {
    "name": "Every type",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Active", "Inactive", "Unused"]},
        {"name": "Age", "type": "number"},
        {"name": "Member", "type": "checkbox"},
        {"name": "Joined", "type": "date"},
        {"name": "id", "type": "text"},
        {"name": "created_at", "type": "date"},
    ],
}
ADA = {"Name": "Ada", "Status": "Active", "Age": 36.5, "Member": True, "Joined": "2024-02-29",
       "id": "A-1", "created_at": "1815-12-10"}
EMPTY = {"Name": "Nobody"}


def read(server: RunningServer, table_id: str, **options: Any) -> pd.DataFrame:
    with Client(server.base_url, server.api_key) as client:
        return Extraction(client, client.get_table(table_id), **options).to_pandas()


def test_every_type_loads_with_its_dtype_and_empty_cells_are_null(server: RunningServer) -> None:
    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [ADA, EMPTY])
    frame = read(server, table_id)

    assert list(frame.columns) == ["_id", "_created_at", "_updated_at", "Name", "Status", "Age",
                                   "Member", "Joined", "id", "created_at"]
    assert frame["Name"].dtype == pd.StringDtype()
    assert list(frame["Status"].cat.categories) == ["Active", "Inactive", "Unused"]
    assert frame["Age"].dtype == pd.Float64Dtype()
    assert frame["Member"].dtype == pd.BooleanDtype()
    assert str(frame["_created_at"].dtype) == "datetime64[us, UTC]"

    # (`created_at` and `id` are the user's columns here, so the read is by the system
    # `updated_at`: the rows come in the order they were written)
    ada, nobody = frame.iloc[0], frame.iloc[1]
    assert (ada["Name"], ada["Status"], ada["Age"], ada["Member"]) == ("Ada", "Active", 36.5, True)
    assert ada["Joined"] == dt.date(2024, 2, 29)
    assert ada["id"] == "A-1" and ada["created_at"] == dt.date(1815, 12, 10)  # user columns survive
    assert ada["_id"].startswith("row_")
    assert nobody[["Status", "Age", "Member", "Joined", "id", "created_at"]].isna().all()
    assert frame["id"].tolist() == ["A-1", pd.NA]  # an empty text cell is null, never "nan"


def test_batches_carry_the_schema_of_the_selected_columns(server: RunningServer) -> None:
    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [ADA] * 250)
    with Client(server.base_url, server.api_key) as client:
        table = client.get_table(table_id)
        batches = list(Extraction(client, table, columns=["Age", "Name"]))
    assert sum(b.num_rows for b in batches) == 250
    stamp = pa.timestamp("us", tz="UTC")
    expected = pa.schema([
        pa.field("_id", pa.string(), nullable=False, metadata={"connector.system": "id"}),
        pa.field("_created_at", stamp, metadata={"connector.system": "created_at"}),
        pa.field("_updated_at", stamp, metadata={"connector.system": "updated_at"}),
        pa.field("Age", pa.float64(), metadata={"connector.type": "number"}),
        pa.field("Name", pa.string(), metadata={"connector.type": "text"}),
    ], metadata={"connector.table_id": table_id, "connector.table_name": "Every type"})
    for batch in batches:
        assert batch.schema.equals(expected, check_metadata=True), batch.schema


def test_filters_pass_through(server: RunningServer) -> None:
    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [{"Name": str(i), "Age": i, "Status": ["Active", "Inactive"][i % 2]}
                                  for i in range(300)])
    frame = read(server, table_id, filter={"status": {"eq": "Active"}, "Age": {"gt": 250}})
    assert frame["Age"].tolist() == [float(i) for i in range(252, 300, 2)]


def test_an_unknown_filter_column_is_named(server: RunningServer) -> None:
    table_id = server.create_table(EVERY_TYPE)
    with pytest.raises(ConfigError, match="'Colour'"):
        read(server, table_id, filter={"Colour": {"eq": "red"}})


@pytest.mark.parametrize(("page_size", "rows"), [(2, 101), (7, 500), (100, 1234), (1000, 2345)])
def test_every_page_size_reads_every_row_once_in_order(
    server: RunningServer, page_size: int, rows: int
) -> None:
    table_id = server.create_table(EVERY_TYPE)
    inserted = server.insert_rows(table_id, [{"Name": str(i)} for i in range(rows)])
    frame = read(server, table_id, page_size=page_size, concurrency=3)
    assert frame["_id"].tolist() == [r["id"] for r in inserted]


@pytest.mark.parametrize("page_size", [0, 1, 1001])
def test_page_size_is_checked(page_size: int) -> None:
    client = Client("http://api.test/v1", "k")
    with pytest.raises(ConfigError, match="page size"):
        Extraction(client, Table("tbl_1", "T"), page_size=page_size)


def test_faults_and_latency_do_not_change_the_result(server_factory: ServerFactory) -> None:
    faulty = server_factory(fail_rate=0.1, throttle_rate=0.1, latency_ms=10)
    table_id = faulty.create_table(EVERY_TYPE)
    inserted = faulty.insert_rows(table_id, [{**ADA, "Name": f"n{i}", "Age": i} for i in range(1500)])
    got = read(faulty, table_id)
    assert got["_id"].tolist() == [r["id"] for r in inserted]
    assert got["Name"].tolist() == [f"n{i}" for i in range(1500)]
    assert got["Age"].tolist() == [float(i) for i in range(1500)]
    assert got["_updated_at"].tolist() == [pd.Timestamp(r["updated_at"]) for r in inserted]
    others = got[["Status", "Member", "Joined", "id", "created_at"]].drop_duplicates()
    assert others.to_dict("records") == [{"Status": "Active", "Member": True,
                                          "Joined": dt.date(2024, 2, 29), "id": "A-1",
                                          "created_at": dt.date(1815, 12, 10)}]


def test_an_exported_file_holds_no_key(server: RunningServer, tmp_path: Path) -> None:
    from connector.destinations.formats import write_parquet

    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [ADA] * 10)
    with Client(server.base_url, server.api_key) as client:
        extraction = Extraction(client, client.get_table(table_id))
        assert write_parquet(extraction, extraction.schema, tmp_path / "t.parquet") == 10
    assert server.api_key.encode() not in (tmp_path / "t.parquet").read_bytes()


EXPORT_WITHOUT_PANDAS = """
import sys
from connector.api import Client
from connector.extract import Extraction
from connector.destinations.formats import write_parquet
base_url, key, table_id, out = sys.argv[1:5]
with Client(base_url, key) as client:
    extraction = Extraction(client, client.get_table(table_id))
    write_parquet(extraction, extraction.schema, out)
print(sorted(m for m in ("pandas", "sqlalchemy") if m in sys.modules))
"""


def test_an_export_to_parquet_never_imports_pandas(server: RunningServer, tmp_path: Path) -> None:
    """pandas (~37 MB) and SQLAlchemy stay out of an export's memory (pyarrow imports pandas
    on its first `pa.array` of Python objects, so extraction builds arrays from buffers)."""
    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [ADA, EMPTY, {**ADA, "Name": "Zoë ✓"}])
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_WITHOUT_PANDAS, server.base_url, server.api_key, table_id,
         str(tmp_path / "t.parquet")],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1],
    )
    assert done.stdout.strip() == "[]"
    frame = pd.read_parquet(tmp_path / "t.parquet")
    assert frame["Name"].tolist() == ["Ada", "Nobody", "Zoë ✓"]
    assert frame["Age"].tolist()[1] is pd.NA and frame["Member"].tolist() == [True, pd.NA, True]


@pytest.mark.parametrize("values", [["a", None, "Zoë ✓", ""], [], [None, None], ["x" * 70_000]])
def test_string_arrays_built_from_buffers_equal_pyarrow_s(values: list[str | None]) -> None:
    assert string_array(values).equals(pa.array(values, pa.string()))
    blanks_as_nulls = [None if v == "" else v for v in values]
    assert string_array(values, blank_is_null=True).equals(pa.array(blanks_as_nulls, pa.string()))


def test_an_empty_table_reads_as_an_empty_typed_frame(server: RunningServer) -> None:
    table_id = server.create_table(EVERY_TYPE)
    frame = read(server, table_id)
    assert len(frame) == 0
    assert frame["Age"].dtype == pd.Float64Dtype()


def test_stopping_early_stops_the_reader(server: RunningServer) -> None:
    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [{"Name": str(i)} for i in range(5000)])
    before = threading.active_count()
    with Client(server.base_url, server.api_key) as client:
        for batch in Extraction(client, client.get_table(table_id)):
            assert batch.num_rows > 0
            break
    assert threading.active_count() == before


def test_reading_works_inside_a_running_event_loop(server: RunningServer) -> None:
    """Notebooks run an event loop in the main thread; a plain read must still work there."""
    table_id = server.create_table(EVERY_TYPE)
    server.insert_rows(table_id, [ADA] * 3)

    async def in_a_notebook() -> int:
        return len(read(server, table_id))

    assert asyncio.run(in_a_notebook()) == 3


# --- what our server never sends, from a scripted one ---------------------------------------


def scripted_table(columns: list[dict[str, Any]], rows: list[dict[str, Any]], *,
                   clamp: int = 1000) -> tuple[httpx.MockTransport, list[int]]:
    offsets: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/rows"):
            return httpx.Response(200, json={"id": "tbl_1", "name": "T", "columns": columns})
        limit = min(int(request.url.params["limit"]), clamp)
        offset = int(request.url.params["offset"])
        offsets.append(offset)
        page = [{"id": f"row_{i:05}", "fields": rows[i], "created_at": "2024-01-01T00:00:00Z",
                 "updated_at": "2024-01-01T00:00:00Z"} for i in range(offset, min(offset + limit, len(rows)))]
        return httpx.Response(200, json={"rows": page, "total": len(rows), "limit": limit, "offset": offset})

    return httpx.MockTransport(handler), offsets


def scripted_read(transport: httpx.MockTransport, **options: Any) -> pd.DataFrame:
    with Client("http://api.test/v1", "k", transport=transport, limiter=RateLimiter()) as client:
        return Extraction(client, client.get_table("tbl_1"), **options).to_pandas()


def ours(caught: pytest.WarningsRecorder) -> list[str]:
    """The connector's warnings among those recorded (a recorder also takes what the garbage
    collector reports meanwhile of other tests' objects, such as a ResourceWarning)."""
    return [str(w.message) for w in caught if issubclass(w.category, ConnectorWarning)]


def test_numbers_and_checkboxes_sent_as_strings_are_parsed() -> None:
    transport, _ = scripted_table(
        [{"name": "N", "type": "number"}, {"name": "C", "type": "checkbox"}, {"name": "D", "type": "date"}],
        [{"N": "1,234.5", "C": "true", "D": "2024-01-02T00:00:00Z"}, {"N": "", "C": "", "D": ""},
         {"N": 7, "C": False, "D": None}],
    )
    frame = scripted_read(transport)
    assert frame["N"].tolist() == [1234.5, pd.NA, 7.0]
    assert frame["C"].tolist() == [True, pd.NA, False]
    assert frame["D"].tolist()[0] == dt.date(2024, 1, 2)
    assert frame["D"].isna().tolist() == [False, True, True]


def test_an_unparseable_cell_is_null_with_one_warning() -> None:
    transport, _ = scripted_table([{"name": "N", "type": "number"}],
                                  [{"N": "lots"}, {"N": "many"}, {"N": 3}])
    with pytest.warns(CellWarning, match="'N': 2 value") as caught:
        frame = scripted_read(transport)
    assert len(ours(caught)) == 1
    assert frame["N"].tolist() == [pd.NA, pd.NA, 3.0]


def test_an_unknown_column_type_reads_as_text_with_one_warning() -> None:
    transport, _ = scripted_table([{"name": "Where", "type": "geopoint"}, {"name": "Also", "type": "geopoint"}],
                                  [{"Where": "52.5,13.4", "Also": 1}, {}])
    with pytest.warns(UnknownColumnTypeWarning, match="geopoint") as caught:
        frame = scripted_read(transport)
    assert len(ours(caught)) == 1
    assert frame["Where"].tolist() == ["52.5,13.4", pd.NA]
    assert frame["Also"].dtype == pd.StringDtype()


def test_a_choice_value_outside_the_options_is_kept_in_arrow() -> None:
    transport, _ = scripted_table([{"name": "S", "type": "choice", "options": ["a"]}],
                                  [{"S": "a"}, {"S": "z"}])
    with Client("http://api.test/v1", "k", transport=transport) as client:
        arrow = Extraction(client, client.get_table("tbl_1")).to_arrow()
    assert arrow.column("S").to_pylist() == ["a", "z"]


def test_pages_advance_by_the_applied_limit() -> None:
    rows = [{"N": i} for i in range(120)]
    transport, offsets = scripted_table([{"name": "N", "type": "number"}], rows, clamp=25)
    frame = scripted_read(transport, page_size=100, concurrency=2)
    assert frame["N"].tolist() == [float(i) for i in range(120)]
    # pages overlap by one row, to check each page starts where the last one ended
    assert offsets == [0, 24, 48, 72, 96]


def test_pages_after_the_first_are_fetched_concurrently_but_bounded() -> None:
    in_flight = peak = 0
    lock = threading.Lock()
    rows = [{"N": i} for i in range(1000)]
    plain, _ = scripted_table([{"name": "N", "type": "number"}], rows)

    class Slow(httpx.MockTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            nonlocal in_flight, peak
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            await asyncio.sleep(0.02)
            with lock:
                in_flight -= 1
            return self.handle_request(request)

    frame = scripted_read(Slow(plain.handler), page_size=50, concurrency=3)
    assert len(frame) == 1000
    assert peak == 3


def test_one_page_size_table_edge_needs_no_extra_reads() -> None:
    transport, offsets = scripted_table([{"name": "N", "type": "number"}], [{"N": 1}] * 10)
    assert len(scripted_read(transport)) == 10
    assert offsets == [0]


def test_arrow_types_and_metadata_are_the_documented_ones() -> None:
    transport, _ = scripted_table([{"name": "S", "type": "choice", "options": ["a", "b"]}], [{"S": "b"}])
    with Client("http://api.test/v1", "k", transport=transport, retry=RetryPolicy.off()) as client:
        table = client.get_table("tbl_1")
        arrow = Extraction(client, table).to_arrow()
    stamp = pa.timestamp("us", tz="UTC")
    assert arrow.schema.equals(pa.schema([
        pa.field("_id", pa.string(), nullable=False, metadata={"connector.system": "id"}),
        pa.field("_created_at", stamp, metadata={"connector.system": "created_at"}),
        pa.field("_updated_at", stamp, metadata={"connector.system": "updated_at"}),
        pa.field("S", pa.dictionary(pa.int32(), pa.string()),
                 metadata={"connector.type": "choice", "connector.options": '["a", "b"]'}),
    ], metadata={"connector.table_id": "tbl_1", "connector.table_name": "T"}), check_metadata=True)
