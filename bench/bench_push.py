"""Push benchmarks.

1. Plan: a 100,000-row source (text cells, as read from a CSV) against a 100,000-row table
   with 1% of rows changed; the table read is excluded (the live table is built in memory as
   the extraction delivers it). Goal: at most 2 s.
2. Apply: 5,000 creates + 1,000 updates + 1,000 deletes on a real `connector serve`.
   Goal: exactly the minimum number of requests (50 + 1,000 + 10), and at least 0.9x the
   speed of a bare httpx loop sending the same requests at the same concurrency, same run.
3. Large rows: 400 creates of ~40 kB each (16 MB) into a server taking bodies up to 8 MiB
   (the default) and one taking 256 KiB. Goal: every row in, none rejected; with the default,
   no request refused (bulk creates sized by bytes: the plan's request count is what is
   sent); with 256 KiB, every row still goes in (requests split after each 413, and later
   ones are cut to the size learnt before they are sent).
4. Scale (issue 20): `connector push` of a 1,000,000-row Parquet sheet, 1,000 rows changed,
   against a 1,000,000-row table (``BENCH_PUSH_ROWS``), whole processes. Goal: peak RSS
   <= 400 MB and <= 1.5x the time of `connector export` of the table.
5. Query: the same sheet pushed from a DuckDB query over the file (``--db --sql``), against
   the file pushed directly. No goal: the cost of going through a query.

``BENCH_PUSH=scale,query`` picks parts; ``BENCH_RUNS`` sets the rounds of 4 and 5.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pandas as pd
import pyarrow as pa

from connector.api import MAX_BULK_ROWS, Client
from connector.push import PushSpec, push
from connector.push.diff import make_plan
from connector.push.live import Live, read_live
from connector.push.plan import Plan
from connector.push.source import SourceFrame, read_source
from connector.push.validate import Key, validate
from connector.push.writes import apply_plan
from connector.schema import Table, arrow_schema
from connector.server.storage import Storage

SPEC: dict[str, Any] = {
    "name": "Bench",
    "columns": [
        {"name": "Name", "type": "text", "required": True},
        {"name": "Zip", "type": "text"},
        {"name": "Age", "type": "number"},
        {"name": "Status", "type": "choice", "options": ["active", "paused", "gone"]},
        {"name": "Born", "type": "date"},
        {"name": "Member", "type": "checkbox"},
    ],
}
PLAN_ROWS = 100_000
PLAN_GOAL_S = 2.0
APPLY_GOAL_RATIO = 0.9
#: Rounds of (push apply, bare loop), alternating who goes first; the best of each is
#: compared (the machine is shared, so single runs are noisy).
ROUNDS = 6
#: Requests in flight in the bare loop the apply is compared with.
CONCURRENCY = 8


def main() -> None:
    """Every part, or those ``BENCH_PUSH=plan,apply,large,scale,query`` names."""
    chosen = os.environ.get("BENCH_PUSH", "plan,apply,large,scale,query").split(",")
    for name, part in [("plan", bench_plan), ("apply", bench_apply), ("large", bench_large_rows)]:
        if name in chosen:
            part()
    if {"scale", "query"} & set(chosen):  # one seeded table for both
        bench_scale({"scale", "query"} & set(chosen))


# --- 1. plan --------------------------------------------------------------------------


def _cells(i: int) -> dict[str, Any]:
    return {
        "Name": f"n{i:06d}",
        "Zip": f"{i % 100000:05d}",
        "Age": float(i % 90) + 0.5,
        "Status": SPEC["columns"][3]["options"][i % 3],
        "Born": dt.date(1950, 1, 1) + dt.timedelta(days=i % 20000),
        "Member": i % 2 == 0,
    }


def bench_plan() -> None:
    table = Table.from_api({**SPEC, "id": "tbl_bench", "columns": SPEC["columns"]})
    rows = [_cells(i) for i in range(PLAN_ROWS)]
    frame = pd.DataFrame(rows)
    schema = arrow_schema(table)
    started = time.perf_counter()
    arrow = pa.table(
        {
            "_id": [f"row_{i:08d}" for i in range(PLAN_ROWS)],
            "_created_at": pa.array([None] * PLAN_ROWS, schema.field("_created_at").type),
            "_updated_at": pa.array([None] * PLAN_ROWS, schema.field("_updated_at").type),
            **{c: frame[c].tolist() for c in frame.columns},
        },
        schema=schema,
    )
    live = Live.from_arrow(table, arrow)
    to_live = time.perf_counter() - started

    text = pd.DataFrame(
        {
            "Name": frame["Name"],
            "Zip": frame["Zip"],
            "Age": frame["Age"].map(repr),
            "Status": frame["Status"],
            "Born": frame["Born"].map(dt.date.isoformat),
            "Member": frame["Member"].map({True: "TRUE", False: "FALSE"}),
        }
    )
    changed = text.index[::100]  # 1%
    text.loc[changed, "Age"] = "1000"
    source = SourceFrame.from_frame(text, "bench.csv")

    timings = []
    for _ in range(3):
        started = time.perf_counter()
        prepared = validate(source, table, Key(("Name",)))
        plan = make_plan(prepared, live, "upsert")
        timings.append(time.perf_counter() - started)
    assert (len(plan.creates), len(plan.updates), len(plan.deletes)) == (0, len(changed), 0)
    best = min(timings)
    print(f"plan: {PLAN_ROWS:,} source rows vs {PLAN_ROWS:,} table rows, 1% changed")
    print(f"  validate + diff: best {best:.2f} s of 3 ({', '.join(f'{t:.2f}' for t in timings)})"
          f"  goal <= {PLAN_GOAL_S:.0f} s  -> {'OK' if best <= PLAN_GOAL_S else 'MISSED'}"
          f" ({PLAN_GOAL_S / best:.1f}x under the bound)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.csv"
        text.to_csv(path, index=False)
        started = time.perf_counter()
        read_source(path)
        read_csv = time.perf_counter() - started
    print(f"  (not in the goal: live table from Arrow {to_live:.2f} s; "
          f"reading the source as a {PLAN_ROWS:,}-row CSV "
          f"{read_csv:.2f} s)")


# --- 2. apply ---------------------------------------------------------------------------


class _Counting(httpx.AsyncBaseTransport):
    """Counts write requests on their way to the real server."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.calls: Counter[str] = Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "GET":
            self.calls[request.method] += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def bench_apply() -> None:
    with _server() as (base_url, key, db):
        push_seconds: list[float] = []
        bare_seconds: list[float] = []
        for round_ in range(ROUNDS):
            plan_a = _setup_plan(base_url, key, db, f"push {round_}")
            plan_b = _setup_plan(base_url, key, db, f"bare {round_}")
            counting, bare_calls = _Counting(), _Counting()
            if round_ % 2:  # alternate who goes first: the machine is shared and noisy
                bare_seconds.append(asyncio.run(_bare_loop(base_url, key, plan_b, bare_calls)))
            with Client(base_url, key, transport=counting) as client:
                push_seconds.append(_timed_apply(client, plan_a))
            if not round_ % 2:
                bare_seconds.append(asyncio.run(_bare_loop(base_url, key, plan_b, bare_calls)))
            calls = counting.calls
        minimum = 5000 // MAX_BULK_ROWS + 1000 + 1000 // MAX_BULK_ROWS
        sent = sum(calls.values())
        push_best, bare_best = min(push_seconds), min(bare_seconds)
        ratio = bare_best / push_best
        paired = sorted(b / p for p, b in zip(push_seconds, bare_seconds, strict=True))
        median = paired[len(paired) // 2]
        print(f"apply: 5,000 creates + 1,000 updates + 1,000 deletes, concurrency {CONCURRENCY} (bare loop)")
        print(f"  requests sent: {sent} (POST {calls['POST']}, PATCH {calls['PATCH']}, "
              f"DELETE {calls['DELETE']}); minimum {minimum} -> {'OK' if sent == minimum else 'MISSED'}"
              f" (the bare loop sent {sum(bare_calls.calls.values())})")
        print(f"  push apply: best {push_best:.2f} s; bare httpx loop: best {bare_best:.2f} s "
              f"(runs: push {', '.join(f'{s:.2f}' for s in push_seconds)}; "
              f"bare {', '.join(f'{s:.2f}' for s in bare_seconds)})")
        print(f"  speed vs bare loop (best vs best): {ratio:.2f}x  goal >= {APPLY_GOAL_RATIO}x -> "
              f"{'OK' if ratio >= APPLY_GOAL_RATIO else 'MISSED'}; median of paired rounds "
              f"{median:.2f}x")


LARGE_ROWS = 400
LARGE_CELL = 40_000


def bench_large_rows() -> None:
    frame = pd.DataFrame({
        "Name": [f"n{i:04d}" for i in range(LARGE_ROWS)],
        "Zip": [f"{i:05d}" + "z" * LARGE_CELL for i in range(LARGE_ROWS)],
    })
    print(f"large rows: {LARGE_ROWS} creates of ~{LARGE_CELL // 1000} kB "
          f"({LARGE_ROWS * LARGE_CELL / 1e6:.0f} MB)")
    for cap in (None, 256 * 1024):
        flags = ["--max-body-bytes", str(cap)] if cap else []
        with _server(*flags) as (base_url, key, db):
            with contextlib.closing(Storage(str(db))) as storage:
                storage.create_table(SPEC)
            counting = _Counting()
            with Client(base_url, key, transport=counting) as client:
                started = time.perf_counter()
                result = push(client, PushSpec(frame, table="Bench", key="Name"), progress=False)
                seconds = time.perf_counter() - started
            ok = result.created == LARGE_ROWS and not result.rejected
            print(f"  body cap {'8 MiB (default)' if cap is None else f'{cap // 1024} KiB'}: "
                  f"{result.created} created, {len(result.rejected)} rejected, "
                  f"{result.requests} requests (plan: {result.plan.requests}; "
                  f"{result.requests - result.plan.requests} more after 413s), {seconds:.2f} s "
                  f"-> {'OK' if ok else 'MISSED'}")


def _setup_plan(base_url: str, key: str, db: Path, name: str) -> Plan:
    """A fresh 6,000-row table and a mirror plan of 5,000 creates, 1,000 updates, 1,000 deletes."""
    with contextlib.closing(Storage(str(db))) as storage:
        table_def = storage.create_table({**SPEC, "name": name})
        seeded = [_wire(_cells(i)) for i in range(6000)]
        storage.insert_rows(table_def, [table_def.check_create(r) for r in seeded])
    keep = [_cells(i) for i in range(1000, 6000)]  # rows 0..999 are deleted
    for cells in keep[:1000]:
        cells["Age"] = 1000.0  # 1,000 updates
    new = [_cells(i) for i in range(10_000, 15_000)]  # 5,000 creates
    source = SourceFrame.from_frame(pd.DataFrame(keep + new), name)
    with Client(base_url, key) as client:
        table = client.get_table(table_def.id)
        live = read_live(client, table)
    plan = make_plan(validate(source, table, Key(("Name",))), live, "mirror")
    assert (len(plan.creates), len(plan.updates), len(plan.deletes)) == (5000, 1000, 1000)
    return plan


def _wire(cells: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in cells.items()}


def _timed_apply(client: Client, plan: Plan) -> float:
    async def run() -> float:
        started = time.perf_counter()
        result = await apply_plan(client.aio, plan)
        seconds = time.perf_counter() - started
        assert (result.created, result.updated, result.deleted) == (5000, 1000, 1000)
        return seconds

    return client.run(run())


async def _bare_loop(base_url: str, key: str, plan: Plan, counting: _Counting) -> float:
    """The same writes with plain httpx: same bodies, same order of phases, same concurrency,
    through the same counting transport as the push."""
    table = f"{base_url}/tables/{plan.table.id}/rows"
    slots = asyncio.Semaphore(CONCURRENCY)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    async with httpx.AsyncClient(headers=headers, transport=counting, timeout=30.0) as http:

        async def send(method: str, url: str, body: Any) -> None:
            async with slots:
                response = await http.request(method, url, content=orjson.dumps(body))
                response.raise_for_status()

        creates = [c.fields for c in plan.creates]
        ids = [d.id for d in plan.deletes]
        started = time.perf_counter()
        await asyncio.gather(*(
            send("POST", f"{table}/bulk", {"rows": [{"fields": f} for f in creates[i : i + 100]]})
            for i in range(0, len(creates), MAX_BULK_ROWS)
        ))
        await asyncio.gather(*(
            send("PATCH", f"{table}/{u.id}", {"fields": u.fields}) for u in plan.updates
        ))
        await asyncio.gather(*(
            send("DELETE", f"{table}/bulk", {"row_ids": ids[i : i + 100]})
            for i in range(0, len(ids), MAX_BULK_ROWS)
        ))
        return time.perf_counter() - started


@contextlib.contextmanager
def _server(*flags: str) -> Iterator[tuple[str, str, Path]]:
    """A `connector serve` subprocess (with `flags`) on a free port over a fresh database."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        with contextlib.closing(Storage(str(db))) as storage:
            key = storage.create_key()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "connector", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--db", str(db), *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ},
        )
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base_url}/openapi.json", timeout=1).status_code == 200:
                        break
                time.sleep(0.1)
            yield base_url, key, db
        finally:
            proc.terminate()
            proc.wait(timeout=10)


# --- 4. scale: whole processes, a 1,000,000-row sheet against a 1,000,000-row table -------
# --- 5. query: the same sheet pushed through DuckDB (`--db duckdb:///:memory: --sql ...`) ---

#: Rows of the table and of the sheet (``BENCH_PUSH_ROWS``), and how many the sheet changes.
SCALE_ROWS = int(os.environ.get("BENCH_PUSH_ROWS", 1_000_000))
SCALE_CHANGED = 1_000
SCALE_RUNS = int(os.environ.get("BENCH_RUNS", 3))
SCALE_GOAL_MB = 400.0
SCALE_GOAL_RATIO = 1.5


def bench_scale(parts: Collection[str] = ("scale",)) -> None:
    """`connector push SHEET.parquet --table big --key Name` against `connector export` of
    the same table (part ``scale``), and against the same sheet read by a DuckDB query
    (part ``query``), each a whole process timed with its peak RSS (GNU time). The sheet is
    the export itself with 1,000 rows' Amount changed; runs alternate it with the export as
    it was, so every push updates exactly 1,000 rows."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from bench._procs import CONNECTOR, Figures, run, start, user_env, verdict
    from bench.bench_throughput import seed

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        seed(root / "server.db", SCALE_ROWS, "big")
        print(f"scale: seeded {SCALE_ROWS:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
        server = start(root)
        try:
            env = user_env(server)
            out = root / "out"
            export = [CONNECTOR, "export", "--out", str(out), "--table", "big", "--json"]
            run(export, env, root)  # warm-up; also the sheet
            sheets = [root / "changed.parquet", root / "as-exported.parquet"]
            (out / "big.parquet").rename(sheets[1])
            data = pq.read_table(sheets[1])
            amount = data.column("Amount").to_numpy(zero_copy_only=False).copy()
            amount[: SCALE_CHANGED] = -1.0  # every first 1,000 rows get a new value
            changed = data.set_column(data.schema.get_field_index("Amount"), "Amount",
                                      pc.cast(amount, data.schema.field("Amount").type))
            pq.write_table(changed, sheets[0])
            del data, changed, amount

            def push(*source: str) -> Any:
                argv = [CONNECTOR, "push", *source, "--table", "big", "--key", "Name", "--json"]
                timed = run(argv, env, root)
                summary = orjson.loads(timed.stdout)
                updated = summary["pushes"][0]["updated"]
                if updated != SCALE_CHANGED:
                    raise RuntimeError(f"push updated {updated} rows, not {SCALE_CHANGED}")
                return timed

            def query(sheet: Path) -> list[str]:
                return ["--db", "duckdb:///:memory:", "--sql", f"SELECT * FROM read_parquet('{sheet}')"]

            ours, theirs, queried = Figures(), Figures(), Figures()
            for _ in range(SCALE_RUNS):
                for sheet in sheets:  # each push undoes the one before: 1,000 updates each
                    ours.runs.append(push(str(sheet)))
                if "query" in parts:
                    for sheet in sheets:
                        queried.runs.append(push(*query(sheet)))
                if "scale" in parts:
                    theirs.runs.append(run(export, env, root))
        finally:
            server.stop()
    print(f"  push a {SCALE_ROWS:,}-row Parquet sheet, {SCALE_CHANGED:,} rows changed: {ours.text()}, "
          f"peak RSS {ours.peak_mb:.0f} MB (runs: {_runs(ours)})")
    if "scale" in parts:
        ratio = ours.best / theirs.best
        print(f"  export {SCALE_ROWS:,} rows to Parquet: {theirs.text()}, peak RSS {theirs.peak_mb:.0f} MB")
        print(f"  push / export (best vs best) {ratio:.2f}x, goal <= {SCALE_GOAL_RATIO}x -> "
              f"{verdict(ratio, SCALE_GOAL_RATIO, at_most=True)}; peak RSS goal <= {SCALE_GOAL_MB:.0f} MB "
              f"-> {verdict(ours.peak_mb, SCALE_GOAL_MB, at_most=True)}", flush=True)
    if "query" in parts:
        print(f"  push the same sheets through DuckDB (--db duckdb:///:memory: --sql \"SELECT * FROM "
              f"read_parquet(...)\"): {queried.text()}, peak RSS {queried.peak_mb:.0f} MB (runs: "
              f"{_runs(queried)}); query / file (best vs best) {queried.best / ours.best:.2f}x", flush=True)


def _runs(figures: Any) -> str:
    return ", ".join(f"{r.seconds:.1f} s/{r.rss_mb:.0f} MB" for r in figures.runs)


if __name__ == "__main__":
    main()
