"""The Spark data source (`connector.spark`), in local mode (``local[2]``) against reference
servers over real HTTP: every value compared with the server's, the key ranges read in
parallel, a 429-producing server, a request budget, rows changing during the read, and the
errors of bad options.

One Spark session serves the module, on one xdist worker (`xdist_group`: a JVM takes seconds
to start; pytest is pinned below 9.2, whose node ids drop the group, pytest-dev/pytest-xdist#1386); the servers are started before it, because Spark's Python workers take their
environment (the keys) from the JVM's, fixed when it starts. Requests are observed
through `Recorder`, a forwarding proxy on 127.0.0.1 in front of a real server.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import combinations
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.datasource import CaseInsensitiveDict

from connector.api.ratelimit import PUBLISHED_SHARE
from connector.errors import ConfigError
from connector.spark import TableDataSource
from tests.fixtures.server import RunningServer

pytestmark = [
    pytest.mark.needs_server,  # the module's own servers
    pytest.mark.xdist_group("spark"),
    # pyspark 4 warns about pandas 3 when a session starts; nothing here uses pandas
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

#: The variable the rate-limited server's key is in (read through the api_key_env option).
LIMITED_KEY = "SPARK_TEST_LIMITED_KEY"

EVERY_TYPE = {
    "name": "Every Type",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Stage", "type": "choice", "options": ["New", "Won", "Lost", "On hold"]},
        {"name": "Amount", "type": "number"},
        {"name": "Paid", "type": "checkbox"},
        {"name": "Due", "type": "date"},
    ],
}
SPARK_TYPES = {
    "_id": T.StringType(),
    "_created_at": T.TimestampType(),
    "_updated_at": T.TimestampType(),
    "Name": T.StringType(),
    "Stage": T.StringType(),
    "Amount": T.DoubleType(),
    "Paid": T.BooleanType(),
    "Due": T.DateType(),
}


def _every_type_rows(n: int) -> list[dict[str, Any]]:
    names = ["Ada", "Zoë — ünïcode", "multi\nline", "  padded  ", "", "quote \"'"]
    rows = []
    for i in range(n):
        fields: dict[str, Any] = {"Name": f"{names[i % len(names)]} {i}"}
        if i % 7:
            fields["Stage"] = EVERY_TYPE["columns"][1]["options"][i % 4]
        if i % 5:
            fields["Amount"] = [0, -1.5, 2**53, 1e-9, 123456.789, -1e300][i % 6] + i
        if i % 3:
            fields["Paid"] = i % 2 == 0
        if i % 4:
            fields["Due"] = f"{1990 + i % 40}-{i % 12 + 1:02d}-{i % 28 + 1:02d}"
        rows.append(fields)
    return rows


def _plain(name: str, n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = {"name": name, "columns": [{"name": "N", "type": "number"}, {"name": "Label", "type": "text"}]}
    return spec, [{"N": i, "Label": f"row {i}"} for i in range(n)]


@dataclass
class Env:
    spark: SparkSession
    main: RunningServer
    limited: RunningServer
    tables: dict[str, str]  # name -> id, on `main`
    limited_table: str


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    main = RunningServer(tmp_path_factory.mktemp("spark-main"), {"fault_control": True}).start()
    limited = RunningServer(tmp_path_factory.mktemp("spark-limited"), {"rate_limit": 5, "rate_headers": "none", "fault_control": True}
    ).start()
    tables = {}
    try:
        tables["Every Type"] = main.create_table(EVERY_TYPE)
        main.insert_rows(tables["Every Type"], _every_type_rows(300))
        for name, rows in (("Big", 3000), ("Changing", 1500), ("Paced", 400)):
            spec, cells = _plain(name, rows)
            tables[name] = main.create_table(spec)
            main.insert_rows(tables[name], cells)
        # user columns that take the system names: `created_at` (ranges follow ids), and
        # `id` too (no key is free: one partition, read in the server's order)
        for name, taken in (("By Id", ["created_at"]), ("No Key", ["created_at", "id"])):
            columns = [{"name": c, "type": "text"} for c in taken] + [{"name": "N", "type": "number"}]
            tables[name] = main.create_table({"name": name, "columns": columns})
            main.insert_rows(tables[name], [{**{c: f"{c} {i}" for c in taken}, "N": i} for i in range(500)])
        spec, cells = _plain("Limited", 150)
        limited_table = limited.create_table(spec)
        limited.insert_rows(limited_table, cells)

        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("CONNECTOR_API_KEY", main.api_key)
            patch.setenv(LIMITED_KEY, limited.api_key)
            patch.delenv("CONNECTOR_BASE_URL", raising=False)
            patch.setenv("PYSPARK_PYTHON", sys.executable)  # the workers import `connector`
            patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
            spark = (
                SparkSession.builder.master("local[2]")
                .appName("test_spark")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                # a short-lived JVM: the client compiler and the serial collector start it
                # in about half the time on 2 shared cores (measured: session 11 s vs 25 s)
                .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
                .getOrCreate()
            )
            spark.dataSource.register(TableDataSource)
            try:
                yield Env(spark, main, limited, tables, limited_table)
            finally:
                spark.stop()
    finally:
        main.stop()
        limited.stop()


def _read(env: Env, table: str, *, base_url: str | None = None, **options: Any) -> DataFrame:
    reader = env.spark.read.format("tabledata").option("base_url", base_url or env.main.base_url)
    for name, value in {"table": table, **options}.items():
        reader = reader.option(name, str(value))
    return reader.load()


def _server_rows(server: RunningServer, table_id: str) -> list[dict[str, Any]]:
    """Every row as the API shows it, in created order (read on a quiet server; the limited
    one may still refuse the first request after a read spent its allowance: waited out)."""
    rows: list[dict[str, Any]] = []
    with server.client() as http:
        while True:
            params = {"limit": 1000, "offset": len(rows), "sort": "created_at", "order": "asc"}
            answer = http.get(f"/tables/{table_id}/rows", params=params)
            if answer.status_code == 429:
                time.sleep(float(answer.headers.get("Retry-After", "1")))
                continue
            page = answer.raise_for_status().json()
            rows += page["rows"]
            if len(page["rows"]) < page["limit"]:
                return rows


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _expected(row: dict[str, Any], types: dict[str, str], system: str = "_") -> dict[str, Any]:
    """A row of the API as the frame must hold it: numbers as floats, dates as dates, an
    empty cell (absent or null) as null, "" as "", timestamps in UTC."""
    out: dict[str, Any] = {
        f"{system}id": row["id"],
        f"{system}created_at": _timestamp(row["created_at"]),
        f"{system}updated_at": _timestamp(row["updated_at"]),
    }
    for name, kind in types.items():
        value = row["fields"].get(name)
        if value is None:
            out[name] = None
        elif kind == "number":
            out[name] = float(value)
        elif kind == "date":
            out[name] = dt.date.fromisoformat(value)
        else:
            out[name] = value
    return out


def _by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_id = {row["_id"]: row for row in rows}
    assert len(by_id) == len(rows), "an id was read twice"
    return by_id


def _types(spec: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["type"] for c in spec["columns"]}


# --- a forwarding proxy that records every request -----------------------------------------


@dataclass(frozen=True)
class Request:
    started: float
    ended: float
    path: str
    params: dict[str, str]
    status: int


class Recorder:
    """An HTTP proxy on 127.0.0.1 in front of a real server, recording every request (never
    its Authorization header). Threaded: Spark's executors send requests at once."""

    def __init__(self, upstream: RunningServer) -> None:
        self.requests: list[Request] = []
        lock = threading.Lock()
        http = httpx.Client(timeout=60.0)
        origin = upstream.base_url.removesuffix("/v1")
        recorded = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                started = time.monotonic()
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "accept")}
                answer = http.get(origin + self.path, headers=headers)
                parts = urlsplit(self.path)
                params = {k: v[0] for k, v in parse_qs(parts.query).items()}
                with lock:
                    recorded.append(Request(started, time.monotonic(), parts.path, params, answer.status_code))
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name in ("content-type", "retry-after") or "ratelimit" in name:
                        self.send_header(name, value)
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = http
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    def reads(self) -> dict[str | None, list[Request]]:
        """The page requests of the partitions (not the planning's one-row probes), by the
        range filter each partition sends (None: the first partition, which has none)."""
        groups: dict[str | None, list[Request]] = {}
        for request in self.requests:
            if request.path.endswith("/rows") and request.params.get("limit") != "1":
                groups.setdefault(request.params.get("filter"), []).append(request)
        return groups


