"""A job's folder and state file, however broken, give one line and exit 2, never a
traceback: a read-only folder, a state file with a wrong key, type or value, cut short at
any byte, or not a state at all. A state file that loads is one a run can use.

The suite runs as root, which ignores file permissions: the read-only folder is a real
read-only mount (a bind mount remounted read-only in a private mount namespace, `unshare`),
what ``[Errno 30] Read-only file system`` comes from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.errors import ConfigError, ExitCode
from connector.jobs.reads import lower_bound
from connector.jobs.state import JobState, RunRecord, TableState, load_state, save_state
from connector.schema import Column
from connector.stamps import micros, parse
from tests.fixtures.server import ROOT

JOB = (
    '[source]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "JOB_KEY"\n'
    '[sync]\nincremental = true\n[[destination]]\nparquet = "pq"\n'
)
COLUMNS = (
    {"id": "col_Name", "name": "Name", "type": "text", "required": True, "options": None},
    {"id": "col_Team", "name": "Team", "type": "choice", "required": False,
     "options": ["Red", "Blue"]},
)
STATE = JobState(
    tables={
        "tbl_1": TableState("tbl_1", "People", "2026-01-02T03:04:05.000006Z", 10, "abc",
                            "2026-01-02T03:05:00.000000Z", "2026-01-02T02:59:05.000006Z",
                            COLUMNS),
        "tbl_2": TableState("tbl_2", "Notes", None, 0, "def", "2026-01-02T03:05:00Z"),
    },
    last_run=RunRecord("2026-01-02T03:04:00.000000Z", "2026-01-02T03:05:00.000000Z",
                       "partial", 10, 1),
    runs_since_verify=3,
    job_file="/somewhere/job.toml",
)


def sync(folder: Path, *args: str, wrap: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`connector sync job.toml` in `folder` (the server is never reached: the lock and the
    state come first)."""
    return subprocess.run(
        [*(wrap or []), sys.executable, "-m", "connector", "sync", str(folder / "job.toml"), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "JOB_KEY": "k" * 20},
    )


def one_line_exit_2(done: subprocess.CompletedProcess[str], *wanted: str) -> str:
    assert done.returncode == ExitCode.USAGE == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    (line,) = done.stderr.strip().splitlines()
    for text in wanted:
        assert text in line, line
    return line


# --- a read-only folder -----------------------------------------------------------------------


def read_only(folder: Path) -> list[str]:
    """A command prefix running what follows with `folder` mounted read-only over itself."""
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is needed to mount a folder read-only"
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    return [unshare, "--mount", "--map-root-user", "sh", "-c", script, "sh", str(folder)]


@pytest.mark.slow
def test_the_read_only_mount_is_real(tmp_path: Path) -> None:
    done = subprocess.run([*read_only(tmp_path), "touch", str(tmp_path / "probe")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Read-only file system" in done.stderr, done.stderr
    assert not (tmp_path / "probe").exists()


@pytest.mark.slow
@pytest.mark.parametrize("ran_before", [False, True], ids=["never-ran", "ran-before"])
def test_a_read_only_job_folder_is_one_line_and_exit_2(tmp_path: Path, ran_before: bool) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    if ran_before:  # its lock file and state are there, and writable but for the mount
        (tmp_path / "job.lock").write_text("")
        save_state(tmp_path / "job.state.json", STATE)
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir())

    text = sync(tmp_path, wrap=read_only(tmp_path))
    as_json = sync(tmp_path, "--log-format", "json", wrap=read_only(tmp_path))

    one_line_exit_2(text, f"{tmp_path / 'job.lock'}: cannot open the job's lock file",
                    "Read-only file system", "--state-dir")
    assert as_json.returncode == 2 and "Traceback" not in as_json.stderr, as_json.stderr
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir()) == before


# --- bad state files through the CLI ----------------------------------------------------------


def saved() -> dict[str, Any]:
    """`STATE` as `save_state` writes it."""
    raw: dict[str, Any] = json.loads(json.dumps({
        "version": 2,
        "tables": {k: {f: getattr(v, f) for f in TableState.__dataclass_fields__}
                   for k, v in STATE.tables.items()},
        "last_run": STATE.last_run.__dict__ if STATE.last_run else None,
        "runs_since_verify": STATE.runs_since_verify,
        "job_file": STATE.job_file,
    }))
    return raw


