"""Every table lands as itself, in every destination kind: tables whose names collide once a
destination's rules apply (separators, case, a literal ``-<id>`` suffix) get objects of their
own, a table keeps its name whichever tables a key can see, and a name that cannot be given
stops the run before anything is written. Each destination is read back with a reader of its
own and compared with the server, row by row (`connector.naming`)."""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.destinations.held import FolderRecord
from tests.destinations.helpers import Place
from tests.destinations.test_iceberg import IcebergPlace
from tests.fixtures.server import RunningServer

KINDS = ["parquet", "csv", "delta", "iceberg", "sqlite", "postgresql", "duckdb"]
SPEC_COLUMNS = [{"name": "Label", "type": "text"}]


@dataclass
class Out:
    """One destination of a kind: the command that writes to it and a reader of its own."""

    kind: str
    location: str

    def command(self, *extra: str) -> list[str]:
        if self.kind in ("sqlite", "postgresql", "duckdb"):
            return ["load", "--to", self.location, *extra]
        return ["export", "--format", self.kind, "--out", self.location, *extra]

    def labels(self, name: str) -> dict[str, str] | None:
        """Row id -> Label of the table called `name` here (None: no such table)."""
        if self.kind == "csv":
            path = Path(self.location) / f"{name}.csv"
            if not path.is_file():
                return None
            with path.open(newline="", encoding="utf-8") as f:
                return {r["_id"]: r["Label"] for r in csv.DictReader(f)}
        place: Any = (IcebergPlace(self.location) if self.kind == "iceberg"
                      else Place(self.kind, self.location))
        held = place.held(name)
        return None if held is None else {i: r["Label"] for i, r in held.items()}


@pytest.fixture(params=KINDS)
def out(request: pytest.FixtureRequest, tmp_path: Path) -> Out:
    kind = request.param
    if kind == "sqlite":
        return Out(kind, f"sqlite:///{tmp_path / 'w.db'}")
    if kind == "duckdb":
        return Out(kind, f"duckdb:///{tmp_path / 'w.duckdb'}")
    if kind == "postgresql":
        return Out(kind, str(request.getfixturevalue("postgres_db")))
    return Out(kind, str(tmp_path / "out"))


def run(server: RunningServer, args: list[str], key: str | None = None) -> Result:
    env = {"CONNECTOR_API_KEY": key or server.api_key, "CONNECTOR_BASE_URL": server.base_url}
    return CliRunner().invoke(main, [*args, "--json"], env=env)


def table(server: RunningServer, name: str, *labels: str) -> tuple[str, dict[str, str]]:
    """A table called `name` with a row per label: its id, and row id -> Label."""
    table_id = server.create_table({"name": name, "columns": SPEC_COLUMNS})
    rows = server.insert_rows(table_id, [{"Label": label} for label in labels])
    return table_id, {r["id"]: r["fields"]["Label"] for r in rows}


def targets(result: Result) -> dict[str, str]:
    """Table id -> the name of the object the summary says it went to (a file's or
    folder's name without its suffix, a SQL table's name)."""
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    kind = summary["destinations"][0].partition(":")[0]
    return {t["table_id"]: name_in(kind, t["targets"][0]) for t in summary["tables"]}


def name_in(kind: str, target: str) -> str:
    if kind in ("parquet", "csv", "delta", "iceberg"):
        return Path(target).name.removesuffix(f".{kind}")
    return target


def test_names_equal_once_made_safe_land_in_objects_of_their_own(
    server: RunningServer, out: Out
) -> None:
    tables = [table(server, name, f"row of {name}") for name in ("a/b", "a_b", "a\\b")]

    went = targets(run(server, out.command()))

    names = {table_id: went[table_id] for table_id, _ in tables}
    assert len({n.casefold() for n in names.values()}) == 3, names
    for table_id, rows in tables:  # each object holds exactly its table's rows
        assert out.labels(names[table_id]) == rows, (out.kind, names[table_id])


