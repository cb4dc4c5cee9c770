"""A user's columns named like the connector's own survive every destination kind and mode.

The table holds a column called after each of our columns (the row id and stamps, the mark
of ``deletes = "mark"``, dlt's deletion flag, Delta's merge column) and after the API's
system fields; ours move aside (``__id``, ``__deleted_at``...). A sync runs in full, then
incrementally after an update, a delete and a create, with marks and with deletions; each
destination is read back with a reader of its own and compared with the server, value by
value (tests/jobs/test_names.py reads them the same way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from connector.jobs.config import load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.results import TableResult
from tests.destinations.helpers import Place
from tests.destinations.test_iceberg import IcebergPlace
from tests.fixtures.server import RunningServer

#: Named like ours, and like the API's system fields.
HOSTILE = ["_id", "_created_at", "_updated_at", "_deleted_at", "_deleted", "_connector_op",
           "id", "created_at", "updated_at"]
SPEC = {"name": "Ledger", "columns": [{"name": n, "type": "text"} for n in [*HOSTILE, "Label"]]}
#: Where ours go when a user column has the plain name (written out, not computed).
OURS = {"id": "__id", "created_at": "__created_at", "updated_at": "__updated_at",
        "mark": "__deleted_at"}
KINDS = {
    "parquet": 'parquet = "{dir}/pq"',
    "delta": 'delta = "{dir}/delta"',
    "iceberg": 'iceberg = "{dir}/ice"',
    "sqlite": 'url = "sqlite:///{dir}/w.db"',
    "duckdb": 'url = "duckdb:///{dir}/w.duckdb"',
    "postgresql": 'url = "{postgres}"',
}


def cells(i: int) -> dict[str, str]:
    return {n: f"{n} of {i}" for n in HOSTILE} | {"Label": f"row {i}"}


def reader(kind: str, tmp_path: Path, postgres: str) -> Any:
    return {
        "parquet": lambda: Place("parquet", str(tmp_path / "pq")),
        "delta": lambda: Place("delta", str(tmp_path / "delta")),
        "iceberg": lambda: IcebergPlace(str(tmp_path / "ice")),
        "sqlite": lambda: Place("sqlite", f"sqlite:///{tmp_path / 'w.db'}"),
        "duckdb": lambda: Place("duckdb", f"duckdb:///{tmp_path / 'w.duckdb'}"),
        "postgresql": lambda: Place("postgresql", postgres),
    }[kind]()


@pytest.mark.parametrize("deletes", ["mark", "delete"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_columns_named_like_ours_survive_full_incremental_and_deletion_runs(
    server: RunningServer, tmp_path: Path, request: pytest.FixtureRequest, kind: str, deletes: str
) -> None:
    postgres = str(request.getfixturevalue("postgres_db")) if kind == "postgresql" else ""
    table_id = server.create_table(SPEC)
    rows = server.insert_rows(table_id, [cells(i) for i in range(5)])
    job = tmp_path / "job.toml"
    job.write_text(
        '[source]\napi_key_env = "JOB_KEY"\n[sync]\nincremental = true\nlookback = 0\n'
        f'deletes = "{deletes}"\n[[destination]]\n'
        + KINDS[kind].format(dir=tmp_path, postgres=postgres) + "\n"
    )
    environ = {"CONNECTOR_BASE_URL": server.base_url, "JOB_KEY": server.api_key}

    def sync(expect_read: str) -> TableResult:
        summary = run_job(load_job(job), RunOptions(environ=environ))
        assert summary.status == "ok", summary
        [table] = summary.tables
        assert table.read == expect_read, table
        return table

    sync("full")
    with server.client() as http:
        http.patch(f"/tables/{table_id}/rows/{rows[1]['id']}",
                   json={"fields": {"_deleted_at": "changed", "updated_at": "changed"}}).raise_for_status()
        http.request("DELETE", f"/tables/{table_id}/rows/{rows[2]['id']}").raise_for_status()
    server.insert_rows(table_id, [cells(9)])
    changed = sync("incremental")  # though `updated_at` hides the system field from filters
    assert (changed.rows_written, changed.rows_deleted) == (2, 1)  # the rest not rewritten

    with server.client() as http:
        live = {r["id"]: r for r in http.get(f"/tables/{table_id}/rows", params={"limit": 100}).json()["rows"]}
    place = reader(kind, tmp_path, postgres)
    listed = place.arrow("Ledger").to_pylist() if kind == "iceberg" else place.rows("Ledger")
    held = {r[OURS["id"]]: r for r in listed}
    assert len(held) == len(listed)
    marked = {i for i, r in held.items() if r.get(OURS["mark"]) is not None}
    if deletes == "mark":
        assert marked == {rows[2]["id"]}
        assert set(held) == {*live, rows[2]["id"]}
        assert held[rows[2]["id"]]["_deleted_at"] == "_deleted_at of 2"  # the user's, untouched
    else:
        assert marked == set() and set(held) == set(live)
    for row_id, row in live.items():
        got = held[row_id]
        assert {n: got[n] for n in [*HOSTILE, "Label"]} == {
            n: row["fields"].get(n) for n in [*HOSTILE, "Label"]}, (kind, row_id)
        assert got[OURS["id"]] == row_id
        assert got[OURS["updated_at"]] is not None and got[OURS["created_at"]] is not None
