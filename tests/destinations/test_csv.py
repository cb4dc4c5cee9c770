"""CSV export: a header, quoted text so empty strings and nulls differ, written atomically."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from connector.load.csv import write_csv
from tests.destinations.samples import ROWS, SCHEMA, batches


def test_csv_has_a_header_and_tells_empty_text_from_null(tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    assert write_csv(batches(ROWS[1:3]), SCHEMA, path) == 2
    assert path.read_text(encoding="utf-8").splitlines() == [
        '"_id","_created_at","_updated_at","Name","Status","Amount","Paid","Due","id","created_at"',
        '"row_2","2024-03-01 12:30:15.123456Z","2024-03-01 12:30:15.123456Z",'
        '"quote "" comma , newline ',
        ' end","on hold",-0.1,false,1970-01-01,"",',
        '"row_3","2025-01-02 03:04:05.000000Z","2025-01-02 03:04:05.000000Z","",,,,,,',
    ]


def test_csv_reads_back_to_the_same_values(tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    write_csv(batches(ROWS, size=3), SCHEMA, path)
    types = {f.name: f.type.value_type if pa.types.is_dictionary(f.type) else f.type for f in SCHEMA}
    read = pacsv.read_csv(
        path,
        convert_options=pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False
        ),
    )
    assert read.to_pylist() == ROWS


def test_failed_csv_export_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    write_csv(batches(ROWS), SCHEMA, path)
    before = path.read_bytes()

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(ROWS[:1])
        raise RuntimeError("the API went away")

    with pytest.raises(RuntimeError):
        write_csv(failing(), SCHEMA, path)
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]
