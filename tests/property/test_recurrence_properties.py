"""Hypothesis properties of gnomon.common.time over random zones, cron rules, DST policies, instants."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.common.time import DstFold, DstGap, RuleKind, RuleSpec, compile_rule, get_zone
from gnomon.common.time.zones import tzdata_zones

UTC = UTC
# the zones of the pinned tzdata wheel, the only source the engine reads (never the host's zoneinfo,
# which may be older: Debian's had America/Winnipeg at -06:00 in January 2027, tzdata 2026.6 -05:00)
ZONES = sorted(tzdata_zones() - {"Factory"})
ODD = [
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Asia/Kolkata",
    "America/St_Johns",
    "Pacific/Chatham",
    "Europe/Berlin",
    "America/New_York",
    "America/Los_Angeles",
    "Africa/Cairo",
    "Pacific/Apia",
    "Antarctica/Casey",
    "Europe/Dublin",
    "Asia/Tehran",
    "America/Santiago",
]
zones = st.one_of(st.sampled_from(ODD), st.sampled_from(ZONES))

minutes = st.sampled_from(["0", "30", "15", "45", "*/15", "0,30", "5-10", "59"])
pinned_hours = st.one_of(st.integers(0, 23).map(str), st.sampled_from(["1-3", "2,14", "0-2", "1,2,3"]))
elapsed_hours = st.sampled_from(["*", "*/2", "0-23/3", "*/5", "1-23/2"])
doms = st.sampled_from(["*", "*", "*", "1", "15", "28", "1-7", "L", "15W", "1,15"])
months = st.sampled_from(["*", "*", "*", "3", "10,11", "3-4", "1-6"])
dows = st.sampled_from(["*", "*", "*", "0", "1-5", "SUN", "FRI", "6,0", "5L", "1#2"])


@st.composite
def cron_rules(draw):
    elapsed = draw(st.booleans())
    hour = draw(elapsed_hours if elapsed else pinned_hours)
    expr = f"{draw(minutes)} {hour} {draw(doms)} {draw(months)} {draw(dows)}"
    return expr, elapsed


instants = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.replace(tzinfo=UTC)
)
# instants close to a DST change of the common zones, so folds and gaps are actually hit
near_dst = st.tuples(
    st.integers(1971, 2099), st.sampled_from([3, 4, 9, 10, 11]), st.integers(1, 28), st.integers(0, 23)
).map(lambda t: datetime(t[0], t[1], t[2], t[3], tzinfo=UTC))
afters = st.one_of(instants, near_dst)


def _spec(zone, rule, gap, fold):
    return RuleSpec(RuleKind.CRON, rule[0], time_zone=zone, dst_gap=gap, dst_fold=fold)


common = dict(
    zone=zones,
    rule=cron_rules(),
    gap=st.sampled_from(list(DstGap)),
    fold=st.sampled_from(list(DstFold)),
    after=afters,
)


@settings(max_examples=250, deadline=None)
@given(**common)
def test_fired_occurrences_exist_increase_and_follow_after(zone, rule, gap, fold, after):
    rec = compile_rule(_spec(zone, rule, gap, fold))
    z = get_zone(zone)
    last = None
    for o in rec.preview(after, 12):
        assert o.fire_time.tzinfo is UTC and o.fire_time.microsecond == 0
        assert o.fire_time > after  # (c)
        if o.skipped_dst_gap:
            continue
        rt = o.fire_time.astimezone(z)  # (a) the wall time exists
        assert rt.replace(tzinfo=None) == o.local_time.replace(tzinfo=None) and rt.fold == o.local_time.fold
        assert o.local_time.astimezone(UTC) == o.fire_time
        assert last is None or o.fire_time > last  # (b)
        last = o.fire_time


@settings(max_examples=150, deadline=None)
@given(**common, n=st.integers(1, 8))
def test_preview_equals_iter_and_chained_next(zone, rule, gap, fold, after, n):
    rec = compile_rule(_spec(zone, rule, gap, fold))
    fired = list(itertools.islice(rec.iter_after(after, include_skipped=False), n))
    assert rec.preview(after, n, include_skipped=False) == fired  # (d)
    assert [o for o in rec.preview(after, n + 3) if not o.skipped_dst_gap][:n] == fired[:n] or len(fired) < n
    chained, t = [], after
    for _ in range(n):
        o = rec.next_after(t)
        if o is None:
            break
        chained.append(o)
        t = o.fire_time
    assert chained == fired


@settings(max_examples=200, deadline=None)
@given(
    zone=zones,
    rule=cron_rules().filter(lambda r: not r[1]),
    gap=st.sampled_from(list(DstGap)),
    fold=st.sampled_from([DstFold.FIRST, DstFold.SECOND]),
    after=afters,
)
def test_pinned_fold_policy(zone, rule, gap, fold, after):
    rec = compile_rule(_spec(zone, rule, gap, fold))
    assert not rec.elapsed_time
    for o in rec.preview(after, 10):
        lt = o.local_time
        ambiguous = (
            lt.replace(fold=0).utcoffset() != lt.replace(fold=1).utcoffset()
            and not o.skipped_dst_gap
            and "DST gap" not in o.note
        )
        if fold is DstFold.FIRST:
            assert lt.fold == 0  # (e)
        elif ambiguous:
            assert lt.fold == 1


@settings(max_examples=60, deadline=None)
@given(zone=zones, after=afters, minutes_=st.integers(1, 24 * 60))
def test_interval_is_exact_elapsed_spacing(zone, after, minutes_):
    step = timedelta(minutes=minutes_)
    rec = compile_rule(RuleSpec(RuleKind.INTERVAL, interval=step, time_zone=zone, start=after - 7 * step))
    got = [o.fire_time for o in rec.preview(after, 6)]
    assert got[0] > after and got[0] - step <= after
    assert all(b - a == step for a, b in zip(got, got[1:]))
