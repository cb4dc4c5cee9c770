"""Throughput with no settings: `connector export` / `connector push` as whole processes
against the fastest bare httpx loop a user could write, each a whole process too.

The issue's goals, every ratio from this one run:

1. Export (defaults) vs the fastest of bare loops at page 100 with 4, 8 and 16 requests in
   flight, server ``--latency-ms 20`` and ``100``: >= 0.9x each.
2. Server ``--rate-limit 50``: pace >= 0.9 of the limit and < 1% of requests answered 429,
   export, a full sync and a push (one PATCH an update) alike, a first run (nothing
   remembered) and later ones; an export from a server publishing its limit, in each header
   form (``--rate-headers``): pace >= 0.97; an export after the limit was lifted: >= 0.8x of
   one remembering nothing (`rate_limited`, `lifted`).
3. No added latency, 1,000,000 rows: >= 0.9x the bare loop at the concurrency our export
   reports it reached.
4. 200 tables of 50 rows, 20 ms: export (every table) >= 0.8x the bare loop reading them all
   concurrently, each table's schema fetched with its first page (the fastest of 4, 8, 16 and
   all 200 in flight).
5. Push: 5,000 updates at 20 ms >= 0.9x the fastest bare loop of PATCHes (4/8/16).
7. Push --mode insert of a 300,000-row CSV into an empty table >= 0.9x the fastest bare loop
   of 100-row bulk creates (8/16 in flight, its rows typed in memory before its clock starts).
6. Peak RSS of the 1,000,000-row export (a free-text column of ~85 characters; the issue: ~80):
   <= 150 MB.

The table is the issue's: 5 columns including a free-text one, seeded through the server's
storage layer. Ours: the installed `connector` script with CONNECTOR_BASE_URL and
CONNECTOR_API_KEY and no other setting (`--json` only to read the level it reached and the
run's own seconds: wall time less that is start-up and exit). The bare loops: `python -c`
scripts that import httpx, page through (offset/limit, sorted, as our export reads) with N
requests in flight and parse every page with orjson, nothing else. The server counts its
answers (`bench._procs.CountingServer`), so requests and 429s are reported per contender.
Each comparison: a warm-up of each contender, then 3 rounds (2 quick) in alternating order; best
against best (and median against median) is the ratio.

``BENCH_QUICK=1`` (or ``python -m bench.bench_throughput --quick``) runs everything at a
tenth of the size for a smoke run; ``BENCH_ROWS=N`` sets the main table's rows (the big
table is 10x that); ``BENCH_CASES=rate,push`` runs only those of `CASES`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from bench._procs import (
    CONNECTOR,
    CountingServer,
    Figures,
    Timed,
    contest,
    run,
    start,
    user_env,
    verdict,
)
from connector.api.ratelimit import RateMemory
from connector.server.storage import Storage

SPEC: dict[str, Any] = {
    "name": "Bench",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Note", "type": "text"},
        {"name": "Amount", "type": "number"},
        {"name": "Due", "type": "date"},
        {"name": "Paid", "type": "checkbox"},
    ],
}
PAGE = 100
BARE_LEVELS = (4, 8, 16)
GOAL_VS_BARE = 0.9
GOAL_VS_LIMIT = 0.9
GOAL_429_SHARE = 0.01
GOAL_PUBLISHED = 0.97
GOAL_LIFTED = 0.8
#: The limit of the run before the lift, and the rows that run reads under it.
LIFTED_FROM = 5
LIFTED_ROWS = 4_000
GOAL_TABLES = 0.8
GOAL_RSS_MB = 150.0
RATE_LIMIT = 50
#: The cases, by the name BENCH_CASES selects them with: 1, 2, 4, 5, 7, and 3 with 6.
CASES = ("latency", "rate", "tables", "push", "insert", "big")
TABLES = 200
TABLE_ROWS = 50
_WORDS = ("invoice", "late", "customer", "asked", "for", "a", "refund", "after", "the", "parcel",
          "arrived", "damaged", "and", "support", "promised", "call", "back", "on", "Monday")


@dataclass(frozen=True)
class Sizes:
    main: int  #: the 100,000-row table of the issue
    big: int  #: the 1,000,000-row table
    rate: int  #: rows read under the rate limit (a hundredth of that updated by push)
    updates: int  #: updates pushed
    inserts: int  #: rows of the sheet pushed into an empty table
    runs: int  #: rounds after the warm-up

    @classmethod
    def from_env(cls) -> Sizes:
        quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
        main = int(os.environ.get("BENCH_ROWS", 10_000 if quick else 100_000))
        return cls(main, main * 10, 10_000 if quick else 30_000, 1_000 if quick else 5_000,
                   30_000 if quick else 300_000, 2 if quick else 3)


def note(i: int) -> str:
    """Free text of about 85 characters (the issue: ~80), different from row to row."""
    words = [_WORDS[(i * 7 + k * 3) % len(_WORDS)] for k in range(13)]
    return f"#{i}: " + " ".join(words)


def seed(db: Path, rows: int, name: str) -> str:
    """A table of `rows` rows (a tenth of the optional cells empty); returns its id."""
    with contextlib.closing(Storage(str(db))) as storage:
        table = storage.create_table({**SPEC, "name": name})
        for begin in range(0, rows, 50_000):
            cells = []
            for i in range(begin, min(rows, begin + 50_000)):
                fields: dict[str, Any] = {"Name": f"customer {i}", "Note": note(i)}
                if i % 10:
                    fields |= {"Amount": i * 1.25, "Paid": i % 2 == 0,
                               "Due": f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}"}
                cells.append(table.check_create(fields, index=i))
            storage.insert_rows(table, cells)
        return table.id


# --- contenders ---------------------------------------------------------------------------

#: A bare read loop: argv base_url, table ids (comma-separated, or * for every table listed),
#: requests in flight, page size, and "schema" to fetch each table's schema too (at once
#: with its first page, as the connector needs one to type the rows); prints the rows read.
BARE_READ = """
import asyncio, os, sys
import httpx, orjson
base, ids, n, page = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
schemas = sys.argv[5:] == ["schema"]
async def main():
    gate = asyncio.Semaphore(n)
    headers = {"Authorization": "Bearer " + os.environ["CONNECTOR_API_KEY"]}
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=120) as http:
        async def get(tid, offset):
            async with gate:
                r = await http.get(f"/tables/{tid}/rows", params={
                    "limit": page, "offset": offset, "sort": "created_at", "order": "asc"})
                r.raise_for_status()
                return orjson.loads(r.content)
        async def schema(tid):
            async with gate:
                r = await http.get(f"/tables/{tid}")
                r.raise_for_status()
                return orjson.loads(r.content)
        async def table(tid):
            if schemas:
                first, _ = await asyncio.gather(get(tid, 0), schema(tid))
            else:
                first = await get(tid, 0)
            rest = await asyncio.gather(*(get(tid, o) for o in range(page, first["total"], page)))
            return len(first["rows"]) + sum(len(p["rows"]) for p in rest)
        if ids == "*":
            r = await http.get("/tables")
            r.raise_for_status()
            tables = [t["id"] for t in orjson.loads(r.content)["tables"]]
        else:
            tables = ids.split(",")
        print(sum(await asyncio.gather(*(table(t) for t in tables))))
