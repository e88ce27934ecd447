"""The reported RRULE cases and their families, each checked against the brute-force RFC 5545
reference (tests/gnomon_rrule_reference.py) where it applies: BYSETPOS over whole periods, UNTIL,
RDATE and EXDATE given in UTC as instants, the RFC 5545 §3.8.5.3 examples."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gnomon.common.time import (
    DstFold,
    DstGap,
    RuleError,
    get_zone,
)
from gnomon_rrule_reference import DAYS, Rule, expand, fmt
from gnomon_rrule_support import NY, U, compiled, event_key, fires, key_of

# ------------------------------------------------------------------ the reported cases and families

MONDAYS = "DTSTART:20200103T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=1"


def test_weekly_bysetpos_restarted_mid_week_selects_from_the_whole_week() -> None:
    assert fires(MONDAYS, U(2020, 1, 17), 2) == [U(2020, 1, 20, 9), U(2020, 1, 27, 9)]


def test_weekly_bysetpos_first_week_is_the_whole_wkst_week_not_the_days_from_dtstart() -> None:
    # the week of Mon 2019-12-30 selects Monday 12-30, before DTSTART (Fri 01-03): dropped
    assert fires(MONDAYS, U(2020, 1, 1), 3) == [U(2020, 1, 6, 9), U(2020, 1, 13, 9), U(2020, 1, 20, 9)]


def test_weekly_bysetpos_week_follows_wkst() -> None:
    # WKST=SU: the week Sun..Sat holds Sun then Fri, so the last is Friday (with WKST=MO it is Sunday)
    expr = "DTSTART:20200103T090000\nRRULE:FREQ=WEEKLY;INTERVAL=2;WKST=SU;BYDAY=SU,FR;BYSETPOS=-1"
    assert fires(expr, U(2020, 1, 1), 3) == [U(2020, 1, 3, 9), U(2020, 1, 17, 9), U(2020, 1, 31, 9)]
    assert fires(expr, U(2020, 1, 10), 2) == [U(2020, 1, 17, 9), U(2020, 1, 31, 9)]


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
    ref = [event_key(e) for e in expand(rule, dtstart, get_zone("UTC"), wall_end=datetime(2032, 1, 1))]
    rec = compiled(expr)
    for q in (U(2019, 12, 28) + timedelta(days=d, hours=h) for d in range(0, 900, 3) for h in (0, 9)):
        got = [key_of(o) for o in rec.preview(q, 6)]
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
    assert fires(expr, U(2007, 12, 31), 8) == [U(2008, m, d, 9) for m, d in want]
    expr = "DTSTART:20080101T090000\nRRULE:FREQ=YEARLY;BYMONTH=1;BYDAY=1MO,MO;COUNT=5"
    assert fires(expr, U(2007, 12, 31)) == [U(2008, 1, d, 9) for d in (7, 14, 21, 28)] + [U(2009, 1, 5, 9)]


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
    got = compiled(expr, NY).preview(U(1996, 1, 1), len(want) + 1)
    assert [key_of(o) for o in got][: len(want)] == [event_key(e) for e in ref][: len(want)]
    assert len(got) == len(want) or "COUNT" not in rule and "UNTIL" not in rule


HOURLY_NY = f"DTSTART;TZID={NY}:20131103T000000\nRRULE:FREQ=HOURLY;UNTIL="


def test_utc_until_bounds_instants_in_a_repeated_hour() -> None:
    # 00:00 EDT 04:00Z, 01:00 EDT 05:00Z; 01:00 EST is 06:00Z, after UNTIL
    assert fires(HOURLY_NY + "20131103T053000Z", U(2013, 11, 2), zone=NY) == [
        U(2013, 11, 3, 4),
        U(2013, 11, 3, 5),
    ]


@pytest.mark.parametrize("fold", list(DstFold))
def test_utc_until_keeps_a_first_pass_before_it(fold: DstFold) -> None:
    expr = f"DTSTART;TZID={NY}:20131101T013000\nRRULE:FREQ=DAILY;UNTIL=20131103T061500Z"
    want = [U(2013, 11, 1, 5, 30), U(2013, 11, 2, 5, 30)]
    if fold is not DstFold.SECOND:
        want.append(U(2013, 11, 3, 5, 30))  # the second pass, 06:30Z, is after UNTIL
    assert fires(expr, U(2013, 10, 30), zone=NY, fold=fold) == want


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
                        compiled(expr, NY, fold)
                    assert e.value.reason == "RULE_NEVER_FIRES"
                    continue
                got = [key_of(o) for o in compiled(expr, NY, fold).preview(U(2013, 10, 30), 50)]
                assert got == [event_key(e) for e in ref], (expr, fold)


@pytest.mark.parametrize("fold", list(DstFold))
@pytest.mark.parametrize("instant", [U(2013, 11, 3, 5, 30), U(2013, 11, 3, 6, 30)])
def test_utc_rdate_in_a_repeated_hour_fires_exactly_there(fold: DstFold, instant: datetime) -> None:
    expr = f"DTSTART;TZID={NY}:20131101T000000\nRDATE:{fmt(instant.replace(tzinfo=None), True)}"
    occ = compiled(expr, NY, fold).preview(U(2013, 10, 30), 5)
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
    assert fires(expr, U(2013, 10, 30), zone=NY, fold=fold) == want


HOURLY_EX = f"DTSTART;TZID={NY}:20131103T003000\nRRULE:FREQ=HOURLY;COUNT=4\n"


def test_utc_exdate_removes_only_the_occurrence_at_its_instant() -> None:
    got = fires(HOURLY_EX + "EXDATE:20131103T053000Z", U(2013, 11, 2), zone=NY)
    assert got == [U(2013, 11, 3, 4, 30), U(2013, 11, 3, 6, 30), U(2013, 11, 3, 7, 30), U(2013, 11, 3, 8, 30)]
    got = fires(HOURLY_EX + "EXDATE:20131103T063000Z", U(2013, 11, 2), zone=NY)
    assert got == [U(2013, 11, 3, 4, 30), U(2013, 11, 3, 5, 30), U(2013, 11, 3, 7, 30), U(2013, 11, 3, 8, 30)]


def test_local_exdate_removes_every_pass_of_its_wall_time() -> None:
    got = fires(HOURLY_EX + f"EXDATE;TZID={NY}:20131103T013000", U(2013, 11, 2), zone=NY)
    assert got == [U(2013, 11, 3, 4, 30), U(2013, 11, 3, 7, 30), U(2013, 11, 3, 8, 30)]


def test_utc_exdate_removes_a_gap_shifted_occurrence_at_its_instant() -> None:
    # 02:00 on 2008-03-09 does not exist in New York; SHIFT_FORWARD fires it at the change, 07:00Z
    expr = f"DTSTART:20080309T000000\nRDATE;TZID={NY}:20080309T020000\nRDATE:20080310T000000Z\n"
    assert fires(expr, U(2008, 3, 1), zone=NY) == [U(2008, 3, 9, 7), U(2008, 3, 10)]
    assert fires(expr + "EXDATE:20080309T070000Z", U(2008, 3, 1), zone=NY) == [U(2008, 3, 10)]


def test_utc_until_bounds_skip_markers_by_their_instant() -> None:
    # 01:00 and 01:15 on 2008-03-30 do not exist in London; their markers are at 01:00Z and 01:15Z
    expr = "DTSTART:20080330T010000\nRRULE:FREQ=YEARLY;UNTIL=20080330T010000Z;BYMINUTE=0,15\nRDATE:20080401T000000Z"
    occ = compiled(expr, "Europe/London", gap=DstGap.SKIP).preview(U(2008, 3, 1), 5)
    assert [(o.fire_time, o.skipped_dst_gap) for o in occ] == [
        (U(2008, 3, 30, 1), True),
        (U(2008, 4, 1), False),
    ]


def test_an_rdate_at_a_dtstart_inside_a_gap_fires_at_the_change() -> None:
    # DTSTART 02:15 does not exist; the RDATE at that wall time fires at 07:00Z, before 02:15 read
    # with the offset before the change (07:15Z): the set is not empty
    expr = f"DTSTART:20080309T021500\nRDATE;TZID={NY}:20080309T021500"
    assert fires(expr, U(2008, 3, 1), zone=NY) == [U(2008, 3, 9, 7)]
