"""The Scheduling page (docs/scheduling.md), run as written: its cron line, systemd units, Airflow
command and Dagster example, read from the page itself so text and test cannot drift.

Each runs `configs/nightly-warehouse.toml` against a reference server with the demo
workspace and into a real PostgreSQL. What a test changes is only where things are: the
roots `/srv/connector`, `/etc/connector`, `/var/log/connector` and `/var/lib/connector` move
into a temporary directory, and the copied job file's `base_url` and destination URL point at
the servers the test started. The results are checked against the server's rows, read back
over HTTP.
"""

from __future__ import annotations

import ast
import configparser
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from connector.errors import ExitCode
from tests.fixtures.server import RunningServer, ServerFactory

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "scheduling.md").read_text()
JOB = "configs/nightly-warehouse.toml"
ROOTS = ("/srv/connector", "/etc/connector", "/var/log/connector", "/var/lib/connector")
#: The values of the job file that name the production hosts (replaced in the copy).
BASE_URL = 'base_url = "https://tables.example.com/v1"'
DESTINATION = 'url = "postgresql+psycopg://etl@warehouse.internal:5432/analytics"'


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE, flags=re.MULTILINE | re.DOTALL)


@dataclass
class Deployment:
    """A host laid out as the page's examples expect, under `base`."""

    base: Path
    server: RunningServer
    database: str  # SQLAlchemy URL of the warehouse

    def here(self, text: str) -> str:
        """`text` with the page's absolute roots moved under `base`."""
        for root in ROOTS:
            text = text.replace(root, f"{self.base}{root}")
        return text

    def environment(self, **extra: str) -> dict[str, str]:
        """A scheduler's bare environment: no variables of ours, unless given."""
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.base), "LANG": "C.UTF-8", **extra}

    def summary(self, lines: str) -> dict[str, Any]:
        """The run's JSON summary among the output lines (events have an "event" key)."""
        parsed = [json.loads(line) for line in lines.splitlines() if line.startswith("{")]
        (found,) = [d for d in parsed if "event" not in d]
        return dict(found)

    def check_warehouse(self) -> None:
        """Every table the job takes, in PostgreSQL, as the server holds it (Orders filtered
        to the shipped ones, as the job's [tables.filter] says)."""
        expected = {name: len(rows) for name, rows in _server_rows(self.server).items()}
        expected["Orders"] = sum(
            r["fields"]["Status"] == "Shipped" for r in _server_rows(self.server)["Orders"]
        )
        engine = sa.create_engine(self.database)
        try:
            with engine.connect() as conn:
                held = {
                    t: conn.execute(sa.text(f'SELECT count(*) FROM "{t}"')).scalar_one()
                    for t in sa.inspect(conn).get_table_names()
                }
        finally:
            engine.dispose()
        assert held == {**expected, "_connector_tables": len(expected)}  # and the names record
        assert 0 < expected["Orders"] < 2000


def _server_rows(server: RunningServer) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    with server.client() as http:
        for table in http.get("/tables").json()["tables"]:
            rows: list[dict[str, Any]] = []
            while True:
                page = http.get(
                    f"/tables/{table['id']}/rows",
                    params={"limit": 1000, "offset": len(rows), "sort": "created_at"},
                ).json()
                rows += page["rows"]
                if len(rows) >= page["total"] or not page["rows"]:
                    break
            out[table["name"]] = rows
    return out


@pytest.fixture
def deployment(server_factory: ServerFactory, postgres_db: str, tmp_path: Path) -> Deployment:
    server = server_factory(demo=True)
    deployment = Deployment(tmp_path, server, postgres_db)
    home = Path(deployment.here("/srv/connector"))
    (home / "configs").mkdir(parents=True)
    (home / ".venv").symlink_to(sys.prefix)  # the environment the connector is installed in
    job = (ROOT / JOB).read_text()
    assert job.count(BASE_URL) == 1 and job.count(DESTINATION) == 1, "the job file changed"
    job = job.replace(BASE_URL, f'base_url = "{server.base_url}"')
    job = job.replace(DESTINATION, f'url = "{postgres_db}"')
    (home / JOB).write_text(deployment.here(job))
    etc = Path(deployment.here("/etc/connector"))
    etc.mkdir(parents=True)
    (etc / "key").write_text(server.api_key + "\n")
    (etc / "env").write_text(f"TABLES_API_KEY={server.api_key}\nPGPASSWORD=unused-here\n")
    for where in ("/var/log/connector", "/var/lib/connector"):
        Path(deployment.here(where)).mkdir(parents=True)
    return deployment


