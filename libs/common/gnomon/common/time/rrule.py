"""RFC 5545 recurrence rules: parse, bound the cost, and generate naive local wall-time candidates.

Expansion is dateutil's ``rrule``/``rruleset`` over a *naive* DTSTART (pure wall clock). This
module parses the text itself (to report the position of a fault and to refuse rules whose
expansion would be unbounded or too expensive), and re-bases DTSTART by whole periods so a
search far after DTSTART does not replay every earlier occurrence.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any, NoReturn

from dateutil import rrule as du

from .errors import RuleError
from .zones import UTC

FREQS = {
    "YEARLY": du.YEARLY,
    "MONTHLY": du.MONTHLY,
    "WEEKLY": du.WEEKLY,
    "DAILY": du.DAILY,
    "HOURLY": du.HOURLY,
    "MINUTELY": du.MINUTELY,
    "SECONDLY": du.SECONDLY,
}
_DAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
_INT_PARTS = {  # name -> (lo, hi, zero allowed, negatives allowed)
    "BYSECOND": (0, 59, True, False),
    "BYMINUTE": (0, 59, True, False),
    "BYHOUR": (0, 23, True, False),
    "BYMONTHDAY": (1, 31, False, True),
    "BYYEARDAY": (1, 366, False, True),
    "BYWEEKNO": (1, 53, False, True),
    "BYMONTH": (1, 12, False, False),
    "BYSETPOS": (1, 366, False, True),
}
_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_DT = re.compile(r"^(\d{8})(T(\d{6})(Z)?)?$")
MAX_COUNT = 100_000
MAX_DATES = 1000
MAX_SECONDLY_STEPS = 3600
MAX_SETPOS_PERIOD = 100_000
HORIZON = timedelta(days=365 * 50 + 13)


@dataclass
class RRulePlan:
    """A parsed RFC 5545 recurrence (RRULE + RDATE + EXDATE), with naive local DTSTART.

    ``kwargs`` are dateutil ``rrule`` keyword arguments with the defaults dateutil would take
    from DTSTART made explicit (so DTSTART can be re-based). ``elapsed``: FREQ HOURLY or finer
    without BYHOUR. Mutable only for the lazily materialised list of a COUNT rule.
    """

    dtstart: datetime
    freq: int | None
    kwargs: dict[str, Any]
    rdates: tuple[datetime, ...]
    exdates: tuple[datetime, ...]
    elapsed: bool
    _materialised: list[datetime] | None = field(default=None, repr=False)


def _bad(msg: str, reason: str = "INVALID_RRULE") -> RuleError:
    return RuleError(reason, "rrule", msg)


def _parse_dt(value: str, zone: tzinfo, where: str, *, date_time: time | None = None) -> datetime:
    m = _DT.match(value)
    if not m:
        raise _bad(f"{where} '{value}': expected YYYYMMDD or YYYYMMDDTHHMMSS[Z]")
    try:
        d = datetime.strptime(m.group(1), "%Y%m%d")
        if m.group(3):
            t = datetime.strptime(m.group(3), "%H%M%S").time()
            d = datetime.combine(d.date(), t)
        elif date_time is not None:
            d = datetime.combine(d.date(), date_time)
    except ValueError as e:
        raise _bad(f"{where} '{value}': not a valid date/time") from e
    if m.group(4):  # UTC -> local wall time in the rule's zone
        d = d.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None)
    return d


def _params(name_params: str, zone_name: str, where: str) -> dict[str, str]:
    parts = name_params.split(";")
    params = {}
    for p in parts[1:]:
        if "=" not in p:
            raise _bad(f"{where}: parameter '{p}' is not NAME=VALUE")
        k, v = p.split("=", 1)
        params[k.upper()] = v
    tzid = params.get("TZID")
    if tzid is not None and tzid != zone_name:
        raise _bad(f"{where}: TZID '{tzid}' must equal the schedule time_zone '{zone_name}'")
    for k in params:
        if k not in ("TZID", "VALUE"):
            raise _bad(f"{where}: parameter '{k}' is not supported")
    if params.get("VALUE", "DATE-TIME").upper() not in ("DATE", "DATE-TIME"):
        raise _bad(f"{where}: VALUE={params['VALUE']} is not supported (DATE or DATE-TIME)")
    return params


def _parse_rrule_value(value: str, zone: tzinfo) -> dict[str, Any]:
    parts: dict[str, tuple[int, str, str]] = {}
    for pos, part in enumerate(value.split(";"), start=1):
        if not part:
            raise _bad(f"RRULE part {pos} is empty")
        if "=" not in part:
            raise _bad(f"RRULE part {pos} '{part}': expected NAME=VALUE")
        k, v = part.split("=", 1)
        k = k.upper()
        if k in parts:
            raise _bad(f"RRULE part {pos} '{part}': {k} given twice")
        if v == "":
            raise _bad(f"RRULE part {pos} '{part}': empty value")
        parts[k] = (pos, part, v.upper())
    if "FREQ" not in parts:
        raise _bad("RRULE: FREQ is required (RFC 5545 3.3.10)")
    out: dict[str, Any] = {}
    for k, (pos, part, v) in parts.items():
        where = f"RRULE part {pos} '{part}'"
        if k == "FREQ":
            if v not in FREQS:
                raise _bad(f"{where}: FREQ must be one of {', '.join(FREQS)}")
            out["freq"] = FREQS[v]
        elif k == "INTERVAL":
            if not v.isdigit() or not 1 <= int(v) <= 1_000_000:
                raise _bad(f"{where}: INTERVAL must be an integer 1-1000000")
            out["interval"] = int(v)
        elif k == "COUNT":
            if not v.isdigit() or int(v) < 1:
                raise _bad(f"{where}: COUNT must be a positive integer")
            if int(v) > MAX_COUNT:
                raise _bad(f"{where}: COUNT above {MAX_COUNT} is refused", "RRULE_UNBOUNDED")
            out["count"] = int(v)
        elif k == "UNTIL":
            out["until"] = _parse_dt(v, zone, where, date_time=time(23, 59, 59))
        elif k == "WKST":
            if v not in _DAYS:
                raise _bad(f"{where}: WKST must be one of MO TU WE TH FR SA SU")
            out["wkst"] = _DAYS[v]
        elif k == "BYDAY":
            days = []
            for item in v.split(","):
                m = _BYDAY.match(item)
                if not m:
                    raise _bad(f"{where}: '{item}' is not a weekday ([+-]n)MO..SU")
                n = int(m.group(1)) if m.group(1) else None
                if n is not None and not 1 <= abs(n) <= 53:
                    raise _bad(f"{where}: '{item}': ordinal must be 1-53 or -53..-1")
                days.append(du.weekday(_DAYS[m.group(2)], n))
            out["byweekday"] = tuple(days)
            out["_nth"] = any(d.n for d in days)
        elif k in _INT_PARTS:
            lo, hi, zero, neg = _INT_PARTS[k]
            vals = []
            for item in v.split(","):
                if not re.fullmatch(r"[+-]?\d{1,3}", item):
                    raise _bad(f"{where}: '{item}' is not an integer")
                n = int(item)
                ok = (lo <= n <= hi) or (zero and n == 0) or (neg and -hi <= n <= -lo)
                if not ok:
                    rng = f"{lo}-{hi}" + (f" or -{hi}..-{lo}" if neg else "")
                    raise _bad(f"{where}: {item} out of range {rng}")
                vals.append(n)
            out[k.lower()] = tuple(sorted(set(vals)))
        else:
            raise _bad(f"{where}: {k} is not an RFC 5545 RRULE part (or not supported)")
    if "count" in out and "until" in out:
        raise _bad("RRULE: COUNT and UNTIL must not both be given (RFC 5545 3.3.10)")
    f = out["freq"]
    pos_of = {k: parts[k][0] for k in parts}

    def refuse(key: str, why: str) -> NoReturn:
        k = key.upper()
        raise _bad(f"RRULE part {pos_of[k]} '{parts[k][1]}': {why} (RFC 5545 3.3.10)")

    if out.get("_nth") and f not in (du.MONTHLY, du.YEARLY):
        refuse("BYDAY", "a numbered BYDAY is only allowed with FREQ=MONTHLY or YEARLY")
    if out.get("_nth") and f == du.YEARLY and "byweekno" in out:
        refuse("BYDAY", "a numbered BYDAY is not allowed with BYWEEKNO")
    if "bymonthday" in out and f == du.WEEKLY:
        refuse("BYMONTHDAY", "BYMONTHDAY is not allowed with FREQ=WEEKLY")
    if "byyearday" in out and f in (du.DAILY, du.WEEKLY, du.MONTHLY):
        refuse("BYYEARDAY", "BYYEARDAY is not allowed with FREQ=DAILY, WEEKLY or MONTHLY")
    if "byweekno" in out and f != du.YEARLY:
        refuse("BYWEEKNO", "BYWEEKNO is only allowed with FREQ=YEARLY")
    if "bysetpos" in out and not any(k.startswith("by") and k != "bysetpos" for k in out):
        refuse("BYSETPOS", "BYSETPOS needs another BYxxx part")
    out.pop("_nth", None)
    return out


def _explicit(kw: dict[str, Any], d: datetime) -> dict[str, Any]:
    """dateutil's DTSTART-derived defaults made explicit, so the rule survives a new DTSTART."""
    kw = dict(kw)
    f = kw["freq"]
    if not any(k in kw for k in ("byweekno", "byyearday", "bymonthday", "byweekday")):
        if f == du.YEARLY:
            kw.setdefault("bymonth", (d.month,))
            kw["bymonthday"] = (d.day,)
        elif f == du.MONTHLY:
            kw["bymonthday"] = (d.day,)
        elif f == du.WEEKLY:
            kw["byweekday"] = (du.weekday(d.weekday()),)
    if "byhour" not in kw and f < du.HOURLY:
        kw["byhour"] = (d.hour,)
    if "byminute" not in kw and f < du.MINUTELY:
        kw["byminute"] = (d.minute,)
    if "bysecond" not in kw and f < du.SECONDLY:
        kw["bysecond"] = (d.second,)
    return kw


