"""Progress bars on a terminal, silence everywhere else (cron, CI, pipes, notebooks)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import click

from connector.reporting import shown

__all__ = ["Progress", "progress"]


class Progress(Protocol):
    def update(self, n_steps: int) -> None: ...


class _Silent:
    def update(self, n_steps: int) -> None:
        pass


@contextmanager
def progress(label: str, total: int | None, *, enabled: bool | None = None) -> Iterator[Progress]:
    """A bar on stderr when it is a terminal (or `enabled` says so), else a no-op."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show:
        yield _Silent()
        return
    bar: Any = click.progressbar(
        length=total, label=shown(label), file=sys.stderr, show_pos=True, show_eta=True
    )
    with bar:
        yield bar
