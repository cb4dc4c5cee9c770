"""Run a job: push its sources, then copy its tables into its destinations.

The one pipeline. `connector sync` runs a job file (scheduled: a state file with a cursor per
table, a lock); `connector export` and `connector load` run a one-shot job built from their
flags (`connector.jobs.config.one_shot_job`: every table read in full, no state, no lock).
All share the table resolver (`connector.jobs.choose`), the destinations
(`connector.destinations`), the result model and its one status rule (`connector.results`),
`ExitCode` and the JSON summary.

A table at a time on each worker thread (`connector.jobs.schedule`), each as
`connector.jobs.table` describes: a failure leaves that table's destinations and state as
they were and the run goes on with the next table; a bad key (401) stops the run.

Requests of a quiet incremental run (nothing changed upstream), ``deletes`` delete or mark
(tests/jobs/test_sync.py counts them):

    GET /tables                                                        once
    GET /tables/{id}                                                   each table's schema,
                                                                       all before any read
    per table:
      GET /tables/{id}/rows?limit=1&sort=updated_at&order=desc&filter={updated_at>L}   S
      GET /tables/{id}/rows?limit=1[&filter=<job filter>]              the count N
      GET /tables/{id}/rows?limit=1000&sort=created_at&order=asc
          &filter={updated_at>S}                                       the re-read R (empty)

that is 1 + 4 per table (1 + 2 with ``deletes = "keep"``); nothing is written. L is the
cursor, or within the lookback window before it while that is not settled
(`connector.jobs.reads`): then the rows it holds are read too (and compared, not written).
What each destination holds is asked of it, or, when its version is what the last quiet run
saw, answered from what that run kept (`connector.destinations.remembered`).

``--verify`` reads every row (and S before), compares a hash of each row's cells with each
merging destination's rows, and writes only what differs: rows missing or different are
rewritten, rows the server does not have are deleted (or marked). The counts per table are
in the result (`TableResult.verified`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from connector.api import Client
from connector.api.retry import RetryEvent, RetryPolicy
from connector.destinations import Destination, open_destination
from connector.destinations.remembered import RememberedDestination
from connector.errors import ConfigError, ConnectorError
from connector.jobs.choose import choose
from connector.jobs.config import Job, PushSpec
from connector.jobs.context import Reporter, RunContext, RunOptions
from connector.jobs.lock import job_lock
from connector.jobs.schedule import run_tables
from connector.jobs.state import JobState, RunRecord, load_state, save_state
from connector.process import (
    interrupt_code,
    interrupt_message,
    raise_if_stopped,
    stop_signals,
)
from connector.results import PushResult, RunSummary, TableResult, outcome
from connector.stamps import now

__all__ = ["run_job"]


def run_job(job: Job, options: RunOptions | None = None) -> RunSummary:
    """Run `job` once, as `options` say (`RunOptions`; default: quietly, for real). Raises
    ConfigError / JobLocked before doing anything; API and destination failures are
    reported in the summary (status failed or partial)."""
    options = options or RunOptions()
    base_url, key = job.source.resolve(options.environ, one_shot=job.one_shot, job_file=job.path)
    with stop_signals():
        return _Runner(job, options, base_url, key).run()


class _Runner:
    """One run of a job: the lock, the state, the destinations, the client, the summary."""

    def __init__(self, job: Job, options: RunOptions, base_url: str, key: str) -> None:
        self.job, self.options, self.base_url, self.key = job, options, base_url, key
        self.emit: Reporter = options.report or _quiet
        self.started, self.began = now(), time.monotonic()
        self.tables: list[TableResult] = []
        self.pushes: list[PushResult] = []
        self.context: RunContext | None = None
        self.client: Client | None = None
        self.pushing: PushSpec | None = None  # the push in flight
        self.error_code: int | None = None  # of the error that stopped the run

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run

    def _on_retry(self) -> Callable[[RetryEvent], None] | None:
        """Retry waits go to the reporter as `retry` events; without one, to the client's
        default (the connector.api.retry log, which the CLI prints as lines)."""
        if self.options.report is None:
            return None
        return lambda event: self.emit("retry", **event.as_dict())

    def run(self) -> RunSummary:
        job, wait = self.job, self.options.wait
        stateful = not job.one_shot and not self.dry_run
        if stateful:

            def waiting(holder: str) -> None:
                self.emit("waiting", job=job.name, seconds=wait, holder=holder.strip())

            lock: Any = job_lock(job.lock_path, wait=wait, job=job.name, on_wait=waiting)
        else:
            lock = nullcontext()
        error: str | None = None
        try:
            with lock:
                state = JobState() if job.one_shot else _owned_state(job)
                if job.verify_every and state.runs_since_verify + 1 >= job.verify_every:
                    self.options = replace(self.options, verify=True)
                self.emit("start", job=job.name, dry_run=self.dry_run)
                try:
                    state = self._everything(state)
                except ConfigError:
                    raise
                except ConnectorError as exc:  # a bad key, an unreachable server or database
                    error, self.error_code = str(exc), exc.exit_code
                    self.tables = list(self.context.results) if self.context else []
                    self.emit("error", error=error)
                summary = self._summary(error)
                if stateful:
                    record = RunRecord(
                        started_at=summary.started_at,
                        finished_at=summary.finished_at,
                        status=summary.status,
                        rows_written=sum(t.rows_written for t in self.tables),
                        rows_deleted=sum(t.rows_deleted for t in self.tables),
                    )
                    if self.context is not None:
                        state = self.context.state
                    state = replace(state.with_run(record, verified=summary.verified),
                                    job_file=str(job.path))
                    save_state(job.state_path, state)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (`Terminated`) under stop_signals
            # Unwound like a crash-safe stop: the tables in flight rolled back, the client and
            # the destinations closed, the lock released; the state holds every table finished
            # before (saved as each finished) and no record of this run.
            self.tables = list(self.context.results) if self.context else self.tables
            if self.pushing is not None:  # stopped mid-apply: some of its rows may be written
                self.pushes.append(PushResult(
                    self.pushing.label, self.pushing.table, "failed",
                    error="interrupted: rows in flight may have been written; run again to finish",
                ))
                self.emit("push", **self.pushes[-1].to_dict())
            summary = replace(
                self._summary(None),
                status="interrupted",
                exit_code=interrupt_code(exc),
                error=interrupt_message(exc),
            )
        self.emit(
            "finish",
            **{k: v for k, v in summary.to_dict().items() if k not in ("tables", "pushes")},
        )
        return summary

    def _everything(self, state: JobState) -> JobState:
        """Open the destinations (an unreachable one fails before any read), then push,
        then copy the tables, then keep what the destinations answered (`keep`); returns
        the state after them."""
        job = self.job
        with ExitStack() as stack:
            destinations: list[Destination] = []
            remembered: list[RememberedDestination] = []
            for config in job.destinations:
                destination: Destination = _located(job, config.where, partial(open_destination, config))
                stack.callback(destination.close)
                version = None if job.one_shot or self.dry_run else destination.version()
                if version is not None:
                    destination = RememberedDestination(destination, version, job.memory_path)
                    remembered.append(destination)
                destinations.append(destination)
            checked = None if self.dry_run else _checking(job, destinations)
            chosen = None
            try:
                self.client = client = stack.enter_context(Client(
                    self.base_url, self.key, transport=self.options.transport,
                    retry=RetryPolicy(total_seconds=job.source.max_wait, on_retry=self._on_retry()),
                    max_concurrency=job.source.max_concurrency, counts=self.options.counts,
                    url_source=job.source.url_source(one_shot=job.one_shot, job_file=job.path),
                    key_source=job.source.key_source(one_shot=job.one_shot, job_file=job.path),
                ))
                if destinations:  # a bad filter stops the pushes too
                    chosen = choose(
                        client, job, destinations, lambda t, n: self.emit("note", table=t, note=n),
                        early_pages=not (  # read in part, or after the pushes' writes
                            job.incremental or job.tables.filters or self.dry_run
                            or self.options.verify or job.pushes
                        ),
                    )
            except Exception:
                if checked is not None:
                    checked.result()  # a destination that cannot be written is said first
                raise
            if checked is not None:
                checked.result()
            for spec in job.pushes:
                raise_if_stopped()
                self.pushing = spec
                self.pushes.append(_push(client, job, spec, self.dry_run, self.emit))
                self.pushing = None
            if chosen is not None:
                self.context = RunContext(
                    job, client, state, destinations, self.options, self.emit, chosen
                )
                self.tables = run_tables(self.context, chosen)
                state = self.context.state
            for memory in remembered:
                memory.keep()
            raise_if_stopped()
        return state

    def _summary(self, error: str | None) -> RunSummary:
        job = self.job
        status, code = outcome([*self.tables, *self.pushes], error, self.error_code)
        limit = self.client.concurrency if self.client is not None else None
        return RunSummary(
            job=job.name,
            status=status,
            exit_code=code,
            dry_run=self.dry_run,
            started_at=self.started,
            finished_at=now(),
            state_file=None if job.one_shot else str(job.state_path),
            destinations=[d.describe() for d in job.destinations],
            tables=self.tables,
            pushes=self.pushes,
            error=error,
            seconds=round(time.monotonic() - self.began, 3),
            verified=self.options.verify and not self.dry_run,
            concurrency=limit.peak if limit else 0,
            max_concurrency=limit.maximum if limit else 0,
        )


def _owned_state(job: Job) -> JobState:
    """The job's state; a state file another job file of the same name keeps is refused."""

    state = load_state(job.state_path)
    other = state.job_file
    if other is not None and Path(other) != job.path and Path(other).is_file():
        raise ConfigError(
            f"{job.path}: name: job files {other} and {job.path} are both named "
            f"{job.name!r} and would share the state file {job.state_path}; give one of "
            "them another name (or another sync.state_dir)"
        )
    return state


