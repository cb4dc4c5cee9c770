"""Run a job: push its spreadsheets, then copy its tables into its destinations.

The one pipeline. `connector sync` runs a job file (scheduled: a state file with a cursor per
table, a lock); `connector export` and `connector load` run a one-shot job built from their
flags (`connector.jobs.config.one_shot_job`: every table read in full, no state, no lock).
All share the table resolver, the sinks, `TableResult`, the statuses, `ExitCode` and the
JSON summary (`RunSummary.to_dict`).

One table at a time: read (everything, or what changed since the cursor) into a local Arrow
spool, work out which rows were deleted upstream, write every destination, and only then
advance that table's cursor in the state file. A failure leaves the destination and the
state of that table as they were, and the run goes on with the next table; a bad key (401)
stops the run. With one destination and nothing to merge (an export, a load, a replacing
sync) the read streams straight into the destination instead: no spool.

Reads. Every read goes through the one page reader (`connector.extract.Extraction`:
overlap-checked, resuming after a shift), so no row that exists throughout a read is missed:

- full: every row matching the job's filter;
- incremental: rows with ``updated_at`` > the cursor. The next cursor S is the newest
  ``updated_at`` asked *before* the read (one row, sorted by ``updated_at`` descending): a
  row changed during the read gets a later timestamp, so the next run reads it again;
- sorted fallback, where a server refuses filters on ``updated_at``: every matching row is
  read (through the reader), the rows newer than the cursor are kept, and the ids of all of
  them serve as the id pass. S is asked first as above (a sort, not a filter); where the
  sort is refused too, the newest row read stands in and a note says so;
- the id pass: ids only (``columns=[]``), in pages of 1000.

Deletions. A full read (or the fallback) saw every id: a merging destination drops the ids
it holds that the read did not see. An incremental read asks first whether anything was
deleted at all. The destination will hold H = its ids plus the ids read. After the change
read the run counts the server's matching rows (N), then reads the ids of rows with
``updated_at`` > S again (R: rows created or changed since S, which the change read may have
missed). Every row existing at the count with ``updated_at`` <= S is in H (it existed,
unchanged, throughout the change read or an earlier run), every one newer than S that still
exists at the end of the re-read is in R; so when |H ∪ R| = N, H ∪ R is exactly what existed
at the count and nothing was deleted. Otherwise the id pass decides: a destination loses
only ids the server did not list in a read during which every row present throughout was
listed — never a row that exists upstream.

The residual window of the count check: |H ∪ R| = N can only be wrong when some row newer
than S is deleted (or stops matching the job's filter) between the count and the end of the
re-read — R then lacks it — while H ∪ R holds as many rows that did not exist at the count:
rows deleted before the run (held in H) or rows created after the count (read by R, only
counted, never written). Only the first kind matters to the invariant; such a row is then kept
one run too long: the next run's counts differ and its id pass removes it. (Timestamps are
assumed never to repeat on the server: a row created after S has ``updated_at`` > S.)
``--verify`` (or ``[sync] verify_every``) skips the count and compares every row.

Requests of a quiet incremental run (nothing changed upstream), ``deletes`` delete or mark
(tests/jobs/test_sync.py counts them):

    GET /tables                                                        once
    GET /tables/{id}                                                   each table's schema,
                                                                       all before any read
    per table:
      GET /tables/{id}/rows?limit=1&sort=updated_at&order=desc&filter={updated_at>cursor}  S
      GET /tables/{id}/rows?limit=1[&filter=<job filter>]              the count N
      GET /tables/{id}/rows?limit=1000&sort=created_at&order=asc
          &filter={updated_at>cursor}                                  the re-read R (empty)

that is 1 + 4 per table (1 + 2 with ``deletes = "keep"``); nothing is written.

``--verify`` reads every row (and S before), compares a hash of each row's cells with each
merging destination's rows, and writes only what differs: rows missing or different are
rewritten, rows the server does not have are deleted (or marked). The counts per table are
in the result (`TableResult.verified`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.api import MAX_PAGE_SIZE, AsyncClient, Client
from connector.api.retry import RetryEvent
from connector.errors import (
    ApiValidationError,
    AuthError,
    BadRequest,
    ConfigError,
    ConnectorError,
    ExitCode,
    NotFound,
    PermissionDenied,
)
from connector.extract import Extraction, read_batches
from connector.jobs.config import Job, PushSpec, key_path
from connector.jobs.ids import IdSet, arrow_mask, hash_ids
from connector.jobs.sinks import Sink, no_ids, open_sink, target_names
from connector.jobs.state import JobState, RunRecord, TableState, load_state, save_state
from connector.progress import Progress, progress
from connector.schema import Table, arrow_schema

__all__ = [
    "PushResult",
    "Reporter",
    "RunSummary",
    "Status",
    "TableResult",
    "Terminated",
    "Verified",
    "interrupt_code",
    "interrupted_summary",
    "raise_if_stopped",
    "run_job",
    "stop_signals",
    "use_system_allocator",
]

#: The cursor of a table that was empty when synced: every row is newer.
EPOCH = "1970-01-01T00:00:00.000000Z"
#: Tables read at once (each a thread). Their requests share the client's one adaptive
#: concurrency limit, so this bounds the threads and open writers, not the load.
TABLE_WORKERS = 16
#: Destinations that take several tables' writes at once: a file (or object, or Delta
#: table) per table, a server database. Others (SQLite and other embedded databases: one writer per file) are written
#: one table at a time while their tables are read in parallel, each to a spool first.
PARALLEL_KINDS = frozenset({"parquet", "csv", "delta"})  # delta: a table directory each
PARALLEL_DATABASES = ("postgresql",)

#: Receives progress events: an event name and its fields (the CLI prints them).
Reporter = Callable[..., None]

#: What happened to a table or a push. ``unchanged``: nothing to write (incremental);
#: ``planned``: a dry run; ``skipped``: the key may not read it (403).
Status = Literal["ok", "unchanged", "planned", "skipped", "failed"]
Read = Literal["full", "incremental", "verify", "none"]


@dataclass(frozen=True)
class Verified:
    """What a verifying run found wrong in the destinations (summed over them) and repaired:
    rows missing or different rewritten, extra rows (the server has no such id) deleted."""

    missing: int = 0
    different: int = 0
    extra: int = 0

    def __add__(self, other: Verified) -> Verified:
        return Verified(
            self.missing + other.missing, self.different + other.different, self.extra + other.extra
        )


@dataclass(frozen=True)
class TableResult:
    """What a run did to one table."""

    table: str
    table_id: str
    status: Status
    read: Read = "none"
    rows_read: int = 0
    rows_written: int = 0
    rows_deleted: int = 0
    error: str | None = None
    seconds: float = 0.0
    #: Where the table went: a file per file destination, a table name per SQL one.
    targets: tuple[str, ...] = ()
    #: Set on a verifying run (``--verify``): what it found and repaired.
    verified: Verified | None = None


@dataclass(frozen=True)
class PushResult:
    """What a run did (or, dry, would do) with one spreadsheet."""

    file: str
    table: str
    status: Status
    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    error: str | None = None
    #: On a dry run, the plan as a person reads it (counts, a sample of each change).
    plan: str | None = None
    #: Rows the server rejected (the push is then partial).
    rejected: int = 0


#: A run's outcome. ``interrupted``: stopped by Ctrl-C or SIGTERM (exit 130 / 143); every
#: table finished before the stop is written and its state saved, the one in flight is left
#: as it was (its writes rolled back), as after a crash-safe stop.
RunStatus = Literal["ok", "partial", "failed", "interrupted"]


@dataclass(frozen=True)
class RunSummary:
    """The outcome of a run: what a scheduler reads (``--log-format json``, ``--json``)."""

    job: str
    status: RunStatus
    exit_code: int
    dry_run: bool
    started_at: str
    finished_at: str
    #: None for a one-shot job (export, load): it keeps no state.
    state_file: str | None
    destinations: list[str]
    tables: list[TableResult] = field(default_factory=list)
    pushes: list[PushResult] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    verified: bool = False
    #: The most requests the run allowed in flight at once (its adaptive level's peak), and
    #: the cap it adapted under (``--max-concurrency``); 0 when it stopped before its client
    #: was made (a bad job file, a missing key).
    concurrency: int = 0
    max_concurrency: int = 0

    def count(self, status: Status) -> int:
        return sum(t.status == status for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary every command prints: the fields, and totals over the tables."""
        out = asdict(self)
        out["totals"] = {
            "tables": len(self.tables),
            **{s: self.count(s) for s in ("ok", "unchanged", "planned", "skipped", "failed")},
            "rows_read": sum(t.rows_read for t in self.tables),
            "rows_written": sum(t.rows_written for t in self.tables),
            "rows_deleted": sum(t.rows_deleted for t in self.tables),
        }
        return out


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread while `stop_signals` is active.

    A KeyboardInterrupt, so everything that unwinds for Ctrl-C (the client's engine cancels
    its task, atomic writes drop their temporary file, SQL loads roll back) does the same
    for a scheduler's stop.
    """


def interrupt_code(exc: BaseException) -> ExitCode:
    """The exit code of a stop: 143 for SIGTERM (`Terminated`), 130 for Ctrl-C."""
    return ExitCode.TERMINATED if isinstance(exc, Terminated) else ExitCode.INTERRUPTED


def _interrupt_message(exc: BaseException) -> str:
    by = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
    return (
        f"interrupted by {by}: tables finished before it are written, the one in flight is "
        "left as it was; run again to finish"
    )


_signals_active = False
#: The stop a signal raised within `stop_signals`, kept in case a library swallowed it.
_stopped: KeyboardInterrupt | None = None


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` and Ctrl-C `KeyboardInterrupt`; after
    the first of them both signals are ignored until the block ends, so the unwinding (temp
    files removed, loads rolled back, the client closed, the lock released, the summary
    printed) is not cut short by a second one. Off the main thread, or nested, it does
    nothing. `run_job` runs inside it; a command may widen it to its whole body.

    The stop is also remembered (`raise_if_stopped`): code that swallows a KeyboardInterrupt
    (pyarrow does, when it imports pandas lazily) cannot make a run go on regardless.
    """
    global _signals_active, _stopped
    if _signals_active or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        global _stopped
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stopped = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        raise _stopped

    previous = signal.signal(signal.SIGINT, stop), signal.signal(signal.SIGTERM, stop)
    _signals_active, _stopped = True, None
    try:
        yield
    finally:
        _signals_active, _stopped = False, None
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def raise_if_stopped() -> None:
    """Raise the stop a signal asked for, if one did and it was swallowed on its way up.
    The runner calls it between tables and before writing one."""
    if _stopped is not None:
        raise _stopped


