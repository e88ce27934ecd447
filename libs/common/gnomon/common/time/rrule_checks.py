"""Static refusals of RRULEs that can never select a time, before any expansion runs.

A BYSETPOS beyond the largest set its period can hold, or an INTERVAL that never lands in a
BYMONTH month, makes every period empty: expanding such a rule only burns CPU. These are refused
with ``RULE_NEVER_FIRES`` (field ``rrule``) at once, whatever RDATEs the text also has. What is
left (a rule whose BY-filters are merely rare) is bounded by the expansion's work budget
(``rrule_expand.MAX_SEARCH_WORK``, ``RULE_TOO_EXPENSIVE``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dateutil import rrule as du

from .errors import RuleError
from .rrule_expand import HORIZON, Budget, walls

if TYPE_CHECKING:
    from .rrule import RRulePlan

#: Slack between an UNTIL instant and the latest wall time that can map to it (any UTC offset).
_OFFSET_SLACK = timedelta(days=1)
_FREQ_NAMES = {du.YEARLY: "YEARLY", du.MONTHLY: "MONTHLY", du.WEEKLY: "WEEKLY", du.DAILY: "DAILY"}
_FREQ_NAMES.update({du.HOURLY: "HOURLY", du.MINUTELY: "MINUTELY", du.SECONDLY: "SECONDLY"})


def max_set_size(kw: dict[str, Any]) -> int:
    """An upper bound on the number of instants one period of the rule can hold (the set BYSETPOS
    picks from, RFC 5545 §3.3.10), from the explicit dateutil-style keyword arguments ``kw``.
    Exact for DAILY, WEEKLY and finer periods; an upper bound for MONTHLY and YEARLY."""
    f = kw["freq"]
    if f == du.SECONDLY:
        return 1
    if f == du.MINUTELY:
        return len(kw.get("bysecond", range(60)))
    if f == du.HOURLY:
        return len(kw.get("byminute", range(60))) * len(kw.get("bysecond", range(60)))
    times = len(kw["byhour"]) * len(kw["byminute"]) * len(kw["bysecond"])
    if f == du.DAILY:
        return times
    days_ = kw.get("byweekday") or ()
    plain = {d.weekday for d in days_ if not d.n}
    numbered = [d for d in days_ if d.n]
    if f == du.WEEKLY:
        return (len(plain) or 7) * times
    months = len(kw.get("bymonth", ())) or 12
    if f == du.MONTHLY:
        bound = 31
        if "bymonthday" in kw:
            bound = min(bound, len(kw["bymonthday"]))
        if days_:
            bound = min(bound, 5 * len(plain) + len(numbered))
        return bound * times
    bound = 366 if "bymonth" not in kw else 31 * months
    if "bymonthday" in kw:
        bound = min(bound, len(kw["bymonthday"]) * months)
    if "byyearday" in kw:
        bound = min(bound, len(kw["byyearday"]))
    if "byweekno" in kw:
        bound = min(bound, 7 * len(kw["byweekno"]))
    if days_:
        per_weekday = 53 if "bymonth" not in kw else 5 * months
        if "byweekno" in kw:
            per_weekday = min(per_weekday, len(kw["byweekno"]))
        per_numbered = 1 if "bymonth" not in kw else months
        bound = min(bound, per_weekday * len(plain) + per_numbered * len(numbered))
    return bound * times


def check_static(plan: RRulePlan) -> None:
    """Refuses a rule whose RRULE part can never select a time.

    Raises:
        RuleError: ``RULE_NEVER_FIRES`` (field ``rrule``) when every BYSETPOS value exceeds
            the largest set of its period, when FREQ=MONTHLY with INTERVAL never reaches a BYMONTH
            month, or when the RRULE part has no time within 50 years of DTSTART (an RDATE does
            not save it: every search would scan those 50 years); ``RULE_TOO_EXPENSIVE`` when
            finding its first time exceeds the expansion's work budget.
    """
    kw, freq = plan.kwargs, plan.freq
    assert freq is not None and plan.filters is not None
    name = _FREQ_NAMES[freq]
    if "bysetpos" in kw:
        size = max_set_size(kw)
        if all(abs(p) > size for p in kw["bysetpos"]):
            values = ",".join(str(p) for p in kw["bysetpos"])
            raise RuleError(
                "RULE_NEVER_FIRES",
                "rrule",
                f"BYSETPOS={values} never selects a time: a {name} period of this rule holds at "
                f"most {size} time(s) (RFC 5545 3.3.10)",
            )
    n = kw.get("interval", 1)
    if freq == du.MONTHLY and "bymonth" in kw and n > 1:
        m0 = plan.dtstart.month - 1
        reached = {(m0 + k * n) % 12 + 1 for k in range(12)}
        if not reached & set(kw["bymonth"]):
            raise RuleError(
                "RULE_NEVER_FIRES",
                "rrule",
                f"FREQ=MONTHLY;INTERVAL={n} from DTSTART's month {plan.dtstart.month} only reaches "
                f"months {sorted(reached)}, none of BYMONTH {list(kw['bymonth'])}",
            )
    last = plan.dtstart + HORIZON
    if "until" in kw:
        last = min(last, kw["until"])
    if plan.until_utc is not None:
        last = min(last, plan.until_utc + _OFFSET_SLACK)
    if next(walls(plan.filters, plan.dtstart, last, Budget()), None) is None:
        raise RuleError(
            "RULE_NEVER_FIRES",
            "rrule",
            "the RRULE part has no time within 50 years of DTSTART"
            + (" (before its UNTIL)" if "until" in kw else ""),
        )
