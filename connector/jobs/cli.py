"""`connector sync JOB.toml`: parse, run the job, print what happened. No logic lives here."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from connector.errors import ConnectorError
from connector.jobs.config import load_job
from connector.jobs.runner import (
    RunSummary,
    interrupted_summary,
    run_job,
    stop_signals,
    use_system_allocator,
)

__all__ = ["describe_event", "sync"]


@click.command()
@click.argument("job_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Read and plan only: no writes, no state change.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON event per line on stderr and a JSON summary on stdout.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the job's state and lock here (overrides sync.state_dir).",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for another run of the same job to finish before giving up.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Read every row, compare it with each merging destination, repair what differs "
    "(missing, different, extra rows) and report it. See also sync.verify_every.",
)
@click.pass_context
def sync(
    ctx: click.Context,
    job_file: Path,
    dry_run: bool,
    log_format: str,
    state_dir: Path | None,
    wait: float,
    verify: bool,
) -> None:
    """Run the job in JOB_FILE: push its spreadsheets, then sync its tables.

    Incremental jobs read only rows changed since the last run and merge them into every
    destination, removing (or marking) rows deleted upstream. The API key comes from the
    environment variable the job names in source.api_key_env.

    \b
    Exit codes: 0 ok · 1 failed (a table or push failed, or none could be read)
                2 bad job file or usage
                3 partial (tables skipped: the key may not read them; rows rejected)
                75 another run of this job holds the lock (see --wait)
                130 / 143 stopped by Ctrl-C / SIGTERM (cleanly: nothing half-written;
                    JSON: status "interrupted")

    \b
    Examples:
      connector sync demo-out/demo.toml
      connector sync configs/nightly-warehouse.toml --log-format json --wait 600
      connector sync demo-out/demo.toml --dry-run
      connector sync demo-out/demo.toml --verify
    """
    as_json = log_format == "json"
    report = _json_event if as_json else _TextReport()
    use_system_allocator()
    started, began = _now(), time.monotonic()
    # Ctrl-C and a scheduler's stop (SIGTERM) unwind like an error: temp files go, open
    # loads roll back, the lock is released; the run reports status "interrupted".
    name = job_file.stem  # the job's name once its file is read
    with stop_signals():
        try:
            job = load_job(job_file)
            name = job.name
            if state_dir is not None:
                job = job.with_state_dir(state_dir)
            summary = run_job(job, dry_run=dry_run, wait=wait, report=report, verify=verify)
        except ConnectorError as exc:
            if as_json:  # a scheduler still gets the one summary, in the usual shape
                failed = _failed_before_start(name, exc, started, began, dry_run)
                click.echo(json.dumps(failed.to_dict()))
            raise
        except KeyboardInterrupt as exc:  # before the run began (a lock wait): nothing done
            summary = interrupted_summary(
                name, exc, started_at=started, dry_run=dry_run,
                seconds=round(time.monotonic() - began, 3),
            )
            if as_json:
                report("finish", **{k: v for k, v in summary.to_dict().items()
                                    if k not in ("tables", "pushes")})
    if as_json:
        click.echo(json.dumps(summary.to_dict()))
    else:
        _text_summary(summary)
    if summary.status == "interrupted" and not as_json:  # JSON: the finish event says it
        click.echo(summary.error, err=True)
    ctx.exit(summary.exit_code)


def _failed_before_start(
    name: str, exc: ConnectorError, started: str, began: float, dry_run: bool
) -> RunSummary:
    """The summary of a run that failed before it began (a bad job file, its lock held)."""
    return RunSummary(
        job=name,
        status="failed",
        exit_code=exc.exit_code,
        dry_run=dry_run,
        started_at=started,
        finished_at=_now(),
        state_file=None,
        destinations=[],
        error=str(exc),
        seconds=round(time.monotonic() - began, 3),
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_event(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), file=sys.stderr, flush=True)


class _TextReport:
    """Events as lines on stderr. The ``job NAME`` line waits for the next event, so a job
    stopped by a configuration error found at run time (a push naming a column the table
    lacks) prints its one error line and nothing else."""

    def __init__(self) -> None:
        self.pending: str | None = None

    def __call__(self, event: str, **fields: Any) -> None:
        line = describe_event(event, **fields)
        if event == "start":
            self.pending = line
            return
        if self.pending is not None:
            click.echo(self.pending, err=True)
            self.pending = None
        if line is not None:
            click.echo(line, err=True)


def describe_event(event: str, **fields: Any) -> str | None:
    """A run's progress event as the line (or lines) a person reads; None for quiet ones."""
    if event == "table":
        return f"  {_table_line(fields)}"
    if event == "push":
        plan = fields.get("plan")
        head = f"  {_push_line(fields)}"
        return (
            head if not plan else head + "\n" + "\n".join(f"    {ln}" for ln in plan.splitlines())
        )
    if event == "retry":  # a wait before a request is tried again
        return str(fields["message"])  # as every command prints it
    if event == "note":
        return f"  {fields['table']}: {fields['note']}"
    if event == "start":
        dry = " (dry run: nothing is written)" if fields["dry_run"] else ""
        return f"job {fields['job']}{dry}"
    return None


def _table_line(t: dict[str, Any]) -> str:
    name = f"{t['table']:<20}"
    if t["status"] in ("failed", "skipped"):
        return f"{name} {t['status'].upper()}: {t['error']}"
    if t["status"] == "planned":
        return f"{name} would read {t['rows_read']} rows ({t['read']})"
    if t["status"] == "unchanged":
        return f"{name} unchanged ({t['read']}, {t['seconds']:.1f}s)"
    line = (
        f"{name} {t['read']:<11} {t['rows_read']:>7} read {t['rows_written']:>7} written "
        f"{t['rows_deleted']:>5} deleted  {t['seconds']:.1f}s"
    )
    if t.get("verified") is not None:
        v = t["verified"]
        line += (
            f"\n  {'':<20} verified: {v['missing']} missing, {v['different']} different "
            f"rewritten; {v['extra']} extra removed"
        )
    return line


def _push_line(p: dict[str, Any]) -> str:
    head = f"push {Path(p['file']).name} -> {p['table']}:"
    if p["status"] == "failed":
        return f"{head} FAILED: {p['error']}"
    verb = "plan" if p["status"] == "planned" else "applied"
    return (
        f"{head} {verb}: {p['created']} create, {p['updated']} update, "
        f"{p['deleted']} delete, {p['unchanged']} unchanged"
    )


def _text_summary(summary: RunSummary) -> None:
    written = sum(t.rows_written for t in summary.tables)
    deleted = sum(t.rows_deleted for t in summary.tables)
    line = f"{summary.job}: {summary.status}"
    if summary.tables:
        line += f" — {len(summary.tables)} tables, {written} rows written, {deleted} deleted"
    if summary.verified:
        fixed = [t.verified for t in summary.tables if t.verified is not None]
        line += (
            f" — verified: {sum(v.missing for v in fixed)} missing, "
            f"{sum(v.different for v in fixed)} different, {sum(v.extra for v in fixed)} extra "
            "repaired"
        )
    if summary.concurrency:
        n = summary.concurrency
        line += f" — {summary.seconds:.1f} s, up to {n} request{'s' * (n != 1)} in flight"
    if summary.error and summary.status != "interrupted":  # that one has its own line
        line += f" — {summary.error}"
    click.echo(line)
