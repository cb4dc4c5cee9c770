"""Job files syncing into object storage and Delta Lake: ``parquet = "s3://…"`` (or
``gs://…``, ``az://…``) and ``delta = "path or s3://… or az://…"``, incremental, with deletes
removed or marked, and verified.

Against the reference server and real storage emulators the tests start (moto for S3,
fake-gcs-server for GCS, Azurite for Azure Blob); read back with pyarrow and deltalake
through each store's own API, never through our code, and compared with the server's rows.

Delta on gs:// is not run: deltalake's object store speaks GCS's XML API, and neither GCS
emulator on PyPI serves it (fake-gcs-server answers its PUT of a data file with 400
"invalid uploadType", gcp-storage-emulator its listing with 501 Not Implemented).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from connector.errors import ConfigError
from connector.jobs.config import load_job
from tests.fixtures.azurite import ACCOUNT_KEY, AzureContainer
from tests.fixtures.gcs import GCSBucket
from tests.fixtures.s3 import S3Bucket
from tests.jobs.conftest import Workspace
from tests.jobs.test_sync import EXPECTED_AFTER_CHANGES, NAMES, change_people, result

INCREMENTAL = "[sync]\nincremental = true\nlookback = 0\n"

Lake = S3Bucket | GCSBucket | AzureContainer
FIXTURES = {"s3": "s3", "gs": "gcs", "az": "azure"}


@pytest.fixture(params=["s3", "gs", "az"])
def lake(request: pytest.FixtureRequest) -> Lake:
    """A fresh bucket or container on each object store."""
    store: Lake = request.getfixturevalue(FIXTURES[request.param])
    return store


@pytest.fixture(params=["s3", "az"])
def delta_lake(request: pytest.FixtureRequest) -> Lake:
    """A fresh bucket or container on each object store Delta runs on (not gs://: above)."""
    store: Lake = request.getfixturevalue(FIXTURES[request.param])
    return store


def reader_options(lake: Lake) -> dict[str, str]:
    """How a Delta reader outside our code reaches the store."""
    if isinstance(lake, AzureContainer):
        return lake.delta_options()
    assert isinstance(lake, S3Bucket)
    return {"AWS_ENDPOINT_URL": lake.server.endpoint, "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing"}


def parquet_rows(lake: Lake, key: str) -> dict[str, dict[str, Any]]:
    return {r["Name"]: r for r in pq.read_table(io.BytesIO(lake.get(key))).to_pylist()}


def delta_people(uri: str, options: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    return {r["Name"]: r for r in DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()}


def people_on_server(ws: Workspace) -> dict[str, tuple[Any, ...]]:
    """Every People row as the API serves it, by Name: id, update time and each cell."""
    rows = ws.api("GET", f"/tables/{ws.people}/rows", params={"limit": 1000})["rows"]
    return {
        r["fields"]["Name"]: (
            r["id"], datetime.fromisoformat(r["updated_at"]), r["fields"].get("Team"),
            float(r["fields"]["Score"]), r["fields"].get("Active"),
            date.fromisoformat(r["fields"]["Joined"]),
        )
        for r in rows
    }


def as_held(rows: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """The same view of what a destination holds."""
    return {
        name: (r["_id"], r["_updated_at"], r["Team"], r["Score"], r["Active"], r["Joined"])
        for name, r in rows.items()
    }


def test_incremental_sync_into_object_storage_parquet(workspace: Workspace, lake: Lake) -> None:
    job = workspace.job(INCREMENTAL + f'[[destination]]\nparquet = "{lake.url("pq/")}"\n')
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    assert result(first, "People").targets == (lake.url("pq/People.parquet"),)
    assert as_held(parquet_rows(lake, "pq/People.parquet")) == people_on_server(workspace)
    change_people(workspace)

    second = workspace.run(job)

    people = result(second, "People")
    assert (people.status, people.read, people.rows_deleted) == ("ok", "incremental", 1)
    in_parquet = parquet_rows(lake, "pq/People.parquet")
    assert sorted(in_parquet) == EXPECTED_AFTER_CHANGES
    assert as_held(in_parquet) == people_on_server(workspace)
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}
    assert lake.objects("pq/") == [  # no temp objects
        "pq/Notes.parquet", "pq/People.parquet", "pq/_connector_tables.json"]


def test_incremental_sync_into_delta_on_object_storage(workspace: Workspace, delta_lake: Lake) -> None:
    job = workspace.job(INCREMENTAL + f'[[destination]]\ndelta = "{delta_lake.url("lake")}"\n')
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    lake = delta_lake.url("lake/People")
    assert result(first, "People").targets == (lake,)
    options = reader_options(delta_lake)
    assert sorted(delta_people(lake, options)) == NAMES
    assert as_held(delta_people(lake, options)) == people_on_server(workspace)
    version = DeltaTable(lake, storage_options=options).version()
    change_people(workspace)

    second = workspace.run(job)

    people = result(second, "People")
    assert (people.status, people.read, people.rows_deleted) == ("ok", "incremental", 1)
    in_delta = delta_people(lake, options)
    assert sorted(in_delta) == EXPECTED_AFTER_CHANGES
    assert as_held(in_delta) == people_on_server(workspace)
    table = DeltaTable(lake, storage_options=options)
    assert table.version() == version + 1  # upserts and the delete: one commit
    assert table.history()[0]["operation"] == "MERGE"
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}


def test_deleted_rows_are_marked_in_delta_and_object_storage_parquet(
    workspace: Workspace, lake: Lake, tmp_path: Path
) -> None:
    job = workspace.job(
        "[sync]\nincremental = true\nlookback = 0\ndeletes = 'mark'\n"
        + '[[destination]]\ndelta = "lake"\n'
        + f'[[destination]]\nparquet = "{lake.url("pq")}"\n'
    )
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    change_people(workspace)

    second = workspace.run(job)
    assert second.status == "ok", (second.error, [t.error for t in second.tables])

    for held in (delta_people(str(tmp_path / "lake" / "People")), parquet_rows(lake, "pq/People.parquet")):
        assert sorted(held) == sorted([*NAMES, "P100"])
        assert sorted(n for n, r in held.items() if r["_deleted_at"] is not None) == ["P002"]
    # A third run: the marked row is not "deleted again", nothing changes.
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}


