"""Clocks lie: rows stamped far ahead of the server's clock (a workspace with a wrong clock,
an import with odd stamps) never stop a sync, and stamps from year 1 to 9999 round-trip.

The reference server stamps the rows itself (its ``stamp_updated_at`` / ``stamp_created_at``
faults). Each destination kind is read back with its own library and compared with the
rows the server serves, cell by cell, stamps included.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog

from connector import Workspace as Library
from connector.destinations.registry import make_config
from connector.jobs.config import one_shot_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.results import RunSummary, TableResult, Verified
from connector.schema import Table
from tests.fixtures.server import ROOT
from tests.jobs.conftest import MakeWorkspace, Workspace, person, sql_rows

FAR = "9999-12-31T23:59:59.999999Z"
AHEAD = "2999-01-01T00:00:00Z"
FIRST = "0001-01-01T00:00:00Z"
INCREMENTAL = '[sync]\nincremental = true\nlookback = 0\n[tables]\ninclude = ["People"]\n'
DESTINATIONS = {
    "parquet": '[[destination]]\nparquet = "pq"\n',
    "sqlite": '[[destination]]\nurl = "sqlite:///wh.db"\n',
    "postgresql": '[[destination]]\nurl = "{postgres}"\n',
    "duckdb": '[[destination]]\nurl = "duckdb:///wh.duckdb"\n',
    "delta": '[[destination]]\ndelta = "lake"\n',
    "iceberg": '[[destination]]\niceberg = "ice"\n',
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant(value: Any) -> int:
    """A stamp as UTC microseconds, however a library hands it back (text, a datetime with
    or without a zone: a database without zones holds UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace(" ", "T"))
    assert isinstance(value, datetime), value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


def cell(value: Any) -> Any:
    """A user cell as the API writes it (dates ISO, numbers floats)."""
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def api_rows(ws: Workspace) -> list[dict[str, Any]]:
    """Every People row the API serves, page by page (by the limit it applies)."""
    rows: list[dict[str, Any]] = []
    while True:
        page = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000, "offset": len(rows)})
        rows += page["rows"]
        if len(page["rows"]) < page["limit"]:
            return rows


def upstream(ws: Workspace) -> dict[str, dict[str, Any]]:
    """People as the API serves it: row id -> stamps (microseconds) and every cell."""
    schema = ws.api("GET", f"/tables/{ws.people}")
    columns = [c["name"] for c in schema["columns"]]
    rows = api_rows(ws)
    return {
        r["id"]: {"created_at": instant(r["created_at"]), "updated_at": instant(r["updated_at"]),
                  **{c: r["fields"].get(c) for c in columns}}
        for r in rows
    }


def system(ws: Workspace) -> dict[str, str]:
    """The destination column names of the row id and stamps."""
    return Table.from_api(ws.api("GET", f"/tables/{ws.people}")).system_names()


def held(kind: str, ws: Workspace, folder: Path, postgres: str = "") -> dict[str, dict[str, Any]]:
    """People as the destination holds it, read by its own library: the shape of `upstream`."""
    names = system(ws)
    rows: list[dict[str, Any]]
    if kind == "parquet":
        rows = pq.read_table(folder / "pq" / "People.parquet").to_pylist()
    elif kind in ("sqlite", "postgresql"):
        rows = sql_rows(f"sqlite:///{folder / 'wh.db'}" if kind == "sqlite" else postgres)
    elif kind == "duckdb":
        with duckdb.connect(str(folder / "wh.duckdb"), read_only=True) as con:
            # As text in UTC: a zone-aware value would be converted to the session's zone.
            con.execute("SET TimeZone = 'UTC'")
            found = con.execute('SELECT * FROM "People"')
            columns = [d[0] for d in found.description]
            rows = [dict(zip(columns, r, strict=True)) for r in found.fetchall()]
    elif kind == "delta":
        rows = DeltaTable(str(folder / "lake" / "People")).to_pyarrow_table().to_pylist()
    elif kind == "iceberg":
        catalog = SqlCatalog("connector", uri=f"sqlite:///{folder / 'ice' / 'catalog.db'}",
                             warehouse=str(folder / "ice"))
        try:
            rows = catalog.load_table(("tabledata", "People")).scan().to_arrow().to_pylist()
        finally:
            catalog.close()
    else:  # csv: text, read by the csv module, numbers and checkboxes as written
        with (folder / "csv" / "People.csv").open(newline="", encoding="utf-8") as file:
            rows = [{k: v if v != "" else None for k, v in r.items()} for r in csv.DictReader(file)]
        for row in rows:
            row["Score"] = None if row["Score"] is None else float(row["Score"])
            row["Active"] = None if row["Active"] is None else {"true": True, "false": False}[row["Active"]]
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        stamps = {"created_at": instant(row.pop(names["created_at"])),
                  "updated_at": instant(row.pop(names["updated_at"]))}
        row_id = row.pop(names["id"])
        cells = {k: cell(v) for k, v in row.items() if not k.startswith("_")}
        out[row_id] = {**stamps, **cells}
    assert len(out) == len(rows), f"{kind}: an id held twice"
    return out


