"""The value types of the recurrence engine: rule kinds, DST policies, the rule spec, occurrences."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta


class RuleKind(enum.StrEnum):
    """Which grammar ``RuleSpec.expression`` / ``RuleSpec.interval`` is in."""

    CRON = "CRON"  # crontab(5) 5 fields, or 6 with seconds first; macros; Quartz L W # ?
    RRULE = "RRULE"  # RFC 5545 RRULE (+ RDATE, EXDATE, DTSTART)
    INTERVAL = "INTERVAL"  # fixed elapsed period from an anchor instant


class DstGap(enum.StrEnum):
    """What a *pinned* rule does with a local wall time that does not exist (spring forward)."""

    SHIFT_FORWARD = "SHIFT_FORWARD"  # fire at the first valid instant after the gap (the transition)
    SKIP = "SKIP"  # do not fire; a skip marker is reported


class DstFold(enum.StrEnum):
    """What a *pinned* rule does with a local wall time that happens twice (fall back)."""

    FIRST = "FIRST"  # only the first pass (fold=0, the earlier UTC instant)
    SECOND = "SECOND"  # only the second pass (fold=1)
    BOTH = "BOTH"  # both passes, in UTC order


@dataclass(frozen=True)
class RuleSpec:
    """A recurrence rule as stored on a schedule.

    Attributes:
        kind: the grammar of the rule.
        expression: CRON: the cron text. RRULE: RFC 5545 text, either a bare ``FREQ=...;...`` line
            or lines ``RRULE:...``, ``RDATE:...``, ``EXDATE:...`` and optionally
            ``DTSTART[;TZID=...]:...`` (a TZID must equal ``time_zone``). Unused for INTERVAL.
        interval: INTERVAL only: whole seconds, 1 s <= interval <= 366 days.
        time_zone: IANA zone name the rule's wall times are in (evaluated at generation time).
        start: UTC instant (naive is read as UTC). INTERVAL: the anchor T0 (required; fires T0,
            T0+i, ...; truncated to the second). RRULE: DTSTART when the text has none (converted
            to local wall time); with a text DTSTART it is only a lower bound. CRON: no occurrence
            before it.
        end: UTC instant; no occurrence after it (inclusive bound).
        dst_gap / dst_fold: DST policies for pinned rules (see docs/time.md).
    """

    kind: RuleKind
    expression: str = ""
    interval: timedelta | None = None
    time_zone: str = "UTC"
    start: datetime | None = None
    end: datetime | None = None
    dst_gap: DstGap = DstGap.SHIFT_FORWARD
    dst_fold: DstFold = DstFold.FIRST


@dataclass(frozen=True)
class Occurrence:
    """One nominal fire time of a rule.

    Attributes:
        fire_time: UTC-aware instant (``tzinfo=timezone.utc``), whole seconds.
        local_time: the same instant as aware wall time in ``ZoneInfo(time_zone)`` with ``fold``
            set; for a skip marker the non-existent wall time itself (fold=0).
        note: ``""`` or annotations joined by ``"; "`` (DST gap/fold handling, POSIX day OR).
        skipped_dst_gap: True for a skip marker: a nominal wall time inside a DST gap that does not
            fire; its ``fire_time`` is where zoneinfo maps the wall time with fold=0 (after the gap).
    """

    fire_time: datetime
    local_time: datetime
    note: str
    skipped_dst_gap: bool = False
