"""One specification of the destination protocol, run against every kind of the registry.

Every kind in `connector.destinations.registry.KINDS` runs here at its places (`PLACES`):
Parquet (a local folder and S3), CSV, SQLite and PostgreSQL, DuckDB and Delta Lake (local and
S3). Each takes the same changes through `Destination.apply` and is read back with a reader of
its own (`tests.destinations.helpers.Place`), never through `scan` or `stored` except where
those are the subject. What a spec expects is written out here by hand: the rows the test
wrote, and the conversions `connector.destinations.evolve` promises, value by value.

A test that needs a write mode or deletion marks says so (`needs`); it runs at the places of
the kinds whose `Capabilities` have them, and is not generated for the others (CSV is only
replaced whole, without marks). A kind added to the registry fails every test here until it
has a place. Iceberg's places are made in tests/destinations/test_iceberg.py (a SQLite or a
PostgreSQL catalog, read back with pyiceberg), which runs every test here the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connector.destinations import Target, open_destination, registry
from connector.destinations.evolve import (
    AddColumn,
    ChangeOptions,
    DropColumn,
    RenameColumn,
    RetypeColumn,
    SchemaOp,
)
from connector.errors import ConfigError
from connector.ids import IdSet
from connector.modes import WriteMode
from connector.schema import Column, Table, arrow_schema
from tests.destinations.helpers import Place, arrow_kind, to_batches
from tests.destinations.samples import OPTIONS, ROWS, T0, TABLE, numbered

#: The mark column of TABLE (none of its columns has the name).
DELETED_AT = "_deleted_at"

#: Where each kind of the registry runs the specification: a local folder or database, a
#: database server, an object storage bucket.
PLACES: dict[str, tuple[str, ...]] = {
    "parquet": ("parquet", "parquet-s3"),
    "csv": ("csv",),
    "delta": ("delta", "delta-s3"),
    "iceberg": ("sqlite-catalog", "postgresql-catalog"),
    "duckdb": ("duckdb",),
    "sql": ("sqlite", "postgresql"),
}
#: The fixture of the server or bucket a place is on (the others are local files).
SERVED = {"postgresql": "postgres_db", "parquet-s3": "s3", "delta-s3": "s3",
          "postgresql-catalog": "postgres_db"}
#: Kinds whose places another module makes (and runs this specification with).
ELSEWHERE = {"iceberg": "tests/destinations/test_iceberg.py"}


def needs(*modes: WriteMode, marks: bool = False) -> pytest.MarkDecorator:
    """What a test asks of a kind beyond a replace: write modes, deletion marks."""
    return pytest.mark.needs(modes=frozenset(modes), marks=marks)


def can(capabilities: registry.Capabilities, needed: pytest.Mark | None) -> bool:
    """Whether a kind with `capabilities` has what a test `needs`."""
    if needed is None:
        return True
    return needed.kwargs["modes"] <= capabilities.modes and (
        capabilities.marks or not needed.kwargs["marks"])


def places_of(kinds: Collection[str]) -> Callable[[pytest.Metafunc], None]:
    """A `pytest_generate_tests` giving each test that takes `place` the places of those of
    `kinds` that can run it (`needs`), as ``(kind, place)``; a kind without places gets
    one, which fails. A place on a server is marked `needs_server` (tests/fixtures/lanes.py)."""
    def generate(metafunc: pytest.Metafunc) -> None:
        if "place" in metafunc.fixturenames:
            needed = metafunc.definition.get_closest_marker("needs")
            metafunc.parametrize("place", [
                pytest.param((name, where), id=where,
                             marks=[pytest.mark.needs_server] if where in SERVED else [])
                for name in kinds if can(registry.kind(name).capabilities, needed)
                for where in PLACES.get(name, (f"{name} (no place)",))
            ], indirect=True)
    return generate


pytest_generate_tests = places_of([k.name for k in registry.KINDS if k.name not in ELSEWHERE])


def no_place(kind_name: str) -> None:
    if kind_name not in PLACES:
        pytest.fail(f"the registry's kind {kind_name!r} has no place to run the destination "
                    "specification: add its places to PLACES in tests/destinations/"
                    "test_conformance.py and its reader to tests/destinations/helpers.py Place",
                    pytrace=False)


@pytest.fixture
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    kind_name, where = request.param
    no_place(kind_name)
    if where in ("parquet", "csv", "delta"):
        return Place(where, str(tmp_path / "out"))
    if where == "sqlite":
        return Place(where, f"sqlite:///{tmp_path / 'w.db'}")
    if where == "duckdb":
        return Place(where, f"duckdb:///{tmp_path / 'w.duckdb'}")
    served = request.getfixturevalue(SERVED[where])
    if where == "postgresql":
        return Place(where, str(served))
    return Place(where, served.url("lake"), served)


def test_every_kind_of_the_registry_has_a_place() -> None:
    assert sorted(PLACES) == sorted(k.name for k in registry.KINDS)


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["_id"]: dict(r) for r in rows}


def live(held: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The rows not marked deleted, without the mark column."""
    assert held is not None, "no table"
    return {i: {k: v for k, v in r.items() if k != DELETED_AT}
            for i, r in held.items() if r.get(DELETED_AT) is None}