def interrupted_summary(
    job: str, exc: BaseException, *, started_at: str, seconds: float = 0.0,
    dry_run: bool = False, state_file: str | None = None, destinations: Sequence[str] = (),
) -> RunSummary:
    """The summary of a run stopped by `exc` (Ctrl-C or `Terminated`) before `run_job`
    could report it (for a command stopped while it parsed or waited)."""
    return RunSummary(
        job=job, status="interrupted", exit_code=interrupt_code(exc), dry_run=dry_run,
        started_at=started_at, finished_at=_now(), state_file=state_file,
        destinations=list(destinations), error=_interrupt_message(exc), seconds=seconds,
    )


def use_system_allocator() -> None:
    """Make Arrow allocate with the C library's malloc in this process (the CLI commands do).

    Arrow's default pool (mimalloc) keeps per-thread heaps and freed memory for reuse: reading
    a Parquet file back (a merge) or a read's worker threads then show tens of MB more peak
    RSS than they use. A library call leaves the process's choice alone.
    """
    pa.set_memory_pool(pa.system_memory_pool())


def run_job(
    job: Job,
    *,
    dry_run: bool = False,
    wait: float = 0.0,
    report: Reporter | None = None,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    verify: bool = False,
    show_progress: bool | None = False,
) -> RunSummary:
    """Run `job` once. Raises ConfigError / JobLocked before doing anything; API and
    destination failures are reported in the summary (status failed or partial).

    `verify` compares every row with the server and repairs (see the module docstring); a
    job's ``verify_every`` turns it on every Nth run. `show_progress`: bars on stderr (None:
    when it is a terminal).
    """
    emit = report or _quiet
    try:
        base_url, key = job.source.resolve(environ)
    except ConfigError as exc:
        if job.one_shot:  # a command's flags and environment, not a job file's keys
            raise ConfigError(
                "set the API key in CONNECTOR_API_KEY and the base URL in CONNECTOR_BASE_URL "
                f"(or --base-url): {str(exc).split(': ', 1)[-1]}"
            ) from None
        raise ConfigError(f"{job.path}: {exc}") from None
    # Retry waits go to the reporter as `retry` events; without one, to the client's default
    # (the connector.api.retry log, which the CLI prints as lines).
    on_retry = None if report is None else (lambda event: emit("retry", **event.as_dict()))
    with stop_signals():
        return _run_job(
            job, base_url, key, dry_run, wait, emit, transport, verify, show_progress, on_retry
        )


