"""`make demo` runs `python -m connector.demo`: it must work end to end, quickly, every time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from connector.demo import DEMO_DATA, DEMO_FILES

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_runs_end_to_end_and_says_what_it_did(tmp_path: Path) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "connector.demo", "--out", str(tmp_path / "out")],
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
    products = pq.read_table(tmp_path / "out" / "parquet" / "Products.parquet").to_pandas()
    prices = dict(zip(products["Name"], products["Price"], strict=True))
    assert prices["Widget A1"] == 19.99 and prices["Turbo Encabulator"] == 1999.0
    assert len(products) == 42
    assert seconds < 60


def test_the_demo_writes_only_under_its_output_directory_default_demo_out(tmp_path: Path) -> None:
    """Run from a directory of the user's choosing: everything lands in ./demo-out there, the
    job files beside their outputs (a rerun of `connector sync demo-out/demo.toml` works),
    and nothing is written into the package."""
    package = ROOT / "connector"
    before = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    done = subprocess.run(
        [sys.executable, "-m", "connector.demo"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-out"]
    out = tmp_path / "demo-out"
    assert {"demo.toml", "demo-push.toml", "demo-products.csv", "demo.db", "parquet", "state"} <= {
        p.name for p in out.iterdir()
    }
    assert (out / "state" / "demo.state.json").is_file()
    assert "$ connector sync demo-out/demo.toml" in done.stdout
    after = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    assert after == before


def test_the_demo_files_exist_once_in_the_package_not_in_configs() -> None:
    """One copy of each demo file (package data); configs/ keeps the production-style jobs."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in DEMO_FILES:
        assert [f for f in tracked if Path(f).name == name] == [f"connector/{DEMO_DATA}/{name}"]
    assert (ROOT / "configs" / "nightly-warehouse.toml").is_file()
