"""Reading while others write: no duplicate ids, and no row that existed throughout is missing.

A writer deletes, creates and updates rows over HTTP for as long as the read runs. Offset
paging alone would skip rows here (a delete before the read position shifts later rows into
pages already read); the extraction must notice at a page edge and repair the shift.

The reads carry a filter that matches every row: our server keeps its offsets exact across
writes for unfiltered reads in creation order (so those may never shift at all, which is
also fine), and these tests want the shifts to happen.

Further down the server changes the table itself before every page it serves (the read
faults `delete_on_read`, `insert_on_read`), at server page sizes 50, 100 and 1000, with and
without filters on system fields: every page edge is then disturbed, however fast the read.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from connector.api import Client, RateLimiter
from connector.extract import Extraction
from connector.server.storage import Storage
from tests.fixtures.server import RunningServer, ServerFactory

ROWS = 3000
#: Matches every row (names are never empty), and makes the server page by plain offsets.
EVERY_ROW = {"Name": {"gt": ""}}


class Writer(threading.Thread):
    """Deletes random rows of the first part of the table, adds rows and edits others."""

    def __init__(self, server: RunningServer, table_id: str, doomed: list[str], edited: list[str],
                 new_row: Callable[[random.Random], dict[str, Any]] = lambda _: {"Name": "new"}) -> None:
        super().__init__(daemon=True)
        self.new_row = new_row
        self.http = server.client()
        self.table_id = table_id
        self.doomed = doomed
        self.edited = edited
        self.deleted: list[str] = []
        self.created: list[str] = []
        self.halt = threading.Event()
        self.rng = random.Random(7)

    def run(self) -> None:
        rows = f"/tables/{self.table_id}/rows"
        while not self.halt.is_set() and self.doomed:
            victim = self.doomed.pop(self.rng.randrange(len(self.doomed)))
            assert self.http.delete(f"{rows}/{victim}").status_code == 204
            self.deleted.append(victim)
            made = self.http.post(rows, json={"fields": self.new_row(self.rng)})
            self.created.append(made.json()["id"])
            edit = self.rng.choice(self.edited)
            self.http.patch(f"{rows}/{edit}", json={"fields": {"Name": "edited"}})
            self.halt.wait(0.03)

    def stop(self) -> None:
        self.halt.set()
        self.join()
        self.http.close()


def read_while_writing(
    server: RunningServer,
    spec: dict[str, Any],
    filter: Any = EVERY_ROW,
    seed: Callable[[int], dict[str, Any]] = lambda i: {"Name": str(i)},
    new_row: Callable[[random.Random], dict[str, Any]] = lambda _: {"Name": "new"},
    **options: Any,
) -> tuple[list[str], set[str], Writer, int]:
    table_id = server.create_table(spec)
    ids = [r["id"] for r in server.insert_rows(table_id, [seed(i) for i in range(ROWS)])]
    # Deletes land in the first 80% of the table, so they shift pages still to be read.
    doomed, edited = ids[: ROWS * 4 // 5 : 3], ids[1::3]
    writer = Writer(server, table_id, list(doomed), edited, new_row)
    with Client(server.base_url, server.api_key) as client:
        table = client.get_table(table_id)
        writer.start()
        try:
            extraction = Extraction(client, table, filter=filter, **options)
            read = [i for batch in extraction for i in batch.column("_id").to_pylist()]
        finally:
            writer.stop()
    existed_throughout = set(ids) - set(writer.deleted)
    return read, existed_throughout, writer, extraction.resumes


@pytest.fixture
def slow_server(server_factory: ServerFactory) -> RunningServer:
    return server_factory(latency_ms=15)


def test_resuming_by_key_loses_and_repeats_nothing(slow_server: RunningServer) -> None:
    spec = {"name": "Busy", "columns": [{"name": "Name", "type": "text"}]}
    read, existed_throughout, writer, resumes = read_while_writing(
        slow_server, spec, page_size=20, concurrency=4
    )
    assert writer.deleted, "the writer must have run during the read"
    assert resumes > 0, "deletes during the read must have shifted a page edge"
    duplicates = [i for i, n in Counter(read).items() if n > 1]
    assert duplicates == []
    assert existed_throughout - set(read) == set()
    assert set(read) <= existed_throughout | set(writer.deleted) | set(writer.created)


def test_an_unfiltered_read_loses_and_repeats_nothing(slow_server: RunningServer) -> None:
    spec = {"name": "Busy", "columns": [{"name": "Name", "type": "text"}]}
    read, existed_throughout, writer, _ = read_while_writing(
        slow_server, spec, filter=None, page_size=20, concurrency=4
    )
    assert writer.deleted
    assert [i for i, n in Counter(read).items() if n > 1] == []
    assert existed_throughout - set(read) == set()


def test_a_shadowed_created_at_is_read_by_id(slow_server: RunningServer) -> None:
    """A user column called `created_at`: the read sorts and resumes by the system `id`."""
    spec = {"name": "Shadowed", "columns": [{"name": "Name", "type": "text"},
                                            {"name": "created_at", "type": "text"}]}
    read, existed_throughout, writer, resumes = read_while_writing(
        slow_server, spec, page_size=20, concurrency=4
    )
    assert writer.deleted and resumes > 0
    assert [i for i, n in Counter(read).items() if n > 1] == []
    assert existed_throughout - set(read) == set()


def test_without_writers_nothing_is_resumed(server: RunningServer) -> None:
    table_id = server.create_table({"name": "Calm", "columns": [{"name": "Name", "type": "text"}]})
    server.insert_rows(table_id, [{"Name": str(i)} for i in range(500)])
    with Client(server.base_url, server.api_key) as client:
        extraction = Extraction(client, client.get_table(table_id), page_size=20)
        assert sum(b.num_rows for b in extraction) == 500
    assert extraction.resumes == 0


def test_a_server_refusing_key_filters_is_resumed_by_offset(server: RunningServer) -> None:
    """DESIGN.md: filters on created_at/id are used where they work, with a fallback where refused."""
    table_id = server.create_table({"name": "T", "columns": [{"name": "Name", "type": "text"}]})
    ids = [r["id"] for r in server.insert_rows(table_id, [{"Name": str(i)} for i in range(400)])]
    http = server.client()
    upstream = httpx.HTTPTransport()
    deleted: list[str] = []
    pages_served = 0

    class RefusingKeyFilters(httpx.AsyncBaseTransport, httpx.BaseTransport):
        """Our server, except that it refuses key filters and a delete lands after page 2."""

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            nonlocal pages_served
            if '"created_at"' in request.url.params.get("filter", ""):
                return httpx.Response(400, json={"error": {"code": "VALIDATION_ERROR", "field": "created_at",
                                                            "message": "cannot filter on created_at"}})
            answer = upstream.handle_request(request)
            response = httpx.Response(answer.status_code, headers=answer.headers, content=answer.read())
            if request.url.path.endswith("/rows"):
                pages_served += 1
                if pages_served == 2:
                    for victim in ids[5:15]:
                        assert http.delete(f"/tables/{table_id}/rows/{victim}").status_code == 204
                        deleted.append(victim)
            return response

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return self.handle_request(request)

    transport = RefusingKeyFilters()
    with Client(server.base_url, server.api_key, transport=transport) as client:
        extraction = Extraction(
            client, client.get_table(table_id), filter=EVERY_ROW, page_size=50, concurrency=1
        )
        read = [i for b in extraction for i in b.column("_id").to_pylist()]
    http.close()
    assert deleted and extraction.resumes > 0, (pages_served, len(read))
    assert len(read) == len(set(read))
    assert set(ids) - set(deleted) - set(read) == set()


SHADOWING = {"name": "Shadowing", "columns": [{"name": "Name", "type": "text"},
                                              {"name": "created_at", "type": "text"},
                                              {"name": "id", "type": "text"}]}
ALL_SHADOWED = {"name": "All shadowed", "columns": [*SHADOWING["columns"], {"name": "updated_at", "type": "text"}]}


def shadowing_row(i: int) -> dict[str, Any]:
    """User `created_at`/`id` values that run against the system order (newest first)."""
    return {"Name": str(i), "created_at": f"{ROWS - i:06}", "id": f"U{ROWS - i:06}"}


@pytest.mark.parametrize("spec", [SHADOWING, ALL_SHADOWED], ids=["created_at+id", "all three"])
def test_user_columns_named_like_system_fields_lose_and_repeat_nothing(
    slow_server: RunningServer, spec: dict[str, Any]
) -> None:
    """System names shadowed: our server sorts and filters `created_at` by the user's column,
    where new rows land anywhere (read by `updated_at` instead; with all three shadowed, in the
    server's default order). The read must still emit each id once and miss no old row."""
    read, existed_throughout, writer, resumes = read_while_writing(
        slow_server, spec, seed=shadowing_row,
        new_row=lambda rng: {"Name": "new", "created_at": f"{rng.randrange(ROWS):06}.5"},
        page_size=20, concurrency=4,
    )
    assert writer.deleted and writer.created and resumes > 0
    assert [i for i, n in Counter(read).items() if n > 1] == []
    assert existed_throughout - set(read) == set()
    assert set(read) <= existed_throughout | set(writer.deleted) | set(writer.created)


def test_a_server_that_ignores_the_sort_is_read_without_duplicates() -> None:
    """A page out of the order asked means the sort is not honoured: no duplicate, none lost."""
    ids = [f"row_{i:04}" for i in range(300)]
    order = ids[::-1]  # the server's own order, whatever `sort` says
    served = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal served
        if not request.url.path.endswith("/rows"):
            return httpx.Response(200, json={"id": "tbl_1", "name": "T", "columns": [{"name": "N", "type": "number"}]})
        limit, offset = int(request.url.params["limit"]), int(request.url.params["offset"])
        served += 1
        if served == 3:
            del order[10:20]  # rows deleted during the read shift the pages after them
        page = [{"id": i, "fields": {"N": int(i[4:])}, "created_at": f"2024-01-01T00:00:{int(i[4:]) % 60:02}Z",
                 "updated_at": "2024-01-01T00:00:00Z"} for i in order[offset:offset + limit]]
        return httpx.Response(200, json={"rows": page, "total": len(order), "limit": limit, "offset": offset})

    with Client("http://api.test/v1", "k", transport=httpx.MockTransport(handler), limiter=RateLimiter()) as client:
        read = [i for b in Extraction(client, client.get_table("tbl_1"), page_size=50, concurrency=2)
                for i in b.column("_id").to_pylist()]
    assert len(read) == len(set(read))
    assert set(order) - set(read) == set()


# -- the server's own read faults: rows deleted before the offset and rows added per page read --


def stored_ids(server: RunningServer, table_id: str) -> set[str]:
    """The table's ids now, read from the server's database, not through the API."""
    with contextlib.closing(Storage(str(server.db_path))) as storage:
        return {r[0] for r in storage._db.execute("SELECT id FROM rows WHERE table_id = ?", (table_id,))}


def busy_read(server: RunningServer, rows: int, **options: Any) -> tuple[list[str], set[str], set[str], int]:
    """Reads a table of `rows` rows through `Extraction` while the server's faults change it:
    the ids read, the ids before and after the read, and the reader's repairs.

    The server must run with `fault_control`: requests the reader sent and no longer waits
    for still land after the read, so the faults are switched off before counting "after"
    (a request handled before that has made its change; one handled after makes none)."""
    table_id = server.create_table({"name": "Busy", "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Active", "Inactive"]}]})
    server.insert_rows(table_id, [{"Name": str(i), "Status": ("Active", "Inactive")[i % 2]} for i in range(rows)])
    before = stored_ids(server, table_id)
    with Client(server.base_url, server.api_key) as client:
        extraction = Extraction(client, client.get_table(table_id), **options)
        read = [i for batch in extraction for i in batch.column("_id").to_pylist()]
    server.set_faults(delete_on_read=0, insert_on_read=0)
    return read, before, stored_ids(server, table_id), extraction.resumes


