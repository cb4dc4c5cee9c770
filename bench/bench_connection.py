"""What the connection's bounds cost: small requests/s with `connection.Connection` against
uvicorn's own h11 protocol, the same app and database otherwise.

`Connection` arms a deadline per request (the head, after each answer) and looks at the
head it is receiving; this measures that on the cheapest requests there are, so the cost
shows if it is there: GET /v1/tables (one table) on one keep-alive connection, and on a new
connection each time. The two servers run side by side and are measured in alternating
rounds (each first in turn), so a busy moment of a shared machine hits both alike; each
figure is the median.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from connector.server.storage import Storage
from tests.fixtures.server import free_port

ROUNDS = 7
REQUESTS = 500

_LAUNCH = """
import sys, uvicorn
from connector.server.app import create_app
from connector.server.connection import connection_class
db, port, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
http = connection_class() if kind == "connection" else "h11"
uvicorn.run(create_app(db), host="127.0.0.1", port=port, http=http, log_level="warning",
            access_log=False, lifespan="off")
"""


def _start(db: str, kind: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, db, str(port), kind])
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/openapi.json").status_code == 200:
                return proc, url
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start")


def _rate(url: str, key: str, *, keep_alive: bool) -> float:
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_keepalive_connections=None if keep_alive else 0)
    with httpx.Client(base_url=url, headers=headers, limits=limits) as client:
        started = time.perf_counter()
        for _ in range(REQUESTS):
            client.get("/tables").raise_for_status()
        return REQUESTS / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        with contextlib.closing(Storage(db)) as storage:
            storage.create_table({"name": "T", "columns": [{"name": "A", "type": "text"}]})
            key = storage.create_key()
        servers = {kind: _start(db, kind) for kind in ("h11", "connection")}
        try:
            for keep_alive in (True, False):
                rates: dict[str, list[float]] = {kind: [] for kind in servers}
                for n in range(ROUNDS):
                    order = list(servers.items())
                    for kind, (_, url) in order[:: 1 if n % 2 else -1]:  # each goes first in turn
                        rates[kind].append(_rate(url, key, keep_alive=keep_alive))
                plain, ours = (statistics.median(rates[k]) for k in ("h11", "connection"))
                how = "one keep-alive connection" if keep_alive else "a new connection each"
                print(f"GET /v1/tables, {how}: uvicorn h11 {plain:,.0f}/s, Connection {ours:,.0f}/s "
                      f"({ours / plain - 1:+.1%}; median of {ROUNDS} rounds of {REQUESTS})")
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=10)
