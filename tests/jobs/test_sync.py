"""`sync` against a real reference server, into Parquet, SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from connector.api import Client
from connector.errors import ConfigError
from connector.jobs.config import load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.jobs.state import load_state
from connector.results import RunSummary, TableResult
from tests.jobs.conftest import MakeWorkspace, Proxy, Workspace, person

BOTH = """
[[destination]]
parquet = "pq"
[[destination]]
url = "sqlite:///wh.db"
"""
INCREMENTAL = "[sync]\nincremental = true\nlookback = 0\n"
NAMES = [f"P{i:03d}" for i in range(10)]


def result(summary: RunSummary, table: str) -> TableResult:
    (found,) = [t for t in summary.tables if t.table == table]
    return found


def parquet_people(directory: Path) -> pd.DataFrame:
    return pq.read_table(directory / "People.parquet").to_pandas().set_index("Name").sort_index()


def sql_people(url: str) -> dict[str, tuple[Any, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text('SELECT "Name", "Score", "Active", "Team" FROM "People"')).all()
    engine.dispose()
    return {r[0]: tuple(r[1:]) for r in rows}


def ids_by_name(ws: Workspace) -> dict[str, str]:
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    return {r["fields"]["Name"]: r["id"] for r in rows}


def change_people(ws: Workspace) -> None:
    """One update (P001's score), one delete (P002), one create (P100)."""
    ids = ids_by_name(ws)
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P001']}", json={"fields": {"Score": 100}})
    ws.api("DELETE", f"/tables/{ws.people}/rows/{ids['P002']}")
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(100, "Blue")})


EXPECTED_AFTER_CHANGES = sorted([*(n for n in NAMES if n != "P002"), "P100"])


def test_a_full_sync_writes_every_table_typed_to_parquet_and_sqlite(
    workspace: Workspace, tmp_path: Path
) -> None:
    summary = workspace.run(workspace.job(BOTH))

    assert (summary.status, summary.exit_code) == ("ok", 0)
    assert {(t.table, t.read, t.rows_written) for t in summary.tables} == {
        ("People", "full", 10),
        ("Notes", "full", 2),
    }
    people = parquet_people(tmp_path / "pq")
    assert list(people.index) == NAMES
    assert people.loc["P003", "Score"] == 3.0
    assert isinstance(people["Team"].dtype, pd.CategoricalDtype)
    assert list(people["Team"].cat.categories) == ["Red", "Blue"]
    assert str(people["Active"].dtype) == "boolean"
    assert sql_people(f"sqlite:///{tmp_path / 'wh.db'}") == {
        f"P{i:03d}": (float(i), i % 2 == 0, "Red") for i in range(10)
    }