@pytest.mark.parametrize("refuse", [False, True], ids=["key-filters", "no-key-filters"])
@pytest.mark.parametrize(
    ("server_page", "page_size"), [(50, 50), (50, 1000), (100, 100), (1000, 1000)],
    ids=["50", "50-of-1000-asked", "100", "1000"],
)
def test_concurrent_deletes_and_inserts_lose_and_repeat_nothing(
    server_factory: ServerFactory, server_page: int, page_size: int, refuse: bool
) -> None:
    """Before each page the server deletes two rows the reader has passed and adds one: every
    row that existed throughout is read once, none twice; then a quiet read reads the table."""
    server = server_factory(max_page_size=server_page, refuse_system_filters=refuse,
                            delete_on_read=2, insert_on_read=1, seed=server_page, fault_control=True)
    rows = 3000
    read, before, after, resumes = busy_read(server, rows, page_size=page_size, concurrency=4)
    assert before - after and after - before, "the faults deleted and inserted rows during the read"
    assert [i for i, n in Counter(read).items() if n > 1] == []
    assert (before & after) - set(read) == set()
    assert resumes > 0, "the deletes shifted page edges"

    with Client(server.base_url, server.api_key) as client:
        table = client.get_table(next(t.id for t in client.list_tables()))
        quiet = Extraction(client, table, page_size=page_size)
        assert sorted(i for b in quiet for i in b.column("_id").to_pylist()) == sorted(after)
    assert quiet.resumes == 0


