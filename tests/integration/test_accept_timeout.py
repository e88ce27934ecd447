"""The accept timeout (``GNOMON_DISPATCHER_ACCEPT_TIMEOUT_S``): an attempt delivered to a worker
stream and not accepted within it is forgotten by that stream and re-delivered by the relay's
recovery scan with the same token and version; the old stream's late accept is refused
(STALE_ATTEMPT) unless the attempt was re-delivered to that same stream. Driven through the
dispatcher's ``Relay``, ``SessionRegistry``, ``WorkerServicer`` and ``WriteBatcher`` on a real
PostgreSQL (no gRPC stream); shard 0 is owned in the database with token ``TOKEN``."""

from __future__ import annotations

import asyncio
import time

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.sessions import WorkerSession
from gnomon_attempt_support import TOKEN, claim, dispatcher_parts, new_job, one, state_of

pytestmark = pytest.mark.usefixtures("engine")

TIMEOUT_S = 0.3


class OwnedShard:
    """The part of ``ShardOwnership`` the relay reads: shard 0 held under ``TOKEN`` (the database's
    fence, ``own_shards``, is real; only the etcd lease keeping is left out)."""

    region_token = TOKEN

    def tokens(self) -> dict[int, int]:
        return {0: TOKEN}

    def trusted(self) -> bool:
        return True

    def drop(self, shards: list[int]) -> None:
        raise AssertionError(f"fenced out of shards {shards}")


@pytest.fixture
async def engine(engine):
    from gnomon_test_support import own_region, own_shards

    await own_shards(engine, TOKEN)
    await own_region(engine, TOKEN)
    return engine


@pytest.fixture
async def parts(engine):
    async with dispatcher_parts(engine) as (registry, servicer):
        relay = Relay(
            engine,
            registry,
            OwnedShard(),
            region="local",
            interval_s=0.001,
            batch=100,
            accept_timeout_s=TIMEOUT_S,
        )
        yield registry, servicer, relay


def assignments(s: WorkerSession) -> list[wpb.Assignment]:
    got: list[wpb.Assignment] = []
    while not s.out.empty():
        msg = s.out.get_nowait()
        got += list(msg.assignments.assignments)
    return got


def ref_of(a: wpb.Assignment) -> wpb.AttemptRef:
    return a.attempt


async def test_an_unaccepted_attempt_goes_to_another_stream_and_the_late_accept_is_refused(engine, parts):
    registry, servicer, relay = parts
    jid = await new_job(engine)
    c1 = await claim(engine, jid)
    frozen = registry.add("w-frozen", "default", ["q"], 1, owner="alice")
    assert relay.deliver([c1]) == 1
    [first] = assignments(frozen)
    idle = registry.add("w-idle", "default", ["q"], 1, owner="alice")

    assert await relay.recover_once() == 0  # before the timeout: still in flight on its stream
    assert (jid, c1.attempt) in frozen.held and not assignments(idle)

    await asyncio.sleep(TIMEOUT_S + 0.05)
    assert await relay.recover_once() == 1
    assert (jid, c1.attempt) not in frozen.held
    assert frozen.credits == 0  # the frozen worker spent its credit; it returns it itself
    [again] = assignments(idle)
    assert again.attempt == first.attempt  # same job, attempt, version and fencing token
    assert (await state_of(engine, jid))[:2] == ("QUEUED", "QUEUED")

    servicer._accepts(frozen, [first.attempt])  # the worker wakes up: too late
    assert await one(frozen) == (False, "STALE_ATTEMPT")
    assert (await state_of(engine, jid))[:2] == ("QUEUED", "QUEUED")
    servicer._accepts(idle, [again.attempt])
    assert await one(idle) == (True, "")
    assert await state_of(engine, jid) == ("RUNNING", "RUNNING", "alice", "w-idle")
    servicer._releases(frozen, [first.attempt])  # nor can it hand back what is no longer its own
    assert await one(frozen) == (False, "STALE_ATTEMPT")


async def test_re_delivered_to_the_same_stream_its_accept_is_taken(engine, parts):
    registry, servicer, relay = parts
    jid = await new_job(engine)
    c1 = await claim(engine, jid)
    only = registry.add("w-slow", "default", ["q"], 2, owner="alice")
    relay.deliver([c1])
    [first] = assignments(only)
    await asyncio.sleep(TIMEOUT_S + 0.05)
    assert await relay.recover_once() == 1
    [again] = assignments(only)
    assert again.attempt == first.attempt
    assert only.credits == 0  # one credit per delivery
    servicer._accepts(only, [first.attempt])
    assert await one(only) == (True, "")
    assert await state_of(engine, jid) == ("RUNNING", "RUNNING", "alice", "w-slow")


async def test_accepted_or_released_attempts_never_time_out(engine, parts):
    registry, servicer, relay = parts
    jids, cs = [], []
    for _ in range(3):  # a claim takes every due job: one at a time
        jids.append(await new_job(engine))
        cs.append(await claim(engine, jids[-1]))
    s = registry.add("w1", "default", ["q"], 3, owner="alice")
    relay.deliver(cs)
    a = {x.attempt.job: x.attempt for x in assignments(s)}
    refs = [a[f"namespaces/default/jobs/{j}"] for j in jids]
    servicer._accepts(s, [refs[0]])
    assert await one(s) == (True, "")
    servicer._releases(s, [refs[1]])
    assert await one(s) == (True, "")
    gone = registry.expire_unaccepted(TIMEOUT_S, now=time.monotonic() + TIMEOUT_S)
    assert gone == [(jids[2], cs[2].attempt)]  # only the delivered, unaccepted, unreleased one
    assert (jids[0], cs[0].attempt) in s.held and (jids[0], cs[0].attempt) in s.accepted
    assert registry.in_flight() == set()
    assert s.delivered_at == {}


async def test_a_released_attempt_waiting_for_credits_is_flagged_as_backlog(engine, parts):
    """With no credits anywhere the scan delivers nothing but flags the waiting row (the claim loop
    then serves the backlog before claiming new work); with a credit back it is delivered."""
    registry, servicer, relay = parts
    jid = await new_job(engine)
    c1 = await claim(engine, jid)
    s = registry.add("w-busy", "default", ["q"], 1, owner="alice")
    relay.deliver([c1])
    [first] = assignments(s)
    servicer._releases(s, [first.attempt])  # handed back, and the stream has no credit left
    assert await one(s) == (True, "")
    assert s.credits == 0 and not relay.backlog
    assert await relay.recover_once() == 0
    assert relay.backlog  # it waits for a credit
    registry.add_credits(s, 1, 10)
    assert await relay.recover_once() == 1
    [again] = assignments(s)
    assert again.attempt == first.attempt
    # a full scan (as many rows as credits) may have left more behind: the next scan finds none
    assert await relay.recover_once() == 0 and not relay.backlog
