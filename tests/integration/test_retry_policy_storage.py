"""Per-job retry policy against a real PostgreSQL: a failed result schedules the retry at
now() + delay within the policy's jitter bounds (read back from the database), THROTTLED waits
exactly retry_after, PERMANENT / non-retryable / past max_age go DEAD, the reaper uses the policy
for lost leases, and the first claim stamps first_dispatched_at."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select, text, update

from gnomon.api.convert import job_to_proto
from gnomon.common.domain import jobs as domain_jobs
from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.retry import RetryPolicy
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import reaping
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon_test_support import fenced, new_job_spec, own_shards

TOKEN = 5


@pytest.fixture
async def engine(engine):
    """The test database's engine (conftest), shard 0 owned by "A" with fencing token ``TOKEN``."""
    await own_shards(engine, TOKEN)
    return engine


async def new_job(engine, policy=RetryPolicy(), *, queue="q", max_attempts=5, idempotent=False) -> uuid.UUID:
    jid = uuid.uuid4()
    new = new_job_spec(id=jid, queue=queue, max_attempts=max_attempts, idempotent=idempotent, retry=policy)
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, new))
    return jid


async def run_all(engine, queue="q") -> dict[uuid.UUID, AttemptKey]:
    """Claims every due job of the queue and accepts it: job id -> attempt key."""
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", queue)], limit=1000, dispatcher_id="A"),
    )
    keys = {c.job_id: AttemptKey(c.job_id, c.attempt, c.version, c.token) for c in claimed}
    accepted = await run_transaction(engine, lambda c: lease_store.accept(c, list(keys.values()), "w1"))
    assert len(accepted) == len(keys)
    return keys


async def fail(engine, keys, failure_class="TRANSIENT", error="RuntimeError: down", retry_after_s=0.0):
    res = await run_transaction(
        engine,
        lambda c: result_store.complete(
            c,
            [
                Result(
                    key=k,
                    succeeded=False,
                    failure_class=failure_class,
                    error=error,
                    retry_after_s=retry_after_s,
                )
                for k in keys
            ],
        ),
    )
    assert set(res.values()) == {""}


async def retry_delays(engine, ids) -> dict[uuid.UUID, float | None]:
    """scheduled_at - finished_at of the last attempt (both now() of the result's transaction): the
    delay the policy chose, read back from the database; None for a job not SCHEDULED."""
    async with engine.connect() as c:
        rows = (
            await c.execute(
                select(jobs.c.id, jobs.c.state, jobs.c.scheduled_at, attempts.c.finished_at)
                .select_from(
                    jobs.join(
                        attempts, (attempts.c.job_id == jobs.c.id) & (attempts.c.attempt == jobs.c.attempt)
                    )
                )
                .where(jobs.c.id.in_(list(ids)))
            )
        ).all()
    return {r[0]: (r[2] - r[3]).total_seconds() if r[1] == "SCHEDULED" else None for r in rows}


async def job_row(engine, jid):
    async with engine.connect() as c:
        return (await c.execute(select(jobs).where(jobs.c.id == jid))).mappings().one()


async def make_due(engine, ids):
    async with engine.begin() as c:
        await c.execute(update(jobs).where(jobs.c.id.in_(list(ids))).values(scheduled_at=text("now()")))


async def test_failed_results_schedule_retries_within_the_jitter_bounds(engine):
    policy = RetryPolicy(initial_s=10, max_s=100, multiplier=3, jitter=0.5)
    ids = [await new_job(engine, policy) for _ in range(20)]
    keys = await run_all(engine)
    first = {j: (await job_row(engine, j))["first_dispatched_at"] for j in ids}
    assert all(first.values())
    await fail(engine, [keys[j] for j in ids])
    delays = await retry_delays(engine, ids)
    assert all(5.0 <= d <= 10.0 for d in delays.values()), delays  # attempt 1: cap 10 s, jitter 0.5
    assert max(delays.values()) - min(delays.values()) > 0.5  # randomized, not one fixed value
    await make_due(engine, ids)
    keys = await run_all(engine)
    assert {k.attempt for k in keys.values()} == {2}
    await fail(engine, list(keys.values()))
    delays = await retry_delays(engine, ids)
    assert all(15.0 <= d <= 30.0 for d in delays.values()), delays  # attempt 2: cap 30 s
    for j in ids:  # the first dispatch is kept
        assert (await job_row(engine, j))["first_dispatched_at"] == first[j]


async def test_attempt_beyond_the_exponent_limit_saturates_at_max_backoff(engine):
    jid = await new_job(engine, RetryPolicy(initial_s=1, max_s=7, multiplier=10, jitter=0), max_attempts=100)
    async with engine.begin() as c:  # as if 59 attempts had failed already
        await c.execute(update(jobs).where(jobs.c.id == jid).values(attempt=59))
    keys = await run_all(engine)
    assert keys[jid].attempt == 60
    await fail(engine, [keys[jid]])
    assert (await retry_delays(engine, [jid]))[jid] == pytest.approx(7.0, abs=1e-3)


