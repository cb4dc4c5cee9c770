"""What a destination holds after a failed or killed write, read with readers that share no
code with the destinations: every file (or table) there, what the table's own records refer
to, and the rows, value by value, beside the server's.

    Kind              one destination kind driven through the CLI: its arguments, where its
                      files are, and how to read it back
    KINDS             every kind that lives in a folder or a file
    orphans(kind, d)  the files at `d` that the kind's records do not account for, with sizes
    held_rows(...)    {row id: (Sku, N)} as the destination holds them
    server_rows(...)  the same, read from the reference server's database
    connector(...)    `python -m connector ...` as a process: (exit code, stdout, stderr)
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.server import ROOT, RunningServer

#: The table every test here writes: text that does not compress, and a number.
SPEC = {"name": "Orders", "columns": [{"name": "Sku", "type": "text"},
                                      {"name": "N", "type": "number"}]}
#: Never part of a failure's output.
NOISE = ("Traceback", "panicked", "stack backtrace", "RUST_BACKTRACE", "WARNING", "Exception")

Rows = dict[str, tuple[Any, ...]]


def rows_of(first: int, count: int) -> list[dict[str, Any]]:
    """`count` rows numbered from `first`, each with 60 characters of hex (incompressible)."""
    return [{"Sku": os.urandom(30).hex(), "N": i} for i in range(first, first + count)]


def connector(server: RunningServer, *args: str, env: dict[str, str] | None = None,
              ) -> tuple[int, str, str]:
    """`python -m connector ARGS` against `server`: exit code, stdout, stderr."""
    environ = {**os.environ, "CONNECTOR_BASE_URL": server.base_url,
               "CONNECTOR_API_KEY": server.api_key, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "connector", *args], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def command(kind: str, where: Path) -> list[str]:
    """The CLI arguments that write every table to `where` as `kind`."""
    if kind == "sqlite":
        return ["load", "--to", f"sqlite:///{where / 'w.db'}"]
    if kind == "duckdb":
        return ["load", "--to", f"duckdb:///{where / 'w.duckdb'}"]
    return ["export", "--format", kind, "--out", str(where / "out")]


def server_rows(server: RunningServer, table_id: str) -> Rows:
    """Every row of the table as the server stores it: {id: (Sku, N)}."""
    with sqlite3.connect(server.db_path) as db:
        found = db.execute("SELECT id, fields FROM rows WHERE table_id = ?", (table_id,)).fetchall()
    return {row_id: _cells(json.loads(f).get("Sku"), json.loads(f).get("N")) for row_id, f in found}


def _cells(sku: Any, n: Any) -> tuple[Any, ...]:
    return (sku, None if n is None or n == "" else float(n))


def held_rows(kind: str, where: Path) -> Rows:
    """Every row the destination holds for the table: {id: (Sku, N)}."""
    columns = ["_id", "Sku", "N"]
    if kind in ("parquet", "delta", "iceberg"):
        table = _arrow(kind, where, columns)
        ids, skus, ns = (table.column(c).to_pylist() for c in columns)
        return {i: _cells(s, n) for i, s, n in zip(ids, skus, ns, strict=True)}
    if kind == "csv":
        with open(where / "out" / "Orders.csv", newline="", encoding="utf-8") as f:
            return {r["_id"]: _cells(r["Sku"], r["N"]) for r in csv.DictReader(f)}
    if kind == "sqlite":
        with sqlite3.connect(where / "w.db") as db:
            found = db.execute('SELECT "_id", "Sku", "N" FROM "Orders"').fetchall()
    else:
        import duckdb

        with duckdb.connect(str(where / "w.duckdb"), read_only=True) as db:
            found = db.execute('SELECT "_id", "Sku", "N" FROM "Orders"').fetchall()
    return {i: _cells(s, n) for i, s, n in found}


def _arrow(kind: str, where: Path, columns: list[str]) -> Any:
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(where / "out" / "Orders.parquet", columns=columns)
    if kind == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(where / "out" / "Orders")).to_pyarrow_table(columns=columns)
    return iceberg_table(where / "out").scan(selected_fields=tuple(columns)).to_arrow()


def iceberg_table(folder: Path) -> Any:
    """The table in the folder's own catalog (pyiceberg's SQL catalog keeps its tables under
    the catalog's name: ours is ``connector``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("connector", uri=f"sqlite:///{folder / 'catalog.db'}", warehouse=str(folder))
    return catalog.load_table(("tabledata", "Orders"))


def files(folder: Path) -> dict[str, int]:
    """Every file under `folder`, by its path relative to it, with its size."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size
            for p in folder.rglob("*") if p.is_file()}


def orphans(kind: str, where: Path) -> dict[str, int]:
    """The files at `where` (with sizes) that nothing the kind keeps accounts for: not the
    table's file, not a file of a Delta version or an Iceberg snapshot or metadata log,
    not the database, not the record of names."""
    found = files(where)
    return {name: size for name, size in found.items() if name not in _accounted(kind, where)}


def _accounted(kind: str, where: Path) -> set[str]:
    if kind in ("parquet", "csv"):
        return {f"out/Orders.{kind}", "out/_connector_tables.json"}
    if kind == "sqlite":
        return {"w.db"}
    if kind == "duckdb":
        return {"w.duckdb"}
    if kind == "delta":
        return {"out/_connector_tables.json", *(f"out/Orders/{n}" for n in delta_files(where / "out" / "Orders"))}
    return {"out/_connector_tables.json", "out/catalog.db", *_iceberg_files(where / "out")}


def delta_files(table: Path) -> set[str]:
    """The commits of the Delta table in the folder `table` and the data files of every one
    of its versions, relative to the folder."""
    from deltalake import DeltaTable

    if not (table / "_delta_log").is_dir():
        return set()
    commits = {f"_delta_log/{p.name}" for p in (table / "_delta_log").glob("*.json")}
    data = set()
    for version in range(DeltaTable(str(table)).version() + 1):
        uris = DeltaTable(str(table), version=version).file_uris()
        data |= {Path(u.removeprefix("file://")).relative_to(table).as_posix() for u in uris}
    return commits | data


def _iceberg_files(folder: Path) -> set[str]:
    """The metadata files of an Iceberg table (current and logged) and, for every snapshot,
    its manifest list, manifests and the data files they name (deleted entries too)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = iceberg_table(folder)
    except NoSuchTableError:
        return set()
    paths = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    return {Path(p.removeprefix("file://")).relative_to(folder.parent).as_posix() for p in paths}


@dataclass(frozen=True)
class Kind:
    """A kind as a full-disk test writes it: on a tmpfs of `disk`, filled to within `left`
    bytes, `more` rows are added to the 2,000 written first."""

    name: str
    #: The database kinds need room for the old and the new table at once (and DuckDB
    #: for its checkpoint).
    disk: str = "2m"
    more: int = 2500
    left: int = 100_000


KINDS = [
    Kind("parquet"), Kind("csv"), Kind("duckdb", "4m"), Kind("delta"), Kind("iceberg"),
    # a transaction past SQLite's page cache spills into the database file: the disk
    # fills there, and SQLite's own rollback leaves its journal "hot"
    Kind("sqlite", "8m", more=15_000, left=600_000),
]


def until(check: Callable[[], bool]) -> Callable[[], bool]:
    """`check`, made safe to poll while a process changes the files it looks at."""
    def poll() -> bool:
        try:
            return check()
        except (OSError, ValueError):
            return False

    return poll