def assert_same(kind: str, ws: Workspace, folder: Path, postgres: str = "") -> None:
    assert held(kind, ws, folder, postgres) == upstream(ws), kind


def stamp(ws: Workspace, **faults: str | None) -> None:
    ws.server.set_faults(**faults)


def ids_by_name(ws: Workspace) -> dict[str, str]:
    return {r["fields"]["Name"]: r["id"] for r in api_rows(ws)}


class Notes:
    """A run's notes (the `note` events), for `run_job(report=...)`."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: str, **fields: Any) -> None:
        if event == "note":
            self.lines.append(str(fields["note"]))


def run_ok(ws: Workspace, job: Path, **options: Any) -> tuple[TableResult, Notes]:
    notes = Notes()
    summary: RunSummary = ws.run(job, report=notes, **options)
    assert summary.status == "ok", (summary.error, [t.error for t in summary.tables])
    (table,) = summary.tables
    return table, notes


def destination(kind: str, request: pytest.FixtureRequest) -> str:
    postgres = str(request.getfixturevalue("postgres_db")) if kind == "postgresql" else ""
    return DESTINATIONS[kind].format(postgres=postgres)


@pytest.fixture
def wrong_clock(make_workspace: MakeWorkspace) -> Workspace:
    """People (10 rows), P005 then changed by a writer whose clock says 9999, and P200
    created by one whose clock says 2999."""
    ws = make_workspace(fault_control=True)
    ids = ids_by_name(ws)
    stamp(ws, stamp_updated_at=FAR)
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P005']}", json={"fields": {"Score": 500}})
    stamp(ws, stamp_updated_at=AHEAD)
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(200)})
    stamp(ws, stamp_updated_at=None)
    return ws


@pytest.mark.parametrize("kind", list(DESTINATIONS))
def test_rows_stamped_ahead_never_stop_an_incremental_sync(
    kind: str, wrong_clock: Workspace, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The issue: the cursor jumped to 9999 and every later run said "unchanged"."""
    ws, postgres = wrong_clock, (request.getfixturevalue("postgres_db") if kind == "postgresql" else "")
    job = ws.job(INCREMENTAL + destination(kind, request))
    ids = ids_by_name(ws)

    first, notes = run_ok(ws, job)
    assert (first.read, first.ahead_rows) == ("full", 2)
    assert_same(kind, ws, tmp_path, postgres)
    (note,) = [n for n in notes.lines if "ahead of the server's clock" in n]
    assert f"{ids['P005']} at 9999-12-31T23:59:59.999999Z" in note
    assert f"{ids['P200']} at 2999-01-01T00:00:00.000000Z" in note

    # Rows created, changed and deleted after it, by writers with the right clock.
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P001']}", json={"fields": {"Score": 100}})
    ws.api("DELETE", f"/tables/{ws.people}/rows/{ids['P002']}")
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(100, "Blue")})
    second, notes = run_ok(ws, job)

    assert (second.status, second.read, second.ahead_rows) == ("ok", "incremental", 2)
    assert (second.rows_written, second.rows_deleted) == (2, 1)  # the rows ahead: unchanged
    assert_same(kind, ws, tmp_path, postgres)
    assert any(ids["P005"] in n for n in notes.lines)

    quiet, _ = run_ok(ws, job)
    assert (quiet.status, quiet.rows_read, quiet.ahead_rows) == ("unchanged", 2, 2)

    # A row ahead changed by a writer with the right clock is written, and no longer ahead.
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P200']}", json={"fields": {"Score": 7}})
    changed, _ = run_ok(ws, job)
    assert (changed.rows_written, changed.ahead_rows) == (1, 1)
    assert_same(kind, ws, tmp_path, postgres)

    verified, _ = run_ok(ws, job, verify=True)
    assert (verified.read, verified.verified, verified.ahead_rows) == ("verify", Verified(), 1)
    assert_same(kind, ws, tmp_path, postgres)


