"""connector.dlt: dlt pipelines into DuckDB against the reference server, compared value by value.

The server is changed between runs through its API (creates, updates, deletes); the
destination is read back with DuckDB itself and compared with the rows the server lists
(read with plain httpx, not our client).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dlt
import duckdb
import httpx
import pytest

from connector.dlt import tabledata
from connector.errors import AuthError, SkippedTableWarning, TableNotFound
from tests.fixtures.server import RunningServer

DEALS = {
    "name": "Deals",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Stage", "type": "choice", "options": ["New", "Won", "Lost"]},
        {"name": "Amount", "type": "number"},
        {"name": "Paid", "type": "checkbox"},
        {"name": "Due", "type": "date"},
    ],
}
NOTES = {"name": "Notes", "columns": [{"name": "Text", "type": "text"}]}
#: How each column type lands in DuckDB: the type mapping as a user sees it.
DUCKDB_TYPES = {
    "_id": "VARCHAR",
    "_created_at": "TIMESTAMP WITH TIME ZONE",
    "_updated_at": "TIMESTAMP WITH TIME ZONE",
    "name": "VARCHAR",
    "stage": "VARCHAR",
    "amount": "DOUBLE",
    "paid": "BOOLEAN",
    "due": "DATE",
}


def deal(i: int) -> dict[str, Any]:
    return {
        "Name": f"deal {i} — ünïcode",
        "Stage": ["New", "Won", "Lost", None][i % 4],
        "Amount": None if i % 7 == 0 else i * 1.5,
        "Paid": None if i % 5 == 0 else i % 2 == 0,
        "Due": None if i % 6 == 0 else f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}",
    }


class Workspace:
    """A server with Deals (250 rows: several pages) and Notes, and a dlt pipeline over it."""

    def __init__(self, server: RunningServer, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self.deals = server.create_table(DEALS)
        self.notes = server.create_table(NOTES)
        server.insert_rows(self.deals, [deal(i) for i in range(250)])
        server.insert_rows(self.notes, [{"Text": f"note {i}"} for i in range(3)])
        self.database = directory / "out.duckdb"

    def pipeline(self, name: str = "crm") -> Any:
        return dlt.pipeline(
            pipeline_name=name,
            destination=dlt.destinations.duckdb(str(self.database)),
            dataset_name="crm",
            pipelines_dir=str(self.directory / "pipelines"),
        )

    def run(self, **options: Any) -> Any:
        pipeline = self.pipeline()
        pipeline.run(tabledata(**options))
        return pipeline

    def server_rows(self, table_id: str) -> dict[str, dict[str, Any]]:
        """Every row the server lists, by id (plain HTTP, paged by the applied limit)."""
        rows: dict[str, dict[str, Any]] = {}
        with self.server.client() as http:
            offset = 0
            while True:
                page = http.get(
                    f"/tables/{table_id}/rows",
                    params={"limit": 1000, "offset": offset, "sort": "created_at", "order": "asc"},
                ).json()
                rows.update((r["id"], r) for r in page["rows"])
                if len(page["rows"]) < page["limit"]:
                    return rows
                offset += page["limit"]

    def destination_rows(self, table: str) -> dict[str, dict[str, Any]]:
        with duckdb.connect(str(self.database), read_only=True) as con:
            cursor = con.execute(f'SELECT * FROM crm."{table}"')
            names = [d[0] for d in cursor.description]
            return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}

    def assert_deals_match(self) -> None:
        server = self.server_rows(self.deals)
        destination = self.destination_rows("deals")
        assert sorted(destination) == sorted(server)
        for row_id, row in server.items():
            got = destination[row_id]
            fields = row["fields"]
            assert got["_created_at"] == _stamp(row["created_at"])
            assert got["_updated_at"] == _stamp(row["updated_at"])
            assert got["name"] == fields["Name"]
            assert got["stage"] == fields.get("Stage")
            assert got["amount"] == fields.get("Amount")
            assert got["paid"] == fields.get("Paid")
            due = fields.get("Due")
            assert got["due"] == (None if due is None else dt.date.fromisoformat(due))
            assert got["_deleted"] is None


def _stamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def workspace(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workspace]:
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    monkeypatch.setenv("RUNTIME__DLTHUB_TELEMETRY", "false")
    monkeypatch.chdir(tmp_path)  # dlt reads ./.dlt: none here
    yield Workspace(server, tmp_path)


def change_deals(workspace: Workspace) -> tuple[list[str], list[str], list[str]]:
    """Creates 3 rows, updates 4, deletes 5 (two of them on the last page) through the API."""
    ids = sorted(workspace.server_rows(workspace.deals))
    with workspace.server.client() as http:
        created = http.post(
            f"/tables/{workspace.deals}/rows/bulk",
            json={"rows": [{"fields": deal(1000 + i)} for i in range(3)]},
        ).json()["rows"]
        updated = [ids[3], ids[40], ids[120], ids[200]]
        for i, row_id in enumerate(updated):
            response = http.patch(
                f"/tables/{workspace.deals}/rows/{row_id}",
                json={"fields": {"Stage": "Won", "Amount": 99.25 + i, "Paid": None}},
            )
            assert response.status_code == 200
        deleted = [ids[0], ids[7], ids[100], ids[248], ids[249]]
        response = http.request(
            "DELETE", f"/tables/{workspace.deals}/rows/bulk", json={"row_ids": deleted}
        )
        assert response.status_code == 200
    return [r["id"] for r in created], updated, deleted


def test_a_pipeline_mirrors_the_server_through_creates_updates_and_deletes(
    workspace: Workspace,
) -> None:
    pipeline = workspace.run()
    assert set(pipeline.last_trace.last_normalize_info.row_counts) >= {"deals", "notes"}
    workspace.assert_deals_match()
    notes = workspace.destination_rows("notes")
    assert sorted(n["text"] for n in notes.values()) == ["note 0", "note 1", "note 2"]

    created, updated, deleted = change_deals(workspace)
    workspace.run()

    workspace.assert_deals_match()
    destination = workspace.destination_rows("deals")
    assert set(created) <= set(destination)
    assert not set(deleted) & set(destination)
    assert [destination[i]["stage"] for i in updated] == ["Won"] * 4

    # A quiet run changes nothing.
    workspace.run()
    workspace.assert_deals_match()


def test_columns_are_typed_from_the_schema_and_the_row_id_is_the_primary_key(
    workspace: Workspace,
) -> None:
    pipeline = workspace.run(tables=["Deals"])

    with duckdb.connect(str(workspace.database), read_only=True) as con:
        types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE crm.deals)").fetchall())
    assert {k: types[k] for k in DUCKDB_TYPES} == DUCKDB_TYPES
    table = pipeline.default_schema.get_table("deals")
    assert table["write_disposition"] == "merge"
    assert [n for n, c in table["columns"].items() if c.get("primary_key")] == ["_id"]
    assert [n for n, c in table["columns"].items() if c.get("hard_delete")] == ["_deleted"]
    assert set(workspace.destination_rows("deals")) == set(workspace.server_rows(workspace.deals))
    with duckdb.connect(str(workspace.database), read_only=True) as con:
        tables = {r[0] for r in con.execute("SHOW TABLES FROM crm").fetchall()}
    assert "notes" not in tables


def _backdate(server: RunningServer, row_id: str, stamp: dt.datetime) -> None:
    """Stamps a row's updated_at in the past, as a late commit shows up: written before the
    cursor, visible only after it (straight into the server's SQLite file)."""
    text = stamp.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with sqlite3.connect(server.db_path) as db:
        db.execute("UPDATE rows SET updated_at = ? WHERE id = ?", (text, row_id))


@pytest.mark.parametrize(("lookback", "read_again"), [(300.0, True), (30.0, False)])
def test_the_lookback_window_reads_a_late_commit_again(
    workspace: Workspace, lookback: float, read_again: bool
) -> None:
    workspace.run(tables=["Notes"], lookback=lookback)
    cursor = max(_stamp(r["updated_at"]) for r in workspace.server_rows(workspace.notes).values())
    with workspace.server.client() as http:
        late = http.post(f"/tables/{workspace.notes}/rows", json={"fields": {"Text": "late"}}).json()
    _backdate(workspace.server, late["id"], cursor - dt.timedelta(seconds=60))

    workspace.run(tables=["Notes"], lookback=lookback)

    texts = {n["text"] for n in workspace.destination_rows("notes").values()}
    assert ("late" in texts) is read_again


def test_an_incremental_run_reads_only_the_rows_changed_in_the_window(
    workspace: Workspace,
) -> None:
    """With no lookback, the second run reads the changed rows and one tombstone per
    deleted row, nothing else."""
    workspace.run(tables=["Deals"], lookback=0)
    created, updated, deleted = change_deals(workspace)

    pipeline = workspace.run(tables=["Deals"], lookback=0)

    counts = pipeline.last_trace.last_normalize_info.row_counts
    assert counts["deals"] == len(created) + len(updated) + len(deleted)
    workspace.assert_deals_match()


def test_without_deletes_rows_deleted_upstream_stay(workspace: Workspace) -> None:
    workspace.run(tables=["Deals"], deletes=False)
    _, _, deleted = change_deals(workspace)

    workspace.run(tables=["Deals"], deletes=False)

    destination = workspace.destination_rows("deals")
    assert set(deleted) <= set(destination)
    assert set(destination) - set(deleted) == set(workspace.server_rows(workspace.deals))


def test_the_key_from_dlt_secrets_is_used_and_written_nowhere(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = workspace.server.api_key
    monkeypatch.setenv("CONNECTOR_API_KEY", "not-the-key")
    monkeypatch.setenv("SOURCES__TABLEDATA__API_KEY", key)
    caplog.set_level("DEBUG")

    pipeline = workspace.run()

    assert set(workspace.destination_rows("deals")) == set(workspace.server_rows(workspace.deals))
    assert key not in caplog.text
    assert key not in repr(pipeline.last_trace)
    for path in workspace.directory.rglob("*"):
        if path.is_file() and path.name != "server.db":
            assert key.encode() not in path.read_bytes(), path


def test_a_wrong_key_fails_with_an_auth_error(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONNECTOR_API_KEY", "wrong-key")
    with pytest.raises(AuthError, match=r"^401 the API key was refused: .* set CONNECTOR_API_KEY") \
            as info:
        workspace.run()
    assert "wrong-key" not in str(info.value)


def test_an_unknown_table_names_the_close_matches(workspace: Workspace) -> None:
    with pytest.raises(TableNotFound, match="did you mean 'Deals'"):
        tabledata(tables=["Deal"])


def test_a_table_the_key_may_not_read_is_left_out_with_a_warning(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONNECTOR_API_KEY", workspace.server.create_key(tables=["Deals"]))
    pipeline = workspace.pipeline()  # the active pipeline: its state holds the names given
    with pytest.warns(SkippedTableWarning, match=workspace.notes):
        source = tabledata(tables=["Deals", workspace.notes])
    assert list(source.resources) == ["deals"]  # named as dlt names its table
    pipeline.run(source)
    workspace.assert_deals_match()


def test_tables_whose_names_differ_only_in_case_load_into_distinct_tables(
    workspace: Workspace,
) -> None:
    lower = workspace.server.create_table({**NOTES, "name": "notes"})
    workspace.server.insert_rows(lower, [{"Text": "lower"}])

    workspace.run(tables=["Notes", lower])

    assert {n["text"] for n in workspace.destination_rows("notes").values()} == {
        "note 0", "note 1", "note 2"
    }
    later = f"notes_{lower}"  # `notes-<id>`, as dlt's naming spells it
    assert [n["text"] for n in workspace.destination_rows(later).values()] == ["lower"]


class CountingProxy:
    """A plain HTTP proxy on 127.0.0.1 in front of the server, noting each request's path
    and query: what a run costs, seen from outside the code under test."""

    def __init__(self, upstream: str) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        forward = httpx.Client(base_url=upstream.removesuffix("/v1"), timeout=30.0)
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = httpx.URL(self.path)
                seen.append((url.path, dict(url.params)))
                headers = {"Authorization": self.headers.get("Authorization", "")}
                answer = forward.get(self.path, headers=headers)
                self.send_response(answer.status_code)
                for name in ("Content-Type", "Retry-After"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._forward = forward
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._forward.close()


@pytest.fixture
def proxy(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingProxy]:
    running = CountingProxy(workspace.server.base_url)
    monkeypatch.setenv("CONNECTOR_BASE_URL", running.base_url)
    yield running
    running.close()


def test_a_quiet_run_makes_the_documented_requests_and_a_deletion_adds_the_id_pass(
    workspace: Workspace, proxy: CountingProxy
) -> None:
    """connector/dlt.py's docstring: S, the change read, the count N and R per table; the id
    pass (pages of 1000) only when the count check fails."""
    workspace.run(tables=["Deals"], lookback=0)
    rows = f"/v1/tables/{workspace.deals}/rows"
    proxy.seen.clear()

    workspace.run(tables=["Deals"], lookback=0)

    quiet = [(path, {k: v for k, v in params.items() if k != "filter"}) for path, params in proxy.seen]
    assert quiet == [
        ("/v1/tables", {}),
        (f"/v1/tables/{workspace.deals}", {}),
        (rows, {"limit": "1", "offset": "0", "sort": "updated_at", "order": "desc"}),
        (rows, {"limit": "100", "offset": "0", "sort": "created_at", "order": "asc"}),
        (rows, {"limit": "1", "offset": "0"}),
        (rows, {"limit": "100", "offset": "0", "sort": "created_at", "order": "asc"}),
    ]
    assert all("filter" in params for path, params in proxy.seen[3:4] + proxy.seen[5:6])

    with workspace.server.client() as http:
        gone = sorted(workspace.server_rows(workspace.deals))[5]
        assert http.delete(f"/tables/{workspace.deals}/rows/{gone}").status_code == 204
    proxy.seen.clear()

    workspace.run(tables=["Deals"], lookback=0)

    id_pass = [params for path, params in proxy.seen if params.get("limit") == "1000"]
    assert [json.loads(p.get("filter", "null")) for p in id_pass] == [None]
    assert gone not in workspace.destination_rows("deals")
    workspace.assert_deals_match()


def test_tables_whose_names_dlt_makes_equal_load_into_tables_of_their_own(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dlt's naming convention makes ``Deal Stage``, ``deal_stage`` and ``DEAL-STAGE`` one
    table name; each gets its own table, and keeps it when a key sees only one of them."""
    ids = {}
    for name in ("Deal Stage", "deal_stage", "DEAL-STAGE"):
        ids[name] = workspace.server.create_table({"name": name, "columns": NOTES["columns"]})
        workspace.server.insert_rows(ids[name], [{"Text": f"from {name}"}])
    pipeline = workspace.run(tables=list(ids))
    names = [t for t in pipeline.default_schema.data_table_names() if t.startswith("deal_stage")]
    assert len(names) == 3, names
    texts = {r: {row["text"] for row in workspace.destination_rows(r).values()} for r in names}
    assert sorted(texts.values(), key=sorted) == sorted(
        ({f"from {n}"} for n in ids), key=sorted)

    monkeypatch.setenv("CONNECTOR_API_KEY", workspace.server.create_key(tables=[ids["DEAL-STAGE"]]))
    workspace.server.insert_rows(ids["DEAL-STAGE"], [{"Text": "later"}])
    workspace.run(tables=[ids["DEAL-STAGE"]])
    after = {r: {row["text"] for row in workspace.destination_rows(r).values()} for r in names}
    changed = {r for r in names if after[r] != texts[r]}
    assert len(changed) == 1 and after[changed.pop()] == {"from DEAL-STAGE", "later"}
