"""One HTTP/1.1 connection, as uvicorn's h11 protocol serves it, with the bounds it lacks.

uvicorn closes a connection idle between requests (`timeout_keep_alive`, our
``--keep-alive-timeout``) and h11 bounds a head it is still waiting for
(`h11_max_incomplete_event_size`, set to ``--max-head-bytes``). Neither is enough:

- nothing times out a request begun and never finished: a client that sends half a head,
  or stops in a body nobody reads any more, holds its connection for ever, and a handful
  of such clients hold as many connections as they like;
- h11 refuses a head over its bound only when it arrived in pieces (one read of 100 KB
  passes), with a plain-text 400, and uvicorn then closes with the rest of the request
  unread: the client's kernel gets a reset, and the client often never reads the answer;
- the same reset follows any answer that closes the connection (a 413, or a request sent
  with ``Connection: close``) while the client is still sending a body nobody read;
- h11's 400 for a malformed head quotes the line at fault, which may be the
  ``Authorization`` header and its key.

`Connection` is uvicorn's `H11Protocol` (``uvicorn.run(http=...)`` takes the class) with:

    head deadline    a request's head must be whole `header_timeout` s after the connection
                     opened or the previous response ended: else 408 if part of it came, a
                     plain close if none did (an idle connection)
    body pause       a body whose answer already went out (the app did not need it) may
                     pause at most `body_timeout` s, then the connection closes; while the
                     app reads a body, `app.json_body` bounds its pauses the same and
                     answers 408
    head size        a head over `max_head_bytes` bytes: 414 when the request line alone
                     is, else 431, however the bytes arrived
    lingering close  each refusal goes out in the API's error body, h11's in its words
                     without the bytes they quote (`malformed`); then the connection stops
                     writing and reads, and drops, what the client still sends, until it
                     closes or `LINGER_SECONDS` pass: the client reads the answer, not a
                     reset. So does an app's answer that closes the connection while the
                     client is still sending its body (a request's cycle closes through
                     `_CycleTransport`).

It leans on H11Protocol's hooks (`connection_made`, `data_received`, `handle_events`,
`on_response_complete`, `send_400_response`) and its `conn`, `cycle` and `transport`
(and on the cycle's `transport`), and on h11's public states: uvicorn is pinned in .ci/constraints.txt, and tests/server/test_hostile.py
drives every path over real sockets.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, cast

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from connector.server.limits import BODY_TIMEOUT, HEADER_TIMEOUT, MAX_HEAD_BYTES
from connector.server.problems import ApiProblem

#: Seconds a refused connection keeps reading (and dropping) what the client still sends.
LINGER_SECONDS = 2.0


class Connection(H11Protocol):
    """H11Protocol with deadlines for a request's head and unread body, a head size bound,
    refusals in the API's error body, and a lingering close (see the module)."""

    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    max_head_bytes: int = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._awaited: Callable[[], None] | None = None  # what the deadline is for: _head_late, _body_late
        self._linger: asyncio.TimerHandle | None = None

    # -- H11Protocol's hooks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout, self._head_late)

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:
            return  # refused: what still comes is dropped
        if self.conn.their_state is h11.IDLE and self._head_too_large(data):
            return
        super().data_received(data)
        self._watch(fresh=False)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not cycle:  # a new request: it closes through us
            self.cycle.transport = cast(asyncio.Transport, _CycleTransport(self))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._watch(fresh=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """h11 found the request malformed (uvicorn logged it): answer in our error body,
        in h11's words without the request's bytes they quote (`malformed`)."""
        error = sys.exc_info()[1]  # uvicorn calls this while handling h11's error
        if getattr(error, "error_status_hint", 400) == 431 and self._head_too_large(b""):
            return  # h11's own bound on a head that arrived in pieces: refused as ours
        self._refuse(400, f"not a valid HTTP/1.1 request: {malformed(str(error or msg))}")

    # -- deadlines ------------------------------------------------------------------------

    def _watch(self, *, fresh: bool) -> None:
        """Arm the deadline the client's state calls for: its head, or a body nobody reads."""
        theirs = self.conn.their_state
        if theirs is h11.IDLE:
            if fresh or self._awaited != self._head_late:  # a new head: from now on
                self._arm(self.header_timeout, self._head_late)
        elif theirs is h11.SEND_BODY and self.conn.our_state is h11.DONE:
            self._arm(self.body_timeout, self._body_late)  # again on every piece: a pause
        else:
            self._disarm()  # the app has the request; its body pauses are json_body's

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, then)
        self._awaited = then

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self._awaited = None

    def _head_late(self) -> None:
        self._deadline = self._awaited = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0].strip():
            self._refuse(408, f"the request's head was not complete within {self.header_timeout:g} s")
        else:  # nothing asked: an idle connection
            self.transport.close()

    def _body_late(self) -> None:
        self._deadline = self._awaited = None
        if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
            self.transport.close()  # answered already: nothing left to say

    # -- refusals ---------------------------------------------------------------------------

    def _head_too_large(self, data: bytes) -> bool:
        """Refuse (414 or 431) if the head being received, `data` included, is over the bound."""
        head = self.conn.trailing_data[0] + data
        end = head.find(b"\r\n\r\n")
        if (len(head) if end < 0 else end + 4) <= self.max_head_bytes:
            return False
        line = head.find(b"\r\n")
        if line < 0 or line > self.max_head_bytes:
            self._refuse(414, f"the request line (method, URL, version) is over {self.max_head_bytes} bytes")
        else:
            self._refuse(431, f"the request's headers are over {self.max_head_bytes} bytes")
        return True

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` in the API's error body, then close, lingering (see the module)."""
        self._disarm()
        body = orjson.dumps(ApiProblem(status, message).body())
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            out = self.conn.send(h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase))
            out = (out or b"") + (self.conn.send(h11.Data(data=body)) or b"")
            out += self.conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # a response has begun: nothing more can be said
            self.transport.close()
            return
        self.transport.write(out)
        self._close_lingering()

    def _close_lingering(self) -> None:
        """Stop writing (the client reads the answer, then the end), then read and drop what
        it still sends until it closes or `LINGER_SECONDS` pass; then close."""
        self._disarm()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.transport.resume_reading()
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _close_after_answer(self) -> None:
        """A request's cycle closes the connection (its answer, or the request, said
        ``Connection: close``): lingering if the client is still sending a body nobody read."""
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._close_lingering()
        else:
            self.transport.close()


class _CycleTransport:
    """The transport as a request's cycle (uvicorn's `RequestResponseCycle`) sees it: the
    same, but its close is `Connection._close_after_answer`. A plain close with the rest of
    a body unread makes the kernel answer what still comes with a reset, and a client still
    writing (a 9 MB body refused with 413) never reads the answer."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection.transport, name)

    def close(self) -> None:
        self._connection._close_after_answer()


#: Where h11's words end and the request's bytes it quotes begin: "...line: bytearray(b'...".
_QUOTE = re.compile(r"""(?:bytearray\()?b?['"]""")
#: A header's name, before the colon of its line.
_NAME = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}):")


def malformed(message: str) -> str:
    """h11's `message` without the bytes of the request it quotes; of a header line only
    the header's name is kept. Such a line may be ``Authorization: Bearer <key>`` with a
    NUL in it: no part of a line's value is ever repeated."""
    quote = _QUOTE.search(message)
    if quote is None:
        return message  # h11's words alone ("bad Content-Length")
    words = message[: quote.start()].rstrip(": ")
    name = _NAME.match(message, quote.end()) if words.endswith("header line") else None
    return words + (f" (the {name.group(1)!r} header)" if name else "")


def connection_class(
    *, header_timeout: float = HEADER_TIMEOUT, body_timeout: float = BODY_TIMEOUT, max_head_bytes: int = MAX_HEAD_BYTES
) -> type[Connection]:
    """`Connection` with these bounds, for ``uvicorn.run(http=...)``."""
    return type(
        "Connection",
        (Connection,),
        {"header_timeout": header_timeout, "body_timeout": body_timeout, "max_head_bytes": max_head_bytes},
    )
