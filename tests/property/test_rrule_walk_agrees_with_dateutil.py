"""Gnomon's own period walk (``gnomon.common.time.rrule_expand``) against dateutil's ``rrule``.

Gnomon walks RRULE periods itself so that a search is bounded and the first WEEKLY period is a
whole week; on every rule where dateutil is right (no BYSETPOS over a partial first week) the two
must give the same wall times. dateutil here is an independent reference of the RFC 5545
expand/limit table; the hand-written brute-force reference lives in test_rrule_reference_*.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from dateutil import rrule as du
from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.common.time.rrule import parse_rrule
from gnomon.common.time.rrule_expand import walls
from gnomon.common.time.zones import get_zone

FREQS = ["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY"]
DAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


def _part(name: str, values: list) -> str:
    return f";{name}=" + ",".join(str(v) for v in values) if values else ""


@st.composite
def rules(draw) -> tuple[str, datetime]:
    freq = draw(st.sampled_from(FREQS))
    parts = f"FREQ={freq};INTERVAL={draw(st.integers(1, 4))}"
    if draw(st.booleans()):
        parts += _part("BYMONTH", draw(st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True)))
    if freq != "WEEKLY" and draw(st.booleans()):
        md = st.one_of(st.integers(1, 31), st.integers(-31, -1))
        parts += _part("BYMONTHDAY", draw(st.lists(md, min_size=1, max_size=3, unique=True)))
    if draw(st.booleans()):
        days = draw(st.lists(st.sampled_from(DAYS), min_size=1, max_size=3, unique=True))
        if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
            days = [f"{draw(st.sampled_from([1, 2, -1, 3]))}{d}" for d in days]
        parts += _part("BYDAY", days)
    if freq == "YEARLY" and draw(st.booleans()):
        parts += _part("BYWEEKNO", draw(st.lists(st.integers(1, 53), min_size=1, max_size=2, unique=True)))
    if freq in ("YEARLY", "HOURLY", "MINUTELY", "SECONDLY") and draw(st.booleans()):
        yd = st.one_of(st.integers(1, 366), st.integers(-366, -1))
        parts += _part("BYYEARDAY", draw(st.lists(yd, min_size=1, max_size=3, unique=True)))
    if freq != "MINUTELY" and draw(st.booleans()):
        parts += _part("BYHOUR", draw(st.lists(st.integers(0, 23), min_size=1, max_size=3, unique=True)))
    if draw(st.booleans()):
        parts += _part(
            "BYMINUTE", draw(st.lists(st.sampled_from([0, 15, 30, 45]), min_size=1, max_size=2, unique=True))
        )
    if freq in ("MINUTELY", "SECONDLY") and draw(st.booleans()):
        parts += _part(
            "BYSECOND", draw(st.lists(st.sampled_from([0, 10, 30, 45]), min_size=1, max_size=3, unique=True))
        )
    if freq != "WEEKLY" and draw(st.booleans()):  # dateutil's first week is partial: see test_rrule_periods
        parts += _part(
            "BYSETPOS",
            draw(st.lists(st.sampled_from([1, 2, -1, -2, 3]), min_size=1, max_size=2, unique=True)),
        )
    if draw(st.booleans()):
        parts += f";WKST={draw(st.sampled_from(DAYS))}"
    start = datetime(2019, 1, 1) + timedelta(minutes=15 * draw(st.integers(0, 4 * 24 * 800)))
    return parts, start


@settings(max_examples=300, deadline=None)
@given(rules())
def test_the_period_walk_gives_dateutils_times(rule):
    text, dtstart = rule
    utc = get_zone("UTC")
    try:
        plan = parse_rrule(f"DTSTART:{dtstart:%Y%m%dT%H%M%S}\nRRULE:{text}", utc, "UTC", None)
    except ValueError:
        return  # refused (never fires / too expensive): covered by the refusal tests
    assert plan.filters is not None
    last = dtstart + timedelta(days=3 * 366)
    ours = list(itertools.islice(walls(plan.filters, dtstart, last), 60))
    kw = {k: v for k, v in plan.kwargs.items() if k != "until"}
    theirs = list(itertools.islice(du.rrule(dtstart=dtstart, until=last, **kw), 60))
    assert ours == theirs, text
