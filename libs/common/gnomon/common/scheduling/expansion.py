"""Expanding a compiled rule into nominal fire times: the one place the planner's steps, the API's
TriggerSchedule/BackfillSchedule/PreviewSchedule and schedule creation and updates read a rule.

Pure functions over :class:`gnomon.common.time.Recurrence` (no I/O). Instants are UTC-aware
datetimes; skip markers (wall times inside a DST gap, ``skipped_dst_gap``) are returned like other
occurrences, callers decide what they mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gnomon.common.errors import FieldViolation, InvalidArgument
from gnomon.common.time import Occurrence, Recurrence


def first_after(rec: Recurrence, after: datetime) -> datetime | None:
    """The first nominal time (skip markers included) strictly after ``after``; None when the rule
    has no more."""
    return next((o.fire_time for o in rec.iter_after(after)), None)


@dataclass(frozen=True)
class Window:
    """Occurrences of one planning window: ``occurrences`` (nominal order), ``next`` (the first one
    not taken, None when the rule is exhausted) and ``capped`` (the window was cut at ``limit``)."""

    occurrences: list[Occurrence]
    next: Occurrence | None
    capped: bool


def window(rec: Recurrence, after: datetime, *, through: datetime, limit: int) -> Window:
    """The occurrences strictly after ``after`` and at or before ``through``, at most ``limit`` of
    them (the planner's step; ``limit`` >= 1)."""
    occs: list[Occurrence] = []
    for o in rec.iter_after(after):
        if o.fire_time > through:
            return Window(occs, o, False)
        if len(occs) >= limit:
            return Window(occs, o, True)
        occs.append(o)
    return Window(occs, None, False)


def in_range(rec: Recurrence, start: datetime, end: datetime, *, limit: int) -> list[Occurrence]:
    """The occurrences in ``[start, end)`` (a backfill's range). Raises :class:`InvalidArgument` on
    ``end_time`` when there are more than ``limit``."""
    occs: list[Occurrence] = []
    for o in rec.iter_after(start - timedelta(microseconds=1)):
        if o.fire_time >= end:
            break
        if len(occs) == limit:
            raise InvalidArgument(
                [FieldViolation("end_time", f"the range holds more than {limit} fire times; split it")]
            )
        occs.append(o)
    return occs


def preview(rec: Recurrence, after: datetime, count: int) -> list[Occurrence]:
    """The next ``count`` firing occurrences strictly after ``after``, with the skip markers among them
    listed but not counted (at most ``3 * count + 10`` items in all); fewer when the rule ends or its
    times run past year 9999."""
    items: list[Occurrence] = []
    fired = 0
    try:
        for o in rec.iter_after(after):
            items.append(o)
            fired += not o.skipped_dst_gap
            if fired == count or len(items) >= 3 * count + 10:
                break
    except OverflowError:  # the rule's times run past year 9999
        pass
    return items
