"""Progress checkpoints in the SDK: ``ctx.checkpoint()`` validation, ``ctx.last_checkpoint``, and the
wire behaviour against an in-process fake dispatcher (a real grpc.aio server speaking
WorkerService.Lease; no database): checkpoints ride on heartbeats, only the latest is sent, at most one
is in flight per attempt, and a transient refusal is re-sent."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import grpc
import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.sdk import Cancelled, JobContext, Worker
from gnomon.sdk.context import MAX_CHECKPOINT_BYTES
from gnomon.sdk.outgoing import OutgoingBuffer
from gnomon_test_support import add_port

pytestmark = pytest.mark.timeout(30)


def assignment(i: int, checkpoint: bytes = b"") -> wpb.Assignment:
    a = wpb.Assignment(
        attempt=wpb.AttemptRef(job=f"namespaces/default/jobs/job-{i}", attempt=2, version=4, fencing_token=7),
        queue="q",
        idempotency_key=f"idem-{i}",
        max_attempts=3,
        checkpoint=checkpoint,
    )
    a.lease_duration.FromTimedelta(timedelta(seconds=30))
    return a


class CheckpointDispatcher(wgrpc.WorkerServiceServicer):
    """Assigns ``pending``; acks everything ok except checkpoints, answered by ``checkpoint_ack``
    (``(ok, reason)``) after ``checkpoint_delay`` seconds. Records each checkpoint received."""

    def __init__(self) -> None:
        self.pending: list[wpb.Assignment] = []
        self.checkpoints: list[tuple[str, bytes, float]] = []  # job, data, time received
        self.checkpoint_ack = lambda cp: (True, "")
        self.checkpoint_delay = 0.0
        self.results: list[wpb.AttemptResult] = []

    async def Lease(self, request_iterator, context):
        await context.read()
        welcome = wpb.DispatcherWelcome(dispatcher_id="fake", region="local")
        welcome.heartbeat_interval.FromTimedelta(timedelta(milliseconds=50))
        await context.write(wpb.LeaseResponse(welcome=welcome))
        await context.write(wpb.LeaseResponse(assignments=wpb.Assignments(assignments=self.pending)))
        out: asyncio.Queue = asyncio.Queue()

        async def ack_checkpoint(cp):
            await asyncio.sleep(self.checkpoint_delay)
            ok, reason = self.checkpoint_ack(cp)
            out.put_nowait(
                wpb.LeaseResponse(
                    acks=wpb.Acks(
                        acks=[wpb.Ack(attempt=cp.attempt, kind=wpb.ACK_KIND_CHECKPOINT, ok=ok, reason=reason)]
                    )
                )
            )

        async def reader():
            while True:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    out.put_nowait(None)
                    return
                kind = msg.WhichOneof("kind")
                acks = []
                if kind == "accepts":
                    acks = [
                        wpb.Ack(attempt=r, kind=wpb.ACK_KIND_ACCEPT, ok=True) for r in msg.accepts.attempts
                    ]
                elif kind == "heartbeats":
                    acks = [
                        wpb.Ack(attempt=r, kind=wpb.ACK_KIND_HEARTBEAT, ok=True)
                        for r in msg.heartbeats.attempts
                    ]
                    for cp in msg.heartbeats.checkpoints:
                        self.checkpoints.append((cp.attempt.job, bytes(cp.data), time.monotonic()))
                        asyncio.create_task(ack_checkpoint(cp))
                elif kind == "results":
                    self.results.extend(msg.results.results)
                    acks = [
                        wpb.Ack(attempt=r.attempt, kind=wpb.ACK_KIND_RESULT, ok=True)
                        for r in msg.results.results
                    ]
                if acks:
                    out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=acks)))

        task = asyncio.create_task(reader())
        try:
            while (item := await out.get()) is not None:
                await context.write(item)
        finally:
            task.cancel()


@pytest.fixture
async def fake():
    server = grpc.aio.server()
    disp = CheckpointDispatcher()
    wgrpc.add_WorkerServiceServicer_to_server(disp, server)
    port = add_port(server)
    await server.start()
    disp.address = f"127.0.0.1:{port}"
    try:
        yield disp
    finally:
        await server.stop(0)


async def until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def run(worker: Worker, body) -> None:
    task = asyncio.create_task(worker.run_async())
    try:
        assert await worker.wait_connected(5)
        await body()
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)


def test_checkpoint_validates_size_and_type_and_is_a_cancellation_point() -> None:
    ctx = JobContext(job="namespaces/default/jobs/j")
    assert ctx.last_checkpoint is None
    ctx.checkpoint(b"x" * MAX_CHECKPOINT_BYTES)  # exactly 64 KiB is fine
    with pytest.raises(ValueError, match="65537"):
        ctx.checkpoint(b"x" * (MAX_CHECKPOINT_BYTES + 1))  # refused whole, never truncated
    with pytest.raises(TypeError):
        ctx.checkpoint("text")  # type: ignore[arg-type]
    ctx.checkpoint(bytearray(b"ab"))
    assert ctx._checkpoint == (2, b"ab")
    ctx._cancel("cancel_requested")
    with pytest.raises(Cancelled):
        ctx.checkpoint(b"late")
    assert ctx._checkpoint == (2, b"ab")  # nothing saved when cancelled


def test_last_checkpoint_comes_from_the_assignment():
    assert JobContext.from_assignment(assignment(1, b"step=3")).last_checkpoint == b"step=3"
    assert JobContext.from_assignment(assignment(1)).last_checkpoint is None


def test_outgoing_buffer_rides_checkpoints_on_heartbeats_and_bounds_message_bytes():
    buf = OutgoingBuffer(max_checkpoint_bytes=100)
    refs = [wpb.AttemptRef(job=f"namespaces/default/jobs/{i}", attempt=1) for i in range(3)]
    cps = [wpb.Checkpoint(attempt=r, data=b"x" * 60) for r in refs]
    buf.set_heartbeats(refs, cps)
    msgs = [m.heartbeats for m in buf.take()]
    assert [len(m.attempts) for m in msgs] == [3, 0, 0]
    assert [len(m.checkpoints) for m in msgs] == [1, 1, 1]
    buf.set_heartbeats([], cps)  # no running attempt: nothing to send
    assert buf.take() == []


async def test_latest_checkpoint_is_sent_with_heartbeats_one_in_flight(fake):
    fake.pending = [assignment(1)]
    fake.checkpoint_delay = 0.3  # several heartbeats pass while one checkpoint is in flight
    started, release = threading.Event(), threading.Event()
    seen = {}

    def handler(ctx):
        seen["last"] = ctx.last_checkpoint
        for i in range(50):  # many checkpoints between heartbeats: only the latest counts
            ctx.checkpoint(f"step={i}".encode())
        started.set()
        release.wait(10)
        ctx.checkpoint(b"final")

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)

    async def body():
        await until(started.is_set)
        await until(lambda: len(fake.checkpoints) >= 1)
        release.set()
        await until(lambda: any(d == b"final" for _, d, _ in fake.checkpoints) or bool(fake.results))
        await until(lambda: bool(fake.results))

    await run(w, body)
    assert seen["last"] is None
    datas = [d for _, d, _ in fake.checkpoints]
    # coalesced: at most one intermediate value (a heartbeat could fall inside the loop), then the latest
    assert b"step=49" in datas and len(set(datas) - {b"step=49", b"final"}) <= 1
    assert len(datas) == len(set(datas))  # acknowledged data is never sent again
    # at most one in flight: each checkpoint went out only after the previous one's ack (0.3 s)
    times = [t for _, _, t in fake.checkpoints]
    assert all(b - a >= 0.25 for a, b in zip(times, times[1:]))


async def test_transiently_refused_checkpoint_is_sent_again(fake):
    fake.pending = [assignment(1)]
    answers = iter([(False, "DATABASE_UNAVAILABLE"), (True, "")])
    fake.checkpoint_ack = lambda cp: next(answers, (True, ""))
    release = threading.Event()

    def handler(ctx):
        ctx.checkpoint(b"progress")
        release.wait(10)

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)

    async def body():
        await until(lambda: len(fake.checkpoints) >= 2)
        await asyncio.sleep(0.3)  # acked now: no more re-sends
        n = len(fake.checkpoints)
        await asyncio.sleep(0.3)
        assert len(fake.checkpoints) == n
        release.set()
        await until(lambda: bool(fake.results))

    await run(w, body)
    assert [d for _, d, _ in fake.checkpoints] == [b"progress", b"progress"]


async def test_a_handler_can_wait_until_its_checkpoint_is_saved(fake):
    """``wait_checkpoint_saved`` returns only after an ok CHECKPOINT ack: not after the transient
    refusal that comes first; a checkpoint refused for good is never reported saved."""
    fake.pending = [assignment(1), assignment(2)]
    answers = {"job-1": iter([(False, "DATABASE_UNAVAILABLE"), (True, "")]), "job-2": iter([])}
    fake.checkpoint_ack = lambda cp: next(answers[cp.attempt.job.rsplit("/", 1)[1]], (False, "LEASE_EXPIRED"))
    seen: dict = {}

    async def handler(ctx):
        ctx.checkpoint(ctx.job.encode())
        seen[ctx.job] = {"before": ctx.checkpoint_saved}
        seen[ctx.job]["saved"] = await ctx.wait_checkpoint_saved(timeout=1.0)
        seen[ctx.job]["acks_seen"] = sum(1 for j, _, _ in fake.checkpoints if j == ctx.job)

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=2)

    async def body():
        await until(lambda: len(fake.results) == 2)

    await run(w, body)
    one, two = seen["namespaces/default/jobs/job-1"], seen["namespaces/default/jobs/job-2"]
    assert one == {"before": False, "saved": True, "acks_seen": 2}  # saved only after the second send
    assert two["before"] is False and two["saved"] is False  # refused for good: timed out, not saved
