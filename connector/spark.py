"""A Spark data source: one table read in parallel by Spark's executors (extra ``[spark]``).

    from connector.spark import TableDataSource
    spark.dataSource.register(TableDataSource)
    frame = (spark.read.format("tabledata")
             .option("base_url", "https://host/v1").option("table", "Orders").load())

pyspark >= 4, the Python Data Source API; without pyspark, importing this module raises
`MissingExtra` naming the extra. Options (`OPTIONS`): ``table`` (a name or an id, resolved
by `connector.tables.resolve_table`), ``base_url`` (default ``CONNECTOR_BASE_URL``),
``api_key_env`` (the NAME of the variable holding the key; default ``CONNECTOR_API_KEY``),
``partitions`` (default one per `ROWS_PER_PARTITION` rows), ``max_rps`` and ``page_size``.
The key is never an option: options show in query plans and logs.

**Types** come from `connector.schema`: the frame's Spark schema is its Arrow schema
(`arrow_schema`) converted by pyspark's own Arrow conversion, the one Spark applies to the
batches a reader yields. number -> double, date -> date, checkbox -> boolean, choice and
text -> string, the system fields ``_id``, ``_created_at``, ``_updated_at`` (named by
`Table.system_names`, so a user column called ``id`` survives) as string and UTC timestamps.

**Partitions are key ranges.** The driver counts the table and cuts it into `partitions`
ranges of about ``total / partitions`` rows: it reads the one row at each cut's offset, in
the page reader's order (``created_at``; ``id`` when a user column takes that name), and
keeps that row's key as a boundary. Partition k reads, through `Extraction` and so through
the one page reader (its overlap check, its shift repair), the rows whose key is greater
than boundary k-1 (a ``gt`` filter, as the reader's own resume uses) and stops at the first
row past boundary k. Where that cannot be done — no order key free, a server refusing filters
on the key, no total, keys finer than microseconds — the table is one partition.

**Rows that change during a read.** Boundaries are keys, not offsets: a row deleted or created
elsewhere never moves a row into another partition, so a row that exists throughout the read
is read exactly once, in the partition its key falls in, and no id is read twice. A row
created during the read has the newest ``created_at``: only the last partition can see it,
and does if it reads its end after the row was created, as a single read would. A row deleted
during the read appears if its partition read it first. Partitions run when executors free
up, so the frame is no snapshot of one moment: each range is as it was when read. A retried
Spark task reads its whole range again.

**One request budget per key.** The budget is the key's limit as the driver knows it once it
has planned: what the server publishes in its answers (`connector.api.quota`), else what the
key's pacer learned or remembers (`RateLimiter.sustained`), and never more than ``max_rps``.
Executors are separate processes, often on separate machines, with no memory in common, so the
budget is split, not shared at run time: each of the P partitions paces its requests to
budget / P (`_Budget`, on top of the adaptive pacer); planning takes the whole budget before
any partition runs. However many tasks run at once, the sum stays under the budget (each
partition would otherwise spend the whole of what the server says remains). The price: a
partition that has finished leaves its share unused, so set ``partitions`` to the task slots
(executor cores) for the budget to be used in full. With no budget (nothing known, no
``max_rps``) each executor learns the limit from 429s. Other clients of the key are not
counted; a 429 is retried after its Retry-After by the client's retry policy either way.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Client, RateLimiter
from connector.api.keys import ENV_API_KEY, describe_variable
from connector.api.models import RowPage
from connector.api.paging import order_key  # the reader's order: ranges follow it
from connector.api.ratelimit import Slot
from connector.api.settings import ENV_BASE_URL
from connector.arrays import string_array
from connector.errors import ApiValidationError, BadRequest, ConfigError, ExtractionError
from connector.extract import Extraction
from connector.extras import require
from connector.schema import Table, arrow_schema
from connector.tables import fetch

if TYPE_CHECKING:
    from pyspark.sql import datasource as ds
    from pyspark.sql.pandas import types as arrow_types
    from pyspark.sql.types import StructType
else:
    ds = require("pyspark.sql.datasource", "connector.spark (the Spark data source)")
    arrow_types = require("pyspark.sql.pandas.types", "connector.spark (the Spark data source)")

__all__ = ["OPTIONS", "ROWS_PER_PARTITION", "TableDataSource"]

#: The options the source takes; any other is refused, naming the close ones.
OPTIONS = ("table", "base_url", "api_key_env", "partitions", "max_rps", "page_size")
#: Without a ``partitions`` option, one partition per this many rows.
ROWS_PER_PARTITION = 100_000
#: Keys the ranges can follow: rows never move between ranges while a read runs.
RANGE_KEYS = ("created_at", "id")
#: A timestamp with digits past the microsecond: the typed cut could not tell two apart.
_FINER_THAN_MICROS = re.compile(r"\.\d{7,}")


@dataclass(frozen=True)
class _Settings:
    """The options, checked once, with the base URL fixed on the driver for every executor."""

    table: str
    base_url: str | None
    api_key_env: str
    partitions: int | None
    max_rps: float | None
    page_size: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Settings:
        given = {key.lower(): value for key, value in options.items()}
        if "api_key" in given or "key" in given:
            raise ConfigError(
                "the API key is never an option (options show in query plans and logs): put it "
                f"in {ENV_API_KEY}, or name another variable with the api_key_env option"
            )
        for name in given:
            if name not in OPTIONS:
                close = get_close_matches(name, OPTIONS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"options: {', '.join(OPTIONS)}"
                raise ConfigError(f"unknown option {name!r} of the tabledata source; {hint}")
        table = given.get("table", "").strip()
        if not table:
            raise ConfigError('the tabledata source needs a table: .option("table", NAME_OR_ID)')
        return cls(
            table=table,
            base_url=given.get("base_url") or os.environ.get(ENV_BASE_URL),
            api_key_env=given.get("api_key_env") or ENV_API_KEY,
            partitions=_whole(given, "partitions", 1, None),
            max_rps=_rate(given.get("max_rps")),
            page_size=_whole(given, "page_size", 2, MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
        )

    def client(self, rate: float | None) -> Client:
        """A client with the key from this process's environment, paced to `rate` if set."""
        key = os.environ.get(self.api_key_env)
        where = describe_variable(self.api_key_env)
        if not key:
            raise ConfigError(
                f"no API key: set {where} in the environment of the Spark driver and executors "
                f"(spark.executorEnv.{where} on a cluster), or name another variable with the "
                "api_key_env option"
            )
        return Client(
            self.base_url,
            key,
            key_source=where,
            url_source=f"the base_url option (or {ENV_BASE_URL})",
            limiter=_Budget(rate) if rate is not None else None,
        )


