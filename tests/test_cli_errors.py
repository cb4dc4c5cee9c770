"""One exit code for one kind of failure, whichever command meets it (`connector.errors.ExitCode`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.errors import ExitCode
from tests.destinations.samples import wait_while_running
from tests.fixtures.server import ROOT, RunningServer, free_port

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


@pytest.mark.slow
def test_an_unreachable_server_is_a_failure_from_every_command(sheet: Path, tmp_path: Path) -> None:
    """Exit 1 with one line naming the address, no traceback, from every command; each wait
    before a retry is a line on stderr, and --max-wait bounds them (here 2 s: a first try that
    takes half a second on a loaded machine leaves a budget that short no retry)."""
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    env = {**os.environ, "CONNECTOR_BASE_URL": base_url, "CONNECTOR_API_KEY": "key_unused"}
    env.pop("CONNECTOR_MAX_WAIT", None)
    commands = {"tables": ["tables"], **commands_naming("Orders", sheet, tmp_path / "out")}
    started = {
        name: subprocess.Popen(
            [sys.executable, "-m", "connector", "--max-wait", "2", *args],
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
        waits = [re.fullmatch(rf"retrying in (\d+\.\d) s \(attempt {n} of 10\): connection refused", line)
                 for n, line in enumerate(retries, start=2)]
        assert all(waits), retries
        # within --max-wait (each wait shown to 0.1 s): ~34 s of waits without it
        assert sum(float(w[1]) for w in waits if w) <= 2 + 0.05 * len(waits), retries
        assert "Traceback" not in err and "key_unused" not in out + err, name


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


# -- a key that may not write -----------------------------------------------------------------


def _cells(server: RunningServer, table_id: str) -> list[tuple[str, dict[str, object]]]:
    with server.client() as http:
        page = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()
    return sorted((row["id"], row["fields"]) for row in page["rows"])


@pytest.mark.parametrize("command", ["push", "apply"])
def test_a_read_only_key_is_told_it_cannot_write_not_to_run_again(
    server: RunningServer, tmp_path: Path, command: str
) -> None:
    """Running again with the same key fails the same way: the error says the key cannot
    write (exit 1, no traceback, in text and in the JSON summary) and the table is unchanged."""
    table_id = server.create_table(ORDERS)
    server.insert_rows(table_id, [{"Sku": "a"}])
    sheet = tmp_path / "orders.csv"
    sheet.write_text("Sku\na\nb\n", encoding="utf-8")  # would create b
    plan = tmp_path / "plan.json"
    made = run(server, "push", str(sheet), "--table", "Orders", "--key", "Sku", "--plan-out", str(plan))
    assert made.exit_code == ExitCode.OK and plan.exists(), made.output
    before = _cells(server, table_id)
    args = ["push", str(sheet), "--table", "Orders", "--key", "Sku"] if command == "push" else ["apply", str(plan)]
    env = {"CONNECTOR_API_KEY": server.create_key(read_only=True)}
    for as_json in ([], ["--json"]):
        result = CliRunner().invoke(main, [*args, *as_json, "--base-url", server.base_url], env=env)
        assert result.exit_code == ExitCode.FAILED, result.output
        assert "Traceback" not in result.output
        said = result.stderr if not as_json else " ".join(json.loads(result.stdout)["pushes"][0]["problems"])
        assert "cannot write to the table: run the push again with a key that may" in said, said
        assert "again to finish" not in result.output
        assert "may not change this table" in result.stderr and "read-only" in result.stderr
    assert _cells(server, table_id) == before


# -- what a failed or stopped export leaves on disk --------------------------------------------


def test_an_out_folder_that_cannot_be_made_shows_the_systems_error(server: RunningServer) -> None:
    """/proc/sys takes no new folder: the error is the one the OS gives for it, not a guess."""
    server.create_table(ORDERS)
    with pytest.raises(OSError) as system:
        os.mkdir("/proc/sys/out")
    result = run(server, "export", "--out", "/proc/sys/out")
    assert result.exit_code == ExitCode.FAILED, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("Orders: failed"))
    assert line == ("Orders: failed: cannot write /proc/sys/out/Orders.parquet: making the folder "
                    f"/proc/sys/out failed: {system.value.strerror}")


def test_writers_sharing_a_new_folder_leave_none_when_they_all_fail(tmp_path: Path) -> None:
    """One writer made the folder, another entered it after; they fail in that order. The
    last one out removes it (neither made it alone, for the second)."""
    from connector.atomic import atomic_path

    out = tmp_path / "new" / "out"
    first, second = atomic_path(out / "a.csv"), atomic_path(out / "b.csv")
    first.__enter__()
    second.__enter__()
    assert len(list(out.iterdir())) == 2  # both partial files
    stop = KeyboardInterrupt()
    assert first.__exit__(KeyboardInterrupt, stop, None) is False
    assert second.__exit__(KeyboardInterrupt, stop, None) is False
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_first_export_of_tables_in_parallel_leaves_no_folder(
    server_factory: Any, tmp_path: Path
) -> None:
    """Ctrl-C while every table's file is being written into a folder the export made."""
    server = server_factory(latency_ms=100)
    for t in range(6):
        table = server.create_table({**ORDERS, "name": f"T{t}"})
        server.insert_rows(table, [{"Sku": f"s{i}"} for i in range(2000)])
    out_dir = tmp_path / "new" / "out"
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key}
    run = subprocess.Popen(
        [sys.executable, "-m", "connector", "export", "--out", str(out_dir), "--format", "csv",
         "--page-size", "50"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # every table's file is being written
    wait_while_running(run, lambda: out_dir.is_dir() and len(list(out_dir.glob(".T*.csv.*"))) == 6)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == ExitCode.INTERRUPTED, err
    assert list(tmp_path.iterdir()) == []
