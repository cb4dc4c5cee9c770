"""The one page reader, `PageReader`, against `connector serve` over real HTTP.

How it keeps its place while the table changes: pages overlap and each continues after the
row emitted last that it holds; a shift is repaired where it showed (windows stepping back
from where that row was read), not by starting over; where every row read lately vanished,
it resumes by key (or, on a server refusing key filters, reads again dropping what it
emitted). Some tests put a recording proxy in front of the server (`Recorder`): the server
still answers every request; the proxy only notes what was asked and, at a chosen moment,
deletes rows through the API as another client would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from connector.api import AsyncClient, paging
from connector.api.paging import PageReader
from connector.errors import ExtractionError
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer, ServerFactory

SPEC = {"name": "T", "columns": [{"name": "Name", "type": "text", "required": True}]}


class Recorder(httpx.AsyncBaseTransport):
    """Forwards to the server; records each rows request; `after_page(n, ids)` runs once the
    n-th page (1-based) has been answered, before the reader sees it."""

    def __init__(self, after_page: Callable[[int, list[str]], None] = lambda n, ids: None) -> None:
        self._upstream = httpx.AsyncHTTPTransport()
        self.after_page = after_page
        self.requests: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        answer = await self._upstream.handle_async_request(request)
        body = await answer.aread()
        await answer.aclose()
        if request.url.path.endswith("/rows") and answer.status_code == 200:
            params = request.url.params
            self.requests.append(
                {
                    "offset": int(params.get("offset", 0)),
                    "filter": json.loads(params["filter"]) if "filter" in params else {},
                }
            )
            self.after_page(len(self.requests), [r["id"] for r in json.loads(body)["rows"]])
        return httpx.Response(answer.status_code, headers=answer.headers, content=body)

    async def aclose(self) -> None:
        await self._upstream.aclose()


def read(
    server: RunningServer,
    table_id: str,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    page_size: int = 50,
    concurrency: int = 1,
    filter: dict[str, Any] | None = None,
) -> tuple[list[str], PageReader]:
    """Every id the reader emits, in order, and the reader (for its `resumes`)."""
    emitted: list[str] = []

    async def main() -> PageReader:
        async with AsyncClient(server.base_url, server.api_key, transport=transport) as client:
            table = await client.get_table(table_id)

            async def emit(cells: paging.Cells) -> None:
                emitted.extend(cells[0])

            reader = PageReader(client, table, fields=["Name"], filter=filter or {}, page_size=page_size,
                                concurrency=concurrency, emit=emit)
            await reader.read()
            return reader

    return emitted, asyncio.run(main())


def seeded(server: RunningServer, rows: int) -> tuple[str, list[str]]:
    table_id = server.create_table(SPEC)
    return table_id, [r["id"] for r in server.insert_rows(table_id, [{"Name": str(i)} for i in range(rows)])]


def stored_ids(server: RunningServer, table_id: str) -> set[str]:
    with contextlib.closing(Storage(str(server.db_path))) as storage:
        return {r[0] for r in storage._db.execute("SELECT id FROM rows WHERE table_id = ?", (table_id,))}


def deleter(server: RunningServer, table_id: str) -> Callable[[list[str]], None]:
    def delete(ids: list[str]) -> None:
        with server.client() as http:
            for start in range(0, len(ids), 100):
                chunk = ids[start : start + 100]
                response = http.request("DELETE", f"/tables/{table_id}/rows/bulk", json={"row_ids": chunk})
                assert response.status_code == 200, response.text

    return delete


def test_a_quiet_table_is_read_in_overlapping_pages_without_repairs(server: RunningServer) -> None:
    table_id, ids = seeded(server, 500)
    recorder = Recorder()
    emitted, reader = read(server, table_id, transport=recorder)
    assert emitted == ids
    assert reader.resumes == 0
    offsets = [r["offset"] for r in recorder.requests]
    assert offsets == list(range(0, 500, 49)), "pages step by the applied limit less one row"


def test_a_shift_is_repaired_where_it_happened_not_by_starting_over(server: RunningServer) -> None:
    table_id, ids = seeded(server, 500)
    delete = deleter(server, table_id)
    doomed = ids[60:63]  # before the edge of page 3, which the reader has not read yet

    def after_page(n: int, _: list[str]) -> None:
        if n == 2:
            delete(doomed)

    recorder = Recorder(after_page)
    emitted, reader = read(server, table_id, transport=recorder)
    assert stored_ids(server, table_id) == set(ids) - set(doomed), "the deletes landed"
    assert reader.resumes == 1
    assert Counter(emitted).most_common(1)[0][1] == 1
    assert set(ids) - set(doomed) <= set(emitted)
    offsets = [r["offset"] for r in recorder.requests]
    assert offsets.count(0) == 1, f"the read started over: {offsets}"
    assert all(not r["filter"] for r in recorder.requests), "no keyed resume was needed"
    assert len(offsets) <= 500 // 49 + 4, f"a local repair costs a window or two: {offsets}"


@pytest.mark.parametrize("refuse", [False, True], ids=["keys", "refused"])
def test_when_every_row_read_lately_vanished_the_read_resumes_elsewhere(
    server_factory: ServerFactory, refuse: bool
) -> None:
    """No anchor left: by key where the server filters on `created_at`, else from the start
    dropping every id already emitted. Either way nothing is lost or repeated."""
    server = server_factory(refuse_system_filters=refuse)
    table_id, ids = seeded(server, 600)
    delete = deleter(server, table_id)
    gone: list[str] = []

    def after_page(n: int, _: list[str]) -> None:
        if n == 4:  # every row of pages 1-4, and a few more: nothing read lately is left
            gone.extend(ids[:230])
            delete(gone)

    recorder = Recorder(after_page)
    emitted, reader = read(server, table_id, transport=recorder)
    assert reader.resumes >= 1
    assert len(emitted) == len(set(emitted))
    assert set(ids) - set(gone) <= set(emitted)
    keyed = [r for r in recorder.requests if "created_at" in r["filter"]]
    # Offset 0 unfiltered: the first page, the repair's last window back; a restart reads it again.
    starts = sum(r["offset"] == 0 and not r["filter"] for r in recorder.requests)
    if refuse:
        assert not keyed and starts == 3
    else:
        assert keyed and starts == 2


def test_a_read_started_over_does_not_take_the_abandoned_pass_for_its_own(
    server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a server refusing key filters, a read that lost its place reads again from the start.
    The rows the abandoned pass emitted last are not the new pass's anchors: a shift among
    them is repaired (a repair found its anchor followed by them only, and circled until
    `MAX_RESUMES`)."""
    monkeypatch.setattr(paging, "MAX_SEARCH_WINDOWS", 0)  # a repair's first miss gives up
    monkeypatch.setattr(paging, "MAX_RESUMES", 30)
    server = server_factory(refuse_system_filters=True, fault_control=True)
    table_id, ids = seeded(server, 600)
    delete = deleter(server, table_id)
    gone: list[str] = []
    landed: list[int] = []

    def after_page(n: int, page: list[str]) -> None:
        if n == 2:  # pages of 10 rows from here: the first pass emits in small steps
            server.set_faults(max_page_size=10)
        if page[-1] == ids[306]:  # rows long passed, and the rows read last: the pass gives up
            doomed = ids[20:100] + ids[290:307]
        elif page[0] == ids[116]:  # the new pass, two pages into the first pass's last rows
            doomed = ids[:2] + ids[126:290]  # the next page starts past them all
        else:
            return
        gone.extend(doomed)
        delete(doomed)
        landed.append(n)

    emitted, _ = read(server, table_id, transport=Recorder(after_page), page_size=100)
    assert len(landed) == 2 and stored_ids(server, table_id) == set(ids) - set(gone), "the deletes landed"
    assert len(emitted) == len(set(emitted))
    assert set(ids) - set(gone) <= set(emitted)


