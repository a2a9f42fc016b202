"""AWS schedule expressions for ``ScheduledUpdateConfig.ScheduleExpression``, as pure functions.

Two forms are accepted (SPEC §5, reference §1.10):

* ``cron(Minutes Hours Day-of-month Month Day-of-week Year)`` — the EventBridge cron dialect that
  HyperPod documents. All six fields are required. Minutes 0-59, Hours 0-23, Day-of-month 1-31
  (``, - * ? / L W``, plus ``LW`` = last weekday of the month), Month 1-12 or JAN-DEC (``, - * /``),
  Day-of-week 1-7 with 1 = SUN, or SUN-SAT (``, - * ? L #``), Year 1970-2199 (``, - * /``). Exactly
  one of Day-of-month and Day-of-week is ``?``. Names and ``L``/``W`` are case-insensitive.
* ``at(yyyy-mm-ddThh:mm:ss)`` — a one-time schedule (EventBridge Scheduler syntax). HyperPod's console
  offers "one-time" updates; slurmpod documents this form for them. A one-time update can also be
  written as a cron expression whose fields match a single instant.

All times are UTC (AWS's default schedule time zone); nothing here reads the clock. Times go in and
come out as epoch seconds.

Why a parser of our own instead of croniter: AWS cron is not Vixie cron. It has a sixth (Year) field,
numbers Day-of-week 1-7 from Sunday (croniter uses 0-6), requires ``?`` in exactly one of the two day
fields (croniter ORs the two day fields instead), has Quartz's ``W``/``L``/``#`` semantics, and the API
must reject bad input with precise AWS-style messages that croniter cannot give. The whole dialect is
small enough to parse and evaluate here in a few hundred lines.

Decisions where AWS's documentation is silent:

* ``L``, ``LW``, ``nW``, ``nL`` and ``n#k`` must stand alone in their field (as in Quartz); ``L`` alone in
  Day-of-week means Saturday (the last day of every week). ``nW`` never crosses the month boundary and
  does not fire in months that have no day n. Reversed ranges (``FRI-MON``) are rejected.
* A step must lie between 1 and the size of its field (``*/0`` and ``*/61`` are rejected for Minutes).
* An expression that can never fire (``cron(0 0 30 2 ? *)``) is rejected; ``parse_schedule`` also
  rejects schedules with no fire time after ``now`` when the caller passes it (request-time check).
* The HyperPod developer guide's own examples read Day-of-week 1 as Monday ("2nd Monday
  ``1#2``"); slurmpod follows AWS's EventBridge cron reference (1 = SUN, ``2#1`` = first Monday).
"""

from __future__ import annotations

import calendar
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "MAX_YEAR",
    "MIN_YEAR",
    "AtSchedule",
    "CronSchedule",
    "Schedule",
    "ScheduleError",
    "due",
    "format_instant",
    "parse_schedule",
]

MAX_EXPRESSION_LENGTH = 256
MIN_YEAR = 1970
MAX_YEAR = 2199
_END = calendar.timegm((MAX_YEAR + 1, 1, 1, 0, 0, 0))  # first instant past the last possible fire time

_CRON_RE = re.compile(r"cron\((.*)\)", re.DOTALL)
_AT_RE = re.compile(r"at\((.*)\)", re.DOTALL)
_RATE_RE = re.compile(r"rate\(.*\)", re.DOTALL)
_AT_VALUE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")
_DIGITS_RE = re.compile(r"[0-9]+")  # used with fullmatch
_FORMS = "expected cron(Minutes Hours Day-of-month Month Day-of-week Year) or at(yyyy-mm-ddThh:mm:ss)."


class ScheduleError(ValueError):
    """An invalid schedule expression. ``message`` starts with ``Invalid ScheduleExpression <expr>: ``.

    The service layer turns it into ``ValidationException(message)``.
    """

    def __init__(self, expression: str, detail: str) -> None:
        self.expression = expression
        self.detail = detail
        self.message = f"Invalid ScheduleExpression {expression}: {detail}"
        super().__init__(self.message)


class _FieldError(Exception):
    """Raised inside field parsing; ``parse_schedule`` adds the expression prefix."""


def format_instant(t: float) -> str:
    """``2025-06-01T12:00:00Z`` for epoch seconds (whole seconds, UTC)."""
    return datetime.fromtimestamp(math.floor(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class _Field:
    name: str
    lo: int
    hi: int
    specials: str  # which of "/?LW#" this field allows
    names: Mapping[str, int] = field(default_factory=dict)

    @property
    def expected(self) -> str:
        rng = f"{self.lo}-{self.hi}"
        if not self.names:
            return rng
        ordered = sorted(self.names, key=lambda n: self.names[n])
        return f"{rng} or {ordered[0]}-{ordered[-1]}"


_MONTH_NAMES = {n: i for i, n in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}
_DOW_NAMES = {n: i for i, n in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), start=1)}

