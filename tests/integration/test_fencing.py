"""Fencing: a claim carrying a token older than the shard's current owner's cannot commit.

Real etcd issues the tokens (create revisions of the ownership key); real PostgreSQL enforces them.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.registry import shard_key
from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import fencing as fencing_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon_test_support import DIALECTS, fenced, new_job_spec

SHARDS = 4


# The same queries through both dialects (conftest's ``engine``): PostgreSQL (default) and the
# production ``cockroachdb+psycopg`` dialect (which also runs against PostgreSQL).
dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)


async def make_job(engine, shard: int) -> uuid.UUID:
    jid = uuid.uuid4()
    new = new_job_spec(id=jid, shard=shard)
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, new))
    return jid


async def state_of(engine, jid):
    async with engine.connect() as c:
        return (await c.execute(select(jobs.c.state, jobs.c.version).where(jobs.c.id == jid))).one()


async def test_stale_token_cannot_claim_after_newer_owner_took_the_shard(engine, etcd_endpoints, etcd_prefix):
    prefix = etcd_prefix.decode().rstrip("/")
    key = shard_key(prefix, "local", 0)
    async with EtcdClient(etcd_endpoints) as etcd:
        # Dispatcher A takes shard 0 and records its token.
        lease_a = await etcd.lease_grant(5)
        ok, kv_a = await etcd.create_if_absent(key, b"A", lease_a)
        assert ok
        token_a = kv_a.create_revision
        await run_transaction(engine, lambda c: fencing_store.record_ownership(c, "local", 0, token_a, "A"))
        # A loses its lease (paused past it); B takes the shard with a larger token.
        await etcd.lease_revoke(lease_a)
        lease_b = await etcd.lease_grant(5)
        ok, kv_b = await etcd.create_if_absent(key, b"B", lease_b)
        assert ok
        token_b = kv_b.create_revision
        assert token_b > token_a
        await run_transaction(engine, lambda c: fencing_store.record_ownership(c, "local", 0, token_b, "B"))
        await etcd.lease_revoke(lease_b)

    jid = await make_job(engine, 0)
    # A's forged claim with its old token is rejected and changes nothing.
    with pytest.raises(StaleFencingToken) as e:
        await fenced(
            engine,
            {0: token_a},
            lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="A"),
        )
    assert e.value.metadata["shards"] == "0"
    assert tuple(await state_of(engine, jid)) == ("SCHEDULED", 1)
    async with engine.connect() as c:
        assert (await c.execute(select(func.count()).select_from(attempts))).scalar_one() == 0
    # A can no longer record its old token either.
    with pytest.raises(StaleFencingToken):
        await run_transaction(engine, lambda c: fencing_store.record_ownership(c, "local", 0, token_a, "A"))
    # B's claim with the current token commits: state and attempt row (the outbox record) together.
    claimed = await fenced(
        engine,
        {0: token_b},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="B"),
    )
    assert [(c.job_id, c.attempt, c.token) for c in claimed] == [(jid, 1, token_b)]
    assert tuple(await state_of(engine, jid)) == ("QUEUED", 2)
    async with engine.connect() as c:
        row = (
            await c.execute(select(attempts.c.token, attempts.c.state).where(attempts.c.job_id == jid))
        ).one()
    assert row.token == token_b and row.state == "QUEUED"  # in the outbox: claimed, not accepted


async def test_claim_never_takes_a_job_before_its_scheduled_time(engine):
    await run_transaction(engine, lambda c: fencing_store.record_ownership(c, "local", 1, 7, "A"))
    jid = uuid.uuid4()
    new = new_job_spec(id=jid, shard=1, delay=timedelta(seconds=30), idempotency_key="k")
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, new))
    claimed = await fenced(
        engine,
        {1: 7},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="A"),
    )
    assert claimed == []
    wait = await run_transaction(
        engine,
        lambda c: claim_store.next_due_in(
            c, region="local", shards=[1], targets=[("default", "q")], horizon_s=60
        ),
    )
    assert 25 < wait <= 30
    assert (
        await run_transaction(
            engine,
            lambda c: claim_store.next_due_in(
                c, region="local", shards=[1], targets=[("default", "q")], horizon_s=10
            ),
        )
        is None
    )


async def test_completion_is_idempotent_per_attempt_and_token_and_stale_token_is_refused(engine):
    await run_transaction(engine, lambda c: fencing_store.record_ownership(c, "local", 2, 11, "A"))
    jid = await make_job(engine, 2)
    [c1] = await fenced(
        engine,
        {2: 11},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=1, dispatcher_id="A"),
    )
    key = AttemptKey(jid, c1.attempt, c1.version, c1.token)
    accepted = await run_transaction(engine, lambda c: lease_store.accept(c, [key], "w1"))
    assert set(accepted) == {(jid, 1)} and accepted[(jid, 1)] > c1.dispatched_at
    # the same worker re-sending its accept (lost ack) is accepted again: idempotent
    assert set(await run_transaction(engine, lambda c: lease_store.accept(c, [key], "w1"))) == {(jid, 1)}
    # a duplicate delivery accepted by another worker is refused: the attempt is already RUNNING
    assert await run_transaction(engine, lambda c: lease_store.accept(c, [key], "w2")) == {}
    ok = Result(key=key, succeeded=True)
    stale = Result(key=AttemptKey(jid, 1, c1.version, 10), succeeded=True)
    assert await run_transaction(
        engine, lambda c: result_store.complete(c, [stale], retry_delay_s=lambda r, a: 1)
    ) == {(jid, 1): "STALE_FENCING_TOKEN"}
    assert await run_transaction(
        engine, lambda c: result_store.complete(c, [ok], retry_delay_s=lambda r, a: 1)
    ) == {(jid, 1): ""}
    assert await run_transaction(
        engine, lambda c: result_store.complete(c, [ok], retry_delay_s=lambda r, a: 1)
    ) == {(jid, 1): ""}
    assert tuple(await state_of(engine, jid)) == ("SUCCEEDED", 4)
