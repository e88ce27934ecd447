"""gnomon.sdk.convert and gnomon.sdk.models: time/duration/payload/state conversions; the CLI's JSON
view of a job (gnomon.cli.render)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb
from gnomon._proto.gnomon.v1 import job_pb2
from gnomon.cli.render import job_dict
from gnomon.sdk import FailureClass, convert
from gnomon.sdk.jobs import create_job_request, list_jobs_request

UTC = UTC


def test_to_timestamp_utc_and_other_zone_give_same_instant():
    dt = datetime(2026, 3, 8, 7, 30, 0, 250000, tzinfo=UTC)
    ts = convert.to_timestamp(dt)
    assert (ts.seconds, ts.nanos) == (1772955000, 250_000_000)
    ny = dt.astimezone(ZoneInfo("America/New_York"))  # 03:30 EDT, just after the spring-forward gap
    assert (ny.hour, ny.minute) == (3, 30)
    assert convert.to_timestamp(ny) == ts


def test_to_timestamp_refuses_naive_and_non_datetime():
    with pytest.raises(ValueError, match="naive"):
        convert.to_timestamp(datetime(2026, 1, 1, 12, 0))
    with pytest.raises(TypeError):
        convert.to_timestamp("2026-01-01T00:00:00Z")


def test_from_timestamp_is_utc_aware():
    ts = timestamp_pb2.Timestamp(seconds=1772955000, nanos=250_000_999)
    dt = convert.from_timestamp(ts)
    assert dt == datetime(2026, 3, 8, 7, 30, 0, 250000, tzinfo=UTC)  # nanos truncated to micros
    assert dt.tzinfo is UTC
    assert convert.from_timestamp(None) is None


def test_timestamp_round_trip_epoch_and_far_future():
    for dt in (datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)):
        assert convert.from_timestamp(convert.to_timestamp(dt)) == dt


def test_field_time_unset_is_none_but_epoch_is_not():
    job = job_pb2.Job(name="namespaces/d/jobs/x")
    assert convert.field_time(job, "deadline") is None
    job.deadline.CopyFrom(timestamp_pb2.Timestamp(seconds=0))
    assert convert.field_time(job, "deadline") == datetime(1970, 1, 1, tzinfo=UTC)


def test_to_duration_from_seconds_and_timedelta():
    assert convert.to_duration(1.5) == duration_pb2.Duration(seconds=1, nanos=500_000_000)
    assert convert.to_duration(30) == duration_pb2.Duration(seconds=30)
    assert convert.to_duration(timedelta(minutes=2, microseconds=7)) == duration_pb2.Duration(
        seconds=120, nanos=7000
    )
    assert convert.to_duration(0.000000001) == duration_pb2.Duration(nanos=1)
    neg = convert.to_duration(-1.25)
    assert (neg.seconds, neg.nanos) == (-1, -250_000_000)


def test_to_duration_rejects_bad_values():
    with pytest.raises(TypeError):
        convert.to_duration(True)
    with pytest.raises(TypeError):
        convert.to_duration("5s")
    with pytest.raises(ValueError):
        convert.to_duration(float("inf"))


def test_from_duration_and_seconds():
    d = duration_pb2.Duration(seconds=2, nanos=500_000_000)
    assert convert.from_duration(d) == timedelta(seconds=2.5)
    assert convert.duration_seconds(d) == 2.5
    assert convert.from_duration(None) is None


def test_encode_payload_variants():
    assert convert.encode_payload(b"\x00\xff") == b"\x00\xff"
    assert convert.encode_payload(bytearray(b"ab")) == b"ab"
    assert convert.encode_payload("héllo") == "héllo".encode()
    assert convert.encode_payload({"b": [1, 2], "a": "é"}) == '{"b":[1,2],"a":"é"}'.encode()
    assert convert.encode_payload([1, "x"]) == b'[1,"x"]'
    assert convert.encode_payload(None) == b""
    with pytest.raises(TypeError):
        convert.encode_payload(42)
    with pytest.raises(TypeError, match="JSON"):
        convert.encode_payload({"x": object()})


def test_decode_json_payload():
    assert convert.decode_json_payload(b'{"a":1}') == {"a": 1}
    with pytest.raises(ValueError):
        convert.decode_json_payload(b"\xff\xfe")
    assert convert.decode_json_payload(b"not json", default=None) is None


def test_state_names_both_ways():
    assert convert.state_name(job_pb2.JOB_STATE_SCHEDULED) == "SCHEDULED"
    assert convert.state_name(job_pb2.JOB_STATE_SUCCEEDED) == "SUCCEEDED"
    assert convert.state_name(0) == "UNSPECIFIED"
    assert convert.state_name(99) == "UNKNOWN_99"
    assert convert.state_value("succeeded") == job_pb2.JOB_STATE_SUCCEEDED
    assert convert.state_value("JOB_STATE_DEAD") == job_pb2.JOB_STATE_DEAD
    assert convert.state_value(job_pb2.JOB_STATE_QUEUED) == 2
    assert convert.state_value(None) == 0
    with pytest.raises(ValueError, match="SCHEDULED"):
        convert.state_value("DONE")
    with pytest.raises(ValueError):
        convert.state_value(42)


def test_job_name_from_id_or_full_name():
    assert convert.job_name("abc", "default") == "namespaces/default/jobs/abc"
    assert convert.job_name("abc", "namespaces/t1") == "namespaces/t1/jobs/abc"
    assert convert.job_name("namespaces/x/jobs/abc", "default") == "namespaces/x/jobs/abc"
    for bad in ("", "jobs/abc", "namespaces/x/schedules/abc", "namespaces//jobs/a"):
        with pytest.raises(ValueError):
            convert.job_name(bad, "default")


def test_rfc3339_and_duration_text():
    assert convert.rfc3339(datetime(2026, 3, 8, 7, 30, tzinfo=UTC)) == "2026-03-08T07:30:00Z"
    assert (
        convert.rfc3339(datetime(2026, 3, 8, 2, 30, 0, 5, tzinfo=ZoneInfo("America/Chicago")))
        == "2026-03-08T08:30:00.000005Z"
    )
    assert convert.rfc3339(None) is None
    assert convert.duration_text(timedelta(seconds=30)) == "30s"
    assert convert.duration_text(timedelta(seconds=1.5)) == "1.5s"


def _job_proto(**kw) -> job_pb2.Job:
    j = job_pb2.Job(
        name="namespaces/acme/jobs/5d0c0b8e-0000-4000-8000-000000000001",
        queue="emails",
        payload=b'{"to":"a@b.c"}',
        state=job_pb2.JOB_STATE_RUNNING,
        version=3,
        max_attempts=5,
        attempt=1,
        idempotency_key="k-1",
        last_error="",
        region="eu",
        request_id="r-1",
        **kw,
    )
    j.schedule_time.CopyFrom(timestamp_pb2.Timestamp(seconds=1772955000))
    j.create_time.CopyFrom(timestamp_pb2.Timestamp(seconds=1772954990))
    j.dispatch_time.CopyFrom(timestamp_pb2.Timestamp(seconds=1772955000, nanos=4_000_000))
    j.lease_duration.CopyFrom(duration_pb2.Duration(seconds=30))
    return j


def test_job_from_proto_mirrors_fields():
    job = convert.job_from_proto(_job_proto())
    assert job.state == "RUNNING"
    assert job.id == "5d0c0b8e-0000-4000-8000-000000000001"
    assert job.namespace == "acme"
    assert job.schedule_time == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert job.dispatch_time - job.schedule_time == timedelta(milliseconds=4)
    assert job.deadline is None and job.start_time is None and job.finish_time is None
    assert job.lease_duration == timedelta(seconds=30)
    assert job.payload == b'{"to":"a@b.c"}' and job.json() == {"to": "a@b.c"}
    assert not job.terminal
    with pytest.raises(Exception):  # noqa: B017
        job.state = "DEAD"  # frozen


def test_failure_class_reads_as_the_sdk_enum_none_when_nothing_failed():
    assert convert.job_from_proto(_job_proto()).failure_class is None
    job = convert.job_from_proto(_job_proto(failure_class=fpb.FAILURE_CLASS_PERMANENT))
    assert job.failure_class is FailureClass.PERMANENT and job_dict(job)["failure_class"] == "PERMANENT"
    att = convert.job_attempt_from_proto(job_pb2.JobAttempt(failure_class=fpb.FAILURE_CLASS_AMBIGUOUS))
    assert att.failure_class is FailureClass.AMBIGUOUS
    # a value this SDK does not know (a newer server) reads as None instead of failing the call
    assert convert.job_attempt_from_proto(job_pb2.JobAttempt(failure_class=77)).failure_class is None


def test_job_to_json_dict():
    d = job_dict(convert.job_from_proto(_job_proto()))
    assert d["name"] == "namespaces/acme/jobs/5d0c0b8e-0000-4000-8000-000000000001"
    assert d["state"] == "RUNNING"
    assert d["queue"] == "emails"
    assert d["schedule_time"] == "2026-03-08T07:30:00Z"
    assert d["dispatch_time"] == "2026-03-08T07:30:00.004000Z"
    assert d["start_time"] is None and d["finish_time"] is None and d["deadline"] is None
    assert (d["attempt"], d["version"], d["max_attempts"]) == (1, 3, 5)
    assert d["idempotency_key"] == "k-1" and d["last_error"] == ""
    assert d["lease_duration"] == "30s"
    assert base64.b64decode(d["payload"]) == b'{"to":"a@b.c"}'
    assert d["payload_json"] == {"to": "a@b.c"}


def test_job_to_json_dict_binary_payload_has_no_payload_json():
    d = job_dict(
        convert.job_from_proto(
            job_pb2.Job(name="namespaces/d/jobs/x", payload=b"\xff\x00", state=job_pb2.JOB_STATE_DEAD)
        )
    )
    assert d["payload"] == "/wA="
    assert "payload_json" not in d
    assert d["state"] == "DEAD"


def test_create_job_request_encodes_every_argument():
    when = datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    req = create_job_request(
        "acme",
        "emails",
        {"x": 1},
        schedule_time=when,
        deadline=when + timedelta(hours=1),
        max_attempts=7,
        request_id="6f1c3f3e-0000-4000-8000-000000000000",
        idempotency_key="key",
        lease_duration=timedelta(seconds=90),
    )
    assert req.parent == "namespaces/acme"
    assert req.queue == "emails" and req.payload == b'{"x":1}'
    assert req.schedule_time.seconds == 1772955000 and not req.HasField("delay")
    assert req.deadline.seconds == 1772955000 + 3600
    assert req.HasField("max_attempts") and req.max_attempts == 7
    assert req.request_id == "6f1c3f3e-0000-4000-8000-000000000000"
    assert req.idempotency_key == "key"
    assert req.lease_duration.seconds == 90


def test_create_job_request_defaults_leave_optional_fields_unset():
    req = create_job_request("default", "q", delay=2.5)
    assert req.parent == "namespaces/default" and req.payload == b""
    assert req.delay == duration_pb2.Duration(seconds=2, nanos=500_000_000)
    assert not req.HasField("schedule_time") and not req.HasField("max_attempts")
    assert not req.HasField("deadline") and not req.HasField("lease_duration")
    with pytest.raises(ValueError, match="at most one"):
        create_job_request("default", "q", schedule_time=datetime.now(UTC), delay=1)


def test_list_jobs_request():
    req = list_jobs_request("acme", "dead", "emails", 50, "tok")
    assert (req.parent, req.state, req.queue, req.page_size, req.page_token) == (
        "namespaces/acme",
        job_pb2.JOB_STATE_DEAD,
        "emails",
        50,
        "tok",
    )


@given(
    seconds=st.integers(min_value=-62135596800, max_value=253402300799),
    nanos=st.integers(min_value=0, max_value=999_999_999),
)
def test_from_timestamp_equals_protobufs_own_conversion(seconds: int, nanos: int) -> None:
    ts = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    assert convert.from_timestamp(ts) == ts.ToDatetime(tzinfo=UTC)


@given(
    seconds=st.integers(min_value=-315_576_000_000, max_value=315_576_000_000),
    nanos=st.integers(min_value=0, max_value=999_999_999),
    negative=st.booleans(),
)
def test_from_duration_equals_protobufs_own_conversion(seconds: int, nanos: int, negative: bool) -> None:
    # a Duration's seconds and nanos share their sign
    d = duration_pb2.Duration(seconds=-seconds if negative else seconds, nanos=-nanos if negative else nanos)
    assert convert.from_duration(d) == d.ToTimedelta()


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(0, -1), (0, 1_000_000_000), (-62_135_596_801, 0), (253_402_300_800, 0)],
)
def test_from_timestamp_refuses_what_protobuf_refuses(seconds: int, nanos: int) -> None:
    ts = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    with pytest.raises(ValueError):
        ts.ToDatetime(tzinfo=UTC)
    with pytest.raises(ValueError):
        convert.from_timestamp(ts)
