"""JobService over real gRPC against a real PostgreSQL: creates, reads, lists, and bad input.

The API server runs in the test's event loop (the same servicer and server bootstrap as
``gnomon api``); calls go through a real gRPC channel, errors are decoded from the rich status.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from sqlalchemy import func, select

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon.common.storage.schema import jobs
from gnomon_test_support import decode, job_service, serving


@pytest.fixture
async def api(engine):
    async with serving(job_service(engine)) as (channel, _):
        yield jg.JobServiceStub(channel), engine


async def count_jobs(engine) -> int:
    async with engine.connect() as c:
        return (await c.execute(select(func.count()).select_from(jobs))).scalar_one()


def ts(seconds: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds)


BAD_INPUTS = [
    ("queue syntax", js.CreateJobRequest(queue="Bad Queue!"), "queue"),
    ("missing queue", js.CreateJobRequest(queue=""), "queue"),
    ("schedule_time before 1970", js.CreateJobRequest(queue="q", schedule_time=ts(-86400)), "schedule_time"),
    (
        "schedule_time after 9999",
        js.CreateJobRequest(queue="q", schedule_time=ts(253402300800 + 86400)),
        "schedule_time",
    ),
    ("negative delay", js.CreateJobRequest(queue="q", delay=duration_pb2.Duration(seconds=-1)), "delay"),
    (
        "schedule_time and delay",
        js.CreateJobRequest(
            queue="q", schedule_time=ts(2_000_000_000), delay=duration_pb2.Duration(seconds=1)
        ),
        "delay",
    ),
    ("oversized payload", js.CreateJobRequest(queue="q", payload=b"x" * (256 * 1024 + 1)), "payload"),
    ("max_attempts 0", js.CreateJobRequest(queue="q", max_attempts=0), "max_attempts"),
    ("malformed request_id", js.CreateJobRequest(queue="q", request_id="not-a-uuid"), "request_id"),
    (
        "deadline before schedule",
        js.CreateJobRequest(queue="q", schedule_time=ts(2_000_000_000), deadline=ts(1_999_999_999)),
        "deadline",
    ),
]


@pytest.mark.parametrize("label,req,field", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
async def test_bad_input_is_invalid_argument_with_field_violation_and_writes_nothing(api, label, req, field):
    stub, engine = api
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.CreateJob(req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status, info, bad = decode(e.value)
    assert info.reason == "INVALID_FIELD" and info.domain == "gnomon.dev"
    assert [v.field for v in bad.field_violations] == [field]
    assert "Traceback" not in e.value.details()
    assert await count_jobs(engine) == 0


async def test_deadline_checked_against_database_clock_with_delay(api):
    stub, engine = api
    past = datetime.now(UTC) - timedelta(hours=1)
    dl = timestamp_pb2.Timestamp()
    dl.FromDatetime(past)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.CreateJob(
            js.CreateJobRequest(queue="q", delay=duration_pb2.Duration(seconds=5), deadline=dl)
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in decode(e.value)[2].field_violations] == ["deadline"]
    assert await count_jobs(engine) == 0


async def test_create_then_get_round_trips_fields(api):
    stub, _ = api
    when = ts(2_000_000_000)
    job = (
        await stub.CreateJob(
            js.CreateJobRequest(
                parent="namespaces/acme",
                queue="emails",
                payload=b'{"x":1}',
                schedule_time=when,
                max_attempts=5,
                idempotency_key="order-42",
            )
        )
    ).job
    assert job.name.startswith("namespaces/acme/jobs/")
    assert job.state == job_pb2.JOB_STATE_SCHEDULED and job.version == 1 and job.attempt == 0
    assert job.schedule_time.seconds == 2_000_000_000 and job.max_attempts == 5
    got = (await stub.GetJob(js.GetJobRequest(name=job.name))).job
    assert got == job
    assert got.idempotency_key == "order-42" and got.payload == b'{"x":1}'


async def test_delay_is_applied_from_the_database_clock(api):
    stub, _ = api
    job = (await stub.CreateJob(js.CreateJobRequest(queue="q", delay=duration_pb2.Duration(seconds=90)))).job
    assert job.schedule_time.ToDatetime() - job.create_time.ToDatetime() == timedelta(seconds=90)


async def test_get_unknown_job_is_not_found_and_other_namespace_is_invisible(api):
    stub, _ = api
    job = (await stub.CreateJob(js.CreateJobRequest(parent="namespaces/a", queue="q"))).job
    other = job.name.replace("namespaces/a/", "namespaces/b/")
    for name in (f"namespaces/a/jobs/{uuid.uuid4()}", other):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.GetJob(js.GetJobRequest(name=name))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert decode(e.value)[1].reason == "JOB_NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.GetJob(js.GetJobRequest(name="jobs/x"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_request_id_same_request_returns_original_different_request_already_exists(api):
    stub, engine = api
    rid = str(uuid.uuid4())
    first = (await stub.CreateJob(js.CreateJobRequest(queue="q", payload=b"a", request_id=rid))).job
    again = (await stub.CreateJob(js.CreateJobRequest(queue="q", payload=b"a", request_id=rid))).job
    assert again.name == first.name and again.request_id == rid
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.CreateJob(js.CreateJobRequest(queue="q", payload=b"b", request_id=rid))
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert decode(e.value)[1].reason == "REQUEST_ID_REUSED"
    assert await count_jobs(engine) == 1
    # the same request_id in another namespace is a different job
    other = (
        await stub.CreateJob(
            js.CreateJobRequest(parent="namespaces/x", queue="q", payload=b"a", request_id=rid)
        )
    ).job
    assert other.name != first.name


async def test_list_pages_through_all_jobs_filtered_by_queue_and_state(api):
    stub, _ = api
    names = set()
    for i in range(7):
        names.add((await stub.CreateJob(js.CreateJobRequest(queue="a" if i % 2 else "b"))).job.name)
    seen, token, pages = [], "", 0
    while True:
        r = await stub.ListJobs(js.ListJobsRequest(page_size=3, page_token=token))
        seen += [j.name for j in r.jobs]
        pages += 1
        token = r.next_page_token
        if not token:
            break
    assert pages == 3 and len(seen) == 7 and set(seen) == names
    only_a = await stub.ListJobs(js.ListJobsRequest(queue="a", page_size=100))
    assert len(only_a.jobs) == 3 and all(j.queue == "a" for j in only_a.jobs)
    none = await stub.ListJobs(js.ListJobsRequest(state=job_pb2.JOB_STATE_SUCCEEDED))
    assert len(none.jobs) == 0
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ListJobs(js.ListJobsRequest(queue="b", page_token=r.next_page_token or "garbage"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in decode(e.value)[2].field_violations] == ["page_token"]


async def test_batch_create_is_atomic_and_names_the_bad_item(api):
    stub, engine = api
    good = [js.CreateJobRequest(queue="bulk", payload=str(i).encode()) for i in range(5)]
    bad = good + [js.CreateJobRequest(queue="Bad!"), js.CreateJobRequest(queue="bulk", max_attempts=0)]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.BatchCreateJobs(js.BatchCreateJobsRequest(requests=bad))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in decode(e.value)[2].field_violations] == [
        "requests[5].queue",
        "requests[6].max_attempts",
    ]
    assert await count_jobs(engine) == 0
    r = await stub.BatchCreateJobs(
        js.BatchCreateJobsRequest(
            parent="namespaces/acme",
            requests=good + [js.CreateJobRequest(queue="bulk", delay=duration_pb2.Duration(seconds=60))],
        )
    )
    assert [j.payload for j in r.jobs[:5]] == [b"0", b"1", b"2", b"3", b"4"]
    assert all(
        j.name.startswith("namespaces/acme/jobs/") and j.state == job_pb2.JOB_STATE_SCHEDULED for j in r.jobs
    )
    assert r.jobs[5].schedule_time.ToDatetime() - r.jobs[5].create_time.ToDatetime() == timedelta(seconds=60)
    assert await count_jobs(engine) == 6
    # a reused request_id with a different request fails the whole batch
    rid = str(uuid.uuid4())
    await stub.CreateJob(js.CreateJobRequest(queue="bulk", request_id=rid))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.BatchCreateJobs(
            js.BatchCreateJobsRequest(requests=good + [js.CreateJobRequest(queue="other", request_id=rid)])
        )
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert await count_jobs(engine) == 7
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.BatchCreateJobs(js.BatchCreateJobsRequest())
    assert [v.field for v in decode(e.value)[2].field_violations] == ["requests"]
