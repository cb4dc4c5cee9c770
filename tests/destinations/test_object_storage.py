"""`export --out s3://…`: tables as whole objects on a real S3-compatible server (moto).

Read back with pyarrow and DuckDB through s3fs, never through our code. An object appears
whole or not at all: a process killed while its upload is half sent leaves the old object.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.destinations.storage import PART_BYTES, ObjectStore
from connector.errors import ConfigError
from connector.locations import check_location
from tests.destinations.samples import kill_when
from tests.destinations.test_cli import EXPECTED, FIELDS, SPEC
from tests.fixtures.s3 import S3Bucket
from tests.fixtures.server import ROOT, RunningServer


@pytest.fixture
def orders(server: RunningServer) -> tuple[RunningServer, str]:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, FIELDS)
    return server, table_id


def run(server: RunningServer, *args: str) -> Result:
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, list(args), env=env)


def s3fs_filesystem() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def by_name(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    columns = ["Status", "Amount", "Paid", "Due", "Order Date"]
    return {r["Name"]: tuple(r[c] for c in columns) for r in rows}


def test_export_to_s3_writes_one_object_per_table_with_types_intact(
    orders: tuple[RunningServer, str], s3: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = orders
    monkeypatch.chdir(tmp_path)
    result = run(server, "export", "--out", s3.url("lake/daily/"))
    assert result.exit_code == 0, result.output
    assert f"-> s3://{s3.name}/lake/daily/orders.parquet" in result.output
    assert s3.objects() == ["lake/daily/_connector_tables.json", "lake/daily/orders.parquet"]
    assert list(tmp_path.iterdir()) == []  # no local folder named "s3:"

    with s3fs_filesystem().open(f"{s3.name}/lake/daily/orders.parquet", "rb") as f:
        table = pq.read_table(f)
    status = table.column("Status").combine_chunks()
    assert pa.types.is_dictionary(status.type)
    assert status.dictionary.to_pylist() == ["open", "on hold", "closed"]  # every option
    assert str(table.schema.field("_updated_at").type) == "timestamp[us, tz=UTC]"
    assert by_name(table.to_pylist()) == EXPECTED

    con = duckdb.connect()
    con.register_filesystem(s3fs_filesystem())
    rows = con.sql(
        f"SELECT Name, Status, Amount, Paid, Due, \"Order Date\" FROM "
        f"read_parquet('s3://{s3.name}/lake/daily/orders.parquet')"
    ).fetchall()
    assert {r[0]: r[1:] for r in rows} == EXPECTED
    assert con.sql(
        f"SELECT typeof(Due), typeof(Paid) FROM read_parquet('s3://{s3.name}/lake/daily/*.parquet') LIMIT 1"
    ).fetchall() == [("DATE", "BOOLEAN")]


def test_export_csv_to_s3_and_a_second_export_replaces_the_object(
    orders: tuple[RunningServer, str], s3: S3Bucket
) -> None:
    server, table_id = orders
    assert run(server, "export", "--format", "csv", "--out", s3.url("csv")).exit_code == 0
    first = pacsv.read_csv(s3fs_filesystem().open(f"{s3.name}/csv/orders.csv", "rb"))
    assert first.num_rows == 3

    server.insert_rows(table_id, [{"Name": "Zed", "Due": "2030-01-02"}])
    result = run(server, "export", "--format", "csv", "--out", s3.url("csv"))
    assert result.exit_code == 0, result.output
    assert s3.objects() == ["csv/_connector_tables.json", "csv/orders.csv"]  # no temp object
    second = pacsv.read_csv(s3fs_filesystem().open(f"{s3.name}/csv/orders.csv", "rb"))
    due = dict(zip(second.column("Name").to_pylist(), second.column("Due").to_pylist(), strict=True))
    assert len(due) == 4 and due["Zed"] == date(2030, 1, 2)


def test_a_missing_bucket_fails_before_reading_with_one_line(
    orders: tuple[RunningServer, str], s3: S3Bucket
) -> None:
    server, _ = orders
    result = run(server, "export", "--out", "s3://no-such-bucket-here/x")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if "no-such-bucket-here" in line]
    assert len(errors) == 1 and "no such bucket" in errors[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("ftp://host/dir", "unknown storage scheme 'ftp'"),
        ("s3://AKIAEXAMPLE:hunter2secret@bucket/x", "carries no credentials"),
        ("s3://bucket/x?secret=hunter2secret", "carries no credentials"),
        ("s3:///x", "needs a bucket"),
    ],
)
def test_a_bad_storage_url_is_a_usage_error_naming_out(
    server: RunningServer, out: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(server, "export", "--out", out)
    assert result.exit_code == 2
    assert "--out" in result.output and expected in result.output
    assert "hunter2secret" not in result.output
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError):
        check_location(out, "--out")


def test_without_s3fs_the_error_names_the_extra(orders: tuple[RunningServer, str], s3: S3Bucket) -> None:
    server, _ = orders
    blocked = "import sys; sys.modules['s3fs'] = None; from connector.cli import main; main()"
    env = {**_environ(), "CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    done = subprocess.run(
        [sys.executable, "-c", blocked, "export", "--out", s3.url("x")],
        env=env, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'table-data-connector[s3]'" in done.stderr + done.stdout
    assert s3.objects() == []


def test_a_large_object_goes_up_in_parts_and_arrives_whole(s3: S3Bucket, tmp_path: Path) -> None:
    """Past `PART_BYTES` a file is uploaded a part at a time (memory holds a part, not the
    file); S3 names a multipart object's ETag ``"<digest>-<parts>"``."""
    data = random.Random(7).randbytes(2 * PART_BYTES + 12_345)
    local = tmp_path / "big.bin"
    local.write_bytes(data)
    store = ObjectStore(s3.url("big"))
    try:
        store.put(local, "big.bin")
    finally:
        store.close()
    assert s3.get("big/big.bin") == data
    head = s3.server.client().head_object(Bucket=s3.name, Key="big/big.bin")
    assert head["ETag"].strip('"').endswith("-3")


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


