"""RFC 5545 recurrence rules: parse, bound the cost, and generate naive local wall-time candidates.

Expansion is dateutil's ``rrule``/``rruleset`` over a *naive* DTSTART (pure wall clock). This
module parses the text itself (to report the position of a fault and to refuse rules whose
expansion would be unbounded or too expensive), and re-bases DTSTART by whole periods so a
search far after DTSTART does not replay every earlier occurrence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, time, tzinfo
from typing import Any, NoReturn

from dateutil import rrule as du

from .errors import RuleError
from .rrule_checks import check_static
from .rrule_expand import Filters, filters_of
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


@dataclass
class RRulePlan:
    """A parsed RFC 5545 recurrence (RRULE + RDATE + EXDATE), with naive local DTSTART.

    ``kwargs`` are dateutil-style ``rrule`` keyword arguments with the defaults dateutil would
    take from DTSTART made explicit; ``until`` there is a local (floating) UNTIL, a wall time.
    ``until_utc``: an UNTIL given in UTC, a naive UTC instant (an inclusive bound on the RRULE's
    instants, RFC 5545 §3.3.10). ``rdates``/``exdates``: local wall times; ``rdates_utc`` /
    ``exdates_utc``: values given in UTC, naive UTC instants. ``elapsed``: FREQ HOURLY or finer
    without BYHOUR. ``filters``: the BYxxx parts as sets (None without RRULE). Mutable only for
    the lazily materialised list of a COUNT rule.
    """

    dtstart: datetime
    freq: int | None
    kwargs: dict[str, Any]
    rdates: tuple[datetime, ...]
    exdates: tuple[datetime, ...]
    elapsed: bool
    until_utc: datetime | None = None
    rdates_utc: tuple[datetime, ...] = ()
    exdates_utc: tuple[datetime, ...] = ()
    filters: Filters | None = field(default=None, repr=False)
    _materialised: list[datetime] | None = field(default=None, repr=False)


def _bad(msg: str, reason: str = "INVALID_RRULE") -> RuleError:
    return RuleError(reason, "rrule", msg)


def _parse_dt(value: str, where: str, *, date_time: time | None = None) -> tuple[datetime, bool]:
    """A DATE or DATE-TIME value: (naive datetime, True when it is UTC, i.e. ends in ``Z``).

    A UTC value stays a naive UTC *instant* (RFC 5545 §3.3.5 form #2): it names one instant,
    which a wall time inside a repeated hour could not."""
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
    return d, bool(m.group(4))


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


def _parse_rrule_value(value: str, zone: tzinfo) -> dict[str, Any]:  # noqa: C901 (split by the lead)
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
            until, utc = _parse_dt(v, where, date_time=time(23, 59, 59))
            out["until_utc" if utc else "until"] = until
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
    if "count" in out and ("until" in out or "until_utc" in out):
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


def parse_rrule(text: str, zone: tzinfo, zone_name: str, start_local: datetime | None) -> RRulePlan:  # noqa: C901 (split by the lead)
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
    found: dict[tuple[str, bool], list[datetime]] = {
        (n, u): [] for n in ("RDATE", "EXDATE") for u in (False, True)
    }
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
                d, utc = _parse_dt(values[0], where, date_time=time(0))
                # DTSTART is the grid origin, a wall time: a UTC value is read in the zone
                dtstart = d.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None) if utc else d
                continue
            for v in values:
                d, utc = _parse_dt(v, where, date_time=None if params.get("VALUE") != "DATE" else time(0))
                found[(name, utc)].append(d)
            if len(found[(name, False)]) + len(found[(name, True)]) > MAX_DATES:
                raise _bad(f"{where}: more than {MAX_DATES} {name} values", "RRULE_UNBOUNDED")
        else:
            raise _bad(f"{where}: {name} is not supported (RRULE, RDATE, EXDATE, DTSTART)")
    if rule_kw is None and not (found[("RDATE", False)] or found[("RDATE", True)]):
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
            du.rrule(dtstart=dtstart, **{k: v for k, v in kw.items() if k != "until_utc"})
        except ValueError as e:
            raise RuleError("RULE_NEVER_FIRES", "rrule", f"the rule generates no time: {e}") from e
    until_utc = kw.pop("until_utc", None)
    plan = RRulePlan(
        dtstart,
        freq,
        kw,
        _dates(found[("RDATE", False)]),
        _dates(found[("EXDATE", False)]),
        elapsed,
        until_utc=until_utc,
        rdates_utc=_dates(found[("RDATE", True)]),
        exdates_utc=_dates(found[("EXDATE", True)]),
        filters=filters_of(dtstart, kw) if freq is not None else None,
    )
    if freq is not None:
        check_static(plan)
    return plan


def _dates(values: list[datetime]) -> tuple[datetime, ...]:
    return tuple(sorted(set(values)))