@pytest.mark.parametrize("kind", list(DESTINATIONS))
def test_stamps_of_year_1_and_9999_round_trip(
    kind: str, make_workspace: MakeWorkspace, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ws = make_workspace(people=3, fault_control=True)
    postgres = request.getfixturevalue("postgres_db") if kind == "postgresql" else ""
    for when in (FIRST, FAR):
        stamp(ws, stamp_created_at=when, stamp_updated_at=when)
        ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(int(when[:4]) % 1000)})
    stamp(ws, stamp_created_at=None, stamp_updated_at=None)
    job = ws.job(INCREMENTAL + destination(kind, request))

    first, _ = run_ok(ws, job)

    assert first.ahead_rows == 1
    assert_same(kind, ws, tmp_path, postgres)
    held_stamps = sorted(r["updated_at"] for r in held(kind, ws, tmp_path, postgres).values())
    assert held_stamps[0] == instant("0001-01-01T00:00:00+00:00")
    assert held_stamps[-1] == instant("9999-12-31T23:59:59.999999+00:00")
    again, _ = run_ok(ws, job)
    assert (again.status, again.rows_written) == ("unchanged", 0)
    verified, _ = run_ok(ws, job, verify=True)
    assert verified.verified == Verified()
    assert_same(kind, ws, tmp_path, postgres)


def test_with_the_lookback_window_rows_ahead_are_read_again_but_not_late(
    wrong_clock: Workspace, tmp_path: Path
) -> None:
    ws = wrong_clock
    job = ws.job(INCREMENTAL.replace("lookback = 0", 'lookback = "5m"') + DESTINATIONS["duckdb"])
    run_ok(ws, job)

    quiet, _ = run_ok(ws, job)

    # Every row is minutes old: the 9 stamped by the clock come from the window, unchanged.
    assert (quiet.status, quiet.rows_read, quiet.window_rows) == ("unchanged", 11, 9)
    assert (quiet.late_rows, quiet.ahead_rows, quiet.rows_written) == (0, 2, 0)
    assert_same("duckdb", ws, tmp_path)


def cursor_of(ws: Workspace, folder: Path) -> str:
    state = json.loads((folder / "job.state.json").read_text())
    return str(state["tables"][ws.people]["cursor"])


def test_the_cursor_is_the_newest_stamp_behind_pages_of_rows_ahead(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    """More rows ahead than a page (the server's pages hold 50 here): the cursor is still
    the newest stamp at or before the server's clock, so nothing is read again but them."""
    ws = make_workspace(people=3, fault_control=True, max_page_size=50)
    stamp(ws, stamp_updated_at=AHEAD)
    for first in (1000, 1100):
        ws.api("POST", f"/tables/{ws.people}/rows/bulk",
               json={"rows": [{"fields": person(i)} for i in range(first, first + 60)]})
    stamp(ws, stamp_updated_at=None)
    job = ws.job(INCREMENTAL + DESTINATIONS["parquet"])

    first, notes = run_ok(ws, job)

    assert first.ahead_rows == 120
    assert any("and 117 more" in n for n in notes.lines)
    rows = api_rows(ws)
    assert cursor_of(ws, tmp_path) == max(r["updated_at"] for r in rows if r["updated_at"] < "2999")
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(100)})
    second, _ = run_ok(ws, job)
    assert (second.rows_read, second.rows_written, second.ahead_rows) == (121, 1, 120)
    assert_same("parquet", ws, tmp_path)


def test_where_every_row_is_ahead_the_clock_is_the_cursor(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    ws = make_workspace(people=0, fault_control=True)
    stamp(ws, stamp_updated_at=FAR)
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(1)})
    stamp(ws, stamp_updated_at=None)
    job = ws.job(INCREMENTAL + DESTINATIONS["parquet"])
    before = datetime.now(UTC) - timedelta(seconds=5)

    first, _ = run_ok(ws, job)

    assert first.ahead_rows == 1
    assert instant(before) <= instant(cursor_of(ws, tmp_path)) <= instant(datetime.now(UTC))
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(2)})
    second, _ = run_ok(ws, job)
    assert (second.rows_read, second.rows_written, second.ahead_rows) == (2, 1, 1)
    assert_same("parquet", ws, tmp_path)


def export_csv(ws: Workspace, folder: Path) -> RunSummary:
    destination = make_config("csv", str(folder), mode="replace", where="--out", base=folder)
    environ = {"CONNECTOR_BASE_URL": ws.server.base_url, "CONNECTOR_API_KEY": ws.server.api_key}
    return run_job(one_shot_job("export", destination, tables=["People"]), RunOptions(environ=environ))


