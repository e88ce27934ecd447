"""CreateJob validation: every bad input is one field violation naming the field (no server needed)."""

from __future__ import annotations

import uuid

import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon.api.validation import MAX_PAYLOAD_BYTES, request_fingerprint, validate_create
from gnomon.common.errors import InvalidArgument


def fields(req) -> list[str]:
    with pytest.raises(InvalidArgument) as e:
        validate_create(req, region="local", shards=64)
    return sorted(v.field for v in e.value.violations)


def ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


@pytest.mark.parametrize("queue", ["", "Has-Upper", "-starts-with-dash", "a" * 65, "spa ce", "é", "a\n"])
def test_bad_queue_names(queue):
    assert fields(js.CreateJobRequest(queue=queue)) == ["queue"]


@pytest.mark.parametrize("queue", ["a", "emails", "billing.v2", "q_1-x", "0day", "a" * 64])
def test_good_queue_names(queue):
    assert validate_create(js.CreateJobRequest(queue=queue), region="local", shards=64).queue == queue


def test_schedule_time_before_1970():
    assert fields(js.CreateJobRequest(queue="q", schedule_time=ts(-1))) == ["schedule_time"]


def test_schedule_time_after_9999():
    assert fields(js.CreateJobRequest(queue="q", schedule_time=ts(253402300800))) == ["schedule_time"]


def test_schedule_time_bounds_are_inclusive():
    assert (
        validate_create(
            js.CreateJobRequest(queue="q", schedule_time=ts(253402300799)), region="local", shards=64
        ).schedule_at.year
        == 9999
    )
    assert (
        validate_create(
            js.CreateJobRequest(queue="q", schedule_time=ts(0)), region="local", shards=64
        ).schedule_at.year
        == 1970
    )


def test_negative_delay():
    assert fields(js.CreateJobRequest(queue="q", delay=duration_pb2.Duration(seconds=-5))) == ["delay"]


def test_both_schedule_time_and_delay():
    assert fields(
        js.CreateJobRequest(
            queue="q", schedule_time=ts(2_000_000_000), delay=duration_pb2.Duration(seconds=5)
        )
    ) == ["delay"]


def test_oversized_payload():
    assert fields(js.CreateJobRequest(queue="q", payload=b"x" * (MAX_PAYLOAD_BYTES + 1))) == ["payload"]


def test_payload_at_limit_and_empty_payload_are_accepted():
    assert (
        len(
            validate_create(
                js.CreateJobRequest(queue="q", payload=b"x" * MAX_PAYLOAD_BYTES), region="local", shards=64
            ).payload
        )
        == MAX_PAYLOAD_BYTES
    )
    assert validate_create(js.CreateJobRequest(queue="q"), region="local", shards=64).payload == b""


@pytest.mark.parametrize("n", [0, -1, 101])
def test_max_attempts_out_of_range(n):
    assert fields(js.CreateJobRequest(queue="q", max_attempts=n)) == ["max_attempts"]


def test_max_attempts_default_is_3():
    assert validate_create(js.CreateJobRequest(queue="q"), region="local", shards=64).max_attempts == 3


@pytest.mark.parametrize(
    "rid", ["abc", "1234", "efd06d11c0534819ab39b692a5c60a89", "{198df6a8-cc84-4cac-9626-bc9b49834e6a}"]
)
def test_malformed_request_id(rid):
    assert fields(js.CreateJobRequest(queue="q", request_id=rid)) == ["request_id"]


def test_deadline_not_after_schedule_time():
    assert fields(
        js.CreateJobRequest(queue="q", schedule_time=ts(2_000_000_000), deadline=ts(2_000_000_000))
    ) == ["deadline"]


def test_bad_parent():
    assert fields(js.CreateJobRequest(parent="tenants/x", queue="q")) == ["parent"]


def test_all_violations_reported_together():
    assert fields(js.CreateJobRequest(queue="", max_attempts=0, request_id="nope")) == [
        "max_attempts",
        "queue",
        "request_id",
    ]


def test_same_request_same_fingerprint_different_request_different():
    a = js.CreateJobRequest(queue="q", payload=b"1", request_id=str(uuid.uuid4()))
    b = js.CreateJobRequest()
    b.CopyFrom(a)
    assert request_fingerprint(a) == request_fingerprint(b)
    b.payload = b"2"
    assert request_fingerprint(a) != request_fingerprint(b)


def test_shard_in_range_and_idempotency_key_defaults_to_job_id():
    new = validate_create(js.CreateJobRequest(queue="q"), region="local", shards=7)
    assert 0 <= new.shard < 7
    assert new.idempotency_key == str(new.id)