def test_an_export_finishes_on_a_busy_table_where_key_filters_are_refused(server_factory: ServerFactory) -> None:
    """The issue's case: a server refusing filters on system fields, one row deleted per page
    read. It used to end in 'changed faster than it could be read'; each shift is now repaired
    where it happened, so the repairs stay few."""
    server = server_factory(refuse_system_filters=True, delete_on_read=1, seed=8, fault_control=True)
    read, before, after, resumes = busy_read(server, 4000, page_size=100, concurrency=4)
    assert len(before) - len(after) >= 40, "a row was deleted for each page read"
    assert len(read) == len(set(read)) and after <= set(read)
    assert 0 < resumes < 4000 // 100


@pytest.mark.parametrize("refuse", [False, True], ids=["key-filters", "no-key-filters"])
def test_a_filtered_read_under_concurrent_deletes_and_inserts(server_factory: ServerFactory, refuse: bool) -> None:
    """The faults delete rows the filtered read has passed (in its filter) and add copies of
    any row: every matching row that existed throughout is read once, and nothing else."""
    server = server_factory(max_page_size=50, refuse_system_filters=refuse, delete_on_read=2,
                            insert_on_read=2, seed=5, fault_control=True)
    read, before, after, resumes = busy_read(server, 2000, page_size=50, filter={"Status": {"eq": "Active"}})
    with contextlib.closing(Storage(str(server.db_path))) as storage:
        active = {r[0] for r in storage._db.execute(
            "SELECT id FROM rows WHERE json_extract(fields, '$.Status') = 'Active'")}
    assert before - after and after - before, "the faults deleted and inserted rows during the read"
    assert resumes > 0
    assert len(read) == len(set(read))
    assert (before & after & active) - set(read) == set()
    assert set(read) & after <= active, "only matching rows are read"