def _check_cost(kw: dict[str, Any]) -> None:
    f, n = kw["freq"], kw.get("interval", 1)
    if f == du.SECONDLY and ("byhour" in kw or "byminute" in kw):
        hs = kw.get("byhour", range(24))
        ms = kw.get("byminute", range(60))
        ss = kw.get("bysecond", range(60))
        sod = sorted(h * 3600 + m * 60 + s for h in hs for m in ms for s in ss)
        gap = max([b - a for a, b in zip(sod, sod[1:])] + [sod[0] + 86400 - sod[-1]])
        if gap // n > MAX_SECONDLY_STEPS:
            raise _bad(
                f"FREQ=SECONDLY with these BYHOUR/BYMINUTE filters steps {gap // n} times between "
                f"occurrences (limit {MAX_SECONDLY_STEPS}); use FREQ=DAILY/HOURLY with BYSECOND",
                "RRULE_UNBOUNDED",
            )
    if "bysetpos" in kw:
        days = {du.YEARLY: 366, du.MONTHLY: 31, du.WEEKLY: 7}.get(f, 1)
        times = len(kw.get("byhour", (0,))) * len(kw.get("byminute", (0,))) * len(kw.get("bysecond", (0,)))
        if f >= du.HOURLY:
            times = 1
        if days * times * len(kw["bysetpos"]) > MAX_SETPOS_PERIOD:
            raise _bad(
                f"BYSETPOS over a period of up to {days * times} instants is too expensive", "RRULE_UNBOUNDED"
            )


