"""The demo workspace: deterministic, every column type, quick to build."""

from __future__ import annotations

import time

from connector.server.demo import seed_demo
from connector.server.query import parse
from connector.server.storage import Storage


def snapshot(storage: Storage) -> list[tuple[str, list[dict[str, object]]]]:
    out = []
    for summary in storage.summaries():
        table = storage.table(summary["id"])
        assert table is not None
        rows = storage.list_rows(table, parse(table, {"limit": "1000"})).rows
        out.append((table.name, [r["fields"] for r in rows]))
    return out


def test_demo_is_deterministic_and_fast() -> None:
    first, second = Storage(":memory:"), Storage(":memory:")
    started = time.perf_counter()
    seed_demo(first)
    assert time.perf_counter() - started < 2.0
    seed_demo(second)
    assert snapshot(first) == snapshot(second)


def test_demo_has_every_column_type_and_capitalised_names() -> None:
    storage = Storage(":memory:")
    seed_demo(storage)
    tables = [storage.table(s["id"]) for s in storage.summaries()]
    columns = [c for t in tables if t for c in t.columns]
    assert {c.type for c in columns} == {"text", "choice", "number", "checkbox", "date"}
    assert all(c.name[0].isupper() for c in columns)
    assert sum(s["rows"] for s in storage.summaries()) >= 3000


def test_demo_does_not_reseed_a_workspace_with_tables() -> None:
    storage = Storage(":memory:")
    seed_demo(storage)
    seed_demo(storage)
    assert len(storage.summaries()) == 4
