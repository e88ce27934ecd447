"""gnomon.sdk.Client / AsyncClient against an in-process fake JobService + ClusterService."""

from __future__ import annotations

import inspect
import threading
from concurrent import futures
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
)
from gnomon.sdk import AsyncClient, Client, DispatcherInfo, GnomonError
from gnomon_test_support import add_port

UTC = UTC


class FakeJobs(job_service_pb2_grpc.JobServiceServicer, cluster_service_pb2_grpc.ClusterServiceServicer):
    def __init__(self) -> None:
        self.jobs: list[job_pb2.Job] = []
        self.requests: list[Message] = []  # every request received, in order

    def CreateJob(self, request, context):
        self.requests.append(request)
        if request.queue == "BAD":
            detail = any_pb2.Any()
            detail.Pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field="queue", description="must be lower case"
                        )
                    ]
                )
            )
            info = any_pb2.Any()
            info.Pack(error_details_pb2.ErrorInfo(reason="INVALID_FIELD", domain="gnomon.dev"))
            context.abort_with_status(
                rpc_status.to_status(
                    status_pb2.Status(
                        code=code_pb2.INVALID_ARGUMENT,
                        message="queue: must be lower case",
                        details=[info, detail],
                    )
                )
            )
        job = job_pb2.Job(
            name=f"{request.parent}/jobs/id-{len(self.jobs)}",
            queue=request.queue,
            payload=request.payload,
            state=job_pb2.JOB_STATE_SCHEDULED,
            version=1,
            max_attempts=request.max_attempts if request.HasField("max_attempts") else 3,
        )
        if request.HasField("schedule_time"):
            job.schedule_time.CopyFrom(request.schedule_time)
        self.jobs.append(job)
        return job_service_pb2.CreateJobResponse(job=job)

    def GetJob(self, request, context):
        self.requests.append(request)
        for j in self.jobs:
            if j.name == request.name:
                return job_service_pb2.GetJobResponse(job=j)
        context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.name} not found")

    def ListJobs(self, request, context):
        self.requests.append(request)
        start = int(request.page_token or 0)
        size = request.page_size or 100
        matching = [j for j in self.jobs if not request.queue or j.queue == request.queue]
        page = matching[start : start + size]
        nxt = str(start + size) if start + size < len(matching) else ""
        return job_service_pb2.ListJobsResponse(jobs=page, next_page_token=nxt)

    def ListDispatchers(self, request, context):
        return cluster_service_pb2.ListDispatchersResponse(
            dispatchers=[
                cluster_service_pb2.Dispatcher(
                    dispatcher_id="d1", region=request.region or "local", address="127.0.0.1:1"
                )
            ]
        )


@pytest.fixture(scope="module")
def api():
    server = grpc.server(futures.ThreadPoolExecutor(4))
    fake = FakeJobs()
    job_service_pb2_grpc.add_JobServiceServicer_to_server(fake, server)
    cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server(fake, server)
    port = add_port(server)
    server.start()
    fake.address = f"127.0.0.1:{port}"
    yield fake
    server.stop(0)


def test_create_get_and_errors(api):
    when = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
    with Client(api.address, namespace="acme") as c:
        job = c.create_job("emails", {"to": "x"}, schedule_time=when, max_attempts=5)
        assert job.name.startswith("namespaces/acme/jobs/")
        assert (job.state, job.queue, job.max_attempts, job.schedule_time) == ("SCHEDULED", "emails", 5, when)
        assert job.json() == {"to": "x"}
        assert c.get_job(job.id) == job
        assert c.get_job(job.name) == job
        assert api.requests[-1].name == job.name
        with pytest.raises(GnomonError) as info:
            c.get_job("missing")
        assert info.value.code is grpc.StatusCode.NOT_FOUND
        assert info.value.message == "job namespaces/acme/jobs/missing not found"
        with pytest.raises(GnomonError) as info:
            c.create_job("BAD")
        e = info.value
        assert (e.code, e.reason, e.domain) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_FIELD",
            "gnomon.dev",
        )
        assert e.field_violations == [("queue", "must be lower case")]


def test_list_jobs_follows_page_tokens(api):
    with Client(api.address, namespace="pages") as c:
        names = [c.create_job("paged", str(i)).name for i in range(7)]
        page, token = c.list_jobs_page(queue="paged", page_size=3)
        assert [j.name for j in page] == names[:3] and token == "3"
        assert [j.name for j in c.list_jobs(queue="paged", page_size=3)] == names
        assert api.requests[-1].page_token == "6" and api.requests[-1].parent == "namespaces/pages"
        assert c.list_dispatchers("eu") == [DispatcherInfo("d1", "eu", "127.0.0.1:1")]


async def test_async_client(api):
    async with AsyncClient(api.address) as c:
        job = await c.create_job("async-q", b"\x01", delay=1.5)
        assert job.payload == b"\x01" and job.name.startswith("namespaces/default/jobs/")
        assert api.requests[-1].delay.seconds == 1 and api.requests[-1].delay.nanos == 500_000_000
        assert (await c.get_job(job.name)).name == job.name
        assert [j.name async for j in c.list_jobs(queue="async-q", page_size=1)] == [job.name]
        with pytest.raises(GnomonError) as info:
            await c.create_job("BAD")
        assert info.value.field_violations == [("queue", "must be lower case")]
        assert len(await c.list_dispatchers()) == 1


def test_the_sync_client_mirrors_every_async_method():
    """Client is generated from AsyncClient: same names, signatures and docstrings, nothing missing."""
    public = {
        n
        for n in dir(AsyncClient)
        if not n.startswith("_") and callable(getattr(AsyncClient, n)) and n != "close"
    }
    assert public <= set(dir(Client))
    for name in public:
        sync, coro = getattr(Client, name), getattr(AsyncClient, name)
        assert sync.__doc__ == coro.__doc__ and sync.__doc__, name
        assert inspect.signature(sync) == inspect.signature(coro), name


def test_sync_client_close_is_idempotent_and_stops_its_thread(api):
    before = set(threading.enumerate())
    c = Client(api.address, namespace="closing")
    assert c.namespace == "closing" and c.api == api.address and c.timeout == 30.0
    portal = [t for t in threading.enumerate() if t not in before and t.name.startswith("gnomon-client-")]
    assert len(portal) == 1 and portal[0].is_alive()
    assert c.list_dispatchers() == [DispatcherInfo("d1", "local", "127.0.0.1:1")]
    c.close()
    c.close()
    assert not portal[0].is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        c.get_job("x")
