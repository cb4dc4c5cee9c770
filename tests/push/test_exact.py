"""A push compares and sends every number exactly, and keeps "" apart from a missing value.

Against the reference server in-process: what the table holds afterwards is read through the
API with a plain httpx client (JSON integers stay Python ints), never through the code under
test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.destinations.formats import write_csv, write_parquet
from connector.errors import ValidationReport
from connector.extract import Extraction
from connector.push import PushSpec, push
from tests.push.conftest import InProcess

ORDERS = {
    "name": "Orders",
    "columns": [
        {"name": "Ref", "type": "text", "required": True},
        {"name": "OrderNo", "type": "number"},
        {"name": "Note", "type": "text"},
    ],
}
BIG = 2**53 + 1  # 9007199254740993: a double holds only its neighbours


def held(env: InProcess, table_id: str) -> dict[str, tuple[Any, Any]]:
    return {r["fields"]["Ref"]: (r["fields"].get("OrderNo"), r["fields"].get("Note"))
            for r in env.rows(table_id)}


@pytest.fixture
def orders(inproc: InProcess) -> str:
    table_id = inproc.create_table(ORDERS)
    inproc.insert(table_id, [
        {"Ref": "a", "OrderNo": BIG, "Note": ""},
        {"Ref": "b", "OrderNo": 2**63 - 1},
        {"Ref": "c", "OrderNo": 0.1, "Note": "x"},
    ])
    return table_id


def test_an_integer_one_apart_past_2_to_the_53_plans_an_update_and_is_sent_exactly(
    inproc: InProcess, orders: str, tmp_path: Path,
) -> None:
    csv = tmp_path / "orders.csv"
    csv.write_text(f"Ref,OrderNo\na,{BIG - 1}\nb,{2**63 - 1}\nc,0.1\nd,{BIG}\n")
    done = push(inproc.client(), PushSpec(csv, table="Orders", key="Ref"))
    assert (done.plan.counts.created, done.plan.counts.updated) == (1, 1)
    assert [u.fields for u in done.plan.updates] == [{"OrderNo": BIG - 1}]
    assert [u.old for u in done.plan.updates] == [{"OrderNo": BIG}]
    assert done.plan.creates[0].fields == {"Ref": "d", "OrderNo": BIG}
    assert held(inproc, orders) == {"a": (BIG - 1, ""), "b": (2**63 - 1, None), "c": (0.1, "x"),
                                    "d": (BIG, None)}
    again = push(inproc.client(), PushSpec(csv, table="Orders", key="Ref"))
    assert again.plan.is_empty and again.plan.unchanged == 4


@pytest.mark.parametrize("cells", [
    pd.Series([BIG, 2**63 - 1, 0.1], dtype=object),  # a spreadsheet's native cells
    pd.Series([str(BIG), f"{2**63 - 1}.000", "0.10"], dtype="string"),  # typed text
])
def test_the_numbers_the_table_holds_plan_nothing(
    inproc: InProcess, orders: str, cells: pd.Series,
) -> None:
    frame = pd.DataFrame({"Ref": ["a", "b", "c"], "OrderNo": cells})
    done = push(inproc.client(), PushSpec(frame, table="Orders", key="Ref"))
    assert done.plan.is_empty and done.plan.unchanged == 3


@pytest.mark.parametrize(("cell", "why"), [
    ("99999999999999999999", "an integer outside the 64-bit range"),
    ("0.1000000000000000000001", "has more digits than a number cell holds"),
])
def test_a_number_the_table_cannot_hold_exactly_is_refused_naming_it(
    inproc: InProcess, orders: str, tmp_path: Path, cell: str, why: str,
) -> None:
    csv = tmp_path / "orders.csv"
    csv.write_text(f"Ref,OrderNo\na,{cell}\n")
    with pytest.raises(ValidationReport, match=rf"row 2, column 'OrderNo', value '{cell}': {why}"):
        push(inproc.client(), PushSpec(csv, table="Orders", key="Ref"))
    assert held(inproc, orders)["a"] == (BIG, "")


def export(env: InProcess, table_id: str, path: Path, **types: str) -> None:
    client = env.client()
    extraction = Extraction(client, client.get_table(table_id), types=types)
    (write_csv if path.suffix == ".csv" else write_parquet)(extraction, extraction.schema, path)


@pytest.mark.parametrize(("suffix", "number"), [
    (".parquet", "int64"), (".parquet", "text"), (".parquet", "decimal"), (".csv", "int64"),
    (".csv", "text"), (".csv", "decimal"),
])
def test_a_tables_own_export_pushes_back_with_no_write(
    inproc: InProcess, tmp_path: Path, suffix: str, number: str,
) -> None:
    table_id = inproc.create_table(ORDERS)
    inproc.insert(table_id, [
        {"Ref": "a", "OrderNo": BIG, "Note": ""}, {"Ref": "b", "OrderNo": -(2**63)},
        {"Ref": "c", "OrderNo": 7 if number == "int64" else 2.5, "Note": "x"},
    ])
    path = tmp_path / f"orders{suffix}"
    export(inproc, table_id, path, OrderNo=number)
    done = push(inproc.client(), PushSpec(path, table="Orders", key="Ref"))
    assert done.plan.is_empty and done.plan.unchanged == 3
    assert inproc.transport.writes == 0


def test_typed_empty_text_is_sent_as_empty_text_and_a_null_over_it_changes_nothing(
    inproc: InProcess, orders: str, tmp_path: Path,
) -> None:
    parquet = tmp_path / "notes.parquet"
    pq.write_table(pa.table({"Ref": ["a", "b", "c"], "Note": [None, "", None]}), parquet)
    done = push(inproc.client(), PushSpec(parquet, table="Orders", key="Ref"))
    # a: null over "" (a CSV cannot tell them apart, so no source's null clears "");
    # b: "" over null, sent as ""; c: null over "x", cleared
    assert [(u.fields, u.old) for u in done.plan.updates] == [
        ({"Note": ""}, {"Note": None}), ({"Note": None}, {"Note": "x"})]
    assert {k: v[1] for k, v in held(inproc, orders).items()} == {"a": "", "b": "", "c": None}


def test_a_required_text_column_refuses_typed_empty_text_before_writing(
    inproc: InProcess, orders: str, tmp_path: Path,
) -> None:
    parquet = tmp_path / "refs.parquet"
    pq.write_table(pa.table({"Ref": ["e", ""], "OrderNo": [1, 2]}), parquet)
    with pytest.raises(ValidationReport, match=r"row 3, column 'Ref': a value is required"):
        push(inproc.client(), PushSpec(parquet, table="Orders", key="OrderNo"))
    assert inproc.transport.writes == 0
