"""Every number arrives exact: a column's value type holds each cell or the read stops, naming it.

Read from the reference server over HTTP (`connector.extract`, `Workspace.read`), with the
value types of `connector.values`; ``""`` stays the empty string, a missing cell null.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from connector import Workspace
from connector.errors import ConfigError, InexactValue
from connector.values import Inexact, TypeSetting, value_type
from tests.fixtures.server import RunningServer

ORDERS: dict[str, Any] = {
    "name": "Orders",
    "columns": [
        {"name": "OrderNo", "type": "number"},
        {"name": "Note", "type": "text"},
        {"name": "Pick", "type": "choice", "options": ["", "a"]},
    ],
}
BIG = 2**53 + 1  # the first integer a double does not hold


@pytest.fixture
def orders(server: RunningServer) -> tuple[Workspace, list[dict[str, Any]]]:
    table_id = server.create_table(ORDERS)
    rows = server.insert_rows(table_id, [
        {"OrderNo": 12, "Note": "", "Pick": ""},
        {"OrderNo": BIG, "Pick": "a"},
        {"OrderNo": 2**63 - 1, "Note": "x"},
        {"OrderNo": -(2**63)},
    ])
    return Workspace(server.base_url, server.api_key), rows


def test_an_integer_float64_cannot_hold_stops_the_read_naming_table_column_row_and_setting(
    orders: tuple[Workspace, list[dict[str, Any]]],
) -> None:
    ws, rows = orders
    with ws, pytest.raises(InexactValue) as caught:
        ws.read("Orders")
    message = str(caught.value)
    assert f"table 'Orders', column 'OrderNo', row {rows[1]['id']}: {BIG}" in message
    assert "float64 would hold it as 9007199254740992.0" in message
    assert "the column is float64, the default" in message
    assert "--type Orders:OrderNo=int64" in message and "[tables.types.Orders]" in message


@pytest.mark.parametrize(("spec", "dtype", "expected"), [
    ("int64", pd.Int64Dtype(), [12, BIG, 2**63 - 1, -(2**63)]),
    ("text", pd.StringDtype(), ["12", str(BIG), str(2**63 - 1), str(-(2**63))]),
    ("decimal", pd.ArrowDtype(pa.decimal128(38, 9)),
     [Decimal(12), Decimal(BIG), Decimal(2**63 - 1), Decimal(-(2**63))]),
])
def test_a_value_type_holds_every_integer_exactly(
    orders: tuple[Workspace, list[dict[str, Any]]], spec: str, dtype: Any, expected: list[Any],
) -> None:
    ws, _ = orders
    with ws:
        frame = ws.read("Orders", types={"OrderNo": spec})
    assert frame["OrderNo"].dtype == dtype
    assert frame["OrderNo"].tolist() == expected


def test_empty_text_is_text_and_a_missing_cell_is_null(
    orders: tuple[Workspace, list[dict[str, Any]]],
) -> None:
    ws, _ = orders
    with ws:
        frame = ws.read("Orders", types={"OrderNo": "text"})
    assert frame["Note"].tolist() == ["", pd.NA, "x", pd.NA]
    assert frame["Pick"].astype(object).where(frame["Pick"].notna(), None).tolist() == [
        "", "a", None, None]


def test_a_fraction_in_an_int64_column_stops_the_read_naming_the_setting(server: RunningServer) -> None:
    table_id = server.create_table({"name": "Prices", "columns": [{"name": "P", "type": "number"}]})
    rows = server.insert_rows(table_id, [{"P": 3.0}, {"P": 2.5}])
    with Workspace(server.base_url, server.api_key) as ws:
        with pytest.raises(InexactValue, match=rf"row {rows[1]['id']}: 2.5 cannot be held exactly "
                           r"\(int64 holds no fraction\); the column is int64, set by "
                           r"types\['P'\]"):
            ws.read("Prices", types={"P": "int64"})
        with pytest.raises(InexactValue, match=r"decimal\(10,0\) holds 0 places after the point"):
            ws.read("Prices", types={"P": "decimal(10,0)"})
        assert ws.read("Prices", types={"P": "decimal(3,1)"})["P"].tolist() == [
            Decimal("3.0"), Decimal("2.5")]


@pytest.mark.parametrize(("types", "message"), [
    ({"Missing": "int64"}, r"types\['Missing'\]: table 'Orders' has no column 'Missing'"),
    ({"Note": "int64"}, r"types\['Note'\]: column 'Note' of table 'Orders' is text; only number"),
    ({"OrderNo": "int32"}, r"types\['OrderNo'\]: 'int32' is not a value type; use float64, int64"),
    ({"OrderNo": "decimal(40,2)"}, r"precision is 1 to 38"),
])
def test_a_bad_type_setting_is_a_config_error_naming_it(
    orders: tuple[Workspace, list[dict[str, Any]]], types: dict[str, str], message: str,
) -> None:
    ws, _ = orders
    with ws, pytest.raises(ConfigError, match=message):
        ws.read("Orders", types=types)


# --- the value types themselves --------------------------------------------------------------


@pytest.mark.parametrize(("values", "spec", "expected"), [
    ([2**53, 2**60, -(2**62), 0.5, None], "float64", [2.0**53, 2.0**60, -(2.0**62), 0.5, None]),
    ([3.0, -0.0, 2**63 - 1, None], "int64", [3, 0, 2**63 - 1, None]),
    ([0.1, 2.0**60, 12, None], "decimal", [Decimal("0.1"), Decimal(2**60), Decimal(12), None]),
    ([0.1, 1e16, 5e-324, -0.0, 2**63 - 1], "text", ["0.1", "1e+16", "5e-324", "-0.0", str(2**63 - 1)]),
])
def test_each_value_type_holds_what_it_can_exactly(
    values: list[Any], spec: str, expected: list[Any]
) -> None:
    assert value_type(spec).array(values).to_pylist() == expected


@pytest.mark.parametrize(("values", "spec", "position", "why"), [
    ([1.0, 2**53 + 1], "float64", 1, "float64 would hold it as 9007199254740992.0"),
    ([1, 2**63], "int64", 1, "outside int64's range"),
    ([1e19], "int64", 0, "outside int64's range"),
    ([0.5], "int64", 0, "int64 holds no fraction"),
    ([1.25], "decimal(5,1)", 0, "decimal(5,1) holds 1 places after the point, and it has 2"),
    ([123456.0], "decimal(5,1)", 0, "holds 4 digits before the point, and it has 6"),
    ([1e308], "decimal", 0, "holds 29 digits before the point"),
])
def test_a_number_a_type_cannot_hold_is_named_with_why(
    values: list[Any], spec: str, position: int, why: str
) -> None:
    with pytest.raises(Inexact) as caught:
        value_type(spec).array(values)
    assert (caught.value.position, caught.value.value) == (position, values[position])
    assert why in caught.value.why


@pytest.mark.parametrize(("option", "expected"), [
    ("Orders:OrderNo=int64", ("Orders", "OrderNo", "int64")),
    ("tbl_1:a:b=decimal(18, 2)", ("tbl_1", "a:b", "decimal(18, 2)")),
    ("My Orders:Total = text", ("My Orders", "Total ", "text")),
])
def test_a_type_option_names_table_column_and_type(option: str, expected: tuple[str, ...]) -> None:
    setting = TypeSetting.parse(option)
    assert (setting.table, setting.column, setting.type) == expected
    assert setting.where == f"--type {option}"


@pytest.mark.parametrize("option", ["OrderNo=int64", "Orders:=int64", ":x=int64", "Orders:x",
                                    "Orders:x=float"])
def test_a_malformed_type_option_says_what_is_wrong(option: str) -> None:
    with pytest.raises(ValueError, match=r"TABLE:COLUMN=TYPE|not a value type"):
        TypeSetting.parse(option)
