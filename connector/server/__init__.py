"""The reference server of the Table Data REST API (`connector serve`).

Shares no code with the connector's client side, so each checks the other.

    app.py        the ASGI app: routes, the request gate (faults, key, rate limit), handlers
    connection.py one HTTP connection: deadlines, head size, refusals before closing
    columns.py    column types and the values each accepts; table specs
    alter.py      changing a live table's columns: add, rename, retype, drop, options
    query.py      list parameters (limit, offset, sort, order, filter) -> SQL
    paging.py     remembered sort keys, so a deep page costs what the first one does
    storage.py    SQLite: tables, rows, hashed keys; durable, serialised writes
    problems.py   ApiProblem, the one refusal, rendered as the API's error body
    limits.py     per-request bounds: body, text cell, page size in bytes
    faults.py     fault injection;  late.py  writes seen late;  ratelimit.py  token buckets, published
    openapi.py    /v1/openapi.json;  demo.py  the demo workspace;  cli.py  the commands
"""

from connector.server.app import create_app

__all__ = ["create_app"]
