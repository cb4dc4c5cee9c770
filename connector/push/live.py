"""The table as it is right now, in the canonical form the diff compares against.

A push never trusts a stored snapshot: it reads the live table (with `connector.extract`,
which repairs offset shifts when others write during the read) just before planning, again
before applying a saved plan, and again to find out what an ambiguous bulk create did.
Inside a push the read is awaited on the client's async core, in the push's own coroutine.

A read keeps what the caller needs of every row (ids, timestamps, the key's cells) and hands
each chunk of rows with all their cells to `each` (the plan's `Diff`), so a large table's
cells are never held whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from connector.api import MAX_PAGE_SIZE, AsyncClient, Client
from connector.extract import Extraction
from connector.push.coerce import canonical_dtype, json_keys
from connector.schema import Table
from connector.values import TypeSetting

__all__ = ["Live", "read_live", "read_live_async", "stamps_of"]

#: Pages in flight while reading the live table.
READ_CONCURRENCY = 4
#: Rows handed to `each` at a time: large enough that per-chunk work is cheap, small enough
#: that a chunk's cells are a few MB.
CHUNK_ROWS = 50_000


@dataclass(frozen=True)
class Live:
    """Row ids, ``updated_at`` stamps and canonical cells of a table, one frame row per row."""

    table: Table
    #: Columns: the system id and updated_at names (`Table.system_names`), then user columns.
    frame: pd.DataFrame

    @classmethod
    def from_arrow(cls, table: Table, data: pa.Table, columns: Sequence[str] | None = None) -> Live:
        """Canonical columns straight from the extraction's Arrow types (no per-cell work):
        the id, ``updated_at``, then `columns` of the table's (default: all)."""
        system = table.system_names()
        frame: dict[str, pd.Series] = {
            system["id"]: _canonical(data.column(system["id"]), "string"),
            # As Arrow timestamps (8 bytes a row, not ~35 as text); `stamps_of` gives the text.
            system["updated_at"]: _arrow(data.column(system["updated_at"])),
        }
        for col in table.columns:
            if columns is None or col.name in columns:
                values = data.column(col.name)
                frame[col.name] = (
                    json_keys(values) if col.kind.name == "number"
                    else _canonical(values, canonical_dtype(col))
                )
        return cls(table, pd.DataFrame(frame, index=pd.RangeIndex(data.num_rows)))


def read_live(client: Client, table: Table) -> Live:
    """Read every row of `table` now (pages of the API's maximum size, a few in flight)."""
    return client.run(read_live_async(client.aio, table))


async def read_live_async(
    client: AsyncClient, table: Table, *, columns: Sequence[str] | None = None,
    each: Callable[[Live], None] | None = None, keep: bool = True,
) -> Live:
    """`read_live` from async code: the same read, awaited on the running loop. Keeps the
    id, ``updated_at`` and `columns` (default: all) of every row, or (`keep` false) none;
    `each` sees every chunk of rows (`CHUNK_ROWS`, in order) with all their columns."""
    extraction = Extraction(
        client, exact(table), page_size=MAX_PAGE_SIZE, concurrency=READ_CONCURRENCY
    )
    kept: list[dict[str, pd.Series]] = []
    pending: list[pa.RecordBatch] = []
    held = 0

    def flush() -> None:
        nonlocal held
        chunk = Live.from_arrow(table, pa.Table.from_batches(pending, schema=extraction.schema))
        pending.clear()
        held = 0
        if each is not None:
            each(chunk)
        if keep or not kept:  # not kept: the columns, empty (no view holding a chunk)
            kept.append({
                n: chunk.frame[n] if keep else chunk.frame[n].iloc[:0].copy()
                for n in chunk.frame.columns if columns is None or n in columns or n in system
            })

    system = set(table.system_names().values())
    async for batch in extraction:
        pending.append(batch)
        held += batch.num_rows
        if held >= CHUNK_ROWS:
            flush()
    if pending or not kept:
        flush()
    whole: dict[str, pd.Series] = {}
    for name in list(kept[0]):  # a column at a time, its pieces let go as it is joined
        whole[name] = pd.concat([piece.pop(name) for piece in kept], ignore_index=True)
    return Live(table, pd.DataFrame(whole, copy=False))


def exact(table: Table) -> Table:
    """`table` with its number columns read as their JSON text: whatever a cell holds (an
    integer past 2**53 included), the diff compares it exactly (`coerce.number_keys`)."""
    return table.typed(
        TypeSetting(table.id, c.name, "text", "the push's read")
        for c in table.columns if c.kind.name == "number"
    )


def stamps_of(updated_at: pd.Series) -> list[str | None]:
    """``updated_at`` cells as the text a plan keeps (None where the server sent none)."""
    if isinstance(updated_at.dtype, pd.ArrowDtype):
        text: list[str | None] = pa.array(updated_at.array).cast(pa.string()).to_pylist()
        return text
    return list(updated_at.astype(object).where(updated_at.notna(), None).tolist())


def _arrow(values: pa.ChunkedArray) -> pd.Series:
    return pd.Series(values.to_pandas(types_mapper=pd.ArrowDtype))


def _canonical(values: pa.ChunkedArray, dtype: str) -> pd.Series:
    """An Arrow column as `dtype`: choices and dates as text, booleans. ``""`` is the text
    the table holds, not an empty cell (`coerce.same_values` lets a source's empty cell
    match it)."""
    if dtype == "string" and not pa.types.is_string(values.type):
        values = values.cast(pa.string())  # dictionary (choice), date32, timestamps
    target = pd.api.types.pandas_dtype(dtype)
    return pd.Series(values.to_pandas(types_mapper=lambda _: target))
