"""`make demo` runs `python -m connector.demo`: it must work end to end, every time (its time
is measured in bench/RESULTS.md, not asserted here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connector.demo import DEMO_DATA, DEMO_FILES

pytestmark = pytest.mark.slow  # the demo, make and git as processes

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_runs_end_to_end_and_says_what_it_did(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "connector.demo", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # The plan is shown before anything is pushed, then the push is applied.
    assert out.index("plan: 2 create, 3 update, 0 delete") < out.index("applied: 2 create, 3 update")
    assert "Price: 125.53 → 19.99" in out  # the seeded price of Widget A1, replaced
    # The incremental sync writes exactly the pushed rows and removes the deleted ticket; the
    # rest of what it reads is the lookback window (the whole workspace: seeded moments ago),
    # compared with the outputs and not written.
    assert "second sync: 5 rows written, 1 deleted, 2 tables untouched" in out
    window = 1200 + 2000 + (42 - 5) + 399  # Customers, Orders, unchanged Products, Tickets
    assert f"{window} rows stamped in the lookback window were read again" in out
    assert "0 had changed" in out
    assert "SQLite row counts: Customers 1200, Orders 2000, Products 42, Tickets 399" in out
    products = pq.read_table(tmp_path / "out" / "parquet" / "Products.parquet").to_pandas()
    prices = dict(zip(products["Name"], products["Price"], strict=True))
    assert prices["Widget A1"] == 19.99 and prices["Turbo Encabulator"] == 1999.0
    assert len(products) == 42


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


def test_make_demo_installs_only_the_core_and_make_install_the_dev_extra(tmp_path: Path) -> None:
    """The first minute: `make demo` on a fresh clone creates the venv and installs the package
    with its core dependencies only (no dev extra: dagster, dlt, moto...), every version
    pinned; `make install` grows the same venv with the dev extra."""
    for name in ("Makefile", "pyproject.toml", ".ci/constraints.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())

    # Run under `make test`, a child make would inherit its flags (and print directories).
    without_make = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def planned(target: str) -> list[str]:
        done = subprocess.run(
            ["make", "--no-print-directory", "-n", target], cwd=tmp_path, env=without_make,
            capture_output=True, text=True, check=True,
        )
        return done.stdout.splitlines()

    demo = planned("demo")
    installs = [line for line in demo if "bin/pip install " in line]
    assert "-m venv .venv" in demo[0]
    assert len(installs) == 1 and installs[0].endswith(" -e .")
    assert all(f"PIP_CONSTRAINT={tmp_path}/.ci/constraints.txt" in line for line in installs)
    assert demo[-1] == ".venv/bin/python -m connector.demo"
    dev = [line for line in planned("install") if "bin/pip install " in line]
    assert [line.rsplit(" ", 1)[-1] for line in dev] == [".", "'.[dev]'"]
