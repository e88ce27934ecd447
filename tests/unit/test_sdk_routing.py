"""gnomon.sdk.routing against two in-process fake dispatchers (gnomon_fake_dispatcher.py): when the
stream of the dispatcher that delivered running attempts is down, their heartbeats and results go
through the worker's other dispatcher stream; a refusal there still drops the attempt; a result
acknowledged once is not sent again; moved attempts return no credit to the stream that carries them.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

import grpc
import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.devservers import free_port
from gnomon.sdk import Worker
from gnomon_fake_dispatcher import FakeDispatcher, assignment, start, stop, until
from gnomon_test_support import add_port

pytestmark = pytest.mark.timeout(30)


class Served:
    """A fake dispatcher on a fixed loopback port that can be stopped and served again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.server: grpc.aio.Server | None = None

    async def serve(self, disp: FakeDispatcher) -> None:
        self.server = grpc.aio.server()
        wgrpc.add_WorkerServiceServicer_to_server(disp, self.server)
        add_port(self.server, self.address)
        await self.server.start()

    async def kill(self) -> None:
        if self.server is not None:
            await self.server.stop(0)
            self.server = None


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Served, FakeDispatcher, Served, FakeDispatcher]]:
    a, b = Served(), Served()
    da, db = FakeDispatcher(heartbeat_interval=0.2), FakeDispatcher(heartbeat_interval=0.2)
    await a.serve(da)
    await b.serve(db)
    try:
        yield a, da, b, db
    finally:
        await a.kill()
        await b.kill()


def jobs(n: int) -> list[str]:
    return [f"namespaces/default/jobs/job-{i}" for i in range(n)]


async def test_running_attempts_of_a_dead_dispatcher_report_through_the_other(pair):
    a, da, b, db = pair
    da.add(*(assignment(i) for i in range(3)))
    finish = asyncio.Event()
    events: collections.Counter[str] = collections.Counter()

    async def handler(ctx):
        await finish.wait()

    w = Worker(
        ["q"],
        handler,
        dispatchers=[a.address, b.address],
        concurrency=3,
        on_event=lambda kind, ctx: events.update([kind]),
    )
    task = await start(w)
    await until(lambda: w.running == 3 and len(w.connected_dispatchers) == 2)
    await until(lambda: len(da.refs("accepts")) == 3)
    await a.kill()  # for good
    # the three attempts are heartbeated through B now
    await until(lambda: set(db.refs("heartbeats")) == set(jobs(3)))
    finish.set()
    await until(lambda: len(db.results()) == 3)
    await asyncio.sleep(0.3)  # a duplicate result would show up by now
    await stop(w, task)
    assert sorted(db.results()) == jobs(3)
    assert sum(len(m.results) for m in db.of_kind("results")) == 3  # each acked once, sent once
    assert da.results() == {}
    assert events["finished"] == 3 and events["dropped"] == 0
    # B delivered nothing: the moved attempts' credits are not B's to return
    assert sum(c.credits for c in db.of_kind("credits")) == 0


async def test_an_unacked_result_goes_out_through_the_other_dispatcher(pair):
    a, da, b, db = pair
    da.ack_results = False  # A takes the result but dies before acknowledging it
    da.add(assignment(0))

    async def handler(ctx):
        pass

    w = Worker(["q"], handler, dispatchers=[a.address, b.address], concurrency=1)
    task = await start(w)
    await until(lambda: len(da.results()) == 1)
    await a.kill()
    await until(lambda: len(db.results()) == 1)
    await asyncio.sleep(0.3)  # a re-sent result would show up by now
    await stop(w, task)
    assert list(db.results()) == jobs(1)
    assert sum(len(m.results) for m in db.of_kind("results")) == 1  # acked by B: sent once


async def test_a_refusal_through_the_other_dispatcher_still_drops_the_attempt(pair):
    a, da, b, db = pair
    db.heartbeat_ack = lambda ref: {"ok": False, "reason": "STALE_ATTEMPT"}
    da.add(assignment(0))
    reasons: list[str | None] = []

    async def handler(ctx):
        await ctx.wait_cancelled(20)
        reasons.append(ctx.cancel_reason)

    events: collections.Counter[str] = collections.Counter()
    w = Worker(
        ["q"],
        handler,
        dispatchers=[a.address, b.address],
        concurrency=1,
        on_event=lambda kind, ctx: events.update([kind]),
    )
    task = await start(w)
    await until(lambda: w.running == 1 and len(w.connected_dispatchers) == 2)
    await a.kill()
    await until(lambda: events["dropped"] == 1)
    await stop(w, task)
    assert reasons == ["refused"]
    assert db.results() == {} and da.results() == {}


async def test_moved_attempts_stay_on_the_live_dispatcher_when_the_first_returns(pair):
    a, da, b, db = pair
    da.add(*(assignment(i) for i in range(2)))
    finish = asyncio.Event()

    async def handler(ctx):
        await finish.wait()

    w = Worker(["q"], handler, dispatchers=[a.address, b.address], concurrency=2)
    task = await start(w)
    await until(lambda: w.running == 2 and len(w.connected_dispatchers) == 2)
    await until(lambda: len(da.refs("accepts")) == 2)
    await a.kill()
    await until(lambda: set(db.refs("heartbeats")) == set(jobs(2)))
    restarted = FakeDispatcher(heartbeat_interval=0.2)
    await a.serve(restarted)  # the same address comes back
    await until(lambda: len(w.connected_dispatchers) == 2)
    # its hello does not count the moved attempts as held: full credits
    assert restarted.hellos[-1].credits == 2
    finish.set()
    await until(lambda: len(db.results()) == 2)
    await stop(w, task)
    assert restarted.results() == {} and sorted(db.results()) == jobs(2)
