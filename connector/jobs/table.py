"""One table of a run: read it (everything, or what changed), work out which rows were
deleted upstream, apply the change to every destination, and only then advance the table's
state. A failure leaves every destination's table and the table's state as they were.

The plan, in order:

1. Columns. The table's columns are compared with what the last run saw (the state keeps
   them) or, without that, with what the destinations hold (`connector.destinations.evolve`).
   A change under ``schema = "freeze"`` stops the table (status ``frozen``), naming it. Under
   ``evolve`` every destination's table is evolved in the commit that writes the rows, and
   the rows are read in full: no row's ``updated_at`` moves when a column changes, so only a
   full read brings every row's value of an added, renamed or retyped column.
2. Read: in full, or incrementally with its lookback window (`connector.jobs.reads`).
   With one destination and nothing to merge (an export, a load, a replacing sync) the read
   streams straight into the destination; otherwise it goes to a local spool first.
3. Deletions (`connector.jobs.deletions`): for merging destinations only.
4. Write: one `TableChange` per destination, each one commit; rows the lookback window read
   again unchanged are left out of it.
5. State: cursor, settled window, columns, fingerprint; saved once every destination committed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from connector.arrays import arrow_ints, arrow_mask, concat_ids, int64_values, newer, no_ids
from connector.destinations import TableChange, Target
from connector.destinations.base import fits
from connector.destinations.evolve import SchemaOp, columns_of, describe, diff
from connector.errors import ApiValidationError, BadRequest, DestinationError
from connector.ids import IdSet, hash_ids
from connector.jobs.choose import Filter
from connector.jobs.context import RunContext
from connector.jobs.deletions import deleted_ids
from connector.jobs.reads import Ahead, ReadOutcome, TableReads, counted, lower_bound
from connector.jobs.spool import Spool
from connector.jobs.state import TableState
from connector.jobs.verify import Digest, batch_digest
from connector.process import raise_if_stopped
from connector.progress import progress
from connector.results import DestinationResult, TableResult, Verified
from connector.schema import Column, Table
from connector.stamps import EPOCH, micros, now, parse

__all__ = ["TableSync", "fingerprint"]


class TableSync:
    """One table of a run: its reads, its deletions, its writes, then its state."""

    def __init__(self, context: RunContext, table: Table, filter: Filter, tmp: Path) -> None:
        self.context = context
        self.job = context.job
        self.table = table
        self.filter = filter
        self.tmp = tmp
        self.destinations = context.destinations
        #: The table in each destination (its name there); `target` for what they share.
        self.placed = context.targets(table)
        self.target = Target(table, table.name)
        self.reads = TableReads(
            context.client, table, filter, self.job.source.page_size, self.job.lookback, self.note
        )
        self.fingerprint = fingerprint(table, filter)
        self.targets = tuple(
            d.locate(t) for d, t in zip(self.destinations, self.placed, strict=True)
        )

    def note(self, text: str) -> None:
        self.context.note(self.table.name, text)

    def result(self, **fields: Any) -> TableResult:
        return TableResult(self.table.name, self.table.id, targets=self.targets, **fields)

    # --- the plan -------------------------------------------------------------------------

    def run(self) -> TableResult:
        job, table = self.job, self.table
        previous = None if job.one_shot else self.context.state.table(table.id)
        with self.context.writing(self.destinations):  # what each holds, where it matters:
            stored = [  # an incremental read needs every table there; a merge or append evolves
                d.stored(t) if job.incremental or d.config.mode != "replace" else None
                for d, t in zip(self.destinations, self.placed, strict=True)
            ]
        ops = self._column_changes(previous, stored)
        changes = tuple(map(str, ops))
        if ops and job.schema == "freeze":
            return self.result(
                status="frozen",
                schema_changes=changes,
                error=f"columns changed under schema = \"freeze\": {describe(ops)}; the table "
                "was left as it was (set [sync] schema = \"evolve\" or --schema evolve to take it)",
            )
        if ops:
            self.note(f"columns changed: {describe(ops)}")
        incremental = (
            job.incremental
            and previous is not None
            and previous.cursor is not None
            and previous.schema == self.fingerprint
            and not ops
            and all(s is not None and fits(s, self.target) for s in stored)
        )
        if incremental and self._cursor_ahead(previous):
            incremental = False
        if self.context.dry_run:
            return self._plan(previous if incremental else None, changes)
        if self.context.verify and any(self._merges(job.incremental)):
            return self._verify(ops, changes)
        merges = self._merges(incremental)
        if not incremental and len(self.destinations) == 1 and not any(merges) and (
            self.context.streams_into(self.destinations[0])
        ):
            return self._stream(ops, changes)
        spool = Spool(
            self.tmp / f"{table.id}.arrow", self.target.schema, self.target.id_name,
            self.target.updated_name,
        )
        try:
            window: pa.Table | None = None
            with self._bar(full=not incremental) as bar:
                if incremental:
                    assert previous is not None and previous.cursor is not None
                    read = self.reads.changes(previous.cursor, previous.settled, spool, bar)
                else:
                    newest, served_at = (
                        self.reads.newest_or_none(self.filter) if job.incremental else (None, None)
                    )
                    ahead = self.reads.ahead(served_at)
                    spool.extend(ahead(counted(self.reads.rows(), bar)))
                    read = ReadOutcome(
                        cursor=newest or ahead.bounded(spool.cursor) or EPOCH, since=None,
                        present=spool.ids(), settled=self.reads.settled(served_at), ahead=ahead,
                    )
            spool.close()
            if incremental:
                assert previous is not None and previous.cursor is not None
                window = self._window(spool, previous.cursor, read.ahead.bound)
            with self.context.writing(self.destinations):
                return self._write(spool, read, previous, ops, changes,
                                   incremental=incremental, window=window)
        finally:
            spool.discard()

    def _cursor_ahead(self, previous: TableState | None) -> bool:
        """Whether the saved cursor is past the server's clock: then the table is read in
        full (`connector.jobs.reads.TableReads.cursor_ahead`)."""
        assert previous is not None and previous.cursor is not None
        if not self.reads.cursor_ahead(previous.cursor):
            return False
        self.note(
            f"the saved cursor {previous.cursor} is ahead of the server's clock, so what was "
            "read before it proves nothing: every row is read again"
        )
        return True

    def _ahead_rows(self, ahead: Ahead) -> int:
        """Rows read that are stamped ahead of the server's clock, named in a note: only a
        job that keeps a cursor reads them again (an export copies them as they are)."""
        note = ahead.note() if self.job.incremental and not self.job.one_shot else None
        if note is None:
            return 0
        self.note(note)
        return ahead.rows

    def _merges(self, incremental: bool) -> list[bool]:
        return [incremental or d.config.mode == "merge" for d in self.destinations]

    def _column_changes(
        self, previous: TableState | None, stored: Sequence[Any]
    ) -> tuple[SchemaOp, ...]:
        """The table's column changes since the last run (the state's columns), or, without
        those, since the destinations' tables were written (a replace rewrites them anyway)."""
        if previous is not None and previous.columns is not None:
            before = tuple(
                replace(Column.from_api(c), value_type=c.get("value_type") or "")
                for c in previous.columns
            )
            return diff(before, self.table.columns)
        held = [
            s for s, d in zip(stored, self.destinations, strict=True)
            if s is not None and d.config.mode != "replace"
        ]
        if not held:
            return ()
        system = self.table.system_names().values()
        return diff(columns_of(held[0], system), self.table.columns)

    def _bar(self, *, full: bool = True) -> Any:
        """A progress bar for a read (its length: the listed row count, for a full read)."""
        if self.context.show_progress is False or self.context.parallel:
            return nullcontext(self.context.bar)
        total = self.context.listed_rows.get(self.table.id) if full and not self.filter else None
        return progress(self.table.name, total or None, enabled=self.context.show_progress)

    # --- writes ---------------------------------------------------------------------------

    def _stream(self, ops: tuple[SchemaOp, ...], changes: tuple[str, ...]) -> TableResult:
        """One destination, nothing to merge: straight from the reader into it, no spool."""
        (destination,) = self.destinations
        newest, served_at = (
            self.reads.newest_or_none(self.filter) if self.job.incremental else (None, None)
        )
        tap = _Tally(self.target.updated_name)
        ahead = self.reads.ahead(served_at)
        with self._bar() as bar:
            rows = ahead(tap(counted(self.reads.rows(), bar)))
            try:
                done = self._commit(0, TableChange(destination.config.mode, rows, evolve=ops))
            finally:
                rows.close()  # a refused write leaves the read unfinished: end it here
        if done.status == "failed":
            return self._failed([done], read="full", rows_read=tap.rows, schema_changes=changes,
                                ahead_rows=self._ahead_rows(ahead))
        cursor = newest or ahead.bounded(tap.cursor) or EPOCH
        self._save(cursor, self.reads.settled(served_at), done.rows_written)
        return self.result(
            status="ok", read="full", rows_read=tap.rows, rows_written=done.rows_written,
            schema_changes=changes, ahead_rows=self._ahead_rows(ahead), destinations=(done,),
        )

    def _commit(self, index: int, change: TableChange) -> DestinationResult:
        """`change` committed to destination `index` (and the table's name recorded there).
        A destination's refusal (`DestinationError`) is its result, not the table's end: the
        other destinations still commit, and the table reports what each did."""
        destination, target = self.destinations[index], self.placed[index]
        where = destination.config.describe()
        try:
            done = destination.apply(target, change)
        except DestinationError as exc:
            return DestinationResult(where, self.targets[index], "failed", error=str(exc))
        self.context.claim(index, target)
        return DestinationResult(where, self.targets[index], "ok", done.written, done.deleted)

    def _failed(self, results: Sequence[DestinationResult], **fields: Any) -> TableResult:
        """The table failed in some destinations (its state is not advanced: the next run
        writes it again); what the others committed is counted and listed."""
        failed = [r for r in results if r.status == "failed"]
        alone = len(self.destinations) == 1  # its error names the place already
        return self.result(
            status="failed",
            error="; ".join(str(r.error) if alone else f"{r.destination}: {r.error}"
                            for r in failed),
            rows_written=max((r.rows_written for r in results), default=0),
            rows_deleted=max((r.rows_deleted for r in results), default=0),
            destinations=tuple(results),
            **fields,
        )

    def _write(
        self,
        spool: Spool,
        outcome: ReadOutcome,
        previous: TableState | None,
        ops: tuple[SchemaOp, ...],
        changes: tuple[str, ...],
        *,
        incremental: bool,
        window: pa.Table | None,
    ) -> TableResult:
        """Apply what was read to every destination, then advance the table's state."""
        job = self.job
        cursor, settled, ahead = outcome.cursor, outcome.settled, outcome.ahead
        merges = self._merges(incremental)
        if job.deletes == "keep":
            rows, gone = None, [no_ids() for _ in self.destinations]
        else:
            rows, gone = deleted_ids(
                self.reads, self.placed, self.destinations, merges, spool,
                since=outcome.since, present=outcome.present,
            )
        unchanged = [self._unchanged(window, d, t, previous) if merge else None
                     for d, t, merge in zip(self.destinations, self.placed, merges, strict=True)]
        again_ids = no_ids() if window is None else window.column("id").combine_chunks()
        same = [no_ids() if u is None else again_ids.filter(arrow_mask(u)) for u in unchanged]
        read = spool.ids()
        again = self._again(window, previous)
        window_rows = int(again.sum())
        late = window_rows - max(
            (int((u & again).sum()) for u in unchanged if u is not None), default=0
        ) if window_rows else 0
        to_write = [spool.rows - len(s) for s in same]
        ahead_rows = self._ahead_rows(ahead)
        if incremental and not any(to_write) and not any(len(g) for g in gone):
            self._save(cursor, settled, previous.rows if previous else 0, write=False)
            return self.result(
                status="unchanged", read="incremental", rows_read=spool.rows,
                window_rows=window_rows, ahead_rows=ahead_rows,
            )
        raise_if_stopped()  # a stop swallowed during the read: write nothing
        done: list[DestinationResult] = []
        for index, (destination, g, s, merge) in enumerate(
            zip(self.destinations, gone, same, merges, strict=True)
        ):
            mode = "merge" if merge else destination.config.mode
            skip = concat_ids([g, s])
            change = TableChange(
                mode,
                counted(spool.batches(exclude=skip), None),
                deleted=g,
                mark=merge and job.deletes == "mark",
                evolve=ops,
                ids=read.minus(IdSet.of([skip])),
            )
            done.append(self._commit(index, change))
        read_as = "incremental" if incremental else "full"
        if any(d.status == "failed" for d in done):
            return self._failed(done, read=read_as, rows_read=spool.rows, window_rows=window_rows,
                                late_rows=late, schema_changes=changes)
        if rows is None:  # not counted on the way: count what the first merging one holds
            merging = [(d, t) for d, t, m in zip(self.destinations, self.placed, merges, strict=True)
                       if m]
            rows = sum(
                b.num_rows for b in merging[0][0].scan(merging[0][1], [self.target.id_name])
            ) if merging else spool.rows
        self._save(cursor, settled, rows)
        return self.result(
            status="ok",
            read=read_as,
            rows_read=spool.rows,
            rows_written=max(d.rows_written for d in done),
            rows_deleted=max(d.rows_deleted for d in done),
            window_rows=window_rows,
            late_rows=late,
            ahead_rows=ahead_rows,
            schema_changes=changes,
            destinations=tuple(done),
        )

    def _window(self, spool: Spool, cursor: str, bound: str) -> pa.Table | None:
        """The rows an incremental read read again: from its lookback window (stamped at or
        before the last cursor), and those stamped ahead of the server's clock (past
        `bound`); their ids and stamps (UTC microseconds)."""
        id_name, updated = self.target.id_name, self.target.updated_name
        limit, beyond = micros(cursor), micros(bound)
        parts = []
        for batch in spool.batches(columns=[id_name, updated]):
            stamps = int64_values(batch.column(1), _NO_STAMP)
            inside = ((stamps <= limit) | (stamps > beyond)) & (stamps != _NO_STAMP)
            if inside.any():
                ids = batch.column(0).filter(arrow_mask(inside))
                parts.append(pa.table({"id": ids, "stamp": arrow_ints(stamps[inside])}))
        return pa.concat_tables(parts) if parts else None

    @staticmethod
    def _again(window: pa.Table | None, previous: TableState | None) -> npt.NDArray[np.bool_]:
        """Which of `_window`'s rows came from the lookback window (the others: ahead)."""
        if window is None or previous is None or previous.cursor is None:
            return np.zeros(0, np.bool_)
        return int64_values(window.column("stamp"), _NO_STAMP) <= micros(previous.cursor)

    def _unchanged(
        self,
        window: pa.Table | None,
        destination: Any,
        target: Target,
        previous: TableState | None,
    ) -> npt.NDArray[np.bool_] | None:
        """Which of `_window`'s rows `destination` holds as they are (same id, same
        ``updated_at``): read again, but neither rewritten nor counted. None: none.

        Held rows are kept as (id hash, stamp) pairs in two sorted arrays, 16 bytes a row:
        as a dict of Python strings a window of 1,000,000 rows peaked at 617 MB."""
        if window is None or previous is None or previous.cursor is None:
            return None
        since = lower_bound(previous.cursor, previous.settled, self.job.lookback)
        hashes, stamps = [], []
        columns = [self.target.id_name, self.target.updated_name]
        for batch in destination.scan(target, columns, updated_after=parse(since)):
            if batch.num_columns < 2:
                return None
            hashes.append(hash_ids(batch.column(0)))
            stamps.append(int64_values(batch.column(1), _NO_STAMP))
        if not hashes:
            return None
        held, held_stamps = np.concatenate(hashes), np.concatenate(stamps)
        del hashes, stamps
        order = np.argsort(held, kind="stable")
        held, held_stamps = held[order], held_stamps[order]
        del order
        ids = window.column("id").combine_chunks()
        wanted = hash_ids(ids)
        at = np.searchsorted(held, wanted)
        at[at == len(held)] = 0
        same: npt.NDArray[np.bool_] = (held[at] == wanted) & (
            held_stamps[at] == int64_values(window.column("stamp"), _NO_STAMP)
        )
        return same

    def _verify(self, ops: tuple[SchemaOp, ...], changes: tuple[str, ...]) -> TableResult:
        """Read every row, compare each merging destination row by row, write the difference."""
        job, target = self.job, self.target
        newest, served_at = self.reads.newest_or_none(self.filter)
        ahead = self.reads.ahead(served_at)
        spool = Spool(
            self.tmp / f"{self.table.id}.arrow", target.schema, target.id_name, target.updated_name
        )
        names = target.schema.names
        try:
            with self._bar() as bar:
                spool.extend(ahead(counted(self.reads.rows(), bar)))
            spool.close()
            upstream = Digest.of((batch_digest(b, names) for b in spool.batches()), spool.rows)
            found = Verified()
            results: list[DestinationResult] = []
            read = spool.ids()
            raise_if_stopped()
            with self.context.writing(self.destinations):
                for index, (destination, placed, merge) in enumerate(zip(
                    self.destinations, self.placed, self._merges(job.incremental), strict=True
                )):
                    if not merge:  # replaced or appended, as a full run does
                        mode = destination.config.mode
                        change = TableChange(mode, spool.batches(), evolve=ops)
                        results.append(self._commit(index, change))
                        continue
                    held = (batch_digest(b, names) for b in destination.scan(placed, names))
                    missing, different, extra = upstream.compare(held, spool)
                    if job.deletes == "keep":
                        extra = no_ids()
                    found += Verified(len(missing), len(different), len(extra))
                    rewrite = IdSet.of([missing, different])
                    if len(rewrite) or len(extra) or ops:
                        only = concat_ids([missing, different])
                        results.append(self._commit(index, TableChange(
                            "merge", spool.batches(only=only), deleted=extra,
                            mark=job.deletes == "mark", evolve=ops, ids=rewrite,
                        )))
            if any(r.status == "failed" for r in results):
                return self._failed(results, read="verify", rows_read=spool.rows,
                                    verified=found, schema_changes=changes,
                                    ahead_rows=self._ahead_rows(ahead))
            cursor = newest or ahead.bounded(spool.cursor) or EPOCH
            self._save(cursor, self.reads.settled(served_at), len(read))
        finally:
            spool.discard()
        return self.result(
            status="ok", read="verify", rows_read=spool.rows,
            rows_written=max((r.rows_written for r in results), default=0),
            rows_deleted=max((r.rows_deleted for r in results), default=0),
            verified=found, schema_changes=changes, destinations=tuple(results),
            ahead_rows=self._ahead_rows(ahead),
        )

    def _save(self, cursor: str, settled: str | None, rows: int, *, write: bool = True) -> None:
        if self.job.one_shot:
            return
        columns = tuple(
            {"id": c.id, "name": c.name, "type": c.type, "required": c.required,
             "options": list(c.options) if c.options is not None else None,
             **({"value_type": c.value_type} if c.value_type else {})}
            for c in self.table.columns
        )
        self.context.save(
            TableState(
                table_id=self.table.id,
                name=self.table.name,
                cursor=cursor if self.job.incremental else None,
                rows=rows,
                schema=self.fingerprint,
                synced_at=now(),
                settled=settled if self.job.incremental else None,
                columns=columns,
            ),
            now=write,
        )

    def _plan(self, previous: TableState | None, changes: tuple[str, ...]) -> TableResult:
        """Dry run: how many rows a real run would read, and how.

        Where the server refuses the ``updated_at`` filter, the real run reads every row and
        keeps the newer ones: the rows matching the job's filter are then the upper bound.
        """
        table, filter = self.table, self.filter
        everything = filter or None
        if previous is not None and previous.cursor is not None and not self.reads.shadowed:
            since = lower_bound(previous.cursor, previous.settled, self.job.lookback)
            changed = {**filter, "updated_at": {"gt": since}}
            try:
                total = self.context.client.list_rows(table.id, limit=1, filter=changed).total
            except (BadRequest, ApiValidationError):
                self.note("updated_at filter refused: counting every row, an upper bound")
                total = self.context.client.list_rows(table.id, limit=1, filter=everything).total
            return self.result(status="planned", read="incremental", rows_read=total or 0)
        total = self.context.client.list_rows(table.id, limit=1, filter=everything).total
        return self.result(
            status="planned", read="full", rows_read=total or 0, schema_changes=changes
        )


def fingerprint(table: Table, filter: Mapping[str, Any]) -> str:
    """Changes when the columns (a value type set on one too) or the job's filter change:
    then a full re-read is due."""
    columns = [(c.name, c.type, c.options, *([c.value_type] if c.value_type else []))
               for c in table.columns]
    raw = json.dumps([table.name, columns, filter], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


#: A held row without ``updated_at`` (never equal to a stamp read).
_NO_STAMP = np.iinfo(np.int64).min


class _Tally:
    """Counts the rows streaming through and notes the newest ``updated_at`` among them."""

    def __init__(self, updated_name: str) -> None:
        self.updated_name = updated_name
        self.rows = 0
        self.cursor: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.rows += batch.num_rows
            self.cursor = newer(self.cursor, batch.column(self.updated_name))
            yield batch
