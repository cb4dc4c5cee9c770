"""The client against the reference server over HTTP: every endpoint, keys, errors, secrecy."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from connector.api import MAX_BULK_ROWS, AsyncClient, Client, RetryPolicy
from connector.errors import (
    ApiValidationError,
    AuthError,
    ConfigError,
    NotFound,
    NotSent,
    PermissionDenied,
)
from tests.fixtures.server import RunningServer

SPEC: dict[str, Any] = {
    "name": "People",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Active", "Inactive"]},
        {"name": "Age", "type": "number"},
    ],
}


@pytest.fixture
def people(server: RunningServer) -> str:
    return server.create_table(SPEC)


def test_every_endpoint_round_trips(server: RunningServer, people: str) -> None:
    with Client(server.base_url, server.api_key) as client:
        [summary] = client.list_tables()
        assert (summary.id, summary.name, summary.columns) == (people, "People", 3)
        table = client.get_table(people)
        assert [c.name for c in table.columns] == ["Name", "Status", "Age"]
        assert table.column("Status").options == ("Active", "Inactive")

        ada = client.create_row(people, {"Name": "Ada", "Age": 36})
        assert ada.id.startswith("row_") and ada.fields["Name"] == "Ada"
        updated = client.update_row(people, ada.id, {"Status": "Active"})
        assert updated is not None and updated.fields["Status"] == "Active"
        assert updated.fields["Age"] == 36  # columns not sent keep their values

        bulk = client.create_rows(people, [{"Name": f"p{i}"} for i in range(MAX_BULK_ROWS)])
        assert [r.fields["Name"] for r in bulk] == [f"p{i}" for i in range(MAX_BULK_ROWS)]
        page = client.list_rows(people, limit=10, offset=0, sort="created_at", order="asc")
        assert (page.total, page.limit, page.offset) == (101, 10, 0)
        assert page.rows[0].id == ada.id

        client.delete_row(people, ada.id)
        client.delete_rows(people, [r.id for r in bulk[:50]])
        remaining = client.list_rows(people, limit=1000, sort="created_at", order="asc")
        assert [r.id for r in remaining.rows] == [r.id for r in bulk[50:]]


def test_a_limit_above_the_maximum_is_clamped_and_reported(server: RunningServer, people: str) -> None:
    server.insert_rows(people, [{"Name": str(i)} for i in range(1200)])
    with Client(server.base_url, server.api_key) as client:
        pages = [client.list_rows(people, limit=5000, offset=offset) for offset in (0, 1000)]
    assert [(p.offset, p.limit, len(p.rows)) for p in pages] == [(0, 1000, 1000), (1000, 1000, 200)]


def test_filters_pass_through(server: RunningServer, people: str) -> None:
    server.insert_rows(people, [{"Name": str(i), "Age": i, "Status": "Active" if i % 2 else "Inactive"}
                                for i in range(10)])
    with Client(server.base_url, server.api_key) as client:
        page = client.list_rows(people, filter={"Status": {"eq": "Active"}, "Age": {"gt": 4}})
    assert sorted(r.fields["Age"] for r in page.rows) == [5, 7, 9]


def test_the_async_core_has_the_same_methods(server: RunningServer, people: str) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(server.base_url, server.api_key) as client:
            rows = await client.create_rows(people, [{"Name": "a"}, {"Name": "b"}])
            await client.update_row(people, rows[0].id, {"Age": 1})
            page = await client.list_rows(people, sort="created_at", order="asc")
            await client.delete_rows(people, [r.id for r in rows])
            return [r.fields["Name"] for r in page.rows]

    assert asyncio.run(scenario()) == ["a", "b"]
    blocking = {n for n, v in vars(Client).items() if callable(v) and not n.startswith("_")}
    # run/stream drive the core; close and cancel stop the facade's own loop
    assert blocking - {"run", "stream", "close", "cancel"} <= set(vars(AsyncClient))


def test_adding_rows_counts_them_and_the_server_holds_them(server: RunningServer, people: str) -> None:
    async def scenario() -> int:
        async with AsyncClient(server.base_url, server.api_key) as client:
            return await client.add_rows(people, [{"Name": "a", "Age": 2**53 + 1}, {"Name": "b"}])

    assert asyncio.run(scenario()) == 2
    with Client(server.base_url, server.api_key) as client:
        held = client.list_rows(people, sort="created_at", order="asc").rows
    assert [(r.fields["Name"], r.fields.get("Age")) for r in held] == [("a", 2**53 + 1), ("b", None)]


def test_a_bad_value_names_its_column(server: RunningServer, people: str) -> None:
    with Client(server.base_url, server.api_key) as client, \
            pytest.raises(ApiValidationError) as caught:
        client.create_row(people, {"Name": "x", "Status": "Sleeping"})
    assert caught.value.field == "Status"
    assert "Active" in str(caught.value)  # the message lists the allowed options


def test_an_unknown_key_says_to_set_a_valid_one(server: RunningServer) -> None:
    with Client(server.base_url, "not-a-key") as client, pytest.raises(AuthError) as caught:
        client.list_tables()
    assert caught.value.status == 401
    assert "CONNECTOR_API_KEY" in str(caught.value)


def test_a_missing_table_says_what_to_check(server: RunningServer) -> None:
    with Client(server.base_url, server.api_key) as client, pytest.raises(NotFound) as caught:
        client.get_table("tbl_nope")
    assert "connector tables" in str(caught.value)


def test_a_wrong_base_url_is_a_not_found_naming_it(server: RunningServer) -> None:
    wrong = server.base_url.removesuffix("/v1")
    with Client(wrong, server.api_key) as client, pytest.raises(NotFound, match="/v1"):
        client.list_tables()


def test_a_read_only_key_reads_but_may_not_write(server: RunningServer, people: str) -> None:
    key = server.create_key(read_only=True)
    with Client(server.base_url, key) as client:
        assert client.list_rows(people).rows == []
        with pytest.raises(PermissionDenied) as caught:
            client.create_row(people, {"Name": "x"})
    assert caught.value.status == 403
    assert "read-only" in str(caught.value)


def test_a_scoped_key_sees_only_its_tables(server: RunningServer, people: str) -> None:
    other = server.create_table({"name": "Secret", "columns": [{"name": "X", "type": "text"}]})
    key = server.create_key(tables=["People"])
    with Client(server.base_url, key) as client:
        assert [t.name for t in client.list_tables()] == ["People"]
        with pytest.raises(PermissionDenied, match="scoped to other tables"):
            client.list_rows(other)


def test_base_url_and_key_come_from_the_environment(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    with Client() as client:
        assert client.list_tables() == []


def test_a_missing_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONNECTOR_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="CONNECTOR_API_KEY"):
        Client("http://127.0.0.1:9/v1")


def test_missing_settings_name_the_parameters_or_the_callers_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library caller is told of `base_url` / `api_key`; a command names its flag."""
    monkeypatch.delenv("CONNECTOR_BASE_URL", raising=False)
    monkeypatch.delenv("CONNECTOR_API_KEY", raising=False)
    said = {}
    for name, kwargs in {
        "url": {"api_key": "key_12345678"},
        "key": {"base_url": "http://127.0.0.1:9/v1"},
        "url, a command's words": {"api_key": "key_12345678", "url_source": "URL_VAR or --url"},
        "key, a command's words": {"base_url": "http://127.0.0.1:9/v1", "key_source": "KEY_VAR"},
    }.items():
        with pytest.raises(ConfigError) as caught:
            Client(**kwargs)
        said[name] = str(caught.value)
    assert said == {
        "url": "no API base URL: pass base_url or set CONNECTOR_BASE_URL (it ends in /v1)",
        "key": "no API key: pass api_key or set CONNECTOR_API_KEY",
        "url, a command's words": "no API base URL: set URL_VAR or --url (it ends in /v1)",
        "key, a command's words": "no API key: set KEY_VAR",
    }


