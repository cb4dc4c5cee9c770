"""Sets of row ids as sorted 64-bit hashes: 8 bytes an id, so a sync's memory stays flat.

A sync compares the ids a destination holds with those upstream. Held as Python strings
(or in an Arrow hash table, built again each time) a million ids cost many times that; here
they are the sorted array of their 64-bit hashes (Python's `hash` of the id: salted per
process, which is fine, since every set of one run is hashed by the same process), and
membership is a binary search. The id strings themselves are only ever streamed: from the
reader, from a destination chunk by chunk, and kept just for the few ids that must be
written or deleted.

Two different ids sharing a hash (odds about n²/2⁶⁵: 1 in 3.7·10⁷ for a million ids) make
an id look present when it is not. Every use errs on the safe side then: a row is kept one
run too long (the next run, or ``--verify``, removes it), never deleted while it exists.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["IdSet", "hash_ids"]

Hashes = npt.NDArray[np.int64]


def hash_ids(ids: pa.Array | pa.ChunkedArray) -> Hashes:
    """The 64-bit hashes of `ids` (strings), in their order."""
    return np.fromiter(map(hash, ids.to_pylist()), np.int64, len(ids))


def _sorted_distinct(hashes: Hashes) -> Hashes:
    """`hashes` sorted, without repeats. Sorts in place (the caller's array is consumed):
    `np.unique` needs several times the array's size on top, ~50 MB for a million ids."""
    if len(hashes) < 2:
        return hashes
    hashes.sort()
    repeated = hashes[1:] == hashes[:-1]
    if not repeated.any():
        return hashes
    keep = np.empty(len(hashes), np.bool_)
    keep[0] = True
    np.logical_not(repeated, out=keep[1:])
    distinct: Hashes = hashes[keep]
    return distinct


class IdSet:
    """An immutable set of ids, as their sorted, distinct 64-bit hashes."""

    def __init__(self, hashes: Hashes | None = None) -> None:
        self.hashes: Hashes = _sorted_distinct(hashes) if hashes is not None else np.empty(0, np.int64)

    @classmethod
    def of(cls, arrays: Iterable[pa.Array | pa.ChunkedArray]) -> IdSet:
        """The set of the ids in `arrays` (streamed: only their hashes are kept)."""
        return cls.of_hashes(hash_ids(a) for a in arrays)

    @classmethod
    def of_hashes(cls, hashes: Iterable[Hashes]) -> IdSet:
        parts = list(hashes)
        if len(parts) == 1:
            return cls(parts[0].copy())
        return cls(np.concatenate(parts) if parts else None)

    def __len__(self) -> int:
        return len(self.hashes)

    def __or__(self, other: IdSet) -> IdSet:
        return IdSet(np.concatenate([self.hashes, other.hashes]))

    def minus(self, other: IdSet) -> IdSet:
        return IdSet(self.hashes[~other.contains_hashes(self.hashes)])

    def contains(self, ids: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
        """For each id of `ids`, whether it is in the set."""
        return self.contains_hashes(hash_ids(ids))

    def contains_hashes(self, hashes: Hashes) -> npt.NDArray[np.bool_]:
        if not len(self.hashes):
            return np.zeros(len(hashes), np.bool_)
        at = np.searchsorted(self.hashes, hashes)
        at[at == len(self.hashes)] = 0
        found: npt.NDArray[np.bool_] = self.hashes[at] == hashes
        return found
