"""`make demo` runs `python -m connector.demo`: it must work end to end, quickly, every time."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_runs_end_to_end_and_says_what_it_did(tmp_path: Path) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "connector.demo", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.monotonic() - began

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # The plan is shown before anything is pushed, then the push is applied.
    assert out.index("plan: 2 create, 3 update, 0 delete") < out.index("applied: 2 create, 3 update")
    assert "Price: 125.53 → 19.99" in out  # the seeded price of Widget A1, replaced
    # The incremental sync reads exactly the pushed rows and notices the deleted ticket.
    assert "second sync: 5 changed rows read, 1 deleted, 2 tables untouched" in out
    assert "SQLite row counts: Customers 1200, Orders 2000, Products 42, Tickets 399" in out
    products = pq.read_table(tmp_path / "demo-out" / "parquet" / "Products.parquet").to_pandas()
    prices = dict(zip(products["Name"], products["Price"], strict=True))
    assert prices["Widget A1"] == 19.99 and prices["Turbo Encabulator"] == 1999.0
    assert len(products) == 42
    assert seconds < 60
