"""`python -m bench [NAME ...]`: run every `bench/bench_*.py` (or the named ones) in turn.

Each module exposes `main() -> None` and prints its own figures and ratios.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def _names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))


def run(selected: list[str]) -> None:
    names = [f"bench_{n.removeprefix('bench_')}" for n in selected] or _names()
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"--- {name}: {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    run(sys.argv[1:])
