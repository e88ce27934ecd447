"""Attempt identity and the messages of the lease protocol's data plane (docs/concepts.md, "The worker lease protocol").

An attempt is identified **once**, by :class:`AttemptId` ``(job_id, attempt)``: the primary key of the
``attempts`` row (a QUEUED attempt row is also the outbox record: there is no separate outbox table). What a worker echoes adds the ``version`` and fencing ``token`` it
was dispatched under (:class:`AttemptKey`); a dispatched attempt (:class:`Claimed`) and a worker's
report (:class:`Result`) carry that key. ``AttemptId`` is a named tuple, so it equals (and hashes as)
the plain ``(job_id, attempt)`` tuple results are keyed by.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, TypedDict

from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.states import JobState


class AttemptId(NamedTuple):
    """One attempt of one job: ``attempt`` is 1-based (the n-th dispatch of ``job_id``)."""

    job_id: uuid.UUID
    attempt: int


@dataclass(frozen=True)
class AttemptKey:
    """What a worker echoes: the attempt as dispatched, with the job ``version`` and the fencing
    ``token`` it was claimed under (a stale one is refused, docs/concepts.md, "The life of a job")."""

    job_id: uuid.UUID
    attempt: int
    version: int
    token: int

    @property
    def id(self) -> AttemptId:
        """The attempt's identity without version and token."""
        return AttemptId(self.job_id, self.attempt)


class OccurrenceInfo(TypedDict):
    """The occurrence columns of a job made by a schedule (``jobs`` row): the schedule's id, the
    nominal fire time (UTC) and, for a COALESCE catch-up run, how many missed times it stands for and
    the first and last of them (else None)."""

    schedule_id: str
    nominal_time: datetime
    coalesced_count: int | None
    coalesced_first: datetime | None
    coalesced_last: datetime | None


@dataclass(frozen=True)
class Claimed:
    """One dispatched attempt, ready to be sent to a worker. Instants are UTC-aware (database clock);
    ``lease_ms`` / ``start_to_close_ms`` are milliseconds."""

    job_id: uuid.UUID
    namespace: str
    shard: int
    queue: str
    payload: bytes
    version: int
    attempt: int
    token: int
    idempotency_key: str
    scheduled_at: datetime
    deadline: datetime | None
    max_attempts: int
    lease_ms: int
    lease_expires_at: datetime
    dispatched_at: datetime
    #: Latest progress checkpoint saved by an earlier attempt (see ``storage.checkpoints``), or None.
    checkpoint: bytes | None = None
    #: The job's start-to-close bound in ms, or None.
    start_to_close_ms: int | None = None
    #: For an occurrence of a schedule: its :class:`OccurrenceInfo`; None for a one-time job.
    occurrence: OccurrenceInfo | None = None
    #: The job's stored W3C trace context (``jobs.trace_context``, see :mod:`gnomon.common.tracing`);
    #: None when the job is not traced.
    trace_context: str | None = None

    @property
    def id(self) -> AttemptId:
        """The attempt's identity."""
        return AttemptId(self.job_id, self.attempt)

    @property
    def key(self) -> AttemptKey:
        """The key a worker echoes for this attempt."""
        return AttemptKey(self.job_id, self.attempt, self.version, self.token)


@dataclass(frozen=True)
class Result:
    """A worker's report: ``succeeded`` or a failure with ``failure_class``, ``error`` text and, for
    THROTTLED, ``retry_after_s`` (seconds). ``owner`` and ``worker_id``: the principal and worker
    reporting it (they must be the ones that accepted the attempt; owner None skips the check, for
    in-process callers)."""

    key: AttemptKey
    succeeded: bool
    failure_class: FailureClass | str = FailureClass.TRANSIENT
    error: str = ""
    retry_after_s: float = 0.0
    owner: str | None = None
    worker_id: str | None = None


@dataclass(frozen=True)
class Reaped:
    """What happened to one job whose running attempt the reaper found lost: ``new_state`` is
    SCHEDULED (retry), DEAD or CANCELLED; ``namespace``, ``queue`` and ``trace_context`` are the
    job's; ``error`` says why the attempt was lost."""

    job_id: uuid.UUID
    attempt: int
    new_state: JobState
    namespace: str = ""
    queue: str = ""
    #: Why the attempt was declared lost (the attempt's ``error``).
    error: str = ""
    #: The job's stored W3C trace context (``jobs.trace_context``), None when not traced.
    trace_context: str | None = None

    @property
    def id(self) -> AttemptId:
        """The attempt's identity."""
        return AttemptId(self.job_id, self.attempt)
