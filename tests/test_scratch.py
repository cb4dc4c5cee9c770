"""Scratch folders (`connector.scratch`): removed when done, and a killed process's removed by
the next process that makes one of its kind, never a live process's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector import scratch
from connector.scratch import Scratch

#: Makes a scratch folder of the prefix given, writes a file in it, says where, then waits.
HOLDER = """
import sys, time
from connector.scratch import Scratch
held = Scratch(sys.argv[1])
(held.path / "rows.arrow").write_bytes(b"x" * 1000)
print(held.path, flush=True)
time.sleep(120)
"""


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp folder of the test's own, for this process and the ones it starts; nothing
    swept yet in it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch, "_swept", set())
    return tmp_path


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    """Another process holding a scratch folder `connector-test-...` until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, "connector-test-"], stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def held_folder(proc: subprocess.Popen[str]) -> Path:
    assert proc.stdout is not None
    folder = Path(proc.stdout.readline().strip())
    assert (folder / "rows.arrow").is_file()
    return folder


def test_a_scratch_folder_is_removed_when_done(temp: Path) -> None:
    with Scratch("connector-test-") as folder:
        (folder / "spool.arrow").write_bytes(b"rows")
        assert folder.parent == temp
    assert not folder.exists()
    kept = Scratch("connector-test-")
    kept.cleanup()
    assert not kept.path.exists()


@pytest.mark.slow  # starts a process
def test_a_killed_processs_folder_is_removed_by_the_next_one_made(
    temp: Path, holder: subprocess.Popen[str]
) -> None:
    dead = held_folder(holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert dead.is_dir()  # the kill left it
    with Scratch("connector-other-"):  # another kind sweeps only its own
        assert dead.is_dir()
    with Scratch("connector-test-") as mine:
        assert not dead.exists()
        assert sorted(temp.iterdir()) == [mine]


@pytest.mark.slow  # starts a process
def test_a_live_processs_folder_and_files_with_no_lock_are_left(
    temp: Path, holder: subprocess.Popen[str]
) -> None:
    alive = held_folder(holder)
    unlocked = temp / "connector-test-unlocked"  # files, no lock: not ours to judge
    unlocked.mkdir()
    (unlocked / "rows.arrow").write_bytes(b"rows")
    emptied = temp / "connector-test-emptied"  # a kill between removing its lock and it
    emptied.mkdir()
    with Scratch("connector-test-"):
        assert (alive / "rows.arrow").is_file()
        assert (unlocked / "rows.arrow").is_file()
        assert not emptied.exists()


@pytest.mark.slow  # starts a process
def test_a_process_sweeps_each_kind_once(temp: Path, holder: subprocess.Popen[str]) -> None:
    with Scratch("connector-test-"):
        pass
    dead = held_folder(holder)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with Scratch("connector-test-"):  # swept already: not listed again
        assert dead.is_dir()
