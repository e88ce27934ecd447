"""RRULE expansion checked against an independent brute-force RFC 5545 expander
(tests/gnomon_rrule_reference.py, written from RFC 5545 §3.3.10 and §3.8.5, not from dateutil).

What is checked:

* BYSETPOS selects from the set of the WHOLE period (the WKST-aligned week, the month, the year,
  the day, the hour), whatever point the expansion restarts from;
* a UTC UNTIL is an inclusive bound on instants, a local UNTIL on wall times;
* a UTC RDATE fires exactly at its instant, a UTC EXDATE removes exactly the occurrence at its
  instant; local values are wall times under the DST policies;
* ``iter_after(q)`` for any q is the tail after q of the expansion from before DTSTART.

Random rules whose RRULE has no instance in the compared window are skipped (``assume``): refusing
rules that can never select (RULE_NEVER_FIRES) is tested with the cost limits, not here. A refusal
for cost (RRULE_UNBOUNDED, RULE_TOO_EXPENSIVE) is skipped too: the generated rules are small, and
such a refusal is a cost policy, not an expansion result. RULE_NEVER_FIRES is accepted only when the
reference finds nothing firing in the window, in the whole set or in the RRULE part alone (e.g. an
UTC UNTIL before the first instance: Gnomon refuses an RRULE part that never fires, RDATEs or not).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gnomon.common.time import (
    DstFold,
    DstGap,
    Occurrence,
    RuleError,
    get_zone,
)
from gnomon_rrule_reference import Rule, expand, fmt, rrule_walls
from gnomon_rrule_support import ZONES, Key, U, compiled, event_key, key_of

# ------------------------------------------------------------------ random rules against the reference

WINDOW = {  # wall-clock span compared after DTSTART, per FREQ
    "YEARLY": timedelta(days=4 * 366),
    "MONTHLY": timedelta(days=2 * 366),
    "WEEKLY": timedelta(days=200),
    "DAILY": timedelta(days=60),
    "HOURLY": timedelta(days=4),
}


@functools.cache
def _transitions(zone: str) -> tuple[datetime, ...]:
    """The UTC instants (aware) where the zone's offset changes, 2008-2021 (scanned by days, then
    by 15 minutes)."""
    z = get_zone(zone)
    out = []
    t = U(2008, 1, 1, 12)
    while t < U(2022, 1, 1):
        if (t + timedelta(days=1)).astimezone(z).utcoffset() != t.astimezone(z).utcoffset():
            s = t
            while (s + timedelta(minutes=15)).astimezone(z).utcoffset() == t.astimezone(z).utcoffset():
                s += timedelta(minutes=15)
            out.append(s + timedelta(minutes=15))
        t += timedelta(days=1)
    return tuple(out)


@st.composite
def _subset(draw: st.DrawFn, values: list[int], hot: int | None = None, max_size: int = 3) -> tuple[int, ...]:
    """1..max_size of ``values``, sorted; ``hot`` is added 3 times in 4."""
    out = set(draw(st.lists(st.sampled_from(values), min_size=1, max_size=max_size, unique=True)))
    if hot is not None and draw(st.integers(0, 3)):
        out.add(hot)
    return tuple(sorted(out))


@dataclass(frozen=True)
class Case:
    """One generated recurrence set; its repr is the RFC 5545 text and the policies (what a
    failure report needs to reproduce it)."""

    zone: str
    rule: Rule | None
    dtstart: datetime
    rdates: tuple[tuple[datetime, bool], ...]
    exdates: tuple[tuple[datetime, bool], ...]
    rrule_instances: int
    wall_end: datetime
    expr: str
    gap: DstGap
    fold: DstFold

    def __repr__(self) -> str:
        return f"Case({self.expr!r}, zone={self.zone!r}, gap={self.gap.value}, fold={self.fold.value})"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    zone = draw(st.sampled_from(ZONES))
    z = get_zone(zone)
    freq = draw(st.sampled_from(list(WINDOW)))
    if zone == "UTC":
        t = U(2008, 1, 1) + timedelta(days=draw(st.integers(0, 5000)))
    else:
        t = draw(st.sampled_from(_transitions(zone)))
    edge = (t - timedelta(minutes=1)).astimezone(z).replace(tzinfo=None) + timedelta(minutes=1)
    # mostly a wall time inside the gap or fold (15-minute steps), else one next to the change
    before, after = (t - timedelta(minutes=1)).astimezone(z).utcoffset(), t.astimezone(z).utcoffset()
    assert before is not None and after is not None
    jump = int((after - before).total_seconds()) // 60  # > 0: a gap after the edge, < 0: a fold before
    inside = [m if jump > 0 else jump + m for m in range(0, abs(jump), 15)]
    if inside and draw(st.integers(0, 3)) > 0:
        near_edge = edge + timedelta(minutes=draw(st.sampled_from(inside)))
    else:
        near_edge = edge + timedelta(minutes=15 * draw(st.integers(-5, 4)))
    hours = sorted({near_edge.hour, edge.hour, (edge - timedelta(hours=1)).hour, 0, 12, 23})
    if freq == "HOURLY":
        dtstart = near_edge - timedelta(hours=draw(st.integers(0, 30)))
    else:
        dtstart = near_edge - timedelta(days=draw(st.integers(0, 40 if freq != "YEARLY" else 400)))
        if draw(st.integers(0, 3)) == 0:
            dtstart = dtstart.replace(hour=draw(st.sampled_from(hours)))
    kw: dict = {"freq": freq, "interval": draw(st.sampled_from([1, 1, 1, 2, 3]))}
    if freq == "WEEKLY":
        kw["wkst"] = draw(st.integers(0, 6))
    # BY-parts that mostly let the day and time of the DST change through
    if draw(st.integers(0, 3)) == 0:
        kw["bymonth"] = draw(_subset([1, 3, 4, 9, 10, 11, dtstart.month], edge.month))
    if freq != "WEEKLY" and draw(st.integers(0, 2)) == 0:
        kw["bymonthday"] = draw(_subset([1, 2, 15, 28, 31, -1, -2, -7], edge.day))
    if draw(st.integers(0, 2)) == 0:
        numbered = freq == "MONTHLY" or (freq == "YEARLY" and "bymonthday" not in kw)
        n = st.sampled_from([None, None, 1, 2, -1, -2, 5]) if numbered else st.none()
        days = draw(st.lists(st.tuples(n, st.integers(0, 6)), min_size=1, max_size=3))
        if draw(st.integers(0, 3)):
            days.append(((edge.day - 1) // 7 + 1 if numbered and days[0][0] else None, edge.weekday()))
        kw["byday"] = tuple(sorted(set(days), key=str))
    if draw(st.integers(0, 2)) == 0:
        kw["byhour"] = draw(_subset(hours, near_edge.hour))
    if draw(st.integers(0, 2)) == 0:
        kw["byminute"] = draw(_subset([0, 15, 30, 45], near_edge.minute))
    if len(kw) > 2 + ("wkst" in kw) and draw(st.booleans()):
        kw["bysetpos"] = draw(_subset([1, 2, 3, -1, -2], max_size=2))
    wall_end = dtstart + WINDOW[freq]
    # the instances near the DST change (else all): UNTIL and EXDATE values are drawn around them
    walls = rrule_walls(Rule(**kw), dtstart, wall_end)
    hot = [w for w in walls if abs(w - edge) <= timedelta(days=2)] or walls[:40]

    def instant(w: datetime) -> datetime:  # one pass of a wall time, as a naive UTC instant
        return w.replace(tzinfo=z, fold=draw(st.integers(0, 1))).astimezone(UTC).replace(tzinfo=None)

    bound = draw(st.sampled_from(["none", "none", "count", "until_utc", "until_local"]))
    if bound == "count":
        kw["count"] = draw(st.integers(1, 30))
    elif bound != "none":
        kw["until_utc"] = bound == "until_utc"
        if hot and draw(st.integers(0, 3)) > 0:  # at, just before or just after an instance
            w = draw(st.sampled_from(hot))
            until = instant(w) if kw["until_utc"] else w
            kw["until"] = until + timedelta(seconds=draw(st.sampled_from([-1800, -1, 0, 1, 1800])))
        else:
            until = (dtstart.replace(tzinfo=UTC) + WINDOW[freq] * draw(st.floats(0, 1))).replace(
                microsecond=0
            )
            kw["until"] = (until if kw["until_utc"] else until.astimezone(z)).replace(tzinfo=None)
    rule = None if draw(st.sampled_from(range(16))) == 15 else Rule(**kw)
    if rule is None:
        walls = []
    elif rule.count is not None:  # COUNT and a local UNTIL only cut the unbounded instances
        walls = walls[: rule.count]
    elif rule.until is not None and not rule.until_utc:
        walls = [w for w in walls if w <= rule.until]
    hot = [w for w in hot if w in set(walls)]

    def near() -> tuple[datetime, bool]:
        if draw(st.booleans()):  # an instant near the transition
            return (t + timedelta(minutes=15 * draw(st.integers(-8, 8)))).replace(tzinfo=None), True
        return edge + timedelta(minutes=15 * draw(st.integers(-8, 8))), False  # a wall time, maybe in a gap

    rdates = [near() for _ in range(draw(st.integers(0 if rule else 1, 2)))]
    exdates = []
    for _ in range(draw(st.integers(0, 2))):
        if hot and draw(st.booleans()) is True:
            w = draw(st.sampled_from(hot))
            utc = draw(st.booleans())
            exdates.append((instant(w) if utc else w, utc))
        else:
            exdates.append(near())
    # left open by the policies: an RDATE before DTSTART (an RDATE-only set is searched from DTSTART)
    assume(
        all(
            (v.replace(tzinfo=UTC).astimezone(z).replace(tzinfo=None) if u else v) >= dtstart
            for v, u in rdates
        )
    )
    local_ex = {v for v, utc in exdates if not utc}
    # left open by the policies: a local EXDATE equal to a UTC RDATE's wall time
    assume(
        not any(u and v.replace(tzinfo=UTC).astimezone(z).replace(tzinfo=None) in local_ex for v, u in rdates)
    )
    lines = [
        f"DTSTART;TZID={zone}:{fmt(dtstart, False)}"
        if draw(st.booleans())
        else f"DTSTART:{fmt(dtstart, False)}"
    ]
    if rule is not None:
        lines.append(f"RRULE:{rule.text()}")
    for name, values in (("RDATE", rdates), ("EXDATE", exdates)):
        for v, utc in values:
            lines.append(f"{name}:{fmt(v, True)}" if utc else f"{name};TZID={zone}:{fmt(v, False)}")
    return Case(
        zone,
        rule,
        dtstart,
        tuple(rdates),
        tuple(exdates),
        len(walls),
        wall_end,
        "\n".join(lines),
        draw(st.sampled_from(list(DstGap))),
        draw(st.sampled_from(list(DstFold))),
    )


def _both(c: Case) -> tuple[list[Key], list[Occurrence] | None, datetime, datetime]:
    """(reference keys, Gnomon's occurrences or None when refused, after, horizon)."""
    assume(c.rule is None or c.rrule_instances)  # see the module docstring
    z = get_zone(c.zone)
    ref = expand(
        c.rule,
        c.dtstart,
        z,
        rdates=c.rdates,
        exdates=c.exdates,
        dst_gap=c.gap.value,
        dst_fold=c.fold.value,
        wall_end=c.wall_end,
    )
    after = (c.dtstart - timedelta(days=3)).replace(tzinfo=UTC)
    horizon = (c.wall_end - timedelta(days=2)).replace(tzinfo=UTC)
    want = [event_key(e) for e in ref if after < e.fire <= horizon]
    try:
        rec = compiled(c.expr, c.zone, c.fold, c.gap)
    except RuleError as e:
        assume(e.reason not in ("RRULE_UNBOUNDED", "RULE_TOO_EXPENSIVE"))
        # a refusal is right when nothing fires, or when the RRULE part never fires (its UNTIL is
        # before its first instance, every instance is a skip marker), whatever the RDATEs
        rrule_alone = expand(
            c.rule, c.dtstart, z, dst_gap=c.gap.value, dst_fold=c.fold.value, wall_end=c.wall_end
        )
        never = not ref or not any(not e.skipped for e in rrule_alone)
        assert e.reason == "RULE_NEVER_FIRES" and never, (c.expr, e)
        return want, None, after, horizon
    got = list(itertools.takewhile(lambda o: o.fire_time <= horizon, rec.iter_after(after)))
    return want, got, after, horizon


@settings(
    max_examples=300, deadline=None, report_multiple_bugs=False, suppress_health_check=[HealthCheck.too_slow]
)
@given(c=cases())
def test_random_rules_equal_the_reference(c: Case) -> None:
    want, got, _, _ = _both(c)
    if got is not None:
        assert [key_of(o) for o in got] == want, c.expr


@settings(
    max_examples=200, deadline=None, report_multiple_bugs=False, suppress_health_check=[HealthCheck.too_slow]
)
@given(c=cases(), pick=st.integers(0, 10_000), delta=st.sampled_from([-1, 0, 1, 1800, -1800]))
def test_restarted_expansion_is_the_tail_of_the_full_one(c: Case, pick: int, delta: int) -> None:
    want, got, after, horizon = _both(c)
    assume(got is not None)
    assert got is not None
    points = [k[0] for k in want] or [after + (horizon - after) / 2]
    q = points[pick % len(points)] + timedelta(seconds=delta)
    rec = compiled(c.expr, c.zone, c.fold, c.gap)
    restarted = list(itertools.takewhile(lambda o: o.fire_time <= horizon, rec.iter_after(q)))
    full_tail = [o for o in got if o.fire_time > q]
    assert [(key_of(o), o.note) for o in restarted] == [(key_of(o), o.note) for o in full_tail], (c.expr, q)
    assert [key_of(o) for o in restarted] == [k for k in want if k[0] > q], (c.expr, q)
