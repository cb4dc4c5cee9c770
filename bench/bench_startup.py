"""Start-up of the `connector` program: whole-process time and peak RSS.

Goal: `connector --help` and `connector tables` in <= 0.25 s and <= 60 MB each. Measured
as a user runs them: the installed console script, a fresh process per run, its wall time
from spawn to exit and its peak resident memory (GNU time's %M for that very process).
`tables` lists the demo workspace of a `connector serve --demo` started on a free port.
`python -c pass` is the floor no Python program starts below. Each figure is the median of
RUNS runs, the commands taken in turn within a round so a busy moment hits them alike.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fixtures.server import RunningServer

RUNS = 9
GOAL_SECONDS = 0.25
GOAL_MB = 60.0
SCRIPT = str(Path(sys.executable).with_name("connector"))
TIME = "/usr/bin/time"  # GNU time: the peak RSS of exactly one process


def _run(argv: list[str], env: dict[str, str], report: Path) -> tuple[float, float]:
    """Seconds from spawn to exit, and peak RSS in MB, of one fresh process.

    The RSS comes from GNU time, not from our own wait4: a child forked from this process
    starts with this process's pages, and its high-water mark keeps them past the exec."""
    started = time.perf_counter()
    done = subprocess.run([TIME, "-f", "%M", "-o", str(report), *argv], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    return seconds, int(report.read_text().split()[-1]) / 1024  # KB


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = RunningServer(Path(tmp), {"demo": True}).start()
        try:
            env = {**os.environ, "CONNECTOR_API_KEY": server.api_key,
                   "CONNECTOR_BASE_URL": server.base_url}
            env.pop("CONNECTOR_MAX_WAIT", None)
            report = Path(tmp) / "time.txt"
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "connector --help": [SCRIPT, "--help"],
                "connector tables": [SCRIPT, "tables"],
            }
            for argv in commands.values():  # warm the page cache and the .pyc files
                _run(argv, env, report)
            times: dict[str, list[float]] = {name: [] for name in commands}
            memory: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(RUNS):
                for name, argv in commands.items():
                    seconds, mb = _run(argv, env, report)
                    times[name].append(seconds)
                    memory[name].append(mb)
        finally:
            server.stop()
    floor_s = statistics.median(times["python -c pass"])
    floor_mb = statistics.median(memory["python -c pass"])
    print(f"median of {RUNS} fresh processes each; goal <= {GOAL_SECONDS} s and <= {GOAL_MB:g} MB")
    print(f"   {'command':<18} {'median s':>9} {'min s':>7} {'x floor':>8} {'peak RSS MB':>12} "
          f"{'x floor':>8}  goal")
    for name in commands:
        seconds, mb = statistics.median(times[name]), statistics.median(memory[name])
        goal = "" if name.startswith("python") else (
            "ok" if seconds <= GOAL_SECONDS and mb <= GOAL_MB else "OVER GOAL")
        print(f"   {name:<18} {seconds:9.3f} {min(times[name]):7.3f} {seconds / floor_s:8.1f} "
              f"{mb:12.1f} {mb / floor_mb:8.1f}  {goal}")


if __name__ == "__main__":
    main()
