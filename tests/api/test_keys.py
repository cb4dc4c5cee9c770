"""The key is checked when a client is built, and never shows: not in errors, logs or tracebacks."""

from __future__ import annotations

import logging

import httpx
import pytest

from connector.api import Client
from connector.api.keys import (
    RedactingFilter,
    check_key,
    describe_variable,
    looks_like_key,
    redact,
    remember_key,
)
from connector.errors import AuthError, ConfigError

KEY = "key_T0pSecretValue_9f8e7d"

BAD_KEYS = {
    "crlf": (KEY + "\r\n", "carriage return"),
    "cr": (KEY + "\r", "carriage return"),
    "lf": (KEY + "\n", "newline"),
    "leading space": (" " + KEY, "whitespace"),
    "inner space": (KEY[:6] + " " + KEY[6:], "a space or a tab"),
    "tab": (KEY + "\tx", "a space or a tab"),
    "non-ascii": (KEY + "é", "non-ASCII"),
    "typographic quote": ("“" + KEY + "”", "non-ASCII"),
    "control": (KEY + "\x07", "control character (U+0007)"),
    "nul": (KEY + "\x00", "control character (U+0000)"),
    "blank": ("   ", "blank"),
}


@pytest.mark.parametrize("name", list(BAD_KEYS))
def test_a_key_that_cannot_be_sent_is_a_configuration_error_naming_its_variable(name: str) -> None:
    key, said = BAD_KEYS[name]
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200, json={"tables": []}))
    with pytest.raises(ConfigError) as caught:
        Client("http://api.test/v1", key, transport=transport)
    assert sent == []  # refused before any request
    message = str(caught.value)
    assert said in message and "CONNECTOR_API_KEY" in message
    assert "\n" not in message
    assert KEY not in message and KEY[:10] not in message and KEY not in repr(caught.value.args)
    assert caught.value.exit_code == 2
    assert sent == []


def test_the_caller_says_where_the_key_came_from() -> None:
    with pytest.raises(ConfigError, match="the API key in WAREHOUSE_KEY ends with a carriage return"):
        Client("http://api.test/v1", KEY + "\r", key_source="WAREHOUSE_KEY")


def test_a_key_from_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_API_KEY", KEY + "\r")
    with pytest.raises(ConfigError, match="CONNECTOR_API_KEY"):
        Client("http://api.test/v1")


def test_an_empty_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_API_KEY", "")
    with pytest.raises(ConfigError, match="no API key: pass api_key or set CONNECTOR_API_KEY"):
        Client("http://api.test/v1")


def test_a_good_key_passes_unchanged() -> None:
    assert check_key(KEY) == KEY
    assert check_key("k") == "k"


def test_a_refused_key_names_the_callers_variable() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(401, json={"error": {"code": "UNAUTHORIZED"}}))
    with Client("http://api.test/v1", KEY, transport=transport, key_source="WAREHOUSE_KEY") as client, \
            pytest.raises(AuthError, match="set WAREHOUSE_KEY to a valid key"):
        client.list_tables()


@pytest.mark.parametrize(("value", "shown"), [
    ("CONNECTOR_API_KEY", True),
    ("MY_KEY_2", True),
    ("key_d0DRORiMdqc518peixOYuA20noDaRu_-C_jTFDw5_TI", False),
    ("kQ7vR2mX9pL4sT1wZ8yB", False),
])
def test_a_variable_name_is_shown_but_a_value_that_looks_like_a_key_is_not(value: str, shown: bool) -> None:
    described = describe_variable(value)
    assert (value in described) is shown
    assert looks_like_key(value) is not shown


def test_remembered_keys_are_redacted_from_text_and_log_records(caplog: pytest.LogCaptureFixture) -> None:
    secret = "key_RedactMe_1234567890abc"
    remember_key(secret)
    assert redact(f"Bearer {secret}!") == "Bearer ***!"
    logger = logging.getLogger("tests.api.keys")
    logger.addFilter(RedactingFilter())
    caplog.set_level(logging.DEBUG)
    try:
        raise ValueError(f"header b'Bearer {secret}'")
    except ValueError:
        logger.exception("sent %s", f"Authorization: Bearer {secret}")
    assert "Bearer ***" in caplog.text
    assert secret not in caplog.text


def test_httpcore_debug_lines_never_hold_the_key(caplog: pytest.LogCaptureFixture) -> None:
    """The loggers that see requests carry the redacting filter once a client knows a key."""
    secret = "key_HttpcoreDebug_0987654321"
    with Client("http://api.test/v1", secret, transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json={"tables": []}))):
        pass
    caplog.set_level(logging.DEBUG)
    logging.getLogger("httpcore.http11").debug("send_request_headers.started headers=%r",
                                               [(b"Authorization", f"Bearer {secret}".encode())])
    assert "Bearer ***" in caplog.text and secret not in caplog.text


def test_a_short_test_key_does_not_mangle_every_message() -> None:
    with Client("http://api.test/v1", "k", transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json={"tables": []}))):
        pass
    assert redact("keep the k's") == "keep the k's"