asyncio.run(main())
"""

#: What the bare write loops share: argv base_url, table id, requests in flight, a JSON file
#: read before the loop (`data`); then `main` with a client of that many connections (`http`)
#: and a gate of as many requests in flight (`gate`). Each loop is this and its own body.
_BARE_WRITES = """
import asyncio, os, sys
import httpx, orjson
base, tid, n, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = orjson.loads(open(path, "rb").read())
async def main():
    gate = asyncio.Semaphore(n)
    headers = {"Authorization": "Bearer " + os.environ["CONNECTOR_API_KEY"],
               "Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=120) as http:
"""

#: A bare PATCH loop: the JSON file holds [[row id, fields], ...]; prints the rows updated.
BARE_PATCH = _BARE_WRITES + """
        async def patch(row_id, fields):
            async with gate:
                r = await http.patch(f"/tables/{tid}/rows/{row_id}", content=orjson.dumps({"fields": fields}))
                r.raise_for_status()
        await asyncio.gather(*(patch(i, f) for i, f in data))
    print(len(data))
asyncio.run(main())
"""


@dataclass
class Contender:
    """A whole process to time, checked to have done the whole job each run; keeps what the
    server answered it (by status) and the JSON summary of its last run, if it prints one.
    `prepare`, if given, runs before each timed run (outside the clock) and returns the argv."""

    argv: list[str]
    env: dict[str, str]
    server: CountingServer
    expect: int  #: rows read / written
    cwd: Path | None = None
    prepare: Callable[[], list[str]] | None = None
    counts: dict[str, int] | None = None
    summary: dict[str, Any] | None = None
    #: Answers by status over every run, the warm-up included.
    total: Counter[str] = field(default_factory=Counter)
    #: When the server first and last answered the last run (`CountingServer.span`).
    span: tuple[float, float] | None = None

    def __call__(self) -> Timed:
        if self.prepare is not None:
            self.argv = self.prepare()
        self.server.take_counts()
        timed = run(self.argv, self.env, self.cwd)
        self.span = self.server.span()
        self.counts = self.server.take_counts()
        self.total.update(self.counts)
        out = timed.stdout.strip()
        if out.startswith("{"):
            self.summary = json.loads(out)
            totals = self.summary["totals"]
            done = (totals["push_updated"] + totals["push_created"] if self.summary["pushes"]
                    else totals["rows_written"])
        else:
            done = int(out.splitlines()[-1])
        if done != self.expect:
            raise RuntimeError(f"{self.argv[:3]} did {done} rows, expected {self.expect}: {out[-500:]}")
        return timed

    @property
    def requests(self) -> int:
        return sum((self.counts or {}).values())


def export(server: CountingServer, out: Path, tables: list[str], rows: int) -> Contender:
    """`connector export --out DIR [--table T ...]` with defaults (and --json)."""
    argv = [CONNECTOR, "export", "--out", str(out), *(a for t in tables for a in ("--table", t)), "--json"]
    return Contender(argv, user_env(server), server, rows, cwd=out.parent)


def bare_read(server: CountingServer, ids: str, level: int, rows: int, *, schemas: bool = False) -> Contender:
    argv = [sys.executable, "-c", BARE_READ, server.base_url, ids, str(level), str(PAGE),
            *(["schema"] if schemas else [])]
    return Contender(argv, user_env(server), server, rows)


def _level(ours: Contender) -> str:
    """The level our run reached and its cap, from the JSON summary when it carries them."""
    summary = ours.summary or {}
    if "concurrency" not in summary:
        return "level not reported"
    return f"level reached {summary['concurrency']} (cap {summary.get('max_concurrency', '?')})"


def _own_seconds(ours: Contender, figures: Figures) -> str:
    """The run's own seconds (from its summary) against the process's wall time."""
    own = (ours.summary or {}).get("seconds")
    if own is None:
        return ""
    wall = figures.runs[-1].seconds
    return f"; last run {wall:.2f} s wall of which the run itself {own:.2f} s (start-up and exit {wall - own:.2f} s)"


def versus(label: str, ours: Contender, bares: dict[str, Contender], runs: int, goal: float) -> Figures:
    """Ours against the fastest of `bares`; prints both and the verdict; returns our runs."""
    figures = contest({"ours": ours, **bares}, runs)
    mine = figures.pop("ours")
    fastest = min(figures, key=lambda name: figures[name].best)
    ratio = figures[fastest].best / mine.best
    median = figures[fastest].median / mine.median
    print(f"{label}")
    print(f"  ours (connector, defaults): {mine.text()}, {ours.expect / mine.best:,.0f} rows/s, "
          f"{ours.requests} requests, peak RSS {mine.peak_mb:.0f} MB; {_level(ours)}{_own_seconds(ours, mine)}")
    for name, fig in figures.items():
        print(f"  bare {name}: {fig.text()}, {bares[name].expect / fig.best:,.0f} rows/s, "
              f"{bares[name].requests} requests{'  <- fastest' if name == fastest else ''}")
    print(f"  ratio ours/fastest bare (best vs best) {ratio:.2f}, median vs median {median:.2f}; "
          f"goal >= {goal} on the median -> {verdict(median, goal)}", flush=True)
    return mine


# --- the cases ------------------------------------------------------------------------------


def latency_cases(directory: Path, table: str, table_id: str, sizes: Sizes) -> None:
    for latency in (20, 100):
        server = start(directory, latency_ms=latency)
        try:
            bares = {f"{n} in flight": bare_read(server, table_id, n, sizes.main) for n in BARE_LEVELS}
            versus(f"1. export {sizes.main:,} rows, server --latency-ms {latency}",
                   export(server, directory / "out", [table], sizes.main), bares, sizes.runs, GOAL_VS_BARE)
        finally:
            server.stop()


def rate_limited(directory: Path, table: str, sizes: Sizes) -> None:
    """Case 2: export, sync (full) and push under the server's --rate-limit, each of about
    the same requests (pages of 100 rows; one PATCH an update), each run started right after
    another client of the key spent its bucket. A *first* run has nothing remembered (a
    fresh CONNECTOR_CACHE_DIR), a *remembered* run what the runs before it learned; then an
    export from a server publishing its limit in each header form; then an export after the
    limit was lifted (`lifted`).

    Per run: its **pace**, what the server accepted over what it would have accepted from the
    run's first answer to its last (its limit over that time, plus what its bucket saved
    since it was spent, at most a second's worth: start-up past a second is lost whatever a
    pacer does); its 429s; and, as before, the bound's wall time (limit x rows a request)
    over the process's. Medians of `sizes.runs` runs."""
    server = start(directory, rate_limit=RATE_LIMIT, rate_headers="none", fault_control=True)
    updates = sizes.rate // PAGE
    try:
        push_round = PushRound(server, directory, updates, changing=True)
        contenders = {
            "export": (export(server, directory / "out", [table], sizes.rate), PAGE),
            "sync, full": (sync_full(server, directory, table, sizes.rate), PAGE),
            "push": (push_round.ours(), 1),
        }
        print(f"2. server --rate-limit {RATE_LIMIT}: export and a full sync of {sizes.rate:,} rows "
              f"(bound {RATE_LIMIT * PAGE:,} rows/s), push of {updates:,} updates (bound {RATE_LIMIT} "
              f"updates/s); goals: pace >= {GOAL_VS_LIMIT}, 429s < {GOAL_429_SHARE:.0%}, first run and later")
        for name, (ours, per_request) in contenders.items():
            cache = directory / f"cache-{name}"
            ours.env["CONNECTOR_CACHE_DIR"] = str(cache)
            firsts = []
            for _ in range(sizes.runs):  # each with nothing remembered
                shutil.rmtree(cache, ignore_errors=True)
                firsts.append(_paced(ours, per_request))
            _report(f"{name}, first run", firsts, GOAL_VS_LIMIT)
            _report(f"{name}, remembered", [_paced(ours, per_request) for _ in range(sizes.runs)], GOAL_VS_LIMIT)
        ours, _ = contenders["export"]
        for form in ("ietf", "draft", "x"):
            server.set_faults(rate_headers=form)
            runs = []
            for _ in range(sizes.runs):
                shutil.rmtree(directory / "cache-export", ignore_errors=True)
                runs.append(_paced(ours, PAGE))
            _report(f"export, limit published as --rate-headers {form}, first run", runs, GOAL_PUBLISHED)
        server.set_faults(rate_headers="none")
    finally:
        server.stop()
    lifted(server, directory, table, sizes)