def _run_job(
    job: Job,
    base_url: str,
    key: str,
    dry_run: bool,
    wait: float,
    emit: Reporter,
    transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None,
    verify: bool,
    show_progress: bool | None,
    on_retry: Callable[[RetryEvent], None] | None,
) -> RunSummary:
    started, began = _now(), time.monotonic()
    stateful = not job.one_shot and not dry_run
    if stateful:
        from connector.jobs.lock import job_lock

        lock: Any = job_lock(job.lock_path, wait=wait, job=job.name)
    else:
        lock = nullcontext()
    pushes: list[PushResult] = []
    tables: list[TableResult] = []
    error: str | None = None
    run: _Run | None = None
    client: Client | None = None
    pushing: PushSpec | None = None  # the push in flight
    state = JobState()
    try:
        with lock:
            state = JobState() if job.one_shot else load_state(job.state_path)
            if job.verify_every and state.runs_since_verify + 1 >= job.verify_every:
                verify = True
            emit("start", job=job.name, dry_run=dry_run)
            with ExitStack() as stack:
                sinks = [open_sink(d) for d in job.destinations]
                for sink in sinks:
                    stack.callback(sink.close)
                try:
                    if not dry_run:
                        for sink in sinks:  # an unreachable database fails before any read
                            _check(job, sink)
                    client = stack.enter_context(Client(
                        base_url, key, transport=transport, max_wait=job.source.max_wait,
                        on_retry=on_retry, max_concurrency=job.source.max_concurrency,
                    ))
                    run = _Run(job, client, state, sinks, dry_run, verify, emit, show_progress)
                    chosen = run.choose() if sinks else None  # a bad filter stops the pushes too
                    for spec in job.pushes:
                        raise_if_stopped()
                        pushing = spec
                        pushes.append(_push(client, job, spec, dry_run, emit))
                        pushing = None
                    if chosen is not None:
                        tables = run.all_tables(chosen)
                        state = run.state
                    raise_if_stopped()
                except ConfigError:
                    raise
                except ConnectorError as exc:  # a bad key, an unreachable server or database
                    error = str(exc)
                    tables = list(run.results) if run is not None else []
                    emit("error", error=error)
            summary = _with_concurrency(
                _summarise(job, tables, pushes, error, started, began, dry_run, verify), client
            )
            if stateful:
                record = RunRecord(
                    started_at=summary.started_at,
                    finished_at=summary.finished_at,
                    status=summary.status,
                    rows_written=sum(t.rows_written for t in tables),
                    rows_deleted=sum(t.rows_deleted for t in tables),
                )
                save_state(job.state_path, state.with_run(record, verified=summary.verified))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (`Terminated`) under stop_signals
        # Unwound like a crash-safe stop: the table in flight rolled back, the client and
        # the sinks closed, the lock released; the state holds every table finished before
        # (saved as each finished) and no record of this run.
        tables = list(run.results) if run is not None else tables
        if pushing is not None:  # stopped mid-apply: some of its rows may be written
            pushes.append(PushResult(
                str(pushing.file), pushing.table, "failed",
                error="interrupted: rows in flight may have been written; run again to finish",
            ))
            emit("push", **asdict(pushes[-1]))
        summary = replace(
            _with_concurrency(
                _summarise(job, tables, pushes, None, started, began, dry_run, verify), client
            ),
            status="interrupted",
            exit_code=interrupt_code(exc),
            error=_interrupt_message(exc),
        )
    emit(
        "finish",
        **{k: v for k, v in summary.to_dict().items() if k not in ("tables", "pushes")},
    )
    return summary


def _summarise(
    job: Job,
    tables: list[TableResult],
    pushes: list[PushResult],
    error: str | None,
    started: str,
    began: float,
    dry_run: bool,
    verify: bool,
) -> RunSummary:
    status, code = _outcome([*tables, *pushes], error)
    return RunSummary(
        job=job.name,
        status=status,
        exit_code=code,
        dry_run=dry_run,
        started_at=started,
        finished_at=_now(),
        state_file=None if job.one_shot else str(job.state_path),
        destinations=[d.describe() for d in job.destinations],
        tables=tables,
        pushes=pushes,
        error=error,
        seconds=round(time.monotonic() - began, 3),
        verified=verify and not dry_run,
    )


def _with_concurrency(summary: RunSummary, client: Client | None) -> RunSummary:
    if client is None:
        return summary
    limit = client.concurrency
    return replace(summary, concurrency=limit.peak, max_concurrency=limit.maximum)


def _check(job: Job, sink: Sink) -> None:
    """`sink.check()`; a configuration error names the job file and the destination."""
    try:
        sink.check()
    except ConfigError as exc:
        if job.one_shot:
            raise
        raise exc.where(f"{job.path}: {sink.destination.where}: ") from None


def _outcome(
    results: Sequence[TableResult | PushResult], error: str | None
) -> tuple[Literal["ok", "partial", "failed"], int]:
    """One rule for every command: failed (1) when the run could not go on, a table or push
    failed, or nothing at all could be read; partial (3) when tables were skipped (403) or
    the server rejected rows of a push; else ok (0)."""
    rejected = [r for r in results if isinstance(r, PushResult) and r.rejected]
    failed = [r for r in results if r.status == "failed" and r not in rejected]
    skipped = [r for r in results if r.status == "skipped"]
    if error is not None or failed or (skipped and len(skipped) == len(results)):
        return "failed", ExitCode.FAILED
    if skipped or rejected:
        return "partial", ExitCode.PARTIAL
    return "ok", ExitCode.OK


