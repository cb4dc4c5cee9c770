"""Job files syncing into object storage and Delta Lake: ``parquet = "s3://…"`` and
``delta = "path or s3://…"``, incremental, with deletes removed or marked, and verified.

Against the reference server and a real S3-compatible server (moto); read back with
pyarrow (through s3fs) and deltalake, never through our code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from connector.errors import ConfigError
from connector.jobs.config import load_job
from tests.fixtures.s3 import S3Bucket
from tests.jobs.conftest import Workspace
from tests.jobs.test_sync import EXPECTED_AFTER_CHANGES, NAMES, change_people, result

INCREMENTAL = "[sync]\nincremental = true\nlookback = 0\n"


def reader_options(s3: S3Bucket) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": s3.server.endpoint, "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing"}


def s3_parquet(s3: S3Bucket, key: str) -> dict[str, dict[str, Any]]:
    import s3fs

    with s3fs.S3FileSystem(skip_instance_cache=True).open(f"{s3.name}/{key}", "rb") as f:
        return {r["Name"]: r for r in pq.read_table(f).to_pylist()}


def delta_people(uri: str, options: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    return {r["Name"]: r for r in DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()}


def test_incremental_sync_into_s3_parquet_and_delta(workspace: Workspace, s3: S3Bucket) -> None:
    job = workspace.job(
        INCREMENTAL
        + f'[[destination]]\nparquet = "{s3.url("pq/")}"\n'
        + f'[[destination]]\ndelta = "{s3.url("lake")}"\n'
    )
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    assert result(first, "People").targets == (
        s3.url("pq/People.parquet"), s3.url("lake/People"),
    )
    assert sorted(s3_parquet(s3, "pq/People.parquet")) == NAMES
    options = reader_options(s3)
    lake = s3.url("lake/People")
    assert sorted(delta_people(lake, options)) == NAMES
    version = DeltaTable(lake, storage_options=options).version()
    change_people(workspace)

    second = workspace.run(job)

    people = result(second, "People")
    assert (people.status, people.read, people.rows_deleted) == ("ok", "incremental", 1)
    in_parquet = s3_parquet(s3, "pq/People.parquet")
    in_delta = delta_people(lake, options)
    for held in (in_parquet, in_delta):
        assert sorted(held) == EXPECTED_AFTER_CHANGES
        assert held["P001"]["Score"] == 100.0 and held["P100"]["Team"] == "Blue"
    table = DeltaTable(lake, storage_options=options)
    assert table.version() == version + 1  # upserts and the delete: one commit
    assert table.history()[0]["operation"] == "MERGE"
    assert {t.status for t in workspace.run(job).tables} == {"unchanged"}
    assert [k for k in s3.objects("pq/")] == ["pq/Notes.parquet", "pq/People.parquet"]


def test_deleted_rows_are_marked_in_delta_and_s3_parquet(workspace: Workspace, s3: S3Bucket, tmp_path: Path) -> None:
    job = workspace.job(
        "[sync]\nincremental = true\nlookback = 0\ndeletes = 'mark'\n"
        + '[[destination]]\ndelta = "lake"\n'
        + f'[[destination]]\nparquet = "{s3.url("pq")}"\n'
    )
    first = workspace.run(job)
    assert first.status == "ok", (first.error, [t.error for t in first.tables])
    change_people(workspace)

    second = workspace.run(job)
    assert second.status == "ok", (second.error, [t.error for t in second.tables])

    for held in (delta_people(str(tmp_path / "lake" / "People")), s3_parquet(s3, "pq/People.parquet")):
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


def test_a_missing_bucket_fails_the_run_with_one_line(workspace: Workspace, s3: S3Bucket) -> None:
    job = workspace.job('[[destination]]\ndelta = "s3://no-such-bucket-here/lake"\n')
    summary = workspace.run(job)
    assert summary.status == "failed" and summary.exit_code == 1
    assert summary.error is not None and "no-such-bucket-here" in summary.error
    assert "\n" not in summary.error
    assert summary.tables == []


@pytest.mark.parametrize(
    ("destination", "message"),
    [
        ('parquet = "ftp://host/x"', "destination.parquet: unknown storage scheme 'ftp'"),
        ('delta = "s3://KEYID:hunter2secret@bucket/x"', "destination.delta: a storage URL carries no"),
        ('delta = "lake"\nurl = "sqlite:///x.db"', "set exactly one of parquet"),
        ('delta = "s3://bucket/x"\naws_secret_access_key = "hunter2secret"', "credentials never go in a job file"),
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
