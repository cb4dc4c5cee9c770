"""A corpus of bad job files and bad `connector sync` arguments, run as real processes.

Unknown keys, wrong types, a secret in the file, ``api_key_env`` holding a key, bad
``max_wait``, bad destinations, no destination at all, a misspelt table, bad filters, a push
naming a column the table lacks, and bad options. Each case asserts the exit code; ONE error
line on stderr naming the file and the key at fault (or the option), and nothing else (no
retry wait: it fails fast), in-process and as a process; that the key's value is in no
output and no file; and, read back through the API
and the destination, that nothing was written (no destination file or database table, no
state file, the table's rows as they were).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from connector.cli import main
from tests.fixtures.server import ROOT, RunningServer

pytestmark = pytest.mark.needs_server  # orders_server, the module's own

ORDERS = {
    "name": "Orders",
    "columns": [{"name": "Sku", "type": "text"}, {"name": "Qty", "type": "number"}],
}
OURS = ("CONNECTOR_BASE_URL", "CONNECTOR_API_KEY", "CONNECTOR_MAX_WAIT", "JOB_KEY")

SOURCE = '[source]\napi_key_env = "JOB_KEY"\n'
PARQUET = '[[destination]]\nparquet = "out"\n'
SQLITE = '[[destination]]\nurl = "sqlite:///out.db"\n'
PUSH = '[[push]]\nfile = "orders.csv"\ntable = "Orders"\nkey = "Sku"\n'


@dataclass(frozen=True)
class Case:
    """A job file (templates: {key}, {tmp}), the sync options, the exit code and what the
    error line names besides the file ({job}: the job file's path)."""

    body: str
    names: tuple[str, ...]
    code: int = 2
    options: tuple[str, ...] = ()
    #: The CSV a push reads.
    csv: str = "Sku,Qty\na,1\nc,3\n"


CASES: dict[str, Case] = {
    # -- the file's shape
    "not TOML": Case(SOURCE + "[[destination]\nparquet = 'out'\n", ("{job}: not valid TOML",)),
    "unknown top-level key": Case('colour = "red"\n' + SOURCE + PARQUET,
                                  ("{job}: colour: unknown key",)),
    "unknown source key": Case(SOURCE + "pagesize = 10\n" + PARQUET,
                               ("{job}: source.pagesize: unknown key", "page_size")),
    "wrong type: page_size": Case(SOURCE + 'page_size = "big"\n' + PARQUET,
                                  ("{job}: source.page_size: must be an integer",)),
    "wrong type: incremental": Case(SOURCE + '[sync]\nincremental = "yes"\n' + PARQUET,
                                    ("{job}: sync.incremental: must be true or false",)),
    "bad deletes": Case(SOURCE + '[sync]\ndeletes = "purge"\n' + PARQUET,
                        ("{job}: sync.deletes: must be one of delete, mark, keep",)),
    "no source": Case(PARQUET, ("{job}: source: missing",)),
    "no destination and no push": Case(SOURCE, ("{job}: destination: missing",)),
    # -- secrets
    "a key in the file": Case(SOURCE + 'api_key = "{key}"\n' + PARQUET,
                              ("{job}: source.api_key: secrets never go in a job file",)),
    "a token at the top": Case('token = "{key}"\n' + SOURCE + PARQUET,
                               ("{job}: token: secrets never go in a job file",)),
    "a cloud secret in a destination": Case(
        SOURCE + '[[destination]]\nparquet = "s3://bucket/x"\naws_secret_access_key = "abc123"\n',
        ("{job}: destination[0].aws_secret_access_key: credentials never go in a job file",)),
    "api_key_env holds the key": Case('[source]\napi_key_env = "{key}"\n' + PARQUET,
                                      ("{job}: source.api_key_env", "NAME of an environment")),
    "api_key_env names an unset variable": Case(
        '[source]\napi_key_env = "NOT_SET_ANYWHERE"\n' + PARQUET,
        ("{job}: source.api_key_env", "NOT_SET_ANYWHERE is not set")),
    "a password in base_url": Case(
        '[source]\napi_key_env = "JOB_KEY"\nbase_url = "http://me:pa55word@127.0.0.1/v1"\n'
        + PARQUET, ("{job}: source.base_url",)),
    # -- max_wait
    "negative max_wait": Case(SOURCE + "max_wait = -1\n" + PARQUET,
                              ("{job}: source.max_wait: must be a number of seconds >= 0",)),
    "max_wait as text": Case(SOURCE + 'max_wait = "30s"\n' + PARQUET,
                             ("{job}: source.max_wait: must be a number of seconds >= 0",)),
    "infinite max_wait": Case(SOURCE + "max_wait = inf\n" + PARQUET,
                              ("{job}: source.max_wait", "got inf")),
    # -- destinations
    "bad destination URL": Case(SOURCE + '[[destination]]\nurl = "notadb"\n',
                                ("{job}: destination[0].url", "not a database URL", "sqlite:///")),
    "unknown database driver": Case(SOURCE + '[[destination]]\nurl = "nosuchdb://h/x"\n',
                                    ("{job}: destination[0]",)),
    "bad write mode": Case(SOURCE + '[[destination]]\nparquet = "out"\nmode = "upsert"\n',
                           ("{job}: destination[0].mode: must be one of replace, append, merge",)),
    "two kinds in one destination": Case(
        SOURCE + '[[destination]]\nparquet = "out"\nurl = "sqlite:///out.db"\n',
        ("{job}: destination[0]",)),
    # -- tables and filters (checked against the server, before anything is written)
    "misspelt include": Case(SOURCE + '[tables]\ninclude = ["Ordres"]\n' + SQLITE,
                             ("{job}: tables.include", "Orders")),
    "empty include": Case(SOURCE + "[tables]\ninclude = []\n" + PARQUET,
                          ("{job}: tables.include: is empty",)),
    "bad filter operator": Case(
        SOURCE + '[tables.filter]\nOrders = { Qty = { near = 3 } }\n' + PARQUET,
        ("{job}: tables.filter.Orders.Qty", "near")),
    "filter on a missing column": Case(
        SOURCE + '[tables.filter]\nOrders = { Colour = { eq = "x" } }\n' + SQLITE,
        ("{job}: tables.filter.Orders.Colour", "no column 'Colour'")),
    # -- pushes
    "unknown push key column": Case(
        SOURCE + '[[push]]\nfile = "orders.csv"\ntable = "Orders"\nkey = "Code"\n' + PARQUET,
        ("{job}: push[0]", "no column 'Code'")),
    "push key empty": Case(
        SOURCE + '[[push]]\nfile = "orders.csv"\ntable = "Orders"\nkey = []\n',
        ("{job}: push[0].key: missing",)),
    "push with an unknown setting": Case(SOURCE + PUSH + 'dry = true\n',
                                         ("{job}: push[0].dry: unknown key",)),
    "push date_format without a %": Case(SOURCE + PUSH + 'date_format = "DD/MM/YYYY"\n',
                                          ("{job}: push[0].date_format",)),
    "push file missing": Case(
        SOURCE + '[[push]]\nfile = "gone.csv"\ntable = "Orders"\nkey = "Sku"\n',
        ("{job}: push[0].file: no such file",)),
    "push to a misspelt table": Case(
        SOURCE + '[[push]]\nfile = "orders.csv"\ntable = "Ordres"\nkey = "Sku"\n',
        ("{job}: push[0]", "Orders")),
    # -- the command's arguments
    "no such job file": Case("", ("{tmp}/nope.toml",), options=("--job", "{tmp}/nope.toml")),
    "bad --log-format": Case(SOURCE + PARQUET, ("'--log-format'", "xml"),
                             options=("--log-format", "xml")),
    "negative --wait": Case(SOURCE + PARQUET, ("'--wait'",), options=("--wait", "-1")),
}


@pytest.fixture(scope="module")
def orders_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = RunningServer(tmp_path_factory.mktemp("server"), {}).start()
    table = server.create_table(ORDERS)
    server.insert_rows(table, [{"Sku": "a", "Qty": 1}, {"Sku": "b", "Qty": 2}])
    yield server
    server.stop()


def _rows(server: RunningServer) -> list[dict[str, Any]]:
    with server.client() as http:
        [table] = http.get("/tables").json()["tables"]
        rows: list[dict[str, Any]] = http.get(
            f"/tables/{table['id']}/rows", params={"limit": 1000}
        ).json()["rows"]
    return rows


def _fill(template: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def _nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    if (tmp_path / "out.db").exists():
        with sqlite3.connect(tmp_path / "out.db") as db:
            assert db.execute("select name from sqlite_master").fetchall() == []
    assert not list(tmp_path.glob("*.state.json"))


def test_the_corpus_has_enough_cases() -> None:
    assert len(CASES) >= 12


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_job_fails_clearly_and_writes_nothing(
    orders_server: RunningServer, tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    key = orders_server.api_key
    values = {"key": key, "tmp": str(tmp_path)}
    job = tmp_path / "job.toml"
    job.write_text(_fill(case.body, values), encoding="utf-8")
    (tmp_path / "orders.csv").write_text(case.csv, encoding="utf-8")
    options = [_fill(o, values) for o in case.options]
    # "--job": the job file itself is the fault
    args = ["sync", options[1]] if options[:1] == ["--job"] else ["sync", str(job), *options]
    env = {"CONNECTOR_BASE_URL": orders_server.base_url, "JOB_KEY": key}
    before = _rows(orders_server)
    names = [_fill(n, {**values, "job": str(job)}) for n in case.names]

    # in-process, where the interpreter is already up: the error and no retry wait
    result = CliRunner().invoke(main, args, env={**{n: None for n in OURS}, **env})
    assert result.exit_code == case.code, (result.output, result.exception)
    assert "retrying in " not in result.output, result.output

    # the exact output: a real process
    process_env = {k: v for k, v in os.environ.items() if k not in OURS}
    done = subprocess.run([sys.executable, "-m", "connector", *args], env={**process_env, **env},
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == case.code, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for named in names:
        assert named in lines[0], (named, lines[0])
    assert "Traceback" not in done.stderr

    # never the key (nor a password), in any output or file but the job file itself
    shown = done.stdout + done.stderr + result.output
    for secret in (key, "pa55word"):
        assert secret not in shown, secret
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != job:
            assert key.encode() not in path.read_bytes(), path

    # nothing was written: the table as it was, no destination, no state
    assert _rows(orders_server) == before
    _nothing_written(tmp_path)