@dataclass
class _Chosen:
    """What a run will copy: tables with their filters."""

    tables: list[tuple[Table, dict[str, dict[str, Any]]]] = field(default_factory=list)


class _Run:
    """The table half of a run; `state` is advanced table by table, after each commit."""

    def __init__(
        self,
        job: Job,
        client: Client,
        state: JobState,
        sinks: list[Sink],
        dry_run: bool,
        verify: bool,
        emit: Reporter,
        show_progress: bool | None,
    ) -> None:
        self.job = job
        self.client = client
        self.state = state
        self.sinks = sinks
        self.dry_run = dry_run
        self.verify = verify
        self.emit = emit
        self.show_progress = show_progress
        #: Every result so far: a run stopped by a bad key still reports them.
        self.results: list[TableResult] = []
        self.names: dict[str, str] = {}
        #: Row counts from the listing: the length of a full read's progress bar.
        self.listed_rows: dict[str, int] = {}
        #: Set while tables run in parallel: one bar for all of them, and a lock per
        #: database destination (one table written at a time; see `PARALLEL_KINDS`).
        self.parallel = False
        self.bar: Progress | None = None
        self._locks = {id(s): threading.Lock() for s in sinks}
        self._lock = threading.Lock()  # results, state and events, shared by the threads
        #: Set when a table hit an error that ends the run (or a stop): no table starts.
        self.halt = threading.Event()

    def choose(self) -> _Chosen:
        """The tables to copy, resolved by the one resolver and checked against their columns.

        Runs before any write, so an unknown table name or a filter naming a missing column
        is a ConfigError that leaves every destination (and every pushed table) as it was.
        A table id the listing lacks (a scoped key lists only what it may read) is fetched:
        a 403 skips it, a 404 is a TableNotFound.
        """
        from connector.tables import resolve_table, table_not_found

        selection = self.job.tables
        summaries = self.client.list_tables()
        where = "" if self.job.one_shot else f"{self.job.path}: "

        def resolve(value: str, key: str) -> str:
            try:
                return resolve_table(summaries, value)
            except ConfigError as exc:
                raise exc.where(f"{where}{key}") from None

        if selection.include is None:
            wanted = [s.id for s in summaries]
        else:
            wanted = list(
                dict.fromkeys(resolve(v, "--table: " if self.job.one_shot else "tables.include: ")
                              for v in selection.include)
            )
        excluded = set()
        for value in selection.exclude:
            try:
                excluded.add(resolve_table(summaries, value))
            except ConfigError:
                self.emit("note", table=value, note="tables.exclude names no table; ignored")
        filters = {
            resolve(name, f"tables.filter.{name}: "): conditions
            for name, conditions in selection.filters
        }
        listed = {s.id for s in summaries}
        chosen = _Chosen()
        self.names = target_names(summaries)
        self.listed_rows = {s.id: s.rows for s in summaries}
        ids = [t for t in wanted if t not in excluded]
        for table_id, answer in zip(ids, self.client.run(_schemas(self.client.aio, ids)), strict=True):
            try:
                if isinstance(answer, ConnectorError):
                    raise answer
                table = answer
            except NotFound:
                if table_id in listed:  # deleted since it was listed
                    self._record(TableResult(table_id, table_id, "failed", error="table deleted"))
                    continue
                raise table_not_found(summaries, table_id) from None
            except AuthError:
                raise
            except ConnectorError as exc:
                status: Status = "skipped" if isinstance(exc, PermissionDenied) else "failed"
                name = next((s.name for s in summaries if s.id == table_id), table_id)
                self._record(TableResult(name, table_id, status, error=str(exc)))
                continue
            if table.id not in self.names:  # unlisted: an id asked for by a scoped key
                self.names.update(target_names([_summary(table), *summaries]))
            chosen.tables.append((table, self._filter(table, filters.get(table.id, ()))))
        return chosen

    def _record(self, result: TableResult) -> TableResult:
        with self._lock:
            self.results.append(result)
            self.emit("table", **asdict(result))
        return result

    def note(self, table: Table, note: str) -> None:
        with self._lock:
            self.emit("note", table=table.name, note=note)

    def save(self, table: TableState) -> None:
        """Record a table's new state and write the state file (after its commit)."""
        with self._lock:
            self.state = self.state.with_table(table)
            save_state(self.job.state_path, self.state)

    def all_tables(self, chosen: _Chosen) -> list[TableResult]:
        """Every chosen table: one after another, or up to `TABLE_WORKERS` at once."""
        work = chosen.tables
        workers = min(len(work), TABLE_WORKERS, self.client.concurrency.maximum)
        with tempfile.TemporaryDirectory(prefix="connector-sync-") as tmp:
            if workers <= 1:
                for table, filter in work:
                    self.one_table(table, filter, Path(tmp))
            else:
                self._in_parallel(work, workers, Path(tmp))
        return list(self.results)

    def _in_parallel(
        self, work: list[tuple[Table, dict[str, dict[str, Any]]]], workers: int, tmp: Path
    ) -> None:
        """Tables on `workers` threads sharing the client (its loop moves to a thread of its
        own, `connector.api.engine`). An error that ends the run (a bad key, a setting), or
        a stop, lets no table start and cancels the requests of those in flight; each of
        those rolls back as a single table stopped mid-way does."""
        self.parallel = True
        total = sum(self.listed_rows.get(t.id, 0) for t, f in work if not f)
        label = f"{len(work)} tables"
        bar_wanted = self.show_progress is not False
        with (
            progress(label, total or None, enabled=self.show_progress) if bar_wanted
            else nullcontext(None) as bar,
            ThreadPoolExecutor(workers, thread_name_prefix="connector-table") as pool,
        ):
            self.bar = None if bar is None else _LockedBar(bar)
            futures = [pool.submit(self.one_table, t, f, tmp) for t, f in work]
            try:
                for future in as_completed(futures):
                    future.result()
            except BaseException:
                self.halt.set()
                for future in futures:
                    future.cancel()
                self.client.cancel()
                raise

    def _filter(self, table: Table, conditions: Iterable[Any]) -> dict[str, dict[str, Any]]:
        conditions = tuple(conditions)
        for c in conditions:
            if c.column not in table.column_names:
                raise ConfigError(
                    f"{self.job.path}: {key_path('tables', 'filter', table.name, c.column)}: table "
                    f"{table.name!r} has no column {c.column!r}; columns: {table.column_names}"
                )
        return {c.column: {c.op: c.value} for c in conditions}

    def one_table(
        self, table: Table, filter: dict[str, dict[str, Any]], tmp: Path
    ) -> TableResult | None:
        raise_if_stopped()
        if self.halt.is_set():
            return None
        began = time.monotonic()
        try:
            result = _Table(self, table, filter, tmp).run()
        except PermissionDenied as exc:
            result = TableResult(table.name, table.id, "skipped", error=str(exc))
        except (ConfigError, AuthError):
            raise
        except ConnectorError as exc:
            if self.halt.is_set():  # its requests were cancelled: it is not a result
                raise_if_stopped()
                return None
            result = TableResult(table.name, table.id, "failed", error=str(exc))
        except Exception:
            raise_if_stopped()  # a library turned our stop into its own error (DuckDB's
            raise  # "Query interrupted"): the stop it was, not a traceback
        return self._record(replace(result, seconds=round(time.monotonic() - began, 3)))

    @contextmanager
    def writing(self, sinks: Sequence[Sink]) -> Iterator[None]:
        """Holds the database destinations among `sinks` for one table's writes, while
        tables run in parallel (one that takes parallel writes is not held)."""
        if not self.parallel:
            yield
            return
        held = [self._locks[id(s)] for s in sinks if not _parallel_writes(s)]
        with ExitStack() as stack:
            for lock in held:  # always in the sinks' order: no two tables wait on each other
                stack.enter_context(lock)
            yield

    def streams_into(self, sink: Sink) -> bool:
        """Whether a table may stream straight into `sink` (else it spools, then writes)."""
        return not self.parallel or _parallel_writes(sink)


