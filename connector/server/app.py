"""The ASGI app: API.md's eight endpoints under /v1, plus /v1/openapi.json.

Each request passes the same gate (`_Gate.endpoint`): injected faults, the API key, the
rate limit, the late writes now due (`late`); then its handler runs; then the after-write
faults. Row writes go through `late.LateWrites`, which holds them back only under the
late-visibility fault. Every refusal is an
`ApiProblem` rendered as the API's error body — unknown routes and methods included — and
an unexpected exception is a 500 with that body, never a traceback; the connection then
serves the next request (`_Contain`).

One request cannot take the server's memory: bodies, text cells and pages of rows are
bounded (`limits`); a page cut by size reports in `limit` the rows it holds. Nor hold a
connection for ever: a body's pauses are bounded here (408), the rest of a connection's
life by `connection.Connection`.

Keys: a key limited to some tables gets the same 403 for a table outside its scope and for
a table that does not exist, so it cannot learn which tables exist. Failed
authentications are rate limited per client address like requests are per key: once an
address has spent its budget, its requests are 429 until the bucket refills, whatever key
they carry (checking it would tell a guess that is right from one that is wrong).

Storage calls are synchronous and run on the event loop: requests are served one storage
call at a time, which is what makes concurrent writers safe and page reads consistent
(SQLite would serialise the writes anyway), while injected latency still overlaps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from connector.server import openapi, query
from connector.server.columns import TableDef, parse_json
from connector.server.faults import BadSetting, Faults, disturb_read
from connector.server.keys import ApiKey
from connector.server.late import LateWrites
from connector.server.limits import (
    Limits,
)
from connector.server.problems import ApiProblem, bad_request, echo, invalid, not_found
from connector.server.ratelimit import RateLimiter
from connector.server.storage import Storage

MAX_BULK_ROWS = 100
#: Keys remembered per address as having authenticated there (see `_authenticate`).
TRUSTED_KEYS = 64

log = logging.getLogger("connector.server")


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class _Dropped(Response):
    """Declares a body it never finishes: the server closes the connection mid-response."""

    def __init__(self) -> None:
        super().__init__(status_code=200)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"rows": [', "more_body": True})


def problem_response(problem: ApiProblem) -> Response:
    return JSON(problem.body(), status_code=problem.status, headers=problem.headers)


@dataclass
class Call:
    """One authenticated request, with the helpers every handler needs."""

    request: Request
    key: ApiKey
    storage: Storage
    limits: Limits
    faults: Faults
    late: LateWrites

    def table(self, *, write: bool) -> TableDef:
        """The addressed table: 404 if it does not exist, 403 if the key may not use it.

        A key limited to some tables gets the same 403 for any other id, existing or not.
        """
        table_id = self.request.path_params["table_id"]
        if not self.key.may_read(table_id):
            raise ApiProblem(403, f"this API key has no access to table {echo(table_id)}")
        table = self.storage.table(table_id)
        if table is None:
            raise not_found(f"table {echo(table_id)} does not exist")
        if write and not self.key.may_write(table.id):
            raise ApiProblem(403, f"this API key is read-only for table {table.id!r}")
        return table

    async def body(self) -> dict[str, Any]:
        """The JSON object sent; 415 / 413 / 408 / 400 when it is not one."""
        return await json_body(self.request, self.limits.body, self.limits.body_timeout)

    # Row writes go through `late`: with the late-visibility fault they reach reads later;
    # the stamping faults give them stamps of their own.

    def insert_rows(self, table: TableDef, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
        faults = self.faults
        return self.late.insert_rows(
            table, cells, faults.late_visibility_ms,
            created_at=faults.stamp_created_at, updated_at=faults.stamp_updated_at,
        )

    def update_row(self, table: TableDef, row_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        faults = self.faults
        return self.late.update_row(
            table, row_id, changes, faults.late_visibility_ms, stamp=faults.stamp_updated_at
        )

    def delete_rows(self, table: TableDef, row_ids: list[str]) -> list[str]:
        return self.late.delete_rows(table, row_ids, self.faults.late_visibility_ms)

    def fit(self, cells: dict[str, Any], *, index: int | None = None) -> dict[str, Any]:
        """`cells` if every text fits `max_cell_bytes`; 400 VALIDATION_ERROR naming the column."""
        limit = self.limits.cell
        for name, value in cells.items():
            if isinstance(value, str) and len(value) * 4 > limit:
                size = len(value) if value.isascii() else len(value.encode())
                if size > limit:
                    where = "" if index is None else f"row {index}: "
                    raise invalid(
                        name,
                        f"{where}column {name!r} holds {size} bytes; a cell holds at most {limit} bytes",
                        index=index,
                    )
        return cells


async def json_body(request: Request, max_body: int, timeout: float) -> dict[str, Any]:
    """The JSON object sent; 415 / 413 / 400 when it is not one, 408 when it pauses for over
    `timeout` seconds (after a 413 or a 408 the connection closes)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise ApiProblem(415, f"send the body as JSON with Content-Type: application/json (got {echo(media) if media else 'none'})")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        raise _too_large(max_body)
    data = bytearray()
    stream = request.stream()
    while True:
        try:
            data += await asyncio.wait_for(anext(stream), timeout)
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise ApiProblem(
                408, f"the body paused for over {timeout:g} s; send it whole", headers={"Connection": "close"}
            ) from None
        if len(data) > max_body:
            raise _too_large(max_body)
    if not data.strip():
        raise bad_request("this request needs a JSON body")
    try:
        parsed = parse_json(data)
    except ValueError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise bad_request("the body must be a JSON object")
    return parsed


