"""A sync's runs as Prometheus metrics, in a file node_exporter's textfile collector reads.

``connector sync JOB --metrics-file PATH`` (or ``[sync] metrics_file``) rewrites PATH at the
end of every run, also a failed or interrupted one (not a dry run, nor a run refused because
another holds the job's lock). The file is written aside and renamed
(`prometheus_client.write_to_textfile`), so the collector never reads half of it; its
collector registry is the writer's own, never the process-wide one. Needs the ``[metrics]``
extra (prometheus-client). Every series has a ``job`` label; table series also ``table``
(the name, escaped as the text format requires) and ``table_id``:

    connector_run_status{status}                       1 for how the last run ended, else 0
    connector_run_duration_seconds                     the last run's duration
    connector_last_run_timestamp_seconds               when it ended
    connector_last_success_timestamp_seconds           when the last run that ended ok ended
    connector_runs_total{status}                       runs, by how they ended
    connector_requests_total{status}                   API answers by HTTP status ("error": none)
    connector_retries_total                            requests tried again
    connector_rate_limited_total                       429 answers
    connector_table_rows_{read,written,deleted}_total  rows, counted as the run summary does
    connector_table_last_success_timestamp_seconds     when the table was last synced

Counters add each run to what the previous file holds, so a run between two scrapes is
never lost and ``increase()`` works (deleting the file is a counter reset, which Prometheus
handles). A last-success timestamp is never moved back by a failure: it comes from the
previous file, and for tables also from the job's state (`connector.jobs.state`, which keeps
each table's ``synced_at``); 0 means no success is on record. Tables are those of the last
run that got through its table list; one that stopped before keeps the previous file's.

A file holding anything but this job's series is refused before the run (exit 2): one file
per job (node_exporter reads every ``*.prom`` of its directory). The API key never reaches
the file: labels are the job's name, table names and ids, and statuses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connector.errors import ConfigError, DestinationError
from connector.extras import require
from connector.jobs.state import JobState, load_state
from connector.results import RunSummary
from connector.stamps import parse

if TYPE_CHECKING:
    from connector.api.counts import RequestCounts
    from connector.jobs.config import Job

__all__ = ["check_metrics_file", "write_metrics"]

#: The one prefix of every metric name.
PREFIX = "connector_"
#: The label naming the job: not ``job``, which Prometheus gives every scraped series itself
#: (the target's), so a ``job`` label of ours would show as ``exported_job``.
JOB_LABEL = "sync_job"
#: How a run can end (`connector.results.RunStatus`): each gets a series, 0 when not it.
RUN_STATUSES = ("ok", "partial", "failed", "interrupted")
#: Table statuses that count as synced.
SYNCED = ("ok", "unchanged")
_SUFFIX = ".prom"


@dataclass
class _Table:
    name: str
    read: float = 0.0
    written: float = 0.0
    deleted: float = 0.0
    last_success: float = 0.0


@dataclass
class _Record:
    """What a metrics file keeps of one job from run to run: counters and last successes."""

    runs: dict[str, float] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)
    retries: float = 0.0
    rate_limited: float = 0.0
    last_success: float = 0.0
    tables: dict[str, _Table] = field(default_factory=dict)  # by table id


def check_metrics_file(path: Path, job: str, where: str) -> None:
    """Before a run: the extra is installed, `path` can be written where the collector
    reads it, and holds nothing but `job`'s metrics; else a `ConfigError` (a `MissingExtra`
    naming ``[metrics]``) that names `where` (the option or the job file's key)."""
    require("prometheus_client", where)
    if path.suffix != _SUFFIX:
        raise ConfigError(
            f"{where}: {path} must end in {_SUFFIX}: node_exporter's textfile collector "
            f"reads only *{_SUFFIX} files"
        )
    if path.is_dir():
        raise ConfigError(f"{where}: {path} is a directory; name a file in it, like {job}{_SUFFIX}")
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"{where}: {path}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: {path}: the directory {folder} is not writable")
    _read(path, job, where)


def write_metrics(job: Job, summary: RunSummary, counts: RequestCounts | None) -> None:
    """Rewrite `job`'s metrics file with the run `summary` describes added to what the file
    held (see the module docstring); `counts` are the run's requests. A file system error
    is a `DestinationError` naming the file."""
    path = job.metrics_file
    if path is None:
        raise ConfigError(f"job {job.name!r} names no metrics file")
    try:
        record = _read(path, summary.job, None)
    except ConfigError:  # changed under the run since it was checked: start again
        record = _Record()
    try:
        state: JobState | None = load_state(job.state_path)
    except ConfigError:  # unreadable: the run said so; the previous file's values stand
        state = None
    _add_run(record, summary, counts, state)
    prometheus = require("prometheus_client", "metrics")
    registry = prometheus.CollectorRegistry(auto_describe=False)
    registry.register(_Collector(summary, record))
    try:
        prometheus.write_to_textfile(str(path), registry)
    except OSError as exc:
        raise DestinationError(f"writing the metrics file {path} failed: {exc.strerror or exc}") from exc


