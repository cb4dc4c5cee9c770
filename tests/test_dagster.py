"""connector.dagster: a job file as Dagster assets, materialised against the reference server.

In-process (`dagster.materialize`) and once with the multiprocess executor on a temporary
DagsterInstance, so the tables sync in parallel processes. Destinations are read back
independently (pyarrow, SQLAlchemy) and compared with what the server's storage holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from connector.dagster import assets_from_job, definitions_from_job
from connector.demo import DEMO_DATA
from connector.errors import ConfigError
from tests.fixtures.server import RunningServer, ServerFactory

ROOT = Path(__file__).resolve().parents[1]
#: The job file the multiprocess executor's step processes load (they rebuild the job).
JOB_ENV = "CONNECTOR_TEST_DAGSTER_JOB"


@pytest.fixture
def demo(server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> RunningServer:
    running = server_factory(demo=True)
    monkeypatch.setenv("CONNECTOR_BASE_URL", running.base_url)
    monkeypatch.setenv("CONNECTOR_API_KEY", running.api_key)
    return running


def _job(directory: Path, body: str) -> Path:
    shutil.copy(ROOT / "connector" / DEMO_DATA / "demo-products.csv", directory)
    path = directory / "crm.toml"
    path.write_text('[source]\napi_key_env = "CONNECTOR_API_KEY"\n\n' + body)
    return path


def _table_ids(server: RunningServer) -> dict[str, str]:
    with server.client() as http:
        return {t["name"]: t["id"] for t in http.get("/tables").json()["tables"]}


def _materialization(result: dg.ExecuteInProcessResult, *key: str) -> dict[str, Any]:
    (event,) = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(list(key))
    ]
    materialization = event.materialization
    return {k: v.value for k, v in materialization.metadata.items()}


def test_one_asset_per_table_pushes_upstream_and_the_summary_as_metadata(
    demo: RunningServer, tmp_path: Path
) -> None:
    job = _job(
        tmp_path,
        """
[tables]
include = ["Products", "Tickets"]

[sync]
incremental = true
state_dir = "state"

[[destination]]
parquet = "parquet"

[[destination]]
url = "sqlite:///crm.db"

[[push]]
file = "demo-products.csv"
table = "Products"
key = "Name"
mode = "upsert"
""",
    )
    defs = definitions_from_job(job, cron="15 2 * * *")
    assets = assets_from_job(job)
    graph = {
        a.key.to_user_string(): {d.to_user_string() for d in a.dependency_keys} for a in assets
    }
    # The push is upstream of the table it writes to, not of the others.
    assert graph == {
        "crm/push_demo_products": set(),
        "crm/Products": {"crm/push_demo_products"},
        "crm/Tickets": set(),
    }
    assert defs.resolve_schedule_def("crm_schedule").cron_schedule == "15 2 * * *"

    result = dg.materialize(assets)

    assert result.success
    ids = _table_ids(demo)
    push = _materialization(result, "crm", "push_demo_products")
    assert (push["status"], push["created"], push["updated"]) == ("ok", 2, 3)
    products = pq.read_table(tmp_path / "parquet" / "Products.parquet").to_pandas()
    # Products was synced after the push: the pushed rows are in it.
    assert {"Turbo Encabulator", "Widget A1"} <= set(products["Name"])
    assert len(products) == demo.row_count(ids["Products"]) == 42
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'crm.db'}")
    with engine.connect() as conn:
        tickets = conn.execute(sa.text('SELECT count(*) FROM "Tickets"')).scalar_one()
    engine.dispose()
    assert tickets == demo.row_count(ids["Tickets"])
    meta = _materialization(result, "crm", "Tickets")
    assert (meta["status"], meta["read"], meta["rows_written"]) == ("ok", "full", tickets)
    assert meta["seconds"] > 0
    # One state file and lock per asset: the tables never share the job's lock.
    assert sorted(p.name for p in (tmp_path / "state").glob("*.state.json")) == [
        "crm.Products.state.json",
        "crm.Tickets.state.json",
        "crm.push_demo_products.state.json",
    ]

    # Materialised again: the job's incremental sync, per table.
    again = dg.materialize(assets, selection=["crm/Tickets"])
    assert again.success
    assert _materialization(again, "crm", "Tickets")["status"] == "unchanged"


def test_tables_from_the_server_when_the_job_has_no_include_list(
    demo: RunningServer, tmp_path: Path
) -> None:
    job = _job(
        tmp_path,
        """