def test_case_twins_and_a_literal_suffix_never_share_an_object(
    server: RunningServer, out: Out
) -> None:
    upper = table(server, "Orders", "upper 1", "upper 2")
    lower = table(server, "orders", "lower 1")
    literal = table(server, f"orders-{lower[0]}", "literal 1", "literal 2", "literal 3")

    went = targets(run(server, out.command()))

    names = {t: went[t] for t, _ in (upper, lower, literal)}
    assert len({n.casefold() for n in names.values()}) == 3, names
    for table_id, rows in (upper, lower, literal):
        assert out.labels(names[table_id]) == rows, (out.kind, names)


def test_a_table_keeps_its_name_whatever_the_key_can_see(
    server: RunningServer, out: Out
) -> None:
    upper_id, upper_rows = table(server, "Orders", "upper")
    lower_id, lower_rows = table(server, "orders", "lower")
    only_lower = server.create_key(tables=[lower_id])

    first = targets(run(server, out.command(), key=only_lower))  # sees orders alone
    everything = targets(run(server, out.command()))
    again = targets(run(server, out.command(), key=only_lower))

    assert first[lower_id] == everything[lower_id] == again[lower_id]
    assert everything[upper_id].casefold() != first[lower_id].casefold()
    assert out.labels(everything[upper_id]) == upper_rows
    assert out.labels(again[lower_id]) == lower_rows


def test_a_name_held_by_another_table_is_never_handed_out(
    server: RunningServer, out: Out
) -> None:
    upper_id, upper_rows = table(server, "Orders", "upper")
    lower_id, lower_rows = table(server, "orders", "lower")
    only_upper = server.create_key(tables=[upper_id])
    only_lower = server.create_key(tables=[lower_id])

    held = targets(run(server, out.command(), key=only_upper))[upper_id]
    went = targets(run(server, out.command(), key=only_lower))[lower_id]

    assert went == f"orders-{lower_id}"
    assert out.labels(held) == upper_rows  # not replaced by orders' rows
    assert out.labels(went) == lower_rows


def listing(out: Out) -> Callable[[], Any]:
    """What the destination holds, to compare before and after a refused run."""
    if out.kind in ("sqlite", "postgresql", "duckdb"):
        place = Place(out.kind, out.location)
        return lambda: {t: place.rows(t) for t in place.tables()}
    folder = Path(out.location)
    return lambda: sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns)
                          for p in folder.rglob("*"))


def test_a_rename_onto_a_held_name_stops_before_writing_naming_both_tables(
    server: RunningServer, out: Out
) -> None:
    upper_id, upper_rows = table(server, "Orders", "upper")
    lower_id, _ = table(server, "orders", "lower")
    targets(run(server, out.command()))
    before = listing(out)()
    server.insert_rows(lower_id, [{"Label": "more"}])

    refused = run(server, out.command("--rename", "orders=ORDERS"))

    assert refused.exit_code == 2, refused.output
    error = json.loads(refused.stdout)["error"]
    assert upper_id in error and lower_id in error and "--rename" in error, error
    assert listing(out)() == before  # nothing written anywhere
    moved = targets(run(server, out.command("--rename", f"{lower_id}=orders_lower")))
    assert moved[lower_id] == "orders_lower"
    assert out.labels("orders_lower") is not None and len(out.labels("orders_lower") or {}) == 2
    assert out.labels(moved[upper_id]) == upper_rows


def test_the_record_of_names_says_which_table_each_name_holds(
    server: RunningServer, tmp_path: Path
) -> None:
    upper_id, _ = table(server, "Orders", "upper")
    lower_id, _ = table(server, "orders", "lower")
    targets(run(server, ["export", "--out", str(tmp_path)]))
    record = json.loads((tmp_path / "_connector_tables.json").read_text())
    assert {e["name"]: e["table_id"] for e in record["tables"]} == {
        "Orders": upper_id, f"orders-{lower_id}": lower_id}


