"""Which rows a sync deletes from its destinations: never a row that exists upstream.

A full read (or the sorted fallback) saw every id: a merging destination drops the ids it
holds that the read did not see. An incremental read asks first whether anything was
deleted at all. The destination will hold H = its ids plus the ids read (the change read
covers ``updated_at`` > L, L at or before the last cursor: `connector.jobs.reads`). After
the change read the run counts the server's matching rows (N), then reads the ids of rows
with ``updated_at`` > S again (R: rows created or changed since S, which the change read may
have missed). Every row existing at the count with ``updated_at`` <= S that was visible
throughout the change read, or to an earlier run, is in H; every one newer than S that still
exists at the end of the re-read is in R; so when |H ∪ R| = N, H ∪ R is exactly what existed
at the count and nothing was deleted. Otherwise the id pass decides: a destination loses
only ids the server did not list in a read during which every row present throughout was
listed — never a row that exists upstream.

The residual windows of the count check, where |H ∪ R| = N although a row was deleted: a
deleted row held in H can be matched in number by a row H ∪ R lacks that existed at the count
— a row newer than S deleted (or no longer matching the filter) between the count and the
end of the re-read, or a write stamped at or before S that became visible only after the
change read (a late commit: the lookback window reads it next run). Either way the deleted
row is kept one run too long, never a live row removed: the next run's counts differ (the
late row is then in H) and its id pass removes it. (Timestamps are assumed never to repeat
on the server: a row created after S has ``updated_at`` > S.) ``--verify`` (or
``[sync] verify_every``) skips the count and compares every row.

Destinations' ids are streamed, chunk by chunk, against sets of hashes (`connector.ids`):
memory stays flat.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from connector.arrays import arrow_mask, concat_ids, no_ids
from connector.destinations import Destination, Target
from connector.ids import IdSet, hash_ids
from connector.jobs.reads import TableReads
from connector.jobs.spool import Spool

__all__ = ["deleted_ids"]


def deleted_ids(
    reads: TableReads,
    targets: Sequence[Target],
    destinations: Sequence[Destination],
    merges: Sequence[bool],
    spool: Spool,
    *,
    since: str | None,
    present: IdSet | None,
) -> tuple[int | None, list[pa.Array]]:
    """Per destination, the ids to delete from it; and the rows the first merging
    destination holds after the write (None: not counted).

    Only a merging destination (every one, on an incremental read) has rows deleted; a
    replace or an append beside it takes none. `targets`: the table in each destination.
    `present`: the ids a full read saw (None:
    an incremental read, whose snapshot `since` the count check re-reads from).
    """
    nothing = [no_ids() for _ in destinations]
    if not any(merges):
        return None, nothing
    read = spool.ids()
    merging = [(d, t) for d, t, merge in zip(destinations, targets, merges, strict=True) if merge]
    id_name = targets[0].id_name
    if present is None:
        assert since is not None
        held = _unless_nothing_deleted(reads, merging, read, since)
        if held is not None:
            return held, nothing
        present = reads.ids()
    gone: list[pa.Array] = []
    rows: int | None = None
    # Read here but not listed by the id pass after: deleted during this run.
    vanished = concat_ids(
        b.column(0).filter(arrow_mask(~present.contains(b.column(0))))
        for b in spool.batches(columns=[id_name])
    ) if len(read.minus(present)) else no_ids()
    for destination, target, merge in zip(destinations, targets, merges, strict=True):
        if not merge:
            gone.append(no_ids())
            continue
        count, chunks = 0, [vanished]
        for batch in destination.scan(target, [id_name]):
            ids = batch.column(0)
            hashes = hash_ids(ids)
            count += len(ids) - int(read.contains_hashes(hashes).sum())
            chunks.append(ids.filter(arrow_mask(~present.contains_hashes(hashes))))
        gone.append(concat_ids(chunks))
        if rows is None:
            rows = count + len(read) - len(IdSet.of([gone[-1]]))
    return rows, gone


def _unless_nothing_deleted(
    reads: TableReads,
    destinations: Sequence[tuple[Destination, Target]],
    read: IdSet,
    since: str,
) -> int | None:
    """The count check (see the module docstring): the rows each destination will hold,
    when that equals the server's count for every one of them; else None (an id pass is due)."""
    total = reads.count()
    if total is None:
        return None
    newer = reads.ids({**reads.filter, "updated_at": {"gt": since}})
    extra = read | newer
    first: int | None = None
    for destination, target in destinations:
        count = in_read = in_extra = 0
        for batch in destination.scan(target, [target.id_name]):
            hashes = hash_ids(batch.column(0))
            count += len(hashes)
            in_read += int(read.contains_hashes(hashes).sum())
            in_extra += int(extra.contains_hashes(hashes).sum())
        if count + len(extra) - in_extra != total:
            return None
        if first is None:
            first = count + len(read) - in_read
    return first
