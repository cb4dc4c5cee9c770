"""A table, read as a stream of typed Arrow record batches (and, on request, one DataFrame).

Pages come from `connector.api.paging.PageReader`, the one page reader (stable order,
overlap-checked, resuming after a shift). Here they become record batches of the table's
Arrow schema (`connector.schema`): cells are gathered column by column and typed in bulk,
so memory stays flat however large the table.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from connector.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, AsyncClient, Client
from connector.api.endpoints import Filter
from connector.api.paging import Cells, ExtractionError, PageReader
from connector.arrays import bool_array, string_array
from connector.errors import CellWarning, ConfigError, InexactValue
from connector.schema import (
    CHECKBOX_FALSE,
    CHECKBOX_TRUE,
    SYSTEM_FIELDS,
    Column,
    Table,
    arrow_schema,
    frame_from_arrow,
)
from connector.values import Inexact, TypeSetting, number_array

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CellWarning",
    "Extraction",
    "ExtractionError",
]

#: Pages are gathered into record batches of about this many rows.
BATCH_ROWS = 1000  # large enough that Arrow's per-call costs vanish
#: Batches read ahead of a consumer that is busy (writing the one before, say).
QUEUED_BATCHES = 8


class Extraction:
    """One table read: iterate for record batches, or take it all with `to_pandas()`.

    With a `Client`, iterate (``for``) or call `to_arrow` / `to_pandas`: the read runs on
    the client's engine, a batch at a time. From async code (`Client.aio`, an `AsyncClient`)
    use ``async for``. Iterating again reads the table again. `resumes` counts the repairs
    of the last read.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        table: Table,
        *,
        columns: Sequence[str] | None = None,
        filter: Filter | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        concurrency: int | None = None,
        types: Mapping[str, str] | None = None,
    ) -> None:
        if not 2 <= page_size <= MAX_PAGE_SIZE:
            raise ConfigError(f"page size must be between 2 and {MAX_PAGE_SIZE}, not {page_size}")
        if concurrency is not None and concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
        if types:
            table = table.typed(
                TypeSetting(table.id, str(column), str(spec), f"types[{column!r}]")
                for column, spec in types.items()
            )
        self.table = table
        self.columns: tuple[Column, ...] = _select(table, columns)
        self.schema: pa.Schema = arrow_schema(table, [c.name for c in self.columns])
        self.resumes = 0
        self._client = client
        self._filter = _exact_filter(table, filter)
        self._page_size = page_size
        self._concurrency = concurrency

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if not isinstance(self._client, Client):
            raise ConfigError(
                "an Extraction made with an AsyncClient is read with `async for`; "
                "pass a Client to iterate it from blocking code"
            )
        return self._client.stream(self)

    async def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        """The batches, read by the async core on the running loop. Pages are fetched ahead
        while the consumer works on a batch (up to `QUEUED_BATCHES` batches wait)."""
        batches: asyncio.Queue[_Item] = asyncio.Queue(QUEUED_BATCHES)
        task = asyncio.ensure_future(_fetch_all(self, batches.put))
        try:
            while (item := await batches.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def to_arrow(self) -> pa.Table:
        """The whole table as one Arrow table (held in memory: only when asked for)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def to_pandas(self) -> pd.DataFrame:
        """The whole table as a DataFrame with the dtypes `connector.schema` gives its columns."""
        return frame_from_arrow(self.to_arrow(), self.table)


def _select(table: Table, columns: Sequence[str] | None) -> tuple[Column, ...]:
    if columns is None:
        return table.columns
    try:
        return tuple(table.column(name) for name in columns)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None


def _exact_filter(table: Table, filter: Filter | None) -> dict[str, Mapping[str, Any]]:
    """The filter with its keys spelled exactly as the schema does (matched case-insensitively)."""
    if not filter:
        return {}
    known = {name.lower(): name for name in (*table.column_names, *SYSTEM_FIELDS)}
    exact: dict[str, Mapping[str, Any]] = {}
    for key, condition in filter.items():
        name = key if key in known.values() else known.get(key.lower())
        if name is None:
            raise ConfigError(
                f"filter column {key!r} is not in table {table.name!r}; columns: {table.column_names}"
            )
        exact[name] = condition
    return exact


# --- fetching: the page reader on the async core, batches handed to the consumer ----------

#: What the fetching side hands the consuming side: batches, then None at the end, or the error.
_Item: TypeAlias = "pa.RecordBatch | Exception | None"
_Put: TypeAlias = Callable[[_Item], Awaitable[None]]


async def _fetch_all(extraction: Extraction, put: _Put) -> None:
    """Reads every page of the extraction and hands each one over; then None, or the error."""
    cast = _Caster(extraction)
    pending: Cells = cast.empty()

    async def gather(cells: Cells) -> None:
        nonlocal pending
        for column, more in zip(pending, cells, strict=True):
            column.extend(more)
        if len(pending[0]) >= BATCH_ROWS:
            batch, pending = cast.from_cells(pending), cast.empty()
            await put(batch)

    try:
        client = _core(extraction._client)
        reader = PageReader(
            client,
            extraction.table,
            fields=[c.name for c in extraction.columns],
            filter=extraction._filter,
            page_size=extraction._page_size,
            concurrency=extraction._concurrency,
            emit=gather,
        )
        try:
            await reader.read()
        finally:
            extraction.resumes = reader.resumes
        if pending[0]:
            await put(cast.from_cells(pending))
    except Exception as exc:  # handed over, raised on the consuming side
        await put(exc)
        return
    await put(None)


def _core(client: Client | AsyncClient) -> AsyncClient:
    return client.aio if isinstance(client, Client) else client


# --- typing: API cells into Arrow arrays ---------------------------------------------------


_ID = Column("id", "text")


class _Caster:
    """Turns rows into record batches of the extraction's schema; warns once per bad column."""

    def __init__(self, extraction: Extraction) -> None:
        self._schema: pa.Schema = extraction.schema
        self._table = extraction.table
        self._columns = extraction.columns
        self._names = [c.name for c in self._columns]
        self._warned: set[str] = set()

    def empty(self) -> Cells:
        return [[] for _ in range(3 + len(self._columns))]

    def from_cells(self, cells: Cells) -> pa.RecordBatch:
        """Cells by column (see `split`) as one record batch of the extraction's schema."""
        ids, created, updated, *values = cells
        arrays: list[pa.Array] = [
            self._cells(_ID, ids),
            _timestamps(created),
            _timestamps(updated),
        ]
        for column, column_cells in zip(self._columns, values, strict=True):
            try:
                arrays.append(self._cells(column, column_cells))
            except Inexact as exc:
                raise _inexact(self._table, column, ids[exc.position], exc) from None
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _cells(self, column: Column, values: list[Any]) -> pa.Array:
        """A column's cells as its Arrow type. Text is text: ``""`` stays ``""``, only a
        missing cell is null. A number its value type cannot hold is `Inexact`."""
        kind = column.kind.name
        if kind == "choice":
            return _choices(column, values)
        arrow_type = column.arrow_type
        try:  # the fast path: the cells already have the column's JSON type
            if kind == "date":
                return string_array(values, blank_is_null=True).cast(arrow_type)
            if kind == "text":
                return string_array(values)
            if kind == "number":
                return number_array(values, column.values)
            if kind == "checkbox":
                return bool_array(values)
            return pa.array(values, arrow_type, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            pass
        parse = _PARSERS[kind]
        parsed: list[Any] = []
        bad = 0
        for value in values:
            try:
                empty = value is None or (value == "" and kind != "text")
                parsed.append(None if empty else parse(value))
            except (TypeError, ValueError, OverflowError):
                parsed.append(None)
                bad += 1
        if bad and column.name not in self._warned:
            self._warned.add(column.name)
            warnings.warn(
                f"column {column.name!r}: {bad} value(s) are not a {kind}; loaded as null",
                CellWarning,
                stacklevel=2,
            )
        if kind == "number":  # exact, as the fast path: the parsed numbers, checked
            return number_array(parsed, column.values)
        return pa.array(parsed, arrow_type, from_pandas=True)


def _inexact(table: Table, column: Column, row_id: Any, exc: Inexact) -> InexactValue:
    """The one line naming the table, column, row, value, and the setting to change."""
    if column.typed_by:
        setting = f"{column.values}, set by {column.typed_by}: give it another type there"
    else:
        by_name = table.id if ":" in table.name else table.name
        setting = (
            "float64, the default: give it a type that holds it (int64, decimal(P,S) or text) "
            f"with --type {by_name}:{column.name}=int64, [tables.types.{_toml_key(table.name)}] "
            f'{_toml_key(column.name)} = "int64" in a job file, or types= in Python'
        )
    return InexactValue(
        f"table {table.name!r}, column {column.name!r}, row {row_id}: {exc.value!r} cannot be "
        f"held exactly ({exc.why}); the column is {setting}"
    )


def _toml_key(name: str) -> str:
    """A name as a TOML key: bare when it can be, quoted otherwise."""

    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _number(value: Any) -> int | float:
    """A number cell a server sent as text (``"1,234"``) or a boolean, as the number it is:
    an integer's digits as an int (exact), anything else a float."""
    text = value.strip().replace(",", "") if isinstance(value, str) else value
    if isinstance(text, str) and text.lstrip("+-").isdigit():
        return int(text)
    if isinstance(text, bool | int):
        return int(text)
    return float(text)


def _checkbox(value: Any) -> bool:
    """A checkbox cell sent as text, read with the words push accepts (`connector.schema`)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in CHECKBOX_TRUE or text in CHECKBOX_FALSE:
        return text in CHECKBOX_TRUE
    raise ValueError(value)


def _date(value: Any) -> dt.date:
    return dt.date.fromisoformat(str(value).strip()[:10])


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_PARSERS: Mapping[str, Callable[[Any], Any]] = {
    "text": _text,
    "number": _number,
    "checkbox": _checkbox,
    "date": _date,
}


def _choices(column: Column, values: list[Any]) -> pa.Array:
    """A dictionary array whose dictionary is the column's options (plus any stray values).
    As text, ``""`` is a value (one of the options, or a stray one), not a missing cell."""
    options = list(column.options or ())
    dictionary = string_array(options)
    try:
        strings = string_array(values)
        codes = pc.index_in(strings, value_set=dictionary)
        if codes.null_count == strings.null_count:  # every value is one of the options
            return pa.DictionaryArray.from_arrays(codes.cast(pa.int32()), dictionary)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    index = {option: i for i, option in enumerate(options)}
    indices: list[int | None] = []
    for value in values:
        if value is None:
            indices.append(None)
            continue
        text = _text(value)
        code = index.get(text)
        if code is None:
            code = index[text] = len(options)
            options.append(text)
        indices.append(code)
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32()), pa.array(options, pa.string())
    )


_UTC = pa.timestamp("us", tz="UTC")


def _timestamps(values: list[str | None]) -> pa.Array:
    try:
        return string_array(values).cast(_UTC)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        parsed = [
            dt.datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None for v in values
        ]
        return pa.array(
            [p if p is None or p.tzinfo else p.replace(tzinfo=dt.UTC) for p in parsed], _UTC
        )
