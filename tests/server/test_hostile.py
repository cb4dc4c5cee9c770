"""What the server does with input meant to break it, over real HTTP (issue 9).

Bad filters are 400s, never 500s; an integer outside 64 bits is a 400 however it is
written; a 500 never takes a pipelined request down with it; one request cannot take the
server's memory (text cells and pages of rows are bounded); a scoped key cannot tell a table
it may not see from one that does not exist; failed authentications are rate limited; no
answer or log line repeats a key; names with control or bidi characters are refused; a body
over the bound is answered 413, never with a reset.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import select
import socket
import sqlite3
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest

from connector.server.columns import SpecError
from connector.server.query import MAX_CONDITIONS
from tests.fixtures.server import RunningServer, ServerFactory
from tests.server.conftest import PEOPLE


def rows_of(client: httpx.Client, table: str, **params: Any) -> httpx.Response:
    return client.get(f"/tables/{table}/rows", params=params)


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    return dict(body["error"])


# -- filters ------------------------------------------------------------------------------


#: Integer literals outside signed 64 bits: orjson reads the first two as integers, the
#: others (beyond unsigned 64 bits, or below -2**63) as floats; each is refused alike.
WIDE_INTEGERS = [
    "9223372036854775808",  # 2**63
    "18446744073709551615",  # 2**64 - 1
    "18446744073709551616",  # 2**64
    "-9223372036854775809",  # -2**63 - 1
    "123000000000000000000000000000",  # 1.23e29 written as an integer
    "9" * 5000,  # longer than Python converts to an int by default
]


def post_json(client: httpx.Client, path: str, body: str) -> httpx.Response:
    """POST (or PATCH, for a row) `body` as written: big literals reach the server untouched."""
    method = "PATCH" if "/rows/row_" in path else "POST"
    return client.request(method, path, content=body.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize("value", WIDE_INTEGERS, ids=lambda v: v[:24])
def test_an_integer_outside_64_bits_is_400_naming_the_column_in_every_write_and_filter(
    server: RunningServer, value: str
) -> None:
    table = server.create_table(PEOPLE)
    kept = server.insert_rows(table, [{"Name": "kept", "Age": 1}])[0]
    with server.client() as client:
        answers = {
            "create": post_json(client, f"/tables/{table}/rows", '{"fields": {"Name": "x", "Age": @}}'.replace("@", value)),
            "bulk": post_json(client, f"/tables/{table}/rows/bulk",
                              '{"rows": [{"fields": {"Name": "a"}}, {"fields": {"Name": "b", "Age": @}}]}'.replace("@", value)),
            "update": post_json(client, f"/tables/{table}/rows/{kept['id']}", '{"fields": {"Age": @}}'.replace("@", value)),
            "filter": rows_of(client, table, filter='{"Age": {"eq": @}}'.replace("@", value)),
            "filter gt": rows_of(client, table, filter='{"Name": {"eq": "kept"}, "Age": {"gt": @}}'.replace("@", value)),
        }
        for what, response in answers.items():
            got = error(response, 400)
            assert (got["code"], got["field"]) == ("VALIDATION_ERROR", "Age"), what
            assert "64-bit" in got["message"] and len(got["message"]) < 300, (what, got["message"][:300])
        assert error(answers["bulk"], 400)["index"] == 1
        assert [r["fields"] for r in rows_of(client, table).json()["rows"]] == [kept["fields"]]


def test_the_64_bit_bounds_and_large_floats_are_stored_and_read_back_exactly(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)
    literals = ["9223372036854775807", "-9223372036854775808", "1.5e300", "-1e19"]
    with server.client() as client:
        for literal in literals:
            created = post_json(client, f"/tables/{table}/rows", '{"fields": {"Name": "@", "Age": @}}'.replace("@", literal))
            assert created.status_code == 201, created.text
            assert json.loads(literal) == created.json()["fields"]["Age"]
        listed = rows_of(client, table, sort="Name")
        ages = {r["fields"]["Name"]: r["fields"]["Age"] for r in listed.json()["rows"]}
        for literal in literals:
            assert ages[literal] == json.loads(literal) and type(ages[literal]) is type(json.loads(literal)), literal
            if "e" not in literal:  # a JSON integer, digit for digit
                assert f'"Age":{literal}'.encode() in listed.content, literal
            found = rows_of(client, table, filter='{"Age": {"eq": @}}'.replace("@", literal)).json()["rows"]
            assert [r["fields"]["Name"] for r in found] == [literal]
        kept = rows_of(client, table, filter='{"Name": {"eq": "-9223372036854775808"}}').json()["rows"][0]
        updated = post_json(client, f"/tables/{table}/rows/{kept['id']}", '{"fields": {"Age": 9223372036854775807}}')
        assert updated.json()["fields"]["Age"] == 2**63 - 1


def test_a_filter_with_1000_conditions_is_400_and_the_cap_is_allowed(server: RunningServer) -> None:
    # Case variants of one name all resolve to the column: 1024 distinct keys.
    table = server.create_table({"name": "Wide", "columns": [{"name": "abcdefghij", "type": "text"}]})
    variants = ["".join(c.upper() if up else c for c, up in zip("abcdefghij", bits, strict=True))
                for bits in itertools.product((False, True), repeat=10)]
    with server.client() as client:
        too_many = {key: {"eq": "x"} for key in variants[:1000]}
        got = error(rows_of(client, table, filter=json.dumps(too_many)), 400)
        assert (got["code"], got["field"]) == ("VALIDATION_ERROR", "filter")
        assert str(MAX_CONDITIONS) in got["message"]
        enough = {key: {"eq": "x"} for key in variants[:MAX_CONDITIONS]}
        assert rows_of(client, table, filter=json.dumps(enough)).json()["total"] == 0


# Requests a careless or hostile client sends: (method, path under the table, options, status).
HOSTILE: list[tuple[str, str, dict[str, Any], int]] = [
    ("GET", "/rows", {"params": {"filter": '{"\\u0000": {"eq": 1}}'}}, 400),
    ("GET", "/rows", {"params": {"filter": "[" * 5000}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"Name": {"gt": ' + "[" * 3000 + "]" * 3000 + "}}"}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"id": {"gt": "\\ud800"}}'}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"created_at": {"gt": 1e400}}'}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"Age": {"eq": 1e400}}'}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"Age": {"gt": -9223372036854775809}}'}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"Member": {"eq": 1}}'}}, 400),
    ("GET", "/rows", {"params": {"filter": '{"Joined": {"gt": "2024-02-30"}}'}}, 400),
    ("GET", "/rows", {"params": {"sort": "\x00"}}, 400),
    ("GET", "/rows", {"params": {"limit": "-1"}}, 400),
    ("GET", "/rows", {"params": {"offset": "9" * 16}}, 400),
    ("GET", "/rows?filter=%FF%FE", {}, 400),
    ("GET", "/rows?limit=%FF", {}, 400),
    ("PATCH", "/rows/" + "x" * 5000, {"json": {"fields": {"Name": "a"}}}, 404),
    ("POST", "/rows", {"content": b"[" * 100_000, "headers": {"content-type": "application/json"}}, 400),
    ("POST", "/rows", {"content": b'{"fields": {"Name": "\\udc00"}}', "headers": {"content-type": "application/json"}}, 400),
    ("POST", "/rows", {"json": {"fields": {"Name": "x", "Age": True}}}, 400),
    ("POST", "/rows", {"json": {"fields": {"Name": ""}}}, 400),
    ("POST", "/rows", {"json": {"fields": ["Name", "x"]}}, 400),
    ("POST", "/rows/bulk", {"json": {"rows": [{"fields": {"Name": "x"}}] * 101}}, 400),
    ("POST", "/rows/bulk", {"json": {"rows": [{"fields": {"Name": "x"}}, "row"]}}, 400),
    ("DELETE", "/rows/bulk", {"json": {"row_ids": ["row_nope"] * 100}}, 404),
    ("DELETE", "/rows/bulk", {"json": {"row_ids": [1, 2]}}, 400),
]


def test_hostile_requests_get_a_4xx_with_the_error_body_and_write_nothing(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)
    with server.client() as client:
        for method, path, options, status in HOSTILE:
            started = time.monotonic()
            response = client.request(method, f"/tables/{table}{path}", **options)
            where = f"{method} {path[:40]} {str(options)[:60]}"
            assert response.status_code == status, f"{where}: {response.status_code} {response.text[:200]}"
            assert time.monotonic() - started < 2, where
            if status >= 400:
                got = error(response, status)
                assert got["message"] and "\n" not in got["message"], where
    assert server.row_count(table) == 0


# -- a 500 and the connection it came on ----------------------------------------------------


def pipelined(running: RunningServer, *requests: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Writes `requests` back to back on one connection; the answers read until it closes or idles."""
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        sock.sendall(b"".join(requests))
        sock.settimeout(1.0)
        data = b""
        with contextlib.suppress(TimeoutError):
            while chunk := sock.recv(65536):
                data += chunk
    answers = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        answers.append((int(status_line.split()[1]), headers, rest[:length]))
        data = rest[length:]
    return answers


