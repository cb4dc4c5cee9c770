"""Answers into errors: what a failed exchange, a status or a body we cannot read means,
in words that say what to fix (and never the key: every message passes `redact`)."""

from __future__ import annotations

import email.utils
import socket
import ssl
import time
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import orjson

from connector.api.endpoints import Call
from connector.api.keys import redact
from connector.errors import (
    ApiError,
    ApiValidationError,
    AuthError,
    BadRequest,
    BaseUrlError,
    NotFound,
    NotSent,
    PermissionDenied,
    RateLimited,
    ServerError,
    TransportError,
)

__all__ = ["MAX_RETRY_AFTER", "retry_reason", "shape_error", "status_error", "transport_error"]

#: The longest Retry-After we honour; a server asking for more gets this.
MAX_RETRY_AFTER = 60.0
#: getaddrinfo's answers meaning the name has no address (not "try again later").
_NO_SUCH_HOST = frozenset(
    getattr(socket, name)
    for name in ("EAI_NONAME", "EAI_NODATA", "EAI_FAIL", "EAI_SERVICE", "EAI_ADDRFAMILY")
    if hasattr(socket, name)
)

E = TypeVar("E", bound=BaseException)


def _cause(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of `kind` in `exc`'s chain (httpx wraps httpcore wraps the OS's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _transport_reason(exc: BaseException) -> str:
    """A few words for what happened to the connection: ``connection refused``..."""
    if _cause(exc, ConnectionRefusedError) is not None:
        return "connection refused"
    if _cause(exc, ConnectionResetError) is not None:
        return "connection reset"
    lookup = _cause(exc, socket.gaierror)
    if lookup is not None:
        return f"name lookup failed ({lookup.strerror})"
    if isinstance(exc, httpx.ConnectTimeout):
        return "timed out connecting"
    if isinstance(exc, httpx.PoolTimeout):
        return "timed out waiting for a free connection"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the server closed the connection"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    return "connection lost"


def retry_reason(exc: BaseException | None) -> str:
    """Why a request is tried again, as a retry line says it."""
    if isinstance(exc, RateLimited):
        return f"rate limited ({exc.status or 429})"
    if isinstance(exc, ServerError):
        return f"server error {exc.status}" if exc.status else "server error"
    if isinstance(exc, TransportError):
        return _transport_reason(exc.__cause__) if exc.__cause__ is not None else "connection lost"
    return type(exc).__name__ if exc is not None else "unknown"


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value else None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def transport_error(
    exc: httpx.HTTPError, call: Call[Any], base_url: str, url_source: str
) -> ApiError:
    """Our error for a failed exchange: a `BaseUrlError` (not retried) for what cannot
    heal, a DNS name with no address or a failed TLS handshake; else a (retriable)
    `NotSent` when no connection was made, or a `TransportError`."""
    method, url = call.method, f"{base_url}{call.path}"
    if isinstance(exc, httpx.ConnectError):
        lookup = _cause(exc, socket.gaierror)
        if lookup is not None and lookup.errno in _NO_SUCH_HOST:
            host = urlsplit(base_url).hostname
            return BaseUrlError(
                redact(
                    f"the host {host!r} of the base URL has no address (DNS: "
                    f"{lookup.strerror}); fix {url_source}"
                ),
                method=method,
                url=url,
            )
        tls = _cause(exc, ssl.SSLError)
        if tls is not None and not isinstance(tls, ssl.SSLEOFError | ssl.SSLZeroReturnError):
            said = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or tls
            return BaseUrlError(
                redact(
                    f"TLS with {base_url} failed ({said}): is it http:// rather than "
                    f"https://, the right port, a trusted certificate? Fix {url_source}"
                ),
                method=method,
                url=url,
            )
    never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    kind = NotSent if never_sent else TransportError
    what = "could not connect to" if never_sent else "lost the connection to"
    return kind(
        redact(f"{what} {base_url}: {_transport_reason(exc)} ({type(exc).__name__})"),
        method=method,
        url=url,
    )


def shape_error(
    call: Call[Any], response: httpx.Response, exc: Exception, base_url: str
) -> ServerError:
    """A body we cannot read as the answer API.md describes: a `ServerError` that fails
    at once (the same request would get the same answer)."""
    error = ServerError(
        redact(
            f"the server sent an answer of an unexpected shape (status "
            f"{response.status_code}; {type(exc).__name__}: {exc})"
        ),
        status=response.status_code,
        method=call.method,
        url=f"{base_url}{call.path}",
    )
    error.retriable = False
    return error


def status_error(
    call: Call[Any], response: httpx.Response, base_url: str, key_source: str
) -> ApiError:
    """The error an answer's status (and its body's code) means, telling what to fix."""
    status = response.status_code
    code = message = field_name = None
    try:
        detail = orjson.loads(response.content).get("error") or {}
        code, message, field_name = detail.get("code"), detail.get("message"), detail.get("field")
    except (orjson.JSONDecodeError, AttributeError):
        pass
    said = f": {message}" if message else ""
    kind: type[ApiError]
    if status == 401:
        kind = AuthError
        text = f"the API key was refused{said}; set {key_source} to a valid key"
    elif status == 403:
        kind = PermissionDenied
        if call.method == "GET":
            text = (
                f"the key may not read this{said}; use a key with access to the table "
                "(this one may be scoped to other tables)"
            )
        else:
            text = (
                f"the key may not change this table{said}; use a key that may write to it "
                "(this one is read-only or scoped to other tables)"
            )
    elif status == 404:
        kind = NotFound
        text = (
            f"not found{said}; check the table id or name (`connector tables` lists them), "
            f"the row id, and that the base URL {base_url} ends in /v1"
        )
    elif code == "VALIDATION_ERROR" or status == 422:
        column = f" in column {field_name!r}" if field_name else ""
        kind, text = ApiValidationError, f"invalid value{column}{said}"
    elif status == 429:
        kind, text = RateLimited, "rate limited by the server; retries ran out, try again later"
    elif status >= 500:
        kind, text = ServerError, f"the server failed{said}"
    else:
        kind, text = BadRequest, f"the server rejected the request{said}"
    return kind(
        redact(text),
        status=status,
        code=code,
        field=field_name,
        method=call.method,
        url=f"{base_url}{call.path}",
        retry_after=_retry_after(response),
    )
