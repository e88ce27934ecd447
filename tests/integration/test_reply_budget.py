"""List replies stop at the reply byte budget (``GNOMON_REPLY_BUDGET_BYTES``, docs/api.md "Paging"):
with many large payloads every page stays under the budget and paging returns every item exactly
once, through the real JobService and DeadLetterService on a fresh database."""

from __future__ import annotations

import pytest

import gnomon_dlq_support as dlq
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as dgrpc
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jgrpc
from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon._proto.gnomon.v1 import schedule_service_pb2_grpc as sgrpc
from gnomon.api.dead_letter_servicer import DeadLetterServicer
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.api.servicer import JobServicer
from gnomon_test_support import own_shards, serving

pytestmark = pytest.mark.asyncio
BUDGET = 1024 * 1024
PAYLOAD = 200 * 1024


async def test_list_jobs_pages_stay_under_the_budget_and_return_every_job_once(engine):
    servicer = JobServicer.on(engine, region="local", shards=8)
    servicer.reply_budget_bytes = BUDGET
    async with serving((jgrpc.add_JobServiceServicer_to_server, servicer, "gnomon.v1.JobService")) as (ch, _):
        stub = jgrpc.JobServiceStub(ch)
        created = set()
        for i in range(23):
            job = (await stub.CreateJob(js.CreateJobRequest(queue="q", payload=bytes([i]) * PAYLOAD))).job
            created.add(job.name)
        seen: list[str] = []
        pages, token = 0, ""
        while True:
            reply = await stub.ListJobs(js.ListJobsRequest(page_size=1000, page_token=token))
            pages += 1
            assert reply.ByteSize() <= BUDGET
            assert 1 <= len(reply.jobs) <= BUDGET // PAYLOAD
            assert all(len(j.payload) == PAYLOAD for j in reply.jobs)
            seen += [j.name for j in reply.jobs]
            token = reply.next_page_token
            if not token:
                break
        assert len(seen) == len(set(seen)) == 23 and set(seen) == created
        assert pages >= 23 // (BUDGET // PAYLOAD)


async def test_list_dead_letters_pages_stay_under_the_budget(engine):
    await own_shards(engine, dlq.TOKEN, owner="test")
    made = await dlq.make_dead(engine, 9, payload=b"x" * PAYLOAD, error="e" * 4000)
    servicer = DeadLetterServicer.on(engine, shards=dlq.SHARDS)
    servicer.reply_budget_bytes = BUDGET
    service = (dgrpc.add_DeadLetterServiceServicer_to_server, servicer, "gnomon.v1.DeadLetterService")
    async with serving(service) as (ch, _):
        stub = dgrpc.DeadLetterServiceStub(ch)
        seen: list[str] = []
        token = ""
        while True:
            reply = await stub.ListDeadLetters(dpb.ListDeadLettersRequest(page_size=1000, page_token=token))
            assert reply.ByteSize() <= BUDGET and 1 <= len(reply.dead_letters) < 9
            seen += [d.job.name for d in reply.dead_letters]
            token = reply.next_page_token
            if not token:
                break
        assert len(seen) == len(set(seen)) == len(made) == 9


async def test_list_schedules_pages_stay_under_the_budget(engine):
    servicer = ScheduleServicer.on(engine, region="local", shards=8)
    servicer.reply_budget_bytes = BUDGET
    service = (sgrpc.add_ScheduleServiceServicer_to_server, servicer, "gnomon.v1.ScheduleService")
    async with serving(service) as (ch, _):
        stub = sgrpc.ScheduleServiceStub(ch)
        for i in range(11):
            template = schedule_pb2.JobTemplate(queue="q", payload=b"s" * PAYLOAD)
            await stub.CreateSchedule(
                spb.CreateScheduleRequest(
                    schedule_id=f"s{i}",
                    schedule=schedule_pb2.Schedule(cron="0 0 1 1 *", job_template=template, paused=True),
                )
            )
        seen: list[str] = []
        token = ""
        while True:
            reply = await stub.ListSchedules(spb.ListSchedulesRequest(page_size=1000, page_token=token))
            assert reply.ByteSize() <= BUDGET and 1 <= len(reply.schedules) < 11
            seen += [s.name for s in reply.schedules]
            token = reply.next_page_token
            if not token:
                break
        assert sorted(seen) == sorted(f"namespaces/default/schedules/s{i}" for i in range(11))
