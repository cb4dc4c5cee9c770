"""Per-request bounds, so that no single request can take the server's memory.

    body      a request body, in bytes                 above it: 413
    cell      a text cell a write stores, UTF-8 bytes  above it: 400 VALIDATION_ERROR, `field`
                                                       naming the column
    response  about the largest page of rows           above it: a page with fewer rows (at
                                                       least two; one if `limit` is 1) whose
                                                       `limit` reports how many it holds

A client stepping by the applied `limit` of each page misses nothing and stops as usual on
a page shorter than its `limit`. Light on imports: the CLI reads the defaults for --help.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_CELL_BYTES = 1024 * 1024
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Per-request bounds in bytes: a request body, a text cell, a page of rows."""

    body: int = MAX_BODY_BYTES
    cell: int = MAX_CELL_BYTES
    response: int = MAX_RESPONSE_BYTES
