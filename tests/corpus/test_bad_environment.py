"""A corpus of bad environments and bad global arguments, run as real `connector` processes.

Keys that cannot be sent (CRLF, spaces, control or non-ASCII characters, empty), base URLs
that cannot work (no scheme, ftp://, no host, credentials, a key pasted in its place), hosts
with no address, TLS to a plain-HTTP port, a server that refuses connections, and bad
``--max-wait`` values. Each case asserts the exit code; ONE error line on stderr naming what
to fix (the variable or option), with nothing else but retry lines; that it fails fast: no
retry wait at all, in-process and as a process, unless the case heals by retrying, whose
announced waits then add up to no more than --max-wait; that the key's value is in no
output and no file; and, read back through the API, that nothing was written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from connector.cli import main
from tests.fixtures.server import ROOT, RunningServer, free_port

pytestmark = pytest.mark.needs_server  # orders_server, the module's own

ORDERS = {"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]}
#: The retry budget of the case that heals by retrying: long enough for a first wait (up to
#: 0.2 s) after a first try slowed by a busy machine.
MAX_WAIT = 1.5
#: The variables the connector reads; each case starts from none of them set.
OURS = ("CONNECTOR_BASE_URL", "CONNECTOR_API_KEY", "CONNECTOR_MAX_WAIT")

COMMANDS: dict[str, tuple[str, ...]] = {
    "tables": ("tables",),
    "schema": ("schema", "Orders"),
    "export": ("export", "--table", "Orders", "--out", "{tmp}/orders.parquet"),
    "push": ("push", "{tmp}/orders.csv", "--table", "Orders", "--key", "Sku"),
    "apply": ("apply", "{tmp}/orders.plan.json"),
}


@dataclass(frozen=True)
class Case:
    """A bad input: the environment (templates: {base}, {key}, {port}, {free}), the
    arguments before and after the command, the exit code and what the error line names."""

    env: dict[str, str]
    names: tuple[str, ...]
    code: int = 2
    command: str = "tables"
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    retries: bool = False
    #: Text that must not be shown (besides the key).
    hidden: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


GOOD = {"CONNECTOR_BASE_URL": "{base}", "CONNECTOR_API_KEY": "{key}"}

CASES: dict[str, Case] = {
    # -- keys that cannot be sent: exit 2 naming the variable, before any request
    "key ends in CRLF": Case({**GOOD, "CONNECTOR_API_KEY": "{key}\r\n"},
                             ("CONNECTOR_API_KEY", "carriage return")),
    "key ends in CR (push)": Case({**GOOD, "CONNECTOR_API_KEY": "{key}\r"},
                                  ("CONNECTOR_API_KEY", "carriage return"), command="push"),
    "key ends in LF (export)": Case({**GOOD, "CONNECTOR_API_KEY": "{key}\n"},
                                    ("CONNECTOR_API_KEY", "newline"), command="export"),
    "key with a space": Case({**GOOD, "CONNECTOR_API_KEY": "{key} x"},
                             ("CONNECTOR_API_KEY", "a space or a tab"), command="schema"),
    "key with a tab": Case({**GOOD, "CONNECTOR_API_KEY": "\t{key}"},
                           ("CONNECTOR_API_KEY", "whitespace")),
    "key not ASCII": Case({**GOOD, "CONNECTOR_API_KEY": "{key}é"},
                          ("CONNECTOR_API_KEY", "non-ASCII"), command="export"),
    "key with a control character": Case({**GOOD, "CONNECTOR_API_KEY": "{key}\x1b"},
                                         ("CONNECTOR_API_KEY", "control character")),
    "key empty": Case({**GOOD, "CONNECTOR_API_KEY": ""}, ("no API key", "CONNECTOR_API_KEY")),
    # -- nothing set: the variable and the flag, never the library's parameter names
    **{f"no key ({command})": Case({"CONNECTOR_BASE_URL": "{base}"}, ("no API key", "CONNECTOR_API_KEY"),
                                   command=command, hidden=("api_key",))
       for command in COMMANDS},
    **{f"no base URL ({command})": Case({"CONNECTOR_API_KEY": "{key}"},
                                        ("no API base URL", "CONNECTOR_BASE_URL", "--base-url"),
                                        command=command, hidden=("base_url",))
       for command in COMMANDS},
    "key refused": Case({**GOOD, "CONNECTOR_API_KEY": "key_NotAKeyOfThisServer_12345"},
                        ("the API key was refused", "CONNECTOR_API_KEY"), code=2),
    # -- base URLs that cannot work: exit 2, "base URL must look like https://host/v1"
    "base URL without a scheme": Case({**GOOD, "CONNECTOR_BASE_URL": "127.0.0.1:{port}/v1"},
                                      ("base URL must look like https://host/v1", "no scheme",
                                       "CONNECTOR_BASE_URL")),
    "base URL ftp://": Case({**GOOD, "CONNECTOR_BASE_URL": "ftp://127.0.0.1:{port}/v1"},
                            ("base URL must look like https://host/v1", "'ftp'", "CONNECTOR_BASE_URL"),
                            command="export"),
    "base URL without a host": Case({**GOOD, "CONNECTOR_BASE_URL": "http:///v1"},
                                    ("base URL must look like https://host/v1", "no host")),
    "base URL with credentials": Case({**GOOD, "CONNECTOR_BASE_URL": "http://me:pa55word@127.0.0.1:{port}/v1"},
                                      ("base URL must look like https://host/v1", "credentials"),
                                      hidden=("pa55word",)),
    "the key given as the base URL": Case({"CONNECTOR_BASE_URL": "{key}", "CONNECTOR_API_KEY": "{key}"},
                                          ("base URL must look like https://host/v1", "CONNECTOR_BASE_URL")),
    "--base-url ftp://": Case({**GOOD}, ("base URL must look like https://host/v1", "--base-url"),
                              after=("--base-url", "ftp://127.0.0.1/v1"), command="schema"),
    # -- what cannot heal fails at once
    "host with no address (DNS)": Case({**GOOD, "CONNECTOR_BASE_URL": "http://connector-test.invalid/v1"},
                                       ("'connector-test.invalid'", "no address", "CONNECTOR_BASE_URL")),
    "https to a plain-HTTP port (TLS)": Case({**GOOD, "CONNECTOR_BASE_URL": "https://127.0.0.1:{port}/v1"},
                                             ("TLS", "CONNECTOR_BASE_URL"), command="push"),
    # -- what can heal is retried, visibly, within --max-wait
    "connection refused": Case({**GOOD, "CONNECTOR_BASE_URL": "http://127.0.0.1:{free}/v1"},
                               ("could not connect to", "connection refused"), code=1,
                               before=("--max-wait", str(MAX_WAIT)), retries=True),
    "connection refused, budget 0 (export)": Case(
        {**GOOD, "CONNECTOR_BASE_URL": "http://127.0.0.1:{free}/v1", "CONNECTOR_MAX_WAIT": "0"},
        ("could not connect to", "connection refused"), code=1, command="export"),
    # -- bad --max-wait
    "--max-wait not a number": Case(GOOD, ("--max-wait", "'soon'"), before=("--max-wait", "soon")),
    "--max-wait negative": Case(GOOD, ("--max-wait", "'-5'"), before=("--max-wait", "-5")),
    "--max-wait nan": Case(GOOD, ("--max-wait", "'nan'"), before=("--max-wait", "nan")),
    "--max-wait inf": Case(GOOD, ("--max-wait", "'inf'"), before=("--max-wait", "inf")),
    "CONNECTOR_MAX_WAIT not a number": Case({**GOOD, "CONNECTOR_MAX_WAIT": "1 minute"},
                                            ("CONNECTOR_MAX_WAIT", "'1 minute'"), command="push"),
}


@pytest.fixture(scope="module")
def orders_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = RunningServer(tmp_path_factory.mktemp("server"), {}).start()
    table = server.create_table(ORDERS)
    server.insert_rows(table, [{"Sku": "a"}, {"Sku": "b"}])
    yield server
    server.stop()


def assert_waits(output: str, retries: bool) -> None:
    """Failing fast is waiting for nothing: no ``retrying in`` line, unless the case retries,
    whose waits (each shown to 0.1 s) then add up to no more than `MAX_WAIT`."""
    waits = [float(w) for w in re.findall(r"^retrying in (\d+\.\d) s ", output, re.MULTILINE)]
    assert bool(waits) is retries, output
    assert sum(waits) <= MAX_WAIT + 0.05 * len(waits), output


def _rows(server: RunningServer) -> list[dict[str, Any]]:
    with server.client() as http:
        [table] = http.get("/tables").json()["tables"]
        rows: list[dict[str, Any]] = http.get(f"/tables/{table['id']}/rows", params={"limit": 1000}).json()["rows"]
    return rows


def _fill(template: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_environment_fails_clearly(orders_server: RunningServer, tmp_path: Path, name: str) -> None:
    case = CASES[name]
    (tmp_path / "orders.csv").write_text("Sku\na\nc\n", encoding="utf-8")  # would create c
    key = orders_server.api_key
    values = {"base": orders_server.base_url, "key": key, "port": str(orders_server.port),
              "free": str(free_port()), "tmp": str(tmp_path)}
    env = {k: _fill(v, values) for k, v in case.env.items()}
    args = [*case.before, *(_fill(a, values) for a in COMMANDS[case.command]), *case.after]
    before = _rows(orders_server)

    # in-process, where the interpreter is already up: no wait unless the case retries
    runner_env: dict[str, str | None] = {name: None for name in OURS}
    result = CliRunner().invoke(main, args, env={**runner_env, **env})
    assert result.exit_code == case.code, (result.output, result.exception)
    assert_waits(result.output, case.retries)

    # the exact output: a real process
    process_env = {k: v for k, v in os.environ.items() if k not in OURS}
    done = subprocess.run([sys.executable, "-m", "connector", *args], env={**process_env, **env},
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == case.code, (done.stdout, done.stderr)
    assert_waits(done.stderr, case.retries)
    lines = done.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("retrying in ")]
    assert len(errors) == 1 and errors[0].startswith("error: "), done.stderr
    for named in case.names:
        assert named in errors[0], (named, errors[0])
    assert (len(lines) > 1) is case.retries, done.stderr
    assert "Traceback" not in done.stdout + done.stderr

    # never the key (nor a password), in any output or file
    shown = done.stdout + done.stderr + result.output
    for secret in (key, *case.hidden):
        assert secret not in shown, secret
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path

    # nothing was written: the table as it was, no export file
    assert _rows(orders_server) == before
    assert not (tmp_path / "orders.parquet").exists()
