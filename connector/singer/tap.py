"""The tap itself: `TapTableData` and its streams (the command is `connector.singer.main`).

Config: ``base_url`` and ``api_key`` (else ``CONNECTOR_BASE_URL`` / ``CONNECTOR_API_KEY``;
singer-sdk's ``--config ENV`` reads ``TAP_TABLEDATA_API_KEY`` and the like), optional
``tables`` (ids or names, resolved as every command resolves them; default every table the
key can read) and ``start_date``.

One stream per table, its JSON schema spelled from the table's Arrow schema
(`connector.schema`, the one type mapping): ``_id`` (the primary key), ``_created_at``,
``_updated_at`` (the replication key), then the table's columns. Records are read by a plain
singer-sdk `Stream` whose `get_records` iterates `connector.extract.Extraction` (the one page
reader, with our client's retries, rate and concurrency limits), not by singer-sdk's
RESTStream, whose own request path and offset paging would skip rows deleted during a read.
An incremental sync asks for rows with ``updated_at`` after the bookmark (or ``start_date``)
less the sync's lookback window (`connector.jobs.config.DEFAULT_LOOKBACK`), so a late commit
is read again; the bookmark is the newest ``_updated_at`` read, kept when the sync ends (reads
are ordered by creation, not by the replication key). Deletions are not sent: Singer has no
portable delete message (the dlt source, `connector.dlt`, removes deleted rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Client
from connector.api.paging import shadowed
from connector.errors import PermissionDenied
from connector.extract import Extraction
from connector.extras import require
from connector.jobs.config import DEFAULT_LOOKBACK
from connector.naming import NameRules, assign
from connector.schema import Table, arrow_schema
from connector.singer import NAME
from connector.stamps import iso
from connector.tables import select

if TYPE_CHECKING:
    import singer_sdk
    from singer_sdk import typing as th
else:
    singer_sdk = require("singer_sdk", "tap-tabledata (the Singer tap)")
    th = require("singer_sdk.typing", "tap-tabledata (the Singer tap)")

__all__ = ["TableStream", "TapTableData"]


#: Stream names: unique ignoring case (targets name tables after them), without controls.
STREAM_NAMES = NameRules(max_bytes=255)


class TableStream(singer_sdk.Stream):
    """One table: its records typed as an export types them, read through the page reader."""

    is_sorted = False  # read by creation time: the bookmark is kept when the stream ends

    def __init__(self, tap: TapTableData, table: Table, name: str) -> None:
        self.table = table
        self.source = tap  # singer-sdk keeps its own reference private
        system = table.system_names()
        super().__init__(tap, schema=json_schema(arrow_schema(table)), name=name)
        self.primary_keys = [system["id"]]
        self.replication_key = system["updated_at"]

    def get_records(self, context: Mapping[str, Any] | None) -> Iterable[dict[str, Any]]:
        since = None
        if self.replication_method == "INCREMENTAL":
            since = self.get_starting_timestamp(context)
        after = None if since is None else iso(since - timedelta(seconds=DEFAULT_LOOKBACK))
        with self.source.client() as client:
            extraction = Extraction(
                client,
                self.table,
                # a column called updated_at would be filtered instead: then every row
                filter=None if after is None or shadowed(self.table, "updated_at")
                else {"updated_at": {"gt": after}},
                page_size=self.source.page_size,
            )
            for batch in extraction:
                yield from _plain(batch).to_pylist()


class TapTableData(singer_sdk.Tap):
    """Every table (or the configured ones) of a Table Data workspace as Singer streams."""

    name = NAME
    package_name = "table-data-connector"  # where singer-sdk reads the version it prints
    config_jsonschema = th.PropertiesList(
        th.Property(
            "base_url",
            th.StringType,
            description="The API's address, ending in /v1 (default: $CONNECTOR_BASE_URL)",
        ),
        th.Property(
            "api_key",
            th.StringType,
            secret=True,
            description="The API key (default: $CONNECTOR_API_KEY)",
        ),
        th.Property(
            "tables",
            th.ArrayType(th.StringType),
            description="Table ids or names (default: every table the key can read)",
        ),
        th.Property(
            "start_date",
            th.DateTimeType,
            description="Read rows updated after this time on the first incremental sync",
        ),
        th.Property(
            "page_size",
            th.IntegerType,
            default=DEFAULT_PAGE_SIZE,
            description=f"Rows per request, 2-{MAX_PAGE_SIZE}",
        ),
    ).to_dict()

    @property
    def page_size(self) -> int:
        return int(self.config.get("page_size") or DEFAULT_PAGE_SIZE)

    def client(self) -> Client:
        """A client for the configured server and key (the key never leaves it)."""
        base_url, key = self.config.get("base_url"), self.config.get("api_key")
        return Client(
            base_url or None,
            key or None,
            key_source=f"{NAME} config api_key" if key else None,
            url_source=f"{NAME} config base_url" if base_url else None,
        )

    def discover_streams(self) -> list[TableStream]:
        wanted: Sequence[str] | None = self.config.get("tables")
        with self.client() as client:
            picked = client.run(select(client.aio, wanted))
        for refused in picked.refused:
            if not isinstance(refused.error, PermissionDenied):
                raise refused.error
            self.logger.warning("table %r: the key may not read it; left out", refused.table_id)
        tables = picked.tables
        # One stream per table, named by the one name map (`connector.naming`): a table whose
        # name another has in any case gets <name>-<table id>; a target never merges two.
        names = assign([(t.id, t.name) for t in tables], STREAM_NAMES, {}, where="the tap")
        return [TableStream(self, t, names[t.id]) for t in tables]


def json_schema(schema: pa.Schema) -> dict[str, Any]:
    """A record's JSON schema from its Arrow schema: every column nullable but the row id."""
    properties = {}
    for field in schema:
        spelled = _json_type(field.type)
        kinds = spelled["type"]
        properties[field.name] = {**spelled, "type": kinds if not field.nullable else [kinds, "null"]}
    return {"type": "object", "properties": properties, "required": [schema.field(0).name]}


def _json_type(kind: pa.DataType) -> dict[str, Any]:
    if pa.types.is_dictionary(kind):
        return _json_type(kind.value_type)
    if pa.types.is_floating(kind):
        return {"type": "number"}
    if pa.types.is_boolean(kind):
        return {"type": "boolean"}
    if pa.types.is_date(kind):
        return {"type": "string", "format": "date"}
    if pa.types.is_timestamp(kind):
        return {"type": "string", "format": "date-time"}
    return {"type": "string"}


def _plain(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Choices as plain strings (their dictionary is the schema's business, not a record's)."""
    columns = [
        c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
