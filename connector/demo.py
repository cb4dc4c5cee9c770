"""`python -m connector.demo` (what `make demo` runs): the whole product, end to end, offline.

1. starts the reference server with the demo workspace on a free port (a subprocess);
2. runs ``demo.toml``: every table to Parquet and to SQLite (a full first sync);
3. pushes the price list ``demo-products.csv`` into Products: the plan, then the push;
4. deletes a ticket through the API, as a user of the app would;
5. runs ``demo.toml`` again: incremental, it picks up exactly those changes;
6. prints where everything is, stops the server, exits 0.

The job files ship inside the package (``connector/demo_data``, package data), so an
installed wheel runs the demo as a checkout does. They are copied into the output directory
(``--out``, default ``./demo-out``, recreated on every run) and run from there: their
relative paths put every output beside them, never inside the installed package.
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
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import sqlalchemy as sa

from connector.api import Client
from connector.jobs.config import load_job
from connector.jobs.context import RunOptions
from connector.jobs.run import run_job
from connector.naming import NAME_REGISTRY
from connector.reporting import describe_event
from connector.results import RunSummary

#: The package data directory holding the demo's job files and price list (the one copy).
DEMO_DATA = "demo_data"
DEMO_FILES = ("demo.toml", "demo-push.toml", "demo-products.csv")
DEFAULT_OUT = Path("demo-out")
STARTUP_TIMEOUT = 30.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m connector.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where the demo's job files and outputs go, recreated (default: ./demo-out)",
    )
    args = parser.parse_args(argv)
    began = time.monotonic()
    out: Path = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    copy_demo_files(out)
    key = secrets.token_urlsafe(24)
    sync_file, push_file = _shown(out / "demo.toml"), _shown(out / "demo-push.toml")
    with _server(key, out) as base_url:
        os.environ["CONNECTOR_BASE_URL"] = base_url
        os.environ["CONNECTOR_API_KEY"] = key
        sync_job = load_job(out / "demo.toml")
        push_job = load_job(out / "demo-push.toml")

        _step("1. Full sync: every table to Parquet and SQLite", f"connector sync {sync_file}")
        first = _check(run_job(sync_job, RunOptions(report=_show)))

        _step("2. The price list's plan (dry run)", f"connector sync {push_file} --dry-run")
        _check(run_job(push_job, RunOptions(dry_run=True, report=_show)))

        _step("3. Push it", f"connector sync {push_file}")
        _check(run_job(push_job, RunOptions(report=_show)))

        _step("4. Meanwhile a ticket is deleted in the app", "DELETE /tables/{Tickets}/rows/{id}")
        ticket = _delete_one_ticket(base_url, key)
        print(f"  deleted ticket {ticket}", flush=True)

        _step("5. Incremental sync: only what changed", f"connector sync {sync_file}")
        second = _check(run_job(sync_job, RunOptions(report=_show)))

    _summary(first, second, out, time.monotonic() - began)
    return 0


def copy_demo_files(directory: Path) -> None:
    """Copy the demo's job files and price list (package data) into `directory`."""
    data = resources.files("connector") / DEMO_DATA
    for name in DEMO_FILES:
        (directory / name).write_bytes((data / name).read_bytes())


def _shown(path: Path) -> str:
    """`path` as the user would type it: relative to the current directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


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


def _summary(first: RunSummary, second: RunSummary, out: Path, seconds: float) -> None:
    parquet = out / "parquet"
    database = out / "demo.db"
    print("\n== What happened")
    print(
        f"  first sync:  {sum(t.rows_written for t in first.tables)} rows in {len(first.tables)} tables"
    )
    changed = [t for t in second.tables if t.status == "ok"]
    again = sum(t.window_rows for t in second.tables)
    print(
        f"  second sync: {sum(t.rows_written for t in second.tables)} rows written, "
        f"{sum(t.rows_deleted for t in second.tables)} deleted, "
        f"{len(second.tables) - len(changed)} tables untouched"
        + (f"; {again} rows stamped in the lookback window were read again and compared "
           f"with the outputs (a write committed late is not lost): "
           f"{sum(t.late_rows for t in second.tables)} had changed"
           if again else "")
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
            if t != NAME_REGISTRY  # which table each name holds: the connector's own record
        }
    engine.dispose()
    print(f"  SQLite row counts: {', '.join(f'{t} {n}' for t, n in counts.items())}")
    print("\n== Outputs")
    print(f"  job files      {_shown(out)}/demo.toml, demo-push.toml, demo-products.csv")
    print(f"  Parquet files  {_shown(parquet)}/*.parquet")
    print(f"  SQLite         {_shown(database)}")
    print(f"  job state      {_shown(out / 'state')}/demo.state.json")
    print(f"  server log     {_shown(out / 'server.log')}")
    orders = _shown(parquet / "Orders.parquet")
    look = f"import pandas as pd; print(pd.read_parquet('{orders}')['Status'].value_counts())"
    print(f'\n  try:  python -c "{look}"')
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
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out)
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
