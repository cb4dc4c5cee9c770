"""Results as the lines a person reads: progress events while a run goes, and its summary.

The JSON forms are `connector.results.RunSummary.to_dict` (the summary) and the events'
own fields; these are their text forms, shared by every command and by the Dagster log.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from connector.results import RunSummary

__all__ = ["describe_event", "shown", "summary_lines", "table_line"]


def shown(text: str) -> str:
    """`text` as a line shows it: as it is when it is plain printable text, else quoted with
    its control, bidirectional and other invisible characters escaped (``'a\\nb'``), so one
    name is one line and what is printed is what was written."""
    return text if text.isprintable() else repr(text)


def describe_event(event: str, **fields: Any) -> str | None:
    """A run's progress event as the line (or lines) a person reads; None for quiet ones."""
    if event == "table":
        return f"  {table_line(fields)}"
    if event == "push":
        plan = fields.get("plan")
        head = f"  {_push_line(fields)}"
        return (
            head if not plan else head + "\n" + "\n".join(f"    {ln}" for ln in plan.splitlines())
        )
    if event == "retry":  # a wait before a request is tried again
        return str(fields["message"])  # as every command prints it
    if event == "note":
        return f"  {shown(fields['table'])}: {fields['note']}"
    if event == "waiting":  # for another run of the job to release its lock
        holder = f" ({fields['holder']})" if fields.get("holder") else ""
        return (
            f"job {fields['job']}: another run holds its lock{holder}; waiting up to "
            f"{fields['seconds']:g} s"
        )
    if event == "start":
        dry = " (dry run: nothing is written)" if fields["dry_run"] else ""
        return f"job {fields['job']}{dry}"
    return None


def table_line(t: dict[str, Any]) -> str:
    """One table's result: rows read, written and deleted, the same terms for every
    destination and command."""
    name = f"{shown(t['table']):<20}"
    if t["status"] in ("failed", "skipped", "frozen"):
        return f"{name} {t['status'].upper()}: {t['error']}" + _committed(t)
    if t["status"] == "planned":
        changes = _changes(t)
        return f"{name} would read {t['rows_read']} rows ({t['read']}){changes}"
    window = ""
    if t.get("window_rows"):
        window = f" ({t['window_rows']} from the lookback window, {t.get('late_rows', 0)} late)"
    if t.get("ahead_rows"):
        window += f" ({t['ahead_rows']} stamped ahead of the server's clock)"
    if t["status"] == "unchanged":
        return f"{name} unchanged ({t['read']}{window}, {t['seconds']:.1f}s)"
    line = (
        f"{name} {t['read']:<11} {t['rows_read']:>7} read {t['rows_written']:>7} written "
        f"{t['rows_deleted']:>5} deleted  {t['seconds']:.1f}s{window}"
    )
    line += _changes(t)
    if t.get("verified") is not None:
        v = t["verified"]
        line += (
            f"\n  {'':<20} verified: {v['missing']} missing, {v['different']} different "
            f"rewritten; {v['extra']} extra removed"
        )
    return line


def _committed(t: dict[str, Any]) -> str:
    """Under a failed table: what it read, and what the destinations that did commit hold."""
    done = [d for d in t.get("destinations") or () if d["status"] == "ok"]
    if not done:
        return ""
    lines = [f"read {t['rows_read']} rows; committed nonetheless to:"] + [
        f"  {d['destination']}: {d['rows_written']} written, {d['rows_deleted']} deleted"
        for d in done
    ]
    return "".join(f"\n  {'':<20} {line}" for line in lines)


def _changes(t: dict[str, Any]) -> str:
    changes = t.get("schema_changes") or ()
    return f"\n  {'':<20} columns: {'; '.join(changes)}" if changes else ""


def _push_line(p: dict[str, Any]) -> str:
    head = f"push {shown(Path(p['file'] or '').name)} -> {shown(p['table'] or '')}:"
    if p["status"] == "failed":
        return f"{head} FAILED: {p['error']}"
    verb = "plan" if p["status"] == "planned" else "applied"
    return (
        f"{head} {verb}: {p['created']} create, {p['updated']} update, "
        f"{p['deleted']} delete, {p['unchanged']} unchanged"
    )


def summary_lines(summary: RunSummary, verb: str | None = None) -> list[str]:
    """The last lines of a run: with `verb` (``exported``, ``loaded``) one line per table and
    a count of tables; without, sync's one line (its tables were shown as they finished)."""
    tables = summary.tables
    read = sum(t.rows_read for t in tables)
    written = sum(t.rows_written for t in tables)
    deleted = sum(t.rows_deleted for t in tables)
    if verb is not None:
        lines = []
        for t in tables:
            if t.status in ("ok", "unchanged"):
                where = ", ".join(map(shown, t.targets))
                lines.append(
                    f"{shown(t.table)}: {t.rows_read:,} read, {t.rows_written:,} written, "
                    f"{t.rows_deleted:,} deleted in {t.seconds:.1f} s -> {where}"
                    + (f" (columns: {'; '.join(t.schema_changes)})" if t.schema_changes else "")
                )
            else:
                lines.append(f"{shown(t.table)}: {t.status}: {t.error}"
                             + _committed(asdict(t)).replace(f"\n  {'':<20} ", "\n  "))
        if summary.status == "interrupted" or (summary.error and not tables):
            return lines  # the error line says it; "0 of 0 tables" would read as empty
        held = [
            f"{summary.count(s)} {s}" for s in ("skipped", "frozen", "failed") if summary.count(s)
        ]
        lines.append(
            f"{summary.count('ok')} of {len(tables)} tables {verb}: {read:,} rows read, "
            f"{written:,} written, {deleted:,} deleted in {summary.seconds:.1f} s"
            + (f"; {', '.join(held)}" if held else "")
        )
        return lines
    line = f"{summary.job}: {summary.status}"
    if tables:
        line += f" — {len(tables)} tables, {written} rows written, {deleted} deleted"
        window = sum(t.window_rows for t in tables)
        if window:
            late = sum(t.late_rows for t in tables)
            line += f" ({window} read again from the lookback window, {late} late)"
        ahead = sum(t.ahead_rows for t in tables)
        if ahead:
            line += f" ({ahead} stamped ahead of the server's clock, read again each run)"
    if summary.verified:
        fixed = [t.verified for t in tables if t.verified is not None]
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
    return [line]