async def test_throttled_waits_exactly_retry_after(engine):
    jid = await new_job(engine, RetryPolicy(initial_s=100, max_s=100, jitter=0))
    keys = await run_all(engine)
    await fail(engine, [keys[jid]], "THROTTLED", "ThrottledError: slow down", retry_after_s=2.0)
    assert (await retry_delays(engine, [jid]))[jid] == pytest.approx(2.0, abs=1e-3)
    assert (await job_row(engine, jid))["failure_class"] == "THROTTLED"


async def test_permanent_and_non_retryable_errors_go_dead_after_one_attempt(engine):
    policy = RetryPolicy(non_retryable_errors=("ValueError", "billing.CardDeclined"))
    perm, typed, dotted, other = [await new_job(engine, policy) for _ in range(4)]
    keys = await run_all(engine)
    await fail(engine, [keys[perm]], "PERMANENT", "PermanentError: bad")
    await fail(engine, [keys[typed]], "TRANSIENT", "ValueError: invalid literal")
    await fail(engine, [keys[dotted]], "THROTTLED", "billing.CardDeclined", retry_after_s=1)
    await fail(engine, [keys[other]], "TRANSIENT", "KeyError: 'x'")
    states = {j: (await job_row(engine, j))["state"] for j in (perm, typed, dotted, other)}
    assert states == {perm: "DEAD", typed: "DEAD", dotted: "DEAD", other: "SCHEDULED"}
    assert (await job_row(engine, typed))["finished_at"] is not None


async def test_no_retry_past_max_age_since_the_first_dispatch(engine):
    policy = RetryPolicy(initial_s=1, max_s=1, jitter=0, max_age_s=60)
    old, young = await new_job(engine, policy), await new_job(engine, policy)
    keys = await run_all(engine)
    async with engine.begin() as c:
        await c.execute(
            update(jobs)
            .where(jobs.c.id == old)
            .values(first_dispatched_at=jobs.c.first_dispatched_at - timedelta(seconds=59.5))
        )
        await c.execute(
            update(jobs)
            .where(jobs.c.id == young)
            .values(first_dispatched_at=jobs.c.first_dispatched_at - timedelta(seconds=30))
        )
    await fail(engine, [keys[old], keys[young]])
    assert (await job_row(engine, old))["state"] == "DEAD"  # the retry would start at ~60.5 s
    assert (await job_row(engine, young))["state"] == "SCHEDULED"


async def test_reaper_retries_lost_leases_with_the_jobs_policy(engine):
    jid = await new_job(engine, RetryPolicy(initial_s=7, max_s=60, jitter=0), idempotent=True)
    cut = await new_job(engine, RetryPolicy(initial_s=7, max_s=60, jitter=0, max_age_s=5), idempotent=True)
    await run_all(engine)
    async with engine.begin() as c:
        await c.execute(
            update(attempts)
            .where(attempts.c.job_id.in_([jid, cut]))
            .values(lease_expires_at=text("now() - interval '10 seconds'"))
        )
    reaped = await run_transaction(
        engine, lambda c: reaping.reap_lost_leases(c, region="local", skew_margin_s=1.0, limit=10)
    )
    assert {r.job_id: r.new_state for r in reaped} == {jid: "SCHEDULED", cut: "DEAD"}  # 7 s > max_age 5 s
    assert (await retry_delays(engine, [jid]))[jid] == pytest.approx(7.0, abs=1e-3)


async def test_stored_policy_reads_back_through_the_api_conversion(engine):
    policy = RetryPolicy(
        initial_s=0.25,
        max_s=20,
        multiplier=1.5,
        jitter=0,
        max_age_s=3600,
        non_retryable_errors=("ValueError",),
    )
    row = await job_row(engine, await new_job(engine, policy))
    assert domain_jobs.policy_of(row) == policy
    p = job_to_proto(dict(row)).retry_policy
    assert (
        p.initial_backoff.ToMilliseconds(),
        p.max_backoff.seconds,
        p.multiplier,
        p.jitter,
        p.max_age.seconds,
        list(p.non_retryable_errors),
    ) == (250, 20, 1.5, 0.0, 3600, ["ValueError"])
    assert p.HasField("jitter")
    default = job_to_proto(dict(await job_row(engine, await new_job(engine)))).retry_policy
    assert (
        default.initial_backoff.seconds,
        default.max_backoff.seconds,
        default.multiplier,
        default.jitter,
        default.HasField("max_age"),
    ) == (1, 300, 2.0, 1.0, False)