def stamps(held: dict[str, dict[str, Any]] | None) -> dict[str, datetime | None]:
    assert held is not None, "no table"
    return {i: r[DELETED_AT] for i, r in held.items()}


def with_values(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**row, **changes}


# --- modes --------------------------------------------------------------------------------


def test_every_type_and_value_reads_back(place: Place) -> None:
    done = place.apply(ROWS)
    assert (done.written, done.deleted) == (len(ROWS), 0)
    assert live(place.held()) == by_id(ROWS)
    expected = {"_id": "text", "_created_at": "timestamp", "_updated_at": "timestamp",
                "Name": "text", "Status": "choice" if place.stores_choices else "text",
                "Amount": "number", "Paid": "checkbox", "Due": "date", "id": "text",
                "created_at": "text"}
    assert place.types() == expected


def test_replace_makes_the_table_exactly_the_rows(place: Place) -> None:
    place.apply(ROWS)
    done = place.apply(numbered(7, start=3))
    assert (done.written, done.deleted) == (7, 0)
    assert live(place.held()) == by_id(numbered(7, start=3))
    assert place.tables() == [place_name(place)]
    done = place.apply([])
    assert (done.written, done.deleted) == (0, 0)
    assert place.held() == {}
    assert "Due" in place.types()  # an empty table keeps its columns


def place_name(place: Place) -> str:
    return "orders" + {"parquet": ".parquet", "csv": ".csv"}.get(place.registry_kind, "")


@needs("append")
def test_append_adds_only_new_ids_and_counts_only_them(place: Place) -> None:
    place.apply(numbered(3))
    edited = with_values(numbered(1)[0], Name="changed upstream", Amount=99.0)
    done = place.apply([edited, *numbered(2, start=1), *numbered(1, start=3)], mode="append")
    assert (done.written, done.deleted) == (1, 0)
    assert live(place.held()) == by_id(numbered(4))  # row_0 as it was
    done = place.apply(numbered(2, start=4), mode="append")
    assert (done.written, done.deleted) == (2, 0)
    assert sorted(live(place.held())) == sorted(f"row_{i}" for i in range(6))


@needs("append")
def test_append_into_a_missing_table_creates_it(place: Place) -> None:
    done = place.apply(ROWS, mode="append")
    assert (done.written, done.deleted) == (len(ROWS), 0)
    assert live(place.held()) == by_id(ROWS)


@needs("merge")
def test_merge_upserts_by_id_and_deletes_in_one_change(place: Place) -> None:
    place.apply(ROWS)
    changed = with_values(ROWS[0], Name="Ada Lovelace", Amount=None, Status="closed", Paid=False)
    new = numbered(1, start=8)[0]
    done = place.apply([changed, new], mode="merge", deleted=["row_2", "row_missing"])
    assert (done.written, done.deleted) == (2, 1)
    assert live(place.held()) == by_id([changed, ROWS[2], ROWS[3], new])
    assert DELETED_AT not in place.types()  # deleting, not marking: no mark column


@needs("merge")
def test_merge_with_the_rows_ids_given_as_the_runner_gives_them(place: Place) -> None:
    place.apply(numbered(4))
    rows = [with_values(numbered(1, start=1)[0], Name="new 1"), *numbered(1, start=9)]
    ids = IdSet.of([pa.array([r["_id"] for r in rows])])
    done = place.apply(rows, mode="merge", deleted=["row_0"], ids=ids)
    assert (done.written, done.deleted) == (2, 1)
    assert live(place.held()) == by_id([rows[0], *numbered(2, start=2), rows[1]])


@needs("merge")
def test_merge_into_a_missing_table_creates_it(place: Place) -> None:
    done = place.apply(ROWS, mode="merge", deleted=["row_nowhere"])
    assert (done.written, done.deleted) == (len(ROWS), 0)
    assert live(place.held()) == by_id(ROWS)


@needs("merge")
def test_a_long_merge_deletes_exactly_the_ids_asked(place: Place) -> None:
    place.apply(numbered(1200))
    doomed = [f"row_{i}" for i in range(0, 1200, 2)] + ["row_nope"]
    done = place.apply([], mode="merge", deleted=doomed)
    assert (done.written, done.deleted) == (0, 600)
    assert sorted(live(place.held())) == sorted(f"row_{i}" for i in range(1, 1200, 2))


# --- deletion marks -----------------------------------------------------------------------


