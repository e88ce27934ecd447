"""The reaper against a real PostgreSQL: lost leases, deadlines, retention; and end to end, a
worker killed -9 mid-job whose job is retried by the reaper and finished by another worker."""

from __future__ import annotations

import os
import signal
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import select, update

from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import reaping
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon_test_support import fenced, new_job_spec, own_shards, running_suite, wait_for

TOKEN = 9


@pytest.fixture
async def engine(engine):
    """The test database's engine (conftest), shard 0 owned by "A" with fencing token ``TOKEN``."""
    await own_shards(engine, TOKEN)
    return engine


async def new_job(
    engine, *, idempotent=False, max_attempts=3, deadline=None, schedule_at=None, namespace="default"
) -> uuid.UUID:
    jid = uuid.uuid4()
    new = new_job_spec(
        id=jid,
        schedule_at=schedule_at,
        deadline=deadline,
        max_attempts=max_attempts,
        idempotent=idempotent,
        namespace=namespace,
    )
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, new))
    return jid


async def start_running(engine, jid) -> AttemptKey:
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=100, dispatcher_id="A"),
    )
    [c1] = [c for c in claimed if c.job_id == jid]
    key = AttemptKey(jid, c1.attempt, c1.version, c1.token)
    assert (jid, c1.attempt) in await run_transaction(engine, lambda c: lease_store.accept(c, [key], "w1"))
    return key


async def age_lease(engine, jid, seconds: float):
    """Moves the lease end into the past (as if the worker stopped heartbeating that long ago)."""
    async with engine.begin() as c:
        await c.execute(
            update(attempts)
            .where(attempts.c.job_id == jid)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=seconds))
        )


async def reap(engine, margin=1.0):
    return await run_transaction(
        engine,
        lambda c: reaping.reap_lost_leases(
            c, region="local", skew_margin_s=margin, limit=100, retry_delay_s=lambda a: 0
        ),
    )


async def job_row(engine, jid):
    async with engine.connect() as c:
        return (await c.execute(select(jobs).where(jobs.c.id == jid))).mappings().one()


async def attempt_states(engine, jid):
    async with engine.connect() as c:
        return [
            tuple(r)
            for r in (
                await c.execute(
                    select(attempts.c.attempt, attempts.c.state)
                    .where(attempts.c.job_id == jid)
                    .order_by(attempts.c.attempt)
                )
            ).all()
        ]


async def test_lost_lease_of_idempotent_job_is_retried_as_a_new_attempt(engine):
    jid = await new_job(engine, idempotent=True)
    await start_running(engine, jid)
    await age_lease(engine, jid, 5)
    assert [(r.job_id, r.attempt, r.new_state) for r in await reap(engine)] == [(jid, 1, "SCHEDULED")]
    j = await job_row(engine, jid)
    assert (j["state"], j["failure_class"], j["version"]) == ("SCHEDULED", "AMBIGUOUS", 4)
    key2 = await start_running(engine, jid)
    assert key2.attempt == 2
    assert await attempt_states(engine, jid) == [(1, "LOST"), (2, "RUNNING")]
    assert await reap(engine) == []  # a live lease is left alone


async def test_lost_lease_of_non_idempotent_job_goes_to_the_dlq(engine):
    jid = await new_job(engine, idempotent=False)
    await start_running(engine, jid)
    await age_lease(engine, jid, 5)
    assert [r.new_state for r in await reap(engine)] == ["DEAD"]
    j = await job_row(engine, jid)
    assert (j["state"], j["failure_class"]) == ("DEAD", "AMBIGUOUS") and "outcome unknown" in j["last_error"]