def _add_run(
    record: _Record, summary: RunSummary, counts: RequestCounts | None, state: JobState | None
) -> None:
    ended = _seconds(summary.finished_at)
    for status in RUN_STATUSES:
        record.runs.setdefault(status, 0.0)
    record.runs[summary.status] += 1
    if summary.status == "ok":
        record.last_success = ended
    if counts is not None:
        for status, number in counts.by_status.items():
            record.requests[status] = record.requests.get(status, 0.0) + number
        record.retries += counts.retries
        record.rate_limited += counts.throttled
    through = summary.error is None and summary.status != "interrupted"
    if through:  # the job's tables are this run's
        record.tables = {t.table_id: record.tables.get(t.table_id, _Table(t.table))
                         for t in summary.tables}
    begun = _seconds(summary.started_at)
    synced: set[str] = set()
    for result in summary.tables:
        table = record.tables.setdefault(result.table_id, _Table(result.table))
        table.name = result.table
        table.read += result.rows_read
        table.written += result.rows_written
        table.deleted += result.rows_deleted
        if result.status in SYNCED:
            synced.add(result.table_id)
    for table_id, table in record.tables.items():
        kept = state.table(table_id) if state is not None else None
        at = [table.last_success]
        if kept is not None:
            at.append(_seconds(kept.synced_at))
        if table_id in synced and max(at) < begun:  # the state missed it (a stopped run)
            at.append(ended)
        table.last_success = max(at)


class _Collector:
    """The metric families of one job, for a registry of the writer's own."""

    def __init__(self, summary: RunSummary, record: _Record) -> None:
        self.summary, self.record = summary, record

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        job, summary, record = self.summary.job, self.summary, self.record

        def gauge(name: str, text: str, values: Mapping[tuple[str, ...], float],
                  labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            family = GaugeMetricFamily(PREFIX + name, text, labels=[JOB_LABEL, *labels])
            for key, value in values.items():
                family.add_metric([job, *key], value)
            return family

        def counter(name: str, text: str, values: Mapping[tuple[str, ...], float],
                    labels: tuple[str, ...] = ()) -> CounterMetricFamily:
            family = CounterMetricFamily(PREFIX + name, text, labels=[JOB_LABEL, *labels])
            for key, value in values.items():
                family.add_metric([job, *key], value)
            return family

        status = ("status",)
        yield gauge("run_status", "How the last run ended: 1 for its status, 0 for the others.",
                    {(s,): float(s == summary.status) for s in RUN_STATUSES}, status)
        yield gauge("run_duration_seconds", "How long the last run took.", {(): summary.seconds})
        yield gauge("last_run_timestamp_seconds", "When the last run ended (Unix time).",
                    {(): _seconds(summary.finished_at)})
        yield gauge("last_success_timestamp_seconds",
                    "When the last run that ended ok ended (Unix time; 0: none on record).",
                    {(): record.last_success})
        yield counter("runs", "Runs, by how they ended.",
                      {(s,): n for s, n in record.runs.items()}, status)
        yield counter("requests", "API answers, by HTTP status (error: no answer).",
                      {(s,): n for s, n in sorted(record.requests.items())}, status)
        yield counter("retries", "Requests tried again.", {(): record.retries})
        yield counter("rate_limited", "Answers that were 429 (rate limited).",
                      {(): record.rate_limited})
        tables = sorted(record.tables.items(), key=lambda item: (item[1].name, item[0]))
        named = ("table", "table_id")
        for what in ("read", "written", "deleted"):
            yield counter(f"table_rows_{what}", f"Rows {what}, counted as the run summary does.",
                          {(t.name, i): getattr(t, what) for i, t in tables}, named)
        yield gauge("table_last_success_timestamp_seconds",
                    "When the table was last synced (Unix time; 0: none on record).",
                    {(t.name, i): t.last_success for i, t in tables}, named)


#: Sample names the file keeps from run to run → how to read each into a `_Record`.
_KEPT = {
    "runs_total", "requests_total", "retries_total", "rate_limited_total",
    "last_success_timestamp_seconds", "table_rows_read_total", "table_rows_written_total",
    "table_rows_deleted_total", "table_last_success_timestamp_seconds",
}


def _read(path: Path, job: str, where: str | None) -> _Record:
    """The previous file's record of `job` (empty when there is none). With `where`, a file
    that is unreadable or holds other series is a `ConfigError` naming it; without, those
    series are left out."""
    record = _Record()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return record
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read {path} ({exc})") from None
    from prometheus_client.parser import text_string_to_metric_families

    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise ConfigError(
            f"{where}: {path} is not in the Prometheus text format ({exc}); delete it or name "
            "another file"
        ) from None
    for sample in samples:
        name, labels = sample.name, sample.labels
        if not name.startswith(PREFIX) or labels.get(JOB_LABEL) != job:
            if where is None:
                continue
            raise ConfigError(
                f"{where}: {path} holds metrics that are not job {job!r}'s ({name} "
                f"{dict(labels)}): give each job a file of its own, or delete this one"
            )
        short = name.removeprefix(PREFIX)
        value = float(sample.value)
        if short not in _KEPT or not math.isfinite(value):
            continue
        if short.startswith("table_"):
            table_id = labels.get("table_id")
            if not table_id:
                continue
            table = record.tables.setdefault(table_id, _Table(labels.get("table", table_id)))
            if short == "table_last_success_timestamp_seconds":
                table.last_success = value
            else:
                setattr(table, short.split("_")[2], value)  # table_rows_<what>_total
        elif short in ("runs_total", "requests_total"):
            status = labels.get("status")
            if status:
                (record.runs if short == "runs_total" else record.requests)[status] = value
        elif short == "retries_total":
            record.retries = value
        elif short == "rate_limited_total":
            record.rate_limited = value
        else:
            record.last_success = value
    return record


def _seconds(stamp: str) -> float:
    """An ISO 8601 timestamp (`connector.stamps`) as Unix seconds."""
    return parse(stamp).timestamp()
