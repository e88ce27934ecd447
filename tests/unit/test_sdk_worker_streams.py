"""gnomon.sdk.Worker against the in-process fake dispatcher (gnomon_fake_dispatcher.py, served by the
``fake`` fixture of conftest.py): draining (running handlers finish, queued assignments are released,
a timeout cancels), results resent on the next stream, a broken stream, transient result refusals, a
rejected hello, discovery through ClusterService, duplicate deliveries, constructor validation.
"""

from __future__ import annotations

import asyncio
import collections

import grpc
import pytest

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk import FailureClass, GnomonError, Worker
from gnomon_fake_dispatcher import assignment, start, stop, until

pytestmark = pytest.mark.timeout(30)


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
    assert (r.outcome, r.failure_class) == (wpb.OUTCOME_FAILED, fpb.FAILURE_CLASS_TRANSIENT)
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