class HoldBack(httpx.AsyncBaseTransport):
    """Forwards to the server, but holds the requests for pages before offset `until` (not
    the first page) until the page at `until` has been answered and `meanwhile` has run:
    the pages after it are then older than the ones before it."""

    def __init__(self, until: int, meanwhile: Callable[[], None]) -> None:
        self._upstream = httpx.AsyncHTTPTransport()
        self._until, self._meanwhile = until, meanwhile
        self._released = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("offset", 0))
        if request.url.path.endswith("/rows") and 0 < offset < self._until:
            await self._released.wait()
        answer = await self._upstream.handle_async_request(request)
        if offset == self._until and not self._released.is_set():
            body = await answer.aread()
            await answer.aclose()
            self._meanwhile()
            self._released.set()
            return httpx.Response(answer.status_code, headers=answer.headers, content=body)
        return answer

    async def aclose(self) -> None:
        await self._upstream.aclose()


def test_a_page_read_before_a_later_one_was_emitted_adds_nothing_out_of_order(
    server_factory: ServerFactory,
) -> None:
    """Pages 196-245 and on are read first; then 100 rows before offset 49 and the row at
    245 are deleted, and pages 49-195 read: they reach past row 245. Page 196, taken after
    them, still holds row 245 after its anchor (row 244): it is not new, and the read stays
    in creation order (the Spark source refuses a range read otherwise; it emitted 245 after
    296 before)."""
    server = server_factory()
    table_id, ids = seeded(server, 600)
    delete = deleter(server, table_id)
    gone = ids[1:41] + ids[52:112] + [ids[245]]
    emitted, _ = read(server, table_id, transport=HoldBack(196, lambda: delete(gone)), concurrency=8)
    assert stored_ids(server, table_id) == set(ids) - set(gone), "the deletes landed"
    where = {row_id: i for i, row_id in enumerate(ids)}
    assert [where[i] for i in emitted] == sorted(where[i] for i in emitted), "in creation order"
    assert len(emitted) == len(set(emitted))
    assert set(ids) - set(gone) <= set(emitted)


