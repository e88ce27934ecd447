"""The partial indexes (migrations 0014 and 0020) are what the statements use, also in generic plans;
and the attempt's accept and heartbeats are HOT updates (no index entry written).

PostgreSQL reaches a partial index only when it can prove the query implies the index's predicate.
A bind parameter (``state = $1``) proves nothing in a generic plan, which is what a prepared statement
gets after a few executions; so the claim, the due backlog and the reaper's lease scan name their state
inline (``gnomon.common.storage.predicates.state_is``). Here every connection is forced onto generic plans
(``plan_cache_mode = force_generic_plan``, ``prepare_threshold = 0``) and the per-index scan counters
of ``pg_stat_user_indexes`` show which index each statement read.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import reaping
from gnomon.common.storage.engine import run_transaction
from gnomon_test_support import fenced, new_job_spec, own_shards

pytestmark = pytest.mark.asyncio
TOKEN = 7


@pytest.fixture
async def generic_engine(db_url):
    eng = create_async_engine(
        db_url,
        connect_args={"prepare_threshold": 0, "options": "-c plan_cache_mode=force_generic_plan"},
        pool_size=1,
        max_overflow=0,
    )
    yield eng
    await eng.dispose()


async def scans(engine, index: str) -> int:
    """idx_scan of ``index`` once the statistics collector has seen this backend's counts."""
    async with engine.connect() as c:
        await c.execute(text("SELECT pg_stat_force_next_flush()"))
    async with engine.connect() as c:
        await c.execute(text("SELECT pg_stat_clear_snapshot()"))
        return (
            await c.execute(
                text("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = :i"), {"i": index}
            )
        ).scalar_one()


async def test_the_claim_reads_the_due_index_in_a_generic_plan(generic_engine):
    eng = generic_engine
    await own_shards(eng, TOKEN)
    for _ in range(3):
        await run_transaction(eng, lambda c: jobs_store.insert_job(c, new_job_spec(id=uuid.uuid4())))
    before = await scans(eng, "ix_jobs_due")
    got = []
    for _ in range(4):  # more than once: the prepared statement's generic plan is the one measured
        got += await fenced(
            eng,
            {0: TOKEN},
            lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="d"),
        )
    assert len(got) == 3
    assert await scans(eng, "ix_jobs_due") >= before + 4


async def test_the_next_due_time_of_several_queues_reads_the_due_index_once_per_queue(generic_engine):
    """``NEXT_DUE`` covers every target in one statement (a lateral join); each target's earliest job
    still comes from the due index, so a backlog of due jobs is never sorted to find it."""
    from datetime import timedelta

    eng = generic_engine
    for queue, delay in (("q1", 30), ("q2", 2), ("q2", 3), ("q3", 600)):
        spec = new_job_spec(id=uuid.uuid4(), queue=queue, delay=timedelta(seconds=delay))
        await run_transaction(eng, lambda c, spec=spec: jobs_store.insert_job(c, spec))
    before = await scans(eng, "ix_jobs_due")
    targets = [("default", "q1"), ("default", "q2"), ("default", "q3"), ("default", "empty")]
    for _ in range(4):  # the generic plan of the prepared statement is the one measured
        due = await run_transaction(
            eng,
            lambda c: claim_store.next_due_in(c, region="local", shards=[0], targets=targets, horizon_s=60),
        )
        assert due is not None and 1.0 < due <= 2.0  # q2's first job; q3's is past the horizon
    assert await scans(eng, "ix_jobs_due") >= before + 4 * len(targets)
    none = await run_transaction(
        eng,
        lambda c: claim_store.next_due_in(
            c, region="local", shards=[0], targets=[("default", "q3")], horizon_s=60
        ),
    )
    assert none is None


async def test_the_reaper_reads_running_leases_and_finished_jobs_through_their_partial_indexes(
    generic_engine,
):
    eng = generic_engine
    lease_before = await scans(eng, "ix_attempts_open")
    finished_before = await scans(eng, "ix_jobs_finished")
    for _ in range(3):
        await run_transaction(
            eng, lambda c: c.execute(reaping.expired_leases_stmt(region="local", skew_margin_s=1.0, limit=10))
        )
        await run_transaction(
            eng, lambda c: reaping.prune_finished(c, region="local", retention_s=60.0, limit=10)
        )
    assert await scans(eng, "ix_attempts_open") >= lease_before + 3
    assert await scans(eng, "ix_jobs_finished") >= finished_before + 3


# ---- migration 0020: every reader of a narrowed index still reaches it ---------------------------

_UID = uuid.UUID(int=77)
_JOBS = """
INSERT INTO jobs (id, namespace, region, shard, queue, payload, state, version, scheduled_at,
  max_attempts, attempt, idempotency_key, lease_ms, request_id, schedule_uid, finished_at)
SELECT gen_random_uuid(), 'default', 'local', 0, 'q', '', s, 1, now() - interval '1 hour', 3, a,
  g::text || s, 30000, CASE WHEN g % 3 = 0 THEN gen_random_uuid() END,
  CASE WHEN g % 2 = 1 THEN :uid END,
  CASE WHEN s IN ('SUCCEEDED', 'CANCELLED', 'DEAD') THEN now() - g * interval '1 s' END
FROM generate_series(1, :n) g,
  LATERAL (SELECT CASE WHEN g % 100 = 0 THEN 'DEAD' WHEN g % 100 = 1 THEN 'SCHEDULED'
    WHEN g % 100 = 2 THEN 'QUEUED' WHEN g % 100 = 3 THEN 'RUNNING' WHEN g % 10 = 4 THEN 'CANCELLED'
    ELSE 'SUCCEEDED' END AS s, CASE WHEN g % 100 = 1 THEN 0 ELSE 1 END AS a) x
"""
_ATTEMPTS = """
INSERT INTO attempts (job_id, attempt, region, shard, token, version, state, dispatcher_id, claimed_at,
  lease_ms, lease_expires_at, finished_at, namespace, queue)
SELECT id, 1, region, shard, 1, 1, CASE state WHEN 'QUEUED' THEN 'QUEUED' WHEN 'RUNNING' THEN 'RUNNING'
  WHEN 'CANCELLED' THEN 'CANCELLED' WHEN 'DEAD' THEN 'FAILED' ELSE 'SUCCEEDED' END, 'd',
  now() - interval '50 min', 30000, now() - interval '40 min', finished_at, namespace, queue
FROM jobs WHERE attempt = 1
"""


