"""The one exception the server raises for a request it refuses, and its error body.

Every refusal — a bad value, an unknown route, a missing key — becomes an `ApiProblem`,
which the app renders as API.md's body: ``{"error": {"code", "message", "field"?}}``.
A message repeats a client's value cut short (`echo`), and never a key (`masked`).
"""

from __future__ import annotations

from typing import Any

from connector.server.keys import KEY_SHAPE

#: Error codes by status (DESIGN.md's set, and one for each status beyond it, named as
#: RFC 9110 names the status); `VALIDATION_ERROR` is a 400 naming a field.
CODES: dict[int, str] = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    413: "CONTENT_TOO_LARGE",
    414: "URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "RATE_LIMITED",
    431: "HEADERS_TOO_LARGE",
    500: "INTERNAL",
}


#: Characters of a client's value a message repeats (a 60 KB id is not echoed whole).
ECHO_CHARS = 80
#: The most an error body's `message` and `field` hold, whatever was sent: a backstop.
MAX_MESSAGE_CHARS = 2000
MAX_FIELD_CHARS = 200


def masked(text: str) -> str:
    """`text` with every key the server makes (`keys.new_key`) masked: a client that sends
    its key where a name or an id goes must not find it in an error it logs."""
    return KEY_SHAPE.sub("key_***", text)


def echo(value: object) -> str:
    """`value` as a message repeats it: its repr, keys masked, cut after `ECHO_CHARS`
    characters (masked first: a cut could leave the first characters of a key)."""
    shown = masked(repr(value))
    if len(shown) <= ECHO_CHARS:
        return shown
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(shown)} characters shown"
    return f"{shown[:ECHO_CHARS]}... ({size})"


class ApiProblem(Exception):
    """A request the server refuses, with the status and error body to send."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        index: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = masked(message)
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + "..."
        if field is not None:
            field = masked(field)
            if len(field) > MAX_FIELD_CHARS:
                field = field[:MAX_FIELD_CHARS] + "..."
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or CODES.get(status, "INTERNAL" if status >= 500 else "BAD_REQUEST")
        self.field = field
        self.index = index
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        if self.index is not None:
            error["index"] = self.index
        return {"error": error}


def invalid(field: str, message: str, *, index: int | None = None) -> ApiProblem:
    """400 VALIDATION_ERROR naming `field` (a column, or a query parameter)."""
    return ApiProblem(400, message, code="VALIDATION_ERROR", field=field, index=index)


def bad_request(message: str, *, field: str | None = None) -> ApiProblem:
    return ApiProblem(400, message, field=field)


def not_found(message: str) -> ApiProblem:
    return ApiProblem(404, message)
