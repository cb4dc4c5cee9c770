"""One exit code for one kind of failure, whichever command meets it (`connector.errors.ExitCode`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.errors import ExitCode
from tests.fixtures.server import RunningServer, free_port

ORDERS = {"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]}


def run(server: RunningServer, *args: str) -> Result:
    return CliRunner().invoke(
        main, [*args, "--base-url", server.base_url], env={"CONNECTOR_API_KEY": server.api_key}
    )


@pytest.fixture
def sheet(tmp_path: Path) -> Path:
    path = tmp_path / "orders.csv"
    path.write_text("Sku\na\n", encoding="utf-8")
    return path


def commands_naming(table: str, sheet: Path, out: Path) -> dict[str, list[str]]:
    return {
        "schema": ["schema", table],
        "export": ["export", "--table", table, "--out", str(out)],
        "push": ["push", str(sheet), "--table", table, "--key", "Sku"],
    }


@pytest.mark.parametrize("command", ["schema", "export", "push"])
def test_a_misspelt_table_is_a_usage_error_with_a_suggestion(
    server: RunningServer, sheet: Path, tmp_path: Path, command: str
) -> None:
    server.create_table(ORDERS)
    result = run(server, *commands_naming("Ordres", sheet, tmp_path / "out")[command])
    assert result.exit_code == ExitCode.USAGE == 2, result.output
    assert "no table named 'Ordres'; did you mean 'Orders'?" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["schema", "export", "push"])
def test_a_table_named_in_another_case_is_found(
    server: RunningServer, sheet: Path, tmp_path: Path, command: str
) -> None:
    server.create_table(ORDERS)
    result = run(server, *commands_naming("ORDERS", sheet, tmp_path / "out")[command])
    assert result.exit_code == ExitCode.OK, result.output


@pytest.mark.parametrize("command", ["schema", "export", "push"])
def test_names_that_differ_only_in_case_ask_for_an_id(
    server: RunningServer, sheet: Path, tmp_path: Path, command: str
) -> None:
    lower = server.create_table({**ORDERS, "name": "orders"})
    upper = server.create_table({**ORDERS, "name": "ORDERS"})
    result = run(server, *commands_naming("Orders", sheet, tmp_path / "out")[command])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert f"several tables are named 'Orders' ({lower}, {upper}); use an id" in result.output


def test_an_unreachable_server_is_a_failure_from_every_command(sheet: Path, tmp_path: Path) -> None:
    """Exit 1 with one line naming the address, no traceback, from every command; each wait
    before a retry is a line on stderr, and --max-wait bounds them (here half a second)."""
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    env = {**os.environ, "CONNECTOR_BASE_URL": base_url, "CONNECTOR_API_KEY": "key_unused"}
    env.pop("CONNECTOR_MAX_WAIT", None)
    commands = {"tables": ["tables"], **commands_naming("Orders", sheet, tmp_path / "out")}
    began = time.monotonic()
    started = {
        name: subprocess.Popen(
            [sys.executable, "-m", "connector", "--max-wait", "0.5", *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for name, args in commands.items()
    }
    for name, process in started.items():
        out, err = process.communicate(timeout=60)
        assert process.returncode == ExitCode.FAILED == 1, (name, out, err)
        lines = err.splitlines()
        assert lines[-1].startswith(f"error: could not connect to {base_url}: connection refused"), name
        retries = lines[:-1]
        assert retries, (name, err)
        for n, line in enumerate(retries, start=2):
            assert re.fullmatch(rf"retrying in \d+\.\d s \(attempt {n} of 10\): connection refused", line), line
        assert "Traceback" not in err and "key_unused" not in out + err, name
    assert time.monotonic() - began < 20  # a retry budget of ~34 s each before --max-wait


def test_the_help_documents_every_exit_code() -> None:
    text = CliRunner().invoke(main, ["--help"]).output
    for code in ExitCode:
        assert f" {int(code)} " in text, code


def test_debug_never_prints_the_key(server: RunningServer, sheet: Path, tmp_path: Path) -> None:
    """Failing commands under --debug: the key is in no output, no log line, no traceback,
    no file written. One key the server refuses (401), one read from a CRLF file."""
    refused = "key_Refused0123456789abcdefXYZ"
    server.create_table(ORDERS)
    out_dir = tmp_path / "out"
    for key in (refused, server.api_key + "\r"):
        env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": key}
        for args in (["tables"], ["schema", "Orders"],
                     ["export", "--table", "Orders", "--out", str(out_dir / "orders.parquet")],
                     ["push", str(sheet), "--table", "Orders", "--key", "Sku"]):
            done = subprocess.run(
                [sys.executable, "-m", "connector", "--debug", "--max-wait", "0", *args],
                env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
            )
            printed = done.stdout + done.stderr
            assert done.returncode in (ExitCode.FAILED, ExitCode.USAGE), (args, printed)
            assert key.strip() not in printed, (args, printed)
            if key == refused:  # --debug did show things
                assert "DEBUG httpcore" in printed
                assert "Traceback" in printed or args[0] == "export", printed  # export reports
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert refused.encode() not in data and server.api_key.encode() not in data, path


# -- --max-concurrency on push and apply ------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [("--max-concurrency", "0", "must be an integer from 1 to 64, not 0"),
     ("--max-concurrency", "65", "must be an integer from 1 to 64, not 65"),
     ("--max-concurrency", "many", "'many' is not a valid integer."),
     ("--concurrency", "0", "must be an integer from 1 to 64, not 0")],
)
@pytest.mark.parametrize("command", ["push", "apply"])
def test_a_concurrency_cap_out_of_range_is_a_usage_error_naming_the_option(
    server: RunningServer, sheet: Path, command: str, option: str, value: str, says: str
) -> None:
    server.create_table(ORDERS)
    args = [str(sheet), "--table", "Orders", "--key", "Sku"] if command == "push" else [str(sheet)]
    result = run(server, command, *args, option, value)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.output.startswith(f"error: Invalid value for '{option}': {says} (see: ")
    assert result.output.count("\n") == 1


def test_the_cap_and_its_old_name_together_are_a_usage_error(server: RunningServer, sheet: Path) -> None:
    server.create_table(ORDERS)
    result = run(server, "push", str(sheet), "--table", "Orders", "--key", "Sku",
                 "--max-concurrency", "2", "--concurrency", "2")
    assert result.exit_code == ExitCode.USAGE
    assert "give --max-concurrency or --concurrency (its old name), not both" in result.output


def test_a_bad_cap_in_the_environment_names_the_variable(server: RunningServer, sheet: Path) -> None:
    server.create_table(ORDERS)
    result = CliRunner().invoke(
        main, ["push", str(sheet), "--table", "Orders", "--key", "Sku", "--base-url", server.base_url],
        env={"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_MAX_CONCURRENCY": "100"},
    )
    assert result.exit_code == ExitCode.USAGE
    assert "error: CONNECTOR_MAX_CONCURRENCY must be an integer from 1 to 64, got 100" in result.output


@pytest.mark.parametrize(
    ("args", "env", "cap"),
    [([], None, 32),  # connector.api.concurrency.DEFAULT_MAX_CONCURRENCY
     (["--max-concurrency", "2"], None, 2),
     (["--max-concurrency", "5"], "3", 5),  # the option wins over the environment
     ([], "3", 3),
     (["--concurrency", "1"], None, 1)],  # the old name
)
def test_push_and_apply_cap_the_clients_requests_in_flight(
    server: RunningServer, tmp_path: Path, args: list[str], env: str | None, cap: int
) -> None:
    """The cap reaches the client: the JSON summary reports it, the level the client reached
    stays under it, and every row is written (12 bulk requests of 100 rows, by push into one
    table and by apply into another)."""
    sheet = tmp_path / "orders.csv"
    sheet.write_text("Sku\n" + "".join(f"s{i}\n" for i in range(1200)), encoding="utf-8")
    pushed, applied = (server.create_table({**ORDERS, "name": name}) for name in ("A", "B"))
    environment = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_MAX_CONCURRENCY": env}
    common = ["--base-url", server.base_url, "--json"]
    plan = tmp_path / "plan.json"
    planned = CliRunner().invoke(
        main, ["push", str(sheet), "--table", applied, "--key", "Sku", "--plan-out", str(plan),
               *common], env=environment)
    assert planned.exit_code == 0, planned.output
    for command in (["push", str(sheet), "--table", pushed, "--key", "Sku"], ["apply", str(plan)]):
        result = CliRunner().invoke(main, [*command, *args, *common], env=environment)
        summary = json.loads(result.stdout)
        assert (result.exit_code, summary["max_concurrency"]) == (0, cap), result.output
        assert 1 <= summary["concurrency"] <= cap
        assert summary["pushes"][0]["created"] == 1200
        if "--concurrency" in args:
            assert "note: --concurrency is now --max-concurrency" in result.stderr
    with server.client() as http:
        for table_id in (pushed, applied):
            assert http.get(f"/tables/{table_id}/rows", params={"limit": 1}).json()["total"] == 1200