async def _filled(eng) -> None:
    """3,000 jobs, most finished (as in a database that has run a while), and their attempts."""
    async with eng.begin() as c:
        await c.execute(text(_JOBS), {"n": 3000, "uid": _UID})
        await c.execute(text(_ATTEMPTS))
    async with eng.connect() as c:
        await c.execute(text("COMMIT"))
        await c.execute(text("ANALYZE jobs"))
        await c.execute(text("ANALYZE attempts"))


async def _reads(eng, index: str, stmt, params=None) -> None:
    """Runs ``stmt`` (with ``params``) four times (generic plans); each run scans ``index``."""
    before = await scans(eng, index)
    for _ in range(4):
        await run_transaction(eng, lambda c: c.execute(stmt, params))
    assert await scans(eng, index) >= before + 4, index


async def test_every_reader_of_a_narrowed_index_still_reads_it(generic_engine):
    from gnomon.common.domain.dead_letters import DeadLetterFilter
    from gnomon.common.storage import dead_letters, namespaces, outbox, planning, queues, schedules

    eng = generic_engine
    await _filled(eng)
    await _reads(
        eng,
        "ix_jobs_pending_dead",
        dead_letters.list_dead_letters_stmt(DeadLetterFilter("default"), False, 10, None),
    )
    await _reads(eng, "ix_jobs_pending_dead", namespaces.pending_jobs_stmt("default", 100))
    await _reads(eng, "ix_jobs_schedule", schedules.future_jobs_stmt(_UID, None))
    await _reads(eng, "ix_jobs_schedule", planning.active_occurrences_stmt([_UID]))
    await _reads(eng, "ix_attempts_open", outbox.pending_stmt("local", [0], 10, 0.0))
    await _reads(eng, "ix_attempts_open", reaping.expired_leases_stmt("local", 1.0, 10))
    await _reads(eng, "ix_attempts_open", reaping.timed_out_stmt("local", 1.0, 10))
    since = {"p_region": "local", "p_namespace": "default", "p_queue": "q", "p_cap": 100}
    since["p_since"] = datetime.now(UTC) - timedelta(hours=2)
    await _reads(eng, "ix_attempts_open", queues.PROBE_STATS, since)  # live probes
    await _reads(eng, "ix_attempts_finished", queues.PROBE_STATS, since)  # finished probes
    await _reads(eng, "uq_jobs_request_id", jobs_store.job_by_request_stmt("default", uuid.uuid4()))
    # and they find what they did before: the active and dead rows, the open attempts
    async with eng.connect() as c:
        assert (await c.execute(namespaces.pending_jobs_stmt("default", 1000))).scalar_one() == 60
        assert len((await c.execute(planning.active_occurrences_stmt([_UID]))).all()) == 60
        assert len((await c.execute(reaping.expired_leases_stmt("local", 1.0, 100))).all()) == 30


# ---- HOT updates ---------------------------------------------------------------------------------


async def _updates(engine) -> tuple[int, int]:
    """``(n_tup_upd, n_tup_hot_upd)`` of ``attempts`` once this backend's counts are flushed."""
    async with engine.connect() as c:
        await c.execute(text("SELECT pg_stat_force_next_flush()"))
    async with engine.connect() as c:
        await c.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = (
            await c.execute(
                text("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'attempts'")
            )
        ).one()
        return int(row[0]), int(row[1])


async def test_the_accept_and_the_heartbeats_of_an_attempt_are_hot_updates(engine):
    """No index holds a column they write (state, lease end, owner, worker, accept time), so each is
    a HOT update: PostgreSQL writes no index entry for it. The result (``finished_at``) is not."""
    from gnomon.common.domain.attempts import AttemptKey, Result
    from gnomon.common.storage import leases, results

    await own_shards(engine, TOKEN)
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, new_job_spec()))
    [got] = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="d"),
    )
    key = AttemptKey(got.job_id, got.attempt, got.version, got.token)
    upd0, hot0 = await _updates(engine)
    assert await run_transaction(engine, lambda c: leases.accept(c, [key], "w1", "alice"))
    for _ in range(3):
        assert await run_transaction(engine, lambda c: leases.heartbeat(c, [key], [("alice", "w1")]))
    upd1, hot1 = await _updates(engine)
    assert (upd1 - upd0, hot1 - hot0) == (4, 4)
    done = await run_transaction(
        engine, lambda c: results.complete(c, [Result(key, True, owner="alice", worker_id="w1")])
    )
    assert done == {key.id: ""}
    upd2, hot2 = await _updates(engine)
    assert (upd2 - upd1, hot2 - hot1) == (1, 0)