@needs("merge", marks=True)
def test_a_first_merge_of_creates_with_marks_has_the_mark_column(place: Place) -> None:
    done = place.apply(numbered(3), mode="merge", mark=True)
    assert (done.written, done.deleted) == (3, 0)
    assert place.types()[DELETED_AT] == "timestamp"
    assert stamps(place.held()) == dict.fromkeys([f"row_{i}" for i in range(3)])


@needs(marks=True)
def test_a_first_replace_with_marks_has_the_mark_column(place: Place) -> None:
    place.apply(numbered(2), mark=True)
    assert place.types()[DELETED_AT] == "timestamp"
    assert stamps(place.held()) == {"row_0": None, "row_1": None}


@needs("merge", marks=True)
def test_a_first_merge_of_deletes_only_creates_a_marked_table(place: Place) -> None:
    done = place.apply([], mode="merge", deleted=["row_0"], mark=True)
    assert (done.written, done.deleted) == (0, 0)
    assert place.held() == {}
    assert place.types()[DELETED_AT] == "timestamp"
    done = place.apply(numbered(2), mode="merge", mark=True)
    assert (done.written, done.deleted) == (2, 0)
    assert stamps(place.held()) == {"row_0": None, "row_1": None}


@needs("merge", marks=True)
def test_an_update_only_merge_into_a_marked_table(place: Place) -> None:
    """Delta once failed this ("No field named s._deleted_at")."""
    place.apply(numbered(3), mode="merge", mark=True)
    updated = with_values(numbered(1, start=1)[0], Name="updated")
    done = place.apply([updated], mode="merge", mark=True)
    assert (done.written, done.deleted) == (1, 0)
    assert live(place.held()) == by_id([numbered(1)[0], updated, numbered(1, start=2)[0]])
    assert set(stamps(place.held()).values()) == {None}


@needs("merge", marks=True)
def test_deletes_before_creates_before_updates_with_marks(place: Place) -> None:
    place.apply([], mode="merge", deleted=["row_1"], mark=True)
    place.apply(numbered(2), mode="merge", mark=True)
    done = place.apply([with_values(numbered(1)[0], Name="again")], mode="merge", deleted=["row_1"],
                       mark=True)
    assert (done.written, done.deleted) == (1, 1)
    held = place.held()
    assert held is not None and held["row_0"]["Name"] == "again"
    assert held["row_0"][DELETED_AT] is None and held["row_1"][DELETED_AT] is not None


@needs("merge", marks=True)
def test_marks_stamp_once_and_a_returning_row_loses_its_mark(place: Place) -> None:
    place.apply(numbered(4), mode="merge", mark=True)
    before = datetime.now(UTC)
    done = place.apply([], mode="merge", deleted=["row_2", "row_3", "row_missing"], mark=True)
    after = datetime.now(UTC)
    assert (done.written, done.deleted) == (0, 2)
    first = stamps(place.held())
    assert first["row_0"] is None and first["row_1"] is None
    assert before <= first["row_2"] <= after and first["row_3"] == first["row_2"]  # type: ignore[operator]
    assert "row_missing" not in first  # a mark is never a new row
    assert live(place.held()) == by_id(numbered(2))
    marked = place.held()
    assert marked is not None and marked["row_2"]["Name"] == "row 2"  # values kept

    back = with_values(numbered(1, start=3)[0], Name="back")
    done = place.apply([back], mode="merge", deleted=["row_2", "row_0"], mark=True)
    assert (done.written, done.deleted) == (1, 1)  # row_2 was marked already: not counted
    second = stamps(place.held())
    assert second["row_2"] == first["row_2"]  # its first time stays
    assert second["row_3"] is None and second["row_0"] is not None and second["row_0"] > first["row_2"]  # type: ignore[operator]
    assert live(place.held()) == by_id([numbered(1, start=1)[0], back])


@needs("merge", "append", marks=True)
def test_an_append_leaves_marked_rows_as_they_are(place: Place) -> None:
    place.apply(numbered(3), mode="merge", mark=True)
    place.apply([], mode="merge", deleted=["row_1"], mark=True)
    stamp = stamps(place.held())["row_1"]
    done = place.apply([with_values(numbered(1, start=1)[0], Name="back?"), *numbered(1, start=5)],
                       mode="append")
    assert (done.written, done.deleted) == (1, 0)
    held = place.held()
    assert held is not None
    assert held["row_1"]["Name"] == "row 1" and held["row_1"][DELETED_AT] == stamp
    assert sorted(live(held)) == ["row_0", "row_2", "row_5"]


@needs("merge", marks=True)
def test_a_replace_drops_marked_rows_with_the_rest(place: Place) -> None:
    place.apply(numbered(3), mode="merge", mark=True)
    place.apply([], mode="merge", deleted=["row_1"], mark=True)
    place.apply(numbered(2, start=7))
    assert live(place.held()) == by_id(numbered(2, start=7))
    assert set(place.held() or ()) == {"row_7", "row_8"}


