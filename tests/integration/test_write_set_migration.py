"""Migration 0020 (the indexes follow the write set) on a database holding jobs in every state: each
live job finishes afterwards through the storage functions the services use, the finished ones stay
where they are, request-id idempotency still holds for jobs created before it, and the DLQ and the
namespace quota still find their rows.

Before the migration the jobs are created by this release's create (the API is upgraded before the
migration, docs/operations.md), claimed as the previous release's dispatcher claims (its statement,
written out below: this release's claim also counts into ``queue_claims``, which 0020 adds), and
accepted and finished by the accept and result statements both releases share."""

from __future__ import annotations

import uuid

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.domain.dead_letters import DeadLetterFilter
from gnomon.common.domain.failures import FailureClass
from gnomon.common.errors import AlreadyExists
from gnomon.common.storage import cancel, dead_letters, leases, namespaces, queues, reaping, results
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.job_view import JOB_FROM, STATE
from gnomon.common.storage.migrations import config, upgrade
from gnomon.common.storage.schema import attempts, jobs
from gnomon_test_support import fenced, new_job_spec, open_engine, own_shards

pytestmark = pytest.mark.asyncio
TOKEN = 5
RID = uuid.UUID(int=42)


async def _claim(engine, queue: str) -> list[AttemptKey]:
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", queue)], limit=50, dispatcher_id="d"),
    )
    return [AttemptKey(x.job_id, x.attempt, x.version, x.token) for x in claimed]


_OLD_CLAIM = """
WITH c AS (UPDATE jobs SET state = 'QUEUED', version = version + 1, attempt = attempt + 1,
    dispatched_at = now(), started_at = NULL, first_dispatched_at = coalesce(first_dispatched_at, now())
  WHERE queue = :queue AND state = 'SCHEDULED' RETURNING *)
INSERT INTO attempts (job_id, attempt, region, shard, token, version, state, dispatcher_id, claimed_at,
  lease_ms, lease_expires_at, namespace, queue)
SELECT id, attempt, region, shard, :token, version, 'QUEUED', 'old', dispatched_at, lease_ms,
  dispatched_at + lease_ms * interval '1 ms', namespace, queue FROM c
RETURNING job_id, attempt, version, token
"""


async def _old_claim(engine, queue: str) -> AttemptKey:
    """The previous release's claim of the one job of ``queue`` (its CLAIM statement, less the due
    index walk and the budget, which do not change what it writes)."""
    async with engine.begin() as c:
        [row] = (await c.execute(text(_OLD_CLAIM), {"queue": queue, "token": TOKEN})).all()
    return AttemptKey(*row)


async def _accept(engine, keys: list[AttemptKey]) -> None:
    got = await run_transaction(engine, lambda c: leases.accept(c, keys, "w", "alice"))
    assert len(got) == len(keys)


async def _finish(engine, keys: list[AttemptKey], ok: bool = True) -> None:
    res = [
        Result(k, ok, FailureClass.PERMANENT, "" if ok else "bad input", owner="alice", worker_id="w")
        for k in keys
    ]
    got = await run_transaction(engine, lambda c: results.complete(c, res))
    assert set(got.values()) == {""}


async def _insert(engine, queue: str, **fields) -> uuid.UUID:
    spec = new_job_spec(queue=queue, **fields)
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, spec))
    return spec.id


async def _states(engine) -> dict[uuid.UUID, str]:
    """Each job's state as a client sees it (a QUEUED row whose attempt runs reads RUNNING)."""
    async with engine.connect() as c:
        rows = await c.execute(select(jobs.c.id, STATE.label("state")).select_from(JOB_FROM))
        return {r.id: r.state for r in rows}


