"""Migration 0014's partial indexes are what the hot statements use, also in generic plans.

PostgreSQL reaches a partial index only when it can prove the query implies the index's predicate.
A bind parameter (``state = $1``) proves nothing in a generic plan, which is what a prepared statement
gets after a few executions; so the claim, the due backlog and the reaper's lease scan name their state
inline (``gnomon.common.storage.predicates.state_is``). Here every connection is forced onto generic plans
(``plan_cache_mode = force_generic_plan``, ``prepare_threshold = 0``) and the per-index scan counters
of ``pg_stat_user_indexes`` show which index each statement read.
"""

from __future__ import annotations

import uuid

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
    lease_before = await scans(eng, "ix_attempts_running_lease")
    finished_before = await scans(eng, "ix_jobs_finished")
    for _ in range(3):
        await run_transaction(
            eng, lambda c: c.execute(reaping.expired_leases_stmt(region="local", skew_margin_s=1.0, limit=10))
        )
        await run_transaction(
            eng, lambda c: reaping.prune_finished(c, region="local", retention_s=60.0, limit=10)
        )
    assert await scans(eng, "ix_attempts_running_lease") >= lease_before + 3
    assert await scans(eng, "ix_jobs_finished") >= finished_before + 3