def test_resumes_bound_only_repairs_that_read_nothing_new(
    server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a steady stream of deletes every repair moves the read on, so even a tiny
    MAX_RESUMES does not stop it."""
    monkeypatch.setattr(paging, "MAX_RESUMES", 1)
    server = server_factory(refuse_system_filters=True, delete_on_read=3, seed=11)
    table_id, ids = seeded(server, 2000)
    emitted, reader = read(server, table_id, concurrency=4)
    left = stored_ids(server, table_id)
    assert len(left) < len(ids), "the fault deleted rows during the read"
    assert reader.resumes > 1
    assert len(emitted) == len(set(emitted)) and left <= set(emitted)


def test_a_server_page_limit_below_two_is_refused(server_factory: ServerFactory) -> None:
    server = server_factory(max_page_size=1)
    table_id, _ = seeded(server, 5)
    with pytest.raises(ExtractionError, match="page limit of 1"):
        read(server, table_id)


@pytest.mark.parametrize("page_size", [2, 3, 7])
def test_tiny_pages_under_deletes(server_factory: ServerFactory, page_size: int) -> None:
    """(Not inserts: a row added per page read of one or two new rows never ends.)"""
    server = server_factory(max_page_size=page_size, delete_on_read=1, seed=page_size)
    table_id, ids = seeded(server, 150)
    emitted, _ = read(server, table_id, page_size=page_size, concurrency=3)
    left = stored_ids(server, table_id)
    assert set(ids) - left, "rows were deleted during the read"
    assert len(emitted) == len(set(emitted))
    assert set(ids) & left <= set(emitted)


def test_any_mix_of_page_size_concurrency_deletes_inserts_and_filters(server_factory: ServerFactory) -> None:
    """Drawn configurations (seeded) on one server: each read emits no id twice and misses
    no matching row that existed throughout."""
    server = server_factory(fault_control=True)
    spec = {"name": "Mix", "columns": [{"name": "Name", "type": "text", "required": True},
                                       {"name": "S", "type": "choice", "options": ["a", "b"]}]}
    for case in range(6):
        rng = random.Random(case)
        page_size = rng.choice([3, 10, 50, 100])
        config = {
            "delete_on_read": rng.choice([1, 2, 5, 10]),
            "insert_on_read": rng.choice([0, 1, page_size // 4 - 1]) if page_size > 4 else 0,
            "refuse_system_filters": rng.random() < 0.5,
            "max_page_size": page_size,
            "seed": case,
        }
        filter = rng.choice([{}, {"S": {"eq": "a"}}])
        table_id = server.create_table({**spec, "name": f"Mix {case}"})
        ids = [r["id"] for r in server.insert_rows(table_id, [{"Name": str(i), "S": "ab"[i % 3 == 0]}
                                                              for i in range(600)])]
        server.set_faults(**config)
        emitted, _ = read(server, table_id, page_size=page_size, concurrency=rng.choice([1, 4, 8]),
                          filter=filter)
        server.set_faults(delete_on_read=0, insert_on_read=0)
        with contextlib.closing(Storage(str(server.db_path))) as storage:
            left = dict(storage._db.execute(
                "SELECT id, json_extract(fields, '$.S') FROM rows WHERE table_id = ?", (table_id,)))
        matching = {i for i, s in left.items() if not filter or s == "a"}
        assert set(ids) - set(left), (case, config, "the fault must have deleted rows")
        assert len(emitted) == len(set(emitted)), (case, config)
        assert (set(ids) & matching) - set(emitted) == set(), (case, config)


# -- pages a server cuts short by size: each page's own applied limit steps the read --------


def sized_rows(server: RunningServer, sizes: list[int]) -> tuple[str, list[str]]:
    """A table whose i-th row's Name holds `sizes[i]` characters (seeded past the cell bound)."""
    table_id = server.create_table(SPEC)
    rows = server.insert_rows(table_id, [{"Name": f"{i:05}" + "x" * size} for i, size in enumerate(sizes)])
    return table_id, [r["id"] for r in rows]


def varied_sizes(rows: int, big: int, seed: int) -> list[int]:
    """Mostly small rows, with runs of `big` rows here and there (each run a few pages' worth)."""
    rng = random.Random(seed)
    sizes = [rng.randrange(10, 60) for _ in range(rows)]
    for start in rng.sample(range(rows - 40), rows // 200):
        for i in range(start, start + rng.randrange(3, 40)):
            sizes[i] = big + rng.randrange(0, big // 2)
    return sizes


@pytest.mark.parametrize("concurrency", [1, 4])
def test_pages_cut_short_by_size_step_by_their_own_limit(server_factory: ServerFactory, concurrency: int) -> None:
    """Runs of ~10 kB rows make the server cut pages to 2-5 rows (reported in `limit`) between
    full pages: every row once, in order, without repairs; each clamped page costs at most the
    page itself and one hole."""
    server = server_factory(max_response_bytes=50_000)
    table_id, ids = sized_rows(server, varied_sizes(3000, 10_000, seed=concurrency))
    recorder = Recorder()
    emitted, reader = read(server, table_id, transport=recorder, page_size=100, concurrency=concurrency)
    assert emitted == ids
    assert reader.resumes == 0
    offsets = [r["offset"] for r in recorder.requests]
    assert len(offsets) == len(set(offsets)), "no page is read twice"
    if concurrency == 1:
        # Stepping by each page's applied limit: a request per page, no hole, no waste.
        assert offsets == sorted(offsets)


def test_a_window_searched_back_and_cut_short_leaves_no_rows_unseen_above_it(
    server_factory: ServerFactory,
) -> None:
    """A repair steps back a window's worth (99 rows); where the window there is cut to 4 rows
    by size, the rows between it and the window above are read before going on back: the row
    emitted lately among them is found there, and the read neither resumes by key nor starts
    over (it read back to the table's start, then resumed by key)."""
    server = server_factory(max_response_bytes=200_000)
    table_id, ids = seeded(server, 1000)
    delete = deleter(server, table_id)
    kept = ids[298:303]  # the oldest rows emitted lately, after pages of 100 up to ids[594]

    def after_page(n: int, page: list[str]) -> None:
        if n != 6:
            return
        # All the rows emitted lately but `kept` vanish: the next page holds none of them, and
        # so do the repair's windows stepping back from where the read was, until the one at
        # offset 249, which rows of 40 kB now cut to 4.
        delete(ids[303:595])
        with server.client() as http:
            for row_id in ids[249:259]:
                answer = http.patch(f"/tables/{table_id}/rows/{row_id}", json={"fields": {"Name": "x" * 40_000}})
                assert answer.status_code == 200, answer.text

    recorder = Recorder(after_page)
    emitted, reader = read(server, table_id, transport=recorder, page_size=100)
    assert stored_ids(server, table_id) == set(ids) - set(ids[303:595]), "the deletes landed"
    assert set(kept) <= set(emitted) and len(emitted) == len(set(emitted))
    assert set(ids) - set(ids[303:595]) <= set(emitted)
    offsets = [r["offset"] for r in recorder.requests]
    assert all(not r["filter"] for r in recorder.requests), f"the read resumed by key: {offsets}"
    assert offsets.count(0) == 1, f"the read started over: {offsets}"
    assert reader.resumes == 1


def test_the_first_page_cut_to_two_rows_does_not_set_the_pace(server_factory: ServerFactory) -> None:
    """A huge first row: the first page holds 2 rows (limit 2); the pages after it are full
    again, and the read goes on by their limit, not by 2."""
    server = server_factory(max_response_bytes=50_000)
    table_id, ids = sized_rows(server, [200_000] + [20] * 999)
    recorder = Recorder()
    emitted, reader = read(server, table_id, transport=recorder, page_size=100, concurrency=4)
    assert emitted == ids and reader.resumes == 0
    # 1 cut page, 3 pages fetched ahead at its pace, then full pages: about 1000 / 99 + 4.
    assert len(recorder.requests) <= 1000 // 99 + 5, [r["offset"] for r in recorder.requests]


@pytest.mark.parametrize("page_size", [1, 2])
def test_a_huge_first_row_with_the_smallest_pages(server_factory: ServerFactory, page_size: int) -> None:
    """Asked for one row a page, the reader asks for two (one row cannot overlap the next page):
    a page cut to the huge row and the next still moves the read on."""
    server = server_factory(max_response_bytes=50_000)
    table_id, ids = sized_rows(server, [200_000, 30_000, 20, 20, 200_000, 20, 20])
    emitted, reader = read(server, table_id, page_size=page_size, concurrency=2)
    assert emitted == ids and reader.resumes == 0


def test_a_server_whose_pages_get_shorter_and_longer_mid_read() -> None:
    """Any server may cut any page (the API's `limit` is the one applied): a mock answering
    pages of 2 to 50 rows, shorter than the one before while far from the end, is read whole,
    in order, at concurrency 1 and 4, and a page cut to one row is refused, not looped on."""
    rows = [{"id": f"row_{i:04}", "created_at": f"2024-01-01T00:00:00.{i:06}Z",
             "updated_at": "2024-01-01T00:00:00Z", "fields": {"Name": str(i)}} for i in range(700)]

    def handler_for(cut: Callable[[int], int]) -> Callable[[httpx.Request], httpx.Response]:
        def handler(request: httpx.Request) -> httpx.Response:
            if not request.url.path.endswith("/rows"):
                return httpx.Response(200, json={"id": "tbl_1", "name": "T", "columns": SPEC["columns"]})
            limit, offset = int(request.url.params["limit"]), int(request.url.params["offset"])
            applied = min(limit, cut(offset))
            page = rows[offset:offset + applied]
            return httpx.Response(200, json={"rows": page, "total": len(rows), "limit": applied, "offset": offset})
        return handler

    def read_mock(cut: Callable[[int], int], concurrency: int) -> list[str]:
        emitted: list[str] = []

        async def main() -> None:
            transport = httpx.MockTransport(handler_for(cut))
            async with AsyncClient("http://api.test/v1", "k", transport=transport) as client:
                table = await client.get_table("tbl_1")

                async def emit(cells: paging.Cells) -> None:
                    emitted.extend(cells[0])

                await PageReader(client, table, fields=["Name"], filter={}, page_size=50,
                                 concurrency=concurrency, emit=emit).read()

        asyncio.run(main())
        return emitted

    def cut(offset: int) -> int:
        return 2 + (offset * 7919) % 49  # 2..50, changing from page to page

    for concurrency in (1, 4):
        assert read_mock(cut, concurrency) == [r["id"] for r in rows], concurrency
    with pytest.raises(ExtractionError, match="page limit of 1"):
        read_mock(lambda offset: 1 if offset > 300 else 50, 4)
