"""Run a job: push its spreadsheets, then sync its tables into its destinations.

One table at a time: read (everything, or only what changed since the cursor) into a local
Arrow spool, work out which rows were deleted upstream, then write every destination, and
only then advance that table's cursor in the state file. A failure leaves the destination
and the state of that table as they were, and the run goes on with the next table.

Incremental reads filter ``updated_at`` ``gt`` the cursor; where a server refuses that
filter, they read sorted by ``updated_at`` descending and stop at the cursor. Deleted rows
are found cheaply: when the server's row count equals what the destination would hold,
nothing was deleted; only otherwise is an id-only pass made over the table.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from connector.api import MAX_PAGE_SIZE, Client
from connector.errors import (
    ApiValidationError,
    BadRequest,
    ConfigError,
    ConnectorError,
    PermissionDenied,
)
from connector.extract import Extraction, read_batches
from connector.jobs.config import Job, PushSpec, key_path
from connector.jobs.lock import job_lock
from connector.jobs.sinks import Sink, open_sink
from connector.jobs.state import JobState, RunRecord, TableState, load_state, save_state
from connector.schema import Table, arrow_schema

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "PushResult",
    "Reporter",
    "RunSummary",
    "TableResult",
    "run_job",
]

EXIT_OK, EXIT_FAILED, EXIT_PARTIAL = 0, 1, 3

#: The cursor of a table that was empty when synced: every row is newer.
EPOCH = "1970-01-01T00:00:00.000000Z"

#: Receives progress events: an event name and its fields (the CLI prints them).
Reporter = Callable[..., None]

Status = Literal["ok", "unchanged", "planned", "skipped", "failed"]


@dataclass(frozen=True)
class TableResult:
    """What a run did to one table."""

    table: str
    table_id: str
    status: Status
    read: Literal["full", "incremental", "none"] = "none"
    rows_read: int = 0
    rows_written: int = 0
    rows_deleted: int = 0
    error: str | None = None
    seconds: float = 0.0


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


@dataclass(frozen=True)
class RunSummary:
    """The outcome of a run: what a scheduler reads (``--log-format json``)."""

    job: str
    status: Literal["ok", "partial", "failed"]
    exit_code: int
    dry_run: bool
    started_at: str
    finished_at: str
    state_file: str
    destinations: list[str]
    tables: list[TableResult] = field(default_factory=list)
    pushes: list[PushResult] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_job(
    job: Job,
    *,
    dry_run: bool = False,
    wait: float = 0.0,
    report: Reporter | None = None,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> RunSummary:
    """Run `job` once. Raises ConfigError / JobLocked before doing anything; API and
    destination failures are reported in the summary (status failed or partial)."""
    emit = report or _quiet
    try:
        base_url, key = job.source.resolve(environ)
    except ConfigError as exc:
        raise ConfigError(f"{job.path}: {exc}") from None
    started = _now()
    lock = nullcontext() if dry_run else job_lock(job.lock_path, wait=wait, job=job.name)
    with lock:
        state = load_state(job.state_path)
        emit("start", job=job.name, dry_run=dry_run)
        pushes: list[PushResult] = []
        tables: list[TableResult] = []
        error: str | None = None
        try:
            with Client(base_url, key, transport=transport) as client:
                run = _Sync(job, client, state, dry_run, emit) if job.destinations else None
                chosen = run.choose() if run else None  # a bad filter stops even the pushes
                pushes = [_push(client, job, spec, dry_run, emit) for spec in job.pushes]
                if run is not None and chosen is not None:
                    tables = run.all_tables(chosen)
                    state = run.state
        except ConfigError:
            raise
        except ConnectorError as exc:  # the workspace could not be listed at all
            error = str(exc)
            emit("error", error=error)
        status, code = _outcome([*tables, *pushes], error)
        summary = RunSummary(
            job=job.name,
            status=status,
            exit_code=code,
            dry_run=dry_run,
            started_at=started,
            finished_at=_now(),
            state_file=str(job.state_path),
            destinations=[d.describe() for d in job.destinations],
            tables=tables,
            pushes=pushes,
            error=error,
        )
        if not dry_run:
            record = RunRecord(
                started_at=summary.started_at,
                finished_at=summary.finished_at,
                status=status,
                rows_written=sum(t.rows_written for t in tables),
                rows_deleted=sum(t.rows_deleted for t in tables),
            )
            save_state(job.state_path, state.with_run(record))
        emit(
            "finish",
            **{k: v for k, v in summary.to_dict().items() if k not in ("tables", "pushes")},
        )
        return summary


def _outcome(
    results: Sequence[TableResult | PushResult], error: str | None
) -> tuple[Literal["ok", "partial", "failed"], int]:
    bad = [r for r in results if r.status in ("failed", "skipped")]
    if error is not None or (bad and len(bad) == len(results)):
        return "failed", EXIT_FAILED
    if bad:
        return "partial", EXIT_PARTIAL
    return "ok", EXIT_OK


@dataclass
class _Chosen:
    """What a run will sync: tables with their filters, and those already skipped or failed."""

    results: list[TableResult]
    tables: list[tuple[Table, dict[str, dict[str, Any]]]] = field(default_factory=list)


class _Sync:
    """The sync half of a run; `state` is advanced table by table, after each commit."""

    def __init__(
        self, job: Job, client: Client, state: JobState, dry_run: bool, emit: Reporter
    ) -> None:
        self.job = job
        self.client = client
        self.state = state
        self.dry_run = dry_run
        self.emit = emit

    def choose(self) -> _Chosen:
        """The tables to sync, with their filters checked against their columns.

        Runs before any write, so a filter naming a missing column is a ConfigError that
        leaves every destination (and every pushed table) as it was.
        """
        selection = self.job.tables
        summaries = self.client.list_tables()
        chosen = _Chosen(
            [
                TableResult(name, "", "skipped", error="no such table, or the key may not read it")
                for name in selection.include or ()
                if not any(name in (s.id, s.name) for s in summaries)
            ]
        )
        for summary in (s for s in summaries if selection.wants(s.id, s.name)):
            try:
                table = self.client.get_table(summary.id)
            except ConnectorError as exc:
                status: Status = "skipped" if isinstance(exc, PermissionDenied) else "failed"
                chosen.results.append(TableResult(summary.name, summary.id, status, error=str(exc)))
                self.emit("table", **asdict(chosen.results[-1]))
            else:
                chosen.tables.append((table, self._filter(table)))
        return chosen

    def all_tables(self, chosen: _Chosen) -> list[TableResult]:
        results = list(chosen.results)
        with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="connector-sync-") as tmp:
            sinks = [open_sink(d) for d in self.job.destinations]
            for sink in sinks:
                stack.callback(sink.close)
            for table, filter in chosen.tables:
                results.append(self.one_table(table, filter, sinks, Path(tmp)))
        return results

    def _filter(self, table: Table) -> dict[str, dict[str, Any]]:
        conditions = self.job.tables.filter_for(table.id, table.name)
        for c in conditions:
            if c.column not in table.column_names:
                raise ConfigError(
                    f"{self.job.path}: {key_path('tables', 'filter', table.name, c.column)}: table "
                    f"{table.name!r} has no column {c.column!r}; columns: {table.column_names}"
                )
        return {c.column: {c.op: c.value} for c in conditions}

    def one_table(
        self, table: Table, filter: dict[str, dict[str, Any]], sinks: list[Sink], tmp: Path
    ) -> TableResult:
        began = time.monotonic()
        try:
            result = self._sync(table, filter, sinks, tmp)
        except PermissionDenied as exc:
            result = TableResult(table.name, table.id, "skipped", error=str(exc))
        except ConfigError:
            raise
        except ConnectorError as exc:
            result = TableResult(table.name, table.id, "failed", error=str(exc))
        result = replace(result, seconds=round(time.monotonic() - began, 3))
        self.emit("table", **asdict(result))
        return result

    def _sync(
        self, table: Table, filter: dict[str, dict[str, Any]], sinks: list[Sink], tmp: Path
    ) -> TableResult:
        job = self.job
        previous = self.state.table(table.id)
        fingerprint = _fingerprint(table, filter)
        incremental = (
            job.incremental
            and previous is not None
            and previous.cursor is not None
            and previous.schema == fingerprint
            and "updated_at" not in table.column_names  # the filter would hit the user column
            and all(s.exists(table) for s in sinks)
        )
        if self.dry_run:
            return self._plan(table, filter, previous if incremental else None)
        schema = arrow_schema(table)
        spool = _Spool(tmp / f"{table.id}.arrow", schema, table.system_names())
        try:
            if incremental:
                assert previous is not None and previous.cursor is not None
                cursor = self._read_changes(table, filter, previous.cursor, spool)
            else:
                newest = self._newest_or_none(table, filter) if job.incremental else None
                spool.extend(self._read(table, filter))
                cursor = newest or spool.cursor or EPOCH
            spool.close()
            return self._write(
                table, filter, sinks, spool, cursor, fingerprint, incremental=incremental
            )
        finally:
            spool.discard()

    def _write(
        self,
        table: Table,
        filter: dict[str, dict[str, Any]],
        sinks: list[Sink],
        spool: _Spool,
        cursor: str,
        fingerprint: str,
        *,
        incremental: bool,
    ) -> TableResult:
        """Apply what was read to every destination, then advance the table's state."""
        job = self.job
        schema = spool.schema
        held, deleted = self._deleted(table, filter, sinks, spool, incremental=incremental)
        if incremental and not spool.rows and not any(deleted):
            return TableResult(table.name, table.id, "unchanged", "incremental")
        for sink, gone in zip(sinks, deleted, strict=True):
            sink.write(
                spool.batches(exclude=gone),
                table,
                schema,
                "merge" if incremental else sink.destination.mode,
                deleted=gone,
                mark=job.deletes == "mark",
            )
        self.state = self.state.with_table(
            TableState(
                table_id=table.id,
                name=table.name,
                cursor=cursor if job.incremental else None,
                rows=len(held[0] - deleted[0]) if held else spool.rows,
                schema=fingerprint,
                synced_at=_now(),
            )
        )
        save_state(job.state_path, self.state)
        gone_ids = set().union(*deleted)
        return TableResult(
            table.name,
            table.id,
            "ok",
            "incremental" if incremental else "full",
            rows_read=spool.rows,
            rows_written=spool.rows - len(spool.ids & gone_ids),
            rows_deleted=len(gone_ids),
        )

    def _read(self, table: Table, filter: Mapping[str, Any]) -> Iterable[pa.RecordBatch]:
        return read_batches(
            self.client,
            table,
            filter=filter or None,
            page_size=self.job.source.page_size,
            concurrency=self.job.source.concurrency,
        )

    def _newest(self, table: Table, filter: Mapping[str, Any]) -> str | None:
        """The newest ``updated_at`` among matching rows, asked *before* reading them.

        It becomes the next cursor: a row changed while the read runs gets a later
        timestamp, so the next run reads it again, whether or not this run saw the change.
        """
        page = self.client.list_rows(
            table.id, limit=1, sort="updated_at", order="desc", filter=filter or None
        )
        return page.rows[0].updated_at if page.rows else None

    def _newest_or_none(self, table: Table, filter: Mapping[str, Any]) -> str | None:
        """`_newest`, or None where the server will not sort by ``updated_at`` (then the
        newest row read stands in, which can miss a change made during the read)."""
        try:
            return self._newest(table, filter)
        except (BadRequest, ApiValidationError):
            return None

    def _read_changes(
        self, table: Table, filter: dict[str, dict[str, Any]], cursor: str, spool: _Spool
    ) -> str:
        """Spool the rows changed since `cursor`; return the cursor for the next run."""
        changed = {**filter, "updated_at": {"gt": cursor}}
        try:
            newest = self._newest(table, changed)
        except (BadRequest, ApiValidationError) as exc:
            if exc.field not in (None, "filter", "sort", "updated_at"):
                raise
            self.emit("note", table=table.name, note="updated_at filter refused: sorted read")
            spool.extend(self._read_sorted_until(table, filter, cursor))
            return spool.cursor or cursor  # newest first: the first row read is the newest
        if newest is not None:
            spool.extend(self._read(table, changed))
        return newest or cursor

    def _read_sorted_until(
        self, table: Table, filter: Mapping[str, Any], cursor: str
    ) -> Iterator[pa.RecordBatch]:
        """Newest first, stopping at the first row not newer than the cursor."""
        extraction = Extraction(self.client, table)  # for its typing of cells
        for page in self.client.pages(
            table.id,
            page_size=self.job.source.page_size,
            sort="updated_at",
            order="desc",
            filter=filter or None,
        ):
            newer = [r for r in page.rows if (r.updated_at or "") > cursor]
            if newer:
                yield extraction.cast(newer)
            if len(newer) < len(page.rows):
                return

    def _deleted(
        self,
        table: Table,
        filter: Mapping[str, Any],
        sinks: list[Sink],
        spool: _Spool,
        *,
        incremental: bool,
    ) -> tuple[list[set[str]], list[set[str]]]:
        """Per destination: the ids it holds after the write, and those to delete from it.

        Only a merging destination (every one, on an incremental read) has rows deleted; a
        replace or an append beside it takes none, and counts as holding just the ids read.
        Both lists are empty-handed (``[]`` held) when nothing merges. Only an incremental
        read has to ask the server which ids still exist.
        """
        merges = [incremental or s.destination.mode == "merge" for s in sinks]
        if not any(merges):
            return [], [set() for _ in sinks]
        held = [
            s.live_ids(table) | spool.ids if merge else spool.ids
            for s, merge in zip(sinks, merges, strict=True)
        ]
        if self.job.deletes == "keep":
            return held, [set() for _ in sinks]
        if not incremental:  # a full read saw every id
            return held, [h - spool.ids for h in held]  # empty for those that do not merge
        total = self.client.list_rows(table.id, limit=1, filter=filter or None).total
        if total is not None and all(len(h) == total for h in held):
            return held, [set() for _ in sinks]  # the counts match: nothing was deleted
        present = self._all_ids(table, filter)
        return held, [h - present for h in held]

    def _all_ids(self, table: Table, filter: Mapping[str, Any]) -> set[str]:
        """The cheap pass: only ids are kept, from the largest pages the API gives."""
        return {
            row.id
            for page in self.client.pages(table.id, page_size=MAX_PAGE_SIZE, filter=filter or None)
            for row in page.rows
        }

    def _plan(
        self, table: Table, filter: dict[str, dict[str, Any]], previous: TableState | None
    ) -> TableResult:
        """Dry run: how many rows a real run would read, and how.

        Where the server refuses the ``updated_at`` filter, the real run reads newest first
        and stops at the cursor: the rows matching the job's filter are then the upper bound.
        """
        everything = filter or None
        if previous is not None and previous.cursor is not None:
            changed = {**filter, "updated_at": {"gt": previous.cursor}}
            try:
                total = self.client.list_rows(table.id, limit=1, filter=changed).total
            except (BadRequest, ApiValidationError):
                note = "updated_at filter refused: counting every row, an upper bound"
                self.emit("note", table=table.name, note=note)
                total = self.client.list_rows(table.id, limit=1, filter=everything).total
            return TableResult(table.name, table.id, "planned", "incremental", rows_read=total or 0)
        total = self.client.list_rows(table.id, limit=1, filter=everything).total
        return TableResult(table.name, table.id, "planned", "full", rows_read=total or 0)


