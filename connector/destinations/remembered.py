"""What a sync remembers of a destination, so that a run where nothing changed there leaves it unopened.

A quiet incremental run asks every merging destination what it holds: the names
(`Destination.held`), each table's columns (`stored`), its live ids and stamps (`scan`: the
count check, the lookback window's unchanged rows). For Iceberg that is pyiceberg imported
and the catalog loaded, ~0.6 s of CPU, more than the rest of a quiet run. A kind that reads a
version of everything it holds without its library (`Destination.version`) lets a sync keep
those answers in a folder beside its state (`Job.memory_path`), stamped with that version;
a later run that reads the same version takes them from there, and opens the destination
only to write.

Sound because the version moves with every commit and every name claimed there, by any
writer: a kept answer is the one the destination would give. A run that wrote there keeps
nothing (its own commits moved the version: the next run reads again, and keeps what it
read), nor does a run whose version moved while it ran, nor one that did not finish. Each
table's answers are kept for one shape of the table (`_shape`): a column changed upstream
asks the destination again.

Ids and stamps are kept as Arrow files and read back batch by batch: memory stays flat.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from connector.atomic import atomic_path
from connector.destinations.base import Committed, Destination, TableChange, Target, live_batches
from connector.errors import DestinationError

__all__ = ["RememberedDestination"]

INDEX = "index.json"


@dataclass
class _Table:
    """What is known of one table, for one shape of it."""

    shape: str
    stored: pa.Schema | None = None
    has_stored: bool = False
    rows: str | None = None  # the file of its live ids and stamps


@dataclass
class _Memory:
    version: str
    held: dict[str, str | None] | None = None
    tables: dict[str, _Table] = field(default_factory=dict)


class RememberedDestination:
    """`inner`, whose `version` is read as the run begins, its answers kept under `memory`
    (a job's `memory_path`: a folder for each destination) while the version stays."""

    def __init__(self, inner: Destination, version: str, memory: Path) -> None:
        self.inner = inner
        self.config = inner.config
        self.capabilities = inner.capabilities
        self.folder = memory / hashlib.sha256(inner.config.describe().encode()).hexdigest()[:16]
        self._lock = threading.Lock()
        self._wrote = self._unkept = self._learned = False
        kept = _read(self.folder)
        #: Known to hold what `_memory` says from the start (so the check is not needed).
        self._known = kept is not None and kept.version == version
        self._memory = kept if kept is not None and self._known else _Memory(version)

    @property
    def _remembering(self) -> bool:
        """Answers are kept for later runs: this run wrote nothing here yet (once it has,
        nothing it learns is kept), nor failed to keep an answer."""
        return not (self._wrote or self._unkept)

    # --- answered from memory where it can be -----------------------------------------------

    def check(self) -> None:
        if not self._known:
            self.inner.check()

    def held(self) -> dict[str, str | None]:
        if not self._remembering:
            return self.inner.held()
        if self._memory.held is None:
            self._memory.held, self._learned = self.inner.held(), True
        return dict(self._memory.held)

    def stored(self, target: Target) -> pa.Schema | None:
        if not self._remembering:
            return self.inner.stored(target)
        table = self._table(target)
        if not table.has_stored:
            table.stored, table.has_stored = self.inner.stored(target), True
            self._learned = True
        return table.stored

    def scan(
        self, target: Target, columns: Sequence[str], *, updated_after: datetime | None = None
    ) -> Iterator[pa.RecordBatch]:
        kept = [target.id_name, target.updated_name]
        table = self._table(target) if self._remembering and set(columns) <= set(kept) else None
        if table is not None and table.rows is None:
            table.rows = self._record(target, kept)
        if table is None or table.rows is None:
            yield from self.inner.scan(target, columns, updated_after=updated_after)
            return
        with pa.memory_map(str(self.folder / table.rows)) as source:
            reader = pa.ipc.open_file(source)
            yield from live_batches(  # the file holds only the columns kept: read them all
                reader.schema.names, target, columns, updated_after,
                lambda _: map(reader.get_batch, range(reader.num_record_batches)),
            )

    # --- changes: nothing kept of what they touch ---------------------------------------------

    def apply(self, target: Target, change: TableChange) -> Committed:
        with self._lock:
            self._wrote = True
            self._memory.tables.pop(target.name, None)
        return self.inner.apply(target, change)

    def claim(self, names: Mapping[str, str]) -> None:
        self._wrote = True
        self.inner.claim(names)

    def locate(self, target: Target) -> str:
        return self.inner.locate(target)

    def version(self) -> str | None:
        return self.inner.version()

    def close(self) -> None:
        self.inner.close()

    def keep(self) -> None:
        """After a run that finished: keep what it learned, if nothing here changed while it
        ran; else forget everything (the next run asks the destination)."""
        memory = self._memory
        if self._wrote or self._unkept or self.inner.version() != memory.version:
            shutil.rmtree(self.folder, ignore_errors=True)
        elif self._learned or not self._known:  # else the folder already says it all
            with contextlib.suppress(OSError, DestinationError):  # a cache: nothing lost
                self._write(memory)

    def _write(self, memory: _Memory) -> None:
        index = {
            "version": memory.version,
            "held": memory.held,
            "tables": {
                name: {"shape": t.shape, "rows": t.rows}
                | ({"stored": _schema_text(t.stored)} if t.has_stored else {})
                for name, t in memory.tables.items()
            },
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.folder / INDEX) as temp:
            temp.write_text(json.dumps(index, ensure_ascii=False), encoding="utf-8")
        kept = {INDEX, *(t.rows for t in memory.tables.values() if t.rows)}
        for path in self.folder.iterdir():
            if path.name not in kept:
                path.unlink(missing_ok=True)

    # --- inside -------------------------------------------------------------------------------

    def _table(self, target: Target) -> _Table:
        shape = _shape(target)
        with self._lock:
            table = self._memory.tables.get(target.name)
            if table is None or table.shape != shape:
                table = self._memory.tables[target.name] = _Table(shape)
            return table

    def _record(self, target: Target, columns: list[str]) -> str | None:
        """Read the table's live ids and stamps into a file of the folder; its name. None
        when the folder cannot take it (full, or not a folder): nothing is kept then, and
        the destination answers itself. A failure of the destination's read is its own."""
        read_failed = False

        def read() -> Iterator[pa.RecordBatch]:
            nonlocal read_failed
            try:
                yield from self.inner.scan(target, columns)
            except BaseException:
                read_failed = True
                raise

        name = f"{uuid.uuid4().hex}.arrow"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.folder / name) as temp, pa.OSFile(str(temp), "wb") as sink:
                writer = None
                for batch in read():
                    writer = writer or pa.ipc.new_file(sink, batch.schema)
                    writer.write_batch(batch)
                empty = pa.schema([target.schema.field(c) for c in columns])
                (writer or pa.ipc.new_file(sink, empty)).close()
        except (OSError, DestinationError):
            if read_failed:
                raise
            self._unkept = True  # nothing kept of this run: answers from the destination
            return None
        self._learned = True
        return name


def _shape(target: Target) -> str:
    """The table's name and its schema here, marks included: what the answers depend on."""
    schema = target.with_marks(True).serialize().to_pybytes()
    return hashlib.sha256(target.name.encode() + b"\0" + schema).hexdigest()


def _schema_text(schema: pa.Schema | None) -> str | None:
    return None if schema is None else base64.b64encode(schema.serialize().to_pybytes()).decode()


def _read(folder: Path) -> _Memory | None:
    """The memory kept in `folder`; None when there is none, or it cannot be read whole."""
    try:
        index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
        tables = {}
        for name, t in index["tables"].items():
            table = _Table(str(t["shape"]), rows=t["rows"])
            if "stored" in t:
                table.has_stored = True
                table.stored = None if t["stored"] is None else pa.ipc.read_schema(
                    pa.py_buffer(base64.b64decode(t["stored"]))
                )
            if table.rows is not None and not (folder / table.rows).is_file():
                table.rows = None
            tables[str(name)] = table
        held = index["held"]
        return _Memory(str(index["version"]), None if held is None else dict(held), tables)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException):
        return None
