"""Gnomon's cron fire times against a reference cron matcher written here, over random expressions.

The reference follows crontab(5) and cronie (``src/entry.c``: ``get_range``, ``get_number``;
``src/cron.c``: the day test): a list item is ``*``, ``N``, ``A-B``, each optionally ``/S``,
stepping from the first bound up to and including the second; names JAN-DEC and SUN-SAT (any
case); day of week 0 and 7 are Sunday, and a day-of-week range ending at 0 ends at 7; when
neither day field starts with ``*`` a day matches if day-of-month OR day-of-week matches, else
both must. ``N/S``, which cronie refuses, is read as Gnomon documents it (Quartz): ``N-max/S``.
It shares no code with Gnomon or cronsim: it walks the calendar day by day, hour by hour, minute
by minute (and second by second) over a bounded window, in UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gnomon.common.time import RuleError, RuleKind, RuleSpec, compile_rule

LOW_HIGH = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]  # seconds first, as 6 fields
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
WINDOW = timedelta(days=400)
LIMIT = 120  # fire times compared per example


def ref_number(idx: int, token: str) -> int:
    token = token.upper()
    if idx == 4 and token in MONTHS:
        return MONTHS.index(token) + 1
    if idx == 5 and token in DAYS:
        return DAYS.index(token)
    return int(token)


def ref_field(idx: int, text: str) -> set[int]:
    """The values of one field (no L, W, #): cronie's get_range, item by item."""
    low, high = LOW_HIGH[idx]
    out: set[int] = set()
    for item in text.split(","):
        body, slash, step_text = item.partition("/")
        step = int(step_text) if slash else 1
        if body == "*":
            first, last = low, high
        elif "-" in body:
            a, b = body.split("-")
            first, last = ref_number(idx, a), ref_number(idx, b)
            if idx == 5 and last == 0 and first > last:
                last = 7
        else:
            first = ref_number(idx, body)
            last = high if slash else first
        i = first
        while i <= last:
            out.add(i)
            i += step
    if idx == 5 and 7 in out:  # cronie: "make sundays equivalent"
        out = (out - {7}) | {0}
    return out


class RefCron:
    """A brute-force matcher of a 5- or 6-field expression (UTC, naive datetimes)."""

    def __init__(self, expr: str) -> None:
        parts = expr.split()
        if len(parts) == 5:
            parts = ["0", *parts]
        self.sets = [ref_field(i, p) for i, p in enumerate(parts)]
        self.day_or = not parts[3].startswith("*") and not parts[5].startswith("*")

    def day_matches(self, d: date) -> bool:
        _, _, _, doms, months, dows = self.sets
        if d.month not in months:
            return False
        dom = d.day in doms
        dow = (d.weekday() + 1) % 7 in dows  # Monday is 1, Sunday 0
        return (dom or dow) if self.day_or else (dom and dow)

    def fires(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Matching instants t with after < t < until, ascending."""
        seconds, minutes, hours = self.sets[0], self.sets[1], self.sets[2]
        d = after.date()
        while d <= until.date():
            if self.day_matches(d):
                for h in range(24):
                    if h not in hours:
                        continue
                    for m in range(60):
                        if m not in minutes:
                            continue
                        for s in range(60):
                            t = datetime(d.year, d.month, d.day, h, m, s)
                            if s in seconds and after < t < until:
                                yield t
            d += timedelta(days=1)


def test_reference_reads_the_reported_cases():
    assert RefCron("5-5/10 * * * *").sets[1] == {5}
    assert RefCron("0 2-2/3 * * *").sets[2] == {2}
    assert RefCron("* * * * 5-0").sets[5] == {5, 6, 0}
    assert RefCron("* * * * mon-fri/2").sets[5] == {1, 3, 5}
    got = list(RefCron("0 16 4 * fri").fires(datetime(2025, 7, 31), datetime(2025, 8, 9)))
    assert got == [datetime(2025, 8, 1, 16), datetime(2025, 8, 4, 16), datetime(2025, 8, 8, 16)]


@st.composite
def values(draw, idx: int) -> tuple[int, str]:
    """A value of field ``idx`` and its text: a number, or a name (any case) where there is one."""
    low, high = LOW_HIGH[idx]
    v = draw(st.integers(low, high))
    if idx == 4 and draw(st.booleans()):
        return v, draw(st.sampled_from([str.upper, str.lower, str.title]))(MONTHS[v - 1])
    if idx == 5 and v < 7 and draw(st.booleans()):
        return v, draw(st.sampled_from([str.upper, str.lower, str.title]))(DAYS[v])
    return v, str(v)


@st.composite
def items(draw, idx: int) -> str:
    """One list item: N, A-B, A-B/S, A-A/S, */S, N/S (A <= B; in day-of-week also A-0 / A-SUN)."""
    low, high = LOW_HIGH[idx]
    kind = draw(st.sampled_from(["n", "range", "range_step", "equal_step", "star_step", "n_step"]))
    if kind == "star_step":
        return f"*/{draw(st.integers(1, high - low + 3))}"
    a, ta = draw(values(idx))
    if kind == "n":
        return ta
    step = draw(st.one_of(st.integers(1, 4), st.integers(1, high - low + 3)))
    if kind == "n_step":
        return f"{ta}/{step}"
    if kind == "equal_step":
        return f"{ta}-{ta}/{step}"
    b, tb = draw(values(idx))
    if a > b and not (idx == 5 and b == 0):
        (a, ta), (b, tb) = (b, tb), (a, ta)
    return f"{ta}-{tb}/{step}" if kind == "range_step" else f"{ta}-{tb}"


@st.composite
def fields(draw, idx: int) -> str:
    if draw(st.integers(0, 3)) == 0:
        return "*"
    return ",".join(draw(st.lists(items(idx), min_size=1, max_size=3)))


@st.composite
def expressions(draw) -> str:
    with_seconds = draw(st.integers(0, 4)) == 0
    parts = [draw(fields(i)) for i in range(0 if with_seconds else 1, 6)]
    return " ".join(parts)


starts = st.datetimes(min_value=datetime(1995, 1, 1), max_value=datetime(2040, 1, 1)).map(
    lambda d: d.replace(microsecond=0)
)


@settings(max_examples=200, deadline=None)
@given(expr=expressions(), start=starts)
@example(expr="5-5/10 * * * *", start=datetime(2025, 1, 1))
@example(expr="0 2-2/3 * * *", start=datetime(2025, 1, 1))
@example(expr="0 0 10-10/5 * *", start=datetime(2025, 1, 1))
@example(expr="0 0 1 3-3/4 *", start=datetime(2025, 1, 1))
@example(expr="0 0 * * MON-MON/2", start=datetime(2025, 1, 1))
@example(expr="7-7/20 * * * * *", start=datetime(2025, 1, 1))
@example(expr="0 0 * * FRI-SUN", start=datetime(2025, 1, 1))
@example(expr="0 12 1-1/3,15 * sat-sun", start=datetime(2025, 1, 1))
def test_fire_times_match_the_reference(expr, start):
    until = start + WINDOW
    ref = RefCron(expr)
    expected = []
    for t in ref.fires(start, until):
        expected.append(t.replace(tzinfo=UTC))
        if len(expected) == LIMIT:
            break
    spec = RuleSpec(kind=RuleKind.CRON, expression=expr, time_zone="UTC", start=start.replace(tzinfo=UTC))
    try:
        rec = compile_rule(spec)
    except RuleError as e:  # a day-of-month no month in the field has: nothing in the window
        assert e.reason == "RULE_NEVER_FIRES", e
        assert expected == []
        return
    got = []
    for o in rec.iter_after(start.replace(tzinfo=UTC)):
        if o.fire_time >= until.replace(tzinfo=UTC) or len(got) == LIMIT:
            break
        assert not o.skipped_dst_gap
        assert o.note.startswith("day-of-month OR day-of-week") if ref.day_or else o.note == ""
        got.append(o.fire_time)
    assert got == expected
    assert [o.fire_time for o in rec.preview(start.replace(tzinfo=UTC), len(expected))] == expected
