"""The recurrence set of an RFC 5545 text (RRULE + RDATE - EXDATE) as occurrences, with values
given in UTC treated as instants.

RFC 5545 §3.3.5 form #2: a DATE-TIME ending in ``Z`` is an absolute instant. Inside a repeated
(fall-back) hour one wall time names two instants, so a UTC value cannot be turned into a wall
time without losing which pass it meant. Hence:

* UNTIL in UTC bounds the RRULE's occurrences by *instant*, inclusively (§3.3.10: "the UNTIL
  rule part defines a DATE-TIME value that bounds the recurrence rule in an inclusive manner"),
  after the DST policies have mapped wall times to instants. A local UNTIL compares wall times.
  UNTIL bounds the RRULE only, never an RDATE.
* An RDATE in UTC fires exactly at its instant, whatever the fold or gap policy (a note says so
  when its wall time is in a repeated hour). A local RDATE is a wall time under the policies.
* An EXDATE in UTC removes exactly the occurrence at its instant. A local EXDATE removes its wall
  time: every pass of it (§3.8.5.1 excludes "the recurrence instances" with that value).
* COUNT counts the RRULE's instances (wall times at or after DTSTART) before EXDATE removes any.
* Equal instants merge into one occurrence (fired wins over a skip marker; notes are joined).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, tzinfo

from .localize import localize
from .model import DstFold, DstGap, Occurrence
from .rrule import RRulePlan
from .rrule_expand import HORIZON, walls
from .zones import FOLD, UTC, classify

#: Slack between an UNTIL instant and the latest wall time that can map to it (any UTC offset).
_OFFSET_SLACK = timedelta(days=1)
UTC_RDATE_IN_FOLD = "fold: RDATE given in UTC fires at that pass only (fold policy not applied)"


def _materialise(plan: RRulePlan) -> list[datetime]:
    """The wall times of a COUNT rule: its first COUNT instances within 50 years of DTSTART,
    then without the local EXDATEs (sorted; computed once per plan)."""
    if plan._materialised is None:
        assert plan.filters is not None
        rule = walls(plan.filters, plan.dtstart, plan.dtstart + HORIZON)
        ex = set(plan.exdates)
        plan._materialised = [w for w in itertools.islice(rule, plan.kwargs["count"]) if w not in ex]
    return plan._materialised


def _rule_walls(plan: RRulePlan, w0: datetime) -> Iterator[tuple[datetime, str]]:
    """The RRULE's wall times at or after naive local ``w0``, minus local EXDATEs."""
    if plan.freq is None:
        return
    if "count" in plan.kwargs:
        lst = _materialise(plan)
        for w in lst[bisect.bisect_left(lst, w0) :]:
            yield w, ""
        return
    assert plan.filters is not None
    last = w0 + HORIZON
    if "until" in plan.kwargs:
        last = min(last, plan.kwargs["until"])
    if plan.until_utc is not None:
        last = min(last, plan.until_utc + _OFFSET_SLACK)
    ex = set(plan.exdates)
    for w in walls(plan.filters, w0, last):
        if w not in ex:
            yield w, ""


def _utc_rdates(plan: RRulePlan, zone: tzinfo, after: datetime, end: datetime | None) -> Iterator[Occurrence]:
    ex = set(plan.exdates)
    for u in plan.rdates_utc[bisect.bisect_right(plan.rdates_utc, after) :]:
        if end is not None and u > end:
            return
        local = u.replace(tzinfo=UTC).astimezone(zone)
        wall = local.replace(tzinfo=None)
        if wall in ex:
            continue
        note = UTC_RDATE_IN_FOLD if classify(zone, wall)[0] == FOLD else ""
        yield Occurrence(u.replace(tzinfo=UTC), local, note, False)


def _merge(streams: Iterable[Iterator[Occurrence]], exclude: frozenset[datetime]) -> Iterator[Occurrence]:
    """Occurrence streams (each ascending) merged by instant: equal instants become one
    occurrence (a fired one wins over a skip marker, notes joined); instants in ``exclude``
    (naive UTC) and skip markers not after the last fired instant are dropped."""
    last: datetime | None = None
    merged = heapq.merge(*streams, key=lambda o: o.fire_time)
    for fire, group in itertools.groupby(merged, key=lambda o: o.fire_time):
        occs = list(group)
        if fire.replace(tzinfo=None) in exclude or (last is not None and fire <= last):
            continue
        fired = [o for o in occs if not o.skipped_dst_gap]
        chosen = fired or occs
        notes: list[str] = []
        for o in chosen:
            for part in o.note.split("; "):
                if part and part not in notes:
                    notes.append(part)
        first = chosen[0]
        yield Occurrence(first.fire_time, first.local_time, "; ".join(notes), not fired)
        if fired:
            last = fire


def occurrences(
    plan: RRulePlan,
    zone: tzinfo,
    *,
    elapsed: bool,
    dst_gap: DstGap,
    dst_fold: DstFold,
    w0: datetime,
    after: datetime,
    end: datetime | None,
) -> Iterator[Occurrence]:
    """The occurrences of ``plan`` strictly after ``after`` and not after ``end`` (naive UTC),
    ascending; ``w0`` is a naive local wall time no later than any wall time mapping after
    ``after``. See the module docstring for how UTC values are read.

    Raises:
        RuleError: ``RULE_TOO_EXPENSIVE`` (field ``rrule``) from ``next()`` when the RRULE's
            expansion exceeds its work budget.
    """

    def local(cands: Iterable[tuple[datetime, str]], until: datetime | None) -> Iterator[Occurrence]:
        return localize(
            cands, zone, elapsed=elapsed, dst_gap=dst_gap, dst_fold=dst_fold, after=after, end=until
        )

    rule_end = end
    if plan.until_utc is not None:
        rule_end = plan.until_utc if end is None else min(end, plan.until_utc)
    streams = [local(_rule_walls(plan, w0), rule_end)]
    ex = set(plan.exdates)
    local_rdates = [(r, "") for r in plan.rdates[bisect.bisect_left(plan.rdates, w0) :] if r not in ex]
    if local_rdates:
        streams.append(local(local_rdates, end))
    if plan.rdates_utc:
        streams.append(_utc_rdates(plan, zone, after, end))
    if len(streams) == 1 and not plan.exdates_utc:
        return streams[0]
    return _merge(streams, frozenset(plan.exdates_utc))
