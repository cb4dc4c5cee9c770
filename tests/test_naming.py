"""The one name map (`connector.naming`): a table's name in a destination depends on its id,
its name, the destination's rules and what the destination holds, and no two tables ever
share one after the destination's own rules."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from connector.errors import NameClash
from connector.naming import NameRules, assign, column_problems, fold, spell

FILES = NameRules(max_bytes=200, files=True)
SQLITE = NameRules(max_bytes=255, reserved_prefixes=("sqlite_",), columns_fold=True)
POSTGRES = NameRules(max_bytes=63, column_bytes=63)


def test_separators_and_controls_are_spelled_out_of_file_names() -> None:
    assert spell("a/b", "tbl_1", FILES) == "a_b"
    assert spell("a\\b", "tbl_1", FILES) == "a_b"
    assert spell("line\nbreak\x1b[31m", "tbl_1", FILES) == "line_break_[31m"
    assert spell("evil\u202eexe.txt", "tbl_1", FILES) == "evil_exe.txt"
    assert spell(".hidden", "tbl_1", FILES) == "_.hidden"
    assert spell("", "tbl_1", FILES) == "_"
    assert spell("a/b", "tbl_1", SQLITE) == "a/b"  # a database holds a slash


def test_names_the_destination_keeps_for_itself_get_an_underscore() -> None:
    assert spell("sqlite_master", "tbl_1", SQLITE) == "_sqlite_master"
    assert spell("SQLite_stat1", "tbl_1", SQLITE) == "_SQLite_stat1"
    assert spell("_connector_tables", "tbl_1", FILES) == "__connector_tables"


def test_a_long_name_is_cut_on_a_character_and_ends_in_its_id() -> None:
    name = "é" * 40  # 80 bytes
    spelled = spell(name, "tbl_9", POSTGRES)
    assert len(spelled.encode()) <= 63
    assert spelled.endswith("-tbl_9") and spelled.startswith("é" * 28)


def test_tables_whose_names_collide_once_spelled_get_their_ids() -> None:
    tables = [("tbl_1", "a/b"), ("tbl_2", "a_b"), ("tbl_3", "a\\b")]
    names = assign(tables, FILES, {})
    assert names == {"tbl_1": "a_b", "tbl_2": "a_b-tbl_2", "tbl_3": "a_b-tbl_3"}


def test_case_variants_never_share_a_name_and_a_literal_suffix_is_no_way_in() -> None:
    tables = [("tbl_1", "Orders"), ("tbl_2", "orders"), ("tbl_3", "orders-tbl_2")]
    names = assign(tables, SQLITE, {})
    assert names == {"tbl_1": "Orders", "tbl_2": "orders-tbl_2", "tbl_3": "orders-tbl_2-tbl_3"}
    assert len({fold(n) for n in names.values()}) == 3


def test_a_held_name_stays_whichever_tables_the_key_sees() -> None:
    held: dict[str, str | None] = {"Orders": "tbl_1", "orders-tbl_2": "tbl_2"}
    assert assign([("tbl_2", "orders")], SQLITE, held) == {"tbl_2": "orders-tbl_2"}
    assert assign([("tbl_1", "Orders")], SQLITE, held) == {"tbl_1": "Orders"}
    # a new table may not take a held name in any case
    assert assign([("tbl_7", "ORDERS")], SQLITE, held) == {"tbl_7": "ORDERS-tbl_7"}


def test_a_table_renamed_upstream_keeps_its_latest_held_name() -> None:
    held: dict[str, str | None] = {"old": "tbl_1", "newer": "tbl_1"}
    assert assign([("tbl_1", "Sales")], SQLITE, held) == {"tbl_1": "newer"}


def test_an_unrecorded_object_is_adopted_only_by_its_exact_spelling() -> None:
    held: dict[str, str | None] = {"orders": None, "Sales-tbl_5": None}
    assert assign([("tbl_1", "orders")], SQLITE, held) == {"tbl_1": "orders"}
    assert assign([("tbl_1", "Orders")], SQLITE, held) == {"tbl_1": "Orders-tbl_1"}
    assert assign([("tbl_5", "Sales")], SQLITE, held) == {"tbl_5": "Sales-tbl_5"}


def test_a_rename_is_taken_as_written_or_stops_the_run_naming_both_tables() -> None:
    tables = [("tbl_1", "Orders"), ("tbl_2", "orders")]
    assert assign(tables, SQLITE, {}, {"tbl_2": "orders_lower"}) == {
        "tbl_1": "Orders", "tbl_2": "orders_lower"}
    assert assign(tables, SQLITE, {}, {"tbl_2": "ORDERS"}) == {  # tbl_1 holds no name yet
        "tbl_1": "Orders-tbl_1", "tbl_2": "ORDERS"}
    with pytest.raises(NameClash, match=r"'Orders' \(tbl_1\) has that name.*--rename tbl_2=NAME"):
        assign(tables, SQLITE, {"Orders": "tbl_1"}, {"tbl_2": "ORDERS"})
    with pytest.raises(NameClash, match="whose data it holds"):
        assign([("tbl_2", "x")], SQLITE, {"taken": "tbl_9"}, {"tbl_2": "Taken"})
    with pytest.raises(NameClash, match="cannot hold a table named 'a/b'"):
        assign([("tbl_2", "x")], FILES, {}, {"tbl_2": "a/b"})


def test_column_names_a_destination_cannot_hold_are_named() -> None:
    assert column_problems(["_id", "Name", "name"], SQLITE) == [
        "columns 'Name' and 'name' would be one column (it compares column names ignoring case)"]
    assert column_problems(["Name", "name"], POSTGRES) == []
    long = "c" * 64
    assert column_problems([long], POSTGRES) == [
        f"column {long!r} is 64 bytes long; it holds names of at most 63"]


names_st = st.text(st.sampled_from("aA/\\_-.é\u00c9 \x00\n"), max_size=6)


@settings(max_examples=300, deadline=None)
@example(tables=["._"], held_names=[("A", "tbl_99"), ("a", "tbl_0")], rules=FILES)
@given(
    tables=st.lists(names_st, min_size=1, max_size=8),
    held_names=st.lists(st.tuples(names_st, st.sampled_from([None, "tbl_0", "tbl_3", "tbl_99"])),
                        max_size=4),
    rules=st.sampled_from([FILES, SQLITE, NameRules(max_bytes=12, files=True)]),
)
def test_no_two_tables_ever_share_a_name_after_the_destinations_rules(
    tables: list[str], held_names: list[tuple[str, str | None]], rules: NameRules
) -> None:
    listing = [(f"tbl_{i}", name) for i, name in enumerate(tables)]
    held = {spell(n, "tbl_x", rules): h for n, h in held_names}
    names = assign(listing, rules, held)
    assert set(names) == {t for t, _ in listing}
    folded = [fold(n) for n in names.values()]
    assert len(set(folded)) == len(folded)  # one-to-one, case and Unicode folded
    for table_id, name in names.items():
        assert spell(name, table_id, rules) == name  # a name the destination holds as is
        assert len(name.encode()) <= rules.max_bytes
        for other, holder in held.items():  # never another table's held name...
            if fold(other) == fold(name) and holder is not None and held.get(name) != table_id:
                assert holder == table_id
            # ...unless it holds this very name itself: a case-sensitive folder written
            # before names were recorded may hold "A" for one table and "a" for another
    again = assign(list(reversed(listing)), rules, {**held, **{n: t for t, n in names.items()}})
    assert again == names  # stable once held, in any listing order