def _whole(given: Mapping[str, str], name: str, least: int, most: int | None) -> int | None:
    raw = given.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = least - 1
    if value < least or (most is not None and value > most):
        bounds = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise ConfigError(f"option {name} must be a whole number {bounds}, not {raw!r}")
    return value


def _rate(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(
            f"option max_rps must be a number of requests per second above 0, like 10, not {raw!r}"
        )
    return value


class _Budget(RateLimiter):
    """The adaptive pacer, never faster than `rate` requests a second: one partition's share.

    Starts are booked `1 / rate` apart on top of the adaptive pacer's own booking, so a 429
    still slows the pace below the share, and nothing makes it faster.
    """

    def __init__(self, rate: float) -> None:
        super().__init__()
        self._interval = 1.0 / rate
        self._next = 0.0
        self._booking = threading.Lock()

    def reserve(self) -> Slot:
        adaptive = super().reserve()
        with self._booking:
            now = time.monotonic()
            start = max(now + adaptive.wait, self._next)
            self._next = start + self._interval
            return adaptive._replace(wait=start - now)


class _Range(ds.InputPartition):
    """One of `parts` partitions: rows whose order `key` is after `after` (None: from the
    start) up to and including `upto` (None: to the end); `upto_value` is `upto` typed as
    the frame types it. With no `key`, the whole table in the page reader's order."""

    def __init__(
        self, parts: int, key: str | None, after: str | None, upto: str | None, upto_value: Any
    ) -> None:
        super().__init__(None)
        self.parts, self.key, self.after, self.upto, self.upto_value = (
            parts, key, after, upto, upto_value
        )
        #: Requests a second for all the partitions together (None: no budget).
        self.budget: float | None = None

    @property
    def filter(self) -> dict[str, dict[str, str]]:
        return {} if self.key is None or self.after is None else {self.key: {"gt": self.after}}


class TableDataSource(ds.DataSource):
    """``spark.read.format("tabledata")``: a Table Data table as a DataFrame (see the module doc)."""

    _checked: _Settings | None = None
    _resolved: Table | None = None

    @classmethod
    def name(cls) -> str:
        return "tabledata"

    def schema(self) -> StructType:
        """The table's columns as Spark types, derived from `connector.schema`'s Arrow types."""
        schema: StructType = arrow_types.from_arrow_schema(
            _undictionary(arrow_schema(self._table())), prefer_timestamp_ntz=False
        )
        return schema

    def reader(self, schema: StructType) -> _Reader:
        return _Reader(self._settings(), self._table(), schema)

    def _settings(self) -> _Settings:
        if self._checked is None:
            self._checked = _Settings.parse(self.options)
        return self._checked

    def _table(self) -> Table:
        """The table's schema, resolved once on the driver and carried to the executors."""
        if self._resolved is None:
            settings = self._settings()
            with settings.client(settings.max_rps) as client:
                self._resolved = client.run(fetch(client.aio, settings.table))
        return self._resolved


def _undictionary(schema: pa.Schema) -> pa.Schema:
    """Choices as their strings: Spark has no categorical type."""
    return pa.schema(
        [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
        metadata=schema.metadata,
    )


class _Reader(ds.DataSourceReader):
    """Plans the key ranges on the driver; reads one range per task on an executor."""

    def __init__(self, settings: _Settings, table: Table, schema: StructType) -> None:
        self._settings = settings
        self._table = table
        self._names = [f.name for f in schema.fields]
        system = set(table.system_names().values())
        for name in self._names:
            if name not in system:
                table.column(name)  # ColumnNotFound, naming the close ones
        self._columns = [n for n in self._names if n not in system]
        #: What Spark checks each batch against: the schema, in pyspark's Arrow terms.
        self._arrow = arrow_types.to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[_Range]:
        settings = self._settings
        with settings.client(settings.max_rps) as client:
            ranges = _plan(client, self._table, settings.partitions)
            known = client.limiter.sustained
        budgets = [b for b in (settings.max_rps, known) if b is not None]
        for part in ranges:
            part.budget = min(budgets, default=None)
        return ranges

    def read(self, partition: ds.InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        settings = self._settings
        share = None if partition.budget is None else partition.budget / partition.parts
        key = None if partition.key is None else self._table.system_names()[partition.key]
        with settings.client(share) as client:
            extraction = Extraction(
                client,
                self._table,
                columns=self._columns,
                filter=partition.filter,
                page_size=settings.page_size,
            )
            last: pa.Scalar | None = None
            batches = iter(extraction)
            try:
                for batch in batches:
                    cut = None
                    if key is not None and batch.num_rows:
                        keys = batch.column(key)
                        _check_order(keys, last, self._table)
                        last = keys[-1]
                        cut = _cut(keys, partition.upto_value)
                    if cut is not None:
                        batch = batch.slice(0, cut)
                    if batch.num_rows:
                        yield batch.select(self._names).cast(self._arrow)
                    if cut is not None:
                        return
            finally:
                getattr(batches, "close", lambda: None)()  # stop reading ahead at once


def _check_order(keys: pa.Array, last: pa.Scalar | None, table: Table) -> None:
    """A range stops at the first row past its end, which is only right when rows come in
    key order: a server that ignored the sort is refused rather than read short."""
    ordered = len(keys) < 2 or pc.all(pc.greater_equal(keys[1:], keys[:-1])).as_py()
    if not ordered or (last is not None and pc.less(keys[0], last).as_py()):
        raise ExtractionError(
            f"table {table.name!r}: the server does not return rows in the order asked, so "
            'it cannot be read in ranges; read it with .option("partitions", 1)'
        )


def _cut(keys: pa.Array, upto: pa.Scalar | None) -> int | None:
    """The index of the first key past `upto`, or None (all within, or no end)."""
    if upto is None:
        return None
    at = pc.index(pc.greater(keys, upto), True).as_py()
    return None if at < 0 else int(at)


def _plan(client: Client, table: Table, partitions: int | None) -> list[_Range]:
    """The key ranges: boundaries at the rows of evenly spaced offsets (see the module doc)."""
    whole = [_Range(1, None, None, None, None)]
    key = order_key(table)
    if key not in RANGE_KEYS or partitions == 1:
        return whole
    first = client.list_rows(table.id, limit=1, sort=key, order="asc")
    total = first.total
    if not total:
        return whole
    parts = min(partitions or math.ceil(total / ROWS_PER_PARTITION), total)
    if parts < 2:
        return whole

    async def probe() -> list[RowPage]:
        return await asyncio.gather(*(
            client.aio.list_rows(table.id, limit=1, offset=total * k // parts, sort=key, order="asc")
            for k in range(1, parts)
        ))

    rows = [page.rows[0] for page in client.run(probe()) if page.rows]
    raw = [getattr(row, key) for row in rows]
    if not raw or None in raw or raw != sorted(raw):
        return whole  # no key to cut at, or the server does not sort as asked
    if key == "created_at" and any(_FINER_THAN_MICROS.search(value) for value in raw):
        return whole
    try:  # the server must take the ranges' filter (some refuse filters on system fields)
        client.list_rows(table.id, limit=1, sort=key, order="asc", filter={key: {"gt": raw[0]}})
    except (BadRequest, ApiValidationError):
        return whole
    # typed as the reader types the key column: ids text, created_at a UTC timestamp
    typed = string_array(raw).cast(arrow_schema(table).field(table.system_names()[key]).type)
    bounds = dict(zip(raw, typed, strict=True))  # rows sharing a key stay in one range
    edges: list[str | None] = [None, *bounds, None]
    return [
        _Range(len(edges) - 1, key, after, upto, None if upto is None else bounds[upto])
        for after, upto in pairwise(edges)
    ]
