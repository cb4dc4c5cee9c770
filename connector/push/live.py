"""The table as it is right now, in the canonical form the diff compares against.

A push never trusts a stored snapshot: it reads the live table (with `connector.extract`,
which repairs offset shifts when others write during the read) just before planning, again
before applying a saved plan, and again to find out what an ambiguous bulk create did.
Inside a push the read is awaited on the client's async core, in the push's own coroutine.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from connector.api import MAX_PAGE_SIZE, AsyncClient, Client
from connector.extract import Extraction
from connector.push.coerce import canonical_dtype
from connector.schema import Table

__all__ = ["Live", "read_live", "read_live_async"]

#: Pages in flight while reading the live table.
READ_CONCURRENCY = 4


@dataclass(frozen=True)
class Live:
    """Row ids, ``updated_at`` stamps and canonical cells of a table, one frame row per row."""

    table: Table
    #: Columns: the system id and updated_at names (`Table.system_names`), then user columns.
    frame: pd.DataFrame

    @classmethod
    def from_arrow(cls, table: Table, data: pa.Table) -> Live:
        """Canonical columns straight from the extraction's Arrow types (no per-cell work)."""
        system = table.system_names()
        frame: dict[str, pd.Series] = {
            system["id"]: _canonical(data.column(system["id"]), "string"),
            system["updated_at"]: _canonical(data.column(system["updated_at"]), "string"),
        }
        for col in table.columns:
            frame[col.name] = _canonical(data.column(col.name), canonical_dtype(col))
        return cls(table, pd.DataFrame(frame, index=pd.RangeIndex(data.num_rows)))


def read_live(client: Client, table: Table) -> Live:
    """Read every row of `table` now (pages of the API's maximum size, a few in flight)."""
    return client.run(read_live_async(client.aio, table))


async def read_live_async(client: AsyncClient, table: Table) -> Live:
    """`read_live` from async code: the same read, awaited on the running loop."""
    extraction = Extraction(client, table, page_size=MAX_PAGE_SIZE, concurrency=READ_CONCURRENCY)
    batches = [batch async for batch in extraction]
    return Live.from_arrow(table, pa.Table.from_batches(batches, schema=extraction.schema))


def _canonical(values: pa.ChunkedArray, dtype: str) -> pd.Series:
    """An Arrow column as `dtype`: choices and dates as text, numbers, booleans. An empty
    string is an empty cell, as in a source (`coerce`): a server may send either for one."""
    if dtype == "string" and not pa.types.is_string(values.type):
        values = values.cast(pa.string())  # dictionary (choice), date32, timestamps
    target = pd.api.types.pandas_dtype(dtype)
    series = pd.Series(values.to_pandas(types_mapper=lambda _: target))
    return series.mask(series.eq("")) if dtype == "string" else series
