"""How every command that runs something ends: one summary, one exit code, whatever happens.

`drive` runs a command's body under `stop_signals` and turns each way it can end into a
`RunSummary` printed once (``--json``: the JSON summary on stdout; text: the command's own
lines) and an exit code (`connector.errors.ExitCode`):

- the body's summary (ok, partial, failed);
- a `ConnectorError` before the body could report (a bad flag or job file, a refused key,
  the lock held): a failed summary with the error's own exit code, and the error line;
- Ctrl-C or SIGTERM before the body could report: an interrupted summary (130 / 143).

The text of errors is one line on stderr (``error: ...``), never a traceback unless
``--debug``. A table thread that did not stop in time does not hold the process open
(`connector.process.exit_now`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

import click

from connector.errors import ConnectorError
from connector.process import exit_now, stop_signals, use_system_allocator
from connector.results import RunSummary
from connector.stamps import now

__all__ = ["drive", "print_json"]


def drive(
    ctx: click.Context,
    name: Callable[[], str],
    body: Callable[[], RunSummary],
    *,
    as_json: bool,
    text: Callable[[RunSummary], None],
    destinations: Sequence[str] = (),
    dry_run: bool = False,
    indent: int | None = 2,
    events: Callable[[RunSummary], None] | None = None,
    ended: Callable[[RunSummary], None] | None = None,
) -> NoReturn:
    """Run `body` and end the command as the module docstring says. `name()` is the job's
    name as known when it ends (a job file's, once read). `text` prints a summary for
    people, its error included. `events`: the command reports as a stream of JSON events
    (sync's ``--log-format json``), which hears of a run stopped before it began as its last
    event; the stop then prints no line of its own. `ended` hears of the summary the
    command ends with, whichever it is, before it is printed (sync's metrics file)."""
    started, began = now(), time.monotonic()
    made: RunSummary | None = None
    with stop_signals():
        try:
            use_system_allocator()
            summary = body()
        except ConnectorError as exc:  # before the run could report: a flag, a file, the lock
            made = RunSummary.failed(
                name(), exc, started_at=started, seconds=round(time.monotonic() - began, 3),
                dry_run=dry_run, destinations=list(destinations),
            )
            if ended is not None:
                ended(made)
            if as_json:
                print_json(made, indent)
            raise
        except KeyboardInterrupt as exc:  # before the run began (a lock wait): nothing done
            summary = made = RunSummary.interrupted(
                name(), exc, started_at=started, seconds=round(time.monotonic() - began, 3),
                dry_run=dry_run, destinations=list(destinations),
            )
            if events is not None and as_json:
                events(made)
    if ended is not None:
        ended(summary)
    if as_json:
        print_json(summary, indent)
        if summary.status == "interrupted":
            if events is None:  # an event stream ends with the stop's own event
                click.echo(summary.error, err=True)
        elif summary.error and events is None:  # the lines text output shows
            click.secho(f"error: {summary.error}", fg="red", err=True)
            for push in summary.pushes:  # each problem of a refused source on its own line
                if push.error == summary.error and not push.rejected:
                    for problem in push.problems:
                        click.echo(f"  {problem}", err=True)
    else:
        text(summary)  # its error, if any, in the command's own words
        if summary.status == "interrupted":
            click.echo(summary.error, err=True)
    exit_now(summary.exit_code)
    ctx.exit(summary.exit_code)
    raise AssertionError("unreachable")  # ctx.exit raises


def print_json(summary: RunSummary, indent: int | None = 2) -> None:
    click.echo(json.dumps(summary.to_dict(), indent=indent, default=str))
