"""Client input never yields INTERNAL or UNKNOWN, and error replies stay small (docs/api.md "Input
limits"): malformed request bodies, oversize echoed text, Duration/Timestamp overflow and NUL in
strings and filters, each through the real API services served in-process on a fresh database.
"""

from __future__ import annotations

import grpc
import pytest

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon._proto.gnomon.v1 import schedule_service_pb2_grpc as sgrpc
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.rpc.errors import MALFORMED_MESSAGE
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
