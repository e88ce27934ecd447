"""gnomon.api.convert.job_to_proto: its cached parts (retry policy, durations) are copied into each
message, so no message shares or changes another's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from gnomon.api.convert import job_to_proto
from gnomon.common.storage.schema import jobs

NOW = datetime(2026, 12, 2, 6, 0, 0, 123456, tzinfo=UTC)


def row(**over) -> dict:
    r: dict = {c.name: None for c in jobs.c}
    r.update(
        id=uuid.uuid4(),
        namespace="default",
        queue="q",
        payload=b"x",
        state="SCHEDULED",
        version=1,
        max_attempts=3,
        attempt=0,
        idempotency_key="k",
        region="local",
        lease_ms=30_000,
        idempotent=False,
        retry_initial_ms=1000,
        retry_max_ms=60_000,
        retry_multiplier=2.0,
        retry_jitter=0.2,
        scheduled_at=NOW,
        created_at=NOW,
    )
    r.update(over)
    return r


def test_each_job_gets_its_own_policy_and_lease_even_when_they_repeat() -> None:
    a = job_to_proto(row())
    a.retry_policy.multiplier = 9.0  # a caller changing its message
    a.lease_duration.seconds = 1
    b = job_to_proto(row())
    assert (b.retry_policy.multiplier, b.lease_duration.seconds) == (2.0, 30)
    assert (b.retry_policy.initial_backoff.seconds, b.retry_policy.max_backoff.seconds) == (1, 60)


def test_different_policies_and_spans_are_not_confused() -> None:
    a = job_to_proto(row(retry_multiplier=3.0, non_retryable_errors='["KeyError"]', lease_ms=1500))
    b = job_to_proto(row(start_to_close_ms=2500))
    assert (a.retry_policy.multiplier, list(a.retry_policy.non_retryable_errors)) == (3.0, ["KeyError"])
    assert a.lease_duration.ToMilliseconds() == 1500 and not a.HasField("start_to_close")
    assert (b.retry_policy.multiplier, list(b.retry_policy.non_retryable_errors)) == (2.0, [])
    assert b.start_to_close.ToMilliseconds() == 2500


def test_times_are_set_only_for_the_columns_that_have_one() -> None:
    j = job_to_proto(row(dispatched_at=NOW))
    assert j.schedule_time.ToDatetime(tzinfo=UTC) == NOW
    assert j.create_time.nanos == 123_456_000 and j.HasField("dispatch_time")
    assert not any(j.HasField(f) for f in ("deadline", "start_time", "finish_time"))
