"""Shared helpers of the RRULE reference tests: how Gnomon's occurrences are compiled, read and
compared with the brute-force reference's events (tests/gnomon_rrule_reference.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gnomon.common.time import DstFold, DstGap, Occurrence, RuleKind, RuleSpec, compile_rule
from gnomon_rrule_reference import Event

NY = "America/New_York"
ZONES = ["UTC", NY, "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran"]
Key = tuple[datetime, bool, datetime, timedelta | None]


def U(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    """An aware UTC datetime."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def key_of(o: Occurrence) -> Key:
    """What is compared: instant, skip marker, local wall time and its offset (not the note text)."""
    return (o.fire_time, o.skipped_dst_gap, o.local_time.replace(tzinfo=None), o.local_time.utcoffset())


def event_key(e: Event) -> Key:
    return (e.fire, e.skipped, e.wall, e.offset)


def compiled(expr: str, zone: str = "UTC", fold: DstFold = DstFold.FIRST, gap: DstGap = DstGap.SHIFT_FORWARD):
    return compile_rule(RuleSpec(RuleKind.RRULE, expr, time_zone=zone, dst_fold=fold, dst_gap=gap))


def fires(expr: str, after: datetime, n: int = 10, **kw) -> list[datetime]:
    return [o.fire_time for o in compiled(expr, **kw).preview(after, n, include_skipped=False)]