async def test_jobs_in_every_state_finish_after_the_migration(pg_server):
    name = f"wset_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(name)
    engine = None
    try:
        before = ScriptDirectory.from_config(config(url)).get_revision("0020").down_revision
        upgrade(url, str(before))
        engine = open_engine(url)
        await own_shards(engine, TOKEN)
        # on the old schema: one job in each state
        scheduled = await _insert(engine, "later", request_id=RID, request_hash="h1")
        cancelled = await _insert(engine, "later")
        for q in ("queued", "running", "lost", "done", "dead"):
            await _insert(engine, q, idempotent=True, max_attempts=2 if q == "lost" else 1)
        queued, running, lost, done, dead = [
            await _old_claim(engine, q) for q in ("queued", "running", "lost", "done", "dead")
        ]
        await _accept(engine, [running, lost, done, dead])
        await _finish(engine, [done])
        await _finish(engine, [dead], ok=False)
        await run_transaction(engine, lambda c: cancel.cancel_job(c, "default", cancelled))
        assert sorted((await _states(engine)).values()) == sorted(
            ["SCHEDULED", "CANCELLED", "QUEUED", "RUNNING", "RUNNING", "SUCCEEDED", "DEAD"]
        )

        await engine.dispose()
        upgrade(url)
        engine = open_engine(url)

        # the live jobs finish: the QUEUED attempt is accepted, the RUNNING one reports, the lost
        # lease is reaped (retried: idempotent, attempts left) and the retry runs, the SCHEDULED job runs
        await _accept(engine, [queued])
        await _finish(engine, [queued, running])
        async with engine.begin() as c:  # its lease ended an hour ago
            await c.execute(
                update(attempts)
                .where(attempts.c.job_id == lost.job_id)
                .values(lease_expires_at=text("now() - interval '1 hour'"))
            )
        reaped = await run_transaction(
            engine,
            lambda c: reaping.reap_lost_leases(
                c, region="local", skew_margin_s=1.0, limit=10, retry_delay_s=lambda _: 0.0
            ),
        )
        assert [r.job_id for r in reaped] == [lost.job_id]
        [retry] = await _claim(engine, "lost")
        # the retry budget's counts: the claims before the migration (filled from the attempts) and after
        counts = await run_transaction(
            engine,
            lambda c: queues.budget_counts(c, region="local", namespace="default", queue="lost", window_s=60),
        )
        assert (counts.first_attempts, counts.retries) == (1, 1)
        assert retry.attempt == 2
        [later] = await _claim(engine, "later")
        assert later.job_id == scheduled
        await _accept(engine, [retry, later])
        await _finish(engine, [retry, later])

        states = await _states(engine)
        assert states.pop(cancelled) == "CANCELLED"
        assert states.pop(dead.job_id) == "DEAD"
        assert set(states.values()) == {"SUCCEEDED"} and len(states) == 5
        async with engine.connect() as c:
            assert (await c.execute(namespaces.pending_jobs_stmt("default", 100))).scalar_one() == 0
            listed = await dead_letters.list_dead_letters(
                c, DeadLetterFilter("default"), include_replayed=False, limit=10, after=None
            )
            assert [r["id"] for r in listed] == [dead.job_id]
            open_attempts = await c.execute(select(attempts.c.job_id).where(attempts.c.finished_at.is_(None)))
            assert open_attempts.all() == []

        # a request id used before the migration: the same request returns that job, another is refused
        again = new_job_spec(queue="later", request_id=RID, request_hash="h1")
        row, created = await run_transaction(engine, lambda c: jobs_store.insert_job(c, again))
        assert (row["id"], created) == (scheduled, False)
        other = new_job_spec(queue="later", request_id=RID, request_hash="h2")
        with pytest.raises(AlreadyExists):
            await run_transaction(engine, lambda c: jobs_store.insert_job(c, other))
        # the previous release's create (no index predicate in its ON CONFLICT) is refused: no
        # unique index matches it (docs/operations.md: services first, then the migration)
        old_form = jobs_store.INSERT_JOB_IDEMPOTENT.compile(dialect=engine.dialect)
        assert "WHERE request_id IS NOT NULL" in str(old_form)
        async with engine.connect() as c:
            with pytest.raises(DBAPIError, match="no unique or exclusion constraint"):
                await c.execute(
                    text(
                        "INSERT INTO jobs (id, namespace, region, shard, queue, payload, state, version, "
                        "scheduled_at, max_attempts, attempt, idempotency_key, lease_ms, request_id) "
                        "VALUES (gen_random_uuid(), 'default', 'local', 0, 'q', '', 'SCHEDULED', 1, now(), "
                        "1, 0, 'k', 1000, :rid) ON CONFLICT (namespace, request_id) DO NOTHING"
                    ),
                    {"rid": uuid.uuid4()},
                )
    finally:
        if engine is not None:
            await engine.dispose()
        pg_server.drop_database(name)
