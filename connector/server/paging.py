"""Deep offsets at constant cost: remember the sort key found at each offset served.

`OFFSET n` makes SQLite step over n rows, so page n of a scan costs O(n) and reading a
table costs O(n²). Instead, after serving rows [offset, offset+limit) we remember the sort
key of the row at offset+limit (we fetch one extra row to learn it). The next page of the
same query seeks to that key through the index and skips nothing. Marks belong to one
ordered result set (`RowQuery.signature`) at one table write version; any write to the
table bumps the version and the marks are forgotten — unless the writer can say where
each mark moved (`carry`): rows appended to a creation-order read shift nothing before them.
A cold jump to a deep offset seeks from the nearest mark below it, or scans from the start
once.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Marks:
    version: int
    offsets: list[int] = field(default_factory=list)
    keys: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    total: int | None = None


class OffsetIndex:
    """A bounded LRU of result sets, each mapping offsets to sort keys."""

    def __init__(self, max_queries: int = 256, max_marks: int = 50_000) -> None:
        self._sets: OrderedDict[Hashable, _Marks] = OrderedDict()
        self._max_queries = max_queries
        self._max_marks = max_marks

    def _get(self, signature: Hashable, version: int) -> _Marks:
        marks = self._sets.get(signature)
        if marks is None or marks.version != version:
            marks = _Marks(version)
            self._sets[signature] = marks
            while len(self._sets) > self._max_queries:
                self._sets.popitem(last=False)
        self._sets.move_to_end(signature)
        return marks

    def nearest(self, signature: Hashable, version: int, offset: int) -> tuple[int, tuple[Any, ...]] | None:
        """The greatest remembered offset <= `offset`, with the sort key of its row."""
        marks = self._get(signature, version)
        i = bisect.bisect_right(marks.offsets, offset)
        if i == 0:
            return None
        at = marks.offsets[i - 1]
        return at, marks.keys[at]

    def remember(self, signature: Hashable, version: int, offset: int, key: tuple[Any, ...]) -> None:
        marks = self._get(signature, version)
        if offset in marks.keys:
            return
        if len(marks.offsets) >= self._max_marks:
            # Keep the deepest half of the marks: sequential readers move forward.
            half = len(marks.offsets) // 2
            for dropped in marks.offsets[:half]:
                del marks.keys[dropped]
            del marks.offsets[:half]
        bisect.insort(marks.offsets, offset)
        marks.keys[offset] = key

    def carry(
        self,
        table_id: str,
        old: int,
        new: int,
        shift: Callable[[Any, tuple[Any, ...]], int | None],
    ) -> None:
        """Move the marks of `table_id` at version `old` to version `new`, across one write.

        `shift(signature, key)` says how many places the row with `key` moved, or None when
        that result set cannot be followed (its marks are then dropped). Signatures are
        tuples that start with the table id.
        """
        for signature, marks in list(self._sets.items()):
            if not isinstance(signature, tuple) or signature[0] != table_id or marks.version != old:
                continue
            moved: dict[int, tuple[Any, ...]] = {}
            for offset in marks.offsets:
                delta = shift(signature, marks.keys[offset])
                if delta is None:
                    del self._sets[signature]
                    break
                moved[offset + delta] = marks.keys[offset]
            else:
                marks.version, marks.offsets, marks.keys, marks.total = new, sorted(moved), moved, None

    def total(self, signature: Hashable, version: int) -> int | None:
        return self._get(signature, version).total

    def remember_total(self, signature: Hashable, version: int, total: int) -> None:
        self._get(signature, version).total = total
