"""SQLite storage: tables, rows (cells as JSON text), API keys — durable and serialised.

Durability: WAL journal, and every write commits before the server answers, so whatever
was acknowledged survives `kill -9` of the process (synchronous=NORMAL: a committed WAL
frame is in the OS before we reply; only a power cut could lose the last transactions).
A server that stops (SIGTERM, Ctrl-C) folds the WAL into the file (`checkpoint`), so the
`.db` alone is then a complete copy.

Lost updates: every write runs in one `BEGIN IMMEDIATE` transaction (read, merge, write),
so concurrent writers — other requests, or `connector server create-table` in another
process on the same file — are serialised by SQLite's write lock.

A row's `fields` JSON holds every column of its table, in schema order, null when empty:
exactly what the API shows, so a page goes out without parsing and re-encoding its cells.

Each table carries a `version` bumped by every row write; `paging.OffsetIndex` keys its
marks on it. Schemas are read from the database on every request (a primary-key lookup),
so a table created by another process is visible at once.
"""

from __future__ import annotations

import bisect
import hmac
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson

from connector.server import alter
from connector.server.columns import ColumnDef, SpecError, TableDef, parse_spec
from connector.server.keys import ApiKey, hash_key, new_key
from connector.server.paging import OffsetIndex
from connector.server.problems import ApiProblem, echo, not_found
from connector.server.query import RowQuery
from connector.server.rows import Clock, Page, iso, row_dict, row_id, wire_size

DEFAULT_DB = "connector-server.db"