@pytest.fixture
def recorder(env: Env) -> Iterator[Any]:
    proxies: list[Recorder] = []

    def start(upstream: RunningServer) -> Recorder:
        proxies.append(Recorder(upstream))
        return proxies[-1]

    yield start
    for proxy in proxies:
        proxy.close()


# --- values and types ---------------------------------------------------------------------


def test_every_column_type_maps_to_its_spark_type(env: Env) -> None:
    frame = _read(env, "every type")  # resolved as every command resolves a table name
    assert {f.name: f.dataType for f in frame.schema.fields} == SPARK_TYPES
    assert [f.name for f in frame.schema.fields] == list(SPARK_TYPES)


def test_every_value_equals_the_servers_row(env: Env) -> None:
    frame = _read(env, env.tables["Every Type"], partitions=3)
    got = _by_id(frame.toArrow().to_pylist())
    server = _server_rows(env.main, env.tables["Every Type"])
    assert len(got) == len(server) == 300
    types = _types(EVERY_TYPE)
    for row in server:
        assert got[row["id"]] == _expected(row, types), row
    # the values hold every kind of cell: nulls, empty text, unicode, huge and tiny numbers
    assert {r["Paid"] for r in got.values()} == {True, False, None}
    assert None in {r["Stage"] for r in got.values()} and None in {r["Due"] for r in got.values()}