def with_value(path: tuple[str, ...], value: Any) -> bytes:
    data = saved()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(data).encode()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "named"),
    [
        (with_value(("tables", "tbl_1", "cursor"), "garbage"), "tables.tbl_1.cursor"),
        (with_value(("tables", "tbl_1", "settled"), "2026-01-02"), "tables.tbl_1.settled"),
        (with_value(("tables", "tbl_1", "rows"), -1), "tables.tbl_1.rows"),
        (with_value(("tables", "tbl_2", "columns"), [{"name": 5}]), "tables.tbl_2.columns[0].name"),
        (with_value(("last_run", "status"), "great"), "last_run.status"),
        (with_value(("version",), 3), "version"),
        (json.dumps(saved()).encode()[:77], "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
    ids=["garbage-cursor", "date-settled", "negative-rows", "column-name", "run-status",
         "version", "truncated", "not-utf8"],
)
def test_a_bad_state_file_is_one_line_and_exit_2(tmp_path: Path, content: bytes, named: str) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    (tmp_path / "job.state.json").write_bytes(content)

    line = one_line_exit_2(sync(tmp_path), f"{tmp_path / 'job.state.json'}: the job state is unreadable",
                           named, "delete it to re-sync every table in full")
    assert line.startswith("error: ")
    assert (tmp_path / "job.state.json").read_bytes() == content


# --- the fuzz: the library call -------------------------------------------------------------


def loads_or_refuses(path: Path, content: bytes) -> JobState | None:
    """Load `content` as a state file: a state a run can use, or one ConfigError line naming
    the file; anything else (a traceback) fails the test."""
    path.write_bytes(content)
    try:
        state = load_state(path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message, message
        assert exc.exit_code == 2
        return None
    # What a run then does with it must work too.
    for table in state.tables.values():
        if table.cursor is not None:
            lower_bound(table.cursor, table.settled, 300.0)
            micros(table.cursor)
        parse(table.synced_at)
        for column in table.columns or ():
            Column.from_api(column)
    if state.last_run is not None:
        parse(state.last_run.finished_at)
    if state.job_file is not None:
        Path(state.job_file).is_file()
    save_state(path, state)
    assert load_state(path) == state
    return state


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
    | st.sampled_from(["2026-01-02T03:04:05Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
                       "garbage", "", "2026-13-01T00:00:00Z", "tbl_1", "ok", "text"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into `data` (object keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += paths(value, (*prefix, i))
    return found


FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.data())
def test_a_state_with_any_key_changed_loads_or_is_refused_in_one_line(tmp_path: Path, data: st.DataObject) -> None:
    state = saved()
    where = data.draw(st.sampled_from(paths(state)))
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    node = state
    for key in where[:-1]:
        node = node[key]
    if action == "delete":
        del node[where[-1]]
    elif action == "add" and isinstance(node, dict):
        node[data.draw(st.text(max_size=12))] = data.draw(json_values)
    else:
        node[where[-1]] = data.draw(json_values)
    loads_or_refuses(tmp_path / "job.state.json", json.dumps(state).encode())


@FUZZ
@given(json_values)
def test_any_json_loads_or_is_refused_in_one_line(tmp_path: Path, value: Any) -> None:
    loads_or_refuses(tmp_path / "job.state.json", json.dumps(value).encode())


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_load_or_are_refused_in_one_line(tmp_path: Path, content: bytes) -> None:
    loads_or_refuses(tmp_path / "job.state.json", content)


def test_a_state_cut_short_at_any_byte_is_refused_in_one_line(tmp_path: Path) -> None:
    whole = json.dumps(saved(), indent=2).encode()
    assert loads_or_refuses(tmp_path / "job.state.json", whole) == STATE
    for end in range(len(whole)):
        assert loads_or_refuses(tmp_path / "job.state.json", whole[:end]) is None, end


def test_deep_nesting_is_refused_in_one_line(tmp_path: Path) -> None:
    assert loads_or_refuses(tmp_path / "job.state.json", b"[" * 100_000 + b"]" * 100_000) is None
