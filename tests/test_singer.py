"""tap-tabledata: singer-sdk's standard tap tests, and syncs compared with the server.

singer-sdk builds its standard test class at import (it discovers the streams to
parametrize the tests), so this module starts its reference server (the demo workspace) when
it is collected, and stops it when its tests end (or, if none of them ran, at exit). The
other tests run `tap-tabledata` as a user does, a process each, against servers of their own.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from singer_sdk.testing import get_tap_test_class

from connector.jobs.config import DEFAULT_LOOKBACK
from connector.singer.tap import TapTableData
from tests.fixtures.server import RunningServer

pytestmark = pytest.mark.needs_server  # DEMO, started as the module is collected

TAP = str(Path(sys.executable).with_name("tap-tabledata"))


def _demo_server() -> RunningServer:
    folder = tempfile.mkdtemp(prefix="tap-tabledata-")
    running = RunningServer(Path(folder), {"demo": True})
    atexit.register(shutil.rmtree, folder, True)  # after the stop: atexit runs last first
    atexit.register(running.stop)
    return running.start()


DEMO = _demo_server()

TestTapTableData = get_tap_test_class(
    TapTableData, config={"base_url": DEMO.base_url, "api_key": DEMO.api_key}
)


@pytest.fixture(scope="module", autouse=True)
def _stop_demo_server() -> Iterator[None]:
    yield
    DEMO.stop()


# --- syncs as a user runs them ------------------------------------------------------------

DEALS = {
    "name": "Deals",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Stage", "type": "choice", "options": ["New", "Won", "Lost"]},
        {"name": "Amount", "type": "number"},
        {"name": "Paid", "type": "checkbox"},
        {"name": "Due", "type": "date"},
    ],
}


def deal(i: int) -> dict[str, Any]:
    return {
        "Name": f"deal {i} — ünïcode",
        "Stage": ["New", "Won", "Lost", None][i % 4],
        "Amount": None if i % 7 == 0 else i * 1.5,
        "Paid": None if i % 5 == 0 else i % 2 == 0,
        "Due": None if i % 6 == 0 else f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}",
    }


class Tap:
    """A server with Deals (150 rows: two pages) and the tap's config file for it."""

    def __init__(self, server: RunningServer, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self.deals = server.create_table(DEALS)
        server.insert_rows(self.deals, [deal(i) for i in range(150)])
        self.write_config()

    def write_config(self, **extra: Any) -> Path:
        path = self.directory / "config.json"
        config = {"base_url": self.server.base_url, "api_key": self.server.api_key, **extra}
        path.write_text(json.dumps(config))
        return path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [TAP, "--config", str(self.directory / "config.json"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, done.stderr[-3000:]
        return done

    def sync(self, state: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The records of a sync (with `state`), and the last STATE message's value."""
        args: list[str] = []
        if state is not None:
            path = self.directory / "state.json"
            path.write_text(json.dumps(state))
            args = ["--state", str(path)]
        messages = [json.loads(line) for line in self.run(*args).stdout.splitlines()]
        records = [m["record"] for m in messages if m["type"] == "RECORD"]
        assert {m["stream"] for m in messages if m["type"] == "RECORD"} <= {"Deals"}
        states = [m["value"] for m in messages if m["type"] == "STATE"]
        return records, states[-1]

    def server_rows(self) -> dict[str, dict[str, Any]]:
        with self.server.client() as http:
            page = http.get(f"/tables/{self.deals}/rows", params={"limit": 1000}).json()
        assert len(page["rows"]) < page["limit"]
        return {r["id"]: r for r in page["rows"]}

    def age_every_row(self, hours: float) -> dt.datetime:
        """Stamps every row `hours` in the past (straight into the server's SQLite file), so
        the lookback window behind a bookmark holds none of them; returns that time."""
        then = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours)
        with sqlite3.connect(self.server.db_path) as db:
            db.execute("UPDATE rows SET updated_at = ?, created_at = ?", (_iso(then), _iso(then)))
        return then

    def backdate(self, row_id: str, stamp: dt.datetime) -> None:
        with sqlite3.connect(self.server.db_path) as db:
            db.execute("UPDATE rows SET updated_at = ? WHERE id = ?", (_iso(stamp), row_id))


def _iso(stamp: dt.datetime) -> str:
    return stamp.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def tap(server: RunningServer, tmp_path: Path) -> Tap:
    return Tap(server, tmp_path)


def assert_records_match(records: list[dict[str, Any]], server: dict[str, dict[str, Any]]) -> None:
    by_id = {r["_id"]: r for r in records}
    assert len(by_id) == len(records)
    assert set(by_id) == set(server)
    for row_id, row in server.items():
        got, fields = by_id[row_id], row["fields"]
        assert _parse(got["_created_at"]) == _parse(row["created_at"])
        assert _parse(got["_updated_at"]) == _parse(row["updated_at"])
        assert got["Name"] == fields["Name"]
        assert got["Stage"] == fields.get("Stage")
        assert got["Amount"] == fields.get("Amount")
        assert got["Paid"] == fields.get("Paid")
        assert got["Due"] == fields.get("Due")


def test_a_full_sync_sends_every_row_typed_and_a_bookmark(tap: Tap) -> None:
    records, state = tap.sync()

    server = tap.server_rows()
    assert_records_match(records, server)
    bookmark = state["bookmarks"]["Deals"]
    assert bookmark["replication_key"] == "_updated_at"
    newest = max(_parse(r["updated_at"]) for r in server.values())
    assert _parse(bookmark["replication_key_value"]) == newest


def test_discovery_types_each_column_from_the_schema(tap: Tap) -> None:
    catalog = json.loads(tap.run("--discover").stdout)

    (stream,) = catalog["streams"]
    assert (stream["tap_stream_id"], stream["key_properties"], stream["replication_key"]) == (
        "Deals", ["_id"], "_updated_at"
    )
    assert stream["schema"]["properties"] == {
        "_id": {"type": "string"},
        "_created_at": {"type": ["string", "null"], "format": "date-time"},
        "_updated_at": {"type": ["string", "null"], "format": "date-time"},
        "Name": {"type": ["string", "null"]},
        "Stage": {"type": ["string", "null"]},
        "Amount": {"type": ["number", "null"]},
        "Paid": {"type": ["boolean", "null"]},
        "Due": {"type": ["string", "null"], "format": "date"},
    }


def in_window(server: dict[str, dict[str, Any]], bookmark: dt.datetime) -> set[str]:
    """The rows an incremental sync from `bookmark` reads: updated after it less the window."""
    since = bookmark - dt.timedelta(seconds=DEFAULT_LOOKBACK)
    return {i for i, r in server.items() if _parse(r["updated_at"]) > since}


def test_an_incremental_sync_sends_the_changed_rows_and_the_late_ones_in_the_window(
    tap: Tap,
) -> None:
    then = tap.age_every_row(hours=2)
    ids = sorted(tap.server_rows())
    tap.backdate(ids[-1], then + dt.timedelta(hours=1))  # the newest row: the bookmark
    _, state = tap.sync()
    bookmark = _parse(state["bookmarks"]["Deals"]["replication_key_value"])
    assert bookmark == then + dt.timedelta(hours=1)
    with tap.server.client() as http:
        created = http.post(f"/tables/{tap.deals}/rows", json={"fields": deal(500)}).json()["id"]
        for row_id in ids[:2]:
            http.patch(f"/tables/{tap.deals}/rows/{row_id}", json={"fields": {"Stage": "Lost"}})
    tap.backdate(ids[10], bookmark - dt.timedelta(seconds=60))  # a late commit, in the window
    tap.backdate(ids[11], bookmark - dt.timedelta(minutes=30))  # too late for the window

    records, later = tap.sync(state)

    server = tap.server_rows()
    expected = in_window(server, bookmark)
    assert expected == {created, ids[0], ids[1], ids[10], ids[-1]}
    assert_records_match(records, {i: server[i] for i in expected})
    newest = max(_parse(r["updated_at"]) for r in server.values())
    assert _parse(later["bookmarks"]["Deals"]["replication_key_value"]) == newest

    again, _ = tap.sync(later)
    assert_records_match(again, {i: server[i] for i in in_window(server, newest)})


def test_start_date_bounds_the_first_incremental_sync(tap: Tap) -> None:
    then = tap.age_every_row(hours=2)
    ids = sorted(tap.server_rows())
    tap.backdate(ids[0], then + dt.timedelta(hours=1))
    tap.write_config(start_date=_iso(then + dt.timedelta(minutes=30)))

    records, _ = tap.sync()

    assert [r["_id"] for r in records] == [ids[0]]


def test_a_wrong_key_is_one_line_without_the_key_and_exit_2(tap: Tap) -> None:
    tap.write_config(api_key="wrong-key-123")
    done = tap.run("--discover", check=False)
    assert done.returncode == 2  # a refused key is a configuration error
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert lines and lines[-1].startswith("tap-tabledata: error: 401")
    assert "Traceback" not in done.stderr
    assert "wrong-key-123" not in done.stderr + done.stdout


def test_an_unknown_table_is_a_usage_error_naming_the_close_match(tap: Tap) -> None:
    tap.write_config(tables=["Deal"])
    done = tap.run("--discover", check=False)
    assert done.returncode == 2
    assert "did you mean 'Deals'?" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_key_is_never_printed(tap: Tap) -> None:
    done = tap.run("--about")
    sync = tap.run()
    for output in (done.stdout, done.stderr, sync.stdout, sync.stderr):
        assert tap.server.api_key not in output


def test_without_the_extra_the_command_names_it_on_one_line() -> None:
    """singer-sdk hidden from the import system, as on an install without the extra."""
    code = (
        "import sys; sys.modules['singer_sdk'] = None; "
        "from connector.singer import main; main(['--help'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "tap-tabledata: error: tap-tabledata (the Singer tap) needs an optional dependency: "
        "pip install 'table-data-connector[singer]'"
    )


def test_a_catalog_asking_for_full_table_reads_every_row_despite_the_bookmark(tap: Tap) -> None:
    then = tap.age_every_row(hours=2)
    newest = sorted(tap.server_rows())[-1]
    tap.backdate(newest, then + dt.timedelta(hours=1))  # incremental would read it alone
    _, state = tap.sync()
    assert [r["_id"] for r in tap.sync(state)[0]] == [newest]
    catalog = json.loads(tap.run("--discover").stdout)
    (stream,) = catalog["streams"]
    stream["replication_method"] = "FULL_TABLE"
    (tap.directory / "catalog.json").write_text(json.dumps(catalog))
    (tap.directory / "state.json").write_text(json.dumps(state))

    done = tap.run("--catalog", str(tap.directory / "catalog.json"),
                   "--state", str(tap.directory / "state.json"))  # fmt: skip

    messages = [json.loads(line) for line in done.stdout.splitlines()]
    assert_records_match([m["record"] for m in messages if m["type"] == "RECORD"], tap.server_rows())


def test_tables_named_alike_in_any_case_are_streams_of_their_own(tap: Tap) -> None:
    """Targets name a table after its stream: ``Notes`` and ``notes`` must not be one."""
    ids = {}
    for name in ("Notes", "notes"):
        ids[name] = tap.server.create_table({"name": name, "columns": [{"name": "Text", "type": "text"}]})
        tap.server.insert_rows(ids[name], [{"Text": f"from {name}"}])
    tap.write_config(tables=list(ids))
    messages = [json.loads(line) for line in tap.run().stdout.splitlines()]
    by_stream: dict[str, set[str]] = {}
    for m in messages:
        if m["type"] == "RECORD":
            by_stream.setdefault(m["stream"], set()).add(m["record"]["Text"])
    assert len({s.casefold() for s in by_stream}) == 2, by_stream
    assert sorted(by_stream.values(), key=sorted) == [{"from Notes"}, {"from notes"}]
    assert by_stream["Notes"] == {"from Notes"}  # the first listed keeps its name


def test_the_first_run_needs_no_state_and_the_next_starts_from_the_last(tap: Tap) -> None:
    """docs/scheduling.md's Singer lines, run as written in a fresh folder (tap.json given
    this server and table, the key in the environment), a target's part done here: a
    Singer target prints each state it has committed on stdout, one JSON object a line."""
    from tests.test_readme import commands

    shown = [c.text for c in commands() if c.section == "Singer: `tap-tabledata`"]
    config, discover, first, last_state, later = shown
    assert "--state" not in first and "--state state.json" in later
    folder = tap.directory / "fresh"
    folder.mkdir()
    env = {**os.environ, "CONNECTOR_API_KEY": tap.server.api_key,
           "PATH": f"{Path(TAP).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip

    def shell(command: str) -> str:
        done = subprocess.run(["bash", "-c", command.replace("CONNECTOR_API_KEY=… ", "")],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, (command, done.stderr[-3000:])
        return done.stdout

    def target(command: str, redirect: str) -> list[dict[str, Any]]:
        """The tap's side of ``tap | target-jsonl > state.jsonl``; the states, as the target
        would print them, into state.jsonl; the records back."""
        tap_part, _, target_part = command.partition(" | ")
        assert target_part.split("#")[0].split() == ["target-jsonl", redirect, "state.jsonl"]
        messages = [json.loads(line) for line in shell(tap_part).splitlines()]
        states = "".join(json.dumps(m["value"]) + "\n" for m in messages if m["type"] == "STATE")
        with (folder / "state.jsonl").open("a" if redirect == ">>" else "w") as out:
            out.write(states)
        return [m["record"] for m in messages if m["type"] == "RECORD"]

    shell(config)
    written = json.loads((folder / "tap.json").read_text())
    (folder / "tap.json").write_text(json.dumps({**written, "base_url": tap.server.base_url, "tables": ["Deals"]}))
    shell(discover)
    assert [s["tap_stream_id"] for s in json.loads((folder / "catalog.json").read_text())["streams"]] == ["Deals"]
    then = tap.age_every_row(hours=2)  # the window behind the first bookmark holds one row
    ids = sorted(tap.server_rows())
    tap.backdate(ids[-1], then + dt.timedelta(hours=1))
    assert not (folder / "state.json").exists()

    assert_records_match(target(first, ">"), tap.server_rows())
    shell(last_state)
    with tap.server.client() as http:
        http.patch(f"/tables/{tap.deals}/rows/{ids[3]}", json={"fields": {"Stage": "Won"}})
    again = target(later, ">>")
    server = tap.server_rows()
    assert in_window(server, then + dt.timedelta(hours=1)) == {ids[3], ids[-1]}
    assert_records_match(again, {i: server[i] for i in (ids[3], ids[-1])})