async def _schemas(client: AsyncClient, ids: Sequence[str]) -> list[Table | ConnectorError]:
    """Every table's schema, fetched at once (each answer, or the error it met)."""

    async def one(table_id: str) -> Table | ConnectorError:
        try:
            return await client.get_table(table_id)
        except ConnectorError as exc:
            return exc

    return list(await asyncio.gather(*(one(i) for i in ids)))


def _parallel_writes(sink: Sink) -> bool:
    where = sink.destination
    return where.kind in PARALLEL_KINDS or (
        where.kind == "sql" and where.target.startswith(PARALLEL_DATABASES)
    )


class _LockedBar:
    """A progress bar several table threads update."""

    def __init__(self, bar: Progress) -> None:
        self._bar = bar
        self._lock = threading.Lock()

    def update(self, n_steps: int) -> None:
        with self._lock:
            self._bar.update(n_steps)


class _Table:
    """One table of a run: its reads, its deletions, its writes, then its state."""

    def __init__(
        self, run: _Run, table: Table, filter: dict[str, dict[str, Any]], tmp: Path
    ) -> None:
        self.run_ = run
        self.job = run.job
        self.client = run.client
        self.sinks = run.sinks
        self.table = table
        self.filter = filter
        self.tmp = tmp
        self.name = run.names.get(table.id, table.name)
        self.schema = arrow_schema(table)
        self.system = table.system_names()
        self.targets = tuple(s.target(self.name) for s in self.sinks)
        self.fingerprint = _fingerprint(table, filter)

    # --- the plan -----------------------------------------------------------------------

    def run(self) -> TableResult:
        job, table = self.job, self.table
        previous = None if job.one_shot else self.run_.state.table(table.id)
        incremental = (
            job.incremental
            and previous is not None
            and previous.cursor is not None
            and previous.schema == self.fingerprint
            and "updated_at" not in table.column_names  # the filter would hit the user column
            and self._all_exist()
        )
        if self.run_.dry_run:
            return self._plan(previous if incremental else None)
        if self.run_.verify and any(self._merges(job.incremental)):
            return self._verify()
        if (
            not incremental
            and len(self.sinks) == 1
            and not any(self._merges(False))
            and self.run_.streams_into(self.sinks[0])
        ):
            return self._stream()
        spool = _Spool(self.tmp / f"{table.id}.arrow", self.schema, self.system)
        try:
            if incremental:
                assert previous is not None and previous.cursor is not None
                cursor, since, present = self._read_changes(previous.cursor, spool)
            else:
                newest = self._newest_or_none(self.filter) if job.incremental else None
                with self._bar() as bar:
                    spool.extend(_counted(self._read(self.filter), bar))
                cursor, since, present = newest or spool.cursor or EPOCH, None, spool.ids()
            spool.close()
            with self.run_.writing(self.sinks):
                return self._write(
                    spool, cursor, incremental=incremental, since=since, present=present
                )
        finally:
            spool.discard()

    def _all_exist(self) -> bool:
        with self.run_.writing(self.sinks):
            return all(s.exists(self.table, self.name) for s in self.sinks)

    def _merges(self, incremental: bool) -> list[bool]:
        return [incremental or s.destination.mode == "merge" for s in self.sinks]

    # --- reads --------------------------------------------------------------------------

    def _read(
        self,
        filter: Mapping[str, Any],
        *,
        columns: Sequence[str] | None = None,
        page_size: int | None = None,
    ) -> Extraction:
        return read_batches(
            self.client,
            self.table,
            columns=columns,
            filter=filter or None,
            page_size=page_size or self.job.source.page_size,
            concurrency=None,
        )

    def _ids(self, filter: Mapping[str, Any]) -> IdSet:
        """The id pass: ids only, through the one reader, from the largest pages the API gives."""
        return IdSet.of(b.column(0) for b in self._read(filter, columns=[], page_size=MAX_PAGE_SIZE))

    def _bar(self, *, full: bool = True) -> Any:
        """A progress bar for a read (its length: the listed row count, for a full read)."""
        if self.run_.show_progress is False or self.run_.parallel:
            return nullcontext(self.run_.bar)
        total = self.run_.listed_rows.get(self.table.id) if full and not self.filter else None
        return progress(self.table.name, total or None, enabled=self.run_.show_progress)

    def _newest(self, filter: Mapping[str, Any]) -> str | None:
        """The newest ``updated_at`` among matching rows, asked *before* reading them.

        It becomes the next cursor: a row changed while the read runs gets a later
        timestamp, so the next run reads it again, whether or not this run saw the change.
        """
        page = self.client.list_rows(
            self.table.id, limit=1, sort="updated_at", order="desc", filter=filter or None
        )
        return page.rows[0].updated_at if page.rows else None

    def _newest_or_none(self, filter: Mapping[str, Any]) -> str | None:
        """`_newest`, or None where the server will not sort by ``updated_at``."""
        try:
            return self._newest(filter)
        except (BadRequest, ApiValidationError):
            return None

    def _read_changes(self, cursor: str, spool: _Spool) -> tuple[str, str | None, IdSet | None]:
        """Spool the rows changed since `cursor`.

        Returns the next cursor, the snapshot S the count check re-reads from (None: the
        fallback read every id, which it returns as the third item instead).
        """
        changed = {**self.filter, "updated_at": {"gt": cursor}}
        try:
            newest = self._newest(changed)
        except (BadRequest, ApiValidationError) as exc:
            if exc.field not in (None, "filter", "sort", "updated_at"):
                raise
            return self._read_everything_keep_newer(cursor, spool)
        if newest is not None:
            with self._bar(full=False) as bar:
                spool.extend(_counted(self._read(changed), bar))
        return newest or cursor, newest or cursor, None

    def _read_everything_keep_newer(
        self, cursor: str, spool: _Spool
    ) -> tuple[str, None, IdSet]:
        """The sorted fallback: every matching row through the reader; those newer than the
        cursor are spooled, and every id read is the id pass."""
        self.emit_note("updated_at filter refused: every row read, the changed ones kept")
        newest = self._newest_or_none(self.filter)
        if newest is None:
            self.emit_note(
                "sorting by updated_at refused too: the next cursor is the newest row read, "
                "so a change made during this read may wait for a --verify"
            )
        after = pa.scalar(_parse(cursor), self.schema.field(self.system["updated_at"]).type)
        ids: list[np.ndarray[Any, Any]] = []

        def newer(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                ids.append(hash_ids(batch.column(0)))
                updated = batch.column(self.system["updated_at"])
                yield batch.filter(pc.fill_null(pc.greater(updated, after), False))

        with self._bar() as bar:
            spool.extend(newer(_counted(self._read(self.filter), bar)))
        return newest or spool.cursor or cursor, None, IdSet.of_hashes(ids)

    def emit_note(self, note: str) -> None:
        self.run_.note(self.table, note)

    # --- deletions ----------------------------------------------------------------------

    def _gone(
        self,
        spool: _Spool,
        *,
        incremental: bool,
        since: str | None,
        present: IdSet | None,
    ) -> tuple[int | None, list[pa.Array]]:
        """Per destination, the ids to delete from it; and the rows the first merging
        destination holds after the write (None: not counted).

        Only a merging destination (every one, on an incremental read) has rows deleted; a
        replace or an append beside it takes none. Destinations' ids are streamed, chunk by
        chunk, against sets of hashes (`connector.jobs.ids`): memory stays flat.
        """
        merges = self._merges(incremental)
        nothing = [no_ids() for _ in self.sinks]
        if not any(merges) or self.job.deletes == "keep":
            return None, nothing
        read = spool.ids()
        merging = [s for s, merge in zip(self.sinks, merges, strict=True) if merge]
        if present is None:
            assert since is not None
            held = self._unless_nothing_deleted(merging, read, since)
            if held is not None:
                return held, nothing
            present = self._ids(self.filter)
        gone: list[pa.Array] = []
        rows: int | None = None
        # Read here but not listed by the id pass after: deleted during this run.
        vanished = _concat(
            b.column(0).filter(arrow_mask(~present.contains(b.column(0))))
            for b in spool.batches()
        ) if len(read.minus(present)) else no_ids()
        for sink, merge in zip(self.sinks, merges, strict=True):
            if not merge:
                gone.append(no_ids())
                continue
            count, chunks = 0, [vanished]
            for ids in sink.live_ids(self.table, self.name):
                hashes = hash_ids(ids)
                count += len(ids) - int(read.contains_hashes(hashes).sum())
                chunks.append(ids.filter(arrow_mask(~present.contains_hashes(hashes))))
            gone.append(_concat(chunks))
            if rows is None:
                rows = count + len(read) - len(IdSet.of([gone[-1]]))
        return rows, gone

    def _unless_nothing_deleted(self, sinks: list[Sink], read: IdSet, since: str) -> int | None:
        """The count check (see the module docstring): the rows each destination will hold,
        when that equals the server's count for every one of them; else None (an id pass
        is due)."""
        total = self.client.list_rows(self.table.id, limit=1, filter=self.filter or None).total
        if total is None:
            return None
        newer = self._ids({**self.filter, "updated_at": {"gt": since}})
        extra = read | newer
        first: int | None = None
        for sink in sinks:
            count = in_read = in_extra = 0
            for ids in sink.live_ids(self.table, self.name):
                hashes = hash_ids(ids)
                count += len(ids)
                in_read += int(read.contains_hashes(hashes).sum())
                in_extra += int(extra.contains_hashes(hashes).sum())
            if count + len(extra) - in_extra != total:
                return None
            if first is None:
                first = count + len(read) - in_read
        return first

    # --- writes -------------------------------------------------------------------------

    def _write(
        self,
        spool: _Spool,
        cursor: str,
        *,
        incremental: bool,
        since: str | None,
        present: pa.Array | None,
    ) -> TableResult:
        """Apply what was read to every destination, then advance the table's state."""
        job, table = self.job, self.table
        rows, gone = self._gone(spool, incremental=incremental, since=since, present=present)
        if incremental and not spool.rows and not any(len(g) for g in gone):
            return TableResult(
                table.name, table.id, "unchanged", "incremental", targets=self.targets
            )
        read = spool.ids()
        changed = read.minus(IdSet.of(gone))
        raise_if_stopped()  # a stop swallowed during the read: write nothing
        for sink, g, merge in zip(self.sinks, gone, self._merges(incremental), strict=True):
            mode = "merge" if merge else sink.destination.mode
            sink.write(
                spool.batches(exclude=g),
                table,
                self.schema,
                mode,
                name=self.name,
                deleted=g,
                changed=changed,
                mark=job.deletes == "mark",
            )
        all_gone = IdSet.of(gone)
        if rows is None:  # not counted on the way (deletes = "keep"): count what is held now
            merging = [s for s, m in zip(self.sinks, self._merges(incremental), strict=True) if m]
            rows = sum(map(len, merging[0].live_ids(table, self.name))) if merging else spool.rows
        self._save(cursor, rows)
        return TableResult(
            table.name,
            table.id,
            "ok",
            "incremental" if incremental else "full",
            rows_read=spool.rows,
            rows_written=spool.rows - int(all_gone.contains_hashes(read.hashes).sum()),
            rows_deleted=len(all_gone),
            targets=self.targets,
        )

    def _stream(self) -> TableResult:
        """One destination, nothing to merge: straight from the reader into it, no spool."""
        (sink,) = self.sinks
        newest = self._newest_or_none(self.filter) if self.job.incremental else None
        tap = _Tap(self.system["updated_at"])
        with self._bar() as bar:
            extraction = self._read(self.filter)
            written = sink.write(
                tap(_counted(extraction, bar)),
                self.table,
                extraction.schema,
                sink.destination.mode,
                name=self.name,
            )
        self._save(newest or tap.cursor or EPOCH, written)
        return TableResult(
            self.table.name,
            self.table.id,
            "ok",
            "full",
            rows_read=tap.rows,
            rows_written=written,
            targets=self.targets,
        )

    def _verify(self) -> TableResult:
        """Read every row, compare each merging destination row by row, write the difference."""
        from connector.jobs.sinks import batch_digest

        job, table = self.job, self.table
        newest = self._newest_or_none(self.filter)
        spool = _Spool(self.tmp / f"{table.id}.arrow", self.schema, self.system)
        try:
            with self._bar() as bar:
                spool.extend(_counted(self._read(self.filter), bar))
            spool.close()
            upstream = _Digest.of(
                (batch_digest(b, self.schema.names) for b in spool.batches()), spool.rows
            )
            found = Verified()
            written = deleted = 0
            read = spool.ids()
            raise_if_stopped()
            with self.run_.writing(self.sinks):
                for sink, merge in zip(self.sinks, self._merges(job.incremental), strict=True):
                    if not merge:  # replaced or appended, as a full run does
                        written = max(written, sink.write(
                            spool.batches(), table, self.schema, sink.destination.mode,
                            name=self.name,
                        ))
                        continue
                    missing, different, extra = upstream.compare(
                        sink.digest(table, self.name, self.schema), spool
                    )
                    if job.deletes == "keep":
                        extra = no_ids()
                    found += Verified(len(missing), len(different), len(extra))
                    rewrite = IdSet.of([missing, different])
                    if len(rewrite) or len(extra):
                        only = _concat([missing, different])
                        sink.write(
                            spool.batches(only=only),
                            table,
                            self.schema,
                            "merge",
                            name=self.name,
                            deleted=extra,
                            changed=rewrite,
                            mark=job.deletes == "mark",
                        )
                    written = max(written, len(rewrite))
                    deleted = max(deleted, len(extra))
            self._save(newest or spool.cursor or EPOCH, len(read))
        finally:
            spool.discard()
        return TableResult(
            table.name,
            table.id,
            "ok",
            "verify",
            rows_read=spool.rows,
            rows_written=written,
            rows_deleted=deleted,
            targets=self.targets,
            verified=found,
        )

    def _save(self, cursor: str, rows: int) -> None:
        if self.job.one_shot:
            return
        self.run_.save(
            TableState(
                table_id=self.table.id,
                name=self.table.name,
                cursor=cursor if self.job.incremental else None,
                rows=rows,
                schema=self.fingerprint,
                synced_at=_now(),
            )
        )

    def _plan(self, previous: TableState | None) -> TableResult:
        """Dry run: how many rows a real run would read, and how.

        Where the server refuses the ``updated_at`` filter, the real run reads every row and
        keeps the newer ones: the rows matching the job's filter are then the upper bound.
        """
        table, filter = self.table, self.filter
        everything = filter or None
        if previous is not None and previous.cursor is not None:
            changed = {**filter, "updated_at": {"gt": previous.cursor}}
            try:
                total = self.client.list_rows(table.id, limit=1, filter=changed).total
            except (BadRequest, ApiValidationError):
                self.emit_note("updated_at filter refused: counting every row, an upper bound")
                total = self.client.list_rows(table.id, limit=1, filter=everything).total
            return TableResult(table.name, table.id, "planned", "incremental", rows_read=total or 0)
        total = self.client.list_rows(table.id, limit=1, filter=everything).total
        return TableResult(table.name, table.id, "planned", "full", rows_read=total or 0)


class _Digest:
    """Every upstream row's id hash and cell hash, sorted by id hash (16 bytes a row)."""

    def __init__(self, pairs: np.ndarray[Any, Any]) -> None:
        pairs.sort(order="id")  # in place
        self.ids: np.ndarray[Any, Any] = np.ascontiguousarray(pairs["id"])
        self.cells: np.ndarray[Any, Any] = np.ascontiguousarray(pairs["cells"])

    @classmethod
    def of(cls, digests: Iterable[pa.Table], rows: int) -> _Digest:
        """From the digests of `rows` rows, filled into one array as they come."""
        pairs = np.empty(rows, dtype=[("id", np.int64), ("cells", np.int64)])
        at = 0
        for d in digests:
            n = d.num_rows
            pairs["id"][at : at + n] = hash_ids(d.column("id"))
            pairs["cells"][at : at + n] = d.column("hash").to_numpy()
            at += n
        return cls(pairs[:at])

    def compare(
        self, held: Iterable[pa.Table], spool: _Spool
    ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """Ids missing from `held` (a destination's digest, streamed), held with other
        cells, and held but not upstream."""
        seen = np.zeros(len(self.ids), np.bool_)
        different: list[pa.Array] = []
        extra: list[pa.Array] = []
        for chunk in held:
            ids = chunk.column("id").combine_chunks()
            hashes = hash_ids(ids)
            at = np.searchsorted(self.ids, hashes)
            at[at == len(self.ids)] = 0
            found = self.ids[at] == hashes if len(self.ids) else np.zeros(len(ids), np.bool_)
            seen[at[found]] = True
            cells = chunk.column("hash").to_numpy()
            changed = found.copy()
            changed[found] = self.cells[at[found]] != cells[found]
            extra.append(ids.filter(arrow_mask(~found)))
            different.append(ids.filter(arrow_mask(changed)))
        lost = IdSet(self.ids[~seen])
        missing = _concat(
            b.column(0).filter(arrow_mask(lost.contains(b.column(0)))) for b in spool.batches()
        ) if len(lost) else no_ids()
        return missing, _concat(different), _concat(extra)


def _concat(arrays: Iterable[pa.Array]) -> pa.Array:
    chunks = [a for a in arrays if len(a)]
    return pa.concat_arrays(chunks) if chunks else no_ids()


def _counted(batches: Iterable[pa.RecordBatch], bar: Progress | None) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        raise_if_stopped()  # a table thread sees a stop at its next batch
        if bar is not None:
            bar.update(batch.num_rows)
        yield batch


class _Tap:
    """Counts the rows streaming through and notes the newest ``updated_at`` among them."""

    def __init__(self, updated_name: str) -> None:
        self.updated_name = updated_name
        self.rows = 0
        self.cursor: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.rows += batch.num_rows
            self.cursor = _newer(self.cursor, batch.column(self.updated_name))
            yield batch


def _newer(cursor: str | None, stamps: pa.Array) -> str | None:
    """The later of `cursor` and the newest of `stamps` (UTC microseconds). Read as integers:
    a time-zone-aware timestamp scalar's `as_py` would make pyarrow import pandas."""
    micros = pc.max(stamps.cast(pa.int64())).as_py() if len(stamps) else None
    if micros is None:
        return cursor
    stamp = _iso(_EPOCH + timedelta(microseconds=micros))
    return max(cursor or stamp, stamp)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Spool:
    """Rows read from the API, kept in a local Arrow file so every destination gets them.

    Their ids are kept as 64-bit hashes (8 bytes a row, `connector.jobs.ids`).
    """

    def __init__(self, path: Path, schema: pa.Schema, system: Mapping[str, str]) -> None:
        self.path = path
        self.schema = schema
        self.id_name = system["id"]
        self.updated_name = system["updated_at"]
        self.rows = 0
        self.cursor: str | None = None
        self._hashes: list[np.ndarray[Any, Any]] = []
        self._ids: IdSet | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = pa.ipc.new_file(str(path), schema)

    def extend(self, batches: Iterable[pa.RecordBatch]) -> None:
        assert self._writer is not None
        for batch in batches:
            if not batch.num_rows:
                continue
            self._writer.write_batch(batch)
            self.rows += batch.num_rows
            self._hashes.append(hash_ids(batch.column(self.id_name)))
            self._ids = None
            self.cursor = _newer(self.cursor, batch.column(self.updated_name))

    def ids(self) -> IdSet:
        """The ids spooled."""
        if self._ids is None:
            self._ids = IdSet.of_hashes(self._hashes)
            self._hashes = [self._ids.hashes]
        return self._ids

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def batches(
        self, *, exclude: pa.Array | None = None, only: pa.Array | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The spooled rows, without the ids in `exclude`, or just those in `only`.

        Filtered batches are gathered and compacted every `_COMPACT` batches: a few rows
        filtered out of a batch read from the spool still share its dictionaries, which keep
        the whole batch's memory alive while a writer waits to fill a row group.
        """
        filtered: list[pa.RecordBatch] = []
        # Read, not memory-mapped: mapped pages of a large spool would count as resident.
        with pa.OSFile(str(self.path)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                rows = batch.num_rows
                if exclude is not None and len(exclude):
                    batch = batch.filter(pc.invert(pc.is_in(batch.column(self.id_name), exclude)))
                if only is not None:
                    batch = batch.filter(pc.is_in(batch.column(self.id_name), only))  # few
                if batch.num_rows == rows:
                    yield batch
                elif batch.num_rows:
                    filtered.append(batch)
                    if len(filtered) >= _COMPACT:
                        yield from _compacted(filtered)
                        filtered = []
        yield from _compacted(filtered)


#: Filtered spool batches compacted together (see `_Spool.batches`).
_COMPACT = 64


def _compacted(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if batches:
        yield from pa.Table.from_batches(batches).combine_chunks().to_batches()


def _summary(table: Table) -> Any:
    from connector.api.models import TableSummary

    return TableSummary(table.id, table.name, len(table.columns), 0, "")


def _push(client: Client, job: Job, spec: PushSpec, dry_run: bool, emit: Reporter) -> PushResult:
    from connector.push import push, written_before  # pandas-heavy: only jobs that push pay
    from connector.push.report import describe_plan

    try:
        result = push(
            client,
            spec.file,
            table=spec.table,
            key=list(spec.key),
            mode=spec.mode,
            sheet=spec.sheet,
            dry_run=dry_run,
            progress=False,
            date_format=spec.date_format,
        )
    except ConfigError as exc:  # the table or key does not fit: name the job's key at fault
        raise exc.where(f"{job.path}: {spec.where}: ") from None
    except ConnectorError as exc:  # invalid spreadsheet (nothing written), API failure
        done = written_before(exc)  # what an apply stopped part-way had written
        out = PushResult(
            str(spec.file),
            spec.table,
            "failed",
            created=done.created if done else 0,
            updated=done.updated if done else 0,
            deleted=done.deleted if done else 0,
            error=str(exc),
            rejected=len(done.rejected) if done else 0,
        )
    else:
        counts = result.plan.counts if dry_run else result.applied
        rejected = len(result.rejected)
        out = PushResult(
            str(spec.file),
            spec.table,
            "failed" if rejected else "planned" if dry_run else "ok",
            created=counts.created,
            updated=counts.updated,
            deleted=counts.deleted,
            unchanged=counts.unchanged,
            error=f"the server rejected {rejected} rows" if rejected else None,
            plan=describe_plan(result.plan) if dry_run else None,
            rejected=rejected,
        )
    emit("push", **asdict(out))
    return out


def _fingerprint(table: Table, filter: Mapping[str, Any]) -> str:
    """Changes when the columns or the job's filter change: then a full re-read is due."""
    columns = [(c.name, c.type, c.options) for c in table.columns]
    raw = json.dumps([table.name, columns, filter], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _iso(value: datetime) -> str:
    """The API's timestamp shape (microseconds, ``Z``), comparable as a string."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


def _now() -> str:
    return _iso(datetime.now(UTC))


def _quiet(event: str, **fields: Any) -> None:
    pass
