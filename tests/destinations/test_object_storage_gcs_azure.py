"""`export --out gs://…` and `az://…`: tables as whole objects on Google Cloud Storage and
Azure Blob Storage emulators (fake-gcs-server, Azurite) the tests start themselves.

The same guarantees as ``s3://`` (tests/destinations/test_object_storage.py): one object per table,
types intact, values equal to the server's, read back through the emulator's own API (never
through our code); an object appears whole or not at all; a missing bucket or container
fails the run on one line; credentials come from the provider's environment, never a URL.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from deltalake import DeltaTable

from connector.cli import main
from tests.destinations.samples import kill_when
from tests.destinations.test_cli import FIELDS, SPEC
from tests.destinations.test_duckdb import api_rows, expected_cell
from tests.destinations.test_object_storage import StallingProxy, parquet_put
from tests.fixtures.azurite import ACCOUNT, ACCOUNT_KEY, AzureContainer
from tests.fixtures.gcs import GCSBucket, create_bucket, start_gcs_server
from tests.fixtures.server import ROOT, RunningServer

Store = GCSBucket | AzureContainer
KINDS = {c["name"]: c["type"] for c in SPEC["columns"]}


@pytest.fixture(params=["gs", "az"])
def store(request: pytest.FixtureRequest) -> Store:
    bucket: Store = request.getfixturevalue("gcs" if request.param == "gs" else "azure")
    return bucket


@pytest.fixture
def orders(server: RunningServer) -> tuple[RunningServer, str]:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, FIELDS)
    return server, table_id


def run(server: RunningServer, *args: str) -> Result:
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, list(args), env=env)


def on_server(server: RunningServer, table_id: str) -> dict[str, dict[str, Any]]:
    """Every row as the API serves it, by id: its update time and each cell, typed (an
    empty text is the empty string)."""
    return {
        r["id"]: {"_updated_at": datetime.fromisoformat(r["updated_at"]),
                  **{name: expected_cell(kind, r["fields"].get(name))
                     for name, kind in KINDS.items()}}
        for r in api_rows(server, table_id)
    }


def held(table: pa.Table) -> dict[str, dict[str, Any]]:
    """The same view of what an object holds."""
    return {r["_id"]: {c: r[c] for c in ["_updated_at", *KINDS]} for r in table.to_pylist()}


def parquet_object(store: Store, key: str) -> pa.Table:
    return pq.read_table(io.BytesIO(store.get(key)))


def test_export_writes_one_object_per_table_equal_to_the_server(
    orders: tuple[RunningServer, str], store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, table_id = orders
    monkeypatch.chdir(tmp_path)
    result = run(server, "export", "--out", store.url("lake/daily/"))
    assert result.exit_code == 0, result.output
    assert f"-> {store.url('lake/daily/orders.parquet')}" in result.output
    assert store.objects() == ["lake/daily/_connector_tables.json", "lake/daily/orders.parquet"]
    assert list(tmp_path.iterdir()) == []  # no local folder named "gs:" or "az:"

    table = parquet_object(store, "lake/daily/orders.parquet")
    status = table.column("Status").combine_chunks()
    assert pa.types.is_dictionary(status.type)
    assert status.dictionary.to_pylist() == ["open", "on hold", "closed"]  # every option
    types = {f.name: str(f.type) for f in table.schema}
    assert types["_updated_at"] == "timestamp[us, tz=UTC]"
    assert (types["Amount"], types["Paid"], types["Due"]) == ("double", "bool", "date32[day]")
    expected = on_server(server, table_id)
    assert len(expected) == len(FIELDS)
    assert held(table) == expected


def test_export_csv_and_a_second_export_replaces_the_object(
    orders: tuple[RunningServer, str], store: Store
) -> None:
    server, table_id = orders
    assert run(server, "export", "--format", "csv", "--out", store.url("csv")).exit_code == 0
    assert pacsv.read_csv(io.BytesIO(store.get("csv/orders.csv"))).num_rows == len(FIELDS)

    server.insert_rows(table_id, [{"Name": "Zed", "Due": "2030-01-02", "Amount": 7}])
    result = run(server, "export", "--format", "csv", "--out", store.url("csv"))
    assert result.exit_code == 0, result.output
    assert store.objects() == ["csv/_connector_tables.json", "csv/orders.csv"]  # no temp object
    second = pacsv.read_csv(io.BytesIO(store.get("csv/orders.csv")))
    names = second.column("Name").to_pylist()
    assert sorted(names) == sorted(r["fields"]["Name"] for r in api_rows(server, table_id))
    zed = second.to_pylist()[names.index("Zed")]
    assert (zed["Amount"], str(zed["Due"])) == (7, "2030-01-02")


MISSING = {"gs": ("gs://no-such-bucket-here/x", "no such bucket"),
           "az": ("az://no-such-container-here/x", "no such container")}


def test_a_missing_bucket_or_container_fails_before_reading_with_one_line(
    orders: tuple[RunningServer, str], store: Store
) -> None:
    server, _ = orders
    out, message = MISSING[store.url().partition("://")[0]]
    result = run(server, "export", "--out", out)
    assert result.exit_code == 1
    name = out.split("/")[2]
    errors = [line for line in result.output.splitlines() if name in line]
    assert len(errors) == 1 and message in errors[0], result.output
    assert "Traceback" not in result.output
    assert ACCOUNT_KEY not in result.output


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("gs://KEYID:hunter2secret@bucket/x", "carries no credentials"),
        ("gs://bucket/x?access_token=hunter2secret", "carries no credentials"),
        ("gs:///x", "needs a bucket"),
        ("az://container/x?sv=2024&sig=hunter2secret", "carries no credentials"),
        ("az://devstoreaccount1:hunter2secret@container/x", "carries no credentials"),
        ("az:///x", "needs a bucket"),
    ],
)
def test_credentials_in_a_storage_url_are_refused_unshown(
    server: RunningServer, out: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(server, "export", "--out", out)
    assert result.exit_code == 2
    assert "--out" in result.output and expected in result.output
    assert "hunter2secret" not in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("module", "extra"), [("gcsfs", "gcs"), ("adlfs", "azure")])
def test_without_the_filesystem_the_error_names_the_extra(
    server: RunningServer, module: str, extra: str
) -> None:
    blocked = f"import sys; sys.modules[{module!r}] = None; from connector.cli import main; main()"
    out = "gs://bucket/x" if extra == "gcs" else "az://container/x"
    env = {**os.environ, "CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    done = subprocess.run(
        [sys.executable, "-c", blocked, "export", "--out", out],
        env=env, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert f"pip install 'table-data-connector[{extra}]'" in done.stderr + done.stdout


# -- killed mid-upload: the previous object stays


def simple_upload(head: bytes) -> bool:
    """gcsfs's upload of a file under 5 MiB: one POST carrying metadata and body."""
    return head.startswith(b"POST ") and b"uploadType=multipart" in head


