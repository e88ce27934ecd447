"""A heartbeat refused ``LEASE_EXPIRED`` is lease loss for the Python SDK (docs/protocol.md, "Lease
loss"): the handler's context is cancelled with reason ``lease_lost``, no result is reported, the
attempt is not heartbeated again, and its credit comes back once the handler has returned."""

from __future__ import annotations

import asyncio

import pytest

from gnomon.sdk import Worker
from gnomon_fake_dispatcher import assignment, start, stop, until

pytestmark = pytest.mark.timeout(30)


async def test_lease_expired_heartbeat_cancels_drops_and_returns_the_credit(fake):
    fake.heartbeat_interval = 0.05
    fake.heartbeat_ack = lambda ref: {"ok": False, "reason": "LEASE_EXPIRED"}
    fake.add(assignment(1, lease_s=30.0))  # the local lease alone would hold for 24 s
    saw: dict = {}
    events: list[str] = []

    async def handler(ctx):
        saw["cancelled"] = await ctx.wait_cancelled(10)
        saw["reason"] = ctx.cancel_reason

    w = Worker(
        ["q"],
        handler,
        dispatchers=[fake.address],
        concurrency=1,
        on_event=lambda kind, ctx: events.append(kind),
    )
    task = await start(w)
    await until(lambda: "dropped" in events)
    await until(lambda: sum(c.credits for c in fake.of_kind("credits")) >= 1)
    beats = len(fake.of_kind("heartbeats"))
    await asyncio.sleep(0.3)  # several heartbeat periods: the dropped attempt is not listed again
    await stop(w, task)
    assert saw == {"cancelled": True, "reason": "lease_lost"}
    assert fake.results() == {}
    assert len(fake.of_kind("heartbeats")) == beats


async def test_heartbeat_period_is_a_third_of_the_shortest_lease_below_the_welcome_interval(fake):
    """docs/protocol.md, section 5: period = min(welcome.heartbeat_interval, lease_duration / 3). The
    welcome asks for 60 s; a 3 s lease would be lost locally after about 2 s without heartbeats, so
    a 4 s handler finishes only if the worker heartbeats on the lease's rule."""
    fake.heartbeat_interval = 60.0
    fake.add(assignment(1, lease_s=3.0))
    events: list[str] = []

    async def handler(ctx):
        await asyncio.sleep(4.0)

    w = Worker(
        ["q"],
        handler,
        dispatchers=[fake.address],
        concurrency=1,
        on_event=lambda kind, ctx: events.append(kind),
    )
    task = await start(w)
    await until(lambda: "namespaces/default/jobs/job-1" in fake.results() or "dropped" in events, timeout=15)
    await stop(w, task)
    assert "dropped" not in events
    assert len(fake.of_kind("heartbeats")) >= 3  # 4 s at one per second at most
