"""RRULE periods taken whole for BYSETPOS, restart consistency, static refusals of rules that never
select a time, and the work budget of one search."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from gnomon.common.time import RuleError, RuleKind, RuleSpec, compile_rule
from gnomon.common.time.rrule import parse_rrule
from gnomon.common.time.rrule_expand import Budget, walls
from gnomon.common.time.zones import get_zone


def fires(text: str, after: datetime, n: int = 4, zone: str = "UTC") -> list[str]:
    rec = compile_rule(RuleSpec(kind=RuleKind.RRULE, expression=text, time_zone=zone))
    return [o.fire_time.strftime("%Y-%m-%dT%H:%M") for o in rec.preview(after, n)]


def at(s: str) -> datetime:
    return datetime.fromisoformat(s).replace(tzinfo=UTC)


WEEKLY_SETPOS = "DTSTART:20200103T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=1"


def test_weekly_bysetpos_asked_mid_week_picks_from_the_whole_week():
    # every Monday: a search started on a Friday must not take that Friday as the week's first
    assert fires(WEEKLY_SETPOS, at("2020-01-17T00:00")) == [
        "2020-01-20T09:00",
        "2020-01-27T09:00",
        "2020-02-03T09:00",
        "2020-02-10T09:00",
    ]
    # from DTSTART (a Friday): DTSTART's own week picks Monday 2019-12-30, before DTSTART: dropped
    assert fires(WEEKLY_SETPOS, at("2019-12-01T00:00"), 2) == ["2020-01-06T09:00", "2020-01-13T09:00"]


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=1",
        "FREQ=WEEKLY;BYDAY=MO,WE,FR;BYSETPOS=-1;WKST=SU",
        "FREQ=WEEKLY;INTERVAL=2;BYDAY=TU,SA;BYSETPOS=2;WKST=WE",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
        "FREQ=MONTHLY;BYDAY=MO,FR;BYSETPOS=1,3",
        "FREQ=YEARLY;BYMONTH=3,9;BYDAY=SU;BYSETPOS=2",
        "FREQ=DAILY;BYHOUR=8,12,18;BYSETPOS=-1",
        "FREQ=HOURLY;BYMINUTE=0,20,40;BYSETPOS=2",
    ],
)
def test_a_search_restarted_anywhere_agrees_with_the_one_from_dtstart(rule):
    text = f"DTSTART:20200115T090000\n RRULE:{rule}".replace("\n ", "\n")
    whole = [
        o.fire_time
        for o in compile_rule(RuleSpec(kind=RuleKind.RRULE, expression=text)).preview(
            at("2020-01-01T00:00"), 60
        )
    ]
    rec = compile_rule(RuleSpec(kind=RuleKind.RRULE, expression=text))
    for q in itertools.chain(whole[:20], (w + timedelta(hours=13) for w in whole[:20])):
        assert [o.fire_time for o in rec.preview(q, 5)] == [w for w in whole if w > q][:5], q


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=WEEKLY;BYDAY=WE;BYSETPOS=2",
        "FREQ=WEEKLY;BYDAY=WE;BYHOUR=9,10;BYSETPOS=-3",
        "FREQ=DAILY;BYHOUR=9;BYSETPOS=2",
        "FREQ=DAILY;BYHOUR=9,10;BYMINUTE=0,30;BYSETPOS=5",
        "FREQ=HOURLY;BYMINUTE=0;BYSETPOS=2",
        "FREQ=MINUTELY;BYSECOND=0,30;BYSETPOS=3",
        "FREQ=SECONDLY;BYSECOND=0,30;BYSETPOS=2",
        "FREQ=MONTHLY;BYMONTHDAY=1,15;BYSETPOS=3",
        "FREQ=MONTHLY;BYDAY=1MO,-1FR;BYSETPOS=3",
        "FREQ=YEARLY;BYYEARDAY=1,100;BYSETPOS=-3",
    ],
)
@pytest.mark.parametrize("rdate", ["", "\nRDATE:20300101T000000Z"])
def test_a_bysetpos_beyond_every_set_of_its_period_is_refused_even_beside_an_rdate(rule, rdate):
    with pytest.raises(RuleError) as e:
        compile_rule(
            RuleSpec(kind=RuleKind.RRULE, expression=f"DTSTART:20200101T090000\nRRULE:{rule}{rdate}")
        )
    assert (e.value.reason, e.value.field) == ("RULE_NEVER_FIRES", "rrule")
    assert "BYSETPOS" in e.value.message


def test_a_bysetpos_with_one_value_that_can_select_is_kept():
    text = "DTSTART:20200101T090000\nRRULE:FREQ=DAILY;BYHOUR=9;BYSETPOS=1,2"
    assert fires(text, at("2020-01-01T00:00"), 2) == ["2020-01-01T09:00", "2020-01-02T09:00"]


@pytest.mark.parametrize(
    ("dtstart", "rule", "ok"),
    [
        ("20200101", "FREQ=MONTHLY;INTERVAL=12;BYMONTH=3", False),
        ("20200101", "FREQ=MONTHLY;INTERVAL=2;BYMONTH=2,4,12", False),
        ("20200201", "FREQ=MONTHLY;INTERVAL=2;BYMONTH=2,4", True),
        ("20200101", "FREQ=MONTHLY;INTERVAL=5;BYMONTH=6", True),  # Jan, Jun, Nov, Apr, ...
        ("20200101", "FREQ=DAILY;INTERVAL=146097;BYMONTH=3", False),
        ("20200101", "FREQ=WEEKLY;INTERVAL=20871;BYMONTH=7", False),
        ("20200101", "FREQ=YEARLY;INTERVAL=3;BYMONTH=2;BYMONTHDAY=29", True),  # 2020, 2032, ...
        ("20210101", "FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29", False),  # never a leap year
    ],
)
@pytest.mark.parametrize("rdate", ["", "\nRDATE:20300101T000000Z"])
def test_an_interval_that_never_meets_bymonth_is_refused(dtstart, rule, ok, rdate):
    spec = RuleSpec(kind=RuleKind.RRULE, expression=f"DTSTART:{dtstart}T090000\nRRULE:{rule}{rdate}")
    if ok:
        assert compile_rule(spec).next_after(at("2019-01-01T00:00")) is not None
        return
    with pytest.raises(RuleError) as e:
        compile_rule(spec)
    assert (e.value.reason, e.value.field) == ("RULE_NEVER_FIRES", "rrule")


def test_a_search_past_its_work_budget_is_refused_as_too_expensive():
    # a leap day on a Monday: once in 28 years; at FREQ=HOURLY each day in between is looked at
    text = "DTSTART:20200101T000000\nRRULE:FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"
    plan = parse_rrule(text, get_zone("UTC"), "UTC", None)
    assert plan.filters is not None
    it = walls(plan.filters, datetime(2020, 1, 1), datetime(2070, 1, 1), Budget(limit=1000))
    with pytest.raises(RuleError) as e:
        next(it)
    assert (e.value.reason, e.value.field) == ("RULE_TOO_EXPENSIVE", "rrule")
    # the default budget finds it (2044-02-29 is a Monday)
    first = next(walls(plan.filters, datetime(2020, 1, 1), datetime(2070, 1, 1)))
    assert first == datetime(2044, 2, 29, 0, 0)