# --- reading back through the protocol: scan and stored -----------------------------------


def scan(place: Place, columns: list[str], table: Table = TABLE, **kwargs: Any) -> pa.Table:
    destination = open_destination(place.config())
    try:
        batches = list(destination.scan(Target(table, table.name), columns, **kwargs))
    finally:
        destination.close()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def stored(place: Place, table: Table = TABLE) -> pa.Schema | None:
    destination = open_destination(place.config())
    try:
        return destination.stored(Target(table, table.name))
    finally:
        destination.close()


@needs("merge", marks=True)
def test_scan_returns_live_rows_and_filters_by_update_time(place: Place) -> None:
    assert scan(place, ["_id"]).num_rows == 0  # no table: nothing
    place.apply(ROWS, mode="merge", mark=True)
    place.apply([], mode="merge", deleted=["row_3"], mark=True)
    got = scan(place, ["_id", "Name", "Amount", "not held"])
    assert got.column_names == ["_id", "Name", "Amount"]
    held = live(place.held())
    assert sorted(got.to_pylist(), key=lambda r: r["_id"]) == [
        {"_id": i, "Name": held[i]["Name"], "Amount": held[i]["Amount"]} for i in sorted(held)]
    assert sorted(held) == ["row_1", "row_2", "row_4"]
    later = scan(place, ["_id"], updated_after=T0)
    assert sorted(later.column("_id").to_pylist()) == ["row_1", "row_4"]  # row_3 is marked


@needs("merge", marks=True)
def test_stored_is_none_without_a_table_and_the_held_columns_with_one(place: Place) -> None:
    assert stored(place) is None
    place.apply(numbered(1), mode="merge", mark=True)
    schema = stored(place)
    assert schema is not None
    assert {f.name: arrow_kind(f.type) for f in schema} == place.types()
    assert schema.names == [*arrow_schema(TABLE).names, DELETED_AT]
    other = Table("tbl_other", "other", (Column("x", "text"),))
    assert stored(place, other) is None


# --- schema evolution ---------------------------------------------------------------------

KINDS = ("text", "choice", "number", "checkbox", "date")
CHOICES = ("a", "yes")
D = date(2024, 5, 1)

#: Held values of each kind of column, and what each becomes as every other kind, written out
#: from the rules `connector.destinations.evolve.convert` promises.
HELD: dict[str, list[Any]] = {
    "text": ["12.5", " 3 ", "yes", "2024-05-01", "2024-05-01T10:00:00", "hello", "0", "1e3",
             "2024-02-31", "", None],
    "choice": ["yes", "12.5", "2024-05-01", "a", "0", None],
    "number": [3.0, 0.5, -2.0, 1.0, 0.0, None],
    "checkbox": [True, False, None],
    "date": [D, date(1970, 1, 1), None],
}
AS: dict[tuple[str, str], list[Any]] = {
    ("text", "choice"): HELD["text"],
    ("text", "number"): [12.5, 3.0, None, None, None, None, 0.0, 1000.0, None, None, None],
    ("text", "checkbox"): [None, None, True, None, None, None, False, None, None, None, None],
    ("text", "date"): [None, None, None, D, D, None, None, None, None, None, None],
    ("choice", "text"): HELD["choice"],
    ("choice", "number"): [None, 12.5, None, None, 0.0, None],
    ("choice", "checkbox"): [True, None, None, None, False, None],
    ("choice", "date"): [None, None, D, None, None, None],
    ("number", "text"): ["3", "0.5", "-2", "1", "0", None],
    ("number", "choice"): ["3", "0.5", "-2", "1", "0", None],
    ("number", "checkbox"): [None, None, None, True, False, None],
    ("number", "date"): [None] * 6,
    ("checkbox", "text"): ["true", "false", None],
    ("checkbox", "choice"): ["true", "false", None],
    ("checkbox", "number"): [1.0, 0.0, None],
    ("checkbox", "date"): [None] * 3,
    ("date", "text"): ["2024-05-01", "1970-01-01", None],
    ("date", "choice"): ["2024-05-01", "1970-01-01", None],
    ("date", "number"): [None] * 3,
    ("date", "checkbox"): [None] * 3,
}
HELD_ROWS = max(len(v) for v in HELD.values())


def typed_table(kinds: dict[str, str]) -> Table:
    """A table with one column per held kind (named ``from_<kind>``) of the given kinds."""
    return Table("tbl_evo", "evo", tuple(
        Column(f"from_{source}", kind, id=f"col_{source}",
               options=CHOICES if kind == "choice" else None)
        for source, kind in kinds.items()))


