"""CSV files through the destination protocol: a header, quoted text so empty strings and
nulls differ, replaced whole and atomically; no other mode."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from connector.destinations import (
    Committed,
    DestinationConfig,
    TableChange,
    Target,
    open_destination,
)
from connector.errors import ConfigError
from tests.destinations.helpers import apply, config
from tests.destinations.samples import ROWS, SCHEMA, TABLE, batches
from tests.fixtures.server import RunningServer


def csv(folder: Path, **options: bool) -> DestinationConfig:
    return config("csv", str(folder), **options)


def test_csv_has_a_header_and_tells_empty_text_from_null(tmp_path: Path) -> None:
    assert apply(csv(tmp_path), batches(ROWS[1:3])) == Committed(written=2)
    assert (tmp_path / "orders.csv").read_text(encoding="utf-8").splitlines() == [
        '"_id","_created_at","_updated_at","Name","Status","Amount","Paid","Due","id","created_at"',
        '"row_2","2024-03-01 12:30:15.123456Z","2024-03-01 12:30:15.123456Z",'
        '"quote "" comma , newline ',
        ' end","on hold",-0.1,false,1970-01-01,"",',
        '"row_3","2025-01-02 03:04:05.000000Z","2025-01-02 03:04:05.000000Z","",,,,,,',
    ]


def test_csv_reads_back_to_the_same_values(tmp_path: Path) -> None:
    apply(csv(tmp_path), batches(ROWS, size=3))
    types = {f.name: f.type.value_type if pa.types.is_dictionary(f.type) else f.type for f in SCHEMA}
    read = pacsv.read_csv(
        tmp_path / "orders.csv",
        convert_options=pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False
        ),
    )
    assert read.to_pylist() == ROWS


def test_excel_safe_neutralises_formulas_in_text_only(tmp_path: Path) -> None:
    rows = [{**ROWS[0], "Name": "=1+1", "Status": "open", "Amount": -2.0, "id": "@x"}]
    apply(csv(tmp_path, excel_safe=True), batches(rows))
    read = pacsv.read_csv(tmp_path / "orders.csv").to_pylist()
    assert (read[0]["Name"], read[0]["id"], read[0]["Amount"]) == ("'=1+1", "'@x", -2.0)


def test_a_second_write_replaces_the_file(tmp_path: Path) -> None:
    apply(csv(tmp_path), batches(ROWS))
    apply(csv(tmp_path), batches(ROWS[:1]))
    assert pacsv.read_csv(tmp_path / "orders.csv").column("_id").to_pylist() == ["row_1"]


def test_failed_csv_export_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    apply(csv(tmp_path), batches(ROWS))
    before = path.read_bytes()

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(ROWS[:1])
        raise RuntimeError("the API went away")

    with pytest.raises(RuntimeError):
        apply(csv(tmp_path), failing())
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_csv_is_only_replaced_whole(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ConfigError, match=r"^test: .*mode replace, not '" + mode):
        config("csv", str(tmp_path), mode)  # type: ignore[arg-type]
    destination = open_destination(csv(tmp_path))
    try:
        with pytest.raises(ConfigError, match="only replaced whole"):
            destination.apply(Target(TABLE, "orders"), TableChange(mode, batches(ROWS)))  # type: ignore[arg-type]
    finally:
        destination.close()
    assert list(tmp_path.iterdir()) == []


CLI_EXPORT = """
import sys
from connector.cli import main
try:
    main(["export", "--format", sys.argv[1], "--out", sys.argv[2]], standalone_mode=False)
finally:
    print(sorted(m for m in ("pandas", "sqlalchemy") if m in sys.modules))
"""


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_export_never_imports_pandas(server: RunningServer, tmp_path: Path, fmt: str) -> None:
    """A small CSV export cost two seconds: a Python value handed to an Arrow compute function
    made pyarrow import pandas. Timestamps are the column that did it."""
    table_id = server.create_table({"name": "Stamped", "columns": [{"name": "Due", "type": "date"}]})
    server.insert_rows(table_id, [{"Due": "2024-03-31"}, {}])
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key}
    done = subprocess.run([sys.executable, "-c", CLI_EXPORT, fmt, str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
    assert (tmp_path / "out" / f"Stamped.{fmt}").is_file()