def _too_large(max_body: int) -> ApiProblem:
    """413, and the connection closes: the rest of the body is read and dropped for a
    moment (`connection.Connection`), not the whole of it, however large."""
    return ApiProblem(413, f"the body is larger than {max_body} bytes", headers={"Connection": "close"})


Handler = Callable[[Call], Awaitable[Response]]


class _Gate:
    """Faults, authentication and rate limiting around every endpoint.

    `faults` is read afresh by every request: ``PUT /v1/_faults`` may replace it.
    """

    def __init__(
        self, storage: Storage, faults: Faults, rate_limit: float | None, limits: Limits,
        clock: Callable[[], float],
    ) -> None:
        self.storage = storage
        self.faults = faults
        self.limiter = RateLimiter(rate_limit, clock) if rate_limit else None
        self.failures = RateLimiter(rate_limit, clock) if rate_limit else None  # by client address
        #: Keys that authenticated from each address: a block of the address spares them.
        self.trusted: dict[str, set[str]] = {}
        self.limits = limits
        self.late = LateWrites(storage)

    def endpoint(self, handler: Handler, *, write: bool) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            faults = self.faults
            if faults.latency_ms:
                await asyncio.sleep(faults.latency_ms / 1000)
            if faults.hit(faults.fail_rate):
                raise ApiProblem(500, "injected failure (--fail-rate); nothing was done")
            if faults.hit(faults.throttle_rate):
                raise ApiProblem(429, "injected throttling (--throttle-rate)", headers={"Retry-After": "1"})
            key = self._authenticate(request)
            published: dict[str, str] = {}
            if self.limiter is not None:
                wait = self.limiter.wait(key.digest)
                published = self.limiter.published(key.digest, faults.rate_forms)
                if wait > 0:
                    raise ApiProblem(
                        429,
                        f"rate limit of {self.limiter.rate:g} requests a second exceeded",
                        headers={"Retry-After": RateLimiter.retry_after(wait), **published},
                    )
            self.late.apply_due()
            try:
                response = await handler(Call(request, key, self.storage, self.limits, faults, self.late))
            except ApiProblem as problem:
                problem.headers.update(published)
                raise
            response.headers.update(published)
            if write and faults.hit(faults.fail_after_write_rate):
                return problem_response(
                    ApiProblem(500, "injected failure after the write was committed (--fail-after-write-rate)")
                )
            if faults.hit(faults.drop_rate):
                return _Dropped()
            return response

        return run

    async def control(self, request: Request) -> Response:
        """``PUT /v1/_faults``: replace fault settings at once; GET shows them.

        Only an admin key (`connector keys create --admin`) may: any other key, read-only
        or scoped ones included, gets 403. Outside the faults it controls, so a server
        failing every request can be calmed.
        """
        key = self._authenticate(request)
        if not key.admin:
            raise ApiProblem(403, "only an admin key (connector keys create --admin) may use /v1/_faults")
        if request.method == "PUT":
            changes = await json_body(request, self.limits.body, self.limits.body_timeout)
            try:
                self.faults = self.faults.replace(changes)
            except BadSetting as exc:
                raise invalid(exc.setting, str(exc)) from None
        return JSON(self.faults.settings())

    def _authenticate(self, request: Request) -> ApiKey:
        header = request.headers.get("authorization", "")
        scheme, _, raw = header.partition(" ")
        challenge = {"WWW-Authenticate": "Bearer"}
        address = request.client.host if request.client else ""
        raw = raw.strip() if scheme.lower() == "bearer" else ""
        key = self.storage.find_key(raw) if raw else None
        if self.failures is not None:
            wait = self.failures.blocked(address)
            # While an address is blocked, a key gets the same 429 right or wrong (so a
            # guess learns nothing), unless it already worked from there before the block:
            # a good client behind the same address (a proxy, a shared host) goes on.
            trusted = key is not None and key.digest in self.trusted.get(address, ())
            if wait > 0 and not trusted:
                raise ApiProblem(
                    429,
                    "too many failed authentications from this address; wait before trying again",
                    headers={"Retry-After": RateLimiter.retry_after(wait)},
                )
            if key is not None and not trusted:
                known = self.trusted.setdefault(address, set())
                if len(known) < TRUSTED_KEYS:
                    known.add(key.digest)
        if key is None:
            if self.failures is not None:
                self.failures.wait(address)
            if not raw:
                raise ApiProblem(401, "missing API key: send the header Authorization: Bearer <key>", headers=challenge)
            raise ApiProblem(401, "invalid API key", headers=challenge)
        return key


