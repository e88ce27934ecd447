"""Job rows (storage mappings) -> ``gnomon.v1.Job`` messages."""
from __future__ import annotations

from datetime import timedelta

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon.api.names import job_name
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
    for field, col in (("schedule_time", "scheduled_at"), ("deadline", "deadline"), ("create_time", "created_at"),
                       ("dispatch_time", "dispatched_at"), ("start_time", "started_at"),
                       ("finish_time", "finished_at")):
        ts = to_timestamp(row[col])
        if ts is not None:
            getattr(j, field).CopyFrom(ts)
    return j
