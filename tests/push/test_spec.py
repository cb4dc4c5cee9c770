"""A push is told what to do once, in a `PushSpec` checked when it is built, and answers with
one `PushResult`; an error that stops its writes says what they had written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from connector.api import Client, RetryPolicy
from connector.errors import ConfigError, PermissionDenied
from connector.push import PushResult, PushSpec, push, written_before
from connector.push.spec import Names
from tests.push.conftest import PEOPLE, InProcess


@pytest.mark.parametrize(("settings", "parameter", "flag"), [
    ({"date_format": "%m/%Y"}, "date_format '%m/%Y': it must hold a day, a month and a year",
     "--date-format '%m/%Y': it must hold a day, a month and a year"),
    ({"date_format": "dd/mm/yyyy"}, "date_format: must be a strftime format like %d/%m/%Y",
     "--date-format: must be a strftime format like %d/%m/%Y"),
    ({"mode": "sync"}, "mode 'sync': choose one of insert, update, upsert, mirror",
     "--mode 'sync': choose one of insert, update, upsert, mirror"),
    ({"merged_cells": "merge"}, "merged_cells 'merge': choose one of refuse, fill",
     "--merged-cells 'merge': choose one of refuse, fill"),
    ({"null_values": ["NA", ""]}, "null_values ['NA', '']: give a list of non-empty texts",
     "--null-values ['NA', '']: give a list of non-empty texts"),
    ({"max_delete_ratio": 1.5}, "max_delete_ratio must be between 0 and 1, not 1.5",
     "--max-delete-ratio must be between 0 and 1, not 1.5"),
    ({"allow_delete": -1}, "allow_delete must be 0 or more, not -1",
     "--allow-delete must be 0 or more, not -1"),
    ({"concurrency": 0}, "concurrency must be at least 1, not 0",
     "--concurrency must be at least 1, not 0"),
])
def test_a_spec_is_checked_when_built_naming_each_setting_as_its_author_wrote_it(
    settings: dict[str, Any], parameter: str, flag: str
) -> None:
    """The library's default names the parameter; the command's spec names its flag."""
    named: list[tuple[Names, str]] = [("parameters", parameter), ("flags", flag)]
    for names, message in named:
        with pytest.raises(ConfigError) as caught:
            PushSpec("people.csv", table="People", key="Name", names=names, **settings)
        assert str(caught.value).startswith(message), (names, str(caught.value))


def test_a_spec_holds_one_type_per_setting() -> None:
    spec = PushSpec("people.csv", table="People", key=["Name", "Zip"], null_values=["NA"],
                    rejects="bad.csv")  # type: ignore[arg-type]
    assert (spec.key, spec.null_values, spec.rejects) == (("Name", "Zip"), ("NA",), Path("bad.csv"))


class _RefusingTheSecondBulkCreate(httpx.AsyncBaseTransport):
    """The reference app, except that the second bulk create is refused (403)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.bulk = inner, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/bulk"):
            self.bulk += 1
            if self.bulk == 2:
                return httpx.Response(403, json={"error": {
                    "code": "FORBIDDEN", "message": "this key may not change this table"}})
        return await self.inner.handle_async_request(request)


def test_an_error_that_stops_the_writes_carries_what_they_wrote(inproc: InProcess) -> None:
    """The error is the API's own (a caller catches `PermissionDenied` as ever) and its
    `written` is the push's result so far: exactly the rows the table now holds, of the 250
    planned."""
    table_id = inproc.create_table(PEOPLE)
    transport = _RefusingTheSecondBulkCreate(inproc.transport)
    source = pd.DataFrame({"Name": [f"n{i:03d}" for i in range(250)]})
    retry = RetryPolicy(initial_backoff=0.001, max_backoff=0.01)
    with (Client("http://push.test/v1", inproc.key, transport=transport, retry=retry) as client,
          pytest.raises(PermissionDenied) as caught):
        push(client, PushSpec(source, table="People", key="Name", concurrency=1))

    written = caught.value.written
    assert isinstance(written, PushResult) and written_before(caught.value) is written
    held = len(inproc.rows(table_id))
    assert 100 <= held < 250 and (written.created, written.updated, written.deleted) == (held, 0, 0)
    assert written.plan is not None and len(written.plan.creates) == 250
    assert (written.file, written.table) == ("DataFrame", "People")


@pytest.mark.slow  # a fresh interpreter
def test_a_job_file_with_pushes_is_read_without_pandas(tmp_path: Path) -> None:
    """A job's pushes are read into specs by every sync, also one that never pushes: the push
    package loads its readers (pandas) only when a push runs."""
    (tmp_path / "people.csv").write_text("Name\nAnn\n", encoding="utf-8")
    job = tmp_path / "job.toml"
    job.write_text('[source]\n[[push]]\nfile = "people.csv"\ntable = "People"\nkey = "Name"\n',
                   encoding="utf-8")
    code = ("import sys\nfrom connector.jobs.config import load_job\n"
            f"specs = load_job({str(job)!r}).pushes\n"
            "print([type(s).__name__ for s in specs], 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['PushSpec']", "False"]
