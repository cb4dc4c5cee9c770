"""A write that meets a full disk (ENOSPC) fails in one line and leaves nothing behind.

Each destination kind is written on a small tmpfs of its own (the tests run as root; a
machine that refuses the mount fails them, never skips): a first export or load fits, then
the disk is filled to within a few pages and more rows come. That write fails: exit code 1,
one line naming the destination and the disk's error, no traceback, no Rust panic, no
warning; and every file left at the destination is one its records account for (the table's
file, a Delta version's or an Iceberg snapshot's files, the database) -- the orphans the
failed write made are gone at once. With the room back, the next run succeeds, leaves no
orphan either, and holds exactly the server's rows, value by value.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.destinations.outcomes import (
    KINDS,
    NOISE,
    SPEC,
    Kind,
    command,
    connector,
    held_rows,
    orphans,
    rows_of,
    server_rows,
)
from tests.fixtures.server import RunningServer

FIRST = 2000
#: How each kind says the disk is full (SQLite's own words for ENOSPC).
FULL = {"sqlite": "database or disk is full"}


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[object]:
    """mount_tmpfs(size) -> a fresh tmpfs of that size (``2m``), unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.fail(f"these tests need to mount a tmpfs (as root): {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file that takes all the room on `disk` but `leave` bytes."""
    ballast = disk / "ballast"
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(0, shutil.disk_usage(disk).free - leave))
    return ballast


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_full_disk_fails_in_one_line_and_leaves_no_orphan(
    server: RunningServer, mount_tmpfs: object, kind: Kind
) -> None:
    disk = mount_tmpfs(kind.disk)  # type: ignore[operator]
    table_id = server.create_table(SPEC)
    server.insert_rows(table_id, rows_of(0, FIRST))
    args = command(kind.name, disk)
    code, out, err = connector(server, *args)
    assert code == 0, out + err

    server.insert_rows(table_id, rows_of(FIRST, kind.more))
    ballast = fill(disk, kind.left)
    code, out, err = connector(server, *args)

    assert code == 1, out + err
    failures = [line for line in out.splitlines() if "failed" in line and "Orders" in line]
    assert len(failures) == 1, out
    words = FULL.get(kind.name, "No space left on device")
    assert words in failures[0], failures[0]
    assert str(disk) in failures[0]  # the destination named
    for noise in NOISE:
        assert noise not in out + err, out + err
    assert [line for line in err.splitlines() if not line.startswith("retrying in ")] == []
    ballast.unlink()
    assert orphans(kind.name, disk) == {}  # the failed write's files are gone already

    code, out, err = connector(server, *args)
    assert code == 0, out + err
    assert orphans(kind.name, disk) == {}
    assert held_rows(kind.name, disk) == server_rows(server, table_id)
