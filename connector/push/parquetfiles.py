"""Parquet sources: a file, or a folder (or object storage prefix) of them read as one
table in name order; the header from the schema, only the columns asked for read, a row
group's pages decoded at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import SourceError
from connector.push.sheet import Sheet, SourceFrame, arrow_frame, blanked, check_header, one_line

__all__ = ["open_parquet"]


def open_parquet(
    name: str, markers: frozenset[str], fs: Any = None, listed: Sequence[str] = ()
) -> Sheet:
    """A Parquet file, or a folder (or object storage prefix) of them read as one table in
    name order: the header from the schema; only the columns asked for are read. In object
    storage (`fs`), `listed` holds the objects under `name`, as its caller listed them."""
    where = name.split("://", 1)[1] if fs is not None else name
    try:
        files = _parquet_files(where, None if fs is None else listed)
        schema = pq.read_schema(_handle(files[0], fs)) if files else pa.schema([])
        names = tuple(schema.names)
        for other in files[1:]:
            if tuple(pq.read_schema(_handle(other, fs)).names) != names:
                raise SourceError(f"{name}: {other} has other columns than {files[0]}")
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SourceError(f"{name}: not a readable Parquet file ({one_line(exc)})") from None
    if not files:
        raise SourceError(f"{name}: holds no Parquet file (*.parquet)")
    check_header(list(names), name)

    def read(columns: frozenset[str] | None) -> SourceFrame:
        wanted = [n for n in names if columns is None or n in columns]
        try:
            frame = arrow_frame(pa.Table.from_batches(
                [batch for path in files for batch in _batches(path, fs, wanted)],
                schema=pa.schema([schema.field(n) for n in wanted]),
            ))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SourceError(f"{name}: not a readable Parquet file ({one_line(exc)})") from None
        rows = np.arange(2, len(frame) + 2, dtype=np.int64)
        return blanked(SourceFrame(name, frame, rows, names), markers)

    return Sheet(name, names, read)


def _parquet_files(where: str, listed: Sequence[str] | None) -> list[str]:
    """`where` itself, or the Parquet files under the folder `where` (by name; files and
    folders whose names start with ``_`` or ``.`` left out, as Parquet writers mark them),
    from the disk or, in object storage, from the objects `listed` there."""
    if listed is None:
        root = Path(where)
        if not root.is_dir():
            return [where]
        found = [str(p) for p in root.rglob("*") if p.is_file()]
        base = str(root)
    else:  # one object is listed as itself, and kept: its caller took only .parquet or .pq
        found = list(listed)
        base = where.rstrip("/")
    return sorted(
        f for f in found
        if Path(f).suffix.lower() in (".parquet", ".pq")
        and not any(part.startswith(("_", ".")) for part in Path(f[len(base):]).parts if part != "/")
    )


def _handle(path: str, fs: Any) -> Any:
    return path if fs is None else fs.open(path, "rb")


def _batches(path: str, fs: Any, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """A file's batches, a row group's pages decoded at a time: reading a file whole holds
    its compressed column chunks and decoded pages besides the values (~2x)."""
    with contextlib.closing(pq.ParquetFile(_handle(path, fs), pre_buffer=False, buffer_size=1 << 20)) as file:
        yield from file.iter_batches(batch_size=65_536, columns=columns, use_threads=False)
