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

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gnomon.common.time import (
    DstFold,
    DstGap,
    Occurrence,
    RuleError,
    RuleKind,
    RuleSpec,
    compile_rule,
    get_zone,
)
from gnomon_rrule_reference import DAYS, Event, Rule, expand, fmt, rrule_walls

NY = "America/New_York"
ZONES = ["UTC", NY, "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran"]
Key = tuple[datetime, bool, datetime, timedelta | None]


def U(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    """An aware UTC datetime."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def _key(o: Occurrence) -> Key:
    """What is compared: instant, skip marker, local wall time and its offset (not the note text)."""
    return (o.fire_time, o.skipped_dst_gap, o.local_time.replace(tzinfo=None), o.local_time.utcoffset())


def _ekey(e: Event) -> Key:
    return (e.fire, e.skipped, e.wall, e.offset)


def _rec(expr: str, zone: str = "UTC", fold: DstFold = DstFold.FIRST, gap: DstGap = DstGap.SHIFT_FORWARD):
    return compile_rule(RuleSpec(RuleKind.RRULE, expr, time_zone=zone, dst_fold=fold, dst_gap=gap))


def _fires(expr: str, after: datetime, n: int = 10, **kw) -> list[datetime]:
    return [o.fire_time for o in _rec(expr, **kw).preview(after, n, include_skipped=False)]


# ------------------------------------------------------------------ the reported cases and families

MONDAYS = "DTSTART:20200103T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=1"


def test_weekly_bysetpos_restarted_mid_week_selects_from_the_whole_week() -> None:
    assert _fires(MONDAYS, U(2020, 1, 17), 2) == [U(2020, 1, 20, 9), U(2020, 1, 27, 9)]


def test_weekly_bysetpos_first_week_is_the_whole_wkst_week_not_the_days_from_dtstart() -> None:
    # the week of Mon 2019-12-30 selects Monday 12-30, before DTSTART (Fri 01-03): dropped
    assert _fires(MONDAYS, U(2020, 1, 1), 3) == [U(2020, 1, 6, 9), U(2020, 1, 13, 9), U(2020, 1, 20, 9)]


def test_weekly_bysetpos_week_follows_wkst() -> None:
    # WKST=SU: the week Sun..Sat holds Sun then Fri, so the last is Friday (with WKST=MO it is Sunday)
    expr = "DTSTART:20200103T090000\nRRULE:FREQ=WEEKLY;INTERVAL=2;WKST=SU;BYDAY=SU,FR;BYSETPOS=-1"
    assert _fires(expr, U(2020, 1, 1), 3) == [U(2020, 1, 3, 9), U(2020, 1, 17, 9), U(2020, 1, 31, 9)]
    assert _fires(expr, U(2020, 1, 10), 2) == [U(2020, 1, 17, 9), U(2020, 1, 31, 9)]


BYSETPOS_FAMILY = [
    MONDAYS,
    "DTSTART:20200108T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR;BYSETPOS=2",
    "DTSTART:20200111T090000\nRRULE:FREQ=WEEKLY;WKST=TH;BYDAY=TH,MO,TU;BYSETPOS=1",
    "DTSTART:20200108T090000\nRRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE,FR;BYSETPOS=-1,2",
    "DTSTART:20200115T090000\nRRULE:FREQ=MONTHLY;BYDAY=MO,FR;BYSETPOS=1",
    "DTSTART:20200115T090000\nRRULE:FREQ=MONTHLY;BYMONTHDAY=1,10,20;BYSETPOS=1,-1",
    "DTSTART:20200315T090000\nRRULE:FREQ=YEARLY;BYMONTH=1,3;BYDAY=MO;BYSETPOS=1",
    "DTSTART:20200715T090000\nRRULE:FREQ=YEARLY;BYMONTH=1,7;BYMONTHDAY=1,20;BYSETPOS=2",
    "DTSTART:20200103T100000\nRRULE:FREQ=DAILY;BYHOUR=9,12;BYMINUTE=0,30;BYSETPOS=1,-1",
]


@pytest.mark.parametrize("expr", BYSETPOS_FAMILY)
def test_bysetpos_family_matches_the_reference_from_every_restart_day(expr: str) -> None:
    first, second = expr.split("\n")
    dtstart = datetime.strptime(first.split(":")[1], "%Y%m%dT%H%M%S")
    rule = _parse_simple_rule(second.split(":", 1)[1])
    ref = [_ekey(e) for e in expand(rule, dtstart, get_zone("UTC"), wall_end=datetime(2032, 1, 1))]
    rec = _rec(expr)
    for q in (U(2019, 12, 28) + timedelta(days=d, hours=h) for d in range(0, 900, 3) for h in (0, 9)):
        got = [_key(o) for o in rec.preview(q, 6)]
        assert got == [k for k in ref if q < k[0]][:6], f"restart at {q}"


def _parse_simple_rule(text: str) -> Rule:
    kw: dict = {}
    for part in text.split(";"):
        k, v = part.split("=")
        if k == "FREQ":
            kw["freq"] = v
        elif k in ("INTERVAL", "COUNT"):
            kw[k.lower()] = int(v)
        elif k == "UNTIL":
            kw["until"] = datetime.strptime(v.rstrip("Z"), "%Y%m%dT%H%M%S")
            kw["until_utc"] = v.endswith("Z")
        elif k == "WKST":
            kw["wkst"] = DAYS.index(v)
        elif k == "BYDAY":
            kw["byday"] = tuple((int(d[:-2]) if d[:-2] else None, DAYS.index(d[-2:])) for d in v.split(","))
        else:
            kw[k.lower()] = tuple(int(x) for x in v.split(","))
    return Rule(**kw)


def test_numbered_and_plain_byday_are_a_union() -> None:
    # RFC 5545 §3.3.10: each BYDAY value selects days; the first Tuesday OR every Friday
    expr = "DTSTART:20080101T090000\nRRULE:FREQ=MONTHLY;BYDAY=1TU,FR"
    want = [(1, 1), (1, 4), (1, 11), (1, 18), (1, 25), (2, 1), (2, 5), (2, 8)]
    assert _fires(expr, U(2007, 12, 31), 8) == [U(2008, m, d, 9) for m, d in want]
    expr = "DTSTART:20080101T090000\nRRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=1MO,MO;COUNT=5"
    assert _fires(expr, U(2007, 12, 31)) == [U(2008, 1, d, 9) for d in (7, 14, 21, 28)] + [U(2009, 1, 5, 9)]


def _d(*md: tuple[int, int, int]) -> list[datetime]:
    return [datetime(y, m, d, 9) for y, m, d in md]


RFC_EXAMPLES = [  # RFC 5545 §3.8.5.3, DTSTART 09:00 New York, the first instances
    (
        "19970930",
        "FREQ=MONTHLY;COUNT=10;BYMONTHDAY=1,-1",
        _d(
            (1997, 9, 30),
            (1997, 10, 1),
            (1997, 10, 31),
            (1997, 11, 1),
            (1997, 11, 30),
            (1997, 12, 1),
            (1997, 12, 31),
            (1998, 1, 1),
            (1998, 1, 31),
            (1998, 2, 1),
        ),
    ),
    (
        "19970922",
        "FREQ=MONTHLY;COUNT=6;BYDAY=-2MO",
        _d((1997, 9, 22), (1997, 10, 20), (1997, 11, 17), (1997, 12, 22), (1998, 1, 19), (1998, 2, 16)),
    ),
    ("19970519", "FREQ=YEARLY;BYDAY=20MO", _d((1997, 5, 19), (1998, 5, 18), (1999, 5, 17))),
    (
        "19970902",
        "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13",
        _d((1998, 2, 13), (1998, 3, 13), (1998, 11, 13), (1999, 8, 13), (2000, 10, 13)),
    ),
    (
        "19970913",
        "FREQ=MONTHLY;BYDAY=SA;BYMONTHDAY=7,8,9,10,11,12,13",
        _d(
            (1997, 9, 13),
            (1997, 10, 11),
            (1997, 11, 8),
            (1997, 12, 13),
            (1998, 1, 10),
            (1998, 2, 7),
            (1998, 3, 7),
            (1998, 4, 11),
        ),
    ),
    (
        "19961105",
        "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8",
        _d((1996, 11, 5), (2000, 11, 7), (2004, 11, 2)),
    ),
    (
        "19970904",
        "FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3",
        _d((1997, 9, 4), (1997, 10, 7), (1997, 11, 6)),
    ),
    (
        "19970929",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
        _d(
            (1997, 9, 30),
            (1997, 10, 31),
            (1997, 11, 28),
            (1997, 12, 31),
            (1998, 1, 30),
            (1998, 2, 27),
            (1998, 3, 31),
        ),
    ),
    (
        "19970805",
        "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO",
        _d((1997, 8, 5), (1997, 8, 10), (1997, 8, 19), (1997, 8, 24)),
    ),
    (
        "19970805",
        "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU",
        _d((1997, 8, 5), (1997, 8, 17), (1997, 8, 19), (1997, 8, 31)),
    ),
    (
        "19970902",
        "FREQ=HOURLY;INTERVAL=3;UNTIL=19970902T170000Z",
        [datetime(1997, 9, 2, 9), datetime(1997, 9, 2, 12)],
    ),
]


@pytest.mark.parametrize(("day", "rule", "want"), RFC_EXAMPLES)
def test_the_reference_and_gnomon_give_the_rfc_5545_examples(
    day: str, rule: str, want: list[datetime]
) -> None:
    dtstart = datetime.strptime(day + "T090000", "%Y%m%dT%H%M%S")
    z = get_zone(NY)
    ref = expand(_parse_simple_rule(rule), dtstart, z, wall_end=dtstart + timedelta(days=366 * 9))
    assert [e.wall for e in ref][: len(want)] == want
    expr = f"DTSTART;TZID={NY}:{day}T090000\nRRULE:{rule}"
    got = _rec(expr, NY).preview(U(1996, 1, 1), len(want) + 1)
    assert [_key(o) for o in got][: len(want)] == [_ekey(e) for e in ref][: len(want)]
    assert len(got) == len(want) or "COUNT" not in rule and "UNTIL" not in rule


HOURLY_NY = f"DTSTART;TZID={NY}:20131103T000000\nRRULE:FREQ=HOURLY;UNTIL="


def test_utc_until_bounds_instants_in_a_repeated_hour() -> None:
    # 00:00 EDT 04:00Z, 01:00 EDT 05:00Z; 01:00 EST is 06:00Z, after UNTIL
    assert _fires(HOURLY_NY + "20131103T053000Z", U(2013, 11, 2), zone=NY) == [
        U(2013, 11, 3, 4),
        U(2013, 11, 3, 5),
    ]


@pytest.mark.parametrize("fold", list(DstFold))
def test_utc_until_keeps_a_first_pass_before_it(fold: DstFold) -> None:
    expr = f"DTSTART;TZID={NY}:20131101T013000\nRRULE:FREQ=DAILY;UNTIL=20131103T061500Z"
    want = [U(2013, 11, 1, 5, 30), U(2013, 11, 2, 5, 30)]
    if fold is not DstFold.SECOND:
        want.append(U(2013, 11, 3, 5, 30))  # the second pass, 06:30Z, is after UNTIL
    assert _fires(expr, U(2013, 10, 30), zone=NY, fold=fold) == want


@pytest.mark.parametrize("minutes", [-61, -60, -1, 0, 1, 29, 30, 59, 60, 61, 119, 120])
def test_until_family_around_the_fold_matches_the_reference(minutes: int) -> None:
    z = get_zone(NY)
    for utc in (True, False):
        until = datetime(2013, 11, 3, 5) + timedelta(minutes=minutes)  # UTC instant / wall time
        if not utc:
            until -= timedelta(hours=4)
        for freq, d0 in (("HOURLY", datetime(2013, 11, 3)), ("DAILY", datetime(2013, 11, 1, 1, 30))):
            rule = Rule(freq, until=until, until_utc=utc, byminute=(0, 30) if freq == "HOURLY" else ())
            expr = f"DTSTART;TZID={NY}:{fmt(d0, False)}\nRRULE:{rule.text()}"
            for fold in DstFold:
                ref = expand(rule, d0, z, dst_fold=fold.value, wall_end=datetime(2013, 11, 6))
                if not ref:  # UNTIL before DTSTART
                    with pytest.raises(RuleError) as e:
                        _rec(expr, NY, fold)
                    assert e.value.reason == "RULE_NEVER_FIRES"
                    continue
                got = [_key(o) for o in _rec(expr, NY, fold).preview(U(2013, 10, 30), 50)]
                assert got == [_ekey(e) for e in ref], (expr, fold)


@pytest.mark.parametrize("fold", list(DstFold))
@pytest.mark.parametrize("instant", [U(2013, 11, 3, 5, 30), U(2013, 11, 3, 6, 30)])
def test_utc_rdate_in_a_repeated_hour_fires_exactly_there(fold: DstFold, instant: datetime) -> None:
    expr = f"DTSTART;TZID={NY}:20131101T000000\nRDATE:{fmt(instant.replace(tzinfo=None), True)}"
    occ = _rec(expr, NY, fold).preview(U(2013, 10, 30), 5)
    assert [(o.fire_time, o.skipped_dst_gap) for o in occ] == [(instant, False)]
    assert occ[0].local_time.astimezone(UTC) == instant


@pytest.mark.parametrize(
    ("fold", "want"),
    [
        (DstFold.FIRST, [U(2013, 11, 3, 5, 30)]),
        (DstFold.SECOND, [U(2013, 11, 3, 6, 30)]),
        (DstFold.BOTH, [U(2013, 11, 3, 5, 30), U(2013, 11, 3, 6, 30)]),
    ],
)
def test_local_rdate_in_a_repeated_hour_follows_the_fold_policy(fold: DstFold, want: list[datetime]) -> None:
    expr = f"DTSTART;TZID={NY}:20131101T000000\nRDATE;TZID={NY}:20131103T013000"
    assert _fires(expr, U(2013, 10, 30), zone=NY, fold=fold) == want


HOURLY_EX = f"DTSTART;TZID={NY}:20131103T003000\nRRULE:FREQ=HOURLY;COUNT=4\n"


def test_utc_exdate_removes_only_the_occurrence_at_its_instant() -> None:
    got = _fires(HOURLY_EX + "EXDATE:20131103T053000Z", U(2013, 11, 2), zone=NY)
    assert got == [U(2013, 11, 3, 4, 30), U(2013, 11, 3, 6, 30), U(2013, 11, 3, 7, 30), U(2013, 11, 3, 8, 30)]
    got = _fires(HOURLY_EX + "EXDATE:20131103T063000Z", U(2013, 11, 2), zone=NY)
    assert got == [U(2013, 11, 3, 4, 30), U(2013, 11, 3, 5, 30), U(2013, 11, 3, 7, 30), U(2013, 11, 3, 8, 30)]


def test_local_exdate_removes_every_pass_of_its_wall_time() -> None:
    got = _fires(HOURLY_EX + f"EXDATE;TZID={NY}:20131103T013000", U(2013, 11, 2), zone=NY)
    assert got == [U(2013, 11, 3, 4, 30), U(2013, 11, 3, 7, 30), U(2013, 11, 3, 8, 30)]


def test_utc_exdate_removes_a_gap_shifted_occurrence_at_its_instant() -> None:
    # 02:00 on 2008-03-09 does not exist in New York; SHIFT_FORWARD fires it at the change, 07:00Z
    expr = f"DTSTART:20080309T000000\nRDATE;TZID={NY}:20080309T020000\nRDATE:20080310T000000Z\n"
    assert _fires(expr, U(2008, 3, 1), zone=NY) == [U(2008, 3, 9, 7), U(2008, 3, 10)]
    assert _fires(expr + "EXDATE:20080309T070000Z", U(2008, 3, 1), zone=NY) == [U(2008, 3, 10)]


def test_utc_until_bounds_skip_markers_by_their_instant() -> None:
    # 01:00 and 01:15 on 2008-03-30 do not exist in London; their markers are at 01:00Z and 01:15Z
    expr = "DTSTART:20080330T010000\nRRULE:FREQ=YEARLY;UNTIL=20080330T010000Z;BYMINUTE=0,15\nRDATE:20080401T000000Z"
    occ = _rec(expr, "Europe/London", gap=DstGap.SKIP).preview(U(2008, 3, 1), 5)
    assert [(o.fire_time, o.skipped_dst_gap) for o in occ] == [
        (U(2008, 3, 30, 1), True),
        (U(2008, 4, 1), False),
    ]


def test_an_rdate_at_a_dtstart_inside_a_gap_fires_at_the_change() -> None:
    # DTSTART 02:15 does not exist; the RDATE at that wall time fires at 07:00Z, before 02:15 read
    # with the offset before the change (07:15Z): the set is not empty
    expr = f"DTSTART:20080309T021500\nRDATE;TZID={NY}:20080309T021500"
    assert _fires(expr, U(2008, 3, 1), zone=NY) == [U(2008, 3, 9, 7)]


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
    want = [_ekey(e) for e in ref if after < e.fire <= horizon]
    try:
        rec = _rec(c.expr, c.zone, c.fold, c.gap)
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
        assert [_key(o) for o in got] == want, c.expr


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
    rec = _rec(c.expr, c.zone, c.fold, c.gap)
    restarted = list(itertools.takewhile(lambda o: o.fire_time <= horizon, rec.iter_after(q)))
    full_tail = [o for o in got if o.fire_time > q]
    assert [(_key(o), o.note) for o in restarted] == [(_key(o), o.note) for o in full_tail], (c.expr, q)
    assert [_key(o) for o in restarted] == [k for k in want if k[0] > q], (c.expr, q)
