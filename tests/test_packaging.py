"""What `pip install` users get: the wheel, installed into a fresh virtual environment outside
the repository, runs every command's help and the demo; its extras name what each platform
needs, as connector/extras.py maps them; a missing extra is one line naming it.

One wheel and one virtual environment for the module (its dependencies come from the package
index; pip's cache makes repeats fast). The tests share them, so they run on one xdist
worker (`xdist_group`, with ``--dist loadgroup`` in pyproject's addopts).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest

from connector.demo import DEMO_DATA, DEMO_FILES
from connector.errors import ExitCode
from connector.extras import EXTRAS
from tests.fixtures.server import RunningServer

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    #: A working directory outside the repository, for the commands run from the install.
    cwd: Path

    def run(
        self,
        *argv: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """A program of the virtual environment (``connector``, ``python``), with an
        environment that points at nothing in the repository."""
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        clean["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{clean.get('PATH', '')}"
        return subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]],
            cwd=cwd or self.cwd,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from a copy of the sources (the checkout stays untouched: no build/ or
    egg-info in it), installed into a fresh venv."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "connector", source / "connector", ignore=shutil.ignore_patterns("__pycache__")
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(base / "dist"),
         str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (base / "dist").glob("*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "--disable-pip-version-check", "install", "-q", "--no-compile",
         str(wheel)],  # bytecode for what is imported, not for every module of every dependency
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cwd = base / "work"
    cwd.mkdir()
    return Installed(wheel, venv, cwd)


def _metadata(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode()).items()


def test_the_wheel_holds_every_module_and_the_demo_files_and_nothing_else(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = {n for n in archive.namelist() if ".dist-info/" not in n}
    modules = {
        str(p.relative_to(ROOT)) for p in (ROOT / "connector").rglob("*.py")
        if "__pycache__" not in p.parts
    }  # fmt: skip
    assert modules <= names  # no subpackage left behind
    assert {f"connector/{DEMO_DATA}/{n}" for n in DEMO_FILES} <= names
    assert "connector/py.typed" in names
    assert all(n.startswith("connector/") for n in names)  # no tests, configs, bench


def test_each_extra_installs_what_connector_extras_names(installed: Installed) -> None:
    metadata = _metadata(installed.wheel)
    provided = {v for k, v in metadata if k == "Provides-Extra"}
    requires = [v for k, v in metadata if k == "Requires-Dist"]
    assert set(EXTRAS.values()) | {"bench", "dev", "docs"} == provided
    for module, extra in EXTRAS.items():  # the extra's requirement provides the module
        assert any(re.match(rf"{module}\b.*; extra == \"{extra}\"$", r) for r in requires), (
            module,
            extra,
            requires,
        )
    (dev_extras,) = [
        r for r in requires if r.startswith("table-data-connector[") and 'extra == "dev"' in r
    ]
    # `make test` on a fresh machine installs `.[dev]`: every extra the suite exercises.
    assert {"s3", "duckdb", "delta", "dagster", "docs"} <= set(
        re.search(r"\[(.*)\]", dev_extras).group(1).split(",")  # type: ignore[union-attr]
    )
    assert any(r.startswith("moto[server]") and 'extra == "dev"' in r for r in requires)
    # The Installation page's table lists exactly these extras.
    section = (ROOT / "docs" / "install.md").read_text()
    assert set(re.findall(r"^\| `([a-z0-9]+)` \|", section, flags=re.MULTILINE)) == provided
    assert not any(r.startswith(("dagster", "duckdb", "deltalake", "s3fs")) and "extra" not in r
                   for r in requires)  # fmt: skip


def test_every_command_answers_help_from_the_install(installed: Installed) -> None:
    where = installed.run("python", "-c", "import connector; print(connector.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.venv)  # not the checkout

    top = installed.run("connector", "--help")
    assert top.returncode == 0, top.stderr
    listing = top.stdout.split("Commands:", 1)[1]
    commands = re.findall(r"^  (\S+)", listing, flags=re.MULTILINE)
    assert {"sync", "export", "load", "push", "serve", "tables"} <= set(commands)
    for command in commands:
        done = installed.run("connector", command, "--help")
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.startswith(f"Usage: connector {command}")


def test_the_demo_runs_from_the_install_into_the_users_directory(installed: Installed) -> None:
    work = installed.cwd / "demo"
    work.mkdir()
    done = installed.run("python", "-m", "connector.demo", cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SQLite row counts: Customers 1200, Orders 2000, Products 42, Tickets 399" in done.stdout
    out = work / "demo-out"
    assert {f"{t}.parquet" for t in ("Customers", "Orders", "Products", "Tickets")} | {
        "_connector_tables.json"} == {p.name for p in (out / "parquet").iterdir()
    }
    assert (out / "state" / "demo.state.json").is_file()
    site = installed.venv / "lib"
    assert not [p for p in site.rglob("demo-out")]  # nothing written into the install

    chosen = installed.run("python", "-m", "connector.demo", "--out", str(installed.cwd / "mine"))
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert (installed.cwd / "mine" / "demo.db").is_file()


def test_a_missing_extra_is_one_line_naming_it(installed: Installed) -> None:
    done = installed.run("python", "-c", "import connector.dagster")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "connector.errors.MissingExtra: connector.dagster (Dagster assets) needs an optional "
        "dependency: pip install 'table-data-connector[dagster]'"
    )


@pytest.mark.parametrize(
    ("argv", "job", "line"),
    [
        (
            ["export", "--out", "s3://bucket/tables"],
            None,
            "error: s3:// storage needs an optional dependency: "
            "pip install 'table-data-connector[s3]'",
        ),
        (
            ["export", "--out", "lake", "--format", "delta"],
            None,
            "error: Delta Lake destinations needs an optional dependency: "
            "pip install 'table-data-connector[delta]'",
        ),
        (
            ["sync", "job.toml"],
            '[[destination]]\ndelta = "lake"\n',
            "error: {cwd}/job.toml: destination[0].delta: Delta Lake destinations needs an optional "
            "dependency: pip install 'table-data-connector[delta]'",
        ),
        (
            ["load", "--to", "duckdb:///lake"],
            None,
            "error: duckdb:/// destinations needs an optional dependency: "
            "pip install 'table-data-connector[duckdb]'",
        ),
        (
            ["sync", "job.toml"],
            '[[destination]]\nurl = "duckdb:///lake"\n',
            "error: {cwd}/job.toml: destination[0].url: duckdb:/// destinations needs an optional "
            "dependency: pip install 'table-data-connector[duckdb]'",
        ),
    ],
    ids=["export-s3", "export-delta", "sync-delta", "load-duckdb", "sync-duckdb"],
)
def test_a_destination_without_its_extra_is_one_line_exit_2_and_writes_nothing(
    installed: Installed,
    server: RunningServer,
    tmp_path: Path,
    argv: list[str],
    job: str | None,
    line: str,
) -> None:
    if job is not None:
        (tmp_path / "job.toml").write_text('[source]\napi_key_env = "CONNECTOR_API_KEY"\n\n' + job)
    done = installed.run(
        "connector",
        *argv,
        cwd=tmp_path,
        env={"CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": server.api_key},
    )
    assert (done.returncode, done.stdout) == (ExitCode.USAGE, ""), done.stderr
    assert done.stderr.splitlines() == [line.format(cwd=tmp_path)]
    assert not (tmp_path / "lake").exists()
