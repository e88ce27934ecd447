"""Job rows (storage mappings) -> ``gnomon.v1.Job`` messages."""

from __future__ import annotations

import functools
from datetime import timedelta

from google.protobuf import duration_pb2

from gnomon._proto.gnomon.v1 import job_pb2, retry_pb2, schedule_pb2, schedule_service_pb2
from gnomon.common.domain.jobs import RetryColumns, policy_of
from gnomon.common.failure_wire import failure_class_to_wire
from gnomon.common.names import attempt_name, job_name, occurrence_name, schedule_name
from gnomon.common.retry import RetryPolicy
from gnomon.common.scheduling.outage import OutagePrediction
from gnomon.common.time import RuleKind
from gnomon.common.timeconv import set_timestamp, to_duration, to_timestamp


def job_to_proto(row: dict) -> job_pb2.Job:
    """Builds the public Job message from a ``jobs`` row."""
    j = job_pb2.Job(
        name=job_name(row["namespace"], row["id"]),
        queue=row["queue"],
        payload=row["payload"],
        state="JOB_STATE_" + row["state"],
        version=row["version"],
        max_attempts=row["max_attempts"],
        attempt=row["attempt"],
        idempotency_key=row["idempotency_key"],
        last_error=row["last_error"] or "",
        region=row["region"],
        request_id=str(row["request_id"]) if row["request_id"] else "",
        lease_duration=_ms_duration(row["lease_ms"]),
        idempotent=row["idempotent"],
        failure_class=failure_class_to_wire(row["failure_class"]),
    )
    if row.get("schedule_id"):
        j.schedule = schedule_name(row["namespace"], row["schedule_id"])
        j.coalesced_count = row.get("coalesced_count") or 0
        for field, col in (
            ("nominal_time", "nominal_time"),
            ("coalesced_first_time", "coalesced_first"),
            ("coalesced_last_time", "coalesced_last"),
        ):
            dt = row.get(col)
            if dt is not None:
                set_timestamp(getattr(j, field), dt)
    if "retry_initial_ms" in row:
        j.retry_policy.CopyFrom(_row_policy(*(row[c] for c in _POLICY_COLUMNS)))
    if row.get("start_to_close_ms") is not None:
        j.start_to_close.CopyFrom(_ms_duration(row["start_to_close_ms"]))
    for field, col in _JOB_TIMES:
        dt = row[col]
        if dt is not None:
            set_timestamp(getattr(j, field), dt)
    return j


#: Job message Timestamp fields and the ``jobs`` columns they come from.
_JOB_TIMES = (
    ("schedule_time", "scheduled_at"),
    ("deadline", "deadline"),
    ("create_time", "created_at"),
    ("dispatch_time", "dispatched_at"),
    ("start_time", "started_at"),
    ("finish_time", "finished_at"),
)


#: The retry-policy columns of a ``jobs`` row (:class:`RetryColumns`), in :func:`_row_policy`'s
#: argument order.
_POLICY_COLUMNS = tuple(RetryColumns.__annotations__)


@functools.lru_cache(maxsize=256)
def _row_policy(*values: object) -> retry_pb2.RetryPolicy:
    """The RetryPolicy message of a row's retry columns (:data:`_POLICY_COLUMNS`), cached by value:
    most jobs share a few policies, and building one cost ~6 % of the API's CPU in a BatchCreateJobs
    profile (py-spy, 2026-12-02). Read-only: callers copy it (``CopyFrom``)."""
    return retry_policy_to_proto(policy_of(dict(zip(_POLICY_COLUMNS, values, strict=True))))


@functools.lru_cache(maxsize=256)
def _ms_duration(ms: int) -> duration_pb2.Duration:
    """A Duration of ``ms`` milliseconds, cached (lease and start-to-close spans repeat). Read-only:
    callers copy it."""
    return to_duration(timedelta(milliseconds=ms))


def attempt_to_proto(row: dict) -> job_pb2.JobAttempt:
    """Builds the public JobAttempt message from an attempt history row
    (:func:`gnomon.common.storage.attempts.list_attempts`)."""
    a = job_pb2.JobAttempt(
        name=attempt_name(row["namespace"], row["job_id"], row["attempt"]),
        attempt=row["attempt"],
        state="ATTEMPT_STATE_" + row["state"],
        worker_id=row["worker_id"] or "",
        dispatcher_id=row["dispatcher_id"] or "",
        fencing_token=row["token"],
        version=row["version"],
        failure_class=failure_class_to_wire(row["failure_class"]),
        error=row["error"] or "",
        cancel_requested=bool(row["cancel_requested"]),
    )
    for field, col in (
        ("claim_time", "claimed_at"),
        ("accept_time", "accepted_at"),
        ("finish_time", "finished_at"),
        ("lease_expire_time", "lease_expires_at"),
    ):
        ts = to_timestamp(row[col])
        if ts is not None:
            getattr(a, field).CopyFrom(ts)
    return a


def retry_policy_to_proto(p: RetryPolicy) -> retry_pb2.RetryPolicy:
    """The effective policy as ``gnomon.v1.RetryPolicy`` (every default filled in; no max_age: unset)."""
    m = retry_pb2.RetryPolicy(
        initial_backoff=to_duration(timedelta(seconds=p.initial_s)),
        max_backoff=to_duration(timedelta(seconds=p.max_s)),
        multiplier=p.multiplier,
        jitter=p.jitter,
        non_retryable_errors=list(p.non_retryable_errors),
    )
    if p.max_age_s is not None:
        m.max_age.CopyFrom(to_duration(timedelta(seconds=p.max_age_s)))
    return m


