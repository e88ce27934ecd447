"""Client input never yields INTERNAL or UNKNOWN, and error replies stay small (docs/api.md "Input
limits"): malformed request bodies, oversize echoed text, Duration/Timestamp overflow and NUL in
strings and filters, each through the real API services served in-process on a fresh database.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2

import gnomon_dlq_support as dlq
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jgrpc
from gnomon._proto.gnomon.v1 import retry_pb2, schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon._proto.gnomon.v1 import schedule_service_pb2_grpc as sgrpc
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.rpc.errors import MALFORMED_MESSAGE
from gnomon.common.storage.schema import audit_log, dlq_replays
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.writes import WriteBatcher
from gnomon_test_support import decode, job_service, serving

pytestmark = pytest.mark.asyncio


def schedule_service(engine):
    """The API's ScheduleService on ``engine`` (region "local", 8 shards), for :func:`serving`."""
    return (
        sgrpc.add_ScheduleServiceServicer_to_server,
        ScheduleServicer.on(engine, region="local", shards=8, catchup_rate=50.0, catchup_burst=10),
        "gnomon.v1.ScheduleService",
    )


async def raw_call(channel, method: str, body: bytes) -> grpc.aio.AioRpcError:
    """Sends ``body`` as the raw request of ``method`` (no serializer) and returns the error."""
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call(body, timeout=10)
    return e.value


@pytest.mark.parametrize(
    "method",
    [
        "/gnomon.v1.JobService/CreateJob",
        "/gnomon.v1.JobService/ListJobs",
        "/gnomon.v1.ScheduleService/CreateSchedule",
    ],
)
async def test_a_body_that_is_not_protobuf_is_invalid_argument_with_a_fixed_message(engine, method):
    async with serving(job_service(engine), schedule_service(engine)) as (channel, _):
        # 0xff is an invalid tag/wire type; a truncated length-delimited field follows
        for body in (b"\xff\xff\xff\xff", b"\x0a\xff\x01abc"):
            err = await raw_call(channel, method, body)
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (body, err.code(), err.details())
            assert err.details() == MALFORMED_MESSAGE
            _, info, bad = decode(err)
            assert info is not None and info.reason == ErrorReason.MALFORMED_REQUEST
            assert bad is not None and [v.field for v in bad.field_violations] == ["request"]


async def test_a_valid_body_still_works_after_malformed_ones(engine):
    async with serving(job_service(engine), schedule_service(engine)) as (channel, _):
        await raw_call(channel, "/gnomon.v1.ScheduleService/ListSchedules", b"\xff")
        stub = sgrpc.ScheduleServiceStub(channel)
        reply = await stub.ListSchedules(spb.ListSchedulesRequest(parent="namespaces/default"), timeout=10)
        assert list(reply.schedules) == []


async def test_a_one_mib_time_zone_gets_a_small_invalid_argument(engine):
    huge = "Europe/" + "x" * (1024 * 1024)
    async with serving(schedule_service(engine)) as (channel, _):
        stub = sgrpc.ScheduleServiceStub(channel)
        req = spb.CreateScheduleRequest(
            parent="namespaces/default",
            schedule_id="s1",
            schedule=schedule_pb2.Schedule(
                cron="0 * * * *", time_zone=huge, job_template=schedule_pb2.JobTemplate(queue="q")
            ),
        )
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.CreateSchedule(req, timeout=10)
        err = e.value
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        status, info, bad = decode(err)
        assert info is not None and bad is not None
        assert status.message and len(status.message) <= 512
        assert any("time_zone" in v.field for v in bad.field_violations)
        assert status.ByteSize() < 2048, status.ByteSize()
        assert len(err.details().encode()) < 2048


INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


async def refused(coro) -> tuple[grpc.StatusCode, str, list[str]]:
    """(code, ErrorInfo reason, BadRequest field paths) of a call that must fail."""
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await coro
    _, info, bad = decode(e.value)
    return e.value.code(), info.reason if info else "", [v.field for v in bad.field_violations] if bad else []


def _dur(seconds: int, nanos: int = 0) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


def _ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