def held_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(HELD_ROWS):
        row: dict[str, Any] = {"_id": f"r{i:02}", "_created_at": T0, "_updated_at": T0}
        for kind, values in HELD.items():
            row[f"from_{kind}"] = values[i] if i < len(values) else None
        rows.append(row)
    return rows


def converted(to: str) -> dict[str, dict[str, Any]]:
    """The held rows as they read back after every column became `to`."""
    out = {}
    for i, row in enumerate(held_rows()):
        out[row["_id"]] = {**row, **{
            f"from_{kind}": (values[i] if kind == to else AS[kind, to][i]) if i < len(values) else None
            for kind, values in HELD.items()}}
    return out


STORED_AS = {"text": "text", "choice": "text", "number": "number", "checkbox": "checkbox",
             "date": "date"}


@needs("merge", marks=True)
@pytest.mark.parametrize("to", KINDS)
def test_retyping_converts_held_values_marked_rows_included(place: Place, to: str) -> None:
    before = typed_table({k: k for k in KINDS})
    after = typed_table(dict.fromkeys(KINDS, to))
    place.apply(held_rows(), table=before, mode="merge", mark=True)
    place.apply([], table=before, mode="merge", deleted=["r01", "r02"], mark=True)
    marked = stamps(place.held("evo"))
    ops: tuple[SchemaOp, ...] = tuple(
        RetypeColumn(f"from_{k}", k, to) for k in KINDS if k != to)
    fresh = {"_id": "r99", "_created_at": T0, "_updated_at": T0,
             **{f"from_{k}": None for k in KINDS}}
    done = place.apply([fresh], table=after, mode="merge", mark=True, evolve=ops)
    assert (done.written, done.deleted) == (1, 0)

    held = place.held("evo")
    assert stamps(held) == {**marked, "r99": None}  # marked rows keep their marks
    expected = {**converted(to), "r99": fresh}
    assert {i: {k: v for k, v in r.items() if k != DELETED_AT} for i, r in (held or {}).items()} \
        == expected
    want = "choice" if to == "choice" and place.stores_choices else STORED_AS[to]
    types = place.types("evo")
    assert {c: types[c] for c in after.column_names} == dict.fromkeys(after.column_names, want)
    if place.kind == "sqlite" and to in ("text", "choice"):
        # no numeric affinity left behind: the text '0.5' stays text
        assert place.storage_classes("evo", "from_number") == {"text", "null"}


@needs("merge", marks=True)
def test_a_column_added_is_empty_in_held_rows(place: Place) -> None:
    place.apply(numbered(2), mode="merge", mark=True)
    place.apply([], mode="merge", deleted=["row_1"], mark=True)
    grown = Table(TABLE.id, TABLE.name, (*TABLE.columns, Column("Notes", "text", id="col_Notes")))
    row = {**numbered(1, start=5)[0], "Notes": "added later"}
    done = place.apply([row], table=grown, mode="merge", mark=True,
                       evolve=(AddColumn("Notes", "text"),))
    assert (done.written, done.deleted) == (1, 0)
    held = place.held()
    assert held is not None
    assert {i: r["Notes"] for i, r in held.items()} == {
        "row_0": None, "row_1": None, "row_5": "added later"}
    assert held["row_1"][DELETED_AT] is not None
    assert place.types()["Notes"] == "text"


@needs("merge", marks=True)
def test_a_column_renamed_keeps_its_values(place: Place) -> None:
    place.apply(ROWS, mode="merge", mark=True)
    place.apply([], mode="merge", deleted=["row_2"], mark=True)
    columns = tuple(Column("Title", c.type, id=c.id, required=c.required) if c.name == "Name"
                    else c for c in TABLE.columns)
    after = Table(TABLE.id, TABLE.name, columns)
    new = {**{k: v for k, v in numbered(1, start=7)[0].items() if k != "Name"}, "Title": "new"}
    update = {**{k: v for k, v in ROWS[3].items() if k != "Name"}, "Title": "updated"}
    done = place.apply([new, update], table=after, mode="merge", mark=True,
                       evolve=(RenameColumn("Name", "Title"),))
    assert (done.written, done.deleted) == (2, 0)
    held = place.held()
    assert held is not None
    assert {i: r["Title"] for i, r in held.items()} == {
        **{r["_id"]: r["Name"] for r in ROWS}, "row_7": "new", "row_4": "updated"}
    assert "Name" not in place.types() and place.types()["Title"] == "text"
    assert held["row_2"][DELETED_AT] is not None
    assert held["row_1"]["Amount"] == ROWS[0]["Amount"]  # the other columns untouched


