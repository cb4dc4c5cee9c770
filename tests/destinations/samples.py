"""A table with every column type, and rows whose values are known independently of our code.

Shared by the load tests (and the subprocesses they kill), so expectations are written once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from connector.schema import Column, Table, arrow_schema

OPTIONS = ("open", "on hold", "closed")

TABLE = Table(
    id="tbl_orders",
    name="orders",
    columns=(
        Column("Name", "text", id="col_Name", required=True),
        Column("Status", "choice", id="col_Status", options=OPTIONS),
        Column("Amount", "number", id="col_Amount"),
        Column("Paid", "checkbox", id="col_Paid"),
        Column("Due", "date", id="col_Due"),
        # user columns named like our system fields must survive
        Column("id", "text", id="col_id"),
        Column("created_at", "text", id="col_created_at"),
    ),
)

T0 = datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
T1 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

#: Frame-shaped rows: system fields `_id`, `_created_at`, `_updated_at` first.
ROWS: list[dict[str, Any]] = [
    {"_id": "row_1", "_created_at": T0, "_updated_at": T1, "Name": "Ada", "Status": "open",
     "Amount": 12.5, "Paid": True, "Due": date(2024, 3, 31), "id": "A-1", "created_at": "yesterday"},
    {"_id": "row_2", "_created_at": T0, "_updated_at": T0, "Name": 'quote " comma , newline \n end',
     "Status": "on hold", "Amount": -0.1, "Paid": False, "Due": date(1970, 1, 1), "id": "",
     "created_at": None},
    # every optional cell empty: nulls, never "nan" or ""
    {"_id": "row_3", "_created_at": T1, "_updated_at": T1, "Name": "", "Status": None,
     "Amount": None, "Paid": None, "Due": None, "id": None, "created_at": None},
    {"_id": "row_4", "_created_at": T1, "_updated_at": T1, "Name": "ünïcødé ✓ \\. NULL \\N",
     "Status": "closed", "Amount": 1e300, "Paid": True, "Due": date(2999, 12, 31), "id": "x",
     "created_at": "\\."},
]

SCHEMA = arrow_schema(TABLE)

ROOT = Path(__file__).resolve().parents[2]


def batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows as one Arrow batch with the table's schema (what extraction yields)."""
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


def numbered(n: int, *, start: int = 0, name: str = "row") -> list[dict[str, Any]]:
    """`n` simple, distinct rows with ids row_<start>... and Name '<name> <i>'."""
    return [
        {"_id": f"row_{i}", "_created_at": T0, "_updated_at": T0, "Name": f"{name} {i}",
         "Status": OPTIONS[i % 3], "Amount": float(i), "Paid": i % 2 == 0,
         "Due": date(2024, 1, 1 + i % 28), "id": None, "created_at": None}
        for i in range(start, start + n)
    ]


def batches(rows: list[dict[str, Any]], size: int = 100) -> Iterator[pa.RecordBatch]:
    for start in range(0, len(rows), size):
        yield batch(rows[start : start + size])


def wait_while_running(proc: subprocess.Popen[Any], ready: Callable[[], bool]) -> None:
    """Wait until `ready()` is true, failing (with the process's output) if `proc` ends first.

    No deadline of its own: a busy machine only makes the moment later, and a process that
    never gets there is pytest-timeout's to fail (``timeout`` in pyproject.toml)."""
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            output = out + (err or "") if isinstance(out, str) else (out or b"").decode(errors="replace")
            raise AssertionError(f"it ended before it got there (exit {proc.returncode}):\n{output[-3000:]}")
        time.sleep(0.01)


def kill_when(argv: list[str], ready: Callable[[], bool], timeout: float = 60.0) -> None:
    """Run `argv` (from the repo root), SIGKILL it as soon as `ready()` is true.

    Fails if the process ends by itself first (`wait_while_running`).
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_while_running(proc, ready)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None and proc.returncode is None:
            proc.kill()
        proc.wait(timeout=timeout)
        if proc.stdout:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def kill_midway(code: str, *args: str, marker: Path) -> None:
    """Run Python `code` with `args`; it creates `marker` mid-write, and is killed then."""
    kill_when([sys.executable, "-c", code, *args, str(marker)], marker.exists)
