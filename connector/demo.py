"""`python -m connector.demo` (what `make demo` runs): the whole product, end to end, offline.

1. starts the reference server with the demo workspace on a free port (a subprocess);
2. runs ``configs/demo.toml``: every table to Parquet and to SQLite (a full first sync);
3. pushes the price list ``configs/demo-products.csv`` into Products: the plan, then the push;
4. deletes a ticket through the API, as a user of the app would;
5. runs ``configs/demo.toml`` again: incremental, it picks up exactly those changes;
6. prints where everything is, stops the server, exits 0.

Outputs go to ``demo-out/`` (recreated on every run, ignored by git). ``--workdir DIR`` runs
the demo on copies of its configs under DIR instead (the tests do), touching nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import sqlalchemy as sa

from connector.api import Client
from connector.jobs.cli import describe_event
from connector.jobs.config import load_job
from connector.jobs.runner import RunSummary, run_job

ROOT = Path(__file__).resolve().parents[1]
DEMO_FILES = ("demo.toml", "demo-push.toml", "demo-products.csv")
STARTUP_TIMEOUT = 30.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m connector.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="run on copies of the configs here"
    )
    args = parser.parse_args(argv)
    began = time.monotonic()
    root = ROOT if args.workdir is None else args.workdir.resolve()
    configs, out = root / "configs", root / "demo-out"
    if root != ROOT:
        configs.mkdir(parents=True, exist_ok=True)
        for name in DEMO_FILES:
            shutil.copy(ROOT / "configs" / name, configs / name)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    key = secrets.token_urlsafe(24)
    with _server(key, out) as base_url:
        os.environ["CONNECTOR_BASE_URL"] = base_url
        os.environ["CONNECTOR_API_KEY"] = key
        sync_job = load_job(configs / "demo.toml")
        push_job = load_job(configs / "demo-push.toml")

        _step("1. Full sync: every table to Parquet and SQLite", "connector sync configs/demo.toml")
        first = _check(run_job(sync_job, report=_show))

        _step(
            "2. The price list's plan (dry run)", "connector sync configs/demo-push.toml --dry-run"
        )
        _check(run_job(push_job, dry_run=True, report=_show))

        _step("3. Push it", "connector sync configs/demo-push.toml")
        _check(run_job(push_job, report=_show))

        _step("4. Meanwhile a ticket is deleted in the app", "DELETE /tables/{Tickets}/rows/{id}")
        ticket = _delete_one_ticket(base_url, key)
        print(f"  deleted ticket {ticket}", flush=True)

        _step("5. Incremental sync: only what changed", "connector sync configs/demo.toml")
        second = _check(run_job(sync_job, report=_show))

    _summary(first, second, out, root, time.monotonic() - began)
    return 0


def _show(event: str, **fields: Any) -> None:
    line = describe_event(event, **fields)
    if line is not None and event != "start":
        print(line, flush=True)


def _step(title: str, command: str) -> None:
    print(f"\n== {title}\n$ {command}", flush=True)


def _check(summary: RunSummary) -> RunSummary:
    if summary.exit_code != 0:
        raise SystemExit(
            f"demo failed: {summary.job} ended {summary.status}: {summary.error or ''}"
        )
    return summary


def _delete_one_ticket(base_url: str, key: str) -> str:
    with Client(base_url, key) as client:
        (tickets,) = [t for t in client.list_tables() if t.name == "Tickets"]
        row = client.list_rows(tickets.id, limit=1).rows[0]
        client.delete_row(tickets.id, row.id)
        return row.id


def _summary(first: RunSummary, second: RunSummary, out: Path, root: Path, seconds: float) -> None:
    parquet = out / "parquet"
    database = out / "demo.db"
    print("\n== What happened")
    print(
        f"  first sync:  {sum(t.rows_written for t in first.tables)} rows in {len(first.tables)} tables"
    )
    changed = [t for t in second.tables if t.status == "ok"]
    print(
        f"  second sync: {sum(t.rows_read for t in second.tables)} changed rows read, "
        f"{sum(t.rows_deleted for t in second.tables)} deleted, "
        f"{len(second.tables) - len(changed)} tables untouched"
    )
    products = pq.read_table(parquet / "Products.parquet", columns=["Name", "Price"]).to_pandas()
    new_prices = products[products["Name"].isin(["Widget A1", "Turbo Encabulator"])]
    print("  Products in Parquet now include:")
    for name, price in new_prices.itertuples(index=False):
        print(f"    {name:<20} {price:>9.2f}")
    engine = sa.create_engine(f"sqlite:///{database}")
    with engine.connect() as conn:
        counts = {
            t: conn.execute(sa.text(f'SELECT count(*) FROM "{t}"')).scalar_one()
            for t in sorted(sa.inspect(conn).get_table_names())
        }
    engine.dispose()
    print(f"  SQLite row counts: {', '.join(f'{t} {n}' for t, n in counts.items())}")
    print("\n== Outputs")
    print(f"  Parquet files  {parquet.relative_to(root)}/*.parquet")
    print(f"  SQLite         {database.relative_to(root)}")
    print(f"  job state      {(out / 'state').relative_to(root)}/demo.state.json")
    print(f"  server log     {(out / 'server.log').relative_to(root)}")
    orders = (parquet / "Orders.parquet").relative_to(root)
    look = f"import pandas as pd; print(pd.read_parquet('{orders}')['Status'].value_counts())"
    print(f'\n  try:  .venv/bin/python -c "{look}"')
    print(f"\ndemo finished in {seconds:.1f}s")


@contextlib.contextmanager
def _server(key: str, out: Path) -> Iterator[str]:
    """`connector serve --demo` on a free port, with `key` registered; stopped on exit."""
    port = _free_port()
    log_path = out / "server.log"
    log = log_path.open("wb")
    env = {**os.environ, "CONNECTOR_DEMO_KEY": key}
    argv = [sys.executable, "-m", "connector", "serve", "--demo", "--port", str(port),
            "--db", str(out / "workspace.db")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        print(
            f"== 0. Reference server with the demo workspace\n$ connector serve --demo --port {port}"
        )
        _wait_until_up(proc, base_url, key, log_path)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_until_up(proc: subprocess.Popen[bytes], base_url: str, key: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    headers = {"Authorization": f"Bearer {key}"}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}); see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base_url}/tables", headers=headers, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"the server did not answer within {STARTUP_TIMEOUT:.0f}s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