def test_incremental_sync_picks_up_creates_updates_and_deletes(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(INCREMENTAL + BOTH)
    workspace.run(job)
    change_people(workspace)

    summary = workspace.run(job)

    people = result(summary, "People")
    assert (people.status, people.read, people.rows_read, people.rows_deleted) == (
        "ok",
        "incremental",
        2,
        1,
    )
    assert result(summary, "Notes").status == "unchanged"
    frame = parquet_people(tmp_path / "pq")
    assert list(frame.index) == EXPECTED_AFTER_CHANGES
    assert frame.loc["P001", "Score"] == 100.0
    assert frame.loc["P100", "Team"] == "Blue"
    in_sql = sql_people(f"sqlite:///{tmp_path / 'wh.db'}")
    assert sorted(in_sql) == EXPECTED_AFTER_CHANGES
    assert in_sql["P001"][0] == 100.0
    state = load_state(tmp_path / "job.state.json")
    newest = max(
        r["updated_at"]
        for r in workspace.api("GET", f"/tables/{workspace.people}/rows", params={"limit": 1000})[
            "rows"
        ]
    )
    assert state.tables[workspace.people].cursor == newest
    assert state.tables[workspace.people].rows == 10


def test_a_run_with_no_changes_writes_nothing(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(INCREMENTAL + BOTH)
    workspace.run(job)
    outputs = [
        tmp_path / "pq" / "People.parquet",
        tmp_path / "pq" / "Notes.parquet",
        tmp_path / "wh.db",
    ]
    before = [(p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in outputs]

    summary = workspace.run(job)

    assert summary.status == "ok"
    assert {t.status for t in summary.tables} == {"unchanged"}
    assert sum(t.rows_written for t in summary.tables) == 0
    assert [(p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in outputs] == before


def test_incremental_sync_into_postgresql(workspace: Workspace, postgres_db: str) -> None:
    job = workspace.job(INCREMENTAL + f'[[destination]]\nurl = "{postgres_db}"\n')
    assert workspace.run(job).status == "ok"
    assert sorted(sql_people(postgres_db)) == NAMES
    change_people(workspace)

    summary = workspace.run(job)

    assert result(summary, "People").rows_deleted == 1
    rows = sql_people(postgres_db)
    assert sorted(rows) == EXPECTED_AFTER_CHANGES
    assert rows["P001"] == (100.0, False, "Red")
    assert rows["P100"] == (100.0, True, "Blue")


def test_deleted_rows_can_be_marked_instead_of_removed(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job("[sync]\nincremental = true\nlookback = 0\ndeletes = 'mark'\n" + BOTH)
    workspace.run(job)
    change_people(workspace)

    workspace.run(job)

    frame = parquet_people(tmp_path / "pq")
    assert sorted(frame.index) == sorted([*NAMES, "P100"])
    assert frame["_deleted_at"].notna().tolist() == [n == "P002" for n in frame.index]
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'wh.db'}")
    with engine.connect() as conn:
        marked = conn.execute(
            sa.text('SELECT "Name" FROM "People" WHERE "_deleted_at" IS NOT NULL')
        ).scalars()
        assert list(marked) == ["P002"]
    engine.dispose()
    # A third run: the marked row is not "deleted again", nothing changes.
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}


def test_include_exclude_and_filters_choose_tables_and_rows(
    workspace: Workspace, tmp_path: Path
) -> None:
    ids = ids_by_name(workspace)
    workspace.api(
        "PATCH", f"/tables/{workspace.people}/rows/{ids['P004']}", json={"fields": {"Team": "Blue"}}
    )
    job = workspace.job(
        INCREMENTAL
        + '[tables]\ninclude = ["People"]\n[tables.filter]\nPeople = { Team = { eq = "Red" } }\n'
        + '[[destination]]\nparquet = "pq"\n'
    )

    summary = workspace.run(job)

    assert [t.table for t in summary.tables] == ["People"]
    assert not (tmp_path / "pq" / "Notes.parquet").exists()
    assert "P004" not in parquet_people(tmp_path / "pq").index
    # A row that stops matching the filter leaves the destination on the next run.
    workspace.api(
        "PATCH", f"/tables/{workspace.people}/rows/{ids['P005']}", json={"fields": {"Team": "Blue"}}
    )
    summary = workspace.run(job)
    assert result(summary, "People").rows_deleted == 1
    assert sorted(parquet_people(tmp_path / "pq").index) == [
        n for n in NAMES if n not in ("P004", "P005")
    ]


def test_a_filter_on_a_missing_column_is_a_config_error_before_any_write(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(
        '[tables.filter]\nPeople = { Colour = { eq = "x" } }\n[[destination]]\nparquet = "pq"\n'
    )

    with pytest.raises(ConfigError, match=r"tables\.filter\.People\.Colour: .*no column 'Colour'"):
        workspace.run(job)
    assert not (tmp_path / "pq").exists()


def test_a_table_the_key_cannot_read_makes_the_run_partial(
    workspace: Workspace, tmp_path: Path
) -> None:
    scoped = workspace.server.create_key(tables=["People"])
    # A scoped key does not list Notes: the job names it by id (a name would be unknown).
    job = workspace.job(
        f'[tables]\ninclude = ["People", "{workspace.notes}"]\n[[destination]]\nparquet = "pq"\n'
    )

    summary = run_job(load_job(job), RunOptions(environ={**workspace.environ, "JOB_KEY": scoped}))

    assert (summary.status, summary.exit_code) == ("partial", 3)
    assert result(summary, "People").status == "ok"
    assert result(summary, workspace.notes).status == "skipped"  # its name is not listed
    assert (tmp_path / "pq" / "People.parquet").exists()


def test_a_bad_key_fails_the_run_with_a_summary(workspace: Workspace, tmp_path: Path) -> None:
    summary = run_job(
        load_job(workspace.job('[[destination]]\nparquet = "pq"\n')), RunOptions(environ={**workspace.environ, "JOB_KEY": "wrong"}))

    assert (summary.status, summary.exit_code) == ("failed", 2)  # a refused key: configuration
    assert summary.error is not None and "401" in summary.error
    assert "wrong" not in json.dumps(summary.to_dict())


def test_a_dry_run_reads_counts_and_writes_nothing(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(INCREMENTAL + BOTH)

    summary = workspace.run(job, dry_run=True)

    assert {(t.table, t.status, t.read, t.rows_read) for t in summary.tables} == {
        ("People", "planned", "full", 10),
        ("Notes", "planned", "full", 2),
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.toml"]


def _refused_on_updated_at(request: httpx.Request) -> httpx.Response | None:
    """What a server that does not filter on updated_at answers (the API leaves it open)."""
    if "updated_at" in request.url.params.get("filter", ""):
        body = {"error": {"code": "VALIDATION_ERROR", "message": "no", "field": "updated_at"}}
        return httpx.Response(400, json=body)
    return None


def test_incremental_falls_back_to_a_sorted_read_where_updated_at_filters_are_refused(
    workspace: Workspace, proxy: Proxy, tmp_path: Path
) -> None:
    """A server that answers 400 to filters on updated_at (the API leaves them open)."""

    job = workspace.job(INCREMENTAL + '[[destination]]\nparquet = "pq"\n')
    transport = proxy(_refused_on_updated_at)
    workspace.run(job, transport=transport)
    change_people(workspace)

    summary = workspace.run(job, transport=transport)

    people = result(summary, "People")
    assert (people.read, people.rows_read, people.rows_deleted) == ("incremental", 2, 1)
    assert list(parquet_people(tmp_path / "pq").index) == EXPECTED_AFTER_CHANGES


def test_a_dry_run_where_updated_at_filters_are_refused_counts_an_upper_bound(
    workspace: Workspace, proxy: Proxy
) -> None:
    """Not 0: the real run would read the changed rows by a sorted read."""
    transport = proxy(_refused_on_updated_at)
    job = workspace.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n' + BOTH)
    workspace.run(job, transport=transport)
    change_people(workspace)
    notes: list[dict[str, Any]] = []

    def report(event: str, **fields: Any) -> None:
        if event == "note":
            notes.append(fields)

    summary = workspace.run(job, transport=transport, dry_run=True, report=report)

    people = result(summary, "People")
    assert (people.status, people.read, people.rows_read) == ("planned", "incremental", 10)
    assert [n["table"] for n in notes] == ["People"]


def test_a_schema_change_forces_a_full_reread(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    ws = make_workspace(people=3)
    job = ws.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n[[destination]]\nparquet = "pq"\n')
    ws.run(job)
    state = json.loads((tmp_path / "job.state.json").read_text())
    state["tables"][ws.people]["schema"] = "something-else"
    (tmp_path / "job.state.json").write_text(json.dumps(state))

    summary = ws.run(job)

    assert (result(summary, "People").read, result(summary, "People").rows_read) == ("full", 3)


def test_a_change_made_during_a_read_is_picked_up_by_the_next_run(
    make_workspace: MakeWorkspace, proxy: Proxy, tmp_path: Path
) -> None:
    """Row P010 is changed after the read passed it, then P250 (read later, newer): the cursor
    must not jump past P010's change."""
    ws = make_workspace(people=300)
    ids = ids_by_name(ws)
    changed = False

    def change_mid_read(request: httpx.Request) -> None:
        nonlocal changed
        params = request.url.params
        if (
            request.url.path.endswith("/rows")
            and int(params.get("offset", 0)) >= 100
            and not changed
        ):
            changed = True
            for name, score in (("P010", 1010), ("P250", 1250)):
                path = f"/tables/{ws.people}/rows/{ids[name]}"
                ws.api("PATCH", path, json={"fields": {"Score": score}})

    only_people = '[tables]\ninclude = ["People"]\n[[destination]]\nparquet = "pq"\n'
    job = ws.job(INCREMENTAL + only_people, concurrency=1)
    ws.run(job, transport=proxy(change_mid_read))
    assert changed

    summary = ws.run(job)

    assert result(summary, "People").rows_read == 2
    scores = parquet_people(tmp_path / "pq")["Score"]
    assert (scores["P010"], scores["P250"]) == (1010.0, 1250.0)


def test_full_syncs_replace_append_or_merge_as_configured(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job(
        '[tables]\ninclude = ["People"]\n'
        '[[destination]]\nparquet = "replaced"\n'
        '[[destination]]\nparquet = "appended"\nmode = "append"\n'
        '[[destination]]\nurl = "sqlite:///appended.db"\nmode = "append"\n'
        '[[destination]]\nurl = "sqlite:///merged.db"\nmode = "merge"\n'
    )
    workspace.run(job)
    change_people(workspace)

    summary = workspace.run(job)

    assert result(summary, "People").read == "full"
    assert list(parquet_people(tmp_path / "replaced").index) == EXPECTED_AFTER_CHANGES
    # append adds the ids not held yet; held rows stay as they were (P001 not updated,
    # P002 not removed)
    appended = parquet_people(tmp_path / "appended")
    assert list(appended.index) == sorted([*NAMES, "P100"])
    assert appended.loc["P001", "Score"] == 1.0
    appended_sql = sql_people(f"sqlite:///{tmp_path / 'appended.db'}")
    assert sorted(appended_sql) == sorted([*NAMES, "P100"])
    assert appended_sql["P001"][0] == 1.0
    merged = sql_people(f"sqlite:///{tmp_path / 'merged.db'}")
    assert sorted(merged) == EXPECTED_AFTER_CHANGES  # upserted, and the deleted row removed
    assert merged["P001"][0] == 100.0


def test_a_sync_rides_out_throttling_and_server_errors(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    ws = make_workspace(people=150, throttle_rate=0.05, fail_rate=0.15, seed=7)
    job = ws.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n[[destination]]\nparquet = "pq"\n')
    assert ws.run(job).status == "ok"
    ws.server.insert_rows(ws.people, [person(150)])
    with Client(ws.server.base_url, ws.server.api_key) as client:  # it retries the faults
        row = next(
            r for r in client.list_rows(ws.people, limit=20).rows if r.fields["Name"] == "P007"
        )
        client.delete_row(ws.people, row.id)

    summary = ws.run(job)

    assert summary.status == "ok", summary
    people = result(summary, "People")
    assert (people.rows_read, people.rows_deleted) == (1, 1)
    names = set(parquet_people(tmp_path / "pq").index)
    assert names == {f"P{i:03d}" for i in range(151)} - {"P007"}


def test_deleted_rows_can_be_kept(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job("[sync]\nincremental = true\nlookback = 0\ndeletes = 'keep'\n" + BOTH)
    workspace.run(job)
    change_people(workspace)

    summary = workspace.run(job)

    assert result(summary, "People").rows_deleted == 0
    assert sorted(parquet_people(tmp_path / "pq").index) == sorted([*NAMES, "P100"])
    assert sorted(sql_people(f"sqlite:///{tmp_path / 'wh.db'}")) == sorted([*NAMES, "P100"])



def test_a_sql_replace_destination_beside_a_merge_one_takes_no_deletes(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Only the merging destination has rows deleted upstream removed from it; the SQL
    table beside it is simply replaced, and the run is ok."""
    job = workspace.job(
        '[tables]\ninclude = ["People"]\n'
        '[[destination]]\nurl = "sqlite:///replaced.db"\n'
        '[[destination]]\nparquet = "merged"\nmode = "merge"\n'
    )
    workspace.run(job)
    change_people(workspace)

    summary = workspace.run(job)

    assert summary.status == "ok", summary
    assert result(summary, "People").rows_deleted == 1
    assert sorted(sql_people(f"sqlite:///{tmp_path / 'replaced.db'}")) == EXPECTED_AFTER_CHANGES
    assert list(parquet_people(tmp_path / "merged").index) == EXPECTED_AFTER_CHANGES


def test_a_quiet_incremental_run_makes_exactly_the_documented_requests(
    workspace: Workspace, proxy: Proxy
) -> None:
    """The list in connector/jobs/runner.py's docstring (and docs/behaviour.md): 1 + 4 per table."""
    job = workspace.job(INCREMENTAL + BOTH)
    workspace.run(job)
    state = load_state(workspace.directory / "job.state.json")
    sent: list[httpx.Request] = []

    def count(request: httpx.Request) -> None:
        sent.append(request)

    summary = workspace.run(job, transport=proxy(count))

    assert {t.status for t in summary.tables} == {"unchanged"}
    tables = (workspace.people, workspace.notes)
    got = [
        (r.url.path, {k: json.dumps(json.loads(v), separators=(",", ":")) if k == "filter" else v
                      for k, v in r.url.params.items() if k != "offset" or v != "0"})
        for r in sent
    ]
    assert [r.method for r in sent] == ["GET"] * (1 + 4 * len(tables))
    # The listing, then every schema (fetched at once), then each table's three reads in
    # order (the tables run in parallel, so theirs interleave).
    assert got[0] == ("/v1/tables", {})
    assert sorted(path for path, _ in got[1:3]) == sorted(f"/v1/tables/{t}" for t in tables)
    for table_id in tables:
        cursor = state.tables[table_id].cursor
        newer = json.dumps({"updated_at": {"gt": cursor}}, separators=(",", ":"))
        rows = f"/v1/tables/{table_id}/rows"
        assert [(path, params) for path, params in got[3:] if path == rows] == [
            (rows, {"limit": "1", "sort": "updated_at", "order": "desc", "filter": newer}),
            (rows, {"limit": "1"}),
            (rows, {"limit": "1000", "sort": "created_at", "order": "asc", "filter": newer}),
        ]


@pytest.mark.parametrize("lost", ["parquet", "sqlite"])
def test_a_destination_that_disappeared_forces_a_full_reread(
    workspace: Workspace, tmp_path: Path, lost: str
) -> None:
    job = workspace.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n' + BOTH)
    workspace.run(job)
    if lost == "parquet":
        (tmp_path / "pq" / "People.parquet").unlink()
    else:
        with sa.create_engine(f"sqlite:///{tmp_path / 'wh.db'}").begin() as conn:
            conn.exec_driver_sql('DROP TABLE "People"')
    change_people(workspace)

    summary = workspace.run(job)

    assert (result(summary, "People").read, result(summary, "People").rows_read) == ("full", 10)
    assert list(parquet_people(tmp_path / "pq").index) == EXPECTED_AFTER_CHANGES
    assert sorted(sql_people(f"sqlite:///{tmp_path / 'wh.db'}")) == EXPECTED_AFTER_CHANGES


def test_two_tables_whose_names_differ_only_in_case_get_distinct_files_and_sql_tables(
    workspace: Workspace, tmp_path: Path
) -> None:
    """SQLite (and many file systems) do not tell 'Notes' from 'notes': the later table's
    file and SQL table get its id, as exports always did."""
    twin = workspace.server.create_table(
        {"name": "notes", "columns": [{"name": "Other", "type": "text"}]}
    )
    workspace.server.insert_rows(twin, [{"Other": "x"}])

    summary = workspace.run(workspace.job(BOTH))

    assert summary.status == "ok", summary
    assert result(summary, "notes").targets == (
        str(tmp_path / "pq" / f"notes-{twin}.parquet"),
        f"notes-{twin}",
    )
    assert pq.read_table(tmp_path / "pq" / f"notes-{twin}.parquet").column_names[-1] == "Other"
    assert pq.read_table(tmp_path / "pq" / "Notes.parquet").column_names[-1] == "Text"
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'wh.db'}")
    assert sorted(sa.inspect(engine).get_table_names()) == sorted(
        ["People", "Notes", f"notes-{twin}", "_connector_tables"])
    engine.dispose()


def _refused_on_updated_at_sort_too(request: httpx.Request) -> httpx.Response | None:
    """A server that neither filters nor sorts on updated_at."""
    if request.url.params.get("sort") == "updated_at":
        body = {"error": {"code": "VALIDATION_ERROR", "message": "no", "field": "sort"}}
        return httpx.Response(400, json=body)
    return _refused_on_updated_at(request)


def test_where_sorting_by_updated_at_is_refused_too_the_fallback_still_converges(
    workspace: Workspace, proxy: Proxy, tmp_path: Path
) -> None:
    transport = proxy(_refused_on_updated_at_sort_too)
    job = workspace.job(INCREMENTAL + '[tables]\ninclude = ["People"]\n' + BOTH)
    workspace.run(job, transport=transport)
    change_people(workspace)
    notes: list[str] = []

    def report(event: str, **fields: Any) -> None:
        if event == "note":
            notes.append(fields["note"])

    summary = workspace.run(job, transport=transport, report=report)

    people = result(summary, "People")
    assert (people.read, people.rows_read, people.rows_deleted) == ("incremental", 2, 1)
    assert any("sorting by updated_at refused too" in n for n in notes)
    assert list(parquet_people(tmp_path / "pq").index) == EXPECTED_AFTER_CHANGES
    assert sorted(sql_people(f"sqlite:///{tmp_path / 'wh.db'}")) == EXPECTED_AFTER_CHANGES
    assert {t.status for t in workspace.run(job, transport=transport).tables} == {"unchanged"}


def test_the_state_counts_the_rows_held_when_deleted_rows_are_kept(
    workspace: Workspace, tmp_path: Path
) -> None:
    job = workspace.job("[sync]\nincremental = true\nlookback = 0\ndeletes = 'keep'\n" + BOTH)
    workspace.run(job)
    change_people(workspace)

    workspace.run(job)

    assert load_state(tmp_path / "job.state.json").tables[workspace.people].rows == 11
