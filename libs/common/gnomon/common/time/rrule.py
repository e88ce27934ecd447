"""RFC 5545 recurrence text (RRULE, RDATE, EXDATE, DTSTART lines): parse it into an
:class:`RRulePlan` and refuse what would be unbounded or too expensive to expand.

The text is parsed here (to report the position of a fault); the RRULE's periods are walked by
``rrule_expand``, the set (RRULE + RDATE - EXDATE) is assembled by ``rruleset``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, tzinfo
from typing import Any

from dateutil import rrule as du

from .errors import RuleError
from .rrule_checks import check_static
from .rrule_expand import Filters, filters_of
from .rrule_parts import bad, parse_dt, parse_rrule_value
from .zones import UTC

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


def _params(name_params: str, zone_name: str, where: str) -> dict[str, str]:
    parts = name_params.split(";")
    params = {}
    for p in parts[1:]:
        if "=" not in p:
            raise bad(f"{where}: parameter '{p}' is not NAME=VALUE")
        k, v = p.split("=", 1)
        params[k.upper()] = v
    tzid = params.get("TZID")
    if tzid is not None and tzid != zone_name:
        raise bad(f"{where}: TZID '{tzid}' must equal the schedule time_zone '{zone_name}'")
    for k in params:
        if k not in ("TZID", "VALUE"):
            raise bad(f"{where}: parameter '{k}' is not supported")
    if params.get("VALUE", "DATE-TIME").upper() not in ("DATE", "DATE-TIME"):
        raise bad(f"{where}: VALUE={params['VALUE']} is not supported (DATE or DATE-TIME)")
    return params


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
            raise bad(
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
            raise bad(
                f"BYSETPOS over a period of up to {days * times} instants is too expensive", "RRULE_UNBOUNDED"
            )


@dataclass
class _Lines:
    """What the content lines of an RRULE text gave: DTSTART, the RRULE's parts, and the
    RDATE/EXDATE values keyed by (name, given in UTC)."""

    dtstart: datetime | None = None
    rule_kw: dict[str, Any] | None = None
    dates: dict[tuple[str, bool], list[datetime]] = field(
        default_factory=lambda: {(n, u): [] for n in ("RDATE", "EXDATE") for u in (False, True)}
    )

    def date_values(self, name: str, utc: bool) -> tuple[datetime, ...]:
        return tuple(sorted(set(self.dates[(name, utc)])))


def _read_line(got: _Lines, lineno: int, line: str, zone: tzinfo, zone_name: str) -> None:
    where = f"line {lineno} '{line[:40]}'"
    if ":" not in line:
        raise bad(f"{where}: expected NAME:VALUE (RRULE:, RDATE:, EXDATE:, DTSTART:)")
    head, value = line.split(":", 1)
    name = head.split(";", 1)[0].upper()
    if name == "RRULE":
        if got.rule_kw is not None:
            raise bad(f"{where}: only one RRULE line is supported")
        if ";" in head:
            raise bad(f"{where}: RRULE takes no parameters")
        got.rule_kw = parse_rrule_value(value)
        return
    if name not in ("RDATE", "EXDATE", "DTSTART"):
        raise bad(f"{where}: {name} is not supported (RRULE, RDATE, EXDATE, DTSTART)")
    params = _params(head, zone_name, where)
    values = value.split(",")
    if name == "DTSTART":
        if got.dtstart is not None or len(values) != 1:
            raise bad(f"{where}: exactly one DTSTART value is allowed")
        d, utc = parse_dt(values[0], where, date_time=time(0))
        # DTSTART is the grid origin, a wall time: a UTC value is read in the zone
        got.dtstart = d.replace(tzinfo=UTC).astimezone(zone).replace(tzinfo=None) if utc else d
        return
    for v in values:
        d, utc = parse_dt(v, where, date_time=None if params.get("VALUE") != "DATE" else time(0))
        got.dates[(name, utc)].append(d)
    if len(got.dates[(name, False)]) + len(got.dates[(name, True)]) > MAX_DATES:
        raise bad(f"{where}: more than {MAX_DATES} {name} values", "RRULE_UNBOUNDED")


def _rule_kwargs(rule_kw: dict[str, Any], dtstart: datetime) -> dict[str, Any]:
    """The explicit keyword arguments of the RRULE, after the cost checks and dateutil's own
    refusal of impossible INTERVAL/BYxxx combinations."""
    kw = _explicit(rule_kw, dtstart)
    _check_cost(kw)
    try:
        du.rrule(dtstart=dtstart, **{k: v for k, v in kw.items() if k != "until_utc"})
    except ValueError as e:
        raise RuleError("RULE_NEVER_FIRES", "rrule", f"the rule generates no time: {e}") from e
    return kw


def parse_rrule(text: str, zone: tzinfo, zone_name: str, start_local: datetime | None) -> RRulePlan:
    """Parse RFC 5545 text into an :class:`RRulePlan`.

    ``text``: a bare ``FREQ=...`` line, or content lines ``RRULE:``, ``RDATE:``, ``EXDATE:``,
    ``DTSTART[;TZID=zone]:`` (RFC 5545 3.8.5; folded lines are unfolded). UTC values (``...Z``)
    of UNTIL, RDATE and EXDATE stay instants (see ``rruleset``); a UTC DTSTART is converted to
    local wall time in ``zone``. ``start_local``: DTSTART when the text has none.

    Raises:
        RuleError: ``INVALID_RRULE`` (field ``rrule``) with the line/part position;
            ``RRULE_UNBOUNDED`` for COUNT > 100000, > 1000 RDATE/EXDATE values or too expensive
            BY-filters; ``RULE_NEVER_FIRES`` / ``RULE_TOO_EXPENSIVE`` (``rrule_checks``);
            ``INVALID_TIME_RANGE`` (field ``start_time``) when there is no DTSTART.
    """
    if not isinstance(text, str) or not text.strip():
        raise bad("empty RRULE")
    raw = text.replace("\r\n", "\n").replace("\n ", "").replace("\n\t", "")
    lines = [ln.strip() for ln in raw.split("\n") if ln.strip()]
    if len(lines) == 1 and ":" not in lines[0] and "=" in lines[0]:
        lines = ["RRULE:" + lines[0]]
    got = _Lines()
    for lineno, line in enumerate(lines, start=1):
        _read_line(got, lineno, line, zone, zone_name)
    if got.rule_kw is None and not (got.dates[("RDATE", False)] or got.dates[("RDATE", True)]):
        raise bad("no RRULE or RDATE given")
    dtstart = got.dtstart
    if dtstart is None:
        if start_local is None:
            raise RuleError("INVALID_TIME_RANGE", "start_time", "an RRULE needs start_time (DTSTART)")
        dtstart = start_local.replace(microsecond=0)
    rule_kw = got.rule_kw
    kw = _rule_kwargs(rule_kw, dtstart) if rule_kw is not None else {}
    freq = rule_kw["freq"] if rule_kw is not None else None
    until_utc = kw.pop("until_utc", None)
    plan = RRulePlan(
        dtstart,
        freq,
        kw,
        got.date_values("RDATE", False),
        got.date_values("EXDATE", False),
        freq is not None and freq >= du.HOURLY and "byhour" not in kw,
        until_utc=until_utc,
        rdates_utc=got.date_values("RDATE", True),
        exdates_utc=got.date_values("EXDATE", True),
        filters=filters_of(dtstart, kw) if freq is not None else None,
    )
    if freq is not None:
        check_static(plan)
    return plan
