"""`connector server create-table`, `connector keys create`, `connector serve --demo`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.server.cli import _listen, create_key, create_table, serve
from tests.fixtures.server import RunningServer, ServerFactory, free_port
from tests.server.conftest import PEOPLE


def write_spec(tmp_path: Path, spec: object) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def test_create_table_while_the_server_runs_is_visible_to_it(server: RunningServer, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["server", "create-table", "--db", str(server.db_path), str(write_spec(tmp_path, PEOPLE))])
    assert result.exit_code == 0, result.output
    table_id = result.output.strip()
    with server.client() as client:
        assert client.get(f"/tables/{table_id}").json()["name"] == "People"
        created = client.post(f"/tables/{table_id}/rows", json={"fields": {"Name": "Ada"}})
        assert created.status_code == 201


def test_create_table_refuses_a_bad_spec_cleanly(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    bad = {"name": "T", "columns": [{"name": "S", "type": "choice"}]}
    result = CliRunner().invoke(main, ["server", "create-table", "--db", db, str(write_spec(tmp_path, bad))])
    assert result.exit_code == 2
    assert "options" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("spec", [
    {"name": "Leads\u202eslx.exe", "columns": [{"name": "A", "type": "text"}]},
    {"name": "Leads", "columns": [{"name": "A\u200fB", "type": "text"}]},
], ids=["table", "column"])
def test_create_table_refuses_a_name_with_a_bidi_control(tmp_path: Path, spec: dict[str, object]) -> None:
    db = tmp_path / "x.db"
    result = CliRunner().invoke(main, ["server", "create-table", "--db", str(db), str(write_spec(tmp_path, spec))])
    assert result.exit_code == 2, result.output
    assert "control character (U+20" in result.output and "Traceback" not in result.output
    assert "\u202e" not in result.output and "\u200f" not in result.output  # printed escaped
    listed = CliRunner().invoke(main, ["server", "create-table", "--db", str(db), str(write_spec(tmp_path, PEOPLE))])
    assert listed.exit_code == 0  # the database holds no table the refused spec began


def test_create_table_refuses_a_duplicate_name(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    spec = str(write_spec(tmp_path, PEOPLE))
    assert CliRunner().invoke(main, ["server", "create-table", "--db", db, spec]).exit_code == 0
    again = CliRunner().invoke(main, ["server", "create-table", "--db", db, spec])
    assert again.exit_code == 2 and "already exists" in again.output


def test_keys_create_prints_a_working_scoped_key_once(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)
    result = CliRunner().invoke(main, ["keys", "create", "--db", str(server.db_path), "--read-only", "--table", "People"])
    assert result.exit_code == 0
    key = result.output.strip()
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{server.base_url}/tables/{table}/rows", headers=headers).status_code == 200
    write = httpx.post(f"{server.base_url}/tables/{table}/rows", headers=headers, json={"fields": {"Name": "x"}})
    assert write.status_code == 403
    assert key not in server.db_path.read_bytes().decode("latin-1")


def test_keys_create_for_an_unknown_table_fails_cleanly(server: RunningServer) -> None:
    result = CliRunner().invoke(main, ["keys", "create", "--db", str(server.db_path), "--table", "Nope"])
    assert result.exit_code == 2 and "Nope" in result.output


@pytest.mark.needs_server  # the serve command, as a process
def test_serve_demo_prints_a_key_once_and_serves_the_demo(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "demo.db"
    env = {k: v for k, v in os.environ.items() if k != "CONNECTOR_DEMO_KEY"}
    argv = [sys.executable, "-m", "connector", "serve", "--demo", "--db", str(db), "--port", str(port)]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while "serving" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        key = log.read_text().split("demo API key (shown once): ")[1].split()[0]
        url = f"http://127.0.0.1:{port}/v1/tables"
        while time.monotonic() < deadline:
            try:
                response = httpx.get(url, headers={"Authorization": f"Bearer {key}"})
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        tables = {t["name"]: t["rows"] for t in response.json()["tables"]}
        assert tables == {"Customers": 1200, "Products": 40, "Orders": 2000, "Tickets": 400}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_every_option_of_the_server_commands_has_help_and_every_command_its_exit_codes() -> None:
    for command in (serve, create_table, create_key):
        undocumented = [
            p.name for p in command.params if isinstance(p, click.Option) and not p.help
        ]
        assert undocumented == [], command.name
        assert "Exit codes:" in (command.help or ""), command.name
    shown = CliRunner().invoke(main, ["serve", "--help"])
    assert "TCP port to listen on." in shown.output


@pytest.mark.needs_server  # the serve command, as a process
def test_serve_on_a_taken_port_fails_first_with_one_line(tmp_path: Path) -> None:
    """Before any key is printed, any "serving" line, any database made or seeded."""
    env = {k: v for k, v in os.environ.items() if k != "CONNECTOR_DEMO_KEY"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "connector", "serve", "--demo", "--port", str(port),
             "--db", str(tmp_path / "x.db")],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not (tmp_path / "x.db").exists()


def test_the_socket_serve_binds_says_it_is_tcp_so_answers_go_out_without_delay() -> None:
    """asyncio turns Nagle's algorithm off only on connections whose listening socket says
    TCP; a socket left at protocol 0 made every answer on a kept-alive connection wait 40 ms
    for the client's delayed acknowledgement (a rate-limited client never reached 25/s)."""
    listener = _listen("127.0.0.1", 0)
    try:
        assert listener.proto == socket.IPPROTO_TCP
    finally:
        listener.close()


