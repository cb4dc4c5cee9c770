"""Dates as spreadsheets write them, read into the API's ``YYYY-MM-DD``.

ISO dates, Excel serials, year-first dates and dates with a month name are read as they are;
a day/month-ambiguous date (``05/03/2024``) is read by the format the user gives, or by the
order its column settles (`date_strings`). Native cells (a workbook's dates and date-times,
its serial numbers) are read one by one (`date_from_date`, `date_from_serial`). Years 1 to
9999, as the API's dates: pandas' own timestamps end at 1677 and 2262.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["EXCEL_EPOCH", "EXCEL_MAX_SERIAL", "date_from_date", "date_from_serial", "date_strings"]

#: Excel's day zero (serial 1 is 1900-01-01 for every date after Excel's phantom 1900-02-29).
EXCEL_EPOCH = dt.date(1899, 12, 30)
#: Serial of 9999-12-31, the last date Excel knows.
EXCEL_MAX_SERIAL = 2_958_465

_ISO_DATE = r"\d{4}-\d{2}-\d{2}"
_ISO_MIDNIGHT = _ISO_DATE + r"[T ]00:00(?::00(?:\.0+)?)?(?:Z|[+-]00:?00)?"
_SERIAL = r"\d{1,7}(?:\.0+)?"


def date_strings(
    texts: pd.Series, date_format: str | None = None, notes: dict[int, str] | None = None,
    hint: str = "date_format",
) -> tuple[pd.Series, np.ndarray[Any, Any], Counter[str]]:
    """Dates as spreadsheets write them, trying the unambiguous forms first.

    ISO dates (and ISO date-times at midnight), Excel serials, year-first dates
    (``2024/03/05``) and dates with a month name (``5 March 2024``, ``March 5, 2024``,
    ``05-Mar-2024``) are read as they are. Day/month-ambiguous dates (``05/03/2024``) are read
    with `date_format` when given; otherwise the column settles the order when every value
    fits one order and some value fits only that one (``25/03/2024``). The others fail,
    with a note (by position in `texts`) saying what to give: the setting `hint` names.
    """
    stripped = texts.str.strip()
    values = pd.Series(pd.NA, index=texts.index, dtype="string")
    counts: Counter[str] = Counter()
    iso = stripped.str.fullmatch(_ISO_DATE).fillna(False).to_numpy(dtype=bool)
    midnight = ~iso & stripped.str.fullmatch(_ISO_MIDNIGHT).fillna(False).to_numpy(dtype=bool)
    serial = ~iso & ~midnight & stripped.str.fullmatch(_SERIAL).fillna(False).to_numpy(dtype=bool)
    dated = iso | midnight
    if dated.any():
        day = stripped[dated].str.slice(0, 10)
        valid = _real_dates(day)
        where = np.flatnonzero(dated)[valid]
        values.iloc[where] = day[valid].to_numpy()
        counts["date from ISO text"] = int(valid[iso[dated]].sum())
        counts["date from ISO date-time at midnight"] = int(valid[midnight[dated]].sum())
    if serial.any():
        days = pd.to_numeric(stripped[serial].astype(object)).to_numpy(dtype=float)
        ok = (days >= 1) & (days <= EXCEL_MAX_SERIAL)
        stamps = pd.Timestamp(EXCEL_EPOCH) + pd.to_timedelta(days[ok], unit="D")
        values.iloc[np.flatnonzero(serial)[ok]] = stamps.strftime("%Y-%m-%d").to_numpy()
        counts["date from Excel serial"] = int(ok.sum())
    rest = values.isna().to_numpy() & ~(iso | midnight | serial)
    if rest.any():
        _spreadsheet_dates(stripped, values, rest, counts, date_format, notes, hint)
    return values, values.isna().to_numpy(), counts


def _real_dates(days: pd.Series) -> np.ndarray[Any, Any]:
    """Which ``YYYY-MM-DD`` texts are real calendar dates, years 1 to 9999 (as the API's
    dates: pandas' own timestamps end at 1677 and 2262)."""
    texts = days.astype(object).tolist()
    try:
        pa.array(texts, pa.string()).cast(pa.date32())
        return np.ones(len(texts), dtype=bool)
    except pa.ArrowInvalid:  # shaped like a date but not one (2024-02-31): each on its own
        return np.array([_is_date(t) for t in texts], dtype=bool)


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


#: English month names and abbreviations (``Sept`` too), lower case, to month numbers.
MONTHS: dict[str, int] = {
    **{m.lower(): i for i, m in enumerate(
        ["January", "February", "March", "April", "May", "June", "July", "August",
         "September", "October", "November", "December"], start=1)},
    **{m.lower(): i for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"],
        start=1)},
    "sept": 9,
}
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_MONTH = r"(?P<month>[A-Za-z]{3,9})\.?"
_YEAR = r"(?P<year>\d{4})"
#: Forms with nothing to guess: year first, or the month spelt out (either order).
_UNAMBIGUOUS = (
    r"(?P<year>\d{4})[/.-](?P<month>\d{1,2})[/.-](?P<day>\d{1,2})",
    _DAY + r"[ -]" + _MONTH + r",?[ -]" + _YEAR,
    _MONTH + r" " + _DAY + r",? " + _YEAR,
)
#: Day and month both in numbers before the year: 05/03/2024 is 5 March or May 3.
_AMBIGUOUS = r"(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)(?P<year>\d{4})"


