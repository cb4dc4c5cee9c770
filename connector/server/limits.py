"""Per-request bounds, so that no single request can take the server's memory, or hold a
connection for ever.

    body          a request body, in bytes                 above it: 413
    cell          a text cell a write stores, UTF-8 bytes  above it: 400 VALIDATION_ERROR,
                                                           `field` naming the column
    response      about the largest page of rows           above it: a page with fewer rows
                                                           (at least two; one if `limit` is
                                                           1) whose `limit` reports how many
                                                           it holds
    body_timeout  the longest pause in a body being read   408, and the connection closes

A client stepping by the applied `limit` of each page misses nothing and stops as usual on
a page shorter than its `limit`. The bounds of a connection (its head's size and deadline,
idle time) are `connection.Connection`'s. Light on imports: the CLI reads the defaults for
--help.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_CELL_BYTES = 1024 * 1024
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: A request's head (request line and headers); a 60 KB URL fits, a 1 MB one is a 414.
MAX_HEAD_BYTES = 64 * 1024
#: Seconds to send a whole head, from the connection's start or the previous response.
HEADER_TIMEOUT = 10.0
#: The longest pause, in seconds, while sending a body.
BODY_TIMEOUT = 10.0
#: Seconds a connection may idle between requests (uvicorn's timeout_keep_alive).
KEEP_ALIVE_TIMEOUT = 5


@dataclass(frozen=True)
class Limits:
    """Per-request bounds: in bytes a request body, a text cell, a page of rows; in seconds
    the longest pause in a body."""

    body: int = MAX_BODY_BYTES
    cell: int = MAX_CELL_BYTES
    response: int = MAX_RESPONSE_BYTES
    body_timeout: float = BODY_TIMEOUT
