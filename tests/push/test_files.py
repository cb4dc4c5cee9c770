"""Files a push writes (the rejects CSV, --plan-out) are created as the user's umask says."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from connector.push import PushSpec, Rejected, push
from connector.push.writes import write_rejects
from tests.push.conftest import PEOPLE, InProcess


@pytest.fixture(params=[0o077, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    previous = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(previous)


def test_the_rejects_csv_and_a_saved_plan_honour_the_umask(
    tmp_path: Path, umask: int, inproc: InProcess
) -> None:
    path = tmp_path / "x.rejects.csv"
    write_rejects(path, [Rejected(2, None, "A", "bad", {"A": "=1"})], ["A"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    inproc.create_table(PEOPLE)
    plan = tmp_path / "plan.json"
    push(inproc.client(), PushSpec(pd.DataFrame({"Name": ["a"]}), table="People", key="Name", plan_out=plan))
    assert stat.S_IMODE(plan.stat().st_mode) == 0o666 & ~umask