def parse_rrule(text: str, zone: tzinfo, zone_name: str, start_local: datetime | None) -> RRulePlan:
    """Parse RFC 5545 text into an :class:`RRulePlan`.

    ``text``: a bare ``FREQ=...`` line, or content lines ``RRULE:``, ``RDATE:``, ``EXDATE:``,
    ``DTSTART[;TZID=zone]:`` (RFC 5545 3.8.5; folded lines are unfolded). UTC values (``...Z``)
    are converted to local wall time in ``zone``. ``start_local``: DTSTART when the text has none.

    Raises:
        RuleError: ``INVALID_RRULE`` (field ``rrule``) with the line/part position;
            ``RRULE_UNBOUNDED`` for COUNT > 100000, > 1000 RDATE/EXDATE values or too expensive
            BY-filters; ``INVALID_TIME_RANGE`` (field ``start_time``) when there is no DTSTART.
    """
    if not isinstance(text, str) or not text.strip():
        raise _bad("empty RRULE")
    raw = text.replace("\r\n", "\n").replace("\n ", "").replace("\n\t", "")
    lines = [ln.strip() for ln in raw.split("\n") if ln.strip()]
    if len(lines) == 1 and ":" not in lines[0] and "=" in lines[0]:
        lines = ["RRULE:" + lines[0]]
    dtstart = None
    rule_kw = None
    rdates: list[datetime] = []
    exdates: list[datetime] = []
    for lineno, line in enumerate(lines, start=1):
        where = f"line {lineno} '{line[:40]}'"
        if ":" not in line:
            raise _bad(f"{where}: expected NAME:VALUE (RRULE:, RDATE:, EXDATE:, DTSTART:)")
        head, value = line.split(":", 1)
        name = head.split(";", 1)[0].upper()
        if name == "RRULE":
            if rule_kw is not None:
                raise _bad(f"{where}: only one RRULE line is supported")
            if ";" in head:
                raise _bad(f"{where}: RRULE takes no parameters")
            rule_kw = _parse_rrule_value(value, zone)
        elif name in ("RDATE", "EXDATE", "DTSTART"):
            params = _params(head, zone_name, where)
            values = value.split(",")
            if name == "DTSTART":
                if dtstart is not None or len(values) != 1:
                    raise _bad(f"{where}: exactly one DTSTART value is allowed")
                dtstart = _parse_dt(values[0], zone, where, date_time=time(0))
                continue
            target = rdates if name == "RDATE" else exdates
            for v in values:
                target.append(
                    _parse_dt(v, zone, where, date_time=None if params.get("VALUE") != "DATE" else time(0))
                )
            if len(target) > MAX_DATES:
                raise _bad(f"{where}: more than {MAX_DATES} {name} values", "RRULE_UNBOUNDED")
        else:
            raise _bad(f"{where}: {name} is not supported (RRULE, RDATE, EXDATE, DTSTART)")
    if rule_kw is None and not rdates:
        raise _bad("no RRULE or RDATE given")
    if dtstart is None:
        if start_local is None:
            raise RuleError("INVALID_TIME_RANGE", "start_time", "an RRULE needs start_time (DTSTART)")
        dtstart = start_local.replace(microsecond=0)
    kw: dict[str, Any] = {}
    freq: int | None = None
    elapsed = False
    if rule_kw is not None:
        freq = rule_kw["freq"]
        kw = _explicit(rule_kw, dtstart)
        _check_cost(kw)
        elapsed = freq >= du.HOURLY and "byhour" not in rule_kw
        try:
            du.rrule(dtstart=dtstart, **kw)
        except ValueError as e:
            raise RuleError("RULE_NEVER_FIRES", "rrule", f"the rule generates no time: {e}") from e
    return RRulePlan(dtstart, freq, kw, tuple(sorted(set(rdates))), tuple(sorted(set(exdates))), elapsed)