def request(running: RunningServer, method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} /v1{path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {running.api_key}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def assert_second_answered_or_first_closes(answers: list[tuple[int, dict[str, str], bytes]]) -> None:
    assert answers and answers[0][0] == 500
    assert json.loads(answers[0][2])["error"]["code"] == "INTERNAL"
    if len(answers) == 1:
        assert answers[0][1].get("connection") == "close", "the pipelined request was dropped silently"
    else:
        assert answers[1][0] == 200


def test_an_unexpected_500_leaves_the_connection_serving_the_next_request(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)
    # A real crash: the rows table vanishes under the running server.
    with contextlib.closing(sqlite3.connect(server.db_path)) as db:
        db.execute("ALTER TABLE rows RENAME TO rows_away")
        db.commit()
    answers = pipelined(server, request(server, "GET", f"/tables/{table}/rows"), request(server, "GET", "/tables"))
    assert_second_answered_or_first_closes(answers)
    assert len(answers) == 2
    assert "rows_away" not in answers[0][2].decode()  # no internals in the body


def test_an_injected_500_before_the_body_is_read_keeps_the_next_request(server_factory: ServerFactory) -> None:
    running = server_factory(fail_rate=1.0)
    table = running.create_table(PEOPLE)
    body = json.dumps({"fields": {"Name": "x" * 5000}}).encode()
    answers = pipelined(running, request(running, "POST", f"/tables/{table}/rows", body),
                        request(running, "GET", "/tables"))
    assert [status for status, _, _ in answers] == [500, 500]  # both answered (both injected)
    assert running.row_count(table) == 0


# -- memory per request -------------------------------------------------------------------


def test_a_text_cell_above_max_cell_bytes_is_400_naming_the_column(server_factory: ServerFactory) -> None:
    running = server_factory(max_cell_bytes=1000)
    table = running.create_table(PEOPLE)
    with running.client() as client:
        assert client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x" * 1000}}).status_code == 201
        assert client.post(f"/tables/{table}/rows", json={"fields": {"Name": "€" * 333}}).status_code == 201
        got = error(client.post(f"/tables/{table}/rows", json={"fields": {"Name": "€" * 334}}), 400)
        assert (got["code"], got["field"]) == ("VALIDATION_ERROR", "Name")
        assert "1002 bytes" in got["message"] and "1000" in got["message"]
        rows = [{"fields": {"Name": "ok"}}] * 3 + [{"fields": {"Name": "x" * 1001}}]
        got = error(client.post(f"/tables/{table}/rows/bulk", json={"rows": rows}), 400)
        assert (got["field"], got["index"]) == ("Name", 3)
        row = client.get(f"/tables/{table}/rows").json()["rows"][0]["id"]
        got = error(client.patch(f"/tables/{table}/rows/{row}", json={"fields": {"Name": "y" * 1001}}), 400)
        assert got["field"] == "Name"
    assert running.row_count(table) == 2


def test_pages_are_cut_by_size_and_report_the_rows_they_hold(server_factory: ServerFactory) -> None:
    running = server_factory(max_response_bytes=50_000)
    table = running.create_table(PEOPLE)
    sizes = [10_000] * 20 + [100] * 30 + [200_000] * 3 + [100] * 7
    running.insert_rows(table, [{"Name": f"{i:03d}" + "x" * (n - 3)} for i, n in enumerate(sizes)])
    with running.client() as client:
        first = rows_of(client, table, limit=100).json()
        assert (first["total"], first["offset"]) == (60, 0)
        assert 2 <= len(first["rows"]) == first["limit"] < 10
        assert len(rows_of(client, table, limit=100).content) < 60_000
        # A reader stepping by the applied limit reads every row once, in order, and ends on
        # a page shorter than its limit, as with any server.
        names, offset, limits = [], 0, []
        while True:
            page = rows_of(client, table, limit=100, offset=offset).json()
            names += [r["fields"]["Name"][:3] for r in page["rows"]]
            limits.append(page["limit"])
            offset += page["limit"]
            if len(page["rows"]) < page["limit"]:
                break
        assert names == [f"{i:03d}" for i in range(60)]
        assert limits[-1] == 100
        # Rows larger than the cap still come, two at a time (one if asked for one).
        big = rows_of(client, table, limit=100, offset=50).json()
        assert [len(r["fields"]["Name"]) for r in big["rows"]] == [200_000, 200_000]
        assert big["limit"] == 2
        assert rows_of(client, table, limit=1, offset=50).json()["limit"] == 1
        # Small rows fill a page up to the limit asked for.
        assert rows_of(client, table, limit=25, offset=20).json()["limit"] == 25


def peak_rss(pid: int) -> int:
    """The process's high-water mark of resident memory, in bytes (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024


def test_a_page_of_huge_rows_keeps_the_server_memory_near_the_response_cap(server: RunningServer) -> None:
    """The issue's case scaled down: 20 rows of 2 MB cells (stored before a cap, or under a
    raised one) read as one page of 100. Unbounded, the server's peak grew by ~3x the 40 MB
    page; with the default 8 MiB cap the page holds 4 rows."""
    table = server.create_table({"name": "Big", "columns": [{"name": "Text", "type": "text"}]})
    for i in range(20):
        server.insert_rows(table, [{"Text": chr(97 + i) * 2_000_000}])
    assert server.pid is not None
    with server.client() as client:
        client.get("/tables")
        before = peak_rss(server.pid)
        page = rows_of(client, table, limit=100)
        grown = peak_rss(server.pid) - before
    assert page.status_code == 200 and len(page.content) < 8_500_000
    assert len(page.json()["rows"]) == page.json()["limit"] == 4
    assert grown < 48 * 2**20, f"the server's peak RSS grew by {grown / 2**20:.0f} MiB"


# -- keys -----------------------------------------------------------------------------------


def test_a_scoped_key_gets_the_same_403_for_a_hidden_table_and_a_missing_one(server: RunningServer) -> None:
    mine = server.create_table(PEOPLE)
    hidden = server.create_table({**PEOPLE, "name": "Payroll"})
    scoped = server.create_key(tables=[mine])
    headers = {"Authorization": f"Bearer {scoped}"}
    with httpx.Client(base_url=server.base_url, headers=headers) as client:
        for path in ("", "/rows"):
            answers = [error(client.get(f"/tables/{t}{path}"), 403) for t in (hidden, "tbl_000000000000")]
            assert answers[0] == {**answers[1], "message": answers[1]["message"].replace("tbl_000000000000", hidden)}
            assert answers[0]["code"] == "FORBIDDEN"
        written = client.post("/tables/tbl_000000000000/rows", json={"fields": {"Name": "x"}})
        assert error(written, 403)["code"] == "FORBIDDEN"
    with server.client() as client:  # a key that may read every table learns nothing new from a 404
        assert error(client.get("/tables/tbl_000000000000"), 404)["code"] == "NOT_FOUND"


def test_failed_authentications_count_against_the_rate_limit(server_factory: ServerFactory) -> None:
    running = server_factory(rate_limit=0.05)  # a burst of one, the next a guess 20 s later
    with httpx.Client(base_url=running.base_url) as client:
        guesses = [client.get("/tables", headers={"Authorization": f"Bearer key_guess{i}"}) for i in range(4)]
        assert [r.status_code for r in guesses] == [401, 429, 429, 429]
        assert int(guesses[1].headers["retry-after"]) >= 1
        assert error(guesses[1], 429)["code"] == "RATE_LIMITED"
        # While the address is blocked, a right key and a wrong one get the same answer.
        right = client.get("/tables", headers={"Authorization": f"Bearer {running.api_key}"})
        assert right.status_code == 429
        assert client.get("/tables").status_code == 429  # no key at all counts as a failure too


# -- credentials -----------------------------------------------------------------------------


def authorization_lines(key: str) -> dict[str, bytes]:
    """Header lines that carry `key` in ways a server may refuse: (what, the line's bytes)."""
    raw = key.encode()
    return {
        "a NUL after it": b"Authorization: Bearer " + raw + b"\x00",
        "a NUL inside it": b"Authorization: Bearer " + raw[:20] + b"\x00" + raw[20:],
        "a NUL before it": b"Authorization: Bearer \x00" + raw,
        "a DEL inside it": b"Authorization: Bearer " + raw[:30] + b"\x7f" + raw[30:],
        "a bare CR inside it": b"Authorization: Bearer " + raw[:10] + b"\r" + raw[10:],
        "non-ASCII (UTF-8) in it": b"Authorization: Bearer " + raw + "é—".encode(),
        "non-ASCII (Latin-1) in it": b"Authorization: Bearer \xe9" + raw,
        "a space inside it": b"Authorization: Bearer " + raw[:25] + b" " + raw[25:],
        "no colon after the name": b"Authorization Bearer " + raw,
        "no scheme": b"Authorization: " + raw,
        "a folded line": b"Authorization: Bearer\r\n " + raw,
        "50 KB of it": b"Authorization: Bearer " + raw * (50_000 // len(raw)),
        "100 KB of it": b"Authorization: Bearer " + raw * (100_000 // len(raw)),
    }


def assert_no_part_of(secret: str, text: str, where: str) -> None:
    """No 6 characters in a row of `secret` appear in `text` (a cut echo is a leak too)."""
    for i in range(len(secret) - 5):
        assert secret[i : i + 6] not in text, f"{where}: {secret[i : i + 6]!r} of the key is in {text[:300]!r}"


def test_no_answer_or_log_line_repeats_any_part_of_a_key_in_a_bad_authorization_header(
    server: RunningServer,
) -> None:
    table = server.create_table(PEOPLE)
    secret = server.api_key.removeprefix("key_")
    before = len(server.log())
    for what, line in authorization_lines(server.api_key).items():
        for target in (b"/v1/tables", f"/v1/tables/{table}/rows".encode()):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: test\r\nConnection: close\r\n" + line + b"\r\n\r\n")
                answer, _ = read_answer(sock, timeout=10)
            status, body = parsed(answer)
            assert status in (200, 400, 401, 431), (what, answer[:300])  # 200: h11 unfolds a line
            assert status == 200 or set(body["error"]) == {"code", "message"}, what
            if what.startswith("a NUL"):
                assert "illegal header line (the 'Authorization' header)" in body["error"]["message"], body
            assert_no_part_of(secret, answer.decode("latin-1"), what)
    assert_no_part_of(secret, server.log()[before:], "the server's log")
    with server.client() as client:
        assert client.get("/tables").status_code == 200  # the key still works


def test_a_key_sent_where_a_name_an_id_or_a_value_goes_is_not_repeated(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)
    key = server.api_key
    with server.client() as client:
        for response in (
            client.get(f"/tables/{key}"),
            client.get(f"/tables/{table}/rows/{key}"),
            client.patch(f"/tables/{table}/rows/row_{key}", json={"fields": {"Name": "x"}}),
            client.get(f"/tables/{table}/rows", params={"sort": key}),
            client.get(f"/tables/{table}/rows", params={"sort": "x" * 70 + key}),
            client.get(f"/tables/{table}/rows", params={"filter": json.dumps({key: {"eq": 1}})}),
            client.get(f"/tables/{table}/rows", params={"filter": json.dumps({"Name": {key: 1}})}),
            client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x", "Status": key}}),
            client.post(f"/tables/{table}/rows", json={"fields": {"Name": "x", key: 1}}),
            client.post(f"/tables/{table}/rows", content=b"{}", headers={"content-type": f"text/{key}"}),
        ):
            assert 400 <= response.status_code < 500, response.text
            assert_no_part_of(key.removeprefix("key_"), response.text, f"{response.request.method} {response.request.url}")


# -- names ----------------------------------------------------------------------------------


#: The bidirectional formatting characters: one can make "gpj.exe" print as "exe.jpg".
BIDI = ["\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
        "\u2066", "\u2067", "\u2068", "\u2069"]


@pytest.mark.parametrize("name", ["Bad\x1b[31mName", "Line\nBreak", "Tab\there", "del\x7f", "c1\x85", "ls\u2028",
                                  *(f"abc{char}gpj.exe" for char in BIDI)])
def test_names_with_control_or_bidi_characters_are_refused_everywhere_a_name_is_given(
    server: RunningServer, name: str
) -> None:
    bad = next(c for c in name if not (c.isprintable() or c == " "))
    named = f"control character (U+{ord(bad):04X}"
    with pytest.raises(SpecError, match=re.escape(named)):
        server.create_table({"name": name, "columns": [{"name": "A", "type": "text"}]})
    with pytest.raises(SpecError, match=re.escape(named)):
        server.create_table({"name": "Fine", "columns": [{"name": name, "type": "text"}]})
    with server.client() as client:
        assert client.get("/tables").json() == {"tables": []}
    table = server.create_table({"name": "Fine", "columns": [{"name": "A", "type": "text"}]})
    with pytest.raises(SpecError, match=re.escape(named)):
        server.add_column(table, name, "text")
    with pytest.raises(SpecError, match=re.escape(named)):
        server.rename_column(table, "A", name)
    with server.client() as client:
        assert [c["name"] for c in client.get(f"/tables/{table}").json()["columns"]] == ["A"]


# -- connections (issue 19) ------------------------------------------------------------------


def head(running: RunningServer, method: str, path: str, extra: str = "") -> bytes:
    return (f"{method} /v1{path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {running.api_key}\r\n"
            f"{extra}\r\n").encode()


def hang_up_mid_body(running: RunningServer, table: str) -> None:
    """Announces a 1000-byte body, sends 20 bytes of it, and closes the connection."""
    extra = "Content-Type: application/json\r\nContent-Length: 1000\r\n"
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        sock.sendall(head(running, "POST", f"/tables/{table}/rows", extra) + b'{"fields": {"Name": "')
        time.sleep(0.05)  # the server is reading the body


def new_log_lines(running: RunningServer, before: int, want: int, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(running.log().splitlines()) < before + want and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # anything more the last one would write
    return running.log().splitlines()[before:]


def test_a_client_hanging_up_mid_body_costs_at_most_one_log_line(server: RunningServer) -> None:
    table = server.create_table(PEOPLE)
    before = len(server.log().splitlines())
    for _ in range(20):
        hang_up_mid_body(server, table)
    lines = new_log_lines(server, before, 20)
    assert 1 <= len(lines) <= 20, "\n".join(lines[:40])
    assert all("hung up" in line for line in lines), lines[:3]
    assert not any("Traceback" in line for line in lines)
    with server.client() as client:
        assert client.get("/tables").status_code == 200
    assert server.row_count(table) == 0


def test_a_hang_up_shows_its_traceback_with_debug(server_factory: ServerFactory) -> None:
    running = server_factory(debug=True)
    table = running.create_table(PEOPLE)
    before = len(running.log().splitlines())
    hang_up_mid_body(running, table)
    lines = new_log_lines(running, before, 5)
    assert any("hung up" in line for line in lines)
    assert any("Traceback" in line for line in lines) and any("ClientDisconnect" in line for line in lines)


LONG = "x" * 60_000
#: Requests that carry a 60 KB value the answer could repeat: (key, method, path, options, status).
ECHOED: list[tuple[str, str, str, dict[str, Any], int]] = [
    ("full", "GET", f"/tables/{LONG}", {}, 404),
    ("scoped", "GET", f"/tables/{LONG}/rows", {}, 403),
    ("full", "PATCH", "/tables/{table}/rows/" + LONG, {"json": {"fields": {"Name": "a"}}}, 404),
    ("full", "DELETE", "/tables/{table}/rows/bulk", {"json": {"row_ids": [LONG]}}, 404),
    ("full", "POST", "/tables/{table}/rows", {"json": {"fields": {LONG: 1}}}, 400),
    ("full", "POST", "/tables/{table}/rows", {"json": {"fields": {"Name": "a", "Status": LONG}}}, 400),
    ("full", "POST", "/tables/{table}/rows", {"json": {"fields": {"Name": "a", "Joined": LONG}}}, 400),
    ("full", "POST", "/tables/{table}/rows", {"content": b"{}", "headers": {"content-type": LONG}}, 415),
    ("full", "GET", "/tables/{table}/rows", {"params": {"sort": LONG}}, 400),
    ("full", "GET", "/tables/{table}/rows", {"params": {"order": LONG}}, 400),
    ("full", "GET", "/tables/{table}/rows", {"params": {"limit": LONG}}, 400),
    ("full", "GET", "/tables/{table}/rows", {"params": {"filter": json.dumps({LONG: {"eq": 1}})}}, 400),
    ("full", "GET", "/tables/{table}/rows", {"params": {"filter": json.dumps({"Name": {LONG: 1}})}}, 400),
    ("full", "GET", f"/{LONG}", {}, 404),
    ("full", "PUT", f"/tables/{LONG}", {}, 405),
]


@pytest.mark.parametrize(("key", "method", "path", "options", "status"), ECHOED,
                         ids=[f"{m} {p[:28]} {str(o)[:30]}" for _, m, p, o, _ in ECHOED])
def test_a_long_value_is_echoed_cut_to_a_readable_length(
    server: RunningServer, key: str, method: str, path: str, options: dict[str, Any], status: int
) -> None:
    table = server.create_table(PEOPLE)
    keys = {"full": server.api_key, "scoped": server.create_key(tables=[table])}
    headers = {"Authorization": f"Bearer {keys[key]}", **options.pop("headers", {})}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as client:
        response = client.request(method, path.format(table=table), **options)
    got = error(response, status)
    assert len(response.content) < 1000, f"a {len(response.content)}-byte answer"
    assert "xxxxxxxxxx" in got["message"], got["message"]
    assert re.search(r"\.\.\. \(600[0-9][0-9] characters\)", got["message"]), "says how long the value was"


def read_answer(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took;
    fails if it is still open after `timeout` seconds."""
    started = time.monotonic()
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"still open after {timeout} s, having sent {data[:80]!r}") from None
    return data, time.monotonic() - started


def parsed(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_clients_that_stop_mid_request_cannot_hold_connections(server_factory: ServerFactory) -> None:
    """A handful of slow clients each stop somewhere in a request; all are cut loose on time,
    and a good client is served meanwhile."""
    running = server_factory(header_timeout=1, body_timeout=1, keep_alive_timeout=1)
    table = running.create_table(PEOPLE)
    body_head = "Content-Type: application/json\r\nContent-Length: 1000\r\n"
    stalls: dict[str, bytes] = {
        "half a head": b"GET /v1/tables HTTP/1.1\r\nHost: test\r\nAuthor",
        "half a body": head(running, "POST", f"/tables/{table}/rows", body_head) + b'{"fields": {"Na',
        "a body nobody reads": (f"POST /v1/tables/{table}/rows HTTP/1.1\r\nHost: test\r\n{body_head}\r\n").encode()
        + b'{"fields"',  # no key: the 401 goes out before the body is read
        "nothing": b"",
    }
    socks = {}
    for name, data in stalls.items():
        for i in range(5):
            sock = socket.create_connection(("127.0.0.1", running.port), timeout=5)
            sock.sendall(data)
            socks[f"{name} #{i}"] = sock
    idle = socket.create_connection(("127.0.0.1", running.port), timeout=5)  # after an answer
    idle.sendall(request(running, "GET", "/tables"))
    try:
        with running.client() as client:
            started = time.monotonic()
            assert client.get(f"/tables/{table}/rows").status_code == 200
            assert time.monotonic() - started < 1
        for name, sock in socks.items():
            answer, waited = read_answer(sock, timeout=5)
            assert waited < 3, f"{name}: held {waited:.1f} s"
            if name.startswith(("half a head", "half a body")):
                status, body = parsed(answer)
                assert (status, body["error"]["code"]) == (408, "REQUEST_TIMEOUT"), name
            elif name.startswith("a body nobody reads"):
                assert parsed(answer)[0] == 401, name
            else:
                assert answer == b"", name
        answer, _ = read_answer(idle, timeout=5)
        assert parsed(answer)[0] == 200
    finally:
        for sock in [*socks.values(), idle]:
            sock.close()


def test_a_head_dripped_a_byte_at_a_time_still_meets_its_deadline(server_factory: ServerFactory) -> None:
    """The deadline is for the whole head, not a pause: a byte every 0.1 s does not hold it.
    Cut after about 1 s, it got about 10 of the 140 bytes (a busy machine drips slower, so
    fewer); a deadline per pause would have taken them all."""
    running = server_factory(header_timeout=1)
    head = b"GET /v1/tables HTTP/1.1\r\nHost: test\r\nX-Slow: " + b"y" * 100
    sent = 0
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        started = time.monotonic()
        for byte in head:
            if select.select([sock], [], [], 0.1)[0]:
                break  # the server answered
            sock.sendall(bytes([byte]))
            sent += 1
        answered = time.monotonic() - started
        answer, _ = read_answer(sock, timeout=5)
    assert parsed(answer)[0] == 408
    assert answered >= 0.9  # not before its deadline
    assert sent < len(head) // 4, f"{sent} of {len(head)} bytes dripped before the answer"


OVERSIZED: list[tuple[str, bytes, int, str]] = [
    ("a 1 MB URL", b"GET /v1/tables/" + b"x" * 1_000_000 + b" HTTP/1.1\r\nHost: test\r\n\r\n", 414, "URI_TOO_LONG"),
    ("a 100 KB header", b"GET /v1/tables HTTP/1.1\r\nHost: test\r\nX-Big: " + b"y" * 100_000 + b"\r\n\r\n",
     431, "HEADERS_TOO_LARGE"),
    ("20,000 headers", b"GET /v1/tables HTTP/1.1\r\nHost: test\r\n" + b"X-H: v\r\n" * 20_000 + b"\r\n",
     431, "HEADERS_TOO_LARGE"),
    ("not HTTP", b"HELLO THERE\r\n\r\n", 400, "BAD_REQUEST"),
]


@pytest.mark.parametrize(("what", "data", "status", "code"), OVERSIZED, ids=[o[0] for o in OVERSIZED])
def test_an_oversized_or_malformed_head_is_answered_never_reset(
    server: RunningServer, what: str, data: bytes, status: int, code: str
) -> None:
    for _ in range(5):  # a reset is a race: give it chances
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(data)  # whole: the server reads what it will not use
            answer, _ = read_answer(sock, timeout=10)
        got, body = parsed(answer)
        assert (got, body["error"]["code"]) == (status, code), what
        assert answer.split(b"\r\n")[0].endswith(HTTPStatus(status).phrase.encode())
        assert len(body["error"]["message"]) < 200
    with server.client() as client:
        assert client.get("/tables").status_code == 200


def test_a_head_in_pieces_is_bounded_as_one_in_a_single_read(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/tables HTTP/1.1\r\nHost: test\r\n")
        for _ in range(20):
            sock.sendall(b"X-Piece: " + b"z" * 5000 + b"\r\n")
            time.sleep(0.01)
        with contextlib.suppress(OSError):
            sock.sendall(b"\r\n")
        answer, _ = read_answer(sock, timeout=10)
    assert parsed(answer)[0] == 431


def test_after_an_unread_body_ends_the_next_head_has_its_deadline(server_factory: ServerFactory) -> None:
    running = server_factory(header_timeout=1, body_timeout=2)
    table = running.create_table(PEOPLE)
    body = b'{"fields": {"Name": "x"}}'
    unauthorised = (f"POST /v1/tables/{table}/rows HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        sock.sendall(unauthorised + body[:5])  # answered 401 before the body is read
        time.sleep(0.3)
        sock.sendall(body[5:] + b"GET /v1/tables HTTP/1.1\r\nHost: te")  # the body ends; half a head
        answer, waited = read_answer(sock, timeout=5)
    assert answer.count(b"HTTP/1.1 ") == 2 and b" 401 " in answer and b" 408 " in answer
    assert waited < 2.5


def post_too_large(running: RunningServer, table: str, *, close: bool, chunked: bool) -> bytes:
    """POSTs a 9 MB body (over the 8 MiB bound) the way a client does, all of it before reading;
    returns what the server answered. A reset while sending or reading fails the test."""
    body = b'{"fields": {"Name": "' + b"x" * 9_000_000 + b'"}}'
    framing = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {len(body)}\r\n"
    extra = "Content-Type: application/json\r\n" + framing + ("Connection: close\r\n" if close else "")
    if chunked:
        pieces = [body[i : i + 65536] for i in range(0, len(body), 65536)]
        body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:
        sock.sendall(head(running, "POST", f"/tables/{table}/rows", extra) + body)
        answer, _ = read_answer(sock, timeout=10)
    return answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "connection-close"])
def test_a_body_over_the_bound_is_answered_413_never_reset(server: RunningServer, close: bool, chunked: bool) -> None:
    table = server.create_table(PEOPLE)
    for _ in range(3):  # a reset is a race: give it chances
        answer = post_too_large(server, table, close=close, chunked=chunked)
        status, body = parsed(answer)
        assert (status, body["error"]["code"]) == (413, "CONTENT_TOO_LARGE")
        assert b"\r\nconnection: close\r\n" in answer.lower()
    assert server.row_count(table) == 0
    with server.client() as client:
        assert client.get("/tables").status_code == 200
