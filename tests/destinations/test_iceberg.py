"""Apache Iceberg destinations through the protocol, read back with pyiceberg's own scan.

The whole destination specification (`tests.destinations.test_conformance`) runs here
against an Iceberg folder with its own SQLite catalog and against a PostgreSQL catalog, each
read back by `IcebergPlace`: a catalog opened by pyiceberg itself and its own table scan,
never the destination's `scan` or `stored` (except where those are the subject). Then what
is Iceberg's own: one commit (one catalog update) per change, a table readable by other
engines, memory-bounded chunks, the two merge paths, the catalog settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

import tests.destinations.test_conformance as spec
from connector.destinations import Committed, DestinationConfig, Target, open_destination
from connector.destinations import iceberg as iceberg_module
from connector.destinations.evolve import RenameColumn, RetypeColumn
from connector.destinations.registry import make_config
from connector.errors import ConfigError, DestinationError, MissingExtra
from connector.ids import IdSet
from connector.modes import WriteMode
from connector.schema import META_COLUMN_TYPE, Column, Table
from tests.destinations.helpers import Rows, apply
from tests.destinations.samples import ROWS, T0, TABLE, batches, numbered
from tests.fixtures.s3 import S3Bucket

NAMESPACE = "tabledata"

# --- reading back with pyiceberg alone -------------------------------------------------------


def _kind(type_: pa.DataType) -> str:
    if pa.types.is_floating(type_):
        return "number"
    if pa.types.is_integer(type_):
        return "int64"
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if pa.types.is_boolean(type_):
        return "checkbox"
    if pa.types.is_date(type_):
        return "date"
    if pa.types.is_timestamp(type_):
        return "timestamp"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
        return "text"
    return str(type_)


@dataclass(frozen=True)
class IcebergPlace:
    """An Iceberg destination under test (the folder `location`, the catalog `catalog` or
    the folder's own), read with pyiceberg's catalog and scan: the shape of
    `tests.destinations.helpers.Place` that the specification uses."""

    location: str
    catalog: str | None = None
    s3: S3Bucket | None = None
    kind: str = "iceberg"
    stores_choices: bool = False

    @property
    def registry_kind(self) -> str:
        return "iceberg"

    def config(self, mode: WriteMode = "replace") -> DestinationConfig:
        return make_config("iceberg", self.location, mode=mode, where="test", base=Path.cwd(),
                           catalog=self.catalog)

    def apply(self, rows: Rows = (), **kwargs: Any) -> Committed:
        return apply(self.config(kwargs.get("mode") or "replace"), rows, **kwargs)

    @contextlib.contextmanager
    def open_catalog(self) -> Iterator[Catalog | None]:
        if self.catalog is None:
            file = Path(self.location) / "catalog.db"
            if not file.is_file():
                yield None
                return
            uri = f"sqlite:///{file}"
        else:
            uri = self.catalog
        reach = {} if self.s3 is None else {"s3.endpoint": self.s3.server.endpoint,
                                            "s3.region": "us-east-1"}
        catalog = SqlCatalog("connector", uri=uri, warehouse=self.location, **reach)  # catalogs are named
        try:
            yield catalog
        finally:
            catalog.close()

    def arrow(self, name: str = "orders") -> pa.Table | None:
        with self.open_catalog() as catalog:
            if catalog is None or not catalog.table_exists((NAMESPACE, name)):
                return None
            return catalog.load_table((NAMESPACE, name)).scan().to_arrow()

    def held(self, name: str = "orders") -> dict[str, dict[str, Any]] | None:
        table = self.arrow(name)
        if table is None:
            return None
        rows = table.to_pylist()
        id_name = next(k for k in ("_id", "__id", "___id") if not rows or k in rows[0])
        out = {r[id_name]: {k: _utc(v) for k, v in r.items()} for r in rows}
        assert len(out) == len(rows), "ids held more than once"
        return out

    def types(self, name: str = "orders") -> dict[str, str]:
        table = self.arrow(name)
        assert table is not None
        return {f.name: _kind(f.type) for f in table.schema}

    def tables(self) -> list[str]:
        with self.open_catalog() as catalog:
            if catalog is None or (NAMESPACE,) not in catalog.list_namespaces():
                return []
            return sorted(t[-1] for t in catalog.list_tables(NAMESPACE))

    def metadata_versions(self, name: str = "orders") -> int:
        """How many metadata files (catalog commits) the table has had."""
        with self.open_catalog() as catalog:
            assert catalog is not None
            table = catalog.load_table((NAMESPACE, name))
            return len(table.metadata.metadata_log) + 1

    def data_files(self, name: str = "orders") -> list[str]:
        with self.open_catalog() as catalog:
            assert catalog is not None
            table = catalog.load_table((NAMESPACE, name))
            return [task.file.file_path for task in table.scan().plan_files()]


def _utc(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


# --- the specification, run against Iceberg ------------------------------------------------------


# Every test of the specification, collected here with `place` at each of Iceberg's places
# (`spec.PLACES`) when Iceberg's capabilities can run it.
globals().update({n: f for n, f in vars(spec).items() if n.startswith("test_")})
pytest_generate_tests = spec.places_of(["iceberg"])


@pytest.fixture
def place(request: pytest.FixtureRequest, tmp_path: Path) -> IcebergPlace:
    _, where = request.param
    if where == "sqlite-catalog":
        return IcebergPlace(str(tmp_path / "lake"))
    return IcebergPlace(str(tmp_path / "lake"), request.getfixturevalue(spec.SERVED[where]))


# --- Iceberg's own ---------------------------------------------------------------------------


@pytest.fixture
def lake(tmp_path: Path) -> IcebergPlace:
    return IcebergPlace(str(tmp_path / "lake"))


def test_each_change_is_one_catalog_commit(lake: IcebergPlace) -> None:
    lake.apply(numbered(10), mode="merge", mark=True)
    assert lake.metadata_versions() == 1  # created with its rows
    grown = Table(TABLE.id, TABLE.name, (*TABLE.columns, Column("Notes", "text", id="col_N")))
    row = {**numbered(1, start=3)[0], "Name": "changed", "Notes": "n"}
    from connector.destinations.evolve import AddColumn

    done = lake.apply([row], table=grown, mode="merge", mark=True, deleted=["row_0"],
                      evolve=(AddColumn("Notes", "text"),))
    assert done == Committed(written=1, deleted=1)
    assert lake.metadata_versions() == 2  # column, upsert and mark: one commit
    held = lake.held()
    assert held is not None and held["row_3"]["Notes"] == "n" and held["row_0"]["_deleted_at"]
    lake.apply(numbered(3, start=20), table=grown)
    assert lake.metadata_versions() == 3
    assert sorted(lake.held() or ()) == ["row_20", "row_21", "row_22"]


def test_the_folder_holds_the_catalog_beside_the_tables(lake: IcebergPlace) -> None:
    lake.apply(ROWS)
    folder = Path(lake.location)
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.db", NAMESPACE]
    files = lake.data_files()
    assert files and all(f.startswith(str(folder / NAMESPACE / "orders" / "data")) for f in files)
    destination = open_destination(lake.config())
    try:
        assert destination.locate(Target(TABLE, "orders")) == f"{folder}/{NAMESPACE}/orders"
    finally:
        destination.close()


def test_big_writes_go_in_chunks_of_one_data_file_each(
    lake: IcebergPlace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(iceberg_module, "CHUNK_BYTES", 20_000)
    rows = numbered(2000)
    assert lake.apply(batches(rows, size=100)) == Committed(written=2000)
    assert len(lake.data_files()) > 5  # several chunks...
    assert lake.metadata_versions() == 1  # ...in one commit
    assert spec.live(lake.held()) == spec.by_id(rows)


@pytest.mark.parametrize("limit", [0, 10_000], ids=["rewrite", "by-ids"])
def test_both_merge_paths_give_the_same_table(
    lake: IcebergPlace, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """A merge deletes its ids by predicate, or past `MERGE_IDS` rewrites the table:
    the same rows, marks and counts either way."""
    monkeypatch.setattr(iceberg_module, "MERGE_IDS", limit)
    monkeypatch.setattr(iceberg_module, "CHUNK_BYTES", 5_000)  # several data files
    lake.apply(batches(numbered(300), size=50), mode="merge", mark=True)
    changed = numbered(5, start=100, name="changed") + numbered(3, start=400, name="new")
    ids = IdSet.of([pa.array([r["_id"] for r in changed])])
    done = lake.apply(changed, mode="merge", mark=True, ids=ids,
                      deleted=["row_7", "row_8", "row_101", "row_999"])
    # row_101 is written and deleted at once: the write wins, as in every destination
    assert done == Committed(written=8, deleted=2)
    held = lake.held()
    assert held is not None and len(held) == 303
    expected = spec.by_id([*numbered(300), *changed])
    del expected["row_7"], expected["row_8"]
    assert spec.live(held) == expected
    assert held["row_7"]["_deleted_at"] is not None and held["row_7"]["Name"] == "row 7"
    assert lake.metadata_versions() == 2


def test_a_merge_by_ids_rewrites_only_the_data_files_it_touches(
    lake: IcebergPlace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(iceberg_module, "CHUNK_BYTES", 5_000)
    lake.apply(batches(numbered(300), size=50))
    before = set(lake.data_files())
    lake.apply(numbered(1, start=7, name="changed"), mode="merge")
    after = set(lake.data_files())
    assert len(before - after) == 1  # the file that held row_7, rewritten
    assert len(after - before) == 2  # it, without row_7; and the new row_7
    assert (lake.held() or {})["row_7"]["Name"] == "changed 7"


def test_a_retype_and_a_swap_of_names_rewrite_the_rows_converted(lake: IcebergPlace) -> None:
    table = Table("tbl_s", "swap", (Column("a", "text", id="c1"), Column("b", "number", id="c2")))
    row = {"_id": "r1", "_created_at": T0, "_updated_at": T0, "a": "12.5", "b": 3.0}
    lake.apply([row], table=table, mode="merge")
    swapped = Table("tbl_s", "swap", (Column("b", "number", id="c1"), Column("a", "text", id="c2")))
    done = lake.apply([], table=swapped, mode="merge", evolve=(
        RenameColumn("a", "b"), RenameColumn("b", "a"),
        RetypeColumn("b", "text", "number"), RetypeColumn("a", "number", "text")))
    assert done == Committed()
    held = lake.held("swap")
    assert held is not None and held["r1"]["b"] == 12.5 and held["r1"]["a"] == "3"
    assert lake.types("swap") == {"_id": "text", "_created_at": "timestamp",
                                  "_updated_at": "timestamp", "b": "number", "a": "text"}


def test_stored_keeps_the_api_types_of_the_columns(lake: IcebergPlace) -> None:
    lake.apply(ROWS)
    destination = open_destination(lake.config())
    try:
        schema = destination.stored(Target(TABLE, "orders"))
    finally:
        destination.close()
    assert schema is not None
    status = schema.field("Status")
    assert status.type == pa.string()  # held as text...
    assert (status.metadata or {}).get(META_COLUMN_TYPE) == b"choice"  # ...a choice


def test_a_scan_reads_one_data_file_at_a_time(
    lake: IcebergPlace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(iceberg_module, "CHUNK_BYTES", 5_000)
    lake.apply(batches(numbered(300), size=50))
    destination = open_destination(lake.config())
    try:
        got = list(destination.scan(Target(TABLE, "orders"), ["_id", "Due"]))
    finally:
        destination.close()
    assert len(got) >= len(lake.data_files()) > 1
    assert sorted(r["_id"] for b in got for r in b.to_pylist()) == sorted(
        f"row_{i}" for i in range(300))
    assert {r["Due"] for b in got for r in b.to_pylist()} == {date(2024, 1, 1 + i) for i in range(28)}


def test_a_failed_first_write_leaves_no_table_and_no_files(lake: IcebergPlace) -> None:
    with pytest.raises(spec.Boom):
        lake.apply(spec.failing(numbered(5)))
    assert lake.tables() == []
    assert not (Path(lake.location) / NAMESPACE / "orders").exists()


def test_a_catalog_that_cannot_be_reached_is_one_error_line(tmp_path: Path) -> None:
    config = make_config("iceberg", str(tmp_path / "lake"), mode="replace", where="test",
                         base=tmp_path, catalog="postgresql://nobody@127.0.0.1:1/none")
    destination = open_destination(config)
    with pytest.raises(DestinationError, match=r"^opening Iceberg table .* failed: ") as caught:
        destination.check()
    assert "\n" not in str(caught.value)
    destination.close()


def test_object_storage_needs_a_shared_catalog(tmp_path: Path) -> None:
    config = make_config("iceberg", "s3://bucket/lake", mode="replace",
                         where="destination[0].iceberg", base=tmp_path)
    with pytest.raises(ConfigError, match=r"^destination\[0\]: .*needs a shared catalog"):
        open_destination(config)


@pytest.mark.parametrize(("catalog", "message"), [
    ("postgresql://me:hunter2@db/warehouse", "holds a password"),
    ("mysqlx://db/w", "not a database URL SQLAlchemy knows"),
    ("https://me:hunter2@rest.example/catalog", "holds a password"),
])
def test_a_bad_catalog_setting_is_refused_naming_it(
    tmp_path: Path, catalog: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^destination\[0\]\.iceberg: catalog: .*{message}") as caught:
        make_config("iceberg", "lake", mode="replace", where="destination[0].iceberg",
                    base=tmp_path, catalog=catalog, secrets_allowed=False)
    assert "hunter2" not in str(caught.value)


def test_a_relative_sqlite_catalog_is_made_absolute(tmp_path: Path) -> None:
    config = make_config("iceberg", "lake", mode="replace", where="test", base=tmp_path,
                         catalog="sqlite:///cat/iceberg.db")
    assert config.catalog == f"sqlite:///{tmp_path}/cat/iceberg.db"


def test_without_pyiceberg_the_extra_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyiceberg", None)  # import fails as if not installed
    with pytest.raises(MissingExtra, match=r"table-data-connector\[iceberg\]"):
        open_destination(make_config("iceberg", str(tmp_path), mode="replace", where="t",
                                     base=tmp_path))


def test_an_s3_warehouse_with_a_postgresql_catalog(s3: S3Bucket, postgres_db: str) -> None:
    """Tables in object storage (moto), named in PostgreSQL; the endpoint and credentials
    from the environment, as for every object storage destination."""
    place = IcebergPlace(s3.url("lake"), postgres_db, s3)
    assert place.apply(ROWS, mode="merge", mark=True) == Committed(written=4)
    assert place.apply(numbered(2, start=7), mode="merge", mark=True, deleted=["row_2"]) == \
        Committed(written=2, deleted=1)
    held = place.held()
    assert spec.live(held) == spec.by_id([ROWS[0], *ROWS[2:], *numbered(2, start=7)])
    assert held is not None and held["row_2"]["_deleted_at"] is not None
    assert any(k.startswith("lake/tabledata/orders/data/") for k in s3.objects("lake/"))