@needs("merge", marks=True)
def test_a_column_dropped_is_gone(place: Place) -> None:
    place.apply(ROWS, mode="merge", mark=True)
    after = Table(TABLE.id, TABLE.name, tuple(c for c in TABLE.columns if c.name != "Amount"))
    new = {k: v for k, v in numbered(1, start=7)[0].items() if k != "Amount"}
    done = place.apply([new], table=after, mode="merge", mark=True,
                       evolve=(DropColumn("Amount", "number"),))
    assert (done.written, done.deleted) == (1, 0)
    assert "Amount" not in place.types()
    expected = {r["_id"]: {k: v for k, v in r.items() if k != "Amount"} for r in [*ROWS, new]}
    assert live(place.held()) == expected


@needs("merge")
def test_choice_options_changed_keep_the_values(place: Place) -> None:
    place.apply(ROWS, mode="merge")
    options = ("open", "closed", "archived")
    columns = tuple(Column(c.name, c.type, id=c.id, options=options) if c.name == "Status"
                    else c for c in TABLE.columns)
    after = Table(TABLE.id, TABLE.name, columns)
    new = {**numbered(1, start=7)[0], "Status": "archived"}
    done = place.apply([new], table=after, mode="merge",
                       evolve=(ChangeOptions("Status", ("archived",), ("on hold",)),))
    assert (done.written, done.deleted) == (1, 0)
    assert {i: r["Status"] for i, r in live(place.held()).items()} == {
        **{r["_id"]: r["Status"] for r in ROWS}, "row_7": "archived"}  # "on hold" stays
    if place.stores_choices:
        assert place.types()["Status"] == "choice"


@needs("append")
def test_several_changes_at_once_with_an_append(place: Place) -> None:
    place.apply(ROWS)
    columns = (
        Column("Title", "text", id="col_Name"),              # renamed
        Column("Status", "choice", id="col_Status", options=OPTIONS),
        Column("Amount", "text", id="col_Amount"),           # retyped
        Column("Due", "date", id="col_Due"),                  # Paid dropped
        Column("Notes", "checkbox", id="col_Notes"),          # added
    )
    after = Table(TABLE.id, TABLE.name, columns)
    ops: tuple[SchemaOp, ...] = (
        RenameColumn("Name", "Title"), RetypeColumn("Amount", "number", "text"),
        AddColumn("Notes", "checkbox"), DropColumn("Paid", "checkbox"),
        DropColumn("id", "text"), DropColumn("created_at", "text"),
    )
    new = {"_id": "row_9", "_created_at": T0, "_updated_at": T0, "Title": "t", "Status": "open",
           "Amount": "many", "Due": None, "Notes": True}
    done = place.apply([new, with_values(new, _id="row_1")], table=after, mode="append", evolve=ops)
    assert (done.written, done.deleted) == (1, 0)
    as_text = {"row_1": "12.5", "row_2": "-0.1", "row_3": None, "row_4": "1e+300"}
    expected = {r["_id"]: {"_id": r["_id"], "_created_at": r["_created_at"],
                           "_updated_at": r["_updated_at"], "Title": r["Name"],
                           "Status": r["Status"], "Amount": as_text[r["_id"]], "Due": r["Due"],
                           "Notes": None} for r in ROWS}
    assert live(place.held()) == {**expected, "row_9": new}
    types = place.types()
    assert [types[c] for c in ("Title", "Amount", "Due", "Notes")] == [
        "text", "text", "date", "checkbox"]
    assert not {"Name", "Paid", "id", "created_at"} & set(types)


# --- failures -----------------------------------------------------------------------------


class Boom(Exception):
    pass


def failing(rows: list[dict[str, Any]], table: Table = TABLE) -> Iterator[pa.RecordBatch]:
    yield from to_batches(rows, table, size=2)
    raise Boom("the read failed mid-way")


GROWN = Table(TABLE.id, TABLE.name, (
    *(Column("Amount", "text", id=c.id) if c.name == "Amount" else c for c in TABLE.columns),
    Column("Notes", "text", id="col_Notes"),
))


@needs("merge", "append", marks=True)
@pytest.mark.parametrize("how", ["replace", "append", "merge", "merge-marks", "evolve"])
def test_a_failing_row_stream_leaves_the_table_as_it_was(place: Place, how: str) -> None:
    place.apply(ROWS, mode="merge", mark=True)
    place.apply([], mode="merge", deleted=["row_2"], mark=True)
    before, types, tables = place.held(), place.types(), place.tables()
    version = place.delta_version() if place.kind.startswith("delta") else None
    new = numbered(6, start=1, name="new")
    with pytest.raises(Boom):
        if how == "evolve":
            grown = [{**r, "Amount": "x", "Notes": "n"} for r in new]
            place.apply(failing(grown, GROWN), table=GROWN, mode="merge", mark=True,
                        deleted=["row_1"], evolve=(RetypeColumn("Amount", "number", "text"),
                                                   AddColumn("Notes", "text")))
        elif how.startswith("merge"):
            place.apply(failing(new), mode="merge", deleted=["row_1", "row_4"],
                        mark=how == "merge-marks")
        else:
            place.apply(failing(new), mode=how)  # type: ignore[arg-type]
    assert place.held() == before
    assert place.types() == types
    assert place.tables() == tables
    if version is not None:
        assert place.delta_version() == version


