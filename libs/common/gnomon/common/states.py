"""Short names of the job and attempt states (``S.QUEUED``, ``S.A_RUNNING``), kept for the storage
statements that spell them; the states themselves are :class:`gnomon.common.domain.states.JobState`
and :class:`~gnomon.common.domain.states.AttemptState` (values = the stored text).
"""

from __future__ import annotations

from typing import Final

from gnomon.common.domain.states import JOB_STATES, TERMINAL, TRANSITIONS, AttemptState, JobState, is_legal

__all__ = ["JOB_STATES", "TERMINAL", "TRANSITIONS", "AttemptState", "JobState", "is_legal"]

SCHEDULED: Final = JobState.SCHEDULED
QUEUED: Final = JobState.QUEUED
RUNNING: Final = JobState.RUNNING
SUCCEEDED: Final = JobState.SUCCEEDED
FAILED: Final = JobState.FAILED  # reserved: never written (see JobState)
DEAD: Final = JobState.DEAD
CANCELLED: Final = JobState.CANCELLED
EXPIRED: Final = JobState.EXPIRED
SKIPPED: Final = JobState.SKIPPED  # reserved: never written (see JobState)

A_QUEUED: Final = AttemptState.QUEUED
A_RUNNING: Final = AttemptState.RUNNING
A_SUCCEEDED: Final = AttemptState.SUCCEEDED
A_FAILED: Final = AttemptState.FAILED
A_LOST: Final = AttemptState.LOST
A_CANCELLED: Final = AttemptState.CANCELLED