def _rebase(plan: RRulePlan, w0: datetime) -> datetime:
    """The latest DTSTART <= ``w0`` on the rule's period grid (RFC 5545 INTERVAL alignment)."""
    d, f = plan.dtstart, plan.freq
    n = plan.kwargs.get("interval", 1)
    if w0 <= d or "count" in plan.kwargs:
        return d
    if f == du.YEARLY:
        return datetime(d.year + (w0.year - d.year) // n * n, 1, 1)
    if f == du.MONTHLY:
        total = d.year * 12 + d.month - 1 + ((w0.year * 12 + w0.month) - (d.year * 12 + d.month)) // n * n
        return datetime(total // 12, total % 12 + 1, 1)
    if f in (du.WEEKLY, du.DAILY):
        span = 7 * n if f == du.WEEKLY else n
        return datetime.combine(
            d.date() + timedelta(days=(w0.date() - d.date()).days // span * span), time(0)
        )
    assert f is not None  # a plan without FREQ has no grid; w0 <= d was returned above
    unit = {du.HOURLY: 3600, du.MINUTELY: 60, du.SECONDLY: 1}[f] * n
    k = int((w0 - d).total_seconds()) // unit
    return d + timedelta(seconds=k * unit)


def _build(plan: RRulePlan, dtstart: datetime, until: datetime | None) -> du.rruleset:
    rset = du.rruleset()
    if plan.freq is not None:
        kw = dict(plan.kwargs)
        if until is not None and "count" not in kw:
            kw["until"] = min(kw["until"], until) if "until" in kw else until
        rset.rrule(du.rrule(dtstart=dtstart, **kw))
    for r in plan.rdates:
        rset.rdate(r)
    for x in plan.exdates:
        rset.exdate(x)
    return rset


def _materialise(plan: RRulePlan) -> list[datetime]:
    """All wall times of a COUNT rule or RDATE-only set within 50 years of DTSTART, sorted: the
    first COUNT rule times before the horizon (dateutil is given UNTIL instead of COUNT, then cut
    at COUNT, so a rare rule never makes it scan to year 9999), plus RDATEs, minus EXDATEs."""
    times: set[datetime] = set(plan.rdates)
    if plan.freq is not None:
        kw = {k: v for k, v in plan.kwargs.items() if k != "count"}
        rule = du.rrule(dtstart=plan.dtstart, until=plan.dtstart + HORIZON, **kw)
        times.update(itertools.islice(rule, plan.kwargs["count"]))
    return sorted(times - set(plan.exdates))


def candidates(plan: RRulePlan, start: datetime) -> Iterator[tuple[datetime, str]]:
    """Naive wall times of the recurrence at or after naive ``start``, ascending, note ``""``.

    COUNT rules and RDATE-only sets are materialised once (<= 100000 values, and only their first
    50 years after DTSTART: a COUNT whose matches are rarer than that would make dateutil scan up to
    year 9999, seconds of CPU); other rules are re-based near ``start`` and expanded up to 50 years ahead."""
    if plan.freq is None or "count" in plan.kwargs:
        if plan._materialised is None:
            try:
                plan._materialised = _materialise(plan)
            except ValueError:
                plan._materialised = []
        lst = plan._materialised
        for w in lst[bisect.bisect_left(lst, start) :]:
            yield w, ""
        return
    start = (
        start.replace(microsecond=0)
        if start.microsecond == 0
        else start.replace(microsecond=0) + timedelta(seconds=1)
    )
    base = _rebase(plan, start)
    rset = _build(plan, base, start + HORIZON)
    try:
        for w in rset.xafter(start, inc=True):
            yield w, ""
    except ValueError:  # dateutil: "Invalid combination of interval and byhour..."
        return


def first_matching_date(plan: RRulePlan, start: date, horizon_days: int = 365 * 50 + 13) -> date | None:
    """The first date >= ``start`` (within 50 years) passing the rule's date filters, using
    dateutil's own masks (``_iterinfo``, the same test as ``rrule._iter``). Cheap (stops at the
    first match); used to refuse rules that never match before dateutil would spin on them."""
    if plan.freq is None:
        return start
    # dateutil's private masks carry no types: they are read, never written
    rule: Any = du.rrule(
        dtstart=plan.dtstart, **{k: v for k, v in plan.kwargs.items() if k not in ("count", "until")}
    )
    ii: Any = du._iterinfo(rule)
    bymonth, byweekno, byweekday = rule._bymonth, rule._byweekno, rule._byweekday
    bymonthday, bynmonthday, byyearday = rule._bymonthday, rule._bynmonthday, rule._byyearday
    last = start + timedelta(days=horizon_days)
    for year in range(start.year, last.year + 1):
        months = range(1, 13) if rule._freq == du.MONTHLY else (1,)
        for month in months:
            ii.rebuild(year, month)
            if rule._freq == du.MONTHLY:
                lo, hi = ii.mrange[month - 1], ii.mrange[month]
            else:
                lo, hi = 0, ii.yearlen
            for i in range(lo, hi):
                if (
                    (bymonth and ii.mmask[i] not in bymonth)
                    or (byweekno and not ii.wnomask[i])
                    or (byweekday and ii.wdaymask[i] not in byweekday)
                    or (ii.nwdaymask and not ii.nwdaymask[i])
                    or (
                        (bymonthday or bynmonthday)
                        and ii.mdaymask[i] not in bymonthday
                        and ii.nmdaymask[i] not in bynmonthday
                    )
                    or (byyearday and i + 1 not in byyearday and -ii.yearlen + i not in byyearday)
                ):
                    continue
                d = date.fromordinal(ii.yearordinal + i)
                if start <= d <= last:
                    return d
    return None