def test_the_cron_line_runs_as_written(deployment: Deployment) -> None:
    (block,) = _blocks("cron")
    (line,) = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    *when, command = line.split(None, 5)
    assert when == ["15", "2", "*", "*", "*"]  # 02:15 every night, as the text says
    assert "--wait" in shlex.split(command)

    done = subprocess.run(
        ["/bin/sh", "-c", deployment.here(command)],  # cron runs it with sh, in a bare env
        env=deployment.environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == done.stderr == ""  # everything went to the log file
    log = Path(deployment.here("/var/log/connector/nightly.jsonl")).read_text()
    summary = deployment.summary(log)
    assert (summary["job"], summary["status"], summary["exit_code"]) == (
        "nightly-warehouse",
        "ok",
        0,
    )
    assert Path(summary["state_file"]).parent == Path(deployment.here("/var/lib/connector"))
    assert deployment.server.api_key not in log
    deployment.check_warehouse()


def _units() -> tuple[str, str]:
    service, timer = _blocks("ini")
    assert "[Service]" in service and "[Timer]" in timer
    return service, timer


def _ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(text)
    return parser


@pytest.mark.long
def test_the_systemd_units_verify_and_the_service_runs_as_systemd_would(
    deployment: Deployment,
) -> None:
    service_text, timer_text = _units()
    units = deployment.base / "units"
    units.mkdir()
    (units / "connector-nightly.service").write_text(deployment.here(service_text))
    (units / "connector-nightly.timer").write_text(deployment.here(timer_text))
    timer = _ini(timer_text)
    service = _ini(service_text)["Service"]
    assert timer["Install"]["WantedBy"] == "timers.target"
    assert int(service["SuccessExitStatus"]) == ExitCode.PARTIAL  # what its comment says

    if shutil.which("systemd-analyze"):
        verified = subprocess.run(
            ["systemd-analyze", "verify", *(str(p) for p in sorted(units.iterdir()))],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert verified.returncode == 0, verified.stderr  # also: ExecStart is executable
        calendar = subprocess.run(
            ["systemd-analyze", "calendar", timer["Timer"]["OnCalendar"]],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert calendar.returncode == 0 and "02:15:00" in calendar.stdout, calendar.stderr

    # ExecStart as systemd runs it: split into words (no shell), in WorkingDirectory, with
    # the variables of EnvironmentFile.
    env_file = Path(deployment.here(service["EnvironmentFile"]))
    variables = dict(ln.split("=", 1) for ln in env_file.read_text().splitlines() if "=" in ln)
    done = subprocess.run(
        shlex.split(deployment.here(service["ExecStart"])),
        cwd=deployment.here(service["WorkingDirectory"]),
        env=deployment.environment(**variables),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, int(service["SuccessExitStatus"])), done.stderr
    assert deployment.summary(done.stdout)["status"] == "ok"
    assert deployment.server.api_key not in done.stdout + done.stderr
    deployment.check_warehouse()


def test_the_airflow_task_runs_its_command_as_written(deployment: Deployment) -> None:
    (dag,) = [b for b in _blocks("python") if "BashOperator" in b]
    (call,) = [
        node for node in ast.walk(ast.parse(dag))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "BashOperator"
    ]  # fmt: skip
    arguments = {k.arg: k.value for k in call.keywords}
    command = ast.literal_eval(arguments["bash_command"])
    assert ast.literal_eval(arguments["skip_on_exit_code"]) == ExitCode.LOCKED  # as commented
    env = ast.literal_eval(arguments["env"])
    assert set(env) == {"TABLES_API_KEY"}

    done = subprocess.run(  # what BashOperator does, the templated key filled in
        ["bash", "-c", deployment.here(command)],
        env=deployment.environment(TABLES_API_KEY=deployment.server.api_key),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])  # what goes to XCom
    assert last["status"] == "ok" and last["job"] == "nightly-warehouse"
    deployment.check_warehouse()


def test_the_dagster_example_is_the_file_and_materialises_the_job(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster as dg

    example = ROOT / "examples" / "dagster_defs.py"
    assert example.read_text() in _blocks("python")  # the page shows the file, verbatim
    (cron_block,) = _blocks("cron")

    job = deployment.here(f"/srv/connector/{JOB}")
    monkeypatch.setenv("CONNECTOR_JOB", job)
    monkeypatch.setenv("TABLES_API_KEY", deployment.server.api_key)
    defs = runpy.run_path(str(example))["defs"]

    assert isinstance(defs, dg.Definitions)
    (schedule,) = defs.schedules or ()
    assert isinstance(schedule, dg.ScheduleDefinition)
    assert schedule.cron_schedule == " ".join(cron_block.split()[:5])  # as cron runs it
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    # Every table the key reads but the excluded ones (the demo has none of those names).
    assert keys == {
        f"nightly_warehouse/{t}" for t in ("Customers", "Orders", "Products", "Tickets")
    }
    result = defs.resolve_job_def("nightly_warehouse").execute_in_process()
    assert result.success
    deployment.check_warehouse()

    # `dagster dev -f examples/dagster_defs.py` loads the file the same way.
    validated = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "dagster"), "definitions", "validate", "-f", str(example)],
        cwd=deployment.here("/srv/connector"),
        env={**os.environ, "DAGSTER_HOME": str(deployment.base)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
