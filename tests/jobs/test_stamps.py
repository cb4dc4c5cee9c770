"""API timestamps as a job keeps them: any instant from year 1 to 9999, in one shape whose
text order is the order in time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector.arrays import newer, stamp_scalar, string_array, text_scalar
from connector.jobs.reads import lower_bound
from connector.stamps import CLOCK_MARGIN, horizon, iso, micros, parse, stamp_of

instants = st.datetimes(min_value=datetime.min, max_value=datetime.max)


def test_year_1_and_9999_keep_four_digits() -> None:
    assert iso(datetime.min) == "0001-01-01T00:00:00.000000Z"
    assert iso(datetime.max.replace(tzinfo=UTC)) == "9999-12-31T23:59:59.999999Z"
    assert iso(datetime(999, 5, 6, 7, 8, 9, 10)) == "0999-05-06T07:08:09.000010Z"


@given(instants, instants)
def test_text_order_is_time_order_and_every_stamp_reads_back(a: datetime, b: datetime) -> None:
    assert (iso(a) < iso(b)) == (a < b)
    assert parse(iso(a)) == a.replace(tzinfo=UTC)
    assert stamp_of(micros(iso(a))) == iso(a)


@given(instants)
def test_a_stamp_scalar_is_the_instant_as_a_utc_microsecond_timestamp(value: datetime) -> None:
    stamp = stamp_scalar(value, pa.timestamp("us", tz="UTC"))
    assert stamp.type == pa.timestamp("us", tz="UTC")
    assert stamp_of(stamp.value) == iso(value)


@given(st.text())
def test_a_text_scalar_is_the_text(text: str) -> None:
    assert (text_scalar(text).type, text_scalar(text).as_py()) == (pa.string(), text)


@given(st.lists(instants, min_size=1, max_size=5))
def test_newer_is_the_latest_of_any_stamps(values: list[datetime]) -> None:
    stamps = string_array([iso(v) for v in values]).cast(pa.timestamp("us", tz="UTC"))
    assert newer(None, stamps) == iso(max(values))
    assert newer("0001-01-01T00:00:00.000000Z", stamps) == iso(max(values))


@pytest.mark.parametrize("bad", ["garbage", "", "2024-05-06", "2024-05-06T07:08:09",
                                 "0001-01-01T00:00:00+01:00", "1-01-01T00:00:00.000000Z"])
def test_text_that_is_not_a_utc_timestamp_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(bad))):  # the text at fault, named
        parse(bad)


def test_a_cursor_in_year_1_moves_back_no_further_than_year_1() -> None:
    assert lower_bound("0001-01-01T00:00:30.000000Z", None, 300) == "0001-01-01T00:00:00.000000Z"
    assert lower_bound("9999-12-31T23:59:59.999999Z", None, 1) == "9999-12-31T23:59:58.999999Z"


def test_the_horizon_is_the_clock_plus_the_margin() -> None:
    clock = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert horizon(clock) == iso(clock + CLOCK_MARGIN)
    assert horizon(datetime.max.replace(tzinfo=UTC) - timedelta(seconds=1)) == iso(datetime.max)
    before = datetime.now(UTC)
    assert iso(before + CLOCK_MARGIN) <= horizon(None) <= iso(datetime.now(UTC) + CLOCK_MARGIN)