[tables]
exclude = ["Orders", "customers"]

[[destination]]
parquet = "out"
""",
    )
    keys = {a.key.to_user_string() for a in assets_from_job(job)}
    # The listing decides, and `exclude` is resolved as a sync resolves it (id, name, any case).
    assert keys == {"crm/Products", "crm/Tickets"}


def test_a_failed_table_is_a_failed_asset_and_the_others_materialise(
    demo: RunningServer, tmp_path: Path
) -> None:
    job = _job(
        tmp_path,
        """
[tables]
include = ["Products", "Orders", "Tickets"]

[[destination]]
parquet = "parquet"
""",
    )
    # Orders cannot be written: a directory stands where its file goes.
    (tmp_path / "parquet" / "Orders.parquet" / "taken").mkdir(parents=True)
    # Tickets cannot be found: the key may read Products and Orders only.
    os.environ["CONNECTOR_API_KEY"] = demo.create_key(tables=["Products", "Orders"])

    result = dg.materialize(assets_from_job(job), raise_on_error=False)

    assert not result.success
    failed = {e.step_key: e for e in result.get_step_failure_events()}
    assert set(failed) == {"crm__Orders", "crm__Tickets"}
    orders = failed["crm__Orders"].step_failure_data.user_failure_data
    tickets = failed["crm__Tickets"].step_failure_data.user_failure_data
    assert orders is not None and tickets is not None
    assert orders.description.startswith("Orders: failed: ")
    assert tickets.description.endswith(
        "crm.toml: tables.include: no table named 'Tickets'; "
        "the tables this key can read are 'Products', 'Orders'"
    )
    products = demo.row_count(_table_ids(demo)["Products"])
    assert _materialization(result, "crm", "Products")["rows_written"] == products
    assert (tmp_path / "parquet" / "Products.parquet").is_file()


def test_the_same_asset_twice_at_once_fails_on_its_lock_and_writes_nothing(
    demo: RunningServer, tmp_path: Path
) -> None:
    job = _job(
        tmp_path,
        """
[tables]
include = ["Products"]

[[destination]]
parquet = "parquet"
""",
    )
    from connector.jobs.lock import job_lock

    with job_lock(tmp_path / "crm.Products.lock"):  # another run of this asset holds it
        result = dg.materialize(assets_from_job(job), raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    data = failure.step_failure_data.user_failure_data
    assert data is not None and "already running" in data.description
    assert not (tmp_path / "parquet").exists()


def multiprocess_job() -> dg.JobDefinition:
    """Rebuilt in each step's process by the multiprocess executor (`dg.reconstructable`)."""
    return definitions_from_job(os.environ[JOB_ENV]).resolve_job_def("crm")


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield instance


@pytest.mark.long
def test_the_multiprocess_executor_syncs_tables_in_parallel_processes(
    server_factory: ServerFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    instance: dg.DagsterInstance,
) -> None:
    # Each table takes seconds (pages of 50, one request at a time, 0.1 s each), far longer
    # than the spread of the steps' process start-ups: run in parallel, they overlap.
    server = server_factory(demo=True, latency_ms=100)
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    job = _job(
        tmp_path,
        """page_size = 50
max_concurrency = 1

[tables]
include = ["Customers", "Orders"]

[[destination]]
parquet = "parquet"
""",
    )
    monkeypatch.setenv(JOB_ENV, str(job))

    with dg.execute_job(
        dg.reconstructable(multiprocess_job),
        instance=instance,
        run_config={"execution": {"config": {"multiprocess": {"max_concurrent": 2}}}},
    ) as result:
        assert result.success
        steps = _step_spans(instance, result.run_id)

    assert set(steps) == {"crm__Customers", "crm__Orders"}
    (a_pid, a_start, a_end), (b_pid, b_start, b_end) = steps.values()
    assert a_pid != b_pid != os.getpid()  # each table in a process of its own...
    assert a_start < b_end and b_start < a_end  # ...at the same time
    ids = _table_ids(server)
    for name in ("Customers", "Orders"):
        written = pq.read_table(tmp_path / "parquet" / f"{name}.parquet")
        assert written.num_rows == server.row_count(ids[name])


def _step_spans(instance: dg.DagsterInstance, run_id: str) -> dict[str, tuple[int, float, float]]:
    """Each step's process and its start and end times, from the run's event log."""
    spans: dict[str, list[Any]] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or event.step_key is None:
            continue
        span = spans.setdefault(event.step_key, [None, None, None])
        if event.event_type == dg.DagsterEventType.STEP_START:
            span[0], span[1] = event.pid, entry.timestamp
        elif event.event_type == dg.DagsterEventType.STEP_SUCCESS:
            span[2] = entry.timestamp
    return {k: (v[0], v[1], v[2]) for k, v in spans.items()}