CREATE_JOB_CASES = [
    ({"lease_duration": _dur(INT64_MAX)}, "lease_duration"),
    ({"start_to_close": _dur(INT64_MAX)}, "start_to_close"),
    ({"delay": _dur(INT64_MAX)}, "delay"),
    ({"delay": _dur(1, -1)}, "delay"),
    ({"schedule_time": _ts(INT64_MAX)}, "schedule_time"),
    ({"schedule_time": _ts(INT64_MIN)}, "schedule_time"),
    ({"schedule_time": _ts(253402300800)}, "schedule_time"),  # 10000-01-01
    ({"deadline": _ts(-62135596801)}, "deadline"),  # before year 1
    ({"deadline": _ts(0, 10**9)}, "deadline"),
    ({"retry_policy": retry_pb2.RetryPolicy(max_backoff=_dur(INT64_MAX))}, "retry_policy.max_backoff"),
    (
        {"retry_policy": retry_pb2.RetryPolicy(initial_backoff=_dur(INT64_MAX))},
        "retry_policy.initial_backoff",
    ),
    ({"retry_policy": retry_pb2.RetryPolicy(max_age=_dur(INT64_MAX))}, "retry_policy.max_age"),
]


@pytest.mark.parametrize(("fields", "field"), CREATE_JOB_CASES)
async def test_create_job_time_overflow_is_a_field_violation(engine, fields, field):
    async with serving(job_service(engine)) as (channel, _):
        stub = jgrpc.JobServiceStub(channel)
        code, reason, bad = await refused(
            stub.CreateJob(js.CreateJobRequest(queue="q", **fields), timeout=10)
        )
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, ErrorReason.INVALID_FIELD)
        assert field in bad