@pytest.mark.parametrize(
    ("table", "taken", "partitions"), [("By Id", ["created_at"], 3), ("No Key", ["created_at", "id"], 1)]
)
def test_user_columns_named_like_the_system_fields_survive(
    env: Env, table: str, taken: list[str], partitions: int
) -> None:
    frame = _read(env, table, partitions=3)
    rows = frame.withColumn("part", F.spark_partition_id()).toArrow().to_pylist()
    assert len({r["part"] for r in rows}) == partitions  # ranges by id; no free key: one
    got = _by_id([{k: v for k, v in r.items() if k != "part"} for r in rows])
    server = _server_rows(env.main, env.tables[table])
    types = {**{c: "text" for c in taken}, "N": "number"}
    assert {row["id"]: _expected(row, types) for row in server} == got


# --- partitions ---------------------------------------------------------------------------


def test_key_ranges_are_read_in_parallel_each_row_once(env: Env, recorder: Any) -> None:
    proxy = recorder(env.main)
    env.main.set_faults(latency_ms=60)  # long enough that two tasks' reads surely overlap
    try:
        frame = _read(env, "Big", base_url=proxy.base_url, partitions=4, page_size=50)
        rows = frame.select("_id", F.spark_partition_id().alias("part")).collect()
    finally:
        env.main.set_faults(latency_ms=0)
    order = [row["id"] for row in _server_rows(env.main, env.tables["Big"])]
    assert sorted(r["_id"] for r in rows) == sorted(order)  # every row, none twice
    position = {row_id: i for i, row_id in enumerate(order)}
    spans = {}
    for part in sorted({r["part"] for r in rows}):
        at = sorted(position[r["_id"]] for r in rows if r["part"] == part)
        assert at == list(range(at[0], at[-1] + 1)), f"partition {part} is not one range"
        assert abs(len(at) - 750) <= 1, (part, len(at))
        spans[part] = (at[0], at[-1])
    assert len(spans) == 4
    assert [spans[p] for p in sorted(spans)] == sorted(spans.values())  # in order, adjacent

    reads = proxy.reads()
    assert len(reads) == 4  # one filter per range: none, then `created_at > boundary`
    for filter, requests in reads.items():
        assert filter is None or '"created_at":{"gt":' in filter
        assert len(requests) >= 750 // 50, (filter, len(requests))  # each reads its own range
    windows = sorted((min(r.started for r in rs), max(r.ended for r in rs)) for rs in reads.values())
    overlapping = any(a[1] > b[0] for a, b in combinations(windows, 2))  # a starts first
    assert overlapping, f"no two ranges were read at the same time: {windows}"