def test_verify_repairs_a_delta_table(workspace: Workspace, tmp_path: Path) -> None:
    job = workspace.job(INCREMENTAL + '[[destination]]\ndelta = "lake"\n')
    workspace.run(job)
    uri = str(tmp_path / "lake" / "People")
    DeltaTable(uri).delete("Name = 'P003'")
    DeltaTable(uri).update({"Score": "-1.0"}, predicate="Name = 'P004'")

    summary = workspace.run(job, verify=True)

    people = result(summary, "People")
    assert people.verified is not None
    assert (people.verified.missing, people.verified.different) == (1, 1)
    held = delta_people(uri)
    assert sorted(held) == NAMES and held["P004"]["Score"] == 4.0


SYNC_SAYING_IMPORTS = """
import sys
from connector.cli import main
try:
    main(["sync", sys.argv[1], "--log-format", "json"], standalone_mode=False)
finally:
    print(sorted(m for m in ("pandas", "pyarrow.dataset") if m in sys.modules))
"""


def sync_saying_imports(workspace: Workspace, job: Path) -> tuple[dict[str, Any], str]:
    """`connector sync JOB` in a process of its own: each table's result, and which of
    pandas and pyarrow.dataset it imported."""
    done = subprocess.run([sys.executable, "-c", SYNC_SAYING_IMPORTS, str(job)],
                          capture_output=True, text=True, env={**os.environ, **workspace.environ},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    *summary, imported = done.stdout.splitlines()
    return {t["table"]: t for t in json.loads("\n".join(summary))["tables"]}, imported


def test_delta_syncs_import_no_pandas(workspace: Workspace, tmp_path: Path) -> None:
    """Importing pandas costs a process 0.3 s of CPU. A quiet run read each Delta table's ids
    (were rows deleted?) and its lookback window's stamps (written already?) through
    `pyarrow.dataset`, which imports it; a merge made its op column with `pa.scalar`,
    which imports it too."""
    job = workspace.job('[sync]\nincremental = true\nlookback = 600\n'
                        '[[destination]]\ndelta = "lake"\n')
    workspace.run(job)
    uri = str(tmp_path / "lake" / "People")

    tables, imported = sync_saying_imports(workspace, job)
    assert tables["People"]["status"] == "unchanged" and tables["People"]["window_rows"] == 10
    assert imported == "[]"

    change_people(workspace)
    tables, imported = sync_saying_imports(workspace, job)
    assert (tables["People"]["status"], tables["People"]["rows_deleted"]) == ("ok", 1)
    assert imported == "[]"
    held = delta_people(uri)
    assert sorted(held) == EXPECTED_AFTER_CHANGES
    assert {n: (r["_id"], r["_updated_at"], r["Score"]) for n, r in held.items()} == {
        n: (row[0], row[1], row[3]) for n, row in people_on_server(workspace).items()
    }


@pytest.mark.parametrize(
    ("scheme", "kind"),
    [("s3", "parquet"), ("s3", "delta"), ("gs", "parquet"), ("az", "parquet"), ("az", "delta")],
)
def test_a_missing_bucket_fails_the_run_with_one_line(
    workspace: Workspace, request: pytest.FixtureRequest, scheme: str, kind: str
) -> None:
    request.getfixturevalue(FIXTURES[scheme])  # the store's emulator and environment
    missing = f"{scheme}://no-such-bucket-here/lake"
    job = workspace.job(f'[[destination]]\n{kind} = "{missing}"\n')
    summary = workspace.run(job)
    assert summary.status == "failed" and summary.exit_code == 1
    assert summary.error is not None and "no-such-bucket-here" in summary.error
    assert "\n" not in summary.error and ACCOUNT_KEY not in summary.error
    assert summary.tables == []


@pytest.mark.parametrize(
    ("destination", "message"),
    [
        ('parquet = "ftp://host/x"', "destination.parquet: unknown storage scheme 'ftp'"),
        ('delta = "s3://KEYID:hunter2secret@bucket/x"', "destination.delta: a storage URL carries no"),
        ('delta = "lake"\nurl = "sqlite:///x.db"', "set exactly one of parquet"),
        ('delta = "s3://bucket/x"\naws_secret_access_key = "hunter2secret"', "credentials never go in a job file"),
        ('parquet = "gs://bucket/x?access_token=hunter2secret"', "destination.parquet: a storage URL carries no"),
        ('delta = "az://container/x?sig=hunter2secret"', "destination.delta: a storage URL carries no"),
        ('parquet = "az://c/x"\nconnection_string = "AccountKey=hunter2secret"', "credentials never go in a job file"),
        ('delta = "az://c/x"\naccount_key = "hunter2secret"', "credentials never go in a job file"),
        ('parquet = "gs://b/x"\ncredentials = "hunter2secret"', "credentials never go in a job file"),
    ],
)
def test_bad_lake_destinations_are_refused_when_the_job_is_read(
    tmp_path: Path, destination: str, message: str
) -> None:
    path = tmp_path / "job.toml"
    path.write_text(f'[source]\napi_key_env = "JOB_KEY"\n[destination]\n{destination}\n')
    with pytest.raises(ConfigError) as caught:
        load_job(path)
    assert message in str(caught.value)
    assert "hunter2secret" not in str(caught.value)