def resumable_chunk(head: bytes) -> bool:
    """gcsfs's upload of a larger file: a session, then POSTs of its chunks (here one) to
    the session's URL."""
    return head.startswith(b"POST ") and b"upload_id=" in head


@pytest.fixture
def big_orders(server: RunningServer) -> tuple[RunningServer, str]:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"row {i} " + "x" * 200, "Amount": i} for i in range(3000)])
    return server, table_id


def export_killed_mid_upload(
    server: RunningServer, out: str, env: dict[str, str], proxy: StallingProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`connector export --out OUT` as a process reaching storage through `proxy` (`env`),
    SIGKILLed once the proxy holds its upload half sent."""
    for name, value in {**env, "CONNECTOR_API_KEY": server.api_key,
                        "CONNECTOR_BASE_URL": server.base_url}.items():
        monkeypatch.setenv(name, value)
    try:
        kill_when([sys.executable, "-m", "connector", "export", "--out", out], proxy.stalled.is_set)
    finally:
        proxy.close()


def test_a_process_killed_mid_upload_leaves_the_previous_object(
    big_orders: tuple[RunningServer, str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, table_id = big_orders
    assert run(server, "export", "--out", store.url("k")).exit_code == 0
    before = store.get("k/orders.parquet")
    assert 20_000 < len(before) < 5 * 2**20  # one request carries it whole

    server.insert_rows(table_id, [{"Name": "added later"}])
    port = int(store.endpoint.rsplit(":", 1)[1])
    stalls = simple_upload if isinstance(store, GCSBucket) else parquet_put  # Azure: Put Blob
    proxy = StallingProxy(port, body_bytes=len(before) // 2, stalls=stalls)
    through = store.env(f"http://127.0.0.1:{proxy.port}")
    export_killed_mid_upload(server, store.url("k"), through, proxy, monkeypatch)

    assert 0 < proxy.put_seen < len(before)  # the kill landed with half a body sent
    assert store.objects() == ["k/_connector_tables.json", "k/orders.parquet"]
    assert store.get("k/orders.parquet") == before  # the old object, byte for byte
    assert parquet_object(store, "k/orders.parquet").num_rows == 3000


def test_a_process_killed_mid_resumable_upload_leaves_the_previous_object(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gcsfs sends a file of 5 MiB or more in a resumable session, at a URL the server hands
    out: this test's own fake-gcs-server hands out the proxy's, so the chunk is held there."""
    proxy = StallingProxy(0, body_bytes=2**20, stalls=resumable_chunk)
    through = f"http://127.0.0.1:{proxy.port}"
    gcs = start_gcs_server(tmp_path, external_url=through)
    proxy.upstream_port = gcs.port
    try:
        create_bucket(gcs.endpoint, "resumable")
        bucket = GCSBucket(gcs.endpoint, "resumable")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint)
        table_id = server.create_table(SPEC)
        # incompressible text, so the file passes 5 MiB
        server.insert_rows(table_id, [{"Name": os.urandom(1500).hex()} for _ in range(2500)])
        result = run(server, "export", "--out", bucket.url("k"))
        assert result.exit_code == 0, result.output
        before = bucket.get("k/orders.parquet")
        assert len(before) >= 5 * 2**20

        server.insert_rows(table_id, [{"Name": "added later"}])
        export_killed_mid_upload(server, bucket.url("k"), bucket.env(through), proxy, monkeypatch)

        assert 0 < proxy.put_seen < len(before)
        assert bucket.objects() == ["k/_connector_tables.json", "k/orders.parquet"]
        assert bucket.get("k/orders.parquet") == before
    finally:
        proxy.close()
        gcs.stop()