class _Spool:
    """Rows read from the API, kept in a local Arrow file so every destination gets them."""

    def __init__(self, path: Path, schema: pa.Schema, system: Mapping[str, str]) -> None:
        self.path = path
        self.schema = schema
        self.id_name = system["id"]
        self.updated_name = system["updated_at"]
        self.rows = 0
        self.ids: set[str] = set()
        self.cursor: str | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = pa.ipc.new_file(str(path), schema)

    def extend(self, batches: Iterable[pa.RecordBatch]) -> None:
        assert self._writer is not None
        for batch in batches:
            if not batch.num_rows:
                continue
            self._writer.write_batch(batch)
            self.rows += batch.num_rows
            self.ids.update(batch.column(self.id_name).to_pylist())
            newest = pc.max(batch.column(self.updated_name)).as_py()
            if newest is not None:
                stamp = _iso(newest)
                self.cursor = max(self.cursor or stamp, stamp)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def batches(self, *, exclude: set[str]) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(str(self.path)) as source:
            reader = pa.ipc.open_file(source)
            drop = pa.array(sorted(exclude), pa.string())
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                if exclude:
                    batch = batch.filter(pc.invert(pc.is_in(batch.column(self.id_name), drop)))
                yield batch


def _push(client: Client, job: Job, spec: PushSpec, dry_run: bool, emit: Reporter) -> PushResult:
    from connector.push import push  # pandas-heavy; only jobs that push pay for it
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
        )
    except ConfigError as exc:  # the table or key does not fit: name the job's key at fault
        raise type(exc)(f"{job.path}: {spec.where}: {exc}") from None
    except ConnectorError as exc:  # invalid spreadsheet (nothing written), API failure
        out = PushResult(str(spec.file), spec.table, "failed", error=str(exc))
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


def _now() -> str:
    return _iso(datetime.now(UTC))


def _quiet(event: str, **fields: Any) -> None:
    pass
