"""Coercion: spreadsheet cells become what a spreadsheet user means, and every rule is counted."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from connector.push.coerce import coerce_column, same_values, wire_values
from connector.schema import Column

NA = None


def coerce(kind: str, cells: list[Any], **column: Any) -> tuple[list[Any], dict[int, str], dict[str, int]]:
    """The cells coerced: their values as sent (JSON cells), errors and counts."""
    col = Column("c", kind, **column)
    result = coerce_column(pd.Series(cells, dtype=object), col)
    return wire_values(result.values, col), result.errors, dict(result.counts)


WORDS = ["None", "null", "NA", "nan", "NaN", "N/A", "<NA>", "NaT"]


def test_text_is_text_and_only_an_empty_cell_is_empty() -> None:
    """A person named Null, a product code NA, a cell of spaces: text, kept as written."""
    values, errors, counts = coerce(
        "text", ["007", "12345678901234567890", "", None, math.nan, pd.NA, "  ", " x ", *WORDS]
    )
    assert values == ["007", "12345678901234567890", NA, NA, NA, NA, "  ", " x ", *WORDS]
    assert errors == {}
    assert counts == {"empty → null": 4}
    choices, errors, _ = coerce("choice", ["NA", "None", ""], options=("NA", "None"))
    assert (choices, errors) == (["NA", "None", NA], {})


@pytest.mark.parametrize("kind", ["number", "checkbox", "date"])
def test_in_typed_columns_spaces_are_empty_and_words_are_not(kind: str) -> None:
    values, errors, counts = coerce(kind, ["", "   ", None, *WORDS])
    assert values == [NA] * (3 + len(WORDS))
    assert sorted(errors) == list(range(3, 3 + len(WORDS)))  # each word is named as bad
    assert counts == {"empty → null": 3}


def test_text_from_spreadsheet_numbers_dates_and_booleans() -> None:
    values, _, counts = coerce("text", [41.0, 2.5, True, dt.datetime(2024, 1, 31)])
    assert values == ["41", "2.5", "TRUE", "2024-01-31"]
    assert counts == {"text from number": 2, "text from checkbox": 1, "text from date": 1}


def test_numbers_parse_from_text_with_or_without_thousands_separators() -> None:
    values, errors, counts = coerce(
        "number", ["1", " 2.50 ", "-3e2", "1,234.5", 7, 8.25, np.int64(9), "abc", True, "inf", "1,2"]
    )
    assert values[:7] == [1.0, 2.5, -300.0, 1234.5, 7.0, 8.25, 9.0]
    assert values[7:] == [NA] * 4
    assert errors == {7: "not a number", 8: "not a number", 9: "not a number", 10: "not a number"}
    assert counts == {"number from text": 3, "number with thousands separators": 1}


def test_checkboxes_from_words_and_numbers() -> None:
    values, errors, counts = coerce(
        "checkbox", ["TRUE", "false", "Yes", "no", "1", "0", "x", True, 0, 1.0, "maybe", 2]
    )
    assert values[:10] == [True, False, True, False, True, False, True, True, False, True]
    assert set(errors) == {10, 11}
    assert "TRUE/FALSE" in errors[10]
    assert counts == {"checkbox from text": 7, "checkbox from number": 2}


def test_dates_from_iso_text_excel_serials_and_datetimes() -> None:
    values, errors, counts = coerce(
        "date",
        ["2024-01-31", "2024-01-31T00:00:00Z", "45322", 45322, dt.date(2024, 1, 31),
         dt.datetime(2024, 1, 31), pd.Timestamp("2024-01-31"),
         "2024-02-30", "31/01/2024", "2024-01-31T10:00", dt.datetime(2024, 1, 31, 10), True],
    )
    assert values[:7] == ["2024-01-31"] * 7  # Excel serial 45322 is 2024-01-31
    assert values[8] == "2024-01-31"  # 31 is no month: day first, the only reading
    assert set(errors) == {7, 9, 10, 11}
    assert counts == {
        "date from ISO text": 1,
        "date from ISO date-time at midnight": 1,
        "date from Excel serial": 2,
        "date from date-time at midnight": 2,
        "date from day/month text (day first)": 1,
    }


def test_choice_is_exact_text_and_typed_frames_coerce_by_dtype() -> None:
    values, _, _ = coerce("choice", ["a", " a", 1.0])
    assert values == ["a", " a", "1"]
    floats = coerce_column(pd.Series([1.0, None]), Column("c", "number"))
    assert wire_values(floats.values, Column("c", "number")) == [1, None]
    bools = coerce_column(pd.Series([True, None], dtype="boolean"), Column("c", "checkbox"))
    assert bools.values.tolist() == [True, pd.NA]
    dates = coerce_column(pd.Series(pd.to_datetime(["2024-01-31"])), Column("c", "date"))
    assert dates.values.tolist() == ["2024-01-31"]


@pytest.mark.parametrize(
    ("kind", "a", "b", "expected"),
    [
        # exact: 0.1 + 0.2 is 0.30000000000000004, another number than 0.3; 1 and 1.0 are one
        ("number", [1, 0.1 + 0.2, None, 1.0], [1.0, 0.3, None, None], [True, False, True, False]),
        ("text", ["a", None, "a"], ["a", None, "A"], [True, True, False]),
        ("choice", ["x", "x "], ["x", "x"], [True, False]),
        ("checkbox", [True, False, None], [True, None, None], [True, False, True]),
    ],
)
def test_equality_is_by_column_type(kind: str, a: list[Any], b: list[Any], expected: list[bool]) -> None:
    col = Column("c", kind)
    left = coerce_column(pd.Series(a, dtype=object), col).values
    right = coerce_column(pd.Series(b, dtype=object), col).values
    assert same_values(left, right, col).tolist() == expected


def test_wire_values_are_json_cells() -> None:
    col = Column("c", "number")
    values = coerce_column(pd.Series(["1", "2.5", "", "1e20"], dtype=object), col).values
    assert wire_values(values, col) == [1, 2.5, None, 1e20]


def test_dates_as_spreadsheets_write_them_when_only_one_reading_exists() -> None:
    values, errors, counts = coerce(
        "date",
        ["5 March 2024", "March 5, 2024", "2024/03/05", "05-Mar-2024", "5th Sept. 2024",
         "Mar 5 2024", "2024.3.5", "31 Feb 2024", "5 Foo 2024"],
    )
    assert values[:7] == ["2024-03-05"] * 4 + ["2024-09-05", "2024-03-05", "2024-03-05"]
    assert set(errors) == {7, 8} and "not a date" in errors[7]
    assert counts == {"date from text with the year first or a month name": 7}


@pytest.mark.parametrize(("cells", "expected", "order"), [
    (["05/03/2024", "25/03/2024"], ["2024-03-05", "2024-03-25"], "day first"),
    (["05/03/2024", "03/25/2024"], ["2024-05-03", "2024-03-25"], "month first"),
    (["05.03.2024", "13.03.2024", "07.07.2024"], ["2024-03-05", "2024-03-13", "2024-07-07"], "day first"),
])
def test_the_column_settles_day_and_month_when_every_value_agrees(
    cells: list[str], expected: list[str], order: str
) -> None:
    values, errors, counts = coerce("date", cells)
    assert (values, errors) == (expected, {})
    assert counts == {f"date from day/month text ({order})": len(cells)}


def test_ambiguous_dates_need_a_date_format() -> None:
    values, errors, _ = coerce("date", ["05/03/2024", "06/06/2024"])
    assert values == [NA, "2024-06-06"]
    assert errors == {0: "ambiguous date: day and month could be either way; "
                         "give date_format ('%d/%m/%Y' or '%m/%d/%Y')"}
    _, mixed, _ = coerce("date", ["25/03/2024", "03/25/2024", "05/03/2024"])
    assert list(mixed) == [2] and "both day-first and month-first" in mixed[2]
    dated = coerce_column(pd.Series(["05/03/2024", "2024-01-31", "5 May 2024", "13/13/2024"]),
                          Column("c", "date"), date_format="%d/%m/%Y")
    assert dated.values.tolist()[:3] == ["2024-03-05", "2024-01-31", "2024-05-05"]
    assert list(dated.errors) == [3]
    assert dated.counts["date with date_format"] == 1


def test_a_date_format_must_read_dates_back() -> None:
    from connector.push.spec import check_date_format

    assert check_date_format("%d/%m/%Y") is None
    assert "day, a month and a year" in str(check_date_format("%m/%Y"))