_MINUTES = _Field("Minutes", 0, 59, "/")
_HOURS = _Field("Hours", 0, 23, "/")
_DOM = _Field("Day-of-month", 1, 31, "/?LW")
_MONTH = _Field("Month", 1, 12, "/", _MONTH_NAMES)
_DOW = _Field("Day-of-week", 1, 7, "?L#", _DOW_NAMES)
_YEAR = _Field("Year", MIN_YEAR, MAX_YEAR, "/")


def _value(f: _Field, token: str, item: str) -> int:
    """One number or name of field ``f``; ``item`` is the list item it came from (for messages)."""
    if _DIGITS_RE.fullmatch(token):
        v = int(token)
        if not f.lo <= v <= f.hi:
            raise _FieldError(f"{f.name} value {token} is out of range {f.lo}-{f.hi}.")
        return v
    named = f.names.get(token.upper())
    if named is None:
        raise _FieldError(f"{f.name} value {item} is invalid; expected {f.expected}.")
    return named


def _check_specials(f: _Field, text: str) -> None:
    upper = text.upper()
    for c in "?#/LW":
        if c not in upper or c in f.specials:
            continue
        if c in "LW" and f.names:
            continue  # letters of names (JUL, WED); a stray L/W fails as an invalid value
        raise _FieldError(f"{f.name} does not allow '{c}'.")


def _parse_item(f: _Field, item: str) -> set[int]:
    """``*``, ``a``, ``a-b``, each optionally ``/step``."""
    base, sep, step_text = item.partition("/")
    step = 1
    if sep:
        span = f.hi - f.lo + 1
        if not _DIGITS_RE.fullmatch(step_text):
            raise _FieldError(f"{f.name} step {step_text} is invalid; expected a number 1-{span}.")
        step = int(step_text)
        if not 1 <= step <= span:
            raise _FieldError(f"{f.name} step {step_text} is out of range 1-{span}.")
    if base == "*":
        start, stop = f.lo, f.hi
    elif "-" in base:
        a, _, b = base.partition("-")
        start, stop = _value(f, a, item), _value(f, b, item)
        if start > stop:
            raise _FieldError(f"{f.name} range {base} is invalid: start is greater than end.")
    else:
        start = _value(f, base, item)
        stop = f.hi if sep else start
    return set(range(start, stop + 1, step))


