"""Applying: the fewest requests, only changed cells, bad rows isolated, nothing created twice."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from connector.errors import DeleteGuard
from connector.push import PushResult, PushSpec, apply, push
from connector.push.plan import Create, Plan
from connector.push.validate import Key
from connector.push.writes import apply_plan
from connector.schema import Table
from tests.push.conftest import PEOPLE, InProcess, fields


def people(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"Name": f"n{i}", "Age": i, "Status": "active"} for i in range(start, start + n)]


def test_minimal_requests_then_nothing_on_the_second_run(inproc: InProcess) -> None:
    table_id = inproc.create_table(PEOPLE)
    inproc.insert(table_id, people(300))
    source = pd.DataFrame(people(250) + people(205, start=300)).astype(str)
    source.loc[[5, 6, 7], "Age"] = "1000"
    client = inproc.client()

    result = push(client, PushSpec(source, table="People", key="Name", mode="mirror"))

    assert (result.created, result.updated, result.deleted, result.rejected) == (205, 3, 50, ())
    assert inproc.transport.calls["POST bulk"] == 3  # ceil(205 / 100)
    assert inproc.transport.calls["PATCH row"] == 3
    assert inproc.transport.calls["DELETE bulk"] == 1  # ceil(50 / 100)
    assert result.requests == inproc.transport.writes == 7 == result.plan.requests
    kept = [*range(250), *range(300, 505)]
    expected = sorted((f"n{i}", 1000 if i in (5, 6, 7) else i) for i in kept)
    assert fields(inproc.rows(table_id), "Name", "Age") == expected

    again = push(client, PushSpec(source, table="People", key="Name", mode="mirror"))
    assert again.plan.is_empty and again.requests == 0
    assert inproc.transport.writes == 7


def test_a_rejected_batch_is_split_to_isolate_the_bad_rows(inproc: InProcess) -> None:
    table_id = inproc.create_table(PEOPLE)
    bad_rows = {17, 120, 121}
    creates = tuple(
        Create(i + 2, {"Name": f"n{i}", "Status": "gone" if i + 2 in bad_rows else "active"})
        for i in range(150)
    )
    result = _apply(inproc, table_id, creates)
    assert result.created == 147
    assert [(r.row, r.column) for r in result.rejected] == [(17, "Status"), (120, "Status"), (121, "Status")]
    assert all("'active'" in r.message and "'paused'" in r.message for r in result.rejected)
    names = {r["fields"]["Name"] for r in inproc.rows(table_id)}
    assert names == {f"n{i}" for i in range(150) if i + 2 not in bad_rows}


def test_rejects_are_written_as_csv(inproc: InProcess, tmp_path: Path) -> None:
    table_id = inproc.create_table(PEOPLE)
    client = inproc.client()
    creates = (Create(2, {"Name": "a"}), Create(3, {"Name": "b", "Zip": "007", "Status": "nope"}))
    table = _table(inproc, table_id)
    plan = Plan(table, Key(("Name",)), "insert", "s.csv", 2, 0, creates=creates)
    rejects = tmp_path / "rejects.csv"
    result = apply(client, plan, rejects=rejects)
    assert (result.created, len(result.rejected)) == (1, 1)
    with rejects.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1
    assert {k: rows[0][k] for k in ("row", "id", "column", "Name", "Zip", "Status", "Age")} == {
        "row": "3", "id": "", "column": "Status", "Name": "b", "Zip": "007", "Status": "nope",
        "Age": "",
    }
    assert "active" in rows[0]["error"] and "paused" in rows[0]["error"]


def test_dry_run_and_plan_out_write_nothing(inproc: InProcess, tmp_path: Path) -> None:
    table_id = inproc.create_table(PEOPLE)
    client = inproc.client()
    source = pd.DataFrame(people(5)).astype(str)
    dry = push(client, PushSpec(source, table="People", key="Name"), dry_run=True)
    assert dry.status == "planned" and len(dry.plan.creates) == 5 and dry.created == 0
    push(client, PushSpec(source, table="People", key="Name", plan_out=tmp_path / "p.json"))
    assert inproc.transport.writes == 0 and inproc.rows(table_id) == []


@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_multi_column_key(inproc: InProcess, mode: str) -> None:
    table_id = inproc.create_table(PEOPLE)
    inproc.insert(table_id, [{"Name": "a", "Zip": "01", "Age": 1}, {"Name": "a", "Zip": "02", "Age": 2}])
    source = pd.DataFrame({"Name": ["a", "a"], "Zip": ["01", "03"], "Age": ["5", "3"]})
    result = push(inproc.client(), PushSpec(source, table="People", key=["Name", "Zip"], mode=mode))
    assert result.created == 1 and result.updated == (1 if mode == "upsert" else 0)
    assert fields(inproc.rows(table_id), "Name", "Zip", "Age") == [
        ("a", "01", 5 if mode == "upsert" else 1), ("a", "02", 2), ("a", "03", 3),
    ]


def _table(env: InProcess, table_id: str) -> Table:
    return env.client().get_table(table_id)


def _apply(env: InProcess, table_id: str, creates: tuple[Create, ...]) -> PushResult:
    client = env.client()
    plan = Plan(_table(env, table_id), Key(("Name",)), "insert", "s.csv", len(creates), 0,
                creates=creates)
    return client.run(apply_plan(client.aio, plan))


@pytest.mark.parametrize("ratio", [None, 0.2])  # 20% is also the default
def test_the_delete_guard_at_a_non_integer_boundary(inproc: InProcess, ratio: float | None) -> None:
    """20% of 13 rows is 2.6: a mirror may delete 2 rows, and 3 is refused with nothing written."""
    table_id = inproc.create_table(PEOPLE)
    inproc.insert(table_id, people(13))
    client = inproc.client()
    three_gone = pd.DataFrame(people(10)).astype(str)
    with pytest.raises(DeleteGuard, match=r"would delete 3 of 13 rows .* the limit is 2"):
        push(client, PushSpec(three_gone, table="People", key="Name", mode="mirror", max_delete_ratio=ratio))
    assert inproc.transport.writes == 0 and len(inproc.rows(table_id)) == 13

    two_gone = pd.DataFrame(people(11)).astype(str)
    result = push(client, PushSpec(two_gone, table="People", key="Name", mode="mirror", max_delete_ratio=ratio))
    assert result.deleted == 2
    assert sorted(r["fields"]["Name"] for r in inproc.rows(table_id)) == sorted(f"n{i}" for i in range(11))