@dataclass(frozen=True)
class Paced:
    """One run under the limit (see `rate_limited`)."""

    pace: float
    wall_ratio: float
    refused: int
    sent: int


def _paced(ours: Contender, per_request: int) -> Paced:
    """Spend the key's bucket from another client, then run `ours` at once."""
    with ours.server.client() as http:
        while http.get("/tables").status_code != 429:
            pass
    spent = time.monotonic()
    timed = ours()
    counts, span = ours.counts or {}, ours.span
    refused, sent = counts.get("429", 0), sum(counts.values())
    assert span is not None, "the run sent nothing"
    first, last = span
    allowed = min(RATE_LIMIT * 1.0, RATE_LIMIT * (first - spent)) + RATE_LIMIT * (last - first)
    return Paced((sent - refused) / allowed, ours.expect / timed.seconds / (RATE_LIMIT * per_request),
                 refused, sent)


def _report(label: str, runs: list[Paced], goal: float) -> None:
    pace = statistics.median(r.pace for r in runs)
    refused, sent = sum(r.refused for r in runs), sum(r.sent for r in runs)
    worst = max(r.refused / r.sent for r in runs)
    print(f"  {label}: pace {pace:.3f} (median; runs {', '.join(f'{r.pace:.3f}' for r in runs)}; goal >= {goal}) -> "
          f"{verdict(pace, goal)}; 429s {', '.join(str(r.refused) for r in runs)} of ~{sent // len(runs)} a run "
          f"({refused / sent:.2%}; worst run {worst:.2%}; goal < {GOAL_429_SHARE:.0%}) -> "
          f"{verdict(worst, GOAL_429_SHARE - 1e-9, at_most=True)}; wall: bound / process "
          f"{statistics.median(r.wall_ratio for r in runs):.2f}", flush=True)


