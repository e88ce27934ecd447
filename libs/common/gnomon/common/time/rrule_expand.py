"""Expand the RRULE part of a recurrence into naive local wall times, period by period, with a
bounded amount of work per search.

Why not ``dateutil.rrule`` itself: dateutil checks UNTIL only against a time it has produced, so a
rule whose periods stop producing times (``FREQ=HOURLY;BYMINUTE=0;BYSETPOS=2``, a leap day on a
Monday every 28 years at FREQ=MINUTELY) makes one ``next()`` scan every period up to year 9999:
seconds to minutes of CPU. And dateutil builds the first WEEKLY period from DTSTART rather than
from the week start, so BYSETPOS picks from part of a week and a search re-based to a later week
disagrees with one started at DTSTART. This module walks the periods itself:

* A period is the whole WKST-aligned week (WEEKLY), calendar month (MONTHLY), year (YEARLY), day
  (DAILY), hour, minute or second, on the INTERVAL grid counted from DTSTART's period
  (RFC 5545 §3.3.10: "The INTERVAL rule part ... how often the recurrence rule repeats").
* Its set is every day of the period that passes the BYxxx day filters (the masks of dateutil's
  ``_iterinfo`` for YEARLY and MONTHLY, which handle numbered BYDAY and BYWEEKNO; direct tests
  otherwise), times every BYHOUR x BYMINUTE x BYSECOND time (RFC 5545 §3.3.10 expand/limit table).
* BYSETPOS picks from the whole set (RFC 5545 §3.3.10: "the nth occurrence within the set of
  recurrence instances specified by the rule"); then times before DTSTART are dropped.
* Work is counted (one unit per day or time looked at); a search that looks at more than
  :data:`MAX_SEARCH_WORK` units without producing a time is refused with ``RULE_TOO_EXPENSIVE``.
"""

from __future__ import annotations

import calendar
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from dateutil import rrule as du

from .errors import RuleError

#: Days or times one search may look at without producing a time, before RULE_TOO_EXPENSIVE.
#: About 0.1 s of CPU on this project's reference machine (a unit is one day-filter test or one
#: candidate time); 50 years of days is 18,262 units, so every rule of a daily or coarser
#: period whose next time is within the 50-year horizon stays well inside it.
MAX_SEARCH_WORK = 200_000
#: How far ahead of its search point an expansion looks (50 years and the leap days in them).
HORIZON = timedelta(days=365 * 50 + 13)
_UNIT = {du.HOURLY: 3600, du.MINUTELY: 60, du.SECONDLY: 1}


def _tsec(t: time) -> int:
    return t.hour * 3600 + t.minute * 60 + t.second


@dataclass(frozen=True)
class Filters:
    """The BYxxx parts of a rule as sets (``None`` = the part is absent), built once per plan.

    ``nth``: True when BYDAY has ordinals or BYWEEKNO/BYYEARDAY is given with FREQ YEARLY/MONTHLY
    (then the day test uses dateutil's masks). ``times``: the sorted BYHOUR x BYMINUTE x BYSECOND
    times (FREQ DAILY and coarser only).
    """

    freq: int
    interval: int
    dtstart: datetime
    wkst: int
    months: frozenset[int] | None
    weekdays: frozenset[int] | None
    monthdays: frozenset[int] | None  # positive and negative values
    yeardays: frozenset[int] | None
    hours: tuple[int, ...] | None
    minutes: tuple[int, ...] | None
    seconds: tuple[int, ...] | None
    setpos: tuple[int, ...] | None
    masks: bool
    times: tuple[time, ...]
    du_rule: Any  # dateutil rrule giving ``_iterinfo`` its parts (YEARLY/MONTHLY with masks)


