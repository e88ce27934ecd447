"""The fake dispatcher the SDK worker tests talk to (test_sdk_worker.py, test_sdk_worker_streams.py):
a WorkerService.Lease servicer with scriptable acks and a ClusterService listing dispatchers, plus
assignments and waiting helpers. Served on a loopback port by the ``fake`` fixture of conftest.py.
"""

from __future__ import annotations

import asyncio
import collections
import time
from datetime import timedelta

import grpc
from google.protobuf import duration_pb2

from gnomon._proto.gnomon.v1 import cluster_service_pb2, cluster_service_pb2_grpc
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.sdk import Worker


def assignment(i: int, *, lease_s: float = 30.0, payload: bytes = b"", token: int = 5) -> wpb.Assignment:
    a = wpb.Assignment(
        attempt=wpb.AttemptRef(
            job=f"namespaces/default/jobs/job-{i}", attempt=1, version=2, fencing_token=token
        ),
        queue="q",
        payload=payload,
        idempotency_key=f"idem-{i}",
        max_attempts=3,
    )
    a.lease_duration.CopyFrom(
        duration_pb2.Duration(nanos=int(lease_s * 1e9) % 1_000_000_000, seconds=int(lease_s))
    )
    return a


class FakeDispatcher(wgrpc.WorkerServiceServicer):
    """Assigns ``pending`` while the stream has credits; acks accepts/heartbeats/results/releases
    according to the policies below; records every worker message."""

    def __init__(self, heartbeat_interval: float = 5.0):
        self.heartbeat_interval = heartbeat_interval
        self.pending: collections.deque[wpb.Assignment] = collections.deque()
        self.received: list[wpb.LeaseRequest] = []
        self.hellos: list[wpb.WorkerHello] = []
        self.streams = 0
        self.credits = 0
        self.accept_ok = lambda ref: (True, "")
        self.heartbeat_ack = lambda ref: {"ok": True}
        self.ack_results = True
        self.result_ack = lambda res: (True, "")
        self.break_after_results = False  # abort the stream (UNAVAILABLE) on the first results message
        self.reject_hello: grpc.StatusCode | None = None
        self.changed = asyncio.Event()
        self._push: asyncio.Event | None = None
        self._out: asyncio.Queue | None = None

    # -- inspection helpers --
    def of_kind(self, kind: str) -> list:
        return [getattr(m, kind) for m in self.received if m.WhichOneof("kind") == kind]

    def refs(self, kind: str) -> list[str]:
        out: list[str] = []
        for m in self.of_kind(kind):
            out.extend(r.job for r in (m.attempts if kind != "results" else [x.attempt for x in m.results]))
        return out

    def results(self) -> dict[str, wpb.AttemptResult]:
        return {r.attempt.job: r for m in self.of_kind("results") for r in m.results}

    def kill_stream(self) -> None:
        """Ends the current stream with UNAVAILABLE."""
        assert self._out is not None, "no stream is open"
        self._out.put_nowait("abort")

    def add(self, *assignments: wpb.Assignment) -> None:
        self.pending.extend(assignments)
        if self._push is not None:
            self._push.set()

    async def Lease(self, request_iterator, context):
        first = await context.read()
        if self.reject_hello is not None:
            await context.abort(self.reject_hello, "queue name invalid")
        assert first.WhichOneof("kind") == "hello"
        self.streams += 1
        stream_no = self.streams
        self.hellos.append(first.hello)
        self.credits = first.hello.credits
        self._push = push = asyncio.Event()
        self._out = out = asyncio.Queue()
        welcome = wpb.DispatcherWelcome(dispatcher_id="fake-1", region="local")
        welcome.heartbeat_interval.FromTimedelta(timedelta(seconds=self.heartbeat_interval))
        await context.write(wpb.LeaseResponse(welcome=welcome))

        async def pusher():
            while True:
                await push.wait()
                push.clear()
                batch = []
                while self.pending and self.credits > 0:
                    batch.append(self.pending.popleft())
                    self.credits -= 1
                if batch:
                    out.put_nowait(wpb.LeaseResponse(assignments=wpb.Assignments(assignments=batch)))

        async def reader():
            while True:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    out.put_nowait(None)
                    return
                self.received.append(msg)
                self.changed.set()
                kind = msg.WhichOneof("kind")
                acks = []
                if kind == "credits":
                    self.credits += msg.credits.credits
                    push.set()
                elif kind == "accepts":
                    for r in msg.accepts.attempts:
                        ok, reason = self.accept_ok(r)
                        acks.append(wpb.Ack(attempt=r, kind=wpb.ACK_KIND_ACCEPT, ok=ok, reason=reason))
                elif kind == "heartbeats":
                    for r in msg.heartbeats.attempts:
                        acks.append(wpb.Ack(attempt=r, kind=wpb.ACK_KIND_HEARTBEAT, **self.heartbeat_ack(r)))
                elif kind == "results":
                    if self.break_after_results and stream_no == 1:
                        out.put_nowait("abort")
                        return
                    if self.ack_results:
                        for res in msg.results.results:
                            ok, reason = self.result_ack(res)
                            acks.append(
                                wpb.Ack(attempt=res.attempt, kind=wpb.ACK_KIND_RESULT, ok=ok, reason=reason)
                            )
                elif kind == "releases":
                    for r in msg.releases.attempts:
                        acks.append(wpb.Ack(attempt=r, kind=wpb.ACK_KIND_RELEASE, ok=True))
                if acks:
                    out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=acks)))

        tasks = [asyncio.create_task(pusher()), asyncio.create_task(reader())]
        push.set()
        try:
            while True:
                item = await out.get()
                if item is None:
                    return
                if item == "abort":
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "dispatcher draining")
                await context.write(item)
        finally:
            for t in tasks:
                t.cancel()


class FakeCluster(cluster_service_pb2_grpc.ClusterServiceServicer):
    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.calls = 0

    async def ListDispatchers(self, request, context):
        self.calls += 1
        return cluster_service_pb2.ListDispatchersResponse(
            dispatchers=[
                cluster_service_pb2.Dispatcher(dispatcher_id=f"d{i}", region="local", address=a)
                for i, a in enumerate(self.addresses)
            ]
        )


async def until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def start(worker: Worker) -> asyncio.Task:
    task = asyncio.create_task(worker.run_async())
    assert await worker.wait_connected(5)
    return task


async def stop(worker: Worker, task: asyncio.Task) -> None:
    worker.stop()
    await asyncio.wait_for(task, 15)
