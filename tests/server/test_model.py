"""A Hypothesis state machine: random writes and list queries, checked against a plain model.

The model is a list of rows in creation order and a counter of writes; the expected page of
any query is computed from it with Python's sort — never from the server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from connector.server.app import create_app
from connector.server.storage import Storage
from tests.server.conftest import PEOPLE, make_client

VALUES: dict[str, st.SearchStrategy[Any]] = {
    "Name": st.sampled_from(["a", "b", "B", "ab", "é"]),
    "Status": st.sampled_from(["Active", "Inactive"]),
    "Age": st.sampled_from([-1, 0, 2, 2.5, 10]),
    "Member": st.booleans(),
    "Joined": st.sampled_from(["2023-12-31", "2024-01-01", "2024-02-29"]),
}
cells = st.fixed_dictionaries({"Name": VALUES["Name"]}, optional={
    c: st.one_of(st.none(), v) for c, v in VALUES.items() if c != "Name"})
FILTERS: list[tuple[dict[str, Any], Any]] = [
    ({}, lambda f: True),
    ({"Status": {"eq": "Active"}}, lambda f: f["Status"] == "Active"),
    ({"Age": {"gt": 0}}, lambda f: f["Age"] is not None and f["Age"] > 0),
    ({"Member": {"eq": False}}, lambda f: f["Member"] is False),
    ({"Joined": {"gt": "2024-01-01"}}, lambda f: f["Joined"] is not None and f["Joined"] > "2024-01-01"),
    ({"Age": {"eq": None}}, lambda f: f["Age"] is None),
]


@dataclass
class ModelRow:
    id: str
    fields: dict[str, Any]
    created: int
    updated: int


@dataclass
class Query:
    sort: str
    order: str
    filter: int
    limit: int
    offset: int = 0
    seen: list[str] = field(default_factory=list)


class TableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.storage = Storage(":memory:")
        self.table = self.storage.create_table(PEOPLE).id
        self.api = make_client(create_app(self.storage), self.storage.create_key())
        self.rows: list[ModelRow] = []
        self.writes = 0
        self.last: Query | None = None

    def teardown(self) -> None:
        self.api.close()
        self.storage.close()

    def _tick(self) -> int:
        self.writes += 1
        return self.writes

    def _full(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {c["name"]: fields.get(c["name"]) for c in PEOPLE["columns"]}

    @initialize(batch=st.lists(cells, min_size=0, max_size=12))
    def seed(self, batch: list[dict[str, Any]]) -> None:
        self.create_many(batch)

    @rule(batch=st.lists(cells, min_size=1, max_size=8))
    def create_many(self, batch: list[dict[str, Any]]) -> None:
        response = self.api.post(f"/tables/{self.table}/rows/bulk", json={"rows": [{"fields": f} for f in batch]})
        assert response.status_code == 201
        for fields, row in zip(batch, response.json()["rows"], strict=True):
            tick = self._tick()
            assert row["fields"] == self._full(fields)
            self.rows.append(ModelRow(row["id"], self._full(fields), tick, tick))

    @precondition(lambda self: self.rows)
    @rule(data=st.data(), changes=cells)
    def update(self, data: st.DataObject, changes: dict[str, Any]) -> None:
        row = data.draw(st.sampled_from(self.rows))
        response = self.api.patch(f"/tables/{self.table}/rows/{row.id}", json={"fields": changes})
        assert response.status_code == 200
        row.fields.update(changes)
        row.updated = self._tick()
        assert response.json()["fields"] == row.fields

    @precondition(lambda self: self.rows)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        victims = data.draw(st.lists(st.sampled_from(self.rows), min_size=1, max_size=3, unique_by=lambda r: r.id))
        ids = [r.id for r in victims]
        response = self.api.request("DELETE", f"/tables/{self.table}/rows/bulk", json={"row_ids": ids})
        assert response.status_code == 200 and response.json() == {"deleted": ids}
        self.rows = [r for r in self.rows if r.id not in ids]
        self._tick()

    @rule(
        sort=st.sampled_from(["created_at", "updated_at", "Name", "Status", "Age", "Member", "Joined"]),
        order=st.sampled_from(["asc", "desc"]),
        flt=st.integers(0, len(FILTERS) - 1),
        limit=st.integers(1, 7),
        offset=st.integers(0, 25),
    )
    def list_page(self, sort: str, order: str, flt: int, limit: int, offset: int) -> None:
        self.last = Query(sort, order, flt, limit, offset)
        self._check(self.last)

    @precondition(lambda self: self.last is not None)
    @rule()
    def next_page(self) -> None:
        assert self.last is not None
        self.last.offset += self.last.limit
        self._check(self.last)

    def _expected(self, q: Query) -> list[str]:
        matching = [r for r in self.rows if FILTERS[q.filter][1](r.fields)]

        def key(r: ModelRow) -> tuple[Any, ...]:
            if q.sort == "created_at":
                return (r.created,)
            if q.sort == "updated_at":
                return (r.updated,)
            value = r.fields[q.sort]
            return (value is not None, value if value is not None else 0, r.created)

        ordered = sorted(matching, key=key, reverse=q.order == "desc")
        return [r.id for r in ordered]

    def _check(self, q: Query) -> None:
        params = {"sort": q.sort, "order": q.order, "limit": q.limit, "offset": q.offset,
                  "filter": json.dumps(FILTERS[q.filter][0])}
        page = self.api.get(f"/tables/{self.table}/rows", params=params).json()
        expected = self._expected(q)
        assert [r["id"] for r in page["rows"]] == expected[q.offset : q.offset + q.limit]
        assert page["total"] == len(expected)

    @invariant()
    def row_count_matches(self) -> None:
        assert self.storage.summaries()[0]["rows"] == len(self.rows)


TableMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, database=None,
    suppress_health_check=list(HealthCheck),
)
test_random_writes_and_reads_match_the_model = TableMachine.TestCase