def filters_of(dtstart: datetime, kw: dict[str, Any]) -> Filters:
    """The :class:`Filters` of dateutil-style keyword arguments ``kw`` (explicit defaults, see
    ``rrule._explicit``) with DTSTART ``dtstart`` (naive local)."""
    f = kw["freq"]
    days: tuple[Any, ...] = kw.get("byweekday") or ()
    plain = frozenset(d.weekday for d in days if not d.n)
    nth = any(d.n for d in days)
    months = frozenset(kw["bymonth"]) if "bymonth" in kw else None
    masks = f in (du.YEARLY, du.MONTHLY) and (nth or "byweekno" in kw or "byyearday" in kw)
    hours, minutes, seconds = kw.get("byhour"), kw.get("byminute"), kw.get("bysecond")
    times: tuple[time, ...] = ()
    if f <= du.DAILY:
        hs, ms, ss = kw["byhour"], kw["byminute"], kw["bysecond"]  # explicit below HOURLY
        times = tuple(time(h, m, s) for h in hs for m in ms for s in ss)
    rule = None
    if masks:
        rule = du.rrule(dtstart=dtstart, **{k: v for k, v in kw.items() if k not in ("count", "until")})
    return Filters(
        freq=f,
        interval=kw.get("interval", 1),
        dtstart=dtstart,
        wkst=kw.get("wkst", 0),
        months=months,
        weekdays=plain or None,
        monthdays=frozenset(kw["bymonthday"]) if "bymonthday" in kw else None,
        yeardays=frozenset(kw["byyearday"]) if "byyearday" in kw else None,
        hours=tuple(hours) if hours is not None else None,
        minutes=tuple(minutes) if minutes is not None else None,
        seconds=tuple(seconds) if seconds is not None else None,
        setpos=tuple(kw["bysetpos"]) if "bysetpos" in kw else None,
        masks=masks,
        times=times,
        du_rule=rule,
    )


class Budget:
    """The work counter of one search: :meth:`spend` raises ``RULE_TOO_EXPENSIVE`` (field
    ``rrule``) past ``limit`` units since the last :meth:`produced`."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = MAX_SEARCH_WORK):
        self.limit, self.used = limit, 0

    def spend(self, units: int) -> None:
        """Counts ``units`` of work; raises RuleError when the search has spent its budget."""
        self.used += units
        if self.used > self.limit:
            raise RuleError(
                "RULE_TOO_EXPENSIVE",
                "rrule",
                f"finding the next time of this rule takes more than {self.limit} steps "
                "(its BY-filters rarely or never select a time); simplify the rule",
            )

    def produced(self) -> None:
        """A time was produced: the next search starts a fresh budget."""
        self.used = 0


def _day_ok(fl: Filters, d: date) -> bool:
    """The RFC 5545 day filters (BYMONTH, BYMONTHDAY, BYYEARDAY, plain BYDAY) on one date."""
    if fl.months is not None and d.month not in fl.months:
        return False
    if fl.weekdays is not None and d.weekday() not in fl.weekdays:
        return False
    if fl.monthdays is not None:
        last = calendar.monthrange(d.year, d.month)[1]
        if d.day not in fl.monthdays and d.day - last - 1 not in fl.monthdays:
            return False
    if fl.yeardays is not None:
        yd = d.timetuple().tm_yday
        ylen = 366 if calendar.isleap(d.year) else 365
        if yd not in fl.yeardays and yd - ylen - 1 not in fl.yeardays:
            return False
    return True


@functools.lru_cache(maxsize=4096)
def _masked_days(fl: Filters, year: int, month: int) -> tuple[date, ...]:
    """The dates of ``year`` (YEARLY, ``month`` 0) or of ``year``-``month`` (MONTHLY) passing the
    day filters, by dateutil's own masks (the test of ``rrule._iter``; numbered BYDAY within the
    month or year, BYWEEKNO by WKST)."""
    ii: Any = du._iterinfo(fl.du_rule)
    ii.rebuild(year, month or 1)
    r = fl.du_rule
    lo, hi = (ii.mrange[month - 1], ii.mrange[month]) if month else (0, ii.yearlen)
    out = []
    plain, nth = r._byweekday, ii.nwdaymask
    for i in range(lo, hi):
        if (
            (r._bymonth and ii.mmask[i] not in r._bymonth)
            or (r._byweekno and not ii.wnomask[i])
            # BYDAY values each select days (RFC 5545 §3.3.10), so plain and numbered ones are a
            # union; dateutil's own test requires both, and BYDAY=1TU,FR would never fire
            or ((plain or nth) and not ((plain and ii.wdaymask[i] in plain) or (nth and nth[i])))
            or (
                (r._bymonthday or r._bynmonthday)
                and ii.mdaymask[i] not in r._bymonthday
                and ii.nmdaymask[i] not in r._bynmonthday
            )
            or (r._byyearday and i + 1 not in r._byyearday and -ii.yearlen + i not in r._byyearday)
        ):
            continue
        out.append(date.fromordinal(ii.yearordinal + i))
    return tuple(out)


def _select(fl: Filters, instants: list[datetime]) -> list[datetime]:
    """BYSETPOS over one period's whole sorted set (RFC 5545 §3.3.10), or the set itself."""
    if fl.setpos is None:
        return instants
    n = len(instants)
    picked = {instants[p - 1 if p > 0 else p] for p in fl.setpos if -n <= p <= n and p}
    return sorted(picked)