@pytest.mark.parametrize("spec", [SHADOWING, ALL_SHADOWED], ids=["created_at+id", "all three"])
def test_shadowed_system_names_under_read_faults(server_factory: ServerFactory, spec: dict[str, Any]) -> None:
    """Read by `updated_at`, or in the server's default order (here by the user's `created_at`,
    where the copies the server inserts land in the middle): once each, none missing."""
    server = server_factory(max_page_size=50, refuse_system_filters=True, delete_on_read=2,
                            insert_on_read=1, seed=3, fault_control=True)
    table_id = server.create_table(spec)
    server.insert_rows(table_id, [shadowing_row(i) for i in range(2000)])
    before = stored_ids(server, table_id)
    with Client(server.base_url, server.api_key) as client:
        extraction = Extraction(client, client.get_table(table_id), page_size=50)
        read = [i for b in extraction for i in b.column("_id").to_pylist()]
    server.set_faults(delete_on_read=0, insert_on_read=0)
    after = stored_ids(server, table_id)
    assert before - after and after - before and extraction.resumes > 0
    assert len(read) == len(set(read))
    assert (before & after) - set(read) == set()


# -- pages the server cuts short by size (--max-response-bytes): each reports its own limit --

#: Room for 1000 small rows a page; a run of big rows is cut to 3-5 rows a page.
CUT_BYTES = 200_000
BIG = 40_000


