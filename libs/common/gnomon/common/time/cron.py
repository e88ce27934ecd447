"""Cron rules: parse (crontab(5) + Quartz extensions) and generate naive local wall-time candidates.

Fields are expanded here (:func:`_expand`): ranges, steps, lists and names as crontab(5) and
cronie's ``entry.c:get_range`` read them (``A-B/S`` steps from A up to B, so ``5-5/10`` is minute
5 only), Quartz ``N/S`` read as ``N-max/S``, Quartz ``L``/``LW``/``NW``/``NL``/``N#K``/``?``.
Matching is cronsim's (``cronsim.CronSim`` iterated over a *naive* datetime, i.e. pure wall
clock, fed the sets built here; cronsim's own field parser is not used), plus ``@`` macros,
Quartz ``W`` (nearest weekday in the same month), positional error messages and a quick "never
fires" check. Day of week follows crontab(5): 0 and 7 are Sunday. When both day fields are
restricted (neither starts with ``*``) a day matches if EITHER matches (POSIX/Vixie, cronie
``cron.c``: ``DOM_STAR``/``DOW_STAR``).
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
from cronsim.cronsim import SYMBOLIC_DAYS

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
_DIGITS = re.compile(r"[0-9]+")
_MONTH_NAMES = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
_DOW_NAMES = "SUN MON TUE WED THU FRI SAT".split()
_ONE_S = timedelta(seconds=1)
OR_NOTE = "day-of-month OR day-of-week (POSIX): matched "


@dataclass(frozen=True)
class CronPlan:
    """A parsed cron expression (immutable, cached by text).

    ``fields`` are the 6 normalised field texts (seconds first); the sets are in cronsim's
    representation (``CronSim.LAST``/``LAST_WEEKDAY`` in ``days``; ``(weekday, nth)`` and
    ``(weekday, CronSim.LAST)`` pairs in ``weekdays``, Sunday as 0).
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


class _BadTerm(ValueError):
    """A list item that is not valid in its field; ``str(self)`` says why."""


def _value(idx: int, token: str) -> int:
    """One field value: a number in the field's range, or a name (``JAN``-``DEC`` in month,
    ``SUN``-``SAT`` in day-of-week), as cronie's ``get_number`` reads them."""
    if idx == 4 and token in _MONTH_NAMES:
        return _MONTH_NAMES.index(token) + 1
    if idx == 5 and token in _DOW_NAMES:
        return _DOW_NAMES.index(token)
    if not _DIGITS.fullmatch(token):
        raise _BadTerm("not a valid value")
    lo, hi = _RANGES[idx]
    if len(token.lstrip("0")) > 2 or not lo <= int(token) <= hi:
        raise _BadTerm(f"out of range {lo}-{hi}")
    return int(token)


def _step(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise _BadTerm("step must be a positive integer")
    if int(text) == 0:
        raise _BadTerm("step must be >= 1")
    return int(text) if len(text) < 9 else 10**8  # larger than every field anyway


def _expand(idx: int, term: str) -> set[int | tuple[int, int]]:
    """The values of one list item (no ``,``, no ``W``), in cronsim's representation.

    ``*``, ``N``, ``A-B`` and each of them with ``/S``: the values from the first bound up to and
    including the second, every S-th (crontab(5); cronie ``entry.c:get_range``: ``for (i = low_;
    i <= high_; i += step)``), so ``A-A/S`` is ``{A}``. ``N/S`` (Quartz; cronie refuses it) is
    ``N-max/S``, max being the field's largest value (7 in day-of-week). In day-of-week a range
    ending at 0 (``SUN``) ends at 7 (cronie: ``if (low_ > high_ && high_ == 0) high_ = 7``), so
    ``FRI-SUN`` is Friday to Sunday; other ranges whose start exceeds their end are refused. Plus
    the Quartz day terms ``L`` and ``LW`` (day-of-month), ``NL`` and ``N#K`` (day-of-week). Day of
    week 7 becomes 0 (Sunday). Raises :class:`_BadTerm` saying why the item is refused.
    """
    if idx == 3 and term in ("L", "LW"):
        return {CronSim.LAST if term == "L" else CronSim.LAST_WEEKDAY}
    if idx == 3 and term.split("/")[0] in ("L", "LW"):
        raise _BadTerm("no step is allowed after L or LW")
    if "#" in term:
        if idx != 5:
            raise _BadTerm("'#' is only allowed in day-of-week (e.g. FRI#2)")
        day, nth = term.split("#", 1)
        if not re.fullmatch(r"[1-5]", nth):
            raise _BadTerm("'#' needs an occurrence 1-5 (e.g. FRI#2)")
        return {(_value(idx, day) % 7, int(nth))}
    if idx == 5 and term.endswith("L"):
        return {(_value(idx, term[:-1]) % 7, CronSim.LAST)}
    base, slash, step_text = term.partition("/")
    step = _step(step_text) if slash else 1
    lo, hi = _RANGES[idx]
    if base == "*":
        first, last = lo, hi
    elif "-" in base:
        start, _, end = base.partition("-")
        first, last = _value(idx, start), _value(idx, end)
        if idx == 5 and last == 0 < first:
            last = 7
        if first > last:
            raise _BadTerm("range start must not exceed its end")
    else:
        first = _value(idx, base)
        last = hi if slash else first
    values = range(first, last + 1, step)
    return {v % 7 for v in values} if idx == 5 else set(values)


def _parse_field(idx: int, pos: int, text: str) -> tuple[frozenset[int | tuple[int, int]], tuple[int, ...]]:
    """One field (index ``idx``, seconds = 0; position ``pos`` as written) as its value set and
    its Quartz ``NW`` days. Raises RuleError ``INVALID_CRON`` naming the field and the item."""
    if text == "":
        raise _fail(pos, idx, text, "empty")
    w_days: list[int] = []
    values: set[int | tuple[int, int]] = set()
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
            values |= _expand(idx, term)
        except _BadTerm as e:
            raise _fail(pos, idx, term, str(e)) from None
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
