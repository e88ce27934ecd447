"""Every resource message -> its model (:mod:`gnomon.sdk.models`), and the retry policy both ways."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    dead_letter_service_pb2,
    job_pb2,
    job_service_pb2,
    queue_service_pb2,
    retry_pb2,
    schedule_pb2,
    schedule_service_pb2,
)

from ..failures import FailureClass
from ..models import (
    AuditEntry,
    DeadLetter,
    DeadLetterAttempt,
    DispatcherInfo,
    Job,
    JobAttempt,
    JobTemplate,
    OutagePrediction,
    PreviewFireTime,
    Queue,
    RateLimit,
    ReplayResult,
    RetryBudgetInfo,
    RetryPolicy,
    Schedule,
    ScheduleOccurrence,
    Shard,
    SkippedOccurrenceRange,
)
from .values import field_duration, field_time, state_name, to_duration

# -- enums ----------------------------------------------------------------------------------------


class EnumType(Protocol):
    """What the SDK needs of a generated protobuf enum type (its ``Name``/``Value``/``items``)."""

    def Name(self, number: int) -> str:
        """The full name of ``number``; ``ValueError`` if unknown."""
        ...

    def Value(self, name: str) -> int:
        """The number of the full ``name``; ``ValueError`` if unknown."""
        ...

    def items(self) -> list[tuple[str, int]]:
        """``(full name, number)`` of every value."""
        ...

    def values(self) -> list[int]:
        """Every number."""
        ...


def enum_text(enum_type: EnumType, prefix: str, value: int) -> str:
    """Enum number -> short name (``MISFIRE_POLICY_COALESCE`` -> ``"COALESCE"``); a number unknown to
    this SDK -> ``"UNKNOWN_<n>"``."""
    try:
        return enum_type.Name(value).removeprefix(prefix)
    except ValueError:
        return f"UNKNOWN_{value}"


# -- resources ------------------------------------------------------------------------------------


def retry_policy_from_proto(msg: retry_pb2.RetryPolicy) -> RetryPolicy:
    """``gnomon.v1.RetryPolicy`` -> :class:`~gnomon.sdk.RetryPolicy` (spans as ``timedelta``)."""
    return RetryPolicy(
        initial_backoff=field_duration(msg, "initial_backoff"),
        max_backoff=field_duration(msg, "max_backoff"),
        multiplier=msg.multiplier or None,
        jitter=msg.jitter if msg.HasField("jitter") else None,
        max_age=field_duration(msg, "max_age"),
        non_retryable_errors=tuple(msg.non_retryable_errors),
    )


_RETRY_KEYS = frozenset(
    {"initial_backoff", "max_backoff", "multiplier", "jitter", "max_age", "non_retryable_errors"}
)


def retry_policy_to_proto(policy: RetryPolicy | Mapping[str, Any]) -> retry_pb2.RetryPolicy:
    """A :class:`~gnomon.sdk.RetryPolicy` or a dict with the same keys -> ``gnomon.v1.RetryPolicy``.

    Raises:
        TypeError: neither a RetryPolicy nor a mapping, or a span of the wrong type.
        ValueError: an unknown key.
    """
    if isinstance(policy, Mapping):
        unknown = set(policy) - _RETRY_KEYS
        if unknown:
            raise ValueError(f"unknown retry policy keys: {sorted(unknown)}")
        policy = RetryPolicy(**policy)
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"retry_policy must be a RetryPolicy or a dict, not {type(policy).__name__}")
    m = retry_pb2.RetryPolicy()
    for name in ("initial_backoff", "max_backoff", "max_age"):
        v = getattr(policy, name)
        if v is not None:
            getattr(m, name).CopyFrom(to_duration(v))
    if policy.multiplier is not None:
        m.multiplier = float(policy.multiplier)
    if policy.jitter is not None:
        m.jitter = float(policy.jitter)
    if isinstance(policy.non_retryable_errors, str):
        raise TypeError("non_retryable_errors must be a list of names, not a string")
    m.non_retryable_errors.extend(policy.non_retryable_errors)
    return m


def job_from_proto(msg: job_pb2.Job) -> Job:
    """``gnomon.v1.Job`` -> :class:`~gnomon.sdk.Job`."""
    t = field_time
    return Job(
        name=msg.name,
        queue=msg.queue,
        payload=bytes(msg.payload),
        state=state_name(msg.state),
        version=msg.version,
        schedule_time=t(msg, "schedule_time"),
        deadline=t(msg, "deadline"),
        max_attempts=msg.max_attempts,
        attempt=msg.attempt,
        idempotency_key=msg.idempotency_key,
        create_time=t(msg, "create_time"),
        dispatch_time=t(msg, "dispatch_time"),
        start_time=t(msg, "start_time"),
        finish_time=t(msg, "finish_time"),
        last_error=msg.last_error,
        region=msg.region,
        request_id=msg.request_id,
        lease_duration=field_duration(msg, "lease_duration"),
        idempotent=msg.idempotent,
        failure_class=FailureClass.from_wire(msg.failure_class),
        retry_policy=retry_policy_from_proto(msg.retry_policy) if msg.HasField("retry_policy") else None,
    )


def job_attempt_from_proto(msg: job_pb2.JobAttempt) -> JobAttempt:
    """``gnomon.v1.JobAttempt`` -> :class:`~gnomon.sdk.JobAttempt` (state ``"LOST"`` ...)."""
    t = field_time
    return JobAttempt(
        name=msg.name,
        attempt=msg.attempt,
        state=enum_text(job_pb2.AttemptState, "ATTEMPT_STATE_", msg.state),
        worker_id=msg.worker_id,
        dispatcher_id=msg.dispatcher_id,
        fencing_token=msg.fencing_token,
        version=msg.version,
        failure_class=FailureClass.from_wire(msg.failure_class),
        error=msg.error,
        claim_time=t(msg, "claim_time"),
        accept_time=t(msg, "accept_time"),
        finish_time=t(msg, "finish_time"),
        lease_expire_time=t(msg, "lease_expire_time"),
        cancel_requested=msg.cancel_requested,
    )


def cancel_outcome(value: int) -> str:
    """``CANCEL_OUTCOME_CANCELLED`` (number) -> ``"CANCELLED"`` (one of
    :data:`~gnomon.sdk.models.CANCEL_OUTCOMES`); unknown -> ``"UNKNOWN_<n>"``."""
    return enum_text(job_service_pb2.CancelOutcome, "CANCEL_OUTCOME_", value)


def dispatcher_from_proto(msg: cluster_service_pb2.Dispatcher) -> DispatcherInfo:
    """``gnomon.v1.Dispatcher`` -> :class:`~gnomon.sdk.DispatcherInfo`."""
    return DispatcherInfo(dispatcher_id=msg.dispatcher_id, region=msg.region, address=msg.address)


def shard_from_proto(msg: cluster_service_pb2.Shard) -> Shard:
    """``gnomon.v1.Shard`` -> :class:`~gnomon.sdk.Shard`."""
    return Shard(
        region=msg.region,
        shard=msg.shard,
        owner=msg.owner,
        fencing_token=msg.fencing_token,
        recorded_token=msg.recorded_token,
        owned=msg.owned,
        acquire_time=field_time(msg, "acquire_time"),
    )


def queue_from_proto(msg: queue_service_pb2.Queue) -> Queue:
    """``gnomon.v1.Queue`` -> :class:`~gnomon.sdk.Queue` (breaker state ``"OPEN"`` ...)."""
    b = msg.retry_budget
    return Queue(
        name=msg.name,
        region=msg.region,
        breaker_state=enum_text(queue_service_pb2.BreakerState, "BREAKER_STATE_", msg.breaker_state),
        opened_time=field_time(msg, "opened_time"),
        breaker_update_time=field_time(msg, "breaker_update_time"),
        failure_ratio=msg.failure_ratio,
        window_results=msg.window_results,
        retry_budget=RetryBudgetInfo(
            used=b.used,
            allowed=b.allowed,
            first_attempts=b.first_attempts,
            window=field_duration(b, "window"),
        ),
        due_jobs=msg.due_jobs,
        due_jobs_truncated=msg.due_jobs_truncated,
        oldest_due_age=field_duration(msg, "oldest_due_age"),
        rate_limit=RateLimit(msg.rate_limit.rate, msg.rate_limit.burst, msg.rate_limit.available)
        if msg.HasField("rate_limit")
        else None,
    )


def dead_letter_from_proto(m: dead_letter_service_pb2.DeadLetter) -> DeadLetter:
    """``gnomon.v1.DeadLetter`` -> :class:`~gnomon.sdk.DeadLetter` (with its attempts)."""
    t = field_time
    return DeadLetter(
        job=job_from_proto(m.job),
        attempts=[
            DeadLetterAttempt(
                attempt=a.attempt,
                state=a.state,
                failure_class=FailureClass.from_wire(a.failure_class),
                error=a.error,
                worker_id=a.worker_id,
                fencing_token=a.fencing_token,
                claim_time=t(a, "claim_time"),
                start_time=t(a, "start_time"),
                finish_time=t(a, "finish_time"),
            )
            for a in m.attempts
        ],
        replay_of=m.replay_of,
        replayed_by=m.replayed_by,
    )


def audit_entry_from_proto(m: dead_letter_service_pb2.AuditEntry) -> AuditEntry:
    """``gnomon.v1.AuditEntry`` -> :class:`~gnomon.sdk.AuditEntry`; ``details`` decoded from JSON
    (``{"raw": text}`` when it is not JSON)."""
    try:
        details = json.loads(m.details) if m.details else {}
    except ValueError:
        details = {"raw": m.details}
    return AuditEntry(
        name=m.name,
        create_time=field_time(m, "create_time"),
        actor=m.actor,
        action=m.action,
        reason=m.reason,
        request_id=m.request_id,
        details=details,
        resource=m.resource,
        outcome=m.outcome,
        peer=m.peer,
        count=m.count or 1,
    )


def replay_result_from_proto(
    m: dead_letter_service_pb2.ReplayDeadLettersResponse, request_id: str
) -> ReplayResult:
    """A ``ReplayDeadLettersResponse`` (and the ``request_id`` sent) -> :class:`~gnomon.sdk.ReplayResult`."""
    return ReplayResult(
        matched=m.matched_count,
        replayed=m.replayed_count,
        job_names=list(m.replayed_jobs),
        dry_run=m.dry_run,
        request_id=request_id,
    )


def template_from_proto(t: schedule_pb2.JobTemplate) -> JobTemplate:
    """``gnomon.v1.JobTemplate`` -> :class:`~gnomon.sdk.JobTemplate`."""
    return JobTemplate(
        queue=t.queue,
        payload=bytes(t.payload),
        max_attempts=t.max_attempts if t.HasField("max_attempts") else None,
        lease_duration=field_duration(t, "lease_duration"),
        idempotent=t.idempotent,
        retry_policy=retry_policy_from_proto(t.retry_policy) if t.HasField("retry_policy") else None,
        start_to_close=field_duration(t, "start_to_close"),
        start_deadline=field_duration(t, "start_deadline"),
    )


def schedule_from_proto(s: schedule_pb2.Schedule) -> Schedule:
    """``gnomon.v1.Schedule`` -> :class:`~gnomon.sdk.Schedule` (policies as short names)."""
    t, d = field_time, field_duration
    which = s.WhichOneof("rule")
    return Schedule(
        name=s.name,
        cron=s.cron if which == "cron" else None,
        rrule=s.rrule if which == "rrule" else None,
        interval=d(s, "interval"),
        time_zone=s.time_zone,
        dst_gap=enum_text(schedule_pb2.DstGapPolicy, "DST_GAP_POLICY_", s.dst_gap),
        dst_fold=enum_text(schedule_pb2.DstFoldPolicy, "DST_FOLD_POLICY_", s.dst_fold),
        misfire_policy=enum_text(schedule_pb2.MisfirePolicy, "MISFIRE_POLICY_", s.misfire_policy),
        misfire_grace=d(s, "misfire_grace"),
        catchup_window=d(s, "catchup_window"),
        max_catchup=s.max_catchup,
        overlap_policy=enum_text(schedule_pb2.OverlapPolicy, "OVERLAP_POLICY_", s.overlap_policy),
        start_time=t(s, "start_time"),
        end_time=t(s, "end_time"),
        jitter=d(s, "jitter"),
        job_template=template_from_proto(s.job_template),
        paused=s.paused,
        version=s.version,
        etag=s.etag,
        create_time=t(s, "create_time"),
        update_time=t(s, "update_time"),
        next_fire_time=t(s, "next_fire_time"),
        planned_through_time=t(s, "planned_through_time"),
        region=s.region,
        tzdata_version=s.tzdata_version,
    )


def occurrence_from_proto(o: schedule_pb2.ScheduleOccurrence) -> ScheduleOccurrence:
    """``gnomon.v1.ScheduleOccurrence`` -> :class:`~gnomon.sdk.ScheduleOccurrence` (``job`` ``None``
    when no job was made; the ``missed_*`` range only for a coalesced run)."""
    t = field_time
    return ScheduleOccurrence(
        name=o.name,
        nominal_time=t(o, "nominal_time"),
        local_time=o.local_time,
        decision=enum_text(schedule_pb2.OccurrenceDecision, "OCCURRENCE_DECISION_", o.decision),
        source=enum_text(schedule_pb2.OccurrenceSource, "OCCURRENCE_SOURCE_", o.source),
        note=o.note,
        job=o.job or None,
        schedule_time=t(o, "schedule_time"),
        decide_time=t(o, "decide_time"),
        missed_count=o.missed_count,
        missed_first_time=t(o, "missed_first_time"),
        missed_last_time=t(o, "missed_last_time"),
    )


def fire_time_from_proto(ft: schedule_pb2.PreviewFireTime) -> PreviewFireTime:
    """``gnomon.v1.PreviewFireTime`` -> :class:`~gnomon.sdk.PreviewFireTime`."""
    return PreviewFireTime(
        fire_time=field_time(ft, "fire_time"), local_time=ft.local_time, note=ft.note, skipped=ft.skipped
    )


def prediction_from_proto(p: schedule_service_pb2.OutagePrediction) -> OutagePrediction:
    """``gnomon.v1.OutagePrediction`` -> :class:`~gnomon.sdk.OutagePrediction`."""
    t = field_time
    return OutagePrediction(
        schedule=p.schedule,
        misfire_policy=enum_text(schedule_pb2.MisfirePolicy, "MISFIRE_POLICY_", p.misfire_policy),
        overlap_policy=enum_text(schedule_pb2.OverlapPolicy, "OVERLAP_POLICY_", p.overlap_policy),
        missed_count=p.missed_count,
        missed_first_time=t(p, "missed_first_time"),
        missed_last_time=t(p, "missed_last_time"),
        runs=tuple(occurrence_from_proto(o) for o in p.runs),
        run_count=p.run_count,
        skipped=tuple(
            SkippedOccurrenceRange(
                decision=enum_text(schedule_pb2.OccurrenceDecision, "OCCURRENCE_DECISION_", s.decision),
                note=s.note,
                count=s.count,
                first_nominal_time=t(s, "first_nominal_time"),
                last_nominal_time=t(s, "last_nominal_time"),
            )
            for s in p.skipped
        ),
        catchup_finish_time=t(p, "catchup_finish_time"),
        assumptions=tuple(p.assumptions),
        paused=p.paused,
        skipped_count=p.skipped_count,
    )
