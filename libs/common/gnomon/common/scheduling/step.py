"""The planner's decision step for one schedule, as a pure function (no I/O, no clock): which nominal
times one planning step takes, how the misfire rules classify them, and where the schedule's
high-water mark, next fire time and next planning instant move. The planner
(:mod:`gnomon.planner.planning`) and the outage simulator (:mod:`gnomon.common.scheduling.outage`)
both call :func:`plan_schedule`, so a prediction follows exactly the planner's rules.

Rows are ``schedules`` rows as dicts; instants are UTC-aware datetimes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gnomon.common.domain.policies import OverlapPolicy
from gnomon.common.scheduling import expansion
from gnomon.common.scheduling.misfire import Carry, Decision, MisfireRules, classify
from gnomon.common.time import Recurrence


@dataclass(frozen=True)
class SchedulePlan:
    """One step's outcome for one schedule: ``decisions`` (nominal order; each run is still subject to
    the overlap policy), the new ``planned_through`` high-water mark, ``next_fire`` (the first nominal
    time not taken, None when the rule is exhausted), ``plan_at`` (when to plan it next, None: never),
    the COALESCE ``carry`` and ``capped`` (the step was cut at its occurrence limit: plan again at once)."""

    decisions: list[Decision]
    planned_through: datetime
    next_fire: datetime | None
    plan_at: datetime | None
    carry: Carry
    capped: bool


def horizon(sched: dict[str, Any], lookahead: timedelta) -> timedelta:
    """How far ahead of now the planner plans ``sched``: ``lookahead`` for OVERLAP ALLOW (jobs may be
    created ahead of time), 0 for the other policies (they need the state at the due time)."""
    return lookahead if sched["overlap_policy"] == OverlapPolicy.ALLOW else timedelta(0)


def misfire_rules(sched: dict[str, Any]) -> MisfireRules:
    """The misfire settings of a ``schedules`` row."""
    return MisfireRules(
        sched["misfire_policy"],
        timedelta(milliseconds=sched["misfire_grace_ms"]),
        timedelta(milliseconds=sched["catchup_window_ms"]),
        sched["max_catchup"],
    )


def plan_schedule(
    sched: dict[str, Any],
    rec: Recurrence,
    now: datetime,
    *,
    lookahead: timedelta,
    limit: int,
    planned_through: datetime | None = None,
    carry: Carry | None = None,
) -> SchedulePlan:
    """One planning step of ``sched`` (rule ``rec``) at database time ``now``: the nominal times
    after ``planned_through`` (default: the row's) up to ``now + horizon``, at most ``limit``
    (>= 1) of them, classified with the row's misfire rules, pause mark and COALESCE ``carry``
    (default: the row's)."""
    ahead = horizon(sched, lookahead)
    bound = now + ahead
    after = sched["planned_through"] if planned_through is None else planned_through
    if carry is None:
        carry = Carry(sched["missed_count"], sched["missed_first"])
    win = expansion.window(rec, after, through=bound, limit=limit)
    occs, nxt, capped = win.occurrences, win.next, win.capped
    rules = misfire_rules(sched)
    final = not capped or occs[-1].fire_time >= now - rules.grace
    decisions, carry = classify(
        occs, now=now, rules=rules, skip_through=sched["skip_through"], carry=carry, final=final
    )
    if len(decisions) < len(occs):  # the tail was held back for the next step
        through, nxt = decisions[-1].nominal, occs[len(decisions)]
    elif capped:
        through = occs[-1].fire_time
    else:
        through = max(bound, after)
    next_fire = nxt.fire_time if nxt is not None else None
    if next_fire is None:
        plan_at = None
    else:
        plan_at = now if capped else max(next_fire - ahead, now)
    return SchedulePlan(decisions, through, next_fire, plan_at, carry, capped)
