"""Planning: a vectorised diff by key, by column type, so re-reads never look like changes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from connector.errors import ConfigError, DeleteGuard, PlanError, ValidationReport
from connector.push.coerce import coerce_column
from connector.push.diff import Diff, check_current, gather, make_plan
from connector.push.live import Live
from connector.push.plan import Create, Delete, Plan, Update, check_delete_guard
from connector.push.sheet import SourceFrame
from connector.push.spec import PushSpec
from connector.push.validate import Key, validate
from connector.schema import Column, Table

TABLE = Table(
    "tbl_1",
    "People",
    (
        Column("Name", "text", required=True),
        Column("Age", "number"),
        Column("Status", "choice", options=("active", "paused")),
        Column("Member", "checkbox"),
        Column("Note", "text"),
    ),
)


def live(*rows: tuple[str, dict[str, Any]]) -> Live:
    frame: dict[str, Any] = {
        "_id": pd.Series([r[0] for r in rows], dtype="string"),
        "_updated_at": pd.Series([f"t-{r[0]}" for r in rows], dtype="string"),
    }
    for col in TABLE.columns:
        cells = pd.Series([r[1].get(col.name) for r in rows], dtype=object)
        frame[col.name] = coerce_column(cells, col).values
    return Live(TABLE, pd.DataFrame(frame, index=pd.RangeIndex(len(rows))))


def plan(columns: dict[str, list[Any]], current: Live, mode: str = "upsert", key: str = "Name") -> Plan:
    src = SourceFrame.from_frame(pd.DataFrame(columns, dtype=object), "people.csv")
    parsed = Key.parse(key, TABLE)
    return make_plan(validate(src, TABLE, parsed), current, mode)  # type: ignore[arg-type]


CURRENT = live(
    ("row_a", {"Name": "Ann", "Age": 1, "Status": "active", "Member": True, "Note": None}),
    ("row_b", {"Name": "Bo", "Age": 2.5, "Status": "paused", "Member": False, "Note": "x"}),
    ("row_c", {"Name": "Cy", "Age": None}),
)


def test_equal_values_in_other_spellings_are_not_updates() -> None:
    result = plan(
        {"Name": ["Ann", "Bo", "Cy"], "Age": ["1.0", "2.50", ""], "Status": ["active", "paused", ""],
         "Member": ["yes", "FALSE", ""], "Note": ["", "x", None]},
        CURRENT,
    )
    assert result.is_empty and result.requests == 0
    assert result.unchanged == 3


def test_upsert_patches_only_changed_cells_and_records_what_it_replaces() -> None:
    result = plan({"Name": ["Bo", "Ann", "Dee"], "Age": ["2.5", "2", "4"], "Note": ["y", "", ""]}, CURRENT)
    assert result.creates == (Create(row=4, fields={"Name": "Dee", "Age": 4}),)
    assert result.updates == (
        Update(row=2, id="row_b", fields={"Note": "y"}, old={"Note": "x"}, updated_at="t-row_b",
               key={"Name": "Bo"}),
        Update(row=3, id="row_a", fields={"Age": 2}, old={"Age": 1}, updated_at="t-row_a",
               key={"Name": "Ann"}),
    )
    assert result.deletes == ()
    assert result.requests == 1 + 2 + 0


def test_clearing_a_cell_is_an_update_to_null() -> None:
    result = plan({"Name": ["Bo"], "Note": [""]}, CURRENT, mode="update")
    assert result.updates[0].fields == {"Note": None} and result.updates[0].old == {"Note": "x"}


def test_modes() -> None:
    src = {"Name": ["Ann", "Dee"], "Age": ["9", "4"]}
    insert = plan(src, CURRENT, "insert")
    assert [c.fields["Name"] for c in insert.creates] == ["Dee"] and not insert.updates
    assert insert.skipped == 1
    update = plan(src, CURRENT, "update")
    assert not update.creates and [u.id for u in update.updates] == ["row_a"] and update.skipped == 1
    mirror = plan(src, CURRENT, "mirror")
    assert mirror.deletes == (
        Delete("row_b", {"Name": "Bo"}, "t-row_b"),
        Delete("row_c", {"Name": "Cy"}, "t-row_c"),
    )
    assert mirror.requests == 1 + 1 + 1


def test_by_row_id_updates_and_refuses_unknown_ids() -> None:
    result = plan({"id": ["row_b"], "Age": ["3"]}, CURRENT, mode="update", key="id")
    assert result.updates[0].id == "row_b" and result.updates[0].fields == {"Age": 3}
    with pytest.raises(ValidationReport, match="row 2, column 'id', value 'row_zz': no row with this id"):
        plan({"id": ["row_zz"], "Age": ["3"]}, CURRENT, mode="update", key="id")


def test_a_key_that_repeats_in_the_table_is_refused() -> None:
    doubled = live(("row_1", {"Name": "Ann"}), ("row_2", {"Name": "Ann"}))
    with pytest.raises(PlanError, match=r"2 rows sharing a key \(Name\)"):
        plan({"Name": ["Ann"]}, doubled)


def test_a_key_repeated_among_rows_the_source_lacks_is_refused_too() -> None:
    doubled = live(("row_1", {"Name": "Ann"}), ("row_2", {"Name": "Bo"}), ("row_3", {"Name": "Bo"}))
    with pytest.raises(PlanError, match=r"2 rows sharing a key \(Name\).*\('Bo',\) on row_2"):
        plan({"Name": ["Ann"]}, doubled)


def test_a_table_compared_in_chunks_plans_as_a_table_compared_whole() -> None:
    """The push reads the table in chunks into a Diff: the plan is the one made whole."""
    rows = [(f"row_{i}", {"Name": f"n{i}", "Age": i, "Note": "x" * (i % 3)}) for i in range(30)]
    table = live(*rows)
    source = {"Name": [f"n{i}" for i in range(5, 40)], "Age": [str(i + (i % 4 == 0)) for i in range(5, 40)]}
    src = SourceFrame.from_frame(pd.DataFrame(source, dtype=object), "people.csv")
    prepared = validate(src, TABLE, Key.parse("Name", TABLE))
    diff = Diff(prepared, "mirror")
    for start in range(0, 30, 7):
        diff.add(Live(TABLE, table.frame.iloc[start : start + 7].reset_index(drop=True)))
    assert diff.plan() == make_plan(prepared, table, "mirror")


def test_gather_takes_from_every_chunk_in_the_order_asked() -> None:
    chunks = pa.chunked_array([pa.array(["a", None, "c"]), pa.array(["d"]), pa.array(["e", "f"])])
    values = pd.Series(chunks.to_pandas(types_mapper=lambda _: pd.StringDtype("pyarrow")))
    for positions in ([5, 0, 3, 1, 1, 4], [], [2]):
        taken = gather(values, np.array(positions, dtype=np.intp))
        assert taken.tolist() == values.take(positions).tolist() and taken.dtype == values.dtype


def test_mirror_guard() -> None:
    big = live(*((f"row_{i}", {"Name": f"n{i}"}) for i in range(10)))
    two_gone = plan({"Name": [f"n{i}" for i in range(8)]}, big, "mirror")
    check_delete_guard(two_gone)  # 2 of 10 = 20%: allowed
    three_gone = plan({"Name": [f"n{i}" for i in range(7)]}, big, "mirror")
    with pytest.raises(DeleteGuard, match="would delete 3 of 10 rows"):
        check_delete_guard(three_gone)
    check_delete_guard(three_gone, allow_delete=3)
    check_delete_guard(three_gone, max_delete_ratio=0.3)
    empty = plan({"Name": []}, big, "mirror")
    with pytest.raises(DeleteGuard, match="the source is empty"):
        check_delete_guard(empty, max_delete_ratio=None)
    check_delete_guard(empty, max_delete_ratio=1.0)


def test_plan_json_round_trip_and_staleness() -> None:
    result = plan({"Name": ["Bo", "Dee"], "Age": ["7", "1"]}, CURRENT, "mirror")
    assert result.create_requests == 1  # its batches measured first: not saved with it
    again = Plan.from_json(result.to_json())
    assert again == result and again.create_requests == 1
    assert b"_batches" not in result.to_json()
    check_current(again, CURRENT)
    touched = live(
        ("row_a", {"Name": "Ann"}), ("row_c", {"Name": "Cy"}), ("row_d", {"Name": "Dee"}),
    )
    with pytest.raises(PlanError, match=r"2 row\(s\).*row_b \(row 2\).*key 'Dee' \(row 3\) now exists"):
        check_current(again, touched)
    with pytest.raises(ConfigError, match="not a push plan"):
        Plan.from_json(b'{"format": 99}')


def test_unknown_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^mode 'sync'"):
        PushSpec("people.csv", table="People", key="Name", mode="sync")  # type: ignore[arg-type]


def test_the_delete_guard_allows_exactly_the_ratio_given() -> None:
    """57% of 100 rows is 57 rows: a ratio the user typed must not lose a row to float error."""
    hundred = live(*((f"row_{i}", {"Name": f"n{i}"}) for i in range(100)))
    gone = plan({"Name": [f"n{i}" for i in range(43)]}, hundred, "mirror")
    assert len(gone.deletes) == 57
    check_delete_guard(gone, max_delete_ratio=0.57)


@pytest.mark.parametrize("options", [{"max_delete_ratio": 1.5}, {"max_delete_ratio": float("nan")},
                                     {"max_delete_ratio": -0.1}, {"allow_delete": -1}])
def test_a_delete_limit_out_of_range_is_a_configuration_error(options: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="must be"):
        PushSpec("people.csv", table="People", key="Name", mode="mirror", **options)  # type: ignore[arg-type]
