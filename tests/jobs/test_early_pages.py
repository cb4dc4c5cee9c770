"""A run that reads its tables in full takes each table's first page beside its schema
(`connector.tables.select`'s `first_pages`): one round trip a small table, not two; a run that
pushes first fetches none early (its writes would make them stale), and its copy is the table
as it stands after its pushes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.fixtures.sent import Sent
from tests.jobs.conftest import MakeWorkspace, Workspace

FULL_COPY = '[sync]\nincremental = false\n[[destination]]\nparquet = "pq"\n'


def on_server(ws: Workspace, table_id: str) -> list[dict[str, Any]]:
    rows = ws.api("GET", f"/tables/{table_id}/rows", params={"limit": 1000})["rows"]
    return sorted(({"_id": r["id"], **r["fields"]} for r in rows), key=lambda r: r["_id"])


def in_parquet(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    rows = pq.read_table(path, columns=["_id", *columns]).to_pylist()
    return sorted(({k: v for k, v in r.items() if v is not None} for r in rows), key=lambda r: r["_id"])


def test_a_full_copy_sends_one_request_a_small_table_beside_its_schema(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    workspace = make_workspace(latency_ms=100)
    sent = Sent()

    summary = workspace.run(workspace.job(FULL_COPY), transport=sent)

    assert summary.exit_code == 0
    assert len(sent.requests) == 1 + 2 * 2  # the listing, then each schema and its one page
    print('QUERIES', sent.first_pages(workspace.people), sent.first_pages(workspace.notes))
    assert [len(sent.first_pages(t)) for t in (workspace.people, workspace.notes)] == [1, 1]
    schemas = [i for i, (_, path, _) in enumerate(sent.requests) if path.count("/") == 2]
    pages = [i for i, (_, path, _) in enumerate(sent.requests) if path.endswith("/rows")]
    # Each page went while the schemas were on their way, not after them.
    assert max(sent.times[i][0] for i in pages) < min(sent.times[i][1] for i in schemas)
    columns = ["Name", "Team", "Score", "Active"]
    assert in_parquet(tmp_path / "pq" / "People.parquet", columns) == [
        {k: v for k, v in r.items() if k in ("_id", *columns)} for r in on_server(workspace, workspace.people)
    ]
    assert in_parquet(tmp_path / "pq" / "Notes.parquet", ["Text"]) == on_server(workspace, workspace.notes)


def test_a_push_in_the_same_run_is_in_the_copy(workspace: Workspace, tmp_path: Path) -> None:
    (tmp_path / "people.csv").write_text("Name,Score\nP001,41\nNew One,7\n")
    push = '[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n'
    sent = Sent()

    summary = workspace.run(workspace.job(push + FULL_COPY), transport=sent)

    assert (summary.exit_code, summary.pushes[0].created, summary.pushes[0].updated) == (0, 1, 1)
    # No first page fetched early, only to be dropped by the push's writes: People's is asked
    # for by the push's read of it and by the copy's, Notes' by the copy's alone.
    assert [len(sent.first_pages(t)) for t in (workspace.people, workspace.notes)] == [2, 1]
    held = in_parquet(tmp_path / "pq" / "People.parquet", ["Name", "Score"])
    assert held == [
        {k: v for k, v in r.items() if k in ("_id", "Name", "Score")}
        for r in on_server(workspace, workspace.people)
    ]
    assert {"Name": "New One", "Score": 7.0} in [{"Name": r["Name"], "Score": r["Score"]} for r in held]


def test_an_incremental_sync_asks_for_its_cursor_before_any_page(workspace: Workspace) -> None:
    sent = Sent()
    job = workspace.job('[sync]\nincremental = true\n[[destination]]\nparquet = "pq"\n')

    summary = workspace.run(job, transport=sent)

    assert summary.exit_code == 0
    for table_id in (workspace.people, workspace.notes):
        asked = [q["limit"] for q in sent.pages(table_id)]
        # The newest stamp (one row) is asked before the rows are read: a page fetched
        # early, beside the schema, would hold rows older than the cursor says.
        assert asked == ["1", "50"]