def _day_periods(fl: Filters, first: date, last: date, budget: Budget) -> Iterator[list[date]]:
    """The matching days of each period (DAILY and coarser) from the grid period holding ``first``
    through the one holding ``last``."""
    d0, n, f = fl.dtstart.date(), fl.interval, fl.freq
    if f == du.YEARLY:
        y = d0.year + max(0, (first.year - d0.year) // n * n)
        while y <= last.year:
            budget.spend(366 if fl.masks else 12)
            yield (
                list(_masked_days(fl, y, 0)) if fl.masks else _plain_days(fl, date(y, 1, 1), date(y, 12, 31))
            )
            y += n
    elif f == du.MONTHLY:
        m = d0.year * 12 + d0.month - 1
        m += max(0, (first.year * 12 + first.month - 1 - m) // n * n)
        while m <= last.year * 12 + last.month - 1:
            y, mo = divmod(m, 12)
            budget.spend(31 if fl.masks else 1)
            if fl.masks:
                yield list(_masked_days(fl, y, mo + 1))
            else:
                yield _plain_days(fl, date(y, mo + 1, 1), date(y, mo + 1, calendar.monthrange(y, mo + 1)[1]))
            m += n
    else:  # WEEKLY, DAILY
        span = 7 * n if f == du.WEEKLY else n
        origin = d0 - timedelta(days=(d0.weekday() - fl.wkst) % 7) if f == du.WEEKLY else d0
        k = max(0, (first - origin).days // span)
        start = origin + timedelta(days=k * span)
        width = 7 if f == du.WEEKLY else 1
        step = timedelta(days=span)
        while start <= last:
            days = []
            for j in range(width):
                day = start + timedelta(days=j)
                budget.spend(1)
                if _day_ok(fl, day):
                    days.append(day)
            yield days
            start += step


def _plain_days(fl: Filters, lo: date, hi: date) -> list[date]:
    """The dates in [lo, hi] (whole months) passing :func:`_day_ok`: month by month, and only the
    listed days of a month when BYMONTHDAY is given."""
    out: list[date] = []
    y, m = lo.year, lo.month
    while (y, m) <= (hi.year, hi.month):
        if fl.months is None or m in fl.months:
            last = calendar.monthrange(y, m)[1]
            if fl.monthdays is not None:
                days = sorted(
                    {md if md > 0 else last + md + 1 for md in fl.monthdays} & set(range(1, last + 1))
                )
            else:
                days = list(range(1, last + 1))
            out.extend(d for d in (date(y, m, x) for x in days) if _day_ok(fl, d))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def _coarse(fl: Filters, first: datetime, last: datetime, budget: Budget) -> Iterator[datetime]:
    for days in _day_periods(fl, first.date(), last.date(), budget):
        if not days:
            continue
        budget.spend(len(days) * len(fl.times))
        for w in _select(fl, [datetime.combine(d, t) for d in days for t in fl.times]):
            if w > last:
                return
            if w >= first:
                budget.produced()
                yield w


def _fine(fl: Filters, first: datetime, last: datetime, budget: Budget) -> Iterator[datetime]:
    """HOURLY/MINUTELY/SECONDLY: grid units (counted from DTSTART's unit) of each matching day;
    the BYxxx parts finer than FREQ expand each unit (RFC 5545 §3.3.10)."""
    unit, n = _UNIT[fl.freq], fl.interval
    g0 = (fl.dtstart.toordinal() * 86400 + _tsec(fl.dtstart.time())) // unit  # DTSTART's unit
    offsets = _unit_offsets(fl)
    keys = _unit_keys(fl)
    allowed = None if keys is None else frozenset(keys)
    per_day = 86400 // unit
    lo = (first.toordinal() * 86400 + _tsec(first.time())) // unit  # the unit holding ``first``
    day, one = first.date(), timedelta(days=1)
    while day <= last.date():
        budget.spend(1)
        if _day_ok(fl, day):
            base = day.toordinal() * per_day
            start = max(base, lo, g0)
            start += (g0 - start) % n
            end = base + per_day
            if keys is not None and len(keys) * n < end - start:
                budget.spend(len(keys))
                units: Iterable[int] = (
                    u for u in (base + k for k in keys) if u >= start and (u - g0) % n == 0
                )
            else:
                budget.spend((end - start) // n + 1)
                units = (u for u in range(start, end, n) if allowed is None or u - base in allowed)
            for u in units:
                s0 = (u - base) * unit
                budget.spend(len(offsets))
                cands = [
                    datetime.combine(day, time((s0 + v) // 3600, (s0 + v) // 60 % 60, (s0 + v) % 60))
                    for v in offsets
                ]
                for w in _select(fl, cands):
                    if w > last:
                        return
                    if w >= first:
                        budget.produced()
                        yield w
        day += one


def _unit_offsets(fl: Filters) -> tuple[int, ...]:
    """Seconds after the start of a grid unit at which the rule's instants fall: BYMINUTE x BYSECOND
    in an hour (HOURLY), BYSECOND in a minute (MINUTELY), 0 (SECONDLY)."""
    secs = fl.seconds if fl.seconds is not None else tuple(range(60))
    if fl.freq == du.HOURLY:
        mins = fl.minutes if fl.minutes is not None else tuple(range(60))
        return tuple(m * 60 + x for m in mins for x in secs)
    if fl.freq == du.MINUTELY:
        return secs
    return (0,)


def _unit_keys(fl: Filters) -> tuple[int, ...] | None:
    """The units of a day (hour, minute or second of the day, by FREQ) that pass BYHOUR (and
    BYMINUTE, BYSECOND where they limit rather than expand), ascending; None when every unit does."""
    if fl.freq == du.HOURLY:
        return fl.hours
    if fl.freq == du.MINUTELY:
        if fl.hours is None and fl.minutes is None:
            return None
        hours = fl.hours or tuple(range(24))
        mins = fl.minutes if fl.minutes is not None else tuple(range(60))
        return tuple(h * 60 + m for h in hours for m in mins)
    if fl.hours is None and fl.minutes is None and fl.seconds is None:
        return None
    hours = fl.hours or tuple(range(24))
    mins = fl.minutes if fl.minutes is not None else tuple(range(60))
    secs = fl.seconds if fl.seconds is not None else tuple(range(60))
    return tuple(h * 3600 + m * 60 + x for h in hours for m in mins for x in secs)


def walls(fl: Filters, first: datetime, last: datetime, budget: Budget | None = None) -> Iterator[datetime]:
    """Naive wall times of the rule in ``[max(first, DTSTART), last]``, ascending, each period's
    set taken whole before BYSETPOS (see the module docstring).

    Raises:
        RuleError: ``RULE_TOO_EXPENSIVE`` (field ``rrule``) when :data:`MAX_SEARCH_WORK` units
            pass without a time (raised lazily, from ``next()``).
    """
    budget = budget or Budget()
    first = max(first, fl.dtstart)
    if first > last:
        return iter(())
    if fl.freq >= du.HOURLY:
        return _fine(fl, first, last, budget)
    return _coarse(fl, first, last, budget)
