"""The value of an RRULE line (``FREQ=...;BYDAY=...``) parsed part by part (RFC 5545 §3.3.10),
into dateutil-style keyword arguments, with the position of every fault."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, time
from typing import Any, NoReturn

from dateutil import rrule as du

from .errors import RuleError

FREQS = {
    "YEARLY": du.YEARLY,
    "MONTHLY": du.MONTHLY,
    "WEEKLY": du.WEEKLY,
    "DAILY": du.DAILY,
    "HOURLY": du.HOURLY,
    "MINUTELY": du.MINUTELY,
    "SECONDLY": du.SECONDLY,
}
DAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
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


def bad(msg: str, reason: str = "INVALID_RRULE") -> RuleError:
    """A :class:`RuleError` on field ``rrule``."""
    return RuleError(reason, "rrule", msg)


def parse_dt(value: str, where: str, *, date_time: time | None = None) -> tuple[datetime, bool]:
    """A DATE or DATE-TIME value: (naive datetime, True when it is UTC, i.e. ends in ``Z``).

    A UTC value stays a naive UTC *instant* (RFC 5545 §3.3.5 form #2): it names one instant,
    which a wall time inside a repeated hour could not. ``date_time``: the time of a DATE value."""
    m = _DT.match(value)
    if not m:
        raise bad(f"{where} '{value}': expected YYYYMMDD or YYYYMMDDTHHMMSS[Z]")
    try:
        d = datetime.strptime(m.group(1), "%Y%m%d")
        if m.group(3):
            t = datetime.strptime(m.group(3), "%H%M%S").time()
            d = datetime.combine(d.date(), t)
        elif date_time is not None:
            d = datetime.combine(d.date(), date_time)
    except ValueError as e:
        raise bad(f"{where} '{value}': not a valid date/time") from e
    return d, bool(m.group(4))


def _freq(v: str, where: str, out: dict[str, Any]) -> None:
    if v not in FREQS:
        raise bad(f"{where}: FREQ must be one of {', '.join(FREQS)}")
    out["freq"] = FREQS[v]


def _interval(v: str, where: str, out: dict[str, Any]) -> None:
    if not v.isdigit() or not 1 <= int(v) <= 1_000_000:
        raise bad(f"{where}: INTERVAL must be an integer 1-1000000")
    out["interval"] = int(v)


def _count(v: str, where: str, out: dict[str, Any]) -> None:
    if not v.isdigit() or int(v) < 1:
        raise bad(f"{where}: COUNT must be a positive integer")
    if int(v) > MAX_COUNT:
        raise bad(f"{where}: COUNT above {MAX_COUNT} is refused", "RRULE_UNBOUNDED")
    out["count"] = int(v)


def _until(v: str, where: str, out: dict[str, Any]) -> None:
    until, utc = parse_dt(v, where, date_time=time(23, 59, 59))
    out["until_utc" if utc else "until"] = until


def _wkst(v: str, where: str, out: dict[str, Any]) -> None:
    if v not in DAYS:
        raise bad(f"{where}: WKST must be one of MO TU WE TH FR SA SU")
    out["wkst"] = DAYS[v]


def _byday(v: str, where: str, out: dict[str, Any]) -> None:
    days = []
    for item in v.split(","):
        m = _BYDAY.match(item)
        if not m:
            raise bad(f"{where}: '{item}' is not a weekday ([+-]n)MO..SU")
        n = int(m.group(1)) if m.group(1) else None
        if n is not None and not 1 <= abs(n) <= 53:
            raise bad(f"{where}: '{item}': ordinal must be 1-53 or -53..-1")
        days.append(du.weekday(DAYS[m.group(2)], n))
    out["byweekday"] = tuple(days)


def _int_part(name: str) -> Callable[[str, str, dict[str, Any]], None]:
    lo, hi, zero, neg = _INT_PARTS[name]

    def parse(v: str, where: str, out: dict[str, Any]) -> None:
        vals = []
        for item in v.split(","):
            if not re.fullmatch(r"[+-]?\d{1,3}", item):
                raise bad(f"{where}: '{item}' is not an integer")
            n = int(item)
            if not ((lo <= n <= hi) or (zero and n == 0) or (neg and -hi <= n <= -lo)):
                rng = f"{lo}-{hi}" + (f" or -{hi}..-{lo}" if neg else "")
                raise bad(f"{where}: {item} out of range {rng}")
            vals.append(n)
        out[name.lower()] = tuple(sorted(set(vals)))

    return parse


_PARSERS: dict[str, Callable[[str, str, dict[str, Any]], None]] = {
    "FREQ": _freq,
    "INTERVAL": _interval,
    "COUNT": _count,
    "UNTIL": _until,
    "WKST": _wkst,
    "BYDAY": _byday,
    **{name: _int_part(name) for name in _INT_PARTS},
}


def _split(value: str) -> dict[str, tuple[int, str, str]]:
    """NAME -> (position, the part's text, upper-cased value), refusing empty or repeated parts."""
    parts: dict[str, tuple[int, str, str]] = {}
    for pos, part in enumerate(value.split(";"), start=1):
        if not part:
            raise bad(f"RRULE part {pos} is empty")
        if "=" not in part:
            raise bad(f"RRULE part {pos} '{part}': expected NAME=VALUE")
        k, v = part.split("=", 1)
        k = k.upper()
        if k in parts:
            raise bad(f"RRULE part {pos} '{part}': {k} given twice")
        if v == "":
            raise bad(f"RRULE part {pos} '{part}': empty value")
        parts[k] = (pos, part, v.upper())
    if "FREQ" not in parts:
        raise bad("RRULE: FREQ is required (RFC 5545 3.3.10)")
    return parts


def _check_combinations(out: dict[str, Any], parts: dict[str, tuple[int, str, str]]) -> None:
    """RFC 5545 §3.3.10's "MUST NOT" combinations of parts."""

    def refuse(key: str, why: str) -> NoReturn:
        pos, part, _ = parts[key]
        raise bad(f"RRULE part {pos} '{part}': {why} (RFC 5545 3.3.10)")

    if "count" in out and ("until" in out or "until_utc" in out):
        raise bad("RRULE: COUNT and UNTIL must not both be given (RFC 5545 3.3.10)")
    f = out["freq"]
    nth = any(d.n for d in out.get("byweekday", ()))
    if nth and f not in (du.MONTHLY, du.YEARLY):
        refuse("BYDAY", "a numbered BYDAY is only allowed with FREQ=MONTHLY or YEARLY")
    if nth and f == du.YEARLY and "byweekno" in out:
        refuse("BYDAY", "a numbered BYDAY is not allowed with BYWEEKNO")
    if "bymonthday" in out and f == du.WEEKLY:
        refuse("BYMONTHDAY", "BYMONTHDAY is not allowed with FREQ=WEEKLY")
    if "byyearday" in out and f in (du.DAILY, du.WEEKLY, du.MONTHLY):
        refuse("BYYEARDAY", "BYYEARDAY is not allowed with FREQ=DAILY, WEEKLY or MONTHLY")
    if "byweekno" in out and f != du.YEARLY:
        refuse("BYWEEKNO", "BYWEEKNO is only allowed with FREQ=YEARLY")
    if "bysetpos" in out and not any(k.startswith("by") and k != "bysetpos" for k in out):
        refuse("BYSETPOS", "BYSETPOS needs another BYxxx part")


def parse_rrule_value(value: str) -> dict[str, Any]:
    """The parts of an RRULE value as dateutil-style keyword arguments (``freq``, ``interval``,
    ``count``, ``until`` (local wall time) or ``until_utc`` (naive UTC instant), ``wkst``,
    ``byweekday``, ``bymonth`` ...; BY lists as sorted tuples).

    Raises:
        RuleError: ``INVALID_RRULE`` naming the part's position and text; ``RRULE_UNBOUNDED`` for
            COUNT above 100000.
    """
    parts = _split(value)
    out: dict[str, Any] = {}
    for k, (pos, part, v) in parts.items():
        parser = _PARSERS.get(k)
        if parser is None:
            raise bad(f"RRULE part {pos} '{part}': {k} is not an RFC 5545 RRULE part (or not supported)")
        parser(v, f"RRULE part {pos} '{part}'", out)
    _check_combinations(out, parts)
    return out
