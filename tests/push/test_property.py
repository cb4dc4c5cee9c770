"""Property: for any schema, table, source and mode, after a push the table equals the source on
the key and the source's columns (the rest as the mode says), and a second plan is empty."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.push import PushSpec, push
from tests.push.conftest import InProcess

TYPES = ["text", "number", "checkbox", "date", "choice"]
OPTIONS = ["red", "green", "blue"]
#: Words that once read as empty: text now, like any other.
WORDS = ["None", "null", "NA", "nan", "NaN", "N/A", "<NA>", "NaT"]
TRUE_SPELLINGS = ["TRUE", "true", "yes", "1", "x"]
FALSE_SPELLINGS = ["FALSE", "false", "no", "0"]

texts = st.text("abcXYZ019 -_'é", min_size=1, max_size=8).filter(lambda s: s.strip() != "")
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "text": texts | st.sampled_from([*WORDS, " ", "  x "]),
    "number": st.one_of(st.integers(-10**9, 10**9), st.floats(-1e9, 1e9, allow_nan=False)),
    "checkbox": st.booleans(),
    "date": st.dates(dt.date(1900, 3, 1), dt.date(2100, 12, 31)).map(dt.date.isoformat),
    "choice": st.sampled_from(OPTIONS),
}


def spelled(kind: str, value: Any, draw: st.DrawFn) -> str:
    """How a spreadsheet might hold `value` as text: null as an empty cell (or, where the
    column cannot hold text, a cell of spaces)."""
    if value is None:
        return draw(st.sampled_from(["", "  "] if kind in ("number", "checkbox", "date") else [""]))
    if kind == "checkbox":
        return draw(st.sampled_from(TRUE_SPELLINGS if value else FALSE_SPELLINGS))
    if kind == "number":
        return draw(st.sampled_from([repr(value), f"{value}", repr(float(value))]))
    return str(value)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    kinds = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    columns = {f"c{i}": kind for i, kind in enumerate(kinds)}
    keys = draw(st.lists(texts, min_size=0, max_size=25, unique_by=str.strip))
    keys = [k.strip() for k in keys]

    def row(key: str, names: list[str]) -> dict[str, Any]:
        cells: dict[str, Any] = {"K": key}
        for name in names:
            cells[name] = draw(st.none() | VALUES[columns[name]])
        return cells

    in_table = [k for k in keys if draw(st.booleans())]
    in_source = [k for k in keys if draw(st.booleans())]
    shown = [n for n in columns if draw(st.booleans())]
    return {
        "columns": columns,
        "table": [row(k, list(columns)) for k in in_table],
        "source": [row(k, shown) for k in in_source],
        "shown": shown,
        "mode": draw(st.sampled_from(["insert", "update", "upsert", "mirror"])),
    }


counter = itertools.count()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), data=st.data())
def test_push_makes_the_table_equal_the_source(inproc: InProcess, scenario: dict[str, Any], data: st.DataObject) -> None:
    columns: dict[str, str] = scenario["columns"]
    spec = {
        "name": f"T{next(counter)}",
        "columns": [{"name": "K", "type": "text", "required": True}] + [
            {"name": n, "type": t, **({"options": OPTIONS} if t == "choice" else {})}
            for n, t in columns.items()
        ],
    }
    table_id = inproc.create_table(spec)
    inproc.insert(table_id, [{k: v for k, v in r.items() if v is not None} for r in scenario["table"]])
    frame = pd.DataFrame(
        [{"K": r["K"], **{n: spelled_cell(columns[n], r[n], data) for n in scenario["shown"]}}
         for r in scenario["source"]],
        columns=["K", *scenario["shown"]],
        dtype=object,
    )
    client = inproc.client()

    push(client, PushSpec(frame, table=table_id, key="K", mode=scenario["mode"], max_delete_ratio=1.0))

    found = inproc.rows(table_id)
    rows = {r["fields"]["K"]: {n: v for n, v in r["fields"].items() if v is not None} for r in found}
    assert len(rows) == len(found), "a key was created twice"
    assert rows == expected_table(scenario)
    assert push(client, PushSpec(frame, table=table_id, key="K", mode=scenario["mode"]), dry_run=True).plan.is_empty


def expected_table(scenario: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What each mode must leave, computed from the scenario alone."""
    mode, shown = scenario["mode"], scenario["shown"]
    before = {r["K"]: r for r in scenario["table"]}
    source = {r["K"]: r for r in scenario["source"]}
    keys = set(source) if mode == "mirror" else set(before) | set(source)
    if mode == "update":
        keys = set(before)
    table: dict[str, dict[str, Any]] = {}
    for key in keys:
        cells = dict(before.get(key, {"K": key}))
        applies = key in source and not (mode == "insert" and key in before)
        if applies:
            cells.update({n: source[key][n] for n in shown})
        table[key] = {n: v for n, v in cells.items() if v is not None}
    return table


def spelled_cell(kind: str, value: Any, data: st.DataObject) -> str:
    return data.draw(st.composite(lambda draw: spelled(kind, value, draw))())