def test_a_run_records_every_name_in_one_rewrite_and_a_run_after_it_in_none(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first table to commit records the names of all the run's tables, though tables
    commit on threads; a run whose names are all held rewrites nothing."""
    rewrites: list[dict[str, str]] = []
    claim = FolderRecord.claim

    def counted(record: FolderRecord, names: dict[str, str]) -> None:
        rewrites.append(dict(names))
        claim(record, names)

    monkeypatch.setattr(FolderRecord, "claim", counted)
    made = dict(table(server, f"T{i:02d}", "x") for i in range(24))

    went = targets(run(server, ["export", "--out", str(tmp_path)]))

    assert [set(r.values()) for r in rewrites] == [set(made)]
    record = json.loads((tmp_path / "_connector_tables.json").read_text())
    assert {e["table_id"]: e["name"] for e in record["tables"]} == went
    assert targets(run(server, ["export", "--out", str(tmp_path)])) == went
    assert len(rewrites) == 1  # every name held already: nothing rewritten


@pytest.mark.parametrize(
    ("kind", "columns", "says"),
    [
        ("postgresql", ["c" * 64], "is 64 bytes long; it holds names of at most 63"),
        ("sqlite", ["Name", "name"], "columns 'Name' and 'name' would be one column"),
        ("duckdb", ["Name", "name"], "columns 'Name' and 'name' would be one column"),
        ("delta", ["Name", "name"], "columns 'Name' and 'name' would be one column"),
    ],
)
def test_columns_a_destination_cannot_hold_fail_that_table_before_any_write(
    server: RunningServer, request: pytest.FixtureRequest, tmp_path: Path,
    kind: str, columns: list[str], says: str,
) -> None:
    if kind == "postgresql":
        out = Out(kind, str(request.getfixturevalue("postgres_db")))
    elif kind == "delta":
        out = Out(kind, str(tmp_path / "out"))
    else:
        out = Out(kind, f"{kind}:///{tmp_path / 'w.db'}")
    first_id, first_rows = table(server, "First", "fine")
    bad = server.create_table({"name": "Wide", "columns": [{"name": c, "type": "text"} for c in columns]})
    server.insert_rows(bad, [dict.fromkeys(columns, "x")])
    last_id, last_rows = table(server, "Last", "fine too")

    result = run(server, out.command())

    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    by_id = {t["table_id"]: t for t in summary["tables"]}
    assert set(by_id) == {first_id, bad, last_id}  # every table is in the summary
    assert by_id[bad]["status"] == "failed" and says in by_id[bad]["error"]
    assert "nothing was written" in by_id[bad]["error"] and "--exclude" in by_id[bad]["error"]
    assert (by_id[first_id]["status"], by_id[last_id]["status"]) == ("ok", "ok")
    assert out.labels("First") == first_rows and out.labels("Last") == last_rows
    assert out.labels("Wide") is None  # nothing of it written


def test_export_leaves_out_the_tables_excluded(server: RunningServer, tmp_path: Path) -> None:
    kept_id, kept_rows = table(server, "Kept", "k")
    table(server, "Left", "l")
    went = targets(run(server, ["export", "--out", str(tmp_path), "--exclude", "left"]))
    assert set(went) == {kept_id}
    assert Out("parquet", str(tmp_path)).labels("Kept") == kept_rows
    assert not (tmp_path / "Left.parquet").exists()


def test_names_with_controls_print_escaped_one_line_each_and_name_the_real_file(
    server: RunningServer, tmp_path: Path
) -> None:
    """A server may send any name: ours refuses control and bidi characters, so one is put
    into its store directly."""
    table_id, rows = table(server, "plain", "x")
    evil = "two\nlines\x1b[31m red\u202eevil\x00"
    with sqlite3.connect(server.db_path) as db:
        db.execute("UPDATE tables SET name = ? WHERE id = ?", (evil, table_id))
    server.restart()
    env = {"CONNECTOR_API_KEY": server.api_key, "CONNECTOR_BASE_URL": server.base_url}

    exported = CliRunner().invoke(main, ["export", "--out", str(tmp_path / "out")], env=env)
    listed = CliRunner().invoke(main, ["tables"], env=env)

    for result in (exported, listed):
        assert result.exit_code == 0, result.output
        assert not {"\x1b", "\u202e", "\x00"} & set(result.output), result.output
        assert sum(repr(evil) in line for line in result.output.splitlines()) == 1
    [line] = [ln for ln in exported.output.splitlines() if repr(evil) in ln]
    written = Path(line.rpartition("-> ")[2])
    assert written.is_file()  # the path printed is the file written
    assert Out("parquet", str(tmp_path / "out")).labels(written.stem) == rows