def _spreadsheet_dates(
    stripped: pd.Series, values: pd.Series, rest: np.ndarray[Any, Any], counts: Counter[str],
    date_format: str | None, notes: dict[int, str] | None, hint: str,
) -> None:
    """Fill `values` at `rest` from the forms of `_date_strings`' docstring."""
    todo = stripped[rest]
    where = np.flatnonzero(rest)
    if date_format is not None:
        parsed = pd.to_datetime(todo, format=date_format, errors="coerce")
        ok = (parsed.notna() & (parsed == parsed.dt.normalize())).to_numpy(dtype=bool)
        values.iloc[where[ok]] = parsed[ok].dt.strftime("%Y-%m-%d").to_numpy()
        counts[f"date with {hint}"] += int(ok.sum())
        todo, where = todo[~ok], where[~ok]
    for pattern in _UNAMBIGUOUS:
        if not len(todo):
            return
        found = todo.str.extract("^" + pattern + "$")
        matched = found["year"].notna().to_numpy(dtype=bool)
        if not matched.any():
            continue
        month = found["month"][matched].astype(str).str.lower()
        numbers = pd.to_numeric(month, errors="coerce")
        month_no = numbers.where(numbers.notna(), month.map(MONTHS))
        iso = _iso_dates(found["year"][matched], month_no, found["day"][matched])
        ok = iso.notna().to_numpy(dtype=bool)
        hit = np.flatnonzero(matched)[ok]
        values.iloc[where[hit]] = iso[ok].to_numpy()
        counts["date from text with the year first or a month name"] += len(hit)
        keep = np.ones(len(todo), dtype=bool)
        keep[hit] = False
        todo, where = todo[keep], where[keep]
    if not len(todo) or date_format is not None:
        return
    found = todo.str.extract("^" + _AMBIGUOUS + "$")
    matched = found["year"].notna().to_numpy(dtype=bool)
    if not matched.any():
        return
    a = found["a"][matched].astype(int).to_numpy()
    b = found["b"][matched].astype(int).to_numpy()
    years = found["year"][matched]
    day_first = _iso_dates(years, pd.Series(b, index=years.index), pd.Series(a, index=years.index))
    month_first = _iso_dates(years, pd.Series(a, index=years.index), pd.Series(b, index=years.index))
    dm_ok = day_first.notna().to_numpy(dtype=bool)
    md_ok = month_first.notna().to_numpy(dtype=bool)
    only_dm, only_md = dm_ok & ~md_ok, md_ok & ~dm_ok
    same = dm_ok & md_ok & (a == b)  # 05/05/2024 reads the same either way
    if only_dm.any() and not only_md.any():
        chosen, order = dm_ok, "day first"
    elif only_md.any() and not only_dm.any():
        chosen, order = md_ok, "month first"
    else:
        chosen, order = only_dm | only_md | same, "one reading only"
    picked = day_first.where(dm_ok & (order != "month first"), month_first)
    hit = np.flatnonzero(matched)[chosen]
    values.iloc[where[hit]] = picked[chosen].to_numpy()
    counts[f"date from day/month text ({order})"] += len(hit)
    if notes is None:
        return
    mixed = only_dm.any() and only_md.any()
    for i in np.flatnonzero(matched)[~chosen & (dm_ok | md_ok)].tolist():
        sep = found["sep"].iat[i]
        formats = f"'%d{sep}%m{sep}%Y' or '%m{sep}%d{sep}%Y'"
        why = (
            "the column has both day-first and month-first dates" if mixed
            else "day and month could be either way"
        )
        notes[int(where[i])] = f"ambiguous date: {why}; give {hint} ({formats})"


def _iso_dates(years: pd.Series, months: pd.Series, days: pd.Series) -> pd.Series:
    """``YYYY-MM-DD`` text where year, month and day make a real date, else NA."""
    parts = pd.DataFrame({
        "year": pd.to_numeric(years, errors="coerce"),
        "month": pd.to_numeric(months, errors="coerce"),
        "day": pd.to_numeric(days, errors="coerce"),
    })
    stamps = pd.to_datetime(parts, errors="coerce")
    return stamps.dt.strftime("%Y-%m-%d").astype("string")


def date_from_date(value: Any) -> tuple[str, str | None] | None:
    if type(value) is dt.date:  # any year the API takes (pandas' timestamps end at 1677, 2262)
        return value.isoformat(), None
    if isinstance(value, dt.datetime):
        return (value.date().isoformat(), "date from date-time at midnight") if (
            value.time() == dt.time()) else None
    stamp = pd.Timestamp(value)  # a numpy datetime64
    if stamp != stamp.normalize():
        return None
    return stamp.date().isoformat(), "date from date-time at midnight"


def date_from_serial(value: Any) -> tuple[str, str] | None:
    days = float(value)
    if not (days.is_integer() and 1 <= days <= EXCEL_MAX_SERIAL):
        return None
    return (EXCEL_EPOCH + dt.timedelta(days=int(days))).isoformat(), "date from Excel serial"