def lifted(server: CountingServer, directory: Path, table: str, sizes: Sizes) -> None:
    """After a limit is lifted: an export that remembers `LIFTED_FROM` requests a second (learned
    by an export of `LIFTED_ROWS` rows under it), from the same URL and key now unlimited,
    against the same export remembering nothing; alternating, medians of `sizes.runs`."""
    cache = directory / "cache-lifted"
    shutil.rmtree(cache, ignore_errors=True)
    server.options = {"rate_limit": LIFTED_FROM, "rate_headers": "none"}
    server.restart()
    try:
        learning = export(server, directory / "out", ["lifted"], LIFTED_ROWS)
        learning.env["CONNECTOR_CACHE_DIR"] = str(cache)
        learning()
    finally:
        server.stop()
    learned = json.loads((cache / RateMemory.FILE).read_text(encoding="utf-8"))
    server.options = {}
    server.restart()
    try:
        remembering = export(server, directory / "out", [table], sizes.rate)
        fresh = export(server, directory / "out", [table], sizes.rate)
        fresh.env["CONNECTOR_CACHE_DIR"] = str(directory / "cache-none")

        def after_lift() -> Timed:
            shutil.rmtree(directory / "cache-after", ignore_errors=True)
            shutil.copytree(cache, directory / "cache-after")
            remembering.env["CONNECTOR_CACHE_DIR"] = str(directory / "cache-after")
            return remembering()

        def nothing_known() -> Timed:
            shutil.rmtree(directory / "cache-none", ignore_errors=True)
            return fresh()

        figures = contest({"after the lift": after_lift, "nothing remembered": nothing_known}, sizes.runs)
    finally:
        server.stop()
    after, none = figures["after the lift"], figures["nothing remembered"]
    ratio = none.median / after.median
    remembered = ", ".join(f"{v['rate']} ({'measured' if v['measured'] else 'a guess'})" for v in learned.values())
    print(f"  export after the limit was lifted (remembered {remembered} requests a second): "
          f"{after.text()}; remembering nothing {none.text()}; ratio (median vs median) {ratio:.2f} "
          f"(goal >= {GOAL_LIFTED}) -> {verdict(ratio, GOAL_LIFTED)}", flush=True)


