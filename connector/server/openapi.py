"""The OpenAPI 3.1 document of the API as this server implements it (`/v1/openapi.json`)."""

from __future__ import annotations

from typing import Any

_TIMESTAMP = {"type": "string", "format": "date-time"}
_CELL: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, **_json(_ref("Error"))}


_ERRORS = {
    "400": _error("Bad request; VALIDATION_ERROR names the column in `field`"),
    "401": _error("Missing or invalid API key"),
    "403": _error("The key may not use this table, or is read-only; a key limited to tables "
                  "gets this for any other table id, whether it exists or not"),
    "404": _error("No such table or row"),
    "408": _error("The body paused for longer than the server waits (the connection closes)"),
    "413": _error("Body too large"),
    "414": _error("The request line (URL) is longer than the server reads"),
    "415": _error("Body is not sent as application/json"),
    "429": {
        "description": "Rate limit exceeded; wait Retry-After seconds",
        "headers": {"Retry-After": {"schema": {"type": "string"}}},
        **_json(_ref("Error")),
    },
    "431": _error("The request's headers are larger than the server reads"),
    "500": _error("Server error; retry after a moment"),
}

_TABLE_ID = {"name": "tableId", "in": "path", "required": True, "schema": {"type": "string"}}
_ROW_ID = {"name": "rowId", "in": "path", "required": True, "schema": {"type": "string"}}


def _op(summary: str, responses: dict[str, Any], *, params: list[Any], body: Any = None) -> dict[str, Any]:
    wanted = {"400", "401", "403", "404", "414", "429", "431", "500"}
    if body is not None:
        wanted |= {"408", "413", "415"}
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": params,
        "responses": {**responses, **{k: v for k, v in _ERRORS.items() if k in wanted}},
    }
    if body is not None:
        op["requestBody"] = {"required": True, **_json(body)}
    return op


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": "string"},
                    "index": {"type": "integer", "description": "the failing row of a bulk create"},
                },
            }
        },
    },
    "TableSummary": {
        "type": "object",
        "required": ["id", "name", "columns", "rows", "created_at"],
        "properties": {
            "id": {"type": "string", "pattern": "^tbl_"},
            "name": {"type": "string"},
            "columns": {"type": "integer", "minimum": 0},
            "rows": {"type": "integer", "minimum": 0},
            "created_at": _TIMESTAMP,
        },
    },
    "Column": {
        "type": "object",
        "required": ["id", "name", "type"],
        "properties": {
            "id": {"type": "string", "pattern": "^col_"},
            "name": {"type": "string"},
            "type": {"type": "string", "enum": ["text", "choice", "number", "checkbox", "date"]},
            "required": {"type": "boolean"},
            "options": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Table": {
        "type": "object",
        "required": ["id", "name", "columns"],
        "properties": {
            "id": {"type": "string", "pattern": "^tbl_"},
            "name": {"type": "string"},
            "columns": {"type": "array", "items": _ref("Column")},
        },
    },
    "Row": {
        "type": "object",
        "required": ["id", "fields", "created_at", "updated_at"],
        "properties": {
            "id": {"type": "string", "pattern": "^row_"},
            "fields": {
                "type": "object",
                "description": "every column of the table, null when empty",
                "additionalProperties": _CELL,
            },
            "created_at": _TIMESTAMP,
            "updated_at": _TIMESTAMP,
        },
    },
    "Fields": {"type": "object", "additionalProperties": _CELL},
    "RowPage": {
        "type": "object",
        "required": ["rows", "total", "limit", "offset"],
        "properties": {
            "rows": {"type": "array", "items": _ref("Row")},
            "total": {"type": "integer", "minimum": 0, "description": "rows matching the filter"},
            "limit": {"type": "integer", "minimum": 0, "maximum": 1000,
                      "description": "the limit applied: the one asked for, clamped to 1000, or "
                      "the rows this page holds when more would exceed the server's response "
                      "size (at least two); the next page starts at offset + limit"},
            "offset": {"type": "integer", "minimum": 0},
        },
    },
}

_LIST_PARAMS = [
    _TABLE_ID,
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0, "default": 100},
     "description": "at most 1000 are returned; the applied value is echoed"},
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "default": 0}},
    {"name": "sort", "in": "query", "schema": {"type": "string", "default": "created_at"},
     "description": "a column name, or created_at / updated_at / id; ties by created_at, id"},
    {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
    {"name": "filter", "in": "query", "schema": {"type": "string"},
     "description": 'JSON: {"Column": {"eq": value} | {"gt": value}, ...}, AND-ed; '
     "at most 100 conditions"},
]


def document(server_url: str) -> dict[str, Any]:
    """The document, with `server_url` (ending in /v1) as its server."""
    fields_body = {
        "type": "object",
        "required": ["fields"],
        "properties": {"fields": _ref("Fields")},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Table Data REST API (reference server)", "version": "1"},
        "servers": [{"url": server_url}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": _SCHEMAS,
        },
        "paths": {
            "/tables": {
                "get": _op(
                    "List the tables the key may read",
                    {"200": {"description": "tables", **_json({
                        "type": "object",
                        "required": ["tables"],
                        "properties": {"tables": {"type": "array", "items": _ref("TableSummary")}},
                    })}},
                    params=[],
                )
            },
            "/tables/{tableId}": {
                "get": _op("Get a table's schema", {"200": {"description": "schema", **_json(_ref("Table"))}},
                           params=[_TABLE_ID])
            },
            "/tables/{tableId}/rows": {
                "get": _op("List rows", {"200": {"description": "a page", **_json(_ref("RowPage"))}},
                           params=_LIST_PARAMS),
                "post": _op("Create a row", {"201": {"description": "created", **_json(_ref("Row"))}},
                            params=[_TABLE_ID], body=fields_body),
            },
            "/tables/{tableId}/rows/bulk": {
                "post": _op(
                    "Create up to 100 rows, all or nothing",
                    {"201": {"description": "created, in request order", **_json({
                        "type": "object",
                        "required": ["rows"],
                        "properties": {"rows": {"type": "array", "items": _ref("Row")}},
                    })}},
                    params=[_TABLE_ID],
                    body={
                        "type": "object",
                        "required": ["rows"],
                        "properties": {"rows": {"type": "array", "maxItems": 100, "items": fields_body}},
                    },
                ),
                "delete": _op(
                    "Delete up to 100 rows, all or nothing",
                    {"200": {"description": "deleted", **_json({
                        "type": "object",
                        "required": ["deleted"],
                        "properties": {"deleted": {"type": "array", "items": {"type": "string"}}},
                    })}},
                    params=[_TABLE_ID],
                    body={
                        "type": "object",
                        "required": ["row_ids"],
                        "properties": {
                            "row_ids": {"type": "array", "maxItems": 100, "items": {"type": "string"}}
                        },
                    },
                ),
            },
            "/tables/{tableId}/rows/{rowId}": {
                "patch": _op("Update some cells of a row",
                             {"200": {"description": "the whole updated row", **_json(_ref("Row"))}},
                             params=[_TABLE_ID, _ROW_ID], body=fields_body),
                "delete": _op("Delete a row", {"204": {"description": "deleted"}},
                              params=[_TABLE_ID, _ROW_ID]),
            },
        },
    }
