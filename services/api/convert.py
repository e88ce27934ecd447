"""Job rows (storage mappings) -> ``gnomon.v1.Job`` messages."""
from __future__ import annotations

from datetime import timedelta

from gnomon._proto.gnomon.v1 import job_pb2, retry_pb2
from gnomon.api.names import job_name
from gnomon.common.retry import RetryPolicy
from gnomon.common.storage.jobs import policy_of
from gnomon.common.timeconv import to_duration, to_timestamp


def job_to_proto(row: dict) -> job_pb2.Job:
    """Builds the public Job message from a ``jobs`` row."""
    j = job_pb2.Job(
        name=job_name(row["namespace"], row["id"]), queue=row["queue"], payload=row["payload"],
        state=job_pb2.JobState.Value("JOB_STATE_" + row["state"]), version=row["version"],
        max_attempts=row["max_attempts"], attempt=row["attempt"], idempotency_key=row["idempotency_key"],
        last_error=row["last_error"] or "", region=row["region"],
        request_id=str(row["request_id"]) if row["request_id"] else "",
        lease_duration=to_duration(timedelta(milliseconds=row["lease_ms"])), idempotent=row["idempotent"],
        failure_class=row["failure_class"] or "")
    if "retry_initial_ms" in row:
        j.retry_policy.CopyFrom(retry_policy_to_proto(policy_of(row)))
    if row.get("start_to_close_ms") is not None:
        j.start_to_close.CopyFrom(to_duration(timedelta(milliseconds=row["start_to_close_ms"])))
    for field, col in (("schedule_time", "scheduled_at"), ("deadline", "deadline"), ("create_time", "created_at"),
                       ("dispatch_time", "dispatched_at"), ("start_time", "started_at"),
                       ("finish_time", "finished_at")):
        ts = to_timestamp(row[col])
        if ts is not None:
            getattr(j, field).CopyFrom(ts)
    return j


def attempt_to_proto(row: dict) -> job_pb2.JobAttempt:
    """Builds the public JobAttempt message from an attempt history row
    (:func:`gnomon.common.storage.attempts.list_attempts`)."""
    a = job_pb2.JobAttempt(
        name=f"{job_name(row['namespace'], row['job_id'])}/attempts/{row['attempt']}", attempt=row["attempt"],
        state=job_pb2.AttemptState.Value("ATTEMPT_STATE_" + row["state"]), worker_id=row["worker_id"] or "",
        dispatcher_id=row["dispatcher_id"] or "", fencing_token=row["token"], version=row["version"],
        failure_class=row["failure_class"] or "", error=row["error"] or "",
        cancel_requested=bool(row["cancel_requested"]))
    for field, col in (("claim_time", "claimed_at"), ("accept_time", "accepted_at"), ("finish_time", "finished_at"),
                       ("lease_expire_time", "lease_expires_at")):
        ts = to_timestamp(row[col])
        if ts is not None:
            getattr(a, field).CopyFrom(ts)
    return a


def retry_policy_to_proto(p: RetryPolicy) -> retry_pb2.RetryPolicy:
    """The effective policy as ``gnomon.v1.RetryPolicy`` (every default filled in; no max_age: unset)."""
    m = retry_pb2.RetryPolicy(initial_backoff=to_duration(timedelta(seconds=p.initial_s)),
                              max_backoff=to_duration(timedelta(seconds=p.max_s)), multiplier=p.multiplier,
                              jitter=p.jitter, non_retryable_errors=list(p.non_retryable_errors))
    if p.max_age_s is not None:
        m.max_age.CopyFrom(to_duration(timedelta(seconds=p.max_age_s)))
    return m