def sized_table(server: RunningServer, rows: int, seed: int, big: int = BIG) -> tuple[str, list[str]]:
    """Mostly small rows, with runs of 3-40 big ones here and there: pages cut to a few rows
    between full pages. Seeded past the server's cell bound."""
    rng = random.Random(seed)
    sizes = [rng.randrange(5, 40) for _ in range(rows)]
    for start in rng.sample(range(rows - 40), rows // 200):
        run = rng.randrange(3, 40)
        sizes[start : start + run] = [big + rng.randrange(big // 4) for _ in range(run)]
    table_id = server.create_table({"name": "Sized", "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Active", "Inactive"]}]})
    made = server.insert_rows(table_id, [{"Name": f"{i:05}" + "x" * size, "Status": ("Active", "Inactive")[i % 2]}
                                         for i, size in enumerate(sizes)])
    big_at = next(i for i, size in enumerate(sizes) if size >= big)
    with server.client() as http:
        page = http.get(f"/tables/{table_id}/rows", params={"limit": 1000, "offset": big_at}).json()
    assert 2 <= page["limit"] <= 5, "a run of big rows is served a few rows a page"
    return table_id, [r["id"] for r in made]


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("page_size", [100, 1000])
def test_pages_cut_by_size_are_read_whole_and_in_order(
    server_factory: ServerFactory, page_size: int, concurrency: int
) -> None:
    server = server_factory(max_response_bytes=CUT_BYTES)
    table_id, ids = sized_table(server, 2000, seed=page_size + concurrency)
    with Client(server.base_url, server.api_key) as client:
        extraction = Extraction(client, client.get_table(table_id), page_size=page_size,
                                  concurrency=concurrency)
        read = [i for b in extraction for i in b.column("_id").to_pylist()]
    assert read == ids
    assert extraction.resumes == 0


@pytest.mark.parametrize("refuse", [False, True], ids=["key-filters", "no-key-filters"])
@pytest.mark.parametrize("page_size", [100, 1000])
def test_pages_cut_by_size_under_read_faults(server_factory: ServerFactory, page_size: int, refuse: bool) -> None:
    """The server deletes two rows the reader has passed and adds one before each page, and
    cuts pages by size: once each, none missing of the rows that existed throughout."""
    server = server_factory(max_response_bytes=CUT_BYTES, refuse_system_filters=refuse, fault_control=True)
    table_id, _ = sized_table(server, 2000, seed=page_size + refuse)
    before = stored_ids(server, table_id)
    server.set_faults(delete_on_read=2, insert_on_read=1, seed=page_size)
    with Client(server.base_url, server.api_key) as client:
        extraction = Extraction(client, client.get_table(table_id), page_size=page_size, concurrency=4)
        read = [i for b in extraction for i in b.column("_id").to_pylist()]
    server.set_faults(delete_on_read=0, insert_on_read=0)
    after = stored_ids(server, table_id)
    assert before - after and after - before, "the faults deleted and inserted rows during the read"
    assert [i for i, n in Counter(read).items() if n > 1] == []
    assert (before & after) - set(read) == set()


def test_a_huge_first_row_is_read_through_Extraction(server_factory: ServerFactory) -> None:
    """The first page is cut to 2 rows (limit 2): the read does not refuse it, nor crawl."""
    server = server_factory(max_response_bytes=50_000)
    table_id = server.create_table({"name": "Huge", "columns": [{"name": "Name", "type": "text"}]})
    ids = [r["id"] for r in server.insert_rows(table_id, [{"Name": "x" * 300_000}] +
                                               [{"Name": str(i)} for i in range(1500)])]
    for page_size in (2, 100, 1000):
        with Client(server.base_url, server.api_key) as client:
            extraction = Extraction(client, client.get_table(table_id), page_size=page_size, concurrency=4)
            read = [i for b in extraction for i in b.column("_id").to_pylist()]
        assert read == ids, page_size


def test_the_export_of_a_table_of_10_kb_rows_under_a_50_kb_response_bound(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """The colleague's reproduction, as a process: `connector export` failed with "table 'Big'
    changed faster than it could be read"; it now exits 0 with every row in the file."""
    server = server_factory(max_response_bytes=50_000)
    table_id = server.create_table({"name": "Big", "columns": [{"name": "Name", "type": "text"}]})
    ids = [r["id"] for r in server.insert_rows(table_id, [{"Name": f"{i:04}" + "y" * 10_000} for i in range(400)])]
    done = subprocess.run(
        [sys.executable, "-m", "connector", "export", "--out", str(tmp_path), "--table", "Big",
         "--base-url", server.base_url],
        env={**os.environ, "CONNECTOR_API_KEY": server.api_key}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    table = pq.read_table(tmp_path / "Big.parquet")
    assert table.column("_id").to_pylist() == ids
    assert table.column("Name").to_pylist()[-1] == "0399" + "y" * 10_000
