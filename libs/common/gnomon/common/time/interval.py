"""INTERVAL rules: pure UTC arithmetic T0 + k*i (an elapsed-time rule; local time only for display)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, tzinfo

from .errors import RuleError
from .localize import FIRST_PASS, SECOND_PASS
from .model import Occurrence
from .zones import UTC

MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=366)


def check_interval(interval: object) -> timedelta:
    """Validate an interval: a whole number of seconds, 1 s <= interval <= 366 days.

    Raises:
        RuleError: ``INVALID_INTERVAL`` (field ``interval``).
    """
    if not isinstance(interval, timedelta):
        raise RuleError("INVALID_INTERVAL", "interval", "an INTERVAL rule needs interval (a duration)")
    if interval < MIN_INTERVAL or interval > MAX_INTERVAL:
        raise RuleError(
            "INVALID_INTERVAL", "interval", f"interval {interval} must be between 1 s and 366 days"
        )
    if interval.microseconds:
        raise RuleError("INVALID_INTERVAL", "interval", f"interval {interval} must be whole seconds")
    return interval


def occurrences(
    anchor: datetime, interval: timedelta, zone: tzinfo, after: datetime, end: datetime | None
) -> Iterator[Occurrence]:
    """``anchor + k*interval`` (k >= 0) strictly after ``after`` and not after ``end``; all naive
    UTC in, aware out. Local time is ``astimezone(zone)``; a fold gets first/second-pass notes."""
    step = int(interval.total_seconds())
    k = 0 if after < anchor else int((after - anchor).total_seconds()) // step + 1
    t = anchor + timedelta(seconds=k * step)
    while t <= after:  # guard sub-second `after`
        t += interval
    while end is None or t <= end:
        fire = t.replace(tzinfo=UTC)
        local = fire.astimezone(zone)
        note = ""
        if local.fold:
            note = SECOND_PASS
        elif local.replace(fold=1).utcoffset() != local.utcoffset():
            note = FIRST_PASS
        yield Occurrence(fire, local, note, False)
        t += interval