async def test_exhausted_attempts_go_to_the_dlq_and_cancel_requested_becomes_cancelled(engine):
    jid = await new_job(engine, idempotent=True, max_attempts=1)
    await start_running(engine, jid)
    await age_lease(engine, jid, 5)
    assert [r.new_state for r in await reap(engine)] == ["DEAD"]
    jid2 = await new_job(engine, idempotent=True)
    await start_running(engine, jid2)
    async with engine.begin() as c:
        await c.execute(update(jobs).where(jobs.c.id == jid2).values(cancel_requested_at=datetime.now(UTC)))
    await age_lease(engine, jid2, 5)
    assert [r.new_state for r in await reap(engine)] == ["CANCELLED"]


async def test_skew_margin_keeps_a_just_expired_lease(engine):
    jid = await new_job(engine, idempotent=True)
    await start_running(engine, jid)
    await age_lease(engine, jid, 0.5)
    assert await reap(engine, margin=2.0) == []
    assert [r.new_state for r in await reap(engine, margin=0.0)] == ["SCHEDULED"]


async def test_a_result_after_the_reap_is_refused(engine):
    jid = await new_job(engine, idempotent=True)
    key = await start_running(engine, jid)
    await age_lease(engine, jid, 5)
    await reap(engine)
    res = await run_transaction(
        engine,
        lambda c: result_store.complete(c, [Result(key=key, succeeded=True)], retry_delay_s=lambda r, a: 0),
    )
    assert res == {(jid, 1): "STALE_ATTEMPT"}
    assert (await job_row(engine, jid))["state"] == "SCHEDULED"


async def test_deadline_passed_undispatched_becomes_expired_and_is_never_claimed(engine):
    past = datetime.now(UTC) - timedelta(minutes=5)
    jid = await new_job(engine, schedule_at=past - timedelta(minutes=5), deadline=past)
    live = await new_job(engine, deadline=datetime.now(UTC) + timedelta(hours=1))
    assert await run_transaction(engine, lambda c: reaping.expire_deadlines(c, region="local", limit=10)) == [
        jid
    ]
    j = await job_row(engine, jid)
    assert (j["state"], j["version"]) == ("EXPIRED", 2) and j["finished_at"] is not None
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="A"),
    )
    assert [c.job_id for c in claimed] == [live]


async def test_prune_deletes_only_terminal_jobs_past_retention(engine):
    old = await new_job(engine)
    recent = await new_job(engine)
    pending = await new_job(engine)
    async with engine.begin() as c:
        await c.execute(
            update(jobs)
            .where(jobs.c.id == old)
            .values(state="SUCCEEDED", finished_at=datetime.now(UTC) - timedelta(days=8))
        )
        await c.execute(
            update(jobs)
            .where(jobs.c.id == recent)
            .values(state="SUCCEEDED", finished_at=datetime.now(UTC) - timedelta(days=1))
        )
    n = await run_transaction(
        engine, lambda c: reaping.prune_finished(c, region="local", retention_s=7 * 86400, limit=10)
    )
    assert n == 1
    async with engine.connect() as c:
        left = set((await c.execute(select(jobs.c.id))).scalars().all())
    assert left == {recent, pending}


def test_worker_killed_mid_job_is_retried_by_the_reaper_and_finished_by_another(
    pg_server, migrated_template, tmp_path
):
    from gnomon.sdk import Client

    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        start=False,
        env={"GNOMON_REAPER_INTERVAL_S": "0.2", "GNOMON_REAPER_SKEW_MARGIN_S": "0.5"},
    ) as s:
        url = s.database_url
        record = str(tmp_path / "runs.txt")
        s.start()
        env = {"GNOMON_TEST_RECORD": record, "PYTHONPATH": tests_dir}
        first = s.start_worker(["reap"], "gnomon_test_handlers:hang_on_first_attempt", env=env)
        with Client(api=s.api_address) as c:
            job = c.create_job("reap", b"", lease_duration=2, idempotent=True)
            wait_for(lambda: c.get_job(job.name).state == "RUNNING", 30, "the job to start")
            first.popen.send_signal(signal.SIGKILL)
            first.popen.wait(10)
            s.start_worker(["reap"], "gnomon_test_handlers:hang_on_first_attempt", env=env)
            j = wait_for(
                lambda: (j := c.get_job(job.name)).state == "SUCCEEDED" and j, 30, "the retry to succeed"
            )
        assert j.attempt == 2
        job_id = job.name.rsplit("/", 1)[1]
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            hist = conn.execute(
                "SELECT attempt, state, accepted_at IS NOT NULL FROM attempts WHERE job_id = %s "
                "ORDER BY attempt",
                (job_id,),
            ).fetchall()
        assert hist == [(1, "LOST", True), (2, "SUCCEEDED", True)]  # exactly one accepted result


