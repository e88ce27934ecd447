"""The SDK never drops an attempt silently: an accept refused for a transient reason
(``DATABASE_UNAVAILABLE``) more than ``MAX_ACCEPT_RETRIES`` times is released to its dispatcher
(which forgets it and re-delivers it), its slot and credit freed, its handler never started; an
accept refused for good (``STALE_ATTEMPT``) is not released. Against the in-process fake dispatcher."""

from __future__ import annotations

import collections

import pytest

from gnomon.sdk import Worker
from gnomon.sdk.protocol import MAX_ACCEPT_RETRIES
from gnomon_fake_dispatcher import assignment, start, stop, until

pytestmark = pytest.mark.timeout(40)


async def test_an_accept_given_up_on_is_released_and_the_redelivery_runs(fake):
    database_up = False
    accepts: list[str] = []

    def accept_ok(ref):
        accepts.append(ref.job)
        return (True, "") if database_up else (False, "DATABASE_UNAVAILABLE")

    fake.accept_ok = accept_ok
    fake.add(assignment(1))
    ran: list[str] = []

    async def handler(ctx):
        ran.append(ctx.job)

    events: collections.Counter[str] = collections.Counter()
    w = Worker(
        ["q"], handler, dispatchers=[fake.address], concurrency=1, on_event=lambda k, ctx: events.update([k])
    )
    task = await start(w)
    job = "namespaces/default/jobs/job-1"
    await until(lambda: fake.refs("releases") == [job], timeout=20)
    assert accepts == [job] * (1 + MAX_ACCEPT_RETRIES), f"accepts sent before giving up: {len(accepts)}"
    assert ran == [] and fake.results() == {}, "a handler ran without an acknowledged accept"
    assert events["released"] == 1
    # the slot and the credit came back: the dispatcher's re-delivery is taken and runs
    database_up = True
    await until(lambda: sum(c.credits for c in fake.of_kind("credits")) >= 1)
    fake.add(assignment(1))
    await until(lambda: job in fake.results())
    await stop(w, task)
    assert ran == [job]
    assert fake.refs("releases") == [job], "released more than once"


async def test_a_final_accept_refusal_is_not_released(fake):
    fake.accept_ok = lambda ref: (False, "STALE_ATTEMPT")
    fake.add(assignment(1))
    ran: list[str] = []

    async def handler(ctx):
        ran.append(ctx.job)

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)
    task = await start(w)
    await until(lambda: sum(c.credits for c in fake.of_kind("credits")) >= 1)  # slot and credit back
    await stop(w, task)
    assert fake.refs("accepts") == ["namespaces/default/jobs/job-1"]  # never retried
    assert fake.refs("releases") == [] and ran == []