def test_a_server_refusing_system_filters_is_read_as_one_partition(env: Env) -> None:
    env.main.set_faults(refuse_system_filters=True)
    try:
        frame = _read(env, "Big", partitions=4)
        rows = frame.select("_id", F.spark_partition_id().alias("part")).collect()
    finally:
        env.main.set_faults(refuse_system_filters=False)
    assert {r["part"] for r in rows} == {0}
    assert sorted(r["_id"] for r in rows) == sorted(r["id"] for r in _server_rows(env.main, env.tables["Big"]))


def test_rows_created_and_deleted_during_the_read(env: Env) -> None:
    table = env.tables["Changing"]
    before = {row["id"] for row in _server_rows(env.main, table)}
    env.main.set_faults(delete_on_read=2, insert_on_read=1, seed=7)
    try:
        got = _by_id(_read(env, "Changing", partitions=3, page_size=50).toArrow().to_pylist())
    finally:
        env.main.set_faults(delete_on_read=0, insert_on_read=0)
    after = {row["id"]: row for row in _server_rows(env.main, table)}
    assert len(before - set(after)) > 0 and len(set(after) - before) > 0  # the table did change
    throughout = before & set(after)
    assert throughout <= set(got)  # no row present throughout the read is missed
    # rows still there hold the server's values (others were deleted after they were read)
    types = {"N": "number", "Label": "text"}
    for row_id in set(got) & set(after):
        assert got[row_id] == _expected(after[row_id], types)


# --- the request budget -------------------------------------------------------------------


def test_a_rate_limited_server_still_yields_every_row(env: Env, recorder: Any) -> None:
    proxy = recorder(env.limited)
    frame = _read(
        env, "Limited", base_url=proxy.base_url, api_key_env=LIMITED_KEY, partitions=2, page_size=25
    )
    got = _by_id(frame.toArrow().to_pylist())
    server = _server_rows(env.limited, env.limited_table)
    assert {r["id"]: _expected(r, {"N": "number", "Label": "text"}) for r in server} == got
    assert any(r.status == 429 for r in proxy.requests), "the server never said 429"


def test_max_rps_paces_every_partition_to_its_share(env: Env, recorder: Any) -> None:
    proxy = recorder(env.main)
    max_rps, partitions = 12.0, 2
    frame = _read(env, "Paced", base_url=proxy.base_url, partitions=partitions, page_size=50, max_rps=max_rps)
    assert frame.count() == 400
    reads = proxy.reads()
    assert len(reads) == partitions
    share = max_rps / partitions
    for requests in reads.values():
        starts = sorted(r.started for r in requests)
        assert len(starts) >= 4
        # n requests at `share` a second take (n - 1) / share seconds at least
        assert starts[-1] - starts[0] >= 0.9 * (len(starts) - 1) / share, starts
    starts = sorted(r.started for requests in reads.values() for r in requests)
    for i, start in enumerate(starts):  # in any second, each partition starts `share` (+1)
        assert sum(start <= s < start + 1.0 for s in starts[i:]) <= max_rps + partitions