async def test_an_attempt_past_its_start_to_close_is_timed_out_like_a_lost_lease(engine):
    jid = await new_job(engine, idempotent=True)
    async with engine.begin() as c:
        await c.execute(update(jobs).where(jobs.c.id == jid).values(start_to_close_ms=1000))
    await start_running(engine, jid)
    assert await reap(engine, margin=0.0) == []  # lease fine, bound not reached
    async with engine.begin() as c:  # started 3 s ago, lease still live
        await c.execute(
            update(attempts)
            .where(attempts.c.job_id == jid)
            .values(accepted_at=datetime.now(UTC) - timedelta(seconds=3))
        )
    assert [r.new_state for r in await reap(engine, margin=0.5)] == ["SCHEDULED"]
    j = await job_row(engine, jid)
    assert j["failure_class"] == "AMBIGUOUS" and j["last_error"].startswith("start_to_close exceeded")
    assert await attempt_states(engine, jid) == [(1, "LOST")]


def test_handler_is_cancelled_at_start_to_close(pg_server, migrated_template, tmp_path):
    from gnomon.sdk import Client

    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with running_suite(pg_server, migrated_template, tmp_path) as s:
        s.start_worker(["stc"], "gnomon_test_handlers:wait_for_cancel", env={"PYTHONPATH": tests_dir})
        with Client(api=s.api_address) as c:
            job = c.create_job("stc", b"", start_to_close=1, lease_duration=30, max_attempts=1)
            j = wait_for(lambda: (j := c.get_job(job.name)).terminal and j, 30, "the handler to be stopped")
        # the SDK cancelled the handler after ~1 s (not after the 30 s lease) and reported the failure
        assert (j.state, j.attempt) == ("DEAD", 1)
        ran = (j.finish_time - j.start_time).total_seconds()
        assert 1.0 <= ran < 10, ran


async def test_prune_follows_each_namespace_retention(engine):
    from gnomon.common.quotas import Quotas
    from gnomon.common.storage import namespaces as ns_store
    from gnomon.common.storage.namespaces import NamespaceRecord

    async with engine.begin() as c:
        await ns_store.create_namespace(c, NamespaceRecord("short", "", 3600, Quotas()))  # 1 h
        await ns_store.create_namespace(c, NamespaceRecord("long", "", 30 * 86400, Quotas()))  # 30 d
    ids = {}
    for ns, days in [("short", 1), ("long", 8), ("long", 31), ("default", 8)]:
        jid = await new_job(engine, namespace=ns)
        async with engine.begin() as c:
            await c.execute(
                update(jobs)
                .where(jobs.c.id == jid)
                .values(state="SUCCEEDED", finished_at=datetime.now(UTC) - timedelta(days=days))
            )
        ids[(ns, days)] = jid
    n = await run_transaction(
        engine, lambda c: reaping.prune_finished(c, region="local", retention_s=7 * 86400, limit=10)
    )
    assert n == 3
    async with engine.connect() as c:
        left = set((await c.execute(select(jobs.c.id))).scalars().all())
    # the short namespace's 1-day-old job is past its 1 h; the long one keeps its 8-day-old job;
    # the default namespace (row with retention 0) follows the cluster's 7 days
    assert left == {ids[("long", 8)]}
