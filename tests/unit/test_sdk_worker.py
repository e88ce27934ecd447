"""gnomon.sdk.Worker against an in-process fake dispatcher (a real grpc.aio server on a loopback
port, speaking WorkerService.Lease; no database, no etcd): results and failure classes, accepts
before results and batching, credits and bounded concurrency, sync handlers in threads, refused
accepts, heartbeats and cancellation (requested, pushed, lease lost locally).

Draining, stream breaks, resending, discovery and validation are in test_sdk_worker_streams.py; the
fake is gnomon_fake_dispatcher.py, served by the ``fake`` fixture of conftest.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk import JobContext, PermanentError, ThrottledError, Worker
from gnomon_fake_dispatcher import assignment, start, stop, until

pytestmark = pytest.mark.timeout(30)


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
        fpb.FAILURE_CLASS_PERMANENT,
        "PermanentError: bad input",
    )
    thr = res["namespaces/default/jobs/job-2"]
    assert thr.failure_class == fpb.FAILURE_CLASS_THROTTLED
    assert (thr.retry_after.seconds, thr.retry_after.nanos) == (1, 500_000_000)
    tr = res["namespaces/default/jobs/job-3"]
    assert (tr.failure_class, tr.error) == (fpb.FAILURE_CLASS_TRANSIENT, "ConnectionError: db down")
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
    assert (r.outcome, r.failure_class) == (wpb.OUTCOME_FAILED, fpb.FAILURE_CLASS_PERMANENT)
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
    assert (r.outcome, r.failure_class) == (wpb.OUTCOME_FAILED, fpb.FAILURE_CLASS_PERMANENT)


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