def test_a_published_limit_is_split_between_the_partitions(env: Env, recorder: Any) -> None:
    env.limited.set_faults(rate_headers="ietf")  # 5 requests a second, said in every answer
    try:
        time.sleep(1.2)  # what earlier tests spent of the key's bucket is back
        proxy = recorder(env.limited)
        partitions = 2
        frame = _read(env, "Limited", base_url=proxy.base_url, api_key_env=LIMITED_KEY,
                      partitions=partitions, page_size=25)
        assert frame.count() == 150
    finally:
        env.limited.set_faults(rate_headers="none")
    assert [r.status for r in proxy.requests if r.status == 429] == []  # the partitions kept to it
    reads = proxy.reads()
    assert len(reads) == partitions
    share = PUBLISHED_SHARE * 5 / partitions  # no max_rps: the budget is what the server says
    for requests in reads.values():
        starts = sorted(r.started for r in requests)
        assert starts[-1] - starts[0] >= 0.9 * (len(starts) - 1) / share, starts


# --- bad options --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"table": "Big", "max_rps": "fast"}, "option max_rps must be a number of requests per second above 0, like 10, not 'fast'"),
        ({"table": "Big", "max_rps": "0"}, "option max_rps must be a number of requests per second above 0"),
        ({"table": "Big", "max_rps": "inf"}, "option max_rps must be a number of requests per second above 0"),
        ({"table": "Big", "partitions": "-2"}, "option partitions must be a whole number of at least 1, not '-2'"),
        ({"table": "Big", "partitions": "2.5"}, "option partitions must be a whole number of at least 1, not '2.5'"),
        ({"table": "Big", "page_size": "5000"}, "option page_size must be a whole number from 2 to 1000"),
        ({"table": "Big", "max_rsp": "3"}, "unknown option 'max_rsp' of the tabledata source; did you mean 'max_rps'?"),
        ({"table": " "}, 'the tabledata source needs a table: .option("table", NAME_OR_ID)'),
        ({"table": "Big", "base_url": "127.0.0.1:8000"}, "base URL must look like https://host/v1: it has no scheme"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    env: Env, options: dict[str, str], message: str
) -> None:
    # The class Spark instantiates, in this process (no JVM round trip per case); the
    # messages reach Spark's error as they are, as the tests below show through Spark.
    source = TableDataSource(CaseInsensitiveDict({"base_url": env.main.base_url, **options}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        source.schema()


def _refused(reader: Any) -> str:
    with pytest.raises(PySparkException) as raised:
        reader.load().collect()
    return str(raised.value)


def test_an_unknown_table_is_refused_through_spark_with_close_names(env: Env) -> None:
    said = _refused(env.spark.read.format("tabledata").option("base_url", env.main.base_url).option("table", "Every Typ"))
    assert "no table named 'Every Typ'; did you mean 'Every Type'?" in said


def test_a_missing_key_names_its_variable(env: Env) -> None:
    reader = (
        env.spark.read.format("tabledata").option("base_url", env.main.base_url)
        .option("table", "Big").option("api_key_env", "SPARK_TEST_UNSET")
    )
    assert "no API key: set SPARK_TEST_UNSET in the environment" in _refused(reader)


def test_the_key_is_never_an_option_and_never_shown(env: Env) -> None:
    reader = env.spark.read.format("tabledata").option("table", "Big").option("api_key", env.main.api_key)
    said = _refused(reader)
    assert "the API key is never an option" in said
    assert env.main.api_key not in said


def test_a_column_the_table_lacks_in_a_given_schema_is_named(env: Env) -> None:
    reader = (
        env.spark.read.format("tabledata").option("base_url", env.main.base_url)
        .option("table", "Every Type").schema("_id string, Nme string")
    )
    assert "table 'Every Type' has no column 'Nme'; did you mean 'Name'?" in _refused(reader)


def test_a_given_schema_selects_columns(env: Env) -> None:
    frame = (
        env.spark.read.format("tabledata").option("base_url", env.main.base_url)
        .option("table", "Every Type").schema("_id string, Amount double").load()
    )
    got = {r["_id"]: r["Amount"] for r in frame.toArrow().to_pylist()}
    server = _server_rows(env.main, env.tables["Every Type"])
    assert got == {r["id"]: _expected(r, {"Amount": "number"})["Amount"] for r in server}
