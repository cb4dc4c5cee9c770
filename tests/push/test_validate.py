"""Validation: one report naming every bad row (spreadsheet numbering), column and value."""

from __future__ import annotations

import pandas as pd
import pytest

from connector.errors import ConfigError, InputError, ValidationReport
from connector.push.sheet import SourceFrame
from connector.push.validate import Key, validate
from connector.schema import Column, Table

TABLE = Table(
    "tbl_1",
    "People",
    (
        Column("Name", "text", required=True),
        Column("Age", "number"),
        Column("Status", "choice", options=("active", "paused")),
        Column("Born", "date"),
    ),
)


def source(**columns: list[object]) -> SourceFrame:
    return SourceFrame.from_frame(pd.DataFrame(columns, dtype=object), "people.csv")


def problems(src: SourceFrame, key: str = "Name") -> list[str]:
    with pytest.raises(ValidationReport) as caught:
        validate(src, TABLE, Key.parse(key, TABLE))
    assert isinstance(caught.value, InputError)
    assert "nothing was written" in str(caught.value)
    return [str(p) for p in caught.value.problems]


def test_every_problem_is_reported_at_once_by_spreadsheet_row() -> None:
    found = problems(source(
        Name=["Ann", "Bo", "Ann", "", "Cy"],
        Age=["1", "old", "3", "4", "5"],
        Status=["active", "gone", "paused", "active", ""],
        Born=["2024-01-01", "", "2024-13-01", "", ""],
        Shoe=["", "", "", "", ""],
    ))
    assert found == [
        "row 1, column 'Shoe': not a column of table 'People' (columns: Name, Age, Status, Born)",
        "row 2, column 'Name', value 'Ann': duplicate key: also on row(s) 4",
        "row 3, column 'Age', value 'old': not a number",
        "row 3, column 'Status', value 'gone': not one of the options: 'active', 'paused'",
        "row 4, column 'Born', value '2024-13-01': not a date (use YYYY-MM-DD, a date like '5 March 2024', an Excel date, or give date_format)",
        "row 4, column 'Name', value 'Ann': duplicate key: also on row(s) 2",
        "row 5, column 'Name': the key is empty",
    ]


def test_a_header_in_another_case_is_taken_as_the_one_column_it_matches() -> None:
    """(Named "not a column ... did you mean 'Name'?" before: `test_headers` has the rule.)"""
    ok = validate(source(name=["Ann"], Age=["1"]), TABLE, Key.parse("Age", TABLE))
    assert (ok.columns, ok.taken) == (("Name", "Age"), (("name", "Name"),))
    assert ok.frame["Name"].tolist() == ["Ann"]


def test_required_values_and_columns() -> None:
    """An empty required cell is refused; a required column left out is not (yet): an update
    needs only the columns it changes (`test_plan` checks the rows a plan would create)."""
    table_key = "Age"
    found = problems(source(Name=["Ann", None], Age=["1", "2"]), key=table_key)
    assert found == ["row 3, column 'Name': a value is required"]
    assert validate(source(Age=["1"]), TABLE, Key.parse("Age", TABLE)).columns == ("Age",)


def test_multi_column_keys_and_row_ids() -> None:
    found = problems(source(Name=["Ann", "Ann", "Ann"], Age=["1", "1.0", "2"]), key="Name,Age")
    # "1" and "1.0" are one number, shown as the integer it is
    assert found[0].startswith("row 2, column 'Name, Age', value ('Ann', 1): duplicate key")
    assert len(found) == 2
    by_id = Key.parse("id", TABLE)
    assert by_id.by_id and by_id.columns == ("_id",)
    ok = validate(source(id=["row_1"], Age=["3"]), TABLE, by_id)
    assert ok.frame.columns.tolist() == ["_id", "Age"]
    assert problems(source(_id=["row_1", ""], Age=["3", "4"]), key="id") == [
        "row 3, column 'id': the key is empty"
    ]


def test_export_system_columns_are_ignored_not_unknown() -> None:
    ok = validate(
        source(_id=["row_1"], _created_at=["x"], _updated_at=["y"], Name=["Ann"]),
        TABLE, Key.parse("Name", TABLE),
    )
    assert ok.ignored == ("_id", "_created_at", "_updated_at")
    assert ok.columns == ("Name",)


def test_a_bad_key_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no column 'Nope'"):
        Key.parse("Nope", TABLE)
    with pytest.raises(ConfigError, match="distinct"):
        Key.parse("Name,Name", TABLE)
