"""RescheduleJob over real gRPC against a real PostgreSQL (moving a scheduled job, refusing a
dispatched or finished one, invalid input), and the SDK and CLI for CancelJob and RescheduleJob
against the real API in-process.

The dispatcher's storage calls are made directly, as in test_cancel.py, with the helpers of
gnomon_cancel_support.py and the ``cancel_env`` fixture of conftest.py, through both dialects.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from sqlalchemy import func, select

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon_cancel_support import cancel, claim, create, job_id, row, rpc_error, running
from gnomon_test_support import DIALECTS

dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)
env = pytest.fixture(lambda cancel_env: cancel_env)  # conftest.py: JobService through ``dialect``


# -- reschedule -------------------------------------------------------------------------------------


async def test_reschedule_moves_a_scheduled_job_and_it_is_not_claimed_before(env):
    stub, engine, _ = env
    job = await create(stub)  # due now
    resp = await stub.RescheduleJob(
        js.RescheduleJobRequest(name=job.name, delay=duration_pb2.Duration(seconds=60))
    )
    moved = resp.job
    assert moved.version == 2 and moved.state == job_pb2.JOB_STATE_SCHEDULED
    async with engine.connect() as c:
        now = (await c.execute(select(func.now()))).scalar_one()
    sched = moved.schedule_time.ToDatetime(tzinfo=UTC)
    assert timedelta(seconds=50) < sched - now <= timedelta(seconds=60)
    assert await claim(engine) == []
    # an absolute instant, to the microsecond
    at = timestamp_pb2.Timestamp(seconds=4_102_444_800, nanos=123_456_000)  # 2100-01-01
    moved = (
        await stub.RescheduleJob(js.RescheduleJobRequest(name=job.name, schedule_time=at, expected_version=2))
    ).job
    assert moved.schedule_time == at and moved.version == 3
    assert (await row(engine, job_id(job)))["scheduled_at"] == datetime(2100, 1, 1, 0, 0, 0, 123456, UTC)
    # neither field: now; then it is claimed
    moved = (await stub.RescheduleJob(js.RescheduleJobRequest(name=job.name))).job
    assert moved.version == 4
    assert [c.job_id for c in await claim(engine)] == [job_id(job)]


async def test_reschedule_of_a_dispatched_or_finished_job_is_refused(env):
    stub, engine, _ = env
    job = await create(stub)
    await claim(engine)
    req = js.RescheduleJobRequest(name=job.name, delay=duration_pb2.Duration(seconds=5))
    assert await rpc_error(stub.RescheduleJob(req)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "JOB_NOT_RESCHEDULABLE",
        [],
    )
    await cancel(stub, job)
    assert (await rpc_error(stub.RescheduleJob(req)))[1] == "JOB_NOT_RESCHEDULABLE"
    assert (await row(engine, job_id(job)))["version"] == 3


BAD_RESCHEDULES = [
    (
        "schedule_time and delay",
        dict(
            schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_000),
            delay=duration_pb2.Duration(seconds=1),
        ),
        "delay",
    ),
    (
        "schedule_time before 1970",
        dict(schedule_time=timestamp_pb2.Timestamp(seconds=-86400)),
        "schedule_time",
    ),
    (
        "schedule_time after 9999",
        dict(schedule_time=timestamp_pb2.Timestamp(seconds=253402300800)),
        "schedule_time",
    ),
    ("negative delay", dict(delay=duration_pb2.Duration(seconds=-1)), "delay"),
    ("delay over 100 years", dict(delay=duration_pb2.Duration(seconds=36501 * 86400)), "delay"),
    (
        "after the deadline",
        dict(schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_200)),
        "schedule_time",
    ),
    ("delay past the deadline", dict(delay=duration_pb2.Duration(seconds=10**9)), "delay"),
    ("at the deadline", dict(schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_100)), "schedule_time"),
]


@pytest.mark.parametrize("label,fields,field", BAD_RESCHEDULES, ids=[b[0] for b in BAD_RESCHEDULES])
async def test_bad_reschedule_is_invalid_argument_with_the_field_and_changes_nothing(
    env, label, fields, field
):
    stub, engine, _ = env
    job = await create(
        stub,
        schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_000),
        deadline=timestamp_pb2.Timestamp(seconds=2_000_000_100),
    )
    before = await row(engine, job_id(job))
    assert await rpc_error(stub.RescheduleJob(js.RescheduleJobRequest(name=job.name, **fields))) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD",
        [field],
    )
    assert await row(engine, job_id(job)) == before


# -- SDK and CLI against the real API ---------------------------------------------------------------


async def test_sdk_and_cli_cancel_and_reschedule(env):
    from typer.testing import CliRunner

    from gnomon.cli.main import app
    from gnomon.sdk import AsyncClient, Client, GnomonError

    stub, engine, address = env
    runner = CliRunner()

    async def cli(*args) -> tuple[int, str]:
        # the sync client blocks: run it in a thread, the API serves on this loop
        r = await asyncio.to_thread(runner.invoke, app, ["job", *args, "--api", address])
        return r.exit_code, r.output.strip()

    job = await create(stub, delay=duration_pb2.Duration(seconds=3600))
    code, out = await cli("reschedule", job.name, "--at", "2100-01-01T00:00:00Z", "--expected-version", "1")
    assert (code, out) == (0, "2100-01-01T00:00:00Z")
    code, out = await cli("reschedule", job_id(job).hex, "--in", "2h", "--expected-version", "1")
    assert code == 1 and "FAILED_PRECONDITION" in out
    assert (await cli("reschedule", job.name))[0] == 2  # neither --at nor --in
    code, out = await cli("reschedule", job.name, "--at", "1969-12-31T00:00:00Z")
    assert code == 1 and "schedule_time" in out
    assert await cli("cancel", str(job_id(job))) == (0, "cancelled")  # a bare id: default namespace
    assert await cli("cancel", job.name) == (0, "already finished: CANCELLED")

    [running_job], _ = await running(stub, engine, 1)
    assert await cli("cancel", running_job.name, "--expected-version", "3") == (0, "cancel requested")

    def sync_calls():
        with Client(api=address) as c:
            j = c.create_job("q", delay=60)
            moved = c.reschedule_job(j.name, delay=120, expected_version=1)
            try:
                c.reschedule_job(j.name, schedule_time=datetime(2100, 1, 1, tzinfo=UTC), expected_version=1)
            except GnomonError as e:
                stale = (e.code, e.reason)
            return moved, c.cancel_job(j.id), c.cancel_job(j.name), stale

    moved, first, again, stale = await asyncio.to_thread(sync_calls)
    assert moved.version == 2 and moved.state == "SCHEDULED"
    assert (first[0], first[1].state, first[1].version) == ("CANCELLED", "CANCELLED", 3)
    assert (again[0], again[1].state) == ("ALREADY_FINISHED", "CANCELLED")
    assert stale == (grpc.StatusCode.FAILED_PRECONDITION, "STALE_VERSION")

    async with AsyncClient(api=address) as ac:
        j = await ac.create_job("q", delay=60)
        at = datetime(2100, 1, 1, 0, 0, 1, tzinfo=UTC)
        assert (await ac.reschedule_job(j.id, schedule_time=at)).schedule_time == at
        outcome, cancelled = await ac.cancel_job(j.name, expected_version=2)
        assert (outcome, cancelled.state) == ("CANCELLED", "CANCELLED")
        with pytest.raises(ValueError):
            await ac.reschedule_job(j.name, schedule_time=at, delay=1)
