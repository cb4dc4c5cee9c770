"""Shared helpers for benchmarks that time whole processes, as a user runs them.

* `run` spawns one fresh process and returns its wall time (spawn to exit) and peak RSS
  (GNU time's %M for exactly that process: a child forked from the bench starts with the
  bench's pages, so our own wait4 would overstate it).
* `CountingServer` is `connector serve` (same flags, same app, same uvicorn settings) with
  an ASGI wrapper that counts answers by status, read at ``GET /_bench/counts`` (outside
  ``/v1``): how many requests a contender sent and how many were answered 429; and when it
  answered first and last (``GET /_bench/span``).
* `contest` warms each contender up once, then alternates them for some rounds (the
  order reversed every other round, so a busy moment on the shared machine hits both).
* `Figures` turns the runs into best and median.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.server import ROOT, RunningServer

TIME = "/usr/bin/time"  # GNU time
#: The installed console script, as a user runs it.
CONNECTOR = str(Path(sys.executable).with_name("connector"))


@dataclass(frozen=True)
class Timed:
    """One finished process: wall seconds, peak RSS in MB, what it printed on stdout."""

    seconds: float
    rss_mb: float
    stdout: str


def run(argv: list[str], env: Mapping[str, str], cwd: Path | None = None) -> Timed:
    """Run `argv` to completion under GNU time; raise with its stderr if it fails."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        started = time.perf_counter()
        done = subprocess.run([TIME, "-f", "%M", "-o", report.name, *argv], env=dict(env), cwd=cwd,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{argv[:3]} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        rss_kb = int(report.read().split()[-1])
    return Timed(seconds, rss_kb / 1024, done.stdout)


def user_env(server: RunningServer, **extra: str) -> dict[str, str]:
    """The environment a user runs `connector` in: the server's URL and key, no caps set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_")}
    return env | {"CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key} | extra


# `connector serve` with every answer counted. Launched like tests.fixtures.server does
# (without the package __init__), with create_app wrapped before `serve` calls it.
_LAUNCH = """
import sys, types, json, collections, time
pkg = types.ModuleType('connector'); pkg.__path__ = [sys.argv.pop(1)]; sys.modules['connector'] = pkg
import connector.server.app as app_module
from connector.server.cli import serve
make = app_module.create_app

class Counting:
    def __init__(self, app):
        self.app, self.counts, self.span = app, collections.Counter(), []
    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] in ("/_bench/counts", "/_bench/span"):
            body = json.dumps(self.counts if scope["path"].endswith("counts") else self.span).encode()
            if scope["method"] == "DELETE":
                self.counts.clear()
                self.span = []
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        async def counted(message):
            if message["type"] == "http.response.start":
                self.counts[str(message["status"])] += 1
                self.span[1:] = [time.monotonic()]
            await send(message)
        await self.app(scope, receive, counted)

app_module.create_app = lambda *a, **k: Counting(make(*a, **k))
serve(prog_name='connector serve')
"""


class CountingServer(RunningServer):
    """A `RunningServer` whose answers are counted by status (see the module doc)."""

    forked = False  # its own launch, which wraps the app

    def _argv(self) -> list[str]:
        argv = super()._argv()
        launch = argv.index("-c") + 1
        assert str(ROOT / "connector") == argv[launch + 1]
        argv[launch] = _LAUNCH
        return argv

    def take_counts(self) -> dict[str, int]:
        """Answers by status since the last call (which resets them)."""
        counts: dict[str, int] = httpx.delete(self.base_url.removesuffix("/v1") + "/_bench/counts").json()
        return counts

    def span(self) -> tuple[float, float] | None:
        """When (`time.monotonic`: one clock for every process of the machine) the server
        first and last answered since `take_counts` was called (None: it did not)."""
        span: list[float] = httpx.get(self.base_url.removesuffix("/v1") + "/_bench/span").json()
        return (span[0], span[-1]) if span else None


def start(directory: Path, **options: Any) -> CountingServer:
    """A counting server over `directory`/server.db with `connector serve` options."""
    server = CountingServer(directory, options)
    server.start()
    return server


@dataclass
class Figures:
    """The runs of one contender."""

    runs: list[Timed] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(r.seconds for r in self.runs)

    @property
    def median(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def peak_mb(self) -> float:
        return max(r.rss_mb for r in self.runs)

    def text(self) -> str:
        return f"best {self.best:.2f} s, median {self.median:.2f} s"


def contest(contenders: Mapping[str, Callable[[], Timed]], rounds: int) -> dict[str, Figures]:
    """Warm each contender up once (not kept), then `rounds` rounds in alternating order."""
    for go in contenders.values():
        go()
    figures = {name: Figures() for name in contenders}
    names = list(contenders)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            figures[name].runs.append(contenders[name]())
    return figures


def verdict(value: float, goal: float, *, at_most: bool = False) -> str:
    """PASS or MISS against a goal (at least `goal`, or at most with `at_most`)."""
    ok = value <= goal if at_most else value >= goal
    return "PASS" if ok else "MISS"