# -- handlers ---------------------------------------------------------------------------


async def list_tables(call: Call) -> Response:
    tables = [t for t in call.storage.summaries() if call.key.may_read(t["id"])]
    return JSON({"tables": tables})


async def get_table(call: Call) -> Response:
    return JSON(call.table(write=False).to_api())


async def list_rows(call: Call) -> Response:
    table = call.table(write=False)
    faults = call.faults
    q = query.parse(
        table,
        call.request.query_params,
        max_limit=faults.max_page_size or query.MAX_LIMIT,
        system_filters=not faults.refuse_system_filters,
    )
    if faults.disturbs_reads:
        disturb_read(faults, call.storage, table, q)
    page = call.storage.list_rows(table, q, max_bytes=call.limits.response)
    limit = len(page.records) if page.cut else q.limit
    return JSON({"rows": page.wire_rows(), "total": page.total, "limit": limit, "offset": q.offset})


async def create_row(call: Call) -> Response:
    table = call.table(write=True)
    cells = call.fit(table.check_create(_fields(await call.body())))
    return JSON(call.insert_rows(table, [cells])[0], status_code=201)


async def update_row(call: Call) -> Response:
    table = call.table(write=True)
    changes = call.fit(table.check_update(_fields(await call.body())))
    return JSON(call.update_row(table, call.request.path_params["row_id"], changes))


async def delete_row(call: Call) -> Response:
    table = call.table(write=True)
    call.delete_rows(table, [call.request.path_params["row_id"]])
    return Response(status_code=204)


async def create_rows(call: Call) -> Response:
    table = call.table(write=True)
    rows = (await call.body()).get("rows")
    if not isinstance(rows, list):
        raise invalid("rows", 'the body must be {"rows": [{"fields": {...}}, ...]}')
    if len(rows) > MAX_BULK_ROWS:
        raise invalid("rows", f"at most {MAX_BULK_ROWS} rows a request, got {len(rows)}; nothing was written")
    cells = []
    for i, item in enumerate(rows):
        if not isinstance(item, dict) or "fields" not in item:
            raise invalid("rows", f'row {i}: each row must be {{"fields": {{...}}}}; nothing was written', index=i)
        cells.append(call.fit(table.check_create(item["fields"], index=i), index=i))
    return JSON({"rows": call.insert_rows(table, cells)}, status_code=201)