def schedule_to_proto(row: dict, *, tzdata: str = "") -> schedule_pb2.Schedule:
    """Builds the public Schedule message from a ``schedules`` row (every default filled in)."""
    s = schedule_pb2.Schedule(
        name=schedule_name(row["namespace"], row["schedule_id"]),
        time_zone=row["time_zone"],
        dst_gap="DST_GAP_POLICY_" + row["dst_gap"],
        dst_fold="DST_FOLD_POLICY_" + row["dst_fold"],
        misfire_policy="MISFIRE_POLICY_" + row["misfire_policy"],
        misfire_grace=to_duration(timedelta(milliseconds=row["misfire_grace_ms"])),
        catchup_window=to_duration(timedelta(milliseconds=row["catchup_window_ms"])),
        max_catchup=row["max_catchup"],
        overlap_policy="OVERLAP_POLICY_" + row["overlap_policy"],
        jitter=to_duration(timedelta(milliseconds=row["jitter_ms"])),
        paused=row["paused"],
        version=row["version"],
        etag=str(row["version"]),
        region=row["region"],
        request_id=str(row["request_id"]) if row["request_id"] else "",
        tzdata_version=tzdata,
    )
    if row["rule_kind"] == RuleKind.CRON:
        s.cron = row["expression"]
    elif row["rule_kind"] == RuleKind.RRULE:
        s.rrule = row["expression"]
    else:
        s.interval.CopyFrom(to_duration(timedelta(milliseconds=row["interval_ms"])))
    t = s.job_template
    t.queue, t.payload, t.max_attempts, t.idempotent = (
        row["queue"],
        row["payload"],
        row["max_attempts"],
        row["idempotent"],
    )
    t.lease_duration.CopyFrom(to_duration(timedelta(milliseconds=row["lease_ms"])))
    t.retry_policy.CopyFrom(retry_policy_to_proto(policy_of(row)))
    if row["start_to_close_ms"] is not None:
        t.start_to_close.CopyFrom(to_duration(timedelta(milliseconds=row["start_to_close_ms"])))
    if row["start_deadline_ms"] is not None:
        t.start_deadline.CopyFrom(to_duration(timedelta(milliseconds=row["start_deadline_ms"])))
    for field, col in (
        ("start_time", "start_time"),
        ("end_time", "end_time"),
        ("create_time", "created_at"),
        ("update_time", "updated_at"),
        ("next_fire_time", "next_fire_at"),
        ("planned_through_time", "planned_through"),
    ):
        ts = to_timestamp(row[col])
        if ts is not None:
            getattr(s, field).CopyFrom(ts)
    return s


def occurrence_to_proto(row: dict, schedule: str) -> schedule_pb2.ScheduleOccurrence:
    """Builds a ScheduleOccurrence from a ``schedule_occurrences`` row; ``schedule`` is the schedule's name."""
    nominal = row["nominal_time"]
    o = schedule_pb2.ScheduleOccurrence(
        name=occurrence_name(schedule, nominal),
        local_time=row["local_time"],
        decision="OCCURRENCE_DECISION_" + row["decision"],
        source="OCCURRENCE_SOURCE_" + row["source"],
        note=row["note"] or "",
        job=job_name(row["namespace"], row["job_id"]) if row.get("job_id") else "",
        missed_count=row.get("missed_count") or 0,
    )
    for field, col in (
        ("nominal_time", "nominal_time"),
        ("schedule_time", "scheduled_at"),
        ("decide_time", "decided_at"),
        ("missed_first_time", "missed_first"),
        ("missed_last_time", "missed_last"),
    ):
        ts = to_timestamp(row.get(col))
        if ts is not None:
            getattr(o, field).CopyFrom(ts)
    return o


def prediction_to_proto(p: OutagePrediction, schedule: str) -> schedule_service_pb2.OutagePrediction:
    """Builds an OutagePrediction of SimulateOutage from the simulator's prediction ``p`` for the
    schedule named ``schedule``; the runs are records that were never stored (no name, no job)."""
    row = p.schedule
    out = schedule_service_pb2.OutagePrediction(
        schedule=schedule,
        misfire_policy="MISFIRE_POLICY_" + row["misfire_policy"],
        overlap_policy="OVERLAP_POLICY_" + row["overlap_policy"],
        missed_count=p.missed_count,
        run_count=p.run_count,
        skipped_count=p.skipped_count,
        assumptions=p.assumptions,
        paused=bool(row["paused"]),
    )
    for field, value in (
        ("missed_first_time", p.missed_first),
        ("missed_last_time", p.missed_last),
        ("catchup_finish_time", p.catchup_finish),
    ):
        ts = to_timestamp(value)
        if ts is not None:
            getattr(out, field).CopyFrom(ts)
    for r in p.runs:
        o = occurrence_to_proto(dict(r, job_id=None), schedule)
        o.name = ""
        out.runs.append(o)
    for s in p.skipped:
        out.skipped.append(
            schedule_service_pb2.SkippedOccurrenceRange(
                decision="OCCURRENCE_DECISION_" + s.decision,
                note=s.note,
                count=s.count,
                first_nominal_time=to_timestamp(s.first),
                last_nominal_time=to_timestamp(s.last),
            )
        )
    return out
