"""The `[[push]]` settings that keep data true: null_values, excel_safe, merged_cells — read
once from the job file, each mistake named by file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.errors import ConfigError
from connector.jobs.config import load_job

HEAD = '[source]\napi_key_env = "MY_KEY"\n[[push]]\ntable = "People"\nkey = "Name"\n'


def job(tmp_path: Path, settings: str, file: str = "people.xlsx") -> Path:
    (tmp_path / file).write_bytes(b"")
    path = tmp_path / "job.toml"
    path.write_text(HEAD + f'file = "{file}"\n' + settings, encoding="utf-8")
    return path


def test_defaults_keep_text_as_text(tmp_path: Path) -> None:
    (spec,) = load_job(job(tmp_path, "")).pushes
    assert (spec.null_values, spec.excel_safe, spec.merged_cells) == ((), False, "refuse")


def test_the_settings_are_read(tmp_path: Path) -> None:
    settings = 'null_values = ["NA", "-"]\nexcel_safe = true\nmerged_cells = "fill"\n'
    (spec,) = load_job(job(tmp_path, settings)).pushes
    assert (spec.null_values, spec.excel_safe, spec.merged_cells) == (("NA", "-"), True, "fill")


@pytest.mark.parametrize(("settings", "file", "message"), [
    ('null_values = ["NA", ""]\n', "people.xlsx", "push[0].null_values: must be a list of non-empty strings"),
    ("null_values = 3\n", "people.xlsx", "push[0].null_values: must be a list"),
    ('excel_safe = "yes"\n', "people.csv", "push[0].excel_safe: must be true or false"),
    ('merged_cells = "merge"\n', "people.xlsx", "push[0].merged_cells: must be one of refuse, fill"),
    ('merged_cells = "fill"\n', "people.csv", "push[0].merged_cells: only applies to Excel files"),
])
def test_bad_settings_name_the_key(tmp_path: Path, settings: str, file: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"job\.toml") as caught:
        load_job(job(tmp_path, settings, file))
    assert message in str(caught.value)
