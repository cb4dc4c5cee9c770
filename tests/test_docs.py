"""The manual works and says what the code does: the site opened from disk reaches every page,
every link of the README and the pages points at a file, and the exit codes the docs and
every command's ``--help`` show are the code's, and hold."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner

from connector.cli import main
from connector.errors import EXIT_CODES, ExitCode
from tests.fixtures.server import RunningServer

ROOT = Path(__file__).resolve().parents[1]


class _Links(HTMLParser):
    """The ``href`` and ``src`` of a page, and its element ids."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.links.append(value)
            elif name == "id" and value is not None:
                self.ids.add(value)


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text())
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it (strict), in a folder of its own."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow  # mkdocs builds the site
def test_the_site_opened_from_disk_reaches_every_page_and_every_link_is_a_file(site: Path) -> None:
    """What a browser does with file://: a link is a path to a file (a folder shows a
    listing, not its index.html), and an anchor must be an id of the page it points at."""
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    reached, queue = {"index.html"}, ["index.html"]
    while queue:
        page = queue.pop()
        for link in _parse(site / page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another site, or this page
            target = (site / page).parent / unquote(parts.path)
            assert target.is_file(), f"{page}: {link} is not a file ({target})"
            if parts.fragment and target.suffix == ".html":
                assert unquote(parts.fragment) in _parse(target).ids, f"{page}: {link}"
            name = target.resolve().relative_to(site.resolve()).as_posix()
            if name in pages and name not in reached:
                reached.add(name)
                queue.append(name)
    nav = {f"{Path(p).stem}.html" for p in (ROOT / "docs").glob("*.md")}
    assert nav <= reached, f"not reachable from index.html: {nav - reached}"


def test_every_relative_link_of_the_readme_and_the_pages_is_a_file() -> None:
    """As GitHub shows them: the README links into docs/, the pages to each other."""
    for source in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.DOTALL)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            parts = urlsplit(link)
            if parts.scheme or not parts.path:
                continue
            assert (source.parent / parts.path).is_file(), f"{source.name}: {link}"


def test_the_readme_is_a_landing_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 8192
    first_block = re.search(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
    assert first_block is not None
    assert [line.split()[:2] for line in first_block.group(1).splitlines()] == [["make", "demo"], ["make", "test"]]


def test_the_docs_exit_code_table_is_the_codes() -> None:
    page = (ROOT / "docs" / "commands.md").read_text()
    section = page[page.index("\n## Exit codes\n") :]
    rows = re.findall(r"^\| `(\d+)` \| (.+) \|$", section, flags=re.MULTILINE)
    assert [(int(code), meaning) for code, meaning in rows] == [(int(c), m) for c, m in EXIT_CODES.items()]
    assert set(EXIT_CODES) == set(ExitCode)


@pytest.mark.parametrize("command", [[], ["sync"], ["export"], ["load"], ["push"], ["apply"]])
def test_every_command_that_runs_things_ends_its_help_with_the_codes(command: list[str]) -> None:
    shown = " ".join(CliRunner().invoke(main, [*command, "--help"], terminal_width=100).output.split())
    listed = shown[shown.index("Exit codes, the same from every command:") :]
    for code, meaning in EXIT_CODES.items():
        assert f"{int(code)} {meaning}" in listed, (command, code)


def _run(server: RunningServer, key: str, *args: str, cwd: Path) -> tuple[int, dict[str, object]]:
    env = {**os.environ, "CONNECTOR_BASE_URL": server.base_url, "CONNECTOR_API_KEY": key}
    done = subprocess.run(
        [sys.executable, "-m", "connector", "--max-wait", "0", *args, "--json"],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_a_refused_key_exits_2_and_a_failed_table_1(server: RunningServer, tmp_path: Path) -> None:
    """As the table says: a key the server refuses (401) is configuration to fix; a table
    that fails (here, a number float64 cannot hold) fails the run, the others written."""
    exact = server.create_table({"name": "Exact", "columns": [{"name": "N", "type": "number"}]})
    server.insert_rows(exact, [{"N": 2**53 + 1}])
    fine = server.create_table({"name": "Fine", "columns": [{"name": "N", "type": "number"}]})
    server.insert_rows(fine, [{"N": 1}])

    code, summary = _run(server, "key_Refused0123456789abcdef", "export", "--out", "out", cwd=tmp_path)
    assert (code, summary["exit_code"]) == (ExitCode.USAGE, ExitCode.USAGE)

    code, summary = _run(server, server.api_key, "export", "--out", "out", cwd=tmp_path)
    statuses = {t["table"]: t["status"] for t in summary["tables"]}  # type: ignore[attr-defined]
    assert statuses == {"Exact": "failed", "Fine": "ok"}
    assert (code, summary["status"]) == (ExitCode.FAILED, "failed")
    assert (tmp_path / "out" / "Fine.parquet").is_file()
    assert not (tmp_path / "out" / "Exact.parquet").exists()
