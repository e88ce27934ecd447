"""Namespace quotas on the API's write paths (max_create_rate, max_pending_jobs, max_schedules;
pending jobs also on TriggerSchedule, BackfillSchedule and ReplayDeadLetters):
RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) with a RetryInfo, and nothing written, over real gRPC with the
authenticating server (gnomon_access_support) and a real PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import timestamp_pb2
from grpc_status import rpc_status

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb
from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon_access_support import bearer, count_jobs, create, refused, retry_info, serving_api
from gnomon_test_support import decode


@pytest.fixture
async def api(engine):
    async with serving_api(engine) as a:
        yield a


async def test_quotas_refuse_with_retry_info_and_write_nothing(api):
    md = bearer(api.root)
    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="slow", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_create_rate=0.01))
        ),
        metadata=md,
    )
    await api.jobs.CreateJob(create("slow"), metadata=md)  # the one token of the bucket
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.jobs.CreateJob(create("slow"), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = rpc_status.from_call(err.value)
    _, info, _ = decode(err.value)
    assert (info.reason, info.metadata["quota"], info.metadata["namespace"]) == (
        "QUOTA_EXCEEDED",
        "max_create_rate",
        "slow",
    )
    delay = retry_info(status)
    assert delay is not None and delay.retry_delay.seconds >= 90  # 1 token at 0.01/s
    assert await count_jobs(api.engine, "slow") == 1

    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="small", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_pending_jobs=2))
        ),
        metadata=md,
    )
    batch = js.BatchCreateJobsRequest(parent="namespaces/small", requests=[create("small")] * 3)
    _, info, _ = await refused(
        api.jobs.BatchCreateJobs(batch, metadata=md), grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    assert info.metadata["quota"] == "max_pending_jobs"
    assert await count_jobs(api.engine, "small") == 0
    await api.jobs.CreateJob(create("small"), metadata=md)
    await api.jobs.CreateJob(create("small"), metadata=md)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.jobs.CreateJob(create("small"), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert retry_info(rpc_status.from_call(err.value)).retry_delay.seconds == 1
    assert await count_jobs(api.engine, "small") == 2

    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="sched", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_schedules=1))
        ),
        metadata=md,
    )
    sched = schedule_pb2.Schedule(cron="0 * * * *", job_template=schedule_pb2.JobTemplate(queue="q"))
    await api.schedules.CreateSchedule(
        spb.CreateScheduleRequest(parent="namespaces/sched", schedule_id="one", schedule=sched), metadata=md
    )
    _, info, _ = await refused(
        api.schedules.CreateSchedule(
            spb.CreateScheduleRequest(parent="namespaces/sched", schedule_id="two", schedule=sched),
            metadata=md,
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert (info.reason, info.metadata["quota"], info.metadata["limit"]) == (
        "QUOTA_EXCEEDED",
        "max_schedules",
        "1",
    )
    listed = await api.schedules.ListSchedules(
        spb.ListSchedulesRequest(parent="namespaces/sched"), metadata=md
    )
    assert [s.name for s in listed.schedules] == ["namespaces/sched/schedules/one"]
    # a namespace without a row has no limits
    await api.jobs.BatchCreateJobs(
        js.BatchCreateJobsRequest(parent="namespaces/free", requests=[create("free")] * 5), metadata=md
    )
    assert await count_jobs(api.engine, "free") == 5


async def test_sdk_error_carries_the_retry_delay(api):
    from gnomon.sdk import AsyncClient, GnomonError, NamespaceQuotas

    async with AsyncClient(api.address, namespace="capped", api_key=api.root) as c:
        await c.create_namespace("capped", quotas=NamespaceQuotas(max_pending_jobs=1))
        await c.create_job("q", b"", delay=3600)
        with pytest.raises(GnomonError) as e:
            await c.create_job("q", b"", delay=3600)
    assert (e.value.reason, e.value.metadata["quota"]) == ("QUOTA_EXCEEDED", "max_pending_jobs")
    assert e.value.retry_delay is not None and e.value.retry_delay.total_seconds() == 1.0


async def _occurrences(api, md, schedule: str) -> list:
    got = await api.schedules.ListScheduleOccurrences(
        spb.ListScheduleOccurrencesRequest(parent=schedule), metadata=md
    )
    return list(got.occurrences)


def _replay(ns: str, max_jobs: int, *, dry_run: bool = False) -> dpb.ReplayDeadLettersRequest:
    return dpb.ReplayDeadLettersRequest(
        parent=f"namespaces/{ns}",
        max_rate=1.0,
        max_jobs=max_jobs,
        reason="quota test",
        request_id=str(uuid.uuid4()),
        dry_run=dry_run,
    )


async def test_trigger_backfill_and_replay_respect_max_pending_jobs(api):
    md = bearer(api.root)
    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="full", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_pending_jobs=1))
        ),
        metadata=md,
    )
    sched = schedule_pb2.Schedule(cron="0 * * * *", job_template=schedule_pb2.JobTemplate(queue="q"))
    name = (
        await api.schedules.CreateSchedule(
            spb.CreateScheduleRequest(parent="namespaces/full", schedule_id="hourly", schedule=sched),
            metadata=md,
        )
    ).schedule.name
    await api.jobs.CreateJob(create("full"), metadata=md)  # the namespace is now at its limit
    before = await _occurrences(api, md, name)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.schedules.TriggerSchedule(spb.TriggerScheduleRequest(name=name), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    _, info, _ = decode(err.value)
    assert (info.reason, info.metadata["quota"]) == ("QUOTA_EXCEEDED", "max_pending_jobs")
    assert retry_info(rpc_status.from_call(err.value)) is not None

    end = timestamp_pb2.Timestamp()
    end.FromDatetime(datetime.now(UTC) - timedelta(minutes=1))
    start = timestamp_pb2.Timestamp()
    start.FromDatetime(datetime.now(UTC) - timedelta(hours=5))
    _, info, _ = await refused(
        api.schedules.BackfillSchedule(
            spb.BackfillScheduleRequest(name=name, start_time=start, end_time=end), metadata=md
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert info.metadata["quota"] == "max_pending_jobs"

    # a replay is admitted for the jobs it would write (min(matching dead letters, max_jobs)), not
    # for max_jobs: with no dead letter it writes none, so it is answered even at the limit
    nothing = await api.dead_letters.ReplayDeadLetters(_replay("full", 1), metadata=md)
    assert (nothing.matched_count, nothing.replayed_count) == (0, 0)
    # a dry run writes nothing, so it is answered
    dry = await api.dead_letters.ReplayDeadLetters(_replay("full", 1, dry_run=True), metadata=md)
    assert dry.dry_run and dry.replayed_count == 0

    assert await count_jobs(api.engine, "full") == 1
    assert await _occurrences(api, md, name) == before


async def test_replay_is_admitted_for_what_it_writes_not_for_max_jobs(api):
    md = bearer(api.root)
    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="roomy", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_pending_jobs=3))
        ),
        metadata=md,
    )
    # max_jobs 4 over a limit of 3, but no dead letter matches: 0 jobs to write, admitted
    ok = await api.dead_letters.ReplayDeadLetters(_replay("roomy", 4), metadata=md)
    assert (ok.matched_count, ok.replayed_count) == (0, 0)
    # (a replay refused for the dead letters it would write: test_admission_isolation.py)
    # below the limit a trigger is admitted and creates its job
    sched = schedule_pb2.Schedule(cron="0 * * * *", job_template=schedule_pb2.JobTemplate(queue="q"))
    name = (
        await api.schedules.CreateSchedule(
            spb.CreateScheduleRequest(parent="namespaces/roomy", schedule_id="s", schedule=sched),
            metadata=md,
        )
    ).schedule.name
    got = await api.schedules.TriggerSchedule(spb.TriggerScheduleRequest(name=name), metadata=md)
    assert got.job.name.startswith("namespaces/roomy/jobs/")
    assert await count_jobs(api.engine, "roomy") == 1
