"""The job: a create request (:class:`NewJob`), its ``jobs`` row built in one place
(:func:`job_row`), its shard, the retry policy's column form, and the deterministic identity of a
schedule's occurrence (docs/concepts.md, "Vocabulary", "occurrence"; invariant 5).

Pure: no I/O. Spans are stored in whole milliseconds (``*_ms`` columns); instants are UTC-aware.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypedDict

from gnomon.common.domain.states import JobState
from gnomon.common.retry import DEFAULT_POLICY, RetryPolicy


class RetryColumns(TypedDict):
    """The ``jobs`` (and ``schedules``) columns storing a retry policy: spans in ms, the multiplier and
    jitter as floats, ``non_retryable_errors`` as a JSON list of error type names (or None)."""

    retry_initial_ms: int
    retry_max_ms: int
    retry_multiplier: float
    retry_jitter: float
    max_age_ms: int | None
    non_retryable_errors: str | None


def policy_columns(p: RetryPolicy) -> RetryColumns:
    """The column form of retry policy ``p`` (seconds rounded to whole milliseconds)."""
    return RetryColumns(
        retry_initial_ms=round(p.initial_s * 1000),
        retry_max_ms=round(p.max_s * 1000),
        retry_multiplier=float(p.multiplier),
        retry_jitter=float(p.jitter),
        max_age_ms=None if p.max_age_s is None else round(p.max_age_s * 1000),
        non_retryable_errors=json.dumps(list(p.non_retryable_errors)) if p.non_retryable_errors else None,
    )


def retry_columns_of(row: Mapping[Any, Any]) -> RetryColumns:
    """The retry columns of a ``jobs`` or ``schedules`` row, copied as stored."""
    return RetryColumns(
        retry_initial_ms=row["retry_initial_ms"],
        retry_max_ms=row["retry_max_ms"],
        retry_multiplier=row["retry_multiplier"],
        retry_jitter=row["retry_jitter"],
        max_age_ms=row["max_age_ms"],
        non_retryable_errors=row["non_retryable_errors"],
    )


def policy_of(row: Mapping[Any, Any]) -> RetryPolicy:
    """The retry policy stored on a ``jobs`` or ``schedules`` row (a mapping with the retry columns)."""
    names = row["non_retryable_errors"]
    return RetryPolicy(
        initial_s=row["retry_initial_ms"] / 1000,
        max_s=row["retry_max_ms"] / 1000,
        multiplier=row["retry_multiplier"],
        jitter=row["retry_jitter"],
        max_age_s=None if row["max_age_ms"] is None else row["max_age_ms"] / 1000,
        non_retryable_errors=tuple(json.loads(names)) if names else (),
    )


def shard_of(job_id: uuid.UUID, shards: int) -> int:
    """The shard of a job: the first 8 bytes of its UUID, big-endian, mod ``shards`` (> 0)."""
    return int.from_bytes(job_id.bytes[:8], "big") % shards


def ms(d: timedelta | None) -> int | None:
    """A span in whole milliseconds (truncated; None stays None)."""
    return None if d is None else int(d.total_seconds() * 1000)


#: The columns every new job starts with, whoever creates it (API, planner, DLQ replay).
INITIAL_STATE: Final = JobState.SCHEDULED
INITIAL_VERSION: Final = 1
INITIAL_ATTEMPT: Final = 0


class OccurrenceColumns(TypedDict):
    """The ``jobs`` columns of a schedule's occurrence (absent on a one-time job)."""

    schedule_uid: uuid.UUID
    schedule_id: str
    nominal_time: datetime
    coalesced_count: int | None
    coalesced_first: datetime | None
    coalesced_last: datetime | None


class JobRow(TypedDict, total=False):
    """The columns of a new ``jobs`` row (the others take their defaults; ``scheduled_at`` is absent
    when the database computes it from its clock)."""

    id: uuid.UUID
    namespace: str
    region: str
    shard: int
    queue: str
    payload: bytes
    state: str
    version: int
    attempt: int
    scheduled_at: datetime
    deadline: datetime | None
    max_attempts: int
    idempotency_key: str
    lease_ms: int
    request_id: uuid.UUID | None
    request_hash: str | None
    idempotent: bool
    start_to_close_ms: int | None
    retry_initial_ms: int
    retry_max_ms: int
    retry_multiplier: float
    retry_jitter: float
    max_age_ms: int | None
    non_retryable_errors: str | None
    schedule_uid: uuid.UUID
    schedule_id: str
    nominal_time: datetime
    coalesced_count: int | None
    coalesced_first: datetime | None
    coalesced_last: datetime | None
    trace_context: str | None


