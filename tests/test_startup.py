"""The `connector` program starts with only what its command needs, and a Ctrl-C while it
starts is one line and exit 130, not a traceback.

What a start imports is read from the real console script run with ``python -X importtime``
(one line per module, written when the module has finished importing): deterministic, unlike
timings, which `python -m bench startup` measures.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from connector import cli
from connector.errors import ExitCode
from tests.fixtures.server import RunningServer

#: The console script pip installed next to this interpreter (`connector = connector.cli:run`).
SCRIPT = Path(sys.executable).with_name("connector")

#: Data and server libraries a command that needs none must not import. (httpx imports its
#: own command line, with rich, wherever rich is installed: not in a core install, and no
#: public way around it, so it is not pinned here.)
HEAVY = ("pandas", "pyarrow", "sqlalchemy", "starlette", "uvicorn", "openpyxl", "numpy")
COMMAND_MODULES = ("connector.server", "connector.jobs", "connector.destinations", "connector.push")


@dataclass
class Start:
    code: int
    stdout: str
    stderr: str  # without the import lines
    imported: list[str]  # in the order their imports finished

    def has(self, prefix: str) -> bool:
        return any(m == prefix or m.startswith(prefix + ".") for m in self.imported)


def _start(args: list[str], env: dict[str, str] | None = None, after: float | None = None,
           signum: int = signal.SIGINT) -> Start:
    """Run `connector ARGS` under -X importtime; with `after`, send `signum` that many seconds in."""
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", str(SCRIPT), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )
    try:
        if after is not None:
            time.sleep(after)
            process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    imported, rest = [], []
    for line in err.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                imported.append(name)
        else:
            rest.append(line)
    return Start(process.returncode, out, "\n".join(rest), imported)


def _heavy(start: Start) -> list[str]:
    return [m for m in (*HEAVY, *COMMAND_MODULES) if start.has(m)]


# -- what a start imports ---------------------------------------------------------------------


@pytest.mark.slow
def test_help_lists_every_command_without_importing_any_command_module() -> None:
    start = _start(["--help"])
    assert start.code == 0, start.stderr
    assert _heavy(start) == [] and not start.has("httpx") and not start.has("connector.api")
    listed = start.stdout.split("Commands:")[1]
    for name in cli.main.list_commands(click.Context(cli.main)):
        assert f"\n  {name} " in listed, name


@pytest.mark.slow
def test_help_reads_exactly_as_with_every_command_loaded() -> None:
    """The static table cannot drift: the help printed without importing the commands is the
    help click prints from the commands themselves."""
    lazy = _start(["--help"])
    loading_all = (
        "import sys, click\n"
        "from connector.cli import _LAZY, main\n"
        "for name in _LAZY:\n"
        "    main.get_command(click.Context(main), name)\n"
        "main(['--help'], prog_name='connector')\n"
    )
    loaded = subprocess.run([sys.executable, "-c", loading_all], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "80"})
    assert loaded.returncode == lazy.code == 0, loaded.stderr
    assert lazy.stdout == loaded.stdout


@pytest.mark.parametrize("name", sorted(cli._LAZY))
def test_the_table_holds_each_lazy_command_and_its_first_sentence(name: str) -> None:
    module, attribute, first = cli._LAZY[name]
    command = getattr(importlib.import_module(module), attribute)
    assert command.name == name
    assert command.get_short_help_str(limit=10**6) == first


def test_tables_imports_the_http_client_and_no_data_library(server: RunningServer) -> None:
    table_id = server.create_table({"name": "Orders", "columns": [{"name": "Sku", "type": "text"}]})
    start = _start(["tables", "--base-url", server.base_url],
                   env={"CONNECTOR_API_KEY": server.api_key})
    assert start.code == 0, start.stderr
    assert table_id in start.stdout and "Orders" in start.stdout
    assert start.has("httpx") and start.has("connector.api.client")
    assert _heavy(start) == []
    assert not start.has("connector.schema") and not start.has("connector.workspace")


@pytest.mark.slow
def test_importing_the_cli_loads_no_data_library_and_leaves_signals_as_they_were() -> None:
    code = (
        "import signal, sys, connector.cli\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
        " signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,"
        f" sorted(m for m in {list(HEAVY)!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "[]"]


@pytest.mark.slow
def test_the_package_loads_its_public_names_on_first_use() -> None:
    code = (
        "import sys, connector\n"
        "before = 'pyarrow' in sys.modules\n"
        "from connector import Workspace, Table, ConfigError\n"
        "import connector.errors, connector.schema, connector.workspace\n"
        "assert Table is connector.schema.Table and Workspace is connector.workspace.Workspace\n"
        "assert ConfigError is connector.errors.ConfigError\n"
        "assert set(connector.__all__) <= set(dir(connector))\n"
        "try:\n    connector.Nothing\nexcept AttributeError as e:\n    print(e)\n"
        "print(before, 'pyarrow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["module 'connector' has no attribute 'Nothing'", "False True"]


# -- Ctrl-C and SIGTERM while it starts --------------------------------------------------------


def _signal_while(
    args: list[str], signum: int, window: Callable[[Start], bool | None],
    env: dict[str, str] | None = None, wanted: int = 2,
) -> list[Start]:
    """Runs that got `signum` inside `window` (True: inside; False: too early; None: too
    late), found by walking the delay: later after an early signal, earlier after a late one."""
    hits: list[Start] = []
    delay, step = 0.02, 0.01
    for _ in range(60):
        start = _start(args, env, after=delay, signum=signum)
        landed = window(start)
        if landed:
            hits.append(start)
            if len(hits) == wanted:
                break
            delay += step / 3  # look around the same spot
        elif landed is False:
            delay += step
        else:
            step = max(step / 2, 0.001)
            delay = max(0.0, delay - step)
    return hits


def _aborted_in(start: Start, module: str, importer: str) -> bool | None:
    """Whether the signal landed while `importer` was importing `module`: an import that ends
    by an exception still writes its line, so the lines end with `module` right before
    `importer` and then only the imports around it and the stop's own (ours, and modules
    built into the interpreter) (True). None: `module` was imported and the run went on
    (too late); False: it never began (too early)."""
    if module not in start.imported:
        return False
    after = start.imported[start.imported.index(module) + 1:]
    ours = importer.split(".")[0]
    if after[:1] == [importer] and all(
        m.startswith(ours) or m in sys.builtin_module_names for m in after
    ):
        return True
    return None


def _while_the_cli_imports(start: Start) -> bool | None:
    """connector.cli was importing click (it catches the signals before that)."""
    return _aborted_in(start, "click", "connector.cli")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, ExitCode.INTERRUPTED, "interrupted"),
     (signal.SIGTERM, ExitCode.TERMINATED, "terminated")],
)
def test_a_signal_while_the_cli_imports_is_one_line_and_its_exit_code(
    signum: int, code: int, line: str
) -> None:
    hits = _signal_while(["--help"], signum, _while_the_cli_imports)
    assert hits, "no signal landed while connector.cli was importing"
    for start in hits:
        assert (start.code, start.stderr, start.stdout) == (code, line, "")


def test_ctrl_c_while_a_command_imports_its_modules_is_one_line_and_130(
    server: RunningServer,
) -> None:
    """The root command runs: it is importing the HTTP client (httpx) it needs."""

    def window(start: Start) -> bool | None:
        return _aborted_in(start, "httpx", "connector.api.client")

    hits = _signal_while(["tables", "--base-url", server.base_url], signal.SIGINT, window,
                         env={"CONNECTOR_API_KEY": server.api_key})
    assert hits, "no Ctrl-C landed while httpx was importing"
    for start in hits:
        assert (start.code, start.stderr, start.stdout) == (ExitCode.INTERRUPTED, "interrupted", "")


@pytest.mark.parametrize(("set_by_user", "expected"), [(None, "1"), ("4", "4")])
def test_the_program_runs_numpy_on_one_blas_thread_unless_told(
    monkeypatch: pytest.MonkeyPatch, set_by_user: str | None, expected: str
) -> None:
    """`run` is the program's entry (the script, ``python -m connector``): OpenBLAS's
    threads would spin while numpy loads; a program that calls `main` itself keeps its
    environment."""
    if set_by_user is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", set_by_user)
    monkeypatch.setattr(sys, "argv", ["connector", "--help"])
    with pytest.raises(SystemExit) as ended:
        cli.run()
    assert ended.value.code == 0
    assert os.environ["OPENBLAS_NUM_THREADS"] == expected


LAST_AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
gc.disable()  # the cycle below is garbage that only a collection asked for finds
class Garbage:
    def __del__(self):
        print("garbage collected")
cycle = Garbage()
cycle.me = cycle
del cycle
from connector.cli import run
sys.argv = ["connector", *sys.argv[1:]]
run()
"""


@pytest.mark.slow
@pytest.mark.parametrize(("args", "code"), [(["--version"], 0), (["export", "--bogus"], 2)])
def test_the_program_ends_without_walking_what_it_leaves_behind(args: list[str], code: int) -> None:
    """At exit the interpreter's collections walked every object a command left: 0.3 to 0.8 s
    of a quiet sync. The program collects its garbage once (each cycle's `__del__` runs, as
    the interpreter's own collection would have run it) and freezes the rest; the exit
    handlers registered before it (this one) still run after it, and the exit code is the
    command's. (A process that loaded DuckDB is left alone: the DuckDB tests that read
    stderr hold that.)"""
    done = subprocess.run([sys.executable, "-c", LAST_AT_EXIT, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines()[-2:] == ["garbage collected", "frozen at exit: True"]
