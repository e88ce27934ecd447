"""Cron ranges with steps, lists and names as crontab(5) and cronie's ``get_range`` read them.

``A-B/S`` steps from A up to and including B (cronie ``entry.c``: ``for (i = low_; i <= high_;
i += step)``), so ``A-A/S`` is ``{A}``, not "from A to the end of the field". Every expected
value below is an exact list of fire times.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gnomon.common.time import RuleError, RuleKind, RuleSpec, compile_rule


def U(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(expr: str, after: datetime, until: datetime, tz: str = "UTC") -> list[datetime]:
    """The fire times strictly after ``after`` and before ``until`` (skip markers left out)."""
    rec = compile_rule(RuleSpec(RuleKind.CRON, expr, time_zone=tz))
    out = []
    for o in rec.iter_after(after, include_skipped=False):
        if o.fire_time >= until:
            break
        out.append(o.fire_time)
    return out


def hourly(first: datetime, n: int) -> list[datetime]:
    return [first + timedelta(hours=h) for h in range(n)]


# the two cases as reported: one fire per hour at :05, one fire a day at 02:00
def test_minute_range_with_equal_ends_fires_at_that_minute_only():
    got = fires("5-5/10 * * * *", U(2025, 1, 1) - timedelta(seconds=1), U(2025, 1, 2))
    assert got == hourly(U(2025, 1, 1, 0, 5), 24)


def test_hour_range_with_equal_ends_fires_once_a_day():
    got = fires("0 2-2/3 * * *", U(2025, 1, 1) - timedelta(seconds=1), U(2025, 1, 2))
    assert got == [U(2025, 1, 1, 2)]


# the family: A-A/S in every field, names, A-B/S with S > B-A, */S, A/S
@pytest.mark.parametrize(
    "expr,after,until,expected",
    [
        # seconds (6 fields): second 7 of every minute
        (
            "7-7/20 * * * * *",
            U(2025, 1, 1),
            U(2025, 1, 1, 0, 3),
            [U(2025, 1, 1, 0, 0, 7), U(2025, 1, 1, 0, 1, 7), U(2025, 1, 1, 0, 2, 7)],
        ),
        ("0 50-50/2 * * * *", U(2025, 1, 1), U(2025, 1, 1, 3), hourly(U(2025, 1, 1, 0, 50), 3)),
        ("0 0 20-20/1 * * *", U(2025, 1, 1), U(2025, 1, 3), [U(2025, 1, 1, 20), U(2025, 1, 2, 20)]),
        # day-of-month: the 10th only (not 10, 15, 20, 25, 30)
        ("0 0 10-10/5 * *", U(2025, 1, 1), U(2025, 3, 1), [U(2025, 1, 10), U(2025, 2, 10)]),
        ("0 0 25-25/3 * *", U(2025, 1, 1), U(2025, 3, 1), [U(2025, 1, 25), U(2025, 2, 25)]),
        # month: March only (not March, July, November)
        ("0 0 1 3-3/4 *", U(2025, 1, 1), U(2027, 1, 1), [U(2025, 3, 1), U(2026, 3, 1)]),
        ("0 0 1 JAN-JAN/3 *", U(2025, 1, 1), U(2027, 1, 1), [U(2026, 1, 1)]),
        # day-of-week: Tuesdays only (not Tuesdays and Fridays); 2025-01-01 is a Wednesday
        ("0 0 * * 2-2/3", U(2025, 1, 1), U(2025, 1, 15), [U(2025, 1, 7), U(2025, 1, 14)]),
        ("0 0 * * MON-MON/2", U(2025, 1, 1), U(2025, 1, 14), [U(2025, 1, 6), U(2025, 1, 13)]),
        # 0 and 7 are both Sunday, with a step too
        ("0 0 * * 7-7/3", U(2025, 1, 1), U(2025, 1, 13), [U(2025, 1, 5), U(2025, 1, 12)]),
        ("0 0 * * 0-0/2", U(2025, 1, 1), U(2025, 1, 13), [U(2025, 1, 5), U(2025, 1, 12)]),
        # A-B/S with S > B-A: the first bound only
        ("10-12/5 0 * * *", U(2025, 1, 1), U(2025, 1, 2), [U(2025, 1, 1, 0, 10)]),
        ("0 0 * 2-3/6 *", U(2025, 1, 1), U(2025, 2, 4), [U(2025, 2, 1), U(2025, 2, 2), U(2025, 2, 3)]),
        # names with steps: Mon, Wed, Fri; January, April, July, October
        (
            "0 0 * * MON-FRI/2",
            U(2025, 1, 5),
            U(2025, 1, 12),
            [U(2025, 1, 6), U(2025, 1, 8), U(2025, 1, 10)],
        ),
        (
            "0 0 1 JAN-DEC/3 *",
            U(2025, 1, 1) - timedelta(seconds=1),
            U(2026, 1, 1),
            [U(2025, 1, 1), U(2025, 4, 1), U(2025, 7, 1), U(2025, 10, 1)],
        ),
        # */S from the field's lowest value; day-of-week */3 = Sun, Wed, Sat (0, 3, 6)
        ("*/20 0 * * *", U(2025, 1, 1), U(2025, 1, 2), [U(2025, 1, 1, 0, 20), U(2025, 1, 1, 0, 40)]),
        ("0 0 */10 * *", U(2025, 1, 1), U(2025, 2, 1), [U(2025, 1, 11), U(2025, 1, 21), U(2025, 1, 31)]),
        ("0 0 * * */3", U(2025, 1, 3), U(2025, 1, 9), [U(2025, 1, 4), U(2025, 1, 5), U(2025, 1, 8)]),
        # A/S (Quartz; cronie refuses it): A up to the field's largest value
        ("50/4 0 * * *", U(2025, 1, 1), U(2025, 1, 2), [U(2025, 1, 1, 0, m) for m in (50, 54, 58)]),
        ("0 20/2 * * *", U(2025, 1, 1), U(2025, 1, 2), [U(2025, 1, 1, 20), U(2025, 1, 1, 22)]),
        ("0 0 1 NOV/1 *", U(2025, 1, 1), U(2026, 2, 1), [U(2025, 11, 1), U(2025, 12, 1)]),
        # day-of-week 5/1 = Fri, Sat, and 7 = Sunday
        ("0 0 * * 5/1", U(2025, 1, 6), U(2025, 1, 13), [U(2025, 1, 10), U(2025, 1, 11), U(2025, 1, 12)]),
        # a day-of-week range ending at Sunday (0) ends at 7, as cronie reads it
        ("0 0 * * FRI-SUN", U(2025, 1, 6), U(2025, 1, 13), [U(2025, 1, 10), U(2025, 1, 11), U(2025, 1, 12)]),
        ("0 0 * * 6-0/2", U(2025, 1, 6), U(2025, 1, 13), [U(2025, 1, 11)]),
        # lists mixing the forms
        (
            "0 0 * * 1-1/5,3,SAT",
            U(2025, 1, 5),
            U(2025, 1, 12),
            [U(2025, 1, 6), U(2025, 1, 8), U(2025, 1, 11)],
        ),
    ],
)
def test_range_step_family(expr, after, until, expected):
    assert fires(expr, after, until) == expected


# in a DST zone: both cases are elapsed-time rules (hour field with a step or *)
def test_equal_ends_new_york_fall_back_fires_each_of_the_25_hours_once():
    day = (U(2013, 11, 3, 4), U(2013, 11, 4, 5))  # 2013-11-03 00:00 EDT .. 11-04 00:00 EST
    assert fires("5-5/10 * * * *", day[0], day[1], "America/New_York") == hourly(U(2013, 11, 3, 4, 5), 25)
    assert fires("0 2-2/3 * * *", day[0], day[1], "America/New_York") == [U(2013, 11, 3, 7)]  # 02:00 EST


def test_equal_ends_new_york_spring_forward_02_00_does_not_exist():
    got = fires("0 2-2/3 * * *", U(2013, 3, 10, 5), U(2013, 3, 12), "America/New_York")
    assert got == [U(2013, 3, 11, 6)]  # 2013-03-11 02:00 EDT; none on the 10th


@pytest.mark.parametrize(
    "expr,msg",
    [
        ("5-4 * * * *", "field 1 (minute) '5-4': range start must not exceed its end"),
        ("0 0 20-10/2 * *", "field 3 (day-of-month) '20-10/2': range start must not exceed its end"),
        ("0 0 * DEC-JAN *", "field 4 (month) 'DEC-JAN': range start must not exceed its end"),
        ("0 0 * * SAT-FRI", "field 5 (day-of-week) 'SAT-FRI': range start must not exceed its end"),
        ("0 0 1-0 * *", "field 3 (day-of-month) '1-0': out of range 1-31"),
        ("*/0 * * * *", "field 1 (minute) '*/0': step must be >= 1"),
        ("5-5/0 * * * *", "field 1 (minute) '5-5/0': step must be >= 1"),
        ("0 1-2/X * * *", "field 2 (hour) '1-2/X': step must be a positive integer"),
        ("0 1-2/-1 * * *", "field 2 (hour) '1-2/-1': step must be a positive integer"),
        ("0 0-24/2 * * *", "field 2 (hour) '0-24/2': out of range 0-23"),
        ("0 0 * * 8/2", "field 5 (day-of-week) '8/2': out of range 0-7"),
        ("0 0 0/2 * *", "field 3 (day-of-month) '0/2': out of range 1-31"),
        ("0 0 L/2 * *", "field 3 (day-of-month) 'L/2': no step is allowed after L or LW"),
        ("0 0 * JAN/FEB *", "field 4 (month) 'JAN/FEB': step must be a positive integer"),
        ("0 0 * * MON-FRI/MON", "step must be a positive integer"),
        ("0 0 * FEB-MON *", "field 4 (month) 'FEB-MON': not a valid value"),
        ("0 0 1#2 * *", "field 3 (day-of-month) '1#2': '#' is only allowed in day-of-week"),
        ("*-5 * * * *", "field 1 (minute) '*-5': not a valid value"),
        ("1-2-3 * * * *", "field 1 (minute) '1-2-3': not a valid value"),
        ("99999999999999999999 * * * *", "field 1 (minute) '99999999999999999999': out of range 0-59"),
        ("0 0 * * 1,,2", "field 5 (day-of-week) '1,,2': empty list item"),
    ],
)
def test_range_step_refusals_name_the_field_and_item(expr, msg):
    with pytest.raises(RuleError) as e:
        compile_rule(RuleSpec(RuleKind.CRON, expr))
    assert e.value.reason == "INVALID_CRON"
    assert msg in e.value.message
