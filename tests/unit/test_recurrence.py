"""Unit tests of gnomon.common.time (pure logic, no servers). Every expected value is exact."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from gnomon.common.time import DstFold, DstGap, RuleError, RuleKind, RuleSpec, compile_rule, tzdata_version

UTC = UTC


def U(*a):
    return datetime(*a, tzinfo=UTC)


def cron(expr, tz="UTC", **kw):
    return compile_rule(RuleSpec(RuleKind.CRON, expr, time_zone=tz, **kw))


def fired(rec, after, n):
    return [o.fire_time for o in rec.preview(after, n, include_skipped=False)]


# 1. fold, pinned rule, Europe/Berlin 2023-10-29 03:00 CEST -> 02:00 CET
@pytest.mark.parametrize(
    "policy,expected,notes",
    [
        (DstFold.FIRST, [U(2023, 10, 29, 0)], ["fold: first pass"]),
        (DstFold.SECOND, [U(2023, 10, 29, 1)], ["fold: second pass"]),
        (DstFold.BOTH, [U(2023, 10, 29, 0), U(2023, 10, 29, 1)], ["fold: first pass", "fold: second pass"]),
    ],
)
def test_fold_policies_berlin(policy, expected, notes):
    rec = cron("0 2 * * *", "Europe/Berlin", dst_fold=policy)
    occ = [o for o in rec.preview(U(2023, 10, 28, 12), 4) if o.fire_time.date() == expected[0].date()]
    assert [o.fire_time for o in occ] == expected
    assert [o.note for o in occ] == notes
    assert [o.local_time.fold for o in occ] == (
        [0] if policy is DstFold.FIRST else [1] if policy is DstFold.SECOND else [0, 1]
    )
    assert rec.next_after(U(2023, 10, 29, 1)).fire_time == U(2023, 10, 30, 1)


# 2. midnight across spring forward; POSIX day of week (0 = Sunday); APScheduler #529
def test_midnight_los_angeles_spring_forward():
    rec = cron("0 0 * * *", "America/Los_Angeles")
    after = datetime(2022, 3, 13, 0, 0, tzinfo=ZoneInfo("America/Los_Angeles"))
    o = rec.next_after(after)
    assert o.fire_time == U(2022, 3, 14, 7)
    assert o.local_time.utcoffset() == timedelta(hours=-7) and o.local_time.hour == 0


def test_posix_sunday_is_zero_chicago():
    chi = ZoneInfo("America/Chicago")
    rec = cron("0 0 * * 0-4", "America/Chicago")
    o = rec.next_after(datetime(2021, 3, 12, 0, 0, 0, 1, tzinfo=chi))
    assert o.fire_time == datetime(2021, 3, 14, 0, 0, tzinfo=timezone(timedelta(hours=-6)))
    assert o.local_time.weekday() == 6  # Sunday
    o = rec.next_after(datetime(2021, 3, 14, 0, 0, 0, 1, tzinfo=timezone(timedelta(hours=-6))))
    assert o.fire_time == datetime(2021, 3, 15, 0, 0, tzinfo=timezone(timedelta(hours=-5)))


def test_weekdays_across_dst_no_day_skipped():
    rec = cron("0 0 * * 1-5", "America/Chicago")
    o = rec.next_after(datetime(2021, 3, 12, 0, 0, 0, 1, tzinfo=timezone(timedelta(hours=-6))))
    assert o.fire_time == datetime(2021, 3, 15, 0, 0, tzinfo=timezone(timedelta(hours=-5)))


# 3. gaps
def test_gap_skip_new_york():
    rec = cron("0 2 * * *", "America/New_York", dst_gap=DstGap.SKIP)
    occ = rec.preview(U(2013, 3, 9, 12), 2)
    assert occ[0].skipped_dst_gap and occ[0].local_time.replace(tzinfo=None) == datetime(2013, 3, 10, 2)
    assert occ[0].note == "DST gap: 02:00 does not exist, skipped"
    assert occ[0].fire_time == U(2013, 3, 10, 7)  # fold=0 mapping, after the gap
    assert occ[1].fire_time == U(2013, 3, 11, 6) and not occ[1].skipped_dst_gap
    assert rec.next_after(U(2013, 3, 9, 12)).fire_time == U(2013, 3, 11, 6)


def test_gap_shift_forward_new_york():
    rec = cron("0 2 * * *", "America/New_York")
    o = rec.next_after(U(2013, 3, 9, 12))
    assert o.fire_time == U(2013, 3, 10, 7)
    assert o.local_time.hour == 3 and o.local_time.utcoffset() == timedelta(hours=-4)
    assert o.note == "DST gap: shifted from 02:00"


def test_gap_elapsed_cairo_every_two_hours():
    cairo = ZoneInfo("Africa/Cairo")
    rec = cron("0 */2 * * *", "Africa/Cairo")
    day = [
        o
        for o in rec.preview(U(2025, 4, 24, 12), 20)
        if o.local_time.replace(tzinfo=None).date() == datetime(2025, 4, 25).date()
    ]
    skipped = [o for o in day if o.skipped_dst_gap]
    fires = [o for o in day if not o.skipped_dst_gap]
    assert len(skipped) == 1 and skipped[0].local_time.hour == 0
    assert skipped[0].note == "DST gap: 00:00 does not exist (elapsed-time rule)"
    assert [o.local_time.hour for o in fires] == list(range(2, 24, 2))
    for o in fires:
        assert o.fire_time == datetime(2025, 4, 25, o.local_time.hour, tzinfo=cairo).astimezone(UTC)
        assert o.fire_time == U(2025, 4, 25, o.local_time.hour) - timedelta(hours=3)


def test_gap_merges_shifted_times_into_one():
    rec = cron("*/30 2 * * *", "America/New_York")  # pinned: 02:00 and 02:30 both shift to 03:00 EDT
    occ = rec.preview(U(2013, 3, 9, 12), 3)
    assert occ[0].fire_time == U(2013, 3, 10, 7)
    assert occ[0].note == "DST gap: shifted from 02:00; DST gap: shifted from 02:30"
    assert occ[1].fire_time == U(2013, 3, 11, 6)


# 4. elapsed-time rule in a fold; host TZ is irrelevant
def test_hourly_fold_los_angeles_both_passes():
    rec = cron("0 * * * *", "America/Los_Angeles")
    got = fired(rec, U(2026, 11, 1, 5, 30), 7)
    assert got == [U(2026, 11, 1, h) for h in range(6, 13)]
    occ = {o.fire_time: o for o in rec.preview(U(2026, 11, 1, 5, 30), 7)}
    assert occ[U(2026, 11, 1, 8)].note == "fold: first pass" and occ[U(2026, 11, 1, 8)].local_time.hour == 1
    assert occ[U(2026, 11, 1, 9)].note == "fold: second pass" and occ[U(2026, 11, 1, 9)].local_time.fold == 1


def test_utc_zone_ignores_host_tz():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        rec = cron("30 9 * * *", "UTC")
        assert rec.next_after(U(2026, 1, 1)).fire_time == U(2026, 1, 1, 9, 30)
        assert rec.next_after(datetime(2026, 1, 1)).fire_time == U(2026, 1, 1, 9, 30)  # naive = UTC
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


# 10. never fires / rare days
@pytest.mark.parametrize("expr", ["0 0 31 4 *", "0 0 30 2 *", "0 0 31W 4 *"])
def test_never_fires_fast(expr):
    t = time.perf_counter()
    with pytest.raises(RuleError) as e:
        cron(expr)
    assert time.perf_counter() - t < 0.5
    assert e.value.reason == "RULE_NEVER_FIRES" and e.value.field == "cron"


def test_rare_days():
    assert cron("0 0 31 4,5 *").next_after(U(2025, 1, 1)).fire_time == U(2025, 5, 31)
    assert cron("0 0 29 2 *").next_after(U(2025, 3, 1)).fire_time == U(2028, 2, 29)


# 11. POSIX day OR
def test_posix_day_or():
    rec = cron("0 16 4 * fri")
    got = rec.preview(U(2025, 6, 30), 7)
    assert [o.fire_time for o in got] == [
        U(2025, 7, 4, 16),
        U(2025, 7, 11, 16),
        U(2025, 7, 18, 16),
        U(2025, 7, 25, 16),
        U(2025, 8, 1, 16),
        U(2025, 8, 4, 16),
        U(2025, 8, 8, 16),
    ]
    assert got[0].note == "day-of-month OR day-of-week (POSIX): matched day-of-month 4 and day-of-week FRI"
    assert got[1].note == "day-of-month OR day-of-week (POSIX): matched day-of-week FRI"
    assert got[5].note == "day-of-month OR day-of-week (POSIX): matched day-of-month 4"  # Monday Aug 4


# cron features
@pytest.mark.parametrize(
    "macro,expected",
    [
        ("@yearly", U(2026, 1, 1)),
        ("@annually", U(2026, 1, 1)),
        ("@monthly", U(2025, 6, 1)),
        ("@weekly", U(2025, 5, 18)),
        ("@daily", U(2025, 5, 15)),
        ("@midnight", U(2025, 5, 15)),
        ("@hourly", U(2025, 5, 14, 13)),
    ],
)
def test_macros(macro, expected):
    assert cron(macro).next_after(U(2025, 5, 14, 12, 30)).fire_time == expected


def test_seconds_field():
    assert fired(cron("*/20 * * * * *"), U(2025, 1, 1), 3) == [
        U(2025, 1, 1, 0, 0, 20),
        U(2025, 1, 1, 0, 0, 40),
        U(2025, 1, 1, 0, 1),
    ]
    assert cron("15 30 9 * * *").next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 1, 9, 30, 15)


def test_last_day_and_last_weekday():
    assert cron("0 0 L * *").next_after(U(2024, 2, 1)).fire_time == U(2024, 2, 29)
    assert cron("0 0 LW * *").next_after(U(2025, 8, 1)).fire_time == U(2025, 8, 29)  # Aug 31 2025 = Sunday
    assert cron("0 0 * * 5L").next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 31)  # last Friday
    assert cron("0 0 * * FRI#2").next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 10)


def test_nearest_weekday_w():
    # 2025-03-15 is a Saturday -> Friday 14th; 2025-06-15 is a Sunday -> Monday 16th
    assert cron("0 0 15W * *").next_after(U(2025, 3, 1)).fire_time == U(2025, 3, 14)
    assert cron("0 0 15W * *").next_after(U(2025, 6, 1)).fire_time == U(2025, 6, 16)
    # 2025-11-01 is a Saturday -> Monday 3rd (never crosses into October)
    assert cron("0 0 1W * *").next_after(U(2025, 10, 15)).fire_time == U(2025, 11, 3)
    # 2025-08-31 is a Sunday -> Friday 29th (never crosses into September)
    assert cron("0 0 31W * *").next_after(U(2025, 8, 2)).fire_time == U(2025, 8, 29)


def test_question_mark_and_names():
    assert cron("0 0 ? * MON").next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 6)
    assert cron("0 0 15 * ?").next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 15)
    assert cron("0 12 * JAN-MAR sat,sun").next_after(U(2025, 3, 31)).fire_time == U(2026, 1, 3, 12)
    assert cron("0 0 * * 7").next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 5)  # 7 = Sunday


# RRULE
def rr(text, tz="UTC", start=None, **kw):
    return compile_rule(RuleSpec(RuleKind.RRULE, text, time_zone=tz, start=start, **kw))


def test_rrule_rdate_exdate_count():
    rec = rr(
        "DTSTART;TZID=Europe/Berlin:20250101T090000\nRRULE:FREQ=DAILY;COUNT=3\n"
        "RDATE;TZID=Europe/Berlin:20250110T120000\nEXDATE;TZID=Europe/Berlin:20250102T090000",
        "Europe/Berlin",
    )
    assert fired(rec, U(2024, 12, 31), 10) == [U(2025, 1, 1, 8), U(2025, 1, 3, 8), U(2025, 1, 10, 11)]


def test_rrule_until_and_bare_line():
    rec = rr("FREQ=WEEKLY;BYDAY=MO,WE;UNTIL=20250115T235959Z", start=U(2025, 1, 1, 7))
    assert fired(rec, U(2025, 1, 1), 10) == [
        U(2025, 1, 1, 7),
        U(2025, 1, 6, 7),
        U(2025, 1, 8, 7),
        U(2025, 1, 13, 7),
        U(2025, 1, 15, 7),
    ]


def test_rrule_far_after_dtstart_rebased():
    rec = rr("FREQ=MINUTELY;INTERVAL=7", start=U(2000, 1, 1))
    o = rec.next_after(U(2025, 1, 1))
    assert (o.fire_time - U(2000, 1, 1)).total_seconds() % 420 == 0
    assert U(2025, 1, 1) < o.fire_time <= U(2025, 1, 1, 0, 7)
    yearly = rr("FREQ=YEARLY;INTERVAL=3;BYMONTH=2;BYMONTHDAY=-1", start=U(2001, 1, 1))
    assert fired(yearly, U(2025, 1, 1), 2) == [U(2025, 2, 28), U(2028, 2, 29)]


def test_rrule_monthly_dst_pinned_and_hourly_elapsed():
    rec = rr(
        "DTSTART;TZID=America/New_York:20130310T023000\nRRULE:FREQ=DAILY",
        "America/New_York",
        dst_gap=DstGap.SKIP,
    )
    assert not rec.elapsed_time
    occ = rec.preview(U(2013, 3, 10), 2)
    assert occ[0].skipped_dst_gap and occ[1].fire_time == U(2013, 3, 11, 6, 30)
    hourly = rr("FREQ=HOURLY", "America/Los_Angeles", start=U(2026, 11, 1, 6))
    assert hourly.elapsed_time
    assert fired(hourly, U(2026, 11, 1, 5), 7) == [U(2026, 11, 1, h) for h in range(6, 13)]


# INTERVAL
def test_interval_every_45_minutes_across_dst():
    rec = compile_rule(
        RuleSpec(
            RuleKind.INTERVAL,
            interval=timedelta(minutes=45),
            time_zone="Europe/Berlin",
            start=U(2023, 10, 28, 22),
        )
    )
    got = fired(rec, U(2023, 10, 28, 23), 6)
    assert got == [U(2023, 10, 28, 23, 30) + timedelta(minutes=45 * k) for k in range(6)]  # 22:00 + 45k
    assert [o.note for o in rec.preview(U(2023, 10, 29, 0), 2)] == ["fold: first pass", "fold: second pass"]
    assert all(b - a == timedelta(minutes=45) for a, b in zip(got, got[1:]))
    assert rec.next_after(U(2023, 10, 28, 21)).fire_time == U(2023, 10, 28, 22)


def test_end_time_respected():
    rec = cron("0 * * * *", end=U(2025, 1, 1, 3))
    assert fired(rec, U(2025, 1, 1), 10) == [U(2025, 1, 1, 1), U(2025, 1, 1, 2), U(2025, 1, 1, 3)]
    assert rec.next_after(U(2025, 1, 1, 3)) is None
    start = cron("0 * * * *", start=U(2025, 1, 1, 5, 30))
    assert start.next_after(U(2025, 1, 1)).fire_time == U(2025, 1, 1, 6)


# errors
@pytest.mark.parametrize(
    "spec,reason,field",
    [
        (RuleSpec(RuleKind.CRON, "0 0 * * *", time_zone="Mars/Olympus"), "INVALID_TIME_ZONE", "time_zone"),
        (RuleSpec(RuleKind.CRON, "0 0 32 * *"), "INVALID_CRON", "cron"),
        (RuleSpec(RuleKind.CRON, "0 0 0 1 1 * 2025"), "INVALID_CRON", "cron"),
        (RuleSpec(RuleKind.CRON, "@reboot"), "INVALID_CRON", "cron"),
        (RuleSpec(RuleKind.CRON, "0 0 31 4 *"), "RULE_NEVER_FIRES", "cron"),
        (RuleSpec(RuleKind.RRULE, "FREQ=DAILY;BYDAY=XX", start=U(2025, 1, 1)), "INVALID_RRULE", "rrule"),
        (RuleSpec(RuleKind.RRULE, "FREQ=DAILY"), "INVALID_TIME_RANGE", "start_time"),
        (
            RuleSpec(RuleKind.RRULE, "FREQ=DAILY;COUNT=100001", start=U(2025, 1, 1)),
            "RRULE_UNBOUNDED",
            "rrule",
        ),
        (RuleSpec(RuleKind.RRULE, "FREQ=SECONDLY;BYHOUR=9", start=U(2025, 1, 1)), "RRULE_UNBOUNDED", "rrule"),
        (
            RuleSpec(RuleKind.RRULE, "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", start=U(2025, 1, 1)),
            "RULE_NEVER_FIRES",
            "rrule",
        ),
        (
            RuleSpec(RuleKind.RRULE, "FREQ=SECONDLY;BYMONTH=4;BYMONTHDAY=31", start=U(2025, 1, 1)),
            "RULE_NEVER_FIRES",
            "rrule",
        ),
        (
            RuleSpec(
                RuleKind.RRULE,
                "RRULE:FREQ=DAILY\nRDATE:"
                + ",".join(f"2025{m:02d}{d:02d}T000000" for m in range(1, 13) for d in range(1, 29)) * 1
                + ",".join([""] * 0),
                start=U(2025, 1, 1),
            ),
            None,
            None,
        ),
        (
            RuleSpec(RuleKind.INTERVAL, interval=timedelta(0), start=U(2025, 1, 1)),
            "INVALID_INTERVAL",
            "interval",
        ),
        (
            RuleSpec(RuleKind.INTERVAL, interval=timedelta(days=367), start=U(2025, 1, 1)),
            "INVALID_INTERVAL",
            "interval",
        ),
        (RuleSpec(RuleKind.INTERVAL, interval=timedelta(minutes=5)), "INVALID_TIME_RANGE", "start_time"),
        (
            RuleSpec(RuleKind.CRON, "* * * * *", start=U(2025, 2, 1), end=U(2025, 1, 1)),
            "INVALID_TIME_RANGE",
            "end_time",
        ),
    ],
)
def test_rule_errors(spec, reason, field):
    if reason is None:  # 336 RDATE values is fine
        compile_rule(spec)
        return
    with pytest.raises(RuleError) as e:
        compile_rule(spec)
    assert (e.value.reason, e.value.field) == (reason, field)


def test_too_many_rdates_unbounded():
    dates = ",".join(
        (datetime(2025, 1, 1) + timedelta(hours=h)).strftime("%Y%m%dT%H%M%S") for h in range(1001)
    )
    with pytest.raises(RuleError) as e:
        rr("RRULE:FREQ=DAILY\nRDATE:" + dates, start=U(2025, 1, 1))
    assert e.value.reason == "RRULE_UNBOUNDED"


@pytest.mark.parametrize(
    "expr,msg",
    [
        ("0 0 32 * *", "field 3 (day-of-month) '32': out of range 1-31"),
        ("61 * * * *", "field 1 (minute) '61': out of range 0-59"),
        ("0 0 * * * 9", "field 6 (day-of-week) '9': out of range 0-7"),
        ("0 25 * * *", "field 2 (hour) '25': out of range 0-23"),
        ("0 0 * 13 *", "field 4 (month) '13': out of range 1-12"),
        ("0 0 * * 1-XYZ", "field 5 (day-of-week) '1-XYZ'"),
        ("0 0 1 1 * 2025 x", "Quartz year"),
        ("0 0 * *", "only 5 fields"),
    ],
)
def test_cron_error_positions(expr, msg):
    with pytest.raises(RuleError) as e:
        cron(expr)
    assert msg in e.value.message


def test_rrule_error_position():
    with pytest.raises(RuleError) as e:
        rr("FREQ=DAILY;BYDAY=XX", start=U(2025, 1, 1))
    assert e.value.message.startswith("RRULE part 2 'BYDAY=XX'")
    with pytest.raises(RuleError) as e:
        rr("DTSTART;TZID=Europe/Paris:20250101T000000\nRRULE:FREQ=DAILY", "Europe/Berlin")
    assert e.value.reason == "INVALID_RRULE" and "TZID" in e.value.message


def test_tzdata_version_and_compile_is_cheap():
    assert tzdata_version() == "2026.6"
    t = time.perf_counter()
    for i in range(200):
        compile_rule(
            RuleSpec(RuleKind.CRON, f"{i % 60} 3 * * *", time_zone="Europe/Berlin", start=U(2025, 1, 1))
        )
    assert (time.perf_counter() - t) / 200 < 0.002


def test_fifth_monday_of_february_is_rare_but_found():
    assert cron("0 0 * 2 MON#5").next_after(U(2025, 1, 1)).fire_time == U(2044, 2, 29)


def test_count_rule_ends():
    rec = rr("FREQ=DAILY;COUNT=2", start=U(2025, 1, 1))
    assert fired(rec, U(2024, 1, 1), 5) == [U(2025, 1, 1), U(2025, 1, 2)]
    assert rec.next_after(U(2025, 1, 2)) is None
