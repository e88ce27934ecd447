"""gnomon.sdk.Worker against an in-process fake dispatcher (a real grpc.aio server on a loopback
port, speaking WorkerService.Lease; no database, no etcd)."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from datetime import timedelta

import grpc
import pytest
from google.protobuf import duration_pb2

from gnomon._proto.gnomon.v1 import cluster_service_pb2, cluster_service_pb2_grpc
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.sdk import FailureClass, GnomonError, JobContext, PermanentError, ThrottledError, Worker

pytestmark = pytest.mark.timeout(30)


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
        out = []
        for m in self.of_kind(kind):
            out.extend(r.job for r in (m.attempts if kind != "results" else [x.attempt for x in m.results]))
        return out

    def results(self) -> dict[str, wpb.AttemptResult]:
        return {r.attempt.job: r for m in self.of_kind("results") for r in m.results}

    def kill_stream(self) -> None:
        """Ends the current stream with UNAVAILABLE."""
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
    def __init__(self):
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


@pytest.fixture
async def fake():
    server = grpc.aio.server()
    disp = FakeDispatcher()
    cluster = FakeCluster()
    wgrpc.add_WorkerServiceServicer_to_server(disp, server)
    cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server(cluster, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    disp.address = f"127.0.0.1:{port}"
    disp.cluster = cluster
    try:
        yield disp
    finally:
        await server.stop(0)


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


async def test_success_and_failures_are_reported_with_classes(fake):
    async def handler(ctx: JobContext):
        n = ctx.json()["n"]
        if n == 1:
            raise PermanentError("bad input")
        if n == 2:
            raise ThrottledError(1.5, "429")
        if n == 3:
            raise ConnectionError("db down")

    fake.add(*(assignment(i, payload=b'{"n": %d}' % i) for i in range(4)))
    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=4)
    task = await start(w)
    await until(lambda: len(fake.results()) == 4)
    await stop(w, task)
    res = fake.results()
    ok = res["namespaces/default/jobs/job-0"]
    assert ok.outcome == wpb.OUTCOME_SUCCEEDED and ok.error == "" and not ok.HasField("retry_after")
    assert ok.attempt == assignment(0).attempt  # AttemptRef echoed exactly
    perm = res["namespaces/default/jobs/job-1"]
    assert (perm.outcome, perm.failure_class, perm.error) == (
        wpb.OUTCOME_FAILED,
        wpb.FAILURE_CLASS_PERMANENT,
        "PermanentError: bad input",
    )
    thr = res["namespaces/default/jobs/job-2"]
    assert thr.failure_class == wpb.FAILURE_CLASS_THROTTLED
    assert (thr.retry_after.seconds, thr.retry_after.nanos) == (1, 500_000_000)
    tr = res["namespaces/default/jobs/job-3"]
    assert (tr.failure_class, tr.error) == (wpb.FAILURE_CLASS_TRANSIENT, "ConnectionError: db down")
    hello = fake.hellos[0]
    assert (hello.namespace, list(hello.queues), hello.credits) == ("namespaces/default", ["q"], 4)


async def test_each_accept_precedes_its_result_and_messages_are_batched(fake):
    n = 200
    fake.add(*(assignment(i) for i in range(n)))

    async def handler(ctx):
        await asyncio.sleep(0)

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=50)
    task = await start(w)
    await until(lambda: len(fake.results()) == n)
    await stop(w, task)
    accepts, results = fake.of_kind("accepts"), fake.of_kind("results")
    assert len(fake.refs("accepts")) == n and len(set(fake.refs("accepts"))) == n
    # batching: far fewer messages than attempts
    assert len(accepts) <= n // 5, len(accepts)
    assert len(results) <= n // 5, len(results)
    order = {}
    for i, m in enumerate(fake.received):
        kind = m.WhichOneof("kind")
        if kind == "accepts":
            for r in m.accepts.attempts:
                order.setdefault(("a", r.job), i)
        elif kind == "results":
            for r in m.results.results:
                order.setdefault(("r", r.attempt.job), i)
    assert all(
        order[("a", f"namespaces/default/jobs/job-{i}")] <= order[("r", f"namespaces/default/jobs/job-{i}")]
        for i in range(n)
    )


async def test_credits_are_returned_and_concurrency_is_bounded(fake):
    n = 30
    fake.add(*(assignment(i) for i in range(n)))
    running, peak = 0, 0

    async def handler(ctx):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=3)
    task = await start(w)
    await until(lambda: len(fake.results()) == n)
    await until(lambda: sum(c.credits for c in fake.of_kind("credits")) == n)
    await stop(w, task)
    assert peak == 3
    assert fake.hellos[0].credits == 3
    # one credit back per finished attempt, batched
    assert sum(c.credits for c in fake.of_kind("credits")) == n


async def test_sync_handler_runs_in_threads_with_context(fake):
    fake.add(assignment(1, payload=b'{"x": 1}'))
    seen = {}

    def handler(ctx):
        seen.update(
            thread=threading.current_thread().name,
            job=ctx.job,
            job_id=ctx.job_id,
            attempt=ctx.attempt,
            version=ctx.version,
            token=ctx.fencing_token,
            key=ctx.idempotency_key,
            payload=ctx.json(),
            queue=ctx.queue,
            lease=ctx.lease_duration,
            cancelled=ctx.cancelled,
        )

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=2)
    task = await start(w)
    await until(lambda: len(fake.results()) == 1)
    await stop(w, task)
    assert seen["thread"].startswith("gnomon-handler")
    assert (seen["job"], seen["job_id"], seen["attempt"], seen["version"], seen["token"]) == (
        "namespaces/default/jobs/job-1",
        "job-1",
        1,
        2,
        5,
    )
    assert (seen["key"], seen["payload"], seen["queue"]) == ("idem-1", {"x": 1}, "q")
    assert seen["lease"] == timedelta(seconds=30) and seen["cancelled"] is False


async def test_refused_accept_never_starts_the_handler_and_reports_nothing(fake):
    """A stale message (cancelled or re-dispatched job, duplicate delivery) must not execute:
    the handler starts only after an ok accept ack."""
    fake.accept_ok = lambda ref: (False, "STALE_ATTEMPT")
    fake.add(assignment(1))
    events = []
    calls = []

    async def handler(ctx):
        calls.append(ctx.job)

    w = Worker(
        ["q"],
        handler,
        dispatchers=[fake.address],
        concurrency=1,
        on_event=lambda kind, ctx: events.append(kind),
    )
    task = await start(w)
    await until(lambda: "dropped" in events)
    await until(lambda: fake.of_kind("credits"))
    await stop(w, task)
    assert calls == []
    assert fake.results() == {}
    assert events == ["assigned", "dropped"]


async def test_heartbeats_list_running_attempts_and_cancel_request_reaches_handler(fake):
    fake.heartbeat_interval = 0.05
    fake.heartbeat_ack = lambda ref: {"ok": True, "cancel_requested": ref.job.endswith("job-2")}
    fake.add(assignment(1), assignment(2))
    release = asyncio.Event()
    saw = {}

    async def handler(ctx):
        if ctx.job_id == "job-2":
            saw["cancelled"] = await ctx.wait_cancelled(5)
            saw["reason"] = ctx.cancel_reason
            ctx.raise_if_cancelled()
        await release.wait()

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=2)
    task = await start(w)
    await until(lambda: "namespaces/default/jobs/job-2" in fake.results())
    hb = fake.of_kind("heartbeats")
    assert hb and sorted(r.job for r in hb[0].attempts) == [
        "namespaces/default/jobs/job-1",
        "namespaces/default/jobs/job-2",
    ]
    release.set()
    await until(lambda: len(fake.results()) == 2)
    await stop(w, task)
    assert saw == {"cancelled": True, "reason": "cancel_requested"}
    r = fake.results()["namespaces/default/jobs/job-2"]
    assert (r.outcome, r.failure_class) == (wpb.OUTCOME_FAILED, wpb.FAILURE_CLASS_PERMANENT)
    assert r.error.startswith("Cancelled:")


async def test_pushed_cancel_ack_reaches_handler_at_once_and_renews_nothing(fake):
    """A dispatcher pushes an unprompted HEARTBEAT ack with cancel_requested and no lease end
    (worker_service.proto): the handler sees it without waiting for a heartbeat, and the local
    lease is not renewed by it."""
    fake.heartbeat_interval = 60.0  # no heartbeat during the test: only the push can tell
    fake.add(assignment(1))
    started, saw = asyncio.Event(), {}

    async def handler(ctx):
        saw["lease_before"] = ctx.lease_expire_time
        started.set()
        saw["cancelled"] = await ctx.wait_cancelled(5)
        saw["reason"] = ctx.cancel_reason
        saw["lease_after"] = ctx.lease_expire_time
        ctx.raise_if_cancelled()

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)
    task = await start(w)
    await asyncio.wait_for(started.wait(), 5)
    t0 = time.monotonic()
    ref = assignment(1).attempt
    fake._out.put_nowait(
        wpb.LeaseResponse(
            acks=wpb.Acks(
                acks=[wpb.Ack(attempt=ref, kind=wpb.ACK_KIND_HEARTBEAT, ok=True, cancel_requested=True)]
            )
        )
    )
    await until(lambda: "namespaces/default/jobs/job-1" in fake.results())
    assert time.monotonic() - t0 < 2
    await stop(w, task)
    assert fake.of_kind("heartbeats") == []
    assert saw["cancelled"] is True and saw["reason"] == "cancel_requested"
    assert saw["lease_after"] == saw["lease_before"]
    r = fake.results()["namespaces/default/jobs/job-1"]
    assert (r.outcome, r.failure_class) == (wpb.OUTCOME_FAILED, wpb.FAILURE_CLASS_PERMANENT)


async def test_lease_lost_locally_cancels_and_drops(fake):
    fake.heartbeat_interval = 0.05
    fake.heartbeat_ack = lambda ref: {"ok": False, "reason": "DATABASE_UNAVAILABLE"}  # transient: not renewed
    fake.add(assignment(1, lease_s=1.0))
    saw = {}

    async def handler(ctx):
        saw["cancelled"] = await ctx.wait_cancelled(5)
        saw["reason"] = ctx.cancel_reason

    events = []
    w = Worker(
        ["q"],
        handler,
        dispatchers=[fake.address],
        concurrency=1,
        on_event=lambda kind, ctx: events.append(kind),
    )
    task = await start(w)
    t0 = time.monotonic()
    await until(lambda: "dropped" in events)
    elapsed = time.monotonic() - t0
    await stop(w, task)
    assert saw == {"cancelled": True, "reason": "lease_lost"}
    assert 0.3 < elapsed < 2.0  # lost at lease - margin (1 s - 0.5 s) after receipt, checked every 0.25 s
    assert fake.results() == {}


async def test_drain_finishes_running_handlers_and_returns_no_credit(fake):
    fake.add(*(assignment(i) for i in range(5)))
    finish = asyncio.Event()

    async def handler(ctx):
        await finish.wait()

    events = collections.Counter()
    w = Worker(
        ["q"],
        handler,
        dispatchers=[fake.address],
        concurrency=2,
        on_event=lambda kind, ctx: events.update([kind]),
    )
    task = await start(w)
    await until(lambda: w.running == 2)
    w.stop()
    await until(lambda: w.draining)
    finish.set()
    await asyncio.wait_for(task, 10)
    assert events["finished"] == 2
    assert len(fake.results()) == 2
    assert fake.of_kind("credits") == []  # draining: the dispatcher gets no new capacity
    assert len(fake.pending) == 3


async def test_drain_releases_queued_assignments(fake):
    fake.add(*(assignment(i) for i in range(6)))
    finish = asyncio.Event()

    async def handler(ctx):
        await finish.wait()

    # two streams' worth of credits on one stream: concurrency 2 but the fake ignores the limit
    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=2)
    task = await start(w)
    await until(lambda: w.running == 2)
    fake.credits += 3  # dispatcher pushes 3 more than the worker can run: they queue locally
    fake.add()
    await until(lambda: w.queued == 3)
    w.stop()
    await until(lambda: len(fake.refs("releases")) == 3)
    finish.set()
    await asyncio.wait_for(task, 10)
    assert sorted(fake.refs("releases")) == sorted(f"namespaces/default/jobs/job-{i}" for i in range(2, 5))
    assert len(fake.results()) == 2


async def test_drain_timeout_cancels_running_handlers(fake):
    fake.add(assignment(1))

    async def handler(ctx):
        while not ctx.cancelled:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        ctx.raise_if_cancelled()

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1, drain_timeout=0.2)
    task = await start(w)
    await until(lambda: w.running == 1)
    await stop(w, task)
    r = fake.results()["namespaces/default/jobs/job-1"]
    assert (r.outcome, r.failure_class) == (wpb.OUTCOME_FAILED, wpb.FAILURE_CLASS_TRANSIENT)
    assert r.error == "Cancelled: attempt cancelled (shutdown)"


async def test_unacked_result_is_resent_on_the_next_stream(fake):
    fake.break_after_results = True
    fake.add(assignment(1))

    async def handler(ctx):
        pass

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)
    task = await start(w)
    await until(lambda: fake.streams >= 2 and len(fake.of_kind("results")) >= 2)
    await stop(w, task)
    assert [r.attempt.job for m in fake.of_kind("results") for r in m.results][:2] == [
        "namespaces/default/jobs/job-1"
    ] * 2
    # second hello: nothing held any more, so full credits again
    assert fake.hellos[1].credits == 1


async def test_stream_break_keeps_running_attempts_and_drops_queued_ones(fake):
    finish = asyncio.Event()

    async def handler(ctx):
        await finish.wait()

    events = collections.Counter()
    fake.add(assignment(0), assignment(1))
    w = Worker(
        ["q"],
        handler,
        dispatchers=[fake.address],
        concurrency=2,
        on_event=lambda kind, ctx: events.update([kind]),
    )
    task = await start(w)
    await until(lambda: w.running == 2)
    fake.credits += 3
    fake.add(assignment(2), assignment(3), assignment(4))
    await until(lambda: w.queued == 3)
    fake.kill_stream()
    await until(lambda: fake.streams == 2 and w.connected_dispatchers)
    assert w.queued == 0 and events["dropped"] == 3 and w.running == 2
    # two attempts still held: hello grants the minimum (1) and withholds one returned credit
    assert fake.hellos[1].credits == 1
    finish.set()
    await until(lambda: len(fake.results()) == 2)
    await until(lambda: fake.of_kind("credits"))
    await stop(w, task)
    assert sum(c.credits for c in fake.of_kind("credits")) == 1
    assert sorted(fake.results()) == ["namespaces/default/jobs/job-0", "namespaces/default/jobs/job-1"]


async def test_transient_result_refusal_is_retried(fake):
    calls = []

    def result_ack(res):
        calls.append(res.attempt.job)
        return (False, "DATABASE_UNAVAILABLE") if len(calls) == 1 else (True, "")

    fake.result_ack = result_ack
    fake.add(assignment(1))

    async def handler(ctx):
        pass

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)
    task = await start(w)
    await until(lambda: len(calls) == 2)
    await stop(w, task)
    assert calls == ["namespaces/default/jobs/job-1"] * 2


async def test_hello_rejection_is_fatal(fake):
    fake.reject_hello = grpc.StatusCode.INVALID_ARGUMENT
    w = Worker(["q"], lambda ctx: None, dispatchers=[fake.address])
    with pytest.raises(GnomonError) as info:
        await asyncio.wait_for(w.run_async(), 10)
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT


async def test_discovery_connects_to_listed_dispatchers(fake):
    fake.cluster.addresses = [fake.address]
    fake.add(assignment(1))

    async def handler(ctx):
        pass

    w = Worker(["q"], handler, api=fake.address, concurrency=1, discovery_interval=0.05)
    task = await start(w)
    await until(lambda: len(fake.results()) == 1)
    assert w.connected_dispatchers == [fake.address]
    await stop(w, task)
    assert fake.cluster.calls >= 1


async def test_duplicate_delivery_of_a_held_attempt_is_ignored_and_its_credit_returned(fake):
    finish = asyncio.Event()
    runs = collections.Counter()

    async def handler(ctx):
        runs[ctx.job] += 1
        await finish.wait()

    fake.add(assignment(1))
    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=2)
    task = await start(w)
    await until(lambda: w.running == 1)
    fake.add(assignment(1))
    await until(lambda: sum(c.credits for c in fake.of_kind("credits")) == 1)
    finish.set()
    await until(lambda: len(fake.results()) == 1)
    await stop(w, task)
    assert runs == {"namespaces/default/jobs/job-1": 1}


def test_constructor_validation():
    with pytest.raises(ValueError):
        Worker([], lambda ctx: None)
    with pytest.raises(ValueError):
        Worker(["q"], lambda ctx: None, concurrency=0)
    with pytest.raises(TypeError):
        Worker(["q"], "not callable")
    with pytest.raises(ValueError):
        Worker(["q"], lambda ctx: None, exception_classes={KeyError: "fatal"})
    w = Worker("q", lambda ctx: None, namespace="namespaces/acme", exception_classes={KeyError: "permanent"})
    assert w.queues == ["q"] and w.namespace == "acme"
    assert w.exception_classes == {KeyError: FailureClass.PERMANENT}
