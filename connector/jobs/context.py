"""What the tables of one run share: the job, the client, the destinations, the state, the
results so far, and the locks that let tables run on threads.

A destination that takes one writer at a time (SQLite, DuckDB: `Capabilities`) is held by one
table at a time while the others read (`writing`); the state file and the results are
written under one lock, each table's state only after every destination committed it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import httpx

from connector.api import Client
from connector.api.counts import RequestCounts
from connector.destinations import Destination, Target
from connector.jobs.choose import RunPlan
from connector.jobs.config import Job
from connector.jobs.state import JobState, TableState, save_state
from connector.process import holding
from connector.progress import Progress
from connector.results import TableResult
from connector.schema import Table

__all__ = ["Reporter", "RunContext", "RunOptions"]


class Reporter(Protocol):
    """Receives progress events: an event name and its fields (the CLI prints them)."""

    def __call__(self, event: str, **fields: Any) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """How one run of a job runs, whatever started it (a command, Dagster, the demo, code)."""

    #: Read and plan only: nothing written, no state saved.
    dry_run: bool = False
    #: Seconds to wait for another run of the job to release its lock.
    wait: float = 0.0
    #: Compare every row with the server and repair (``--verify``); a job's
    #: ``verify_every`` turns it on every Nth run.
    verify: bool = False
    #: Progress bars on stderr: True, False, or None (when it is a terminal).
    show_progress: bool | None = False
    #: Receives the run's progress events; None: quiet (retries go to the client's log).
    report: Reporter | None = None
    #: Where the URL and key variables are read (default: the process's environment).
    environ: Mapping[str, str] | None = None
    #: An httpx transport to send requests through (tests, proxies).
    transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None
    #: Tallies the run's requests (`connector.metrics`).
    counts: RequestCounts | None = None


class RunContext:
    """The table half of a run; `state` is advanced table by table, after each commit."""

    def __init__(
        self,
        job: Job,
        client: Client,
        state: JobState,
        destinations: Sequence[Destination],
        options: RunOptions,
        emit: Reporter,
        chosen: RunPlan,
    ) -> None:
        self.job = job
        self.client = client
        self.state = state
        self.destinations = list(destinations)
        self.dry_run = options.dry_run
        self.verify = options.verify
        self.emit = emit
        self.show_progress = options.show_progress
        #: Each destination's names for the tables (`connector.jobs.choose.Placement`).
        self.placements = chosen.placements
        self.listed_rows = chosen.listed_rows
        #: Every result so far: a run stopped by a bad key still reports them.
        self.results: list[TableResult] = []
        #: Set while tables run in parallel: one bar for all of them.
        self.parallel = False
        self.bar: Progress | None = None
        #: Set when a table hit an error that ends the run (or a stop): no table starts.
        self.halt = threading.Event()
        self._held = {id(d): threading.Lock() for d in self.destinations}
        self._lock = threading.Lock()  # results, state and events, shared by the threads
        #: The tables the run writes, and one recorder of their names at a time in each
        #: destination (`claim`).
        self._placed = {table.id for table, _ in chosen.tables}
        self._claiming = [threading.Lock() for _ in self.destinations]

    def targets(self, table: Table) -> list[Target]:
        """`table` in each destination: its rows and its name there."""
        return [Target(table, p.names[table.id]) for p in self.placements]

    def claim(self, index: int, target: Target) -> None:
        """Record in destination `index` that `target`'s name holds its table; returns once
        it is recorded. The first table to commit there records the names of every table
        the run places there, in one rewrite of the record: 200 small tables had waited on
        their rewrites in turn. (Nothing is recorded before something is written; a name
        recorded for a table the run then fails to write is the one it is given again.)"""
        placement = self.placements[index]
        with self._claiming[index]:
            if placement.held.get(target.name) == target.table.id:
                return
            names = {
                name: table_id for table_id, name in placement.names.items()
                if table_id in self._placed and placement.held.get(name) != table_id
            }
            self.destinations[index].claim(names)
            placement.held.update(names)

    def record(self, result: TableResult) -> TableResult:
        with self._lock:
            self.results.append(result)
            fields = asdict(result)
            self.emit("table", **fields)
        return result

    def note(self, table: str, note: str) -> None:
        with self._lock:
            self.emit("note", table=table, note=note)

    def save(self, table: TableState, *, now: bool = True) -> None:
        """Record a table's new state and write the state file (after its commit); with
        `now` off, only in memory until the next write (the run's end writes it)."""
        with self._lock:
            self.state = self.state.with_table(table)
            if now:
                save_state(self.job.state_path, self.state)

    @contextmanager
    def writing(self, destinations: Sequence[Destination]) -> Iterator[None]:
        """Holds the one-writer destinations among `destinations` for one table's reads of
        them and writes, while tables run in parallel. A stop ends the wait for them
        (`connector.process.holding`)."""
        if not self.parallel:
            yield
            return
        held = [self._held[id(d)] for d in destinations if not d.capabilities.parallel_writes]
        with ExitStack() as stack:
            for lock in held:  # always in the destinations' order: no two tables wait on each other
                stack.enter_context(holding(lock))
            yield

    def streams_into(self, destination: Destination) -> bool:
        """Whether a table may stream straight into `destination` (else it spools, then writes)."""
        return not self.parallel or destination.capabilities.parallel_writes

    def elapsed(self, result: TableResult, seconds: float) -> TableResult:
        return replace(result, seconds=round(seconds, 3))