def sync_full(server: CountingServer, directory: Path, table: str, rows: int) -> Contender:
    """`connector sync JOB --log-format json` of one table into Parquet, every row each run."""
    job = directory / "full.toml"
    job.write_text(
        f'[source]\napi_key_env = "CONNECTOR_API_KEY"\nbase_url_env = "CONNECTOR_BASE_URL"\n'
        f'[tables]\ninclude = ["{table}"]\n[sync]\nincremental = false\n'
        f'state_dir = "{directory / "state"}"\n[[destination]]\nparquet = "{directory / "synced"}"\n',
        encoding="utf-8",
    )
    argv = [CONNECTOR, "sync", str(job), "--log-format", "json"]
    return Contender(argv, user_env(server), server, rows, cwd=directory)


def big_case(directory: Path, table: str, table_id: str, sizes: Sizes) -> None:
    """Case 3, and case 6 from the same runs of our export (GNU time's peak RSS of each)."""
    server = start(directory)
    try:
        ours = export(server, directory / "out", [table], sizes.big)
        ours()  # learn the level it reaches, so the bare loop runs at the same one
        level = int((ours.summary or {}).get("concurrency") or 0)
        levels = [level] if level else list(BARE_LEVELS)
        bares = {f"{n} in flight": bare_read(server, table_id, n, sizes.big) for n in levels}
        label = (f"3. export {sizes.big:,} rows, no added latency, vs the bare loop at "
                 + (f"our level ({level})" if level else "4/8/16 (our level is not reported)"))
        mine = versus(label, ours, bares, sizes.runs, GOAL_VS_BARE)
    finally:
        server.stop()
    print(f"6. peak RSS of `connector export` of {sizes.big:,} rows with a ~85-character text column: "
          f"{mine.peak_mb:.0f} MB (highest of {len(mine.runs)} runs; goal <= {GOAL_RSS_MB:.0f} MB) -> "
          f"{verdict(mine.peak_mb, GOAL_RSS_MB, at_most=True)}", flush=True)


