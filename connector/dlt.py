"""A dlt source: every table of a workspace as a dlt resource, read through our engine.

    import dlt
    from connector.dlt import tabledata

    pipeline = dlt.pipeline("crm", destination="duckdb", dataset_name="crm")
    pipeline.run(tabledata(tables=["Orders", "Customers"]))

(`pip install 'table-data-connector[dlt]'`; without it, importing this module raises
`MissingExtra` naming the extra.) Any dlt destination takes it: only the pipeline changes.

**One resource per table**, named as the table (`connector.naming`: a table whose name
another table has once dlt's naming convention applies gets ``<name>_<table id>``; a table
keeps its name, kept in the source's state, whichever tables a key can see), yielding the typed Arrow record batches of
`connector.extract.Extraction` (the one page reader: stable order, overlap-checked). Column
hints come from the same Arrow schema (`connector.schema`, the one type mapping): ``_id``,
``_created_at``, ``_updated_at``, then the table's columns. ``_id`` is the primary key and
the write disposition is ``merge`` (delete-insert, the newest ``_updated_at`` kept when an
id comes twice in one load).

**Incremental** on ``_updated_at`` with dlt's ``lag`` set to the sync's lookback window
(`connector.jobs.config.DEFAULT_LOOKBACK`, seconds): each run asks the server for rows with
``updated_at`` after the last value less the lag, so a late commit stamped up to that long
before the cursor is read again (and rows re-read unchanged are merged as they were).

**Deletions** (``deletes=True``, the default). dlt cannot ask a destination which ids it
holds, so the resource keeps them in its state: the sorted ids the destination holds after
each load, committed by dlt with that load. Then, as the sync does (see
`connector.jobs.runner`): the newest ``updated_at`` S is asked before the change read; after
it, the server's count N and a re-read of the rows newer than S (R, rows changed during the
read). With H the held ids plus those read, |H ∪ R| = N means nothing was deleted; otherwise
an id-only pass through the page reader (pages of 1000) lists what exists, and every held id
it lacks is yielded as a tombstone (``_deleted`` true: dlt's ``hard_delete`` hint removes the
row at the destination). A row read in this run and deleted before its id pass stays one run
longer (the next run's pass removes it).

The cost: the state holds every id (the reference server's: 28 bytes a row in the
pipeline's local state, 10 compressed in the destination's ``_dlt_pipeline_state``, written
again by every load that changes it) and a run holds them in memory; a quiet run makes four
small requests per table (S, the change read, N, R); a run with deletions adds
``rows / 1000`` id pages. ``deletes=False`` keeps none of that, and rows deleted upstream
stay at the destination.

**The key** comes from the `api_key` argument, dlt's secrets (``[sources.tabledata]
api_key``, or ``SOURCES__TABLEDATA__API_KEY``), or ``CONNECTOR_API_KEY``; the base URL from
`base_url`, dlt's config, or ``CONNECTOR_BASE_URL``. The key is never logged or written.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Client
from connector.api.paging import shadowed
from connector.errors import PermissionDenied, SkippedTableWarning
from connector.extract import Extraction
from connector.extras import require
from connector.jobs.config import DEFAULT_LOOKBACK
from connector.naming import NameRules, assign
from connector.schema import Table, arrow_schema
from connector.stamps import iso
from connector.tables import select

if TYPE_CHECKING:
    import dlt
    from dlt.extract.incremental import Incremental
else:
    dlt = require("dlt", "connector.dlt (the dlt source)")

from dlt.common.exceptions import PipelineStateNotAvailable  # after require: MissingExtra first

__all__ = ["tabledata"]

#: The dlt source's name: its config section (``[sources.tabledata]``) and schema name.
SOURCE = "tabledata"


@dlt.source(name=SOURCE, section=SOURCE)
def tabledata(
    base_url: str | None = dlt.config.value,
    tables: Sequence[str] | None = None,
    api_key: dlt.TSecretStrValue | None = dlt.secrets.value,
    page_size: int = DEFAULT_PAGE_SIZE,
    lookback: float = DEFAULT_LOOKBACK,
    deletes: bool = True,
) -> Iterator[Any]:
    """One resource per table (every table the key can read, or `tables`: ids or names, as
    `connector.tables.resolve_table` reads them); see the module docstring.

    A table the key may not read is left out with a `SkippedTableWarning`.
    """
    where = _Where(base_url or None, api_key or None)
    with where.client() as client:
        picked = client.run(select(client.aio, tables))
    for refused in picked.refused:
        if not isinstance(refused.error, PermissionDenied):
            raise refused.error
        warnings.warn(
            f"table {refused.table_id!r}: the key may not read it; left out",
            SkippedTableWarning,
            stacklevel=2,
        )
    schemas = picked.tables
    names = _names(schemas)
    for table in schemas:
        yield _resource(_TableReader(where, table, page_size, deletes), names[table.id], lookback)


def _names(schemas: Sequence[Table]) -> dict[str, str]:
    """Each table's resource (and destination table) name, from the one name map
    (`connector.naming`) under the source's naming convention, so no two tables share a
    destination table after dlt normalises their names; the names given are kept in the
    source's state (`_claim`), so a table keeps its name whichever tables a key can see."""
    naming = dlt.current.source_schema().naming
    rules = NameRules(max_bytes=naming.max_length or 255, normalize=naming.normalize_table_identifier)
    try:
        held: dict[str, str | None] = dict(dlt.current.source_state().get("names", {}))
    except PipelineStateNotAvailable:  # listed outside a pipeline: nothing held to keep
        held = {}
    return assign([(t.id, t.name) for t in schemas], rules, held, where="the dlt source")


