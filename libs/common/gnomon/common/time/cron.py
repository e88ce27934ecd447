"""Cron rules: parse (crontab(5) + Quartz extensions) and generate naive local wall-time candidates.

Matching is cronsim's (``cronsim.CronSim`` iterated over a *naive* datetime, i.e. pure wall
clock); this module adds what cronsim lacks: ``@`` macros, Quartz ``W`` (nearest weekday in the
same month), ``?`` (= ``*`` in a day field), positional error messages and a quick
"never fires" check. Day of week follows crontab(5): 0 and 7 are Sunday. When both day fields
are restricted (neither starts with ``*``) a day matches if EITHER matches (POSIX/Vixie).
"""

from __future__ import annotations

import calendar
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import cast

from cronsim import CronSim
from cronsim.cronsim import SYMBOLIC_DAYS, CronSimError, Field

from .errors import RuleError

MACROS = {
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
    "@MONTHLY": "0 0 1 * *",
    "@WEEKLY": "0 0 * * 0",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@HOURLY": "0 * * * *",
}
_NAMES = ["second", "minute", "hour", "day-of-month", "month", "day-of-week"]
_RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
_DAYS_IN_MONTH = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_W_TERM = re.compile(r"^(\d{1,2})W$")
_ONE_S = timedelta(seconds=1)
OR_NOTE = "day-of-month OR day-of-week (POSIX): matched "


@dataclass(frozen=True)
class CronPlan:
    """A parsed cron expression (immutable, cached by text).

    ``fields`` are the 6 normalised field texts (seconds first); the sets are cronsim's.
    ``elapsed`` is True when the hour field is ``*`` or has a step (an elapsed-time rule).
    """

    text: str
    fields: tuple[str, ...]
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    w_days: tuple[int, ...]
    months: frozenset[int]
    weekdays: frozenset[int | tuple[int, int]]
    day_and: bool
    elapsed: bool


def _fail(pos: int, idx: int, text: str, why: str) -> RuleError:
    return RuleError("INVALID_CRON", "cron", f"field {pos} ({_NAMES[idx]}) '{text}': {why}")


def _diagnose(idx: int, term: str) -> str:
    lo, hi = _RANGES[idx]
    for num in re.findall(r"\d+", term.split("/")[0].split("#")[0]):
        if not lo <= int(num) <= hi:
            return f"out of range {lo}-{hi}"
    if "/" in term:
        step = term.split("/", 1)[1]
        if not step.isdigit():
            return "step must be a positive integer"
        if int(step) == 0:
            return "step must be >= 1"
    if "#" in term:
        nth = term.split("#", 1)[1]
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            return "'#' needs an occurrence 1-5 (e.g. FRI#2)"
    m = re.match(r"^(\w+)-(\w+)", term)
    if m:
        return (
            "range start must not exceed its end" if all(x.isdigit() for x in m.groups()) else "invalid range"
        )
    return "not a valid value"


def _parse_field(idx: int, pos: int, text: str) -> tuple[frozenset[int | tuple[int, int]], tuple[int, ...]]:
    if text == "":
        raise _fail(pos, idx, text, "empty")
    w_days: list[int] = []
    rest: list[str] = []
    for term in text.split(","):
        if term == "":
            raise _fail(pos, idx, text, "empty list item")
        m = _W_TERM.match(term)
        if m and idx == 3:
            n = int(m.group(1))
            if not 1 <= n <= 31:
                raise _fail(pos, idx, term, "out of range 1-31")
            w_days.append(n)
            continue
        if idx == 3 and "W" in term and term != "LW":
            raise _fail(pos, idx, term, "'W' is only allowed as NW (nearest weekday, N 1-31) or LW")
        try:
            Field(idx).parse(term)
        except (CronSimError, ValueError, IndexError) as e:
            raise _fail(pos, idx, term, _diagnose(idx, term)) from e
        rest.append(term)
    values: set[int | tuple[int, int]] = set()
    for term in rest:
        values |= Field(idx).parse(term)
    return frozenset(values), tuple(sorted(set(w_days)))


def _ints(values: frozenset[int | tuple[int, int]]) -> frozenset[int]:
    """The values of a field other than day-of-week: plain numbers (only ``FRI#2`` gives pairs)."""
    return cast(frozenset[int], values)