def test_the_key_never_shows(
    server: RunningServer, people: str, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    key = server.api_key
    shown: list[str] = []
    with Client(server.base_url, key) as client:
        shown.append(repr(client))
        client.create_row(people, {"Name": "x"})
        with pytest.raises(NotFound, match=r"^404 not found: table 'tbl_nope' does not exist") \
                as missing:
            client.get_table("tbl_nope")
        with pytest.raises(ApiValidationError,
                           match=r"^400 invalid value in column 'Status': .* 'bad' is not one") \
                as invalid:
            client.create_row(people, {"Status": "bad"})
        for caught in (missing, invalid):
            shown += [str(caught.value), repr(caught.value), repr(caught.value.args)]
    with Client("http://127.0.0.1:9/v1", key, retry=RetryPolicy.off()) as unreachable, \
            pytest.raises(NotSent, match=r"^could not connect to .*:9/v1: connection refused") \
            as refused:
        unreachable.list_tables()
    shown += [str(refused.value), repr(refused.value)]
    out = capsys.readouterr()
    everything = "\n".join([*shown, caplog.text, out.out, out.err])
    assert "127.0.0.1" in everything  # something was logged and shown at all
    assert key not in everything


def test_a_key_echoed_by_a_server_is_redacted() -> None:
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        echoed = request.headers["Authorization"]
        return httpx.Response(401, json={"error": {"code": "UNAUTHORIZED", "message": f"bad {echoed}"}})

    with Client("http://api.test/v1", "s3cret-key", transport=httpx.MockTransport(handler)) as client, \
            pytest.raises(AuthError) as caught:
        client.list_tables()
    assert "s3cret-key" not in str(caught.value)


def test_bulk_calls_refuse_more_than_the_maximum_before_sending() -> None:
    import httpx

    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500))
    with Client("http://api.test/v1", "k", transport=transport) as client:
        with pytest.raises(ConfigError, match=f"1 to {MAX_BULK_ROWS} rows"):
            client.create_rows("tbl_1", [{"Name": "x"}] * (MAX_BULK_ROWS + 1))
        with pytest.raises(ConfigError, match=f"1 to {MAX_BULK_ROWS} ids"):
            client.delete_rows("tbl_1", [])
    assert sent == []


