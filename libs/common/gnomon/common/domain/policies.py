"""Schedule policies and planner decisions (docs/concepts.md, "Vocabulary": misfire policy, overlap policy; the
contract's ``gnomon.v1.MisfirePolicy``, ``OverlapPolicy``, ``DstGapPolicy``, ``DstFoldPolicy``,
``OccurrenceDecision`` and ``OccurrenceSource`` without their prefixes). Values equal the text stored
in ``schedules`` and ``schedule_occurrences``, so the database and the wire are unchanged.
"""

from __future__ import annotations

import enum

from gnomon.common.time.model import DstFold, DstGap

__all__ = [
    "BreakerState",
    "DstFold",
    "DstGap",
    "MisfirePolicy",
    "OccurrenceDecision",
    "OccurrenceSource",
    "OverlapAction",
    "OverlapPolicy",
]


class MisfirePolicy(enum.StrEnum):
    """What a schedule does with occurrences missed while nothing could plan them
    (``gnomon.common.scheduling.misfire``; docs/schedules.md#misfire)."""

    RUN_LATEST = "RUN_LATEST"  # the latest missed one runs late, the rest are skipped (default)
    SKIP = "SKIP"  # none runs
    COALESCE = "COALESCE"  # one run stands for all of them (count and range carried)
    RUN_ALL = "RUN_ALL"  # the latest ``max_catchup`` run


class OverlapPolicy(enum.StrEnum):
    """What a schedule does when a run comes due while earlier occurrences are still active
    (``gnomon.common.scheduling.overlap``; docs/schedules.md#overlap)."""

    ALLOW = "ALLOW"
    SKIP = "SKIP"  # default
    BUFFER_ONE = "BUFFER_ONE"
    BUFFER_ALL = "BUFFER_ALL"
    CANCEL_OTHER = "CANCEL_OTHER"


class OverlapAction(enum.StrEnum):
    """The overlap policy's verdict on one due run (:func:`gnomon.common.scheduling.overlap.decide`)."""

    CREATE = "CREATE"
    BUFFER = "BUFFER"
    SKIP = "SKIP"
    CANCEL_AND_CREATE = "CANCEL_AND_CREATE"


class OccurrenceDecision(enum.StrEnum):
    """The planner's recorded decision on one nominal fire time (``schedule_occurrences.decision``)."""

    FIRED = "FIRED"  # a job was created on time
    LATE = "LATE"  # a job was created late (within the grace, or a catch-up run)
    COALESCED = "COALESCED"  # one catch-up job for several missed times
    BUFFERED = "BUFFERED"  # waits for the active occurrence to finish (BUFFER_* overlap policies)
    SKIPPED_OVERLAP = "SKIPPED_OVERLAP"
    SKIPPED_MISFIRE = "SKIPPED_MISFIRE"
    SKIPPED_DST_GAP = "SKIPPED_DST_GAP"
    SKIPPED_PAUSED = "SKIPPED_PAUSED"
    DEDUPLICATED = "DEDUPLICATED"  # a trigger or backfill of a time that already has an occurrence
    SKIPPED_QUOTA = "SKIPPED_QUOTA"  # not run: the namespace was at max_pending_jobs (for good)


class OccurrenceSource(enum.StrEnum):
    """What asked for an occurrence (``schedule_occurrences.source``)."""

    RULE = "RULE"  # the recurrence rule, planned by the planner
    TRIGGER = "TRIGGER"  # TriggerSchedule
    BACKFILL = "BACKFILL"  # BackfillSchedule


class BreakerState(enum.StrEnum):
    """A queue's circuit breaker (``queue_state.state``; docs/guarantees.md, "Retries, the retry
    budget and the circuit breaker"). ``ANY`` is not stored: a claim passes it to ignore the breaker."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"