@functools.lru_cache(maxsize=8192)
def parse_cron(expression: str) -> CronPlan:
    """Parse a cron expression into a :class:`CronPlan`.

    Accepts 5 fields (minute hour day-of-month month day-of-week, crontab(5)) or 6 (second
    first), the macros @yearly @annually @monthly @weekly @daily @midnight @hourly, names
    (JAN-DEC, SUN-SAT), ranges, lists, steps, ``L``, ``LW``, ``NW``, ``5L``, ``FRI#2`` and ``?``.

    Raises:
        RuleError: ``INVALID_CRON`` (field ``cron``) naming the field position, or
            ``RULE_NEVER_FIRES`` when the day fields can never match a month (``0 0 31 4 *``).
    """
    if not isinstance(expression, str) or not expression.strip():
        raise RuleError("INVALID_CRON", "cron", "empty cron expression")
    text = expression.strip().upper()
    if text.startswith("@"):
        if text == "@REBOOT":
            raise RuleError("INVALID_CRON", "cron", "@reboot is not a schedule (no fire time); not supported")
        if text not in MACROS:
            raise RuleError(
                "INVALID_CRON",
                "cron",
                f"unknown macro '{expression.strip()}'; use one of "
                "@yearly @annually @monthly @weekly @daily @midnight @hourly",
            )
        text = MACROS[text]
    parts = text.split()
    if len(parts) == 7:
        raise RuleError(
            "INVALID_CRON",
            "cron",
            "7 fields given: the Quartz year field is not supported; "
            "use 5 fields (minute hour day-of-month month day-of-week) or 6 (second first)",
        )
    if len(parts) not in (5, 6):
        raise RuleError(
            "INVALID_CRON",
            "cron",
            f"{len(parts)} fields given: only 5 fields (minute hour "
            "day-of-month month day-of-week) or 6 (second first) are accepted",
        )
    shift = 0 if len(parts) == 6 else 1
    fields = (["0"] if shift else []) + parts
    for i, f in enumerate(fields):
        if "?" in f:
            if i not in (3, 5) or f != "?":
                raise _fail(i + 1 - shift, i, f, "'?' is only allowed alone in day-of-month or day-of-week")
            fields[i] = "*"
    sets = [_parse_field(i, i + 1 - shift, f) for i, f in enumerate(fields)]
    day_and = fields[3].startswith("*") or fields[5].startswith("*")
    days = _ints(sets[3][0])
    w_days = sets[3][1]
    months = _ints(sets[4][0])
    if day_and and not fields[3].startswith("*"):
        ints = [d for d in days if d > 0] + list(w_days)
        special = any(d < 0 for d in days)
        if not special and min(ints) > max(_DAYS_IN_MONTH[m] for m in months):
            raise RuleError(
                "RULE_NEVER_FIRES",
                "cron",
                f"'{expression.strip()}' never fires: day-of-month "
                f"'{fields[3]}' does not exist in month(s) '{fields[4]}'",
            )
    hour = fields[2]
    return CronPlan(
        text=" ".join(fields),
        fields=tuple(fields),
        seconds=_ints(sets[0][0]),
        minutes=_ints(sets[1][0]),
        hours=_ints(sets[2][0]),
        days=days,
        w_days=w_days,
        months=months,
        weekdays=sets[5][0],
        day_and=day_and,
        elapsed=(hour == "*" or "/" in hour),
    )


@functools.lru_cache(maxsize=4096)
def nearest_weekday(year: int, month: int, n: int) -> int | None:
    """Quartz ``nW``: the weekday (Mon-Fri) nearest day ``n`` in the same month, never crossing
    the month (1st on a Saturday -> Monday 3rd); ``None`` when the month has no day ``n``."""
    last = calendar.monthrange(year, month)[1]
    if n > last:
        return None
    wd = date(year, month, n).weekday()
    if wd == 5:
        return n - 1 if n > 1 else n + 2
    if wd == 6:
        return n + 1 if n < last else n - 2
    return n


class _Sim(CronSim):
    """cronsim over a naive datetime, built from a cached plan (no re-parse), plus ``W``."""

    def __init__(self, plan: CronPlan, dt: datetime):
        self.skip_initial_tick = False
        self.dt = dt.replace(microsecond=0)
        self.tick_direction = 1
        self.parts = list(plan.fields)
        self.day_and = plan.day_and
        # cronsim only reads these sets; the plan's frozen ones are shared, never copied
        self.seconds = cast(set[int], plan.seconds)
        self.minutes = cast(set[int], plan.minutes)
        self.hours = cast(set[int], plan.hours)
        self.days = cast(set[int], plan.days)
        self.months = cast(set[int], plan.months)
        self.weekdays = cast(set[int | tuple[int, int]], plan.weekdays)
        self.fixup_tz = None
        self._w = plan.w_days

    def match_dom(self, d: date) -> bool:
        if super().match_dom(d):
            return True
        for n in self._w:
            if nearest_weekday(d.year, d.month, n) == d.day:
                return True
        return False


def candidates(plan: CronPlan, start: datetime) -> Iterator[tuple[datetime, str]]:
    """Naive wall times matching ``plan`` at or after naive ``start`` (whole seconds), ascending,
    each with a note (the POSIX day-OR explanation, or ``""``). Each step searches at most
    50 years (cronsim's bound), then the iterator ends."""
    sim = _Sim(plan, start - _ONE_S)
    nxt = sim.__next__
    if plan.day_and:
        while True:
            try:
                yield nxt(), ""
            except StopIteration:
                return
    while True:
        try:
            wall = nxt()
        except StopIteration:
            return
        d = wall.date()
        dom, dow = sim.match_dom(d), sim.match_dow(d)
        name = SYMBOLIC_DAYS[(d.weekday() + 1) % 7]
        if dom and dow:
            what = f"day-of-month {d.day} and day-of-week {name}"
        elif dom:
            what = f"day-of-month {d.day}"
        else:
            what = f"day-of-week {name}"
        yield wall, OR_NOTE + what