async def delete_rows(call: Call) -> Response:
    table = call.table(write=True)
    ids = (await call.body()).get("row_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise invalid("row_ids", 'the body must be {"row_ids": ["row_...", ...]}')
    if len(ids) > MAX_BULK_ROWS:
        raise invalid("row_ids", f"at most {MAX_BULK_ROWS} ids a request, got {len(ids)}; nothing was deleted")
    return JSON({"deleted": call.delete_rows(table, ids)})


def _fields(body: dict[str, Any]) -> Any:
    if "fields" not in body:
        raise invalid("fields", 'the body must be {"fields": {column: value, ...}}')
    return body["fields"]


# -- errors -----------------------------------------------------------------------------


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    return problem_response(exc)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        problem = ApiProblem(404, f"no such endpoint: {request.method} {echo(request.url.path)}")
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        problem = ApiProblem(
            405,
            f"method {echo(request.method)} is not allowed on {echo(request.url.path)}; allowed: {allowed}",
            headers={"Allow": allowed} if allowed else None,
        )
    else:
        problem = ApiProblem(exc.status_code, exc.detail)
    return problem_response(problem)


class _Contain:
    """An unexpected exception becomes the API's 500 body, and the connection lives on.

    Starlette's outermost handler sends its 500 and then re-raises, and uvicorn closes the
    connection on a raise, dropping any request pipelined behind it. Here the exception
    ends: logged, answered, and the connection serves the next request. Only once the
    response has started is it re-raised: a cut connection is then the honest ending.

    A client that hangs up while sending its body is no error of ours: one warning line,
    and its traceback only with debug logging (``connector --debug serve``).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except ClientDisconnect as exc:
            log.warning(
                "%s %s: the client hung up before sending its whole body",
                scope.get("method"),
                echo(scope.get("path")),
                exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
            )
        except Exception as exc:
            if started:
                raise
            log.error("unexpected error on %s %s", scope.get("method"), echo(scope.get("path")), exc_info=exc)
            await problem_response(ApiProblem(500, "internal server error"))(scope, receive, send)


async def _openapi(request: Request) -> Response:
    return JSON(openapi.document(str(request.base_url).rstrip("/") + "/v1"))


def create_app(
    db_path: str | Storage = ":memory:",
    *,
    faults: Faults | None = None,
    rate_limit: float | None = None,
    limits: Limits | None = None,
    fault_control: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The reference server as an ASGI app over the SQLite file `db_path` (or a `Storage`).

    `faults` are what it gets wrong on purpose (`faults.Faults`; default none), `rate_limit`
    the requests a second each key may make, `limits` what one request may send, store in a
    text cell and receive, and the longest pause in a body (`limits.Limits`; the bounds of a
    connection are uvicorn's and `connection.Connection`'s, which `serve` sets);
    `fault_control` adds ``PUT /v1/_faults``; `clock` is the seconds the rate limits keep
    time by (a test's own moves only when told).
    """
    storage = db_path if isinstance(db_path, Storage) else Storage(db_path)
    gate = _Gate(storage, faults or Faults(), rate_limit, limits or Limits(), clock)

    def route(path: str, **handlers: Handler) -> Route:
        endpoints = {m: gate.endpoint(h, write=m != "GET") for m, h in handlers.items()}

        async def dispatch(request: Request) -> Response:
            method = "GET" if request.method == "HEAD" else request.method
            return await endpoints[method](request)

        return Route("/v1" + path, dispatch, methods=list(handlers))

    routes = [
        Route("/v1/openapi.json", _openapi, methods=["GET"]),
        route("/tables", GET=list_tables),
        route("/tables/{table_id}", GET=get_table),
        route("/tables/{table_id}/rows", GET=list_rows, POST=create_row),
        route("/tables/{table_id}/rows/bulk", POST=create_rows, DELETE=delete_rows),
        route("/tables/{table_id}/rows/{row_id}", PATCH=update_row, DELETE=delete_row),
    ]
    if fault_control:
        routes.append(Route("/v1/_faults", gate.control, methods=["GET", "PUT"]))
    app = Starlette(
        routes=routes,
        exception_handlers={ApiProblem: _on_problem, HTTPException: _on_http},
        middleware=[Middleware(_Contain)],
    )
    app.state.storage = storage
    app.state.late = gate.late  # `serve` applies what is still queued when it stops
    return app