# --- names --------------------------------------------------------------------------------

HOSTILE = Table("tbl_h", 'x"; drop table y; -- ü', (
    Column("select", "text", id="c1"),
    Column('we"ird `col`', "number", id="c2"),
    Column("Order Date", "date", id="c3"),
    Column("from", "choice", id="c4", options=("a", "b")),
))


@needs("merge", marks=True)
def test_hostile_table_and_column_names(place: Place) -> None:
    row = {"_id": "r'1", "_created_at": T0, "_updated_at": T0, "select": "s",
           'we"ird `col`': 1.5, "Order Date": date(2024, 1, 2), "from": "b"}
    other = {**row, "_id": 'r"2', "select": "other"}
    place.apply([row, other], table=HOSTILE, mode="merge", mark=True)
    changed = {**row, "select": "changed", 'we"ird `col`': None}
    done = place.apply([changed], table=HOSTILE, mode="merge", mark=True, deleted=['r"2'])
    assert (done.written, done.deleted) == (1, 1)
    renamed = Table(HOSTILE.id, HOSTILE.name, (
        Column("select", "text", id="c1"), Column("x`y\"z", "number", id="c2"),
        *HOSTILE.columns[2:]))
    place.apply([], table=renamed, mode="merge", mark=True,
                evolve=(RenameColumn('we"ird `col`', "x`y\"z"),))
    held = place.held(HOSTILE.name)
    assert held is not None
    assert {i: (r["select"], r["x`y\"z"], r[DELETED_AT] is None) for i, r in held.items()} == {
        "r'1": ("changed", None, True), 'r"2': ("other", 1.5, False)}
    assert scan(place, ["_id", "x`y\"z"], renamed).to_pylist() == [{"_id": "r'1", "x`y\"z": None}]


def test_held_names_say_which_table_each_name_holds(place: Place) -> None:
    """What `connector.naming` names tables from: every table the destination holds, and
    the table id recorded for it (None: written, not recorded)."""
    opened = open_destination(place.config())
    try:
        assert opened.held() == {}
        place.apply(ROWS)
        assert opened.held() == {"orders": None}
        opened.claim({"orders": TABLE.id, "claimed_first": "tbl_other"})
        assert opened.held() == {"orders": TABLE.id, "claimed_first": "tbl_other"}
        opened.claim({"orders": TABLE.id})  # recorded again: now the latest
        assert list(opened.held()) == ["claimed_first", "orders"]
    finally:
        opened.close()
    reopened = open_destination(place.config())  # kept by the destination itself
    try:
        assert reopened.held() == {"claimed_first": "tbl_other", "orders": TABLE.id}
    finally:
        reopened.close()


def test_a_version_moves_with_every_commit_and_claim_and_never_with_a_read(place: Place) -> None:
    """What lets a run answer from memory (`connector.destinations.remembered`): a kind
    either reads no version (None, always), or one that any change moves."""

    def version() -> str | None:
        opened = open_destination(place.config())
        try:
            return opened.version()
        finally:
            opened.close()

    place.apply(ROWS)
    first = version()
    opened = open_destination(place.config())
    try:
        list(opened.scan(Target(TABLE, TABLE.name), ["_id", "_updated_at"]))
        opened.stored(Target(TABLE, TABLE.name))
        opened.held()
    finally:
        opened.close()
    assert version() == first
    place.apply(ROWS[:1])  # another writer's commit, as the destination sees it
    second = version()
    opened = open_destination(place.config())
    try:
        opened.claim({"claimed": "tbl_claimed"})
    finally:
        opened.close()
    third = version()
    if first is None:
        assert (second, third) == (None, None)
    else:
        assert len({first, second, third}) == 3, (first, second, third)
    own_catalog = place.kind == "iceberg" and getattr(place, "catalog", None) is None
    assert (place.kind == "sqlite" or own_catalog) == (first is not None)  # the cheap ones


# --- exact values: every number as its value type holds it, "" apart from null ---------------

EXACT = Table("tbl_exact", "exact", (
    Column("Big", "number", id="col_Big", value_type="int64"),
    Column("Float", "number", id="col_Float"),
    Column("Digits", "number", id="col_Digits", value_type="text"),
    Column("Note", "text", id="col_Note"),
    Column("Pick", "choice", id="col_Pick", options=("", "a")),
))
EXACT_ROWS: list[dict[str, Any]] = [
    {"_id": "r1", "_created_at": T0, "_updated_at": T0, "Big": 2**53 + 1, "Float": 2.0**53 + 2,
     "Digits": "9007199254740993", "Note": "", "Pick": ""},
    {"_id": "r2", "_created_at": T0, "_updated_at": T0, "Big": 2**63 - 1, "Float": 5e-324,
     "Digits": "0.1", "Note": None, "Pick": None},
    {"_id": "r3", "_created_at": T0, "_updated_at": T0, "Big": -(2**63), "Float": 1e308,
     "Digits": "1e+16", "Note": "x", "Pick": "a"},
    {"_id": "r4", "_created_at": T0, "_updated_at": T0, "Big": None, "Float": -0.5,
     "Digits": None, "Note": " ", "Pick": None},
]


