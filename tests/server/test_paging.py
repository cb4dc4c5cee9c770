"""Deep-offset seeking gives the same pages as a cold OFFSET scan, and forgets on writes."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path

import pytest

from connector.server.paging import OffsetIndex
from connector.server.query import parse
from connector.server.storage import SORT_INDEX_MIN_ROWS, Storage
from tests.server.conftest import PEOPLE


def test_nearest_returns_the_closest_mark_at_or_below() -> None:
    index = OffsetIndex()
    index.remember("q", 1, 100, ("k100",))
    index.remember("q", 1, 300, ("k300",))
    assert index.nearest("q", 1, 99) is None
    assert index.nearest("q", 1, 100) == (100, ("k100",))
    assert index.nearest("q", 1, 299) == (100, ("k100",))
    assert index.nearest("q", 1, 10**6) == (300, ("k300",))


def test_a_new_version_forgets_marks_and_totals() -> None:
    index = OffsetIndex()
    index.remember("q", 1, 100, ("k",))
    index.remember_total("q", 1, 42)
    assert index.nearest("q", 2, 100) is None
    assert index.total("q", 2) is None


def test_memory_is_bounded() -> None:
    index = OffsetIndex(max_queries=2, max_marks=10)
    for i in range(25):
        index.remember("q", 1, i, (i,))
    assert index.nearest("q", 1, 0) is None  # the oldest marks were dropped
    assert index.nearest("q", 1, 24) == (24, (24,))
    index.remember("a", 1, 0, ("a",))
    index.remember("b", 1, 0, ("b",))
    assert index.nearest("q", 1, 24) is None  # least recently used query evicted


@pytest.mark.parametrize("params", [{}, {"sort": "Age"}, {"sort": "Age", "order": "desc"},
                                    {"filter": '{"Status": {"eq": "Active"}}', "sort": "Joined"}])
def test_seeking_pages_equal_cold_pages(tmp_path: Path, params: dict[str, str]) -> None:
    path = str(tmp_path / "p.db")
    warm = Storage(path)
    table = warm.create_table(PEOPLE)
    rng = random.Random(3)
    cells = [
        {"Name": f"n{i}", "Age": rng.choice([1, 2, 3]), "Status": rng.choice(["Active", "Inactive"]),
         "Joined": rng.choice(["2024-01-01", "2024-02-01"])}
        for i in range(2000)
    ]
    warm.insert_rows(table, cells)
    cold = Storage(path)  # a fresh OffsetIndex: every page is an OFFSET scan
    limit = 37
    for offset in range(0, 2000, limit):  # sequential: warm seeks from its marks
        q = parse(table, {**params, "limit": str(limit), "offset": str(offset)})
        assert warm.list_rows(table, q) == cold.list_rows(table, q)
        cold.offsets = OffsetIndex()
    for offset in rng.sample(range(2100), 50):  # random jumps seek from the nearest mark
        q = parse(table, {**params, "limit": str(limit), "offset": str(offset)})
        assert warm.list_rows(table, q) == cold.list_rows(table, q)
        cold.offsets = OffsetIndex()


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_table_big_enough_for_a_sort_index_pages_in_python_order(tmp_path: Path, order: str) -> None:
    storage = Storage(str(tmp_path / "big.db"))
    table = storage.create_table(PEOPLE)
    rng = random.Random(11)
    ages = [rng.choice([None, 1, 2, 2.5, 3]) for _ in range(SORT_INDEX_MIN_ROWS)]
    storage.insert_rows(table, [{"Name": f"n{i}"} | ({"Age": a} if a is not None else {}) for i, a in enumerate(ages)])
    ranked = sorted(range(len(ages)), key=lambda i: (ages[i] is not None, ages[i] or 0, i))
    expected = [f"n{i}" for i in (reversed(ranked) if order == "desc" else ranked)]
    got: list[str] = []
    for offset in range(0, len(ages), 450):
        page = storage.list_rows(table, parse(table, {"sort": "Age", "order": order, "limit": "450", "offset": str(offset)}))
        got += [r["fields"]["Name"] for r in page.rows]
    assert got == expected


@pytest.mark.parametrize(("sort", "order"), [("created_at", "asc"), ("created_at", "desc"), ("id", "asc"), ("id", "desc")])
def test_creation_and_id_order_marks_survive_writes_and_stay_exact(tmp_path: Path, sort: str, order: str) -> None:
    storage = Storage(str(tmp_path / "w.db"))
    table = storage.create_table(PEOPLE)
    rows = storage.insert_rows(table, [{"Name": f"n{i}"} for i in range(300)])

    def expected() -> list[str]:
        key = (lambda r: r["id"]) if sort == "id" else (lambda r: (r["created_at"], r["id"]))
        return [r["id"] for r in sorted(rows, key=key, reverse=order == "desc")]

    def page(offset: int) -> list[str]:
        q = parse(table, {"sort": sort, "order": order, "limit": "20", "offset": str(offset)})
        return [r["id"] for r in storage.list_rows(table, q).rows]

    for offset in range(0, 200, 20):  # leave marks up to offset 200
        assert page(offset) == expected()[offset : offset + 20]
    doomed = [expected()[i] for i in (3, 150, 250)]  # before, among and after the marks
    storage.delete_rows(table, doomed)
    rows = [r for r in rows if r["id"] not in doomed]
    rows += storage.insert_rows(table, [{"Name": "new"}] * 5)
    changed = storage.update_row(table, expected()[10], {"Age": 1})
    rows = [changed if r["id"] == changed["id"] else r for r in rows]
    q = parse(table, {"sort": sort, "order": order, "limit": "20", "offset": "200"})
    assert storage.summaries()[0]["rows"] == 302
    # The marks were carried to the table's new version (not dropped), and stay exact:
    assert storage.offsets.nearest(q.signature, _version(storage, table.id), 200) is not None
    for offset in (200, 180, 20, 0, 280, 300):
        assert page(offset) == expected()[offset : offset + 20]


def _version(storage: Storage, table_id: str) -> int:
    with contextlib.closing(sqlite3.connect(storage.path)) as db:
        return int(db.execute("SELECT version FROM tables WHERE id = ?", (table_id,)).fetchone()[0])