def test_a_demo_key_that_exists_keeps_its_permissions(server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    running = server_factory()
    table = running.create_table(PEOPLE)
    other = running.create_table({**PEOPLE, "name": "Other"})
    read_only = running.create_key(read_only=True, tables=[table])
    headers = {"Authorization": f"Bearer {read_only}"}
    for how in ("command line", "environment"):
        running.stop()
        if how == "command line":
            running.options["demo_key"] = read_only
        else:
            running.options.pop("demo_key")
            monkeypatch.setenv("CONNECTOR_DEMO_KEY", read_only)
        running.start()
        with httpx.Client(base_url=running.base_url, headers=headers) as client:
            assert client.get(f"/tables/{table}/rows").status_code == 200
            assert client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x"}}).status_code == 403
            assert client.get(f"/tables/{other}").status_code == 403
    log = running.log()
    assert "shows in `ps`" in log and log.count("permissions are left as they are") == 2
    assert read_only not in log


def test_a_demo_key_file_registers_a_full_key_that_ps_does_not_show(server_factory: ServerFactory, tmp_path: Path) -> None:
    key_file = tmp_path / "demo.key"
    key_file.write_bytes(b"demo-key-from-a-file\r\n")  # saved on Windows
    running = server_factory(demo_key_file=key_file, spawn=True)  # its own command line
    table = running.create_table(PEOPLE)
    headers = {"Authorization": "Bearer demo-key-from-a-file"}
    with httpx.Client(base_url=running.base_url, headers=headers) as client:
        assert client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x"}}).status_code == 201
    assert running.pid is not None
    assert b"demo-key-from-a-file" not in Path(f"/proc/{running.pid}/cmdline").read_bytes()
    assert "shows in `ps`" not in running.log()


@pytest.mark.parametrize("content", [b"", b"two\nlines\n", b"has space\n", b"\xff\xfe\n"])
def test_a_bad_demo_key_file_is_refused_before_serving(tmp_path: Path, content: bytes) -> None:
    key_file = tmp_path / "demo.key"
    key_file.write_bytes(content)
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "x.db"), "--demo-key-file", str(key_file)])
    assert result.exit_code == 2, result.output
    assert "--demo-key" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.db").exists()


def test_serve_help_documents_the_bounds_and_their_defaults() -> None:
    shown = " ".join(CliRunner().invoke(main, ["serve", "--help"], terminal_width=200).output.split())
    for flag, default in (("--max-body-bytes", 8388608), ("--max-cell-bytes", 1048576),
                          ("--max-response-bytes", 8388608), ("--max-head-bytes", 65536),
                          ("--header-timeout SECONDS", 10.0), ("--body-timeout SECONDS", 10.0),
                          ("--keep-alive-timeout SECONDS", 5)):
        options = shown[shown.index("Options:"):]
        assert flag in options and f"default: {default}" in options[options.index(flag):][:400], flag
    assert "--late-visibility-ms D" in shown
    assert "at least two" in shown and "step by it" in shown
    assert "CONNECTOR_DEMO_KEY" in shown and "--demo-key-file" in shown
