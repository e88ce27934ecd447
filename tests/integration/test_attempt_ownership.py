"""Attempt ownership: accept, heartbeat, checkpoint, result and release are taken only from the
worker stream the attempt was delivered to, or after a reconnect from the same principal and worker;
the version is checked on every write. Driven through the dispatcher's ``WorkerServicer`` and
``WriteBatcher`` (the objects ``gnomon dispatcher`` runs, minus the gRPC stream) on a real PostgreSQL;
the identity of each session is what the authorization interceptor sets from the credential."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon_attempt_support import TOKEN, claim, dispatcher_parts, new_job, one, state_of

pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
async def engine(engine):
    from gnomon_test_support import own_shards

    await own_shards(engine, TOKEN)
    return engine


@pytest.fixture
async def dispatcher(engine):
    async with dispatcher_parts(engine) as parts:
        yield parts


async def test_a_foreign_stream_cannot_accept_heartbeat_checkpoint_finish_or_release(engine, dispatcher):
    registry, servicer = dispatcher
    jid = await new_job(engine)
    c1 = await claim(engine, jid)
    owner = registry.add("w-alice", "default", ["q"], 5, owner="alice")
    owner.held[(jid, c1.attempt)] = c1  # delivered to alice's stream
    thief = registry.add("w-alice", "default", ["q"], 5, owner="mallory")  # even with the same worker id
    ref = wpb.AttemptRef(
        job=f"namespaces/default/jobs/{jid}", attempt=c1.attempt, version=c1.version, fencing_token=TOKEN
    )

    servicer._accepts(thief, [ref])
    assert await one(thief) == (False, "STALE_ATTEMPT")  # stole nothing: the attempt is still QUEUED
    assert (await state_of(engine, jid))[:2] == ("QUEUED", "QUEUED")
    servicer._releases(thief, [ref])
    assert await one(thief) == (False, "STALE_ATTEMPT")
    assert (jid, c1.attempt) in owner.held

    servicer._accepts(owner, [ref])
    assert await one(owner) == (True, "")
    assert await state_of(engine, jid) == ("RUNNING", "RUNNING", "alice", "w-alice")

    servicer._heartbeats(thief, [ref])
    assert await one(thief) == (False, "STALE_ATTEMPT")
    servicer._checkpoints(thief, [wpb.Checkpoint(attempt=ref, data=b"forged")])
    assert await one(thief) == (False, "STALE_ATTEMPT")
    servicer._results(thief, [wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_SUCCEEDED)])
    assert await one(thief) == (False, "STALE_ATTEMPT")
    assert (await state_of(engine, jid))[:2] == ("RUNNING", "RUNNING")  # the foreign result changed nothing

    wrong_version = wpb.AttemptRef(
        job=ref.job, attempt=ref.attempt, version=ref.version + 1, fencing_token=TOKEN
    )
    servicer._heartbeats(owner, [wrong_version])
    assert await one(owner) == (False, "STALE_ATTEMPT")
    servicer._checkpoints(owner, [wpb.Checkpoint(attempt=wrong_version, data=b"wrong version")])
    assert await one(owner) == (False, "STALE_ATTEMPT")
    servicer._results(owner, [wpb.AttemptResult(attempt=wrong_version, outcome=wpb.OUTCOME_SUCCEEDED)])
    assert await one(owner) == (False, "STALE_ATTEMPT")

    servicer._heartbeats(owner, [ref])
    assert (await one(owner))[0] is True
    servicer._checkpoints(owner, [wpb.Checkpoint(attempt=ref, data=b"step=1")])
    assert await one(owner) == (True, "")
    servicer._results(owner, [wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_SUCCEEDED)])
    assert await one(owner) == (True, "")  # the owner's write still wins
    assert await state_of(engine, jid) == ("SUCCEEDED", "SUCCEEDED", "alice", "w-alice")


async def test_the_owner_reconnecting_to_another_stream_keeps_its_attempt(engine, dispatcher):
    registry, servicer = dispatcher
    jid = await new_job(engine)
    c1 = await claim(engine, jid)
    first = registry.add("w1", "default", ["q"], 5, owner="alice")
    first.held[(jid, c1.attempt)] = c1
    ref = wpb.AttemptRef(
        job=f"namespaces/default/jobs/{jid}", attempt=c1.attempt, version=c1.version, fencing_token=TOKEN
    )
    servicer._accepts(first, [ref])
    assert await one(first) == (True, "")
    registry.remove(first)  # the stream broke; the worker reconnects (any dispatcher of the region)
    again = registry.add("w1", "default", ["q"], 5, owner="alice")
    servicer._accepts(again, [ref])  # a re-sent accept after reconnect
    assert await one(again) == (True, "")
    other_worker = registry.add("w2", "default", ["q"], 5, owner="alice")
    servicer._accepts(other_worker, [ref])  # same principal, another worker: not its attempt
    assert await one(other_worker) == (False, "STALE_ATTEMPT")
    servicer._heartbeats(other_worker, [ref])
    assert await one(other_worker) == (False, "STALE_ATTEMPT")
    servicer._results(other_worker, [wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_FAILED)])
    assert await one(other_worker) == (False, "STALE_ATTEMPT")
    servicer._heartbeats(again, [ref])
    assert (await one(again))[0] is True
    servicer._results(again, [wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_SUCCEEDED)])
    assert await one(again) == (True, "")
    assert (await state_of(engine, jid))[0] == "SUCCEEDED"
