"""Tables on threads: up to `TABLE_WORKERS` at once, the main thread only waiting.

Every table runs on a worker thread, even when there is one: the main thread then waits on
a lock, which a signal interrupts at once, so Ctrl-C or SIGTERM is seen whatever a
destination is doing (a call into a database's or Delta's native code may not return for a
while, and a signal handler runs only between Python instructions of the thread it lands
on). An error that ends the run (a bad key, a setting) or a stop lets no table start and
cancels the requests of those in flight; each rolls back as a single stopped table does.
The workers are given `STOP_GRACE` seconds to unwind; one that does not is left behind (see
`connector.process.exit_now`).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from pathlib import Path

from connector.errors import AuthError, ConfigError, ConnectorError, PermissionDenied
from connector.jobs.choose import Filter, RunPlan
from connector.jobs.context import RunContext
from connector.jobs.table import TableSync
from connector.process import STOP_GRACE, TABLE_THREADS, raise_if_stopped, unwaited
from connector.progress import Progress, progress
from connector.results import TableResult
from connector.schema import Table
from connector.scratch import Scratch

__all__ = ["TABLE_WORKERS", "run_tables"]

#: Tables read at once (each a thread). Their requests share the client's one adaptive
#: concurrency limit, so this bounds the threads and open writers, not the load.
TABLE_WORKERS = 16


def run_tables(run: RunContext, chosen: RunPlan) -> list[TableResult]:
    """Every chosen table, on up to `TABLE_WORKERS` threads; the results in finishing order."""
    for result in chosen.decided:
        run.record(result)
    work = chosen.tables
    if not work:
        return list(run.results)
    workers = min(len(work), TABLE_WORKERS, run.client.concurrency.maximum)
    run.parallel = workers > 1
    with Scratch("connector-sync-") as tmp:
        total = sum(run.listed_rows.get(t.id, 0) for t, f in work if not f)
        bar_wanted = run.parallel and run.show_progress is not False
        with (
            progress(f"{len(work)} tables", total or None, enabled=run.show_progress)
            if bar_wanted else nullcontext(None) as bar
        ):
            run.bar = None if bar is None else _LockedBar(bar)
            _on_threads(run, work, workers, tmp)
    return list(run.results)


def _on_threads(
    run: RunContext, work: list[tuple[Table, Filter]], workers: int, tmp: Path
) -> None:
    # Every table's future exists before a worker starts: a stop can land while the pool
    # starts a thread (inside `submit`), with the first table already writing, and it
    # still finds every table to cancel or wait for.
    futures: list[Future[TableResult | None]] = [Future() for _ in work]
    pool = ThreadPoolExecutor(workers, thread_name_prefix=TABLE_THREADS)
    try:
        for future, (table, filter) in zip(futures, work, strict=True):
            pool.submit(_settle, future, run, table, filter, tmp)
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()  # an error that ends the run
    except BaseException:
        run.halt.set()
        for future in futures:
            future.cancel()
        run.client.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        _wait_a_little(futures)
        raise
    pool.shutdown(wait=True)


def _settle(
    future: Future[TableResult | None], run: RunContext, table: Table, filter: Filter, tmp: Path
) -> None:
    """Run one table into `future` unless it was cancelled before a worker got to it."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(_one_table(run, table, filter, tmp))
    except BaseException as exc:  # a stop or an error that ends the run: the main thread's
        future.set_exception(exc)


def _wait_a_little(futures: list[Future[TableResult | None]]) -> None:
    """Wait up to `STOP_GRACE` seconds for the tables in flight to unwind (their writes roll
    back), but not for those inside a call that would commit (`uninterruptible`), then leave
    the ones still running behind."""
    deadline = time.monotonic() + STOP_GRACE
    while (left := deadline - time.monotonic()) > 0:
        _, running = wait(futures, timeout=min(left, 0.05))
        if len(running) <= unwaited():
            return


def _one_table(run: RunContext, table: Table, filter: Filter, tmp: Path) -> TableResult | None:
    raise_if_stopped()
    if run.halt.is_set():
        return None
    began = time.monotonic()
    try:
        result = TableSync(run, table, filter, tmp).run()
    except PermissionDenied as exc:
        result = TableResult(table.name, table.id, "skipped", error=str(exc))
    except (ConfigError, AuthError):
        raise
    except ConnectorError as exc:
        if run.halt.is_set():  # its requests were cancelled: it is not a result
            raise_if_stopped()
            return None
        result = TableResult(table.name, table.id, "failed", error=str(exc))
    except Exception:
        raise_if_stopped()  # a library turned our stop into its own error (DuckDB's
        raise  # "Query interrupted"): the stop it was, not a traceback
    return run.record(run.elapsed(result, time.monotonic() - began))


class _LockedBar:
    """A progress bar several table threads update."""

    def __init__(self, bar: Progress) -> None:
        self._bar = bar
        self._lock = threading.Lock()

    def update(self, n_steps: int) -> None:
        with self._lock:
            self._bar.update(n_steps)