# -- what cannot heal fails at once; what the server sends is checked ----------------------


@pytest.mark.parametrize(("url", "said"), [
    ("api.example.com/v1", "it has no scheme (http:// or https://) ('api.example.com/v1')"),
    ("localhost:8000/v1", "it has no scheme"),
    ("ftp://api.example.com/v1", "the scheme 'ftp' is not http or https"),
    ("https:///v1", "it has no host"),
    ("http://", "it has no host"),
    ("https://user:pw@api.example.com/v1", "it carries credentials"),
    ("https://api.example.com/v1\r", "whitespace or a control character"),
    ("http://host:port/v1", "it cannot be parsed"),
])
def test_a_base_url_that_cannot_work_is_refused_before_any_request(url: str, said: str) -> None:
    from connector.errors import BaseUrlError

    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200))
    with pytest.raises(BaseUrlError) as caught:
        Client(url, "k", transport=transport)
    assert sent == []  # refused before any request
    message = str(caught.value)
    assert message.startswith("base URL must look like https://host/v1: ") and said in message
    assert "CONNECTOR_BASE_URL" in message and "\n" not in message
    assert "pw" not in message
    assert caught.value.exit_code == 2


def test_a_key_given_as_the_base_url_is_not_shown() -> None:
    from connector.errors import BaseUrlError

    key = "key_d0DRORiMdqc518peixOYuA20noDaRu_-C_jTFDw5_TI"
    with pytest.raises(BaseUrlError) as caught:
        Client(key, key)
    assert key not in str(caught.value) and "no scheme" in str(caught.value)


def test_a_host_with_no_address_fails_at_once() -> None:
    from connector.errors import BaseUrlError

    events: list[Any] = []
    with Client("http://no-such-host.invalid/v1", "k", retry=RetryPolicy(on_retry=events.append)) as client, \
            pytest.raises(BaseUrlError, match=r"the host 'no-such-host.invalid' of the base URL has no address"):
        client.list_tables()
    assert events == []  # one try: no retry wait


def test_tls_to_a_plain_http_port_fails_at_once(server: RunningServer) -> None:
    from connector.errors import BaseUrlError

    events: list[Any] = []
    url = server.base_url.replace("http://", "https://")
    with Client(url, server.api_key, retry=RetryPolicy(on_retry=events.append)) as client, \
            pytest.raises(BaseUrlError, match=r"TLS with https://127.0.0.1:\d+/v1 failed .*http://") as caught:
        client.list_tables()
    assert events == []  # one try: no retry wait
    assert server.api_key not in str(caught.value)
    assert caught.value.exit_code == 2 and not caught.value.retriable


def _answering(body: Any, status: int = 200) -> Client:
    return Client("http://api.test/v1", "k", transport=httpx.MockTransport(
        lambda r: httpx.Response(status, json=body)), retry=RetryPolicy(attempts=3, initial_backoff=0.01))


@pytest.mark.parametrize(("call", "body"), [
    (lambda c: c.list_tables(), {"tables": [{"name": "no id"}]}),
    (lambda c: c.list_tables(), {"nothing": []}),
    (lambda c: c.list_tables(), [1, 2]),
    (lambda c: c.get_table("tbl_1"), [{"id": "tbl_1"}]),
    (lambda c: c.get_table("tbl_1"), {"id": "tbl_1", "name": "T", "columns": [{"type": "text"}]}),
    (lambda c: c.list_rows("tbl_1"), [{"id": "row_1"}]),
    (lambda c: c.create_row("tbl_1", {}), {"fields": {}}),
    (lambda c: c.create_rows("tbl_1", [{}]), {"rows": [{"fields": {}}]}),
    (lambda c: c.create_rows("tbl_1", [{}]), {"created": 1}),
    (lambda c: c.run(c.aio.add_rows("tbl_1", [{}])), {"created": 1}),
    (lambda c: c.run(c.aio.add_rows("tbl_1", [{}])), {"rows": 1}),
    (lambda c: c.update_row("tbl_1", "row_1", {}), ["row_1"]),
])
def test_an_answer_of_an_unexpected_shape_is_a_server_error_at_once(call: Any, body: Any) -> None:
    from connector.errors import ServerError

    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201 if request.method == "POST" else 200, json=body)

    with Client("http://api.test/v1", "k", transport=httpx.MockTransport(handler)) as client, \
            pytest.raises(ServerError, match="the server sent an answer of an unexpected shape") as caught:
        call(client)
    assert not caught.value.retriable and len(sent) == 1
    assert isinstance(caught.value.__cause__, KeyError | TypeError | ValueError | AttributeError)


@pytest.mark.parametrize("filter", [["Status", "eq", "x"], "Status=x", 3])
def test_a_filter_that_is_not_a_mapping_is_a_configuration_error(filter: Any) -> None:
    with _answering({"rows": []}) as client, pytest.raises(ConfigError, match="a filter must be a mapping"):
        client.list_rows("tbl_1", filter=filter)


def test_the_filter_operators_are_one_ordered_tuple() -> None:
    from connector.api.endpoints import FILTER_OPERATORS

    assert FILTER_OPERATORS == ("eq", "gt")
