"""Files: a folder (local, or object storage through `connector.destinations.storage`) with
one ``<table name>.parquet`` (or ``.csv``) per table.

A file is always written whole and swapped in: a replace writes the rows; an append or a
merge streams the file's kept rows (renamed, converted and re-encoded to the table's current
columns) followed by the new ones into a new file, so evolving the schema, writing the rows
and removing or stamping deleted ones are one swap. CSV files are export-only: replaced whole.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from connector.destinations.arrow import conform
from connector.destinations.base import (
    Committed,
    TableChange,
    Target,
    live_batches,
)
from connector.destinations.formats import encode_csv, encode_parquet, parquet_batches
from connector.destinations.held import FolderRecord, held
from connector.destinations.registry import DestinationConfig
from connector.destinations.rewrite import CountingRows, KeptRows
from connector.destinations.storage import Store, open_store
from connector.errors import ConfigError, DestinationError

__all__ = ["FilesDestination", "open_csv", "open_parquet"]


def open_parquet(config: DestinationConfig) -> FilesDestination:
    return FilesDestination(config, "parquet")


def open_csv(config: DestinationConfig) -> FilesDestination:
    return FilesDestination(config, "csv")


class FilesDestination:
    """One Parquet or CSV file per table in a folder or under an object storage URL."""

    def __init__(self, config: DestinationConfig, format: Literal["parquet", "csv"]) -> None:
        self.config = config
        self.format = format
        self.store: Store = open_store(config.target, config.timeout)
        self.capabilities = config.capabilities

    def check(self) -> None:
        self.store.check()

    def close(self) -> None:
        self.store.close()

    def _file(self, target: Target) -> str:
        return f"{target.name}.{self.format}"

    def version(self) -> None:  # reading what is held costs little here
        return None

    def held(self) -> dict[str, str | None]:
        suffix = f".{self.format}"
        files = [n.removesuffix(suffix) for n, folder in self.store.listing().items()
                 if not folder and n.endswith(suffix) and not n.startswith(".")]
        return held(files, FolderRecord(self.store).read())

    def claim(self, names: Mapping[str, str]) -> None:
        FolderRecord(self.store).claim(names)

    def locate(self, target: Target) -> str:
        return self.store.locate(self._file(target))

    def stored(self, target: Target) -> pa.Schema | None:
        if self.format == "csv":
            return None  # replaced whole: what it held does not matter
        name = self._file(target)
        path = self.store.readable(name)
        if path is None:
            return None
        with self._failures(name, "reading"):  # not a Parquet file: one line, no traceback
            return pq.read_schema(path)

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        if self.format == "csv":
            return
        name = self._file(target)
        path = self.store.readable(name)
        if path is None:
            return
        with self._failures(name, "reading"), pq.ParquetFile(path) as file:  # not pq.read_table: pyarrow.dataset loads pandas
            yield from live_batches(
                file.schema_arrow.names, target, columns, updated_after,
                partial(parquet_batches, file),
            )

    def apply(self, target: Target, change: TableChange) -> Committed:
        if change.mode not in self.capabilities.modes:
            raise ConfigError(f"{self.config.where}: {self.format} files are only replaced whole")
        name = self._file(target)
        held = None if change.mode == "replace" else self.store.readable(name)
        with self._failures(name):
            if held is None:
                schema = target.with_marks(change.mark and self.capabilities.marks)
                rows = CountingRows(conform(b, schema) for b in change.rows)
                self._write(name, rows, schema)
                return Committed(written=rows.count)
            with pq.ParquetFile(held) as old:
                marks = change.mark or target.deleted_name in old.schema_arrow.names
                schema = target.with_marks(marks)
                kept = KeptRows(lambda columns: parquet_batches(old, columns), target, change, schema)
                new = CountingRows(conform(b, schema) for b in kept.new_rows())
                self._write(name, itertools.chain(kept, new), schema)
            return Committed(written=new.count, deleted=kept.deleted)

    def _write(self, name: str, rows: Iterable[pa.RecordBatch], schema: pa.Schema) -> None:
        with self.store.replace(name) as temp:
            if self.format == "csv":
                encode_csv(rows, schema, temp, excel_safe=self.config.excel_safe)
            else:
                encode_parquet(rows, schema, temp)

    @contextlib.contextmanager
    def _failures(self, name: str, doing: str = "writing") -> Iterator[None]:
        try:
            yield
        except (OSError, pa.ArrowException) as exc:
            where = self.store.locate(name)
            raise DestinationError(f"{doing} {where} failed: {exc}") from exc

