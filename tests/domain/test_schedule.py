"""Table-driven tests for AWS schedule expressions (slurmpod.domain.schedule)."""

from __future__ import annotations

import calendar
import time
from datetime import UTC, date, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpod.domain.schedule import (
    AtSchedule,
    CronSchedule,
    ScheduleError,
    due,
    format_instant,
    parse_schedule,
)


def ts(text: str) -> float:
    """Epoch seconds for ``yyyy-mm-ddThh:mm:ss`` (or ``…Z``) in UTC."""
    return float(calendar.timegm(time.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S")))


# (expression, after, expected next fire or None). Weekdays: 2025-06-15 is a Sunday.
NEXT_FIRE = [
    ("cron(0 12 * * ? *)", "2025-06-15T11:59:59", "2025-06-15T12:00:00Z"),
    ("cron(0 12 * * ? *)", "2025-06-15T12:00:00", "2025-06-16T12:00:00Z"),  # strictly after
    ("cron(15 10 ? * 6L 2022-2026)", "2025-01-01T00:00:00", "2025-01-31T10:15:00Z"),  # AWS docs example
    ("cron(0/15 * * * ? *)", "2025-06-15T10:07:30", "2025-06-15T10:15:00Z"),
    ("cron(*/5 * * * ? *)", "2025-06-15T10:59:00", "2025-06-15T11:00:00Z"),
    ("cron(5/20 * * * ? *)", "2025-06-15T10:46:00", "2025-06-15T11:05:00Z"),
    ("cron(1-10/2 8 * * ? *)", "2025-06-15T08:09:00", "2025-06-16T08:01:00Z"),
    ("cron(0 8-17/3 ? * MON-FRI *)", "2025-06-13T17:01:00", "2025-06-16T08:00:00Z"),  # Fri → Mon
    ("cron(0 0 29 2 ? *)", "2025-03-01T00:00:00", "2028-02-29T00:00:00Z"),  # Feb 29
    ("cron(0 12 ? * 6L 2099)", "2025-03-01T00:00:00", "2099-01-30T12:00:00Z"),  # last Friday, far year
    ("cron(0 0 L * ? *)", "2025-02-10T00:00:00", "2025-02-28T00:00:00Z"),
    ("cron(0 0 L 2 ? *)", "2027-03-01T00:00:00", "2028-02-29T00:00:00Z"),
    ("cron(0 0 31 * ? *)", "2025-04-01T00:00:00", "2025-05-31T00:00:00Z"),  # skips 30-day months
    ("cron(0 9 LW * ? *)", "2025-08-01T00:00:00", "2025-08-29T09:00:00Z"),  # Aug 31 is a Sunday
    ("cron(0 9 1W * ? *)", "2025-03-01T00:00:00", "2025-03-03T09:00:00Z"),  # Sat 1st → Mon 3rd
    ("cron(0 9 15W * ? *)", "2025-06-01T00:00:00", "2025-06-16T09:00:00Z"),  # Sun 15th → Mon 16th
    ("cron(0 9 31W * ? *)", "2025-08-01T00:00:00", "2025-08-29T09:00:00Z"),  # Sun 31st → Fri 29th
    ("cron(30 12 ? * 2#1 *)", "2025-06-01T00:00:00", "2025-06-02T12:30:00Z"),  # first Monday
    ("cron(30 12 ? * MON#2 *)", "2025-06-10T00:00:00", "2025-07-14T12:30:00Z"),
    ("cron(0 0 ? * 3#5 *)", "2025-01-01T00:00:00", "2025-04-29T00:00:00Z"),  # fifth Tuesday
    ("cron(0 9 ? * L *)", "2025-08-01T00:00:00", "2025-08-02T09:00:00Z"),  # L alone = Saturday
    ("cron(0 9 ? * sun,sat *)", "2025-06-16T00:00:00", "2025-06-21T09:00:00Z"),
    ("cron(0 0 1 jan,Jul ? *)", "2025-02-01T00:00:00", "2025-07-01T00:00:00Z"),
    ("cron(0 0 1 */3 ? *)", "2025-02-01T00:00:00", "2025-04-01T00:00:00Z"),
    ("cron(30 14 15 12 ? 2024)", "2023-01-01T00:00:00", "2024-12-15T14:30:00Z"),
    ("cron(30 14 15 12 ? 2024)", "2024-12-15T14:30:00", None),  # years exhausted
    ("cron(00 12 ? * 1 *)", "2025-06-15T12:00:00", "2025-06-22T12:00:00Z"),  # 1 = SUN
    ("cron(0 0 1 1 ? 2030/10)", "2025-01-01T00:00:00", "2030-01-01T00:00:00Z"),
    ("cron(59 23 31 12 ? 2199)", "2199-12-31T23:58:59", "2199-12-31T23:59:00Z"),
    ("cron(59 23 31 12 ? 2199)", "2199-12-31T23:59:00", None),
    ("cron(0 0 ? * 7 *)", "2025-06-14T00:00:00", "2025-06-21T00:00:00Z"),  # 7 = SAT
    ("cron(0 0,12 1-3 * ? *)", "2025-06-03T12:00:00", "2025-07-01T00:00:00Z"),
    ("cron(0 12 ? * 6L *)", "2025-10-31T12:00:00", "2025-11-28T12:00:00Z"),
    ("cron(30 12 15 */3 ? *)", "2025-02-01T00:00:00", "2025-04-15T12:30:00Z"),  # HyperPod docs example
    ("cron(0 3 ? * 1,FRI-SAT *)", "2025-06-15T03:00:00", "2025-06-20T03:00:00Z"),  # Sun + Fri-Sat
    ("at(2025-07-01T08:30:15)", "2025-06-15T00:00:00", "2025-07-01T08:30:15Z"),
    ("at(2025-07-01T08:30:15)", "2025-07-01T08:30:15", None),  # past one-time schedule
]


@pytest.mark.parametrize(("expr", "after", "expected"), NEXT_FIRE)
def test_next_fire(expr: str, after: str, expected: str | None) -> None:
    got = parse_schedule(expr).next_fire(ts(after))
    assert (format_instant(got) if got is not None else None) == expected


def test_next_fire_is_fast_for_sparse_schedules() -> None:
    leap = parse_schedule("cron(0 0 29 2 ? *)")
    late = parse_schedule("cron(0 12 ? * 6L 2099)")
    start = time.perf_counter()
    for _ in range(100):
        assert leap.next_fire(ts("2025-03-01T00:00:00")) == ts("2028-02-29T00:00:00")
        assert late.next_fire(ts("2025-03-01T00:00:00")) == ts("2099-01-30T12:00:00")
    assert time.perf_counter() - start < 1.0


def test_successive_fires_of_a_recurring_schedule() -> None:
    s = parse_schedule("cron(0 0 ? * 6L 2025)")
    t = ts("2025-01-01T00:00:00")
    fires = []
    while (nxt := s.next_fire(t)) is not None:
        fires.append(format_instant(nxt)[:10])
        t = nxt
    assert fires == [
        "2025-01-31", "2025-02-28", "2025-03-28", "2025-04-25", "2025-05-30", "2025-06-27",
        "2025-07-25", "2025-08-29", "2025-09-26", "2025-10-31", "2025-11-28", "2025-12-26",
    ]


def test_fractional_and_out_of_range_instants() -> None:
    s = parse_schedule("cron(* * * * ? *)")
    assert s.next_fire(ts("2025-06-15T10:00:00") + 0.5) == ts("2025-06-15T10:01:00")
    assert s.next_fire(-1e9) == 0.0
    assert s.next_fire(1e12) is None
    assert s.latest_fire(-1.0) is None
    assert s.latest_fire(1e12) == ts("2199-12-31T23:59:00")
    assert s.latest_fire(ts("2025-06-15T10:00:59")) == ts("2025-06-15T10:00:00")


LATEST_FIRE = [
    ("cron(0 12 * * ? *)", "2025-06-15T12:00:00", "2025-06-15T12:00:00Z"),  # at or before
    ("cron(0 12 * * ? *)", "2025-06-15T11:59:59", "2025-06-14T12:00:00Z"),
    ("cron(0 0 29 2 ? *)", "2028-02-28T23:59:00", "2024-02-29T00:00:00Z"),
    ("cron(30 12 ? * 2#1 *)", "2025-06-01T00:00:00", "2025-05-05T12:30:00Z"),
    ("cron(0 9 LW * ? *)", "2025-08-15T00:00:00", "2025-07-31T09:00:00Z"),
    ("cron(0 0 1 1 ? 2030)", "2029-12-31T23:59:59", None),
    ("at(2025-07-01T08:30:15)", "2025-07-01T08:30:15", "2025-07-01T08:30:15Z"),
    ("at(2025-07-01T08:30:15)", "2025-07-01T08:30:14", None),
]


@pytest.mark.parametrize(("expr", "until", "expected"), LATEST_FIRE)
def test_latest_fire(expr: str, until: str, expected: str | None) -> None:
    got = parse_schedule(expr).latest_fire(ts(until))
    assert (format_instant(got) if got is not None else None) == expected


def test_recurring_and_types() -> None:
    assert isinstance(parse_schedule("cron(0 12 * * ? *)"), CronSchedule)
    assert parse_schedule("cron(0 12 * * ? *)").recurring
    assert parse_schedule("cron(30 14 ? 12 MON 2024)").recurring  # every Monday of Dec 2024
    assert not parse_schedule("cron(30 14 15 12 ? 2024)").recurring  # a single instant
    at = parse_schedule("at(2025-07-01T08:30:15)")
    assert isinstance(at, AtSchedule) and not at.recurring
    assert at.expression == "at(2025-07-01T08:30:15)"


# ------------------------------------------------------------------------------------------ invalid

FORMS = "expected cron(Minutes Hours Day-of-month Month Day-of-week Year) or at(yyyy-mm-ddThh:mm:ss)."

INVALID = [
    ("", "length must be between 1 and 256 characters."),
    ("cron(" + "0," * 130 + "0 * * * ? *)", "length must be between 1 and 256 characters."),
    ("0 12 * * ? *", FORMS),
    ("CRON(0 12 * * ? *)", FORMS),
    ("cron(0 12 * * ? *", FORMS),
    ("cron(0 12 * * ? *)\n", FORMS),
    ("rate(5 minutes)", "rate() expressions are not supported; use cron(...) or at(...)."),
    ("cron(0 12 * * ?)", "expected 6 fields, got 5."),
    ("cron(0 0 12 * * ? *)", "expected 6 fields, got 7."),
    ("cron()", "expected 6 fields, got 0."),
    ("cron(0 25 * * ? *)", "Hours value 25 is out of range 0-23."),
    ("cron(60 0 * * ? *)", "Minutes value 60 is out of range 0-59."),
    ("cron(0 0 0 * ? *)", "Day-of-month value 0 is out of range 1-31."),
    ("cron(0 0 32 * ? *)", "Day-of-month value 32 is out of range 1-31."),
    ("cron(0 0 1 13 ? *)", "Month value 13 is out of range 1-12."),
    ("cron(0 0 ? * 0 *)", "Day-of-week value 0 is out of range 1-7."),
    ("cron(0 0 ? * 8 *)", "Day-of-week value 8 is out of range 1-7."),
    ("cron(0 0 1 * ? 1969)", "Year value 1969 is out of range 1970-2199."),
    ("cron(0 0 1 * ? 2200)", "Year value 2200 is out of range 1970-2199."),
    ("cron(0 0 1 FOO ? *)", "Month value FOO is invalid; expected 1-12 or JAN-DEC."),
    ("cron(0 0 ? * MONDAY *)", "Day-of-week value MONDAY is invalid; expected 1-7 or SUN-SAT."),
    ("cron(x 0 * * ? *)", "Minutes value x is invalid; expected 0-59."),
    ("cron(-5 0 * * ? *)", "Minutes value -5 is invalid; expected 0-59."),
    ("cron(0 0 * * * *)", "exactly one of Day-of-month and Day-of-week must be '?'."),
    ("cron(0 0 ? * ? *)", "exactly one of Day-of-month and Day-of-week must be '?'."),
    ("cron(0 0 15 * MON *)", "exactly one of Day-of-month and Day-of-week must be '?'."),
    ("cron(? 0 * * ? *)", "Minutes does not allow '?'."),
    ("cron(0 0 1 ? * *)", "Month does not allow '?'."),
    ("cron(0 0 1,? * ? *)", "Day-of-month value 1,? is invalid: '?' cannot be combined with other values."),
    ("cron(0 0 ? * 1,? *)", "Day-of-week value 1,? is invalid: '?' cannot be combined with other values."),
    ("cron(0 0 ? * */2 *)", "Day-of-week does not allow '/'."),
    ("cron(0 0 ? 1#2 ? *)", "Month does not allow '#'."),
    ("cron(0 0 1#2 * ? *)", "Day-of-month does not allow '#'."),
    ("cron(0 L * * ? *)", "Hours does not allow 'L'."),
    ("cron(0 0 1 * ? 2025W)", "Year does not allow 'W'."),
    ("cron(*/0 0 * * ? *)", "Minutes step 0 is out of range 1-60."),
    ("cron(*/61 0 * * ? *)", "Minutes step 61 is out of range 1-60."),
    ("cron(0/x 0 * * ? *)", "Minutes step x is invalid; expected a number 1-60."),
    ("cron(0 0 1 * ? 2025/)", "Year step  is invalid; expected a number 1-230."),
    ("cron(0 20-5 * * ? *)", "Hours range 20-5 is invalid: start is greater than end."),
    ("cron(0 0 ? * FRI-MON *)", "Day-of-week range FRI-MON is invalid: start is greater than end."),
    ("cron(0 0 1,,2 * ? *)", "Day-of-month value 1,,2 is invalid: empty list item."),
    ("cron(0 0 L,15 * ? *)", "Day-of-month value L,15 is invalid: 'L' cannot be combined with other values."),
    ("cron(0 0 L-2 * ? *)", "Day-of-month value L-2 is invalid; 'L' must be used alone or as LW."),
    ("cron(0 0 1W,15 * ? *)", "Day-of-month value 1W,15 is invalid: 'W' cannot be combined with other values."),
    ("cron(0 0 1-5W * ? *)", "Day-of-month value 1-5W is invalid; 'W' must follow a single day (e.g. 15W)."),
    ("cron(0 0 32W * ? *)", "Day-of-month value 32 is out of range 1-31."),
    ("cron(0 0 ? * 6L,2 *)", "Day-of-week value 6L,2 is invalid: 'L' cannot be combined with other values."),
    ("cron(0 0 ? * L6 *)", "Day-of-week value L6 is invalid; 'L' must follow a single weekday (e.g. 6L)."),
    ("cron(0 0 ? * 9L *)", "Day-of-week value 9 is out of range 1-7."),
    ("cron(0 0 ? * 2#6 *)", "Day-of-week value 2#6 is invalid: the occurrence after '#' must be 1-5."),
    ("cron(0 0 ? * 2#0 *)", "Day-of-week value 2#0 is invalid: the occurrence after '#' must be 1-5."),
    ("cron(0 0 ? * 2#1,3 *)", "Day-of-week value 2#1,3 is invalid: '#' cannot be combined with other values."),
    ("cron(0 0 ? * XYZ#1 *)", "Day-of-week value XYZ#1 is invalid; expected 1-7 or SUN-SAT."),
    ("cron(0 0 30 2 ? *)", "the schedule never fires (no date matches all fields)."),
    ("cron(0 0 31 APR,JUN ? *)", "the schedule never fires (no date matches all fields)."),
    ("cron(0 0 29 2 ? 2100)", "the schedule never fires (no date matches all fields)."),  # 2100 is not leap
    ("at(2025-07-01 08:30:15)", "at() value 2025-07-01 08:30:15 is invalid; expected yyyy-mm-ddThh:mm:ss."),
    ("at(2025-7-1T08:30:15)", "at() value 2025-7-1T08:30:15 is invalid; expected yyyy-mm-ddThh:mm:ss."),
    ("at(2025-07-01T08:30)", "at() value 2025-07-01T08:30 is invalid; expected yyyy-mm-ddThh:mm:ss."),
    ("at(2025-07-01T08:30:15Z)", "at() value 2025-07-01T08:30:15Z is invalid; expected yyyy-mm-ddThh:mm:ss."),
    ("at(2025-02-29T00:00:00)", "at() value 2025-02-29T00:00:00 is not a valid date and time "
                                "(day is out of range for month)."),
    ("at(2025-07-01T24:00:00)", "at() value 2025-07-01T24:00:00 is not a valid date and time "
                                "(hour must be in 0..23)."),
    ("at(2025-13-01T00:00:00)", "at() value 2025-13-01T00:00:00 is not a valid date and time "
                                "(month must be in 1..12)."),
    ("at(1969-12-31T23:59:59)", "at() year 1969 is out of range 1970-2199."),
]


@pytest.mark.parametrize(("expr", "detail"), INVALID)
def test_invalid_expressions(expr: str, detail: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_schedule(expr)
    assert info.value.message == f"Invalid ScheduleExpression {expr}: {detail}"
    assert str(info.value) == info.value.message
    assert info.value.detail == detail


def test_aws_example_message() -> None:
    with pytest.raises(ScheduleError, match=r"^Invalid ScheduleExpression cron\(0 25 \* \* \? \*\): Hours value 25 "
                                            r"is out of range 0-23\.$"):
        parse_schedule("cron(0 25 * * ? *)")


def test_request_time_check_rejects_schedules_that_will_not_fire_again() -> None:
    now = ts("2025-06-15T12:00:00")
    with pytest.raises(ScheduleError) as info:
        parse_schedule("at(2025-06-15T11:59:59)", now=now)
    assert info.value.message == ("Invalid ScheduleExpression at(2025-06-15T11:59:59): "
                                  "the schedule has no fire time after 2025-06-15T12:00:00Z.")
    with pytest.raises(ScheduleError, match="no fire time after"):
        parse_schedule("cron(30 14 15 12 ? 2024)", now=now)
    assert parse_schedule("at(2025-06-15T12:00:01)", now=now).next_fire(now) == now + 1
    parse_schedule("at(2025-06-15T11:59:59)")  # without now, a past at() is only inert


VALID_SYNTAX = [
    "cron(0 12 * * ? *)",
    "cron(00 00 01 01 ? 2025)",
    "cron(  0   12 * *  ? *  )",
    "cron(0,15,30,45 * ? * mon-fri *)",
    "cron(0 0 ? Jan-Mar Sun#1 *)",
    "cron(0 0 lw * ? *)",
    "cron(0 0 15w * ? *)",
    "cron(0 0 ? * fril *)",
    "cron(0 0 ? * 1-7 *)",
    "cron(0 0 1 * ? */1)",
    "cron(0 0 * * ? 1970-2199/50)",
    "cron(*/60 0 1 * ? 2025)".replace("*/60", "0/59"),
    "at(2199-12-31T23:59:59)",
    "at(1970-01-01T00:00:00)",
]


@pytest.mark.parametrize("expr", VALID_SYNTAX)
def test_valid_syntax(expr: str) -> None:
    assert parse_schedule(expr).expression == expr


# -------------------------------------------------------------------------- day rules vs brute force


def _all_fire_days(expr: str, start: str, end: str) -> list[date]:
    s = parse_schedule(expr)
    t, stop, out = ts(start), ts(end), []
    while (nxt := s.next_fire(t)) is not None and nxt < stop:
        out.append(datetime.fromtimestamp(nxt, UTC).date())
        t = nxt
    return out


def _days_between(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days)]


def _aws_dow(d: date) -> int:
    return d.isoweekday() % 7 + 1  # 1=SUN .. 7=SAT


def _last_of_month(d: date) -> bool:
    return (d + timedelta(days=1)).month != d.month


def _nearest_weekday_naive(day: date) -> date:
    candidates = [day + timedelta(days=o) for o in (0, -1, 1, -2, 2)]
    return next(c for c in candidates if c.month == day.month and c.isoweekday() <= 5)


SPAN = (date(2024, 1, 1), date(2027, 1, 1))


@pytest.mark.parametrize("weekday", range(1, 8))
def test_last_and_nth_weekday_match_brute_force(weekday: int) -> None:
    days = _days_between(*SPAN)
    expected_last = [d for d in days if _aws_dow(d) == weekday and (d + timedelta(days=7)).month != d.month]
    got = _all_fire_days(f"cron(0 0 ? * {weekday}L 2024-2026)", "2023-12-31T00:00:00", "2027-01-01T00:00:00")
    assert got == expected_last
    for k in range(1, 6):
        expected = [d for d in days if _aws_dow(d) == weekday and (d.day - 1) // 7 == k - 1]
        got = _all_fire_days(f"cron(0 0 ? * {weekday}#{k} 2024-2026)", "2023-12-31T00:00:00", "2027-01-01T00:00:00")
        assert got == expected, k


def test_w_and_l_match_brute_force() -> None:
    days = _days_between(*SPAN)
    months = sorted({(d.year, d.month) for d in days})
    for n in (1, 2, 15, 29, 30, 31):
        expected = [_nearest_weekday_naive(date(y, m, n)) for y, m in months if n <= calendar.monthrange(y, m)[1]]
        got = _all_fire_days(f"cron(0 0 {n}W * ? 2024-2026)", "2023-12-31T00:00:00", "2027-01-01T00:00:00")
        assert got == expected, n
    expected_lw = [_nearest_weekday_naive(d) for d in days if _last_of_month(d)]
    assert _all_fire_days("cron(0 0 LW * ? 2024-2026)", "2023-12-31T00:00:00", "2027-01-01T00:00:00") == expected_lw
    expected_l = [d for d in days if _last_of_month(d)]
    assert _all_fire_days("cron(0 0 L * ? 2024-2026)", "2023-12-31T00:00:00", "2027-01-01T00:00:00") == expected_l


# ---------------------------------------------------------------- differential test against croniter


def _numeric_field(lo: int, hi: int) -> st.SearchStrategy[tuple[str, str]]:
    """An (aws, vixie) pair for a plain field: *, a, a-b, */s, a-b/s, or a list of values."""
    value = st.integers(lo, hi)
    step = st.integers(1, hi - lo + 1)

    def rng(a: int, b: int) -> str:
        return str(a) if a == b else f"{min(a, b)}-{max(a, b)}"  # croniter misreads "a-a"

    single = value.map(lambda v: str(v))
    span = st.tuples(value, value).map(lambda p: rng(*p))
    stepped = st.tuples(value, value, step).filter(lambda p: p[0] != p[1]).map(lambda p: f"{rng(p[0], p[1])}/{p[2]}")
    star = st.one_of(st.just("*"), step.map(lambda s: f"*/{s}"))
    item = st.one_of(single, span, stepped)
    plain = st.one_of(star, st.lists(item, min_size=1, max_size=3).map(",".join))
    return plain.map(lambda t: (t, t))


def _dow_field() -> st.SearchStrategy[tuple[str, str]]:
    def shift(t: str) -> str:
        return ",".join("-".join(str(int(v) - 1) for v in item.split("-")) for item in t.split(","))

    value = st.integers(1, 7)
    item = st.one_of(value.map(str), st.tuples(value, value).filter(lambda p: p[0] != p[1]).map(
        lambda p: f"{min(p)}-{max(p)}"))
    return st.lists(item, min_size=1, max_size=3).map(",".join).map(lambda t: (t, shift(t)))


@settings(max_examples=150, deadline=None)
@given(
    minute=_numeric_field(0, 59),
    hour=_numeric_field(0, 23),
    dom=_numeric_field(1, 28),
    month=_numeric_field(1, 12),
    dow=_dow_field(),
    use_dow=st.booleans(),
    start=st.integers(int(ts("2020-01-01T00:00:00")), int(ts("2030-01-01T00:00:00"))),
)
def test_matches_croniter_on_the_common_subset(
    minute: tuple[str, str], hour: tuple[str, str], dom: tuple[str, str], month: tuple[str, str],
    dow: tuple[str, str], use_dow: bool, start: int,
) -> None:
    aws_dom, vixie_dom = ("?", "*") if use_dow else dom
    aws_dow, vixie_dow = dow if use_dow else ("?", "*")
    aws = f"cron({minute[0]} {hour[0]} {aws_dom} {month[0]} {aws_dow} *)"
    vixie = f"{minute[1]} {hour[1]} {vixie_dom} {month[1]} {vixie_dow}"
    s = parse_schedule(aws)
    t = float(start)
    it = croniter(vixie, datetime.fromtimestamp(t, UTC))
    for _ in range(3):
        expected = it.get_next(float)
        got = s.next_fire(t)
        assert got is not None and got == expected, (aws, vixie, format_instant(t))
        assert s.latest_fire(got) == got
        before = s.latest_fire(got - 1)
        assert before is None or before <= t  # nothing between t and got
        t = got


# ------------------------------------------------------------------------------------------------ due

DAILY = "cron(0 3 * * ? *)"  # 03:00 every day
CREATED = ts("2025-06-10T12:00:00")

DUE = [
    # (expression, last_fired, now, expected)
    (DAILY, None, "2025-06-11T02:59:59", None),  # never fired, not yet due
    (DAILY, None, "2025-06-11T03:00:00", "2025-06-11T03:00:00Z"),  # never fired, due exactly now
    (DAILY, None, "2025-06-11T03:00:40", "2025-06-11T03:00:00Z"),  # reconciler tick a bit later
    (DAILY, "2025-06-11T03:00:00", "2025-06-11T09:00:00", None),  # fired already
    (DAILY, "2025-06-11T03:00:00", "2025-06-12T03:00:05", "2025-06-12T03:00:00Z"),  # next day's fire
    (DAILY, "2025-06-11T03:00:00", "2025-06-15T10:00:00", "2025-06-15T03:00:00Z"),  # missed 4: latest only
    (DAILY, None, "2025-06-20T00:00:00", "2025-06-19T03:00:00Z"),  # down since creation
    (DAILY, "2025-06-01T03:00:00", "2025-06-10T23:00:00", None),  # last_fired before created: created wins
    ("cron(0 12 10 6 ? 2025)", None, "2025-06-11T00:00:00", None),  # only fire time == created: not due
    ("cron(0 12 ? * 3#2 2025)", None, "2025-06-11T00:00:00", None),  # 2nd Tuesday Jun 10 12:00 == created
    ("at(2025-06-12T08:00:00)", None, "2025-06-12T07:59:59", None),
    ("at(2025-06-12T08:00:00)", None, "2025-06-30T00:00:00", "2025-06-12T08:00:00Z"),  # one-time catch-up
    ("at(2025-06-12T08:00:00)", "2025-06-12T08:00:00", "2025-06-30T00:00:00", None),  # fires once only
    ("at(2025-06-01T00:00:00)", None, "2025-06-30T00:00:00", None),  # already past when created
]


@pytest.mark.parametrize(("expr", "last_fired", "now", "expected"), DUE)
def test_due(expr: str, last_fired: str | None, now: str, expected: str | None) -> None:
    lf = ts(last_fired) if last_fired is not None else None
    got = due(parse_schedule(expr), lf, CREATED, ts(now))
    assert (format_instant(got) if got is not None else None) == expected


def test_due_catches_up_once_then_waits_for_the_next_fire() -> None:
    """A reconciler loop that was down for days acts once, then only on later fire times."""
    s = parse_schedule("cron(*/30 * * * ? *)")
    created, last = ts("2025-06-01T00:00:00"), None
    acted: list[str] = []
    now = ts("2025-06-05T10:10:00")  # back after four days
    while now < ts("2025-06-05T11:05:00"):
        if (fire := due(s, last, created, now)) is not None:
            acted.append(format_instant(fire))
            last = fire
        now += 20  # reconciler tick
    assert acted == ["2025-06-05T10:00:00Z", "2025-06-05T10:30:00Z", "2025-06-05T11:00:00Z"]