def test_a_csv_export_holds_stamps_ahead_and_of_year_1_as_the_server_does(
    wrong_clock: Workspace, tmp_path: Path
) -> None:
    ws = wrong_clock
    stamp(ws, stamp_created_at=FIRST, stamp_updated_at=FIRST)
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(1)})
    stamp(ws, stamp_created_at=None, stamp_updated_at=None)

    first = export_csv(ws, tmp_path / "csv")
    assert first.status == "ok" and first.tables[0].ahead_rows == 0  # an export keeps no cursor
    assert_same("csv", ws, tmp_path)

    ids = ids_by_name(ws)
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P001']}", json={"fields": {"Score": 100}})
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(100, "Blue")})
    assert export_csv(ws, tmp_path / "csv").status == "ok"
    assert_same("csv", ws, tmp_path)


def test_the_sorted_fallback_stops_its_cursor_at_the_clock_too(
    make_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    """A server that refuses filters on updated_at: every row is read, the newer kept."""
    ws = make_workspace(fault_control=True, refuse_system_filters=True)
    ids = ids_by_name(ws)
    stamp(ws, stamp_updated_at=FAR)
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P005']}", json={"fields": {"Score": 500}})
    stamp(ws, stamp_updated_at=None)
    job = ws.job(INCREMENTAL + DESTINATIONS["sqlite"] + DESTINATIONS["duckdb"])
    first, _ = run_ok(ws, job)  # two destinations: the full read goes through the spool
    assert (first.read, first.ahead_rows) == ("full", 1)
    ws.api("PATCH", f"/tables/{ws.people}/rows/{ids['P001']}", json={"fields": {"Score": 100}})

    second, notes = run_ok(ws, job)

    assert (second.read, second.rows_written, second.ahead_rows) == ("incremental", 1, 1)
    assert any("filter refused" in n for n in notes.lines)
    assert_same("sqlite", ws, tmp_path)
    assert_same("duckdb", ws, tmp_path)


def test_a_saved_cursor_past_the_clock_reads_the_table_in_full(
    wrong_clock: Workspace, tmp_path: Path
) -> None:
    """A state written before cursors stopped at the clock holds 9999: what was read before
    it proves nothing, so the table is read again in full."""
    ws = wrong_clock
    job = ws.job(INCREMENTAL + DESTINATIONS["parquet"])
    run_ok(ws, job)
    state_file = tmp_path / "job.state.json"
    state = json.loads(state_file.read_text())
    state["tables"][ws.people]["cursor"] = FAR
    state_file.write_text(json.dumps(state))
    ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(100)})

    healed, notes = run_ok(ws, job)

    assert healed.read == "full"
    assert any("saved cursor 9999-12-31T23:59:59.999999Z is ahead" in n for n in notes.lines)
    assert_same("parquet", ws, tmp_path)
    assert json.loads(state_file.read_text())["tables"][ws.people]["cursor"] < "2999"


def test_the_summary_names_the_rows_ahead(wrong_clock: Workspace, tmp_path: Path) -> None:
    ws = wrong_clock
    job = ws.job(INCREMENTAL + DESTINATIONS["sqlite"])

    def sync(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "connector", "sync", str(job), *args], capture_output=True,
            text=True, cwd=ROOT, env={**os.environ, **ws.environ}, timeout=120,
        )

    text = sync()
    as_json = sync("--log-format", "json")

    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    out = text.stdout + text.stderr
    assert "2 stamped ahead of the server's clock" in out
    assert f"{ids_by_name(ws)['P005']} at 9999-12-31T23:59:59.999999Z" in out
    summary = json.loads(as_json.stdout)
    assert summary["totals"]["ahead_rows"] == 2 and summary["tables"][0]["ahead_rows"] == 2


def test_to_pandas_holds_year_1_and_9999(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(people=1, fault_control=True)
    for when in (FIRST, FAR):
        stamp(ws, stamp_created_at=when, stamp_updated_at=when)
        ws.api("POST", f"/tables/{ws.people}/rows", json={"fields": person(int(when[:4]) % 1000)})
    stamp(ws, stamp_created_at=None, stamp_updated_at=None)

    with Library(ws.server.base_url, ws.server.api_key) as library:
        frame = library.read("People")

    names = system(ws)
    got = {r: (instant(c.to_pydatetime()), instant(u.to_pydatetime())) for r, c, u in zip(
        frame[names["id"]], frame[names["created_at"]], frame[names["updated_at"]], strict=True)}
    want = {i: (r["created_at"], r["updated_at"]) for i, r in upstream(ws).items()}
    assert got == want
    assert str(frame[names["updated_at"]].dtype) == "datetime64[us, UTC]"
