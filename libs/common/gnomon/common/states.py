"""Job and attempt state names (docs/concepts.md, "The life of a job") and the legal job transitions.

States are stored as these strings; the public API maps them to ``gnomon.v1.JobState``.
"""

from __future__ import annotations

SCHEDULED = "SCHEDULED"
QUEUED = "QUEUED"
RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
DEAD = "DEAD"
CANCELLED = "CANCELLED"
EXPIRED = "EXPIRED"
SKIPPED = "SKIPPED"

JOB_STATES = (SCHEDULED, QUEUED, RUNNING, SUCCEEDED, FAILED, DEAD, CANCELLED, EXPIRED, SKIPPED)
TERMINAL = frozenset({SUCCEEDED, FAILED, DEAD, CANCELLED, EXPIRED, SKIPPED})

#: job state -> states it may move to. Every transition bumps ``version``.
TRANSITIONS: dict[str, frozenset[str]] = {
    SCHEDULED: frozenset({QUEUED, CANCELLED, EXPIRED, SKIPPED}),
    QUEUED: frozenset({RUNNING, SCHEDULED, CANCELLED, EXPIRED, DEAD}),
    RUNNING: frozenset({SUCCEEDED, FAILED, SCHEDULED, DEAD, CANCELLED}),
}

# Attempt states.
A_QUEUED = "QUEUED"  # claimed, outbox row written, not yet accepted
A_RUNNING = "RUNNING"  # accepted by a worker, lease held
A_SUCCEEDED = "SUCCEEDED"
A_FAILED = "FAILED"
A_LOST = "LOST"  # lease expired (reaper)
A_CANCELLED = "CANCELLED"  # the job was cancelled before a worker accepted the attempt


def is_legal(src: str, dst: str) -> bool:
    """True if a job may move from ``src`` to ``dst``."""
    return dst in TRANSITIONS.get(src, frozenset())