def many_tables(root: Path, sizes: Sizes) -> None:
    directory = root / "many"
    directory.mkdir()
    db = directory / "server.db"
    for t in range(TABLES):
        seed(db, TABLE_ROWS, f"small {t:03d}")
    rows = TABLES * TABLE_ROWS
    server = start(directory, latency_ms=20)
    try:
        bares = {f"{n} in flight, with each schema": bare_read(server, "*", n, rows, schemas=True)
                 for n in (*BARE_LEVELS, TABLES)}
        versus(f"4. export {TABLES} tables of {TABLE_ROWS} rows, server --latency-ms 20",
               export(server, directory / "out", [], rows), bares, sizes.runs, GOAL_TABLES)
    finally:
        server.stop()


# --- push -----------------------------------------------------------------------------------

_PUSH_SPEC: dict[str, Any] = {
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Zip", "type": "text"},
        {"name": "Age", "type": "number"},
        {"name": "Born", "type": "date"},
        {"name": "Member", "type": "checkbox"},
    ],
}


def _push_cells(i: int) -> dict[str, Any]:
    return {"Name": f"n{i:06d}", "Zip": f"{i % 100000:05d}", "Age": float(i % 90) + 0.5,
            "Born": (dt.date(1950, 1, 1) + dt.timedelta(days=i % 20000)).isoformat(), "Member": i % 2 == 0}


class PushRound:
    """Fresh tables of `rows` rows for each push run, and the source that updates them all
    (Age changed on every row): 5,000 updates, the plan bench_push builds. `changing`: one
    table, and each run's source changes every row again (a new Age each run)."""

    def __init__(self, server: CountingServer, directory: Path, rows: int, *, changing: bool = False) -> None:
        self.server, self.directory, self.rows = server, directory, rows
        self.made = 0
        self.csv = directory / "updates.csv"
        self.changing = changing
        self._source(1000.0)
        self.name = self.table()[0] if changing else ""

    def _source(self, age: float) -> None:
        pd.DataFrame([_push_cells(i) | {"Age": age} for i in range(self.rows)]).to_csv(self.csv, index=False)

    def table(self) -> tuple[str, str]:
        """A new table (name, id) holding the rows before the update."""
        self.made += 1
        name = f"push {self.made}"
        with contextlib.closing(Storage(str(self.server.db_path))) as storage:
            made = storage.create_table({**_PUSH_SPEC, "name": name})
            storage.insert_rows(made, [made.check_create(_push_cells(i)) for i in range(self.rows)])
        return name, made.id

    def ours(self) -> Contender:
        """`connector push updates.csv --table T --key Name` (upsert), a fresh table each run."""

        def argv() -> list[str]:
            if self.changing:
                self.made += 1
                self._source(1000.0 + self.made)
                name = self.name
            else:
                name, _ = self.table()
            return [CONNECTOR, "push", str(self.csv), "--table", name, "--key", "Name", "--json"]

        return Contender([], user_env(self.server), self.server, self.rows, self.directory, argv)

    def bare(self, level: int) -> Contender:
        """The same PATCHes (the plan's, computed before the clock starts) at `level` in flight."""

        def argv() -> list[str]:
            _, table_id = self.table()
            plan = self.directory / f"plan-{level}.json"
            plan.write_bytes(orjson.dumps(self._plan(table_id)))
            return [sys.executable, "-c", BARE_PATCH, self.server.base_url, table_id, str(level), str(plan)]

        return Contender([], user_env(self.server), self.server, self.rows, prepare=argv)

    def _plan(self, table_id: str) -> list[list[Any]]:
        """[[row id, fields]] of the push plan against this table, made as `connector push` does."""
        from connector.api import Client
        from connector.push.diff import make_plan
        from connector.push.live import read_live
        from connector.push.source import read_source
        from connector.push.validate import Key, validate

        with Client(self.server.base_url, self.server.api_key) as client:
            table = client.get_table(table_id)
            plan = make_plan(validate(read_source(self.csv), table, Key(("Name",))), read_live(client, table),
                             "upsert")
        assert len(plan.updates) == self.rows and not plan.creates and not plan.deletes
        return [[u.id, u.fields] for u in plan.updates]