#: Sorting a table this big by a user column first builds an index on that column.
SORT_INDEX_MIN_ROWS = 5_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tables (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    columns TEXT NOT NULL,
    created_at TEXT NOT NULL,
    row_count INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS rows (
    table_id TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    fields TEXT NOT NULL,
    PRIMARY KEY (table_id, id)
);
CREATE INDEX IF NOT EXISTS rows_by_created ON rows (table_id, created_at, id);
CREATE INDEX IF NOT EXISTS rows_by_updated ON rows (table_id, updated_at, id);
CREATE TABLE IF NOT EXISTS keys (
    hash TEXT PRIMARY KEY,
    read_only INTEGER NOT NULL,
    tables TEXT,
    created_at TEXT NOT NULL,
    admin INTEGER NOT NULL DEFAULT 0
);
"""


class Storage:
    """One SQLite connection, one transaction at a time.

    The server calls it from its event loop; in-process tests may drive one app from
    several threads' loops, so transactions also take a lock.
    """

    def __init__(self, path: str = DEFAULT_DB) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        self._db.execute("PRAGMA busy_timeout = 10000")
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        # Deep pages of big tables read pages all over the file: map it rather than copy.
        self._db.execute("PRAGMA mmap_size = 1073741824")
        self._db.execute("PRAGMA cache_size = -65536")
        self._db.executescript(_SCHEMA)
        if "admin" not in {r[1] for r in self._db.execute("PRAGMA table_info(keys)")}:  # an older file
            try:
                self._db.execute("ALTER TABLE keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # else another process added it first
                    raise
        self.clock = Clock()
        self.offsets = OffsetIndex()
        self._indexed: set[str] = set()
        self._serial = threading.RLock()

    def close(self) -> None:
        self._db.close()

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the database file: the file alone holds everything.

        TRUNCATE empties the `-wal` file even while another process keeps it open (the last
        connection to close removes it). Waits for writers of other processes, up to the
        busy timeout.
        """
        if self.path != ":memory:":
            with self._serial:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def on_progress(self, callback: Callable[[], int] | None, every: int = 1000) -> None:
        """Call `callback` every `every` SQLite VM steps: benchmarks count work with it,
        a measure the machine's load does not blur."""
        self._db.set_progress_handler(callback, every)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._serial:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A snapshot: the count, the page and the version agree with each other."""
        with self._serial:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    # -- tables -------------------------------------------------------------------------

    def create_table(self, spec: Any) -> TableDef:
        """Create a table from a spec (see `columns.parse_spec`); SpecError if malformed."""
        name, columns = parse_spec(spec)
        table = TableDef("tbl_" + secrets.token_hex(6), name, columns, self.clock.now())
        cols = orjson.dumps([c.to_api() for c in columns]).decode()
        with self._write() as db:
            if db.execute("SELECT 1 FROM tables WHERE name = ?", (name,)).fetchone():
                raise SpecError(f"a table called {name!r} already exists")
            db.execute(
                "INSERT INTO tables (id, name, columns, created_at) VALUES (?, ?, ?, ?)",
                (table.id, name, cols, table.created_at),
            )
        return table

    def table(self, table_id: str) -> TableDef | None:
        row = self._db.execute(
            "SELECT id, name, columns, created_at FROM tables WHERE id = ?", (table_id,)
        ).fetchone()
        return _table(row) if row else None

    def table_by_name(self, name: str) -> TableDef | None:
        row = self._db.execute(
            "SELECT id, name, columns, created_at FROM tables WHERE name = ?", (name,)
        ).fetchone()
        return _table(row) if row else None

    def alter_table(self, ref: str, change: alter.ColumnChange) -> alter.Altered:
        """Apply one column change (see `alter`) to the table with id or name `ref`: its
        schema and every row's cells in one transaction, or nothing (SpecError saying why).

        No row's stamps move. The table's version moves, so remembered offsets and totals
        (`paging`) of this server, or of one running on the same file, are not used again.
        """
        with self._write() as db:
            found = db.execute(
                "SELECT id, name, columns, created_at FROM tables WHERE id = ?", (ref,)
            ).fetchone() or db.execute(
                "SELECT id, name, columns, created_at FROM tables WHERE name = ?", (ref,)
            ).fetchone()
            if found is None:
                raise SpecError(f"no table with id or name {ref!r}")
            planned = alter.plan(_table(found), change)
            emptied = 0
            refused: list[SpecError] = []

            def rewrite(rid: str, stored: str) -> str:
                nonlocal emptied
                try:
                    fields, n = planned.rewrite(orjson.loads(stored))
                except SpecError as exc:
                    refused.append(SpecError(f"table {planned.table.name!r}, row {rid}: {exc}; nothing was changed"))
                    raise
                emptied += n
                return orjson.dumps(fields).decode()

            db.create_function("alter_fields", 2, rewrite)
            try:
                db.execute("UPDATE rows SET fields = alter_fields(id, fields) WHERE table_id = ?", (planned.table.id,))
            except sqlite3.OperationalError:
                if refused:
                    raise refused[0] from None
                raise
            finally:
                db.create_function("alter_fields", 2, None)
            db.execute(
                "UPDATE tables SET columns = ?, version = version + 1 WHERE id = ?",
                (orjson.dumps([c.to_api() for c in planned.table.columns]).decode(), planned.table.id),
            )
        return alter.Altered(planned.table, planned.summary, emptied)

    def find_table(self, ref: str) -> TableDef | None:
        """The table with id `ref`, else the one called `ref`: how commands name a table."""
        return self.table(ref) or self.table_by_name(ref)

    def summaries(self) -> list[dict[str, Any]]:
        """Every table with its column and row counts, oldest first."""
        out = []
        for tid, name, cols, created, count in self._db.execute(
            "SELECT id, name, columns, created_at, row_count FROM tables ORDER BY created_at, id"
        ):
            out.append(
                {
                    "id": tid,
                    "name": name,
                    "columns": len(orjson.loads(cols)),
                    "rows": count,
                    "created_at": created,
                }
            )
        return out

    # -- rows: reads --------------------------------------------------------------------

    def list_rows(self, table: TableDef, query: RowQuery, *, max_bytes: int | None = None) -> Page:
        """One page, seeking from the nearest remembered offset (see `paging`).

        With `max_bytes`, rows are taken while their JSON stays within it, but never fewer
        than two (one if the limit is 1), so a reader whose pages overlap by a row still
        moves on; such a page is `cut`. Records are read one at a time, so memory stays
        near `max_bytes` plus a row or two, whatever the limit.
        """
        self._ensure_sort_index(table, query)
        with self._read() as db:
            version, row_count = db.execute(
                "SELECT version, row_count FROM tables WHERE id = ?", (table.id,)
            ).fetchone()
            sig = query.signature
            key, skip = None, query.offset
            mark = self.offsets.nearest(sig, version, query.offset)
            if mark is not None:
                key, skip = mark[1], query.offset - mark[0]
            found: list[Any] = []
            cut, size, least = False, 0, min(2, query.limit)
            for sql, params in query.segments(key, exact=skip == 0):
                want = query.limit + 1 - len(found)
                if want <= 0 or cut:
                    break
                cursor = db.execute(f"{sql} LIMIT ? OFFSET ?", [*params, want, skip])
                for record in cursor:
                    found.append(record)
                    if max_bytes is not None and len(found) <= query.limit:
                        size += wire_size(record)
                        if size > max_bytes and len(found) > least:
                            cut = True  # this record only marks where the next page starts
                            break
                cursor.close()
            n = len(query.keys)
            if found:
                self.offsets.remember(sig, version, query.offset, tuple(found[0][4 : 4 + n]))
            taken = len(found) - 1 if cut else min(len(found), query.limit)
            if len(found) > taken:
                extra = found.pop()
                self.offsets.remember(sig, version, query.offset + taken, tuple(extra[4 : 4 + n]))
            if not query.conditions:
                total = row_count
            else:
                cached = self.offsets.total(sig, version)
                if cached is None:
                    where, params = query.where()
                    cached = db.execute(f"SELECT count(*) FROM rows WHERE {where}", params).fetchone()[0]
                    self.offsets.remember_total(sig, version, cached)
                total = cached
        return Page([r[:4] for r in found], total, cut=cut)

    def row_ids_before(self, query: RowQuery) -> list[str]:
        """Ids of the rows before `query.offset`, in its order and filter: what a read passed.

        For the read faults (`faults.disturb_read`): a plain scan, its cost grows with the offset.
        """
        ((sql, params),) = query.segments(None, exact=True)
        with self._read() as db:
            return [r[0] for r in db.execute(f"{sql} LIMIT ?", [*params, query.offset])]

    def row_count(self, table_id: str) -> int:
        found = self._db.execute("SELECT row_count FROM tables WHERE id = ?", (table_id,)).fetchone()
        return int(found[0]) if found else 0

    def row_fields(self, table: TableDef, position: int) -> dict[str, Any] | None:
        """The `fields` of the row at `position` in creation order, or None past the end."""
        found = self._db.execute(
            "SELECT fields FROM rows WHERE table_id = ? ORDER BY created_at, id LIMIT 1 OFFSET ?",
            (table.id, position),
        ).fetchone()
        return None if found is None else dict(orjson.loads(found[0]))

    def _ensure_sort_index(self, table: TableDef, query: RowQuery) -> None:
        """Index a user-column order once the table is big enough for scans to hurt."""
        ddl = query.sort_index()
        if ddl is None or ddl in self._indexed:
            return
        found = self._db.execute("SELECT row_count FROM tables WHERE id = ?", (table.id,)).fetchone()
        if found and found[0] >= SORT_INDEX_MIN_ROWS:
            with self._write() as db:
                db.execute(ddl)
            self._indexed.add(ddl)

    # -- rows: writes -------------------------------------------------------------------

    def insert_rows(
        self, table: TableDef, cells: Sequence[dict[str, Any]], *,
        created_at: str | None = None, updated_at: str | None = None,
    ) -> list[dict[str, Any]]:
        """Insert validated cells (see `TableDef.check_create`) in order, all or nothing."""
        return self.put_rows(table, self.new_rows(table, cells, created_at=created_at, updated_at=updated_at))

    def new_rows(
        self, table: TableDef, cells: Sequence[dict[str, Any]], *,
        created_at: str | None = None, updated_at: str | None = None,
    ) -> list[dict[str, Any]]:
        """Rows for validated cells as the API shows them, ids and stamps taken now; not written.

        `created_at` / `updated_at` replace the clock's stamps (the `faults` that stamp rows);
        ids still come from the clock, so (created_at, id) stays request order.
        """
        rows = []
        for tick, cell in zip(self.clock.ticks(len(cells)), cells, strict=True):
            stamp = iso(tick)
            rows.append(row_dict(row_id(tick), created_at or stamp, updated_at or stamp, table.present(cell)))
        return rows

    def put_rows(self, table: TableDef, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write rows made by `new_rows`, perhaps later (their stamps stay), all or nothing.

        Returns them as stored: checked again, and 400 naming the column, if the table's
        columns changed since they were checked (`_current`).
        """
        with self._write() as db:
            current = self._current(db, table)
            if current.columns != table.columns:
                rows = [
                    {**row, "fields": current.present(current.check_create(_filled(row["fields"]), index=i))}
                    for i, row in enumerate(rows)
                ]
            records = [
                (table.id, r["id"], r["created_at"], r["updated_at"], orjson.dumps(r["fields"]).decode())
                for r in rows
            ]
            db.executemany(
                "INSERT INTO rows (table_id, id, created_at, updated_at, fields) VALUES (?, ?, ?, ?, ?)",
                records,
            )
            version = self._touch(db, table.id, len(records))
        self._carry(table.id, version, added=[(r[2], r[1]) for r in records], removed=[])
        return list(rows)

    def update_row(
        self, table: TableDef, row_id: str, changes: dict[str, Any], *, stamp: str | None = None
    ) -> dict[str, Any]:
        """Merge validated `changes` into the stored cells (None clears); 404 if no such row.

        `updated_at` becomes `stamp` (default: now). Changes checked against columns that
        have changed since are checked again (400 naming the column).
        """
        with self._write() as db:
            current = self._current(db, table)
            if current.columns != table.columns:
                changes = current.check_update(changes)
            found = db.execute(
                "SELECT created_at, fields FROM rows WHERE table_id = ? AND id = ?", (table.id, row_id)
            ).fetchone()
            if found is None:
                raise not_found(f"row {echo(row_id)} does not exist in table {table.id!r}")
            created_at, stored = found
            fields = current.present({**orjson.loads(stored), **changes})
            stamp = stamp or self.clock.now()
            text = orjson.dumps(fields).decode()
            db.execute(
                "UPDATE rows SET fields = ?, updated_at = ? WHERE table_id = ? AND id = ?",
                (text, stamp, table.id, row_id),
            )
            version = self._touch(db, table.id, 0)
        self._carry(table.id, version, added=[], removed=[])
        return row_dict(row_id, created_at, stamp, fields)

    def row(self, table_id: str, row_id: str) -> dict[str, Any] | None:
        """The stored row as the API shows it, or None."""
        found = self._db.execute(
            "SELECT id, created_at, updated_at, fields FROM rows WHERE table_id = ? AND id = ?", (table_id, row_id)
        ).fetchone()
        return None if found is None else row_dict(found[0], found[1], found[2], orjson.loads(found[3]))

    def _current(self, db: sqlite3.Connection, table: TableDef) -> TableDef:
        """The table as stored now, inside a write: its columns may have changed (`alter_table`,
        another process) since a request read them; 404 if the table is gone."""
        found = db.execute(
            "SELECT id, name, columns, created_at FROM tables WHERE id = ?", (table.id,)
        ).fetchone()
        if found is None:
            raise not_found(f"table {table.id!r} does not exist")
        return _table(found)

    def delete_rows(self, table: TableDef, row_ids: Sequence[str], *, missing_ok: bool = False) -> list[str]:
        """Delete every one of `row_ids` or none: 404 naming the first unknown id.

        With `missing_ok`, ids of rows already gone are skipped; returns the ids deleted.
        """
        unique = list(dict.fromkeys(row_ids))
        removed: list[tuple[str, str]] = []
        with self._write() as db:
            for chunk in _chunks(unique, 500):
                marks = ", ".join("?" for _ in chunk)
                found = db.execute(
                    f"SELECT created_at, id FROM rows WHERE table_id = ? AND id IN ({marks})", (table.id, *chunk)
                ).fetchall()
                removed += found
                known = {r[1] for r in found}
                missing = [r for r in chunk if r not in known]
                if missing and not missing_ok:
                    raise ApiProblem(
                        404, f"row {echo(missing[0])} does not exist in table {table.id!r}; nothing was deleted"
                    )
            unique = [r[1] for r in removed] if missing_ok else unique
            db.executemany("DELETE FROM rows WHERE table_id = ? AND id = ?", [(table.id, r) for r in unique])
            version = self._touch(db, table.id, -len(unique))
        self._carry(table.id, version, added=[], removed=removed)
        return unique

    def _touch(self, db: sqlite3.Connection, table_id: str, added: int) -> int:
        """Count the write against the table; returns its new version."""
        version: int = db.execute(
            "UPDATE tables SET version = version + 1, row_count = row_count + ? WHERE id = ? RETURNING version",
            (added, table_id),
        ).fetchone()[0]
        return version

    def _carry(
        self, table_id: str, version: int, *, added: Sequence[tuple[str, str]], removed: Sequence[tuple[str, str]]
    ) -> None:
        """Keep the marks of unfiltered creation-order and id-order reads across a write.

        In those orders a write only adds or removes rows — created_at and id never change —
        so a mark moves by the rows added before it minus the rows removed before it. Other
        reads (filtered, or by updated_at or a cell, which updates reorder) start over.
        """
        by_created = (sorted(added), sorted(removed))
        by_id = (sorted(k[1:] for k in added), sorted(k[1:] for k in removed))

        def shift(signature: tuple[Any, ...], key: tuple[Any, ...]) -> int | None:
            _, keys, descending, conditions = signature
            if conditions or keys not in (("created_at", "id"), ("id",)):
                return None
            plus, minus = by_created if keys == ("created_at", "id") else by_id
            if descending:  # rows after the key come before it
                return (len(plus) - bisect.bisect_right(plus, key)) - (len(minus) - bisect.bisect_right(minus, key))
            return bisect.bisect_left(plus, key) - bisect.bisect_left(minus, key)

        self.offsets.carry(table_id, version - 1, version, shift)

    # -- keys ---------------------------------------------------------------------------

    def create_key(
        self, *, read_only: bool = False, tables: Iterable[str] | None = None, admin: bool = False
    ) -> str:
        """Store a new random key (hashed) and return it; `tables` are ids or names, checked to exist.

        `admin`: the key may also change faults; its access to tables is as for any key.
        """
        raw = new_key()
        ids: list[str] | None = None
        if tables is not None:
            ids = []
            for ref in tables:
                table = self.find_table(ref)
                if table is None:
                    raise KeyError(f"no table with id or name {ref!r}")
                ids.append(table.id)
        with self._write() as db:
            db.execute(
                "INSERT INTO keys (hash, read_only, tables, created_at, admin) VALUES (?, ?, ?, ?, ?)",
                (
                    hash_key(raw),
                    int(read_only),
                    None if ids is None else orjson.dumps(ids).decode(),
                    self.clock.now(),
                    int(admin),
                ),
            )
        return raw

    def register_key(self, raw: str) -> ApiKey | None:
        """Register `raw` as a full-access key, unless it is registered already.

        Returns the existing key, left exactly as it was (a read-only or scoped key stays
        so), or None when `raw` was new and is now stored.
        """
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO keys (hash, read_only, tables, created_at) VALUES (?, 0, NULL, ?)",
                (hash_key(raw), self.clock.now()),
            )
            created = db.execute("SELECT changes()").fetchone()[0] == 1
        return None if created else self.find_key(raw)

    def has_keys(self) -> bool:
        return self._db.execute("SELECT 1 FROM keys LIMIT 1").fetchone() is not None

    def find_key(self, raw: str) -> ApiKey | None:
        digest = hash_key(raw)
        found = self._db.execute(
            "SELECT hash, read_only, tables, admin FROM keys WHERE hash = ?", (digest,)
        ).fetchone()
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        tables = None if found[2] is None else frozenset(orjson.loads(found[2]))
        return ApiKey(digest=digest, read_only=bool(found[1]), tables=tables, admin=bool(found[3]))


def _table(row: tuple[str, str, str, str]) -> TableDef:
    tid, name, cols, created = row
    columns = tuple(
        ColumnDef(
            c["name"],
            c["type"],
            bool(c.get("required", False)),
            tuple(c["options"]) if "options" in c else None,
            c.get("id", ""),
        )
        for c in orjson.loads(cols)
    )
    return TableDef(tid, name, columns, created)


def _filled(fields: dict[str, Any]) -> dict[str, Any]:
    """The cells of `fields` that hold a value: what `TableDef.check_create` takes."""
    return {k: v for k, v in fields.items() if v is not None}


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
