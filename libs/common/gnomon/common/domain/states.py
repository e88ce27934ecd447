"""Job and attempt states (docs/concepts.md, "The life of a job") and the legal job transitions.

States are stored in ``jobs.state`` / ``attempts.state`` as these strings (the enum values equal the
stored text, so the database and the wire are unchanged); the public API maps them to
``gnomon.v1.JobState`` / ``gnomon.v1.AttemptState``.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    """The lifecycle state of a job (``jobs.state``; ``gnomon.v1.JobState`` without the prefix).

    ``FAILED`` and ``SKIPPED`` are **reserved: never written**. The design's ``FAILED`` is the
    instant a failed attempt is judged; the judgement
    (:func:`gnomon.common.domain.transitions.after_failure`) is applied in the same transaction as the
    result, so the job goes straight on to ``SCHEDULED`` (retry), ``DEAD`` (DLQ) or ``CANCELLED`` and
    ``FAILED`` is never stored (the *attempt* is stored ``FAILED``). A run skipped by a schedule's
    overlap or misfire policy is decided before any job exists, so it is recorded as an occurrence
    decision (:class:`OccurrenceDecision` ``SKIPPED_*``), not as a ``SKIPPED`` job. Both stay in the
    contract (removing an enum value breaks ``buf breaking``) and in :data:`TERMINAL`, but no move in
    :data:`TRANSITIONS` leads to either.
    """

    SCHEDULED = "SCHEDULED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # reserved, never written (see the class docstring)
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"
    SKIPPED = "SKIPPED"  # reserved, never written (see the class docstring)


class AttemptState(enum.StrEnum):
    """The state of one attempt (``attempts.state``; ``gnomon.v1.AttemptState`` without the prefix)."""

    QUEUED = "QUEUED"  # claimed (in the outbox), not yet accepted
    RUNNING = "RUNNING"  # accepted by a worker, lease held
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"  # lease expired or start_to_close exceeded (reaper): outcome unknown
    CANCELLED = "CANCELLED"  # the job was cancelled before a worker accepted the attempt


class CancelOutcome(enum.StrEnum):
    """What a cancel did (:func:`gnomon.common.storage.cancel.cancel_job`; ``gnomon.v1.CancelOutcome``
    without its ``CANCEL_OUTCOME_`` prefix)."""

    CANCELLED = "CANCELLED"  # the job was SCHEDULED or QUEUED and is now CANCELLED
    CANCEL_REQUESTED = "CANCEL_REQUESTED"  # the job is RUNNING: its worker is asked to stop
    ALREADY_FINISHED = "ALREADY_FINISHED"  # the job was terminal: nothing changed


#: Every job state, in the order of the contract's enum numbers.
JOB_STATES: tuple[JobState, ...] = tuple(JobState)
#: States a job never leaves.
TERMINAL: frozenset[JobState] = frozenset(
    {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.DEAD,
        JobState.CANCELLED,
        JobState.EXPIRED,
        JobState.SKIPPED,
    }
)
#: States that make a schedule's occurrence "active" for its overlap policy.
ACTIVE: tuple[JobState, ...] = (JobState.SCHEDULED, JobState.QUEUED, JobState.RUNNING)

#: job state -> states it may move to (docs/concepts.md, "The life of a job"). Every transition bumps ``version``.
#: The reserved ``FAILED`` and ``SKIPPED`` are never written, so no move leads to them.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.SCHEDULED: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.EXPIRED}),
    JobState.QUEUED: frozenset(
        {JobState.RUNNING, JobState.SCHEDULED, JobState.CANCELLED, JobState.EXPIRED, JobState.DEAD}
    ),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.SCHEDULED, JobState.DEAD, JobState.CANCELLED}),
}


def is_legal(src: str, dst: str) -> bool:
    """True if a job may move from state ``src`` to ``dst`` (either a :class:`JobState` or its text)."""
    try:
        state = JobState(src)
    except ValueError:
        return False
    return dst in TRANSITIONS.get(state, frozenset())
