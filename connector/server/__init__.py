"""The reference server of the Table Data REST API (`connector serve`).

Shares no code with the connector's client side, so each checks the other.

    app.py        the ASGI app: routes, the request gate (faults, key, rate limit), handlers
    columns.py    column types and the values each accepts; table specs
    query.py      list parameters (limit, offset, sort, order, filter) -> SQL
    paging.py     remembered sort keys, so a deep page costs what the first one does
    storage.py    SQLite: tables, rows, hashed keys; durable, serialised writes
    problems.py   ApiProblem, the one refusal, rendered as the API's error body
    limits.py     per-request bounds: body, text cell, page size in bytes
    faults.py     fault injection;  ratelimit.py  per-key token buckets
    openapi.py    /v1/openapi.json;  demo.py  the demo workspace;  cli.py  the commands
"""

from connector.server.app import create_app

__all__ = ["create_app"]
