"""Namespace quotas of the worker stream (``max_queues_per_hello``, ``max_worker_streams``): the
dispatcher's real Lease handler over real gRPC in this event loop, the namespace's quotas read from a
real PostgreSQL through the dispatcher's namespace cache. A refused hello ends the stream with
RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) and a RetryInfo; no session is registered for it."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.quotas import NamespaceCache, Quotas
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage import namespaces as ns_store
from gnomon.common.storage.namespaces import NamespaceRecord
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.writes import WriteBatcher
from gnomon_test_support import decode


@pytest.fixture
async def dispatcher(engine):
    async with engine.begin() as c:
        await ns_store.create_namespace(
            c, NamespaceRecord("capped", "", 0, Quotas(max_worker_streams=1, max_queues_per_hello=2))
        )
    writes = WriteBatcher(engine, max_batch=100, flushers=1)
    writes.start()
    registry = SessionRegistry()
    servicer = WorkerServicer(
        registry,
        writes,
        dispatcher_id="disp-A",
        region="local",
        heartbeat_interval_s=1,
        on_credits=lambda: None,
        quotas=NamespaceCache(ns_store.quotas_loader(engine)),
    )
    server = GrpcServer(
        "127.0.0.1:0",
        [(wgrpc.add_WorkerServiceServicer_to_server, servicer, "gnomon.v1.WorkerService")],
        authenticator=Authenticator(None, insecure=True),
    )
    await server.start()
    await server.set_serving(True)
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield wgrpc.WorkerServiceStub(channel), registry, servicer
    finally:
        await channel.close()
        await server.stop(0)
        await writes.stop()


def hello(namespace: str, queues: list[str]) -> wpb.LeaseRequest:
    return wpb.LeaseRequest(
        hello=wpb.WorkerHello(worker_id="w", namespace=namespace, queues=queues, credits=1)
    )


async def open_stream(stub, first: wpb.LeaseRequest):
    """A Lease stream whose first message is ``first`` (further sends go to the returned queue)."""
    out: asyncio.Queue = asyncio.Queue()
    await out.put(first)

    async def reqs():
        while (item := await out.get()) is not None:
            yield item

    return stub.Lease(reqs()), out


async def refusal(call) -> tuple:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in call:
            pass
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    _, info, _ = decode(err.value)
    retry = None
    for d in rpc_status.from_call(err.value).details:
        if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            d.Unpack(retry)
    return info, retry


async def test_hello_naming_too_many_queues_is_refused(dispatcher):
    stub, registry, servicer = dispatcher
    call, out = await open_stream(stub, hello("capped", ["a", "b", "c"]))
    info, retry = await refusal(call)
    assert (info.reason, info.metadata["quota"], info.metadata["limit"]) == (
        "QUOTA_EXCEEDED",
        "max_queues_per_hello",
        "2",
    )
    assert retry is not None
    assert registry.sessions == {}
    await out.put(None)


async def test_second_stream_of_a_namespace_is_refused_while_the_first_is_open(dispatcher):
    stub, registry, servicer = dispatcher
    first, out1 = await open_stream(stub, hello("capped", ["a", "b"]))
    welcome = await first.read()
    assert welcome.WhichOneof("kind") == "welcome"
    second, out2 = await open_stream(stub, hello("namespaces/capped", ["a"]))
    info, retry = await refusal(second)
    assert (info.metadata["quota"], info.metadata["namespace"]) == ("max_worker_streams", "capped")
    assert retry is not None and retry.retry_delay.seconds == 1
    # other namespaces (no row: no quotas) are not affected
    other, out3 = await open_stream(stub, hello("free", ["a", "b", "c"]))
    assert (await other.read()).WhichOneof("kind") == "welcome"
    assert sorted(s.namespace for s in registry.sessions.values()) == ["capped", "free"]
    for out in (out1, out2, out3):
        await out.put(None)
    first.cancel()
    other.cancel()


async def test_streams_beyond_the_dispatcher_cap_are_refused_before_the_hello(dispatcher):
    stub, registry, servicer = dispatcher
    servicer_cap = 2
    servicer.max_streams = servicer_cap  # GNOMON_DISPATCHER_MAX_STREAMS
    calls = []
    for i in range(servicer_cap):
        call, out = await open_stream(stub, hello(f"ns{i}", ["a"]))
        assert (await call.read()).WhichOneof("kind") == "welcome"
        calls.append((call, out))
    extra, out_x = await open_stream(stub, hello("ns9", ["a"]))
    info, retry = await refusal(extra)
    assert (info.metadata["quota"], info.metadata["limit"]) == ("dispatcher_streams", "2")
    assert retry is not None and retry.retry_delay.seconds == 5
    assert len(registry.sessions) == servicer_cap
    for call, out in [*calls, (extra, out_x)]:
        await out.put(None)
        call.cancel()