# -- killed mid-upload: the previous object stays


def parquet_put(head: bytes) -> bool:
    """S3's (and Azure's) upload of a Parquet object: one PUT to its key."""
    return head.startswith(b"PUT ") and b".parquet" in head


class StallingProxy:
    """A TCP proxy to a storage server that forwards the headers of the first request
    `stalls(head)` picks (by default a Parquet PUT) and the first `body_bytes` of its body,
    then holds the rest: the upload is provably mid-way. `upstream_port` may be set after
    the proxy is made, before its first connection."""

    def __init__(
        self, upstream_port: int, body_bytes: int, stalls: Callable[[bytes], bool] = parquet_put
    ) -> None:
        self.upstream_port = upstream_port
        self.body_bytes = body_bytes
        self.stalls = stalls
        self.stalled = threading.Event()
        self.put_seen = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        body_sent: int | None = None  # bytes of a PUT body forwarded on this connection
        try:
            while data := source.recv(65536):
                if requests and body_sent is None and self.stalls(data):
                    head, _, rest = data.partition(b"\r\n\r\n")
                    sink.sendall(head + b"\r\n\r\n")
                    body_sent, data = 0, rest
                if requests and body_sent is not None:
                    room = self.body_bytes - body_sent
                    sink.sendall(data[:room])
                    body_sent += min(room, len(data))
                    self.put_seen = body_sent
                    if body_sent >= self.body_bytes:
                        self.stalled.set()
                        return  # hold the rest: the body never completes
                    continue
                sink.sendall(data)
        except OSError:
            return

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def big_orders(server: RunningServer) -> tuple[RunningServer, str]:
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, [{"Name": f"row {i} " + "x" * 200, "Amount": i} for i in range(3000)])
    return server, table_id


def test_a_process_killed_mid_upload_leaves_the_previous_object(
    big_orders: tuple[RunningServer, str], s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, table_id = big_orders
    assert run(server, "export", "--out", s3.url("k")).exit_code == 0
    before = s3.get("k/orders.parquet")
    assert len(before) > 20_000

    server.insert_rows(table_id, [{"Name": "added later"}])
    port = int(s3.server.endpoint.rsplit(":", 1)[1])
    proxy = StallingProxy(port, body_bytes=len(before) // 2)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    try:
        kill_when([sys.executable, "-m", "connector", "export", "--out", s3.url("k")],
                  proxy.stalled.is_set)
    finally:
        proxy.close()
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.server.endpoint)

    assert 0 < proxy.put_seen < len(before)  # the kill landed with half a body sent
    assert s3.objects() == ["k/_connector_tables.json", "k/orders.parquet"]
    assert s3.get("k/orders.parquet") == before  # the old object, byte for byte
    with s3fs_filesystem().open(f"{s3.name}/k/orders.parquet", "rb") as f:
        assert pq.read_table(f).num_rows == 3000
