"""export and load when something is wrong, and what they write that a spreadsheet might run.

Issue 9: ``--json`` prints one summary in sync's shape also when a command fails before its
first table; ``--excel-safe`` neutralises formula-like CSV cells; a table name too long for
a file name gets a shortened name with the table id (export and sync alike).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.destinations.formats import excel_safe, excel_safe_batch
from connector.destinations.registry import FILE_NAME_BYTES, kind
from connector.naming import spell
from tests.destinations.samples import wait_while_running
from tests.fixtures.server import ROOT, RunningServer, free_port

FORMULAS = ["=1+1", "+41", "-2", "@SUM(A1)", "\tx", "plain", "a=b", ""]
SHEET = {
    "name": "Sheet",
    "columns": [
        {"name": "Text", "type": "text"},
        {"name": "Pick", "type": "choice", "options": ["=HYPERLINK(1)", "ok"]},
        {"name": "Amount", "type": "number"},
    ],
}


def process(server: RunningServer | None, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`connector ARGS` as a real process, with the server's URL and key unless overridden."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    if server is not None:
        base |= {"CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key}
    return subprocess.run([sys.executable, "-m", "connector", *args], env={**base, **env},
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


# -- --json: one summary, also when the command fails before its first table

SUMMARY_FIELDS = {"job", "status", "exit_code", "dry_run", "started_at", "finished_at",
                  "state_file", "destinations", "tables", "pushes", "error", "seconds",
                  "verified", "totals", "concurrency", "max_concurrency"}


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = RunningServer(tmp_path_factory.mktemp("server"), {}).start()
    table = server.create_table({"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]})
    server.insert_rows(table, [{"Sku": "a"}])
    yield server
    server.stop()


FAILING: dict[str, tuple[list[str], dict[str, str], int, str]] = {
    "key refused": (["export"], {"CONNECTOR_API_KEY": "key_NotAKeyOfThisServer_12345"}, 2,
                    "the API key was refused"),
    "no key": (["export"], {"CONNECTOR_API_KEY": ""}, 2, "CONNECTOR_API_KEY"),
    "unreachable server": (["--max-wait", "0.2", "export"],
                           {"CONNECTOR_BASE_URL": "http://127.0.0.1:{free}/v1"}, 1,
                           "connection refused"),
    "unknown table": (["export", "--table", "Ordres"], {}, 2, "no table named 'Ordres'"),
    "--out is a file": (["export", "--out", "{tmp}/file"], {}, 2, "--out"),
    "--out under a file": (["export", "--out", "{tmp}/file/sub"], {}, 2, "--out: "),
    "--out bad scheme": (["export", "--out", "ftp://host/x"], {}, 2, "--out: unknown storage scheme"),
    "--max-concurrency 0": (["export", "--max-concurrency", "0"], {}, 2, "--max-concurrency"),
    "--max-concurrency 65": (["load", "--to", "sqlite:///{tmp}/x.db", "--max-concurrency", "65"], {}, 2,
                             "must be an integer from 1 to 64"),
    "bad --to URL": (["load", "--to", "nope://x"], {}, 2,
                     "--to: not a database URL SQLAlchemy knows ('nope')"),
    "bad --format": (["export", "--format", "xlsx"], {}, 2, "--format"),
    "unparsable --to": (["load", "--to", "not a url"], {}, 2, "--to: not a database URL"),
    "--to inside a file": (["load", "--to", "sqlite:///{tmp}/file/x.db"], {}, 1,
                           "cannot create the folder for the database"),
    # destinations are checked while the tables are listed: a bad one is still said first
    "--to inside a file, server unreachable": (
        ["--max-wait", "0.2", "load", "--to", "sqlite:///{tmp}/file/x.db"],
        {"CONNECTOR_BASE_URL": "http://127.0.0.1:{free}/v1"}, 1, "cannot create the folder for the database"),
    "--out is a file, key refused": (["export", "--out", "{tmp}/file"],
                                     {"CONNECTOR_API_KEY": "key_NotAKeyOfThisServer_12345"}, 2, "--out"),
}


@pytest.mark.needs_server  # shared_server
@pytest.mark.parametrize("name", list(FAILING))
def test_json_summary_when_failing_before_the_first_table(
    shared_server: RunningServer, tmp_path: Path, name: str
) -> None:
    args, env, code, says = FAILING[name]
    fill = {"{free}": str(free_port()), "{tmp}": str(tmp_path)}

    def filled(text: str) -> str:
        for k, v in fill.items():
            text = text.replace(k, v)
        return text

    (tmp_path / "file").write_text("not a directory")
    argv = [filled(a) for a in args]
    if "load" not in argv and "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    done = process(shared_server, *argv, "--json", **{k: filled(v) for k, v in env.items()})
    assert done.returncode == code, done.stderr
    summary = json.loads(done.stdout)  # exactly one JSON document
    assert set(summary) == SUMMARY_FIELDS
    assert summary["status"] == "failed" and summary["exit_code"] == code
    assert summary["tables"] == [] and summary["totals"]["tables"] == 0
    assert summary["state_file"] is None
    assert says in summary["error"], summary["error"]
    errors = [ln for ln in done.stderr.splitlines() if not ln.startswith("retrying in ")]
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


# -- --excel-safe


def test_excel_safe_text() -> None:
    assert [excel_safe(t) for t in FORMULAS] == [
        "'=1+1", "'+41", "'-2", "'@SUM(A1)", "'\tx", "plain", "a=b", ""]


def test_excel_safe_batch_covers_text_and_choice_columns_only() -> None:
    batch = pa.record_batch(
        [pa.array([*FORMULAS, None]), pa.array(["=a", "b"] * 4 + [None]).dictionary_encode(),
         pa.array([-1.0] * 9)],
        names=["text", "choice", "number"],
    )
    safe = excel_safe_batch(batch)
    assert safe.column(0).to_pylist() == [*(excel_safe(t) for t in FORMULAS), None]
    assert safe.column(1).to_pylist() == ["'=a", "b"] * 4 + [None]
    assert pa.types.is_dictionary(safe.column(1).type)
    assert safe.column(2).to_pylist() == [-1.0] * 9


def test_export_csv_excel_safe(server: RunningServer, tmp_path: Path) -> None:
    table = server.create_table(SHEET)
    server.insert_rows(table, [
        {"Text": t or None, "Pick": "=HYPERLINK(1)" if i % 2 else "ok", "Amount": -i}
        for i, t in enumerate(FORMULAS)
    ])
    plain = CliRunner().invoke(main, ["export", "--format", "csv", "--out", str(tmp_path / "p")],
                               env={"CONNECTOR_API_KEY": server.api_key,
                                    "CONNECTOR_BASE_URL": server.base_url})
    assert plain.exit_code == 0, plain.output
    safe = process(server, "export", "--format", "csv", "--excel-safe",
                   "--out", str(tmp_path / "s"))
    assert safe.returncode == 0, safe.stderr

    def read(directory: str) -> list[dict[str, str]]:
        with open(tmp_path / directory / "Sheet.csv", newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    raw, neutral = read("p"), read("s")
    assert [r["Text"] for r in raw] == [t for t in FORMULAS]
    assert [r["Text"] for r in neutral] == [excel_safe(t) for t in FORMULAS]
    assert [r["Pick"] for r in neutral] == [
        "'=HYPERLINK(1)" if i % 2 else "ok" for i in range(len(FORMULAS))]
    # numbers are data: a negative amount stays a number
    assert [r["Amount"] for r in neutral] == [r["Amount"] for r in raw]
    assert pd.read_csv(tmp_path / "s" / "Sheet.csv")["Amount"].tolist() == [
        -float(i) for i in range(len(FORMULAS))]


def test_excel_safe_needs_csv(server: RunningServer, tmp_path: Path) -> None:
    done = process(server, "export", "--excel-safe", "--out", str(tmp_path / "out"), "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["status"] == "failed"
    assert "--excel-safe" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


# -- names too long for a file


@pytest.mark.parametrize("name", ["x" * 300, "é" * 200, "表" * 120, "ok"])
def test_a_name_too_long_for_a_file_is_cut_and_ends_in_its_id(name: str) -> None:
    fitted = spell(name, "tbl_0123456789ab", kind("parquet").capabilities.names)
    assert len(fitted.encode("utf-8")) <= FILE_NAME_BYTES
    if len(name.encode()) <= FILE_NAME_BYTES:
        assert fitted == name
    else:
        assert fitted.endswith("-tbl_0123456789ab")
        assert name.startswith(fitted.removesuffix("-tbl_0123456789ab"))


@pytest.mark.parametrize("long", ["L" * 300, "ü" * 150])
def test_export_and_sync_shorten_a_long_name(server: RunningServer, tmp_path: Path, long: str) -> None:
    table = server.create_table({"name": long, "columns": [{"name": "A", "type": "text"}]})
    server.insert_rows(table, [{"A": "1"}, {"A": "2"}])
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    short = spell(long, table, kind("parquet").capabilities.names)  # cut: see the test above
    for fmt in ("parquet", "csv"):
        result = CliRunner().invoke(main, ["export", "--format", fmt, "--out",
                                           str(tmp_path / fmt)], env=env)
        assert result.exit_code == 0, result.output
        [written] = (p for p in (tmp_path / fmt).iterdir() if p.suffix == f".{fmt}")
        assert written.name == f"{short}.{fmt}"
        assert written.name.endswith(f"-{table}.{fmt}")
    assert len(pd.read_parquet(tmp_path / "parquet" / f"{short}.parquet")) == 2

    job = tmp_path / "job.toml"
    job.write_text(textwrap.dedent(f"""\
        [source]
        api_key_env = "JOB_KEY"
        [[destination]]
        parquet = "{tmp_path / 'synced'}"
        """))
    for _ in range(2):  # and again, incrementally, into the same file
        result = CliRunner().invoke(main, ["sync", str(job)],
                                    env={"JOB_KEY": server.api_key,
                                         "CONNECTOR_BASE_URL": server.base_url})
        assert result.exit_code == 0, result.output
    [synced] = (tmp_path / "synced").glob("*.parquet")
    assert synced.name == f"{short}.parquet"
    assert len(pd.read_parquet(synced)) == 2


# -- an interrupted first export leaves no folder it made


def test_a_stopped_first_export_removes_the_folders_it_made(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(latency_ms=40)
    table = server.create_table({"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]})
    server.insert_rows(table, [{"Sku": f"s{i}"} for i in range(3000)])
    out_dir = tmp_path / "new" / "out"
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key,
           "CONNECTOR_MAX_CONCURRENCY": "2"}
    run = subprocess.Popen(
        [sys.executable, "-m", "connector", "export", "--out", str(out_dir), "--page-size", "50"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_while_running(run, lambda: out_dir.is_dir() and bool(list(out_dir.glob(".Orders.parquet.*"))))
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143, err
    assert list(tmp_path.iterdir()) == []  # neither out nor new/ is left, empty


def test_a_failed_write_keeps_a_folder_that_holds_files(tmp_path: Path) -> None:
    from connector.atomic import atomic_path

    made = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), atomic_path(made / "x.parquet"):
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    made.mkdir(parents=True)
    (made / "other.parquet").write_text("kept")
    with pytest.raises(RuntimeError), atomic_path(made / "x.parquet"):
        raise RuntimeError("boom")
    assert [p.name for p in made.iterdir()] == ["other.parquet"]
