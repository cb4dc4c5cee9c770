"""Every refusal has the API's error body, and bad input never yields a 500 (API.md 7)."""

from __future__ import annotations

import httpx
import pytest

from connector.server.app import create_app
from connector.server.limits import Limits
from connector.server.storage import Storage
from tests.server.conftest import make_client


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, str]:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


@pytest.mark.parametrize("path", ["/nope", "/tables/x/rows/y/z", "/tables/x/columns"])
def test_unknown_routes_are_404(api: httpx.Client, path: str) -> None:
    assert path in assert_error(api.get(path), 404, "NOT_FOUND")["message"]


def test_unknown_routes_outside_v1_are_404_too(api: httpx.Client) -> None:
    assert_error(api.get("http://testserver/"), 404, "NOT_FOUND")
    assert_error(api.get("http://testserver/v2/tables"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/tables", "GET"),
        ("DELETE", "/tables/t", "GET"),
        ("PUT", "/tables/t/rows", "GET, POST"),
        ("GET", "/tables/t/rows/bulk", "POST, DELETE"),
        ("PUT", "/tables/t/rows/r", "PATCH, DELETE"),
    ],
)
def test_wrong_methods_are_405_with_allow(api: httpx.Client, method: str, path: str, allowed: str) -> None:
    response = api.request(method, path)
    assert_error(response, 405, "METHOD_NOT_ALLOWED")
    for name in allowed.split(", "):
        assert name in response.headers["allow"]


def test_body_that_is_not_json_is_400(api: httpx.Client, people: str) -> None:
    response = api.post(f"/tables/{people}/rows", content=b"{'fields': ", headers={"content-type": "application/json"})
    assert "not valid JSON" in assert_error(response, 400, "BAD_REQUEST")["message"]


@pytest.mark.parametrize("body", [b"[]", b'"x"', b"1", b"null", b""])
def test_body_that_is_not_an_object_is_400(api: httpx.Client, people: str, body: bytes) -> None:
    response = api.post(f"/tables/{people}/rows", content=body, headers={"content-type": "application/json"})
    assert_error(response, 400, "BAD_REQUEST")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_body_without_json_content_type_is_415(api: httpx.Client, people: str, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = api.post(f"/tables/{people}/rows", content=b'{"fields": {"Name": "x"}}', headers=headers)
    assert "application/json" in assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")["message"]


def test_json_content_type_with_charset_is_accepted(api: httpx.Client, people: str) -> None:
    response = api.post(
        f"/tables/{people}/rows",
        content=b'{"fields": {"Name": "x"}}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201


def test_oversized_body_is_413_and_writes_nothing(storage: Storage, key: str, people: str) -> None:
    with make_client(create_app(storage, limits=Limits(body=1000)), key) as client:
        big = {"rows": [{"fields": {"Name": "x" * 100}}] * 20}
        assert_error(client.post(f"/tables/{people}/rows/bulk", json=big), 413, "CONTENT_TOO_LARGE")

        assert client.get(f"/tables/{people}/rows").json()["total"] == 0


@pytest.mark.parametrize("body", [b'{"fields": {"Age": 1e999}}', b'{"fields": {"Age": NaN}}',
                                  b'{"fields": {"Age": 123456789012345678901234567890}}',
                                  b'{"fields": {"Name": "\\ud800"}}'])
def test_numbers_json_cannot_carry_are_400(api: httpx.Client, people: str, body: bytes) -> None:
    response = api.post(f"/tables/{people}/rows", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400


def test_an_unexpected_failure_is_500_internal_with_the_error_body(storage: Storage, key: str) -> None:
    app = create_app(storage)
    storage.close()  # every storage call now raises
    with make_client(app, key) as client:
        assert_error(client.get("/tables"), 500, "INTERNAL")