def delta_commit(version: int) -> Any:
    """The PUT of a Delta table's commit `version` (its log entry, whatever the encoding)."""
    entry = f"{version:020d}".encode()

    def stalls(head: bytes) -> bool:
        return head.startswith(b"PUT ") and entry in head.partition(b"\r\n")[0]

    return stalls


def test_a_delta_export_killed_before_its_commit_leaves_the_previous_version(
    big_orders: tuple[RunningServer, str], azure: AzureContainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, table_id = big_orders
    out = azure.url("lake")
    assert run(server, "export", "--format", "delta", "--out", out).exit_code == 0
    uri = azure.url("lake/orders")
    first = DeltaTable(uri, storage_options=azure.delta_options())
    assert first.version() == 0
    files_before = azure.objects("lake/orders/")

    server.insert_rows(table_id, [{"Name": "added later"}])
    port = int(azure.endpoint.rsplit(":", 1)[1])
    proxy = StallingProxy(port, body_bytes=10, stalls=delta_commit(1))
    through = azure.env(f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    for name, value in through.items():
        monkeypatch.setenv(name, value)
    try:
        kill_when([sys.executable, "-m", "connector", "export", "--format", "delta", "--out", out],
                  proxy.stalled.is_set)
    finally:
        proxy.close()

    written = set(azure.objects("lake/orders/")) - set(files_before)
    assert written and all(k.endswith(".parquet") for k in written)  # data, never a commit
    table = DeltaTable(uri, storage_options=azure.delta_options())
    assert table.version() == 0
    assert table.to_pyarrow_table().num_rows == 3000
    for name, value in azure.env().items():
        monkeypatch.setenv(name, value)
    assert run(server, "export", "--format", "delta", "--out", out).exit_code == 0  # a rerun
    assert DeltaTable(uri, storage_options=azure.delta_options()).to_pyarrow_table().num_rows == 3001
    assert not written & set(azure.objects("lake/orders/"))  # the killed run's files are gone


def test_a_sas_connection_string_reaches_parquet_and_delta_and_is_never_shown(
    orders: tuple[RunningServer, str], azure: AzureContainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Azure's other standard credential: a shared access signature in the connection
    string, no account key anywhere (adlfs takes it; deltalake gets it as its sas_key)."""
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    sas = generate_account_sas(
        ACCOUNT, ACCOUNT_KEY, ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True,
                              create=True, update=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"BlobEndpoint={azure.endpoint}/{ACCOUNT};SharedAccessSignature={sas}")
    server, table_id = orders
    for args in (["--out", azure.url("pq")], ["--format", "delta", "--out", azure.url("lake")]):
        result = run(server, "export", *args)
        assert result.exit_code == 0, result.output
        assert sas not in result.output and sas.split("sig=")[1] not in result.output
    expected = on_server(server, table_id)
    assert held(parquet_object(azure, "pq/orders.parquet")) == expected
    delta = DeltaTable(azure.url("lake/orders"), storage_options=azure.delta_options())
    assert held(delta.to_pyarrow_table()) == expected

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       f"BlobEndpoint={azure.endpoint}/{ACCOUNT};SharedAccessSignature=sv=2024-01-01&sig=bad")
    refused = run(server, "export", "--format", "delta", "--out", azure.url("lake"))
    assert refused.exit_code == 1 and "sig=bad" not in refused.output


@pytest.mark.parametrize(
    ("connection", "expected"),
    [
        # the portal's account-key string: the default host, nothing more to say
        ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k==;EndpointSuffix=core.windows.net",
         {"account_name": "acct", "access_key": "k==", "endpoint": "https://acct.blob.core.windows.net"}),
        # a sovereign cloud's suffix
        ("AccountName=acct;AccountKey=k;EndpointSuffix=core.chinacloudapi.cn",
         {"account_name": "acct", "access_key": "k", "endpoint": "https://acct.blob.core.chinacloudapi.cn"}),
        # the portal's SAS string names no account: it is the endpoint's first label
        ("BlobEndpoint=https://acct.blob.core.windows.net/;QueueEndpoint=https://acct.queue.core.windows.net/;"
         "SharedAccessSignature=sv=2024&sig=s%3D",
         {"account_name": "acct", "endpoint": "https://acct.blob.core.windows.net/", "sas_key": "sv=2024&sig=s%3D"}),
        ("UseDevelopmentStorage=true", {"use_emulator": "true"}),
        ("", None),
    ],
)
def test_delta_takes_azures_connection_string_from_the_environment(
    connection: str, expected: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cases no emulator can show (real hosts); Azurite's account key and SAS strings
    are run above."""
    from connector.destinations.delta import storage_options

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection)
    bounded = {"timeout": "60s", "max_retries": "2", "retry_timeout": "180s"}  # every store's
    assert storage_options("az://container/t", 60) == {**bounded, **(expected or {})}
    assert storage_options("gs://bucket/t", 60) == bounded