async def test_reschedule_time_overflow_is_a_field_violation(engine):
    async with serving(job_service(engine)) as (channel, _):
        stub = jgrpc.JobServiceStub(channel)
        job = (await stub.CreateJob(js.CreateJobRequest(queue="q"), timeout=10)).job
        for fields, field in (
            ({"delay": _dur(INT64_MAX)}, "delay"),
            ({"schedule_time": _ts(INT64_MAX)}, "schedule_time"),
        ):
            code, _, bad = await refused(
                stub.RescheduleJob(js.RescheduleJobRequest(name=job.name, **fields), timeout=10)
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT and field in bad
        assert (await stub.GetJob(js.GetJobRequest(name=job.name), timeout=10)).job.version == job.version


SCHEDULE_CASES = [
    ({"interval": _dur(INT64_MAX)}, "schedule.interval"),
    ({"cron": "* * * * *", "misfire_grace": _dur(INT64_MAX)}, "schedule.misfire_grace"),
    ({"cron": "* * * * *", "catchup_window": _dur(INT64_MAX)}, "schedule.catchup_window"),
    ({"cron": "* * * * *", "jitter": _dur(INT64_MAX)}, "schedule.jitter"),
    ({"cron": "* * * * *", "start_time": _ts(INT64_MAX)}, "schedule.start_time"),
    ({"cron": "* * * * *", "end_time": _ts(INT64_MIN)}, "schedule.end_time"),
]


@pytest.mark.parametrize(("fields", "field"), SCHEDULE_CASES)
async def test_create_schedule_time_overflow_is_a_field_violation(engine, fields, field):
    async with serving(schedule_service(engine)) as (channel, _):
        stub = sgrpc.ScheduleServiceStub(channel)
        template = schedule_pb2.JobTemplate(queue="q", start_deadline=_dur(INT64_MAX))
        req = spb.CreateScheduleRequest(
            parent="namespaces/default", schedule=schedule_pb2.Schedule(job_template=template, **fields)
        )
        code, _, bad = await refused(stub.CreateSchedule(req, timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert field in bad and "schedule.job_template.start_deadline" in bad, bad
        assert list((await stub.ListSchedules(spb.ListSchedulesRequest(), timeout=10)).schedules) == []


async def test_replay_and_list_dead_letters_time_overflow_is_a_field_violation(api):
    stub, engine = api
    code, _, bad = await refused(stub.ListDeadLetters(dpb.ListDeadLettersRequest(end_time=_ts(INT64_MAX))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["end_time"]
    code, _, bad = await refused(stub.ReplayDeadLetters(dlq.replay_req(start_time=_ts(INT64_MIN))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["start_time"]
    assert await dlq.count(engine, audit_log) == 0


async def test_replay_with_a_tiny_rate_is_refused_before_anything_is_written(api):
    stub, engine = api
    await dlq.make_dead(engine, 2)
    for rate in (1e-12, 5e-324, 0.0009, float("inf"), float("nan"), -1.0):
        code, _, bad = await refused(stub.ReplayDeadLetters(dlq.replay_req(max_rate=rate)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["max_rate"], rate
    assert await dlq.count(engine, audit_log) == 0
    assert await dlq.count(engine, dlq_replays) == 0
    out = await stub.ReplayDeadLetters(dlq.replay_req(max_rate=0.001))  # the slowest allowed works
    assert out.replayed_count == 2 and await dlq.count(engine, dlq_replays) == 1


async def test_nul_in_list_filters_and_strings_is_a_field_violation(api):
    stub, engine = api
    code, _, bad = await refused(stub.ListDeadLetters(dpb.ListDeadLettersRequest(error_contains="a\x00b")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["error_contains"]
    code, _, bad = await refused(stub.ReplayDeadLetters(dlq.replay_req(reason="why\x00")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["reason"]
    assert await dlq.count(engine, audit_log) == 0
    async with serving(job_service(engine), schedule_service(engine)) as (channel, _):
        jobs = jgrpc.JobServiceStub(channel)
        code, _, bad = await refused(jobs.ListJobs(js.ListJobsRequest(queue="q\x00"), timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["queue"]
        code, _, bad = await refused(
            jobs.BatchCreateJobs(
                js.BatchCreateJobsRequest(
                    requests=[
                        js.CreateJobRequest(queue="q"),
                        js.CreateJobRequest(queue="q", idempotency_key="\x00"),
                    ]
                ),
                timeout=10,
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["requests[1].idempotency_key"]
        assert list((await jobs.ListJobs(js.ListJobsRequest(), timeout=10)).jobs) == []
        schedules = sgrpc.ScheduleServiceStub(channel)
        code, _, bad = await refused(
            schedules.GetSchedule(
                spb.GetScheduleRequest(name="namespaces/default/schedules/a\x00"), timeout=10
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["name"]


async def test_a_batch_whose_reply_could_not_be_delivered_is_refused_before_writing(engine):
    async with serving(job_service(engine)) as (channel, _):
        stub = jgrpc.JobServiceStub(channel)
        big = [js.CreateJobRequest(queue="q", payload=b"p" * 256 * 1024) for _ in range(13)]  # 3.25 MiB
        code, _, bad = await refused(
            stub.BatchCreateJobs(js.BatchCreateJobsRequest(requests=big), timeout=10)
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad == ["requests"]
        assert list((await stub.ListJobs(js.ListJobsRequest(), timeout=10)).jobs) == []
        ok = await stub.BatchCreateJobs(js.BatchCreateJobsRequest(requests=big[:12]), timeout=10)  # 3 MiB
        assert len(ok.jobs) == 12


async def test_a_lease_stream_whose_first_message_does_not_parse_is_invalid_argument(engine):
    writes = WriteBatcher(engine)
    servicer = WorkerServicer(
        SessionRegistry(),
        writes,
        dispatcher_id="d",
        region="local",
        heartbeat_interval_s=1.0,
        on_credits=lambda: None,
    )
    async with serving((wgrpc.add_WorkerServiceServicer_to_server, servicer, "gnomon.v1.WorkerService")) as (
        ch,
        _,
    ):
        lease = ch.stream_stream(
            "/gnomon.v1.WorkerService/Lease", request_serializer=None, response_deserializer=None
        )

        async def body():
            yield b"\xff\xff\xff"

        call = lease(body(), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            async for _ in call:
                raise AssertionError("a malformed hello was answered")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == MALFORMED_MESSAGE
        _, info, _ = decode(e.value)
        assert info is not None and info.reason == ErrorReason.MALFORMED_REQUEST


async def test_a_later_lease_message_that_does_not_parse_ends_only_that_stream(engine):
    writes = WriteBatcher(engine)
    servicer = WorkerServicer(
        SessionRegistry(),
        writes,
        dispatcher_id="d",
        region="local",
        heartbeat_interval_s=1.0,
        on_credits=lambda: None,
    )
    hello = wpb.LeaseRequest(
        hello=wpb.WorkerHello(worker_id="w", queues=["q"], credits=1)
    ).SerializeToString()
    async with serving((wgrpc.add_WorkerServiceServicer_to_server, servicer, "gnomon.v1.WorkerService")) as (
        ch,
        _,
    ):
        lease = ch.stream_stream(
            "/gnomon.v1.WorkerService/Lease", request_serializer=None, response_deserializer=None
        )
        sent_bad = asyncio.Event()
        gate = asyncio.Event()

        async def body():
            yield hello
            await gate.wait()  # after the welcome
            yield b"\xff\xff\xff"
            sent_bad.set()
            await asyncio.Event().wait()  # keep the request side open: the server must end the call

        call = lease(body(), timeout=10)
        first = wpb.LeaseResponse.FromString(await call.read())
        assert first.WhichOneof("kind") == "welcome"
        assert len(servicer.registry.sessions) == 1
        gate.set()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            while await call.read() is not grpc.aio.EOF:
                pass
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == MALFORMED_MESSAGE
        assert sent_bad.is_set() and servicer.registry.sessions == {}
