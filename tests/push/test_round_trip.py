"""Export → edit the file → push → export again: the second export equals the edit.

The exports use the load engineer's writers (`connector.destinations.formats`)
fed by `connector.extract`, exactly as `connector export` does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from connector.api import Client
from connector.destinations.formats import write_csv, write_parquet
from connector.extract import Extraction
from connector.push import PushSpec, push
from connector.schema import Table
from tests.fixtures.server import ServerFactory
from tests.push.conftest import PEOPLE

USER_COLUMNS = [c["name"] for c in PEOPLE["columns"]]


def seed(n: int) -> list[dict[str, Any]]:
    return [
        {"Name": f"p{i:02d}", "Zip": f"{i:05d}", "Age": i * 1.5, "Status": ["active", "paused"][i % 2],
         "Born": (dt.date(1990, 1, 1) + dt.timedelta(days=97 * i)).isoformat(), "Member": i % 3 == 0}
        for i in range(n)
    ]


def export(client: Client, table: Table, path: Path, writer: Callable[..., int]) -> None:
    extraction = Extraction(client, table)
    writer(extraction, extraction.schema, path)


def normal(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """User columns as plain, comparable tuples sorted by key (nulls as None, dates as text)."""
    cells = frame[USER_COLUMNS].astype(object)
    cells = cells.where(frame[USER_COLUMNS].notna(), None)
    return sorted(
        tuple(str(v) if isinstance(v, dt.date) else v for v in row)
        for row in cells.itertuples(index=False)
    )


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_edit_push_export(server_factory: ServerFactory, tmp_path: Path, fmt: str) -> None:
    server = server_factory()
    table_id = server.create_table(PEOPLE)
    server.insert_rows(table_id, seed(20))
    first, second = tmp_path / f"first.{fmt}", tmp_path / f"second.{fmt}"

    with Client(server.base_url, server.api_key) as client:
        table = client.get_table(table_id)
        if fmt == "parquet":
            export(client, table, first, write_parquet)
            edit = pd.read_parquet(first)
            edit.loc[edit["Name"] == "p03", "Age"] = 1000.0
            edit.loc[edit["Name"] == "p04", "Zip"] = None
            edit.loc[edit["Name"] == "p05", ["Status", "Member"]] = ["active", False]
            edit.loc[edit["Name"] == "p06", "Born"] = dt.date(2001, 2, 3)
            new = {"Name": "p99", "Zip": "00099", "Age": 9.5, "Status": "paused",
                   "Born": dt.date(2020, 2, 29), "Member": True}
        else:
            export(client, table, first, write_csv)
            edit = pd.read_csv(first, dtype=str, keep_default_na=False)
            edit.loc[edit["Name"] == "p03", "Age"] = "1000"
            edit.loc[edit["Name"] == "p04", "Zip"] = ""
            edit.loc[edit["Name"] == "p05", ["Status", "Member"]] = ["active", "false"]
            edit.loc[edit["Name"] == "p06", "Born"] = "2001-02-03"
            new = {"Name": "p99", "Zip": "00099", "Age": "9.5", "Status": "paused",
                   "Born": "2020-02-29", "Member": "true"}
        edit = edit[~edit["Name"].isin(["p10", "p11"])]
        edit = pd.concat([edit, pd.DataFrame([new])], ignore_index=True)
        edited = tmp_path / f"edited.{fmt}"
        if fmt == "parquet":
            edit.to_parquet(edited, index=False)
        else:
            edit.to_csv(edited, index=False)

        result = push(client, PushSpec(edited, table=table_id, key="Name", mode="mirror"))
        assert (result.created, result.updated, result.deleted) == (1, 4, 2)
        export(client, table, second, write_parquet if fmt == "parquet" else write_csv)

    if fmt == "parquet":
        assert normal(pd.read_parquet(second)) == normal(edit)
    else:
        again = pd.read_csv(second, dtype=str, keep_default_na=False)
        assert normal(again) == normal(edit)


def test_an_export_pushes_back_by_row_id(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory()
    table_id = server.create_table(PEOPLE)
    server.insert_rows(table_id, seed(10))
    first, edited, second = (tmp_path / f"{n}.parquet" for n in ("first", "edited", "second"))
    with Client(server.base_url, server.api_key) as client:
        table = client.get_table(table_id)
        export(client, table, first, write_parquet)
        edit = pd.read_parquet(first)
        edit.loc[edit["Name"] == "p01", "Name"] = "renamed"  # the id keys it, not the name
        edit.loc[edit["Name"] == "p02", "Age"] = None
        edit = edit[edit["Name"] != "p09"]
        edit.to_parquet(edited, index=False)

        result = push(client, PushSpec(edited, table=table_id, key="id", mode="mirror"))
        assert (result.created, result.updated, result.deleted) == (0, 2, 1)
        assert result.plan.ignored == ("_created_at", "_updated_at")
        export(client, table, second, write_parquet)
    again = pd.read_parquet(second)
    assert normal(again) == normal(edit)
    assert sorted(again["_id"]) == sorted(edit["_id"])


def test_a_workspace_frame_pushes_back_unchanged_then_edited(
    server_factory: ServerFactory,
) -> None:
    from connector.workspace import Workspace

    server = server_factory()
    table_id = server.create_table(PEOPLE)
    server.insert_rows(table_id, seed(12))
    with Client(server.base_url, server.api_key) as client:
        ws = Workspace(client=client)
        frame = ws.read("People")  # typed: categorical, Float64, boolean, date32
        same = ws.push(frame, table="People", key="Name")
        assert same.plan.is_empty and same.plan.unchanged == 12
        frame.loc[frame["Name"] == "p07", "Born"] = dt.date(1999, 12, 31)
        frame.loc[frame["Name"] == "p08", "Member"] = pd.NA
        edited = ws.push(frame, table="People", key="Name")
        assert (edited.created, edited.updated) == (0, 2)
        assert normal(ws.read("People")) == normal(frame)