def _checking(job: Job, destinations: list[Destination]) -> Future[None]:
    """Check every destination (reachable, writable) on a thread of its own, while the
    tables are listed and their schemas fetched: opening a catalog imports its library
    (pyiceberg: a second or more), which the requests need not wait for. Its `result()`
    raises the first destination's failure."""
    def check_all() -> None:
        for destination in destinations:
            _located(job, destination.config.where, destination.check)

    pool = ThreadPoolExecutor(1, thread_name_prefix="check")
    try:
        return pool.submit(check_all)
    finally:
        pool.shutdown(wait=False)  # the thread ends with the checks


def _located(job: Job, where: str, call: Callable[[], Any]) -> Any:
    """`call()`; a configuration error names the job file and the destination."""
    try:
        return call()
    except ConfigError as exc:
        if job.one_shot:
            raise
        raise exc.where(f"{job.path}: {where}: ") from None


def _push(client: Client, job: Job, spec: PushSpec, dry_run: bool, emit: Reporter) -> PushResult:
    from connector.push.pipeline import push  # pandas-heavy: only jobs that push pay
    from connector.push.report import failed

    try:
        out = push(client, spec, dry_run=dry_run, progress=False)
    except ConfigError as exc:  # the table or key does not fit: name the job's key at fault
        raise exc.where(f"{job.path}: {spec.where}: ") from None
    except ConnectorError as exc:  # invalid spreadsheet (nothing written), API failure
        out = failed(exc, spec.label, spec.table)
    emit("push", **out.to_dict())
    return out


def _quiet(event: str, **fields: Any) -> None:
    pass
