"""The push package's public surface, pinned so it cannot grow by accident."""

from __future__ import annotations

import pandas as pd
import pytest

import connector.push
from tests.push.conftest import PEOPLE, InProcess


def test_public_names() -> None:
    assert connector.push.__all__ == [
        "MODES",
        "Counts",
        "DeleteGuard",
        "Mode",
        "Plan",
        "PlanError",
        "Problem",
        "PushResult",
        "PushSpec",
        "Query",
        "Rejected",
        "SourceError",
        "ValidationReport",
        "apply",
        "push",
        "written_before",
    ]
    assert all(hasattr(connector.push, name) for name in connector.push.__all__)


def test_a_progress_bar_when_asked(inproc: InProcess, capsys: pytest.CaptureFixture[str]) -> None:
    inproc.create_table(PEOPLE)
    frame = pd.DataFrame({"Name": [f"n{i}" for i in range(150)]})
    result = connector.push.push(inproc.client(), connector.push.PushSpec(frame, table="People", key="Name"), progress=True)
    assert result.created == 150
    assert "push People" in capsys.readouterr().err
    connector.push.push(inproc.client(), connector.push.PushSpec(frame, table="People", key="Name"), dry_run=True)
    assert capsys.readouterr().err == ""  # nothing to send: no bar