def _claim(name: str, table_id: str) -> None:
    """Keep in the source's state that `name` holds the table (committed with the load)."""
    dlt.current.source_state().setdefault("names", {})[name] = table_id


@dataclass(frozen=True)
class _Where:
    """The server and key every resource's client uses (the key stays out of reprs)."""

    base_url: str | None
    api_key: str | None

    def __repr__(self) -> str:
        return f"_Where(base_url={self.base_url!r})"

    def client(self) -> Client:
        return Client(
            self.base_url,
            self.api_key,
            key_source=None if self.api_key is None else "tabledata's api_key (or dlt secrets)",
            url_source=None if self.base_url is None else "tabledata's base_url (or dlt config)",
        )


def _resource(reader: _TableReader, name: str, lookback: float) -> Any:
    names = reader.names
    cursor: Incremental[datetime] = dlt.sources.incremental(
        names.updated, lag=lookback, on_cursor_value_missing="include"
    )

    def rows(updated_at: Incremental[datetime] = cursor) -> Iterator[pa.Table]:
        _claim(name, reader.table.id)
        yield from reader.read(updated_at.start_value, dlt.current.resource_state())

    resource = dlt.resource(
        rows,
        name=name,
        table_name=name,
        columns=reader.schema,
        primary_key=names.id,
        write_disposition={"disposition": "merge", "strategy": "delete-insert"},
    )
    resource.apply_hints(
        columns={
            names.id: {"nullable": False},
            names.deleted: {"hard_delete": True},
            names.updated: {"dedup_sort": "desc"},
        }
    )
    return resource


@dataclass(frozen=True)
class _Names:
    """The Arrow (and so destination) names of the system columns, and the tombstone flag."""

    id: str
    updated: str
    deleted: str


class _TableReader:
    """Reads one table for one run: in full, or what changed plus what was deleted."""

    def __init__(self, where: _Where, table: Table, page_size: int, deletes: bool) -> None:
        self.where = where
        self.table = table
        self.page_size = page_size
        self.deletes = deletes
        system = table.system_names()
        deleted = system["deleted"]
        self.names = _Names(system["id"], system["updated_at"], deleted)
        self.schema = arrow_schema(table).append(pa.field(deleted, pa.bool_()))

    def read(self, since: datetime | None, state: dict[str, Any]) -> Iterator[pa.Table]:
        held: list[str] | None = state.get("ids") if self.deletes else None
        with self.where.client() as client:
            if since is None or (self.deletes and held is None):
                read: set[str] = set()
                yield from self._batches(self._extraction(client, None), read)
                if self.deletes:
                    state["ids"] = sorted(read)
                return
            newest = _newest(client, self.table)
            read = set()
            yield from self._batches(self._extraction(client, _after(since)), read)
            if not self.deletes:
                return
            assert held is not None
            total = client.list_rows(self.table.id, limit=1).total
            # R: rows changed since S, read again (fresh values, and the count check's term).
            yield from self._batches(self._extraction(client, _after(newest)), read)
            present = set(held) | read
            if total is None or len(present) != total:
                listed = self._ids(client)
                gone = sorted(id_ for id_ in held if id_ not in listed and id_ not in read)
                if gone:
                    yield self._tombstones(gone)
                present.difference_update(gone)
            state["ids"] = sorted(present)

    def _extraction(self, client: Client, updated_after: str | None) -> Extraction:
        return Extraction(
            client,
            self.table,
            # a column called updated_at would be filtered instead: then every row (dlt's
            # incremental keeps the newer ones)
            filter=None if updated_after is None or shadowed(self.table, "updated_at")
            else {"updated_at": {"gt": updated_after}},
            page_size=self.page_size,
        )

    def _batches(self, batches: Iterable[pa.RecordBatch], read: set[str]) -> Iterator[pa.Table]:
        for batch in batches:
            if batch.num_rows:
                read.update(batch.column(0).to_pylist())
                flags = pa.nulls(batch.num_rows, pa.bool_())
                yield pa.Table.from_batches([batch]).append_column(self.schema.field(-1), flags)

    def _ids(self, client: Client) -> set[str]:
        """The id pass: ids only, through the one page reader, in pages of 1000."""
        ids = Extraction(client, self.table, columns=[], page_size=MAX_PAGE_SIZE)
        return {id_ for batch in ids for id_ in batch.column(0).to_pylist()}

    def _tombstones(self, ids: list[str]) -> pa.Table:
        """Rows that say only "this id is gone": dlt deletes them at the destination."""
        columns = [pa.array(ids, pa.string())]
        columns += [pa.nulls(len(ids), f.type) for f in list(self.schema)[1:-1]]
        columns.append(pa.array([True] * len(ids), pa.bool_()))
        return pa.Table.from_arrays(columns, schema=self.schema)


def _newest(client: Client, table: Table) -> str | None:
    """The newest ``updated_at`` on the server, asked before the change read (S); None where
    a column called updated_at would be sorted instead."""
    if shadowed(table, "updated_at"):
        return None
    page = client.list_rows(table.id, limit=1, sort="updated_at", order="desc")
    return page.rows[0].updated_at if page.rows else None


def _after(value: datetime | str | None) -> str | None:
    """A cursor as the API compares timestamps (UTC, microseconds, ``Z``); None: from the start."""
    if value is None or isinstance(value, str):
        return value
    return iso(value)