@pytest.mark.slow
def test_without_dagster_the_import_names_the_extra() -> None:
    """A missing extra is one line naming it (here dagster is made unimportable)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['dagster'] = None; import connector.dagster",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "connector.errors.MissingExtra: connector.dagster (Dagster assets) needs an optional "
        "dependency: pip install 'table-data-connector[dagster]'"
    )


def test_without_an_include_list_loading_needs_the_key_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONNECTOR_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("CONNECTOR_API_KEY", raising=False)
    job = _job(tmp_path, '[[destination]]\nparquet = "out"\n')
    with pytest.raises(ConfigError) as caught:
        assets_from_job(job)
    assert str(caught.value) == (
        f"{job}: source.api_key_env: the environment variable CONNECTOR_API_KEY is not set "
        "(it must hold the API key) (the tables are listed from the server)"
    )


def test_the_example_runs_as_the_readme_shows_from_a_fresh_copy_and_any_folder(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """The issue: the example's job was looked up from the working directory and pointed at a
    placeholder server. Now: the demo server's URL and key in the environment, nothing else."""
    server = server_factory(demo=True)
    copy = tmp_path / "clone" / "examples"
    shutil.copytree(ROOT / "examples", copy, ignore=shutil.ignore_patterns("out"))
    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    script = (
        "import runpy, sys; defs = runpy.run_path(sys.argv[1])['defs']; "
        "print(defs.resolve_job_def('dagster_example').execute_in_process().success)"
    )
    env = {k: v for k, v in os.environ.items() if k != "CONNECTOR_JOB"}
    env |= {"CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key}

    done = subprocess.run(
        [sys.executable, "-c", script, str(copy / "dagster_defs.py")], cwd=elsewhere, env=env,
        capture_output=True, text=True, timeout=300,
    )

    assert done.returncode == 0 and done.stdout.strip().endswith("True"), done.stderr[-3000:]
    ids = _table_ids(server)
    for name in ("Customers", "Orders", "Products", "Tickets"):
        parquet = pq.read_table(copy / "out" / "parquet" / f"{name}.parquet")
        assert parquet.num_rows == server.row_count(ids[name])
    engine = sa.create_engine(f"sqlite:///{copy / 'out' / 'warehouse.db'}")
    try:
        with engine.connect() as conn:
            held = conn.execute(sa.text('SELECT count(*) FROM "Orders"')).scalar_one()
    finally:
        engine.dispose()
    assert held == server.row_count(ids["Orders"])
    assert not list(elsewhere.iterdir())  # nothing landed in the working directory


def test_one_writer_destinations_put_a_jobs_tables_in_one_pool(tmp_path: Path) -> None:
    lake = _job(tmp_path, '[tables]\ninclude = ["Orders", "Tickets"]\n[[destination]]\nparquet = "pq"\n')
    assert {a.op.pool for a in assets_from_job(lake)} == {None}  # Parquet takes tables at once
    database = tmp_path / "db.toml"
    database.write_text(
        '[source]\napi_key_env = "CONNECTOR_API_KEY"\n[tables]\ninclude = ["Orders", "Tickets"]\n'
        '[[destination]]\nparquet = "pq"\n[[destination]]\nurl = "sqlite:///wh.db"\n'
    )
    assert {a.op.pool for a in assets_from_job(database)} == {f"connector:sqlite:///{tmp_path / 'wh.db'}"}


def test_a_bad_base_url_in_the_job_file_is_named_where_it_was_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue: 'fix CONNECTOR_BASE_URL (or --base-url)' although the URL came from the file."""
    monkeypatch.setenv("CONNECTOR_API_KEY", "some-key")
    job = tmp_path / "job.toml"
    job.write_text(
        '[source]\nbase_url = "http://no-such-host.invalid/v1"\napi_key_env = "CONNECTOR_API_KEY"\n'
        '[tables]\ninclude = ["Orders"]\n[[destination]]\nparquet = "pq"\n'
    )
    defs = definitions_from_job(job)
    result = defs.resolve_job_def("job").execute_in_process(raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = str(failure.step_failure_data.error.message)
    assert f"source.base_url in {job}" in message
    assert "CONNECTOR_BASE_URL" not in message