def _parse_list(f: _Field, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _FieldError(f"{f.name} value {text} is invalid: empty list item.")
        values |= _parse_item(f, item)
    return frozenset(values)


def _alone(f: _Field, text: str, marker: str) -> None:
    if "," in text:
        raise _FieldError(f"{f.name} value {text} is invalid: '{marker}' cannot be combined with other values.")


# ----------------------------------------------------------------------------------------- day rules


@dataclass(frozen=True)
class _DayRule:
    """Which days of a month fire: ``kind`` is one of the constants below."""

    kind: str
    values: frozenset[int] = frozenset()  # days of month (DOM) or weekdays 1=SUN..7=SAT (DOW)
    n: int = 0  # the day for NEAREST_WEEKDAY, the weekday for LAST_DOW/NTH_DOW
    k: int = 0  # the occurrence for NTH_DOW

    DOM = "dom"
    DOW = "dow"
    LAST_DAY = "last-day"
    LAST_WEEKDAY = "last-weekday"
    NEAREST_WEEKDAY = "nearest-weekday"
    LAST_DOW = "last-dow"
    NTH_DOW = "nth-dow"


def _aws_weekday(year: int, month: int, day: int) -> int:
    """1=SUN .. 7=SAT."""
    return (calendar.weekday(year, month, day) + 1) % 7 + 1


def _nearest_weekday(year: int, month: int, day: int, length: int) -> int:
    wd = _aws_weekday(year, month, day)
    if wd == 7:  # Saturday: Friday before, or Monday after when the 1st
        return day + 2 if day == 1 else day - 1
    if wd == 1:  # Sunday: Monday after, or Friday before when the last day
        return day - 2 if day == length else day + 1
    return day


@lru_cache(maxsize=4096)
def _days(rule: _DayRule, year: int, month: int) -> tuple[int, ...]:
    """The days of ``year``-``month`` that ``rule`` selects, ascending."""
    first_wd, length = calendar.monthrange(year, month)
    first = (first_wd + 1) % 7 + 1  # AWS weekday of the 1st

    def weekday(d: int) -> int:
        return (first - 1 + d - 1) % 7 + 1

    if rule.kind == _DayRule.DOM:
        return tuple(d for d in sorted(rule.values) if d <= length)
    if rule.kind == _DayRule.DOW:
        return tuple(d for d in range(1, length + 1) if weekday(d) in rule.values)
    if rule.kind == _DayRule.LAST_DAY:
        return (length,)
    if rule.kind == _DayRule.LAST_WEEKDAY:
        return (_nearest_weekday(year, month, length, length),)
    if rule.kind == _DayRule.NEAREST_WEEKDAY:
        return (_nearest_weekday(year, month, rule.n, length),) if rule.n <= length else ()
    if rule.kind == _DayRule.LAST_DOW:
        return (length - (weekday(length) - rule.n) % 7,)
    if rule.kind == _DayRule.NTH_DOW:
        d = 1 + (rule.n - first) % 7 + 7 * (rule.k - 1)
        return (d,) if d <= length else ()
    raise AssertionError(rule.kind)


def _parse_dom(text: str) -> _DayRule:
    f = _DOM
    upper = text.upper()
    if upper == "L":
        return _DayRule(_DayRule.LAST_DAY)
    if upper == "LW":
        return _DayRule(_DayRule.LAST_WEEKDAY)
    if "L" in upper:
        _alone(f, text, "L")
        raise _FieldError(f"{f.name} value {text} is invalid; 'L' must be used alone or as LW.")
    if "W" in upper:
        _alone(f, text, "W")
        day = upper[:-1]
        if not upper.endswith("W") or not _DIGITS_RE.fullmatch(day):
            raise _FieldError(f"{f.name} value {text} is invalid; 'W' must follow a single day (e.g. 15W).")
        return _DayRule(_DayRule.NEAREST_WEEKDAY, n=_value(f, day, text))
    return _DayRule(_DayRule.DOM, _parse_list(f, text))


def _parse_dow(text: str) -> _DayRule:
    f = _DOW
    if "#" in text:
        _alone(f, text, "#")
        day, _, occurrence = text.partition("#")
        wd = _value(f, day, text)
        if not _DIGITS_RE.fullmatch(occurrence) or not 1 <= int(occurrence) <= 5:
            raise _FieldError(f"{f.name} value {text} is invalid: the occurrence after '#' must be 1-5.")
        return _DayRule(_DayRule.NTH_DOW, n=wd, k=int(occurrence))
    if "L" in text.upper():  # no weekday name contains an L
        _alone(f, text, "L")
        if not text.upper().endswith("L"):
            raise _FieldError(f"{f.name} value {text} is invalid; 'L' must follow a single weekday (e.g. 6L).")
        day = text[:-1]
        if not day:
            return _DayRule(_DayRule.DOW, frozenset({7}))  # L alone: the last day of every week
        return _DayRule(_DayRule.LAST_DOW, n=_value(f, day, text))
    return _DayRule(_DayRule.DOW, _parse_list(f, text))


# ------------------------------------------------------------------------------------------ schedules


@dataclass(frozen=True)
class Schedule(ABC):
    """A parsed schedule expression. ``recurring`` is true when it has more than one fire time."""

    expression: str
    recurring: bool

    @abstractmethod
    def next_fire(self, after: float) -> float | None:
        """The first fire time strictly after ``after`` (epoch seconds, UTC), or None if there is none."""

    @abstractmethod
    def latest_fire(self, until: float) -> float | None:
        """The last fire time at or before ``until`` (epoch seconds, UTC), or None if there is none."""


@dataclass(frozen=True)
class AtSchedule(Schedule):
    """``at(yyyy-mm-ddThh:mm:ss)``: fires once, at ``at``."""

    at: float

    def next_fire(self, after: float) -> float | None:
        return self.at if self.at > after else None

    def latest_fire(self, until: float) -> float | None:
        return self.at if self.at <= until else None


@dataclass(frozen=True)
class CronSchedule(Schedule):
    """``cron(...)``: each tuple holds the allowed values of one field, ascending."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: _DayRule
    months: tuple[int, ...]
    years: tuple[int, ...]

    def next_fire(self, after: float) -> float | None:
        if after >= _END:
            return None
        start = max(0, (math.floor(after) // 60) * 60 + 60)  # fire times are whole minutes
        s = datetime.fromtimestamp(start, UTC)
        # Walk the fields from the year down; each level is pinned to the start instant only while
        # every level above it equals the start's, so no minute-by-minute iteration is needed.
        for y in self.years:
            if y < s.year:
                continue
            yb = y == s.year
            for mo in self.months:
                if yb and mo < s.month:
                    continue
                mb = yb and mo == s.month
                for d in _days(self.days, y, mo):
                    if mb and d < s.day:
                        continue
                    db = mb and d == s.day
                    for h in self.hours:
                        if db and h < s.hour:
                            continue
                        hb = db and h == s.hour
                        for mi in self.minutes:
                            if hb and mi < s.minute:
                                continue
                            return float(calendar.timegm((y, mo, d, h, mi, 0)))
        return None

    def latest_fire(self, until: float) -> float | None:
        if until < 0:
            return None
        end = min((math.floor(until) // 60) * 60, _END - 60)
        e = datetime.fromtimestamp(end, UTC)
        for y in reversed(self.years):
            if y > e.year:
                continue
            yb = y == e.year
            for mo in reversed(self.months):
                if yb and mo > e.month:
                    continue
                mb = yb and mo == e.month
                for d in reversed(_days(self.days, y, mo)):
                    if mb and d > e.day:
                        continue
                    db = mb and d == e.day
                    for h in reversed(self.hours):
                        if db and h > e.hour:
                            continue
                        hb = db and h == e.hour
                        for mi in reversed(self.minutes):
                            if hb and mi > e.minute:
                                continue
                            return float(calendar.timegm((y, mo, d, h, mi, 0)))
        return None


def _parse_cron(body: str) -> CronSchedule:
    fields = body.split()
    if len(fields) != 6:
        raise _FieldError(f"expected 6 fields, got {len(fields)}.")
    m_text, h_text, dom_text, mon_text, dow_text, y_text = fields
    for f, text in zip((_MINUTES, _HOURS, _DOM, _MONTH, _DOW, _YEAR), fields, strict=True):
        _check_specials(f, text)
        if "?" in text and text != "?":
            raise _FieldError(f"{f.name} value {text} is invalid: '?' cannot be combined with other values.")
    if (dom_text == "?") == (dow_text == "?"):
        raise _FieldError("exactly one of Day-of-month and Day-of-week must be '?'.")
    minutes = _parse_list(_MINUTES, m_text)
    hours = _parse_list(_HOURS, h_text)
    days = _parse_dom(dom_text) if dow_text == "?" else _parse_dow(dow_text)
    months = _parse_list(_MONTH, mon_text)
    years = _parse_list(_YEAR, y_text)
    return CronSchedule(
        expression="",
        recurring=False,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=days,
        months=tuple(sorted(months)),
        years=tuple(sorted(years)),
    )


def _parse_at(body: str) -> AtSchedule:
    m = _AT_VALUE_RE.fullmatch(body)
    if not m:
        raise _FieldError(f"at() value {body} is invalid; expected yyyy-mm-ddThh:mm:ss.")
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    if not MIN_YEAR <= year <= MAX_YEAR:
        raise _FieldError(f"at() year {year} is out of range {MIN_YEAR}-{MAX_YEAR}.")
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as exc:
        raise _FieldError(f"at() value {body} is not a valid date and time ({exc}).") from None
    return AtSchedule(expression="", recurring=False, at=when.timestamp())


def parse_schedule(expr: str, now: float | None = None) -> Schedule:
    """Parses and validates a ScheduleExpression; raises ``ScheduleError`` with an AWS-style message.

    With ``now`` (request time), a schedule that has no fire time after ``now`` is rejected too.
    """
    if not 1 <= len(expr) <= MAX_EXPRESSION_LENGTH:
        raise ScheduleError(expr, f"length must be between 1 and {MAX_EXPRESSION_LENGTH} characters.")
    schedule: Schedule
    try:
        if (cm := _CRON_RE.fullmatch(expr)) is not None:
            schedule = _parse_cron(cm.group(1))
        elif (am := _AT_RE.fullmatch(expr)) is not None:
            schedule = _parse_at(am.group(1))
        elif _RATE_RE.fullmatch(expr):
            raise _FieldError("rate() expressions are not supported; use cron(...) or at(...).")
        else:
            raise _FieldError(_FORMS)
    except _FieldError as exc:
        raise ScheduleError(expr, str(exc)) from None
    first = schedule.next_fire(-1.0)
    if first is None:
        raise ScheduleError(expr, "the schedule never fires (no date matches all fields).")
    recurring = schedule.next_fire(first) is not None
    schedule = replace(schedule, expression=expr, recurring=recurring)
    if now is not None and schedule.next_fire(now) is None:
        raise ScheduleError(expr, f"the schedule has no fire time after {format_instant(now)}.")
    return schedule


def due(schedule: Schedule, last_fired: float | None, created: float, now: float) -> float | None:
    """The fire time the reconciler should act on now, or None.

    Fire times in ``(max(last_fired, created), now]`` are due; when several were missed (the server was
    down) only the latest is returned, so the update runs once, not once per missed fire time. The
    caller records the returned time as the new ``last_fired``.
    """
    since = created if last_fired is None else max(last_fired, created)
    t = schedule.latest_fire(now)
    if t is None or t <= since:
        return None
    return t