def test_numbers_past_2_to_the_53_and_empty_text_read_back_exactly(place: Place) -> None:
    done = place.apply(EXACT_ROWS, table=EXACT)
    assert done.written == len(EXACT_ROWS)
    held = live(place.held("exact"))
    assert held == by_id(EXACT_ROWS)
    assert all(type(r["Big"]) is int for r in held.values() if r["Big"] is not None)
    types = place.types("exact")
    assert {c: types[c] for c in ("Big", "Float", "Digits", "Note")} == {
        "Big": "int64", "Float": "number", "Digits": "text", "Note": "text"}


@needs("merge")
def test_a_merge_compares_and_keeps_numbers_exactly(place: Place) -> None:
    """2**53 + 1 becomes 2**53 + 2, not "the same"; "" becomes null."""
    place.apply(EXACT_ROWS, table=EXACT)
    changed = with_values(EXACT_ROWS[0], Big=2**53 + 2, Note=None)
    place.apply([changed], table=EXACT, mode="merge")
    assert live(place.held("exact")) == by_id([changed, *EXACT_ROWS[1:]])


MONEY = Table("tbl_money", "money", (
    Column("Amount", "number", id="col_Amount", value_type="decimal(38,9)", typed_by="test"),
    Column("Cents", "number", id="col_Cents", value_type="decimal(10,2)"),
))
MONEY_ROWS: list[dict[str, Any]] = [
    {"_id": "m1", "_created_at": T0, "_updated_at": T0,
     "Amount": Decimal("12345678901234567890.123456789"), "Cents": Decimal("0.10")},
    {"_id": "m2", "_created_at": T0, "_updated_at": T0, "Amount": Decimal("-0.000000001"),
     "Cents": Decimal("-99999999.99")},
    {"_id": "m3", "_created_at": T0, "_updated_at": T0, "Amount": None, "Cents": None},
]


def test_decimals_are_held_as_decimals_or_refused_where_they_cannot_be(place: Place) -> None:
    if place.kind == "sqlite":  # SQLite's NUMERIC keeps 15 digits: refused, naming the setting
        with pytest.raises(ConfigError, match=r"^sqlite:///.*w\.db: table 'money': test: column 'Amount' is decimal\(38,9\), and it holds no exact decimal"):
            place.apply(MONEY_ROWS, table=MONEY)
        assert place.tables() == []
        return
    place.apply(MONEY_ROWS, table=MONEY)
    if place.kind == "csv":  # a CSV file declares no types: the digits, every place of the scale
        assert {r["_id"]: (r["Amount"], r["Cents"]) for r in place.text("money")} == {
            "m1": ("12345678901234567890.123456789", "0.10"),
            "m2": ("-0.000000001", "-99999999.99"), "m3": (None, None)}
        return
    held = live(place.held("money"))
    assert held == by_id(MONEY_ROWS)
    assert {c: place.types("money")[c] for c in ("Amount", "Cents")} == {
        "Amount": "decimal(38,9)", "Cents": "decimal(10,2)"}


@needs("merge", marks=True)
def test_a_number_retyped_to_another_value_type_keeps_what_it_holds_exactly(place: Place) -> None:
    before = Table("tbl_n", "n", (Column("N", "number", id="col_N"),))
    after = Table("tbl_n", "n", (Column("N", "number", id="col_N", value_type="int64"),))
    rows = [{"_id": f"n{i}", "_created_at": T0, "_updated_at": T0, "N": v}
            for i, v in enumerate([3.0, 2.5, 2.0**60, None])]
    place.apply(rows, table=before, mode="merge", mark=True)
    place.apply([], table=before, mode="merge", deleted=["n0", "n1", "n2"], mark=True)
    op = RetypeColumn("N", "number", "number (int64)")
    fresh = {"_id": "n9", "_created_at": T0, "_updated_at": T0, "N": 2**63 - 1}
    place.apply([fresh], table=after, mode="merge", mark=True, evolve=(op,))
    held = place.held("n")
    assert held is not None
    # 3.0 and 2**60 are whole: held as integers; 2.5 is not: empty (the evolve rule)
    assert {i: r["N"] for i, r in held.items()} == {
        "n0": 3, "n1": None, "n2": 2**60, "n3": None, "n9": 2**63 - 1}
    assert place.types("n")["N"] == "int64"