def job_row(
    *,
    id: uuid.UUID,
    namespace: str,
    region: str,
    shard: int,
    queue: str,
    payload: bytes,
    deadline: datetime | None,
    max_attempts: int,
    idempotency_key: str,
    lease_ms: int,
    idempotent: bool,
    start_to_close_ms: int | None,
    retry: RetryColumns,
    scheduled_at: datetime | None = None,
    request_id: uuid.UUID | None = None,
    request_hash: str | None = None,
    occurrence: OccurrenceColumns | None = None,
    trace_context: str | None = None,
) -> JobRow:
    """The one builder of a new ``jobs`` row: state SCHEDULED, version 1, attempt 0, the given
    fields, the retry columns and, for an occurrence, its columns. ``scheduled_at`` None leaves the
    column out (the INSERT computes it from the database clock). ``trace_context``: the stored W3C
    context of the job's create span (:mod:`gnomon.common.tracing`), None when not traced."""
    row = JobRow(
        id=id,
        namespace=namespace,
        region=region,
        shard=shard,
        queue=queue,
        payload=payload,
        state=INITIAL_STATE,
        version=INITIAL_VERSION,
        attempt=INITIAL_ATTEMPT,
        deadline=deadline,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        lease_ms=lease_ms,
        request_id=request_id,
        request_hash=request_hash,
        idempotent=idempotent,
        start_to_close_ms=start_to_close_ms,
        retry_initial_ms=retry["retry_initial_ms"],
        retry_max_ms=retry["retry_max_ms"],
        retry_multiplier=retry["retry_multiplier"],
        retry_jitter=retry["retry_jitter"],
        max_age_ms=retry["max_age_ms"],
        non_retryable_errors=retry["non_retryable_errors"],
        trace_context=trace_context,
    )
    if scheduled_at is not None:
        row["scheduled_at"] = scheduled_at
    if occurrence is not None:
        row["schedule_uid"] = occurrence["schedule_uid"]
        row["schedule_id"] = occurrence["schedule_id"]
        row["nominal_time"] = occurrence["nominal_time"]
        row["coalesced_count"] = occurrence["coalesced_count"]
        row["coalesced_first"] = occurrence["coalesced_first"]
        row["coalesced_last"] = occurrence["coalesced_last"]
    return row


@dataclass(frozen=True)
class NewJob:
    """A validated create request. ``schedule_at`` (UTC instant) and ``delay`` are mutually exclusive;
    both ``None`` means "now" by the database clock. ``lease`` is the per-attempt lease duration."""

    id: uuid.UUID
    namespace: str
    region: str
    shard: int
    queue: str
    payload: bytes
    schedule_at: datetime | None
    delay: timedelta | None
    deadline: datetime | None
    max_attempts: int
    idempotency_key: str
    lease: timedelta
    request_id: uuid.UUID | None
    request_hash: str | None
    idempotent: bool = False
    retry: RetryPolicy = DEFAULT_POLICY
    start_to_close: timedelta | None = None
    #: The stored W3C context of the job's create span (:mod:`gnomon.common.tracing`); None: not traced.
    trace_context: str | None = None

    def row(self) -> JobRow:
        """Its ``jobs`` row without ``scheduled_at`` (the INSERT computes it: ``schedule_at`` or
        ``now() + delay`` by the database clock)."""
        return job_row(
            id=self.id,
            namespace=self.namespace,
            region=self.region,
            shard=self.shard,
            queue=self.queue,
            payload=self.payload,
            deadline=self.deadline,
            max_attempts=self.max_attempts,
            idempotency_key=self.idempotency_key,
            lease_ms=int(self.lease.total_seconds() * 1000),
            idempotent=self.idempotent,
            start_to_close_ms=ms(self.start_to_close),
            retry=policy_columns(self.retry),
            request_id=self.request_id,
            request_hash=self.request_hash,
            trace_context=self.trace_context,
        )


#: A COALESCE catch-up run's ``(count, first, last)`` missed nominal times.
Coalesced = tuple[int | None, datetime | None, datetime | None]


def occurrence_job_id(uid: uuid.UUID, nominal: datetime) -> uuid.UUID:
    """The deterministic job id of the occurrence of schedule ``uid`` at ``nominal`` (UTC instant):
    UUIDv5 (RFC 4122) in the schedule's uid namespace of the RFC 3339 instant with microseconds."""
    return uuid.uuid5(uid, nominal.astimezone(UTC).isoformat(timespec="microseconds"))


def occurrence_row(
    sched: Mapping[Any, Any],
    nominal: datetime,
    scheduled_at: datetime,
    *,
    shards: int,
    coalesced: Coalesced | None = None,
) -> JobRow:
    """The ``jobs`` row of the occurrence of ``sched`` (a ``schedules`` row) at ``nominal``, eligible
    from ``scheduled_at``; ``coalesced`` = ``(count, first, last)`` for a COALESCE catch-up run. Its
    id is :func:`occurrence_job_id`; its deadline is ``nominal + start_deadline_ms`` if set."""
    job_id = occurrence_job_id(sched["uid"], nominal)
    deadline = (
        None
        if sched["start_deadline_ms"] is None
        else nominal + timedelta(milliseconds=sched["start_deadline_ms"])
    )
    count, first, last = coalesced or (None, None, None)
    return job_row(
        id=job_id,
        namespace=sched["namespace"],
        region=sched["region"],
        shard=shard_of(job_id, shards),
        queue=sched["queue"],
        payload=sched["payload"],
        scheduled_at=scheduled_at,
        deadline=deadline,
        max_attempts=sched["max_attempts"],
        # unique per schedule incarnation: a schedule deleted and created again under the same id
        # gets new keys (its uid differs), so a consumer never mistakes one run for another
        idempotency_key=f"{sched['schedule_id']}.{sched['uid'].hex[:12]}@"
        f"{nominal.astimezone(UTC).isoformat(timespec='microseconds')}",
        lease_ms=sched["lease_ms"],
        idempotent=sched["idempotent"],
        start_to_close_ms=sched["start_to_close_ms"],
        retry=retry_columns_of(sched),
        occurrence=OccurrenceColumns(
            schedule_uid=sched["uid"],
            schedule_id=sched["schedule_id"],
            nominal_time=nominal,
            coalesced_count=count,
            coalesced_first=first,
            coalesced_last=last,
        ),
    )


def jitter_of(uid: uuid.UUID, nominal: datetime, jitter_ms: int) -> timedelta:
    """Deterministic delay in ``[0, jitter_ms)`` ms for one occurrence (sha256 of uid + instant); 0 if no jitter."""
    if jitter_ms <= 0:
        return timedelta(0)
    h = hashlib.sha256(uid.bytes + nominal.isoformat().encode()).digest()
    return timedelta(milliseconds=int.from_bytes(h[:8], "big") % jitter_ms)