def push_case(root: Path, sizes: Sizes) -> None:
    directory = root / "push"
    directory.mkdir()
    server = start(directory, latency_ms=20)
    try:
        round_ = PushRound(server, directory, sizes.updates)
        bares = {f"{n} in flight": round_.bare(n) for n in BARE_LEVELS}
        versus(f"5. push {sizes.updates:,} updates, server --latency-ms 20 (each run a fresh table)",
               round_.ours(), bares, sizes.runs, GOAL_VS_BARE)
    finally:
        server.stop()


#: A bare bulk-create loop: the JSON file holds the rows' fields (typed as the API takes
#: them); prints the rows created.
BARE_CREATE = _BARE_WRITES + """
        async def create(chunk):
            async with gate:
                body = orjson.dumps({"rows": [{"fields": f} for f in chunk]})
                r = await http.post(f"/tables/{tid}/rows/bulk", content=body)
                r.raise_for_status()
        await asyncio.gather(*(create(data[i:i + 100]) for i in range(0, len(data), 100)))
    print(len(data))
asyncio.run(main())
"""


def insert_case(root: Path, sizes: Sizes) -> None:
    """`connector push SHEET.csv --mode insert` of `sizes.inserts` rows into an empty table
    (a fresh one each run) against the bare loop of 100-row bulk creates (its rows typed and
    in memory before the clock starts)."""
    directory = root / "insert"
    directory.mkdir()
    server = start(directory)
    sheet, typed = directory / "sheet.csv", directory / "rows.json"
    rows = [_push_cells(i) for i in range(sizes.inserts)]
    pd.DataFrame(rows).to_csv(sheet, index=False)
    typed.write_bytes(orjson.dumps(rows))
    made = [0]

    def empty() -> str:
        made[0] += 1
        return server.create_table({**_PUSH_SPEC, "name": f"insert {made[0]}"})

    def ours() -> list[str]:
        return [CONNECTOR, "push", str(sheet), "--table", empty(), "--key", "Name", "--mode", "insert", "--json"]

    def bare(level: int) -> Callable[[], list[str]]:
        return lambda: [sys.executable, "-c", BARE_CREATE, server.base_url, empty(), str(level), str(typed)]

    try:
        env = user_env(server)
        bares = {f"{n} in flight": Contender([], env, server, sizes.inserts, prepare=bare(n))
                 for n in (8, 16)}
        versus(f"7. push --mode insert of a {sizes.inserts:,}-row CSV into an empty table (each run a fresh one)",
               Contender([], env, server, sizes.inserts, directory, ours), bares, sizes.runs, GOAL_VS_BARE)
    finally:
        server.stop()


def main() -> None:
    sizes = Sizes.from_env()
    print(f"sizes: {sizes} (BENCH_QUICK=1 for a smoke run, BENCH_ROWS=N for the main table)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        directory = root / "main"
        directory.mkdir()
        (directory / "out").mkdir()
        db = directory / "server.db"
        cases = set(filter(None, os.environ.get("BENCH_CASES", "").split(","))) or set(CASES)
        started = time.perf_counter()
        main_id = seed(db, sizes.main, "main") if cases & {"latency"} else ""
        seed(db, sizes.rate, "rated")
        if "rate" in cases:
            seed(db, LIFTED_ROWS, "lifted")
        print(f"seeded in {time.perf_counter() - started:.1f} s", flush=True)
        if "latency" in cases:
            latency_cases(directory, "main", main_id, sizes)
        if "rate" in cases:
            rate_limited(directory, "rated", sizes)
        if "tables" in cases:
            many_tables(root, sizes)
        if "push" in cases:
            push_case(root, sizes)
        if "insert" in cases:
            insert_case(root, sizes)
        if "big" in cases:
            started = time.perf_counter()
            big_id = seed(db, sizes.big, "big")
            print(f"seeded {sizes.big:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
            big_case(directory, "big", big_id, sizes)


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        os.environ["BENCH_QUICK"] = "1"
    main()
